/*
 * deflate.c — a zlib stream (RFC 1950) of DEFLATE data (RFC 1951), for the
 * PNG encoder: LZ77 matches of 3 to 258 bytes found through a hash chain
 * over the 32 KiB window, coded with the fixed Huffman codes (§3.2.6). The
 * input is cut into blocks of at most 65,535 bytes; a block whose fixed
 * coding would be longer than the bytes themselves (noise) is stored
 * (§3.2.4) instead, so the stream never grows by more than 5 bytes a block.
 *
 * Not done: dynamic Huffman codes (§3.2.7) and lazy matching; pictures of
 * attention maps are long runs of a few colours, which LZ77 alone takes
 * down to a few percent. The whole input is one buffer in memory.
 */
#include "png_encode.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define WINDOW 32768               /* the largest distance DEFLATE can code */
#define MIN_MATCH 3
#define MAX_MATCH 258
#define HASH_BITS 15
#define MAX_CHAIN 64               /* candidates tried per position */
#define BLOCK_BYTES 65535          /* input bytes per block: what a stored block can hold */

/* ------------------------------------------------------------ bit output */

/* The output: bytes so far, and the bits not yet a whole byte (LSB first). */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
    uint64_t acc;
    int nbits;
    int oom;
} bit_out;

static void put_byte(bit_out *o, uint8_t v) {
    if (o->oom) return;
    if (o->len == o->cap) {
        const size_t cap = o->cap ? o->cap * 2 : 4096;
        uint8_t *b = realloc(o->buf, cap);
        if (!b) {
            o->oom = 1;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
    o->buf[o->len++] = v;
}

/* n <= 32 bits of v, least significant first: DEFLATE's order for header
 * fields and extra bits (§3.1.1). */
static void put_bits(bit_out *o, uint32_t v, int n) {
    o->acc |= (uint64_t)v << o->nbits;
    o->nbits += n;
    while (o->nbits >= 8) {
        put_byte(o, (uint8_t)o->acc);
        o->acc >>= 8;
        o->nbits -= 8;
    }
}

/* A Huffman code of len bits goes most significant bit first (§3.1.1). */
static void put_code(bit_out *o, uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; i++) r |= ((code >> i) & 1u) << (len - 1 - i);
    put_bits(o, r, len);
}

static void align_byte(bit_out *o) {
    if (o->nbits) put_bits(o, 0, 8 - o->nbits);
}

/* ------------------------------------------------ the fixed Huffman codes */

/* Length codes 257..285 (§3.2.5): base length and extra bits. */
static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
/* Distance codes 0..29: base distance and extra bits. */
static const uint16_t dist_base[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                       193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

/* The fixed literal/length code of symbol s in [0, 287] (§3.2.6): its bits
 * in *code, its length returned. */
static int fixed_code(int s, uint32_t *code) {
    if (s < 144) return *code = 0x30u + (uint32_t)s, 8;
    if (s < 256) return *code = 0x190u + (uint32_t)(s - 144), 9;
    if (s < 280) return *code = (uint32_t)(s - 256), 7;
    return *code = 0xC0u + (uint32_t)(s - 280), 8;
}

static int len_code(int len) {
    int c = 28;
    while (len_base[c] > len) c--;
    return c;
}

static int dist_code(int dist) {
    int c = 29;
    while (dist_base[c] > dist) c--;
    return c;
}

/* One block's tokens: a literal (dist 0) or a match of len at dist back. */
typedef struct {
    uint16_t len_or_lit, dist;
} token;

static size_t token_bits(token t) {
    uint32_t code;
    if (!t.dist) return (size_t)fixed_code(t.len_or_lit, &code);
    const int lc = len_code(t.len_or_lit), dc = dist_code(t.dist);
    return (size_t)fixed_code(257 + lc, &code) + len_extra[lc] + 5 + dist_extra[dc];
}

static void put_token(bit_out *o, token t) {
    uint32_t code;
    if (!t.dist) {
        const int n = fixed_code(t.len_or_lit, &code);
        put_code(o, code, n);
        return;
    }
    const int lc = len_code(t.len_or_lit), dc = dist_code(t.dist);
    const int n = fixed_code(257 + lc, &code);
    put_code(o, code, n);
    put_bits(o, (uint32_t)(t.len_or_lit - len_base[lc]), len_extra[lc]);
    put_code(o, (uint32_t)dc, 5); /* fixed distance codes: 5 bits each */
    put_bits(o, (uint32_t)(t.dist - dist_base[dc]), dist_extra[dc]);
}

/* ------------------------------------------------------------- matching */

/* Hash chains: head[h] is the latest position whose next 3 bytes hash to h,
 * prev[p % WINDOW] the position before p with the same hash (-1: none).
 * Invariant: a chain only goes back in position, and prev[p % WINDOW] is
 * p's own link while p is within the window of the position searched. */
typedef struct {
    int64_t head[1 << HASH_BITS];
    int64_t prev[WINDOW];
} chains;

static uint32_t hash3(const uint8_t *p) {
    return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16) * 2654435761u >> (32 - HASH_BITS);
}

static void insert(chains *c, const uint8_t *data, int64_t pos, size_t n) {
    if ((size_t)pos + MIN_MATCH > n) return;
    const uint32_t h = hash3(data + pos);
    c->prev[pos % WINDOW] = c->head[h];
    c->head[h] = pos;
}

/* The longest match for data[pos ..] of at most max_len bytes within the
 * window (before pos is inserted): its length (0 below MIN_MATCH), its
 * distance in *dist. */
static int longest_match(const chains *c, const uint8_t *data, int64_t pos, int max_len, int *dist) {
    if (max_len < MIN_MATCH) return 0;
    int best = 0, tries = MAX_CHAIN;
    int64_t cand = c->head[hash3(data + pos)];
    while (cand >= 0 && pos - cand <= WINDOW && tries-- > 0) {
        const uint8_t *a = data + cand, *b = data + pos;
        if (a[best] == b[best]) {
            int l = 0;
            while (l < max_len && a[l] == b[l]) l++;
            if (l > best) {
                best = l;
                *dist = (int)(pos - cand);
                if (l == max_len) break;
            }
        }
        const int64_t next = c->prev[cand % WINDOW];
        if (next >= cand) break;
        cand = next;
    }
    return best >= MIN_MATCH ? best : 0;
}

/* ---------------------------------------------------------------- blocks */

/* Block data[start, end) from its tokens: fixed Huffman (BTYPE 01), or
 * stored (BTYPE 00) when that is shorter. */
static void put_block(bit_out *o, const uint8_t *data, size_t start, size_t end, const token *t, size_t nt,
                      int final) {
    size_t fixed = 3 + 7; /* header, end of block (symbol 256: 7 bits) */
    for (size_t i = 0; i < nt; i++) fixed += token_bits(t[i]);
    const size_t pad = (size_t)((8 - (o->nbits + 3) % 8) % 8);
    const size_t stored = 3 + pad + 32 + 8 * (end - start);
    put_bits(o, (uint32_t)final, 1);
    if (fixed <= stored) {
        put_bits(o, 1, 2);
        for (size_t i = 0; i < nt; i++) put_token(o, t[i]);
        put_code(o, 0, 7);
        return;
    }
    put_bits(o, 0, 2);
    align_byte(o);
    const uint32_t len = (uint32_t)(end - start);
    put_bits(o, len, 16); /* LEN, then NLEN = its one's complement, LSB first */
    put_bits(o, ~len & 0xFFFFu, 16);
    for (size_t i = start; i < end; i++) put_byte(o, data[i]);
}

qkv_status qkv_zlib_compress(uint8_t **out, size_t *out_len, const uint8_t *data, size_t n, qkv_error *err) {
    *out = NULL;
    *out_len = 0;
    chains *c = malloc(sizeof *c);
    token *t = malloc(BLOCK_BYTES * sizeof *t);
    bit_out o = {0};
    if (!c || !t) {
        free(c);
        free(t);
        return util_fail(err, QKV_ERR_NOMEM, "zlib: out of memory");
    }
    for (size_t i = 0; i < (size_t)1 << HASH_BITS; i++) c->head[i] = -1;
    /* RFC 1950 header: CM 8 (deflate), CINFO 7 (32 KiB window); FLG: FLEVEL 0,
     * no dictionary, FCHECK making 0x7801 a multiple of 31 */
    put_byte(&o, 0x78);
    put_byte(&o, 0x01);
    size_t pos = 0;
    do {
        const size_t start = pos, end = n - pos > BLOCK_BYTES ? pos + BLOCK_BYTES : n;
        size_t nt = 0;
        while (pos < end) {
            const size_t left = end - pos;
            int dist = 0;
            const int len = longest_match(c, data, (int64_t)pos, left < MAX_MATCH ? (int)left : MAX_MATCH, &dist);
            if (len) {
                t[nt++] = (token){(uint16_t)len, (uint16_t)dist};
                for (int i = 0; i < len; i++) insert(c, data, (int64_t)(pos + i), n);
                pos += (size_t)len;
            } else {
                t[nt++] = (token){data[pos], 0};
                insert(c, data, (int64_t)pos, n);
                pos++;
            }
        }
        put_block(&o, data, start, end, t, nt, end == n);
    } while (pos < n);
    align_byte(&o);
    const uint32_t adler = qkv_adler32(1, data, n);
    for (int s = 24; s >= 0; s -= 8) put_byte(&o, (uint8_t)(adler >> s)); /* big-endian */
    free(c);
    free(t);
    if (o.oom) {
        free(o.buf);
        return util_fail(err, QKV_ERR_NOMEM, "zlib: out of memory for the compressed stream");
    }
    *out = o.buf;
    *out_len = o.len;
    return QKV_OK;
}

uint32_t qkv_adler32(uint32_t adler, const void *data, size_t n) {
    const uint8_t *p = data;
    uint32_t a = adler & 0xFFFF, b = adler >> 16;
    while (n) {
        /* 5552 bytes: the most before b can pass 2^32 (RFC 1950's NMAX) */
        size_t k = n < 5552 ? n : 5552;
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}
