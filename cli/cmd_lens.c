/*
 * cmd_lens.c — `qkv lens`: the logit lens. What the residual stream after
 * each layer (hook_resid_post) would predict if the model stopped there:
 * through the final norm, the unembedding and any final soft-cap, at every
 * position (qkv_lens, src/probe/lens.c): the top-k tokens and the
 * probability of one target token. The last layer's lens is the model's
 * own output. Prints the chosen positions as a table, or JSON; --html draws
 * the layer x position grid of top-1 pieces, coloured by probability.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "outputs.h"
#include "probe_json.h"
#include "util.h"
#include "commands.h"
#include "qkv_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cli_prompt_args pa;
    const char *model, *target, *html;
    cli_ints pos;
    int k, json, threads, ctx, verbose;
} lens_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(lens_args *a, int argc, char **argv) {
    *a = (lens_args){.model = CLI_DEFAULT_MODEL, .k = 5};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "-k", .kind = CLI_INT, .dest = &a->k, .lo = 1, .hi = 100, .metavar = "K",
         .help = "top tokens per layer and position (default 5)"},
        {.name = "--target", .kind = CLI_STRING, .dest = &a->target, .metavar = "TEXT",
         .help = "the token whose probability is followed, exactly one token\n(default: the model's top-1 at the last position)"},
        {.name = "--pos", .kind = CLI_INTS, .dest = &a->pos, .lo = -(1 << 24), .hi = 1 << 24, .metavar = "P,...",
         .help = "positions the table shows (default -1: the last; negative counts from the end)"},
        CLI_FLAG_JSON(&a->json, "every layer and position as JSON"),
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "a self-contained page: layer x position grid of top-1 tokens coloured by\n"
                 "probability, top-k on hover, and the target's probability"},
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_PROBE_CTX(&a->ctx),
        CLI_FLAG_VERBOSE(&a->verbose),
        {0},
    };
    const cli_command cmd = {
        .name = "lens", .usage = "[-m MODEL] (-p TEXT | -f FILE | --tokens IDS) [-k K] [--target TEXT] [flags]",
        .about = "The logit lens: the residual stream after each layer through the final norm and\n"
        "the unembedding, as if the model stopped there; top-k tokens and the target's\n"
        "probability at every layer and position. The last layer's is the model's output.",
        .notes = "JSON: {\"model\", \"n_tokens\", \"n_layer\", \"k\", \"tokens\" ([{\"id\", \"piece\"}]), \"target\"\n"
        "({\"id\", \"piece\"}), \"top_ids\", \"top_pieces\", \"top_probs\" [L][n][k], \"target_prob\" [L][n]}.",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed;
    if (cli_prompt_check(&a->pa)) return CLI_EXIT_BAD_INPUT;
    if (a->pa.text && !*a->pa.text) return cli_fail("-p: the text is empty");
    return 0;
}

/* What came back, with the labels of every top token. */
typedef struct {
    int n, nl, k;
    int32_t target;
    char *target_label;
    int32_t *top_ids;   /* [L, n, k] */
    float *top_probs;   /* [L, n, k] */
    float *target_prob; /* [L, n] */
    char **top_labels;  /* [L, n, k] */
} lens_result;

/* The model's top-1 at the last position (lowest id on ties): one forward
 * call, then the cache is emptied again; 0 or 2. */
static int own_top1(int32_t *out, qkv_model *m, const cli_prompt *pr) {
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) return cli_fail("out of memory");
    qkv_error err = {0};
    int rc = 0;
    if (qkv_model_forward(m, logits, pr->ids, pr->n, 0, NULL, &err) || qkv_model_rewind(m, 0, &err)) {
        rc = cli_fail("%s", err.msg);
    } else {
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        *out = best;
    }
    free(logits);
    return rc;
}

/* ----------------------------------------------------------------- output */

static void print_table(const lens_args *a, const lens_result *r, const cli_prompt *pr, const int *pos, int n_pos) {
    printf("qkv lens: %s, %d tokens, %d layers; target %s%s\n", cli_basename(a->model), r->n, r->nl, r->target_label,
           a->target ? "" : " (the model's top-1 at the last position)");
    printf("each layer's residual stream (hook_resid_post) through the final norm and the unembedding\n");
    for (int i = 0; i < n_pos; i++) {
        const int p = pos[i];
        printf("\nposition %d (%s): p(target) and the top %d per layer\n  layer  p(target)  top-%d\n", p, pr->labels[p],
               r->k, r->k);
        for (int l = 0; l < r->nl; l++) {
            printf("  %5d  %9.4f ", l, (double)r->target_prob[(size_t)l * r->n + p]);
            for (int j = 0; j < r->k; j++) {
                const size_t x = ((size_t)l * r->n + p) * r->k + j;
                printf(" %s %.3f", r->top_labels[x], (double)r->top_probs[x]);
            }
            printf("\n");
        }
    }
}

/* every layer and position as JSON (cli/probe_json.c: the writer GET .../lens shares) */
static void print_json(const lens_args *a, const lens_result *r, const cli_prompt *pr) {
    const cli_lens_json j = {.model = a->model, .n_tokens = pr->n, .tokens = pr, .n_layer = r->nl, .k = r->k, .target = r->target,
                             .target_label = r->target_label, .top_ids = r->top_ids, .top_labels = r->top_labels,
                             .top_probs = r->top_probs, .target_prob = r->target_prob};
    cli_lens_json_write(stdout, &j);
}

/* The grid: top-1 piece per layer and position, coloured by its probability,
 * the top-k and p(target) on hover; then p(target) alone. */
static int write_html(FILE *f, const lens_args *a, const lens_result *r, const cli_prompt *pr) {
    const int nl = r->nl, n = r->n, k = r->k;
    const size_t cells = (size_t)nl * n;
    char **rows = cli_index_labels(nl, "layer ", NULL), **cols = cli_index_labels(n, NULL, pr->labels);
    float *top1 = malloc(cells * sizeof(float));
    const char **text = malloc(cells * sizeof(char *));
    char **hover = calloc(cells, sizeof(char *));
    int rc = !rows || !cols ? CLI_EXIT_BAD_INPUT : !top1 || !text || !hover ? cli_fail("out of memory") : 0;
    for (size_t c = 0; !rc && c < cells; c++) {
        top1[c] = r->top_probs[c * k];
        text[c] = r->top_labels[c * k];
        size_t len = 0;
        FILE *hf = open_memstream(&hover[c], &len);
        if (!hf) {
            rc = cli_fail("out of memory");
            break;
        }
        fprintf(hf, "p(%s) = %.4f; top %d:", r->target_label, (double)r->target_prob[c], k);
        for (int j = 0; j < k; j++) fprintf(hf, "%s %s %.4f", j ? "," : "", r->top_labels[c * k + j], (double)r->top_probs[c * k + j]);
        if (fclose(hf)) rc = cli_fail("out of memory");
    }
    if (!rc) {
        char title[512], intro[1024], cap[256];
        snprintf(title, sizeof title, "qkv lens: %s, %d tokens", cli_basename(a->model), n);
        snprintf(intro, sizeof intro,
                 "The residual stream after each layer (rows) at each position (columns) through the final norm and "
                 "the unembedding, as if the model stopped there. The last layer's row is the model's own output. "
                 "Hover a cell for its top %d.\ntarget: %s%s",
                 k, r->target_label, a->target ? "" : " (the model's top-1 at the last position)");
        snprintf(cap, sizeof cap, "p(%s) at each layer and position; colour scaled to the largest", r->target_label);
        const qkv_heatmap maps[2] = {
            {.title = "top-1 token", .caption = "each cell's most likely next token, coloured by its probability (white 0, blue 1)",
             .rows = nl, .cols = n, .row_labels = (const char *const *)rows, .col_labels = (const char *const *)cols,
             .values = top1, .text = text, .hover = (const char *const *)hover, .vmax = 1},
            {.title = "probability of the target", .caption = cap, .rows = nl, .cols = n,
             .row_labels = (const char *const *)rows, .col_labels = (const char *const *)cols,
             .values = r->target_prob, .hover = (const char *const *)hover},
        };
        qkv_error err = {0};
        if (qkv_heatmap_page(f, title, intro, maps, 2, &err)) rc = cli_fail("--html: %s", err.msg);
    }
    cli_labels_free(hover, hover ? (int64_t)cells : 0);
    cli_labels_free(rows, nl);
    cli_labels_free(cols, n);
    free(top1);
    free(text);
    return rc;
}

/* ------------------------------------------------------------------- main */

int cmd_lens(int argc, char **argv) {
    lens_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) {
        cli_ints_free(&a.pos);
        return rc < 0 ? 0 : rc;
    }
    FILE *html = NULL;
    if (a.html && !(html = cli_output_stream(a.html))) {
        cli_ints_free(&a.pos);
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    }
    cli_session ss;
    lens_result r = {.k = a.k, .target = -1};
    int last = -1, *pos = a.pos.n ? a.pos.v : &last, n_pos = a.pos.n ? a.pos.n : 1;
    size_t cells = 0; /* L x n */
    if ((rc = cli_session_open(&ss, a.model, &a.pa, a.ctx, a.threads)) ||
        (a.target && (rc = cli_one_token(&r.target, "--target", a.target, ss.tok, 0))))
        goto done;
    r.n = ss.pr.n;
    for (int i = 0; i < n_pos; i++) {
        if (pos[i] < -r.n || pos[i] >= r.n) {
            rc = cli_fail("--pos %d: the prompt has positions 0..%d (or -1..-%d from the end)", pos[i], r.n - 1, r.n);
            goto done;
        }
        if (pos[i] < 0) pos[i] += r.n;
    }
    r.nl = qkv_model_get_config(ss.model)->n_layer;
    cells = (size_t)r.nl * r.n;
    r.top_ids = malloc(cells * r.k * sizeof(int32_t));
    r.top_probs = malloc(cells * r.k * sizeof(float));
    r.target_prob = malloc(cells * sizeof(float));
    r.top_labels = calloc(cells * r.k, sizeof(char *));
    if (!r.top_ids || !r.top_probs || !r.target_prob || !r.top_labels) {
        rc = cli_fail("out of memory");
        goto done;
    }
    const double t0 = cli_now_s();
    if (r.target < 0 && (rc = own_top1(&r.target, ss.model, &ss.pr))) goto done;
    qkv_lens_out out = {.top_ids = r.top_ids, .top_probs = r.top_probs, .target_prob = r.target_prob};
    const qkv_lens_params lp = {.k = r.k, .target = r.target};
    qkv_error err = {0};
    if (qkv_lens(&out, ss.model, ss.pr.ids, r.n, &lp, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    const double t1 = cli_now_s();
    if (!(r.target_label = cli_token_label(ss.tok, r.target))) rc = cli_fail("out of memory");
    for (size_t i = 0; !rc && i < cells * r.k; i++)
        if (!(r.top_labels[i] = cli_token_label(ss.tok, r.top_ids[i]))) rc = cli_fail("out of memory");
    /* the page is on disk before anything goes to stdout */
    if (rc || (html && (rc = write_html(html, &a, &r, &ss.pr))) || (rc = cli_outputs_commit())) goto done;
    if (a.json) print_json(&a, &r, &ss.pr);
    else print_table(&a, &r, &ss.pr, pos, n_pos);
    if (a.html) fprintf(a.json ? stderr : stdout, "wrote %s\n", a.html);
    if (a.verbose) fprintf(stderr, "qkv lens: %d tokens, %.2f s, peak RSS %.1f MiB\n", r.n, t1 - t0, cli_peak_rss_mib());
done:
    cli_labels_free(r.top_labels, r.top_labels ? (int64_t)(cells * r.k) : 0);
    free(r.top_ids);
    free(r.top_probs);
    free(r.target_prob);
    free(r.target_label);
    cli_ints_free(&a.pos);
    cli_session_close(&ss);
    return cli_outputs_finish(rc);
}
