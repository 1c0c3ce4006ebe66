/*
 * test_needle.c — `qkv needle`:
 *   - sentence boundaries and RULER's substring scoring, by hand;
 *   - with the model: a prompt fits its length (prompt + answer <= length,
 *     within a few tokens of it), its needle span is exactly the tokens that
 *     spell the needle, at the asked depth;
 *   - the needle mass from the kernel's LSE equals a softmax over the layer's
 *     raw scores computed here in double from the hook's q and the cache's
 *     keys (no LSE), for every layer and head;
 *   - the answer is read from the haystack: SmolLM2 answers 4817 for the
 *     default needle and 9023 when the needle says 9023, at 256 tokens;
 *   - `qkv needle` on a 2 x 3 grid end to end (JSON, SVG) and its bad input.
 */
#include "qkv.h"
#include "testing.h"
#include "svg_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(needle_offset_is_a_sentence_start) {
    const char *t = "One two. Three four five. Six\n\nSeven eight";
    const size_t n = strlen(t);
    CHECK(qkv_needle_offset(t, n, 0) == 0, "depth 0");
    CHECK(qkv_needle_offset(t, n, 100) == n, "depth 100");
    CHECK(qkv_needle_offset(t, n, 5) == 0, "inside the first sentence: %zu", qkv_needle_offset(t, n, 5));
    const size_t three = (size_t)(strstr(t, "Three") - t), six = (size_t)(strstr(t, "Six") - t),
                 seven = (size_t)(strstr(t, "Seven") - t);
    CHECK(qkv_needle_offset(t, n, 100.0 * (three + 3) / n) == three, "in Three's sentence");
    CHECK(qkv_needle_offset(t, n, 100.0 * (six + 1) / n) == six, "in Six");
    CHECK(qkv_needle_offset(t, n, 100.0 * (seven + 2) / n) == seven, "after a blank line");
    const char *none = "no stop here at all";
    CHECK(qkv_needle_offset(none, strlen(none), 60) == 0, "no boundary: the start");
}

TEST(needle_match_is_case_folded_substring) {
    CHECK(qkv_needle_match("The number is 4817.", "4817") == 14, "plain");
    CHECK(qkv_needle_match("PARIS is the capital", "paris") == 0, "case");
    CHECK(qkv_needle_match("481 7", "4817") == -1, "split");
    CHECK(qkv_needle_match("anything", "") == -1, "empty expected");
    CHECK(qkv_needle_match("", "x") == -1, "empty answer");
}

/* ------------------------------------------------------------ the model */

typedef struct {
    qkv_model *m;
    qkv_gguf *g;
    qkv_tokenizer *tok;
    int32_t *hay;
    int64_t n_hay;
} fixture;

static int fixture_open(fixture *f, int n_ctx) {
    memset(f, 0, sizeof *f);
    if (!test_require_model() || !test_require_file("/usr/share/common-licenses/GPL-3", "the GPL-3 haystack"))
        return 0;
    qkv_error err = {0};
    size_t len = 0;
    char *text = test_read_file("/usr/share/common-licenses/GPL-3", &len);
    qkv_model_params mp = {.n_ctx = n_ctx, .n_threads = 2};
    CHECK(qkv_gguf_open(&f->g, test_model_path(), &err) == QKV_OK, "%s", err.msg);
    if (f->g) CHECK(qkv_tokenizer_load(&f->tok, f->g, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_model_open(&f->m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    f->hay = malloc((size_t)qkv_tokenize_bound(len) * sizeof(int32_t));
    if (text && f->tok && f->hay)
        CHECK(qkv_tokenize(f->tok, text, len, 0, 0, f->hay, qkv_tokenize_bound(len), &f->n_hay, &err) == QKV_OK, "%s",
              err.msg);
    free(text);
    return f->m && f->tok && f->n_hay > 1000;
}

static void fixture_close(fixture *f) {
    qkv_model_close(f->m);
    qkv_tokenizer_free(f->tok);
    qkv_gguf_close(f->g);
    free(f->hay);
}

static char *text_of(const qkv_tokenizer *tok, const int32_t *ids, int n) {
    size_t len = 0, cap = 1 << 16;
    char *s = malloc(cap);
    qkv_error err = {0};
    if (s && qkv_detokenize(tok, ids, n, 0, s, cap, &len, &err) != QKV_OK) s[0] = 0;
    return s;
}

static const qkv_needle_text default_needle = {
    .needle = "The secret number that unlocks the archive is 4817.",
    .question = "What is the secret number that unlocks the archive? Answer with the number only.",
    .max_answer = 16};

TEST(needle_prompt_fits_and_spans_the_needle) {
    fixture f;
    if (!fixture_open(&f, 64)) goto done;
    const double depths[] = {0, 37, 100};
    for (int i = 0; i < 3; i++) {
        qkv_needle_prompt p;
        qkv_error err = {0};
        CHECK(qkv_needle_prompt_build(&p, f.g, f.tok, f.hay, f.n_hay, &default_needle, 600, depths[i], &err) ==
                  QKV_OK,
              "%s", err.msg);
        if (!p.ids) continue;
        CHECK(p.n + 16 <= 600 && p.n + 16 >= 590, "depth %g: %d prompt tokens for length 600", depths[i], p.n);
        char *all = text_of(f.tok, p.ids + p.needle_pos, p.needle_len);
        char *inner = text_of(f.tok, p.ids + p.needle_pos + 1, p.needle_len - 2);
        CHECK(all && strstr(all, default_needle.needle), "depth %g: span [%d, +%d) is '%s'", depths[i], p.needle_pos,
              p.needle_len, all ? all : "");
        CHECK(inner && !strstr(inner, "The secret") && !strstr(inner, "4817."), "depth %g: span not tight: '%s'",
              depths[i], inner ? inner : "");
        /* depth as a share of the haystack: the needle sits at or before it */
        const double at = 100.0 * p.needle_pos / p.n;
        CHECK(at <= depths[i] + 12 && (depths[i] > 0 ? at > depths[i] - 20 : at < 12), "depth %g: needle at %.1f%%",
              depths[i], at);
        free(all);
        free(inner);
        qkv_needle_prompt_free(&p);
    }
    qkv_needle_prompt p;
    qkv_error err = {0};
    CHECK(qkv_needle_prompt_build(&p, f.g, f.tok, f.hay, f.n_hay, &default_needle, 40, 50, &err) == QKV_ERR_INVALID &&
              strstr(err.msg, "needs"),
          "a too short length: %s", err.msg);
    CHECK(qkv_needle_prompt_build(&p, f.g, f.tok, f.hay, f.n_hay, &default_needle, 600, 101, &err) == QKV_ERR_INVALID,
          "depth 101");
done:
    fixture_close(&f);
}

/* The needle mass of the last prompt row, from raw scores in double. */
typedef struct {
    int needle_pos, needle_len, n_head;
    double *mass;   /* [L, Hq] */
} dense_state;

static qkv_status dense_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    dense_state *s = user;
    const int layer = a->layer, n = (int)a->shape[1], pos0 = a->pos0;
    const float *q = qkv_attn_view_q(a->attn);
    const qkv_kv_cache *cache = qkv_attn_view_cache(a->attn);
    const qkv_attn_desc *d = qkv_attn_view_desc(a->attn);
    const int Lk = pos0 + n, D = d->head_dim, group = d->n_q_head / d->n_kv_head;
    const float *k = qkv_kv_cache_k(cache);
    const int64_t stride = d->kv_head_stride ? d->kv_head_stride : (int64_t)Lk * D;
    const double scale = d->scale > 0 ? d->scale : 1 / sqrt(D);
    double *sc = malloc((size_t)Lk * sizeof *sc);
    for (int h = 0; h < d->n_q_head; h++) {
        const float *qr = q + ((size_t)h * n + (n - 1)) * D;
        const float *kh = k + (size_t)(h / group) * stride;
        double mx = -INFINITY, z = 0, mass = 0;
        for (int j = 0; j < Lk; j++) {
            double dot = 0;
            for (int e = 0; e < D; e++) dot += (double)qr[e] * kh[(size_t)j * D + e];
            sc[j] = dot * scale;
            if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j < Lk; j++) z += exp(sc[j] - mx);
        for (int j = s->needle_pos; j < s->needle_pos + s->needle_len; j++) mass += exp(sc[j] - mx) / z;
        s->mass[layer * s->n_head + h] = mass;
    }
    free(sc);
    return QKV_OK;
}

TEST(needle_mass_equals_dense_softmax) {
    fixture f;
    if (!fixture_open(&f, 320)) goto done;
    const qkv_model_config *c = qkv_model_get_config(f.m);
    const int L = c->n_layer, H = c->n_head;
    qkv_needle_prompt p;
    qkv_error err = {0};
    CHECK(qkv_needle_prompt_build(&p, f.g, f.tok, f.hay, f.n_hay, &default_needle, 320, 50, &err) == QKV_OK, "%s",
          err.msg);
    if (!p.ids) goto done;
    dense_state ds = {.needle_pos = p.needle_pos, .needle_len = p.needle_len, .n_head = H,
                      .mass = calloc((size_t)L * H, sizeof(double))};
    const qkv_hook dense = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = dense_hook, .user = &ds};
    CHECK(qkv_model_forward(f.m, NULL, p.ids, p.n, 0, &(qkv_forward_opts){.hooks = &dense, .n_hooks = 1}, &err) == QKV_OK,
          "%s", err.msg);
    int32_t answer[16];
    double mx[64] = {0}, mean[64] = {0}, *retrieval = calloc((size_t)L * H, sizeof(double));
    qkv_needle_result r = {.answer = answer, .mass_max = mx, .mass_mean = mean, .retrieval = retrieval};
    CHECK(L <= 64, "layers %d", L);
    CHECK(qkv_needle_run(&r, f.m, f.tok, &p, 16, &err) == QKV_OK, "%s", err.msg);
    double worst = 0, biggest = 0;
    for (int l = 0; l < L; l++) {
        double want_max = 0, want_mean = 0;
        for (int h = 0; h < H; h++) {
            const double v = ds.mass[l * H + h];
            if (v > want_max) want_max = v;
            want_mean += v / H;
        }
        worst = fmax(worst, fmax(fabs(mx[l] - want_max), fabs(mean[l] - want_mean)));
        biggest = fmax(biggest, want_max);
    }
    CHECK(worst < 2e-5, "needle mass differs from the dense softmax by %.3g", worst);
    CHECK(biggest > 0.05, "no head reads the needle (largest mass %.3g): the test would pass vacuously", biggest);
    double total = 0;
    for (int i = 0; i < L * H; i++) total += retrieval[i];
    CHECK(total > 0, "no retrieval head at all while the answer copies the needle");
    free(ds.mass);
    free(retrieval);
    qkv_needle_prompt_free(&p);
done:
    fixture_close(&f);
}

static void answer_of(const fixture *f, const qkv_needle_text *nt, const char *expected) {
    const qkv_model_config *c = qkv_model_get_config(f->m);
    qkv_needle_prompt p;
    qkv_error err = {0};
    CHECK(qkv_needle_prompt_build(&p, f->g, f->tok, f->hay, f->n_hay, nt, 256, 50, &err) == QKV_OK, "%s", err.msg);
    if (!p.ids) return;
    int32_t answer[16];
    double mx[64], mean[64], *retrieval = calloc((size_t)c->n_layer * c->n_head, sizeof(double));
    qkv_needle_result r = {.answer = answer, .mass_max = mx, .mass_mean = mean, .retrieval = retrieval};
    CHECK(qkv_needle_run(&r, f->m, f->tok, &p, 16, &err) == QKV_OK, "%s", err.msg);
    char *text = text_of(f->tok, answer, r.n_answer);
    CHECK(text && qkv_needle_match(text, expected) >= 0, "answer '%s', expected %s", text ? text : "", expected);
    free(text);
    free(retrieval);
    qkv_needle_prompt_free(&p);
}

TEST(needle_answer_comes_from_the_haystack) {
    fixture f;
    if (!fixture_open(&f, 256)) goto done;
    answer_of(&f, &default_needle, "4817");
    qkv_needle_text other = default_needle;
    other.needle = "The secret number that unlocks the archive is 9023.";
    answer_of(&f, &other, "9023");
done:
    fixture_close(&f);
}

/* ------------------------------------------------------------------ CLI */

TEST(needle_cli_grid_json_and_svg) {
    if (!test_require_model() || !test_require_file("/usr/share/common-licenses/GPL-3", "the GPL-3 haystack"))
        return;
    char svg[512];
    snprintf(svg, sizeof svg, "%s/needle.svg", test_tmpdir());
    const char *argv[] = {"needle", "-m", test_model_path(), "--lengths", "256,512", "--depths", "0,50,100",
                          "--threads", "2", "--json", "--svg", svg, NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    if (rc == 0 && out) {
        int cells = 0;
        for (const char *s = out; (s = strstr(s, "\"length\": ")); s++) cells++;
        CHECK(cells == 6, "%d cells: %s", cells, out);
        CHECK(strstr(out, "\"length\": 512, \"depth\": 100") && strstr(out, "\"needle_mass_by_layer\": [") &&
                  strstr(out, "\"retrieval_heads\": [") && strstr(out, "\"correct\": true"),
              "fields: %.400s", out);
        CHECK(!strstr(out, "nan") && !strstr(out, "inf"), "non-finite values: %s", out);
        char *s = test_read_file(svg, NULL);
        CHECK(s && svg_well_formed(s) && strstr(s, "needle mass") && strstr(s, "<polyline"), "svg: %.200s",
              s ? s : "(missing)");
        free(s);
    }
    free(out);
    free(err);
}

TEST(needle_cli_bad_input) {
    char svg[512], small[512];
    snprintf(svg, sizeof svg, "%s/needle-bad.svg", test_tmpdir());
    snprintf(small, sizeof small, "%s/needle-small.txt", test_tmpdir());
    FILE *f = fopen(small, "w");
    if (f) {
        fputs("A tiny haystack.", f);
        fclose(f);
    }
    const char *m = test_model_path();
    const char *d[] = {"needle", "-m", m, "--depths", "0,101", "--svg", svg, NULL};
    CHECK_BAD_CLI(d, "--depths");
    const char *neg[] = {"needle", "-m", m, "--depths", "-5", "--svg", svg, NULL};
    CHECK_BAD_CLI(neg, "--depths");
    const char *miss[] = {"needle", "-m", m, "--answer", "1234", "--svg", svg, NULL};
    CHECK_BAD_CLI(miss, "not in the needle");
    if (test_require_model() && test_require_file("/usr/share/common-licenses/GPL-3", "the GPL-3 haystack")) {
        const char *len[] = {"needle", "-m", m, "--lengths", "256,9000", "--svg", svg, NULL};
        CHECK_BAD_CLI(len, "context");
        const char *shrt[] = {"needle", "-m", m, "--lengths", "40", "--svg", svg, NULL};
        CHECK_BAD_CLI(shrt, "needs");
        const char *tiny[] = {"needle", "-m", m, "-f", small, "--svg", svg, NULL};
        CHECK_BAD_CLI(tiny, "not shorter than the haystack");
        const char *in[] = {"needle", "-m", m, "--needle", "The licence says: program.", "--answer", "program",
                            "--svg", svg, NULL};
        CHECK_BAD_CLI(in, "already in the haystack");
    }
    CHECK(!test_file_exists(svg), "a failed run left %s", svg);
}
