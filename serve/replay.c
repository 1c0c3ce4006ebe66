/*
 * replay.c — attention rows and edited logits of a session (replay.h), one
 * replayed position at a time (qkv_model_replay, qkv_model_replay_layers).
 */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the hook reads from the replayed position's hook_pattern (one row). */
typedef struct {
    int head;           /* QKV_ALL: every head (into out [Hq, nk] when per_head, else their mean) */
    int per_head;
    int k0, nk;         /* keys (positions) asked for */
    int reach;          /* keys the replayed row has: its position + 1 */
    int n_head;
    float *out;         /* per_head && layer QKV_ALL: [L, Hq, nk]; per_head: [Hq, nk]; else [nk] */
    int all_layers;
    float *tmp;         /* [nk] */
} row_reader;

/* Head h's row over keys [k0, k0 + nk) into dst, keys past the row's reach 0. */
static qkv_status read_head(const row_reader *r, const qkv_activation *a, int h, float *dst, qkv_error *err) {
    const int have = r->reach - r->k0 < r->nk ? r->reach - r->k0 : r->nk;
    if (have < r->nk) memset(dst + (have > 0 ? have : 0), 0, (size_t)(r->nk - (have > 0 ? have : 0)) * sizeof(float));
    return have > 0 ? qkv_pattern_weights(dst, a, h, 0, 1, r->k0, have, err) : QKV_OK;
}

static qkv_status row_hook(void *user, const qkv_activation *a, qkv_error *err) {
    const row_reader *r = user;
    if (r->per_head) {
        float *base = r->out + (r->all_layers ? (size_t)a->layer * r->n_head * r->nk : 0);
        for (int h = 0; h < r->n_head; h++) {
            const qkv_status st = read_head(r, a, h, base + (size_t)h * r->nk, err);
            if (st) return st;
        }
        return QKV_OK;
    }
    if (r->head != QKV_ALL) return read_head(r, a, r->head, r->out, err);
    memset(r->out, 0, (size_t)r->nk * sizeof(float));
    for (int h = 0; h < r->n_head; h++) {
        const qkv_status st = read_head(r, a, h, r->tmp, err);
        if (st) return st;
        for (int k = 0; k < r->nk; k++) r->out[k] += r->tmp[k] / (float)r->n_head;
    }
    return QKV_OK;
}

/* Replays position q through layers 0..layer (layer QKV_ALL: every layer)
 * with the reader on that layer's hook_pattern. */
static int replay_row(serve_session *s, row_reader *r, int layer, int q, char *msg, size_t cap) {
    const int L = qkv_model_get_config(s->m)->n_layer;
    r->reach = q + 1;
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = layer, .fn = row_hook, .user = r};
    const qkv_forward_opts o = {.hooks = &h, .n_hooks = 1};
    qkv_error err = {0};
    if (qkv_model_replay_layers(s->m, layer == QKV_ALL ? L : layer + 1, q, s->ids[q], &o, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return -1;
    }
    return 0;
}

int serve_rows(serve_session *s, float *out, int layer, int head, int q0, int nq, int k0, int nk, char *msg, size_t cap) {
    row_reader r = {.head = head, .k0 = k0, .nk = nk, .n_head = qkv_model_get_config(s->m)->n_head,
                    .tmp = malloc((size_t)nk * sizeof(float))};
    int rc = r.tmp ? 0 : (snprintf(msg, cap, "out of memory"), -1);
    for (int i = 0; !rc && i < nq; i++) {
        r.out = out + (size_t)i * nk;
        rc = replay_row(s, &r, layer, q0 + i, msg, cap);
    }
    free(r.tmp);
    return rc;
}

int serve_rows_all_layers(serve_session *s, float *out, int q, char *msg, size_t cap) {
    row_reader r = {.per_head = 1, .all_layers = 1, .k0 = 0, .nk = q + 1, .out = out,
                    .n_head = qkv_model_get_config(s->m)->n_head};
    return replay_row(s, &r, QKV_ALL, q, msg, cap);
}

int serve_edit_last(serve_session *s, float *after, const qkv_forward_opts *opts, int layer, int head,
                    float *row_before, float *row_after, char *msg, size_t cap) {
    const int q = s->n - 1;
    row_reader ra = {.head = head, .k0 = 0, .nk = q + 1, .reach = q + 1, .out = row_after,
                     .n_head = qkv_model_get_config(s->m)->n_head, .tmp = malloc((size_t)(q + 1) * sizeof(float))};
    if (!ra.tmp) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = layer, .fn = row_hook, .user = &ra};
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
    if (!rc && layer >= 0) {
        row_reader rb = ra;
        rb.out = row_before;
        rc = replay_row(s, &rb, layer, q, msg, cap);
    }
    free(ra.tmp);
    return rc;
}
