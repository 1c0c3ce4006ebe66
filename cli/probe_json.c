/* probe_json.c — the JSON of `qkv lens` and `qkv patch` (probe_json.h). */
#include "probe_json.h"
#include "json_out.h"

const char *const cli_metric_names[] = {"kl", "logit-diff", NULL}; /* qkv_metric_kind order */

static void put_id(FILE *f, int64_t i, const void *ids) { fprintf(f, "%d", ((const int32_t *)ids)[i]); }
static void put_label(FILE *f, int64_t i, const void *labels) { cli_json_string(f, ((char *const *)labels)[i]); }

void cli_lens_json_write(FILE *f, const cli_lens_json *j) {
    const int64_t lnk[3] = {j->n_layer, j->tokens->n, j->k};
    fputs("{\n  \"model\": ", f);
    cli_json_string(f, j->model);
    fprintf(f, ",\n  \"n_tokens\": %d,\n  \"n_layer\": %d,\n  \"k\": %d,\n", j->n_tokens, j->n_layer, j->k);
    if (j->pos0 || j->tokens->n != j->n_tokens)
        fprintf(f, "  \"pos0\": %d,\n  \"pos1\": %d,\n", j->pos0, j->pos0 + j->tokens->n);
    fputs("  \"tokens\": ", f);
    cli_json_prompt(f, j->tokens);
    fputs(",\n  \"target\": ", f);
    cli_json_token(f, j->target, j->target_label);
    fputs(",\n  \"top_ids\": ", f);
    cli_json_nested(f, 3, lnk, 2, put_id, j->top_ids);
    fputs(",\n  \"top_pieces\": ", f);
    cli_json_nested(f, 3, lnk, 2, put_label, j->top_labels);
    fputs(",\n  \"top_probs\": ", f);
    cli_json_floats(f, j->top_probs, 3, lnk, 2);
    fputs(",\n  \"target_prob\": ", f);
    cli_json_floats(f, j->target_prob, 2, lnk, 2);
    fputs("\n}\n", f);
}

void cli_patch_json_write(FILE *f, const cli_patch_json *j) {
    const int n = j->clean->n;
    const qkv_patch_summary *s = j->sum;
    fputs("{\n  \"model\": ", f);
    cli_json_string(f, j->model);
    fprintf(f, ",\n  \"metric\": \"%s\",\n  \"answer\": ", cli_metric_names[j->metric]);
    cli_json_token(f, j->answer, j->answer_label);
    fputs(",\n  \"wrong\": ", f);
    cli_json_token(f, j->wrong, j->wrong_label);
    fprintf(f, ",\n  \"n_tokens\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"clean_tokens\": ", n, j->n_layer, j->n_head);
    cli_json_prompt(f, j->clean);
    fputs(",\n  \"corrupt_tokens\": ", f);
    cli_json_prompt(f, j->corrupt);
    fputs(",\n  \"clean\": ", f);
    cli_json_double(f, s->clean);
    fputs(",\n  \"corrupt\": ", f);
    cli_json_double(f, s->corrupt);
    fputs(",\n", f);
    for (int w = 0; w < QKV_SWEEP_COUNT; w++) {
        int64_t shape[3];
        const int ndim = qkv_sweep_shape(shape, (qkv_sweep)w, j->n_layer, j->n_head, n);
        fprintf(f, "  \"%s\": ", qkv_sweep_name((qkv_sweep)w));
        if (j->out->recovery[w]) cli_json_floats(f, j->out->recovery[w], ndim, shape, 2);
        else fputs("null", f);
        fputs(",\n", f);
    }
    fprintf(f, "  \"cost\": {\"layer_token_steps\": %lld, \"naive_layer_token_steps\": %lld, \"n_components\": %lld}\n}\n",
            (long long)s->layer_token_steps, (long long)s->naive_layer_token_steps, (long long)s->n_components);
}
