/*
 * tile_impl.h — the flash inner loop, written once over a vector of VW floats
 * (GCC vector extensions) and compiled per ISA by tile_avx512.c (VW 16),
 * tile_avx2.c (VW 8) and tile_scalar.c (VW 1). Its readable reference twin is
 * reference.c; tests/test_attn_kernels.c compares them on swept shapes.
 *
 * Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation
 * for softmax"; FlashAttention, Dao et al. 2022, arXiv:2205.14135), per row:
 *   invariant after each tile: m = max score seen, l = sum exp(score - m),
 *   acc = sum exp(score - m) * v.
 *   a new tile with max mx: m' = max(m, mx), alpha = exp(m - m'),
 *   l' = alpha * l + sum exp(s - m'), acc' = alpha * acc + sum exp(s - m') v.
 *   A row that has seen only masked keys keeps m = -inf, l = 0 and is never
 *   rescaled (exp(-inf - -inf) would be NaN).
 *
 * Shapes: queries of a block are rows r = hl * nq + t (head-major), ld is the
 * padded row stride, BK keys per tile. Two ways to form the scores:
 *   - R >= 8 rows: K tile transposed to kt [D, BK], then a register-tiled
 *     micro-kernel (MR rows x BK keys) broadcasting q[r][d] (prefill);
 *   - R < 8 rows: one dot product per (row, key) along D (decode: few rows,
 *     each K row used R times, no transpose to amortise).
 * Requires VW, SUFFIX defined by the including file.
 */
#include "attn/internal.h"

#include <math.h>
#include <string.h>

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));

#define NV (ATTN_BK / VW)             /* vectors per score row */
#define MR (VW >= 16 ? 4 : VW >= 8 ? 2 : 1) /* rows per score micro-tile */
#define PV_ROWS 4                     /* rows per P.V micro-tile */
#define PV_VECS (VW >= 16 ? 4 : VW >= 8 ? 2 : 16) /* vectors of D per P.V micro-tile */

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vset1(float x) { return (vf){0} + x; }
static inline vf vmax(vf a, vf b) {
    vi gt = a > b;
    vi ai, bi;
    memcpy(&ai, &a, sizeof a);
    memcpy(&bi, &b, sizeof b);
    vi r = (ai & gt) | (bi & ~gt);
    vf out;
    memcpy(&out, &r, sizeof out);
    return out;
}
static inline float vhmax(vf a) {
    float m = a[0];
    for (int i = 1; i < VW; i++) m = a[i] > m ? a[i] : m;
    return m;
}
static inline float vhsum(vf a) {
    float s = 0;
    for (int i = 0; i < VW; i++) s += a[i];
    return s;
}

/* exp(x) for x <= 0 (scores minus their running max), Cephes polynomial,
 * ~2 ulp; exactly 0 below -87.3 (and for -inf), where expf is subnormal. */
static inline vf vexp(vf x) {
    const vf lo = vset1(-87.3f);
    vi keep = x >= lo;
    x = vmax(x, lo);
    vf t = x * 1.44269504088896341f;
    vf n = (t + 12582912.0f) - 12582912.0f; /* round to nearest */
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vf p = vset1(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    memcpy(&scale, &e, sizeof scale);
    vf y = p * scale;
    vi yi;
    memcpy(&yi, &y, sizeof yi);
    yi &= keep;
    memcpy(&y, &yi, sizeof y);
    return y;
}

/* One vector of a K/V row in its storage type, as f32. */
static inline vf vload_kv(const void *row, qkv_dtype t, int d) {
    if (t == QKV_DTYPE_F32) return vload((const float *)row + d);
    vh h;
    memcpy(&h, (const uint16_t *)row + d, sizeof h);
    vu u = __builtin_convertvector(h, vu);
    vf f;
    if (t == QKV_DTYPE_BF16) {
        u <<= 16;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    /* f16: move exponent and mantissa into place, rebias by 2^112 (this also
     * normalises subnormals), then restore inf/NaN exponents and the sign. */
    vu mag = (u & 0x7fffu) << 13;
    memcpy(&f, &mag, sizeof f);
    f = f * 0x1p112f;
    vu fb;
    memcpy(&fb, &f, sizeof fb);
    vu infnan = (vu)((u & 0x7c00u) == 0x7c00u);
    fb |= infnan & 0x7f800000u;
    fb |= (u & 0x8000u) << 16;
    memcpy(&f, &fb, sizeof f);
    return f;
}

/* dst[ld] <- row[D] converted to f32, zero padded. */
static inline void convert_row(float *dst, const void *row, qkv_dtype t, int D, int ld) {
    int d = 0;
    for (; d + VW <= D; d += VW) vstore(dst + d, vload_kv(row, t, d));
    for (; d < D; d++) {
        if (t == QKV_DTYPE_F32) dst[d] = ((const float *)row)[d];
        else if (t == QKV_DTYPE_BF16) dst[d] = qkv_bf16_to_f32(((const uint16_t *)row)[d]);
        else dst[d] = qkv_f16_to_f32(((const uint16_t *)row)[d]);
    }
    for (; d < ld; d++) dst[d] = 0;
}

static inline const void *kv_row(const void *base, qkv_dtype t, int64_t offset) {
    return (const char *)base + offset * (int64_t)(t == QKV_DTYPE_F32 ? 4 : 2);
}

/* s[r][0..BK) = q[r] . kt[:, 0..BK) for rows [0, R), register-tiled. */
static void scores_transposed(float *s, const float *q, const float *kt, int R, int D, int ld) {
    int r0 = 0;
    for (; r0 + MR <= R; r0 += MR) {
        vf acc[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int n = 0; n < NV; n++) acc[r][n] = vset1(0);
        for (int d = 0; d < D; d++) {
            vf kv[NV];
            for (int n = 0; n < NV; n++) kv[n] = vload(kt + (size_t)d * ATTN_BK + n * VW);
            for (int r = 0; r < MR; r++) {
                vf qb = vset1(q[(size_t)(r0 + r) * ld + d]);
                for (int n = 0; n < NV; n++) acc[r][n] += qb * kv[n];
            }
        }
        for (int r = 0; r < MR; r++)
            for (int n = 0; n < NV; n++) vstore(s + (size_t)(r0 + r) * ATTN_BK + n * VW, acc[r][n]);
    }
    for (; r0 < R; r0++) {
        vf acc[NV];
        for (int n = 0; n < NV; n++) acc[n] = vset1(0);
        for (int d = 0; d < D; d++) {
            vf qb = vset1(q[(size_t)r0 * ld + d]);
            for (int n = 0; n < NV; n++) acc[n] += qb * vload(kt + (size_t)d * ATTN_BK + n * VW);
        }
        for (int n = 0; n < NV; n++) vstore(s + (size_t)r0 * ATTN_BK + n * VW, acc[n]);
    }
}

/* acc[r][:] += sum_j p[r][j] * vt[j][:] over nk keys, rows [0, R). */
static void accumulate_pv(float *acc, const float *p, const float *vt, int R, int nk, int ld) {
    for (int c0 = 0; c0 < ld; c0 += PV_VECS * VW) {
        int nvec = (ld - c0) / VW;
        if (nvec > PV_VECS) nvec = PV_VECS;
        int r0 = 0;
        if (nvec == PV_VECS) {
            for (; r0 + PV_ROWS <= R; r0 += PV_ROWS) {
                vf a[PV_ROWS][PV_VECS];
                for (int r = 0; r < PV_ROWS; r++)
                    for (int c = 0; c < PV_VECS; c++)
                        a[r][c] = vload(acc + (size_t)(r0 + r) * ld + c0 + c * VW);
                for (int j = 0; j < nk; j++) {
                    vf vv[PV_VECS];
                    for (int c = 0; c < PV_VECS; c++) vv[c] = vload(vt + (size_t)j * ld + c0 + c * VW);
                    for (int r = 0; r < PV_ROWS; r++) {
                        vf pb = vset1(p[(size_t)(r0 + r) * ATTN_BK + j]);
                        for (int c = 0; c < PV_VECS; c++) a[r][c] += pb * vv[c];
                    }
                }
                for (int r = 0; r < PV_ROWS; r++)
                    for (int c = 0; c < PV_VECS; c++)
                        vstore(acc + (size_t)(r0 + r) * ld + c0 + c * VW, a[r][c]);
            }
        }
        for (; r0 < R; r0++) {
            for (int c = 0; c < nvec; c++) {
                float *ap = acc + (size_t)r0 * ld + c0 + c * VW;
                vf a = vload(ap);
                for (int j = 0; j < nk; j++)
                    a += vset1(p[(size_t)r0 * ATTN_BK + j]) * vload(vt + (size_t)j * ld + c0 + c * VW);
                vstore(ap, a);
            }
        }
    }
}

void CAT(attn_rows_, SUFFIX)(const attn_problem *P, const attn_rows *rows, int j0, int j1,
                             attn_scratch *ws) {
    const int D = P->head_dim, ld = P->ld, nq = rows->nq;
    const int R = rows->nh * nq;
    const qkv_dtype t = P->kv_dtype;
    const int64_t kv_base = (int64_t)rows->kvh * P->kv_head_stride;
    /* absolute positions of the block's first and last query */
    const int p_first = P->kv_len - P->q_len + rows->i0;
    const int p_last = p_first + nq - 1;

    /* scaled queries, zero padded to ld */
    for (int hl = 0; hl < rows->nh; hl++) {
        int h = rows->kvh * P->group + rows->h0 + hl;
        for (int tq = 0; tq < nq; tq++) {
            const float *src = P->q + ((size_t)h * P->q_len + rows->i0 + tq) * D;
            float *dst = ws->q + (size_t)(hl * nq + tq) * ld;
            for (int d = 0; d < D; d++) dst[d] = src[d] * P->scale;
            for (int d = D; d < ld; d++) dst[d] = 0;
        }
    }
    for (int r = 0; r < R; r++) {
        ws->m[r] = -INFINITY;
        ws->l[r] = 0;
    }
    memset(ws->acc, 0, (size_t)R * ld * sizeof(float));

    int key_end = attn_key_end(P->mask, P->kv_len, p_last);
    if (j1 > key_end) j1 = key_end;
    for (int jt = j0; jt < j1; jt += ATTN_BK) {
        const int nk = j1 - jt < ATTN_BK ? j1 - jt : ATTN_BK;
        attn_tile_class cls = attn_classify_tile(P->mask, &P->ex, p_first, p_last, jt, jt + nk);
        if (cls == ATTN_TILE_EMPTY) continue;

        /* 1. scores s[r][j] = (scale q_r) . k_j */
        if (R >= 8) {
            for (int j = 0; j < nk; j++) {
                float *tmp = ws->vt; /* reuse a V row as conversion buffer */
                convert_row(tmp, kv_row(P->k, t, kv_base + (int64_t)(jt + j) * D), t, D, ld);
                for (int d = 0; d < D; d++) ws->kt[(size_t)d * ATTN_BK + j] = tmp[d];
            }
            for (int j = nk; j < ATTN_BK; j++)
                for (int d = 0; d < D; d++) ws->kt[(size_t)d * ATTN_BK + j] = 0;
            scores_transposed(ws->s, ws->q, ws->kt, R, D, ld);
        } else {
            float *krow = ws->kt; /* [ld] */
            for (int j = 0; j < nk; j++) {
                convert_row(krow, kv_row(P->k, t, kv_base + (int64_t)(jt + j) * D), t, D, ld);
                for (int r = 0; r < R; r++) {
                    vf a = vset1(0);
                    const float *qr = ws->q + (size_t)r * ld;
                    for (int d = 0; d < ld; d += VW) a += vload(qr + d) * vload(krow + d);
                    ws->s[(size_t)r * ATTN_BK + j] = vhsum(a);
                }
            }
        }

        /* 2. mask: keys past the tile's end and, in partial tiles, hidden keys */
        for (int r = 0; r < R; r++) {
            float *sr = ws->s + (size_t)r * ATTN_BK;
            for (int j = nk; j < ATTN_BK; j++) sr[j] = -INFINITY;
            if (cls == ATTN_TILE_PARTIAL) {
                int p = p_first + r % nq;
                for (int j = 0; j < nk; j++)
                    if (!attn_rule_visible(P->mask, p, jt + j) || attn_excl_has(&P->ex, jt + j))
                        sr[j] = -INFINITY;
            }
        }

        /* 3. online softmax: new max, rescale factor, probabilities, running sum */
        for (int r = 0; r < R; r++) {
            float *sr = ws->s + (size_t)r * ATTN_BK;
            vf mx = vload(sr);
            for (int n = 1; n < NV; n++) mx = vmax(mx, vload(sr + n * VW));
            float m_new = fmaxf(ws->m[r], vhmax(mx));
            if (m_new == -INFINITY) { /* nothing visible yet in this row */
                memset(sr, 0, ATTN_BK * sizeof(float));
                ws->alpha[r] = 1;
                continue;
            }
            vf sum = vset1(0);
            for (int n = 0; n < NV; n++) {
                vf pv = vexp(vload(sr + n * VW) - m_new);
                vstore(sr + n * VW, pv);
                sum += pv;
            }
            float alpha = ws->m[r] == -INFINITY ? 0.0f : expf(ws->m[r] - m_new);
            ws->alpha[r] = alpha;
            ws->l[r] = ws->l[r] * alpha + vhsum(sum);
            ws->m[r] = m_new;
        }

        /* 4. acc = alpha * acc + P V */
        for (int r = 0; r < R; r++) {
            if (ws->alpha[r] == 1.0f) continue;
            vf a = vset1(ws->alpha[r]);
            float *ar = ws->acc + (size_t)r * ld;
            for (int d = 0; d < ld; d += VW) vstore(ar + d, vload(ar + d) * a);
        }
        for (int j = 0; j < nk; j++)
            convert_row(ws->vt + (size_t)j * ld, kv_row(P->v, t, kv_base + (int64_t)(jt + j) * D), t,
                        D, ld);
        accumulate_pv(ws->acc, ws->s, ws->vt, R, nk, ld);
    }
}
