/*
 * explore_steps.c — times what qkv serve asks of one session (issue 40's
 * item 5): the prefill of a long document with and without the max-pooled
 * overview hook (A/B in turns on the same model), then one row of one head
 * (qkv_explore_row: a replay up to its layer), every layer x head of one
 * query (qkv_explore_rows) and the overview of one head (qkv_overview_get),
 * each the median of several queries. The document is text files read in
 * turn until n tokens, through the model's own tokenizer; the KV cache is
 * full (no swa_cache) in f16, prefilled in calls of 512. Prefills report
 * wall and process CPU seconds (the CPU's share is steadier on a busy machine).
 *   ./explore_steps MODEL.gguf N threads max_bins rounds FILE...
 * (`make` builds it as build/explore_steps).
 */
#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timing.h"

#define N_QUERIES 7

/* ids [n] from the files' text, concatenated; NULL if they hold fewer tokens. */
static int32_t *document(const qkv_tokenizer *tok, char **files, int n_files, int n) {
    size_t len = 0, cap = 1 << 20;
    char *text = malloc(cap);
    for (int f = 0; f < n_files && text; f++) {
        FILE *fp = fopen(files[f], "rb");
        if (!fp) continue;
        size_t got;
        char buf[65536];
        while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
            if (len + got > cap && !(text = realloc(text, cap *= 2))) break;
            memcpy(text + len, buf, got), len += got;
        }
        fclose(fp);
    }
    int64_t have = 0;
    int32_t *ids = text ? malloc((size_t)qkv_tokenize_bound(len) * sizeof *ids) : NULL;
    qkv_error err;
    if (!ids || qkv_tokenize(tok, text, len, 1, 0, ids, qkv_tokenize_bound(len), &have, &err) || have < n) {
        fprintf(stderr, "explore_steps: the files hold %lld tokens, fewer than %d\n", (long long)have, n);
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wall seconds of a prefill of ids [n] from position 0 in calls of 512,
 * with the overview hooked if ov; *cpu its process CPU seconds. */
static double prefill(qkv_model *m, const int32_t *ids, int n, qkv_overview *ov, double *cpu) {
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_overview_hook, .user = ov};
    const qkv_forward_opts o = {.hooks = &hook, .n_hooks = ov ? 1 : 0};
    qkv_error err;
    qkv_model_rewind(m, 0, NULL);
    if (ov) qkv_overview_clear(ov);
    const double t0 = util_now_s(), c0 = cpu_s();
    for (int p = 0; p < n; p += 512)
        if (qkv_model_forward(m, NULL, ids + p, n - p < 512 ? n - p : 512, 0, &o, &err)) {
            fprintf(stderr, "explore_steps: %s\n", err.msg);
            exit(1);
        }
    *cpu = cpu_s() - c0;
    return util_now_s() - t0;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, by_value);
    return x[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: explore_steps MODEL.gguf N threads max_bins rounds FILE...\n");
        return 2;
    }
    const int n = atoi(argv[2]), threads = atoi(argv[3]), max_bins = atoi(argv[4]), rounds = atoi(argv[5]);
    const qkv_model_params p = {.n_ctx = n, .n_batch = 512, .kv_dtype = QKV_DTYPE_F16, .n_threads = threads};
    qkv_weights *w = NULL;
    qkv_model *m = NULL;
    qkv_tokenizer *tok = NULL;
    qkv_overview *ov = NULL;
    qkv_error err;
    if (qkv_weights_open(&w, argv[1], &err) || qkv_model_new(&m, w, &p, &err) ||
        qkv_tokenizer_load(&tok, qkv_weights_gguf(w), &err) ||
        qkv_overview_init(&ov, qkv_weights_config(w), max_bins, &err)) {
        fprintf(stderr, "explore_steps: %s\n", err.msg);
        return 1;
    }
    int32_t *ids = document(tok, argv + 6, argc - 6, n);
    if (!ids) return 1;
    const qkv_model_config *c = qkv_model_get_config(m);
    int global = 0;
    while (global < c->n_layer && qkv_model_layer_slides(c, global)) global++;
    if (global == c->n_layer) global = 0;
    printf("model %s, %d tokens, f16 cache, %d threads; weights %.1f MiB, session state %.1f MiB, overview %.1f MiB\n",
           c->arch, n, threads, qkv_weights_bytes(w) / 1048576.0, qkv_model_state_bytes(m) / 1048576.0,
           qkv_overview_bytes(ov) / 1048576.0);
    /* A/B in turns: plain, overview, plain, overview ... */
    for (int r = 0; r < rounds; r++) {
        double cpu_plain, cpu_pooled;
        const double plain = prefill(m, ids, n, NULL, &cpu_plain), pooled = prefill(m, ids, n, ov, &cpu_pooled);
        printf("prefill round %d: plain %.2f s (CPU %.2f s), with the overview hook %.2f s (CPU %.2f s): "
               "+%.1f%% wall, +%.1f%% CPU\n", r, plain, cpu_plain, pooled, cpu_pooled, 100 * (pooled / plain - 1),
               100 * (cpu_pooled / cpu_plain - 1));
        fflush(stdout);
    }
    if (rounds < 1) { /* the rows still need a prefill */
        double cpu;
        printf("prefill with the overview hook %.2f s\n", prefill(m, ids, n, ov, &cpu));
    }
    float *rows = malloc((size_t)c->n_layer * c->n_head * n * sizeof(float));
    float *cells = malloc((size_t)max_bins * max_bins * sizeof(float));
    double t_row_global[N_QUERIES], t_row_sliding[N_QUERIES], t_rows[N_QUERIES], t_cells[N_QUERIES];
    for (int k = 0; k < N_QUERIES; k++) {
        const int q = n - 1 - k * (n / N_QUERIES);
        double t0 = util_now_s();
        if (qkv_explore_row(rows, m, ids, q, global, 0, &err)) break;
        t_row_global[k] = util_now_s() - t0;
        t0 = util_now_s();
        if (qkv_explore_row(rows, m, ids, q, 0, 0, &err)) break;
        t_row_sliding[k] = util_now_s() - t0;
        t0 = util_now_s();
        if (qkv_explore_rows(rows, m, ids, q, &err)) break;
        t_rows[k] = util_now_s() - t0;
        int block;
        t0 = util_now_s();
        qkv_overview_get(ov, cells, global, k % c->n_head, n, &block);
        t_cells[k] = util_now_s() - t0;
    }
    printf("one row (layer %d, global, head 0): median %.1f ms\n", global, 1e3 * median(t_row_global, N_QUERIES));
    printf("one row (layer 0, head 0): median %.1f ms\n", 1e3 * median(t_row_sliding, N_QUERIES));
    printf("every layer x head of one query (%d x %d rows): median %.1f ms\n", c->n_layer, c->n_head,
           1e3 * median(t_rows, N_QUERIES));
    printf("one head's overview (%d bins a side max): median %.3f ms\n", max_bins, 1e3 * median(t_cells, N_QUERIES));
    free(rows);
    free(cells);
    free(ids);
    qkv_overview_free(ov);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
    qkv_weights_close(w);
    return 0;
}
