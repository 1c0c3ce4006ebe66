/*
 * test_runner.c — the runner's own contract: a skipped test is counted as
 * SKIP, not as a pass, and makes the run fail unless QKV_ALLOW_SKIP=1.
 * Runs this very binary (/proc/self/exe) on one model test with the model
 * pointed at a file that does not exist.
 */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exit status of the runner on model_gguf_smollm2 without a model; *last
 * receives its last stdout line. */
static int run_without_model(const char *allow, char *last, size_t cap) {
    char self[400], cmd[600];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "QKV_MODEL=/nonexistent/model.gguf QKV_ALLOW_SKIP=%s '%s' model_gguf_smollm2 2>/dev/null",
             allow, self);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    last[0] = 0;
    while (fgets(line, sizeof line, p)) snprintf(last, cap, "%s", line);
    int st = pclose(p);
    return st == -1 ? -1 : (st >> 8) & 0xff;
}

TEST(runner_counts_a_skip_apart_and_fails_on_it) {
    char last[512];
    int rc = run_without_model("0", last, sizeof last);
    CHECK(rc == 1, "a run with a skipped test exited %d, want 1", rc);
    CHECK(!strcmp(last, "0 passed, 0 failed, 1 skipped\n"), "last line: %s", last);
    rc = run_without_model("1", last, sizeof last);
    CHECK(rc == 0, "QKV_ALLOW_SKIP=1: exited %d, want 0", rc);
    CHECK(!strcmp(last, "0 passed, 0 failed, 1 skipped\n"), "last line: %s", last);
}
