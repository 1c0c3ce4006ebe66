/*
 * test_patch.c — activation patching (src/probe/patch.c) on the real models:
 * SmolLM2 on the IOI pair ("When Mary and John went to the store, John / Mary
 * gave a drink to", answer " Mary", wrong " John") and Gemma 3 on 年假 / 病假
 * 怎么申请？, both pairs one token apart. The identities are exact (==, not a
 * tolerance): a resumed run computes what the whole run computes, bit for bit
 * (test_model_resume.c), so
 *   - patching hook_resid_pre of a layer at every position is the clean run:
 *     recovery 1; at layer 0, the one differing position alone is that too;
 *   - patching with the corrupted run's own activation is the corrupted run:
 *     recovery 0; so is every patch at a position before the differing token
 *     (the two runs agree there bit for bit);
 *   - each component's recovery equals a whole forward of the corrupted
 *     prompt with the same patching hook (the naive way);
 * for both metrics, with the summary's values and step counts checked
 * against plain runs and the formulas. Also: the byte limit, an undefined
 * recovery (clean == corrupt), bad arguments, progress and cancelling; the
 * agreement with transformers is test_patch_oracle.c.
 */
#include "testing.h"

#include "probe/internal.h"
#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TOK = 32 };

/* A clean / corrupted pair on one model, tokenised by the model's tokenizer. */
typedef struct {
    qkv_model *m;
    const char *name;
    int n, diff;                    /* tokens of each; the one position where they differ */
    int32_t clean[MAX_TOK], corrupt[MAX_TOK];
    int32_t answer, wrong;          /* for the logit difference */
    int L, Hq, E, V, QD;
} pair;

static int tokenize(const qkv_tokenizer *t, const char *text, int32_t *ids, int add_special) {
    int64_t n = 0;
    qkv_error err = {0};
    CHECK(qkv_tokenize(t, text, strlen(text), add_special, 0, ids, MAX_TOK, &n, &err) == QKV_OK, "'%s': %s", text,
          err.msg);
    return (int)n;
}

/* Opens the model and tokenises the pair (BOS as the GGUF asks); answer and
 * wrong: one token each, or NULL for the clean run's top token and the
 * corrupted run's (its second if they agree). 0 after a failed CHECK. */
static int open_pair(pair *p, const char *name, const char *path, const char *clean, const char *corrupt,
                     const char *answer, const char *wrong) {
    memset(p, 0, sizeof *p);
    p->name = name;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&p->m, path, &mp, &err) == QKV_OK, "%s: %s", path, err.msg);
    if (!p->m) return 0;
    const qkv_model_config *c = qkv_model_get_config(p->m);
    p->L = c->n_layer, p->Hq = c->n_head, p->E = c->n_embd, p->V = c->n_vocab, p->QD = c->n_head * c->head_dim;
    qkv_tokenizer *t = NULL;
    CHECK(qkv_tokenizer_load(&t, qkv_model_gguf(p->m), &err) == QKV_OK, "%s", err.msg);
    if (!t) return 0;
    p->n = tokenize(t, clean, p->clean, 1);
    const int n2 = tokenize(t, corrupt, p->corrupt, 1);
    int32_t a[MAX_TOK], w[MAX_TOK];
    const int na = answer ? tokenize(t, answer, a, 0) : 1, nw = wrong ? tokenize(t, wrong, w, 0) : 1;
    qkv_tokenizer_free(t);
    CHECK(p->n == n2 && na == 1 && nw == 1, "%s: %d and %d tokens, answer %d, wrong %d tokens", name, p->n, n2, na, nw);
    int n_diff = 0;
    for (int i = 0; i < p->n; i++)
        if (p->clean[i] != p->corrupt[i]) n_diff++, p->diff = i;
    CHECK(n_diff == 1, "%s: the prompts differ at %d positions, want one", name, n_diff);
    p->answer = answer ? a[0] : -1;
    p->wrong = wrong ? w[0] : -1;
    return p->n == n2 && n_diff == 1 && na == 1 && nw == 1;
}

/* One run of a prompt from an empty cache: its last logits and its
 * activations at the four points qkv_patch patches, every layer. */
enum { N_POINTS = 4 };
static const qkv_hook_point points[N_POINTS] = {QKV_HOOK_Z, QKV_HOOK_RESID_PRE, QKV_HOOK_ATTN_OUT, QKV_HOOK_MLP_OUT};

typedef struct {
    float *logits;          /* [V] */
    float *act[N_POINTS];   /* [L, n, width]: width Hq*D for hook_z, E for the others */
    size_t per_layer[N_POINTS];
} run_record;

static qkv_status record_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    run_record *r = user;
    for (int i = 0; i < N_POINTS; i++)
        if (points[i] == a->point)
            memcpy(r->act[i] + (size_t)a->layer * r->per_layer[i], a->data, r->per_layer[i] * sizeof(float));
    return QKV_OK;
}

static void record(run_record *r, const pair *p, const int32_t *tokens) {
    r->logits = malloc((size_t)p->V * sizeof(float));
    qkv_hook hooks[N_POINTS];
    for (int i = 0; i < N_POINTS; i++) {
        r->per_layer[i] = (size_t)p->n * (points[i] == QKV_HOOK_Z ? p->QD : p->E);
        r->act[i] = malloc(p->L * r->per_layer[i] * sizeof(float));
        hooks[i] = (qkv_hook){.point = points[i], .layer = QKV_ALL, .fn = record_hook, .user = r};
    }
    qkv_error err = {0};
    qkv_model_rewind(p->m, 0, NULL);
    CHECK(qkv_model_forward(p->m, r->logits, tokens, p->n, 0,
                            &(qkv_forward_opts){.hooks = hooks, .n_hooks = N_POINTS}, &err) == QKV_OK,
          "%s", err.msg);
    qkv_model_rewind(p->m, 0, NULL);
}

static void record_free(run_record *r) {
    free(r->logits);
    for (int i = 0; i < N_POINTS; i++) free(r->act[i]);
}

/* The point's index in points[], and the activation of layer l in r. */
static int point_index(qkv_hook_point point) {
    for (int i = 0; i < N_POINTS; i++)
        if (points[i] == point) return i;
    return 0;
}
static const float *act_of(const run_record *r, qkv_hook_point point, int l) {
    const int i = point_index(point);
    return r->act[i] + (size_t)l * r->per_layer[i];
}

/* 1 if the rows (pos; -1 all) and columns (head's, -1 all) a patch copies are
 * the same in both runs, bit for bit. */
static int unchanged(const pair *p, const run_record *a, const run_record *b, qkv_hook_point point, int l, int head,
                     int pos) {
    const int width = point == QKV_HOOK_Z ? p->QD : p->E, D = p->QD / p->Hq;
    const int col0 = head >= 0 ? head * D : 0, cols = head >= 0 ? D : width;
    for (int t = pos < 0 ? 0 : pos; t < (pos < 0 ? p->n : pos + 1); t++)
        if (memcmp(act_of(a, point, l) + (size_t)t * width + col0, act_of(b, point, l) + (size_t)t * width + col0,
                   (size_t)cols * sizeof(float)))
            return 0;
    return 1;
}

static int32_t argmax_except(const float *x, int V, int32_t skip) {
    int32_t best = -1;
    for (int32_t i = 0; i < V; i++)
        if (i != skip && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

/* ------------------------------------------------------------ identities */

/* The recovery of one patched run, src's rows at (point, layer, head, pos);
 * start_resid NULL: the whole corrupted forward (naive). */
static double recovery_of(const pair *p, const qkv_metric *mt, const qkv_patch_summary *sum, const float *clean_logits,
                          const float *start_resid, qkv_hook_point point, int layer, int head, int pos,
                          const float *src, float *logits) {
    qkv_error err = {0};
    CHECK(probe_patch_run(logits, p->m, p->corrupt, p->n, start_resid, point, layer, head, pos, src, NULL, 0, &err) == QKV_OK,
          "%s", err.msg);
    CHECK(qkv_model_pos(p->m) == 0, "a patched run left the cache at %d", qkv_model_pos(p->m));
    return probe_patch_recovery(probe_patch_metric(mt, clean_logits, logits, p->V), sum->clean, sum->corrupt);
}

/* What qkv_patch's sweeps hold, as components: (name, point, per head, per position). */
static const struct {
    const char *name;
    qkv_hook_point point;
    int per_head, per_pos;
} sweep_kinds[QKV_SWEEP_COUNT] = {
    [QKV_SWEEP_HEAD_OUT] = {"head_out", QKV_HOOK_Z, 1, 0},
    [QKV_SWEEP_HEAD_OUT_POS] = {"head_out_pos", QKV_HOOK_Z, 1, 1},
    [QKV_SWEEP_RESID_PRE] = {"resid_pre", QKV_HOOK_RESID_PRE, 0, 1},
    [QKV_SWEEP_ATTN_OUT] = {"attn_out", QKV_HOOK_ATTN_OUT, 0, 1},
    [QKV_SWEEP_MLP_OUT] = {"mlp_out", QKV_HOOK_MLP_OUT, 0, 1},
};

TEST(patch_sweeps_names_points_and_shapes) {
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        int64_t shape[3] = {0};
        const int ndim = qkv_sweep_shape(shape, (qkv_sweep)s, 3, 4, 5);
        const int64_t want1 = sweep_kinds[s].per_head ? 4 : 5, want2 = sweep_kinds[s].per_head && sweep_kinds[s].per_pos ? 5 : 1;
        CHECK(qkv_sweep_name((qkv_sweep)s) && !strcmp(qkv_sweep_name((qkv_sweep)s), sweep_kinds[s].name) &&
                  qkv_sweep_point((qkv_sweep)s) == sweep_kinds[s].point,
              "sweep %d: %s at point %d", s, qkv_sweep_name((qkv_sweep)s), (int)qkv_sweep_point((qkv_sweep)s));
        CHECK(ndim == (want2 > 1 ? 3 : 2) && shape[0] == 3 && shape[1] == want1 && shape[2] == want2,
              "%s: %d dims [%lld, %lld, %lld]", sweep_kinds[s].name, ndim, (long long)shape[0], (long long)shape[1],
              (long long)shape[2]);
    }
    int64_t shape[3];
    CHECK(!qkv_sweep_name(QKV_SWEEP_COUNT) && !qkv_sweep_name((qkv_sweep)-1) &&
              qkv_sweep_point(QKV_SWEEP_COUNT) == QKV_HOOK_COUNT && qkv_sweep_shape(shape, QKV_SWEEP_COUNT, 1, 1, 1) == 0,
          "outside the sweeps: no name, point or shape");
}

static void check_pair(const pair *p, const qkv_metric *mt, int per_position) {
    const int L = p->L, Hq = p->Hq, n = p->n, V = p->V;
    const char *mname = mt->kind == QKV_METRIC_KL ? "kl" : "logit-diff";
    qkv_patch_out out = {{0}};
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        int64_t sh[3];
        qkv_sweep_shape(sh, (qkv_sweep)s, L, Hq, n);
        if (s != QKV_SWEEP_HEAD_OUT_POS || per_position) out.recovery[s] = malloc((size_t)(sh[0] * sh[1] * sh[2]) * sizeof(float));
    }
    float *const *outs = out.recovery;
    qkv_patch_summary sum = {0};
    qkv_error err = {0};
    const qkv_patch_params pp = {.metric = *mt};
    CHECK(qkv_patch(&out, &sum, p->m, p->clean, p->corrupt, n, &pp, &err) == QKV_OK, "%s %s: %s", p->name, mname,
          err.msg);
    CHECK(qkv_model_pos(p->m) == 0, "qkv_patch left the cache at %d", qkv_model_pos(p->m));

    /* the metric's values, from plain runs */
    run_record clean, corrupt;
    record(&clean, p, p->clean);
    record(&corrupt, p, p->corrupt);
    if (mt->kind == QKV_METRIC_KL)
        CHECK(sum.clean == 0 && sum.corrupt == qkv_kl_logits(clean.logits, corrupt.logits, V) && sum.corrupt > 0,
              "%s kl: clean %g, corrupt %g, want 0 and %g", p->name, sum.clean, sum.corrupt,
              qkv_kl_logits(clean.logits, corrupt.logits, V));
    else
        CHECK(sum.clean == (double)clean.logits[mt->answer] - clean.logits[mt->wrong] &&
                  sum.corrupt == (double)corrupt.logits[mt->answer] - corrupt.logits[mt->wrong],
              "%s logit-diff: clean %g, corrupt %g", p->name, sum.clean, sum.corrupt);

    /* before the differing token both runs agree bit for bit at every point */
    int differ_before = 0;
    for (int i = 0; i < N_POINTS; i++)
        for (int l = 0; l < L; l++)
            for (int pos = 0; pos < p->diff; pos++) differ_before += !unchanged(p, &clean, &corrupt, points[i], l, -1, pos);
    CHECK(differ_before == 0, "%s: %d activations differ before position %d", p->name, differ_before, p->diff);

    /* the counts: components equal in both runs are 0 and not run, the others
     * cost (L - l) n each */
    int64_t comps = 0, same = 0, steps = 2 * (int64_t)L * n, nonzero_same = 0;
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        if (!outs[s]) continue;
        size_t i = 0;
        for (int l = 0; l < L; l++)
            for (int h = sweep_kinds[s].per_head ? 0 : -1; h < (sweep_kinds[s].per_head ? Hq : 0); h++)
                for (int pos = sweep_kinds[s].per_pos ? 0 : -1; pos < (sweep_kinds[s].per_pos ? n : 0); pos++, i++) {
                    comps++;
                    if (unchanged(p, &clean, &corrupt, sweep_kinds[s].point, l, h, pos)) {
                        same++;
                        nonzero_same += outs[s][i] != 0;
                    } else {
                        steps += (int64_t)(L - l) * n;
                    }
                }
    }
    CHECK(sum.n_components == comps && sum.n_unchanged == same && sum.layer_token_steps == steps &&
              sum.naive_layer_token_steps == (2 + comps) * L * n && nonzero_same == 0,
          "%s: %lld components (%lld unchanged), %lld steps, %lld naive; want %lld (%lld), %lld, %lld; %lld unchanged "
          "ones not 0",
          p->name, (long long)sum.n_components, (long long)sum.n_unchanged, (long long)sum.layer_token_steps,
          (long long)sum.naive_layer_token_steps, (long long)comps, (long long)same, (long long)steps,
          (long long)((2 + comps) * L * n), (long long)nonzero_same);
    CHECK(same >= (int64_t)p->diff * L * (3 + (per_position ? Hq : 0)), "%s: %lld unchanged components", p->name,
          (long long)same);

    /* layer 0's residual is the embedding: the differing token's row alone
     * makes it the clean run's (every other row is the same in both) */
    CHECK(out.recovery[QKV_SWEEP_RESID_PRE][p->diff] == 1.0f, "%s %s: resid_pre[0, %d] = %.9g", p->name, mname, p->diff,
          out.recovery[QKV_SWEEP_RESID_PRE][p->diff]);
    /* every position of a layer's resid_pre: the clean run itself */
    float *logits = malloc((size_t)V * 4);
    const int layers[3] = {1, L / 2, L - 1};
    for (int i = 0; i < 3; i++) {
        const int l = layers[i];
        const double r = recovery_of(p, mt, &sum, clean.logits, act_of(&corrupt, QKV_HOOK_RESID_PRE, l),
                                     QKV_HOOK_RESID_PRE, l, -1, -1, act_of(&clean, QKV_HOOK_RESID_PRE, l), logits);
        CHECK(r == 1 && !memcmp(logits, clean.logits, (size_t)V * 4),
              "%s %s: every position of resid_pre[%d]: recovery %.17g", p->name, mname, l, r);
    }
    /* the corrupted run's own activations, run: the corrupted run itself */
    const struct {
        qkv_hook_point point;
        int layer, head, pos;
    } own[4] = {{QKV_HOOK_Z, L / 2, 1, -1}, {QKV_HOOK_Z, L - 1, 0, n - 1},
                {QKV_HOOK_ATTN_OUT, 2, -1, n - 1}, {QKV_HOOK_MLP_OUT, L - 2, -1, p->diff}};
    for (int i = 0; i < 4; i++) {
        const int l = own[i].layer;
        const double r = recovery_of(p, mt, &sum, clean.logits, act_of(&corrupt, QKV_HOOK_RESID_PRE, l), own[i].point,
                                     l, own[i].head, own[i].pos, act_of(&corrupt, own[i].point, l), logits);
        CHECK(r == 0 && !memcmp(logits, corrupt.logits, (size_t)V * 4),
              "%s %s: %s of layer %d with its own values: %.17g", p->name, mname, qkv_hook_point_name(own[i].point), l,
              r);
    }
    /* qkv_patch's values are those of whole patched forwards */
    const struct {
        int sweep, layer, head, pos;
    } naive[6] = {{0, L / 2, 1, -1},      {0, L - 3, Hq - 1, -1},   {2, 5, -1, p->diff},
                  {3, 3, -1, n - 1},      {4, L - 2, -1, p->diff},  {1, L - 1, Hq - 1, n - 1}};
    for (int i = 0; i < 6; i++) {
        const int s = naive[i].sweep, l = naive[i].layer, h = naive[i].head, pos = naive[i].pos;
        if (!outs[s]) continue;
        const qkv_hook_point point = sweep_kinds[s].point;
        const double r = recovery_of(p, mt, &sum, clean.logits, NULL, point, l, h, pos, act_of(&clean, point, l), logits);
        const size_t at = ((size_t)l * (sweep_kinds[s].per_head ? Hq : 1) + (h < 0 ? 0 : h)) *
                              (sweep_kinds[s].per_pos ? n : 1) + (pos < 0 ? 0 : pos);
        CHECK((float)r == outs[s][at], "%s %s: %s of layer %d head %d pos %d: %.9g, the whole forward %.9g", p->name,
              mname, qkv_hook_point_name(point), l, h, pos, outs[s][at], r);
    }
    printf("  %-8s %-10s clean %.6g corrupt %.6g; resid_pre[L/2, last] %.4f; %lld components, %lld unchanged, steps "
           "%lld of naive %lld\n",
           p->name, mname, sum.clean, sum.corrupt, out.recovery[QKV_SWEEP_RESID_PRE][(size_t)(L / 2) * n + n - 1],
           (long long)sum.n_components, (long long)sum.n_unchanged, (long long)sum.layer_token_steps,
           (long long)sum.naive_layer_token_steps);
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) free(outs[s]);
    record_free(&clean);
    record_free(&corrupt);
    free(logits);
}

static const char *const ioi_clean = "When Mary and John went to the store, John gave a drink to";
static const char *const ioi_corrupt = "When Mary and John went to the store, Mary gave a drink to";

TEST(patch_smollm2_ioi_identities) {
    if (!test_require_model()) return;
    pair p;
    if (open_pair(&p, "SmolLM2", test_model_path(), ioi_clean, ioi_corrupt, " Mary", " John")) {
        CHECK(p.n == 14 && p.diff == 9, "IOI: %d tokens differing at %d, want 14 and 9", p.n, p.diff);
        check_pair(&p, &(qkv_metric){.kind = QKV_METRIC_KL}, 0);
        check_pair(&p, &(qkv_metric){.kind = QKV_METRIC_LOGIT_DIFF, .answer = p.answer, .wrong = p.wrong}, 0);
    }
    qkv_model_close(p.m);
}

TEST(patch_gemma3_leave_identities) {
    if (!test_require_gemma3()) return;
    pair p;
    if (open_pair(&p, "Gemma 3", test_gemma3_path(), "年假怎么申请？", "病假怎么申请？", NULL, NULL)) {
        CHECK(p.n == 6 && p.diff == 1, "年假 / 病假: %d tokens differing at %d, want 6 and 1", p.n, p.diff);
        run_record clean, corrupt;
        record(&clean, &p, p.clean);
        record(&corrupt, &p, p.corrupt);
        p.answer = argmax_except(clean.logits, p.V, -1);
        p.wrong = argmax_except(corrupt.logits, p.V, -1);
        if (p.wrong == p.answer) p.wrong = argmax_except(clean.logits, p.V, p.answer);
        record_free(&clean);
        record_free(&corrupt);
        check_pair(&p, &(qkv_metric){.kind = QKV_METRIC_KL}, 1);
        check_pair(&p, &(qkv_metric){.kind = QKV_METRIC_LOGIT_DIFF, .answer = p.answer, .wrong = p.wrong}, 0);
    }
    qkv_model_close(p.m);
}

/* ------------------------------------------------------------ refusals */

typedef struct {
    int calls;
    int64_t last_done, last_total;
    int stop_at;
} progress_log;

static int log_progress(void *user, int64_t done, int64_t total) {
    progress_log *g = user;
    g->calls++;
    g->last_done = done;
    g->last_total = total;
    return g->stop_at && g->calls >= g->stop_at;
}

TEST(patch_bytes_limit_and_bad_arguments) {
    if (!test_require_model()) return;
    pair p;
    if (!open_pair(&p, "SmolLM2", test_model_path(), ioi_clean, ioi_corrupt, " Mary", " John")) {
        qkv_model_close(p.m);
        return;
    }
    const int L = p.L, n = p.n;
    float *heads = malloc((size_t)L * p.Hq * n * sizeof(float)), *rows = malloc((size_t)L * n * sizeof(float));
    /* the bytes: checkpoints, both runs' caches at the points asked for (the
     * corrupted run's resid_pre are the checkpoints), three logit rows */
    const int64_t base = ((int64_t)L * n * p.E + 3 * (int64_t)p.V) * 4;
    const qkv_patch_out none = {0}, z_only = {.recovery[QKV_SWEEP_HEAD_OUT_POS] = heads},
                        all_rows = {.recovery[QKV_SWEEP_RESID_PRE] = rows, .recovery[QKV_SWEEP_MLP_OUT] = rows};
    CHECK(qkv_patch_bytes(p.m, n, NULL) == base && qkv_patch_bytes(p.m, n, &none) == base, "no sweep: %lld, want %lld",
          (long long)qkv_patch_bytes(p.m, n, NULL), (long long)base);
    CHECK(qkv_patch_bytes(p.m, n, &z_only) == base + 2 * (int64_t)L * n * p.QD * 4, "hook_z caches: %lld",
          (long long)qkv_patch_bytes(p.m, n, &z_only));
    CHECK(qkv_patch_bytes(p.m, n, &all_rows) == base + 3 * (int64_t)L * n * p.E * 4, "row caches: %lld",
          (long long)qkv_patch_bytes(p.m, n, &all_rows));
    CHECK(qkv_patch_bytes(NULL, n, NULL) == -1 && qkv_patch_bytes(p.m, 0, NULL) == -1, "bad arguments give -1");

    qkv_patch_out out = {.recovery[QKV_SWEEP_HEAD_OUT_POS] = heads};
    qkv_patch_summary sum;
    qkv_error err = {0};
    const int64_t need = qkv_patch_bytes(p.m, n, &out);
    char want[160];
    snprintf(want, sizeof want, "cache %lld bytes of activations for %d tokens, more than the limit of %lld bytes",
             (long long)need, n, (long long)(need - 1));
    qkv_patch_params pp = {.max_bytes = need - 1};
    CHECK(qkv_patch(&out, &sum, p.m, p.clean, p.corrupt, n, &pp, &err) == QKV_ERR_TOO_LARGE && strstr(err.msg, want),
          "one byte over the limit: %s", err.msg);
    const qkv_metric ld = {.kind = QKV_METRIC_LOGIT_DIFF, .answer = p.answer, .wrong = p.wrong};
    const struct {
        qkv_patch_params pp;
        const int32_t *corrupt;
        int n;
        qkv_status st;
        const char *needle;
    } bad[] = {
        {{.metric = {.kind = QKV_METRIC_KL}}, p.clean, n, QKV_ERR_INVALID, "the clean and corrupt runs give the same metric"},
        {{.metric = ld}, p.clean, n, QKV_ERR_INVALID, "the clean and corrupt runs give the same metric"},
        {{.metric = {.kind = QKV_METRIC_LOGIT_DIFF, .answer = 5, .wrong = 5}}, p.corrupt, n, QKV_ERR_INVALID,
         "two different ids"},
        {{.metric = {.kind = QKV_METRIC_LOGIT_DIFF, .answer = 5, .wrong = p.V}}, p.corrupt, n, QKV_ERR_INVALID,
         "two different ids"},
        {{.metric = {.kind = (qkv_metric_kind)7}}, p.corrupt, n, QKV_ERR_INVALID, "unknown metric 7"},
        {{.max_bytes = -1}, p.corrupt, n, QKV_ERR_INVALID, "max_bytes -1"},
        {{.max_bytes = 0}, p.corrupt, 0, QKV_ERR_INVALID, "0 tokens outside [1, 64]"},
        {{.max_bytes = 0}, p.corrupt, 65, QKV_ERR_INVALID, "65 tokens outside [1, 64]"},
    };
    out = (qkv_patch_out){.recovery[QKV_SWEEP_RESID_PRE] = rows};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (qkv_error){0};
        const qkv_status st = qkv_patch(&out, &sum, p.m, p.clean, bad[i].corrupt, bad[i].n, &bad[i].pp, &err);
        CHECK(st == bad[i].st && strstr(err.msg, bad[i].needle), "case %zu: status %d '%s', want '%s'", i, (int)st,
              err.msg, bad[i].needle);
        CHECK(qkv_model_pos(p.m) == 0, "case %zu left the cache at %d", i, qkv_model_pos(p.m));
    }
    int32_t outside[MAX_TOK];
    memcpy(outside, p.corrupt, sizeof outside);
    outside[3] = p.V;
    CHECK(qkv_patch(&out, &sum, p.m, p.clean, outside, n, NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "token id"),
          "a token outside the vocabulary: %s", err.msg);
    CHECK(qkv_patch(NULL, &sum, p.m, p.clean, p.corrupt, n, NULL, &err) == QKV_ERR_INVALID &&
              qkv_patch(&out, NULL, p.m, p.clean, p.corrupt, n, NULL, &err) == QKV_ERR_INVALID,
          "NULL out or summary");

    /* progress counts the patched runs; a nonzero return cancels with the cache empty */
    progress_log g = {0};
    out = (qkv_patch_out){.recovery[QKV_SWEEP_HEAD_OUT] = heads};
    pp = (qkv_patch_params){.progress = log_progress, .progress_user = &g};
    CHECK(qkv_patch(&out, &sum, p.m, p.clean, p.corrupt, n, &pp, &err) == QKV_OK, "%s", err.msg);
    CHECK(g.calls == L * p.Hq && g.last_done == L * p.Hq && g.last_total == L * p.Hq && sum.n_components == L * p.Hq,
          "progress: %d calls, last %lld of %lld", g.calls, (long long)g.last_done, (long long)g.last_total);
    g = (progress_log){.stop_at = 5};
    CHECK(qkv_patch(&out, &sum, p.m, p.clean, p.corrupt, n, &pp, &err) == QKV_ERR_CANCELLED &&
              strstr(err.msg, "after 5 of 270 components") && qkv_model_pos(p.m) == 0,
          "cancelled: %s, cache at %d", err.msg, qkv_model_pos(p.m));
    free(heads);
    free(rows);
    qkv_model_close(p.m);
}
