/*
 * forward_opts.c — what one forward call may be asked besides its tokens
 * (qkv_forward_opts): the names of the activation points, the options'
 * checks, the union of the exclusions that apply to a layer or a head, the
 * hooks' calls, and hook_pattern's view of a layer's attention. It holds no
 * state of its own: everything lives in the options and the model's run
 * state, so a call's interventions end with the call. It does not run any
 * layer (llama.c does).
 */
#include "model/internal.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ names */

static const char *const point_names[QKV_HOOK_COUNT] = {
    [QKV_HOOK_EMBED] = "hook_embed",
    [QKV_HOOK_RESID_PRE] = "hook_resid_pre",
    [QKV_HOOK_Q] = "attn.hook_q",
    [QKV_HOOK_K] = "attn.hook_k",
    [QKV_HOOK_V] = "attn.hook_v",
    [QKV_HOOK_ROT_Q] = "attn.hook_rot_q",
    [QKV_HOOK_ROT_K] = "attn.hook_rot_k",
    [QKV_HOOK_PATTERN] = "attn.hook_pattern",
    [QKV_HOOK_Z] = "attn.hook_z",
    [QKV_HOOK_ATTN_OUT] = "hook_attn_out",
    [QKV_HOOK_RESID_MID] = "hook_resid_mid",
    [QKV_HOOK_MLP_OUT] = "hook_mlp_out",
    [QKV_HOOK_RESID_POST] = "hook_resid_post",
    [QKV_HOOK_LN_FINAL] = "ln_final.hook_normalized",
};

const char *qkv_hook_point_name(qkv_hook_point p) {
    return (int)p >= 0 && p < QKV_HOOK_COUNT ? point_names[p] : NULL;
}

int qkv_hook_point_per_layer(qkv_hook_point p) {
    return (int)p >= 0 && p < QKV_HOOK_COUNT && p != QKV_HOOK_EMBED && p != QKV_HOOK_LN_FINAL;
}

int qkv_hook_format(char *buf, size_t size, qkv_hook_point point, int layer) {
    const char *name = qkv_hook_point_name(point);
    if (!name) return snprintf(buf, size, "(point %d)", (int)point);
    if (!qkv_hook_point_per_layer(point)) return snprintf(buf, size, "%s", name);
    if (layer < 0) return snprintf(buf, size, "blocks.*.%s", name);
    return snprintf(buf, size, "blocks.%d.%s", layer, name);
}

qkv_status qkv_hook_parse(qkv_hook_point *point, int *layer, const char *name, qkv_error *err) {
    if (!point || !layer || !name) return util_fail(err, QKV_ERR_INVALID, "hook name: a NULL argument");
    for (int p = 0; p < QKV_HOOK_COUNT; p++)
        if (!qkv_hook_point_per_layer((qkv_hook_point)p) && !strcmp(name, point_names[p])) {
            *point = (qkv_hook_point)p;
            *layer = QKV_ALL;
            return QKV_OK;
        }
    const char *s = name;
    if (!strncmp(s, "blocks.", 7)) {
        s += 7;
        long l = -1;
        if (*s == '*') {
            s++;
        } else if (*s >= '0' && *s <= '9') {
            l = 0;
            while (*s >= '0' && *s <= '9' && l <= QKV_MODEL_MAX_LAYERS) l = l * 10 + (*s++ - '0');
        }
        if (*s == '.' && (l >= 0 ? l < QKV_MODEL_MAX_LAYERS : s[-1] == '*'))
            for (int p = 0; p < QKV_HOOK_COUNT; p++)
                if (qkv_hook_point_per_layer((qkv_hook_point)p) && !strcmp(s + 1, point_names[p])) {
                    *point = (qkv_hook_point)p;
                    *layer = (int)l;
                    return QKV_OK;
                }
    }
    return util_fail(err, QKV_ERR_INVALID,
                    "hook name '%.80s' is not hook_embed, ln_final.hook_normalized or blocks.<L|*>.<point> "
                    "(hook_resid_pre, attn.hook_q/k/v, attn.hook_rot_q/k, attn.hook_pattern, attn.hook_z, "
                    "hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post)",
                    name);
}

/* ----------------------------------------------------------------- checks */

qkv_status forward_opts_check(const qkv_forward_opts *o, const qkv_model_config *c, qkv_error *err) {
    const int L = c->n_layer, H = c->n_head;
    if (o->mask != QKV_MASK_NONE && o->mask != QKV_MASK_CAUSAL && o->mask != QKV_MASK_WINDOW &&
        o->mask != QKV_MASK_SINK_WINDOW)
        return util_fail(err, QKV_ERR_INVALID, "forward: mask kind %d is not causal, window or sink-window", (int)o->mask);
    if ((o->mask == QKV_MASK_WINDOW || o->mask == QKV_MASK_SINK_WINDOW) && (o->window < 1 || o->sinks < 0))
        return util_fail(err, QKV_ERR_INVALID, "forward: mask window %d must be >= 1 and sinks %d >= 0", o->window,
                        o->sinks);
    if (o->n_exclude < 0 || o->n_zero_heads < 0 || o->n_hooks < 0 || o->rope_offset < 0)
        return util_fail(err, QKV_ERR_INVALID, "forward: a negative count or RoPE offset in the options");
    if ((o->n_exclude && !o->exclude) || (o->n_zero_heads && !o->zero_heads) || (o->n_hooks && !o->hooks))
        return util_fail(err, QKV_ERR_INVALID, "forward: an options list is NULL with a nonzero count");
    for (int i = 0; i < o->n_exclude; i++) {
        const qkv_exclusion *e = &o->exclude[i];
        if (e->layer < QKV_ALL || e->layer >= L || e->head < QKV_ALL || e->head >= H)
            return util_fail(err, QKV_ERR_INVALID, "forward: exclusion %d's layer %d head %d outside [-1, %d) x [-1, %d)",
                            i, e->layer, e->head, L, H);
        if (e->n < 0 || (e->n && !e->positions))
            return util_fail(err, QKV_ERR_INVALID, "forward: exclusion %d has %d positions at %p", i, e->n,
                            (const void *)e->positions);
        for (int j = 0; j < e->n; j++)
            if (e->positions[j] < 0)
                return util_fail(err, QKV_ERR_INVALID, "forward: exclusion %d's position %d is negative", i,
                                e->positions[j]);
    }
    for (int i = 0; i < o->n_zero_heads; i++)
        if (o->zero_heads[i].layer < 0 || o->zero_heads[i].layer >= L || o->zero_heads[i].head < 0 ||
            o->zero_heads[i].head >= H)
            return util_fail(err, QKV_ERR_INVALID, "forward: zeroed head (%d, %d) outside [0, %d) x [0, %d)",
                            o->zero_heads[i].layer, o->zero_heads[i].head, L, H);
    for (int i = 0; i < o->n_hooks; i++) {
        const qkv_hook *h = &o->hooks[i];
        if (!qkv_hook_point_name(h->point) || !h->fn)
            return util_fail(err, QKV_ERR_INVALID, "forward: hook %d has point %d and function %s", i, (int)h->point,
                            h->fn ? "set" : "NULL");
        if (qkv_hook_point_per_layer(h->point) && (h->layer < QKV_ALL || h->layer >= L))
            return util_fail(err, QKV_ERR_INVALID, "forward: hook %d's layer %d outside [-1, %d)", i, h->layer, L);
        if (o->replace && h->point == QKV_HOOK_PATTERN)
            return util_fail(err, QKV_ERR_INVALID, "forward: hook_pattern needs the model's own attention, not a replacement");
    }
    if (o->n_logit_ids < 0 || (o->n_logit_ids && !o->logit_ids) || (o->logit_ids && o->n_logit_ids < 1))
        return util_fail(err, QKV_ERR_INVALID, "forward: %d logit ids at %p", o->n_logit_ids, (const void *)o->logit_ids);
    for (int i = 0; i < o->n_logit_ids; i++)
        if (o->logit_ids[i] < 0 || o->logit_ids[i] >= c->n_vocab)
            return util_fail(err, QKV_ERR_INVALID, "forward: logit id %d (entry %d) outside [0, %d)", o->logit_ids[i], i,
                            c->n_vocab);
    if (o->start_layer < 0 || o->start_layer > L)
        return util_fail(err, QKV_ERR_INVALID, "forward: start layer %d outside [0, %d]", o->start_layer, L);
    if (o->start_layer > 0 && !o->start_resid)
        return util_fail(err, QKV_ERR_INVALID, "forward: start layer %d without the residual entering it (start_resid)",
                        o->start_layer);
    if (o->replace && (o->n_exclude || (o->mask != QKV_MASK_NONE && o->mask != QKV_MASK_CAUSAL)))
        return util_fail(err, QKV_ERR_INVALID, "forward: exclusions and masks need the model's own attention, not a replacement");
    return QKV_OK;
}

/* ------------------------------------------------------------- exclusions */

static int applies(const qkv_exclusion *e, int layer, int head) {
    return (e->layer == QKV_ALL || e->layer == layer) && (e->head == QKV_ALL || e->head == head);
}

int forward_opts_exclusions(int *out, unsigned char *mark, const qkv_forward_opts *o, int layer, int head,
                            int key0, int n_keys) {
    int n = 0;
    for (int i = 0; i < o->n_exclude; i++) {
        const qkv_exclusion *e = &o->exclude[i];
        if (!applies(e, layer, head) || (head == QKV_ALL && e->head != QKV_ALL)) continue;
        for (int j = 0; j < e->n; j++) {
            const int p = e->positions[j] - key0;
            if (p >= 0 && p < n_keys && !mark[p]) {
                mark[p] = 1;
                out[n++] = p;
            }
        }
    }
    for (int i = 0; i < n; i++) mark[out[i]] = 0;
    return n;
}

int forward_opts_head_excluded(const qkv_forward_opts *o, int layer, int head) {
    for (int i = 0; i < o->n_exclude; i++)
        if (o->exclude[i].head == head && applies(&o->exclude[i], layer, head) && o->exclude[i].n) return 1;
    return 0;
}

int forward_opts_zeroed(const qkv_forward_opts *o, int layer, int head) {
    for (int i = 0; i < o->n_zero_heads; i++)
        if (o->zero_heads[i].layer == layer && o->zero_heads[i].head == head) return 1;
    return 0;
}

/* ------------------------------------------------------------------ hooks */

int forward_opts_hooked(const qkv_forward_opts *o, qkv_hook_point point, int layer) {
    for (int i = 0; i < o->n_hooks; i++)
        if (o->hooks[i].point == point && (!qkv_hook_point_per_layer(point) || o->hooks[i].layer == QKV_ALL ||
                                           o->hooks[i].layer == layer))
            return 1;
    return 0;
}

qkv_status forward_opts_call(const qkv_forward_opts *o, const qkv_activation *a, qkv_error *err) {
    for (int i = 0; i < o->n_hooks; i++) {
        const qkv_hook *h = &o->hooks[i];
        if (h->point != a->point || (qkv_hook_point_per_layer(a->point) && h->layer != QKV_ALL && h->layer != a->layer))
            continue;
        qkv_error e = {0};
        qkv_status st = h->fn(h->user, a, &e);
        if (st == QKV_OK) continue;
        char name[64];
        qkv_hook_format(name, sizeof name, a->point, a->layer);
        if (e.msg[0]) return util_fail(err, st, "%s", e.msg);
        return util_fail(err, st, "forward: the hook at %s stopped the call (%s)", name, qkv_status_str(st));
    }
    return QKV_OK;
}

/* ------------------------------------------------------ hook_pattern's view */

const float *qkv_attn_view_q(const qkv_attn_view *v) { return v->q; }
const float *qkv_attn_view_lse(const qkv_attn_view *v) { return v->lse; }
const qkv_kv_cache *qkv_attn_view_cache(const qkv_attn_view *v) { return v->cache; }
const qkv_attn_desc *qkv_attn_view_desc(const qkv_attn_view *v) { return &v->desc; }
int qkv_attn_view_key0(const qkv_attn_view *v) { return v->key0; }

qkv_status qkv_attn_view_head_desc(qkv_attn_desc *out, const qkv_attn_view *v, int head, qkv_error *err) {
    if (!out || !v || head < 0 || head >= v->desc.n_q_head)
        return util_fail(err, QKV_ERR_INVALID, "pattern: head %d outside [0, %d)", head, v ? v->desc.n_q_head : 0);
    *out = v->desc;
    if (v->opts && forward_opts_head_excluded(v->opts, v->layer, head)) {
        out->mask.n_exclude = forward_opts_exclusions(v->head_excl, v->mark, v->opts, v->layer, head, v->key0,
                                                      out->kv_len);
        out->mask.exclude = v->head_excl;
    }
    return QKV_OK;
}

qkv_status qkv_pattern_weights(float *w, const qkv_activation *a, int head, int row0, int n_rows, int key0,
                               int n_keys, qkv_error *err) {
    if (!w || !a || a->point != QKV_HOOK_PATTERN || !a->attn)
        return util_fail(err, QKV_ERR_INVALID, "pattern: not a hook_pattern activation");
    const qkv_attn_view *v = a->attn;
    if (head < 0 || head >= a->shape[0] || row0 < 0 || n_rows < 0 || row0 + (int64_t)n_rows > a->shape[1] ||
        key0 < 0 || n_keys < 0 || key0 + (int64_t)n_keys > a->shape[2])
        return util_fail(err, QKV_ERR_INVALID, "pattern: head %d rows [%d, %d) keys [%d, %d) outside [%lld, %lld, %lld]",
                        head, row0, row0 + n_rows, key0, key0 + n_keys, (long long)a->shape[0],
                        (long long)a->shape[1], (long long)a->shape[2]);
    qkv_attn_desc d;
    qkv_status st = qkv_attn_view_head_desc(&d, v, head, err);
    if (st) return st;
    /* keys are positions; a cache that dropped those before v->key0 (a
     * sliding-window cache) held nothing any row's window reaches there */
    const int skip = key0 >= v->key0 ? 0 : v->key0 - key0 < n_keys ? v->key0 - key0 : n_keys;
    const int k0 = key0 + skip - v->key0, n_held = n_keys - skip;
    const void *k = qkv_kv_cache_k(v->cache);
    if (!skip) return qkv_attn_weights(w, v->q, v->lse, k, &d, head, row0, n_rows, k0, n_keys, err);
    for (int r = 0; r < n_rows; r++) { /* [skip zeros, n_held weights] per row of w */
        memset(w + (size_t)r * n_keys, 0, (size_t)skip * sizeof *w);
        st = n_held ? qkv_attn_weights(w + (size_t)r * n_keys + skip, v->q, v->lse, k, &d, head, row0 + r,
                                                  1, k0, n_held, err)
                               : QKV_OK;
        if (st) return st;
    }
    return QKV_OK;
}
