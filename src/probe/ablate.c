/*
 * ablate.c — weight against influence. Each position's key is hidden in
 * turn through the engine's exclusion mask and the change of the last
 * position's next-token distribution is measured (KL in nats, the target's
 * probability, the new top token), beside the attention the last row gave
 * that key in the full run. Rows before the ablated position are never
 * recomputed: their KV cache is kept (rewind, then forward the rest).
 * Also: zero-ablation of whole heads, KL of two logit vectors, Spearman's
 * rank correlation. It does not render or print anything.
 */
#include "qkv/probe.h"
#include "probe/internal.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ statistics */

double qkv_kl_logits(const float *p_logits, const float *q_logits, int n) {
    /* KL = sum_i p_i (log p_i - log q_i), log p_i = p_logits[i] - lse_p */
    const double lp = probe_log_sum_exp(p_logits, n), lq = probe_log_sum_exp(q_logits, n);
    double kl = 0;
    for (int i = 0; i < n; i++) {
        const double a = (double)p_logits[i] - lp;
        kl += exp(a) * (a - ((double)q_logits[i] - lq));
    }
    return kl > 0 ? kl : 0; /* rounding can leave -1e-17 for equal inputs */
}

void qkv_ablate_effect_of(qkv_ablate_effect *e, const float *full_logits, const float *logits, int n_vocab,
                          int32_t target) {
    e->kl = qkv_kl_logits(full_logits, logits, n_vocab);
    e->dp_target = exp((double)logits[target] - probe_log_sum_exp(logits, n_vocab)) -
                   exp((double)full_logits[target] - probe_log_sum_exp(full_logits, n_vocab));
    e->top = probe_argmax(logits, n_vocab);
}

/* The rank of x[i] among x[0..n) (1-based; ties share their mean rank), by
 * counting: O(n) per rank and no memory, so qkv_spearman has no failure to
 * hide (n is a prompt's length: n^2 is small beside the n forward runs). */
static double rank_of(const double *x, int n, int i) {
    int below = 0, equal = 0;
    for (int j = 0; j < n; j++) {
        below += x[j] < x[i];
        equal += x[j] == x[i];
    }
    return below + 0.5 * (equal + 1);
}

double qkv_spearman(const double *x, const double *y, int n) {
    if (n < 2) return NAN;
    double sx = 0, sy = 0, sxy = 0;
    const double mean = 0.5 * (n + 1);
    for (int i = 0; i < n; i++) {
        const double rx = rank_of(x, n, i) - mean, ry = rank_of(y, n, i) - mean;
        sx += rx * rx;
        sy += ry * ry;
        sxy += rx * ry;
    }
    return sx > 0 && sy > 0 ? sxy / sqrt(sx * sy) : NAN;
}

/* ------------------------------------------------- the last row's weights */

/* A hook that keeps the final position's weights on every key, mean and max
 * over the scoped layers and heads. */
typedef struct {
    int last;               /* the final position */
    int layer, head;        /* scope; -1: all */
    int n_layer, n_head;
    double *mean, *max;     /* [last + 1] */
    float *w;               /* [last + 1] one head's row */
    int count;              /* (layer, head) pairs accumulated */
} last_row;

static qkv_status last_row_hook(void *user, const qkv_activation *a, qkv_error *err) {
    last_row *r = user;
    const int n = (int)a->shape[1];
    if (a->pos0 + n - 1 != r->last || (r->layer >= 0 && a->layer != r->layer)) return QKV_OK;
    for (int h = 0; h < r->n_head; h++) {
        if (r->head >= 0 && h != r->head) continue;
        qkv_status st = qkv_pattern_weights(r->w, a, h, n - 1, 1, 0, r->last + 1, err);
        if (st) return st;
        for (int j = 0; j <= r->last; j++) {
            r->mean[j] += r->w[j];
            if (r->w[j] > r->max[j]) r->max[j] = r->w[j];
        }
        r->count++;
    }
    return QKV_OK;
}

/* --------------------------------------------------------------- ablation */

static qkv_status check_target(int32_t target, const qkv_model_config *c, qkv_error *err) {
    if (target < -1 || target >= c->n_vocab)
        return util_fail(err, QKV_ERR_INVALID, "ablate: target %d outside [0, %d)", target, c->n_vocab);
    return QKV_OK;
}

/* The full run's summary: target (or the top token) and its probability. */
static void summarise(qkv_ablate_summary *sum, const float *full, int n_vocab, int32_t target) {
    sum->top_full = probe_argmax(full, n_vocab);
    sum->target = target >= 0 ? target : sum->top_full;
    sum->p_target = exp((double)full[sum->target] - probe_log_sum_exp(full, n_vocab));
    sum->spearman_attn_kl = NAN;
}

/* The whole sequence, or tokens 0 .. n-2 then the last one (QKV_ABLATE_LAST),
 * from an empty cache, under o; logits: [V] of the last token. */
static qkv_status run_full(qkv_model *m, float *logits, const int32_t *tokens, int n, int split,
                           const qkv_forward_opts *o, qkv_error *err) {
    qkv_status st = qkv_model_rewind(m, 0, err);
    if (!st && split) st = qkv_model_forward(m, NULL, tokens, n - 1, 0, o, err);
    if (!st) st = split ? qkv_model_forward(m, logits, tokens + n - 1, 1, 0, o, err)
                        : qkv_model_forward(m, logits, tokens, n, 0, o, err);
    return st;
}

qkv_status qkv_ablate_positions(qkv_ablate_row *rows, qkv_ablate_summary *sum, qkv_model *m,
                                const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err) {
    const qkv_ablate_params defaults = {.scope = QKV_ABLATE_ALL, .layer = -1, .head = -1, .target = -1};
    if (!p) p = &defaults;
    if (!rows || !sum || !m || !tokens) return util_fail(err, QKV_ERR_INVALID, "ablate: a NULL argument");
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab, split = p->scope == QKV_ABLATE_LAST;
    if (n < 2) return util_fail(err, QKV_ERR_INVALID, "ablate: needs at least 2 tokens, got %d", n);
    if (n > qkv_model_n_ctx(m))
        return util_fail(err, QKV_ERR_INVALID, "ablate: %d tokens exceed the model's %d positions", n, qkv_model_n_ctx(m));
    if (p->scope != QKV_ABLATE_ALL && p->scope != QKV_ABLATE_LAST)
        return util_fail(err, QKV_ERR_INVALID, "ablate: unknown scope %d", (int)p->scope);
    if (p->layer < -1 || p->layer >= c->n_layer)
        return util_fail(err, QKV_ERR_INVALID, "ablate: layer %d outside [0, %d)", p->layer, c->n_layer);
    if (p->head < -1 || p->head >= c->n_head)
        return util_fail(err, QKV_ERR_INVALID, "ablate: head %d outside [0, %d)", p->head, c->n_head);
    qkv_status st = check_target(p->target, c, err);
    if (st) return st;

    float *full = malloc((size_t)V * sizeof(float)), *abl = malloc((size_t)V * sizeof(float));
    double *kl = malloc((size_t)n * sizeof(double));
    last_row lr = {.last = n - 1, .layer = p->layer, .head = p->head, .n_layer = c->n_layer, .n_head = c->n_head,
                   .mean = calloc((size_t)n, sizeof(double)), .max = calloc((size_t)n, sizeof(double)),
                   .w = malloc((size_t)n * sizeof(float))};
    if (!full || !abl || !kl || !lr.mean || !lr.max || !lr.w) {
        st = util_fail(err, QKV_ERR_NOMEM, "ablate: out of memory");
        goto done;
    }
    /* tokens run: the full run (n), then per j the rows from j on (ALL) or
     * the last row alone (LAST) */
    const int64_t total = split ? 2 * (int64_t)n : n + (int64_t)n * (n + 1) / 2;
    int64_t done_tokens = n; /* after pass 1 */
    /* pass 1: the full run, keeping the last row's weights */
    const qkv_hook keep_row = {.point = QKV_HOOK_PATTERN, .layer = p->layer, .fn = last_row_hook, .user = &lr};
    if ((st = run_full(m, full, tokens, n, split, &(qkv_forward_opts){.hooks = &keep_row, .n_hooks = 1}, err)) ||
        (st = probe_progress(p->progress, p->progress_user, done_tokens, total, "ablate", "tokens", err)))
        goto done;
    summarise(sum, full, V, p->target);
    /* pass 2: each position hidden in turn; only the rows that can see it
     * rerun. Last position first: a run hiding j rewrites the cache from j
     * on, so the rows kept for the next (smaller) j are still the full run's. */
    for (int j = n - 1; j >= 0; j--) {
        const int from = split ? n - 1 : j;
        const qkv_exclusion hide = {.positions = &j, .n = 1, .layer = p->layer, .head = p->head};
        if ((st = qkv_model_rewind(m, from, err)) ||
            (st = qkv_model_forward(m, abl, tokens + from, n - from, 0,
                                    &(qkv_forward_opts){.exclude = &hide, .n_exclude = 1}, err)))
            goto done;
        done_tokens += n - from;
        if ((st = probe_progress(p->progress, p->progress_user, done_tokens, total, "ablate", "tokens", err)))
            goto done;
        rows[j] = (qkv_ablate_row){.attn_mean = lr.mean[j] / lr.count, .attn_max = lr.max[j]};
        qkv_ablate_effect_of(&rows[j].effect, full, abl, V, sum->target);
        kl[j] = rows[j].effect.kl;
    }
    sum->spearman_attn_kl = qkv_spearman(lr.mean, kl, n);
done:
    qkv_model_rewind(m, 0, NULL);
    free(full);
    free(abl);
    free(kl);
    free(lr.mean);
    free(lr.max);
    free(lr.w);
    return st;
}

qkv_status qkv_ablate_heads(qkv_ablate_effect *effects, qkv_ablate_summary *sum, qkv_model *m,
                            const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err) {
    const qkv_ablate_params defaults = {.layer = -1, .head = -1, .target = -1};
    if (!p) p = &defaults;
    if (!effects || !sum || !m || !tokens) return util_fail(err, QKV_ERR_INVALID, "ablate: a NULL argument");
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab;
    const int32_t target = p->target;
    if (n < 1 || n > qkv_model_n_ctx(m))
        return util_fail(err, QKV_ERR_INVALID, "ablate: %d tokens outside [1, %d]", n, qkv_model_n_ctx(m));
    qkv_status st = check_target(target, c, err);
    if (st) return st;
    const int64_t total = (1 + (int64_t)c->n_layer * c->n_head) * n; /* tokens run: the full forward, then one per head */
    float *full = malloc((size_t)V * sizeof(float)), *abl = malloc((size_t)V * sizeof(float));
    if (!full || !abl) {
        st = util_fail(err, QKV_ERR_NOMEM, "ablate: out of memory");
        goto done;
    }
    if ((st = run_full(m, full, tokens, n, 0, NULL, err)) ||
        (st = probe_progress(p->progress, p->progress_user, n, total, "ablate", "tokens", err)))
        goto done;
    summarise(sum, full, V, target);
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head; h++) {
            const qkv_head_ref zero = {.layer = l, .head = h};
            const int64_t done_tokens = (2 + (int64_t)l * c->n_head + h) * n;
            if ((st = run_full(m, abl, tokens, n, 0, &(qkv_forward_opts){.zero_heads = &zero, .n_zero_heads = 1}, err)) ||
                (st = probe_progress(p->progress, p->progress_user, done_tokens, total, "ablate", "tokens", err)))
                goto done;
            qkv_ablate_effect_of(&effects[(size_t)l * c->n_head + h], full, abl, V, sum->target);
        }
done:
    qkv_model_rewind(m, 0, NULL);
    free(full);
    free(abl);
    return st;
}
