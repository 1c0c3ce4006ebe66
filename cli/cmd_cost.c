/*
 * cmd_cost.c — `qkv cost`: the article's cost accounting for a model
 * configuration (a preset, a GGUF file's metadata, or sizes by hand), at each
 * context length: attention FLOPs per token against the weight matmuls, the
 * prefill share, the bytes of a materialised score table and of the KV cache
 * (for a model with sliding layers also a sliding-window cache and llama.cpp's
 * beside the full one). Every figure comes from qkv_cost_eval; nothing is
 * typed in.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "json_out.h"
#include "util.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CTX 16

/* ------------------------------------------------------------- formatting */

/* "8,192" */
static void fmt_count(char *buf, size_t cap, int64_t v) {
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", (long long)(v < 0 ? -v : v));
    size_t n = strlen(raw), o = 0;
    if (v < 0 && o + 1 < cap) buf[o++] = '-';
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        buf[o++] = raw[i];
        if ((n - i - 1) % 3 == 0 && i + 1 < n) buf[o++] = ',';
    }
    buf[o] = 0;
}

/* A whole number prints without decimals ("4 GiB"), else with one ("22.5 KiB"). */
static void fmt_scaled(char *buf, size_t cap, double v, const char *unit) {
    double r = round(v * 10) / 10;
    if (fabs(r - round(r)) < 1e-9) snprintf(buf, cap, "%.0f %s", r, unit);
    else snprintf(buf, cap, "%.1f %s", r, unit);
}

/* Bytes in B / KiB / MiB / GiB; GiB is the largest unit, as in the article
 * ("1024 GiB" for the 128K score table). */
static void fmt_bytes(char *buf, size_t cap, double b) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && b >= 1024) {
        b /= 1024;
        u++;
    }
    fmt_scaled(buf, cap, b, units[u]);
}

static void fmt_flops(char *buf, size_t cap, double f) {
    static const char *units[] = {"MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs", "EFLOPs"};
    double v = f / 1e6;
    int u = 0;
    while (u < 4 && v >= 999.95) {
        v /= 1000;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
}

static void fmt_ratio(char *buf, size_t cap, double r) {
    if (r < 0.1) snprintf(buf, cap, "%.1f%%", r * 100);
    else if (r < 1) snprintf(buf, cap, "%.0f%%", r * 100);
    else snprintf(buf, cap, "%.1fx", r);
}

static void fmt_params(char *buf, size_t cap, double p) {
    if (p >= 1e9) snprintf(buf, cap, "%.2f B", p / 1e9);
    else snprintf(buf, cap, "%.1f M", p / 1e6);
}

/* --------------------------------------------------------------- parsing */

typedef struct {
    int64_t v[MAX_CTX];
    int n;
} ctx_list;

/* "8192", "8K", "128k", "1M": a positive token count. */
static int parse_ctx_list(void *dest, const char *flag, const char *s) {
    int64_t *ctx = ((ctx_list *)dest)->v;
    int *n_ctx = &((ctx_list *)dest)->n;
    (void)flag;
    *n_ctx = 0;
    const char *p = s;
    if (!*p) return cli_fail("--ctx: missing value");
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) return cli_fail("--ctx: bad list '%s'", s);
        memcpy(item, p, len);
        item[len] = 0;
        int64_t mult = 1;
        char last = item[len - 1];
        if (last == 'k' || last == 'K') mult = 1024;
        else if (last == 'm' || last == 'M') mult = 1024 * 1024;
        if (mult > 1) item[len - 1] = 0;
        int64_t v;
        char *end;
        long long raw = strtoll(item, &end, 10);
        if (!item[0] || *end) return cli_fail("--ctx: '%.*s' is not a token count", (int)len, p);
        if (raw < 1) return cli_fail("--ctx: context must be at least 1 token, got %lld", raw);
        if (raw > ((int64_t)1 << 40) / mult)
            return cli_fail("--ctx: %.*s is too large (at most 2^40 tokens)", (int)len, p);
        v = raw * mult;
        if (*n_ctx >= MAX_CTX) return cli_fail("--ctx: at most %d context lengths", MAX_CTX);
        ctx[(*n_ctx)++] = v;
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

typedef struct {
    size_t bytes;
    const char *name;
} elem_type;

static int parse_dtype(void *dest, const char *flag, const char *s) {
    size_t *bytes = &((elem_type *)dest)->bytes;
    const char **name = &((elem_type *)dest)->name;
    qkv_dtype t;
    (void)flag;
    if (qkv_dtype_parse(&t, s, NULL) == QKV_OK) {
        *bytes = qkv_dtype_size(t);
        *name = qkv_dtype_name(t);
        return 0;
    }
    if (!strcmp(s, "fp8") || !strcmp(s, "f8")) {
        *bytes = 1;
        *name = "fp8";
        return 0;
    }
    return cli_fail("--dtype: unknown type '%s' (f32, bf16, f16, fp8)", s);
}

/* The configuration from GGUF metadata, read as qkv_model_open reads it
 * (qkv_model_config_read), named by general.name (else the path). */
static int load_gguf(qkv_model_config *c, char *name, size_t cap, const char *path) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, path, &err) || qkv_model_config_read(c, g, &err)) {
        qkv_gguf_close(g);
        return cli_fail("%s", err.msg);
    }
    const char *general = NULL;
    if (qkv_gguf_find_key(g, "general.name") >= 0 &&
        qkv_gguf_get_string(&general, NULL, g, "general.name", &err) == QKV_OK && general && *general)
        snprintf(name, cap, "%s", general);
    else
        snprintf(name, cap, "%s", path);
    qkv_gguf_close(g);
    return 0;
}

/* ------------------------------------------------------------------ JSON */

static void print_json(const qkv_model_config *c, const char *name, const char *source, const char *dtype,
                       const qkv_cost *r, int n, const qkv_ring_params *ring, const qkv_ring_cost *rc) {
    printf("{\n  \"model\": {\"name\": ");
    cli_json_string(stdout, name);
    printf(", \"source\": ");
    cli_json_string(stdout, source);
    printf(", \"layers\": %d, \"hidden\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
           "\"ffn\": %d, \"vocab\": %d, \"tied_embeddings\": %s, \"window\": %d, \"swa_period\": %d, "
           "\"sliding_layers\": %d},\n",
           c->n_layer, c->n_embd, c->n_head, c->n_kv_head, c->head_dim, c->n_ff, c->n_vocab,
           c->tied_embeddings ? "true" : "false", c->window, c->window ? c->swa_period : 0, r[0].n_sliding);
    printf("  \"chunk_tokens\": %d,\n", r[0].chunk);
    printf("  \"dtype\": \"%s\",\n  \"elem_bytes\": %zu,\n", dtype, r[0].elem_bytes);
    printf("  \"params_total\": %.0f,\n  \"params_matmul\": %.0f,\n", r[0].params_total,
           r[0].params_matmul);
    printf("  \"weight_flops_per_token\": %.0f,\n  \"weight_gflops_per_token\": %.4f,\n",
           r[0].weight_flops_per_token, r[0].weight_flops_per_token / 1e9);
    printf("  \"kv_cache_bytes_per_token\": %.0f,\n  \"kv_cache_kib_per_token\": %.4f,\n",
           r[0].kv_bytes_per_token, r[0].kv_bytes_per_token / 1024);
    printf("  \"contexts\": [\n");
    for (int i = 0; i < n; i++) {
        const qkv_cost *x = &r[i];
        printf("    {\"ctx_tokens\": %lld, ", (long long)x->ctx);
        printf("\"attn_flops_per_token\": %.0f, \"attn_gflops_per_token\": %.4f, ",
               x->attn_flops_per_token, x->attn_flops_per_token / 1e9);
        printf("\"attn_flops_per_token_if_global\": %.0f, ", x->attn_flops_per_token_global);
        printf("\"attn_share_of_token_flops\": %.6f, ",
               x->attn_flops_per_token / (x->attn_flops_per_token + x->weight_flops_per_token));
        printf("\"prefill_attn_flops\": %.0f, \"prefill_attn_tflops\": %.4f, ",
               x->prefill_attn_flops, x->prefill_attn_flops / 1e12);
        printf("\"prefill_attn_flops_if_global\": %.0f, ", x->prefill_attn_flops_global);
        printf("\"prefill_fixed_flops\": %.0f, \"prefill_fixed_tflops\": %.4f, ",
               x->prefill_fixed_flops, x->prefill_fixed_flops / 1e12);
        printf("\"prefill_attn_ratio\": %.6f, \"prefill_attn_percent\": %.4f, ",
               x->prefill_attn_ratio, x->prefill_attn_ratio * 100);
        printf("\"score_table_bytes_per_layer\": %.0f, \"score_table_gib_per_layer\": %.6f, ",
               x->score_table_bytes_per_layer, x->score_table_bytes_per_layer / 1073741824.0);
        printf("\"flash_bytes_per_layer\": %.0f, \"flash_mib_per_layer\": %.6f, ",
               x->flash_bytes_per_layer, x->flash_bytes_per_layer / 1048576.0);
        printf("\"flash_saves_bytes_per_layer\": %.0f, ",
               x->score_table_bytes_per_layer - x->flash_bytes_per_layer);
        printf("\"kv_cache_bytes\": %.0f, \"kv_cache_gib\": %.6f, ", x->kv_cache_bytes, x->kv_cache_bytes / 1073741824.0);
        printf("\"kv_cache_swa_bytes\": %.0f, \"kv_cache_swa_gib\": %.6f, ", x->kv_cache_bytes_swa,
               x->kv_cache_bytes_swa / 1073741824.0);
        printf("\"kv_cache_llama_cpp_bytes\": %.0f, \"kv_cache_llama_cpp_gib\": %.6f, ", x->kv_cache_bytes_llama_cpp,
               x->kv_cache_bytes_llama_cpp / 1073741824.0);
        printf("\"kv_read_bytes_per_token\": %.0f", x->kv_read_bytes_per_token);
        if (ring) {
            const qkv_ring_cost *y = &rc[i];
            printf(", \"ring\": {\"ranks\": %d, \"link_gbs\": %g, \"rank_gflops\": %g, \"tokens_per_rank\": %.1f, "
                   "\"kv_bytes_per_rank\": %.0f, \"kv_gib_per_rank\": %.6f, \"block_bytes\": %.0f, "
                   "\"ring_bytes_per_layer\": %.0f, \"ring_mib_per_layer\": %.4f, \"step_compute_s\": %.6g, "
                   "\"step_transfer_s\": %.6g, \"hidden\": %s, \"min_tokens_per_rank\": %.1f, "
                   "\"prefill_attn_s\": %.6g, \"prefill_attn_one_rank_s\": %.6g, \"model_ring_bytes\": %.0f, "
                   "\"model_ring_bytes_causal\": %.0f}",
                   ring->ranks, ring->link_gbs, ring->rank_gflops, y->tokens_per_rank, y->kv_bytes_per_rank,
                   y->kv_bytes_per_rank / 1073741824.0, y->block_bytes, y->ring_bytes_per_layer,
                   y->ring_bytes_per_layer / 1048576.0, y->step_compute_s, y->step_transfer_s, y->hidden ? "true" : "false",
                   y->min_tokens_per_rank, y->prefill_attn_s, y->prefill_attn_one_s, y->model_ring_bytes,
                   y->model_ring_bytes_causal);
        }
        printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("  ]\n}\n");
}

/* ------------------------------------------------------------------ text */

#define LABEL_W 36
#define COL_W 14

static void row(const char *label, const qkv_cost *r, int n, void (*cell)(char *, size_t, const qkv_cost *)) {
    printf("  ");
    cli_put_cell(label, LABEL_W, 0);
    for (int i = 0; i < n; i++) {
        char buf[64];
        cell(buf, sizeof buf, &r[i]);
        cli_put_cell(buf, COL_W, 1);
    }
    putchar('\n');
}

static void c_attn_tok(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->attn_flops_per_token); }
static void c_weight_tok(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->weight_flops_per_token); }
static void c_attn_share(char *b, size_t n, const qkv_cost *x) {
    fmt_ratio(b, n, x->attn_flops_per_token / (x->attn_flops_per_token + x->weight_flops_per_token));
}
static void c_pre_attn(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->prefill_attn_flops); }
static void c_pre_fixed(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->prefill_fixed_flops); }
static void c_pre_ratio(char *b, size_t n, const qkv_cost *x) { fmt_ratio(b, n, x->prefill_attn_ratio); }
static void c_table(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->score_table_bytes_per_layer); }
static void c_flash(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->flash_bytes_per_layer); }
static void c_kv(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->kv_cache_bytes); }
static void c_attn_tok_g(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->attn_flops_per_token_global); }
static void c_pre_attn_g(char *b, size_t n, const qkv_cost *x) { fmt_flops(b, n, x->prefill_attn_flops_global); }
static void c_kv_swa(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->kv_cache_bytes_swa); }
static void c_kv_llama(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->kv_cache_bytes_llama_cpp); }
static void c_kv_read(char *b, size_t n, const qkv_cost *x) { fmt_bytes(b, n, x->kv_read_bytes_per_token); }

static void print_text(const qkv_model_config *c, const char *name, const char *source, const char *dtype,
                       const qkv_cost *r, int n) {
    char a[160], b[64], d[64], e[64];
    printf("%s (%s)\n", name, source);
    printf("  %d layers, hidden %d, ffn %d, vocab %d%s\n", c->n_layer, c->n_embd, c->n_ff, c->n_vocab,
           c->tied_embeddings ? ", tied embeddings" : "");
    printf("  %d query heads x %d dims, %d KV head%s", c->n_head, c->head_dim, c->n_kv_head, c->n_kv_head > 1 ? "s" : "");
    if (c->n_kv_head < c->n_head) printf(" (GQA: %d query heads share each)", c->n_head / c->n_kv_head);
    putchar('\n');
    const int slide = r[0].n_sliding;
    if (slide)
        printf("  %d of %d layers slide (layer l iff l mod %d < %d): each sees the last %d keys, the other %d all n\n",
               slide, c->n_layer, c->swa_period, c->swa_period - 1, c->window, c->n_layer - slide);
    double lm = (double)c->n_embd * c->n_vocab;
    fmt_params(a, sizeof a, r[0].params_total);
    fmt_params(b, sizeof b, r[0].params_matmul);
    fmt_params(d, sizeof d, r[0].params_matmul - lm);
    fmt_params(e, sizeof e, lm);
    printf("  %s parameters; a token is multiplied by %s of them (layers %s + lm_head %s)\n", a, b, d, e);
    fmt_bytes(a, sizeof a, r[0].kv_bytes_per_token);
    printf("  scores and K/V stored as %s (%zu bytes); KV cache %s per token\n\n", dtype,
           r[0].elem_bytes, a);

    printf("  ");
    cli_put_cell("context (tokens)", LABEL_W, 0);
    for (int i = 0; i < n; i++) {
        fmt_count(a, sizeof a, r[i].ctx);
        cli_put_cell(a, COL_W, 1);
    }
    printf("\n\n  one token at position n (decode)\n");
    row(slide ? "  attention  4·Hq·D·Σ keys" : "  attention  4·n·Hq·D·L", r, n, c_attn_tok);
    if (slide) row("  ... were every layer global", r, n, c_attn_tok_g);
    fmt_params(b, sizeof b, r[0].params_matmul);
    snprintf(a, sizeof a, "  weight matmuls  2 x %s", b);
    row(a, r, n, c_weight_tok);
    row("  attention's share", r, n, c_attn_share);
    printf("\n  prefill of all n tokens\n");
    row(slide ? "  attention  4·Hq·D·Σ rows' keys" : "  attention  2·n(n+1)·Hq·D·L", r, n, c_pre_attn);
    if (slide) row("  ... were every layer global", r, n, c_pre_attn_g);
    row("  fixed part  n x weight matmuls", r, n, c_pre_fixed);
    row("  attention / fixed part", r, n, c_pre_ratio);
    printf("\n  memory\n");
    snprintf(a, sizeof a, "  score table per layer  %d·n²·%zu B", c->n_head, r[0].elem_bytes);
    row(a, r, n, c_table);
    row("  FlashAttention per layer (f32 LSE)", r, n, c_flash);
    row("  KV cache, all layers", r, n, c_kv);
    if (slide) {
        snprintf(a, sizeof a, "  sliding-window cache, C = %d", r[0].chunk);
        row(a, r, n, c_kv_swa);
        row("  llama.cpp's cache (iSWA)", r, n, c_kv_llama);
        row("  KV read by one decode token", r, n, c_kv_read);
    }

    const qkv_cost *last = &r[n - 1];
    fmt_bytes(a, sizeof a, last->score_table_bytes_per_layer);
    fmt_bytes(b, sizeof b, last->flash_bytes_per_layer);
    fmt_count(d, sizeof d, last->ctx);
    printf("\nFlashAttention computes the same result with the same FLOPs, tile by tile with a\n"
           "running max and sum, and never writes the n x n table: at n = %s it saves\n"
           "%s per layer and keeps %s of per-row statistics instead. What still grows\n"
           "with n and is read at every step is the KV cache.\n",
           d, a, b);
    if (slide)
        printf("\nA sliding layer's cache keeps its last W - 1 + C rows: the W - 1 keys the first\n"
               "token of the next chunk of C still sees, plus the chunk. llama.cpp keeps\n"
               "min(n, W + n_ubatch) cells padded to 256 (llama-kv-cache-iswa.cpp; n_ubatch = C,\n"
               "one sequence, its tools' default without --swa-full) and pads n to 256 for\n"
               "the global layers.\n");
}

/* Seconds as "12.3 ms", "4.5 s", "2.1 h". */
static void fmt_seconds(char *buf, size_t cap, double t) {
    if (t < 1) snprintf(buf, cap, "%.1f ms", t * 1e3);
    else if (t < 3600) snprintf(buf, cap, "%.1f s", t);
    else snprintf(buf, cap, "%.1f h", t / 3600);
}

/* The prefill over ring.ranks machines: one row per figure, one column per context. */
static void print_ring_text(const qkv_ring_params *ring, const qkv_ring_cost *rc, int n) {
    printf("\n  across %d ranks (ring attention; link %g GB/s, %g GFLOP/s of attention per rank)\n", ring->ranks,
           ring->link_gbs, ring->rank_gflops);
    static const char *const labels[] = {"  tokens per rank", "  KV cache per rank", "  ring traffic per layer, per rank",
                                         "  one step: compute", "  one step: transfer", "  transfer hidden",
                                         "  prefill attention, all layers", "  ... on one rank"};
    for (int k = 0; k < 8; k++) {
        printf("  ");
        cli_put_cell(labels[k], LABEL_W, 0);
        for (int i = 0; i < n; i++) {
            char buf[64];
            const qkv_ring_cost *y = &rc[i];
            switch (k) {
            case 0: fmt_count(buf, sizeof buf, (int64_t)y->tokens_per_rank); break;
            case 1: fmt_bytes(buf, sizeof buf, y->kv_bytes_per_rank); break;
            case 2: fmt_bytes(buf, sizeof buf, y->ring_bytes_per_layer); break;
            case 3: fmt_seconds(buf, sizeof buf, y->step_compute_s); break;
            case 4: fmt_seconds(buf, sizeof buf, y->step_transfer_s); break;
            case 5: snprintf(buf, sizeof buf, "%s", y->hidden ? "yes" : "no"); break;
            case 6: fmt_seconds(buf, sizeof buf, y->prefill_attn_s); break;
            default: fmt_seconds(buf, sizeof buf, y->prefill_attn_one_s); break;
            }
            cli_put_cell(buf, COL_W, 1);
        }
        putchar('\n');
    }
    printf("\nA ring step moves one rank's K/V of a layer while the rank computes; it hides\n"
           "from %.0f tokens per rank on (Hkv·e·F / (Hq·B)).\n", rc[0].min_tokens_per_rank);
}

/* ------------------------------------------------------------------ main */

int cmd_cost(int argc, char **argv) {
    const char *preset = NULL, *model = NULL;
    elem_type elem = {2, "bf16"};
    int json = 0, tied = -1, window = 0, swa_period = 0, chunk = 0;
    ctx_list ctx = {{8192, 32768, 131072}, 3};
    qkv_ring_params ring = {.ranks = 0, .link_gbs = 12.5, .rank_gflops = 200};
    enum { L_, HID, HEADS, KVH, HD, FFN, VOC, NSZ };
    int size[NSZ] = {0};
    char presets[512] = ""; /* six ids a line */
    for (int i = 0; qkv_cost_preset_id(i); i++)
        snprintf(presets + strlen(presets), sizeof presets - strlen(presets), "%s%s", !i ? "" : i % 6 ? ", " : ",\n",
                 qkv_cost_preset_id(i));
    char preset_help[640];
    snprintf(preset_help, sizeof preset_help, "built-in configuration (default llama-3.1-8b); one of:\n%s", presets);
    cli_flag flags[] = {
        {.name = "--preset", .kind = CLI_STRING, .dest = &preset, .metavar = "ID", .help = preset_help},
        {.name = "--model", .alias = "-m", .kind = CLI_STRING, .dest = &model, .metavar = "FILE",
         .help = "read the configuration from GGUF metadata (llama.block_count, ...)"},
        {.name = "--layers", .kind = CLI_INT, .dest = &size[L_], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "sizes by hand; alone they need all but --head-dim (default\n" "hidden/heads); with --preset or --model they override it"},
        {.name = "--hidden", .kind = CLI_INT, .dest = &size[HID], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "hidden size"},
        {.name = "--heads", .kind = CLI_INT, .dest = &size[HEADS], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "query heads"},
        {.name = "--kv-heads", .kind = CLI_INT, .dest = &size[KVH], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "KV heads"},
        {.name = "--head-dim", .kind = CLI_INT, .dest = &size[HD], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "head dim"},
        {.name = "--ffn", .kind = CLI_INT, .dest = &size[FFN], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "feed-forward size"},
        {.name = "--vocab", .kind = CLI_INT, .dest = &size[VOC], .lo = 1, .hi = 1 << 30, .metavar = "N",
         .help = "vocabulary size"},
        {.name = "--tied", .kind = CLI_BOOL, .dest = &tied,
         .help = "lm_head shares the embedding matrix (parameter count only)"},
        {.name = "--window", .kind = CLI_INT, .dest = &window, .lo = 0, .hi = 1 << 30, .metavar = "W",
         .help = "sliding layers see the last W keys (0: every layer global)"},
        {.name = "--swa-period", .kind = CLI_INT, .dest = &swa_period, .lo = 0, .hi = 1 << 30, .metavar = "P",
         .help = "with --window: layer l slides iff l mod P < P - 1 (gemma2 2,\ngemma3 6)"},
        {.name = "--chunk", .kind = CLI_INT, .dest = &chunk, .lo = 1, .hi = 1 << 30, .metavar = "C",
         .help = "tokens a forward call adds at most: sizes the sliding-window\ncaches (default 512, llama.cpp's n_ubatch)"},
        CLI_FLAG_FN("--ctx", &ctx, parse_ctx_list, "LIST", "context lengths, comma separated, K = 1024 (default 8K,32K,128K)"),
        CLI_FLAG_FN("--dtype", &elem, parse_dtype, "T", "storage of scores and K/V: f32, bf16, f16, fp8 (default bf16)"),
        CLI_FLAG_JSON(&json, "the same figures as JSON, units in the key names"),
        {.name = "--ranks", .kind = CLI_INT, .dest = &ring.ranks, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "also the prefill split over N machines (ring attention, libqkv_mpi)"},
        {.name = "--link-gbs", .kind = CLI_DOUBLE, .dest = &ring.link_gbs, .lo = 1e-6, .hi = 1e9, .metavar = "X",
         .help = "with --ranks: GB/s each rank sends at (default 12.5: 100 Gb/s Ethernet)"},
        {.name = "--rank-gflops", .kind = CLI_DOUBLE, .dest = &ring.rank_gflops, .lo = 1e-6, .hi = 1e12, .metavar = "G",
         .help = "with --ranks: attention GFLOP/s of one rank (default 200: qkv's\n" "flash prefill on 2 Ice Lake cores, BENCHMARKS.md)"},
        {0},
    };
    const cli_command cmd = {.name = "cost", .usage = "[--preset ID | --model FILE.gguf] [sizes] [--window W --swa-period P] [--chunk C] [--ctx LIST] [--dtype T] [--ranks N [--link-gbs X]] [--json]",
                             .about = "What attention costs next to the weight matmuls, from a model configuration.",
                             .notes = "Weight matmuls per token = 2 x the weights a token is multiplied by: per layer\n"
                             "q,k,v,o and gate,up,down, plus the lm_head (the embedding is a lookup). For\n"
                             "Llama-3.1-8B that is 7.50 B weights, 15.0 GFLOPs.",
                             .flags = flags};
    CLI_PARSE_OR_RETURN(&cmd, argc, argv);
    const cli_flag *sz = &flags[2]; /* --layers .. --vocab, in size[] order */
    if (preset && model) return cli_fail("cost: --preset and --model exclude each other");
    if (!ring.ranks && (cli_given(&cmd, "--link-gbs") || cli_given(&cmd, "--rank-gflops")))
        return cli_fail("cost: --link-gbs and --rank-gflops need --ranks");

    qkv_model_config c;
    memset(&c, 0, sizeof c);
    qkv_error err = {0};
    char name[64], source[300];
    int any_size = 0;
    for (int k = 0; k < NSZ; k++) any_size |= sz[k].given;
    const int modified = any_size || cli_given(&cmd, "--window") || cli_given(&cmd, "--swa-period");
    if (model) {
        if (load_gguf(&c, name, sizeof name, model)) return CLI_EXIT_BAD_INPUT;
        snprintf(source, sizeof source, "GGUF %s", model);
    } else if (preset || !any_size) {
        if (!preset) preset = "llama-3.1-8b";
        const char *preset_name;
        if (qkv_cost_preset(&c, &preset_name, preset, &err)) return cli_fail("cost: %s", err.msg);
        snprintf(name, sizeof name, "%s", preset_name);
        snprintf(source, sizeof source, "preset %s", preset);
    } else {
        for (int k = 0; k < NSZ; k++)
            if (!sz[k].given && k != HD)
                return cli_fail("cost: %s is needed (give all sizes, or start from --preset)", sz[k].name);
        snprintf(name, sizeof name, "custom model");
        snprintf(source, sizeof source, "sizes by hand");
    }
    if (modified && (model || preset)) {
        size_t len = strlen(source);
        snprintf(source + len, sizeof source - len, ", sizes changed by hand");
        snprintf(name + strlen(name), sizeof name - strlen(name), " (modified)");
    }
    int *dst[NSZ] = {&c.n_layer, &c.n_embd, &c.n_head, &c.n_kv_head, &c.head_dim, &c.n_ff, &c.n_vocab};
    for (int k = 0; k < NSZ; k++)
        if (sz[k].given) *dst[k] = size[k];
    if (!model && !preset && !sz[HD].given) {
        if (c.n_embd % c.n_head)
            return cli_fail("cost: --hidden %d is not a multiple of --heads %d; give --head-dim",
                            c.n_embd, c.n_head);
        c.head_dim = c.n_embd / c.n_head;
    }
    if (tied >= 0) c.tied_embeddings = tied;
    if (cli_given(&cmd, "--window")) c.window = window;
    if (cli_given(&cmd, "--swa-period")) c.swa_period = swa_period;

    qkv_cost r[MAX_CTX];
    qkv_ring_cost rc[MAX_CTX];
    for (int i = 0; i < ctx.n; i++) {
        if (qkv_cost_eval(&r[i], &c, chunk, ctx.v[i], elem.bytes, &err)) return cli_fail("cost: %s", err.msg);
        if (ring.ranks && qkv_cost_ring(&rc[i], &c, ctx.v[i], elem.bytes, &ring, &err)) return cli_fail("cost: %s", err.msg);
    }
    if (json) print_json(&c, name, source, elem.name, r, ctx.n, ring.ranks ? &ring : NULL, rc);
    else {
        print_text(&c, name, source, elem.name, r, ctx.n);
        if (ring.ranks) print_ring_text(&ring, rc, ctx.n);
    }
    return 0;
}
