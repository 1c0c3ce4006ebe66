/*
 * test_mpi.c — libqkv_mpi and qkv-mpi under mpirun (make mpi-test; the runner
 * is tests/main.c). Open MPI missing is a failure, never a skip.
 *   - qkv-mpi-check at -np 1, 2, 3, 4: qkv_cp_attention and qkv_cp_decode
 *     against single-process qkv_attn (mpi/tests/check.c says what).
 *   - qkv-mpi attend at -np 1 .. 4 on the PyTorch fixtures of tests/fixtures/attn
 *     (causal, window, sinks + window, no mask, exclusions, GQA, MQA, lengths
 *     that do not divide by the rank count, Lq != Lk, rows and ranks that see
 *     no key, soft-capped scores), both layouts: O and LSE equal to `qkv
 *     attend` on the same flags within 1e-5 relative (atol 1e-5 * max|O| for
 *     O entries near 0), and to PyTorch's float64 SDPA (flex_attention for
 *     the capped) within tests/test_oracle_attn.c's tolerances; decode-shaped calls (Lq <= QKV_DECODE_MAX_Q) go through
 *     the sharded decode, at any rank count (one row against 5,000 keys on 2
 *     ranks; more ranks than keys).
 *   - bad input: more ranks than rows, mismatched shapes, a missing file: one
 *     "qkv: " line from rank 0, exit 2, no output file (mpirun -q keeps its
 *     own summary off stderr).
 *   - qkv-mpi run takes every flag of qkv run, and the flags qkv-mpi shares
 *     with qkv refuse the same values with the same line; --ctx sizes each
 *     rank's cache and is refused when it cannot hold a rank's rows, as
 *     --batch is; -v prints rank 0's KV cache and every rank's ring bytes.
 *   - qkv-mpi run on every family equals qkv run at -np 1 .. 4 (the tiny
 *     models of tests/fixtures/families, Gemma 3 270M past its window of
 *     512); windows cut the K/V bytes a rank receives.
 *   - a rank that exits, and one that stalls: the job ends non-zero in
 *     seconds, no output file, the stall named ("timed out") on stderr.
 * Every mpirun runs under timeout(1), so a hang fails the test instead of CI.
 */
#define _POSIX_C_SOURCE 200809L
#include "testing.h"

#include "qkv.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIX "tests/fixtures/attn/"
/* timeout(1) limits: a hang is a failure, a loaded machine is not (the
 * 3,000-token run takes ~15 s on 2 quiet cores, 90 s at load average 15) */
#define MPI_RUN_LIMIT "120"
#define MPI_RUN_LIMIT_MODEL "900"

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

/* mpirun's path (make mpi-test sets QKV_MPIRUN); a test fails without it. */
static const char *mpirun_path(void) {
    const char *p = getenv("QKV_MPIRUN");
    if (!p || !*p || access(p, X_OK)) {
        CHECK(0, "mpirun not found (QKV_MPIRUN='%s'): Open MPI is missing; run make deps", p ? p : "");
        return NULL;
    }
    return p;
}

/* timeout LIMIT mpirun -q ... -np np [-x QKV_MPI_FAULT=fault] prog args...; the exit status. */
static int mpi_run_limit(const char *limit, int np, const char *fault, const char *prog, const char *const *args, char **out,
                         char **err) {
    const char *mpirun = mpirun_path();
    if (!mpirun) return -1;
    char nps[16], fx[64];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(fx, sizeof fx, "QKV_MPI_FAULT=%s", fault ? fault : "");
    const char *argv[64] = {limit, mpirun, "-q", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                            "-np", nps};
    int n = 9;
    if (fault) argv[n++] = "-x", argv[n++] = fx;
    argv[n++] = prog;
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    char *saved = strdup(env_or("QKV_BIN", "build/qkv"));
    setenv("QKV_BIN", "/usr/bin/timeout", 1);
    const int rc = test_run_cli(argv, NULL, out, err);
    setenv("QKV_BIN", saved, 1);
    free(saved);
    return rc;
}

static int mpi_run(int np, const char *fault, const char *prog, const char *const *args, char **out, char **err) {
    return mpi_run_limit(MPI_RUN_LIMIT, np, fault, prog, args, out, err);
}

static const char *qkv_mpi(void) { return env_or("QKV_MPI_BIN", "build/qkv-mpi"); }

static void run_check(int np) {
    char *out = NULL, *err = NULL;
    const int rc = mpi_run(np, NULL, env_or("QKV_MPI_CHECK", "build/mpi/qkv-mpi-check"), (const char *const[]){NULL}, &out, &err);
    CHECK(rc == 0 && out && strstr(out, ", 0 failed"), "qkv-mpi-check -np %d: exit %d\n%s%s", np, rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
}

TEST(mpi_check_np1) { run_check(1); }
TEST(mpi_check_np2) { run_check(2); }
TEST(mpi_check_np3) { run_check(3); }
TEST(mpi_check_np4) { run_check(4); }

typedef struct {
    const char *name;
    int lq, lk;
    const char *flags[8];
} fixture;

static const fixture fixtures[] = {
    {"gqa4_d16_causal_129", 129, 129, {"--causal"}},
    {"gqa8_d16_causal_200", 200, 200, {"--causal"}},
    {"mqa_d256_causal_24", 24, 24, {"--causal"}},
    {"mha_d80_window7_33x45", 33, 45, {"--window", "7"}},
    {"mha_d16_window1_9x9", 9, 9, {"--window", "1"}},
    {"gqa2_d80_sinkwindow4_9_30x70", 30, 70, {"--window", "9", "--sinks", "4"}},
    {"gqa8_d128_none_5x64", 5, 64, {NULL}},
    {"mha_d64_causal_excl_19", 19, 19, {"--causal", "--exclude", "18,0,5,5"}},
    {"mha_d16_causal_fullmask_6", 6, 6, {"--causal", "--exclude", "0,2,3"}},
    {"mha_d16_causal_lq_gt_lk_8x5", 8, 5, {"--causal"}},
    /* decode-shaped: the sharded decode */
    {"mqa_d64_decode_1x777", 1, 777, {"--causal"}},
    {"gqa4_d128_decode_3x67", 3, 67, {"--causal"}},
    {"mqa_d128_decode_excl_1x50", 1, 50, {"--causal", "--exclude", "0,1,2,49,30"}},
    {"mqa_d64_sinkwindow1_3_2x150", 2, 150, {"--window", "3", "--sinks", "1"}},
    {"mha_d16_none_allexcl_3x4", 3, 4, {"--exclude", "3,2,1,0"}},
    {"mha_d16_none_1x1", 1, 1, {NULL}},
    /* soft-capped scores (--softcap): each block's LSE is over capped scores, so the merges stay exact */
    {"gqa2_d256_causal_cap50_24", 24, 24, {"--causal", "--scale", "1", "--softcap", "50"}},
    {"gqa4_d64_window17_cap2_30x90", 30, 90, {"--window", "17", "--softcap", "2"}},
    {"mha_d16_causal_cap3_fullmask_6", 6, 6, {"--causal", "--exclude", "0,2,3", "--scale", "1", "--softcap", "3"}},
    {"mqa_d64_decode_cap5_1x520", 1, 520, {"--causal", "--scale", "0.5", "--softcap", "5"}},
};

/* argv for `attend` on fixture f writing o, lse, with extra flags. */
static void attend_argv(const char **argv, const fixture *f, char paths[3][512], const char *o, const char *lse,
                        const char *layout) {
    int n = 0;
    argv[n++] = "attend";
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        snprintf(paths[i], 512, FIX "%s.%s.npy", f->name, names[i]);
        argv[n++] = i == 0 ? "--q" : i == 1 ? "--k" : "--v";
        argv[n++] = paths[i];
    }
    argv[n++] = "--out", argv[n++] = o, argv[n++] = "--lse", argv[n++] = lse;
    for (int i = 0; i < 8 && f->flags[i]; i++) argv[n++] = f->flags[i];
    if (layout) argv[n++] = "--layout", argv[n++] = layout;
    argv[n] = NULL;
}

static int load(qkv_npy *a, const char *path, int64_t count) {
    qkv_error err = {0};
    if (qkv_npy_load(a, path, &err)) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    CHECK(a->count == count, "%s: %lld values, want %lld", path, (long long)a->count, (long long)count);
    return a->count == count;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

TEST(mpi_attend_matches_qkv_attend_and_pytorch) {
    char o1[512], l1[512], o2[512], l2[512], paths[3][512], what[160];
    snprintf(o1, sizeof o1, "%s/o1.npy", test_tmpdir());
    snprintf(l1, sizeof l1, "%s/l1.npy", test_tmpdir());
    snprintf(o2, sizeof o2, "%s/o2.npy", test_tmpdir());
    snprintf(l2, sizeof l2, "%s/l2.npy", test_tmpdir());
    for (size_t c = 0; c < sizeof fixtures / sizeof fixtures[0]; c++) {
        const fixture *f = &fixtures[c];
        const char *argv[32];
        char *err = NULL;
        attend_argv(argv, f, paths, o1, l1, NULL);
        int rc = test_run_cli(argv, NULL, NULL, &err);
        CHECK(rc == 0, "qkv attend %s: exit %d: %s", f->name, rc, err);
        free(err);
        qkv_npy so, sl, to, tl, mo, ml;
        char tp[2][512];
        snprintf(tp[0], 512, FIX "%s.o.npy", f->name);
        snprintf(tp[1], 512, FIX "%s.lse.npy", f->name);
        qkv_npy_load(&to, tp[0], NULL);
        qkv_npy_load(&tl, tp[1], NULL);
        if (rc || !load(&so, o1, to.count) || !load(&sl, l1, tl.count)) return;
        const double omax = max_abs(to.data, (size_t)to.count);
        for (int np = 1; np <= 4; np++) {
            if (f->lq > QKV_DECODE_MAX_Q && (f->lq < np || f->lk < np)) continue; /* the ring needs a row per rank */
            const char *layout = (np % 2 == 0 && f->lq >= 2 * np && f->lk >= 2 * np) ? "zigzag" : "contiguous";
            attend_argv(argv, f, paths, o2, l2, layout);
            rc = mpi_run(np, NULL, qkv_mpi(), argv, NULL, &err);
            CHECK(rc == 0, "qkv-mpi attend %s -np %d: exit %d: %s", f->name, np, rc, err);
            free(err);
            if (rc || !load(&mo, o2, to.count) || !load(&ml, l2, tl.count)) return;
            snprintf(what, sizeof what, "%s np=%d %s: O vs qkv attend", f->name, np, layout);
            CHECK_CLOSE(what, mo.data, so.data, (size_t)so.count, 1e-5 * omax, 1e-5);
            snprintf(what, sizeof what, "%s np=%d %s: LSE vs qkv attend", f->name, np, layout);
            CHECK_CLOSE(what, ml.data, sl.data, (size_t)sl.count, 0, 1e-5);
            snprintf(what, sizeof what, "%s np=%d %s: O vs PyTorch", f->name, np, layout);
            CHECK_CLOSE(what, mo.data, to.data, (size_t)to.count, 1e-5 * omax + 1e-7, 0);
            snprintf(what, sizeof what, "%s np=%d %s: LSE vs PyTorch", f->name, np, layout);
            CHECK_CLOSE(what, ml.data, tl.data, (size_t)tl.count, 1e-5, 1e-6);
            qkv_npy_free(&mo);
            qkv_npy_free(&ml);
        }
        qkv_npy_free(&so); qkv_npy_free(&sl); qkv_npy_free(&to); qkv_npy_free(&tl);
    }
}

/* One "qkv: " line holding needle from rank 0, exit 2, stdout empty, no output file. */
static void expect_bad(int np, const char *const *argv, const char *needle, const char *out_path) {
    char *out = NULL, *err = NULL;
    const int rc = mpi_run(np, NULL, qkv_mpi(), argv, &out, &err);
    int lines = 0;
    for (const char *p = err ? err : ""; *p; p++) lines += *p == '\n';
    CHECK(rc == 2, "'%s': exit %d, want 2 (stderr: %s)", needle, rc, err);
    CHECK(out && !*out, "'%s': stdout not empty: %.80s", needle, out);
    CHECK(lines == 1 && err && !strncmp(err, "qkv: ", 5) && strstr(err, needle), "stderr is not one 'qkv: ' line with '%s': %s",
          needle, err);
    CHECK(!test_file_exists(out_path), "'%s': an output file was written", needle);
    free(out);
    free(err);
}

TEST(mpi_attend_bad_input) {
    char o[512];
    snprintf(o, sizeof o, "%s/o.npy", test_tmpdir());
    /* 9 rows: too many for the decode, too few for 10 ranks of the ring or 5 zigzag ranks */
    const char *nine_rows[] = {"attend", "--q", FIX "mha_d16_window1_9x9.q.npy", "--k", FIX "mha_d16_window1_9x9.k.npy",
                               "--v", FIX "mha_d16_window1_9x9.v.npy", "--out", o, "--window", "1", NULL};
    expect_bad(10, nine_rows, "10 ranks exceed the sequence's 9 rows", o);
    const char *zigzag[] = {"attend", "--q", FIX "mha_d16_window1_9x9.q.npy", "--k", FIX "mha_d16_window1_9x9.k.npy",
                            "--v", FIX "mha_d16_window1_9x9.v.npy", "--out", o, "--layout", "zigzag", NULL};
    expect_bad(5, zigzag, "zigzag over 5 ranks needs at least 10 rows", o);
    const char *mismatch[] = {"attend", "--q", FIX "mha_d64_causal_37.q.npy", "--k", FIX "mha_d64_causal_37.k.npy",
                              "--v", FIX "mha_d64_causal_excl_19.v.npy", "--out", o, NULL};
    expect_bad(2, mismatch, "shape differs from k's", o);
    const char *missing[] = {"attend", "--q", FIX "no_such.q.npy", "--k", FIX "mha_d64_causal_37.k.npy",
                             "--v", FIX "mha_d64_causal_37.v.npy", "--out", o, NULL};
    expect_bad(4, missing, "no_such.q.npy", o);
    const char *flags[] = {"attend", "--q", "a", "--k", "b", "--v", "c", "--out", o, "--sinks", "2", NULL};
    expect_bad(2, flags, "--sinks needs --window", o);
}

/* Random q: [hq, lq, d], k, v: [hkv, lk, d] as .npy files q, k, v in dir. */
static int write_qkv(const char *dir, int hq, int hkv, int lq, int lk, int d, uint64_t seed) {
    const int64_t shapes[3][3] = {{hq, lq, d}, {hkv, lk, d}, {hkv, lk, d}};
    const char *names[3] = {"q", "k", "v"};
    test_rng r = {seed};
    int ok = 1;
    for (int i = 0; ok && i < 3; i++) {
        const size_t n = (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]);
        float *x = malloc(n * sizeof *x);
        char path[512];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        if (x) test_fill_normal(x, n, &r, 1.0f);
        ok = x && qkv_npy_save_f32(path, x, 3, shapes[i], NULL) == QKV_OK;
        CHECK(ok, "writing %s", path);
        free(x);
    }
    return ok;
}

/* Decode-shaped calls go to the sharded decode (qkv_cp_decode): one row
 * against 5,000 keys on 2 ranks (once '2 ranks exceed the sequence's 1
 * rows'), and 2 rows against 3 keys on 4 ranks (a rank holds no key). O and
 * LSE equal to `qkv attend` on the same flags, as the fixture test has it. */
TEST(mpi_attend_decode_shaped_calls_shard_the_keys) {
    static const struct {
        int hq, hkv, lq, lk, d, np;
        const char *flags[6];
    } cases[] = {
        {8, 2, 1, 5000, 64, 2, {"--causal"}},
        {8, 2, 1, 5000, 64, 3, {"--window", "700", "--sinks", "4", "--exclude", "4999,0,2500"}},
        {4, 4, 8, 300, 32, 2, {"--causal", "--layout", "zigzag"}}, /* --layout is not read */
        {2, 1, 2, 3, 16, 4, {"--causal"}},
    };
    const char *dir = test_tmpdir();
    char q[512], k[512], v[512], o1[512], l1[512], o2[512], l2[512], what[160];
    snprintf(q, sizeof q, "%s/q.npy", dir), snprintf(k, sizeof k, "%s/k.npy", dir), snprintf(v, sizeof v, "%s/v.npy", dir);
    snprintf(o1, sizeof o1, "%s/o1.npy", dir), snprintf(l1, sizeof l1, "%s/l1.npy", dir);
    snprintf(o2, sizeof o2, "%s/o2.npy", dir), snprintf(l2, sizeof l2, "%s/l2.npy", dir);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int hq = cases[c].hq, lq = cases[c].lq, d = cases[c].d, np = cases[c].np;
        if (!write_qkv(dir, hq, cases[c].hkv, lq, cases[c].lk, d, 17 + c)) return;
        const char *argv[32] = {"attend", "--q", q, "--k", k, "--v", v, "--out", NULL, "--lse", NULL};
        int n = 11, single = 0;
        for (int i = 0; i < 6 && cases[c].flags[i]; i++) {
            if (!strcmp(cases[c].flags[i], "--layout")) single = n;
            argv[n++] = cases[c].flags[i];
        }
        argv[n] = NULL;
        char *err = NULL;
        argv[8] = o1, argv[10] = l1;
        if (single) argv[single] = NULL; /* qkv attend has no --layout */
        int rc = test_run_cli(argv, NULL, NULL, &err);
        CHECK(rc == 0, "qkv attend case %zu: exit %d: %s", c, rc, err);
        free(err);
        if (single) argv[single] = "--layout";
        argv[8] = o2, argv[10] = l2;
        rc = mpi_run(np, NULL, qkv_mpi(), argv, NULL, &err);
        CHECK(rc == 0, "qkv-mpi attend case %zu -np %d: exit %d: %s", c, np, rc, err);
        free(err);
        qkv_npy so, sl, mo, ml;
        const int64_t no = (int64_t)hq * lq * d, nl = (int64_t)hq * lq;
        if (rc || !load(&so, o1, no) || !load(&sl, l1, nl) || !load(&mo, o2, no) || !load(&ml, l2, nl)) return;
        snprintf(what, sizeof what, "decode case %zu np=%d: O vs qkv attend", c, np);
        CHECK_CLOSE(what, mo.data, so.data, (size_t)no, 1e-5 * max_abs(so.data, (size_t)no), 1e-5);
        snprintf(what, sizeof what, "decode case %zu np=%d: LSE vs qkv attend", c, np);
        CHECK_CLOSE(what, ml.data, sl.data, (size_t)nl, 0, 1e-5);
        qkv_npy_free(&so); qkv_npy_free(&sl); qkv_npy_free(&mo); qkv_npy_free(&ml);
    }
}

/* A rank that exits (fault exit:R) or stalls (stall:R): non-zero, quick, no output. */
static void expect_dead_rank(const char *fault, const char *needle) {
    char o[512];
    snprintf(o, sizeof o, "%s/o.npy", test_tmpdir());
    const char *argv[] = {"attend", "--q", FIX "gqa4_d16_causal_129.q.npy", "--k", FIX "gqa4_d16_causal_129.k.npy",
                          "--v", FIX "gqa4_d16_causal_129.v.npy", "--out", o, "--causal", "--timeout", "2", NULL};
    char *err = NULL;
    const double t0 = util_now_s();
    const int rc = mpi_run(3, fault, qkv_mpi(), argv, NULL, &err);
    const double dt = util_now_s() - t0;
    CHECK(rc != 0 && rc != 124, "%s: exit %d (124: the job hung until timeout(1)): %s", fault, rc, err);
    CHECK(dt < 30, "%s: the job took %.1f s to end", fault, dt);
    CHECK(!test_file_exists(o), "%s: an output file was written", fault);
    CHECK(!needle || (err && strstr(err, needle)), "%s: stderr lacks '%s': %s", fault, needle, err);
    free(err);
}

TEST(mpi_rank_that_exits_ends_the_job) { expect_dead_rank("exit:1", NULL); }
TEST(mpi_rank_that_stalls_times_out) { expect_dead_rank("stall:2", "timed out after 2 s waiting for"); }

TEST(mpi_bench_reports_the_ring) {
    const char *argv[] = {"bench", "--n", "96", "--hq", "4", "--hkv", "2", "--d", "16", "--repeat", "1", "--json", NULL};
    char *out = NULL, *err = NULL;
    const int rc = mpi_run(3, NULL, qkv_mpi(), argv, &out, &err);
    CHECK(rc == 0, "qkv-mpi bench: exit %d: %s", rc, err);
    /* causal contiguous over 3 ranks: blocks 0 and 1 travel 2 and 1 hops: 3 blocks of 32 rows x 2 heads x 16 x 4 B x (K, V) */
    CHECK(out && strstr(out, "\"ranks\": 3") && strstr(out, "\"mib_sent_per_rank\": 0.008"), "bench JSON: %s", out);
    free(out);
    free(err);
}

/* The first n ids of the GPL-3 under the tokenizer of the model at path, as "id,id,...". */
static char *gpl_ids_of(const char *path, int n) {
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    size_t len = 0;
    char *text = test_read_file("/usr/share/common-licenses/GPL-3", &len);
    int32_t *ids = malloc((size_t)qkv_tokenize_bound(len) * sizeof *ids);
    char *list = malloc((size_t)n * 12 + 1);
    int64_t got = 0;
    CHECK(text && ids && list && qkv_gguf_open(&g, path, NULL) == QKV_OK &&
              qkv_tokenizer_load(&tok, g, NULL) == QKV_OK &&
              qkv_tokenize(tok, text, len, 1, 0, ids, qkv_tokenize_bound(len), &got, NULL) == QKV_OK && got >= n,
          "tokenizing the GPL-3 (%lld ids)", (long long)got);
    size_t o = 0;
    for (int i = 0; list && i < n && i < got; i++) o += (size_t)sprintf(list + o, "%s%d", i ? "," : "", ids[i]);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    free(text);
    free(ids);
    return list;
}

static char *gpl_ids(int n) { return gpl_ids_of(test_model_path(), n); }

/* `qkv run` and `mpirun -np 1 .. 4 qkv-mpi run` on model with the same ids
 * (-n n_gen, greedy): the same continuation, and every prompt position's
 * logits within rtol of qkv run's, relative to the row's largest |logit|.
 * qkv run opens the context qkv-mpi run's one rank does by default,
 * n + n_gen + 1 (its own default is the model's, 512 for the tiny families):
 * a LongRoPE model (phi3) takes its long or short factors by the context.
 * With more ranks each opens its own rows + n_gen + 1; for phi3 (original
 * 128) and phi3_long (original 8) every rank stays on the same side. */
static void run_matches_qkv_run(const char *model, const char *ids, int n, int V, int n_gen, double rtol) {
    char l1[512], l2[512], gen[16], ctx[16];
    snprintf(l1, sizeof l1, "%s/run.npy", test_tmpdir());
    snprintf(l2, sizeof l2, "%s/mpi.npy", test_tmpdir());
    snprintf(gen, sizeof gen, "%d", n_gen);
    snprintf(ctx, sizeof ctx, "%d", n + n_gen + 1);
    const char *argv1[] = {"run",     "-m", model, "--tokens", ids, "-n", gen, "--ctx", ctx, "--print-ids",
                           "--logits", l1, NULL};
    const char *argv2[] = {"run", "-m", model, "--tokens", ids, "-n", gen, "--print-ids", "--logits", l2, NULL};
    char *out1 = NULL, *err = NULL;
    int rc = test_run_cli(argv1, NULL, &out1, &err);
    CHECK(rc == 0, "qkv run %s: exit %d: %s", model, rc, err);
    free(err);
    qkv_npy a;
    if (rc || !load(&a, l1, (int64_t)n * V)) {
        free(out1);
        return;
    }
    for (int np = 1; np <= 4; np++) {
        char *out2 = NULL;
        err = NULL;
        rc = mpi_run_limit(MPI_RUN_LIMIT_MODEL, np, NULL, qkv_mpi(), argv2, &out2, &err);
        CHECK(rc == 0, "%s -np %d: qkv-mpi run: exit %d: %s", model, np, rc, err);
        CHECK(out1 && out2 && !strcmp(out1, out2) && strlen(out1) > (size_t)n_gen,
              "%s -np %d: continuations differ: '%s' against '%s'", model, np, out1, out2);
        qkv_npy b;
        if (!rc && load(&b, l2, a.count)) {
            int64_t at = 0;
            const double worst = test_worst_row(b.data, a.data, n, V, &at);
            CHECK(worst <= rtol, "%s -np %d: logits of position %lld off by %.3g of the row's largest (> %g)", model, np,
                  (long long)at, worst, rtol);
            qkv_npy_free(&b);
        }
        unlink(l2);
        free(out2);
        free(err);
    }
    qkv_npy_free(&a);
    unlink(l1);
    free(out1);
}

/* Every family's tiny model (tests/fixtures/families: qwen2's biases,
 * qwen3's QK-norm, gemma2's soft-caps and window of 8 on layer 0, gemma3's 5
 * sliding layers of window 12 and QK-norm, mistral, smollm3's NoPE layers,
 * olmo2's post-norms only and whole-width QK-norm,
 * phi3's fused projections, partial rotary and LongRoPE) on its prompt
 * at 1 .. 4 ranks: windows of 8 and 12 keys against blocks of 12 to 48 rows
 * put rows in every class of mpi/block.c and send blocks 1 to 3 hops. The
 * logits within 1e-4 of the row's largest (float32 merges through the
 * layers; measured at most 1.2e-6), the 8 greedy ids equal. */
TEST(mpi_run_every_family_matches_qkv_run) {
    static const char *const names[] = {"qwen2", "qwen3", "gemma2", "gemma3", "mistral", "smollm3", "olmo2",
                                        "phi3", "phi3_long"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        char dir[600], model[700];
        snprintf(dir, sizeof dir, "%s/families/%s", test_fixture_dir(), names[i]);
        snprintf(model, sizeof model, "%s/model.gguf", dir);
        int64_t n = 0, n_logits = 0;
        int32_t *ids = test_load_npy(dir, "ids.npy", "", &n);
        float *logits = test_load_npy(dir, "logits.npy", "", &n_logits);
        char *list = ids ? malloc((size_t)n * 12 + 1) : NULL;
        size_t o = 0;
        for (int64_t t = 0; list && t < n; t++) o += (size_t)sprintf(list + o, "%s%d", t ? "," : "", ids[t]);
        if (list && logits) run_matches_qkv_run(model, list, (int)n, (int)(n_logits / n), 8, 1e-4);
        free(list);
        free(ids);
        free(logits);
    }
}

/* Gemma 3 270M over 720 tokens of the GPL-3, longer than its window of 512:
 * rows of the later ranks reach back past their own rows in the 15 sliding
 * layers and not to the sequence's start; 1 .. 4 ranks against qkv run
 * within 1e-4 (as the 3,000-token SmolLM2 run; measured 2.0e-6), the 4 greedy
 * ids equal; ~4 s per rank count on 2 cores. */
TEST(mpi_run_gemma3_past_its_window_matches_qkv_run) {
    if (!test_require_gemma3()) return;
    char *ids = gpl_ids_of(test_gemma3_path(), 720);
    if (ids) run_matches_qkv_run(test_gemma3_path(), ids, 720, 262144, 4, 1e-4);
    free(ids);
}

/* -v's ring lines: windows keep blocks off the ranks whose rows cannot reach
 * them. Tiny Gemma 3 (6 layers, 5 of them sliding with W = 12; 1 KV head,
 * D = 16, f32) on 48 tokens over 4 ranks: blocks of t = 12 rows, a block of
 * 2 x 12 x 16 x 4 = 1536 bytes (K and V). A causal layer sends block b to
 * every later rank, so rank x receives x blocks; a sliding one sends it
 * ceil((W - 1) / t) = 1 hop. Rank x receives x blocks in the global layer
 * and min(x, 1) in each sliding one: 0, 6, 7, 8 blocks, where causal
 * layers throughout would be 0, 6, 12, 18 (rank 3: 12288 bytes, not 27648). */
TEST(mpi_run_windows_cut_the_ring_bytes) {
    char model[600];
    snprintf(model, sizeof model, "%s/families/gemma3/model.gguf", test_fixture_dir());
    char *list = malloc(48 * 4);
    size_t o = 0;
    for (int t = 0; list && t < 48; t++) o += (size_t)sprintf(list + o, "%s%d", t ? "," : "", 2 + t * 5);
    const char *argv[] = {"run", "-m", model, "--tokens", list, "-n", "1", "--print-ids", "-v", NULL};
    char *out = NULL, *err = NULL;
    const int rc = mpi_run(4, NULL, qkv_mpi(), argv, &out, &err);
    CHECK(rc == 0, "qkv-mpi run -v: exit %d: %s", rc, err);
    static const char *const want[] = {"rank 0: ring sent 9216 bytes (6 blocks), received 0 bytes (0 blocks)\n",
                                       "rank 1: ring sent 10752 bytes (7 blocks), received 9216 bytes (6 blocks)\n",
                                       "rank 2: ring sent 12288 bytes (8 blocks), received 10752 bytes (7 blocks)\n",
                                       "rank 3: ring sent 0 bytes (0 blocks), received 12288 bytes (8 blocks)\n"};
    for (int x = 0; x < 4; x++) CHECK(err && strstr(err, want[x]), "stderr lacks '%s': %s", want[x], err);
    free(out);
    free(err);
    free(list);
}

/* 3,000 tokens over 3 ranks: the logits of every prompt position within 2.5e-4
 * of single-process `qkv run`, and the same greedy continuation. The two sum
 * attention in different orders (the ring's LSE merges, each rank's thread
 * split) through 30 layers: measured 9.6e-5 to 1.22e-4 over 147M logits
 * depending on the build and the threads (305 beyond 1e-4 in the worst). */
TEST(mpi_run_3000_tokens_3_ranks_matches_qkv_run) {
    if (!test_require_model()) return;
    char *ids = gpl_ids(3000);
    if (!ids) return;
    char l1[512], l2[512];
    snprintf(l1, sizeof l1, "%s/run.npy", test_tmpdir());
    snprintf(l2, sizeof l2, "%s/mpi.npy", test_tmpdir());
    const char *argv1[] = {"run", "-m", test_model_path(), "--tokens", ids, "-n", "4", "--print-ids", "--logits", l1, NULL};
    const char *argv2[] = {"run", "-m", test_model_path(), "--tokens", ids, "-n", "4", "--print-ids", "--logits", l2, NULL};
    char *out1 = NULL, *out2 = NULL, *err = NULL;
    int rc = test_run_cli(argv1, NULL, &out1, &err);
    CHECK(rc == 0, "qkv run: exit %d: %s", rc, err);
    free(err);
    rc = mpi_run_limit(MPI_RUN_LIMIT_MODEL, 3, NULL, qkv_mpi(), argv2, &out2, &err);
    CHECK(rc == 0, "qkv-mpi run: exit %d: %s", rc, err);
    free(err);
    CHECK(out1 && out2 && !strcmp(out1, out2) && strlen(out1) > 4, "continuations differ: '%s' against '%s'", out1, out2);
    qkv_npy a, b;
    if (!test_failures() && load(&a, l1, (int64_t)3000 * 49152) && load(&b, l2, a.count)) {
        CHECK_CLOSE("qkv-mpi run logits vs qkv run", b.data, a.data, (size_t)a.count, 2.5e-4, 0);
        qkv_npy_free(&a);
        qkv_npy_free(&b);
    }
    unlink(l1);
    unlink(l2);
    free(out1);
    free(out2);
    free(ids);
}

TEST(mpi_run_bad_input) {
    const char *two[] = {"run", "-m", test_model_path(), "--tokens", "1,2", "-n", "1", NULL};
    char o[512];
    snprintf(o, sizeof o, "%s/none.npy", test_tmpdir());
    if (!test_require_model()) return;
    expect_bad(3, two, "3 ranks exceed the prompt's 2 tokens", o);
    const char *nomodel[] = {"run", "-m", "no/such.gguf", "-p", "hello", NULL};
    expect_bad(2, nomodel, "no/such.gguf", o);    /* 7 tokens over 2 ranks: 4 rows on rank 0, + 5 generated + 1 = 10 */
    const char *small[] = {"run", "-m", test_model_path(), "--tokens", "1,2,3,4,5,6,7", "-n", "5", "--ctx", "9", NULL};
    expect_bad(2, small, "--ctx 9 cannot hold a rank's 4 prompt rows and 5 generated tokens (raise --ctx to 10)", o);
    const char *batch[] = {"run", "-m", test_model_path(), "--tokens", "1,2,3,4,5,6,7", "-n", "5", "--batch", "3", NULL};
    expect_bad(2, batch, "--batch 3 cannot hold a rank's 4 prompt rows, which the ring attends in one call (raise --batch to 4)",
               o);
}

/* -v: rank 0's KV cache line, as qkv run prints it (7 tokens over 2 ranks
 * and 2 generated: 4 + 2 + 1 = 7 rows of each of SmolLM2's 30 layers; its 4
 * prompt rows in one call). */
TEST(mpi_run_verbose_prints_rank_0s_kv_cache) {
    if (!test_require_model()) return;
    const char *argv[] = {"run", "-m", test_model_path(), "--tokens", "1,2,3,4,5,6,7", "-n", "2", "--print-ids", "-v", NULL};
    char *out = NULL, *err = NULL;
    const int rc = mpi_run(2, NULL, qkv_mpi(), argv, &out, &err);
    CHECK(rc == 0 && err && strstr(err, "qkv-mpi run: rank 0: KV cache 322560 bytes (0.3 MiB, f32): 30 layers x 7 rows; "
                                        "4 tokens per call\n"),
          "qkv-mpi run -v: exit %d: %s", rc, err);
    free(out);
    free(err);
}

/* --ctx N as qkv run takes it, KV cache positions of one process: the least
 * that holds 40 tokens and 6 more is 46 for qkv run, 27 for each of 2 ranks
 * (20 rows, 6 generated, 1 decode step); the same continuation. */
TEST(mpi_run_ctx_as_qkv_run) {
    if (!test_require_model()) return;
    char *ids = gpl_ids(40);
    if (!ids) return;
    const char *argv[] = {"run", "-m", test_model_path(), "--tokens", ids, "-n", "6", "--print-ids", "--ctx", "46", NULL};
    char *out1 = NULL, *out2 = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out1, &err);
    CHECK(rc == 0, "qkv run --ctx 46: exit %d: %s", rc, err);
    free(err);
    argv[9] = "27";
    rc = mpi_run(2, NULL, qkv_mpi(), argv, &out2, &err);
    CHECK(rc == 0, "qkv-mpi run --ctx 27: exit %d: %s", rc, err);
    free(err);
    CHECK(out1 && out2 && !strcmp(out1, out2) && strlen(out1) > 6, "continuations differ: '%s' against '%s'", out1, out2);
    free(out1);
    free(out2);
    argv[9] = "26";
    char o[512];
    snprintf(o, sizeof o, "%s/none.npy", test_tmpdir());
    expect_bad(2, argv, "--ctx 26 cannot hold a rank's 20 prompt rows and 6 generated tokens (raise --ctx to 27)", o);
    free(ids);
}

/* The flags of `qkv <cmd> --help`: the first word of every line that starts
 * with "  -", aliases dropped ("  -m, --model FILE" gives --model). */
static int help_flags(char names[][32], int max, const char *help) {
    int n = 0;
    for (const char *p = help; p && n < max; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, "  -", 3)) continue;
        const char *w = p + 2;
        const size_t len = strcspn(w, " ,\n");
        if (w[len] == ',') w += len + 2; /* "-m, --model" */
        snprintf(names[n++], 32, "%.*s", (int)strcspn(w, " \n"), w);
    }
    return n;
}

/* qkv-mpi run takes every flag of qkv run, and the flags both CLIs write out
 * row by row (not through a shared CLI_FLAG_* macro, which cannot drift)
 * refuse a value out of range with the same line. */
TEST(mpi_shared_flags_parse_as_in_qkv) {
    char *h1 = NULL, *h2 = NULL, names1[64][32], names2[64][32];
    const char *help[] = {"run", "--help", NULL};
    int rc1 = test_run_cli(help, NULL, &h1, NULL), rc2 = mpi_run(1, NULL, qkv_mpi(), help, &h2, NULL);
    CHECK(rc1 == 0 && rc2 == 0, "run --help: exit %d and %d", rc1, rc2);
    const int n1 = help_flags(names1, 64, h1), n2 = help_flags(names2, 64, h2);
    CHECK(n1 > 10, "qkv run --help lists %d flags: %s", n1, h1);
    for (int i = 0; i < n1; i++) {
        int found = 0;
        for (int j = 0; j < n2; j++) found |= !strcmp(names1[i], names2[j]);
        CHECK(found, "qkv run takes %s, qkv-mpi run does not", names1[i]);
    }
    free(h1);
    free(h2);
    static const char *const bad[][3] = {
        {"run", "--ctx", "4194305"}, {"run", "-n", "1048577"}, {"run", "--temp", "101"}, {"run", "--top-k", "-1"},
        {"run", "--top-p", "0"}, {"run", "--seed", "-1"}, {"run", "--threads", "0"}, {"bench", "--n", "1048577"},
        {"bench", "--hq", "1025"}, {"bench", "--hkv", "0"}, {"bench", "--d", "7"}, {"bench", "--window", "4194305"},
        {"bench", "--repeat", "1001"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {bad[i][0], bad[i][1], bad[i][2], "--help", NULL}; /* accepted: help, exit 0, no work */
        char *e1 = NULL, *e2 = NULL;
        rc1 = test_run_cli(argv, NULL, NULL, &e1);
        rc2 = mpi_run(1, NULL, qkv_mpi(), argv, NULL, &e2);
        CHECK(rc1 == 2 && rc2 == 2 && e1 && e2 && !strncmp(e1, "qkv: ", 5) && !strcmp(e1, e2),
              "%s %s %s: qkv exit %d '%s', qkv-mpi exit %d '%s'", argv[0], argv[1], argv[2], rc1, e1, rc2, e2);
        free(e1);
        free(e2);
    }
}

/* --help names the program that prints it, and an unknown flag points there. */
TEST(mpi_help_names_qkv_mpi) {
    const char *cmds[] = {"attend", "bench", "run"};
    for (int i = 0; i < 3; i++) {
        char *out = NULL, *err = NULL;
        const char *help[] = {cmds[i], "--help", NULL};
        int rc = mpi_run(1, NULL, qkv_mpi(), help, &out, &err);
        char want[64];
        snprintf(want, sizeof want, "usage: qkv-mpi %s ", cmds[i]);
        CHECK(rc == 0 && out && strncmp(out, want, strlen(want)) == 0, "qkv-mpi %s --help: exit %d: %.80s", cmds[i], rc,
              out ? out : "");
        free(out);
        free(err);
        out = err = NULL;
        const char *bad[] = {cmds[i], "--no-such-flag", NULL};
        rc = mpi_run(1, NULL, qkv_mpi(), bad, &out, &err);
        snprintf(want, sizeof want, "see qkv-mpi %s --help", cmds[i]);
        CHECK(rc != 0 && err && strstr(err, want), "qkv-mpi %s --no-such-flag: exit %d: %s", cmds[i], rc, err ? err : "");
        free(out);
        free(err);
    }
}
