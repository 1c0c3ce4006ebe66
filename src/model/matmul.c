/*
 * matmul.c — activations times GGUF weights. Weights stay quantised in the
 * file's mapping; a block of MATMUL_ROWS weight rows is dequantised into
 * per-thread scratch and dotted with every token of the batch, so prefill
 * pays the dequantisation once per row, not once per token.
 */
#include "model/internal.h"

#include <math.h>
#include <omp.h>

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

void model_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = model_dot(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * inv);
}

void model_matmul(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                  int n_threads) {
    const int64_t rows = w->shape[0], cols = w->shape[1];
    const size_t row_bytes = qkv_ggml_row_size(w->type, cols);
    const int64_t n_blocks = (rows + MATMUL_ROWS - 1) / MATMUL_ROWS;
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
        float *buf = scratch + (size_t)omp_get_thread_num() * MATMUL_ROWS * cols; /* [MATMUL_ROWS, cols] */
        int64_t r0 = b * MATMUL_ROWS, nr = rows - r0 < MATMUL_ROWS ? rows - r0 : MATMUL_ROWS;
        for (int64_t r = 0; r < nr; r++)
            qkv_dequantize(buf + r * cols, (const char *)w->data + (size_t)(r0 + r) * row_bytes, w->type, cols,
                           NULL);
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * cols;
            float *ot = out + (size_t)t * rows + r0;
            for (int64_t r = 0; r < nr; r++) ot[r] = model_dot(xt, buf + r * cols, (int)cols);
        }
    }
}
