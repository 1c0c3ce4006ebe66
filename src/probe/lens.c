/*
 * lens.c — the logit lens (qkv/probe.h, "probe: lens"): one forward call keeps
 * every layer's hook_resid_post, then each layer's rows go through the
 * model's own final step (a forward call resumed after the last layer: the
 * final norm, lm_head and any soft-cap are forward.c's, not a copy), a few
 * rows of V logits at a time, and each row's softmax gives its top k and
 * the target's probability. It ranks and does not print.
 */
#include "qkv/probe.h"
#include "probe/internal.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ top k */

/* A min-heap of the k best (value, id) pairs so far, the worst at the root:
 * worse = lower value, or the same value and a higher id. */
typedef struct {
    float *val;
    int32_t *id;
    int size, k;
} top_heap;

static int worse(const top_heap *t, int a, int b) {
    return t->val[a] < t->val[b] || (t->val[a] == t->val[b] && t->id[a] > t->id[b]);
}

static void swap(top_heap *t, int a, int b) {
    const float v = t->val[a];
    const int32_t i = t->id[a];
    t->val[a] = t->val[b], t->id[a] = t->id[b];
    t->val[b] = v, t->id[b] = i;
}

static void sift_down(top_heap *t, int i) {
    for (;;) {
        const int l = 2 * i + 1, r = l + 1;
        int w = i;
        if (l < t->size && worse(t, l, w)) w = l;
        if (r < t->size && worse(t, r, w)) w = r;
        if (w == i) return;
        swap(t, i, w);
        i = w;
    }
}

static void offer(top_heap *t, float v, int32_t id) {
    if (t->size < t->k) {
        int i = t->size++;
        t->val[i] = v, t->id[i] = id;
        while (i > 0 && worse(t, i, (i - 1) / 2)) {
            swap(t, i, (i - 1) / 2);
            i = (i - 1) / 2;
        }
    } else if (v > t->val[0] || (v == t->val[0] && id < t->id[0])) {
        t->val[0] = v, t->id[0] = id;
        sift_down(t, 0);
    }
}

/* ids[k], probs[k] <- the k most likely of logits[V], best first, and the
 * target's probability (target < 0: none). */
static void rank_row(int32_t *ids, float *probs, float *target_prob, top_heap *t, const float *logits, int V,
                     int32_t target) {
    const double lse = probe_log_sum_exp(logits, V);
    t->size = 0;
    for (int32_t i = 0; i < V; i++) offer(t, logits[i], i);
    for (int j = t->k - 1; j >= 0; j--) { /* pop the worst into the last free slot */
        ids[j] = t->id[0];
        probs[j] = (float)exp((double)t->val[0] - lse);
        swap(t, 0, --t->size);
        sift_down(t, 0);
    }
    if (target >= 0) *target_prob = (float)exp((double)logits[target] - lse);
}

/* -------------------------------------------------------------------- lens */

/* Positions whose logit rows are held at once: up to QKV_LENS_LOGIT_FLOATS floats, at least one row. */
static int logit_rows(int V, int n) {
    const int64_t fit = QKV_LENS_LOGIT_FLOATS / V;
    return fit < 1 ? 1 : fit < n ? (int)fit : n;
}

int64_t qkv_lens_bytes(const qkv_model *m, int w, int k) {
    if (!m || w < 1 || k < 1) return -1;
    const qkv_model_config *c = qkv_model_get_config(m);
    return ((int64_t)c->n_layer * w * c->n_embd + (int64_t)logit_rows(c->n_vocab, w) * c->n_vocab) * (int64_t)sizeof(float) +
           (int64_t)k * (int64_t)(sizeof(float) + sizeof(int32_t));
}

qkv_status qkv_lens(qkv_lens_out *out, qkv_model *m, const int32_t *tokens, int n, const qkv_lens_params *p,
                    qkv_error *err) {
    const qkv_lens_params defaults = {.k = 1, .target = -1};
    if (!p) p = &defaults;
    if (!out || !out->top_ids || !out->top_probs || !m || !tokens)
        return util_fail(err, QKV_ERR_INVALID, "lens: a NULL argument");
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, E = c->n_embd, V = c->n_vocab, k = p->k;
    if (n < 1 || n > qkv_model_n_ctx(m))
        return util_fail(err, QKV_ERR_INVALID, "lens: %d tokens outside [1, %d]", n, qkv_model_n_ctx(m));
    if (k < 1 || k > V) return util_fail(err, QKV_ERR_INVALID, "lens: k %d outside [1, %d]", k, V);
    if (p->target < -1 || p->target >= V || (p->target >= 0 && !out->target_prob))
        return util_fail(err, QKV_ERR_INVALID, "lens: target %d outside [-1, %d) or without target_prob", p->target, V);
    const int pos0 = p->pos0, pos1 = p->pos0 || p->pos1 ? p->pos1 : n, w = pos1 - pos0;
    if (pos0 < 0 || pos1 > n || w < 1)
        return util_fail(err, QKV_ERR_INVALID, "lens: positions [%d, %d) not a window of [0, %d)", p->pos0, p->pos1, n);
    const int chunk = logit_rows(V, w);
    float *resid = malloc((size_t)L * w * E * sizeof(float)), *logits = malloc((size_t)chunk * V * sizeof(float));
    top_heap heap = {.val = malloc((size_t)k * sizeof(float)), .id = malloc((size_t)k * sizeof(int32_t)), .k = k};
    qkv_status st = QKV_OK;
    if (!resid || !logits || !heap.val || !heap.id) {
        st = util_fail(err, QKV_ERR_NOMEM, "lens: out of memory for %d tokens", n);
        goto done;
    }
    /* resid: [L, w, E] hook_resid_post at the window, from one forward call over tokens [0, pos1) */
    probe_layer_store keep = {resid, (size_t)w * E, (size_t)pos0 * E};
    const qkv_hook hook = {.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = probe_store_hook, .user = &keep};
    if ((st = qkv_model_rewind(m, 0, err)) ||
        (st = qkv_model_forward(m, NULL, tokens, pos1, 0, &(qkv_forward_opts){.hooks = &hook, .n_hooks = 1}, err)))
        goto done;
    qkv_model_rewind(m, 0, NULL);
    for (int l = 0; l < L; l++)
        for (int r0 = 0; r0 < w; r0 += chunk) {
            const int rows = w - r0 < chunk ? w - r0 : chunk;
            const qkv_forward_opts final_step = {.start_layer = L, .start_resid = resid + ((size_t)l * w + r0) * E};
            if ((st = qkv_model_forward(m, logits, tokens + pos0 + r0, rows, 1, &final_step, err))) goto done;
            for (int r = 0; r < rows; r++) {
                const size_t at = (size_t)l * w + r0 + r;
                rank_row(out->top_ids + at * k, out->top_probs + at * k, out->target_prob ? out->target_prob + at : NULL,
                         &heap, logits + (size_t)r * V, V, p->target);
            }
        }
done:
    qkv_model_rewind(m, 0, NULL);
    free(resid);
    free(logits);
    free(heap.val);
    free(heap.id);
    return st;
}
