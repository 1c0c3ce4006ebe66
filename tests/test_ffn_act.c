/*
 * test_ffn_act.c — the feed-forward activations (src/model/ffn_act.c), on
 * every ISA this CPU runs plus scalar, against their readable twin with
 * libm: GELU-tanh and SiLU over every
 * 257th float of either sign from 2^-20 to 64 (the range gates take, and
 * the tails where 1 + tanh and exp(-g) saturate), within the bound stated
 * at model_ffn_act: |act - reference| <= 6 * 2^-24 * |g|. A wrong constant
 * or branch misses by far more (a tanh off by 1e-3 is ~2^14 of it). Also:
 * the product with up, the same bits on 1 and 3 threads and at any
 * position (a vector's tail takes the lanes' arithmetic), 0 and NaN.
 */
#include "model/internal.h"
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* every 257th float in [2^-20, 64], then the same negated: *n of them */
static float *act_arguments(size_t *n) {
    uint32_t lo, hi;
    float a = 0x1p-20f, b = 64.0f;
    memcpy(&lo, &a, 4);
    memcpy(&hi, &b, 4);
    const size_t half = (hi - lo) / 257 + 1;
    float *x = malloc(2 * half * sizeof *x);
    for (size_t i = 0; i < half; i++) {
        uint32_t u = lo + (uint32_t)i * 257;
        memcpy(&x[i], &u, 4);
        x[half + i] = -x[i];
    }
    *n = 2 * half;
    return x;
}

/* max |y - want| / (2^-24 |x|) */
static double worst_units(const float *y, const float *want, const float *x, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)y[i] - (double)want[i]) / (0x1p-24 * fabs((double)x[i]));
        if (!(e <= worst)) worst = e; /* a NaN result makes it NaN: fails */
    }
    return worst;
}

static void check_act(qkv_ffn_act act, const char *act_name) {
    char name[64];
    snprintf(name, sizeof name, "%s %s", qkv_attn_isa(), act_name);
    size_t n;
    float *x = act_arguments(&n);
    float *ones = malloc(n * sizeof *ones), *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want),
          *y1 = malloc(n * sizeof *y1);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    memcpy(y, x, n * sizeof *y);
    memcpy(want, x, n * sizeof *want);
    memcpy(y1, x, n * sizeof *y1);
    model_ffn_act(y, ones, n, act, 3);
    model_ffn_act_reference(want, ones, n, act);
    model_ffn_act(y1, ones, n, act, 1);
    const double worst = worst_units(y, want, x, n);
    CHECK(worst <= 6, "%s: off its libm twin by %.2f * 2^-24 |g|", name, worst);
    CHECK(memcmp(y, y1, n * sizeof *y) == 0, "%s: 1 and 3 threads differ", name);
    /* any position: 7 elements from an odd offset (a vector and a tail) */
    float part[7];
    memcpy(part, x + 1001, sizeof part);
    model_ffn_act(part, ones, 7, act, 1);
    CHECK(memcmp(part, y + 1001, sizeof part) == 0, "%s: a short call's bits differ from the long call's", name);
    /* times up */
    float g[5] = {0.0f, NAN, 1.5f, -2.25f, 3.0f}, up[5] = {1.0f, 1.0f, -2.0f, 0.5f, 0.0f}, one[5] = {1, 1, 1, 1, 1};
    float plain[5];
    memcpy(plain, g, sizeof plain);
    model_ffn_act(plain, one, 5, act, 1);
    model_ffn_act(g, up, 5, act, 1);
    CHECK(g[0] == 0 && isnan(g[1]) && g[2] == plain[2] * -2.0f && g[3] == plain[3] * 0.5f && g[4] == 0,
          "%s: act(g) * up: %g %g %g %g %g", name, g[0], g[1], g[2], g[3], g[4]);
    if (getenv("QKV_TEST_VERBOSE"))
        fprintf(stderr, "  %s: max %.2f * 2^-24 |g| from libm's, over %zu floats\n", name, worst, n);
    free(x);
    free(ones);
    free(y);
    free(want);
    free(y1);
}

static void check_gelu(void) { check_act(QKV_FFN_GELU_TANH, "gelu_tanh"); }
static void check_silu(void) { check_act(QKV_FFN_SILU, "silu"); }

TEST(ffn_act_gelu_tanh_within_its_bound) { test_for_each_isa(check_gelu); }

TEST(ffn_act_silu_within_its_bound) { test_for_each_isa(check_silu); }
