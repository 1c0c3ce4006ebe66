/* util.c — shared CLI helpers: one-line errors, strict number parsing, whole
 * files, JSON strings, timers, peak memory and padded table cells. */
#include "cli.h"
#include "flags.h"
#include "prompt.h"
#include "json_out.h"
#include "util.h"
#include "util/clock.h"
#include "qkv_render.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

void (*cli_before_error)(void);

int cli_fail(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++)
        if (*p == '\n') *p = ' ';
    if (cli_before_error) cli_before_error(); /* the error is a line of its own */
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
    int64_t v = 0;
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
    double v = 0;
    int rc = cli_parse_double(&v, flag, s, lo, hi);
    if (rc == 0) *out = (float)v;
    return rc;
}

int cli_parse_threads(void *dest, const char *flag, const char *value) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    const long most = CLI_THREADS_PER_CPU * cpus;
    int n;
    if (cli_parse_int(&n, flag, value, 1, INT_MAX)) return CLI_EXIT_BAD_INPUT;
    if (n > most)
        return cli_fail("%s %d: this machine has %ld CPU%s online; at most %ld threads (%d per CPU)", flag, n, cpus,
                        cpus == 1 ? "" : "s", most, CLI_THREADS_PER_CPU);
    *(int *)dest = n;
    return 0;
}

char *cli_read_file(const char *path, size_t max_bytes, size_t *len) {
    const int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        cli_fail("%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    struct stat sb; /* what can be refused without reading: a directory, a file over the limit */
    const int known = fstat(fileno(f), &sb) == 0;
    const int is_dir = known && S_ISDIR(sb.st_mode);
    int too_big = known && S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size > max_bytes;
    const int refused = is_dir || too_big;
    /* anything else (a pipe, a device such as /dev/zero) is read up to one byte past the limit */
    size_t cap = max_bytes + 2 < ((size_t)1 << 16) ? max_bytes + 2 : (size_t)1 << 16, n = 0;
    char *buf = refused ? NULL : malloc(cap);
    int oom = !refused && !buf;
    while (buf) {
        if (n + 1 == cap) {
            if (n > max_bytes) {
                too_big = 1;
                break;
            }
            const size_t next = cap > (max_bytes + 2) / 2 ? max_bytes + 2 : 2 * cap;
            char *nb = realloc(buf, next);
            if (!nb) {
                oom = 1;
                break;
            }
            buf = nb;
            cap = next;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const int read_error = !refused && !oom && !too_big && ferror(f);
    const int e = errno;
    if (!is_stdin) fclose(f);
    if (refused || too_big || oom || read_error) {
        if (is_dir) cli_fail("%s: is a directory, not a file", path);
        else if (too_big) cli_fail("%s: larger than the limit of %zu bytes", path, max_bytes);
        else if (oom) cli_fail("%s: out of memory after reading %zu bytes", path, n);
        else cli_fail("%s: read error (%s)", path, strerror(e));
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

typedef struct {
    double key; /* |v|, -1 for NaN */
    int64_t i;
} ranked;

static int by_key_desc(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? 1 : -1;
    return a->i < b->i ? -1 : a->i > b->i;
}

int64_t *cli_by_magnitude(const float *v, int64_t count) {
    ranked *r = malloc((size_t)(count > 0 ? count : 1) * sizeof *r);
    int64_t *idx = malloc((size_t)(count > 0 ? count : 1) * sizeof *idx);
    if (!r || !idx) {
        free(r);
        free(idx);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++) r[i] = (ranked){isnan(v[i]) ? -1 : fabs(v[i]), i};
    qsort(r, (size_t)count, sizeof *r, by_key_desc);
    for (int64_t i = 0; i < count; i++) idx[i] = r[i].i;
    free(r);
    return idx;
}

char **cli_index_labels(int n, const char *prefix, char *const *names) {
    char **l = calloc((size_t)(n > 0 ? n : 1), sizeof *l);
    for (int i = 0; l && i < n; i++) {
        const size_t len = strlen(names ? names[i] : prefix) + 16;
        if (!(l[i] = malloc(len))) {
            cli_labels_free(l, i);
            l = NULL;
            break;
        }
        if (names) snprintf(l[i], len, "%d %s", i, names[i]);
        else snprintf(l[i], len, "%s%d", prefix, i);
    }
    if (!l) cli_fail("out of memory");
    return l;
}

void cli_labels_free(char **labels, int64_t n) {
    for (int64_t i = 0; labels && i < n; i++) free(labels[i]);
    free(labels);
}

const char *cli_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

double cli_status_mib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = atof(line + kl + 1) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

double cli_peak_rss_mib(void) {
    double v = cli_status_mib("VmHWM");
    if (v >= 0) return v;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

double cli_now_s(void) { return util_now_s(); }

void cli_print_kv_cache(const char *prog, const qkv_model *m, qkv_dtype dtype) {
    const qkv_model_config *c = qkv_model_get_config(m);
    int n_global = 0, global_rows = 0, n_sliding = 0, sliding_rows = 0;
    for (int l = 0; l < c->n_layer; l++) { /* the rows of a kind are the same in each of its layers */
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, c, l);
        if (a.window) n_sliding++, sliding_rows = qkv_model_kv_rows(m, l);
        else n_global++, global_rows = qkv_model_kv_rows(m, l);
    }
    const size_t bytes = qkv_model_kv_bytes(m);
    fprintf(stderr, "%s: KV cache %zu bytes (%.1f MiB, %s): ", prog, bytes, (double)bytes / 1048576.0,
            qkv_dtype_name(dtype));
    if (n_sliding)
        fprintf(stderr, "%d global layer%s x %d rows, %d sliding layer%s (window %d) x %d rows", n_global,
                n_global == 1 ? "" : "s", global_rows, n_sliding, n_sliding == 1 ? "" : "s", c->window, sliding_rows);
    else
        fprintf(stderr, "%d layer%s x %d rows", n_global, n_global == 1 ? "" : "s", global_rows);
    fprintf(stderr, "; %d tokens per call\n", qkv_model_n_batch(m));
}

static void json_nested_at(FILE *f, int d, int ndim, const int64_t *shape, int64_t *i, int indent,
                           void (*put)(FILE *f, int64_t i, const void *user), const void *user) {
    fputc('[', f);
    for (int64_t k = 0; k < shape[d]; k++) {
        if (d + 1 < ndim) {
            fprintf(f, "%s\n%*s", k ? "," : "", indent + 2 * (d + 1), "");
            json_nested_at(f, d + 1, ndim, shape, i, indent, put, user);
        } else {
            if (k) fputs(", ", f);
            put(f, (*i)++, user);
        }
    }
    if (d + 1 < ndim && shape[d] > 0) fprintf(f, "\n%*s", indent + 2 * d, "");
    fputc(']', f);
}

void cli_json_nested(FILE *f, int ndim, const int64_t *shape, int indent,
                     void (*put)(FILE *f, int64_t i, const void *user), const void *user) {
    int64_t i = 0;
    json_nested_at(f, 0, ndim, shape, &i, indent, put, user);
}

void cli_json_double(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.10g", x);
    else fputs("null", f);
}

void cli_json_token(FILE *f, int32_t id, const char *label) {
    if (id < 0) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"id\": %d, \"piece\": ", id);
    cli_json_string(f, label);
    fputc('}', f);
}

void cli_json_prompt(FILE *f, const cli_prompt *p) {
    fputc('[', f);
    for (int i = 0; i < p->n; i++) {
        if (i) fputs(", ", f);
        cli_json_token(f, p->ids[i], p->labels[i]);
    }
    fputc(']', f);
}

static void put_float(FILE *f, int64_t i, const void *v) {
    const float x = ((const float *)v)[i];
    if (isfinite(x)) fprintf(f, "%.9g", (double)x);
    else fputs("null", f);
}

void cli_json_floats(FILE *f, const float *v, int ndim, const int64_t *shape, int indent) {
    cli_json_nested(f, ndim, shape, indent, put_float, v);
}

void cli_put_token(const qkv_tokenizer *tok, int32_t id, int print_ids, int first) {
    if (print_ids) {
        printf("%s%d", first ? "" : " ", id);
    } else {
        size_t len = 0;
        const char *piece = qkv_token_piece(tok, id, &len);
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
}

void cli_put_cell(const char *s, int width, int right) {
    int pad = width - qkv_text_width(s);
    if (right)
        for (int i = 0; i < pad; i++) putchar(' ');
    fputs(s, stdout);
    if (!right)
        for (int i = 0; i < pad; i++) putchar(' ');
}
