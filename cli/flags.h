/* flags.h — the flag parser every command declares its flags to (cli/flags.c). */
#ifndef QKV_CLI_FLAGS_H
#define QKV_CLI_FLAGS_H

#include "cli.h"

/*
 * Each command describes its flags once, in a table; cli_parse reads argv
 * against it and prints --help from it. What a kind stores at dest:
 *   BOOL    int = 1 (no value)          INT     int in [lo, hi]
 *   I64     int64_t in [lo, hi]         FLOAT   float in [lo, hi]
 *   DOUBLE  double in [lo, hi]          STRING  const char * (the argv string)
 *   CHOICE  int = index of the value in choices (NULL-ended)
 *   CHOICES int |= 1 << index, for each item of a comma list of choices
 *   INTS    cli_ints: a comma list of ints in [lo, hi] (malloc'd; cli_ints_free)
 *   FN      whatever fn(dest, flag, value) stores; it returns 0 or fails (2)
 * `given` counts how often the flag appeared. A table ends with {0}.
 */
typedef enum {
    CLI_END = 0, CLI_BOOL, CLI_INT, CLI_I64, CLI_FLOAT, CLI_DOUBLE, CLI_STRING, CLI_CHOICE, CLI_CHOICES,
    CLI_INTS, CLI_FN
} cli_kind;

typedef struct {
    int *v;
    int n;
} cli_ints;
void cli_ints_free(cli_ints *l);
/* Appends the comma list s of ints in [lo, hi] to l; 0, or 2 after an error line. */
int cli_parse_ints(cli_ints *l, const char *flag, const char *s, long lo, long hi);

typedef struct {
    const char *name;       /* "--model" (or a short-only "-n") */
    const char *alias;      /* "-m", or NULL */
    cli_kind kind;
    void *dest;
    double lo, hi;          /* numbers: the accepted range */
    const char *metavar;    /* "FILE"; CHOICE/CHOICES default to "a|b|c" */
    const char *help;       /* '\n' continues on an indented line */
    const char *const *choices;
    int (*fn)(void *dest, const char *flag, const char *value);
    int given;
} cli_flag;

typedef struct {
    const char *name;   /* "run" */
    const char *usage;  /* after "usage: <program> <name> " */
    const char *about;  /* paragraph between usage and flags, or NULL */
    const char *notes;  /* paragraph after the flags, or NULL */
    cli_flag *flags;
    const char *program; /* "qkv-mpi"; NULL: "qkv" */
} cli_command;

/* Parses argv[1..argc) against c->flags. 0: parsed; -1: --help was printed
 * on stdout (exit 0); 2: an error line was printed (unknown flag, missing
 * value, a number out of range, a value not among the choices). */
int cli_parse(const cli_command *c, int argc, char **argv);
/* How often flag `name` was given (0 if it is not in the table). */
int cli_given(const cli_command *c, const char *name);
/* cli_parse's result as a command's exit status: -1 (help) -> 0. */
#define CLI_PARSE_OR_RETURN(c, argc, argv)                      \
    do {                                                        \
        int cli_rc_ = cli_parse((c), (argc), (argv));           \
        if (cli_rc_) return cli_rc_ < 0 ? 0 : cli_rc_;          \
    } while (0)

extern const char *const cli_kv_dtypes[];  /* "f32", "bf16", "f16": qkv_dtype order */
extern const char *const cli_kernels[];    /* "auto", "ref", ...: qkv_kernel order */

/* Table rows: a flag, a flag whose value is one of choices, a flag read by fn. */
#define CLI_FLAG_CHOICE(name_, kind_, dest_, choices_, help_) \
    {.name = name_, .kind = kind_, .dest = dest_, .help = help_, .choices = choices_}
#define CLI_FLAG_FN(name_, dest_, fn_, metavar_, help_) \
    {.name = name_, .kind = CLI_FN, .dest = dest_, .metavar = metavar_, .help = help_, .fn = fn_}

/* --threads: 1 .. CLI_THREADS_PER_CPU x the online CPUs */
#define CLI_THREADS_PER_CPU 4
int cli_parse_threads(void *dest, const char *flag, const char *value);

#endif /* QKV_CLI_FLAGS_H */
