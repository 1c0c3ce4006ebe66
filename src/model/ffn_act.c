/*
 * ffn_act.c — the feed-forward gate's activation times up, gate[i] <-
 * act(gate[i]) * up[i] over the [n, F] batch: GELU-tanh (Gemma) or SiLU
 * (the rest), by the best ISA's vector kernel (ffn_act_impl.h, picked at
 * run time as the matmul's are), split across threads in chunks.
 * model_ffn_act_reference is the readable twin, libm's tanhf and expf in
 * the formulas transformers computes; tests/test_ffn_act.c holds every ISA
 * to it (the bound is at model_ffn_act in internal.h).
 */
#include "model/internal.h"
#include "util/cpu.h"
#include "util/parallel.h"

#include <math.h>

#define ACT_CHUNK 8192 /* elements per parallel item: whole vectors of every ISA */

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

typedef void (*act_range_fn)(float *gate, const float *up, size_t count, qkv_ffn_act act);

/* indexed by cpu_isa (util/cpu.h): the same choice as the matmul's */
static const act_range_fn act_isas[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = model_ffn_act_range_scalar,
    [CPU_ISA_AVX2] = model_ffn_act_range_avx2,
    [CPU_ISA_AVX512] = model_ffn_act_range_avx512,
};

typedef struct {
    float *gate;
    const float *up;
    size_t count;
    qkv_ffn_act act;
    act_range_fn range;
} act_call;

/* chunk b: elements [b ACT_CHUNK, (b + 1) ACT_CHUNK) */
static void act_chunk(void *ctx, int64_t b, int thread) {
    (void)thread;
    const act_call *c = ctx;
    const size_t i0 = (size_t)b * ACT_CHUNK, k = c->count - i0 < ACT_CHUNK ? c->count - i0 : ACT_CHUNK;
    c->range(c->gate + i0, c->up + i0, k, c->act);
}

void model_ffn_act(float *gate, const float *up, size_t count, qkv_ffn_act act, int n_threads) {
    act_call c = {.gate = gate, .up = up, .count = count, .act = act, .range = act_isas[cpu_isa_chosen()]};
    util_parallel_for((int64_t)((count + ACT_CHUNK - 1) / ACT_CHUNK), n_threads, 0, act_chunk, &c);
}
