/*
 * test_model_replace.c — the model's hooks for context parallelism
 * (libqkv_mpi): an attention replacement (qkv_forward_opts.replace) that does
 * what the model does gives the same logits bit for bit; one that fails
 * stops the forward call with its status and message and leaves the cache
 * as it was; a call's rope_offset rotates at the offset (the queries
 * hook_rot_q sees change) while the logits, which RoPE makes depend on
 * relative positions only, stay within float rounding. On every family's
 * tiny model the replacement is accepted, sees each layer's window and
 * soft-cap in its descriptor (qkv_model_layer_attn's), and the same logits.
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
    return qkv_attn_cached(att, lse, q, cache, desc, QKV_KERNEL_AUTO, err);
}

static qkv_status failing(void *user, int layer, float *att, float *lse, const float *q, int n,
                          const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err) {
    (void)user, (void)att, (void)lse, (void)q, (void)n, (void)cache, (void)desc;
    err->status = QKV_ERR_IO;
    snprintf(err->msg, sizeof err->msg, "replacement failed at layer %d", layer);
    return layer == 3 ? QKV_ERR_IO : QKV_OK;
}

/* the first query value of layer 0 after RoPE, as hook_rot_q sees it ([n, Hq, D]: token 0, head 0, element 7) */
static qkv_status first_q(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    *(float *)user = a->data[7];
    return QKV_OK;
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
    const qkv_hook h0 = {.point = QKV_HOOK_ROT_Q, .layer = 0, .fn = first_q, .user = &q0};
    CHECK(qkv_model_forward(m, want, prompt, n, 1, &(qkv_forward_opts){.hooks = &h0, .n_hooks = 1}, &err) == QKV_OK,
          "%s", err.msg);
    qkv_model_rewind(m, 0, NULL);
    int calls = 0;
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &(qkv_forward_opts){.replace = same_as_model, .replace_user = &calls},
                            &err) == QKV_OK, "%s", err.msg);
    CHECK(calls == L && !memcmp(got, want, (size_t)n * V * 4), "replacement: %d calls, logits %s", calls,
          memcmp(got, want, (size_t)n * V * 4) ? "differ" : "equal");
    qkv_model_rewind(m, 0, NULL);
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &(qkv_forward_opts){.replace = failing}, &err) == QKV_ERR_IO &&
              strstr(err.msg, "layer 3") && qkv_model_pos(m) == 0,
          "failing replacement: '%s', position %d", err.msg, qkv_model_pos(m));
    const int drop = 2;
    const qkv_exclusion ex = {.positions = &drop, .n = 1, .layer = QKV_ALL, .head = QKV_ALL};
    CHECK(qkv_model_forward(m, got, prompt, n, 1,
                            &(qkv_forward_opts){.replace = same_as_model, .replace_user = &calls, .exclude = &ex,
                                                .n_exclude = 1},
                            &err) == QKV_ERR_INVALID,
          "an exclusion with a replacement is refused");
    CHECK(qkv_model_forward(m, got, prompt, n, 1, &(qkv_forward_opts){.rope_offset = -1}, &err) == QKV_ERR_INVALID,
          "offset -1 accepted");
    const qkv_hook h100 = {.point = QKV_HOOK_ROT_Q, .layer = 0, .fn = first_q, .user = &q100};
    CHECK(qkv_model_forward(m, got, prompt, n, 1,
                            &(qkv_forward_opts){.hooks = &h100, .n_hooks = 1, .rope_offset = 100}, &err) == QKV_OK,
          "%s", err.msg);
    CHECK(qkv_model_rope_pos(m) == n, "the offset is the call's: rope pos %d after it", qkv_model_rope_pos(m));
    CHECK(q100 != q0, "the offset did not change the rotated queries");
    /* same relative positions: the logits agree to float rounding of the rotations (measured 4.6e-5; logits up to ~20) */
    CHECK_CLOSE("logits at offset 100 vs 0", got, want, (size_t)n * V, 5e-4, 0);
    free(want);
    free(got);
    qkv_model_close(m);
}

/* A replacement that checks its descriptor against the layer's spec, then does what the model does. */
typedef struct {
    const qkv_model_config *cfg;
    int calls, mismatch;
} layer_check;

static qkv_status checks_layer(void *user, int layer, float *att, float *lse, const float *q, int n,
                               const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err) {
    layer_check *c = user;
    qkv_layer_attn a;
    qkv_model_layer_attn(&a, c->cfg, layer);
    const qkv_mask_kind kind = a.window ? QKV_MASK_WINDOW : QKV_MASK_CAUSAL;
    if (desc->mask.kind != kind || desc->mask.window != a.window || desc->softcap != a.softcap || desc->scale != a.scale)
        c->mismatch++;
    c->calls++;
    (void)n;
    return qkv_attn_cached(att, lse, q, cache, desc, QKV_KERNEL_AUTO, err);
}

TEST(model_attention_replacement_on_every_family) {
    static const char *const names[] = {"qwen2", "qwen3", "gemma2", "gemma3", "mistral", "smollm3", "olmo2",
                                        "phi3", "phi3_long"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/families/%s/model.gguf", test_fixture_dir(), names[i]);
        qkv_model *m = NULL;
        qkv_error err = {0};
        CHECK(qkv_model_open(&m, path, &(qkv_model_params){.n_ctx = 32, .n_threads = 2}, &err) == QKV_OK, "%s: %s",
              names[i], err.msg);
        if (!m) continue;
        const qkv_model_config *cfg = qkv_model_get_config(m);
        const int V = cfg->n_vocab, n = 10;
        int32_t toks[10];
        for (int t = 0; t < n; t++) toks[t] = (int32_t)((t * 37 + 5) % V);
        float *want = malloc((size_t)n * V * 4), *got = malloc((size_t)n * V * 4);
        layer_check c = {.cfg = cfg};
        CHECK(qkv_model_forward(m, want, toks, n, 1, NULL, &err) == QKV_OK, "%s: %s", names[i], err.msg);
        qkv_model_rewind(m, 0, NULL);
        CHECK(qkv_model_forward(m, got, toks, n, 1, &(qkv_forward_opts){.replace = checks_layer, .replace_user = &c},
                                &err) == QKV_OK, "%s: the replacement refused: %s", names[i], err.msg);
        CHECK(c.calls == cfg->n_layer && !c.mismatch && !memcmp(got, want, (size_t)n * V * 4),
              "%s: %d calls, %d descriptors unlike the layer's, logits %s", names[i], c.calls, c.mismatch,
              memcmp(got, want, (size_t)n * V * 4) ? "differ" : "equal");
        free(want);
        free(got);
        qkv_model_close(m);
    }
}
