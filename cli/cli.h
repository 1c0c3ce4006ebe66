/*
 * cli.h — what every qkv subcommand needs: one-line errors (exit status 2),
 * the default model and strict number parsers. The rest is by concern:
 * flags.h (the flag parser) and flag_rows.h (the rows commands share),
 * prompt.h, progress.h, outputs.h, json_out.h, util.h; commands.h lists the
 * commands, `int cmd_<name>(int argc, char **argv)` in cli/cmd_<name>.c,
 * argv[0] being the command name.
 */
#ifndef QKV_CLI_H
#define QKV_CLI_H

#include "qkv.h"

#include <stdint.h>

/* Exit status for bad input (files, flags, text, arrays). */
#define CLI_EXIT_BAD_INPUT 2

#define CLI_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* Prints "qkv: <message>" as one line on stderr and returns 2. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Called by cli_fail before its line when set: cli_progress_init sets it to
 * cli_progress_clear (util.c does not link progress.c: qkv-mpi and the fuzz
 * targets take util.o alone). */
extern void (*cli_before_error)(void);

/* Strict parsers: the whole string must be a number in [lo, hi]. 0 on success,
 * else prints "qkv: <flag>: ..." and returns 2. */
int cli_parse_int(int *out, const char *flag, const char *s, long lo, long hi);
int cli_parse_i64(int64_t *out, const char *flag, const char *s, int64_t lo, int64_t hi);
int cli_parse_float(float *out, const char *flag, const char *s, double lo, double hi);
int cli_parse_double(double *out, const char *flag, const char *s, double lo, double hi);

#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x) /* a macro's value as a string literal */

#endif /* QKV_CLI_H */
