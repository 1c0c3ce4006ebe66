/*
 * merge.c — the exact merge of partial attention results by log-sum-exp
 * (flash-decoding's combine; ring attention merges every block so). For one
 * row with partials (O1, l1) over key set A and (O2, l2) over a disjoint B:
 *   m = max(l1, l2)           (the larger LSE: both exponents <= 0, no overflow)
 *   a = e^(l1 - m), b = e^(l2 - m)
 *   LSE = m + log(a + b),  O = (a O1 + b O2) / (a + b)
 * which is softmax over A u B. A side with l = -inf (no visible key) has
 * weight 0; both -inf leaves the row at O = 0, LSE = -inf.
 * Weights in double so a merge of many blocks rounds no worse than one.
 */
#include "internal.h"

#include <math.h>

void cp_merge_rows(float *o, float *lse, const float *o_p, const float *lse_p, int n_rows, int head_dim) {
    for (int r = 0; r < n_rows; r++) {
        const double l1 = lse[r], l2 = lse_p[r];
        if (l2 == -INFINITY) continue;              /* nothing to add */
        float *out = o + (int64_t)r * head_dim;
        const float *add = o_p + (int64_t)r * head_dim;
        if (l1 == -INFINITY) {                      /* nothing so far */
            for (int c = 0; c < head_dim; c++) out[c] = add[c];
            lse[r] = (float)l2;
            continue;
        }
        const double m = l1 > l2 ? l1 : l2;
        const double a = exp(l1 - m), b = exp(l2 - m), s = a + b;
        for (int c = 0; c < head_dim; c++) out[c] = (float)((a * out[c] + b * add[c]) / s);
        lse[r] = (float)(m + log(s));
    }
}
