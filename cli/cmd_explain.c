/*
 * cmd_explain.c — `qkv explain`: the article's worked example (年 假 怎么 申请,
 * 4-dim inputs, one head of d = 2), step by step: projections, one row's
 * scores, exponentials and weights, the weighted sum of v, the whole weight
 * matrix. The weights, the output and the LSE come from the library's
 * reference kernel; the command only multiplies the small projections and
 * writes the intermediate arithmetic out for the reader. It opens with the
 * article's whole sentence 年假怎么申请？ as the real Llama-3 tokenizer cuts it
 * (models/llama3-vocab.gguf from `make model`, or --vocab; one line saying so
 * when it is missing), the example being its first four tokens.
 *
 * The kernel takes heads of 16..256 dims, so the 2-dim head is padded with
 * zeros to QKV_HEAD_DIM_MIN: zeros change no dot product and add only zero
 * output columns. The scale is passed explicitly (1/sqrt(2), or 1.0 for
 * --no-scale), since 0 would mean 1/sqrt(16).
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "json_out.h"
#include "util.h"
#include "commands.h"
#include "explain_permute.h"
#include "qkv_render.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EX_MAX_TOK 16
#define EX_MAX_DIM 16      /* input dims */
#define EX_MAX_HEAD 16     /* head dims, <= QKV_HEAD_DIM_MIN so zero padding suffices */
#define EX_NAME 48
#define LLAMA3_VOCAB "models/llama3-vocab.gguf" /* `make model` writes it */

/* The article's example in the --input format (see usage). */
static const char builtin_example[] =
    "# The article's worked example: 4 tokens, 4-dim inputs, one head of d = 2.\n"
    "# Teaching numbers, not Llama's; consistent with every figure in the article.\n"
    "tokens 年 假 怎么 申请\n"
    "dims   事项 时间 疑问 动作\n"
    "x\n"
    "0 1 0 0\n"
    "2 0 0 0\n"
    "0 0 1 0\n"
    "0 0 0 1\n"
    "w_q\n"
    "0 1\n"
    "1 1\n"
    "1 0\n"
    "2 0\n"
    "w_k\n"
    "1 0\n"
    "1 0\n"
    "0 1\n"
    "0 0\n"
    "w_v\n"
    "1 0\n"
    "1 0\n"
    "0 1\n"
    "0 1\n";

static const char input_format[] =
    "Input format: '#' starts a comment; 'tokens T1 T2 ...' (1.." CLI_STR(EX_MAX_TOK) " tokens);\n"
    "optional 'dims N1 N2 ...' (names of the input dims); 'x' then one row of M\n"
    "numbers per token (M <= " CLI_STR(EX_MAX_DIM) "); 'w_q', 'w_k' then M rows of d numbers and 'w_v'\n"
    "then M rows of dv numbers (d, dv <= " CLI_STR(EX_MAX_HEAD) "); optional 'focus TOKEN' (the row\n"
    "worked out by hand; default the last token).\n\n"
    "--permute runs every ordering of the tokens before the focus, which must be last\n"
    "(2 to 6 tokens, d even). With -m it takes each layer's q, k, v of the prompt (default\n"
    "'" EXPLAIN_PERMUTE_PROMPT "') from the model's hooks and permutes the prompt at random.";

/* ----------------------------------------------------------------- input */

typedef struct {
    int n, m, d, dv;                     /* tokens, input dims, q/k dims, v dims */
    char tok[EX_MAX_TOK][EX_NAME];
    char dim[EX_MAX_DIM][EX_NAME];
    int have_dims;
    double x[EX_MAX_TOK][EX_MAX_DIM];    /* x: [n, m] */
    double wq[EX_MAX_DIM][EX_MAX_HEAD];  /* wq: [m, d] */
    double wk[EX_MAX_DIM][EX_MAX_HEAD];  /* wk: [m, d] */
    double wv[EX_MAX_DIM][EX_MAX_HEAD];  /* wv: [m, dv] */
    int focus;
    char focus_name[EX_NAME];
} example;

/* Splits line (modified in place) into whitespace-separated words. */
static int split_words(char **w, int cap, char *line) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        if (n == cap) return cap + 1;
        w[n++] = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (*p) *p++ = 0;
    }
    return n;
}

enum { SEC_NONE, SEC_X, SEC_WQ, SEC_WK, SEC_WV };
static const char *sec_name[] = {"", "x", "w_q", "w_k", "w_v"};

/* Parses the --input format; on error prints one line naming where. */
static int parse_example(example *ex, const char *text, const char *src) {
    memset(ex, 0, sizeof *ex);
    ex->focus = -1;
    int rows[5] = {0}, width[5] = {0};
    int sec = SEC_NONE, lineno = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        lineno++;
        if (len >= sizeof line) return cli_fail("explain: %s:%d: line too long", src, lineno);
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (nl ? 1 : 0);
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *w[EX_MAX_TOK + 2];
        int nw = split_words(w, EX_MAX_TOK + 1, line);
        if (nw == 0) continue;
        if (nw > EX_MAX_TOK + 1)
            return cli_fail("explain: %s:%d: more than %d entries on a line", src, lineno, EX_MAX_TOK);
        if (!strcmp(w[0], "tokens") || !strcmp(w[0], "dims")) {
            int is_tok = w[0][0] == 't';
            if (nw < 2) return cli_fail("explain: %s:%d: '%s' needs at least one name", src, lineno, w[0]);
            int cap = is_tok ? EX_MAX_TOK : EX_MAX_DIM;
            if (nw - 1 > cap)
                return cli_fail("explain: %s:%d: at most %d %s", src, lineno, cap, w[0]);
            for (int i = 1; i < nw; i++) {
                if (strlen(w[i]) >= EX_NAME || qkv_text_width(w[i]) > 12)
                    return cli_fail("explain: %s:%d: name '%s' is too long (12 columns at most)", src,
                                    lineno, w[i]);
                snprintf(is_tok ? ex->tok[i - 1] : ex->dim[i - 1], EX_NAME, "%s", w[i]);
            }
            if (is_tok) ex->n = nw - 1;
            else {
                ex->have_dims = nw - 1;
            }
            sec = SEC_NONE;
            continue;
        }
        if (!strcmp(w[0], "focus")) {
            if (nw != 2) return cli_fail("explain: %s:%d: 'focus' takes one token", src, lineno);
            snprintf(ex->focus_name, EX_NAME, "%s", w[1]);
            sec = SEC_NONE;
            continue;
        }
        int s;
        for (s = SEC_X; s <= SEC_WV; s++)
            if (!strcmp(w[0], sec_name[s])) break;
        if (s <= SEC_WV) {
            if (nw != 1) return cli_fail("explain: %s:%d: put the rows of '%s' on the lines below it", src, lineno, w[0]);
            if (rows[s]) return cli_fail("explain: %s:%d: '%s' given twice", src, lineno, w[0]);
            sec = s;
            continue;
        }
        if (sec == SEC_NONE)
            return cli_fail("explain: %s:%d: unexpected '%s' (expected tokens, dims, x, w_q, w_k, w_v or focus)",
                            src, lineno, w[0]);
        /* A row of numbers in section sec. */
        int cap_rows = sec == SEC_X ? EX_MAX_TOK : EX_MAX_DIM;
        int cap_cols = sec == SEC_X ? EX_MAX_DIM : EX_MAX_HEAD;
        if (rows[sec] >= cap_rows)
            return cli_fail("explain: %s:%d: '%s' has more than %d rows", src, lineno, sec_name[sec], cap_rows);
        if (nw > cap_cols)
            return cli_fail("explain: %s:%d: '%s' rows have at most %d numbers", src, lineno, sec_name[sec], cap_cols);
        if (rows[sec] == 0) width[sec] = nw;
        else if (nw != width[sec])
            return cli_fail("explain: %s:%d: '%s' row has %d numbers, the first row had %d", src, lineno,
                            sec_name[sec], nw, width[sec]);
        for (int i = 0; i < nw; i++) {
            errno = 0;
            char *end;
            double v = strtod(w[i], &end);
            if (errno || *end || !isfinite(v) || fabs(v) > 1e6)
                return cli_fail("explain: %s:%d: '%s' is not a number in [-1e6, 1e6]", src, lineno, w[i]);
            double *dst = sec == SEC_X ? &ex->x[rows[sec]][i] : sec == SEC_WQ ? &ex->wq[rows[sec]][i]
                        : sec == SEC_WK ? &ex->wk[rows[sec]][i] : &ex->wv[rows[sec]][i];
            *dst = v;
        }
        rows[sec]++;
    }
    if (ex->n == 0) return cli_fail("explain: %s: no 'tokens' line", src);
    for (int s = SEC_X; s <= SEC_WV; s++)
        if (!rows[s]) return cli_fail("explain: %s: no '%s' section", src, sec_name[s]);
    if (rows[SEC_X] != ex->n)
        return cli_fail("explain: %s: 'x' has %d rows for %d tokens", src, rows[SEC_X], ex->n);
    ex->m = width[SEC_X];
    if (ex->have_dims && ex->have_dims != ex->m)
        return cli_fail("explain: %s: 'dims' names %d dims, x rows have %d", src, ex->have_dims, ex->m);
    for (int s = SEC_WQ; s <= SEC_WV; s++)
        if (rows[s] != ex->m)
            return cli_fail("explain: %s: '%s' has %d rows, x has %d columns", src, sec_name[s], rows[s], ex->m);
    if (width[SEC_WQ] != width[SEC_WK])
        return cli_fail("explain: %s: w_q gives %d dims and w_k %d: q and k must match", src,
                        width[SEC_WQ], width[SEC_WK]);
    ex->d = width[SEC_WQ];
    ex->dv = width[SEC_WV];
    if (!ex->have_dims)
        for (int i = 0; i < ex->m; i++) snprintf(ex->dim[i], EX_NAME, "x%d", i + 1);
    ex->focus = ex->n - 1;
    if (ex->focus_name[0]) {
        ex->focus = -1;
        for (int i = 0; i < ex->n; i++)
            if (!strcmp(ex->tok[i], ex->focus_name)) {
                ex->focus = i;
                break;
            }
        if (ex->focus < 0) return cli_fail("explain: %s: focus '%s' is not one of the tokens", src, ex->focus_name);
    }
    return 0;
}

/* ------------------------------------------------------------------ walk */

/* One run of the head: projections by the command, attention by the kernel. */
typedef struct {
    int causal;
    double scale;
    double q[EX_MAX_TOK][EX_MAX_HEAD], k[EX_MAX_TOK][EX_MAX_HEAD], v[EX_MAX_TOK][EX_MAX_HEAD];
    float w[EX_MAX_TOK][EX_MAX_TOK];     /* w: [n, n] from the kernel */
    float o[EX_MAX_TOK][EX_MAX_HEAD];    /* o: [n, dv] from the kernel */
    float lse[EX_MAX_TOK];               /* lse: [n] from the kernel */
    double dot[EX_MAX_TOK];              /* focus row: q . k_j */
    double score[EX_MAX_TOK];            /* focus row: scale * dot, -inf if masked */
    double ex[EX_MAX_TOK];               /* focus row: e^score */
    double sum;
} walk;

/* One head of n tokens, padded to QKV_HEAD_DIM_MIN dims, one thread. */
static qkv_attn_desc example_desc(int n, int causal, double scale) {
    return (qkv_attn_desc){.n_q_head = 1, .n_kv_head = 1, .q_len = n, .kv_len = n, .head_dim = QKV_HEAD_DIM_MIN,
                           .scale = (float)scale, .mask = {.kind = causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE},
                           .kv_dtype = QKV_DTYPE_F32, .n_threads = 1};
}

static int run_walk(walk *r, const example *e, int causal, double scale) {
    memset(r, 0, sizeof *r);
    r->causal = causal;
    r->scale = scale;
    /* q = x W_Q, k = x W_K, v = x W_V: [n, m] x [m, d] */
    for (int t = 0; t < e->n; t++)
        for (int m = 0; m < e->m; m++) {
            for (int c = 0; c < e->d; c++) {
                r->q[t][c] += e->x[t][m] * e->wq[m][c];
                r->k[t][c] += e->x[t][m] * e->wk[m][c];
            }
            for (int c = 0; c < e->dv; c++) r->v[t][c] += e->x[t][m] * e->wv[m][c];
        }

    enum { D = QKV_HEAD_DIM_MIN };
    float q[EX_MAX_TOK * D] = {0}, k[EX_MAX_TOK * D] = {0}, v[EX_MAX_TOK * D] = {0};
    float o[EX_MAX_TOK * D], w[EX_MAX_TOK * EX_MAX_TOK];
    for (int t = 0; t < e->n; t++) {
        for (int c = 0; c < e->d; c++) {
            q[t * D + c] = (float)r->q[t][c];
            k[t * D + c] = (float)r->k[t][c];
        }
        for (int c = 0; c < e->dv; c++) v[t * D + c] = (float)r->v[t][c];
    }
    const qkv_attn_desc d = example_desc(e->n, causal, scale);
    qkv_error err = {0};
    if (qkv_attn_reference(o, r->lse, w, q, k, v, &d, &err) != QKV_OK)
        return cli_fail("explain: reference kernel: %s", err.msg);
    for (int i = 0; i < e->n; i++) {
        for (int j = 0; j < e->n; j++) r->w[i][j] = w[i * e->n + j];
        for (int c = 0; c < e->dv; c++) r->o[i][c] = o[i * D + c];
    }

    /* The focus row by hand, for display; it must agree with the kernel. */
    int f = e->focus;
    r->sum = 0;
    for (int j = 0; j < e->n; j++) {
        double dot = 0;
        for (int c = 0; c < e->d; c++) dot += r->q[f][c] * r->k[j][c];
        r->dot[j] = dot;
        int vis = qkv_mask_visible(&d.mask, e->n, e->n, f, j);
        r->score[j] = vis ? dot * scale : -INFINITY;
        r->ex[j] = vis ? exp(r->score[j]) : 0;
        r->sum += r->ex[j];
    }
    for (int j = 0; j < e->n; j++) {
        double want = r->ex[j] / r->sum;
        if (fabs(want - r->w[f][j]) > 1e-4 + 1e-3 * want) {
            fprintf(stderr, "qkv: explain: reference kernel gives weight %.6f for %s -> %s, by hand %.6f\n",
                    r->w[f][j], e->tok[f], e->tok[j], want);
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- rendering */

/* Integers without decimals ("2"), other values with three ("1.414"). */
static void fmt_num(char *buf, size_t cap, double v) {
    if (fabs(v - round(v)) < 1e-9) snprintf(buf, cap, "%.0f", round(v) == 0 ? 0.0 : round(v));
    else snprintf(buf, cap, "%.3f", v);
}

static void fmt_vec(char *buf, size_t cap, const double *v, int n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < n && o < cap; i++) {
        char x[32];
        fmt_num(x, sizeof x, v[i]);
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", x);
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void fmt_vec3(char *buf, size_t cap, const float *v, int n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%.3f", i ? ", " : "", v[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void fmt_scale(char *buf, size_t cap, const example *e, double scale) {
    if (scale == 1.0) snprintf(buf, cap, "none (1.0)");
    else snprintf(buf, cap, "1/√%d = %.3f", e->d, scale);
}

static int label_width(const example *e, const char *extra) {
    int w = qkv_text_width(extra);
    for (int i = 0; i < e->n; i++)
        if (qkv_text_width(e->tok[i]) > w) w = qkv_text_width(e->tok[i]);
    for (int i = 0; i < e->m; i++)
        if (qkv_text_width(e->dim[i]) > w) w = qkv_text_width(e->dim[i]);
    return w + 3;
}

static void print_matrix(const example *e, const walk *r, int lw, int future_col) {
    int cw = 7;
    for (int j = 0; j < e->n; j++)
        if (qkv_text_width(e->tok[j]) + 2 > cw) cw = qkv_text_width(e->tok[j]) + 2;
    printf("  ");
    cli_put_cell("query \\ key", lw, 0);
    for (int j = 0; j < e->n; j++) cli_put_cell(e->tok[j], cw, 1);
    if (future_col) cli_put_cell("to the right", 15, 1);
    putchar('\n');
    for (int i = 0; i < e->n; i++) {
        printf("  ");
        cli_put_cell(e->tok[i], lw, 0);
        double fut = 0;
        for (int j = 0; j < e->n; j++) {
            char b[32];
            if (r->causal && j > i) snprintf(b, sizeof b, "-");
            else snprintf(b, sizeof b, "%.3f", r->w[i][j]);
            if (j > i) fut += r->w[i][j];
            cli_put_cell(b, cw, 1);
        }
        if (future_col) {
            char b[32];
            if (i + 1 < e->n) snprintf(b, sizeof b, "%.3f", fut);
            else snprintf(b, sizeof b, "-");
            cli_put_cell(b, 15, 1);
        }
        putchar('\n');
    }
}

/* The article's whole sentence as the real Llama-3 tokenizer cuts it (the
 * vocab-only GGUF `make model` writes), and whether the example's tokens are
 * its first ones; or one line saying why there is none (a missing or bad
 * file). Written into line (printed later, once everything succeeded); 0, or
 * 2 after an error line when memory runs out. */
static int llama3_line(char *line, size_t cap, const example *e, const char *vocab) {
    static const char sentence[] = "年假怎么申请？";
    enum { MAX = 32 };
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    qkv_error err = {0};
    int32_t ids[MAX];
    int64_t n = 0;
    const char *pieces[MAX];
    size_t lens[MAX];
    char *labels[MAX] = {0};
    int rc = 0;
    size_t len = 0;
#define PUT(...) (len += (size_t)snprintf(line + len, len < cap ? cap - len : 0, __VA_ARGS__))
    line[0] = 0;
    qkv_status st = qkv_gguf_open(&g, vocab, &err);
    if (!st) st = qkv_tokenizer_load(&tok, g, &err);
    if (!st) st = qkv_tokenize(tok, sentence, strlen(sentence), 0, 0, ids, MAX, &n, &err);
    if (!st) {
        for (int k = 0; k < n; k++) pieces[k] = qkv_token_piece(tok, ids[k], &lens[k]);
        st = qkv_token_labels(labels, pieces, lens, (int)n, &err);
    }
    if (st) {
        if (err.status == QKV_ERR_NOMEM) rc = cli_fail("explain: %s", err.msg);
        else PUT("  Llama-3 no tokens: %s (`make model` writes " LLAMA3_VOCAB ")\n", err.msg);
        goto done;
    }
    int prefix = n >= e->n;
    for (int k = 0; prefix && k < e->n; k++) prefix = !strcmp(labels[k], e->tok[k]);
    PUT("  Llama-3 %s =", sentence);
    for (int k = 0; k < n; k++) PUT(" %s", labels[k]);
    PUT("   (%lld tokens, ids", (long long)n);
    for (int k = 0; k < n; k++) PUT(" %d", ids[k]);
    PUT("; the example is %s %d)\n", prefix ? "the first" : "not its first", e->n);
    qkv_token_labels_free(labels, (int)n);
done:
#undef PUT
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return rc;
}

/* llama3: llama3_line's line, or NULL (an example of one's own). */
static void print_text(const example *e, const walk *r, const walk *base, const char *llama3) {
    int f = e->focus, lw = label_width(e, "query \\ key");
    char b[256], c[256];
    int builtin = llama3 != NULL;
    printf("qkv explain: one attention head, by hand and by the library's reference kernel\n\n");
    if (builtin) fputs(llama3, stdout);
    printf("  tokens  ");
    for (int i = 0; i < e->n; i++) printf("%s%s", i ? " " : "", e->tok[i]);
    printf("   (%d tokens, inputs of %d dims, one head of d = %d)\n", e->n, e->m, e->d);
    fmt_scale(b, sizeof b, e, r->scale);
    printf("  mask    %s    scale %s\n", r->causal ? "causal" : "none (--no-mask)", b);
    if (builtin) printf("  (teaching numbers from the article, not Llama's weights)\n");

    /* 1. projections */
    printf("\n1. Q, K, V: every token's input row times three learned matrices\n\n  ");
    cli_put_cell("input x", lw, 0);
    int nw = 6;
    for (int m = 0; m < e->m; m++)
        for (int t = 0; t < e->n; t++) {
            fmt_num(b, sizeof b, e->x[t][m]);
            if (qkv_text_width(b) + 2 > nw) nw = qkv_text_width(b) + 2;
        }
    for (int m = 0; m < e->m; m++)
        if (qkv_text_width(e->dim[m]) + 2 > nw) nw = qkv_text_width(e->dim[m]) + 2;
    for (int m = 0; m < e->m; m++) cli_put_cell(e->dim[m], nw, 1);
    putchar('\n');
    for (int t = 0; t < e->n; t++) {
        printf("  ");
        cli_put_cell(e->tok[t], lw, 0);
        for (int m = 0; m < e->m; m++) {
            fmt_num(b, sizeof b, e->x[t][m]);
            cli_put_cell(b, nw, 1);
        }
        putchar('\n');
    }
    /* vector columns: width of the widest vector */
    int vw = qkv_text_width("q = x·W_Q") + 3;
    for (int m = 0; m < e->m; m++) {
        const double *ws[3] = {e->wq[m], e->wk[m], e->wv[m]};
        for (int s = 0; s < 3; s++) {
            fmt_vec(b, sizeof b, ws[s], s == 2 ? e->dv : e->d);
            if (qkv_text_width(b) + 3 > vw) vw = qkv_text_width(b) + 3;
        }
    }
    for (int t = 0; t < e->n; t++) {
        const double *vs[3] = {r->q[t], r->k[t], r->v[t]};
        for (int s = 0; s < 3; s++) {
            fmt_vec(b, sizeof b, vs[s], s == 2 ? e->dv : e->d);
            if (qkv_text_width(b) + 3 > vw) vw = qkv_text_width(b) + 3;
        }
    }
    printf("\n  ");
    cli_put_cell("input dim", lw, 0);
    cli_put_cell("W_Q", vw, 0);
    cli_put_cell("W_K", vw, 0);
    printf("W_V\n");
    for (int m = 0; m < e->m; m++) {
        printf("  ");
        cli_put_cell(e->dim[m], lw, 0);
        fmt_vec(b, sizeof b, e->wq[m], e->d);
        cli_put_cell(b, vw, 0);
        fmt_vec(b, sizeof b, e->wk[m], e->d);
        cli_put_cell(b, vw, 0);
        fmt_vec(b, sizeof b, e->wv[m], e->dv);
        printf("%s\n", b);
    }
    printf("\n  ");
    cli_put_cell("token", lw, 0);
    cli_put_cell("q = x·W_Q", vw, 0);
    cli_put_cell("k = x·W_K", vw, 0);
    printf("v = x·W_V\n");
    for (int t = 0; t < e->n; t++) {
        printf("  ");
        cli_put_cell(e->tok[t], lw, 0);
        fmt_vec(b, sizeof b, r->q[t], e->d);
        cli_put_cell(b, vw, 0);
        fmt_vec(b, sizeof b, r->k[t], e->d);
        cli_put_cell(b, vw, 0);
        fmt_vec(b, sizeof b, r->v[t], e->dv);
        printf("%s\n", b);
    }

    /* 2. one row by hand */
    if (r->scale == 1.0)
        printf("\n2. The %s row: score s_j = q_%s · k_j (no scaling), weight w_j = e^s_j / Σ e^s\n\n  ",
               e->tok[f], e->tok[f]);
    else
        printf("\n2. The %s row: score s_j = q_%s · k_j / √%d, weight w_j = e^s_j / Σ e^s\n\n  ",
               e->tok[f], e->tok[f], e->d);
    cli_put_cell("key", lw, 0);
    cli_put_cell("q·k", 8, 1);
    cli_put_cell("s", 10, 1);
    cli_put_cell("e^s", 11, 1);
    cli_put_cell("weight", 10, 1);
    putchar('\n');
    for (int j = 0; j < e->n; j++) {
        printf("  ");
        cli_put_cell(e->tok[j], lw, 0);
        fmt_num(b, sizeof b, r->dot[j]);
        cli_put_cell(b, 8, 1);
        if (isinf(r->score[j])) {
            cli_put_cell("masked", 10, 1);
            cli_put_cell("0", 11, 1);
        } else {
            snprintf(b, sizeof b, "%.3f", r->score[j]);
            cli_put_cell(b, 10, 1);
            snprintf(b, sizeof b, "%.3f", r->ex[j]);
            cli_put_cell(b, 11, 1);
        }
        snprintf(b, sizeof b, "%.3f", r->w[f][j]);
        cli_put_cell(b, 10, 1);
        putchar('\n');
    }
    printf("  ");
    cli_put_cell("sum", lw, 0);
    cli_put_cell("", 18, 1);
    snprintf(b, sizeof b, "%.3f", r->sum);
    cli_put_cell(b, 11, 1);
    double wsum = 0;
    for (int j = 0; j < e->n; j++) wsum += r->w[f][j];
    snprintf(b, sizeof b, "%.3f", wsum);
    cli_put_cell(b, 10, 1);
    printf("\n\n  The kernel's log-sum-exp for this row is LSE = %.3f, and e^LSE = %.3f is the sum.\n",
           r->lse[f], exp(r->lse[f]));

    /* 3. the weighted sum */
    printf("\n3. Output: the weights times v, summed\n\n  ");
    for (int j = 0, first = 1; j < e->n; j++) {
        if (r->w[f][j] == 0) continue;
        fmt_vec(b, sizeof b, r->v[j], e->dv);
        printf("%s%.3f × %s", first ? "" : " + ", r->w[f][j], b);
        first = 0;
    }
    fmt_vec3(b, sizeof b, r->o[f], e->dv);
    printf("\n  = %s\n", b);
    int top = 0;
    for (int j = 1; j < e->n; j++)
        if (r->w[f][j] > r->w[f][top]) top = j;
    printf("  %s takes %.1f%% of its weight from %s%s.\n", e->tok[f], 100.0 * r->w[f][top],
           top == f ? "itself, " : "", e->tok[top]);

    /* 4. the matrix */
    printf("\n4. Every row at once: the %d × %d weight matrix (row = query, column = key)\n\n", e->n, e->n);
    print_matrix(e, r, lw, !r->causal);
    putchar('\n');
    if (r->causal) {
        printf("  The causal mask adds -inf right of the diagonal (shown as -), so those weights\n"
               "  are 0 and every row still sums to 1: each token sees only itself and the left.\n");
        if (!base) printf("  Try --no-mask and --no-scale.\n");
    } else {
        /* The row that leans hardest on the token right after it: that token is
         * exactly what the position is trained to predict. */
        int row = 0;
        for (int i = 1; i + 1 < e->n; i++)
            if (r->w[i][i + 1] > r->w[row][row + 1]) row = i;
        if (e->n > 1) {
            printf("  Without the mask %s puts %.3f on %s, the token right after it. At %s the\n"
                   "  model is trained to predict the next token, %s, so seeing it is copying the\n"
                   "  answer; when generating, nothing to the right exists yet. With the causal\n"
                   "  mask the %s row is",
                   e->tok[row], r->w[row][row + 1], e->tok[row + 1], e->tok[row], e->tok[row + 1],
                   e->tok[row]);
            for (int j = 0; j <= row; j++) printf(" %.3f", base->w[row][j]);
            printf(".\n");
        }
    }
    if (r->scale == 1.0 && base) {
        fmt_scale(c, sizeof c, e, base->scale);
        printf("  Without the scale, %s → %s is %.3f instead of %.3f (with %s):\n"
               "  larger score gaps make the softmax pickier. At d = %d that changes little;\n"
               "  `qkv scaling` shows what happens at d = 128.\n",
               e->tok[f], e->tok[top], r->w[f][top], base->w[f][top], c, e->d);
    }
    printf("\n(weights, output and LSE from qkv_attn_reference; the d = %d head is padded\n"
           " with zeros to %d dims, which changes no dot product; the scale is passed explicitly)\n",
           e->d, QKV_HEAD_DIM_MIN);
}

/* ------------------------------------------------------------------ JSON */

static void json_num(double v) {
    if (!isfinite(v)) printf("null");
    else if (fabs(v - round(v)) < 1e-12 && fabs(v) < 1e15) printf("%.0f", round(v) == 0 ? 0.0 : v);
    else printf("%.9g", v);
}

static void json_vec(const double *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) {
        if (i) printf(", ");
        json_num(v[i]);
    }
    putchar(']');
}

static void json_fvec(const float *v, int n) {
    double t[EX_MAX_TOK];
    for (int i = 0; i < n; i++) t[i] = v[i];
    json_vec(t, n);
}

static void json_names(const char (*names)[EX_NAME], int n) {
    putchar('[');
    for (int i = 0; i < n; i++) {
        if (i) printf(", ");
        cli_json_string(stdout, names[i]);
    }
    putchar(']');
}

static void json_rows(const char *key, const double (*m)[EX_MAX_HEAD], int rows, int cols, int last) {
    printf("  \"%s\": [", key);
    for (int i = 0; i < rows; i++) {
        if (i) printf(", ");
        json_vec(m[i], cols);
    }
    printf("]%s\n", last ? "" : ",");
}

static void json_weights(const char *key, const walk *r, int n) {
    printf("  \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (i) printf(", ");
        json_fvec(r->w[i], n);
    }
    printf("]");
}

static void print_json(const example *e, const walk *r, const walk *base) {
    int f = e->focus;
    printf("{\n  \"kernel\": \"reference\",\n  \"tokens\": ");
    json_names(e->tok, e->n);
    printf(",\n  \"dims\": ");
    json_names(e->dim, e->m);
    printf(",\n  \"d_head\": %d,\n  \"mask\": \"%s\",\n  \"scale\": ", e->d, r->causal ? "causal" : "none");
    json_num(r->scale);
    printf(",\n");
    double xm[EX_MAX_TOK][EX_MAX_HEAD];
    for (int t = 0; t < e->n; t++)
        for (int m = 0; m < e->m; m++) xm[t][m] = e->x[t][m];
    json_rows("x", (const double (*)[EX_MAX_HEAD])xm, e->n, e->m, 0);
    json_rows("w_q", e->wq, e->m, e->d, 0);
    json_rows("w_k", e->wk, e->m, e->d, 0);
    json_rows("w_v", e->wv, e->m, e->dv, 0);
    json_rows("q", r->q, e->n, e->d, 0);
    json_rows("k", r->k, e->n, e->d, 0);
    json_rows("v", r->v, e->n, e->dv, 0);
    printf("  \"focus\": {\"index\": %d, \"token\": ", f);
    cli_json_string(stdout, e->tok[f]);
    printf(", \"dots\": ");
    json_vec(r->dot, e->n);
    printf(", \"scores\": ");
    json_vec(r->score, e->n);
    printf(", \"exp\": ");
    json_vec(r->ex, e->n);
    printf(", \"sum_exp\": ");
    json_num(r->sum);
    printf(", \"lse\": ");
    json_num(r->lse[f]);
    printf(", \"weights\": ");
    json_fvec(r->w[f], e->n);
    printf(", \"output\": ");
    json_fvec(r->o[f], e->dv);
    printf("},\n");
    json_weights("weights", r, e->n);
    printf(",\n  \"outputs\": [");
    for (int i = 0; i < e->n; i++) {
        if (i) printf(", ");
        json_fvec(r->o[i], e->dv);
    }
    printf("],\n  \"lse\": ");
    json_fvec(r->lse, e->n);
    if (base) {
        printf(",\n  \"baseline\": {\"mask\": \"causal\", \"scale\": ");
        json_num(base->scale);
        printf(",\n");
        json_weights("weights", base, e->n);
        printf("}");
    }
    printf("\n}\n");
}

/* -------------------------------------------------------------- --permute */

/* The article's last claim: without RoPE the dot product compares content
 * only, so the last token's output is the same for every ordering of the
 * tokens before it (it still sees them all); with RoPE it is not. Every
 * ordering of the prefix is run (at most EX_PERMUTE_MAX_TOK tokens). */
#define EX_PERMUTE_MAX_TOK 6  /* 5! = 120 orderings */

/* One ordering: perm[p] is the token at position p (the last stays last). */
typedef struct {
    int perm[EX_MAX_TOK];
    float off[EX_MAX_TOK][EX_MAX_HEAD];  /* RoPE off, the reference kernel: [n, dv] */
    float on[EX_MAX_TOK][EX_MAX_HEAD];   /* RoPE on: the last row's output [dv] in on[n-1] */
    float fast[EX_MAX_HEAD];             /* RoPE off, qkv_attn's own pick: the last row */
    double by_hand[EX_MAX_HEAD];         /* RoPE off, in double, summed in key order: the last row */
    double on_diff, off_diff_fast, off_diff_hand; /* max |Δ| of the last row against the first ordering */
    int same_bits;                       /* RoPE off, the reference kernel: the first ordering's bits */
    int changed[EX_MAX_TOK];             /* tokens whose row sees another set of keys */
    double changed_diff;                 /* max |Δ| of those rows, RoPE off */
} ordering;

/* The head over the tokens in the order perm, RoPE'd at positions 0..n-1
 * when rope (RoPE of the d-dim head: pairs (2i, 2i+1), base 10000; at d = 2
 * one pair turned by p radians), causal, scale 1/sqrt(d), through kernel
 * (REFERENCE: qkv_attn_reference). o: [n, dv]. */
static int permuted_head(float (*o)[EX_MAX_HEAD], const walk *r, const example *e, const int *perm, int rope,
                         qkv_kernel kernel) {
    enum { D = QKV_HEAD_DIM_MIN };
    const int n = e->n, d = e->d;
    float qd[EX_MAX_TOK * EX_MAX_HEAD], kd[EX_MAX_TOK * EX_MAX_HEAD]; /* [n, d] */
    float q[EX_MAX_TOK * D] = {0}, k[EX_MAX_TOK * D] = {0}, v[EX_MAX_TOK * D] = {0}, out[EX_MAX_TOK * D];
    int64_t pos[EX_MAX_TOK];
    for (int p = 0; p < n; p++) {
        pos[p] = p;
        for (int c = 0; c < d; c++) {
            qd[p * d + c] = (float)r->q[perm[p]][c];
            kd[p * d + c] = (float)r->k[perm[p]][c];
        }
        for (int c = 0; c < e->dv; c++) v[p * D + c] = (float)r->v[perm[p]][c];
    }
    qkv_error err = {0};
    qkv_rope rr = qkv_rope_default();
    rr.pairing = QKV_ROPE_INTERLEAVED;
    if (rope && (qkv_rope_apply(qd, pos, &rr, 1, n, d, &err) || qkv_rope_apply(kd, pos, &rr, 1, n, d, &err)))
        return cli_fail("explain: %s", err.msg);
    for (int p = 0; p < n; p++)
        for (int c = 0; c < d; c++) {
            q[p * D + c] = qd[p * d + c];
            k[p * D + c] = kd[p * d + c];
        }
    const qkv_attn_desc desc = example_desc(n, 1, 1.0 / sqrt((double)d));
    qkv_status st = kernel == QKV_KERNEL_REFERENCE ? qkv_attn_reference(out, NULL, NULL, q, k, v, &desc, &err)
                                                   : qkv_attn(out, NULL, q, k, v, &desc, kernel, &err);
    if (st) return cli_fail("explain: %s", err.msg);
    for (int p = 0; p < n; p++)
        for (int c = 0; c < e->dv; c++) o[p][c] = out[p * D + c];
    return 0;
}

/* The last row by hand in double, RoPE off, summing e^s and w v in key order. */
static void last_row_by_hand(double *o, const walk *r, const example *e, const int *perm) {
    const int n = e->n, f = perm[n - 1];
    double s[EX_MAX_TOK], mx = -INFINITY, sum = 0;
    for (int p = 0; p < n; p++) {
        double dot = 0;
        for (int c = 0; c < e->d; c++) dot += r->q[f][c] * r->k[perm[p]][c];
        s[p] = dot / sqrt((double)e->d);
        mx = fmax(mx, s[p]);
    }
    for (int p = 0; p < n; p++) sum += s[p] = exp(s[p] - mx);
    for (int c = 0; c < e->dv; c++) o[c] = 0;
    for (int p = 0; p < n; p++)
        for (int c = 0; c < e->dv; c++) o[c] += s[p] / sum * r->v[perm[p]][c];
}

static double fdiff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* The next ordering of perm[0 .. m-1] in lexicographic order; 0 after the last. */
static int next_ordering(int *perm, int m) {
    int i = m - 2;
    while (i >= 0 && perm[i] > perm[i + 1]) i--;
    if (i < 0) return 0;
    int j = m - 1;
    while (perm[j] < perm[i]) j--;
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
    for (int a = i + 1, b = m - 1; a < b; a++, b--) t = perm[a], perm[a] = perm[b], perm[b] = t;
    return 1;
}

/* Every ordering of the tokens before the last, into ord[0 .. *count-1]
 * (ord[0]: the example's own order). 0 or 2. */
static int run_orderings(ordering *ord, int *count, const example *e, const walk *r, qkv_kernel fast) {
    const int n = e->n;
    int perm[EX_MAX_TOK], c = 0;
    for (int p = 0; p < n; p++) perm[p] = p;
    do {
        ordering *o = &ord[c++];
        memset(o, 0, sizeof *o);
        memcpy(o->perm, perm, sizeof perm);
        float fast_rows[EX_MAX_TOK][EX_MAX_HEAD];
        if (permuted_head(o->off, r, e, perm, 0, QKV_KERNEL_REFERENCE) || permuted_head(o->on, r, e, perm, 1, QKV_KERNEL_REFERENCE) ||
            permuted_head(fast_rows, r, e, perm, 0, fast))
            return CLI_EXIT_BAD_INPUT;
        memcpy(o->fast, fast_rows[n - 1], sizeof o->fast);
        last_row_by_hand(o->by_hand, r, e, perm);
        const ordering *o0 = &ord[0];
        o->on_diff = fdiff(o->on[n - 1], o0->on[n - 1], e->dv);
        o->off_diff_fast = fdiff(o->fast, o0->fast, e->dv);
        for (int i = 0; i < e->dv; i++) o->off_diff_hand = fmax(o->off_diff_hand, fabs(o->by_hand[i] - o0->by_hand[i]));
        o->same_bits = !memcmp(o->off[n - 1], o0->off[n - 1], (size_t)e->dv * sizeof(float));
        /* the row at position p sees tokens perm[0..p]; in the example's own
         * order token perm[p] saw 0..perm[p]: the same set iff perm[0..p] is 0..p */
        for (int p = 0, same = 1; p < n - 1; p++) {
            same = same && perm[p] == p;
            if (same) continue;
            o->changed[perm[p]] = 1;
            o->changed_diff = fmax(o->changed_diff, fdiff(o->off[p], o0->off[perm[p]], e->dv));
        }
    } while (next_ordering(perm, n - 1));
    *count = c;
    return 0;
}

static void permute_summary(double *on_max, double *on_rel, double *hand, double *fast, int *same, const ordering *ord,
                            int count, const example *e) {
    *on_max = *hand = *fast = 0;
    *same = 0;
    double ref = 0;
    for (int c = 0; c < e->dv; c++) ref = fmax(ref, fabs((double)ord[0].on[e->n - 1][c]));
    for (int i = 0; i < count; i++) {
        *on_max = fmax(*on_max, ord[i].on_diff);
        *hand = fmax(*hand, ord[i].off_diff_hand);
        *fast = fmax(*fast, ord[i].off_diff_fast);
        *same += ord[i].same_bits;
    }
    *on_rel = ref > 0 ? *on_max / ref : 0;
}

static void fmt_fvec6(char *buf, size_t cap, const float *v, int n) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%.6f", i ? ", " : "", v[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* terms: the most non-zero v_j entries in one output column (w_j v_j terms) */
static void print_permute_text(const example *e, const ordering *ord, int count, qkv_kernel fast, int terms) {
    const int n = e->n, f = n - 1;
    double on_max, on_rel, hand, fast_max;
    int same;
    permute_summary(&on_max, &on_rel, &hand, &fast_max, &same, ord, count, e);
    printf("qkv explain --permute: order enters attention in two places only, the causal mask and RoPE\n\n  tokens  ");
    for (int i = 0; i < n; i++) printf("%s%s", i ? " " : "", e->tok[i]);
    printf("   (%s is last and sees all %d; the %d before it in every order: %d orderings)\n", e->tok[f], n, n - 1,
           count);
    printf("  RoPE off: s_j = q_%s · k_j / √%d compares content only\n", e->tok[f], e->d);
    printf("  RoPE on:  q and k turned by their position p = 0..%d (pairs of dims, angle p·10000^(-2i/%d);\n"
           "            %s)\n", n - 1, e->d,
           e->d == 2 ? "at d = 2 one pair turned by p radians" : "pair i of the d-dim head");
    printf("  outputs from qkv_attn_reference (sums in double, rounded once to float)\n\n");
    int ow = 2 + 10 * e->dv, lw = 0;
    for (int i = 0; i < n; i++) lw += qkv_text_width(e->tok[i]) + 1;
    lw = lw + 2 > 10 ? lw + 2 : 10;
    char b[256];
    printf("  ");
    cli_put_cell("ordering", lw, 0);
    snprintf(b, sizeof b, "RoPE off: %s", e->tok[f]);
    cli_put_cell(b, ow + 2, 0);
    cli_put_cell("bits", 6, 0);
    snprintf(b, sizeof b, "RoPE on: %s", e->tok[f]);
    cli_put_cell(b, ow + 2, 0);
    printf("  max |Δ|   relative   rows seeing other keys\n");
    for (int i = 0; i < count; i++) {
        const ordering *o = &ord[i];
        size_t len = 0;
        for (int p = 0; p < n; p++) len += (size_t)snprintf(b + len, sizeof b - len, "%s%s", p ? " " : "", e->tok[o->perm[p]]);
        printf("  ");
        cli_put_cell(b, lw, 0);
        fmt_fvec6(b, sizeof b, o->off[f], e->dv);
        cli_put_cell(b, ow + 2, 0);
        cli_put_cell(i == 0 ? "-" : o->same_bits ? "same" : "differ", 6, 0);
        fmt_fvec6(b, sizeof b, o->on[f], e->dv);
        cli_put_cell(b, ow + 2, 0);
        if (i == 0) {
            printf("  %7s   %8s   -\n", "-", "-");
            continue;
        }
        double ref = 0;
        for (int c = 0; c < e->dv; c++) ref = fmax(ref, fabs((double)ord[0].on[f][c]));
        printf("  %7.3f   %8.3f   ", o->on_diff, ref > 0 ? o->on_diff / ref : 0);
        int any = 0;
        for (int t = 0; t < n; t++)
            if (o->changed[t]) printf("%s%s", any++ ? " " : "", e->tok[t]);
        if (any) printf(" (max |Δ| %.3f)", o->changed_diff);
        else printf("none");
        putchar('\n');
    }
    putchar('\n');
    if (same == count)
        printf("  RoPE off: %s's output is the same for all %d orderings, bit for bit.", e->tok[f], count);
    else
        printf("  RoPE off: %s's output has the first ordering's bits in %d of %d orderings.", e->tok[f], same, count);
    printf(" The kernel sums\n"
           "  e^s and w·v in key order, so an ordering only changes the order of the additions: float addition\n"
           "  is commutative but not associative, so a reordered sum is exact only when no partial sum rounds.\n"
           "  The reference kernel adds in double and rounds once to float. By hand in double, in key order,\n"
           "  the %d orderings' outputs differ by at most %.3g (a float's spacing at the output is %.3g)",
           count, hand, fmax(fabs((double)ord[0].off[f][0]), 1.0) * 0x1p-23);
    if (hand == 0)
        printf(":\n  each output column adds at most %d non-zero terms w_j·v_j, and a + b = b + a exactly (adding 0\n"
               "  is exact too), and the %d terms of Σ e^s round alike in every order here.", terms, n);
    else
        printf(", so\n  the rounding to float %s.", same == count ? "hides it" : "does not always hide it");
    printf("\n  The %s kernel (qkv_attn's own pick, float sums): max |Δ| %.3g over the %d orderings.\n"
           "  With general numbers a reordering moves the last bits: -m shows a real model's layers,\n"
           "  within 8·n·u·max|v| (u = 2^-24).\n",
           qkv_kernel_name(fast), fast_max, count);
    printf("  RoPE on: the orderings move %s's output by up to %.3f (%.0f%% of its largest value): q_%s at\n"
           "  position %d and a key at position p score through %d - p, so the same key scores differently in\n"
           "  another place.\n", e->tok[f], on_max, 100 * on_rel, e->tok[f], f, f);
    printf("  The mask still orders the other rows: row i sees the keys 0..i, so an ordering changes the set\n"
           "  of keys of every row before the last whose prefix moved (last column), with or without RoPE.\n"
           "  A real model's layers, and a whole model: qkv explain --permute -m MODEL.\n");
}

static void print_permute_json(const example *e, const ordering *ord, int count, qkv_kernel fast) {
    const int n = e->n, f = n - 1;
    double on_max, on_rel, hand, fast_max;
    int same;
    permute_summary(&on_max, &on_rel, &hand, &fast_max, &same, ord, count, e);
    printf("{\n  \"kernel\": \"reference\",\n  \"fast_kernel\": \"%s\",\n  \"tokens\": ", qkv_kernel_name(fast));
    json_names(e->tok, n);
    printf(",\n  \"rope\": {\"pairing\": \"interleaved\", \"theta\": 10000, \"positions\": \"0..%d\"},\n", n - 1);
    printf("  \"rope_off_bit_identical\": %d,\n  \"rope_off_max_abs_double\": ", same);
    json_num(hand);
    printf(",\n  \"rope_off_max_abs_fast\": ");
    json_num(fast_max);
    printf(",\n  \"rope_on_max_abs\": ");
    json_num(on_max);
    printf(",\n  \"rope_on_rel\": ");
    json_num(on_rel);
    printf(",\n  \"orderings\": [\n");
    for (int i = 0; i < count; i++) {
        const ordering *o = &ord[i];
        char names[EX_MAX_TOK][EX_NAME];
        int nc = 0;
        for (int p = 0; p < n; p++) memcpy(names[p], e->tok[o->perm[p]], EX_NAME);
        printf("    {\"order\": ");
        json_names((const char (*)[EX_NAME])names, n);
        printf(", \"rope_off\": ");
        json_fvec(o->off[f], e->dv);
        printf(", \"rope_on\": ");
        json_fvec(o->on[f], e->dv);
        printf(", \"same_bits\": %s, \"rope_on_max_abs\": ", o->same_bits ? "true" : "false");
        json_num(o->on_diff);
        printf(", \"fast_max_abs\": ");
        json_num(o->off_diff_fast);
        printf(", \"double_max_abs\": ");
        json_num(o->off_diff_hand);
        for (int t = 0; t < n; t++)
            if (o->changed[t]) memcpy(names[nc++], e->tok[t], EX_NAME);
        printf(", \"rows_seeing_other_keys\": ");
        json_names((const char (*)[EX_NAME])names, nc);
        printf(", \"rows_max_abs\": ");
        json_num(o->changed_diff);
        printf("}%s\n", i + 1 < count ? "," : "");
    }
    printf("  ]\n}\n");
}

static int explain_permute_example(const example *e, int json) {
    if (e->focus != e->n - 1) return cli_fail("explain: --permute keeps the focus last: '%s' is not the last token", e->tok[e->focus]);
    if (e->n < 2 || e->n > EX_PERMUTE_MAX_TOK)
        return cli_fail("explain: --permute takes 2 to %d tokens (%d given)", EX_PERMUTE_MAX_TOK, e->n);
    if (e->d % 2) return cli_fail("explain: --permute turns pairs of q/k dims: d = %d is odd", e->d);
    walk r;
    if (run_walk(&r, e, 1, 1.0 / sqrt((double)e->d))) return CLI_EXIT_BAD_INPUT;
    static ordering ord[120];
    int count = 0;
    const qkv_attn_desc d = example_desc(e->n, 1, 1.0 / sqrt((double)e->d));
    const qkv_kernel fast = qkv_attn_pick(&d);
    if (run_orderings(ord, &count, e, &r, fast)) return CLI_EXIT_BAD_INPUT;
    if (json) print_permute_json(e, ord, count, fast);
    int terms = 0;
    for (int c = 0; c < e->dv; c++) {
        int k = 0;
        for (int j = 0; j < e->n; j++) k += r.v[j][c] != 0;
        terms = k > terms ? k : terms;
    }
    if (!json) print_permute_text(e, ord, count, fast, terms);
    return 0;
}

/* ------------------------------------------------------------------ main */

int cmd_explain(int argc, char **argv) {
    int no_mask = 0, no_scale = 0, json = 0, print_example = 0, permute = 0;
    const char *input = NULL, *vocab = LLAMA3_VOCAB;
    explain_permute_args pm = {.trials = 16, .seed = 1};
    cli_flag flags[] = {
        {.name = "--no-mask", .kind = CLI_BOOL, .dest = &no_mask,
         .help = "no causal mask: every row sees every token (and why that cheats)"},
        {.name = "--no-scale", .kind = CLI_BOOL, .dest = &no_scale, .help = "scores q.k without the 1/sqrt(d) factor"},
        CLI_FLAG_JSON(&json, "the same numbers as JSON"),
        {.name = "--input", .kind = CLI_STRING, .dest = &input, .metavar = "FILE",
         .help = "your own small example ('-' reads stdin), in the format below"},
        {.name = "--example", .kind = CLI_BOOL, .dest = &print_example,
         .help = "print the built-in example in that format and exit"},
        {.name = "--vocab", .kind = CLI_STRING, .dest = &vocab, .metavar = "FILE",
         .help = "the GGUF whose tokenizer cuts the article's sentence (default " LLAMA3_VOCAB ")"},
        {.name = "--permute", .kind = CLI_BOOL, .dest = &permute,
         .help = "the article's last claim: every ordering of the tokens before the last,\n"
                 "RoPE off and on (with -m: every layer of a real model, and the whole model)"},
        {.name = "--model", .alias = "-m", .kind = CLI_STRING, .dest = &pm.model, .metavar = "FILE",
         .help = "with --permute: the GGUF model whose layers are permuted"},
        CLI_FLAGS_PROMPT(&pm.pa),
        {.name = "--trials", .kind = CLI_INT, .dest = &pm.trials, .lo = 1, .hi = 10000, .metavar = "N",
         .help = "with -m: random orderings of the prompt (default 16)"},
        {.name = "--seed", .kind = CLI_I64, .dest = &pm.seed, .lo = 0, .hi = 0x1p63, .metavar = "S",
         .help = "with -m: the orderings' seed (default 1)"},
        CLI_FLAG_THREADS(&pm.threads),
        {0},
    };
    const cli_command cmd = {.name = "explain", .usage = "[--no-mask] [--no-scale] [--json] [--input FILE | --example]\n"
                             "       qkv explain --permute [--json] [--input FILE | -m MODEL [-p TEXT] [--trials N] [--seed S]]",
                             .about = "Walks one attention head through the article's example (年 假 怎么 申请): Q, K, V,\n"
                             "the last row's scores, exponentials and weights, the weighted sum of v, and\n"
                             "the whole weight matrix, computed by the library's reference kernel.",
                             .notes = input_format, .flags = flags};
    CLI_PARSE_OR_RETURN(&cmd, argc, argv);
    static const char *const model_flags[] = {"--prompt", "--file", "--tokens", "--chat", "--system",
                                              "--special", "--trials", "--seed", "--threads", NULL};
    for (int i = 0; model_flags[i]; i++)
        if (!pm.model && cli_given(&cmd, model_flags[i])) return cli_fail("explain: %s needs --permute -m MODEL", model_flags[i]);
    if (pm.model && !permute) return cli_fail("explain: -m needs --permute");
    if (permute && (no_mask || no_scale)) return cli_fail("explain: --permute keeps the mask and the scale");
    if (pm.model && (input || print_example)) return cli_fail("explain: -m and --input/--example exclude each other");
    if (pm.model) {
        pm.json = json;
        if (!pm.pa.text && !pm.pa.file && !pm.pa.tokens) pm.pa.text = EXPLAIN_PERMUTE_PROMPT;
        if (cli_prompt_check(&pm.pa)) return CLI_EXIT_BAD_INPUT;
        return explain_permute_model(&pm);
    }
    if (print_example) {
        if (input) return cli_fail("explain: --example and --input exclude each other");
        fputs(builtin_example, stdout);
        return 0;
    }
    example e;
    if (input) {
        char *text = cli_read_file(input, 1 << 20, NULL); /* 1 MiB is plenty for a hand example */
        if (!text) return CLI_EXIT_BAD_INPUT;
        int rc = parse_example(&e, text, strcmp(input, "-") ? input : "stdin");
        free(text);
        if (rc) return rc;
    } else if (parse_example(&e, builtin_example, "built-in example")) {
        return 1;
    }

    double scaled = 1.0 / sqrt((double)e.d);
    walk run, base;
    if (run_walk(&run, &e, !no_mask, no_scale ? 1.0 : scaled)) return CLI_EXIT_BAD_INPUT;
    int alt = no_mask || no_scale;
    if (alt && run_walk(&base, &e, 1, scaled)) return CLI_EXIT_BAD_INPUT;
    char llama3[2048];
    if (!json && !input && llama3_line(llama3, sizeof llama3, &e, vocab)) return CLI_EXIT_BAD_INPUT;
    if (permute) return explain_permute_example(&e, json);
    if (json) print_json(&e, &run, alt ? &base : NULL);
    else print_text(&e, &run, alt ? &base : NULL, input ? NULL : llama3);
    return 0;
}
