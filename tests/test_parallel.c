/*
 * test_parallel.c — libqkv's thread pool (util/parallel.c): every item runs
 * once on a thread below n_threads; in a static loop the caller takes its
 * items in order (its own run of OpenMP's schedule(static) split, then what
 * is left of the others'), and a stalled worker's run is finished by the
 * caller instead of waited for; calls from inside an item and from two
 * threads at once finish,
 * in order on the caller; idle workers sleep (no CPU time while the caller
 * waits); a forked child gets a pool of its own; on one CPU, where the
 * caller revokes the offers of workers that have not started, every item
 * still runs once; qkv_cpu_count follows the
 * affinity mask; and two models decoding in two threads at once give the
 * logits one model gives alone, bit for bit.
 */
#include "testing.h"

#include "qkv.h"
#include "util/parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ITEMS 64

typedef struct {
    _Atomic int runs[MAX_ITEMS];   /* times item i ran */
    _Atomic int thread[MAX_ITEMS]; /* the thread it ran on */
    int n_threads;
    _Atomic int bad_thread;
    int64_t caller_last;   /* the last item the caller (thread 0) ran, -1 before */
    _Atomic int caller_out_of_order;
    int stall_ms;          /* > 0: a worker's first item sleeps this long */
    _Atomic int stalled;
} tally;

static void count_item(void *ctx, int64_t item, int thread) {
    tally *t = ctx;
    atomic_fetch_add(&t->runs[item], 1);
    atomic_store(&t->thread[item], thread);
    if (thread < 0 || thread >= t->n_threads) atomic_store(&t->bad_thread, 1);
    if (thread == 0) {
        if (item <= t->caller_last) atomic_store(&t->caller_out_of_order, 1);
        /* stalling: the caller's first item waits (up to 5 s) for a worker to stall */
        for (int waited = 0; t->stall_ms > 0 && t->caller_last < 0 && !atomic_load(&t->stalled) && waited < 50000;
             waited++) {
            const struct timespec tick = {0, 100 * 1000L};
            nanosleep(&tick, NULL);
        }
        t->caller_last = item;
    } else if (t->stall_ms > 0 && !atomic_exchange(&t->stalled, 1)) {
        const struct timespec stall = {0, t->stall_ms * 1000L * 1000L};
        nanosleep(&stall, NULL);
    }
}

/* Runs one loop and checks each item ran once, on an allowed thread (and,
 * static and alone in the pool, the caller's items in increasing order: its
 * own run, then the others' in thread order); returns failures. */
static int check_loop(int64_t n_items, int n_threads, int chunk, int alone) {
    tally t;
    memset(&t, 0, sizeof t);
    t.n_threads = n_threads;
    t.caller_last = -1;
    util_parallel_for(n_items, n_threads, chunk, count_item, &t);
    int bad = 0;
    for (int64_t i = 0; i < n_items; i++)
        if (atomic_load(&t.runs[i]) != 1) bad++;
    if (alone && chunk == 0) bad += atomic_load(&t.caller_out_of_order);
    return bad + atomic_load(&t.bad_thread);
}

TEST(parallel_for_runs_every_item_once) {
    static const int chunks[] = {0, 1, 3};
    for (int ci = 0; ci < 3; ci++)
        for (int nt = 1; nt <= 5; nt++)
            for (int64_t n = 0; n <= 37; n += (n < 9 ? 1 : 7)) {
                int bad = check_loop(n, nt, chunks[ci], 1);
                CHECK(bad == 0, "chunk %d, %d threads, %lld items: %d wrong", chunks[ci], nt, (long long)n, bad);
            }
    /* more threads asked for than the pool keeps: the run still covers every item */
    CHECK(check_loop(MAX_ITEMS, 300, 0, 1) == 0, "300 threads, static");
}

/* An item that runs a loop of its own: it must finish (on its thread, in order). */
typedef struct {
    _Atomic int inner_runs;
    _Atomic int inner_bad_thread;
} nest;

static void inner_item(void *ctx, int64_t item, int thread) {
    nest *n = ctx;
    (void)item;
    atomic_fetch_add(&n->inner_runs, 1);
    if (thread != 0) atomic_store(&n->inner_bad_thread, 1);
}

static void outer_item(void *ctx, int64_t item, int thread) {
    (void)item;
    (void)thread;
    util_parallel_for(10, 2, 0, inner_item, ctx);
}

/* A static loop whose worker stalls 300 ms on the first item it takes (a
 * thread descheduled on a busy machine; the caller waits for that before
 * its own first item): the caller finishes the worker's run itself, so the
 * worker runs that one item only. */
TEST(parallel_for_static_run_of_a_stalled_worker_is_finished_by_the_caller) {
    for (int nt = 2; nt <= 3; nt++) {
        tally t;
        memset(&t, 0, sizeof t);
        t.n_threads = nt;
        t.caller_last = -1;
        t.stall_ms = 300;
        util_parallel_for(MAX_ITEMS, nt, 0, count_item, &t);
        int by_workers = 0, bad = 0;
        for (int i = 0; i < MAX_ITEMS; i++) {
            bad += atomic_load(&t.runs[i]) != 1;
            by_workers += atomic_load(&t.thread[i]) != 0;
        }
        CHECK(bad == 0 && !atomic_load(&t.bad_thread), "%d threads: %d items not run once", nt, bad);
        CHECK(atomic_load(&t.stalled), "%d threads: no worker started in 5 s", nt);
        /* the stalled worker's one item; with 3 threads the other worker may
         * take its own run and some of the others' */
        if (nt == 2) CHECK(by_workers == 1, "2 threads: the stalled worker ran %d items, want 1", by_workers);
        CHECK(!atomic_load(&t.caller_out_of_order), "%d threads: the caller ran its items out of order", nt);
    }
}

TEST(parallel_for_nested_call_runs_on_the_caller) {
    nest n = {0};
    util_parallel_for(8, 2, 1, outer_item, &n);
    CHECK(atomic_load(&n.inner_runs) == 80, "inner items ran %d times, want 80", atomic_load(&n.inner_runs));
    CHECK(!atomic_load(&n.inner_bad_thread), "an inner loop ran off its caller");
}

/* Loops on both threads: the one that finds the pool busy runs its own loop serially. */
static void *hammer(void *arg) {
    int *bad = arg;
    for (int r = 0; r < 2000; r++) *bad += check_loop(1 + r % MAX_ITEMS, 2 + r % 3, r % 2, 0);
    return NULL;
}

TEST(parallel_for_from_two_threads_at_once) {
    pthread_t a, b;
    int bad_a = 0, bad_b = 0;
    CHECK(pthread_create(&a, NULL, hammer, &bad_a) == 0, "pthread_create");
    CHECK(pthread_create(&b, NULL, hammer, &bad_b) == 0, "pthread_create");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK(bad_a == 0 && bad_b == 0, "wrong items: %d and %d", bad_a, bad_b);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void busy_item(void *ctx, int64_t item, int thread) {
    (void)thread;
    volatile double *x = ctx;
    for (int i = 0; i < 100000; i++) x[item] += 1e-9 * i;
}

TEST(parallel_for_idle_workers_sleep) {
    volatile double x[4] = {0};
    util_parallel_for(4, 4, 0, busy_item, (void *)x); /* three workers, now idle */
    const struct timespec pause = {0, 200 * 1000 * 1000};
    const double c0 = cpu_seconds();
    nanosleep(&pause, NULL);
    const double used = cpu_seconds() - c0;
    /* spinning workers would burn ~0.6 s of CPU in 0.2 s; sleeping ones a few
     * tens of microseconds each before they sleep */
    CHECK(used < 0.03, "idle pool used %.3f s of CPU in 0.2 s", used);
}

TEST(parallel_for_in_a_forked_child) {
    CHECK(check_loop(16, 3, 0, 1) == 0, "parent, before fork"); /* the parent's workers exist */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* a child waiting on its parent's workers would hang: die instead */
        _exit(check_loop(37, 3, 0, 1) + check_loop(37, 3, 1, 1) == 0 ? 0 : 1);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's loops failed (status %#x)", st);
}

/* On one CPU a woken worker often cannot start before every item of a loop
 * is taken; the caller then revokes its offer and
 * returns without it. Thousands of loops, dynamic and static, 2 to 4
 * threads, in a child pinned to one CPU before its pool exists: every item
 * runs once, on a thread below n_threads, and no loop hangs. */
TEST(parallel_for_on_one_cpu_revokes_late_workers_safely) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(2);
        int bad = 0;
        for (int r = 0; r < 6000 && !bad; r++) bad += check_loop(1 + r % MAX_ITEMS, 2 + r % 3, r % 3 ? 1 : 0, 0);
        _exit(bad ? 1 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "loops on one CPU failed (status %#x)", st);
}

TEST(cpu_count_follows_affinity) {
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    CHECK(qkv_cpu_count() == CPU_COUNT(&set), "qkv_cpu_count %d, affinity mask %d", qkv_cpu_count(),
          CPU_COUNT(&set));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int cpu = 0;
        while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) cpu++;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(2);
        _exit(qkv_cpu_count() == 1 ? 0 : 1);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinned to one CPU, qkv_cpu_count was not 1 (status %#x)", st);
}

/* ------------------------------------------- two models, two threads */

static const int32_t prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
#define N_STEPS 6

typedef struct {
    qkv_model *m;
    float *logits; /* [1 + N_STEPS, V]: the prefill's last row, then each greedy step's */
    int failed;
} decode_job;

/* Prefill, then N_STEPS greedy steps. */
static void *decode_run(void *arg) {
    decode_job *j = arg;
    const int V = qkv_model_get_config(j->m)->n_vocab;
    qkv_error err = {0};
    qkv_model_rewind(j->m, 0, NULL);
    j->failed |= qkv_model_forward(j->m, j->logits, prompt, 12, 0, NULL, &err) != QKV_OK;
    for (int s = 0; s < N_STEPS && !j->failed; s++) {
        const float *row = j->logits + (size_t)s * V;
        int32_t best = 0;
        for (int v = 1; v < V; v++) best = row[v] > row[best] ? v : best;
        j->failed |= qkv_model_forward(j->m, j->logits + (size_t)(s + 1) * V, &best, 1, 0, NULL, &err) != QKV_OK;
    }
    return NULL;
}

TEST(two_models_in_two_threads_match_one_alone) {
    if (!test_require_model()) return;
    qkv_model_params p = {.n_ctx = 64, .kv_dtype = QKV_DTYPE_F32, .n_threads = 2};
    qkv_model *m[2] = {NULL, NULL};
    qkv_error err = {0};
    for (int i = 0; i < 2; i++)
        CHECK(qkv_model_open(&m[i], test_model_path(), &p, &err) == QKV_OK, "open: %s", err.msg);
    if (!m[0] || !m[1]) {
        qkv_model_close(m[0]);
        qkv_model_close(m[1]);
        return;
    }
    const size_t n = (size_t)(1 + N_STEPS) * qkv_model_get_config(m[0])->n_vocab;
    float *alone = malloc(n * 4), *both[2] = {malloc(n * 4), malloc(n * 4)};
    decode_job solo = {m[0], alone, 0}, jobs[2] = {{m[0], both[0], 0}, {m[1], both[1], 0}};
    decode_run(&solo);
    pthread_t t[2];
    for (int r = 0; r < 2; r++) { /* two rounds: the threads meet at different points */
        for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, decode_run, &jobs[i]) == 0, "pthread_create");
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < 2; i++) {
            CHECK(!jobs[i].failed && !solo.failed, "a forward pass failed");
            CHECK(memcmp(both[i], alone, n * 4) == 0, "round %d: model %d's logits differ from one model alone", r, i);
        }
    }
    free(alone);
    free(both[0]);
    free(both[1]);
    qkv_model_close(m[0]);
    qkv_model_close(m[1]);
}

TEST(pool_spin_budget_follows_the_other_runnable_threads) {
    CHECK(pool_parse_runnable("0.70 1.26 1.54 3/160 27654\n") == 3, "3/160");
    CHECK(pool_parse_runnable("12.10 16.00 14.30 17/412 1") == 17, "17/412");
    CHECK(pool_parse_runnable("0.00 0.00 0.00 1/90 5") == 1, "1/90");
    CHECK(pool_parse_runnable("0.70 1.26 1.54") == -1, "no runnable field");
    CHECK(pool_parse_runnable("0.70 1.26 1.54 x/160 1") == -1, "not a number");
    CHECK(pool_parse_runnable("") == -1, "empty");
    /* runnable, ours awake (the caller and the workers not asleep), team, CPUs */
    const int spin_long = pool_spin_budget(1, 1, 2, 2), spin_short = pool_spin_budget(5, 1, 2, 2);
    CHECK(spin_long > spin_short && spin_short > 0, "long %d, short %d", spin_long, spin_short);
    CHECK(pool_spin_budget(2, 2, 2, 2) == spin_long, "idle, the worker spinning: the long spin");
    CHECK(pool_spin_budget(2, 1, 2, 2) == spin_short && pool_spin_budget(3, 2, 2, 2) == spin_short,
          "ours and one other thread on 2 CPUs: the short spin (1.32x the long one's tokens/s on Zen 4)");
    CHECK(pool_spin_budget(3, 1, 2, 2) == spin_short && pool_spin_budget(4, 2, 2, 2) == spin_short,
          "one busy thread per CPU: the short spin whether our worker sleeps or not (the long one collapsed on "
          "Zen 3, and counting our own threads as load gave it half the time)");
    CHECK(pool_spin_budget(2, 1, 1, 2) == spin_long, "a loop on one thread beside one busy thread: ours fits");
    CHECK(pool_spin_budget(1, 3, 2, 2) == spin_long, "a count read before our workers were: no negative load");
    CHECK(pool_spin_budget(-1, 1, 2, 2) == spin_short && pool_spin_budget(0, 1, 2, 2) == spin_short,
          "unknown: the short spin");
    CHECK(pool_spin_budget(1, 1, 8, 8) == spin_long && pool_spin_budget(2, 1, 8, 8) == spin_short,
          "8 CPUs, 8 threads: long only with nothing else runnable");
    CHECK(pool_spin_budget(5, 1, 4, 8) == spin_long && pool_spin_budget(6, 1, 4, 8) == spin_short,
          "8 CPUs, 4 threads: long while 4 others run");
}
