/* timing.h — the clock (libqkv's, util/clock.h) and the sort order of the
 * bench programs (model_steps.c, tile_ab.c, matmul_ab.c, fma_mix.c); not
 * part of libqkv. */
#ifndef QKV_BENCH_TIMING_H
#define QKV_BENCH_TIMING_H

#include "util/clock.h" /* the clock: util_now_s */

/* qsort's order for doubles, ascending. */
static inline int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
