/*
 * tile_impl.h — the flash inner loop, written once over a vector of VW floats
 * (GCC vector extensions) and compiled per ISA by tile_avx512.c (VW 16),
 * tile_avx2.c (VW 8), tile_scalar.c (VW 1) and tile_avx512bf16.c (VW 16 plus
 * the bf16 dot-product block path of tile_bf16dot.h), in util/simd.h's
 * vocabulary. A few primitives use the ISA's own instructions where GCC's
 * generic code is poor (simd.h's f16/bf16 widening and max; here exp and
 * the 16 x 16 and 8 x 8 transposes). Its readable
 * reference twin is reference.c; tests/test_attn_kernels.c compares them on
 * swept shapes.
 *
 * Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation
 * for softmax"; FlashAttention, Dao et al. 2022, arXiv:2205.14135), per row:
 *   invariant after each tile: m = max score seen, l = sum exp(score - m),
 *   acc = sum exp(score - m) * v.
 *   a new tile with max mx: m' = max(m, mx), alpha = exp(m - m'),
 *   l' = alpha * l + sum exp(s - m'), acc' = alpha * acc + sum exp(s - m') v.
 *   A row that has seen only masked keys has m = -inf; it subtracts 0 instead
 *   of m' (exp(-inf - -inf) would be NaN), so its p and alpha are exactly 0.
 *
 * Rows of a block are r = hl * nq + t (head-major), R of them; ld is the
 * padded row stride, BK keys per tile. Two layouts, chosen by R:
 *   - block path (R > VW / 2, prefill): queries transposed once per block
 *     and packed by row chunk, [D, RCV * VW] each (RP = R rounded up to VW
 *     rows), scores transposed st [BK, RS] (RS = RP + VW their stride), so
 *     every vector runs across rows. Q·Kᵀ is a register-tiled micro-kernel
 *     (MK keys x RCV row vectors, K broadcast from its row, no K transpose),
 *     and the softmax bookkeeping (max, rescale, sum, causal mask) is one
 *     vector operation per VW rows; the tile's row max comes out of the Q·Kᵀ
 *     registers. P·V is a second micro-kernel (MR rows x NC vectors of D)
 *     broadcasting p. K/V tiles are read in place when they are f32 or
 *     from the thread's f32 copy of the KV head (attn_kv_f32, made once by
 *     kv_f32_extend); else converted to f32 once per tile for all R rows, a
 *     few rows (K) or a column chunk (V) at a time into L1-sized buffers.
 *     The Q·Kᵀ loop prefetches the next tile.
 *   - few path (R <= VW / 2, decode): one dot product per (row, key) along D
 *     with K converted in registers, VW keys' partial vectors folded into one
 *     vector of scores by a shuffle tree; P·V converts V in registers. It
 *     streams the KV cache once, so each of them prefetches its next tile
 *     (prefetch_span).
 * Soft-capping (P->softcap = c > 0, Gemma 2): every path replaces its score
 * tile by c tanh(s / c) right after Q·Kᵀ and before the mask and the max
 * (softcap_tile, vtanh); a call without it pays one untaken branch a tile.
 * Shapes it is tuned for: Llama-3.1-8B heads (G = 4,
 * D = 128: R = 64 rows of 16 positions in prefill, 128 of 32 in wide blocks
 * (attn_flash_block_rows), R = 4 in decode) and SmolLM2 heads (G = 3,
 * D = 64: R = 63 or 126, R = 3).
 * Requires VW, SUFFIX defined by the including file.
 */
#include "attn/internal.h"
#include "util/simd.h"

#include <math.h>
#include <string.h>

/* the two micro-kernel drivers stay functions: inlined into rows_block, GCC
 * spills differently from build to build (seen on AVX2) */
#define NOINLINE static __attribute__((noinline))

/* Register tiles per ISA: Q·Kᵀ holds MK x RCV accumulators, P·V MR x NC,
 * plus the RCV (NC) vectors loaded and one broadcast: 29 of AVX-512's 32
 * registers, 15 of AVX2's 16, since FMA latency 4 x 2 ports needs >= 8
 * chains in flight and 12 or 24 leave the loads and the loop room. A chunk
 * of fewer than NC vectors takes more rows (PV_ROWS). */
#if VW >= 16
#define MK 6
#define RCV 4
#define MR 6
#define NC 4
#elif VW >= 8
#define MK 6
#define RCV 2
#define MR 6
#define NC 2
#else
#define MK 2
#define RCV 4
#define MR 2
#define NC 4
#endif
#define PV_ROWS_MAX 12 /* rows of one P·V micro-kernel, whatever its columns */
#define FEW_ROWS (VW / 2) /* at most this many rows take the few path */

/* Makes a product a rounded value of its own: FMA contraction cannot fuse
 * it into a later add, whichever instance of a micro-kernel it sits in. */
#if VW > 1
#define KEEP_ROUNDED(x) KEEP_IN_REG(x)
#else
#define KEEP_ROUNDED(x) __asm__("" : "+m"(x)) /* a 1-float vector: through memory */
#endif

/* The softmax's exponentials exp(s - m) <= 1 for a score s and its row's
 * running max m, as 2^t with t = (s - m) log2(e) (vexp_t). s - m first: it
 * is exact near the max (the max itself gives 2^0 = 1 exactly) however large
 * the scores; s log2(e) - m log2(e) in one FMA would save an instruction but
 * carry the rounding of m log2(e), ~|m| 2^-24, into every weight. So would
 * scores in log2 units (queries times scale log2(e), t = s - m): with scores
 * of ~1e4 their own rounding, ~|s| 2^-24, reached 1e-3 of the weights and
 * failed extreme_scores_are_exact_and_finite. */
#define LOG2E 1.44269504088896341f
INLINE vf vexp_t(vf s, vf m) { return (s - m) * LOG2E; }

/* 2^f for f in [-1/2, 1/2]: the degree-5 polynomial with constant term 1
 * (so 2^0 = 1 exactly) of least maximum relative error, 1.7e-7 evaluated in
 * float by FMAs (coefficients and error from tools/exp2_poly.py; the
 * degree-6 one it replaced, 7.9e-8, cost one more FMA a score). */
INLINE vf exp2_frac(vf f) {
    vf p = vset1(1.326472731307149e-3f);
    p = p * f + 9.671512991189957e-3f;
    p = p * f + 5.550733581185341e-2f;
    p = p * f + 2.402224242687225e-1f;
    p = p * f + 6.931470036506653e-1f;
    return p * f + 1.0f;
}

#if VW == 16
/* 2^t for t <= 0 with AVX-512's own range reduction: f = t - round(t) in
 * [-1/2, 1/2] (vreduceps), 2^f by exp2_frac, times 2^round(t) by vscalefps.
 * -inf (a masked key) gives f = 0 and 2^-inf = exactly 0; t in (-150, -126)
 * the subnormal values, below that 0; a NaN stays NaN (a NaN score makes its
 * row NaN, qkv/attn.h). 8 instructions. */
INLINE vf vexp2(vf t) {
    __m512 tv;
    memcpy(&tv, &t, sizeof tv);
    __m512 fv = _mm512_reduce_ps(tv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* t - round(t) */
    __m512 n = _mm512_sub_ps(tv, fv);
    vf f;
    memcpy(&f, &fv, sizeof f);
    vf p = exp2_frac(f);
    __m512 pv;
    memcpy(&pv, &p, sizeof pv);
    __m512 y = _mm512_scalef_ps(pv, n);
    vf out;
    memcpy(&out, &y, sizeof out);
    return out;
}
#else
/* 2^t for t <= 0: t is first raised to at least -127 (-inf too; vmax keeps
 * a NaN, its second operand); adding 1.5 * 2^23 + 127 rounds it to an
 * integer n and leaves n + 127 in the low mantissa bits, which shifted up
 * by 23 are the bits of 2^n, or 0 for n = -127 (so 2^t is exactly 0 there,
 * where 2^n is not a normal float, and for -inf); f = t - n in [-1/2, 1/2],
 * 2^f by exp2_frac. A NaN stays NaN (a NaN score makes its row NaN, qkv/attn.h).
 * 11 instructions. */
INLINE vf vexp2(vf t) {
    const vf shifter = vset1(12582912.0f + 127.0f);
    t = vmax(vset1(-127.0f), t);
    vf k = t + shifter;
    vf f = t - (k - shifter);
    vi e;
    memcpy(&e, &k, sizeof e);
    e <<= 23;
    vf scale;
    memcpy(&scale, &e, sizeof scale);
    return exp2_frac(f) * scale;
}
#endif

/* tanh(x) lane by lane by attn_tanhf's method (internal.h, softcap.c: the
 * readable twin), with the kernels' own exp2 for exp(-2|x|): both branches
 * computed, one kept per lane, the sign put back last: 2.1 ulp at most
 * (tools/tanh_poly.py; measured by tests/test_attn_kernels.c). */
INLINE vf vtanh(vf x) {
    vu bits;
    memcpy(&bits, &x, sizeof bits);
    const vu sign = bits & 0x80000000u;
    bits &= 0x7fffffffu;
    vf a;
    memcpy(&a, &bits, sizeof a);
    const vf z = a * a; /* |a| < ATTN_TANH_SMALL: a + a z P(z) */
    vf p = vset1(ATTN_TANH_P4);
    p = p * z + ATTN_TANH_P3;
    p = p * z + ATTN_TANH_P2;
    p = p * z + ATTN_TANH_P1;
    p = p * z + ATTN_TANH_P0;
    const vf small = a + (a * z) * p;
    const vf e = vexp2(a * (-2.0f * LOG2E)); /* else (1 - e) / (1 + e), e = exp(-2a) */
    const vf large = (1.0f - e) / (1.0f + e);
    vf y = vselect(a < ATTN_TANH_SMALL, small, large); /* a NaN takes the large branch: NaN */
    memcpy(&bits, &y, sizeof bits);
    bits |= sign;
    memcpy(&y, &bits, sizeof y);
    return y;
}

/* Soft-capping c tanh(s / c) of a vector of scores, s / c as s * (1 / c):
 * one more rounding of the argument, |s| 2^-24, no more than the score's own. */
INLINE vf vsoftcap(vf s, vf c, vf inv_c) { return c * vtanh(s * inv_c); }

/* Caps the scores of a tile (st [nk, RS], rows [0, RP) of each key, RP a
 * multiple of VW) after Q·Kᵀ and before the mask, and makes tmax [RP] (NULL:
 * not wanted) each row's max of the capped scores, as qk_tile made it of
 * the raw ones. One call a tile, and only where the call caps: the tiles of
 * every other call run as before. */
static void softcap_tile(float *st, float *tmax, int RP, int RS, int nk, float c) {
    const vf cv = vset1(c), inv = vset1(1.0f / c);
    for (int r = 0; r < RP; r += VW) {
        vf mx = vset1(-INFINITY);
        for (int j = 0; j < nk; j++) {
            float *p = st + (size_t)j * RS + r;
            const vf y = vsoftcap(vload(p), cv, inv);
            vstore(p, y);
            mx = vmax(mx, y);
        }
        if (tmax) vstore(tmax + r, mx);
    }
}

/* x[0 .. n) = c tanh(x / c), n a multiple of VW: a row of scores. */
INLINE void softcap_span(float *x, int n, float c) {
    const vf cv = vset1(c), inv = vset1(1.0f / c);
    for (int i = 0; i < n; i += VW) vstore(x + i, vsoftcap(vload(x + i), cv, inv));
}

#ifndef ATTN_BF16DOT /* tile_avx512bf16.c's would be tile_avx512.c's again */
void CAT(attn_softcap_, SUFFIX)(float *x, int n, float c) {
    const int nv = n / VW * VW;
    softcap_span(x, nv, c);
    if (nv < n) { /* the last n % VW through a padded vector */
        float t[VW] = {0};
        memcpy(t, x + nv, (size_t)(n - nv) * sizeof(float));
        softcap_span(t, VW, c);
        memcpy(x + nv, t, (size_t)(n - nv) * sizeof(float));
    }
}
#endif

/* One vector of a K/V row in its storage type, as f32 (d + VW <= D). */
INLINE vf vload_kv(const void *row, qkv_dtype t, int d) {
    if (t == QKV_DTYPE_F32) return vload((const float *)row + d);
    const uint16_t *h16 = (const uint16_t *)row + d;
    return t == QKV_DTYPE_F16 ? vload_f16(h16) : vload_bf16(h16);
}

static inline const void *kv_row(const void *base, qkv_dtype t, int64_t offset) {
    return (const char *)base + offset * (int64_t)(t == QKV_DTYPE_F32 ? 4 : 2);
}

/* dst[j][0 .. w) <- columns [c0, c0 + w) of row j of src [n, D] as f32, for
 * j < n; columns past D are 0. */
INLINE void convert_cols_t(float *dst, const void *src, const qkv_dtype t, int n, int D, int c0, int w) {
    int nv = (D - c0 < w ? D - c0 : w) / VW; /* whole vectors inside the row */
    if (nv < 0) nv = 0;
    for (int j = 0; j < n; j++) {
        const void *row = kv_row(src, t, (int64_t)j * D + c0);
        float *out = dst + (size_t)j * w;
        for (int v = 0; v < nv; v++) vstore(out + v * VW, vload_kv(row, t, v * VW));
        for (int c = nv * VW; c < w; c++) {
            const int d = c0 + c;
            if (d >= D) out[c] = 0;
            else if (t == QKV_DTYPE_F32) out[c] = ((const float *)row)[c];
            else if (t == QKV_DTYPE_BF16) out[c] = qkv_bf16_to_f32(((const uint16_t *)row)[c]);
            else out[c] = qkv_f16_to_f32(((const uint16_t *)row)[c]);
        }
    }
}

static void convert_cols(float *dst, const void *src, qkv_dtype t, int n, int D, int c0, int w) {
    switch (t) { /* one loop per type, so the conversion is inlined without a branch */
    case QKV_DTYPE_F32: convert_cols_t(dst, src, QKV_DTYPE_F32, n, D, c0, w); break;
    case QKV_DTYPE_BF16: convert_cols_t(dst, src, QKV_DTYPE_BF16, n, D, c0, w); break;
    case QKV_DTYPE_F16: convert_cols_t(dst, src, QKV_DTYPE_F16, n, D, c0, w); break;
    }
}

/* Software prefetch of `bytes` from p into L2 (prefetcht1). The decode path
 * streams the cache once, each stream one tile ahead of its use: Q·Kᵀ, as it
 * reads K row j of a tile, asks for K row j of the next tile, and P·V, as it
 * reads a column chunk of V row j, asks for the same chunk of the next tile.
 * So both streams stay in flight across 4 KiB pages, where the hardware
 * prefetcher stops, and the requests are spread over the whole tile, not
 * bunched in its Q·Kᵀ half (into L2: into L1 gains nothing;
 * docs/benchmarks-history.md has the figures). */
#define ATTN_PF_LOCALITY 2
INLINE void prefetch_span(const void *p, int bytes) {
    for (int o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, ATTN_PF_LOCALITY);
}
INLINE void prefetch_row(const void *row, qkv_dtype t, int D) { prefetch_span(row, D * (t == QKV_DTYPE_F32 ? 4 : 2)); }

/* ------------------------------------------------------------- tile walk */

/* The skeleton of every path (block, few, tile_bf16dot.h's): rows_start,
 * then the tiles of tiles_start / tiles_next, each scored, masked, folded
 * into the online softmax and into acc by the path's own kernels. */

/* m = -inf, l = 0, acc = 0 for rows [0, R) and pos = each row's position;
 * rows [R, RP) are a block's padding: they start alike at the last row's
 * position. */
static void rows_start(attn_scratch *ws, int R, int RP, int ld, int nq, int p_first) {
    for (int r = 0; r < RP; r++) {
        ws->pos[r] = p_first + (r < R ? r % nq : nq - 1);
        ws->m[r] = -INFINITY;
        ws->l[r] = 0;
    }
    memset(ws->acc, 0, (size_t)R * ld * sizeof(float));
}

/* The tiles of keys [j0, j1) that rows at positions [p_first, p_last] see:
 * keys past the last row's reach cut (attn_key_end), tiles the mask hides
 * whole skipped. The current tile is keys [jt, jt + nk), of class cls. */
typedef struct {
    int jt, nk, end;
    attn_tile_class cls;
} tile_walk;

INLINE tile_walk tiles_start(const attn_problem *P, int j0, int j1, int p_last) {
    const int key_end = attn_key_end(P->mask, P->kv_len, p_last);
    return (tile_walk){.jt = j0 - ATTN_BK, .end = j1 < key_end ? j1 : key_end};
}

/* Moves w to the next tile that is not empty; 0 when none is left. */
INLINE int tiles_next(tile_walk *w, const attn_problem *P, int p_first, int p_last) {
    for (w->jt += ATTN_BK; w->jt < w->end; w->jt += ATTN_BK) {
        w->nk = w->end - w->jt < ATTN_BK ? w->end - w->jt : ATTN_BK;
        w->cls = attn_classify_tile(P->mask, &P->ex, p_first, p_last, w->jt, w->jt + w->nk);
        if (w->cls != ATTN_TILE_EMPTY) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ block path */

/* The next tile's K and V rows are prefetched into L2 a line at a time from
 * inside the Q·Kᵀ micro-kernel, whose load ports have room: the call for
 * keys [j, j + mk) of this tile asks for rows [j, j + mk) of the next one,
 * es * mk bytes per step along D, so each line is asked for about once per
 * 64 / (es * mk) steps and never in a burst. A burst of the whole next tile
 * (32 + 32 KiB, 1024 lines, as tile_bf16dot.h still does) stalled on the
 * fill buffers and took 8% of causal prefill on Ice Lake (docs/benchmarks-history.md,
 * issue 11). Where there is no whole next tile, the addresses are this
 * tile's, already in cache. */

/* st[k][r0 .. r0 + rcv*VW) = sum_d k_row(k)[d] * qc[d][..] for keys k < mk,
 * with qc [D, rcv * VW] the row chunk of the packed queries that starts at
 * row r0 (see rows_block), and tmax[r0 ..] = max(tmax[r0 ..], those scores)
 * from the registers (the softmax's max pass, folded in); prefetches pf's
 * rows [0, mk) along the way. */
INLINE void qk_micro(float *st, float *tmax, const float *qc, const float *kp, int ks, int D, int RS, int r0,
                     const int mk, const int rcv, const char *pfk, const char *pfv, int pf_step) {
    vf a[MK][RCV];
    for (int k = 0; k < mk; k++)
        for (int n = 0; n < rcv; n++) a[k][n] = vset1(0);
#define QK_STEP(d)                                                                                       \
    do {                                                                                                 \
        vf qv[RCV];                                                                                      \
        for (int n = 0; n < rcv; n++) qv[n] = vload(qc + (size_t)(d) * (rcv * VW) + n * VW);              \
        for (int k = 0; k < mk; k++) {                                                                   \
            vf kb = vset1(kp[(size_t)k * ks + (d)]);                                                     \
            for (int n = 0; n < rcv; n++) a[k][n] += kb * qv[n];                                         \
        }                                                                                                \
    } while (0)
    /* two steps per prefetch pair: AVX2's 6 x 2 loop is near the 5 uops a
     * cycle Ice Lake renames, and a prefetch and an add per step cost it */
    int d = 0;
    for (; d + 2 <= D; d += 2) {
        __builtin_prefetch(pfk + (size_t)d * pf_step, 0, 2);
        __builtin_prefetch(pfv + (size_t)d * pf_step, 0, 2);
        QK_STEP(d);
        QK_STEP(d + 1);
    }
    if (d < D) QK_STEP(d);
#undef QK_STEP
    for (int k = 0; k < mk; k++)
        for (int n = 0; n < rcv; n++) vstore(st + (size_t)k * RS + r0 + n * VW, a[k][n]);
    for (int n = 0; n < rcv; n++) {
        vf mx = vload(tmax + r0 + n * VW);
        for (int k = 0; k < mk; k++) mx = vmax(mx, a[k][n]);
        vstore(tmax + r0 + n * VW, mx);
    }
}

/* Keys [0, mk) (rows of kp, ks floats apart) against every row chunk of qp
 * (chunk r0 at qp + r0 * D, see rows_block); the
 * first chunk prefetches pk / pv (the next tile's rows, pf_step bytes per
 * step along D), the others re-touch kp's own rows, in L1. */
INLINE void qk_keys(float *st, float *tmax, const float *qp, const float *kp, int ks, int D, int RP, int RS, const int mk,
                    const char *pk, const char *pv, int pf_step) {
    for (int r0 = 0; r0 < RP; r0 += RCV * VW) {
        const int rcv = (RP - r0) / VW;
        const float *qc = qp + (size_t)r0 * D;
        const char *k = r0 == 0 ? pk : (const char *)kp, *v = r0 == 0 ? pv : (const char *)kp;
        if (rcv >= RCV) qk_micro(st, tmax, qc, kp, ks, D, RS, r0, mk, RCV, k, v, pf_step);
#if RCV > 3
        else if (rcv == 3) qk_micro(st, tmax, qc, kp, ks, D, RS, r0, mk, 3, k, v, pf_step);
#endif
#if RCV > 2
        else if (rcv == 2) qk_micro(st, tmax, qc, kp, ks, D, RS, r0, mk, 2, k, v, pf_step);
#endif
        else qk_micro(st, tmax, qc, kp, ks, D, RS, r0, mk, 1, k, v, pf_step);
    }
}

/* Scores of the nk keys of a tile (ksrc [nk, D] in its storage type) against
 * all RP rows (qp: the packed queries, row chunks of [D, RCV * VW], see
 * rows_block): st [nk, RS], st[j][r] = q_r . k_j, and
 * tmax [RP], tmax[r] = max_j st[j][r]. K that is not f32 is converted MK
 * rows at a time into kbuf [MK, D]: as fast as a whole tile at once, with
 * only MK rows of scratch.
 * pf_k, pf_v: row 0 of the tile to prefetch, [nk, D] in the storage type. */
NOINLINE void qk_tile(float *st, float *tmax, const float *qp, const void *ksrc, qkv_dtype t, int nk, int D, int RP, int RS,
                      const char *pf_k, const char *pf_v, float *kbuf) {
    const int es = (int)qkv_dtype_size(t);
    for (int r = 0; r < RP; r += VW) vstore(tmax + r, vset1(-INFINITY));
    for (int j = 0; j < nk; j += MK) {
        const int mk = nk - j < MK ? nk - j : MK;
        const float *kp = (const float *)ksrc + (size_t)j * D;
        if (t != QKV_DTYPE_F32) {
            convert_cols(kbuf, kv_row(ksrc, t, (int64_t)j * D), t, mk, D, 0, D);
            kp = kbuf;
        }
        float *sj = st + (size_t)j * RS;
        const char *pk = pf_k + (size_t)j * D * es, *pv = pf_v + (size_t)j * D * es;
        switch (mk) { /* the last nk % MK keys in one pass */
        case MK: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, MK, pk, pv, MK * es); break;
#if MK > 5
        case 5: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, 5, pk, pv, 5 * es); break;
#endif
#if MK > 4
        case 4: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, 4, pk, pv, 4 * es); break;
#endif
#if MK > 3
        case 3: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, 3, pk, pv, 3 * es); break;
#endif
#if MK > 2
        case 2: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, 2, pk, pv, 2 * es); break;
#endif
        default: qk_keys(sj, tmax, qp, kp, D, D, RP, RS, 1, pk, pv, es); break;
        }
    }
}

/* acc[r0 + i][c0 + c*VW ..] = alpha[r0 + i] * acc[..] + sum_j pt[j][r0 + i] *
 * vp[j * vs + vc0 + c*VW ..], i < mr, c < nc: the online softmax's rescale
 * folded into the accumulators' load (x * 1 is x, so it is the separate
 * pass's arithmetic exactly). */
INLINE void pv_micro(float *acc, int ld, const float *alpha, const float *pt, int RS, const float *vp, int vs,
                     int nk, int r0, int c0, int vc0, const int mr, const int nc) {
    vf a[PV_ROWS_MAX][NC];
    for (int i = 0; i < mr; i++) {
        const vf al = vset1(alpha[r0 + i]);
        for (int c = 0; c < nc; c++) {
            a[i][c] = vload(acc + (size_t)(r0 + i) * ld + c0 + c * VW) * al;
            KEEP_ROUNDED(a[i][c]); /* else GCC may fuse it into the first FMA in some instances only */
        }
    }
    for (int j = 0; j < nk; j++) {
        vf vv[NC];
        for (int c = 0; c < nc; c++) {
            vv[c] = vload(vp + (size_t)j * vs + vc0 + c * VW);
            KEEP_IN_REG(vv[c]);
        }
        for (int i = 0; i < mr; i++) {
            vf pb = vset1(pt[(size_t)j * RS + r0 + i]);
            for (int c = 0; c < nc; c++) a[i][c] += pb * vv[c];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < nc; c++) vstore(acc + (size_t)(r0 + i) * ld + c0 + c * VW, a[i][c]);
}

/* Rows per P·V micro-kernel for a chunk of nc <= NC vectors: MR x NC, or as
 * many rows as the registers of the missing columns hold (at most PV_ROWS_MAX). */
#define PV_ROWS(nc) ((nc) >= NC ? MR : MR * NC / (nc) < PV_ROWS_MAX ? MR * NC / (nc) : PV_ROWS_MAX)

/* Rows [0, R) of one column chunk: micro-kernels of mr rows, then the last
 * R % mr rows in at most three passes of 8, 4, 2 or 1 rows. */
INLINE void pv_colchunk(float *acc, int ld, const float *alpha, const float *pt, int RS, const float *vp, int vs,
                        int nk, int R, int c0, int vc0, const int nc) {
    const int mr = PV_ROWS(nc);
    int r0 = 0;
    for (; r0 + mr <= R; r0 += mr) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, mr, nc);
    if (mr > 8 && R - r0 >= 8) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, 8, nc), r0 += 8;
    if (mr > 4 && R - r0 >= 4) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, 4, nc), r0 += 4;
    if (mr > 3 && R - r0 == 3) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, 3, nc), r0 += 3;
    if (mr > 2 && R - r0 >= 2) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, 2, nc), r0 += 2;
    if (R - r0 >= 1) pv_micro(acc, ld, alpha, pt, RS, vp, vs, nk, r0, c0, vc0, 1, nc);
}

/* acc [R, ld]: acc[r][0 .. ld) = alpha[r] * acc[r][..] + sum_j pt[j][r] * v_j
 * for rows r < R, with pt [nk, RS] and the nk rows of vsrc [nk, D] in their
 * storage type. V that is f32 with whole vectors is read in place; where D
 * is whole vectors the columns [D, ld) are left alone (padding, never read);
 * otherwise each
 * column chunk (NC vectors) of the tile is converted into vbuf [nk, NC * VW]
 * just before its micro-kernels use it (see qk_tile). */
NOINLINE void pv_tile(float *acc, int ld, const float *alpha, const float *pt, int RS, const void *vsrc, qkv_dtype t,
                      int D, int nk, int R, float *vbuf) {
    /* the same column chunks whether V is read in place or converted, so
     * both run the same micro-kernel instances and give the same bits */
    const int direct = t == QKV_DTYPE_F32 && D % VW == 0, ncols = D % VW == 0 ? D : ld;
    for (int c0 = 0; c0 < ncols; c0 += NC * VW) {
        const int nc = (ncols - c0) / VW < NC ? (ncols - c0) / VW : NC;
        const float *vp = vsrc;
        int vs = D, vc0 = c0;
        if (!direct) {
            convert_cols(vbuf, vsrc, t, nk, D, c0, nc * VW);
            vp = vbuf, vs = nc * VW, vc0 = 0;
        }
        if (nc >= NC) pv_colchunk(acc, ld, alpha, pt, RS, vp, vs, nk, R, c0, vc0, NC);
#if NC > 3
        else if (nc == 3) pv_colchunk(acc, ld, alpha, pt, RS, vp, vs, nk, R, c0, vc0, 3);
#endif
#if NC > 2
        else if (nc == 2) pv_colchunk(acc, ld, alpha, pt, RS, vp, vs, nk, R, c0, vc0, 2);
#endif
        else pv_colchunk(acc, ld, alpha, pt, RS, vp, vs, nk, R, c0, vc0, 1);
    }
}

/* Hides the keys of a partial tile: st[j][r] = -inf where key jt + j is not
 * visible to row r (position pos[r]) or is excluded. Every rule is a compare
 * of the key against the row's position, so it runs VW rows at a time. */
static void mask_tile(float *st, const int32_t *pos, int RP, int RS, const attn_problem *P, int jt, int nk) {
    const qkv_mask *m = P->mask;
    const vf ninf = vset1(-INFINITY);
    for (int j = 0; j < nk; j++) {
        const int key = jt + j;
        float *sj = st + (size_t)j * RS;
        if (attn_excl_has(&P->ex, key)) {
            for (int r = 0; r < RP; r += VW) vstore(sj + r, ninf);
            continue;
        }
        if (m->kind == QKV_MASK_NONE) continue;
        for (int r = 0; r < RP; r += VW) {
            vi p;
            memcpy(&p, pos + r, sizeof p);
            vi vis = key <= p; /* causal part of every rule */
            if (m->kind == QKV_MASK_WINDOW) vis &= key > p - m->window;
            else if (m->kind == QKV_MASK_SINK_WINDOW) vis &= (key > p - m->window) | ((vi){0} - (key < m->sinks));
            vstore(sj + r, vselect(vis, vload(sj + r), ninf));
        }
    }
}

/* p = exp(s - m_use) down the nk keys of st [nk, RS] for the nb row vectors
 * from row vector n, and sum[n ..] = each row vector's sum of its p, adding
 * the keys in order. nb <= 2 vectors' max and sum stay in registers. */
INLINE void exp_rows(float *st, int RS, int nk, int n, const vf *m_use, vf *sum, const int nb) {
    vf mu[2], s[2];
    for (int b = 0; b < nb; b++) mu[b] = m_use[n + b], s[b] = vset1(0);
    for (int j = 0; j < nk; j++) {
        float *p = st + (size_t)j * RS + n * VW;
        for (int b = 0; b < nb; b++) {
            vf e = vexp2(vexp_t(vload(p + b * VW), mu[b]));
            vstore(p + b * VW, e);
            s[b] += e;
        }
    }
    for (int b = 0; b < nb; b++) sum[n + b] = s[b];
}

/* Online softmax of one tile, VW rows at a time: st becomes p = exp(s - m'),
 * m, l and alpha are updated (see the invariant at the top). tmax holds each
 * row's max score of the tile when qk_tile's is still true (no mask since),
 * else NULL and it is found here. The exponentials go two row vectors at a
 * time down all the keys, so the pair's max and running sums stay in
 * registers (two independent sums): with every row vector in the inner loop
 * (up to 16 with AVX2) they would spill to the stack. Each sum still adds its
 * keys in order, so the bits are those of one row at a time. */
static void softmax_tile(float *st, float *m, float *l, float *alpha, int RP, int RS, int nk, const float *tmax) {
    enum { NRV_MAX = ATTN_MAX_ROWS / VW };
    const int nrv = RP / VW;
    const vf ninf = vset1(-INFINITY);
    vf mx[NRV_MAX], m_use[NRV_MAX], sum[NRV_MAX];
    if (tmax)
        for (int n = 0; n < nrv; n++) mx[n] = vload(tmax + n * VW);
    else {
        for (int n = 0; n < nrv; n++) mx[n] = vload(st + n * VW);
        for (int j = 1; j < nk; j++)
            for (int n = 0; n < nrv; n++) mx[n] = vmax(mx[n], vload(st + (size_t)j * RS + n * VW));
    }
    for (int n = 0; n < nrv; n++) {
        vf m_old = vload(m + n * VW);
        vf m_new = vmax(m_old, mx[n]);
        m_use[n] = vselect(m_new == ninf, vset1(0), m_new); /* rows with nothing visible yet */
        vstore(alpha + n * VW, vexp2(vexp_t(m_old, m_use[n])));
        vstore(m + n * VW, m_new);
    }
    int n = 0;
    for (; n + 2 <= nrv; n += 2) exp_rows(st, RS, nk, n, m_use, sum, 2);
    if (n < nrv) exp_rows(st, RS, nk, n, m_use, sum, 1); /* an odd last row vector */
    for (n = 0; n < nrv; n++) vstore(l + n * VW, vload(l + n * VW) * vload(alpha + n * VW) + sum[n]);
}

#if VW == 16
/* dst[i * ld + j] = scale * src[j][d0 + i] for i, j < 16 (scale 1: the bits
 * moved untouched, whatever they hold): a 16 x 16 transpose
 * in registers (interleave 32-bit, then 64-bit elements, then 128-bit lanes
 * twice: 64 shuffles instead of 256 scalar loads and stores). */
static void transpose16_scaled(float *dst, int ld, const float *const *src, int d0, float scale) {
    __m512 r[16], t[16];
    const __m512 sc = _mm512_set1_ps(scale);
    for (int i = 0; i < 16; i++) {
        r[i] = _mm512_loadu_ps(src[i] + d0);
        if (scale != 1.0f) r[i] = _mm512_mul_ps(r[i], sc); /* 1: raw 32-bit words (bf16 pairs) */
    }
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int k = 0; k < 2; k++) {
            r[i + k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + k]), _mm512_castps_pd(t[i + k + 2])));
            r[i + k + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + k]), _mm512_castps_pd(t[i + k + 2])));
        }
    for (int i = 0; i < 16; i += 8)
        for (int k = 0; k < 4; k++) {
            t[i + k] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0x88);
            t[i + k + 4] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0xdd);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
    /* r[k] now holds column d0 + col[k] of the 16 source rows (the 64-bit
     * interleave leaves columns 1 and 2 of each group of 4 swapped) */
    static const int col[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    for (int k = 0; k < 16; k++) _mm512_storeu_ps(dst + (size_t)col[k] * ld, r[k]);
}
#endif

/* Extends the thread's f32 copy of KV head kvh (k, v: its [n, D] rows in
 * type t) to keys [0, n). */
static void kv_f32_extend(attn_kv_f32 *c, const void *k, const void *v, qkv_dtype t, int kvh, int n, int D) {
    if (c->kvh != kvh) c->kvh = kvh, c->len = 0;
    if (n <= c->len) return;
    const int64_t off = (int64_t)c->len * D;
    convert_cols(c->k + off, kv_row(k, t, off), t, n - c->len, D, 0, D);
    convert_cols(c->v + off, kv_row(v, t, off), t, n - c->len, D, 0, D);
    c->len = n;
}

#if VW == 8
/* dst[i * ld + j] = scale * src[j][d0 + i] for i, j < 8: the 8 x 8 transpose
 * in registers (interleave 32-bit, then 64-bit elements, then 128-bit lanes:
 * 24 shuffles instead of 64 scalar loads and stores). */
static void transpose8_scaled(float *dst, int ld, const float *const *src, int d0, float scale) {
    __m256 r[8], t[8];
    const __m256 sc = _mm256_set1_ps(scale);
    for (int i = 0; i < 8; i++) r[i] = _mm256_mul_ps(_mm256_loadu_ps(src[i] + d0), sc);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int k = 0; k < 2; k++) {
            r[i + 2 * k] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0x44);
            r[i + 2 * k + 1] = _mm256_shuffle_ps(t[i + k], t[i + k + 2], 0xee);
        }
    /* r[0..3] hold columns 0, 1, 2, 3 of rows 0-3 (low lane) and 4-7 of rows
     * 0-3 (high lane); r[4..7] the same for rows 4-7 */
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + (size_t)k * ld, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
        _mm256_storeu_ps(dst + (size_t)(k + 4) * ld, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
    }
}
#define TRANSPOSE_VW transpose8_scaled
#elif VW == 16
#define TRANSPOSE_VW transpose16_scaled
#endif

static void rows_block(const attn_problem *P, const attn_rows *rows, int j0, int j1, attn_scratch *ws) {
    const int D = P->head_dim, ld = P->ld, nq = rows->nq;
    const int R = rows->nh * nq, RP = (R + VW - 1) / VW * VW;
    const int RS = RP + VW; /* the stride of st: RP + VW keeps its rows off the L1 sets of V's rows */
    const int64_t kv_base = (int64_t)rows->kvh * P->kv_head_stride;
    const int p_first = P->kv_len - P->q_len + rows->i0, p_last = p_first + nq - 1;

    /* scaled queries, transposed and packed by row chunk: the chunk of rows
     * [c, c + w), w = min(RCV * VW, RP - c) (the rows one Q·Kᵀ micro-kernel
     * holds), is [D, w] at ws->q + c * D, so the micro-kernel reads one
     * contiguous stream, w floats a step along D. Padding rows are 0. VW x VW
     * blocks in registers where the ISA has them, the rest a scalar at a time. */
    const float *qsrc[ATTN_MAX_ROWS];
    for (int hl = 0; hl < rows->nh; hl++) {
        int h = rows->kvh * P->group + rows->h0 + hl;
        for (int tq = 0; tq < nq; tq++) qsrc[hl * nq + tq] = P->q + ((size_t)h * P->q_len + rows->i0 + tq) * D;
    }
    int dt = 0; /* columns d < dt go through registers, padding rows included */
#ifdef TRANSPOSE_VW
    static const float zero_row[QKV_HEAD_DIM_MAX];
    for (int r = R; r < RP; r++) qsrc[r] = zero_row;
    dt = D / VW * VW;
#endif
    for (int c = 0; c < RP; c += RCV * VW) {
        const int w = RP - c < RCV * VW ? RP - c : RCV * VW;
        float *qc = ws->q + (size_t)c * D; /* [D, w] */
#ifdef TRANSPOSE_VW
        for (int d0 = 0; d0 < dt; d0 += VW)
            for (int r0 = 0; r0 < w; r0 += VW) TRANSPOSE_VW(qc + (size_t)d0 * w + r0, w, qsrc + c + r0, d0, P->scale);
#endif
        for (int d = dt; d < D; d++)
            for (int r = 0; r < w; r++) qc[(size_t)d * w + r] = c + r < R ? qsrc[c + r][d] * P->scale : 0;
    }
    rows_start(ws, R, RP, ld, nq, p_first);

    tile_walk w = tiles_start(P, j0, j1, p_last);
    /* this KV head's K/V [Lk, D] in type t: as stored, or the thread's f32 copy */
    qkv_dtype t = P->kv_dtype;
    const void *khead = kv_row(P->k, t, kv_base), *vhead = kv_row(P->v, t, kv_base);
    if (t != QKV_DTYPE_F32 && P->kv_f32_copy && j0 == 0 && (size_t)w.end * D <= ws->kvf.cap) {
        kv_f32_extend(&ws->kvf, khead, vhead, t, rows->kvh, w.end, D);
        khead = ws->kvf.k, vhead = ws->kvf.v, t = QKV_DTYPE_F32;
    }
    while (tiles_next(&w, P, p_first, p_last)) {
        const int jt = w.jt, nk = w.nk;
        const attn_tile_class cls = w.cls;
        const void *ksrc = kv_row(khead, t, (int64_t)jt * D);
        const void *vsrc = kv_row(vhead, t, (int64_t)jt * D);
        /* the next tile when it is a whole one, else this tile again (in cache) */
        const int64_t next = jt + ATTN_BK + nk <= w.end ? (int64_t)ATTN_BK * D : 0;
        const char *pf_k = kv_row(ksrc, t, next), *pf_v = kv_row(vsrc, t, next);

        /* 1. scores st[j][r] = (scale q_r) . k_j, capped where the call caps */
        qk_tile(ws->s, ws->tmax, ws->q, ksrc, t, nk, D, RP, RS, pf_k, pf_v, ws->kt);
        if (P->softcap > 0) softcap_tile(ws->s, cls == ATTN_TILE_PARTIAL ? NULL : ws->tmax, RP, RS, nk, P->softcap);

        /* 2. mask the keys a partial tile hides */
        if (cls == ATTN_TILE_PARTIAL) mask_tile(ws->s, ws->pos, RP, RS, P, jt, nk);

        /* 3. online softmax */
        softmax_tile(ws->s, ws->m, ws->l, ws->alpha, RP, RS, nk, cls == ATTN_TILE_PARTIAL ? NULL : ws->tmax);

        /* 4. acc = alpha * acc + P V */
        pv_tile(ws->acc, ld, ws->alpha, ws->s, RS, vsrc, t, D, nk, R, ws->vt);
    }
}

/* -------------------------------------------------------------- few path */

/* fold_tree folds VW vectors into one whose lane i is the horizontal sum of
 * x[bitrev(i)]: log2 VW levels, each adding the low and high halves of pairs.
 * fold_slot[k] = bitrev(k) is where key k's vector goes so that lane k is key k. */
#if VW == 16
#define SHUF __builtin_shufflevector
INLINE vf fold_tree(vf *x) {
    vf a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)
        a[i] = SHUF(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               SHUF(x[2 * i], x[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int i = 0; i < 4; i++)
        b[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
               SHUF(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++)
        c[i] = SHUF(b[2 * i], b[2 * i + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
               SHUF(b[2 * i], b[2 * i + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    return SHUF(c[0], c[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
           SHUF(c[0], c[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}
static const int fold_slot[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
#elif VW == 8
#define SHUF __builtin_shufflevector
INLINE vf fold_tree(vf *x) {
    vf a[4], b[2];
    for (int i = 0; i < 4; i++)
        a[i] = SHUF(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
               SHUF(x[2 * i], x[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    for (int i = 0; i < 2; i++)
        b[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
               SHUF(a[2 * i], a[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
    return SHUF(b[0], b[1], 0, 8, 2, 10, 4, 12, 6, 14) + SHUF(b[0], b[1], 1, 9, 3, 11, 5, 13, 7, 15);
}
static const int fold_slot[8] = {0, 4, 2, 6, 1, 5, 3, 7};
#endif

#if VW > 1
/* part[(r0 + i) * VW + fold_slot[k]] = q_(r0+i) * k_k folded to one vector,
 * for rows i < rf (a constant, so the accumulators live in registers) and
 * keys k < cn <= VW starting at krow0 (rows D elements apart); K converted in
 * registers, D % VW == 0. */
INLINE void few_partials(vf *part, const float *q, int ld, int r0, const int rf, const void *krow0, qkv_dtype t,
                         int D, int cn) {
    for (int k = 0; k < cn; k++) {
        const void *kr = kv_row(krow0, t, (int64_t)k * D);
        if (r0 == 0) prefetch_row(kv_row(kr, t, (int64_t)ATTN_BK * D), t, D); /* the next tile's K */
        vf a0[4], a1[4]; /* two chains per row: D / VW dependent FMAs would stall on latency */
        for (int i = 0; i < rf; i++) a0[i] = a1[i] = vset1(0);
        int d = 0;
        for (; d + 2 * VW <= D; d += 2 * VW) {
            vf k0 = vload_kv(kr, t, d), k1 = vload_kv(kr, t, d + VW);
            for (int i = 0; i < rf; i++) {
                a0[i] += k0 * vload(q + (size_t)(r0 + i) * ld + d);
                a1[i] += k1 * vload(q + (size_t)(r0 + i) * ld + d + VW);
            }
        }
        if (d < D) {
            vf k0 = vload_kv(kr, t, d);
            for (int i = 0; i < rf; i++) a0[i] += k0 * vload(q + (size_t)(r0 + i) * ld + d);
        }
        for (int i = 0; i < rf; i++) part[(r0 + i) * VW + fold_slot[k]] = a0[i] + a1[i];
    }
}

/* s[r][c0 + i] = q_r . k_(c0+i) for i < cn <= VW keys starting at krow0, rows r < R. */
INLINE void few_scores(float *s, const float *q, int ld, int R, const void *krow0, qkv_dtype t, int D, int c0, int cn,
                       vf *part /* [FEW_ROWS * VW] */) {
    for (int r0 = 0; r0 < R; r0 += 4) {
        switch (R - r0) {
        case 1: few_partials(part, q, ld, r0, 1, krow0, t, D, cn); break;
        case 2: few_partials(part, q, ld, r0, 2, krow0, t, D, cn); break;
        case 3: few_partials(part, q, ld, r0, 3, krow0, t, D, cn); break;
        default: few_partials(part, q, ld, r0, 4, krow0, t, D, cn); break;
        }
    }
    for (int k = cn; k < VW; k++)
        for (int r = 0; r < R; r++) part[r * VW + fold_slot[k]] = vset1(0);
    for (int r = 0; r < R; r++) vstore(s + (size_t)r * ATTN_BK + c0, fold_tree(part + r * VW));
}
#endif

/* acc[r][c0 + c*VW ..] += sum_j p[r][j] v_j[...] for rows r < mr, c < nc; V
 * converted in registers. */
INLINE void few_pv(float *acc, int ld, const float *p, const void *vrow0, qkv_dtype t, int D, int nk, int r0,
                   int c0, const int mr, const int nc) {
    vf a[FEW_ROWS > 0 ? FEW_ROWS : 1][NC];
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < nc; c++) a[i][c] = vload(acc + (size_t)(r0 + i) * ld + c0 + c * VW);
    for (int j = 0; j < nk; j++) {
        const void *vr = kv_row(vrow0, t, (int64_t)j * D);
        if (r0 == 0) /* the same columns of the next tile's V */
            prefetch_span(kv_row(vr, t, (int64_t)ATTN_BK * D + c0), nc * VW * (t == QKV_DTYPE_F32 ? 4 : 2));
        vf vv[NC];
        for (int c = 0; c < nc; c++) vv[c] = vload_kv(vr, t, c0 + c * VW);
        for (int i = 0; i < mr; i++) {
            vf pb = vset1(p[(size_t)(r0 + i) * ATTN_BK + j]);
            for (int c = 0; c < nc; c++) a[i][c] += pb * vv[c];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < nc; c++) vstore(acc + (size_t)(r0 + i) * ld + c0 + c * VW, a[i][c]);
}

#if VW > 1
/* One tile of the few path for a KV dtype known at compile time (inlined per type). */
INLINE void few_tile(const attn_problem *P, int R, int nq, int p_first, int jt, int nk, attn_tile_class cls,
                     const void *ksrc, const void *vsrc, const qkv_dtype t, attn_scratch *ws) {
    const int D = P->head_dim, ld = P->ld;
    vf *part = (vf *)(void *)ws->part; /* [FEW_ROWS, VW] partial vectors */

    /* 1. scores s[r][j] = (scale q_r) . k_j, VW keys at a time, capped where the call caps */
    for (int c0 = 0; c0 < nk; c0 += VW)
        few_scores(ws->s, ws->q, ld, R, kv_row(ksrc, t, (int64_t)c0 * D), t, D, c0, nk - c0 < VW ? nk - c0 : VW, part);
    if (P->softcap > 0)
        for (int r = 0; r < R; r++) softcap_span(ws->s + (size_t)r * ATTN_BK, (nk + VW - 1) / VW * VW, P->softcap);

    /* 2. mask: keys past the tile's end and, in partial tiles, hidden keys */
    for (int r = 0; r < R; r++) {
        float *sr = ws->s + (size_t)r * ATTN_BK;
        for (int j = nk; j < ATTN_BK; j++) sr[j] = -INFINITY;
        if (cls == ATTN_TILE_PARTIAL) {
            int p = p_first + r % nq;
            for (int j = 0; j < nk; j++)
                if (!attn_rule_visible(P->mask, p, jt + j) || attn_excl_has(&P->ex, jt + j)) sr[j] = -INFINITY;
        }
    }

    /* 3. online softmax, row by row along the keys */
    const int nv = (nk + VW - 1) / VW;
    for (int r = 0; r < R; r++) {
        float *sr = ws->s + (size_t)r * ATTN_BK;
        vf mx = vload(sr);
        for (int n = 1; n < nv; n++) mx = vmax(mx, vload(sr + n * VW));
        float m_new = fmaxf(ws->m[r], vhmax(mx));
        const vf m_use = vset1(m_new == -INFINITY ? 0.0f : m_new);
        vf sum = vset1(0);
        for (int n = 0; n < nv; n++) {
            vf pv = vexp2(vexp_t(vload(sr + n * VW), m_use));
            vstore(sr + n * VW, pv);
            sum += pv;
        }
        float alpha = vexp2(vexp_t(vset1(ws->m[r]), m_use))[0];
        ws->alpha[r] = alpha;
        ws->l[r] = ws->l[r] * alpha + vhsum_ordered(sum);
        ws->m[r] = m_new;
    }

    /* 4. acc = alpha * acc + P V */
    for (int r = 0; r < R; r++) {
        if (ws->alpha[r] == 1.0f) continue;
        vf a = vset1(ws->alpha[r]);
        float *ar = ws->acc + (size_t)r * ld;
        for (int d = 0; d < ld; d += VW) vstore(ar + d, vload(ar + d) * a);
    }
    for (int c0 = 0; c0 < D; c0 += NC * VW) {
        const int nc = (D - c0) / VW;
        for (int r0 = 0; r0 < R; r0++) { /* rows one by one up to FEW_ROWS at once */
            const int mr = R - r0;
#define FEW_PV(MRC)                                                                                  \
    do {                                                                                              \
        if (nc >= NC) few_pv(ws->acc, ld, ws->s, vsrc, t, D, nk, r0, c0, MRC, NC);                    \
        else if (nc == 1) few_pv(ws->acc, ld, ws->s, vsrc, t, D, nk, r0, c0, MRC, 1);                 \
        else if (nc == 2) few_pv(ws->acc, ld, ws->s, vsrc, t, D, nk, r0, c0, MRC, 2 < NC ? 2 : NC);   \
        else few_pv(ws->acc, ld, ws->s, vsrc, t, D, nk, r0, c0, MRC, 3 < NC ? 3 : NC);                \
    } while (0)
            if (mr >= 4) { FEW_PV(4); r0 += 3; }
            else if (mr == 3) { FEW_PV(3); r0 += 2; }
            else if (mr == 2) { FEW_PV(2); r0 += 1; }
            else FEW_PV(1);
#undef FEW_PV
        }
    }
}

static void rows_few(const attn_problem *P, const attn_rows *rows, int j0, int j1, attn_scratch *ws) {
    const int D = P->head_dim, ld = P->ld, nq = rows->nq;
    const int R = rows->nh * nq;
    const qkv_dtype t = P->kv_dtype;
    const int64_t kv_base = (int64_t)rows->kvh * P->kv_head_stride;
    const int p_first = P->kv_len - P->q_len + rows->i0, p_last = p_first + nq - 1;

    for (int hl = 0; hl < rows->nh; hl++) {
        int h = rows->kvh * P->group + rows->h0 + hl;
        for (int tq = 0; tq < nq; tq++) {
            const float *src = P->q + ((size_t)h * P->q_len + rows->i0 + tq) * D;
            float *dst = ws->q + (size_t)(hl * nq + tq) * ld;
            for (int d = 0; d < D; d++) dst[d] = src[d] * P->scale;
            for (int d = D; d < ld; d++) dst[d] = 0;
        }
    }
    rows_start(ws, R, R, ld, nq, p_first);

    for (tile_walk w = tiles_start(P, j0, j1, p_last); tiles_next(&w, P, p_first, p_last);) {
        const int jt = w.jt, nk = w.nk;
        const attn_tile_class cls = w.cls;
        const void *ksrc = kv_row(P->k, t, kv_base + (int64_t)jt * D);
        const void *vsrc = kv_row(P->v, t, kv_base + (int64_t)jt * D);
        switch (t) {
        case QKV_DTYPE_F32: few_tile(P, R, nq, p_first, jt, nk, cls, ksrc, vsrc, QKV_DTYPE_F32, ws); break;
        case QKV_DTYPE_BF16: few_tile(P, R, nq, p_first, jt, nk, cls, ksrc, vsrc, QKV_DTYPE_BF16, ws); break;
        case QKV_DTYPE_F16: few_tile(P, R, nq, p_first, jt, nk, cls, ksrc, vsrc, QKV_DTYPE_F16, ws); break;
        }
    }
}
#endif

#ifdef ATTN_BF16DOT
#include "attn/tile_bf16dot.h"
#endif

void CAT(attn_rows_, SUFFIX)(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                             attn_scratch *ws) {
#ifdef ATTN_BF16DOT
    if (P->head_dim % 2 == 0) { /* every block, however few its rows: one rounding rule per call */
        rows_block_bf16(P, rows, j0, j1, ws);
        return;
    }
#endif
#if VW > 1
    if (rows->nh * rows->nq <= FEW_ROWS && P->head_dim % VW == 0) {
        rows_few(P, rows, j0, j1, ws);
        return;
    }
#endif
    rows_block(P, rows, j0, j1, ws);
}
