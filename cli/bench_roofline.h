/*
 * bench_roofline.h — the machine's peaks for `qkv bench` (bench_roofline.c),
 * so a benchmark can say which fraction of them a kernel reaches.
 */
#ifndef QKV_BENCH_ROOFLINE_H
#define QKV_BENCH_ROOFLINE_H

#include "qkv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double fma_gflops;   /* fp32 FMA peak in the kernels' vectors, all threads */
    double bf16_gflops;  /* bf16 dot-product peak (vdpbf16ps); 0 if the CPU has none */
    double dram_gbs;     /* read bandwidth from memory, all threads, 1e9 bytes/s */
} bench_roofline;

/* Measures the three figures on n_threads threads (0 = all available), about
 * `seconds` each (0 = 0.2 s), reading dram_bytes (0 = 512 MiB: far beyond any
 * L3; allocated as qkv_kv_alloc does). Each figure is the best of several
 * short passes (a shared machine needs one quiet moment). QKV_ERR_NOMEM if
 * the buffer cannot be allocated, QKV_ERR_INVALID if it is under 512 bytes. */
qkv_status bench_roofline_measure(bench_roofline *out, int n_threads, double seconds, size_t dram_bytes,
                                  qkv_error *err);

/* The FMA peak's loop on one thread: `iters` rounds of independent
 * register-only multiply-adds in the vectors of isa ("avx512", "avx2", else
 * scalar); returns the FLOPs done and folds the result into *sink. Also
 * timed beside the flash kernels' instruction mix by bench/fma_mix.c. */
typedef double (*bench_roof_loop)(int64_t iters, float *sink);
bench_roof_loop bench_roofline_fma_loop(const char *isa);

/* The DRAM read's loop: the sum of n 64-bit words at p (n a multiple of 64,
 * p 64-byte aligned) with the loads of isa ("avx512", "avx2", else the
 * scalar reference), in several independent accumulators. Exact: every
 * ISA's loop returns the same sum. */
typedef uint64_t (*bench_roof_read)(const uint64_t *p, size_t n);
bench_roof_read bench_roofline_read_loop(const char *isa);

#endif /* QKV_BENCH_ROOFLINE_H */
