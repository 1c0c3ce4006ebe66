/*
 * test_limits_cli.c — the CLI's resource limits, each refused with one line
 * naming the limit and exit status 2: --threads beyond CLI_THREADS_PER_CPU
 * per online CPU, prompt files over 64 MiB (a large regular file refused
 * before it is read, /dev/zero stopped at the limit), a directory as a
 * prompt file, a --ctx whose run state cannot fit in memory (before
 * allocating, naming the bytes), an unknown flag on every command, and a
 * flag whose value was forgotten.
 */
#include "testing.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const commands[] = {"attend", "bench", "run", "explain", "scaling", "cost", "tokenize",
                                       "inspect", "sinks", "ablate", "patch", "attribute", "lens", "stream", "demo", "serve", NULL};

TEST(limits_threads_bounded_by_the_machine) {
    char too_many[32];
    snprintf(too_many, sizeof too_many, "%ld", 4 * sysconf(_SC_NPROCESSORS_ONLN) + 1);
    CHECK_BAD_CLI(((const char *const[]){"attend", "--threads", too_many, NULL}), "CPU");
    CHECK_BAD_CLI(((const char *const[]){"run", "--threads", "4096", "-p", "x", NULL}), "threads (4 per CPU)");
    CHECK_BAD_CLI(((const char *const[]){"bench", "--threads", "0", NULL}), "--threads");
}

TEST(limits_prompt_files) {
    /* a sparse regular file one byte over 64 MiB: refused without reading it */
    char big[600];
    snprintf(big, sizeof big, "%s/big.txt", test_tmpdir());
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, ((off_t)64 << 20) + 1) == 0, "cannot make %s", big);
    if (fd >= 0) close(fd);
    CHECK_BAD_CLI(((const char *const[]){"tokenize", "-f", big, NULL}), "larger than the limit of 67108864 bytes");
    /* a stream without end: stopped at the limit, quickly */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_BAD_CLI(((const char *const[]){"tokenize", "-f", "/dev/zero", NULL}), "/dev/zero: larger than the limit");
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    CHECK(s < 20, "-f /dev/zero took %.1f s", s);
    CHECK_BAD_CLI(((const char *const[]){"tokenize", "-f", test_tmpdir(), NULL}), "is a directory");
}

TEST(limits_ctx_that_cannot_fit) {
    if (!test_require_model()) return;
    /* 2^22 positions of SmolLM2: ~300 GB of run state and KV cache */
    CHECK_BAD_CLI(((const char *const[]){"run", "-m", test_model_path(), "--ctx", "4194304", "-p", "hi", NULL}),
                  "positions needs");
    char *err = NULL;
    test_run_cli((const char *const[]){"run", "-m", test_model_path(), "--ctx", "4194304", "-p", "hi", NULL}, NULL,
                 NULL, &err);
    CHECK(err && strstr(err, " bytes (") && strstr(err, "GiB of memory"), "the message names the bytes: %s", err);
    free(err);
}

TEST(limits_unknown_flags_and_missing_values) {
    for (int i = 0; commands[i]; i++)
        CHECK_BAD_CLI(((const char *const[]){commands[i], "--bogus", NULL}), "unknown flag '--bogus'");
    CHECK_BAD_CLI(((const char *const[]){"attend", "--out", "--lse", "x.npy", NULL}), "--out needs a value (--lse is a flag)");
    CHECK_BAD_CLI(((const char *const[]){"run", "-p", NULL}), "-p needs a value");
}

TEST(limits_under_ulimit_v) {
    if (!test_require_model()) return;
    /* 400 MB of address space: the model maps (~100 MB), its default
     * context (8192 positions, 0.36 GB of KV cache) is refused before allocating */
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    char errp[600], cmd[2000];
    snprintf(errp, sizeof errp, "%s/stderr", test_tmpdir());
    snprintf(cmd, sizeof cmd, "ulimit -v 400000 && exec '%s' run -m '%s' -p hi -n 1 --threads 1 >/dev/null 2>'%s'", bin,
             test_model_path(), errp);
    const int st = system(cmd);
    char *err = test_read_file(errp, NULL);
    int lines = 0;
    for (const char *p = err ? err : ""; *p; p++) lines += *p == '\n';
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2 && lines == 1 && strstr(err, "positions needs"),
          "status %d: %s", st, err ? err : "");
    free(err);
}
