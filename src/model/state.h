/*
 * state.h — what a qkv_weights and a qkv_model hold, shared by weights.c
 * (opening a GGUF's weights), model.c (a sequence's run state over them)
 * and forward.c (the pass). As llama2.c splits Config, TransformerWeights
 * and RunState, and llama.cpp llama_model from llama_context: the weights
 * (config, pointers into the GGUF mapping, the few small tensors
 * dequantised at open) are read-only after open and shared by any number of
 * models on any threads; a model is one sequence: its run state, its KV
 * caches, the position of each one's first row and the RoPE offset
 * evictions leave (sequence.c).
 */
#ifndef QKV_MODEL_STATE_H
#define QKV_MODEL_STATE_H

#include "model/internal.h"

#include <stdatomic.h>

/* One layer's weights: matrices in the mapping, in their GGUF types. */
typedef struct {
    const qkv_gguf_tensor *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    /* a fused family's (phi3) row ranges of attn_qkv and ffn_up: wq, wk, wv,
     * w_gate, w_up point here, their data into the mapping (no copy) */
    qkv_gguf_tensor split[5];
} layer_weights;

struct qkv_weights {
    _Atomic int refs;        /* the opener's reference and one per model on these weights */
    qkv_gguf *gguf;
    qkv_model_config cfg;    /* rope.freq_factors: rope_freqs.weight, NULL for LongRoPE (a model's
                                context picks one of its tables) */
    const qkv_gguf_tensor *tok_embd, *output;
    layer_weights *layers;   /* [L] */
    float *norm_w;           /* [2L + 1, E] as f32: attn_norm, ffn_norm per layer (1 without pre-norms);
                                output_norm */
    float *post_norm_w;      /* [2L, E] post_attention_norm, post_ffw_norm per layer, or NULL */
    float *qk_norm_w;        /* [L, 2D] attn_q_norm, attn_k_norm per layer (QKV_QK_NORM_FULL:
                                [L, Hq*D + Hkv*D]), or NULL */
    float *bias;             /* [L, Hq*D + 2 Hkv*D] attn_q, attn_k, attn_v biases per layer, or NULL */
    float *rope_freqs;       /* [n_rot/2] rope_freqs.weight (Llama 3.1 scaling), or NULL */
    float *rope_long, *rope_short; /* [n_rot/2] each, LongRoPE's (phi3) two tables, or NULL */
    size_t dequant_bytes;    /* what the arrays above take */
};

/* The factors a model of context rope_ctx rotates with (model.c and
 * weights.c's check agree through it): rope_freqs, or LongRoPE's long table
 * beyond rope_ctx_orig and the short one within (llama.cpp's
 * get_rope_factors), or NULL. */
const float *weights_rope_factors(const qkv_weights *w, int rope_ctx);
/* Takes one more reference on w (qkv_weights_close drops one). */
void weights_retain(qkv_weights *w);

struct qkv_model {
    qkv_weights *weights;    /* shared, read-only; the model holds one reference */
    qkv_model_config cfg;    /* the weights' config, rope.freq_factors this context's */
    qkv_layer_attn *attn;    /* [L] each layer's attention spec (qkv_model_layer_attn) */
    int n_ctx, n_threads;
    int rope_ctx;            /* the context that picked LongRoPE's factors (qkv_model_params.rope_ctx) */
    int n_batch;             /* most tokens per forward call: the run state's rows (B below) */
    /* run state, sized for B = n_batch tokens per call */
    qkv_kv_cache **cache;    /* [L] n_ctx rows, or min(n_ctx, W - 1 + B) in a sliding layer with swa_cache */
    qkv_attn_plan *plan;     /* every layer's attention: up to B queries against n_ctx keys */
    float *x;                /* [B, E] residual stream */
    float *h;                /* [B, E] normed input of a sublayer, then its output */
    float *q;                /* [B, Hq*D] */
    float *k, *v;            /* [B, Hkv*D] */
    float *qt;               /* [Hq, B, D] queries, head-major, rotated */
    float *kt, *vt;          /* [Hkv, B, D] */
    float *att;              /* [Hq, B, D] attention output, head-major */
    float *lse;              /* [Hq, B] */
    float *o;                /* [B, Hq*D] */
    float *gate, *up;        /* [B, F] */
    float *scratch;          /* [n_threads, MATMUL_ROWS, max cols] */
    int64_t *positions;      /* [B] */
    int *excl_layer;         /* [n_ctx] the exclusions of one layer's call (every head), as cache rows */
    int *excl_head;          /* [n_ctx] ... of one head (a rerun, or hook_pattern's rows) */
    unsigned char *excl_mark;/* [n_ctx] zeros between unions */
    float *replay_kv;        /* [L, 2, Hkv*D] each layer's K and V row a replay overwrites, saved (as f32:
                                every cache dtype comes back to the same bytes) */
    void *state_mem;         /* the one block the buffers from x to replay_kv point into (model.c) */
    size_t state_mem_bytes;  /* its size: the run-state table's sum */
    size_t plan_bytes;       /* the plan's workspace */
    /* sequence state (sequence.c) */
    int *key0;               /* [L] position of each cache's row 0: 0, but in a sliding-window cache
                                the positions it dropped */
    int rope_offset;         /* positions evicted without a shift: RoPE position = position + offset */
};

/* sequence.c: each layer's KV cache, positions of the sequence over it. */

/* Allocates every layer's cache (m->cache, m->key0) for m->n_ctx positions:
 * sliding layers with swa_cache get min(n_ctx, W - 1 + n_batch) rows. */
qkv_status model_kv_init(qkv_model *m, int swa_cache, qkv_dtype dtype, qkv_error *err);
/* The rows layer l's cache is given (model_kv_init's rule), before any is allocated. */
int model_kv_capacity(const qkv_model *m, int l, int swa_cache);
void model_kv_free(qkv_model *m);
/* Appends n rows to layer l's cache, first dropping the oldest rows of a
 * sliding-window cache that cannot take them (all but the last W - 1).
 *   k, v: [Hkv, n, D] f32 */
qkv_status model_kv_append(qkv_model *m, int l, const float *k, const float *v, int n, qkv_error *err);
/* Forgets positions >= pos in every layer (pos <= qkv_model_pos, and every
 * cache holding a row at or before pos: the caller checked). */
void model_kv_truncate(qkv_model *m, int pos);

#endif
