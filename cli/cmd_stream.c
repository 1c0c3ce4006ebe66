/*
 * cmd_stream.c — `qkv stream`: the attention sink, tested. The perplexity of
 * a long text, every token scored once (qkv_stream_score, src/probe/stream.c),
 * under six ways of holding the KV cache:
 *   full            every earlier token within --ctx
 *   window/orig     the last W keys, evicted; keys at their original positions
 *   window/shifted  the same, the kept keys re-rotated to their cache rows
 *   sinks/orig      the first S keys and the last W - S, original positions
 *   sinks/shifted   the same, re-indexed within the cache (StreamingLLM)
 *   recompute       the last W tokens run afresh before each chunk
 * Each variant runs on a model opened with just the KV rows it needs, so the
 * KV bytes reported are what it holds. Prints a table or JSON and draws the
 * mean NLL per chunk as an SVG.
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

#define DEFAULT_TEXT "/usr/share/common-licenses/GPL-3"
#define N_VARIANTS 6

typedef struct {
    const char *name, *positions, *colour, *dash; /* dash: the plot's stroke-dasharray, NULL: solid */
    qkv_stream_params p;
    float *nll;          /* [n - 1] */
    double ppl, tokens_per_s;
    int64_t kv_bytes;
} variant;

/* Mean NLL of chunk i of v: tokens [i C, min((i + 1) C, n - 1)) scored. */
static double chunk_mean(const variant *v, int i, int C, int n) {
    const int a = i * C, b = (i + 1) * C < n - 1 ? (i + 1) * C : n - 1;
    double s = 0;
    for (int t = a; t < b; t++) s += v->nll[t];
    return s / (b - a);
}

/* The mean NLL of each chunk at the chunk's middle token, one line per
 * variant. 0 or 2. */
static int write_svg(FILE *f, const variant *vs, int n, int C, const char *title) {
    const int nc = (n - 1 + C - 1) / C;
    double *mid = malloc((size_t)nc * sizeof *mid), *nll = malloc((size_t)N_VARIANTS * nc * sizeof *nll);
    if (!mid || !nll) {
        free(mid), free(nll);
        return cli_fail("out of memory");
    }
    char names[N_VARIANTS][64], x_title[64];
    qkv_chart_series lines[N_VARIANTS];
    for (int i = 0; i < nc; i++) mid[i] = i * C + (((i + 1) * C < n - 1 ? (i + 1) * C : n - 1) - i * C) / 2;
    for (int k = 0; k < N_VARIANTS; k++) {
        for (int i = 0; i < nc; i++) nll[k * nc + i] = chunk_mean(&vs[k], i, C, n);
        snprintf(names[k], sizeof names[k], "%s (ppl %.2f)", vs[k].name, vs[k].ppl);
        lines[k] = (qkv_chart_series){.name = names[k], .x = mid, .y = nll + k * nc, .n = nc, .colour = vs[k].colour,
                                      .dash = vs[k].dash, .width = 1.5};
    }
    snprintf(x_title, sizeof x_title, "token position (chunks of %d)", C);
    const qkv_chart_box box = {.x = 70, .y = 60, .w = 710, .h = 320, .x_title = x_title,
                               .y_title = "mean NLL per chunk (nats)", .x_lo = 0, .x_hi = n - 1, .x_whole = 1,
                               .legend_cols = 3};
    qkv_chart_begin(f, 820, box.y + box.h + qkv_chart_below(&box, N_VARIANTS), title);
    qkv_chart_lines(f, &box, lines, N_VARIANTS);
    qkv_chart_end(f);
    free(mid), free(nll);
    return 0;
}

/* The progress of a variant: its tokens run on top of the variants before it. */
static int report(void *user, int64_t done, int64_t total) {
    (void)total;
    cli_progress_update(*(const int64_t *)user + done);
    return 0;
}

/* Runs one variant on a model holding the rows it needs; 0 or 2. */
static int run_variant(variant *v, const char *model, const int32_t *ids, int n, qkv_dtype dtype, int threads) {
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params mp = {.n_ctx = qkv_stream_rows(&v->p, n), .kv_dtype = dtype, .n_threads = threads};
    if (qkv_model_open(&m, model, &mp, &err)) return cli_model_fail(&err, model);
    const qkv_model_config c = *qkv_model_get_config(m); /* a copy: read after the model is closed */
    int rows = 0;
    const double t0 = cli_now_s();
    qkv_status st = qkv_stream_score(v->nll, &rows, m, ids, n, &v->p, &err);
    const double dt = cli_now_s() - t0;
    qkv_model_close(m);
    if (st) return cli_fail("%s: %s", v->name, err.msg);
    double s = 0;
    for (int t = 0; t < n - 1; t++) s += v->nll[t];
    v->ppl = exp(s / (n - 1));
    v->tokens_per_s = (n - 1) / (dt > 0 ? dt : 1e-9);
    v->kv_bytes = (int64_t)rows * c.n_layer * 2 * c.n_kv_head * c.head_dim * (int64_t)qkv_dtype_size(dtype);
    return 0;
}

typedef struct {
    cli_prompt_args pa;
    const char *model, *svg;
    int json, threads, window, sinks, chunk, ctx, via_mask, dtype;
    cli_progress_flags pf;
} stream_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(stream_args *a, int argc, char **argv) {
    *a = (stream_args){.model = CLI_DEFAULT_MODEL, .window = 256, .sinks = 4, .chunk = 64, .dtype = QKV_DTYPE_F32};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "--window", .kind = CLI_INT, .dest = &a->window, .lo = 1, .hi = 1 << 20, .metavar = "W",
         .help = "keys a row sees under window and sinks (default 256)"},
        {.name = "--sinks", .kind = CLI_INT, .dest = &a->sinks, .lo = 0, .hi = 1 << 20, .metavar = "S",
         .help = "of those, the first S tokens kept (default 4; S < W)"},
        {.name = "--chunk", .kind = CLI_INT, .dest = &a->chunk, .lo = 1, .hi = 1 << 20, .metavar = "C",
         .help = "tokens per forward call; eviction before each (default 64)"},
        {.name = "--max-tokens", .kind = CLI_INT, .dest = &a->pa.max_tokens, .lo = 2, .hi = 1 << 24, .metavar = "N",
         .help = "score the first N tokens (default: all)"},
        {.name = "--ctx", .kind = CLI_INT, .dest = &a->ctx, .lo = 2, .hi = 1 << 24, .metavar = "N",
         .help = "full: keys within the last N (default the model's n_ctx;\nbeyond it, evicted as window/orig)"},
        {.name = "--via-mask", .kind = CLI_BOOL, .dest = &a->via_mask,
         .help = "window/orig and sinks/orig by the mask over a full cache\ninstead of eviction (same NLLs, KV grows)"},
        CLI_FLAG_KV_DTYPE(&a->dtype, "KV cache storage (default f32)"),
        CLI_FLAG_JSON(&a->json, "everything as JSON on stdout"),
        {.name = "--svg", .kind = CLI_STRING, .dest = &a->svg, .metavar = "FILE",
         .help = "plot: mean NLL per chunk, one line per variant"},
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {
        .name = "stream", .usage = "[-m MODEL] [-f FILE | -p TEXT | --tokens IDS] [flags]",
        .about = "Perplexity of a text (default " DEFAULT_TEXT ") with a bounded KV cache: full context,\n"
        "a sliding window, attention sinks + window (StreamingLLM), the window recomputed per chunk;\n"
        "window and sinks with keys at their original positions and re-indexed within the cache.",
        .flags = flags};
    return cli_parse(&cmd, argc, argv);
}

/* The six variants of a, their NLL arrays of n - 1 allocated; 0 or 2. */
static int variants_init(variant *vs, const stream_args *a, int n) {
    const qkv_stream_cache orig = a->via_mask ? QKV_STREAM_MASK : QKV_STREAM_EVICT;
    const variant all[N_VARIANTS] = {
        {.name = "full", .positions = "absolute", .colour = "#333333", .dash = NULL,
         .p = {.policy = QKV_STREAM_FULL}},
        {.name = "window/orig", .positions = "original", .colour = "#e8590c", .dash = NULL,
         .p = {.policy = QKV_STREAM_WINDOW, .cache = orig}},
        {.name = "window/shifted", .positions = "shifted", .colour = "#e8590c", .dash = "5 4",
         .p = {.policy = QKV_STREAM_WINDOW, .cache = QKV_STREAM_SHIFT}},
        {.name = "sinks/orig", .positions = "original", .colour = "#1f5fbf", .dash = NULL,
         .p = {.policy = QKV_STREAM_SINKS, .cache = orig}},
        {.name = "sinks/shifted", .positions = "shifted", .colour = "#1f5fbf", .dash = "5 4",
         .p = {.policy = QKV_STREAM_SINKS, .cache = QKV_STREAM_SHIFT}},
        {.name = "recompute", .positions = "fresh", .colour = "#2b8a3e", .dash = "2 3",
         .p = {.policy = QKV_STREAM_RECOMPUTE}},
    };
    int rc = 0;
    for (int k = 0; k < N_VARIANTS; k++) {
        vs[k] = all[k];
        vs[k].p.window = a->window;
        vs[k].p.sinks = a->sinks;
        vs[k].p.chunk = a->chunk;
        if (!(vs[k].nll = malloc((size_t)(n - 1) * sizeof(float)))) rc = cli_fail("out of memory");
    }
    return rc;
}

/* Every variant over ids[n], full's keys bounded by the context; *ctx: the
 * context full ran with (0: the model's). 0 or 2 after an error line. */
static int compute(variant *vs, int *ctx, const stream_args *a, const int32_t *ids, int n) {
    qkv_error err = {0};
    qkv_gguf *g = NULL;
    qkv_model_config cfg;
    int rc = 0;
    if (qkv_gguf_open(&g, a->model, &err) || qkv_model_config_read(&cfg, g, &err)) rc = cli_model_fail(&err, a->model);
    qkv_gguf_close(g);
    if (!rc) {
        if (!*ctx) *ctx = cfg.n_ctx_train < QKV_MODEL_DEFAULT_CTX ? cfg.n_ctx_train : QKV_MODEL_DEFAULT_CTX;
        if (n > *ctx) /* full: keys within the last ctx, original positions */
            vs[0].p = (qkv_stream_params){.policy = QKV_STREAM_WINDOW, .cache = QKV_STREAM_EVICT, .window = *ctx,
                                          .chunk = a->chunk};
    }
    int64_t steps = 0, before[N_VARIANTS]; /* tokens run, in all and before variant k */
    for (int k = 0; k < N_VARIANTS; k++) {
        before[k] = steps;
        steps += qkv_stream_steps(&vs[k].p, n);
        if (cli_progress_enabled()) vs[k].p.progress = report, vs[k].p.progress_user = &before[k];
    }
    if (!rc) cli_progress_start("stream", steps, "tokens");
    for (int k = 0; k < N_VARIANTS && !rc; k++) {
        cli_progress_label("stream %s (%d/%d)", vs[k].name, k + 1, N_VARIANTS);
        rc = run_variant(&vs[k], a->model, ids, n, (qkv_dtype)a->dtype, a->threads);
    }
    cli_progress_finish();
    return rc;
}

static void print_json(const variant *vs, const stream_args *a, const char *base, int n, int ctx) {
    const int nc = (n - 1 + a->chunk - 1) / a->chunk;
    printf("{\n  \"model\": ");
    cli_json_string(stdout, base);
    printf(",\n  \"n_tokens\": %d,\n  \"window\": %d,\n  \"sinks\": %d,\n  \"chunk\": %d,\n  \"ctx\": %d,\n"
           "  \"kv_dtype\": \"%s\",\n  \"variants\": [\n",
           n, a->window, a->sinks, a->chunk, ctx, qkv_dtype_name((qkv_dtype)a->dtype));
    for (int k = 0; k < N_VARIANTS; k++)
        printf("    {\"name\": \"%s\", \"positions\": \"%s\", \"ppl\": %.6g, \"tokens_per_s\": %.1f, "
               "\"kv_bytes\": %lld}%s\n",
               vs[k].name, vs[k].positions, vs[k].ppl, vs[k].tokens_per_s, (long long)vs[k].kv_bytes,
               k + 1 < N_VARIANTS ? "," : "");
    printf("  ],\n  \"chunks\": [\n");
    for (int i = 0; i < nc; i++) {
        printf("    {\"start\": %d, \"nll\": [", i * a->chunk);
        for (int k = 0; k < N_VARIANTS; k++) printf("%s%.5f", k ? ", " : "", chunk_mean(&vs[k], i, a->chunk, n));
        printf("]}%s\n", i + 1 < nc ? "," : "");
    }
    printf("  ]\n}\n");
}

static void print_table(const variant *vs, const stream_args *a, const char *base, const char *src, int n,
                        double seconds) {
    printf("%s on %s: %d tokens, %d scored; window W = %d, sinks S = %d, chunks of %d, KV %s\n\n", base, src, n, n - 1,
           a->window, a->sinks, a->chunk, qkv_dtype_name((qkv_dtype)a->dtype));
    printf("%-16s %-10s %12s %12s %14s\n", "variant", "positions", "perplexity", "tokens/s", "peak KV bytes");
    for (int k = 0; k < N_VARIANTS; k++)
        printf("%-16s %-10s %12.3f %12.1f %14lld\n", vs[k].name, vs[k].positions, vs[k].ppl, vs[k].tokens_per_s,
               (long long)vs[k].kv_bytes);
    printf("\n%.1f s in all\n", seconds);
}

int cmd_stream(int argc, char **argv) {
    stream_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    cli_progress_init(&a.pf);
    if (a.sinks >= a.window) return cli_fail("--sinks %d must be below --window %d", a.sinks, a.window);
    if (!a.pa.text && !a.pa.file && !a.pa.tokens) a.pa.file = DEFAULT_TEXT;
    FILE *svg_f = a.svg ? cli_output_stream(a.svg) : NULL;
    if (a.svg && !svg_f) return CLI_EXIT_BAD_INPUT;
    cli_prompt pr;
    if ((rc = cli_prompt_load_from(&pr, &a.pa, a.model, 0))) return cli_outputs_finish(rc);
    const int n = pr.n;
    variant vs[N_VARIANTS] = {{0}};
    if (n < 2) {
        cli_prompt_free(&pr);
        return cli_outputs_finish(cli_fail("the text has %d token%s; scoring needs at least 2", n, n == 1 ? "" : "s"));
    }
    int ctx = a.ctx;
    const double t_all = cli_now_s();
    if ((rc = variants_init(vs, &a, n)) || (rc = compute(vs, &ctx, &a, pr.ids, n))) goto done;
    const double seconds = cli_now_s() - t_all;
    const char *base = cli_basename(a.model), *src = a.pa.file ? cli_basename(a.pa.file) : "the text";
    char title[512];
    snprintf(title, sizeof title, "%s on %s, %d tokens: mean NLL per chunk of %d, W = %d, S = %d", base, src, n,
             a.chunk, a.window, a.sinks);
    if (a.svg) { /* the plot is on disk before anything goes to stdout */
        if ((rc = write_svg(svg_f, vs, n, a.chunk, title)) || (rc = cli_outputs_commit())) goto done;
    }
    if (a.json) print_json(vs, &a, base, n, ctx);
    else print_table(vs, &a, base, src, n, seconds);
    if (a.svg) fprintf(a.json ? stderr : stdout, "wrote %s\n", a.svg);
done:
    for (int k = 0; k < N_VARIANTS; k++) free(vs[k].nll);
    cli_prompt_free(&pr);
    return cli_outputs_finish(rc);
}
