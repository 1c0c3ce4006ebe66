/*
 * model.c — a model: one sequence over shared weights (weights.c), as
 * llama.cpp's llama_context over its llama_model. It holds a reference on
 * the weights, their config with this context's RoPE factors, the run state
 * for n_batch tokens per call and the KV caches (sequence.c), allocated
 * once. The pass itself is forward.c.
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

/* The memory an allocation may take: physical memory, or less under
 * RLIMIT_DATA (ulimit -d) or RLIMIT_AS (ulimit -v), whose address space the
 * weights (mapped bytes: the mapping and what open dequantised, there once
 * however many models share them) already take part of. */
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
        {&m->replay_kv, (size_t)c->n_layer * 2 * KD, 4},
    };
    const size_t n_rows = sizeof rows / sizeof rows[0], bytes = util_buffers_bytes(rows, n_rows);
    /* a forward call of n <= n_batch tokens at pos attends n rows to pos + n <= n_ctx keys */
    const qkv_attn_desc max = {.n_q_head = c->n_head, .n_kv_head = c->n_kv_head, .q_len = m->n_batch,
                               .kv_len = m->n_ctx, .head_dim = c->head_dim, .kv_dtype = p->kv_dtype};
    const size_t plan_bytes = qkv_attn_workspace_size(&max, QKV_KERNEL_AUTO, m->n_threads);
    /* what the run state, the plan and the KV caches take, checked before
     * any is allocated (the caches' in doubles: no size_t product can wrap there) */
    double kv_rows = 0;
    for (int l = 0; l < c->n_layer; l++) kv_rows += model_kv_capacity(m, l, p->swa_cache);
    const double need = (bytes == SIZE_MAX ? INFINITY : (double)bytes) + (double)plan_bytes +
                        2.0 * kv_rows * KD * qkv_dtype_size(p->kv_dtype);
    const double have = memory_bytes((double)qkv_weights_bytes(m->weights));
    if (need > have)
        return util_fail(err, QKV_ERR_TOO_LARGE,
                        "model: a context of %d positions needs %.0f bytes (%.1f GiB) of run state and KV cache, "
                        "more than the %.1f GiB of memory there is",
                        m->n_ctx, need, need / (1 << 30), have / (1 << 30));
    if (!(m->state_mem = aligned_alloc(UTIL_BUFFER_ALIGN, bytes)))
        return util_fail(err, QKV_ERR_NOMEM, "model: cannot allocate the run state for %d positions", m->n_batch);
    m->state_mem_bytes = bytes;
    m->plan_bytes = plan_bytes;
    util_buffers_place(m->state_mem, rows, n_rows);
    memset(m->excl_mark, 0, N); /* zeros between unions */
    qkv_status st = model_kv_init(m, p->swa_cache, p->kv_dtype, err);
    if (st) return st;
    return qkv_attn_plan_init(&m->plan, &max, QKV_KERNEL_AUTO, m->n_threads, err);
}

qkv_status qkv_model_new(qkv_model **out, qkv_weights *w, const qkv_model_params *p, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "model: out is NULL");
    *out = NULL;
    if (!w) return util_fail(err, QKV_ERR_INVALID, "model: weights are NULL");
    const qkv_model_params defaults = {0}; /* zero is every field's default */
    if (!p) p = &defaults;
    if (p->n_ctx < 0 || p->n_threads < 0 || p->n_batch < 0 || p->rope_ctx < 0)
        return util_fail(err, QKV_ERR_INVALID, "model: negative n_ctx, n_threads, n_batch or rope_ctx");
    qkv_model *m = calloc(1, sizeof *m);
    if (!m) return util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    weights_retain(w);
    m->weights = w;
    m->cfg = w->cfg;
    /* the context first: LongRoPE's factors depend on it */
    m->n_ctx = p->n_ctx > 0 ? p->n_ctx : (m->cfg.n_ctx_train < QKV_MODEL_DEFAULT_CTX ? m->cfg.n_ctx_train
                                                                                    : QKV_MODEL_DEFAULT_CTX);
    m->rope_ctx = p->rope_ctx > 0 ? p->rope_ctx : m->n_ctx;
    m->cfg.rope.freq_factors = weights_rope_factors(w, m->rope_ctx);
    m->n_threads = p->n_threads > 0 ? p->n_threads : qkv_cpu_count();
    m->n_batch = p->n_batch ? p->n_batch : p->swa_cache && m->cfg.window ? QKV_MODEL_DEFAULT_BATCH : m->n_ctx;
    if (m->n_batch > m->n_ctx) m->n_batch = m->n_ctx;
    qkv_status st = QKV_OK;
    if (!(m->attn = calloc((size_t)m->cfg.n_layer, sizeof *m->attn)))
        st = util_fail(err, QKV_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < m->cfg.n_layer && !st; l++) qkv_model_layer_attn(&m->attn[l], &m->cfg, l);
    if (!st) st = alloc_state(m, p, err);
    if (st) {
        qkv_model_close(m);
        return st;
    }
    *out = m;
    return QKV_OK;
}

qkv_status qkv_model_open(qkv_model **out, const char *path, const qkv_model_params *p, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "model: out is NULL");
    *out = NULL;
    qkv_weights *w;
    qkv_status st = qkv_weights_open(&w, path, err);
    if (st) return st;
    st = qkv_model_new(out, w, p, err);
    qkv_weights_close(w); /* the model holds its own reference */
    return st;
}

void qkv_model_close(qkv_model *m) {
    if (!m) return;
    model_kv_free(m);
    qkv_attn_plan_free(m->plan);
    free(m->attn);
    free(m->state_mem);
    qkv_weights_close(m->weights);
    free(m);
}

qkv_weights *qkv_model_weights(const qkv_model *m) { return m->weights; }
size_t qkv_model_state_bytes(const qkv_model *m) { return m->state_mem_bytes + m->plan_bytes + qkv_model_kv_bytes(m); }
const qkv_model_config *qkv_model_get_config(const qkv_model *m) { return &m->cfg; }
const qkv_gguf *qkv_model_gguf(const qkv_model *m) { return m->weights->gguf; }
