/*
 * test_model_replay.c — qkv_model_replay: position pos's token run again,
 * alone, over the cache rows before it, the sequence left as it was.
 *
 *   - every position of a prompt (SmolLM2 with an f32 and an f16 cache; the
 *     tiny gemma3 of tests/fixtures/families, window 12 on layers 0-4, on 40
 *     tokens: sliding and global layers) replays to the logits of a forward
 *     call that ends there (a second model on the same weights, rewound and
 *     run up to pos). Tolerance, f32 cache: |replay - forward| <= 2e-4 +
 *     1e-5 |forward|, test_model_forward.c's bound for prefill against
 *     decode: the replay is one row, the forward a batch, and the matmul
 *     kernel sums a batch of up to 3 rows in another order than a larger one,
 *     the flash and decode kernels their keys in other blocks (float32
 *     rounding; measured 2.3e-5). f16 cache: max |replay - forward| <= 2e-3
 *     x max |forward| of the row: the replayed row's K and V, from one-row
 *     matmuls, round to f16 (2^-11 relative) on the other side of a tie at
 *     some elements, and the layers above carry it (measured 3.4e-4 of the
 *     row's max, as a decode step against the prefill);
 *   - after all of them every layer's K and V are the same bytes and the
 *     position the same;
 *   - hiding key k in a replay of the last position is qkv_ablate_positions'
 *     QKV_ABLATE_LAST for k: the same KL, to the bit when the sequence was
 *     run as ablate runs it (n - 1 tokens, then the last), within 1e-4
 *     relative when it was prefilled in one call (the cached rows may differ
 *     by rounding; equal here);
 *   - replay_layers stops after a layer (its hook_pattern sees the rows a
 *     full replay's does, no layer above runs);
 *   - what a replay cannot take is refused in one line.
 */
#include "testing.h"

#include "model/state.h"
#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t story[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};

static const char *tiny_gemma3(void) {
    static char path[700];
    snprintf(path, sizeof path, "%s/families/gemma3/model.gguf", test_fixture_dir());
    return path;
}

/* Every layer's K and V rows [0, pos) as bytes, one after another (malloc'd; *bytes its size). */
static unsigned char *cache_bytes(const qkv_model *m, size_t *bytes) {
    const qkv_model_config *c = qkv_model_get_config(m);
    size_t total = 0;
    for (int l = 0; l < c->n_layer; l++) total += 2 * (size_t)qkv_kv_cache_capacity(m->cache[l]) * c->n_kv_head *
                                                  c->head_dim * qkv_dtype_size(qkv_kv_cache_dtype(m->cache[l]));
    unsigned char *out = malloc(total), *at = out;
    for (int l = 0; l < c->n_layer; l++) {
        const size_t half = (size_t)qkv_kv_cache_capacity(m->cache[l]) * c->n_kv_head * c->head_dim *
                            qkv_dtype_size(qkv_kv_cache_dtype(m->cache[l]));
        memcpy(at, qkv_kv_cache_k(m->cache[l]), half);
        memcpy(at + half, qkv_kv_cache_v(m->cache[l]), half);
        at += 2 * half;
    }
    *bytes = total;
    return out;
}

/* Replays every position of ids [n] on a model prefilled with them and
 * compares each with a forward call ending there, on a second model over
 * the same weights; then the cache bytes. */
static void check_every_position(const char *path, const char *what, qkv_dtype dtype, const int32_t *ids, int n) {
    qkv_error err = {0};
    qkv_weights *w = NULL;
    qkv_model *m = NULL, *ref = NULL;
    const qkv_model_params p = {.n_ctx = 64, .kv_dtype = dtype, .n_threads = 2};
    CHECK(qkv_weights_open(&w, path, &err) == QKV_OK, "%s: %s", what, err.msg);
    if (!w || qkv_model_new(&m, w, &p, &err) || qkv_model_new(&ref, w, &p, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        goto done;
    }
    const int V = qkv_weights_config(w)->n_vocab;
    float *got = malloc((size_t)V * 4), *want = malloc((size_t)V * 4);
    CHECK(qkv_model_forward(m, NULL, ids, n, 0, NULL, &err) == QKV_OK, "%s: prefill: %s", what, err.msg);
    size_t bytes;
    unsigned char *before = cache_bytes(m, &bytes);
    double worst = 0;
    for (int pos = 0; pos < n; pos++) {
        CHECK(qkv_model_replay(m, got, pos, ids[pos], NULL, &err) == QKV_OK, "%s: replay %d: %s", what, pos, err.msg);
        CHECK(qkv_model_rewind(ref, 0, &err) == QKV_OK &&
                  qkv_model_forward(ref, want, ids, pos + 1, 0, NULL, &err) == QKV_OK,
              "%s: forward to %d: %s", what, pos, err.msg);
        int64_t at;
        const double rel = test_worst_row(got, want, 1, V, &at);
        if (dtype == QKV_DTYPE_F32) {
            char label[96];
            snprintf(label, sizeof label, "%s: replay of position %d against a forward ending there", what, pos);
            CHECK_CLOSE(label, got, want, (size_t)V, 2e-4, 1e-5);
        } else {
            CHECK(rel <= 2e-3, "%s: replay of position %d: max |replay - forward| / max |forward| = %.3g", what, pos, rel);
        }
        worst = rel > worst ? rel : worst;
    }
    size_t bytes_after;
    unsigned char *after = cache_bytes(m, &bytes_after);
    CHECK(bytes == bytes_after && !memcmp(before, after, bytes), "%s: the KV caches changed", what);
    CHECK(qkv_model_pos(m) == n, "%s: position %d after the replays, %d before", what, qkv_model_pos(m), n);
    printf("     %-34s %d positions: max |replay - forward| / max |forward| %.2e, caches unchanged\n", what, n,
           worst);
    free(before);
    free(after);
    free(got);
    free(want);
done:
    qkv_model_close(m);
    qkv_model_close(ref);
    qkv_weights_close(w);
}

TEST(model_replay_of_every_position_equals_a_forward_ending_there) {
    if (!test_require_model()) return;
    check_every_position(test_model_path(), "SmolLM2, f32 cache", QKV_DTYPE_F32, story, 12);
    check_every_position(test_model_path(), "SmolLM2, f16 cache", QKV_DTYPE_F16, story, 12);
    int32_t ids[40];
    test_rng r = {7};
    for (int i = 0; i < 40; i++) ids[i] = (int32_t)(test_rng_u64(&r) % 200);
    check_every_position(tiny_gemma3(), "tiny gemma3 (window 12), 40 ids", QKV_DTYPE_F32, ids, 40);
}

/* The sequence of n tokens as qkv_ablate runs it for QKV_ABLATE_LAST (split:
 * n - 1, then the last alone), or in one call; then per key j the KL of a
 * replay of the last position hiding j against one hiding nothing. */
static void replay_kls(double *kl, qkv_model *m, const int32_t *ids, int n, int split) {
    qkv_error err = {0};
    const int V = qkv_model_get_config(m)->n_vocab;
    float *full = malloc((size_t)V * 4), *hid = malloc((size_t)V * 4);
    qkv_model_rewind(m, 0, NULL);
    CHECK((split ? qkv_model_forward(m, NULL, ids, n - 1, 0, NULL, &err) ||
                       qkv_model_forward(m, NULL, ids + n - 1, 1, 0, NULL, &err)
                 : qkv_model_forward(m, NULL, ids, n, 0, NULL, &err)) == QKV_OK,
          "prefill: %s", err.msg);
    CHECK(qkv_model_replay(m, full, n - 1, ids[n - 1], NULL, &err) == QKV_OK, "%s", err.msg);
    for (int j = 0; j < n; j++) {
        const qkv_exclusion hide = {.positions = &j, .n = 1, .layer = QKV_ALL, .head = QKV_ALL};
        const qkv_forward_opts o = {.exclude = &hide, .n_exclude = 1};
        CHECK(qkv_model_replay(m, hid, n - 1, ids[n - 1], &o, &err) == QKV_OK, "hide %d: %s", j, err.msg);
        kl[j] = qkv_kl_logits(full, hid, V);
    }
    free(full);
    free(hid);
}

TEST(model_replay_hiding_a_key_is_ablate_last) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    enum { N = 12 };
    qkv_ablate_row rows[N];
    qkv_ablate_summary sum;
    const qkv_ablate_params ap = {.scope = QKV_ABLATE_LAST, .layer = -1, .head = -1, .target = -1};
    CHECK(qkv_ablate_positions(rows, &sum, m, story, &ap, N, &err) == QKV_OK, "ablate: %s", err.msg);
    double split[N], one_call[N], worst = 0;
    replay_kls(split, m, story, N, 1);
    replay_kls(one_call, m, story, N, 0);
    for (int j = 0; j < N; j++) {
        const double want = rows[j].effect.kl;
        CHECK(split[j] == want, "key %d: replay KL %.9g, ablate --scope last %.9g (the same calls: equal bits)", j,
              split[j], want);
        const double rel = fabs(one_call[j] - want) / (want > 1e-12 ? want : 1e-12);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-4 || fabs(one_call[j] - want) <= 1e-9, "key %d: replay KL %.9g after a one-call prefill, "
              "ablate %.9g", j, one_call[j], want);
    }
    printf("     %d keys: KL equal to ablate's bit for bit; after a one-call prefill within %.2e relative\n", N, worst);
    qkv_model_close(m);
}

/* hook_pattern of layer `layer`: the last row of head 0 into w, and which layers ran. */
typedef struct {
    int layer, seen[64], n_keys;
    float *w;
} row_catch;

static qkv_status catch_row(void *user, const qkv_activation *a, qkv_error *err) {
    row_catch *c = user;
    if (a->layer < 64) c->seen[a->layer] = 1;
    if (a->layer != c->layer) return QKV_OK;
    return qkv_pattern_weights(c->w, a, 0, 0, 1, 0, c->n_keys, err);
}

TEST(model_replay_layers_stops_after_the_layer) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    CHECK(qkv_model_forward(m, NULL, story, 12, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    const int L = qkv_model_get_config(m)->n_layer, pos = 9;
    float full_row[10], part_row[10];
    row_catch full = {.layer = 5, .n_keys = pos + 1, .w = full_row}, part = {.layer = 5, .n_keys = pos + 1, .w = part_row};
    const qkv_hook hf = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = catch_row, .user = &full};
    const qkv_hook hp = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = catch_row, .user = &part};
    CHECK(qkv_model_replay(m, NULL, pos, story[pos], &(qkv_forward_opts){.hooks = &hf, .n_hooks = 1}, &err) == QKV_OK,
          "%s", err.msg);
    CHECK(qkv_model_replay_layers(m, 6, pos, story[pos], &(qkv_forward_opts){.hooks = &hp, .n_hooks = 1}, &err) ==
              QKV_OK, "%s", err.msg);
    CHECK(!memcmp(full_row, part_row, sizeof full_row), "layer 5's row differs when the replay stops there");
    for (int l = 0; l < L && l < 64; l++)
        CHECK(part.seen[l] == (l < 6) && full.seen[l], "layer %d: hook called %d (stopping after 5), %d (all)", l,
              part.seen[l], full.seen[l]);
    float s = 0;
    for (int j = 0; j <= pos; j++) s += part_row[j];
    CHECK(fabsf(s - 1) < 1e-5f, "the row sums to %g", (double)s);
    CHECK(qkv_model_replay_layers(m, 0, pos, story[pos], NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "layers"),
          "0 layers: %s", err.msg);
    CHECK(qkv_model_replay_layers(m, L + 1, pos, story[pos], NULL, &err) == QKV_ERR_INVALID, "L + 1 layers accepted");
    qkv_model_close(m);
}

static qkv_status no_replace(void *user, int layer, float *att, float *lse, const float *q, int n,
                             const qkv_kv_cache *cache, const qkv_attn_desc *desc, qkv_error *err) {
    (void)user, (void)layer, (void)att, (void)lse, (void)q, (void)n, (void)cache, (void)desc, (void)err;
    return QKV_OK;
}

TEST(model_replay_refuses_what_it_cannot_replay) {
    if (!test_require_model()) return;
    qkv_error err = {0};
    qkv_model *m = NULL;
    const qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "%s", err.msg);
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)V * 4);
    CHECK(qkv_model_replay(m, logits, 0, story[0], NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "outside"),
          "an empty sequence: %s", err.msg);
    CHECK(qkv_model_forward(m, NULL, story, 12, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    struct {
        int pos;
        int32_t token;
        qkv_forward_opts o;
        const char *says;
    } bad[] = {
        {12, 1, {0}, "outside"},
        {-1, 1, {0}, "outside"},
        {3, V, {0}, "token id"},
        {3, 1, {.start_layer = 2, .start_resid = logits}, "resumed"},
        {3, 1, {.replace = no_replace}, "replacement"},
        {3, 1, {.zero_heads = &(qkv_head_ref){.layer = 99, .head = 0}, .n_zero_heads = 1}, "zeroed head"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        CHECK(qkv_model_replay(m, logits, bad[i].pos, bad[i].token, &bad[i].o, &err) == QKV_ERR_INVALID &&
                  strstr(err.msg, bad[i].says),
              "case %zu: '%s' does not say %s", i, err.msg, bad[i].says);
    }
    /* an eviction without a shift leaves rows rotated at other offsets */
    CHECK(qkv_model_evict(m, 2, 2, 0, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_model_replay(m, logits, 5, story[7], NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "evicted"),
          "after evict without shift: %s", err.msg);
    free(logits);
    qkv_model_close(m);

    /* the sliding-window cache: the rows a position needs must be held */
    const qkv_model_params swa = {.n_ctx = 64, .n_batch = 16, .swa_cache = 1, .n_threads = 2};
    const qkv_model_params full = {.n_ctx = 64, .n_threads = 2};
    qkv_model *ms = NULL, *mf = NULL;
    CHECK(qkv_model_open(&ms, tiny_gemma3(), &swa, &err) == QKV_OK && qkv_model_open(&mf, tiny_gemma3(), &full, &err) ==
              QKV_OK, "%s", err.msg);
    if (!ms || !mf) goto done;
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = (int32_t)((i * 37 + 11) % 200);
    for (int at = 0; at < 48; at += 16) /* three calls: the sliding caches drop their first rows */
        CHECK(qkv_model_forward(ms, NULL, ids + at, 16, 0, NULL, &err) == QKV_OK &&
                  qkv_model_forward(mf, NULL, ids + at, 16, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    const int Vt = qkv_model_get_config(mf)->n_vocab;
    float *ls = malloc((size_t)Vt * 4), *lf = malloc((size_t)Vt * 4);
    CHECK(qkv_model_replay(ms, ls, 3, ids[3], NULL, &err) == QKV_ERR_INVALID && strstr(err.msg, "swa_cache"),
          "a dropped window: %s", err.msg);
    CHECK(qkv_model_replay(ms, ls, 47, ids[47], NULL, &err) == QKV_OK &&
              qkv_model_replay(mf, lf, 47, ids[47], NULL, &err) == QKV_OK, "%s", err.msg);
    /* the same keys over a shorter array: test_model_swa_cache.c's bound */
    int64_t at;
    CHECK(test_worst_row(ls, lf, 1, Vt, &at) <= 1e-5, "replay with swa_cache against the full cache: %g",
          test_worst_row(ls, lf, 1, Vt, &at));
    free(ls);
    free(lf);
done:
    qkv_model_close(ms);
    qkv_model_close(mf);
}
