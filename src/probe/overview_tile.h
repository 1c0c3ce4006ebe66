/*
 * overview_tile.h — the kernels of the max-pooled overview (overview.c): a
 * tile of attention scores, OV_KEYS keys against OV_ROWS query rows, before
 * the scale, and the keys' conversion from the cache's dtype to f32. The body is overview_impl.h over the SIMD vocabulary
 * (util/simd.h), compiled per ISA (overview_avx512.c, overview_avx2.c,
 * overview_scalar.c) like the attention tiles and the matmuls; the readable
 * twin, overview_tile_reference, is the plain triple loop. The rows lie
 * across the vector lanes (the queries transposed once per chunk of rows,
 * reused by every key tile), each key's element broadcast: no transpose of
 * the keys and no horizontal sum.
 *   s:  [OV_KEYS, OV_ROWS] output, s[j, r] = sum_d qt[d, r] k[j, d]
 *   qt: [D, OV_ROWS] the rows transposed (rows past the caller's are zeros)
 *   k:  [OV_KEYS, D] keys, f32 (keys past the caller's are zeros)
 */
#ifndef QKV_PROBE_OVERVIEW_TILE_H
#define QKV_PROBE_OVERVIEW_TILE_H

#include "qkv/base.h"

#include <stddef.h>

#define OV_ROWS 16
#define OV_KEYS 64

typedef void (*overview_tile_fn)(float *s, const float *qt, const float *k, int D);
/* dst[n] <- src[n] of dtype t as f32, exactly (qkv_convert_to_f32's values, VW at a time) */
typedef void (*overview_keys_fn)(float *dst, const void *src, qkv_dtype t, size_t n);

void overview_tile_reference(float *s, const float *qt, const float *k, int D);
void overview_tile_avx512(float *s, const float *qt, const float *k, int D);
void overview_tile_avx2(float *s, const float *qt, const float *k, int D);
void overview_tile_scalar(float *s, const float *qt, const float *k, int D);
void overview_keys_avx512(float *dst, const void *src, qkv_dtype t, size_t n);
void overview_keys_avx2(float *dst, const void *src, qkv_dtype t, size_t n);
void overview_keys_scalar(float *dst, const void *src, qkv_dtype t, size_t n);

/* One ISA's pair; the process's (util/cpu.h's one choice). */
typedef struct {
    overview_tile_fn tile;
    overview_keys_fn keys;
} overview_isa;
const overview_isa *overview_isa_best(void);

#endif
