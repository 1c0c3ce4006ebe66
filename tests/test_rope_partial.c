/*
 * test_rope_partial.c — qkv_rope's partial rotary (n_rot) and attention factor
 * (Phi-3's LongRoPE), against the definitions in qkv/attn.h:
 *   - the first n_rot dims of a head of D rotate exactly as a head of n_rot
 *     does (same bits: the same inv_freq and pairs), dims n_rot.. unchanged;
 *   - attn_factor f scales every rotated dim by f (cos and sin times f), and
 *     leaves the passed dims alone; f = 0 is f = 1, bit for bit;
 *   - a KV shift by -n is a pure rotation: keys rotated at p with factor f,
 *     shifted by n, equal keys rotated at p - n with factor f (1e-5 relative:
 *     two rotations in float against one);
 *   - n_rot odd, 1, or above D, and a negative or NaN factor are refused.
 * Reference values are computed here in double from the formula, so the
 * tolerance is float rounding of cos/sin and one multiply-add (1e-5).
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <string.h>

#define D 16

/* x [D] rotated at pos, the formula of qkv_rope_apply in double. */
static void rope_ref(double *out, const float *x, double pos, const qkv_rope *r) {
    const int dims = r->n_rot ? r->n_rot : D, half = dims / 2;
    const double f = r->attn_factor > 0 ? r->attn_factor : 1.0;
    for (int i = 0; i < D; i++) out[i] = x[i];
    for (int i = 0; i < half; i++) {
        const double inv = pow(r->theta, -(double)(2 * i) / dims) / (r->freq_factors ? r->freq_factors[i] : 1.0);
        const double c = cos(pos * inv) * f, s = sin(pos * inv) * f;
        const int a = r->pairing == QKV_ROPE_HALF ? i : 2 * i, b = r->pairing == QKV_ROPE_HALF ? i + half : 2 * i + 1;
        out[a] = x[a] * c - x[b] * s;
        out[b] = x[b] * c + x[a] * s;
    }
}

TEST(rope_partial_rotates_the_first_n_rot_dims) {
    float x[D], y[D], head[8];
    for (int i = 0; i < D; i++) x[i] = (float)sin(1.0 + 0.7 * i);
    const float factors[4] = {1.0f, 1.5f, 2.0f, 4.0f};
    for (int pairing = 0; pairing < 2; pairing++)
        for (int fi = 0; fi < 2; fi++) {
            qkv_rope r = qkv_rope_default();
            r.pairing = (qkv_rope_pairing)pairing;
            r.n_rot = 8;
            r.freq_factors = fi ? factors : NULL;
            const int64_t pos = 37;
            qkv_error err = {0};
            memcpy(y, x, sizeof x);
            CHECK(qkv_rope_apply(y, &pos, &r, 1, 1, D, &err) == QKV_OK, "%s", err.msg);
            /* the same as a whole head of 8, bit for bit */
            qkv_rope whole = r;
            whole.n_rot = 0;
            memcpy(head, x, sizeof head);
            CHECK(qkv_rope_apply(head, &pos, &whole, 1, 1, 8, &err) == QKV_OK, "%s", err.msg);
            CHECK(!memcmp(y, head, sizeof head), "pairing %d: dims 0..7 differ from a head of 8", pairing);
            CHECK(!memcmp(y + 8, x + 8, 8 * sizeof(float)), "pairing %d: dims 8..15 were changed", pairing);
            double want[D];
            rope_ref(want, x, (double)pos, &r);
            for (int i = 0; i < D; i++)
                CHECK(fabs(y[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "pairing %d dim %d: %g, want %g", pairing,
                      i, (double)y[i], want[i]);
            float inv[D / 2];
            CHECK(qkv_rope_inv_freq(inv, &r, D, &err) == QKV_OK, "%s", err.msg);
            CHECK(fabsf(inv[1] - powf(10000.0f, -2.0f / 8) / (fi ? 1.5f : 1.0f)) < 1e-7f, "inv_freq[1] = %g",
                  (double)inv[1]);
        }
}

TEST(rope_attn_factor_scales_the_rotated_dims) {
    float x[D], one[D], scaled[D], zero[D];
    for (int i = 0; i < D; i++) x[i] = (float)cos(0.3 + 1.1 * i);
    qkv_rope r = qkv_rope_default();
    r.n_rot = 12;
    const int64_t pos = 5;
    qkv_error err = {0};
    memcpy(one, x, sizeof x);
    memcpy(zero, x, sizeof x);
    r.attn_factor = 1.0f;
    CHECK(qkv_rope_apply(one, &pos, &r, 1, 1, D, &err) == QKV_OK, "%s", err.msg);
    r.attn_factor = 0.0f;
    CHECK(qkv_rope_apply(zero, &pos, &r, 1, 1, D, &err) == QKV_OK, "%s", err.msg);
    CHECK(!memcmp(one, zero, sizeof one), "attn_factor 0 must be 1, bit for bit");
    memcpy(scaled, x, sizeof x);
    r.attn_factor = 1.25f;
    CHECK(qkv_rope_apply(scaled, &pos, &r, 1, 1, D, &err) == QKV_OK, "%s", err.msg);
    for (int i = 0; i < 12; i++)
        CHECK(fabsf(scaled[i] - 1.25f * one[i]) <= 1e-6f * (1 + fabsf(one[i])), "dim %d: %g, want 1.25 x %g", i,
              (double)scaled[i], (double)one[i]);
    CHECK(!memcmp(scaled + 12, x + 12, 4 * sizeof(float)), "the passed dims were scaled");
}

TEST(rope_kv_shift_is_a_pure_rotation_with_attn_factor) {
    enum { N = 6, SHIFT = 2 };
    qkv_rope r = qkv_rope_default();
    r.n_rot = 10;
    r.attn_factor = 1.3f;
    float k[N * D], v[N * D], want[N * D], got[N * D];
    for (int i = 0; i < N * D; i++) k[i] = v[i] = (float)sin(0.37 * i + 0.1);
    memcpy(want, k, sizeof k);
    int64_t pos[N], moved[N];
    for (int t = 0; t < N; t++) pos[t] = 10 + t, moved[t] = 10 + t - SHIFT;
    qkv_error err = {0};
    CHECK(qkv_rope_apply(k, pos, &r, 1, N, D, &err) == QKV_OK, "%s", err.msg);
    qkv_kv_cache *c = NULL;
    CHECK(qkv_kv_cache_init(&c, 1, D, N, QKV_DTYPE_F32, &err) == QKV_OK, "%s", err.msg);
    if (!c) return;
    CHECK(qkv_kv_cache_append(c, k, v, N, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_kv_cache_shift(c, 0, SHIFT, &r, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_kv_cache_read(got, NULL, c, 0, N - SHIFT, &err) == QKV_OK, "%s", err.msg);
    /* row t now holds key t + SHIFT, as if rotated at its position less SHIFT */
    CHECK(qkv_rope_apply(want, moved, &r, 1, N, D, &err) == QKV_OK, "%s", err.msg);
    for (int t = 0; t < N - SHIFT; t++)
        for (int i = 0; i < D; i++) {
            const float w = want[(t + SHIFT) * D + i], g = got[t * D + i];
            CHECK(fabsf(g - w) <= 1e-5f * (1 + fabsf(w)), "row %d dim %d: %g, want %g", t, i, (double)g, (double)w);
        }
    qkv_kv_cache_free(c);
}

TEST(rope_partial_refuses_bad_n_rot_and_factor) {
    float x[D] = {0};
    const int64_t pos = 1;
    const int bad[] = {1, 7, D + 2, -2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_rope r = qkv_rope_default();
        r.n_rot = bad[i];
        qkv_error err = {0};
        CHECK(qkv_rope_apply(x, &pos, &r, 1, 1, D, &err) == QKV_ERR_INVALID && strstr(err.msg, "n_rot"),
              "n_rot %d: must be refused naming n_rot (%s)", bad[i], err.msg);
    }
    const float factors[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 3; i++) {
        qkv_rope r = qkv_rope_default();
        r.attn_factor = factors[i];
        qkv_error err = {0};
        CHECK(qkv_rope_apply(x, &pos, &r, 1, 1, D, &err) == QKV_ERR_INVALID && strstr(err.msg, "attn_factor"),
              "attn_factor %g: must be refused (%s)", (double)factors[i], err.msg);
    }
}
