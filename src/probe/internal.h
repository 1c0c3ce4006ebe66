/* internal.h — what the probes share inside src/probe. */
#ifndef QKV_PROBE_INTERNAL_H
#define QKV_PROBE_INTERNAL_H

#include "qkv.h"

/* log sum_i exp(x[i]) in double, the max subtracted first.   x: [n], n >= 1 */
double probe_log_sum_exp(const float *x, int n);

/* The index of the largest x[i], the lowest on ties.   x: [n], n >= 1 */
int probe_argmax(const float *x, int n);

/* Tells a probe's progress callback (NULL: nothing) that done of total
 * tokens have run; QKV_ERR_CANCELLED, the message naming the probe, when it
 * returns nonzero. */
qkv_status probe_progress(qkv_progress_fn fn, void *user, int64_t done, int64_t total, const char *probe,
                          qkv_error *err);

#endif
