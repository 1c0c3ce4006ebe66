/*
 * test_outputs_cli.c — every file a command writes is written whole or not
 * at all (cli/outputs.c), tried as an attacker would: an output that cannot
 * be created, a full disk (a file-size limit, RLIMIT_FSIZE, with SIGXFSZ
 * ignored: writes fail with EFBIG as on a full disk), the same file named
 * twice, targets that are FIFOs, symlinks, directories or devices, a user's
 * own NAME.tmp beside the target, and SIGTERM mid-run. After each failure
 * the previous files are byte for byte what they were, no temporary
 * (NAME.qkv-XXXXXX) is left and nothing went to stdout.
 */
#include "testing.h"

#include "qkv.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_p[12][600];

static const char *tmp_path(int slot, const char *name) {
    snprintf(g_p[slot], sizeof g_p[slot], "%s/%s", test_tmpdir(), name);
    return g_p[slot];
}

/* q [2, 256, 64], k and v [2, 256, 64] in slots 0-2: O is 128 KiB, LSE 2 KiB. */
static void write_inputs(void) {
    test_rng r = {7};
    const int64_t shape[3] = {2, 256, 64};
    float *x = malloc(2 * 256 * 64 * sizeof(float));
    static const char *names[3] = {"q.npy", "k.npy", "v.npy"};
    for (int i = 0; i < 3; i++) {
        test_fill_normal(x, 2 * 256 * 64, &r, 1);
        qkv_npy_save_f32(tmp_path(i, names[i]), x, 3, shape, NULL);
    }
    free(x);
}

/* test_run_cli under a file-size limit of `bytes`: a write past it fails
 * with EFBIG, as a full disk fails with ENOSPC. */
static int run_disk_full(const char *const *argv, rlim_t bytes, char **out, char **err) {
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = bytes;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* ignored signals stay ignored across exec */
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = test_run_cli(argv, NULL, out, err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    return rc;
}

/* exit 2, one "qkv: " line naming needle, empty stdout. */
static void check_failed(const char *file, int line, int rc, const char *out, const char *err, const char *needle) {
    int lines = 0;
    for (const char *p = err ? err : ""; *p; p++) lines += *p == '\n';
    if (rc != 2 || lines != 1 || strncmp(err ? err : "", "qkv: ", 5) || !strstr(err, needle))
        test_fail(file, line, "exit %d, want 2 and one line with '%s': %s", rc, needle, err ? err : "");
    if (out && *out) test_fail(file, line, "stdout not empty: %.80s", out);
}
#define CHECK_FAILED(rc, out, err, needle) check_failed(__FILE__, __LINE__, rc, out, err, needle)

TEST(outputs_attend_failure_keeps_previous_files) {
    write_inputs();
    const char *o = tmp_path(3, "old.npy"), *l = tmp_path(4, "old-lse.npy");
    test_write_file(o, "previous O");
    test_write_file(l, "previous LSE");
    /* an output that cannot be created: refused before any work, old.npy kept */
    CHECK_BAD_CLI(((const char *const[]){"attend", "--q", g_p[0], "--k", g_p[1], "--v", g_p[2], "--out", o, "--lse",
                                         "/nonexistent/x", NULL}),
                  "/nonexistent/x");
    CHECK_UNTOUCHED(o, "previous O");
    /* a full disk while writing O (128 KiB over a 16 KiB limit): LSE and O both kept */
    const char *argv[] = {"attend", "--q", g_p[0], "--k", g_p[1], "--v", g_p[2], "--out", o, "--lse", l, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_disk_full(argv, 16 << 10, &out, &err);
    CHECK_FAILED(rc, out, err, "old.npy");
    free(out);
    free(err);
    CHECK_UNTOUCHED(o, "previous O");
    CHECK_UNTOUCHED(l, "previous LSE");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
    /* and the same run with room: both replaced by arrays */
    rc = test_run_cli(argv, NULL, NULL, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    free(err);
    qkv_npy a = {0}, b = {0};
    CHECK(qkv_npy_load(&a, o, NULL) == QKV_OK && a.count == 2 * 256 * 64, "O not written");
    CHECK(qkv_npy_load(&b, l, NULL) == QKV_OK && b.count == 2 * 256, "LSE not written");
    qkv_npy_free(&a);
    qkv_npy_free(&b);
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
}

TEST(outputs_same_file_twice_refused) {
    write_inputs();
    const char *o = tmp_path(3, "same.npy");
    test_write_file(o, "previous");
    char other[700]; /* the same file spelled another way */
    snprintf(other, sizeof other, "%s/./same.npy", test_tmpdir());
    CHECK_BAD_CLI(((const char *const[]){"attend", "--q", g_p[0], "--k", g_p[1], "--v", g_p[2], "--out", o, "--lse",
                                         other, NULL}),
                  "named twice");
    CHECK_UNTOUCHED(o, "previous");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
}

TEST(outputs_refuse_targets_that_are_not_regular_files) {
    write_inputs();
    const char *fifo = tmp_path(3, "fifo"), *link = tmp_path(4, "link.npy"), *pointee = tmp_path(5, "pointee.npy"),
               *dir = tmp_path(6, "dir");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    test_write_file(pointee, "the link's file");
    CHECK(symlink(pointee, link) == 0, "symlink");
    mkdir(dir, 0755);
    struct {
        const char *target, *needle;
    } cases[] = {{fifo, "is a FIFO"}, {link, "is a symbolic link"}, {dir, "is a directory"},
                 {"/dev/null", "is a device"}, {"/dev/full", "is a device"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_BAD_CLI(((const char *const[]){"attend", "--q", g_p[0], "--k", g_p[1], "--v", g_p[2], "--out",
                                             cases[i].target, NULL}),
                      cases[i].needle);
    struct stat sb;
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the symlink was replaced");
    CHECK_UNTOUCHED(pointee, "the link's file");
    CHECK(lstat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode), "/dev/null");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
}

TEST(outputs_inspect_all_or_nothing) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *a = tmp_path(3, "a.npy"), *b = tmp_path(4, "b.html"), *c = tmp_path(5, "c.png");
    test_write_file(a, "previous a");
    test_write_file(b, "previous b");
    /* a bad third output: a and b are untouched */
    CHECK_BAD_CLI(((const char *const[]){"inspect", "-m", m, "-p", "Hello world", "--layers", "0", "--heads", "0",
                                         "--npy", a, "--html", b, "--png", "/bad/c.png", NULL}),
                  "/bad/c.png");
    CHECK_UNTOUCHED(a, "previous a");
    CHECK_UNTOUCHED(b, "previous b");
    /* --npy and --html naming one file */
    CHECK_BAD_CLI(((const char *const[]){"inspect", "-m", m, "-p", "Hello world", "--npy", a, "--html", a, NULL}),
                  "named twice");
    CHECK_UNTOUCHED(a, "previous a");
    /* a full disk while the page is written (the .npy fits in 8 KiB, the page does not):
     * nothing replaced, and the JSON, held back, never reaches stdout */
    const char *argv[] = {"inspect", "-m", m, "-p", "Hello world", "--layers", "0", "--heads", "0", "--npy", a,
                          "--html", b, "--png", c, "--json", NULL};
    char *out = NULL, *err = NULL;
    int rc = run_disk_full(argv, 8 << 10, &out, &err);
    CHECK_FAILED(rc, out, err, "b.html");
    free(out);
    free(err);
    CHECK_UNTOUCHED(a, "previous a");
    CHECK_UNTOUCHED(b, "previous b");
    CHECK(!test_file_exists(c), "the PNG appeared");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
    /* with room: all three replaced, the JSON on stdout */
    rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "\"maps\""), "exit %d: %s", rc, err);
    free(out);
    free(err);
    char *page = test_read_file(b, NULL);
    CHECK(page && strstr(page, "</html>"), "the page");
    free(page);
    qkv_npy x = {0};
    CHECK(qkv_npy_load(&x, a, NULL) == QKV_OK && x.ndim == 4, "the .npy");
    qkv_npy_free(&x);
    CHECK(test_file_exists(c), "no PNG");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
}

TEST(outputs_run_logits_kept_only_on_success) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *l = tmp_path(3, "logits.npy");
    /* 3 prompt positions x 49152 logits (576 KiB) over a 64 KiB limit */
    const char *argv[] = {"run", "-m", m, "--tokens", "1,9690,198", "-n", "0", "--logits", l, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_disk_full(argv, 64 << 10, &out, &err);
    CHECK(rc == 2 && err && strstr(err, "logits.npy") && !strstr(err, ".qkv-"), "exit %d: %s", rc, err);
    free(out);
    free(err);
    CHECK(!test_file_exists(l), "a failed run left its --logits file");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
    /* a prompt longer than the context: refused, and nothing written */
    CHECK_BAD_CLI(((const char *const[]){"run", "-m", m, "--tokens", "1,9690,198", "--ctx", "2", "--logits", l, NULL}),
                  "context");
    CHECK(!test_file_exists(l) && test_count_temporaries() == 0, "a refused run left a file");
}

TEST(outputs_sinks_svg_leaves_users_tmp_alone) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    const char *svg = tmp_path(3, "x.svg"), *mine = tmp_path(4, "x.svg.tmp");
    test_write_file(mine, "the user's own file");
    const char *argv[] = {"sinks", "-m", m, "-p", "one two three four five six seven eight nine ten eleven twelve",
                          "--skip", "2", "--svg", svg, "--json", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "\"layers\""), "exit %d: %s", rc, err);
    free(out);
    free(err);
    char *plot = test_read_file(svg, NULL);
    CHECK(plot && strstr(plot, "</svg>"), "x.svg");
    free(plot);
    CHECK_UNTOUCHED(mine, "the user's own file");
    /* a full disk while writing the plot: exit 2, no JSON printed first */
    test_write_file(svg, "previous plot");
    rc = run_disk_full(argv, 2 << 10, &out, &err);
    CHECK_FAILED(rc, out, err, "x.svg");
    free(out);
    free(err);
    CHECK_UNTOUCHED(svg, "previous plot");
    CHECK(test_count_temporaries() == 0, "%d temporaries left", test_count_temporaries());
}

TEST(outputs_sigterm_removes_temporaries) {
    const char *svg = tmp_path(3, "bench.svg");
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(bin, bin, "bench", "--sweep", "prefill", "--threads", "1", "--svg", svg, (char *)NULL);
        _exit(127);
    }
    /* the temporary exists from the start of the run; kill the run once it does */
    int seen = 0;
    for (int i = 0; i < 2000 && !seen; i++) {
        seen = test_count_temporaries() > 0;
        if (!seen) nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    CHECK(seen, "no temporary appeared within 10 s");
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "did not die of SIGTERM (status %d)", st);
    CHECK(test_count_temporaries() == 0, "%d temporaries left after SIGTERM", test_count_temporaries());
    CHECK(!test_file_exists(svg), "a killed run left its output");
}
