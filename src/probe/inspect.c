/*
 * inspect.c — attention maps of a running model, one weight row at a time.
 * Installed as the model's attention hook, the inspector recomputes the rows
 * of the requested layers and heads from the layer's rotated q, KV cache and
 * the LSE its kernel returned (qkv_attn_weights), a block of rows at a time,
 * and hands each row with its statistics to the caller, in order: layer,
 * then head (as requested), then row. It holds one block of rows
 * ([INSPECT_BLOCK, Lk] floats), so inspecting any prompt needs O(n) memory
 * beyond the model's own, and the model keeps its kernel (flash or decode).
 */
#include "qkv/probe.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INSPECT_BLOCK 64 /* rows recomputed together (in parallel) */

struct qkv_inspect {
    int n_layer, n_head;
    int *layer_index; /* [n_layer] position of the layer in the request, -1 if not requested */
    int *heads;       /* [n_heads] requested heads in order */
    int n_heads;
    int n_first;
    qkv_inspect_row_fn row;
    void *user;
    float *block;     /* [INSPECT_BLOCK, cap] */
    int cap;
};

static qkv_status check_list(const int *v, int n, int limit, const char *what, qkv_error *err) {
    for (int i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= limit)
            return util_fail(err, QKV_ERR_INVALID, "inspect: %s %d outside [0, %d)", what, v[i], limit);
        for (int j = 0; j < i; j++)
            if (v[j] == v[i]) return util_fail(err, QKV_ERR_INVALID, "inspect: %s %d requested twice", what, v[i]);
    }
    return QKV_OK;
}

qkv_status qkv_inspect_init(qkv_inspect **out, const qkv_model_config *cfg, const qkv_inspect_params *p,
                            qkv_error *err) {
    if (!out || !cfg || !p || !p->row) return util_fail(err, QKV_ERR_INVALID, "inspect: NULL argument");
    *out = NULL;
    const int nl = p->layers ? p->n_layers : cfg->n_layer, nh = p->heads ? p->n_heads : cfg->n_head;
    if (nl < 1 || nh < 1) return util_fail(err, QKV_ERR_INVALID, "inspect: no layer or no head requested");
    qkv_status st;
    if (p->layers && (st = check_list(p->layers, nl, cfg->n_layer, "layer", err))) return st;
    if (p->heads && (st = check_list(p->heads, nh, cfg->n_head, "head", err))) return st;
    if (p->layers)
        for (int i = 1; i < nl; i++)
            if (p->layers[i] < p->layers[i - 1])
                return util_fail(err, QKV_ERR_INVALID, "inspect: layers must be in increasing order");
    qkv_inspect *in = calloc(1, sizeof *in);
    if (!in) return util_fail(err, QKV_ERR_NOMEM, "inspect: out of memory");
    in->n_layer = cfg->n_layer;
    in->n_head = cfg->n_head;
    in->layer_index = malloc((size_t)cfg->n_layer * sizeof(int));
    in->heads = malloc((size_t)nh * sizeof(int));
    if (!in->layer_index || !in->heads) {
        qkv_inspect_free(in);
        return util_fail(err, QKV_ERR_NOMEM, "inspect: out of memory");
    }
    for (int l = 0; l < cfg->n_layer; l++) in->layer_index[l] = p->layers ? -1 : l;
    if (p->layers)
        for (int i = 0; i < nl; i++) in->layer_index[p->layers[i]] = i;
    for (int i = 0; i < nh; i++) in->heads[i] = p->heads ? p->heads[i] : i;
    in->n_heads = nh;
    in->n_first = p->n_first > 0 ? p->n_first : 1;
    in->row = p->row;
    in->user = p->user;
    *out = in;
    return QKV_OK;
}

void qkv_inspect_free(qkv_inspect *in) {
    if (!in) return;
    free(in->layer_index);
    free(in->heads);
    free(in->block);
    free(in);
}

qkv_status qkv_inspect_hook(void *user, const qkv_activation *a, qkv_error *err) {
    qkv_inspect *in = user;
    const int layer = a->layer;
    if (layer < 0 || layer >= in->n_layer || in->layer_index[layer] < 0) return QKV_OK;
    const int li = in->layer_index[layer], n = (int)a->shape[1], Lk = (int)a->shape[2];
    if (Lk > in->cap) {
        float *b = realloc(in->block, (size_t)INSPECT_BLOCK * Lk * sizeof(float));
        if (!b) return util_fail(err, QKV_ERR_NOMEM, "inspect: cannot allocate %d rows of %d keys", INSPECT_BLOCK, Lk);
        in->block = b;
        in->cap = Lk;
    }
    for (int hi = 0; hi < in->n_heads; hi++) {
        for (int r0 = 0; r0 < n; r0 += INSPECT_BLOCK) {
            const int nr = n - r0 < INSPECT_BLOCK ? n - r0 : INSPECT_BLOCK;
            qkv_status st = qkv_pattern_weights(in->block, a, in->heads[hi], r0, nr, 0, Lk, err);
            if (st) return st;
            for (int r = 0; r < nr; r++) {
                const float *w = in->block + (size_t)r * Lk;
                qkv_row_stats s;
                qkv_row_stats_of(&s, w, Lk, in->n_first);
                if (in->row(in->user, li, hi, Lk - n + r0 + r, w, Lk, &s))
                    return util_fail(err, QKV_ERR_INVALID, "inspect: the row callback stopped at layer %d head %d",
                                    layer, in->heads[hi]);
            }
        }
    }
    return QKV_OK;
}
