/*
 * model.c — a libqkv model with its sequence split across the ranks
 * (qkv_cp_model): the glue between qkv_model_forward, whose attention each
 * of its calls replaces layer by layer (qkv_forward_opts.replace), and the
 * ring (qkv_cp_attention) or the sharded decode (qkv_cp_decode). Each rank's
 * KV cache holds its own rows only, rotated at their global positions (the
 * call's rope_offset); decoded tokens join the last rank's rows. Each
 * layer's call keeps the layer's own mask (causal or its sliding window)
 * and soft-cap: the model's descriptor carries both, and a window counts
 * back from a row's own position, so it reads the same in global positions.
 * Nothing is installed on the model: the options travel with every call.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct qkv_cp_model {
    qkv_model *m;
    MPI_Comm comm;
    int rank, size;
    qkv_cp_params params;  /* params.stats: NULL, the ring calls write ring_stats */
    qkv_cp_stats *stats;   /* the caller's, or NULL: the last prefill's sum over the layers */
    qkv_cp_stats ring_stats;
    int global_len;     /* tokens of the sequence so far, over all ranks */
    int decoding;       /* 0: the replacement runs the ring; 1: the sharded decode */
    qkv_forward_opts opts; /* every forward call's: replace = replace_attention (user cm), rope_offset */
    void *k, *v;        /* [Hkv, rows, D] dense copies of the rank's cache rows for the ring, cache dtype */
    size_t kv_cap;      /* bytes of each */
};

/* The cache's rows [0, rows) as dense [Hkv, rows, D] in cm->k, cm->v. */
static qkv_status dense_rows(qkv_cp_model *cm, const qkv_kv_cache *c, int rows, int hkv, int D, qkv_error *err) {
    const size_t es = qkv_dtype_size(qkv_kv_cache_dtype(c)), row = (size_t)D * es, need = (size_t)hkv * rows * row;
    if (need > cm->kv_cap) {
        void *k = realloc(cm->k, need), *v = k ? realloc(cm->v, need) : NULL;
        if (k) cm->k = k;
        if (!k || !v) return util_fail(err, QKV_ERR_NOMEM, "context-parallel model: out of memory");
        cm->v = v;
        cm->kv_cap = need;
    }
    const size_t stride = (size_t)qkv_kv_cache_capacity(c) * row;
    for (int h = 0; h < hkv; h++) {
        memcpy((char *)cm->k + h * rows * row, (const char *)qkv_kv_cache_k(c) + h * stride, rows * row);
        memcpy((char *)cm->v + h * rows * row, (const char *)qkv_kv_cache_v(c) + h * stride, rows * row);
    }
    return QKV_OK;
}

/* qkv_attn_replace_fn: the layer's attention over every rank's rows. */
static qkv_status replace_attention(void *user, int layer, float *att, float *lse, const float *q, int n,
                                    const qkv_kv_cache *cache, const qkv_attn_desc *local, qkv_error *err) {
    qkv_cp_model *cm = user;
    (void)layer;
    const int len = qkv_kv_cache_len(cache), D = local->head_dim;
    /* the layer's mask without exclusions (forward refuses them with a replacement) */
    const qkv_mask mask = {.kind = local->mask.kind, .window = local->mask.window, .sinks = local->mask.sinks};
    qkv_attn_desc g = {.n_q_head = local->n_q_head, .n_kv_head = local->n_kv_head, .head_dim = D, .scale = local->scale,
                       .softcap = local->softcap, .mask = mask, .kv_dtype = local->kv_dtype,
                       .n_threads = local->n_threads};
    if (!cm->decoding) {
        qkv_status st = dense_rows(cm, cache, len, g.n_kv_head, D, err);
        if (st) return st;
        g.q_len = g.kv_len = cm->global_len;
        qkv_cp_params p = cm->params;
        qkv_cp_stats one = {0};
        p.layout = QKV_CP_CONTIGUOUS;
        p.stats = &one;
        st = qkv_cp_attention(att, lse, q, cm->k, cm->v, &g, cm->comm, &p, err);
        cm->ring_stats.total_s += one.total_s, cm->ring_stats.compute_s += one.compute_s;
        cm->ring_stats.wait_s += one.wait_s;
        cm->ring_stats.bytes_sent += one.bytes_sent, cm->ring_stats.bytes_received += one.bytes_received;
        cm->ring_stats.blocks_computed += one.blocks_computed;
        cm->ring_stats.blocks_sent += one.blocks_sent, cm->ring_stats.blocks_received += one.blocks_received;
        return st;
    }
    /* decode: every rank appended the new token; only the last rank keeps it */
    const int last = cm->rank == cm->size - 1;
    int mine[1] = {last ? len : len - 1}, start = 0;
    MPI_Request req;
    MPI_Iexscan(mine, &start, 1, MPI_INT, MPI_SUM, cm->comm, &req);
    qkv_status st = qkv_cp_wait(&req, 1, cp_timeout(&cm->params), cm->comm, "the shard offsets", err);
    if (st) return st;
    if (cm->rank == 0) start = 0; /* MPI_Exscan leaves rank 0's result undefined */
    g.q_len = n;
    g.kv_len = cm->global_len + n;
    g.kv_head_stride = local->kv_head_stride;
    const qkv_cp_kv_shard sh = {.k = qkv_kv_cache_k(cache), .v = qkv_kv_cache_v(cache), .start = start, .len = mine[0]};
    return qkv_cp_decode(att, lse, q, &sh, &g, cm->comm, &cm->params, err);
}

qkv_status qkv_cp_model_init(qkv_cp_model **out, qkv_model *m, MPI_Comm comm, const qkv_cp_params *p, qkv_error *err) {
    *out = NULL;
    if (!m) return util_fail(err, QKV_ERR_INVALID, "context-parallel model: model is NULL");
    /* a sliding-window cache drops a rank's early rows while it decodes: the
     * shards of the sharded decode would no longer tile the sequence */
    for (int l = 0; l < qkv_model_get_config(m)->n_layer; l++)
        if (qkv_model_kv_rows(m, l) < qkv_model_n_ctx(m))
            return util_fail(err, QKV_ERR_UNSUPPORTED,
                            "context-parallel model: layer %d keeps a sliding-window cache of %d rows (swa_cache); "
                            "every rank needs a full cache of its own rows (open the model with swa_cache 0)",
                            l, qkv_model_kv_rows(m, l));
    qkv_cp_model *cm = calloc(1, sizeof *cm);
    if (!cm) return util_fail(err, QKV_ERR_NOMEM, "context-parallel model: out of memory");
    cm->m = m;
    cm->comm = comm;
    MPI_Comm_rank(comm, &cm->rank);
    MPI_Comm_size(comm, &cm->size);
    if (p) cm->params = *p;
    cm->stats = cm->params.stats;
    cm->params.stats = NULL;
    cm->opts = (qkv_forward_opts){.replace = replace_attention, .replace_user = cm};
    *out = cm;
    return QKV_OK;
}

void qkv_cp_model_free(qkv_cp_model *cm) {
    if (!cm) return;
    free(cm->k);
    free(cm->v);
    free(cm);
}

/* Rank `from` sends n floats of buf to every rank (bounded). */
static qkv_status share(float *buf, int n, int from, qkv_cp_model *cm, qkv_error *err) {
    MPI_Request req;
    MPI_Ibcast(buf, n, MPI_FLOAT, from, cm->comm, &req);
    return qkv_cp_wait(&req, 1, cp_timeout(&cm->params), cm->comm, "the last rank's logits", err);
}

qkv_status qkv_cp_model_prefill(qkv_cp_model *cm, float *rows_logits, float *last, const int32_t *tokens, int n,
                                qkv_error *err) {
    qkv_cp_rows rows;
    qkv_status st = qkv_cp_rows_of(&rows, n, cm->size, cm->rank, QKV_CP_CONTIGUOUS, err);
    if (!st && qkv_model_rope_pos(cm->m) != 0)
        st = util_fail(err, QKV_ERR_INVALID, "context-parallel model: prefill needs an empty model (at %d)", qkv_model_rope_pos(cm->m));
    if (!st && rows.total + 1 > qkv_model_n_ctx(cm->m))
        st = util_fail(err, QKV_ERR_INVALID, "context-parallel model: rank %d's %d rows exceed its context of %d", cm->rank,
                      rows.total, qkv_model_n_ctx(cm->m));
    const int extra[1] = {n};
    if ((st = cp_check_collective(st, NULL, extra, 1, cm->comm, cp_timeout(&cm->params), err))) return st;
    const int V = qkv_model_get_config(cm->m)->n_vocab, is_last = cm->rank == cm->size - 1;
    cm->decoding = 0;
    cm->global_len = n;
    cm->opts.rope_offset = rows.start[0]; /* the model is at RoPE position 0 */
    cm->ring_stats = (qkv_cp_stats){0};
    float *mine = rows_logits ? rows_logits : is_last ? last : NULL;
    st = qkv_model_forward(cm->m, mine, tokens + rows.start[0], rows.total, rows_logits != NULL, &cm->opts, err);
    if (st) return st; /* the other ranks time out in the ring: the job is lost */
    if (cm->stats) *cm->stats = cm->ring_stats;
    if (is_last && rows_logits) memcpy(last, rows_logits + (size_t)(rows.total - 1) * V, (size_t)V * sizeof(float));
    return share(last, V, cm->size - 1, cm, err);
}

qkv_status qkv_cp_model_decode(qkv_cp_model *cm, float *logits, int32_t token, qkv_error *err) {
    const int pos = qkv_model_pos(cm->m), is_last = cm->rank == cm->size - 1;
    qkv_status st = QKV_OK;
    if (pos + 1 > qkv_model_n_ctx(cm->m))
        st = util_fail(err, QKV_ERR_FULL, "context-parallel model: rank %d's context of %d is full", cm->rank, qkv_model_n_ctx(cm->m));
    if ((st = cp_check_collective(st, NULL, NULL, 0, cm->comm, cp_timeout(&cm->params), err))) return st;
    cm->decoding = 1;
    cm->opts.rope_offset = cm->global_len - qkv_model_rope_pos(cm->m);
    if ((st = qkv_model_forward(cm->m, logits, &token, 1, 0, &cm->opts, err))) return st;
    cm->global_len++;
    /* the token's K/V stays on the last rank only */
    return is_last ? QKV_OK : qkv_model_rewind(cm->m, pos, err);
}
