/*
 * test_explain.c — `qkv explain` reproduces the article's worked example
 * (年 假 怎么 申请, one head of d = 2) with the article's rounding: the 申请
 * row's scores 1.414 2.828 0 0, e^s 4.113 16.919 1 1 (sum 23.032), weights
 * 0.179 0.735 0.043 0.043, output [1.648, 0.087]; the causal rows 1 | 0.5 0.5
 * | 0.284 0.576 0.140; 0.578 on 怎么 without the mask; 0.853 without the
 * scale. The figures are read back from the text (by row label) and from
 * --json; the tables must line up in display columns (CJK is 2 wide).
 */
#include "testing.h"

#include "clitext.h"
#include "qkv_render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *run_ok(const char *const *argv, const char *stdin_text) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, stdin_text, &out, &err);
    CHECK(rc == 0, "qkv %s %s: exit %d, stderr: %s", argv[0], argv[1] ? argv[1] : "", rc, err ? err : "");
    CHECK(err && err[0] == 0, "stderr not empty: %s", err ? err : "");
    free(err);
    return out;
}

/* The n numbers after label in section (the first line with that label at or
 * after the section heading), each to the given decimals. */
static void check_row(const char *text, const char *section, const char *label, const double *want,
                      int n, int decimals) {
    const char *sec = text ? strstr(text, section) : NULL;
    CHECK(sec != NULL, "no section '%s'", section);
    const char *line = cli_find_line(sec, label);
    CHECK(line != NULL, "no row '%s' in section '%s'", label, section);
    if (!line) return;
    double got[32];
    int k = cli_line_numbers(line, got, 32);
    CHECK(k == n, "row '%s' in '%s': %d numbers, want %d", label, section, k, n);
    for (int i = 0; i < n && i < k; i++)
        CHECK(cli_rounds_to(got[i], want[i], decimals), "row '%s' in '%s', column %d: %.6g, want %.*f",
              label, section, i, got[i], decimals, want[i]);
}

/* Every line of a table block (from heading to the next blank line) has the
 * same display width once trailing blanks are ignored. */
static void check_aligned(const char *text, const char *heading) {
    const char *p = text ? strstr(text, heading) : NULL;
    CHECK(p != NULL, "no table '%s'", heading);
    if (!p) return;
    while (*p && *p != '\n') p++; /* the heading line itself may be shorter */
    while (*p == '\n') p++;          /* and blank lines may follow it */
    int width = -1, rows = 0;
    while (*p && *p != '\n') {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        while (len && line[len - 1] == ' ') line[--len] = 0;
        int w = qkv_text_width(line);
        if (width < 0) width = w;
        CHECK(w == width, "table '%s' row %d is %d columns wide, the first %d: '%s'", heading, rows, w,
              width, line);
        rows++;
        if (!nl) break;
        p = nl + 1;
    }
    CHECK(rows >= 3, "table '%s' has %d rows", heading, rows);
}

TEST(explain_text_walks_the_example) {
    const char *argv[] = {"explain", NULL};
    char *out = run_ok(argv, NULL);
    /* step 1: the q/k/v table */
    const double q_nian[] = {1, 1, 1, 0, 1, 0}, q_jia[] = {0, 2, 2, 0, 2, 0},
                 q_zenme[] = {1, 0, 0, 1, 0, 1}, q_shenqing[] = {2, 0, 0, 0, 0, 1};
    check_row(out, "q = x·W_Q", "年", q_nian, 6, 0);
    check_row(out, "q = x·W_Q", "假", q_jia, 6, 0);
    check_row(out, "q = x·W_Q", "怎么", q_zenme, 6, 0);
    check_row(out, "q = x·W_Q", "申请", q_shenqing, 6, 0);
    /* step 2: the 申请 row: q.k, s, e^s, weight */
    const double r0[] = {2, 1.414, 4.113, 0.179}, r1[] = {4, 2.828, 16.919, 0.735},
                 r2[] = {0, 0, 1, 0.043}, sum[] = {23.032, 1};
    check_row(out, "2. The 申请 row", "年", r0, 4, 3);
    check_row(out, "2. The 申请 row", "假", r1, 4, 3);
    check_row(out, "2. The 申请 row", "怎么", r2, 4, 3);
    check_row(out, "2. The 申请 row", "申请", r2, 4, 3);
    check_row(out, "2. The 申请 row", "sum", sum, 2, 3);
    CHECK(out && strstr(out, "/ √2"), "the scores are not divided by √2");
    /* step 3: the output */
    CHECK(out && strstr(out, "= [1.648, 0.087]"), "no output [1.648, 0.087]");
    CHECK(out && strstr(out, "73.5% of its weight from 假"), "no 73.5%% from 假");
    /* step 4: the causal matrix, masked entries shown as '-' */
    const double m0[] = {1}, m1[] = {0.5, 0.5}, m2[] = {0.284, 0.576, 0.140},
                 m3[] = {0.179, 0.735, 0.043, 0.043};
    check_row(out, "4. Every row", "年", m0, 1, 3);
    check_row(out, "4. Every row", "假", m1, 2, 3);
    check_row(out, "4. Every row", "怎么", m2, 3, 3);
    check_row(out, "4. Every row", "申请", m3, 4, 3);
    /* every table lines up in display columns, CJK counted 2 wide */
    check_aligned(out, "1. Q, K, V");
    check_aligned(out, "2. The 申请 row");
    check_aligned(out, "4. Every row");
    CHECK(out && strstr(out, "qkv_attn_reference"), "does not name the kernel");
    free(out);
}

TEST(explain_no_mask_shows_the_cheat) {
    const char *argv[] = {"explain", "--no-mask", NULL};
    char *out = run_ok(argv, NULL);
    /* 假 row: scores 0 0 1.414 0 -> 0.141 0.141 0.578 0.141, then its weight to the right */
    const double jia[] = {0.141, 0.141, 0.578, 0.141, 0.719};
    check_row(out, "4. Every row", "假", jia, 5, 3);
    const double shenqing[] = {0.179, 0.735, 0.043, 0.043};
    check_row(out, "4. Every row", "申请", shenqing, 4, 3);
    CHECK(out && strstr(out, "假 puts 0.578 on 怎么"), "no '假 puts 0.578 on 怎么'");
    CHECK(out && strstr(out, "copying the") && strstr(out, "answer"), "does not say why it cheats");
    CHECK(out && strstr(out, "mask    none"), "header does not say the mask is off");
    check_aligned(out, "4. Every row");
    free(out);
}

TEST(explain_no_scale_gives_0853) {
    const char *argv[] = {"explain", "--no-scale", NULL};
    char *out = run_ok(argv, NULL);
    const double r1[] = {4, 4, 54.598, 0.853};
    check_row(out, "2. The 申请 row", "假", r1, 4, 3);
    const double m3[] = {0.115, 0.853, 0.016, 0.016};
    check_row(out, "4. Every row", "申请", m3, 4, 3);
    CHECK(out && strstr(out, "0.853 instead of 0.735"), "no comparison 0.853 vs 0.735");
    free(out);
}

TEST(explain_json) {
    const char *argv[] = {"explain", "--json", NULL};
    char *out = run_ok(argv, NULL);
    double v[64];
    const char *keys[] = {"\"kernel\": \"reference\"", "\"tokens\": [\"年\", \"假\", \"怎么\", \"申请\"]",
                          "\"dims\": [\"事项\", \"时间\", \"疑问\", \"动作\"]", "\"mask\": \"causal\"",
                          "\"d_head\": 2", "\"w_q\"", "\"w_k\"", "\"w_v\"", "\"focus\"", "\"outputs\"",
                          "\"lse\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(out && strstr(out, keys[i]), "JSON lacks %s", keys[i]);
    CHECK(cli_rounds_to(cli_json_number(out, "scale"), 0.70710678, 6), "scale is not 1/sqrt(2)");
    const char *focus = out ? strstr(out, "\"focus\"") : NULL;
    CHECK(focus != NULL, "no focus");
    CHECK(cli_json_number(focus, "index") == 3, "focus is not row 3 (申请)");
    const double scores[] = {1.414, 2.828, 0, 0}, ex[] = {4.113, 16.919, 1, 1},
                 w[] = {0.179, 0.735, 0.043, 0.043}, o[] = {1.648, 0.087};
    struct {
        const char *pat;
        const double *want;
        int n;
    } arrays[] = {{"\"scores\"", scores, 4}, {"\"exp\"", ex, 4}, {"\"weights\"", w, 4}, {"\"output\"", o, 2}};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        int n = cli_json_numbers(focus, arrays[i].pat, v, 64);
        CHECK(n == arrays[i].n, "focus %s: %d numbers", arrays[i].pat, n);
        for (int j = 0; j < n && j < arrays[i].n; j++)
            CHECK(cli_rounds_to(v[j], arrays[i].want[j], 3), "focus %s[%d] = %.6f, want %.3f",
                  arrays[i].pat, j, v[j], arrays[i].want[j]);
    }
    CHECK(cli_rounds_to(cli_json_number(focus, "sum_exp"), 23.032, 3), "sum_exp");
    CHECK(cli_rounds_to(cli_json_number(focus, "lse"), log(23.032), 3), "lse");
    /* the whole causal matrix */
    const double m[16] = {1, 0, 0, 0, 0.5, 0.5, 0, 0, 0.284, 0.576, 0.140, 0, 0.179, 0.735, 0.043, 0.043};
    int n = cli_json_numbers(out, "\"weights\": [[", v, 64);
    CHECK(n == 16, "weights matrix: %d numbers", n);
    for (int i = 0; i < 16 && i < n; i++)
        CHECK(cli_rounds_to(v[i], m[i], 3), "weights[%d][%d] = %.6f, want %.3f", i / 4, i % 4, v[i], m[i]);
    free(out);

    const char *argv2[] = {"explain", "--json", "--no-mask", "--no-scale", NULL};
    out = run_ok(argv2, NULL);
    CHECK(out && strstr(out, "\"mask\": \"none\""), "--no-mask JSON mask is not none");
    CHECK(cli_json_number(out, "scale") == 1.0, "--no-scale JSON scale is not 1");
    CHECK(out && strstr(out, "\"baseline\""), "no baseline with --no-mask");
    n = cli_json_numbers(out ? strstr(out, "\"focus\"") : NULL, "\"weights\"", v, 64);
    CHECK(n == 4 && cli_rounds_to(v[1], 0.853, 3), "unscaled 申请 -> 假 is not 0.853");
    free(out);
}

TEST(explain_input_file_and_example_round_trip) {
    /* The built-in example printed by --example and read back gives the same JSON. */
    const char *ex_argv[] = {"explain", "--example", NULL};
    char *example = run_ok(ex_argv, NULL);
    CHECK(example && strstr(example, "tokens 年 假 怎么 申请"), "--example does not print the tokens");
    const char *a1[] = {"explain", "--json", NULL}, *a2[] = {"explain", "--json", "--input", "-", NULL};
    char *j1 = run_ok(a1, NULL), *j2 = run_ok(a2, example);
    CHECK(j1 && j2 && !strcmp(j1, j2), "--input of the --example text differs from the built-in run");
    free(j1);
    free(j2);
    free(example);

    /* A file of one's own: 3 tokens, 2-dim inputs, 1-dim values, focus on the middle. */
    const char *mine =
        "# identity projections\n"
        "tokens the cat sat\n"
        "x\n1 0\n0 1\n1 1\n"
        "w_q\n1 0\n0 1\n"
        "w_k\n1 0\n0 1\n"
        "w_v\n1\n2\n"
        "focus cat\n";
    char path[600];
    snprintf(path, sizeof path, "%s/mine.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(mine, f);
    fclose(f);
    const char *a3[] = {"explain", "--input", path, NULL};
    char *out = run_ok(a3, NULL);
    /* cat row (causal): q = [0, 1]; keys the [1, 0] -> 0, cat [0, 1] -> 1/sqrt(2):
     * weights 1/(1+e^0.7071) = 0.330 and 0.670 */
    const double cat[] = {0.330, 0.670};
    check_row(out, "4. Every row", "cat", cat, 2, 3);
    CHECK(out && strstr(out, "2. The cat row"), "focus line not honoured");
    CHECK(out && strstr(out, "x1"), "default dim names missing");
    check_aligned(out, "4. Every row");
    free(out);
}

/* The opening line: the article's sentence cut by the real Llama-3 tokenizer
 * (models/llama3-vocab.gguf, from `make model`; ids from quicktok-v1 0.4.0). */
TEST(explain_opens_with_llama3_tokens) {
    const char *argv[] = {"explain", "--vocab", "no/such/vocab.gguf", NULL};
    char *out = run_ok(argv, NULL);
    const char *line = out ? strstr(out, "\n  Llama-3 no tokens: no/such/vocab.gguf") : NULL;
    const char *hint = line ? strstr(line, "make model") : NULL;
    CHECK(hint && hint < strchr(line + 1, '\n'),
          "missing vocab: one line naming it: %s", out ? out : "");
    CHECK(out && strstr(out, "= [1.648, 0.087]"), "the walk still runs without the vocab");
    free(out);
    const char *input[] = {"explain", "--input", "-", NULL};
    out = run_ok(input, "tokens a b\nx\n1 0\n0 1\nw_q\n1\n1\nw_k\n1\n1\nw_v\n1\n1\n");
    CHECK(out && !strstr(out, "Llama-3"), "no Llama-3 line for --input: %s", out ? out : "");
    free(out);

    if (!test_require_file("models/llama3-vocab.gguf", "the Llama-3 vocab GGUF: run `make model`")) return;
    const char *dflt[] = {"explain", NULL};
    out = run_ok(dflt, NULL);
    CHECK(out && strstr(out, "\n\n  Llama-3 年假怎么申请？ = 年 假 怎么 申请 ？   (5 tokens, ids 8107 107099 "
                             "104237 112838 11571; the example is the first 4)\n  tokens  年 假 怎么 申请"),
          "explain opens with the Llama-3 tokens: %s", out ? out : "");
    free(out);
}

TEST(explain_bad_input) {
    CHECK_BAD_INPUT("explain", "--bogus");
    CHECK_BAD_INPUT("explain", "--input");
    CHECK_BAD_INPUT("explain", "--input", "/nonexistent/example.txt");
    CHECK_BAD_INPUT("explain", "--example", "--input", "x");
    const char *bad[] = {
        "x\n1 0\n",                                                       /* no tokens */
        "tokens a b\nx\n1 0\n0 1\nw_q\n1\n1\nw_k\n1\n1\n",                 /* no w_v */
        "tokens a b\nx\n1 0\n0 1 2\nw_q\n1\n1\nw_k\n1\n1\nw_v\n1\n1\n",    /* ragged x */
        "tokens a b\nx\n1 0\n0 one\nw_q\n1\n1\nw_k\n1\n1\nw_v\n1\n1\n",    /* not a number */
        "tokens a b\nx\n1 0\n0 1\nw_q\n1\n1\nw_k\n1 2\n1 2\nw_v\n1\n1\n",  /* q, k dims differ */
        "tokens a b\nx\n1 0\n0 1\nw_q\n1\n1\nw_k\n1\n1\nw_v\n1\n1\nfocus z\n", /* unknown focus */
        "tokens a b\nx\n1 0\n0 1\nw_q\n1\n1\nw_k\n1\n1\nw_v\n1\n1\nbogus\n",   /* stray word */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"explain", "--input", "-", NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_cli(argv, bad[i], &out, &err);
        CHECK(rc == 2, "bad input %zu: exit %d", i, rc);
        CHECK(out && out[0] == 0, "bad input %zu: stdout not empty", i);
        CHECK(err && !strncmp(err, "qkv: ", 5) && strchr(err, '\n') && strchr(err, '\n')[1] == 0,
              "bad input %zu: stderr is not one line: %s", i, err ? err : "");
        free(out);
        free(err);
    }
}

TEST(text_width_counts_cjk_as_two) {
    struct {
        const char *s;
        int w;
    } cases[] = {
        {"", 0},          {"abc", 3},        {"年", 2},        {"怎么", 4},       {"申请 row", 8},
        {"Ａ", 2},        {"한", 2},         {"か", 2},        {"e\xcc\x81", 1},  {"\xc3\xa9", 1},
        {"\xf0\x9f\x98\x80", 2}, {"\xff", 1}, {"\xe5\xb9", 2},   {"√d", 2},         {"\xe3\x80\x80", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(qkv_text_width(cases[i].s) == cases[i].w, "width of case %zu is %d, want %d", i,
              qkv_text_width(cases[i].s), cases[i].w);
    uint32_t cp;
    CHECK(qkv_text_next(&cp, "年") == 3 && cp == 0x5E74, "decode 年");
    CHECK(qkv_text_next(&cp, "\xc0\xaf") == 1 && cp == 0xFFFD, "overlong '/' accepted");
    CHECK(qkv_text_next(&cp, "\xed\xa0\x80") == 1 && cp == 0xFFFD, "surrogate accepted");
    CHECK(qkv_text_next(&cp, "") == 0, "NUL is not the end");
}
