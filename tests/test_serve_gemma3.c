/*
 * test_serve_gemma3.c — `qkv serve` on Gemma 3 270M past its 512-key window:
 * the API's attention rows of a sliding layer (0) and a global layer (5) on a
 * prompt of about 700 tokens equal `qkv inspect --npy`'s, before and after
 * the window's reach, and a sliding layer's keys before its window weigh 0.
 */
#include "serve_client.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s as a JSON string body {"text": "..."}; malloc'd. */
static char *text_body(const char *s) {
    char *b = malloc(strlen(s) * 6 + 32), *o = b;
    if (!b) return NULL;
    o += sprintf(o, "{\"text\": \"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') o += sprintf(o, "\\%c", *p);
        else if (*p < 0x20) o += sprintf(o, "\\u%04x", *p);
        else *o++ = (char)*p;
    }
    strcpy(o, "\"}");
    return b;
}

TEST(serve_gemma3_rows_past_the_window) {
    if (!test_require_gemma3() || !test_require_file("/usr/share/common-licenses/GPL-3", "GPL-3 (Debian's base-files)")) return;
    const char *model = test_gemma3_path();
    size_t len = 0;
    char *gpl = test_read_file("/usr/share/common-licenses/GPL-3", &len);
    if (!gpl) return;
    gpl[len < 3000 ? len : 3000] = 0;
    char txt[700], npy[700];
    snprintf(txt, sizeof txt, "%s/serve-gpl.txt", test_tmpdir());
    snprintf(npy, sizeof npy, "%s/serve-gemma3.npy", test_tmpdir());
    test_write_file(txt, gpl);
    const char *argv[] = {"inspect", "-m", model, "-f", txt, "--layers", "0,5", "--npy", npy, NULL};
    char *out = NULL, *err = NULL;
    const int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "qkv inspect: exit %d: %s", rc, err ? err : "");
    free(out);
    free(err);
    int64_t count = 0;
    float *maps = rc ? NULL : test_load_npy(test_tmpdir(), "serve-gemma3.npy", "", &count);
    serve_child sv;
    const char *extra[] = {"--threads", "2", NULL};
    char *body = text_body(gpl);
    if (!maps || !body || !serve_start(&sv, model, extra)) {
        free(maps);
        free(body);
        free(gpl);
        return;
    }
    int st;
    test_json *s = serve_json(sv.port, "POST", "/api/sessions", body, &st);
    const int n = s ? (int)serve_num(s, "n_tokens") : 0;
    CHECK(st == 200 && n > 600, "create: %d, %d tokens", st, n);
    CHECK(count == (int64_t)2 * 4 * n * n, "inspect --npy: %lld floats, want [2, 4, %d, %d]", (long long)count, n, n);
    test_json_free(s);
    const int queries[] = {n - 1, 530, 300};
    for (int li = 0; count == (int64_t)2 * 4 * n * n && li < 2; li++)
        for (int qi = 0; qi < 3; qi++)
            for (int h = 0; h < 4; h += 3) {
                const int layer = li ? 5 : 0, q = queries[qi];
                char path[160];
                snprintf(path, sizeof path, "/api/sessions/s1/attention?layer=%d&head=%d&query=%d", layer, h, q);
                test_json *a = serve_json(sv.port, "GET", path, NULL, &st);
                const test_json *w = a ? test_json_get(a, "weights") : NULL;
                double *v = malloc((size_t)(q + 1) * sizeof(double)), worst = 0;
                CHECK(st == 200 && w && v && test_json_numbers(w, v, q + 1) == q + 1, "%s: %d", path, st);
                CHECK(a && serve_num(a, "window") == (li ? 0 : 512), "%s: window", path);
                const float *want = maps + (((size_t)li * 4 + h) * n + q) * n;
                for (int k = 0; w && v && k <= q; k++) {
                    worst = fmax(worst, fabs(v[k] - want[k]));
                    if (!li && k <= q - 512) CHECK(v[k] == 0, "%s: key %d is before the window: %g", path, k, v[k]);
                }
                CHECK(worst < 2e-5, "%s: differs from qkv inspect --npy by %g", path, worst);
                free(v);
                test_json_free(a);
            }
    /* the overview: each cell the largest weight of its block of the map */
    for (int li = 0; count == (int64_t)2 * 4 * n * n && li < 2; li++) {
        char path[128];
        snprintf(path, sizeof path, "/api/sessions/s1/overview?layer=%d&head=2", li ? 5 : 0);
        test_json *o = serve_json(sv.port, "GET", path, NULL, &st);
        const int block = o ? (int)serve_num(o, "block") : 0, bins = o ? (int)serve_num(o, "bins") : 0;
        CHECK(st == 200 && block > 1 && bins == (n + block - 1) / block, "%s: %d, block %d, bins %d", path, st, block, bins);
        double *v = bins > 0 ? malloc((size_t)bins * bins * sizeof(double)) : NULL;
        const test_json *vals = o ? test_json_get(o, "values") : NULL;
        CHECK(v && vals && test_json_numbers(vals, v, (int64_t)bins * bins) == (int64_t)bins * bins, "%s: values", path);
        double worst = 0;
        for (int a = 0; v && vals && a < bins; a++)
            for (int b = 0; b < bins; b++) {
                double want = 0;
                for (int q = a * block; q < (a + 1) * block && q < n; q++)
                    for (int k = b * block; k < (b + 1) * block && k < n; k++)
                        want = fmax(want, maps[(((size_t)li * 4 + 2) * n + q) * n + k]);
                worst = fmax(worst, fabs(v[(size_t)a * bins + b] - want));
            }
        CHECK(worst < 2e-5, "%s: differs from the max-pooled qkv inspect --npy by %g", path, worst);
        free(v);
        test_json_free(o);
    }
    serve_stop(&sv);
    free(maps);
    free(body);
    free(gpl);
}
