/*
 * test_matmul.c — the model's matmul kernels (src/model/matmul_impl.h) on
 * every ISA this CPU runs, against a double-precision oracle built on
 * qkv_dequantize: every supported GGUF type, n in {1, 2, 3, 4, 5, 17, 64}
 * tokens (the fused decode path up to MM_FUSED_MAX, the tiled path above,
 * partial token tiles), row counts that leave partial row tiles and thread
 * blocks, columns that are not a multiple of the vector width, 1 and 3
 * threads. Also each ISA's row dequantiser against qkv_dequantize, the
 * reference twin model_matmul_reference against the same oracle, and
 * model_matmul_group against one model_matmul per weight.
 *
 * Weights are random bytes with sane f16 scales written over the scale fields
 * (every nibble and 6-bit scale pattern occurs), placed at an odd address
 * for the quantised types (GGUF rows of 18- or 20-byte blocks have no
 * alignment).
 *
 * Tolerances. Dot products: |got - want| <= (cols + 2) * 2^-24 * sum_c |x_c
 * w_c|, the classic bound for a float sum of cols products in any order
 * (Higham, Accuracy and Stability, 3.1); a wrong element, scale or tail
 * misses by about one term, orders of magnitude more. Dequantised rows: zero,
 * the kernels decode exactly qkv_dequantize's values (matmul_impl.h says why
 * fused multiply-adds do not change them).
 */
#include "model/internal.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_isas[] = {"avx512", "avx2", "scalar"};

static const qkv_ggml_type k_types[] = {
    QKV_GGML_TYPE_F32,  QKV_GGML_TYPE_F16,  QKV_GGML_TYPE_BF16, QKV_GGML_TYPE_Q8_0, QKV_GGML_TYPE_Q4_0,
    QKV_GGML_TYPE_Q4_1, QKV_GGML_TYPE_Q5_0, QKV_GGML_TYPE_Q5_1, QKV_GGML_TYPE_Q2_K, QKV_GGML_TYPE_Q3_K,
    QKV_GGML_TYPE_Q4_K, QKV_GGML_TYPE_Q5_K, QKV_GGML_TYPE_Q6_K,
};

static void put_f16(uint8_t *p, float f) {
    uint16_t h = qkv_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* rows x cols weights of type t at buf (qkv_ggml_row_size(t, cols) * rows
 * bytes): float types get N(0, 1) values, block types random bytes with the
 * scales (d, m, dmin) overwritten by small f16 values of either sign. */
static void fill_weights(uint8_t *buf, qkv_ggml_type t, int64_t rows, int64_t cols, test_rng *rng) {
    const size_t nbytes = qkv_ggml_row_size(t, cols) * (size_t)rows;
    const int64_t n = rows * cols;
    if (t == QKV_GGML_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = (float)test_rng_normal(rng);
            memcpy(buf + 4 * i, &f, 4);
        }
        return;
    }
    if (t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = (float)test_rng_normal(rng);
            uint16_t h = t == QKV_GGML_TYPE_F16 ? qkv_f32_to_f16(f) : qkv_f32_to_bf16(f);
            buf[2 * i] = (uint8_t)h;
            buf[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return;
    }
    for (size_t i = 0; i < nbytes; i++) buf[i] = (uint8_t)test_rng_u64(rng);
    const size_t bs = qkv_ggml_block_bytes(t);
    for (size_t b = 0; b < nbytes / bs; b++) {
        uint8_t *blk = buf + b * bs;
        float d = (float)(0.01 + 0.05 * test_rng_uniform(rng)) * (test_rng_uniform(rng) < 0.5 ? -1 : 1);
        float m = (float)(0.3 * test_rng_normal(rng));
        switch (t) {
        case QKV_GGML_TYPE_Q8_0: case QKV_GGML_TYPE_Q4_0: case QKV_GGML_TYPE_Q5_0: put_f16(blk, d); break;
        case QKV_GGML_TYPE_Q4_1: case QKV_GGML_TYPE_Q5_1: put_f16(blk, d); put_f16(blk + 2, m); break;
        case QKV_GGML_TYPE_Q2_K: put_f16(blk + 80, d * 0.1f); put_f16(blk + 82, m * 0.01f); break;
        case QKV_GGML_TYPE_Q3_K: put_f16(blk + 108, d * 0.1f); break;
        case QKV_GGML_TYPE_Q4_K: case QKV_GGML_TYPE_Q5_K: put_f16(blk, d * 0.1f); put_f16(blk + 2, m * 0.01f); break;
        case QKV_GGML_TYPE_Q6_K: put_f16(blk + 208, d * 0.1f); break;
        default: break;
        }
    }
}

/* A rows x cols tensor of type t over fresh random weights (fill_weights), at
 * an odd address for the quantised types (f32 rows stay 4-byte aligned, as
 * in a GGUF); *raw is the allocation to free. */
static qkv_gguf_tensor random_weight(qkv_ggml_type t, int64_t rows, int64_t cols, uint8_t **raw, test_rng *rng) {
    const size_t nbytes = qkv_ggml_row_size(t, cols) * (size_t)rows;
    *raw = malloc(nbytes + 64);
    uint8_t *buf = *raw + 32 + (t == QKV_GGML_TYPE_F32 ? 0 : 1);
    fill_weights(buf, t, rows, cols, rng);
    qkv_gguf_tensor w;
    memset(&w, 0, sizeof w);
    w.name = "w";
    w.type = t;
    w.n_dims = 2;
    w.shape[0] = rows;
    w.shape[1] = cols;
    w.shape[2] = w.shape[3] = 1;
    w.n_elements = rows * cols;
    w.nbytes = nbytes;
    w.data = buf;
    return w;
}

/* One (isa, type, rows, cols, n, threads) case against the oracle; returns
 * the largest error as a fraction of its bound. */
static double check_case(const model_mm_isa *isa, qkv_ggml_type t, int64_t rows, int64_t cols, int n,
                         int n_threads, test_rng *rng) {
    const size_t rs = qkv_ggml_row_size(t, cols);
    uint8_t *raw;
    qkv_gguf_tensor w = random_weight(t, rows, cols, &raw, rng);
    const uint8_t *wbuf = w.data;

    float *wf = malloc((size_t)(rows * cols) * sizeof *wf);
    for (int64_t r = 0; r < rows; r++) qkv_dequantize(wf + r * cols, wbuf + (size_t)r * rs, t, cols, NULL);
    float *x = malloc((size_t)n * cols * sizeof *x);
    test_fill_normal(x, (size_t)n * cols, rng, 1.0f);
    float *out = malloc((size_t)n * rows * sizeof *out);
    float *scratch = malloc((size_t)n_threads * MATMUL_ROWS * cols * sizeof *scratch);
    for (size_t i = 0; i < (size_t)n * rows; i++) out[i] = NAN; /* every output must be written */

    if (isa) model_matmul_isa(isa, out, x, &w, n, scratch, n_threads);
    else model_matmul_reference(out, x, &w, n, scratch, n_threads);

    double worst = 0;
    int shown = 0;
    for (int j = 0; j < n; j++)
        for (int64_t r = 0; r < rows; r++) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                double p = (double)x[(size_t)j * cols + c] * wf[r * cols + c];
                want += p;
                mag += fabs(p);
            }
            double bound = (double)(cols + 2) * 0x1p-24 * mag + 1e-30;
            double got = out[(size_t)j * rows + r], err = fabs(got - want);
            if (!(err <= bound)) { /* also catches NaN */
                if (shown++ < 3)
                    CHECK(0, "%s %s rows %lld cols %lld n %d threads %d: out[%d][%lld] = %.9g, want %.9g (bound %.3g)",
                          isa ? isa->name : "reference", qkv_ggml_type_name(t), (long long)rows, (long long)cols, n,
                          n_threads, j, (long long)r, got, want, bound);
                err = bound * 1e9;
            }
            if (err / bound > worst) worst = err / bound;
        }
    free(raw);
    free(wf);
    free(x);
    free(out);
    free(scratch);
    return worst;
}

static int is_block_type(qkv_ggml_type t) {
    return qkv_ggml_block_elems(t) == 32;
}

/* Column counts per type: float types any count (tails of 1..2VW-1 after
 * the vector loops), block types whole blocks (odd counts of 32), K-quants
 * whole super-blocks. */
static int type_cols(qkv_ggml_type t, int64_t *cols) {
    if (t == QKV_GGML_TYPE_F32 || t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16) {
        cols[0] = 3, cols[1] = 37, cols[2] = 57, cols[3] = 100;
        return 4;
    }
    if (is_block_type(t)) {
        cols[0] = 32, cols[1] = 96, cols[2] = 544;
        return 3;
    }
    cols[0] = 256, cols[1] = 768;
    return 2;
}

static void sweep(const model_mm_isa *isa, test_rng *rng) {
    static const int ns[] = {1, 2, 3, 4, 5, 17, 64};
    static const int64_t rowss[] = {1, 6, 37}; /* 37: three thread blocks, last one 5 rows */
    double worst = 0;
    int cases = 0;
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        qkv_ggml_type t = k_types[ti];
        int64_t cols[4];
        int nc = type_cols(t, cols);
        for (int ci = 0; ci < nc; ci++)
            for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0]; ri++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    int threads = (ri + ni) % 2 ? 3 : 1;
                    double e = check_case(isa, t, rowss[ri], cols[ci], ns[ni], threads, rng);
                    if (e > worst) worst = e;
                    cases++;
                }
    }
    printf("     %-9s %d cases, worst error %.3f of its bound\n", isa ? isa->name : "reference", cases, worst);
}

TEST(matmul_every_isa_type_and_shape) {
    test_rng rng = {42};
    int ran = 0;
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) {
            printf("     %s: not supported here, skipped\n", k_isas[i]);
            continue;
        }
        sweep(isa, &rng);
        ran++;
    }
    CHECK(ran >= 1 && model_mm_isa_find("scalar"), "the scalar kernels always run");
}

/* Prompts in token blocks (model_matmul, internal.h): 2048 columns make
 * blocks of MM_TOKEN_BLOCK_FLOATS / 2048 = 64 tokens, so 150 tokens run in
 * 3 balanced blocks (50 each). Every type within the oracle's bound on every
 * ISA, 2 threads; and the same bits, token by token, as calls that start
 * elsewhere and run in one block or in other blocks (a Q4_K weight of 37
 * rows: two thread blocks and a tail). */
TEST(matmul_token_blocks) {
    test_rng rng = {11};
    const int64_t cols = 2048;
    CHECK(MM_TOKEN_BLOCK_FLOATS / cols < 75, "the case needs several token blocks");
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) continue;
        double worst = 0;
        for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
            const double e = check_case(isa, k_types[ti], 37, cols, 150, 2, &rng);
            if (e > worst) worst = e;
        }
        printf("     %-9s 37 x 2048, 150 tokens: worst error %.3f of its bound\n", isa->name, worst);
    }
    const int N = 150, rows = 37;
    uint8_t *raw;
    qkv_gguf_tensor w = random_weight(QKV_GGML_TYPE_Q4_K, rows, cols, &raw, &rng);
    float *x = malloc((size_t)N * cols * sizeof *x), *all = malloc((size_t)N * rows * sizeof *all),
          *part = malloc((size_t)N * rows * sizeof *part),
          *scratch = malloc((size_t)2 * MATMUL_ROWS * cols * sizeof *scratch);
    test_fill_normal(x, (size_t)N * cols, &rng, 1.0f);
    static const int starts[] = {3, 80, 27}, lens[] = {4, 64, 110};
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) continue;
        model_matmul_isa(isa, all, x, &w, N, scratch, 2);
        for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
            model_matmul_isa(isa, part, x + (size_t)starts[k] * cols, &w, lens[k], scratch, 1);
            CHECK(memcmp(part, all + (size_t)starts[k] * rows, (size_t)lens[k] * rows * sizeof *part) == 0,
                  "%s: %d tokens from token %d differ from the same tokens of a %d-token call", isa->name, lens[k],
                  starts[k], N);
        }
    }
    free(raw);
    free(x);
    free(all);
    free(part);
    free(scratch);
}

TEST(matmul_reference_twin) {
    test_rng rng = {7};
    sweep(NULL, &rng);
}

TEST(matmul_dequant_rows_match_qkv_dequantize) {
    test_rng rng = {3};
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) continue;
        for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
            qkv_ggml_type t = k_types[ti];
            int64_t cols[4];
            int nc = type_cols(t, cols);
            for (int ci = 0; ci < nc; ci++) {
                const int64_t rows = 5, C = cols[ci];
                const size_t rs = qkv_ggml_row_size(t, C);
                uint8_t *raw = malloc(rs * rows + 64), *buf = raw + 33;
                if (t == QKV_GGML_TYPE_F32) buf = raw + 32;
                fill_weights(buf, t, rows, C, &rng);
                float *got = malloc((size_t)C * sizeof *got), *want = malloc((size_t)C * sizeof *want);
                int bad = 0;
                for (int64_t r = 0; r < rows; r++) {
                    const uint8_t *row = buf + (size_t)r * rs;
                    qkv_dequantize(want, row, t, C, NULL);
                    isa->dequant(got, row, t, C);
                    for (int64_t c = 0; c < C; c++) {
                        if (memcmp(&got[c], &want[c], sizeof got[c]) && bad++ < 3)
                            CHECK(0, "%s dequant %s cols %lld: row %lld [%lld] = %.9g, want %.9g", isa->name,
                                  qkv_ggml_type_name(t), (long long)C, (long long)r, (long long)c, got[c], want[c]);
                    }
                }
                free(raw);
                free(got);
                free(want);
            }
        }
    }
}

/* One row of a weight through an ISA's kernel as a one-row matrix (the
 * forward's qkv_forward_opts.logit_ids: two logits, not V) gives the bits of
 * that row's entry in the whole 1-token matmul: every type, every ISA, rows
 * at each place of a thread block (37 rows: three blocks, the last partial). */
TEST(matmul_one_row_is_the_whole_matmuls_entry) {
    test_rng rng = {13};
    int ran = 0;
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) continue;
        ran++;
        for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
            const qkv_ggml_type t = k_types[ti];
            int64_t cols[4];
            const int nc = type_cols(t, cols);
            for (int ci = 0; ci < nc; ci++) {
                const int64_t rows = 37, C = cols[ci];
                uint8_t *raw;
                const qkv_gguf_tensor w = random_weight(t, rows, C, &raw, &rng);
                const size_t rs = qkv_ggml_row_size(t, C);
                float *x = malloc((size_t)C * sizeof *x), *want = malloc((size_t)rows * sizeof *want),
                      *scratch = malloc((size_t)2 * MATMUL_ROWS * C * sizeof *scratch);
                test_fill_normal(x, (size_t)C, &rng, 1.0f);
                model_matmul_isa(isa, want, x, &w, 1, scratch, 2);
                int bad = 0;
                for (int64_t r = 0; r < rows; r++) {
                    qkv_gguf_tensor one = w;
                    one.shape[0] = 1, one.n_elements = C, one.nbytes = rs;
                    one.data = (const uint8_t *)w.data + (size_t)r * rs;
                    float got = NAN;
                    isa->rows(&got, x, &one, 1, 0, 1, scratch);
                    if (memcmp(&got, &want[r], sizeof got) && bad++ < 3)
                        CHECK(0, "%s %s cols %lld: row %ld alone %.9g, in the whole matmul %.9g", isa->name,
                              qkv_ggml_type_name(t), (long long)C, (long)r, got, want[r]);
                }
                free(raw);
                free(x);
                free(want);
                free(scratch);
            }
        }
    }
    CHECK(ran >= 1, "at least the scalar kernels ran");
}

/* model_matmul_group (the forward pass's Q/K/V and gate/up loops) writes
 * what one model_matmul per weight writes, bit for bit: weights of different
 * types and row counts (partial blocks), more of them than MM_GROUP_MAX, on
 * every ISA, 1 and 3 threads. */
TEST(matmul_group_equals_one_matmul_per_weight) {
    test_rng rng = {11};
    enum { K = MM_GROUP_MAX + 1 };
    static const qkv_ggml_type types[K] = {QKV_GGML_TYPE_Q5_0, QKV_GGML_TYPE_Q6_K, QKV_GGML_TYPE_F16,
                                           QKV_GGML_TYPE_Q8_0};
    static const int64_t rows[K] = {37, 6, 1, 20};
    const int64_t cols = 256;
    uint8_t *raw[K];
    qkv_gguf_tensor w[K];
    for (int k = 0; k < K; k++) w[k] = random_weight(types[k], rows[k], cols, &raw[k], &rng);
    static const int ns[] = {1, 3, 17};
    float *x = malloc(17 * cols * sizeof *x);
    test_fill_normal(x, 17 * (size_t)cols, &rng, 1.0f);
    float *scratch = malloc(3 * MATMUL_ROWS * cols * sizeof *scratch);
    int ran = 0;
    for (size_t i = 0; i < sizeof k_isas / sizeof k_isas[0]; i++) {
        const model_mm_isa *isa = model_mm_isa_find(k_isas[i]);
        if (!isa) continue;
        ran++;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int threads = 1; threads <= 3; threads += 2) {
                const int n = ns[ni];
                float *got[K], *want[K];
                model_mm_out outs[K];
                for (int k = 0; k < K; k++) {
                    got[k] = malloc((size_t)n * rows[k] * sizeof(float));
                    want[k] = malloc((size_t)n * rows[k] * sizeof(float));
                    for (int64_t e = 0; e < n * rows[k]; e++) got[k][e] = NAN; /* every output must be written */
                    model_matmul_isa(isa, want[k], x, &w[k], n, scratch, threads);
                    outs[k] = (model_mm_out){got[k], &w[k]};
                }
                model_matmul_group_isa(isa, outs, K, x, n, scratch, threads);
                for (int k = 0; k < K; k++) {
                    CHECK(memcmp(got[k], want[k], (size_t)n * rows[k] * sizeof(float)) == 0,
                          "%s n %d threads %d: weight %d (%s, %lld rows) differs from its own matmul", isa->name, n,
                          threads, k, qkv_ggml_type_name(types[k]), (long long)rows[k]);
                    free(got[k]);
                    free(want[k]);
                }
            }
    }
    CHECK(ran >= 1, "at least the scalar kernels ran");
    for (int k = 0; k < K; k++) free(raw[k]);
    free(x);
    free(scratch);
}
