/*
 * clitext.h — reading figures back out of a command's output, for the tests
 * of explain, scaling and cost: find a line by its label, pull the numbers
 * from it or from a JSON array, compare with the article's rounding, and
 * check the bad-input contract (exit 2, one stderr line, empty stdout).
 * Header-only (static inline) so any test file can include it.
 */
#ifndef QKV_TESTS_CLITEXT_H
#define QKV_TESTS_CLITEXT_H

#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first line at or after from whose text, after leading blanks, starts
 * with label; returns a pointer just past the label, or NULL. */
static inline const char *cli_find_line(const char *from, const char *label) {
    if (!from) return NULL;
    for (const char *p = from; *p;) {
        const char *s = p;
        while (*s == ' ') s++;
        if (!strncmp(s, label, strlen(label))) return s + strlen(label);
        const char *nl = strchr(p, '\n');
        if (!nl) break;
        p = nl + 1;
    }
    return NULL;
}

/* Numbers on the rest of the line at p (anything else is skipped); returns
 * how many were stored in out[cap]. */
static inline int cli_line_numbers(const char *p, double *out, int cap) {
    int n = 0;
    while (p && *p && *p != '\n' && n < cap) {
        if ((*p >= '0' && *p <= '9') || ((*p == '-' || *p == '.') && p[1] >= '0' && p[1] <= '9')) {
            char *end;
            out[n++] = strtod(p, &end);
            p = end;
        } else {
            p++;
        }
    }
    return n;
}

/* The numbers of the JSON array that starts at the first '[' at or after the
 * first occurrence of pattern (nested arrays flattened, null as NaN). */
static inline int cli_json_numbers(const char *json, const char *pattern, double *out, int cap) {
    const char *p = json ? strstr(json, pattern) : NULL;
    if (!p) return -1;
    p = strchr(p, '[');
    if (!p) return -1;
    int depth = 0, n = 0;
    for (; *p; p++) {
        if (*p == '[') depth++;
        else if (*p == ']') {
            if (--depth == 0) break;
        } else if (!strncmp(p, "null", 4)) {
            if (n < cap) out[n++] = NAN;
            p += 3;
        } else if ((*p >= '0' && *p <= '9') || *p == '-') {
            char *end;
            double v = strtod(p, &end);
            if (n < cap) out[n++] = v;
            p = end - 1;
        }
    }
    return n;
}

/* The number after "key": (first occurrence at or after from); NaN if absent. */
static inline double cli_json_number(const char *from, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = from ? strstr(from, pat) : NULL;
    if (!p) return NAN;
    return strtod(p + strlen(pat), NULL);
}

/* |got - want| within half a unit of the last printed decimal: the article's
 * rounding ("0.179" is anything in [0.1785, 0.1795]). */
static inline int cli_rounds_to(double got, double want, int decimals) {
    return fabs(got - want) <= 0.5 * pow(10, -decimals) + 1e-12;
}

/* Bad input: exit 2, nothing on stdout, exactly one line on stderr
 * (CHECK_BAD_CLI with any message). */
#define CHECK_BAD_INPUT(...) CHECK_BAD_CLI(((const char *const[]){__VA_ARGS__, NULL}), "qkv: ")

#endif
