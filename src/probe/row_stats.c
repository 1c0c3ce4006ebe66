/*
 * row_stats.c — what one attention weight row says: its sink mass, the mass
 * on its first keys, its entropy and its strongest keys.
 */
#include "qkv/probe.h"

#include <math.h>
#include <string.h>

void qkv_row_stats_of(qkv_row_stats *s, const float *w, int n, int n_first) {
    memset(s, 0, sizeof *s);
    s->top = -1;
    s->top_other = -1;
    double first = 0, ent = 0;
    for (int j = 0; j < n; j++) {
        const float x = w[j];
        if (j < n_first) first += x;
        if (x > 0) ent -= (double)x * log((double)x);
        if (s->top < 0 || x > s->top_weight) {
            s->top = j;
            s->top_weight = x;
        }
        if (j >= n_first && (s->top_other < 0 || x > s->top_other_weight)) {
            s->top_other = j;
            s->top_other_weight = x;
        }
    }
    s->sink = n > 0 ? w[0] : 0;
    s->first = first;
    s->entropy = ent;
}
