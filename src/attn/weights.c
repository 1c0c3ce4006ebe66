/*
 * weights.c — attention weight rows recomputed from what a kernel was given
 * (rotated q, K) and what it returned (LSE), never from a second copy of the
 * attention:
 *   w[i, j] = exp(cap(scale * q_i . k_j) - lse_i)   for keys j visible to row i
 *           = 0                                      for masked keys
 * cap(s) = c tanh(s / c) where the descriptor soft-caps (c = d->softcap > 0,
 * libm's tanhf), else s: the kernels' LSE is over the capped scores.
 * Any row costs one dot product per key asked for, so the sink columns of a
 * row (keys 0 .. k-1) cost k dot products, and no n x n table is ever held.
 */
#include "qkv/attn.h"
#include "util/error.h"
#include "util/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Key j of KV head kvh as f32. k: [Hkv, Lk, D] of dtype t, heads stride apart. */
static const float *key_row(float *buf, const void *k, qkv_dtype t, int64_t stride, int kvh, int j, int D) {
    int64_t off = (int64_t)kvh * stride + (int64_t)j * D;
    if (t == QKV_DTYPE_F32) return (const float *)k + off;
    qkv_convert_to_f32(buf, (const uint16_t *)k + off, t, (size_t)D);
    return buf;
}

/* q . k with four independent partial sums (vectorises without -ffast-math). */
static float dot(const float *a, const float *b, int n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int e = 0;
    for (; e + 4 <= n; e += 4) {
        s0 += a[e] * b[e];
        s1 += a[e + 1] * b[e + 1];
        s2 += a[e + 2] * b[e + 2];
        s3 += a[e + 3] * b[e + 3];
    }
    for (; e < n; e++) s0 += a[e] * b[e];
    return (s0 + s1) + (s2 + s3);
}

/* One call's arguments, shared by its rows (the loop's items). */
typedef struct {
    float *w;             /* [n_rows, n_keys] */
    const float *q;       /* [Hq, Lq, D] */
    const float *lse;     /* [Hq, Lq] */
    const void *k;        /* [Hkv, Lk, D] in kv_dtype, heads stride apart */
    const qkv_attn_desc *d;
    int head, kvh, row0, key0, n_keys, plain_causal;
    int64_t stride;
    float scale;
} weights_call;

/* Row row0 + r of the call's head. */
static void weights_row(void *ctx, int64_t item, int thread) {
    (void)thread;
    const weights_call *c = ctx;
    const qkv_attn_desc *d = c->d;
    const int Lq = d->q_len, Lk = d->kv_len, D = d->head_dim, key0 = c->key0, n_keys = c->n_keys;
    const int r = (int)item, i = c->row0 + r;
    const int p = Lk - Lq + i; /* the row's absolute position (bottom-right aligned) */
    const float *qi = c->q + ((size_t)c->head * Lq + i) * D;
    const float l = c->lse[(size_t)c->head * Lq + i];
    float *wr = c->w + (size_t)r * n_keys;
    float kbuf[QKV_HEAD_DIM_MAX];
    int end = key0 + n_keys;
    if (d->mask.kind != QKV_MASK_NONE && end > p + 1) end = p + 1 > key0 ? p + 1 : key0;
    if (l == -INFINITY) end = key0; /* a fully masked row */
    for (int j = key0; j < end; j++) {
        if (!c->plain_causal && !qkv_mask_visible(&d->mask, Lq, Lk, i, j)) {
            wr[j - key0] = 0;
            continue;
        }
        const float *kj = key_row(kbuf, c->k, d->kv_dtype, c->stride, c->kvh, j, D);
        float s = dot(qi, kj, D) * c->scale;
        if (d->softcap > 0) s = d->softcap * tanhf(s / d->softcap);
        wr[j - key0] = expf(s - l);
    }
    for (int j = end; j < key0 + n_keys; j++) wr[j - key0] = 0;
}

qkv_status qkv_attn_weights(float *w, const float *q, const float *lse, const void *k,
                            const qkv_attn_desc *d, int head, int row0, int n_rows, int key0,
                            int n_keys, qkv_error *err) {
    qkv_status st = qkv_attn_check(d, err);
    if (st) return st;
    if (!w || !q || !lse || !k) return util_fail(err, QKV_ERR_INVALID, "attention weights: a NULL array");
    const int Hq = d->n_q_head, Lq = d->q_len, Lk = d->kv_len, D = d->head_dim;
    if (head < 0 || head >= Hq)
        return util_fail(err, QKV_ERR_INVALID, "attention weights: head %d outside [0, %d)", head, Hq);
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > Lq)
        return util_fail(err, QKV_ERR_INVALID, "attention weights: rows [%d, %d) outside [0, %d)", row0,
                        row0 + n_rows, Lq);
    if (key0 < 0 || n_keys < 0 || key0 + n_keys > Lk)
        return util_fail(err, QKV_ERR_INVALID, "attention weights: keys [%d, %d) outside [0, %d)", key0,
                        key0 + n_keys, Lk);
    weights_call c = {.w = w, .q = q, .lse = lse, .k = k, .d = d, .head = head,
                      .kvh = head / (Hq / d->n_kv_head), .row0 = row0, .key0 = key0, .n_keys = n_keys,
                      .stride = d->kv_head_stride ? d->kv_head_stride : (int64_t)Lk * D,
                      .scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)D)};
    /* Every kind but NONE hides the keys right of the row's position; only
     * windows and exclusions need the full rule per key. */
    c.plain_causal = d->mask.kind == QKV_MASK_CAUSAL && d->mask.n_exclude == 0;
    const int64_t work = (int64_t)n_rows * n_keys * D;
    int nt = d->n_threads > 0 ? d->n_threads : qkv_cpu_count();
    if (work < (1 << 18)) nt = 1;
    util_parallel_for(n_rows, nt, 4, weights_row, &c);
    return QKV_OK;
}
