/*
 * cmd_inspect.c — `qkv inspect`: who looked at whom. Runs the model over a
 * prompt once, with the inspector (src/probe/inspect.c) as its attention
 * hook: each requested layer/head row is recomputed from that layer's q, K
 * and the LSE the kernel returned, and streamed to the outputs as it comes —
 * an HTML page, a PNG, a .npy [layers, heads, n, n] and JSON statistics —
 * so no output needs the maps of all layers and heads at once.
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

/* --npy refuses arrays above this many floats (1 GiB): 16 maps at 4,096 tokens. */
#define NPY_MAX_FLOATS ((int64_t)1 << 28)

/* "0,3,5-7" within [0, limit) into a malloc'd list; "all" gives NULL, 0. */
static int parse_list(int **out, int *n, const char *flag, const char *s, int limit) {
    *out = NULL;
    *n = 0;
    if (!strcmp(s, "all")) return 0;
    int cap = 16, *v = malloc((size_t)cap * sizeof(int));
    const char *p = s;
    while (v) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) break;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q) break;
        }
        if (a < 0 || b < a || b >= limit) {
            free(v);
            return cli_fail("%s: '%s' is outside [0, %d] or not increasing", flag, s, limit - 1);
        }
        for (long x = a; x <= b; x++) {
            for (int i = 0; i < *n; i++)
                if (v[i] == x) {
                    free(v);
                    return cli_fail("%s: %ld is listed twice", flag, x);
                }
            if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof(int));
            if (!v) break;
            v[(*n)++] = (int)x;
        }
        if (!*end) {
            *out = v;
            return 0;
        }
        if (*end != ',') break;
        p = end + 1;
    }
    free(v);
    return cli_fail("%s: '%s' is not a list like 0,3,5-7 or 'all'", flag, s);
}

/* --------------------------------------------------------------- parse */

typedef struct {
    cli_prompt_args pa;
    const char *model, *layers_s, *heads_s, *html, *png, *npy;
    int json, log_scale, threads, verbose, n_first;
    cli_progress_flags pf;
} inspect_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(inspect_args *a, int argc, char **argv) {
    *a = (inspect_args){.model = CLI_DEFAULT_MODEL, .n_first = 4};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "--max-tokens", .kind = CLI_INT, .dest = &a->pa.max_tokens, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "keep the first N tokens (default: all, up to the model's context)"},
        {.name = "--layers", .kind = CLI_STRING, .dest = &a->layers_s, .metavar = "LIST",
         .help = "layers to inspect, e.g. 0,5,10-12 (default: all)"},
        {.name = "--heads", .kind = CLI_STRING, .dest = &a->heads_s, .metavar = "LIST",
         .help = "query heads, e.g. 0-3 (default: all)"},
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "one self-contained page: grid of maps, large view, hover, log scale"},
        {.name = "--png", .kind = CLI_STRING, .dest = &a->png, .metavar = "FILE",
         .help = "heatmaps (viridis) with token labels; --log for log scale"},
        {.name = "--npy", .kind = CLI_STRING, .dest = &a->npy, .metavar = "FILE",
         .help = "float32 [layers, heads, n, n]; refused above 1 GiB (2^28 floats):\n" "choose fewer maps with --layers/--heads"},
        CLI_FLAG_JSON(&a->json, "statistics on stdout: per layer/head weight on token 0 (and on the\n"
                                "first --first K tokens), entropy, top attended key per query"),
        {.name = "--first", .kind = CLI_INT, .dest = &a->n_first, .lo = 1, .hi = 1 << 20, .metavar = "K",
         .help = "keys counted as the first ones in the statistics (default 4)"},
        {.name = "--log", .kind = CLI_BOOL, .dest = &a->log_scale, .help = "PNG colours by log10(weight) over 4 decades"},
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_VERBOSE(&a->verbose),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {.name = "inspect", .usage = "[-m MODEL] (-p TEXT | -f FILE | --tokens IDS) [outputs] [flags]",
                             .about = "Attention maps of a real model on your text: every layer x head, each row\n"
                             "recomputed from the layer's q, K and the flash kernel's LSE.",
                             .notes = "Without outputs, prints the mean weight on token 0 of every layer and head.", .flags = flags};
    return cli_parse(&cmd, argc, argv);
}

/* The maps asked for: --layers and --heads (all when absent), layers
 * increasing; 0, or 2 after an error line. */
static int select_maps(int **layers, int *nl, int **heads, int *nh, const inspect_args *a, const qkv_model_config *cfg) {
    if ((a->layers_s && parse_list(layers, nl, "--layers", a->layers_s, cfg->n_layer)) ||
        (a->heads_s && parse_list(heads, nh, "--heads", a->heads_s, cfg->n_head)))
        return 2;
    if (!*layers) {
        *nl = cfg->n_layer;
        *layers = malloc((size_t)*nl * sizeof(int));
        for (int i = 0; *layers && i < *nl; i++) (*layers)[i] = i;
    }
    if (!*heads) {
        *nh = cfg->n_head;
        *heads = malloc((size_t)*nh * sizeof(int));
        for (int i = 0; *heads && i < *nh; i++) (*heads)[i] = i;
    }
    if (!*layers || !*heads) return cli_fail("out of memory");
    for (int i = 1; i < *nl; i++)
        if ((*layers)[i] < (*layers)[i - 1]) return cli_fail("--layers: list the layers in increasing order");
    return 0;
}

/* ------------------------------------------------------------ outputs */

typedef struct {
    int n, nl, nh, n_first;
    const int *layers, *heads;
    qkv_npy_writer *npy;
    qkv_html_writer *html;
    qkv_png_maps *png;
    FILE *json;
    double *sink, *first, *entropy; /* [nl * nh] sums over rows 1 .. n-1 (entropy: all rows) */
    char *json_text;                /* --json is held until everything succeeded */
    size_t json_len;
    qkv_error err;
} inspect_out;

static int on_row(void *user, int li, int hi, int row, const float *w, int n_keys, const qkv_row_stats *s) {
    inspect_out *o = user;
    const size_t k = (size_t)li * o->nh + hi;
    if (o->npy && qkv_npy_writer_put(o->npy, w, n_keys, &o->err)) return 1;
    if (o->html && qkv_html_row(o->html, li, hi, row, w, &o->err)) return 1;
    if (o->png) qkv_png_maps_row(o->png, li, hi, row, w);
    if (row > 0) {
        o->sink[k] += s->sink;
        o->first[k] += s->first;
    }
    o->entropy[k] += s->entropy;
    if (o->json) {
        if (row == 0)
            fprintf(o->json, "%s    {\"layer\": %d, \"head\": %d, \"top\": [", k ? ",\n" : "", o->layers[li], o->heads[hi]);
        fprintf(o->json, "%s[%d, %.6f]", row ? ", " : "", s->top, s->top_weight);
        if (row == o->n - 1) {
            const double rows = o->n > 1 ? o->n - 1 : 1;
            fprintf(o->json, "],\n     \"sink_mass\": %.6f, \"first_mass\": %.6f, \"entropy\": %.6f}",
                    o->n > 1 ? o->sink[k] / rows : 1.0, o->n > 1 ? o->first[k] / rows : 1.0, o->entropy[k] / o->n);
        }
    }
    return 0;
}

/* Opens every output the rows stream into (the temporaries of cli_output_add);
 * 0, or 2 after an error line. */
static int open_outputs(inspect_out *o, const inspect_args *a, const qkv_maps_info *info, const cli_prompt *pr,
                        const char *npy_tmp, const char *html_tmp) {
    qkv_error err = {0};
    const int n = o->n;
    o->sink = calloc((size_t)o->nl * o->nh, sizeof(double));
    o->first = calloc((size_t)o->nl * o->nh, sizeof(double));
    o->entropy = calloc((size_t)o->nl * o->nh, sizeof(double));
    if (!o->sink || !o->first || !o->entropy) return cli_fail("out of memory");
    if (a->npy) {
        int64_t shape[4] = {o->nl, o->nh, n, n};
        if (qkv_npy_writer_open(&o->npy, npy_tmp, 4, shape, &err)) return cli_outputs_fail(err.msg);
    }
    if (a->html && qkv_html_open(&o->html, html_tmp, info, &err)) return cli_outputs_fail(err.msg);
    if (a->png) {
        qkv_png_params pp = {.log_scale = a->log_scale};
        if (qkv_png_maps_init(&o->png, info, &pp, &err)) return cli_fail("--png: %s", err.msg);
        if (!qkv_png_maps_has_font(o->png))
            fprintf(stderr, "qkv: note: no font at /usr/share/unifont/unifont.hex ($QKV_FONT): the PNG has no labels "
                            "(Debian: apt-get install unifont)\n");
    }
    if (a->json) {
        FILE *j = o->json = open_memstream(&o->json_text, &o->json_len);
        if (!j) return cli_fail("--json: out of memory");
        fprintf(j, "{\n  \"model\": ");
        cli_json_string(j, a->model);
        fprintf(j, ",\n  \"chat\": %s,\n  \"n_tokens\": %d,\n  \"first\": %d,\n  \"tokens\": [",
                a->pa.chat ? "true" : "false", n, o->n_first);
        for (int i = 0; i < n; i++) {
            fprintf(j, "%s{\"id\": %d, \"label\": ", i ? ", " : "", (int)pr->ids[i]);
            cli_json_string(j, pr->labels[i]);
            fprintf(j, "}");
        }
        fprintf(j, "],\n  \"maps\": [\n");
    }
    return 0;
}

/* Finishes every output and commits the files; 0, or 2 after an error line. */
static int close_outputs(inspect_out *o, const char *png_tmp) {
    qkv_error err = {0};
    if (o->json) {
        fprintf(o->json, "\n  ]\n}\n");
        const int bad = ferror(o->json) || fclose(o->json) != 0;
        o->json = NULL;
        if (bad) return cli_fail("--json: out of memory");
    }
    if (o->npy) {
        qkv_status st = qkv_npy_writer_close(o->npy, &err);
        o->npy = NULL;
        if (st) return cli_outputs_fail(err.msg);
    }
    if (o->html) {
        qkv_status st = qkv_html_close(o->html, &err);
        o->html = NULL;
        if (st) return cli_outputs_fail(err.msg);
    }
    if (o->png && qkv_png_maps_save(o->png, png_tmp, &err)) return cli_outputs_fail(err.msg);
    return cli_outputs_commit();
}

/* Drops whatever is still open (after a failure) and frees the sums. */
static void free_outputs(inspect_out *o) {
    if (o->json) fclose(o->json);
    free(o->json_text);
    if (o->npy) qkv_npy_writer_abort(o->npy);
    if (o->html) qkv_html_abort(o->html);
    qkv_png_maps_free(o->png);
    free(o->sink);
    free(o->first);
    free(o->entropy);
}

/* ------------------------------------------------------------ compute */

/* One forward pass over the prompt, the inspector on hook_pattern streaming
 * every requested row to o (and the progress line on hook_resid_post);
 * 0, or 2 after an error line. */
static int compute(inspect_out *o, qkv_model *m, const cli_prompt *pr) {
    const qkv_model_config *cfg = qkv_model_get_config(m);
    qkv_inspect_params ip = {.layers = o->layers, .n_layers = o->nl, .heads = o->heads, .n_heads = o->nh,
                             .n_first = o->n_first, .row = on_row, .user = o};
    qkv_inspect *in = NULL;
    qkv_error err = {0};
    if (qkv_inspect_init(&in, cfg, &ip, &err)) return cli_fail("%s", err.msg);
    const qkv_hook hooks[] = {{.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_inspect_hook, .user = in},
                              CLI_PROGRESS_LAYER_HOOK};
    cli_progress_start("inspect", cfg->n_layer, "layers");
    const qkv_forward_opts fo = {.hooks = hooks, .n_hooks = cli_progress_enabled() ? 2 : 1};
    int rc = 0;
    if (qkv_model_forward(m, NULL, pr->ids, pr->n, 0, &fo, &err)) rc = cli_fail("%s", o->err.msg[0] ? o->err.msg : err.msg);
    cli_progress_finish();
    qkv_inspect_free(in);
    return rc;
}

/* --------------------------------------------------------------- emit */

/* Without outputs: the mean weight on token 0, layer x head, on stdout. */
static void print_sinks(const inspect_out *o, const char *title, const cli_prompt *pr) {
    const int n = o->n;
    printf("%s\n\ntokens:", title);
    for (int i = 0; i < n && i < 64; i++) printf(" %s", pr->labels[i]);
    printf("%s\n\nmean weight on token 0 (query rows 1..%d), layer x head:\n\n  layer", n > 64 ? " ..." : "", n - 1);
    for (int h = 0; h < o->nh; h++) printf("  h%-4d", o->heads[h]);
    printf("\n");
    for (int l = 0; l < o->nl; l++) {
        printf("  %5d", o->layers[l]);
        for (int h = 0; h < o->nh; h++) printf("  %.3f", n > 1 ? o->sink[(size_t)l * o->nh + h] / (n - 1) : 1.0);
        printf("\n");
    }
    printf("\n--html, --png, --npy or --json write the maps (qkv inspect --help).\n");
}

/* What was written: --json on stdout, the files' lines (on stderr under --json). */
static void report(const inspect_out *o, const inspect_args *a, const char *title, const cli_prompt *pr) {
    if (a->json) fwrite(o->json_text, 1, o->json_len, stdout);
    FILE *msg = a->json ? stderr : stdout;
    if (!a->html && !a->png && !a->npy && !a->json) print_sinks(o, title, pr);
    if (a->npy) fprintf(msg, "wrote %s: float32 [%d, %d, %d, %d]\n", a->npy, o->nl, o->nh, o->n, o->n);
    if (a->png) fprintf(msg, "wrote %s\n", a->png);
    if (a->html) {
        char *abs = realpath(a->html, NULL);
        fprintf(msg, "wrote %s: open file://%s in a browser\n", a->html, abs ? abs : a->html);
        free(abs);
    }
}

/* ---------------------------------------------------------------- main */

int cmd_inspect(int argc, char **argv) {
    inspect_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    cli_progress_init(&a.pf);
    /* every output is declared first; the files appear only when all are written */
    const char *npy_tmp = NULL, *html_tmp = NULL, *png_tmp = NULL;
    if ((a.npy && !(npy_tmp = cli_output_add(a.npy))) || (a.html && !(html_tmp = cli_output_add(a.html))) ||
        (a.png && !(png_tmp = cli_output_add(a.png))))
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    cli_prompt pr;
    if ((rc = cli_prompt_load_from(&pr, &a.pa, a.model, 1))) return cli_outputs_finish(rc);
    const double t0 = cli_now_s();
    qkv_error err = {0};
    qkv_model *m = NULL;
    int *layers = NULL, *heads = NULL, *windows = NULL, nl = 0, nh = 0;
    inspect_out o = {.n = pr.n, .n_first = a.n_first};
    /* the model's context is the prompt: its run state and KV cache are O(n) */
    const qkv_model_params mp = {.n_ctx = pr.n, .n_threads = a.threads};
    if (qkv_model_open(&m, a.model, &mp, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const int n = pr.n;
    if (n > cfg->n_ctx_train) {
        rc = cli_fail("the prompt has %d tokens, more than the model's context of %d (use --max-tokens)", n,
                      cfg->n_ctx_train);
        goto done;
    }
    if ((rc = select_maps(&layers, &nl, &heads, &nh, &a, cfg))) goto done;
    const int64_t npy_floats = (int64_t)nl * nh * n * n;
    if (a.npy && npy_floats > NPY_MAX_FLOATS) {
        rc = cli_fail("--npy: %d layers x %d heads x %d x %d floats is %.1f GiB, above the 1 GiB limit; "
                      "choose fewer maps with --layers/--heads",
                      nl, nh, n, n, (double)npy_floats * 4 / (1 << 30));
        goto done;
    }
    o.nl = nl, o.nh = nh, o.layers = layers, o.heads = heads;
    char title[512], subtitle[256];
    snprintf(title, sizeof title, "%s%s: %d tokens, %d layer%s x %d head%s", cli_basename(a.model),
             a.pa.chat ? " (chat template)" : "", n, nl, nl == 1 ? "" : "s", nh, nh == 1 ? "" : "s");
    snprintf(subtitle, sizeof subtitle,
             "qkv %s inspect; weights recomputed from q, K and the kernel's LSE: w = exp(q\xC2\xB7k/\xE2\x88\x9A%d - lse)",
             QKV_VERSION, cfg->head_dim);
    windows = malloc((size_t)nl * sizeof(int));
    if (!windows) {
        rc = cli_fail("out of memory");
        goto done;
    }
    for (int i = 0; i < nl; i++) {
        qkv_layer_attn la;
        qkv_model_layer_attn(&la, cfg, layers[i]);
        windows[i] = la.window;
    }
    const qkv_maps_info info = {.title = title, .subtitle = subtitle, .n_tok = n, .labels = (const char *const *)pr.labels,
                                .ids = pr.ids, .layers = layers, .n_layers = nl, .heads = heads, .n_heads = nh,
                                .windows = windows};
    if ((rc = open_outputs(&o, &a, &info, &pr, npy_tmp, html_tmp)) || (rc = compute(&o, m, &pr))) goto done;
    const double t1 = cli_now_s();
    if ((rc = close_outputs(&o, png_tmp))) goto done;
    report(&o, &a, title, &pr);
    if (a.verbose)
        fprintf(stderr, "qkv inspect: %d tokens, %d maps, %.2f s, peak RSS %.1f MiB\n", n, nl * nh, t1 - t0,
                cli_peak_rss_mib());
done:
    free_outputs(&o);
    qkv_model_close(m);
    free(layers);
    free(heads);
    free(windows);
    cli_prompt_free(&pr);
    return cli_outputs_finish(rc);
}
