/*
 * explore.c — the explorer's exact rows (qkv_explore_rows, qkv_explore_row):
 * one replay of the query (qkv_model_replay, or replay_layers up to the
 * layer asked for; no unembedding) with a hook on hook_pattern that reads
 * the query's row of each head through qkv_pattern_weights, the forward's
 * own q and LSE against the KV cache. The sequence state is left as it was.
 * The max-pooled overview is overview.c.
 */
#include "qkv/probe.h"
#include "util/error.h"

/* Where the rows of one replay go. */
typedef struct {
    float *w;      /* [L, Hq, pos + 1] (layer QKV_ALL), [Hq, pos + 1] or [pos + 1] */
    int layer;     /* QKV_ALL: every layer */
    int head;      /* QKV_ALL: every head */
    int n_head, n_keys;
} row_reader;

static qkv_status read_rows(void *user, const qkv_activation *a, qkv_error *err) {
    const row_reader *r = user;
    if (r->layer != QKV_ALL && a->layer != r->layer) return QKV_OK;
    const size_t per_head = (size_t)r->n_keys;
    float *out = r->w + (r->layer == QKV_ALL ? (size_t)a->layer * r->n_head * per_head : 0);
    for (int h = 0; h < r->n_head; h++) {
        if (r->head != QKV_ALL && h != r->head) continue;
        /* the replay's one row (row 0) against keys 0 .. pos */
        qkv_status st = qkv_pattern_weights(out + (r->head == QKV_ALL ? h * per_head : 0), a, h, 0, 1, 0, r->n_keys,
                                            err);
        if (st) return st;
    }
    return QKV_OK;
}

/* The rows of r from a replay of pos through layer r->layer (all: every layer). */
static qkv_status replay_rows(row_reader *r, qkv_model *m, const int32_t *tokens, int pos, qkv_error *err) {
    if (!r->w || !m || !tokens) return util_fail(err, QKV_ERR_INVALID, "explore: a NULL argument");
    if (pos < 0 || pos >= qkv_model_pos(m))
        return util_fail(err, QKV_ERR_INVALID, "explore: query %d outside the sequence's [0, %d)", pos,
                        qkv_model_pos(m));
    const qkv_model_config *c = qkv_model_get_config(m);
    if (r->layer != QKV_ALL && (r->layer < 0 || r->layer >= c->n_layer))
        return util_fail(err, QKV_ERR_INVALID, "explore: layer %d outside [0, %d)", r->layer, c->n_layer);
    if (r->head != QKV_ALL && (r->head < 0 || r->head >= c->n_head))
        return util_fail(err, QKV_ERR_INVALID, "explore: head %d outside [0, %d)", r->head, c->n_head);
    r->n_head = c->n_head;
    r->n_keys = pos + 1;
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = r->layer, .fn = read_rows, .user = r};
    const qkv_forward_opts o = {.hooks = &hook, .n_hooks = 1};
    if (r->layer == QKV_ALL) return qkv_model_replay(m, NULL, pos, tokens[pos], &o, err);
    return qkv_model_replay_layers(m, r->layer + 1, pos, tokens[pos], &o, err);
}

qkv_status qkv_explore_rows(float *w, qkv_model *m, const int32_t *tokens, int pos, qkv_error *err) {
    row_reader r = {.w = w, .layer = QKV_ALL, .head = QKV_ALL};
    return replay_rows(&r, m, tokens, pos, err);
}

qkv_status qkv_explore_row(float *w, qkv_model *m, const int32_t *tokens, int pos, int layer, int head,
                           qkv_error *err) {
    if (layer == QKV_ALL) return util_fail(err, QKV_ERR_INVALID, "explore: one layer's row needs a layer >= 0");
    row_reader r = {.w = w, .layer = layer, .head = head};
    return replay_rows(&r, m, tokens, pos, err);
}
