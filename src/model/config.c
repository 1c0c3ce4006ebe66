/*
 * config.c — a model's hyper-parameters from GGUF metadata
 * (<arch>.block_count, .embedding_length, .attention.head_count ...), the one
 * reader qkv_model_open and `qkv cost --model` share, and each family's
 * rules where the file says nothing, one row of FAMILIES per family
 * (llama.cpp's load_hparams: Gemma's sliding pattern and query scale,
 * Gemma 3's local RoPE base, SmolLM3's layers without RoPE, OLMo 2's
 * norms after the sublayers only, Phi-3's partial rotary and LongRoPE). Reads
 * metadata only: no weight is touched, so a metadata-only file is enough.
 */
#include "qkv/model.h"
#include "util/error.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* <arch>.<suffix> as an int in [1, max] (absent: dflt, or an error if required). */
static qkv_status meta_int(int *out, const qkv_gguf *g, const char *arch, const char *suffix, int required,
                           int dflt, int64_t max, qkv_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (qkv_gguf_find_key(g, key) < 0) {
        if (required) return util_fail(err, QKV_ERR_FORMAT, "%s: missing metadata key %s", qkv_gguf_path(g), key);
        *out = dflt;
        return QKV_OK;
    }
    int64_t v;
    qkv_status st = qkv_gguf_get_int(&v, g, key, err);
    if (st) return st;
    if (v < 1 || v > max)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s = %lld is out of range [1, %lld]", qkv_gguf_path(g), key,
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
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s = %g is outside (%g, %g)", qkv_gguf_path(g), key, (double)*out,
                        lo, hi);
    return QKV_OK;
}

/* What a family adds to the llama block, before the file's keys: one row per
 * family, in llama.cpp's names (its LLM_ARCH_NAMES and load_hparams). */
typedef struct {
    const char *name;         /* general.architecture */
    qkv_rope_pairing pairing; /* interleaved only for llama: its converter permutes q/k */
    int qkv_bias;
    qkv_qk_norm qk_norm;
    int post_norms, no_pre_norms;
    qkv_ffn_act ffn_act;
    int embd_scale_sqrt;      /* 1: the embedding rows are scaled by sqrt(E) */
    int width_scale_layers;   /* a model of this many layers (the 27B) scales the scores by
                                 1/sqrt(E / Hq), the others by 1/sqrt(D); 0: never */
    /* sliding layers: swa_period > 1 reads <arch>.attention.sliding_window
     * (absent: window, or required where window is 0) and its _pattern */
    int swa_period, window;
    float rope_theta_swa;     /* the sliding layers' RoPE base; 0: the global one */
    int final_softcap_key;    /* 1: reads <arch>.final_logit_softcapping */
    int attn_softcap_key;     /* 1: reads <arch>.attn_logit_softcapping */
    float attn_softcap, final_softcap; /* the defaults when the keys are absent */
    int no_rope_interval;     /* every this many layers the last runs without RoPE (llama.cpp's
                                 n_no_rope_layer_step, a constant: no key); 0: none */
    int swa_refused;          /* 1: a file with <arch>.attention.sliding_window is refused (arch olmo2
                                 is also OLMo 3's, whose sliding layers this row does not run) */
    int fused;                /* 1: blk.N.attn_qkv.weight (q, k, v rows) and ffn_up.weight (gate, up
                                 rows) instead of the separate matrices (llama.cpp's phi3) */
    int longrope;             /* 1: reads rope.scaling.original_context_length and .attn_factor;
                                 rope_factors_long/short.weight when the file has them */
} family;

static const family FAMILIES[] = {
    {"llama", QKV_ROPE_INTERLEAVED, .ffn_act = QKV_FFN_SILU, .swa_period = 1},
    {"qwen2", QKV_ROPE_HALF, .qkv_bias = 1, .ffn_act = QKV_FFN_SILU, .swa_period = 1},
    {"qwen3", QKV_ROPE_HALF, .qk_norm = QKV_QK_NORM_HEAD, .ffn_act = QKV_FFN_SILU, .swa_period = 1},
    {"gemma2", QKV_ROPE_HALF, .post_norms = 1, .ffn_act = QKV_FFN_GELU_TANH, .embd_scale_sqrt = 1,
     .width_scale_layers = 46, .swa_period = 2, .window = 4096, .final_softcap_key = 1, .attn_softcap_key = 1,
     .attn_softcap = 50.0f, .final_softcap = 30.0f},
    {"gemma3", QKV_ROPE_HALF, .qk_norm = QKV_QK_NORM_HEAD, .post_norms = 1, .ffn_act = QKV_FFN_GELU_TANH, .embd_scale_sqrt = 1,
     .width_scale_layers = 62, .swa_period = 6, .rope_theta_swa = 10000.0f, .final_softcap_key = 1},
    /* SmolLM3: llama's block and converter (SmolLM3Model is a LlamaModel: q/k
     * permuted), NoPE on layers 3, 7, 11, ... (transformers' no_rope_layers) */
    {"smollm3", QKV_ROPE_INTERLEAVED, .ffn_act = QKV_FFN_SILU, .swa_period = 1, .no_rope_interval = 4},
    /* OLMo 2: x + post_norm(attn(x)), h + post_norm(mlp(h)), no pre-norms;
     * q and k RMS-normed over the whole projection before the head split;
     * NEOX RoPE (Olmo2Model is a TextModel: q/k stored unpermuted) */
    {"olmo2", QKV_ROPE_HALF, .qk_norm = QKV_QK_NORM_FULL, .post_norms = 1, .no_pre_norms = 1,
     .ffn_act = QKV_FFN_SILU, .swa_period = 1, .swa_refused = 1},
    /* Phi-3: fused qkv and gate/up, NEOX RoPE on the first rope.dimension_count
     * dims, LongRoPE. Its converter writes attention.sliding_window, which
     * llama.cpp reads and disables for phi3 (every layer causal over all keys,
     * "Phi SWA is currently disabled"): swa_period 1 never reads it either */
    {"phi3", QKV_ROPE_HALF, .ffn_act = QKV_FFN_SILU, .swa_period = 1, .fused = 1, .longrope = 1},
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

const char *qkv_model_family_name(int i) { return i >= 0 && i < N_FAMILIES ? FAMILIES[i].name : NULL; }

static void family_defaults(qkv_model_config *c, const family *f) {
    c->rope.pairing = f->pairing;
    c->qkv_bias = f->qkv_bias;
    c->qk_norm = f->qk_norm;
    c->post_norms = f->post_norms;
    c->no_pre_norms = f->no_pre_norms;
    c->ffn_act = f->ffn_act;
    c->embd_scale = f->embd_scale_sqrt ? sqrtf((float)c->n_embd) : 1.0f;
    c->swa_period = f->swa_period;
    c->window = f->window;
    c->attn_softcap = f->attn_softcap;
    c->final_softcap = f->final_softcap;
    c->no_rope_interval = f->no_rope_interval;
    c->fused = f->fused;
    const int by_width = f->width_scale_layers && c->n_layer == f->width_scale_layers;
    c->attn_scale = 1.0f / sqrtf((float)(by_width ? c->n_embd / c->n_head : c->head_dim));
}

/* <arch>.<suffix> as a float > 0 (absent: *out unchanged). */
static qkv_status meta_positive(float *out, const qkv_gguf *g, const char *arch, const char *suffix, qkv_error *err) {
    return meta_float(out, g, arch, suffix, *out, 0, 1e30, err);
}

int qkv_model_layer_slides(const qkv_model_config *c, int layer) {
    return c->window > 0 && c->swa_period > 1 && layer % c->swa_period < c->swa_period - 1;
}

int qkv_model_layer_rotates(const qkv_model_config *c, int layer) {
    return c->no_rope_interval < 1 || (layer + 1) % c->no_rope_interval != 0;
}

void qkv_model_layer_attn(qkv_layer_attn *out, const qkv_model_config *c, int layer) {
    const int sliding = qkv_model_layer_slides(c, layer);
    *out = (qkv_layer_attn){.n_head = c->n_head, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                            .scale = c->attn_scale, .window = sliding ? c->window : 0, .softcap = c->attn_softcap,
                            .rope = c->rope, .qk_norm = c->qk_norm, .qkv_bias = c->qkv_bias,
                            .no_rope = !qkv_model_layer_rotates(c, layer)};
    if (sliding) out->rope.theta = c->rope_theta_swa;
}

qkv_status qkv_model_config_read(qkv_model_config *c, const qkv_gguf *g, qkv_error *err) {
    if (!c || !g) return util_fail(err, QKV_ERR_INVALID, "model config: NULL argument");
    memset(c, 0, sizeof *c);
    const char *arch;
    qkv_status st = qkv_gguf_get_string(&arch, NULL, g, "general.architecture", err);
    if (st) return st;
    const family *fam = NULL;
    for (int f = 0; f < N_FAMILIES; f++)
        if (!strcmp(arch, FAMILIES[f].name)) fam = &FAMILIES[f];
    if (!fam) {
        char names[128] = "";
        for (int f = 0; f < N_FAMILIES; f++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", f ? ", " : "", FAMILIES[f].name);
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: general.architecture '%.40s' is not supported (%s)",
                        qkv_gguf_path(g), arch, names);
    }
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
        return util_fail(err, QKV_ERR_FORMAT, "%s: %d heads x head_dim %d exceeds %d", qkv_gguf_path(g), c->n_head,
                        c->head_dim, QKV_MODEL_MAX_EMBD);
    if (c->n_head % c->n_kv_head)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %d heads is not a multiple of %d KV heads", qkv_gguf_path(g),
                        c->n_head, c->n_kv_head);
    if (c->head_dim < QKV_HEAD_DIM_MIN || c->head_dim > QKV_HEAD_DIM_MAX || c->head_dim % 2)
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: head_dim %d is not supported", qkv_gguf_path(g), c->head_dim);
    int value_dim;
    if ((st = meta_int(&value_dim, g, arch, "attention.value_length", 0, c->head_dim, QKV_HEAD_DIM_MAX, err))) return st;
    if (value_dim != c->head_dim)
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: %s.attention.value_length %d differs from key_length %d",
                        qkv_gguf_path(g), arch, value_dim, c->head_dim);
    int rope_dims;
    if ((st = meta_int(&rope_dims, g, arch, "rope.dimension_count", 0, c->head_dim, QKV_HEAD_DIM_MAX, err))) return st;
    /* partial rotary (Phi-3): the first rope_dims of each head, in pairs */
    if (rope_dims > c->head_dim || rope_dims % 2)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s.rope.dimension_count %d must be even and at most head_dim %d",
                        qkv_gguf_path(g), arch, rope_dims, c->head_dim);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (qkv_gguf_find_key(g, key) >= 0) {
        const char *type;
        if ((st = qkv_gguf_get_string(&type, NULL, g, key, err))) return st;
        if (strcmp(type, "none"))
            return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: rope scaling '%s' is not supported", qkv_gguf_path(g), type);
    }
    c->rope = qkv_rope_default();
    c->rope.n_rot = rope_dims < c->head_dim ? rope_dims : 0;
    family_defaults(c, fam);
    if ((st = meta_float(&c->rope.theta, g, arch, "rope.freq_base", 10000.0f, 1, 1e30, err))) return st;
    c->rope_theta_swa = fam->rope_theta_swa > 0 ? fam->rope_theta_swa : c->rope.theta;
    if ((st = meta_float(&c->rope_theta_swa, g, arch, "rope.freq_base_swa", c->rope_theta_swa, 1, 1e30, err)) ||
        (st = meta_positive(&c->attn_scale, g, arch, "attention.scale", err)) ||
        (fam->final_softcap_key && (st = meta_positive(&c->final_softcap, g, arch, "final_logit_softcapping", err))) ||
        (fam->attn_softcap_key && (st = meta_positive(&c->attn_softcap, g, arch, "attn_logit_softcapping", err))))
        return st;
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    if (fam->swa_refused && qkv_gguf_find_key(g, key) >= 0)
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: %s (sliding layers, as OLMo 3 has) is not supported in %s",
                        qkv_gguf_path(g), key, arch);
    if (fam->longrope) {
        /* LongRoPE: a context beyond original_context_length takes the long
         * factors (qkv_model_open); cos and sin are scaled by attn_factor,
         * else by the converter's and transformers' default
         * sqrt(1 + ln(s) / ln(orig)), s = context_length / orig (1 for s <= 1) */
        if ((st = meta_int(&c->rope_ctx_orig, g, arch, "rope.scaling.original_context_length", 0, c->n_ctx_train,
                           QKV_MODEL_MAX_CTX, err)))
            return st;
        const double s = (double)c->n_ctx_train / c->rope_ctx_orig;
        const float dflt = s > 1 && c->rope_ctx_orig > 1 ? (float)sqrt(1 + log(s) / log(c->rope_ctx_orig)) : 1.0f;
        if ((st = meta_float(&c->rope.attn_factor, g, arch, "rope.scaling.attn_factor", dflt, 0, 1e30, err))) return st;
    }
    if (fam->swa_period > 1) {
        /* as llama.cpp: a family's window has a default (gemma2: 4096) or
         * must be said (gemma3); a window of 0 (which llama.cpp would take as
         * masking every key) and a soft-cap <= 0 (which it divides by) are
         * refused by the ranges */
        if ((st = meta_int(&c->window, g, arch, "attention.sliding_window", !fam->window, c->window,
                           QKV_MODEL_MAX_CTX, err)) ||
            (st = meta_int(&c->swa_period, g, arch, "attention.sliding_window_pattern", 0, c->swa_period,
                           QKV_MODEL_MAX_LAYERS, err)))
            return st;
        /* of each swa_period layers the last is global (llama.cpp's set_swa_pattern):
         * the family's window needs a sliding layer and at least one global one */
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
        const int said = qkv_gguf_find_key(g, key) >= 0;
        if (c->swa_period < 2)
            return util_fail(err, QKV_ERR_FORMAT, "%s: %s %d names no sliding layer for the window of %d",
                            qkv_gguf_path(g), key, c->swa_period, c->window);
        if (c->swa_period > c->n_layer && said)
            return util_fail(err, QKV_ERR_FORMAT, "%s: %s %d names no global layer among %d layers", qkv_gguf_path(g),
                            key, c->swa_period, c->n_layer);
        if (c->swa_period > c->n_layer)
            return util_fail(err, QKV_ERR_FORMAT,
                            "%s: %s's sliding pattern %d (there is no %s) names no global layer among %d layers",
                            qkv_gguf_path(g), arch, c->swa_period, key, c->n_layer);
    }
    /* the vocabulary: rows of the embedding, else the tokenizer's list (a
     * metadata-only file); qkv_model_open checks the weights against it */
    int64_t tid = qkv_gguf_find_tensor(g, "token_embd.weight"), tok = qkv_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t n_vocab = -1; /* -1: unknown */
    if (tid >= 0) {
        const qkv_gguf_tensor *te = qkv_gguf_tensor_info(g, tid);
        if (te->n_dims != 2 || te->shape[1] != c->n_embd)
            return util_fail(err, QKV_ERR_FORMAT, "%s: token_embd.weight is not [vocab, %d]", qkv_gguf_path(g),
                            c->n_embd);
        n_vocab = te->shape[0];
        /* the tokenizer's ids index these rows: a shorter list would let the
         * model produce ids the tokenizer cannot spell */
        if (tok >= 0 && qkv_gguf_arr_len(g, tok) != (uint64_t)n_vocab)
            return util_fail(err, QKV_ERR_FORMAT,
                            "%s: tokenizer.ggml.tokens has %llu entries, token_embd.weight has %lld rows: they must agree",
                            qkv_gguf_path(g), (unsigned long long)qkv_gguf_arr_len(g, tok), (long long)n_vocab);
    } else if (tok >= 0) {
        n_vocab = (int64_t)(qkv_gguf_arr_len(g, tok) > INT64_MAX ? INT64_MAX : qkv_gguf_arr_len(g, tok));
    } else {
        return util_fail(err, QKV_ERR_FORMAT, "%s: no token_embd.weight and no tokenizer.ggml.tokens: vocabulary size unknown",
                        qkv_gguf_path(g));
    }
    if (n_vocab < 1 || n_vocab > QKV_MAX_VOCAB)
        return util_fail(err, QKV_ERR_FORMAT, "%s: a vocabulary of %lld tokens is out of range [1, %d]", qkv_gguf_path(g),
                        (long long)n_vocab, QKV_MAX_VOCAB);
    c->n_vocab = (int)n_vocab;
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    if (qkv_gguf_find_key(g, key) >= 0) {
        int64_t v;
        if ((st = qkv_gguf_get_int(&v, g, key, err))) return st;
        if (v != c->n_vocab)
            return util_fail(err, QKV_ERR_FORMAT, "%s: %s = %lld, the vocabulary has %d tokens: they must agree",
                            qkv_gguf_path(g), key, (long long)v, c->n_vocab);
    }
    c->tied_embeddings = qkv_gguf_find_tensor(g, "output.weight") < 0;
    return QKV_OK;
}
