/*
 * cmd_bench.c — `mpirun -np N qkv-mpi bench`: ring attention of one
 * sequence over the ranks, on random inputs each rank makes for its own rows
 * (qkv bench's shape flags: --n, --hq, --hkv, --d, --no-causal, --window).
 * Per run: the slowest rank's time, compute (max and mean over ranks: the
 * load balance), the time ranks sat in waits after their compute (transfer
 * not hidden), and the ring alone: the same number of block transfers
 * without compute, so "hidden" = 1 - waits / ring alone. GFLOP/s counts 4·D
 * per visible (query, key) pair and head over all ranks, as qkv bench does.
 */
#include "mpi_cli.h"
#include "flag_rows.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, hq, hkv, d, no_causal, window, layout, kv_dtype, threads, repeat, json;
    double timeout;
} bench_args;

/* Visible (query, key) pairs of a causal or window mask over n rows (Lq = Lk). */
static double visible_pairs(int n, int causal, int window) {
    if (!causal) return (double)n * n;
    double s = 0;
    for (int64_t p = 0; p < n; p++) s += window && window < p + 1 ? window : (double)(p + 1);
    return s;
}

/* Time of `steps` ring transfers of this rank's K and V blocks (count elements
 * each; a neighbour's may be up to two rows longer: recv_cap), no compute. */
static double ring_alone(void *send, int count, void *recv, int recv_cap, MPI_Datatype t, int steps) {
    const int next = (g_job.rank + 1) % g_job.size, prev = (g_job.rank + g_job.size - 1) % g_job.size;
    MPI_Barrier(g_job.comm);
    const double t0 = MPI_Wtime();
    for (int s = 0; s < steps; s++)
        for (int kv = 0; kv < 2; kv++)
            MPI_Sendrecv(send, count, t, next, kv, recv, recv_cap, t, prev, kv, g_job.comm, MPI_STATUS_IGNORE);
    return MPI_Wtime() - t0;
}

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
}

static int bench(const bench_args *a) {
    const int P = g_job.size;
    qkv_cp_rows rows;
    qkv_error err = {0};
    if (qkv_cp_rows_of(&rows, a->n, P, g_job.rank, (qkv_cp_layout)a->layout, &err)) {
        if (g_job.rank == 0) cli_fail("%s", err.msg);
        return CLI_EXIT_BAD_INPUT;
    }
    if (a->hq % a->hkv) return g_job.rank ? 2 : cli_fail("--hq %d is not a multiple of --hkv %d", a->hq, a->hkv);
    const qkv_dtype dt = (qkv_dtype)a->kv_dtype;
    const size_t nq = (size_t)a->hq * rows.total * a->d, nk = (size_t)a->hkv * rows.total * a->d;
    float *q = malloc(nq * 4), *o = malloc(nq * 4), *kf = malloc(nk * 4), *lse = malloc((size_t)a->hq * rows.total * 4);
    void *k = malloc(nk * qkv_dtype_size(dt)), *v = malloc(nk * qkv_dtype_size(dt)), *rx = malloc((nk + 2 * (size_t)a->hkv * a->d) * qkv_dtype_size(dt));
    if (!q || !o || !kf || !lse || !k || !v || !rx) {
        fprintf(stderr, "qkv: bench: rank %d: out of memory\n", g_job.rank);
        MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    }
    fill(q, nq, 3 * g_job.rank + 1);
    fill(kf, nk, 3 * g_job.rank + 2);
    qkv_convert_from_f32(k, dt, kf, nk);
    fill(kf, nk, 3 * g_job.rank + 3);
    qkv_convert_from_f32(v, dt, kf, nk);
    const int causal = !a->no_causal || a->window;
    const qkv_attn_desc desc = {.n_q_head = a->hq, .n_kv_head = a->hkv, .q_len = a->n, .kv_len = a->n, .head_dim = a->d,
                                .mask = {.kind = a->window ? QKV_MASK_WINDOW : causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE,
                                         .window = a->window},
                                .kv_dtype = dt, .n_threads = a->threads};
    qkv_cp_stats st, best = {.total_s = INFINITY};
    const qkv_cp_params p = {.layout = (qkv_cp_layout)a->layout, .timeout_s = a->timeout, .stats = &st};
    double best_slowest = INFINITY;
    for (int rep = 0; rep <= a->repeat; rep++) { /* rep 0 warms up */
        MPI_Barrier(g_job.comm);
        if (qkv_cp_attention(o, lse, q, k, v, &desc, g_job.comm, &p, &err)) return mpi_cli_fail(&err);
        double slowest;
        MPI_Allreduce(&st.total_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, g_job.comm);
        if (rep > 0 && slowest < best_slowest) best_slowest = slowest, best = st;
    }
    int max_sent;
    MPI_Allreduce(&best.blocks_sent, &max_sent, 1, MPI_INT, MPI_MAX, g_job.comm);
    const MPI_Datatype et = qkv_dtype_size(dt) == 4 ? MPI_FLOAT : MPI_UINT16_T;
    const double alone = P > 1 ? ring_alone(k, (int)nk, rx, (int)(nk + 2 * (size_t)a->hkv * a->d), et, max_sent) : 0;
    double mine[5] = {best.compute_s, best.wait_s, alone, (double)best.bytes_sent, best.compute_s}, sum[5], mx[5];
    MPI_Reduce(mine, sum, 5, MPI_DOUBLE, MPI_SUM, 0, g_job.comm);
    MPI_Reduce(mine, mx, 5, MPI_DOUBLE, MPI_MAX, 0, g_job.comm);
    if (g_job.rank == 0) {
        const double flops = 4.0 * a->d * a->hq * visible_pairs(a->n, causal, a->window);
        const double compute_mean = sum[0] / P, wait_mean = sum[1] / P, alone_max = mx[2];
        const double hidden = alone_max > 0 ? fmax(0, 1 - wait_mean / alone_max) : 1;
        const char *mask = a->window ? "window" : causal ? "causal" : "none";
        if (a->json)
            printf("{\"ranks\": %d, \"n\": %d, \"hq\": %d, \"hkv\": %d, \"d\": %d, \"mask\": \"%s\", \"window\": %d, "
                   "\"layout\": \"%s\", \"kv_dtype\": \"%s\", \"threads_per_rank\": %d, \"time_s\": %.6f, "
                   "\"compute_max_s\": %.6f, \"compute_mean_s\": %.6f, \"wait_mean_s\": %.6f, \"ring_alone_s\": %.6f, "
                   "\"hidden\": %.4f, \"mib_sent_per_rank\": %.3f, \"gflops\": %.3f}\n",
                   P, a->n, a->hq, a->hkv, a->d, mask, a->window, mpi_cli_layouts[a->layout], qkv_dtype_name(dt), a->threads,
                   best_slowest, mx[0], compute_mean, wait_mean, alone_max, hidden, sum[3] / P / 1048576.0,
                   flops / best_slowest * 1e-9);
        else
            printf("ranks %d  n %d  %d/%d heads  D %d  %s  %s  %s  %d thread(s)/rank: %.2f ms  (compute max %.2f, mean "
                   "%.2f ms; waits mean %.2f ms; ring alone %.2f ms: %.0f%% hidden)  %.1f MiB sent/rank  %.2f GFLOP/s\n",
                   P, a->n, a->hq, a->hkv, a->d, mask, mpi_cli_layouts[a->layout], qkv_dtype_name(dt), a->threads,
                   best_slowest * 1e3, mx[0] * 1e3, compute_mean * 1e3, wait_mean * 1e3, alone_max * 1e3, hidden * 100,
                   sum[3] / P / 1048576.0, flops / best_slowest * 1e-9);
    }
    free(q); free(o); free(kf); free(lse); free(k); free(v); free(rx);
    return 0;
}

int mpi_cmd_bench(int argc, char **argv) {
    bench_args a = {.n = 4096, .hq = 32, .hkv = 8, .d = 128, .repeat = 3, .timeout = 60};
    cli_flag flags[] = {
        {.name = "--n", .kind = CLI_INT, .dest = &a.n, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "sequence length, Lq = Lk (default 4096)"},
        {.name = "--hq", .kind = CLI_INT, .dest = &a.hq, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "query heads (default 32)"},
        {.name = "--hkv", .kind = CLI_INT, .dest = &a.hkv, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "KV heads (default 8)"},
        {.name = "--d", .kind = CLI_INT, .dest = &a.d, .lo = QKV_HEAD_DIM_MIN, .hi = QKV_HEAD_DIM_MAX, .metavar = "N",
         .help = "head dim (default 128)"},
        CLI_FLAG_KV_DTYPE(&a.kv_dtype, "K/V storage and transfer (default f32)"),
        {.name = "--no-causal", .kind = CLI_BOOL, .dest = &a.no_causal, .help = "no mask (default causal)"},
        {.name = "--window", .kind = CLI_INT, .dest = &a.window, .lo = 1, .hi = 1 << 22, .metavar = "W",
         .help = "sliding-window mask of W keys"},
        MPI_FLAG_LAYOUT(&a.layout),
        MPI_FLAG_THREADS(&a.threads),
        {.name = "--repeat", .kind = CLI_INT, .dest = &a.repeat, .lo = 1, .hi = 1000, .metavar = "R",
         .help = "timed runs after one warm-up (default 3); the fastest is kept"},
        MPI_FLAG_TIMEOUT(&a.timeout),
        CLI_FLAG_JSON(&a.json, "one JSON object"),
        {0},
    };
    const cli_command cmd = {.program = "qkv-mpi", .name = "bench", .usage = "[--n N] [--hq N] [--hkv N] [--d N] [--layout L] [--json]",
                             .about = "run under mpirun -np N: ring attention of one sequence split across the ranks",
                             .flags = flags};
    CLI_PARSE_OR_RETURN(&cmd, argc, argv);
    if (!a.threads) a.threads = g_job.threads_default;
    return bench(&a);
}
