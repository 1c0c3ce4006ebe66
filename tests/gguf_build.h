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
/* One metadata entry of a tiny model (gguf_tiny_spec.kv): a u32, an f32 or a
 * string, by type (QKV_GGUF_TYPE_U32 / F32 / STRING). */
typedef struct {
    const char *key;
    int type;
    uint32_t u;
    float f;
    const char *s;
} gguf_kv;

static inline void gguf_put_kv(gguf_buf *b, const gguf_kv *kv) {
    if (kv->type == QKV_GGUF_TYPE_STRING) gguf_put_kv_str(b, kv->key, kv->s);
    else if (kv->type == QKV_GGUF_TYPE_F32) gguf_put_kv_f32(b, kv->key, kv->f);
    else gguf_put_kv_u32(b, kv->key, kv->u);
}

/* An array key of n numbers of element type QKV_GGUF_TYPE_I32 or F32 (4 bytes each). */
static inline void gguf_put_kv_arr4(gguf_buf *b, const char *key, uint32_t type, const void *v, uint64_t n) {
    gguf_put_str(b, key);
    gguf_put_u32(b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(b, type);
    gguf_put_u64(b, n);
    gguf_put(b, v, 4 * n);
}

/* A whole tiny model of one family, written as llama.cpp's converter lays
 * it out, with the faults the fields after the sizes ask for:
 *   llama   attn_norm, q/k/v/output, ffn_norm, gate/up/down per layer
 *   qwen2   + attn_q/k/v.bias           qwen3  + attn_q_norm / attn_k_norm
 *   gemma2  + post_attention_norm / post_ffw_norm, attention.sliding_window 8,
 *           soft-caps 50 and 30
 *   gemma3  as gemma2 + attn_q_norm / attn_k_norm, sliding_window 4, no
 *           soft-caps, rope.freq_base 1e6
 *   olmo2   no attn_norm / ffn_norm; post_attention_norm / post_ffw_norm,
 *           attn_q_norm [Hq*D] / attn_k_norm [Hkv*D] (the whole projection)
 *   phi3    attn_qkv [Hq*D + 2 Hkv*D, E] and ffn_up [2F, E] (gate, up) instead
 *           of q/k/v and gate/up; rope.dimension_count D/2 (partial rotary),
 *           rope.scaling.original_context_length 64 of context 256,
 *           attn_factor 1.19, rope_factors_long (1.5) / _short (1) [D/4]
 * Matrices F32 of small varied values, norms 1, biases 0.01. The vocabulary:
 * byte_vocab 0: "t0", "t1", ... (n_tokens of them); 1: <unk> <s> </s> and
 * the 256 <0xXX> byte tokens of SentencePiece's byte fallback, so any text
 * tokenises (n_tokens is then 259). BOS 1, EOS 2. */
typedef struct {
    const char *arch;
    int n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff; /* head_dim: key_length (not written for llama) */
    int n_tokens, n_rows;       /* tokenizer entries, token_embd.weight rows (0: as many as tokens) */
    int byte_vocab;
    int rope_freqs;             /* a rope_freqs.weight [head_dim / 2] of ones */
    int rope_factors_len;       /* phi3: rope_factors_long.weight's length (0: D/4, the right one) */
    const gguf_kv *kv;          /* [n_kv] replace the builder's keys of the same name, or are added */
    int n_kv;
    const char *drop;           /* a key or tensor left out; NULL: none */
    const char *resize;         /* a 1-D tensor written with resize_d0 elements; NULL: none */
    uint64_t resize_d0;
    const char *poison;         /* an F32 tensor whose element poison_at becomes poison_value */
    int64_t poison_at;
    float poison_value;
    const char *quant;          /* a matrix stored in quant_type blocks; block bad_block's scales get */
    qkv_ggml_type quant_type;   /* the f16 bits bad_scale (0x7e00 NaN, 0x7c00 inf); bad_block -1: none */
    int64_t bad_block;
    uint16_t bad_scale;
} gguf_tiny_spec;

/* Byte offsets of a block type's f16 scales (d, then m or dmin: -1 none). */
static inline void gguf_block_scales(qkv_ggml_type t, int off[2]) {
    off[1] = -1;
    switch (t) {
    case QKV_GGML_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case QKV_GGML_TYPE_Q3_K: off[0] = 108; break;
    case QKV_GGML_TYPE_Q6_K: off[0] = 208; break;
    case QKV_GGML_TYPE_Q4_1: case QKV_GGML_TYPE_Q5_1: case QKV_GGML_TYPE_Q4_K: case QKV_GGML_TYPE_Q5_K:
        off[0] = 0, off[1] = 2;
        break;
    default: off[0] = 0; break; /* Q8_0, Q4_0, Q5_0 */
    }
}

static inline void gguf_put_tiny_model(gguf_buf *b, const gguf_tiny_spec *s) {
    const char *a = s->arch;
    const int L = s->n_layer, E = s->n_embd, HQ = s->n_head, HKV = s->n_kv_head, D = s->head_dim, F = s->n_ff;
    const int qwen2 = !strcmp(a, "qwen2"), gemma2 = !strcmp(a, "gemma2"), gemma3 = !strcmp(a, "gemma3");
    const int olmo2 = !strcmp(a, "olmo2"), phi3 = !strcmp(a, "phi3");
    const int qk_norm = gemma3 || !strcmp(a, "qwen3") || olmo2, post_norms = gemma2 || gemma3 || olmo2;
    const int qn = olmo2 ? HQ * D : D, kn = olmo2 ? HKV * D : D; /* QK-norm widths */
    const int n_tok = s->byte_vocab ? 259 : s->n_tokens, n_rows = s->n_rows ? s->n_rows : n_tok;
    /* the metadata: the builder's keys, each replaced by s->kv's of the same name */
    enum { MAX_KV = 48 };
    gguf_kv kv[MAX_KV];
    char names[MAX_KV][96];
    int nk = 0;
#define TINY_KV(suffix, t, uv, fv, sv)                                                                    \
    (snprintf(names[nk], sizeof names[nk], "%s.%s", a, suffix),                                         \
     kv[nk] = (gguf_kv){.key = names[nk], .type = (t), .u = (uv), .f = (fv), .s = (sv)}, nk++)
    kv[nk++] = (gguf_kv){.key = "general.architecture", .type = QKV_GGUF_TYPE_STRING, .s = a};
    TINY_KV("block_count", QKV_GGUF_TYPE_U32, (uint32_t)L, 0, NULL);
    TINY_KV("embedding_length", QKV_GGUF_TYPE_U32, (uint32_t)E, 0, NULL);
    TINY_KV("attention.head_count", QKV_GGUF_TYPE_U32, (uint32_t)HQ, 0, NULL);
    TINY_KV("attention.head_count_kv", QKV_GGUF_TYPE_U32, (uint32_t)HKV, 0, NULL);
    TINY_KV("feed_forward_length", QKV_GGUF_TYPE_U32, (uint32_t)F, 0, NULL);
    TINY_KV("context_length", QKV_GGUF_TYPE_U32, 256, 0, NULL);
    TINY_KV("attention.layer_norm_rms_epsilon", QKV_GGUF_TYPE_F32, 0, 1e-5f, NULL);
    if (strcmp(a, "llama")) {
        TINY_KV("attention.key_length", QKV_GGUF_TYPE_U32, (uint32_t)D, 0, NULL);
        TINY_KV("attention.value_length", QKV_GGUF_TYPE_U32, (uint32_t)D, 0, NULL);
    }
    if (gemma2 || gemma3) TINY_KV("attention.sliding_window", QKV_GGUF_TYPE_U32, gemma2 ? 8 : 4, 0, NULL);
    if (gemma2) {
        TINY_KV("attn_logit_softcapping", QKV_GGUF_TYPE_F32, 0, 50.0f, NULL);
        TINY_KV("final_logit_softcapping", QKV_GGUF_TYPE_F32, 0, 30.0f, NULL);
    }
    if (gemma3) TINY_KV("rope.freq_base", QKV_GGUF_TYPE_F32, 0, 1e6f, NULL);
    if (phi3) {
        TINY_KV("rope.dimension_count", QKV_GGUF_TYPE_U32, (uint32_t)D / 2, 0, NULL);
        TINY_KV("rope.scaling.original_context_length", QKV_GGUF_TYPE_U32, 64, 0, NULL);
        TINY_KV("rope.scaling.attn_factor", QKV_GGUF_TYPE_F32, 0, 1.19f, NULL);
        TINY_KV("attention.sliding_window", QKV_GGUF_TYPE_U32, 8, 0, NULL); /* read by llama.cpp, then disabled */
    }
#undef TINY_KV
    kv[nk++] = (gguf_kv){.key = "tokenizer.ggml.model", .type = QKV_GGUF_TYPE_STRING, .s = "llama"};
    kv[nk++] = (gguf_kv){.key = "tokenizer.ggml.bos_token_id", .type = QKV_GGUF_TYPE_U32, .u = 1};
    kv[nk++] = (gguf_kv){.key = "tokenizer.ggml.eos_token_id", .type = QKV_GGUF_TYPE_U32, .u = 2};
    for (int i = 0; i < s->n_kv; i++) {
        int j = 0;
        while (j < nk && strcmp(kv[j].key, s->kv[i].key)) j++;
        if (j == nk && nk < MAX_KV) nk++;
        if (j < nk) kv[j] = s->kv[i];
    }
    /* the tensors: [d0] or [d0, d1] (outermost first), F32 unless s->quant */
    enum { MAX_T = 8 + 16 * 64 };
    struct { char name[48]; uint64_t d0, d1; float fill; } t[MAX_T];
    int nt = 0;
#define TINY_T(nm, x0, x1, v) (snprintf(t[nt].name, sizeof t[nt].name, "%s", nm), t[nt].d0 = (x0), t[nt].d1 = (x1), \
                               t[nt].fill = (v), nt++)
    TINY_T("token_embd.weight", (uint64_t)n_rows, E, 0.0f);
    TINY_T("output_norm.weight", E, 0, 1.0f);
    if (s->rope_freqs) TINY_T("rope_freqs.weight", D / 2, 0, 1.0f);
    if (phi3) {
        TINY_T("rope_factors_long.weight", s->rope_factors_len ? s->rope_factors_len : D / 4, 0, 1.5f);
        TINY_T("rope_factors_short.weight", D / 4, 0, 1.0f);
    }
    for (int l = 0; l < L && nt + 16 <= MAX_T; l++) {
        const struct { const char *suffix; int d0, d1; float fill; int on; } per_layer[] = {
            {"attn_norm.weight", E, 0, 1, !olmo2},   {"attn_q.weight", HQ * D, E, 0, !phi3},
            {"attn_k.weight", HKV * D, E, 0, !phi3}, {"attn_v.weight", HKV * D, E, 0, !phi3},
            {"attn_qkv.weight", (HQ + 2 * HKV) * D, E, 0, phi3},
            {"attn_q.bias", HQ * D, 0, 0.01f, qwen2}, {"attn_k.bias", HKV * D, 0, 0.01f, qwen2},
            {"attn_v.bias", HKV * D, 0, 0.01f, qwen2}, {"attn_q_norm.weight", qn, 0, 1, qk_norm},
            {"attn_k_norm.weight", kn, 0, 1, qk_norm}, {"attn_output.weight", E, HQ * D, 0, 1},
            {"post_attention_norm.weight", E, 0, 1, post_norms}, {"ffn_norm.weight", E, 0, 1, !olmo2},
            {"ffn_gate.weight", F, E, 0, !phi3},     {"ffn_up.weight", phi3 ? 2 * F : F, E, 0, 1},
            {"ffn_down.weight", E, F, 0, 1},         {"post_ffw_norm.weight", E, 0, 1, post_norms},
        };
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            if (!per_layer[i].on) continue;
            char nm[48];
            snprintf(nm, sizeof nm, "blk.%d.%s", l, per_layer[i].suffix);
            const int resized = s->resize && !strcmp(s->resize, nm) && !per_layer[i].d1;
            TINY_T(nm, resized ? s->resize_d0 : (uint64_t)per_layer[i].d0, (uint64_t)per_layer[i].d1,
                   per_layer[i].fill);
        }
    }
#undef TINY_T
    int n_kv_out = 0, n_t_out = 0;
    for (int i = 0; i < nk; i++) n_kv_out += !(s->drop && !strcmp(s->drop, kv[i].key));
    for (int i = 0; i < nt; i++) n_t_out += !(s->drop && !strcmp(s->drop, t[i].name));
    n_kv_out++; /* tokenizer.ggml.tokens */
    if (s->byte_vocab) n_kv_out += 2; /* token_type, scores */
    gguf_put_header(b, (uint64_t)n_t_out, (uint64_t)n_kv_out);
    for (int i = 0; i < nk; i++)
        if (!(s->drop && !strcmp(s->drop, kv[i].key))) gguf_put_kv(b, &kv[i]);
    if (s->byte_vocab) {
        int32_t types[259];
        float scores[259];
        gguf_put_str(b, "tokenizer.ggml.tokens");
        gguf_put_u32(b, QKV_GGUF_TYPE_ARRAY);
        gguf_put_u32(b, QKV_GGUF_TYPE_STRING);
        gguf_put_u64(b, 259);
        for (int i = 0; i < 259; i++) {
            char tok[16];
            if (i < 3) snprintf(tok, sizeof tok, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            else snprintf(tok, sizeof tok, "<0x%02X>", i - 3);
            gguf_put_str(b, tok);
            types[i] = i == 0 ? 2 : i < 3 ? 3 : 6; /* unknown, control, byte */
            scores[i] = 0;
        }
        gguf_put_kv_arr4(b, "tokenizer.ggml.token_type", QKV_GGUF_TYPE_I32, types, 259);
        gguf_put_kv_arr4(b, "tokenizer.ggml.scores", QKV_GGUF_TYPE_F32, scores, 259);
    } else {
        gguf_put_kv_tokens(b, "tokenizer.ggml.tokens", (uint64_t)n_tok);
    }
    /* tensor infos, then the data, each at a multiple of 32 */
    uint64_t off = 0, nbytes[MAX_T];
    for (int i = 0; i < nt; i++) {
        const uint64_t count = t[i].d0 * (t[i].d1 ? t[i].d1 : 1);
        const int quant = s->quant && !strcmp(s->quant, t[i].name);
        const qkv_ggml_type type = quant ? s->quant_type : QKV_GGML_TYPE_F32;
        nbytes[i] = quant ? count / (uint64_t)qkv_ggml_block_elems(type) * qkv_ggml_block_bytes(type) : count * 4;
        if (s->drop && !strcmp(s->drop, t[i].name)) continue;
        uint64_t ne[2] = {t[i].d1 ? t[i].d1 : t[i].d0, t[i].d0}; /* ggml order: innermost first */
        gguf_put_tinfo(b, t[i].name, t[i].d1 ? 2 : 1, ne, type, off);
        off += (nbytes[i] + 31) / 32 * 32;
    }
    gguf_put_pad(b, 32);
    for (int i = 0; i < nt; i++) {
        if (s->drop && !strcmp(s->drop, t[i].name)) continue;
        const uint64_t count = t[i].d0 * (t[i].d1 ? t[i].d1 : 1);
        if (s->quant && !strcmp(s->quant, t[i].name)) {
            /* varied code bytes, every scale 0.01 but the bad block's */
            const size_t bb = qkv_ggml_block_bytes(s->quant_type);
            int sc[2];
            gguf_block_scales(s->quant_type, sc);
            for (uint64_t blk = 0; blk < nbytes[i] / bb; blk++) {
                uint8_t block[256];
                for (size_t j = 0; j < bb; j++) block[j] = (uint8_t)((blk * bb + j) * 37 + 11);
                const uint16_t d = (int64_t)blk == s->bad_block ? s->bad_scale : qkv_f32_to_f16(0.01f);
                for (int k = 0; k < 2; k++)
                    if (sc[k] >= 0) memcpy(block + sc[k], &d, 2);
                gguf_put(b, block, bb);
            }
        } else {
            for (uint64_t k = 0; k < count; k++) {
                float v = t[i].fill ? t[i].fill : (float)((int)((k * 7 + (uint64_t)i * 3) % 11) - 5) / 50.0f;
                if (s->poison && !strcmp(s->poison, t[i].name) && (int64_t)k == s->poison_at) v = s->poison_value;
                gguf_put(b, &v, 4);
            }
        }
        gguf_put_pad(b, 32);
    }
}

/* The tiny Llama of the load-time checks: 2 layers, embedding 64, 4 heads of
 * 16 dims sharing 2 KV heads, ffn 128, rope_freqs, vocabulary "t0", "t1" ...
 * of n_tokens and a token_embd.weight of n_rows rows; poison names one F32
 * tensor whose element 3 becomes poison_value (NULL: none). */
static inline void gguf_put_tiny_llama(gguf_buf *b, int n_tokens, int n_rows, const char *poison,
                                       float poison_value) {
    const gguf_tiny_spec s = {.arch = "llama", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_kv_head = 2,
                              .head_dim = 16, .n_ff = 128, .n_tokens = n_tokens, .n_rows = n_rows,
                              .rope_freqs = 1, .poison = poison, .poison_at = 3, .poison_value = poison_value,
                              .bad_block = -1};
    gguf_put_tiny_model(b, &s);
}

/* Writes b to path; 1 on success. */
static inline int gguf_buf_save(const gguf_buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b->p, 1, b->n, f) == b->n;
    return fclose(f) == 0 && ok;
}

#endif /* QKV_TESTS_GGUF_BUILD_H */
