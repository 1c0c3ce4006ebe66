/*
 * labels.c — token pieces as readable labels for axes and tooltips.
 * Byte-level BPE cuts text at byte boundaries, so one CJK character (three
 * UTF-8 bytes) can be spread over two tokens whose pieces are not text on
 * their own. The pieces are decoded together; each token shows the
 * characters its bytes belong to, with "…" on the side where a character
 * continues in the neighbouring token. Whitespace and controls get visible
 * stand-ins.
 */
#include "qkv_render.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

/* One character (bytes c[0 .. n)) as shown: stand-ins for blanks and controls. */
static void put_char(sbuf *b, const unsigned char *c, size_t n, int valid) {
    char hex[8];
    if (!valid) {
        for (size_t i = 0; i < n; i++) {
            snprintf(hex, sizeof hex, "\\x%02X", c[i]);
            put(b, hex, 4);
        }
    } else if (n == 1 && c[0] == ' ') {
        put(b, "\xC2\xB7", 2); /* · */
    } else if (n == 1 && c[0] == '\n') {
        put(b, "\xE2\x86\xB5", 3); /* ↵ */
    } else if (n == 1 && c[0] == '\t') {
        put(b, "\xE2\x86\x92", 3); /* → */
    } else if (n == 1 && (c[0] < 0x20 || c[0] == 0x7f)) {
        snprintf(hex, sizeof hex, "\\x%02X", c[0]);
        put(b, hex, 4);
    } else {
        put(b, (const char *)c, n);
    }
}

/* Length of the valid UTF-8 character at s[0 .. n), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (len == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (len == 4 && s[0] == 0xF0 && s[1] < 0x90) return 0;
    if (len == 4 && s[0] == 0xF4 && s[1] >= 0x90) return 0;
    return len;
}

static const char ellipsis[] = "\xE2\x80\xA6"; /* … */

qkv_status qkv_token_labels(char **labels, const char *const *pieces, const size_t *lens, int n,
                            qkv_error *err) {
    if (n < 0 || (n > 0 && (!labels || !pieces || !lens)))
        return util_fail(err, QKV_ERR_INVALID, "token labels: bad arguments");
    size_t total = 0;
    for (int t = 0; t < n; t++) total += lens[t];
    unsigned char *text = malloc(total + 1);
    size_t *start = malloc(((size_t)n + 1) * sizeof *start);
    if (!text || !start) {
        free(text);
        free(start);
        return util_fail(err, QKV_ERR_NOMEM, "token labels: out of memory");
    }
    size_t off = 0;
    for (int t = 0; t < n; t++) {
        start[t] = off;
        if (lens[t]) memcpy(text + off, pieces[t], lens[t]);
        off += lens[t];
    }
    start[n] = off;
    qkv_status st = QKV_OK;
    for (int t = 0; t < n; t++) labels[t] = NULL;
    for (int t = 0; t < n && !st; t++) {
        sbuf b = {0};
        const size_t a = start[t], e = start[t + 1];
        if (a == e) put(&b, "\xE2\x88\x85", 3); /* ∅: an empty piece */
        /* the character containing byte a may start in an earlier token */
        size_t c = a;
        while (c > 0 && a - c < 3 && (text[c] & 0xC0) == 0x80) c--;
        if (c < a && utf8_len(text + c, total - c) <= a - c) c = a; /* a's byte is not inside it */
        while (c < e) {
            size_t len = utf8_len(text + c, total - c);
            const int valid = len > 0;
            if (!valid) len = 1;
            if (c < a) put(&b, ellipsis, 3);
            put_char(&b, text + c, len, valid);
            if (c + len > e) put(&b, ellipsis, 3);
            c += len;
        }
        if (b.oom) {
            free(b.s);
            st = util_fail(err, QKV_ERR_NOMEM, "token labels: out of memory");
        } else {
            labels[t] = b.s;
        }
    }
    free(text);
    free(start);
    if (st) qkv_token_labels_free(labels, n);
    return st;
}

void qkv_token_labels_free(char **labels, int n) {
    if (!labels) return;
    for (int t = 0; t < n; t++) {
        free(labels[t]);
        labels[t] = NULL;
    }
}
