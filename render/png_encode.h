/*
 * png_encode.h — the render library's own PNG encoder (no libpng, no zlib):
 * CRC-32 and Adler-32, a zlib stream of DEFLATE data (deflate.c) and an
 * 8-bit RGB image as a PNG file in memory (png_encode.c). Internal to
 * libqkv_render: png.c draws the figures with it, tests/test_png_encode.c
 * checks it against Python's zlib.
 */
#ifndef QKV_PNG_ENCODE_H
#define QKV_PNG_ENCODE_H

#include "qkv.h"

#include <stddef.h>
#include <stdint.h>

/* CRC-32 of ISO 3309 / ITU-T V.42 (PNG's and zlib.crc32's: reflected
 * polynomial 0xEDB88320, initial and final xor 0xFFFFFFFF), continued from
 * crc (0 to start): qkv_crc32(qkv_crc32(0, a, na), b, nb) = crc of a then b. */
uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n);

/* Adler-32 (RFC 1950 §8), continued from adler (1 to start). */
uint32_t qkv_adler32(uint32_t adler, const void *data, size_t n);

/* data [n] as a zlib stream (RFC 1950: header, DEFLATE data, Adler-32):
 * *out (malloc'd, the caller frees) of *out_len bytes. QKV_OK, or
 * QKV_ERR_NOMEM with *out NULL. */
qkv_status qkv_zlib_compress(uint8_t **out, size_t *out_len, const uint8_t *data, size_t n, qkv_error *err);

/* rgb [h, w, 3] (rows top to bottom, 8 bits a channel) as a PNG file in
 * memory: *png (malloc'd, the caller frees) of *len bytes; w, h >= 1.
 * QKV_OK, QKV_ERR_INVALID (a size below 1) or QKV_ERR_NOMEM, *png NULL then. */
qkv_status qkv_png_encode_rgb(uint8_t **png, size_t *len, const uint8_t *rgb, int w, int h, qkv_error *err);

#endif /* QKV_PNG_ENCODE_H */
