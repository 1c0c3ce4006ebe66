/* util.c — shared CLI helpers: one-line errors and strict number parsing. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++)
        if (*p == '\n') *p = ' ';
    fprintf(stderr, "qkv: %s\n", line);
    return CLI_EXIT_BAD_INPUT;
}

int cli_parse_i64(int64_t *out, const char *flag, const char *s, int64_t lo, int64_t hi) {
    if (!s || !*s) return cli_fail("%s: missing value", flag);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return cli_fail("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi)
        return cli_fail("%s: %lld is out of range [%lld, %lld]", flag, v, (long long)lo,
                        (long long)hi);
    *out = v;
    return 0;
}

int cli_parse_int(int *out, const char *flag, const char *s, long lo, long hi) {
    int64_t v;
    int rc = cli_parse_i64(&v, flag, s, lo, hi);
    if (rc == 0) *out = (int)v;
    return rc;
}

int cli_parse_double(double *out, const char *flag, const char *s, double lo, double hi) {
    if (!s || !*s) return cli_fail("%s: missing value", flag);
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return cli_fail("%s: '%s' is not a finite number", flag, s);
    if (v < lo || v > hi) return cli_fail("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_float(float *out, const char *flag, const char *s, double lo, double hi) {
    double v;
    int rc = cli_parse_double(&v, flag, s, lo, hi);
    if (rc == 0) *out = (float)v;
    return rc;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_fail("%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
