/*
 * flash.c — prefill: tiled online-softmax attention that never allocates
 * O(Lq * Lk) memory. The grid is KV heads x query blocks; a block holds all
 * the query heads of one KV group (so each K/V tile is loaded once per
 * group, not once per query head) times up to 64/G positions, or 128/G
 * where the K/V stream from DRAM (attn_flash_block_rows). bf16/f16 K/V
 * are converted to f32 once per KV head and thread, into the plan's copy
 * (attn_kv_f32, internal.h), where it has one; else once per tile and block.
 *
 * Threads: libqkv's pool (util/parallel.c). The work is a flat loop of
 * independent blocks whose cost varies (causal blocks late in the sequence
 * see more keys), which dynamic scheduling balances; the pool keeps its
 * workers between calls, so a call costs no thread creation (it matters for
 * decode's ~100 us calls), and each call uses n_threads of them. A call too small to pay for a second thread (FLASH_MIN_FLOPS)
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

/* A block reads every K/V tile its rows see, so the K/V bytes streamed per
 * FLOP fall with the rows per block. Where those tiles come from DRAM (the
 * K/V of a head past what the shared L3 keeps), wide blocks of ATTN_MAX_ROWS
 * halve that stream; where they stay in cache, a wide block's queries and
 * accumulators outgrow L1 and ATTN_BLOCK_ROWS is faster (the figures:
 * docs/benchmarks-history.md, issue 11, "wide blocks"). So blocks are wide
 * when the middle row of the call walks at least this many bytes of K and V
 * in f32 (the block path reads f32: as stored, from the thread's copy or
 * converted per tile). */
#define FLASH_WIDE_WALK_BYTES (6.0 * (1 << 20))

int attn_flash_block_rows(const attn_problem *P) {
    const int p_mid = P->kv_len - P->q_len + P->q_len / 2;
    const double walk = 2.0 * sizeof(float) * P->head_dim * attn_rule_keys_seen(P->mask, P->kv_len, p_mid);
    return walk >= FLASH_WIDE_WALK_BYTES ? ATTN_MAX_ROWS : ATTN_BLOCK_ROWS;
}

/* Heads per block and positions per block for group size G, length Lq and
 * at most max_rows rows. */
static void block_shape(int G, int q_len, int max_rows, int *nh, int *nq) {
    *nh = G < max_rows ? G : max_rows;
    int n = max_rows / *nh;
    *nq = n < q_len ? n : q_len;
}

/* Writes O = acc / l and LSE = m + log l for the rows of a finished block,
 * in IEEE arithmetic (qkv/attn.h, "Non-finite numbers"): l is NaN after a NaN or
 * +inf score and 0 when every visible key scored -inf, and both propagate.
 * Only a row that sees no key at all is written as masked: O = 0, LSE = -inf. */
static void write_rows(float *o, float *lse, const attn_problem *P, const attn_rows *rows,
                       const attn_scratch *ws) {
    const int D = P->head_dim;
    for (int t = 0; t < rows->nq; t++) {
        const int i = rows->i0 + t;
        const int sees = attn_row_sees_any(P->mask, &P->ex, P->kv_len, P->kv_len - P->q_len + i);
        for (int hl = 0; hl < rows->nh; hl++) {
            int h = rows->kvh * P->group + rows->h0 + hl;
            int r = hl * rows->nq + t;
            size_t row = (size_t)h * P->q_len + i;
            float l = ws->l[r];
            float *out = o + row * D;
            if (sees) {
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

typedef struct {
    float *o, *lse;
    const attn_problem *P;
    attn_rows_fn rows_fn;
    attn_scratch *ws;       /* [threads] */
    int nh, nq, n_hchunk, n_qblock;
} flash_call;

static void flash_item(void *ctx, int64_t it, int thread) {
    const flash_call *c = ctx;
    const attn_problem *P = c->P;
    /* last query blocks first: under a causal mask they cost the most */
    int qb = c->n_qblock - 1 - (int)(it % c->n_qblock);
    int64_t rest = it / c->n_qblock;
    attn_rows rows;
    rows.kvh = (int)(rest / c->n_hchunk);
    rows.h0 = (int)(rest % c->n_hchunk) * c->nh;
    rows.nh = P->group - rows.h0 < c->nh ? P->group - rows.h0 : c->nh;
    rows.i0 = qb * c->nq;
    rows.nq = P->q_len - rows.i0 < c->nq ? P->q_len - rows.i0 : c->nq;
    c->rows_fn(P, &rows, 0, P->kv_len, &c->ws[thread]);
    write_rows(c->o, c->lse, P, &rows, &c->ws[thread]);
}

void attn_flash(float *o, float *lse, const attn_problem *P_in, int n_threads, attn_rows_fn rows_fn,
                attn_scratch *ws) {
    attn_problem Pc = *P_in, *P = &Pc;
    Pc.kv_f32_copy = 1;
    /* rows_fn: flash-bf16's, which keeps ATTN_BLOCK_ROWS (internal.h), or NULL for the f32 block path */
    const int max_rows = rows_fn ? ATTN_BLOCK_ROWS : attn_flash_block_rows(P);
    flash_call c = {.o = o, .lse = lse, .P = P, .rows_fn = rows_fn ? rows_fn : attn_isa_best()->rows, .ws = ws};
    block_shape(P->group, P->q_len, max_rows, &c.nh, &c.nq);
    c.n_hchunk = (P->group + c.nh - 1) / c.nh;
    c.n_qblock = (P->q_len + c.nq - 1) / c.nq;
    const int64_t n_items = (int64_t)P->n_kv_head * c.n_hchunk * c.n_qblock;
    /* no more threads than items, and none for less than FLASH_MIN_FLOPS of work */
    const double flops = 4.0 * P->head_dim * P->n_q_head * (double)P->q_len * P->kv_len;
    if (n_threads > n_items) n_threads = (int)n_items;
    if (n_threads > 1 && flops / n_threads < FLASH_MIN_FLOPS) n_threads = flops / FLASH_MIN_FLOPS > 1 ? (int)(flops / FLASH_MIN_FLOPS) : 1;
    for (int t = 0; t < n_threads; t++) ws[t].kvf.kvh = -1; /* K and V are this call's */
    util_parallel_for(n_items, n_threads, 1, flash_item, &c);
}
