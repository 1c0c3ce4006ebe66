/*
 * gguf_build.h — GGUF files built byte by byte in tests (crafted good and
 * bad files for the reader, metadata-only models for the config reader and
 * the cost model): a growing buffer, little-endian puts, key-value helpers.
 * Header-only; the caller frees b.p.
 */
#ifndef QKV_TESTS_GGUF_BUILD_H
#define QKV_TESTS_GGUF_BUILD_H

#include "qkv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} gguf_buf;

static inline void gguf_put(gguf_buf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static inline void gguf_put_u32(gguf_buf *b, uint32_t x) { gguf_put(b, &x, 4); }
static inline void gguf_put_u64(gguf_buf *b, uint64_t x) { gguf_put(b, &x, 8); }
static inline void gguf_put_str(gguf_buf *b, const char *s) {
    gguf_put_u64(b, strlen(s));
    gguf_put(b, s, strlen(s));
}
static inline void gguf_put_pad(gguf_buf *b, size_t align) {
    static const uint8_t zero[256];
    size_t r = b->n % align;
    if (r) gguf_put(b, zero, align - r);
}
static inline void gguf_put_zeros(gguf_buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) gguf_put(b, "", 1);
}
static inline void gguf_put_header(gguf_buf *b, uint64_t n_tensors, uint64_t n_kv) {
    gguf_put(b, "GGUF", 4);
    gguf_put_u32(b, 3);
    gguf_put_u64(b, n_tensors);
    gguf_put_u64(b, n_kv);
}
static inline void gguf_put_kv_u32(gguf_buf *b, const char *key, uint32_t v) {
    gguf_put_str(b, key);
    gguf_put_u32(b, QKV_GGUF_TYPE_U32);
    gguf_put_u32(b, v);
}
static inline void gguf_put_tinfo(gguf_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset) {
    gguf_put_str(b, name);
    gguf_put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gguf_put_u64(b, ne[d]);
    gguf_put_u32(b, type);
    gguf_put_u64(b, offset);
}
static inline void gguf_put_kv_str(gguf_buf *b, const char *key, const char *v) {
    gguf_put_str(b, key);
    gguf_put_u32(b, QKV_GGUF_TYPE_STRING);
    gguf_put_str(b, v);
}
static inline void gguf_put_kv_f32(gguf_buf *b, const char *key, float v) {
    gguf_put_str(b, key);
    gguf_put_u32(b, QKV_GGUF_TYPE_F32);
    gguf_put(b, &v, 4);
}
/* A string array of n tokens "t0", "t1", ... */
static inline void gguf_put_kv_tokens(gguf_buf *b, const char *key, uint64_t n) {
    gguf_put_str(b, key);
    gguf_put_u32(b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(b, QKV_GGUF_TYPE_STRING);
    gguf_put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) {
        char tok[24];
        snprintf(tok, sizeof tok, "t%llu", (unsigned long long)i);
        gguf_put_str(b, tok);
    }
}
/* Writes b to path; 1 on success. */
static inline int gguf_buf_save(const gguf_buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b->p, 1, b->n, f) == b->n;
    return fclose(f) == 0 && ok;
}

#endif /* QKV_TESTS_GGUF_BUILD_H */
