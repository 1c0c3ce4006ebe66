/*
 * cmd_bench.c — `qkv bench`: how fast the kernels are on this machine, and
 * how close to what the machine can do.
 *
 *   one shape (the default): times one attention shape through a kernel on
 *     random inputs and reports seconds (median, min, max over --repeat runs),
 *     GFLOP/s with causal FLOPs counted as actually needed (4·D per visible
 *     (query, key) pair and head), KV bytes per second, and peak RSS;
 *   sweeps (--sweep): first the machine's roofline (bench_roofline_measure: fp32
 *     FMA peak, bf16 dot peak, DRAM read bandwidth), then prefill (causal,
 *     Lq = Lk = n), chunked prefill (Lq = 512 against a longer KV), decode
 *     (Lq = 1 against KV 1K .. 128K, cold cache) and the reference kernel at
 *     small n, for Llama-3.1-8B heads (32/8, D 128) and SmolLM2 heads (9/3,
 *     D 64) and each KV dtype; every row carries its fraction of the measured
 *     peak (FMA peak for prefill, DRAM bandwidth for decode) and the RSS the
 *     kernel added on top of its inputs. --json for machines, --svg for a plot.
 *
 * Peers (PyTorch, ONNX Runtime, OpenVINO, llama.cpp) are driven by
 * bench/peers.py, which runs this command on the same shapes in the same run.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "progress.h"
#include "outputs.h"
#include "json_out.h"
#include "util.h"
#include "commands.h"
#include "bench_roofline.h"
#include "qkv_render.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ shapes */

typedef struct {
    const char *id, *name;
    int hq, hkv, d;
} bench_model;

static const bench_model bench_models[] = {
    {"llama", "Llama-3.1-8B", 32, 8, 128},
    {"smol", "SmolLM2-135M", 9, 3, 64},
};
#define N_MODELS 2

/* One measured shape and what came out of it. */
typedef struct {
    const char *sweep;  /* "shape", "prefill", "chunk", "decode", "ref" */
    const char *model;  /* model id, or "custom" */
    int hq, hkv, d, lq, lk, window, causal, threads, cold;
    float softcap;      /* scores capped to c tanh(s / c) (qkv_attn_desc); 0: none, as in every sweep */
    int layers;         /* separate K/V per layer, one run = every layer once (a token) */
    const qkv_model_config *pattern; /* non-NULL: layers follow this preset's sliding layers
                                        (qkv_model_layer_slides): a sliding layer has a window mask and
                                        K/V of the last min(lk, W - 1 + lq) rows only, as a
                                        sliding-window cache holds */
    qkv_dtype dt;
    qkv_kernel kernel;  /* resolved (never AUTO) */
    int runs;           /* timed runs done */
    double med, min, max;       /* seconds */
    double gflops, kv_gbs;
    double peak_frac;           /* of the FMA peak (flash, ref) or DRAM (decode); < 0 unknown */
    double rss_mib, extra_mib;  /* peak RSS; what the kernel added on top of its inputs */
} bench_result;

typedef struct {
    int threads, repeat, json, quick, cold;
    double budget_s;  /* per shape: stop repeating after this much time (>= 1 run) */
    int max_n, max_kv;
    int use_model[N_MODELS];
    int use_dt[3];
    const char *svg;
} bench_opts;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Visible (query, key) pairs under the mask, per head. */
static double visible_pairs(const qkv_mask *m, int lq, int lk) {
    double n = 0;
    for (int i = 0; i < lq; i++) n += qkv_mask_row_count(m, lq, lk, i);
    return n;
}

/* Layer l's mask and key count: r's own, or on a sliding layer of the preset's
 * pattern a window of W over the rows a sliding-window cache keeps. */
static int layer_slides(const bench_result *r, int l) {
    return r->pattern && qkv_model_layer_slides(r->pattern, l);
}

static void layer_shape(qkv_mask *mask, int *lk, const bench_result *r, int l) {
    *mask = (qkv_mask){.kind = r->window ? QKV_MASK_WINDOW : r->causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE,
                       .window = r->window};
    *lk = r->lk;
    if (!layer_slides(r, l)) return;
    *mask = (qkv_mask){.kind = QKV_MASK_WINDOW, .window = r->pattern->window};
    const int keep = r->pattern->window - 1 + r->lq;
    if (keep < *lk) *lk = keep;
}

/* ---------------------------------------------------------- memory (RSS) */

/* Resets the peak RSS to the current RSS (Linux >= 4.0); 0 if it could not. */
static int rss_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* ------------------------------------------------------------- measuring */

/* Deterministic inputs in [-1, 1] (cheap hashes, no RNG state), converted to dt. */
static void fill_f32(float *x, size_t n, uint32_t mul, uint32_t add, uint32_t mod) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * mul + add) % mod) / (float)(mod / 2) - 1.0f;
}

static void fill_kv(void *x, qkv_dtype dt, size_t n, uint32_t mul, uint32_t add, uint32_t mod) {
    if (dt == QKV_DTYPE_F32) {
        fill_f32(x, n, mul, add, mod);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        float chunk[4096];
        size_t c = n - i0 < 4096 ? n - i0 : 4096;
        for (size_t i = 0; i < c; i++) chunk[i] = (float)(((i0 + i) * mul + add) % mod) / (float)(mod / 2) - 1.0f;
        qkv_convert_from_f32((uint16_t *)x + i0, dt, chunk, c);
    }
}

/* Reads 64 MiB (twice the L3 of the machines this runs on) so a decode run
 * finds its KV in DRAM, as every layer's decode step does in a real model. */
static volatile uint64_t g_flush_sink;
static void flush_caches(void) {
    static uint64_t *buf;
    const size_t n = ((size_t)64 << 20) / sizeof(uint64_t);
    if (!buf) {
        buf = malloc(n * sizeof *buf);
        if (!buf) return;
        for (size_t i = 0; i < n; i++) buf[i] = i;
    }
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 8) s += buf[i];
    g_flush_sink += s;
}

/* Times r's shape; fills the timing, rate and memory fields. With r->layers
 * > 1 each layer has its own K and V and one run is every layer once (a
 * decode step of a whole model). Returns 0, or 2 after printing one line
 * (allocation failure, refused shape). */
static int run_shape(bench_result *r, const bench_opts *o, const bench_roofline *roof) {
    const int L = r->layers > 1 ? r->layers : 1;
    qkv_mask mask;
    int lk0;
    layer_shape(&mask, &lk0, r, 0);
    qkv_attn_desc desc = {.n_q_head = r->hq, .n_kv_head = r->hkv, .q_len = r->lq, .kv_len = lk0, .head_dim = r->d,
                          .softcap = r->softcap, .mask = mask, .kv_dtype = r->dt, .n_threads = r->threads};
    qkv_error err = {0};
    if (qkv_attn_check(&desc, &err)) return cli_fail("%s", err.msg);
    if (r->kernel == QKV_KERNEL_AUTO) r->kernel = qkv_attn_pick(&desc);
    /* every layer's (query, key) pairs and K/V elements */
    double pairs = 0, kv_elems = 0;
    for (int l = 0; l < L; l++) {
        int lk;
        layer_shape(&desc.mask, &lk, r, l);
        desc.kv_len = lk;
        if (qkv_attn_check(&desc, &err)) return cli_fail("layer %d: %s", l, err.msg);
        pairs += visible_pairs(&desc.mask, r->lq, lk);
        kv_elems += 2.0 * r->hkv * lk * r->d;
    }
    int can_reset = rss_reset_peak();
    size_t nq = (size_t)r->hq * r->lq * r->d, es = qkv_dtype_size(r->dt);
    float *q = malloc(nq * 4), *out = malloc(nq * 4), *lse = malloc((size_t)r->hq * r->lq * 4);
    void **k = calloc((size_t)L, sizeof *k), **v = calloc((size_t)L, sizeof *v);
    int ok = q && out && lse && k && v;
    for (int l = 0; ok && l < L; l++) {
        int lk;
        layer_shape(&desc.mask, &lk, r, l);
        size_t nkv = (size_t)r->hkv * lk * r->d; /* K, V: [Hkv, lk, D] */
        k[l] = qkv_kv_alloc(nkv * es); /* as qkv_kv_cache allocates: huge pages where offered */
        v[l] = qkv_kv_alloc(nkv * es);
        ok = k[l] && v[l];
        if (ok) {
            fill_kv(k[l], r->dt, nkv, 40503u + 2u * (uint32_t)l, 7, 1999);
            fill_kv(v[l], r->dt, nkv, 9973u + 2u * (uint32_t)l, 3, 2003);
        }
    }
    int status = 0;
    double *secs = malloc((size_t)o->repeat * sizeof *secs);
    if (!ok || !secs) {
        status = cli_fail("bench: out of memory for the inputs of lq=%d lk=%d (%d layers, %.1f GiB of K/V)", r->lq,
                          r->lk, L, kv_elems * (double)es / (1 << 30));
        goto done;
    }
    fill_f32(q, nq, 2654435761u, 0, 2001);
    memset(out, 0, nq * 4);
    memset(lse, 0, (size_t)r->hq * r->lq * 4);
    if (r->cold) flush_caches();
    double base_mib = cli_status_mib("VmRSS");

    int n = 0;
    double spent = 0;
    for (int it = -1; it < o->repeat; it++) {
        if (r->cold) flush_caches();
        double t0 = cli_now_s();
        for (int l = 0; l < L && !status; l++) {
            layer_shape(&desc.mask, &desc.kv_len, r, l);
            if (qkv_attn(out, lse, q, k[l], v[l], &desc, r->kernel, &err)) status = cli_fail("%s", err.msg);
        }
        double dt = cli_now_s() - t0;
        if (status) break;
        spent += dt;
        /* the first run warms up; a run of a second or more is its own warm-up */
        if (it >= 0 || dt >= 1.0) secs[n++] = dt;
        if (n >= o->repeat || (n >= 1 && spent >= o->budget_s)) break;
    }
    if (!status) {
        qsort(secs, (size_t)n, sizeof *secs, cmp_double);
        r->runs = n;
        r->med = n % 2 ? secs[n / 2] : 0.5 * (secs[n / 2 - 1] + secs[n / 2]);
        r->min = secs[0];
        r->max = secs[n - 1];
        r->gflops = 4.0 * r->d * r->hq * pairs / r->med * 1e-9;
        r->kv_gbs = kv_elems * (double)es / r->med * 1e-9;
        r->peak_frac = -1;
        if (roof && r->kernel == QKV_KERNEL_DECODE && roof->dram_gbs > 0) r->peak_frac = r->kv_gbs / roof->dram_gbs;
        else if (roof && r->kernel == QKV_KERNEL_FLASH_BF16 && roof->bf16_gflops > 0)
            r->peak_frac = r->gflops / roof->bf16_gflops;
        else if (roof && r->kernel != QKV_KERNEL_DECODE && roof->fma_gflops > 0) r->peak_frac = r->gflops / roof->fma_gflops;
        r->rss_mib = cli_peak_rss_mib();
        r->extra_mib = can_reset && base_mib >= 0 ? r->rss_mib - base_mib : -1;
    }
done:
    for (int l = 0; k && v && l < L; l++) {
        qkv_kv_free(k[l]);
        qkv_kv_free(v[l]);
    }
    free(k); free(v); free(secs); free(q); free(out); free(lse);
    return status;
}

/* ---------------------------------------------------------------- output */

static void print_machine_json(int threads) {
    char cpu[128] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c += 1 + (c[1] == ' ');
                    snprintf(cpu, sizeof cpu, "%.*s", (int)strcspn(c, "\n"), c);
                }
                break;
            }
        fclose(f);
    }
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    double load[1] = {-1};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load[0]) != 1) load[0] = -1;
        fclose(la);
    }
    printf("  \"qkv_version\": \"%s\",\n  \"machine\": {\"cpu\": ", QKV_VERSION);
    cli_json_string(stdout, cpu);
    printf(", \"cpus_online\": %ld, \"isa\": \"%s\", \"threads\": %d, \"loadavg_1min\": %.2f, \"date_utc\": \"%s\"},\n",
           sysconf(_SC_NPROCESSORS_ONLN), qkv_attn_isa(), threads, load[0], date);
}

static void print_roofline_json(const bench_roofline *roof) {
    if (!roof) {
        printf("  \"roofline\": null,\n");
        return;
    }
    printf("  \"roofline\": {\"fma_gflops\": %.2f, \"bf16_gflops\": %.2f, \"dram_gbs\": %.2f},\n", roof->fma_gflops,
           roof->bf16_gflops, roof->dram_gbs);
}

/* One result as a JSON object on one line, without a line end. */
static void print_result_json(const bench_result *r) {
    printf("    {\"sweep\": \"%s\", \"model\": \"%s\", \"hq\": %d, \"hkv\": %d, \"d\": %d, \"lq\": %d, \"lk\": %d, "
           "\"kv_dtype\": \"%s\", \"kernel\": \"%s\", \"mask\": \"%s\", \"softcap\": %g, \"threads\": %d, \"cold_cache\": %s, "
           "\"layers\": %d, \"runs\": %d, \"time_s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}, "
           "\"spread_pct\": %.1f, \"gflops\": %.3f, \"kv_gbs\": %.3f, ",
           r->sweep, r->model, r->hq, r->hkv, r->d, r->lq, r->lk, qkv_dtype_name(r->dt), qkv_kernel_name(r->kernel),
           r->window ? "window" : r->causal ? "causal" : "none", (double)r->softcap, r->threads, r->cold ? "true" : "false",
           r->layers > 1 ? r->layers : 1, r->runs,
           r->med, r->min, r->max, 100.0 * (r->max - r->min) / r->med, r->gflops, r->kv_gbs);
    int sliding = 0;
    for (int l = 0; l < (r->layers > 1 ? r->layers : 1); l++) sliding += layer_slides(r, l);
    printf("\"sliding_layers\": %d, \"sliding_window\": %d, ", sliding, sliding ? r->pattern->window : 0);
    if (r->peak_frac >= 0) printf("\"peak_fraction\": %.4f, ", r->peak_frac);
    else printf("\"peak_fraction\": null, ");
    printf("\"peak_rss_mib\": %.1f, ", r->rss_mib);
    if (r->extra_mib >= 0) printf("\"extra_rss_mib\": %.1f}", r->extra_mib);
    else printf("\"extra_rss_mib\": null}");
}

static const char *sweep_title(const char *sweep, int quick) {
    if (!strcmp(sweep, "prefill")) return "prefill: causal, Lq = Lk = n, flash (bf16 KV also flash-bf16; %peak of bf16 dot)";
    if (!strcmp(sweep, "chunk"))
        return quick ? "chunked prefill: causal, Lq = 128 (quick; 512 in full) against Lk, flash (and flash-bf16)"
                     : "chunked prefill: causal, Lq = 512 against Lk, flash (and flash-bf16)";
    if (!strcmp(sweep, "decode")) return "decode: Lq = 1 against Lk keys, cold cache, decode kernel";
    return "reference kernel (the oracle) beside flash at small n, causal, f32";
}

static void print_row_text(const bench_result *r, int header) {
    if (header)
        printf("  %-6s %-5s %-6s %6s %6s  %10s %10s %10s %6s  %8s %7s %8s %8s %9s\n", "model", "kv", "kernel", "lq",
               "lk", "median_s", "min_s", "max_s", "spread", "GFLOP/s", "%peak", "KV_GB/s", "RSS_MiB", "extra_MiB");
    char frac[16] = "-", extra[16] = "-";
    if (r->peak_frac >= 0) snprintf(frac, sizeof frac, "%.1f%%", 100 * r->peak_frac);
    if (r->extra_mib >= 0) snprintf(extra, sizeof extra, "%.1f", r->extra_mib);
    printf("  %-6s %-5s %-6s %6d %6d  %10.6f %10.6f %10.6f %5.1f%%  %8.2f %7s %8.2f %8.1f %9s\n", r->model,
           qkv_dtype_name(r->dt), qkv_kernel_name(r->kernel), r->lq, r->lk, r->med, r->min, r->max,
           100.0 * (r->max - r->min) / r->med, r->gflops, frac, r->kv_gbs, r->rss_mib, extra);
}

/* ------------------------------------------------------------------- SVG */

static int series_of(const bench_result *r) { return r->kernel == QKV_KERNEL_FLASH_BF16 ? 3 : (int)r->dt; }

/* One panel per sweep: x the keys (log2 scale), y GFLOP/s or KV GB/s; one
 * line per (model, series), the other model dashed; peak and peak2 (if > 0)
 * as dashed red level lines. x, y: [n] scratch. */
static void svg_panel(FILE *f, const qkv_chart_box *box, const bench_result *res, int n, const char *sweep,
                      double peak, const char *peak_label, double peak2, const char *peak2_label, int use_kv_rate,
                      double *x, double *y) {
    /* series: f32, bf16, f16 KV through flash/decode, and bf16 KV through flash-bf16 */
    static const char *colors[4] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"};
    static const char *series[4] = {"f32", "bf16", "f16", "bf16 dot"};
    qkv_chart_series lines[N_MODELS * 4 + 2];
    char names[N_MODELS * 4 + 2][48];
    const double peaks[2] = {peak, peak2};
    int ns = 0, np = 0;
    for (int m = 0; m < N_MODELS; m++)
        for (int t = 0; t < 4; t++) {
            const int first = np;
            for (int i = 0; i < n; i++) {
                const bench_result *r = &res[i];
                if (strcmp(r->sweep, sweep) || strcmp(r->model, bench_models[m].id) || series_of(r) != t) continue;
                x[np] = r->lk, y[np++] = use_kv_rate ? r->kv_gbs : r->gflops;
            }
            if (np == first) continue;
            snprintf(names[ns], sizeof names[ns], "%s %s", bench_models[m].id, series[t]);
            lines[ns] = (qkv_chart_series){.name = names[ns], .x = x + first, .y = y + first, .n = np - first,
                                           .colour = colors[t], .dash = m ? "4,3" : NULL, .dot = m ? 2 : 3};
            ns++;
        }
    for (int k = 0; k < 2 && ns; k++) {
        if (peaks[k] <= 0) continue;
        snprintf(names[ns], sizeof names[ns], "%s %.0f", k ? peak2_label : peak_label, peaks[k]);
        lines[ns] = (qkv_chart_series){.name = names[ns], .y = &peaks[k], .n = 1, .colour = "#c00", .dash = "6,4",
                                       .width = 1, .rule = 1};
        ns++;
    }
    qkv_chart_lines(f, box, lines, ns);
}

static int res_chunk_lq(const bench_result *res, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(res[i].sweep, "chunk")) return res[i].lq;
    return 512;
}

/* The three sweeps side by side; 0 or 2. */
static int write_svg(FILE *f, const bench_result *res, int n, const bench_roofline *roof, int threads) {
    double *x = malloc((size_t)(n ? n : 1) * sizeof *x), *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        return cli_fail("out of memory");
    }
    char t1[96], t2[96], t3[96];
    snprintf(t1, sizeof t1, "prefill, causal, %d threads", threads);
    snprintf(t2, sizeof t2, "chunked prefill, Lq = %d, %d threads", res_chunk_lq(res, n), threads);
    snprintf(t3, sizeof t3, "decode, Lq = 1, cold cache, %d threads", threads);
    const double fma = roof ? roof->fma_gflops : 0, bf16 = roof ? roof->bf16_gflops : 0;
    qkv_chart_box box = {.x = 70, .y = 30, .w = 350, .h = 240, .title = t1, .x_title = "n = Lq = Lk (tokens)",
                         .y_title = "GFLOP/s (causal FLOPs)", .x_log2 = 1, .legend_cols = 2};
    qkv_chart_begin(f, 3 * 450, box.y + box.h + qkv_chart_below(&box, N_MODELS * 4 + 2), NULL);
    svg_panel(f, &box, res, n, "prefill", fma, "fp32 FMA peak", bf16, "bf16 dot peak", 0, x, y);
    box.x += 450, box.title = t2, box.x_title = "Lk (keys)";
    svg_panel(f, &box, res, n, "chunk", fma, "fp32 FMA peak", bf16, "bf16 dot peak", 0, x, y);
    box.x += 450, box.title = t3, box.y_title = "KV GB/s";
    svg_panel(f, &box, res, n, "decode", roof ? roof->dram_gbs : 0, "DRAM read", 0, "", 1, x, y);
    qkv_chart_end(f);
    free(x), free(y);
    return 0;
}

/* ---------------------------------------------------------------- sweeps */

enum { SW_ROOF = 1, SW_PREFILL = 2, SW_CHUNK = 4, SW_DECODE = 8, SW_REF = 16, SW_ALL = 31 };

#define MAX_RESULTS 512

static int run_sweeps(int sweeps, const bench_opts *o) {
    const int threads = o->threads > 0 ? o->threads : qkv_cpu_count();
    bench_roofline roof_v, *roof = NULL;
    qkv_error err = {0};
    /* the plot's target is checked before the sweeps; its file appears only
     * when every sweep ran */
    FILE *svg_f = o->svg ? cli_output_stream(o->svg) : NULL;
    if (o->svg && !svg_f) return CLI_EXIT_BAD_INPUT;
    if (sweeps & SW_ROOF) {
        if (bench_roofline_measure(&roof_v, threads, o->quick ? 0.05 : 0.3, o->quick ? (size_t)64 << 20 : 0, &err))
            return cli_outputs_finish(cli_fail("%s", err.msg));
        roof = &roof_v;
    }
    if (!o->json) {
        printf("qkv bench: %d threads, %s kernels, %ld CPUs online%s\n", threads, qkv_attn_isa(),
               sysconf(_SC_NPROCESSORS_ONLN), o->quick ? " (quick: small shapes, few runs)" : "");
        if (roof)
            printf("roofline: fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, DRAM read %.1f GB/s\n", roof->fma_gflops,
                   roof->bf16_gflops, roof->dram_gbs);
        fflush(stdout);
    }
    static const int prefill_n[] = {512, 1024, 2048, 4096, 8192, 16384}, prefill_q[] = {128, 256};
    static const int chunk_k[] = {1024, 2048, 4096, 8192, 16384}, chunk_q[] = {512};
    static const int decode_k[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}, decode_q[] = {1024, 4096};
    static const int ref_n[] = {256, 512}, ref_q[] = {128};
    struct {
        int bit;
        const char *name;
        const int *full, *quick;
        int n_full, n_quick;
    } plan[] = {
        {SW_PREFILL, "prefill", prefill_n, prefill_q, 6, 2},
        {SW_CHUNK, "chunk", chunk_k, chunk_q, 5, 1},
        {SW_DECODE, "decode", decode_k, decode_q, 8, 2},
        {SW_REF, "ref", ref_n, ref_q, 2, 1},
    };
    bench_result *res = calloc(MAX_RESULTS, sizeof *res);
    if (!res) return cli_outputs_finish(cli_fail("bench: out of memory"));
    /* the plan first: every shape of every sweep, so that progress knows the total */
    int nres = 0, status = 0, first[4] = {0}, last[4] = {0}; /* res[first[p] .. last[p]) is sweep p */
    for (size_t p = 0; p < sizeof plan / sizeof plan[0]; p++) {
        first[p] = nres;
        const int *lens = o->quick ? plan[p].quick : plan[p].full;
        int n_lens = o->quick ? plan[p].n_quick : plan[p].n_full;
        for (int m = 0; m < N_MODELS && (sweeps & plan[p].bit); m++) {
            if (!o->use_model[m]) continue;
            for (int t = 0; t < 3; t++) {
                int is_ref = plan[p].bit == SW_REF;
                if (!o->use_dt[t] || (is_ref && t != QKV_DTYPE_F32)) continue;
                for (int li = 0; li < n_lens; li++) {
                    int len = lens[li];
                    if (plan[p].bit == SW_DECODE ? len > o->max_kv : len > o->max_n) continue;
                    /* ref: the reference, then flash; bf16 prefill and chunk: flash, then flash-bf16 */
                    int bf16dot = !is_ref && t == QKV_DTYPE_BF16 && plan[p].bit != SW_DECODE;
                    for (int pass = 0; pass < (is_ref || bf16dot ? 2 : 1) && nres < MAX_RESULTS; pass++) {
                        bench_result *r = &res[nres++];
                        r->sweep = plan[p].name;
                        r->model = bench_models[m].id;
                        r->hq = bench_models[m].hq;
                        r->hkv = bench_models[m].hkv;
                        r->d = bench_models[m].d;
                        r->causal = 1;
                        r->threads = threads;
                        r->dt = (qkv_dtype)t;
                        r->lk = len;
                        r->lq = plan[p].bit == SW_DECODE ? 1 : plan[p].bit == SW_CHUNK ? (o->quick ? 128 : 512) : len;
                        r->kernel = plan[p].bit == SW_DECODE ? QKV_KERNEL_DECODE
                                    : is_ref && pass == 0    ? QKV_KERNEL_REFERENCE
                                    : bf16dot && pass == 1   ? QKV_KERNEL_FLASH_BF16
                                                             : QKV_KERNEL_FLASH;
                        r->cold = plan[p].bit == SW_DECODE && o->cold;
                    }
                }
            }
        }
        last[p] = nres;
    }
    if (o->json) {
        printf("{\n");
        print_machine_json(threads);
        print_roofline_json(roof);
        printf("  \"results\": [\n");
    }
    cli_progress_start("bench", nres, "shapes");
    for (size_t p = 0; p < sizeof plan / sizeof plan[0] && !status; p++) {
        if (!(sweeps & plan[p].bit)) continue;
        cli_progress_clear();
        if (!o->json) printf("\n%s\n", sweep_title(plan[p].name, o->quick));
        int header = 1;
        for (int i = first[p]; i < last[p] && !status; i++) {
            bench_result *r = &res[i];
            cli_progress_label("bench %s %s %s Lq=%d Lk=%d %s", r->sweep, r->model, qkv_dtype_name(r->dt), r->lq, r->lk,
                               qkv_kernel_name(r->kernel));
            cli_progress_update(i);
            if ((status = run_shape(r, o, roof))) break;
            cli_progress_clear();
            if (o->json) {
                printf(i ? ",\n" : "");
                print_result_json(r);
            } else {
                print_row_text(r, header);
                header = 0;
            }
            fflush(stdout);
            cli_progress_update(i + 1);
        }
    }
    cli_progress_finish();
    if (!status && o->svg) status = write_svg(svg_f, res, nres, roof, threads);
    status = cli_outputs_finish(status);
    if (!status && o->json) printf("\n  ]\n}\n");
    free(res);
    return status;
}

/* ------------------------------------------------------------------ main */

typedef struct {
    float softcap;
    int hq, hkv, d, lq, lk, repeat, no_causal, window, sweeps, want_roof, cold, layers, kernel, dt, models, dtypes;
    const char *preset, *layers_s;
    int shape_flag, heads_given; /* a shape flag given; how many of --hq, --hkv, --d */
    bench_opts o;
    cli_progress_flags pf;
} bench_args;

/* 0: parsed; -1: --help printed; 2: an error line printed. */
static int parse_args(bench_args *a, int argc, char **argv) {
    static const char *const sweep_names[] = {"roofline", "prefill", "chunk", "decode", "ref", "all", NULL};
    static const char *const model_ids[] = {"llama", "smol", NULL};
    memset(a, 0, sizeof *a);
    a->hq = 32, a->hkv = 8, a->d = 128, a->lq = 1024, a->lk = -1, a->repeat = -1, a->layers = 1;
    a->kernel = QKV_KERNEL_AUTO, a->dt = QKV_DTYPE_F32, a->models = 3, a->dtypes = 7;
    a->o.max_n = 1 << 20;
    a->o.max_kv = 1 << 22;
    a->o.budget_s = 20;
    a->o.cold = 1;
    cli_flag flags[] = {
        {.name = "--n", .kind = CLI_INT, .dest = &a->lq, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "query and key length (default 1024)"},
        {.name = "--lq", .kind = CLI_INT, .dest = &a->lq, .lo = 1, .hi = 1 << 20, .metavar = "N", .help = "query length"},
        {.name = "--lk", .kind = CLI_INT, .dest = &a->lk, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "key length (default: the query length)"},
        {.name = "--hq", .kind = CLI_INT, .dest = &a->hq, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "query heads (default 32)"},
        {.name = "--hkv", .kind = CLI_INT, .dest = &a->hkv, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "KV heads (default 8)"},
        {.name = "--d", .kind = CLI_INT, .dest = &a->d, .lo = QKV_HEAD_DIM_MIN, .hi = QKV_HEAD_DIM_MAX, .metavar = "N",
         .help = "head dim (default 128)"},
        CLI_FLAG_KERNEL(&a->kernel, "attention kernel (default auto)"),
        CLI_FLAG_KV_DTYPE(&a->dt, "K/V storage (default f32)"),
        {.name = "--no-causal", .kind = CLI_BOOL, .dest = &a->no_causal, .help = "no mask (default causal)"},
        {.name = "--window", .kind = CLI_INT, .dest = &a->window, .lo = 1, .hi = 1 << 22, .metavar = "W",
         .help = "sliding-window mask of W keys"},
        {.name = "--softcap", .kind = CLI_FLOAT, .dest = &a->softcap, .lo = 0, .hi = 1e30, .metavar = "C",
         .help = "cap scores to C*tanh(s/C) (Gemma 2: 50; default 0: none)"},
        {.name = "--cold", .kind = CLI_BOOL, .dest = &a->cold, .help = "flush the caches before every run"},
        {.name = "--preset", .kind = CLI_STRING, .dest = &a->preset, .metavar = "ID",
         .help = "heads of a `qkv cost` preset (llama-3.1-8b, smollm2-135m, ...)"},
        {.name = "--layers", .kind = CLI_STRING, .dest = &a->layers_s, .metavar = "N|all",
         .help = "N layers, each with its own K/V; a run is every layer once\n" "(with --preset and --lq 1: a decode step of the whole model,\n" "printed beside the cost model's prediction; a preset's sliding\n" "layers get its window and only the rows a sliding-window cache keeps)"},
        {.name = "--roofline", .kind = CLI_BOOL, .dest = &a->want_roof,
         .help = "also measure the machine's peaks and report the fraction"},
        CLI_FLAG_CHOICE("--sweep", CLI_CHOICES, &a->sweeps, sweep_names, "sweeps to run, comma separated (below)"),
        {.name = "--quick", .kind = CLI_BOOL, .dest = &a->o.quick,
         .help = "small shapes (prefill n = 128, 256; chunk 128 x 512; decode\n1K, 4K; ref 128) and 3 runs: a few seconds"},
        CLI_FLAG_CHOICE("--models", CLI_CHOICES, &a->models, model_ids, "sweep these heads (default both)"),
        CLI_FLAG_CHOICE("--kv-dtypes", CLI_CHOICES, &a->dtypes, cli_kv_dtypes, "sweep these KV dtypes (default all)"),
        {.name = "--max-n", .kind = CLI_INT, .dest = &a->o.max_n, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "sweeps: longest prefill / chunk length"},
        {.name = "--max-kv", .kind = CLI_INT, .dest = &a->o.max_kv, .lo = 1, .hi = 1 << 22, .metavar = "N",
         .help = "sweeps: longest decode KV"},
        {.name = "--budget", .kind = CLI_DOUBLE, .dest = &a->o.budget_s, .lo = 0, .hi = 1e6, .metavar = "S",
         .help = "per shape, stop repeating after S seconds (default 20)"},
        {.name = "--svg", .kind = CLI_STRING, .dest = &a->o.svg, .metavar = "FILE",
         .help = "plot GFLOP/s and KV GB/s against length, peaks as lines"},
        CLI_FLAG_THREADS(&a->o.threads),
        {.name = "--repeat", .kind = CLI_INT, .dest = &a->repeat, .lo = 1, .hi = 1000, .metavar = "R",
         .help = "timed runs (default 3, sweeps 5)"},
        CLI_FLAG_JSON(&a->o.json, "results as JSON"),
        CLI_FLAGS_PROGRESS(&a->pf),
        {0},
    };
    const cli_command cmd = {
        .name = "bench", .usage = "[shape flags] [--roofline] | --sweep LIST [sweep flags]  [--threads N] [--repeat R] [--json]",
        .about = "One shape (default: Llama-3.1-8B heads, n = 1024, causal, auto kernel), or sweeps.",
        .notes = "Sweeps: roofline (fp32 FMA, bf16 dot, DRAM read), prefill (n = 512..16384), chunk\n"
        "(Lq = 512, Lk = 1K..16K), decode (Lq = 1, KV = 1K..128K, cold cache), ref (n = 256, 512),\n"
        "for Llama-3.1-8B (32/8, D 128) and SmolLM2 (9/3, D 64) heads and f32/bf16/f16 KV\n"
        "(bf16 KV prefill and chunk also through flash-bf16, against the bf16 dot peak).\n"
        "GFLOP/s counts 4·D FLOPs per visible (query, key) pair and head (the causal half).",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed;
    cli_progress_init(&a->pf); /* the sweeps report each shape */
    static const char *const shape_flags[] = {"--n", "--lq", "--lk", "--hq", "--hkv", "--d", "--kernel", "--kv-dtype",
                                              "--no-causal", "--window", "--softcap", "--preset", "--layers", NULL};
    a->heads_given = cli_given(&cmd, "--hq") + cli_given(&cmd, "--hkv") + cli_given(&cmd, "--d");
    for (int k = 0; shape_flags[k]; k++) a->shape_flag |= cli_given(&cmd, shape_flags[k]);
    if (a->sweeps & 32) a->sweeps = SW_ALL; /* the bits of sweep_names are the SW_ values */
    for (int m = 0; m < N_MODELS; m++) a->o.use_model[m] = a->models >> m & 1;
    for (int t = 0; t < 3; t++) a->o.use_dt[t] = a->dtypes >> t & 1;
    return 0;
}

/* One shape's heads and layers from --preset and --layers (*model, *name: the
 * preset's configuration and name); 0 or 2 after an error line. */
static int shape_of(bench_args *a, qkv_model_config *model, const char **name) {
    qkv_error err = {0};
    if (a->preset) { /* heads and layers of a known model, as `qkv cost` has them */
        if (a->heads_given) return cli_fail("bench: --preset sets --hq, --hkv and --d; give one or the other");
        if (qkv_cost_preset(model, name, a->preset, &err)) return cli_fail("--preset: %s", err.msg);
        a->hq = model->n_head, a->hkv = model->n_kv_head, a->d = model->head_dim;
    }
    if (a->layers_s) {
        if (!strcmp(a->layers_s, "all")) {
            if (!a->preset) return cli_fail("--layers all needs --preset");
            a->layers = model->n_layer;
        } else if (cli_parse_int(&a->layers, "--layers", a->layers_s, 1, 1024)) {
            return 2;
        }
    }
    if (a->hq % a->hkv) return cli_fail("bench: --hq %d is not a multiple of --hkv %d", a->hq, a->hkv);
    return 0;
}

/* The sliding layers of a preset's pattern, on one line. */
static void print_pattern(const bench_result *r, int layers) {
    int sliding = 0, rows;
    qkv_mask m;
    for (int l = 0; l < layers; l++) sliding += layer_slides(r, l);
    layer_shape(&m, &rows, r, 0);
    printf("sliding layers: %d of %d (l mod %d < %d) see the last %d keys, each holding %d rows of K/V "
           "(min(lk, W - 1 + lq), a sliding-window cache)\n",
           sliding, layers, r->pattern->swa_period, r->pattern->swa_period - 1, r->pattern->window, rows);
}

/* The cost model's decode step at context lk, beside the measurement: the
 * first `layers` layers, as they ran (the preset's pattern, or all global);
 * 0 or 2 after an error line. */
static int print_cost_model(const qkv_model_config *model, const char *name, const bench_args *a,
                            const bench_result *r, int pattern, const bench_roofline *roof) {
    qkv_cost c;
    qkv_model_config part = *model;
    qkv_error err = {0};
    part.n_layer = a->layers;
    if (!pattern) part.window = 0;
    if (qkv_cost_eval(&c, &part, 0, a->lk, qkv_dtype_size((qkv_dtype)a->dt), &err)) return cli_fail("%s", err.msg);
    double flops = c.attn_flops_per_token, bytes = c.kv_read_bytes_per_token;
    printf("cost model (%s, %d of %d layers, context %d, %s K/V): %.2f GFLOPs and %.2f GiB of KV per token", name,
           a->layers, model->n_layer, a->lk, qkv_dtype_name((qkv_dtype)a->dt), flops * 1e-9, bytes / (1 << 30));
    if (roof) {
        double t_mem = bytes / (roof->dram_gbs * 1e9), t_fma = flops / (roof->fma_gflops * 1e9);
        printf("; at the measured peaks %.3f s (%s-bound); measured %.3f s = %.2fx the prediction", t_mem > t_fma ? t_mem : t_fma,
               t_mem > t_fma ? "memory" : "compute", r->med, r->med / (t_mem > t_fma ? t_mem : t_fma));
    }
    printf("\n");
    return 0;
}

/* One shape: measured, then printed (text or JSON); 0 or 2. */
static int run_one_shape(bench_args *a) {
    bench_opts *o = &a->o;
    if (a->lk < 0) a->lk = a->lq;
    qkv_model_config model;
    const char *name = NULL;
    qkv_error err = {0};
    int rc = shape_of(a, &model, &name);
    if (rc) return rc;
    const int causal = !a->no_causal, hq = a->hq, hkv = a->hkv, d = a->d, lq = a->lq, lk = a->lk, layers = a->layers;
    /* a whole model's layers follow its sliding pattern */
    const int pattern = a->preset && a->layers_s && model.window > 0;
    if (pattern && (a->window || a->no_causal))
        return cli_fail("bench: --preset %s with --layers sets each layer's mask (window %d on its sliding layers, "
                        "causal on the others); drop --window and --no-causal", a->preset, model.window);

    o->repeat = a->repeat > 0 ? a->repeat : 3;
    o->budget_s = 1e9; /* one shape: exactly --repeat runs */
    bench_roofline roof_v, *roof = NULL;
    int threads = o->threads > 0 ? o->threads : qkv_cpu_count();
    if (a->want_roof) {
        if (bench_roofline_measure(&roof_v, threads, 0.3, 0, &err)) return cli_fail("%s", err.msg);
        roof = &roof_v;
    }
    bench_result r;
    memset(&r, 0, sizeof r);
    r.sweep = "shape";
    r.model = "custom";
    r.hq = hq, r.hkv = hkv, r.d = d, r.lq = lq, r.lk = lk, r.window = a->window, r.causal = causal, r.softcap = a->softcap;
    r.threads = o->threads; /* 0 = all, as the kernel is told */
    r.dt = (qkv_dtype)a->dt;
    r.kernel = (qkv_kernel)a->kernel;
    r.cold = a->cold;
    r.layers = layers;
    if (pattern) r.pattern = &model;
    if ((rc = run_shape(&r, o, roof))) return rc;
    if (o->json) {
        r.threads = threads;
        printf("{\n");
        print_machine_json(threads);
        print_roofline_json(roof);
        printf("  \"results\": [\n");
        print_result_json(&r);
        printf("\n  ]\n}\n");
        return 0;
    }
    printf("kernel=%s hq=%d hkv=%d d=%d lq=%d lk=%d kv=%s mask=%s", qkv_kernel_name(r.kernel), hq, hkv, d, lq, lk,
           qkv_dtype_name((qkv_dtype)a->dt), a->window ? "window" : causal ? "causal" : "none");
    if (a->softcap > 0) printf(" softcap=%g", (double)a->softcap);
    printf(" threads=%d\n", threads);
    printf("time_s median=%.6f min=%.6f max=%.6f  GFLOP/s=%.2f  KV_GB/s=%.2f  peak_rss_MiB=%.1f\n", r.med, r.min, r.max,
           r.gflops, r.kv_gbs, r.rss_mib);
    if (layers > 1)
        printf("layers=%d: one run = every layer once; time per run %.3f ms, %.1f GiB of K/V read per run\n", layers,
               r.med * 1e3, r.kv_gbs * r.med * 1e9 / (1 << 30));
    if (pattern) print_pattern(&r, layers);
    if (roof)
        printf("roofline fma_GFLOP/s=%.1f bf16_GFLOP/s=%.1f dram_GB/s=%.1f  peak_fraction=%.3f (%s)\n", roof->fma_gflops,
               roof->bf16_gflops, roof->dram_gbs, r.peak_frac,
               r.kernel == QKV_KERNEL_DECODE ? "of DRAM" : r.kernel == QKV_KERNEL_FLASH_BF16 ? "of bf16 dot" : "of FMA");
    if (a->preset && lq == 1) return print_cost_model(&model, name, a, &r, pattern, roof);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.sweeps) {
        if (a.shape_flag)
            return cli_fail("bench: --sweep runs its own shapes; drop the shape flags (--n, --kernel, ...)");
        a.o.repeat = a.repeat > 0 ? a.repeat : a.o.quick ? 3 : 5;
        if (a.o.quick) a.o.budget_s = a.o.budget_s < 2 ? a.o.budget_s : 2;
        return run_sweeps(a.sweeps, &a.o);
    }
    if (a.o.svg || a.o.quick) return cli_fail("bench: --svg and --quick go with --sweep");
    return run_one_shape(&a);
}
