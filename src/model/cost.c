/*
 * cost.c — what attention costs next to the rest of a Llama-family model,
 * computed from the configuration alone: FLOPs per token, prefill FLOPs, the
 * bytes of a materialised score table and of the KV cache. Counts multiply-adds
 * as 2 FLOPs and ignores everything that is not a matmul (norms, RoPE, softmax,
 * SwiGLU's elementwise product): they are O(n * hidden), far below the rest.
 * No timings, no hardware: that is `qkv bench`.
 */
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *id;
    qkv_cost_config c;
} preset;

/* Values from each model's config.json on the Hugging Face hub. */
static const preset presets[] = {
    {"llama-3.1-8b", {"Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256, 0}},
    {"llama-3.1-70b", {"Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256, 0}},
    {"llama-3.2-1b", {"Llama-3.2-1B", 16, 2048, 32, 8, 64, 8192, 128256, 1}},
    {"llama-3.2-3b", {"Llama-3.2-3B", 28, 3072, 24, 8, 128, 8192, 128256, 1}},
    {"llama-2-7b", {"Llama-2-7B", 32, 4096, 32, 32, 128, 11008, 32000, 0}},
    {"smollm2-135m", {"SmolLM2-135M", 30, 576, 9, 3, 64, 1536, 49152, 1}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *qkv_cost_preset_id(int i) {
    return i >= 0 && (size_t)i < N_PRESETS ? presets[i].id : NULL;
}

qkv_status qkv_cost_preset(qkv_cost_config *out, const char *id, qkv_error *err) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (id && !strcmp(id, presets[i].id)) {
            *out = presets[i].c;
            return QKV_OK;
        }
    char list[256] = "";
    for (size_t i = 0; i < N_PRESETS; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", presets[i].id);
    }
    return qkv_fail(err, QKV_ERR_INVALID, "unknown preset '%s' (known: %s)", id ? id : "(null)",
                    list);
}

qkv_status qkv_cost_check(const qkv_cost_config *c, qkv_error *err) {
    const struct {
        const char *name;
        int v;
    } f[] = {{"layers", c->n_layer}, {"hidden", c->hidden}, {"heads", c->n_head},
             {"kv-heads", c->n_kv_head}, {"head-dim", c->head_dim}, {"ffn", c->ffn},
             {"vocab", c->vocab}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1) return qkv_fail(err, QKV_ERR_INVALID, "%s must be >= 1, got %d", f[i].name, f[i].v);
    if (c->n_head % c->n_kv_head)
        return qkv_fail(err, QKV_ERR_INVALID, "heads (%d) must be a multiple of kv-heads (%d)",
                        c->n_head, c->n_kv_head);
    return QKV_OK;
}

/* Weights one token is multiplied by: per layer q_proj [hidden, Hq*D],
 * k_proj and v_proj [hidden, Hkv*D], o_proj [Hq*D, hidden], gate, up and down
 * [hidden, ffn]; then lm_head [hidden, vocab] once. The input embedding is a
 * row lookup, not a matmul, so it is not counted (tied or not, the lm_head is). */
static double matmul_params(const qkv_cost_config *c) {
    double h = c->hidden, q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    double layer = h * q + 2 * h * kv + q * h + 3 * h * c->ffn;
    return c->n_layer * layer + h * c->vocab;
}

qkv_status qkv_cost_eval(qkv_cost *out, const qkv_cost_config *c, int64_t ctx, size_t elem_bytes,
                         qkv_error *err) {
    qkv_status s = qkv_cost_check(c, err);
    if (s) return s;
    if (ctx < 1) return qkv_fail(err, QKV_ERR_INVALID, "context must be >= 1 token, got %lld", (long long)ctx);
    if (elem_bytes < 1 || elem_bytes > 8)
        return qkv_fail(err, QKV_ERR_INVALID, "element size must be 1..8 bytes, got %zu", elem_bytes);
    memset(out, 0, sizeof *out);
    double n = (double)ctx, L = c->n_layer, h = c->hidden, e = (double)elem_bytes;
    double qdim = (double)c->n_head * c->head_dim;
    double norms = L * 2 * h + h; /* RMSNorm weights: two per layer, one final */

    out->ctx = ctx;
    out->elem_bytes = elem_bytes;
    out->params_matmul = matmul_params(c);
    out->params_total = out->params_matmul - h * c->vocab /* lm_head counted below */
                        + (c->tied_embeddings ? 1 : 2) * h * c->vocab + norms;
    out->weight_flops_per_token = 2 * out->params_matmul;
    /* One token at position n: q.k against n keys and the weighted sum of n
     * values, 2 * n * D FLOPs each, for every query head of every layer. */
    out->attn_flops_per_token = 4 * n * qdim * L;
    /* A causal prefill of n tokens: token t sees t keys, n/2 on average. */
    out->prefill_attn_flops = 2 * n * n * qdim * L;
    out->prefill_fixed_flops = n * out->weight_flops_per_token;
    out->prefill_attn_ratio = out->prefill_attn_flops / out->prefill_fixed_flops;
    out->score_table_bytes_per_layer = (double)c->n_head * n * n * e;
    /* FlashAttention keeps one f32 log-sum-exp per query row and head. */
    out->flash_bytes_per_layer = (double)c->n_head * n * 4;
    out->kv_bytes_per_token = 2 * L * c->n_kv_head * c->head_dim * e;
    out->kv_cache_bytes = n * out->kv_bytes_per_token;
    return QKV_OK;
}

qkv_status qkv_cost_ring(qkv_ring_cost *out, const qkv_cost_config *c, int64_t ctx, size_t elem_bytes,
                         const qkv_ring_params *p, qkv_error *err) {
    qkv_cost one;
    qkv_status s = qkv_cost_eval(&one, c, ctx, elem_bytes, err);
    if (s) return s;
    if (!p || p->ranks < 1) return qkv_fail(err, QKV_ERR_INVALID, "ranks must be >= 1, got %d", p ? p->ranks : 0);
    if (ctx < p->ranks)
        return qkv_fail(err, QKV_ERR_INVALID, "%d ranks exceed the context's %lld tokens", p->ranks, (long long)ctx);
    if (!(p->link_gbs > 0) || !(p->rank_gflops > 0))
        return qkv_fail(err, QKV_ERR_INVALID, "link GB/s (%g) and rank GFLOP/s (%g) must be > 0", p->link_gbs,
                        p->rank_gflops);
    memset(out, 0, sizeof *out);
    const double P = p->ranks, n = (double)ctx, t = n / P, e = (double)elem_bytes, L = c->n_layer;
    const double F = p->rank_gflops * 1e9, B = p->link_gbs * 1e9, qdim = (double)c->n_head * c->head_dim;
    out->tokens_per_rank = t;
    out->kv_bytes_per_rank = t * one.kv_bytes_per_token;
    out->block_bytes = 2 * t * c->n_kv_head * c->head_dim * e;
    out->ring_bytes_per_layer = (P - 1) * out->block_bytes;
    /* a layer's causal attention, 2 n^2 Hq D, shared evenly by P ranks over P steps */
    out->step_compute_s = 2 * n * n * qdim / (P * P) / F;
    out->step_transfer_s = p->ranks > 1 ? out->block_bytes / B : 0;
    out->hidden = out->step_transfer_s <= out->step_compute_s;
    out->min_tokens_per_rank = (double)c->n_kv_head * e * F / ((double)c->n_head * B);
    const double slow = out->step_compute_s > out->step_transfer_s ? out->step_compute_s : out->step_transfer_s;
    out->prefill_attn_s = L * (out->step_compute_s + (P - 1) * slow);
    out->prefill_attn_one_s = one.prefill_attn_flops / F;
    return QKV_OK;
}
