/*
 * cmd_run.c — `qkv run`: a GGUF model reading a prompt and continuing it.
 * The prompt goes through the model in prefill calls of --batch tokens
 * (flash kernel), then each new token is one decode call against the KV
 * cache; tokens stream to stdout as they are made, a stats line goes to
 * stderr. A model with sliding layers keeps the sliding-window cache
 * (qkv_model_params.swa_cache) unless --swa-full.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "progress.h"
#include "outputs.h"
#include "util.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *logits;
    cli_prompt_args prompt;
    int n_gen, top_k, ctx, threads, print_ids, kv_dtype, batch, swa_full, verbose;
    float temp, top_p;
    uint64_t seed;
    cli_progress_flags progress;
} run_args;

static int parse_args(run_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->model = CLI_DEFAULT_MODEL;
    a->n_gen = 32;
    a->top_p = 1.0f;
    int64_t seed = 1;
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->prompt),
        CLI_FLAGS_GENERATE(&a->n_gen, &a->temp, &a->top_k, &a->top_p, &seed),
        {.name = "--ctx", .kind = CLI_INT, .dest = &a->ctx, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "KV cache positions (default min(context_length, 8192))"},
        CLI_FLAG_KV_DTYPE(&a->kv_dtype, "KV cache storage (default f32)"),
        {.name = "--batch", .kind = CLI_INT, .dest = &a->batch, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "tokens per forward call: the prompt goes in calls of N (default "
                 CLI_STR(QKV_MODEL_DEFAULT_BATCH) ")"},
        CLI_FLAG_SWA_FULL(&a->swa_full),
        CLI_FLAG_KV_VERBOSE(&a->verbose),
        CLI_FLAG_THREADS(&a->threads),
        {.name = "--logits", .kind = CLI_STRING, .dest = &a->logits, .metavar = "FILE",
         .help = "write float32 .npy [n_prompt, vocab]: logits at every prompt position"},
        {.name = "--print-ids", .kind = CLI_BOOL, .dest = &a->print_ids,
         .help = "print the generated token ids instead of text"},
        CLI_FLAGS_PROGRESS(&a->progress),
        {0},
    };
    const cli_command cmd = {.name = "run", .usage = "[-m MODEL.gguf] (-p TEXT | -f FILE | --tokens IDS) [flags]",
                             .about = "A GGUF model (llama, qwen2, qwen3, gemma2 or gemma3) reads the prompt in prefill calls of --batch tokens, then generates\n"
                             "one token per decode call; tokens stream to stdout, a stats line goes to stderr.",
                             .flags = flags};
    int rc = cli_parse(&cmd, argc, argv);
    a->seed = (uint64_t)seed;
    cli_progress_init(&a->progress);
    return rc ? rc : cli_prompt_check(&a->prompt);
}

static int run(const run_args *a) {
    qkv_error err = {0};
    qkv_model_params mp = {.n_ctx = a->ctx, .kv_dtype = (qkv_dtype)a->kv_dtype, .n_threads = a->threads,
                           .n_batch = a->batch ? a->batch : QKV_MODEL_DEFAULT_BATCH, .swa_cache = !a->swa_full};
    qkv_model *m = NULL;
    qkv_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    qkv_sampler *sampler = NULL;
    int rc = 0;
    /* --logits is declared first (a target that cannot be written fails
     * before the model loads) and kept only if the whole run succeeds */
    const char *logits_tmp = a->logits ? cli_output_add(a->logits) : NULL;
    if (a->logits && !logits_tmp) return CLI_EXIT_BAD_INPUT;
    if (qkv_model_open(&m, a->model, &mp, &err)) return cli_outputs_finish(cli_model_fail(&err, a->model));
    if (a->verbose) cli_print_kv_cache("qkv run", m, mp.kv_dtype);
    if (qkv_tokenizer_load(&tok, qkv_model_gguf(m), &err)) { rc = cli_fail("%s", err.msg); goto done; }
    const qkv_model_config *c = qkv_model_get_config(m);
    cli_prompt pr;
    if ((rc = cli_prompt_load(&pr, &a->prompt, qkv_model_gguf(m), tok))) goto done;
    ids = pr.ids;
    const int64_t n_prompt = pr.n;
    if (n_prompt > qkv_model_n_ctx(m)) {
        rc = cli_fail("run: the prompt has %lld tokens, the context holds %d (raise --ctx, up to %d)",
                      (long long)n_prompt, qkv_model_n_ctx(m), c->n_ctx_train);
        goto done;
    }
    size_t V = (size_t)c->n_vocab;
    logits = malloc((a->logits ? (size_t)n_prompt : 1) * V * sizeof(float));
    if (!logits) { rc = cli_fail("run: cannot allocate logits for %lld positions", (long long)n_prompt); goto done; }

    double t0 = cli_now_s();
    /* the prefill's progress: one report per layer of each call, erased before the first token is printed */
    const int64_t B = qkv_model_n_batch(m);
    int64_t layers_before = 0;
    qkv_hook per_layer = CLI_PROGRESS_LAYER_HOOK;
    per_layer.user = &layers_before;
    const qkv_forward_opts prefill = {.hooks = &per_layer, .n_hooks = cli_progress_enabled()};
    cli_progress_start("run: prefill", (n_prompt + B - 1) / B * c->n_layer, "layers");
    for (int64_t p = 0; p < n_prompt; p += B, layers_before += c->n_layer) {
        const int n = (int)(n_prompt - p < B ? n_prompt - p : B);
        if (qkv_model_forward(m, logits + (a->logits ? (size_t)p * V : 0), ids + p, n, a->logits != NULL, &prefill,
                              &err)) {
            rc = cli_fail("%s", err.msg);
            goto done;
        }
    }
    cli_progress_finish();
    double t1 = cli_now_s();
    if (a->logits) {
        int64_t shape[2] = {n_prompt, (int64_t)V};
        if (qkv_npy_save_f32(logits_tmp, logits, 2, shape, &err)) { rc = cli_outputs_fail(err.msg); goto done; }
    }
    const float *last = logits + (a->logits ? (size_t)(n_prompt - 1) * V : 0);
    const qkv_sampler_params sp = {.temperature = a->temp, .top_k = a->top_k, .top_p = a->top_p, .seed = a->seed};
    if (qkv_sampler_init(&sampler, (int)V, &sp, &err)) { rc = cli_fail("%s", err.msg); goto done; }
    int n_done = 0;
    for (; n_done < a->n_gen; n_done++) {
        int32_t next = qkv_sample(sampler, last);
        if (qkv_token_ends_turn(tok, next)) break;
        cli_put_token(tok, next, a->print_ids, n_done == 0);
        if (n_done + 1 == a->n_gen) { n_done++; break; }
        if (qkv_model_pos(m) >= qkv_model_n_ctx(m)) { n_done++; break; }
        if (qkv_model_forward(m, logits, &next, 1, 0, NULL, &err)) { rc = cli_fail("%s", err.msg); goto done; }
        last = logits;
    }
    if (a->n_gen > 0) printf("\n");
    fflush(stdout);
    double t2 = cli_now_s();
    fprintf(stderr, "qkv run: prompt %lld tokens %.1f tok/s | generated %d tokens %.1f tok/s | peak RSS %.1f MiB\n",
            (long long)n_prompt, (double)n_prompt / (t1 - t0), n_done, n_done > 0 ? n_done / (t2 - t1) : 0.0,
            cli_peak_rss_mib());
done:
    cli_progress_finish();
    free(ids);
    free(logits);
    qkv_sampler_free(sampler);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
    return cli_outputs_finish(rc);
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a);
}
