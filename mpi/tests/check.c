/*
 * check.c — qkv-mpi-check, run under `mpirun -np P`: qkv_cp_attention and
 * qkv_cp_decode against single-process qkv_attn on the whole arrays
 * (the computation `qkv attend` does), on every rank, for causal, window,
 * sinks + window, no mask, exclusions, GQA and MQA, lengths that do not
 * divide by P, Lq != Lk, bf16 K/V, both layouts; plus which blocks travel,
 * and the collective refusals (more ranks than rows, ranks that disagree,
 * shards that do not tile the cache). Rank 0 prints one line per case and
 * exits non-zero if any failed.
 *
 * Tolerance: |got - want| <= 1e-5 * (|want| + 1). O is a convex combination
 * of V entries of unit scale, so this is 1e-5 relative to the data; the
 * merges add a few float roundings per block (measured max ~1e-6). LSE -inf
 * (a row that sees nothing) must be -inf exactly, and its O exactly 0.
 */
#include "qkv_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size, g_cases, g_failed;

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1.7f;
}

/* Max violation of the tolerance over n values (0 when within); -inf must meet -inf. */
static double excess(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) || isinf(got[i])) {
            if (got[i] != want[i]) worst = INFINITY;
            continue;
        }
        const double e = fabs((double)got[i] - want[i]) / (fabs((double)want[i]) + 1.0);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Reports a case on rank 0: pass iff every rank's bad == 0. */
static void report(const char *name, int bad, double err) {
    int any;
    double worst;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    g_cases++;
    if (any) g_failed++;
    if (g_rank == 0) printf("%s np=%d %s (max rel err %.2g)\n", any ? "FAIL" : "ok  ", g_size, name, worst);
}

typedef struct {
    const char *name;
    int hq, hkv, lq, lk, d;
    qkv_mask_kind kind;
    int window, sinks;
    const int *exclude;
    int n_exclude;
    qkv_cp_layout layout;
    qkv_dtype dtype;
} cp_case;

static void run_case(const cp_case *c) {
    if (c->layout == QKV_CP_ZIGZAG && (c->lq < 2 * g_size || c->lk < 2 * g_size)) return;
    if (c->lq < g_size || c->lk < g_size) return;
    const size_t nq = (size_t)c->hq * c->lq * c->d, nkv = (size_t)c->hkv * c->lk * c->d, es = qkv_dtype_size(c->dtype);
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o_ref = malloc(nq * 4),
          *lse_ref = malloc(nq / c->d * 4);
    fill(q, nq, 1), fill(k, nkv, 2), fill(v, nkv, 3);
    void *kd = malloc(nkv * es), *vd = malloc(nkv * es);
    qkv_convert_from_f32(kd, c->dtype, k, nkv);
    qkv_convert_from_f32(vd, c->dtype, v, nkv);
    qkv_attn_desc d = {.n_q_head = c->hq, .n_kv_head = c->hkv, .q_len = c->lq, .kv_len = c->lk, .head_dim = c->d,
                       .mask = {.kind = c->kind, .window = c->window, .sinks = c->sinks, .exclude = c->exclude,
                                .n_exclude = c->n_exclude},
                       .kv_dtype = c->dtype, .n_threads = 1};
    qkv_error err = {0};
    int bad = qkv_attn(o_ref, lse_ref, q, kd, vd, &d, QKV_KERNEL_AUTO, &err) != QKV_OK;
    qkv_cp_rows rq, rk;
    qkv_cp_rows_of(&rq, c->lq, g_size, g_rank, c->layout, NULL);
    qkv_cp_rows_of(&rk, c->lk, g_size, g_rank, c->layout, NULL);
    float *ql = malloc((size_t)c->hq * rq.total * c->d * 4), *kl = malloc((size_t)c->hkv * rk.total * c->d * 4),
          *vl = malloc((size_t)c->hkv * rk.total * c->d * 4), *ol = malloc((size_t)c->hq * rq.total * c->d * 4),
          *ll = malloc((size_t)c->hq * rq.total * 4), *ow = malloc((size_t)c->hq * rq.total * c->d * 4),
          *lw = malloc((size_t)c->hq * rq.total * 4);
    qkv_cp_rows_take(ql, q, c->hq, c->lq, c->d, &rq);
    qkv_cp_rows_take(kl, k, c->hkv, c->lk, c->d, &rk);
    qkv_cp_rows_take(vl, v, c->hkv, c->lk, c->d, &rk);
    qkv_cp_rows_take(ow, o_ref, c->hq, c->lq, c->d, &rq);
    qkv_cp_rows_take(lw, lse_ref, c->hq, c->lq, 1, &rq);
    void *kld = malloc((size_t)c->hkv * rk.total * c->d * es), *vld = malloc((size_t)c->hkv * rk.total * c->d * es);
    qkv_convert_from_f32(kld, c->dtype, kl, (size_t)c->hkv * rk.total * c->d);
    qkv_convert_from_f32(vld, c->dtype, vl, (size_t)c->hkv * rk.total * c->d);
    qkv_cp_stats st = {0};
    qkv_cp_params p = {.layout = c->layout, .timeout_s = 30, .stats = &st};
    if (qkv_cp_attention(ol, ll, ql, kld, vld, &d, MPI_COMM_WORLD, &p, &err)) {
        fprintf(stderr, "rank %d: %s: %s\n", g_rank, c->name, err.msg);
        bad = 1;
    }
    double e = bad ? INFINITY : fmax(excess(ol, ow, (size_t)c->hq * rq.total * c->d), excess(ll, lw, (size_t)c->hq * rq.total));
    if (!bad) {
        /* the rows of -inf LSE must have O exactly 0 (the tolerance above would let 1e-5 through) */
        for (size_t i = 0; i < (size_t)c->hq * rq.total; i++)
            if (isinf(lw[i]))
                for (int x = 0; x < c->d; x++) bad |= ol[i * c->d + x] != 0;
    }
    bad |= !(e <= 1e-5);
    report(c->name, bad, e);
    free(q); free(k); free(v); free(o_ref); free(lse_ref); free(kd); free(vd);
    free(ql); free(kl); free(vl); free(ol); free(ll); free(ow); free(lw); free(kld); free(vld);
}

/* Decode: Lq rows against the cache cut into uneven shards (the last rank
 * empty when P > 1), each shard with a padded head stride like a KV cache's. */
static void run_decode(const char *name, int hq, int hkv, int lq, int lk, int d, qkv_mask_kind kind, int window,
                       int sinks) {
    const size_t nq = (size_t)hq * lq * d, nkv = (size_t)hkv * lk * d;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o_ref = malloc(nq * 4),
          *lse_ref = malloc((size_t)hq * lq * 4), *o = malloc(nq * 4), *lse = malloc((size_t)hq * lq * 4);
    fill(q, nq, 11), fill(k, nkv, 12), fill(v, nkv, 13);
    qkv_attn_desc dd = {.n_q_head = hq, .n_kv_head = hkv, .q_len = lq, .kv_len = lk, .head_dim = d,
                        .mask = {.kind = kind, .window = window, .sinks = sinks}, .n_threads = 1};
    qkv_error err = {0};
    int bad = qkv_attn(o_ref, lse_ref, q, k, v, &dd, QKV_KERNEL_AUTO, &err) != QKV_OK;
    /* shard x holds ~ 2x / (P (P - 1)) of the keys: uneven, the last one empty */
    const int parts = g_size > 1 ? g_size - 1 : 1;
    int start = 0, len = lk;
    if (g_size > 1) {
        int64_t w = 0, total = (int64_t)parts * (parts + 1) / 2;
        for (int x = 0; x < g_rank && x < parts; x++) w += x + 1;
        start = (int)(w * lk / total);
        len = g_rank < parts ? (int)((w + g_rank + 1) * lk / total) - start : 0;
        if (g_rank == parts) start = lk;
    }
    const int cap = len + 3;
    float *ks = calloc((size_t)hkv * cap * d, 4), *vs = calloc((size_t)hkv * cap * d, 4);
    for (int h = 0; h < hkv; h++) {
        memcpy(ks + (size_t)h * cap * d, k + ((size_t)h * lk + start) * d, (size_t)len * d * 4);
        memcpy(vs + (size_t)h * cap * d, v + ((size_t)h * lk + start) * d, (size_t)len * d * 4);
    }
    qkv_cp_kv_shard sh = {.k = ks, .v = vs, .start = start, .len = len};
    dd.kv_head_stride = (int64_t)cap * d;
    qkv_cp_params p = {.timeout_s = 30};
    if (qkv_cp_decode(o, lse, q, &sh, &dd, MPI_COMM_WORLD, &p, &err)) {
        fprintf(stderr, "rank %d: %s: %s\n", g_rank, name, err.msg);
        bad = 1;
    }
    const double e = bad ? INFINITY : fmax(excess(o, o_ref, nq), excess(lse, lse_ref, (size_t)hq * lq));
    report(name, bad || !(e <= 1e-5), e);
    free(q); free(k); free(v); free(o_ref); free(lse_ref); free(o); free(lse); free(ks); free(vs);
}

/* Blocks sent around the ring, summed over ranks, against what the mask needs. */
static void run_traffic(const char *name, qkv_mask_kind kind, int window, int sinks, int n, int want_sent) {
    const int hq = 2, d = 16, rows = n / g_size + 1;
    float *buf = calloc((size_t)hq * rows * d, 4), *o = malloc((size_t)hq * rows * d * 4);
    qkv_attn_desc dd = {.n_q_head = hq, .n_kv_head = hq, .q_len = n, .kv_len = n, .head_dim = d,
                        .mask = {.kind = kind, .window = window, .sinks = sinks}, .n_threads = 1};
    qkv_cp_stats st = {0};
    qkv_cp_params p = {.timeout_s = 30, .stats = &st};
    qkv_error err = {0};
    int bad = qkv_cp_attention(o, NULL, buf, buf, buf, &dd, MPI_COMM_WORLD, &p, &err) != QKV_OK, sent = 0;
    MPI_Allreduce(&st.blocks_sent, &sent, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sent != want_sent && g_rank == 0) fprintf(stderr, "%s: %d blocks sent, want %d\n", name, sent, want_sent);
    report(name, bad || sent != want_sent, 0);
    free(buf); free(o);
}

/* A call every rank refuses with the same status; rank 0's message holds needle. */
static void run_refusal(const char *name, int lq_rank1, int n, const char *needle) {
    float x[2 * 8 * 16] = {0}, o[2 * 8 * 16];
    qkv_attn_desc dd = {.n_q_head = 2, .n_kv_head = 1, .q_len = n, .kv_len = n, .head_dim = 16,
                        .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 1};
    if (g_rank == 1) dd.q_len = dd.kv_len = lq_rank1;
    qkv_error err = {0};
    qkv_cp_params p = {.timeout_s = 30};
    const qkv_status s = qkv_cp_attention(o, NULL, x, x, x, &dd, MPI_COMM_WORLD, &p, &err);
    int bad = s != QKV_ERR_INVALID || (g_rank == 0 && !strstr(err.msg, needle));
    if (bad) fprintf(stderr, "rank %d: %s: status %d, '%s' (want '%s')\n", g_rank, name, (int)s, err.msg, needle);
    report(name, bad, 0);
}

static void run_bad_tiling(void) {
    float q[2 * 16] = {0}, kv[2 * 16] = {0}, o[2 * 16];
    qkv_attn_desc dd = {.n_q_head = 2, .n_kv_head = 1, .q_len = 1, .kv_len = 2 * g_size + 1, .head_dim = 16, .n_threads = 1};
    qkv_cp_kv_shard sh = {.k = kv, .v = kv, .start = 2 * g_rank, .len = 2}; /* one key short */
    qkv_error err = {0};
    qkv_cp_params p = {.timeout_s = 30};
    const qkv_status s = qkv_cp_decode(o, NULL, q, &sh, &dd, MPI_COMM_WORLD, &p, &err);
    int bad = s != QKV_ERR_INVALID || !strstr(err.msg, "shards hold");
    if (bad) fprintf(stderr, "rank %d: decode tiling: status %d, '%s'\n", g_rank, (int)s, err.msg);
    report("decode shards that do not tile the cache", bad, 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    static const int excl[] = {0, 5, 6, 33, 70, 71};
    static const int excl_first[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const cp_case cases[] = {
        {"causal MHA 37", 2, 2, 37, 37, 64, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal GQA4 129", 8, 2, 129, 129, 16, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal MQA 200 zigzag", 8, 1, 200, 200, 16, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_ZIGZAG, QKV_DTYPE_F32},
        {"causal GQA 101 zigzag d128", 4, 2, 101, 101, 128, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_ZIGZAG, QKV_DTYPE_F32},
        {"no mask GQA 30x53", 4, 2, 30, 53, 32, QKV_MASK_NONE, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal Lq<Lk 20x53", 4, 1, 20, 53, 72, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal Lq>Lk 10x6 (rows that see nothing)", 2, 2, 10, 6, 16, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"window 7 MHA 45", 2, 2, 45, 45, 80, QKV_MASK_WINDOW, 7, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"window 1 MHA 9", 2, 2, 9, 9, 16, QKV_MASK_WINDOW, 1, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"window 50 GQA 97 zigzag", 4, 2, 97, 97, 16, QKV_MASK_WINDOW, 50, 0, NULL, 0, QKV_CP_ZIGZAG, QKV_DTYPE_F32},
        {"window 13 GQA 33x70", 4, 1, 33, 70, 16, QKV_MASK_WINDOW, 13, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"sinks 4 + window 9 GQA2 70", 4, 2, 70, 70, 80, QKV_MASK_SINK_WINDOW, 9, 4, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"sinks 3 + window 1 MQA 150 zigzag", 4, 1, 150, 150, 64, QKV_MASK_SINK_WINDOW, 1, 3, NULL, 0, QKV_CP_ZIGZAG, QKV_DTYPE_F32},
        {"sinks 40 + window 5 MHA 61", 2, 2, 61, 61, 16, QKV_MASK_SINK_WINDOW, 5, 40, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal + exclusions GQA 77", 4, 2, 77, 77, 16, QKV_MASK_CAUSAL, 0, 0, excl, 6, QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal, first 13 keys excluded (rank 0 sees no key)", 2, 1, 52, 52, 16, QKV_MASK_CAUSAL, 0, 0, excl_first, 13,
         QKV_CP_CONTIGUOUS, QKV_DTYPE_F32},
        {"causal bf16 K/V GQA 83", 4, 2, 83, 83, 64, QKV_MASK_CAUSAL, 0, 0, NULL, 0, QKV_CP_CONTIGUOUS, QKV_DTYPE_BF16},
        {"sinks + window f16 K/V 66 zigzag", 4, 2, 66, 66, 32, QKV_MASK_SINK_WINDOW, 6, 2, NULL, 0, QKV_CP_ZIGZAG, QKV_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    run_decode("decode Lq=1 MQA 777 causal", 4, 1, 1, 777, 64, QKV_MASK_CAUSAL, 0, 0);
    run_decode("decode Lq=3 GQA4 67 causal", 8, 2, 3, 67, 128, QKV_MASK_CAUSAL, 0, 0);
    run_decode("decode Lq=1 sinks 4 + window 100, 500", 4, 2, 1, 500, 32, QKV_MASK_SINK_WINDOW, 100, 4);
    run_decode("decode Lq=2 window 30, 300", 4, 4, 2, 300, 16, QKV_MASK_WINDOW, 30, 0);
    const int P = g_size, n = 16 * P + 3;
    run_traffic("causal: block b travels to rank P-1 only", QKV_MASK_CAUSAL, 0, 0, n, P * (P - 1) / 2);
    run_traffic("window shorter than a block: one hop", QKV_MASK_WINDOW, 8, 0, n, P - 1);
    run_traffic("sinks + window: the sinks' block goes round, the rest one hop", QKV_MASK_SINK_WINDOW, 8, 2, n,
                P > 1 ? (P - 1) + (P - 2) : 0);
    run_traffic("no mask: every block round the ring", QKV_MASK_NONE, 0, 0, n, P * (P - 1));
    if (P > 1) {
        run_refusal("more ranks than rows", P - 1, P - 1, "exceed");
        run_refusal("ranks that disagree on the shape", 8 * P + 1, 8 * P, "disagree on q_len");
    }
    run_bad_tiling();
    if (g_rank == 0) printf("qkv-mpi-check: np=%d, %d cases, %d failed\n", g_size, g_cases, g_failed);
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
