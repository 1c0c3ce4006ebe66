/* dispatch.h — the one command dispatcher of qkv and qkv-mpi: each main
 * gives its table of commands, this prints the usage and runs the one named. */
#ifndef QKV_CLI_DISPATCH_H
#define QKV_CLI_DISPATCH_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *name;                  /* "run" */
    int (*fn)(int argc, char **argv);  /* argv[0] is the command name */
    const char *help;                  /* one line for the usage */
} cli_dispatch_cmd;

typedef struct {
    const char *program;   /* "qkv": in the usage, the error line and --version */
    const char *about;     /* after "<program> <version> — " */
    const char *usage;     /* after "usage: " */
    int name_width;        /* the column of command names */
    int version_flag;      /* answer --version */
    const cli_dispatch_cmd *cmds;
    size_t n_cmds;
} cli_dispatch_table;

/* The title, the usage line and one line per command, on f. */
void cli_dispatch_usage(FILE *f, const cli_dispatch_table *t);
/* argv[1] names the command: its status; none: the usage on stderr, 2;
 * --help, -h, help: the usage on stdout, 0; an unknown one: an error line, 2. */
int cli_dispatch(const cli_dispatch_table *t, int argc, char **argv);

#endif /* QKV_CLI_DISPATCH_H */
