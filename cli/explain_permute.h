/* explain_permute.h — `qkv explain --permute -m MODEL` (cli/explain_permute.c):
 * the article's last claim on a real model's layers. cmd_explain.c parses the
 * flags and runs the article's own 4 tokens itself. */
#ifndef QKV_CLI_EXPLAIN_PERMUTE_H
#define QKV_CLI_EXPLAIN_PERMUTE_H

#include "prompt.h"

#include <stdint.h>

typedef struct {
    const char *model;
    cli_prompt_args pa;     /* the prompt; default text EXPLAIN_PERMUTE_PROMPT */
    int trials, threads, json;
    int64_t seed;
} explain_permute_args;

#define EXPLAIN_PERMUTE_PROMPT "年假怎么申请？"

/* Every layer of a's model on a's prompt, RoPE off and on, then the whole
 * model on permuted prompts; the table (or JSON) on stdout. 0, or 2 after
 * an error line. */
int explain_permute_model(const explain_permute_args *a);

#endif /* QKV_CLI_EXPLAIN_PERMUTE_H */
