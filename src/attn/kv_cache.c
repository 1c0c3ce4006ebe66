/*
 * kv_cache.c — one layer's keys (after RoPE) and values, [Hkv, capacity, D]
 * in f32, bf16 or f16. Appending converts once; the kernels read the storage
 * type directly (kv_head_stride = capacity * D). Valid because of the causal
 * mask: K and V of position j never change once written, unless evicted
 * (qkv_kv_cache_shift moves the later rows down, re-rotating their keys
 * when positions are re-indexed). Storage comes from
 * qkv_kv_alloc: 2 MiB aligned, transparent huge pages where offered; init
 * faults all of it in (kv_commit), as llama.cpp clears its KV buffers when
 * it makes a context.
 */
#include "qkv/attn.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* 2 MiB: the x86-64 huge page. K/V arrays are streamed end to end by every
 * decode step; on 4 KiB pages each stream misses the TLB and restarts the
 * hardware prefetcher every 4 KiB. */
#define KV_ALIGN ((size_t)2 << 20)

void *qkv_kv_alloc(size_t bytes) {
    if (bytes < KV_ALIGN) return malloc(bytes ? bytes : 1);
    size_t rounded = (bytes + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN;
    void *p = aligned_alloc(KV_ALIGN, rounded);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: refused or not, p is good memory */
#endif
    return p;
}

void qkv_kv_free(void *p) { free(p); }

/* Faults in every page of [p, p + bytes) now: MADV_POPULATE_WRITE (Linux
 * 5.14), else a write to each 4 KiB page (the contents stay undefined: a
 * cache reads only positions it has written). Otherwise the first append
 * faults in a whole 2 MiB huge page of every head of every layer (SmolLM2 at
 * 8K positions: 360 MB on its first token), inside the forward pass: `qkv
 * run`'s prompt tok/s then timed the kernel zeroing pages (up to 0.97 s
 * of system time for a 64-token prompt in a VM, docs/benchmarks-history.md), and a machine
 * short of memory failed in the middle of a run, not at init. */
static void kv_commit(void *p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (bytes >= KV_ALIGN && madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (size_t o = 0; o < bytes; o += 4096) ((volatile char *)p)[o] = 0;
}

struct qkv_kv_cache {
    int n_kv_head, head_dim, capacity, len;
    qkv_dtype dtype;
    void *k; /* [n_kv_head, capacity, head_dim] of dtype */
    void *v; /* [n_kv_head, capacity, head_dim] of dtype */
};

qkv_status qkv_kv_cache_init(qkv_kv_cache **out, int n_kv_head, int head_dim, int capacity,
                             qkv_dtype dtype, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "kv cache: out is NULL");
    *out = NULL;
    if (n_kv_head < 1 || head_dim < 1 || capacity < 1)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: n_kv_head %d, head_dim %d, capacity %d must be >= 1",
                        n_kv_head, head_dim, capacity);
    if (dtype != QKV_DTYPE_F32 && dtype != QKV_DTYPE_BF16 && dtype != QKV_DTYPE_F16)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: unknown dtype %d", (int)dtype);
    size_t bytes = (size_t)n_kv_head * (size_t)capacity * (size_t)head_dim * qkv_dtype_size(dtype);
    qkv_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return util_fail(err, QKV_ERR_NOMEM, "kv cache: out of memory");
    c->k = qkv_kv_alloc(bytes);
    c->v = qkv_kv_alloc(bytes);
    if (!c->k || !c->v) {
        qkv_kv_cache_free(c);
        return util_fail(err, QKV_ERR_NOMEM, "kv cache: cannot allocate 2 x %zu bytes", bytes);
    }
    kv_commit(c->k, bytes);
    kv_commit(c->v, bytes);
    c->n_kv_head = n_kv_head;
    c->head_dim = head_dim;
    c->capacity = capacity;
    c->dtype = dtype;
    *out = c;
    return QKV_OK;
}

void qkv_kv_cache_free(qkv_kv_cache *c) {
    if (!c) return;
    qkv_kv_free(c->k);
    qkv_kv_free(c->v);
    free(c);
}

int qkv_kv_cache_len(const qkv_kv_cache *c) { return c->len; }
int qkv_kv_cache_capacity(const qkv_kv_cache *c) { return c->capacity; }
qkv_dtype qkv_kv_cache_dtype(const qkv_kv_cache *c) { return c->dtype; }
const void *qkv_kv_cache_k(const qkv_kv_cache *c) { return c->k; }
const void *qkv_kv_cache_v(const qkv_kv_cache *c) { return c->v; }

qkv_status qkv_kv_cache_truncate(qkv_kv_cache *c, int len, qkv_error *err) {
    if (len < 0 || len > c->len)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: cannot truncate length %d to %d", c->len, len);
    c->len = len;
    return QKV_OK;
}

static size_t offset(const qkv_kv_cache *c, int head, int pos) {
    return ((size_t)head * c->capacity + (size_t)pos) * c->head_dim * qkv_dtype_size(c->dtype);
}

qkv_status qkv_kv_cache_write(qkv_kv_cache *c, int start, const float *k, const float *v, int n, qkv_error *err) {
    if (start < 0 || n < 0 || start + n > c->len || !k || !v)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: write [%d, %d) outside [0, %d)", start, start + n, c->len);
    const size_t row = (size_t)n * c->head_dim;
    for (int h = 0; h < c->n_kv_head; h++) {
        qkv_convert_from_f32((char *)c->k + offset(c, h, start), c->dtype, k + h * row, row);
        qkv_convert_from_f32((char *)c->v + offset(c, h, start), c->dtype, v + h * row, row);
    }
    return QKV_OK;
}

qkv_status qkv_kv_cache_append(qkv_kv_cache *c, const float *k, const float *v, int n_new,
                               qkv_error *err) {
    if (n_new < 0 || !k || !v) return util_fail(err, QKV_ERR_INVALID, "kv cache: bad append arguments");
    if (n_new > c->capacity - c->len)
        return util_fail(err, QKV_ERR_FULL, "kv cache: full (%d of %d positions used, %d more requested)",
                        c->len, c->capacity, n_new);
    c->len += n_new;
    return qkv_kv_cache_write(c, c->len - n_new, k, v, n_new, err);
}

qkv_status qkv_kv_cache_read(float *k, float *v, const qkv_kv_cache *c, int start, int n,
                             qkv_error *err) {
    if (start < 0 || n < 0 || start + n > c->len)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: read [%d, %d) outside [0, %d)", start, start + n,
                        c->len);
    const size_t row = (size_t)n * c->head_dim;
    for (int h = 0; h < c->n_kv_head; h++) {
        if (k) qkv_convert_to_f32(k + h * row, (const char *)c->k + offset(c, h, start), c->dtype, row);
        if (v) qkv_convert_to_f32(v + h * row, (const char *)c->v + offset(c, h, start), c->dtype, row);
    }
    return QKV_OK;
}

#define SHIFT_ROWS 16 /* keys re-rotated per call: 16 KiB of stack at D = 256 */

qkv_status qkv_kv_cache_shift(qkv_kv_cache *c, int from, int n, const qkv_rope *rope, qkv_error *err) {
    if (from < 0 || n < 0 || n > c->len - from)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: cannot evict [%d, %d) of length %d", from, from + n, c->len);
    if (rope && c->head_dim > QKV_HEAD_DIM_MAX)
        return util_fail(err, QKV_ERR_INVALID, "kv cache: head_dim %d > %d", c->head_dim, QKV_HEAD_DIM_MAX);
    const int moved = c->len - from - n, D = c->head_dim;
    const size_t es = qkv_dtype_size(c->dtype);
    const int64_t back = -(int64_t)n; /* R(p) then R(-n) is R(p - n) */
    /* a pure rotation: the keys already carry the attention factor once */
    qkv_rope pure = rope ? *rope : qkv_rope_default();
    pure.attn_factor = 0;
    for (int h = 0; h < c->n_kv_head; h++) {
        memmove((char *)c->k + offset(c, h, from), (char *)c->k + offset(c, h, from + n), (size_t)moved * D * es);
        memmove((char *)c->v + offset(c, h, from), (char *)c->v + offset(c, h, from + n), (size_t)moved * D * es);
        if (!rope || n == 0) continue;
        /* SHIFT_ROWS moved keys at a time, as qkv_rope_apply's "heads" of one
         * position: the angles of -n are computed once per block */
        for (int r = from; r < from + moved; r += SHIFT_ROWS) {
            const int nr = from + moved - r < SHIFT_ROWS ? from + moved - r : SHIFT_ROWS;
            float rows[SHIFT_ROWS * QKV_HEAD_DIM_MAX]; /* [nr, D] keys, f32 */
            char *dst = (char *)c->k + offset(c, h, r);
            qkv_convert_to_f32(rows, dst, c->dtype, (size_t)nr * D);
            qkv_status st = qkv_rope_apply(rows, &back, &pure, nr, 1, D, err);
            if (st) return st;
            qkv_convert_from_f32(dst, c->dtype, rows, (size_t)nr * D);
        }
    }
    c->len -= n;
    return QKV_OK;
}

/* d with the KV fields taken from the cache. */
static qkv_status cached_desc(qkv_attn_desc *dd, const qkv_kv_cache *c, const qkv_attn_desc *d, qkv_error *err) {
    if (!c || !d) return util_fail(err, QKV_ERR_INVALID, "attention: cache or descriptor is NULL");
    if (c->len < 1) return util_fail(err, QKV_ERR_INVALID, "attention: the kv cache is empty");
    *dd = *d;
    dd->n_kv_head = c->n_kv_head;
    dd->head_dim = c->head_dim;
    dd->kv_len = c->len;
    dd->kv_dtype = c->dtype;
    dd->kv_head_stride = (int64_t)c->capacity * c->head_dim;
    return QKV_OK;
}

qkv_status qkv_attn_cached(float *o, float *lse, const float *q, const qkv_kv_cache *c,
                                const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err) {
    qkv_attn_desc dd;
    qkv_status st = cached_desc(&dd, c, d, err);
    return st ? st : qkv_attn(o, lse, q, c->k, c->v, &dd, kernel, err);
}

qkv_status qkv_attn_run_cached(qkv_attn_plan *plan, float *o, float *lse, const float *q, const qkv_kv_cache *c,
                               const qkv_attn_desc *d, qkv_error *err) {
    qkv_attn_desc dd;
    qkv_status st = cached_desc(&dd, c, d, err);
    return st ? st : qkv_attn_run(plan, o, lse, q, c->k, c->v, &dd, err);
}
