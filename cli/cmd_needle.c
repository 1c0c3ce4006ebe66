/*
 * cmd_needle.c — `qkv needle`: dilution and retrieval. For each (length,
 * depth) of a grid, a needle sentence goes into a haystack text at that
 * depth (at a sentence boundary), a question follows in the chat template,
 * the model answers greedily and the answer is scored by substring
 * (qkv_needle_prompt_build, qkv_needle_run: src/probe/needle*.c). Beside
 * each verdict, the attention the first answer token puts on the needle,
 * read from the fast kernel's LSE, and over the whole grid every head's
 * retrieval score. Prints the grid or JSON; draws it as an SVG (and an HTML
 * page with the answers).
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

#define DEFAULT_HAYSTACK "/usr/share/common-licenses/GPL-3"
#define DEFAULT_NEEDLE "The secret number that unlocks the archive is 4817."
#define DEFAULT_QUESTION "What is the secret number that unlocks the archive? Answer with the number only."
#define DEFAULT_ANSWER "4817"

typedef struct {
    int length;
    int depth;
    int tokens, needle_pos, needle_len;
    int correct;
    char *answer;           /* the reply's text */
    double mass_max, mass_mean;
    double *by_layer_max, *by_layer_mean;  /* [L] */
    int answer_step;        /* the reply token where the answer starts; -1 if it is not there */
    double answer_mass_max, answer_mass_mean;
    double *answer_by_layer;               /* [L] that token's row: max over heads */
    double seconds;
} cell;

typedef struct {
    const char *model, *haystack, *needle, *question, *answer;
    int chat;               /* the prompt in the model's chat template (else plain text) */
    const cli_ints *lengths, *depths;
    int n_layer, n_head, hay_tokens;
    cell *cells;            /* [lengths, depths] */
    double *retrieval;      /* [L, Hq] mean over the cells */
} grid;

static const cell *at(const grid *g, int li, int di) { return &g->cells[(size_t)li * g->depths->n + di]; }

/* ---------------------------------------------------------------- output */

static void print_row_values(const grid *g, const char *title, int which) {
    printf("\n%s\n  length", title);
    for (int d = 0; d < g->depths->n; d++) printf("  %5d%%", g->depths->v[d]);
    printf("\n");
    for (int l = 0; l < g->lengths->n; l++) {
        printf("  %6d", g->lengths->v[l]);
        for (int d = 0; d < g->depths->n; d++) {
            const cell *c = at(g, l, d);
            if (which == 0) printf("  %6s", c->correct ? "yes" : "no");
            else if (which == 3 && c->answer_step < 0) printf("  %6s", "-");
            else printf("  %6.3f", which == 1 ? c->mass_max : which == 2 ? c->mass_mean : c->answer_mass_max);
        }
        printf("\n");
    }
}

/* Heads by retrieval score, best first; [L * Hq] indices. */
static int *ranked_heads(const grid *g) {
    const int n = g->n_layer * g->n_head;
    int *idx = malloc((size_t)n * sizeof *idx);
    if (!idx) return NULL;
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, a few hundred heads */
        const int x = idx[i];
        int j = i;
        while (j > 0 && g->retrieval[idx[j - 1]] < g->retrieval[x]) idx[j] = idx[j - 1], j--;
        idx[j] = x;
    }
    return idx;
}

static void print_grid(const grid *g, const int *rank) {
    int n_right = 0;
    for (int i = 0; i < g->lengths->n * g->depths->n; i++) n_right += g->cells[i].correct;
    printf("qkv needle: %s, haystack %s (%d tokens)\n  needle:   %s\n  question: %s\n  answer:   %s\n",
           cli_basename(g->model), cli_basename(g->haystack), g->hay_tokens, g->needle, g->question, g->answer);
    print_row_values(g, "correct (the answer is in the greedy reply), by prompt length (tokens) and needle depth", 0);
    print_row_values(g, "needle mass of the first answer token: the largest over layers and heads", 1);
    print_row_values(g, "needle mass of the first answer token: the mean over layers and heads", 2);
    print_row_values(g, "needle mass of the reply token that starts the answer: the largest over layers and heads", 3);
    printf("\n%d of %d correct. Replies:\n", n_right, g->lengths->n * g->depths->n);
    for (int l = 0; l < g->lengths->n; l++)
        for (int d = 0; d < g->depths->n; d++) {
            const cell *c = at(g, l, d);
            printf("  %6d @ %3d%%  %-3s  ", c->length, c->depth, c->correct ? "yes" : "no");
            for (const char *s = c->answer; *s; s++) putchar(*s == '\n' ? ' ' : *s);
            printf("\n");
        }
    printf("\nretrieval heads (Wu et al. 2024: share of the needle's tokens a head copied, mean over the cells):\n");
    int shown = 0;
    for (int i = 0; i < g->n_layer * g->n_head && shown < 10; i++, shown++) {
        if (g->retrieval[rank[i]] <= 0) break;
        printf("  layer %2d head %2d  %.3f\n", rank[i] / g->n_head, rank[i] % g->n_head, g->retrieval[rank[i]]);
    }
    if (!shown) printf("  none: no head's strongest key was a needle token the reply copied\n");
}

static void json_doubles(const double *v, int n) {
    printf("[");
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? ", " : "", v[i]);
    printf("]");
}

static void print_json(const grid *g, const int *rank) {
    printf("{\n  \"model\": ");
    cli_json_string(stdout, g->model);
    printf(",\n  \"haystack\": ");
    cli_json_string(stdout, g->haystack);
    printf(",\n  \"haystack_tokens\": %d,\n  \"needle\": ", g->hay_tokens);
    cli_json_string(stdout, g->needle);
    printf(",\n  \"question\": ");
    cli_json_string(stdout, g->question);
    printf(",\n  \"answer\": ");
    cli_json_string(stdout, g->answer);
    printf(",\n  \"chat\": %s,\n  \"cells\": [\n", g->chat ? "true" : "false");
    const int nc = g->lengths->n * g->depths->n;
    for (int i = 0; i < nc; i++) {
        const cell *c = &g->cells[i];
        printf("    {\"length\": %d, \"depth\": %d, \"tokens\": %d, \"needle_pos\": %d, \"needle_tokens\": %d, "
               "\"correct\": %s, \"answer\": ",
               c->length, c->depth, c->tokens, c->needle_pos, c->needle_len, c->correct ? "true" : "false");
        cli_json_string(stdout, c->answer);
        printf(", \"needle_mass_max\": %.6g, \"needle_mass_mean\": %.6g, \"needle_mass_by_layer\": ", c->mass_max,
               c->mass_mean);
        json_doubles(c->by_layer_max, g->n_layer);
        printf(", \"needle_mass_mean_by_layer\": ");
        json_doubles(c->by_layer_mean, g->n_layer);
        if (c->answer_step >= 0) {
            printf(", \"answer_step\": %d, \"answer_mass_max\": %.6g, \"answer_mass_mean\": %.6g, "
                   "\"answer_mass_by_layer\": ",
                   c->answer_step, c->answer_mass_max, c->answer_mass_mean);
            json_doubles(c->answer_by_layer, g->n_layer);
        } else {
            printf(", \"answer_step\": null, \"answer_mass_max\": null, \"answer_mass_mean\": null, "
                   "\"answer_mass_by_layer\": null");
        }
        printf(", \"seconds\": %.3f}%s\n", c->seconds, i + 1 < nc ? "," : "");
    }
    printf("  ],\n  \"retrieval_heads\": [\n");
    const int nh = g->n_layer * g->n_head;
    for (int i = 0; i < nh; i++)
        printf("    {\"layer\": %d, \"head\": %d, \"score\": %.6g}%s\n", rank[i] / g->n_head, rank[i] % g->n_head,
               g->retrieval[rank[i]], i + 1 < nh ? "," : "");
    printf("  ]\n}\n");
}

/* ------------------------------------------------------------------ SVG */

/* The value panel `which` shows: 0 correct (1 or 0), 1 the first answer
 * token's needle mass (max), 2 the token starting the answer's (max; NaN
 * when absent). */
static double panel_value(const cell *c, int which) {
    return which == 0 ? c->correct : which == 1 ? c->mass_max : c->answer_step >= 0 ? c->answer_mass_max : NAN;
}

/* Three length x depth panels (correct, two needle masses), then the mean
 * needle mass per layer, one line per length (depths averaged). 0 or 2. */
static int svg_body(FILE *f, const grid *g, const char *title) {
    const int nl = g->lengths->n, nd = g->depths->n, L = g->n_layer;
    double *v = malloc((size_t)3 * nl * nd * sizeof *v), *by_layer = calloc((size_t)nl * L, sizeof *by_layer);
    char *text = malloc((size_t)(nl + nd) * 24);       /* [nl + nd][24]: lengths, then depths */
    const char **names = malloc((size_t)(nl + nd) * sizeof *names);
    char(*line_names)[32] = malloc((size_t)nl * sizeof *line_names);
    qkv_chart_series *lines = malloc((size_t)nl * sizeof *lines);
    if (!v || !by_layer || !text || !names || !line_names || !lines) {
        free(v), free(by_layer), free(text), free(names), free(line_names), free(lines);
        return cli_fail("out of memory");
    }
    for (int i = 0; i < nl + nd; i++) {
        names[i] = text + (size_t)i * 24;
        snprintf(text + (size_t)i * 24, 24, i < nl ? "%d" : "%d%%", i < nl ? g->lengths->v[i] : g->depths->v[i - nl]);
    }
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < nl * nd; i++) v[(size_t)which * nl * nd + i] = panel_value(&g->cells[i], which);
    for (int l = 0; l < nl; l++) {
        for (int d = 0; d < nd; d++)
            for (int k = 0; k < L; k++) by_layer[(size_t)l * L + k] += at(g, l, d)->by_layer_mean[k] / nd;
        snprintf(line_names[l], sizeof line_names[l], "%d tokens", g->lengths->v[l]);
        lines[l] = (qkv_chart_series){.name = line_names[l], .y = by_layer + (size_t)l * L, .n = L};
    }
    static const char *const panel_titles[3] = {"correct", "needle mass: first answer token",
                                                "needle mass: token starting the answer"};
    const int pw = 52 * nd, gap = 100, x0 = 80, y0 = 60;
    qkv_chart_box panel = {.x = x0, .y = y0, .w = pw, .h = 26 * nl, .x_title = "needle depth",
                           .y_title = "prompt tokens"};
    qkv_chart_box layers = {.x = x0, .y = y0 + panel.h + qkv_chart_below(&panel, 0) + 60, .w = 600, .h = 160,
                            .title = "needle mass of the first answer token by layer, mean over heads and depths",
                            .x_title = "layer", .y_title = "needle mass", .x_whole = 1, .legend_cols = 4,
                            .caption = "needle mass: the attention weight a row puts on the needle's tokens (panels "
                                       "above: the largest over layers and heads)"};
    const int W = x0 + 2 * (pw + gap) + (pw > 280 ? pw : 280) + 20; /* room for the last panel's title */
    qkv_chart_begin(f, W, layers.y + layers.h + qkv_chart_below(&layers, nl), title);
    for (int which = 0; which < 3; which++) {
        const qkv_chart_grid cells = {.rows = nl, .cols = nd, .row_labels = names, .col_labels = names + nl,
                                      .values = v + (size_t)which * nl * nd,
                                      .scale = which ? QKV_CHART_BLUES : QKV_CHART_YES_NO};
        panel.title = panel_titles[which];
        panel.x = x0 + which * (pw + gap);
        qkv_chart_cells(f, &panel, &cells);
    }
    qkv_chart_lines(f, &layers, lines, nl);
    qkv_chart_end(f);
    free(v), free(by_layer), free(text), free(names), free(line_names), free(lines);
    return 0;
}

/* The plot alone (svg) or in a page with the replies (html); 0 or 2. */
static int write_output(FILE *f, const grid *g, const char *title, int html) {
    if (html) {
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>qkv needle</title><style>body{font-family:"
              "sans-serif;margin:24px}h1{font-size:18px}table{border-collapse:collapse}td,th{padding:2px 10px;"
              "text-align:right}td.t{text-align:left;font-family:monospace}</style></head><body>\n<h1>",
              f);
        qkv_svg_text(f, title);
        fputs("</h1>\n<p>needle: ", f);
        qkv_svg_text(f, g->needle);
        fputs("<br>question: ", f);
        qkv_svg_text(f, g->question);
        fputs("<br>answer: ", f);
        qkv_svg_text(f, g->answer);
        fputs("</p>\n", f);
    }
    const int rc = svg_body(f, g, title);
    if (rc) return rc;
    if (html) {
        fputs("<table>\n<tr><th>length</th><th>depth</th><th>tokens</th><th>needle at</th><th>correct</th>"
              "<th>mass max</th><th>mass mean</th><th>reply</th></tr>\n",
              f);
        for (int i = 0; i < g->lengths->n * g->depths->n; i++) {
            const cell *c = &g->cells[i];
            fprintf(f, "<tr><td>%d</td><td>%d%%</td><td>%d</td><td>%d</td><td>%s</td><td>%.4f</td><td>%.4f</td>"
                       "<td class=\"t\">",
                    c->length, c->depth, c->tokens, c->needle_pos, c->correct ? "yes" : "no", c->mass_max, c->mass_mean);
            qkv_svg_text(f, c->answer);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n</body></html>\n", f);
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

/* The text of ids, special tokens left out; NULL after an error line. */
static char *reply_text(const qkv_tokenizer *tok, const int32_t *ids, int n) {
    size_t len = 0, cap = 256;
    qkv_error err = {0};
    for (;;) {
        char *s = malloc(cap);
        if (!s) break;
        qkv_status st = qkv_detokenize(tok, ids, n, 1, s, cap, &len, &err);
        if (st == QKV_OK) return s;
        free(s);
        if (st != QKV_ERR_FULL) {
            cli_fail("%s", err.msg);
            return NULL;
        }
        cap = len + 1;
    }
    cli_fail("out of memory");
    return NULL;
}

/* *step <- the reply token whose text holds byte `offset` of the reply
 * (where the answer starts); 0 or 2 after an error line. */
static int answer_step(int *step, const qkv_tokenizer *tok, const int32_t *ids, int n, long offset) {
    for (int i = 0; i < n; i++) {
        char *s = reply_text(tok, ids, i + 1);
        if (!s) return CLI_EXIT_BAD_INPUT;
        const long len = (long)strlen(s);
        free(s);
        if (len > offset) {
            *step = i;
            return 0;
        }
    }
    *step = n - 1;
    return 0;
}

/* The haystack's tokens (no BOS) into *ids; 0 or 2 after an error line. */
static int haystack_tokens(int32_t **ids, int *n, const char *text, size_t len, const qkv_tokenizer *tok) {
    const int64_t bound = qkv_tokenize_bound(len);
    int64_t got = 0;
    qkv_error err = {0};
    *ids = malloc((size_t)(bound > 0 ? bound : 1) * sizeof **ids);
    if (!*ids) return cli_fail("out of memory for the haystack");
    if (qkv_tokenize(tok, text, len, 0, 0, *ids, bound, &got, &err)) return cli_fail("haystack: %s", err.msg);
    if (got > 0x7fffffff) return cli_fail("the haystack has %lld tokens, more than a run can take", (long long)got);
    *n = (int)got;
    return 0;
}

static int run_grid(grid *g, qkv_model *m, const qkv_gguf *gg, const qkv_tokenizer *tok, const int32_t *hay,
                    const qkv_needle_text *nt, int verbose) {
    const int L = g->n_layer, H = g->n_head, n_cells = g->lengths->n * g->depths->n;
    int32_t *answer = malloc((size_t)nt->max_answer * sizeof *answer);
    double *step_max = malloc((size_t)nt->max_answer * L * sizeof(double)),
           *step_mean = malloc((size_t)nt->max_answer * L * sizeof(double)); /* [max_answer, L] */
    if (!answer || !step_max || !step_mean) {
        free(answer), free(step_max), free(step_mean);
        return cli_fail("out of memory");
    }
    int rc = 0;
    int64_t total = 0, done = 0; /* prompt tokens, the unit of progress: a cell's prefill dominates its time */
    for (int i = 0; i < n_cells; i++) total += g->lengths->v[i / g->depths->n];
    cli_progress_start("needle", total, "tokens");
    for (int i = 0; !rc && i < n_cells; i++) {
        cell *c = &g->cells[i];
        c->length = g->lengths->v[i / g->depths->n];
        c->depth = g->depths->v[i % g->depths->n];
        cli_progress_label("needle %d tokens, depth %d%% (%d/%d)", c->length, c->depth, i + 1, n_cells);
        cli_progress_update(done);
        if (!(c->by_layer_max = calloc((size_t)L, sizeof(double))) ||
            !(c->by_layer_mean = calloc((size_t)L, sizeof(double))) ||
            !(c->answer_by_layer = calloc((size_t)L, sizeof(double)))) {
            rc = cli_fail("out of memory");
            break;
        }
        qkv_error err = {0};
        qkv_needle_prompt p;
        const double t0 = cli_now_s();
        if (qkv_needle_prompt_build(&p, gg, tok, hay, g->hay_tokens, nt, c->length, c->depth, &err)) {
            rc = cli_fail("%s", err.msg);
            break;
        }
        qkv_needle_result r = {.answer = answer, .mass_max = c->by_layer_max, .mass_mean = c->by_layer_mean,
                               .retrieval = g->retrieval, .step_mass_max = step_max, .step_mass_mean = step_mean};
        if (qkv_needle_run(&r, m, tok, &p, nt->max_answer, &err)) rc = cli_fail("%s", err.msg);
        c->tokens = p.n;
        c->needle_pos = p.needle_pos;
        c->needle_len = p.needle_len;
        qkv_needle_prompt_free(&p);
        if (rc || !(c->answer = reply_text(tok, answer, r.n_answer))) {
            rc = rc ? rc : CLI_EXIT_BAD_INPUT;
            break;
        }
        c->seconds = cli_now_s() - t0;
        const long found = qkv_needle_match(c->answer, g->answer);
        c->correct = found >= 0;
        c->answer_step = -1;
        if (found >= 0 && (rc = answer_step(&c->answer_step, tok, answer, r.n_answer, found))) break;
        for (int l = 0; l < L; l++) {
            if (c->by_layer_max[l] > c->mass_max) c->mass_max = c->by_layer_max[l];
            c->mass_mean += c->by_layer_mean[l] / L;
            if (c->answer_step < 0) continue;
            const size_t k = (size_t)c->answer_step * L + l;
            c->answer_by_layer[l] = step_max[k];
            if (step_max[k] > c->answer_mass_max) c->answer_mass_max = step_max[k];
            c->answer_mass_mean += step_mean[k] / L;
        }
        if (verbose) {
            cli_progress_clear();
            fprintf(stderr, "qkv needle: %d tokens, depth %d%%: %s in %.1f s\n", c->tokens, c->depth,
                    c->correct ? "correct" : "wrong", c->seconds);
        }
        cli_progress_update(done += c->length);
    }
    cli_progress_finish();
    for (int i = 0; i < L * H; i++) g->retrieval[i] /= n_cells;
    free(answer);
    free(step_max);
    free(step_mean);
    return rc;
}

typedef struct {
    const char *model, *haystack, *svg, *html, *expected;
    qkv_needle_text nt;
    cli_ints lengths, depths;
    int json, threads, verbose, kv_dtype;
    cli_progress_flags pf;
} needle_args;

/* 0: parsed; -1: --help printed; 2: an error line printed (a->lengths and
 * a->depths to be freed either way). */
static int parse_args(needle_args *a, int argc, char **argv) {
    *a = (needle_args){.model = CLI_DEFAULT_MODEL, .haystack = DEFAULT_HAYSTACK, .expected = DEFAULT_ANSWER,
                       .nt = {.needle = DEFAULT_NEEDLE, .question = DEFAULT_QUESTION, .max_answer = 16},
                       .kv_dtype = QKV_DTYPE_F32};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        {.name = "--file", .alias = "-f", .kind = CLI_STRING, .dest = &a->haystack, .metavar = "FILE",
         .help = "the haystack text (default " DEFAULT_HAYSTACK ")"},
        {.name = "--lengths", .kind = CLI_INTS, .dest = &a->lengths, .lo = 1, .hi = QKV_MODEL_MAX_CTX, .metavar = "L1,L2,...",
         .help = "prompt lengths in tokens, answer included (default 1024,2048,4096,8192)"},
        {.name = "--depths", .kind = CLI_INTS, .dest = &a->depths, .lo = 0, .hi = 100, .metavar = "D1,D2,...",
         .help = "needle depths, percent of the haystack (default 0,25,50,75,100)"},
        {.name = "--needle", .kind = CLI_STRING, .dest = &a->nt.needle, .metavar = "TEXT",
         .help = "the sentence hidden in the haystack"},
        {.name = "--question", .kind = CLI_STRING, .dest = &a->nt.question, .metavar = "TEXT",
         .help = "asked after the haystack"},
        {.name = "--answer", .kind = CLI_STRING, .dest = &a->expected, .metavar = "TEXT",
         .help = "a reply is correct when it contains this (case folded)"},
        {.name = "--system", .kind = CLI_STRING, .dest = &a->nt.system, .metavar = "TEXT",
         .help = "system turn (default: the template's own)"},
        {.name = "--no-chat", .kind = CLI_BOOL, .dest = &a->nt.plain,
         .help = "no chat template: the haystack and question as plain text after\nthe BOS (a base model)"},
        {.name = "--max-answer", .kind = CLI_INT, .dest = &a->nt.max_answer, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "reply tokens at most (default 16)"},
        CLI_FLAG_JSON(&a->json, "everything as JSON on stdout"),
        {.name = "--svg", .kind = CLI_STRING, .dest = &a->svg, .metavar = "FILE",
         .help = "the grid: correctness and needle mass side by side"},
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "a self-contained page: the grid and the replies"},
        CLI_FLAG_KV_DTYPE(&a->kv_dtype, "KV cache storage: f32 (default), bf16, f16"),
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_VERBOSE(&a->verbose),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {
        .name = "needle", .usage = "[-m MODEL] [-f HAYSTACK] [--lengths L,...] [--depths D,...] [flags]",
        .about = "Needle in a haystack with attention telemetry: for each length and depth the needle\n"
        "sentence goes into the haystack at a sentence boundary, the question follows as a chat\n"
        "turn (--no-chat: as plain text), the model answers greedily and the reply is scored by\n"
        "substring (RULER's string_match_all). From the kernel's LSE: the weight the first answer\n"
        "token puts on the needle's tokens, and each head's retrieval score (Wu et al. 2024).\n"
        "Cost per cell: one prefill of the length plus one decode step per reply token.",
        .notes = "JSON: {\"model\", \"haystack\", \"haystack_tokens\", \"needle\", \"question\", \"answer\",\n"
        "\"chat\", \"cells\": [{\"length\", \"depth\", \"tokens\", \"needle_pos\", \"needle_tokens\", \"correct\", \"answer\",\n"
        "\"needle_mass_max\", \"needle_mass_mean\", \"needle_mass_by_layer\" (max over heads),\n"
        "\"needle_mass_mean_by_layer\", \"answer_step\", \"answer_mass_max\", \"answer_mass_mean\",\n"
        "\"answer_mass_by_layer\" (the reply token where the answer starts; null if absent), \"seconds\"}],\n"
        "\"retrieval_heads\": [{\"layer\", \"head\", \"score\"}]}.",
        .flags = flags};
    const int rc = cli_parse(&cmd, argc, argv);
    cli_progress_init(&a->pf);
    return rc;
}

/* The default grid, and the texts checked against each other; 0 or 2. */
static int check_args(needle_args *a) {
    int rc = 0;
    if (!a->lengths.n) rc = cli_parse_ints(&a->lengths, "--lengths", "1024,2048,4096,8192", 1, QKV_MODEL_MAX_CTX);
    if (!rc && !a->depths.n) rc = cli_parse_ints(&a->depths, "--depths", "0,25,50,75,100", 0, 100);
    if (!rc && !a->nt.needle[0]) rc = cli_fail("--needle is empty");
    if (!rc && !a->expected[0]) rc = cli_fail("--answer is empty");
    if (!rc && !a->nt.question[0]) rc = cli_fail("--question is empty");
    if (!rc && a->nt.plain && a->nt.system) rc = cli_fail("--system needs the chat template, not --no-chat");
    if (!rc && qkv_needle_match(a->nt.needle, a->expected) < 0)
        rc = cli_fail("--answer '%s' is not in the needle: the model could not find it", a->expected);
    return rc;
}

/* What the grid runs on: the GGUF, its tokenizer, the haystack's tokens. */
typedef struct {
    qkv_gguf *g;
    qkv_tokenizer *tok;
    char *text;
    int32_t *hay, *needle_ids;
} needle_inputs;

/* Reads and tokenizes the haystack and the needle (gr->hay_tokens, gr->chat);
 * 0 or 2 after an error line (free in either case). */
static int load_inputs(needle_inputs *in, grid *gr, const needle_args *a) {
    size_t len = 0;
    int rc;
    if (!(in->text = cli_read_file(a->haystack, CLI_PROMPT_MAX_BYTES, &len))) return CLI_EXIT_BAD_INPUT;
    if ((rc = cli_tokenizer_open(&in->g, &in->tok, a->model))) return rc;
    gr->chat = !a->nt.plain;
    if (gr->chat && qkv_gguf_find_key(in->g, "tokenizer.chat_template") < 0)
        return cli_fail("%s has no tokenizer.chat_template (a base model?): --no-chat asks in plain text", a->model);
    if (qkv_needle_match(in->text, a->expected) >= 0)
        return cli_fail("%s: the answer '%s' is already in the haystack", a->haystack, a->expected);
    int n_needle = 0;
    if ((rc = haystack_tokens(&in->hay, &gr->hay_tokens, in->text, len, in->tok)) ||
        (rc = haystack_tokens(&in->needle_ids, &n_needle, a->nt.needle, strlen(a->nt.needle), in->tok)))
        return rc;
    if (n_needle >= gr->hay_tokens)
        return cli_fail("the needle (%d tokens) is not shorter than the haystack %s (%d tokens)", n_needle, a->haystack,
                        gr->hay_tokens);
    return 0;
}

/* The model with a KV cache for the longest length, and the grid's arrays
 * for its layers and heads; 0 or 2 after an error line. */
static int open_model(qkv_model **m, grid *gr, const needle_args *a, const qkv_gguf *g) {
    int max_len = 0;
    for (int i = 0; i < a->lengths.n; i++)
        if (a->lengths.v[i] > max_len) max_len = a->lengths.v[i];
    qkv_model_params mp = {.n_ctx = max_len, .kv_dtype = (qkv_dtype)a->kv_dtype, .n_threads = a->threads};
    qkv_error err = {0};
    qkv_model_config cfg;
    if (qkv_model_config_read(&cfg, g, &err)) return cli_model_fail(&err, a->model);
    if (max_len > cfg.n_ctx_train)
        return cli_fail("--lengths: %d tokens exceed the model's context of %d", max_len, cfg.n_ctx_train);
    if (qkv_model_open(m, a->model, &mp, &err)) return cli_model_fail(&err, a->model);
    gr->n_layer = cfg.n_layer;
    gr->n_head = cfg.n_head;
    gr->cells = calloc((size_t)a->lengths.n * a->depths.n, sizeof *gr->cells);
    gr->retrieval = calloc((size_t)cfg.n_layer * cfg.n_head, sizeof(double));
    if (!gr->cells || !gr->retrieval) return cli_fail("out of memory");
    return 0;
}

/* The files, then stdout: the grid or JSON, the files written; 0 or 2. */
static int emit(const needle_args *a, const grid *gr, const int *rank, FILE *svg_f, FILE *html_f) {
    char title[512];
    snprintf(title, sizeof title, "%s: needle in %s, %d lengths x %d depths", cli_basename(a->model),
             cli_basename(a->haystack), a->lengths.n, a->depths.n);
    /* the files are on disk before anything goes to stdout */
    int rc;
    if ((a->svg && (rc = write_output(svg_f, gr, title, 0))) || (a->html && (rc = write_output(html_f, gr, title, 1))) ||
        (rc = cli_outputs_commit()))
        return rc;
    if (a->json) print_json(gr, rank);
    else print_grid(gr, rank);
    if (a->svg) fprintf(a->json ? stderr : stdout, "wrote %s\n", a->svg);
    if (a->html) fprintf(a->json ? stderr : stdout, "wrote %s\n", a->html);
    return 0;
}

static void grid_free(grid *gr, int n_cells) {
    if (gr->cells)
        for (int i = 0; i < n_cells; i++) {
            free(gr->cells[i].answer);
            free(gr->cells[i].by_layer_max);
            free(gr->cells[i].by_layer_mean);
            free(gr->cells[i].answer_by_layer);
        }
    free(gr->cells);
    free(gr->retrieval);
}

int cmd_needle(int argc, char **argv) {
    needle_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) {
        cli_ints_free(&a.lengths);
        cli_ints_free(&a.depths);
        return rc < 0 ? 0 : rc;
    }
    FILE *svg_f = NULL, *html_f = NULL;
    if ((a.svg && !(svg_f = cli_output_stream(a.svg))) || (a.html && !(html_f = cli_output_stream(a.html)))) {
        cli_ints_free(&a.lengths);
        cli_ints_free(&a.depths);
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    }
    needle_inputs in = {0};
    qkv_model *m = NULL;
    int *rank = NULL;
    grid gr = {.model = a.model, .haystack = a.haystack, .needle = a.nt.needle, .question = a.nt.question,
               .answer = a.expected, .lengths = &a.lengths, .depths = &a.depths};
    if ((rc = check_args(&a)) || (rc = load_inputs(&in, &gr, &a)) || (rc = open_model(&m, &gr, &a, in.g))) goto done;
    const double t0 = cli_now_s();
    if ((rc = run_grid(&gr, m, in.g, in.tok, in.hay, &a.nt, a.verbose)) || !(rank = ranked_heads(&gr))) {
        if (!rc) rc = cli_fail("out of memory");
        goto done;
    }
    if ((rc = emit(&a, &gr, rank, svg_f, html_f))) goto done;
    if (a.verbose)
        fprintf(stderr, "qkv needle: %d cells, %.1f s, peak RSS %.1f MiB\n", a.lengths.n * a.depths.n,
                cli_now_s() - t0, cli_peak_rss_mib());
done:
    grid_free(&gr, a.lengths.n * a.depths.n);
    free(rank);
    free(in.hay);
    free(in.needle_ids);
    free(in.text);
    qkv_model_close(m);
    qkv_tokenizer_free(in.tok);
    qkv_gguf_close(in.g);
    cli_ints_free(&a.lengths);
    cli_ints_free(&a.depths);
    return cli_outputs_finish(rc);
}
