/*
 * block.c — one key block against a run of query rows, each at its global
 * position. libqkv's kernels align the causal mask bottom-right (row t of a
 * call at position kv_len - q_len + t), so a block is cut into kernel runs
 * whose q_len and kv_len put every row where it belongs; the mask is never
 * materialised. For rows i at block-relative positions p_i = delta + i
 * against keys 0 .. m-1, a window of W keys (W = infinity for causal) shows
 * row i the keys [p_i - W + 1, p_i] ∩ [0, m), and the rows fall into:
 *   A  0 <= p_i <= m-1:  the row's own key is in the block. One run: rows
 *      a0 .. a1-1, keys 0 .. p_{a1-1} (kv_len - q_len = delta + a0), the
 *      kernel's causal or window rule.
 *   B  p_i >= m, p_i - W + 1 <= 0: every key. One run, no mask.
 *   C  p_i >= m, 0 < p_i - W + 1 <= m-1: a suffix of the block. The kernel's
 *      rule cannot end a window before kv_len, so one run per row on keys
 *      p_i - W + 1 .. m-1, no mask (at most min(m, W) rows of a block).
 *   other rows see nothing in this block.
 * Sinks + window (StreamingLLM) is the window part above plus the sinks
 * outside the window: keys j < S with j <= p_i - W, which is the causal rule
 * shifted by W on the block's first min(m, S - kpos) keys. The two key sets
 * are disjoint, so their partials merge exactly. Exclusions (global key
 * indices) are passed to each run in its own key indices.
 */
#include "internal.h"

#include <string.h>

#define NO_WINDOW ((int64_t)1 << 40)

int cp_block_visible(const qkv_mask *mask, int64_t qpos, int n, int64_t kpos, int m) {
    const int64_t p0 = qpos, p1 = qpos + n - 1, k1 = kpos + m - 1;
    switch (mask->kind) {
    case QKV_MASK_NONE: return 1;
    case QKV_MASK_CAUSAL: return kpos <= p1;
    case QKV_MASK_WINDOW: return kpos <= p1 && k1 > p0 - mask->window;
    case QKV_MASK_SINK_WINDOW:
        return (kpos <= p1 && k1 > p0 - mask->window) || (kpos < mask->sinks && kpos <= p1);
    }
    return 1;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* One kernel run: local rows [r0, r0 + n) against block rows [j0, j0 + len)
 * (global key positions kpos .. kpos + len - 1) under rule kind / window in
 * the run's own bottom-right alignment; merged into b->o, b->lse. */
static qkv_status run(cp_block *b, int r0, int n, const void *k, const void *v, int k_rows, int j0, int len,
                      int64_t kpos, qkv_mask_kind kind, int window, qkv_error *err) {
    const qkv_attn_desc *g = b->g;
    const int hq = g->n_q_head, d = g->head_dim;
    const size_t es = qkv_dtype_size(g->kv_dtype);
    int n_excl = 0;
    for (int e = 0; e < g->mask.n_exclude; e++) {
        const int64_t j = g->mask.exclude[e] - kpos;
        if (j >= 0 && j < len) b->excl_tmp[n_excl++] = (int)j;
    }
    const int whole = r0 == 0 && n == b->q_rows;
    const float *q = b->q;
    if (!whole) {
        for (int h = 0; h < hq; h++)
            memcpy(b->q_tmp + (int64_t)h * n * d, b->q + ((int64_t)h * b->q_rows + r0) * d, (size_t)n * d * sizeof(float));
        q = b->q_tmp;
    }
    const qkv_attn_desc rd = {.n_q_head = hq, .n_kv_head = g->n_kv_head, .q_len = n, .kv_len = len, .head_dim = d,
                              .scale = g->scale, .softcap = g->softcap,
                              .mask = {.kind = kind, .window = window, .exclude = b->excl_tmp, .n_exclude = n_excl},
                              .kv_dtype = g->kv_dtype, .kv_head_stride = (int64_t)k_rows * d, .n_threads = g->n_threads};
    const char *kb = (const char *)k + (size_t)j0 * d * es, *vb = (const char *)v + (size_t)j0 * d * es;
    qkv_status st = qkv_attn_run(b->plan, b->o_tmp, b->lse_tmp, q, kb, vb, &rd, err);
    if (st) return st;
    for (int h = 0; h < hq; h++)
        cp_merge_rows(b->o + ((int64_t)h * b->q_rows + r0) * d, b->lse + (int64_t)h * b->q_rows + r0,
                      b->o_tmp + (int64_t)h * n * d, b->lse_tmp + (int64_t)h * n, n, d);
    if (b->n_pending) { /* let the ring's transfers progress between runs */
        int flag;
        MPI_Testall(b->n_pending, b->pending, &flag, MPI_STATUSES_IGNORE);
    }
    return QKV_OK;
}

/* Rows i in [0, n) at block-relative positions delta + i against block keys
 * [0, m) (block rows kj0 ..), window W (NO_WINDOW: causal): classes A, B, C. */
static qkv_status band(cp_block *b, int r0, int n, int64_t delta, const void *k, const void *v, int k_rows, int kj0,
                       int m, int64_t kpos, int64_t W, qkv_error *err) {
    qkv_status st = QKV_OK;
    const qkv_mask_kind rule = W == NO_WINDOW ? QKV_MASK_CAUSAL : QKV_MASK_WINDOW;
    const int64_t a0 = max64(0, -delta), a1 = min64(n, m - delta);
    if (a0 < a1)
        st = run(b, r0 + (int)a0, (int)(a1 - a0), k, v, k_rows, kj0, (int)(delta + a1), kpos, rule,
                 rule == QKV_MASK_WINDOW ? (int)W : 0, err);
    const int64_t b0 = max64(0, m - delta), b1 = min64(n, W - delta);
    if (!st && b0 < b1) st = run(b, r0 + (int)b0, (int)(b1 - b0), k, v, k_rows, kj0, m, kpos, QKV_MASK_NONE, 0, err);
    const int64_t c0 = max64(max64(0, m - delta), W - delta), c1 = min64(n, m + W - 1 - delta);
    for (int64_t i = c0; !st && i < c1; i++) {
        const int64_t lo = delta + i - W + 1;
        st = run(b, r0 + (int)i, 1, k, v, k_rows, kj0 + (int)lo, m - (int)lo, kpos + lo, QKV_MASK_NONE, 0, err);
    }
    return st;
}

qkv_status cp_block_attend(cp_block *b, int r0, int n, int64_t qpos, const void *k, const void *v, int k_rows, int kj0,
                           int m, int64_t kpos, qkv_error *err) {
    const qkv_mask *mk = &b->g->mask;
    const int64_t delta = qpos - kpos;
    switch (mk->kind) {
    case QKV_MASK_NONE: return run(b, r0, n, k, v, k_rows, kj0, m, kpos, QKV_MASK_NONE, 0, err);
    case QKV_MASK_CAUSAL: return band(b, r0, n, delta, k, v, k_rows, kj0, m, kpos, NO_WINDOW, err);
    case QKV_MASK_WINDOW: return band(b, r0, n, delta, k, v, k_rows, kj0, m, kpos, mk->window, err);
    case QKV_MASK_SINK_WINDOW: {
        qkv_status st = band(b, r0, n, delta, k, v, k_rows, kj0, m, kpos, mk->window, err);
        const int64_t ns = min64(m, max64(0, mk->sinks - kpos));
        if (!st && ns > 0) st = band(b, r0, n, delta - mk->window, k, v, k_rows, kj0, (int)ns, kpos, NO_WINDOW, err);
        return st;
    }
    }
    return util_fail(err, QKV_ERR_INVALID, "context parallel: unknown mask kind %d", (int)mk->kind);
}
