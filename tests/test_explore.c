/*
 * test_explore.c — the explorer's reads (qkv_explore_rows / _row, the
 * max-pooled overview) against what a plain forward call shows its hooks.
 *
 *   - rows: every layer's and head's row of chosen queries, from a replay,
 *     against qkv_pattern_weights read by a hook in the prefill itself
 *     (qkv inspect's rows); SmolLM2 on 12 tokens, Gemma 3 270M on 600 (past
 *     its 512-key window: sliding and global layers), f16 caches, as qkv
 *     serve keeps them. Tolerance |explore - prefill| <= 2e-4 + 1e-3 x the
 *     weight: the replay's q and LSE come from one-row matmuls (another
 *     summation order than the batch's), and its own key rounds to f16 on
 *     its own; keys outside a sliding layer's window are 0 in both, exactly.
 *     One layer's or one head's row is the same bits as that slice of all.
 *   - overview: every cell against the max over the exact map's block,
 *     the map read in full by a second hook in the same calls (rows of a
 *     prefill in pieces, then generated rows one at a time), for several
 *     max_bins (blocks of 1 to 64, doubling while rows arrive); SmolLM2 f16
 *     and the tiny gemma3 (window 12 on layers 0-4) on 40 positions, each
 *     also with keys hidden (every layer's, and one head's: a rerun head).
 *     Tolerance 1e-5 relative + 1e-7: the cell's score comes from the tile
 *     kernel (FMA, keys in lanes), the map's from qkv_attn_weights' dot.
 *   - the tile kernel of each ISA this CPU runs against its reference twin,
 *     its key conversion against qkv_convert_to_f32 on every f16 and bf16.
 */
#include "testing.h"

#include "probe/overview_tile.h"
#include "qkv.h"
#include "util/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t story[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};

/* ------------------------------------------------------------- rows */

/* A hook on the prefill: rows `queries` of every layer and head.
 *   w: [n_q, L, Hq, n] (keys 0 .. q, zeros after) */
typedef struct {
    const int *queries;
    int n_q, L, Hq, n;
    float *w;
} prefill_rows;

static qkv_status keep_rows(void *user, const qkv_activation *a, qkv_error *err) {
    prefill_rows *p = user;
    for (int k = 0; k < p->n_q; k++) {
        const int q = p->queries[k], r = q - a->pos0;
        if (r < 0 || r >= a->shape[1]) continue;
        for (int h = 0; h < p->Hq; h++) {
            qkv_status st = qkv_pattern_weights(p->w + (((size_t)k * p->L + a->layer) * p->Hq + h) * p->n, a, h, r, 1,
                                                0, q + 1, err);
            if (st) return st;
        }
    }
    return QKV_OK;
}

/* Prefills ids [n] (calls of n_batch) reading the queries' rows, then
 * compares them with qkv_explore_rows and one layer's qkv_explore_row. */
static void check_rows(const char *path, const char *what, const int32_t *ids, int n, const int *queries, int n_q) {
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params mp = {.n_ctx = n, .kv_dtype = QKV_DTYPE_F16, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s: %s", what, err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, Hq = c->n_head;
    prefill_rows pr = {.queries = queries, .n_q = n_q, .L = L, .Hq = Hq, .n = n,
                       .w = calloc((size_t)n_q * L * Hq * n, sizeof(float))};
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = keep_rows, .user = &pr};
    CHECK(qkv_model_forward(m, NULL, ids, n, 0, &(qkv_forward_opts){.hooks = &hook, .n_hooks = 1}, &err) == QKV_OK,
          "%s: prefill: %s", what, err.msg);
    float *all = malloc((size_t)L * Hq * n * sizeof(float)), *one = malloc((size_t)Hq * n * sizeof(float));
    double worst = 0;
    int window_zeros = 0;
    for (int k = 0; k < n_q; k++) {
        const int q = queries[k], nk = q + 1;
        CHECK(qkv_explore_rows(all, m, ids, q, &err) == QKV_OK, "%s: explore %d: %s", what, q, err.msg);
        for (int l = 0; l < L; l++) {
            const int W = qkv_model_layer_slides(c, l) ? c->window : 0;
            for (int h = 0; h < Hq; h++) {
                const float *got = all + ((size_t)l * Hq + h) * nk, *want = pr.w + (((size_t)k * L + l) * Hq + h) * n;
                for (int j = 0; j < nk; j++) {
                    const double d = fabs((double)got[j] - want[j]);
                    worst = d > worst ? d : worst;
                    if (d > 2e-4 + 1e-3 * fabs(want[j]))
                        CHECK(0, "%s: query %d layer %d head %d key %d: explore %.7g, prefill %.7g", what, q, l, h, j,
                              (double)got[j], (double)want[j]);
                    if (W && j <= q - W) {
                        CHECK(got[j] == 0 && want[j] == 0, "%s: query %d layer %d key %d is outside the window: "
                              "%g, %g", what, q, l, j, (double)got[j], (double)want[j]);
                        window_zeros++;
                    }
                }
            }
        }
        /* one layer (every head, then one head): the same bits as its slice */
        const int l = L / 2;
        CHECK(qkv_explore_row(one, m, ids, q, l, QKV_ALL, &err) == QKV_OK, "%s: %s", what, err.msg);
        CHECK(!memcmp(one, all + (size_t)l * Hq * nk, (size_t)Hq * nk * sizeof(float)),
              "%s: query %d: layer %d's rows differ from explore_rows' slice", what, q, l);
        CHECK(qkv_explore_row(one, m, ids, q, l, Hq - 1, &err) == QKV_OK, "%s: %s", what, err.msg);
        CHECK(!memcmp(one, all + ((size_t)l * Hq + Hq - 1) * nk, (size_t)nk * sizeof(float)),
              "%s: query %d: head %d's row differs from explore_rows' slice", what, q, Hq - 1);
    }
    CHECK(qkv_model_pos(m) == n, "%s: the sequence moved to %d", what, qkv_model_pos(m));
    printf("     %-26s %d queries x %d layers x %d heads: max |explore - prefill| %.2e; %d window zeros\n", what, n_q,
           L, Hq, worst, window_zeros);
    free(pr.w);
    free(all);
    free(one);
    qkv_model_close(m);
}

TEST(explore_rows_equal_the_prefills_pattern_weights) {
    if (!test_require_model()) return;
    const int q_small[] = {0, 5, 11};
    check_rows(test_model_path(), "SmolLM2, 12 tokens", story, 12, q_small, 3);
    if (!test_require_gemma3()) return;
    enum { N = 600 };
    int32_t ids[N];
    test_rng r = {40};
    ids[0] = 2; /* <bos> */
    for (int i = 1; i < N; i++) ids[i] = 1000 + (int32_t)(test_rng_u64(&r) % 20000);
    const int q_gemma[] = {0, 300, 511, 512, 599};
    check_rows(test_gemma3_path(), "Gemma 3 270M, 600 tokens", ids, N, q_gemma, 5);
}

TEST(explore_refuses_bad_queries) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params mp = {.n_ctx = 16, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    float w[30 * 9 * 16];
    CHECK(qkv_explore_rows(w, m, story, 0, &err) == QKV_ERR_INVALID && strstr(err.msg, "outside"), "empty: %s",
          err.msg);
    CHECK(qkv_model_forward(m, NULL, story, 12, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_explore_rows(w, m, story, 12, &err) == QKV_ERR_INVALID, "query 12 of 12 accepted");
    CHECK(qkv_explore_rows(NULL, m, story, 3, &err) == QKV_ERR_INVALID, "NULL w accepted");
    CHECK(qkv_explore_row(w, m, story, 3, 30, 0, &err) == QKV_ERR_INVALID && strstr(err.msg, "layer 30"), "%s",
          err.msg);
    CHECK(qkv_explore_row(w, m, story, 3, QKV_ALL, 0, &err) == QKV_ERR_INVALID, "layer QKV_ALL accepted");
    CHECK(qkv_explore_row(w, m, story, 3, 2, 9, &err) == QKV_ERR_INVALID && strstr(err.msg, "head 9"), "%s", err.msg);
    CHECK(qkv_explore_row(w, m, story, 3, 2, -2, &err) == QKV_ERR_INVALID, "head -2 accepted");
    qkv_model_close(m);
}

/* ---------------------------------------------------------- overview */

/* A hook that keeps the exact map of every layer and head, row by row as the calls come.
 *   map: [L, Hq, N, N] */
typedef struct {
    int Hq, N;
    float *map;
} full_map;

static qkv_status keep_map(void *user, const qkv_activation *a, qkv_error *err) {
    full_map *f = user;
    const int n = (int)a->shape[1], keys = (int)a->shape[2];
    for (int h = 0; h < f->Hq; h++)
        for (int r = 0; r < n; r++) {
            qkv_status st = qkv_pattern_weights(
                f->map + (((size_t)a->layer * f->Hq + h) * f->N + a->pos0 + r) * f->N, a, h, r, 1, 0, keys, err);
            if (st) return st;
        }
    return QKV_OK;
}

/* Runs ids [N] in calls of `calls` (then one at a time) with the overview
 * (max_bins each) and the full map hooked, and checks every cell. */
static void check_overview(const char *path, const char *what, qkv_dtype dtype, const int32_t *ids, int N,
                           const int *calls, int n_calls, const int *max_bins, int n_bins, const qkv_exclusion *ex,
                           int n_ex) {
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params mp = {.n_ctx = N, .kv_dtype = dtype, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s: %s", what, err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, Hq = c->n_head;
    full_map fm = {.Hq = Hq, .N = N, .map = calloc((size_t)L * Hq * N * N, sizeof(float))};
    qkv_overview *ov[8] = {0};
    qkv_hook hooks[9] = {{.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = keep_map, .user = &fm}};
    for (int b = 0; b < n_bins; b++) {
        CHECK(qkv_overview_init(&ov[b], c, max_bins[b], &err) == QKV_OK, "%s: %s", what, err.msg);
        hooks[1 + b] = (qkv_hook){.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_overview_hook, .user = ov[b]};
    }
    const qkv_forward_opts o = {.hooks = hooks, .n_hooks = 1 + n_bins, .exclude = ex, .n_exclude = n_ex};
    int pos = 0;
    for (int k = 0; k < n_calls; k++) {
        CHECK(qkv_model_forward(m, NULL, ids + pos, calls[k], 0, &o, &err) == QKV_OK, "%s: %s", what, err.msg);
        pos += calls[k];
    }
    for (; pos < N; pos++) /* generation: one row a call */
        CHECK(qkv_model_forward(m, NULL, ids + pos, 1, 0, &o, &err) == QKV_OK, "%s: %s", what, err.msg);
    float *cells = malloc((size_t)N * N * sizeof(float));
    for (int b = 0; b < n_bins; b++) {
        double worst = 0;
        int block = 0, bins = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < Hq; h++) {
                bins = qkv_overview_get(ov[b], cells, l, h, N, &block);
                CHECK(bins == (N + block - 1) / block && (int64_t)block * max_bins[b] >= N &&
                          (block == 1 || (int64_t)block / 2 * max_bins[b] < N),
                      "%s: max_bins %d: %d bins of %d for %d positions", what, max_bins[b], bins, block, N);
                if (bins != (N + block - 1) / block) continue;
                const float *map = fm.map + ((size_t)l * Hq + h) * N * N;
                for (int qa = 0; qa < bins; qa++)
                    for (int kb = 0; kb < bins; kb++) {
                        float want = 0;
                        for (int i = qa * block; i < (qa + 1) * block && i < N; i++)
                            for (int j = kb * block; j < (kb + 1) * block && j < N; j++)
                                want = map[(size_t)i * N + j] > want ? map[(size_t)i * N + j] : want;
                        const float got = cells[(size_t)qa * bins + kb];
                        const double d = fabs((double)got - want);
                        worst = d > worst ? d : worst;
                        if (d > 1e-7 + 1e-5 * want)
                            CHECK(0, "%s: max_bins %d layer %d head %d cell (%d, %d) of block %d: %.8g, map %.8g",
                                  what, max_bins[b], l, h, qa, kb, block, (double)got, (double)want);
                    }
            }
        printf("     %-28s max_bins %2d: block %2d, %2d x %2d cells x %d heads: max |cell - map| %.2e\n", what,
               max_bins[b], block, bins, bins, L * Hq, worst);
        qkv_overview_free(ov[b]);
    }
    free(cells);
    free(fm.map);
    qkv_model_close(m);
}

TEST(overview_cells_are_the_max_of_the_exact_map) {
    enum { N = 40 };
    const int max_bins[] = {64, 16, 5, 3, 1};
    const int calls[] = {12, 9, 11}; /* 32 prompt rows in three calls, then 8 generated */
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = story[i % 12];
    /* hidden keys: every layer's key 3 and 17, and head 1 of layer 2's key 5 (a rerun head) */
    const int hide[] = {3, 17}, hide_head[] = {5};
    const qkv_exclusion ex[2] = {{.positions = hide, .n = 2, .layer = QKV_ALL, .head = QKV_ALL},
                                 {.positions = hide_head, .n = 1, .layer = 2, .head = 1}};
    if (test_require_model()) {
        check_overview(test_model_path(), "SmolLM2, f16 cache", QKV_DTYPE_F16, ids, N, calls, 3, max_bins, 5, NULL, 0);
        check_overview(test_model_path(), "SmolLM2, keys hidden", QKV_DTYPE_F32, ids, N, calls, 3, max_bins, 2, ex,
                       2);
    }
    char tiny[700];
    snprintf(tiny, sizeof tiny, "%s/families/gemma3/model.gguf", test_fixture_dir());
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % 200);
    check_overview(tiny, "tiny gemma3 (window 12), f32", QKV_DTYPE_F32, ids, N, calls, 3, max_bins, 5, NULL, 0);
    check_overview(tiny, "tiny gemma3, keys hidden", QKV_DTYPE_F32, ids, N, calls, 3, max_bins, 2, ex, 2);
}

TEST(overview_refuses_bad_arguments) {
    qkv_error err = {0};
    const qkv_model_config cfg = {.n_layer = 2, .n_head = 4, .n_kv_head = 1, .head_dim = 64};
    qkv_overview *o = NULL;
    CHECK(qkv_overview_init(&o, &cfg, 0, &err) == QKV_ERR_INVALID && !o && strstr(err.msg, "max_bins"), "%s", err.msg);
    CHECK(qkv_overview_init(&o, &cfg, 4097, &err) == QKV_ERR_INVALID, "max_bins 4097 accepted");
    CHECK(qkv_overview_init(&o, NULL, 8, &err) == QKV_ERR_INVALID, "NULL config accepted");
    CHECK(qkv_overview_init(&o, &cfg, 8, &err) == QKV_OK, "%s", err.msg);
    if (!o) return;
    CHECK(qkv_overview_bytes(o) >= (size_t)2 * 4 * 8 * 8 * 4, "%zu bytes", qkv_overview_bytes(o));
    float x = 1, out[64];
    const qkv_activation not_pattern = {.point = QKV_HOOK_RESID_PRE, .layer = 0, .data = &x, .ndim = 2,
                                        .shape = {1, 1}};
    CHECK(qkv_overview_hook(o, &not_pattern, &err) == QKV_ERR_INVALID && strstr(err.msg, "hook_pattern"), "%s",
          err.msg);
    int block = 0;
    CHECK(qkv_overview_get(o, out, 0, 0, 8, &block) == 8 && block == 1, "8 positions at block 1");
    for (int i = 0; i < 64; i++) CHECK(out[i] == 0, "an empty overview's cell %d is %g", i, (double)out[i]);
    CHECK(qkv_overview_get(o, out, 2, 0, 8, &block) == -1, "layer 2 of 2 accepted");
    CHECK(qkv_overview_get(o, out, 0, 4, 8, &block) == -1, "head 4 of 4 accepted");
    CHECK(qkv_overview_get(o, out, 0, 0, 9, &block) == -1, "9 positions at block 1 x 8 bins accepted");
    CHECK(qkv_overview_get(o, out, 0, 0, 0, &block) == -1, "0 positions accepted");
    qkv_overview_clear(o);
    qkv_overview_free(o);
    qkv_overview_free(NULL);
    /* hooked on a model of other shapes: the forward call stops with the hook's message */
    if (!test_require_model()) return;
    qkv_model *m = NULL;
    const qkv_model_params mp = {.n_ctx = 16, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    qkv_model_config other[2];
    other[0] = other[1] = *qkv_model_get_config(m);
    other[0].head_dim /= 2, other[1].n_layer = 2;
    const char *says[2] = {"heads of 64", "layer 2 with"};
    for (int i = 0; i < 2; i++) {
        CHECK(qkv_overview_init(&o, &other[i], 8, &err) == QKV_OK, "%s", err.msg);
        const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_overview_hook, .user = o};
        qkv_model_rewind(m, 0, NULL);
        CHECK(qkv_model_forward(m, NULL, story, 4, 0, &(qkv_forward_opts){.hooks = &h, .n_hooks = 1}, &err) ==
                  QKV_ERR_INVALID && strstr(err.msg, says[i]), "case %d: %s", i, err.msg);
        qkv_overview_free(o);
    }
    qkv_model_close(m);
}

TEST(overview_tile_kernels_equal_their_reference) {
    const int dims[] = {16, 64, 256};
    test_rng r = {3};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int D = dims[di];
        float *qt = malloc((size_t)D * OV_ROWS * 4), *keys = malloc((size_t)OV_KEYS * D * 4);
        float *want = malloc(OV_ROWS * OV_KEYS * 4), *got = malloc(OV_ROWS * OV_KEYS * 4);
        for (int i = 0; i < OV_ROWS * D; i++) qt[i] = (float)test_rng_normal(&r);
        for (int i = 0; i < D * OV_KEYS; i++) keys[i] = (float)test_rng_normal(&r);
        overview_tile_reference(want, qt, keys, D);
        const struct {
            cpu_isa isa;
            overview_tile_fn tile;
            overview_keys_fn keys;
        } isas[] = {{CPU_ISA_SCALAR, overview_tile_scalar, overview_keys_scalar},
                    {CPU_ISA_AVX2, overview_tile_avx2, overview_keys_avx2},
                    {CPU_ISA_AVX512, overview_tile_avx512, overview_keys_avx512}};
        /* the keys' conversions: every f16 and bf16 value (D + 5: a tail too) */
        uint16_t half[261];
        float conv[261], ref[261];
        for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
            if (!cpu_isa_supported(isas[k].isa)) continue;
            isas[k].tile(got, qt, keys, D);
            char what[64];
            snprintf(what, sizeof what, "overview tile %s, D %d", cpu_isa_name(isas[k].isa), D);
            /* sums of D products of N(0,1) in another order (and fused): ~sqrt(D) x 1e-7 */
            CHECK_CLOSE(what, got, want, OV_ROWS * OV_KEYS, 1e-4, 1e-5);
            const qkv_dtype types[2] = {QKV_DTYPE_F16, QKV_DTYPE_BF16};
            for (int t = 0; t < 2 && di == 0; t++)
                for (uint32_t v0 = 0; v0 < 65536; v0 += (uint32_t)(D + 5)) {
                    for (int i = 0; i < D + 5; i++) half[i] = (uint16_t)(v0 + (uint32_t)i);
                    isas[k].keys(conv, half, types[t], (size_t)D + 5);
                    qkv_convert_to_f32(ref, half, types[t], (size_t)D + 5);
                    for (int i = 0; i < D + 5; i++)
                        if (memcmp(&conv[i], &ref[i], 4) && !(isnan(conv[i]) && isnan(ref[i])))
                            CHECK(0, "%s keys, %s %#x: %g, qkv_convert_to_f32 %g", cpu_isa_name(isas[k].isa),
                                  t ? "bf16" : "f16", half[i], (double)conv[i], (double)ref[i]);
                }
        }
        free(qt);
        free(keys);
        free(want);
        free(got);
    }
}
