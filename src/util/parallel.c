/*
 * parallel.c — util_parallel_for on a small pool of persistent threads (see
 * parallel.h). Not OpenMP: libgomp's idle threads spin for milliseconds (a
 * policy read from the environment once, at load), taking the time slices
 * the working threads need on a shared machine. Here a waiting thread spins,
 * then sleeps on a futex, and how long it spins depends on the machine:
 *   - up to POOL_SPIN_LONG pauses (~0.5 ms) when the system's other runnable
 *     threads (/proc/loadavg's fourth field less the pool's threads awake
 *     when it is read) and the loop's threads fit in the CPUs this process
 *     may use: a worker is then still spinning when a decode step's next
 *     loop comes, since a futex wake-up costs tens of microseconds in a VM;
 *   - more than that: POOL_SPIN pauses (~4 us), then sleep, since a
 *     spinning thread would burn the time slices its partner needs.
 * The caller reads the load at most every POOL_LOAD_PERIOD_MS, at the start
 * of a loop; workers use the budget it last set (pool_spin_budget).
 *
 * A run: the caller fills pool.job, hands it to each worker it needs by
 * bumping that worker's own `go` word (and waking it if it sleeps), runs
 * thread 0's share itself, then waits for `remaining` to fall to zero. Only
 * the workers a run hands it to read the job, and the caller does not touch
 * the job again before they have all counted themselves out. A static run
 * is OpenMP's split, but a thread that has finished its own part takes the
 * items left in the others' (pool_run): on a busy machine a worker can wait
 * a whole time slice (milliseconds) to be scheduled, or be descheduled in
 * the middle of its part, and the loop's other threads then finish it
 * instead of waiting. Once every item is taken, the caller revokes the offer
 * of every worker that has not started (pool_worker.claim) and counts it out
 * itself: there is nothing left for it to do.
 *
 * Sleeping without a lost wake-up: a sleeper sets its `sleeping` flag, then
 * reads the word it waits on (again inside FUTEX_WAIT); a waker writes the
 * word, then reads the flag. Both are sequentially consistent, so either the
 * sleeper sees the new word or the waker sees the flag and calls FUTEX_WAKE.
 */
#include "util/parallel.h"

#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX_THREADS 256 /* larger requests run on this many threads */
#ifndef POOL_SPIN /* -DPOOL_SPIN=N builds the variants docs/benchmarks-history.md compares */
#define POOL_SPIN 256 /* pauses before a waiting thread sleeps on a crowded machine (~4 us on Ice Lake) */
#endif
#define POOL_SPIN_LONG 32768 /* ... and on a machine with a CPU free for each of the loop's threads (~0.5 ms) */
#define POOL_LOAD_PERIOD_MS 20

/* Static: one thread's run of items [next, end), taken one at a time from
 * the front by its owner and, once they have finished their own, by the
 * others (a line each, so the owner's taking costs one uncontended atomic). */
typedef struct {
    _Alignas(64) _Atomic int64_t next;
    int64_t end;
} pool_run;

typedef struct {
    qkv_item_fn fn;
    void *ctx;
    int64_t n_items;
    int n_threads; /* threads that have items (static: the runs), caller included */
    int chunk;     /* 0: static runs; > 0: dynamic, this many items at a time */
    _Atomic int64_t next;        /* dynamic: the first item nobody has taken */
    _Atomic uint32_t remaining;  /* workers of this run not yet done */
    pool_run run[POOL_MAX_THREADS]; /* static: thread t's run */
} pool_job;

/* A worker's part in the run it was handed (pool_worker.claim): the caller
 * sets OFFERED before it bumps go; the worker moves it to TAKEN before it
 * reads the job, or the caller, once every item of the run is taken, to
 * REVOKED, and then neither waits for the worker nor lets it touch the job. */
enum { CLAIM_REVOKED, CLAIM_OFFERED, CLAIM_TAKEN }; /* 0: a new worker has no offer */

typedef struct {
    _Alignas(64) _Atomic uint32_t go; /* bumped by the caller: a run for this worker */
    _Atomic uint32_t sleeping;       /* 1 while in FUTEX_WAIT on go */
    _Atomic uint32_t claim;          /* CLAIM_*: its part in the run last handed to it */
    pthread_t tid;
} pool_worker;

static struct {
    pthread_mutex_t lock; /* held by the one run in flight */
    int n_workers;        /* started so far; workers[w] is thread w + 1 */
    pool_worker workers[POOL_MAX_THREADS - 1];
    pool_job job;
    _Atomic uint32_t caller_sleeping; /* 1 while the caller is in FUTEX_WAIT on remaining */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic int spin_budget = POOL_SPIN; /* pauses before sleeping, set by pool_read_load */

int pool_spin_budget(int runnable, int ours_awake, int team, int cpus) {
    if (runnable < 1) return POOL_SPIN; /* unknown: the reader itself runs */
    const int others = runnable > ours_awake ? runnable - ours_awake : 0;
    return others + team <= cpus ? POOL_SPIN_LONG : POOL_SPIN;
}

int pool_parse_runnable(const char *loadavg) {
    /* "0.70 1.26 1.54 3/160 27654": the runnable count before the slash */
    const char *p = loadavg;
    for (int field = 0; field < 3; field++) {
        while (*p && *p != ' ') p++;
        while (*p == ' ') p++;
    }
    int n = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && n < 1000000; p++, digits++) n = n * 10 + (*p - '0');
    return digits && *p == '/' ? n : -1;
}

/* Sets spin_budget from the system's runnable threads and a loop of `team`
 * threads, at most once every POOL_LOAD_PERIOD_MS (the pool lock is held).
 * The count includes the caller and every worker not asleep on its futex
 * (spinning or still running a loop): those are taken out, or our own
 * threads would be the load (with a busy process on each of 2 CPUs, 3 or 4
 * runnable, as the worker slept or not: the long spin half of the time,
 * 24% of qkv run's CPU time in the worker's spin, docs/benchmarks-history.md).
 * Unreadable: the short spin. */
static void pool_read_load(int team) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    const long long ms = (now.tv_sec - last.tv_sec) * 1000LL + (now.tv_nsec - last.tv_nsec) / 1000000;
    if (last.tv_sec != 0 && ms < POOL_LOAD_PERIOD_MS) return;
    last = now;
    char buf[128];
    int runnable = -1;
    const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k > 0) {
            buf[k] = 0;
            runnable = pool_parse_runnable(buf);
        }
    }
    int ours_awake = 1; /* the caller */
    for (int w = 0; w < pool.n_workers; w++) ours_awake += !atomic_load(&pool.workers[w].sleeping);
    atomic_store_explicit(&spin_budget, pool_spin_budget(runnable, ours_awake, team, qkv_cpu_count()),
                          memory_order_relaxed);
}

static void futex_wait(_Atomic uint32_t *word, uint32_t old) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Returns *word once it differs from old: spins, then sleeps. */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic uint32_t *sleeping) {
    uint32_t v;
    const int spin = atomic_load_explicit(&spin_budget, memory_order_relaxed);
    for (int i = 0; i < spin; i++) {
        if ((v = atomic_load_explicit(word, memory_order_acquire)) != old) return v;
        _mm_pause();
    }
    for (;;) {
        atomic_store(sleeping, 1);
        if ((v = atomic_load(word)) != old) break;
        futex_wait(word, old);
    }
    atomic_store(sleeping, 0);
    return v;
}

/* Stores v into *word and wakes the thread sleeping on it, if one is. */
static void post(_Atomic uint32_t *word, uint32_t v, _Atomic uint32_t *sleeping) {
    atomic_store(word, v);
    if (atomic_load(sleeping)) futex_wake(word);
}

/* Runs, on `thread`, the items of run v that nobody has taken yet. */
static void take_run(pool_job *j, int v, int thread) {
    pool_run *r = &j->run[v];
    for (int64_t it; (it = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed)) < r->end;)
        j->fn(j->ctx, it, thread);
}

/* Runs items until none is left: dynamic, the next chunk of the shared
 * counter; static, this thread's own run, then what is left of the others'. */
static void run_share(pool_job *j, int thread) {
    if (j->chunk > 0) {
        for (;;) {
            const int64_t i0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
            if (i0 >= j->n_items) return;
            const int64_t i1 = i0 + j->chunk < j->n_items ? i0 + j->chunk : j->n_items;
            for (int64_t it = i0; it < i1; it++) j->fn(j->ctx, it, thread);
        }
    }
    for (int k = 0; k < j->n_threads; k++) take_run(j, (thread + k) % j->n_threads, thread);
}

static void *worker_main(void *arg) {
    pool_worker *w = arg;
    const int thread = (int)(w - pool.workers) + 1;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_change(&w->go, seen, &w->sleeping);
        /* an offer the caller has taken back (or one this worker already
         * served, whose go it sees late) is not this worker's to run */
        uint32_t offered = CLAIM_OFFERED;
        if (!atomic_compare_exchange_strong(&w->claim, &offered, CLAIM_TAKEN)) continue;
        run_share(&pool.job, thread);
        const uint32_t left = atomic_fetch_sub(&pool.job.remaining, 1) - 1;
        if (left == 0 && atomic_load(&pool.caller_sleeping)) futex_wake(&pool.job.remaining);
    }
    return NULL;
}

/* A forked child has none of the parent's workers (and may have forked in
 * the middle of another thread's run): it starts from an empty pool. */
static void pool_after_fork(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pool.n_workers = 0;
    for (int w = 0; w < POOL_MAX_THREADS - 1; w++) {
        atomic_store(&pool.workers[w].go, 0);
        atomic_store(&pool.workers[w].sleeping, 0);
        atomic_store(&pool.workers[w].claim, CLAIM_REVOKED);
    }
    atomic_store(&pool.caller_sleeping, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

/* Starts workers up to n (fewer if the system refuses threads); the pool lock is held. */
static void pool_grow(int n) {
    pthread_once(&atfork_once, register_atfork);
    while (pool.n_workers < n) {
        pool_worker *w = &pool.workers[pool.n_workers];
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) return;
        pthread_detach(w->tid);
        pool.n_workers++;
    }
}

void util_parallel_start(int n_threads) {
    if (n_threads > POOL_MAX_THREADS) n_threads = POOL_MAX_THREADS;
    if (n_threads <= 1) return;
    pthread_mutex_lock(&pool.lock);
    pool_grow(n_threads - 1);
    pthread_mutex_unlock(&pool.lock);
}

void util_parallel_for(int64_t n_items, int n_threads, int chunk, qkv_item_fn fn, void *ctx) {
    if (n_items <= 0) return;
    if (n_threads > POOL_MAX_THREADS) n_threads = POOL_MAX_THREADS;
    /* threads past n_items would find no item, static or dynamic */
    const int active = n_items < n_threads ? (int)n_items : n_threads;
    if (active <= 1 || pthread_mutex_trylock(&pool.lock) != 0) {
        for (int64_t it = 0; it < n_items; it++) fn(ctx, it, 0);
        return;
    }
    pool_read_load(active);
    pool_grow(active - 1);
    const int n_workers = pool.n_workers < active - 1 ? pool.n_workers : active - 1;
    pool_job *j = &pool.job;
    j->fn = fn;
    j->ctx = ctx;
    j->n_items = n_items;
    j->n_threads = active;
    j->chunk = chunk > 0 ? chunk : 0;
    atomic_store(&j->next, 0);
    if (j->chunk == 0) { /* OpenMP's schedule(static) split over the threads that have items */
        const int64_t q = n_items / active, r = n_items % active;
        for (int t = 0; t < active; t++) {
            const int64_t i0 = t * q + (t < r ? t : r);
            atomic_store_explicit(&j->run[t].next, i0, memory_order_relaxed);
            j->run[t].end = i0 + q + (t < r);
        }
    }
    atomic_store(&j->remaining, (uint32_t)n_workers);
    for (int w = 0; w < n_workers; w++) {
        pool_worker *pw = &pool.workers[w];
        atomic_store(&pw->claim, CLAIM_OFFERED);
        post(&pw->go, atomic_load(&pw->go) + 1, &pw->sleeping);
    }
    /* the caller's share, then every item left (static: also the runs of
     * threads the system would not start) */
    run_share(j, 0);
    /* Every item is taken now. A worker that has not started yet (still
     * waking, or descheduled on a busy machine) took none: revoke its offer
     * instead of waiting a futex wake-up or a time slice for it. */
    for (int w = 0; w < n_workers; w++) {
        uint32_t offered = CLAIM_OFFERED;
        if (atomic_compare_exchange_strong(&pool.workers[w].claim, &offered, CLAIM_REVOKED))
            atomic_fetch_sub(&j->remaining, 1);
    }
    uint32_t left;
    while ((left = atomic_load(&j->remaining)) != 0) wait_change(&j->remaining, left, &pool.caller_sleeping);
    pthread_mutex_unlock(&pool.lock);
}

int qkv_cpu_count(void) {
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}
