/*
 * cost.c — what attention costs next to the rest of a decoder model (llama,
 * qwen2, qwen3, gemma2, gemma3 shapes), computed from the configuration alone:
 * FLOPs per token, prefill FLOPs, the bytes of a materialised score table and
 * of the KV cache: full, sliding-window, and llama.cpp's. Counts multiply-adds
 * as 2 FLOPs and ignores everything that is not a matmul (norms, RoPE,
 * softmax, the FFN's elementwise product, biases): they are O(n * hidden), far
 * below the rest. No timings, no hardware: that is `qkv bench`.
 */
#include "qkv/cost.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *id, *name;
    qkv_model_config m;
} preset;

/* A preset's model config: architecture, L, E, Hq, Hkv, D, F, V, tied; then
 * the fields that are not zero (`.window = 0` where none is: C11 wants one). */
#define ROW(family, L, E, Hq, Hkv, D, F, V, tied, ...)                                                       \
    {.arch = family, .n_layer = L, .n_embd = E, .n_head = Hq, .n_kv_head = Hkv, .head_dim = D, .n_ff = F,    \
     .n_vocab = V, .tied_embeddings = tied, __VA_ARGS__}

/* Values from each model's config.json on the Hugging Face hub (the repository
 * in the comment); window and period as llama.cpp's GGUF metadata has them
 * (<arch>.attention.sliding_window, set_swa_pattern). */
static const preset presets[] = {
    /* meta-llama/Llama-3.1-8B, -70B, Llama-3.2-1B, -3B, Llama-2-7b-hf */
    {"llama-3.1-8b", "Llama-3.1-8B", ROW("llama", 32, 4096, 32, 8, 128, 14336, 128256, 0, .window = 0)},
    {"llama-3.1-70b", "Llama-3.1-70B", ROW("llama", 80, 8192, 64, 8, 128, 28672, 128256, 0, .window = 0)},
    {"llama-3.2-1b", "Llama-3.2-1B", ROW("llama", 16, 2048, 32, 8, 64, 8192, 128256, 1, .window = 0)},
    {"llama-3.2-3b", "Llama-3.2-3B", ROW("llama", 28, 3072, 24, 8, 128, 8192, 128256, 1, .window = 0)},
    {"llama-2-7b", "Llama-2-7B", ROW("llama", 32, 4096, 32, 32, 128, 11008, 32000, 0, .window = 0)},
    /* HuggingFaceTB/SmolLM2-135M */
    {"smollm2-135m", "SmolLM2-135M", ROW("llama", 30, 576, 9, 3, 64, 1536, 49152, 1, .window = 0)},
    /* HuggingFaceTB/SmolLM3-3B (transformers' SmolLM3Config defaults): NoPE every fourth layer */
    {"smollm3-3b", "SmolLM3-3B", ROW("smollm3", 36, 2048, 16, 4, 128, 11008, 128256, 1, .no_rope_interval = 4)},
    /* allenai/OLMo-2-0425-1B: MHA, untied; post-norms only, QK-norm over the whole projection */
    {"olmo-2-1b", "OLMo-2-1B",
     ROW("olmo2", 16, 2048, 16, 16, 128, 8192, 100352, 0, .qk_norm = QKV_QK_NORM_FULL, .post_norms = 1,
         .no_pre_norms = 1)},
    /* microsoft/Phi-3-mini-4k-instruct: MHA, untied; its sliding_window 2047 is
     * one llama.cpp reads and disables for phi3 */
    {"phi-3-mini", "Phi-3-mini-4k", ROW("phi3", 32, 3072, 32, 32, 96, 8192, 32064, 0, .window = 0)},
    /* mistralai/Mistral-7B-v0.3: sliding_window null (v0.1's 4096 is gone) */
    {"mistral-7b", "Mistral-7B-v0.3", ROW("llama", 32, 4096, 32, 8, 128, 14336, 32768, 0, .window = 0)},
    /* Qwen/Qwen2.5-0.5B: biases on q, k, v */
    {"qwen2.5-0.5b", "Qwen2.5-0.5B", ROW("qwen2", 24, 896, 14, 2, 64, 4864, 151936, 1, .qkv_bias = 1)},
    /* Qwen/Qwen3-0.6B: head_dim 128, not 1024 / 16 */
    {"qwen3-0.6b", "Qwen3-0.6B", ROW("qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 1, .qk_norm = 1)},
    /* google/gemma-2-2b: sliding_window 4096, every other layer (llama.cpp: pattern 2) */
    {"gemma-2-2b", "Gemma-2-2B",
     ROW("gemma2", 26, 2304, 8, 4, 256, 9216, 256000, 1, .window = 4096, .swa_period = 2, .post_norms = 1)},
    /* google/gemma-3-270m, google/gemma-3-1b-pt: sliding_window 512, five sliding
     * layers to a global one (llama.cpp: pattern 6) */
    {"gemma-3-270m", "Gemma-3-270M",
     ROW("gemma3", 18, 640, 4, 1, 256, 2048, 262144, 1, .window = 512, .swa_period = 6, .qk_norm = 1,
         .post_norms = 1)},
    {"gemma-3-1b", "Gemma-3-1B",
     ROW("gemma3", 26, 1152, 4, 1, 256, 6912, 262144, 1, .window = 512, .swa_period = 6, .qk_norm = 1,
         .post_norms = 1)},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *qkv_cost_preset_id(int i) {
    return i >= 0 && (size_t)i < N_PRESETS ? presets[i].id : NULL;
}

qkv_status qkv_cost_preset(qkv_model_config *out, const char **name, const char *id, qkv_error *err) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (id && !strcmp(id, presets[i].id)) {
            *out = presets[i].m;
            if (name) *name = presets[i].name;
            return QKV_OK;
        }
    char list[512] = "";
    for (size_t i = 0; i < N_PRESETS; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", presets[i].id);
    }
    return util_fail(err, QKV_ERR_INVALID, "unknown preset '%s' (known: %s)", id ? id : "(null)",
                    list);
}

qkv_status qkv_cost_check(const qkv_model_config *c, qkv_error *err) {
    const struct {
        const char *name;
        int v;
    } f[] = {{"layers", c->n_layer}, {"hidden", c->n_embd}, {"heads", c->n_head},
             {"kv-heads", c->n_kv_head}, {"head-dim", c->head_dim}, {"ffn", c->n_ff},
             {"vocab", c->n_vocab}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1) return util_fail(err, QKV_ERR_INVALID, "%s must be >= 1, got %d", f[i].name, f[i].v);
    if (c->n_head % c->n_kv_head)
        return util_fail(err, QKV_ERR_INVALID, "heads (%d) must be a multiple of kv-heads (%d)",
                        c->n_head, c->n_kv_head);
    if (c->window < 0) return util_fail(err, QKV_ERR_INVALID, "window must be >= 0 (0: no sliding layer), got %d", c->window);
    if (c->swa_period < 0) return util_fail(err, QKV_ERR_INVALID, "swa-period must be >= 0, got %d", c->swa_period);
    if (c->window > 0 && c->swa_period < 2)
        return util_fail(err, QKV_ERR_INVALID,
                        "window %d needs swa-period >= 2 (a global layer every period), got %d", c->window,
                        c->swa_period);
    return QKV_OK;
}

/* Weights one token is multiplied by: per layer q_proj [hidden, Hq*D],
 * k_proj and v_proj [hidden, Hkv*D], o_proj [Hq*D, hidden], gate, up and down
 * [hidden, ffn]; then lm_head [hidden, vocab] once. The input embedding is a
 * row lookup, not a matmul, so it is not counted (tied or not, the lm_head is). */
static double matmul_params(const qkv_model_config *c) {
    double h = c->n_embd, q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    double layer = h * q + 2 * h * kv + q * h + 3 * h * c->n_ff;
    return c->n_layer * layer + h * c->n_vocab;
}

/* Layers l < L that slide (qkv_model_layer_slides). The rule repeats every
 * swa_period layers, so the first period (or all L layers, if fewer) counts
 * them all: sizes by hand are not bounded. */
static int sliding_layers(const qkv_model_config *c) {
    if (c->window <= 0) return 0;
    const int L = c->n_layer, P = c->swa_period;
    int period = 0, rest = 0;
    for (int l = 0; l < P && l < L; l++) {
        const int s = qkv_model_layer_slides(c, l);
        period += s;
        if (l < L % P) rest += s;
    }
    return L / P * period + rest;
}

/* Keys a causal prefill of n rows sees through a window of W keys:
 * sum over t = 0..n-1 of min(t + 1, W); W >= n is the whole triangle. */
static double window_pairs(double n, double W) {
    if (n <= W) return n * (n + 1) / 2;
    return W * (W + 1) / 2 + (n - W) * W;
}

/* x rounded up to a multiple of 256, llama.cpp's padding of both caches. */
static double pad256(double x) { return ceil(x / 256) * 256; }

qkv_status qkv_cost_eval(qkv_cost *out, const qkv_model_config *c, int chunk, int64_t ctx, size_t elem_bytes,
                         qkv_error *err) {
    qkv_status s = qkv_cost_check(c, err);
    if (s) return s;
    if (chunk < 0)
        return util_fail(err, QKV_ERR_INVALID, "chunk must be >= 0 (0: %d), got %d", QKV_COST_DEFAULT_CHUNK, chunk);
    if (ctx < 1) return util_fail(err, QKV_ERR_INVALID, "context must be >= 1 token, got %lld", (long long)ctx);
    if (elem_bytes < 1 || elem_bytes > 8)
        return util_fail(err, QKV_ERR_INVALID, "element size must be 1..8 bytes, got %zu", elem_bytes);
    memset(out, 0, sizeof *out);
    const int Ls = sliding_layers(c);
    const double n = (double)ctx, L = c->n_layer, h = c->n_embd, e = (double)elem_bytes, D = c->head_dim;
    const double Lg = L - Ls, W = c->window, C = chunk ? chunk : QKV_COST_DEFAULT_CHUNK;
    const double qdim = (double)c->n_head * D, kvdim = (double)c->n_kv_head * D;
    /* RMSNorm weights: two per layer before the sublayers (none in OLMo 2), two
     * after them with post-norms, and one final; QK-norm adds one of D for q and
     * one for k per layer, or one of Hq*D and one of Hkv*D over the whole projection */
    const double qk_norms = c->qk_norm == QKV_QK_NORM_FULL ? qdim + kvdim : c->qk_norm ? 2 * D : 0;
    const double norms = L * (((c->no_pre_norms ? 0 : 2) + (c->post_norms ? 2 : 0)) * h + qk_norms) + h;
    const double biases = c->qkv_bias ? L * (qdim + 2 * kvdim) : 0;

    out->ctx = ctx;
    out->elem_bytes = elem_bytes;
    out->n_sliding = Ls;
    out->chunk = (int)C;
    out->params_matmul = matmul_params(c);
    out->params_total = out->params_matmul - h * c->n_vocab /* lm_head counted below */
                        + (c->tied_embeddings ? 1 : 2) * h * c->n_vocab + norms + biases;
    out->weight_flops_per_token = 2 * out->params_matmul;
    /* One token at position n: q.k against the keys it sees and the weighted
     * sum of as many values, 2 D FLOPs each per key, for every query head:
     * n keys in a global layer, min(n, W) in a sliding one. */
    const double keys = Lg * n + Ls * fmin(n, W);
    out->attn_flops_per_token = 4 * qdim * keys;
    out->attn_flops_per_token_global = 4 * qdim * n * L;
    /* A causal prefill of n tokens: row t sees t + 1 keys, or min(t + 1, W). */
    out->prefill_attn_flops = 4 * qdim * (Lg * window_pairs(n, n) + Ls * window_pairs(n, W));
    out->prefill_attn_flops_global = 4 * qdim * L * window_pairs(n, n);
    out->prefill_fixed_flops = n * out->weight_flops_per_token;
    out->prefill_attn_ratio = out->prefill_attn_flops / out->prefill_fixed_flops;
    out->score_table_bytes_per_layer = (double)c->n_head * n * n * e;
    /* FlashAttention keeps one f32 log-sum-exp per query row and head. */
    out->flash_bytes_per_layer = (double)c->n_head * n * 4;
    const double row = 2 * kvdim * e; /* one layer's K and V of one token */
    out->kv_bytes_per_token = L * row;
    out->kv_cache_bytes = n * out->kv_bytes_per_token;
    out->kv_read_bytes_per_token = keys * row;
    /* A sliding layer's cache: before a chunk of C tokens at positions
     * p..p+C-1 the first of them still needs keys p-W+1..p-1, so W - 1 rows
     * carry over and the chunk adds C. */
    out->kv_cache_bytes_swa = (Lg * n + Ls * fmin(n, W - 1 + C)) * row;
    /* llama.cpp, one sequence: n_ctx padded to 256 for every global layer;
     * the SWA cache min(n_ctx, n_swa + n_ubatch) cells, padded to 256. */
    out->kv_cache_bytes_llama_cpp = (Lg * pad256(n) + Ls * pad256(fmin(pad256(n), W + C))) * row;
    return QKV_OK;
}

qkv_status qkv_cost_ring(qkv_ring_cost *out, const qkv_model_config *c, int64_t ctx, size_t elem_bytes,
                         const qkv_ring_params *p, qkv_error *err) {
    qkv_cost one;
    qkv_status s = qkv_cost_eval(&one, c, 0, ctx, elem_bytes, err);
    if (s) return s;
    if (!p || p->ranks < 1) return util_fail(err, QKV_ERR_INVALID, "ranks must be >= 1, got %d", p ? p->ranks : 0);
    if (ctx < p->ranks)
        return util_fail(err, QKV_ERR_INVALID, "%d ranks exceed the context's %lld tokens", p->ranks, (long long)ctx);
    if (!(p->link_gbs > 0) || !(p->rank_gflops > 0))
        return util_fail(err, QKV_ERR_INVALID, "link GB/s (%g) and rank GFLOP/s (%g) must be > 0", p->link_gbs,
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
    out->prefill_attn_one_s = L * 2 * n * n * qdim / F;
    /* contiguous rows: a block of a sliding layer reaches the H ranks after
     * its own (a row sees W - 1 keys back, a rank starts t rows later) */
    const double causal_blocks = P * (P - 1) / 2, W = c->window;
    const double H = W > 1 ? ceil((W - 1) / t) : 0;
    double sliding_blocks = 0;
    for (int j = 1; j < p->ranks; j++) sliding_blocks += fmin(j, H);
    out->model_ring_bytes = out->block_bytes * ((L - one.n_sliding) * causal_blocks + one.n_sliding * sliding_blocks);
    out->model_ring_bytes_causal = out->block_bytes * L * causal_blocks;
    return QKV_OK;
}
