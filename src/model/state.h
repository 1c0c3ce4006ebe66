/*
 * state.h — what a qkv_model holds, shared by model.c (opening: weights,
 * run state) and forward.c (the pass over them). Config, weights (pointers
 * into the GGUF mapping and the few small tensors dequantised at open) and
 * run state, as in llama2.c; the sequence state is the KV caches and the
 * RoPE offset evictions leave.
 */
#ifndef QKV_MODEL_STATE_H
#define QKV_MODEL_STATE_H

#include "model/internal.h"

/* One layer's weights: matrices in the mapping, in their GGUF types. */
typedef struct {
    const qkv_gguf_tensor *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
} layer_weights;

struct qkv_model {
    qkv_gguf *gguf;
    qkv_model_config cfg;
    qkv_layer_attn *attn;    /* [L] each layer's attention spec (qkv_model_layer_attn) */
    int n_ctx, n_threads;
    /* weights */
    const qkv_gguf_tensor *tok_embd, *output;
    layer_weights *layers;   /* [L] */
    float *norm_w;           /* [2L + 1, E] as f32: attn_norm, ffn_norm per layer; output_norm */
    float *post_norm_w;      /* [2L, E] post_attention_norm, post_ffw_norm per layer, or NULL */
    float *qk_norm_w;        /* [2L, D] attn_q_norm, attn_k_norm per layer, or NULL */
    float *bias;             /* [L, Hq*D + 2 Hkv*D] attn_q, attn_k, attn_v biases per layer, or NULL */
    float *rope_factors;     /* [D/2] or NULL */
    /* run state, sized for n_ctx tokens */
    qkv_kv_cache **cache;    /* [L] */
    qkv_attn_plan *plan;     /* every layer's attention: up to n_ctx queries against n_ctx keys */
    float *x;                /* [n_ctx, E] residual stream */
    float *h;                /* [n_ctx, E] normed input of a sublayer, then its output */
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

#endif
