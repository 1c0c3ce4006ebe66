/*
 * test_model_weights.c — weights shared by several sequences (qkv_weights,
 * qkv_model_new) on the real model (SmolLM2-135M): models on one copy of
 * the weights give the same logits, bit for bit, as a model that opened its
 * own, alone and from two threads at once; the weights live as long as the
 * last model on them, whoever closes first; a model's state bytes are what
 * it allocates.
 */
#include "testing.h"

#include "alloc_count.h"
#include "qkv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
#define N_PROMPT 12
#define N_STEPS 6

static const qkv_model_params params = {.n_ctx = 64, .kv_dtype = QKV_DTYPE_F32, .n_threads = 2};

/* A prefill of the prompt (every position's logits), then N_STEPS greedy
 * steps (the last row of each), from position 0.
 *   logits: [N_PROMPT + N_STEPS, V] */
static int prefill_and_decode(qkv_model *m, float *logits) {
    const int V = qkv_model_get_config(m)->n_vocab;
    qkv_error err = {0};
    if (qkv_model_rewind(m, 0, &err) || qkv_model_forward(m, logits, prompt, N_PROMPT, 1, NULL, &err)) return 1;
    for (int s = 0; s < N_STEPS; s++) {
        const int32_t next = test_argmax(logits + (size_t)(N_PROMPT - 1 + s) * V, V);
        if (qkv_model_forward(m, logits + (size_t)(N_PROMPT + s) * V, &next, 1, 0, NULL, &err)) return 1;
    }
    return 0;
}

static size_t logits_count(const qkv_weights *w) {
    return (size_t)(N_PROMPT + N_STEPS) * qkv_weights_config(w)->n_vocab;
}

TEST(model_weights_shared_by_two_models_match_a_separate_open) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_weights *w = NULL;
    qkv_model *a = NULL, *b = NULL, *alone = NULL;
    CHECK(qkv_weights_open(&w, test_model_path(), &err) == QKV_OK, "weights: %s", err.msg);
    if (!w) return;
    CHECK(qkv_model_new(&a, w, &params, &err) == QKV_OK, "model a: %s", err.msg);
    CHECK(qkv_model_new(&b, w, &params, &err) == QKV_OK, "model b: %s", err.msg);
    CHECK(qkv_model_open(&alone, test_model_path(), &params, &err) == QKV_OK, "open: %s", err.msg);
    if (a && b && alone) {
        CHECK(qkv_model_weights(a) == w && qkv_model_weights(b) == w, "the models do not name their weights");
        CHECK(qkv_model_gguf(a) == qkv_weights_gguf(w), "a model's GGUF is not its weights'");
        CHECK(!memcmp(qkv_model_get_config(a), qkv_weights_config(w), sizeof(qkv_model_config)),
              "a model's config differs from its weights' (no LongRoPE here)");
        CHECK(qkv_weights_bytes(w) > qkv_gguf_file_size(qkv_weights_gguf(w)),
              "weights bytes %zu: not the mapping plus the dequantised norms", qkv_weights_bytes(w));
        const size_t n = logits_count(w);
        float *la = malloc(n * 4), *lb = malloc(n * 4), *lone = malloc(n * 4);
        /* b runs between a's calls: a sequence's state is its own */
        CHECK(!prefill_and_decode(a, la) && !prefill_and_decode(b, lb) && !prefill_and_decode(alone, lone),
              "a forward call failed");
        CHECK(!memcmp(la, lone, n * 4), "model a on shared weights differs from a model with its own");
        CHECK(!memcmp(lb, lone, n * 4), "model b on shared weights differs from a model with its own");
        CHECK(qkv_model_pos(a) == N_PROMPT + N_STEPS && qkv_model_pos(b) == qkv_model_pos(a),
              "positions %d, %d", qkv_model_pos(a), qkv_model_pos(b));
        free(la);
        free(lb);
        free(lone);
    }
    qkv_model_close(a);
    qkv_model_close(b);
    qkv_model_close(alone);
    qkv_weights_close(w);
}

typedef struct {
    qkv_model *m;
    float *logits;
    int failed;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->failed = prefill_and_decode(j->m, j->logits);
    return NULL;
}

TEST(model_weights_shared_by_two_threads_at_once) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_weights *w = NULL;
    qkv_model *m[2] = {NULL, NULL};
    CHECK(qkv_weights_open(&w, test_model_path(), &err) == QKV_OK, "weights: %s", err.msg);
    for (int i = 0; i < 2 && w; i++) CHECK(qkv_model_new(&m[i], w, &params, &err) == QKV_OK, "model: %s", err.msg);
    if (m[0] && m[1]) {
        const size_t n = logits_count(w);
        float *alone = malloc(n * 4);
        job jobs[2] = {{m[0], malloc(n * 4), 0}, {m[1], malloc(n * 4), 0}};
        CHECK(!prefill_and_decode(m[0], alone), "the lone run failed");
        for (int round = 0; round < 3; round++) { /* the threads meet at different points */
            pthread_t t[2];
            for (int i = 0; i < 2; i++) CHECK(!pthread_create(&t[i], NULL, run_job, &jobs[i]), "pthread_create");
            for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
            for (int i = 0; i < 2; i++) {
                CHECK(!jobs[i].failed, "round %d: thread %d's forward failed", round, i);
                CHECK(!memcmp(jobs[i].logits, alone, n * 4), "round %d: thread %d differs from one model alone",
                      round, i);
            }
        }
        free(alone);
        free(jobs[0].logits);
        free(jobs[1].logits);
    }
    qkv_model_close(m[0]);
    qkv_model_close(m[1]);
    qkv_weights_close(w);
}

/* The weights go with the last reference, whoever drops it (ASan and
 * valgrind see a use after free or a leak otherwise). */
TEST(model_weights_closed_before_their_models) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_weights *w = NULL;
    qkv_model *a = NULL, *b = NULL;
    CHECK(qkv_weights_open(&w, test_model_path(), &err) == QKV_OK, "weights: %s", err.msg);
    if (!w) return;
    CHECK(qkv_model_new(&a, w, &params, &err) == QKV_OK && qkv_model_new(&b, w, &params, &err) == QKV_OK, "%s",
          err.msg);
    qkv_weights_close(w); /* the models hold theirs */
    if (a && b) {
        const int V = qkv_model_get_config(a)->n_vocab;
        float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
        CHECK(qkv_model_forward(a, la, prompt, N_PROMPT, 0, NULL, &err) == QKV_OK, "%s", err.msg);
        qkv_model_close(a);
        a = NULL;
        CHECK(qkv_model_forward(b, lb, prompt, N_PROMPT, 0, NULL, &err) == QKV_OK, "%s", err.msg);
        CHECK(!memcmp(la, lb, (size_t)V * 4), "the second model's logits changed when the first closed");
        free(la);
        free(lb);
    }
    qkv_model_close(a);
    qkv_model_close(b);
}

TEST(model_new_refuses_bad_arguments) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_model *m = (qkv_model *)&err;
    CHECK(qkv_model_new(&m, NULL, &params, &err) == QKV_ERR_INVALID && m == NULL && strstr(err.msg, "weights"),
          "NULL weights: %s", err.msg);
    qkv_weights *w = NULL;
    CHECK(qkv_weights_open(&w, "no/such/model.gguf", &err) != QKV_OK && w == NULL, "a missing file opened");
    CHECK(qkv_weights_open(&w, test_model_path(), &err) == QKV_OK, "%s", err.msg);
    const qkv_model_params negative = {.n_ctx = -1};
    CHECK(qkv_model_new(&m, w, &negative, &err) == QKV_ERR_INVALID && m == NULL, "n_ctx -1: %s", err.msg);
    qkv_weights_close(w); /* the failed model took no reference: this frees them (ASan checks) */
    qkv_weights_close(NULL);
}

/* qkv_model_state_bytes is what qkv_model_new allocates (the run-state
 * table, the plan's workspace, every KV cache), less only the small
 * bookkeeping arrays: per layer a spec, a cache pointer and header, a key0. */
TEST(model_state_bytes_are_what_model_new_allocates) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_weights *w = NULL;
    CHECK(qkv_weights_open(&w, test_model_path(), &err) == QKV_OK, "weights: %s", err.msg);
    if (!w) return;
    static const qkv_model_params sizes[] = {
        {.n_ctx = 64, .kv_dtype = QKV_DTYPE_F32, .n_threads = 2},
        {.n_ctx = 1024, .kv_dtype = QKV_DTYPE_F16, .n_threads = 1, .n_batch = 128},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        qkv_model *m = NULL;
        alloc_count_start();
        const qkv_status st = qkv_model_new(&m, w, &sizes[i], &err);
        alloc_count_stop();
        const int64_t got = alloc_count_bytes();
        CHECK(st == QKV_OK, "model: %s", err.msg);
        if (st) continue;
        const int64_t stated = (int64_t)qkv_model_state_bytes(m), L = qkv_weights_config(w)->n_layer;
        CHECK(stated <= got && got - stated <= 1024 + 256 * L,
              "context %d: state bytes %lld, allocated %lld (more than the bookkeeping apart)", sizes[i].n_ctx,
              (long long)stated, (long long)got);
        CHECK(stated > (int64_t)qkv_model_kv_bytes(m), "state bytes %lld without the run state", (long long)stated);
        printf("     context %d: state %lld bytes, allocated %lld\n", sizes[i].n_ctx, (long long)stated, (long long)got);
        qkv_model_close(m);
    }
    qkv_weights_close(w);
}
