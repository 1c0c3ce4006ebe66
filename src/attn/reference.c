/*
 * reference.c — attention exactly as the textbook writes it, the oracle every
 * other kernel is tested against:
 *   S = scale * Q K^T          the whole score table [Hq, Lq, Lk], in double
 *   S = c tanh(S / c)          soft-capping, where the call asks for it (c > 0)
 *   S[mask] = -inf
 *   P = softmax(S) row by row  pass 1: max, pass 2: exp and sum, pass 3: divide
 *   O = P V                    accumulated in double
 * No tiling, no SIMD, no tricks. It refuses tables of more than
 * QKV_REFERENCE_MAX_SCORES entries instead of trying to allocate them.
 * attn_reference is the kernel, on a resolved problem (a reference plan's
 * runs, plan.c); qkv_attn_reference checks a call and runs it.
 */
#include "attn/internal.h"

#include <float.h>
#include <math.h>

static double kv_at(const void *base, qkv_dtype t, int64_t i) {
    if (t == QKV_DTYPE_F32) return ((const float *)base)[i];
    if (t == QKV_DTYPE_BF16) return qkv_bf16_to_f32(((const uint16_t *)base)[i]);
    return qkv_f16_to_f32(((const uint16_t *)base)[i]);
}

/* One query head's rows, the loop's item (the score table is shared; each
 * head owns its slice). */
typedef struct {
    float *o;       /* [Hq, Lq, D] */
    float *lse;     /* [Hq, Lq] or NULL */
    float *weights; /* [Hq, Lq, Lk] or NULL */
    const attn_problem *P; /* q: [Hq, Lq, D]; k, v: [Hkv, Lk, D] each, heads kv_head_stride apart */
    double *scores; /* [Hq, Lq, Lk] */
} reference_call;

static void reference_head(void *ctx, int64_t item, int thread) {
    (void)thread;
    const reference_call *c = ctx;
    const attn_problem P = *c->P;
    const float *q = P.q;
    const void *k = P.k, *v = P.v;
    float *o = c->o, *lse = c->lse, *weights = c->weights;
    double *scores = c->scores;
    const int h = (int)item, Lq = P.q_len, Lk = P.kv_len, D = P.head_dim;
    const double scale = P.scale, cap = P.softcap;
    const int64_t kv_off = (int64_t)(h / P.group) * P.kv_head_stride;
    for (int i = 0; i < Lq; i++) {
        const float *qi = q + ((size_t)h * Lq + i) * D;
        double *s = scores + ((size_t)h * Lq + i) * Lk;
        /* scores, masked to -inf; a score beyond the float range is the
         * +-inf the float kernels compute (qkv/attn.h, "Non-finite numbers") */
        int n_visible = 0;
        for (int j = 0; j < Lk; j++) {
            if (!qkv_mask_visible(P.mask, Lq, Lk, i, j)) {
                s[j] = -INFINITY;
                continue;
            }
            n_visible++;
            double dot = 0;
            for (int e = 0; e < D; e++) dot += (double)qi[e] * kv_at(k, P.kv_dtype, kv_off + (int64_t)j * D + e);
            s[j] = dot * scale;
            if (fabs(s[j]) > FLT_MAX) s[j] = s[j] > 0 ? INFINITY : -INFINITY;
            if (cap > 0) s[j] = cap * tanh(s[j] / cap); /* +-inf becomes +-cap */
        }
        float *oi = o + ((size_t)h * Lq + i) * D;
        float *wi = weights ? weights + ((size_t)h * Lq + i) * Lk : NULL;
        if (n_visible == 0) { /* fully masked row: O = 0, LSE = -inf */
            for (int e = 0; e < D; e++) oi[e] = 0;
            if (wi)
                for (int j = 0; j < Lk; j++) wi[j] = 0;
            if (lse) lse[(size_t)h * Lq + i] = -INFINITY;
            continue;
        }
        /* pass 1: max; a NaN score makes it NaN */
        double mx = -INFINITY;
        for (int j = 0; j < Lk && !isnan(mx); j++) mx = isnan(s[j]) || s[j] > mx ? s[j] : mx;
        /* pass 2: exp and sum; when every visible score is -inf, subtract 0
         * (as the tiled kernels do): sum = 0, O = 0/0 = NaN, LSE = -inf */
        const double shift = mx == -INFINITY ? 0 : mx;
        double sum = 0;
        for (int j = 0; j < Lk; j++) {
            s[j] = exp(s[j] - shift); /* masked: exp(-inf) = 0 */
            sum += s[j];
        }
        /* pass 3: normalise, then O = P V over the visible keys (a masked
         * key's V never enters; a visible key's does, even at weight 0) */
        for (int j = 0; j < Lk; j++) s[j] /= sum;
        double acc[QKV_HEAD_DIM_MAX] = {0};
        for (int j = 0; j < Lk; j++) {
            if (!qkv_mask_visible(P.mask, Lq, Lk, i, j)) {
                s[j] = 0;
                continue;
            }
            for (int e = 0; e < D; e++) acc[e] += s[j] * kv_at(v, P.kv_dtype, kv_off + (int64_t)j * D + e);
        }
        for (int e = 0; e < D; e++) oi[e] = (float)acc[e];
        if (wi)
            for (int j = 0; j < Lk; j++) wi[j] = (float)s[j];
        if (lse) lse[(size_t)h * Lq + i] = (float)(mx + log(sum));
    }
}

qkv_status attn_reference(float *o, float *lse, float *weights, const attn_problem *P, int n_threads,
                          qkv_error *err) {
    const int Hq = P->n_q_head, Lq = P->q_len, Lk = P->kv_len;
    int64_t n_scores = (int64_t)Hq * Lq * Lk;
    if (n_scores > QKV_REFERENCE_MAX_SCORES)
        return util_fail(err, QKV_ERR_TOO_LARGE,
                        "reference attention: the score table [%d, %d, %d] would need %.1f GiB "
                        "(limit %.0f GiB); use the flash kernel",
                        Hq, Lq, Lk, (double)n_scores * 8 / (1 << 30),
                        (double)QKV_REFERENCE_MAX_SCORES * 8 / (1 << 30));
    double *scores = malloc((size_t)n_scores * sizeof(double)); /* [Hq, Lq, Lk] */
    if (!scores) return util_fail(err, QKV_ERR_NOMEM, "reference attention: cannot allocate the score table");
    const reference_call c = {.o = o, .lse = lse, .weights = weights, .P = P, .scores = scores};
    util_parallel_for(Hq, n_threads, 1, reference_head, (void *)&c);
    free(scores);
    return QKV_OK;
}

qkv_status qkv_attn_reference(float *o, float *lse, float *weights, const float *q,
                                   const void *k, const void *v, const qkv_attn_desc *d,
                                   qkv_error *err) {
    qkv_status st = attn_call_check(o, q, k, v, d, err);
    if (st) return st;
    attn_problem P;
    attn_problem_init(&P, d, q, k, v, NULL);
    return attn_reference(o, lse, weights, &P, attn_threads(d->n_threads), err);
}
