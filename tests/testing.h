/*
 * testing.h — the test runner's tiny framework.
 *
 * TEST(name) { ... } defines and registers a test (a constructor adds it to the
 * runner's list, so a new tests/ file needs no central table). CHECK(cond,
 * fmt, ...) records a failure with file:line and goes on; a test passes when it
 * recorded none. Helpers compare arrays and report max diff and the first few
 * mismatches, stopping after 10.
 */
#ifndef QKV_TESTING_H
#define QKV_TESTING_H

#include <stddef.h>
#include <stdint.h>

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);

#define TEST(name)                                                          \
    static void test_##name(void);                                          \
    static void test_register_##name(void) __attribute__((constructor));    \
    static void test_register_##name(void) { test_register(#name, __FILE__, test_##name); } \
    static void test_##name(void)

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)

/* Number of failures recorded by the running test so far. */
int test_failures(void);

/* Marks the running test SKIPPED (reason printed, counted apart from passed);
 * the caller returns. A skip is not a pass: the runner exits non-zero when
 * anything was skipped unless QKV_ALLOW_SKIP=1 (make test never sets it, CI
 * has the model and Chromium), so a missing model or fixture cannot turn a
 * test green. A test that also recorded a failure is FAIL. */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* 1 if path exists, else skips the running test naming what is missing and
 * returns 0: `if (!test_require_file(path, "the model; run make model")) return;` */
int test_require_file(const char *path, const char *what);
/* The real model: $QKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf. */
const char *test_model_path(void);
/* test_require_file(test_model_path(), ...): 1 when the model is there. */
int test_require_model(void);
/* Gemma 3 270M: $QKV_GEMMA3_MODEL, else models/gemma-3-270m-q4_k_m.gguf; and
 * test_require_file of it. */
const char *test_gemma3_path(void);
int test_require_gemma3(void);
/* The data of the .npy at dir/a b (b may be ""), malloc'd (the caller frees
 * it), *count its elements (count may be NULL); NULL after a failed CHECK
 * naming the file. */
void *test_load_npy(const char *dir, const char *a, const char *b, int64_t *count);
/* One position's logits row [V] against a fixture that keeps, per position,
 * its log-sum-exp, the top 5 ids and values and n_sub sampled values:
 *   top_ids, top: [5]   sub_ids: [n_sub] (the same ids at every position)   sub: [n_sub]
 * Returns the largest |difference| over those values; *dlse gets |lse - fixture|,
 * *argmax the row's own argmax (lowest id on ties). */
double test_logit_row_diff(const float *row, int V, double lse, const int32_t *top_ids, const float *top,
                           const int32_t *sub_ids, const float *sub, int64_t n_sub, double *dlse, int *argmax);

/* The worst row of got against want, both [rows, len]: max over rows of
 * max |got - want| / max |want| (a NaN counts as infinity); *at gets its row. */
double test_worst_row(const float *got, const float *want, int64_t rows, int64_t len, int64_t *at);
/* The index of the largest of row[n], the lowest on ties (greedy decoding). */
int test_argmax(const float *row, int n);

/* max |a-b| over n; reports when above tol. Returns the max diff.
 * what names the comparison in the failure message. */
double test_compare(const char *file, int line, const char *what, const float *got,
                    const float *want, size_t n, double atol, double rtol);
#define CHECK_CLOSE(what, got, want, n, atol, rtol) \
    test_compare(__FILE__, __LINE__, what, got, want, n, atol, rtol)

/* Deterministic random numbers (splitmix64 / Box-Muller). */
typedef struct { uint64_t s; } test_rng;
uint64_t test_rng_u64(test_rng *r);
double test_rng_uniform(test_rng *r);          /* [0, 1) */
double test_rng_normal(test_rng *r);           /* N(0, 1) */
int test_rng_int(test_rng *r, int lo, int hi); /* [lo, hi] */
void test_fill_normal(float *x, size_t n, test_rng *r, float sd);

/* Runs the qkv binary ($QKV_BIN, default build/qkv) with argv (NULL-ended,
 * without the program name), feeding stdin_text (may be NULL). Captures stdout
 * and stderr into malloc'd strings (caller frees). Returns the exit status,
 * or -1 if the process could not be run or was killed by a signal. */
int test_run_cli(const char *const *argv, const char *stdin_text, char **out, char **err);
/* The same for any program bin (a path, run without a shell). */
int test_run_program(const char *bin, const char *const *argv, const char *stdin_text, char **out, char **err);

/* The bad-input contract of every command: runs argv and checks exit status 2,
 * nothing on stdout, exactly one "qkv: " line on stderr containing needle. */
void test_check_bad_cli(const char *file, int line, const char *const *argv, const char *needle);
#define CHECK_BAD_CLI(...) test_check_bad_cli(__FILE__, __LINE__, __VA_ARGS__) /* (argv, needle) */

/* A fresh empty directory under build/ for the running test; returns its path. */
const char *test_tmpdir(void);
/* 1 if a file exists at path. */
int test_file_exists(const char *path);
/* Reads a whole file (malloc'd, NUL-terminated) or returns NULL. */
char *test_read_file(const char *path, size_t *len);

/* Directory holding committed fixtures (tests/fixtures). */
const char *test_fixture_dir(void);

/* Runs fn under every kernel ISA this CPU supports up to the process's
 * choice (QKV_ISA narrows it: QKV_ISA=avx2 sweeps avx2 and scalar), each made
 * the process's ISA in turn (cpu_isa_limit), best first; the choice is
 * restored after. */
void test_for_each_isa(void (*fn)(void));

#endif /* QKV_TESTING_H */
