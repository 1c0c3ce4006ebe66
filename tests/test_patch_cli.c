/*
 * test_patch_cli.c — `qkv patch`, `qkv attribute` and `qkv lens` as a user
 * runs them (the arithmetic is the library's, tested in its own files):
 *   - --json parses (json_read.c), has every key with its shape, and its
 *     numbers are the library's for the same ids, bit for bit: the CLI and
 *     this test run the same code on one thread, and %.9g gives back the
 *     same float;
 *   - --npy files hold the same arrays with their shapes, --html pages are
 *     self-contained (no http:// or https://) and show the token labels;
 *   - the table names the top component the arrays have, and the cost;
 *   - a --per-position run over the memory limit names the library's bytes
 *     and the limit;
 *   - bad input is one line, exit 2, no output written, an existing output
 *     file untouched, no temporary left;
 *   - one run of each command on Gemma 3 and the article's pair
 *     年假怎么申请？ / 病假怎么申请？ (6 tokens each, only 年 and 病 differ).
 * Every sweep and the .npy and page run on the tiny Llama-3.1 fixture (2
 * layers, milliseconds); SmolLM2 on a 4-token pair runs two sweeps (390
 * resumed forwards of at most 4 tokens, a few seconds), Gemma 3 two.
 */
#include "qkv.h"
#include "clitext.h"
#include "json_read.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLEAN "John gave it to"
#define CORRUPT "Mary gave it to"
#define DOT "\xC2\xB7" /* a space in a token label */
#define ARROW "\xE2\x86\x92" /* clean→corrupt in a position label */

static char g_path[8][700];

static const char *tmp_path(int slot, const char *name) {
    snprintf(g_path[slot], sizeof g_path[slot], "%s/%s", test_tmpdir(), name);
    return g_path[slot];
}

/* Runs argv, expecting exit 0 and JSON on stdout; the tree, or NULL after a failed CHECK. */
static test_json *run_json(const char *const *argv) {
    char *out = NULL, *err = NULL, why[160] = "";
    const int rc = test_run_cli(argv, NULL, &out, &err);
    test_json *v = rc == 0 ? test_json_parse(out, why, sizeof why) : NULL;
    CHECK(v != NULL, "%s: exit %d, %s: %s%.300s", argv[0], rc, why, err ? err : "", out ? out : "");
    free(out);
    free(err);
    return v;
}

/* root[key] is a regular list of numbers of shape d[0 .. ndim); its elements
 * (malloc'd) or NULL after a failed CHECK. */
static double *json_array(const test_json *root, const char *key, int ndim, const int64_t *d) {
    const test_json *v = test_json_get(root, key);
    int64_t shape[4] = {0}, count = 1;
    const int got = test_json_shape(v, shape, 4);
    int same = got == ndim;
    for (int i = 0; same && i < ndim; i++) same = shape[i] == d[i], count *= d[i];
    CHECK(same, "%s: %d dims [%lld, %lld, %lld], want %d [%lld, %lld, %lld]", key, got, (long long)shape[0],
          (long long)shape[1], (long long)shape[2], ndim, (long long)d[0], (long long)(ndim > 1 ? d[1] : 0),
          (long long)(ndim > 2 ? d[2] : 0));
    if (!same) return NULL;
    double *x = malloc((size_t)count * sizeof *x);
    test_json_numbers(v, x, count);
    return x;
}

static double json_num(const test_json *root, const char *key) {
    const test_json *v = test_json_get(root, key);
    CHECK(v && v->kind == TEST_JSON_NUMBER, "%s: not a number", key);
    return v && v->kind == TEST_JSON_NUMBER ? v->number : NAN;
}

/* The ids of root[key], a list of {"id", "piece"}: malloc'd, *n of them. */
static int32_t *json_ids(const test_json *root, const char *key, int *n) {
    const test_json *v = test_json_get(root, key);
    *n = v && v->kind == TEST_JSON_ARRAY ? v->n : 0;
    CHECK(*n > 0, "%s: not a list of tokens", key);
    int32_t *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *ids);
    for (int i = 0; i < *n; i++) {
        const test_json *id = test_json_get(&v->items[i], "id"), *piece = test_json_get(&v->items[i], "piece");
        CHECK(id && id->kind == TEST_JSON_NUMBER && piece && piece->kind == TEST_JSON_STRING, "%s[%d]", key, i);
        ids[i] = id ? (int32_t)id->number : -1;
    }
    return ids;
}

/* The JSON's numbers read back as float are the library's exactly (NaN as null). */
static void check_same(const char *what, const double *json, const float *lib, int64_t count) {
    int64_t bad = 0;
    for (int64_t i = 0; json && i < count; i++)
        if (!((float)json[i] == lib[i] || (isnan(json[i]) && isnan(lib[i])))) {
            if (bad++ < 3) CHECK(0, "%s[%lld]: JSON %.9g, library %.9g", what, (long long)i, json[i], (double)lib[i]);
        }
    CHECK(bad == 0, "%s: %lld of %lld differ", what, (long long)bad, (long long)count);
}

/* The .npy at path: float32 of shape d [ndim] holding want [count]. */
static void check_npy(const char *path, int ndim, const int64_t *d, const float *want) {
    qkv_npy a = {0};
    qkv_error err = {0};
    if (qkv_npy_load(&a, path, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int same = a.type == QKV_NPY_F32 && a.ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = a.shape[i] == d[i];
    CHECK(same, "%s: type %d, %d dims [%lld, ...], want %d dims [%lld, ...]", path, (int)a.type, a.ndim,
          (long long)a.shape[0], ndim, (long long)d[0]);
    if (same) CHECK(!memcmp(a.data, want, (size_t)a.count * sizeof(float)), "%s: not the library's values", path);
    qkv_npy_free(&a);
}

/* The page is whole, needs no network and shows each of the labels. */
static void check_page(const char *path, const char *const *labels) {
    char *page = test_read_file(path, NULL);
    CHECK(page && strstr(page, "<!DOCTYPE html>") && strstr(page, "</html>"), "%s: not a whole page", path);
    CHECK(page && !strstr(page, "http://") && !strstr(page, "https://"), "%s refers to the network", path);
    for (int i = 0; page && labels[i]; i++) CHECK(strstr(page, labels[i]) != NULL, "%s lacks the label %s", path, labels[i]);
    free(page);
}

static qkv_model *open_model(const char *path, int n) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = n, .n_threads = 1};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s", err.msg);
    return m;
}

/* The one token of text under path's tokenizer. */
static int32_t one_token(const char *path, const char *text) {
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    qkv_error err = {0};
    int32_t ids[4] = {-1};
    int64_t n = 0;
    CHECK(!qkv_gguf_open(&g, path, &err) && !qkv_tokenizer_load(&tok, g, &err) &&
              !qkv_tokenize(tok, text, strlen(text), 0, 0, ids, 4, &n, &err) && n == 1,
          "'%s' is not one token: %s", text, err.msg);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return ids[0];
}

/* A bad command line: the arguments after "<command> -m MODEL --html FILE". */
typedef struct {
    const char *args[12], *needle;
} bad_case;

/* Each case is one error line naming its needle, exit 2, and the existing
 * --html file is untouched, no temporary left. */
static void check_bad_cases(const char *command, const char *model, const bad_case *cases, size_t n) {
    const char *html = tmp_path(7, "keep.html");
    test_write_file(html, "previous page");
    for (size_t c = 0; c < n; c++) {
        const char *argv[20] = {command, "-m", model, "--html", html};
        int k = 5;
        for (int i = 0; i < 12 && cases[c].args[i]; i++) argv[k++] = cases[c].args[i];
        argv[k] = NULL;
        CHECK_BAD_CLI(argv, cases[c].needle);
        CHECK_UNTOUCHED(html, "previous page");
    }
    CHECK(test_count_temporaries() == 0, "temporaries left");
}

/* ------------------------------------------------------------------ patch */

/* The tiny Llama-3.1 fixture: 2 layers x 8 heads, a 512-token vocabulary. */
static const char *tiny_path(void) {
    static char path[600];
    snprintf(path, sizeof path, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    return path;
}

/* Every sweep of the tiny model (head_out_pos too) and both metrics' first
 * one: the JSON, the .npy files and the page against qkv_patch itself. */
TEST(patch_cli_json_npy_html_equal_the_library) {
    const char *m = tiny_path(), *html = tmp_path(0, "patch.html"), *prefix = tmp_path(1, "p_");
    const char *argv[] = {"patch", "-m", m, "--clean-tokens", "509,72,85,97,110,116", "--corrupt-tokens",
                          "509,72,86,97,110,116", "--metric", "logit-diff", "--answer", "y", "--wrong", "ar", "--per-position",
                          "--json", "--html", html, "--npy", prefix, "--threads", "1", NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    int n = 0, n2 = 0;
    int32_t *clean = json_ids(j, "clean_tokens", &n), *corrupt = json_ids(j, "corrupt_tokens", &n2);
    const int L = (int)json_num(j, "n_layer"), H = (int)json_num(j, "n_head");
    CHECK(n == 6 && n2 == 6 && json_num(j, "n_tokens") == 6 && L == 2 && H == 8, "n %d/%d, L %d, H %d", n, n2, L, H);
    const test_json *metric = test_json_get(j, "metric");
    CHECK(metric && metric->string && !strcmp(metric->string, "logit-diff"), "metric");
    const int32_t answer = one_token(m, "y"), wrong = one_token(m, "ar");
    CHECK(json_num(test_json_get(j, "answer"), "id") == answer && json_num(test_json_get(j, "wrong"), "id") == wrong,
          "answer and wrong ids");
    /* the library on the same ids */
    qkv_model *mod = open_model(m, n);
    enum { K = QKV_SWEEP_COUNT };
    static const char *const keys[K] = {"head_out", "head_out_pos", "resid_pre", "attn_out", "mlp_out"};
    const int64_t shapes[K][3] = {{L, H}, {L, H, n}, {L, n}, {L, n}, {L, n}};
    const int ndims[K] = {2, 3, 2, 2, 2};
    qkv_patch_out out;
    float **lib = out.recovery; /* in qkv_sweep's order, the keys' */
    for (int k = 0; k < K; k++) lib[k] = malloc((size_t)L * H * n * sizeof(float));
    qkv_patch_summary sum = {0};
    const qkv_patch_params pp = {.metric = {.kind = QKV_METRIC_LOGIT_DIFF, .answer = answer, .wrong = wrong}};
    qkv_error err = {0};
    const int ok = mod && n == 6 && n2 == 6 && qkv_patch(&out, &sum, mod, clean, corrupt, n, &pp, &err) == QKV_OK;
    CHECK(ok, "qkv_patch: %s", err.msg);
    for (int k = 0; ok && k < K; k++) {
        const int64_t count = shapes[k][0] * shapes[k][1] * (ndims[k] == 3 ? shapes[k][2] : 1);
        double *x = json_array(j, keys[k], ndims[k], shapes[k]);
        check_same(keys[k], x, lib[k], count);
        free(x);
        char npy[800];
        snprintf(npy, sizeof npy, "%s%s.npy", prefix, keys[k]);
        check_npy(npy, ndims[k], shapes[k], lib[k]);
    }
    if (ok) {
        CHECK(fabs(json_num(j, "clean") - sum.clean) <= 1e-9 * fabs(sum.clean) &&
                  fabs(json_num(j, "corrupt") - sum.corrupt) <= 1e-9 * fabs(sum.corrupt),
              "metric values %g %g, library %g %g", json_num(j, "clean"), json_num(j, "corrupt"), sum.clean, sum.corrupt);
        const test_json *cost = test_json_get(j, "cost");
        CHECK(json_num(cost, "layer_token_steps") == (double)sum.layer_token_steps &&
                  json_num(cost, "naive_layer_token_steps") == (double)sum.naive_layer_token_steps &&
                  json_num(cost, "n_components") == (double)sum.n_components,
              "cost: %lld %lld %lld", (long long)sum.layer_token_steps, (long long)sum.naive_layer_token_steps,
              (long long)sum.n_components);
    }
    static const char *const labels[] = {"U" ARROW "V", "layer 1", "h7", "head_out_pos, head 7", "mlp_out", NULL};
    check_page(html, labels);
    CHECK(test_count_temporaries() == 0, "temporaries left");
    qkv_model_close(mod);
    for (int k = 0; k < K; k++) free(lib[k]);
    free(clean), free(corrupt);
    test_json_free(j);
}

/* SmolLM2 on a 4-token pair, the default metric: the JSON's sweeps are the
 * library's, and the table lists the head the arrays put first, then the cost. */
TEST(patch_cli_smollm2_kl_json_and_table) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *argv[] = {"patch", "-m", m, "--clean", CLEAN, "--corrupt", CORRUPT, "--sweeps", "head_out,resid_pre",
                          "--json", "--threads", "1", NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    int n = 0, n2 = 0;
    int32_t *clean = json_ids(j, "clean_tokens", &n), *corrupt = json_ids(j, "corrupt_tokens", &n2);
    const test_json *metric = test_json_get(j, "metric");
    CHECK(metric && metric->string && !strcmp(metric->string, "kl"), "the default metric is kl");
    CHECK(test_json_get(j, "answer")->kind == TEST_JSON_NULL && json_num(j, "clean") == 0, "kl: no answer, clean 0");
    CHECK(test_json_get(j, "attn_out")->kind == TEST_JSON_NULL && test_json_get(j, "head_out_pos")->kind == TEST_JSON_NULL,
          "only the sweeps asked for");
    const int L = 30, H = 9;
    float *ho = malloc((size_t)L * H * 4), *rp = malloc((size_t)L * n * 4);
    qkv_patch_out out = {.recovery[QKV_SWEEP_HEAD_OUT] = ho, .recovery[QKV_SWEEP_RESID_PRE] = rp};
    qkv_patch_summary sum = {0};
    const qkv_patch_params pp = {.metric = {.kind = QKV_METRIC_KL}};
    qkv_error err = {0};
    qkv_model *mod = open_model(m, n);
    const int ok = mod && n == 4 && n2 == 4 && qkv_patch(&out, &sum, mod, clean, corrupt, n, &pp, &err) == QKV_OK;
    CHECK(ok, "qkv_patch: %s", err.msg);
    if (ok) {
        const int64_t lh[2] = {L, H}, ln[2] = {L, n};
        double *x = json_array(j, "head_out", 2, lh), *y = json_array(j, "resid_pre", 2, ln);
        check_same("head_out", x, ho, (int64_t)L * H);
        check_same("resid_pre", y, rp, (int64_t)L * n);
        CHECK(fabs(json_num(j, "corrupt") - sum.corrupt) <= 1e-9 * sum.corrupt, "KL(clean || corrupt)");
        free(x), free(y);
        int best = 0;
        for (int i = 1; i < L * H; i++)
            if (fabsf(ho[i]) > fabsf(ho[best])) best = i;
        const char *table[] = {"patch", "-m", m, "--clean", CLEAN, "--corrupt", CORRUPT, "--sweeps", "head_out", "--top", "3",
                               "--threads", "1", NULL};
        char *so = NULL;
        CHECK(test_run_cli(table, NULL, &so, NULL) == 0, "table run");
        const char *row = cli_find_line(cli_find_line(so, "head_out:"), "layer  head  recovery");
        double v[3] = {0};
        const int got = row && strchr(row, '\n') ? cli_line_numbers(strchr(row, '\n') + 1, v, 3) : 0;
        CHECK(got == 3 && (int)v[0] == best / H && (int)v[1] == best % H && cli_rounds_to(v[2], ho[best], 4),
              "top head row: %g %g %g, want %d %d %.4f", v[0], v[1], v[2], best / H, best % H, (double)ho[best]);
        CHECK(so && strstr(so, "positions that differ: 0 (John" ARROW "Mary)") && strstr(so, "layer-token-steps for ") &&
                  strstr(so, "a full forward per component would run ") && !cli_find_line(so, "resid_pre:"),
              "table: %s", so ? so : "");
        free(so);
    }
    qkv_model_close(mod);
    free(ho), free(rp), free(clean), free(corrupt);
    test_json_free(j);
}

TEST(patch_cli_memory_limit) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *html = tmp_path(0, "keep.html"), *prefix = tmp_path(1, "keep_"), *npy = tmp_path(2, "keep_head_out.npy");
    test_write_file(html, "previous page");
    test_write_file(npy, "previous array");
    const char *argv[] = {"patch", "-m", m, "--clean", CLEAN, "--corrupt", CORRUPT, "--per-position", "--max-mib", "1",
                          "--html", html, "--npy", prefix, NULL};
    /* the bytes named are the library's for every sweep of a 4-token pair */
    qkv_model *mod = open_model(m, 4);
    float dummy;
    const qkv_patch_out all = {{&dummy, &dummy, &dummy, &dummy, &dummy}};
    const long long need = mod ? (long long)qkv_patch_bytes(mod, 4, &all) : -1;
    qkv_model_close(mod);
    char want[160];
    snprintf(want, sizeof want, "--per-position: the sweeps would cache %lld bytes", need);
    CHECK(need > (1 << 20), "a 4-token pair needs %lld bytes: no longer over 1 MiB, choose a longer one", need);
    CHECK_BAD_CLI(argv, want);
    CHECK_BAD_CLI(argv, "above the limit of 1048576 bytes");
    CHECK_UNTOUCHED(html, "previous page");
    CHECK_UNTOUCHED(npy, "previous array");
    CHECK(test_count_temporaries() == 0, "temporaries left");
}

TEST(patch_cli_bad_input) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    static const bad_case cases[] = {
        {{"--clean", CLEAN, "--corrupt", "Mary and Anne gave it to"}, "the clean prompt is 4 tokens and the corrupted one 6"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--metric", "logit-diff", "--answer", " Mary Anne", "--wrong", " John"},
         "--answer: ' Mary Anne' is 2 tokens, not one"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--metric", "logit-diff", "--answer", " Mary", "--wrong", " Mary"},
         "--answer and --wrong are the same token"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--metric", "logit-diff", "--answer", " Mary"}, "needs --answer TEXT and --wrong"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--metric", "l2"}, "--metric: 'l2' is not kl or logit-diff"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--metric", "logit-diff"}, "--metric logit-diff needs --answer"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--answer", " Mary", "--wrong", " John"}, "go with --metric logit-diff"},
        {{"--clean", "", "--corrupt", CORRUPT}, "--clean: the text is empty"},
        {{"--clean", CLEAN, "--corrupt", ""}, "--corrupt: the text is empty"},
        {{"--clean", CLEAN, "--corrupt", CLEAN}, "the same 4 tokens: nothing to patch"},
        {{"--clean", CLEAN}, "give the corrupted prompt once"},
        {{"--clean", CLEAN, "--clean-tokens", "1,2", "--corrupt", CORRUPT}, "give the clean prompt once"},
        {{"--clean-tokens", "1,2", "--corrupt-tokens", "3,4", "--chat"}, "--chat needs text"},
        {{"--clean-tokens", "1,99999999", "--corrupt-tokens", "3,4"}, "--clean-tokens: 99999999 is out of range"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--ctx", "3"}, "--ctx 3 holds fewer positions than the prompt's 4 tokens"},
        {{"--clean", CLEAN, "--corrupt", CORRUPT, "--sweeps", "heads"}, "--sweeps: 'heads' is not"},
    };
    check_bad_cases("patch", m, cases, sizeof cases / sizeof cases[0]);
}

TEST(patch_cli_gemma3_leave_pair) {
    if (!test_require_gemma3()) return;
    const char *html = tmp_path(0, "leave.html");
    const char *argv[] = {"patch", "-m", test_gemma3_path(), "--clean", "年假怎么申请？", "--corrupt", "病假怎么申请？",
                          "--sweeps", "head_out,resid_pre", "--json", "--html", html, NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    const int64_t lh[2] = {18, 4}, ln[2] = {18, 6};
    double *h = json_array(j, "head_out", 2, lh), *r = json_array(j, "resid_pre", 2, ln);
    /* the residual entering layer 0 at the position that differs is all that differs there */
    CHECK(r && fabs(r[1] - 1) < 1e-4, "resid_pre[0][1] = %g", r ? r[1] : NAN);
    free(h), free(r);
    static const char *const labels[] = {"年" ARROW "病", "申请", "layer 17", "h3", NULL};
    check_page(html, labels);
    test_json_free(j);
}

/* -------------------------------------------------------------- attribute */

TEST(patch_cli_attribute_equals_the_library) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *html = tmp_path(0, "dla.html"), *prefix = tmp_path(1, "dla_");
    const char *argv[] = {"attribute", "-m", m, "-p", "Mary and John went out. John gave it to", "--answer", " Mary",
                          "--wrong", " John", "--json", "--html", html, "--npy", prefix, "--threads", "1", NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    int n = 0;
    int32_t *ids = json_ids(j, "tokens", &n);
    const int L = 30, H = 9;
    const test_json *chosen = test_json_get(j, "chosen"), *linear = test_json_get(j, "heads_linear");
    CHECK(chosen && chosen->string && !strcmp(chosen->string, "given") && linear && linear->number == 1,
          "chosen given, heads linear (llama)");
    qkv_model *mod = open_model(m, n);
    float *heads = malloc((size_t)L * H * 4), *attn = malloc((size_t)L * 4), *mlp = malloc((size_t)L * 4);
    qkv_attribution at = {.heads = heads, .attn = attn, .mlp = mlp};
    qkv_error err = {0};
    const int32_t mary = one_token(m, " Mary"), john = one_token(m, " John");
    const int ok = mod && qkv_attribute(&at, mod, ids, n, mary, john, &err) == QKV_OK;
    CHECK(ok, "qkv_attribute: %s", err.msg);
    if (ok) {
        const int64_t lh[2] = {L, H}, l1[1] = {L};
        double *h = json_array(j, "heads", 2, lh), *a = json_array(j, "attn", 1, l1), *f = json_array(j, "mlp", 1, l1);
        check_same("heads", h, heads, L * H);
        check_same("attn", a, attn, L);
        check_same("mlp", f, mlp, L);
        /* the JSON's parts add up to its total as the library's do (float sums in double: 1e-6 of the scale) */
        double sum = json_num(j, "embed"), scale = fabs(sum);
        for (int l = 0; a && f && l < L; l++) sum += a[l] + f[l], scale += fabs(a[l]) + fabs(f[l]);
        CHECK(fabs(sum - json_num(j, "total")) <= 1e-6 * scale, "parts %.9g, total %.9g", sum, json_num(j, "total"));
        CHECK(fabs(json_num(j, "total") - at.total) <= 1e-9 * scale && fabs(json_num(j, "logit_diff") - at.logit_diff) <= 1e-9 * scale &&
                  fabs(json_num(j, "embed") - at.embed) <= 1e-9 * scale,
              "total, logit_diff, embed");
        CHECK(json_num(test_json_get(j, "answer"), "id") == mary && json_num(test_json_get(j, "wrong"), "id") == john,
              "answer and wrong");
        char p[800];
        snprintf(p, sizeof p, "%sheads.npy", prefix);
        check_npy(p, 2, lh, heads);
        snprintf(p, sizeof p, "%sattn.npy", prefix);
        check_npy(p, 1, l1, attn);
        snprintf(p, sizeof p, "%smlp.npy", prefix);
        check_npy(p, 1, l1, mlp);
        free(h), free(a), free(f);
    }
    static const char *const labels[] = {DOT "Mary", DOT "John", "layer 29", "h8", NULL};
    check_page(html, labels);
    /* without --answer/--wrong: the model's top-1 and top-2, as the library picks them */
    const char *top2[] = {"attribute", "-m", m, "-p", "Mary and John went out. John gave it to", "--json", "--threads", "1", NULL};
    test_json *t = run_json(top2);
    qkv_attribution at2 = {.heads = heads, .attn = attn, .mlp = mlp};
    if (t && mod && qkv_attribute(&at2, mod, ids, n, -1, -1, &err) == QKV_OK) {
        const test_json *c2 = test_json_get(t, "chosen");
        CHECK(c2 && c2->string && !strcmp(c2->string, "top-2"), "chosen top-2");
        CHECK(json_num(test_json_get(t, "answer"), "id") == at2.answer && json_num(test_json_get(t, "wrong"), "id") == at2.wrong &&
                  at2.answer != at2.wrong,
              "top-2: %d %d", at2.answer, at2.wrong);
    }
    /* --answer alone: wrong is the model's most likely other token, as the library picks it */
    const char *runner_up[] = {"attribute", "-m", m, "-p", "Mary and John went out. John gave it to", "--answer", " John",
                               "--json", "--threads", "1", NULL};
    test_json *r = run_json(runner_up);
    if (r && mod && qkv_attribute(&at2, mod, ids, n, john, -1, &err) == QKV_OK) {
        const test_json *c3 = test_json_get(r, "chosen");
        CHECK(c3 && c3->string && !strcmp(c3->string, "runner-up"), "chosen runner-up");
        CHECK(json_num(test_json_get(r, "answer"), "id") == john && json_num(test_json_get(r, "wrong"), "id") == at2.wrong,
              "runner-up: %d", at2.wrong);
    }
    test_json_free(r);
    /* the table: the sums and the model's own difference */
    const char *table[] = {"attribute", "-m", m, "-p", "Mary and John went out. John gave it to", "--answer", " Mary", "--wrong",
                           " John", "--threads", "1", NULL};
    char *so = NULL;
    CHECK(test_run_cli(table, NULL, &so, NULL) == 0 && so && strstr(so, "total (embed + attn + mlp) = ") &&
              strstr(so, "the model's own logit difference = ") && strstr(so, "heads (each head's output") &&
              !strstr(so, "not additive"),
          "table: %s", so ? so : "");
    free(so);
    test_json_free(t);
    qkv_model_close(mod);
    free(heads), free(attn), free(mlp), free(ids);
    test_json_free(j);
}

TEST(patch_cli_attribute_bad_input) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    static const bad_case cases[] = {
        {{"-p", "Paris is in", "--wrong", " France"}, "--wrong needs --answer"},
        {{"-p", "Paris is in", "--answer", " South Africa", "--wrong", " Spain"}, "--answer: ' South Africa' is 2 tokens, not one"},
        {{"-p", "Paris is in", "--answer", " France", "--wrong", " France"}, "are the same token"},
        {{"-p", ""}, "-p: the text is empty"},
        {{"-p", "Paris is in", "--ctx", "1"}, "--ctx 1 holds fewer positions"},
        {{"--tokens", "1,2", "--chat"}, "--chat needs text"},
    };
    check_bad_cases("attribute", m, cases, sizeof cases / sizeof cases[0]);
}

TEST(patch_cli_attribute_gemma3_heads_not_additive) {
    if (!test_require_gemma3()) return;
    const char *argv[] = {"attribute", "-m", test_gemma3_path(), "-p", "年假怎么申请？", "--json", NULL};
    test_json *j = run_json(argv);
    if (j) {
        const int64_t lh[2] = {18, 4};
        double *h = json_array(j, "heads", 2, lh);
        int nulls = 0;
        for (int i = 0; h && i < 18 * 4; i++) nulls += isnan(h[i]);
        CHECK(nulls == 18 * 4 && test_json_get(j, "heads_linear")->number == 0, "Gemma's heads are null, not additive");
        free(h);
    }
    test_json_free(j);
    const char *table[] = {"attribute", "-m", test_gemma3_path(), "-p", "年假怎么申请？", NULL};
    char *so = NULL;
    CHECK(test_run_cli(table, NULL, &so, NULL) == 0 && so && strstr(so, "heads: not additive in gemma3"), "table: %s",
          so ? so : "");
    free(so);
}

/* ------------------------------------------------------------------- lens */

TEST(patch_cli_lens_equals_the_library) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *html = tmp_path(0, "lens.html");
    const char *argv[] = {"lens", "-m", m, "-p", "The capital of France is", "-k", "3", "--json", "--html", html,
                          "--threads", "1", NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    int n = 0;
    int32_t *ids = json_ids(j, "tokens", &n);
    const int L = 30, k = 3;
    CHECK(json_num(j, "k") == 3 && json_num(j, "n_layer") == L && json_num(j, "n_tokens") == n, "k, n_layer, n_tokens");
    qkv_model *mod = open_model(m, n);
    /* the default target: the model's own top-1 at the last position */
    const int V = mod ? qkv_model_get_config(mod)->n_vocab : 1;
    float *logits = malloc((size_t)V * 4);
    qkv_error err = {0};
    int32_t top1 = 0;
    if (mod && qkv_model_forward(mod, logits, ids, n, 0, NULL, &err) == QKV_OK)
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[top1]) top1 = v;
    if (mod) qkv_model_rewind(mod, 0, &err);
    CHECK(json_num(test_json_get(j, "target"), "id") == top1, "target %g, the model's top-1 %d",
          json_num(test_json_get(j, "target"), "id"), top1);
    int32_t *tid = malloc((size_t)L * n * k * 4);
    float *tp = malloc((size_t)L * n * k * 4), *pt = malloc((size_t)L * n * 4);
    qkv_lens_out out = {.top_ids = tid, .top_probs = tp, .target_prob = pt};
    const qkv_lens_params lp = {.k = k, .target = top1};
    const int ok = mod && qkv_lens(&out, mod, ids, n, &lp, &err) == QKV_OK;
    CHECK(ok, "qkv_lens: %s", err.msg);
    if (ok) {
        const int64_t lnk[3] = {L, n, k}, ln[2] = {L, n};
        double *x = json_array(j, "top_ids", 3, lnk), *p = json_array(j, "top_probs", 3, lnk),
               *t = json_array(j, "target_prob", 2, ln);
        float *xf = malloc((size_t)L * n * k * 4);
        for (int i = 0; i < L * n * k; i++) xf[i] = (float)tid[i];
        check_same("top_ids", x, xf, (int64_t)L * n * k);
        check_same("top_probs", p, tp, (int64_t)L * n * k);
        check_same("target_prob", t, pt, (int64_t)L * n);
        CHECK(tid[((size_t)(L - 1) * n + n - 1) * k] == top1, "the last layer's lens is the model's output");
        /* top_pieces: [L][n][k] strings */
        const test_json *pieces = test_json_get(j, "top_pieces");
        int shaped = pieces && pieces->kind == TEST_JSON_ARRAY && pieces->n == L;
        for (int l = 0; shaped && l < L; l++) {
            shaped = pieces->items[l].n == n;
            for (int q = 0; shaped && q < n; q++)
                shaped = pieces->items[l].items[q].n == k && pieces->items[l].items[q].items[0].kind == TEST_JSON_STRING;
        }
        CHECK(shaped, "top_pieces is not [L][n][k] strings");
        free(x), free(p), free(t), free(xf);
    }
    static const char *const labels[] = {DOT "France", DOT "capital", "layer 29", "top 3:", NULL};
    check_page(html, labels);
    /* --target and --pos in the table */
    const char *table[] = {"lens", "-m", m, "-p", "The capital of France is", "--target", " Paris", "--pos", "0,-1",
                           "--threads", "1", NULL};
    char *so = NULL;
    CHECK(test_run_cli(table, NULL, &so, NULL) == 0 && so && strstr(so, "target " DOT "Paris\n") &&
              strstr(so, "position 0 (The)") && strstr(so, "position 4 (" DOT "is)"),
          "table: %s", so ? so : "");
    free(so);
    qkv_model_close(mod);
    free(logits), free(tid), free(tp), free(pt), free(ids);
    test_json_free(j);
}

TEST(patch_cli_lens_bad_input) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    static const bad_case cases[] = {
        {{"-p", "Paris is in", "--target", " South Africa"}, "--target: ' South Africa' is 2 tokens, not one"},
        {{"-p", "Paris is in", "--pos", "3"}, "--pos 3: the prompt has positions 0..2"},
        {{"-p", "Paris is in", "--pos", "-4"}, "--pos -4"},
        {{"-p", "Paris is in", "-k", "0"}, "-k: 0 is out of range"},
        {{"-p", ""}, "-p: the text is empty"},
        {{"-p", "Paris", "-f", "x"}, "give exactly one of"},
    };
    check_bad_cases("lens", m, cases, sizeof cases / sizeof cases[0]);
}

TEST(patch_cli_lens_gemma3) {
    if (!test_require_gemma3()) return;
    const char *html = tmp_path(0, "lens.html");
    const char *argv[] = {"lens", "-m", test_gemma3_path(), "-p", "病假怎么申请？", "--json", "--html", html, NULL};
    test_json *j = run_json(argv);
    if (!j) return;
    const int64_t lnk[3] = {18, 6, 5};
    double *x = json_array(j, "top_probs", 3, lnk);
    free(x);
    CHECK(test_json_get(j, "tokens")->n == 6, "6 tokens");
    static const char *const labels[] = {"病", "申请", "layer 17", NULL};
    check_page(html, labels);
    test_json_free(j);
}

TEST(patch_cli_listed_in_help) {
    char *out = NULL;
    CHECK(test_run_cli((const char *const[]){"--help", NULL}, NULL, &out, NULL) == 0, "qkv --help");
    static const char *const names[] = {"  patch ", "  attribute ", "  lens ", NULL};
    for (int i = 0; out && names[i]; i++) CHECK(strstr(out, names[i]) != NULL, "qkv --help lacks%s", names[i]);
    free(out);
}
