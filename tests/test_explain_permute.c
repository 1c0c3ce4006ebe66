/*
 * test_explain_permute.c — `qkv explain --permute`, the article's last claim:
 * without RoPE the last token's output does not depend on the order of the
 * tokens before it; with RoPE it does.
 *   - The article's 4 tokens: all 6 orderings of 年 假 怎么 before 申请 give
 *     申请 the same output bit for bit with RoPE off. Exact, not rounding:
 *     v is [1,0] [2,0] [0,1] [0,1], so each output column adds two non-zero
 *     terms (a + b = b + a, and adding 0 is exact), and the command measures
 *     the softmax sum's reordering by hand in double as 0. With RoPE on every
 *     other ordering moves it by more than 0.03 (the smallest of the five is
 *     0.040, for 假 年 怎么).
 *   - A real layer (SmolLM2 and Gemma 3, every layer, 16 orderings): RoPE off
 *     within 8·n·u·max|v| (u = 2^-24): two sums of n terms (Σ e^s and Σ w v)
 *     reordered each move by at most 2(n-1)u of their magnitude, the quotient
 *     by 4(n-1)u·max|v|, doubled for the online softmax's rescaling; RoPE on
 *     moves it by more than 1% of the output's largest value (measured: 3.6%
 *     SmolLM2, 2.2% Gemma 3 at the least). The recomputed row matches the
 *     model's own hook_z within 1e-5 of its size (another tiling of the same
 *     sums), the whole model's layer-0 input is unchanged by a permuted
 *     prompt and its layer-0 attention output moves as the layer's RoPE-on
 *     row does, and every later layer's input moves.
 *   - Bad flags: one line on stderr, exit 2.
 */
#include "testing.h"

#include "clitext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* noinline: inlined, gcc 12 takes the address of its out for one kept by the caller (-Wdangling-pointer) */
__attribute__((noinline)) static char *run_ok(const char *const *argv) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0 && err && !*err, "qkv explain --permute: exit %d, stderr: %s", rc, err ? err : "");
    free(err);
    return out;
}

TEST(explain_permute_article_example) {
    const char *json_argv[] = {"explain", "--permute", "--json", NULL}, *text_argv[] = {"explain", "--permute", NULL};
    char *out = run_ok(json_argv);
    CHECK(cli_json_number(out, "rope_off_bit_identical") == 6, "not all 6 orderings bit-identical");
    CHECK(cli_json_number(out, "rope_off_max_abs_double") == 0, "by hand in double the orderings differ");
    CHECK(cli_json_number(out, "rope_off_max_abs_fast") == 0, "the flash kernel's orderings differ");
    double first[2] = {0}, v[8];
    int count = 0;
    for (const char *p = out ? strstr(out, "{\"order\"") : NULL; p; p = strstr(p + 1, "{\"order\""), count++) {
        CHECK(cli_json_numbers(p, "\"rope_off\"", v, 8) == 2, "ordering %d: no rope_off", count);
        if (count == 0) {
            memcpy(first, v, sizeof first);
            CHECK(cli_rounds_to(v[0], 1.648, 3) && cli_rounds_to(v[1], 0.087, 3), "申请's output is [%g, %g]",
                  v[0], v[1]);
            continue;
        }
        CHECK(v[0] == first[0] && v[1] == first[1], "ordering %d: RoPE off [%.9g, %.9g], first [%.9g, %.9g]", count,
              v[0], v[1], first[0], first[1]);
        const double on = cli_json_number(p, "rope_on_max_abs");
        CHECK(on > 0.03, "ordering %d: RoPE on moves 申请 by %g only", count, on);
    }
    CHECK(count == 6, "%d orderings", count);
    /* 年 怎么 假 申请: the rows of 假 and 怎么 see other keys, 年's does not */
    const char *o2 = out ? strstr(out, "{\"order\": [\"年\", \"怎么\", \"假\", \"申请\"]") : NULL;
    CHECK(o2 && strstr(o2, "\"rows_seeing_other_keys\": [\"假\", \"怎么\"]"), "rows of 年 怎么 假: %s", o2 ? o2 : "");
    free(out);
    char *text = run_ok(text_argv);
    CHECK(text && strstr(text, "same for all 6 orderings, bit for bit"), "text does not say bit for bit");
    CHECK(text && strstr(text, "The mask still orders the other rows"), "text does not say what the mask orders");
    free(text);
}

/* Every layer of model on the default prompt. */
static void check_model(const char *model) {
    const char *argv[] = {"explain", "--permute", "-m", model, "--json", NULL};
    char *out = run_ok(argv);
    int layers = 0;
    for (const char *p = out ? strstr(out, "{\"layer\"") : NULL; p; p = strstr(p + 1, "{\"layer\""), layers++) {
        const double off = cli_json_number(p, "rope_off_max_abs"), on = cli_json_number(p, "rope_on_max_abs"),
                     o = cli_json_number(p, "output_max_abs"), bound = cli_json_number(p, "rounding_bound"),
                     self = cli_json_number(p, "vs_hook_z"), in = cli_json_number(p, "model_input_max_abs"),
                     z = cli_json_number(p, "model_attn_out_max_abs");
        CHECK(off <= bound, "%s layer %d: RoPE off moves the last row by %g, bound %g", model, layers, off, bound);
        CHECK(on > 0.01 * o, "%s layer %d: RoPE on moves it by %g of %g", model, layers, on, o);
        CHECK(self <= 1e-5 * o, "%s layer %d: recomputed row %g from hook_z (output %g)", model, layers, self, o);
        if (layers == 0) {
            CHECK(in == 0, "%s: layer 0's input moved by %g", model, in);
            CHECK(fabs(z - on) <= 1e-5 * o, "%s: layer 0 whole model %g, RoPE on %g", model, z, on);
        } else {
            CHECK(in > 0, "%s layer %d: the whole model's input did not move", model, layers);
        }
    }
    CHECK(layers >= 18, "%s: %d layers", model, layers);
    free(out);
}

TEST(explain_permute_smollm2_layers) {
    if (!test_require_model()) return;
    check_model(test_model_path());
}

TEST(explain_permute_gemma3_layers) {
    if (!test_require_gemma3()) return;
    check_model(test_gemma3_path());
    const char *argv[] = {"explain", "--permute", "-m", test_gemma3_path(), NULL};
    char *text = run_ok(argv);
    CHECK(text && strstr(text, "window 512") && strstr(text, "causal     1000000"), "sliding and global layers not shown");
    CHECK(text && strstr(text, "Sliding layers see the last 512 keys"), "no note on the window");
    free(text);
}

TEST(explain_permute_bad_flags) {
    CHECK_BAD_CLI(((const char *const[]){"explain", "-m", "x.gguf", NULL}), "-m needs --permute");
    CHECK_BAD_CLI(((const char *const[]){"explain", "--trials", "3", NULL}), "--trials needs --permute -m MODEL");
    CHECK_BAD_CLI(((const char *const[]){"explain", "--permute", "--trials", "0", NULL}), "out of range");
    CHECK_BAD_CLI(((const char *const[]){"explain", "--permute", "--no-mask", NULL}), "keeps the mask");
    CHECK_BAD_CLI(((const char *const[]){"explain", "--permute", "-m", "x.gguf", "--example", NULL}), "exclude");
    if (!test_require_model()) return;
    CHECK_BAD_CLI(((const char *const[]){"explain", "--permute", "-m", test_model_path(), "--tokens", "1,2", NULL}),
                  "3 tokens or more");
}
