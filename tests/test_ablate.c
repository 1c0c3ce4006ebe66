/*
 * test_ablate.c — weight against influence (src/probe/ablate.c, qkv ablate):
 *   - KL of logits and Spearman's rank correlation against values by hand;
 *   - the masked flash kernel against the reference with the same exclusion
 *     (a key hidden from rows >= j, row 0 left with none: O = 0, LSE -inf);
 *   - with the model: hiding a digit the answer copies moves the next-token
 *     distribution far more than hiding a filler word;
 *   - KL per position (scope all, last, one layer / head) and per zeroed
 *     head against transformers (tests/fixtures/ablate, made by
 *     tools/oracle/make_ablate_fixtures.py) within 1e-3 + 1e-2 KL: both run
 *     float32 on the same dequantised weights, so logits agree to ~1e-4 and
 *     KL, a difference of log-probabilities, to a few 1e-4 plus a relative
 *     part where hiding a key changes the distribution a lot (measured:
 *     at most 1e-5);
 *   - bad input to `qkv ablate` (one line, exit 2, no output file) and its
 *     JSON and SVG, per position and per head (--heads).
 */
#include "qkv.h"
#include "clitext.h"
#include "testing.h"
#include "svg_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(ablate_kl_and_spearman_by_hand) {
    const float p[3] = {0, 0, 0}, q[3] = {logf(2), 0, 0};
    /* p uniform 1/3; q = (1/2, 1/4, 1/4): KL = 1/3 ln(2/3) + 2/3 ln(4/3) */
    const double want = log(2.0 / 3) / 3 + 2 * log(4.0 / 3) / 3;
    /* 1e-8: logf(2) is a float */
    CHECK(fabs(qkv_kl_logits(p, q, 3) - want) < 1e-8, "KL %.15g, want %.15g", qkv_kl_logits(p, q, 3), want);
    CHECK(qkv_kl_logits(q, q, 3) == 0, "KL of a distribution with itself");
    const float big[2] = {1000, 0}, shifted[2] = {1010, 10};
    CHECK(qkv_kl_logits(big, shifted, 2) < 1e-12, "KL is shift-invariant and stable at large logits");
    const double x[5] = {1, 2, 3, 4, 5}, up[5] = {10, 20, 30, 40, 50}, down[5] = {5, 4, 3, 2, 1};
    CHECK(fabs(qkv_spearman(x, up, 5) - 1) < 1e-12, "monotone: %g", qkv_spearman(x, up, 5));
    CHECK(fabs(qkv_spearman(x, down, 5) + 1) < 1e-12, "reversed: %g", qkv_spearman(x, down, 5));
    /* ties: y ranks (1.5, 1.5, 3, 4, 5); Pearson of ranks by hand = 0.9746794 */
    const double ties[5] = {7, 7, 8, 9, 10};
    CHECK(fabs(qkv_spearman(x, ties, 5) - 0.97467943448) < 1e-9, "ties: %.10f", qkv_spearman(x, ties, 5));
    const double flat[5] = {3, 3, 3, 3, 3};
    CHECK(isnan(qkv_spearman(x, flat, 5)) && isnan(qkv_spearman(x, up, 1)), "constant or n < 2: NaN");
    qkv_ablate_effect e;
    qkv_ablate_effect_of(&e, p, q, 3, 0);
    CHECK(fabs(e.kl - want) < 1e-8 && fabs(e.dp_target - (0.5 - 1.0 / 3)) < 1e-8 && e.top == 0,
          "effect: kl %g dp %g top %d", e.kl, e.dp_target, e.top);
}

TEST(ablate_masked_flash_equals_reference) {
    const int Hq = 4, Hkv = 2, D = 64, n = 70;
    test_rng rng = {11};
    float *q = malloc((size_t)Hq * n * D * 4), *k = malloc((size_t)Hkv * n * D * 4), *v = malloc((size_t)Hkv * n * D * 4);
    float *o1 = malloc((size_t)Hq * n * D * 4), *o2 = malloc((size_t)Hq * n * D * 4);
    float *l1 = malloc((size_t)Hq * n * 4), *l2 = malloc((size_t)Hq * n * 4);
    test_fill_normal(q, (size_t)Hq * n * D, &rng, 1);
    test_fill_normal(k, (size_t)Hkv * n * D, &rng, 1);
    test_fill_normal(v, (size_t)Hkv * n * D, &rng, 1);
    const int hide[3] = {0, 33, 69};
    for (int c = 0; c < 3; c++) {
        /* rows j.. of a prefill from j (as ablate's scope all runs them) */
        const int j = hide[c], lq = n - j;
        qkv_attn_desc d = {.n_q_head = Hq, .n_kv_head = Hkv, .q_len = lq, .kv_len = n, .head_dim = D,
                           .mask = {.kind = QKV_MASK_CAUSAL, .exclude = &hide[c], .n_exclude = 1}, .n_threads = 2};
        qkv_error err = {0};
        /* q rows j .. n-1 of each head, packed [Hq, lq, D] */
        float *qs = malloc((size_t)Hq * lq * D * 4);
        for (int h = 0; h < Hq; h++) memcpy(qs + (size_t)h * lq * D, q + ((size_t)h * n + j) * D, (size_t)lq * D * 4);
        CHECK(qkv_attn(o1, l1, qs, k, v, &d, QKV_KERNEL_FLASH, &err) == QKV_OK, "flash: %s", err.msg);
        CHECK(qkv_attn_reference(o2, l2, NULL, qs, k, v, &d, &err) == QKV_OK, "reference: %s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "O with key %d hidden", j);
        CHECK_CLOSE(what, o1, o2, (size_t)Hq * lq * D, 1e-5, 1e-5);
        if (j == 0) {
            /* row 0 sees only key 0: nothing left, O = 0 and LSE = -inf */
            for (int h = 0; h < Hq; h++) {
                CHECK(l1[(size_t)h * lq] == -INFINITY && l2[(size_t)h * lq] == -INFINITY, "row 0 LSE -inf");
                for (int e = 0; e < D; e++) CHECK(o1[(size_t)h * lq * D + e] == 0, "row 0 O = 0");
            }
        } else {
            snprintf(what, sizeof what, "LSE with key %d hidden", j);
            CHECK_CLOSE(what, l1, l2, (size_t)Hq * lq, 1e-5, 1e-5);
        }
        free(qs);
    }
    free(q); free(k); free(v); free(o1); free(o2); free(l1); free(l2);
}

/* The model and its tokenizer, or NULL (skipped) without the model. */
static qkv_model *open_model(qkv_tokenizer **tok, int n_ctx) {
    if (!test_require_model()) return NULL;
    qkv_model *m = NULL;
    qkv_error err = {0};
    qkv_model_params mp = {.n_ctx = n_ctx, .kv_dtype = QKV_DTYPE_F32, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (m && tok) CHECK(qkv_tokenizer_load(tok, qkv_model_gguf(m), &err) == QKV_OK, "%s", err.msg);
    return m;
}

TEST(ablate_copied_digit_moves_more_than_filler) {
    qkv_tokenizer *tok = NULL;
    qkv_model *m = open_model(&tok, 64);
    if (!m || !tok) return;
    const char *text = "The code is 4729. Repeat the code: 472";
    int32_t ids[64];
    int64_t n = 0;
    qkv_error err = {0};
    CHECK(qkv_tokenize(tok, text, strlen(text), 1, 0, ids, 64, &n, &err) == QKV_OK, "%s", err.msg);
    /* the first "9" is the digit the answer copies; " the" is filler */
    int nine = -1, the = -1;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *piece = qkv_token_piece(tok, ids[i], &len);
        if (nine < 0 && len == 1 && piece[0] == '9') nine = i;
        if (the < 0 && len == 4 && !memcmp(piece, " the", 4)) the = i;
    }
    CHECK(nine >= 0 && the >= 0, "tokens '9' and ' the' in the prompt");
    qkv_ablate_row rows[64];
    qkv_ablate_summary sum;
    CHECK(qkv_ablate_positions(rows, &sum, m, ids, NULL, (int)n, &err) == QKV_OK, "%s", err.msg);
    size_t len;
    const char *tp = qkv_token_piece(tok, sum.target, &len);
    CHECK(len == 1 && tp[0] == '9', "the model continues 472 with 9 (got '%.*s')", (int)len, tp);
    if (nine >= 0 && the >= 0)
        CHECK(rows[nine].effect.kl > 1.0 && rows[nine].effect.kl > 20 * rows[the].effect.kl,
              "KL hiding '9' %.4f, hiding ' the' %.4f", rows[nine].effect.kl, rows[the].effect.kl);
    CHECK(qkv_model_pos(m) == 0, "the cache is left empty");
    /* a large weight is not a large influence: token 0 takes the most attention */
    CHECK(rows[0].attn_mean > rows[nine].attn_mean && rows[0].effect.kl < rows[nine].effect.kl,
          "token 0: attention %.3f, KL %.4f", rows[0].attn_mean, rows[0].effect.kl);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
}

/* A fixture array of tests/fixtures/ablate; count checked. */
static int load(qkv_npy *a, const char *name, const char *what, int64_t count) {
    char path[512];
    snprintf(path, sizeof path, "%s/ablate/%s.%s.npy", test_fixture_dir(), name, what);
    if (!test_require_file(path, "the ablate fixture; tools/oracle/make_ablate_fixtures.py")) return 0;
    qkv_error err = {0};
    CHECK(qkv_npy_load(a, path, &err) == QKV_OK, "%s", err.msg);
    CHECK(a->count == count, "%s: %lld elements, want %lld", path, (long long)a->count, (long long)count);
    return a->count == count;
}

typedef struct {
    char name[32];
    int n, target, layer, head;
    double p;
} fixture_case;

static int read_manifest(fixture_case *c, int cap) {
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/ablate/manifest.txt", test_fixture_dir());
    if (!test_require_file(path, "the ablate fixture")) return 0;
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < cap && fgets(line, sizeof line, f))
        if (sscanf(line, "ablate %31s %d %d %lf %d %d", c[n].name, &c[n].n, &c[n].target, &c[n].p, &c[n].layer,
                   &c[n].head) == 6)
            n++;
    if (f) fclose(f);
    CHECK(n == 2, "manifest: %d cases", n);
    return n;
}

/* kl[n] against want[n] within 1e-3 + 1e-2 * want; prints the first mismatches. */
static void check_kl(const char *what, const double *kl, const float *want, int n) {
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs(kl[i] - want[i]);
        if (d > worst) worst = d;
        if (d > 1e-3 + 1e-2 * want[i] && bad++ < 5)
            test_fail(__FILE__, __LINE__, "%s[%d]: qkv %.5f, transformers %.5f", what, i, kl[i], want[i]);
    }
    if (bad) test_fail(__FILE__, __LINE__, "%s: %d of %d outside tolerance, max diff %.3g", what, bad, n, worst);
    else printf("  %-44s max |KL - transformers| = %.2g\n", what, worst);
}

TEST(ablate_matches_transformers) {
    fixture_case cases[4];
    const int n_cases = read_manifest(cases, 4);
    qkv_model *m = n_cases ? open_model(NULL, 64) : NULL;
    if (!m) return;
    for (int c = 0; c < n_cases; c++) {
        const fixture_case *fc = &cases[c];
        const int n = fc->n;
        qkv_npy ids = {0}, all = {0}, last = {0}, scoped = {0}, dp = {0}, top = {0};
        if (load(&ids, fc->name, "ids", n) && load(&all, fc->name, "kl_all", n) && load(&last, fc->name, "kl_last", n) &&
            load(&scoped, fc->name, "kl_scoped", n) && load(&dp, fc->name, "dp_all", n) &&
            load(&top, fc->name, "top_all", n)) {
            const qkv_ablate_params runs[3] = {
                {.scope = QKV_ABLATE_ALL, .layer = -1, .head = -1, .target = -1},
                {.scope = QKV_ABLATE_LAST, .layer = -1, .head = -1, .target = -1},
                {.scope = QKV_ABLATE_ALL, .layer = fc->layer, .head = fc->head, .target = -1}};
            const float *want[3] = {all.data, last.data, scoped.data};
            for (int r = 0; r < 3; r++) {
                qkv_ablate_row rows[64];
                double kl[64];
                qkv_ablate_summary sum;
                qkv_error err = {0};
                CHECK(qkv_ablate_positions(rows, &sum, m, ids.data, &runs[r], n, &err) == QKV_OK, "%s", err.msg);
                CHECK(sum.target == fc->target && fabs(sum.p_target - fc->p) < 1e-3, "%s: target %d p %.5f, want %d %.5f",
                      fc->name, sum.target, sum.p_target, fc->target, fc->p);
                for (int j = 0; j < n; j++) kl[j] = rows[j].effect.kl;
                char what[320];
                snprintf(what, sizeof what, "%s KL, scope %s layer %d head %d", fc->name, r == 1 ? "last" : "all",
                         runs[r].layer, runs[r].head);
                check_kl(what, kl, want[r], n);
                for (int j = 0; r == 0 && j < n; j++) {
                    CHECK(fabs(rows[j].effect.dp_target - ((float *)dp.data)[j]) < 1e-3 + 1e-2 * fabs(((float *)dp.data)[j]),
                          "%s dp_target[%d]: %.5f, want %.5f", fc->name, j, rows[j].effect.dp_target, ((float *)dp.data)[j]);
                    CHECK(rows[j].effect.top == ((int32_t *)top.data)[j], "%s top_after[%d]: %d, want %d", fc->name, j,
                          rows[j].effect.top, ((int32_t *)top.data)[j]);
                }
            }
        }
        qkv_npy_free(&ids); qkv_npy_free(&all); qkv_npy_free(&last); qkv_npy_free(&scoped); qkv_npy_free(&dp);
        qkv_npy_free(&top);
    }
    qkv_model_close(m);
}

TEST(ablate_zeroed_heads_match_transformers) {
    fixture_case cases[4];
    const int n_cases = read_manifest(cases, 4);
    qkv_model *m = n_cases ? open_model(NULL, 64) : NULL;
    if (!m) return;
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const int L = cfg->n_layer, H = cfg->n_head, V = cfg->n_vocab;
    float *full = malloc((size_t)V * 4), *abl = malloc((size_t)V * 4);
    const fixture_case *fc = &cases[0];
    qkv_npy ids = {0}, heads = {0};
    if (load(&ids, fc->name, "ids", fc->n) && load(&heads, fc->name, "kl_heads", (int64_t)L * H)) {
        const float *want = heads.data;
        /* the three most important heads, and three others spread over the layers */
        int pick[6] = {-1, -1, -1, 1 * H + 2, (L / 2) * H + 5, (L - 1) * H + H - 1};
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < L * H; i++)
                if ((pick[t] < 0 || want[i] > want[pick[t]]) && (t == 0 || want[i] < want[pick[t - 1]])) pick[t] = i;
        qkv_error err = {0};
        qkv_model_rewind(m, 0, NULL);
        CHECK(qkv_model_forward(m, full, ids.data, fc->n, 0, NULL, &err) == QKV_OK, "%s", err.msg);
        double kl[6];
        float w[6];
        for (int t = 0; t < 6; t++) {
            qkv_model_rewind(m, 0, NULL);
            const qkv_head_ref zero = {.layer = pick[t] / H, .head = pick[t] % H};
            CHECK(qkv_model_forward(m, abl, ids.data, fc->n, 0,
                                    &(qkv_forward_opts){.zero_heads = &zero, .n_zero_heads = 1}, &err) == QKV_OK,
                  "%s", err.msg);
            kl[t] = qkv_kl_logits(full, abl, V);
            w[t] = want[pick[t]];
        }
        check_kl("code: KL per zeroed head (3 strongest, 3 others)", kl, w, 6);
        CHECK(w[0] > 0.05, "the strongest head matters (KL %.4f)", w[0]);
    }
    qkv_npy_free(&ids);
    qkv_npy_free(&heads);
    /* the whole map through the library, on the shorter prompt */
    fc = &cases[1];
    if (load(&ids, fc->name, "ids", fc->n) && load(&heads, fc->name, "kl_heads", (int64_t)L * H)) {
        qkv_ablate_effect *e = malloc((size_t)L * H * sizeof *e);
        double *kl = malloc((size_t)L * H * sizeof *kl);
        qkv_ablate_summary sum;
        qkv_error err = {0};
        CHECK(qkv_ablate_heads(e, &sum, m, ids.data, NULL, fc->n, &err) == QKV_OK, "%s", err.msg);
        CHECK(sum.target == fc->target, "target %d, want %d", sum.target, fc->target);
        for (int i = 0; i < L * H; i++) kl[i] = e[i].kl;
        check_kl("capital: KL per zeroed head, every head", kl, heads.data, L * H);
        free(e);
        free(kl);
        qkv_model_rewind(m, 0, NULL);
        const qkv_head_ref bad_layer = {.layer = L, .head = 0}, bad_head = {.layer = 0, .head = -1};
        const qkv_exclusion bad_scope = {.layer = 0, .head = H};
        CHECK(qkv_model_forward(m, abl, ids.data, fc->n, 0, &(qkv_forward_opts){.zero_heads = &bad_layer, .n_zero_heads = 1},
                                &err) == QKV_ERR_INVALID, "layer out of range refused");
        CHECK(qkv_model_forward(m, abl, ids.data, fc->n, 0, &(qkv_forward_opts){.zero_heads = &bad_head, .n_zero_heads = 1},
                                &err) == QKV_ERR_INVALID, "head -1 refused for a zeroed head");
        CHECK(qkv_model_forward(m, abl, ids.data, fc->n, 0, &(qkv_forward_opts){.exclude = &bad_scope, .n_exclude = 1},
                                &err) == QKV_ERR_INVALID, "head out of range refused");
        CHECK(qkv_model_pos(m) == 0, "refused calls leave the cache as it was");
    }
    qkv_npy_free(&ids);
    qkv_npy_free(&heads);
    free(full);
    free(abl);
    qkv_model_close(m);
}

TEST(ablate_library_bad_input) {
    qkv_model *m = open_model(NULL, 8);
    if (!m) return;
    const int32_t ids[10] = {504, 2909, 314, 216, 36, 39, 34, 41, 30, 19637};
    qkv_ablate_row rows[10];
    qkv_ablate_summary sum;
    qkv_error err = {0};
    CHECK(qkv_ablate_positions(rows, &sum, m, ids, NULL, 1, &err) == QKV_ERR_INVALID, "one token refused");
    CHECK(qkv_ablate_positions(rows, &sum, m, ids, NULL, 10, &err) == QKV_ERR_INVALID, "more than n_ctx refused");
    qkv_ablate_params p = {.scope = QKV_ABLATE_ALL, .layer = 30, .head = -1, .target = -1};
    CHECK(qkv_ablate_positions(rows, &sum, m, ids, &p, 4, &err) == QKV_ERR_INVALID && strstr(err.msg, "layer"),
          "layer out of range: %s", err.msg);
    p = (qkv_ablate_params){.scope = QKV_ABLATE_LAST, .layer = -1, .head = 9, .target = -1};
    CHECK(qkv_ablate_positions(rows, &sum, m, ids, &p, 4, &err) == QKV_ERR_INVALID && strstr(err.msg, "head"),
          "head out of range: %s", err.msg);
    qkv_ablate_effect e[1];
    CHECK(qkv_ablate_heads(e, &sum, m, ids, &(qkv_ablate_params){.target = 1 << 30}, 4, &err) == QKV_ERR_INVALID && strstr(err.msg, "target"),
          "target out of range: %s", err.msg);
    qkv_model_close(m);
}

TEST(ablate_cli_bad_input) {
    if (!test_require_model()) return;
    char svg[512];
    snprintf(svg, sizeof svg, "%s/a.svg", test_tmpdir());
    const char *p = "The code is 4729.";
    const char *layer[] = {"ablate", "-p", p, "--layer", "30", "--svg", svg, NULL};
    CHECK_BAD_CLI(layer, "--layer");
    const char *head[] = {"ablate", "-p", p, "--head", "9", "--svg", svg, NULL};
    CHECK_BAD_CLI(head, "--head");
    const char *scope[] = {"ablate", "-p", p, "--scope", "bogus", "--svg", svg, NULL};
    CHECK_BAD_CLI(scope, "--scope");
    char html[512];
    snprintf(html, sizeof html, "%s/a.html", test_tmpdir());
    const char *empty[] = {"ablate", "-p", "", "--svg", svg, "--html", html, NULL};
    CHECK_BAD_CLI(empty, "no tokens");
    CHECK(!test_file_exists(html), "no page after bad input");
    const char *one[] = {"ablate", "-p", "Hello", "--svg", svg, NULL};
    CHECK_BAD_CLI(one, "at least 2");
    const char *target[] = {"ablate", "-p", p, "--target", " 9 and more", "--svg", svg, NULL};
    CHECK_BAD_CLI(target, "--target");
    const char *heads[] = {"ablate", "-p", p, "--heads", "--layer", "2", NULL};
    CHECK_BAD_CLI(heads, "--heads");
    CHECK(!test_file_exists(svg), "no output file after bad input");
}

TEST(ablate_cli_json_and_svg) {
    if (!test_require_model()) return;
    char svg[512];
    snprintf(svg, sizeof svg, "%s/a.svg", test_tmpdir());
    char html[512];
    snprintf(html, sizeof html, "%s/a.html", test_tmpdir());
    const char *argv[] = {"ablate", "-p", "The capital of France is", "--target", " Paris", "--scope", "last",
                          "--json", "--svg", svg, "--html", html, "--threads", "2", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    static const char *const keys[] = {"\"target\": {\"id\": ", "\"piece\": \"·Paris\"", "\"scope\": \"last\"",
                                       "\"layer\": null", "\"head\": null", "\"positions\": [", "\"pos\": 4",
                                       "\"attn_mean\"", "\"attn_max\"", "\"kl\"", "\"dp_target\"", "\"top_after\"",
                                       "\"spearman_attn_kl\": "};
    for (size_t i = 0; out && i < sizeof keys / sizeof keys[0]; i++)
        CHECK(strstr(out, keys[i]), "JSON has %s", keys[i]);
    char *s = test_read_file(svg, NULL);
    CHECK(s && svg_well_formed(s) && strstr(s, "France"), "SVG written whole");
    free(s);
    s = test_read_file(html, NULL);
    CHECK(s && strstr(s, "<svg") && strstr(s, "<td class=\"t\">·France</td>") && strstr(s, "</html>"),
          "HTML page with the plot and the table");
    free(s);
    free(out);
    free(err);
}

TEST(ablate_cli_heads_json_and_svg) {
    if (!test_require_model()) return;
    char svg[512];
    snprintf(svg, sizeof svg, "%s/h.svg", test_tmpdir());
    /* 3 tokens: 270 forwards of 3 tokens each */
    const char *argv[] = {"ablate", "-p", "Paris is in", "--heads", "--json", "--svg", svg, "--threads", "2", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    static const char *const keys[] = {"\"target\": {\"id\": ", "\"n_layer\": 30", "\"n_head\": 9", "\"kl\": [",
                                       "\"dp_target\": [", "\"top_after\": ["};
    for (size_t i = 0; out && i < sizeof keys / sizeof keys[0]; i++) CHECK(strstr(out, keys[i]), "JSON has %s", keys[i]);
    double kl[300];
    int n = out ? cli_json_numbers(out, "\"kl\"", kl, 300) : 0;
    CHECK(n == 270, "kl: %d numbers, want 30 x 9", n);
    for (int i = 0; i < n; i++) CHECK(kl[i] >= 0 && isfinite(kl[i]), "kl[%d] = %g", i, kl[i]);
    char *s = test_read_file(svg, NULL);
    CHECK(s && svg_well_formed(s) && strstr(s, "layer 29"), "heads SVG written whole");
    free(s);
    free(out);
    free(err);
}
