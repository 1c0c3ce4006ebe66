/*
 * alloc_count.c — the allocation counter of alloc_count.h. Every allocating
 * entry point of the C library is defined here and forwarded to glibc's
 * __libc_* functions; free is forwarded unchanged. Counting is one atomic
 * add when enabled, one relaxed load otherwise; so is failure injection.
 */
#include "alloc_count.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

/* Prototypes for the obsolete entry points <stdlib.h> may not declare. */
void *memalign(size_t align, size_t size);
void *valloc(size_t size);
void *pvalloc(size_t size);

static atomic_int g_enabled;
static atomic_llong g_count, g_bytes;
static atomic_llong g_fail_at, g_fail_seen, g_fail_offset;

/* The executable's text (GNU ld's symbols): libqkv and the CLI are in it. */
extern const char __executable_start[], etext[];

static void count(size_t bytes) {
    if (atomic_load_explicit(&g_enabled, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_bytes, (long long)bytes, memory_order_relaxed);
    }
}

/* 1 if this allocation, made from caller, is the one to fail. */
static int fail_now(const void *caller) {
    if (!atomic_load_explicit(&g_fail_at, memory_order_relaxed)) return 0;
    const char *c = caller;
    if (c < __executable_start || c >= etext) return 0;
    if (atomic_fetch_add(&g_fail_seen, 1) + 1 != atomic_load(&g_fail_at)) return 0;
    atomic_store(&g_fail_offset, (long long)(c - __executable_start));
    errno = ENOMEM;
    return 1;
}
#define FAIL_NOW() fail_now(__builtin_extract_return_addr(__builtin_return_address(0)))

void alloc_fail_at(int64_t n) {
    atomic_store(&g_fail_seen, 0);
    atomic_store(&g_fail_offset, -1);
    atomic_store(&g_fail_at, n);
}

int64_t alloc_fail_seen(void) { return atomic_load(&g_fail_seen); }

int64_t alloc_fail_where(void) { return atomic_load(&g_fail_offset); }

void alloc_count_start(void) {
    atomic_store(&g_count, 0);
    atomic_store(&g_bytes, 0);
    atomic_store(&g_enabled, 1);
}

int64_t alloc_count_stop(void) {
    atomic_store(&g_enabled, 0);
    return atomic_load(&g_count);
}

int64_t alloc_count_bytes(void) { return atomic_load(&g_bytes); }

void *malloc(size_t size) {
    count(size);
    if (FAIL_NOW()) return NULL;
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
    count(n * size);
    if (FAIL_NOW()) return NULL;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
    count(size);
    if (FAIL_NOW()) return NULL;
    return __libc_realloc(p, size);
}

void free(void *p) { __libc_free(p); }

void *memalign(size_t align, size_t size) {
    count(size);
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size) {
    count(size);
    if (FAIL_NOW()) return NULL;
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size) {
    count(size);
    if (FAIL_NOW()) return ENOMEM;
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = __libc_memalign(align, size);
    if (!p && size) return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t size) {
    count(size);
    return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size);
}

void *pvalloc(size_t size) {
    count(size);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return __libc_memalign(page, (size + page - 1) / page * page);
}
