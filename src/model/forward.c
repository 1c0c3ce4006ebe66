/*
 * forward.c — one forward pass over a GGUF model, top to bottom, every
 * family in one block (config.c says which parts a family has):
 *   x = embed(tokens) * embd_scale                              [n, E]
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq (+ bq), h Wk (+ bk), h Wv (+ bv)
 *               q, k = rmsnorm per head, or over the whole projection (QK-norm)
 *               rope(q, k) at the layer's base
 *               (none on a NoPE layer)
 *               cache <- k, v ; o = attention(q, cache)  (libqkv: causal or the
 *               layer's window, soft-capped scores)
 *               x += post_norm(o Wo)
 *               h = rmsnorm(x) ; x += post_norm((act(h Wgate) * (h Wup)) Wdown)
 *   logits = softcap(rmsnorm(x) Wout)                           [n, V]
 * post_norm is Gemma's sandwich norm and OLMo 2's (identity elsewhere); OLMo 2
 * has no pre-norm (h = x), act SiLU or GELU (tanh). The run state is
 * allocated at open (model.c): forward never allocates, tests/test_alloc.c counts. What one call changes (masks,
 * exclusions, zeroed heads, hooks at the named activation points) comes with
 * that call (qkv_forward_opts, forward_opts.c) and is never kept; a
 * resumed call (start_resid) enters at a later layer with a given residual
 * and takes the rows it appended to the KV caches off again.
 *
 * RoPE pairing: llama.cpp's converter permutes the rows of llama's q and k
 * weights so that ggml's "normal" rope, which rotates adjacent pairs (2i,
 * 2i+1), equals HF's rotate-half on the original weights (smollm3's
 * converter is llama's); the other families are stored as trained and run
 * rotate-half ("neox").
 */
#include "model/state.h"
#include "util/error.h"

#include <math.h>
#include <string.h>

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


/* x[n, width] += b[width] on every row */
static void add_bias(float *x, const float *b, int n, int width) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) x[(size_t)t * width + i] += b[i];
}

/* Every vector of x[n_vec, dim] RMS-normed in place with weight w[dim]:
 * QK-norm (one vector per head, or per row of the projection) and the
 * post-sublayer norms (per row) */
static void norm_vectors(float *x, const float *w, int n_vec, int dim, float eps) {
    for (int v = 0; v < n_vec; v++) model_rmsnorm(x + (size_t)v * dim, x + (size_t)v * dim, w, dim, eps);
}

/* One forward call: the model, its options (never NULL here) and its rows.
 * A replay runs one row at pos0 < qkv_model_pos over the cache rows before
 * it, writing its K and V over row pos0 (replay below restores them). */
typedef struct {
    qkv_model *m;
    const qkv_forward_opts *o;
    int n, pos0;
    int replay;
    int end_layer; /* layers start_layer .. end_layer - 1 run; below L: no final norm, no logits */
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
        one.mask.n_exclude = forward_opts_exclusions(m->excl_head, m->excl_mark, o, l, h, m->key0[l], desc->kv_len);
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

/* The mask of a layer's call: the layer's own (causal, or its sliding
 * window), unless the call's options override it. An override applies to
 * the global layers; a sliding layer keeps its window unless the override
 * reaches back less far (a narrower window, or sinks + window within its own:
 * the bounded cache a stream keeps, which eviction would leave it anyway). */
static qkv_mask layer_mask(const qkv_forward_opts *o, const qkv_layer_attn *a) {
    const qkv_mask own = a->window ? (qkv_mask){.kind = QKV_MASK_WINDOW, .window = a->window}
                                   : (qkv_mask){.kind = QKV_MASK_CAUSAL};
    if (o->mask == QKV_MASK_NONE || o->mask == QKV_MASK_CAUSAL) return own;
    const int64_t reach = (int64_t)o->window + (o->mask == QKV_MASK_SINK_WINDOW ? o->sinks : 0);
    if (!a->window || ((o->mask == QKV_MASK_WINDOW && o->window < a->window) ||
                       (o->mask == QKV_MASK_SINK_WINDOW && reach <= a->window)))
        return (qkv_mask){.kind = o->mask, .window = o->window, .sinks = o->sinks};
    return own;
}

/* x += post_norm(attention(rmsnorm(x)) Wo), with the hooks from resid_pre to resid_mid. */
static qkv_status attention_layer(const fwd_call *f, int l, qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_forward_opts *o = f->o;
    const qkv_model_config *c = &m->cfg;
    const qkv_layer_attn *a = &m->attn[l];
    const int E = c->n_embd, Hq = c->n_head, Hkv = c->n_kv_head, D = c->head_dim, n = f->n, pos0 = f->pos0;
    const qkv_weights *wts = m->weights;
    const float *norm = wts->norm_w + (size_t)(2 * l) * E;
    const layer_weights *w = &wts->layers[l];
    qkv_status st;
    if ((st = hook_at(f, QKV_HOOK_RESID_PRE, l, m->x, 2, n, E, 0, err))) return st;
    /* the sublayer's input: rmsnorm(x), or x itself without pre-norms (OLMo 2) */
    for (int t = 0; t < n && !c->no_pre_norms; t++)
        model_rmsnorm(m->h + (size_t)t * E, m->x + (size_t)t * E, norm, E, c->norm_eps);
    const model_mm_out qkv[3] = {{m->q, w->wq}, {m->k, w->wk}, {m->v, w->wv}};
    model_matmul_group(qkv, 3, c->no_pre_norms ? m->x : m->h, n, m->scratch, m->n_threads);
    if (wts->bias) {
        const float *b = wts->bias + (size_t)l * (Hq + 2 * Hkv) * D;
        add_bias(m->q, b, n, Hq * D);
        add_bias(m->k, b + Hq * D, n, Hkv * D);
        add_bias(m->v, b + (Hq + Hkv) * D, n, Hkv * D);
    }
    if ((st = hook_at(f, QKV_HOOK_Q, l, m->q, 3, n, Hq, D, err)) ||
        (st = hook_at(f, QKV_HOOK_K, l, m->k, 3, n, Hkv, D, err)) ||
        (st = hook_at(f, QKV_HOOK_V, l, m->v, 3, n, Hkv, D, err)))
        return st;
    if (wts->qk_norm_w) { /* per head, or each token's whole q and k row (OLMo 2) */
        const int qn = c->qk_norm == QKV_QK_NORM_FULL ? Hq * D : D, kn = c->qk_norm == QKV_QK_NORM_FULL ? Hkv * D : D;
        const float *wq = wts->qk_norm_w + (size_t)l * (qn + kn);
        norm_vectors(m->q, wq, n * Hq * D / qn, qn, c->norm_eps);
        norm_vectors(m->k, wq + qn, n * Hkv * D / kn, kn, c->norm_eps);
    }
    to_head_major(m->qt, m->q, n, Hq, D);
    to_head_major(m->kt, m->k, n, Hkv, D);
    to_head_major(m->vt, m->v, n, Hkv, D);
    /* a NoPE layer (SmolLM3's every fourth) attends by content alone: q and k
     * unrotated, and so are the keys its cache holds */
    if ((!a->no_rope && ((st = qkv_rope_apply(m->qt, m->positions, &a->rope, Hq, n, D, err)) ||
                         (st = qkv_rope_apply(m->kt, m->positions, &a->rope, Hkv, n, D, err)))) ||
        (st = hook_rotated(f, QKV_HOOK_ROT_Q, l, m->qt, m->q, Hq, err)) ||
        (st = hook_rotated(f, QKV_HOOK_ROT_K, l, m->kt, m->k, Hkv, err)) ||
        (st = f->replay ? qkv_kv_cache_write(m->cache[l], pos0 - m->key0[l], m->kt, m->vt, n, err)
                        : model_kv_append(m, l, m->kt, m->vt, n, err)))
        return st;
    /* the keys the call attends: positions key0[l] .. pos0 + n - 1 (a
     * replay's rows after pos0 stay in the cache, outside kv_len) */
    qkv_attn_desc desc = {.n_q_head = Hq, .n_kv_head = Hkv, .q_len = n, .kv_len = pos0 + n - m->key0[l],
                          .head_dim = D, .scale = a->scale, .softcap = a->softcap, .mask = layer_mask(o, a),
                          .kv_dtype = qkv_kv_cache_dtype(m->cache[l]),
                          .kv_head_stride = (int64_t)qkv_kv_cache_capacity(m->cache[l]) * D,
                          .n_threads = m->n_threads};
    if (o->n_exclude) {
        desc.mask.n_exclude = forward_opts_exclusions(m->excl_layer, m->excl_mark, o, l, QKV_ALL, m->key0[l], desc.kv_len);
        desc.mask.exclude = m->excl_layer;
    }
    if (o->replace)
        st = o->replace(o->replace_user, l, m->att, m->lse, m->qt, n, m->cache[l], &desc, err);
    else
        st = qkv_attn_run(m->plan, m->att, m->lse, m->qt, qkv_kv_cache_k(m->cache[l]), qkv_kv_cache_v(m->cache[l]),
                          &desc, err);
    if (st || (st = intervene_heads(f, l, &desc, err))) return st;
    if (o->n_hooks && forward_opts_hooked(o, QKV_HOOK_PATTERN, l)) {
        const qkv_attn_view view = {.q = m->qt, .lse = m->lse, .cache = m->cache[l], .key0 = m->key0[l], .layer = l,
                                    .desc = desc, .opts = o, .head_excl = m->excl_head, .mark = m->excl_mark};
        const qkv_activation pattern = {.point = QKV_HOOK_PATTERN, .layer = l, .pos0 = pos0, .ndim = 3,
                                        .shape = {Hq, n, pos0 + n}, .attn = &view};
        if ((st = forward_opts_call(o, &pattern, err))) return st;
    }
    to_token_major(m->o, m->att, n, Hq, D);
    if ((st = hook_at(f, QKV_HOOK_Z, l, m->o, 3, n, Hq, D, err))) return st;
    model_matmul(m->h, m->o, w->wo, n, m->scratch, m->n_threads); /* h <- o Wo^T */
    if (wts->post_norm_w) norm_vectors(m->h, wts->post_norm_w + (size_t)(2 * l) * E, n, E, c->norm_eps);
    if ((st = hook_at(f, QKV_HOOK_ATTN_OUT, l, m->h, 2, n, E, 0, err))) return st;
    for (size_t i = 0; i < (size_t)n * E; i++) m->x[i] += m->h[i];
    return hook_at(f, QKV_HOOK_RESID_MID, l, m->x, 2, n, E, 0, err);
}

/* x += post_norm(act(rmsnorm(x) Wgate) * (rmsnorm(x) Wup)) Wdown), with the hooks mlp_out and resid_post. */
static qkv_status ffn_layer(const fwd_call *f, int l, qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, F = c->n_ff, n = f->n;
    const qkv_weights *wts = m->weights;
    const float *norm = wts->norm_w + (size_t)(2 * l + 1) * E;
    const layer_weights *w = &wts->layers[l];
    for (int t = 0; t < n && !c->no_pre_norms; t++)
        model_rmsnorm(m->h + (size_t)t * E, m->x + (size_t)t * E, norm, E, c->norm_eps);
    const model_mm_out gate_up[2] = {{m->gate, w->w_gate}, {m->up, w->w_up}};
    model_matmul_group(gate_up, 2, c->no_pre_norms ? m->x : m->h, n, m->scratch, m->n_threads);
    model_ffn_act(m->gate, m->up, (size_t)n * F, c->ffn_act, m->n_threads); /* act(gate) * up */
    model_matmul(m->h, m->gate, w->w_down, n, m->scratch, m->n_threads);
    if (wts->post_norm_w) norm_vectors(m->h, wts->post_norm_w + (size_t)(2 * l + 1) * E, n, E, c->norm_eps);
    qkv_status st = hook_at(f, QKV_HOOK_MLP_OUT, l, m->h, 2, n, E, 0, err);
    if (st) return st;
    for (size_t i = 0; i < (size_t)n * E; i++) m->x[i] += m->h[i];
    return hook_at(f, QKV_HOOK_RESID_POST, l, m->x, 2, n, E, 0, err);
}

/* out[k] = x . W_U[ids[k]] for k < n_ids, x: [E] one normed row: each row
 * through the matmul kernel as a one-row matrix, so that it is the dot
 * product the whole unembedding computes for that row (the 1-token kernel
 * works row by row: tests/test_matmul.c and test_model_logit_ids.c check
 * the bits). */
static void unembed_rows(qkv_model *m, float *out, const float *x, const int32_t *ids, int n_ids) {
    const qkv_gguf_tensor *w = m->weights->output;
    const size_t row_bytes = qkv_ggml_row_size(w->type, w->shape[1]);
    const model_mm_isa *isa = model_mm_isa_best();
    for (int k = 0; k < n_ids; k++) {
        qkv_gguf_tensor row = *w; /* [1, E]: row ids[k] of W_U */
        row.shape[0] = 1;
        row.n_elements = w->shape[1];
        row.nbytes = row_bytes;
        row.data = (const char *)w->data + (size_t)ids[k] * row_bytes;
        isa->rows(out + k, x, &row, 1, 0, 1, m->scratch);
    }
}

/* Embedding (or a resumed call's residual), the layers from the call's
 * start_layer on and the final norm; logits as qkv_model_forward. */
static qkv_status forward_layers(const fwd_call *f, float *logits, const int32_t *tokens, int all_logits,
                                 qkv_error *err) {
    qkv_model *m = f->m;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, n = f->n;
    const qkv_gguf_tensor *embd = m->weights->tok_embd;
    const size_t emb_row = qkv_ggml_row_size(embd->type, E);
    const float *resume = f->o->start_resid;
    if (resume) memcpy(m->x, resume, (size_t)n * E * sizeof(float));
    for (int t = 0; t < n; t++) {
        m->positions[t] = (int64_t)f->pos0 + m->rope_offset + f->o->rope_offset + t;
        if (resume) continue;
        qkv_status st = qkv_dequantize(m->x + (size_t)t * E, (const char *)embd->data + (size_t)tokens[t] * emb_row,
                                       embd->type, E, err);
        if (st) return st;
        if (c->embd_scale != 1.0f)
            for (int i = 0; i < E; i++) m->x[(size_t)t * E + i] *= c->embd_scale;
    }
    qkv_status st = resume ? QKV_OK : hook_at(f, QKV_HOOK_EMBED, -1, m->x, 2, n, E, 0, err);
    for (int l = f->o->start_layer; l < f->end_layer && !st; l++)
        if (!(st = attention_layer(f, l, err))) st = ffn_layer(f, l, err);
    if (st || f->end_layer < c->n_layer) return st;
    const float *norm = m->weights->norm_w + (size_t)(2 * c->n_layer) * E;
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
    const float *last = m->h + (size_t)(out0 - first) * E; /* [n - out0, E] the normed rows */
    size_t n_out = (size_t)(n - out0) * c->n_vocab;
    if (f->o->logit_ids) {
        unembed_rows(m, logits, last, f->o->logit_ids, f->o->n_logit_ids);
        n_out = (size_t)f->o->n_logit_ids;
    } else {
        model_matmul(logits, last, m->weights->output, n - out0, m->scratch, m->n_threads);
    }
    if (c->final_softcap > 0) { /* Gemma 2: c tanh(x / c), as transformers divides, tanh, multiplies */
        const float cap = c->final_softcap;
        for (size_t i = 0; i < n_out; i++) logits[i] = tanhf(logits[i] / cap) * cap;
    }
    return QKV_OK;
}

/* QKV_OK, or QKV_ERR_INVALID for a token outside the vocabulary or options out of range. */
static qkv_status check_tokens_and_opts(const qkv_model *m, const int32_t *tokens, int n, const qkv_forward_opts *o,
                                        qkv_error *err) {
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->cfg.n_vocab)
            return util_fail(err, QKV_ERR_INVALID, "forward: token id %d outside [0, %d)", tokens[t], m->cfg.n_vocab);
    return forward_opts_check(o, &m->cfg, err);
}

qkv_status qkv_model_forward(qkv_model *m, float *logits, const int32_t *tokens, int n, int all_logits,
                             const qkv_forward_opts *opts, qkv_error *err) {
    const qkv_forward_opts plain = {0}; /* zero is the plain forward */
    const fwd_call f = {.m = m, .o = opts ? opts : &plain, .n = n, .pos0 = qkv_model_pos(m),
                        .end_layer = m->cfg.n_layer};
    if (n < 1 || !tokens) return util_fail(err, QKV_ERR_INVALID, "forward: no tokens");
    if (n > m->n_ctx - f.pos0)
        return util_fail(err, QKV_ERR_FULL, "forward: %d tokens at position %d exceed the context of %d", n, f.pos0,
                        m->n_ctx);
    if (f.o->logit_ids && all_logits)
        return util_fail(err, QKV_ERR_INVALID, "forward: logit ids select entries of the last position's row: "
                        "all_logits must be 0");
    if (n > m->n_batch)
        return util_fail(err, QKV_ERR_INVALID, "forward: %d tokens in one call exceed the model's n_batch of %d "
                        "(its run state: pass them in calls of at most %d)", n, m->n_batch, m->n_batch);
    qkv_status st = check_tokens_and_opts(m, tokens, n, f.o, err);
    if (st) return st;
    /* a failed call, and every resumed one, leaves the caches as they were */
    if ((st = forward_layers(&f, logits, tokens, all_logits, err)) || f.o->start_resid) model_kv_truncate(m, f.pos0);
    return st;
}

/* ------------------------------------------------------------- replay */

/* QKV_OK if position pos can be replayed through layers 0 .. end_layer - 1. */
static qkv_status check_replay(const qkv_model *m, int pos, const qkv_forward_opts *o, int end_layer,
                               qkv_error *err) {
    if (pos < 0 || pos >= qkv_model_pos(m))
        return util_fail(err, QKV_ERR_INVALID, "replay: position %d outside the sequence's [0, %d)", pos,
                        qkv_model_pos(m));
    if (o->start_layer || o->start_resid || o->replace)
        return util_fail(err, QKV_ERR_INVALID, "replay: a resumed call (start_layer, start_resid) or an attention "
                        "replacement cannot be replayed");
    if (m->rope_offset)
        return util_fail(err, QKV_ERR_INVALID, "replay: positions were evicted without a shift: the cached rows' RoPE "
                        "positions are no longer one offset from their rows");
    for (int l = 0; l < end_layer; l++) {
        /* the window's first key, max(0, pos - W + 1), must still be held */
        const int W = m->attn[l].window, first = W && pos - W + 1 > 0 ? pos - W + 1 : 0;
        if (first < m->key0[l])
            return util_fail(err, QKV_ERR_INVALID,
                            "replay: position %d needs keys from %d on in layer %d, whose sliding-window cache "
                            "(swa_cache) holds positions from %d on", pos, first, l, m->key0[l]);
    }
    return QKV_OK;
}

/* Replays pos through layers 0 .. end_layer - 1 (qkv_model_replay). */
static qkv_status replay(qkv_model *m, float *logits, int pos, int32_t token, int end_layer,
                         const qkv_forward_opts *opts, qkv_error *err) {
    const qkv_forward_opts plain = {0};
    const fwd_call f = {.m = m, .o = opts ? opts : &plain, .n = 1, .pos0 = pos, .replay = 1, .end_layer = end_layer};
    qkv_status st = check_tokens_and_opts(m, &token, 1, f.o, err);
    if (st || (st = check_replay(m, pos, f.o, end_layer, err))) return st;
    const size_t KD = (size_t)m->cfg.n_kv_head * m->cfg.head_dim;
    for (int l = 0; l < end_layer && !st; l++) /* [2, Hkv*D] each: K, V of row pos */
        st = qkv_kv_cache_read(m->replay_kv + l * 2 * KD, m->replay_kv + (l * 2 + 1) * KD, m->cache[l],
                               pos - m->key0[l], 1, err);
    if (!st) st = forward_layers(&f, logits, &token, 0, err);
    /* the rows go back whether the call ran or not (a hook may have stopped it) */
    for (int l = 0; l < end_layer; l++)
        qkv_kv_cache_write(m->cache[l], pos - m->key0[l], m->replay_kv + l * 2 * KD,
                           m->replay_kv + (l * 2 + 1) * KD, 1, NULL);
    return st;
}

qkv_status qkv_model_replay(qkv_model *m, float *logits, int pos, int32_t token, const qkv_forward_opts *opts,
                            qkv_error *err) {
    return replay(m, logits, pos, token, m->cfg.n_layer, opts, err);
}

qkv_status qkv_model_replay_layers(qkv_model *m, int n_layers, int pos, int32_t token, const qkv_forward_opts *opts,
                                   qkv_error *err) {
    if (n_layers < 1 || n_layers > m->cfg.n_layer)
        return util_fail(err, QKV_ERR_INVALID, "replay: %d layers outside [1, %d]", n_layers, m->cfg.n_layer);
    return replay(m, NULL, pos, token, n_layers, opts, err);
}
