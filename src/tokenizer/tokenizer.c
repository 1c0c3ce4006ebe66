/*
 * tokenizer.c — text to token ids and back, from a GGUF's vocabulary.
 *
 * Two algorithms, chosen by tokenizer.ggml.model:
 *   "gpt2"  byte-level BPE (GPT-2, Llama-3, SmolLM2): the pre-tokenizer cuts
 *           the text (pretokenize.c); each piece starts as one symbol per
 *           byte (the token spelling that byte in GPT-2's byte alphabet) and
 *           the adjacent pair with the best (lowest) merge rank is merged
 *           until none is left — leftmost first among equal ranks, as HF
 *           tokenizers' BPE and llama.cpp do.
 *   "llama" SentencePiece BPE (Llama-2, TinyLlama): spaces become U+2581,
 *           one is prefixed; symbols start as UTF-8 characters and the adjacent
 *           pair whose concatenation is the token of highest score is merged
 *           (leftmost on ties); a symbol that is no token falls back to its
 *           <0xXX> byte tokens. This is sentencepiece's and llama.cpp's rule.
 * Before either, control tokens (when asked) and user-defined tokens are cut
 * out of the text whole: at each position the longest one that starts there,
 * scanning left to right (HF's leftmost-longest added-token match).
 *
 * Deliberately not here: Unigram ("t5") and WordPiece ("bert") vocabularies,
 * normalisers (NFKC, precompiled charsmaps), and the pre-tokenizers of other
 * model families (qkv/tokenizer.h lists the names accepted).
 */
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_ID (-1)

typedef struct {
    uint64_t key;      /* left id << 32 | right id; UINT64_MAX = empty */
    int32_t rank;      /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result;    /* id of the merged token */
} merge_slot;

struct qkv_tokenizer {
    qkv_vocab_type type;
    qkv_pretok pre;
    char pre_name[64];
    int n_vocab;
    int32_t bos, eos, unk;
    int add_bos, add_eos, add_space_prefix, ignore_merges;

    char *arena;           /* every text and piece, each NUL-terminated */
    size_t *text_off;      /* [n_vocab] */
    uint32_t *text_len;    /* [n_vocab] */
    size_t *piece_off;     /* [n_vocab] */
    uint32_t *piece_len;   /* [n_vocab] */
    float *scores;         /* [n_vocab] */
    uint8_t *types;        /* [n_vocab] qkv_token_type */

    int32_t *text_hash;    /* [text_cap] ids by text, open addressing; -1 empty */
    uint64_t text_cap;     /* power of two */
    merge_slot *merges;    /* [merge_cap] (BPE only) */
    uint64_t merge_cap;

    int32_t byte_id[256];  /* BPE: token of byte b in the byte alphabet; SPM: <0xXX>; -1 */

    /* tokens cut out of text whole: ids in buckets by first byte, longest first */
    int32_t *special;      /* [n_special] */
    int n_special;
    int bucket_start[257]; /* special[bucket_start[b] .. bucket_start[b+1]) start with byte b */
};

/* ------------------------------------------------------ byte-level alphabet */

/* GPT-2 spells each byte as one printable code point: the printable Latin-1
 * bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) as themselves, the other
 * 68 (0x00..0x20, 0x7F..0xA0, 0xAD) as U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; /* 0xAD */
}

/* The byte cp spells, or -1 if cp is not in the alphabet. */
static int cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x100 + 32) return (int)(cp - 0x100);
    if (cp >= 0x100 + 33 && cp <= 0x100 + 66) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

/* ------------------------------------------------------------- hash tables */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static const char *tok_text(const qkv_tokenizer *t, int32_t id) { return t->arena + t->text_off[id]; }

int32_t qkv_token_find(const qkv_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return NO_ID;
    uint64_t mask = t->text_cap - 1;
    for (uint64_t h = hash_bytes(text, len) & mask;; h = (h + 1) & mask) {
        int32_t id = t->text_hash[h];
        if (id == NO_ID) return NO_ID;
        if (t->text_len[id] == len && memcmp(tok_text(t, id), text, len) == 0) return id;
    }
}

/* Inserts id under its text; a later id with the same text replaces the
 * earlier one (as a Python dict built from the token list does). */
static void text_insert(qkv_tokenizer *t, int32_t id) {
    uint64_t mask = t->text_cap - 1;
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id];
    for (uint64_t h = hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
        int32_t o = t->text_hash[h];
        if (o == NO_ID || (t->text_len[o] == n && memcmp(tok_text(t, o), s, n) == 0)) {
            t->text_hash[h] = id;
            return;
        }
    }
}

static const merge_slot *merge_find(const qkv_tokenizer *t, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r, mask = t->merge_cap - 1;
    for (uint64_t h = hash_u64(key) & mask;; h = (h + 1) & mask) {
        if (t->merges[h].key == key) return &t->merges[h];
        if (t->merges[h].key == UINT64_MAX) return NULL;
    }
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ------------------------------------------------------------------- load */

/* Element k of an integer array of any width. */
static int64_t arr_int(const void *data, qkv_gguf_type ty, uint64_t k) {
    switch (ty) {
    case QKV_GGUF_TYPE_U8: return ((const uint8_t *)data)[k];
    case QKV_GGUF_TYPE_I8: return ((const int8_t *)data)[k];
    case QKV_GGUF_TYPE_U16: return ((const uint16_t *)data)[k];
    case QKV_GGUF_TYPE_I16: return ((const int16_t *)data)[k];
    case QKV_GGUF_TYPE_U32: return ((const uint32_t *)data)[k];
    case QKV_GGUF_TYPE_I32: return ((const int32_t *)data)[k];
    case QKV_GGUF_TYPE_U64: return (int64_t)((const uint64_t *)data)[k];
    case QKV_GGUF_TYPE_I64: return ((const int64_t *)data)[k];
    default: return 0;
    }
}

static int is_int_type(qkv_gguf_type ty) {
    return ty == QKV_GGUF_TYPE_U8 || ty == QKV_GGUF_TYPE_I8 || ty == QKV_GGUF_TYPE_U16 ||
           ty == QKV_GGUF_TYPE_I16 || ty == QKV_GGUF_TYPE_U32 || ty == QKV_GGUF_TYPE_I32 ||
           ty == QKV_GGUF_TYPE_U64 || ty == QKV_GGUF_TYPE_I64;
}

/* An optional token id key: *out = -1 if absent. */
static qkv_status load_id(int32_t *out, const qkv_gguf *g, const char *key, int n_vocab,
                          qkv_error *err) {
    *out = NO_ID;
    if (qkv_gguf_find_key(g, key) < 0) return QKV_OK;
    int64_t v;
    qkv_status s = qkv_gguf_get_int(&v, g, key, err);
    if (s) return s;
    if (v < 0 || v >= n_vocab)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s = %lld is not a token id (vocabulary of %d)",
                        qkv_gguf_path(g), key, (long long)v, n_vocab);
    *out = (int32_t)v;
    return QKV_OK;
}

/* Every other tokenizer.ggml.*_token_id (padding, separator, cls, mask, eot,
 * fim ...): qkv reads none of them, but an id outside the vocabulary means
 * the file does not describe one tokenizer; refused like bos and eos. */
static qkv_status check_other_ids(const qkv_gguf *g, int n_vocab, qkv_error *err) {
    static const char prefix[] = "tokenizer.ggml.", suffix[] = "_token_id";
    for (int64_t k = 0; k < qkv_gguf_n_kv(g); k++) {
        const char *key = qkv_gguf_key(g, k);
        size_t n = strlen(key);
        if (n < sizeof prefix - 1 + sizeof suffix - 1 || strncmp(key, prefix, sizeof prefix - 1) ||
            strcmp(key + n - (sizeof suffix - 1), suffix))
            continue;
        int32_t id;
        qkv_status s = load_id(&id, g, key, n_vocab, err);
        if (s) return s;
    }
    return QKV_OK;
}

static qkv_status load_flag(int *out, const qkv_gguf *g, const char *key, int dflt,
                            qkv_error *err) {
    *out = dflt;
    if (qkv_gguf_find_key(g, key) < 0) return QKV_OK;
    return qkv_gguf_get_bool(out, g, key, err);
}

static const struct {
    const char *name;
    qkv_pretok pre;
} PRE_NAMES[] = {
    {"default", QKV_PRE_GPT2},   {"gpt2", QKV_PRE_GPT2},       {"smollm", QKV_PRE_SMOLLM},
    {"starcoder", QKV_PRE_SMOLLM}, {"llama-bpe", QKV_PRE_LLAMA3}, {"llama3", QKV_PRE_LLAMA3},
    {"llama-v3", QKV_PRE_LLAMA3}, {"qwen2", QKV_PRE_QWEN2},
};

/* The raw bytes a token stands for, written to out (room for its text). */
static size_t make_piece(char *out, const char *text, size_t n, qkv_vocab_type vt, int type) {
    if (type != QKV_TOKEN_NORMAL && type != QKV_TOKEN_BYTE) {
        memcpy(out, text, n);   /* control, user-defined, unknown: as written */
        return n;
    }
    if (vt == QKV_VOCAB_SPM) {
        unsigned hex;
        char tail;
        if (type == QKV_TOKEN_BYTE && n == 6 && sscanf(text, "<0x%2X%c", &hex, &tail) == 2 &&
            tail == '>') {
            out[0] = (char)hex;
            return 1;
        }
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(text + i, "\xE2\x96\x81", 3)) {
                out[o++] = ' ';
                i += 3;
            } else {
                out[o++] = text[i++];
            }
        }
        return o;
    }
    /* byte level: each alphabet code point is one byte; any other code point
     * (not written by GPT-2 tooling) stays as its UTF-8, as llama.cpp keeps it */
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = tokenizer_utf8_decode(&cp, (const unsigned char *)text + i, n - i);
        int b = cp_to_byte(cp);
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, text + i, (size_t)len);
            o += (size_t)len;
        }
        i += (size_t)len;
    }
    return o;
}

static qkv_status load_vocab(qkv_tokenizer *t, const qkv_gguf *g, qkv_error *err) {
    const char *path = qkv_gguf_path(g);
    int64_t kt = qkv_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (kt < 0) return util_fail(err, QKV_ERR_FORMAT, "%s: no tokenizer.ggml.tokens", path);
    if (qkv_gguf_key_type(g, kt) != QKV_GGUF_TYPE_ARRAY ||
        qkv_gguf_arr_type(g, kt) != QKV_GGUF_TYPE_STRING)
        return util_fail(err, QKV_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not an array of strings",
                        path);
    uint64_t n = qkv_gguf_arr_len(g, kt);
    if (n < 1 || n > QKV_MAX_VOCAB)
        return util_fail(err, QKV_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries, out of range [1, %d]",
                        path, (unsigned long long)n, QKV_MAX_VOCAB);
    t->n_vocab = (int)n;

    /* token types and scores: optional, but of the vocabulary's length */
    const void *types = NULL, *scores = NULL;
    qkv_gguf_type types_ty = QKV_GGUF_TYPE_I32;
    int64_t kty = qkv_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (kty >= 0) {
        types_ty = qkv_gguf_arr_type(g, kty);
        if (!is_int_type(types_ty) || qkv_gguf_arr_len(g, kty) != n)
            return util_fail(err, QKV_ERR_FORMAT,
                            "%s: tokenizer.ggml.token_type is not an integer array of %llu", path,
                            (unsigned long long)n);
        types = qkv_gguf_arr_data(g, kty);
        /* 0 is GGUF's "undefined" (read as normal); anything past BYTE is no type */
        for (uint64_t i = 0; i < n; i++) {
            int64_t ty = arr_int(types, types_ty, i);
            if (ty < 0 || ty > QKV_TOKEN_BYTE)
                return util_fail(err, QKV_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu] = %lld is outside [0, %d]",
                                path, (unsigned long long)i, (long long)ty, QKV_TOKEN_BYTE);
        }
    }
    int64_t ksc = qkv_gguf_find_key(g, "tokenizer.ggml.scores");
    if (ksc >= 0) {
        if (qkv_gguf_arr_type(g, ksc) != QKV_GGUF_TYPE_F32 || qkv_gguf_arr_len(g, ksc) != n)
            return util_fail(err, QKV_ERR_FORMAT,
                            "%s: tokenizer.ggml.scores is not an f32 array of %llu", path,
                            (unsigned long long)n);
        scores = qkv_gguf_arr_data(g, ksc);
    }

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        if (!qkv_gguf_arr_str(g, kt, i, &len))
            return util_fail(err, QKV_ERR_FORMAT, "%s: token %llu unreadable", path,
                            (unsigned long long)i);
        if (len > UINT32_MAX / 2)
            return util_fail(err, QKV_ERR_FORMAT, "%s: token %llu is %zu bytes long", path,
                            (unsigned long long)i, len);
        total += 2 * (len + 1);
    }
    t->arena = malloc(total);
    t->text_off = malloc(n * sizeof *t->text_off);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->piece_off = malloc(n * sizeof *t->piece_off);
    t->piece_len = malloc(n * sizeof *t->piece_len);
    t->scores = calloc(n, sizeof *t->scores);
    t->types = malloc(n);
    t->text_cap = pow2_at_least(2 * n);
    t->text_hash = malloc(t->text_cap * sizeof *t->text_hash);
    if (!t->arena || !t->text_off || !t->text_len || !t->piece_off || !t->piece_len ||
        !t->scores || !t->types || !t->text_hash)
        return util_fail(err, QKV_ERR_NOMEM, "%s: out of memory for %llu tokens", path,
                        (unsigned long long)n);
    memset(t->text_hash, 0xFF, t->text_cap * sizeof *t->text_hash);

    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = qkv_gguf_arr_str(g, kt, i, &len);
        int64_t ty = types ? arr_int(types, types_ty, i) : QKV_TOKEN_NORMAL;
        if (ty == 0) ty = QKV_TOKEN_NORMAL;
        t->types[i] = (uint8_t)ty;
        if (scores) t->scores[i] = ((const float *)scores)[i];
        t->text_off[i] = o;
        t->text_len[i] = (uint32_t)len;
        memcpy(t->arena + o, s, len);
        t->arena[o + len] = 0;
        o += len + 1;
        t->piece_off[i] = o;
        size_t pl = make_piece(t->arena + o, s, len, t->type, (int)ty);
        t->piece_len[i] = (uint32_t)pl;
        t->arena[o + pl] = 0;
        o += pl + 1;
    }
    for (uint64_t i = 0; i < n; i++) text_insert(t, (int32_t)i);
    return QKV_OK;
}

static qkv_status load_merges(qkv_tokenizer *t, const qkv_gguf *g, qkv_error *err) {
    const char *path = qkv_gguf_path(g);
    int64_t km = qkv_gguf_find_key(g, "tokenizer.ggml.merges");
    if (km < 0) return util_fail(err, QKV_ERR_FORMAT, "%s: no tokenizer.ggml.merges", path);
    if (qkv_gguf_key_type(g, km) != QKV_GGUF_TYPE_ARRAY ||
        qkv_gguf_arr_type(g, km) != QKV_GGUF_TYPE_STRING)
        return util_fail(err, QKV_ERR_FORMAT, "%s: tokenizer.ggml.merges is not an array of strings",
                        path);
    uint64_t n = qkv_gguf_arr_len(g, km);
    if (n > INT32_MAX / 2)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %llu merges", path, (unsigned long long)n);
    t->merge_cap = pow2_at_least(2 * n + 1);
    t->merges = malloc(t->merge_cap * sizeof *t->merges);
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!t->merges) return util_fail(err, QKV_ERR_NOMEM, "%s: out of memory for merges", path);
    for (uint64_t h = 0; h < t->merge_cap; h++) t->merges[h].key = UINT64_MAX;

    qkv_status st = QKV_OK;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *m = qkv_gguf_arr_str(g, km, i, &len);
        /* "left right": split at the first space after the first byte */
        const char *sp = m && len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) {
            st = util_fail(err, QKV_ERR_FORMAT, "%s: merge %llu '%s' is not 'left right'", path,
                          (unsigned long long)i, m ? m : "");
            break;
        }
        size_t nl = (size_t)(sp - m), nr = len - nl - 1;
        if (nl + nr + 1 > buf_cap) {
            buf_cap = 2 * (nl + nr + 1);
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                st = util_fail(err, QKV_ERR_NOMEM, "%s: out of memory for merges", path);
                break;
            }
            buf = nb;
        }
        memcpy(buf, m, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t l = qkv_token_find(t, m, nl), r = qkv_token_find(t, sp + 1, nr);
        int32_t res = qkv_token_find(t, buf, nl + nr);
        if (l < 0 || r < 0 || res < 0) {
            st = util_fail(err, QKV_ERR_FORMAT, "%s: merge %llu '%s' joins tokens not in the vocabulary",
                          path, (unsigned long long)i, m);
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r, mask = t->merge_cap - 1;
        for (uint64_t h = hash_u64(key) & mask;; h = (h + 1) & mask) {
            if (t->merges[h].key == key) break; /* a repeated pair keeps its first rank */
            if (t->merges[h].key == UINT64_MAX) {
                t->merges[h] = (merge_slot){key, (int32_t)i, res};
                break;
            }
        }
    }
    free(buf);
    return st;
}

/* Control and unknown tokens, and user-defined ones, in buckets by first byte. */
static qkv_status load_special(qkv_tokenizer *t, qkv_error *err) {
    int count[256] = {0}, n = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        int ty = t->types[i];
        if ((ty == QKV_TOKEN_CONTROL || ty == QKV_TOKEN_UNKNOWN || ty == QKV_TOKEN_USER_DEFINED) &&
            t->text_len[i] > 0) {
            count[(unsigned char)tok_text(t, i)[0]]++;
            n++;
        }
    }
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!t->special) return util_fail(err, QKV_ERR_NOMEM, "tokenizer: out of memory");
    t->n_special = n;
    t->bucket_start[0] = 0;
    for (int b = 0; b < 256; b++) t->bucket_start[b + 1] = t->bucket_start[b] + count[b];
    int fill[256];
    for (int b = 0; b < 256; b++) fill[b] = t->bucket_start[b];
    for (int i = 0; i < t->n_vocab; i++) {
        int ty = t->types[i];
        if ((ty == QKV_TOKEN_CONTROL || ty == QKV_TOKEN_UNKNOWN || ty == QKV_TOKEN_USER_DEFINED) &&
            t->text_len[i] > 0)
            t->special[fill[(unsigned char)tok_text(t, i)[0]]++] = i;
    }
    /* longest first within a bucket (insertion sort: buckets are small) */
    for (int b = 0; b < 256; b++) {
        for (int i = t->bucket_start[b] + 1; i < t->bucket_start[b + 1]; i++) {
            int32_t id = t->special[i];
            int j = i - 1;
            while (j >= t->bucket_start[b] && t->text_len[t->special[j]] < t->text_len[id]) {
                t->special[j + 1] = t->special[j];
                j--;
            }
            t->special[j + 1] = id;
        }
    }
    return QKV_OK;
}

qkv_status qkv_tokenizer_load(qkv_tokenizer **out, const qkv_gguf *g, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "tokenizer_load: out is NULL");
    *out = NULL;
    if (!g) return util_fail(err, QKV_ERR_INVALID, "tokenizer_load: gguf is NULL");
    const char *path = qkv_gguf_path(g);
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return util_fail(err, QKV_ERR_NOMEM, "tokenizer_load: out of memory");
    qkv_status s;

    const char *model;
    if (qkv_gguf_find_key(g, "tokenizer.ggml.model") < 0) {
        s = util_fail(err, QKV_ERR_FORMAT, "%s: no tokenizer (tokenizer.ggml.model is absent)", path);
        goto fail;
    }
    if ((s = qkv_gguf_get_string(&model, NULL, g, "tokenizer.ggml.model", err))) goto fail;
    if (!strcmp(model, "gpt2")) {
        t->type = QKV_VOCAB_BPE;
    } else if (!strcmp(model, "llama")) {
        t->type = QKV_VOCAB_SPM;
    } else {
        s = util_fail(err, QKV_ERR_UNSUPPORTED,
                     "%s: tokenizer.ggml.model '%s' is not supported (gpt2, llama)", path, model);
        goto fail;
    }

    if (t->type == QKV_VOCAB_BPE) {
        const char *pre = "default";
        if (qkv_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 &&
            (s = qkv_gguf_get_string(&pre, NULL, g, "tokenizer.ggml.pre", err)))
            goto fail;
        size_t i, n_names = sizeof PRE_NAMES / sizeof PRE_NAMES[0];
        for (i = 0; i < n_names; i++)
            if (!strcmp(pre, PRE_NAMES[i].name)) break;
        if (i == n_names) {
            s = util_fail(err, QKV_ERR_UNSUPPORTED,
                         "%s: pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported "
                         "(gpt2, smollm, starcoder, llama-bpe, llama3, qwen2)",
                         path, pre);
            goto fail;
        }
        t->pre = PRE_NAMES[i].pre;
        snprintf(t->pre_name, sizeof t->pre_name, "%s", pre);
        t->ignore_merges = t->pre == QKV_PRE_LLAMA3;
    } else {
        t->pre = QKV_PRE_NONE;
    }

    if ((s = load_vocab(t, g, err))) goto fail;
    if (t->type == QKV_VOCAB_BPE && (s = load_merges(t, g, err))) goto fail;
    if ((s = load_special(t, err))) goto fail;
    if ((s = load_id(&t->bos, g, "tokenizer.ggml.bos_token_id", t->n_vocab, err))) goto fail;
    if ((s = load_id(&t->eos, g, "tokenizer.ggml.eos_token_id", t->n_vocab, err))) goto fail;
    if ((s = load_id(&t->unk, g, "tokenizer.ggml.unknown_token_id", t->n_vocab, err))) goto fail;
    if ((s = check_other_ids(g, t->n_vocab, err))) goto fail;
    if (qkv_gguf_find_key(g, "tokenizer.chat_template") >= 0) {
        const char *tmpl;
        if ((s = tokenizer_chat_template(&tmpl, g, err))) goto fail;
    }
    if (t->unk < 0 && t->type == QKV_VOCAB_SPM) t->unk = qkv_token_find(t, "<unk>", 5);

    int dflt_bos = t->type == QKV_VOCAB_SPM || t->pre == QKV_PRE_LLAMA3;
    if ((s = load_flag(&t->add_bos, g, "tokenizer.ggml.add_bos_token", dflt_bos, err))) goto fail;
    if ((s = load_flag(&t->add_eos, g, "tokenizer.ggml.add_eos_token", 0, err))) goto fail;
    if ((s = load_flag(&t->add_space_prefix, g, "tokenizer.ggml.add_space_prefix",
                       t->type == QKV_VOCAB_SPM, err)))
        goto fail;
    if (t->type == QKV_VOCAB_BPE) t->add_space_prefix = 0;
    if (t->add_bos && t->bos < 0) {
        if (qkv_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0) {
            s = util_fail(err, QKV_ERR_FORMAT,
                         "%s: tokenizer.ggml.add_bos_token is set but there is no bos_token_id", path);
            goto fail;
        }
        t->add_bos = 0;
    }
    if (t->add_eos && t->eos < 0) {
        s = util_fail(err, QKV_ERR_FORMAT,
                     "%s: tokenizer.ggml.add_eos_token is set but there is no eos_token_id", path);
        goto fail;
    }

    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        if (t->type == QKV_VOCAB_BPE) {
            n = (size_t)tokenizer_utf8_encode((unsigned char *)buf, byte_to_cp((unsigned)b));
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            n = 6;
        }
        t->byte_id[b] = qkv_token_find(t, buf, n);
    }
    *out = t;
    return QKV_OK;
fail:
    qkv_tokenizer_free(t);
    return s;
}

void qkv_tokenizer_free(qkv_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->text_off);
    free(t->text_len);
    free(t->piece_off);
    free(t->piece_len);
    free(t->scores);
    free(t->types);
    free(t->text_hash);
    free(t->merges);
    free(t->special);
    free(t);
}

/* ---------------------------------------------------------------- getters */

int qkv_tokenizer_n_vocab(const qkv_tokenizer *t) { return t ? t->n_vocab : 0; }
qkv_vocab_type qkv_tokenizer_type(const qkv_tokenizer *t) { return t->type; }
qkv_pretok qkv_tokenizer_pretok(const qkv_tokenizer *t) { return t->pre; }
const char *qkv_tokenizer_pre_name(const qkv_tokenizer *t) { return t->pre_name; }
int32_t qkv_tokenizer_bos(const qkv_tokenizer *t) { return t->bos; }
int32_t qkv_tokenizer_eos(const qkv_tokenizer *t) { return t->eos; }
int qkv_tokenizer_add_bos(const qkv_tokenizer *t) { return t->add_bos; }
int qkv_tokenizer_add_eos(const qkv_tokenizer *t) { return t->add_eos; }

static int valid_id(const qkv_tokenizer *t, int32_t id) { return t && id >= 0 && id < t->n_vocab; }

const char *qkv_token_text(const qkv_tokenizer *t, int32_t id, size_t *len) {
    if (!valid_id(t, id)) return NULL;
    if (len) *len = t->text_len[id];
    return tok_text(t, id);
}

const char *qkv_token_piece(const qkv_tokenizer *t, int32_t id, size_t *len) {
    if (!valid_id(t, id)) return NULL;
    if (len) *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

qkv_token_type qkv_token_type_of(const qkv_tokenizer *t, int32_t id) {
    return valid_id(t, id) ? (qkv_token_type)t->types[id] : (qkv_token_type)0;
}

float qkv_token_score(const qkv_tokenizer *t, int32_t id) {
    return valid_id(t, id) ? t->scores[id] : 0.0f;
}

int qkv_token_ends_turn(const qkv_tokenizer *t, int32_t id) {
    if (!valid_id(t, id)) return 0;
    if (id == t->eos) return 1;
    if (t->types[id] != QKV_TOKEN_CONTROL) return 0;
    static const char *const ends[] = {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>"};
    const char *text = qkv_token_text(t, id, NULL);
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)
        if (!strcmp(text, ends[i])) return 1;
    return 0;
}

/* --------------------------------------------------------------- tokenize */

typedef struct {
    int32_t *v;
    int64_t n, cap;
} idvec;

static int push(idvec *a, int32_t id) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) return -1;
        a->v = nv, a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* A candidate merge of symbols left and right (adjacent when pushed). BPE
 * orders by rank ascending, SPM by score descending; ties go to the leftmost. */
typedef struct {
    float key;         /* rank (BPE) or -score (SPM): smaller pops first */
    int32_t left, right;
    int32_t a, b;      /* BPE: the ids the pair had; SPM: a = merged byte length */
} cand;

typedef struct {
    cand *h;
    int64_t n;
} heap;

static int cand_less(const cand *x, const cand *y) {
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

static void heap_push(heap *q, cand c) {
    int64_t i = q->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!cand_less(&c, &q->h[p])) break;
        q->h[i] = q->h[p];
        i = p;
    }
    q->h[i] = c;
}

static cand heap_pop(heap *q) {
    cand top = q->h[0], last = q->h[--q->n];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        const cand *best = &last;
        if (l < q->n && cand_less(&q->h[l], best)) m = l, best = &q->h[l];
        if (l + 1 < q->n && cand_less(&q->h[l + 1], best)) m = l + 1;
        if (m == i) break;
        q->h[i] = q->h[m];
        i = m;
    }
    if (q->n > 0) q->h[i] = last;
    return top;
}

/* Scratch for one tokenize call, sized by the longest stretch. */
typedef struct {
    int32_t *id, *prev, *next;   /* symbols */
    int64_t *start, *len;        /* SPM: byte span of each symbol in the escaped text */
    heap q;
    char *buf;                   /* byte-level spelling / escaped text */
    size_t *ends;                /* pre-tokenizer pieces */
} scratch;

static void bpe_pair(const qkv_tokenizer *t, scratch *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0 || w->id[l] < 0 || w->id[r] < 0) return;
    const merge_slot *m = merge_find(t, w->id[l], w->id[r]);
    if (m) heap_push(&w->q, (cand){(float)m->rank, l, r, w->id[l], w->id[r]});
}

/* Byte-level BPE of one pre-tokenizer piece. */
static qkv_status bpe_word(const qkv_tokenizer *t, scratch *w, const unsigned char *s, size_t n,
                           idvec *out) {
    if (t->ignore_merges) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            o += (size_t)tokenizer_utf8_encode((unsigned char *)w->buf + o, byte_to_cp(s[i]));
        int32_t id = qkv_token_find(t, w->buf, o);
        if (id >= 0) return push(out, id) ? QKV_ERR_NOMEM : QKV_OK;
    }
    /* rank is stored as float: exact for ranks below 2^24, and a GGUF with more
     * merges than that would still merge in a consistent order */
    int32_t m = (int32_t)n;
    for (int32_t i = 0; i < m; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < m ? i + 1 : -1;
    }
    w->q.n = 0;
    for (int32_t i = 0; i + 1 < m; i++) bpe_pair(t, w, i, i + 1);
    while (w->q.n > 0) {
        cand c = heap_pop(&w->q);
        /* stale if either side has changed since the pair was pushed */
        if (w->id[c.left] != c.a || w->id[c.right] != c.b || w->next[c.left] != c.right) continue;
        const merge_slot *ms = merge_find(t, c.a, c.b);
        w->id[c.left] = ms->result;
        w->id[c.right] = -2; /* merged away */
        w->next[c.left] = w->next[c.right];
        if (w->next[c.right] >= 0) w->prev[w->next[c.right]] = c.left;
        bpe_pair(t, w, w->prev[c.left], c.left);
        bpe_pair(t, w, c.left, w->next[c.left]);
    }
    /* a byte the vocabulary has no token for is dropped, as HF's BPE (no
     * unk_token for GPT-2 vocabularies) and llama.cpp drop it: SmolLM2 has
     * none for 21 bytes, 0x04 and 0xF5..0xFF among them */
    for (int32_t i = 0; i >= 0 && i < m; i = w->next[i])
        if (w->id[i] >= 0 && push(out, w->id[i])) return QKV_ERR_NOMEM;
    return QKV_OK;
}

static void spm_pair(const qkv_tokenizer *t, scratch *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int64_t len = w->len[l] + w->len[r];
    int32_t id = qkv_token_find(t, w->buf + w->start[l], (size_t)len);
    if (id >= 0) heap_push(&w->q, (cand){-t->scores[id], l, r, (int32_t)len, id});
}

/* SentencePiece BPE of an escaped stretch (spaces already U+2581). */
static qkv_status spm_text(const qkv_tokenizer *t, scratch *w, size_t n, idvec *out,
                           qkv_error *err) {
    int32_t m = 0;
    for (size_t b = 0; b < n; m++) {
        uint32_t cp;
        int len = tokenizer_utf8_decode(&cp, (const unsigned char *)w->buf + b, n - b);
        w->start[m] = (int64_t)b;
        w->len[m] = len;
        w->prev[m] = m - 1;
        b += (size_t)len;
        w->next[m] = b < n ? m + 1 : -1;
    }
    w->q.n = 0;
    for (int32_t i = 0; i + 1 < m; i++) spm_pair(t, w, i, i + 1);
    while (w->q.n > 0) {
        cand c = heap_pop(&w->q);
        /* stale if either side is gone or has grown since the pair was pushed */
        if (w->len[c.left] == 0 || w->len[c.right] == 0 || w->len[c.left] + w->len[c.right] != c.a)
            continue;
        w->len[c.left] += w->len[c.right];
        w->len[c.right] = 0;
        w->next[c.left] = w->next[c.right];
        if (w->next[c.right] >= 0) w->prev[w->next[c.right]] = c.left;
        spm_pair(t, w, w->prev[c.left], c.left);
        spm_pair(t, w, c.left, w->next[c.left]);
    }
    for (int32_t i = 0; i >= 0 && i < m; i = w->next[i]) {
        const char *s = w->buf + w->start[i];
        int32_t id = qkv_token_find(t, s, (size_t)w->len[i]);
        if (id >= 0) {
            if (push(out, id)) return QKV_ERR_NOMEM;
            continue;
        }
        for (int64_t k = 0; k < w->len[i]; k++) { /* byte fallback */
            id = t->byte_id[(unsigned char)s[k]];
            if (id < 0) id = t->unk;
            if (id < 0)
                return util_fail(err, QKV_ERR_INVALID,
                                "tokenize: byte 0x%02X has no token and the vocabulary no unknown token",
                                (unsigned char)s[k]);
            if (push(out, id)) return QKV_ERR_NOMEM;
        }
    }
    return QKV_OK;
}

/* The special token starting at text[i] (longest first), or -1. */
static int32_t special_at(const qkv_tokenizer *t, const char *text, size_t len, size_t i,
                          int parse_special) {
    unsigned char b = (unsigned char)text[i];
    for (int k = t->bucket_start[b]; k < t->bucket_start[b + 1]; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->types[id] != QKV_TOKEN_USER_DEFINED) continue;
        size_t n = t->text_len[id];
        if (n <= len - i && !memcmp(text + i, tok_text(t, id), n)) return id;
    }
    return NO_ID;
}

/* The ids of one stretch of plain text between special tokens. */
static qkv_status tokenize_stretch(const qkv_tokenizer *t, scratch *w, const char *s, size_t n,
                                   int prefix_space, idvec *out, qkv_error *err) {
    qkv_status st;
    if (t->type == QKV_VOCAB_SPM) {
        size_t o = 0;
        if (prefix_space) memcpy(w->buf, "\xE2\x96\x81", 3), o = 3;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') memcpy(w->buf + o, "\xE2\x96\x81", 3), o += 3;
            else w->buf[o++] = s[i];
        }
        return spm_text(t, w, o, out, err);
    }
    int64_t np;
    if ((st = qkv_pretokenize(t->pre, s, n, w->ends, (int64_t)n, &np, err))) return st;
    size_t from = 0;
    for (int64_t k = 0; k < np; k++) {
        if ((st = bpe_word(t, w, (const unsigned char *)s + from, w->ends[k] - from, out)))
            return st;
        from = w->ends[k];
    }
    return QKV_OK;
}

int64_t qkv_tokenize_bound(size_t len) { return 6 * (int64_t)len + 8; }

qkv_status qkv_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                        int parse_special, int32_t *out_ids, int64_t max_ids, int64_t *n,
                        qkv_error *err) {
    if (n) *n = 0;
    if (!t || (!text && len) || !n || max_ids < 0 || (max_ids > 0 && !out_ids))
        return util_fail(err, QKV_ERR_INVALID, "tokenize: bad arguments");
    if (len > (size_t)INT32_MAX / 8)
        return util_fail(err, QKV_ERR_TOO_LARGE, "tokenize: %zu bytes of text (at most %d)", len,
                        INT32_MAX / 8);

    /* scratch: SPM escapes a byte into at most 3 (plus the prefix) */
    size_t cap = 3 * len + 8;
    scratch w = {0};
    w.id = malloc(cap * sizeof *w.id);
    w.prev = malloc(cap * sizeof *w.prev);
    w.next = malloc(cap * sizeof *w.next);
    w.start = malloc(cap * sizeof *w.start);
    w.len = malloc(cap * sizeof *w.len);
    w.q.h = malloc(3 * cap * sizeof *w.q.h);
    w.buf = malloc(2 * cap);
    w.ends = malloc(cap * sizeof *w.ends);
    idvec ids = {0};
    qkv_status st = QKV_OK;
    if (!w.id || !w.prev || !w.next || !w.start || !w.len || !w.q.h || !w.buf || !w.ends) {
        st = QKV_ERR_NOMEM;
        goto done;
    }

    if (add_special && t->add_bos && push(&ids, t->bos)) st = QKV_ERR_NOMEM;
    /* cut special tokens out, tokenizing the stretches between them; SPM puts
     * a space before the first stretch and each one after a special token */
    int after_special = 1;
    size_t from = 0;
    for (size_t i = 0; st == QKV_OK && i <= len; i++) {
        int32_t sp = i < len ? special_at(t, text, len, i, parse_special) : NO_ID;
        if (i < len && sp < 0) continue;
        if (i > from) {
            st = tokenize_stretch(t, &w, text + from, i - from, t->add_space_prefix && after_special,
                                  &ids, err);
            after_special = 0;
        }
        if (sp >= 0 && st == QKV_OK) {
            if (push(&ids, sp)) st = QKV_ERR_NOMEM;
            after_special = 1;
            i += t->text_len[sp] - 1;
        }
        from = i + 1;
    }
    if (st == QKV_OK && add_special && t->add_eos && push(&ids, t->eos)) st = QKV_ERR_NOMEM;

done:
    if (st == QKV_ERR_NOMEM) util_fail(err, st, "tokenize: out of memory for %zu bytes", len);
    if (st == QKV_OK) {
        *n = ids.n;
        int64_t k = ids.n < max_ids ? ids.n : max_ids;
        if (k > 0) memcpy(out_ids, ids.v, (size_t)k * sizeof *out_ids);
        if (ids.n > max_ids)
            st = util_fail(err, QKV_ERR_FULL, "tokenize: %lld ids, room for %lld",
                          (long long)ids.n, (long long)max_ids);
    }
    free(ids.v);
    free(w.id), free(w.prev), free(w.next), free(w.start), free(w.len), free(w.q.h);
    free(w.buf), free(w.ends);
    return st;
}

/* ------------------------------------------------------------- detokenize */

qkv_status qkv_detokenize(const qkv_tokenizer *t, const int32_t *ids, int64_t n_ids,
                          int skip_special, char *out, size_t cap, size_t *n_out, qkv_error *err) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || n_ids < 0 || (n_ids > 0 && !ids) || (cap > 0 && !out))
        return util_fail(err, QKV_ERR_INVALID, "detokenize: bad arguments");
    size_t o = 0;
    int first_word = 1;
    for (int64_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        if (!valid_id(t, id))
            return util_fail(err, QKV_ERR_INVALID, "detokenize: id %d at %lld is not in [0, %d)", id,
                            (long long)k, t->n_vocab);
        int ty = t->types[id];
        int special = ty == QKV_TOKEN_CONTROL || ty == QKV_TOKEN_UNKNOWN;
        if (special && skip_special) continue;
        const char *p = t->arena + t->piece_off[id];
        size_t pl = t->piece_len[id];
        if (!special && first_word) {
            /* the space tokenize put in front of the text */
            if (t->add_space_prefix && pl > 0 && p[0] == ' ') p++, pl--;
            first_word = 0;
        }
        for (size_t i = 0; i < pl; i++, o++)
            if (o + 1 < cap) out[o] = p[i];
    }
    *n_out = o;
    if (cap > 0) out[o < cap ? o : cap - 1] = 0;
    if (cap <= o)
        return util_fail(err, QKV_ERR_FULL, "detokenize: %zu bytes, room for %zu", o + 1, cap);
    return QKV_OK;
}
