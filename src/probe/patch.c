/*
 * patch.c — activation patching (qkv/probe.h, "probe: patch"): the clean and the
 * corrupted run cache the activations the sweeps patch (the corrupted
 * run's hook_resid_pre of every layer doubling as the checkpoints), then
 * each component is one forward resumed at its layer from its checkpoint
 * with a hook that copies the clean rows in, scored at the last position; a
 * component whose clean rows equal the corrupted run's is that run itself
 * and is not run again. It never reruns the layers below the patched one and
 * never computes more than the last position's logits; it does not render,
 * rank or print anything.
 */
#include "qkv/probe.h"
#include "probe/internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- metric */

double probe_patch_metric(const qkv_metric *mt, const float *clean, const float *logits, int V) {
    if (mt->kind == QKV_METRIC_KL) return qkv_kl_logits(clean, logits, V);
    return (double)logits[mt->answer] - (double)logits[mt->wrong];
}

double probe_patch_recovery(double patched, double clean, double corrupt) {
    return (patched - corrupt) / (clean - corrupt);
}

/* ------------------------------------------------------------ one patch */

/* The rows a patch copies in at its point: row pos (-1: every row), columns
 * col0 .. col0 + n_cols - 1 of each (one head's of hook_z, or all). */
typedef struct {
    const float *src;   /* [n, width] */
    int width, pos, col0, n_cols;
} patch_rows;

static patch_rows rows_of(const qkv_model_config *c, qkv_hook_point point, int head, int pos, const float *src) {
    const int D = c->head_dim, width = point == QKV_HOOK_Z ? c->n_head * D : c->n_embd;
    return (patch_rows){.src = src, .width = width, .pos = pos, .col0 = head >= 0 ? head * D : 0,
                        .n_cols = head >= 0 ? D : width};
}

/* dst's rows and columns r selects <- src's (both [n, r->width]) */
static void copy_rows(float *dst, const patch_rows *r, int n) {
    const int first = r->pos < 0 ? 0 : r->pos, end = r->pos < 0 ? n : r->pos + 1;
    for (int t = first; t < end; t++)
        memcpy(dst + (size_t)t * r->width + r->col0, r->src + (size_t)t * r->width + r->col0,
               (size_t)r->n_cols * sizeof(float));
}

/* 1 if the rows and columns r selects are the same in a and r->src, bit for bit */
static int same_rows(const float *a, const patch_rows *r, int n) {
    const int first = r->pos < 0 ? 0 : r->pos, end = r->pos < 0 ? n : r->pos + 1;
    for (int t = first; t < end; t++)
        if (memcmp(a + (size_t)t * r->width + r->col0, r->src + (size_t)t * r->width + r->col0,
                   (size_t)r->n_cols * sizeof(float)))
            return 0;
    return 1;
}

static qkv_status patch_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    copy_rows(a->data, user, (int)a->shape[0]);
    return QKV_OK;
}

qkv_status probe_patch_run(float *logits, qkv_model *m, const int32_t *tokens, int n, const float *start_resid,
                           qkv_hook_point point, int layer, int head, int pos, const float *src, qkv_error *err) {
    patch_rows rows = rows_of(qkv_model_get_config(m), point, head, pos, src);
    const qkv_hook hook = {.point = point, .layer = layer, .fn = patch_hook, .user = &rows};
    const qkv_forward_opts o = {.hooks = &hook, .n_hooks = 1, .start_layer = start_resid ? layer : 0,
                                .start_resid = start_resid};
    qkv_status st = qkv_model_rewind(m, 0, err);
    if (!st) st = qkv_model_forward(m, logits, tokens, n, 0, &o, err);
    qkv_model_rewind(m, 0, NULL); /* a whole run (start_resid NULL) filled the cache */
    return st;
}

/* ----------------------------------------------------------------- sweeps */

/* One sweep: a point, patched per head and/or per position, with the two
 * runs' activations there, and its output, in the order (layer, head,
 * position). */
typedef struct {
    float *out;
    qkv_hook_point point;
    int per_head, per_pos;
    const float *clean, *corrupt; /* [L, n, width] the two runs' activation at point */
} sweep;

enum { N_SWEEPS = 5 };

/* The sweeps of out, in qkv_patch_out's order; caches: [2][4] the clean and
 * the corrupted run's hook_z, hook_resid_pre, hook_attn_out, hook_mlp_out
 * (NULL where not needed). */
static void list_sweeps(sweep *s, const qkv_patch_out *out, float *caches[2][4]) {
    s[0] = (sweep){out->head_out, QKV_HOOK_Z, 1, 0, caches[0][0], caches[1][0]};
    s[1] = (sweep){out->head_out_pos, QKV_HOOK_Z, 1, 1, caches[0][0], caches[1][0]};
    s[2] = (sweep){out->resid_pre, QKV_HOOK_RESID_PRE, 0, 1, caches[0][1], caches[1][1]};
    s[3] = (sweep){out->attn_out, QKV_HOOK_ATTN_OUT, 0, 1, caches[0][2], caches[1][2]};
    s[4] = (sweep){out->mlp_out, QKV_HOOK_MLP_OUT, 0, 1, caches[0][3], caches[1][3]};
}

/* Floats of each run's cache at hook_z, resid_pre, attn_out, mlp_out:
 * hook_z [L, n, Hq D] for the head sweeps, [L, n, E] for each of the
 * others; the corrupted run keeps resid_pre always (the checkpoints). */
static void cache_floats(size_t floats[2][4], const qkv_model_config *c, int n, const qkv_patch_out *out) {
    const size_t LnE = (size_t)c->n_layer * n * c->n_embd;
    for (int run = 0; run < 2; run++) {
        floats[run][0] = out->head_out || out->head_out_pos ? (size_t)c->n_layer * n * c->n_head * c->head_dim : 0;
        floats[run][1] = out->resid_pre || run == 1 ? LnE : 0;
        floats[run][2] = out->attn_out ? LnE : 0;
        floats[run][3] = out->mlp_out ? LnE : 0;
    }
}

int64_t qkv_patch_bytes(const qkv_model *m, int n, const qkv_patch_out *which) {
    if (!m || n < 1) return -1;
    const qkv_model_config *c = qkv_model_get_config(m);
    const qkv_patch_out none = {0};
    size_t floats[2][4], total = 3 * (size_t)c->n_vocab; /* the clean, corrupted and patched logits */
    cache_floats(floats, c, n, which ? which : &none);
    for (int i = 0; i < 8; i++) total += floats[i / 4][i % 4];
    return (int64_t)(total * sizeof(float));
}

static qkv_status check_args(const qkv_patch_summary *sum, const qkv_model *m, const int32_t *clean,
                             const int32_t *corrupt, int n, const qkv_patch_params *p, const qkv_patch_out *out,
                             qkv_error *err) {
    if (!out || !sum || !m || !clean || !corrupt) return qkv_fail(err, QKV_ERR_INVALID, "patch: a NULL argument");
    const int V = qkv_model_get_config(m)->n_vocab;
    if (n < 1 || n > qkv_model_n_ctx(m))
        return qkv_fail(err, QKV_ERR_INVALID, "patch: %d tokens outside [1, %d]", n, qkv_model_n_ctx(m));
    const qkv_metric *mt = &p->metric;
    if (mt->kind != QKV_METRIC_KL && mt->kind != QKV_METRIC_LOGIT_DIFF)
        return qkv_fail(err, QKV_ERR_INVALID, "patch: unknown metric %d", (int)mt->kind);
    if (mt->kind == QKV_METRIC_LOGIT_DIFF &&
        (mt->answer < 0 || mt->answer >= V || mt->wrong < 0 || mt->wrong >= V || mt->answer == mt->wrong))
        return qkv_fail(err, QKV_ERR_INVALID,
                        "patch: logit difference of answer %d and wrong %d: two different ids in [0, %d)", mt->answer,
                        mt->wrong, V);
    if (p->max_bytes < 0) return qkv_fail(err, QKV_ERR_INVALID, "patch: max_bytes %lld < 0", (long long)p->max_bytes);
    const int64_t limit = p->max_bytes ? p->max_bytes : QKV_PATCH_DEFAULT_MAX_BYTES, need = qkv_patch_bytes(m, n, out);
    if (need > limit)
        return qkv_fail(err, QKV_ERR_TOO_LARGE,
                        "patch: the sweeps would cache %lld bytes of activations for %d tokens, more than the limit of "
                        "%lld bytes",
                        (long long)need, n, (long long)limit);
    return QKV_OK;
}

static const qkv_hook_point cached_points[4] = {QKV_HOOK_Z, QKV_HOOK_RESID_PRE, QKV_HOOK_ATTN_OUT, QKV_HOOK_MLP_OUT};

/* tokens [n] from position 0, the last logits [V], each non-NULL cache [L,
 * n, width] of cached_points filled; the cache left empty. */
static qkv_status run_caching(qkv_model *m, float *logits, const int32_t *tokens, int n, float *const cache[4],
                              qkv_error *err) {
    const qkv_model_config *c = qkv_model_get_config(m);
    probe_layer_store stores[4];
    qkv_hook hooks[4];
    int n_hooks = 0;
    for (int i = 0; i < 4; i++) {
        if (!cache[i]) continue;
        stores[i] = (probe_layer_store){cache[i], (size_t)n * (i == 0 ? c->n_head * c->head_dim : c->n_embd)};
        hooks[n_hooks++] = (qkv_hook){.point = cached_points[i], .layer = QKV_ALL, .fn = probe_store_hook, .user = &stores[i]};
    }
    qkv_status st = qkv_model_rewind(m, 0, err);
    if (!st) st = qkv_model_forward(m, logits, tokens, n, 0, &(qkv_forward_opts){.hooks = hooks, .n_hooks = n_hooks}, err);
    qkv_model_rewind(m, 0, NULL);
    return st;
}

qkv_status qkv_patch(qkv_patch_out *out, qkv_patch_summary *sum, qkv_model *m, const int32_t *clean,
                     const int32_t *corrupt, int n, const qkv_patch_params *p, qkv_error *err) {
    const qkv_patch_params defaults = {.metric = {.kind = QKV_METRIC_KL}};
    if (!p) p = &defaults;
    qkv_status st = check_args(sum, m, clean, corrupt, n, p, out, err);
    if (st) return st;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, Hq = c->n_head, V = c->n_vocab;
    const size_t nE = (size_t)n * c->n_embd;
    size_t floats[2][4];
    float *caches[2][4] = {{0}};
    cache_floats(floats, c, n, out);
    int short_of_memory = 0;
    for (int i = 0; i < 8; i++)
        if (floats[i / 4][i % 4] && !(caches[i / 4][i % 4] = malloc(floats[i / 4][i % 4] * sizeof(float))))
            short_of_memory = 1;
    float *clean_logits = malloc((size_t)V * sizeof(float)), *corrupt_logits = malloc((size_t)V * sizeof(float)),
          *logits = malloc((size_t)V * sizeof(float));
    if (short_of_memory || !clean_logits || !corrupt_logits || !logits) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "patch: out of memory for %lld bytes of caches",
                      (long long)qkv_patch_bytes(m, n, out));
        goto done;
    }
    if ((st = run_caching(m, clean_logits, clean, n, caches[0], err)) ||
        (st = run_caching(m, corrupt_logits, corrupt, n, caches[1], err)))
        goto done;
    const float *checkpoints = caches[1][1]; /* [L, n, E] the residual entering each layer, corrupted */

    const qkv_metric *mt = &p->metric;
    *sum = (qkv_patch_summary){.clean = probe_patch_metric(mt, clean_logits, clean_logits, V),
                               .corrupt = probe_patch_metric(mt, clean_logits, corrupt_logits, V),
                               .layer_token_steps = 2 * (int64_t)L * n};
    if (sum->clean == sum->corrupt) {
        st = qkv_fail(err, QKV_ERR_INVALID,
                      "patch: the clean and corrupt runs give the same metric (%g): recovery is undefined", sum->clean);
        goto done;
    }
    sweep sweeps[N_SWEEPS];
    list_sweeps(sweeps, out, caches);
    for (int s = 0; s < N_SWEEPS; s++)
        if (sweeps[s].out)
            sum->n_components += (int64_t)L * (sweeps[s].per_head ? Hq : 1) * (sweeps[s].per_pos ? n : 1);
    sum->naive_layer_token_steps = (2 + sum->n_components) * L * n;

    /* every component: one forward resumed at its layer, unless it would
     * copy in what is there already (then it is the corrupted run: 0) */
    int64_t done_runs = 0;
    for (int s = 0; s < N_SWEEPS; s++) {
        const sweep *w = &sweeps[s];
        if (!w->out) continue;
        const size_t per_layer = w->point == QKV_HOOK_Z ? (size_t)n * Hq * c->head_dim : nE;
        size_t i = 0;
        for (int l = 0; l < L; l++)
            for (int h = w->per_head ? 0 : -1; h < (w->per_head ? Hq : 0); h++)
                for (int pos = w->per_pos ? 0 : -1; pos < (w->per_pos ? n : 0); pos++) {
                    const float *src = w->clean + (size_t)l * per_layer;
                    const patch_rows rows = rows_of(c, w->point, h, pos, src);
                    if (same_rows(w->corrupt + (size_t)l * per_layer, &rows, n)) {
                        w->out[i++] = 0;
                        sum->n_unchanged++;
                    } else {
                        if ((st = probe_patch_run(logits, m, corrupt, n, checkpoints + (size_t)l * nE, w->point, l, h,
                                                  pos, src, err)))
                            goto done;
                        w->out[i++] = (float)probe_patch_recovery(probe_patch_metric(mt, clean_logits, logits, V),
                                                                  sum->clean, sum->corrupt);
                        sum->layer_token_steps += (int64_t)(L - l) * n;
                    }
                    if ((st = probe_progress(p->progress, p->progress_user, ++done_runs, sum->n_components, "patch",
                                             "components", err)))
                        goto done;
                }
    }
done:
    qkv_model_rewind(m, 0, NULL);
    for (int i = 0; i < 8; i++) free(caches[i / 4][i % 4]);
    free(clean_logits);
    free(corrupt_logits);
    free(logits);
    return st;
}
