/*
 * test_inspect.c — the inspection probe and its writers without a model:
 *   - qkv_attn_weights (rows from q, K and the flash kernel's LSE) against the
 *     reference kernel's weight matrix, on swept shapes, masks, GQA and KV
 *     dtypes. Tolerance 2e-6 absolute + 1e-5 relative: both sides are exact
 *     softmax rows; they differ by float32 rounding of q.k (~1e-7 relative)
 *     and of the kernel's LSE, which exp() turns into relative error.
 *   - the inspector hook on a hand-made KV cache: order of the rows, layer
 *     and head selection, the same weights;
 *   - token labels (split UTF-8 characters, blanks, stray bytes);
 *   - the streaming .npy writer, the HTML page and the PNG figure.
 */
#include "qkv_render.h"
#include "pattern_view.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int hq, hkv, lq, lk, d;
    qkv_mask_kind kind;
    int window, sinks, n_ex;
    qkv_dtype dt;
} wcase;

TEST(inspect_weights_match_reference) {
    static const int ex[] = {0, 3, 7};
    static const wcase cases[] = {
        {1, 1, 1, 1, 16, QKV_MASK_CAUSAL, 0, 0, 0, QKV_DTYPE_F32},
        {9, 3, 45, 45, 64, QKV_MASK_CAUSAL, 0, 0, 0, QKV_DTYPE_F32},
        {4, 1, 7, 130, 64, QKV_MASK_CAUSAL, 0, 0, 0, QKV_DTYPE_BF16},
        {8, 2, 33, 33, 128, QKV_MASK_WINDOW, 9, 0, 0, QKV_DTYPE_F16},
        {2, 2, 20, 70, 32, QKV_MASK_SINK_WINDOW, 8, 4, 0, QKV_DTYPE_F32},
        {3, 1, 17, 17, 80, QKV_MASK_CAUSAL, 0, 0, 3, QKV_DTYPE_F32},
        {2, 1, 5, 12, 16, QKV_MASK_NONE, 0, 0, 0, QKV_DTYPE_F32},
    };
    test_rng rng = {42};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const wcase *w = &cases[c];
        const size_t nq = (size_t)w->hq * w->lq * w->d, nkv = (size_t)w->hkv * w->lk * w->d;
        float *q = malloc(nq * 4), *kf = malloc(nkv * 4), *v = malloc(nkv * 4), *o = malloc(nq * 4);
        float *lse = malloc((size_t)w->hq * w->lq * 4), *ref = malloc((size_t)w->hq * w->lq * w->lk * 4);
        float *got = malloc((size_t)w->lq * w->lk * 4);
        uint16_t *k16 = malloc(nkv * 2);
        test_fill_normal(q, nq, &rng, 1.5f);
        test_fill_normal(kf, nkv, &rng, 1.5f);
        test_fill_normal(v, nkv, &rng, 1);
        const void *k = kf;
        if (w->dt != QKV_DTYPE_F32) {
            qkv_convert_from_f32(k16, w->dt, kf, nkv);
            qkv_convert_to_f32(kf, k16, w->dt, nkv); /* the reference sees the rounded keys */
            k = k16;
        }
        qkv_attn_desc d = {.n_q_head = w->hq, .n_kv_head = w->hkv, .q_len = w->lq, .kv_len = w->lk, .head_dim = w->d,
                           .mask = {.kind = w->kind, .window = w->window, .sinks = w->sinks, .exclude = ex,
                                    .n_exclude = w->n_ex},
                           .kv_dtype = w->dt};
        qkv_attn_desc dref = d;
        dref.kv_dtype = QKV_DTYPE_F32;
        qkv_error err = {0};
        CHECK(qkv_attn(o, lse, q, k, v, &d, QKV_KERNEL_FLASH, &err) == QKV_OK, "flash: %s", err.msg);
        CHECK(qkv_attn_reference(o, NULL, ref, q, kf, v, &dref, &err) == QKV_OK, "reference: %s", err.msg);
        for (int h = 0; h < w->hq; h++) {
            CHECK(qkv_attn_weights(got, q, lse, k, &d, h, 0, w->lq, 0, w->lk, &err) == QKV_OK, "weights: %s", err.msg);
            char what[96];
            snprintf(what, sizeof what, "case %zu head %d", c, h);
            CHECK_CLOSE(what, got, ref + (size_t)h * w->lq * w->lk, (size_t)w->lq * w->lk, 2e-6, 1e-5);
        }
        /* a window of rows and keys: the sink columns of the last rows */
        const int r0 = w->lq / 2, nr = w->lq - r0, kk = w->lk < 3 ? w->lk : 3;
        CHECK(qkv_attn_weights(got, q, lse, k, &d, w->hq - 1, r0, nr, 0, kk, &err) == QKV_OK, "%s", err.msg);
        for (int r = 0; r < nr; r++) {
            char what[96];
            snprintf(what, sizeof what, "case %zu sink columns row %d", c, r0 + r);
            CHECK_CLOSE(what, got + (size_t)r * kk, ref + ((size_t)(w->hq - 1) * w->lq + r0 + r) * w->lk, (size_t)kk,
                        2e-6, 1e-5);
        }
        free(q); free(kf); free(v); free(o); free(lse); free(ref); free(got); free(k16);
    }
    qkv_attn_desc d = {.n_q_head = 2, .n_kv_head = 1, .q_len = 4, .kv_len = 4, .head_dim = 16,
                       .mask = {.kind = QKV_MASK_CAUSAL}};
    float buf[64] = {0}, lse[8] = {0};
    qkv_error err = {0};
    CHECK(qkv_attn_weights(buf, buf, lse, buf, &d, 2, 0, 1, 0, 1, &err) == QKV_ERR_INVALID, "head out of range");
    CHECK(strstr(err.msg, "head 2") != NULL, "message names the head: %s", err.msg);
    CHECK(qkv_attn_weights(buf, buf, lse, buf, &d, 0, 3, 2, 0, 1, &err) == QKV_ERR_INVALID, "rows out of range");
    CHECK(qkv_attn_weights(buf, buf, lse, buf, &d, 0, 0, 1, 2, 3, &err) == QKV_ERR_INVALID, "keys out of range");
}

TEST(inspect_row_stats) {
    const float w[5] = {0.5f, 0.1f, 0.3f, 0.1f, 0};
    qkv_row_stats s;
    qkv_row_stats_of(&s, w, 5, 2);
    CHECK(s.top == 0 && s.top_weight == 0.5f, "top %d %g", s.top, s.top_weight);
    CHECK(s.top_other == 2 && s.top_other_weight == 0.3f, "top other %d", s.top_other);
    CHECK(fabs(s.sink - 0.5) < 1e-7 && fabs(s.first - 0.6) < 1e-7, "sink %g first %g", s.sink, s.first);
    double ent = -(0.5 * log(0.5) + 2 * 0.1 * log(0.1) + 0.3 * log(0.3));
    CHECK(fabs(s.entropy - ent) < 1e-6, "entropy %g want %g", s.entropy, ent);
}

/* ------------------------------------------------------- inspector hook */

typedef struct {
    int n_calls, bad_order, last;
    float *maps; /* [nl, nh, n, n] */
    int n, nh;
} collect;

static int collect_row(void *user, int li, int hi, int row, const float *w, int n_keys, const qkv_row_stats *s) {
    collect *c = user;
    int key = (li * c->nh + hi) * c->n + row;
    if (key != c->last + 1) c->bad_order++;
    c->last = key;
    c->n_calls++;
    (void)s;
    memcpy(c->maps + (size_t)key * c->n, w, (size_t)n_keys * sizeof(float));
    return 0;
}

TEST(inspect_hook_streams_requested_rows) {
    const int Hq = 6, Hkv = 2, D = 32, n = 21, L = 4;
    qkv_model_config cfg = {0};
    cfg.n_layer = L;
    cfg.n_head = Hq;
    cfg.n_kv_head = Hkv;
    cfg.head_dim = D;
    const int layers[2] = {1, 3}, heads[3] = {5, 0, 2};
    collect c = {0, 0, -1, calloc((size_t)2 * 3 * n * n, sizeof(float)), n, 3};
    qkv_inspect_params p = {.layers = layers, .n_layers = 2, .heads = heads, .n_heads = 3, .n_first = 1,
                            .row = collect_row, .user = &c};
    qkv_inspect *in = NULL;
    qkv_error err = {0};
    CHECK(qkv_inspect_init(&in, &cfg, &p, &err) == QKV_OK, "init: %s", err.msg);
    if (!in) return;
    test_rng rng = {7};
    float *q = malloc((size_t)Hq * n * D * 4), *k = malloc((size_t)Hkv * n * D * 4), *v = malloc((size_t)Hkv * n * D * 4);
    float *o = malloc((size_t)Hq * n * D * 4), *lse = malloc((size_t)Hq * n * 4);
    float *ref = malloc((size_t)Hq * n * n * 4);
    for (int l = 0; l < L; l++) {
        test_fill_normal(q, (size_t)Hq * n * D, &rng, 1);
        test_fill_normal(k, (size_t)Hkv * n * D, &rng, 1);
        test_fill_normal(v, (size_t)Hkv * n * D, &rng, 1);
        qkv_kv_cache *cache = NULL;
        qkv_kv_cache_init(&cache, Hkv, D, n + 5, QKV_DTYPE_F32, &err);
        qkv_kv_cache_append(cache, k, v, n, &err);
        qkv_attn_desc d = {.n_q_head = Hq, .n_kv_head = Hkv, .q_len = n, .kv_len = n, .head_dim = D,
                           .mask = {.kind = QKV_MASK_CAUSAL}};
        CHECK(qkv_attn_cached(o, lse, q, cache, &d, QKV_KERNEL_FLASH, &err) == QKV_OK, "%s", err.msg);
        d.kv_head_stride = (int64_t)(n + 5) * D; /* as the model hands it: the cache's capacity */
        qkv_activation a;
        qkv_attn_view view;
        test_pattern_activation(&a, &view, l, q, lse, n, 0, cache, &d);
        CHECK(qkv_inspect_hook(in, &a, &err) == QKV_OK, "hook: %s", err.msg);
        qkv_attn_desc dr = d;
        dr.kv_head_stride = 0; /* k, v here are dense [Hkv, n, D] */
        qkv_attn_reference(o, NULL, ref, q, k, v, &dr, &err);
        for (int li = 0; li < 2; li++)
            if (layers[li] == l)
                for (int hi = 0; hi < 3; hi++) {
                    char what[64];
                    snprintf(what, sizeof what, "layer %d head %d", l, heads[hi]);
                    CHECK_CLOSE(what, c.maps + (size_t)(li * 3 + hi) * n * n, ref + (size_t)heads[hi] * n * n,
                                (size_t)n * n, 2e-6, 1e-5);
                }
        qkv_kv_cache_free(cache);
    }
    CHECK(c.n_calls == 2 * 3 * n && c.bad_order == 0, "%d rows delivered, %d out of order", c.n_calls, c.bad_order);
    qkv_inspect_free(in);
    const int dup[2] = {1, 1}, desc[2] = {3, 1}, out_of_range[1] = {9};
    qkv_inspect_params bad = {.layers = dup, .n_layers = 2, .row = collect_row, .user = &c};
    CHECK(qkv_inspect_init(&in, &cfg, &bad, &err) == QKV_ERR_INVALID, "duplicate layer accepted");
    bad.layers = desc;
    CHECK(qkv_inspect_init(&in, &cfg, &bad, &err) == QKV_ERR_INVALID, "decreasing layers accepted");
    bad.layers = NULL;
    bad.heads = out_of_range;
    bad.n_heads = 1;
    CHECK(qkv_inspect_init(&in, &cfg, &bad, &err) == QKV_ERR_INVALID && strstr(err.msg, "head 9"),
          "head 9 of 6 accepted: %s", err.msg);
    free(q); free(k); free(v); free(o); free(lse); free(ref); free(c.maps);
}

/* ------------------------------------------------------------ labels */

TEST(inspect_token_labels) {
    /* 年 = E5 B9 B4 split after 2 bytes; 假 = E5 81 87 split into 3; a space
     * word; a newline; a stray continuation byte; an empty piece */
    const char *pieces[] = {"\xE5\xB9", "\xB4", "\xE5", "\x81", "\x87", " world", "\n", "\x80", "", "a\tb"};
    const size_t lens[] = {2, 1, 1, 1, 1, 6, 1, 1, 0, 3};
    const char *want[] = {"年…", "…年", "假…", "…假…", "…假", "·world", "↵", "\\x80", "∅", "a→b"};
    const int n = 10;
    char *labels[10];
    qkv_error err = {0};
    CHECK(qkv_token_labels(labels, pieces, lens, n, &err) == QKV_OK, "%s", err.msg);
    for (int i = 0; i < n; i++) CHECK(!strcmp(labels[i], want[i]), "label %d: '%s', want '%s'", i, labels[i], want[i]);
    qkv_token_labels_free(labels, n);
    /* a lead byte whose continuation never comes */
    const char *p2[] = {"\xE5\xB9", "x"};
    const size_t l2[] = {2, 1};
    CHECK(qkv_token_labels(labels, p2, l2, 2, &err) == QKV_OK, "%s", err.msg);
    CHECK(!strcmp(labels[0], "\\xE5\\xB9") && !strcmp(labels[1], "x"), "'%s' '%s'", labels[0], labels[1]);
    qkv_token_labels_free(labels, 2);
}

/* ----------------------------------------------------------- writers */

TEST(inspect_npy_writer) {
    char path[600];
    snprintf(path, sizeof path, "%s/w.npy", test_tmpdir());
    int64_t shape[3] = {2, 3, 4};
    float data[24];
    for (int i = 0; i < 24; i++) data[i] = (float)i * 0.5f;
    qkv_npy_writer *w = NULL;
    qkv_error err = {0};
    CHECK(qkv_npy_writer_open(&w, path, 3, shape, &err) == QKV_OK, "%s", err.msg);
    for (int r = 0; r < 6; r++) CHECK(qkv_npy_writer_put(w, data + r * 4, 4, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_npy_writer_put(w, data, 1, &err) == QKV_ERR_INVALID, "writing past the shape accepted");
    CHECK(qkv_npy_writer_close(w, &err) == QKV_OK, "%s", err.msg);
    qkv_npy a;
    CHECK(qkv_npy_load(&a, path, &err) == QKV_OK, "%s", err.msg);
    CHECK(a.ndim == 3 && a.shape[0] == 2 && a.shape[1] == 3 && a.shape[2] == 4, "shape");
    if (a.data) CHECK_CLOSE("npy data", a.data, data, 24, 0, 0);
    qkv_npy_free(&a);
    /* a short file is not kept */
    snprintf(path, sizeof path, "%s/short.npy", test_tmpdir());
    CHECK(qkv_npy_writer_open(&w, path, 3, shape, &err) == QKV_OK, "%s", err.msg);
    qkv_npy_writer_put(w, data, 5, &err);
    CHECK(qkv_npy_writer_close(w, &err) == QKV_ERR_INVALID && strstr(err.msg, "5 of 24"), "short: %s", err.msg);
    CHECK(!test_file_exists(path), "a short file was kept");
    /* a negative dimension is refused by the writer and by qkv_npy_save_f32 (one header writer) */
    snprintf(path, sizeof path, "%s/negative.npy", test_tmpdir());
    const int64_t negative[2] = {2, -3};
    CHECK(qkv_npy_writer_open(&w, path, 2, negative, &err) == QKV_ERR_INVALID && strstr(err.msg, "negative"),
          "writer, negative dimension: %s", err.msg);
    CHECK(qkv_npy_save_f32(path, data, 2, negative, &err) == QKV_ERR_INVALID && strstr(err.msg, "negative"),
          "save, negative dimension: %s", err.msg);
    CHECK(!test_file_exists(path), "a refused shape left a file");
}

/* Causal maps [2, 3, n, n] with a known pattern, written through a row function. */
static void synthetic_row(float *w, int li, int hi, int r) {
    double sum = 0;
    for (int j = 0; j <= r; j++) sum += w[j] = (float)(1.0 + j * (li + 1) + hi);
    for (int j = 0; j <= r; j++) w[j] /= (float)sum;
}

TEST(inspect_html_page) {
    const int n = 6, layers[2] = {4, 7}, heads[3] = {0, 1, 8};
    const char *labels[6] = {"年…", "…年", "<b>&", "\"q\"", "·x", "↵"};
    qkv_maps_info info = {.title = "test </script> page", .n_tok = n, .labels = labels, .layers = layers,
                          .n_layers = 2, .heads = heads, .n_heads = 3};
    char path[600];
    snprintf(path, sizeof path, "%s/p.html", test_tmpdir());
    qkv_html_writer *h = NULL;
    qkv_error err = {0};
    CHECK(qkv_html_open(&h, path, &info, &err) == QKV_OK, "%s", err.msg);
    if (!h) return;
    float w[6];
    CHECK(qkv_html_row(h, 0, 1, 0, w, &err) == QKV_ERR_INVALID, "out-of-order row accepted");
    for (int li = 0; li < 2; li++)
        for (int hi = 0; hi < 3; hi++)
            for (int r = 0; r < n; r++) {
                synthetic_row(w, li, hi, r);
                CHECK(qkv_html_row(h, li, hi, r, w, &err) == QKV_OK, "%s", err.msg);
            }
    CHECK(qkv_html_close(h, &err) == QKV_OK, "%s", err.msg);
    char *page = test_read_file(path, NULL);
    CHECK(page != NULL, "page written");
    if (!page) return;
    int maps = 0;
    for (const char *p = page; (p = strstr(p, "class=\"qkv-map\"")); p++) maps++;
    CHECK(maps == 6, "%d map blocks, want 6", maps);
    CHECK(strstr(page, "\"layers\": [4, 7]") && strstr(page, "\"heads\": [0, 1, 8]"), "layer/head numbers");
    CHECK(!strstr(page, "test </script> page\""), "title not escaped inside the JSON block");
    CHECK(strstr(page, "\\u003cb\\u003e\\u0026") != NULL, "label <b>& not escaped");
    CHECK(strstr(page, "http://") == NULL && strstr(page, "https://") == NULL, "the page refers to the network");
    CHECK(strstr(page, "qkv-stats") && strstr(page, "</html>"), "page not complete");
    free(page);
    /* too many weights for a page */
    const int many[8] = {0, 1, 2, 3, 4, 5, 6, 7}; /* 8 x 3 maps of 4096 tokens: 201 M weights */
    qkv_maps_info big = info;
    big.n_tok = 4096;
    big.layers = many;
    big.n_layers = 8;
    CHECK(qkv_html_open(&h, path, &big, &err) == QKV_ERR_TOO_LARGE && strstr(err.msg, "--layers/--heads"),
          "a too large page accepted: %s", err.msg);
}

TEST(inspect_png_figure) {
    const int n = 20, layers[2] = {0, 1}, heads[3] = {0, 1, 2};
    const char *labels[20];
    for (int i = 0; i < n; i++) labels[i] = i % 2 ? "年…" : "·the";
    qkv_maps_info info = {.title = "png test", .n_tok = n, .labels = labels, .layers = layers, .n_layers = 2,
                          .heads = heads, .n_heads = 3};
    for (int variant = 0; variant < 2; variant++) {
        qkv_png_params p = {.log_scale = variant, .max_panel = variant ? 16 : 0}; /* the second: pooled, 16-pixel panels */
        qkv_png_maps *pm = NULL;
        qkv_error err = {0};
        CHECK(qkv_png_maps_init(&pm, &info, &p, &err) == QKV_OK, "%s", err.msg);
        if (!pm) return;
        float w[20];
        for (int li = 0; li < 2; li++)
            for (int hi = 0; hi < 3; hi++)
                for (int r = 0; r < n; r++) {
                    synthetic_row(w, li, hi, r);
                    qkv_png_maps_row(pm, li, hi, r, w);
                }
        char path[600];
        snprintf(path, sizeof path, "%s/f%d.png", test_tmpdir(), variant);
        CHECK(qkv_png_maps_save(pm, path, &err) == QKV_OK, "%s", err.msg);
        /* the figure is drawn anew on each call, the same bytes each time */
        uint8_t *png = NULL;
        size_t png_len = 0, file_len = 0;
        CHECK(qkv_png_maps_encode(pm, &png, &png_len, &err) == QKV_OK, "%s", err.msg);
        uint8_t *file = png ? malloc(png_len + 1) : NULL;
        FILE *fp = file ? fopen(path, "rb") : NULL;
        if (fp) {
            file_len = fread(file, 1, png_len + 1, fp);
            fclose(fp);
        }
        CHECK(file && file_len == png_len && !memcmp(file, png, png_len), "encode and save differ");
        free(file);
        free(png);
        qkv_png_maps_free(pm);
        size_t len = 0;
        FILE *f = fopen(path, "rb");
        unsigned char hdr[24] = {0};
        if (f) {
            len = fread(hdr, 1, 24, f);
            fclose(f);
        }
        CHECK(len == 24 && !memcmp(hdr, "\x89PNG\r\n\x1a\n", 8) && !memcmp(hdr + 12, "IHDR", 4), "not a PNG");
        const unsigned width = (unsigned)hdr[16] << 24 | hdr[17] << 16 | hdr[18] << 8 | hdr[19];
        CHECK(width >= 3 * (variant ? 16u : 20u), "width %u", width);
    }
}
