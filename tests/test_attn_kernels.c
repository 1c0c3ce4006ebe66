/*
 * test_attn_kernels.c — flash and decode against the reference kernel on
 * randomised shapes: Lq = 1, Lk = 1, lengths that are no multiple of any tile,
 * D from 16 to 256 (72 and 80 included), GQA ratios 1, 4, 8 and MQA, every
 * mask kind, exclusions, all three KV dtypes, extreme scores, and every ISA
 * this CPU supports (QKV_ISA). Each fast path has its sweep: the block path
 * (prefill, R > VW/2 rows), the few-row path (decode, every R from 1 to 8),
 * flash-bf16 (against the exact attention of the inputs it rounds, bound
 * derived at check_bf16dot); soft-capped scores in each of them, and the
 * vector tanh under it against double tanh; plus qkv_kv_alloc.
 *
 * Tolerance: max |O_kernel - O_ref| <= 1e-5 * max |O_ref| (+1e-7 absolute),
 * LSE within 1e-5 (+1e-6 relative). With bf16/f16 KV both kernels read the
 * same rounded K and V (the reference converts them to double), so the
 * storage rounding cancels and the same bound applies; the looser bound for
 * storage rounding itself (bf16 2^-9, f16 2^-12 relative per element) is
 * tested separately against the f32 result.
 */
#include "testing.h"

#include "attn/internal.h"
#include "qkv.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int hq, hkv, lq, lk, d;
    qkv_mask_kind mask;
    int window, sinks, n_exclude;
    qkv_dtype dtype;
    float scale;
    float softcap; /* 0: none */
} shape;

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Runs one shape through ref and `kernel`; returns failures added. */
static void check_shape(const shape *s, qkv_kernel kernel, test_rng *rng, float q_sd, int integer_inputs) {
    size_t nq = (size_t)s->hq * s->lq * s->d, nkv = (size_t)s->hkv * s->lk * s->d;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    if (integer_inputs) { /* exact dot products: small integers, so extreme scores are exact */
        for (size_t i = 0; i < nq; i++) q[i] = (float)test_rng_int(rng, -3, 3);
        for (size_t i = 0; i < nkv; i++) k[i] = (float)test_rng_int(rng, -3, 3);
    } else {
        test_fill_normal(q, nq, rng, q_sd);
        test_fill_normal(k, nkv, rng, 1);
    }
    test_fill_normal(v, nkv, rng, 1);
    void *kd = malloc(nkv * 4), *vd = malloc(nkv * 4);
    qkv_convert_from_f32(kd, s->dtype, k, nkv);
    qkv_convert_from_f32(vd, s->dtype, v, nkv);
    int excl[16];
    for (int e = 0; e < s->n_exclude; e++) excl[e] = test_rng_int(rng, 0, s->lk - 1);
    qkv_attn_desc d = {.n_q_head = s->hq, .n_kv_head = s->hkv, .q_len = s->lq, .kv_len = s->lk, .head_dim = s->d,
                       .scale = s->scale, .softcap = s->softcap,
                       .mask = {.kind = s->mask, .window = s->window, .sinks = s->sinks, .exclude = excl,
                                .n_exclude = s->n_exclude},
                       .kv_dtype = s->dtype, .n_threads = 2};
    float *o_ref = malloc(nq * 4), *o = malloc(nq * 4);
    float *lse_ref = malloc((size_t)s->hq * s->lq * 4), *lse = malloc((size_t)s->hq * s->lq * 4);
    qkv_error err = {0};
    qkv_status st = qkv_attn_reference(o_ref, lse_ref, NULL, q, kd, vd, &d, &err);
    CHECK(st == QKV_OK, "reference failed: %s", err.msg);
    st = qkv_attn(o, lse, q, kd, vd, &d, kernel, &err);
    CHECK(st == QKV_OK, "%s failed: %s", qkv_kernel_name(kernel), err.msg);
    if (st == QKV_OK) {
        char what[200];
        snprintf(what, sizeof what, "%s %s O hq=%d hkv=%d lq=%d lk=%d d=%d mask=%d w=%d s=%d ex=%d %s cap=%g",
                 qkv_kernel_name(kernel), qkv_attn_isa(), s->hq, s->hkv, s->lq, s->lk, s->d, s->mask, s->window,
                 s->sinks, s->n_exclude, qkv_dtype_name(s->dtype), s->softcap);
        float scale = max_abs(o_ref, nq);
        CHECK_CLOSE(what, o, o_ref, nq, 1e-5 * scale + 1e-7, 0);
        snprintf(what, sizeof what, "%s %s LSE hq=%d lq=%d lk=%d d=%d mask=%d cap=%g", qkv_kernel_name(kernel),
                 qkv_attn_isa(), s->hq, s->lq, s->lk, s->d, s->mask, s->softcap);
        CHECK_CLOSE(what, lse, lse_ref, (size_t)s->hq * s->lq, 1e-5, 1e-6);
        for (size_t i = 0; i < nq; i++)
            if (isnan(o[i])) {
                CHECK(0, "NaN in output at %zu", i);
                break;
            }
    }
    free(q); free(k); free(v); free(kd); free(vd); free(o_ref); free(o); free(lse_ref); free(lse);
}

static shape random_shape(test_rng *r, int max_lq, int want_decode) {
    static const int ds[] = {16, 32, 64, 72, 80, 96, 128, 256};
    static const int groups[] = {1, 4, 8};
    shape s;
    s.d = ds[test_rng_int(r, 0, 7)];
    int g = test_rng_int(r, 0, 3);
    s.hkv = test_rng_int(r, 1, 3);
    s.hq = g < 3 ? s.hkv * groups[g] : 8; /* g == 3: MQA */
    if (g == 3) s.hkv = 1;
    s.lk = test_rng_int(r, 1, 3) == 1 ? test_rng_int(r, 1, 9) : test_rng_int(r, 1, 700);
    s.lq = test_rng_int(r, 1, want_decode ? 8 : max_lq);
    if (s.lq > s.lk && test_rng_int(r, 0, 1)) s.lq = s.lk;
    s.mask = (qkv_mask_kind)test_rng_int(r, 0, 3);
    s.window = test_rng_int(r, 1, 100);
    s.sinks = test_rng_int(r, 0, 6);
    s.n_exclude = test_rng_int(r, 0, 2) == 0 ? test_rng_int(r, 1, 16) : 0;
    s.dtype = (qkv_dtype)test_rng_int(r, 0, 2);
    s.scale = test_rng_int(r, 0, 4) == 0 ? 0.05f : 0;
    s.softcap = 0;
    return s;
}

static void sweep(qkv_kernel kernel, int want_decode, uint64_t seed, int n) {
    test_rng r = {seed};
    for (int i = 0; i < n && test_failures() < 10; i++) {
        shape s = random_shape(&r, 200, want_decode);
        check_shape(&s, kernel, &r, 1, 0);
    }
}

static void flash_sweep(void) { sweep(QKV_KERNEL_FLASH, 0, 11, 60); }
static void decode_sweep(void) { sweep(QKV_KERNEL_DECODE, 1, 12, 60); }

TEST(flash_matches_reference_random_shapes) { test_for_each_isa(flash_sweep); }
TEST(decode_matches_reference_random_shapes) { test_for_each_isa(decode_sweep); }

/* The few-row path (decode, and flash blocks of at most VW/2 rows: R = query
 * heads per KV head x positions <= 8) for every row count, lengths around the
 * fold width and the tile, every KV dtype and mask, on every ISA. */
static void few_rows_sweep(void) {
    test_rng r = {77};
    static const int gl[][2] = {{1, 1}, {1, 3}, {2, 2}, {3, 1}, {4, 1}, {4, 2}, {8, 1}, {1, 8}};
    static const int lks[] = {1, 15, 17, 64, 65, 300};
    int i = 0;
    for (size_t a = 0; a < sizeof gl / sizeof gl[0]; a++)
        for (size_t b = 0; b < sizeof lks / sizeof lks[0]; b++, i++) {
            int hkv = 1 + i % 2, d = i % 3 == 0 ? 16 : i % 3 == 1 ? 64 : 128;
            shape s = {gl[a][0] * hkv, hkv, gl[a][1], lks[b], d, (qkv_mask_kind)(i % 4), 7, 2, i % 5 == 0 ? 3 : 0,
                       (qkv_dtype)(i % 3), 0, 0};
            if (s.lq > s.lk) s.lq = s.lk;
            check_shape(&s, QKV_KERNEL_DECODE, &r, 1, 0);
            check_shape(&s, QKV_KERNEL_FLASH, &r, 1, 0);
        }
}
TEST(few_row_path_every_row_count) { test_for_each_isa(few_rows_sweep); }

/* The few-row path's tails (tile_impl.h): Q·Kᵀ runs along D two vectors a
 * step, so head dims with a last single vector (D = 24, 40 on AVX2; 16, 48,
 * 80, 144 on AVX-512), key counts that leave part of a fold (1, 13, 66,
 * 301), 1 to 4 rows, every KV dtype. */
static void few_layouts_sweep(void) {
    test_rng r = {91};
    static const int ds[] = {16, 24, 40, 48, 80, 144}, lks[] = {1, 13, 66, 301};
    int i = 0;
    for (size_t a = 0; a < sizeof ds / sizeof ds[0]; a++)
        for (size_t b = 0; b < sizeof lks / sizeof lks[0]; b++)
            for (int t = 0; t < 3; t++, i++) {
                shape s = {1 + i % 4, 1, 1, lks[b], ds[a], QKV_MASK_CAUSAL, 0, 0, 0, (qkv_dtype)t, 0, 0};
                check_shape(&s, QKV_KERNEL_DECODE, &r, 1, 0);
            }
}
TEST(few_row_path_head_dim_and_key_tails) { test_for_each_isa(few_layouts_sweep); }

/* bf16 pairs as floats: what flash-bf16 rounds its inputs to. */
static float bf16_of(float x) { return qkv_bf16_to_f32(qkv_f32_to_bf16(x)); }

/*
 * flash-bf16 against the exact attention (reference kernel, double) of the
 * inputs it rounds: queries bf16(scale * q) with scale 1, K and V as bf16.
 * What remains is the rounding of each weight p to bf16 before P·V:
 * |dO| <= 2^-8 * sum_j p_j |v_j| / l <= 2^-8 max|V|, plus f32 accumulation
 * (1e-5 max|O|). LSE comes from f32 sums of exact bf16 products: 1e-4.
 * Where the CPU has no AVX512_BF16 (or QKV_ISA excludes avx512), or D is odd,
 * flash-bf16 is the flash kernel and must match the plain reference exactly.
 */
static void check_bf16dot(const shape *s, test_rng *rng) {
    size_t nq = (size_t)s->hq * s->lq * s->d, nkv = (size_t)s->hkv * s->lk * s->d, nl = (size_t)s->hq * s->lq;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    float *q2 = malloc(nq * 4), *k2 = malloc(nkv * 4), *v2 = malloc(nkv * 4);
    void *kd = malloc(nkv * 4), *vd = malloc(nkv * 4);
    float *o = malloc(nq * 4), *o_ref = malloc(nq * 4), *lse = malloc(nl * 4), *lse_ref = malloc(nl * 4);
    test_fill_normal(q, nq, rng, 1);
    test_fill_normal(k, nkv, rng, 1);
    test_fill_normal(v, nkv, rng, 1);
    qkv_convert_from_f32(kd, s->dtype, k, nkv);
    qkv_convert_from_f32(vd, s->dtype, v, nkv);
    int excl[16];
    for (int e = 0; e < s->n_exclude; e++) excl[e] = test_rng_int(rng, 0, s->lk - 1);
    qkv_attn_desc d = {.n_q_head = s->hq, .n_kv_head = s->hkv, .q_len = s->lq, .kv_len = s->lk, .head_dim = s->d,
                       .scale = s->scale, .softcap = s->softcap,
                       .mask = {.kind = s->mask, .window = s->window, .sinks = s->sinks, .exclude = excl,
                                .n_exclude = s->n_exclude},
                       .kv_dtype = s->dtype, .n_threads = 2};
    qkv_error err = {0};
    CHECK(qkv_attn(o, lse, q, kd, vd, &d, QKV_KERNEL_FLASH_BF16, &err) == QKV_OK, "flash-bf16: %s", err.msg);
    const int rounded = attn_rows_bf16dot() != NULL && s->d % 2 == 0;
    float vmax = 0;
    if (rounded) {
        float scale = s->scale > 0 ? s->scale : 1.0f / sqrtf((float)s->d);
        for (size_t i = 0; i < nq; i++) q2[i] = bf16_of(q[i] * scale);
        qkv_convert_to_f32(k2, kd, s->dtype, nkv);
        qkv_convert_to_f32(v2, vd, s->dtype, nkv);
        for (size_t i = 0; i < nkv; i++) {
            k2[i] = bf16_of(k2[i]);
            v2[i] = bf16_of(v2[i]);
            vmax = fabsf(v2[i]) > vmax ? fabsf(v2[i]) : vmax;
        }
        qkv_attn_desc d2 = d;
        d2.scale = 1;
        d2.kv_dtype = QKV_DTYPE_F32;
        CHECK(qkv_attn_reference(o_ref, lse_ref, NULL, q2, k2, v2, &d2, &err) == QKV_OK, "%s", err.msg);
    } else {
        CHECK(qkv_attn_reference(o_ref, lse_ref, NULL, q, kd, vd, &d, &err) == QKV_OK, "%s", err.msg);
    }
    char what[160];
    snprintf(what, sizeof what, "flash-bf16%s O hq=%d hkv=%d lq=%d lk=%d d=%d mask=%d ex=%d %s", rounded ? "" : " (exact)",
             s->hq, s->hkv, s->lq, s->lk, s->d, s->mask, s->n_exclude, qkv_dtype_name(s->dtype));
    float omax = max_abs(o_ref, nq);
    CHECK_CLOSE(what, o, o_ref, nq, rounded ? 0x1p-8 * vmax + 1e-5 * omax + 1e-6 : 1e-5 * omax + 1e-7, 0);
    snprintf(what, sizeof what, "flash-bf16 LSE lq=%d lk=%d d=%d", s->lq, s->lk, s->d);
    CHECK_CLOSE(what, lse, lse_ref, nl, rounded ? 1e-4 : 1e-5, 1e-5);
    free(q); free(k); free(v); free(q2); free(k2); free(v2); free(kd); free(vd);
    free(o); free(o_ref); free(lse); free(lse_ref);
}

static void bf16dot_sweep(void) {
    test_rng r = {21};
    for (int i = 0; i < 60 && test_failures() < 10; i++) {
        shape s = random_shape(&r, 200, 0);
        if (i % 10 == 0) s.d = 17 + 2 * (i % 3); /* odd D: exact fallback */
        check_bf16dot(&s, &r);
    }
    /* Llama and SmolLM2 heads, several tiles, every dtype */
    for (int t = 0; t < 3; t++) {
        shape a = {32, 8, 150, 333, 128, QKV_MASK_CAUSAL, 0, 0, 0, (qkv_dtype)t, 0, 0};
        shape b = {9, 3, 200, 200, 64, QKV_MASK_CAUSAL, 0, 0, 0, (qkv_dtype)t, 0, 0};
        check_bf16dot(&a, &r);
        check_bf16dot(&b, &r);
    }
}
TEST(flash_bf16_matches_reference_of_rounded_inputs) { test_for_each_isa(bf16dot_sweep); }

/* Wide blocks (attn_flash_block_rows: ATTN_MAX_ROWS rows where a block walks
 * K/V past the caches) on the shapes that take them: a whole wide block and
 * a short last one, the Llama and SmolLM2 groups (128 and 126 rows), G = 8,
 * every KV dtype, a sink window with exclusions. Each shape is first checked
 * to take wide blocks, so the test cannot drift off the path it is for. */
static void wide_blocks_cases(void) {
    test_rng r = {31};
    const shape shapes[] = {
        {4, 1, 40, 6200, 128, QKV_MASK_CAUSAL, 0, 0, 0, QKV_DTYPE_F32, 0, 0},
        {6, 2, 50, 12400, 64, QKV_MASK_SINK_WINDOW, 12300, 4, 5, QKV_DTYPE_F16, 0, 0},
        {8, 1, 20, 8300, 96, QKV_MASK_NONE, 0, 0, 0, QKV_DTYPE_BF16, 0, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        static const float x = 0;
        qkv_attn_desc d = {.n_q_head = s->hq, .n_kv_head = s->hkv, .q_len = s->lq, .kv_len = s->lk,
                           .head_dim = s->d, .mask = {.kind = s->mask, .window = s->window, .sinks = s->sinks},
                           .kv_dtype = s->dtype};
        attn_problem P;
        qkv_error err = {0};
        CHECK(qkv_attn_check(&d, &err) == QKV_OK, "%s", err.msg);
        attn_problem_init(&P, &d, &x, &x, &x, NULL);
        CHECK(attn_flash_block_rows(&P) == ATTN_MAX_ROWS, "shape %zu does not take wide blocks", i);
        check_shape(s, QKV_KERNEL_FLASH, &r, 1, 0);
    }
}
TEST(flash_wide_blocks_match_reference) { test_for_each_isa(wide_blocks_cases); }

/* ------------------------------------------------------------ soft-capping */

/* Max error of x -> tanh x against double tanh, in units in the last place
 * of the float nearest tanh x, over xs [n]; also whether it is odd
 * (f(-x) = -f(x) bit for bit: f sees -x in the second half of xs). */
static double tanh_ulps(const float *y, const float *xs, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double t = tanh((double)xs[i]);
        const float tf = fabsf((float)t);
        const double ulp = (double)nextafterf(tf, INFINITY) - tf;
        const double e = fabs(y[i] - t) / ulp;
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Every 211th float in [2^-30, 20] (1.4M), then the same negated: both
 * branches of the tanh, its split at 0.625, and where it rounds to 1. */
static float *tanh_arguments(size_t *n_out) {
    const uint32_t lo = 0x30800000u, hi = 0x41a00000u, step = 211; /* 2^-30, 20 */
    const size_t n = (hi - lo) / step;
    float *x = malloc(2 * n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        const uint32_t b = lo + (uint32_t)i * step;
        memcpy(&x[i], &b, sizeof b);
        x[n + i] = -x[i];
    }
    *n_out = 2 * n;
    return x;
}

/* The kernels' tanh (attn_isa.softcap with c = 1: c tanh(x / c) is then
 * tanh x, computed as the kernels compute it) on the process's ISA against
 * double tanh: at most 2.5 ulp (tools/tanh_poly.py predicts 2.0 with the
 * kernels' exp2; measured 2.05 here on AVX-512, AVX2 and scalar, and over
 * every 61st float 2.1, scalar 2.2: its polynomials round twice a step,
 * without FMA), and odd, 0 at 0, exactly +-1 from |x| = 9 and at +-inf,
 * NaN kept. */
static void tanh_isa(void) {
    size_t n;
    float *x = tanh_arguments(&n), *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    attn_isa_best()->softcap(y, (int)n, 1.0f);
    const double err = tanh_ulps(y, x, n);
    CHECK(err <= 2.5, "%s: vector tanh off by %.2f ulp", qkv_attn_isa(), err);
    for (size_t i = 0; i < n / 2; i++)
        if (y[n / 2 + i] != -y[i]) {
            CHECK(0, "%s: tanh(-x) != -tanh(x) at x = %a", qkv_attn_isa(), x[i]);
            break;
        }
    float edge[7] = {0.0f, -0.0f, 9.0f, -9.0f, INFINITY, -INFINITY, NAN};
    attn_isa_best()->softcap(edge, 7, 1.0f); /* also a vector's tail, 7 % VW */
    CHECK(edge[0] == 0 && edge[1] == 0 && edge[2] == 1 && edge[3] == -1 && edge[4] == 1 && edge[5] == -1 &&
              isnan(edge[6]),
          "%s: tanh of 0, -0, 9, -9, inf, -inf, NaN: %g %g %g %g %g %g %g", qkv_attn_isa(), edge[0], edge[1],
          edge[2], edge[3], edge[4], edge[5], edge[6]);
    if (getenv("QKV_TEST_VERBOSE")) fprintf(stderr, "  %-6s vector tanh: max %.2f ulp over %zu floats\n", qkv_attn_isa(), err, n);
    free(x);
    free(y);
}

/* The scalar twin (attn_tanhf, with libm's expf): at most 2.5 ulp too
 * (measured 1.5), odd; libm's own tanhf, for scale, measured 2.1 (glibc). */
TEST(softcap_tanh_within_2_5_ulp_on_every_isa) {
    test_for_each_isa(tanh_isa);
    size_t n;
    float *x = tanh_arguments(&n), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
    for (size_t i = 0; i < n; i++) y[i] = attn_tanhf(x[i]), z[i] = tanhf(x[i]);
    const double err = tanh_ulps(y, x, n), err_libm = tanh_ulps(z, x, n);
    CHECK(err <= 2.5, "attn_tanhf off by %.2f ulp", err);
    for (size_t i = 0; i < n / 2; i++)
        if (y[n / 2 + i] != -y[i]) {
            CHECK(0, "attn_tanhf(-x) != -attn_tanhf(x) at x = %a", x[i]);
            break;
        }
    CHECK(isnan(attn_tanhf(NAN)) && attn_tanhf(INFINITY) == 1 && attn_tanhf(-INFINITY) == -1, "attn_tanhf edges");
    if (getenv("QKV_TEST_VERBOSE"))
        fprintf(stderr, "  attn_tanhf: max %.2f ulp, libm tanhf %.2f ulp, over %zu floats\n", err, err_libm, n);
    free(x);
    free(y);
    free(z);
}

/*
 * Soft-capping in every kernel against the reference's c tanh(s / c) in
 * double, under the usual bounds: a capped score carries at most 2.5 ulp of
 * the tanh times c, ~3e-7 |s'|, as little as the float score itself.
 * Caps from saturating (0.5: every weight from a score near +-c) to Gemma
 * 2's 50, queries at sd 1 and 3 (scores to ~+-15: both tanh branches), on
 * the block path, the few-row path, decode's splits, wide blocks and
 * flash-bf16 (against the exact attention of the inputs it rounds, as above).
 */
static void softcap_cases(void) {
    static const float caps[] = {0.5f, 2, 8, 50};
    test_rng r = {41};
    for (int i = 0; i < 24 && test_failures() < 10; i++) {
        shape s = random_shape(&r, 150, i % 2);
        s.softcap = caps[i % 4];
        check_shape(&s, i % 2 ? QKV_KERNEL_DECODE : QKV_KERNEL_FLASH, &r, i % 3 ? 1 : 3, 0);
    }
    static const int gl[][2] = {{1, 1}, {2, 1}, {1, 3}, {4, 1}, {2, 3}, {8, 1}}; /* R = G x Lq <= 8: the few-row path */
    for (int i = 0; i < 6; i++) {
        shape s = {gl[i][0], 1, gl[i][1], 300, 64, QKV_MASK_CAUSAL, 0, 0, 2, (qkv_dtype)(i % 3), 0, 2};
        check_shape(&s, QKV_KERNEL_FLASH, &r, 3, 0);
        check_shape(&s, QKV_KERNEL_DECODE, &r, 3, 0);
    }
    shape wide = {4, 1, 40, 6200, 128, QKV_MASK_CAUSAL, 0, 0, 0, QKV_DTYPE_BF16, 0, 5};
    check_shape(&wide, QKV_KERNEL_FLASH, &r, 3, 0);
    shape gemma = {8, 4, 70, 70, 256, QKV_MASK_SINK_WINDOW, 32, 1, 3, QKV_DTYPE_F32, 0, 50};
    check_shape(&gemma, QKV_KERNEL_FLASH, &r, 3, 0);
    for (int i = 0; i < 4; i++) {
        shape s = random_shape(&r, 150, 0);
        s.softcap = caps[i];
        check_bf16dot(&s, &r);
    }
}
TEST(softcap_matches_reference_in_every_kernel) { test_for_each_isa(softcap_cases); }

/* A cap far above every score is no capping (c tanh(s / c) = s but for the
 * rounding of s / c and back), in every kernel: the capped path against the
 * plain one. */
TEST(softcap_far_above_the_scores_changes_nothing) {
    test_rng r = {8};
    const int hq = 8, hkv = 2, lq = 37, lk = 90, dd = 64;
    const size_t nq = (size_t)hq * lq * dd, nkv = (size_t)hkv * lk * dd;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *a = malloc(nq * 4), *b = malloc(nq * 4);
    test_fill_normal(q, nq, &r, 2);
    test_fill_normal(k, nkv, &r, 1);
    test_fill_normal(v, nkv, &r, 1);
    qkv_attn_desc d = {.n_q_head = hq, .n_kv_head = hkv, .q_len = lq, .kv_len = lk, .head_dim = dd,
                       .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 1};
    for (int kern = 1; kern <= 4; kern++) {
        d.q_len = kern == QKV_KERNEL_DECODE ? 8 : lq;
        d.softcap = 0;
        qkv_error err = {0};
        CHECK(qkv_attn(a, NULL, q, k, v, &d, (qkv_kernel)kern, &err) == QKV_OK, "%s", err.msg);
        d.softcap = 1e30f;
        CHECK(qkv_attn(b, NULL, q, k, v, &d, (qkv_kernel)kern, &err) == QKV_OK, "%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "%s softcap 1e30 vs 0", qkv_kernel_name((qkv_kernel)kern));
        CHECK_CLOSE(what, b, a, (size_t)hq * d.q_len * dd, 1e-6, 0);
    }
    free(q); free(k); free(v); free(a); free(b);
}

TEST(flash_and_decode_edge_lengths) {
    test_rng r = {5};
    /* Lq = 1, Lk = 1; Lq = Lk = tile +- 1; Lq > Lk (rows before the first key are fully masked) */
    const int lens[][2] = {{1, 1}, {1, 2}, {2, 1}, {63, 63}, {64, 64}, {65, 65}, {1, 4097}, {8, 1000},
                           {5, 3}, {130, 129}};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int m = 0; m < 4; m++) {
            shape s = {8, 2, lens[i][0], lens[i][1], 72, (qkv_mask_kind)m, 7, 2, 0, QKV_DTYPE_F32, 0, 0};
            check_shape(&s, QKV_KERNEL_FLASH, &r, 1, 0);
            if (s.lq <= 8) check_shape(&s, QKV_KERNEL_DECODE, &r, 1, 0);
        }
}

TEST(extreme_scores_are_exact_and_finite) {
    /* integer q, k with |q.k| up to 3*3*128 and scale 8: scores to ~1e4 */
    test_rng r = {99};
    for (int m = 0; m < 4; m++) {
        shape s = {8, 2, 33, 300, 128, (qkv_mask_kind)m, 50, 3, 0, QKV_DTYPE_F32, 8.0f, 0};
        check_shape(&s, QKV_KERNEL_FLASH, &r, 1, 1);
        shape t = {8, 2, 3, 1500, 128, (qkv_mask_kind)m, 50, 3, 0, QKV_DTYPE_F32, -0.0f, 0};
        t.scale = 8.0f;
        check_shape(&t, QKV_KERNEL_DECODE, &r, 1, 1);
    }
}

TEST(fully_masked_rows_give_zero_and_minus_inf) {
    /* every key excluded: all rows fully masked */
    int excl[5] = {0, 1, 2, 3, 4};
    qkv_attn_desc d = {.n_q_head = 4, .n_kv_head = 2, .q_len = 3, .kv_len = 5, .head_dim = 16,
                       .mask = {.kind = QKV_MASK_CAUSAL, .exclude = excl, .n_exclude = 5}, .n_threads = 1};
    float q[4 * 3 * 16], k[2 * 5 * 16], v[2 * 5 * 16], o[4 * 3 * 16], lse[12];
    test_rng r = {3};
    test_fill_normal(q, sizeof q / 4, &r, 1);
    test_fill_normal(k, sizeof k / 4, &r, 1);
    test_fill_normal(v, sizeof v / 4, &r, 1);
    for (int kern = 1; kern <= 3; kern++) {
        qkv_error err = {0};
        CHECK(qkv_attn(o, lse, q, k, v, &d, (qkv_kernel)kern, &err) == QKV_OK, "%s", err.msg);
        for (int i = 0; i < 4 * 3 * 16; i++) CHECK(o[i] == 0, "kernel %d: O[%d] = %g, want 0", kern, i, o[i]);
        for (int i = 0; i < 12; i++) CHECK(isinf(lse[i]) && lse[i] < 0, "kernel %d: LSE[%d] = %g", kern, i, lse[i]);
    }
}

TEST(kv_storage_rounding_stays_within_its_bound) {
    /* bf16 / f16 KV against the f32 result: |dO| <= eps_dtype * (max|V| + |O| * spread)
     * in practice; we check a bound of 8 ulps of the storage type times max|V|. */
    test_rng r = {42};
    int hq = 8, hkv = 2, lq = 40, lk = 300, dd = 128;
    size_t nq = (size_t)hq * lq * dd, nkv = (size_t)hkv * lk * dd;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o32 = malloc(nq * 4),
          *o = malloc(nq * 4);
    uint16_t *k16 = malloc(nkv * 2), *v16 = malloc(nkv * 2);
    test_fill_normal(q, nq, &r, 1);
    test_fill_normal(k, nkv, &r, 1);
    test_fill_normal(v, nkv, &r, 1);
    qkv_attn_desc d = {.n_q_head = hq, .n_kv_head = hkv, .q_len = lq, .kv_len = lk, .head_dim = dd,
                       .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 2};
    qkv_attn(o32, NULL, q, k, v, &d, QKV_KERNEL_FLASH, NULL);
    const qkv_dtype types[2] = {QKV_DTYPE_BF16, QKV_DTYPE_F16};
    const double eps[2] = {1.0 / 256, 1.0 / 2048}; /* 2 ulps at bf16 / f16 precision */
    for (int t = 0; t < 2; t++) {
        qkv_convert_from_f32(k16, types[t], k, nkv);
        qkv_convert_from_f32(v16, types[t], v, nkv);
        d.kv_dtype = types[t];
        qkv_attn(o, NULL, q, k16, v16, &d, QKV_KERNEL_FLASH, NULL);
        /* scores move by <= eps * |q||k| / sqrt(D) ~ eps * 1 (unit-variance inputs, 4 sd margin),
         * so weights move by a factor within exp(+-4 eps); V moves by eps relative. */
        double bound = 4 * eps[t] * max_abs(v, nkv);
        char what[64];
        snprintf(what, sizeof what, "flash %s KV vs f32", qkv_dtype_name(types[t]));
        CHECK_CLOSE(what, o, o32, nq, bound, 0);
    }
    free(q); free(k); free(v); free(o32); free(o); free(k16); free(v16);
}

TEST(kernel_names_round_trip) {
    for (int k = 0; k <= 4; k++) {
        qkv_kernel back;
        CHECK(qkv_kernel_parse(&back, qkv_kernel_name((qkv_kernel)k), NULL) == QKV_OK && (int)back == k, "kernel %d", k);
    }
}

/* The parse functions say what was wrong through qkv_error, as qkv_hook_parse does. */
TEST(kernel_and_dtype_parse_name_what_was_given) {
    qkv_kernel k;
    qkv_dtype t;
    qkv_error err = {0};
    CHECK(qkv_kernel_parse(&k, "flashy", &err) == QKV_ERR_INVALID && strstr(err.msg, "\"flashy\"") &&
              strstr(err.msg, "flash-bf16"),
          "kernel: %s", err.msg);
    err.msg[0] = 0;
    CHECK(qkv_dtype_parse(&t, "fp32", &err) == QKV_ERR_INVALID && strstr(err.msg, "\"fp32\"") && strstr(err.msg, "bf16"),
          "dtype: %s", err.msg);
    CHECK(qkv_dtype_parse(&t, NULL, NULL) == QKV_ERR_INVALID && qkv_kernel_parse(&k, NULL, NULL) == QKV_ERR_INVALID,
          "NULL names");
    CHECK(qkv_dtype_parse(&t, "f16", &err) == QKV_OK && t == QKV_DTYPE_F16, "f16");
}

TEST(auto_picks_decode_for_short_queries) {
    qkv_attn_desc d = {.n_q_head = 32, .n_kv_head = 8, .q_len = 1, .kv_len = 4096, .head_dim = 128,
                       .mask = {.kind = QKV_MASK_CAUSAL}};
    CHECK(qkv_attn_pick(&d) == QKV_KERNEL_DECODE, "Lq=1 Lk=4096 should use decode");
    d.q_len = 512;
    CHECK(qkv_attn_pick(&d) == QKV_KERNEL_FLASH, "Lq=512 should use flash");
}

TEST(bad_descriptors_are_refused_with_a_message) {
    float x[4096];
    memset(x, 0, sizeof x);
    qkv_attn_desc good = {.n_q_head = 4, .n_kv_head = 2, .q_len = 2, .kv_len = 3, .head_dim = 16,
                          .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 1};
    qkv_attn_desc bad[9];
    for (int i = 0; i < 9; i++) bad[i] = good;
    bad[0].n_q_head = 3;          /* not a multiple of 2 */
    bad[1].head_dim = 8;          /* too small */
    bad[2].head_dim = 300;        /* too large */
    bad[3].q_len = 0;
    bad[4].mask.kind = QKV_MASK_WINDOW; /* window 0 */
    bad[5].scale = -1;
    bad[6].softcap = -1;
    bad[7].softcap = NAN;
    bad[8].softcap = INFINITY;
    for (int i = 0; i < 9; i++) {
        qkv_error err = {0};
        qkv_status st = qkv_attn(x, NULL, x, x, x, &bad[i], QKV_KERNEL_FLASH, &err);
        CHECK(st == QKV_ERR_INVALID && err.msg[0], "case %d: status %d msg '%s'", i, st, err.msg);
        if (i >= 6) CHECK(strstr(err.msg, "softcap") != NULL, "case %d: '%s' does not name softcap", i, err.msg);
    }
    good.q_len = 9;
    qkv_error err = {0};
    CHECK(qkv_attn(x, NULL, x, x, x, &good, QKV_KERNEL_DECODE, &err) == QKV_ERR_INVALID,
          "decode with Lq=9 must be refused");
}

TEST(reference_refuses_a_huge_score_table) {
    qkv_attn_desc d = {.n_q_head = 32, .n_kv_head = 8, .q_len = 32768, .kv_len = 32768, .head_dim = 128,
                       .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 1};
    float x[16] = {0};
    qkv_error err = {0};
    qkv_status st = qkv_attn_reference(x, NULL, NULL, x, x, x, &d, &err);
    CHECK(st == QKV_ERR_TOO_LARGE, "status %d", st);
    CHECK(strstr(err.msg, "flash") != NULL, "message should point to the flash kernel: %s", err.msg);
}

TEST(kv_alloc_any_size_is_writable_and_aligned_from_2mib) {
    const size_t sizes[] = {0, 1, 4095, ((size_t)2 << 20) - 1, (size_t)2 << 20, ((size_t)2 << 20) + 1, (size_t)9 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = qkv_kv_alloc(sizes[i]);
        CHECK(p != NULL, "qkv_kv_alloc(%zu) failed", sizes[i]);
        if (!p) continue;
        if (sizes[i] >= ((size_t)2 << 20)) CHECK(((uintptr_t)p & (((uintptr_t)2 << 20) - 1)) == 0, "%zu: not 2 MiB aligned", sizes[i]);
        memset(p, 0xab, sizes[i]);
        CHECK(sizes[i] == 0 || (p[0] == 0xab && p[sizes[i] - 1] == 0xab), "%zu: not writable", sizes[i]);
        qkv_kv_free(p);
    }
    qkv_kv_free(NULL);
}

/* ------------------------------------------------------ non-finite numbers */

/* What a row of O and LSE must be (qkv/attn.h, "Non-finite numbers"). */
typedef enum { ROW_FINITE, ROW_MASKED, ROW_NAN, ROW_NEG_INF } row_class;
static const char *const row_class_names[] = {"finite", "masked (O = 0, LSE = -inf)", "NaN",
                                              "LSE = -inf, O = NaN"};

static row_class class_of(const float *o, float lse, int d) {
    int nan = 0, zero = 0, finite = 0;
    for (int e = 0; e < d; e++) nan += isnan(o[e]), zero += o[e] == 0, finite += isfinite(o[e]);
    if (lse == -INFINITY && zero == d) return ROW_MASKED;
    if (lse == -INFINITY && nan == d) return ROW_NEG_INF;
    if (isnan(lse) && nan == d) return ROW_NAN;
    return isfinite(lse) && finite == d ? ROW_FINITE : (row_class)-1;
}

enum { NF_HQ = 2, NF_HKV = 1, NF_L = 6, NF_D = 16 };

/* Every kernel on q, k, v (causal, Lq = Lk = 6, 2 query heads on one KV
 * head, the given exclusions, scores capped at softcap > 0): each row in the
 * class `want` says, finite rows equal to the reference's within the usual
 * bound. */
static void check_non_finite(const char *what, const float *q, const float *k, const float *v, const int *excl,
                             int n_excl, float softcap, const row_class want[NF_HQ][NF_L]) {
    const qkv_attn_desc d = {.n_q_head = NF_HQ, .n_kv_head = NF_HKV, .q_len = NF_L, .kv_len = NF_L,
                             .head_dim = NF_D, .softcap = softcap,
                             .mask = {.kind = QKV_MASK_CAUSAL, .exclude = excl, .n_exclude = n_excl}, .n_threads = 1};
    float o_ref[NF_HQ * NF_L * NF_D], lse_ref[NF_HQ * NF_L], o[NF_HQ * NF_L * NF_D], lse[NF_HQ * NF_L];
    qkv_error err = {0};
    CHECK(qkv_attn_reference(o_ref, lse_ref, NULL, q, k, v, &d, &err) == QKV_OK, "%s", err.msg);
    qkv_kv_cache *c = NULL;
    CHECK(qkv_kv_cache_init(&c, NF_HKV, NF_D, NF_L, QKV_DTYPE_F32, &err) == QKV_OK &&
              qkv_kv_cache_append(c, k, v, NF_L, &err) == QKV_OK,
          "cache: %s", err.msg);
    static const qkv_kernel kernels[] = {QKV_KERNEL_REFERENCE, QKV_KERNEL_FLASH, QKV_KERNEL_DECODE,
                                         QKV_KERNEL_FLASH_BF16};
    for (int kc = 0; kc < 2 * 4; kc++) { /* each kernel on the arrays, then on the cache */
        const qkv_kernel kern = kernels[kc % 4];
        const int cached = kc >= 4;
        qkv_status st = cached ? qkv_attn_cached(o, lse, q, c, &d, kern, &err)
                               : qkv_attn(o, lse, q, k, v, &d, kern, &err);
        CHECK(st == QKV_OK, "%s %s: %s", what, qkv_kernel_name(kern), err.msg);
        if (st) continue;
        for (int h = 0; h < NF_HQ; h++)
            for (int i = 0; i < NF_L; i++) {
                const size_t row = (size_t)h * NF_L + i;
                const row_class got = class_of(o + row * NF_D, lse[row], NF_D),
                                ref = class_of(o_ref + row * NF_D, lse_ref[row], NF_D);
                CHECK(got == want[h][i] && ref == want[h][i], "%s, %s%s (%s), head %d row %d: %s (reference %s), want %s",
                      what, qkv_kernel_name(kern), cached ? " cached" : "", qkv_attn_isa(), h, i,
                      got < 4 ? row_class_names[got] : "mixed", ref < 4 ? row_class_names[ref] : "mixed",
                      row_class_names[want[h][i]]);
                if (got != ROW_FINITE || want[h][i] != ROW_FINITE) continue;
                /* flash-bf16 rounds Q and p to bf16: its own bound (check_bf16dot); 1e-2 covers it here */
                const double tol = kern == QKV_KERNEL_FLASH_BF16 ? 1e-2 : 1e-5;
                for (int e = 0; e < NF_D; e++) {
                    const float a = o[row * NF_D + e], b = o_ref[row * NF_D + e];
                    CHECK(fabsf(a - b) <= tol * (1 + fabsf(b)), "%s %s head %d row %d O[%d] %g, reference %g", what,
                          qkv_kernel_name(kern), h, i, e, a, b);
                }
                CHECK(fabsf(lse[row] - lse_ref[row]) <= tol * (1 + fabsf(lse_ref[row])),
                      "%s %s head %d row %d LSE %g, reference %g", what, qkv_kernel_name(kern), h, i, lse[row],
                      lse_ref[row]);
            }
    }
    qkv_kv_cache_free(c);
}

static void fill_row(float *x, float value) {
    for (int e = 0; e < NF_D; e++) x[e] = value;
}

static void non_finite_cases(void) {
    test_rng r = {17};
    float q[NF_HQ * NF_L * NF_D], k[NF_HKV * NF_L * NF_D], v[NF_HKV * NF_L * NF_D];
#define Q(h, i) (q + ((size_t)(h) * NF_L + (i)) * NF_D)
#define K(j) (k + (size_t)(j) * NF_D)
    /* A: key 0 excluded, so row 0 sees nothing; a NaN in one query; a score
     * overflowing to +inf (q = k = 1e30); huge finite scores (q = 1e30 against
     * ordinary keys, ordinary queries against k = 1e30) */
    test_fill_normal(q, sizeof q / sizeof q[0], &r, 1);
    test_fill_normal(k, sizeof k / sizeof k[0], &r, 1);
    test_fill_normal(v, sizeof v / sizeof v[0], &r, 1);
    Q(0, 1)[5] = NAN;
    fill_row(Q(0, 2), 1e30f), fill_row(Q(1, 2), 1e30f);
    fill_row(K(3), 1e30f);
    fill_row(Q(0, 4), 1e30f), fill_row(Q(1, 4), 1e30f);
    const int excl[1] = {0};
    const row_class want_a[NF_HQ][NF_L] = {
        {ROW_MASKED, ROW_NAN, ROW_FINITE, ROW_FINITE, ROW_NAN, ROW_FINITE},
        {ROW_MASKED, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_NAN, ROW_FINITE}};
    check_non_finite("NaN, 1e30, masked", q, k, v, excl, 1, 0, want_a);
    /* capped, +-inf and huge scores are +-c: only the NaN and the masked row stay */
    const row_class want_a_cap[NF_HQ][NF_L] = {
        {ROW_MASKED, ROW_NAN, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE},
        {ROW_MASKED, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE}};
    check_non_finite("NaN, 1e30, masked, softcap 5", q, k, v, excl, 1, 5, want_a_cap);
    /* B: every key at -1e30 but key 4 at FLT_MAX: row 2 (q = 1e30) scores -inf on
     * every key it sees; row 5 (q = FLT_MAX) meets +inf; row 4 (q = 0) scores 0 */
    test_fill_normal(q, sizeof q / sizeof q[0], &r, 1);
    for (int j = 0; j < NF_L; j++) fill_row(K(j), j == 4 ? FLT_MAX : -1e30f);
    for (int h = 0; h < NF_HQ; h++) fill_row(Q(h, 2), 1e30f), fill_row(Q(h, 4), 0), fill_row(Q(h, 5), FLT_MAX);
    const row_class want_b[NF_HQ][NF_L] = {
        {ROW_FINITE, ROW_FINITE, ROW_NEG_INF, ROW_FINITE, ROW_FINITE, ROW_NAN},
        {ROW_FINITE, ROW_FINITE, ROW_NEG_INF, ROW_FINITE, ROW_FINITE, ROW_NAN}};
    check_non_finite("-inf scores, FLT_MAX", q, k, v, NULL, 0, 0, want_b);
    const row_class want_b_cap[NF_HQ][NF_L] = {
        {ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE},
        {ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE, ROW_FINITE}};
    check_non_finite("-inf scores, FLT_MAX, softcap 5", q, k, v, NULL, 0, 5, want_b_cap);
#undef Q
#undef K
}

TEST(non_finite_inputs_one_behaviour_in_every_kernel) { test_for_each_isa(non_finite_cases); }
