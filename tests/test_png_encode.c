/*
 * test_png_encode.c — the render library's own PNG encoder (render/deflate.c,
 * render/png_encode.c) against an outside decoder: Python's zlib, through
 * tests/python/png_read.py, which checks every chunk's CRC with zlib.crc32,
 * inflates the IDAT stream with zlib (Adler-32 checked there), undoes the
 * filters and compares the pixels byte for byte. Also the check values of
 * CRC-32 and Adler-32, and how much the codes compress (fixed Huffman with
 * LZ77; a block of noise is stored, never grown by more than its 5 bytes).
 */
#include "png_encode.h"
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Runs tests/python/png_read.py with args; 1 when it said "ok", its line in out [cap]. */
static int python_ok(const char *mode, const char *a, const char *b, char *out, size_t cap) {
    const char *argv[] = {"python3", "tests/python/png_read.py", mode, a, b, NULL};
    char *so = NULL, *se = NULL;
    const int rc = test_run_program("/usr/bin/env", argv, NULL, &so, &se);
    snprintf(out, cap, "%s%s", so ? so : "", se ? se : "");
    out[strcspn(out, "\n")] = 0;
    free(so);
    free(se);
    return rc == 0 && !strncmp(out, "ok", 2);
}

TEST(png_crc32_adler32_check_values) {
    /* the catalogue check values: CRC-32 of "123456789", Adler-32 of "Wikipedia" */
    CHECK(qkv_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 %08x", qkv_crc32(0, "123456789", 9));
    CHECK(qkv_adler32(1, "Wikipedia", 9) == 0x11E60398u, "adler32 %08x", qkv_adler32(1, "Wikipedia", 9));
    CHECK(qkv_crc32(qkv_crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u, "crc32 not continued");
    CHECK(qkv_crc32(0, "", 0) == 0 && qkv_adler32(1, "", 0) == 1, "empty input");
    /* 200,000 bytes (Adler-32 reduced many times) against zlib.crc32 / zlib.adler32 */
    const size_t n = 200000;
    uint8_t *buf = malloc(n);
    if (!buf) return;
    test_rng rng = {7};
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i % 3 ? test_rng_u64(&rng) : 0xFF);
    char path[600], line[256], want[64];
    snprintf(path, sizeof path, "%s/bytes", test_tmpdir());
    CHECK(write_file(path, buf, n) == 0, "cannot write %s", path);
    snprintf(want, sizeof want, "ok %08x %08x", qkv_crc32(0, buf, n), qkv_adler32(1, buf, n));
    const char *argv[] = {"python3", "tests/python/png_read.py", "crc32", path, NULL};
    char *so = NULL;
    const int rc = test_run_program("/usr/bin/env", argv, NULL, &so, NULL);
    snprintf(line, sizeof line, "%s", so ? so : "");
    line[strcspn(line, "\n")] = 0;
    CHECK(rc == 0 && !strcmp(line, want), "python says '%s', qkv '%s'", line, want);
    free(so);
    free(buf);
}

/* Inputs for the zlib stream: which of them, how long. */
static void zlib_input(uint8_t *b, size_t n, int kind, test_rng *rng) {
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: b[i] = 0; break;                                      /* one long run */
        case 1: b[i] = (uint8_t)test_rng_u64(rng); break;             /* noise: stored blocks */
        case 2: b[i] = (uint8_t)("attention is all you need; "[i % 27] ^ (i % 977 == 0)); break; /* text-like */
        case 3: b[i] = i < 40000 ? (uint8_t)test_rng_u64(rng) : b[i - 40000]; break; /* repeats beyond the window */
        default: b[i] = (uint8_t)(i / 300 % 5 * 40); break;           /* runs of a few values */
        }
    }
}

TEST(png_zlib_stream_inflates_with_python) {
    static const struct {
        size_t n;
        int kind;
        double max_ratio; /* compressed / input, including header and Adler-32 */
    } cases[] = {{0, 0, 99}, {1, 1, 99}, {2, 0, 99}, {3, 2, 99}, {300000, 0, 0.01}, {70000, 1, 1.001},
                 {100000, 2, 0.05}, {120000, 3, 1.001}, {65535, 4, 0.02}, {65536, 4, 0.02}, {200001, 4, 0.02}};
    test_rng rng = {11};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t n = cases[c].n;
        uint8_t *in = malloc(n + 1), *z = NULL;
        size_t zn = 0;
        if (!in) return;
        zlib_input(in, n, cases[c].kind, &rng);
        qkv_error err = {0};
        CHECK(qkv_zlib_compress(&z, &zn, in, n, &err) == QKV_OK, "%s", err.msg);
        char raw[600], zp[600], line[512];
        snprintf(raw, sizeof raw, "%s/z%zu.raw", test_tmpdir(), c);
        snprintf(zp, sizeof zp, "%s/z%zu.z", test_tmpdir(), c);
        CHECK(write_file(raw, in, n) == 0 && write_file(zp, z, zn) == 0, "cannot write the files");
        CHECK(python_ok("zlib", zp, raw, line, sizeof line), "case %zu (%zu bytes, kind %d): %s", c, n,
              cases[c].kind, line);
        /* a stored block costs 5 bytes: 65,535 of noise never take more than 65,540 */
        const size_t blocks = n / 65535 + 1;
        CHECK(zn <= n + 5 * blocks + 6, "case %zu: %zu bytes grew to %zu", c, n, zn);
        if (n >= 1000)
            CHECK((double)zn <= cases[c].max_ratio * n, "case %zu (kind %d): %zu -> %zu bytes, ratio %.4f above %.3f",
                  c, cases[c].kind, n, zn, (double)zn / n, cases[c].max_ratio);
        free(in);
        free(z);
    }
}

/* Test images: constant, gradient, noise, and blocks of flat colour (a heatmap). */
static void image(uint8_t *px, int w, int h, int kind, test_rng *rng) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            for (int ch = 0; ch < 3; ch++) {
                switch (kind) {
                case 0: p[ch] = (uint8_t)(60 + 50 * ch); break;
                case 1: p[ch] = (uint8_t)(ch == 0 ? x * 255 / (w > 1 ? w - 1 : 1) : ch == 1 ? y : (x + y) & 0xFF); break;
                case 2: p[ch] = (uint8_t)test_rng_u64(rng); break;
                default: p[ch] = (uint8_t)((x / 12 * 37 + y / 12 * 91) * (ch + 1)); break;
                }
            }
        }
}

TEST(png_images_decode_with_python) {
    static const struct {
        int w, h, kind;
        double max_ratio; /* PNG bytes / raw RGB bytes */
    } cases[] = {{64, 48, 0, 0.02}, {257, 3, 1, 99}, {37, 29, 2, 1.2}, {1, 1, 0, 99}, {1, 1, 2, 99},
                 {1001, 1, 1, 99}, {1, 777, 1, 99},  {301, 203, 3, 0.05}, {640, 480, 0, 0.012}}; /* fixed codes: 258 bytes of run cost ~20 bits at best */
    test_rng rng = {5};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int w = cases[c].w, h = cases[c].h;
        const size_t raw_n = (size_t)w * h * 3;
        uint8_t *px = malloc(raw_n), *png = NULL;
        size_t len = 0;
        if (!px) return;
        image(px, w, h, cases[c].kind, &rng);
        qkv_error err = {0};
        CHECK(qkv_png_encode_rgb(&png, &len, px, w, h, &err) == QKV_OK, "%s", err.msg);
        char pp[600], rp[600], line[512];
        snprintf(pp, sizeof pp, "%s/i%zu.png", test_tmpdir(), c);
        snprintf(rp, sizeof rp, "%s/i%zu.rgb", test_tmpdir(), c);
        CHECK(write_file(pp, png, len) == 0 && write_file(rp, px, raw_n) == 0, "cannot write the files");
        CHECK(python_ok("png", pp, rp, line, sizeof line), "%d x %d (kind %d): %s", w, h, cases[c].kind, line);
        if (raw_n >= 10000)
            CHECK((double)len <= cases[c].max_ratio * raw_n, "%d x %d (kind %d): %zu bytes of PNG for %zu of RGB (%.4f)",
                  w, h, cases[c].kind, len, raw_n, (double)len / raw_n);
        free(px);
        free(png);
    }
    uint8_t *png = (uint8_t *)1, px[3] = {0};
    size_t len = 1;
    qkv_error err = {0};
    CHECK(qkv_png_encode_rgb(&png, &len, px, 0, 1, &err) == QKV_ERR_INVALID && !png && !len, "a 0 x 1 image");
    CHECK(qkv_png_encode_rgb(&png, &len, px, 1, -3, &err) == QKV_ERR_INVALID && strstr(err.msg, "-3"), "%s", err.msg);
}
