/* prompt.h — the prompt loader, token labels and the model opened for a
 * prompt (cli/prompt.c). */
#ifndef QKV_CLI_PROMPT_H
#define QKV_CLI_PROMPT_H

#include "cli.h"

/* The one prompt loader of run, tokenize, inspect and sinks: exactly one of
 * text, file ('-': stdin) or tokens ("1,2,3"). chat wraps the text in the
 * GGUF's chat template; BOS: under chat, the template's own when the rendered
 * text starts with the BOS token, else the tokenizer's add_bos; without chat,
 * the tokenizer's add_bos (no_bos: none). The first max_tokens are kept (0:
 * all). A prompt of no tokens is refused unless allow_empty (an empty text
 * is a tokenizer's valid input, not a model's). On failure prints one line
 * and returns 2. */
typedef struct {
    const char *text, *file, *tokens, *system;
    int chat, special, no_bos, max_tokens, allow_empty;
    const char *tokens_flag; /* the flag tokens came from, for errors (NULL: "--tokens") */
} cli_prompt_args;
typedef struct {
    int32_t *ids;   /* [n] */
    char **labels;  /* [n] readable token labels, after cli_prompt_labels */
    int n;
} cli_prompt;
/* The checks that need no model (one source; --chat, --system); 0 or 2. */
int cli_prompt_check(const cli_prompt_args *a);
int cli_prompt_load(cli_prompt *out, const cli_prompt_args *a, const qkv_gguf *g, const qkv_tokenizer *tok);
int cli_prompt_labels(cli_prompt *p, const qkv_tokenizer *tok);
void cli_prompt_free(cli_prompt *p);
/* A readable label of one token (qkv_token_labels), malloc'd; NULL if out of memory. */
char *cli_token_label(const qkv_tokenizer *tok, int32_t id);
/* The token of flag's value s: text that is exactly one token (no BOS), or,
 * when ids_too, a token id written in digits. 0, or 2 after an error line
 * naming flag and the count. */
int cli_one_token(int32_t *out, const char *flag, const char *s, const qkv_tokenizer *tok, int ids_too);
/* The model for a prompt of n tokens: a KV cache of ctx positions (--ctx;
 * 0: n), refused when ctx < n or n exceeds the model's training context.
 * 0, or 2 after an error line (*m NULL). */
int cli_model_open_for(qkv_model **m, const char *model, int n, int ctx, int threads);
/* What a command that runs the model over one prompt opens: the GGUF's
 * tokenizer, the prompt with its labels, the model for it. */
typedef struct {
    qkv_gguf *gguf;
    qkv_tokenizer *tok;
    cli_prompt pr;
    qkv_model *model;
} cli_session;
/* cli_tokenizer_open, cli_prompt_load and cli_prompt_labels of pa, then
 * cli_model_open_for (ctx, threads). 0, or 2 after an error line; close it
 * either way. */
int cli_session_open(cli_session *s, const char *model, const cli_prompt_args *pa, int ctx, int threads);
void cli_session_close(cli_session *s);
/* The error line for a model that would not open (a `make model` hint for
 * the default one); returns 2. */
int cli_model_fail(const qkv_error *err, const char *model);
/* Opens model's GGUF and its tokenizer; 0, or 2 after an error line (both NULL). */
int cli_tokenizer_open(qkv_gguf **g, qkv_tokenizer **tok, const char *model);
/* cli_prompt_load on model's own GGUF and tokenizer (labels too if asked). */
int cli_prompt_load_from(cli_prompt *out, const cli_prompt_args *a, const char *model, int labels);

#endif /* QKV_CLI_PROMPT_H */
