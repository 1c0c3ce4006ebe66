/*
 * test_model_forward.c — properties of the forward pass on the real model
 * (models/SmolLM2-135M-Instruct.Q4_1.gguf; SKIPPED when absent, CI fetches it
 * with `make model`): one prefill of n tokens gives the same logits as n
 * decode steps through the KV cache, the hook sees every layer with LSEs that
 * normalise the weights, exclusions change the output, and bad files are
 * refused with a message. The comparison against transformers is in
 * test_model_oracle.c.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static qkv_model *open_model(int n_ctx, qkv_dtype kv) {
    if (!test_require_model()) return NULL;
    qkv_model_params p = {.n_ctx = n_ctx, .kv_dtype = kv, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "open: %s", err.msg);
    return m;
}

static const int32_t prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};

TEST(model_prefill_equals_token_by_token_decode) {
    qkv_model *m = open_model(64, QKV_DTYPE_F32);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab, n = 12;
    float *all = malloc((size_t)n * V * 4), *one = malloc((size_t)n * V * 4);
    qkv_error err = {0};
    CHECK(qkv_model_forward(m, all, prompt, n, 1, NULL, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_model_pos(m) == n, "position after prefill: %d", qkv_model_pos(m));
    qkv_model_rewind(m, 0, NULL);
    for (int t = 0; t < n; t++)
        CHECK(qkv_model_forward(m, one + (size_t)t * V, prompt + t, 1, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    /* same math, different kernels (flash vs decode) and batch shapes: f32 rounding only */
    CHECK_CLOSE("prefill vs decode logits", one, all, (size_t)n * V, 2e-4, 1e-5);
    free(all);
    free(one);
    qkv_model_close(m);
}

typedef struct {
    int calls, layers_seen[64];
    double worst_sum_err;
} hook_state;

/* Recomputes every weight row of head 0 from q, K and LSE and checks it sums to 1. */
static qkv_status check_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    hook_state *s = user;
    const int layer = a->layer, n = (int)a->shape[1], pos0 = a->pos0;
    const float *q = qkv_attn_view_q(a->attn), *lse = qkv_attn_view_lse(a->attn);
    const qkv_kv_cache *cache = qkv_attn_view_cache(a->attn);
    const qkv_attn_desc *d = qkv_attn_view_desc(a->attn);
    s->calls++;
    if (layer < 64) s->layers_seen[layer] = 1;
    int L = qkv_kv_cache_len(cache), D = d->head_dim;
    float *k = malloc((size_t)d->n_kv_head * L * D * 4);
    qkv_kv_cache_read(k, NULL, cache, 0, L, NULL);
    float scale = 1.0f / sqrtf((float)D);
    for (int t = 0; t < n; t++) {
        double sum = 0;
        for (int j = 0; j <= pos0 + t; j++) {
            double dot = 0;
            for (int e = 0; e < D; e++) dot += (double)q[(size_t)t * D + e] * k[(size_t)j * D + e];
            sum += exp(dot * scale - lse[t]);
        }
        if (fabs(sum - 1) > s->worst_sum_err) s->worst_sum_err = fabs(sum - 1);
    }
    free(k);
    return QKV_OK;
}

TEST(model_hook_sees_every_layer_and_lse_normalises) {
    qkv_model *m = open_model(64, QKV_DTYPE_F32);
    if (!m) return;
    hook_state s = {0};
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = check_hook, .user = &s};
    qkv_error err = {0};
    CHECK(qkv_model_forward(m, NULL, prompt, 12, 0, &(qkv_forward_opts){.hooks = &h, .n_hooks = 1}, &err) == QKV_OK,
          "%s", err.msg);
    int L = qkv_model_get_config(m)->n_layer;
    CHECK(s.calls == L, "hook called %d times, want %d", s.calls, L);
    for (int l = 0; l < L; l++) CHECK(s.layers_seen[l], "layer %d not seen", l);
    CHECK(s.worst_sum_err < 1e-4, "weights from q, K and LSE sum to 1 +- %g", s.worst_sum_err);
    qkv_model_close(m);
}

TEST(model_exclusion_changes_the_output_and_ends_with_the_call) {
    qkv_model *m = open_model(64, QKV_DTYPE_F32);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4), *c = malloc((size_t)V * 4);
    qkv_error err = {0};
    qkv_model_forward(m, a, prompt, 12, 0, NULL, &err);
    qkv_model_rewind(m, 0, NULL);
    int drop[1] = {3};
    const qkv_exclusion ex = {.positions = drop, .n = 1, .layer = QKV_ALL, .head = QKV_ALL};
    CHECK(qkv_model_forward(m, b, prompt, 12, 0, &(qkv_forward_opts){.exclude = &ex, .n_exclude = 1}, &err) == QKV_OK,
          "%s", err.msg);
    qkv_model_rewind(m, 0, NULL);
    qkv_model_forward(m, c, prompt, 12, 0, NULL, &err);
    double d = 0;
    for (int i = 0; i < V; i++) d = fmax(d, fabs(a[i] - b[i]));
    CHECK(d > 1e-2, "masking token 3 changed the last logits by only %g", d);
    CHECK(!memcmp(c, a, (size_t)V * 4), "the next call without the exclusion is the plain forward, bit for bit");
    free(a); free(b); free(c);
    qkv_model_close(m);
}

TEST(model_bf16_kv_cache_stays_close) {
    qkv_model *m32 = open_model(64, QKV_DTYPE_F32);
    if (!m32) return;
    qkv_model *m16 = open_model(64, QKV_DTYPE_BF16);
    const int V = qkv_model_get_config(m32)->n_vocab;
    float *a = malloc((size_t)12 * V * 4), *b = malloc((size_t)12 * V * 4);
    qkv_model_forward(m32, a, prompt, 12, 1, NULL, NULL);
    qkv_model_forward(m16, b, prompt, 12, 1, NULL, NULL);
    /* bf16 keeps 8 bits of K and V: logits move by a few hundredths */
    double d = 0;
    for (size_t i = 0; i < (size_t)12 * V; i++) d = fmax(d, fabs(a[i] - b[i]));
    CHECK(d < 0.5, "bf16 KV moved logits by %g", d);
    free(a); free(b);
    qkv_model_close(m32);
    qkv_model_close(m16);
}

TEST(model_context_and_token_limits) {
    qkv_model *m = open_model(8, QKV_DTYPE_F32);
    if (!m) return;
    qkv_error err = {0};
    CHECK(qkv_model_forward(m, NULL, prompt, 9, 0, NULL, &err) == QKV_ERR_FULL, "9 tokens in a context of 8");
    CHECK(qkv_model_pos(m) == 0, "a refused call leaves the cache as it was");
    int32_t bad = 49152;
    CHECK(qkv_model_forward(m, NULL, &bad, 1, 0, NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "49152"),
          "token id out of range: %s", err.msg);
    qkv_model_close(m);
}

TEST(model_open_refuses_bad_files) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, "/nonexistent/model.gguf", NULL, &err) == QKV_ERR_IO && !m, "missing: %s", err.msg);
    char path[600];
    snprintf(path, sizeof path, "%s/not.gguf", test_tmpdir());
    FILE *f = fopen(path, "w");
    fputs("this is not a gguf file at all, just text\n", f);
    fclose(f);
    CHECK(qkv_model_open(&m, path, NULL, &err) == QKV_ERR_FORMAT && !m, "not a GGUF: %s", err.msg);
    /* a valid GGUF that is no llama model */
    snprintf(path, sizeof path, "%s/gguf/meta.gguf", test_fixture_dir());
    qkv_status st = qkv_model_open(&m, path, NULL, &err);
    CHECK(st != QKV_OK && !m && err.msg[0], "non-llama GGUF accepted");
}
