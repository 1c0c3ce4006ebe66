/*
 * png_encode.c — an 8-bit RGB image as a PNG file in memory (PNG, ISO/IEC
 * 15948): the signature, IHDR, the image data as IDAT chunks, IEND, each
 * chunk with its CRC-32. Each row is filtered (§9) with whichever of None,
 * Sub, Up, Average and Paeth gives the smallest sum of |filtered byte| read
 * as signed (the spec's suggested heuristic, §12.8), and the filtered rows
 * are one zlib stream (deflate.c).
 *
 * Not done: palettes, alpha, 16-bit samples, interlacing, ancillary chunks
 * (no gAMA/sRGB: viewers take the samples as sRGB).
 */
#include "png_encode.h"
#include "util/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BPP 3                       /* bytes per pixel: RGB, 8 bits a sample */
#define IDAT_MAX ((size_t)1 << 20) /* zlib bytes per IDAT chunk */

/* ---------------------------------------------------------------- CRC-32 */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* crc_table[b]: the CRC register after shifting byte b through the
 * reflected polynomial 0xEDB88320 (x^32 + x^26 + ... + 1) eight times. */
static void crc_table_build(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[b] = c;
    }
}

uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_table_build);
    const uint8_t *p = data;
    uint32_t c = crc ^ 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* --------------------------------------------------------------- filters */

static uint8_t paeth(int a, int b, int c) {
    const int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

/* Row x [nb] filtered with filter type f (0 None, 1 Sub, 2 Up, 3 Average,
 * 4 Paeth) into out [nb]; up is the row above (NULL for the first row: all
 * zeros). Returns the sum of |out| with each byte read as signed. */
static uint64_t filter_row(uint8_t *out, const uint8_t *x, const uint8_t *up, size_t nb, int f) {
    uint64_t sum = 0;
    for (size_t i = 0; i < nb; i++) {
        const int a = i >= BPP ? x[i - BPP] : 0, b = up ? up[i] : 0, c = up && i >= BPP ? up[i - BPP] : 0;
        const int pred = f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? paeth(a, b, c) : 0;
        const uint8_t v = (uint8_t)(x[i] - pred);
        out[i] = v;
        sum += v < 128 ? v : 256 - v;
    }
    return sum;
}

/* ---------------------------------------------------------------- chunks */

static uint8_t *put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

/* A chunk at p: length, type, data [n], CRC of type and data. Returns its end. */
static uint8_t *put_chunk(uint8_t *p, const char type[4], const uint8_t *data, size_t n) {
    uint8_t *t = p + 4;
    p = put32(p, (uint32_t)n);
    memcpy(p, type, 4);
    if (n) memcpy(p + 4, data, n);
    p += 4 + n;
    return put32(p, qkv_crc32(0, t, 4 + n));
}

qkv_status qkv_png_encode_rgb(uint8_t **png, size_t *len, const uint8_t *rgb, int w, int h, qkv_error *err) {
    *png = NULL;
    *len = 0;
    if (w < 1 || h < 1) return util_fail(err, QKV_ERR_INVALID, "png: image of %d x %d pixels", w, h);
    const size_t nb = (size_t)w * BPP, stride = nb + 1; /* a filtered row: its filter type, then nb bytes */
    uint8_t *filtered = malloc(stride * (size_t)h), *trial = malloc(nb * 2);
    if (!filtered || !trial) {
        free(filtered);
        free(trial);
        return util_fail(err, QKV_ERR_NOMEM, "png: out of memory for a %d x %d image", w, h);
    }
    for (int y = 0; y < h; y++) {
        const uint8_t *x = rgb + (size_t)y * nb, *up = y ? x - nb : NULL;
        uint8_t *best = trial, *cur = trial + nb;
        int best_f = 0;
        uint64_t best_sum = filter_row(best, x, up, nb, 0);
        for (int f = 1; f <= 4; f++) {
            const uint64_t s = filter_row(cur, x, up, nb, f);
            if (s < best_sum) {
                uint8_t *tmp = best;
                best = cur;
                cur = tmp;
                best_sum = s;
                best_f = f;
            }
        }
        uint8_t *row = filtered + (size_t)y * stride;
        row[0] = (uint8_t)best_f;
        memcpy(row + 1, best, nb);
    }
    free(trial);
    uint8_t *z = NULL;
    size_t zn = 0;
    qkv_status st = qkv_zlib_compress(&z, &zn, filtered, stride * (size_t)h, err);
    free(filtered);
    if (st) return st;
    const size_t n_idat = zn ? (zn + IDAT_MAX - 1) / IDAT_MAX : 1;
    const size_t total = 8 + (12 + 13) + 12 * n_idat + zn + 12;
    uint8_t *out = malloc(total);
    if (!out) {
        free(z);
        return util_fail(err, QKV_ERR_NOMEM, "png: out of memory for %zu bytes of PNG", total);
    }
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    memcpy(out, signature, 8);
    uint8_t ihdr[13];
    put32(put32(ihdr, (uint32_t)w), (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type: RGB */
    ihdr[10] = 0; /* compression: zlib deflate */
    ihdr[11] = 0; /* filter method: the five adaptive filters */
    ihdr[12] = 0; /* no interlace */
    uint8_t *p = put_chunk(out + 8, "IHDR", ihdr, 13);
    for (size_t i = 0; i < n_idat; i++) {
        const size_t off = i * IDAT_MAX, k = zn - off < IDAT_MAX ? zn - off : IDAT_MAX;
        p = put_chunk(p, "IDAT", z + off, k);
    }
    p = put_chunk(p, "IEND", NULL, 0);
    free(z);
    *png = out;
    *len = (size_t)(p - out);
    return QKV_OK;
}
