/*
 * matmul_ab.c — two builds of the matmul kernels (src/model/matmul_impl.h)
 * in one process, one thread, timed in turns: one decode step's matrix-vector
 * products of a SmolLM2-135M-shaped model (30 layers of Q, K, V, O, gate, up,
 * down weights, 576 wide, and the 49152-row output head), each weight its own
 * random rows of the chosen block type, so the whole step streams ~75 MB
 * (Q4_1) from memory as a real decode step does. MODEL=gemma in the
 * environment: Gemma-3-270M's shapes instead (18 layers, 640 wide, Q 1024
 * rows, K and V 256, ffn 2048; head 262144 rows); there a K-quant weighs
 * only O and down, the two whose width is whole blocks of 256 (as in the
 * file). Each weight is split into blocks of
 * MATMUL_ROWS rows as model_matmul splits it. Given LAYERS=k in the
 * environment, k layers and no head instead (k = 1: in cache). On a shared VM
 * whose speed drifts from minute to minute, turns milliseconds apart see the
 * same machine; separate runs of `qkv run` do not. Also checks that both
 * builds give the same bits.
 *
 * Built and run by bench/matmul_ab.sh (A: a git revision, B: the work tree):
 *   bench/matmul_ab.sh REV [isa avx512|avx2|scalar] [tokens 1] [type q4_1] [rounds 20]
 * type: any block type of matmul_impl.h (q8_0, q4_0, q4_1, q5_0, q5_1, q2_K,
 * q3_K, q4_K, q5_K, q6_K). Prints the min and median milliseconds a step of
 * A and B, the weights' bytes over B's median (GB/s), and the median of the
 * rounds' A / B (> 1: B faster).
 * A benchmark, not part of libqkv or its tests.
 */
#include "model/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

typedef void (*rows_fn)(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                        float *scratch);
void model_mm_rows_A(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                     float *scratch);
void model_mm_rows_B(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                     float *scratch);

enum { N_LAYERS_MAX = 64, ROUNDS_MAX = 1000, COLS_MAX = 2048, ROWS_MAX = 262144 };

/* The block types and the byte offsets of their f16 scales in a block: d,
 * and m or dmin (-1: none). Layouts in src/gguf/dequant.c. */
static const struct {
    const char *name;
    qkv_ggml_type t;
    int d, m;
} k_types[] = {
    {"q8_0", QKV_GGML_TYPE_Q8_0, 0, -1}, {"q4_0", QKV_GGML_TYPE_Q4_0, 0, -1}, {"q4_1", QKV_GGML_TYPE_Q4_1, 0, 2},
    {"q5_0", QKV_GGML_TYPE_Q5_0, 0, -1}, {"q5_1", QKV_GGML_TYPE_Q5_1, 0, 2}, {"q2_K", QKV_GGML_TYPE_Q2_K, 80, 82},
    {"q3_K", QKV_GGML_TYPE_Q3_K, 108, -1}, {"q4_K", QKV_GGML_TYPE_Q4_K, 0, 2}, {"q5_K", QKV_GGML_TYPE_Q5_K, 0, 2},
    {"q6_K", QKV_GGML_TYPE_Q6_K, 208, -1},
};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* A [rows, cols] weight of block type k_types[ti] with random codes and f16
 * scales d = 0.01, m = -0.01 (finite: no NaN from random scale bits). */
static void random_weight(qkv_gguf_tensor *w, int64_t rows, int64_t cols, int ti) {
    const qkv_ggml_type t = k_types[ti].t;
    const size_t row_bytes = qkv_ggml_row_size(t, cols), bs = qkv_ggml_block_bytes(t);
    uint8_t *d = malloc((size_t)rows * row_bytes);
    if (!d) {
        fprintf(stderr, "matmul_ab: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++) d[i] = (uint8_t)rand();
    for (size_t b = 0; b < (size_t)rows * row_bytes / bs; b++) {
        uint8_t *p = d + b * bs; /* 0.01 is f16 0x211f, -0.01 0xa11f */
        p[k_types[ti].d] = 0x1f, p[k_types[ti].d + 1] = 0x21;
        if (k_types[ti].m >= 0) p[k_types[ti].m] = 0x1f, p[k_types[ti].m + 1] = 0xa1;
    }
    memset(w, 0, sizeof *w);
    w->type = t;
    w->n_dims = 2;
    w->shape[0] = rows, w->shape[1] = cols;
    w->data = d;
    w->nbytes = (size_t)rows * row_bytes;
}

/* One decode step: every weight's row blocks, n tokens. */
static double step(rows_fn fn, const qkv_gguf_tensor *ws, int n_w, float *out, const float *x, int n, float *scratch) {
    const double t0 = util_now_s();
    for (int k = 0; k < n_w; k++)
        for (int64_t r = 0; r < ws[k].shape[0]; r += MATMUL_ROWS)
            fn(out, x, &ws[k], n, r, r + MATMUL_ROWS < ws[k].shape[0] ? r + MATMUL_ROWS : ws[k].shape[0], scratch);
    return util_now_s() - t0;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1, rounds = argc > 3 ? atoi(argv[3]) : 20;
    const char *type = argc > 2 ? argv[2] : "q4_1", *model = getenv("MODEL");
    int ti = 0;
    while (ti < N_TYPES && strcmp(type, k_types[ti].name)) ti++;
    const int gemma = model && !strcmp(model, "gemma");
    static const int64_t smollm2[8][2] = {{576, 576},   {192, 576},  {192, 576},  {576, 576},
                                          {1536, 576},  {1536, 576}, {576, 1536}, {49152, 576}};
    static const int64_t gemma3[8][2] = {{1024, 640},  {256, 640},  {256, 640},  {640, 1024},
                                         {2048, 640},  {2048, 640}, {640, 2048}, {262144, 640}};
    const int64_t(*shapes)[2] = gemma ? gemma3 : smollm2; /* Q, K, V, O, gate, up, down; head */
    const char *env = getenv("LAYERS");
    const int layers = env ? atoi(env) : gemma ? 18 : 30, head = !env;
    if (n < 1 || n > MM_FUSED_MAX + 1 || rounds < 1 || rounds > ROUNDS_MAX || ti == N_TYPES || layers < 1 ||
        layers > N_LAYERS_MAX || (model && !gemma) || (!gemma && qkv_ggml_block_elems(k_types[ti].t) > 32)) {
        fprintf(stderr, "matmul_ab: usage: matmul_ab [tokens 1..%d] [q8_0|q4_0|q4_1|q5_0|q5_1|q2_K|q3_K|q4_K|q5_K|q6_K] "
                "[rounds 1..%d], LAYERS 1..%d, MODEL=gemma (needed by the K-quants)\n",
                MM_FUSED_MAX + 1, ROUNDS_MAX, N_LAYERS_MAX);
        return 2;
    }
    static qkv_gguf_tensor ws[N_LAYERS_MAX * 7 + 1];
    int n_w = 0;
    double bytes = 0;
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < 7; k++) /* as in the file: a K-quant only where the width is whole blocks (O, down) */
            if (shapes[k][1] % qkv_ggml_block_elems(k_types[ti].t) == 0)
                random_weight(&ws[n_w++], shapes[k][0], shapes[k][1], ti);
    if (head && shapes[7][1] % qkv_ggml_block_elems(k_types[ti].t) == 0)
        random_weight(&ws[n_w++], shapes[7][0], shapes[7][1], ti);
    for (int k = 0; k < n_w; k++) bytes += (double)ws[k].nbytes;
    float *x = malloc(sizeof(float) * (MM_FUSED_MAX + 1) * COLS_MAX);         /* [n, cols] */
    float *oa = calloc((size_t)(MM_FUSED_MAX + 1) * ROWS_MAX, sizeof(float)); /* [n, rows] */
    float *ob = calloc((size_t)(MM_FUSED_MAX + 1) * ROWS_MAX, sizeof(float));
    float *scratch = malloc(sizeof(float) * MATMUL_ROWS * COLS_MAX); /* [MATMUL_ROWS, cols] */
    for (int i = 0; i < (MM_FUSED_MAX + 1) * COLS_MAX; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    static double ta[ROUNDS_MAX], tb[ROUNDS_MAX], ratio[ROUNDS_MAX];
    int same = 1;
    for (int r = 0; r < rounds; r++) { /* A first in even rounds, B first in odd ones */
        if (r % 2 == 0) ta[r] = step(model_mm_rows_A, ws, n_w, oa, x, n, scratch), tb[r] = step(model_mm_rows_B, ws, n_w, ob, x, n, scratch);
        else tb[r] = step(model_mm_rows_B, ws, n_w, ob, x, n, scratch), ta[r] = step(model_mm_rows_A, ws, n_w, oa, x, n, scratch);
        ratio[r] = ta[r] / tb[r];
        /* out holds only the last weight's rows per token (each weight writes out[t * rows + r]) */
        same &= !memcmp(oa, ob, sizeof(float) * (size_t)n * (size_t)ws[n_w - 1].shape[0]);
    }
    qsort(ta, rounds, sizeof *ta, by_value);
    qsort(tb, rounds, sizeof *tb, by_value);
    qsort(ratio, rounds, sizeof *ratio, by_value);
    printf("%s, %d layers%s (%d weights, %.1f MB), %s, %d token(s), 1 thread, %d rounds: A min %.2f ms median %.2f, "
           "B min %.2f median %.2f (%.1f GB/s); A / B median %.3f; the last weight's outputs %s\n",
           gemma ? "gemma-3-270m" : "smollm2-135m", layers, head ? " and the head" : "", n_w, bytes / 1e6, type, n,
           rounds,
           ta[0] * 1e3, ta[rounds / 2] * 1e3, tb[0] * 1e3, tb[rounds / 2] * 1e3, bytes / tb[rounds / 2] / 1e9,
           ratio[rounds / 2], same ? "identical" : "DIFFER");
    return same ? 0 : 1;
}
