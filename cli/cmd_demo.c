/*
 * cmd_demo.c — `qkv demo`, what `make demo` runs on an embedded default:
 *   1. the article's worked example (qkv explain);
 *   2. one Llama-3.1-8B attention layer (32 query heads, 8 KV heads, D = 128,
 *      llama3 RoPE) on n random tokens: flash against the reference kernel
 *      (max difference, time, GFLOP/s), then one decode step against a bf16
 *      KV cache of the same layer;
 *   3. the real model (SmolLM2-135M, fetched by `make model`) answering
 *      年假怎么申请？ through its chat template, then `qkv inspect` of the
 *      plain and the chat prompt: two attention pages to open in a browser;
 *   4. the article's sentence through a model that reads Chinese (Gemma 3
 *      270M, also fetched by `make model`): its tokens, and the 申请 row of
 *      the head that gives 假 the most weight, recomputed from the LSE.
 */
#include "cli.h"
#include "flags.h"
#include "util.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic N(0,1) fill (splitmix64 + Box-Muller). */
static void fill_normal(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        const uint64_t z = cli_splitmix64(&seed);
        double u1 = ((double)(z >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(z & 0x7ff) / 2048.0;
        x[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static int engine_demo(int n) {
    const int hq = 32, hkv = 8, d = 128;
    size_t nq = (size_t)hq * n * d, nkv = (size_t)hkv * n * d;
    float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *o_ref = malloc(nq * 4),
          *o = malloc(nq * 4);
    if (!q || !k || !v || !o_ref || !o) return cli_fail("demo: out of memory");
    fill_normal(q, nq, 1);
    fill_normal(k, nkv, 2);
    fill_normal(v, nkv, 3);
    qkv_rope rope = {.pairing = QKV_ROPE_HALF, .theta = 500000.0f, .scaling = QKV_ROPE_SCALING_LLAMA3, .factor = 8,
                     .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position = 8192};
    int64_t *pos = malloc((size_t)n * sizeof *pos);
    for (int i = 0; i < n; i++) pos[i] = i;
    qkv_rope_apply(q, pos, &rope, hq, n, d, NULL);
    qkv_rope_apply(k, pos, &rope, hkv, n, d, NULL);
    qkv_attn_desc desc = {.n_q_head = hq, .n_kv_head = hkv, .q_len = n, .kv_len = n, .head_dim = d,
                          .mask = {.kind = QKV_MASK_CAUSAL}};
    qkv_error err = {0};
    double flops = 4.0 * hq * d * ((double)n * (n + 1) / 2); /* causal: QK^T and PV over visible pairs */
    double t0 = cli_now_s();
    if (qkv_attn_reference(o_ref, NULL, NULL, q, k, v, &desc, &err)) return cli_fail("%s", err.msg);
    double t1 = cli_now_s();
    if (qkv_attn(o, NULL, q, k, v, &desc, QKV_KERNEL_FLASH, &err)) return cli_fail("%s", err.msg);
    double t2 = cli_now_s();
    double maxd = 0, maxo = 0;
    for (size_t i = 0; i < nq; i++) {
        maxd = fmax(maxd, fabs(o[i] - o_ref[i]));
        maxo = fmax(maxo, fabs(o_ref[i]));
    }
    printf("\n== One Llama-3.1-8B attention layer: %d tokens, 32 query heads, 8 KV heads, D=128, "
           "llama3 RoPE, causal ==\n",
           n);
    printf("  reference (scores materialised, double)  %8.3f s  %6.1f GFLOP/s\n", t1 - t0, flops / (t1 - t0) * 1e-9);
    printf("  flash (tiled online softmax, O(n) memory) %8.3f s  %6.1f GFLOP/s  (%.0fx)\n", t2 - t1,
           flops / (t2 - t1) * 1e-9, (t1 - t0) / (t2 - t1));
    printf("  max |O_flash - O_ref| = %.2e  (max |O| = %.3f)\n", maxd, maxo);

    /* decode: one new token against the layer's KV cache in bf16 */
    qkv_kv_cache *cache = NULL;
    if (qkv_kv_cache_init(&cache, hkv, d, n + 1, QKV_DTYPE_BF16, &err) ||
        qkv_kv_cache_append(cache, k, v, n, &err))
        return cli_fail("%s", err.msg);
    qkv_attn_desc dd = {.n_q_head = hq, .n_kv_head = hkv, .q_len = 1, .head_dim = d, .mask = {.kind = QKV_MASK_CAUSAL},
                        .kv_dtype = QKV_DTYPE_BF16};
    const float *q_last = q; /* head 0's first row stands in for a new query: shape [32, 1, 128] below */
    float *q1 = malloc((size_t)hq * d * 4), *o1 = malloc((size_t)hq * d * 4);
    for (int h = 0; h < hq; h++) memcpy(q1 + (size_t)h * d, q_last + ((size_t)h * n + n - 1) * d, (size_t)d * 4);
    double t3 = cli_now_s();
    if (qkv_attn_cached(o1, NULL, q1, cache, &dd, QKV_KERNEL_DECODE, &err)) return cli_fail("%s", err.msg);
    double t4 = cli_now_s();
    double dmax = 0;
    for (int h = 0; h < hq; h++)
        for (int e = 0; e < d; e++)
            dmax = fmax(dmax, fabs(o1[(size_t)h * d + e] - o_ref[((size_t)h * n + n - 1) * d + e]));
    printf("  decode, last token vs bf16 KV cache    %8.3f ms  %6.2f GB/s of KV   max diff vs f32 ref %.1e\n",
           (t4 - t3) * 1e3, (double)n * hkv * d * 2 * 2 / (t4 - t3) * 1e-9, dmax);
    qkv_kv_cache_free(cache);
    free(q); free(k); free(v); free(o_ref); free(o); free(pos); free(q1); free(o1);
    return 0;
}

#define DEMO_MODEL CLI_DEFAULT_MODEL
#define DEMO_GEMMA "models/gemma-3-270m-q4_k_m.gguf"

/* The 申请 row (query `row`) of every layer and head, the head that gives key
 * `key` the most weight kept: its layer, head and row [n_keys]. */
typedef struct {
    int row, key, n_keys;
    int layer, head;
    float best;       /* its weight on key */
    float *w;         /* [n_keys] scratch */
    float *kept;      /* [n_keys] the best head's row */
} strongest_row;

static qkv_status keep_strongest(void *user, const qkv_activation *a, qkv_error *err) {
    strongest_row *s = user;
    for (int h = 0; h < (int)a->shape[0]; h++) {
        qkv_status st = qkv_pattern_weights(s->w, a, h, s->row, 1, 0, s->n_keys, err);
        if (st) return st;
        if (s->w[s->key] > s->best) {
            s->best = s->w[s->key];
            s->layer = a->layer;
            s->head = h;
            memcpy(s->kept, s->w, (size_t)s->n_keys * sizeof(float));
        }
    }
    return QKV_OK;
}

/* The index of the token whose piece is `piece`, or -1. */
static int find_piece(const qkv_tokenizer *t, const int32_t *ids, int n, const char *piece) {
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = qkv_token_piece(t, ids[i], &len);
        if (p && len == strlen(piece) && !memcmp(p, piece, len)) return i;
    }
    return -1;
}

static int gemma_demo(void) {
    FILE *f = fopen(DEMO_GEMMA, "rb");
    if (!f) {
        printf("\n(%s is missing: `make model` fetches it; skipping the Gemma part)\n", DEMO_GEMMA);
        return 0;
    }
    fclose(f);
    const char *text = "年假怎么申请？";
    printf("\n== Gemma 3 270M reads 年假怎么申请？: where does 申请 look? (Gemma terms of use apply) ==\n\n");
    qkv_error err = {0};
    qkv_model *m = NULL;
    qkv_tokenizer *tok = NULL;
    int32_t ids[32];
    int64_t n = 0;
    strongest_row s = {.layer = -1};
    int rc = 0;
    const qkv_model_params mp = {.n_ctx = 32};
    if (qkv_model_open(&m, DEMO_GEMMA, &mp, &err) || qkv_tokenizer_load(&tok, qkv_model_gguf(m), &err) ||
        qkv_tokenize(tok, text, strlen(text), 1, 0, ids, 32, &n, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    s = (strongest_row){.row = find_piece(tok, ids, (int)n, "申请"), .key = find_piece(tok, ids, (int)n, "假"),
                        .n_keys = (int)n, .layer = -1, .w = malloc((size_t)n * sizeof(float)),
                        .kept = malloc((size_t)n * sizeof(float))};
    if (s.row < 0 || s.key < 0 || !s.w || !s.kept) {
        rc = cli_fail("demo: the tokens of %s have no 申请 and 假", text);
        goto done;
    }
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = keep_strongest, .user = &s};
    if (qkv_model_forward(m, NULL, ids, (int)n, 0, &(qkv_forward_opts){.hooks = &hook, .n_hooks = 1}, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }
    const qkv_model_config *c = qkv_model_get_config(m);
    printf("  tokens:");
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = qkv_token_piece(tok, ids[i], &len);
        printf("  %.*s", (int)len, p ? p : "?");
    }
    qkv_layer_attn a;
    qkv_model_layer_attn(&a, c, s.layer);
    printf("\n\n  the 申请 row of layer %d, head %d (a %s layer), the head that gives 假 the most:\n\n  ", s.layer,
           s.head, a.window ? "sliding-window" : "global");
    for (int j = 0; j <= s.row; j++) {
        size_t len;
        const char *p = qkv_token_piece(tok, ids[j], &len);
        printf("  %.*s %.3f", (int)len, p ? p : "?", s.kept[j]);
    }
    printf("\n\n  Of the %d x %d heads, this one gives 假 the largest share of 申请's attention, %.0f%%: a head\n"
           "  that reads the kind of leave into the verb exists. Whether the answer depends on it is a\n"
           "  different question (qkv ablate --heads; weight is not influence).\n",
           c->n_layer, c->n_head, 100.0 * s.best);
done:
    free(s.w);
    free(s.kept);
    qkv_tokenizer_free(tok);
    qkv_model_close(m);
    return rc;
}

static int model_demo(const char *out_dir) {
    FILE *f = fopen(DEMO_MODEL, "rb");
    if (!f) {
        printf("\n(%s is missing: `make model` fetches it; skipping the model part)\n", DEMO_MODEL);
        return 0;
    }
    fclose(f);
    printf("\n== SmolLM2-135M reads 年假怎么申请？ (qkv run --chat -p 年假怎么申请？ -n 48) ==\n\n");
    fflush(stdout);
    char *run_argv[] = {"run", "-m", DEMO_MODEL, "--chat", "-p", "年假怎么申请？", "-n", "48", NULL};
    int rc = cmd_run(8, run_argv);
    if (rc) return rc;
    char plain[600], chat[600];
    snprintf(plain, sizeof plain, "%s/inspect-zh.html", out_dir);
    snprintf(chat, sizeof chat, "%s/inspect-zh-chat.html", out_dir);
    printf("\n== Who looked at whom: every layer and head (qkv inspect) ==\n\n");
    fflush(stdout);
    char *insp1[] = {"inspect", "-m", DEMO_MODEL, "-p", "年假怎么申请？", "--html", plain, NULL};
    if ((rc = cmd_inspect(7, insp1))) return rc;
    fflush(stdout);
    char *insp2[] = {"inspect", "-m", DEMO_MODEL, "-p", "年假怎么申请？", "--chat", "--html", chat, NULL};
    if ((rc = cmd_inspect(8, insp2))) return rc;
    fflush(stdout);
    return 0;
}

int cmd_demo(int argc, char **argv) {
    int n = 1024;
    const char *out_dir = "build";
    cli_flag flags[] = {
        {.name = "--n", .kind = CLI_INT, .dest = &n, .lo = 1, .hi = 4096, .metavar = "N",
         .help = "tokens of the Llama-3.1-8B layer (default 1024)"},
        {.name = "--out-dir", .kind = CLI_STRING, .dest = &out_dir, .metavar = "DIR",
         .help = "where the attention pages go (default build)"},
        {0},
    };
    const cli_command cmd = {.name = "demo", .usage = "[--n N] [--out-dir DIR]",
                             .about = "The article's example, one Llama-3.1-8B layer (flash vs reference), then SmolLM2\n"
                             "on 年假怎么申请？ and its attention pages in DIR, then Gemma 3 270M on the same sentence.",
                             .flags = flags};
    CLI_PARSE_OR_RETURN(&cmd, argc, argv);
    printf("== The article's worked example (qkv explain) ==\n\n");
    fflush(stdout);
    char *explain_argv[] = {"explain", NULL};
    int rc = cmd_explain(1, explain_argv);
    if (rc) return rc;
    fflush(stdout);
    if ((rc = engine_demo(n))) return rc;
    fflush(stdout);
    if ((rc = model_demo(out_dir))) return rc;
    fflush(stdout);
    return gemma_demo();
}
