/*
 * probe_json.h — the JSON of `qkv lens --json` and `qkv patch --json`, one
 * writer each (cli/probe_json.c), shared with `qkv serve`'s GET .../lens and
 * POST .../patch so that both print the same bytes for the same result.
 */
#ifndef QKV_CLI_PROBE_JSON_H
#define QKV_CLI_PROBE_JSON_H

#include "prompt.h"
#include "qkv/probe.h"

#include <stdint.h>
#include <stdio.h>

/* The metric names of `qkv patch --metric` and the API's "metric", in
 * qkv_metric_kind order, NULL-terminated (a flag's choices). */
extern const char *const cli_metric_names[];

/* A logit lens's result (qkv_lens) at w positions from pos0, and what labels it. */
typedef struct {
    const char *model;          /* the model's path as given */
    int n_tokens, pos0;         /* the whole prompt's tokens; the window's first position */
    const cli_prompt *tokens;   /* [w] the window's ids and labels (the whole prompt: w = n_tokens, pos0 = 0) */
    int n_layer, k;
    int32_t target;
    const char *target_label;
    const int32_t *top_ids;     /* [L, w, k] */
    char *const *top_labels;    /* [L, w, k] */
    const float *top_probs;     /* [L, w, k] */
    const float *target_prob;   /* [L, w] */
} cli_lens_json;

/* {"model", "n_tokens", "n_layer", "k", ["pos0", "pos1": a window only,]
 * "tokens" (the window's), "target", "top_ids", "top_pieces", "top_probs",
 * "target_prob"} and a newline. */
void cli_lens_json_write(FILE *f, const cli_lens_json *j);

/* A patching run's result (qkv_patch) and what labels it. */
typedef struct {
    const char *model;          /* the model's path as given */
    qkv_metric_kind metric;
    int32_t answer, wrong;      /* -1 for the kl metric */
    const char *answer_label, *wrong_label;
    int n_layer, n_head;
    const cli_prompt *clean, *corrupt; /* [n] each */
    const qkv_patch_summary *sum;
    const qkv_patch_out *out;   /* recovery [qkv_sweep_shape] per sweep, NULL where not swept */
} cli_patch_json;

/* {"model", "metric", "answer", "wrong", "n_tokens", "n_layer", "n_head",
 * "clean_tokens", "corrupt_tokens", "clean", "corrupt", one key per sweep
 * (null where not swept), "cost"} and a newline. */
void cli_patch_json_write(FILE *f, const cli_patch_json *j);

#endif /* QKV_CLI_PROBE_JSON_H */
