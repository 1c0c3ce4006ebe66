/*
 * test_progress_cli.c — the progress line of the long commands (stream,
 * ablate, ablate --heads, sinks, inspect, run, patch, needle, bench sweeps):
 *   - forced on (--progress) with small inputs, stderr holds the command's
 *     line ("<label>: done/total unit (p%), elapsed, ~rest left") drawn with
 *     \r and erased at the end (its last \r segment blank), and stdout holds
 *     no \r and no such line;
 *   - piped (the default off a terminal) and with --no-progress (which wins
 *     over --progress), stderr holds none;
 *   - stdout (and --json) is byte for byte the same with and without the
 *     line, the run's timings blanked (stream's tokens_per_s, needle's seconds);
 *   - on a pseudo-terminal (script -qec, util-linux) the line is there by
 *     default, and --no-progress takes it away.
 * The tiny Llama-3.1 fixture keeps each run in milliseconds; needle needs a
 * chat template and runs SmolLM2 on one 160-token cell.
 */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_tiny[600];

static const char *tiny_path(void) {
    snprintf(g_tiny, sizeof g_tiny, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    return g_tiny;
}

/* "11,48,85,...": 48 ids of the tiny model's vocabulary */
static const char *tiny_ids(void) {
    static char ids[512];
    int off = 0;
    for (int i = 0; i < 48; i++) off += snprintf(ids + off, sizeof ids - off, "%s%d", i ? "," : "", (i * 37 + 11) % 500);
    return ids;
}

/* Timings differ from run to run: the number after each "key": is cut out. */
static void blank_timings(char *s) {
    static const char *const keys[] = {"\"tokens_per_s\":", "\"seconds\":", NULL};
    for (int k = 0; keys[k]; k++)
        for (char *p = strstr(s, keys[k]); p; p = strstr(p + 1, keys[k])) {
            char *from = p + strlen(keys[k]), *to = from;
            while (*to == ' ' || *to == '.' || *to == 'e' || *to == '-' || (*to >= '0' && *to <= '9')) to++;
            memmove(from, to, strlen(to) + 1);
        }
}

/* 1 if err holds a progress line: label, "elapsed", drawn after \r. */
static int has_progress(const char *err, const char *label) {
    const char *p = strstr(err, label);
    return p && p > err && strchr(err, '\r') && strstr(p, " elapsed");
}

/* 1 if the last \r-separated segment before the end (or before the first
 * line written after the progress) is blank: the line was erased. */
static int erased(const char *err) {
    const char *last = strrchr(err, '\r');
    if (!last || last == err) return 0;
    const char *prev = last - 1;
    while (prev > err && *prev != '\r') prev--;
    if (*prev != '\r' || last - prev < 2) return 0;
    for (const char *q = prev + 1; q < last; q++)
        if (*q != ' ') return 0;
    return !strstr(last, " elapsed");
}

typedef struct {
    const char *label;      /* what the line starts with */
    const char *argv[24];
} command;

/* Runs c with extra (NULL-ended) flags appended; returns the exit status. */
static int run(const command *c, const char *const *extra, char **out, char **err) {
    const char *argv[40];
    int n = 0;
    for (int i = 0; c->argv[i]; i++) argv[n++] = c->argv[i];
    for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    return test_run_cli(argv, NULL, out, err);
}

static void check_command(const command *c) {
    char *out_on = NULL, *err_on = NULL, *out_off = NULL, *err_off = NULL, *out_no = NULL, *err_no = NULL;
    const char *const on[] = {"--progress", NULL}, *const off[] = {NULL},
                      *const both[] = {"--progress", "--no-progress", NULL};
    int rc = run(c, on, &out_on, &err_on);
    CHECK(rc == 0, "%s --progress: exit %d: %s", c->label, rc, err_on);
    rc = run(c, off, &out_off, &err_off);
    CHECK(rc == 0, "%s piped: exit %d: %s", c->label, rc, err_off);
    rc = run(c, both, &out_no, &err_no);
    CHECK(rc == 0, "%s --no-progress: exit %d: %s", c->label, rc, err_no);
    if (rc || !err_on || !err_off || !err_no) goto done;
    CHECK(has_progress(err_on, c->label), "%s --progress: no progress line on stderr: %s", c->label, err_on);
    CHECK(erased(err_on), "%s --progress: the line is not erased at the end: %s", c->label, err_on);
    CHECK(!strchr(out_on, '\r') && !strstr(out_on, " elapsed"), "%s --progress: progress on stdout: %s", c->label,
          out_on);
    CHECK(!strchr(err_off, '\r') && !strstr(err_off, " elapsed"), "%s piped: progress on stderr: %s", c->label,
          err_off);
    CHECK(!strchr(err_no, '\r') && !strstr(err_no, " elapsed"), "%s --no-progress: progress on stderr: %s", c->label,
          err_no);
    blank_timings(out_on);
    blank_timings(out_off);
    blank_timings(out_no);
    CHECK(!strcmp(out_on, out_off) && !strcmp(out_no, out_off), "%s: stdout differs with progress:\n%s\nwithout:\n%s",
          c->label, out_on, out_off);
done:
    free(out_on);
    free(err_on);
    free(out_off);
    free(err_off);
    free(out_no);
    free(err_no);
}

TEST(progress_cli_on_tiny_llama31) {
    const char *m = tiny_path(), *ids = tiny_ids();
    const command cmds[] = {
        {"stream ", {"stream", "-m", m, "--tokens", ids, "--window", "16", "--sinks", "4", "--chunk", "8", "--json", NULL}},
        {"ablate: ", {"ablate", "-m", m, "--tokens", ids, "--json", NULL}},
        {"ablate --heads: ", {"ablate", "--heads", "-m", m, "--tokens", ids, "--json", NULL}},
        {"sinks: ", {"sinks", "-m", m, "--tokens", ids, "--skip", "4", "--json", NULL}},
        {"inspect: ", {"inspect", "-m", m, "--tokens", ids, "--json", NULL}},
        {"run: prefill: ", {"run", "-m", m, "--tokens", ids, "-n", "4", "--print-ids", NULL}},
        {"patch: ", {"patch", "-m", m, "--clean-tokens", "11,48,85,122,159,196", "--corrupt-tokens", "12,48,85,122,159,196",
                     "--json", NULL}},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) check_command(&cmds[i]);
}

TEST(progress_cli_needle_and_bench) {
    /* bench's rows are timings: only where the line goes is compared */
    const char *bench[] = {"bench", "--sweep", "ref", "--quick", "--models", "smol", "--kv-dtypes", "f32",
                           "--repeat", "1", "--json", "--progress", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(bench, NULL, &out, &err);
    CHECK(rc == 0 && has_progress(err, "bench ref smol f32") && strstr(err, "2/2 shapes") && erased(err),
          "bench --sweep --progress: exit %d, stderr: %s", rc, err);
    CHECK(out && !strchr(out, '\r') && strstr(out, "\"results\""), "bench: stdout %s", out);
    free(out);
    free(err);
    if (!test_require_model()) return;
    const command needle = {"needle ", {"needle", "--lengths", "160", "--depths", "50", "--max-answer", "4",
                                        "--json", NULL}};
    check_command(&needle);
}

/* The default on a terminal: script(1) runs the command on a pseudo-terminal
 * and copies what it shows (stdout and stderr) to its own stdout. */
TEST(progress_cli_default_on_a_terminal) {
    if (access("/usr/bin/script", X_OK) != 0) {
        test_skip("no /usr/bin/script (util-linux / bsdutils)");
        return;
    }
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    for (int no = 0; no < 2; no++) {
        char cmdline[1400];
        snprintf(cmdline, sizeof cmdline, "%s stream -m %s --tokens %s --window 16 --sinks 4 --chunk 8 --json%s", bin,
                 tiny_path(), tiny_ids(), no ? " --no-progress" : "");
        const char *argv[] = {"-qec", cmdline, "/dev/null", NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_program("/usr/bin/script", argv, NULL, &out, &err);
        CHECK(rc == 0, "script -qec '%s': exit %d: %s", cmdline, rc, err);
        CHECK(out && strstr(out, "\"variants\""), "the JSON reaches the terminal: %s", out);
        if (no) CHECK(out && !strstr(out, " elapsed"), "--no-progress on a terminal: %s", out);
        else CHECK(out && strstr(out, "stream recompute (6/6): ") && strstr(out, " elapsed"),
                   "no progress line on a terminal: %s", out);
        free(out);
        free(err);
    }
}
