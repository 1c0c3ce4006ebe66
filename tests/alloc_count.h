/*
 * alloc_count.h — counts heap allocations while enabled: the test runner
 * replaces malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign,
 * valloc and pvalloc (glibc's documented way to replace its allocator, see
 * "Replacing malloc" in the glibc manual), forwarding each to glibc's
 * __libc_* twin. The replacement is the process's malloc, so it sees every
 * allocation: the test's own, libqkv's (linked in statically) and those of
 * shared libraries such as libgomp, from any thread.
 */
#ifndef QKV_ALLOC_COUNT_H
#define QKV_ALLOC_COUNT_H

#include <stdint.h>

/* Zeroes the counter and starts counting. */
void alloc_count_start(void);
/* Stops counting; returns the allocations made since alloc_count_start. */
int64_t alloc_count_stop(void);

#endif
