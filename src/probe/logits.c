/* logits.c — the normaliser and the top of a logit vector, for the probes that score
 * next-token distributions (ablate: KL and probabilities; stream: NLL;
 * needle: the greedy answer). */
#include "probe/internal.h"

#include <math.h>

double probe_log_sum_exp(const float *x, int n) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

int probe_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
