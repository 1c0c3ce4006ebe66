/*
 * rope.c — rotary position embedding (Su et al., arXiv:2104.09864), computed
 * the way transformers does, in float32: inv_freq[i] = 1 / theta^(2i/D),
 * angle = (float)pos * inv_freq[i], then cos/sin of that float.
 *
 * Pairing: rotate-half (HF) rotates (x[i], x[i + D/2]); interleaved (Meta,
 * ggml) rotates (x[2i], x[2i + 1]). Both use inv_freq[i] for pair i, so a
 * model converted between them by permuting q/k weight rows gives identical
 * scores. Llama-3.1 scaling follows transformers' _compute_llama3_parameters:
 * wavelengths longer than orig/low_freq_factor are divided by factor, shorter
 * than orig/high_freq_factor kept, the band between interpolated smoothly.
 *
 * Partial rotary (n_rot < D, Phi-3): the first n_rot dims of a head rotate as
 * a head of n_rot would (frequencies theta^(-2i/n_rot), pairs within them,
 * transformers' apply_rotary_pos_emb on q[..., :rotary_dim]); the rest pass.
 * attn_factor scales cos and sin (transformers' attention_scaling, ggml's
 * mscale): LongRoPE's sqrt(1 + ln(s) / ln(n_ctx_orig)).
 */
#include "qkv/attn.h"
#include "util/error.h"

#include <math.h>

qkv_rope qkv_rope_default(void) {
    return (qkv_rope){.pairing = QKV_ROPE_HALF, .theta = 10000.0f, .scaling = QKV_ROPE_SCALING_NONE};
}

/* The rotated dims of a head of head_dim: n_rot, or all of them. */
static int rope_dims(const qkv_rope *r, int head_dim) { return r->n_rot ? r->n_rot : head_dim; }

static qkv_status rope_check(const qkv_rope *r, int head_dim, qkv_error *err) {
    if (!r) return util_fail(err, QKV_ERR_INVALID, "rope: parameters are NULL");
    if (head_dim < 2 || head_dim % 2)
        return util_fail(err, QKV_ERR_INVALID, "rope: head_dim %d must be even and >= 2", head_dim);
    if (!(r->theta > 1.0f) || !isfinite(r->theta))
        return util_fail(err, QKV_ERR_INVALID, "rope: theta must be > 1");
    if (r->n_rot && (r->n_rot < 2 || r->n_rot % 2 || r->n_rot > head_dim))
        return util_fail(err, QKV_ERR_INVALID, "rope: n_rot %d must be even and in [2, head_dim %d]", r->n_rot,
                        head_dim);
    if (!(r->attn_factor >= 0) || !isfinite(r->attn_factor))
        return util_fail(err, QKV_ERR_INVALID, "rope: attn_factor %g must be finite and >= 0", (double)r->attn_factor);
    if (r->pairing != QKV_ROPE_HALF && r->pairing != QKV_ROPE_INTERLEAVED)
        return util_fail(err, QKV_ERR_INVALID, "rope: unknown pairing %d", (int)r->pairing);
    if (r->scaling == QKV_ROPE_SCALING_LLAMA3) {
        if (!(r->factor > 0) || !(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) ||
            r->original_max_position < 1)
            return util_fail(err, QKV_ERR_INVALID,
                            "rope: llama3 scaling needs factor > 0, 0 < low < high, orig >= 1");
    } else if (r->scaling != QKV_ROPE_SCALING_NONE) {
        return util_fail(err, QKV_ERR_INVALID, "rope: unknown scaling %d", (int)r->scaling);
    }
    return QKV_OK;
}

static void llama3_scale(float *inv_freq, const qkv_rope *r, int half);

qkv_status qkv_rope_inv_freq(float *inv_freq, const qkv_rope *r, int head_dim, qkv_error *err) {
    qkv_status st = rope_check(r, head_dim, err);
    if (st) return st;
    const int dims = rope_dims(r, head_dim), half = dims / 2;
    for (int i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)dims;
        inv_freq[i] = 1.0f / powf(r->theta, expo);
    }
    if (r->scaling == QKV_ROPE_SCALING_LLAMA3) llama3_scale(inv_freq, r, half);
    if (r->freq_factors)
        for (int i = 0; i < half; i++) inv_freq[i] /= r->freq_factors[i];
    return QKV_OK;
}

/* transformers' _compute_llama3_parameters, in float32. */
static void llama3_scale(float *inv_freq, const qkv_rope *r, int half) {
    const float orig = (float)r->original_max_position;
    const float low_wavelen = orig / r->low_freq_factor;
    const float high_wavelen = orig / r->high_freq_factor;
    const float two_pi = 6.283185307179586f;
    for (int i = 0; i < half; i++) {
        float f = inv_freq[i];
        float wavelen = two_pi / f;
        float scaled = wavelen > low_wavelen ? f / r->factor : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            float smooth = (orig / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
            scaled = (1.0f - smooth) * scaled / r->factor + smooth * scaled;
        }
        inv_freq[i] = scaled;
    }
}

qkv_status qkv_rope_apply(float *x, const int64_t *pos, const qkv_rope *r, int n_head, int n_tok,
                          int head_dim, qkv_error *err) {
    qkv_status st = rope_check(r, head_dim, err);
    if (st) return st;
    if (head_dim > QKV_HEAD_DIM_MAX)
        return util_fail(err, QKV_ERR_INVALID, "rope: head_dim %d > %d", head_dim, QKV_HEAD_DIM_MAX);
    if (n_head < 1 || n_tok < 0) return util_fail(err, QKV_ERR_INVALID, "rope: bad n_head/n_tok");
    float inv_freq[QKV_HEAD_DIM_MAX / 2];
    qkv_rope_inv_freq(inv_freq, r, head_dim, NULL);
    const int half = rope_dims(r, head_dim) / 2;
    const float mscale = r->attn_factor > 0 ? r->attn_factor : 1.0f;
    for (int t = 0; t < n_tok; t++) {
        float c[QKV_HEAD_DIM_MAX / 2], s[QKV_HEAD_DIM_MAX / 2];
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            c[i] = cosf(angle);
            s[i] = sinf(angle);
            if (mscale != 1.0f) { /* transformers: emb.cos() * attention_scaling, in float */
                c[i] *= mscale;
                s[i] *= mscale;
            }
        }
        for (int h = 0; h < n_head; h++) {
            float *xt = x + ((size_t)h * n_tok + t) * head_dim; /* [head_dim], dims >= 2 half pass */
            for (int i = 0; i < half; i++) {
                int a = r->pairing == QKV_ROPE_HALF ? i : 2 * i;
                int b = r->pairing == QKV_ROPE_HALF ? i + half : 2 * i + 1;
                float x0 = xt[a], x1 = xt[b];
                xt[a] = x0 * c[i] - x1 * s[i];
                xt[b] = x1 * c[i] + x0 * s[i];
            }
        }
    }
    return QKV_OK;
}
