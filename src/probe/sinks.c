/*
 * sinks.c — how much attention piles on the first tokens, measured on the
 * running model at almost no cost. Installed as the model's attention hook,
 * it takes every query row's weight on keys 0 .. k-1 straight from the
 * kernel's outputs: k dot products against the cached keys and the row's
 * LSE (qkv_attn_weights with n_keys = k), nothing stored. For comparison, a
 * sample of rows (every `every`-th position) is recomputed in full to find
 * each row's strongest key other than token 0.
 *
 * Per layer and head it accumulates, over query rows at positions >= skip:
 *   sink       mean w[0]                        (every row)
 *   first      mean sum_{j<k} w[j]              (every row)
 *   top_other  mean max_{j>=1} w[j]             (sampled rows)
 *   sink_top   share of sampled rows whose strongest key is 0
 *   entropy    mean -sum w ln w                 (sampled rows)
 */
#include "qkv/probe.h"
#include "util/error.h"
#include "util/parallel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double sink, first, top_other, top_other_dist, sink_top, entropy;
    int64_t n_rows, n_sampled;
} sinks_acc;

struct qkv_sinks {
    int n_layer, n_head, n_first, skip, every, n_threads;
    sinks_acc *acc;        /* [L, Hq] */
    qkv_sinks_head *out;   /* [L, Hq] means, filled by qkv_sinks_get */
    float *first;          /* [Hq, cap, k] weights on the first k keys */
    float *rows;           /* [threads, cap] one full row per thread */
    int cap, n_buf_threads;
};

qkv_sinks_params qkv_sinks_params_default(void) {
    return (qkv_sinks_params){.n_first = 4, .skip = 16, .every = 16, .n_threads = 0};
}

qkv_status qkv_sinks_init(qkv_sinks **out, const qkv_model_config *cfg, const qkv_sinks_params *p,
                          qkv_error *err) {
    if (!out || !cfg) return util_fail(err, QKV_ERR_INVALID, "sinks: NULL argument");
    *out = NULL;
    const qkv_sinks_params d = p ? *p : qkv_sinks_params_default();
    if (d.n_first < 1 || d.skip < 0 || d.every < 1 || d.n_threads < 0)
        return util_fail(err, QKV_ERR_INVALID, "sinks: n_first %d, skip %d, every %d, n_threads %d out of range",
                        d.n_first, d.skip, d.every, d.n_threads);
    qkv_sinks *s = calloc(1, sizeof *s);
    if (!s) return util_fail(err, QKV_ERR_NOMEM, "sinks: out of memory");
    s->n_layer = cfg->n_layer;
    s->n_head = cfg->n_head;
    s->n_first = d.n_first;
    s->skip = d.skip;
    s->every = d.every;
    s->n_threads = d.n_threads > 0 ? d.n_threads : qkv_cpu_count();
    s->acc = calloc((size_t)s->n_layer * s->n_head, sizeof *s->acc);
    s->out = calloc((size_t)s->n_layer * s->n_head, sizeof *s->out);
    if (!s->acc || !s->out) {
        qkv_sinks_free(s);
        return util_fail(err, QKV_ERR_NOMEM, "sinks: out of memory");
    }
    *out = s;
    return QKV_OK;
}

void qkv_sinks_free(qkv_sinks *s) {
    if (!s) return;
    free(s->acc);
    free(s->out);
    free(s->first);
    free(s->rows);
    free(s);
}

/* Sizes the buffers for n rows of Lk keys; 1 if out of memory. */
static int grow(qkv_sinks *s, int n, int Lk) {
    const int cap = n > Lk ? n : Lk;
    if (cap <= s->cap) return 0;
    float *f = realloc(s->first, (size_t)s->n_head * cap * s->n_first * sizeof(float));
    if (f) s->first = f;
    float *r = realloc(s->rows, (size_t)s->n_threads * cap * sizeof(float));
    if (r) s->rows = r;
    if (!f || !r) return 1;
    s->cap = cap;
    return 0;
}

/* One hook call's arrays, shared by its heads (the loop's items). */
typedef struct {
    qkv_sinks *s;
    const float *q;   /* [Hq, n, D] */
    const float *lse; /* [Hq, n] */
    const void *kc;   /* the cache's keys */
    const qkv_attn_desc *d1; /* the call's, on one thread */
    int layer, n, pos0, k, Lk;
    _Atomic int failed;
} sinks_call;

/* Head h: its rows' sink columns, and the sampled rows in full. */
static void sinks_head(void *ctx, int64_t item, int thread) {
    sinks_call *c = ctx;
    qkv_sinks *s = c->s;
    const float *q = c->q, *lse = c->lse;
    const void *kc = c->kc;
    const qkv_attn_desc d1 = *c->d1;
    const int h = (int)item, layer = c->layer, n = c->n, pos0 = c->pos0, k = c->k, Lk = c->Lk;
    sinks_acc *a = &s->acc[(size_t)layer * s->n_head + h];
    float *first = s->first + (size_t)h * s->cap * s->n_first;
    float *row = s->rows + (size_t)thread * s->cap;
    qkv_error e;
    /* the sink columns of every row: k dot products each */
    if (qkv_attn_weights(first, q, lse, kc, &d1, h, 0, n, 0, k, &e)) {
        atomic_store(&c->failed, 1);
        return;
    }
    for (int r = 0; r < n; r++) {
        const int p = pos0 + r;
        if (p < s->skip) continue;
        const float *f = first + (size_t)r * k;
        double sum = 0;
        for (int j = 0; j < k; j++) sum += f[j];
        a->sink += f[0];
        a->first += sum;
        a->n_rows++;
        if ((p - s->skip) % s->every) continue;
        /* a sampled row, in full */
        if (qkv_attn_weights(row, q, lse, kc, &d1, h, r, 1, 0, Lk, &e)) {
            atomic_store(&c->failed, 1);
            return;
        }
        qkv_row_stats st;
        qkv_row_stats_of(&st, row, p + 1, 1);
        if (st.top_other >= 0) {
            a->top_other += st.top_other_weight;
            a->top_other_dist += p - st.top_other;
        }
        a->sink_top += st.top == 0;
        a->entropy += st.entropy;
        a->n_sampled++;
    }
}

qkv_status qkv_sinks_hook(void *user, const qkv_activation *a, qkv_error *err) {
    qkv_sinks *s = user;
    const int layer = a->layer;
    if (a->point != QKV_HOOK_PATTERN || !a->attn)
        return util_fail(err, QKV_ERR_INVALID, "sinks: a hook on hook_pattern only");
    if (layer < 0 || layer >= s->n_layer) return QKV_OK;
    const qkv_attn_desc *desc = qkv_attn_view_desc(a->attn);
    const int n = (int)a->shape[1], Lk = desc->kv_len, Hq = desc->n_q_head, k = s->n_first < Lk ? s->n_first : Lk;
    if (Hq != s->n_head) return util_fail(err, QKV_ERR_INVALID, "sinks: %d heads, expected %d", Hq, s->n_head);
    if (grow(s, n, Lk)) return util_fail(err, QKV_ERR_NOMEM, "sinks: cannot allocate rows of %d keys", Lk);
    qkv_attn_desc d1 = *desc;
    d1.n_threads = 1; /* parallel over heads here */
    sinks_call c = {.s = s, .q = qkv_attn_view_q(a->attn), .lse = qkv_attn_view_lse(a->attn),
                    .kc = qkv_kv_cache_k(qkv_attn_view_cache(a->attn)), .d1 = &d1, .layer = layer, .n = n,
                    .pos0 = a->pos0, .k = k, .Lk = Lk};
    util_parallel_for(Hq, s->n_threads, 1, sinks_head, &c);
    if (atomic_load(&c.failed))
        return util_fail(err, QKV_ERR_INVALID, "sinks: recomputing weights failed at layer %d", layer);
    return QKV_OK;
}

const qkv_sinks_head *qkv_sinks_get(qkv_sinks *s, int layer, int head) {
    if (layer < 0 || layer >= s->n_layer || head < 0 || head >= s->n_head) return NULL;
    const sinks_acc *a = &s->acc[(size_t)layer * s->n_head + head];
    qkv_sinks_head *o = &s->out[(size_t)layer * s->n_head + head];
    memset(o, 0, sizeof *o);
    o->n_rows = a->n_rows;
    o->n_sampled = a->n_sampled;
    if (a->n_rows) {
        o->sink = a->sink / (double)a->n_rows;
        o->first = a->first / (double)a->n_rows;
    }
    if (a->n_sampled) {
        o->top_other = a->top_other / (double)a->n_sampled;
        o->top_other_dist = a->top_other_dist / (double)a->n_sampled;
        o->sink_top = a->sink_top / (double)a->n_sampled;
        o->entropy = a->entropy / (double)a->n_sampled;
    }
    return o;
}
