/*
 * weights.c — a GGUF's weights, opened once and shared: its config
 * (config.c), every weight found and checked in the GGUF mapping (the
 * matrices stay there in their types, a fused matrix split into row ranges
 * in place; the norms, QK-norms, biases and RoPE factors are dequantised
 * once). Read-only after qkv_weights_open, so any number of models
 * (model.c: a sequence's run state and KV caches) use them on any threads;
 * a reference count frees them after the last of the opener and the models.
 */
#include "model/state.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Finds a tensor and checks its shape [d0, d1] (d1 = 0: 1-D [d0]) and type. */
static qkv_status find_weight(const qkv_gguf_tensor **out, const qkv_gguf *g, const char *name, int64_t d0,
                              int64_t d1, int optional, qkv_error *err) {
    int64_t id = qkv_gguf_find_tensor(g, name);
    *out = NULL;
    if (id < 0) {
        if (optional) return QKV_OK;
        return util_fail(err, QKV_ERR_FORMAT, "%s: missing tensor %s", qkv_gguf_path(g), name);
    }
    const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, id);
    int ok = d1 ? (t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1) : (t->n_elements == d0);
    if (!ok) {
        if (d1)
            return util_fail(err, QKV_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]",
                            qkv_gguf_path(g), name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 1),
                            (long long)d0, (long long)d1);
        return util_fail(err, QKV_ERR_FORMAT, "%s: tensor %s has %lld elements, expected %lld", qkv_gguf_path(g), name,
                        (long long)t->n_elements, (long long)d0);
    }
    if (!qkv_dequantize_supported(t->type))
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: tensor %s has unsupported type %s", qkv_gguf_path(g), name,
                        qkv_ggml_type_name(t->type));
    /* a NaN or inf weight (a block's scale, in the quantised types) would turn every logit NaN, silently */
    int64_t bad;
    float value;
    qkv_status st = qkv_dequantize_check(&bad, &value, t->data, t->type, t->n_elements, err);
    if (st) return st;
    if (bad >= 0)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s[%lld] = %g is not finite", qkv_gguf_path(g), name, (long long)bad,
                        (double)value);
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
            return util_fail(err, QKV_ERR_FORMAT, "%s: %s[%d] = %g is not %s", qkv_gguf_path(g), name, i,
                            (double)dst[i], positive ? "finite and > 0" : "finite");
    return QKV_OK;
}

/* *out <- rows [row0, row0 + rows) of the 2-D fused tensor t, named name:
 * the same mapping, whole rows (every GGUF type's blocks lie within a row). */
static void split_rows(qkv_gguf_tensor *out, const qkv_gguf_tensor *t, const char *name, int64_t row0, int64_t rows) {
    const size_t row_bytes = qkv_ggml_row_size(t->type, t->shape[1]);
    *out = *t;
    out->name = name;
    out->shape[0] = rows;
    out->n_elements = rows * t->shape[1];
    out->nbytes = (size_t)rows * row_bytes;
    out->offset = t->offset + (uint64_t)row0 * row_bytes;
    out->data = (const char *)t->data + (size_t)row0 * row_bytes;
}

static qkv_status load_norm(float *dst, const qkv_gguf *g, const char *name, int n, qkv_error *err) {
    return load_checked(dst, g, name, n, 0, err);
}

/* dst + l * stride <- blk.<l>.<suffix> [n] for every layer l, each element finite. */
static qkv_status load_per_layer(float *dst, size_t stride, const qkv_gguf *g, const char *suffix, int n, int L,
                                 qkv_error *err) {
    for (int l = 0; l < L; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
        qkv_status st = load_norm(dst + (size_t)l * stride, g, name, n, err);
        if (st) return st;
    }
    return QKV_OK;
}

/* n floats for a tensor dequantised at open, counted in wt->dequant_bytes. */
static float *alloc_floats(qkv_weights *wt, size_t n) {
    float *p = malloc(n * sizeof(float));
    if (p) wt->dequant_bytes += n * sizeof(float);
    return p;
}

static qkv_status load_weights(qkv_weights *wt, qkv_error *err) {
    const qkv_gguf *g = wt->gguf;
    const qkv_model_config *c = &wt->cfg;
    const int E = c->n_embd, L = c->n_layer, D = c->head_dim, QD = c->n_head * D, KD = c->n_kv_head * D, F = c->n_ff;
    qkv_status st;
    if ((st = find_weight(&wt->tok_embd, g, "token_embd.weight", c->n_vocab, E, 0, err))) return st;
    if ((st = find_weight(&wt->output, g, "output.weight", c->n_vocab, E, 1, err))) return st;
    if (!wt->output) wt->output = wt->tok_embd;
    wt->layers = calloc((size_t)L, sizeof *wt->layers);
    if (!wt->layers) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    /* every matrix is found before the small tensors' buffers are sized from the metadata */
    for (int l = 0; l < L; l++) {
        layer_weights *w = &wt->layers[l];
        char name[96];
#define WEIGHT(field, suffix, d0, d1)                                           \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                        \
    if ((st = find_weight(&w->field, g, name, d0, d1, 0, err))) return st;
        if (c->fused) {
            /* phi3: attn_qkv [QD + 2 KD, E] is q, k, v rows; ffn_up [2F, E] gate then up
             * (transformers' gate_up_proj.chunk(2), llama.cpp's swiglu of the fused up) */
            const qkv_gguf_tensor *qkv, *gate_up;
            WEIGHT(wq, "attn_qkv.weight", QD + 2 * KD, E)
            qkv = w->wq;
            WEIGHT(w_up, "ffn_up.weight", 2 * F, E)
            gate_up = w->w_up;
            split_rows(&w->split[0], qkv, "attn_qkv.weight[q]", 0, QD);
            split_rows(&w->split[1], qkv, "attn_qkv.weight[k]", QD, KD);
            split_rows(&w->split[2], qkv, "attn_qkv.weight[v]", QD + KD, KD);
            split_rows(&w->split[3], gate_up, "ffn_up.weight[gate]", 0, F);
            split_rows(&w->split[4], gate_up, "ffn_up.weight[up]", F, F);
            w->wq = &w->split[0], w->wk = &w->split[1], w->wv = &w->split[2];
            w->w_gate = &w->split[3], w->w_up = &w->split[4];
        } else {
            WEIGHT(wq, "attn_q.weight", QD, E)
            WEIGHT(wk, "attn_k.weight", KD, E)
            WEIGHT(wv, "attn_v.weight", KD, E)
            WEIGHT(w_gate, "ffn_gate.weight", F, E)
            WEIGHT(w_up, "ffn_up.weight", F, E)
        }
        WEIGHT(wo, "attn_output.weight", E, QD)
        WEIGHT(w_down, "ffn_down.weight", E, F)
#undef WEIGHT
    }
    wt->norm_w = alloc_floats(wt, (size_t)(2 * L + 1) * E);
    if (!wt->norm_w) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    /* no pre-norms (olmo2): their rows hold 1 and forward never reads them */
    for (size_t i = 0; i < (size_t)2 * L * E && c->no_pre_norms; i++) wt->norm_w[i] = 1.0f;
    if ((!c->no_pre_norms &&
         ((st = load_per_layer(wt->norm_w, 2 * (size_t)E, g, "attn_norm.weight", E, L, err)) ||
          (st = load_per_layer(wt->norm_w + E, 2 * (size_t)E, g, "ffn_norm.weight", E, L, err)))) ||
        (st = load_norm(wt->norm_w + (size_t)(2 * L) * E, g, "output_norm.weight", E, err)))
        return st;
    if (c->post_norms) {
        if (!(wt->post_norm_w = alloc_floats(wt, (size_t)2 * L * E)))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(wt->post_norm_w, 2 * (size_t)E, g, "post_attention_norm.weight", E, L, err)) ||
            (st = load_per_layer(wt->post_norm_w + E, 2 * (size_t)E, g, "post_ffw_norm.weight", E, L, err)))
            return st;
    }
    if (c->qk_norm) {
        /* per head: [D] each; over the whole projection: [Hq*D] and [Hkv*D] */
        const int full = c->qk_norm == QKV_QK_NORM_FULL, qn = full ? QD : D, kn = full ? KD : D;
        const size_t row = (size_t)qn + kn;
        if (!(wt->qk_norm_w = alloc_floats(wt, (size_t)L * row)))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(wt->qk_norm_w, row, g, "attn_q_norm.weight", qn, L, err)) ||
            (st = load_per_layer(wt->qk_norm_w + qn, row, g, "attn_k_norm.weight", kn, L, err)))
            return st;
    }
    if (c->qkv_bias) {
        const size_t row = (size_t)QD + 2 * KD;
        if (!(wt->bias = alloc_floats(wt, (size_t)L * row)))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(wt->bias, row, g, "attn_q.bias", QD, L, err)) ||
            (st = load_per_layer(wt->bias + QD, row, g, "attn_k.bias", KD, L, err)) ||
            (st = load_per_layer(wt->bias + QD + KD, row, g, "attn_v.bias", KD, L, err)))
            return st;
    }
    /* Llama-3.1 scaling (rope_freqs.weight) and LongRoPE (phi3: the long
     * factors for a context beyond rope_ctx_orig, else the short; a model
     * picks, weights_rope_factors): each frequency is divided by its factor.
     * Both tables of LongRoPE are loaded and checked. */
    const int half = (c->rope.n_rot ? c->rope.n_rot : D) / 2;
    if (qkv_gguf_find_tensor(g, "rope_freqs.weight") >= 0) {
        if (!(wt->rope_freqs = alloc_floats(wt, (size_t)half)))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_checked(wt->rope_freqs, g, "rope_freqs.weight", half, 1, err))) return st;
        wt->cfg.rope.freq_factors = wt->rope_freqs;
    } else if (c->rope_ctx_orig) {
        const int has_long = qkv_gguf_find_tensor(g, "rope_factors_long.weight") >= 0;
        const int has_short = qkv_gguf_find_tensor(g, "rope_factors_short.weight") >= 0;
        if (has_long != has_short)
            return util_fail(err, QKV_ERR_FORMAT, "%s: missing tensor %s (LongRoPE needs both tables)",
                            qkv_gguf_path(g), has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
        if (has_long) {
            wt->rope_long = alloc_floats(wt, (size_t)half);
            wt->rope_short = alloc_floats(wt, (size_t)half);
            if (!wt->rope_long || !wt->rope_short) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
            if ((st = load_checked(wt->rope_long, g, "rope_factors_long.weight", half, 1, err)) ||
                (st = load_checked(wt->rope_short, g, "rope_factors_short.weight", half, 1, err)))
                return st;
        }
    }
    return QKV_OK;
}

qkv_status qkv_weights_open(qkv_weights **out, const char *path, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "weights: out is NULL");
    *out = NULL;
    qkv_weights *wt = calloc(1, sizeof *wt);
    if (!wt) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    atomic_init(&wt->refs, 1);
    qkv_status st = qkv_gguf_open(&wt->gguf, path, err);
    if (!st) st = qkv_model_config_read(&wt->cfg, wt->gguf, err);
    if (!st) st = load_weights(wt, err);
    if (st) {
        qkv_weights_close(wt);
        return st;
    }
    *out = wt;
    return QKV_OK;
}

void weights_retain(qkv_weights *wt) { atomic_fetch_add_explicit(&wt->refs, 1, memory_order_relaxed); }

void qkv_weights_close(qkv_weights *wt) {
    /* the last reference frees: acq_rel orders every holder's reads before it */
    if (!wt || atomic_fetch_sub_explicit(&wt->refs, 1, memory_order_acq_rel) != 1) return;
    free(wt->layers); free(wt->norm_w); free(wt->post_norm_w); free(wt->qk_norm_w); free(wt->bias);
    free(wt->rope_freqs); free(wt->rope_long); free(wt->rope_short);
    qkv_gguf_close(wt->gguf);
    free(wt);
}

const float *weights_rope_factors(const qkv_weights *wt, int rope_ctx) {
    if (wt->rope_freqs) return wt->rope_freqs;
    if (!wt->rope_long) return NULL;
    return rope_ctx > wt->cfg.rope_ctx_orig ? wt->rope_long : wt->rope_short;
}

const qkv_model_config *qkv_weights_config(const qkv_weights *wt) { return &wt->cfg; }
const qkv_gguf *qkv_weights_gguf(const qkv_weights *wt) { return wt->gguf; }
size_t qkv_weights_bytes(const qkv_weights *wt) { return (size_t)qkv_gguf_file_size(wt->gguf) + wt->dequant_bytes; }
