/* parallel.c — qkv_parallel_for over OpenMP (see parallel.h). */
#include "util/parallel.h"

#include <omp.h>

void qkv_parallel_for(int64_t n_items, int n_threads, int dynamic, qkv_item_fn fn, void *ctx) {
    if (n_threads <= 1) {
        for (int64_t it = 0; it < n_items; it++) fn(ctx, it, 0);
    } else if (dynamic) {
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
        for (int64_t it = 0; it < n_items; it++) fn(ctx, it, omp_get_thread_num());
    } else {
#pragma omp parallel for num_threads(n_threads) schedule(static)
        for (int64_t it = 0; it < n_items; it++) fn(ctx, it, omp_get_thread_num());
    }
}
