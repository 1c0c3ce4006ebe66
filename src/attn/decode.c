/*
 * decode.c — flash-decoding for 1 <= Lq <= 8 against a long KV: with so few
 * query rows the prefill grid has too few blocks to occupy the cores, so the
 * keys are split into chunks, each thread runs the same online-softmax inner
 * loop on its chunk, and the partial results are merged by their LSE:
 *   M = max_s m_s,  l = sum_s l_s exp(m_s - M),  O = sum_s acc_s exp(m_s - M) / l,
 *   LSE = M + log l   (Dao et al., "Flash-Decoding for long-context inference", 2023).
 * A split that saw no visible key has l_s = 0 and m_s = -inf and drops out.
 */
#include "attn/internal.h"

#include <math.h>
#include <string.h>

#define DECODE_MIN_SPLIT 512 /* keys: below this a split costs more to merge than it saves */
/* KV bytes per thread below which another thread costs more than it brings:
 * ~20 us of streaming, against a parallel region's wake-up and barrier (and,
 * on a loaded machine, waiting for a descheduled worker). */
#define DECODE_MIN_BYTES_PER_THREAD (256 << 10)

qkv_status attn_decode(float *o, float *lse, const attn_problem *P, int n_threads, qkv_error *err) {
    const attn_isa *isa = attn_isa_best();
    const int D = P->head_dim, ld = P->ld, Lq = P->q_len;
    int nh = ATTN_MAX_ROWS / Lq;
    if (nh > P->group) nh = P->group;
    const int n_hchunk = (P->group + nh - 1) / nh;
    const int n_groups = P->n_kv_head * n_hchunk;

    /* keys any row can see: [0, key_end) */
    const int key_end = attn_key_end(P->mask, P->kv_len, P->kv_len - 1);
    const double kv_bytes = 2.0 * P->n_kv_head * key_end * D * qkv_dtype_size(P->kv_dtype);
    int max_threads = (int)(kv_bytes / DECODE_MIN_BYTES_PER_THREAD);
    if (n_threads > max_threads) n_threads = max_threads > 1 ? max_threads : 1;
    /* Splits: at least 4 items per thread, in a multiple of the thread count
     * (so dynamic scheduling ends with every thread busy), none shorter than
     * the minimum. Llama-3.1-8B (8 KV heads) on 2 threads: 8 items, one per
     * KV head; SmolLM2 (3): 4 splits each, 12 items. */
    int n_split = (4 * n_threads + n_groups - 1) / n_groups;
    while ((n_groups * n_split) % n_threads) n_split++;
    int max_split = (key_end + DECODE_MIN_SPLIT - 1) / DECODE_MIN_SPLIT;
    if (n_split > max_split) n_split = max_split;
    if (n_split < 1) n_split = 1;
    int split_len = (key_end + n_split - 1) / n_split;
    split_len = (split_len + ATTN_BK - 1) / ATTN_BK * ATTN_BK;
    if (split_len < ATTN_BK) split_len = ATTN_BK;
    n_split = key_end > 0 ? (key_end + split_len - 1) / split_len : 1;

    /* partials: [n_groups, n_split, rows] of (m, l, acc[ld]) */
    const int rows_max = nh * Lq;
    const size_t stride = (size_t)ld + 2;
    float *part = malloc((size_t)n_groups * n_split * rows_max * stride * sizeof(float));
    if (!part) return qkv_fail(err, QKV_ERR_NOMEM, "decode attention: cannot allocate split partials");
    const int64_t n_items = (int64_t)n_groups * n_split;
    int failed = 0;

#pragma omp parallel num_threads(n_threads)
    {
        attn_scratch ws;
        int ok = attn_scratch_init(&ws, ld, NULL) == QKV_OK;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < n_items; it++) {
            if (!ok) continue;
            int g = (int)(it / n_split), s = (int)(it % n_split);
            attn_rows rows;
            rows.kvh = g / n_hchunk;
            rows.h0 = (g % n_hchunk) * nh;
            rows.nh = P->group - rows.h0 < nh ? P->group - rows.h0 : nh;
            rows.i0 = 0;
            rows.nq = Lq;
            int j0 = s * split_len, j1 = j0 + split_len < key_end ? j0 + split_len : key_end;
            isa->rows(P, &rows, j0, j1, &ws);
            float *dst = part + ((size_t)g * n_split + s) * rows_max * stride;
            for (int r = 0; r < rows.nh * Lq; r++) {
                dst[r * stride] = ws.m[r];
                dst[r * stride + 1] = ws.l[r];
                memcpy(dst + r * stride + 2, ws.acc + (size_t)r * ld, (size_t)ld * sizeof(float));
            }
        }
        if (ok) attn_scratch_free(&ws);
    }
    if (failed) {
        free(part);
        return qkv_fail(err, QKV_ERR_NOMEM, "decode attention: cannot allocate per-thread scratch");
    }

    /* merge the splits of every row by LSE */
    for (int g = 0; g < n_groups; g++) {
        int kvh = g / n_hchunk, h0 = (g % n_hchunk) * nh;
        int nhg = P->group - h0 < nh ? P->group - h0 : nh;
        for (int r = 0; r < nhg * Lq; r++) {
            int h = kvh * P->group + h0 + r / Lq, i = r % Lq;
            size_t row = (size_t)h * Lq + i;
            const float *first = part + (size_t)g * n_split * rows_max * stride + (size_t)r * stride;
            float M = -INFINITY;
            for (int s = 0; s < n_split; s++) M = fmaxf(M, first[(size_t)s * rows_max * stride]);
            float *out = o + row * D;
            if (M == -INFINITY) {
                memset(out, 0, (size_t)D * sizeof(float));
                if (lse) lse[row] = -INFINITY;
                continue;
            }
            float l = 0;
            for (int d = 0; d < D; d++) out[d] = 0;
            for (int s = 0; s < n_split; s++) {
                const float *p = first + (size_t)s * rows_max * stride;
                if (p[1] == 0) continue;
                float w = expf(p[0] - M);
                l += p[1] * w;
                for (int d = 0; d < D; d++) out[d] += p[2 + d] * w;
            }
            float inv = 1.0f / l;
            for (int d = 0; d < D; d++) out[d] *= inv;
            if (lse) lse[row] = M + logf(l);
        }
    }
    free(part);
    return QKV_OK;
}
