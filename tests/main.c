/*
 * main.c — the test runner: runs every registered TEST (optionally only those
 * whose name or file contains one of argv[1..]), prints one line per test and ends with
 * "N passed, N failed, N skipped". Exit status 0 only when nothing failed
 * and nothing was skipped (QKV_ALLOW_SKIP=1 lets skips through).
 */
#include "testing.h"

#include "qkv.h"
#include "util/cpu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 1024

typedef struct {
    const char *name;
    const char *file;
    test_fn fn;
} test_case;

static test_case g_tests[MAX_TESTS];
static int g_n_tests;
static int g_failures;
static char g_skip_reason[512]; /* non-empty: the running test was skipped */
static const char *g_current;
static char g_tmpdir[512];

void test_register(const char *name, const char *file, test_fn fn) {
    if (g_n_tests >= MAX_TESTS) {
        fprintf(stderr, "too many tests (raise MAX_TESTS)\n");
        exit(2);
    }
    g_tests[g_n_tests++] = (test_case){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    g_failures++;
    if (g_failures > 10) return;
    fprintf(stderr, "  FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int test_failures(void) { return g_failures; }

void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_skip_reason, sizeof g_skip_reason, fmt, ap);
    va_end(ap);
    if (!g_skip_reason[0]) snprintf(g_skip_reason, sizeof g_skip_reason, "skipped");
}

int test_require_file(const char *path, const char *what) {
    struct stat sb;
    if (stat(path, &sb) == 0) return 1;
    test_skip("%s missing (%s)", path, what);
    return 0;
}

const char *test_model_path(void) {
    const char *p = getenv("QKV_MODEL");
    return p && *p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

int test_require_model(void) { return test_require_file(test_model_path(), "the real model: run `make model`"); }

const char *test_gemma3_path(void) {
    const char *p = getenv("QKV_GEMMA3_MODEL");
    return p && *p ? p : "models/gemma-3-270m-q4_k_m.gguf";
}

int test_require_gemma3(void) { return test_require_file(test_gemma3_path(), "Gemma 3 270M: run `make model`"); }

int test_argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

double test_worst_row(const float *got, const float *want, int64_t rows, int64_t len, int64_t *at) {
    double worst = 0;
    *at = 0;
    for (int64_t r = 0; r < rows; r++) {
        double dmax = 0, wmax = 0;
        for (int64_t i = 0; i < len; i++) {
            dmax = fmax(dmax, fabs((double)got[r * len + i] - want[r * len + i]));
            wmax = fmax(wmax, fabs((double)want[r * len + i]));
        }
        double rel = wmax > 0 ? dmax / wmax : dmax;
        if (isnan(rel)) rel = INFINITY;
        if (rel > worst) worst = rel, *at = r;
    }
    return worst;
}

double test_logit_row_diff(const float *row, int V, double lse, const int32_t *top_ids, const float *top,
                           const int32_t *sub_ids, const float *sub, int64_t n_sub, double *dlse, int *argmax) {
    const int best = test_argmax(row, V);
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)row[v] - row[best]);
    *dlse = fabs(row[best] + log(s) - lse);
    *argmax = best;
    double e = 0;
    for (int k = 0; k < 5; k++) e = fmax(e, fabs(row[top_ids[k]] - top[k]));
    for (int64_t k = 0; k < n_sub; k++) e = fmax(e, fabs(row[sub_ids[k]] - sub[k]));
    return e;
}

void *test_load_npy(const char *dir, const char *a, const char *b, int64_t *count) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s%s", dir, a, b);
    qkv_npy arr;
    qkv_error err = {0};
    if (qkv_npy_load(&arr, path, &err)) {
        CHECK(0, "%s", err.msg);
        return NULL;
    }
    if (count) *count = arr.count;
    return arr.data;
}

double test_compare(const char *file, int line, const char *what, const float *got,
                    const float *want, size_t n, double atol, double rtol) {
    double maxd = 0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        double d;
        if (isnan(g) || isnan(w)) d = (isnan(g) && isnan(w)) ? 0 : INFINITY;
        else if (isinf(g) || isinf(w)) d = (g == w) ? 0 : INFINITY;
        else d = fabs(g - w);
        if (d > maxd) { maxd = d; worst = i; }
        if (d > atol + rtol * fabs(w)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (diff %.3g)\n", what, i, g, w, d);
            bad++;
        }
    }
    if (bad)
        test_fail(file, line, "%s: %zu of %zu beyond atol %.3g + rtol %.3g; max diff %.3g at %zu",
                  what, bad, n, atol, rtol, maxd, worst);
    return maxd;
}

uint64_t test_rng_u64(test_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double test_rng_uniform(test_rng *r) { return (double)(test_rng_u64(r) >> 11) * 0x1.0p-53; }
double test_rng_normal(test_rng *r) {
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
int test_rng_int(test_rng *r, int lo, int hi) {
    return lo + (int)(test_rng_u64(r) % (uint64_t)(hi - lo + 1));
}
void test_fill_normal(float *x, size_t n, test_rng *r, float sd) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(test_rng_normal(r) * sd);
}

static char *slurp_fd(int fd) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    buf[len] = 0;
    return buf;
}

int test_run_cli(const char *const *argv, const char *stdin_text, char **out, char **err) {
    const char *bin = getenv("QKV_BIN");
    return test_run_program(bin ? bin : "build/qkv", argv, stdin_text, out, err);
}

int test_run_program(const char *bin, const char *const *argv, const char *stdin_text, char **out, char **err) {
    char outp[600], errp[600], inp[600];
    snprintf(outp, sizeof outp, "%s/.stdout", test_tmpdir());
    snprintf(errp, sizeof errp, "%s/.stderr", test_tmpdir());
    snprintf(inp, sizeof inp, "%s/.stdin", test_tmpdir());
    FILE *f = fopen(inp, "wb");
    if (!f) return -1;
    if (stdin_text) fputs(stdin_text, f);
    fclose(f);
    int n = 0;
    while (argv[n]) n++;
    char **args = calloc((size_t)n + 2, sizeof *args);
    args[0] = (char *)bin;
    for (int i = 0; i < n; i++) args[i + 1] = (char *)argv[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fi = open(inp, O_RDONLY), fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(bin, args);
        _exit(127);
    }
    free(args);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
    int fd = open(outp, O_RDONLY);
    char *o = fd >= 0 ? slurp_fd(fd) : calloc(1, 1);
    if (fd >= 0) close(fd);
    fd = open(errp, O_RDONLY);
    char *e = fd >= 0 ? slurp_fd(fd) : calloc(1, 1);
    if (fd >= 0) close(fd);
    if (out) *out = o; else free(o);
    if (err) *err = e; else free(e);
    if (!WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

void test_check_bad_cli(const char *file, int line, const char *const *argv, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    int lines = 0;
    for (const char *p = err ? err : ""; *p; p++) lines += *p == '\n';
    const char *a0 = argv[0] ? argv[0] : "", *a1 = argv[0] && argv[1] ? argv[1] : "";
    if (rc != 2) test_fail(file, line, "%s %s: exit %d, want 2 (stderr: %s)", a0, a1, rc, err ? err : "");
    if (out && *out) test_fail(file, line, "%s %s: stdout not empty: %.80s", a0, a1, out);
    if (lines != 1 || strncmp(err ? err : "", "qkv: ", 5))
        test_fail(file, line, "%s %s: stderr is not one 'qkv: ' line: %s", a0, a1, err ? err : "");
    if (!err || !strstr(err, needle)) test_fail(file, line, "%s %s: stderr lacks '%s': %s", a0, a1, needle, err ? err : "");
    free(out);
    free(err);
}

const char *test_tmpdir(void) { return g_tmpdir; }

int test_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

char *test_read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    char *s = slurp_fd(fd);
    close(fd);
    if (len) *len = strlen(s);
    return s;
}

void test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

void test_check_untouched(const char *file, int line, const char *path, const char *text) {
    char *now = test_read_file(path, NULL);
    if (!now || strcmp(now, text)) test_fail(file, line, "%s was changed: %.40s", path, now ? now : "(gone)");
    free(now);
}

int test_count_temporaries(void) {
    DIR *d = opendir(test_tmpdir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".qkv-") != NULL;
    if (d) closedir(d);
    return n;
}

const char *test_fixture_dir(void) {
    const char *d = getenv("QKV_FIXTURES");
    return d ? d : "tests/fixtures";
}

void test_for_each_isa(void (*fn)(void)) {
    const cpu_isa saved = cpu_isa_chosen();
    for (int i = (int)saved; i >= 0; i--) {
        if (!cpu_isa_supported((cpu_isa)i)) continue;
        cpu_isa_limit((cpu_isa)i);
        CHECK(!strcmp(qkv_attn_isa(), cpu_isa_name((cpu_isa)i)), "ISA %s not chosen", cpu_isa_name((cpu_isa)i));
        fn();
    }
    cpu_isa_limit(saved);
}

static void make_tmpdir(const char *name) {
    const char *root = getenv("QKV_TEST_TMP");
    if (!root) root = "build/test-tmp";
    mkdir("build", 0755);
    mkdir(root, 0755);
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/%s", root, name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not clear %s\n", g_tmpdir);
    mkdir(g_tmpdir, 0755);
}

int main(int argc, char **argv) {
    const char *allow = getenv("QKV_ALLOW_SKIP");
    const int allow_skip = allow && !strcmp(allow, "1");
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        test_case *t = &g_tests[i];
        int selected = argc < 2;
        for (int k = 1; k < argc && !selected; k++) selected = strstr(t->name, argv[k]) || strstr(t->file, argv[k]);
        if (!selected) continue;
        g_current = t->name;
        g_failures = 0;
        g_skip_reason[0] = 0;
        make_tmpdir(t->name);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        t->fn();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        if (g_failures) {
            failed++;
            printf("FAIL %-48s (%s, %.0f ms, %d failures)\n", t->name, t->file, ms, g_failures);
        } else if (g_skip_reason[0]) {
            skipped++;
            printf("SKIP %-48s (%s)\n", t->name, g_skip_reason);
        } else {
            passed++;
            printf("ok   %-48s (%.0f ms)\n", t->name, ms);
        }
        fflush(stdout);
    }
    if (skipped && !allow_skip)
        fprintf(stderr, "%d test(s) skipped: a skip is not a pass (QKV_ALLOW_SKIP=1 to accept)\n", skipped);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed || (skipped && !allow_skip) ? 1 : 0;
}
