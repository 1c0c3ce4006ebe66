/*
 * flash.c — prefill: tiled online-softmax attention that never allocates
 * O(Lq * Lk) memory. The grid is KV heads x query blocks; a block holds all
 * the query heads of one KV group (so each K/V tile is loaded and converted
 * once per group, not once per query head) times up to 64/G positions.
 *
 * Threads: OpenMP. The work is a flat loop of independent blocks whose cost
 * varies (causal blocks late in the sequence see more keys), which dynamic
 * scheduling balances; libgomp keeps its workers alive between calls, so a
 * call costs no thread creation (it matters for decode's ~100 us calls), and
 * the team is sized per call by n_threads. A private pool would re-implement
 * exactly that. A call too small to pay for a second thread (FLASH_MIN_FLOPS)
 * runs on one: on a 2-core machine shared with other work, a parallel region
 * waits for its slowest thread, and a descheduled one costs a whole time
 * slice (milliseconds) against a call of microseconds.
 */
#include "attn/internal.h"

#include <math.h>
#include <string.h>

/* FLOPs (upper bound, mask ignored) per thread below which another thread
 * costs more than it brings: ~50 us of work against a parallel region's
 * wake-up and barrier. */
#define FLASH_MIN_FLOPS 4e6

/* Heads per block and positions per block for group size G and length Lq. */
static void block_shape(int G, int q_len, int *nh, int *nq) {
    *nh = G < ATTN_MAX_ROWS ? G : ATTN_MAX_ROWS;
    int n = ATTN_MAX_ROWS / *nh;
    *nq = n < q_len ? n : q_len;
}

/* Writes O = acc / l and LSE = m + log l for the rows of a finished block. */
static void write_rows(float *o, float *lse, const attn_problem *P, const attn_rows *rows,
                       const attn_scratch *ws) {
    const int D = P->head_dim;
    for (int hl = 0; hl < rows->nh; hl++) {
        int h = rows->kvh * P->group + rows->h0 + hl;
        for (int t = 0; t < rows->nq; t++) {
            int r = hl * rows->nq + t;
            size_t row = (size_t)h * P->q_len + rows->i0 + t;
            float l = ws->l[r];
            float *out = o + row * D;
            if (l > 0) {
                float inv = 1.0f / l;
                const float *acc = ws->acc + (size_t)r * P->ld;
                for (int d = 0; d < D; d++) out[d] = acc[d] * inv;
                if (lse) lse[row] = ws->m[r] + logf(l);
            } else { /* fully masked row */
                memset(out, 0, (size_t)D * sizeof(float));
                if (lse) lse[row] = -INFINITY;
            }
        }
    }
}

qkv_status attn_flash(float *o, float *lse, const attn_problem *P, int n_threads, attn_rows_fn rows_fn,
                      qkv_error *err) {
    if (!rows_fn) rows_fn = attn_isa_best()->rows;
    int nh, nq;
    block_shape(P->group, P->q_len, &nh, &nq);
    const int n_hchunk = (P->group + nh - 1) / nh;
    const int n_qblock = (P->q_len + nq - 1) / nq;
    const int64_t n_items = (int64_t)P->n_kv_head * n_hchunk * n_qblock;
    int failed = 0;
    /* no more threads than items, and none for less than FLASH_MIN_FLOPS of work */
    const double flops = 4.0 * P->head_dim * P->n_q_head * (double)P->q_len * P->kv_len;
    if (n_threads > n_items) n_threads = (int)n_items;
    if (n_threads > 1 && flops / n_threads < FLASH_MIN_FLOPS) n_threads = flops / FLASH_MIN_FLOPS > 1 ? (int)(flops / FLASH_MIN_FLOPS) : 1;

#pragma omp parallel num_threads(n_threads)
    {
        attn_scratch ws;
        int ok = attn_scratch_init(&ws, P->ld, NULL) == QKV_OK;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < n_items; it++) {
            if (!ok) continue;
            /* last query blocks first: under a causal mask they cost the most */
            int qb = n_qblock - 1 - (int)(it % n_qblock);
            int64_t rest = it / n_qblock;
            attn_rows rows;
            rows.kvh = (int)(rest / n_hchunk);
            rows.h0 = (int)(rest % n_hchunk) * nh;
            rows.nh = P->group - rows.h0 < nh ? P->group - rows.h0 : nh;
            rows.i0 = qb * nq;
            rows.nq = P->q_len - rows.i0 < nq ? P->q_len - rows.i0 : nq;
            rows_fn(P, &rows, 0, P->kv_len, &ws);
            write_rows(o, lse, P, &rows, &ws);
        }
        if (ok) attn_scratch_free(&ws);
    }
    if (failed) return qkv_fail(err, QKV_ERR_NOMEM, "flash attention: cannot allocate per-thread scratch");
    return QKV_OK;
}
