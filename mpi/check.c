/*
 * check.c — the collective start of every call: each rank's own validation
 * and the descriptor fields that must be the same everywhere, reduced by
 * MIN and MAX in one pair of non-blocking all-reduces with a bounded wait.
 * Every rank then returns the same status, so no rank enters the ring while
 * another has refused (which would leave the first waiting for blocks that
 * never come).
 */
#include "internal.h"

#include <limits.h>
#include <string.h>

enum { F_FAIL_RANK, F_STATUS, F_HQ, F_HKV, F_LQ, F_LK, F_D, F_KIND, F_WINDOW, F_SINKS, F_DTYPE, F_SCALE,
       F_SOFTCAP, F_N_EXCL, F_EXCL_SUM, F_EXTRA, F_MAX = F_EXTRA + 8 };

static const char *const field_names[F_EXTRA] = {
    "", "", "n_q_head", "n_kv_head", "q_len", "kv_len", "head_dim", "mask kind", "window", "sinks",
    "kv_dtype", "scale", "softcap", "the number of exclusions", "the excluded keys"};

qkv_status cp_check_collective(qkv_status local_status, const qkv_attn_desc *d, const int *extra, int n_extra,
                               MPI_Comm comm, double timeout_s, qkv_error *err) {
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (n_extra > F_MAX - F_EXTRA) return util_fail(err, QKV_ERR_INVALID, "context parallel: too many extra fields (a bug)");
    int v[F_MAX] = {0}, lo[F_MAX], hi[F_MAX];
    const int n = F_EXTRA + n_extra;
    v[F_FAIL_RANK] = local_status ? rank : INT_MAX;
    v[F_STATUS] = (int)local_status;
    if (d) {
        v[F_HQ] = d->n_q_head, v[F_HKV] = d->n_kv_head, v[F_LQ] = d->q_len, v[F_LK] = d->kv_len;
        v[F_D] = d->head_dim, v[F_KIND] = (int)d->mask.kind, v[F_WINDOW] = d->mask.window;
        v[F_SINKS] = d->mask.sinks, v[F_DTYPE] = (int)d->kv_dtype;
        memcpy(&v[F_SCALE], &d->scale, sizeof(float));
        memcpy(&v[F_SOFTCAP], &d->softcap, sizeof(float));
        v[F_N_EXCL] = d->mask.n_exclude;
        unsigned sum = 0;
        for (int e = 0; d->mask.exclude && e < d->mask.n_exclude; e++) sum = sum * 31u + (unsigned)d->mask.exclude[e];
        v[F_EXCL_SUM] = (int)(sum & INT_MAX);
    }
    for (int e = 0; e < n_extra; e++) v[F_EXTRA + e] = extra[e];
    MPI_Request req[2];
    MPI_Iallreduce(v, lo, n, MPI_INT, MPI_MIN, comm, &req[0]);
    MPI_Iallreduce(v, hi, n, MPI_INT, MPI_MAX, comm, &req[1]);
    qkv_error werr;
    if (qkv_cp_wait(req, 2, timeout_s, comm, "the other ranks to check the call", &werr)) {
        /* a timeout outranks this rank's own complaint: the job is stuck */
        if (err) *err = werr;
        return werr.status;
    }
    if (local_status) return local_status; /* err holds this rank's own message */
    if (hi[F_STATUS])
        return util_fail(err, (qkv_status)hi[F_STATUS], "context parallel: rank %d rejected the call", lo[F_FAIL_RANK]);
    for (int f = F_HQ; f < n; f++)
        if (lo[f] != hi[f]) {
            if (f >= F_EXTRA)
                return util_fail(err, QKV_ERR_INVALID, "context parallel: ranks disagree on parameter %d (%d on some, %d on others)",
                                f - F_EXTRA, lo[f], hi[f]);
            return util_fail(err, QKV_ERR_INVALID, "context parallel: ranks disagree on %s (%d on some, %d on others)",
                            field_names[f], lo[f], hi[f]);
        }
    return QKV_OK;
}
