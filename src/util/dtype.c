/*
 * dtype.c — f32 <-> bf16 / f16 conversions (round to nearest even, NaN kept,
 * f16 subnormals handled). Scalar and exact; the kernels convert whole tiles
 * with their own vector code and are tested against these.
 */
#include "qkv/base.h"
#include "util/error.h"

#include <string.h>

size_t qkv_dtype_size(qkv_dtype t) { return t == QKV_DTYPE_F32 ? 4 : 2; }

const char *qkv_dtype_name(qkv_dtype t) {
    switch (t) {
    case QKV_DTYPE_F32: return "f32";
    case QKV_DTYPE_BF16: return "bf16";
    case QKV_DTYPE_F16: return "f16";
    }
    return "?";
}

qkv_status qkv_dtype_parse(qkv_dtype *out, const char *name, qkv_error *err) {
    const char *s = name ? name : "";
    if (!strcmp(s, "f32")) *out = QKV_DTYPE_F32;
    else if (!strcmp(s, "bf16")) *out = QKV_DTYPE_BF16;
    else if (!strcmp(s, "f16")) *out = QKV_DTYPE_F16;
    else return util_fail(err, QKV_ERR_INVALID, "dtype must be \"f32\", \"bf16\" or \"f16\", got \"%.64s\"", s);
    return QKV_OK;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t qkv_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                            /* RNE */
    return (uint16_t)(u >> 16);
}

float qkv_bf16_to_f32(uint16_t x) { return bits_f32((uint32_t)x << 16); }

uint16_t qkv_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow (after rounding) -> inf */
    if (a < 0x38800000u) {                                   /* f16 subnormal or zero */
        /* value = a_float; f16 subnormal unit is 2^-24 */
        float f = bits_f32(a) * 16777216.0f;                 /* exact scale by 2^24 */
        uint32_t m = (uint32_t)f;
        float rem = f - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = (a >> 23) - 112; /* rebias 127 -> 15 */
    uint32_t mant = a & 0x7fffffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float qkv_f16_to_f32(uint16_t x) {
    uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
    uint32_t exp = (x >> 10) & 0x1fu;
    uint32_t mant = x & 0x3ffu;
    if (exp == 0) {
        float f = (float)mant * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

void qkv_convert_from_f32(void *dst, qkv_dtype t, const float *src, size_t n) {
    if (t == QKV_DTYPE_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    uint16_t *d = dst;
    if (t == QKV_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) d[i] = qkv_f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) d[i] = qkv_f32_to_f16(src[i]);
}

void qkv_convert_to_f32(float *dst, const void *src, qkv_dtype t, size_t n) {
    if (t == QKV_DTYPE_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    const uint16_t *s = src;
    if (t == QKV_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = qkv_bf16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = qkv_f16_to_f32(s[i]);
}
