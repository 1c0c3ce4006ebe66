/*
 * alloc_count_hooks.c — alloc_count.h for the SANITIZE=1 build, which links
 * this file instead of alloc_count.c: AddressSanitizer replaces malloc itself
 * (a second replacement would hide every heap access from it), so the count
 * comes from its allocation hook, called on every malloc, calloc, realloc and
 * aligned allocation of any thread. gcc ships no
 * <sanitizer/allocator_interface.h>, so its one declaration is written here
 * (the sanitizer runtime's public interface, stable since LLVM 3.x).
 */
#include "../alloc_count.h"

#include <stdatomic.h>
#include <stddef.h>

int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));

static atomic_int g_enabled;
static atomic_llong g_count, g_bytes;

static void on_malloc(const volatile void *p, size_t size) {
    (void)p;
    if (atomic_load_explicit(&g_enabled, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_bytes, (long long)size, memory_order_relaxed);
    }
}

static void on_free(const volatile void *p) { (void)p; }

void alloc_count_start(void) {
    static atomic_int installed;
    if (!atomic_exchange(&installed, 1)) __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    atomic_store(&g_count, 0);
    atomic_store(&g_bytes, 0);
    atomic_store(&g_enabled, 1);
}

int64_t alloc_count_stop(void) {
    atomic_store(&g_enabled, 0);
    return atomic_load(&g_count);
}

int64_t alloc_count_bytes(void) { return atomic_load(&g_bytes); }
