/*
 * internal.h — what the attention kernels share inside src/attn: the tile
 * classifier, the exclusion bitmap, per-thread scratch and the ISA table.
 *
 * Legend: G = query heads per KV head, R = rows of a block (query heads x
 * positions), BK = keys per tile, ld = head_dim rounded up to 16 (row stride
 * of every scratch buffer, so any vector width divides it).
 */
#ifndef QKV_ATTN_INTERNAL_H
#define QKV_ATTN_INTERNAL_H

#include "qkv.h"
#include "util/error.h"

#include <stdint.h>
#include <stdlib.h>

#define ATTN_BK 64        /* keys per tile */
#define ATTN_MAX_ROWS 64  /* rows per block: heads of one KV group x positions */

typedef enum { ATTN_TILE_EMPTY, ATTN_TILE_PARTIAL, ATTN_TILE_FULL } attn_tile_class;

/* Excluded keys as a bitmap over [0, Lk); bits == NULL when there are none. */
typedef struct {
    uint64_t *bits;
    int n_words;
} attn_excl;

qkv_status attn_excl_init(attn_excl *ex, const qkv_mask *m, int kv_len, qkv_error *err);
void attn_excl_free(attn_excl *ex);
int attn_excl_any(const attn_excl *ex, int j0, int j1);
static inline int attn_excl_has(const attn_excl *ex, int j) {
    return ex->bits && ((ex->bits[j >> 6] >> (j & 63)) & 1);
}

/* Visibility by the mask kind's rule for absolute row position p (no exclusions). */
int attn_rule_visible(const qkv_mask *m, int p, int j);
/* One past the last key any row up to position p_last can see. */
int attn_key_end(const qkv_mask *m, int kv_len, int p_last);
/* Rows at positions [p0, p1] against keys [j0, j1). */
attn_tile_class attn_classify_tile(const qkv_mask *m, const attn_excl *ex, int p0, int p1, int j0,
                                   int j1);

/* One attention call, resolved: defaults applied, strides known. */
typedef struct {
    int n_q_head, n_kv_head, group, q_len, kv_len, head_dim, ld;
    float scale;
    const qkv_mask *mask;
    attn_excl ex;
    const float *q;          /* q: [Hq, Lq, D] */
    const void *k, *v;       /* k, v: [Hkv, Lk, D] in kv_dtype, heads kv_head_stride apart */
    qkv_dtype kv_dtype;
    int64_t kv_head_stride;  /* elements */
} attn_problem;

/* A block of rows: local heads [h0, h0 + nh) of KV head kvh, positions
 * [i0, i0 + nq). Row r = hl * nq + t. */
typedef struct {
    int kvh, h0, nh, i0, nq;
} attn_rows;

/* Per-thread scratch, allocated once per call per thread (O(tile), never O(n)).
 * Every buffer starts on a 64-byte boundary. */
typedef struct {
    float *q;     /* [ATTN_MAX_ROWS * ld] scaled queries: rows [R, ld] or transposed [D, RP] */
    float *s;     /* [ATTN_MAX_ROWS * ATTN_BK] scores, then probabilities: [R, BK] or [BK, RP] */
    float *kt;    /* [ATTN_BK, ld] K tile in f32, zero padded */
    float *vt;    /* [ATTN_BK, ld] V tile in f32, zero padded */
    float *acc;   /* [ATTN_MAX_ROWS, ld] running sum of p * v */
    float *m;     /* [ATTN_MAX_ROWS] running max of scores */
    float *l;     /* [ATTN_MAX_ROWS] running sum of exp(score - m) */
    float *alpha; /* [ATTN_MAX_ROWS] rescale factor of the current tile */
    int32_t *pos; /* [ATTN_MAX_ROWS] absolute position of each row */
    float *part;  /* [ATTN_PART] partial dot products of the few-row path */
    void *mem;
} attn_scratch;
#define ATTN_PART (8 * 16 * 16)

qkv_status attn_scratch_init(attn_scratch *ws, int ld, qkv_error *err);
void attn_scratch_free(attn_scratch *ws);

/* Online softmax over keys [j0, j1) for one block of rows. Initialises
 * ws->m = -inf, ws->l = 0, ws->acc = 0, then folds in every visible key:
 * afterwards O_row = acc / l and LSE_row = m + log(l) (l == 0: fully masked). */
typedef void (*attn_rows_fn)(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                             attn_scratch *ws);

typedef struct {
    const char *name;  /* "avx512", "avx2", "scalar" */
    int vector_width;  /* floats per vector */
    attn_rows_fn rows;
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
/* The block path with bf16 dot products (Q and p rounded to bf16) for every
 * block, for the flash-bf16 kernel; an odd D takes the exact f32 paths. */
void attn_rows_avx512bf16(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                          attn_scratch *ws);
/* The inner loop of the flash-bf16 kernel on this CPU: attn_rows_avx512bf16
 * where AVX512_BF16 is there (and QKV_ISA allows avx512), else NULL. */
attn_rows_fn attn_rows_bf16dot(void);

/* Resolves a descriptor into a problem (validates it; builds the exclusion bitmap). */
qkv_status attn_problem_init(attn_problem *P, const qkv_attn_desc *d, const float *q,
                             const void *k, const void *v, qkv_error *err);
void attn_problem_free(attn_problem *P);

/* Thread count to use for a descriptor's n_threads (0 = all available). */
int attn_threads(int requested);

/* The kernels behind qkv_attention. */
qkv_status attn_flash(float *o, float *lse, const attn_problem *P, int n_threads, attn_rows_fn rows,
                      qkv_error *err);
qkv_status attn_decode(float *o, float *lse, const attn_problem *P, int n_threads, qkv_error *err);

#endif /* QKV_ATTN_INTERNAL_H */
