/*
 * decode.c — flash-decoding for 1 <= Lq <= 8 against a long KV: with so few
 * query rows the prefill grid has too few blocks to occupy the cores, so the
 * keys are split into chunks, each thread runs the same online-softmax inner
 * loop on its chunk, and the partial results are merged by their LSE:
 *   M = max_s m_s,  l = sum_s l_s exp(m_s - M),  O = sum_s acc_s exp(m_s - M) / l,
 *   LSE = M + log l   (Dao et al., "Flash-Decoding for long-context inference", 2023).
 * A split that saw no visible key has l_s = 0 and m_s = -inf and drops out;
 * whether a row is fully masked is decided by its mask, not by M (qkv/attn.h,
 * "Non-finite numbers").
 */
#include "attn/internal.h"

#include <math.h>
#include <string.h>

#define DECODE_MIN_SPLIT 512 /* keys: below this a split costs more to merge than it saves */
/* KV bytes per thread below which another thread costs more than it brings:
 * ~20 us of streaming, against a parallel region's wake-up and barrier (and,
 * on a loaded machine, waiting for a descheduled worker). */
#define DECODE_MIN_BYTES_PER_THREAD (256 << 10)

/* How a call is cut: groups of rows (query heads of one KV head x Lq) times
 * splits of the keys. */
typedef struct {
    int nh, n_hchunk, n_groups, key_end, n_threads, n_split, split_len, rows_max;
} decode_layout;

static void layout_of(decode_layout *L, const attn_problem *P, int n_threads) {
    const int Lq = P->q_len;
    L->nh = ATTN_BLOCK_ROWS / Lq;
    if (L->nh > P->group) L->nh = P->group;
    L->n_hchunk = (P->group + L->nh - 1) / L->nh;
    L->n_groups = P->n_kv_head * L->n_hchunk;
    L->rows_max = L->nh * Lq;

    /* keys any row can see: [0, key_end) */
    L->key_end = attn_key_end(P->mask, P->kv_len, P->kv_len - 1);
    const double kv_bytes = 2.0 * P->n_kv_head * L->key_end * P->head_dim * qkv_dtype_size(P->kv_dtype);
    int max_threads = (int)(kv_bytes / DECODE_MIN_BYTES_PER_THREAD);
    if (n_threads > max_threads) n_threads = max_threads > 1 ? max_threads : 1;
    L->n_threads = n_threads;
    /* Splits: at least 4 items per thread, in a multiple of the thread count
     * (so dynamic scheduling ends with every thread busy), none shorter than
     * the minimum. Llama-3.1-8B (8 KV heads) on 2 threads: 8 items, one per
     * KV head; SmolLM2 (3): 4 splits each, 12 items. */
    int n_split = (4 * n_threads + L->n_groups - 1) / L->n_groups;
    while ((L->n_groups * n_split) % n_threads) n_split++;
    int max_split = (L->key_end + DECODE_MIN_SPLIT - 1) / DECODE_MIN_SPLIT;
    if (n_split > max_split) n_split = max_split;
    if (n_split < 1) n_split = 1;
    int split_len = (L->key_end + n_split - 1) / n_split;
    split_len = (split_len + ATTN_BK - 1) / ATTN_BK * ATTN_BK;
    if (split_len < ATTN_BK) split_len = ATTN_BK;
    L->split_len = split_len;
    L->n_split = L->key_end > 0 ? (L->key_end + split_len - 1) / split_len : 1;
}

size_t attn_decode_part_floats(const attn_problem *P, int n_threads) {
    decode_layout L;
    layout_of(&L, P, n_threads);
    return (size_t)L.n_groups * L.n_split * L.rows_max * ((size_t)P->ld + 2);
}

/* A bound for layout_of over every problem within the maxima: groups x rows
 * per group = Hkv * ceil(G / nh) * nh * Lq < 2 * Hq * Lq; splits <= the
 * minimum count's, ceil(Lk / DECODE_MIN_SPLIT), and <= 5 * threads (4 per
 * thread, then at most threads - 1 more to reach a multiple). */
size_t attn_decode_part_bound(int max_q_head, int max_q_len, int max_kv_len, int ld, int n_threads) {
    const size_t Lq = max_q_len < QKV_DECODE_MAX_Q ? (size_t)max_q_len : QKV_DECODE_MAX_Q;
    size_t splits = ((size_t)max_kv_len + DECODE_MIN_SPLIT - 1) / DECODE_MIN_SPLIT;
    if (splits > 5 * (size_t)n_threads) splits = 5 * (size_t)n_threads;
    if (splits < 1) splits = 1;
    return 2 * (size_t)max_q_head * Lq * splits * ((size_t)ld + 2);
}

typedef struct {
    const attn_problem *P;
    const decode_layout *L;
    const attn_isa *isa;
    attn_scratch *ws;   /* [threads] */
    float *part;        /* [n_groups, n_split, rows_max] of (m, l, acc[ld]) */
} decode_call;

static void decode_item(void *ctx, int64_t it, int thread) {
    const decode_call *c = ctx;
    const attn_problem *P = c->P;
    const decode_layout *L = c->L;
    const int Lq = P->q_len, ld = P->ld;
    const size_t stride = (size_t)ld + 2;
    attn_scratch *ws = &c->ws[thread];
    int g = (int)(it / L->n_split), s = (int)(it % L->n_split);
    attn_rows rows;
    rows.kvh = g / L->n_hchunk;
    rows.h0 = (g % L->n_hchunk) * L->nh;
    rows.nh = P->group - rows.h0 < L->nh ? P->group - rows.h0 : L->nh;
    rows.i0 = 0;
    rows.nq = Lq;
    int j0 = s * L->split_len, j1 = j0 + L->split_len < L->key_end ? j0 + L->split_len : L->key_end;
    c->isa->rows(P, &rows, j0, j1, ws);
    float *dst = c->part + ((size_t)g * L->n_split + s) * L->rows_max * stride;
    for (int r = 0; r < rows.nh * Lq; r++) {
        dst[r * stride] = ws->m[r];
        dst[r * stride + 1] = ws->l[r];
        memcpy(dst + r * stride + 2, ws->acc + (size_t)r * ld, (size_t)ld * sizeof(float));
    }
}

void attn_decode(float *o, float *lse, const attn_problem *P, int n_threads, attn_scratch *ws, float *part) {
    const int D = P->head_dim, Lq = P->q_len;
    decode_layout L;
    layout_of(&L, P, n_threads);
    const int nh = L.nh, n_split = L.n_split, rows_max = L.rows_max;
    const size_t stride = (size_t)P->ld + 2;
    decode_call c = {.P = P, .L = &L, .isa = attn_isa_best(), .ws = ws, .part = part};
    util_parallel_for((int64_t)L.n_groups * n_split, L.n_threads, 1, decode_item, &c);

    /* merge the splits of every row by LSE */
    for (int g = 0; g < L.n_groups; g++) {
        int kvh = g / L.n_hchunk, h0 = (g % L.n_hchunk) * nh;
        int nhg = P->group - h0 < nh ? P->group - h0 : nh;
        for (int r = 0; r < nhg * Lq; r++) {
            int h = kvh * P->group + h0 + r / Lq, i = r % Lq;
            size_t row = (size_t)h * Lq + i;
            const float *first = part + (size_t)g * n_split * rows_max * stride + (size_t)r * stride;
            float M = -INFINITY;
            for (int s = 0; s < n_split; s++) M = fmaxf(M, first[(size_t)s * rows_max * stride]);
            float *out = o + row * D;
            /* masked only when the row sees no key: a visible key scoring -inf
             * leaves M = -inf too (then l = 0 and O = 0/0 = NaN, IEEE) */
            if (!attn_row_sees_any(P->mask, &P->ex, P->kv_len, P->kv_len - Lq + i)) {
                memset(out, 0, (size_t)D * sizeof(float));
                if (lse) lse[row] = -INFINITY;
                continue;
            }
            float l = 0;
            for (int d = 0; d < D; d++) out[d] = 0;
            for (int s = 0; s < n_split; s++) {
                const float *p = first + (size_t)s * rows_max * stride;
                if (p[1] == 0) continue; /* a split without a key of nonzero weight */
                float w = expf(p[0] - M);
                l += p[1] * w;
                for (int d = 0; d < D; d++) out[d] += p[2 + d] * w;
            }
            float inv = 1.0f / l;
            for (int d = 0; d < D; d++) out[d] *= inv;
            if (lse) lse[row] = M + logf(l);
        }
    }
}
