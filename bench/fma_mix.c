/*
 * fma_mix.c — what the flash kernels' instruction mix can reach on this
 * machine now, beside the FMA peak it is judged against.
 *
 * `qkv bench --roofline` measures the fp32 FMA peak with register-only FMA
 * chains: two FMAs a cycle and almost nothing else to issue. The flash
 * kernels' Q·Kᵀ and P·V micro-kernels (src/attn/tile_impl.h) are register
 * tiles of MK x NV accumulators fed by broadcasts and vector loads from L1,
 * per step along D NV vector loads + MK broadcasts + MK * NV FMAs:
 *   AVX2 6 x 2: 8 loads and 20 instructions for 12 FMAs of 8 lanes,
 *   AVX-512 6 x 4: 10 loads and 34 instructions for 24 FMAs of 16 lanes.
 * This program times the peak's loop and that mix (Q·Kᵀ's; P·V's is the same
 * with p broadcast and V loaded) in turns, in slices of --slice seconds for
 * --seconds, on every thread at once (OpenMP, as qkv bench --threads), for
 * each ISA the CPU has, and prints per ISA the FMA peak (best slice), the
 * mix's rate (median and best) and the per-slice ratio mix / peak
 * (quartiles): the most a kernel made of that mix could reach in those
 * seconds. On the Zen 4 VM of BENCHMARKS.md (issue 11) the AVX-512 mix runs
 * at the peak and the AVX2 mix at 0.78-0.99 of it, moving from minute to
 * minute while the peak's loop does not.
 *
 * Operands (all in L1): packed queries qp [D, NV * VW] (row chunk of
 * rows_block), key rows kr [MK, D]; D = 64 steps a pass.
 *
 * Build and run: bench/fma_mix.sh [--threads N] [--seconds S] [--slice S] [--isa avx512|avx2]
 * (bench/prefill_peak.py --mix runs it beside each shape).
 * A benchmark, not part of libqkv or its tests.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_roofline.h"
#include "timing.h"

#define MIX_D 64    /* steps along D a pass (SmolLM2's head dim) */
#define MAX_SLICES 4096

static float qp_buf[MIX_D * 64] __attribute__((aligned(64))); /* [D, NV * VW] packed queries, NV * VW <= 64 */
static float kr_buf[6 * MIX_D] __attribute__((aligned(64)));  /* [MK = 6, D] key rows */

/* Each loop runs `passes` passes and returns the FLOPs done; sink keeps the
 * accumulators alive. The peak's loops are qkv bench --roofline's own
 * (cli/bench_roofline.c). */
typedef double (*loop_fn)(int64_t passes, float *sink);

/* ------------------------------------------------------------------ AVX2 */

/* One key row's broadcast against the two query vectors (6 x 2 tile, as
 * qk_tile's AVX2 instance). */
#define MIX2_KEY(k)                                                                                      \
    b = _mm256_broadcast_ss(kr + (k) * MIX_D + d);                                                      \
    a##k##0 = _mm256_fmadd_ps(b, q0, a##k##0);                                                           \
    a##k##1 = _mm256_fmadd_ps(b, q1, a##k##1);

__attribute__((target("avx2,fma"), noinline)) static double mix_avx2(int64_t passes, float *sink) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00,
           a40 = a00, a41 = a00, a50 = a00, a51 = a00, b;
    for (int64_t i = 0; i < passes; i++) {
        const float *qp = qp_buf, *kr = kr_buf;
        __asm__("" : "+r"(qp), "+r"(kr)); /* a new pass: the loads are not hoisted out */
#pragma GCC unroll 2 /* two steps an iteration, as qk_tile */
        for (int d = 0; d < MIX_D; d++) {
            const __m256 q0 = _mm256_load_ps(qp + d * 16), q1 = _mm256_load_ps(qp + d * 16 + 8);
            MIX2_KEY(0) MIX2_KEY(1) MIX2_KEY(2) MIX2_KEY(3) MIX2_KEY(4) MIX2_KEY(5)
        }
    }
    const __m256 s = a00 + a01 + a10 + a11 + a20 + a21 + a30 + a31 + a40 + a41 + a50 + a51;
    *sink += s[0];
    return (double)passes * MIX_D * 12 * 8 * 2;
}

/* --------------------------------------------------------------- AVX-512 */

/* 6 x 4 tile, as qk_tile's AVX-512 instance. */
#define MIX512_KEY(k)                                                                                    \
    b = _mm512_set1_ps(kr[(k) * MIX_D + d]);                                                            \
    a##k##0 = _mm512_fmadd_ps(b, q0, a##k##0);                                                           \
    a##k##1 = _mm512_fmadd_ps(b, q1, a##k##1);                                                           \
    a##k##2 = _mm512_fmadd_ps(b, q2, a##k##2);                                                           \
    a##k##3 = _mm512_fmadd_ps(b, q3, a##k##3);

__attribute__((target("avx512f"), noinline)) static double mix_avx512(int64_t passes, float *sink) {
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00,
           a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00, a40 = a00,
           a41 = a00, a42 = a00, a43 = a00, a50 = a00, a51 = a00, a52 = a00, a53 = a00, b;
    for (int64_t i = 0; i < passes; i++) {
        const float *qp = qp_buf, *kr = kr_buf;
        __asm__("" : "+r"(qp), "+r"(kr)); /* one step an iteration: GCC does not unroll this one */
        for (int d = 0; d < MIX_D; d++) {
            const __m512 q0 = _mm512_load_ps(qp + d * 64), q1 = _mm512_load_ps(qp + d * 64 + 16),
                         q2 = _mm512_load_ps(qp + d * 64 + 32), q3 = _mm512_load_ps(qp + d * 64 + 48);
            MIX512_KEY(0) MIX512_KEY(1) MIX512_KEY(2) MIX512_KEY(3) MIX512_KEY(4) MIX512_KEY(5)
        }
    }
    const __m512 s = a00 + a01 + a02 + a03 + a10 + a11 + a12 + a13 + a20 + a21 + a22 + a23 + a30 + a31 + a32 +
                     a33 + a40 + a41 + a42 + a43 + a50 + a51 + a52 + a53;
    *sink += _mm512_reduce_add_ps(s);
    return (double)passes * MIX_D * 24 * 16 * 2;
}

/* ------------------------------------------------------------- the runs */

/* GFLOP/s of fn run `passes` passes on every one of n_threads at once. */
static double rate(loop_fn fn, int64_t passes, int n_threads, float *sink) {
    double flops = 0;
    const double t0 = util_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : flops)
    {
        float s = 0;
        flops += fn(passes, &s);
#pragma omp atomic
        *sink += s;
    }
    return flops / (util_now_s() - t0) / 1e9;
}

/* Passes of fn that take about `seconds` on one thread. */
static int64_t calibrate(loop_fn fn, double seconds, float *sink) {
    for (int64_t passes = 64;; passes *= 2) {
        const double t0 = util_now_s();
        fn(passes, sink);
        const double dt = util_now_s() - t0;
        if (dt > seconds / 8 || passes > ((int64_t)1 << 40))
            return (int64_t)((double)passes * seconds / (dt > 1e-9 ? dt : 1e-9)) + 1;
    }
}

static double quantile(const double *sorted, int n, double q) {
    const double x = q * (n - 1);
    const int i = (int)x;
    return i + 1 < n ? sorted[i] + (x - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

static void usage_fail(const char *why) {
    fprintf(stderr, "fma_mix: %s (usage: fma_mix [--threads N] [--seconds S] [--slice S] [--isa avx512|avx2])\n", why);
    exit(2);
}

int main(int argc, char **argv) {
    int n_threads = 1;
    double seconds = 10, slice = 0.05;
    const char *only = NULL; /* --isa: this ISA alone */
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_fail("a flag without its value");
        if (!strcmp(argv[i], "--isa")) {
            only = argv[++i];
            if (strcmp(only, "avx512") && strcmp(only, "avx2")) usage_fail("--isa is avx512 or avx2");
            continue;
        }
        char *end;
        const double v = strtod(argv[i + 1], &end);
        if (*end || end == argv[i + 1]) usage_fail("a value that is not a number");
        if (!strcmp(argv[i], "--threads") && v >= 1 && v <= 1024 && v == (int)v) n_threads = (int)v;
        else if (!strcmp(argv[i], "--seconds") && v > 0 && v <= 3600) seconds = v;
        else if (!strcmp(argv[i], "--slice") && v >= 0.001 && v <= 10) slice = v;
        else usage_fail("an unknown flag or a value out of range");
        i++;
    }
    for (int i = 0; i < MIX_D * 64; i++) qp_buf[i] = 1e-3f * (float)(i % 7);
    for (int i = 0; i < 6 * MIX_D; i++) kr_buf[i] = 1e-3f * (float)(i % 5);

    struct {
        const char *isa;
        loop_fn peak, mix;
        int ok;
    } isas[] = {{"avx512", bench_roofline_fma_loop("avx512"), mix_avx512, __builtin_cpu_supports("avx512f")},
                {"avx2", bench_roofline_fma_loop("avx2"), mix_avx2,
                 __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")}};
    enum { N_ISA = sizeof isas / sizeof isas[0] };
    for (int k = 0; k < N_ISA; k++)
        if (only && strcmp(only, isas[k].isa)) isas[k].ok = 0;
        else if (only && !isas[k].ok) usage_fail("this CPU does not have the ISA --isa names");
    int any = 0;
    for (int k = 0; k < N_ISA; k++) any |= isas[k].ok;
    if (!any) usage_fail("this CPU has neither AVX2 with FMA nor AVX-512");
    float sink = 0;
    int64_t passes[N_ISA][2];
    static double g_peak[N_ISA][MAX_SLICES], g_mix[N_ISA][MAX_SLICES], ratio[N_ISA][MAX_SLICES];
    for (int k = 0; k < N_ISA; k++)
        if (isas[k].ok) passes[k][0] = calibrate(isas[k].peak, slice, &sink), passes[k][1] = calibrate(isas[k].mix, slice, &sink);

    /* slices in turns: every ISA's peak then mix, so each ratio is of two
     * runs ~slice seconds apart */
    int n = 0;
    const double t0 = util_now_s();
    while (n < MAX_SLICES && (n == 0 || util_now_s() - t0 < seconds)) {
        for (int k = 0; k < N_ISA; k++) {
            if (!isas[k].ok) continue;
            g_peak[k][n] = rate(isas[k].peak, passes[k][0], n_threads, &sink);
            g_mix[k][n] = rate(isas[k].mix, passes[k][1], n_threads, &sink);
            ratio[k][n] = g_mix[k][n] / g_peak[k][n];
        }
        n++;
    }
    printf("fma_mix: %d threads, %d slices of ~%.3f s each per loop over %.1f s\n", n_threads, n, slice, util_now_s() - t0);
    for (int k = 0; k < N_ISA; k++) {
        if (!isas[k].ok) continue;
        qsort(g_peak[k], n, sizeof(double), by_value);
        qsort(g_mix[k], n, sizeof(double), by_value);
        qsort(ratio[k], n, sizeof(double), by_value);
        printf("%s: fma_peak_GFLOP/s=%.1f (median %.1f)  mix_GFLOP/s median=%.1f best=%.1f  mix/peak min=%.3f "
               "p25=%.3f median=%.3f p75=%.3f max=%.3f\n",
               isas[k].isa, g_peak[k][n - 1], quantile(g_peak[k], n, 0.5), quantile(g_mix[k], n, 0.5), g_mix[k][n - 1],
               ratio[k][0], quantile(ratio[k], n, 0.25), quantile(ratio[k], n, 0.5), quantile(ratio[k], n, 0.75),
               ratio[k][n - 1]);
    }
    if (sink == 12345.678f) printf(" "); /* keeps the sums alive */
    return 0;
}
