/*
 * sequence.c — a model's KV caches and the sequence over them: one cache
 * per layer, holding n_ctx rows, or, in a sliding layer with swa_cache, the
 * last W - 1 + n_batch (the sliding-window cache, include/qkv/model.h). key0[l] is
 * the position of layer l's row 0; positions everywhere else (pos, rewind,
 * evict, exclusions, hook_pattern's keys) are the whole sequence's, the rows
 * of a full cache. Appending (with the window cache's compaction),
 * truncating, rewinding and evicting live here; the pass that appends is
 * forward.c, the allocation of everything else model.c.
 */
#include "model/state.h"
#include "util/error.h"

#include <stdlib.h>

/* A layer's window with swa_cache: W > 0 in a sliding layer whose cache is
 * shorter than n_ctx (W - 1 + n_batch < n_ctx), else 0 (a full cache). */
static int window_cache(const qkv_model *m, int l) {
    return m->attn[l].window > 0 && qkv_kv_cache_capacity(m->cache[l]) < m->n_ctx ? m->attn[l].window : 0;
}

int model_kv_capacity(const qkv_model *m, int l, int swa_cache) {
    const int W = m->attn[l].window;
    if (!swa_cache || W <= 0 || (int64_t)W - 1 + m->n_batch >= m->n_ctx) return m->n_ctx;
    return W - 1 + m->n_batch;
}

qkv_status model_kv_init(qkv_model *m, int swa_cache, qkv_dtype dtype, qkv_error *err) {
    const qkv_model_config *c = &m->cfg;
    m->cache = calloc((size_t)c->n_layer, sizeof *m->cache);
    m->key0 = calloc((size_t)c->n_layer, sizeof *m->key0);
    if (!m->cache || !m->key0) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < c->n_layer; l++) {
        qkv_status st = qkv_kv_cache_init(&m->cache[l], c->n_kv_head, c->head_dim, model_kv_capacity(m, l, swa_cache),
                                          dtype, err);
        if (st) return st;
    }
    return QKV_OK;
}

void model_kv_free(qkv_model *m) {
    if (m->cache)
        for (int l = 0; l < m->cfg.n_layer; l++) qkv_kv_cache_free(m->cache[l]);
    free(m->cache);
    free(m->key0);
}

qkv_status model_kv_append(qkv_model *m, int l, const float *k, const float *v, int n, qkv_error *err) {
    qkv_kv_cache *c = m->cache[l];
    const int len = qkv_kv_cache_len(c), keep = m->attn[l].window - 1;
    /* only a window cache can overflow (a full one holds n_ctx, which the
     * forward call checked): the call's first token sees the W - 1 keys
     * before it, so the rows before those go, and the kept ones move to the
     * front (their keys stay rotated at their positions) */
    if (len + n > qkv_kv_cache_capacity(c) && window_cache(m, l) && len > keep) {
        qkv_status st = qkv_kv_cache_shift(c, 0, len - keep, NULL, err);
        if (st) return st;
        m->key0[l] += len - keep;
    }
    return qkv_kv_cache_append(c, k, v, n, err);
}

void model_kv_truncate(qkv_model *m, int pos) {
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (pos < m->key0[l]) m->key0[l] = pos;
        qkv_kv_cache_truncate(m->cache[l], pos - m->key0[l], NULL);
    }
}

int qkv_model_pos(const qkv_model *m) { return m->key0[0] + qkv_kv_cache_len(m->cache[0]); }
int qkv_model_n_ctx(const qkv_model *m) { return m->n_ctx; }
int qkv_model_n_batch(const qkv_model *m) { return m->n_batch; }
int qkv_model_rope_pos(const qkv_model *m) { return qkv_model_pos(m) + m->rope_offset; }

int qkv_model_kv_rows(const qkv_model *m, int layer) {
    return layer >= 0 && layer < m->cfg.n_layer ? qkv_kv_cache_capacity(m->cache[layer]) : -1;
}

size_t qkv_model_kv_bytes(const qkv_model *m) {
    size_t bytes = 0;
    for (int l = 0; l < m->cfg.n_layer; l++)
        bytes += 2 * (size_t)qkv_kv_cache_capacity(m->cache[l]) * m->cfg.n_kv_head * m->cfg.head_dim *
                 qkv_dtype_size(qkv_kv_cache_dtype(m->cache[l]));
    return bytes;
}

qkv_status qkv_model_rewind(qkv_model *m, int pos, qkv_error *err) {
    if (pos < 0 || pos > qkv_model_pos(m))
        return util_fail(err, QKV_ERR_INVALID, "model: cannot rewind to %d (at %d)", pos, qkv_model_pos(m));
    /* the next token at pos sees the W - 1 positions before it */
    for (int l = 0; l < m->cfg.n_layer && pos > 0; l++) {
        const int W = window_cache(m, l);
        if (W && m->key0[l] > 0 && pos < m->key0[l] + W - 1)
            return util_fail(err, QKV_ERR_INVALID,
                            "model: cannot rewind to %d: layer %d's sliding-window cache (swa_cache) holds positions "
                            "from %d on, and its window needs the %d before; rewind to 0 or to %d or later",
                            pos, l, m->key0[l], W - 1, m->key0[l] + W - 1);
    }
    model_kv_truncate(m, pos);
    if (pos == 0) m->rope_offset = 0;
    return QKV_OK;
}

/* Rotates the keys of rows [from, len) of c by -n positions (RoPE at rope):
 * through f32 copies, then truncate and append, as qkv_kv_cache_shift
 * rotates the rows it moves. */
static qkv_status rotate_back(qkv_kv_cache *c, int from, int n, const qkv_rope *rope, int Hkv, int D, qkv_error *err) {
    const int rows = qkv_kv_cache_len(c) - from;
    if (rows <= 0 || n == 0) return QKV_OK;
    float *k = malloc((size_t)Hkv * rows * D * sizeof(float)), *v = malloc((size_t)Hkv * rows * D * sizeof(float));
    int64_t *back = malloc((size_t)rows * sizeof *back);
    qkv_status st = k && v && back ? QKV_OK : util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    for (int r = 0; r < rows && back; r++) back[r] = -(int64_t)n;
    if (!st) st = qkv_kv_cache_read(k, v, c, from, rows, err); /* k, v: [Hkv, rows, D] */
    qkv_rope pure = *rope; /* a pure rotation: the keys already carry the attention factor once */
    pure.attn_factor = 0;
    if (!st) st = qkv_rope_apply(k, back, &pure, Hkv, rows, D, err);
    if (!st) st = qkv_kv_cache_truncate(c, from, err);
    if (!st) st = qkv_kv_cache_append(c, k, v, rows, err);
    free(k);
    free(v);
    free(back);
    return st;
}

qkv_status qkv_model_evict(qkv_model *m, int from, int n, int shift, qkv_error *err) {
    const int len = qkv_model_pos(m), L = m->cfg.n_layer;
    if (from < 0 || n < 0 || n > len - from)
        return util_fail(err, QKV_ERR_INVALID, "model: cannot evict [%d, %d) of %d cached positions", from, from + n, len);
    /* a window cache loses its rows inside the range; it must keep the keys
     * its window reaches from the new end */
    for (int l = 0; l < L; l++) {
        const int W = window_cache(m, l), k0 = m->key0[l], held = qkv_kv_cache_len(m->cache[l]);
        const int lo = from > k0 ? from : k0, hi = from + n < k0 + held ? from + n : k0 + held;
        const int left = held - (hi > lo ? hi - lo : 0), need = W - 1 < len - n ? W - 1 : len - n;
        if (W && left < need)
            return util_fail(err, QKV_ERR_INVALID,
                            "model: cannot evict [%d, %d): layer %d's sliding-window cache (swa_cache) holds positions "
                            "[%d, %d) and would keep %d, fewer than the %d its window reaches",
                            from, from + n, l, k0, k0 + held, left, need);
    }
    for (int l = 0; l < L; l++) {
        qkv_kv_cache *c = m->cache[l];
        /* a NoPE layer's keys carry no position: they move unrotated */
        const qkv_rope *rope = shift && !m->attn[l].no_rope ? &m->attn[l].rope : NULL;
        const int k0 = m->key0[l], held = qkv_kv_cache_len(c);
        const int lo = from > k0 ? from : k0, hi = from + n < k0 + held ? from + n : k0 + held;
        const int drop = hi > lo ? hi - lo : 0;
        /* rows of the range go, later rows move down (rotated back by n when
         * they are all the range's: a full cache, or a range inside the held rows) */
        qkv_status st = drop ? qkv_kv_cache_shift(c, lo - k0, drop, drop == n ? rope : NULL, err) : QKV_OK;
        /* the range starts before this window cache's rows: rotate its later rows back by n on their own */
        const int after = (from + n > k0 ? from + n : k0) - k0 - drop; /* the first later row, moved */
        if (!st && rope && drop != n) st = rotate_back(c, after, n, rope, m->cfg.n_kv_head, m->cfg.head_dim, err);
        if (st) return st;
        m->key0[l] = k0 - (from >= k0 ? 0 : (k0 - from < n ? k0 - from : n));
    }
    if (!shift) m->rope_offset += n;
    return QKV_OK;
}
