/*
 * head_result.c — each attention head's output in the residual basis
 * (TransformerLens's hook_result), from a layer's hook_z: the head's slice
 * of the output projection Wo applied to its z alone. It is the forward's
 * own matmul on rows that hold one head's z each, every other head's entries
 * zero: row (t, h) of the product is head h's result at position t. It does
 * not apply Gemma's post-attention norm: with it the heads do not add up in
 * the residual stream, and the callers say so (qkv_attribute's NaN heads,
 * the Python cache's stack_head_results).
 */
#include "model/state.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* Rows of one matmul: a chunk of positions, Hq rows each, at most this many floats of masked z. */
#define HEAD_RESULT_CHUNK_FLOATS ((size_t)1 << 22)

qkv_status qkv_model_head_result(float *out, qkv_model *m, int layer, const float *z, int n, qkv_error *err) {
    if (!m || !out || !z || n < 1)
        return util_fail(err, QKV_ERR_INVALID, "head_result: need a model, z, out and n >= 1 (n = %d)", n);
    const qkv_model_config *c = &m->cfg;
    if (layer < 0 || layer >= c->n_layer)
        return util_fail(err, QKV_ERR_INVALID, "head_result: layer %d outside [0, %d)", layer, c->n_layer);
    if (n > m->n_ctx)
        return util_fail(err, QKV_ERR_INVALID, "head_result: %d rows exceed the context of %d", n, m->n_ctx);
    const int E = c->n_embd, Hq = c->n_head, D = c->head_dim, QD = Hq * D;
    const size_t per_pos = (size_t)Hq * QD;
    /* positions per matmul, the chunks balanced so that none is a small remainder
     * (a matmul of up to 3 rows sums in another order than the forward's) */
    const int most = per_pos >= HEAD_RESULT_CHUNK_FLOATS ? 1 : (int)(HEAD_RESULT_CHUNK_FLOATS / per_pos);
    const int n_chunks = (n + most - 1) / most, rows = (n + n_chunks - 1) / n_chunks;
    float *zmask = calloc((size_t)rows * per_pos, sizeof *zmask); /* [rows, Hq, QD]: row (t, h) holds z[t, h] at h */
    if (!zmask) return util_fail(err, QKV_ERR_NOMEM, "head_result: out of memory for %d rows", rows);
    for (int t0 = 0; t0 < n; t0 += rows) {
        const int nt = n - t0 < rows ? n - t0 : rows;
        for (int t = 0; t < nt; t++)
            for (int h = 0; h < Hq; h++)
                memcpy(zmask + (size_t)t * per_pos + (size_t)h * QD + (size_t)h * D,
                       z + ((size_t)(t0 + t) * Hq + h) * D, (size_t)D * sizeof *zmask);
        /* out[t0 .. t0+nt, Hq, E] <- zmask Wo^T */
        model_matmul(out + (size_t)t0 * Hq * E, zmask, m->weights->layers[layer].wo, nt * Hq, m->scratch, m->n_threads);
    }
    free(zmask);
    return QKV_OK;
}
