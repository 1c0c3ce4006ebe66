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

double probe_patch_metric_ids(const qkv_metric *mt, const float *clean, const float *logits, int V) {
    if (mt->kind == QKV_METRIC_KL) return qkv_kl_logits(clean, logits, V);
    return (double)logits[0] - (double)logits[1];
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
                           qkv_hook_point point, int layer, int head, int pos, const float *src, const int32_t *ids,
                           int n_ids, qkv_error *err) {
    patch_rows rows = rows_of(qkv_model_get_config(m), point, head, pos, src);
    const qkv_hook hook = {.point = point, .layer = layer, .fn = patch_hook, .user = &rows};
    const qkv_forward_opts o = {.hooks = &hook, .n_hooks = 1, .start_layer = start_resid ? layer : 0,
                                .start_resid = start_resid, .logit_ids = ids, .n_logit_ids = n_ids};
    qkv_status st = qkv_model_rewind(m, 0, err);
    if (!st) st = qkv_model_forward(m, logits, tokens, n, 0, &o, err);
    qkv_model_rewind(m, 0, NULL); /* a whole run (start_resid NULL) filled the cache */
    return st;
}

/* ----------------------------------------------------------------- sweeps */

/* Each sweep: its name, the point it patches, per head and/or per position
 * (components in the order layer, head, position), and the cache that holds
 * both runs' activations there. */
enum { CACHE_Z, CACHE_RESID_PRE, CACHE_ATTN_OUT, CACHE_MLP_OUT, N_CACHES };
static const qkv_hook_point cached_points[N_CACHES] = {QKV_HOOK_Z, QKV_HOOK_RESID_PRE, QKV_HOOK_ATTN_OUT,
                                                       QKV_HOOK_MLP_OUT};
static const struct {
    const char *name;
    int cache, per_head, per_pos;
} SWEEPS[QKV_SWEEP_COUNT] = {
    [QKV_SWEEP_HEAD_OUT] = {"head_out", CACHE_Z, 1, 0},
    [QKV_SWEEP_HEAD_OUT_POS] = {"head_out_pos", CACHE_Z, 1, 1},
    [QKV_SWEEP_RESID_PRE] = {"resid_pre", CACHE_RESID_PRE, 0, 1},
    [QKV_SWEEP_ATTN_OUT] = {"attn_out", CACHE_ATTN_OUT, 0, 1},
    [QKV_SWEEP_MLP_OUT] = {"mlp_out", CACHE_MLP_OUT, 0, 1},
};

const char *qkv_sweep_name(qkv_sweep s) { return (unsigned)s < QKV_SWEEP_COUNT ? SWEEPS[s].name : NULL; }

qkv_hook_point qkv_sweep_point(qkv_sweep s) {
    return (unsigned)s < QKV_SWEEP_COUNT ? cached_points[SWEEPS[s].cache] : QKV_HOOK_COUNT;
}

int qkv_sweep_shape(int64_t shape[3], qkv_sweep s, int n_layer, int n_head, int n) {
    if ((unsigned)s >= QKV_SWEEP_COUNT) return 0;
    const int both = SWEEPS[s].per_head && SWEEPS[s].per_pos;
    shape[0] = n_layer, shape[1] = SWEEPS[s].per_head ? n_head : n, shape[2] = both ? n : 1;
    return both ? 3 : 2;
}

/* Floats of each run's cache (CACHE_*): hook_z [L, n, Hq D] for the head
 * sweeps, [L, n, E] for each of the others; the corrupted run keeps
 * resid_pre always (the checkpoints). */
static void cache_floats(size_t floats[2][N_CACHES], const qkv_model_config *c, int n, const qkv_patch_out *out) {
    memset(floats, 0, 2 * sizeof floats[0]);
    floats[1][CACHE_RESID_PRE] = (size_t)c->n_layer * n * c->n_embd;
    for (int s = 0; s < QKV_SWEEP_COUNT; s++)
        if (out->recovery[s]) {
            const int k = SWEEPS[s].cache;
            floats[0][k] = floats[1][k] = (size_t)c->n_layer * n * (k == CACHE_Z ? c->n_head * c->head_dim : c->n_embd);
        }
}

int64_t qkv_patch_bytes(const qkv_model *m, int n, const qkv_patch_out *which) {
    if (!m || n < 1) return -1;
    const qkv_model_config *c = qkv_model_get_config(m);
    const qkv_patch_out none = {0};
    size_t floats[2][N_CACHES], total = 3 * (size_t)c->n_vocab; /* the clean, corrupted and patched logits */
    cache_floats(floats, c, n, which ? which : &none);
    for (int i = 0; i < 2 * N_CACHES; i++) total += floats[i / N_CACHES][i % N_CACHES];
    return (int64_t)(total * sizeof(float));
}

static qkv_status check_args(const qkv_patch_summary *sum, const qkv_model *m, const int32_t *clean,
                             const int32_t *corrupt, int n, const qkv_patch_params *p, const qkv_patch_out *out,
                             qkv_error *err) {
    if (!out || !sum || !m || !clean || !corrupt) return util_fail(err, QKV_ERR_INVALID, "patch: a NULL argument");
    const int V = qkv_model_get_config(m)->n_vocab;
    if (n < 1 || n > qkv_model_n_ctx(m))
        return util_fail(err, QKV_ERR_INVALID, "patch: %d tokens outside [1, %d]", n, qkv_model_n_ctx(m));
    const qkv_metric *mt = &p->metric;
    if (mt->kind != QKV_METRIC_KL && mt->kind != QKV_METRIC_LOGIT_DIFF)
        return util_fail(err, QKV_ERR_INVALID, "patch: unknown metric %d", (int)mt->kind);
    if (mt->kind == QKV_METRIC_LOGIT_DIFF &&
        (mt->answer < 0 || mt->answer >= V || mt->wrong < 0 || mt->wrong >= V || mt->answer == mt->wrong))
        return util_fail(err, QKV_ERR_INVALID,
                        "patch: logit difference of answer %d and wrong %d: two different ids in [0, %d)", mt->answer,
                        mt->wrong, V);
    if (p->max_bytes < 0) return util_fail(err, QKV_ERR_INVALID, "patch: max_bytes %lld < 0", (long long)p->max_bytes);
    const int64_t limit = p->max_bytes ? p->max_bytes : QKV_PATCH_DEFAULT_MAX_BYTES, need = qkv_patch_bytes(m, n, out);
    if (need > limit)
        return util_fail(err, QKV_ERR_TOO_LARGE,
                        "patch: the sweeps would cache %lld bytes of activations for %d tokens, more than the limit of "
                        "%lld bytes",
                        (long long)need, n, (long long)limit);
    return QKV_OK;
}

/* tokens [n] from position 0, the last logits [V], each non-NULL cache [L,
 * n, width] of cached_points filled; the cache left empty. */
static qkv_status run_caching(qkv_model *m, float *logits, const int32_t *tokens, int n, float *const cache[N_CACHES],
                              qkv_error *err) {
    const qkv_model_config *c = qkv_model_get_config(m);
    probe_layer_store stores[N_CACHES];
    qkv_hook hooks[N_CACHES];
    int n_hooks = 0;
    for (int i = 0; i < N_CACHES; i++) {
        if (!cache[i]) continue;
        stores[i] = (probe_layer_store){cache[i], (size_t)n * (i == CACHE_Z ? c->n_head * c->head_dim : c->n_embd), 0};
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
    size_t floats[2][N_CACHES];
    float *caches[2][N_CACHES] = {{0}};
    cache_floats(floats, c, n, out);
    int short_of_memory = 0;
    for (int i = 0; i < 2 * N_CACHES; i++) {
        const size_t k = floats[i / N_CACHES][i % N_CACHES];
        if (k && !(caches[i / N_CACHES][i % N_CACHES] = malloc(k * sizeof(float)))) short_of_memory = 1;
    }
    float *clean_logits = malloc((size_t)V * sizeof(float)), *corrupt_logits = malloc((size_t)V * sizeof(float)),
          *logits = malloc((size_t)V * sizeof(float));
    if (short_of_memory || !clean_logits || !corrupt_logits || !logits) {
        st = util_fail(err, QKV_ERR_NOMEM, "patch: out of memory for %lld bytes of caches",
                      (long long)qkv_patch_bytes(m, n, out));
        goto done;
    }
    if ((st = run_caching(m, clean_logits, clean, n, caches[0], err)) ||
        (st = run_caching(m, corrupt_logits, corrupt, n, caches[1], err)))
        goto done;
    const float *checkpoints = caches[1][CACHE_RESID_PRE]; /* [L, n, E] the residual entering each layer, corrupted */

    const qkv_metric *mt = &p->metric;
    /* a logit difference reads two logits: the patched runs compute only those rows */
    const int32_t pair_ids[2] = {mt->answer, mt->wrong};
    const int n_ids = mt->kind == QKV_METRIC_LOGIT_DIFF ? 2 : 0;
    *sum = (qkv_patch_summary){.clean = probe_patch_metric(mt, clean_logits, clean_logits, V),
                               .corrupt = probe_patch_metric(mt, clean_logits, corrupt_logits, V),
                               .layer_token_steps = 2 * (int64_t)L * n};
    if (sum->clean == sum->corrupt) {
        st = util_fail(err, QKV_ERR_INVALID,
                      "patch: the clean and corrupt runs give the same metric (%g): recovery is undefined", sum->clean);
        goto done;
    }
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        int64_t shape[3];
        qkv_sweep_shape(shape, (qkv_sweep)s, L, Hq, n);
        if (out->recovery[s]) sum->n_components += shape[0] * shape[1] * shape[2];
    }
    sum->naive_layer_token_steps = (2 + sum->n_components) * L * n;

    /* every component: one forward resumed at its layer, unless it would
     * copy in what is there already (then it is the corrupted run: 0) */
    int64_t done_runs = 0;
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        float *rec = out->recovery[s];
        if (!rec) continue;
        const int k = SWEEPS[s].cache, per_head = SWEEPS[s].per_head, per_pos = SWEEPS[s].per_pos;
        const qkv_hook_point point = cached_points[k];
        const size_t per_layer = k == CACHE_Z ? (size_t)n * Hq * c->head_dim : nE;
        size_t i = 0;
        for (int l = 0; l < L; l++)
            for (int h = per_head ? 0 : -1; h < (per_head ? Hq : 0); h++)
                for (int pos = per_pos ? 0 : -1; pos < (per_pos ? n : 0); pos++) {
                    const float *src = caches[0][k] + (size_t)l * per_layer;
                    const patch_rows rows = rows_of(c, point, h, pos, src);
                    if (same_rows(caches[1][k] + (size_t)l * per_layer, &rows, n)) {
                        rec[i++] = 0;
                        sum->n_unchanged++;
                    } else {
                        if ((st = probe_patch_run(logits, m, corrupt, n, checkpoints + (size_t)l * nE, point, l, h, pos,
                                                  src, n_ids ? pair_ids : NULL, n_ids, err)))
                            goto done;
                        rec[i++] = (float)probe_patch_recovery(probe_patch_metric_ids(mt, clean_logits, logits, V),
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
    for (int i = 0; i < 2 * N_CACHES; i++) free(caches[i / N_CACHES][i % N_CACHES]);
    free(clean_logits);
    free(corrupt_logits);
    free(logits);
    return st;
}
