/*
 * json_check.h — a strict JSON reader for the CLI tests (RFC 8259): a whole
 * document is checked (UTF-8 strings, no NaN / Infinity / trailing commas,
 * every number finite as a double), then values are found by key and index
 * on the checked text. Header-only; values are pointers into the document.
 * Not a general parser: it builds nothing, so each lookup rescans.
 */
#ifndef QKV_TESTS_JSON_CHECK_H
#define QKV_TESTS_JSON_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* The end of the string at p ('"'), or NULL if it is not a valid one. */
static inline const char *json_string_end(const char *p) {
    const unsigned char *u = (const unsigned char *)p + 1;
    while (*u != '"') {
        if (*u < 0x20) return NULL; /* raw controls, and the NUL of a string left open */
        if (*u == '\\') {
            u++;
            if (*u == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", u[i]) || !u[i]) return NULL;
                u += 5;
            } else if (*u && strchr("\"\\/bfnrt", *u)) {
                u++;
            } else {
                return NULL;
            }
            continue;
        }
        int len = *u < 0x80 ? 1 : (*u & 0xE0) == 0xC0 ? 2 : (*u & 0xF0) == 0xE0 ? 3 : (*u & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || (len == 2 && *u < 0xC2)) return NULL;
        for (int i = 1; i < len; i++)
            if ((u[i] & 0xC0) != 0x80) return NULL;
        u += len;
    }
    return (const char *)u + 1;
}

/* The end of the value at p (after leading space), or NULL if it is not valid. */
static inline const char *json_value_end(const char *p, int depth) {
    p = json_ws(p);
    if (depth > 64) return NULL;
    if (*p == '"') return json_string_end(p);
    if (*p == '{' || *p == '[') {
        const char close = *p == '{' ? '}' : ']';
        p = json_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"' || !(p = json_string_end(p))) return NULL;
                p = json_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = json_value_end(p, depth + 1))) return NULL;
            p = json_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
            p = json_ws(p);
        }
    }
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    const char *s = p;
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        if (*++p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    return isfinite(strtod(s, NULL)) ? p : NULL;
}

/* 1 if doc is exactly one valid JSON value (space around it allowed). */
static inline int json_valid(const char *doc) {
    const char *e = doc ? json_value_end(doc, 0) : NULL;
    return e && !*json_ws(e);
}

/* The value of key in the object at obj (a checked document), or NULL. */
static inline const char *json_get(const char *obj, const char *key) {
    const char *p = obj ? json_ws(obj) : NULL;
    if (!p || *p != '{') return NULL;
    const size_t kl = strlen(key);
    p = json_ws(p + 1);
    while (*p == '"') {
        const char *k = p + 1, *e = json_string_end(p);
        p = json_ws(json_ws(e) + 1); /* past ':' */
        if ((size_t)(e - 1 - k) == kl && !strncmp(k, key, kl)) return p;
        p = json_ws(json_value_end(p, 0));
        if (*p == ',') p = json_ws(p + 1);
    }
    return NULL;
}

/* Element i of the array at arr (a checked document), or NULL. */
static inline const char *json_at(const char *arr, int i) {
    const char *p = arr ? json_ws(arr) : NULL;
    if (!p || *p != '[') return NULL;
    p = json_ws(p + 1);
    for (int k = 0; *p != ']'; k++) {
        if (k == i) return p;
        p = json_ws(json_value_end(p, 0));
        if (*p == ',') p = json_ws(p + 1);
    }
    return NULL;
}

/* Elements of the array at arr; -1 if it is not an array. */
static inline int json_len(const char *arr) {
    const char *p = arr ? json_ws(arr) : NULL;
    if (!p || *p != '[') return -1;
    int n = 0;
    while (json_at(arr, n)) n++;
    return n;
}

/* The number at v; NAN if it is not one. */
static inline double json_num(const char *v) {
    if (!v) return NAN;
    v = json_ws(v);
    return (*v == '-' || (*v >= '0' && *v <= '9')) ? strtod(v, NULL) : NAN;
}

#endif /* QKV_TESTS_JSON_CHECK_H */
