/*
 * internal.h — what the model files share: the quantised matmul and the
 * small dense kernels of the forward pass.
 */
#ifndef QKV_MODEL_INTERNAL_H
#define QKV_MODEL_INTERNAL_H

#include "qkv.h"

#define MATMUL_ROWS 16 /* weight rows dequantised together (one block per thread) */

/* out[n, rows] = x[n, cols] @ W^T, W: [rows, cols] in its GGUF type.
 * scratch: [n_threads, MATMUL_ROWS, cols] f32 (dequantised weight rows).
 * Each weight row is dequantised once per call, whatever n. */
void model_matmul(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                  int n_threads);

/* out[n] = x[n] * w[n] / sqrt(mean(x^2) + eps)  (LlamaRMSNorm, float32) */
void model_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* sum_i a[i] * b[i] with independent partial sums (vectorises without -ffast-math). */
float model_dot(const float *a, const float *b, int n);

#endif
