/*
 * model.c — opening a model: its config (config.c), every weight found and
 * checked in the GGUF mapping (the matrices stay there in their types, a
 * fused matrix split into row ranges in place; the norms, QK-norms, biases
 * and RoPE factors are dequantised once), and the run state for
 * n_batch tokens per call and the KV caches (sequence.c) allocated once.
 * The pass itself is forward.c.
 */
#include "model/state.h"
#include "util/buffers.h"
#include "util/error.h"
#include "util/parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ------------------------------------------------------------- loading */

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

static qkv_status load_weights(qkv_model *m, qkv_error *err) {
    const qkv_gguf *g = m->gguf;
    const qkv_model_config *c = &m->cfg;
    const int E = c->n_embd, L = c->n_layer, D = c->head_dim, QD = c->n_head * D, KD = c->n_kv_head * D, F = c->n_ff;
    qkv_status st;
    if ((st = find_weight(&m->tok_embd, g, "token_embd.weight", c->n_vocab, E, 0, err))) return st;
    if ((st = find_weight(&m->output, g, "output.weight", c->n_vocab, E, 1, err))) return st;
    if (!m->output) m->output = m->tok_embd;
    m->layers = calloc((size_t)L, sizeof *m->layers);
    m->attn = calloc((size_t)L, sizeof *m->attn);
    if (!m->layers || !m->attn) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    /* every matrix is found before the small tensors' buffers are sized from the metadata */
    for (int l = 0; l < L; l++) {
        layer_weights *w = &m->layers[l];
        qkv_model_layer_attn(&m->attn[l], c, l);
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
    m->norm_w = malloc((size_t)(2 * L + 1) * E * sizeof(float));
    if (!m->norm_w) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    /* no pre-norms (olmo2): their rows hold 1 and forward never reads them */
    for (size_t i = 0; i < (size_t)2 * L * E && c->no_pre_norms; i++) m->norm_w[i] = 1.0f;
    if ((!c->no_pre_norms &&
         ((st = load_per_layer(m->norm_w, 2 * (size_t)E, g, "attn_norm.weight", E, L, err)) ||
          (st = load_per_layer(m->norm_w + E, 2 * (size_t)E, g, "ffn_norm.weight", E, L, err)))) ||
        (st = load_norm(m->norm_w + (size_t)(2 * L) * E, g, "output_norm.weight", E, err)))
        return st;
    if (c->post_norms) {
        if (!(m->post_norm_w = malloc((size_t)2 * L * E * sizeof(float))))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(m->post_norm_w, 2 * (size_t)E, g, "post_attention_norm.weight", E, L, err)) ||
            (st = load_per_layer(m->post_norm_w + E, 2 * (size_t)E, g, "post_ffw_norm.weight", E, L, err)))
            return st;
    }
    if (c->qk_norm) {
        /* per head: [D] each; over the whole projection: [Hq*D] and [Hkv*D] */
        const int full = c->qk_norm == QKV_QK_NORM_FULL, qn = full ? QD : D, kn = full ? KD : D;
        const size_t row = (size_t)qn + kn;
        if (!(m->qk_norm_w = malloc((size_t)L * row * sizeof(float))))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(m->qk_norm_w, row, g, "attn_q_norm.weight", qn, L, err)) ||
            (st = load_per_layer(m->qk_norm_w + qn, row, g, "attn_k_norm.weight", kn, L, err)))
            return st;
    }
    if (c->qkv_bias) {
        const size_t row = (size_t)QD + 2 * KD;
        if (!(m->bias = malloc((size_t)L * row * sizeof(float))))
            return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_per_layer(m->bias, row, g, "attn_q.bias", QD, L, err)) ||
            (st = load_per_layer(m->bias + QD, row, g, "attn_k.bias", KD, L, err)) ||
            (st = load_per_layer(m->bias + QD + KD, row, g, "attn_v.bias", KD, L, err)))
            return st;
    }
    /* Llama-3.1 scaling (rope_freqs.weight) and LongRoPE (phi3: the long
     * factors for a context beyond rope_ctx_orig, else the short, as
     * llama.cpp's get_rope_factors): each frequency is divided by its factor.
     * Both tables of LongRoPE are checked, whichever this context takes. */
    const int half = (c->rope.n_rot ? c->rope.n_rot : D) / 2;
    const char *factors = qkv_gguf_find_tensor(g, "rope_freqs.weight") >= 0 ? "rope_freqs.weight" : NULL;
    if (c->rope_ctx_orig && !factors) {
        const int has_long = qkv_gguf_find_tensor(g, "rope_factors_long.weight") >= 0;
        const int has_short = qkv_gguf_find_tensor(g, "rope_factors_short.weight") >= 0;
        if (has_long != has_short)
            return util_fail(err, QKV_ERR_FORMAT, "%s: missing tensor %s (LongRoPE needs both tables)",
                            qkv_gguf_path(g), has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
        if (has_long) {
            float *other = malloc((size_t)half * sizeof(float));
            if (!other) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
            const int long_ctx = m->rope_ctx > c->rope_ctx_orig;
            st = load_checked(other, g, long_ctx ? "rope_factors_short.weight" : "rope_factors_long.weight", half, 1,
                              err);
            free(other);
            if (st) return st;
            factors = long_ctx ? "rope_factors_long.weight" : "rope_factors_short.weight";
        }
    }
    if (factors) {
        m->rope_factors = malloc((size_t)half * sizeof(float));
        if (!m->rope_factors) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
        if ((st = load_checked(m->rope_factors, g, factors, half, 1, err))) return st;
        m->cfg.rope.freq_factors = m->rope_factors;
        for (int l = 0; l < L; l++) m->attn[l].rope.freq_factors = m->rope_factors;
    }
    return QKV_OK;
}

/* The memory an allocation may take: physical memory, or less under
 * RLIMIT_DATA (ulimit -d) or RLIMIT_AS (ulimit -v), whose address space the
 * model's mapping (mapped bytes) already takes part of. */
static double memory_bytes(double mapped) {
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    static const int limits[] = {RLIMIT_AS, RLIMIT_DATA};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        struct rlimit r;
        const double taken = limits[i] == RLIMIT_AS ? mapped : 0;
        if (getrlimit(limits[i], &r) == 0 && r.rlim_cur != RLIM_INFINITY && (double)r.rlim_cur - taken < have)
            have = (double)r.rlim_cur - taken;
    }
    return have;
}

static qkv_status alloc_state(qkv_model *m, const qkv_model_params *p, qkv_error *err) {
    const qkv_model_config *c = &m->cfg;
    const size_t N = (size_t)m->n_ctx, B = (size_t)m->n_batch, E = (size_t)c->n_embd, H = (size_t)c->n_head,
                 QD = (size_t)c->n_head * c->head_dim, KD = (size_t)c->n_kv_head * c->head_dim, F = (size_t)c->n_ff;
    size_t max_cols = E > QD ? E : QD;
    if (F > max_cols) max_cols = F;
    /* the run state, a row per buffer (shapes in state.h): its bytes are the
     * rows' sum, allocated at once, the pointers set by one walk */
    const util_buffer rows[] = {
        {&m->x, B * E, 4},        {&m->h, B * E, 4},
        {&m->q, B * QD, 4},       {&m->k, B * KD, 4},
        {&m->v, B * KD, 4},       {&m->qt, QD * B, 4},
        {&m->kt, KD * B, 4},      {&m->vt, KD * B, 4},
        {&m->att, QD * B, 4},     {&m->lse, H * B, 4},
        {&m->o, B * QD, 4},       {&m->gate, B * F, 4},
        {&m->up, B * F, 4},       {&m->scratch, (size_t)m->n_threads * MATMUL_ROWS * max_cols, 4},
        {&m->positions, B, sizeof *m->positions},
        {&m->excl_layer, N, sizeof *m->excl_layer},
        {&m->excl_head, N, sizeof *m->excl_head},
        {&m->excl_mark, N, sizeof *m->excl_mark},
    };
    const size_t n_rows = sizeof rows / sizeof rows[0], bytes = util_buffers_bytes(rows, n_rows);
    /* what the run state and the KV caches take, checked before either is
     * allocated (the caches' in doubles: no size_t product can wrap there) */
    double kv_rows = 0;
    for (int l = 0; l < c->n_layer; l++) kv_rows += model_kv_capacity(m, l, p->swa_cache);
    const double need = (bytes == SIZE_MAX ? INFINITY : (double)bytes) + 2.0 * kv_rows * KD * qkv_dtype_size(p->kv_dtype);
    const double have = memory_bytes((double)qkv_gguf_file_size(m->gguf));
    if (need > have)
        return util_fail(err, QKV_ERR_TOO_LARGE,
                        "model: a context of %d positions needs %.0f bytes (%.1f GiB) of run state and KV cache, "
                        "more than the %.1f GiB of memory there is",
                        m->n_ctx, need, need / (1 << 30), have / (1 << 30));
    if (!(m->state_mem = aligned_alloc(UTIL_BUFFER_ALIGN, bytes)))
        return util_fail(err, QKV_ERR_NOMEM, "model: cannot allocate the run state for %d positions", m->n_batch);
    util_buffers_place(m->state_mem, rows, n_rows);
    memset(m->excl_mark, 0, N); /* zeros between unions */
    qkv_status st = model_kv_init(m, p->swa_cache, p->kv_dtype, err);
    if (st) return st;
    /* a forward call of n <= n_batch tokens at pos attends n rows to pos + n <= n_ctx keys */
    const qkv_attn_desc max = {.n_q_head = c->n_head, .n_kv_head = c->n_kv_head, .q_len = m->n_batch,
                               .kv_len = m->n_ctx, .head_dim = c->head_dim, .kv_dtype = p->kv_dtype};
    return qkv_attn_plan_init(&m->plan, &max, QKV_KERNEL_AUTO, m->n_threads, err);
}

qkv_status qkv_model_open(qkv_model **out, const char *path, const qkv_model_params *p, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "model: out is NULL");
    *out = NULL;
    const qkv_model_params defaults = {0}; /* zero is every field's default */
    if (!p) p = &defaults;
    if (p->n_ctx < 0 || p->n_threads < 0 || p->n_batch < 0 || p->rope_ctx < 0)
        return util_fail(err, QKV_ERR_INVALID, "model: negative n_ctx, n_threads, n_batch or rope_ctx");
    qkv_model *m = calloc(1, sizeof *m);
    if (!m) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    qkv_status st = qkv_gguf_open(&m->gguf, path, err);
    if (!st) st = qkv_model_config_read(&m->cfg, m->gguf, err);
    if (!st) { /* the context first: LongRoPE's factors depend on it */
        m->n_ctx = p->n_ctx > 0 ? p->n_ctx
                                : (m->cfg.n_ctx_train < QKV_MODEL_DEFAULT_CTX ? m->cfg.n_ctx_train : QKV_MODEL_DEFAULT_CTX);
        m->rope_ctx = p->rope_ctx > 0 ? p->rope_ctx : m->n_ctx;
        st = load_weights(m, err);
    }
    if (!st) {
        m->n_threads = p->n_threads > 0 ? p->n_threads : qkv_cpu_count();
        m->n_batch = p->n_batch ? p->n_batch : p->swa_cache && m->cfg.window ? QKV_MODEL_DEFAULT_BATCH : m->n_ctx;
        if (m->n_batch > m->n_ctx) m->n_batch = m->n_ctx;
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
    model_kv_free(m);
    qkv_attn_plan_free(m->plan);
    free(m->layers); free(m->attn); free(m->norm_w); free(m->post_norm_w); free(m->qk_norm_w); free(m->bias);
    free(m->rope_factors);
    free(m->state_mem);
    qkv_gguf_close(m->gguf);
    free(m);
}

const qkv_model_config *qkv_model_get_config(const qkv_model *m) { return &m->cfg; }
const qkv_gguf *qkv_model_gguf(const qkv_model *m) { return m->gguf; }
