/*
 * vmath.h — elementwise math over simd.h's vectors: 2^t (vexp2) and tanh
 * (vtanh), written once over VW like the kernels that include it (the
 * attention tiles' softmax and soft-capping, attn/tile_impl.h; the feed-forward
 * activations, model/ffn_act.c). Requires VW defined, as util/simd.h.
 */
#ifndef QKV_UTIL_VMATH_H
#define QKV_UTIL_VMATH_H

#include "util/simd.h"
#include "util/tanh_poly.h"

#define LOG2E 1.44269504088896341f

/* 2^f for f in [-1/2, 1/2]: the degree-5 polynomial with constant term 1
 * (so 2^0 = 1 exactly) of least maximum relative error, 1.7e-7 evaluated in
 * float by FMAs (coefficients and error from tools/exp2_poly.py; the
 * degree-6 one it replaced, 7.9e-8, cost one more FMA a score). */
INLINE vf exp2_frac(vf f) {
    vf p = vset1(1.326472731307149e-3f);
    p = p * f + 9.671512991189957e-3f;
    p = p * f + 5.550733581185341e-2f;
    p = p * f + 2.402224242687225e-1f;
    p = p * f + 6.931470036506653e-1f;
    return p * f + 1.0f;
}

#if VW == 16
/* 2^t for t <= 0 with AVX-512's own range reduction: f = t - round(t) in
 * [-1/2, 1/2] (vreduceps), 2^f by exp2_frac, times 2^round(t) by vscalefps.
 * -inf (a masked key) gives f = 0 and 2^-inf = exactly 0; t in (-150, -126)
 * the subnormal values, below that 0; a NaN stays NaN (a NaN score makes its
 * row NaN, qkv/attn.h). 8 instructions. */
INLINE vf vexp2(vf t) {
    __m512 tv;
    memcpy(&tv, &t, sizeof tv);
    __m512 fv = _mm512_reduce_ps(tv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* t - round(t) */
    __m512 n = _mm512_sub_ps(tv, fv);
    vf f;
    memcpy(&f, &fv, sizeof f);
    vf p = exp2_frac(f);
    __m512 pv;
    memcpy(&pv, &p, sizeof pv);
    __m512 y = _mm512_scalef_ps(pv, n);
    vf out;
    memcpy(&out, &y, sizeof out);
    return out;
}
#else
/* 2^t for t <= 0: t is first raised to at least -127 (-inf too; vmax keeps
 * a NaN, its second operand); adding 1.5 * 2^23 + 127 rounds it to an
 * integer n and leaves n + 127 in the low mantissa bits, which shifted up
 * by 23 are the bits of 2^n, or 0 for n = -127 (so 2^t is exactly 0 there,
 * where 2^n is not a normal float, and for -inf); f = t - n in [-1/2, 1/2],
 * 2^f by exp2_frac. A NaN stays NaN (a NaN score makes its row NaN, qkv/attn.h).
 * 11 instructions. */
INLINE vf vexp2(vf t) {
    const vf shifter = vset1(12582912.0f + 127.0f);
    t = vmax(vset1(-127.0f), t);
    vf k = t + shifter;
    vf f = t - (k - shifter);
    vi e;
    memcpy(&e, &k, sizeof e);
    e <<= 23;
    vf scale;
    memcpy(&scale, &e, sizeof scale);
    return exp2_frac(f) * scale;
}
#endif

/* tanh(x) lane by lane by attn_tanhf's method (attn/internal.h, attn/softcap.c:
 * the readable twin), with the kernels' own exp2 for exp(-2|x|): both branches
 * computed, one kept per lane, the sign put back last: 2.1 ulp at most
 * (tools/tanh_poly.py; measured by tests/test_attn_kernels.c). */
INLINE vf vtanh(vf x) {
    vu bits;
    memcpy(&bits, &x, sizeof bits);
    const vu sign = bits & 0x80000000u;
    bits &= 0x7fffffffu;
    vf a;
    memcpy(&a, &bits, sizeof a);
    const vf z = a * a; /* |a| < UTIL_TANH_SMALL: a + a z P(z) */
    vf p = vset1(UTIL_TANH_P4);
    p = p * z + UTIL_TANH_P3;
    p = p * z + UTIL_TANH_P2;
    p = p * z + UTIL_TANH_P1;
    p = p * z + UTIL_TANH_P0;
    const vf small = a + (a * z) * p;
    const vf e = vexp2(a * (-2.0f * LOG2E)); /* else (1 - e) / (1 + e), e = exp(-2a) */
    const vf large = (1.0f - e) / (1.0f + e);
    vf y = vselect(a < UTIL_TANH_SMALL, small, large); /* a NaN takes the large branch: NaN */
    memcpy(&bits, &y, sizeof bits);
    bits |= sign;
    memcpy(&y, &bits, sizeof y);
    return y;
}

#endif
