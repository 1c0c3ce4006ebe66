/*
 * gen_ceiling.c — the two ceilings of one generated token (issue 39): the
 * weight-read roofline and the instruction mix of the 1-token matmul.
 *
 * A decode step reads every weight matrix of the model once (the embedding
 * only one row, unless the model ties it to the output: then the whole
 * matrix, as the unembedding). This program
 *   1. sums those bytes per block type from the GGUF's tensor table;
 *   2. measures the machine's STREAM-like read (qkv bench --roofline's loop,
 *      cli/bench_roofline.c): ceiling A = read / bytes a token;
 *   3. times the 1-token matmul kernel (model_mm_rows_* of the chosen ISA,
 *      matmul_impl.h's fused path) on weights that stay in L2: each thread
 *      its own ~384 KB matrix of each type present, the shape the model uses
 *      (cols = the model's width, or 1024 for K-quants whose rows must be
 *      whole blocks of 256), all threads at once (OpenMP), each thread's
 *      best pass, summed:
 *      the rate at which the exact dequantise-and-FMA mix decodes that type
 *      when memory is not the limit. Ceiling B = 1 / sum over types of
 *      bytes_t / rate_t.
 * Neither ceiling counts attention, norms or the thread pool's start and end:
 * both are upper bounds for `qkv run`'s generation. Prints both, per type.
 *
 * Build and run: bench/gen_ceiling.sh MODEL.gguf [--threads N] [--seconds S]
 * A benchmark, not part of libqkv or its tests.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_roofline.h"
#include "model/internal.h"
#include "timing.h"

#define N_GGML_TYPES 64

/* Random codes, f16 scales d = 0.01 and m = -0.01 at their offsets in each block
 * (-1: none), as bench/matmul_ab.c makes them (no NaN from random scale bits). */
static void scales_at(qkv_ggml_type t, int *d, int *m) {
    *d = 0, *m = -1;
    switch (t) {
    case QKV_GGML_TYPE_Q4_1: case QKV_GGML_TYPE_Q5_1: case QKV_GGML_TYPE_Q4_K: case QKV_GGML_TYPE_Q5_K:
        *m = 2; break;
    case QKV_GGML_TYPE_Q2_K: *d = 80, *m = 82; break;
    case QKV_GGML_TYPE_Q3_K: *d = 108; break;
    case QKV_GGML_TYPE_Q6_K: *d = 208; break;
    default: break;
    }
}

static int random_weight(qkv_gguf_tensor *w, qkv_ggml_type t, int64_t rows, int64_t cols) {
    const size_t rb = qkv_ggml_row_size(t, cols), bs = qkv_ggml_block_bytes(t);
    uint8_t *p = aligned_alloc(64, (rows * rb + 63) / 64 * 64);
    if (!p) return 0;
    for (size_t i = 0; i < rows * rb; i++) p[i] = (uint8_t)rand();
    int d, m;
    scales_at(t, &d, &m);
    if (t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16 || t == QKV_GGML_TYPE_F32)
        memset(p, 0, rows * rb); /* zeros: no NaN */
    else
        for (size_t b = 0; b < rows * rb / bs; b++) {
            uint8_t *q = p + b * bs;
            q[d] = 0x1f, q[d + 1] = 0x21;
            if (m >= 0) q[m] = 0x1f, q[m + 1] = 0xa1;
        }
    memset(w, 0, sizeof *w);
    w->type = t, w->n_dims = 2, w->shape[0] = rows, w->shape[1] = cols, w->data = p, w->nbytes = rows * rb;
    return 1;
}

/* Bytes of decoded weights a second, all threads at once, the kernel on an
 * L2-resident matrix of type t per thread: each thread's best pass of 8
 * sweeps over `seconds`, summed over threads (no barrier between passes: a
 * thread that shares its core with another tenant for a while does not hold
 * the other back, as in the thread pool's loops, which steal work). */
static double type_rate(const model_mm_isa *isa, qkv_ggml_type t, int64_t cols, int threads, double seconds) {
    const int64_t rows = (384 << 10) / (int64_t)qkv_ggml_row_size(t, cols) / MATMUL_ROWS * MATMUL_ROWS;
    double total = 0;
    int ok = 1;
#pragma omp parallel num_threads(threads) reduction(min : ok) reduction(+ : total)
    {
        qkv_gguf_tensor w;
        float *x = aligned_alloc(64, (size_t)cols * 4), *out = aligned_alloc(64, (size_t)rows * 4),
              *scratch = aligned_alloc(64, (size_t)MATMUL_ROWS * cols * 4);
        ok = random_weight(&w, t, rows, cols) && x && out && scratch;
        double best = 0;
        if (ok) {
            for (int64_t c = 0; c < cols; c++) x[c] = (float)((c * 7) % 13) * 0.1f - 0.6f;
            const double t_end = util_now_s() + seconds;
            while (util_now_s() < t_end) {
                const int reps = 8;
                const double t0 = util_now_s();
                for (int r = 0; r < reps; r++)
                    for (int64_t r0 = 0; r0 < rows; r0 += MATMUL_ROWS)
                        isa->rows(out, x, &w, 1, r0, r0 + MATMUL_ROWS, scratch);
                const double rate = reps * (double)w.nbytes / (util_now_s() - t0);
                if (rate > best) best = rate;
            }
            free((void *)w.data);
        }
        total = best;
        free(x), free(out), free(scratch);
    }
    return ok ? total : 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 2;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else path = argv[i];
    }
    if (!path || threads < 1) {
        fprintf(stderr, "usage: gen_ceiling MODEL.gguf [--threads N] [--seconds S]\n");
        return 2;
    }
    qkv_gguf *g;
    qkv_error err;
    if (qkv_gguf_open(&g, path, &err)) {
        fprintf(stderr, "gen_ceiling: %s\n", err.msg);
        return 1;
    }
    const int tied = qkv_gguf_find_tensor(g, "output.weight") < 0;
    double bytes[N_GGML_TYPES] = {0}, total = 0;
    int64_t width[N_GGML_TYPES] = {0}; /* the narrowest cols of each type */
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        if (t->n_dims < 2 || (int)t->type >= N_GGML_TYPES) continue; /* norms: f32 copies, a few KB */
        if (!strcmp(t->name, "token_embd.weight") && !tied) continue; /* one row a token */
        bytes[t->type] += (double)t->nbytes, total += (double)t->nbytes;
        if (!width[t->type] || t->shape[1] < width[t->type]) width[t->type] = t->shape[1];
    }
    bench_roofline roof;
    if (bench_roofline_measure(&roof, threads, 0.3, 0, &err)) {
        fprintf(stderr, "gen_ceiling: %s\n", err.msg);
        return 1;
    }
    const model_mm_isa *isa = model_mm_isa_best();
    printf("model %s (%s output), %d threads, ISA %s\n", path, tied ? "tied" : "own", threads, isa->name);
    printf("weights read a token: %.2f MB\n", total / 1e6);
    double t_mix = 0;
    for (int k = 0; k < N_GGML_TYPES; k++) {
        if (!bytes[k]) continue;
        const int64_t cols = qkv_ggml_block_elems((qkv_ggml_type)k) > 32 && width[k] % 1024 ? 1024 : width[k];
        const double rate = type_rate(isa, (qkv_ggml_type)k, cols, threads, seconds);
        if (rate <= 0) {
            fprintf(stderr, "gen_ceiling: out of memory\n");
            return 1;
        }
        t_mix += bytes[k] / rate;
        printf("  %-5s %8.2f MB  in-L2 1-token matmul (cols %lld) %6.2f GB/s  -> %.2f ms a token\n",
               qkv_ggml_type_name((qkv_ggml_type)k), bytes[k] / 1e6, (long long)cols, rate / 1e9, 1e3 * bytes[k] / rate);
    }
    const double t_read = total / (roof.dram_gbs * 1e9);
    printf("A: weight-read roofline  %.2f GB/s STREAM-like read -> %.2f ms, %.1f tok/s\n", roof.dram_gbs, 1e3 * t_read,
           1 / t_read);
    printf("B: 1-token matmul mix    -> %.2f ms, %.1f tok/s\n", 1e3 * t_mix, 1 / t_mix);
    printf("min(A, B) %.1f tok/s (%s binds), 80%%: %.1f tok/s\n", 1 / (t_read > t_mix ? t_read : t_mix),
           t_read > t_mix ? "A, the read" : "B, the mix", 0.8 / (t_read > t_mix ? t_read : t_mix));
    qkv_gguf_close(g);
    return 0;
}
