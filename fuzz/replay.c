/*
 * replay.c — the fuzz targets without libFuzzer: a main() that feeds each
 * file named on the command line, or each file of each directory named (in
 * name order), to the target's LLVMFuzzerTestOneInput once, as libFuzzer
 * replays a corpus. Built by the ordinary compiler (no clang): `make check`
 * links every fuzz/fuzz_<target>.c with it as $(BUILD)/fuzz-replay-<target>
 * and tests/test_fuzz_replay.c replays the committed corpora and crash
 * reproducers through them (under SANITIZE=1, with ASan and UBSan).
 * Prints "replayed N inputs"; exit 2 when a path cannot be read.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Feeds one file; 0, or 2 after a line on stderr. */
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 2;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 2;
    }
    /* libFuzzer hands a buffer of exactly size bytes: the copy lets ASan see overreads */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        fprintf(stderr, "replay: out of memory for %s\n", path);
        return 2;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    long n_inputs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb)) {
            fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 2;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (replay_file(argv[i])) return 2;
            n_inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s\n", argv[i]);
            return 2;
        }
        int rc = 0;
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (!rc && !stat(path, &sb) && S_ISREG(sb.st_mode)) {
                rc = replay_file(path);
                n_inputs++;
            }
            free(names[k]);
        }
        free(names);
        if (rc) return rc;
    }
    printf("replayed %ld inputs\n", n_inputs);
    return 0;
}
