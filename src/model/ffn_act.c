/*
 * ffn_act.c — the feed-forward gate's activation times up, gate[i] <-
 * act(gate[i]) * up[i] over the [n, F] batch: GELU-tanh (Gemma) or SiLU
 * (the rest), vectorised with util/vmath.h's vtanh and vexp2 over plain C
 * vectors of 4 floats (SSE2 on baseline x86-64: far below the matmuls'
 * time, so one build for every CPU) and split across threads in chunks.
 * model_ffn_act_reference is the readable twin, libm's tanhf and expf in
 * the formulas transformers computes; tests/test_ffn_act.c holds the two
 * together (the bound is at model_ffn_act in internal.h).
 */
#define VW 4
#include "model/internal.h"
#include "util/parallel.h"
#include "util/vmath.h"

#include <math.h>
#include <string.h>

#define ACT_CHUNK 8192 /* elements per parallel item: ~10 us, whole vectors */

/* gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
static float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

void model_ffn_act_reference(float *gate, const float *up, size_t count, qkv_ffn_act act) {
    for (size_t i = 0; i < count; i++) {
        const float g = gate[i];
        gate[i] = (act == QKV_FFN_GELU_TANH ? gelu_tanh(g) : g / (1.0f + expf(-g))) * up[i];
    }
}

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

typedef struct {
    float *gate;
    const float *up;
    size_t count;
    qkv_ffn_act act;
} act_call;

/* elements [i0, i1) in whole vectors, the last partial vector through a
 * zero-padded copy (the same lanes' arithmetic); act a literal in each call */
INLINE void act_range(float *gate, const float *up, size_t i0, size_t i1, const qkv_ffn_act act) {
    for (size_t i = i0; i < i1; i += VW) {
        const size_t k = i1 - i < VW ? i1 - i : VW;
        vf g = vset1(0), u = vset1(0);
        memcpy(&g, gate + i, k * sizeof(float));
        memcpy(&u, up + i, k * sizeof(float));
        const vf y = (act == QKV_FFN_GELU_TANH ? vgelu_tanh(g) : vsilu(g)) * u;
        memcpy(gate + i, &y, k * sizeof(float));
    }
}

/* chunk b: elements [b ACT_CHUNK, (b + 1) ACT_CHUNK) */
static void act_chunk(void *ctx, int64_t b, int thread) {
    (void)thread;
    const act_call *c = ctx;
    const size_t i0 = (size_t)b * ACT_CHUNK, i1 = c->count - i0 < ACT_CHUNK ? c->count : i0 + ACT_CHUNK;
    if (c->act == QKV_FFN_GELU_TANH) act_range(c->gate, c->up, i0, i1, QKV_FFN_GELU_TANH);
    else act_range(c->gate, c->up, i0, i1, QKV_FFN_SILU);
}

void model_ffn_act(float *gate, const float *up, size_t count, qkv_ffn_act act, int n_threads) {
    act_call c = {.gate = gate, .up = up, .count = count, .act = act};
    util_parallel_for((int64_t)((count + ACT_CHUNK - 1) / ACT_CHUNK), n_threads, 0, act_chunk, &c);
}
