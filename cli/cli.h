/*
 * cli.h — what the qkv subcommands share: the command table, one-line errors
 * (exit status 2) and strict flag parsing. Commands live in cli/cmd_<name>.c
 * as `int cmd_<name>(int argc, char **argv)`, argv[0] being the command name.
 */
#ifndef QKV_CLI_H
#define QKV_CLI_H

#include "qkv.h"

#include <stdint.h>

/* Exit status for bad input (files, flags, text, arrays). */
#define CLI_EXIT_BAD_INPUT 2

/* Prints "qkv: <message>" as one line on stderr and returns 2. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict parsers: the whole string must be a number in [lo, hi]. 0 on success,
 * else prints "qkv: <flag>: ..." and returns 2. */
int cli_parse_int(int *out, const char *flag, const char *s, long lo, long hi);
int cli_parse_i64(int64_t *out, const char *flag, const char *s, int64_t lo, int64_t hi);
int cli_parse_float(float *out, const char *flag, const char *s, double lo, double hi);
int cli_parse_double(double *out, const char *flag, const char *s, double lo, double hi);

/* Value of flag argv[*i] (advancing *i), or NULL after printing an error. */
const char *cli_value(int argc, char **argv, int *i);

/* Command entry points. */
int cmd_attend(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_scaling(int argc, char **argv);
int cmd_cost(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* qkv inspect and qkv sinks (cli/cmd_inspect.c, cli/cmd_sinks.c) and the
 * prompt loader they share: exactly one of text, file ('-': stdin) or ids
 * ("1,2,3"); chat wraps the text in the GGUF's chat template; the first
 * max_tokens tokens are kept (0: all). On failure prints the error, returns 2. */
typedef struct {
    const char *model, *text, *file, *ids;
    int chat, max_tokens;
} cli_prompt_args;
typedef struct {
    int32_t *ids;   /* [n] */
    char **labels;  /* [n] readable token labels (qkv_token_labels) */
    int n;
} cli_prompt;
int cli_prompt_load(cli_prompt *out, const cli_prompt_args *a);
void cli_prompt_free(cli_prompt *p);
double cli_peak_rss_mib(void);  /* getrusage's ru_maxrss */
int cmd_inspect(int argc, char **argv);
int cmd_sinks(int argc, char **argv);

#endif /* QKV_CLI_H */
