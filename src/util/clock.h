/*
 * clock.h — the one monotonic clock of libqkv's tools: the CLI's timers
 * (cli_now_s), qkv bench's roofline loops and the bench programs. A static
 * inline in a header, so that a bench program built outside the Makefile
 * (bench/ scripts) needs no object for it.
 */
#ifndef QKV_UTIL_CLOCK_H
#define QKV_UTIL_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double util_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif /* QKV_UTIL_CLOCK_H */
