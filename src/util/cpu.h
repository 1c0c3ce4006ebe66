/*
 * cpu.h — the instruction sets this CPU runs (CPUID, read once per process)
 * and the one choice of kernel ISA that attention and the matmuls share.
 * Each ISA's kernels live in files compiled with that ISA's target flags
 * (tile_avx2.c, matmul_avx512.c ...); nothing else in libqkv uses more than
 * baseline x86-64, so the choice made here is what keeps one binary running
 * on every x86-64.
 */
#ifndef QKV_UTIL_CPU_H
#define QKV_UTIL_CPU_H

typedef enum {
    CPU_ISA_SCALAR = 0,  /* baseline x86-64 (SSE2) */
    CPU_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C: what tile_avx2.c and matmul_avx2.c are compiled for */
    CPU_ISA_AVX512 = 2   /* AVX-512 F/BW/DQ/VL (+ the AVX2 level) */
} cpu_isa;
#define CPU_ISA_COUNT 3

/* "scalar", "avx2", "avx512". */
const char *cpu_isa_name(cpu_isa isa);
/* 1 and *out set if name is one of the above. */
int cpu_isa_parse(cpu_isa *out, const char *name);
/* 1 if this CPU runs isa's kernels (always for SCALAR). */
int cpu_isa_supported(cpu_isa isa);
/* 1 if the CPU has AVX512_BF16 (vdpbf16ps) as well as the AVX512 level. */
int cpu_has_avx512bf16(void);

/* The ISA every kernel of this process uses: the best one supported, at most
 * the one QKV_ISA=avx512|avx2|scalar names (read once, at first use; an
 * unknown or unsupported name is ignored). */
cpu_isa cpu_isa_chosen(void);
/* Narrows the choice to at most isa (a supported one) for the rest of the
 * process and returns the previous choice: the test runner's ISA sweeps. */
cpu_isa cpu_isa_limit(cpu_isa isa);

#endif /* QKV_UTIL_CPU_H */
