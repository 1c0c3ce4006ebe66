/*
 * wait.c — the one way libqkv_mpi waits: MPI_Testall in a loop with a
 * deadline, so a peer that died or stalls gives an error naming what was
 * awaited instead of a hang. (MPI_Wait has no timeout.) Between polls the
 * thread yields briefly: ranks may oversubscribe the cores.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <time.h>

double cp_timeout(const qkv_cp_params *p) {
    return p && p->timeout_s > 0 ? p->timeout_s : CP_DEFAULT_TIMEOUT_S;
}

qkv_status qkv_cp_wait(MPI_Request *reqs, int n, double timeout_s, MPI_Comm comm, const char *what,
                   qkv_error *err) {
    const double t0 = MPI_Wtime();
    for (long polls = 0;; polls++) {
        int done = 0;
        if (MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            int rank;
            MPI_Comm_rank(comm, &rank);
            return util_fail(err, QKV_ERR_IO, "rank %d: MPI error while waiting for %s", rank, what);
        }
        if (done) return QKV_OK;
        if (MPI_Wtime() - t0 > timeout_s) {
            int rank;
            MPI_Comm_rank(comm, &rank);
            return util_fail(err, QKV_ERR_IO, "rank %d: timed out after %g s waiting for %s (did a rank die?)",
                            rank, timeout_s, what);
        }
        if (polls > 1000) { /* spin first (a fast peer), then sleep 50 us per poll */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}
