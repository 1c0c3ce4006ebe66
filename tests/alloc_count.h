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
/* The bytes those allocations asked for (realloc: the new size). */
int64_t alloc_count_bytes(void);

/* Failure injection for the allocations qkv's own code makes (the caller's
 * address lies in this executable's text, where libqkv and the CLI are
 * linked; allocations inside glibc or libgomp are left alone): after
 * alloc_fail_at(n), the n-th such allocation returns NULL (ENOMEM) and every
 * other succeeds; n = 0 fails none. alloc_fail_seen: such allocations since
 * alloc_fail_at. */
void alloc_fail_at(int64_t n);
int64_t alloc_fail_seen(void);
/* Where the failed allocation was called: its offset in the executable (for
 * `addr2line -e EXE OFFSET`), or -1 when none failed yet. */
int64_t alloc_fail_where(void);

#endif
