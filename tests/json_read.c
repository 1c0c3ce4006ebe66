/*
 * json_read.c — the tests' JSON reader (json_read.h): recursive descent
 * over the text, a tree of malloc'd values. Depth is bounded (64) so a
 * hostile document cannot exhaust the stack; a command's output never nests
 * deeper than 4.
 */
#include "json_read.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const char *s, *p;
    char *err;
    size_t cap;
    int failed;
} reader;

static void fail(reader *r, const char *what) {
    if (r->failed) return;
    r->failed = 1;
    snprintf(r->err, r->cap, "%s at byte %ld", what, (long)(r->p - r->s));
}

static void skip_ws(reader *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

/* Appends code point cp as UTF-8 to buf at *len (buf has room). */
static void put_utf8(char *buf, size_t *len, unsigned cp) {
    if (cp < 0x80) {
        buf[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        buf[(*len)++] = (char)(0xC0 | cp >> 6);
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        buf[(*len)++] = (char)(0xE0 | cp >> 12);
        buf[(*len)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        buf[(*len)++] = (char)(0xF0 | cp >> 18);
        buf[(*len)++] = (char)(0x80 | (cp >> 12 & 0x3F));
        buf[(*len)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(reader *r, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = r->p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            fail(r, "bad \\u escape");
            return -1;
        }
        v = v * 16 + (unsigned)d;
    }
    r->p += 4;
    *out = v;
    return 0;
}

/* The string at r->p (on its opening quote), decoded; NULL after fail. */
static char *read_string(reader *r) {
    const char *start = ++r->p;
    size_t raw = 0;
    while (start[raw] && start[raw] != '"') raw += start[raw] == '\\' && start[raw + 1] ? 2 : 1;
    char *buf = malloc(raw + 1); /* decoding never lengthens */
    size_t len = 0;
    if (!buf) {
        fail(r, "out of memory");
        return NULL;
    }
    for (;;) {
        const unsigned char c = (unsigned char)*r->p;
        if (!c) {
            fail(r, "unterminated string");
            break;
        }
        if (c == '"') {
            r->p++;
            buf[len] = 0;
            return buf;
        }
        if (c < 0x20) {
            fail(r, "control character in a string");
            break;
        }
        if (c != '\\') {
            buf[len++] = (char)c;
            r->p++;
            continue;
        }
        const char e = r->p[1];
        r->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            buf[len++] = to[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') {
            fail(r, "bad escape");
            break;
        }
        unsigned cp, lo;
        if (hex4(r, &cp)) break;
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
            if (r->p[0] != '\\' || r->p[1] != 'u') {
                fail(r, "lone surrogate");
                break;
            }
            r->p += 2;
            if (hex4(r, &lo)) break;
            if (lo < 0xDC00 || lo >= 0xE000) {
                fail(r, "bad surrogate pair");
                break;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail(r, "lone surrogate");
            break;
        }
        put_utf8(buf, &len, cp); /* at most 4 bytes for the 6 or 12 read */
    }
    free(buf);
    return NULL;
}

static void free_items(test_json *v) {
    for (int i = 0; i < v->n; i++) {
        free_items(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

static int read_value(reader *r, test_json *out, int depth);

/* An array or object (r->p on its bracket) into out. */
static int read_list(reader *r, test_json *out, int depth, int object) {
    const char close = object ? '}' : ']';
    out->kind = object ? TEST_JSON_OBJECT : TEST_JSON_ARRAY;
    r->p++;
    skip_ws(r);
    if (*r->p == close) {
        r->p++;
        return 0;
    }
    for (int cap = 0;;) {
        if (out->n == cap) {
            cap = cap ? 2 * cap : 8;
            test_json *items = realloc(out->items, (size_t)cap * sizeof *items);
            char **keys = object ? realloc(out->keys, (size_t)cap * sizeof *keys) : NULL;
            if (items) out->items = items;
            if (keys) out->keys = keys;
            if (!items || (object && !keys)) {
                fail(r, "out of memory");
                return -1;
            }
        }
        test_json *item = &out->items[out->n];
        memset(item, 0, sizeof *item);
        if (object) {
            skip_ws(r);
            if (*r->p != '"') {
                fail(r, "expected a key");
                return -1;
            }
            char *key = read_string(r);
            if (!key) return -1;
            out->keys[out->n] = key;
            skip_ws(r);
            if (*r->p != ':') {
                out->n++; /* the key is freed with the rest */
                fail(r, "expected ':'");
                return -1;
            }
            r->p++;
        }
        out->n++;
        if (read_value(r, item, depth + 1)) return -1;
        skip_ws(r);
        if (*r->p == close) {
            r->p++;
            return 0;
        }
        if (*r->p != ',') {
            fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
            return -1;
        }
        r->p++;
    }
}

static int read_value(reader *r, test_json *out, int depth) {
    if (depth > MAX_DEPTH) {
        fail(r, "nested too deep");
        return -1;
    }
    skip_ws(r);
    const char c = *r->p;
    if (c == '{' || c == '[') return read_list(r, out, depth, c == '{');
    if (c == '"') {
        out->kind = TEST_JSON_STRING;
        return (out->string = read_string(r)) ? 0 : -1;
    }
    static const struct {
        const char *word;
        test_json_kind kind;
        double value;
    } words[] = {{"null", TEST_JSON_NULL, 0}, {"true", TEST_JSON_BOOL, 1}, {"false", TEST_JSON_BOOL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strncmp(r->p, words[i].word, strlen(words[i].word))) {
            r->p += strlen(words[i].word);
            out->kind = words[i].kind;
            out->number = words[i].value;
            return 0;
        }
    /* a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
    const char *p = r->p;
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else {
        fail(r, "expected a value");
        return -1;
    }
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9')) {
            fail(r, "bad number");
            return -1;
        }
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) {
            fail(r, "bad number");
            return -1;
        }
        while (*p >= '0' && *p <= '9') p++;
    }
    out->kind = TEST_JSON_NUMBER;
    out->number = strtod(r->p, NULL);
    r->p = p;
    return 0;
}

test_json *test_json_parse(const char *text, char *err, size_t cap) {
    reader r = {.s = text, .p = text, .err = err, .cap = cap};
    test_json *v = calloc(1, sizeof *v);
    if (!text || !v) {
        snprintf(err, cap, "no text or out of memory");
        free(v);
        return NULL;
    }
    if (!read_value(&r, v, 0)) {
        skip_ws(&r);
        if (*r.p) fail(&r, "text after the value");
    }
    if (r.failed) {
        test_json_free(v);
        return NULL;
    }
    return v;
}

void test_json_free(test_json *v) {
    if (!v) return;
    free_items(v);
    free(v);
}

const test_json *test_json_get(const test_json *v, const char *key) {
    if (!v || v->kind != TEST_JSON_OBJECT) return NULL;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

/* The shape below v, checked against shape[0 ..) from depth on; -1 when ragged. */
static int shape_at(const test_json *v, int64_t *shape, int max_dims, int depth, int *ndim) {
    if (v->kind == TEST_JSON_NUMBER || v->kind == TEST_JSON_NULL) {
        if (*ndim < 0) *ndim = depth;
        return *ndim == depth ? 0 : -1;
    }
    if (v->kind != TEST_JSON_ARRAY || depth >= max_dims) return -1;
    if (*ndim >= 0 && depth >= *ndim) return -1;
    if (*ndim < 0 && v->n == 0) { /* an empty list ends the shape here */
        shape[depth] = 0;
        *ndim = depth + 1;
        return 0;
    }
    if (*ndim < 0 || depth == 0) shape[depth] = v->n;
    if (shape[depth] != v->n) return -1;
    for (int i = 0; i < v->n; i++)
        if (shape_at(&v->items[i], shape, max_dims, depth + 1, ndim)) return -1;
    return 0;
}

int test_json_shape(const test_json *v, int64_t *shape, int max_dims) {
    int ndim = -1;
    if (!v || shape_at(v, shape, max_dims, 0, &ndim)) return -1;
    return ndim;
}

static void leaves(const test_json *v, double *out, int64_t cap, int64_t *n) {
    if (v->kind == TEST_JSON_ARRAY) {
        for (int i = 0; i < v->n; i++) leaves(&v->items[i], out, cap, n);
        return;
    }
    if (*n < cap) out[*n] = v->kind == TEST_JSON_NUMBER ? v->number : NAN;
    (*n)++;
}

int64_t test_json_numbers(const test_json *v, double *out, int64_t cap) {
    int64_t n = 0;
    if (v) leaves(v, out, cap, &n);
    return n;
}
