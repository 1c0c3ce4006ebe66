/*
 * gemm_peak.c — the prefill matmuls (model_matmul above MM_FUSED_MAX tokens,
 * src/model/matmul_impl.h) against the machine's fp32 FMA peak, measured in
 * the same process by `qkv bench --roofline`'s loop (cli/bench_roofline.c).
 * Two sweeps, each at 64 and 512 tokens, on the chosen threads and ISA:
 *   - every weight type at one 1024 x 1024 shape (random codes, f16 scales
 *     0.01 and -0.01: no NaN from random scale bits);
 *   - each distinct (type, rows, cols) of the given GGUF files' first block
 *     (blk.0.*: Q, K, V, O, gate, up, down as the file stores them).
 * GFLOP/s = 2 rows cols n / the best of `rounds` calls (one warm-up first);
 * the fraction is of the FMA peak of the same threads and ISA's vectors.
 *   build/gemm_peak [threads 2] [rounds 5] [MODEL.gguf ...]   (QKV_ISA picks the ISA)
 * A benchmark, not part of libqkv or its tests.
 */
#include "model/internal.h"
#include "bench_roofline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

static const qkv_ggml_type k_types[] = {
    QKV_GGML_TYPE_F32,  QKV_GGML_TYPE_F16,  QKV_GGML_TYPE_BF16, QKV_GGML_TYPE_Q8_0, QKV_GGML_TYPE_Q4_0,
    QKV_GGML_TYPE_Q4_1, QKV_GGML_TYPE_Q5_0, QKV_GGML_TYPE_Q5_1, QKV_GGML_TYPE_Q2_K, QKV_GGML_TYPE_Q3_K,
    QKV_GGML_TYPE_Q4_K, QKV_GGML_TYPE_Q5_K, QKV_GGML_TYPE_Q6_K,
};

/* Byte offsets of a block type's f16 scales d and m/dmin (-1: none);
 * layouts in src/gguf/dequant.c. */
static void scale_offsets(qkv_ggml_type t, int *d, int *m) {
    *d = 0, *m = -1;
    switch (t) {
    case QKV_GGML_TYPE_Q4_1: case QKV_GGML_TYPE_Q5_1: case QKV_GGML_TYPE_Q4_K: case QKV_GGML_TYPE_Q5_K: *m = 2; break;
    case QKV_GGML_TYPE_Q2_K: *d = 80, *m = 82; break;
    case QKV_GGML_TYPE_Q3_K: *d = 108; break;
    case QKV_GGML_TYPE_Q6_K: *d = 208; break;
    default: break;
    }
}

/* A [rows, cols] weight of type t: random codes, finite scales (float types:
 * small random values). Returns the allocation to free. */
static void *random_weight(qkv_gguf_tensor *w, qkv_ggml_type t, int64_t rows, int64_t cols) {
    const size_t nbytes = qkv_ggml_row_size(t, cols) * (size_t)rows;
    uint8_t *d = malloc(nbytes);
    if (!d) return NULL;
    if (t == QKV_GGML_TYPE_F32 || t == QKV_GGML_TYPE_F16 || t == QKV_GGML_TYPE_BF16) {
        const size_t es = t == QKV_GGML_TYPE_F32 ? 4 : 2;
        for (size_t i = 0; i < nbytes / es; i++) {
            const float f = (float)rand() / (float)RAND_MAX - 0.5f;
            uint16_t h = t == QKV_GGML_TYPE_F16 ? qkv_f32_to_f16(f) : qkv_f32_to_bf16(f);
            if (es == 4) memcpy(d + 4 * i, &f, 4);
            else memcpy(d + 2 * i, &h, 2);
        }
    } else {
        for (size_t i = 0; i < nbytes; i++) d[i] = (uint8_t)rand();
        int od, om;
        scale_offsets(t, &od, &om);
        const size_t bs = qkv_ggml_block_bytes(t);
        for (size_t b = 0; b < nbytes / bs; b++) { /* 0.01 is f16 0x211f, -0.01 0xa11f */
            d[b * bs + od] = 0x1f, d[b * bs + od + 1] = 0x21;
            if (om >= 0) d[b * bs + om] = 0x1f, d[b * bs + om + 1] = 0xa1;
        }
    }
    memset(w, 0, sizeof *w);
    w->type = t;
    w->n_dims = 2;
    w->shape[0] = rows, w->shape[1] = cols, w->shape[2] = w->shape[3] = 1;
    w->n_elements = rows * cols;
    w->nbytes = nbytes;
    w->data = d;
    return d;
}

enum { N_MAX = 512, COLS_MAX = 16384 };
static int g_threads = 2, g_rounds = 5;
static double g_peak;
static float *g_x, *g_out, *g_scratch;

/* One line: w at 64 and 512 tokens. */
static void measure(const char *label, const qkv_gguf_tensor *w) {
    static const int ns[] = {64, 512};
    const int64_t rows = w->shape[0], cols = w->shape[1];
    printf("%-22s %-5s %6lld x %-6lld", label, qkv_ggml_type_name(w->type), (long long)rows, (long long)cols);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        const int n = ns[i];
        double best = 1e30;
        for (int r = 0; r <= g_rounds; r++) { /* round 0 warms up */
            const double t0 = util_now_s();
            model_matmul(g_out, g_x, w, n, g_scratch, g_threads);
            const double dt = util_now_s() - t0;
            if (r && dt < best) best = dt;
        }
        const double gf = 2.0 * (double)rows * (double)cols * n / best / 1e9;
        printf("   n %3d: %6.1f GFLOP/s %3.0f%%", n, gf, 100 * gf / g_peak);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc > 1) g_threads = atoi(argv[1]);
    if (argc > 2) g_rounds = atoi(argv[2]);
    if (g_threads < 1 || g_rounds < 1) {
        fprintf(stderr, "gemm_peak: usage: gemm_peak [threads >= 1] [rounds >= 1] [MODEL.gguf ...]\n");
        return 2;
    }
    bench_roofline roof;
    qkv_error err;
    if (bench_roofline_measure(&roof, g_threads, 0.2, 1 << 20, &err)) {
        fprintf(stderr, "gemm_peak: %s\n", err.msg);
        return 1;
    }
    g_peak = roof.fma_gflops;
    g_x = malloc(sizeof(float) * N_MAX * COLS_MAX);
    g_out = malloc(sizeof(float) * N_MAX * 262144);
    g_scratch = malloc(sizeof(float) * (size_t)g_threads * MATMUL_ROWS * COLS_MAX);
    if (!g_x || !g_out || !g_scratch) return 1;
    for (size_t i = 0; i < (size_t)N_MAX * COLS_MAX; i++) g_x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    printf("matmul (%s kernels), %d threads, best of %d; fp32 FMA peak %.1f GFLOP/s\n", model_mm_isa_best()->name,
           g_threads, g_rounds, g_peak);
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        qkv_gguf_tensor w;
        void *raw = random_weight(&w, k_types[i], 1024, 1024);
        if (!raw) return 1;
        measure("random", &w);
        free(raw);
    }
    for (int a = 3; a < argc; a++) {
        qkv_gguf *g;
        if (qkv_gguf_open(&g, argv[a], &err)) {
            fprintf(stderr, "gemm_peak: %s\n", err.msg);
            return 1;
        }
        const char *base = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
            const qkv_gguf_tensor *w = qkv_gguf_tensor_info(g, i);
            if (strncmp(w->name, "blk.0.", 6) || w->n_dims != 2 || w->shape[1] > COLS_MAX) continue;
            char label[64];
            snprintf(label, sizeof label, "%.10s %s", base, w->name + 6);
            measure(label, w);
        }
        qkv_gguf_close(g);
    }
    return 0;
}
