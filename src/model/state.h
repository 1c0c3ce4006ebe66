/*
 * state.h — what a qkv_model holds, shared by model.c (opening: weights,
 * run state) and forward.c (the pass over them). Config, weights (pointers
 * into the GGUF mapping and the few small tensors dequantised at open) and
 * run state, as in llama2.c; the sequence state is the KV caches, the
 * position of each one's first row, and the RoPE offset evictions leave
 * (sequence.c).
 */
#ifndef QKV_MODEL_STATE_H
#define QKV_MODEL_STATE_H

#include "model/internal.h"

/* One layer's weights: matrices in the mapping, in their GGUF types. */
typedef struct {
    const qkv_gguf_tensor *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    /* a fused family's (phi3) row ranges of attn_qkv and ffn_up: wq, wk, wv,
     * w_gate, w_up point here, their data into the mapping (no copy) */
    qkv_gguf_tensor split[5];
} layer_weights;

struct qkv_model {
    qkv_gguf *gguf;
    qkv_model_config cfg;
    qkv_layer_attn *attn;    /* [L] each layer's attention spec (qkv_model_layer_attn) */
    int n_ctx, n_threads;
    int rope_ctx;            /* the context that picked LongRoPE's factors (qkv_model_params.rope_ctx) */
    int n_batch;             /* most tokens per forward call: the run state's rows (B below) */
    /* weights */
    const qkv_gguf_tensor *tok_embd, *output;
    layer_weights *layers;   /* [L] */
    float *norm_w;           /* [2L + 1, E] as f32: attn_norm, ffn_norm per layer (1 without pre-norms);
                                output_norm */
    float *post_norm_w;      /* [2L, E] post_attention_norm, post_ffw_norm per layer, or NULL */
    float *qk_norm_w;        /* [L, 2D] attn_q_norm, attn_k_norm per layer (QKV_QK_NORM_FULL:
                                [L, Hq*D + Hkv*D]), or NULL */
    float *bias;             /* [L, Hq*D + 2 Hkv*D] attn_q, attn_k, attn_v biases per layer, or NULL */
    float *rope_factors;     /* [n_rot/2] rope_freqs.weight, or LongRoPE's long or short factors
                                (the context decides), or NULL */
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
    void *state_mem;         /* the one block the buffers from x to excl_mark point into (model.c) */
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
