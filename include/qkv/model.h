/*
 * qkv/model.h — a decoder model read from a GGUF file: its config and
 * weights (qkv_weights, shared), a sequence's run state over them
 * (qkv_model), the one forward call with its interventions (exclusions,
 * zeroed heads, replaced attention, hooks on named activation points), and
 * the sampler. Built on qkv/attn.h and qkv/gguf.h.
 */
#ifndef QKV_MODEL_H
#define QKV_MODEL_H

#include "qkv/attn.h"
#include "qkv/base.h"
#include "qkv/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------- model */

/* A decoder model from a GGUF file, in one of the families llama.cpp writes:
 * llama (Llama 2/3.x, Mistral, SmolLM), qwen2, qwen3, gemma2, gemma3,
 * smollm3, olmo2, phi3. Every
 * family is embedding, L x [RMSNorm, attention (libqkv), RMSNorm, gated
 * FFN], final norm, lm_head (OLMo 2: no RMSNorm before the sublayers, one
 * after each); what differs is named below and read from the
 * same metadata keys llama.cpp reads. Weights stay in the file's mapping in
 * their GGUF type; each matmul dequantises a weight row once per call and
 * uses it for every token of the batch. */
typedef enum {
    QKV_FFN_SILU = 0,       /* SwiGLU: silu(gate) * up (llama, qwen) */
    QKV_FFN_GELU_TANH = 1   /* GeGLU: gelu_tanh(gate) * up (gemma) */
} qkv_ffn_act;

/* What the QK-norm's RMSNorm runs over (qkv_model_config.qk_norm). */
typedef enum {
    QKV_QK_NORM_NONE = 0,
    QKV_QK_NORM_HEAD = 1,   /* each head's q and k, weights [D] (qwen3, gemma3) */
    QKV_QK_NORM_FULL = 2    /* the whole projection before the head split, weights [Hq*D] for q and
                               [Hkv*D] for k (olmo2) */
} qkv_qk_norm;

typedef struct {
    char arch[32];          /* general.architecture: "llama", "qwen2", "qwen3", "gemma2", "gemma3", "smollm3",
                               "olmo2", "phi3" */
    int n_layer;            /* L */
    int n_embd;             /* residual width E */
    int n_head;             /* Hq */
    int n_kv_head;          /* Hkv */
    int head_dim;           /* D: <arch>.attention.key_length, else E / Hq */
    int n_ff;               /* FFN inner width F */
    int n_vocab;            /* V */
    int n_ctx_train;        /* <arch>.context_length */
    float norm_eps;         /* RMSNorm epsilon */
    qkv_rope rope;          /* the global layers' RoPE: pairing interleaved for llama (its converter
                               permuted q/k), rotate-half for the others; theta, factors; n_rot from
                               <arch>.rope.dimension_count below head_dim (phi3: partial rotary), 0
                               otherwise; attn_factor: LongRoPE's (phi3), 0 otherwise */
    int rope_ctx_orig;      /* LongRoPE (phi3): <arch>.rope.scaling.original_context_length, else
                               n_ctx_train; a context (n_ctx) above it rotates with
                               rope_factors_long.weight, else rope_factors_short.weight (llama.cpp's
                               choice); 0 for the other families */
    int tied_embeddings;    /* 1: lm_head is token_embd.weight */
    /* attention */
    float attn_scale;       /* softmax scale: <arch>.attention.scale, else the family's rule (1/sqrt(D);
                               Gemma 27B: 1/sqrt(E / Hq)) */
    int window;             /* sliding layers' window W (keys, self included); 0: no sliding layer */
    int swa_period;         /* with window: layer l slides iff l % swa_period < swa_period - 1
                               (llama.cpp's set_swa_pattern: gemma2 2, gemma3 6) */
    float rope_theta_swa;   /* the sliding layers' RoPE base (gemma3: 10000) */
    int no_rope_interval;   /* N > 0: layer l runs without RoPE ("NoPE") iff (l + 1) % N == 0
                               (llama.cpp's n_no_rope_layer_step, smollm3: 4); 0: every layer rotates */
    float attn_softcap;     /* c > 0: scores become c tanh(s / c) (gemma2); 0: none */
    int qk_norm;            /* qkv_qk_norm: RMSNorm of q and k before RoPE, per head (qwen3, gemma3) or
                               over the whole projection (olmo2); 0: none */
    int qkv_bias;           /* q, k and v projections have biases (qwen2) */
    int fused;              /* phi3: blk.N.attn_qkv.weight [Hq*D + 2 Hkv*D, E] holds q, k, v rows and
                               blk.N.ffn_up.weight [2F, E] gate then up rows (read in place, split) */
    /* the rest of the block */
    int post_norms;         /* each sublayer's output is RMS-normed before it is added (gemma's sandwich,
                               olmo2) */
    int no_pre_norms;       /* 1: the sublayers read the residual stream itself, no attn_norm / ffn_norm
                               (olmo2: x + post_norm(attn(x))) */
    qkv_ffn_act ffn_act;
    float embd_scale;       /* the embedding rows are multiplied by it: 1, or sqrt(E) (gemma) */
    float final_softcap;    /* c > 0: logits become c tanh(x / c) (gemma2); 0: none */
} qkv_model_config;

/* One layer's attention, as the model runs it. */
typedef struct {
    int n_head, n_kv_head, head_dim;
    float scale;
    int window;             /* 0: causal over every earlier key; W: the last W keys */
    float softcap;          /* 0: none */
    qkv_rope rope;          /* theta: rope_theta_swa on sliding layers */
    int qk_norm;            /* qkv_qk_norm */
    int qkv_bias;
    int no_rope;            /* 1: q and k are not rotated (hook_rot_q/k equal hook_q/k after any QK-norm,
                               the cache holds unrotated keys, a KV shift leaves them) */
} qkv_layer_attn;

/* 1 if layer `layer` is a sliding layer: cfg->window > 0 and
 * layer % swa_period < swa_period - 1 (a period of 1 or less: none); the one
 * rule behind qkv_model_layer_attn, the sliding-window cache and qkv_cost. */
QKV_API int qkv_model_layer_slides(const qkv_model_config *cfg, int layer);
/* 1 if layer `layer` applies RoPE to q and k: cfg->no_rope_interval < 1 or
 * (layer + 1) % no_rope_interval != 0 (llama.cpp's rule for SmolLM3); the
 * rule behind qkv_layer_attn.no_rope. */
QKV_API int qkv_model_layer_rotates(const qkv_model_config *cfg, int layer);
/* out <- layer `layer`'s attention spec (0 <= layer < cfg->n_layer). */
QKV_API void qkv_model_layer_attn(qkv_layer_attn *out, const qkv_model_config *cfg, int layer);

/* Limits qkv_model_config_read enforces, so that no size derived from a file
 * (products of them included) can overflow: layers, Q heads (KV heads <= Q
 * heads), residual width and heads x head_dim, SwiGLU width, training
 * context; the vocabulary's is QKV_MAX_VOCAB (qkv/gguf.h). */
#define QKV_MODEL_MAX_LAYERS 4096
#define QKV_MODEL_MAX_HEADS 1024
#define QKV_MODEL_MAX_EMBD (1 << 17)
#define QKV_MODEL_MAX_FF (1 << 20)
#define QKV_MODEL_MAX_CTX (1 << 24)

/* The configuration of the model in g, from its metadata alone (no weight is
 * read: a metadata-only GGUF will do). Every size is checked against the
 * limits above, the RMSNorm epsilon must be in (0, 1) and the RoPE base in
 * (1, 1e30), soft-caps and the attention scale finite and > 0 when present,
 * the sliding window >= 1, each failure naming the key and its range.
 * general.architecture must be one of the families (qkv_model_family_name)
 * (QKV_ERR_UNSUPPORTED naming them otherwise, and for rope
 * scaling types other than "none", head_dim outside [16, 256] or odd, a
 * value_length other than key_length); QKV_ERR_FORMAT for
 * a missing required key, a value out of range, heads not a multiple of KV
 * heads, a rope.dimension_count odd or above head_dim, or no vocabulary
 * (token_embd.weight's rows, else the length of
 * tokenizer.ggml.tokens), and when the rows, the token list and
 * <arch>.vocab_size do not all agree. rope.freq_factors is NULL here:
 * qkv_weights_open fills it from rope_freqs.weight, and a model
 * (qkv_model_new) from LongRoPE's rope_factors_long/short.weight ([n_rot/2]
 * each) by its context. */
QKV_API qkv_status qkv_model_config_read(qkv_model_config *out, const qkv_gguf *g, qkv_error *err);

/* The i-th supported family's general.architecture ("llama", "qwen2",
 * "qwen3", "gemma2", "gemma3", "smollm3", "olmo2", "phi3"); NULL past the last (i < 0 too). */
QKV_API const char *qkv_model_family_name(int i);

/* Zero is every field's default; qkv_model_open and qkv_model_new take NULL for all defaults. */
/* The KV cache's default size: min(n_ctx_train, QKV_MODEL_DEFAULT_CTX). */
#define QKV_MODEL_DEFAULT_CTX 8192
/* The most tokens of one forward call with swa_cache and no n_batch given:
 * llama.cpp's default micro-batch (n_ubatch), so both size their
 * sliding-window caches for the same calls. */
#define QKV_MODEL_DEFAULT_BATCH 512
typedef struct {
    int n_ctx;              /* positions the KV cache holds; 0 = min(n_ctx_train, QKV_MODEL_DEFAULT_CTX) */
    qkv_dtype kv_dtype;     /* KV cache storage, default f32 */
    int n_threads;          /* 0 = all cores */
    int n_batch;            /* the most tokens one forward call takes: the run state (activations, the
                               attention plan's queries) is sized for it. 0 = n_ctx, or
                               QKV_MODEL_DEFAULT_BATCH with swa_cache on a model with sliding layers;
                               above n_ctx it is n_ctx */
    int swa_cache;          /* 1: each sliding layer keeps only the keys its window can still reach
                               (the sliding-window cache, below); 0: every layer holds n_ctx rows.
                               No effect on a model without sliding layers */
    int rope_ctx;           /* the context length that picks LongRoPE's factors (phi3: the long table
                               beyond rope.scaling.original_context_length, as llama.cpp picks by its
                               n_ctx); 0 = n_ctx. A sequence split over ranks (qkv-mpi) gives every
                               rank the whole sequence's, so that all rotate alike */
} qkv_model_params;

typedef struct qkv_model qkv_model;

/* A GGUF's config and weights, read-only after open: any number of models
 * (sequences) on any threads share one copy (llama.cpp's llama_model; a
 * qkv_model is its llama_context). Reference-counted: each model holds one
 * reference, and the weights go with the last of the opener's close and
 * the models'. */
typedef struct qkv_weights qkv_weights;

/*
 * The sliding-window cache (qkv_model_params.swa_cache; gemma2 and gemma3
 * have sliding layers). A sliding layer of window W attends the last W keys,
 * so it keeps min(n_ctx, W - 1 + n_batch) rows, not n_ctx: the W - 1 keys
 * the first token of a call still sees, and the call's own. A call that
 * would overflow them first drops all but the last W - 1 (a memmove, once
 * per n_batch tokens when decoding). The layer attends its rows with the
 * same window mask, which counts back from the newest key, so it sees the
 * same keys at the same rotations; logits equal the full cache's up to
 * float rounding (the kernels tile and split fewer keys). Gemma 3 at 32K
 * positions: 3 global layers x 32768 rows, 15 sliding layers x 1023
 * (qkv_model_kv_bytes; `qkv cost` predicts it as kv_cache_bytes_swa).
 * Positions stay those of the whole sequence everywhere in this API:
 * qkv_model_pos, exclusions, evict, rewind, hook_pattern's keys. A sliding
 * layer no longer holds the positions before its window, and needs none of
 * them: an exclusion of one changes nothing, and its hook_pattern weight is
 * 0. What would need a dropped key is refused (qkv_model_rewind,
 * qkv_model_evict). Off by default: a full cache serves every probe.
 */

/* Opens the weights at path: qkv_model_config_read, then every weight's
 * shape and type, and every norm weight finite and every rope_freqs.weight
 * (or LongRoPE: both rope_factors_long and _short.weight) factor finite and
 * > 0 (QKV_ERR_FORMAT naming the tensor and element otherwise). The matrices
 * stay in the file's mapping; the norms, QK-norms, biases and RoPE factors
 * are dequantised once. *out holds the caller's reference. */
QKV_API qkv_status qkv_weights_open(qkv_weights **out, const char *path, qkv_error *err);
/* Drops the caller's reference (the models on w keep theirs); NULL is fine. */
QKV_API void qkv_weights_close(qkv_weights *w);
/* The config; rope.freq_factors is rope_freqs.weight's, NULL for LongRoPE
 * (each model's context picks a table: qkv_model_get_config). */
QKV_API const qkv_model_config *qkv_weights_config(const qkv_weights *w);
QKV_API const qkv_gguf *qkv_weights_gguf(const qkv_weights *w);
/* Bytes of the weights: the file's mapping and what open dequantised. */
QKV_API size_t qkv_weights_bytes(const qkv_weights *w);

/* A sequence over shared weights: this context's RoPE factors, the run
 * state for p->n_batch tokens per call and the KV cache for p->n_ctx
 * positions (fewer rows in sliding layers with swa_cache), allocated once.
 * Takes a reference on w (the caller may close its own afterwards). Before
 * allocating, the run state, attention plan and KV cache are checked against
 * physical memory, RLIMIT_DATA and RLIMIT_AS less the weights' bytes (counted
 * once, however many models share them): a context that cannot fit is
 * QKV_ERR_TOO_LARGE, the message naming the bytes it needs. QKV_ERR_INVALID
 * for w NULL or a negative n_ctx, n_threads, n_batch or rope_ctx. */
QKV_API qkv_status qkv_model_new(qkv_model **out, qkv_weights *w, const qkv_model_params *p, qkv_error *err);
/* qkv_weights_open, qkv_model_new, qkv_weights_close: a model holding the
 * only reference to its own weights (each failure as theirs). */
QKV_API qkv_status qkv_model_open(qkv_model **out, const char *path, const qkv_model_params *p, qkv_error *err);
/* Frees the sequence and drops its reference on the weights; NULL is fine. */
QKV_API void qkv_model_close(qkv_model *m);
QKV_API qkv_weights *qkv_model_weights(const qkv_model *m);
/* Bytes this model allocated beyond its weights: the run-state table, the
 * attention plan's workspace and every layer's KV cache (qkv_model_kv_bytes). */
QKV_API size_t qkv_model_state_bytes(const qkv_model *m);
/* The weights' config with this context's RoPE factors. */
QKV_API const qkv_model_config *qkv_model_get_config(const qkv_model *m);
QKV_API const qkv_gguf *qkv_model_gguf(const qkv_model *m);
QKV_API int qkv_model_n_ctx(const qkv_model *m);
/* The most tokens one forward call takes (qkv_model_params.n_batch, resolved). */
QKV_API int qkv_model_n_batch(const qkv_model *m);
/* Rows layer `layer`'s KV cache holds at most: n_ctx, or fewer in a sliding
 * layer with swa_cache; -1 for a layer out of range. */
QKV_API int qkv_model_kv_rows(const qkv_model *m, int layer);
/* Bytes of every layer's KV cache, K and V: the sum over layers of
 * 2 x rows x Hkv x D x the size of kv_dtype. */
QKV_API size_t qkv_model_kv_bytes(const qkv_model *m);
/* Positions already in the KV cache (the next token's position). */
QKV_API int qkv_model_pos(const qkv_model *m);
/* Forgets every position from pos on (0: a fresh sequence). With swa_cache,
 * a sliding layer must still hold the W - 1 positions before pos > 0:
 * QKV_ERR_INVALID naming the earliest position it can rewind to otherwise
 * (0 always works). */
QKV_API qkv_status qkv_model_rewind(qkv_model *m, int pos, qkv_error *err);
/* The RoPE position the next token is rotated at (before a call's
 * rope_offset): qkv_model_pos plus the positions evicted without a shift
 * (qkv_model_evict); rewinding to 0 resets it. */
QKV_API int qkv_model_rope_pos(const qkv_model *m);
/* Evicts positions [from, from + n) of every layer's KV cache
 * (qkv_kv_cache_shift). shift 0: the kept keys keep their original
 * positions and so does every later token (qkv_model_rope_pos advances by
 * n); shift 1: the kept keys are re-rotated (at their layer's RoPE base) to
 * their new rows and later tokens continue from the cache length.
 * QKV_ERR_INVALID for a range outside the cache. With swa_cache, a sliding
 * layer's rows in the range go and its later rows move down as in a full
 * cache; QKV_ERR_INVALID (nothing evicted) if that would leave it fewer than
 * min(W - 1, the new length) rows, the keys its window reaches. */
QKV_API qkv_status qkv_model_evict(qkv_model *m, int from, int n, int shift, qkv_error *err);

/* ------------------------------------------------ model: one forward call */

/*
 * Named activation points, TransformerLens's names and shapes (batch of 1
 * dropped; n = the call's tokens, E = n_embd, Hq, Hkv, D as in the config).
 * The full name of a per-layer point is "blocks.<L>." followed by its name.
 */
typedef enum {
    QKV_HOOK_EMBED = 0,      /* hook_embed                  [n, E]  the embedded tokens */
    QKV_HOOK_RESID_PRE,      /* hook_resid_pre              [n, E]  residual stream entering layer L */
    QKV_HOOK_Q,              /* attn.hook_q                 [n, Hq, D]  queries before RoPE */
    QKV_HOOK_K,              /* attn.hook_k                 [n, Hkv, D] keys before RoPE */
    QKV_HOOK_V,              /* attn.hook_v                 [n, Hkv, D] values */
    QKV_HOOK_ROT_Q,          /* attn.hook_rot_q             [n, Hq, D]  queries after RoPE */
    QKV_HOOK_ROT_K,          /* attn.hook_rot_k             [n, Hkv, D] keys after RoPE (what the cache stores) */
    QKV_HOOK_PATTERN,        /* attn.hook_pattern           [Hq, n, n_keys] read-only, rows on demand */
    QKV_HOOK_Z,              /* attn.hook_z                 [n, Hq, D]  each head's output before Wo */
    QKV_HOOK_ATTN_OUT,       /* hook_attn_out               [n, E]  the attention sublayer's output (z Wo) */
    QKV_HOOK_RESID_MID,      /* hook_resid_mid              [n, E]  resid_pre + attn_out */
    QKV_HOOK_MLP_OUT,        /* hook_mlp_out                [n, E]  the MLP sublayer's output */
    QKV_HOOK_RESID_POST,     /* hook_resid_post             [n, E]  resid_mid + mlp_out */
    QKV_HOOK_LN_FINAL,       /* ln_final.hook_normalized    [n, E]  the final RMSNorm before its weight: x / rms(x) */
    QKV_HOOK_COUNT
} qkv_hook_point;

/* The point's name without its layer ("hook_resid_pre", "attn.hook_z",
 * "hook_embed", "ln_final.hook_normalized"); NULL if out of range. */
QKV_API const char *qkv_hook_point_name(qkv_hook_point p);
/* 1 for the points inside a layer (every point but hook_embed and ln_final). */
QKV_API int qkv_hook_point_per_layer(qkv_hook_point p);
/* Parses a full name: "hook_embed", "blocks.5.attn.hook_z",
 * "ln_final.hook_normalized"; "blocks.*.<name>" gives layer QKV_ALL. layer
 * is -1 (QKV_ALL) for the points outside the layers. QKV_ERR_INVALID with
 * the name quoted for anything else (the layer is not checked against a
 * model: the forward call does that). */
QKV_API qkv_status qkv_hook_parse(qkv_hook_point *point, int *layer, const char *name, qkv_error *err);
/* Writes the full name of (point, layer) into buf (at most size bytes, NUL
 * included); returns the length it needs, as snprintf. */
QKV_API int qkv_hook_format(char *buf, size_t size, qkv_hook_point point, int layer);

/* Every layer, or every head, in the scope fields below. */
#define QKV_ALL (-1)

/* Where a hook is called: one activation array of one forward call. */
typedef struct qkv_attn_view qkv_attn_view; /* hook_pattern's source: see qkv_pattern_weights */
typedef struct {
    qkv_hook_point point;
    int layer;              /* the block's index; -1 for hook_embed and ln_final */
    int pos0;               /* absolute position of the call's first token (row 0) */
    float *data;            /* the array, writable in place; NULL for hook_pattern */
    int ndim;               /* 2 or 3 */
    int64_t shape[3];       /* as listed at qkv_hook_point, outermost first */
    const qkv_attn_view *attn; /* hook_pattern only, else NULL */
} qkv_activation;

/* A hook reads the activation and may overwrite a->data (the forward pass
 * goes on with what it leaves there). Anything but QKV_OK stops the forward
 * call, which returns that status with the message the hook wrote into err
 * (or one naming the point if it wrote none). */
typedef qkv_status (*qkv_hook_fn)(void *user, const qkv_activation *a, qkv_error *err);

typedef struct {
    qkv_hook_point point;
    int layer;              /* the layer, or QKV_ALL for every layer; ignored outside the layers */
    qkv_hook_fn fn;
    void *user;
} qkv_hook;

/* Weights of hook_pattern's query head `head`, rows row0 .. row0+n_rows-1
 * of the call against keys key0 .. key0+n_keys-1, recomputed from the rotated
 * queries, the KV cache and the kernel's LSE (exp(scale q.k - lse): no n x n
 * table is kept), under the mask the head ran with (its exclusions too).
 *   w: [n_rows, n_keys] f32 output;  key indices are positions (rows of a
 *   full cache); with swa_cache, a sliding layer's keys before the rows it
 *   holds are outside every row's window: weight 0
 * QKV_ERR_INVALID if a is not a hook_pattern activation or a range is out of
 * its shape. */
QKV_API qkv_status qkv_pattern_weights(float *w, const qkv_activation *a, int head, int row0, int n_rows, int key0,
                                       int n_keys, qkv_error *err);
/* The call's rotated queries and LSE, the layer's KV cache and the
 * descriptor of its attention call (without head-scoped exclusions), for
 * probes that compute from them directly (qkv_attn_weights).
 *   q: [Hq, n, D] (after RoPE)   lse: [Hq, n]
 * Key j of the descriptor (row j of the cache) is position key0 + j, key0
 * from qkv_attn_view_key0: 0 but in a sliding layer with swa_cache. */
QKV_API const float *qkv_attn_view_q(const qkv_attn_view *v);
QKV_API const float *qkv_attn_view_lse(const qkv_attn_view *v);
QKV_API const qkv_kv_cache *qkv_attn_view_cache(const qkv_attn_view *v);
QKV_API const qkv_attn_desc *qkv_attn_view_desc(const qkv_attn_view *v);
QKV_API int qkv_attn_view_key0(const qkv_attn_view *v);
/* The descriptor query head `head` ran with: qkv_attn_view_desc's with the
 * call's exclusions scoped to that head added (a rerun head). Its exclusion
 * list lives in the view's scratch until the next call of this function or
 * qkv_pattern_weights on the call. QKV_ERR_INVALID for a head outside [0, Hq). */
QKV_API qkv_status qkv_attn_view_head_desc(qkv_attn_desc *out, const qkv_attn_view *v, int head, qkv_error *err);

/* Keys hidden from queries: at these absolute positions (rows of the KV
 * cache), in layer `layer` and query head `head` (each QKV_ALL for every
 * one: set both explicitly). A head-scoped exclusion reruns that head's
 * attention with its keys hidden, after the layer's call. */
typedef struct {
    const int *positions;   /* [n] any order, may repeat; >= 0 */
    int n;
    int layer;
    int head;
} qkv_exclusion;

typedef struct {
    int layer, head;
} qkv_head_ref;

/* Who computes a layer's attention when it is not the model's own kernel:
 * context parallelism (libqkv_mpi), where the keys of the sequence are
 * spread over machines. Called in every layer after the call's n keys and
 * values were appended to the layer's KV cache; it writes
 *   att: [Hq, n, D] the attention output of the n rows, lse: [Hq, n]
 * from q: [Hq, n, D] (rotated) and whatever keys it chooses (cache: this
 * model's own; desc: the call the model would have made on it, kv_dtype
 * and kv_head_stride of the cache). desc carries everything of the layer's
 * attention a replacement must reproduce: scale, softcap (the layer's
 * soft-cap, 0 for none; lse is then over the capped scores) and mask (the
 * layer's own: QKV_MASK_CAUSAL, or QKV_MASK_WINDOW with the sliding layer's
 * window, qkv_model_layer_attn's; a window counts keys back from each row's
 * own position, so it reads the same in the whole sequence's positions).
 * QK-norm, biases and RoPE were applied to q and the cache before the call.
 * A failure stops the forward call with its status and message. */
typedef qkv_status (*qkv_attn_replace_fn)(void *user, int layer, float *att, float *lse, const float *q, int n,
                                          const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err);

/* Everything that changes one forward call, and only that call: a zeroed
 * struct (or NULL) is the plain forward. Nothing here is kept by the model,
 * so two calls with different options never see each other's. */
typedef struct {
    /* the mask of every layer: 0 or QKV_MASK_CAUSAL is the model's causal
     * mask; QKV_MASK_WINDOW (window) or QKV_MASK_SINK_WINDOW (window, sinks)
     * over the rows of the KV cache as qkv_mask defines it (p(i) = cache
     * length - n + i). A sliding layer takes it only when it reaches back
     * less far than the layer's own window (a narrower window; sinks +
     * window within it), and keeps its own otherwise. */
    qkv_mask_kind mask;
    int window, sinks;
    const qkv_exclusion *exclude;   /* [n_exclude] */
    int n_exclude;
    /* heads whose output (hook_z) is zeroed before Wo, every row */
    const qkv_head_ref *zero_heads; /* [n_zero_heads] */
    int n_zero_heads;
    const qkv_hook *hooks;          /* [n_hooks], called in forward order, in list order at one point */
    int n_hooks;
    /* the attention of every layer (NULL: the model's kernel), of every
     * family (sliding and soft-capped layers too: desc says which); exclusions
     * and a mask override are refused with it, and hook_pattern is not called */
    qkv_attn_replace_fn replace;
    void *replace_user;
    /* the call's tokens are rotated at qkv_model_rope_pos(m) + rope_offset
     * (>= 0): a model holding one rank's part of a longer sequence passes the
     * global position of its first row */
    int rope_offset;
    /* a resumed call (activation patching, the logit lens): start_resid
     * non-NULL is the residual stream entering layer start_layer (its
     * hook_resid_pre), and the call runs layers start_layer .. L-1 and the
     * final norm only: no embedding, no hook below start_layer (hook_embed
     * included), the tokens only counted and checked. It leaves the sequence
     * state as it found it: the rows it appends to the KV caches of the
     * layers it runs are taken off again. start_layer in [0, L] (L: only the
     * final norm and lm_head run); start_layer > 0 needs start_resid.
     *   start_resid: [n, E] */
    int start_layer;
    const float *start_resid;
    /* only these rows of the unembedding (a probe that reads two logits
     * need not compute V of them): logit_ids non-NULL makes the call write
     * logits[k] for the id logit_ids[k], k < n_logit_ids, the same bits as
     * entry logit_ids[k] of the whole [V] row (each row is one dot product
     * in the matmul kernel's own order; soft-capped as that entry is). Only
     * with all_logits 0 (the last position's row).
     *   logit_ids: [n_logit_ids] in [0, V), any order, may repeat */
    const int32_t *logit_ids;
    int n_logit_ids;
} qkv_forward_opts;

/* Runs n tokens at positions pos .. pos+n-1 (appending to the KV cache,
 * unless the call is resumed: opts->start_resid) and
 * writes logits: [n, V] if all_logits, else [1, V] for the last token only
 * ([n_logit_ids] with opts->logit_ids).
 *   tokens: [n]   logits: see above, f32 (may be NULL: no lm_head)
 *   opts: this call's interventions and hooks (NULL: none)
 * QKV_ERR_FULL if the cache cannot take n more positions; QKV_ERR_INVALID for
 * n above qkv_model_n_batch, a token id outside [0, V) or options out of
 * range (a layer, head or point that does not exist, a negative position,
 * window < 1, sinks < 0). On any failure the KV cache holds the positions it
 * held before the call (with swa_cache, a sliding layer may have dropped keys
 * that no later call sees: only the earliest position qkv_model_rewind
 * accepts can change). */
QKV_API qkv_status qkv_model_forward(qkv_model *m, float *logits, const int32_t *tokens, int n, int all_logits,
                                     const qkv_forward_opts *opts, qkv_error *err);

/* Replay: runs position pos's token again, alone, over the cache's rows
 * before pos, under opts (hooks, zero_heads, exclusions, a mask override,
 * logit_ids), and writes the logits of that one position ([V], or
 * [n_logit_ids]; logits NULL: no final norm or unembedding). The sequence
 * state is left exactly as it was: each layer's row pos is read before the
 * call overwrites it and written back after (the caches' bytes do not
 * change, tests/test_model_replay.c), and nothing is allocated. The edit of
 * one query: a replay of the last position hiding key k is qkv_ablate's
 * QKV_ABLATE_LAST for k. Its logits equal those of a forward call that ends
 * at pos up to float rounding (one row's matmuls against the batch's).
 * QKV_ERR_INVALID for pos outside [0, qkv_model_pos(m)), a token outside the
 * vocabulary, options out of range or those a replay cannot take (a resumed
 * call: start_layer, start_resid; an attention replacement), after an
 * eviction without a shift (the rows' RoPE positions are no longer one
 * offset from their rows), and when a sliding layer's swa_cache no longer
 * holds the rows pos needs (the W - 1 before it). */
QKV_API qkv_status qkv_model_replay(qkv_model *m, float *logits, int pos, int32_t token, const qkv_forward_opts *opts,
                                    qkv_error *err);
/* qkv_model_replay through layers 0 .. n_layers - 1 only, no logits: a
 * probe that reads layer n_layers - 1 (its hook_pattern) pays for no layer
 * above it. QKV_ERR_INVALID for n_layers outside [1, L], and as replay. */
QKV_API qkv_status qkv_model_replay_layers(qkv_model *m, int n_layers, int pos, int32_t token,
                                           const qkv_forward_opts *opts, qkv_error *err);

/* Each attention head's output in the residual basis, TransformerLens's
 * hook_result: the head's slice of Wo applied to its hook_z alone,
 *   out[t, h, :] = Wo[:, h*D:(h+1)*D] z[t, h, :]
 *   z: [n, Hq, D] (hook_z of layer `layer`)   out: [n, Hq, E] f32
 * computed by the forward's matmul on z with the other heads' entries zero:
 * for n >= 4 bit for bit the attention output of a call with the layer's
 * other heads in zero_heads (the matmul sums up to 3 rows in another order).
 * Summed over h it is the attention sublayer's output before any
 * post-attention norm: with one (gemma2, gemma3) hook_attn_out is that sum
 * RMS-normed, and the heads are not additive in the residual stream. Uses
 * the model's run state (not during another call on the same model); the
 * KV cache is untouched. QKV_ERR_INVALID for a layer out of range, n < 1 or
 * n above the model's context. */
QKV_API qkv_status qkv_model_head_result(float *out, qkv_model *m, int layer, const float *z, int n, qkv_error *err);

/* The final RMSNorm's weight g as the forward multiplies it (output_norm.weight
 * as f32): [E], owned by m. */
QKV_API const float *qkv_model_final_norm_weight(const qkv_model *m);

/* The unembedding W_U: [V, E] in its GGUF type (output.weight, or
 * token_embd.weight when the model ties them), read through the file's
 * mapping; qkv_dequantize gives a row as the forward's matmul reads it. */
QKV_API const qkv_gguf_tensor *qkv_model_unembedding(const qkv_model *m);

/* ----------------------------------------------------------------- sampler */

/* Zero is every field's default: (qkv_sampler_params){0} is greedy. */
typedef struct {
    float temperature;      /* 0: greedy (argmax, lowest id on ties) */
    int top_k;              /* 0: off */
    float top_p;            /* 0 or 1: off */
    uint64_t seed;          /* of the splitmix64 stream the draws come from */
} qkv_sampler_params;

/* A sampler owns its random stream and a [V] candidate buffer, so that
 * qkv_sample never allocates. p NULL: greedy. QKV_ERR_INVALID for n_vocab < 1
 * or a negative temperature, top_k or top_p; QKV_ERR_NOMEM. */
typedef struct qkv_sampler qkv_sampler;
QKV_API qkv_status qkv_sampler_init(qkv_sampler **out, int n_vocab, const qkv_sampler_params *p, qkv_error *err);
QKV_API void qkv_sampler_free(qkv_sampler *s);   /* NULL is fine */

/* Picks a token from logits: [V] f32 (V = the n_vocab of init), advancing the
 * sampler's stream unless greedy. */
QKV_API int32_t qkv_sample(qkv_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif

#endif /* QKV_MODEL_H */
