/*
 * qkv/cost.h — the article's cost calculator: FLOPs, bytes and times of a
 * model's attention at a context length, and of a ring over P machines.
 * It runs nothing; it sits above the model layer, whose shapes it prices.
 */
#ifndef QKV_COST_H
#define QKV_COST_H

#include "qkv/base.h"
#include "qkv/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------- cost model */

/* The cost model prices a qkv_model_config (qkv/model.h), as
 * qkv_model_config_read fills it or a preset has it, and reads only its
 * sizes (n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, n_vocab), its
 * sliding layers (window, swa_period: qkv_model_layer_slides) and, for the
 * parameter count alone, tied_embeddings, qk_norm, post_norms and qkv_bias.
 * What it adds of its own is the prefill chunk C, an argument of
 * qkv_cost_eval: the most tokens one forward call adds (0 =
 * QKV_COST_DEFAULT_CHUNK); only the sliding-window caches depend on it. */

/* The prefill chunk of the sliding-window cache figures when chunk is 0: the
 * model's default batch, so that kv_cache_bytes_swa is what such a model holds. */
#define QKV_COST_DEFAULT_CHUNK QKV_MODEL_DEFAULT_BATCH

/* Every figure for one context length n; FLOPs count a multiply-add as 2.
 * Doubles so that no product overflows; byte counts are exact below 2^53.
 * Lg global and Ls sliding layers (Ls = 0 without a window); a sliding layer
 * sees min(p, W) keys where a global one sees p. A row of the KV cache is
 * one layer's K and V of one token: 2 Hkv D elem_bytes. */
typedef struct {
    int64_t ctx;                        /* n, tokens */
    size_t elem_bytes;                  /* storage width of scores and K/V */
    int n_sliding;                      /* Ls */
    int chunk;                          /* C the sliding-window caches were sized for */
    double params_total;                /* all weights: embedding, layers, norms, biases, lm_head unless tied */
    double params_matmul;               /* weights a token is multiplied by: L x (q,k,v,o,gate,up,down) + lm_head */
    double weight_flops_per_token;      /* 2 * params_matmul, independent of n */
    double attn_flops_per_token;        /* 4 Hq D (Lg n + Ls min(n, W)): QK^T and PV of the token at position n */
    double attn_flops_per_token_global; /* 4 n Hq D L: the same if every layer were global */
    double prefill_attn_flops;          /* 4 Hq D sum over rows t = 0..n-1 of (Lg (t+1) + Ls min(t+1, W)):
                                           a causal prefill, exactly 2 n(n+1) Hq D L without a window */
    double prefill_attn_flops_global;   /* 2 n(n+1) Hq D L: the same if every layer were global */
    double prefill_fixed_flops;         /* n * weight_flops_per_token */
    double prefill_attn_ratio;          /* prefill_attn_flops / prefill_fixed_flops */
    double score_table_bytes_per_layer; /* Hq * n^2 * elem_bytes: the n x n table of every head */
    double flash_bytes_per_layer;       /* Hq * n * 4: the f32 LSE per row FlashAttention keeps instead */
    double kv_bytes_per_token;          /* 2 * L * Hkv * D * elem_bytes: one row of every layer */
    double kv_cache_bytes;              /* n * kv_bytes_per_token: a full cache, n rows in every layer */
    double kv_read_bytes_per_token;     /* the rows the token at position n reads: Lg n + Ls min(n, W) */
    double kv_cache_bytes_swa;          /* a sliding-window cache: Lg n + Ls min(n, W - 1 + C) rows (a chunk's
                                           first row needs the W - 1 keys before it; the chunk adds C) */
    double kv_cache_bytes_llama_cpp;    /* llama.cpp's cache for one sequence (n_seq_max 1, n_ubatch C):
                                           Lg pad(n) + Ls pad(min(pad(n), W + C)) rows, pad() rounding up to a
                                           multiple of 256 (llama-context.cpp pads n_ctx; llama-kv-cache-iswa.cpp
                                           sizes the SWA cache; its tools' default, not --swa-full) */
} qkv_cost;

/* Built-in configurations by id ("llama-3.1-8b", "gemma-3-270m", ...): the
 * model config's fields the cost model reads and arch (every other field 0,
 * swa_period too without a window), and in *name (unless name is NULL) the
 * model's display name ("Llama-3.1-8B"); QKV_ERR_INVALID listing the known
 * ids otherwise. qkv_cost_preset_id(i) enumerates them, NULL past the end. */
QKV_API qkv_status qkv_cost_preset(qkv_model_config *out, const char **name, const char *id, qkv_error *err);
QKV_API const char *qkv_cost_preset_id(int i);
/* Every size >= 1 and Hq % Hkv == 0, window >= 0 (with a window swa_period
 * >= 2: the pattern needs a global layer); QKV_ERR_INVALID naming the field
 * as `qkv cost` spells it ("layers", "hidden", "kv-heads", "swa-period"). */
QKV_API qkv_status qkv_cost_check(const qkv_model_config *m, qkv_error *err);
/* The figures for context ctx >= 1 with elements of elem_bytes (1..8) and
 * prefill chunks of chunk >= 0 tokens (0 = QKV_COST_DEFAULT_CHUNK). */
QKV_API qkv_status qkv_cost_eval(qkv_cost *out, const qkv_model_config *m, int chunk, int64_t ctx,
                                 size_t elem_bytes, qkv_error *err);

/* Across machines: ring attention (context parallelism, libqkv_mpi) for a
 * causal prefill of ctx tokens split over P ranks, balanced (zigzag layout,
 * every rank the same causal work). Each layer runs P steps; at each, a rank
 * attends its queries to the K/V block in hand while sending it on and
 * receiving the next, so a step takes max(compute, transfer) and step 0 only
 * its compute. With t = n / P tokens per rank, one step computes
 * 2 n^2 Hq D / P^2 FLOPs and moves 2 t Hkv D e bytes: the transfer hides
 * once t >= Hkv e F / (Hq B) (F the rank's attention FLOP/s, B its link).
 * The ring model counts every layer as global and a causal layer as n^2 / 2
 * (query, key) pairs. */
typedef struct {
    int ranks;              /* P >= 1 */
    double link_gbs;        /* B: GB/s (10^9 B/s) each rank sends (and receives) at */
    double rank_gflops;     /* F: attention GFLOP/s of one rank (qkv bench measures it) */
} qkv_ring_params;

typedef struct {
    double tokens_per_rank;       /* t = n / P */
    double kv_bytes_per_rank;     /* t x kv_bytes_per_token: the rank's share of the KV cache */
    double block_bytes;           /* 2 t Hkv D e: one layer's K/V of one rank, one ring step's message */
    double ring_bytes_per_layer;  /* (P - 1) x block_bytes: what each rank sends per layer */
    double step_compute_s;        /* 2 n^2 Hq D / P^2 / F */
    double step_transfer_s;       /* block_bytes / B (0 for P = 1) */
    int hidden;                   /* 1 if step_transfer_s <= step_compute_s */
    double min_tokens_per_rank;   /* Hkv e F / (Hq B): the t from which the transfer hides */
    double prefill_attn_s;        /* all layers: L (step_compute + (P - 1) max(step_compute, step_transfer)) */
    double prefill_attn_one_s;    /* the same prefill on one rank: L 2 n^2 Hq D / F */
    /* qkv-mpi run's prefill (contiguous rows, qkv_cp_model): the K/V bytes
     * all ranks send, all layers. Block b goes only as far as a rank that
     * reaches it: P - 1 - b hops in a global layer, min(P - 1 - b, H) in a
     * sliding one, H = ceil((W - 1) / t). Per layer: P (P - 1) / 2 blocks,
     * or S(H) = sum_{j=1}^{P-1} min(j, H) (rows as if t each). */
    double model_ring_bytes;        /* block_bytes (Lg P (P - 1) / 2 + Ls S(H)) */
    double model_ring_bytes_causal; /* block_bytes L P (P - 1) / 2: every layer global */
} qkv_ring_cost;

/* QKV_ERR_INVALID for a bad configuration, ctx < P, P < 1, or a bandwidth or
 * rate that is not positive. */
QKV_API qkv_status qkv_cost_ring(qkv_ring_cost *out, const qkv_model_config *m, int64_t ctx, size_t elem_bytes,
                                 const qkv_ring_params *p, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_COST_H */
