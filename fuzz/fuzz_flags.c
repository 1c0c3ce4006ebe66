/*
 * fuzz_flags.c — the CLI's one flag parser (cli/flags.c, cli_parse) on any
 * argument list: the input split at NUL bytes is argv[1..] (at most 64),
 * parsed against a table with a flag of every kind (bool, int, int64,
 * float, double, string, choice, choices, int list, a function) and the
 * prompt flags every model command shares, then cli_prompt_check. Parsed
 * values must lie in their declared ranges.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "fuzz_file.h"

#include <string.h>

static int parse_half(void *dest, const char *flag, const char *value) {
    double d;
    if (cli_parse_double(&d, flag, value, -1e6, 1e6)) return CLI_EXIT_BAD_INPUT;
    *(double *)dest = d / 2;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { MAX_ARGS = 64 };
    char *copy = malloc(size + 1), *argv[MAX_ARGS + 2];
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = 0;
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *p = copy; argc <= MAX_ARGS && p <= copy + size; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;

    static const char *const colours[] = {"red", "green", "blue", NULL};
    int b = 0, i = 0, choice = -1, choices = 0;
    int64_t i64 = 0;
    float f = 0;
    double d = 0, half = 0;
    const char *s = NULL;
    cli_ints ints = {0};
    cli_prompt_args pa = {0};
    cli_flag flags[] = {
        {.name = "--bool", .alias = "-b", .kind = CLI_BOOL, .dest = &b, .help = "a bool"},
        {.name = "--int", .alias = "-i", .kind = CLI_INT, .dest = &i, .lo = -5, .hi = 4096, .metavar = "N",
         .help = "an int"},
        {.name = "--i64", .kind = CLI_I64, .dest = &i64, .lo = 1, .hi = 0x1p62, .metavar = "N", .help = "an int64"},
        {.name = "--float", .kind = CLI_FLOAT, .dest = &f, .lo = 0, .hi = 1, .metavar = "X", .help = "a float"},
        {.name = "--double", .kind = CLI_DOUBLE, .dest = &d, .lo = -1e300, .hi = 1e300, .metavar = "X",
         .help = "a double"},
        {.name = "--string", .alias = "-s", .kind = CLI_STRING, .dest = &s, .metavar = "S", .help = "a string"},
        CLI_FLAG_CHOICE("--colour", CLI_CHOICE, &choice, colours, "one colour"),
        CLI_FLAG_CHOICE("--colours", CLI_CHOICES, &choices, colours, "colours"),
        {.name = "--ints", .kind = CLI_INTS, .dest = &ints, .lo = 0, .hi = 100, .metavar = "LIST", .help = "ints"},
        CLI_FLAG_FN("--half", &half, parse_half, "X", "half of it"),
        CLI_FLAGS_PROMPT(&pa),
        {0},
    };
    const cli_command cmd = {.name = "fuzz", .usage = "[flags]", .flags = flags};
    if (cli_parse(&cmd, argc, argv) == 0) {
        if (i < -5 || i > 4096 || i64 < 0 || f < 0 || f > 1 || !(d >= -1e300 && d <= 1e300) || choice > 2 ||
            choices > 7 || half < -5e5 || half > 5e5)
            abort(); /* a value outside its declared range got through */
        for (int k = 0; k < ints.n; k++)
            if (ints.v[k] < 0 || ints.v[k] > 100) abort();
        cli_prompt_check(&pa);
    }
    cli_ints_free(&ints);
    free(copy);
    return 0;
}
