/*
 * head_result.c — each attention head's output in the residual basis
 * (TransformerLens's hook_result), from a layer's hook_z: the head's slice
 * of the output projection Wo applied to its z alone. It runs the forward's
 * own matmul on z with every other head zeroed, so a head's result is, bit
 * for bit, the attention output of a forward call whose other heads of that
 * layer are zeroed (qkv_forward_opts.zero_heads). It does not apply Gemma's
 * post-attention norm: with it the heads do not add up in the residual
 * stream, and the caller says so (the Python cache's stack_head_results).
 */
#include "model/state.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

qkv_status qkv_model_head_result(float *out, qkv_model *m, int layer, const float *z, int n, qkv_error *err) {
    if (!m || !out || !z || n < 1)
        return qkv_fail(err, QKV_ERR_INVALID, "head_result: need a model, z, out and n >= 1 (n = %d)", n);
    const qkv_model_config *c = &m->cfg;
    if (layer < 0 || layer >= c->n_layer)
        return qkv_fail(err, QKV_ERR_INVALID, "head_result: layer %d outside [0, %d)", layer, c->n_layer);
    if (n > m->n_ctx)
        return qkv_fail(err, QKV_ERR_INVALID, "head_result: %d rows exceed the context of %d", n, m->n_ctx);
    const int E = c->n_embd, Hq = c->n_head, D = c->head_dim;
    float *zh = calloc((size_t)n * Hq * D, sizeof *zh); /* [n, Hq*D] head h's z, the other heads 0 */
    float *r = malloc((size_t)n * E * sizeof *r);        /* [n, E] head h's result */
    if (!zh || !r) {
        free(zh);
        free(r);
        return qkv_fail(err, QKV_ERR_NOMEM, "head_result: out of memory for %d rows", n);
    }
    for (int h = 0; h < Hq; h++) {
        for (int t = 0; t < n; t++) {
            float *row = zh + (size_t)t * Hq * D;
            if (h) memset(row + (size_t)(h - 1) * D, 0, (size_t)D * sizeof *row);
            memcpy(row + (size_t)h * D, z + ((size_t)t * Hq + h) * D, (size_t)D * sizeof *row);
        }
        model_matmul(r, zh, m->layers[layer].wo, n, m->scratch, m->n_threads); /* r <- zh Wo^T */
        for (int t = 0; t < n; t++)
            memcpy(out + ((size_t)t * Hq + h) * E, r + (size_t)t * E, (size_t)E * sizeof *out);
    }
    free(zh);
    free(r);
    return QKV_OK;
}
