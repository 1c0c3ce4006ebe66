/*
 * cmd_attribute.c — `qkv attribute`: direct logit attribution. The logit
 * difference of two tokens at the last position, logit[answer] -
 * logit[wrong], split into what each component wrote into the residual
 * stream: the embedding, each layer's attention and MLP output and, where
 * the map from a head to the residual is linear, each head (qkv_attribute,
 * src/model/attribute.c: through the final norm with this run's RMS scale
 * frozen). Prints a table or JSON; writes a heatmap page (--html) and the
 * arrays (--npy PREFIX).
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
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
    cli_prompt_args pa;
    const char *model, *answer, *wrong, *html, *npy;
    int top, json, threads, ctx, verbose;
} attribute_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(attribute_args *a, int argc, char **argv) {
    *a = (attribute_args){.model = CLI_DEFAULT_MODEL, .top = 10};
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->pa),
        {.name = "--answer", .kind = CLI_STRING, .dest = &a->answer, .metavar = "TEXT",
         .help = "the token whose logit counts +, exactly one token\n(default: the model's top-1 at the last position)"},
        {.name = "--wrong", .kind = CLI_STRING, .dest = &a->wrong, .metavar = "TEXT",
         .help = "the token whose logit counts -, exactly one token (default: the\nmodel's most likely token other than the answer: the top-2)"},
        {.name = "--top", .kind = CLI_INT, .dest = &a->top, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "heads listed in the table (default 10)"},
        CLI_FLAG_JSON(&a->json, "every share and the sums as JSON"),
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "a self-contained page: layer x head and layer x sublayer heatmaps"},
        CLI_FLAG_NPY_PREFIX(&a->npy, "float32 PREFIXheads.npy [L, Hq], PREFIXattn.npy, PREFIXmlp.npy [L]"),
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_PROBE_CTX(&a->ctx),
        CLI_FLAG_VERBOSE(&a->verbose),
        {0},
    };
    const cli_command cmd = {
        .name = "attribute", .usage = "[-m MODEL] (-p TEXT | -f FILE | --tokens IDS) [--answer TEXT --wrong TEXT] [flags]",
        .about = "Direct logit attribution: logit[answer] - logit[wrong] at the last position, split\n"
        "into the embedding's, each layer's attention and MLP output's and (where a head's\n"
        "path to the residual is linear) each head's share, each through the final norm\n"
        "with this run's RMS scale frozen. The shares add up to the logit difference.",
        .notes = "JSON: {\"model\", \"n_tokens\", \"n_layer\", \"n_head\", \"tokens\" ([{\"id\", \"piece\"}]),\n"
        "\"answer\", \"wrong\" ({\"id\", \"piece\"}), \"chosen\" (\"given\", \"top-2\" or \"runner-up\"), \"logit_diff\",\n"
        "\"total\", \"embed\", \"attn\" [L], \"mlp\" [L], \"heads\" [L][Hq] (null where not additive),\n"
        "\"heads_linear\", \"final_softcap\"}.",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed;
    if (cli_prompt_check(&a->pa)) return CLI_EXIT_BAD_INPUT;
    if (a->pa.text && !*a->pa.text) return cli_fail("-p: the text is empty");
    if (a->wrong && !a->answer) return cli_fail("--wrong needs --answer (neither: the model's top-1 and top-2)");
    return 0;
}

/* What came back, with the labels the outputs show. */
typedef struct {
    qkv_attribution at;
    int n, nl, nh;
    float softcap;              /* the model's final soft-cap, 0: none */
    char *answer_label, *wrong_label;
} attribution;

/* ----------------------------------------------------------------- output */

/* Where answer and wrong came from: both given, the model's top-1 and top-2,
 * or the given answer and the model's most likely other token. */
static const char *chosen(const attribute_args *a) {
    return a->wrong ? "given" : a->answer ? "runner-up" : "top-2";
}

/* The lines that say what the numbers are and where heads are not shares. */
static void print_notes(FILE *f, const attribution *r, const char *arch) {
    if (!r->at.heads_linear)
        fprintf(f, "heads: not additive in %s (each attention output is RMS-normed, post_attention_norm, before it "
                   "joins the residual): each layer's attn is attributed, the heads are not\n",
                arch);
    if (r->at.final_softcap)
        fprintf(f, "the model soft-caps its logits (%g tanh(x / %g)): the pre-cap logit difference is attributed\n",
                r->softcap, r->softcap);
}

static int print_table(const attribute_args *a, const attribution *r, const char *arch) {
    const qkv_attribution *t = &r->at;
    printf("qkv attribute: %s, %d tokens: logit[%s] - logit[%s] at the last position = %.4f%s\n",
           cli_basename(a->model), r->n, r->answer_label, r->wrong_label, t->logit_diff,
           a->wrong ? "" : a->answer ? " (wrong: the model's most likely other token)" : " (the model's top-1 and top-2)");
    printf("each component's output through the final norm (this run's RMS scale frozen) onto u[answer] - u[wrong]\n");
    print_notes(stdout, r, arch);
    printf("\n  embed  %9.4f\n\n  layer       attn        mlp\n", t->embed);
    double sa = 0, sm = 0;
    for (int l = 0; l < r->nl; l++) {
        printf("  %5d  %9.4f  %9.4f\n", l, (double)t->attn[l], (double)t->mlp[l]);
        sa += t->attn[l], sm += t->mlp[l];
    }
    printf("    sum  %9.4f  %9.4f\n", sa, sm);
    if (t->heads_linear) {
        const int count = r->nl * r->nh, top = a->top < count ? a->top : count;
        int64_t *idx = cli_by_magnitude(t->heads, count);
        if (!idx) return cli_fail("out of memory");
        printf("\nheads (each head's output through its slice of the output projection), top %d of %d by |share|:\n"
               "  layer  head      share\n",
               top, count);
        for (int k = 0; k < top; k++)
            printf("  %5d  %4d  %9.4f\n", (int)(idx[k] / r->nh), (int)(idx[k] % r->nh), (double)t->heads[idx[k]]);
        free(idx);
    }
    printf("\ntotal (embed + attn + mlp) = %.4f; the model's own logit difference = %.4f (difference %.2g)\n", t->total,
           t->logit_diff, fabs(t->total - t->logit_diff));
    return 0;
}

static void print_json(const attribute_args *a, const attribution *r, const cli_prompt *pr) {
    const qkv_attribution *t = &r->at;
    printf("{\n  \"model\": ");
    cli_json_string(stdout, a->model);
    printf(",\n  \"n_tokens\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"tokens\": ", r->n, r->nl, r->nh);
    cli_json_prompt(stdout, pr);
    printf(",\n  \"answer\": ");
    cli_json_token(stdout, t->answer, r->answer_label);
    printf(",\n  \"wrong\": ");
    cli_json_token(stdout, t->wrong, r->wrong_label);
    printf(",\n  \"chosen\": \"%s\",\n  \"logit_diff\": ", chosen(a));
    cli_json_double(stdout, t->logit_diff);
    printf(",\n  \"total\": ");
    cli_json_double(stdout, t->total);
    printf(",\n  \"embed\": ");
    cli_json_double(stdout, t->embed);
    const int64_t l1[1] = {r->nl}, lh[2] = {r->nl, r->nh};
    printf(",\n  \"attn\": ");
    cli_json_floats(stdout, t->attn, 1, l1, 2);
    printf(",\n  \"mlp\": ");
    cli_json_floats(stdout, t->mlp, 1, l1, 2);
    printf(",\n  \"heads\": ");
    cli_json_floats(stdout, t->heads, 2, lh, 2);
    printf(",\n  \"heads_linear\": %s,\n  \"final_softcap\": %s\n}\n", t->heads_linear ? "true" : "false",
           t->final_softcap ? "true" : "false");
}

/* Heatmaps: layer x head (where heads are shares), layer x {attn, mlp}. */
static int write_html(FILE *f, const attribute_args *a, const attribution *r, const char *arch) {
    const qkv_attribution *t = &r->at;
    const int nl = r->nl;
    char **rows = cli_index_labels(nl, "layer ", NULL), **heads = cli_index_labels(r->nh, "h", NULL);
    float *sub = malloc((size_t)nl * 2 * sizeof(float)); /* [L, 2]: attn, mlp */
    char *notes = NULL;
    size_t notes_len = 0;
    FILE *nf = open_memstream(&notes, &notes_len);
    int rc = !rows || !heads ? CLI_EXIT_BAD_INPUT : !sub || !nf ? cli_fail("out of memory") : 0;
    if (!rc) {
        for (int l = 0; l < nl; l++) sub[2 * l] = t->attn[l], sub[2 * l + 1] = t->mlp[l];
        fprintf(nf, "logit[%s] - logit[%s] at the last position = %.4f; the parts add up to %.4f (embed %.4f).\n"
                    "Each part: a component's output through the final norm with this run's RMS scale frozen, onto "
                    "u[answer] - u[wrong]. Red raises the answer over the wrong token, blue lowers it; hover a cell "
                    "for its value.\n",
                r->answer_label, r->wrong_label, t->logit_diff, t->total, t->embed);
        print_notes(nf, r, arch);
        if (fclose(nf)) rc = cli_fail("out of memory");
        nf = NULL;
    }
    static const char *const sub_names[] = {"attn", "mlp"};
    const qkv_heatmap maps[2] = {
        {.title = "attention and MLP output, per layer", .rows = nl, .cols = 2, .row_labels = (const char *const *)rows,
         .col_labels = sub_names, .values = sub, .diverging = 1},
        {.title = "heads: each head's output through its slice of the output projection", .rows = nl, .cols = r->nh,
         .row_labels = (const char *const *)rows, .col_labels = (const char *const *)heads, .values = t->heads,
         .diverging = 1},
    };
    if (!rc) {
        char title[512];
        snprintf(title, sizeof title, "qkv attribute: %s, %d tokens", cli_basename(a->model), r->n);
        qkv_error err = {0};
        if (qkv_heatmap_page(f, title, notes, maps, t->heads_linear ? 2 : 1, &err)) rc = cli_fail("--html: %s", err.msg);
    }
    if (nf) fclose(nf);
    free(notes);
    free(sub);
    cli_labels_free(rows, nl);
    cli_labels_free(heads, r->nh);
    return rc;
}

/* ------------------------------------------------------------------- main */

int cmd_attribute(int argc, char **argv) {
    attribute_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    FILE *html = NULL;
    cli_npy_array npy[3] = {{.name = "heads"}, {.name = "attn"}, {.name = "mlp"}};
    if ((a.html && !(html = cli_output_stream(a.html))) || (a.npy && cli_npy_declare(npy, 3, a.npy)))
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    cli_session ss;
    attribution r = {0};
    int32_t answer = -1, wrong = -1;
    if ((rc = cli_session_open(&ss, a.model, &a.pa, a.ctx, a.threads)) ||
        (a.answer && (rc = cli_one_token(&answer, "--answer", a.answer, ss.tok, 0))) ||
        (a.wrong && (rc = cli_one_token(&wrong, "--wrong", a.wrong, ss.tok, 0))))
        goto done;
    if (a.wrong && answer == wrong) {
        rc = cli_fail("--answer and --wrong are the same token (%d): their logit difference is always 0", answer);
        goto done;
    }
    r.n = ss.pr.n;
    const qkv_model_config *cfg = qkv_model_get_config(ss.model);
    r.nl = cfg->n_layer, r.nh = cfg->n_head, r.softcap = cfg->final_softcap;
    r.at.heads = malloc((size_t)r.nl * r.nh * sizeof(float));
    r.at.attn = malloc((size_t)r.nl * sizeof(float));
    r.at.mlp = malloc((size_t)r.nl * sizeof(float));
    if (!r.at.heads || !r.at.attn || !r.at.mlp) {
        rc = cli_fail("out of memory");
        goto done;
    }
    const double t0 = cli_now_s();
    qkv_error err = {0};
    if (qkv_attribute(&r.at, ss.model, ss.pr.ids, r.n, answer, wrong, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    const double t1 = cli_now_s();
    if (!(r.answer_label = cli_token_label(ss.tok, r.at.answer)) || !(r.wrong_label = cli_token_label(ss.tok, r.at.wrong))) {
        rc = cli_fail("out of memory");
        goto done;
    }
    npy[0].data = r.at.heads, npy[0].ndim = 2, npy[0].shape[0] = r.nl, npy[0].shape[1] = r.nh;
    npy[1].data = r.at.attn, npy[1].ndim = 1, npy[1].shape[0] = r.nl;
    npy[2].data = r.at.mlp, npy[2].ndim = 1, npy[2].shape[0] = r.nl;
    /* the files are on disk before anything goes to stdout */
    if ((html && (rc = write_html(html, &a, &r, cfg->arch))) || (a.npy && (rc = cli_npy_write(npy, 3))) ||
        (rc = cli_outputs_commit()))
        goto done;
    if (a.json) print_json(&a, &r, &ss.pr);
    else if ((rc = print_table(&a, &r, cfg->arch))) goto done;
    FILE *msg = a.json ? stderr : stdout;
    if (a.npy) cli_npy_report(msg, npy, 3, a.npy);
    if (a.html) fprintf(msg, "wrote %s\n", a.html);
    if (a.verbose) fprintf(stderr, "qkv attribute: %d tokens, %.2f s, peak RSS %.1f MiB\n", r.n, t1 - t0, cli_peak_rss_mib());
done:
    free(r.at.heads);
    free(r.at.attn);
    free(r.at.mlp);
    free(r.answer_label);
    free(r.wrong_label);
    cli_session_close(&ss);
    return cli_outputs_finish(rc);
}
