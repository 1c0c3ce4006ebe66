/*
 * test_model_resume.c — a resumed forward call (qkv_forward_opts.start_layer,
 * start_resid), on SmolLM2 and Gemma 3: entered at layer L with the
 * hook_resid_pre of L that a whole call saw, it gives that call's last
 * logits bit for bit (L = 0, inner layers, the last layer, and L = n_layer:
 * the final norm alone on hook_resid_post of the last layer); it calls no
 * hook below L, hook_embed included; it leaves every layer's KV cache at
 * the length it found, so a decode step after it is bit for bit the one
 * before it. Run at a cache holding a prefix, so the resumed layers attend
 * to cached keys too. Out-of-range start layers are refused.
 */
#include "testing.h"

#include "model/state.h"
#include "qkv.h"

#include <stdlib.h>
#include <string.h>

static const int32_t smollm2_prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
/* "年假怎么申请？病假呢？" under Gemma 3's tokenizer (qkv tokenize), BOS first */
static const int32_t gemma3_prompt[10] = {2, 237155, 239126, 20779, 49204, 237536, 238534, 239126, 238463, 237536};
enum { PREFIX = 4 };

/* Every layer's hook_resid_pre, and the last layer's hook_resid_post, of one call. */
typedef struct {
    int E, n, L;
    float *resid;  /* [L + 1, n, E]: resid_pre of 0 .. L-1, then resid_post of L-1 */
    int calls[QKV_HOOK_COUNT];
    int lowest_layer; /* the lowest layer any per-layer hook was called in */
} capture;

static qkv_status capture_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    capture *c = user;
    c->calls[a->point]++;
    if (a->layer >= 0 && a->layer < c->lowest_layer) c->lowest_layer = a->layer;
    const size_t nE = (size_t)c->n * c->E;
    if (a->point == QKV_HOOK_RESID_PRE) memcpy(c->resid + (size_t)a->layer * nE, a->data, nE * sizeof(float));
    if (a->point == QKV_HOOK_RESID_POST && a->layer == c->L - 1)
        memcpy(c->resid + (size_t)c->L * nE, a->data, nE * sizeof(float));
    return QKV_OK;
}

static int caches_at(const qkv_model *m, int len) {
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (qkv_kv_cache_len(m->cache[l]) != len) return 0;
    return 1;
}

/* tokens[0 .. PREFIX) into the cache, tokens[PREFIX .. n) run whole and then
 * resumed from each layer in starts. */
static void check_resume(qkv_model *m, const char *name, const int32_t *tokens, int n, const int *starts,
                         int n_starts) {
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab, E = c->n_embd, L = c->n_layer, k = n - PREFIX;
    capture cap = {.E = E, .n = k, .L = L, .resid = malloc((size_t)(L + 1) * k * E * sizeof(float)),
                   .lowest_layer = L};
    float *full = malloc((size_t)V * 4), *got = malloc((size_t)V * 4), *step = malloc((size_t)V * 4),
          *step_after = malloc((size_t)V * 4);
    qkv_hook hooks[3] = {{.point = QKV_HOOK_RESID_PRE, .layer = QKV_ALL, .fn = capture_hook, .user = &cap},
                         {.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = capture_hook, .user = &cap},
                         {.point = QKV_HOOK_EMBED, .fn = capture_hook, .user = &cap}};
    qkv_error err = {0};
    qkv_model_rewind(m, 0, NULL);
    CHECK(qkv_model_forward(m, NULL, tokens, PREFIX, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    /* the decode step the cache gives before any resumed call */
    CHECK(qkv_model_forward(m, step, tokens + PREFIX, 1, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, PREFIX, NULL);
    CHECK(qkv_model_forward(m, full, tokens + PREFIX, k, 0, &(qkv_forward_opts){.hooks = hooks, .n_hooks = 3}, &err) ==
              QKV_OK, "%s", err.msg);
    qkv_model_rewind(m, PREFIX, NULL);
    for (int i = 0; i < n_starts; i++) {
        const int l0 = starts[i];
        memset(cap.calls, 0, sizeof cap.calls);
        cap.lowest_layer = L;
        float *resid = malloc((size_t)k * E * sizeof(float)); /* the call may not write its start_resid */
        memcpy(resid, cap.resid + (size_t)l0 * k * E, (size_t)k * E * sizeof(float));
        const qkv_forward_opts o = {.start_layer = l0, .start_resid = resid, .hooks = hooks, .n_hooks = 3};
        qkv_status st = qkv_model_forward(m, got, tokens + PREFIX, k, 0, &o, &err);
        CHECK(st == QKV_OK, "%s: resumed at %d: %s", name, l0, err.msg);
        CHECK(!memcmp(got, full, (size_t)V * 4), "%s: resumed at layer %d, the last logits differ from the whole call",
              name, l0);
        CHECK(!memcmp(resid, cap.resid + (size_t)l0 * k * E, (size_t)k * E * sizeof(float)),
              "%s: resumed at %d: start_resid changed", name, l0);
        CHECK(caches_at(m, PREFIX) && qkv_model_pos(m) == PREFIX, "%s: resumed at %d: the caches are not at %d",
              name, l0, PREFIX);
        CHECK(cap.calls[QKV_HOOK_EMBED] == 0, "%s: resumed at %d: hook_embed called", name, l0);
        CHECK(cap.calls[QKV_HOOK_RESID_PRE] == L - l0 && cap.lowest_layer == (l0 < L ? l0 : L),
              "%s: resumed at %d: resid_pre called %d times, lowest layer %d", name, l0, cap.calls[QKV_HOOK_RESID_PRE],
              cap.lowest_layer);
        free(resid);
    }
    CHECK(qkv_model_forward(m, step_after, tokens + PREFIX, 1, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    CHECK(!memcmp(step, step_after, (size_t)V * 4), "%s: the decode step after the resumed calls differs", name);
    qkv_model_rewind(m, 0, NULL);
    free(cap.resid);
    free(full);
    free(got);
    free(step);
    free(step_after);
}

static qkv_model *open_at(const char *path) {
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, path, &p, &err) == QKV_OK, "open %s: %s", path, err.msg);
    return m;
}

TEST(model_resume_smollm2_is_the_whole_call) {
    if (!test_require_model()) return;
    qkv_model *m = open_at(test_model_path());
    if (!m) return;
    const int starts[] = {0, 1, 7, 15, 28, 29, 30};
    check_resume(m, "SmolLM2", smollm2_prompt, 12, starts, (int)(sizeof starts / sizeof starts[0]));
    qkv_model_close(m);
}

TEST(model_resume_gemma3_is_the_whole_call) {
    if (!test_require_gemma3()) return;
    qkv_model *m = open_at(test_gemma3_path());
    if (!m) return;
    const int starts[] = {0, 1, 5, 6, 11, 17, 18};
    check_resume(m, "Gemma 3", gemma3_prompt, 10, starts, (int)(sizeof starts / sizeof starts[0]));
    qkv_model_close(m);
}

TEST(model_resume_refuses_bad_start_layers) {
    if (!test_require_model()) return;
    qkv_model *m = open_at(test_model_path());
    if (!m) return;
    const int L = qkv_model_get_config(m)->n_layer, E = qkv_model_get_config(m)->n_embd;
    float *resid = calloc((size_t)4 * E, sizeof(float));
    const struct {
        int layer;
        const float *resid;
        const char *needle;
    } bad[] = {{-1, resid, "start layer -1 outside [0, 30]"},
               {L + 1, resid, "start layer 31 outside [0, 30]"},
               {3, NULL, "start layer 3 without the residual"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_error err = {0};
        const qkv_forward_opts o = {.start_layer = bad[i].layer, .start_resid = bad[i].resid};
        CHECK(qkv_model_forward(m, NULL, smollm2_prompt, 4, 0, &o, &err) == QKV_ERR_INVALID &&
                  strstr(err.msg, bad[i].needle),
              "start layer %d: '%s'", bad[i].layer, err.msg);
        CHECK(qkv_model_pos(m) == 0, "a refused call moved the cache to %d", qkv_model_pos(m));
    }
    free(resid);
    qkv_model_close(m);
}
