/*
 * layout.c — which rows of a sequence each rank holds (qkv_cp_rows_of).
 * CONTIGUOUS cuts n rows into P runs, the first n % P one row longer;
 * ZIGZAG cuts them into 2P runs the same way and gives rank r runs r and
 * 2P-1-r, so under a causal mask every rank has one cheap early run and one
 * expensive late one (the load balance of Megatron's context parallelism).
 */
#include "internal.h"

#include <string.h>

/* Run `i` of n rows cut into `parts` runs. */
static void cut(int *start, int *len, int n, int parts, int i) {
    const int base = n / parts, extra = n % parts;
    *start = i * base + (i < extra ? i : extra);
    *len = base + (i < extra);
}

qkv_status qkv_cp_rows_of(qkv_cp_rows *out, int n, int n_ranks, int rank, qkv_cp_layout layout,
                          qkv_error *err) {
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
        return util_fail(err, QKV_ERR_INVALID, "context parallel: rank %d outside [0, %d)", rank, n_ranks);
    switch (layout) {
    case QKV_CP_CONTIGUOUS:
        if (n < n_ranks)
            return util_fail(err, QKV_ERR_INVALID, "context parallel: %d ranks exceed the sequence's %d rows", n_ranks, n);
        out->n_seg = 1;
        cut(&out->start[0], &out->len[0], n, n_ranks, rank);
        out->start[1] = out->len[1] = 0;
        out->total = out->len[0];
        return QKV_OK;
    case QKV_CP_ZIGZAG:
        if (n < 2 * n_ranks)
            return util_fail(err, QKV_ERR_INVALID,
                            "context parallel: zigzag over %d ranks needs at least %d rows, the sequence has %d", n_ranks,
                            2 * n_ranks, n);
        out->n_seg = 2;
        cut(&out->start[0], &out->len[0], n, 2 * n_ranks, rank);
        cut(&out->start[1], &out->len[1], n, 2 * n_ranks, 2 * n_ranks - 1 - rank);
        out->total = out->len[0] + out->len[1];
        return QKV_OK;
    }
    return util_fail(err, QKV_ERR_INVALID, "context parallel: unknown layout %d", (int)layout);
}

/* part[h, t] <-> whole[h, row(t)] for the rows of `rows`, in order. */
static void copy_rows(float *whole, float *part, int H, int L, int X, const qkv_cp_rows *rows, int to_part) {
    const size_t bytes = (size_t)X * sizeof(float);
    for (int64_t h = 0, t = 0; h < H; h++)
        for (int s = 0; s < rows->n_seg; s++)
            for (int i = 0; i < rows->len[s]; i++, t++) {
                float *w = whole + (h * L + rows->start[s] + i) * X, *p = part + t * X;
                if (to_part) memcpy(p, w, bytes);
                else memcpy(w, p, bytes);
            }
}

void qkv_cp_rows_take(float *part, const float *whole, int H, int L, int X, const qkv_cp_rows *rows) {
    copy_rows((float *)whole, part, H, L, X, rows, 1);
}

void qkv_cp_rows_put(float *whole, const float *part, int H, int L, int X, const qkv_cp_rows *rows) {
    copy_rows(whole, (float *)part, H, L, X, rows, 0);
}
