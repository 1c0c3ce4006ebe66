/*
 * decode.c — qkv_cp_decode: flash-decoding across ranks. Each rank attends
 * the (replicated) query rows to its shard of the KV cache, placed at the
 * shard's global positions (cp_block_attend), then one non-blocking
 * all-reduce merges the partials with a user-defined log-sum-exp operator
 * over records [LSE, O[0..D-1]] of one query row each.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* MPI_User_function: inout <- merge(in, inout), records of D + 1 floats. */
static void lse_merge_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    int bytes;
    MPI_Type_size(*type, &bytes);
    const int rec = bytes / (int)sizeof(float), D = rec - 1;
    const float *a = in;
    float *acc = inout;
    for (int i = 0; i < *len; i++) cp_merge_rows(acc + (int64_t)i * rec + 1, acc + (int64_t)i * rec, a + (int64_t)i * rec + 1,
                                                 a + (int64_t)i * rec, 1, D);
}

static qkv_status local_check(const float *o, const float *q, const qkv_cp_kv_shard *sh, const qkv_attn_desc *d, qkv_error *err) {
    if (!d) return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: descriptor is NULL");
    qkv_attn_desc whole = *d; /* kv_head_stride is the shard's, checked below */
    whole.kv_head_stride = 0;
    qkv_status st = qkv_attn_check(&whole, err);
    if (st) return st;
    if (d->q_len > QKV_DECODE_MAX_Q)
        return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: q_len %d > %d", d->q_len, QKV_DECODE_MAX_Q);
    if (!o || !q || !sh) return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: o, q and the shard are required");
    if (sh->start < 0 || sh->len < 0 || (int64_t)sh->start + sh->len > d->kv_len)
        return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: shard [%d, %d + %d) outside [0, %d)", sh->start,
                        sh->start, sh->len, d->kv_len);
    if (sh->len && (!sh->k || !sh->v)) return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: shard k and v are required");
    const int64_t stride = d->kv_head_stride ? d->kv_head_stride : (int64_t)sh->len * d->head_dim;
    if (stride < (int64_t)sh->len * d->head_dim || stride % d->head_dim)
        return util_fail(err, QKV_ERR_INVALID, "context-parallel decode: kv_head_stride %lld is not a multiple of head_dim >= len * head_dim",
                        (long long)stride);
    return QKV_OK;
}

/* The shards of all ranks, in rank order, must tile [0, kv_len). */
static qkv_status check_tiling(const qkv_cp_kv_shard *sh, int kv_len, MPI_Comm comm, double tmo, qkv_error *err) {
    int P;
    MPI_Comm_size(comm, &P);
    int mine[2] = {sh->start, sh->len}, *all = malloc((size_t)P * 2 * sizeof(int));
    if (!all) return util_fail(err, QKV_ERR_NOMEM, "context-parallel decode: out of memory");
    MPI_Request req;
    MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, comm, &req);
    qkv_status st = qkv_cp_wait(&req, 1, tmo, comm, "the other ranks' shard bounds", err);
    int64_t end = 0;
    for (int x = 0; !st && x < P; x++) {
        if (all[2 * x] != end)
            st = util_fail(err, QKV_ERR_INVALID, "context-parallel decode: rank %d's shard starts at %d, not %lld", x, all[2 * x],
                          (long long)end);
        end += all[2 * x + 1];
    }
    if (!st && end != kv_len)
        st = util_fail(err, QKV_ERR_INVALID, "context-parallel decode: the shards hold %lld keys, kv_len is %d", (long long)end, kv_len);
    free(all);
    return st;
}

qkv_status qkv_cp_decode(float *o, float *lse, const float *q, const qkv_cp_kv_shard *shard, const qkv_attn_desc *d,
                         MPI_Comm comm, const qkv_cp_params *p, qkv_error *err) {
    const double t_start = MPI_Wtime(), tmo = cp_timeout(p);
    qkv_status st = local_check(o, q, shard, d, err);
    if ((st = cp_check_collective(st, d, NULL, 0, comm, tmo, err))) return st;
    if ((st = check_tiling(shard, d->kv_len, comm, tmo, err))) return st;

    const int hq = d->n_q_head, lq = d->q_len, D = d->head_dim, rows = hq * lq, m = shard->len;
    const int64_t q_off = (int64_t)d->kv_len - lq;
    float *acc_o = calloc((size_t)rows * D, sizeof(float)), *acc_l = malloc((size_t)rows * sizeof(float));
    float *o_tmp = malloc((size_t)rows * D * sizeof(float)), *l_tmp = malloc((size_t)rows * sizeof(float));
    float *q_tmp = malloc((size_t)rows * D * sizeof(float)), *rec = malloc((size_t)rows * (D + 1) * sizeof(float));
    int *excl_tmp = malloc((size_t)(m ? m : 1) * sizeof(int));
    qkv_attn_plan *plan = NULL;
    qkv_error aerr = {0};
    qkv_status ast = QKV_OK;
    if (!acc_o || !acc_l || !o_tmp || !l_tmp || !q_tmp || !rec || !excl_tmp)
        ast = util_fail(&aerr, QKV_ERR_NOMEM, "context-parallel decode: out of memory");
    else if (m > 0) {
        const qkv_attn_desc max_desc = {.n_q_head = hq, .n_kv_head = d->n_kv_head, .q_len = lq, .kv_len = m, .head_dim = D,
                                        .kv_dtype = d->kv_dtype};
        ast = qkv_attn_plan_init(&plan, &max_desc, QKV_KERNEL_AUTO, d->n_threads, &aerr);
    }
    if ((st = cp_check_collective(ast, d, NULL, 0, comm, tmo, &aerr))) {
        if (err) *err = aerr;
        goto done;
    }
    for (int i = 0; i < rows; i++) acc_l[i] = -INFINITY;
    const double t0 = MPI_Wtime();
    if (m > 0 && cp_block_visible(&d->mask, q_off, lq, shard->start, m)) {
        const int k_rows = (int)((d->kv_head_stride ? d->kv_head_stride : (int64_t)m * D) / D);
        cp_block blk = {.plan = plan, .g = d, .q = q, .q_rows = lq, .o = acc_o, .lse = acc_l, .q_tmp = q_tmp,
                        .o_tmp = o_tmp, .lse_tmp = l_tmp, .excl_tmp = excl_tmp};
        st = cp_block_attend(&blk, 0, lq, q_off, shard->k, shard->v, k_rows, 0, m, shard->start, err);
    }
    const double t1 = MPI_Wtime();
    /* a failed rank still joins the reduction (with its rows empty), so no rank waits for it */
    for (int i = 0; i < rows; i++) {
        rec[(int64_t)i * (D + 1)] = st ? -INFINITY : acc_l[i];
        memcpy(rec + (int64_t)i * (D + 1) + 1, acc_o + (int64_t)i * D, (size_t)D * sizeof(float));
    }
    MPI_Datatype rec_type;
    MPI_Op op;
    MPI_Type_contiguous(D + 1, MPI_FLOAT, &rec_type);
    MPI_Type_commit(&rec_type);
    MPI_Op_create(lse_merge_op, 1, &op);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, rec, rows, rec_type, op, comm, &req);
    qkv_status wst = qkv_cp_wait(&req, 1, tmo, comm, "the decode reduction", st ? NULL : err);
    if (!st) st = wst;
    if (!wst) { /* a request still in flight keeps its type and operator */
        MPI_Op_free(&op);
        MPI_Type_free(&rec_type);
    }
    for (int i = 0; !st && i < rows; i++) {
        if (lse) lse[i] = rec[(int64_t)i * (D + 1)];
        memcpy(o + (int64_t)i * D, rec + (int64_t)i * (D + 1) + 1, (size_t)D * sizeof(float));
    }
    if (p && p->stats)
        *p->stats = (qkv_cp_stats){.total_s = MPI_Wtime() - t_start, .compute_s = t1 - t0, .wait_s = MPI_Wtime() - t1,
                                   .blocks_computed = m > 0};
done:
    qkv_attn_plan_free(plan);
    free(acc_o); free(acc_l); free(o_tmp); free(l_tmp); free(q_tmp); free(rec); free(excl_tmp);
    return st;
}
