/*
 * test_model_replace.c — the model's hooks for context parallelism
 * (libqkv_mpi): an attention replacement (qkv_model_set_attention) that does
 * what the model does gives the same logits bit for bit; one that fails
 * stops the forward call with its status and message and leaves the cache
 * as it was; qkv_model_set_rope_offset rotates at the offset (the queries
 * the hook sees change) while the logits, which RoPE makes depend on
 * relative positions only, stay within float rounding.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t prompt[10] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282};

static qkv_status same_as_model(void *user, int layer, float *att, float *lse, const float *q, int n,
                                const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err) {
    (void)layer;
    (void)n;
    ++*(int *)user;
    return qkv_attention_cached(att, lse, q, cache, desc, QKV_KERNEL_AUTO, err);
}

static qkv_status failing(void *user, int layer, float *att, float *lse, const float *q, int n,
                          const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err) {
    (void)user, (void)att, (void)lse, (void)q, (void)n, (void)cache, (void)desc;
    err->status = QKV_ERR_IO;
    snprintf(err->msg, sizeof err->msg, "replacement failed at layer %d", layer);
    return layer == 3 ? QKV_ERR_IO : QKV_OK;
}

/* the first query value of layer 0 as the hook sees it */
static int first_q(void *user, int layer, const float *q, const float *lse, int n, int pos0, const qkv_kv_cache *cache,
                   const qkv_attn_desc *desc) {
    (void)lse, (void)n, (void)pos0, (void)cache, (void)desc;
    if (layer == 0) *(float *)user = q[7];
    return 0;
}

TEST(model_attention_replacement_and_rope_offset) {
    if (!test_require_model()) return;
    qkv_model_params p = {.n_ctx = 32, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "open: %s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab, L = qkv_model_get_config(m)->n_layer, n = 10;
    float *want = malloc((size_t)n * V * 4), *got = malloc((size_t)n * V * 4);
    float q0 = 0, q100 = 0;
    qkv_model_set_hook(m, first_q, &q0);
    CHECK(qkv_model_forward(m, want, prompt, n, 1, &err) == QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, 0, NULL);
    int calls = 0;
    qkv_model_set_attention(m, same_as_model, &calls);
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &err) == QKV_OK, "%s", err.msg);
    CHECK(calls == L && !memcmp(got, want, (size_t)n * V * 4), "replacement: %d calls, logits %s", calls,
          memcmp(got, want, (size_t)n * V * 4) ? "differ" : "equal");
    qkv_model_rewind(m, 0, NULL);
    qkv_model_set_attention(m, failing, NULL);
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &err) == QKV_ERR_IO && strstr(err.msg, "layer 3") && qkv_model_pos(m) == 0,
          "failing replacement: '%s', position %d", err.msg, qkv_model_pos(m));
    qkv_model_set_attention(m, NULL, NULL);
    CHECK(qkv_model_set_rope_offset(m, -1, &err) == QKV_ERR_INVALID, "offset -1 accepted");
    CHECK(qkv_model_set_rope_offset(m, 100, &err) == QKV_OK && qkv_model_rope_pos(m) == 100, "rope pos %d", qkv_model_rope_pos(m));
    qkv_model_set_hook(m, first_q, &q100);
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &err) == QKV_OK, "%s", err.msg);
    CHECK(q100 != q0, "the offset did not change the rotated queries");
    /* same relative positions: the logits agree to float rounding of the rotations (measured 4.6e-5; logits up to ~20) */
    CHECK_CLOSE("logits at offset 100 vs 0", got, want, (size_t)n * V, 5e-4, 0);
    free(want);
    free(got);
    qkv_model_close(m);
}
