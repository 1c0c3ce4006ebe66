/*
 * internal.h — what the files of libqkv_mpi share: the block attention that
 * places a key block and a run of query rows at their global positions, the
 * log-sum-exp merge, and the collective argument check.
 *
 * Legend: Hq, Hkv, D as in qkv/base.h; n = query rows of a run, m = keys of a
 * block; "position" is a global row of the sequence (query row i of the
 * whole call sits at position Lk - Lq + i).
 */
#ifndef QKV_MPI_INTERNAL_H
#define QKV_MPI_INTERNAL_H

#include "qkv_mpi.h"
#include "util/error.h"

#include <stdint.h>

#define CP_DEFAULT_TIMEOUT_S 60.0

/* ------------------------------------------------------------ merge.c */

/* Folds the partial (o_p, lse_p) of n_rows rows into the running (o, lse):
 * the log-sum-exp merge of the header, exact for a fully masked side
 * (LSE -inf, O = 0) and for two of them (LSE stays -inf, O 0).
 *   o, o_p: [n_rows, D]    lse, lse_p: [n_rows] */
void cp_merge_rows(float *o, float *lse, const float *o_p, const float *lse_p, int n_rows, int head_dim);

/* ------------------------------------------------------------ block.c */

/* What a rank needs to attend its query rows to one key block after another. */
typedef struct {
    qkv_attn_plan *plan;       /* sized for max_rows queries x max_keys keys */
    const qkv_attn_desc *g;    /* the global call: heads, D, scale, mask, dtype, threads */
    const float *q;            /* q: [Hq, q_rows, D] this rank's queries */
    int q_rows;
    float *o, *lse;            /* o: [Hq, q_rows, D], lse: [Hq, q_rows] running results */
    float *q_tmp, *o_tmp, *lse_tmp;  /* [Hq, q_rows, D], [Hq, q_rows, D], [Hq, q_rows] scratch */
    int *excl_tmp;             /* [max_keys] a block's exclusions in its own indices */
    MPI_Request *pending;      /* requests to progress between kernel calls (may be NULL) */
    int n_pending;
} cp_block;

/* 1 if any of query positions [qpos, qpos + n) sees any of keys [kpos, kpos + m)
 * under mask (exclusions ignored: they never make a block visible). */
int cp_block_visible(const qkv_mask *mask, int64_t qpos, int n, int64_t kpos, int m);

/* Attends local query rows [r0, r0 + n), at positions qpos .. qpos + n - 1,
 * to keys at positions kpos .. kpos + m - 1, and merges the result into b->o,
 * b->lse. The keys are rows kj0 .. kj0 + m - 1 of
 *   k, v: [Hkv, k_rows, D] in b->g->kv_dtype (a received block, dense).
 * Rows see what the global mask shows them; the call is cut into kernel
 * runs whose bottom-right alignment puts every row at its own position. */
qkv_status cp_block_attend(cp_block *b, int r0, int n, int64_t qpos, const void *k, const void *v,
                           int k_rows, int kj0, int m, int64_t kpos, qkv_error *err);

/* ------------------------------------------------------------ check.c */

/* The collective check every entry point starts with: local_status (this
 * rank's own validation, its message in *err) and the descriptor fields
 * that must agree, reduced over comm with bounded waits. QKV_OK on every
 * rank, or the same failure on every rank: the failing rank keeps its own
 * message, the others get "rank R rejected the call" or the field that
 * differs between ranks. extra: [n_extra] more ints that must agree. */
qkv_status cp_check_collective(qkv_status local_status, const qkv_attn_desc *d, const int *extra, int n_extra,
                               MPI_Comm comm, double timeout_s, qkv_error *err);

double cp_timeout(const qkv_cp_params *p);

#endif
