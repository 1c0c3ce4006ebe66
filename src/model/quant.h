/*
 * quant.h — the two byte readers of ggml's blocks that the reference
 * dequantiser (dequant.c) and the matmul kernels (matmul_impl.h) share, so
 * that both decode a block alike: an f16 at any alignment and the K-quants'
 * packed 6-bit scales. Byte layouts are in dequant.c.
 */
#ifndef QKV_MODEL_QUANT_H
#define QKV_MODEL_QUANT_H

#include "qkv.h"

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

#endif /* QKV_MODEL_QUANT_H */
