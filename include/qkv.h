/*
 * qkv.h — the whole public API of libqkv: exact, fast self-attention for
 * Llama-family models, and the model / probe layers built on it.
 *
 * Conventions (stated once, used everywhere):
 *   - Shapes are written outermost first, row-major, last dim contiguous,
 *     exactly as PyTorch prints them: q: [n_q_head, q_len, head_dim].
 *   - Hq = n_q_head, Hkv = n_kv_head, Lq = q_len, Lk = kv_len, D = head_dim.
 *     Hq % Hkv == 0; query head h reads KV head h / (Hq / Hkv) (GQA).
 *   - Causal masking is bottom-right aligned: query row i sits at absolute
 *     key position Lk - Lq + i (as in flash-attn and every KV-cache decode).
 *   - LSE is the natural-log sum of exp of the scaled, masked scores of a row.
 *     A fully masked row has O = 0 and LSE = -inf, never NaN.
 *   - Functions return qkv_status; on failure the optional qkv_error receives
 *     one line naming what was wrong. The library never prints, never exits
 *     and is safe to call from several threads (an object with scratch in it,
 *     a plan, model or sampler, serves one call at a time). Its process-wide
 *     state is its thread pool (workers started when a plan or model is made,
 *     or at a loop's first need, and kept for the process; one parallel loop holds the
 *     pool at a time, a concurrent one runs on its caller's thread) and the
 *     kernel ISA, chosen once from CPUID and QKV_ISA.
 *   - Parameter structs qkv_attn_desc, qkv_mask, qkv_model_params and
 *     qkv_sampler_params: zero is every optional field's default, so a
 *     designated initialiser names only what it sets (qkv_rope has
 *     qkv_rope_default()).
 *   - Arguments: outputs first, then inputs, then sizes.
 */
#ifndef QKV_H
#define QKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks what libqkv exports: the library is built with -fvisibility=hidden,
 * so the functions declared here, and nothing else, are its ABI
 * (tests/test_library.c checks the shared library's symbol table). */
#if defined(__GNUC__) || defined(__clang__)
#define QKV_API __attribute__((visibility("default")))
#else
#define QKV_API
#endif

/* The API's version: MAJOR changes break source or binary compatibility (the
 * shared library's soname is libqkv.so.MAJOR), MINOR adds, PATCH fixes. */
#define QKV_VERSION_MAJOR 0
#define QKV_VERSION_MINOR 2
#define QKV_VERSION_PATCH 0
#define QKV_VERSION_STR_(x) #x
#define QKV_VERSION_STR(x) QKV_VERSION_STR_(x)
#define QKV_VERSION                                                                  \
    QKV_VERSION_STR(QKV_VERSION_MAJOR) "." QKV_VERSION_STR(QKV_VERSION_MINOR) "." \
    QKV_VERSION_STR(QKV_VERSION_PATCH)

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH" (the
 * header a program was compiled with says QKV_VERSION). */
QKV_API const char *qkv_version(void);

/* ------------------------------------------------------------------ errors */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_INVALID = 1,     /* an argument is out of its documented range */
    QKV_ERR_NOMEM = 2,       /* an allocation failed */
    QKV_ERR_IO = 3,          /* a file could not be opened, read or written */
    QKV_ERR_FORMAT = 4,      /* a file's contents are malformed */
    QKV_ERR_FULL = 5,        /* a fixed-capacity container is full */
    QKV_ERR_TOO_LARGE = 6,   /* the request would need more memory than allowed */
    QKV_ERR_UNSUPPORTED = 7, /* valid, but not implemented (e.g. a tensor type) */
    QKV_ERR_CANCELLED = 8    /* a progress callback asked the call to stop */
} qkv_status;

typedef struct {
    qkv_status status;
    char msg[320];
} qkv_error;

/* Name of a status code, e.g. "invalid argument". Never NULL. */
QKV_API const char *qkv_status_str(qkv_status s);

/* ------------------------------------------------------------------ dtypes */

typedef enum {
    QKV_DTYPE_F32 = 0,
    QKV_DTYPE_BF16 = 1,
    QKV_DTYPE_F16 = 2
} qkv_dtype;

QKV_API size_t qkv_dtype_size(qkv_dtype t);          /* bytes per element */
QKV_API const char *qkv_dtype_name(qkv_dtype t);     /* "f32", "bf16", "f16" */
/* Parses "f32" | "bf16" | "f16"; returns QKV_ERR_INVALID otherwise. */
QKV_API qkv_status qkv_dtype_parse(qkv_dtype *out, const char *name);

/* Round-to-nearest-even conversions, NaN preserved. */
QKV_API uint16_t qkv_f32_to_bf16(float x);
QKV_API float qkv_bf16_to_f32(uint16_t x);
QKV_API uint16_t qkv_f32_to_f16(float x);
QKV_API float qkv_f16_to_f32(uint16_t x);
/* dst[n] (dtype t) <- src[n] f32, and back. */
QKV_API void qkv_convert_from_f32(void *dst, qkv_dtype t, const float *src, size_t n);
QKV_API void qkv_convert_to_f32(float *dst, const void *src, qkv_dtype t, size_t n);

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
/* Parses "ref" | "reference" | "flash" | "decode" | "flash-bf16" | "auto". */
QKV_API qkv_status qkv_kernel_parse(qkv_kernel *out, const char *name);

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
QKV_API qkv_status qkv_attention(float *o, float *lse, const float *q, const void *k, const void *v,
                                 const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err);
/* (One shot: a plan for this call is made, run and freed. A caller that
 * attends repeatedly keeps a plan instead, below.) */

/* The reference kernel with its weight matrix returned.
 *   weights: [Hq, Lq, Lk] f32 output (softmax probabilities; masked = 0); may be NULL
 * Refuses (QKV_ERR_TOO_LARGE) when Hq*Lq*Lk > QKV_REFERENCE_MAX_SCORES. */
QKV_API qkv_status qkv_attention_reference(float *o, float *lse, float *weights, const float *q,
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

/* qkv_attention with the plan's kernel and memory (same o, lse, q, k, v
 * shapes, same results bit for bit); never allocates unless the plan's
 * kernel is REFERENCE. */
QKV_API qkv_status qkv_attn_run(qkv_attn_plan *plan, float *o, float *lse, const float *q, const void *k,
                                const void *v, const qkv_attn_desc *d, qkv_error *err);

/* The instruction set the flash and decode kernels run on this CPU: "avx512",
 * "avx2" or "scalar" (QKV_ISA=avx512|avx2|scalar in the environment narrows
 * the choice). */
QKV_API const char *qkv_attn_isa(void);

/* The CPUs this process may run on now (its affinity mask: taskset, cgroup
 * cpusets), at least 1: what n_threads 0 ("all available") means everywhere
 * in this header. */
QKV_API int qkv_cpu_count(void);

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
    const float *freq_factors;    /* [D/2] or NULL: inv_freq[i] /= freq_factors[i] after
                                     any scaling (GGUF's rope_freqs.weight, as ggml does) */
} qkv_rope;

/* Defaults: rotate-half, theta 10000, no scaling. */
QKV_API qkv_rope qkv_rope_default(void);

/* Inverse frequencies as transformers computes them (float32 arithmetic).
 *   inv_freq: [D/2] output */
QKV_API qkv_status qkv_rope_inv_freq(float *inv_freq, const qkv_rope *r, int head_dim, qkv_error *err);

/* Rotates x in place by position: angle = (float)pos[t] * inv_freq[i].
 *   x:   [n_head, n_tok, D] f32
 *   pos: [n_tok] absolute positions */
QKV_API qkv_status qkv_rope_apply(float *x, const int64_t *pos, const qkv_rope *r, int n_head, int n_tok,
                                  int head_dim, qkv_error *err);

/* ---------------------------------------------------------------- KV cache */

/* Memory for K/V arrays a decode step streams: 2 MiB aligned and, from 2 MiB
 * up, advised for transparent huge pages (Linux madvise), so the stream
 * crosses 512x fewer page boundaries (+10-25% decode bandwidth per core on
 * Zen 4). Any size; NULL if out of memory. Release with qkv_kv_free. The KV
 * cache below allocates this way; callers of qkv_attention may too. */
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
 * new rows, up to float rounding (and the cache dtype's, once more). Never
 * allocates. QKV_ERR_INVALID for a range outside [0, length) or a bad rope. */
QKV_API qkv_status qkv_kv_cache_shift(qkv_kv_cache *c, int from, int n, const qkv_rope *rope, qkv_error *err);

/* Raw storage for kernels: pointers to [Hkv, capacity, D] in the cache dtype. */
QKV_API const void *qkv_kv_cache_k(const qkv_kv_cache *c);
QKV_API const void *qkv_kv_cache_v(const qkv_kv_cache *c);

/* Attention of q against everything in the cache. d->kv_len, kv_dtype,
 * kv_head_stride, n_kv_head and head_dim are taken from the cache.
 *   o:   [Hq, Lq, D], lse: [Hq, Lq] or NULL, q: [Hq, Lq, D] */
QKV_API qkv_status qkv_attention_cached(float *o, float *lse, const float *q, const qkv_kv_cache *c,
                                        const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err);
/* The same through a plan (qkv_attn_run): d->kv_len becomes the cache's
 * length, so a plan for a cache has max kv_len = its capacity. */
QKV_API qkv_status qkv_attn_run_cached(qkv_attn_plan *plan, float *o, float *lse, const float *q,
                                       const qkv_kv_cache *c, const qkv_attn_desc *d, qkv_error *err);


/* --------------------------------------------------------------------- npy */

/* A .npy array in memory: little-endian, C order; float32, int32, int64 or
 * float64 (the oracles' fixtures; a caller checks the type it needs). */
typedef enum { QKV_NPY_F32 = 0, QKV_NPY_I32 = 1, QKV_NPY_I64 = 2, QKV_NPY_F64 = 3 } qkv_npy_type;

#define QKV_NPY_MAX_DIMS 8
typedef struct {
    qkv_npy_type type;
    int ndim;
    int64_t shape[QKV_NPY_MAX_DIMS];
    int64_t count;      /* product of shape */
    void *data;         /* [shape...] of type, malloc'd */
} qkv_npy;

/* Loads path; QKV_ERR_IO / QKV_ERR_FORMAT (the message names the file and the
 * problem: truncated, big-endian, Fortran order, unsupported dtype ...). */
QKV_API qkv_status qkv_npy_load(qkv_npy *out, const char *path, qkv_error *err);
QKV_API void qkv_npy_free(qkv_npy *a);

/* Writes a float32 array (qkv_npy_writer open, put, close). path is written
 * in place and removed if any step fails, so no partial file is left; a
 * negative dimension is QKV_ERR_INVALID. Keeping a previous file at path
 * until the write succeeded is the caller's (write a temporary beside it,
 * then rename: qkv's CLI does, cli/outputs.c).
 *   data: [shape[0], ..., shape[ndim-1]] f32 */
QKV_API qkv_status qkv_npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape,
                                    qkv_error *err);

/* -------------------------------------------------------------------- gguf */

/*
 * A GGUF file (versions 2 and 3, little-endian), memory-mapped read-only:
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x      { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
 *   padding to general.alignment (u32, default 32), then the tensor data;
 *   each tensor at data start + offset (a multiple of the alignment).
 * string = u64 length + bytes (no NUL); array = u32 element type + u64 count +
 * elements (strings and nested arrays included).
 * Every offset, size, count and length is checked against the file at open;
 * a malformed file gives QKV_ERR_FORMAT naming the file and the problem.
 * Strings returned by the accessors are NUL-terminated copies owned by the
 * qkv_gguf (a length is given too: a GGUF string may contain NUL bytes).
 * Everything returned lives until qkv_gguf_close.
 */
typedef struct qkv_gguf qkv_gguf;

/* Metadata value types (ids as stored in the file). */
typedef enum {
    QKV_GGUF_TYPE_U8 = 0,
    QKV_GGUF_TYPE_I8 = 1,
    QKV_GGUF_TYPE_U16 = 2,
    QKV_GGUF_TYPE_I16 = 3,
    QKV_GGUF_TYPE_U32 = 4,
    QKV_GGUF_TYPE_I32 = 5,
    QKV_GGUF_TYPE_F32 = 6,
    QKV_GGUF_TYPE_BOOL = 7,
    QKV_GGUF_TYPE_STRING = 8,
    QKV_GGUF_TYPE_ARRAY = 9,
    QKV_GGUF_TYPE_U64 = 10,
    QKV_GGUF_TYPE_I64 = 11,
    QKV_GGUF_TYPE_F64 = 12
} qkv_gguf_type;

/* Tensor element types (ggml ids as stored in the file). Ids not listed
 * (4, 5, 31-33, 36-38: retired) or above 41 are rejected at open. */
typedef enum {
    QKV_GGML_TYPE_F32 = 0,
    QKV_GGML_TYPE_F16 = 1,
    QKV_GGML_TYPE_Q4_0 = 2,
    QKV_GGML_TYPE_Q4_1 = 3,
    QKV_GGML_TYPE_Q5_0 = 6,
    QKV_GGML_TYPE_Q5_1 = 7,
    QKV_GGML_TYPE_Q8_0 = 8,
    QKV_GGML_TYPE_Q8_1 = 9,
    QKV_GGML_TYPE_Q2_K = 10,
    QKV_GGML_TYPE_Q3_K = 11,
    QKV_GGML_TYPE_Q4_K = 12,
    QKV_GGML_TYPE_Q5_K = 13,
    QKV_GGML_TYPE_Q6_K = 14,
    QKV_GGML_TYPE_Q8_K = 15,
    QKV_GGML_TYPE_IQ2_XXS = 16,
    QKV_GGML_TYPE_IQ2_XS = 17,
    QKV_GGML_TYPE_IQ3_XXS = 18,
    QKV_GGML_TYPE_IQ1_S = 19,
    QKV_GGML_TYPE_IQ4_NL = 20,
    QKV_GGML_TYPE_IQ3_S = 21,
    QKV_GGML_TYPE_IQ2_S = 22,
    QKV_GGML_TYPE_IQ4_XS = 23,
    QKV_GGML_TYPE_I8 = 24,
    QKV_GGML_TYPE_I16 = 25,
    QKV_GGML_TYPE_I32 = 26,
    QKV_GGML_TYPE_I64 = 27,
    QKV_GGML_TYPE_F64 = 28,
    QKV_GGML_TYPE_IQ1_M = 29,
    QKV_GGML_TYPE_BF16 = 30,
    QKV_GGML_TYPE_TQ1_0 = 34,
    QKV_GGML_TYPE_TQ2_0 = 35,
    QKV_GGML_TYPE_MXFP4 = 39,
    QKV_GGML_TYPE_NVFP4 = 40,
    QKV_GGML_TYPE_Q1_0 = 41
} qkv_ggml_type;

/* "u8" ... "f64", "string", "array"; "?" for an unknown id. */
QKV_API const char *qkv_gguf_type_name(qkv_gguf_type t);
/* llama.cpp's names: "f32", "f16", "q4_0", "q4_K", "q6_K", "bf16" ...; "?" if unknown. */
QKV_API const char *qkv_ggml_type_name(qkv_ggml_type t);
/* Elements per block (1 for plain types, 32 or 256 for quantised ones) and
 * bytes per block; 0 for an unknown id. */
QKV_API int64_t qkv_ggml_block_elems(qkv_ggml_type t);
QKV_API size_t qkv_ggml_block_bytes(qkv_ggml_type t);
/* Bytes of n consecutive elements (a row of n = shape[last]); 0 if the type is
 * unknown or n is not a multiple of the block size. Row r of a 2-D weight
 * [rows, n] starts at data + r * qkv_ggml_row_size(type, n). */
QKV_API size_t qkv_ggml_row_size(qkv_ggml_type t, int64_t n);

/* Opens and validates path. QKV_ERR_IO if it cannot be opened or mapped,
 * QKV_ERR_FORMAT if malformed (bad magic, version 1, truncated, absurd counts,
 * unknown value or tensor type, duplicate key or tensor name, tensor data out
 * of the file or overlapping ...), QKV_ERR_NOMEM. *out is NULL on failure. */
QKV_API qkv_status qkv_gguf_open(qkv_gguf **out, const char *path, qkv_error *err);
QKV_API void qkv_gguf_close(qkv_gguf *g);   /* NULL is fine */

QKV_API const char *qkv_gguf_path(const qkv_gguf *g);      /* as given to open */
QKV_API uint32_t qkv_gguf_version(const qkv_gguf *g);      /* 2 or 3 */
QKV_API uint32_t qkv_gguf_alignment(const qkv_gguf *g);    /* general.alignment or 32 */
QKV_API uint64_t qkv_gguf_file_size(const qkv_gguf *g);
QKV_API uint64_t qkv_gguf_data_offset(const qkv_gguf *g);  /* file offset of the data section */

/* Metadata. key_id is 0 .. n_kv-1 in file order. */
QKV_API int64_t qkv_gguf_n_kv(const qkv_gguf *g);
QKV_API int64_t qkv_gguf_find_key(const qkv_gguf *g, const char *key);  /* -1 if absent */
QKV_API const char *qkv_gguf_key(const qkv_gguf *g, int64_t key_id);     /* NULL if out of range */
QKV_API qkv_gguf_type qkv_gguf_key_type(const qkv_gguf *g, int64_t key_id); /* -1 cast if out of range */

/* Typed getters by key. QKV_ERR_FORMAT (message names file, key, stored type)
 * when the key is absent or of another type; check qkv_gguf_find_key first for
 * optional keys. get_int accepts every integer type (u8 ... i64; a u64 above
 * INT64_MAX is refused): use it for counts and sizes. get_f32 accepts f32 and
 * f64 (rounded). get_string gives a NUL-terminated copy and, if len is not
 * NULL, its length in bytes. */
QKV_API qkv_status qkv_gguf_get_u32(uint32_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_i32(int32_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_u64(uint64_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_int(int64_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_f32(float *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_bool(int *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_string(const char **out, size_t *len, const qkv_gguf *g,
                                       const char *key, qkv_error *err);

/* Arrays, by key_id (the tokenizer reads 10^5 elements; look the key up once).
 * arr_len is 0 and arr_type -1 when key_id is not an array.
 * arr_data: the elements of a numeric or bool array, copied to an aligned
 * buffer in host order ([arr_len] of u8 ... f64; bool is one byte 0/1); NULL
 * for arrays of strings or of arrays (nested arrays are validated but their
 * contents are not exposed).
 * arr_str: element i of a string array (NUL-terminated copy, *len its length
 * if len is not NULL); NULL if not a string array or i out of range. */
QKV_API uint64_t qkv_gguf_arr_len(const qkv_gguf *g, int64_t key_id);
QKV_API qkv_gguf_type qkv_gguf_arr_type(const qkv_gguf *g, int64_t key_id);
QKV_API const void *qkv_gguf_arr_data(const qkv_gguf *g, int64_t key_id);
QKV_API const char *qkv_gguf_arr_str(const qkv_gguf *g, int64_t key_id, uint64_t i, size_t *len);

/* Tensors. shape is OUTERMOST FIRST like every shape in this API: the file
 * stores ggml's ne[] innermost first and the loader reverses it (the only place
 * that does), so token_embd.weight with ne = {n_embd, n_vocab} reads
 * shape = [n_vocab, n_embd], rows of n_embd contiguous elements. */
#define QKV_GGUF_MAX_DIMS 4
typedef struct {
    const char *name;                    /* NUL-terminated */
    qkv_ggml_type type;
    int n_dims;                          /* 1 .. QKV_GGUF_MAX_DIMS */
    int64_t shape[QKV_GGUF_MAX_DIMS];    /* [n_dims], outermost first; unused = 1 */
    int64_t n_elements;                  /* product of shape */
    size_t nbytes;                       /* bytes of data */
    uint64_t offset;                     /* from the start of the data section */
    const void *data;                    /* into the mapping, read-only */
} qkv_gguf_tensor;

QKV_API int64_t qkv_gguf_n_tensors(const qkv_gguf *g);
QKV_API int64_t qkv_gguf_find_tensor(const qkv_gguf *g, const char *name);  /* -1 if absent */
/* Tensor tensor_id (0 .. n_tensors-1, file order); NULL if out of range. */
QKV_API const qkv_gguf_tensor *qkv_gguf_tensor_info(const qkv_gguf *g, int64_t tensor_id);

/* ------------------------------------------------------------- dequantise */

/* 1 if qkv_dequantize handles t: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. */
QKV_API int qkv_dequantize_supported(qkv_ggml_type t);

/* out[n] f32 <- src, n consecutive elements of type t (whole blocks: n a
 * multiple of qkv_ggml_block_elems(t); src needs qkv_ggml_row_size(t, n)
 * bytes, any alignment). QKV_ERR_UNSUPPORTED naming the type for other types,
 * QKV_ERR_INVALID if n < 0 or not a whole number of blocks. */
QKV_API qkv_status qkv_dequantize(float *out, const void *src, qkv_ggml_type t, int64_t n,
                                  qkv_error *err);

/* The first of the n elements qkv_dequantize(out, src, t, n) would write
 * whose value is not finite: *index (-1 when all are finite) and *value
 * (nan, inf or -inf; 0 when none). qkv_dequantize passes inf and NaN scales
 * through as the gguf package does; a loader that wants finite weights asks
 * here first. Block types are judged by their f16 scales (d; m or dmin)
 * without decoding: a finite scale gives finite elements, a non-finite one
 * makes its whole block non-finite, so the index is a block's first
 * element. Errors as qkv_dequantize's (QKV_ERR_INVALID also for NULL
 * index or value). */
QKV_API qkv_status qkv_dequantize_check(int64_t *index, float *value, const void *src, qkv_ggml_type t,
                                        int64_t n, qkv_error *err);

/* -------------------------------------------------------------- cost model */

/* The shape of a decoder model (the families qkv_model_config names), as
 * far as cost goes. Zero is the default of every field after tied_embeddings:
 * no sliding layer, no extra norm or bias, the default prefill chunk. */
typedef struct {
    char name[64];          /* display name, e.g. "Llama-3.1-8B" */
    int n_layer;            /* L */
    int hidden;             /* residual width (embedding length) */
    int n_head;             /* Hq */
    int n_kv_head;          /* Hkv, Hq % Hkv == 0 */
    int head_dim;           /* D */
    int ffn;                /* gated FFN inner width */
    int vocab;
    int tied_embeddings;    /* 1: lm_head is the embedding matrix (fewer params, same FLOPs) */
    int window;             /* W > 0: sliding layers attend the last W keys (self included); 0: none */
    int swa_period;         /* with a window, >= 2: layer l slides iff l % swa_period < swa_period - 1
                               (qkv_model_layer_attn's rule: gemma2 2, gemma3 6) */
    int chunk;              /* C: tokens one forward call adds at most (a prefill chunk);
                               0 = QKV_COST_DEFAULT_CHUNK; only the sliding-window caches depend on it */
    /* parameter count only */
    int qk_norm;            /* RMSNorm weights of q and k per layer, D each (qwen3, gemma3) */
    int post_norms;         /* two more RMSNorm weights per layer (gemma's sandwich norms) */
    int qkv_bias;           /* biases on the q, k and v projections (qwen2) */
} qkv_cost_config;

/* The prefill chunk of the sliding-window cache figures when chunk is 0:
 * llama.cpp's default micro-batch (n_ubatch), so both caches are sized for
 * the same calls. */
#define QKV_COST_DEFAULT_CHUNK 512

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

/* Built-in configurations by id ("llama-3.1-8b", "gemma-3-270m", ...);
 * QKV_ERR_INVALID listing the known ids otherwise. qkv_cost_preset_id(i)
 * enumerates them, NULL past the end. */
QKV_API qkv_status qkv_cost_preset(qkv_cost_config *out, const char *id, qkv_error *err);
QKV_API const char *qkv_cost_preset_id(int i);
/* Every size >= 1 and Hq % Hkv == 0, window >= 0 (with a window swa_period
 * >= 2: the pattern needs a global layer), chunk >= 0; QKV_ERR_INVALID
 * naming the field. */
QKV_API qkv_status qkv_cost_check(const qkv_cost_config *c, qkv_error *err);
/* The figures for context ctx >= 1 with elements of elem_bytes (1..8). */
QKV_API qkv_status qkv_cost_eval(qkv_cost *out, const qkv_cost_config *c, int64_t ctx, size_t elem_bytes,
                                 qkv_error *err);

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
} qkv_ring_cost;

/* QKV_ERR_INVALID for a bad configuration, ctx < P, P < 1, or a bandwidth or
 * rate that is not positive. */
QKV_API qkv_status qkv_cost_ring(qkv_ring_cost *out, const qkv_cost_config *c, int64_t ctx, size_t elem_bytes,
                                 const qkv_ring_params *p, qkv_error *err);

/* ------------------------------------------------------------------- model */

/* A decoder model from a GGUF file, in one of the families llama.cpp writes:
 * llama (Llama 2/3.x, Mistral, SmolLM), qwen2, qwen3, gemma2, gemma3. Every
 * family is embedding, L x [RMSNorm, attention (libqkv), RMSNorm, gated
 * FFN], final norm, lm_head; what differs is named below and read from the
 * same metadata keys llama.cpp reads. Weights stay in the file's mapping in
 * their GGUF type; each matmul dequantises a weight row once per call and
 * uses it for every token of the batch. */
typedef enum {
    QKV_FFN_SILU = 0,       /* SwiGLU: silu(gate) * up (llama, qwen) */
    QKV_FFN_GELU_TANH = 1   /* GeGLU: gelu_tanh(gate) * up (gemma) */
} qkv_ffn_act;

typedef struct {
    char arch[32];          /* general.architecture: "llama", "qwen2", "qwen3", "gemma2", "gemma3" */
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
                               permuted q/k), rotate-half for the others; theta, factors */
    int tied_embeddings;    /* 1: lm_head is token_embd.weight */
    /* attention */
    float attn_scale;       /* softmax scale: <arch>.attention.scale, else the family's rule (1/sqrt(D);
                               Gemma 27B: 1/sqrt(E / Hq)) */
    int window;             /* sliding layers' window W (keys, self included); 0: no sliding layer */
    int swa_period;         /* with window: layer l slides iff l % swa_period < swa_period - 1
                               (llama.cpp's set_swa_pattern: gemma2 2, gemma3 6) */
    float rope_theta_swa;   /* the sliding layers' RoPE base (gemma3: 10000) */
    float attn_softcap;     /* c > 0: scores become c tanh(s / c) (gemma2); 0: none */
    int qk_norm;            /* RMSNorm of each head's q and k before RoPE (qwen3, gemma3) */
    int qkv_bias;           /* q, k and v projections have biases (qwen2) */
    /* the rest of the block */
    int post_norms;         /* gemma's sandwich: each sublayer's output is RMS-normed before it is added */
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
    int qk_norm, qkv_bias;
} qkv_layer_attn;

/* out <- layer `layer`'s attention spec (0 <= layer < cfg->n_layer). */
QKV_API void qkv_model_layer_attn(qkv_layer_attn *out, const qkv_model_config *cfg, int layer);

/* Limits qkv_model_config_read enforces, so that no size derived from a file
 * (products of them included) can overflow: layers, Q heads (KV heads <= Q
 * heads), residual width and heads x head_dim, SwiGLU width, vocabulary
 * (embedding rows or token list), training context. */
#define QKV_MODEL_MAX_LAYERS 4096
#define QKV_MODEL_MAX_HEADS 1024
#define QKV_MODEL_MAX_EMBD (1 << 17)
#define QKV_MODEL_MAX_FF (1 << 20)
#define QKV_MODEL_MAX_VOCAB (1 << 24)
#define QKV_MODEL_MAX_CTX (1 << 24)

/* The configuration of the model in g, from its metadata alone (no weight is
 * read: a metadata-only GGUF will do). Every size is checked against the
 * limits above, the RMSNorm epsilon must be in (0, 1) and the RoPE base in
 * (1, 1e30), soft-caps and the attention scale finite and > 0 when present,
 * the sliding window >= 1, each failure naming the key and its range.
 * general.architecture must be one of llama, qwen2, qwen3, gemma2, gemma3
 * (QKV_ERR_UNSUPPORTED naming them otherwise, and for partial RoPE, rope
 * scaling types other than "none", head_dim outside [16, 256] or odd, a
 * value_length other than key_length); QKV_ERR_FORMAT for
 * a missing required key, a value out of range, heads not a multiple of KV
 * heads, or no vocabulary (token_embd.weight's rows, else the length of
 * tokenizer.ggml.tokens), and when the rows, the token list and
 * <arch>.vocab_size do not all agree. rope.freq_factors is NULL here:
 * qkv_model_open fills it from rope_freqs.weight. */
QKV_API qkv_status qkv_model_config_read(qkv_model_config *out, const qkv_gguf *g, qkv_error *err);

/* Zero is every field's default; qkv_model_open takes NULL for all defaults. */
/* The KV cache's default size: min(n_ctx_train, QKV_MODEL_DEFAULT_CTX). */
#define QKV_MODEL_DEFAULT_CTX 8192
/* The most tokens of one forward call with swa_cache and no n_batch given:
 * the cost model's prefill chunk (llama.cpp's n_ubatch), so that
 * qkv_cost's kv_cache_bytes_swa is what such a model holds. */
#define QKV_MODEL_DEFAULT_BATCH QKV_COST_DEFAULT_CHUNK
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
} qkv_model_params;

typedef struct qkv_model qkv_model;

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

/* Opens the model at path: qkv_model_config_read, then every weight's shape
 * and type, and every norm weight finite and every rope_freqs.weight factor
 * finite and > 0 (QKV_ERR_FORMAT naming the tensor and element otherwise).
 * Allocates, once, the run state for p->n_batch tokens and the KV cache for
 * p->n_ctx positions (fewer rows in sliding layers with swa_cache); before
 * allocating, their size is checked against physical memory, RLIMIT_DATA
 * and RLIMIT_AS less the file's mapping: a context that cannot fit is
 * QKV_ERR_TOO_LARGE, the message naming the bytes it needs. QKV_ERR_INVALID
 * for a negative n_ctx, n_threads or n_batch. */
QKV_API qkv_status qkv_model_open(qkv_model **out, const char *path, const qkv_model_params *p, qkv_error *err);
QKV_API void qkv_model_close(qkv_model *m);
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
 * and kv_head_stride of the cache). A failure stops the forward call with
 * its status and message. */
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
    /* the attention of every layer (NULL: the model's kernel); exclusions and
     * a non-causal mask are refused with it, and hook_pattern is not called */
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
} qkv_forward_opts;

/* Runs n tokens at positions pos .. pos+n-1 (appending to the KV cache,
 * unless the call is resumed: opts->start_resid) and
 * writes logits: [n, V] if all_logits, else [1, V] for the last token only.
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

/* --------------------------------------------------------------- tokenizer */

/*
 * The tokenizer a GGUF describes (tokenizer.ggml.*), copied out of the file:
 * it outlives the qkv_gguf it was loaded from. Two vocabulary types:
 *   "gpt2"  byte-level BPE. Tokens are spelled in GPT-2's byte alphabet (a
 *           space is "Ġ"); tokenizer.ggml.merges ranks the pair merges. The
 *           text is first cut by the pre-tokenizer tokenizer.ggml.pre names.
 *   "llama" SentencePiece BPE. A space is spelled U+2581 "▁" and one is put
 *           in front of the text when tokenizer.ggml.add_space_prefix (default
 *           true); adjacent pieces merge by tokenizer.ggml.scores, highest
 *           first; a character not in the vocabulary becomes its <0xXX> tokens.
 * Token ids are int32_t in [0, n_vocab). Control and unknown tokens
 * (<|im_start|>, <s>) are recognised in text only when parse_special is set;
 * user-defined tokens always are. BOS/EOS come from tokenizer.ggml.bos_token_id
 * / eos_token_id, whether to add them from add_bos_token / add_eos_token
 * (absent: BOS for "llama" and the Llama-3 pre-tokenizer, else none).
 */
typedef struct qkv_tokenizer qkv_tokenizer;

typedef enum {
    QKV_VOCAB_BPE = 0,   /* tokenizer.ggml.model "gpt2" */
    QKV_VOCAB_SPM = 1    /* tokenizer.ggml.model "llama" */
} qkv_vocab_type;

/* How byte-level BPE text is cut before merging (tokenizer.ggml.pre). Each is a
 * hand-written matcher of the regex below (\p{L}, \p{N}: Unicode letters and
 * numbers; \s: White_Space), with "isolated" splits: every match is a piece.
 *   GPT2   "gpt2", "default" or absent:
 *          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   SMOLLM "smollm", "starcoder": every \p{N} character is a piece of its own,
 *          then GPT2 on each stretch between them (HF Digits + ByteLevel)
 *   LLAMA3 "llama-bpe", "llama3", "llama-v3" (a whole word that is a token is
 *          not merged: ignore_merges):
 *          (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   QWEN2  "qwen2": LLAMA3 with \p{N} instead of \p{N}{1,3}
 * Any other name is refused at load (QKV_ERR_UNSUPPORTED). */
typedef enum {
    QKV_PRE_NONE = 0,    /* SentencePiece: no pre-tokenizer */
    QKV_PRE_GPT2 = 1,
    QKV_PRE_SMOLLM = 2,
    QKV_PRE_LLAMA3 = 3,
    QKV_PRE_QWEN2 = 4
} qkv_pretok;

/* tokenizer.ggml.token_type values. */
typedef enum {
    QKV_TOKEN_NORMAL = 1,
    QKV_TOKEN_UNKNOWN = 2,
    QKV_TOKEN_CONTROL = 3,
    QKV_TOKEN_USER_DEFINED = 4,
    QKV_TOKEN_UNUSED = 5,
    QKV_TOKEN_BYTE = 6      /* SentencePiece <0xXX> */
} qkv_token_type;

/* Reads the tokenizer of g. QKV_ERR_FORMAT naming the key when a required key
 * (tokenizer.ggml.model, tokens; merges for "gpt2") is absent, mistyped or
 * inconsistent (more than QKV_MODEL_MAX_VOCAB tokens, any
 * tokenizer.ggml.*_token_id out of range, a token type outside [0, 6], array
 * lengths differ, a merge of unknown tokens, a tokenizer.chat_template over
 * QKV_CHAT_TEMPLATE_MAX bytes); QKV_ERR_UNSUPPORTED for another model type or pre-tokenizer name;
 * QKV_ERR_NOMEM. *out is NULL on failure. */
QKV_API qkv_status qkv_tokenizer_load(qkv_tokenizer **out, const qkv_gguf *g, qkv_error *err);
QKV_API void qkv_tokenizer_free(qkv_tokenizer *t);   /* NULL is fine */

QKV_API int qkv_tokenizer_n_vocab(const qkv_tokenizer *t);
QKV_API qkv_vocab_type qkv_tokenizer_type(const qkv_tokenizer *t);
QKV_API qkv_pretok qkv_tokenizer_pretok(const qkv_tokenizer *t);
/* tokenizer.ggml.pre as stored ("smollm", "llama-bpe" ...), "default" if absent,
 * "" for "llama". */
QKV_API const char *qkv_tokenizer_pre_name(const qkv_tokenizer *t);
/* "gpt2", "smollm", "llama3" ...: the matcher's name. */
QKV_API const char *qkv_pretok_name(qkv_pretok p);
QKV_API int32_t qkv_tokenizer_bos(const qkv_tokenizer *t);   /* -1 if none */
QKV_API int32_t qkv_tokenizer_eos(const qkv_tokenizer *t);   /* -1 if none */
QKV_API int qkv_tokenizer_add_bos(const qkv_tokenizer *t);   /* 1 if tokenize adds BOS */
QKV_API int qkv_tokenizer_add_eos(const qkv_tokenizer *t);   /* 1 if tokenize adds EOS */

/* Token id's text as the vocabulary spells it ("Ġworld", "▁the", "<0x0A>"),
 * NUL-terminated, *len its length if len is not NULL; NULL if id is out of
 * range. */
QKV_API const char *qkv_token_text(const qkv_tokenizer *t, int32_t id, size_t *len);
/* The bytes token id stands for in text (" world", " the", "\n"; a control
 * token's own text, "<|im_start|>"). Not NUL-free: use *len (it may be a lone
 * byte of a UTF-8 sequence). NULL if id is out of range. */
QKV_API const char *qkv_token_piece(const qkv_tokenizer *t, int32_t id, size_t *len);
QKV_API qkv_token_type qkv_token_type_of(const qkv_tokenizer *t, int32_t id); /* 0 if out of range */
QKV_API float qkv_token_score(const qkv_tokenizer *t, int32_t id);  /* 0 if absent */
/* Id of the token spelled exactly text[0 .. len) (as qkv_token_text gives it),
 * -1 if none. */
QKV_API int32_t qkv_token_find(const qkv_tokenizer *t, const char *text, size_t len);

/* An upper bound on the ids qkv_tokenize makes from len bytes. */
QKV_API int64_t qkv_tokenize_bound(size_t len);

/* Token ids of text[0 .. len) (any bytes; invalid UTF-8 is kept byte for byte).
 *   add_special:   nonzero adds BOS / EOS as the GGUF asks (qkv_tokenizer_add_bos/eos)
 *   parse_special: nonzero recognises control tokens written in the text
 *   out_ids:       [max_ids] output (may be NULL when max_ids is 0)
 * *n receives the number of ids the text needs; if that exceeds max_ids, the
 * first max_ids are written and QKV_ERR_FULL returned; QKV_ERR_TOO_LARGE for
 * text of 256 MiB or more. A byte a "gpt2"
 * vocabulary has no token for is dropped (as HF and llama.cpp drop it); in a
 * "llama" one a character without a token or <0xXX> becomes the unknown
 * token, QKV_ERR_INVALID if there is none. The ids are those of the model's
 * own tokenizer.json (tests/fixtures/tokenizer); where transformers' rebuild
 * from GGUF departs from it (no digit split for "smollm", no ignore_merges,
 * no "▁" before a leading space), qkv follows the original, as llama.cpp does. */
QKV_API qkv_status qkv_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                                int parse_special, int32_t *out_ids, int64_t max_ids, int64_t *n,
                                qkv_error *err);

/* The text of ids: their pieces concatenated; with skip_special, control and
 * unknown tokens are left out. For "llama" vocabularies with add_space_prefix,
 * the space the first word token starts with is dropped (the one tokenize put
 * there), so detokenize(tokenize(s)) == s.
 *   out: [cap] output, NUL-terminated when cap > *n_out (may be NULL if cap is 0)
 * *n_out receives the length in bytes (without the NUL); QKV_ERR_FULL if
 * cap <= *n_out (out then holds a truncated, terminated prefix), QKV_ERR_INVALID
 * for an id out of range. */
QKV_API qkv_status qkv_detokenize(const qkv_tokenizer *t, const int32_t *ids, int64_t n_ids,
                                  int skip_special, char *out, size_t cap, size_t *n_out, qkv_error *err);

/* The pieces pre cuts text[0 .. len) into, as byte offsets: piece i is
 * text[ends[i-1] .. ends[i]) (ends[-1] = 0), in order, covering the text.
 *   ends: [max_pieces] output
 * *n receives the number of pieces; QKV_ERR_FULL if more than max_pieces. */
QKV_API qkv_status qkv_pretokenize(qkv_pretok pre, const char *text, size_t len, size_t *ends,
                                   int64_t max_pieces, int64_t *n, qkv_error *err);

/* -------------------------------------------------------------------- chat */

/* Renders one user turn (with an optional system turn) in the chat format the
 * GGUF's tokenizer.chat_template describes, ending with the assistant header
 * (add_generation_prompt). Recognised: ChatML (<|im_start|>, including a
 * default system prompt the template inserts when none is given) and Llama-3
 * (<|start_header_id|>). QKV_ERR_UNSUPPORTED for other templates,
 * QKV_ERR_FORMAT if the file has none.
 *   *out: malloc'd NUL-terminated text (caller frees); tokenize it with
 *   parse_special set. */
QKV_API qkv_status qkv_chat_format(char **out, const qkv_gguf *g, const char *system, const char *user,
                                   qkv_error *err);
/* The longest tokenizer.chat_template accepted, in bytes (real ones are a few
 * KiB); qkv_tokenizer_load and qkv_chat_format refuse a longer one. */
#define QKV_CHAT_TEMPLATE_MAX (1 << 20)

/* The tokens of a rendered chat (qkv_chat_format's text): control tokens
 * recognised (parse_special), and BOS added as the tokenizer asks when
 * add_special is set, unless the text already starts with the BOS token (the
 * template's own). Arguments and errors as qkv_tokenize. */
QKV_API qkv_status qkv_chat_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                                     int32_t *out_ids, int64_t max_ids, int64_t *n, qkv_error *err);

/* 1 if id ends a generated answer: the tokenizer's EOS, or an end-of-turn
 * control token (<|im_end|>, <|eot_id|>, <|end_of_text|>, <|endoftext|>, </s>). */
QKV_API int qkv_token_ends_turn(const qkv_tokenizer *t, int32_t id);

/* ------------------------------------------------------------ probe: maps */

/*
 * Attention maps and sink statistics of a running model, taken from the
 * engine that runs it. A probe holds no copy of the attention: it reads what
 * a layer's kernel was given (rotated q, the KV cache) and what it returned
 * (LSE) through a hook on blocks.L.attn.hook_pattern, and recomputes the
 * weight rows it is asked for:  w[i, j] = exp(cap(scale * q_i . k_j) - lse_i),
 * 0 where masked (cap: the descriptor's softcap, qkv_attn_desc).
 */

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

/* What one weight row says. */
typedef struct {
    double sink;            /* weight on key 0 */
    double first;           /* weight on keys 0 .. n_first-1 */
    double entropy;         /* -sum w ln w, nats (0 for one-hot, ln m for m equal keys) */
    int top;                /* the strongest key (lowest index on ties); -1 if n == 0 */
    float top_weight;
    int top_other;          /* the strongest key >= n_first; -1 if none */
    float top_other_weight;
} qkv_row_stats;

/* Statistics of w[n] (a weight row), the first n_first keys counted as "first". */
QKV_API void qkv_row_stats_of(qkv_row_stats *s, const float *w, int n, int n_first);

/* Receives one weight row: map (layer_index, head_index) of the request,
 * query position `row`, w: [n_keys] (all keys of the cache, masked ones 0).
 * Return nonzero to stop the forward pass. */
typedef int (*qkv_inspect_row_fn)(void *user, int layer_index, int head_index, int row, const float *w,
                                  int n_keys, const qkv_row_stats *s);

typedef struct {
    const int *layers;      /* [n_layers] layers to inspect, increasing; NULL: all */
    int n_layers;
    const int *heads;       /* [n_heads] query heads, any order; NULL: all */
    int n_heads;
    int n_first;            /* keys counted as "first" in the row stats; 0 means 1 */
    qkv_inspect_row_fn row;
    void *user;
} qkv_inspect_params;

/* A hook on hook_pattern that hands the requested maps to p->row one row
 * at a time, in order: layer, head (as listed), query row — so one forward
 * call over a whole prompt streams [n_layers, n_heads, n, n] in C order. It
 * holds 64 rows of Lk floats, whatever the prompt: O(n) beyond the model.
 *   qkv_inspect *in; qkv_inspect_init(&in, qkv_model_get_config(m), &p, &err);
 *   qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_inspect_hook, .user = in};
 *   qkv_model_forward(m, ..., &(qkv_forward_opts){.hooks = &h, .n_hooks = 1}, &err);
 * A row callback that returns nonzero stops the forward call (its error
 * names the layer and head). */
typedef struct qkv_inspect qkv_inspect;
QKV_API qkv_status qkv_inspect_init(qkv_inspect **out, const qkv_model_config *cfg, const qkv_inspect_params *p,
                                    qkv_error *err);
QKV_API void qkv_inspect_free(qkv_inspect *in);
QKV_API qkv_status qkv_inspect_hook(void *in, const qkv_activation *a, qkv_error *err);

/* Attention sinks over long text, from the kernel's outputs: every row's
 * weight on keys 0 .. n_first-1 (n_first dot products and the row's LSE),
 * plus every `every`-th row recomputed in full for its strongest other key.
 * Rows at positions < skip are left out of every mean. */
typedef struct {
    int n_first;            /* k >= 1 (default 4) */
    int skip;               /* >= 0 (default 16) */
    int every;              /* >= 1 (default 16) */
    int n_threads;          /* 0: all cores */
} qkv_sinks_params;

/* Defaults: n_first 4, skip 16, every 16, all cores. */
QKV_API qkv_sinks_params qkv_sinks_params_default(void);

/* Means over the measured rows of one layer and head. */
typedef struct {
    double sink;            /* weight on token 0 */
    double first;           /* weight on tokens 0 .. n_first-1 */
    double top_other;       /* sampled rows: weight of the strongest key other than token 0 */
    double top_other_dist;  /* sampled rows: its distance back from the query (p - j) */
    double sink_top;        /* sampled rows: share whose strongest key is token 0 */
    double entropy;         /* sampled rows: -sum w ln w, nats */
    int64_t n_rows, n_sampled;
} qkv_sinks_head;

/* Accumulates over every forward call it is a hook of, on hook_pattern
 * (qkv_hook){.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_sinks_hook, .user = s}.
 * p NULL: qkv_sinks_params_default(). */
typedef struct qkv_sinks qkv_sinks;
QKV_API qkv_status qkv_sinks_init(qkv_sinks **out, const qkv_model_config *cfg, const qkv_sinks_params *p,
                                  qkv_error *err);
QKV_API void qkv_sinks_free(qkv_sinks *s);
QKV_API qkv_status qkv_sinks_hook(void *s, const qkv_activation *a, qkv_error *err);
/* The means so far for (layer, head); NULL if out of range. Valid until the
 * next call for the same pair or qkv_sinks_free. */
QKV_API const qkv_sinks_head *qkv_sinks_get(qkv_sinks *s, int layer, int head);

/* --------------------------------------------------------- probe: progress */

/*
 * Progress of a probe that runs many forward calls (qkv_ablate_positions,
 * qkv_ablate_heads, qkv_stream_score, qkv_patch): after each forward call (or
 * chunk) it calls progress(user, done, total) on the calling thread, done
 * counting the tokens run through the model so far (qkv_patch: its
 * components), of total for the whole probe (each probe says what total
 * is); the last call has done == total.
 * A nonzero return stops the probe, which then returns QKV_ERR_CANCELLED with
 * the KV cache empty. A NULL progress reports nothing. The layers of one long
 * forward call report through a hook on QKV_HOOK_RESID_POST with layer
 * QKV_ALL instead (one call per layer).
 */
typedef int (*qkv_progress_fn)(void *user, int64_t done, int64_t total);

/* ----------------------------------------------------------- probe: ablate */

/*
 * Weight against influence: a key's attention weight says how much a row
 * reads it, not how much the answer depends on it. Ablating position j hides
 * key j through the engine's exclusion mask (a qkv_exclusion of the forward
 * call, never a dense mask) and measures how the next-token distribution of the last
 * position moves: KL(p_full || p_ablated) in nats.
 *   QKV_ABLATE_ALL   key j leaves every query row (in the scoped layers and
 *                    heads). Rows before j cannot see j anyway, so their KV
 *                    cache is kept: rewind to j, forward tokens j .. n-1.
 *                    Cost: n partial forwards, n(n+1)/2 token-steps.
 *   QKV_ABLATE_LAST  only the final row loses key j (the direct effect):
 *                    tokens 0 .. n-2 once, then per j the last token alone.
 * Row j loses its own key; a row left with no visible key has O = 0 (the
 * kernels' definition), e.g. row 0 when j = 0 under ALL.
 */
typedef enum { QKV_ABLATE_ALL = 0, QKV_ABLATE_LAST = 1 } qkv_ablate_scope;

/* KL(softmax(p) || softmax(q)) in nats, in double; >= 0.
 *   p_logits, q_logits: [n] */
QKV_API double qkv_kl_logits(const float *p_logits, const float *q_logits, int n);

/* Spearman's rank correlation of x and y: the Pearson correlation of their
 * ranks, tied values sharing their mean rank. NaN if n < 2 or either is
 * constant.   x, y: [n] */
QKV_API double qkv_spearman(const double *x, const double *y, int n);

/* How an ablated distribution differs from the full one. */
typedef struct {
    double kl;              /* KL(p_full || p_ablated), nats */
    double dp_target;       /* p_ablated(target) - p_full(target) */
    int32_t top;            /* the ablated distribution's top token (lowest id on ties) */
} qkv_ablate_effect;

/* e <- the effect of logits against full_logits, both [n_vocab]. */
QKV_API void qkv_ablate_effect_of(qkv_ablate_effect *e, const float *full_logits, const float *logits, int n_vocab,
                                  int32_t target);

typedef struct {
    qkv_ablate_scope scope;
    int layer;              /* ablate in this layer only; -1: every layer */
    int head;               /* and this query head only; -1: every head */
    int32_t target;         /* token whose probability is followed; -1: the full run's top token */
    qkv_progress_fn progress; /* NULL: none; total n + n(n+1)/2 tokens (ALL), 2n (LAST) */
    void *progress_user;
} qkv_ablate_params;

/* What ablating one position did. */
typedef struct {
    double attn_mean;       /* full run: the last row's weight on the key, mean over the scoped (layer, head) */
    double attn_max;        /* ... and its largest */
    qkv_ablate_effect effect;
} qkv_ablate_row;

typedef struct {
    int32_t target;         /* as followed (params' or the full run's top) */
    double p_target;        /* its probability in the full run */
    int32_t top_full;       /* the full run's top token */
    double spearman_attn_kl;/* Spearman(attn_mean, kl) over the positions */
} qkv_ablate_summary;

/* Ablates every position 0 .. n-1 of tokens in turn (p NULL: ALL, every
 * layer and head, the top token).
 *   rows:   [n] output, rows[j] for position j
 *   tokens: [n] the sequence from position 0, 2 <= n <= qkv_model_n_ctx(m)
 * On return the KV cache is empty. QKV_ERR_INVALID for n < 2, a layer, head or target
 * out of range, or a token id outside the vocabulary. */
QKV_API qkv_status qkv_ablate_positions(qkv_ablate_row *rows, qkv_ablate_summary *sum, qkv_model *m,
                                        const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err);

/* Head importance: zero-ablates each (layer, head) in turn
 * (qkv_forward_opts.zero_heads), a full forward of tokens each.
 *   effects: [L, Hq] output     tokens: [n], 1 <= n <= qkv_model_n_ctx(m)
 * p's target (-1: the full run's top) and progress (after each forward, of
 * (1 + L x Hq) x n tokens) apply; its scope, layer and head do not (every
 * head is zeroed in turn). p NULL: target -1, no progress. sum gets the
 * target, its p and the top token (spearman_attn_kl NaN). Cost: L x Hq
 * forwards of n tokens. On return the KV cache is empty. */
QKV_API qkv_status qkv_ablate_heads(qkv_ablate_effect *effects, qkv_ablate_summary *sum, qkv_model *m,
                                    const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err);

/* ------------------------------------------------------------ probe: patch */

/*
 * Activation patching (TransformerLens's patching.get_act_patch_*): which
 * component carries what. Two prompts of one length n, clean and corrupted,
 * each run from position 0; then, one component at a time, the corrupted run
 * again with that component's activation replaced by the clean run's at the
 * same point, and a metric M of the last position's next-token logits (the
 * model's output, after any final soft-cap; in double) says how much of the
 * clean behaviour came back:
 *   recovery = (M(patched) - M(corrupt)) / (M(clean) - M(corrupt))
 * 1: all of it, 0: none; never clipped (over- and under-shoot are findings).
 *   QKV_METRIC_KL          M(x) = KL(p_clean || p_x) in nats, so M(clean) = 0 and
 *                          recovery = 1 - KL(clean || patched) / KL(clean || corrupt)
 *   QKV_METRIC_LOGIT_DIFF  M(x) = logit_x[answer] - logit_x[wrong]
 * Components (TransformerLens's activation names, qkv_hook_point):
 *   head_out      [L, Hq]     attn.hook_z of head h at every position
 *   head_out_pos  [L, Hq, n]  attn.hook_z of head h at position p only
 *   resid_pre     [L, n]      hook_resid_pre of layer l at position p
 *   attn_out      [L, n]      hook_attn_out (Gemma: after its post-attention norm) at position p
 *   mlp_out       [L, n]      hook_mlp_out (Gemma: after its post-FFN norm) at position p
 * Cost: the clean and the corrupted run, each caching its activations at
 * the points the sweeps patch (the corrupted run's hook_resid_pre of every
 * layer always: the checkpoints), then per component one forward resumed at
 * the patched layer l from the corrupted run's residual there
 * (qkv_forward_opts.start_resid), with a hook that copies the clean rows in:
 * (L - l) x n layer-token steps, against L x n for a full forward per
 * component (qkv_patch_summary counts both). A component whose clean rows
 * equal the corrupted run's bit for bit (every position before the first
 * token where the prompts differ) would rerun the corrupted run itself
 * (a resumed call computes what the whole call does, bit for bit): its
 * recovery is 0 and it is not run.
 */
typedef enum { QKV_METRIC_KL = 0, QKV_METRIC_LOGIT_DIFF = 1 } qkv_metric_kind;

typedef struct {
    qkv_metric_kind kind;
    int32_t answer, wrong;      /* LOGIT_DIFF only: two different ids in [0, V) */
} qkv_metric;

/* Recovery arrays, caller-allocated, shapes as above; NULL skips that sweep. */
typedef struct {
    float *head_out;            /* [L, Hq] */
    float *head_out_pos;        /* [L, Hq, n] */
    float *resid_pre;           /* [L, n] */
    float *attn_out;            /* [L, n] */
    float *mlp_out;             /* [L, n] */
} qkv_patch_out;

#define QKV_PATCH_DEFAULT_MAX_BYTES ((int64_t)1 << 30)

typedef struct {
    qkv_metric metric;
    int64_t max_bytes;          /* qkv_patch_bytes may not exceed it; 0: QKV_PATCH_DEFAULT_MAX_BYTES (1 GiB) */
    qkv_progress_fn progress;   /* NULL: none; here done and total count components (each a resumed
                                   forward call, or none when unchanged), total = n_components */
    void *progress_user;
} qkv_patch_params;

typedef struct {
    double clean, corrupt;              /* M(clean) and M(corrupt) (KL: 0 and KL(clean || corrupt)) */
    int64_t layer_token_steps;          /* layers x tokens run: the two runs and every resumed one */
    int64_t naive_layer_token_steps;    /* a full forward per component, L x n each, plus the two runs */
    int64_t n_components;               /* entries of the recovery arrays */
    int64_t n_unchanged;                /* components equal in both runs: recovery 0, not run */
} qkv_patch_summary;

/* Bytes qkv_patch allocates for the sweeps `which` asks for (its non-NULL
 * arrays; NULL: none): every layer's hook_resid_pre of the corrupted run
 * (L n E floats), both runs' activations at the points the sweeps patch
 * (hook_z, 2 L n Hq D floats, for head_out and head_out_pos; 2 L n E each
 * for resid_pre (L n E: the corrupted run's are the checkpoints), attn_out,
 * mlp_out) and three logit rows of V floats. Its peak memory is the model's
 * and this. -1 for a NULL model or n < 1. */
QKV_API int64_t qkv_patch_bytes(const qkv_model *m, int n, const qkv_patch_out *which);

/* Runs the sweeps out asks for, patching clean into corrupt.
 *   out:            the recovery arrays (qkv_patch_out), filled where non-NULL
 *   sum:            the metric's two values and the cost
 *   clean, corrupt: [n] token ids, 1 <= n <= qkv_model_n_ctx(m); a pair of
 *                   different lengths is the caller's to refuse
 *   p:              NULL: KL, the default byte limit, no progress
 * QKV_ERR_INVALID for a NULL argument, a bad n, metric kind or token id,
 * answer or wrong outside [0, V) or equal, and when the clean and corrupt
 * runs give the same metric (M(clean) == M(corrupt): recovery is 0 / 0);
 * QKV_ERR_TOO_LARGE (naming both figures) when qkv_patch_bytes exceeds
 * max_bytes, before anything runs; QKV_ERR_CANCELLED from progress. It
 * allocates its caches once per call (qkv_patch_bytes); the forward calls
 * inside allocate nothing. Starts from position 0; on return the KV cache is
 * empty. */
QKV_API qkv_status qkv_patch(qkv_patch_out *out, qkv_patch_summary *sum, qkv_model *m, const int32_t *clean,
                             const int32_t *corrupt, int n, const qkv_patch_params *p, qkv_error *err);

/* -------------------------------------------------------- probe: attribute */

/*
 * Direct logit attribution (TransformerLens's cache.decompose_resid and
 * stack_head_results with apply_ln): each part's additive share of the
 * difference of two logits at the last position. The final residual x
 * (hook_resid_post of the last layer, last position) is the sum of the
 * embedding (hook_embed: Gemma's scaled by sqrt(E)) and every layer's
 * hook_attn_out and hook_mlp_out. Through the final RMSNorm with this run's
 * scale s = 1 / sqrt(mean(x^2) + eps) frozen, its weight g (Gemma's GGUF
 * stores 1 + w) and the unembedding rows u = W_U[answer] - W_U[wrong], a
 * part c contributes
 *   s * sum_i c_i g_i u_i      (in double)
 * so the parts add up to the logit difference before any final soft-cap,
 * up to the float rounding of the forward pass (tests/test_attribute.c
 * states the tolerance). A head's part is its hook_z at the last position
 * through its own columns of the output projection, W_O[:, h D .. (h+1) D);
 * the heads of a layer add up to its attn only where nothing normalises the
 * attention output after W_O (llama, qwen2, qwen3, mistral): with Gemma's
 * post-attention norms (gemma2, gemma3) heads are NaN and heads_linear 0.
 * The logit difference of a soft-capped model (Gemma 2) is attributed
 * before the cap (final_softcap 1): the cap is not additive.
 */
typedef struct {
    float *heads;       /* [L, Hq] caller-allocated output, or NULL; NaN where heads_linear is 0 */
    float *attn;        /* [L] caller-allocated output */
    float *mlp;         /* [L] caller-allocated output */
    double embed;       /* the embedding's part */
    double total;       /* embed + sum attn + sum mlp, of the unrounded parts */
    double logit_diff;  /* the model's own, before any final soft-cap: its final normed row h (as the forward
                           computes it) dotted with u, in double */
    int heads_linear;   /* 1: heads are additive (no post-attention norm) */
    int final_softcap;  /* 1: the model soft-caps its logits; attributed before the cap */
    int32_t answer, wrong; /* as used: the caller's, or the model's own top-1 / top-2 where it passed -1 */
} qkv_attribution;

/* Attributes the logit difference of answer and wrong after tokens.
 *   tokens: [n], 1 <= n <= qkv_model_n_ctx(m), run from position 0
 *   answer: a token id, or -1 for the model's top-1 at the last position
 *   wrong:  a token id, or -1 for the model's most likely token other than answer
 * QKV_ERR_INVALID for NULL outputs, a bad n or token id, answer or wrong
 * outside [-1, V), or both the same. Allocates its few rows once per call;
 * on return the KV cache is empty. */
QKV_API qkv_status qkv_attribute(qkv_attribution *a, qkv_model *m, const int32_t *tokens, int n, int32_t answer,
                                 int32_t wrong, qkv_error *err);

/* ------------------------------------------------------------- probe: lens */

/*
 * The logit lens (nostalgebraist 2020; TransformerLens's
 * cache.accumulated_resid with apply_ln): what the residual stream would
 * predict if the model stopped after layer l. hook_resid_post of layer l at
 * each position goes through the model's own final step, a forward resumed
 * after the last layer (qkv_forward_opts.start_layer = L): the final RMSNorm
 * with that row's own RMS, the unembedding and any final soft-cap; then a
 * softmax (in double). The last layer's lens is the model's own output.
 */
typedef struct {
    int k;              /* top tokens kept per (layer, position), 1 <= k <= V */
    int32_t target;     /* a token whose probability is followed; -1: none */
} qkv_lens_params;

/* Caller-allocated; probabilities in [0, 1]. */
typedef struct {
    int32_t *top_ids;   /* [L, n, k] most likely first (the lower id first on ties) */
    float *top_probs;   /* [L, n, k] their probabilities */
    float *target_prob; /* [L, n] the target's probability, or NULL (needed when target >= 0) */
} qkv_lens_out;

/* The lens of every layer at every position of tokens.
 *   tokens: [n], 1 <= n <= qkv_model_n_ctx(m), run from position 0
 * QKV_ERR_INVALID for NULL outputs, a bad n, k or token id, a target outside
 * [-1, V), or a target without target_prob. Memory: every layer's residual
 * (L n E floats) and up to QKV_LENS_LOGIT_FLOATS floats of logits (rows of
 * V, one layer's positions at a time), allocated once per call; on return
 * the KV cache is empty. */
#define QKV_LENS_LOGIT_FLOATS ((int64_t)1 << 24)
QKV_API qkv_status qkv_lens(qkv_lens_out *out, qkv_model *m, const int32_t *tokens, int n, const qkv_lens_params *p,
                            qkv_error *err);

/* ----------------------------------------------------------- probe: stream */

/*
 * Perplexity of a long text under a bounded KV cache (StreamingLLM, Xiao et
 * al., arXiv:2309.17453). The text is read in chunks of C tokens, each one
 * forward call; token t+1 is scored once, NLL = -log p(tokens[t+1] | its
 * context). The context, with W = window and S = sinks:
 *   FULL       every earlier token (causal mask).
 *   WINDOW     the last W keys, self included (QKV_MASK_WINDOW).
 *   SINKS      the first S keys and the last W - S (QKV_MASK_SINK_WINDOW
 *              with window W - S): W keys in all.
 *   RECOMPUTE  sliding-window re-computation at a stride of C: before each
 *              chunk the cache is emptied and the W - C tokens before the
 *              chunk are run again from position 0, then the chunk, so row k
 *              of a chunk sees the W - C + k + 1 most recent keys (W for the
 *              last row), all computed from a fresh start whose first token
 *              (position 0 again) every row sees. With C = 1 this is the
 *              paper's "sliding window with re-computation"; C >= W runs
 *              no prefix and each row sees its last W keys.
 * How WINDOW and SINKS hold their keys:
 *   QKV_STREAM_MASK     a full cache, the mask alone (keys at their original
 *                       positions; memory grows with the text).
 *   QKV_STREAM_EVICT    before each chunk the cache is cut to W - 1 rows (the
 *                       S sinks kept), so it never holds more than W - 1 + C;
 *                       keys and queries keep their original positions.
 *   QKV_STREAM_SHIFT    the same eviction, the kept keys re-rotated to their
 *                       rows (qkv_model_evict with shift): positions
 *                       re-indexed within the cache, as StreamingLLM does.
 * MASK and EVICT see the same keys with the same rotations: their NLLs agree
 * to float rounding (tests/test_stream.c).
 */
typedef enum { QKV_STREAM_FULL = 0, QKV_STREAM_WINDOW = 1, QKV_STREAM_SINKS = 2, QKV_STREAM_RECOMPUTE = 3 } qkv_stream_policy;
typedef enum { QKV_STREAM_MASK = 0, QKV_STREAM_EVICT = 1, QKV_STREAM_SHIFT = 2 } qkv_stream_cache;

typedef struct {
    qkv_stream_policy policy;
    qkv_stream_cache cache;     /* WINDOW and SINKS only */
    int window;                 /* W >= 1 */
    int sinks;                  /* S, 0 <= S < W (SINKS) */
    int chunk;                  /* C >= 1 */
    qkv_progress_fn progress;   /* NULL: none; after each chunk, total qkv_stream_steps(p, n) */
    void *progress_user;
} qkv_stream_params;

/* KV cache rows the policy needs for n tokens (the n_ctx to open the model
 * with): n for FULL and MASK, min(n, W - 1 + C) otherwise. */
QKV_API int qkv_stream_rows(const qkv_stream_params *p, int n);
/* Tokens the model runs to score n tokens under p: n - 1, plus the W - C
 * tokens RECOMPUTE runs again before each chunk (fewer near the start). */
QKV_API int64_t qkv_stream_steps(const qkv_stream_params *p, int n);

/* Scores tokens under p.
 *   nll:    [n - 1] output, nll[t] for token t + 1
 *   tokens: [n], 2 <= n
 * *max_rows (may be NULL) gets the most KV rows held at once. Each chunk is
 * a forward call with the policy's mask; on return the cache is empty. The
 * model's n_ctx must be >= qkv_stream_rows(p, n). QKV_ERR_INVALID for
 * bad parameters or a too small context. */
QKV_API qkv_status qkv_stream_score(float *nll, int *max_rows, qkv_model *m, const int32_t *tokens, int n,
                                    const qkv_stream_params *p, qkv_error *err);

/* ----------------------------------------------------------- probe: needle */

/*
 * Needle in a haystack, with telemetry (the article's third caution: a long
 * context holds the sentence, but does the model find it?). A needle
 * sentence is put into a haystack text at a depth, a question follows in the
 * chat template, the model answers greedily, and the answer is scored by
 * substring (RULER's string_match_all). From the kernel's LSE, the attention
 * the query producing the first answer token (the prompt's last position)
 * puts on the needle's tokens, per layer and head, and the retrieval score
 * of every head (Wu et al. 2024, arXiv:2404.15574): at each answer step a
 * head copies when its strongest key lies in the needle and holds the token
 * just generated; its score is the share of needle tokens it copied.
 */

/* The byte offset in text[0 .. len) where a sentence starts that is nearest
 * at or before depth percent (0 .. 100) of the text: just after ". ", "! ",
 * "? " (any whitespace after the mark) or a blank line; 0 if none is;
 * len for depth 100. */
QKV_API size_t qkv_needle_offset(const char *text, size_t len, double depth);

/* Where expected first occurs in answer, ASCII case folded (RULER: r.lower()
 * in pred.lower()): its byte offset, or -1 (always for an empty expected). */
QKV_API long qkv_needle_match(const char *answer, const char *expected);

typedef struct {
    const char *needle;     /* the sentence put into the haystack */
    const char *question;   /* the user's question after the haystack */
    const char *system;     /* the chat's system turn; NULL: the template's own */
    int max_answer;         /* tokens the answer may take, >= 1 */
    int plain;              /* 1: no chat template (a base model): the text alone, after the tokenizer's BOS;
                               system must be NULL */
} qkv_needle_text;

/* One prompt: the first tokens of the haystack (repeated from its start
 * if it is shorter), the needle at a sentence boundary at depth percent of
 * them (qkv_needle_offset of their text), then "\n\n" and the question, as
 * the user turn of the GGUF's chat template (qkv_chat_format, then
 * qkv_chat_tokenize), or as it is when nt->plain. As many haystack tokens as
 * leave n + max_answer <= length. */
typedef struct {
    int32_t *ids;           /* [n] malloc'd (qkv_needle_prompt_free) */
    int n;
    int needle_pos;         /* tokens [needle_pos, needle_pos + needle_len) hold the needle's bytes */
    int needle_len;
    int haystack_tokens;    /* haystack tokens used (before the needle went in) */
} qkv_needle_prompt;

/* hay: [n_hay] the haystack's tokens (qkv_tokenize without special tokens).
 * QKV_ERR_INVALID for a depth outside [0, 100], max_answer < 1, or a length
 * too small for the template, needle and question with max_answer (the
 * message says the least length that fits). */
QKV_API qkv_status qkv_needle_prompt_build(qkv_needle_prompt *out, const qkv_gguf *g, const qkv_tokenizer *t,
                                           const int32_t *hay, int64_t n_hay, const qkv_needle_text *nt, int length,
                                           double depth, qkv_error *err);
QKV_API void qkv_needle_prompt_free(qkv_needle_prompt *p);

/* What one prompt gave; the caller owns every array. */
typedef struct {
    int32_t *answer;        /* [max_answer] the greedy answer, stop token left out */
    int n_answer;
    double *mass_max;       /* [L] first answer token: needle mass, the largest over heads */
    double *mass_mean;      /* [L] ... the mean over heads */
    double *retrieval;      /* [L, Hq] += the share of needle tokens each head copied */
    double *step_mass_max;  /* [max_answer, L] or NULL: as mass_max, for the row producing answer token k */
    double *step_mass_mean; /* [max_answer, L] or NULL: as mass_mean, likewise */
} qkv_needle_result;

/* Runs p from an empty cache and answers greedily (at most max_answer
 * tokens; a qkv_token_ends_turn token stops it); on return the cache is
 * empty. Needs qkv_model_n_ctx(m) >= p->n + max_answer.
 * The needle mass of head h in layer l is the sum of the weights its last
 * prompt row gives keys needle_pos .. needle_pos + needle_len - 1, each
 * exp(scale q.k - lse) from the kernel's LSE. */
QKV_API qkv_status qkv_needle_run(qkv_needle_result *r, qkv_model *m, const qkv_tokenizer *t, const qkv_needle_prompt *p,
                                  int max_answer, qkv_error *err);


/* .npy written as it is produced: open with the full shape (a negative
 * dimension is QKV_ERR_INVALID), put the elements in C order, close. path is
 * written in place; a failed write, a close that finds elements missing, or
 * abort removes it (see qkv_npy_save_f32 on keeping a previous file). */
typedef struct qkv_npy_writer qkv_npy_writer;
QKV_API qkv_status qkv_npy_writer_open(qkv_npy_writer **out, const char *path, int ndim, const int64_t *shape,
                                       qkv_error *err);
QKV_API qkv_status qkv_npy_writer_put(qkv_npy_writer *w, const float *data, int64_t n, qkv_error *err);
QKV_API qkv_status qkv_npy_writer_close(qkv_npy_writer *w, qkv_error *err);
QKV_API void qkv_npy_writer_abort(qkv_npy_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* QKV_H */
