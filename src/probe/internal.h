/* internal.h — what the probes share inside src/probe. */
#ifndef QKV_PROBE_INTERNAL_H
#define QKV_PROBE_INTERNAL_H

/* log sum_i exp(x[i]) in double, the max subtracted first.   x: [n], n >= 1 */
double probe_log_sum_exp(const float *x, int n);

/* The index of the largest x[i], the lowest on ties.   x: [n], n >= 1 */
int probe_argmax(const float *x, int n);

#endif
