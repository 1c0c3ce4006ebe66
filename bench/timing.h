/* timing.h — the clock and the sort order of the bench programs
 * (model_steps.c, tile_ab.c, matmul_ab.c); not part of libqkv. */
#ifndef QKV_BENCH_TIMING_H
#define QKV_BENCH_TIMING_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* qsort's order for doubles, ascending. */
static inline int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
