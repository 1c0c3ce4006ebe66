/*
 * roofline.c — what this machine can do at most, measured, so a benchmark can
 * state the fraction of it a kernel reaches: the fp32 FMA peak and the bf16
 * dot-product peak (independent register-only chains in the widest vectors
 * the kernels use) and the DRAM read bandwidth (every thread sums its own
 * slice of a buffer far beyond the last-level cache with the widest loads
 * and several accumulators, as STREAM-like tools do); each the best of
 * several passes, as interference only ever lowers them. Every thread runs
 * at once. It deliberately measures no
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
        double t0 = util_now_s();
        loop(iters, &sink);
        double dt = util_now_s() - t0;
        if (dt > seconds / 50 || iters > ((int64_t)1 << 40)) {
            iters = (int64_t)((double)iters * (seconds / ROOF_PASSES) / (dt > 1e-9 ? dt : 1e-9));
            if (iters < 1) iters = 1;
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int pass = 0; pass < ROOF_PASSES; pass++) {
        double flops = 0, t0 = util_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : flops)
        {
            float s = 0;
            flops += loop(iters, &s);
#pragma omp atomic
            sink += s;
        }
        double rate = flops / (util_now_s() - t0);
        if (rate > best) best = rate;
    }
    if (sink == 12345.678f) best += 0; /* keeps sink alive */
    return best;
}

/* The DRAM read's loops (a bench_roof_read): the sum of n 64-bit words at p
 * (n a multiple of ROOF_READ_BLOCK, p 64-byte aligned) in ROOF_READ_ACCS
 * independent accumulators, as STREAM-like tools read: the widest loads of
 * the ISA, and enough chains that neither an add's latency nor one register
 * serialises the loads. Integer adds: the sum is exact, so every ISA's loop
 * returns the scalar twin's value (tests/test_bench_roofline.c). */
#define ROOF_READ_ACCS 8
#define ROOF_READ_BLOCK 64 /* words a round of every loop reads: 8 lines of 64 bytes */

static uint64_t read_scalar(const uint64_t *p, size_t n) {
    uint64_t a[ROOF_READ_ACCS] = {0};
    for (size_t i = 0; i < n; i += ROOF_READ_ACCS)
        for (int k = 0; k < ROOF_READ_ACCS; k++) a[k] += p[i + k];
    uint64_t s = 0;
    for (int k = 0; k < ROOF_READ_ACCS; k++) s += a[k];
    return s;
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint64_t *p, size_t n) {
    __m256i a[ROOF_READ_ACCS];
    for (int k = 0; k < ROOF_READ_ACCS; k++) a[k] = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += ROOF_READ_BLOCK)
        for (int k = 0; k < ROOF_READ_ACCS; k++) {
            a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(p + i + 8 * k)));
            a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(p + i + 8 * k + 4)));
        }
    uint64_t out[4], s = 0;
    for (int k = 1; k < ROOF_READ_ACCS; k++) a[0] = _mm256_add_epi64(a[0], a[k]);
    _mm256_storeu_si256((__m256i *)out, a[0]);
    for (int i = 0; i < 4; i++) s += out[i];
    return s;
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint64_t *p, size_t n) {
    __m512i a[ROOF_READ_ACCS];
    for (int k = 0; k < ROOF_READ_ACCS; k++) a[k] = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += ROOF_READ_BLOCK)
        for (int k = 0; k < ROOF_READ_ACCS; k++) a[k] = _mm512_add_epi64(a[k], _mm512_load_si512(p + i + 8 * k));
    for (int k = 1; k < ROOF_READ_ACCS; k++) a[0] = _mm512_add_epi64(a[0], a[k]);
    return (uint64_t)_mm512_reduce_add_epi64(a[0]);
}

bench_roof_read bench_roofline_read_loop(const char *isa) {
    if (!strcmp(isa, "avx512")) return read_avx512;
    if (!strcmp(isa, "avx2")) return read_avx2;
    return read_scalar;
}

/* Thread t's slice of n words on nt threads: whole blocks, contiguous. */
static void read_slice(size_t n, int t, int nt, size_t *lo, size_t *hi) {
    const size_t blocks = n / ROOF_READ_BLOCK;
    *lo = blocks * (size_t)t / (size_t)nt * ROOF_READ_BLOCK;
    *hi = blocks * (size_t)(t + 1) / (size_t)nt * ROOF_READ_BLOCK;
}

/* Bytes/s read from a buffer of `bytes` (beyond L3, huge pages where offered,
 * as qkv_kv_alloc gives the KV cache) by n_threads threads, each summing its
 * own slice with the ISA's read loop: the best of ROOF_READ_PASSES passes,
 * as STREAM reports (interference only ever lowers a pass). Each thread
 * writes its slice first, so its pages are its own (first touch). */
#define ROOF_READ_PASSES 10
static double dram_read(int n_threads, size_t bytes, qkv_error *err, qkv_status *st) {
    const size_t n = bytes / sizeof(uint64_t) / ROOF_READ_BLOCK * ROOF_READ_BLOCK;
    uint64_t *buf = n ? qkv_kv_alloc(n * sizeof(uint64_t)) : NULL;
    if (!buf) {
        *st = roofline_fail(err, n ? QKV_ERR_NOMEM : QKV_ERR_INVALID,
                            n ? "roofline: cannot allocate the DRAM test's buffer"
                              : "roofline: the DRAM test's buffer is under 512 bytes");
        return 0;
    }
    const bench_roof_read loop = bench_roofline_read_loop(qkv_attn_isa());
#pragma omp parallel num_threads(n_threads)
    {
        size_t lo, hi;
        read_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        for (size_t i = lo; i < hi; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    }
    double best = 0;
    uint64_t sink = 0;
    for (int pass = 0; pass < ROOF_READ_PASSES; pass++) {
        uint64_t total = 0;
        const double t0 = util_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
        {
            size_t lo, hi;
            read_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
            total += loop(buf + lo, hi - lo);
        }
        const double rate = (double)(n * sizeof(uint64_t)) / (util_now_s() - t0);
        if (rate > best) best = rate;
        sink += total;
    }
    qkv_kv_free(buf);
    if (sink == 42) best += 0; /* keeps the sums alive */
    return best;
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
