/* flag_rows.h — table fragments: the same flag means the same thing in
 * every command (qkv's and qkv-mpi's). */
#ifndef QKV_CLI_FLAG_ROWS_H
#define QKV_CLI_FLAG_ROWS_H

#include "flags.h"

#define CLI_FLAG_MODEL(dst)                                                                  \
    {.name = "--model", .alias = "-m", .kind = CLI_STRING, .dest = (dst), .metavar = "FILE", \
     .help = "GGUF model (default " CLI_DEFAULT_MODEL ")"}
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

#endif /* QKV_CLI_FLAG_ROWS_H */
