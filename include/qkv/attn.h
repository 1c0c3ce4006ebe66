/*
 * qkv/attn.h — the attention layer: masks, the exact kernels and their plans,
 * RoPE, the KV cache, and weight rows recomputed from a kernel's LSE. It
 * knows nothing of models, files or probes (it includes qkv/base.h only).
 */
#ifndef QKV_ATTN_H
#define QKV_ATTN_H

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------- masks */

typedef enum {
    QKV_MASK_NONE = 0,        /* every key visible */
    QKV_MASK_CAUSAL = 1,      /* key j visible to row i iff j <= p(i) */
    QKV_MASK_WINDOW = 2,      /* causal and j > p(i) - window (window keys incl. self) */
    QKV_MASK_SINK_WINDOW = 3  /* causal and (j < sinks or j > p(i) - window): StreamingLLM */
} qkv_mask_kind;

/* p(i) = Lk - Lq + i. Key indices are rows of K (0 .. Lk-1). The exclusion
 * list removes keys from every row on top of the kind's rule (ablation).
 * Zero is the default: (qkv_mask){0} is no mask, no exclusions. */
typedef struct {
    qkv_mask_kind kind;
    int window;            /* W >= 1 for WINDOW and SINK_WINDOW */
    int sinks;             /* S >= 0 for SINK_WINDOW */
    const int *exclude;    /* exclude: [n_exclude] key indices, any order, may repeat */
    int n_exclude;
} qkv_mask;

/* 1 if key j is visible to query row i under mask m for the given lengths.
 * The one definition every kernel and test agrees on. */
QKV_API int qkv_mask_visible(const qkv_mask *m, int q_len, int kv_len, int i, int j);
/* The keys row i sees: how many j in [0, kv_len) qkv_mask_visible counts
 * visible, in O(1) by the kind's rule (key by key with exclusions). */
QKV_API int qkv_mask_row_count(const qkv_mask *m, int q_len, int kv_len, int i);

/* --------------------------------------------------------------- attention */

typedef enum {
    QKV_KERNEL_AUTO = 0,       /* decode for Lq <= 8 and long KV, else flash */
    QKV_KERNEL_REFERENCE = 1,  /* textbook: materialises scores, double accumulation */
    QKV_KERNEL_FLASH = 2,      /* tiled online softmax, O(n) memory, GQA-packed */
    QKV_KERNEL_DECODE = 3,     /* split-KV across threads, LSE merge (Lq <= 8) */
    QKV_KERNEL_FLASH_BF16 = 4  /* flash with bf16 dot products: scaled Q and the softmax
                                  weights rounded to bf16 (2^-9 relative), f32 accumulation
                                  and softmax; ~2x the f32 rate on CPUs with AVX512_BF16,
                                  exactly the flash kernel elsewhere. Never chosen by AUTO */
} qkv_kernel;

QKV_API const char *qkv_kernel_name(qkv_kernel k);
/* Parses "ref" | "reference" | "flash" | "decode" | "flash-bf16" | "auto";
 * QKV_ERR_INVALID otherwise, the message naming the choices and what was given. */
QKV_API qkv_status qkv_kernel_parse(qkv_kernel *out, const char *name, qkv_error *err);

#define QKV_HEAD_DIM_MIN 16
#define QKV_HEAD_DIM_MAX 256
#define QKV_DECODE_MAX_Q 8
/* The reference kernel refuses a score table [Hq, Lq, Lk] of more entries
 * (2^29 doubles = 4 GiB: Llama-3.1-8B heads at n = 4096). */
#define QKV_REFERENCE_MAX_SCORES ((int64_t)1 << 29)

/* The shape fields (n_q_head .. head_dim) are required; every other field's
 * zero is its default (1/sqrt(D), no soft-capping, no mask, f32, dense, all
 * threads), so a designated initialiser names only what it sets:
 *   qkv_attn_desc d = {.n_q_head = 32, .n_kv_head = 8, .q_len = n, .kv_len = n,
 *                      .head_dim = 128, .mask = {.kind = QKV_MASK_CAUSAL}};
 * Soft-capping (Gemma 2's attn_logit_softcapping) replaces each score
 * s = scale * q.k by c * tanh(s / c) before the mask and the softmax, in
 * every kernel; LSE is then the log-sum-exp of the capped scores, so weights
 * recomputed from it (qkv_attn_weights) and LSE merges stay exact. */
typedef struct {
    int n_q_head;          /* Hq */
    int n_kv_head;         /* Hkv, Hq % Hkv == 0 */
    int q_len;             /* Lq >= 1 */
    int kv_len;            /* Lk >= 1 */
    int head_dim;          /* D in [16, 256] */
    float scale;           /* 0 means 1/sqrt(D) */
    float softcap;         /* c > 0: scores become c*tanh(s/c) before the softmax (Gemma 2); 0: none */
    qkv_mask mask;
    qkv_dtype kv_dtype;    /* element type of K and V */
    int64_t kv_head_stride;/* elements between KV heads; 0 means Lk * D (dense) */
    int n_threads;         /* 0 means all available */
} qkv_attn_desc;

/* Checks a descriptor; QKV_OK or QKV_ERR_INVALID with the field named. */
QKV_API qkv_status qkv_attn_check(const qkv_attn_desc *d, qkv_error *err);

/* The kernel AUTO resolves to for this descriptor. */
QKV_API qkv_kernel qkv_attn_pick(const qkv_attn_desc *d);

/*
 * Non-finite numbers, in every kernel (reference, flash on every ISA,
 * flash-bf16, decode, cached and planned calls alike): IEEE propagation, no
 * check and no rejection.
 *   - A row that sees no key (its mask and exclusions hide them all) is the
 *     only fully masked row: O = 0, LSE = -inf. Whether a row is masked is
 *     decided by the mask, never by the scores.
 *   - Scores are float: a score beyond the float range (|q.k * scale| >
 *     FLT_MAX, e.g. q = k = 1e30, or FLT_MAX itself) is +-inf (the reference
 *     computes in double and rounds such a score to +-inf).
 *   - A NaN or +inf score on a visible key (from a NaN or an overflow in Q or
 *     K) makes that row's O and LSE NaN. Large finite scores are exact.
 *   - A -inf score is a weight of 0; a row whose visible keys all score -inf
 *     has LSE = -inf and O = NaN (0 / 0).
 *   - With softcap c, a score of +-inf is capped to +-c like any other (a
 *     finite weight: the row stays finite); a NaN score stays NaN.
 *   - V: a NaN or inf in the V of a visible key reaches O (as weight x v:
 *     0 x inf is NaN); the V of a key hidden from a row never enters that
 *     row in the reference, and may in the tiled kernels (a hidden key in a
 *     partly visible tile is weighted 0), so V should be finite.
 * The scale is never 0 here: 0 means the default 1/sqrt(D).
 */

/*
 * O = softmax(cap(scale * Q K^T) + mask) V, per query head, K/V head chosen
 * by GQA; cap(s) = c tanh(s / c) with c = d->softcap > 0, else s.
 *   o:   [Hq, Lq, D]   f32 output
 *   lse: [Hq, Lq]      f32 output, natural log; may be NULL
 *   q:   [Hq, Lq, D]   f32
 *   k:   [Hkv, Lk, D]  kv_dtype, heads kv_head_stride elements apart
 *   v:   [Hkv, Lk, D]  kv_dtype, same layout as k
 * The decode kernel requires Lq <= QKV_DECODE_MAX_Q.
 */
QKV_API qkv_status qkv_attn(float *o, float *lse, const float *q, const void *k, const void *v,
                                 const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err);
/* (One shot: a plan for this call is made, run and freed. A caller that
 * attends repeatedly keeps a plan instead, below.) */

/* The reference kernel with its weight matrix returned.
 *   weights: [Hq, Lq, Lk] f32 output (softmax probabilities; masked = 0); may be NULL
 * Refuses (QKV_ERR_TOO_LARGE) when Hq*Lq*Lk > QKV_REFERENCE_MAX_SCORES. */
QKV_API qkv_status qkv_attn_reference(float *o, float *lse, float *weights, const float *q,
                                           const void *k, const void *v, const qkv_attn_desc *d,
                                           qkv_error *err);

/*
 * A plan: every buffer the flash and decode kernels need (per-thread tile
 * scratch, decode's split partials, the exclusion bitmap), sized once for the
 * largest problem it will serve, so that qkv_attn_run never allocates. A call
 * fits a plan when its n_q_head, q_len, kv_len, head_dim and n_threads are at
 * most the plan's (anything else may differ: n_kv_head, mask, exclusions,
 * dtype, strides, scale); otherwise QKV_ERR_INVALID names the field.
 *   max_desc:  the largest call (a valid descriptor; its n_threads is not read)
 *   kernel:    the kernel every run uses; AUTO picks per call (qkv_attn_pick), so
 *              its plan holds what flash and decode need. DECODE requires
 *              max_desc->q_len <= QKV_DECODE_MAX_Q. REFERENCE plans hold nothing
 *              and their runs allocate (the score table): only flash, flash-bf16,
 *              decode and auto runs are allocation-free.
 *   n_threads: the most threads a run may use, 0 = all available; a run's
 *              d->n_threads 0 means the plan's
 * A plan whose max_desc has bf16 or f16 K/V, for the flash or auto kernel,
 * also holds per thread an f32 copy of one KV head's keys and values
 * (max_desc's kv_len x head_dim floats each, at most 4 MiB each): prefill
 * converts each KV head once per thread instead of each tile once per block
 * of queries. Without it (a plan made for f32 K/V, or K/V longer than the
 * copy) bf16/f16 calls convert per tile, with the same results bit for bit.
 * A plan serves one run at a time (runs write its scratch); give each thread
 * that calls concurrently its own. The threads are libqkv's own pool's,
 * started by plan init and kept, so a run, the first included, creates none
 * (tests/test_alloc.c counts).
 *   qkv_attn_plan *plan;
 *   qkv_attn_plan_init(&plan, &max_desc, QKV_KERNEL_AUTO, 0, &err);
 *   for (...) qkv_attn_run(plan, o, lse, q, k, v, &desc, &err);  // no malloc
 *   qkv_attn_plan_free(plan);
 */
typedef struct qkv_attn_plan qkv_attn_plan;

/* Bytes of memory a plan needs, at any alignment (qkv_attn_plan_init_in);
 * 0 if the arguments are invalid (qkv_attn_plan_init says why). */
QKV_API size_t qkv_attn_workspace_size(const qkv_attn_desc *max_desc, qkv_kernel kernel, int n_threads);

/* A plan in memory it allocates itself; release with qkv_attn_plan_free.
 * QKV_ERR_INVALID for a bad max_desc, kernel or n_threads; QKV_ERR_NOMEM. */
QKV_API qkv_status qkv_attn_plan_init(qkv_attn_plan **out, const qkv_attn_desc *max_desc, qkv_kernel kernel,
                                      int n_threads, qkv_error *err);

/* A plan that lives in the caller's memory, which it never frees:
 *   workspace: [bytes] any alignment, bytes >= qkv_attn_workspace_size(...);
 *              it must outlive the plan and not be used for anything else meanwhile.
 * *out points into workspace; qkv_attn_plan_free on it does nothing. */
QKV_API qkv_status qkv_attn_plan_init_in(qkv_attn_plan **out, void *workspace, size_t bytes,
                                         const qkv_attn_desc *max_desc, qkv_kernel kernel, int n_threads,
                                         qkv_error *err);
QKV_API void qkv_attn_plan_free(qkv_attn_plan *plan);  /* NULL is fine */

/* qkv_attn with the plan's kernel and memory (same o, lse, q, k, v
 * shapes, same results bit for bit); never allocates unless the plan's
 * kernel is REFERENCE. */
QKV_API qkv_status qkv_attn_run(qkv_attn_plan *plan, float *o, float *lse, const float *q, const void *k,
                                const void *v, const qkv_attn_desc *d, qkv_error *err);

/* The instruction set the flash and decode kernels run on this CPU: "avx512",
 * "avx2" or "scalar" (QKV_ISA=avx512|avx2|scalar in the environment narrows
 * the choice). */
QKV_API const char *qkv_attn_isa(void);

/* -------------------------------------------------------------------- RoPE */

typedef enum {
    QKV_ROPE_HALF = 0,        /* rotate-half: pairs (i, i + D/2), HF transformers */
    QKV_ROPE_INTERLEAVED = 1  /* pairs (2i, 2i + 1), Meta's reference and ggml llama */
} qkv_rope_pairing;

typedef enum {
    QKV_ROPE_SCALING_NONE = 0,
    QKV_ROPE_SCALING_LLAMA3 = 1   /* Llama-3.1 frequency scaling ("rope_type": "llama3") */
} qkv_rope_scaling;

typedef struct {
    qkv_rope_pairing pairing;
    float theta;                  /* base, e.g. 10000 or 500000 */
    qkv_rope_scaling scaling;
    float factor;                 /* llama3: 8 */
    float low_freq_factor;        /* llama3: 1 */
    float high_freq_factor;       /* llama3: 4 */
    int original_max_position;    /* llama3: 8192 */
    const float *freq_factors;    /* [n_rot/2] or NULL: inv_freq[i] /= freq_factors[i] after
                                     any scaling (GGUF's rope_freqs.weight, LongRoPE's
                                     rope_factors_long/short.weight, as ggml does) */
    int n_rot;                    /* partial rotary: only dims [0, n_rot) of each head rotate, the
                                     frequencies those of a head of n_rot (inv_freq[i] =
                                     theta^(-2i/n_rot)), the pairs taken within them (rotate-half:
                                     (i, i + n_rot/2)); dims [n_rot, D) pass unchanged (Phi-3,
                                     transformers' partial_rotary_factor, ggml's n_dims). Even,
                                     2 <= n_rot <= D; 0: the whole head */
    float attn_factor;            /* cos and sin are multiplied by it (LongRoPE's attention factor,
                                     ggml's mscale): 0 means 1 */
} qkv_rope;

/* Defaults: rotate-half, theta 10000, no scaling, the whole head, factor 1. */
QKV_API qkv_rope qkv_rope_default(void);

/* Inverse frequencies as transformers computes them (float32 arithmetic).
 *   inv_freq: [n_rot/2] output (n_rot 0: [D/2]) */
QKV_API qkv_status qkv_rope_inv_freq(float *inv_freq, const qkv_rope *r, int head_dim, qkv_error *err);

/* Rotates x in place by position: angle = (float)pos[t] * inv_freq[i],
 * each pair (x_a, x_b) of the first n_rot dims becomes
 * (x_a c - x_b s, x_b c + x_a s) with c, s = cos, sin(angle) x attn_factor.
 *   x:   [n_head, n_tok, D] f32
 *   pos: [n_tok] absolute positions */
QKV_API qkv_status qkv_rope_apply(float *x, const int64_t *pos, const qkv_rope *r, int n_head, int n_tok,
                                  int head_dim, qkv_error *err);

/* ---------------------------------------------------------------- KV cache */

/* Memory for K/V arrays a decode step streams: 2 MiB aligned and, from 2 MiB
 * up, advised for transparent huge pages (Linux madvise), so the stream
 * crosses 512x fewer page boundaries (BENCHMARKS.md has the gain). Any size; NULL if out of memory. Release with qkv_kv_free. The KV
 * cache below allocates this way; callers of qkv_attn may too. */
QKV_API void *qkv_kv_alloc(size_t bytes);
QKV_API void qkv_kv_free(void *p);

/* One layer's K (after RoPE) and V, stored in [Hkv, capacity, D] of dtype.
 * init makes all of its memory resident (as llama.cpp clears its KV buffers
 * when it makes a context): appends never fault pages in. */
typedef struct qkv_kv_cache qkv_kv_cache;

QKV_API qkv_status qkv_kv_cache_init(qkv_kv_cache **out, int n_kv_head, int head_dim, int capacity,
                                     qkv_dtype dtype, qkv_error *err);
QKV_API void qkv_kv_cache_free(qkv_kv_cache *c);
QKV_API int qkv_kv_cache_len(const qkv_kv_cache *c);
QKV_API int qkv_kv_cache_capacity(const qkv_kv_cache *c);
QKV_API qkv_dtype qkv_kv_cache_dtype(const qkv_kv_cache *c);
/* Forgets positions >= len (len <= current length). */
QKV_API qkv_status qkv_kv_cache_truncate(qkv_kv_cache *c, int len, qkv_error *err);

/* Appends n_new positions, converting to the cache dtype.
 *   k, v: [Hkv, n_new, D] f32
 * QKV_ERR_FULL (nothing written) if len + n_new > capacity. */
QKV_API qkv_status qkv_kv_cache_append(qkv_kv_cache *c, const float *k, const float *v, int n_new,
                                       qkv_error *err);

/* Reads positions [start, start + n) back as f32.
 *   k, v: [Hkv, n, D] f32 outputs (either may be NULL) */
QKV_API qkv_status qkv_kv_cache_read(float *k, float *v, const qkv_kv_cache *c, int start, int n,
                                     qkv_error *err);

/* Evicts positions [from, from + n) (from + n <= length): the later rows move
 * down by n, the length drops by n. rope NULL: the moved keys keep their
 * rotation (their original positions; a mask over the rows then sees the
 * same keys as before). rope non-NULL: the moved keys are rotated by -n, so
 * that row r holds its key as if rotated at position r (positions re-indexed
 * within the cache: StreamingLLM, llama.cpp's context shift). RoPE composes
 * (R(a) R(b) = R(a + b)), so this equals rotating the unrotated keys at their
 * new rows, up to float rounding (and the cache dtype's, once more); the
 * rotation by -n is pure (rope's attn_factor is not applied again). Never
 * allocates. QKV_ERR_INVALID for a range outside [0, length) or a bad rope. */
QKV_API qkv_status qkv_kv_cache_shift(qkv_kv_cache *c, int from, int n, const qkv_rope *rope, qkv_error *err);

/* Overwrites rows [start, start + n) of the cache (within its length) with
 * k, v: [Hkv, n, D] f32, converted to the cache dtype as append converts
 * (so rows read as f32 and written back are the same bytes). Never
 * allocates. QKV_ERR_INVALID for a range outside [0, length). */
QKV_API qkv_status qkv_kv_cache_write(qkv_kv_cache *c, int start, const float *k, const float *v, int n,
                                      qkv_error *err);

/* Raw storage for kernels: pointers to [Hkv, capacity, D] in the cache dtype. */
QKV_API const void *qkv_kv_cache_k(const qkv_kv_cache *c);
QKV_API const void *qkv_kv_cache_v(const qkv_kv_cache *c);

/* Attention of q against everything in the cache. d->kv_len, kv_dtype,
 * kv_head_stride, n_kv_head and head_dim are taken from the cache.
 *   o:   [Hq, Lq, D], lse: [Hq, Lq] or NULL, q: [Hq, Lq, D] */
QKV_API qkv_status qkv_attn_cached(float *o, float *lse, const float *q, const qkv_kv_cache *c,
                                        const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err);
/* The same through a plan (qkv_attn_run): d->kv_len becomes the cache's
 * length, so a plan for a cache has max kv_len = its capacity. */
QKV_API qkv_status qkv_attn_run_cached(qkv_attn_plan *plan, float *o, float *lse, const float *q,
                                       const qkv_kv_cache *c, const qkv_attn_desc *d, qkv_error *err);

/* ------------------------------------------------------- attention weights */

/* Weights of query head `head`: rows row0 .. row0+n_rows-1 against keys
 * key0 .. key0+n_keys-1.
 *   w:   [n_rows, n_keys] f32 output
 *   q:   [Hq, Lq, D] f32 (after RoPE);  lse: [Hq, Lq] as the kernel returned it
 *   k:   [Hkv, Lk, D] of d->kv_dtype, heads d->kv_head_stride apart (0: dense)
 * Keys hidden by d->mask (qkv_mask_visible) and rows with LSE -inf give 0.
 * Costs n_rows x n_keys dot products of D (masked keys none): the sink
 * columns of a row (key0 = 0, n_keys = k) are k dot products. */
QKV_API qkv_status qkv_attn_weights(float *w, const float *q, const float *lse, const void *k,
                                    const qkv_attn_desc *d, int head, int row0, int n_rows, int key0,
                                    int n_keys, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_ATTN_H */
