/*
 * simd.h — the one vector vocabulary of qkv's kernels: a vector of VW
 * floats (GCC vector extensions) with its integer and narrow companions,
 * loads and stores, and the few primitives where GCC's generic code is poor
 * and the ISA's own instructions are used (max, f16 widening, byte
 * widening). The kernel bodies written once over VW, attn/tile_impl.h and
 * model/matmul_impl.h, include it; they are compiled once per ISA by a .c
 * file that sets the target and VW before including them:
 *   #pragma GCC target("avx512f,...")  #define VW 16  (tile_avx512.c, matmul_avx512.c)
 *   #pragma GCC target("avx2,fma,f16c") #define VW 8  (tile_avx2.c, matmul_avx2.c)
 *   VW 4 (matmul_scalar.c: SSE2 on baseline x86-64) or VW 1 (tile_scalar.c)
 * Everything here is static and short-named: only those kernel files
 * include it (through the two bodies), no other source.
 */
#ifndef QKV_UTIL_SIMD_H
#define QKV_UTIL_SIMD_H

#if !defined(VW) || (VW != 1 && VW != 4 && VW != 8 && VW != 16)
#error "define VW (1, 4, 8 or 16) before including util/simd.h"
#endif

#include <stdint.h>
#include <string.h>
#if VW >= 8 || defined(__F16C__)
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint8_t vb __attribute__((vector_size(VW)));
typedef int8_t vsb __attribute__((vector_size(VW)));

#define INLINE static inline __attribute__((always_inline))
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

/* Pins a value in a vector register: without it GCC folds a load into each
 * multiply-add that uses it as a memory operand (a micro-kernel's V or
 * weight vectors loaded once per use instead of once). */
#if VW > 1 && (defined(__x86_64__) || defined(__i386__))
#define KEEP_IN_REG(x) __asm__("" : "+v"(x))
#else
#define KEEP_IN_REG(x) ((void)0)
#endif

INLINE vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* x - 0 is x for every x (also -0), so this folds to a plain broadcast;
 * 0 + x would not (0 + -0 is +0) and costs a scalar add first. */
INLINE vf vset1(float x) { return x - (vf){0}; }
INLINE vf to_float(vi q) { return __builtin_convertvector(q, vf); }
INLINE vf vselect(vi mask, vf a, vf b) { /* mask ? a : b, lane by lane */
    vi ai, bi;
    memcpy(&ai, &a, sizeof a);
    memcpy(&bi, &b, sizeof b);
    vi r = (ai & mask) | (bi & ~mask);
    vf out;
    memcpy(&out, &r, sizeof out);
    return out;
}
/* The ISA's own float vector, for its intrinsics (vf and it share bits). */
#if VW == 16
typedef __m512 vnative;
#define VNATIVE_MAX _mm512_max_ps
#elif VW == 8
typedef __m256 vnative;
#define VNATIVE_MAX _mm256_max_ps
#endif
INLINE vf vmax(vf a, vf b) {
#if VW >= 8
    vnative x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    x = VNATIVE_MAX(x, y);
    memcpy(&a, &x, sizeof a);
    return a;
#else
    return vselect(a > b, a, b);
#endif
}
INLINE float vhmax(vf a) {
    float m = a[0];
    for (int i = 1; i < VW; i++) m = a[i] > m ? a[i] : m;
    return m;
}
/* Sum of the lanes in lane order, ((a0 + a1) + a2) + ...: the attention
 * kernels' row sums, whose rounding the tests pin. */
INLINE float vhsum_ordered(vf a) {
    float s = 0;
    for (int i = 0; i < VW; i++) s += a[i];
    return s;
}
/* Sum of the lanes, halving: fold the high half onto the low half. */
INLINE float vhsum(vf a) {
#if VW == 16
    typedef float vf8 __attribute__((vector_size(32)));
    vf8 h = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
#elif VW == 8
    vf h = a;
#endif
#if VW >= 8
    typedef float vf4 __attribute__((vector_size(16)));
    vf4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#elif VW == 4
    vf q = a;
#endif
#if VW >= 4
    q += __builtin_shufflevector(q, q, 2, 3, 0, 1);
    return q[0] + q[1];
#else
    return a[0];
#endif
}

/* VW bytes at p widened to 32-bit lanes, sign- (sign = 1, a constant) or
 * zero-extended; load_i8, load_u8. */
INLINE vi load_8(const uint8_t *p, int sign) {
#if VW == 16
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m512i v = sign ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
#elif VW == 8
    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
    __m256i v = sign ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
#else
    vb b;
    memcpy(&b, p, sizeof b);
    vi v = sign ? __builtin_convertvector((vsb)b, vi) : __builtin_convertvector(b, vi);
#endif
    vi out;
    memcpy(&out, &v, sizeof out);
    return out;
}
INLINE vi load_i8(const uint8_t *p) { return load_8(p, 1); }
INLINE vi load_u8(const uint8_t *p) { return load_8(p, 0); }

/* f16 bits to f32 without F16C, exact: move exponent and mantissa into
 * place, rebias by 2^112 (this also normalises subnormals), then restore
 * inf/NaN exponents and the sign. */
INLINE vf f16_to_f32_bits(vu u) {
    vu mag = (u & 0x7fffu) << 13;
    vf f;
    memcpy(&f, &mag, sizeof f);
    f = f * 0x1p112f;
    vu fb;
    memcpy(&fb, &f, sizeof fb);
    fb |= (vu)((u & 0x7c00u) == 0x7c00u) & 0x7f800000u;
    fb |= (u & 0x8000u) << 16;
    memcpy(&f, &fb, sizeof f);
    return f;
}

/* VW little-endian bf16 values at p (any alignment) as f32: the bits
 * shifted up, exact; one zero-extending load and a shift (GCC splits the
 * generic widening of 16 lanes into halves). */
INLINE vf vload_bf16(const void *p) {
#if VW == 16
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
#elif VW == 8
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
#else
    vh h;
    memcpy(&h, p, sizeof h);
    vu f = __builtin_convertvector(h, vu) << 16;
#endif
    vf out;
    memcpy(&out, &f, sizeof out);
    return out;
}
/* VW little-endian f16 values at p (any alignment) as f32, exact: one
 * hardware conversion (F16C), or f16_to_f32_bits. */
INLINE vf vload_f16(const void *p) {
#if VW == 16
    __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif VW == 8
    __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    vh h;
    memcpy(&h, p, sizeof h);
    vf f = f16_to_f32_bits(__builtin_convertvector(h, vu));
#endif
    vf out;
    memcpy(&out, &f, sizeof out);
    return out;
}

#endif /* QKV_UTIL_SIMD_H */
