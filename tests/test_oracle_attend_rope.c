/*
 * test_oracle_attend_rope.c — `qkv attend` end to end with RoPE, against a
 * golden made by transformers (llama3 rope, theta 500000, rotate-half) and
 * PyTorch SDPA in float64: tests/fixtures/attend_rope/, written by
 * tools/oracle/make_attend_rope_fixture.py, which also writes command.txt,
 * the command line that should reproduce o.npy and lse.npy. The test runs
 * that exact line, with input paths pointed at the fixture directory and the
 * outputs (--out, --lse) at this test's temporary directory.
 *
 * Tolerances: as in test_oracle_attn.c (O within 1e-5 * max|O| + 1e-7, LSE
 * within 1e-5 + 1e-6 |LSE|). q and k are rotated in float32 on both sides
 * (same angles, cos/sin within an ulp), so the scores differ by ~1e-6 at most
 * and the output by less.
 */
#include "qkv.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64

static float *load_f32(const char *path, int64_t *count) {
    qkv_npy a;
    qkv_error err = {0};
    qkv_status st = qkv_npy_load(&a, path, &err);
    CHECK(st == QKV_OK, "%s: %s", path, err.msg);
    if (st != QKV_OK) return NULL;
    CHECK(a.type == QKV_NPY_F32, "%s: not float32", path);
    float *d = NULL;
    if (a.type == QKV_NPY_F32) {
        d = a.data;
        a.data = NULL;
        *count = a.count;
    }
    qkv_npy_free(&a);
    return d;
}

TEST(oracle_attend_rope_cli) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/attend_rope", test_fixture_dir());
    snprintf(path, sizeof path, "%s/command.txt", dir);
    char *cmd = test_read_file(path, NULL);
    CHECK(cmd != NULL, "cannot read %s", path);
    if (!cmd) return;

    /* split on whitespace; drop the leading program name "qkv" */
    char *tok[MAX_ARGS];
    int nt = 0;
    char *save = NULL;
    for (char *t = strtok_r(cmd, " \t\r\n", &save); t && nt < MAX_ARGS;
         t = strtok_r(NULL, " \t\r\n", &save))
        tok[nt++] = t;
    CHECK(nt > 2 && strcmp(tok[0], "qkv") == 0 && strcmp(tok[1], "attend") == 0,
          "command.txt does not start with 'qkv attend'");
    if (nt <= 2) {
        free(cmd);
        return;
    }

    static char paths[MAX_ARGS][700];
    const char *argv[MAX_ARGS + 1];
    int na = 0;
    char out_o[700] = "", out_lse[700] = "";
    for (int i = 1; i < nt; i++) {
        const char *a = tok[i];
        argv[na++] = a;
        int is_in = !strcmp(a, "--q") || !strcmp(a, "--k") || !strcmp(a, "--v") ||
                    !strcmp(a, "--positions");
        int is_out = !strcmp(a, "--out") || !strcmp(a, "--lse");
        if ((is_in || is_out) && i + 1 < nt) {
            i++;
            if (is_in) snprintf(paths[i], sizeof paths[i], "%s/%s", dir, tok[i]);
            else snprintf(paths[i], sizeof paths[i], "%s/%s", test_tmpdir(), tok[i]);
            if (!strcmp(a, "--out")) snprintf(out_o, sizeof out_o, "%s", paths[i]);
            if (!strcmp(a, "--lse")) snprintf(out_lse, sizeof out_lse, "%s", paths[i]);
            argv[na++] = paths[i];
        }
    }
    argv[na] = NULL;
    CHECK(out_o[0] && out_lse[0], "command.txt lacks --out or --lse");

    char *so = NULL, *se = NULL;
    int rc = test_run_cli(argv, NULL, &so, &se);
    CHECK(rc == 0, "qkv attend exited %d; stderr: %s", rc, se ? se : "");
    if (rc == 0 && out_o[0] && out_lse[0]) {
        snprintf(path, sizeof path, "%s/o.npy", dir);
        int64_t nw = 0, ng = 0, lw = 0, lg = 0;
        float *o_want = load_f32(path, &nw);
        float *o_got = load_f32(out_o, &ng);
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        float *l_want = load_f32(path, &lw);
        float *l_got = load_f32(out_lse, &lg);
        if (o_want && o_got && l_want && l_got) {
            CHECK(nw == ng && lw == lg, "sizes: O %lld vs %lld, LSE %lld vs %lld",
                  (long long)ng, (long long)nw, (long long)lg, (long long)lw);
            if (nw == ng && lw == lg) {
                double omax = 0;
                for (int64_t i = 0; i < nw; i++)
                    if (fabs(o_want[i]) > omax) omax = fabs(o_want[i]);
                double od = CHECK_CLOSE("attend_rope O", o_got, o_want, (size_t)nw,
                                        1e-5 * omax + 1e-7, 0);
                double ld = CHECK_CLOSE("attend_rope LSE", l_got, l_want, (size_t)lw, 1e-5, 1e-6);
                if (getenv("QKV_TEST_VERBOSE"))
                    fprintf(stderr, "  attend_rope max|dO| %.3g (max|O| %.3g) max|dLSE| %.3g\n",
                            od, omax, ld);
            }
        }
        free(o_want);
        free(o_got);
        free(l_want);
        free(l_got);
    }
    free(so);
    free(se);
    free(cmd);
}
