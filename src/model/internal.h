/*
 * internal.h — what the model files share: the quantised matmul and the
 * small dense kernels of the forward pass.
 */
#ifndef QKV_MODEL_INTERNAL_H
#define QKV_MODEL_INTERNAL_H

#include "qkv/model.h"

#define MATMUL_ROWS 16 /* weight rows per thread block (dequantised together when tiled) */
#define MM_FUSED_MAX 3  /* up to this many tokens a matmul decodes weights in registers */

#ifndef MM_TOKEN_BLOCK_FLOATS
#define MM_TOKEN_BLOCK_FLOATS 131072 /* floats of x (512 KiB) a block of tokens holds: a quarter of an L2 */
#endif

/* out[n, rows] = x[n, cols] @ W^T, W: [rows, cols] in its GGUF type, rows split
 * across n_threads in blocks of MATMUL_ROWS. Above MM_FUSED_MAX tokens the
 * tokens go in blocks too, of about MM_TOKEN_BLOCK_FLOATS / cols (balanced,
 * each at least MM_FUSED_MAX + 1), so that a block of x stays in L2 while a
 * thread takes the row blocks one after another; the items are (token
 * block, row block), token block first. Every output's arithmetic is the
 * same whatever the blocks (matmul_impl.h). scratch: [n_threads,
 * MATMUL_ROWS, cols] f32 (dequantised weight rows). Each weight row is
 * decoded once per call and token block (matmul_impl.h has the kernels). */
void model_matmul(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                  int n_threads);

/* Several matmuls of one x in one parallel loop (a loop's start and end cost
 * microseconds, and a decode step is dozens of small matmuls): out_k[n,
 * rows_k] = x[n, cols] @ W_k^T for each of outs[0 .. n_outs), every W_k with
 * cols columns; the row blocks of all of them are the loop's items, split
 * across threads as one matmul's are. More than MM_GROUP_MAX run in more loops. */
#define MM_GROUP_MAX 3
typedef struct {
    float *out;               /* [n, rows of w] */
    const qkv_gguf_tensor *w; /* [rows, cols] */
} model_mm_out;
void model_matmul_group(const model_mm_out *outs, int n_outs, const float *x, int n, float *scratch,
                        int n_threads);

/* The readable twin: each row dequantised by qkv_dequantize, then
 * model_dot per (token, row); same arguments. Kept as the oracle. */
void model_matmul_reference(float *out, const float *x, const qkv_gguf_tensor *w, int n, float *scratch,
                            int n_threads);

/* One ISA's kernels (matmul_impl.h), compiled per ISA like attn's tiles.
 * rows: out[t, r] for rows r0 <= r < r1 (r1 - r0 <= MATMUL_ROWS) and all
 * tokens; out and x as in model_matmul, scratch [MATMUL_ROWS, cols].
 * dequant: y[cols] <- one row of type t (qkv_dequantize's values). */
typedef void (*model_mm_rows_fn)(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0,
                                 int64_t r1, float *scratch);
typedef void (*model_mm_dequant_fn)(float *y, const void *src, qkv_ggml_type t, int64_t cols);
typedef struct {
    const char *name; /* "avx512", "avx2", "scalar" */
    int vector_width; /* floats per vector */
    model_mm_rows_fn rows;
    model_mm_dequant_fn dequant;
} model_mm_isa;

/* Best ISA this CPU runs (QKV_ISA=avx512|avx2|scalar in the environment
 * narrows the choice, as for attention). */
const model_mm_isa *model_mm_isa_best(void);
/* The ISA of that name if compiled in and supported by this CPU, else NULL. */
const model_mm_isa *model_mm_isa_find(const char *name);
/* model_matmul and model_matmul_group with a given ISA. */
void model_matmul_isa(const model_mm_isa *isa, float *out, const float *x, const qkv_gguf_tensor *w, int n,
                      float *scratch, int n_threads);
void model_matmul_group_isa(const model_mm_isa *isa, const model_mm_out *outs, int n_outs, const float *x, int n,
                            float *scratch, int n_threads);

void model_mm_rows_avx512(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                          float *scratch);
void model_mm_rows_avx2(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                        float *scratch);
void model_mm_rows_scalar(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0, int64_t r1,
                          float *scratch);
void model_mm_dequant_avx512(float *y, const void *src, qkv_ggml_type t, int64_t cols);
void model_mm_dequant_avx2(float *y, const void *src, qkv_ggml_type t, int64_t cols);
void model_mm_dequant_scalar(float *y, const void *src, qkv_ggml_type t, int64_t cols);

/* out[n] = x[n] * w[n] / sqrt(mean(x^2) + eps)  (LlamaRMSNorm, float32):
 * w[i] * (x[i] * inv), so the two steps below give the same bits */
void model_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* out[n] = x[n] / sqrt(mean(x^2) + eps): the norm before its weight */
void model_rms_normalize(float *out, const float *x, int n, float eps);

/* gate[i] <- act(gate[i]) * up[i] for i < count (gate, up: [n, F]), act
 * GELU-tanh or SiLU, by the best ISA's kernel (ffn_act_impl.h), split
 * across n_threads (ffn_act.c).
 * Against the readable twin (libm's tanhf, expf in transformers' formulas):
 * |act - act_reference| <= 6 * 2^-24 * |g| before the product with up, g
 * the gate's value (tests/test_ffn_act.c: 3.5 GELU, 3.9 SiLU): the rounding the
 * formulas carry anyway, as 1 + tanh cancels for negative g. */
void model_ffn_act(float *gate, const float *up, size_t count, qkv_ffn_act act, int n_threads);
void model_ffn_act_reference(float *gate, const float *up, size_t count, qkv_ffn_act act);
/* One ISA's kernel, one thread: gate[count], up[count] as model_ffn_act. */
void model_ffn_act_range_avx512(float *gate, const float *up, size_t count, qkv_ffn_act act);
void model_ffn_act_range_avx2(float *gate, const float *up, size_t count, qkv_ffn_act act);
void model_ffn_act_range_scalar(float *gate, const float *up, size_t count, qkv_ffn_act act);

/* sum_i a[i] * b[i] with independent partial sums (vectorises without -ffast-math). */
float model_dot(const float *a, const float *b, int n);

/* ------------------------------------------------ forward options (forward_opts.c) */

/* What hook_pattern's activation points to: one layer's attention call. */
struct qkv_attn_view {
    const float *q;            /* [Hq, n, D] rotated */
    const float *lse;          /* [Hq, n] */
    const qkv_kv_cache *cache;
    int key0;                  /* the position of the cache's row 0 (desc's key 0) */
    int layer;
    qkv_attn_desc desc;        /* the layer's call: its exclusions for every head, the cache's dtype and stride */
    const qkv_forward_opts *opts; /* for head-scoped exclusions */
    int *head_excl;            /* [n_ctx] scratch for one head's exclusion list */
    unsigned char *mark;       /* [n_ctx] zeros, scratch of forward_opts_exclusions */
};

/* QKV_OK, or QKV_ERR_INVALID naming the first option out of range for c. */
qkv_status forward_opts_check(const qkv_forward_opts *o, const qkv_model_config *c, qkv_error *err);
/* out <- the union of the positions in [key0, key0 + n_keys) that o hides in
 * layer `layer` from query head `head` (QKV_ALL: only the exclusions for
 * every head), as keys (position - key0: rows of a cache whose row 0 is
 * position key0); returns its length. mark: [n_keys] zeros, left zero. */
int forward_opts_exclusions(int *out, unsigned char *mark, const qkv_forward_opts *o, int layer, int head,
                            int key0, int n_keys);
/* 1 if an exclusion scoped to this head applies in this layer. */
int forward_opts_head_excluded(const qkv_forward_opts *o, int layer, int head);
/* 1 if (layer, head) is one of o's zeroed heads. */
int forward_opts_zeroed(const qkv_forward_opts *o, int layer, int head);
/* 1 if a hook of o is installed at point in layer. */
int forward_opts_hooked(const qkv_forward_opts *o, qkv_hook_point point, int layer);
/* Calls o's hooks at a's point and layer, in list order; the first failure
 * stops them, its message (or one naming the point) in err. */
qkv_status forward_opts_call(const qkv_forward_opts *o, const qkv_activation *a, qkv_error *err);

#endif
