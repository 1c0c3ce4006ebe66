/*
 * dispatch.c — picks the inner loop this CPU runs best, at run time, so one
 * binary runs everywhere: AVX-512 > AVX2+FMA+F16C > scalar, chosen once per
 * process by util/cpu.c (QKV_ISA narrows it; the tests sweep every ISA the
 * CPU supports with cpu_isa_limit).
 */
#include "attn/internal.h"
#include "util/cpu.h"

/* indexed by cpu_isa (util/cpu.h), the one choice attention and matmuls share */
static const attn_isa isa_table[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = {"scalar", 1, attn_rows_scalar, attn_softcap_scalar},
    [CPU_ISA_AVX2] = {"avx2", 8, attn_rows_avx2, attn_softcap_avx2},
    [CPU_ISA_AVX512] = {"avx512", 16, attn_rows_avx512, attn_softcap_avx512},
};

const attn_isa *attn_isa_find(const char *name) {
    cpu_isa isa;
    return cpu_isa_parse(&isa, name) && cpu_isa_supported(isa) ? &isa_table[isa] : NULL;
}

const attn_isa *attn_isa_best(void) { return &isa_table[cpu_isa_chosen()]; }

attn_rows_fn attn_rows_bf16dot(void) {
    return cpu_isa_chosen() == CPU_ISA_AVX512 && cpu_has_avx512bf16() ? attn_rows_avx512bf16 : NULL;
}

const char *qkv_attn_isa(void) { return attn_isa_best()->name; }
