/*
 * test_progress.c — the probes' progress callback (qkv/probe.h, "probe: progress")
 * on the tiny Llama-3.1 fixture: every report counts up by the tokens just
 * run and the last one is done == total, total as each probe documents it
 * (qkv_stream_steps for stream, n + n(n+1)/2 and 2n for ablate, (1 + L Hq) n
 * for the heads); reporting changes no result (bit for bit); a callback that
 * returns nonzero stops the probe with QKV_ERR_CANCELLED and an empty cache.
 * The CLI's progress line is tests/test_progress_cli.c.
 */
#include "qkv.h"
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 40 };

static qkv_model *open_tiny(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params mp = {.n_ctx = 64, .n_threads = 1};
    CHECK(qkv_model_open(&m, path, &mp, &err) == QKV_OK, "%s", err.msg);
    return m;
}

static void tokens(int32_t *ids) {
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % 500;
}

/* What a probe reported: the calls in order. */
typedef struct {
    int calls, stop_at;     /* stop_at > 0: return 1 on that call */
    int64_t last_done, total;
    int counts_up, same_total;
} log_t;

/* Field by field: the structs have padding. */
static int same_effects(const qkv_ablate_effect *a, const qkv_ablate_effect *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].kl != b[i].kl || a[i].dp_target != b[i].dp_target || a[i].top != b[i].top) return 0;
    return 1;
}

static int same_rows(const qkv_ablate_row *a, const qkv_ablate_row *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].attn_mean != b[i].attn_mean || a[i].attn_max != b[i].attn_max ||
            !same_effects(&a[i].effect, &b[i].effect, 1))
            return 0;
    return 1;
}

static int record(void *user, int64_t done, int64_t total) {
    log_t *l = user;
    if (l->calls == 0) l->total = total, l->counts_up = l->same_total = 1;
    l->counts_up &= done > l->last_done && done <= total;
    l->same_total &= total == l->total;
    l->last_done = done;
    return ++l->calls == l->stop_at;
}

TEST(progress_stream_reports_every_chunk) {
    qkv_model *m = open_tiny();
    if (!m) return;
    int32_t ids[N];
    tokens(ids);
    const qkv_stream_params cases[] = {
        {.policy = QKV_STREAM_FULL, .window = 1, .chunk = 8},
        {.policy = QKV_STREAM_WINDOW, .cache = QKV_STREAM_EVICT, .window = 16, .chunk = 8},
        {.policy = QKV_STREAM_SINKS, .cache = QKV_STREAM_SHIFT, .window = 16, .sinks = 4, .chunk = 8},
        {.policy = QKV_STREAM_RECOMPUTE, .window = 16, .chunk = 6},
    };
    /* RECOMPUTE re-runs min(t0, W - C) tokens before the chunk at t0 = 0, 6, ..., 36 */
    const int64_t want_steps[] = {N - 1, N - 1, N - 1, N - 1 + (0 + 6 + 10 * 5)};
    const int want_calls[] = {5, 5, 5, 7};
    for (int i = 0; i < 4; i++) {
        qkv_stream_params p = cases[i];
        float plain[N - 1], reported[N - 1];
        qkv_error err = {0};
        CHECK(qkv_stream_steps(&p, N) == want_steps[i], "case %d: %lld steps, want %lld", i,
              (long long)qkv_stream_steps(&p, N), (long long)want_steps[i]);
        CHECK(qkv_stream_score(plain, NULL, m, ids, N, &p, &err) == QKV_OK, "%s", err.msg);
        log_t l = {0};
        p.progress = record;
        p.progress_user = &l;
        CHECK(qkv_stream_score(reported, NULL, m, ids, N, &p, &err) == QKV_OK, "%s", err.msg);
        CHECK(l.calls == want_calls[i] && l.counts_up && l.same_total && l.total == want_steps[i] &&
                  l.last_done == l.total,
              "case %d: %d calls (want %d), last %lld of %lld (want %lld), counting up %d", i, l.calls, want_calls[i],
              (long long)l.last_done, (long long)l.total, (long long)want_steps[i], l.counts_up);
        CHECK(!memcmp(plain, reported, sizeof plain), "case %d: reporting changed the NLLs", i);
    }
    /* stopped at the second chunk */
    qkv_stream_params p = cases[1];
    log_t l = {.stop_at = 2};
    p.progress = record;
    p.progress_user = &l;
    float nll[N - 1];
    qkv_error err = {0};
    CHECK(qkv_stream_score(nll, NULL, m, ids, N, &p, &err) == QKV_ERR_CANCELLED && strstr(err.msg, "cancelled"),
          "cancelled: %s", err.msg);
    CHECK(l.calls == 2 && qkv_model_pos(m) == 0, "%d calls, cache at %d after cancelling", l.calls, qkv_model_pos(m));
    CHECK(!strcmp(qkv_status_str(QKV_ERR_CANCELLED), "cancelled"), "status name %s", qkv_status_str(QKV_ERR_CANCELLED));
    qkv_model_close(m);
}

TEST(progress_ablate_reports_every_forward) {
    qkv_model *m = open_tiny();
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int LH = c->n_layer * c->n_head;
    int32_t ids[N];
    tokens(ids);
    qkv_ablate_row plain[N], reported[N];
    qkv_ablate_summary sum;
    qkv_error err = {0};
    for (int scope = 0; scope < 2; scope++) {
        qkv_ablate_params p = {.scope = (qkv_ablate_scope)scope, .layer = -1, .head = -1, .target = -1};
        CHECK(qkv_ablate_positions(plain, &sum, m, ids, &p, N, &err) == QKV_OK, "%s", err.msg);
        log_t l = {0};
        p.progress = record;
        p.progress_user = &l;
        CHECK(qkv_ablate_positions(reported, &sum, m, ids, &p, N, &err) == QKV_OK, "%s", err.msg);
        const int64_t want = scope == QKV_ABLATE_ALL ? N + N * (N + 1) / 2 : 2 * N;
        CHECK(l.calls == N + 1 && l.counts_up && l.same_total && l.total == want && l.last_done == want,
              "scope %d: %d calls (want %d), last %lld of %lld (want %lld)", scope, l.calls, N + 1,
              (long long)l.last_done, (long long)l.total, (long long)want);
        CHECK(same_rows(plain, reported, N), "scope %d: reporting changed the rows", scope);
    }
    qkv_ablate_effect *e0 = malloc(sizeof *e0 * LH), *e1 = malloc(sizeof *e1 * LH);
    CHECK(qkv_ablate_heads(e0, &sum, m, ids, NULL, N, &err) == QKV_OK, "%s", err.msg);
    log_t l = {0};
    const qkv_ablate_params p = {.target = -1, .progress = record, .progress_user = &l};
    CHECK(qkv_ablate_heads(e1, &sum, m, ids, &p, N, &err) == QKV_OK, "%s", err.msg);
    CHECK(l.calls == 1 + LH && l.counts_up && l.same_total && l.total == (int64_t)(1 + LH) * N && l.last_done == l.total,
          "heads: %d calls (want %d), last %lld of %lld", l.calls, 1 + LH, (long long)l.last_done, (long long)l.total);
    CHECK(same_effects(e0, e1, LH), "heads: reporting changed the effects");
    CHECK(qkv_ablate_heads(e1, &sum, m, ids, &(qkv_ablate_params){.target = -1}, N, &err) == QKV_OK &&
              same_effects(e0, e1, LH),
          "p NULL is target -1 without progress");
    /* stopped: at the third forward of each */
    log_t s1 = {.stop_at = 3}, s2 = {.stop_at = 3};
    const qkv_ablate_params stop1 = {.layer = -1, .head = -1, .target = -1, .progress = record, .progress_user = &s1};
    const qkv_ablate_params stop2 = {.target = -1, .progress = record, .progress_user = &s2};
    CHECK(qkv_ablate_positions(reported, &sum, m, ids, &stop1, N, &err) == QKV_ERR_CANCELLED && s1.calls == 3 &&
              qkv_model_pos(m) == 0,
          "positions cancelled after %d calls, cache at %d: %s", s1.calls, qkv_model_pos(m), err.msg);
    CHECK(qkv_ablate_heads(e1, &sum, m, ids, &stop2, N, &err) == QKV_ERR_CANCELLED && s2.calls == 3 &&
              qkv_model_pos(m) == 0,
          "heads cancelled after %d calls, cache at %d: %s", s2.calls, qkv_model_pos(m), err.msg);
    free(e0);
    free(e1);
    qkv_model_close(m);
}
