/*
 * test_patch_oracle.c — qkv_patch, qkv_attribute and qkv_lens against
 * transformers (tools/oracle/make_patch_fixtures.py: forward hooks on the
 * same GGUF's weights dequantised to float32, eager attention, one whole
 * corrupted forward per component; tests/fixtures/patch/<case>/), on the two
 * cases smollm2_ioi (SmolLM2, "When Mary and John went to the store, John /
 * Mary gave a drink to", " Mary" against " John") and gemma3_leave (Gemma 3,
 * 年假 / 病假怎么申请？):
 *   - the fixture's ids are what qkv's tokenizer makes of its texts, and
 *     its answer and wrong pieces one token each;
 *   - the metrics' clean and corrupt values within METRIC_TOL (float32
 *     logits on both sides; measured at most 8e-6);
 *   - recovery, both metrics, head_out [L, Hq], resid_pre, attn_out,
 *     mlp_out [L, n]: within RECOVERY_TOL = 1e-3 absolute (Gemma 3's logit
 *     difference is 年 against 病, 7.74 clean and -5.19 corrupt: the runs'
 *     own top two, "\n\n" and "\n", differ by only 0.009 logits between
 *     the runs, too little for a ratio at float32);
 *   - DLA: attn, mlp and (SmolLM2) heads within DLA_TOL = 1e-3 of the
 *     largest |value| of the array (relative to the array, not each entry:
 *     many entries are near 0); Gemma 3's heads NaN on both sides; embed,
 *     total and logit_diff within DLA_TOL of the largest part;
 *   - the lens: the top-1 token of every layer and position equal where the
 *     reference's top-1 / top-2 gap is >= LENS_GAP, the answer's probability
 *     within LENS_PROB_TOL.
 * Each comparison prints its largest difference. meta.json is read by key
 * (json_at: the keys of a path in document order), not parsed.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRIC_TOL 1e-4
#define RECOVERY_TOL 1e-3
#define DLA_TOL 1e-3
#define LENS_GAP 1e-3
#define LENS_PROB_TOL 1e-3
enum { MAX_TOK = 64 };

/* ------------------------------------------------------------- meta.json */

/* The text just after the value's colon of the key path (keys found in
 * document order, each after the previous), or NULL. */
static const char *json_at(const char *json, const char *const *path, int depth) {
    const char *at = json;
    for (int i = 0; i < depth && at; i++) {
        char quoted[96];
        snprintf(quoted, sizeof quoted, "\"%s\":", path[i]);
        at = strstr(at, quoted);
        if (at) at += strlen(quoted);
    }
    return at;
}

static double json_number(const char *json, const char *a, const char *b, const char *c) {
    const char *path[3] = {a, b, c};
    const char *at = json_at(json, path, b ? (c ? 3 : 2) : 1);
    CHECK(at != NULL, "meta.json has no %s.%s.%s", a, b ? b : "", c ? c : "");
    return at ? strtod(at, NULL) : NAN;
}

/* The int array at key into ids[cap]; returns its length. */
static int json_ids(const char *json, const char *key, int32_t *ids, int cap) {
    const char *path[1] = {key};
    const char *at = json_at(json, path, 1);
    CHECK(at != NULL, "meta.json has no %s", key);
    if (!at || !(at = strchr(at, '['))) return 0;
    int n = 0;
    for (at++; *at && *at != ']' && n < cap;) {
        char *end;
        const long v = strtol(at, &end, 10);
        if (end == at) {
            at++;
            continue;
        }
        ids[n++] = (int32_t)v;
        at = end;
    }
    return n;
}

/* The string at key, unescaped for \n and \" (the answer pieces), into out[cap]. */
static void json_string(const char *json, const char *key, char *out, size_t cap) {
    const char *path[1] = {key};
    const char *at = json_at(json, path, 1);
    out[0] = 0;
    CHECK(at != NULL, "meta.json has no %s", key);
    if (!at || !(at = strchr(at, '"'))) return;
    size_t n = 0;
    for (at++; *at && *at != '"' && n + 1 < cap; at++) {
        if (*at == '\\' && at[1]) {
            at++;
            out[n++] = *at == 'n' ? '\n' : *at == 't' ? '\t' : *at;
        } else {
            out[n++] = *at;
        }
    }
    out[n] = 0;
}

/* ------------------------------------------------------------------ cases */

typedef struct {
    const char *name, *model_path;
    char dir[600];
    char *meta;
    qkv_model *m;
    int n, L, Hq, V;
    int32_t clean[MAX_TOK], corrupt[MAX_TOK], answer, wrong;
} oracle_case;

static void *load_fixture(const oracle_case *c, const char *file, int64_t want) {
    int64_t count = 0;
    qkv_npy a;
    qkv_error err = {0};
    char path[700];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    if (qkv_npy_load(&a, path, &err)) {
        CHECK(0, "%s", err.msg);
        return NULL;
    }
    count = a.count;
    CHECK(count == want && (a.type == QKV_NPY_F64 || a.type == QKV_NPY_I32), "%s: %lld elements of type %d, want %lld",
          path, (long long)count, (int)a.type, (long long)want);
    if (count != want) {
        qkv_npy_free(&a);
        return NULL;
    }
    return a.data;
}

/* Opens the case: meta.json, the model, the ids checked against qkv's tokenizer. */
static int open_case(oracle_case *c, const char *name, const char *model_path) {
    memset(c, 0, sizeof *c);
    c->name = name;
    c->model_path = model_path;
    snprintf(c->dir, sizeof c->dir, "%s/patch/%s", test_fixture_dir(), name);
    char meta_path[700];
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", c->dir);
    if (!test_require_file(meta_path, "tools/oracle/make_patch_fixtures.py's fixtures")) return 0;
    c->meta = test_read_file(meta_path, NULL);
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = MAX_TOK, .n_threads = 2};
    CHECK(qkv_model_open(&c->m, model_path, &mp, &err) == QKV_OK, "%s: %s", model_path, err.msg);
    if (!c->m || !c->meta) return 0;
    const qkv_model_config *cfg = qkv_model_get_config(c->m);
    c->L = cfg->n_layer, c->Hq = cfg->n_head, c->V = cfg->n_vocab;
    c->n = json_ids(c->meta, "clean_ids", c->clean, MAX_TOK);
    const int n2 = json_ids(c->meta, "corrupt_ids", c->corrupt, MAX_TOK);
    c->answer = (int32_t)json_number(c->meta, "answer_id", NULL, NULL);
    c->wrong = (int32_t)json_number(c->meta, "wrong_id", NULL, NULL);
    CHECK(c->n == n2 && c->n == (int)json_number(c->meta, "n", NULL, NULL) &&
              c->L == (int)json_number(c->meta, "n_layer", NULL, NULL) &&
              c->Hq == (int)json_number(c->meta, "n_head", NULL, NULL),
          "%s: %d / %d ids, model L %d Hq %d against meta.json", name, c->n, n2, c->L, c->Hq);

    /* the ids are qkv's tokenizer's, the pieces one token each */
    qkv_tokenizer *t = NULL;
    CHECK(qkv_tokenizer_load(&t, qkv_model_gguf(c->m), &err) == QKV_OK, "%s", err.msg);
    const char *keys[4] = {"clean_text", "corrupt_text", "answer_piece", "wrong_piece"};
    for (int i = 0; i < 4 && t; i++) {
        char text[256];
        int32_t ids[MAX_TOK];
        int64_t got = 0;
        json_string(c->meta, keys[i], text, sizeof text);
        CHECK(qkv_tokenize(t, text, strlen(text), i < 2, 0, ids, MAX_TOK, &got, &err) == QKV_OK, "%s", err.msg);
        const int32_t *want = i == 0 ? c->clean : i == 1 ? c->corrupt : i == 2 ? &c->answer : &c->wrong;
        const int64_t n_want = i < 2 ? c->n : 1;
        CHECK(got == n_want && !memcmp(ids, want, (size_t)n_want * sizeof(int32_t)),
              "%s: qkv tokenizes %s '%s' to %lld ids, not the fixture's", name, keys[i], text, (long long)got);
    }
    qkv_tokenizer_free(t);
    return c->n == n2 && c->n > 0;
}

static void close_case(oracle_case *c) {
    qkv_model_close(c->m);
    free(c->meta);
}

/* ------------------------------------------------------------- patching */

static void check_patch(const oracle_case *c) {
    const int L = c->L, Hq = c->Hq, n = c->n;
    static const char *const metric_names[2] = {"kl", "logit_diff"};
    /* the fixtures' sweeps: all but head_out_pos */
    static const qkv_sweep sweeps[4] = {QKV_SWEEP_HEAD_OUT, QKV_SWEEP_RESID_PRE, QKV_SWEEP_ATTN_OUT, QKV_SWEEP_MLP_OUT};
    for (int mi = 0; mi < 2; mi++) {
        qkv_patch_out out = {{0}};
        const float *got[4];
        const char *sweep_names[4];
        int64_t count[4];
        for (int s = 0; s < 4; s++) {
            int64_t sh[3];
            qkv_sweep_shape(sh, sweeps[s], L, Hq, n);
            count[s] = sh[0] * sh[1] * sh[2];
            got[s] = out.recovery[sweeps[s]] = malloc((size_t)count[s] * sizeof(float));
            sweep_names[s] = qkv_sweep_name(sweeps[s]);
        }
        const qkv_patch_params p = {.metric = {.kind = mi ? QKV_METRIC_LOGIT_DIFF : QKV_METRIC_KL, .answer = c->answer,
                                               .wrong = c->wrong}};
        qkv_patch_summary sum;
        qkv_error err = {0};
        CHECK(qkv_patch(&out, &sum, c->m, c->clean, c->corrupt, n, &p, &err) == QKV_OK, "%s %s: %s", c->name,
              metric_names[mi], err.msg);
        const double want_clean = json_number(c->meta, "metrics", metric_names[mi], "clean"),
                     want_corrupt = json_number(c->meta, "metrics", metric_names[mi], "corrupt");
        CHECK(fabs(sum.clean - want_clean) <= METRIC_TOL && fabs(sum.corrupt - want_corrupt) <= METRIC_TOL,
              "%s %s: clean %.7g corrupt %.7g, transformers %.7g %.7g", c->name, metric_names[mi], sum.clean,
              sum.corrupt, want_clean, want_corrupt);
        printf("  %-13s %-10s clean %.6g (%.1e) corrupt %.6g (%.1e)\n", c->name, metric_names[mi], sum.clean,
               fabs(sum.clean - want_clean), sum.corrupt, fabs(sum.corrupt - want_corrupt));
        for (int s = 0; s < 4; s++) {
            char file[64], spread_key[64];
            snprintf(file, sizeof file, "%s_%s.npy", metric_names[mi], sweep_names[s]);
            snprintf(spread_key, sizeof spread_key, "%s_%s", metric_names[mi], sweep_names[s]);
            const double spread = json_number(c->meta, "measured", "float64_rerun_max_abs_recovery_diff", spread_key);
            const double tol = RECOVERY_TOL, scale = fabs(want_clean - want_corrupt);
            double *want = load_fixture(c, file, count[s]);
            if (!want) continue;
            double worst = 0;
            int64_t at = 0, bad = 0;
            for (int64_t i = 0; i < count[s]; i++) {
                const double d = fabs(got[s][i] - want[i]);
                if (!(d <= worst)) worst = d, at = i;
                bad += !(d <= tol);
            }
            CHECK(bad == 0, "%s %s %s: %lld entries beyond %.1e, worst %.3g at %lld (qkv %.6f, transformers %.6f)",
                  c->name, metric_names[mi], sweep_names[s], (long long)bad, tol, worst, (long long)at, got[s][at],
                  want[at]);
            printf("    %-10s max |d recovery| %.2e (%.1e of the metric; tolerance %.1e; the reference's float64 rerun "
                   "moves it %.1e)\n",
                   sweep_names[s], worst, worst * scale, tol, spread);
            free(want);
        }
        for (int s = 0; s < QKV_SWEEP_COUNT; s++) free(out.recovery[s]);
    }
}

/* --------------------------------------------------------------- DLA, lens */

/* max |got - want| / max |want| over n (NaN must meet NaN); 0 when all match. */
static double array_rel_diff(const float *got, const double *want, int n, int *nan_mismatch) {
    double big = 0, worst = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(want[i])) big = fmax(big, fabs(want[i]));
    for (int i = 0; i < n; i++) {
        if (isnan(want[i]) || isnan(got[i])) {
            *nan_mismatch += isnan(want[i]) != isnan(got[i]);
            continue;
        }
        worst = fmax(worst, fabs(got[i] - want[i]));
    }
    return big > 0 ? worst / big : worst;
}

static void check_attribute(const oracle_case *c) {
    const int L = c->L, Hq = c->Hq;
    qkv_attribution a = {.heads = malloc((size_t)L * Hq * sizeof(float)), .attn = malloc((size_t)L * sizeof(float)),
                         .mlp = malloc((size_t)L * sizeof(float))};
    qkv_error err = {0};
    CHECK(qkv_attribute(&a, c->m, c->clean, c->n, c->answer, c->wrong, &err) == QKV_OK, "%s: %s", c->name, err.msg);
    CHECK(a.heads_linear == (int)json_number(c->meta, "dla", "heads_linear", NULL) &&
              a.final_softcap == (int)json_number(c->meta, "dla", "final_softcap", NULL),
          "%s: heads_linear %d final_softcap %d against the fixture's", c->name, a.heads_linear, a.final_softcap);
    double *heads = load_fixture(c, "dla_heads.npy", (int64_t)L * Hq), *attn = load_fixture(c, "dla_attn.npy", L),
           *mlp = load_fixture(c, "dla_mlp.npy", L);
    if (heads && attn && mlp) {
        int nan_mismatch = 0;
        const double dh = array_rel_diff(a.heads, heads, L * Hq, &nan_mismatch),
                     da = array_rel_diff(a.attn, attn, L, &nan_mismatch), dm = array_rel_diff(a.mlp, mlp, L, &nan_mismatch);
        CHECK(nan_mismatch == 0, "%s: %d heads NaN on one side only", c->name, nan_mismatch);
        CHECK(dh <= DLA_TOL && da <= DLA_TOL && dm <= DLA_TOL, "%s: DLA heads %.3g attn %.3g mlp %.3g of the largest",
              c->name, dh, da, dm);
        double big = fabs(a.embed);
        for (int l = 0; l < L; l++) big = fmax(big, fmax(fabs(attn[l]), fabs(mlp[l])));
        const double de = fabs(a.embed - json_number(c->meta, "dla", "embed", NULL)) / big,
                     dt = fabs(a.total - json_number(c->meta, "dla", "total", NULL)) / big,
                     dl = fabs(a.logit_diff - json_number(c->meta, "dla", "logit_diff", NULL)) / big;
        CHECK(de <= DLA_TOL && dt <= DLA_TOL && dl <= DLA_TOL, "%s: DLA embed %.3g total %.3g logit_diff %.3g", c->name,
              de, dt, dl);
        printf("  %-13s DLA, of the largest |value|: heads %.2e attn %.2e mlp %.2e embed %.2e total %.2e logit_diff "
               "%.2e\n",
               c->name, dh, da, dm, de, dt, dl);
    }
    free(heads);
    free(attn);
    free(mlp);
    free(a.heads);
    free(a.attn);
    free(a.mlp);
}

static void check_lens(const oracle_case *c) {
    const int L = c->L, n = c->n;
    qkv_lens_out out = {.top_ids = malloc((size_t)L * n * sizeof(int32_t)),
                        .top_probs = malloc((size_t)L * n * sizeof(float)),
                        .target_prob = malloc((size_t)L * n * sizeof(float))};
    const qkv_lens_params p = {.k = 1, .target = c->answer};
    qkv_error err = {0};
    CHECK(qkv_lens(&out, c->m, c->clean, n, &p, &err) == QKV_OK, "%s: %s", c->name, err.msg);
    int32_t *top1 = load_fixture(c, "lens_top1.npy", (int64_t)L * n);
    double *gap = load_fixture(c, "lens_gap.npy", (int64_t)L * n), *prob = load_fixture(c, "lens_prob_answer.npy", (int64_t)L * n);
    if (top1 && gap && prob) {
        int compared = 0, differ = 0;
        double worst = 0;
        for (int i = 0; i < L * n; i++) {
            worst = fmax(worst, fabs(out.target_prob[i] - prob[i]));
            if (gap[i] < LENS_GAP) continue;
            compared++;
            if (out.top_ids[i] != top1[i]) {
                if (differ < 5)
                    CHECK(0, "%s: lens layer %d position %d: top-1 %d, transformers %d (gap %.3g)", c->name, i / n, i % n,
                          out.top_ids[i], top1[i], gap[i]);
                differ++;
            }
        }
        CHECK(differ == 0, "%s: %d of %d lens top-1 tokens differ", c->name, differ, compared);
        CHECK(worst <= LENS_PROB_TOL, "%s: the answer's lens probability differs by %.3g", c->name, worst);
        printf("  %-13s lens: top-1 equal at %d of the %d (layer, position) with a gap >= %.0e (of %d); answer's p "
               "within %.2e\n",
               c->name, compared - differ, compared, LENS_GAP, L * n, worst);
    }
    free(top1);
    free(gap);
    free(prob);
    free(out.top_ids);
    free(out.top_probs);
    free(out.target_prob);
}

static void run_case(const char *name, const char *model_path) {
    oracle_case c;
    if (open_case(&c, name, model_path)) {
        check_attribute(&c);
        check_lens(&c);
        check_patch(&c);
    }
    close_case(&c);
}

TEST(patch_oracle_smollm2_ioi) {
    if (!test_require_model()) return;
    run_case("smollm2_ioi", test_model_path());
}

TEST(patch_oracle_gemma3_leave) {
    if (!test_require_gemma3()) return;
    run_case("gemma3_leave", test_gemma3_path());
}
