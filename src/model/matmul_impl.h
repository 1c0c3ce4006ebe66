/*
 * matmul_impl.h — the matmul kernels, written once over a vector of VW floats
 * (GCC vector extensions, util/simd.h's vocabulary) and compiled per ISA
 * by matmul_avx512.c (VW 16), matmul_avx2.c (VW 8) and matmul_scalar.c
 * (VW 4: plain C vectors, SSE2 on baseline x86-64, scalar code where there
 * are none). Their readable reference
 * twin is model_matmul_reference (matmul.c); tests/test_matmul.c compares
 * every ISA with a double-precision oracle over types and shapes.
 *
 * One call computes out[t, r] = sum_c x[t, c] * W[r, c] for the weight rows
 * r0 <= r < r1 of one thread's block and every token t < n, two ways:
 *   - fused (n <= MM_FUSED_MAX, decode; F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 *     Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): each (sub-)block of 32
 *     weights is decoded in registers (codes unpacked, scaled) and
 *     multiplied into every token's accumulators; no f32 row is written, the
 *     weights are read once.
 *   - tiled (larger n, or other types): the block's rows are dequantised once
 *     into scratch by the same decoding (F32 rows are read in place; types
 *     not listed above by qkv_dequantize), then a register-tiled
 *     micro-kernel holds MR rows x NR tokens of vector accumulators along
 *     cols; every VW partial vectors are folded by a shuffle tree into one
 *     vector of VW dot products.
 * Activations stay f32 and every product is f32 (no 8-bit activations).
 * Decoded weights equal qkv_dequantize's bit for bit, even where d * q + m
 * becomes one fused multiply-add: an f16 scale (11 significant bits, times a
 * 6-bit K-quant scale at most) times a code of at most 8 bits is exact in
 * f32 (at most 25 bits: 11 + 6 + 8), so only the final operation rounds,
 * once, either way.
 * Requires VW, SUFFIX defined by the including file.
 */
#include "model/internal.h"
#include "gguf/quant.h"

#include "util/simd.h"

#include <string.h>

/* Micro-tile: MR weight rows x NR tokens of accumulators, plus MR weight
 * vectors and one x vector in registers (32 of them with AVX-512, 16
 * otherwise); MR * NR a multiple of VW (whole fold trees). */
#if VW == 16
#define MR 4
#define NR 4
#else
#define MR 4
#define NR 2
#endif
#if (MR * NR) % VW
#error "the fold tree needs MR * NR to be a multiple of VW"
#endif

#define QK 32          /* elements per (sub-)block decoded at once */
#define QV (QK / VW)   /* vectors per (sub-)block */
#define NA (QV < 4 ? QV : 4) /* accumulators per token in the fused path */

/* Little-endian bf16 at p (any alignment); f16_at is quant.h's. */
INLINE float bf16_at(const uint8_t *p) {
    uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* VW consecutive weights of a float-typed row (F32, F16, BF16) from element c. */
INLINE vf load_float_w(const uint8_t *row, qkv_ggml_type t, int64_t c) {
    if (t == QKV_GGML_TYPE_F32) {
        vf v;
        memcpy(&v, row + 4 * c, sizeof v);
        return v;
    }
    const uint8_t *p = row + 2 * c;
    return t == QKV_GGML_TYPE_BF16 ? vload_bf16(p) : vload_f16(p);
}

INLINE float float_w_at(const uint8_t *row, qkv_ggml_type t, int64_t c) {
    if (t == QKV_GGML_TYPE_F32) {
        float f;
        memcpy(&f, row + 4 * c, 4);
        return f;
    }
    return t == QKV_GGML_TYPE_BF16 ? bf16_at(row + 2 * c) : f16_at(row + 2 * c);
}

/* ------------------------------------------------------- block types */

/* Block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (32 elements a block) and the
 * K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256 elements, 8 sub-blocks of 32).
 * Byte layouts in dequant.c. Each helper is a constant once t is (t is a
 * literal in every caller). */
static int is_block_type(qkv_ggml_type t) {
    return t == QKV_GGML_TYPE_Q8_0 || t == QKV_GGML_TYPE_Q4_0 || t == QKV_GGML_TYPE_Q4_1 ||
           t == QKV_GGML_TYPE_Q5_0 || t == QKV_GGML_TYPE_Q5_1 || t == QKV_GGML_TYPE_Q2_K ||
           t == QKV_GGML_TYPE_Q3_K || t == QKV_GGML_TYPE_Q4_K || t == QKV_GGML_TYPE_Q5_K ||
           t == QKV_GGML_TYPE_Q6_K;
}
static int is_float_type(qkv_ggml_type t) {
    return t == QKV_GGML_TYPE_F32 || t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16;
}
INLINE size_t block_bytes(qkv_ggml_type t) {
    switch (t) {
    case QKV_GGML_TYPE_Q8_0: return 34;
    case QKV_GGML_TYPE_Q4_0: return 18;
    case QKV_GGML_TYPE_Q4_1: return 20;
    case QKV_GGML_TYPE_Q5_0: return 22;
    case QKV_GGML_TYPE_Q5_1: return 24;
    case QKV_GGML_TYPE_Q2_K: return 84;
    case QKV_GGML_TYPE_Q3_K: return 110;
    case QKV_GGML_TYPE_Q4_K: return 144;
    case QKV_GGML_TYPE_Q5_K: return 176;
    default: return 210; /* Q6_K */
    }
}
INLINE int block_subs(qkv_ggml_type t) { /* 32-element sub-blocks per block */
    return t == QKV_GGML_TYPE_Q2_K || t == QKV_GGML_TYPE_Q3_K || t == QKV_GGML_TYPE_Q4_K ||
                   t == QKV_GGML_TYPE_Q5_K || t == QKV_GGML_TYPE_Q6_K
               ? 8
               : 1;
}

/* -1 in lane i where bit l + i of h is set, else 0 (hv: h in every lane):
 * the fifth bits of Q5_0 and Q5_1 codes l .. l + VW - 1, each tested by a
 * constant mask (no variable shifts: SSE2 has none). */
INLINE vi fifth_bits(vu hv, int l) {
    vu bit;
    for (int i = 0; i < VW; i++) bit[i] = 1u << (l + i);
    return (hv & bit) != 0;
}

#if VW == 16
/* 4-bit codes with AVX-512: the 16 lanes of a vector hold all 16 possible
 * weights of a (sub-)block, table[q] = q * scale + offset, so a vector of
 * weights is one lane permutation of it (vpermps reads only the index's low
 * 4 bits: the low nibbles need no mask). */
INLINE vf table_lookup(vf table, vi q) {
    __m512 t, r;
    __m512i i;
    memcpy(&t, &table, sizeof t);
    memcpy(&i, &q, sizeof i);
    r = _mm512_permutexvar_ps(i, t);
    vf out;
    memcpy(&out, &r, sizeof out);
    return out;
}
/* 5-bit codes: the same over two tables of 16 (vpermt2ps: index bit 4
 * picks hi). */
INLINE vf table2_lookup(vf lo, vf hi, vi q) {
    __m512 a, b, r;
    __m512i i;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, &hi, sizeof b);
    memcpy(&i, &q, sizeof i);
    r = _mm512_permutex2var_ps(a, i, b);
    vf out;
    memcpy(&out, &r, sizeof out);
    return out;
}
static const vf k_iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
/* The f16 at p in every lane (one broadcast load and one conversion). */
INLINE vf f16_splat(const uint8_t *p) {
    __m512 f = _mm512_cvtph_ps(_mm256_set1_epi16((short)(p[0] | p[1] << 8)));
    vf out;
    memcpy(&out, &f, sizeof out);
    return out;
}
/* A Q5 index for table2_lookup: bits 0..3 those of q, bit 4 bit l + i of
 * h (hv: h in every lane, rotated right by l + i - 4 onto bit 4; the
 * permutation ignores the bits above). */
INLINE vi q5_index(vi q, vu hv, int l) {
    static const vi k_rot = {-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    __m512i h, c, r;
    memcpy(&h, &hv, sizeof h);
    const vi counts = (k_rot + l) & 31;
    memcpy(&c, &counts, sizeof c);
    memcpy(&r, &q, sizeof r);
    r = _mm512_ternarylogic_epi32(r, _mm512_rorv_epi32(h, c), _mm512_set1_epi32(15), 0xE4); /* 15 ? q : rot, bitwise */
    vi out;
    memcpy(&out, &r, sizeof out);
    return out;
}
#endif

/* The 32 weights of sub-block j of the block at blk as QV vectors:
 *   Q8_0 d * q;  Q4_0 d * (q - 8);  Q4_1 d * q + m  (q: element l < 16 the low
 *   nibble of qs[l], l + 16 its high nibble);
 *   Q5_0 d * (q - 16);  Q5_1 d * q + m  (nibbles as Q4_0, fifth bit l of qh);
 *   Q2_K (d * sc) * q - (dmin * m)  (q: 2 bits of qs[32 (j / 4) + l] at
 *   2 (j % 4); sc, m per 16 elements);
 *   Q3_K (d * (sc - 32)) * q  (low bits as Q2_K, minus 4 unless bit j of
 *   hmask[l]; sc per 16 elements, k3_scale);
 *   Q4_K, Q5_K (d * sc) * q - (dmin * m)  (q: nibbles of qs[32 (j / 2) + l],
 *   low for even j; Q5_K's fifth bit is bit j of qh[l]);
 *   Q6_K (d * scale) * (q - 32)  (sub-block j = 4 half + k, see dequant.c). */
INLINE void decode_sub(vf *w, const uint8_t *blk, int j, qkv_ggml_type t) {
    switch (t) {
    case QKV_GGML_TYPE_Q8_0: {
        const vf d = vset1(f16_at(blk));
        for (int v = 0; v < QV; v++) w[v] = to_float(load_i8(blk + 2 + v * VW)) * d;
        return;
    }
    case QKV_GGML_TYPE_Q4_0:
    case QKV_GGML_TYPE_Q4_1: {
        const uint8_t *qs = blk + (t == QKV_GGML_TYPE_Q4_0 ? 2 : 4);
        const float d = f16_at(blk), m = t == QKV_GGML_TYPE_Q4_1 ? f16_at(blk + 2) : 0.0f;
#if VW == 16
        const vf table = t == QKV_GGML_TYPE_Q4_0 ? (k_iota - 8) * d : k_iota * d + m;
        const vi q = load_u8(qs);
        w[0] = table_lookup(table, q);
        w[1] = table_lookup(table, q >> 4);
#else
        for (int v = 0; v < QV; v++) {
            const int l = v * VW; /* first element of this vector */
            vi q = load_u8(qs + l % 16);
            q = l < 16 ? q & 15 : q >> 4;
            if (t == QKV_GGML_TYPE_Q4_0) w[v] = to_float(q - 8) * d;
            else w[v] = to_float(q) * d + m;
        }
#endif
        return;
    }
    case QKV_GGML_TYPE_Q5_0:
    case QKV_GGML_TYPE_Q5_1: {
        const int q51 = t == QKV_GGML_TYPE_Q5_1;
        const uint8_t *qs = blk + (q51 ? 8 : 6);
        const vu hv = (vu){0} + u32_at(blk + (q51 ? 4 : 2)); /* the fifth bits in every lane */
#if VW == 16
        const vf d = f16_splat(blk), m = q51 ? f16_splat(blk + 2) : vset1(0);
        const vf lo = q51 ? k_iota * d + m : (k_iota - 16) * d, hi = q51 ? (k_iota + 16) * d + m : k_iota * d;
        const vi q = load_u8(qs);
        w[0] = table2_lookup(lo, hi, q5_index(q, hv, 0));
        w[1] = table2_lookup(lo, hi, q5_index(q >> 4, hv, 16));
#else
        const float d = f16_at(blk), m = q51 ? f16_at(blk + 2) : 0.0f;
        for (int v = 0; v < QV; v++) {
            const int l = v * VW; /* first element of this vector */
            vi q = load_u8(qs + l % 16);
            q = l < 16 ? q & 15 : q >> 4;
            const vi set = fifth_bits(hv, l);
            if (q51) w[v] = to_float(q | (set & 16)) * d + m;
            else w[v] = to_float(q + (~set & -16)) * d; /* q - 16 unless the fifth bit is set */
        }
#endif
        return;
    }
    case QKV_GGML_TYPE_Q2_K:
    case QKV_GGML_TYPE_Q3_K: {
        const int q3 = t == QKV_GGML_TYPE_Q3_K;
        const uint8_t *qs = blk + (q3 ? 32 : 16) + 32 * (j / 4), *hmask = blk;
        const int shift = 2 * (j % 4);
        const float d = f16_at(blk + (q3 ? 108 : 80)), dmin = q3 ? 0.0f : f16_at(blk + 82);
        for (int v = 0; v < QV; v++) {
            const int l = v * VW; /* a vector lies within one 16-element scale group */
            const int g = 2 * j + l / 16;
            const vi q = (load_u8(qs + l) >> shift) & 3;
            if (q3) {
                const vi minus4 = ((~load_u8(hmask + l) >> j) & 1) << 2; /* 4 where bit j is clear */
                w[v] = vset1(d * (float)(k3_scale(g, blk + 96) - 32)) * to_float(q - minus4);
            } else {
                w[v] = to_float(q) * (d * (float)(blk[g] & 15)) - dmin * (float)(blk[g] >> 4);
            }
        }
        return;
    }
    case QKV_GGML_TYPE_Q4_K:
    case QKV_GGML_TYPE_Q5_K: {
        int sc, mn;
        k_scale_min(j, blk + 4, &sc, &mn);
        const float dl = f16_at(blk) * (float)sc, ml = f16_at(blk + 2) * (float)mn;
        const int q5 = t == QKV_GGML_TYPE_Q5_K;
        const uint8_t *qs = blk + (q5 ? 48 : 16) + 32 * (j / 2), *qh = blk + 16;
        const int shift = 4 * (j % 2);
#if VW == 16
        if (!q5) {
            const vf table = k_iota * dl - ml;
            for (int v = 0; v < QV; v++) w[v] = table_lookup(table, load_u8(qs + v * VW) >> shift);
            return;
        }
#endif
        for (int v = 0; v < QV; v++) {
            vi q = (load_u8(qs + v * VW) >> shift) & 15;
            if (q5) q |= ((load_u8(qh + v * VW) >> j) & 1) << 4;
            w[v] = to_float(q) * dl - ml;
        }
        return;
    }
    default: { /* Q6_K */
        const int half = j / 4, k = j % 4;
        const uint8_t *ql = blk + 64 * half + 32 * (k % 2), *qh = blk + 128 + 32 * half;
        const int8_t *scales = (const int8_t *)(blk + 192 + 8 * half + 2 * k);
        const float d = f16_at(blk + 208);
        const int shift = 4 * (k / 2);
        for (int v = 0; v < QV; v++) {
            const int l = v * VW; /* a vector lies within one 16-element scale group */
            vi q = ((load_u8(ql + l) >> shift) & 15) | ((load_u8(qh + l) >> (2 * k)) & 3) << 4;
            w[v] = vset1(d * (float)scales[l / 16]) * to_float(q - 32);
        }
        return;
    }
    }
}

/* ---------------------------------------------------------- dequantise */

INLINE void dequant_blocks(float *y, const uint8_t *src, qkv_ggml_type t, int64_t cols) {
    const size_t bs = block_bytes(t);
    for (int64_t s = 0; s < cols / QK; s++) { /* sub-block s of the row */
        vf w[QV];
        decode_sub(w, src + (size_t)(s / block_subs(t)) * bs, (int)(s % block_subs(t)), t);
        for (int v = 0; v < QV; v++) vstore(y + s * QK + v * VW, w[v]);
    }
}

INLINE void dequant_floats(float *y, const uint8_t *src, qkv_ggml_type t, int64_t cols) {
    int64_t c = 0;
    for (; c + VW <= cols; c += VW) vstore(y + c, load_float_w(src, t, c));
    for (; c < cols; c++) y[c] = float_w_at(src, t, c);
}

/* y[cols] <- one row of type t (F32, F16, BF16 and the block types;
 * qkv_dequantize for any other). */
void CAT(model_mm_dequant_, SUFFIX)(float *y, const void *src, qkv_ggml_type t, int64_t cols) {
    const uint8_t *s = src;
    switch (t) { /* one loop per type, so the decoding is inlined without a branch */
    case QKV_GGML_TYPE_F32: memcpy(y, s, (size_t)cols * 4); break;
    case QKV_GGML_TYPE_F16: dequant_floats(y, s, QKV_GGML_TYPE_F16, cols); break;
    case QKV_GGML_TYPE_BF16: dequant_floats(y, s, QKV_GGML_TYPE_BF16, cols); break;
    case QKV_GGML_TYPE_Q8_0: dequant_blocks(y, s, QKV_GGML_TYPE_Q8_0, cols); break;
    case QKV_GGML_TYPE_Q4_0: dequant_blocks(y, s, QKV_GGML_TYPE_Q4_0, cols); break;
    case QKV_GGML_TYPE_Q4_1: dequant_blocks(y, s, QKV_GGML_TYPE_Q4_1, cols); break;
    case QKV_GGML_TYPE_Q5_0: dequant_blocks(y, s, QKV_GGML_TYPE_Q5_0, cols); break;
    case QKV_GGML_TYPE_Q5_1: dequant_blocks(y, s, QKV_GGML_TYPE_Q5_1, cols); break;
    case QKV_GGML_TYPE_Q2_K: dequant_blocks(y, s, QKV_GGML_TYPE_Q2_K, cols); break;
    case QKV_GGML_TYPE_Q3_K: dequant_blocks(y, s, QKV_GGML_TYPE_Q3_K, cols); break;
    case QKV_GGML_TYPE_Q4_K: dequant_blocks(y, s, QKV_GGML_TYPE_Q4_K, cols); break;
    case QKV_GGML_TYPE_Q5_K: dequant_blocks(y, s, QKV_GGML_TYPE_Q5_K, cols); break;
    case QKV_GGML_TYPE_Q6_K: dequant_blocks(y, s, QKV_GGML_TYPE_Q6_K, cols); break;
    default: qkv_dequantize(y, s, t, cols, NULL); break;
    }
}

/* ---------------------------------------------------------- fused path */

/* out[j * ldo] = x_j . w for tokens j < nt (x_j = x + j * ldx), w one row of
 * a block type decoded in registers; NA accumulators per token. */
INLINE void fused_row_blocks(float *out, int64_t ldo, const float *x, int64_t ldx, const uint8_t *row,
                             int64_t cols, qkv_ggml_type t, const int nt) {
    const size_t bs = block_bytes(t);
    vf acc[MM_FUSED_MAX][NA];
    for (int j = 0; j < nt; j++)
        for (int a = 0; a < NA; a++) acc[j][a] = vset1(0);
    for (int64_t b = 0; b < cols / (QK * block_subs(t)); b++)
        for (int sb = 0; sb < block_subs(t); sb++) {
            const int64_t c = (b * block_subs(t) + sb) * QK; /* first element of the sub-block */
            vf w[QV];
            __builtin_prefetch(row + (size_t)b * bs + 4096); /* 4 KiB ahead: Q8_0 decode 1.4x over 1 KiB */
            decode_sub(w, row + (size_t)b * bs, sb, t);
            for (int v = 0; v < QV; v++)
                for (int j = 0; j < nt; j++) acc[j][v % NA] += w[v] * vload(x + j * ldx + c + v * VW);
        }
    for (int j = 0; j < nt; j++) {
        vf s = acc[j][0];
        for (int a = 1; a < NA; a++) s += acc[j][a];
        out[j * ldo] = vhsum(s);
    }
}

/* The same for a float-typed row (any cols: a scalar tail). */
INLINE void fused_row_floats(float *out, int64_t ldo, const float *x, int64_t ldx, const uint8_t *row,
                             int64_t cols, qkv_ggml_type t, const int nt) {
    vf acc[MM_FUSED_MAX][2];
    for (int j = 0; j < nt; j++) acc[j][0] = acc[j][1] = vset1(0);
    int64_t c = 0;
    for (; c + 2 * VW <= cols; c += 2 * VW) {
        vf w0 = load_float_w(row, t, c), w1 = load_float_w(row, t, c + VW);
        for (int j = 0; j < nt; j++) {
            acc[j][0] += w0 * vload(x + j * ldx + c);
            acc[j][1] += w1 * vload(x + j * ldx + c + VW);
        }
    }
    for (; c + VW <= cols; c += VW) {
        vf w0 = load_float_w(row, t, c);
        for (int j = 0; j < nt; j++) acc[j][0] += w0 * vload(x + j * ldx + c);
    }
    float s[MM_FUSED_MAX];
    for (int j = 0; j < nt; j++) s[j] = vhsum(acc[j][0] + acc[j][1]);
    for (; c < cols; c++) {
        float w = float_w_at(row, t, c);
        for (int j = 0; j < nt; j++) s[j] += w * x[j * ldx + c];
    }
    for (int j = 0; j < nt; j++) out[j * ldo] = s[j];
}

/* out[j * ldo + i] for rows i < nr (rs bytes apart from src), tokens j < nt. */
INLINE void fused_rows_nt(float *out, int64_t ldo, const float *x, int64_t ldx, const uint8_t *src, size_t rs,
                          int64_t nr, int64_t cols, qkv_ggml_type t, const int nt) {
    switch (t) { /* one loop per type, so the decoding is inlined without a branch */
#define ROWS(T, fn) \
    case T:         \
        for (int64_t i = 0; i < nr; i++) fn(out + i, ldo, x, ldx, src + i * rs, cols, T, nt); \
        break;
        ROWS(QKV_GGML_TYPE_F32, fused_row_floats)
        ROWS(QKV_GGML_TYPE_F16, fused_row_floats)
        ROWS(QKV_GGML_TYPE_BF16, fused_row_floats)
        ROWS(QKV_GGML_TYPE_Q8_0, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q4_0, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q4_1, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q5_0, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q5_1, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q2_K, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q3_K, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q4_K, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q5_K, fused_row_blocks)
        ROWS(QKV_GGML_TYPE_Q6_K, fused_row_blocks)
#undef ROWS
    default: break;
    }
}

/* ----------------------------------------------------------- tiled path */

/* sums[k] = horizontal sum of acc[k], k < VW. Each level adds the low and
 * high halves of every accumulator's lanes, two accumulators per vector:
 * after log2 VW levels lane k holds acc[k]'s sum. */
#if VW == 16
#define SHUF __builtin_shufflevector
INLINE void fold_tree(float *sums, const vf *acc) {
    vf a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* 16 lanes per accumulator -> 8 */
        a[i] = SHUF(acc[2 * i], acc[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               SHUF(acc[2 * i], acc[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int i = 0; i < 4; i++) /* 8 -> 4 */
        b[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               SHUF(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++) /* 4 -> 2 */
        c[i] = SHUF(b[2 * i], b[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               SHUF(b[2 * i], b[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    vstore(sums, SHUF(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) + /* 2 -> 1 */
                     SHUF(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31));
}
#elif VW == 8
#define SHUF __builtin_shufflevector
INLINE void fold_tree(float *sums, const vf *acc) {
    vf a[4], b[2];
    for (int i = 0; i < 4; i++) /* 8 lanes per accumulator -> 4 */
        a[i] = SHUF(acc[2 * i], acc[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
               SHUF(acc[2 * i], acc[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    for (int i = 0; i < 2; i++) /* 4 -> 2 */
        b[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
               SHUF(a[2 * i], a[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    vstore(sums, SHUF(b[0], b[1], 0, 2, 4, 6, 8, 10, 12, 14) + /* 2 -> 1 */
                     SHUF(b[0], b[1], 1, 3, 5, 7, 9, 11, 13, 15));
}
#else
INLINE void fold_tree(float *sums, const vf *acc) {
    vf a[2];
    for (int i = 0; i < 2; i++) /* 4 lanes per accumulator -> 2 */
        a[i] = __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 0, 1, 4, 5) +
               __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 2, 3, 6, 7);
    vstore(sums, __builtin_shufflevector(a[0], a[1], 0, 2, 4, 6) + /* 2 -> 1 */
                     __builtin_shufflevector(a[0], a[1], 1, 3, 5, 7));
}
#endif

/* out[j * ldo + i] = x_j . w_i for rows i < mr, tokens j < nt, where
 * x_j = x + j * ldx and w_i = w[i] (f32, cols long; w[i] for i >= mr may
 * repeat a valid row, its sums are dropped). Accumulator j * MR + i. */
INLINE void tile(float *out, int64_t ldo, const float *x, int64_t ldx, const float *const *w, int mr,
                 int64_t cols, const int nt) {
    vf acc[MR * NR];
    for (int k = 0; k < MR * NR; k++) acc[k] = vset1(0);
    int64_t c = 0;
    for (; c + VW <= cols; c += VW) {
        vf wv[MR];
        for (int i = 0; i < MR; i++) {
            wv[i] = vload(w[i] + c);
            KEEP_IN_REG(wv[i]);
        }
        for (int j = 0; j < nt; j++) {
            vf xv = vload(x + j * ldx + c);
            KEEP_IN_REG(xv);
            for (int i = 0; i < MR; i++) acc[j * MR + i] += wv[i] * xv;
        }
    }
    float sums[MR * NR];
    for (int k = 0; k < MR * NR; k += VW) fold_tree(sums + k, acc + k);
    for (; c < cols; c++)
        for (int j = 0; j < nt; j++)
            for (int i = 0; i < MR; i++) sums[j * MR + i] += w[i][c] * x[j * ldx + c];
    for (int j = 0; j < nt; j++)
        for (int i = 0; i < mr; i++) out[j * ldo + i] = sums[j * MR + i];
}

/* out[t * ldo + i] = x_t . w_i for every token t < n and rows i < nr of
 * wf (cols floats apart): NR tokens at a time, MR rows within. */
static void tiled_rows(float *out, int64_t ldo, const float *x, int n, const float *wf, int64_t nr, int64_t cols) {
    for (int j0 = 0; j0 < n; j0 += NR) {
        const int nt = n - j0 < NR ? n - j0 : NR;
        const float *xj = x + (size_t)j0 * cols;
        for (int64_t i0 = 0; i0 < nr; i0 += MR) {
            const int mr = nr - i0 < MR ? (int)(nr - i0) : MR;
            const float *w[MR];
            for (int i = 0; i < MR; i++) w[i] = wf + (i0 + (i < mr ? i : 0)) * cols;
            float *o = out + (size_t)j0 * ldo + i0;
            switch (nt) { /* the token count a constant in each copy */
            case 1: tile(o, ldo, xj, cols, w, mr, cols, 1); break;
            case 2: tile(o, ldo, xj, cols, w, mr, cols, 2); break;
#if NR > 2
            case 3: tile(o, ldo, xj, cols, w, mr, cols, 3); break;
            case 4: tile(o, ldo, xj, cols, w, mr, cols, 4); break;
#endif
            default: break;
            }
        }
    }
}

/* ---------------------------------------------------------------- entry */

void CAT(model_mm_rows_, SUFFIX)(float *out, const float *x, const qkv_gguf_tensor *w, int n, int64_t r0,
                                 int64_t r1, float *scratch) {
    const int64_t rows = w->shape[0], cols = w->shape[1], nr = r1 - r0;
    const size_t rs = qkv_ggml_row_size(w->type, cols);
    const uint8_t *src = (const uint8_t *)w->data + (size_t)r0 * rs;
    if (n <= MM_FUSED_MAX && (is_block_type(w->type) || is_float_type(w->type))) {
        switch (n) { /* the token count a constant in each copy */
        case 1: fused_rows_nt(out + r0, rows, x, cols, src, rs, nr, cols, w->type, 1); break;
        case 2: fused_rows_nt(out + r0, rows, x, cols, src, rs, nr, cols, w->type, 2); break;
        default: fused_rows_nt(out + r0, rows, x, cols, src, rs, nr, cols, w->type, 3); break;
        }
        return;
    }
    const float *wf = (const float *)(const void *)src; /* F32 rows are used in place */
    if (w->type != QKV_GGML_TYPE_F32) {
        for (int64_t i = 0; i < nr; i++) CAT(model_mm_dequant_, SUFFIX)(scratch + i * cols, src + i * rs, w->type, cols);
        wf = scratch;
    }
    tiled_rows(out + r0, rows, x, n, wf, nr, cols);
}
