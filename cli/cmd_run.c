/*
 * cmd_run.c — `qkv run`: a GGUF model reading a prompt and continuing it.
 * The prompt goes through the model in one prefill call (flash kernel), then
 * each new token is one decode call against the KV cache; tokens stream to
 * stdout as they are made, a stats line goes to stderr.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static const char usage_text[] =
    "usage: qkv run [-m MODEL.gguf] (-p TEXT | -f FILE | --tokens ID,ID,...) [flags]\n"
    "  -m FILE          Llama-architecture GGUF (default " DEFAULT_MODEL ")\n"
    "  -p TEXT          the prompt;  -f FILE: read it from a file\n"
    "  --tokens IDS     the prompt as token ids (no tokenizer)\n"
    "  -n N             tokens to generate (default 32; 0: prompt only)\n"
    "  --temp T         temperature (default 0: greedy)\n"
    "  --top-k K        keep the K most likely tokens (default 0: off)\n"
    "  --top-p P        nucleus sampling (default 1: off)\n"
    "  --seed S         sampler seed (default 1)\n"
    "  --chat           wrap the prompt in the model's chat template (ChatML, Llama-3)\n"
    "  --system TEXT    system turn for --chat (default: the template's own)\n"
    "  --special        recognise special tokens (<|im_start|> ...) written in the prompt\n"
    "  --ctx N          KV cache positions (default min(context_length, 8192))\n"
    "  --kv-dtype T     f32 | bf16 | f16 (default f32)\n"
    "  --threads N      worker threads (default: all cores)\n"
    "  --logits FILE    write float32 .npy [n_prompt, vocab]: logits at every prompt position\n"
    "  --ids            print the generated token ids instead of text\n";

typedef struct {
    const char *model, *prompt, *file, *tokens, *logits, *system;
    int n_gen, top_k, chat, special, ctx, threads, print_ids;
    float temp, top_p;
    uint64_t seed;
    qkv_dtype kv_dtype;
} run_args;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int parse_args(run_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->model = DEFAULT_MODEL;
    a->n_gen = 32;
    a->top_p = 1.0f;
    a->seed = 1;
    a->kv_dtype = QKV_DTYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        int rc = 0;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        }
        if (!strcmp(f, "--chat")) { a->chat = 1; continue; }
        if (!strcmp(f, "--special")) { a->special = 1; continue; }
        if (!strcmp(f, "--ids")) { a->print_ids = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a->file = v;
        else if (!strcmp(f, "--tokens")) a->tokens = v;
        else if (!strcmp(f, "--logits")) a->logits = v;
        else if (!strcmp(f, "--system")) a->system = v;
        else if (!strcmp(f, "-n")) rc = cli_parse_int(&a->n_gen, f, v, 0, 1 << 20);
        else if (!strcmp(f, "--top-k")) rc = cli_parse_int(&a->top_k, f, v, 0, 1 << 30);
        else if (!strcmp(f, "--ctx")) rc = cli_parse_int(&a->ctx, f, v, 1, 1 << 22);
        else if (!strcmp(f, "--threads")) rc = cli_parse_int(&a->threads, f, v, 1, 4096);
        else if (!strcmp(f, "--temp")) rc = cli_parse_float(&a->temp, f, v, 0, 100);
        else if (!strcmp(f, "--top-p")) rc = cli_parse_float(&a->top_p, f, v, 1e-6, 1);
        else if (!strcmp(f, "--seed")) {
            int64_t s;
            rc = cli_parse_i64(&s, f, v, 0, INT64_MAX);
            a->seed = (uint64_t)s;
        } else if (!strcmp(f, "--kv-dtype")) {
            if (qkv_dtype_parse(&a->kv_dtype, v)) rc = cli_fail("--kv-dtype: '%s' is not f32, bf16 or f16", v);
        } else {
            return cli_fail("run: unknown flag '%s' (see qkv run --help)", f);
        }
        if (rc) return rc;
    }
    int sources = !!a->prompt + !!a->file + !!a->tokens;
    if (sources != 1) return cli_fail("run: give exactly one of -p TEXT, -f FILE, --tokens IDS");
    if (a->tokens && a->chat) return cli_fail("run: --chat needs text (-p or -f), not --tokens");
    if (a->system && !a->chat) return cli_fail("run: --system needs --chat");
    return 0;
}

/* Reads a whole file into a NUL-terminated buffer. */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (!got) break;
        n += got;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static int parse_ids(int32_t **ids, int64_t *n, const char *s, int n_vocab) {
    int64_t cap = 16;
    *ids = malloc((size_t)cap * sizeof **ids);
    *n = 0;
    const char *p = s;
    while (*p) {
        char num[24];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof num) return cli_fail("--tokens: '%s' is not a list of token ids", s);
        memcpy(num, p, len);
        num[len] = 0;
        int v;
        if (cli_parse_int(&v, "--tokens", num, 0, n_vocab - 1)) return 2;
        if (*n == cap) *ids = realloc(*ids, (size_t)(cap *= 2) * sizeof **ids);
        (*ids)[(*n)++] = v;
        p += len;
        if (*p) p++;
    }
    if (*n == 0) return cli_fail("--tokens: empty list");
    return 0;
}

/* Prompt token ids from -p / -f (optionally through the chat template) or --tokens. */
static int prompt_ids(int32_t **ids, int64_t *n, const run_args *a, const qkv_model *m, const qkv_tokenizer *tok) {
    if (a->tokens) return parse_ids(ids, n, a->tokens, qkv_model_get_config(m)->n_vocab);
    size_t len = 0;
    char *text;
    if (a->file) {
        text = read_text(a->file, &len);
        if (!text) return cli_fail("%s: cannot read the prompt file", a->file);
    } else {
        text = strdup(a->prompt);
        len = strlen(text);
    }
    int parse_special = a->special;
    if (a->chat) {
        char *chat;
        qkv_error err = {0};
        if (qkv_chat_format(&chat, qkv_model_gguf(m), a->system, text, &err)) {
            free(text);
            return cli_fail("%s", err.msg);
        }
        free(text);
        text = chat;
        len = strlen(text);
        parse_special = 1;
    }
    int64_t cap = qkv_tokenize_bound(len);
    *ids = malloc((size_t)(cap > 0 ? cap : 1) * sizeof **ids);
    qkv_error err = {0};
    /* the chat template writes BOS itself when it has one */
    qkv_status st = qkv_tokenize(tok, text, len, !a->chat, parse_special, *ids, cap, n, &err);
    free(text);
    if (st) return cli_fail("%s", err.msg);
    if (*n == 0) return cli_fail("run: the prompt is empty");
    return 0;
}

/* 1 if id ends generation: EOS, or an end-of-turn control token. */
static int is_stop(const qkv_tokenizer *tok, int32_t id) {
    if (id == qkv_tokenizer_eos(tok)) return 1;
    if (qkv_token_type_of(tok, id) != QKV_TOKEN_CONTROL) return 0;
    size_t len;
    const char *t = qkv_token_text(tok, id, &len);
    return t && (!strcmp(t, "<|im_end|>") || !strcmp(t, "<|eot_id|>") || !strcmp(t, "<|end_of_text|>") ||
                 !strcmp(t, "<|endoftext|>") || !strcmp(t, "</s>"));
}

static int run(const run_args *a) {
    qkv_error err = {0};
    qkv_model_params mp = {a->ctx, a->kv_dtype, a->threads};
    qkv_model *m = NULL;
    qkv_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    qkv_sampler *sampler = NULL;
    int rc = 0;
    if (qkv_model_open(&m, a->model, &mp, &err)) {
        if (err.status == QKV_ERR_IO && !strcmp(a->model, DEFAULT_MODEL))
            return cli_fail("%s (run `make model` to download the default model)", err.msg);
        return cli_fail("%s", err.msg);
    }
    if (qkv_tokenizer_load(&tok, qkv_model_gguf(m), &err)) { rc = cli_fail("%s", err.msg); goto done; }
    const qkv_model_config *c = qkv_model_get_config(m);
    int64_t n_prompt;
    if ((rc = prompt_ids(&ids, &n_prompt, a, m, tok))) goto done;
    if (n_prompt > qkv_model_n_ctx(m)) {
        rc = cli_fail("run: the prompt has %lld tokens, the context holds %d (raise --ctx, up to %d)",
                      (long long)n_prompt, qkv_model_n_ctx(m), c->n_ctx_train);
        goto done;
    }
    size_t V = (size_t)c->n_vocab;
    logits = malloc((a->logits ? (size_t)n_prompt : 1) * V * sizeof(float));
    if (!logits) { rc = cli_fail("run: cannot allocate logits for %lld positions", (long long)n_prompt); goto done; }

    double t0 = now_s();
    if (qkv_model_forward(m, logits, ids, (int)n_prompt, a->logits != NULL, &err)) { rc = cli_fail("%s", err.msg); goto done; }
    double t1 = now_s();
    if (a->logits) {
        int64_t shape[2] = {n_prompt, (int64_t)V};
        if (qkv_npy_save_f32(a->logits, logits, 2, shape, &err)) { rc = cli_fail("%s", err.msg); goto done; }
    }
    const float *last = logits + (a->logits ? (size_t)(n_prompt - 1) * V : 0);
    const qkv_sampler_params sp = {.temperature = a->temp, .top_k = a->top_k, .top_p = a->top_p, .seed = a->seed};
    if (qkv_sampler_init(&sampler, (int)V, &sp, &err)) { rc = cli_fail("%s", err.msg); goto done; }
    int n_done = 0;
    for (; n_done < a->n_gen; n_done++) {
        int32_t next = qkv_sample(sampler, last);
        if (is_stop(tok, next)) break;
        if (a->print_ids) {
            printf("%s%d", n_done ? " " : "", next);
        } else {
            size_t len;
            const char *piece = qkv_token_piece(tok, next, &len);
            fwrite(piece, 1, len, stdout);
        }
        fflush(stdout);
        if (n_done + 1 == a->n_gen) { n_done++; break; }
        if (qkv_model_pos(m) >= qkv_model_n_ctx(m)) { n_done++; break; }
        if (qkv_model_forward(m, logits, &next, 1, 0, &err)) { rc = cli_fail("%s", err.msg); goto done; }
        last = logits;
    }
    if (a->n_gen > 0) printf("\n");
    fflush(stdout);
    double t2 = now_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "qkv run: prompt %lld tokens %.1f tok/s | generated %d tokens %.1f tok/s | peak RSS %.1f MiB\n",
            (long long)n_prompt, (double)n_prompt / (t1 - t0), n_done, n_done > 0 ? n_done / (t2 - t1) : 0.0,
            (double)ru.ru_maxrss / 1024.0);
done:
    free(ids);
    free(logits);
    qkv_sampler_free(sampler);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
    return rc;
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a);
}
