/*
 * test_bench_roofline.c — the roofline loops of `qkv bench`
 * (cli/bench_roofline.c): positive, finite figures, the bf16 peak measured
 * where the CPU has the instruction, bad arguments refused.
 */
#include "../cli/bench_roofline.h"
#include "testing.h"

#include <math.h>
#include <string.h>

TEST(roofline_figures_are_positive_and_bad_arguments_refused) {
    bench_roofline r;
    qkv_error err = {0};
    CHECK(bench_roofline_measure(&r, 1, 0.02, (size_t)16 << 20, &err) == QKV_OK, "%s", err.msg);
    CHECK(r.fma_gflops > 0 && isfinite(r.fma_gflops), "fma %g", r.fma_gflops);
    CHECK(r.dram_gbs > 0 && isfinite(r.dram_gbs), "dram %g", r.dram_gbs);
    CHECK(r.bf16_gflops >= 0 && isfinite(r.bf16_gflops), "bf16 %g", r.bf16_gflops);
    /* where the bf16 kernel runs, the bf16 peak is measured (not compared with the fp32 one: the
     * machine is shared and 20 ms loops are at its mercy) */
    if (!strcmp(qkv_attn_isa(), "avx512") && __builtin_cpu_supports("avx512bf16"))
        CHECK(r.bf16_gflops > 0, "bf16 peak not measured");
    CHECK(bench_roofline_measure(NULL, 1, 0.02, 0, &err) == QKV_ERR_INVALID, "NULL out");
    CHECK(bench_roofline_measure(&r, -1, 0.02, 0, &err) == QKV_ERR_INVALID && err.msg[0], "negative threads");
    const char *isa = qkv_attn_isa();
    CHECK(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "scalar"), "isa '%s'", isa);
}
