/*
 * test_stream.c — bounded KV caches and `qkv stream`:
 *   - qkv_kv_cache_shift against keys rotated from scratch at their new rows
 *     (f32: 1e-4, the float rounding of angles up to ~100 rad; bf16: the
 *     cache rounds once more after the rotation, 2^-8 relative of |k| <= ~4),
 *     the first rows untouched and values moved bit for bit;
 *   - with the model, on the start of the GPL-3 (64 tokens, W = 16, C = 8):
 *     nothing evicted (W >= n) gives every variant full's NLLs; the window by
 *     mask over a full cache equals the window by eviction (original
 *     positions), and so for sinks (so the first S keys are really kept);
 *     a re-indexed window equals the original one (RoPE is relative); and
 *     eviction does change the NLLs (nothing passes vacuously). NLL
 *     tolerance 2e-3: the kernels tile a longer cache differently;
 *   - eviction and a window mask allocate nothing in the forward pass;
 *   - `qkv stream` end to end (JSON, SVG) and its bad input.
 */
#include "alloc_count.h"
#include "qkv.h"
#include "testing.h"
#include "svg_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_shift(qkv_dtype dtype, double atol) {
    enum { Hkv = 2, D = 32, N = 40, S = 4, CUT = 13 };
    const qkv_rope rope = {.pairing = QKV_ROPE_INTERLEAVED, .theta = 10000.0f};
    float *k0 = malloc(sizeof(float) * Hkv * N * D), *k = malloc(sizeof(float) * Hkv * N * D);
    float *v = malloc(sizeof(float) * Hkv * N * D), *got_k = malloc(sizeof(float) * Hkv * N * D);
    float *got_v = malloc(sizeof(float) * Hkv * N * D), *want = malloc(sizeof(float) * Hkv * N * D);
    float *plain = malloc(sizeof(float) * Hkv * N * D), *vq = malloc(sizeof(float) * Hkv * N * D);
    test_rng rng = {7};
    test_fill_normal(k0, (size_t)Hkv * N * D, &rng, 1);
    test_fill_normal(v, (size_t)Hkv * N * D, &rng, 1);
    int64_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = 50 + t; /* not from 0: the rotation matters for every row */
    memcpy(k, k0, sizeof(float) * Hkv * N * D);
    qkv_error err = {0};
    CHECK(qkv_rope_apply(k, pos, &rope, Hkv, N, D, &err) == QKV_OK, "%s", err.msg);
    qkv_kv_cache *c = NULL, *c2 = NULL;
    CHECK(qkv_kv_cache_init(&c, Hkv, D, N, dtype, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_kv_cache_init(&c2, Hkv, D, N, dtype, &err) == QKV_OK, "%s", err.msg);
    if (!c || !c2) return;
    qkv_kv_cache_append(c, k, v, N, &err);
    qkv_kv_cache_append(c2, k, v, N, &err);
    CHECK(qkv_kv_cache_read(plain, vq, c, 0, N, &err) == QKV_OK, "%s", err.msg); /* as stored */
    CHECK(qkv_kv_cache_shift(c, S, CUT, &rope, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_kv_cache_shift(c2, S, CUT, NULL, &err) == QKV_OK, "%s", err.msg);
    const int M = N - CUT;
    CHECK(qkv_kv_cache_len(c) == M && qkv_kv_cache_len(c2) == M, "lengths %d %d", qkv_kv_cache_len(c),
          qkv_kv_cache_len(c2));
    /* from scratch: row r < S rotated at 50 + r, row r >= S holds key r + CUT rotated at 50 + r */
    int64_t newpos[N];
    for (int h = 0; h < Hkv; h++)
        for (int r = 0; r < M; r++) {
            const int src = r < S ? r : r + CUT;
            memcpy(want + ((size_t)h * M + r) * D, k0 + ((size_t)h * N + src) * D, sizeof(float) * D);
        }
    for (int r = 0; r < M; r++) newpos[r] = 50 + r;
    qkv_rope_apply(want, newpos, &rope, Hkv, M, D, &err);
    qkv_kv_cache_read(got_k, got_v, c, 0, M, &err);
    CHECK_CLOSE("shifted keys vs rotated from scratch", got_k, want, (size_t)Hkv * M * D, atol, atol);
    /* the first S rows are the stored ones, bit for bit; values just move */
    for (int h = 0; h < Hkv; h++)
        for (int r = 0; r < M; r++) {
            const int src = r < S ? r : r + CUT;
            const float *gv = got_v + ((size_t)h * M + r) * D, *wv = vq + ((size_t)h * N + src) * D;
            CHECK(!memcmp(gv, wv, sizeof(float) * D), "value row %d head %d not moved exactly", r, h);
            if (r < S)
                CHECK(!memcmp(got_k + ((size_t)h * M + r) * D, plain + ((size_t)h * N + r) * D, sizeof(float) * D),
                      "sink row %d head %d changed", r, h);
        }
    /* without rope the moved keys keep their rotation, and that is not the shifted one */
    qkv_kv_cache_read(got_k, NULL, c2, 0, M, &err);
    double moved_diff = 0;
    for (int h = 0; h < Hkv; h++)
        for (int r = S; r < M; r++) {
            const float *g = got_k + ((size_t)h * M + r) * D, *w = plain + ((size_t)h * N + r + CUT) * D;
            CHECK(!memcmp(g, w, sizeof(float) * D), "unshifted row %d head %d changed", r, h);
            for (int i = 0; i < D; i++) {
                const double dd = fabs(g[i] - want[((size_t)h * M + r) * D + i]);
                if (dd > moved_diff) moved_diff = dd;
            }
        }
    CHECK(moved_diff > 0.1, "a shift by %d should move the keys (max diff %g)", CUT, moved_diff);
    CHECK(qkv_kv_cache_shift(c, 1, M, &rope, &err) == QKV_ERR_INVALID, "a range past the end is refused");
    CHECK(qkv_kv_cache_shift(c, -1, 1, &rope, &err) == QKV_ERR_INVALID, "a negative start is refused");
    qkv_kv_cache_free(c);
    qkv_kv_cache_free(c2);
    free(k0); free(k); free(v); free(got_k); free(got_v); free(want); free(plain); free(vq);
}

TEST(kv_cache_shift_equals_rerotation_f32) { check_shift(QKV_DTYPE_F32, 1e-4); }
TEST(kv_cache_shift_equals_rerotation_bf16) { check_shift(QKV_DTYPE_BF16, 3e-2); }

/* ------------------------------------------------------------ the model */

enum { N_TOK = 64, W = 16, S = 4, C = 8 };

/* The first N_TOK tokens of the GPL-3 (a fixed text: the test needs no file). */
static int gpl_tokens(int32_t *ids, const qkv_model *m) {
    static const char text[] =
        "GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n\nCopyright (C) 2007 Free Software Foundation, "
        "Inc. <https://fsf.org/>\nEveryone is permitted to copy and distribute verbatim copies of this license "
        "document, but changing it is not allowed.\n\nPreamble\n\nThe GNU General Public License is a free, "
        "copyleft license for software and other kinds of works.\n\nThe licenses for most software and other "
        "practical works are designed to take away your freedom to share and change the works.";
    qkv_tokenizer *tok = NULL;
    qkv_error err = {0};
    int32_t all[256];
    int64_t n = 0;
    CHECK(qkv_tokenizer_load(&tok, qkv_model_gguf(m), &err) == QKV_OK, "%s", err.msg);
    if (!tok) return 0;
    CHECK(qkv_tokenize(tok, text, strlen(text), 1, 0, all, 256, &n, &err) == QKV_OK, "%s", err.msg);
    qkv_tokenizer_free(tok);
    CHECK(n >= N_TOK, "the text is %lld tokens, want %d", (long long)n, N_TOK);
    memcpy(ids, all, sizeof(int32_t) * N_TOK);
    return n >= N_TOK;
}

static qkv_model *open_model(int32_t *ids) {
    if (!test_require_model()) return NULL;
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = N_TOK, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (m && !gpl_tokens(ids, m)) {
        qkv_model_close(m);
        return NULL;
    }
    return m;
}

/* NLLs of ids under p; *rows the peak KV rows. */
static void score(float *nll, int *rows, qkv_model *m, const int32_t *ids, qkv_stream_params p) {
    qkv_error err = {0};
    CHECK(qkv_stream_score(nll, rows, m, ids, N_TOK, &p, &err) == QKV_OK, "%s", err.msg);
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
    return d;
}

TEST(stream_nothing_evicted_equals_full) {
    int32_t ids[N_TOK];
    qkv_model *m = open_model(ids);
    if (!m) return;
    float full[N_TOK - 1], got[N_TOK - 1];
    int rows = 0;
    score(full, &rows, m, ids, (qkv_stream_params){.policy = QKV_STREAM_FULL, .window = 1, .chunk = C});
    CHECK(rows == N_TOK - 1, "full held %d rows", rows);
    const struct { const char *name; qkv_stream_params p; } cases[] = {
        {"window/orig", {.policy = QKV_STREAM_WINDOW, .cache = QKV_STREAM_EVICT}},
        {"window/shifted", {.policy = QKV_STREAM_WINDOW, .cache = QKV_STREAM_SHIFT}},
        {"sinks/orig", {.policy = QKV_STREAM_SINKS, .cache = QKV_STREAM_EVICT}},
        {"sinks/shifted", {.policy = QKV_STREAM_SINKS, .cache = QKV_STREAM_SHIFT}},
        {"recompute", {.policy = QKV_STREAM_RECOMPUTE}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qkv_stream_params p = cases[i].p;
        p.window = N_TOK; /* W >= n: nothing is ever evicted */
        p.sinks = S;
        p.chunk = C;
        score(got, NULL, m, ids, p);
        const double d = max_diff(got, full, N_TOK - 1);
        CHECK(d < 2e-3, "%s with W >= n differs from full by %g", cases[i].name, d);
    }
    qkv_model_close(m);
}

TEST(stream_mask_equals_eviction) {
    int32_t ids[N_TOK];
    qkv_model *m = open_model(ids);
    if (!m) return;
    float full[N_TOK - 1], mask[N_TOK - 1], evict[N_TOK - 1], shift[N_TOK - 1], smask[N_TOK - 1], sevict[N_TOK - 1];
    int rows_mask = 0, rows_evict = 0;
    score(full, NULL, m, ids, (qkv_stream_params){.policy = QKV_STREAM_FULL, .window = 1, .chunk = C});
    const qkv_stream_params win = {.policy = QKV_STREAM_WINDOW, .window = W, .chunk = C};
    qkv_stream_params p = win;
    score(mask, &rows_mask, m, ids, p);
    p.cache = QKV_STREAM_EVICT;
    score(evict, &rows_evict, m, ids, p);
    p.cache = QKV_STREAM_SHIFT;
    score(shift, NULL, m, ids, p);
    CHECK(rows_mask == N_TOK - 1 && rows_evict == W - 1 + C, "rows held: mask %d, eviction %d (want %d, %d)",
          rows_mask, rows_evict, N_TOK - 1, W - 1 + C);
    double d = max_diff(mask, evict, N_TOK - 1);
    CHECK(d < 2e-3, "window: mask vs eviction differ by %g", d);
    d = max_diff(shift, evict, N_TOK - 1);
    CHECK(d < 2e-3, "window: re-indexed vs original positions differ by %g", d);
    d = max_diff(evict, full, N_TOK - 1);
    CHECK(d > 0.05, "a window of %d over %d tokens should change some NLL (max diff %g)", W, N_TOK, d);
    /* rows 0 .. W - 2 see every earlier key: identical to full there */
    d = max_diff(evict, full, W - 1);
    CHECK(d < 2e-3, "rows before the window fills differ from full by %g", d);

    p = (qkv_stream_params){.policy = QKV_STREAM_SINKS, .window = W, .sinks = S, .chunk = C};
    score(smask, NULL, m, ids, p);
    p.cache = QKV_STREAM_EVICT;
    score(sevict, &rows_evict, m, ids, p);
    CHECK(rows_evict == W - 1 + C, "sinks by eviction held %d rows", rows_evict);
    d = max_diff(smask, sevict, N_TOK - 1);
    CHECK(d < 2e-3, "sinks: mask (first %d kept by definition) vs eviction differ by %g", S, d);
    d = max_diff(sevict, evict, N_TOK - 1);
    CHECK(d > 0.05, "keeping %d sinks should change some NLL against the plain window (max diff %g)", S, d);
    qkv_model_close(m);
}

TEST(stream_eviction_and_window_mask_allocate_nothing) {
    int32_t ids[N_TOK];
    qkv_model *m = open_model(ids);
    if (!m) return;
    qkv_error err = {0};
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)2 * C * V); /* [2C, V] */
    const qkv_forward_opts o = {.mask = QKV_MASK_SINK_WINDOW, .window = W - S, .sinks = S};
    CHECK(qkv_model_forward(m, logits, ids, 2 * C, 1, &o, &err) == QKV_OK, "%s", err.msg);
    alloc_count_start();
    qkv_status st = qkv_model_evict(m, S, C, 1, &err);
    if (!st) st = qkv_model_forward(m, logits, ids + 2 * C, C, 1, &o, &err);
    if (!st) st = qkv_model_evict(m, S, C, 0, &err);
    if (!st) st = qkv_model_forward(m, logits, ids + 3 * C, C, 1, &o, &err);
    const int64_t n_alloc = alloc_count_stop();
    CHECK(st == QKV_OK, "%s", err.msg);
    CHECK(n_alloc == 0, "evictions and masked forwards allocated %lld times", (long long)n_alloc);
    CHECK(qkv_model_pos(m) == 2 * C && qkv_model_rope_pos(m) == 3 * C, "rows %d, next RoPE position %d (want %d, %d)",
          qkv_model_pos(m), qkv_model_rope_pos(m), 2 * C, 3 * C); /* only the unshifted eviction counts */
    CHECK(qkv_model_evict(m, 1, 4 * C, 1, &err) == QKV_ERR_INVALID, "evicting past the cache is refused");
    CHECK(qkv_model_forward(m, logits, ids, 1, 0, &(qkv_forward_opts){.mask = QKV_MASK_WINDOW}, &err) ==
              QKV_ERR_INVALID, "window 0 is refused");
    CHECK(qkv_model_forward(m, logits, ids, 1, 0, &(qkv_forward_opts){.mask = (qkv_mask_kind)7, .window = 4}, &err) ==
              QKV_ERR_INVALID, "an unknown mask kind is refused");
    CHECK(qkv_model_pos(m) == 2 * C, "refused calls leave the cache as it was");
    qkv_model_rewind(m, 0, NULL);
    CHECK(qkv_model_rope_pos(m) == 0, "rewinding to 0 resets the RoPE position (%d)", qkv_model_rope_pos(m));
    free(logits);
    qkv_model_close(m);
}

/* ------------------------------------------------------------------ CLI */

static const char cli_text[] =
    "The licenses for most software and other practical works are designed to take away your freedom to share "
    "and change the works. By contrast, the GNU General Public License is intended to guarantee your freedom to "
    "share and change all versions of a program--to make sure it remains free software for all its users.";

TEST(stream_cli_json_and_svg) {
    if (!test_require_model()) return;
    char svg[512];
    snprintf(svg, sizeof svg, "%s/stream.svg", test_tmpdir());
    const char *argv[] = {"stream", "-m", test_model_path(), "-p", cli_text, "--window", "16", "--sinks", "4",
                          "--chunk", "8", "--max-tokens", "48", "--threads", "2", "--json", "--svg", svg, NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    if (rc == 0 && out) {
        static const char *const names[] = {"\"full\"", "\"window/orig\"", "\"window/shifted\"", "\"sinks/orig\"",
                                            "\"sinks/shifted\"", "\"recompute\""};
        for (int i = 0; i < 6; i++) CHECK(strstr(out, names[i]), "no variant %s in %s", names[i], out);
        CHECK(strstr(out, "\"window\": 16") && strstr(out, "\"sinks\": 4") && strstr(out, "\"n_tokens\": 48"),
              "header: %s", out);
        CHECK(strstr(out, "\"positions\": \"shifted\"") && strstr(out, "\"chunks\": ["), "fields: %s", out);
        /* full holds 47 rows, the evicting variants W - 1 + C = 23: 30 layers x 2 x 3 heads x 64 x 4 bytes */
        CHECK(strstr(out, "\"kv_bytes\": 2165760") && strstr(out, "\"kv_bytes\": 1059840"), "kv bytes: %s", out);
        CHECK(!strstr(out, "nan") && !strstr(out, "inf"), "non-finite values: %s", out);
        char *s = test_read_file(svg, NULL);
        CHECK(s && svg_well_formed(s) && strstr(s, "<polyline") && strstr(s, "sinks/shifted"), "svg: %.200s",
              s ? s : "(missing)");
        free(s);
    }
    free(out);
    free(err);
}

TEST(stream_cli_bad_input) {
    char svg[512];
    snprintf(svg, sizeof svg, "%s/bad.svg", test_tmpdir());
    const char *m = test_model_path();
    const char *w0[] = {"stream", "-m", m, "-p", "some text", "--window", "0", "--svg", svg, NULL};
    CHECK_BAD_CLI(w0, "--window");
    const char *sw[] = {"stream", "-m", m, "-p", "some text", "--window", "8", "--sinks", "8", "--svg", svg, NULL};
    CHECK_BAD_CLI(sw, "--sinks");
    const char *c0[] = {"stream", "-m", m, "-p", "some text", "--chunk", "0", "--svg", svg, NULL};
    CHECK_BAD_CLI(c0, "--chunk");
    const char *two[] = {"stream", "-m", m, "-p", "a", "--tokens", "1,2", NULL};
    CHECK_BAD_CLI(two, "exactly one");
    if (test_require_model()) {
        const char *empty[] = {"stream", "-m", m, "-p", "", "--svg", svg, NULL};
        CHECK_BAD_CLI(empty, "token");
        const char *one[] = {"stream", "-m", m, "--tokens", "1", "--svg", svg, NULL};
        CHECK_BAD_CLI(one, "at least 2");
    }
    CHECK(!test_file_exists(svg), "a failed run left %s", svg);
}
