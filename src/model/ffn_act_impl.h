/*
 * ffn_act_impl.h — the feed-forward activations over a vector of VW floats
 * (util/vmath.h's vtanh and vexp2), compiled per ISA by ffn_act_avx512.c,
 * ffn_act_avx2.c and ffn_act_scalar.c like the matmul kernels; ffn_act.c
 * has the readable twin, the choice of ISA and the threads.
 * Requires VW, SUFFIX defined by the including file.
 */
#include "model/internal.h"
#include "util/vmath.h"

#include <string.h>

/* gelu_tanh lane by lane, the same operations in the same order, vtanh for tanhf */
INLINE vf vgelu_tanh(vf x) {
    const vf u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + vtanh(u));
}

/* g / (1 + exp(-g)) lane by lane, from e = exp(-|g|) in (0, 1] (vexp2 takes
 * t <= 0): 1 / (1 + e) for g >= 0, e / (1 + e) below, so exp never
 * overflows; a NaN stays NaN. */
INLINE vf vsilu(vf g) {
    vu bits;
    memcpy(&bits, &g, sizeof bits);
    bits &= 0x7fffffffu;
    vf a;
    memcpy(&a, &bits, sizeof a);
    const vf e = vexp2(a * -LOG2E), r = 1.0f / (1.0f + e);
    return g * vselect(g >= 0.0f, r, e * r);
}

/* elements [i0, i1) in whole vectors, the last partial vector through a
 * zero-padded copy (the same lanes' arithmetic); act a literal in each call */
INLINE void act_range(float *gate, const float *up, size_t i0, size_t i1, const qkv_ffn_act act) {
    size_t i = i0;
    for (; i + VW <= i1; i += VW) {
        const vf g = vload(gate + i);
        vstore(gate + i, (act == QKV_FFN_GELU_TANH ? vgelu_tanh(g) : vsilu(g)) * vload(up + i));
    }
    if (i < i1) {
        float g[VW] = {0}, u[VW] = {0};
        memcpy(g, gate + i, (i1 - i) * sizeof(float));
        memcpy(u, up + i, (i1 - i) * sizeof(float));
        const vf gv = vload(g);
        vstore(g, (act == QKV_FFN_GELU_TANH ? vgelu_tanh(gv) : vsilu(gv)) * vload(u));
        memcpy(gate + i, g, (i1 - i) * sizeof(float));
    }
}

void CAT(model_ffn_act_range_, SUFFIX)(float *gate, const float *up, size_t count, qkv_ffn_act act) {
    if (act == QKV_FFN_GELU_TANH) act_range(gate, up, 0, count, QKV_FFN_GELU_TANH);
    else act_range(gate, up, 0, count, QKV_FFN_SILU);
}
