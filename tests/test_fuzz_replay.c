/*
 * test_fuzz_replay.c — every fuzz target (fuzz/fuzz_<target>.c) replays its
 * committed seed corpus (fuzz/corpus/<target>/) and every crash reproducer
 * ever found (fuzz/regress/<target>/, when there is one) through the plain
 * driver $(BUILD)/fuzz-replay-<target> (fuzz/replay.c, no clang needed): each
 * input must run to the end (exit 0, every input counted). Under SANITIZE=1
 * the driver carries ASan and UBSan, so the replay is sanitised too.
 */
#include "testing.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_targets[] = {"chat", "flags", "gguf", "npy", "tokenizer"};

/* Regular files in dir; -1 if it cannot be listed. */
static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

TEST(fuzz_replay_corpora_and_reproducers) {
    if (!test_require_file("models/llama3-vocab.gguf", "the tokenizer target's second vocabulary: run `make model`") ||
        !test_require_model())
        return;
    const char *qkv = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    const char *slash = strrchr(qkv, '/');
    const int dir_len = slash ? (int)(slash - qkv) : 1;
    for (size_t i = 0; i < sizeof k_targets / sizeof k_targets[0]; i++) {
        char bin[600], corpus[300], regress[300], want[64];
        snprintf(bin, sizeof bin, "%.*s/fuzz-replay-%s", dir_len, slash ? qkv : ".", k_targets[i]);
        snprintf(corpus, sizeof corpus, "fuzz/corpus/%s", k_targets[i]);
        snprintf(regress, sizeof regress, "fuzz/regress/%s", k_targets[i]);
        int n_corpus = count_files(corpus), n_regress = count_files(regress);
        CHECK(n_corpus >= 8, "%s: %d seed inputs, want at least 8 (run fuzz/make_corpus.py)", corpus, n_corpus);
        const char *argv[] = {corpus, n_regress >= 0 ? regress : NULL, NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_program(bin, argv, NULL, &out, &err);
        snprintf(want, sizeof want, "replayed %d inputs", n_corpus + (n_regress > 0 ? n_regress : 0));
        const char *e = err ? err : "";
        size_t elen = strlen(e);
        CHECK(rc == 0 && out && strstr(out, want), "%s: exit %d, '%s' (want '%s'); stderr ends: %s", bin, rc,
              out ? out : "", want, elen > 1500 ? e + elen - 1500 : e);
        free(out);
        free(err);
    }
}
