/*
 * test_oracle_attn.c — every kernel, the tiled ones on every ISA this CPU
 * runs (test_for_each_isa: QKV_ISA narrows the sweep), against golden O and
 * LSE produced outside this project by PyTorch's scaled_dot_product_attention
 * (float64, explicit boolean mask, K/V repeat_interleave'd for GQA), and for
 * soft-capped scores by flex_attention with Gemma 2's score_mod
 * c tanh(s / c): tests/fixtures/attn/, made by
 * tools/oracle/make_attn_fixtures.py. Manifest line per case:
 *
 *     name hq hkv lq lk d mask window sinks exclude scale softcap
 *
 * Tolerances: O within 1e-5 * max|O_golden| + 1e-7 (float32 accumulation over
 * up to 777 keys against a float64 oracle); LSE within 1e-5 + 1e-6 * |LSE|;
 * -inf (fully masked rows) must match exactly, and O there must be exactly 0.
 * Soft-capped cases take the same bounds: the kernels' tanh is within 2 ulp
 * (tests/test_attn_kernels.c), so a capped score s' carries at most ~3e-7 |s'|
 * of error (|s'| < c <= 50 here: 1.5e-5 at the very worst, ~1e-6 typical),
 * less than the float accumulation of the dot product under it.
 */
#include "qkv.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CASES 128
#define MAX_EXCL 64

typedef struct {
    char name[96];
    int hq, hkv, lq, lk, d;
    qkv_mask_kind kind;
    int window, sinks;
    int exclude[MAX_EXCL];
    int n_exclude;
    float scale, softcap;
} attn_case;

static int parse_kind(qkv_mask_kind *k, const char *s) {
    if (!strcmp(s, "none")) *k = QKV_MASK_NONE;
    else if (!strcmp(s, "causal")) *k = QKV_MASK_CAUSAL;
    else if (!strcmp(s, "window")) *k = QKV_MASK_WINDOW;
    else if (!strcmp(s, "sinkwindow")) *k = QKV_MASK_SINK_WINDOW;
    else return -1;
    return 0;
}

/* Reads the manifest; returns the number of cases, or -1 after a CHECK failure. */
static int load_manifest(attn_case *cases, int max) {
    char path[512];
    snprintf(path, sizeof path, "%s/attn/manifest.txt", test_fixture_dir());
    char *text = test_read_file(path, NULL);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return -1;
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t') line++;
        if (*line == 0 || *line == '#') continue;
        CHECK(n < max, "too many cases in %s", path);
        if (n >= max) break;
        attn_case *c = &cases[n];
        memset(c, 0, sizeof *c);
        char kind[32], excl[512];
        int got = sscanf(line, "%95s %d %d %d %d %d %31s %d %d %511s %f %f", c->name, &c->hq,
                         &c->hkv, &c->lq, &c->lk, &c->d, kind, &c->window, &c->sinks, excl,
                         &c->scale, &c->softcap);
        CHECK(got == 12, "malformed manifest line: %s", line);
        if (got != 12) continue;
        CHECK(parse_kind(&c->kind, kind) == 0, "%s: unknown mask kind %s", c->name, kind);
        if (strcmp(excl, "-") != 0) {
            char *s2 = NULL;
            for (char *tok = strtok_r(excl, ",", &s2); tok; tok = strtok_r(NULL, ",", &s2)) {
                CHECK(c->n_exclude < MAX_EXCL, "%s: too many exclusions", c->name);
                if (c->n_exclude < MAX_EXCL) c->exclude[c->n_exclude++] = atoi(tok);
            }
        }
        n++;
    }
    free(text);
    CHECK(n > 0, "no cases in %s", path);
    return n;
}

/* Loads <name>.<part>.npy as float32 with the expected element count. */
static float *load_part(const attn_case *c, const char *part, int64_t count, int ndim) {
    char path[512];
    snprintf(path, sizeof path, "%s/attn/%s.%s.npy", test_fixture_dir(), c->name, part);
    qkv_npy a;
    qkv_error err = {0};
    qkv_status st = qkv_npy_load(&a, path, &err);
    CHECK(st == QKV_OK, "%s: %s", path, err.msg);
    if (st != QKV_OK) return NULL;
    int ok = a.type == QKV_NPY_F32 && a.count == count && a.ndim == ndim;
    CHECK(ok, "%s: type %d ndim %d count %lld, want f32 ndim %d count %lld", path, (int)a.type,
          a.ndim, (long long)a.count, ndim, (long long)count);
    if (!ok) {
        qkv_npy_free(&a);
        return NULL;
    }
    float *data = a.data; /* ownership moves to the caller (malloc'd) */
    a.data = NULL;
    qkv_npy_free(&a);
    return data;
}

/* The case's descriptor (its exclusions point into c). */
static qkv_attn_desc desc_of(const attn_case *c, int n_threads) {
    return (qkv_attn_desc){.n_q_head = c->hq, .n_kv_head = c->hkv, .q_len = c->lq, .kv_len = c->lk,
                           .head_dim = c->d, .scale = c->scale, .softcap = c->softcap,
                           .mask = {.kind = c->kind, .window = c->window, .sinks = c->sinks,
                                    .exclude = c->n_exclude ? c->exclude : NULL, .n_exclude = c->n_exclude},
                           .kv_dtype = QKV_DTYPE_F32, .n_threads = n_threads};
}

/* Runs every case through one kernel; returns the number of cases run. */
static int run_kernel(qkv_kernel kernel, int n_threads) {
    static attn_case cases[MAX_CASES];
    int n = load_manifest(cases, MAX_CASES);
    int ran = 0;
    for (int ci = 0; ci < n; ci++) {
        const attn_case *c = &cases[ci];
        if (kernel == QKV_KERNEL_DECODE && c->lq > QKV_DECODE_MAX_Q) continue;
        int64_t nq = (int64_t)c->hq * c->lq * c->d, nkv = (int64_t)c->hkv * c->lk * c->d;
        int64_t nl = (int64_t)c->hq * c->lq;
        float *q = load_part(c, "q", nq, 3), *k = load_part(c, "k", nkv, 3),
              *v = load_part(c, "v", nkv, 3), *o_want = load_part(c, "o", nq, 3),
              *lse_want = load_part(c, "lse", nl, 2);
        float *o = malloc((size_t)nq * sizeof *o), *lse = malloc((size_t)nl * sizeof *lse);
        if (q && k && v && o_want && lse_want && o && lse) {
            /* poison the outputs so an unwritten element cannot pass */
            for (int64_t i = 0; i < nq; i++) o[i] = NAN;
            for (int64_t i = 0; i < nl; i++) lse[i] = NAN;
            const qkv_attn_desc d = desc_of(c, n_threads);
            qkv_error err = {0};
            qkv_status st = qkv_attn(o, lse, q, k, v, &d, kernel, &err);
            CHECK(st == QKV_OK, "%s [%s %s]: status %s: %s", c->name, qkv_kernel_name(kernel), qkv_attn_isa(),
                  qkv_status_str(st), err.msg);
            if (st == QKV_OK) {
                double omax = 0;
                for (int64_t i = 0; i < nq; i++)
                    if (fabs(o_want[i]) > omax) omax = fabs(o_want[i]);
                char what[160];
                snprintf(what, sizeof what, "%.95s [%.15s %.8s threads=%d] O", c->name,
                         qkv_kernel_name(kernel), qkv_attn_isa(), n_threads);
                double od = CHECK_CLOSE(what, o, o_want, (size_t)nq, 1e-5 * omax + 1e-7, 0);
                snprintf(what, sizeof what, "%.95s [%.15s %.8s threads=%d] LSE", c->name,
                         qkv_kernel_name(kernel), qkv_attn_isa(), n_threads);
                double ld = CHECK_CLOSE(what, lse, lse_want, (size_t)nl, 1e-5, 1e-6);
                /* fully masked rows: exactly -inf and exactly zero output */
                for (int64_t r = 0; r < nl; r++) {
                    if (!isinf(lse_want[r])) continue;
                    int zero = 1;
                    for (int e = 0; e < c->d; e++)
                        if (o[r * c->d + e] != 0.0f) zero = 0;
                    CHECK(zero && isinf(lse[r]) && lse[r] < 0,
                          "%s [%s]: fully masked row %lld: lse %g, O not all zero", c->name,
                          qkv_kernel_name(kernel), (long long)r, lse[r]);
                }
                if (getenv("QKV_TEST_VERBOSE"))
                    fprintf(stderr, "  %-36s %-7s %-6s max|dO| %.3g (max|O| %.3g)  max|dLSE| %.3g\n",
                            c->name, qkv_kernel_name(kernel), qkv_attn_isa(), od, omax, ld);
            }
            ran++;
        }
        free(q);
        free(k);
        free(v);
        free(o_want);
        free(lse_want);
        free(o);
        free(lse);
    }
    return ran;
}

TEST(oracle_attn_reference) { CHECK(run_kernel(QKV_KERNEL_REFERENCE, 0) > 0, "no case ran"); }

static void flash_cases(void) { CHECK(run_kernel(QKV_KERNEL_FLASH, 0) > 0, "no case ran"); }
TEST(oracle_attn_flash) { test_for_each_isa(flash_cases); }

static void decode_cases(void) {
    CHECK(run_kernel(QKV_KERNEL_DECODE, 0) > 0, "no case ran");
    /* more threads than cores: uneven KV splits, merged by LSE */
    CHECK(run_kernel(QKV_KERNEL_DECODE, 5) > 0, "no case ran");
}
TEST(oracle_attn_decode) { test_for_each_isa(decode_cases); }

static void auto_cases(void) { CHECK(run_kernel(QKV_KERNEL_AUTO, 0) > 0, "no case ran"); }
TEST(oracle_attn_auto) { test_for_each_isa(auto_cases); }

/* The reference kernel's weights: each row sums to 1 (or is all 0 for a
 * fully masked row), and qkv_attn_weights recomputes them from the golden
 * LSE within 1e-5 (+1e-5 relative: exp of a float score and LSE, |s| < 70). */
TEST(oracle_attn_reference_weights) {
    static attn_case cases[MAX_CASES];
    int n = load_manifest(cases, MAX_CASES);
    for (int ci = 0; ci < n; ci++) {
        const attn_case *c = &cases[ci];
        int64_t nq = (int64_t)c->hq * c->lq * c->d, nkv = (int64_t)c->hkv * c->lk * c->d;
        int64_t nl = (int64_t)c->hq * c->lq;
        float *q = load_part(c, "q", nq, 3), *k = load_part(c, "k", nkv, 3),
              *v = load_part(c, "v", nkv, 3), *o_want = load_part(c, "o", nq, 3),
              *lse_want = load_part(c, "lse", nl, 2);
        float *o = malloc((size_t)nq * sizeof *o), *lse = malloc((size_t)nl * sizeof *lse),
              *w = malloc((size_t)(nl * c->lk) * sizeof *w), *w2 = malloc((size_t)c->lq * c->lk * sizeof *w2);
        if (q && k && v && o_want && lse_want && o && lse && w && w2) {
            const qkv_attn_desc d = desc_of(c, 1);
            qkv_error err = {0};
            qkv_status st = qkv_attn_reference(o, lse, w, q, k, v, &d, &err);
            CHECK(st == QKV_OK, "%s: %s", c->name, err.msg);
            if (st == QKV_OK) {
                double worst = 0;
                for (int64_t r = 0; r < nl; r++) {
                    double sum = 0;
                    for (int j = 0; j < c->lk; j++) sum += w[r * c->lk + j];
                    double want = isinf(lse_want[r]) ? 0.0 : 1.0;
                    if (fabs(sum - want) > worst) worst = fabs(sum - want);
                }
                CHECK(worst < 1e-5, "%s: weight rows sum off by %g", c->name, worst);
                double omax = 0;
                for (int64_t i = 0; i < nq; i++)
                    if (fabs(o_want[i]) > omax) omax = fabs(o_want[i]);
                char what[160];
                snprintf(what, sizeof what, "%.95s [reference+weights] O", c->name);
                CHECK_CLOSE(what, o, o_want, (size_t)nq, 1e-5 * omax + 1e-7, 0);
                /* the maps' weights: exp(cap(s) - LSE) from the golden LSE, every row of every head */
                for (int h = 0; h < c->hq && w2; h++) {
                    st = qkv_attn_weights(w2, q, lse_want, k, &d, h, 0, c->lq, 0, c->lk, &err);
                    CHECK(st == QKV_OK, "%s: qkv_attn_weights: %s", c->name, err.msg);
                    snprintf(what, sizeof what, "%.95s [qkv_attn_weights head %d]", c->name, h);
                    if (st == QKV_OK) CHECK_CLOSE(what, w2, w + (size_t)h * c->lq * c->lk, (size_t)c->lq * c->lk, 1e-5, 1e-5);
                }
            }
        }
        free(q);
        free(k);
        free(v);
        free(o_want);
        free(lse_want);
        free(o);
        free(lse);
        free(w);
        free(w2);
    }
}
