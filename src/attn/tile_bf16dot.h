/*
 * tile_bf16dot.h — the block path of tile_impl.h with bf16 dot products
 * (AVX512_BF16 vdpbf16ps: per f32 lane, acc += a0*b0 + a1*b1 over a pair of
 * bf16), for the flash-bf16 kernel. Included by tile_impl.h when ATTN_BF16DOT
 * is defined (tile_avx512bf16.c); it runs every block of such a call, even one
 * of a few rows, so a call has one rounding rule. The tile walk (rows_start,
 * tiles_next), the soft-capping, the mask and the online softmax are the f32
 * code.
 *
 * What is rounded to bf16, and nothing else: the scaled queries and the
 * probabilities p. K and V are used as stored when they are bf16 (no
 * conversion at all), rounded to bf16 once per tile when f32 or f16 (a finite
 * value past bf16's range to its largest finite value, bf16_round). Products
 * of two bf16 are exact in f32 and accumulate in f32, the softmax runs in f32,
 * so the error is that of two bf16 roundings (2^-9 relative each), as in any
 * bf16 attention; tests/test_attn_kernels.c bounds it.
 *
 * Layouts (pairs are two bf16 in one 32-bit lane, low half first):
 *   qt2 [D/2, RP]   pair (q_r[2i], q_r[2i+1]) for row r: lanes run across rows
 *   K   [nk, D]     bf16 rows; pair i of key j is one 32-bit broadcast
 *   pt2 [nk/2, RP]  pair (p[2i][r], p[2i+1][r]) for row r, broadcast per row
 *   v2  [nk/2, ld]  pair (v[2i][c], v[2i+1][c]): lanes run across columns
 * Requires D even (the caller falls back to f32 otherwise).
 */

/* P·V rows per micro-kernel: 4, the fastest on the CPUs with AVX512_BF16
 * (pv2_colchunk's tail covers R % 4). */
#define MR_BF16 4

/* The next tile's K and V rows (n of them, after the nk = ATTN_BK rows at
 * ksrc / vsrc) into L2 while this tile computes: a block streams its keys
 * from L3 or DRAM once per 16 positions (chunked prefill against a long KV). */
static void prefetch_tile(const void *ksrc, const void *vsrc, qkv_dtype t, int D, int n) {
    const size_t es = qkv_dtype_size(t), bytes = (size_t)n * D * es, off = (size_t)ATTN_BK * D * es;
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch((const char *)ksrc + off + o, 0, 2);
        __builtin_prefetch((const char *)vsrc + off + o, 0, 2);
    }
}

/* Rounding to bf16 here is round-to-nearest-even, except that a finite value
 * beyond the largest finite bf16 (0x7f7f, 3.39e38) becomes that value with
 * its sign, not inf: FLT_MAX in K would otherwise turn 0 x k into NaN where
 * the f32 kernels score 0 (qkv/attn.h, "Non-finite numbers"). inf and NaN stay. */
#define BF16_MAX_BITS 0x7f7f0000u
static inline uint16_t bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > BF16_MAX_BITS && a < 0x7f800000u) return (uint16_t)(((u & 0x80000000u) | BF16_MAX_BITS) >> 16);
    return qkv_f32_to_bf16(x);
}

/* 16 floats rounded to bf16 as bf16_round does: the hardware's rounding,
 * redone with the saturation only when it gave an inf (rare: two compares
 * a vector otherwise, where the saturation itself cost flash-bf16 5% with
 * f32 K/V on Zen 4). */
INLINE __m256bh bf16_round16(__m512 f) {
    __m256bh h = _mm512_cvtneps_pbh(f);
    __m256i w;
    memcpy(&w, &h, sizeof w);
    const __mmask16 inf = _mm256_cmpeq_epi16_mask(_mm256_and_si256(w, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7f80));
    if (__builtin_expect(inf != 0, 0)) {
        const __m512 big = _mm512_castsi512_ps(_mm512_set1_epi32((int)BF16_MAX_BITS));
        const __m512 a = _mm512_abs_ps(f);
        const __mmask16 over = _mm512_cmp_ps_mask(a, big, _CMP_GT_OQ) & _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
        h = _mm512_cvtneps_pbh(_mm512_mask_mov_ps(f, over, _mm512_or_ps(big, _mm512_and_ps(f, _mm512_set1_ps(-0.0f)))));
    }
    return h;
}

INLINE __m512bh as_bh(__m512i x) {
    __m512bh r;
    memcpy(&r, &x, sizeof r);
    return r;
}

/* 16 values of a K/V row from column c, rounded to bf16 (c + 16 <= D). */
INLINE __m256i row16_bf16(const void *row, qkv_dtype t, int c) {
    if (t == QKV_DTYPE_BF16) return _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c));
    __m512 f = t == QKV_DTYPE_F32 ? _mm512_loadu_ps((const float *)row + c)
                                  : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c)));
    __m256bh h = bf16_round16(f);
    __m256i out;
    memcpy(&out, &h, sizeof out);
    return out;
}

static uint16_t elem_bf16(const void *row, qkv_dtype t, int c) {
    if (t == QKV_DTYPE_BF16) return ((const uint16_t *)row)[c];
    if (t == QKV_DTYPE_F32) return bf16_round(((const float *)row)[c]);
    return bf16_round(qkv_f16_to_f32(((const uint16_t *)row)[c]));
}

/* st[k][r0 ..] = sum over pairs i of qt2[i][r0 ..] . k_k pair i, keys k < mk. */
INLINE void qk2_micro(float *st, const uint32_t *qt2, const uint16_t *kp, int ks, int DP, int RP, int r0,
                      const int mk, const int rcv) {
    __m512 a[MK][RCV];
    for (int k = 0; k < mk; k++)
        for (int n = 0; n < rcv; n++) a[k][n] = _mm512_setzero_ps();
    for (int i = 0; i < DP; i++) {
        __m512bh qv[RCV];
        for (int n = 0; n < rcv; n++) qv[n] = as_bh(_mm512_loadu_si512(qt2 + (size_t)i * RP + r0 + n * 16));
        for (int k = 0; k < mk; k++) {
            uint32_t pair;
            memcpy(&pair, kp + (size_t)k * ks + 2 * i, sizeof pair);
            __m512bh kb = as_bh(_mm512_set1_epi32((int)pair));
            for (int n = 0; n < rcv; n++) a[k][n] = _mm512_dpbf16_ps(a[k][n], qv[n], kb);
        }
    }
    for (int k = 0; k < mk; k++)
        for (int n = 0; n < rcv; n++) _mm512_storeu_ps(st + (size_t)k * RP + r0 + n * 16, a[k][n]);
}

INLINE void qk2_rowchunk(float *st, const uint32_t *qt2, const uint16_t *kp, int ks, int nk, int DP, int RP,
                         int r0, const int rcv) {
    int j = 0;
    for (; j + MK <= nk; j += MK) qk2_micro(st + (size_t)j * RP, qt2, kp + (size_t)j * ks, ks, DP, RP, r0, MK, rcv);
    st += (size_t)j * RP;
    kp += (size_t)j * ks;
    switch (nk - j) {
    case 5: qk2_micro(st, qt2, kp, ks, DP, RP, r0, 5, rcv); break;
    case 4: qk2_micro(st, qt2, kp, ks, DP, RP, r0, 4, rcv); break;
    case 3: qk2_micro(st, qt2, kp, ks, DP, RP, r0, 3, rcv); break;
    case 2: qk2_micro(st, qt2, kp, ks, DP, RP, r0, 2, rcv); break;
    case 1: qk2_micro(st, qt2, kp, ks, DP, RP, r0, 1, rcv); break;
    default: break;
    }
}

static void qk2_tile(float *st, const uint32_t *qt2, const uint16_t *kp, int ks, int nk, int DP, int RP) {
    for (int r0 = 0; r0 < RP; r0 += RCV * 16) {
        int rcv = (RP - r0) / 16;
        if (rcv >= 4) qk2_rowchunk(st, qt2, kp, ks, nk, DP, RP, r0, 4);
        else if (rcv == 3) qk2_rowchunk(st, qt2, kp, ks, nk, DP, RP, r0, 3);
        else if (rcv == 2) qk2_rowchunk(st, qt2, kp, ks, nk, DP, RP, r0, 2);
        else qk2_rowchunk(st, qt2, kp, ks, nk, DP, RP, r0, 1);
    }
}

/* acc[r0 + i][c0 + 16c ..] += sum over key pairs of pt2[jp][r0 + i] . v2[jp][c0 + 16c ..]. */
INLINE void pv2_micro(float *acc, int ld, const uint32_t *pt2, int RP, const uint32_t *v2, int njp, int r0, int c0,
                      const int mr, const int nc) {
    __m512 a[MR_BF16][NC];
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < nc; c++) a[i][c] = _mm512_loadu_ps(acc + (size_t)(r0 + i) * ld + c0 + c * 16);
    for (int jp = 0; jp < njp; jp++) {
        __m512i vv[NC];
        for (int c = 0; c < nc; c++) {
            vv[c] = _mm512_loadu_si512(v2 + (size_t)jp * ld + c0 + c * 16);
            KEEP_IN_REG(vv[c]);
        }
        for (int i = 0; i < mr; i++) {
            __m512bh pb = as_bh(_mm512_set1_epi32((int)pt2[(size_t)jp * RP + r0 + i]));
            for (int c = 0; c < nc; c++) a[i][c] = _mm512_dpbf16_ps(a[i][c], as_bh(vv[c]), pb);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(acc + (size_t)(r0 + i) * ld + c0 + c * 16, a[i][c]);
}

INLINE void pv2_colchunk(float *acc, int ld, const uint32_t *pt2, int RP, const uint32_t *v2, int njp, int R,
                         int c0, const int nc) {
    int r0 = 0;
    for (; r0 + MR_BF16 <= R; r0 += MR_BF16) pv2_micro(acc, ld, pt2, RP, v2, njp, r0, c0, MR_BF16, nc);
    switch (R - r0) {
    case 3: pv2_micro(acc, ld, pt2, RP, v2, njp, r0, c0, 3, nc); break;
    case 2: pv2_micro(acc, ld, pt2, RP, v2, njp, r0, c0, 2, nc); break;
    case 1: pv2_micro(acc, ld, pt2, RP, v2, njp, r0, c0, 1, nc); break;
    default: break;
    }
}

static void pv2_tile(float *acc, int ld, const uint32_t *pt2, int RP, const uint32_t *v2, int njp, int R) {
    for (int c0 = 0; c0 < ld; c0 += NC * 16) {
        int nc = (ld - c0) / 16;
        if (nc >= 4) pv2_colchunk(acc, ld, pt2, RP, v2, njp, R, c0, 4);
        else if (nc == 3) pv2_colchunk(acc, ld, pt2, RP, v2, njp, R, c0, 3);
        else if (nc == 2) pv2_colchunk(acc, ld, pt2, RP, v2, njp, R, c0, 2);
        else pv2_colchunk(acc, ld, pt2, RP, v2, njp, R, c0, 1);
    }
}

/* pt2[jp][r] = (bf16 p[2jp][r], bf16 p[2jp+1][r]); a missing last key is 0. */
static void pack_p(uint32_t *pt2, const float *st, int RP, int nk) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(interleave);
    for (int jp = 0; jp < (nk + 1) / 2; jp++)
        for (int r = 0; r < RP; r += 16) {
            __m512 a = _mm512_loadu_ps(st + (size_t)(2 * jp) * RP + r);
            __m512 b = 2 * jp + 1 < nk ? _mm512_loadu_ps(st + (size_t)(2 * jp + 1) * RP + r) : _mm512_setzero_ps();
            __m512bh both = _mm512_cvtne2ps_pbh(b, a); /* words 0..15: a, 16..31: b */
            __m512i w;
            memcpy(&w, &both, sizeof w);
            _mm512_storeu_si512(pt2 + (size_t)jp * RP + r, _mm512_permutexvar_epi16(idx, w));
        }
}

/* v2[jp][c] = (bf16 v[2jp][c], bf16 v[2jp+1][c]) for c < ld (0 past D and past the last key). */
static void pack_v(uint32_t *v2, const void *vsrc, qkv_dtype t, int nk, int D, int ld) {
    for (int jp = 0; jp < (nk + 1) / 2; jp++) {
        const void *ra = kv_row(vsrc, t, (int64_t)(2 * jp) * D);
        const void *rb = 2 * jp + 1 < nk ? kv_row(vsrc, t, (int64_t)(2 * jp + 1) * D) : NULL;
        uint32_t *dst = v2 + (size_t)jp * ld;
        int c = 0;
        for (; c + 16 <= D; c += 16) {
            __m512i lo = _mm512_cvtepu16_epi32(row16_bf16(ra, t, c));
            __m512i hi = rb ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(row16_bf16(rb, t, c)), 16) : _mm512_setzero_si512();
            _mm512_storeu_si512(dst + c, _mm512_or_si512(lo, hi));
        }
        for (; c < D; c++) dst[c] = elem_bf16(ra, t, c) | (uint32_t)(rb ? elem_bf16(rb, t, c) : 0) << 16;
        for (; c < ld; c++) dst[c] = 0;
    }
}

/* nk K rows as bf16 rows of D (kb: [nk, D]). */
static void pack_k(uint16_t *kb, const void *ksrc, qkv_dtype t, int nk, int D) {
    for (int j = 0; j < nk; j++) {
        const void *row = kv_row(ksrc, t, (int64_t)j * D);
        uint16_t *dst = kb + (size_t)j * D;
        int c = 0;
        for (; c + 16 <= D; c += 16) _mm256_storeu_si256((__m256i *)(dst + c), row16_bf16(row, t, c));
        for (; c < D; c++) dst[c] = elem_bf16(row, t, c);
    }
}

_Static_assert(ATTN_BK / 2 * ATTN_BLOCK_ROWS <= ATTN_PART, "flash-bf16's packed p [BK / 2, RP] lives in ws->part");

static void rows_block_bf16(const attn_problem *P, const attn_rows *rows, int j0, int j1, attn_scratch *ws) {
    const int D = P->head_dim, DP = D / 2, ld = P->ld, nq = rows->nq;
    const int R = rows->nh * nq, RP = (R + 15) / 16 * 16;
    const qkv_dtype t = P->kv_dtype;
    const int64_t kv_base = (int64_t)rows->kvh * P->kv_head_stride;
    const int p_first = P->kv_len - P->q_len + rows->i0, p_last = p_first + nq - 1;
    uint32_t *qt2 = (uint32_t *)(void *)ws->q;    /* [DP, RP] */
    uint16_t *kb = (uint16_t *)(void *)ws->kt;    /* [BK, D] */
    uint32_t *v2 = (uint32_t *)(void *)ws->vt;    /* [BK / 2, ld] */
    uint32_t *pt2 = (uint32_t *)(void *)ws->part; /* [BK / 2, RP] */

    /* scaled queries rounded to bf16, row by row (a row of bf16 is its pairs
     * in order), then transposed pair by pair into qt2; padding rows are 0 */
    uint32_t *qrows = (uint32_t *)(void *)ws->acc; /* [R, DP], before acc is cleared */
    for (int hl = 0; hl < rows->nh; hl++) {
        int h = rows->kvh * P->group + rows->h0 + hl;
        for (int tq = 0; tq < nq; tq++) {
            const float *src = P->q + ((size_t)h * P->q_len + rows->i0 + tq) * D;
            uint16_t *dst = (uint16_t *)(void *)(qrows + (size_t)(hl * nq + tq) * DP);
            const __m512 sc = _mm512_set1_ps(P->scale);
            int d = 0;
            for (; d + 16 <= D; d += 16) {
                __m256bh b = bf16_round16(_mm512_mul_ps(_mm512_loadu_ps(src + d), sc));
                memcpy(dst + d, &b, sizeof b);
            }
            for (; d < D; d++) dst[d] = bf16_round(src[d] * P->scale);
        }
    }
    const float *qsrc[ATTN_MAX_ROWS]; /* the pair rows, as 32-bit words for transpose16_scaled */
    for (int r = 0; r < R; r++) qsrc[r] = (const float *)(const void *)(qrows + (size_t)r * DP);
    const int it = DP / 16 * 16, rt = R / 16 * 16; /* the corner i < it, r < rt through registers */
    for (int i0 = 0; i0 < it; i0 += 16)
        for (int r0 = 0; r0 < rt; r0 += 16)
            transpose16_scaled((float *)(void *)(qt2 + (size_t)i0 * RP + r0), RP, qsrc + r0, i0, 1.0f);
    for (int i = 0; i < DP; i++) {
        uint32_t *row = qt2 + (size_t)i * RP;
        for (int r = i < it ? rt : 0; r < R; r++) row[r] = qrows[(size_t)r * DP + i];
        for (int r = R; r < RP; r++) row[r] = 0;
    }
    rows_start(ws, R, RP, ld, nq, p_first);

    for (tile_walk w = tiles_start(P, j0, j1, p_last); tiles_next(&w, P, p_first, p_last);) {
        const int jt = w.jt, nk = w.nk, j_end = w.end;
        const attn_tile_class cls = w.cls;
        const void *ksrc = kv_row(P->k, t, kv_base + (int64_t)jt * D);
        const void *vsrc = kv_row(P->v, t, kv_base + (int64_t)jt * D);
        prefetch_tile(ksrc, vsrc, t, D,
                      jt + ATTN_BK < j_end ? (j_end - jt - ATTN_BK < ATTN_BK ? j_end - jt - ATTN_BK : ATTN_BK) : 0);

        /* 1. scores from bf16 pairs: K read in place when it is bf16 */
        const uint16_t *kp = ksrc;
        if (t != QKV_DTYPE_BF16) {
            pack_k(kb, ksrc, t, nk, D);
            kp = kb;
        }
        qk2_tile(ws->s, qt2, kp, D, nk, DP, RP);
        if (P->softcap > 0) softcap_tile(ws->s, NULL, RP, RP, nk, P->softcap); /* as the f32 path, on f32 scores */

        /* 2, 3. mask and online softmax, in f32 as in the f32 path */
        if (cls == ATTN_TILE_PARTIAL) mask_tile(ws->s, ws->pos, RP, RP, P, jt, nk);
        softmax_tile(ws->s, ws->m, ws->l, ws->alpha, RP, RP, nk, NULL);

        /* 4. acc = alpha * acc + P V with p and V as bf16 pairs of keys */
        for (int r = 0; r < R; r++) {
            if (ws->alpha[r] == 1.0f) continue;
            __m512 a = _mm512_set1_ps(ws->alpha[r]);
            float *ar = ws->acc + (size_t)r * ld;
            for (int d = 0; d < ld; d += 16) _mm512_storeu_ps(ar + d, _mm512_mul_ps(_mm512_loadu_ps(ar + d), a));
        }
        pack_p(pt2, ws->s, RP, nk);
        pack_v(v2, vsrc, t, nk, D, ld);
        pv2_tile(ws->acc, ld, pt2, RP, v2, (nk + 1) / 2, R);
    }
}
