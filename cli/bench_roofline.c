/*
 * roofline.c — what this machine can do at most, measured, so a benchmark can
 * state the fraction of it a kernel reaches: the fp32 FMA peak and the bf16
 * dot-product peak (independent register-only chains in the widest vectors
 * the kernels use; the best of several short passes, as interference only
 * ever lowers them), and the DRAM read bandwidth (a parallel sum over a
 * buffer far beyond the last-level cache; the median of 7 passes). Every
 * thread runs at once. It deliberately measures no
 * cache level and no mixed instruction stream: those are the kernels' job
 * (bench/fma_mix.c times the flash micro-kernels' mix beside this peak).
 * Part of `qkv bench`, not of libqkv: nothing but a benchmark needs it.
 */
#include "bench_roofline.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>

#include <omp.h>
#include <string.h>

#include <immintrin.h>

#define ROOF_CHAINS 12 /* independent accumulators: more than latency x FMA pipes on any x86 */
#define ROOF_PASSES 8

static qkv_status roofline_fail(qkv_error *err, qkv_status st, const char *msg) {
    if (err) {
        err->status = st;
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return st;
}

/* Each loop (a bench_roof_loop) runs `iters` rounds of ROOF_CHAINS
 * multiply-adds and returns the FLOPs done; the result is folded into *sink
 * so nothing is optimised away. */

__attribute__((target("avx512f"))) static double fma_avx512(int64_t iters, float *sink) {
    __m512 a[ROOF_CHAINS];
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], b, c);
    __m512 s = a[0];
    for (int k = 1; k < ROOF_CHAINS; k++) s = _mm512_add_ps(s, a[k]);
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * ROOF_CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(int64_t iters, float *sink) {
    __m256 a[ROOF_CHAINS];
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm256_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], b, c);
    float out[8];
    __m256 s = a[0];
    for (int k = 1; k < ROOF_CHAINS; k++) s = _mm256_add_ps(s, a[k]);
    _mm256_storeu_ps(out, s);
    for (int i = 0; i < 8; i++) *sink += out[i];
    return (double)iters * ROOF_CHAINS * 8 * 2;
}

/* vdpbf16ps: per f32 lane two bf16 products added to the accumulator, 4 FLOPs. */
__attribute__((target("avx512f,avx512bf16"))) static double bf16_avx512(int64_t iters, float *sink) {
    __m512 a[ROOF_CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f); /* bf16 pairs of 0.996 */
    const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6); /* bf16 pairs of ~1e-7 */
    for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < ROOF_CHAINS; k++) a[k] = _mm512_dpbf16_ps(a[k], x, y);
    __m512 s = a[0];
    for (int k = 1; k < ROOF_CHAINS; k++) s = _mm512_add_ps(s, a[k]);
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * ROOF_CHAINS * 16 * 4;
}

static double fma_scalar(int64_t iters, float *sink) {
    float a[ROOF_CHAINS];
    for (int k = 0; k < ROOF_CHAINS; k++) a[k] = (float)k;
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < ROOF_CHAINS; k++) a[k] = a[k] * 0.999999f + 1e-6f;
    for (int k = 0; k < ROOF_CHAINS; k++) *sink += a[k];
    return (double)iters * ROOF_CHAINS * 2;
}

bench_roof_loop bench_roofline_fma_loop(const char *isa) {
    if (!strcmp(isa, "avx512")) return fma_avx512;
    if (!strcmp(isa, "avx2")) return fma_avx2;
    return fma_scalar;
}

/* FLOP/s of `loop` on n_threads threads: the best of ROOF_PASSES short passes
 * (about seconds / ROOF_PASSES each), so that on a shared machine one pass
 * that ran undisturbed is enough. */
static double peak_of(bench_roof_loop loop, int n_threads, double seconds) {
    float sink = 0;
    int64_t iters = 1 << 14;
    for (;;) { /* calibrate on one thread */
        double t0 = qkv_now_s();
        loop(iters, &sink);
        double dt = qkv_now_s() - t0;
        if (dt > seconds / 50 || iters > ((int64_t)1 << 40)) {
            iters = (int64_t)((double)iters * (seconds / ROOF_PASSES) / (dt > 1e-9 ? dt : 1e-9));
            if (iters < 1) iters = 1;
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int pass = 0; pass < ROOF_PASSES; pass++) {
        double flops = 0, t0 = qkv_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : flops)
        {
            float s = 0;
            flops += loop(iters, &s);
#pragma omp atomic
            sink += s;
        }
        double rate = flops / (qkv_now_s() - t0);
        if (rate > best) best = rate;
    }
    if (sink == 12345.678f) best += 0; /* keeps sink alive */
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Bytes/s read from a buffer of `bytes` (beyond L3, huge pages where offered,
 * as qkv_kv_alloc gives the KV cache) by n_threads threads: the median of 7
 * passes (the best of them can be an artifact; 58 GB/s once on a machine
 * whose median is 35). */
static double dram_read(int n_threads, size_t bytes, qkv_error *err, qkv_status *st) {
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = qkv_kv_alloc(n * sizeof(uint64_t));
    if (!buf) {
        *st = roofline_fail(err, QKV_ERR_NOMEM, "roofline: cannot allocate the DRAM test's buffer");
        return 0;
    }
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    double rates[7];
    uint64_t sink = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = qkv_now_s();
        uint64_t total = 0;
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : total)
        for (size_t i = 0; i < n; i++) total += buf[i]; /* integer sum: vectorised, no FP ordering */
        rates[pass] = (double)(n * sizeof(uint64_t)) / (qkv_now_s() - t0);
        sink += total;
    }
    qkv_kv_free(buf);
    if (sink == 42) rates[0] += 0;
    qsort(rates, 7, sizeof rates[0], cmp_double);
    return rates[3];
}

qkv_status bench_roofline_measure(bench_roofline *out, int n_threads, double seconds, size_t dram_bytes,
                                    qkv_error *err) {
    if (!out) return roofline_fail(err, QKV_ERR_INVALID, "roofline: out is NULL");
    if (n_threads < 0 || !(seconds >= 0))
        return roofline_fail(err, QKV_ERR_INVALID, "roofline: n_threads and seconds must be >= 0");
    memset(out, 0, sizeof *out);
    const int nt = n_threads > 0 ? n_threads : qkv_cpu_count();
    if (seconds == 0) seconds = 0.2;
    if (dram_bytes == 0) dram_bytes = (size_t)512 << 20;
    const char *isa = qkv_attn_isa();
    const bench_roof_loop fma = bench_roofline_fma_loop(isa);
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512bf16"))
        out->bf16_gflops = peak_of(bf16_avx512, nt, seconds) * 1e-9;
    out->fma_gflops = peak_of(fma, nt, seconds) * 1e-9;
    qkv_status st = QKV_OK;
    out->dram_gbs = dram_read(nt, dram_bytes, err, &st) * 1e-9;
    return st;
}
