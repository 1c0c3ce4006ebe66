/*
 * softcap.c — the tanh of logit soft-capping (Gemma 2: a score s becomes
 * c tanh(s / c)) in plain scalar C: the readable twin of util/vmath.h's vtanh,
 * the same two branches and the same polynomial (internal.h says why each),
 * with libm's expf where the kernels use their own exp2. The kernels never
 * call it; tests/test_attn_kernels.c holds it and each ISA's vtanh to the
 * same bound against double tanh.
 */
#include "attn/internal.h"

#include <math.h>

float attn_tanhf(float x) {
    const float a = fabsf(x);
    float y;
    if (a < UTIL_TANH_SMALL) { /* tanh a = a + a z P(z), z = a^2 */
        const float z = a * a;
        float p = UTIL_TANH_P4;
        p = p * z + UTIL_TANH_P3;
        p = p * z + UTIL_TANH_P2;
        p = p * z + UTIL_TANH_P1;
        p = p * z + UTIL_TANH_P0;
        y = a + (a * z) * p;
    } else { /* e = exp(-2a) in (0, 0.29]: a NaN falls here and stays NaN */
        const float e = expf(-2.0f * a);
        y = (1.0f - e) / (1.0f + e);
    }
    return copysignf(y, x);
}
