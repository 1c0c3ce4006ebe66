/*
 * test_model_hooks_oracle.c — the forward call's named activation points
 * (qkv_forward_opts.hooks) against transformers with PyTorch forward hooks on
 * the same GGUF, from the committed fixtures of
 * tools/oracle/make_hook_fixtures.py (tests/fixtures/hooks/, SKIPPED without
 * models/SmolLM2-135M-Instruct.Q4_1.gguf: `make model`). One 22-token prompt,
 * one forward call with a hook at every point of every layer; the hooks copy
 * the arrays manifest.txt lists: hook_resid_pre, attn.hook_z, hook_attn_out,
 * hook_mlp_out, hook_resid_post of layers 0 1 14 28 29; attn.hook_q/k/v,
 * attn.hook_rot_q/k and attn.hook_pattern (qkv_pattern_weights) of layers
 * 0 14 29; hook_embed and ln_final.hook_normalized; and the logits of every
 * position.
 *
 * Metric, per row (a token's [E] or [H, D]; a (head, query) row of the
 * pattern):  rel = max |qkv - ref| / max |ref|,  reported as the worst row.
 * Per row, not per array: token 0's residual stream reaches 2.3e4 in layer 14
 * (a massive activation on the first token) where the others stay near 1e2,
 * so an array-wide max |ref| would let the other tokens be off by 2.
 * Tolerance REL_TOL = 1e-4 at every point: both sides compute with the same
 * weights (transformers dequantises the Q4_1 / Q8_0 tensors to float32 once
 * with gguf.quants.dequantize, qkv block by block inside its matmuls;
 * qkv_dequantize equals gguf's bit for bit, test_dequant.c, and hook_embed, a
 * dequantised Q8_0 row, is exact here) and float32 activations (no 8-bit
 * activations as in llama.cpp); what differs is the summation order (qkv's
 * blocked matmuls and flash attention with its online softmax against
 * torch's GEMM and eager softmax), ~1e-7 relative per dot product, growing
 * through 30 layers.
 * Measured (the table the test prints): 7e-6 at worst (hook_attn_out of
 * layer 29); the pattern 5e-6, q / k / v 4e-6, hook_embed exact.
 *
 * q, k, rot_q, rot_k are stored as transformers has them, in the rotate-half
 * order of HF's weights; llama.cpp's converter permuted attn_q / attn_k rows
 * within each head (HF row r*D/2 + i -> GGUF row 2i + r) and qkv runs the GGUF
 * rows with the interleaved RoPE, so qkv[t, h, 2i + r] is compared with
 * ref[t, h, r*D/2 + i] (ORDER rotate_half in the manifest; the script checks
 * this mapping against the GGUF's own rows).
 *
 * Logits at every position within 5e-3 absolute, test_model_oracle.c's
 * LOGIT_TOL: the logsumexp of the whole row, the top 5 and 512 strided ids
 * ([n, V] itself would be 4.3 MB). Measured 6e-5.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4
#define LOGIT_TOL 5e-3
#define TIE_MARGIN 1e-3
#define MAX_ARRAYS 64

typedef struct {
    char name[96];
    qkv_hook_point point;
    int layer;
    int rotate_half;  /* the fixture is in HF's rotate-half order within D */
    qkv_npy ref;
    float *got;       /* [ref.shape] what the hook saw */
    int seen;
} hooked_array;

typedef struct {
    hooked_array a[MAX_ARRAYS];
    int n;
    int calls[QKV_HOOK_COUNT]; /* hook calls per point, every layer */
    int bad_pos0;
} capture;

/* Reads manifest.txt's `array NAME FILE ORDER SHAPE` lines and their files. */
static int read_manifest(capture *c, const char *dir) {
    char path[800], line[512];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        CHECK(0, "cannot open %s", path);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char name[96], file[128], order[32], shape[64];
        if (strncmp(line, "array ", 6) || sscanf(line, "array %95s %127s %31s %63s", name, file, order, shape) != 4)
            continue;
        if (c->n == MAX_ARRAYS) {
            CHECK(0, "manifest: more than %d arrays", MAX_ARRAYS);
            break;
        }
        hooked_array *h = &c->a[c->n];
        qkv_error err = {0};
        snprintf(h->name, sizeof h->name, "%s", name);
        h->rotate_half = !strcmp(order, "rotate_half");
        if (qkv_hook_parse(&h->point, &h->layer, name, &err)) {
            CHECK(0, "manifest: %s", err.msg);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (qkv_npy_load(&h->ref, path, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        char want[64] = "";
        for (int d = 0; d < h->ref.ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), d ? ",%lld" : "%lld", (long long)h->ref.shape[d]);
        CHECK(h->ref.type == QKV_NPY_F32 && !strcmp(want, shape), "%s: %s is [%s], manifest says [%s]", name, file,
              want, shape);
        h->got = calloc((size_t)h->ref.count, sizeof(float));
        c->n++;
    }
    fclose(f);
    return c->n > 0 && !test_failures();
}

/* Every point's hook: counts the call and copies the arrays the manifest names. */
static qkv_status capture_hook(void *user, const qkv_activation *a, qkv_error *err) {
    capture *c = user;
    c->calls[a->point]++;
    if (a->pos0 != 0) c->bad_pos0++;
    for (int i = 0; i < c->n; i++) {
        hooked_array *h = &c->a[i];
        if (h->point != a->point || h->layer != a->layer) continue;
        int same = a->ndim == h->ref.ndim;
        for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == h->ref.shape[d];
        if (!same) {
            snprintf(err->msg, sizeof err->msg, "%s: activation of %d dims [%lld, %lld, %lld], fixture of %d dims",
                     h->name, a->ndim, (long long)a->shape[0], (long long)a->shape[1], (long long)a->shape[2],
                     h->ref.ndim);
            return QKV_ERR_INVALID;
        }
        if (a->point == QKV_HOOK_PATTERN) {
            const int H = (int)a->shape[0], n = (int)a->shape[1], keys = (int)a->shape[2];
            for (int hd = 0; hd < H; hd++) {
                qkv_status st = qkv_pattern_weights(h->got + (size_t)hd * n * keys, a, hd, 0, n, 0, keys, err);
                if (st) return st;
            }
        } else {
            memcpy(h->got, a->data, (size_t)h->ref.count * sizeof(float));
        }
        h->seen++;
    }
    return QKV_OK;
}

/* The worst row's max |got - ref| / max |ref| (rows of the last dimension
 * for the pattern, of everything after the first dimension otherwise);
 * *row_at gets that row. rotate_half: got[.., h, 2i + r] against
 * ref[.., h, r*D/2 + i], D the last dimension. */
static double rel_err(const hooked_array *h, int64_t *row_at) {
    const qkv_npy *r = &h->ref;
    const int64_t D = r->shape[r->ndim - 1];
    const int64_t len = h->point == QKV_HOOK_PATTERN ? D : r->count / r->shape[0];
    const float *want = r->data;
    double worst = 0;
    *row_at = 0;
    for (int64_t row = 0; row < r->count / len; row++) {
        double dmax = 0, rmax = 0;
        for (int64_t e = 0; e < len; e++) {
            const int64_t i = row * len + e, j = i % D, base = i - j;
            const int64_t k = h->rotate_half ? base + (j % 2) * (D / 2) + j / 2 : i;
            dmax = fmax(dmax, fabs((double)h->got[i] - want[k]));
            rmax = fmax(rmax, fabs((double)want[k]));
        }
        const double rel = rmax > 0 ? dmax / rmax : dmax;
        if (rel > worst || isnan(rel)) {
            worst = isnan(rel) ? INFINITY : rel;
            *row_at = row;
        }
    }
    return worst;
}

/* Logits [n, V] against the fixture's lse, top 5 and strided ids. */
static void check_logits(const float *lg, int n, int V, const char *dir) {
    int64_t n_sub = 0;
    float *lse = test_load_npy(dir, "logits.lse.npy", "", NULL);
    int32_t *top_ids = test_load_npy(dir, "logits.top5_ids.npy", "", NULL);
    float *top = test_load_npy(dir, "logits.top5.npy", "", NULL);
    int32_t *sub_ids = test_load_npy(dir, "logits.sub_ids.npy", "", &n_sub);
    float *sub = test_load_npy(dir, "logits.sub.npy", "", NULL);
    if (!lse || !top_ids || !top || !sub_ids || !sub) goto done;
    double worst = 0, worst_lse = 0;
    int argmax_bad = 0, ties = 0;
    for (int t = 0; t < n; t++) {
        double dlse;
        int best;
        worst = fmax(worst, test_logit_row_diff(lg + (size_t)t * V, V, lse[t], top_ids + t * 5, top + t * 5, sub_ids,
                                                sub + t * n_sub, n_sub, &dlse, &best));
        worst_lse = fmax(worst_lse, dlse);
        if (best != top_ids[t * 5]) {
            if (top[t * 5] - top[t * 5 + 1] < TIE_MARGIN) ties++;
            else argmax_bad++;
        }
    }
    CHECK(worst <= LOGIT_TOL, "max |logit - transformers| = %.3g > %g", worst, LOGIT_TOL);
    CHECK(worst_lse <= LOGIT_TOL, "max |lse - transformers| = %.3g > %g", worst_lse, LOGIT_TOL);
    CHECK(argmax_bad == 0, "%d argmax differences outside near-ties", argmax_bad);
    printf("  logits, %d positions: max |dlogit| %.2e (top 5 and %lld ids), max |dlse| %.2e, "
           "argmax equal (%d near-ties)\n",
           n, worst, (long long)n_sub, worst_lse, ties);
done:
    free(lse); free(top_ids); free(top); free(sub_ids); free(sub);
}

TEST(model_hooks_oracle_smollm2_every_point) {
    if (!test_require_model()) return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/hooks", test_fixture_dir());
    capture *c = calloc(1, sizeof *c);
    int64_t n = 0;
    int32_t *ids = test_load_npy(dir, "ids.npy", "", &n);
    qkv_model *m = NULL;
    float *lg = NULL;
    qkv_error err = {0};
    if (!ids || !read_manifest(c, dir)) goto done;
    qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "%s", err.msg);
    if (!m) goto done;
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const int V = cfg->n_vocab, L = cfg->n_layer;
    qkv_hook hooks[QKV_HOOK_COUNT];
    for (int i = 0; i < QKV_HOOK_COUNT; i++)
        hooks[i] = (qkv_hook){.point = (qkv_hook_point)i, .layer = QKV_ALL, .fn = capture_hook, .user = c};
    const qkv_forward_opts opts = {.hooks = hooks, .n_hooks = QKV_HOOK_COUNT};
    lg = malloc((size_t)n * V * sizeof(float)); /* [n, V] */
    CHECK(qkv_model_forward(m, lg, ids, (int)n, 1, &opts, &err) == QKV_OK, "%s", err.msg);
    if (test_failures()) goto done;

    /* every point is called once per layer (once for hook_embed and ln_final), at position 0 */
    for (int i = 0; i < QKV_HOOK_COUNT; i++) {
        const int want = qkv_hook_point_per_layer((qkv_hook_point)i) ? L : 1;
        CHECK(c->calls[i] == want, "%s: %d calls, want %d", qkv_hook_point_name((qkv_hook_point)i), c->calls[i],
              want);
    }
    CHECK(c->bad_pos0 == 0, "%d hook calls with pos0 != 0", c->bad_pos0);

    /* one line per point: its layers, the worst row over them */
    for (int p_i = 0; p_i < QKV_HOOK_COUNT; p_i++) {
        double worst = 0;
        int worst_layer = -1, n_layers = 0;
        int64_t worst_row = 0;
        char layers[96] = "";
        for (int i = 0; i < c->n; i++) {
            const hooked_array *h = &c->a[i];
            if ((int)h->point != p_i) continue;
            CHECK(h->seen == 1, "%s: the hook copied it %d times", h->name, h->seen);
            int64_t row;
            const double e = rel_err(h, &row);
            CHECK(e <= REL_TOL, "%s: row %lld max |qkv - transformers| / max |transformers| = %.3g > %g", h->name,
                  (long long)row, e, REL_TOL);
            if (h->layer >= 0)
                snprintf(layers + strlen(layers), sizeof layers - strlen(layers), n_layers ? ",%d" : " %d",
                         h->layer);
            n_layers++;
            if (e >= worst) {
                worst = e;
                worst_layer = h->layer;
                worst_row = row;
            }
        }
        if (!n_layers) continue;
        char at[48] = "";
        if (worst_layer >= 0) snprintf(at, sizeof at, "layer %d ", worst_layer);
        printf("  %-26s%-14s worst row rel err %.2e (%srow %lld)\n", qkv_hook_point_name((qkv_hook_point)p_i),
               layers, worst, at, (long long)worst_row);
    }
    check_logits(lg, (int)n, V, dir);
done:
    for (int i = 0; i < c->n; i++) {
        qkv_npy_free(&c->a[i].ref);
        free(c->a[i].got);
    }
    free(c);
    free(ids);
    free(lg);
    qkv_model_close(m);
}
