/*
 * test_alloc_fail_cli.c — every allocation failure on a command's main path
 * is an error, never a crash and never a silent change of result. Each
 * command below runs in-process (the CLI is linked into the runner) in a
 * forked child, first once to count the allocations qkv's own code makes
 * (alloc_count.h), then once per allocation with exactly that one failing.
 * Each failing run must exit with status 2 after exactly one "qkv: " line on
 * stderr, print nothing on stdout and leave no output file or temporary: a
 * run that still exits 0 has fallen back silently (the sampler turning
 * greedy, a chat template losing its system turn, a PNG without labels).
 */
#include "testing.h"

#include "alloc_count.h"
#include "qkv.h"
#include "../cli/commands.h"

#include <dirent.h>
#include <fcntl.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*command_fn)(int argc, char **argv);

/* The outcome of one child run. */
typedef struct {
    int status;      /* waitpid's */
    int64_t seen;    /* qkv allocations the run made */
    int64_t where;   /* the failed one's caller (alloc_fail_where) */
    char *out, *err; /* its stdout and stderr */
} child_run;

static char *slurp(const char *path) {
    char *s = test_read_file(path, NULL);
    return s ? s : calloc(1, 1);
}

/* Runs cmd(argv) in a child with allocation `fail` failing (0: none). */
static child_run run_child(command_fn cmd, const char *const *argv, int64_t fail) {
    char outp[600], errp[600];
    snprintf(outp, sizeof outp, "%s/.child-out", test_tmpdir());
    snprintf(errp, sizeof errp, "%s/.child-err", test_tmpdir());
    int pipefd[2];
    child_run r = {0};
    if (pipe(pipefd) != 0) return r;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        alarm(60); /* a hang is a failure too */
        omp_set_num_threads(1); /* the parent's OpenMP pool does not survive fork */
        int argc = 0;
        char *args[32];
        while (argv[argc] && argc < 31) args[argc] = (char *)argv[argc], argc++;
        args[argc] = NULL;
        alloc_fail_at(fail ? fail : INT64_MAX);
        int rc = cmd(argc, args);
        const int64_t report[2] = {alloc_fail_seen(), alloc_fail_where()};
        alloc_fail_at(0);
        fflush(stdout);
        fflush(stderr);
        if (write(pipefd[1], report, sizeof report) != (ssize_t)sizeof report) rc = 99;
        _exit(rc);
    }
    close(pipefd[1]);
    if (pid > 0) {
        int64_t report[2] = {-1, -1};
        if (read(pipefd[0], report, sizeof report) == (ssize_t)sizeof report) r.seen = report[0], r.where = report[1];
        waitpid(pid, &r.status, 0);
    }
    close(pipefd[0]);
    r.out = slurp(outp);
    r.err = slurp(errp);
    return r;
}

/* Files in the test directory other than the runner's and the inputs. */
static int stray_files(const char *keep_prefix) {
    DIR *d = opendir(test_tmpdir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.' && strncmp(e->d_name, keep_prefix, strlen(keep_prefix)) != 0;
    if (d) closedir(d);
    return n;
}

/* The sweep: a clean run first (exit 0), then every allocation failing in
 * turn — the first `all` of them, then every stride-th (for commands that
 * repeat one path, such as stream's six model opens). Inputs in the test
 * directory start with "in-", outputs do not. */
static void sweep_some(const char *what, command_fn cmd, const char *const *argv, int64_t all, int64_t stride) {
    const int failures_before = test_failures();
    child_run clean = run_child(cmd, argv, 0);
    CHECK(WIFEXITED(clean.status) && WEXITSTATUS(clean.status) == 0 && clean.seen >= 0,
          "%s: the clean run: status %d, %lld allocations: %s", what, clean.status, (long long)clean.seen, clean.err);
    const int64_t n = clean.seen;
    free(clean.out);
    free(clean.err);
    if (test_failures() > failures_before) return;
    /* its outputs out of the way: a failing run must leave none */
    char cmdline[700];
    snprintf(cmdline, sizeof cmdline, "cd '%s' && find . -maxdepth 1 -type f ! -name '.*' ! -name 'in-*' -delete",
             test_tmpdir());
    if (system(cmdline) != 0) test_fail(__FILE__, __LINE__, "cannot clear %s", test_tmpdir());
    int reported = 0;
    int64_t tried = 0;
    for (int64_t k = 1; k <= n && reported < 5; k += k < all ? 1 : stride, tried++) {
        child_run r = run_child(cmd, argv, k);
        int lines = 0;
        for (const char *p = r.err; *p; p++) lines += *p == '\n';
        const char *why = NULL;
        if (WIFSIGNALED(r.status)) why = WTERMSIG(r.status) == SIGALRM ? "hung" : "crashed";
        else if (WEXITSTATUS(r.status) == 0) why = "succeeded anyway (a silent fallback)";
        else if (WEXITSTATUS(r.status) != 2) why = "exit status is not 2";
        else if (lines != 1 || strncmp(r.err, "qkv: ", 5)) why = "stderr is not one 'qkv: ' line";
        else if (r.out[0]) why = "printed on stdout";
        else if (stray_files("in-")) why = "left a file behind";
        if (why) {
            test_fail(__FILE__, __LINE__,
                      "%s, allocation %lld of %lld failing (called at addr2line -e build/qkv-test 0x%llx): %s "
                      "(status %d; stderr: %.200s)",
                      what, (long long)k, (long long)n, (unsigned long long)r.where, why, r.status, r.err);
            reported++;
            if (system(cmdline) != 0) break;
        }
        free(r.out);
        free(r.err);
    }
    if (tried == n) printf("     %-44s %lld allocations, each failed in turn\n", what, (long long)n);
    else printf("     %-44s %lld allocations, %lld failed in turn\n", what, (long long)n, (long long)tried);
}

static void sweep(const char *what, command_fn cmd, const char *const *argv) {
    sweep_some(what, cmd, argv, INT64_MAX, 1);
}

static const char *in_path(int slot, const char *name) {
    static char paths[8][600];
    snprintf(paths[slot], sizeof paths[slot], "%s/in-%s", test_tmpdir(), name);
    return paths[slot];
}

static const char *out_path(int slot, const char *name) {
    static char paths[8][600];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", test_tmpdir(), name);
    return paths[slot];
}

TEST(alloc_fail_attend) {
    test_rng r = {3};
    float x[2 * 6 * 16];
    const int64_t shape[3] = {2, 6, 16};
    for (int i = 0; i < 3; i++) {
        test_fill_normal(x, 2 * 6 * 16, &r, 1);
        qkv_npy_save_f32(in_path(i, i == 0 ? "q.npy" : i == 1 ? "k.npy" : "v.npy"), x, 3, shape, NULL);
    }
    FILE *f = fopen(in_path(3, "pos.npy"), "wb"); /* int32 positions 0, 2, 4, ... */
    const char hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }";
    fwrite(hdr, 1, sizeof hdr - 1, f);
    for (size_t i = sizeof hdr - 1; i < 10 + 0x76 - 1; i++) fputc(' ', f);
    fputc('\n', f);
    for (int32_t i = 0; i < 6; i++) {
        int32_t p = 2 * i;
        fwrite(&p, 4, 1, f);
    }
    fclose(f);
    const char *q = in_path(0, "q.npy"), *k = in_path(1, "k.npy"), *v = in_path(2, "v.npy"), *pos = in_path(3, "pos.npy");
    sweep("attend --rope --positions --exclude", cmd_attend,
          (const char *const[]){"attend", "--q", q, "--k", k, "--v", v, "--out", out_path(0, "o.npy"), "--lse",
                                out_path(1, "lse.npy"), "--rope", "half", "--positions", pos, "--exclude", "1,3", "--causal",
                                "--threads", "1", NULL});
    sweep("attend --kernel ref --weights", cmd_attend,
          (const char *const[]){"attend", "--q", q, "--k", k, "--v", v, "--out", out_path(0, "o.npy"), "--weights",
                                out_path(2, "w.npy"), "--kernel", "ref", "--window", "3", "--sinks", "1", NULL});
}

TEST(alloc_fail_model_commands) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    sweep("run --temp --top-k --top-p --logits", cmd_run,
          (const char *const[]){"run", "-m", m, "--tokens", "1,9690", "-n", "2", "--ctx", "8", "--temp", "0.8",
                                "--top-k", "5", "--top-p", "0.9", "--logits", out_path(0, "logits.npy"), "--threads",
                                "1", NULL});
    sweep("run --chat (the template's system turn)", cmd_run,
          (const char *const[]){"run", "-m", m, "-p", "hi", "--chat", "-n", "1", "--ctx", "64", "--threads", "1", NULL});
    sweep("tokenize", cmd_tokenize, (const char *const[]){"tokenize", "-m", m, "-p", "Hello world", NULL});
    sweep("inspect --npy --html --png --json", cmd_inspect,
          (const char *const[]){"inspect", "-m", m, "-p", "Hi there", "--layers", "0", "--heads", "0", "--npy",
                                out_path(0, "a.npy"), "--html", out_path(1, "a.html"), "--png", out_path(2, "a.png"),
                                "--json", "--threads", "1", NULL});
}

TEST(alloc_fail_probe_commands) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    sweep("sinks --svg --json", cmd_sinks,
          (const char *const[]){"sinks", "-m", m, "-p", "one two three four five six", "--skip", "1", "--svg",
                                out_path(0, "s.svg"), "--json", "--threads", "1", NULL});
    sweep("ablate --svg --html", cmd_ablate,
          (const char *const[]){"ablate", "-m", m, "-p", "Paris is in", "--svg", out_path(0, "a.svg"), "--html",
                                out_path(1, "a.html"), "--threads", "1", NULL});
    /* six variants, each opening the model: the first in full, then every 23rd */
    sweep_some("stream --svg", cmd_stream,
          (const char *const[]){"stream", "-m", m, "-p", "one two three four five six", "--window", "4", "--sinks",
                                "1", "--chunk", "2", "--svg", out_path(0, "st.svg"), "--threads", "1", NULL},
               200, 23);
}

/* The interpretability commands on the tiny Llama-3.1 fixture (2 layers):
 * every sweep and output of patch, attribute and lens in milliseconds a run. */
TEST(alloc_fail_patch_commands) {
    char tiny[600];
    snprintf(tiny, sizeof tiny, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    sweep("patch --per-position --html --npy --json", cmd_patch,
          (const char *const[]){"patch", "-m", tiny, "--clean-tokens", "509,72,85,97", "--corrupt-tokens", "509,72,86,97",
                                "--metric", "logit-diff", "--answer", "y", "--wrong", "ar", "--per-position", "--html",
                                out_path(0, "p.html"), "--npy", out_path(1, "p_"), "--json", "--threads", "1", NULL});
    sweep("attribute --html --npy --json", cmd_attribute,
          (const char *const[]){"attribute", "-m", tiny, "--tokens", "509,72,85,97", "--html", out_path(0, "a.html"), "--npy",
                                out_path(1, "a_"), "--json", "--threads", "1", NULL});
    sweep("lens --html --json (its own top-1 as target)", cmd_lens,
          (const char *const[]){"lens", "-m", tiny, "--tokens", "509,72,85,97", "-k", "2", "--html", out_path(0, "l.html"),
                                "--json", "--threads", "1", NULL});
    sweep("lens --target (a table)", cmd_lens,
          (const char *const[]){"lens", "-m", tiny, "--tokens", "509,72,85,97", "--target", "y", "--pos", "0,-1",
                                "--threads", "1", NULL});
}

TEST(alloc_fail_article_commands) {
    sweep("explain", cmd_explain, (const char *const[]){"explain", NULL});
    sweep("cost", cmd_cost, (const char *const[]){"cost", NULL});
    sweep("scaling", cmd_scaling, (const char *const[]){"scaling", "--trials", "100", NULL});
    sweep("bench, one shape", cmd_bench,
          (const char *const[]){"bench", "--n", "64", "--hq", "2", "--hkv", "1", "--d", "16", "--repeat", "1",
                                "--threads", "1", NULL});
}
