/*
 * cmd_run.c — `mpirun -np N qkv-mpi run`: `qkv run` with the sequence split
 * across the ranks (qkv_cp_model): the weights on every rank, the prompt's
 * rows cut into N runs, every layer's attention over the ring, decode over
 * the sharded KV cache. Rank 0 reads the prompt (stdin included) and sends
 * the ids; it prints the text, the stats line, and writes --logits, whose
 * rows it gathers rank by rank into a streamed .npy (written whole or not
 * at all). qkv run's flags, spelled and bounded as there: --ctx sizes every
 * rank's KV cache (by default each sizes it for its own rows), --batch its
 * run state (a rank's prompt rows go in one call: the ring attends them
 * together), greedy or the same seeded sampler on every rank, the token
 * rank 0 picks sent to all; -v as in qkv run, plus the ring's K/V bytes of
 * the prefill, rank by rank; --swa-full is accepted and changes nothing
 * (every rank keeps all of its rows in every layer: the sliding layers'
 * windows act in the ring, which sends no block a rank's rows cannot
 * reach); plus --timeout. Every family runs.
 */
#include "mpi_cli.h"
#include "flag_rows.h"
#include "prompt.h"
#include "progress.h"
#include "outputs.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *logits;
    cli_prompt_args prompt;
    int n_gen, top_k, ctx, threads, print_ids, kv_dtype, batch, swa_full, verbose;
    float temp, top_p;
    int64_t seed;
    double timeout;
    cli_progress_flags pf; /* rank 0 shows the prefill's elapsed time (its layers run inside the ring) */
} mpi_run_args;

static int parse_args(mpi_run_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->model = CLI_DEFAULT_MODEL;
    a->n_gen = 32;
    a->top_p = 1.0f;
    a->seed = 1;
    a->timeout = 60;
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&a->model),
        CLI_FLAGS_PROMPT(&a->prompt),
        CLI_FLAGS_GENERATE(&a->n_gen, &a->temp, &a->top_k, &a->top_p, &a->seed),
        {.name = "--ctx", .kind = CLI_INT, .dest = &a->ctx, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "KV cache positions of every rank (default: its prompt rows + the tokens to generate + 1)"},
        CLI_FLAG_KV_DTYPE(&a->kv_dtype, "KV cache storage and ring transfer (default f32)"),
        {.name = "--batch", .kind = CLI_INT, .dest = &a->batch, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "tokens per forward call of every rank: its prompt rows go in one call,\n"
                 "which N must hold (default: those rows)"},
        CLI_FLAG_SWA_FULL(&a->swa_full),
        CLI_FLAG_KV_VERBOSE(&a->verbose),
        MPI_FLAG_THREADS(&a->threads),
        {.name = "--logits", .kind = CLI_STRING, .dest = &a->logits, .metavar = "FILE",
         .help = "write float32 .npy [n_prompt, vocab]: logits at every prompt position"},
        {.name = "--print-ids", .kind = CLI_BOOL, .dest = &a->print_ids,
         .help = "print the generated token ids instead of text"},
        MPI_FLAG_TIMEOUT(&a->timeout),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {.program = "qkv-mpi", .name = "run", .usage = "[-m MODEL.gguf] (-p TEXT | -f FILE | --tokens IDS) [flags]",
                             .about = "run under mpirun -np N: the prompt split across the N ranks, each layer's attention\n"
                                      "context-parallel over the ring, decode against the sharded KV cache.",
                             .flags = flags};
    int rc = cli_parse(&cmd, argc, argv);
    if (!a->threads) a->threads = g_job.threads_default;
    if (!rc && g_job.rank != 0) a->pf = (cli_progress_flags){.off = 1}; /* one line, from rank 0 */
    if (!rc) cli_progress_init(&a->pf);
    return rc ? rc : cli_prompt_check(&a->prompt);
}

/* Rank 0 streams every rank's prompt logits into path, in rank order. */
static int write_logits(const char *path, const float *mine, int n, int V, double timeout) {
    qkv_cp_rows r;
    qkv_error err = {0};
    qkv_cp_rows_of(&r, n, g_job.size, g_job.rank, QKV_CP_CONTIGUOUS, NULL);
    if (g_job.rank != 0) {
        MPI_Request req;
        MPI_Isend(mine, r.total * V, MPI_FLOAT, 0, 7, g_job.comm, &req);
        return qkv_cp_wait(&req, 1, timeout, g_job.comm, "rank 0 to take the logits", &err) ? mpi_cli_fail(&err) : 0;
    }
    const int64_t shape[2] = {n, V};
    qkv_npy_writer *w = NULL;
    if (qkv_npy_writer_open(&w, path, 2, shape, &err)) return cli_outputs_fail(err.msg);
    float *buf = malloc(((size_t)n / g_job.size + 1) * V * sizeof(float));
    int rc = buf ? 0 : cli_fail("run: out of memory for the logits");
    for (int x = 0; !rc && x < g_job.size; x++) {
        qkv_cp_rows_of(&r, n, g_job.size, x, QKV_CP_CONTIGUOUS, NULL);
        const float *rows = mine;
        if (x) {
            MPI_Request req;
            MPI_Irecv(buf, r.total * V, MPI_FLOAT, x, 7, g_job.comm, &req);
            if (qkv_cp_wait(&req, 1, timeout, g_job.comm, "the ranks' logits", &err)) { rc = mpi_cli_fail(&err); break; }
            rows = buf;
        }
        if (qkv_npy_writer_put(w, rows, (int64_t)r.total * V, &err)) rc = cli_outputs_fail(err.msg);
    }
    if (!rc && qkv_npy_writer_close(w, &err)) rc = cli_outputs_fail(err.msg);
    else if (rc) qkv_npy_writer_abort(w);
    free(buf);
    return rc;
}

/* -v: rank 0 prints every rank's K/V traffic of the prefill's ring, all layers. */
static int print_ring(const qkv_cp_stats *ring, double timeout) {
    const long long mine[4] = {ring->bytes_sent, ring->blocks_sent, ring->bytes_received, ring->blocks_received};
    long long *all = g_job.rank == 0 ? malloc((size_t)g_job.size * sizeof mine) : NULL;
    if (g_job.rank == 0 && !all) MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    qkv_error err = {0};
    MPI_Request req;
    MPI_Igather(mine, 4, MPI_LONG_LONG, all, 4, MPI_LONG_LONG, 0, g_job.comm, &req);
    if (qkv_cp_wait(&req, 1, timeout, g_job.comm, "the ranks' ring figures", &err)) {
        free(all);
        return mpi_cli_fail(&err);
    }
    for (int x = 0; all && x < g_job.size; x++)
        fprintf(stderr, "qkv-mpi run: rank %d: ring sent %lld bytes (%lld blocks), received %lld bytes (%lld blocks)\n", x,
                all[4 * x], all[4 * x + 1], all[4 * x + 2], all[4 * x + 3]);
    free(all);
    return 0;
}

static int run(const mpi_run_args *a) {
    qkv_error err = {0};
    qkv_tokenizer *tok = NULL;
    qkv_model *m = NULL;
    qkv_cp_model *cm = NULL;
    qkv_sampler *sampler = NULL;
    cli_prompt pr = {0};
    float *rows_logits = NULL, *last = NULL;
    int hdr[2] = {0, 0}, rc = 0; /* n_prompt, n_vocab */
    /* rank 0 writes --logits (to a temporary, renamed at the end: cli/outputs.c)
     * and reads the prompt (stdin reaches rank 0 only) */
    const char *logits_tmp = NULL;
    if (g_job.rank == 0 && a->logits && !(logits_tmp = cli_output_add(a->logits))) rc = CLI_EXIT_BAD_INPUT;
    if (g_job.rank == 0 && !rc && !(rc = cli_prompt_load_from(&pr, &a->prompt, a->model, 0))) {
        hdr[0] = pr.n;
        /* a rank holds its prompt rows, the first rank the most; the last one
         * also every generated token, and each rank the token of a decode step */
        const int most = (pr.n + g_job.size - 1) / g_job.size;
        if (pr.n < g_job.size) rc = cli_fail("run: %d ranks exceed the prompt's %d tokens", g_job.size, pr.n);
        else if (a->ctx && a->ctx < most + a->n_gen + 1)
            rc = cli_fail("run: --ctx %d cannot hold a rank's %d prompt rows and %d generated tokens (raise --ctx to %d)",
                          a->ctx, most, a->n_gen, most + a->n_gen + 1);
        else if (a->batch && a->batch < most)
            rc = cli_fail("run: --batch %d cannot hold a rank's %d prompt rows, which the ring attends in one call "
                          "(raise --batch to %d)", a->batch, most, most);
    }
    if ((rc = mpi_cli_share(rc, hdr, 1, a->timeout))) goto done;
    const int n = hdr[0];
    if (g_job.rank && !(pr.ids = malloc((size_t)n * sizeof *pr.ids))) {
        fprintf(stderr, "qkv: run: rank %d: out of memory\n", g_job.rank);
        MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    }
    MPI_Request req;
    MPI_Ibcast(pr.ids, n, MPI_INT32_T, 0, g_job.comm, &req);
    if (qkv_cp_wait(&req, 1, a->timeout, g_job.comm, "the prompt's ids", &err)) { rc = mpi_cli_fail(&err); goto done; }
    qkv_cp_rows rows;
    qkv_cp_rows_of(&rows, n, g_job.size, g_job.rank, QKV_CP_CONTIGUOUS, NULL);
    /* every rank picks LongRoPE's factors by the whole sequence's context, as qkv run with that --ctx */
    const qkv_model_params mp = {.n_ctx = a->ctx ? a->ctx : rows.total + a->n_gen + 1, .kv_dtype = (qkv_dtype)a->kv_dtype,
                                 .n_threads = a->threads, .n_batch = a->batch ? a->batch : rows.total,
                                 .swa_cache = 0, .rope_ctx = a->ctx ? a->ctx : n + a->n_gen + 1};
    /* each rank maps the weights once, then its sequence's model over them */
    qkv_weights *w = NULL;
    qkv_status ost = qkv_weights_open(&w, a->model, &err);
    if (!ost) ost = qkv_model_new(&m, w, &mp, &err);
    qkv_weights_close(w); /* m holds its own reference */
    if (ost) cli_model_fail(&err, a->model); /* rank 0's line; another rank's goes to its quiet stderr */
    if ((rc = mpi_cli_agree(ost ? CLI_EXIT_BAD_INPUT : 0, a->timeout))) goto done;
    if (a->verbose && g_job.rank == 0) cli_print_kv_cache("qkv-mpi run: rank 0", m, mp.kv_dtype);
    mpi_cli_fault_point();
    const int V = qkv_model_get_config(m)->n_vocab;
    if (g_job.rank == 0 && qkv_tokenizer_load(&tok, qkv_model_gguf(m), &err)) { /* it tokenised the prompt: cannot happen */
        cli_fail("%s", err.msg);
        MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    }
    last = malloc((size_t)V * sizeof(float));
    if (a->logits) rows_logits = malloc((size_t)rows.total * V * sizeof(float));
    const qkv_sampler_params sp = {.temperature = a->temp, .top_k = a->top_k, .top_p = a->top_p, .seed = (uint64_t)a->seed};
    qkv_cp_stats ring = {0};
    const qkv_cp_params cpp = {.timeout_s = a->timeout, .stats = &ring};
    if (!last || (a->logits && !rows_logits) || qkv_sampler_init(&sampler, V, &sp, &err) ||
        qkv_cp_model_init(&cm, m, g_job.comm, &cpp, &err)) {
        fprintf(stderr, "qkv: run: rank %d: %s\n", g_job.rank, err.msg[0] ? err.msg : "out of memory");
        MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    }
    const double t0 = MPI_Wtime();
    cli_progress_start("qkv-mpi run: prefill over the ring", 0, "");
    if (qkv_cp_model_prefill(cm, rows_logits, last, pr.ids, n, &err)) { rc = mpi_cli_fail(&err); goto done; }
    cli_progress_finish();
    const double t1 = MPI_Wtime();
    if (a->verbose && (rc = print_ring(&ring, a->timeout))) goto done;
    if (a->logits && (rc = write_logits(logits_tmp, rows_logits, n, V, a->timeout))) goto done;
    int n_done = 0;
    while (n_done < a->n_gen) {
        /* every rank draws (the same stream everywhere); rank 0's token and its stop rule decide */
        int msg[2] = {qkv_sample(sampler, last), 0};
        if (g_job.rank == 0) msg[1] = qkv_token_ends_turn(tok, msg[0]);
        MPI_Ibcast(msg, 2, MPI_INT, 0, g_job.comm, &req);
        if (qkv_cp_wait(&req, 1, a->timeout, g_job.comm, "rank 0's next token", &err)) { rc = mpi_cli_fail(&err); goto done; }
        if (msg[1]) break;
        if (g_job.rank == 0) cli_put_token(tok, msg[0], a->print_ids, n_done == 0);
        if (++n_done == a->n_gen) break;
        if (qkv_cp_model_decode(cm, last, msg[0], &err)) { rc = mpi_cli_fail(&err); goto done; }
    }
    const double t2 = MPI_Wtime();
    if (g_job.rank == 0) {
        if (a->n_gen > 0) printf("\n");
        fflush(stdout);
        fprintf(stderr, "qkv-mpi run: %d ranks | prompt %d tokens %.1f tok/s | generated %d tokens %.1f tok/s | rank 0 peak RSS %.1f MiB\n",
                g_job.size, n, n / (t1 - t0), n_done, n_done > 0 ? n_done / (t2 - t1) : 0.0, cli_peak_rss_mib());
    }
done:
    cli_prompt_free(&pr);
    free(rows_logits);
    free(last);
    qkv_sampler_free(sampler);
    qkv_cp_model_free(cm);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
    return cli_outputs_finish(rc);
}

int mpi_cmd_run(int argc, char **argv) {
    mpi_run_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    return run(&a);
}
