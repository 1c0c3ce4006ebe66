/*
 * unicode.h — what the tokenizer knows about characters (internal): lenient
 * UTF-8 decoding and the three classes its pre-tokenizers test — letters
 * \p{L}, numbers \p{N} and White_Space \s. The ranges come from
 * tools/gen_unicode_tables.py (src/model/unicode_tables.c).
 */
#ifndef QKV_MODEL_UNICODE_H
#define QKV_MODEL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { QKV_UCD_LETTER = 1, QKV_UCD_NUMBER = 2, QKV_UCD_SPACE = 4 };

typedef struct {
    uint32_t lo, hi;   /* inclusive code point range */
    uint8_t cls;       /* QKV_UCD_LETTER or QKV_UCD_NUMBER */
} qkv_ucd_range;

extern const char qkv_ucd_version[];
extern const qkv_ucd_range qkv_ucd_ranges[];
extern const int qkv_ucd_n_ranges;

/* A byte that does not start a valid UTF-8 sequence decodes to this + byte:
 * no class, one byte long, so invalid input survives byte for byte. */
#define QKV_UCD_INVALID_BASE 0x110000u

/* Decodes the sequence at s[0 .. n) (n >= 1) into *cp; returns its length
 * (1..4). Overlong forms, surrogates, values above U+10FFFF and truncated
 * sequences give QKV_UCD_INVALID_BASE + s[0] and length 1. */
int tokenizer_utf8_decode(uint32_t *cp, const unsigned char *s, size_t n);
/* Writes cp (<= U+10FFFF) as UTF-8 into out[4]; returns the length. */
int tokenizer_utf8_encode(unsigned char *out, uint32_t cp);
/* QKV_UCD_LETTER | QKV_UCD_NUMBER | QKV_UCD_SPACE flags of cp (0 for others). */
int tokenizer_ucd_class(uint32_t cp);

#endif
