/*
 * replay.c — attention rows and edited logits of a session (replay.h).
 * Rows of queries from q0 on: the cache is rewound to q0 and positions
 * q0 .. n-1 run again in chunks of SERVE_CHUNK, a hook on hook_pattern
 * reading the asked-for rows in the first chunk; the cache then holds the
 * same sequence again (its rows recomputed: equal up to float rounding,
 * the chunks starting at q0 rather than at multiples of SERVE_CHUNK).
 */
#include "replay.h"
#include "server.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int layer;          /* QKV_ALL: every layer (out [L, Hq, nk], one row each) */
    int head;           /* QKV_ALL: the mean of the heads, unless all_heads */
    int all_heads;
    int r0, nq, k0, nk; /* rows of the call, keys (positions) */
    int n_keys_call;    /* keys the call's rows can reach: q0 + chunk */
    int n_head;
    float *out, *tmp;   /* tmp: [nq, nk] */
} row_reader;

/* Rows [r0, r0 + nq) of `head` over keys [k0, k0 + nk) into dst, keys past the call's zero. */
static qkv_status read_head(const row_reader *r, const qkv_activation *a, int head, float *dst, qkv_error *err) {
    const int reach = r->n_keys_call - r->k0 < r->nk ? r->n_keys_call - r->k0 : r->nk;
    if (reach <= 0) {
        memset(dst, 0, (size_t)r->nq * r->nk * sizeof(float));
        return QKV_OK;
    }
    if (reach == r->nk) return qkv_pattern_weights(dst, a, head, r->r0, r->nq, r->k0, r->nk, err);
    float *w = r->tmp;
    const qkv_status st = qkv_pattern_weights(w, a, head, r->r0, r->nq, r->k0, reach, err);
    for (int i = 0; i < r->nq; i++) {
        memcpy(dst + (size_t)i * r->nk, w + (size_t)i * reach, (size_t)reach * sizeof(float));
        memset(dst + (size_t)i * r->nk + reach, 0, (size_t)(r->nk - reach) * sizeof(float));
    }
    return st;
}

static qkv_status row_hook(void *user, const qkv_activation *a, qkv_error *err) {
    const row_reader *r = user;
    const size_t plane = (size_t)r->nq * r->nk;
    if (r->layer == QKV_ALL) {
        for (int h = 0; h < r->n_head; h++) {
            const qkv_status st = read_head(r, a, h, r->out + ((size_t)a->layer * r->n_head + h) * plane, err);
            if (st) return st;
        }
        return QKV_OK;
    }
    if (r->all_heads || r->head != QKV_ALL) {
        for (int h = r->all_heads ? 0 : r->head; h < (r->all_heads ? r->n_head : r->head + 1); h++) {
            const qkv_status st = read_head(r, a, h, r->out + (r->all_heads ? (size_t)h * plane : 0), err);
            if (st) return st;
        }
        return QKV_OK;
    }
    float *sum = calloc(plane, sizeof(float)), *one = malloc(plane * sizeof(float));
    qkv_status st = sum && one ? QKV_OK : QKV_ERR_NOMEM;
    for (int h = 0; !st && h < r->n_head; h++)
        if (!(st = read_head(r, a, h, one, err)))
            for (size_t i = 0; i < plane; i++) sum[i] += one[i];
    for (size_t i = 0; !st && i < plane; i++) r->out[i] = sum[i] / (float)r->n_head;
    free(sum);
    free(one);
    return st;
}

/* Runs positions q0 .. n-1 again, the first chunk with opts (hooks,
 * interventions); the last chunk's logits into logits. 0, or -1 with msg. */
static int rerun(serve_session *s, int q0, const qkv_forward_opts *first, float *logits, char *msg, size_t cap) {
    qkv_error err = {0};
    if (qkv_model_rewind(s->m, q0, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return -1;
    }
    for (int p = q0; p < s->n;) {
        const int chunk = s->n - p < SERVE_CHUNK ? s->n - p : SERVE_CHUNK;
        if (qkv_model_forward(s->m, p + chunk == s->n ? logits : NULL, s->ids + p, chunk, 0, p == q0 ? first : NULL, &err)) {
            snprintf(msg, cap, "%s", err.msg);
            /* whatever the hook said, the sequence must be whole again */
            if (qkv_model_pos(s->m) != s->n) {
                char ignore[8];
                return rerun(s, qkv_model_pos(s->m), NULL, s->logits, ignore, sizeof ignore) ? -2 : -1;
            }
            return -1;
        }
        p += chunk;
    }
    return 0;
}

static int run_reader(serve_session *s, row_reader *r, int q0, char *msg, size_t cap) {
    const int chunk = s->n - q0 < SERVE_CHUNK ? s->n - q0 : SERVE_CHUNK;
    r->n_keys_call = q0 + chunk;
    r->n_head = qkv_model_get_config(s->m)->n_head;
    r->tmp = malloc((size_t)r->nq * r->nk * sizeof(float));
    if (!r->tmp) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = r->layer, .fn = row_hook, .user = r};
    const qkv_forward_opts o = {.hooks = &h, .n_hooks = 1};
    const int rc = rerun(s, q0, &o, s->logits, msg, cap);
    free(r->tmp);
    return rc;
}

int serve_rows(serve_session *s, float *out, int layer, int head, int all_heads, int q0, int nq, int k0, int nk,
               char *msg, size_t cap) {
    row_reader r = {.layer = layer, .head = head, .all_heads = all_heads, .r0 = 0, .nq = nq, .k0 = k0, .nk = nk, .out = out};
    return run_reader(s, &r, q0, msg, cap);
}

int serve_rows_all_layers(serve_session *s, float *out, int q, char *msg, size_t cap) {
    row_reader r = {.layer = QKV_ALL, .nq = 1, .k0 = 0, .nk = q + 1, .out = out};
    return run_reader(s, &r, q, msg, cap);
}

int serve_edit_last(serve_session *s, float *after, const qkv_forward_opts *opts, int layer, int head,
                    float *row_before, float *row_after, char *msg, size_t cap) {
    const int q = s->n - 1;
    row_reader ra = {.layer = layer, .head = head, .nq = 1, .k0 = 0, .nk = q + 1, .out = row_after,
                     .n_keys_call = s->n, .n_head = qkv_model_get_config(s->m)->n_head};
    row_reader rb = ra;
    rb.out = row_before;
    const qkv_hook ha = {.point = QKV_HOOK_PATTERN, .layer = layer, .fn = row_hook, .user = &ra};
    const qkv_hook hb = {.point = QKV_HOOK_PATTERN, .layer = layer, .fn = row_hook, .user = &rb};
    qkv_forward_opts edit = *opts, plain = {0};
    if (layer >= 0) {
        edit.hooks = &ha;
        edit.n_hooks = 1;
        plain.hooks = &hb;
        plain.n_hooks = 1;
    }
    int rc = rerun(s, q, &edit, after, msg, cap);
    /* the plain run of the last token puts its cache rows back (and reads the row before the edit) */
    char msg2[256];
    const int rc2 = rerun(s, q, &plain, s->logits, msg2, sizeof msg2);
    if (!rc && rc2) {
        snprintf(msg, cap, "%s", msg2);
        rc = rc2;
    }
    return rc;
}
