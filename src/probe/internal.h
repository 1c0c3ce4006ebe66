/* internal.h — what the probes share inside src/probe. */
#ifndef QKV_PROBE_INTERNAL_H
#define QKV_PROBE_INTERNAL_H

#include "qkv/probe.h"

/* log sum_i exp(x[i]) in double, the max subtracted first.   x: [n], n >= 1 */
double probe_log_sum_exp(const float *x, int n);

/* The index of the largest x[i], the lowest on ties.   x: [n], n >= 1 */
int probe_argmax(const float *x, int n);

/* Tells a probe's progress callback (NULL: nothing) that done of total
 * units ("tokens", "patched runs") have run; QKV_ERR_CANCELLED, the message
 * naming the probe and the count, when it returns nonzero. */
qkv_status probe_progress(qkv_progress_fn fn, void *user, int64_t done, int64_t total, const char *probe,
                          const char *unit, qkv_error *err);

/* A hook that keeps one point's activation of every layer it is called in
 * (store.c): buf[layer] <- a->data + skip, per_layer floats each. */
typedef struct {
    float *buf;         /* [L, per_layer] */
    size_t per_layer;
    size_t skip;        /* floats of a->data before the kept ones (the lens's window: pos0 rows) */
} probe_layer_store;
qkv_status probe_store_hook(void *user, const qkv_activation *a, qkv_error *err);

/* ------------------------------------------------------ patch (patch.c) */

/* qkv_patch's metric M of a run's last logits: KL(clean || logits) or
 * logits[answer] - logits[wrong], in double.   clean, logits: [V] */
double probe_patch_metric(const qkv_metric *mt, const float *clean, const float *logits, int V);
/* The same from a patched run's logits as probe_patch_run computed them:
 * for a logit difference only [2] (answer's, wrong's), logits[0] - logits[1]. */
double probe_patch_metric_ids(const qkv_metric *mt, const float *clean, const float *logits, int V);
/* (patched - corrupt) / (clean - corrupt), the three M values. */
double probe_patch_recovery(double patched, double clean, double corrupt);

/* One patched run of tokens [n] from an empty cache (left empty): at
 * (point, layer), row pos (-1: every row) of src replaces the run's own,
 * only head `head`'s D columns for hook_z (-1: the whole row).
 *   start_resid: [n, E] the residual entering `layer` (the corrupted run's
 *                hook_resid_pre there): the call resumes there; NULL: a whole
 *                forward from the embedding (the naive way, tests compare)
 *   src:    [n, Hq*D] for hook_z, else [n, E]
 *   ids:    [n_ids] the vocabulary ids whose logits are wanted (NULL: all V)
 *   logits: the last position's, [V] or [n_ids] (qkv_forward_opts.logit_ids) */
qkv_status probe_patch_run(float *logits, qkv_model *m, const int32_t *tokens, int n, const float *start_resid,
                           qkv_hook_point point, int layer, int head, int pos, const float *src, const int32_t *ids,
                           int n_ids, qkv_error *err);

#endif
