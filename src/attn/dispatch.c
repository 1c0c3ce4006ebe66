/*
 * dispatch.c — picks the inner loop this CPU runs best, at run time, so one
 * binary runs everywhere: AVX-512 > AVX2+FMA > scalar. QKV_ISA in the
 * environment narrows the choice (tests run every ISA the CPU supports).
 */
#include "attn/internal.h"

#include <string.h>

static const attn_isa isa_table[] = {
#ifndef QKV_PORTABLE
    {"avx512", 16, attn_rows_avx512},
    {"avx2", 8, attn_rows_avx2},
#endif
    {"scalar", 1, attn_rows_scalar},
};

static int isa_supported(const attn_isa *isa) {
#ifndef QKV_PORTABLE
    if (!strcmp(isa->name, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    if (!strcmp(isa->name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    (void)isa;
    return 1;
}

const attn_isa *attn_isa_find(const char *name) {
    for (size_t i = 0; i < sizeof isa_table / sizeof isa_table[0]; i++)
        if (!strcmp(isa_table[i].name, name)) return isa_supported(&isa_table[i]) ? &isa_table[i] : NULL;
    return NULL;
}

const attn_isa *attn_isa_best(void) {
    const char *want = getenv("QKV_ISA");
    if (want && *want) {
        const attn_isa *isa = attn_isa_find(want);
        if (isa) return isa;
    }
    for (size_t i = 0; i < sizeof isa_table / sizeof isa_table[0]; i++)
        if (isa_supported(&isa_table[i])) return &isa_table[i];
    return &isa_table[sizeof isa_table / sizeof isa_table[0] - 1];
}

attn_rows_fn attn_rows_bf16dot(void) {
#ifndef QKV_PORTABLE
    const attn_isa *isa = attn_isa_best();
    if (!strcmp(isa->name, "avx512") && __builtin_cpu_supports("avx512bf16")) return attn_rows_avx512bf16;
#endif
    return NULL;
}

const char *qkv_attn_isa(void) { return attn_isa_best()->name; }
