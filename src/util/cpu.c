/*
 * cpu.c — CPUID features (through GCC's __builtin_cpu_supports, which reads
 * them once at start-up) and the process-wide kernel ISA: chosen at first use
 * from the CPU and QKV_ISA, then read with one atomic load per call.
 */
#include "util/cpu.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *cpu_isa_name(cpu_isa isa) { return (unsigned)isa < CPU_ISA_COUNT ? k_names[isa] : "?"; }

int cpu_isa_parse(cpu_isa *out, const char *name) {
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (name && !strcmp(name, k_names[i])) {
            *out = (cpu_isa)i;
            return 1;
        }
    return 0;
}

/* F16C is CPUID.1:ECX bit 29, read directly: clang's __builtin_cpu_supports
 * (the fuzz build's compiler) does not know "f16c". */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

int cpu_isa_supported(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR: return 1;
    case CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case CPU_ISA_AVX512:
        return cpu_isa_supported(CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
    }
    return 0;
}

int cpu_has_avx512bf16(void) { return cpu_isa_supported(CPU_ISA_AVX512) && __builtin_cpu_supports("avx512bf16"); }

static _Atomic int g_chosen = -1; /* -1: not chosen yet */

static cpu_isa best_supported(cpu_isa at_most) {
    int i = (int)at_most;
    while (i > 0 && !cpu_isa_supported((cpu_isa)i)) i--;
    return (cpu_isa)i;
}

cpu_isa cpu_isa_chosen(void) {
    int c = atomic_load_explicit(&g_chosen, memory_order_relaxed);
    if (c >= 0) return (cpu_isa)c;
    cpu_isa limit = CPU_ISA_AVX512, named;
    const char *want = getenv("QKV_ISA");
    if (want && cpu_isa_parse(&named, want) && cpu_isa_supported(named)) limit = named;
    c = (int)best_supported(limit);
    /* several threads may get here first: they all compute the same value */
    atomic_store_explicit(&g_chosen, c, memory_order_relaxed);
    return (cpu_isa)c;
}

cpu_isa cpu_isa_limit(cpu_isa isa) {
    cpu_isa prev = cpu_isa_chosen();
    atomic_store_explicit(&g_chosen, (int)best_supported(isa), memory_order_relaxed);
    return prev;
}
