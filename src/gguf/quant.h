/*
 * quant.h — the byte readers of ggml's blocks that the reference
 * dequantiser (dequant.c) and the matmul kernels (matmul_impl.h) share, so
 * that both decode a block alike: an f16 and a u32 at any alignment, the
 * K-quants' packed 6-bit scales and Q3_K's. Byte layouts are in dequant.c.
 */
#ifndef QKV_MODEL_QUANT_H
#define QKV_MODEL_QUANT_H

#include "qkv/gguf.h"

#include <stdint.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

/* Little-endian f16 at p (any alignment), exactly (F16C where the file is
 * compiled for it). */
static inline float f16_at(const uint8_t *p) {
#ifdef __F16C__
    return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
#else
    return qkv_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
#endif
}

/* Little-endian u32 at p (any alignment): Q5_0's and Q5_1's fifth bits. */
static inline uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The K-quants' (Q4_K, Q5_K) 12 bytes of scales s hold eight 6-bit scales sc
 * and eight 6-bit mins m, one pair per 32-element sub-block j:
 *   j < 4:  sc = s[j] & 63,  m = s[j + 4] & 63
 *   j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
 *           m  = (s[j + 4] >> 4) | (s[j]     >> 6) << 4   */
static inline void k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q3_K's 12 bytes of scales s hold sixteen 6-bit scales, one per 16-element
 * group g (stored with an offset of 32):
 *   low 4 bits:  g < 8: s[g] & 15,  g >= 8: s[g - 8] >> 4
 *   high 2 bits: (s[8 + g % 4] >> 2 (g / 4)) & 3   */
static inline int k3_scale(int g, const uint8_t *s) {
    int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
    return lo | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4;
}

#endif /* QKV_MODEL_QUANT_H */
