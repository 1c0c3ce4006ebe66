/*
 * cmd_sinks.c — `qkv sinks`: the attention sink, measured over long text.
 * One forward pass with the sinks probe (src/probe/sinks.c) as the attention
 * hook: every query row's weight on token 0 and on the first k tokens comes
 * from the kernel's own LSE and k dot products; a sample of rows is
 * recomputed in full for its strongest other key, for comparison. Prints a
 * layer x head table, or JSON, and draws an SVG plot.
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

typedef struct {
    double sink, first, top_other, sink_top;
} layer_mean;

static layer_mean mean_of(qkv_sinks *s, int l, int nh) {
    layer_mean m = {0, 0, 0, 0};
    for (int h = 0; h < nh; h++) {
        const qkv_sinks_head *x = qkv_sinks_get(s, l, h);
        m.sink += x->sink / nh;
        m.first += x->first / nh;
        m.top_other += x->top_other / nh;
        m.sink_top += x->sink_top / nh;
    }
    return m;
}

/* Per layer: the mean weight on token 0 (each head's as a dot), on the first
 * k tokens, and on the strongest other key of the sampled rows. 0 or 2. */
static int write_svg(FILE *f, qkv_sinks *s, int nl, int nh, const char *title, int k) {
    double *x = malloc((size_t)nl * nh * sizeof *x), *y = malloc((size_t)nl * nh * sizeof *y),
           *mean = malloc((size_t)3 * nl * sizeof *mean);
    if (!x || !y || !mean) {
        free(x), free(y), free(mean);
        return cli_fail("out of memory");
    }
    for (int l = 0; l < nl; l++) {
        const layer_mean m = mean_of(s, l, nh);
        mean[l] = m.sink, mean[nl + l] = m.first, mean[2 * nl + l] = m.top_other;
        for (int h = 0; h < nh; h++) x[l * nh + h] = l, y[l * nh + h] = qkv_sinks_get(s, l, h)->sink;
    }
    char first_k[64];
    snprintf(first_k, sizeof first_k, "tokens 0..%d", k - 1);
    const qkv_chart_series lines[] = {
        {.x = x, .y = y, .n = nl * nh, .colour = "#1f5fbf", .dot = 2.5, .dot_opacity = 0.35, .no_line = 1},
        {.name = "token 0: mean of the heads (dots: each head)", .y = mean, .n = nl, .colour = "#1f5fbf"},
        {.name = first_k, .y = mean + nl, .n = nl, .colour = "#1f5fbf", .dash = "5 4"},
        {.name = "strongest other key (sampled rows)", .y = mean + 2 * nl, .n = nl, .colour = "#e8590c"},
    };
    const qkv_chart_box box = {.x = 70, .y = 60, .w = 650, .h = 300, .x_title = "layer",
                               .y_title = "mean attention weight", .y_lo = 0, .y_hi = 1, .x_whole = 1};
    qkv_chart_begin(f, 760, box.y + box.h + qkv_chart_below(&box, 3), title);
    qkv_chart_lines(f, &box, lines, 4);
    qkv_chart_end(f);
    free(x), free(y), free(mean);
    return 0;
}

/* Layer l's sliding window, 0 for a global layer. */
static int window_of(const qkv_model_config *c, int l) {
    qkv_layer_attn a;
    qkv_model_layer_attn(&a, c, l);
    return a.window;
}

typedef struct {
    cli_prompt_args pa;
    const char *model, *svg;
    int json, threads, verbose, every;
    cli_progress_flags pf;
    qkv_sinks_params sp; /* every: set from the row count unless given */
} sinks_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(sinks_args *a, int argc, char **argv) {
    *a = (sinks_args){.model = CLI_DEFAULT_MODEL, .sp = qkv_sinks_params_default()};
    a->pa.max_tokens = 2048;
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "--max-tokens", .kind = CLI_INT, .dest = &a->pa.max_tokens, .lo = 2, .hi = 1 << 20, .metavar = "N",
         .help = "use the first N tokens (default 2048; at most the model's context)"},
        {.name = "--first", .kind = CLI_INT, .dest = &a->sp.n_first, .lo = 1, .hi = 4096, .metavar = "K",
         .help = "also measure the weight on tokens 0..K-1 (default 4)"},
        {.name = "--skip", .kind = CLI_INT, .dest = &a->sp.skip, .lo = 0, .hi = 1 << 20, .metavar = "S",
         .help = "leave out query rows at positions < S (default 16)"},
        {.name = "--every", .kind = CLI_INT, .dest = &a->every, .lo = 1, .hi = 1 << 20, .metavar = "E",
         .help = "recompute every E-th row in full for its strongest other key\n(default: about 128 rows per head)"},
        CLI_FLAG_JSON(&a->json, "everything as JSON on stdout"),
        {.name = "--svg", .kind = CLI_STRING, .dest = &a->svg, .metavar = "FILE",
         .help = "plot: per layer, weight on token 0 (each head and the mean)\nagainst the strongest other key"},
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_VERBOSE(&a->verbose),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {.name = "sinks", .usage = "[-m MODEL] (-f FILE | -p TEXT | --tokens IDS) [flags]",
                             .about = "How much attention piles on the first tokens (the attention sink), per layer and head,\n"
                             "over long text: each row's weight on token 0 taken from the kernel's LSE.",
                             .flags = flags};
    return cli_parse(&cmd, argc, argv);
}

/* The model over the prompt, the sinks probe as its attention hook: *m and
 * *s (close both either way); 0 or 2 after an error line. */
static int compute(qkv_model **m, qkv_sinks **s, const sinks_args *a, const cli_prompt *pr) {
    const int n = pr->n;
    qkv_error err = {0};
    qkv_model_params mp = {.n_ctx = n, .n_threads = a->threads};
    if (qkv_model_open(m, a->model, &mp, &err)) return cli_fail("%s", err.msg);
    const qkv_model_config *cfg = qkv_model_get_config(*m);
    if (n > cfg->n_ctx_train)
        return cli_fail("%d tokens exceed the model's context of %d (use --max-tokens)", n, cfg->n_ctx_train);
    if (qkv_sinks_init(s, cfg, &a->sp, &err)) return cli_fail("%s", err.msg);
    const qkv_hook hooks[] = {{.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_sinks_hook, .user = *s},
                              CLI_PROGRESS_LAYER_HOOK};
    cli_progress_start("sinks", cfg->n_layer, "layers");
    const qkv_forward_opts fo = {.hooks = hooks, .n_hooks = cli_progress_enabled() ? 2 : 1};
    if (qkv_model_forward(*m, NULL, pr->ids, n, 0, &fo, &err)) return cli_fail("%s", err.msg);
    cli_progress_finish();
    return 0;
}

static void print_json(qkv_sinks *s, const qkv_model_config *cfg, const sinks_args *a, const char *base, int n) {
    const int nl = cfg->n_layer, nh = cfg->n_head;
    printf("{\n  \"model\": ");
    cli_json_string(stdout, base);
    printf(",\n  \"n_tokens\": %d,\n  \"skip\": %d,\n  \"first\": %d,\n  \"every\": %d,\n  \"layers\": [\n", n, a->sp.skip,
           a->sp.n_first, a->sp.every);
    for (int l = 0; l < nl; l++) {
        layer_mean lm = mean_of(s, l, nh);
        printf("    {\"layer\": %d, \"window\": %d, \"sink\": %.6f, \"first\": %.6f, \"top_other\": %.6f, "
               "\"sink_top\": %.6f, \"heads\": [\n",
               l, window_of(cfg, l), lm.sink, lm.first, lm.top_other, lm.sink_top);
        for (int h = 0; h < nh; h++) {
            const qkv_sinks_head *x = qkv_sinks_get(s, l, h);
            printf("      {\"head\": %d, \"sink\": %.6f, \"first\": %.6f, \"top_other\": %.6f, "
                   "\"top_other_dist\": %.2f, \"sink_top\": %.4f, \"entropy\": %.4f, \"rows\": %lld, "
                   "\"sampled\": %lld}%s\n",
                   h, x->sink, x->first, x->top_other, x->top_other_dist, x->sink_top, x->entropy,
                   (long long)x->n_rows, (long long)x->n_sampled, h + 1 < nh ? "," : "");
        }
        printf("    ]}%s\n", l + 1 < nl ? "," : "");
    }
    printf("  ]\n}\n");
}

static void print_table(qkv_sinks *s, const qkv_model_config *cfg, const sinks_args *a, const char *title, int n) {
    const int nl = cfg->n_layer, nh = cfg->n_head;
    printf("%s\n", title);
    printf("weight on token 0 per head (mean over query rows); last columns: layer means of the weight on\n"
           "token 0, on tokens 0..%d, of each row's strongest other key (1 row in %d, in full) and the\n"
           "share of those rows whose strongest key is token 0\n\n",
           a->sp.n_first - 1, a->sp.every);
    printf("layer");
    for (int h = 0; h < nh; h++) printf("   h%-2d", h);
    printf("  | token 0  0..%-3d  other  top=0\n", a->sp.n_first - 1);
    for (int l = 0; l < nl; l++) {
        printf("%5d", l);
        for (int h = 0; h < nh; h++) printf("  %.2f", qkv_sinks_get(s, l, h)->sink);
        layer_mean lm = mean_of(s, l, nh);
        printf("  |   %.3f  %.3f  %.3f  %4.0f%%\n", lm.sink, lm.first, lm.top_other, 100 * lm.sink_top);
    }
    double all = 0, other = 0;
    for (int l = 0; l < nl; l++) {
        layer_mean lm = mean_of(s, l, nh);
        all += lm.sink / nl;
        other += lm.top_other / nl;
    }
    printf("\nall layers: %.3f of each row's attention goes to token 0; the strongest other key gets %.3f\n", all,
           other);
    if (!cfg->window) return;
    /* a family with sliding layers: the two kinds apart */
    double kind_sink[2] = {0}, kind_other[2] = {0};
    int kind_n[2] = {0};
    for (int l = 0; l < nl; l++) {
        const int k = window_of(cfg, l) > 0;
        layer_mean lm = mean_of(s, l, nh);
        kind_sink[k] += lm.sink, kind_other[k] += lm.top_other, kind_n[k]++;
    }
    for (int k = 0; k < 2; k++)
        if (kind_n[k])
            printf("%s layers (%d): token 0 gets %.3f, the strongest other key %.3f%s\n", k ? "sliding" : "global",
                   kind_n[k], kind_sink[k] / kind_n[k], kind_other[k] / kind_n[k],
                   k && n > cfg->window ? " (rows past the window cannot see token 0)" : "");
}

int cmd_sinks(int argc, char **argv) {
    sinks_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    cli_progress_init(&a.pf);
    FILE *svg_f = a.svg ? cli_output_stream(a.svg) : NULL;
    if (a.svg && !svg_f) return CLI_EXIT_BAD_INPUT;
    cli_prompt pr;
    if ((rc = cli_prompt_load_from(&pr, &a.pa, a.model, 0))) return cli_outputs_finish(rc);
    const int n = pr.n;
    if (a.sp.skip >= n) {
        cli_prompt_free(&pr);
        return cli_outputs_finish(cli_fail("--skip %d leaves no query rows of the %d tokens", a.sp.skip, n));
    }
    a.sp.every = a.every ? a.every : ((n - a.sp.skip) / 128 > 1 ? (n - a.sp.skip) / 128 : 1);
    a.sp.n_threads = a.threads;
    const double t0 = cli_now_s();
    qkv_model *m = NULL;
    qkv_sinks *s = NULL;
    if ((rc = compute(&m, &s, &a, &pr))) goto done;
    const double t1 = cli_now_s();
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const char *base = cli_basename(a.model), *src = a.pa.file ? cli_basename(a.pa.file) : "the prompt";
    char title[512];
    snprintf(title, sizeof title, "%s on %s, first %d tokens: attention on token 0 (rows %d..%d)", base, src, n,
             a.sp.skip, n - 1);
    if (a.svg) { /* the plot is on disk before anything goes to stdout */
        if ((rc = write_svg(svg_f, s, cfg->n_layer, cfg->n_head, title, a.sp.n_first)) ||
            (rc = cli_outputs_commit()))
            goto done;
    }
    if (a.json) print_json(s, cfg, &a, base, n);
    else print_table(s, cfg, &a, title, n);
    if (a.svg) fprintf(a.json ? stderr : stdout, "wrote %s\n", a.svg);
    if (a.verbose) fprintf(stderr, "qkv sinks: %d tokens, %.2f s, peak RSS %.1f MiB\n", n, t1 - t0, cli_peak_rss_mib());
done:
    cli_progress_finish();
    qkv_sinks_free(s);
    qkv_model_close(m);
    cli_prompt_free(&pr);
    return cli_outputs_finish(rc);
}
