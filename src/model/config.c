/*
 * config.c — a Llama model's hyper-parameters from GGUF metadata
 * (<arch>.block_count, .embedding_length, .attention.head_count ...), the one
 * reader qkv_model_open and `qkv cost --model` share. Reads metadata only:
 * no weight is touched, so a metadata-only file is enough.
 */
#include "qkv.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* <arch>.<suffix> as an int in [1, max] (absent: dflt, or an error if required). */
static qkv_status meta_int(int *out, const qkv_gguf *g, const char *arch, const char *suffix, int required,
                           int dflt, int64_t max, qkv_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (qkv_gguf_find_key(g, key) < 0) {
        if (required) return qkv_fail(err, QKV_ERR_FORMAT, "%s: missing metadata key %s", qkv_gguf_path(g), key);
        *out = dflt;
        return QKV_OK;
    }
    int64_t v;
    qkv_status st = qkv_gguf_get_int(&v, g, key, err);
    if (st) return st;
    if (v < 1 || v > max)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: %s = %lld is out of range [1, %lld]", qkv_gguf_path(g), key,
                        (long long)v, (long long)max);
    *out = (int)v;
    return QKV_OK;
}

/* <arch>.<suffix> as a finite float in (lo, hi) (absent: dflt). */
static qkv_status meta_float(float *out, const qkv_gguf *g, const char *arch, const char *suffix, float dflt,
                             double lo, double hi, qkv_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (qkv_gguf_find_key(g, key) < 0) {
        *out = dflt;
        return QKV_OK;
    }
    qkv_status st = qkv_gguf_get_f32(out, g, key, err);
    if (st) return st;
    if (!(*out > lo && *out < hi))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: %s = %g is outside (%g, %g)", qkv_gguf_path(g), key, (double)*out,
                        lo, hi);
    return QKV_OK;
}

qkv_status qkv_model_config_read(qkv_model_config *c, const qkv_gguf *g, qkv_error *err) {
    if (!c || !g) return qkv_fail(err, QKV_ERR_INVALID, "model config: NULL argument");
    memset(c, 0, sizeof *c);
    const char *arch;
    qkv_status st = qkv_gguf_get_string(&arch, NULL, g, "general.architecture", err);
    if (st) return st;
    if (strcmp(arch, "llama"))
        return qkv_fail(err, QKV_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (only llama)",
                        qkv_gguf_path(g), arch);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    if ((st = meta_int(&c->n_layer, g, arch, "block_count", 1, 0, QKV_MODEL_MAX_LAYERS, err)) ||
        (st = meta_int(&c->n_embd, g, arch, "embedding_length", 1, 0, QKV_MODEL_MAX_EMBD, err)) ||
        (st = meta_int(&c->n_head, g, arch, "attention.head_count", 1, 0, QKV_MODEL_MAX_HEADS, err)) ||
        (st = meta_int(&c->n_kv_head, g, arch, "attention.head_count_kv", 0, c->n_head, c->n_head, err)) ||
        (st = meta_int(&c->n_ff, g, arch, "feed_forward_length", 1, 0, QKV_MODEL_MAX_FF, err)) ||
        (st = meta_int(&c->n_ctx_train, g, arch, "context_length", 0, 2048, QKV_MODEL_MAX_CTX, err)) ||
        (st = meta_int(&c->head_dim, g, arch, "attention.key_length", 0, c->n_embd / c->n_head, QKV_HEAD_DIM_MAX,
                       err)) ||
        (st = meta_float(&c->norm_eps, g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, 0, 1, err)))
        return st;
    /* every product of sizes the forward pass allocates stays far below 2^31 per dimension */
    if ((int64_t)c->n_head * c->head_dim > QKV_MODEL_MAX_EMBD)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: %d heads x head_dim %d exceeds %d", qkv_gguf_path(g), c->n_head,
                        c->head_dim, QKV_MODEL_MAX_EMBD);
    if (c->n_head % c->n_kv_head)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: %d heads is not a multiple of %d KV heads", qkv_gguf_path(g),
                        c->n_head, c->n_kv_head);
    if (c->head_dim < QKV_HEAD_DIM_MIN || c->head_dim > QKV_HEAD_DIM_MAX || c->head_dim % 2)
        return qkv_fail(err, QKV_ERR_UNSUPPORTED, "%s: head_dim %d is not supported", qkv_gguf_path(g), c->head_dim);
    int rope_dims;
    if ((st = meta_int(&rope_dims, g, arch, "rope.dimension_count", 0, c->head_dim, QKV_HEAD_DIM_MAX, err))) return st;
    if (rope_dims != c->head_dim)
        return qkv_fail(err, QKV_ERR_UNSUPPORTED, "%s: partial RoPE (%d of %d dims) is not supported",
                        qkv_gguf_path(g), rope_dims, c->head_dim);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (qkv_gguf_find_key(g, key) >= 0) {
        const char *type;
        if ((st = qkv_gguf_get_string(&type, NULL, g, key, err))) return st;
        if (strcmp(type, "none"))
            return qkv_fail(err, QKV_ERR_UNSUPPORTED, "%s: rope scaling '%s' is not supported", qkv_gguf_path(g), type);
    }
    c->rope = qkv_rope_default();
    c->rope.pairing = QKV_ROPE_INTERLEAVED;
    if ((st = meta_float(&c->rope.theta, g, arch, "rope.freq_base", 10000.0f, 1, 1e30, err))) return st;
    /* the vocabulary: rows of the embedding, else the tokenizer's list (a
     * metadata-only file); qkv_model_open checks the weights against it */
    int64_t tid = qkv_gguf_find_tensor(g, "token_embd.weight"), tok = qkv_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t n_vocab = -1; /* -1: unknown */
    if (tid >= 0) {
        const qkv_gguf_tensor *te = qkv_gguf_tensor_info(g, tid);
        if (te->n_dims != 2 || te->shape[1] != c->n_embd)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: token_embd.weight is not [vocab, %d]", qkv_gguf_path(g),
                            c->n_embd);
        n_vocab = te->shape[0];
        /* the tokenizer's ids index these rows: a shorter list would let the
         * model produce ids the tokenizer cannot spell */
        if (tok >= 0 && qkv_gguf_arr_len(g, tok) != (uint64_t)n_vocab)
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: tokenizer.ggml.tokens has %llu entries, token_embd.weight has %lld rows: they must agree",
                            qkv_gguf_path(g), (unsigned long long)qkv_gguf_arr_len(g, tok), (long long)n_vocab);
    } else if (tok >= 0) {
        n_vocab = (int64_t)(qkv_gguf_arr_len(g, tok) > INT64_MAX ? INT64_MAX : qkv_gguf_arr_len(g, tok));
    } else {
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: no token_embd.weight and no tokenizer.ggml.tokens: vocabulary size unknown",
                        qkv_gguf_path(g));
    }
    if (n_vocab < 1 || n_vocab > QKV_MODEL_MAX_VOCAB)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: a vocabulary of %lld tokens is out of range [1, %d]", qkv_gguf_path(g),
                        (long long)n_vocab, QKV_MODEL_MAX_VOCAB);
    c->n_vocab = (int)n_vocab;
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    if (qkv_gguf_find_key(g, key) >= 0) {
        int64_t v;
        if ((st = qkv_gguf_get_int(&v, g, key, err))) return st;
        if (v != c->n_vocab)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: %s = %lld, the vocabulary has %d tokens: they must agree",
                            qkv_gguf_path(g), key, (long long)v, c->n_vocab);
    }
    c->tied_embeddings = qkv_gguf_find_tensor(g, "output.weight") < 0;
    return QKV_OK;
}
