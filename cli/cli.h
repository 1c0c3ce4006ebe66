/*
 * cli.h — what the qkv subcommands share: the command table, one-line errors
 * (exit status 2), the flag parser every command declares its flags to, the
 * prompt loader, and small helpers (whole files, JSON strings, timers, RSS).
 * Commands live in cli/cmd_<name>.c as `int cmd_<name>(int argc, char **argv)`,
 * argv[0] being the command name.
 */
#ifndef QKV_CLI_H
#define QKV_CLI_H

#include "qkv.h"
#include "qkv_render.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* ------------------------------------------------------------------ flags */

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

#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x) /* a macro's value as a string literal */

/* Table rows: a flag, a flag whose value is one of choices, a flag read by fn. */
#define CLI_FLAG_CHOICE(name_, kind_, dest_, choices_, help_) \
    {.name = name_, .kind = kind_, .dest = dest_, .help = help_, .choices = choices_}
#define CLI_FLAG_FN(name_, dest_, fn_, metavar_, help_) \
    {.name = name_, .kind = CLI_FN, .dest = dest_, .metavar = metavar_, .help = help_, .fn = fn_}

/* Table fragments: the same flag means the same thing in every command. */
#define CLI_FLAG_MODEL(dst)                                                                  \
    {.name = "--model", .alias = "-m", .kind = CLI_STRING, .dest = (dst), .metavar = "FILE", \
     .help = "GGUF model (default " CLI_DEFAULT_MODEL ")"}
/* --threads: 1 .. CLI_THREADS_PER_CPU x the online CPUs (cli_parse_threads) */
#define CLI_THREADS_PER_CPU 4
int cli_parse_threads(void *dest, const char *flag, const char *value);
#define CLI_FLAG_THREADS(dst)                                    \
    CLI_FLAG_FN("--threads", (int *)(dst), cli_parse_threads, "N", \
                "worker threads (default: the CPUs this process may use; at most " CLI_STR(CLI_THREADS_PER_CPU) " per online CPU)")
/* The arrays and the mask of an attention call, as `qkv attend` and
 * `qkv-mpi attend` both take them, into a struct with fields q, k, v, out,
 * lse (const char *), causal, window, sinks (int), exclude (cli_ints),
 * scale, softcap (float). */
#define CLI_FLAGS_ATTEND_ARRAYS(a)                                                                           \
    {.name = "--q", .kind = CLI_STRING, .dest = &(a)->q, .metavar = "FILE", .help = "queries, float32 [Hq, Lq, D]"}, \
    {.name = "--k", .kind = CLI_STRING, .dest = &(a)->k, .metavar = "FILE", .help = "keys, float32 [Hkv, Lk, D]"}, \
    {.name = "--v", .kind = CLI_STRING, .dest = &(a)->v, .metavar = "FILE", .help = "values, float32 [Hkv, Lk, D]"}, \
    {.name = "--out", .kind = CLI_STRING, .dest = &(a)->out, .metavar = "FILE", .help = "the output O [Hq, Lq, D]"}, \
    {.name = "--lse", .kind = CLI_STRING, .dest = &(a)->lse, .metavar = "FILE",                                      \
     .help = "also write LSE [Hq, Lq] (natural log)"}
#define CLI_FLAGS_ATTEND_MASK(a)                                                                             \
    {.name = "--causal", .kind = CLI_BOOL, .dest = &(a)->causal,                                                  \
     .help = "causal mask, bottom-right aligned (row i at position Lk-Lq+i)"},                                    \
    {.name = "--window", .kind = CLI_INT, .dest = &(a)->window, .lo = 1, .hi = 2147483647, .metavar = "W",        \
     .help = "sliding window of W keys including self (implies causal)"},                                         \
    {.name = "--sinks", .kind = CLI_INT, .dest = &(a)->sinks, .lo = 0, .hi = 2147483647, .metavar = "S",          \
     .help = "keep the first S keys visible too (needs --window): StreamingLLM"},                                 \
    {.name = "--exclude", .kind = CLI_INTS, .dest = &(a)->exclude, .lo = 0, .hi = 2147483647, .metavar = "i,j,...", \
     .help = "key indices no row may see (ablation)"},                                                            \
    {.name = "--scale", .kind = CLI_FLOAT, .dest = &(a)->scale, .lo = 1e-30, .hi = 1e30, .metavar = "X",          \
     .help = "softmax scale (default 1/sqrt(D))"},                                                                 \
    {.name = "--softcap", .kind = CLI_FLOAT, .dest = &(a)->softcap, .lo = 0, .hi = 1e30, .metavar = "C",          \
     .help = "cap every score s to C*tanh(s/C) before the mask and softmax\n(Gemma 2: 50; default 0: none)"}
/* -n, --temp, --top-k, --top-p, --seed of `qkv run` and `qkv-mpi run`, into
 * int *n_gen, float *temp, int *top_k, float *top_p, int64_t *seed */
#define CLI_FLAGS_GENERATE(n_gen, temp, top_k, top_p, seed)                                        \
    {.name = "-n", .kind = CLI_INT, .dest = (n_gen), .lo = 0, .hi = 1 << 20, .metavar = "N",      \
     .help = "tokens to generate (default 32; 0: prompt only)"},                                 \
    {.name = "--temp", .kind = CLI_FLOAT, .dest = (temp), .lo = 0, .hi = 100, .metavar = "T",     \
     .help = "temperature (default 0: greedy)"},                                                 \
    {.name = "--top-k", .kind = CLI_INT, .dest = (top_k), .lo = 0, .hi = 1 << 30, .metavar = "K", \
     .help = "keep the K most likely tokens (default 0: off)"},                                  \
    {.name = "--top-p", .kind = CLI_FLOAT, .dest = (top_p), .lo = 1e-6, .hi = 1, .metavar = "P",  \
     .help = "nucleus sampling (default 1: off)"},                                               \
    {.name = "--seed", .kind = CLI_I64, .dest = (seed), .lo = 0, .hi = 0x1p63, .metavar = "S",    \
     .help = "sampler seed (default 1)"}
/* --ctx of the commands that run the model over one prompt (patch,
 * attribute, lens): cli_model_open_for's ctx */
#define CLI_FLAG_PROBE_CTX(dst)                                                                   \
    {.name = "--ctx", .kind = CLI_INT, .dest = (dst), .lo = 1, .hi = QKV_MODEL_MAX_CTX, .metavar = "N", \
     .help = "KV cache positions (default: the prompt's tokens)"}
/* --npy PREFIX (cli_npy_declare): help_ names the files */
#define CLI_FLAG_NPY_PREFIX(dst, help_) \
    {.name = "--npy", .kind = CLI_STRING, .dest = (dst), .metavar = "PREFIX", .help = (help_)}
#define CLI_FLAG_JSON(dst, help_) {.name = "--json", .kind = CLI_BOOL, .dest = (dst), .help = (help_)}
/* --swa-full and -v of `qkv run` and `qkv-mpi run` (qkv_model_params.swa_cache, cli_print_kv_cache) */
#define CLI_FLAG_SWA_FULL(dst)                                                                   \
    {.name = "--swa-full", .kind = CLI_BOOL, .dest = (dst),                                      \
     .help = "sliding layers keep every --ctx position too (default: the keys their\n"            \
             "window still reaches, window - 1 + --batch rows; llama.cpp's --swa-full)"}
#define CLI_FLAG_KV_VERBOSE(dst)                                              \
    {.name = "--verbose", .alias = "-v", .kind = CLI_BOOL, .dest = (dst), \
     .help = "the KV cache's bytes and rows per layer on stderr"}
#define CLI_FLAG_VERBOSE(dst)                                     \
    {.name = "--verbose", .alias = "-v", .kind = CLI_BOOL, .dest = (dst), \
     .help = "time and peak memory (RSS) on stderr"}
/* --progress / --no-progress into a cli_progress_flags *pf (cli_progress_init) */
#define CLI_FLAGS_PROGRESS(pf)                                                         \
    {.name = "--progress", .kind = CLI_BOOL, .dest = &(pf)->on,                        \
     .help = "a progress line on stderr even when it is not a terminal"},              \
    {.name = "--no-progress", .kind = CLI_BOOL, .dest = &(pf)->off,                    \
     .help = "no progress line (default: shown when stderr is a terminal;\nwins over --progress)"}
#define CLI_FLAG_KV_DTYPE(dst, help) CLI_FLAG_CHOICE("--kv-dtype", CLI_CHOICE, (dst), cli_kv_dtypes, help)
#define CLI_FLAG_KERNEL(dst, help) CLI_FLAG_CHOICE("--kernel", CLI_CHOICE, (dst), cli_kernels, help)
/* -p/-f/--tokens, --chat, --system, --special into a cli_prompt_args *pa */
#define CLI_FLAGS_PROMPT(pa)                                                                                   \
    {.name = "--prompt", .alias = "-p", .kind = CLI_STRING, .dest = &(pa)->text, .metavar = "TEXT", .help = "the prompt text"}, \
    {.name = "--file", .alias = "-f", .kind = CLI_STRING, .dest = &(pa)->file, .metavar = "FILE", .help = "read the prompt from a file ('-': stdin)"}, \
    {.name = "--tokens", .kind = CLI_STRING, .dest = &(pa)->tokens, .metavar = "IDS", .help = "the prompt as token ids, e.g. 1,9690,198"}, \
    {.name = "--chat", .kind = CLI_BOOL, .dest = &(pa)->chat, .help = "wrap the text as a user turn in the model's chat template (ChatML, Llama-3, Gemma)"}, \
    {.name = "--system", .kind = CLI_STRING, .dest = &(pa)->system, .metavar = "TEXT", .help = "system turn for --chat (default: the template's own)"}, \
    {.name = "--special", .kind = CLI_BOOL, .dest = &(pa)->special, .help = "recognise special tokens (<|im_start|> ...) written in the text"}

/* ----------------------------------------------------------------- prompt */

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

/* ---------------------------------------------------------------- helpers */

/* One generated token on stdout, flushed: its id (space-separated after the
 * first) when print_ids, else the bytes it stands for. */
void cli_put_token(const qkv_tokenizer *tok, int32_t id, int print_ids, int first);
/* s on stdout padded with spaces to width display columns (qkv_text_width),
 * on the left when right (right-aligned), else on the right. */
void cli_put_cell(const char *s, int width, int right);

/* Whole file ('-': stdin) as a NUL-terminated malloc'd buffer of *len bytes
 * (len may be NULL). A directory, a file over max_bytes (refused before
 * reading), a stream that passes max_bytes (read no further), unreadable,
 * out of memory or a read error: NULL after one error line naming path. */
char *cli_read_file(const char *path, size_t max_bytes, size_t *len);
/* Prompt and haystack files (-f) up to 64 MiB: about 16 million tokens, four
 * times the largest --ctx; a larger file, or a stream that does not end
 * (-f /dev/zero), is refused once the limit is passed. */
#define CLI_PROMPT_MAX_BYTES ((size_t)64 << 20)
/* --------------------------------------------------------------- progress */

/* One line on stderr while long work runs (cli/progress.c): "<label>:
 * done/total unit (p%), elapsed, ~rest left", redrawn in place with \r at
 * most 10 times a second, erased by finish, by clear and by cli_fail. Shown
 * when stderr is a terminal, --progress forces it on, --no-progress off;
 * disabled, every call below does nothing. Never on stdout: call
 * cli_progress_clear before printing anything while it may be drawn. */
typedef struct {
    int on, off;
} cli_progress_flags;
void cli_progress_init(const cli_progress_flags *f); /* after cli_parse, before any other call */
int cli_progress_enabled(void);
/* total <= 0: unknown (elapsed time only); unit: a string literal ("tokens") */
void cli_progress_start(const char *label, int64_t total, const char *unit);
void cli_progress_label(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* the stage now running */
void cli_progress_update(int64_t done);
void cli_progress_clear(void);  /* erases the line; the next update draws it again */
void cli_progress_finish(void); /* erases the line; updates are ignored until the next start */
/* A qkv_progress_fn for the probes: the total becomes the probe's, then
 * cli_progress_update(done); never cancels. */
int cli_progress_report(void *user, int64_t done, int64_t total);
/* A hook for QKV_HOOK_RESID_POST, layer QKV_ALL: cli_progress_update(layer + 1),
 * so one forward call started with total = n_layer reports each layer; user
 * NULL, or an int64_t added to it: the layers of the calls before (a prompt
 * in several calls, total = calls x n_layer). */
qkv_status cli_progress_layer_hook(void *user, const qkv_activation *a, qkv_error *err);
#define CLI_PROGRESS_LAYER_HOOK \
    ((qkv_hook){.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = cli_progress_layer_hook})

/* ---------------------------------------------------------------- outputs */

/* Every file a command writes, written whole or not at all (cli/outputs.c).
 * Declare each output before computing: cli_output_add refuses a target
 * that exists and is not a regular file, or is named twice, and returns the
 * path of its own fresh temporary beside the target (write there), or NULL
 * after an error line; cli_output_stream does the same and returns the
 * temporary as an open stream (do not fclose it). Then end the command with
 * cli_outputs_finish(rc): rc == 0 syncs every temporary (a full disk is an
 * error) and renames them all onto their targets only when all succeeded;
 * anything else, or a failed sync, removes them all and leaves every target
 * as it was. Returns rc, or 2 after an error line. SIGINT, SIGTERM, SIGHUP
 * and SIGPIPE remove the temporaries too. */
#define CLI_MAX_OUTPUTS 8
const char *cli_output_add(const char *path);
FILE *cli_output_stream(const char *path);
/* cli_output_add of prefix + name (--npy out/ioi_ and "head_out.npy":
 * out/ioi_head_out.npy; a prefix ending in '/' is a folder, which must
 * exist); the joined path is kept here until the outputs are finished. */
const char *cli_output_add_joined(const char *prefix, const char *name);
int cli_outputs_commit(void);   /* cli_outputs_finish(0) */
void cli_outputs_discard(void); /* cli_outputs_finish(rc != 0) */
int cli_outputs_finish(int rc);
/* --npy PREFIX: float32 arrays written as PREFIX<name>.npy. Declare them
 * with cli_npy_declare before computing (cli_output_add_joined; data and
 * shape may come later), write them with cli_npy_write before the commit,
 * then cli_npy_report prints "wrote PATH: float32 [shape]" for each. 0, or
 * 2 after an error line. */
typedef struct {
    const char *name;     /* "head_out": the file PREFIXhead_out.npy */
    const float *data;    /* [shape...] */
    int ndim;
    int64_t shape[4];
    const char *tmp;      /* set by cli_npy_declare */
} cli_npy_array;
int cli_npy_declare(cli_npy_array *arrays, int n, const char *prefix);
int cli_npy_write(const cli_npy_array *arrays, int n);
void cli_npy_report(FILE *msg, const cli_npy_array *arrays, int n, const char *prefix);
/* cli_fail("%s", msg) with each temporary's path in msg replaced by its
 * target's (a library writer names the file it was given). */
int cli_outputs_fail(const char *msg);
/* SVG: s as text content ('<' and '&' escaped); the opening <svg> of w x h
 * pixels with a white background and title as a bold first line. */
void cli_svg_text(FILE *f, const char *s);
void cli_svg_head(FILE *f, int w, int h, const char *title);
/* s as a JSON string, quotes included (render/json.c: the one writer). */
#define cli_json_string(f, s) qkv_json_string((f), (s), 0)
/* An array [shape[0], ..., shape[ndim-1]] (C order, ndim >= 1) as nested
 * JSON lists: put(f, i, user) writes element i; each innermost list on one
 * line, the items of the outer ones on lines of their own, indent spaces in. */
void cli_json_nested(FILE *f, int ndim, const int64_t *shape, int indent,
                     void (*put)(FILE *f, int64_t i, const void *user), const void *user);
/* cli_json_nested of floats v: %.9g (read back as the same float), NaN and
 * infinities as null. */
void cli_json_floats(FILE *f, const float *v, int ndim, const int64_t *shape, int indent);
/* A double as JSON: %.10g, NaN and infinities as null. */
void cli_json_double(FILE *f, double x);
/* One token as JSON: {"id": id, "piece": label}, or null for id < 0. */
void cli_json_token(FILE *f, int32_t id, const char *label);
/* A prompt's tokens as a JSON list of cli_json_token (labels from cli_prompt_labels). */
void cli_json_prompt(FILE *f, const cli_prompt *p);
/* A float32 .npy of 3 dims (or 4 with a leading 1, dropped) of at most 2^30
 * per dim (cmd_attend.c): 0, or 2 after an error line naming path (a freed). */
int cli_load_3d(qkv_npy *a, const char *path);
/* The indices 0 .. count-1 of v ordered by |v|, largest first, NaN last
 * (ties in index order); malloc'd, NULL if out of memory. */
int64_t *cli_by_magnitude(const float *v, int64_t count);
/* n labels for a heatmap's rows or columns: "<prefix><i>" ("layer 0",
 * "h3"), or "<i> <names[i]>" when names is given; malloc'd (cli_labels_free);
 * NULL after an error line. */
char **cli_index_labels(int n, const char *prefix, char *const *names);
void cli_labels_free(char **labels, int64_t n);
/* The last component of a path. */
const char *cli_basename(const char *path);
double cli_status_mib(const char *key);  /* a /proc/self/status field ("VmRSS") in MiB, or -1 */
double cli_peak_rss_mib(void);  /* VmHWM, else getrusage's ru_maxrss */
/* One line on stderr, "<prog>: KV cache B bytes (X MiB, dtype): G global
 * layers x R rows, S sliding layers (window W) x R' rows; N tokens per call"
 * (qkv_model_kv_bytes, qkv_model_kv_rows; dtype: the one m was opened with). */
void cli_print_kv_cache(const char *prog, const qkv_model *m, qkv_dtype dtype);
double cli_now_s(void);         /* monotonic seconds (util/clock.h) */

/* Command entry points. */
int cmd_attend(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_scaling(int argc, char **argv);
int cmd_cost(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_sinks(int argc, char **argv);
int cmd_ablate(int argc, char **argv);
int cmd_stream(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_patch(int argc, char **argv);
int cmd_attribute(int argc, char **argv);
int cmd_lens(int argc, char **argv);

#endif /* QKV_CLI_H */
