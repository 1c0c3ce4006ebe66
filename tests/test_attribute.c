/*
 * test_attribute.c — direct logit attribution (src/model/attribute.c) on the
 * real models, SmolLM2 on the IOI sentence (answer " Mary", wrong " John")
 * and Gemma 3 on 年假怎么申请？:
 *   - the parts add up to the model's own logit difference: |total -
 *     logit_diff| <= PARTS_TOL x the largest |part| (the parts are exact
 *     projections of float activations, so what is left is the float
 *     rounding of the residual sums and of the final norm: measured at most
 *     1.4e-7, Gemma 3);
 *   - logit_diff is the forward's logits[answer] - logits[wrong] to float
 *     rounding: LOGIT_TOL x (|logits[answer]| + |logits[wrong]|), the
 *     forward's dot products being float (measured at most 5.9e-7, Gemma 3);
 *   - SmolLM2's heads add up to each layer's attn: HEADS_TOL x the largest
 *     |head| of the layer (one matmul over all heads against one per head;
 *     measured at most 8.9e-7);
 *   - Gemma 3's heads are NaN and heads_linear 0 (post-attention norms);
 *   - answer / wrong of -1 are the model's top-1 and top-2;
 *   - bad arguments. The agreement with transformers is test_patch_oracle.c.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARTS_TOL 1e-6
#define LOGIT_TOL 3e-6
#define HEADS_TOL 5e-6

static int tokenize(qkv_model *m, const char *text, int32_t *ids, int cap, int add_special) {
    qkv_tokenizer *t = NULL;
    qkv_error err = {0};
    int64_t n = 0;
    CHECK(qkv_tokenizer_load(&t, qkv_model_gguf(m), &err) == QKV_OK, "%s", err.msg);
    if (t) CHECK(qkv_tokenize(t, text, strlen(text), add_special, 0, ids, cap, &n, &err) == QKV_OK, "%s", err.msg);
    qkv_tokenizer_free(t);
    return (int)n;
}

static qkv_model *open_model(const char *path) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &p, &err) == QKV_OK, "%s: %s", path, err.msg);
    return m;
}

/* The last logits [V] of tokens, from an empty cache. */
static float *last_logits(qkv_model *m, const int32_t *tokens, int n) {
    float *logits = malloc((size_t)qkv_model_get_config(m)->n_vocab * sizeof(float));
    qkv_error err = {0};
    qkv_model_rewind(m, 0, NULL);
    CHECK(qkv_model_forward(m, logits, tokens, n, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, 0, NULL);
    return logits;
}

/* Checks the sums of a; returns the largest |part|. */
static double check_sums(const char *name, const qkv_attribution *a, const qkv_model_config *c, const float *logits) {
    const int L = c->n_layer, Hq = c->n_head;
    double biggest = fabs(a->embed), sum = a->embed;
    for (int l = 0; l < L; l++) {
        biggest = fmax(biggest, fmax(fabs(a->attn[l]), fabs(a->mlp[l])));
        sum += (double)a->attn[l] + a->mlp[l];
    }
    const double err_parts = fabs(a->total - a->logit_diff) / biggest;
    CHECK(err_parts <= PARTS_TOL, "%s: total %.9g, logit_diff %.9g: %.3g of the largest part %.4g", name, a->total,
          a->logit_diff, err_parts, biggest);
    /* total is the sum of the unrounded parts; the float parts sum to it to float rounding */
    CHECK(fabs(sum - a->total) <= 1e-6 * biggest * (2 * L + 1), "%s: the float parts sum to %.9g, total %.9g", name, sum,
          a->total);
    const double own = (double)logits[a->answer] - logits[a->wrong],
                 scale = fabs(logits[a->answer]) + fabs(logits[a->wrong]);
    const double err_logit = fabs(own - a->logit_diff) / scale;
    CHECK(err_logit <= LOGIT_TOL, "%s: logit_diff %.9g, the forward's %.9g: %.3g of |logits| %.4g", name,
          a->logit_diff, own, err_logit, scale);
    double worst_heads = 0;
    for (int l = 0; l < L && a->heads_linear; l++) {
        double hs = 0, hmax = 0;
        for (int h = 0; h < Hq; h++) {
            hs += a->heads[(size_t)l * Hq + h];
            hmax = fmax(hmax, fabs(a->heads[(size_t)l * Hq + h]));
        }
        worst_heads = fmax(worst_heads, fabs(hs - a->attn[l]) / fmax(hmax, 1e-3));
    }
    CHECK(worst_heads <= HEADS_TOL, "%s: heads sum to attn within %.3g of the largest head", name, worst_heads);
    printf("  %-8s answer %d wrong %d: logit_diff %.6f total %.6f (|diff| %.2g of the largest part %.3g), forward's "
           "%.6f (%.2g of |logits| %.3g); heads vs attn %.2g\n",
           name, a->answer, a->wrong, a->logit_diff, a->total, err_parts, biggest, own, err_logit, scale, worst_heads);
    return biggest;
}

TEST(attribute_smollm2_parts_add_up) {
    if (!test_require_model()) return;
    qkv_model *m = open_model(test_model_path());
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    int32_t ids[32], mary[4], john[4];
    const int n = tokenize(m, "When Mary and John went to the store, John gave a drink to", ids, 32, 1);
    CHECK(tokenize(m, " Mary", mary, 4, 0) == 1 && tokenize(m, " John", john, 4, 0) == 1, "one token each");
    float *heads = malloc((size_t)c->n_layer * c->n_head * sizeof(float)), *attn = malloc((size_t)c->n_layer * 4),
          *mlp = malloc((size_t)c->n_layer * 4);
    qkv_attribution a = {.heads = heads, .attn = attn, .mlp = mlp};
    qkv_error err = {0};
    float *logits = last_logits(m, ids, n);
    CHECK(qkv_attribute(&a, m, ids, n, mary[0], john[0], &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_model_pos(m) == 0, "the cache is left at %d", qkv_model_pos(m));
    CHECK(a.heads_linear == 1 && a.final_softcap == 0 && a.answer == mary[0] && a.wrong == john[0],
          "linear %d softcap %d answer %d wrong %d", a.heads_linear, a.final_softcap, a.answer, a.wrong);
    check_sums("SmolLM2", &a, c, logits);
    CHECK(a.logit_diff > 0, "IOI: the model prefers Mary (%g)", a.logit_diff);

    /* -1: the model's own top-1 and top-2; answer given, wrong -1: the best other token */
    int32_t top1 = 0, top2 = -1;
    for (int i = 1; i < c->n_vocab; i++)
        if (logits[i] > logits[top1]) top1 = i;
    for (int i = 0; i < c->n_vocab; i++)
        if (i != top1 && (top2 < 0 || logits[i] > logits[top2])) top2 = i;
    CHECK(qkv_attribute(&a, m, ids, n, -1, -1, &err) == QKV_OK && a.answer == top1 && a.wrong == top2,
          "defaults: answer %d wrong %d, want %d %d (%s)", a.answer, a.wrong, top1, top2, err.msg);
    check_sums("top-2", &a, c, logits);
    CHECK(qkv_attribute(&a, m, ids, n, top2, -1, &err) == QKV_OK && a.answer == top2 && a.wrong == top1,
          "answer %d given: wrong %d, want %d", top2, a.wrong, top1);
    CHECK(qkv_attribute(&a, m, ids, n, -1, top1, &err) == QKV_OK && a.answer == top2 && a.wrong == top1,
          "wrong %d given: answer %d, want %d", top1, a.answer, top2);

    /* bad arguments */
    const struct {
        int n;
        int32_t answer, wrong;
        const char *needle;
    } bad[] = {{0, -1, -1, "0 tokens outside [1, 64]"},
               {65, -1, -1, "65 tokens outside [1, 64]"},
               {n, 7, 7, "two different ids"},
               {n, c->n_vocab, -1, "two different ids"},
               {n, -2, -1, "two different ids"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (qkv_error){0};
        CHECK(qkv_attribute(&a, m, ids, bad[i].n, bad[i].answer, bad[i].wrong, &err) == QKV_ERR_INVALID &&
                  strstr(err.msg, bad[i].needle),
              "case %zu: '%s'", i, err.msg);
    }
    qkv_attribution no_attn = {.mlp = mlp};
    CHECK(qkv_attribute(&no_attn, m, ids, n, -1, -1, &err) == QKV_ERR_INVALID, "attn NULL");
    qkv_attribution no_heads = {.attn = attn, .mlp = mlp};
    CHECK(qkv_attribute(&no_heads, m, ids, n, -1, -1, &err) == QKV_OK, "heads NULL is fine: %s", err.msg);
    free(logits);
    free(heads);
    free(attn);
    free(mlp);
    qkv_model_close(m);
}

TEST(attribute_gemma3_heads_are_not_additive) {
    if (!test_require_gemma3()) return;
    qkv_model *m = open_model(test_gemma3_path());
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    int32_t ids[32];
    const int n = tokenize(m, "年假怎么申请？", ids, 32, 1);
    float *heads = malloc((size_t)c->n_layer * c->n_head * sizeof(float)), *attn = malloc((size_t)c->n_layer * 4),
          *mlp = malloc((size_t)c->n_layer * 4);
    qkv_attribution a = {.heads = heads, .attn = attn, .mlp = mlp};
    qkv_error err = {0};
    float *logits = last_logits(m, ids, n);
    CHECK(qkv_attribute(&a, m, ids, n, -1, -1, &err) == QKV_OK, "%s", err.msg);
    CHECK(a.heads_linear == 0 && a.final_softcap == 0, "Gemma 3: heads_linear %d, final_softcap %d", a.heads_linear,
          a.final_softcap);
    int nan_heads = 0;
    for (int i = 0; i < c->n_layer * c->n_head; i++) nan_heads += isnan(heads[i]) != 0;
    CHECK(nan_heads == c->n_layer * c->n_head, "%d of %d heads NaN", nan_heads, c->n_layer * c->n_head);
    check_sums("Gemma 3", &a, c, logits);
    free(logits);
    free(heads);
    free(attn);
    free(mlp);
    qkv_model_close(m);
}
