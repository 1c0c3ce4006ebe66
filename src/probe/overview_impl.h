/*
 * overview_impl.h — overview_tile_<SUFFIX> and overview_keys_<SUFFIX>
 * (overview_tile.h) over VW-float
 * vectors: the OV_ROWS rows across NR = OV_ROWS / VW vectors, KB keys at a
 * time, so NR x KB accumulators stay in registers over the whole of D and
 * each step is one load of qt's row d and KB broadcasts of a key element
 * (KB 8 with AVX-512's 32 registers, fewer with 16). Included by
 * overview_<isa>.c after VW and SUFFIX.
 */
#include "probe/overview_tile.h"
#include "util/simd.h"

#define NR (OV_ROWS / VW)
#if VW == 16
#define KB 8
#elif VW == 8
#define KB 4
#else
#define KB 2
#endif

void CAT(overview_tile_, SUFFIX)(float *s, const float *qt, const float *k, int D) {
    for (int j0 = 0; j0 < OV_KEYS; j0 += KB) {
        vf acc[KB][NR];
        for (int j = 0; j < KB; j++)
            for (int v = 0; v < NR; v++) acc[j][v] = vset1(0.0f);
        for (int d = 0; d < D; d++) {
            vf q[NR];
            for (int v = 0; v < NR; v++) q[v] = vload(qt + (size_t)d * OV_ROWS + v * VW);
            for (int j = 0; j < KB; j++) {
                const vf kj = vset1(k[(size_t)(j0 + j) * D + d]);
                for (int v = 0; v < NR; v++) acc[j][v] += q[v] * kj;
            }
        }
        for (int j = 0; j < KB; j++)
            for (int v = 0; v < NR; v++) vstore(s + (size_t)(j0 + j) * OV_ROWS + v * VW, acc[j][v]);
    }
}

void CAT(overview_keys_, SUFFIX)(float *dst, const void *src, qkv_dtype t, size_t n) {
    if (t == QKV_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    size_t i = 0;
    for (; i + VW <= n; i += VW) vstore(dst + i, t == QKV_DTYPE_F16 ? vload_f16(h + i) : vload_bf16(h + i));
    qkv_convert_to_f32(dst + i, h + i, t, n - i);
}
