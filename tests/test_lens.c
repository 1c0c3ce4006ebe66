/*
 * test_lens.c — the logit lens (src/probe/lens.c) on the real models: the
 * last layer's lens is the model's own next-token distribution at every
 * position (top k ids equal, probabilities within PROB_TOL of the softmax
 * of the forward's logits, computed here in double: the lens runs the same
 * final step on the same residual, so only the two softmax sums' rounding
 * differs), on SmolLM2 and on Gemma 3 with a prompt longer than one block
 * of V-wide logit rows (V = 262,144: 64 rows a block), so the blocks are
 * crossed; the top k come sorted, best first, distinct; the target's
 * probability is the softmax entry; the cache is left empty; bad arguments
 * are refused. The middle layers against transformers: test_patch_oracle.c.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROB_TOL 1e-6
enum { K = 5 };

static int tokenize(qkv_model *m, const char *text, int32_t *ids, int cap) {
    qkv_tokenizer *t = NULL;
    qkv_error err = {0};
    int64_t n = 0;
    CHECK(qkv_tokenizer_load(&t, qkv_model_gguf(m), &err) == QKV_OK, "%s", err.msg);
    if (t) CHECK(qkv_tokenize(t, text, strlen(text), 1, 0, ids, cap, &n, &err) == QKV_OK, "%s", err.msg);
    qkv_tokenizer_free(t);
    return (int)n;
}

/* The lens of tokens against the model's own output, every position. */
static void check_last_layer(const char *name, const char *path, const char *text, int min_tokens) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = 128, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s: %s", path, err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, V = c->n_vocab;
    int32_t ids[128];
    const int n = tokenize(m, text, ids, 128);
    CHECK(n >= min_tokens, "%s: %d tokens, want at least %d", name, n, min_tokens);
    float *logits = malloc((size_t)n * V * sizeof(float));
    CHECK(qkv_model_forward(m, logits, ids, n, 1, NULL, &err) == QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, 0, NULL);
    const int32_t target = ids[n - 1];
    qkv_lens_out out = {.top_ids = malloc((size_t)L * n * K * sizeof(int32_t)),
                        .top_probs = malloc((size_t)L * n * K * sizeof(float)),
                        .target_prob = malloc((size_t)L * n * sizeof(float))};
    const qkv_lens_params p = {.k = K, .target = target};
    CHECK(qkv_lens(&out, m, ids, n, &p, &err) == QKV_OK, "%s: %s", name, err.msg);
    CHECK(qkv_model_pos(m) == 0, "%s: the cache is left at %d", name, qkv_model_pos(m));

    double worst = 0;
    int ids_differ = 0, unsorted = 0;
    for (int t = 0; t < n; t++) {
        const float *row = logits + (size_t)t * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, row[v]);
        for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
        /* the model's top K by insertion, lowest id first on ties (ids ascend:
         * a later id moves ahead only when strictly greater) */
        int32_t want[K];
        int have = 0;
        for (int32_t v = 0; v < V; v++) {
            if (have == K && !(row[v] > row[want[K - 1]])) continue;
            int j = have < K ? have++ : K - 1;
            for (; j > 0 && row[v] > row[want[j - 1]]; j--) want[j] = want[j - 1];
            want[j] = v;
        }
        const size_t at = (size_t)(L - 1) * n + t;
        for (int j = 0; j < K; j++) {
            ids_differ += out.top_ids[at * K + j] != want[j];
            worst = fmax(worst, fabs(out.top_probs[at * K + j] - exp(row[want[j]] - mx) / sum));
        }
        worst = fmax(worst, fabs(out.target_prob[at] - exp(row[target] - mx) / sum));
        for (int l = 0; l < L; l++)
            for (int j = 1; j < K; j++) {
                const size_t a = ((size_t)l * n + t) * K;
                unsorted += out.top_probs[a + j] > out.top_probs[a + j - 1] ||
                            out.top_ids[a + j] == out.top_ids[a + j - 1];
            }
    }
    CHECK(ids_differ == 0, "%s: %d of the last layer's top-%d ids differ from the model's", name, ids_differ, K);
    CHECK(worst <= PROB_TOL, "%s: the last layer's probabilities differ from the model's by %.3g", name, worst);
    CHECK(unsorted == 0, "%s: %d top-k entries out of order or repeated", name, unsorted);
    printf("  %-8s %d tokens: last layer against the model's softmax: ids equal, max |dp| %.2g; layer 0 top-1 at the "
           "end %d (p %.3f), last layer %d (p %.3f)\n",
           name, n, worst, out.top_ids[(size_t)(n - 1) * K], out.top_probs[(size_t)(n - 1) * K],
           out.top_ids[((size_t)(L - 1) * n + n - 1) * K], out.top_probs[((size_t)(L - 1) * n + n - 1) * K]);
    free(logits);
    free(out.top_ids);
    free(out.top_probs);
    free(out.target_prob);
    qkv_model_close(m);
}

TEST(lens_smollm2_last_layer_is_the_model) {
    if (!test_require_model()) return;
    check_last_layer("SmolLM2", test_model_path(), "When Mary and John went to the store, John gave a drink to", 14);
}

TEST(lens_gemma3_last_layer_is_the_model_across_blocks) {
    if (!test_require_gemma3()) return;
    check_last_layer("Gemma 3", test_gemma3_path(),
                     "年假怎么申请？年假是员工每年可以带薪休息的假期。申请年假时，员工应提前向主管提交书面申请，"
                     "写明休假的起止日期和工作交接安排。病假则需要医院开具的证明，并在返岗后三个工作日内交给人事部门。"
                     "如果假期跨越节假日，请提前确认排班。",
                     65);
}

TEST(lens_refuses_bad_arguments) {
    if (!test_require_model()) return;
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = 16, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int L = qkv_model_get_config(m)->n_layer, V = qkv_model_get_config(m)->n_vocab;
    const int32_t ids[4] = {504, 3575, 282, 4649};
    int32_t *top = malloc((size_t)L * 4 * 2 * sizeof(int32_t));
    float *probs = malloc((size_t)L * 4 * 2 * sizeof(float));
    const struct {
        int n, k;
        int32_t target;
        int pos0, pos1;
        const char *needle;
    } bad[] = {{0, 1, -1, 0, 0, "0 tokens outside [1, 16]"},
               {17, 1, -1, 0, 0, "17 tokens outside [1, 16]"},
               {4, 0, -1, 0, 0, "k 0 outside"},
               {4, V + 1, -1, 0, 0, "outside [1, 49152]"},
               {4, 2, 7, 0, 0, "target 7 outside [-1, 49152) or without target_prob"},
               {4, 2, V, 0, 0, "target 49152 outside"},
               {4, 1, -1, 2, 2, "positions [2, 2) not a window of [0, 4)"},
               {4, 1, -1, 1, 5, "positions [1, 5) not a window"},
               {4, 1, -1, -1, 2, "positions [-1, 2) not a window"}};
    qkv_lens_out out = {.top_ids = top, .top_probs = probs};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (qkv_error){0};
        const qkv_lens_params p = {.k = bad[i].k, .target = bad[i].target, .pos0 = bad[i].pos0, .pos1 = bad[i].pos1};
        CHECK(qkv_lens(&out, m, ids, bad[i].n, &p, &err) == QKV_ERR_INVALID && strstr(err.msg, bad[i].needle),
              "case %zu: '%s'", i, err.msg);
    }
    qkv_lens_out no_ids = {.top_probs = probs};
    CHECK(qkv_lens(&no_ids, m, ids, 4, NULL, &err) == QKV_ERR_INVALID, "top_ids NULL");
    CHECK(qkv_lens(&out, m, ids, 4, NULL, &err) == QKV_OK && qkv_model_pos(m) == 0, "p NULL: k 1 (%s)", err.msg);
    free(top);
    free(probs);
    qkv_model_close(m);
}

/* A window [pos0, pos1) is the whole lens's columns pos0..pos1-1: the same
 * top ids, the same probabilities within WINDOW_TOL (its forward runs only
 * tokens [0, pos1), a shorter call whose matmuls may round otherwise: 2.4e-6
 * seen on SmolLM2). */
#define WINDOW_TOL 1e-5
TEST(lens_window_is_the_whole_lens_columns) {
    if (!test_require_model()) return;
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    int32_t ids[64];
    const int n = tokenize(m, "When Mary and John went to the store, John gave a drink to", ids, 64);
    const int L = qkv_model_get_config(m)->n_layer, pos0 = 3, pos1 = n - 2, w = pos1 - pos0;
    int32_t *top = malloc((size_t)L * n * K * sizeof(int32_t)), *wtop = malloc((size_t)L * w * K * sizeof(int32_t));
    float *probs = malloc((size_t)L * n * K * sizeof(float)), *wprobs = malloc((size_t)L * w * K * sizeof(float));
    float *tp = malloc((size_t)L * n * sizeof(float)), *wtp = malloc((size_t)L * w * sizeof(float));
    qkv_lens_out all = {.top_ids = top, .top_probs = probs, .target_prob = tp},
                 win = {.top_ids = wtop, .top_probs = wprobs, .target_prob = wtp};
    const qkv_lens_params pa = {.k = K, .target = 1010}, pw = {.k = K, .target = 1010, .pos0 = pos0, .pos1 = pos1};
    CHECK(n > 10 && qkv_lens(&all, m, ids, n, &pa, &err) == QKV_OK, "whole: %s", err.msg);
    CHECK(qkv_lens(&win, m, ids, n, &pw, &err) == QKV_OK && qkv_model_pos(m) == 0, "window: %s", err.msg);
    int bad_ids = 0;
    double worst = 0;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < w; p++) {
            const size_t a = (size_t)l * n + pos0 + p, b = (size_t)l * w + p;
            for (int j = 0; j < K; j++) {
                bad_ids += top[a * K + j] != wtop[b * K + j];
                worst = fmax(worst, fabs((double)probs[a * K + j] - wprobs[b * K + j]));
            }
            worst = fmax(worst, fabs((double)tp[a] - wtp[b]));
        }
    CHECK(bad_ids == 0 && worst <= WINDOW_TOL, "window [%d, %d): %d top ids differ, probabilities by %.3g", pos0, pos1,
          bad_ids, worst);
    free(top);
    free(wtop);
    free(probs);
    free(wprobs);
    free(tp);
    free(wtp);
    qkv_model_close(m);
}
