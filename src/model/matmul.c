/*
 * matmul.c — activations times GGUF weights. Weights stay quantised in the
 * file's mapping; rows are split across threads in blocks of MATMUL_ROWS
 * (and the tokens of a prompt in blocks that fit L2) and each block goes
 * to the kernels of the best ISA (matmul_impl.h, compiled per
 * ISA by matmul_avx512.c, matmul_avx2.c, matmul_scalar.c, picked at run time
 * as attention's tiles are); weights that read the same x (Q, K, V; gate,
 * up) share one loop. Also the readable reference twin, and the small dense
 * kernels of the forward pass (dot, RMSNorm).
 */
#include "model/internal.h"
#include "util/cpu.h"
#include "util/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float model_dot(const float *a, const float *b, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 16; j++) s += acc[j];
    return s;
}

void model_rms_normalize(float *out, const float *x, int n, float eps) {
    float ss = model_dot(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv;
}

void model_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    model_rms_normalize(out, x, n, eps);
    for (int i = 0; i < n; i++) out[i] = w[i] * out[i];
}

/* ------------------------------------------------------------ reference */

/* One call's arrays, shared by every block of rows (the loop's item). */
typedef struct {
    float *out;              /* [n, rows] */
    const float *x;          /* [n, cols] */
    const qkv_gguf_tensor *w; /* [rows, cols], quantised */
    int n;
    float *scratch;          /* [threads, MATMUL_ROWS, cols] */
} matmul_call;

/* Block b of MATMUL_ROWS rows: dequantised to f32, then one plain dot
 * product per row and token. */
static void matmul_block_reference(void *ctx, int64_t b, int thread) {
    const matmul_call *c = ctx;
    const qkv_gguf_tensor *w = c->w;
    const int64_t rows = w->shape[0], cols = w->shape[1];
    const size_t row_bytes = qkv_ggml_row_size(w->type, cols);
    float *buf = c->scratch + (size_t)thread * MATMUL_ROWS * cols; /* [MATMUL_ROWS, cols] */
    int64_t r0 = b * MATMUL_ROWS, nr = rows - r0 < MATMUL_ROWS ? rows - r0 : MATMUL_ROWS;
    for (int64_t r = 0; r < nr; r++)
        qkv_dequantize(buf + r * cols, (const char *)w->data + (size_t)(r0 + r) * row_bytes, w->type, cols, NULL);
    for (int t = 0; t < c->n; t++) {
        const float *xt = c->x + (size_t)t * cols;
        float *ot = c->out + (size_t)t * rows + r0;
        for (int64_t r = 0; r < nr; r++) ot[r] = model_dot(xt, buf + r * cols, (int)cols);
    }
}

void model_matmul_reference(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                            int n_threads) {
    const int64_t rows = w->shape[0];
    matmul_call c = {.out = out, .x = x, .w = w, .n = n, .scratch = scratch};
    util_parallel_for((rows + MATMUL_ROWS - 1) / MATMUL_ROWS, n_threads, 0, matmul_block_reference, &c);
}

/* ------------------------------------------------------------- dispatch */

/* indexed by cpu_isa (util/cpu.h): the same choice as attention's */
static const model_mm_isa mm_isas[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = {"scalar", 4, model_mm_rows_scalar, model_mm_dequant_scalar},
    [CPU_ISA_AVX2] = {"avx2", 8, model_mm_rows_avx2, model_mm_dequant_avx2},
    [CPU_ISA_AVX512] = {"avx512", 16, model_mm_rows_avx512, model_mm_dequant_avx512},
};

const model_mm_isa *model_mm_isa_find(const char *name) {
    cpu_isa isa;
    return cpu_isa_parse(&isa, name) && cpu_isa_supported(isa) ? &mm_isas[isa] : NULL;
}

const model_mm_isa *model_mm_isa_best(void) { return &mm_isas[cpu_isa_chosen()]; }

/* ---------------------------------------------------------------- matmul */

/* One loop over the (token block, row block) items of up to MM_GROUP_MAX
 * weights that read the same x: row blocks [first[k], first[k + 1]) are
 * weight k's; item i is row block i % first[n_outs] of token block
 * i / first[n_outs]. Token block j: q + (j < r) tokens from j q + min(j, r)
 * (q = n / token_blocks, r = n % token_blocks). */
typedef struct {
    model_mm_out outs[MM_GROUP_MAX];
    int64_t first[MM_GROUP_MAX + 1];
    int n_outs, token_blocks;
    const float *x;          /* [n, cols] */
    int n;
    int64_t cols;
    float *scratch;          /* [threads, MATMUL_ROWS, cols] */
    model_mm_rows_fn rows_fn;
} matmul_group_call;

static void matmul_group_block(void *ctx, int64_t item, int thread) {
    const matmul_group_call *c = ctx;
    const int64_t j = item / c->first[c->n_outs], b = item % c->first[c->n_outs];
    int k = 0;
    while (b >= c->first[k + 1]) k++;
    const qkv_gguf_tensor *w = c->outs[k].w;
    const int64_t rows = w->shape[0], cols = c->cols;
    const int64_t r0 = (b - c->first[k]) * MATMUL_ROWS, r1 = r0 + MATMUL_ROWS < rows ? r0 + MATMUL_ROWS : rows;
    const int q = c->n / c->token_blocks, r = c->n % c->token_blocks;
    const int t0 = (int)j * q + ((int)j < r ? (int)j : r), nt = q + ((int)j < r);
    c->rows_fn(c->outs[k].out + (size_t)t0 * rows, c->x + (size_t)t0 * cols, w, nt, r0, r1,
               c->scratch + (size_t)thread * MATMUL_ROWS * cols);
}

/* Token blocks of about MM_TOKEN_BLOCK_FLOATS / cols tokens; 1 for the
 * fused path, and never one of MM_FUSED_MAX tokens or fewer (a call above
 * it stays tiled: blocks of at least half the target, which is larger). */
static int token_blocks(int n, int64_t cols) {
    int64_t target = MM_TOKEN_BLOCK_FLOATS / cols;
    if (target < 2 * (MM_FUSED_MAX + 1)) target = 2 * (MM_FUSED_MAX + 1);
    return n <= MM_FUSED_MAX ? 1 : (int)((n + target - 1) / target);
}

void model_matmul_group_isa(const model_mm_isa *isa, const model_mm_out *outs, int n_outs, const float *x, int n,
                            float *scratch, int n_threads) {
    if (n < 1 || n_outs < 1) return;
    if (n_outs > MM_GROUP_MAX) { /* the rest in a loop of their own */
        model_matmul_group_isa(isa, outs + MM_GROUP_MAX, n_outs - MM_GROUP_MAX, x, n, scratch, n_threads);
        n_outs = MM_GROUP_MAX;
    }
    const int64_t cols = outs[0].w->shape[1];
    matmul_group_call c = {.n_outs = n_outs, .token_blocks = token_blocks(n, cols), .x = x, .n = n, .cols = cols,
                           .scratch = scratch, .rows_fn = isa->rows};
    for (int k = 0; k < n_outs; k++) {
        c.outs[k] = outs[k];
        c.first[k + 1] = c.first[k] + (outs[k].w->shape[0] + MATMUL_ROWS - 1) / MATMUL_ROWS;
    }
    util_parallel_for(c.token_blocks * c.first[n_outs], n_threads, 0, matmul_group_block, &c);
}

void model_matmul_group(const model_mm_out *outs, int n_outs, const float *x, int n, float *scratch,
                        int n_threads) {
    model_matmul_group_isa(model_mm_isa_best(), outs, n_outs, x, n, scratch, n_threads);
}

void model_matmul_isa(const model_mm_isa *isa, float *out, const float *x, const qkv_gguf_tensor *w, int n,
                      float *scratch, int n_threads) {
    const model_mm_out one = {out, w};
    model_matmul_group_isa(isa, &one, 1, x, n, scratch, n_threads);
}

void model_matmul(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                  int n_threads) {
    model_matmul_isa(model_mm_isa_best(), out, x, w, n, scratch, n_threads);
}
