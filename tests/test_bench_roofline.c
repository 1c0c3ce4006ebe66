/*
 * test_bench_roofline.c — the roofline loops of `qkv bench`
 * (cli/bench_roofline.c): positive, finite figures, the bf16 peak measured
 * where the CPU has the instruction, bad arguments refused, and the DRAM
 * read's per-ISA loops summing exactly as their scalar twin.
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

/* The DRAM read's loops sum exactly: every ISA this CPU runs returns the scalar twin's sum, which is
 * the closed form, over lengths of 1 to 5 blocks and at an offset (a slice of a thread after the
 * first). */
TEST(roofline_read_loops_sum_like_the_scalar_twin) {
    enum { WORDS = 5 * 64 + 64 };
    static uint64_t buf[WORDS] __attribute__((aligned(64)));
    for (size_t i = 0; i < WORDS; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    const struct {
        const char *isa;
        int runs;
    } isas[] = {{"avx512", __builtin_cpu_supports("avx512f")}, {"avx2", __builtin_cpu_supports("avx2")}};
    for (size_t off = 0; off <= 64; off += 64)
        for (size_t n = 64; n + off <= WORDS; n += 64) {
            uint64_t want = 0; /* sum of i * c over [off, off + n), mod 2^64 */
            for (size_t i = off; i < off + n; i++) want += i * 0x9E3779B97F4A7C15ull;
            const uint64_t scalar = bench_roofline_read_loop("scalar")(buf + off, n);
            CHECK(scalar == want, "scalar off %zu n %zu: %llu != %llu", off, n, (unsigned long long)scalar,
                  (unsigned long long)want);
            for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
                if (!isas[k].runs) continue;
                const uint64_t got = bench_roofline_read_loop(isas[k].isa)(buf + off, n);
                CHECK(got == want, "%s off %zu n %zu: %llu != %llu", isas[k].isa, off, n, (unsigned long long)got,
                      (unsigned long long)want);
            }
        }
    bench_roofline r;
    qkv_error err = {0};
    CHECK(bench_roofline_measure(&r, 1, 0.02, 100, &err) == QKV_ERR_INVALID && err.msg[0], "a buffer under 512 bytes");
}
