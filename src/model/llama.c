/*
 * llama.c — the Llama forward pass over a GGUF file, top to bottom:
 *   x = embed(tokens)                                   [n, E]
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
 *               rope(q, k) ; cache <- k, v ; o = attention(q, cache)   (libqkv)
 *               x += o Wo
 *               h = rmsnorm(x) ; x += (silu(h Wgate) * (h Wup)) Wdown
 *   logits = rmsnorm(x) Wout                            [n, V]
 * State is split as in llama2.c: config (qkv_model_config), weights (pointers
 * into the GGUF mapping) and run state (activations, KV caches, matmul scratch
 * and one attention plan for every layer, allocated once at open for n_ctx
 * positions: forward never allocates, tests/test_alloc.c counts). What one
 * call changes (masks, exclusions, zeroed heads, hooks at the named
 * activation points) comes with that call (qkv_forward_opts, forward_opts.c)
 * and is never kept.
 *
 * RoPE pairing: llama.cpp's converter permutes the rows of q and k weights so
 * that ggml's "normal" rope, which rotates adjacent pairs (2i, 2i+1), equals
 * HF's rotate-half on the original weights. So a GGUF is run with the
 * interleaved pairing.
 */
#include "model/internal.h"
#include "util/error.h"
#include "util/parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    const qkv_gguf_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
} layer_weights;

struct qkv_model {
    qkv_gguf *gguf;
    qkv_model_config cfg;
    int n_ctx, n_threads;
    /* weights (into the mapping) */
    const qkv_gguf_tensor *tok_embd, *output_norm, *output;
    layer_weights *layers;   /* [L] */
    float *norm_w;           /* [2L + 1, E] norm weights as f32 (attn, ffn per layer; final) */
    float *rope_factors;     /* [D/2] or NULL */
    /* run state, sized for n_ctx tokens */
    qkv_kv_cache **cache;    /* [L] */
    qkv_attn_plan *plan;     /* every layer's attention: up to n_ctx queries against n_ctx keys */
    float *x;                /* [n_ctx, E] residual stream */
    float *h;                /* [n_ctx, E] normed input of a sublayer */
    float *q;                /* [n_ctx, Hq*D] */
    float *k, *v;            /* [n_ctx, Hkv*D] */
    float *qt;               /* [Hq, n_ctx, D] queries, head-major, rotated */
    float *kt, *vt;          /* [Hkv, n_ctx, D] */
    float *att;              /* [Hq, n_ctx, D] attention output, head-major */
    float *lse;              /* [Hq, n_ctx] */
    float *o;                /* [n_ctx, Hq*D] */
    float *gate, *up;        /* [n_ctx, F] */
    float *scratch;          /* [n_threads, MATMUL_ROWS, max cols] */
    int64_t *positions;      /* [n_ctx] */
    int *excl_layer;         /* [n_ctx] the exclusions of one layer's call (every head) */
    int *excl_head;          /* [n_ctx] ... of one head (a rerun, or hook_pattern's rows) */
    unsigned char *excl_mark;/* [n_ctx] zeros between unions */
    /* sequence state */
    int rope_offset;         /* positions evicted without a shift: RoPE position = row + offset */
};

/* ------------------------------------------------------------- loading */

/* Finds a tensor and checks its shape [d0, d1] (d1 = 0: 1-D [d0]) and type. */
static qkv_status find_weight(const qkv_gguf_tensor **out, const qkv_gguf *g, const char *name, int64_t d0,
                              int64_t d1, int optional, qkv_error *err) {
    int64_t id = qkv_gguf_find_tensor(g, name);
    *out = NULL;
    if (id < 0) {
        if (optional) return QKV_OK;
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: missing tensor %s", qkv_gguf_path(g), name);
    }
    const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, id);
    int ok = d1 ? (t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1) : (t->n_elements == d0);
    if (!ok) {
        if (d1)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]",
                            qkv_gguf_path(g), name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 1),
                            (long long)d0, (long long)d1);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor %s has %lld elements, expected %lld", qkv_gguf_path(g), name,
                        (long long)t->n_elements, (long long)d0);
    }
    if (!qkv_dequantize_supported(t->type))
        return qkv_fail(err, QKV_ERR_UNSUPPORTED, "%s: tensor %s has unsupported type %s", qkv_gguf_path(g), name,
                        qkv_ggml_type_name(t->type));
    *out = t;
    return QKV_OK;
}

/* dst[n] <- tensor name, every element finite (and > 0 if positive). */
static qkv_status load_checked(float *dst, const qkv_gguf *g, const char *name, int n, int positive, qkv_error *err) {
    const qkv_gguf_tensor *t;
    qkv_status st = find_weight(&t, g, name, n, 0, 0, err);
    if (st || (st = qkv_dequantize(dst, t->data, t->type, n, err))) return st;
    for (int i = 0; i < n; i++)
        if (!isfinite(dst[i]) || (positive && !(dst[i] > 0)))
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: %s[%d] = %g is not %s", qkv_gguf_path(g), name, i,
                            (double)dst[i], positive ? "finite and > 0" : "finite");
    return QKV_OK;
}

static qkv_status load_norm(float *dst, const qkv_gguf *g, const char *name, int n, qkv_error *err) {
    return load_checked(dst, g, name, n, 0, err);
}

static qkv_status load_weights(qkv_model *m, qkv_error *err) {
    const qkv_gguf *g = m->gguf;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, QD = c->n_head * c->head_dim, KD = c->n_kv_head * c->head_dim, F = c->n_ff;
    qkv_status st;
    if ((st = find_weight(&m->tok_embd, g, "token_embd.weight", c->n_vocab, E, 0, err))) return st;
    if ((st = find_weight(&m->output, g, "output.weight", c->n_vocab, E, 1, err))) return st;
    if (!m->output) m->output = m->tok_embd;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return qkv_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    /* every tensor is found before the norms' buffer is sized from the metadata */
    for (int l = 0; l < c->n_layer; l++) {
        layer_weights *w = &m->layers[l];
        char name[96];
#define WEIGHT(field, suffix, d0, d1)                                           \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                        \
    if ((st = find_weight(&w->field, g, name, d0, d1, 0, err))) return st;
        WEIGHT(attn_norm, "attn_norm.weight", E, 0)
        WEIGHT(wq, "attn_q.weight", QD, E)
        WEIGHT(wk, "attn_k.weight", KD, E)
        WEIGHT(wv, "attn_v.weight", KD, E)
        WEIGHT(wo, "attn_output.weight", E, QD)
        WEIGHT(ffn_norm, "ffn_norm.weight", E, 0)
        WEIGHT(w_gate, "ffn_gate.weight", F, E)
        WEIGHT(w_up, "ffn_up.weight", F, E)
        WEIGHT(w_down, "ffn_down.weight", E, F)
#undef WEIGHT
    }
    m->norm_w = malloc((size_t)(2 * c->n_layer + 1) * E * sizeof(float));
    if (!m->norm_w) return qkv_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < c->n_layer; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if ((st = load_norm(m->norm_w + (size_t)(2 * l) * E, g, name, E, err))) return st;
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if ((st = load_norm(m->norm_w + (size_t)(2 * l + 1) * E, g, name, E, err))) return st;
    }
    if ((st = load_norm(m->norm_w + (size_t)(2 * c->n_layer) * E, g, "output_norm.weight", E, err))) return st;
    /* Llama-3.1 scaling: each frequency is divided by its factor */
    if (qkv_gguf_find_tensor(g, "rope_freqs.weight") >= 0) {
        m->rope_factors = malloc((size_t)(c->head_dim / 2) * sizeof(float));
        if (!m->rope_factors) return qkv_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_checked(m->rope_factors, g, "rope_freqs.weight", c->head_dim / 2, 1, err))) return st;
        m->cfg.rope.freq_factors = m->rope_factors;
    }
    return QKV_OK;
}

/* The memory an allocation may take: physical memory, or less under
 * RLIMIT_AS / RLIMIT_DATA (ulimit -v, -d). */
static double memory_bytes(void) {
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    static const int limits[] = {RLIMIT_AS, RLIMIT_DATA};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        struct rlimit r;
        if (getrlimit(limits[i], &r) == 0 && r.rlim_cur != RLIM_INFINITY && (double)r.rlim_cur < have)
            have = (double)r.rlim_cur;
    }
    return have;
}

static qkv_status alloc_state(qkv_model *m, const qkv_model_params *p, qkv_error *err) {
    const qkv_model_config *c = &m->cfg;
    const size_t N = (size_t)m->n_ctx, E = (size_t)c->n_embd, QD = (size_t)c->n_head * c->head_dim,
                 KD = (size_t)c->n_kv_head * c->head_dim, F = (size_t)c->n_ff;
    size_t max_cols = E > QD ? E : QD;
    if (F > max_cols) max_cols = F;
    /* what the buffers below and the KV cache take, checked before any of them
     * is allocated (in doubles: no size_t product can wrap here) */
    const double need = 4.0 * N * (2.0 * E + 4.0 * QD + 4.0 * KD + c->n_head + 2.0 * F) + 17.0 * N +
                        4.0 * m->n_threads * MATMUL_ROWS * max_cols +
                        2.0 * c->n_layer * N * KD * qkv_dtype_size(p->kv_dtype);
    const double have = memory_bytes();
    if (need > have)
        return qkv_fail(err, QKV_ERR_TOO_LARGE,
                        "model: a context of %d positions needs %.0f bytes (%.1f GiB) of run state and KV cache, "
                        "more than the %.1f GiB of memory there is",
                        m->n_ctx, need, need / (1 << 30), have / (1 << 30));
    m->x = malloc(N * E * 4);
    m->h = malloc(N * E * 4);
    m->q = malloc(N * QD * 4);
    m->k = malloc(N * KD * 4);
    m->v = malloc(N * KD * 4);
    m->qt = malloc(N * QD * 4);
    m->kt = malloc(N * KD * 4);
    m->vt = malloc(N * KD * 4);
    m->att = malloc(N * QD * 4);
    m->lse = malloc(N * (size_t)c->n_head * 4);
    m->o = malloc(N * QD * 4);
    m->gate = malloc(N * F * 4);
    m->up = malloc(N * F * 4);
    m->scratch = malloc((size_t)m->n_threads * MATMUL_ROWS * max_cols * 4);
    m->positions = malloc(N * sizeof(int64_t));
    m->excl_layer = malloc(N * sizeof(int));
    m->excl_head = malloc(N * sizeof(int));
    m->excl_mark = calloc(N, 1);
    m->cache = calloc((size_t)c->n_layer, sizeof *m->cache);
    if (!m->x || !m->h || !m->q || !m->k || !m->v || !m->qt || !m->kt || !m->vt || !m->att || !m->lse || !m->o ||
        !m->gate || !m->up || !m->scratch || !m->positions || !m->excl_layer || !m->excl_head || !m->excl_mark ||
        !m->cache)
        return qkv_fail(err, QKV_ERR_NOMEM, "model: cannot allocate the run state for %d positions", m->n_ctx);
    for (int l = 0; l < c->n_layer; l++) {
        qkv_status st = qkv_kv_cache_init(&m->cache[l], c->n_kv_head, c->head_dim, m->n_ctx, p->kv_dtype, err);
        if (st) return st;
    }
    /* a forward call of n tokens at pos attends n rows to pos + n <= n_ctx keys */
    const qkv_attn_desc max = {.n_q_head = c->n_head, .n_kv_head = c->n_kv_head, .q_len = m->n_ctx,
                               .kv_len = m->n_ctx, .head_dim = c->head_dim, .kv_dtype = p->kv_dtype};
    return qkv_attn_plan_init(&m->plan, &max, QKV_KERNEL_AUTO, m->n_threads, err);
}

qkv_status qkv_model_open(qkv_model **out, const char *path, const qkv_model_params *p, qkv_error *err) {
    if (!out) return qkv_fail(err, QKV_ERR_INVALID, "model: out is NULL");
    *out = NULL;
    const qkv_model_params defaults = {0}; /* zero is every field's default */
    if (!p) p = &defaults;
    if (p->n_ctx < 0 || p->n_threads < 0) return qkv_fail(err, QKV_ERR_INVALID, "model: negative n_ctx or n_threads");
    qkv_model *m = calloc(1, sizeof *m);
    if (!m) return qkv_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    qkv_status st = qkv_gguf_open(&m->gguf, path, err);
    if (!st) st = qkv_model_config_read(&m->cfg, m->gguf, err);
    if (!st) st = load_weights(m, err);
    if (!st) {
        m->n_threads = p->n_threads > 0 ? p->n_threads : qkv_cpu_count();
        m->n_ctx = p->n_ctx > 0 ? p->n_ctx
                                : (m->cfg.n_ctx_train < QKV_MODEL_DEFAULT_CTX ? m->cfg.n_ctx_train : QKV_MODEL_DEFAULT_CTX);
        st = alloc_state(m, p, err);
    }
    if (st) {
        qkv_model_close(m);
        return st;
    }
    *out = m;
    return QKV_OK;
}

void qkv_model_close(qkv_model *m) {
    if (!m) return;
    if (m->cache)
        for (int l = 0; l < m->cfg.n_layer; l++) qkv_kv_cache_free(m->cache[l]);
    free(m->cache);
    qkv_attn_plan_free(m->plan);
    free(m->layers); free(m->norm_w); free(m->rope_factors);
    free(m->x); free(m->h); free(m->q); free(m->k); free(m->v); free(m->qt); free(m->kt); free(m->vt);
    free(m->att); free(m->lse); free(m->o); free(m->gate); free(m->up); free(m->scratch); free(m->positions);
    free(m->excl_layer); free(m->excl_head); free(m->excl_mark);
    qkv_gguf_close(m->gguf);
    free(m);
}

const qkv_model_config *qkv_model_get_config(const qkv_model *m) { return &m->cfg; }
const qkv_gguf *qkv_model_gguf(const qkv_model *m) { return m->gguf; }
int qkv_model_n_ctx(const qkv_model *m) { return m->n_ctx; }
int qkv_model_pos(const qkv_model *m) { return qkv_kv_cache_len(m->cache[0]); }

qkv_status qkv_model_rewind(qkv_model *m, int pos, qkv_error *err) {
    if (pos < 0 || pos > qkv_model_pos(m))
        return qkv_fail(err, QKV_ERR_INVALID, "model: cannot rewind to %d (at %d)", pos, qkv_model_pos(m));
    for (int l = 0; l < m->cfg.n_layer; l++) qkv_kv_cache_truncate(m->cache[l], pos, NULL);
    if (pos == 0) m->rope_offset = 0;
    return QKV_OK;
}

int qkv_model_rope_pos(const qkv_model *m) { return qkv_model_pos(m) + m->rope_offset; }

qkv_status qkv_model_evict(qkv_model *m, int from, int n, int shift, qkv_error *err) {
    const int len = qkv_model_pos(m);
    if (from < 0 || n < 0 || n > len - from)
        return qkv_fail(err, QKV_ERR_INVALID, "model: cannot evict [%d, %d) of %d cached positions", from, from + n, len);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        qkv_status st = qkv_kv_cache_shift(m->cache[l], from, n, shift ? &m->cfg.rope : NULL, err);
        if (st) return st;
    }
    if (!shift) m->rope_offset += n;
    return QKV_OK;
}

/* ------------------------------------------------------------- forward */

/* dst[H, n, D] <- src[n, H*D] */
static void to_head_major(float *dst, const float *src, int n, int H, int D) {
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++)
            memcpy(dst + ((size_t)h * n + t) * D, src + ((size_t)t * H + h) * D, (size_t)D * sizeof(float));
}

/* dst[n, H*D] <- src[H, n, D] */
static void to_token_major(float *dst, const float *src, int n, int H, int D) {
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
            memcpy(dst + ((size_t)t * H + h) * D, src + ((size_t)h * n + t) * D, (size_t)D * sizeof(float));
}


/* One forward call: the model, its options (never NULL here) and its rows. */
typedef struct {
    qkv_model *m;
    const qkv_forward_opts *o;
    int n, pos0;
} fwd_call;

/* Calls the hooks at (point, layer) on x, if any is installed there.
 *   x: shaped as listed at qkv_hook_point (shape[0..ndim)) */
static qkv_status hook_at(const fwd_call *f, qkv_hook_point point, int layer, float *x, int ndim, int64_t d0,
                          int64_t d1, int64_t d2, qkv_error *err) {
    if (!f->o->n_hooks || !forward_opts_hooked(f->o, point, layer)) return QKV_OK;
    const qkv_activation a = {.point = point, .layer = qkv_hook_point_per_layer(point) ? layer : -1,
                              .pos0 = f->pos0, .data = x, .ndim = ndim, .shape = {d0, d1, d2}};
    return forward_opts_call(f->o, &a, err);
}

/* The rotated heads [H, n, D] as hook_rot_q / hook_rot_k see them, [n, H, D]:
 * through tmp ([n, H*D]) and back. */
static qkv_status hook_rotated(const fwd_call *f, qkv_hook_point point, int l, float *heads, float *tmp, int H,
                               qkv_error *err) {
    const int n = f->n, D = f->m->cfg.head_dim;
    if (!f->o->n_hooks || !forward_opts_hooked(f->o, point, l)) return QKV_OK;
    to_token_major(tmp, heads, n, H, D);
    qkv_status st = hook_at(f, point, l, tmp, 3, n, H, D, err);
    if (!st) to_head_major(heads, tmp, n, H, D);
    return st;
}

/* The interventions on single heads of layer l after its attention call
 * (desc: that call): a head-scoped exclusion reruns that head's rows with
 * its keys hidden, over its own KV head; a zeroed head gets O = 0 (before
 * Wo) for every row. */
static qkv_status intervene_heads(const fwd_call *f, int l, const qkv_attn_desc *desc, qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_forward_opts *o = f->o;
    const int n = f->n, D = m->cfg.head_dim, Hq = m->cfg.n_head;
    const qkv_kv_cache *c = m->cache[l];
    for (int h = 0; h < Hq && o->n_exclude; h++) {
        if (!forward_opts_head_excluded(o, l, h)) continue;
        const size_t es = qkv_dtype_size(qkv_kv_cache_dtype(c));
        const int kvh = h / (Hq / m->cfg.n_kv_head);
        qkv_attn_desc one = *desc;
        one.n_q_head = one.n_kv_head = 1;
        one.mask.exclude = m->excl_head;
        one.mask.n_exclude = forward_opts_exclusions(m->excl_head, m->excl_mark, o, l, h, desc->kv_len);
        const char *k = (const char *)qkv_kv_cache_k(c) + (size_t)kvh * desc->kv_head_stride * es;
        const char *v = (const char *)qkv_kv_cache_v(c) + (size_t)kvh * desc->kv_head_stride * es;
        qkv_status st = qkv_attn_run(m->plan, m->att + (size_t)h * n * D, m->lse + (size_t)h * n,
                                     m->qt + (size_t)h * n * D, k, v, &one, err);
        if (st) return st;
    }
    for (int i = 0; i < o->n_zero_heads; i++)
        if (o->zero_heads[i].layer == l)
            memset(m->att + (size_t)o->zero_heads[i].head * n * D, 0, (size_t)n * D * sizeof(float));
    return QKV_OK;
}

/* x += attention(rmsnorm(x)) Wo, with the hooks from resid_pre to resid_mid. */
static qkv_status attention_layer(const fwd_call *f, int l, qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_forward_opts *o = f->o;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, Hq = c->n_head, Hkv = c->n_kv_head, D = c->head_dim, n = f->n, pos0 = f->pos0;
    const float *norm = m->norm_w + (size_t)(2 * l) * E;
    const layer_weights *w = &m->layers[l];
    qkv_status st;
    if ((st = hook_at(f, QKV_HOOK_RESID_PRE, l, m->x, 2, n, E, 0, err))) return st;
    for (int t = 0; t < n; t++) model_rmsnorm(m->h + (size_t)t * E, m->x + (size_t)t * E, norm, E, c->norm_eps);
    const model_mm_out qkv[3] = {{m->q, w->wq}, {m->k, w->wk}, {m->v, w->wv}};
    model_matmul_group(qkv, 3, m->h, n, m->scratch, m->n_threads);
    if ((st = hook_at(f, QKV_HOOK_Q, l, m->q, 3, n, Hq, D, err)) ||
        (st = hook_at(f, QKV_HOOK_K, l, m->k, 3, n, Hkv, D, err)) ||
        (st = hook_at(f, QKV_HOOK_V, l, m->v, 3, n, Hkv, D, err)))
        return st;
    to_head_major(m->qt, m->q, n, Hq, D);
    to_head_major(m->kt, m->k, n, Hkv, D);
    to_head_major(m->vt, m->v, n, Hkv, D);
    if ((st = qkv_rope_apply(m->qt, m->positions, &c->rope, Hq, n, D, err)) ||
        (st = qkv_rope_apply(m->kt, m->positions, &c->rope, Hkv, n, D, err)) ||
        (st = hook_rotated(f, QKV_HOOK_ROT_Q, l, m->qt, m->q, Hq, err)) ||
        (st = hook_rotated(f, QKV_HOOK_ROT_K, l, m->kt, m->k, Hkv, err)) ||
        (st = qkv_kv_cache_append(m->cache[l], m->kt, m->vt, n, err)))
        return st;
    qkv_attn_desc desc = {.n_q_head = Hq, .n_kv_head = Hkv, .q_len = n, .kv_len = pos0 + n, .head_dim = D,
                          .mask = {.kind = o->mask == QKV_MASK_NONE ? QKV_MASK_CAUSAL : o->mask,
                                   .window = o->window, .sinks = o->sinks},
                          .kv_dtype = qkv_kv_cache_dtype(m->cache[l]),
                          .kv_head_stride = (int64_t)qkv_kv_cache_capacity(m->cache[l]) * D,
                          .n_threads = m->n_threads};
    if (o->n_exclude) {
        desc.mask.n_exclude = forward_opts_exclusions(m->excl_layer, m->excl_mark, o, l, QKV_ALL, desc.kv_len);
        desc.mask.exclude = m->excl_layer;
    }
    if (o->replace)
        st = o->replace(o->replace_user, l, m->att, m->lse, m->qt, n, m->cache[l], &desc, err);
    else
        st = qkv_attn_run_cached(m->plan, m->att, m->lse, m->qt, m->cache[l], &desc, err);
    if (st || (st = intervene_heads(f, l, &desc, err))) return st;
    if (o->n_hooks && forward_opts_hooked(o, QKV_HOOK_PATTERN, l)) {
        const qkv_attn_view view = {.q = m->qt, .lse = m->lse, .cache = m->cache[l], .desc = desc, .opts = o,
                                    .head_excl = m->excl_head, .mark = m->excl_mark};
        const qkv_activation a = {.point = QKV_HOOK_PATTERN, .layer = l, .pos0 = pos0, .ndim = 3,
                                  .shape = {Hq, n, pos0 + n}, .attn = &view};
        if ((st = forward_opts_call(o, &a, err))) return st;
    }
    to_token_major(m->o, m->att, n, Hq, D);
    if ((st = hook_at(f, QKV_HOOK_Z, l, m->o, 3, n, Hq, D, err))) return st;
    model_matmul(m->h, m->o, w->wo, n, m->scratch, m->n_threads); /* h <- o Wo^T */
    if ((st = hook_at(f, QKV_HOOK_ATTN_OUT, l, m->h, 2, n, E, 0, err))) return st;
    for (size_t i = 0; i < (size_t)n * E; i++) m->x[i] += m->h[i];
    return hook_at(f, QKV_HOOK_RESID_MID, l, m->x, 2, n, E, 0, err);
}

/* x += SwiGLU(rmsnorm(x)), with the hooks mlp_out and resid_post. */
static qkv_status ffn_layer(const fwd_call *f, int l, qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, F = c->n_ff, n = f->n;
    const float *norm = m->norm_w + (size_t)(2 * l + 1) * E;
    const layer_weights *w = &m->layers[l];
    for (int t = 0; t < n; t++) model_rmsnorm(m->h + (size_t)t * E, m->x + (size_t)t * E, norm, E, c->norm_eps);
    const model_mm_out gate_up[2] = {{m->gate, w->w_gate}, {m->up, w->w_up}};
    model_matmul_group(gate_up, 2, m->h, n, m->scratch, m->n_threads);
    for (size_t i = 0; i < (size_t)n * F; i++) {
        float g = m->gate[i];
        m->gate[i] = g / (1.0f + expf(-g)) * m->up[i]; /* SiLU(gate) * up */
    }
    model_matmul(m->h, m->gate, w->w_down, n, m->scratch, m->n_threads);
    qkv_status st = hook_at(f, QKV_HOOK_MLP_OUT, l, m->h, 2, n, E, 0, err);
    if (st) return st;
    for (size_t i = 0; i < (size_t)n * E; i++) m->x[i] += m->h[i];
    return hook_at(f, QKV_HOOK_RESID_POST, l, m->x, 2, n, E, 0, err);
}

/* Embedding, the layers and the final norm; logits as qkv_model_forward. */
static qkv_status forward_layers(const fwd_call *f, float *logits, const int32_t *tokens, int all_logits,
                                 qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, n = f->n;
    const size_t emb_row = qkv_ggml_row_size(m->tok_embd->type, E);
    for (int t = 0; t < n; t++) {
        qkv_status st = qkv_dequantize(m->x + (size_t)t * E, (const char *)m->tok_embd->data + (size_t)tokens[t] * emb_row,
                                       m->tok_embd->type, E, err);
        if (st) return st;
        m->positions[t] = (int64_t)f->pos0 + m->rope_offset + f->o->rope_offset + t;
    }
    qkv_status st = hook_at(f, QKV_HOOK_EMBED, -1, m->x, 2, n, E, 0, err);
    for (int l = 0; l < c->n_layer && !st; l++)
        if (!(st = attention_layer(f, l, err))) st = ffn_layer(f, l, err);
    if (st) return st;
    const float *norm = m->norm_w + (size_t)(2 * c->n_layer) * E;
    const int hooked = f->o->n_hooks && forward_opts_hooked(f->o, QKV_HOOK_LN_FINAL, -1);
    if (!logits && !hooked) return QKV_OK;
    /* rows first .. n-1 are normed into h (all of them when a hook reads them:
     * it sees them before the weight, as TransformerLens's RMSNorm) */
    const int first = all_logits || hooked ? 0 : n - 1, out0 = all_logits ? 0 : n - 1;
    if (hooked) {
        for (int t = 0; t < n; t++) model_rms_normalize(m->h + (size_t)t * E, m->x + (size_t)t * E, E, c->norm_eps);
        if ((st = hook_at(f, QKV_HOOK_LN_FINAL, -1, m->h, 2, n, E, 0, err))) return st;
        for (int t = out0; t < n && logits; t++)
            for (int i = 0; i < E; i++) m->h[(size_t)t * E + i] *= norm[i];
    } else {
        for (int t = first; t < n; t++)
            model_rmsnorm(m->h + (size_t)(t - first) * E, m->x + (size_t)t * E, norm, E, c->norm_eps);
    }
    if (!logits) return QKV_OK;
    model_matmul(logits, m->h + (size_t)(out0 - first) * E, m->output, n - out0, m->scratch, m->n_threads);
    return QKV_OK;
}

qkv_status qkv_model_forward(qkv_model *m, float *logits, const int32_t *tokens, int n, int all_logits,
                             const qkv_forward_opts *opts, qkv_error *err) {
    const qkv_forward_opts plain = {0}; /* zero is the plain forward */
    const fwd_call f = {.m = m, .o = opts ? opts : &plain, .n = n, .pos0 = qkv_model_pos(m)};
    if (n < 1 || !tokens) return qkv_fail(err, QKV_ERR_INVALID, "forward: no tokens");
    if (n > m->n_ctx - f.pos0)
        return qkv_fail(err, QKV_ERR_FULL, "forward: %d tokens at position %d exceed the context of %d", n, f.pos0,
                        m->n_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->cfg.n_vocab)
            return qkv_fail(err, QKV_ERR_INVALID, "forward: token id %d outside [0, %d)", tokens[t], m->cfg.n_vocab);
    qkv_status st = forward_opts_check(f.o, &m->cfg, err);
    if (st) return st;
    if ((st = forward_layers(&f, logits, tokens, all_logits, err)))
        for (int l = 0; l < m->cfg.n_layer; l++) qkv_kv_cache_truncate(m->cache[l], f.pos0, NULL);
    return st;
}
