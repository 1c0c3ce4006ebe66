/* parallel.h — the one parallel loop of libqkv (attention tiles, matmul row
 * blocks, the probes' heads and rows) on libqkv's own thread pool, and the
 * default thread count. */
#ifndef QKV_UTIL_PARALLEL_H
#define QKV_UTIL_PARALLEL_H

#include "qkv/base.h"

#include <stdint.h>

/* fn(ctx, item, thread) once for every item in [0, n_items), on n_threads
 * threads: the caller is thread 0, the pool's workers 1 .. n_threads - 1.
 *   chunk 0: static — thread t starts on its own contiguous run of items
 *            (OpenMP's schedule(static) split: the first n_items % n_threads
 *            runs are one item longer), taking them in order, one at a time;
 *            a thread that has finished its run takes, one at a time, the
 *            items still left in the others' (so a thread descheduled on a
 *            busy machine holds the loop up by one item, not by its run);
 *   chunk c > 0: dynamic — each thread takes the next c items when it is free.
 * Either way a worker that has not started when the caller has taken the
 * last item takes no part (the caller does not wait for it).
 * Returns when every item has run. Workers are started at first need and kept
 * for the process; an idle one spins (up to ~0.5 ms while each of the loop's
 * threads has a CPU no other runnable thread needs, a few microseconds on a
 * busier machine),
 * then sleeps on a futex, so waiting costs little whatever else runs.
 * One call holds the pool at a time: a call made while another is in flight
 * (from another thread of the program, or from inside fn) runs its items in
 * order on the calling thread alone, as thread 0. The pool survives fork():
 * a child starts workers of its own. */
typedef void (*qkv_item_fn)(void *ctx, int64_t item, int thread);
void util_parallel_for(int64_t n_items, int n_threads, int chunk, qkv_item_fn fn, void *ctx);

/* Starts the pool's workers for loops of up to n_threads threads now, so
 * that the loops themselves create no thread (a thread's creation maps its
 * stack and may allocate):
 * the plans, which promise allocation-free runs (and the models that hold
 * them), call it when they are made. Fewer start if the system refuses threads (a loop then tries
 * again); a forked child starts with none. */
void util_parallel_start(int n_threads);

/* qkv_cpu_count (qkv/base.h) is defined in parallel.c too. */

/* How long a waiting thread spins (pause instructions) when `runnable`
 * threads are runnable system-wide, `ours_awake` of them the pool's (the
 * caller and its workers not asleep), a loop runs on `team` threads and this
 * process may use `cpus` CPUs: long while the others and the team are at
 * most cpus, short above that or when runnable is unknown (< 1). */
int pool_spin_budget(int runnable, int ours_awake, int team, int cpus);
/* The runnable-thread count of a /proc/loadavg line ("0.70 1.26 1.54 3/160
 * 27654" -> 3), or -1 if the line is not of that form. */
int pool_parse_runnable(const char *loadavg);

#endif
