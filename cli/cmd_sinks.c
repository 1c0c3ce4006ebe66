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

static void write_svg(FILE *f, qkv_sinks *s, int nl, int nh, const char *title, int k) {
    const int W = 760, H = 470, x0 = 60, y0 = 50, pw = 660, ph = 300;
#define X(l) (x0 + (nl > 1 ? (double)(l) * pw / (nl - 1) : pw / 2.0))
#define Y(v) (y0 + ph - (v) * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">", x0);
    for (const char *p = title; *p; p++)
        fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
    fputs("</text>\n", f);
    for (int i = 0; i <= 10; i += 2) {
        const double v = i / 10.0;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x0, x0 + pw, Y(v), Y(v));
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#666\">%.1f</text>\n", x0 - 6, Y(v) + 4, v);
    }
    for (int l = 0; l < nl; l += nl > 16 ? 5 : 1)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%d</text>\n", X(l), y0 + ph + 16, l);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">layer</text>\n", x0 + pw / 2.0,
            y0 + ph + 34);
    fprintf(f, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">mean "
               "attention weight</text>\n",
            y0 + ph / 2.0);
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#1f5fbf\" fill-opacity=\"0.35\"/>\n", X(l),
                    Y(qkv_sinks_get(s, l, h)->sink));
    static const struct { const char *colour, *dash; int which; } lines[] = {
        {"#1f5fbf", "", 0}, {"#1f5fbf", "5 4", 1}, {"#e8590c", "", 2}};
    for (int i = 0; i < 3; i++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\" points=\"",
                lines[i].colour, lines[i].dash);
        for (int l = 0; l < nl; l++) {
            layer_mean m = mean_of(s, l, nh);
            double v = lines[i].which == 0 ? m.sink : lines[i].which == 1 ? m.first : m.top_other;
            fprintf(f, "%.1f,%.1f ", X(l), Y(v));
        }
        fputs("\"/>\n", f);
    }
    const char *legend[3] = {"token 0: mean of the heads (dots: each head)", NULL,
                             "strongest other key (sampled rows)"};
    char first_k[64];
    snprintf(first_k, sizeof first_k, "tokens 0..%d", k - 1);
    legend[1] = first_k;
    for (int i = 0; i < 3; i++) {
        const int ly = y0 + ph + 52 + i * 18, lx = x0;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
                   "stroke-dasharray=\"%s\"/>\n<text x=\"%d\" y=\"%d\" fill=\"#333\">%s</text>\n",
                lx, lx + 22, ly, ly, lines[i].colour, lines[i].dash, lx + 28, ly + 4, legend[i]);
    }
    fputs("</svg>\n", f);
#undef X
#undef Y
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
        write_svg(svg_f, s, cfg->n_layer, cfg->n_head, title, a.sp.n_first);
        if ((rc = cli_outputs_commit())) goto done;
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
