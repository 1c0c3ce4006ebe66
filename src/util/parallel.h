/* parallel.h — the one parallel loop of the kernels (attention tiles, matmul row blocks). */
#ifndef QKV_UTIL_PARALLEL_H
#define QKV_UTIL_PARALLEL_H

#include <stdint.h>

/* fn(ctx, item, thread) for every item in [0, n_items) on n_threads OpenMP
 * threads (thread = omp_get_thread_num() < n_threads), scheduled dynamically
 * one item at a time, or statically in equal runs. One thread runs the loop
 * itself with thread 0: a parallel region of one thread costs libgomp a team
 * allocation, and the forward pass never allocates. (libgomp reuses a team
 * only for a region of the same size as the last, so alternating sizes above
 * one allocate too: keep a caller's count steady where that matters.) */
typedef void (*qkv_item_fn)(void *ctx, int64_t item, int thread);
void qkv_parallel_for(int64_t n_items, int n_threads, int dynamic, qkv_item_fn fn, void *ctx);

#endif
