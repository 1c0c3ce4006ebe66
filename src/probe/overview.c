/*
 * overview.c — the max-pooled overview of every head's whole attention map
 * (qkv_overview_*, include/qkv/probe.h), filled by a hook on hook_pattern
 * as the forward calls append rows; no n x n table is held, and no weight
 * is exponentiated one by one:
 *   cell(a, b) = max over queries i in block a, keys j in block b of
 *                exp(s_ij - lse_i) = max over i of exp(max_j s_ij - lse_i)
 * (exp is increasing), s_ij the score the kernel softmaxed (scale q.k, then
 * c tanh(s / c) if soft-capped: increasing too, so it is applied to the
 * max). Per call and head, each query block is one item of the parallel
 * loop (no two items write a cell), its rows in chunks of OV_ROWS against
 * key tiles of OV_KEYS: the tile's scores come from overview_tile (one
 * kernel per ISA, overview_impl.h; the chunk's queries transposed once,
 * each tile's keys converted from the cache's dtype once per chunk), and the
 * max runs across the rows' lanes, one key at a time.
 */
#include "probe/overview_tile.h"
#include "qkv/probe.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OV_MAX_BINS 4096

struct qkv_overview {
    int n_layer, n_head, head_dim, max_bins;
    int block, shift;       /* positions per cell side: block = 1 << shift */
    int n;                  /* positions pooled: one past the last row */
    int n_threads;          /* the scratch's */
    size_t thread_floats;   /* scratch floats per thread */
    float *grid;            /* [L, Hq, max_bins, max_bins] the cells, 0 where no row reached */
    float *scratch;         /* [n_threads, thread_floats]: a thread's buffers (thread_bufs) */
};

/* One thread's buffers, carved from its scratch. */
typedef struct {
    float *qt;      /* [D, OV_ROWS] the chunk's queries transposed, zero columns past the chunk */
    float *k;       /* [OV_KEYS, D] the tile's keys as f32, zero rows past the tile */
    float *s;       /* [OV_KEYS, OV_ROWS] scores before the scale */
    float *rowmax;  /* [max_bins, OV_ROWS] per key block and row the largest scaled score */
    float *best;    /* [max_bins] per key block the largest (score - lse) over the item's rows */
} thread_bufs;

static thread_bufs bufs_of(const qkv_overview *o, int thread) {
    const size_t D = (size_t)o->head_dim, B = (size_t)o->max_bins;
    float *p = o->scratch + (size_t)thread * o->thread_floats;
    thread_bufs b;
    b.qt = p, p += D * OV_ROWS;
    b.k = p, p += (size_t)OV_KEYS * D;
    b.s = p, p += (size_t)OV_KEYS * OV_ROWS;
    b.rowmax = p, p += B * OV_ROWS;
    b.best = p;
    return b;
}

/* ------------------------------------------------------------- kernels */

void overview_tile_reference(float *s, const float *qt, const float *k, int D) {
    for (int j = 0; j < OV_KEYS; j++)
        for (int r = 0; r < OV_ROWS; r++) {
            float acc = 0;
            for (int d = 0; d < D; d++) acc += qt[(size_t)d * OV_ROWS + r] * k[(size_t)j * D + d];
            s[(size_t)j * OV_ROWS + r] = acc;
        }
}

/* indexed by cpu_isa (util/cpu.h): the same choice as attention's and the matmuls' */
static const overview_isa isas[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = {overview_tile_scalar, overview_keys_scalar},
    [CPU_ISA_AVX2] = {overview_tile_avx2, overview_keys_avx2},
    [CPU_ISA_AVX512] = {overview_tile_avx512, overview_keys_avx512},
};

const overview_isa *overview_isa_best(void) { return &isas[cpu_isa_chosen()]; }

/* ------------------------------------------------------------ lifetime */

qkv_status qkv_overview_init(qkv_overview **out, const qkv_model_config *cfg, int max_bins, qkv_error *err) {
    if (!out || !cfg) return util_fail(err, QKV_ERR_INVALID, "overview: a NULL argument");
    *out = NULL;
    if (max_bins < 1 || max_bins > OV_MAX_BINS)
        return util_fail(err, QKV_ERR_INVALID, "overview: max_bins %d outside [1, %d]", max_bins, OV_MAX_BINS);
    if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->head_dim < 1 || cfg->head_dim > QKV_HEAD_DIM_MAX)
        return util_fail(err, QKV_ERR_INVALID, "overview: a config of %d layers, %d heads of %d", cfg->n_layer,
                        cfg->n_head, cfg->head_dim);
    qkv_overview *o = calloc(1, sizeof *o);
    if (!o) return util_fail(err, QKV_ERR_NOMEM, "overview: out of memory");
    *o = (qkv_overview){.n_layer = cfg->n_layer, .n_head = cfg->n_head, .head_dim = cfg->head_dim,
                        .max_bins = max_bins, .block = 1, .n_threads = qkv_cpu_count()};
    const size_t D = (size_t)cfg->head_dim, B = (size_t)max_bins;
    o->thread_floats = D * OV_ROWS + OV_KEYS * D + OV_KEYS * OV_ROWS + B * OV_ROWS + B;
    o->grid = calloc((size_t)cfg->n_layer * cfg->n_head * B * B, sizeof *o->grid);
    o->scratch = malloc((size_t)o->n_threads * o->thread_floats * sizeof *o->scratch);
    if (!o->grid || !o->scratch) {
        qkv_overview_free(o);
        return util_fail(err, QKV_ERR_NOMEM, "overview: out of memory for %d layers x %d heads x %d^2 cells",
                        cfg->n_layer, cfg->n_head, max_bins);
    }
    *out = o;
    return QKV_OK;
}

void qkv_overview_free(qkv_overview *o) {
    if (!o) return;
    free(o->grid);
    free(o->scratch);
    free(o);
}

void qkv_overview_clear(qkv_overview *o) {
    memset(o->grid, 0, (size_t)o->n_layer * o->n_head * o->max_bins * o->max_bins * sizeof *o->grid);
    o->block = 1, o->shift = 0, o->n = 0;
}

size_t qkv_overview_bytes(const qkv_overview *o) {
    return ((size_t)o->n_layer * o->n_head * o->max_bins * o->max_bins + (size_t)o->n_threads * o->thread_floats) *
           sizeof(float);
}

/* Doubles the block: cell (a, b) <- the max of old cells (2a .. 2a+1, 2b ..
 * 2b+1). In place, ascending: every old cell is read before a new one
 * overwrites it (old (a, b) is read for new (a/2, b/2), which comes first). */
static void grow(qkv_overview *o) {
    const int B = o->max_bins, half = (B + 1) / 2;
    for (size_t g = 0; g < (size_t)o->n_layer * o->n_head; g++) {
        float *c = o->grid + g * B * B;
        for (int a = 0; a < B; a++)
            for (int b = 0; b < B; b++) {
                float m = 0;
                for (int da = 0; da < 2 && a < half; da++)
                    for (int db = 0; db < 2 && b < half; db++)
                        if (2 * a + da < B && 2 * b + db < B && c[(2 * a + da) * B + 2 * b + db] > m)
                            m = c[(2 * a + da) * B + 2 * b + db];
                c[a * B + b] = m;
            }
    }
    o->block *= 2;
    o->shift++;
}

/* ------------------------------------------------------------- pooling */

/* One head of one hook_pattern call. Rows are the call's (i < n), keys the
 * cache's rows (j < kv_len, position key0 + j); row i sits at cache row
 * kv_len - n + i (qkv_mask's bottom-right alignment). */
typedef struct {
    qkv_overview *o;
    const qkv_attn_desc *d;     /* the head's (its exclusions included) */
    const float *q, *lse;       /* [n, D] and [n] of this head */
    const void *k;              /* [kv_len, D] this head's KV head, in d->kv_dtype */
    float *cells;               /* [max_bins, max_bins] of (layer, head) */
    const overview_isa *isa;
    int n, pos0, key0, kb0;     /* kb0: the first query block the call reaches */
    int plain;                  /* causal or window, no exclusions: visible keys are one range per row */
    float scale;
} pool_call;

/* The cache rows row i may see: [*lo, *hi] (every key's mask still checked
 * when !plain). */
static void row_range(const pool_call *c, int i, int *lo, int *hi) {
    const qkv_attn_desc *d = c->d;
    const int p = d->kv_len - d->q_len + i;
    *hi = d->mask.kind == QKV_MASK_NONE ? d->kv_len - 1 : p;
    *lo = d->mask.kind == QKV_MASK_WINDOW && p - d->mask.window + 1 > 0 ? p - d->mask.window + 1 : 0;
}

/* Rows [r0, r0 + nr) of the call (nr <= OV_ROWS): each row's largest scaled
 * score per key block into b->rowmax, then per block the largest score -
 * lse into b->best. */
static void pool_chunk(const pool_call *c, const thread_bufs *b, int r0, int nr) {
    const int D = c->d->head_dim, Lq = c->d->q_len, Lk = c->d->kv_len, shift = c->o->shift;
    const size_t es = qkv_dtype_size(c->d->kv_dtype);
    int lo[OV_ROWS], hi[OV_ROWS], lo_all = Lk, hi_all = -1;
    for (int r = 0; r < OV_ROWS; r++) { /* a row past the chunk sees nothing */
        lo[r] = Lk, hi[r] = -1;
        if (r < nr) row_range(c, r0 + r, &lo[r], &hi[r]);
        lo_all = lo[r] < lo_all ? lo[r] : lo_all;
        hi_all = hi[r] > hi_all ? hi[r] : hi_all;
    }
    for (int i = 0; i < (((c->key0 + hi_all) >> shift) + 1) * OV_ROWS; i++) b->rowmax[i] = -INFINITY;
    for (int d = 0; d < D; d++) /* qt[d, r] = q[r0 + r, d] */
        for (int r = 0; r < OV_ROWS; r++) b->qt[(size_t)d * OV_ROWS + r] = r < nr ? c->q[(size_t)(r0 + r) * D + d] : 0;
    for (int j0 = lo_all; j0 <= hi_all; j0 += OV_KEYS) {
        const int nk = hi_all + 1 - j0 < OV_KEYS ? hi_all + 1 - j0 : OV_KEYS;
        c->isa->keys(b->k, (const char *)c->k + (size_t)j0 * D * es, c->d->kv_dtype, (size_t)nk * D);
        memset(b->k + (size_t)nk * D, 0, (size_t)(OV_KEYS - nk) * D * sizeof(float));
        c->isa->tile(b->s, b->qt, b->k, D);
        for (int j = 0; j < nk; j++) {
            const int key = j0 + j;
            float *rm = b->rowmax + (size_t)((c->key0 + key) >> shift) * OV_ROWS;
            const float *sj = b->s + (size_t)j * OV_ROWS;
            if (c->plain) { /* one range per row: a select and a max, lane by lane */
                for (int r = 0; r < OV_ROWS; r++) {
                    const float v = key >= lo[r] && key <= hi[r] ? sj[r] * c->scale : -INFINITY;
                    rm[r] = v > rm[r] ? v : rm[r];
                }
                continue;
            }
            for (int r = 0; r < nr; r++)
                if (key >= lo[r] && key <= hi[r] && qkv_mask_visible(&c->d->mask, Lq, Lk, r0 + r, key) &&
                    sj[r] * c->scale > rm[r])
                    rm[r] = sj[r] * c->scale;
        }
    }
    for (int r = 0; r < nr; r++) {
        const float l = c->lse[r0 + r];
        if (l == -INFINITY) continue; /* a row that saw no key: weight 0 everywhere */
        for (int kb = 0; kb <= (c->key0 + hi[r]) >> shift; kb++) {
            const float m = b->rowmax[(size_t)kb * OV_ROWS + r];
            if (m == -INFINITY) continue;
            const float sc = c->d->softcap > 0 ? c->d->softcap * tanhf(m / c->d->softcap) : m;
            if (sc - l > b->best[kb]) b->best[kb] = sc - l;
        }
    }
}

/* Item: query block kb0 + item, the call's rows in it, in chunks. */
static void pool_block(void *ctx, int64_t item, int thread) {
    const pool_call *c = ctx;
    const int qb = c->kb0 + (int)item, shift = c->o->shift, B = c->o->max_bins;
    const thread_bufs b = bufs_of(c->o, thread);
    const int first = (qb << shift) > c->pos0 ? (qb << shift) - c->pos0 : 0;
    const int last = ((qb + 1) << shift) - c->pos0 < c->n ? ((qb + 1) << shift) - c->pos0 : c->n; /* rows [first, last) */
    for (int kb = 0; kb < B; kb++) b.best[kb] = -INFINITY;
    for (int r0 = first; r0 < last; r0 += OV_ROWS) pool_chunk(c, &b, r0, last - r0 < OV_ROWS ? last - r0 : OV_ROWS);
    float *cell = c->cells + (size_t)qb * B;
    for (int kb = 0; kb < B; kb++)
        if (b.best[kb] > -INFINITY) {
            const float w = expf(b.best[kb]);
            if (w > cell[kb]) cell[kb] = w;
        }
}

qkv_status qkv_overview_hook(void *user, const qkv_activation *a, qkv_error *err) {
    qkv_overview *o = user;
    if (!o || !a || a->point != QKV_HOOK_PATTERN || !a->attn)
        return util_fail(err, QKV_ERR_INVALID, "overview: not a hook_pattern activation");
    if (a->layer < 0 || a->layer >= o->n_layer || a->shape[0] != o->n_head)
        return util_fail(err, QKV_ERR_INVALID, "overview: layer %d with %lld heads, the overview's are %d x %d",
                        a->layer, (long long)a->shape[0], o->n_layer, o->n_head);
    const qkv_attn_view *v = a->attn;
    const qkv_attn_desc *vd = qkv_attn_view_desc(v);
    if (vd->head_dim != o->head_dim)
        return util_fail(err, QKV_ERR_INVALID, "overview: heads of %d, the overview's are of %d", vd->head_dim,
                        o->head_dim);
    const int n = (int)a->shape[1], end = a->pos0 + n;
    while ((int64_t)end > (int64_t)o->block * o->max_bins) grow(o);
    if (end > o->n) o->n = end;
    const int group = vd->n_q_head / vd->n_kv_head, D = vd->head_dim;
    const int64_t stride = vd->kv_head_stride ? vd->kv_head_stride : (int64_t)vd->kv_len * D;
    const int first_block = a->pos0 >> o->shift, blocks = ((end - 1) >> o->shift) - first_block + 1;
    int nt = vd->n_threads > 0 ? vd->n_threads : qkv_cpu_count();
    if (nt > o->n_threads) nt = o->n_threads;
    for (int h = 0; h < o->n_head; h++) {
        qkv_attn_desc d;
        qkv_status st = qkv_attn_view_head_desc(&d, v, h, err);
        if (st) return st;
        const pool_call c = {
            .o = o, .d = &d, .q = qkv_attn_view_q(v) + (size_t)h * n * D, .lse = qkv_attn_view_lse(v) + (size_t)h * n,
            .k = (const char *)qkv_kv_cache_k(qkv_attn_view_cache(v)) + (size_t)(h / group) * stride *
                                                                            qkv_dtype_size(d.kv_dtype),
            .cells = o->grid + ((size_t)a->layer * o->n_head + h) * o->max_bins * o->max_bins,
            .isa = overview_isa_best(), .n = n, .pos0 = a->pos0, .key0 = qkv_attn_view_key0(v),
            .kb0 = first_block,
            .plain = (d.mask.kind == QKV_MASK_CAUSAL || d.mask.kind == QKV_MASK_WINDOW) && d.mask.n_exclude == 0,
            .scale = d.scale > 0 ? d.scale : 1.0f / sqrtf((float)D)};
        util_parallel_for(blocks, blocks > 1 ? nt : 1, 1, pool_block, (void *)&c);
    }
    return QKV_OK;
}

int qkv_overview_get(const qkv_overview *o, float *out, int layer, int head, int n, int *block) {
    if (!o || !out || layer < 0 || layer >= o->n_layer || head < 0 || head >= o->n_head || n < 1 ||
        (int64_t)n > (int64_t)o->block * o->max_bins)
        return -1;
    const int bins = (n + o->block - 1) / o->block, B = o->max_bins;
    const float *cells = o->grid + ((size_t)layer * o->n_head + head) * B * B;
    for (int a = 0; a < bins; a++) memcpy(out + (size_t)a * bins, cells + (size_t)a * B, (size_t)bins * sizeof *out);
    if (block) *block = o->block;
    return bins;
}
