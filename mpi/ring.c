/*
 * ring.c — qkv_cp_attention: ring attention over a communicator.
 * Step s = 0 .. P-1: rank r holds the K/V block of rank b = r - s (mod P);
 * it posts the send of that block to r + 1 and the receive of block r - s - 1
 * from r - 1, attends its queries to the block in hand while they travel,
 * then waits (bounded) and swaps buffers. Block b visits ranks b, b+1, ...
 * in that order; it travels only as far as the last rank on its route that
 * can see it (last_step[b]), so masked blocks are neither computed nor sent.
 */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 if some query row of rank x (rows rq) sees some key of block rk. */
static int rank_sees(const qkv_mask *mask, const qkv_cp_rows *rq, const qkv_cp_rows *rk, int64_t q_off) {
    for (int a = 0; a < rq->n_seg; a++)
        for (int c = 0; c < rk->n_seg; c++)
            if (rq->len[a] && rk->len[c] && cp_block_visible(mask, q_off + rq->start[a], rq->len[a], rk->start[c], rk->len[c]))
                return 1;
    return 0;
}

static qkv_status local_check(const float *o, const float *q, const void *k, const void *v, const qkv_attn_desc *d,
                              int P, int r, qkv_cp_layout layout, qkv_cp_rows *mine_q, qkv_cp_rows *mine_k, qkv_error *err) {
    if (!d) return util_fail(err, QKV_ERR_INVALID, "context parallel: descriptor is NULL");
    qkv_status st = qkv_attn_check(d, err);
    if (st) return st;
    if (!o || !q || !k || !v) return util_fail(err, QKV_ERR_INVALID, "context parallel: o, q, k and v are required");
    if (d->kv_head_stride)
        return util_fail(err, QKV_ERR_INVALID, "context parallel: k and v must be dense (kv_head_stride 0)");
    if ((st = qkv_cp_rows_of(mine_q, d->q_len, P, r, layout, err))) return st;
    return qkv_cp_rows_of(mine_k, d->kv_len, P, r, layout, err);
}

static MPI_Datatype kv_mpi_type(qkv_dtype t) { return qkv_dtype_size(t) == 4 ? MPI_FLOAT : MPI_UINT16_T; }

qkv_status qkv_cp_attention(float *o, float *lse, const float *q, const void *k, const void *v, const qkv_attn_desc *d,
                            MPI_Comm comm, const qkv_cp_params *p, qkv_error *err) {
    const double t_start = MPI_Wtime();
    int P, r;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    const double tmo = cp_timeout(p);
    const qkv_cp_layout layout = p ? p->layout : QKV_CP_CONTIGUOUS;
    qkv_cp_rows mq, mk;
    qkv_status st = local_check(o, q, k, v, d, P, r, layout, &mq, &mk, err);
    const int extra[1] = {(int)layout};
    if ((st = cp_check_collective(st, d, extra, 1, comm, tmo, err))) return st;

    const int hq = d->n_q_head, hkv = d->n_kv_head, D = d->head_dim;
    const size_t es = qkv_dtype_size(d->kv_dtype);
    const int64_t q_off = (int64_t)d->kv_len - d->q_len; /* position of query row 0 */
    qkv_cp_rows *rq = calloc((size_t)P, sizeof *rq), *rk = calloc((size_t)P, sizeof *rk);
    int *last = calloc((size_t)P, sizeof *last);
    char *need = calloc((size_t)P * P, 1); /* need[b * P + x]: rank x sees block b */
    int max_k = 0;
    for (int x = 0; rq && rk && x < P; x++) {
        qkv_cp_rows_of(&rq[x], d->q_len, P, x, layout, NULL);
        qkv_cp_rows_of(&rk[x], d->kv_len, P, x, layout, NULL);
        if (rk[x].total > max_k) max_k = rk[x].total;
    }
    for (int b = 0; rq && rk && last && need && b < P; b++) {
        last[b] = -1;
        for (int s = 0; s < P; s++) {
            const int x = (b + s) % P;
            need[b * P + x] = (char)rank_sees(&d->mask, &rq[x], &rk[b], q_off);
            if (need[b * P + x]) last[b] = s;
        }
    }
    /* scratch: the plan, the query-run copies, two K/V receive buffers */
    const size_t nq = (size_t)hq * mq.total * D, nkv = (size_t)hkv * max_k * D;
    qkv_attn_desc max_desc = {.n_q_head = hq, .n_kv_head = hkv, .q_len = mq.total, .kv_len = max_k, .head_dim = D,
                              .kv_dtype = d->kv_dtype};
    qkv_attn_plan *plan = NULL;
    float *q_tmp = malloc(nq * sizeof(float)), *o_tmp = malloc(nq * sizeof(float));
    float *lse_tmp = malloc((size_t)hq * mq.total * sizeof(float));
    float *lse_own = lse ? NULL : malloc((size_t)hq * mq.total * sizeof(float));
    int *excl_tmp = malloc((size_t)max_k * sizeof(int));
    /* receive buffers: none on one rank, one pair on two, two pairs (alternating) beyond */
    const int n_bufs = P > 2 ? 2 : P - 1;
    char *buf[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int i = 0; i < n_bufs; i++) buf[i][0] = malloc(nkv * es), buf[i][1] = malloc(nkv * es);
    qkv_error aerr = {0};
    qkv_status ast = QKV_OK;
    if (nkv > INT_MAX) ast = util_fail(&aerr, QKV_ERR_TOO_LARGE, "context parallel: a K/V block of %zu elements exceeds one MPI message", nkv);
    else if (!rq || !rk || !last || !need || !q_tmp || !o_tmp || !lse_tmp || (!lse && !lse_own) || !excl_tmp ||
             (n_bufs > 0 && (!buf[0][0] || !buf[0][1])) || (n_bufs > 1 && (!buf[1][0] || !buf[1][1])))
        ast = util_fail(&aerr, QKV_ERR_NOMEM, "context parallel: rank %d: out of memory", r);
    else
        ast = qkv_attn_plan_init(&plan, &max_desc, QKV_KERNEL_AUTO, d->n_threads, &aerr);
    if ((st = cp_check_collective(ast, d, extra, 1, comm, tmo, &aerr))) {
        if (err) *err = aerr;
        goto done;
    }

    float *run_lse = lse ? lse : lse_own;
    memset(o, 0, nq * sizeof(float));
    for (size_t i = 0; i < (size_t)hq * mq.total; i++) run_lse[i] = -INFINITY;
    MPI_Request req[4];
    cp_block blk = {.plan = plan, .g = d, .q = q, .q_rows = mq.total, .o = o, .lse = run_lse, .q_tmp = q_tmp,
                    .o_tmp = o_tmp, .lse_tmp = lse_tmp, .excl_tmp = excl_tmp, .pending = req, .n_pending = 4};
    qkv_cp_stats stats = {0};
    const MPI_Datatype et = kv_mpi_type(d->kv_dtype);
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    const void *cur_k = k, *cur_v = v;
    for (int s = 0; s < P && !st; s++) {
        const int b = (r - s + P) % P, nb = (r - s - 1 + 2 * P) % P;
        for (int i = 0; i < 4; i++) req[i] = MPI_REQUEST_NULL;
        if (s + 1 < P && s + 1 <= last[b]) {
            const int cnt = hkv * rk[b].total * D;
            MPI_Isend(cur_k, cnt, et, next, 2 * s, comm, &req[0]);
            MPI_Isend(cur_v, cnt, et, next, 2 * s + 1, comm, &req[1]);
            stats.bytes_sent += 2 * (int64_t)cnt * (int64_t)es;
            stats.blocks_sent++;
        }
        char **into = buf[P > 2 ? s % 2 : 0];
        const int receiving = s + 1 < P && s + 1 <= last[nb];
        if (receiving) {
            const int cnt = hkv * rk[nb].total * D;
            MPI_Irecv(into[0], cnt, et, prev, 2 * s, comm, &req[2]);
            MPI_Irecv(into[1], cnt, et, prev, 2 * s + 1, comm, &req[3]);
            stats.bytes_received += 2 * (int64_t)cnt * (int64_t)es;
            stats.blocks_received++;
        }
        const double t0 = MPI_Wtime();
        if (need[b * P + r]) {
            stats.blocks_computed++;
            for (int a = 0, qrow = 0; a < mq.n_seg && !st; qrow += mq.len[a], a++)
                for (int c = 0, krow = 0; c < rk[b].n_seg && !st; krow += rk[b].len[c], c++)
                    if (cp_block_visible(&d->mask, q_off + mq.start[a], mq.len[a], rk[b].start[c], rk[b].len[c]))
                        st = cp_block_attend(&blk, qrow, mq.len[a], q_off + mq.start[a], cur_k, cur_v, rk[b].total, krow,
                                             rk[b].len[c], rk[b].start[c], err);
        }
        const double t1 = MPI_Wtime();
        stats.compute_s += t1 - t0;
        if (st) break;
        char what[96];
        snprintf(what, sizeof what, "the K/V block of rank %d from rank %d", nb, prev);
        st = qkv_cp_wait(req, 4, tmo, comm, what, err);
        stats.wait_s += MPI_Wtime() - t1;
        if (receiving) cur_k = into[0], cur_v = into[1];
    }
    stats.total_s = MPI_Wtime() - t_start;
    if (p && p->stats) *p->stats = stats;
done:
    qkv_attn_plan_free(plan);
    free(rq); free(rk); free(last); free(need);
    free(q_tmp); free(o_tmp); free(lse_tmp); free(lse_own); free(excl_tmp);
    free(buf[0][0]); free(buf[0][1]); free(buf[1][0]); free(buf[1][1]);
    return st;
}
