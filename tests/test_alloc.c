/*
 * test_alloc.c — what must not allocate: a plan's attention runs, the
 * model's forward pass from its first call (in a fresh process, whose thread
 * pool the model starts at open), the sampler. Counted by the
 * runner's allocator replacement (alloc_count.h); the first test proves the
 * counter sees allocations at all, so the others cannot pass vacuously.
 */
#include "testing.h"

#include "alloc_count.h"
#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Called through a volatile pointer: the compiler may not elide the pair. */
static void *(*volatile g_malloc)(size_t) = malloc;

TEST(alloc_counter_sees_allocations) {
    alloc_count_start();
    void *p = g_malloc(100);
    int64_t n = alloc_count_stop();
    free(p);
    CHECK(n == 1, "a deliberate malloc counted %lld times, want 1", (long long)n);
    /* libqkv's allocations (the library is linked in statically) */
    qkv_kv_cache *c = NULL;
    alloc_count_start();
    qkv_status st = qkv_kv_cache_init(&c, 2, 16, 8, QKV_DTYPE_F32, NULL);
    n = alloc_count_stop();
    qkv_kv_cache_free(c);
    CHECK(st == QKV_OK && n >= 3, "qkv_kv_cache_init's 3 allocations counted %lld times", (long long)n);
    /* allocations on other threads */
    alloc_count_start();
#pragma omp parallel num_threads(2)
    free(g_malloc(10));
    n = alloc_count_stop();
    CHECK(n >= 2, "two threads' mallocs counted %lld times", (long long)n);
    alloc_count_start();
    n = alloc_count_stop();
    CHECK(n == 0, "nothing counted %lld times", (long long)n);
}

/* Runs of flash, flash-bf16, decode and auto plans (exclusions on, 1 and 2
 * threads, f32 and bf16 KV) allocate nothing, from each plan's first run
 * (plan init starts the pool's workers), twice over the same calls. */
TEST(attn_plan_runs_allocate_nothing) {
    const qkv_kernel kernels[] = {QKV_KERNEL_FLASH, QKV_KERNEL_FLASH_BF16, QKV_KERNEL_DECODE, QKV_KERNEL_AUTO};
    const int excl[] = {1, 7, 100, 513};
    const qkv_attn_desc max = {.n_q_head = 8, .n_kv_head = 2, .q_len = 8, .kv_len = 1024, .head_dim = 64};
    const size_t nq = (size_t)8 * 8 * 64, nkv = (size_t)2 * 1024 * 64;
    float *q = malloc(nq * 4), *kv = malloc(nkv * 4), *o = malloc(nq * 4), *lse = malloc(8 * 8 * 4);
    test_rng rng = {7};
    test_fill_normal(q, nq, &rng, 1);
    test_fill_normal(kv, nkv, &rng, 1);
    qkv_error err = {0};
    for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
        qkv_attn_plan *plan = NULL;
        CHECK(qkv_attn_plan_init(&plan, &max, kernels[ki], 2, &err) == QKV_OK, "%s", err.msg);
        if (!plan) continue;
        int64_t n_alloc = 0, runs = 0;
        alloc_count_start();
        for (int pass = 0; pass < 2; pass++) {
            /* decode rows (Lq 1, 8) against long KV, AUTO's flash side (short KV), threads 1 and 2 */
            const int lqs[] = {1, 8, 3}, lks[] = {1024, 700, 200};
            for (int i = 0; i < 3; i++)
                for (int t = 1; t <= 2; t++) {
                    qkv_attn_desc d = {.n_q_head = 8, .n_kv_head = 2, .q_len = lqs[i], .kv_len = lks[i],
                                       .head_dim = 64, .n_threads = t, .kv_dtype = t == 2 ? QKV_DTYPE_BF16 : QKV_DTYPE_F32,
                                       .mask = {.kind = QKV_MASK_CAUSAL, .exclude = excl, .n_exclude = 4}};
                    CHECK(qkv_attn_run(plan, o, lse, q, kv, kv, &d, &err) == QKV_OK, "%s", err.msg);
                    runs++;
                }
        }
        n_alloc = alloc_count_stop();
        CHECK(n_alloc == 0, "%s: %lld allocations in %lld runs", qkv_kernel_name(kernels[ki]), (long long)n_alloc,
              (long long)runs);
        qkv_attn_plan_free(plan);
    }
    free(q); free(kv); free(o); free(lse);
}

/* Temperature, top-k and top-p draws allocate nothing (the candidates are the sampler's). */
TEST(sampler_draws_allocate_nothing) {
    enum { V = 49152 };
    float *logits = malloc(V * sizeof(float));
    test_rng rng = {3};
    test_fill_normal(logits, V, &rng, 3);
    const qkv_sampler_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 1};
    qkv_sampler *s = NULL;
    qkv_error err = {0};
    CHECK(qkv_sampler_init(&s, V, &p, &err) == QKV_OK, "%s", err.msg);
    if (s) {
        alloc_count_start();
        for (int i = 0; i < 8; i++) qkv_sample(s, logits);
        int64_t n = alloc_count_stop();
        CHECK(n == 0, "8 draws allocated %lld times", (long long)n);
    }
    qkv_sampler_free(s);
    free(logits);
}

static const int32_t story[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};

/* The real model: a prompt in two chunks (the second allocates nothing), then
 * 64 greedy tokens, nothing allocated between the first and the last decode
 * step. The prompt (a 12-token sentence repeated to 200 tokens) takes the
 * cache past 256 keys during generation, so AUTO runs both flash and decode. */
TEST(model_forward_allocates_nothing_after_the_first_call) {
    if (!test_require_model()) return;
    const char *path = test_model_path();
    enum { N_PROMPT = 200, N_GEN = 64 };
    const qkv_model_params mp = {.n_ctx = 512, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_sampler *greedy = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    CHECK(qkv_sampler_init(&greedy, V, NULL, &err) == QKV_OK, "%s", err.msg);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = story[i % 12];
    float *logits = malloc((size_t)V * sizeof(float));
    const int excl[] = {3}, excl_head[] = {5, 7};
    const qkv_exclusion ex[2] = {{.positions = excl, .n = 1, .layer = QKV_ALL, .head = QKV_ALL},
                                 {.positions = excl_head, .n = 2, .layer = 2, .head = 1}};
    const qkv_head_ref zero = {.layer = 4, .head = 0};
    const qkv_forward_opts opts = {.exclude = ex, .n_exclude = 2, .zero_heads = &zero, .n_zero_heads = 1};

    /* chunk 1, then chunk 2 counted (exclusions on: the bitmap is the plan's,
     * the union of the lists the run state's) */
    CHECK(qkv_model_forward(m, logits, prompt, 150, 0, &opts, &err) == QKV_OK, "%s", err.msg);
    alloc_count_start();
    qkv_status st = qkv_model_forward(m, logits, prompt + 150, N_PROMPT - 150, 0, &opts, &err);
    int64_t n_chunk = alloc_count_stop();
    CHECK(st == QKV_OK, "%s", err.msg);
    CHECK(n_chunk == 0, "the second prefill chunk allocated %lld times", (long long)n_chunk);

    int64_t n_gen = 0;
    int steps = 0;
    for (int i = 0; i < N_GEN && st == QKV_OK; i++) {
        int32_t next = qkv_sample(greedy, logits);
        st = qkv_model_forward(m, logits, &next, 1, 0, NULL, &err);
        CHECK(st == QKV_OK, "step %d: %s", i, err.msg);
        steps++;
        if (i == 0) alloc_count_start();
    }
    n_gen = alloc_count_stop();
    CHECK(steps == N_GEN && qkv_model_pos(m) == N_PROMPT + N_GEN, "%d steps, at %d", steps, qkv_model_pos(m));
    CHECK(n_gen == 0, "%d decode steps allocated %lld times", N_GEN - 1, (long long)n_gen);
    free(logits);
    qkv_sampler_free(greedy);
    qkv_model_close(m);
}

/* A forked child has no pool workers (parallel.c): it opens the model,
 * which starts them, and counts its first forward call, a prefill with
 * exclusions, zeroed heads and hooks installed, then a decode step. Exit
 * status: 0, or 1 + the allocations (capped), 100 if the model did not open. */
static qkv_status count_nothing(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    *(float *)user += a->data[0];
    return QKV_OK;
}

TEST(model_first_forward_in_a_fresh_process_allocates_nothing) {
    if (!test_require_model()) return;
    fflush(NULL);
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
        qkv_model *m = NULL;
        const qkv_model_params mp = {.n_ctx = 64, .n_threads = 2};
        if (qkv_model_open(&m, test_model_path(), &mp, NULL)) _exit(100);
        float *logits = malloc((size_t)qkv_model_get_config(m)->n_vocab * sizeof(float)), seen = 0;
        const int excl[] = {2};
        const qkv_exclusion ex = {.positions = excl, .n = 1, .layer = 3, .head = QKV_ALL};
        const qkv_head_ref zero = {.layer = 1, .head = 2};
        const qkv_hook hook = {.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = count_nothing, .user = &seen};
        const qkv_forward_opts o = {.exclude = &ex, .n_exclude = 1, .zero_heads = &zero, .n_zero_heads = 1,
                                    .hooks = &hook, .n_hooks = 1};
        const int32_t next = story[0];
        alloc_count_start();
        qkv_status st = qkv_model_forward(m, logits, story, 12, 0, &o, NULL);
        if (!st) st = qkv_model_forward(m, logits, &next, 1, 0, NULL, NULL);
        const int64_t n = alloc_count_stop();
        _exit(st ? 99 : n == 0 ? 0 : n < 90 ? 1 + (int)n : 98);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the first forward calls of a fresh process: exit status %d (1 + allocations; 99: failed, 100: no model)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* The sliding-window cache drops rows by moving them within its own
 * memory: the tiny gemma3 (window 12 on five of six layers) with swa_cache
 * and n_batch 16, counted from its second call: prompt calls of 16 with
 * exclusions and a zeroed head, then 40 decode steps, a drop every 16. */
TEST(model_swa_cache_forward_allocates_nothing) {
    char path[700];
    snprintf(path, sizeof path, "%s/families/gemma3/model.gguf", test_fixture_dir());
    const qkv_model_params mp = {.n_ctx = 192, .n_batch = 16, .swa_cache = 1, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t ids[96];
    for (int i = 0; i < 96; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    const int excl[] = {3, 40, 70};
    const qkv_exclusion ex[2] = {{.positions = excl, .n = 3, .layer = QKV_ALL, .head = QKV_ALL},
                                 {.positions = excl + 1, .n = 2, .layer = 2, .head = 1}};
    const qkv_head_ref zero = {.layer = 4, .head = 0};
    const qkv_forward_opts opts = {.exclude = ex, .n_exclude = 2, .zero_heads = &zero, .n_zero_heads = 1};
    qkv_status st = qkv_model_forward(m, logits, ids, 16, 0, &opts, &err);
    CHECK(st == QKV_OK, "%s", err.msg);
    alloc_count_start();
    for (int p = 16; p < 96 && !st; p += 16) st = qkv_model_forward(m, logits, ids + p, 16, 0, &opts, &err);
    for (int i = 0; i < 40 && !st; i++) st = qkv_model_forward(m, logits, ids + i, 1, 0, NULL, &err);
    const int64_t n = alloc_count_stop();
    CHECK(st == QKV_OK && qkv_model_pos(m) == 136, "%s (at %d)", err.msg, qkv_model_pos(m));
    CHECK(n == 0, "prompt calls and decode steps with a sliding-window cache allocated %lld times", (long long)n);
    free(logits);
    qkv_model_close(m);
}

/* A replay (qkv_model_replay: every layer's row saved to and restored from
 * the run state) allocates nothing, with exclusions, a zeroed head, chosen
 * logits and a hook_pattern hook reading rows; nor does replay_layers. */
static qkv_status read_pattern_row(void *user, const qkv_activation *a, qkv_error *err) {
    return qkv_pattern_weights(user, a, 0, 0, 1, 0, (int)a->shape[2], err);
}

TEST(model_replay_allocates_nothing) {
    if (!test_require_model()) return;
    const qkv_model_params mp = {.n_ctx = 64, .kv_dtype = QKV_DTYPE_F16, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)V * sizeof(float)), row[64];
    const int excl[] = {3, 5};
    const qkv_exclusion ex[2] = {{.positions = excl, .n = 1, .layer = QKV_ALL, .head = QKV_ALL},
                                 {.positions = excl + 1, .n = 1, .layer = 2, .head = 1}};
    const qkv_head_ref zero = {.layer = 4, .head = 0};
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = read_pattern_row, .user = row};
    const int32_t ids[2] = {282, 7627};
    const qkv_forward_opts opts = {.exclude = ex, .n_exclude = 2, .zero_heads = &zero, .n_zero_heads = 1,
                                   .hooks = &hook, .n_hooks = 1};
    const qkv_forward_opts two = {.logit_ids = ids, .n_logit_ids = 2};
    qkv_status st = qkv_model_forward(m, NULL, story, 12, 0, NULL, &err);
    CHECK(st == QKV_OK, "%s", err.msg);
    alloc_count_start();
    for (int pos = 0; pos < 12 && !st; pos++) {
        st = qkv_model_replay(m, logits, pos, story[pos], &opts, &err);
        if (!st) st = qkv_model_replay(m, logits, pos, story[pos], &two, &err);
        if (!st) st = qkv_model_replay_layers(m, 3, pos, story[pos], &opts, &err);
    }
    const int64_t n = alloc_count_stop();
    CHECK(st == QKV_OK, "%s", err.msg);
    CHECK(n == 0, "36 replays allocated %lld times", (long long)n);
    free(logits);
    qkv_model_close(m);
}

/* The explorer's reads allocate nothing once their buffers exist: the
 * overview hook on a prefill chunk and on decode steps (its block doubling
 * included), qkv_explore_rows and qkv_explore_row. */
TEST(explore_and_overview_allocate_nothing) {
    if (!test_require_model()) return;
    const qkv_model_params mp = {.n_ctx = 64, .kv_dtype = QKV_DTYPE_F16, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_overview *ov = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    CHECK(qkv_overview_init(&ov, c, 4, &err) == QKV_OK, "%s", err.msg);
    float *rows = malloc((size_t)c->n_layer * c->n_head * 40 * sizeof(float));
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_overview_hook, .user = ov};
    const qkv_forward_opts o = {.hooks = &hook, .n_hooks = 1};
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = story[i % 12];
    qkv_status st = qkv_model_forward(m, NULL, ids, 12, 0, &o, &err);
    alloc_count_start();
    if (!st) st = qkv_model_forward(m, NULL, ids + 12, 20, 0, &o, &err);
    for (int p = 32; p < 40 && !st; p++) st = qkv_model_forward(m, NULL, ids + p, 1, 0, &o, &err);
    if (!st) st = qkv_explore_rows(rows, m, ids, 39, &err);
    if (!st) st = qkv_explore_row(rows, m, ids, 20, 5, QKV_ALL, &err);
    const int64_t n = alloc_count_stop();
    CHECK(st == QKV_OK, "%s", err.msg);
    CHECK(n == 0, "the overview hook and the explorer's rows allocated %lld times", (long long)n);
    free(rows);
    qkv_overview_free(ov);
    qkv_model_close(m);
}

/* A resumed forward call (start_resid, hooks on) allocates nothing either;
 * qkv_patch allocates its caches once per call (qkv_patch_bytes: here both
 * runs' hook_z, the checkpoints and three logit rows), never per component. */
static qkv_status keep_resid(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    memcpy(user, a->data, (size_t)(a->shape[0] * a->shape[1]) * sizeof(float));
    return QKV_OK;
}

TEST(model_resumed_forward_and_patch_allocate_once) {
    if (!test_require_model()) return;
    const qkv_model_params mp = {.n_ctx = 64, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    float *logits = malloc((size_t)c->n_vocab * sizeof(float)), *resid = malloc((size_t)12 * c->n_embd * sizeof(float));
    const qkv_hook keep = {.point = QKV_HOOK_RESID_PRE, .layer = 7, .fn = keep_resid, .user = resid};
    CHECK(qkv_model_forward(m, logits, story, 12, 0, &(qkv_forward_opts){.hooks = &keep, .n_hooks = 1}, &err) == QKV_OK,
          "%s", err.msg);
    const qkv_forward_opts resume = {.start_layer = 7, .start_resid = resid, .hooks = &keep, .n_hooks = 1};
    alloc_count_start();
    qkv_status st = qkv_model_forward(m, logits, story, 12, 0, &resume, &err);
    int64_t n = alloc_count_stop();
    CHECK(st == QKV_OK && n == 0, "a resumed call: %s, %lld allocations", err.msg, (long long)n);

    int32_t corrupt[12];
    memcpy(corrupt, story, sizeof corrupt);
    corrupt[6] = story[3];
    float *heads = malloc((size_t)c->n_layer * c->n_head * sizeof(float));
    qkv_patch_out out = {.recovery[QKV_SWEEP_HEAD_OUT] = heads};
    qkv_patch_summary sum;
    alloc_count_start();
    st = qkv_patch(&out, &sum, m, story, corrupt, 12, NULL, &err);
    n = alloc_count_stop();
    CHECK(st == QKV_OK && n == 6 && sum.n_components == c->n_layer * c->n_head,
          "qkv_patch of %lld components: %s, %lld allocations, want 6", (long long)sum.n_components, err.msg,
          (long long)n);
    free(heads);
    free(logits);
    free(resid);
    qkv_model_close(m);
}

/* qkv_lens allocates what qkv_lens_bytes says, once per call (what qkv
 * serve holds to --max-mib): the residuals, the logit rows, the top-k heap. */
TEST(lens_allocates_its_bytes) {
    if (!test_require_model()) return;
    const qkv_model_params mp = {.n_ctx = 64, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &mp, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, k = 3;
    int32_t *top = malloc((size_t)L * 12 * k * sizeof(int32_t));
    float *probs = malloc((size_t)L * 12 * k * sizeof(float));
    qkv_lens_out out = {.top_ids = top, .top_probs = probs};
    const qkv_lens_params p = {.k = k, .target = -1};
    /* a first call: what the process sets up once (ASan's thread state in the pool's workers) is not the lens's */
    CHECK(qkv_lens(&out, m, story, 12, &p, &err) == QKV_OK, "%s", err.msg);
    alloc_count_start();
    const qkv_status st = qkv_lens(&out, m, story, 12, &p, &err);
    const int64_t n = alloc_count_stop(), bytes = alloc_count_bytes();
    CHECK(st == QKV_OK && n == 4, "qkv_lens: %s, %lld allocations, want 4", err.msg, (long long)n);
    CHECK(bytes == qkv_lens_bytes(m, 12, k), "qkv_lens allocated %lld bytes, qkv_lens_bytes says %lld", (long long)bytes,
          (long long)qkv_lens_bytes(m, 12, k));
    CHECK(qkv_lens_bytes(m, 12, k) == ((int64_t)L * 12 * c->n_embd + 12 * (int64_t)c->n_vocab) * 4 + k * 8,
          "qkv_lens_bytes: %lld", (long long)qkv_lens_bytes(m, 12, k));
    CHECK(qkv_lens_bytes(NULL, 12, k) == -1 && qkv_lens_bytes(m, 0, k) == -1 && qkv_lens_bytes(m, 12, 0) == -1,
          "bad arguments give -1");
    free(top);
    free(probs);
    qkv_model_close(m);
}
