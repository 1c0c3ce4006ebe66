/*
 * dequant.c — ggml tensor blocks to f32: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q4_K, Q5_K, Q6_K, the types found in common Llama GGUFs. Scalar, readable,
 * one function per type; the byte layouts are described above each one (as in
 * ggml's ggml-common.h). Results match ggml's dequantize_row_* and the gguf
 * Python package bit for bit: each value is computed with the same float
 * operations in the same order (no fused multiply-add).
 *
 * It does not quantise, and has no dot products or matmuls on quantised data
 * (the model's matmuls will get their own kernels, tested against this file).
 */
#include "model/quant.h"
#include "qkv.h"
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
    case QKV_GGML_TYPE_Q4_K:
    case QKV_GGML_TYPE_Q5_K:
    case QKV_GGML_TYPE_Q6_K: return 1;
    default: return 0;
    }
}

qkv_status qkv_dequantize(float *out, const void *src, qkv_ggml_type t, int64_t n,
                          qkv_error *err) {
    if (!qkv_dequantize_supported(t))
        return qkv_fail(err, QKV_ERR_UNSUPPORTED, "tensor type %s (id %d) cannot be dequantised",
                        qkv_ggml_type_name(t), (int)t);
    int64_t bs = qkv_ggml_block_elems(t);
    if (n < 0 || n % bs)
        return qkv_fail(err, QKV_ERR_INVALID,
                        "dequantize: %lld elements is not a whole number of %s blocks (%lld)",
                        (long long)n, qkv_ggml_type_name(t), (long long)bs);
    if (n == 0) return QKV_OK;
    if (!out || !src) return qkv_fail(err, QKV_ERR_INVALID, "dequantize: NULL buffer");
    const uint8_t *x = src;
    int64_t nb = n / bs;
    switch (t) {
    case QKV_GGML_TYPE_F32: dequant_f32(out, x, n); break;
    case QKV_GGML_TYPE_F16: dequant_f16(out, x, n); break;
    case QKV_GGML_TYPE_BF16: dequant_bf16(out, x, n); break;
    case QKV_GGML_TYPE_Q8_0: dequant_q8_0(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_0: dequant_q4_0(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_1: dequant_q4_1(out, x, nb); break;
    case QKV_GGML_TYPE_Q4_K: dequant_q4_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q5_K: dequant_q5_k(out, x, nb); break;
    case QKV_GGML_TYPE_Q6_K: dequant_q6_k(out, x, nb); break;
    default: break;
    }
    return QKV_OK;
}
