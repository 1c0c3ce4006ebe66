/*
 * test_oracle_rope.c — qkv_rope_inv_freq and qkv_rope_apply against golden
 * values made outside this project: tests/fixtures/rope/, written by
 * tools/oracle/make_rope_fixtures.py. "half" comes from transformers'
 * LlamaRotaryEmbedding + apply_rotary_pos_emb (default and llama3 rope types);
 * "interleaved" from Meta's reference apply_rotary_emb (complex multiply by
 * torch.polar(1, pos * inv_freq)) with the same inv_freq. Manifest line:
 *
 *     name pairing theta scaling factor low high orig h t d
 *
 * Tolerances.
 *   inv_freq: rtol 1e-6 (about 8 float32 ulps; transformers computes it in
 *   float32 with torch.pow, the library with its own float32 arithmetic).
 *   Measured: bit-identical for every case.
 *   rotated x: both sides form the angle as the float32 product
 *   (float)pos * inv_freq, so with bit-identical inv_freq the angles are
 *   bit-identical even at pos = 100000 (where one ulp of the angle is
 *   ~8e-3 rad), and what is left is cos/sin rounding (<= 1 ulp each in torch's
 *   SLEEF and in libm) plus two products and a sum in float32: a few ulps of
 *   |x| (inputs are N(0,1), |x| < 5, ulp <= 4.8e-7). Measured max diff:
 *   2.4e-7 (one ulp) for rotate-half, 0 for interleaved. ROPE_ATOL 1e-6 plus
 *   ROPE_RTOL 1e-6 allows 2-4 ulps, room for FMA / no-FMA and vector / scalar
 *   builds and a different libm. If inv_freq differed by one ulp instead, the
 *   angle at pos 1e5 would move by up to 1e5 * 6e-8 ~ 6e-3 rad and the output
 *   by ~1e-2: this test catches that, which is intended (transformers'
 *   inv_freq and float32 angle are the contract).
 */
#include "qkv.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROPE_ATOL 1e-6
#define ROPE_RTOL 1e-6

typedef struct {
    char name[96];
    char pairing[32];
    char scaling[32];
    float theta, factor, low, high;
    int orig, h, t, d;
} rope_case;

static void *load_npy(const char *name, const char *part, qkv_npy_type type, int64_t count) {
    char path[512];
    snprintf(path, sizeof path, "%s/rope/%s.%s.npy", test_fixture_dir(), name, part);
    qkv_npy a;
    qkv_error err = {0};
    qkv_status st = qkv_npy_load(&a, path, &err);
    CHECK(st == QKV_OK, "%s: %s", path, err.msg);
    if (st != QKV_OK) return NULL;
    int ok = a.type == type && a.count == count;
    CHECK(ok, "%s: type %d count %lld, want type %d count %lld", path, (int)a.type,
          (long long)a.count, (int)type, (long long)count);
    void *data = ok ? a.data : NULL;
    if (ok) a.data = NULL;
    qkv_npy_free(&a);
    return data;
}

static int load_manifest(rope_case *cases, int max) {
    char path[512];
    snprintf(path, sizeof path, "%s/rope/manifest.txt", test_fixture_dir());
    char *text = test_read_file(path, NULL);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return 0;
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        if (*line == 0 || *line == '#') continue;
        rope_case *c = &cases[n];
        int got = sscanf(line, "%95s %31s %f %31s %f %f %f %d %d %d %d", c->name, c->pairing,
                         &c->theta, c->scaling, &c->factor, &c->low, &c->high, &c->orig, &c->h,
                         &c->t, &c->d);
        CHECK(got == 11, "malformed manifest line: %s", line);
        if (got == 11) n++;
    }
    free(text);
    CHECK(n > 0, "no cases in %s", path);
    return n;
}

static qkv_rope case_rope(const rope_case *c) {
    qkv_rope r = qkv_rope_default();
    r.pairing = strcmp(c->pairing, "interleaved") == 0 ? QKV_ROPE_INTERLEAVED : QKV_ROPE_HALF;
    r.theta = c->theta;
    if (strcmp(c->scaling, "llama3") == 0) {
        r.scaling = QKV_ROPE_SCALING_LLAMA3;
        r.factor = c->factor;
        r.low_freq_factor = c->low;
        r.high_freq_factor = c->high;
        r.original_max_position = c->orig;
    } else {
        r.scaling = QKV_ROPE_SCALING_NONE;
    }
    return r;
}

TEST(oracle_rope_inv_freq) {
    rope_case cases[64];
    int n = load_manifest(cases, 64);
    for (int ci = 0; ci < n; ci++) {
        const rope_case *c = &cases[ci];
        float *want = load_npy(c->name, "inv_freq", QKV_NPY_F32, c->d / 2);
        float *got = calloc((size_t)c->d / 2, sizeof *got);
        if (want && got) {
            qkv_rope r = case_rope(c);
            qkv_error err = {0};
            qkv_status st = qkv_rope_inv_freq(got, &r, c->d, &err);
            CHECK(st == QKV_OK, "%s: %s", c->name, err.msg);
            char what[160];
            snprintf(what, sizeof what, "%.95s inv_freq", c->name);
            double md = CHECK_CLOSE(what, got, want, (size_t)c->d / 2, 0, 1e-6);
            int exact = 0;
            for (int i = 0; i < c->d / 2; i++) exact += got[i] == want[i];
            if (getenv("QKV_TEST_VERBOSE"))
                fprintf(stderr, "  %-34s inv_freq max diff %.3g, %d/%d bit-identical\n", c->name,
                        md, exact, c->d / 2);
        }
        free(want);
        free(got);
    }
}

TEST(oracle_rope_apply) {
    rope_case cases[64];
    int n = load_manifest(cases, 64);
    for (int ci = 0; ci < n; ci++) {
        const rope_case *c = &cases[ci];
        int64_t count = (int64_t)c->h * c->t * c->d;
        float *x = load_npy(c->name, "x", QKV_NPY_F32, count);
        float *want = load_npy(c->name, "out", QKV_NPY_F32, count);
        int64_t *pos = load_npy(c->name, "pos", QKV_NPY_I64, c->t);
        if (x && want && pos) {
            qkv_rope r = case_rope(c);
            qkv_error err = {0};
            qkv_status st = qkv_rope_apply(x, pos, &r, c->h, c->t, c->d, &err);
            CHECK(st == QKV_OK, "%s: %s", c->name, err.msg);
            char what[160];
            snprintf(what, sizeof what, "%.95s rope", c->name);
            double md = CHECK_CLOSE(what, x, want, (size_t)count, ROPE_ATOL, ROPE_RTOL);
            if (getenv("QKV_TEST_VERBOSE"))
                fprintf(stderr, "  %-34s rope max diff %.3g\n", c->name, md);
        }
        free(x);
        free(want);
        free(pos);
    }
}
