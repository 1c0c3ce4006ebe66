/*
 * cmd_ablate.c — `qkv ablate`: weight against influence. For every position
 * j of a prompt, key j is hidden through the engine's exclusion mask
 * (qkv_ablate_positions, src/probe/ablate.c) and the last position's
 * next-token distribution is compared with the full run's: KL in nats, the
 * target's probability, the new top token, beside the attention the last
 * row gave j. Then the Spearman correlation of attention and KL: a large
 * weight is not a large influence. --heads zero-ablates each (layer, head)
 * instead (qkv_ablate_heads). Prints a table or JSON, draws an SVG (and an
 * HTML page with the plot and the table).
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "progress.h"
#include "outputs.h"
#include "json_out.h"
#include "util.h"
#include "commands.h"
#include "qkv_render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const scopes[] = {"all", "last", NULL}; /* qkv_ablate_scope order */

static void json_target(const qkv_ablate_summary *s, const char *label) {
    printf("{\n  \"target\": {\"id\": %d, \"piece\": ", s->target);
    cli_json_string(stdout, label);
    printf(", \"p\": %.6g},\n", s->p_target);
}

static void json_scope_value(int v) {
    if (v < 0) printf("null");
    else printf("%d", v);
}

/* ------------------------------------------------------------- SVG plots */

/* What the plots and the page show. */
typedef struct {
    const char *title;
    const qkv_ablate_row *rows;         /* [n], or NULL under --heads */
    const qkv_ablate_effect *effects;   /* [nl, nh] under --heads */
    char **labels, **after;             /* [n] the tokens, the top token after hiding each */
    int n, nl, nh;
} report;

/* Attention (mean bars, max ticks) and KL per position, tokens below; 0 or 2. */
static int plot_positions(FILE *f, const report *r) {
    const int n = r->n;
    double *mean = calloc((size_t)n, sizeof(double)), *mx = calloc((size_t)n, sizeof(double)),
           *kl = calloc((size_t)n, sizeof(double));
    if (!mean || !mx || !kl) {
        free(mean), free(mx), free(kl);
        return cli_fail("out of memory");
    }
    for (int j = 0; j < n; j++)
        mean[j] = r->rows[j].attn_mean, mx[j] = r->rows[j].attn_max, kl[j] = r->rows[j].effect.kl;
    const int pw = n * 28 > 700 ? n * 28 : 700, ph = 160;
    const qkv_chart_box top = {.x = 70, .y = 70, .w = pw, .h = ph, .y_title = "attention weight",
                               .title = "attention of the last position, over the ablated layers and heads",
                               .legend_cols = 2},
                        bottom = {.x = 70, .y = top.y + ph + qkv_chart_below(&top, 2) + 30, .w = pw, .h = ph,
                                  .title = "KL(p_full || p_ablated) when the position is ablated",
                                  .y_title = "KL (nats)"};
    const qkv_chart_bar_set attn = {.v = mean, .marks = mx, .n = n, .colour = "#1f5fbf", .name = "mean",
                                    .marks_name = "max"},
                            loss = {.v = kl, .labels = (const char *const *)r->labels, .n = n, .colour = "#e8590c"};
    qkv_chart_begin(f, top.x + pw + 20, bottom.y + ph + 130, r->title);
    qkv_chart_bars(f, &top, &attn);
    qkv_chart_bars(f, &bottom, &loss);
    qkv_chart_end(f);
    free(mean), free(mx), free(kl);
    return 0;
}

/* The layer x head KL map: one cell per head, darker = larger KL (sqrt scale); 0 or 2. */
static int plot_heads(FILE *f, const report *r) {
    const int nl = r->nl, nh = r->nh;
    double *kl = malloc((size_t)nl * nh * sizeof *kl), mx = 0;
    char *text = malloc((size_t)(nl + nh) * 24);           /* [nl + nh][24]: "layer l", then "hN" */
    const char **names = malloc((size_t)(nl + nh) * sizeof *names);
    if (!kl || !text || !names) {
        free(kl), free(text), free(names);
        return cli_fail("out of memory");
    }
    for (int i = 0; i < nl + nh; i++) {
        names[i] = text + (size_t)i * 24;
        snprintf(text + (size_t)i * 24, 24, i < nl ? "layer %d" : "h%d", i < nl ? i : i - nl);
    }
    for (int i = 0; i < nl * nh; i++) kl[i] = r->effects[i].kl, mx = kl[i] > mx ? kl[i] : mx;
    char caption[128];
    snprintf(caption, sizeof caption, "KL(p_full || p_ablated) in nats when the head's output is zeroed; colour: "
             "sqrt(KL / %.3g)", mx);
    const qkv_chart_box box = {.x = 80, .y = 50, .w = nh * 56, .h = nl * 18, .x_title = "head", .caption = caption};
    const qkv_chart_grid grid = {.rows = nl, .cols = nh, .row_labels = names, .col_labels = names + nl, .values = kl,
                                 .scale = QKV_CHART_BLUES_SQRT};
    qkv_chart_begin(f, box.x + box.w + 40 > 640 ? box.x + box.w + 40 : 640, box.y + box.h + qkv_chart_below(&box, 0),
                    r->title);
    qkv_chart_cells(f, &box, &grid);
    qkv_chart_end(f);
    free(kl), free(text), free(names);
    return 0;
}

/* The plot alone (svg) or in a self-contained page with the table (html). */
static int write_output(FILE *f, const report *r, int html) {
    if (html) {
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>qkv ablate</title><style>body{font-family:"
              "sans-serif;margin:24px}h1{font-size:18px}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}"
              "td.t{text-align:left;font-family:monospace}span.b{display:inline-block;height:10px}</style></head>"
              "<body>\n<h1>",
              f);
        qkv_svg_text(f, r->title);
        fputs("</h1>\n", f);
    }
    int rc = r->rows ? plot_positions(f, r) : plot_heads(f, r);
    if (html && r->rows) {
        double kmax = 0;
        for (int j = 0; j < r->n; j++)
            if (r->rows[j].effect.kl > kmax) kmax = r->rows[j].effect.kl;
        fputs("<table>\n<tr><th>pos</th><th>token</th><th>attn mean</th><th>attn max</th><th>KL (nats)</th><th></th>"
              "<th>dp target</th><th>top after</th></tr>\n",
              f);
        for (int j = 0; j < r->n; j++) {
            const qkv_ablate_row *x = &r->rows[j];
            fprintf(f, "<tr><td>%d</td><td class=\"t\">", j);
            qkv_svg_text(f, r->labels[j]);
            fprintf(f, "</td><td>%.3f</td><td>%.3f</td><td>%.4f</td><td class=\"t\"><span class=\"b\" "
                       "style=\"width:%.0fpx;background:#e8590c\"></span></td><td>%+.4f</td><td class=\"t\">",
                    x->attn_mean, x->attn_max, x->effect.kl, kmax > 0 ? 200 * x->effect.kl / kmax : 0, x->effect.dp_target);
            qkv_svg_text(f, r->after[j]);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    if (html) fputs("</body></html>\n", f);
    return rc;
}

/* ---------------------------------------------------------------- output */

static void print_positions(const qkv_ablate_row *rows, const qkv_ablate_summary *s, char **labels, char **after,
                            int n) {
    int w = 5;
    for (int j = 0; j < n; j++)
        if (qkv_text_width(labels[j]) > w) w = qkv_text_width(labels[j]);
    printf("  pos  ");
    cli_put_cell("token", w, 0);
    printf("  attn mean  attn max         KL   dp target  top after\n");
    for (int j = 0; j < n; j++) {
        printf("%5d  ", j);
        cli_put_cell(labels[j], w, 0);
        printf("     %6.3f    %6.3f  %9.4f  %+10.4f  %s\n", rows[j].attn_mean, rows[j].attn_max, rows[j].effect.kl,
               rows[j].effect.dp_target, after[j]);
    }
    printf("\nSpearman rank correlation of attention (mean) and KL over the %d positions: %.3f\n", n,
           s->spearman_attn_kl);
}

static void json_positions(const qkv_ablate_row *rows, const qkv_ablate_summary *s, const char *target_label,
                           char **labels, char **after, int n, int scope, int layer, int head) {
    json_target(s, target_label);
    printf("  \"scope\": \"%s\",\n  \"layer\": ", scopes[scope]);
    json_scope_value(layer);
    printf(",\n  \"head\": ");
    json_scope_value(head);
    printf(",\n  \"positions\": [\n");
    for (int j = 0; j < n; j++) {
        printf("    {\"pos\": %d, \"piece\": ", j);
        cli_json_string(stdout, labels[j]);
        printf(", \"attn_mean\": %.6g, \"attn_max\": %.6g, \"kl\": %.6g, \"dp_target\": %.6g, "
               "\"top_after\": {\"id\": %d, \"piece\": ",
               rows[j].attn_mean, rows[j].attn_max, rows[j].effect.kl, rows[j].effect.dp_target, rows[j].effect.top);
        cli_json_string(stdout, after[j]);
        printf("}}%s\n", j + 1 < n ? "," : "");
    }
    printf("  ],\n  \"spearman_attn_kl\": ");
    if (isnan(s->spearman_attn_kl)) printf("null\n}\n");
    else printf("%.6f\n}\n", s->spearman_attn_kl);
}

static void print_heads(const qkv_ablate_effect *e, int nl, int nh) {
    printf("KL(p_full || p_ablated) in nats when one head's attention output is zeroed\n\nlayer");
    for (int h = 0; h < nh; h++) printf("      h%-2d", h);
    printf("\n");
    for (int l = 0; l < nl; l++) {
        printf("%5d", l);
        for (int h = 0; h < nh; h++) printf("  %7.4f", e[(size_t)l * nh + h].kl);
        printf("\n");
    }
    int best = 0;
    for (int i = 1; i < nl * nh; i++)
        if (e[i].kl > e[best].kl) best = i;
    printf("\nmost important: layer %d head %d (KL %.4f)\n", best / nh, best % nh, e[best].kl);
}

static void json_heads(const qkv_ablate_effect *e, const qkv_ablate_summary *s, const char *target_label, int nl,
                       int nh) {
    json_target(s, target_label);
    printf("  \"n_layer\": %d,\n  \"n_head\": %d,\n", nl, nh);
    static const char *const keys[] = {"kl", "dp_target", "top_after"};
    for (int k = 0; k < 3; k++) {
        printf("  \"%s\": [\n", keys[k]);
        for (int l = 0; l < nl; l++) {
            printf("    [");
            for (int h = 0; h < nh; h++) {
                const qkv_ablate_effect *x = &e[(size_t)l * nh + h];
                if (k == 2) printf("%d", x->top);
                else printf("%.6g", k == 0 ? x->kl : x->dp_target);
                printf("%s", h + 1 < nh ? ", " : "");
            }
            printf("]%s\n", l + 1 < nl ? "," : "");
        }
        printf("  ]%s\n", k < 2 ? "," : "");
    }
    printf("}\n");
}

/* ------------------------------------------------------------------ main */

typedef struct {
    cli_prompt_args pa;
    const char *model, *svg, *html, *target_s;
    int json, threads, verbose, heads, scope, layer, head;
    cli_progress_flags pf;
} ablate_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(ablate_args *a, int argc, char **argv) {
    *a = (ablate_args){.model = CLI_DEFAULT_MODEL, .scope = QKV_ABLATE_ALL, .layer = -1, .head = -1};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "--layer", .kind = CLI_INT, .dest = &a->layer, .lo = 0, .hi = QKV_MODEL_MAX_LAYERS, .metavar = "L",
         .help = "ablate in layer L only (default: all)"},
        {.name = "--head", .kind = CLI_INT, .dest = &a->head, .lo = 0, .hi = QKV_MODEL_MAX_HEADS, .metavar = "H",
         .help = "ablate in query head H only (default: all)"},
        CLI_FLAG_CHOICE("--scope", CLI_CHOICE, &a->scope, scopes,
                        "all: the key leaves every query row (default); last: only the\nfinal row's (the direct effect)"),
        {.name = "--target", .kind = CLI_STRING, .dest = &a->target_s, .metavar = "ID|TEXT",
         .help = "follow this token's probability (default: the full run's top token)"},
        {.name = "--heads", .kind = CLI_BOOL, .dest = &a->heads,
         .help = "instead: zero each (layer, head)'s attention output in turn, KL per head"},
        CLI_FLAG_JSON(&a->json, "everything as JSON on stdout"),
        {.name = "--svg", .kind = CLI_STRING, .dest = &a->svg, .metavar = "FILE",
         .help = "plot: attention and KL per position (--heads: the layer x head KL map)"},
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "a self-contained page: the plot and the table"},
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_VERBOSE(&a->verbose),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {
        .name = "ablate", .usage = "[-m MODEL] (-p TEXT | -f FILE | --tokens IDS) [flags]",
        .about = "Weight against influence: hides each position's key in turn (the engine's exclusion\n"
        "mask) and measures how the last position's next-token distribution moves (KL, nats),\n"
        "beside the attention the last position gave that key. Rows before the ablated key\n"
        "are kept from the KV cache: n partial forwards, n(n+1)/2 token-steps.",
        .notes = "JSON: {\"target\": {\"id\", \"piece\", \"p\"}, \"scope\", \"layer\", \"head\", \"positions\": [{\"pos\",\n"
        "\"piece\", \"attn_mean\", \"attn_max\", \"kl\", \"dp_target\", \"top_after\": {\"id\", \"piece\"}}],\n"
        "\"spearman_attn_kl\"}; pieces are readable labels (a space is ·); layer/head null for all.",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed;
    cli_progress_init(&a->pf);
    if (a->heads && (cli_given(&cmd, "--layer") || cli_given(&cmd, "--head") || cli_given(&cmd, "--scope")))
        return cli_fail("--heads ablates every head in turn: it takes no --layer, --head or --scope");
    return 0;
}

/* What the probe gave back, with the labels the outputs show. */
typedef struct {
    qkv_ablate_row *rows;         /* [n], positions */
    qkv_ablate_effect *effects;   /* [nl, nh], --heads */
    char **after, *target_label;  /* [n] the top token after hiding each; the target's label */
    qkv_ablate_summary sum;
    int n, nl, nh;
} ablate_result;

/* The ablation sweep of a over the prompt pr; 0 or 2 after an error line. */
static int compute(ablate_result *r, const ablate_args *a, qkv_model *m, const cli_prompt *pr,
                   const qkv_tokenizer *tok, int32_t target) {
    const int n = r->n, nl = r->nl, nh = r->nh;
    qkv_error err = {0};
    int rc = 0;
    const qkv_ablate_params ap = {.scope = a->scope, .layer = a->layer, .head = a->head, .target = target,
                                  .progress = cli_progress_enabled() ? cli_progress_report : NULL};
    cli_progress_start(a->heads ? "ablate --heads" : "ablate", 0, "tokens"); /* the probe tells the total */
    if (a->heads) {
        r->effects = malloc((size_t)nl * nh * sizeof *r->effects);
        if (!r->effects) rc = cli_fail("out of memory");
        else if (qkv_ablate_heads(r->effects, &r->sum, m, pr->ids, &ap, n, &err)) rc = cli_fail("%s", err.msg);
    } else {
        r->rows = malloc((size_t)n * sizeof *r->rows);
        r->after = calloc((size_t)n, sizeof *r->after);
        if (!r->rows || !r->after) rc = cli_fail("out of memory");
        else if (qkv_ablate_positions(r->rows, &r->sum, m, pr->ids, &ap, n, &err)) rc = cli_fail("%s", err.msg);
        for (int j = 0; !rc && j < n; j++)
            if (!(r->after[j] = cli_token_label(tok, r->rows[j].effect.top))) rc = cli_fail("out of memory");
    }
    cli_progress_finish();
    if (!rc && !(r->target_label = cli_token_label(tok, r->sum.target))) rc = cli_fail("out of memory");
    return rc;
}

static void make_title(char *title, size_t cap, const ablate_args *a, const ablate_result *r) {
    char where[64] = "every layer and head";
    if (a->layer >= 0 && a->head >= 0) snprintf(where, sizeof where, "layer %d head %d", a->layer, a->head);
    else if (a->layer >= 0) snprintf(where, sizeof where, "layer %d, every head", a->layer);
    else if (a->head >= 0) snprintf(where, sizeof where, "head %d of every layer", a->head);
    if (a->heads)
        snprintf(title, cap, "%s, %d tokens: head importance for target %s (p = %.3f)", cli_basename(a->model), r->n,
                 r->target_label, r->sum.p_target);
    else
        snprintf(title, cap, "%s, %d tokens, scope %s (%s): target %s (p = %.3f)", cli_basename(a->model), r->n,
                 scopes[a->scope], where, r->target_label, r->sum.p_target);
}

/* The files, then stdout: the table or JSON, the files written. */
static int emit(const ablate_args *a, const ablate_result *r, char **labels, FILE *svg_f, FILE *html_f) {
    char title[512];
    make_title(title, sizeof title, a, r);
    const report rep = {.title = title, .rows = r->rows, .effects = r->effects, .labels = labels, .after = r->after,
                        .n = r->n, .nl = r->nl, .nh = r->nh};
    int rc;
    /* the files are on disk before anything goes to stdout */
    if ((a->svg && (rc = write_output(svg_f, &rep, 0))) || (a->html && (rc = write_output(html_f, &rep, 1))) ||
        (rc = cli_outputs_commit()))
        return rc;
    if (a->json && a->heads) json_heads(r->effects, &r->sum, r->target_label, r->nl, r->nh);
    else if (a->json)
        json_positions(r->rows, &r->sum, r->target_label, labels, r->after, r->n, a->scope, a->layer, a->head);
    else {
        printf("qkv ablate: %s\n\n", title);
        if (a->heads) print_heads(r->effects, r->nl, r->nh);
        else print_positions(r->rows, &r->sum, labels, r->after, r->n);
    }
    if (a->svg) fprintf(a->json ? stderr : stdout, "wrote %s\n", a->svg);
    if (a->html) fprintf(a->json ? stderr : stdout, "wrote %s\n", a->html);
    return 0;
}

int cmd_ablate(int argc, char **argv) {
    ablate_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = cli_prompt_check(&a.pa))) return rc;
    FILE *svg_f = NULL, *html_f = NULL;
    if ((a.svg && !(svg_f = cli_output_stream(a.svg))) || (a.html && !(html_f = cli_output_stream(a.html))))
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    qkv_model *m = NULL;
    cli_prompt pr = {0};
    ablate_result r = {0};
    int32_t target = -1;
    qkv_error err = {0};
    if ((rc = cli_tokenizer_open(&g, &tok, a.model)) || (rc = cli_prompt_load(&pr, &a.pa, g, tok)) ||
        (rc = cli_prompt_labels(&pr, tok)) ||
        (a.target_s && (rc = cli_one_token(&target, "--target", a.target_s, tok, 1))))
        goto done;
    r.n = pr.n;
    if (r.n < 2 && !a.heads) {
        rc = cli_fail("the prompt has %d token: ablating needs at least 2 (one to hide, one to predict)", r.n);
        goto done;
    }
    qkv_model_params mp = {.n_ctx = r.n, .kv_dtype = QKV_DTYPE_F32, .n_threads = a.threads};
    if (qkv_model_open(&m, a.model, &mp, &err)) {
        rc = cli_model_fail(&err, a.model);
        goto done;
    }
    const qkv_model_config *cfg = qkv_model_get_config(m);
    r.nl = cfg->n_layer, r.nh = cfg->n_head;
    if (a.layer >= r.nl) rc = cli_fail("--layer %d: the model has layers 0..%d", a.layer, r.nl - 1);
    else if (a.head >= r.nh) rc = cli_fail("--head %d: the model has heads 0..%d", a.head, r.nh - 1);
    else if (r.n > cfg->n_ctx_train) rc = cli_fail("%d tokens exceed the model's context of %d", r.n, cfg->n_ctx_train);
    if (rc) goto done;
    const double t0 = cli_now_s();
    if ((rc = compute(&r, &a, m, &pr, tok, target))) goto done;
    const double t1 = cli_now_s();
    if ((rc = emit(&a, &r, pr.labels, svg_f, html_f))) goto done;
    if (a.verbose)
        fprintf(stderr, "qkv ablate: %d tokens, %.2f s, peak RSS %.1f MiB\n", r.n, t1 - t0, cli_peak_rss_mib());
done:
    cli_progress_finish();
    if (r.after)
        for (int j = 0; j < r.n; j++) free(r.after[j]);
    free(r.after);
    free(r.target_label);
    free(r.rows);
    free(r.effects);
    qkv_model_close(m);
    cli_prompt_free(&pr);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return cli_outputs_finish(rc);
}
