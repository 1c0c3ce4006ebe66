/*
 * test_model_logit_ids.c — qkv_forward_opts.logit_ids on SmolLM2 and Gemma 3:
 * a call that asks for some vocabulary ids' logits writes, for each, the
 * bits of that id's entry in the whole [V] row of the same call — a prefill,
 * a decode step against the cache it left, and a call resumed at L = n_layer
 * (the final norm and lm_head alone: what qkv_patch's logit difference runs
 * after each patched layer). Ids at both ends of the vocabulary, repeated
 * and in any order. Bad lists and all_logits are refused.
 */
#include "testing.h"

#include "qkv.h"

#include <stdlib.h>
#include <string.h>

static const int32_t smollm2_prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
/* "年假怎么申请？病假呢？" under Gemma 3's tokenizer (qkv tokenize), BOS first */
static const int32_t gemma3_prompt[10] = {2, 237155, 239126, 20779, 49204, 237536, 238534, 239126, 238463, 237536};

static qkv_status resid_post_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    memcpy(user, a->data, (size_t)(a->shape[0] * a->shape[1]) * sizeof(float));
    return QKV_OK;
}

/* ids' logits against the whole row, bit for bit */
static void check_ids(const char *name, const char *what, const float *full, const float *got, const int32_t *ids,
                      int n_ids) {
    int bad = 0;
    for (int k = 0; k < n_ids; k++)
        if (memcmp(&got[k], &full[ids[k]], sizeof got[k]) && bad++ < 3)
            CHECK(0, "%s, %s: id %d: %.9g, the whole row has %.9g", name, what, ids[k], got[k], full[ids[k]]);
}

static void check_model(const char *path, const char *name, const int32_t *tokens, int n) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &p, &err) == QKV_OK, "open %s: %s", path, err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab, E = c->n_embd, L = c->n_layer;
    float *full = malloc((size_t)V * 4), *resid = malloc((size_t)(n - 1) * E * 4);
    int32_t ids[8] = {0, V - 1, 1, 0, V / 2, tokens[1], 0, 0};
    float got[8];
    /* prefill of n - 1 tokens: the whole row, then the ids */
    qkv_hook hook = {.point = QKV_HOOK_RESID_POST, .layer = L - 1, .fn = resid_post_hook, .user = resid};
    CHECK(qkv_model_forward(m, full, tokens, n - 1, 0, &(qkv_forward_opts){.hooks = &hook, .n_hooks = 1}, &err) ==
              QKV_OK, "%s", err.msg);
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (full[i] > full[best]) best = i;
    ids[6] = best, ids[7] = best == 0 ? 2 : best - 1;
    qkv_model_rewind(m, 0, NULL);
    const qkv_forward_opts o = {.logit_ids = ids, .n_logit_ids = 8};
    CHECK(qkv_model_forward(m, got, tokens, n - 1, 0, &o, &err) == QKV_OK, "%s", err.msg);
    check_ids(name, "prefill", full, got, ids, 8);
    /* resumed at L on the last layer's residual: the final norm and lm_head alone */
    const qkv_forward_opts at_end = {.start_layer = L, .start_resid = resid, .logit_ids = ids, .n_logit_ids = 8};
    CHECK(qkv_model_forward(m, got, tokens, n - 1, 0, &at_end, &err) == QKV_OK, "%s", err.msg);
    check_ids(name, "resumed at n_layer", full, got, ids, 8);
    /* a decode step, whole and with ids, from the same cache */
    CHECK(qkv_model_forward(m, full, tokens + n - 1, 1, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, n - 1, NULL);
    CHECK(qkv_model_forward(m, got, tokens + n - 1, 1, 0, &o, &err) == QKV_OK, "%s", err.msg);
    check_ids(name, "decode step", full, got, ids, 8);
    free(full);
    free(resid);
    qkv_model_close(m);
}

TEST(model_logit_ids_smollm2_are_the_whole_rows_entries) {
    if (!test_require_model()) return;
    check_model(test_model_path(), "SmolLM2", smollm2_prompt, 12);
}

TEST(model_logit_ids_gemma3_are_the_whole_rows_entries) {
    if (!test_require_gemma3()) return;
    check_model(test_gemma3_path(), "Gemma 3", gemma3_prompt, 10);
}

TEST(model_logit_ids_refuses_bad_lists) {
    if (!test_require_model()) return;
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    const int32_t good[2] = {1, 2}, out_of_range[2] = {1, -1}, too_big[1] = {V};
    float logits[4 * 2];
    const struct {
        qkv_forward_opts o;
        int all_logits;
        const char *needle;
    } bad[] = {{{.logit_ids = out_of_range, .n_logit_ids = 2}, 0, "logit id -1 (entry 1) outside"},
               {{.logit_ids = too_big, .n_logit_ids = 1}, 0, "logit id 49152 (entry 0) outside [0, 49152)"},
               {{.logit_ids = NULL, .n_logit_ids = 2}, 0, "2 logit ids at"},
               {{.logit_ids = good, .n_logit_ids = 0}, 0, "0 logit ids at"},
               {{.logit_ids = good, .n_logit_ids = -1}, 0, "-1 logit ids at"},
               {{.logit_ids = good, .n_logit_ids = 2}, 1, "all_logits must be 0"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (qkv_error){0};
        CHECK(qkv_model_forward(m, logits, smollm2_prompt, 4, bad[i].all_logits, &bad[i].o, &err) == QKV_ERR_INVALID &&
                  strstr(err.msg, bad[i].needle),
              "case %zu: '%s', want '%s'", i, err.msg, bad[i].needle);
        CHECK(qkv_model_pos(m) == 0, "a refused call moved the cache to %d", qkv_model_pos(m));
    }
    qkv_model_close(m);
}
