/*
 * replay.c — attention rows and edited logits of a session (replay.h):
 * qkv_explore_row(s) for the rows (one replay of the query, layers 0..l),
 * qkv_model_replay for the edit, with a hook that reads the edited row.
 */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* w [Hq, n] -> out [n]: the mean of the heads. */
static void mean_heads(float *out, const float *w, int n_head, int n) {
    for (int k = 0; k < n; k++) {
        float sum = 0;
        for (int h = 0; h < n_head; h++) sum += w[(size_t)h * n + k];
        out[k] = sum / (float)n_head;
    }
}

int serve_rows(serve_session *s, float *out, int layer, int head, int q0, int nq, int k0, int nk, char *msg, size_t cap) {
    const int H = qkv_model_get_config(s->m)->n_head, last = q0 + nq - 1;
    float *w = malloc((size_t)(head == QKV_ALL ? H : 1) * (last + 1) * sizeof(float)),
          *row = malloc((size_t)(last + 1) * sizeof(float));
    int rc = w && row ? 0 : (snprintf(msg, cap, "out of memory"), -1);
    for (int i = 0; !rc && i < nq; i++) {
        const int q = q0 + i;
        qkv_error err = {0};
        if (qkv_explore_row(w, s->m, s->ids, q, layer, head, &err)) {
            snprintf(msg, cap, "%s", err.msg);
            rc = -1;
            break;
        }
        if (head == QKV_ALL) mean_heads(row, w, H, q + 1);
        else memcpy(row, w, (size_t)(q + 1) * sizeof(float));
        /* keys [k0, k0 + nk): those after the query are 0 */
        for (int k = 0; k < nk; k++) out[(size_t)i * nk + k] = k0 + k <= q ? row[k0 + k] : 0;
    }
    free(w);
    free(row);
    return rc;
}

int serve_rows_all_layers(serve_session *s, float *out, int q, char *msg, size_t cap) {
    qkv_error err = {0};
    if (!qkv_explore_rows(out, s->m, s->ids, q, &err)) return 0;
    snprintf(msg, cap, "%s", err.msg);
    return -1;
}

/* The edited replay's row of the last query: one head's, or the heads' mean. */
typedef struct {
    int head, n_head, n;
    float *out, *tmp; /* [n] */
} edit_row;

static qkv_status read_edit_row(void *user, const qkv_activation *a, qkv_error *err) {
    const edit_row *r = user;
    if (r->head != QKV_ALL) return qkv_pattern_weights(r->out, a, r->head, 0, 1, 0, r->n, err);
    memset(r->out, 0, (size_t)r->n * sizeof(float));
    for (int h = 0; h < r->n_head; h++) {
        const qkv_status st = qkv_pattern_weights(r->tmp, a, h, 0, 1, 0, r->n, err);
        if (st) return st;
        for (int k = 0; k < r->n; k++) r->out[k] += r->tmp[k] / (float)r->n_head;
    }
    return QKV_OK;
}

int serve_edit_last(serve_session *s, float *after, const qkv_forward_opts *opts, int layer, int head,
                    float *row_before, float *row_after, char *msg, size_t cap) {
    const int q = s->n - 1;
    edit_row r = {.head = head, .n_head = qkv_model_get_config(s->m)->n_head, .n = q + 1, .out = row_after,
                  .tmp = malloc((size_t)(q + 1) * sizeof(float))};
    if (!r.tmp) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = layer, .fn = read_edit_row, .user = &r};
    qkv_forward_opts edit = *opts;
    if (layer >= 0) {
        edit.hooks = &h;
        edit.n_hooks = 1;
    }
    qkv_error err = {0};
    int rc = 0;
    if (qkv_model_replay(s->m, after, q, s->ids[q], &edit, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        rc = -1;
    }
    free(r.tmp);
    if (!rc && layer >= 0) rc = serve_rows(s, row_before, layer, head, q, 1, 0, q + 1, msg, cap);
    return rc;
}
