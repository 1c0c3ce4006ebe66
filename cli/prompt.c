/*
 * prompt.c — the one prompt loader of the commands that read a prompt (run,
 * tokenize, inspect, sinks): -p TEXT, -f FILE or --tokens IDS, optionally
 * through the GGUF's chat template, with one BOS rule (cli.h). It does not
 * open the model's weights; a command that runs the model passes its GGUF.
 */
#include "cli.h"
#include "flags.h"
#include "prompt.h"
#include "util.h"
#include "qkv_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_model_fail(const qkv_error *err, const char *model) {
    if (err->status == QKV_ERR_IO && !strcmp(model, CLI_DEFAULT_MODEL))
        return cli_fail("%s (run `make model` to download the default model, or give -m FILE)", err->msg);
    return cli_fail("%s", err->msg);
}

int cli_tokenizer_open(qkv_gguf **g, qkv_tokenizer **tok, const char *model) {
    qkv_error err = {0};
    *g = NULL;
    *tok = NULL;
    if (qkv_gguf_open(g, model, &err) == QKV_OK && qkv_tokenizer_load(tok, *g, &err) == QKV_OK) return 0;
    qkv_gguf_close(*g);
    *g = NULL;
    return cli_model_fail(&err, model);
}

static int tokenize_text(cli_prompt *out, const cli_prompt_args *a, const qkv_gguf *g, const qkv_tokenizer *tok) {
    size_t len = 0;
    char *owned = NULL, *chat = NULL;
    const char *text = a->text;
    if (a->file) {
        if (!(owned = cli_read_file(a->file, CLI_PROMPT_MAX_BYTES, &len))) return CLI_EXIT_BAD_INPUT;
        text = owned;
    } else {
        len = strlen(text);
    }
    qkv_error err = {0};
    int add_special = !a->no_bos, rc = 0;
    if (a->chat) {
        if (qkv_chat_format(&chat, g, a->system, text, &err)) {
            free(owned);
            return cli_fail("--chat: %s", err.msg);
        }
        text = chat;
        len = strlen(chat);
    }
    int64_t bound = qkv_tokenize_bound(len), n = 0;
    out->ids = malloc((size_t)(bound > 0 ? bound : 1) * sizeof(int32_t));
    if (!out->ids) rc = cli_fail("out of memory for %zu bytes of prompt", len);
    else if (a->chat ? qkv_chat_tokenize(tok, text, len, add_special, out->ids, bound, &n, &err)
                     : qkv_tokenize(tok, text, len, add_special, a->special, out->ids, bound, &n, &err))
        rc = cli_fail("%s", err.msg);
    else if (n > 0x7fffffff)
        rc = cli_fail("the prompt has %lld tokens, more than a run can take", (long long)n);
    out->n = (int)n;
    free(owned);
    free(chat);
    return rc;
}

int cli_prompt_check(const cli_prompt_args *a) {
    if (!!a->text + !!a->file + !!a->tokens != 1)
        return cli_fail("give exactly one of -p TEXT, -f FILE or --tokens IDS");
    if (a->chat && a->tokens) return cli_fail("--chat needs text (-p or -f), not --tokens");
    if (a->system && !a->chat) return cli_fail("--system needs --chat");
    return 0;
}

int cli_prompt_load(cli_prompt *out, const cli_prompt_args *a, const qkv_gguf *g, const qkv_tokenizer *tok) {
    memset(out, 0, sizeof *out);
    int rc = cli_prompt_check(a);
    if (rc) return rc;
    if (a->tokens) {
        cli_ints l = {0};
        rc = cli_parse_ints(&l, a->tokens_flag ? a->tokens_flag : "--tokens", a->tokens, 0, qkv_tokenizer_n_vocab(tok) - 1);
        out->ids = malloc((size_t)(l.n ? l.n : 1) * sizeof(int32_t));
        if (!rc && !out->ids) rc = cli_fail("out of memory");
        for (int i = 0; !rc && i < l.n; i++) out->ids[i] = l.v[i];
        out->n = rc ? 0 : l.n;
        cli_ints_free(&l);
    } else {
        rc = tokenize_text(out, a, g, tok);
    }
    if (!rc && out->n == 0 && !a->allow_empty) rc = cli_fail("the prompt has no tokens");
    if (!rc && a->max_tokens > 0 && out->n > a->max_tokens) out->n = a->max_tokens;
    if (rc) cli_prompt_free(out);
    return rc;
}

int cli_prompt_labels(cli_prompt *p, const qkv_tokenizer *tok) {
    p->labels = calloc((size_t)p->n, sizeof(char *));
    const char **pieces = malloc((size_t)p->n * sizeof *pieces);
    size_t *lens = malloc((size_t)p->n * sizeof *lens);
    qkv_error err = {0};
    int rc = 0;
    if (!p->labels || !pieces || !lens) {
        rc = cli_fail("out of memory");
    } else {
        for (int i = 0; i < p->n; i++) pieces[i] = qkv_token_piece(tok, p->ids[i], &lens[i]);
        if (qkv_token_labels(p->labels, pieces, lens, p->n, &err)) rc = cli_fail("%s", err.msg);
    }
    free(pieces);
    free(lens);
    return rc;
}

int cli_prompt_load_from(cli_prompt *out, const cli_prompt_args *a, const char *model, int labels) {
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    memset(out, 0, sizeof *out);
    int rc = cli_prompt_check(a);
    if (!rc) rc = cli_tokenizer_open(&g, &tok, model);
    if (!rc) rc = cli_prompt_load(out, a, g, tok);
    if (!rc && labels) rc = cli_prompt_labels(out, tok);
    if (rc) cli_prompt_free(out);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return rc;
}

char *cli_token_label(const qkv_tokenizer *tok, int32_t id) {
    size_t len = 0;
    const char *piece = qkv_token_piece(tok, id, &len);
    char *label = NULL;
    if (qkv_token_labels(&label, &piece, &len, 1, NULL)) return NULL;
    return label;
}

int cli_one_token(int32_t *out, const char *flag, const char *s, const qkv_tokenizer *tok, int ids_too) {
    const int V = qkv_tokenizer_n_vocab(tok);
    char *end;
    long id = strtol(s, &end, 10);
    if (ids_too && *s >= '0' && *s <= '9' && !*end) {
        if (id >= V) return cli_fail("%s: token id %ld outside [0, %d)", flag, id, V);
        *out = (int32_t)id;
        return 0;
    }
    int32_t ids[4];
    int64_t n = 0;
    qkv_error err = {0};
    qkv_status st = qkv_tokenize(tok, s, strlen(s), 0, 0, ids, 4, &n, &err);
    if ((st && st != QKV_ERR_FULL) || n != 1)
        return cli_fail("%s: '%s' is %lld tokens, not one%s", flag, s, (long long)n,
                        ids_too ? " (give a token id instead)" : "");
    *out = ids[0];
    return 0;
}

int cli_model_open_for(qkv_model **m, const char *model, int n, int ctx, int threads) {
    *m = NULL;
    if (ctx && ctx < n) return cli_fail("--ctx %d holds fewer positions than the prompt's %d tokens", ctx, n);
    const qkv_model_params mp = {.n_ctx = ctx ? ctx : n, .kv_dtype = QKV_DTYPE_F32, .n_threads = threads};
    qkv_error err = {0};
    if (qkv_model_open(m, model, &mp, &err)) return cli_model_fail(&err, model);
    const int train = qkv_model_get_config(*m)->n_ctx_train;
    if (n > train) {
        qkv_model_close(*m);
        *m = NULL;
        return cli_fail("the prompt has %d tokens, more than the model's context of %d", n, train);
    }
    return 0;
}

int cli_session_open(cli_session *s, const char *model, const cli_prompt_args *pa, int ctx, int threads) {
    memset(s, 0, sizeof *s);
    int rc;
    if ((rc = cli_tokenizer_open(&s->gguf, &s->tok, model)) || (rc = cli_prompt_load(&s->pr, pa, s->gguf, s->tok)) ||
        (rc = cli_prompt_labels(&s->pr, s->tok)))
        return rc;
    return cli_model_open_for(&s->model, model, s->pr.n, ctx, threads);
}

void cli_session_close(cli_session *s) {
    qkv_model_close(s->model);
    cli_prompt_free(&s->pr);
    qkv_tokenizer_free(s->tok);
    qkv_gguf_close(s->gguf);
    memset(s, 0, sizeof *s);
}

void cli_prompt_free(cli_prompt *p) {
    if (p->labels) qkv_token_labels_free(p->labels, p->n);
    free(p->labels);
    free(p->ids);
    memset(p, 0, sizeof *p);
}
