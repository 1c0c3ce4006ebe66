/*
 * mpi_cli.h — what the qkv-mpi subcommands share beyond cli/cli.h (whose
 * flag tables, one-line errors and .npy loader they reuse): the rank's
 * place in the job, the error policy, the default thread count and the
 * fault hook the tests use.
 *
 * Error policy: bad input is found on rank 0 (which reads the files) or by
 * every rank alike (flags); only rank 0 prints its one "qkv: " line and every
 * rank exits 2. A timeout (a rank that died or stalls) is printed by the rank
 * that saw it, which then MPI_Aborts the job with status 2.
 */
#ifndef QKV_MPI_CLI_H
#define QKV_MPI_CLI_H

#include "cli.h"
#include "flags.h"
#include "qkv_mpi.h"

typedef struct {
    MPI_Comm comm;
    int rank, size;
    int threads_default;  /* cores / ranks on this node, at least 1 */
} mpi_job;

extern mpi_job g_job;
extern const char *const mpi_cli_layouts[]; /* "contiguous", "zigzag": qkv_cp_layout order */

#define MPI_FLAG_LAYOUT(dst)                                                        \
    CLI_FLAG_CHOICE("--layout", CLI_CHOICE, (dst), mpi_cli_layouts,                 \
                    "rows per rank: one run, or zigzag (runs r and 2P-1-r) balancing causal work")
/* --threads per rank, bounded as qkv's own (cli_parse_threads) */
#define MPI_FLAG_THREADS(dst)                                                                             \
    CLI_FLAG_FN("--threads", (int *)(dst), cli_parse_threads, "N",                                          \
                "threads per rank (default: cores / ranks on the node; at most " CLI_STR(CLI_THREADS_PER_CPU) \
                " per online CPU)")
#define MPI_FLAG_TIMEOUT(dst)                                                       \
    {.name = "--timeout", .kind = CLI_DOUBLE, .dest = (dst), .lo = 0.01, .hi = 86400, .metavar = "S", .help = "longest wait for another rank before the job is aborted (default 60)"}

/* After a failed library call: QKV_ERR_IO (a timeout or an MPI error, seen
 * by this rank alone) aborts the job (this rank prints "qkv: <msg>", MPI_Abort
 * status 2); anything else is collective and returns 2, rank 0 printing. */
int mpi_cli_fail(const qkv_error *err);
/* Rank 0 tells every rank whether it may go on (rc 0) with `n` ints of
 * header; a bounded broadcast. Returns rc as rank 0 had it (2: stop). */
int mpi_cli_share(int rc, int *header, int n, double timeout_s);
/* The largest rc over the ranks (0: every rank may go on); a bounded
 * all-reduce. */
int mpi_cli_agree(int rc, double timeout_s);
/* The test hook QKV_MPI_FAULT=exit:R (rank R exits with status 3 without
 * MPI_Finalize, as a crashed rank does) or stall:R (rank R sleeps far past
 * any timeout). Called where the commands start their collective work. */
void mpi_cli_fault_point(void);

int mpi_cmd_attend(int argc, char **argv);
int mpi_cmd_bench(int argc, char **argv);
int mpi_cmd_run(int argc, char **argv);

#endif
