/*
 * internal.h — what the attention kernels share inside src/attn: the tile
 * classifier, the exclusion bitmap, per-thread scratch, the plan that owns
 * them and the ISA table.
 *
 * Legend: G = query heads per KV head, R = rows of a block (query heads x
 * positions), BK = keys per tile, ld = head_dim rounded up to 16 (row stride
 * of every scratch buffer, so any vector width divides it).
 */
#ifndef QKV_ATTN_INTERNAL_H
#define QKV_ATTN_INTERNAL_H

#include "qkv/attn.h"
#include "util/error.h"
#include "util/parallel.h"
#include "util/tanh_poly.h"

#include <stdint.h>
#include <stdlib.h>

#define ATTN_BK 64             /* keys per tile */
#define ATTN_DECODE_MIN_KV 256 /* AUTO runs decode for q_len <= QKV_DECODE_MAX_Q from this many keys */
#define ATTN_BLOCK_ROWS 64     /* rows per block: heads of one KV group x positions */
#define ATTN_MAX_ROWS 128      /* rows of a wide block (attn_flash_block_rows), the scratch's capacity */
#define ATTN_MAX_STRIDE (ATTN_MAX_ROWS + 16) /* the block path's row stride of its transposed queries and scores */

typedef enum { ATTN_TILE_EMPTY, ATTN_TILE_PARTIAL, ATTN_TILE_FULL } attn_tile_class;

/* Excluded keys as a bitmap over [0, Lk); bits == NULL when there are none. */
typedef struct {
    uint64_t *bits;
    int n_words;
} attn_excl;

/* Words of the bitmap over kv_len keys. */
#define ATTN_EXCL_WORDS(kv_len) (((size_t)(kv_len) + 63) / 64)
/* Builds the bitmap of m's exclusions in bits: [ATTN_EXCL_WORDS(kv_len)]
 * (the caller's memory); ex->bits stays NULL when m excludes nothing. */
void attn_excl_build(attn_excl *ex, uint64_t *bits, const qkv_mask *m, int kv_len);
int attn_excl_any(const attn_excl *ex, int j0, int j1);
static inline int attn_excl_has(const attn_excl *ex, int j) {
    return ex->bits && ((ex->bits[j >> 6] >> (j & 63)) & 1);
}

/* Visibility by the mask kind's rule for absolute row position p (no exclusions). */
int attn_rule_visible(const qkv_mask *m, int p, int j);
/* 1 if the row at absolute position p sees at least one of keys [0, kv_len)
 * by the rule and the exclusions: the one test of a fully masked row, which
 * the scores cannot give (a visible key may score -inf, or NaN). Each of the
 * rule's intervals is walked from its start past excluded keys only, so the
 * cost is at most the number of exclusions. */
int attn_row_sees_any(const qkv_mask *m, const attn_excl *ex, int kv_len, int p);
/* One past the last key any row up to position p_last can see. */
int attn_key_end(const qkv_mask *m, int kv_len, int p_last);
/* How many of keys [0, kv_len) the rule lets the row at position p see (exclusions ignored). */
int attn_rule_keys_seen(const qkv_mask *m, int kv_len, int p);
/* Rows at positions [p0, p1] against keys [j0, j1). */
attn_tile_class attn_classify_tile(const qkv_mask *m, const attn_excl *ex, int p0, int p1, int j0,
                                   int j1);

/* One attention call, resolved: defaults applied, strides known. */
typedef struct {
    int n_q_head, n_kv_head, group, q_len, kv_len, head_dim, ld;
    float scale;
    float softcap;           /* c > 0: scores become c tanh(s / c) (attn_softcap_*); 0: none */
    const qkv_mask *mask;
    attn_excl ex;
    const float *q;          /* q: [Hq, Lq, D] */
    const void *k, *v;       /* k, v: [Hkv, Lk, D] in kv_dtype, heads kv_head_stride apart */
    qkv_dtype kv_dtype;
    int64_t kv_head_stride;  /* elements */
    int kv_f32_copy;         /* 1: the block path may read K/V through ws->kvf (attn_flash sets it) */
} attn_problem;

/* A block of rows: local heads [h0, h0 + nh) of KV head kvh, positions
 * [i0, i0 + nq). Row r = hl * nq + t. */
typedef struct {
    int kvh, h0, nh, i0, nq;
} attn_rows;

/* A thread's f32 copy of keys [0, len) of KV head kvh, K and V each
 * [len, D] (rows D floats apart), made by the block path of a flash call
 * whose K/V are bf16 or f16 and reused by every later block of that head on
 * that thread. Converting each tile for each block instead cost ~10% of
 * causal prefill, and a tile is read by every later block of its head
 * (docs/benchmarks-history.md, issue 11). kvh < 0: empty; attn_flash empties it at every
 * call, since K and V may have changed since the last. */
typedef struct {
    float *k, *v; /* [cap] each; NULL when the plan holds no copy */
    size_t cap;   /* floats of each */
    int kvh, len;
} attn_kv_f32;

/* The most floats of K (and of V) a thread's copy holds: 4 MiB each, so 8K
 * keys at D = 128 and 16K at D = 64; longer K/V take the per-tile
 * conversion. Two threads' copies then stay in L3; at 16K keys and D = 128
 * (8 MiB each) every block streamed twice the bytes of the bf16 K/V from
 * DRAM, and chunked prefill 512 x 16K ran 5-14% slower than converting per
 * tile (docs/benchmarks-history.md, issue 11). */
#define ATTN_KV_F32_MAX_FLOATS ((size_t)1 << 20)

/* Per-thread scratch, O(tile), never O(n) (but for the optional K/V copy
 * kvf, which is bounded): one per thread of a plan, carved out of the
 * plan's memory. Every buffer starts on a 64-byte boundary. */
typedef struct {
    float *q;     /* [ATTN_MAX_STRIDE * ld] scaled queries: rows [R, ld] or transposed [D, RS] */
    float *s;     /* [ATTN_MAX_STRIDE * ATTN_BK] scores, then probabilities: [R, BK] or [BK, RS] */
    float *kt;    /* [ATTN_BK * ld] K scratch: the block path's MK rows in f32 [MK, D] (tile_impl.h), the bf16 tile [BK, D] (tile_bf16dot.h) */
    float *vt;    /* [ATTN_BK * ld] V scratch: a column chunk in f32 [BK, NC * VW], the bf16 pairs [BK / 2, ld] */
    float *acc;   /* [ATTN_MAX_ROWS, ld] running sum of p * v */
    float *m;     /* [ATTN_MAX_ROWS] running max of scores */
    float *l;     /* [ATTN_MAX_ROWS] running sum of exp(score - m) */
    float *alpha; /* [ATTN_MAX_ROWS] rescale factor of the current tile */
    float *tmax;  /* [ATTN_MAX_ROWS] max score of the current tile */
    int32_t *pos; /* [ATTN_MAX_ROWS] absolute position of each row */
    float *part;  /* [ATTN_PART] partial dot products of the few-row path; flash-bf16's packed p [BK / 2, ATTN_BLOCK_ROWS] */
    attn_kv_f32 kvf;
} attn_scratch;
#define ATTN_PART (8 * 16 * 16)

/* Online softmax over keys [j0, j1) for one block of rows. Initialises
 * ws->m = -inf, ws->l = 0, ws->acc = 0, then folds in every visible key:
 * afterwards O_row = acc / l and LSE_row = m + log(l) (l == 0: fully masked). */
typedef void (*attn_rows_fn)(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                             attn_scratch *ws);

/* x[i] = c tanh(x[i] / c) for i < n, c > 0: the ISA's vector soft-capping
 * (util/vmath.h's vtanh), the one the kernels apply to their score tiles;
 * the tests reach it through attn_isa. */
typedef void (*attn_softcap_fn)(float *x, int n, float c);

typedef struct {
    const char *name;  /* "avx512", "avx2", "scalar" */
    int vector_width;  /* floats per vector */
    attn_rows_fn rows;
    attn_softcap_fn softcap;
} attn_isa;

/* Best ISA this CPU runs (QKV_ISA=avx512|avx2|scalar in the environment
 * narrows the choice, for tests and benchmarks). */
const attn_isa *attn_isa_best(void);
/* The ISA of that name if compiled in and supported by this CPU, else NULL. */
const attn_isa *attn_isa_find(const char *name);

void attn_rows_avx512(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                      attn_scratch *ws);
void attn_rows_avx2(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                    attn_scratch *ws);
void attn_rows_scalar(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                      attn_scratch *ws);
void attn_softcap_avx512(float *x, int n, float c);
void attn_softcap_avx2(float *x, int n, float c);
void attn_softcap_scalar(float *x, int n, float c);

/* The block path with bf16 dot products (Q and p rounded to bf16) for every
 * block, for the flash-bf16 kernel; an odd D takes the exact f32 paths. */
void attn_rows_avx512bf16(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                          attn_scratch *ws);
/* The inner loop of the flash-bf16 kernel on this CPU: attn_rows_avx512bf16
 * where AVX512_BF16 is there (and QKV_ISA allows avx512), else NULL. */
attn_rows_fn attn_rows_bf16dot(void);

/* tanh(x) in float by the method of util/vmath.h's vtanh, written plainly
 * (softcap.c): its readable twin, which the tests hold every ISA's vector
 * tanh and double tanh against. Both split at |x| = UTIL_TANH_SMALL
 * (util/tanh_poly.h has the constants):
 *   |x| <  0.625: tanh x = x + x z P(z), z = x^2, P of degree 4 with
 *                 tanh_poly.h's coefficients (tools/tanh_poly.py: least maximum
 *                 relative error, 0.71 ulp evaluated in float): no
 *                 cancellation near 0, where 1 - 2 / (exp(2x) + 1) loses
 *                 every digit;
 *   |x| >= 0.625: tanh |x| = (1 - e) / (1 + e), e = exp(-2|x|) <= 0.29, so
 *                 neither the sum nor the difference cancels (2.1 ulp with
 *                 the kernels' exp2); from |x| ~ 8.7 on it rounds to exactly
 *                 1, and e never overflows (exp(+2|x|) would from |x| ~ 44);
 * the sign put back last, so tanh(-x) = -tanh(x) exactly and a NaN stays NaN.
 * Measured against double tanh: tests/test_attn_kernels.c. */
float attn_tanhf(float x);

/* The one check of a call, made by its entry point (qkv_attn,
 * qkv_attn_run, qkv_attn_reference): o, then the descriptor
 * (qkv_attn_check), then q, k and v. */
qkv_status attn_call_check(const float *o, const float *q, const void *k, const void *v, const qkv_attn_desc *d,
                           qkv_error *err);
/* Resolves a checked descriptor into a problem (defaults applied; checks
 * nothing). The exclusion bitmap is built in excl_bits:
 * [ATTN_EXCL_WORDS(d->kv_len)], or not at all when excl_bits is NULL (the
 * reference kernel reads the mask by qkv_mask_visible). */
void attn_problem_init(attn_problem *P, const qkv_attn_desc *d, const float *q, const void *k, const void *v,
                       uint64_t *excl_bits);

/* Thread count to use for a descriptor's n_threads (0 = all available). */
int attn_threads(int requested);

/* Everything a call needs beyond its arguments, sized once (qkv_attn_plan_init). */
struct qkv_attn_plan {
    qkv_kernel kernel;       /* as given: AUTO picks per call */
    int n_threads;           /* a call uses at most this many */
    int max_q_head, max_q_len, max_kv_len, max_head_dim;
    attn_scratch *ws;        /* [n_threads] per-thread tile scratch, row stride ld of max_head_dim */
    float *part;             /* [n_part] decode split partials; NULL if the kernel never decodes */
    size_t n_part;
    uint64_t *excl;          /* [ATTN_EXCL_WORDS(max_kv_len)] exclusion bitmap */
    void *owned;             /* what qkv_attn_plan_free releases; NULL for qkv_attn_plan_init_in */
};

/* Rows per block attn_flash gives the f32 block path for P: ATTN_BLOCK_ROWS,
 * or ATTN_MAX_ROWS where the keys a block walks stream from beyond the
 * caches (flash.c). The flash-bf16 path keeps ATTN_BLOCK_ROWS: its packed
 * probabilities live in ws->part, sized for that. */
int attn_flash_block_rows(const attn_problem *P);

/* The kernels behind qkv_attn_run, on a resolved problem; none checks it.
 * attn_reference: weights [Hq, Lq, Lk] or NULL; it allocates the score table
 * (QKV_ERR_TOO_LARGE beyond QKV_REFERENCE_MAX_SCORES, QKV_ERR_NOMEM). */
qkv_status attn_reference(float *o, float *lse, float *weights, const attn_problem *P, int n_threads,
                          qkv_error *err);
/* ws: [n_threads] scratch; attn_flash empties their K/V copies
 * (attn_kv_f32) and lets the block path use them. */
void attn_flash(float *o, float *lse, const attn_problem *P, int n_threads, attn_rows_fn rows,
                attn_scratch *ws);
/* Floats of split partials a call of P on n_threads needs, and the most any
 * call within the maxima can need (the plan reserves that). */
size_t attn_decode_part_floats(const attn_problem *P, int n_threads);
size_t attn_decode_part_bound(int max_q_head, int max_q_len, int max_kv_len, int ld, int n_threads);
/* part: [attn_decode_part_floats(P, n_threads)]. */
void attn_decode(float *o, float *lse, const attn_problem *P, int n_threads, attn_scratch *ws, float *part);

#endif /* QKV_ATTN_INTERNAL_H */
