/*
 * test_bench_cli.c — `qkv bench` end to end: the one-shape mode keeps its two
 * lines (README and BENCHMARKS.md quote them), --json carries every figure a
 * machine needs (roofline, timings, rates, peak fraction, RSS), the quick
 * sweep covers every sweep and writes an SVG, a preset's sliding layers keep
 * their window in a whole-model decode step, and bad flags get one line on
 * stderr and exit status 2. Timings themselves are not checked: the machines
 * are shared; only that they are positive and finite.
 */
#include "testing.h"
#include "svg_check.h"

#include "clitext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs qkv with argv; *out and *err are never NULL afterwards. */
static int run(const char *const *argv, char **out, char **err) {
    int rc = test_run_cli(argv, NULL, out, err);
    if (!*out) *out = calloc(1, 1);
    if (!*err) *err = calloc(1, 1);
    return rc;
}

/* Without --threads, bench runs on what n_threads 0 means in the library: the
 * CPUs of the affinity mask (taskset -c 0: one), not OMP_NUM_THREADS. */
TEST(bench_cli_default_threads_follow_the_affinity_mask) {
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    const char *argv[] = {"-c", "0", bin, "bench", "--n", "64", "--hq", "2", "--hkv", "1", "--d", "16", "--repeat", "1", NULL};
    char *out = NULL, *err = NULL;
    setenv("OMP_NUM_THREADS", "3", 1);
    int rc = test_run_program("/usr/bin/taskset", argv, NULL, &out, &err);
    unsetenv("OMP_NUM_THREADS");
    CHECK(rc == 0, "taskset -c 0 qkv bench: exit %d: %s", rc, err ? err : "");
    CHECK(out && strstr(out, " threads=1\n"), "first line: %s", out ? out : "(none)");
    free(out);
    free(err);
}

TEST(bench_cli_one_shape_keeps_its_two_lines) {
    const char *argv[] = {"bench", "--n", "200", "--hq", "4", "--hkv", "2", "--d", "64", "--kernel", "flash",
                          "--threads", "2", "--repeat", "2", NULL};
    char *out = NULL, *err = NULL;
    int rc = run(argv, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(!strncmp(out, "kernel=flash hq=4 hkv=2 d=64 lq=200 lk=200 kv=f32 mask=causal threads=2\n", 72),
          "first line: %s", out);
    const char *line2 = strchr(out, '\n');
    double v[8];
    int nv = line2 && !strncmp(line2 + 1, "time_s median=", 14) ? cli_line_numbers(line2 + 1, v, 8) : 0;
    CHECK(nv == 6, "second line: %s", line2 ? line2 + 1 : "(none)");
    if (nv == 6) CHECK(v[0] > 0 && v[1] <= v[0] && v[0] <= v[2] && v[3] > 0, "min <= median <= max, GFLOP/s > 0");
    free(out);
    free(err);
}

TEST(bench_cli_one_shape_json_and_roofline) {
    const char *argv[] = {"bench", "--lq", "1", "--lk", "3000", "--hq", "8", "--hkv", "2", "--kv-dtype", "bf16",
                          "--threads", "2", "--json", "--repeat", "3", "--cold", NULL};
    char *out = NULL, *err = NULL;
    int rc = run(argv, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(strstr(out, "\"roofline\": null"), "no roofline unless asked: %s", out);
    CHECK(strstr(out, "\"kernel\": \"decode\"") && strstr(out, "\"kv_dtype\": \"bf16\""), "auto picks decode: %s", out);
    CHECK(strstr(out, "\"cold_cache\": true"), "--cold: %s", out);
    CHECK(cli_json_number(out, "runs") == 3, "runs: %s", out);
    CHECK(cli_json_number(out, "kv_gbs") > 0, "kv_gbs: %s", out);
    free(out);
    free(err);
}

/* Counts occurrences of needle in s. */
static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

TEST(bench_cli_quick_sweep_json_and_svg) {
    char svg[600];
    snprintf(svg, sizeof svg, "%s/bench.svg", test_tmpdir());
    const char *argv[] = {"bench", "--sweep", "all", "--quick", "--json", "--threads", "2", "--svg", svg, NULL};
    char *out = NULL, *err = NULL;
    int rc = run(argv, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(err && err[0] == 0, "stderr not empty: %s", err);
    /* the machine, its roofline, then one object per result */
    static const char *top[] = {"\"qkv_version\"", "\"machine\"", "\"isa\"", "\"roofline\"", "\"fma_gflops\"",
                                "\"bf16_gflops\"", "\"dram_gbs\"", "\"results\""};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) CHECK(strstr(out, top[i]), "missing %s", top[i]);
    CHECK(cli_json_number(out, "fma_gflops") > 0 && cli_json_number(out, "dram_gbs") > 0, "roofline figures");
    int n = count_of(out, "\"sweep\":");
    /* quick: prefill 2 n x 2 models x (3 dtypes + flash-bf16), chunk 1 x 2 x (3 + 1), decode 2 x 2 x 3,
     * ref (ref + flash) x 2 models */
    CHECK(n == 16 + 8 + 12 + 4, "%d results, want 40", n);
    static const char *sweeps[] = {"\"sweep\": \"prefill\"", "\"sweep\": \"chunk\"", "\"sweep\": \"decode\"",
                                   "\"sweep\": \"ref\"", "\"kernel\": \"ref\"", "\"model\": \"smol\"",
                                   "\"kernel\": \"flash-bf16\"",
                                   "\"kv_dtype\": \"f16\""};
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) CHECK(strstr(out, sweeps[i]), "missing %s", sweeps[i]);
    static const char *keys[] = {"\"time_s\"", "\"median\"", "\"min\"", "\"max\"", "\"spread_pct\"", "\"gflops\"",
                                 "\"kv_gbs\"", "\"peak_fraction\"", "\"peak_rss_mib\"", "\"extra_rss_mib\"", "\"runs\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(count_of(out, keys[i]) == n, "%s in %d of %d results", keys[i], count_of(out, keys[i]), n);
    int braces = 0, brackets = 0;
    for (const char *p = out; *p; p++) {
        braces += (*p == '{') - (*p == '}');
        brackets += (*p == '[') - (*p == ']');
        CHECK(braces >= 0 && brackets >= 0, "unbalanced JSON");
        if (braces < 0 || brackets < 0) break;
    }
    CHECK(braces == 0 && brackets == 0, "unbalanced JSON: %d %d", braces, brackets);
    /* every rate positive and finite */
    for (const char *p = out; (p = strstr(p, "\"gflops\":")); p++) {
        double g = strtod(p + 9, NULL);
        CHECK(g > 0 && isfinite(g), "gflops %g", g);
        if (!(g > 0)) break;
    }
    size_t len = 0;
    char *s = test_read_file(svg, &len);
    CHECK(s && !strncmp(s, "<svg", 4) && svg_well_formed(s), "svg file");
    CHECK(s && count_of(s, "<polyline") >= 6 && strstr(s, "fp32 FMA peak") && strstr(s, "DRAM read"),
          "svg: lines and peaks");
    free(s);
    free(out);
    free(err);
}

TEST(bench_cli_quick_sweep_text) {
    const char *argv[] = {"bench", "--sweep", "prefill,decode", "--quick", "--models", "smol", "--kv-dtypes", "bf16",
                          "--threads", "1", NULL};
    char *out = NULL, *err = NULL;
    int rc = run(argv, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(strstr(out, "prefill: causal") && strstr(out, "decode: Lq = 1"), "sections: %s", out);
    CHECK(!strstr(out, "roofline:"), "no roofline unless asked: %s", out);
    CHECK(!strstr(out, "llama ") && count_of(out, "smol ") == 6, "only smol, 2 x 2 prefill + 2 decode rows: %s", out);
    free(out);
    free(err);
}

TEST(bench_cli_whole_model_decode_step_beside_the_cost_model) {
    const char *argv[] = {"bench", "--preset", "smollm2-135m", "--lq", "1", "--lk", "2048", "--kv-dtype", "bf16",
                          "--layers", "all", "--threads", "2", "--repeat", "2", NULL};
    char *out = NULL, *err = NULL;
    int rc = run(argv, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(!strncmp(out, "kernel=decode hq=9 hkv=3 d=64 lq=1 lk=2048 kv=bf16", 50), "first line: %s", out);
    CHECK(strstr(out, "layers=30: one run = every layer once"), "layers line: %s", out);
    CHECK(strstr(out, "cost model (SmolLM2-135M, 30 of 30 layers, context 2048, bf16 K/V)"), "cost model line: %s", out);
    free(out);
    free(err);
}

/* Gemma 3 270M: 4 heads of 256 sharing one KV head; a whole decode step runs
 * its 15 sliding layers with the window of 512 over the 512 rows a
 * sliding-window cache keeps, its 3 global layers over all lk. */
TEST(bench_cli_gemma3_preset_follows_the_sliding_pattern) {
    const char *one[] = {"bench", "--preset", "gemma-3-270m", "--n", "256", "--threads", "2", "--repeat", "1", NULL};
    char *out = NULL, *err = NULL;
    int rc = run(one, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(!strncmp(out, "kernel=flash hq=4 hkv=1 d=256 lq=256 lk=256 kv=f32 mask=causal", 62), "first line: %s", out);
    CHECK(!strstr(out, "sliding layers"), "one layer without --layers has the preset's heads only: %s", out);
    free(out);
    free(err);
    const char *all[] = {"bench", "--preset", "gemma-3-270m", "--lq", "1", "--lk", "4096", "--kv-dtype", "f16",
                         "--layers", "all", "--threads", "2", "--repeat", "1", NULL};
    rc = run(all, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(strstr(out, "layers=18: one run = every layer once"), "layers line: %s", out);
    CHECK(strstr(out, "sliding layers: 15 of 18 (l mod 6 < 5) see the last 512 keys, each holding 512 rows"),
          "sliding line: %s", out);
    /* 4 Hq D (3 x 4096 + 15 x 512) = 81.8 MFLOPs; K/V read (3 x 4096 + 15 x 512) x 2 x 256 x 2 B = 19.5 MiB */
    CHECK(strstr(out, "cost model (Gemma-3-270M, 18 of 18 layers, context 4096, f16 K/V): 0.08 GFLOPs and 0.02 GiB"),
          "cost model line: %s", out);
    free(out);
    free(err);
    const char *json[] = {"bench", "--preset", "gemma-3-270m", "--lq", "1", "--lk", "2048", "--layers", "7",
                          "--threads", "2", "--repeat", "1", "--json", NULL};
    rc = run(json, &out, &err);
    CHECK(rc == 0 && strstr(out, "\"layers\": 7") && strstr(out, "\"sliding_layers\": 6, \"sliding_window\": 512"),
          "JSON (layers 0-4 and 6 slide): %s", out);
    free(out);
    free(err);
    const char *win[] = {"bench", "--preset", "gemma-3-270m", "--layers", "all", "--window", "64", NULL};
    CHECK_BAD_CLI(win, "sets each layer's mask");
}

TEST(bench_cli_rejects_bad_flags) {
    CHECK_BAD_INPUT("bench", "--frobnicate");
    CHECK_BAD_INPUT("bench", "--sweep", "everything");
    CHECK_BAD_INPUT("bench", "--sweep", "all", "--n", "512");
    CHECK_BAD_INPUT("bench", "--svg", "x.svg");
    CHECK_BAD_INPUT("bench", "--quick");
    CHECK_BAD_INPUT("bench", "--sweep", "prefill", "--models", "llama,gpt");
    CHECK_BAD_INPUT("bench", "--sweep", "prefill", "--kv-dtypes", "f8");
    CHECK_BAD_INPUT("bench", "--n", "0");
    CHECK_BAD_INPUT("bench", "--n", "12x");
    CHECK_BAD_INPUT("bench", "--kv-dtype", "f8");
    CHECK_BAD_INPUT("bench", "--kernel", "fast");
    CHECK_BAD_INPUT("bench", "--hq", "6", "--hkv", "4");
    CHECK_BAD_INPUT("bench", "--threads", "0");
    CHECK_BAD_INPUT("bench", "--repeat");
    CHECK_BAD_INPUT("bench", "stray");
    CHECK_BAD_INPUT("bench", "--lq", "9", "--lk", "100", "--kernel", "decode");
    CHECK_BAD_INPUT("bench", "--layers", "all");
    CHECK_BAD_INPUT("bench", "--layers", "0");
    CHECK_BAD_INPUT("bench", "--preset", "gpt-5");
    CHECK_BAD_INPUT("bench", "--preset", "llama-3.1-8b", "--hq", "8");
}
