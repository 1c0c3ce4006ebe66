/*
 * test_valgrind.c — the CLI's smoke commands under valgrind's memcheck
 * (`valgrind --error-exitcode=1`): no invalid read or write, no use of an
 * uninitialised value, no definitely lost block, for one good run of each
 * of explain, cost, scaling, tokenize, attend (RoPE, positions) and run, and
 * for bad input (a missing model, a malformed file, a bad flag), which must
 * still exit 2. Valgrind is slow (about 30x): the inputs are the smallest
 * fixtures. Not built with SANITIZE=1 (valgrind cannot run an ASan binary);
 * valgrind is installed by scripts/install-deps.sh.
 */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALGRIND "/usr/bin/valgrind"

/* Runs `qkv argv...` under memcheck; the exit status, -1 on a signal. */
static int memcheck(const char *const *argv, char **err) {
    const char *qkv = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    const char *args[32] = {"--error-exitcode=1", "--leak-check=full", "--errors-for-leak-kinds=definite",
                            "--show-leak-kinds=definite", "--track-origins=yes", "--quiet", qkv};
    int n = 7;
    for (int i = 0; argv[i] && n < 31; i++) args[n++] = argv[i];
    args[n] = NULL;
    return test_run_program(VALGRIND, args, NULL, NULL, err);
}

TEST(valgrind_cli_smoke_commands) {
    if (!test_require_file(VALGRIND, "valgrind: make deps installs it")) return;
    char fx[8][600];
    const char *names[] = {"attend_rope/q.npy", "attend_rope/k.npy", "attend_rope/v.npy", "attend_rope/pos.npy",
                           "model/tiny31/tiny-llama31.gguf", "tokenizer/llama_bpe.gguf", "tokenizer/splits.txt"};
    for (int i = 0; i < 7; i++) snprintf(fx[i], sizeof fx[i], "%s/%s", test_fixture_dir(), names[i]);
    char out[600];
    snprintf(out, sizeof out, "%s/o.npy", test_tmpdir());
    static const struct { const char *argv[24]; int want; } runs[] = {
        {{"explain", NULL}, 0},
        {{"cost", "--json", "--ctx", "4K", NULL}, 0},
        {{"scaling", "--trials", "200", NULL}, 0},
        {{"tokenize", "-m", "#5", "-p", "Hello world\n<|eot_id|>", "--special", "--json", NULL}, 0},
        {{"attend", "--q", "#0", "--k", "#1", "--v", "#2", "--out", "#out", "--causal", "--rope", "half",
          "--rope-theta", "500000", "--positions", "#3", NULL}, 0},
        {{"run", "-m", "#4", "--tokens", "509,17,300", "-n", "3", "--threads", "2", NULL}, 0},
        {{"run", "-m", "/nonexistent/m.gguf", "-p", "hi", NULL}, 2},
        {{"tokenize", "-m", "#6", "-p", "x", NULL}, 2},
        {{"attend", "--q", "#0", "--bogus", NULL}, 2},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        const char *argv[24];
        int n = 0;
        for (; runs[r].argv[n]; n++) {
            const char *a = runs[r].argv[n];
            argv[n] = !strcmp(a, "#out") ? out : a[0] == '#' ? fx[a[1] - '0'] : a;
        }
        argv[n] = NULL;
        char *err = NULL;
        int rc = memcheck(argv, &err);
        const char *e = err ? err : "";
        size_t len = strlen(e);
        CHECK(rc == runs[r].want, "valgrind qkv %s %s: exit %d, want %d (1: memcheck errors); stderr ends: %s", argv[0],
              argv[1] ? argv[1] : "", rc, runs[r].want, len > 2500 ? e + len - 2500 : e);
        free(err);
    }
}
