/*
 * dequant.c — ggml tensor blocks to f32: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, the types found in common Llama
 * and Gemma GGUFs (the K-quant mixes Q2_K ... Q6_K). Scalar, readable,
 * one function per type; the byte layouts are described above each one (as in
 * ggml's ggml-common.h). Results match ggml's dequantize_row_* and the gguf
 * Python package bit for bit: each value is computed with the same float
 * operations in the same order (no fused multiply-add).
 *
 * Also qkv_dequantize_check: where the first non-finite value of a tensor
 * is, found from the scales alone for the block types.
 *
 * It does not quantise, and has no dot products or matmuls on quantised data
 * (the model's matmuls have their own kernels, tested against this file).
 */
#include "gguf/quant.h"
#include "qkv/gguf.h"
#include "util/error.h"

#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256

/* F32, F16, BF16: one element per "block". */
static void dequant_f32(float *y, const uint8_t *x, int64_t n) { memcpy(y, x, (size_t)n * 4); }

static void dequant_f16(float *y, const uint8_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = f16_at(x + 2 * i);
}

static void dequant_bf16(float *y, const uint8_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qkv_bf16_to_f32((uint16_t)(x[2 * i] | x[2 * i + 1] << 8));
}

/* Q8_0, 32 elements in 34 bytes: f16 d | int8 q[32].  y = d * q. */
static void dequant_q8_0(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 34, y += 32) {
        float d = f16_at(x);
        const int8_t *q = (const int8_t *)(x + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
    }
}

/* Q4_0, 32 elements in 18 bytes: f16 d | u8 qs[16]. Element j < 16 is the low
 * nibble of qs[j], element j + 16 the high nibble.  y = d * (nibble - 8). */
static void dequant_q4_0(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 18, y += 32) {
        float d = f16_at(x);
        const uint8_t *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1, 32 elements in 20 bytes: f16 d | f16 m | u8 qs[16], nibbles as in
 * Q4_0.  y = d * nibble + m. */
static void dequant_q4_1(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 20, y += 32) {
        float d = f16_at(x), m = f16_at(x + 2);
        const uint8_t *qs = x + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0F) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0, 32 elements in 22 bytes: f16 d | u8 qh[4] | u8 qs[16]. The low 4
 * bits of each code as in Q4_0; bit j of the little-endian u32 qh is the
 * fifth bit of element j.  y = d * (q - 16). */
static void dequant_q5_0(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 22, y += 32) {
        float d = f16_at(x);
        uint32_t qh = u32_at(x + 2);
        const uint8_t *qs = x + 6;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

/* Q5_1, 32 elements in 24 bytes: f16 d | f16 m | u8 qh[4] | u8 qs[16], codes
 * as in Q5_0.  y = d * q + m. */
static void dequant_q5_1(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 24, y += 32) {
        float d = f16_at(x), m = f16_at(x + 2);
        uint32_t qh = u32_at(x + 4);
        const uint8_t *qs = x + 8;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

/* Q2_K, 256 elements in 84 bytes: u8 scales[16] | u8 qs[64] | f16 d |
 * f16 dmin. Two halves of 128 elements, each using 32 bytes of qs: element
 * l + 32 k of a half (k = 0..3, l < 32) is (qs[l] >> 2k) & 3. Element i has
 * the 4-bit scale sc = scales[i / 16] & 15 and min m = scales[i / 16] >> 4.
 *   y = (d * sc) * q - (dmin * m) */
static void dequant_q2_k(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 84) {
        const uint8_t *scales = x, *qs = x + 16;
        float d = f16_at(x + 80), dmin = f16_at(x + 82);
        for (int half = 0; half < 2; half++, qs += 32)
            for (int k = 0; k < 4; k++)
                for (int g = 0; g < 2; g++, y += 16, scales++) { /* 16-element scale group */
                    float dl = d * (float)(*scales & 0x0F), ml = dmin * (float)(*scales >> 4);
                    for (int l = 0; l < 16; l++) y[l] = dl * (float)((qs[16 * g + l] >> (2 * k)) & 3) - ml;
                }
    }
}

/* Q3_K, 256 elements in 110 bytes: u8 hmask[32] | u8 qs[64] | u8 scales[12] |
 * f16 d. The low 2 bits of each code as in Q2_K; element i = 32 j + l
 * (l < 32) subtracts 4 unless bit j of hmask[l] is set, so q = -4 .. 3.
 * The sixteen 6-bit scales, one per 16 elements (k3_scale in quant.h), are
 * stored with an offset of 32.  y = (d * (sc - 32)) * q */
static void dequant_q3_k(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 110) {
        const uint8_t *hmask = x, *qs = x + 32, *scales = x + 96;
        float d = f16_at(x + 108);
        for (int j = 0; j < 8; j++, y += 32) { /* 32-element sub-block: two scale groups */
            const uint8_t *q = qs + 32 * (j / 4);
            int shift = 2 * (j % 4);
            const float dl[2] = {d * (float)(k3_scale(2 * j, scales) - 32),
                                 d * (float)(k3_scale(2 * j + 1, scales) - 32)};
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 3) - ((hmask[l] >> j) & 1 ? 0 : 4);
                y[l] = dl[l / 16] * (float)v;
            }
        }
    }
}

/* Q4_K, 256 elements in 144 bytes: f16 d | f16 dmin | u8 scales[12] (eight
 * 6-bit scales and mins, k_scale_min in quant.h) | u8 qs[128]. Sub-blocks of
 * 32 come in pairs per 32 bytes of qs: sub-block 2i takes the low nibbles of
 * qs[32i .. 32i+31], sub-block 2i+1 the high ones.
 *   y = (d * sc) * q - (dmin * m) */
static void dequant_q4_k(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 144) {
        float d = f16_at(x), dmin = f16_at(x + 2);
        const uint8_t *scales = x + 4, *qs = x + 16;
        for (int j = 0; j < 8; j++, y += 32) {
            int sc, m;
            k_scale_min(j, scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) y[l] = dl * (float)((q[l] >> shift) & 0x0F) - ml;
        }
    }
}

/* Q5_K, 256 elements in 176 bytes: f16 d | f16 dmin | u8 scales[12] |
 * u8 qh[32] | u8 qs[128]. The low 4 bits as in Q4_K; bit j of qh[l] is the
 * fifth bit of element l of sub-block j.  y = (d * sc) * q - (dmin * m) */
static void dequant_q5_k(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 176) {
        float d = f16_at(x), dmin = f16_at(x + 2);
        const uint8_t *scales = x + 4, *qh = x + 16, *qs = x + 48;
        for (int j = 0; j < 8; j++, y += 32) {
            int sc, m;
            k_scale_min(j, scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0F) | ((qh[l] >> j) & 1) << 4;
                y[l] = dl * (float)v - ml;
            }
        }
    }
}

/* Q6_K, 256 elements in 210 bytes: u8 ql[128] | u8 qh[64] | int8 scales[16] |
 * f16 d. Two halves of 128 elements, each using 64 bytes of ql and 32 of qh;
 * within a half, element l + 32 k (k = 0..3, l < 32) takes
 *   low 4 bits:  k = 0: ql[l] & 15, 1: ql[l + 32] & 15, 2: ql[l] >> 4, 3: ql[l + 32] >> 4
 *   high 2 bits: (qh[l] >> 2k) & 3
 * and the scale of its 16-element group.  y = (d * scale) * (q - 32) */
static void dequant_q6_k(float *y, const uint8_t *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 210) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *scales = (const int8_t *)(x + 192);
        float d = f16_at(x + 208);
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, scales += 8) {
            for (int k = 0; k < 4; k++) {
                const uint8_t *lo = ql + 32 * (k % 2);
                int shift = 4 * (k / 2);
                for (int l = 0; l < 32; l++) {
                    int q = (((lo[l] >> shift) & 0x0F) | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                    y[32 * k + l] = d * (float)scales[2 * k + l / 16] * (float)q;
                }
            }
        }
    }
}

int qkv_dequantize_supported(qkv_ggml_type t) {
    switch (t) {
    case QKV_GGML_TYPE_F32:
    case QKV_GGML_TYPE_F16:
    case QKV_GGML_TYPE_BF16:
    case QKV_GGML_TYPE_Q8_0:
    case QKV_GGML_TYPE_Q4_0:
    case QKV_GGML_TYPE_Q4_1:
    case QKV_GGML_TYPE_Q5_0:
    case QKV_GGML_TYPE_Q5_1:
    case QKV_GGML_TYPE_Q2_K:
    case QKV_GGML_TYPE_Q3_K:
    case QKV_GGML_TYPE_Q4_K:
    case QKV_GGML_TYPE_Q5_K:
    case QKV_GGML_TYPE_Q6_K: return 1;
    default: return 0;
    }
}

/* The refusals qkv_dequantize and qkv_dequantize_check share. */
static qkv_status check_args(qkv_ggml_type t, int64_t n, qkv_error *err) {
    if (!qkv_dequantize_supported(t))
        return util_fail(err, QKV_ERR_UNSUPPORTED, "tensor type %s (id %d) cannot be dequantised",
                        qkv_ggml_type_name(t), (int)t);
    int64_t bs = qkv_ggml_block_elems(t);
    if (n < 0 || n % bs)
        return util_fail(err, QKV_ERR_INVALID,
                        "dequantize: %lld elements is not a whole number of %s blocks (%lld)",
                        (long long)n, qkv_ggml_type_name(t), (long long)bs);
    return QKV_OK;
}

qkv_status qkv_dequantize(float *out, const void *src, qkv_ggml_type t, int64_t n,
                          qkv_error *err) {
    qkv_status st = check_args(t, n, err);
    if (st || n == 0) return st;
    if (!out || !src) return util_fail(err, QKV_ERR_INVALID, "dequantize: NULL buffer");
    const uint8_t *x = src;
    int64_t nb = n / qkv_ggml_block_elems(t);
    switch (t) {
    case QKV_GGML_TYPE_F32: dequant_f32(out, x, n); break;
    case QKV_GGML_TYPE_F16: dequant_f16(out, x, n); break;
    case QKV_GGML_TYPE_BF16: dequant_bf16(out, x, n); break;
    case QKV_GGML_TYPE_Q8_0: dequant_q8_0(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_0: dequant_q4_0(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_1: dequant_q4_1(out, x, nb); break;
    case QKV_GGML_TYPE_Q5_0: dequant_q5_0(out, x, nb); break;
    case QKV_GGML_TYPE_Q5_1: dequant_q5_1(out, x, nb); break;
    case QKV_GGML_TYPE_Q2_K: dequant_q2_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q3_K: dequant_q3_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_K: dequant_q4_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q5_K: dequant_q5_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q6_K: dequant_q6_k(out, x, nb); break;
    default: break;
    }
    return QKV_OK;
}

/* ------------------------------------------------------------ finiteness */

/* The byte offsets of a block's f16 scales: d, and m or dmin (-1: none). */
static void scale_offsets(qkv_ggml_type t, int off[2]) {
    off[1] = -1;
    switch (t) {
    case QKV_GGML_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case QKV_GGML_TYPE_Q3_K: off[0] = 108; break;
    case QKV_GGML_TYPE_Q6_K: off[0] = 208; break;
    case QKV_GGML_TYPE_Q4_1:
    case QKV_GGML_TYPE_Q5_1:
    case QKV_GGML_TYPE_Q4_K:
    case QKV_GGML_TYPE_Q5_K: off[0] = 0, off[1] = 2; break;
    default: off[0] = 0; break; /* Q8_0, Q4_0, Q5_0 */
    }
}

/* 1 if the f16, bf16 or f32 bits at p are inf or NaN (all exponent bits set). */
static int f16_nonfinite(const uint8_t *p) { return (p[1] & 0x7c) == 0x7c; }
static int bf16_nonfinite(const uint8_t *p) { return (p[1] & 0x7f) == 0x7f && (p[0] & 0x80); }
static int f32_nonfinite(const uint8_t *p) { return (p[3] & 0x7f) == 0x7f && (p[2] & 0x80); }

/* Index of the first non-finite element, or -1. A block's elements are all
 * finite when its scales are (a finite f16 times a code of at most 8 bits,
 * times a 6-bit sub-block scale, plus a finite f16, stays below 2^32), and
 * all non-finite when one is not (every element multiplies or adds each
 * scale of its block, and inf * 0 is NaN). */
static int64_t first_nonfinite(const uint8_t *x, qkv_ggml_type t, int64_t n) {
    if (t == QKV_GGML_TYPE_F32 || t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++)
            if (t == QKV_GGML_TYPE_F32 ? f32_nonfinite(x + 4 * i)
                : t == QKV_GGML_TYPE_F16 ? f16_nonfinite(x + 2 * i) : bf16_nonfinite(x + 2 * i))
                return i;
        return -1;
    }
    const int64_t be = qkv_ggml_block_elems(t);
    const size_t bb = qkv_ggml_block_bytes(t);
    int off[2];
    scale_offsets(t, off);
    for (int64_t b = 0; b < n / be; b++, x += bb)
        if (f16_nonfinite(x + off[0]) || (off[1] >= 0 && f16_nonfinite(x + off[1]))) return b * be;
    return -1;
}

qkv_status qkv_dequantize_check(int64_t *index, float *value, const void *src, qkv_ggml_type t, int64_t n,
                                qkv_error *err) {
    qkv_status st = check_args(t, n, err);
    if (st) return st;
    if (!index || !value || (n && !src)) return util_fail(err, QKV_ERR_INVALID, "dequantize_check: NULL pointer");
    *index = n ? first_nonfinite(src, t, n) : -1;
    *value = 0;
    if (*index >= 0) { /* its value: the block that holds it, decoded */
        const int64_t be = qkv_ggml_block_elems(t);
        float y[QK_K];
        qkv_dequantize(y, (const uint8_t *)src + (size_t)(*index / be) * qkv_ggml_block_bytes(t), t, be, NULL);
        *value = y[*index % be];
    }
    return QKV_OK;
}
