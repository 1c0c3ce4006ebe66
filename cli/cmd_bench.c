/*
 * cmd_bench.c — `qkv bench`: times one attention shape through a kernel on
 * random inputs and reports seconds (median and spread over --repeat runs),
 * GFLOP/s with causal FLOPs counted as actually needed (4·D per visible
 * (query, key) pair and head), KV bytes per second, and peak RSS.
 */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Visible (query, key) pairs under the mask, per head. */
static double visible_pairs(const qkv_mask *m, int lq, int lk) {
    double n = 0;
    for (int i = 0; i < lq; i++) {
        int p = lk - lq + i, lo = 0, hi = lk - 1;
        if (m->kind != QKV_MASK_NONE) hi = p < lk - 1 ? p : lk - 1;
        if (m->kind == QKV_MASK_WINDOW || m->kind == QKV_MASK_SINK_WINDOW) lo = p - m->window + 1 > 0 ? p - m->window + 1 : 0;
        double c = hi >= lo ? hi - lo + 1 : 0;
        if (m->kind == QKV_MASK_SINK_WINDOW) {
            int s = m->sinks < lo ? m->sinks : lo;
            c += s;
        }
        n += c;
    }
    return n;
}

int cmd_bench(int argc, char **argv) {
    int hq = 32, hkv = 8, d = 128, lq = 1024, lk = -1, repeat = 3, threads = 0, causal = 1, window = 0;
    qkv_kernel kernel = QKV_KERNEL_AUTO;
    qkv_dtype dt = QKV_DTYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        int rc = 0;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: qkv bench [--n N | --lq N --lk N] [--hq 32 --hkv 8 --d 128] [--kernel ref|flash|decode|auto]\n"
                   "                 [--kv-dtype f32|bf16|f16] [--no-causal] [--window W] [--threads N] [--repeat R]\n");
            return 0;
        }
        if (!strcmp(f, "--no-causal")) { causal = 0; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(f, "--n")) { rc = cli_parse_int(&lq, f, v, 1, 1 << 20); lk = lq; }
        else if (!strcmp(f, "--lq")) rc = cli_parse_int(&lq, f, v, 1, 1 << 20);
        else if (!strcmp(f, "--lk")) rc = cli_parse_int(&lk, f, v, 1, 1 << 22);
        else if (!strcmp(f, "--hq")) rc = cli_parse_int(&hq, f, v, 1, 1024);
        else if (!strcmp(f, "--hkv")) rc = cli_parse_int(&hkv, f, v, 1, 1024);
        else if (!strcmp(f, "--d")) rc = cli_parse_int(&d, f, v, QKV_HEAD_DIM_MIN, QKV_HEAD_DIM_MAX);
        else if (!strcmp(f, "--repeat")) rc = cli_parse_int(&repeat, f, v, 1, 1000);
        else if (!strcmp(f, "--threads")) rc = cli_parse_int(&threads, f, v, 1, 4096);
        else if (!strcmp(f, "--window")) rc = cli_parse_int(&window, f, v, 1, 1 << 22);
        else if (!strcmp(f, "--kernel")) { if (qkv_kernel_parse(&kernel, v)) rc = cli_fail("--kernel: '%s' is not ref, flash, decode or auto", v); }
        else if (!strcmp(f, "--kv-dtype")) { if (qkv_dtype_parse(&dt, v)) rc = cli_fail("--kv-dtype: '%s' is not f32, bf16 or f16", v); }
        else return cli_fail("bench: unknown flag '%s'", f);
        if (rc) return rc;
    }
    if (lk < 0) lk = lq;
    if (hq % hkv) return cli_fail("bench: --hq %d is not a multiple of --hkv %d", hq, hkv);
    qkv_mask mask = {window ? QKV_MASK_WINDOW : causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE, window, 0, NULL, 0};
    qkv_attn_desc desc = {hq, hkv, lq, lk, d, 0, mask, dt, 0, threads};
    qkv_error err = {0};
    if (qkv_attn_check(&desc, &err)) return cli_fail("%s", err.msg);
    if (kernel == QKV_KERNEL_AUTO) kernel = qkv_attn_pick(&desc);
    size_t nq = (size_t)hq * lq * d, nkv = (size_t)hkv * lk * d;
    float *q = malloc(nq * 4), *o = malloc(nq * 4), *lse = malloc((size_t)hq * lq * 4);
    void *k = malloc(nkv * qkv_dtype_size(dt)), *v = malloc(nkv * qkv_dtype_size(dt));
    float *tmp = malloc(nkv * 4);
    if (!q || !o || !lse || !k || !v || !tmp) return cli_fail("bench: out of memory for the inputs");
    for (size_t i = 0; i < nq; i++) q[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < nkv; i++) tmp[i] = (float)((i * 40503u + 7) % 1999) / 1000.0f - 1.0f;
    qkv_convert_from_f32(k, dt, tmp, nkv);
    for (size_t i = 0; i < nkv; i++) tmp[i] = (float)((i * 9973u + 3) % 2003) / 1000.0f - 1.0f;
    qkv_convert_from_f32(v, dt, tmp, nkv);
    free(tmp);
    double *secs = malloc((size_t)repeat * sizeof *secs);
    for (int r = 0; r < repeat; r++) {
        double t0 = now_s();
        qkv_status st = qkv_attention(o, lse, q, k, v, &desc, kernel, &err);
        secs[r] = now_s() - t0;
        if (st) return cli_fail("%s", err.msg);
    }
    qsort(secs, (size_t)repeat, sizeof *secs, cmp_double);
    double med = secs[repeat / 2];
    double flops = 4.0 * d * hq * visible_pairs(&mask, lq, lk);
    double kv_bytes = 2.0 * nkv * qkv_dtype_size(dt);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("kernel=%s hq=%d hkv=%d d=%d lq=%d lk=%d kv=%s mask=%s threads=%d\n", qkv_kernel_name(kernel), hq, hkv, d,
           lq, lk, qkv_dtype_name(dt), window ? "window" : causal ? "causal" : "none", threads);
    printf("time_s median=%.6f min=%.6f max=%.6f  GFLOP/s=%.2f  KV_GB/s=%.2f  peak_rss_MiB=%.1f\n", med, secs[0],
           secs[repeat - 1], flops / med * 1e-9, kv_bytes / med * 1e-9, (double)ru.ru_maxrss / 1024.0);
    free(secs); free(q); free(o); free(lse); free(k); free(v);
    return 0;
}
