/* main.c — `mpirun -np N qkv-mpi <command> [flags]`: context-parallel
 * attention over MPI; dispatches to mpi/cli/cmd_<name>.c. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_cli.h"
#include "dispatch.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

mpi_job g_job;
const char *const mpi_cli_layouts[] = {"contiguous", "zigzag", NULL};
static int g_stderr_fd = 2; /* this rank's own stderr (ranks > 0 point fd 2 at /dev/null) */

int mpi_cli_fail(const qkv_error *err) {
    if (err->status != QKV_ERR_IO) { /* libqkv_mpi's non-I/O failures are collective: every rank has it */
        if (g_job.rank == 0) cli_fail("%s", err->msg);
        return CLI_EXIT_BAD_INPUT;
    }
    dprintf(g_stderr_fd, "qkv: %s\n", err->msg);
    MPI_Abort(g_job.comm, CLI_EXIT_BAD_INPUT);
    return CLI_EXIT_BAD_INPUT;
}

int mpi_cli_share(int rc, int *header, int n, double timeout_s) {
    int *buf = malloc((size_t)(n + 1) * sizeof *buf);
    if (!buf) return cli_fail("out of memory");
    buf[0] = rc;
    if (g_job.rank == 0) memcpy(buf + 1, header, (size_t)n * sizeof *buf);
    MPI_Request req;
    MPI_Ibcast(buf, n + 1, MPI_INT, 0, g_job.comm, &req);
    qkv_error err = {0};
    if (qkv_cp_wait(&req, 1, timeout_s, g_job.comm, "rank 0 to read the input", &err)) {
        free(buf);
        return mpi_cli_fail(&err);
    }
    rc = buf[0];
    memcpy(header, buf + 1, (size_t)n * sizeof *buf);
    free(buf);
    return rc;
}

int mpi_cli_agree(int rc, double timeout_s) {
    int worst = rc;
    MPI_Request req;
    MPI_Iallreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, g_job.comm, &req);
    qkv_error err = {0};
    if (qkv_cp_wait(&req, 1, timeout_s, g_job.comm, "the other ranks to agree", &err)) return mpi_cli_fail(&err);
    return worst;
}

void mpi_cli_fault_point(void) {
    const char *f = getenv("QKV_MPI_FAULT");
    if (!f) return;
    char kind[8] = "";
    int r = -1;
    if (sscanf(f, "%7[a-z]:%d", kind, &r) != 2 || r != g_job.rank) return;
    if (!strcmp(kind, "exit")) _exit(3);
    if (!strcmp(kind, "stall")) {
        struct timespec ts = {3600, 0};
        nanosleep(&ts, NULL);
    }
}

static const cli_dispatch_cmd commands[] = {
    {"attend", mpi_cmd_attend, "context-parallel attention of .npy arrays: rank 0 reads, scatters, gathers, writes"},
    {"bench", mpi_cmd_bench, "ring attention over the ranks: time, communication against compute"},
    {"run", mpi_cmd_run, "a GGUF model with the prompt split across the ranks (context-parallel attention)"},
};

/* Ranks > 0 keep their stdout and stderr quiet: rank 0 speaks for the job. */
static void quiet_other_ranks(void) {
    g_stderr_fd = dup(2);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    g_job.comm = MPI_COMM_WORLD;
    MPI_Comm_rank(g_job.comm, &g_job.rank);
    MPI_Comm_size(g_job.comm, &g_job.size);
    MPI_Comm node;
    int local = 1;
    MPI_Comm_split_type(g_job.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g_job.threads_default = cores / local > 1 ? (int)(cores / local) : 1;
    if (g_job.rank) quiet_other_ranks();
    const cli_dispatch_table t = {.program = "qkv-mpi", .about = "context-parallel attention over MPI",
                                  .usage = "mpirun -np N qkv-mpi <command> [flags]", .name_width = 8,
                                  .cmds = commands, .n_cmds = sizeof commands / sizeof commands[0]};
    const int rc = cli_dispatch(&t, argc, argv);
    MPI_Finalize();
    return rc;
}
