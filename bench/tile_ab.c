/*
 * tile_ab.c — two builds of the flash inner loop (src/attn/tile_impl.h) in
 * one process, one thread, timed in turns: a causal prefill of one KV head
 * (G query heads, Lq = Lk = n), every query block through attn_rows_A and
 * attn_rows_B alternately, the best of R rounds each; given lq < n, the
 * last lq positions of it (a chunk of a prefill against n keys); given
 * lq <= 8, a decode step (G x lq rows against n keys, the few-row path where
 * G * lq <= VW / 2), repeated to ~4M key-heads a turn, its K/V in cache
 * unless n is large. On a shared VM whose
 * speed drifts from minute to minute, turns a few hundred milliseconds
 * apart see the same machine; separate runs of `qkv bench` do not. Also
 * checks that both give the same O for the last block (|dO| <= 1e-5).
 *
 * Built and run by bench/tile_ab.sh (A: a git revision, B: the work tree):
 *   bench/tile_ab.sh REV [D G n kv_dtype rounds [lq]]   e.g. bench/tile_ab.sh HEAD~1 128 4 2048 f32 8
 * With TILE_AB_CPU=1 in the environment the turns are timed by the thread's
 * CPU time, not the wall clock: on a machine shared with other jobs that
 * leaves out the slices the thread waited descheduled (its K/V in cache,
 * the kernel's instructions are what it measures).
 * Prints GFLOP/s of A and B (4 G D FLOPs per visible query-key pair: the
 * causal half in prefill) and B / A.
 * A benchmark, not part of libqkv or its tests.
 */
#include "attn/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timing.h"

void attn_rows_A(const attn_problem *P, const attn_rows *rows, int j0, int j1, attn_scratch *ws);
void attn_rows_B(const attn_problem *P, const attn_rows *rows, int j0, int j1, attn_scratch *ws);

static float uniform(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

/* Scratch for one thread, generously sized for either build's tiles. */
static float *buf(size_t floats) { return aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64); }

static int cpu_clock; /* TILE_AB_CPU: time turns by the thread's CPU time */

static double now_s(void) {
    if (!cpu_clock) return util_now_s();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every query block of the causal prefill, last first (as flash.c orders
 * them), reps times. */
static double run_all(attn_rows_fn fn, const attn_problem *P, int G, int nq, int reps, attn_scratch *ws) {
    const double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        ws->kvf.kvh = -1, ws->kvf.len = 0; /* a new call: the K/V copy starts empty */
        for (int i0 = P->q_len - nq; i0 > -nq; i0 -= nq) {
            attn_rows rows = {.kvh = 0, .h0 = 0, .nh = G, .i0 = i0 < 0 ? 0 : i0, .nq = i0 < 0 ? nq + i0 : nq};
            fn(P, &rows, 0, P->kv_len, ws);
        }
    }
    return now_s() - t0;
}

int main(int argc, char **argv) {
    const int D = argc > 1 ? atoi(argv[1]) : 128, G = argc > 2 ? atoi(argv[2]) : 4, n = argc > 3 ? atoi(argv[3]) : 2048;
    const char *dtn = argc > 4 ? argv[4] : "f32";
    const int rounds = argc > 5 ? atoi(argv[5]) : 8;
    const int lq = argc > 6 ? atoi(argv[6]) : n;
    qkv_dtype t;
    if (D < 16 || D > 256 || G < 1 || G > 64 || n < 1 || n > 65536 || rounds < 1 || qkv_dtype_parse(&t, dtn, NULL) != QKV_OK ||
        lq < 1 || lq > n || (lq <= 8 && G * lq > 64)) {
        fprintf(stderr, "tile_ab: usage: tile_ab [D 16..256] [G 1..64] [n 1..65536] [f32|bf16|f16] [rounds >= 1] [lq: 1..n, G lq <= 64 if lq <= 8]\n");
        return 2;
    }
    const size_t nkv = (size_t)n * D, es = qkv_dtype_size(t);
    float *q = malloc(sizeof(float) * G * (size_t)lq * D); /* [G, lq, D] */
    float *kf = malloc(sizeof(float) * nkv), *vf = malloc(sizeof(float) * nkv); /* [n, D] f32 */
    void *k = malloc(es * nkv), *v = malloc(es * nkv); /* [n, D] kv_dtype: one KV head */
    for (size_t i = 0; i < (size_t)G * lq * D; i++) q[i] = uniform();
    for (size_t i = 0; i < nkv; i++) kf[i] = uniform(), vf[i] = uniform();
    qkv_convert_from_f32(k, t, kf, nkv);
    qkv_convert_from_f32(v, t, vf, nkv);
    qkv_attn_desc d = {.n_q_head = G, .n_kv_head = 1, .q_len = lq, .kv_len = n, .head_dim = D,
                       .mask = {.kind = QKV_MASK_CAUSAL}, .kv_dtype = t};
    attn_problem P;
    uint64_t *excl = calloc(ATTN_EXCL_WORDS(n), sizeof(uint64_t));
    qkv_error err = {0};
    if (qkv_attn_check(&d, &err)) {
        fprintf(stderr, "tile_ab: %s\n", err.msg);
        return 2;
    }
    attn_problem_init(&P, &d, q, k, v, excl);
    P.kv_f32_copy = 1;
    const int ld = P.ld; /* the padded row stride of ws.acc */
    attn_scratch ws = {0};
    ws.q = buf(80 * 256), ws.s = buf(80 * 512), ws.kt = buf(512 * 256), ws.vt = buf(512 * 256);
    ws.acc = buf(64 * 256), ws.m = buf(64), ws.l = buf(64), ws.alpha = buf(64), ws.tmax = buf(80);
    ws.pos = (int32_t *)(void *)buf(80), ws.part = buf(ATTN_PART);
    const size_t cap = ATTN_KV_F32_MAX_FLOATS;
    ws.kvf = (attn_kv_f32){.k = buf(cap), .v = buf(cap), .cap = cap, .kvh = -1};
    const int nq = ATTN_BLOCK_ROWS / G < lq ? ATTN_BLOCK_ROWS / G : lq;
    const int reps = lq <= 8 ? (int)((4 << 20) / ((int64_t)n * G) + 1) : 1;

    cpu_clock = getenv("TILE_AB_CPU") && atoi(getenv("TILE_AB_CPU")) == 1;
    double best[2] = {1e30, 1e30};
    const attn_rows_fn fn[2] = {attn_rows_A, attn_rows_B};
    for (int r = 0; r < rounds; r++)
        for (int x = 0; x < 2; x++) {
            const int f = (x + r) % 2; /* A first in even rounds, B first in odd */
            const double s = run_all(fn[f], &P, G, nq, reps, &ws);
            if (s < best[f]) best[f] = s;
        }

    /* the last block of each build: the same O */
    const int R = G * nq;
    float *o[2] = {buf((size_t)R * D), buf((size_t)R * D)};
    for (int x = 0; x < 2; x++) {
        attn_rows rows = {.kvh = 0, .h0 = 0, .nh = G, .i0 = lq - nq, .nq = nq};
        ws.kvf.kvh = -1, ws.kvf.len = 0;
        fn[x](&P, &rows, 0, n, &ws);
        for (int i = 0; i < R; i++)
            for (int c = 0; c < D; c++) o[x][(size_t)i * D + c] = ws.acc[(size_t)i * ld + c] / ws.l[i];
    }
    double dmax = 0;
    for (size_t i = 0; i < (size_t)R * D; i++) dmax = fmax(dmax, fabs((double)o[0][i] - o[1][i]));

    /* 4 G D per visible (query, key) pair: row i sits at position n - lq + i */
    const double flops = 4.0 * G * D * reps * ((double)lq * (n - lq) + (double)lq * (lq + 1) / 2);
    printf("D=%d G=%d n=%d lq=%d %s, 1 thread, %s time, best of %d: A %.1f GFLOP/s, B %.1f GFLOP/s, B/A %.3f; max |dO| %.2g\n", D, G,
           n, lq, dtn, cpu_clock ? "CPU" : "wall", rounds, flops / best[0] * 1e-9, flops / best[1] * 1e-9, best[0] / best[1], dmax);
    return dmax <= 1e-5 ? 0 : 1;
}
