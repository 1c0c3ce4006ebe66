/*
 * cmd_inspect.c — `qkv inspect`: who looked at whom. Runs the model over a
 * prompt once, with the inspector (src/probe/inspect.c) as its attention
 * hook: each requested layer/head row is recomputed from that layer's q, K
 * and the LSE the kernel returned, and streamed to the outputs as it comes —
 * an HTML page, a PNG, a .npy [layers, heads, n, n] and JSON statistics —
 * so no output needs the maps of all layers and heads at once.
 * Also the prompt loader qkv sinks shares (cli_prompt_load).
 */
#include "cli.h"
#include "qkv_render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
/* --npy refuses arrays above this many floats (1 GiB): 16 maps at 4,096 tokens. */
#define NPY_MAX_FLOATS ((int64_t)1 << 28)

static const char usage_text[] =
    "usage: qkv inspect [-m MODEL] (-p TEXT | -f FILE | --ids 1,2,...) [outputs] [flags]\n"
    "  Attention maps of a real model on your text: every layer x head, each row\n"
    "  recomputed from the layer's q, K and the flash kernel's LSE.\n"
    "  -m, --model FILE      GGUF model (default " DEFAULT_MODEL ")\n"
    "  -p, --prompt TEXT     the text;  -f, --file FILE  read it from a file ('-': stdin)\n"
    "  --ids LIST            token ids instead of text, e.g. 1,9690,198\n"
    "  --chat                wrap the text as a user turn in the model's chat template\n"
    "  --max-tokens N        keep the first N tokens (default: all, up to the model's context)\n"
    "  --layers LIST         layers to inspect, e.g. 0,5,10-12 (default: all)\n"
    "  --heads LIST          query heads, e.g. 0-3 (default: all)\n"
    "  --html FILE           one self-contained page: grid of maps, large view, hover, log scale\n"
    "  --png FILE            heatmaps (viridis) with token labels; --log for log scale\n"
    "  --npy FILE            float32 [layers, heads, n, n]; refused above 1 GiB (2^28 floats):\n"
    "                        choose fewer maps with --layers/--heads\n"
    "  --json                statistics on stdout: per layer/head weight on token 0 (and on the\n"
    "                        first --first K tokens), entropy, top attended key per query\n"
    "  --first K             keys counted as the first ones in the statistics (default 4)\n"
    "  --log                 PNG colours by log10(weight) over 4 decades\n"
    "  --threads N           worker threads (default: all cores)\n"
    "  -v, --verbose         time and peak memory (RSS) on stderr\n"
    "  Without outputs, prints the mean weight on token 0 of every layer and head.\n";

/* ------------------------------------------------------------ prompt */

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

static char *read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cli_prompt_load(cli_prompt *out, const cli_prompt_args *a) {
    memset(out, 0, sizeof *out);
    int sources = !!a->text + !!a->file + !!a->ids;
    if (sources != 1) return cli_fail("give the prompt once: -p TEXT, -f FILE or --ids LIST");
    if (a->chat && a->ids) return cli_fail("--chat needs text (-p or -f), not --ids");
    qkv_error err = {0};
    qkv_gguf *g = NULL;
    if (qkv_gguf_open(&g, a->model, &err)) return cli_fail("%s", err.msg);
    qkv_tokenizer *tok = NULL;
    int rc = 0;
    char *text = NULL, *chat = NULL;
    size_t len = 0;
    if (qkv_tokenizer_load(&tok, g, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    if (a->ids) {
        int cap = 64;
        out->ids = malloc((size_t)cap * sizeof(int32_t));
        for (const char *p = a->ids; out->ids;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= qkv_tokenizer_n_vocab(tok) || (*end && *end != ',')) {
                rc = cli_fail("--ids: '%s' is not a list of token ids in [0, %d)", a->ids, qkv_tokenizer_n_vocab(tok));
                goto done;
            }
            if (out->n == cap) out->ids = realloc(out->ids, (size_t)(cap *= 2) * sizeof(int32_t));
            if (!out->ids) break;
            out->ids[out->n++] = (int32_t)v;
            if (!*end) break;
            p = end + 1;
        }
    } else {
        if (a->file) {
            text = read_file(a->file, &len);
            if (!text) {
                rc = cli_fail("%s: cannot read the file", a->file);
                goto done;
            }
        } else {
            len = strlen(a->text);
        }
        const char *src = text ? text : a->text;
        if (a->chat) {
            if (qkv_chat_format(&chat, g, NULL, src, &err)) {
                rc = cli_fail("--chat: %s", err.msg);
                goto done;
            }
            src = chat;
            len = strlen(chat);
        }
        int64_t bound = qkv_tokenize_bound(len), n = 0;
        out->ids = malloc((size_t)bound * sizeof(int32_t));
        if (out->ids && qkv_tokenize(tok, src, len, 1, a->chat, out->ids, bound, &n, &err)) {
            rc = cli_fail("%s", err.msg);
            goto done;
        }
        out->n = (int)(n < 0x7fffffff ? n : 0x7fffffff);
    }
    if (!out->ids) {
        rc = cli_fail("out of memory");
        goto done;
    }
    if (out->n == 0) {
        rc = cli_fail("the prompt has no tokens");
        goto done;
    }
    if (a->max_tokens > 0 && out->n > a->max_tokens) out->n = a->max_tokens;
    out->labels = calloc((size_t)out->n, sizeof(char *));
    const char **pieces = malloc((size_t)out->n * sizeof *pieces);
    size_t *lens = malloc((size_t)out->n * sizeof *lens);
    if (!out->labels || !pieces || !lens) {
        free(pieces);
        free(lens);
        rc = cli_fail("out of memory");
        goto done;
    }
    for (int i = 0; i < out->n; i++) pieces[i] = qkv_token_piece(tok, out->ids[i], &lens[i]);
    if (qkv_token_labels(out->labels, pieces, lens, out->n, &err)) rc = cli_fail("%s", err.msg);
    free(pieces);
    free(lens);
done:
    free(text);
    free(chat);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    if (rc) cli_prompt_free(out);
    return rc;
}

void cli_prompt_free(cli_prompt *p) {
    if (p->labels) qkv_token_labels_free(p->labels, p->n);
    free(p->labels);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

double cli_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
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
    qkv_error err;
} inspect_out;

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

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

int cmd_inspect(int argc, char **argv) {
    cli_prompt_args pa = {DEFAULT_MODEL, NULL, NULL, NULL, 0, 0};
    const char *layers_s = NULL, *heads_s = NULL, *html = NULL, *png = NULL, *npy = NULL;
    int json = 0, log_scale = 0, threads = 0, verbose = 0, n_first = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VALUE() (v = cli_value(argc, argv, &i))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!VALUE()) return 2;
            pa.model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!VALUE()) return 2;
            pa.text = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!VALUE()) return 2;
            pa.file = v;
        } else if (!strcmp(a, "--ids")) {
            if (!VALUE()) return 2;
            pa.ids = v;
        } else if (!strcmp(a, "--chat")) {
            pa.chat = 1;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!VALUE() || cli_parse_int(&pa.max_tokens, a, v, 1, 1 << 20)) return 2;
        } else if (!strcmp(a, "--layers")) {
            if (!VALUE()) return 2;
            layers_s = v;
        } else if (!strcmp(a, "--heads")) {
            if (!VALUE()) return 2;
            heads_s = v;
        } else if (!strcmp(a, "--html")) {
            if (!VALUE()) return 2;
            html = v;
        } else if (!strcmp(a, "--png")) {
            if (!VALUE()) return 2;
            png = v;
        } else if (!strcmp(a, "--npy")) {
            if (!VALUE()) return 2;
            npy = v;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--first")) {
            if (!VALUE() || cli_parse_int(&n_first, a, v, 1, 1 << 20)) return 2;
        } else if (!strcmp(a, "--log")) {
            log_scale = 1;
        } else if (!strcmp(a, "--threads")) {
            if (!VALUE() || cli_parse_int(&threads, a, v, 1, 4096)) return 2;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else {
            return cli_fail("inspect: unknown flag '%s' (see qkv inspect --help)", a);
        }
#undef VALUE
    }

    cli_prompt pr;
    int rc = cli_prompt_load(&pr, &pa);
    if (rc) return rc;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);

    qkv_error err = {0};
    qkv_model *m = NULL;
    qkv_inspect *in = NULL;
    int *layers = NULL, *heads = NULL, nl = 0, nh = 0;
    inspect_out o = {0};
    qkv_model_params mp = {pr.n, QKV_DTYPE_F32, threads};
    /* the model's context is the prompt: its run state and KV cache are O(n) */
    if (qkv_model_open(&m, pa.model, &mp, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    const qkv_model_config *cfg = qkv_model_get_config(m);
    if (pr.n > cfg->n_ctx_train) {
        rc = cli_fail("the prompt has %d tokens, more than the model's context of %d (use --max-tokens)", pr.n,
                      cfg->n_ctx_train);
        goto done;
    }
    if ((layers_s && parse_list(&layers, &nl, "--layers", layers_s, cfg->n_layer)) ||
        (heads_s && parse_list(&heads, &nh, "--heads", heads_s, cfg->n_head))) {
        rc = 2;
        goto done;
    }
    if (!layers) {
        nl = cfg->n_layer;
        layers = malloc((size_t)nl * sizeof(int));
        for (int i = 0; layers && i < nl; i++) layers[i] = i;
    }
    if (!heads) {
        nh = cfg->n_head;
        heads = malloc((size_t)nh * sizeof(int));
        for (int i = 0; heads && i < nh; i++) heads[i] = i;
    }
    if (!layers || !heads) {
        rc = cli_fail("out of memory");
        goto done;
    }
    for (int i = 1; i < nl; i++)
        if (layers[i] < layers[i - 1]) {
            rc = cli_fail("--layers: list the layers in increasing order");
            goto done;
        }
    const int n = pr.n;
    const int64_t npy_floats = (int64_t)nl * nh * n * n;
    if (npy && npy_floats > NPY_MAX_FLOATS) {
        rc = cli_fail("--npy: %d layers x %d heads x %d x %d floats is %.1f GiB, above the 1 GiB limit; "
                      "choose fewer maps with --layers/--heads",
                      nl, nh, n, n, (double)npy_floats * 4 / (1 << 30));
        goto done;
    }
    o.n = n;
    o.nl = nl;
    o.nh = nh;
    o.n_first = n_first;
    o.layers = layers;
    o.heads = heads;
    o.sink = calloc((size_t)nl * nh, sizeof(double));
    o.first = calloc((size_t)nl * nh, sizeof(double));
    o.entropy = calloc((size_t)nl * nh, sizeof(double));
    if (!o.sink || !o.first || !o.entropy) {
        rc = cli_fail("out of memory");
        goto done;
    }
    char title[512];
    const char *base = strrchr(pa.model, '/') ? strrchr(pa.model, '/') + 1 : pa.model;
    snprintf(title, sizeof title, "%s%s: %d tokens, %d layer%s x %d head%s", base, pa.chat ? " (chat template)" : "", n,
             nl, nl == 1 ? "" : "s", nh, nh == 1 ? "" : "s");
    char subtitle[256];
    snprintf(subtitle, sizeof subtitle,
             "qkv %s inspect; weights recomputed from q, K and the kernel's LSE: w = exp(q\xC2\xB7k/\xE2\x88\x9A%d - lse)",
             QKV_VERSION, cfg->head_dim);
    qkv_maps_info info = {title, subtitle, n, (const char *const *)pr.labels, pr.ids, layers, nl, heads, nh};
    if (npy) {
        int64_t shape[4] = {nl, nh, n, n};
        if (qkv_npy_writer_open(&o.npy, npy, 4, shape, &err)) {
            rc = cli_fail("%s", err.msg);
            goto done;
        }
    }
    if (html && qkv_html_open(&o.html, html, &info, &err)) {
        rc = cli_fail("--html: %s", err.msg);
        goto done;
    }
    if (png) {
        qkv_png_params pp = {log_scale, 0, NULL};
        if (qkv_png_maps_init(&o.png, &info, &pp, &err)) {
            rc = cli_fail("--png: %s", err.msg);
            goto done;
        }
        if (!qkv_png_maps_has_font(o.png))
            fprintf(stderr, "qkv: note: no font at /usr/share/unifont/unifont.hex ($QKV_FONT): the PNG has no labels "
                            "(Debian: apt-get install unifont)\n");
    }
    if (json) {
        o.json = stdout;
        printf("{\n  \"model\": ");
        json_string(stdout, pa.model);
        printf(",\n  \"chat\": %s,\n  \"n_tokens\": %d,\n  \"first\": %d,\n  \"tokens\": [", pa.chat ? "true" : "false", n,
               n_first);
        for (int i = 0; i < n; i++) {
            printf("%s{\"id\": %d, \"label\": ", i ? ", " : "", (int)pr.ids[i]);
            json_string(stdout, pr.labels[i]);
            printf("}");
        }
        printf("],\n  \"maps\": [\n");
    }

    qkv_inspect_params ip = {layers, nl, heads, nh, n_first, on_row, &o};
    if (qkv_inspect_init(&in, cfg, &ip, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    qkv_model_set_hook(m, qkv_inspect_hook, in);
    if (qkv_model_forward(m, NULL, pr.ids, n, 0, &err)) {
        const char *why = o.err.msg[0] ? o.err.msg : qkv_inspect_error(in);
        rc = cli_fail("%s", why ? why : err.msg);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    if (json) printf("\n  ]\n}\n");
    if (o.npy) {
        qkv_status st = qkv_npy_writer_close(o.npy, &err);
        o.npy = NULL;
        if (st) {
            rc = cli_fail("%s", err.msg);
            goto done;
        }
    }
    if (o.html) {
        qkv_status st = qkv_html_close(o.html, &err);
        o.html = NULL;
        if (st) {
            rc = cli_fail("%s", err.msg);
            goto done;
        }
    }
    if (o.png && qkv_png_maps_save(o.png, png, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    FILE *msg = json ? stderr : stdout;
    if (!html && !png && !npy && !json) {
        printf("%s\n\ntokens:", title);
        for (int i = 0; i < n && i < 64; i++) printf(" %s", pr.labels[i]);
        printf("%s\n\nmean weight on token 0 (query rows 1..%d), layer x head:\n\n  layer", n > 64 ? " ..." : "", n - 1);
        for (int h = 0; h < nh; h++) printf("  h%-4d", heads[h]);
        printf("\n");
        for (int l = 0; l < nl; l++) {
            printf("  %5d", layers[l]);
            for (int h = 0; h < nh; h++)
                printf("  %.3f", n > 1 ? o.sink[(size_t)l * nh + h] / (n - 1) : 1.0);
            printf("\n");
        }
        printf("\n--html, --png, --npy or --json write the maps (qkv inspect --help).\n");
    }
    if (npy) fprintf(msg, "wrote %s: float32 [%d, %d, %d, %d]\n", npy, nl, nh, n, n);
    if (png) fprintf(msg, "wrote %s\n", png);
    if (html) {
        char *abs = realpath(html, NULL);
        fprintf(msg, "wrote %s: open file://%s in a browser\n", html, abs ? abs : html);
        free(abs);
    }
    if (verbose)
        fprintf(stderr, "qkv inspect: %d tokens, %d maps, %.2f s, peak RSS %.1f MiB\n", n, nl * nh,
                (double)(ts1.tv_sec - ts0.tv_sec) + (double)(ts1.tv_nsec - ts0.tv_nsec) * 1e-9, cli_peak_rss_mib());
done:
    if (o.npy) qkv_npy_writer_abort(o.npy);
    if (o.html) qkv_html_abort(o.html);
    qkv_png_maps_free(o.png);
    free(o.sink);
    free(o.first);
    free(o.entropy);
    qkv_inspect_free(in);
    qkv_model_close(m);
    free(layers);
    free(heads);
    cli_prompt_free(&pr);
    return rc;
}
