/*
 * cmd_patch.c — `qkv patch`: activation patching. The corrupted prompt runs
 * with one component's activation replaced by the clean run's (qkv_patch,
 * src/probe/patch.c), and a metric at the last position says how much of
 * the clean behaviour came back: 1 all of it, 0 none, not clipped. The
 * components: each head's output at every position (head_out) or at one
 * (head_out_pos), and at one position the residual stream entering a
 * layer (resid_pre), the attention and the MLP output (attn_out, mlp_out).
 * Prints the top components or JSON; writes heatmaps (--html) and the
 * recovery arrays (--npy PREFIX). The arithmetic is the library's; this
 * file reads flags and writes what came back.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "progress.h"
#include "outputs.h"
#include "probe_json.h"
#include "util.h"
#include "commands.h"
#include "qkv_render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* What each sweep (qkv_sweep) patches, for the table and the page. */
static const char *const sweep_about[QKV_SWEEP_COUNT] = {
    [QKV_SWEEP_HEAD_OUT] = "a head's output (attn.hook_z) at every position",
    [QKV_SWEEP_HEAD_OUT_POS] = "a head's output (attn.hook_z) at one position",
    [QKV_SWEEP_RESID_PRE] = "the residual stream entering the layer (hook_resid_pre) at one position",
    [QKV_SWEEP_ATTN_OUT] = "the attention sublayer's output (hook_attn_out) at one position",
    [QKV_SWEEP_MLP_OUT] = "the MLP sublayer's output (hook_mlp_out) at one position",
};
#define DEFAULT_SWEEPS (((1 << QKV_SWEEP_COUNT) - 1) & ~(1 << QKV_SWEEP_HEAD_OUT_POS))

typedef struct {
    const char *model, *clean, *corrupt, *clean_ids, *corrupt_ids, *answer, *wrong, *html, *npy;
    int chat, metric, sweeps, per_position, max_mib, top, json, threads, ctx, verbose;
    cli_progress_flags pf;
} patch_args;

/* What came back, with what the outputs need to show it. */
typedef struct {
    qkv_patch_out out;          /* recovery arrays, NULL where not swept */
    int ndim[QKV_SWEEP_COUNT];
    int64_t shape[QKV_SWEEP_COUNT][3]; /* qkv_sweep_shape */
    qkv_patch_summary sum;
    int n, nl, nh;
    char **pos_labels;          /* [n] the clean token, "clean→corrupt" where they differ */
    char *differs;              /* [n] 1 where the prompts' tokens differ */
    char *answer_label, *wrong_label;
    int32_t answer, wrong;
} patch_result;

/* ------------------------------------------------------------------ parse */

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(patch_args *a, int argc, char **argv) {
    *a = (patch_args){.model = CLI_DEFAULT_MODEL, .sweeps = DEFAULT_SWEEPS, .top = 10};
    const char *sweep_names[QKV_SWEEP_COUNT + 1] = {0};
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) sweep_names[s] = qkv_sweep_name((qkv_sweep)s);
    char max_help[160];
    snprintf(max_help, sizeof max_help, "the activations the sweeps may cache (both runs'), MiB\n(default %lld: the library's)",
             (long long)(QKV_PATCH_DEFAULT_MAX_BYTES >> 20));
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        {.name = "--clean", .kind = CLI_STRING, .dest = &a->clean, .metavar = "TEXT", .help = "the clean prompt"},
        {.name = "--corrupt", .kind = CLI_STRING, .dest = &a->corrupt, .metavar = "TEXT",
         .help = "the corrupted prompt: the same number of tokens"},
        {.name = "--clean-tokens", .kind = CLI_STRING, .dest = &a->clean_ids, .metavar = "IDS",
         .help = "the clean prompt as token ids, e.g. 1,9690,198"},
        {.name = "--corrupt-tokens", .kind = CLI_STRING, .dest = &a->corrupt_ids, .metavar = "IDS",
         .help = "the corrupted prompt as token ids"},
        {.name = "--chat", .kind = CLI_BOOL, .dest = &a->chat,
         .help = "wrap both texts as a user turn in the model's chat template"},
        CLI_FLAG_CHOICE("--metric", CLI_CHOICE, &a->metric, cli_metric_names,
                        "kl (default): 1 - KL(clean || patched) / KL(clean || corrupt);\n"
                        "logit-diff: the share of logit[answer] - logit[wrong] brought back"),
        {.name = "--answer", .kind = CLI_STRING, .dest = &a->answer, .metavar = "TEXT",
         .help = "logit-diff: the clean answer, exactly one token"},
        {.name = "--wrong", .kind = CLI_STRING, .dest = &a->wrong, .metavar = "TEXT",
         .help = "logit-diff: the corrupt answer, exactly one token"},
        CLI_FLAG_CHOICE("--sweeps", CLI_CHOICES, &a->sweeps, sweep_names,
                        "components to patch (default: all but head_out_pos)"),
        {.name = "--per-position", .kind = CLI_BOOL, .dest = &a->per_position,
         .help = "add head_out_pos: each head at each position [L, Hq, n]"},
        {.name = "--max-mib", .kind = CLI_INT, .dest = &a->max_mib, .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = max_help},
        {.name = "--top", .kind = CLI_INT, .dest = &a->top, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "components listed per sweep in the table (default 10)"},
        CLI_FLAG_JSON(&a->json, "every recovery array, the metric's values and the tokens as JSON"),
        {.name = "--html", .kind = CLI_STRING, .dest = &a->html, .metavar = "FILE",
         .help = "a self-contained page of heatmaps: layer x head, layer x position"},
        CLI_FLAG_NPY_PREFIX(&a->npy, "float32 arrays PREFIX<sweep>.npy (PREFIX out/ is a folder)"),
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_PROBE_CTX(&a->ctx),
        CLI_FLAG_VERBOSE(&a->verbose),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {
        .name = "patch",
        .usage = "[-m MODEL] (--clean TEXT | --clean-tokens IDS) (--corrupt TEXT | --corrupt-tokens IDS) [flags]",
        .about = "Activation patching: runs the corrupted prompt with one component's activation\n"
        "taken from the clean run, and measures how much of the clean behaviour at the\n"
        "last position comes back (recovery: 1 all, 0 none; not clipped). Each patched run\n"
        "resumes from the layer it patches, from the corrupted run's cached residual.",
        .notes = "JSON: {\"model\", \"metric\", \"answer\", \"wrong\" ({\"id\", \"piece\"} or null), \"n_tokens\",\n"
        "\"n_layer\", \"n_head\", \"clean_tokens\", \"corrupt_tokens\" ([{\"id\", \"piece\"}]), \"clean\",\n"
        "\"corrupt\" (the metric's values), \"head_out\" [L][Hq], \"head_out_pos\" [L][Hq][n],\n"
        "\"resid_pre\", \"attn_out\", \"mlp_out\" [L][n] (null when not swept), \"cost\":\n"
        "{\"layer_token_steps\", \"naive_layer_token_steps\", \"n_components\"}}.",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed;
    if (!!a->clean + !!a->clean_ids != 1) return cli_fail("give the clean prompt once: --clean TEXT or --clean-tokens IDS");
    if (!!a->corrupt + !!a->corrupt_ids != 1)
        return cli_fail("give the corrupted prompt once: --corrupt TEXT or --corrupt-tokens IDS");
    if (a->chat && (a->clean_ids || a->corrupt_ids)) return cli_fail("--chat needs text (--clean, --corrupt), not token ids");
    if ((a->clean && !*a->clean) || (a->corrupt && !*a->corrupt))
        return cli_fail("%s: the text is empty", a->clean && !*a->clean ? "--clean" : "--corrupt");
    if (a->metric == QKV_METRIC_LOGIT_DIFF && (!a->answer || !a->wrong))
        return cli_fail("--metric logit-diff needs --answer TEXT and --wrong TEXT (one token each)");
    if (a->metric == QKV_METRIC_KL && (a->answer || a->wrong))
        return cli_fail("--answer and --wrong go with --metric logit-diff (the default metric, kl, takes none)");
    if (a->per_position) a->sweeps |= 1 << QKV_SWEEP_HEAD_OUT_POS;
    return 0;
}

/* Both prompts' ids and labels, the same count and not the same tokens; 0 or 2. */
static int load_prompts(cli_prompt *clean, cli_prompt *corrupt, const patch_args *a, const qkv_gguf *g,
                        const qkv_tokenizer *tok) {
    const cli_prompt_args pc = {.text = a->clean, .tokens = a->clean_ids, .chat = a->chat, .tokens_flag = "--clean-tokens"};
    const cli_prompt_args pk = {.text = a->corrupt, .tokens = a->corrupt_ids, .chat = a->chat,
                                .tokens_flag = "--corrupt-tokens"};
    int rc;
    if ((rc = cli_prompt_load(clean, &pc, g, tok)) || (rc = cli_prompt_load(corrupt, &pk, g, tok))) return rc;
    if (clean->n != corrupt->n)
        return cli_fail("the clean prompt is %d tokens and the corrupted one %d: patching needs the same count", clean->n,
                        corrupt->n);
    if (!memcmp(clean->ids, corrupt->ids, (size_t)clean->n * sizeof(int32_t)))
        return cli_fail("the clean and corrupted prompts are the same %d tokens: nothing to patch", clean->n);
    if ((rc = cli_prompt_labels(clean, tok)) || (rc = cli_prompt_labels(corrupt, tok))) return rc;
    return 0;
}

/* r->pos_labels: the clean token, or "clean→corrupt" where the prompts differ. */
static int position_labels(patch_result *r, const cli_prompt *clean, const cli_prompt *corrupt) {
    r->pos_labels = calloc((size_t)r->n, sizeof(char *));
    r->differs = calloc((size_t)r->n, 1);
    if (!r->pos_labels || !r->differs) return cli_fail("out of memory");
    for (int p = 0; p < r->n; p++) {
        const int same = clean->ids[p] == corrupt->ids[p];
        r->differs[p] = (char)!same;
        const size_t len = strlen(clean->labels[p]) + strlen(corrupt->labels[p]) + 4;
        if (!(r->pos_labels[p] = malloc(len))) return cli_fail("out of memory");
        if (same) snprintf(r->pos_labels[p], len, "%s", clean->labels[p]);
        else snprintf(r->pos_labels[p], len, "%s\xE2\x86\x92%s", clean->labels[p], corrupt->labels[p]);
    }
    return 0;
}

/* ---------------------------------------------------------------- compute */

/* The arrays of the chosen sweeps, their bytes against the limit, then the
 * patching itself; 0, or 2 after an error line. */
static int compute(patch_result *r, const patch_args *a, qkv_model *m, const cli_prompt *clean, const cli_prompt *corrupt) {
    const int n = r->n, nl = r->nl, nh = r->nh;
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        if (!(a->sweeps & (1 << s))) continue;
        const int64_t *sh = r->shape[s];
        r->ndim[s] = qkv_sweep_shape(r->shape[s], (qkv_sweep)s, nl, nh, n);
        if (!(r->out.recovery[s] = malloc((size_t)(sh[0] * sh[1] * sh[2]) * sizeof(float)))) return cli_fail("out of memory");
    }
    const int64_t need = qkv_patch_bytes(m, n, &r->out);
    const int64_t limit = a->max_mib ? (int64_t)a->max_mib << 20 : QKV_PATCH_DEFAULT_MAX_BYTES;
    if (need > limit)
        return cli_fail("%s: the sweeps would cache %lld bytes (%.1f MiB) of activations, above the limit of %lld bytes "
                        "(%.0f MiB); raise --max-mib or shorten the prompts",
                        a->sweeps & (1 << QKV_SWEEP_HEAD_OUT_POS) ? "--per-position" : "patch", (long long)need,
                        (double)need / (1 << 20), (long long)limit, (double)limit / (1 << 20));
    const qkv_patch_params pp = {.metric = {.kind = (qkv_metric_kind)a->metric, .answer = r->answer, .wrong = r->wrong},
                                 .max_bytes = limit,
                                 .progress = cli_progress_enabled() ? cli_progress_report : NULL};
    qkv_error err = {0};
    cli_progress_start("patch", 0, "forward calls"); /* the probe tells the total */
    const qkv_status st = qkv_patch(&r->out, &r->sum, m, clean->ids, corrupt->ids, n, &pp, &err);
    cli_progress_finish();
    return st ? cli_fail("%s", err.msg) : 0;
}

/* ----------------------------------------------------------------- output */

/* What the metric is and its two values, then what recovery means: two lines (no final newline). */
static void metric_lines(char *buf, size_t cap, const patch_args *a, const patch_result *r) {
    static const char recovery[] = "1 is the clean behaviour back, 0 none of it; not clipped";
    if (a->metric == QKV_METRIC_KL)
        snprintf(buf, cap, "metric kl: KL(p_clean || p) of the next-token distribution at the last position, nats: "
                           "clean %.4f, corrupt %.4f\nrecovery = 1 - KL(p_clean || p_patched) / KL(p_clean || p_corrupt): %s",
                 r->sum.clean, r->sum.corrupt, recovery);
    else
        snprintf(buf, cap, "metric logit-diff: LD = logit[%s] - logit[%s] at the last position: clean %.4f, corrupt %.4f\n"
                           "recovery = (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt): %s",
                 r->answer_label, r->wrong_label, r->sum.clean, r->sum.corrupt, recovery);
}

static void cost_line(char *buf, size_t cap, const qkv_patch_summary *s) {
    snprintf(buf, cap, "cost: %lld layer-token-steps for %lld components; a full forward per component would run %lld (%.1fx)",
             (long long)s->layer_token_steps, (long long)s->n_components, (long long)s->naive_layer_token_steps,
             s->layer_token_steps > 0 ? (double)s->naive_layer_token_steps / (double)s->layer_token_steps : 0.0);
}

static int print_table(const patch_args *a, const patch_result *r) {
    char line[1024];
    printf("qkv patch: %s, %d tokens, %d layers x %d heads\n", cli_basename(a->model), r->n, r->nl, r->nh);
    printf("positions that differ:");
    for (int p = 0; p < r->n; p++)
        if (r->differs[p]) printf(" %d (%s)", p, r->pos_labels[p]);
    metric_lines(line, sizeof line, a, r);
    printf("\n%s\n", line);
    int w = 5;
    for (int p = 0; p < r->n; p++)
        if (qkv_text_width(r->pos_labels[p]) > w) w = qkv_text_width(r->pos_labels[p]);
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) {
        if (!r->out.recovery[s]) continue;
        const int64_t count = r->shape[s][0] * r->shape[s][1] * r->shape[s][2];
        int64_t *idx = cli_by_magnitude(r->out.recovery[s], count);
        if (!idx) return cli_fail("out of memory");
        const int64_t top = a->top < count ? a->top : count;
        printf("\n%s: %s; top %lld of %lld by |recovery|\n  layer", qkv_sweep_name((qkv_sweep)s), sweep_about[s], (long long)top,
               (long long)count);
        if (s == QKV_SWEEP_HEAD_OUT || s == QKV_SWEEP_HEAD_OUT_POS) printf("  head");
        if (s != QKV_SWEEP_HEAD_OUT) {
            printf("  pos  ");
            cli_put_cell("token", w, 0);
        }
        printf("  recovery\n");
        for (int64_t t = 0; t < top; t++) {
            const int64_t i = idx[t];
            const int64_t c1 = r->shape[s][1], c2 = r->shape[s][2];
            const int layer = (int)(i / (c1 * c2)), mid = (int)(i / c2 % c1), last = (int)(i % c2);
            printf("  %5d", layer);
            if (s == QKV_SWEEP_HEAD_OUT || s == QKV_SWEEP_HEAD_OUT_POS) printf("  %4d", mid); /* the head */
            if (s != QKV_SWEEP_HEAD_OUT) {
                const int p = s == QKV_SWEEP_HEAD_OUT_POS ? last : mid;
                printf("  %3d  ", p);
                cli_put_cell(r->pos_labels[p], w, 0);
            }
            printf("  %8.4f\n", (double)r->out.recovery[s][i]);
        }
        free(idx);
    }
    cost_line(line, sizeof line, &r->sum);
    printf("\n%s\n", line);
    return 0;
}

/* every recovery array as JSON (cli/probe_json.c: the writer POST .../patch shares) */
static void print_json(const patch_args *a, const patch_result *r, const cli_prompt *clean, const cli_prompt *corrupt) {
    const cli_patch_json j = {.model = a->model, .metric = (qkv_metric_kind)a->metric, .answer = r->answer,
                              .wrong = r->wrong, .answer_label = r->answer_label, .wrong_label = r->wrong_label,
                              .n_layer = r->nl, .n_head = r->nh, .clean = clean, .corrupt = corrupt, .sum = &r->sum,
                              .out = &r->out};
    cli_patch_json_write(stdout, &j);
}

/* The heatmaps: head_out [L, Hq], each [L, n] sweep, head_out_pos one map per head. */
static int write_html(FILE *f, const patch_args *a, const patch_result *r) {
    const int nl = r->nl, nh = r->nh, n = r->n;
    char **rows = cli_index_labels(nl, "layer ", NULL), **heads = cli_index_labels(nh, "h", NULL),
         **cols = cli_index_labels(n, NULL, r->pos_labels);
    char (*titles)[96] = calloc((size_t)nh + QKV_SWEEP_COUNT, sizeof *titles);
    qkv_heatmap *maps = calloc((size_t)nh + QKV_SWEEP_COUNT, sizeof *maps);
    /* head_out_pos [L, Hq, n] as [Hq, L, n]: one [L, n] map per head */
    float *by_head = r->out.recovery[QKV_SWEEP_HEAD_OUT_POS] ? malloc((size_t)nh * nl * n * sizeof(float)) : NULL;
    int rc = !rows || !heads || !cols ? CLI_EXIT_BAD_INPUT : 0;
    if (!rc && (!titles || !maps || (r->out.recovery[QKV_SWEEP_HEAD_OUT_POS] && !by_head))) rc = cli_fail("out of memory");
    int n_maps = 0;
    for (int s = 0; !rc && s < QKV_SWEEP_COUNT; s++) {
        if (!r->out.recovery[s]) continue;
        const int per_head = s == QKV_SWEEP_HEAD_OUT_POS;
        for (int h = 0; h < (per_head ? nh : 1); h++) {
            qkv_heatmap *m = &maps[n_maps];
            if (per_head) snprintf(titles[n_maps], sizeof titles[0], "%s, head %d", qkv_sweep_name((qkv_sweep)s), h);
            else snprintf(titles[n_maps], sizeof titles[0], "%s", qkv_sweep_name((qkv_sweep)s));
            *m = (qkv_heatmap){.title = titles[n_maps], .caption = per_head && h ? NULL : sweep_about[s], .rows = nl,
                               .cols = s == QKV_SWEEP_HEAD_OUT ? nh : n, .row_labels = (const char *const *)rows,
                               .col_labels = (const char *const *)(s == QKV_SWEEP_HEAD_OUT ? heads : cols),
                               .values = r->out.recovery[s], .diverging = 1, .vmax = 1};
            if (per_head) {
                float *slice = by_head + (size_t)h * nl * n;
                for (int l = 0; l < nl; l++)
                    memcpy(slice + (size_t)l * n, r->out.recovery[s] + ((size_t)l * nh + h) * n, (size_t)n * sizeof(float));
                m->values = slice;
            }
            n_maps++;
        }
    }
    if (!rc) {
        char title[512], intro[2048], metric[1024], cost[256];
        snprintf(title, sizeof title, "qkv patch: %s, %d tokens", cli_basename(a->model), n);
        metric_lines(metric, sizeof metric, a, r);
        cost_line(cost, sizeof cost, &r->sum);
        snprintf(intro, sizeof intro,
                 "Each cell: the corrupted prompt run with that one component's activation taken from the clean run, "
                 "and how much of the clean behaviour came back. The colours saturate at \xC2\xB1" "1; hover a cell "
                 "for its value.\n%s\n%s",
                 metric, cost);
        qkv_error err = {0};
        if (qkv_heatmap_page(f, title, intro, maps, n_maps, &err)) rc = cli_fail("--html: %s", err.msg);
    }
    cli_labels_free(rows, nl);
    cli_labels_free(heads, nh);
    cli_labels_free(cols, n);
    free(titles), free(maps), free(by_head);
    return rc;
}

/* ------------------------------------------------------------------- main */

int cmd_patch(int argc, char **argv) {
    patch_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    cli_progress_init(&a.pf);
    /* every output declared before anything is computed: the page, one .npy per sweep */
    FILE *html = NULL;
    cli_npy_array npy[QKV_SWEEP_COUNT];
    int n_npy = 0;
    for (int s = 0; a.npy && s < QKV_SWEEP_COUNT; s++)
        if (a.sweeps & (1 << s)) npy[n_npy++] = (cli_npy_array){.name = qkv_sweep_name((qkv_sweep)s)};
    if ((a.html && !(html = cli_output_stream(a.html))) || (rc = cli_npy_declare(npy, n_npy, a.npy)))
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    qkv_model *m = NULL;
    cli_prompt clean = {0}, corrupt = {0};
    patch_result r = {.answer = -1, .wrong = -1};
    if ((rc = cli_tokenizer_open(&g, &tok, a.model)) || (rc = load_prompts(&clean, &corrupt, &a, g, tok))) goto done;
    if (a.metric == QKV_METRIC_LOGIT_DIFF) {
        if ((rc = cli_one_token(&r.answer, "--answer", a.answer, tok, 0)) ||
            (rc = cli_one_token(&r.wrong, "--wrong", a.wrong, tok, 0)))
            goto done;
        if (r.answer == r.wrong) {
            rc = cli_fail("--answer and --wrong are the same token (%d): their logit difference is always 0", r.answer);
            goto done;
        }
        if (!(r.answer_label = cli_token_label(tok, r.answer)) || !(r.wrong_label = cli_token_label(tok, r.wrong))) {
            rc = cli_fail("out of memory");
            goto done;
        }
    }
    r.n = clean.n;
    if ((rc = position_labels(&r, &clean, &corrupt)) || (rc = cli_model_open_for(&m, a.model, r.n, a.ctx, a.threads)))
        goto done;
    r.nl = qkv_model_get_config(m)->n_layer;
    r.nh = qkv_model_get_config(m)->n_head;
    const double t0 = cli_now_s();
    if ((rc = compute(&r, &a, m, &clean, &corrupt))) goto done;
    const double t1 = cli_now_s();
    /* the files are on disk before anything goes to stdout */
    for (int i = 0, s = 0; s < QKV_SWEEP_COUNT; s++)
        if (r.out.recovery[s] && i < n_npy) {
            npy[i].data = r.out.recovery[s];
            npy[i].ndim = r.ndim[s];
            memcpy(npy[i++].shape, r.shape[s], sizeof r.shape[s]);
        }
    if ((html && (rc = write_html(html, &a, &r))) || (rc = cli_npy_write(npy, n_npy)) || (rc = cli_outputs_commit()))
        goto done;
    if (a.json) print_json(&a, &r, &clean, &corrupt);
    else if ((rc = print_table(&a, &r))) goto done;
    FILE *msg = a.json ? stderr : stdout;
    cli_npy_report(msg, npy, n_npy, a.npy);
    if (a.html) fprintf(msg, "wrote %s\n", a.html);
    if (a.verbose)
        fprintf(stderr, "qkv patch: %d tokens, %lld components, %.2f s, peak RSS %.1f MiB\n", r.n,
                (long long)r.sum.n_components, t1 - t0, cli_peak_rss_mib());
done:
    cli_progress_finish();
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) free(r.out.recovery[s]);
    cli_labels_free(r.pos_labels, r.pos_labels ? r.n : 0);
    free(r.differs);
    free(r.answer_label);
    free(r.wrong_label);
    qkv_model_close(m);
    cli_prompt_free(&clean);
    cli_prompt_free(&corrupt);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return cli_outputs_finish(rc);
}
