/*
 * flags.c — the one flag parser of the CLI. A command declares its flags in a
 * cli_flag table (name, alias, kind, destination, range, metavar, help);
 * cli_parse reads argv against it and cli_print_help prints --help from the
 * same table, so help and parser cannot disagree. Errors are one line on
 * stderr and exit status 2: an unknown flag, a flag without its value, a
 * number that is not one or out of range, a value not among the choices.
 * Values are the next argument ("--n 4096"), never one of the command's own
 * --flags ("--out --lse x" is --out without its value); bools take none.
 */
#include "cli.h"
#include "flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_kv_dtypes[] = {"f32", "bf16", "f16", NULL};
const char *const cli_kernels[] = {"auto", "ref", "flash", "decode", "flash-bf16", NULL};

void cli_ints_free(cli_ints *l) {
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* "a, b or c" into buf. */
static void choice_words(char *buf, size_t cap, const char *const *choices) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; choices[i] && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == 0 ? "" : choices[i + 1] ? ", " : " or ", choices[i]);
}

static int choice_index(const cli_flag *f, const char *flag, const char *v) {
    for (int i = 0; f->choices[i]; i++)
        if (!strcmp(v, f->choices[i])) return i;
    char words[256];
    choice_words(words, sizeof words, f->choices);
    return -cli_fail("%s: '%s' is not %s", flag, v, words);
}

/* Calls item(f, flag, text, user) for each comma-separated item of v. */
static int each_item(const cli_flag *f, const char *flag, const char *v,
                     int (*item)(const cli_flag *, const char *, const char *, void *), void *user) {
    if (!*v) return cli_fail("%s: empty list", flag);
    for (const char *p = v;;) {
        char buf[64];
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof buf) return cli_fail("%s: '%s' is not a comma-separated list", flag, v);
        memcpy(buf, p, n);
        buf[n] = 0;
        if (item(f, flag, buf, user)) return CLI_EXIT_BAD_INPUT;
        if (!p[n]) return 0;
        p += n + 1;
    }
}

static int choices_item(const cli_flag *f, const char *flag, const char *s, void *user) {
    int i = choice_index(f, flag, s);
    if (i < 0) return -i;
    *(int *)user |= 1 << i;
    return 0;
}

static int ints_item(const cli_flag *f, const char *flag, const char *s, void *user) {
    cli_ints *l = user;
    if ((l->n & (l->n - 1)) == 0) { /* capacity: the next power of two */
        int *v = realloc(l->v, (size_t)(l->n ? 2 * l->n : 1) * sizeof *v);
        if (!v) return cli_fail("%s: out of memory", flag);
        l->v = v;
    }
    if (cli_parse_int(&l->v[l->n], flag, s, (long)f->lo, (long)f->hi)) return CLI_EXIT_BAD_INPUT;
    l->n++;
    return 0;
}

int cli_parse_ints(cli_ints *l, const char *flag, const char *s, long lo, long hi) {
    cli_flag range = {flag, NULL, CLI_INTS, l, (double)lo, (double)hi, NULL, NULL, NULL, NULL, 0};
    return each_item(&range, flag, s, ints_item, l);
}

static int set_value(const cli_flag *f, const char *flag, const char *v) {
    switch (f->kind) {
    case CLI_INT: return cli_parse_int(f->dest, flag, v, (long)f->lo, (long)f->hi);
    case CLI_I64: return cli_parse_i64(f->dest, flag, v, (int64_t)f->lo, f->hi >= 0x1p63 ? INT64_MAX : (int64_t)f->hi);
    case CLI_FLOAT: return cli_parse_float(f->dest, flag, v, f->lo, f->hi);
    case CLI_DOUBLE: return cli_parse_double(f->dest, flag, v, f->lo, f->hi);
    case CLI_STRING: *(const char **)f->dest = v; return 0;
    case CLI_CHOICE: {
        int i = choice_index(f, flag, v);
        if (i < 0) return -i;
        *(int *)f->dest = i;
        return 0;
    }
    case CLI_CHOICES: *(int *)f->dest = 0; return each_item(f, flag, v, choices_item, f->dest);
    case CLI_INTS: cli_ints_free(f->dest); return cli_parse_ints(f->dest, flag, v, (long)f->lo, (long)f->hi);
    case CLI_FN: return f->fn(f->dest, flag, v);
    case CLI_BOOL:
    case CLI_END: break;
    }
    return 0;
}

/* --help: usage, about, one line per flag of the table (help text in a column), notes. */
static void print_help(FILE *out, const cli_command *c) {
    enum { COL = 26 };
    fprintf(out, "usage: %s %s %s\n", c->program ? c->program : "qkv", c->name, c->usage);
    if (c->about) fprintf(out, "\n%s\n", c->about);
    fputc('\n', out);
    for (const cli_flag *f = c->flags;; f++) {
        const int end = f->kind == CLI_END;
        char left[160], meta[128] = "";
        if (!end && f->kind != CLI_BOOL) {
            if (f->metavar) snprintf(meta, sizeof meta, " %s", f->metavar);
            else if (f->choices)
                for (size_t len = 0, i = 0; f->choices[i] && len < sizeof meta; i++)
                    len += (size_t)snprintf(meta + len, sizeof meta - len, "%s%s", i ? (f->kind == CLI_CHOICE ? "|" : ",") : " ",
                                            f->choices[i]);
        }
        if (end) snprintf(left, sizeof left, "-h, --help");
        else snprintf(left, sizeof left, "%s%s%s%s", f->alias ? f->alias : "", f->alias ? ", " : "", f->name, meta);
        const char *help = end ? "this help" : f->help ? f->help : "";
        int w = fprintf(out, "  %s", left);
        if (w >= COL - 1) {
            fputc('\n', out);
            w = 0;
        }
        for (;;) {
            fprintf(out, "%*s", COL - w, "");
            size_t n = strcspn(help, "\n");
            fprintf(out, "%.*s\n", (int)n, help);
            if (!help[n]) break;
            help += n + 1;
            w = 0;
        }
        if (end) break;
    }
    if (c->notes) fprintf(out, "\n%s\n", c->notes);
}

static cli_flag *find_flag(const cli_command *c, const char *a) {
    for (cli_flag *f = c->flags; f->kind != CLI_END; f++)
        if (!strcmp(a, f->name) || (f->alias && !strcmp(a, f->alias))) return f;
    return NULL;
}

int cli_parse(const cli_command *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_help(stdout, c);
            return -1;
        }
        cli_flag *f = find_flag(c, a);
        if (!f)
            return cli_fail("%s: %s '%s' (see %s %s --help)", c->name, a[0] == '-' ? "unknown flag" : "unexpected argument",
                            a, c->program ? c->program : "qkv", c->name);
        f->given++;
        if (f->kind == CLI_BOOL) {
            *(int *)f->dest = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_fail("%s needs a value", a);
        /* "--out --lse x": --out's value forgotten, not a file named --lse */
        if (!strncmp(argv[i + 1], "--", 2) && find_flag(c, argv[i + 1]))
            return cli_fail("%s needs a value (%s is a flag)", a, argv[i + 1]);
        if (set_value(f, a, argv[++i])) return CLI_EXIT_BAD_INPUT;
    }
    return 0;
}

int cli_given(const cli_command *c, const char *name) {
    const cli_flag *f = find_flag(c, name);
    return f ? f->given : 0;
}
