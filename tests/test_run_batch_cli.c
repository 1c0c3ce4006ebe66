/*
 * test_run_batch_cli.c — `qkv run`'s prefill in calls of --batch tokens, the
 * sliding-window cache it keeps by default (--swa-full: every position) and
 * -v's KV cache line:
 *   - the tiny gemma3 (window 12 on five of six layers, fixtures/families):
 *     60 prompt ids in one call against calls of 7, with and without
 *     --swa-full: every prompt logit within 1e-5 of the largest of its row
 *     (the test_model_swa_cache.c tolerance: other tile and split points,
 *     and other matmul batches, change the float32 summation order), the
 *     same 12 greedy ids;
 *   - Gemma 3 270M at --ctx 32768 (SKIPPED without it): -v prints the bytes
 *     `qkv cost --json` predicts for its preset, kv_cache_swa_bytes by
 *     default and kv_cache_bytes with --swa-full, and the rows per layer;
 *   - --batch out of range: one line, exit 2.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-5
#define GEMMA3_MODEL "models/gemma-3-270m-q4_k_m.gguf"

static const char *gemma3_path(void) {
    const char *p = getenv("QKV_GEMMA3_MODEL");
    return p ? p : GEMMA3_MODEL;
}

/* qkv run on the tiny gemma3 with extra flags: its stdout (greedy ids) and
 * the prompt's logits in *logits ([60, V], the caller frees). */
static char *run_tiny(const char *ids, const char *const *extra, qkv_npy *logits, const char *name) {
    char model[700], lp[700];
    snprintf(model, sizeof model, "%s/families/gemma3/model.gguf", test_fixture_dir());
    snprintf(lp, sizeof lp, "%s/%s.npy", test_tmpdir(), name);
    const char *argv[16] = {"run", "-m", model, "--tokens", ids, "-n", "12", "--print-ids", "--logits", lp};
    int n = 10;
    for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    const int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "%s: exit %d: %s", name, rc, err);
    qkv_error e = {0};
    CHECK(rc != 0 || qkv_npy_load(logits, lp, &e) == QKV_OK, "%s: %s", name, e.msg);
    free(err);
    return out;
}

TEST(run_cli_prefill_in_batches_equals_one_call) {
    char ids[60 * 5] = "";
    for (int i = 0, o = 0; i < 60; i++) o += snprintf(ids + o, sizeof ids - o, "%s%d", i ? "," : "", (i * 89 + 7) % 288);
    qkv_npy ref = {0}, got = {0};
    char *out_ref = run_tiny(ids, (const char *const[]){"--batch", "60", NULL}, &ref, "one_call");
    static const char *const variants[][4] = {{"--batch", "7", NULL}, {"--batch", "7", "--swa-full", NULL}};
    for (int v = 0; v < 2 && !test_failures(); v++) {
        char *out = run_tiny(ids, variants[v], &got, v ? "batch7_full" : "batch7");
        if (test_failures()) break;
        CHECK(out && out_ref && !strcmp(out, out_ref), "--batch 7%s: greedy ids '%s', one call's '%s'",
              v ? " --swa-full" : "", out, out_ref);
        CHECK(got.count == ref.count && ref.ndim == 2 && ref.shape[0] == 60, "logits: %lld values, want %lld",
              (long long)got.count, (long long)ref.count);
        int64_t at;
        const double worst = got.count == ref.count ? test_worst_row(got.data, ref.data, 60, ref.shape[1], &at) : INFINITY;
        CHECK(worst <= REL_TOL, "--batch 7%s: logits %.3g of the row's largest from one call's > %g",
              v ? " --swa-full" : "", worst, REL_TOL);
        printf("  --batch 7%s against one call: worst logits row %.2e, greedy ids equal\n", v ? " --swa-full" : "",
               worst);
        qkv_npy_free(&got);
        free(out);
    }
    qkv_npy_free(&ref);
    free(out_ref);
}

/* The integer after key in s, or -1. */
static double number_after(const char *s, const char *key) {
    const char *p = s ? strstr(s, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : -1;
}

TEST(run_cli_verbose_kv_cache_is_what_cost_predicts) {
    if (!test_require_file(gemma3_path(), "Gemma 3 270M: run `make model`")) return;
    const char *cost[] = {"cost", "--preset", "gemma-3-270m", "--ctx", "32768", "--dtype", "f16", "--json", NULL};
    char *json = NULL;
    CHECK(test_run_cli(cost, NULL, &json, NULL) == 0, "qkv cost failed");
    const double want_swa = number_after(json, "\"kv_cache_swa_bytes\": "),
                 want_full = number_after(json, "\"kv_cache_bytes\": ");
    for (int full = 0; full < 2; full++) {
        const char *argv[] = {"run", "-m", gemma3_path(), "--ctx", "32768", "--kv-dtype", "f16", "--tokens", "2,818,5279",
                              "-n", "2", "--print-ids", "-v", full ? "--swa-full" : NULL, NULL};
        char *err = NULL;
        const int rc = test_run_cli(argv, NULL, NULL, &err);
        const double got = number_after(err, "qkv run: KV cache "), want = full ? want_full : want_swa;
        CHECK(rc == 0 && got > 0 && got == want, "qkv run -v%s: exit %d, KV cache %.0f bytes, qkv cost %.0f: %s",
              full ? " --swa-full" : "", rc, got, want, err);
        const char *rows = full ? "(576.0 MiB, f16): 3 global layers x 32768 rows, 15 sliding layers (window 512) x "
                                  "32768 rows; 512 tokens per call"
                                : "(111.0 MiB, f16): 3 global layers x 32768 rows, 15 sliding layers (window 512) x "
                                  "1023 rows; 512 tokens per call";
        CHECK(err && strstr(err, rows), "qkv run -v%s: want '%s': %s", full ? " --swa-full" : "", rows, err);
        free(err);
    }
    free(json);
}

TEST(run_cli_batch_out_of_range) {
    CHECK_BAD_CLI(((const char *const[]){"run", "--batch", "0", "-p", "x", NULL}), "--batch");
    CHECK_BAD_CLI(((const char *const[]){"run", "--batch", "4194305", "-p", "x", NULL}), "--batch");
}
