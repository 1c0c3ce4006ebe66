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
/* A whole tiny Llama for load-time checks: 2 layers, embedding 64, 4 heads of
 * 16 dims sharing 2 KV heads, ffn 128, F32 weights (matrices 0, norms and
 * RoPE factors 1), a SentencePiece vocabulary "t0", "t1" ... of n_tokens
 * (BOS 1, EOS 2) and a token_embd.weight of n_rows rows. poison names one 1-D
 * tensor (a norm or rope_freqs.weight) whose element 3 becomes poison_value;
 * NULL: none. */
static inline void gguf_put_tiny_llama(gguf_buf *b, int n_tokens, int n_rows, const char *poison,
                                       float poison_value) {
    enum { L = 2, E = 64, HQ = 4, HKV = 2, D = 16, F = 128 };
    struct { char name[40]; uint64_t d0, d1; float fill; } t[3 + 9 * L];
    int n = 0;
#define TINY_T(nm, a, c, v) (snprintf(t[n].name, sizeof t[n].name, "%s", nm), t[n].d0 = (a), t[n].d1 = (c), \
                             t[n].fill = (v), n++)
    TINY_T("token_embd.weight", (uint64_t)n_rows, E, 0.0f);
    TINY_T("output_norm.weight", E, 0, 1.0f);
    TINY_T("rope_freqs.weight", D / 2, 0, 1.0f);
    static const struct { const char *suffix; uint64_t d0, d1; float fill; } per_layer[9] = {
        {"attn_norm.weight", E, 0, 1}, {"attn_q.weight", HQ * D, E, 0}, {"attn_k.weight", HKV * D, E, 0},
        {"attn_v.weight", HKV * D, E, 0}, {"attn_output.weight", E, HQ * D, 0}, {"ffn_norm.weight", E, 0, 1},
        {"ffn_gate.weight", F, E, 0}, {"ffn_up.weight", F, E, 0}, {"ffn_down.weight", E, F, 0},
    };
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++) {
            char nm[40];
            snprintf(nm, sizeof nm, "blk.%d.%s", l, per_layer[i].suffix);
            TINY_T(nm, per_layer[i].d0, per_layer[i].d1, per_layer[i].fill);
        }
#undef TINY_T
    gguf_put_header(b, (uint64_t)n, 12);
    gguf_put_kv_str(b, "general.architecture", "llama");
    gguf_put_kv_u32(b, "llama.block_count", L);
    gguf_put_kv_u32(b, "llama.embedding_length", E);
    gguf_put_kv_u32(b, "llama.attention.head_count", HQ);
    gguf_put_kv_u32(b, "llama.attention.head_count_kv", HKV);
    gguf_put_kv_u32(b, "llama.feed_forward_length", F);
    gguf_put_kv_u32(b, "llama.context_length", 64);
    gguf_put_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_put_kv_str(b, "tokenizer.ggml.model", "llama");
    gguf_put_kv_tokens(b, "tokenizer.ggml.tokens", (uint64_t)n_tokens);
    gguf_put_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    gguf_put_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t ne[2] = {t[i].d1 ? t[i].d1 : t[i].d0, t[i].d0}; /* ggml order: innermost first */
        gguf_put_tinfo(b, t[i].name, t[i].d1 ? 2 : 1, ne, QKV_GGML_TYPE_F32, off);
        off += (t[i].d0 * (t[i].d1 ? t[i].d1 : 1) * 4 + 31) / 32 * 32;
    }
    gguf_put_pad(b, 32);
    for (int i = 0; i < n; i++) {
        uint64_t count = t[i].d0 * (t[i].d1 ? t[i].d1 : 1);
        for (uint64_t k = 0; k < count; k++) {
            float v = poison && !strcmp(poison, t[i].name) && k == 3 ? poison_value : t[i].fill;
            gguf_put(b, &v, 4);
        }
        gguf_put_pad(b, 32);
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
