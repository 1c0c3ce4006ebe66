/*
 * stream.c — perplexity under a bounded KV cache (qkv/probe.h, "probe: stream"):
 * full context, a sliding window, attention sinks plus a window
 * (StreamingLLM, arXiv:2309.17453), and the window recomputed per chunk.
 * The policies are the forward call's mask (qkv_forward_opts) and the
 * model's eviction (qkv_model_evict); this file only decides, before each
 * chunk, what the cache keeps, and scores the chunk's logits. It does not time anything or
 * open models: the caller sizes the model with qkv_stream_rows.
 */
#include "qkv/probe.h"
#include "probe/internal.h"
#include "util/error.h"

#include <stdlib.h>

int qkv_stream_rows(const qkv_stream_params *p, int n) {
    if (p->policy == QKV_STREAM_FULL) return n;
    if (p->policy != QKV_STREAM_RECOMPUTE && p->cache == QKV_STREAM_MASK) return n;
    const int64_t rows = (int64_t)p->window - 1 + p->chunk;
    return rows < n ? (int)rows : n;
}

/* The tokens RECOMPUTE runs again before the chunk at t0 (prepare_chunk). */
static int recompute_prefix(const qkv_stream_params *p, int t0) {
    const int prefix = p->window > p->chunk ? p->window - p->chunk : 0;
    return t0 < prefix ? t0 : prefix;
}

int64_t qkv_stream_steps(const qkv_stream_params *p, int n) {
    int64_t steps = n > 1 ? n - 1 : 0;
    if (p->policy == QKV_STREAM_RECOMPUTE && p->chunk >= 1)
        for (int t0 = 0; t0 < n - 1; t0 += p->chunk) steps += recompute_prefix(p, t0);
    return steps;
}

static qkv_status check_params(const qkv_stream_params *p, qkv_error *err) {
    if (p->policy < QKV_STREAM_FULL || p->policy > QKV_STREAM_RECOMPUTE)
        return util_fail(err, QKV_ERR_INVALID, "stream: unknown policy %d", (int)p->policy);
    if (p->cache < QKV_STREAM_MASK || p->cache > QKV_STREAM_SHIFT)
        return util_fail(err, QKV_ERR_INVALID, "stream: unknown cache mode %d", (int)p->cache);
    if (p->window < 1 || p->chunk < 1)
        return util_fail(err, QKV_ERR_INVALID, "stream: window %d and chunk %d must be >= 1", p->window, p->chunk);
    if (p->policy == QKV_STREAM_SINKS && (p->sinks < 0 || p->sinks >= p->window))
        return util_fail(err, QKV_ERR_INVALID, "stream: sinks %d must be in [0, window %d)", p->sinks, p->window);
    return QKV_OK;
}

/* -log softmax(logits)[target], in double.   logits: [V] */
static double nll_of(const float *logits, int V, int32_t target) {
    return probe_log_sum_exp(logits, V) - logits[target];
}

/* Before the chunk: what the cache keeps (WINDOW, SINKS with eviction) or
 * recomputes (RECOMPUTE). The next chunk's rows then see, through the mask,
 * exactly the keys the policy promises. */
static qkv_status prepare_chunk(qkv_model *m, const int32_t *tokens, int t0, const qkv_stream_params *p,
                                const qkv_forward_opts *o, qkv_error *err) {
    const int len = qkv_model_pos(m), keep = p->window - 1;
    switch (p->policy) {
    case QKV_STREAM_FULL: return QKV_OK;
    case QKV_STREAM_RECOMPUTE: {
        /* a fresh start W - C tokens before the chunk: the chunk's last row
         * then sees exactly W keys, and every row of it the fresh first token
         * (position 0 again, the sink) — sliding-window re-computation at a
         * stride of C. C >= W: no prefix, each row its last W keys. */
        qkv_status st = qkv_model_rewind(m, 0, err);
        const int start = t0 - recompute_prefix(p, t0);
        if (st || t0 == start) return st;
        return qkv_model_forward(m, NULL, tokens + start, t0 - start, 0, o, err);
    }
    case QKV_STREAM_WINDOW:
    case QKV_STREAM_SINKS:
        if (p->cache == QKV_STREAM_MASK || len <= keep) return QKV_OK;
        /* keep rows [0, S) and the last keep - S; S = 0 for a plain window */
        return qkv_model_evict(m, p->policy == QKV_STREAM_SINKS ? p->sinks : 0, len - keep,
                               p->cache == QKV_STREAM_SHIFT, err);
    }
    return QKV_OK;
}

qkv_status qkv_stream_score(float *nll, int *max_rows, qkv_model *m, const int32_t *tokens, int n,
                            const qkv_stream_params *p, qkv_error *err) {
    qkv_status st = check_params(p, err);
    if (st) return st;
    if (n < 2 || !tokens || !nll) return util_fail(err, QKV_ERR_INVALID, "stream: need at least 2 tokens");
    if (qkv_model_n_ctx(m) < qkv_stream_rows(p, n))
        return util_fail(err, QKV_ERR_INVALID, "stream: the model's context %d is below the %d rows needed",
                        qkv_model_n_ctx(m), qkv_stream_rows(p, n));
    const int V = qkv_model_get_config(m)->n_vocab;
    const int C = p->chunk < n ? p->chunk : n;
    float *logits = malloc((size_t)C * V * sizeof(float)); /* [C, V] */
    if (!logits) return util_fail(err, QKV_ERR_NOMEM, "stream: out of memory");
    if ((st = qkv_model_rewind(m, 0, err))) goto done;
    qkv_forward_opts o = {0}; /* FULL: the causal mask */
    if (p->policy == QKV_STREAM_WINDOW || p->policy == QKV_STREAM_RECOMPUTE)
        o = (qkv_forward_opts){.mask = QKV_MASK_WINDOW, .window = p->window};
    else if (p->policy == QKV_STREAM_SINKS)
        o = (qkv_forward_opts){.mask = p->sinks ? QKV_MASK_SINK_WINDOW : QKV_MASK_WINDOW,
                               .window = p->window - p->sinks, .sinks = p->sinks};
    int peak = 0;
    const int64_t total = qkv_stream_steps(p, n);
    int64_t done_steps = 0;
    for (int t0 = 0; t0 < n - 1 && !st; t0 += C) {
        const int c = n - 1 - t0 < C ? n - 1 - t0 : C; /* the last token is never a query */
        if ((st = prepare_chunk(m, tokens, t0, p, &o, err)) ||
            (st = qkv_model_forward(m, logits, tokens + t0, c, 1, &o, err)))
            break;
        done_steps += c + (p->policy == QKV_STREAM_RECOMPUTE ? recompute_prefix(p, t0) : 0);
        if (qkv_model_pos(m) > peak) peak = qkv_model_pos(m);
        for (int k = 0; k < c; k++) nll[t0 + k] = (float)nll_of(logits + (size_t)k * V, V, tokens[t0 + k + 1]);
        st = probe_progress(p->progress, p->progress_user, done_steps, total, "stream", "tokens", err);
    }
    if (max_rows) *max_rows = peak;
done:
    free(logits);
    qkv_model_rewind(m, 0, NULL);
    return st;
}
