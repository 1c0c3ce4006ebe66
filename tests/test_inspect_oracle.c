/*
 * test_inspect_oracle.c — attention maps of the real model (SmolLM2-135M-
 * Instruct Q4_1, models/; $QKV_MODEL overrides) against transformers'
 * output_attentions=True (eager attention, the same GGUF), every layer and
 * head, on the three prompts of tests/fixtures/attention (made by
 * tools/oracle/make_attention_fixtures.py). Without the model each test
 * is SKIPPED (and `make test` fails).
 *
 * Tolerance 1e-4 absolute (the bound). Our forward matches the
 * logits to ~5e-5; the weights, softmax outputs in [0, 1] that inherit the
 * float32 differences of 30 layers of activations, typically agree to ~1e-6.
 *
 * Three routes are checked: the library (qkv_inspect_hook on a model opened
 * here, token ids from the fixture), the CLI (`qkv inspect -p TEXT [--chat]
 * --npy`, which also runs our tokenizer and chat template on the text), and
 * `qkv sinks --json`, whose per-head weight on token 0 comes from the
 * kernel's LSE by another path and must equal the mean of the fixture's
 * column 0.
 */
#include "qkv.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATOL 1e-4

typedef struct {
    const char *name, *text;
    int chat;
} prompt;

static const prompt prompts[] = {
    {"zh", "年假怎么申请？", 0},
    {"zh_chat", "年假怎么申请？", 1},
    {"en", "The quick brown fox jumps over the lazy dog.", 0},
};

typedef struct {
    qkv_npy ids, attn; /* ids [n] int32, attn [L, H, n(n+1)/2] */
    int n, L, H;
} fixture;

static int load_fixture(fixture *f, const char *name) {
    char p[600];
    qkv_error err = {0};
    memset(f, 0, sizeof *f);
    snprintf(p, sizeof p, "%s/attention/%s.ids.npy", test_fixture_dir(), name);
    if (qkv_npy_load(&f->ids, p, &err)) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    snprintf(p, sizeof p, "%s/attention/%s.attn.npy", test_fixture_dir(), name);
    if (qkv_npy_load(&f->attn, p, &err)) {
        CHECK(0, "%s", err.msg);
        qkv_npy_free(&f->ids);
        return 0;
    }
    f->n = (int)f->ids.count;
    f->L = (int)f->attn.shape[0];
    f->H = (int)f->attn.shape[1];
    CHECK(f->ids.type == QKV_NPY_I32 && f->attn.ndim == 3 && f->attn.shape[2] == (int64_t)f->n * (f->n + 1) / 2,
          "%s: fixture shapes", name);
    return 1;
}

static void free_fixture(fixture *f) {
    qkv_npy_free(&f->ids);
    qkv_npy_free(&f->attn);
}

typedef struct {
    float *packed; /* [L, H, n(n+1)/2] */
    int n, H;
} packer;

static int pack_row(void *user, int li, int hi, int row, const float *w, int n_keys, const qkv_row_stats *s) {
    packer *p = user;
    (void)s;
    for (int j = row + 1; j < n_keys; j++)
        if (w[j] != 0) return 1; /* the causal mask: nothing right of the diagonal */
    memcpy(p->packed + ((size_t)li * p->H + hi) * ((size_t)p->n * (p->n + 1) / 2) + (size_t)row * (row + 1) / 2, w,
           (size_t)(row + 1) * sizeof(float));
    return 0;
}

TEST(inspect_oracle_library) {
    if (!test_require_model()) return;
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        fixture f;
        if (!load_fixture(&f, prompts[i].name)) continue;
        qkv_error err = {0};
        qkv_model *m = NULL;
        qkv_model_params mp = {.n_ctx = f.n, .kv_dtype = QKV_DTYPE_F32};
        if (qkv_model_open(&m, test_model_path(), &mp, &err)) {
            CHECK(0, "%s", err.msg);
            free_fixture(&f);
            return;
        }
        const qkv_model_config *cfg = qkv_model_get_config(m);
        CHECK(cfg->n_layer == f.L && cfg->n_head == f.H, "model has %d x %d maps, fixture %d x %d", cfg->n_layer,
              cfg->n_head, f.L, f.H);
        packer pk = {calloc((size_t)f.attn.count, sizeof(float)), f.n, f.H};
        qkv_inspect_params ip = {.n_first = 1, .row = pack_row, .user = &pk};
        qkv_inspect *in = NULL;
        CHECK(qkv_inspect_init(&in, cfg, &ip, &err) == QKV_OK, "%s", err.msg);
        const qkv_hook maps = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_inspect_hook, .user = in};
        CHECK(qkv_model_forward(m, NULL, f.ids.data, f.n, 0, &(qkv_forward_opts){.hooks = &maps, .n_hooks = 1}, &err) ==
                  QKV_OK, "%s: forward: %s", prompts[i].name, err.msg);
        char what[64];
        snprintf(what, sizeof what, "%s: all %d x %d maps", prompts[i].name, f.L, f.H);
        double maxd = CHECK_CLOSE(what, pk.packed, f.attn.data, (size_t)f.attn.count, ATOL, 0);
        printf("     %-8s %2d tokens, %d maps: max |w - transformers| = %.2e\n", prompts[i].name, f.n, f.L * f.H, maxd);
        qkv_inspect_free(in);
        qkv_model_close(m);
        free(pk.packed);
        free_fixture(&f);
    }
}

TEST(inspect_oracle_cli) {
    if (!test_require_model()) return;
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        fixture f;
        if (!load_fixture(&f, prompts[i].name)) continue;
        char out[600];
        snprintf(out, sizeof out, "%s/%s.npy", test_tmpdir(), prompts[i].name);
        const char *argv[] = {"inspect", "-m", test_model_path(), "-p", prompts[i].text, "--npy", out,
                              prompts[i].chat ? "--chat" : NULL, NULL};
        char *so = NULL, *se = NULL;
        int rc = test_run_cli(argv, NULL, &so, &se);
        CHECK(rc == 0, "%s: exit %d: %s", prompts[i].name, rc, se);
        qkv_npy a = {0};
        qkv_error err = {0};
        if (rc == 0 && qkv_npy_load(&a, out, &err) == QKV_OK) {
            const int n = f.n;
            CHECK(a.ndim == 4 && a.shape[0] == f.L && a.shape[1] == f.H && a.shape[2] == n && a.shape[3] == n,
                  "%s: npy shape [%lld, %lld, %lld, %lld] (tokenizer or chat template differs from transformers?)",
                  prompts[i].name, (long long)a.shape[0], (long long)a.shape[1], (long long)a.shape[2],
                  (long long)a.shape[3]);
            if (a.ndim == 4 && a.shape[2] == n) {
                float *packed = malloc((size_t)f.attn.count * sizeof(float));
                const float *full = a.data;
                int upper = 0;
                for (int m = 0; m < f.L * f.H; m++)
                    for (int r = 0; r < n; r++)
                        for (int j = 0; j < n; j++) {
                            const float w = full[((size_t)m * n + r) * n + j];
                            if (j <= r) packed[(size_t)m * (n * (n + 1) / 2) + (size_t)r * (r + 1) / 2 + j] = w;
                            else upper += w != 0;
                        }
                CHECK(upper == 0, "%s: %d weights right of the diagonal", prompts[i].name, upper);
                char what[64];
                snprintf(what, sizeof what, "%s: qkv inspect --npy", prompts[i].name);
                CHECK_CLOSE(what, packed, f.attn.data, (size_t)f.attn.count, ATOL, 0);
                free(packed);
            }
        } else if (rc == 0) {
            CHECK(0, "%s", err.msg);
        }
        qkv_npy_free(&a);
        free(so);
        free(se);
        free_fixture(&f);
    }
}

TEST(sinks_oracle_cli) {
    if (!test_require_model()) return;
    fixture f;
    if (!load_fixture(&f, "zh_chat")) return;
    /* --skip 1: rows 1..n-1, the same rows the mean below takes */
    const char *argv[] = {"sinks", "-m", test_model_path(), "-p", prompts[1].text, "--chat", "--skip", "1", "--first", "2",
                          "--every", "1", "--json", NULL};
    char *so = NULL, *se = NULL;
    int rc = test_run_cli(argv, NULL, &so, &se);
    CHECK(rc == 0, "exit %d: %s", rc, se);
    const int n = f.n, T = n * (n + 1) / 2;
    const float *att = f.attn.data;
    int found = 0;
    double maxd = 0, maxd_other = 0;
    const char *p = so;
    for (int l = 0; rc == 0 && l < f.L; l++)
        for (int h = 0; h < f.H; h++) {
            double sink = 0, first = 0, other = 0;
            for (int r = 1; r < n; r++) {
                const float *row = att + ((size_t)l * f.H + h) * T + (size_t)r * (r + 1) / 2;
                sink += row[0];
                first += row[0] + row[1];
                float best = 0;
                for (int j = 1; j <= r; j++) best = row[j] > best ? row[j] : best;
                other += best;
            }
            sink /= n - 1;
            first /= n - 1;
            other /= n - 1;
            double got[3];
            p = p ? strstr(p, "{\"head\": ") : NULL;
            if (!p || sscanf(p, "{\"head\": %*d, \"sink\": %lf, \"first\": %lf, \"top_other\": %lf", &got[0], &got[1],
                             &got[2]) != 3)
                continue;
            p++;
            found++;
            maxd = fmax(maxd, fmax(fabs(got[0] - sink), fabs(got[1] - first)));
            maxd_other = fmax(maxd_other, fabs(got[2] - other));
        }
    CHECK(found == f.L * f.H, "%d of %d heads in the JSON", found, f.L * f.H);
    CHECK(maxd <= ATOL, "token-0 / first-2 weight: max diff %.2e against transformers", maxd);
    CHECK(maxd_other <= ATOL, "strongest other key: max diff %.2e against transformers", maxd_other);
    printf("     sinks --json vs transformers, %d heads: max diff %.2e (token 0, 0..1), %.2e (strongest other)\n",
           found, maxd, maxd_other);
    free(so);
    free(se);
    free_fixture(&f);
}
