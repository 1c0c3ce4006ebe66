/* dispatch.c — the command dispatcher of qkv and qkv-mpi (dispatch.h). */
#include "cli.h"
#include "dispatch.h"

#include <stdio.h>
#include <string.h>

void cli_dispatch_usage(FILE *f, const cli_dispatch_table *t) {
    fprintf(f, "%s %s — %s\n\nusage: %s\n\n", t->program, QKV_VERSION, t->about, t->usage);
    for (size_t i = 0; i < t->n_cmds; i++) fprintf(f, "  %-*s %s\n", t->name_width, t->cmds[i].name, t->cmds[i].help);
    fprintf(f, "\n`%s <command> --help` describes a command's flags.\n", t->program);
}

int cli_dispatch(const cli_dispatch_table *t, int argc, char **argv) {
    if (argc < 2) {
        cli_dispatch_usage(stderr, t);
        return CLI_EXIT_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        cli_dispatch_usage(stdout, t);
        return 0;
    }
    if (t->version_flag && !strcmp(argv[1], "--version")) {
        printf("%s %s\n", t->program, QKV_VERSION);
        return 0;
    }
    for (size_t i = 0; i < t->n_cmds; i++)
        if (!strcmp(argv[1], t->cmds[i].name)) return t->cmds[i].fn(argc - 1, argv + 1);
    return cli_fail("unknown command '%s' (run `%s --help`)", argv[1], t->program);
}
