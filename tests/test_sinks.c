/*
 * test_sinks.c — the sinks probe and the inspect / sinks commands:
 *   - qkv_sinks_hook on hand-made layers against means taken by hand from
 *     the reference kernel's weight matrix (tolerance 1e-6: sums of
 *     float32 weights that agree to ~1e-7 each);
 *   - bad input to `qkv inspect` and `qkv sinks` (one line on stderr, exit
 *     status 2, nothing on stdout, no output file);
 *   - with the model: `qkv sinks` on the start of the GPL-3 (table, JSON,
 *     SVG) and `qkv inspect` outputs (PNG, JSON) on a short prompt.
 */
#include "qkv.h"
#include "pattern_view.h"
#include "testing.h"
#include "svg_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(sinks_hook_means) {
    const int Hq = 4, Hkv = 2, D = 16, n = 40, L = 2, K = 3, skip = 5, every = 7;
    qkv_model_config cfg = {0};
    cfg.n_layer = L;
    cfg.n_head = Hq;
    cfg.n_kv_head = Hkv;
    cfg.head_dim = D;
    qkv_sinks_params p = {.n_first = K, .skip = skip, .every = every, .n_threads = 2};
    qkv_sinks *s = NULL;
    qkv_error err = {0};
    CHECK(qkv_sinks_init(&s, &cfg, &p, &err) == QKV_OK, "%s", err.msg);
    if (!s) return;
    test_rng rng = {3};
    float *q = malloc((size_t)Hq * n * D * 4), *k = malloc((size_t)Hkv * n * D * 4), *v = malloc((size_t)Hkv * n * D * 4);
    float *o = malloc((size_t)Hq * n * D * 4), *lse = malloc((size_t)Hq * n * 4), *ref = malloc((size_t)Hq * n * n * 4);
    for (int l = 0; l < L; l++) {
        test_fill_normal(q, (size_t)Hq * n * D, &rng, 2);
        test_fill_normal(k, (size_t)Hkv * n * D, &rng, 1);
        test_fill_normal(v, (size_t)Hkv * n * D, &rng, 1);
        qkv_kv_cache *cache = NULL;
        qkv_kv_cache_init(&cache, Hkv, D, n, QKV_DTYPE_F32, &err);
        qkv_kv_cache_append(cache, k, v, n, &err);
        qkv_attn_desc d = {.n_q_head = Hq, .n_kv_head = Hkv, .q_len = n, .kv_len = n, .head_dim = D,
                           .mask = {.kind = QKV_MASK_CAUSAL}};
        qkv_attn_cached(o, lse, q, cache, &d, QKV_KERNEL_FLASH, &err);
        /* two forward calls: rows 0..24, then 25..39 (as a chunked prefill would) */
        qkv_attn_desc d1 = d;
        d1.q_len = 25;
        d1.kv_len = 25;
        float *q2 = malloc((size_t)Hq * 15 * D * 4), *lse2 = malloc((size_t)Hq * 15 * 4);
        for (int h = 0; h < Hq; h++) {
            memcpy(q2 + (size_t)h * 15 * D, q + ((size_t)h * n + 25) * D, (size_t)15 * D * 4);
            memcpy(lse2 + (size_t)h * 15, lse + (size_t)h * n + 25, 15 * 4);
        }
        float *q1 = malloc((size_t)Hq * 25 * D * 4), *lse1 = malloc((size_t)Hq * 25 * 4);
        for (int h = 0; h < Hq; h++) {
            memcpy(q1 + (size_t)h * 25 * D, q + (size_t)h * n * D, (size_t)25 * D * 4);
            memcpy(lse1 + (size_t)h * 25, lse + (size_t)h * n, 25 * 4);
        }
        d1.kv_head_stride = (int64_t)n * D;
        qkv_activation a;
        qkv_attn_view view;
        test_pattern_activation(&a, &view, l, q1, lse1, 25, 0, cache, &d1);
        CHECK(qkv_sinks_hook(s, &a, &err) == QKV_OK, "hook: %s", err.msg);
        qkv_attn_desc d2 = d;
        d2.q_len = 15;
        test_pattern_activation(&a, &view, l, q2, lse2, 15, 25, cache, &d2);
        CHECK(qkv_sinks_hook(s, &a, &err) == QKV_OK, "hook: %s", err.msg);
        free(q1); free(q2); free(lse1); free(lse2);
        qkv_attn_reference(o, NULL, ref, q, k, v, &d, &err);
        for (int h = 0; h < Hq; h++) {
            double sink = 0, first = 0, other = 0, top0 = 0;
            int rows = 0, sampled = 0;
            for (int r = skip; r < n; r++) {
                const float *w = ref + ((size_t)h * n + r) * n;
                sink += w[0];
                first += w[0] + w[1] + w[2];
                rows++;
                if ((r - skip) % every) continue;
                float best = -1, best_all = -1;
                int arg = -1;
                for (int j = 0; j <= r; j++) {
                    if (j >= 1 && w[j] > best) best = w[j];
                    if (w[j] > best_all) best_all = w[j], arg = j;
                }
                other += best;
                top0 += arg == 0;
                sampled++;
            }
            const qkv_sinks_head *got = qkv_sinks_get(s, l, h);
            CHECK(got->n_rows == rows && got->n_sampled == sampled, "rows %lld/%d sampled %lld/%d", (long long)got->n_rows,
                  rows, (long long)got->n_sampled, sampled);
            CHECK(fabs(got->sink - sink / rows) < 1e-6, "layer %d head %d sink %g want %g", l, h, got->sink, sink / rows);
            CHECK(fabs(got->first - first / rows) < 1e-6, "first %g want %g", got->first, first / rows);
            CHECK(fabs(got->top_other - other / sampled) < 1e-6, "top other %g want %g", got->top_other, other / sampled);
            CHECK(fabs(got->sink_top - top0 / sampled) < 1e-9, "sink top %g want %g", got->sink_top, top0 / sampled);
        }
        qkv_kv_cache_free(cache);
    }
    CHECK(qkv_sinks_get(s, L, 0) == NULL && qkv_sinks_get(s, 0, Hq) == NULL, "out of range pairs");
    qkv_sinks_free(s);
    qkv_sinks_params bad = qkv_sinks_params_default();
    bad.n_first = 0;
    CHECK(qkv_sinks_init(&s, &cfg, &bad, &err) == QKV_ERR_INVALID, "n_first 0 accepted");
    free(q); free(k); free(v); free(o); free(lse); free(ref);
}


TEST(inspect_cli_bad_input) {
    const char *m = test_model_path();
    CHECK_BAD_CLI((const char *const[]){"inspect", "--frobnicate", NULL}, "unknown flag");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, NULL}, "-p TEXT, -f FILE or --tokens IDS");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "-p", "a", "-f", "b", NULL}, "exactly one");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", "no/such.gguf", "-p", "a", NULL}, "no/such.gguf");
    CHECK_BAD_CLI((const char *const[]){"inspect", "--max-tokens", "zero", NULL}, "--max-tokens");
    CHECK_BAD_CLI((const char *const[]){"sinks", "--every", "0", NULL}, "--every");
    CHECK_BAD_CLI((const char *const[]){"sinks", "-m", m, NULL}, "-p TEXT, -f FILE or --tokens IDS");
    if (!test_require_model()) return;
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "--tokens", "1,99999999", NULL}, "--tokens");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "-p", "hello", "--layers", "30", NULL}, "--layers");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "-p", "hello", "--heads", "2-1", NULL}, "--heads");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "-p", "hello", "--layers", "3,1", NULL}, "increasing");
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "--tokens", "1,2", "--chat", NULL}, "--chat");
    CHECK_BAD_CLI((const char *const[]){"sinks", "-m", m, "-p", "a b c", "--skip", "50", NULL}, "--skip");
    /* --npy above 1 GiB names the way out, and writes nothing */
    char out[600];
    snprintf(out, sizeof out, "%s/all.npy", test_tmpdir());
    CHECK_BAD_CLI((const char *const[]){"inspect", "-m", m, "-f", "/usr/share/common-licenses/GPL-3", "--max-tokens",
                                     "1024", "--npy", out, NULL},
               "--layers/--heads");
    CHECK(!test_file_exists(out), "a refused --npy left a file");
}

TEST(sinks_cli_gpl3) {
    const char *m = test_model_path(), *gpl = "/usr/share/common-licenses/GPL-3";
    if (!test_require_model() || !test_require_file(gpl, "Debian's base-files")) return;
    char svg[600];
    snprintf(svg, sizeof svg, "%s/sinks.svg", test_tmpdir());
    const char *argv[] = {"sinks", "-m", m, "-f", gpl, "--max-tokens", "256", "--svg", svg, NULL};
    char *so = NULL, *se = NULL;
    int rc = test_run_cli(argv, NULL, &so, &se);
    CHECK(rc == 0, "exit %d: %s", rc, se);
    CHECK(so && strstr(so, "first 256 tokens") && strstr(so, "all layers:"), "table: %.200s", so ? so : "");
    int rows = 0;
    for (const char *p = so; p && (p = strstr(p, "\n")); p++)
        if (p[1] == ' ' && p[2] >= ' ' && strncmp(p + 1, "    ", 4) != 0) rows++;
    char *plot = test_read_file(svg, NULL);
    CHECK(plot && svg_well_formed(plot) && strstr(plot, "<polyline"), "svg plot");
    free(plot);
    free(so);
    free(se);
    const char *argj[] = {"sinks", "-m", m, "-f", gpl, "--max-tokens", "128", "--json", NULL};
    rc = test_run_cli(argj, NULL, &so, &se);
    CHECK(rc == 0, "exit %d: %s", rc, se);
    int heads = 0, bad = 0;
    for (const char *p = so; p && (p = strstr(p, "{\"head\": ")); p++) {
        double sink, first;
        if (sscanf(p, "{\"head\": %*d, \"sink\": %lf, \"first\": %lf", &sink, &first) != 2 || sink < 0 || sink > 1 ||
            first < sink - 1e-9 || first > 1 + 1e-6)
            bad++;
        heads++;
    }
    CHECK(heads == 270 && bad == 0, "%d heads in the JSON, %d with bad figures", heads, bad);
    free(so);
    free(se);
}

TEST(inspect_cli_outputs) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    char png[600];
    snprintf(png, sizeof png, "%s/one.png", test_tmpdir());
    const char *argv[] = {"inspect", "-m", m, "-p", "年假怎么申请？", "--layers", "3", "--heads", "2", "--png", png,
                          "--json", NULL};
    char *so = NULL, *se = NULL;
    int rc = test_run_cli(argv, NULL, &so, &se);
    CHECK(rc == 0, "exit %d: %s", rc, se);
    CHECK(so && strstr(so, "\"n_tokens\": 15") && strstr(so, "\"label\": \"年…\"") && strstr(so, "\"label\": \"…年\""),
          "JSON tokens: %.300s", so ? so : "");
    CHECK(so && strstr(so, "{\"layer\": 3, \"head\": 2, \"top\": [[0, 1.000000]") && strstr(so, "\"sink_mass\""),
          "JSON map: %.300s", so ? strstr(so, "\"maps\"") : "");
    CHECK(test_file_exists(png), "no PNG");
    free(so);
    free(se);
    /* without outputs: a table of the weight on token 0 */
    const char *argt[] = {"inspect", "-m", m, "--tokens", "1,9690,198,2683", "--heads", "0-2", NULL};
    rc = test_run_cli(argt, NULL, &so, &se);
    CHECK(rc == 0 && so && strstr(so, "4 tokens, 30 layers x 3 heads") && strstr(so, "<|im_start|>"), "table: %s",
          so ? so : se);
    free(so);
    free(se);
}
