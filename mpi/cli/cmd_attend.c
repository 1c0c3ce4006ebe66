/*
 * cmd_attend.c — `mpirun -np N qkv-mpi attend`: `qkv attend` over the ring.
 * Rank 0 reads q, k, v (.npy float32, as qkv attend reads them), sends each
 * rank its rows (qkv_cp_rows_of), every rank runs qkv_cp_attention, rank 0
 * gathers O and LSE and writes them (whole or not at all). A decode-shaped
 * call (Lq <= QKV_DECODE_MAX_Q) goes to qkv_cp_decode instead: every rank
 * gets all of q and a contiguous shard of the keys (none when the ranks
 * outnumber them), and every rank ends with the whole result, so rank 0
 * gathers nothing. The flags are qkv attend's where they apply (no RoPE, no
 * kernel choice: each rank runs libqkv's plan on AUTO), plus --layout and
 * --timeout.
 * Bad input gets one "qkv: " line from rank 0 and exit status 2 everywhere.
 */
#include "mpi_cli.h"
#include "flag_rows.h"
#include "outputs.h"
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *q, *k, *v, *out, *lse;
    int causal, window, sinks, have_sinks, threads, kv_dtype, layout;
    qkv_mask_kind mask;
    cli_ints exclude;
    float scale, softcap;
    double timeout;
} mpi_attend_args;

static int parse_args(mpi_attend_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->timeout = 60;
    cli_flag flags[] = {
        CLI_FLAGS_ATTEND_ARRAYS(a),
        CLI_FLAGS_ATTEND_MASK(a),
        CLI_FLAG_KV_DTYPE(&a->kv_dtype, "K and V are stored and sent so (default f32)"),
        MPI_FLAG_THREADS(&a->threads),
        MPI_FLAG_LAYOUT(&a->layout), /* not read by a decode-shaped call */
        MPI_FLAG_TIMEOUT(&a->timeout),
        {0},
    };
    const cli_command cmd = {.program = "qkv-mpi", .name = "attend", .usage = "--q q.npy --k k.npy --v v.npy --out o.npy [flags]",
                             .about = "run under mpirun -np N; q: [Hq, Lq, D], k, v: [Hkv, Lk, D] float32 .npy, "
                                      "the sequence's rows split across the N ranks",
                             .flags = flags};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc) return rc;
    a->have_sinks = cli_given(&cmd, "--sinks");
    if (!a->q || !a->k || !a->v || !a->out) return cli_fail("attend: --q, --k, --v and --out are required");
    if (a->have_sinks && !a->window) return cli_fail("--sinks needs --window");
    a->mask = a->window ? (a->have_sinks ? QKV_MASK_SINK_WINDOW : QKV_MASK_WINDOW)
                        : (a->causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE);
    if (!a->threads) a->threads = g_job.threads_default;
    return 0;
}

enum { H_HQ, H_HKV, H_LQ, H_LK, H_D, H_N };

/* Few query rows: the sharded decode, not the ring. */
static int decode_shaped(int lq) { return lq <= QKV_DECODE_MAX_Q; }

/* The rows of q and of k, v that rank x holds: the layout's for the ring; for
 * a decode-shaped call every query row and a contiguous run of keys, empty
 * on the ranks past the last key when the ranks outnumber them. */
static void rows_of(qkv_cp_rows *rq, qkv_cp_rows *rk, const int *hdr, int x, const mpi_attend_args *a) {
    const int P = g_job.size, lq = hdr[H_LQ], lk = hdr[H_LK];
    if (!decode_shaped(lq)) {
        qkv_cp_rows_of(rq, lq, P, x, (qkv_cp_layout)a->layout, NULL);
        qkv_cp_rows_of(rk, lk, P, x, (qkv_cp_layout)a->layout, NULL);
        return;
    }
    *rq = (qkv_cp_rows){.n_seg = 1, .len = {lq}, .total = lq};
    if (lk >= P) qkv_cp_rows_of(rk, lk, P, x, QKV_CP_CONTIGUOUS, NULL);
    else *rk = (qkv_cp_rows){.n_seg = 1, .start = {x < lk ? x : lk}, .len = {x < lk}, .total = x < lk};
}

/* Rank 0: the arrays, checked as qkv attend checks them, and for the layout. */
static int load_inputs(qkv_npy *q, qkv_npy *k, qkv_npy *v, int *hdr, const mpi_attend_args *a) {
    int rc = cli_load_3d(q, a->q);
    if (!rc) rc = cli_load_3d(k, a->k);
    if (!rc) rc = cli_load_3d(v, a->v);
    if (rc) return rc;
    const int64_t hq = q->shape[0], lq = q->shape[1], d = q->shape[2], hkv = k->shape[0], lk = k->shape[1];
    if (k->shape[2] != d) return cli_fail("%s: head_dim %lld differs from q's %lld", a->k, (long long)k->shape[2], (long long)d);
    if (memcmp(v->shape, k->shape, 3 * sizeof k->shape[0])) return cli_fail("%s: shape differs from k's", a->v);
    if (hq % hkv) return cli_fail("%s: %lld query heads is not a multiple of %lld KV heads (%s)", a->q, (long long)hq, (long long)hkv, a->k);
    if (d < QKV_HEAD_DIM_MIN || d > QKV_HEAD_DIM_MAX)
        return cli_fail("%s: head_dim %lld outside [%d, %d]", a->q, (long long)d, QKV_HEAD_DIM_MIN, QKV_HEAD_DIM_MAX);
    for (int e = 0; e < a->exclude.n; e++)
        if (a->exclude.v[e] >= lk) return cli_fail("--exclude: key %d is outside [0, %lld)", a->exclude.v[e], (long long)lk);
    qkv_cp_rows rows;
    qkv_error err = {0};
    if (!decode_shaped((int)lq) && (qkv_cp_rows_of(&rows, (int)lq, g_job.size, 0, (qkv_cp_layout)a->layout, &err) ||
                                    qkv_cp_rows_of(&rows, (int)lk, g_job.size, 0, (qkv_cp_layout)a->layout, &err)))
        return cli_fail("%s (%s: Lq %lld, Lk %lld)", err.msg, a->q, (long long)lq, (long long)lk);
    /* the largest rank's rows must fit one MPI message (int count); a decode sends all of q */
    if ((hq > hkv ? hq : hkv) * d * (lq > lk ? lq : lk) / g_job.size + hq * d * 2 > INT_MAX ||
        (decode_shaped((int)lq) && hq * d * lq > INT_MAX))
        return cli_fail("%s: a rank's rows exceed one MPI message; use more ranks", a->q);
    hdr[H_HQ] = (int)hq, hdr[H_HKV] = (int)hkv, hdr[H_LQ] = (int)lq, hdr[H_LK] = (int)lk, hdr[H_D] = (int)d;
    return 0;
}

/* Rank 0 sends every other rank its rows of q, k, v; they receive into ql, kl, vl. */
static int scatter(float *ql, float *kl, float *vl, const qkv_npy *q, const qkv_npy *k, const qkv_npy *v, const int *hdr,
                   const mpi_attend_args *a) {
    const int P = g_job.size, hq = hdr[H_HQ], hkv = hdr[H_HKV], d = hdr[H_D];
    qkv_cp_rows rq, rk;
    MPI_Request *req = malloc((size_t)3 * P * sizeof *req);
    float **bufs = calloc((size_t)3 * P, sizeof *bufs);
    if (!req || !bufs) return cli_fail("attend: out of memory");
    for (int i = 0; i < 3 * P; i++) req[i] = MPI_REQUEST_NULL;
    int rc = 0;
    for (int x = 0; x < P && !rc; x++) {
        if (g_job.rank != 0 && x != g_job.rank) continue;
        rows_of(&rq, &rk, hdr, x, a);
        const int nq = hq * rq.total * d, nk = hkv * rk.total * d;
        if (g_job.rank == 0) {
            /* + 1: a rank may hold no keys */
            float *bq = x ? bufs[3 * x] = malloc((size_t)nq * 4) : ql, *bk = x ? bufs[3 * x + 1] = malloc(((size_t)nk + 1) * 4) : kl,
                  *bv = x ? bufs[3 * x + 2] = malloc(((size_t)nk + 1) * 4) : vl;
            if (!bq || !bk || !bv) { rc = cli_fail("attend: out of memory"); break; }
            qkv_cp_rows_take(bq, q->data, hq, hdr[H_LQ], d, &rq);
            qkv_cp_rows_take(bk, k->data, hkv, hdr[H_LK], d, &rk);
            qkv_cp_rows_take(bv, v->data, hkv, hdr[H_LK], d, &rk);
            if (x) {
                MPI_Isend(bq, nq, MPI_FLOAT, x, 1, g_job.comm, &req[3 * x]);
                MPI_Isend(bk, nk, MPI_FLOAT, x, 2, g_job.comm, &req[3 * x + 1]);
                MPI_Isend(bv, nk, MPI_FLOAT, x, 3, g_job.comm, &req[3 * x + 2]);
            }
        } else {
            MPI_Irecv(ql, nq, MPI_FLOAT, 0, 1, g_job.comm, &req[0]);
            MPI_Irecv(kl, nk, MPI_FLOAT, 0, 2, g_job.comm, &req[1]);
            MPI_Irecv(vl, nk, MPI_FLOAT, 0, 3, g_job.comm, &req[2]);
        }
    }
    qkv_error err = {0};
    if (!rc && qkv_cp_wait(req, 3 * P, a->timeout, g_job.comm, g_job.rank ? "its rows from rank 0" : "the ranks to take their rows", &err))
        rc = mpi_cli_fail(&err);
    for (int i = 0; i < 3 * P; i++) free(bufs[i]);
    free(bufs);
    free(req);
    return rc;
}

/* Every rank sends rank 0 its O and LSE rows; rank 0 puts them in o, lse (whole arrays). */
static int gather(float *o, float *lse, const float *ol, const float *ll, const int *hdr, const mpi_attend_args *a) {
    const int P = g_job.size, hq = hdr[H_HQ], d = hdr[H_D];
    MPI_Request *req = malloc((size_t)2 * P * sizeof *req);
    float **bufs = calloc((size_t)2 * P, sizeof *bufs);
    if (!req || !bufs) return cli_fail("attend: out of memory");
    for (int i = 0; i < 2 * P; i++) req[i] = MPI_REQUEST_NULL;
    int rc = 0;
    qkv_cp_rows r;
    for (int x = 0; x < P && !rc; x++) {
        if (g_job.rank != 0 && x != g_job.rank) continue;
        qkv_cp_rows_of(&r, hdr[H_LQ], P, x, (qkv_cp_layout)a->layout, NULL);
        const int n = hq * r.total;
        if (g_job.rank != 0) {
            MPI_Isend(ol, n * d, MPI_FLOAT, 0, 4, g_job.comm, &req[0]);
            MPI_Isend(ll, n, MPI_FLOAT, 0, 5, g_job.comm, &req[1]);
        } else if (x) {
            bufs[2 * x] = malloc((size_t)n * d * 4), bufs[2 * x + 1] = malloc((size_t)n * 4);
            if (!bufs[2 * x] || !bufs[2 * x + 1]) { rc = cli_fail("attend: out of memory"); break; }
            MPI_Irecv(bufs[2 * x], n * d, MPI_FLOAT, x, 4, g_job.comm, &req[2 * x]);
            MPI_Irecv(bufs[2 * x + 1], n, MPI_FLOAT, x, 5, g_job.comm, &req[2 * x + 1]);
        }
    }
    qkv_error err = {0};
    if (!rc && qkv_cp_wait(req, 2 * P, a->timeout, g_job.comm, g_job.rank ? "rank 0 to take the output" : "the ranks' output rows", &err))
        rc = mpi_cli_fail(&err);
    for (int x = 0; !rc && g_job.rank == 0 && x < P; x++) {
        qkv_cp_rows_of(&r, hdr[H_LQ], P, x, (qkv_cp_layout)a->layout, NULL);
        qkv_cp_rows_put(o, x ? bufs[2 * x] : ol, hq, hdr[H_LQ], d, &r);
        qkv_cp_rows_put(lse, x ? bufs[2 * x + 1] : ll, hq, hdr[H_LQ], 1, &r);
    }
    for (int i = 0; i < 2 * P; i++) free(bufs[i]);
    free(bufs);
    free(req);
    return rc;
}

static int attend(const mpi_attend_args *a) {
    qkv_npy q = {0}, k = {0}, v = {0};
    int hdr[H_N] = {0}, rc = 0;
    /* rank 0 writes the outputs: each to its own temporary, renamed when all
     * are written (cli/outputs.c), declared before any work */
    const char *out_tmp = NULL, *lse_tmp = NULL;
    if (g_job.rank == 0 && (!(out_tmp = cli_output_add(a->out)) || (a->lse && !(lse_tmp = cli_output_add(a->lse)))))
        rc = CLI_EXIT_BAD_INPUT;
    if (g_job.rank == 0 && !rc) rc = load_inputs(&q, &k, &v, hdr, a);
    if ((rc = mpi_cli_share(rc, hdr, H_N, a->timeout))) goto done_inputs;
    const int hq = hdr[H_HQ], hkv = hdr[H_HKV], d = hdr[H_D], decode = decode_shaped(hdr[H_LQ]);
    const qkv_dtype dt = (qkv_dtype)a->kv_dtype;
    qkv_cp_rows rq, rk;
    rows_of(&rq, &rk, hdr, g_job.rank, a);
    const size_t nq = (size_t)hq * rq.total * d, nk = (size_t)hkv * rk.total * d;
    /* + 1: a rank may hold no keys */
    float *ql = malloc(nq * 4), *kl = malloc((nk + 1) * 4), *vl = malloc((nk + 1) * 4), *ol = malloc(nq * 4),
          *ll = malloc((size_t)hq * rq.total * 4);
    void *kd = malloc((nk + 1) * qkv_dtype_size(dt)), *vd = malloc((nk + 1) * qkv_dtype_size(dt));
    float *o = NULL, *lse = NULL;
    /* out of memory on one rank: it says so (its own line) and the others time out */
    if (!ql || !kl || !vl || !ol || !ll || !kd || !vd) { rc = cli_fail("attend: rank %d: out of memory", g_job.rank); goto done; }
    if ((rc = scatter(ql, kl, vl, &q, &k, &v, hdr, a))) goto done;
    qkv_convert_from_f32(kd, dt, kl, nk);
    qkv_convert_from_f32(vd, dt, vl, nk);
    mpi_cli_fault_point();
    const qkv_attn_desc desc = {.n_q_head = hq, .n_kv_head = hkv, .q_len = hdr[H_LQ], .kv_len = hdr[H_LK], .head_dim = d,
                                .scale = a->scale, .softcap = a->softcap,
                                .mask = {.kind = a->mask, .window = a->window, .sinks = a->sinks, .exclude = a->exclude.v,
                                         .n_exclude = a->exclude.n},
                                .kv_dtype = dt, .n_threads = a->threads};
    const qkv_cp_params params = {.layout = (qkv_cp_layout)a->layout, .timeout_s = a->timeout};
    qkv_error err = {0};
    const qkv_cp_kv_shard shard = {.k = kd, .v = vd, .start = rk.start[0], .len = rk.total};
    if (decode ? qkv_cp_decode(ol, ll, ql, &shard, &desc, g_job.comm, &params, &err)
               : qkv_cp_attention(ol, ll, ql, kd, vd, &desc, g_job.comm, &params, &err)) {
        rc = mpi_cli_fail(&err);
        goto done;
    }
    if (decode) { /* every rank holds the whole result: rank 0 writes its own */
        if (g_job.rank != 0) goto done;
        o = ol, lse = ll;
        ol = ll = NULL;
    } else {
        if (g_job.rank == 0) {
            o = malloc((size_t)hq * hdr[H_LQ] * d * 4), lse = malloc((size_t)hq * hdr[H_LQ] * 4);
            if (!o || !lse) { rc = cli_fail("attend: out of memory"); goto done; }
        }
        if ((rc = gather(o, lse, ol, ll, hdr, a)) || g_job.rank != 0) goto done;
    }
    const int64_t shape[3] = {hq, hdr[H_LQ], d};
    if (qkv_npy_save_f32(out_tmp, o, 3, shape, &err) || (a->lse && qkv_npy_save_f32(lse_tmp, lse, 2, shape, &err)))
        rc = cli_outputs_fail(err.msg);
done:
    free(ql); free(kl); free(vl); free(ol); free(ll); free(kd); free(vd); free(o); free(lse);
done_inputs:
    qkv_npy_free(&q);
    qkv_npy_free(&k);
    qkv_npy_free(&v);
    return cli_outputs_finish(rc);
}

int mpi_cmd_attend(int argc, char **argv) {
    mpi_attend_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc == 0) rc = attend(&a);
    cli_ints_free(&a.exclude);
    return rc < 0 ? 0 : rc;
}
