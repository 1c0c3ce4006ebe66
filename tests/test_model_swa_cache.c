/*
 * test_model_swa_cache.c — the sliding-window KV cache (qkv_model_params
 * .swa_cache, include/qkv.h) against the full cache, the same model opened
 * twice and fed the same calls:
 *
 *   tiny gemma2 (window 8 on layer 0 of 2) and gemma3 (window 12 on layers
 *   0-4 of 6), tests/fixtures/families/: a prompt of 120 random ids, ten
 *   times the window, in calls of 16 and 11 tokens (n_batch 16: a sliding
 *   cache of W - 1 + 16 rows drops rows at almost every call), then 24
 *   greedy decode steps; every logit of every call;
 *   the real Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf; SKIPPED when
 *   absent): the 1,220 GPL-3 ids of tests/fixtures/gemma3 in calls of 512,
 *   then 24 greedy decode steps; the final hidden state of every position
 *   (ln_final.hook_normalized), the logits of each call's last position
 *   and of each step, and the greedy ids.
 *
 * Tolerance, every logit (and hidden value) of a row: |swa - full| <=
 * REL_TOL x max |full| of the row, REL_TOL = 1e-5. Not bit-exact: a sliding
 * layer attends the same keys, at the same rotations and with the same
 * weights, but over a shorter array: the flash kernel's key tiles start at
 * other keys and the decode kernel splits the keys across threads at other
 * points, so the online softmax sums in another order (float32 rounding,
 * ~1e-7 relative per sum, carried through the layers; measured: 7.5e-7 on
 * the tiny models, 3.5e-7 on the 270M's hidden states and 1.1e-6 on its
 * logits). A cache that kept one key too few (W - 2 before a call) moves
 * the tiny models' logits by 0.26 and 0.37 of the largest and the 270M's
 * hidden states by 6.5e-5 (its logits by only 9e-6: hence the hidden
 * states). Greedy ids must be equal.
 *
 * Also: the bytes (qkv_model_kv_bytes equal to qkv_cost's prediction for
 * the gemma-3-270m preset at 32K, the same dtype and batch), rewind and
 * evict (what is kept is exact, what would need a dropped key is refused in
 * one line and changes nothing), exclusions and hook_pattern by position,
 * and n_batch's rules.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-5

static const char *family_path(const char *name) {
    static char path[2][700];
    static int slot;
    slot ^= 1;
    snprintf(path[slot], sizeof path[slot], "%s/families/%s/model.gguf", test_fixture_dir(), name);
    return path[slot];
}

static qkv_model *open_model(const char *path, int n_ctx, int n_batch, int swa, qkv_dtype dtype) {
    const qkv_model_params p = {.n_ctx = n_ctx, .n_batch = n_batch, .swa_cache = swa, .kv_dtype = dtype,
                                .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, path, &p, &err) == QKV_OK, "open %s (swa_cache %d): %s", path, swa, err.msg);
    return m;
}

/* CHECKs rows x len of swa against full within REL_TOL; returns the worst. */
static double check_rows(const char *what, int pos, const float *swa, const float *full, int64_t rows, int64_t len) {
    int64_t at;
    const double e = test_worst_row(swa, full, rows, len, &at);
    CHECK(e <= REL_TOL, "%s at position %d: row %lld: max |swa - full| / max |full| = %.3g > %g", what, pos,
          (long long)at, e, REL_TOL);
    return e;
}

/* Both models run the same call: n tokens, every position's logits into
 * ls and lf ([n, V] each); the worst row's error, or INFINITY on a failure. */
static double both_forward(qkv_model *swa, qkv_model *full, float *ls, float *lf, const int32_t *ids, int n,
                           const qkv_forward_opts *opts, const char *what) {
    qkv_error err = {0};
    const int V = qkv_model_get_config(full)->n_vocab, pos = qkv_model_pos(full);
    qkv_status s1 = qkv_model_forward(swa, ls, ids, n, 1, opts, &err);
    CHECK(s1 == QKV_OK, "%s: swa forward of %d at %d: %s", what, n, pos, err.msg);
    qkv_status s2 = qkv_model_forward(full, lf, ids, n, 1, opts, &err);
    CHECK(s2 == QKV_OK, "%s: full forward of %d at %d: %s", what, n, pos, err.msg);
    CHECK(qkv_model_pos(swa) == qkv_model_pos(full), "%s: swa at %d, full at %d", what, qkv_model_pos(swa),
          qkv_model_pos(full));
    return s1 || s2 ? INFINITY : check_rows(what, pos, ls, lf, n, V);
}

/* ------------------------------------------------- tiny gemma2 and gemma3 */

enum { TINY_CTX = 192, TINY_BATCH = 16, TINY_PROMPT = 120, TINY_GEN = 24 };

static void random_ids(int32_t *ids, int n, int V, uint64_t seed) {
    test_rng rng = {seed};
    for (int i = 0; i < n; i++) ids[i] = test_rng_int(&rng, 0, V - 1);
}

static void check_family(const char *name, int window, int n_sliding) {
    const char *path = family_path(name);
    qkv_model *swa = open_model(path, TINY_CTX, TINY_BATCH, 1, QKV_DTYPE_F32);
    qkv_model *full = open_model(path, TINY_CTX, TINY_BATCH, 0, QKV_DTYPE_F32);
    if (!swa || !full) goto done;
    const qkv_model_config *c = qkv_model_get_config(full);
    const int V = c->n_vocab, L = c->n_layer;
    /* the cache each layer got: W - 1 + n_batch rows when sliding */
    int sliding = 0;
    for (int l = 0; l < L; l++) {
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, c, l);
        const int want = a.window ? a.window - 1 + TINY_BATCH : TINY_CTX;
        sliding += a.window > 0;
        CHECK(a.window == 0 || a.window == window, "%s: layer %d window %d, want %d", name, l, a.window, window);
        CHECK(qkv_model_kv_rows(swa, l) == want && qkv_model_kv_rows(full, l) == TINY_CTX,
              "%s: layer %d holds %d rows (full: %d), want %d (%d)", name, l, qkv_model_kv_rows(swa, l),
              qkv_model_kv_rows(full, l), want, TINY_CTX);
    }
    CHECK(sliding == n_sliding, "%s: %d sliding layers, want %d", name, sliding, n_sliding);
    CHECK(qkv_model_n_batch(swa) == TINY_BATCH, "%s: n_batch %d", name, qkv_model_n_batch(swa));
    int32_t ids[TINY_PROMPT];
    random_ids(ids, TINY_PROMPT, V, 11);
    float *ls = malloc((size_t)TINY_BATCH * V * sizeof(float)), *lf = malloc((size_t)TINY_BATCH * V * sizeof(float));
    double worst = 0;
    int n = 0; /* tokens of the last call: its last row is the next token's logits */
    /* calls of 16 and 11 tokens: the drops fall at other rows each time */
    for (int p = 0, i = 0; p < TINY_PROMPT && !test_failures(); i++, p += n) {
        n = i % 2 ? 11 : 16;
        if (n > TINY_PROMPT - p) n = TINY_PROMPT - p;
        worst = fmax(worst, both_forward(swa, full, ls, lf, ids + p, n, NULL, name));
    }
    /* greedy decode, one token per call, past more drops */
    int same = 0;
    for (int t = 0; t < TINY_GEN && !test_failures(); t++, n = 1) {
        const int32_t tok = test_argmax(lf + (size_t)(n - 1) * V, V), got = test_argmax(ls + (size_t)(n - 1) * V, V);
        CHECK(got == tok, "%s: greedy token %d: swa %d, full %d", name, t, got, tok);
        same += got == tok;
        worst = fmax(worst, both_forward(swa, full, ls, lf, &tok, 1, NULL, name));
    }
    printf("  %-7s %d positions (window %d, n_batch %d): worst logits row %.2e; greedy %d of %d equal\n", name,
           qkv_model_pos(full), window, TINY_BATCH, worst, same, TINY_GEN);
    free(ls);
    free(lf);
done:
    qkv_model_close(swa);
    qkv_model_close(full);
}

TEST(model_swa_cache_gemma2_equals_full_cache) { check_family("gemma2", 8, 1); }
TEST(model_swa_cache_gemma3_equals_full_cache) { check_family("gemma3", 12, 5); }

/* ------------------------------------------------------ real Gemma 3 270M */

/* ln_final.hook_normalized's rows [n, E] into rows[pos0 .. pos0 + n) of an [N, E] array. */
typedef struct {
    float *rows;
    int E, N;
} hidden_capture;

static qkv_status capture_hidden(void *user, const qkv_activation *a, qkv_error *err) {
    hidden_capture *h = user;
    if (a->shape[1] != h->E || a->pos0 + a->shape[0] > h->N) {
        snprintf(err->msg, sizeof err->msg, "ln_final: [%lld, %lld] at %d", (long long)a->shape[0],
                 (long long)a->shape[1], a->pos0);
        return QKV_ERR_INVALID;
    }
    memcpy(h->rows + (size_t)a->pos0 * h->E, a->data, (size_t)a->shape[0] * h->E * sizeof(float));
    return QKV_OK;
}

enum { G3_CTX = 2048, G3_BATCH = 512, G3_GEN = 24 };

TEST(model_swa_cache_gemma3_270m_gpl3_equals_full_cache) {
    if (!test_require_gemma3()) return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/gemma3", test_fixture_dir());
    int64_t n_ids = 0;
    int32_t *ids = test_load_npy(dir, "gpl3.ids.npy", "", &n_ids); /* [1220] GPL-3, Gemma 3's tokenizer */
    qkv_model *swa = open_model(test_gemma3_path(), G3_CTX, G3_BATCH, 1, QKV_DTYPE_F32);
    qkv_model *full = open_model(test_gemma3_path(), G3_CTX, G3_BATCH, 0, QKV_DTYPE_F32);
    float *ls = NULL, *lf = NULL;
    hidden_capture hs = {0}, hf = {0};
    if (!ids || !swa || !full) goto done;
    CHECK(n_ids >= 1200, "gpl3.ids.npy has %lld ids", (long long)n_ids);
    const qkv_model_config *c = qkv_model_get_config(full);
    const int V = c->n_vocab, E = c->n_embd, N = (int)n_ids + G3_GEN;
    CHECK(c->window == 512 && qkv_model_kv_rows(swa, 0) == 1023 && qkv_model_kv_rows(swa, 5) == G3_CTX,
          "window %d; layer 0 holds %d rows, layer 5 %d", c->window, qkv_model_kv_rows(swa, 0), qkv_model_kv_rows(swa, 5));
    ls = malloc((size_t)V * sizeof(float));
    lf = malloc((size_t)V * sizeof(float));
    hs = (hidden_capture){.rows = calloc((size_t)N * E, sizeof(float)), .E = E, .N = N};
    hf = (hidden_capture){.rows = calloc((size_t)N * E, sizeof(float)), .E = E, .N = N};
    const qkv_hook hook_s = {.point = QKV_HOOK_LN_FINAL, .fn = capture_hidden, .user = &hs};
    const qkv_hook hook_f = {.point = QKV_HOOK_LN_FINAL, .fn = capture_hidden, .user = &hf};
    const qkv_forward_opts os = {.hooks = &hook_s, .n_hooks = 1}, of = {.hooks = &hook_f, .n_hooks = 1};
    qkv_error err = {0};
    double worst_logit = 0;
    int same = 0;
    for (int p = 0; p < N && !test_failures();) {
        const int n = p < n_ids ? (n_ids - p < G3_BATCH ? (int)n_ids - p : G3_BATCH) : 1;
        int32_t next = 0;
        if (p >= n_ids) { /* a decode step: both continue with the full cache's greedy token */
            next = test_argmax(lf, V);
            CHECK(test_argmax(ls, V) == next, "greedy token %d: swa %d, full %d", p - (int)n_ids, test_argmax(ls, V), next);
            same += test_argmax(ls, V) == next;
        }
        const int32_t *in = p < n_ids ? ids + p : &next;
        CHECK(qkv_model_forward(swa, ls, in, n, 0, &os, &err) == QKV_OK, "swa forward at %d: %s", p, err.msg);
        CHECK(qkv_model_forward(full, lf, in, n, 0, &of, &err) == QKV_OK, "full forward at %d: %s", p, err.msg);
        if (test_failures()) break;
        worst_logit = fmax(worst_logit, check_rows("logits of the call's last position", p + n - 1, ls, lf, 1, V));
        p += n;
    }
    if (!test_failures()) {
        /* every position's final hidden state (the rows the logits come from) */
        const double worst_hidden = check_rows("ln_final.hook_normalized", 0, hs.rows, hf.rows, N, E);
        printf("  gemma-3-270m: %lld GPL-3 ids in calls of %d + %d steps: worst hidden row %.2e, worst logits row "
               "%.2e; greedy %d of %d equal; KV %.1f MiB against %.1f MiB\n",
               (long long)n_ids, G3_BATCH, G3_GEN, worst_hidden, worst_logit, same, G3_GEN,
               qkv_model_kv_bytes(swa) / 1048576.0, qkv_model_kv_bytes(full) / 1048576.0);
    }
done:
    free(ids);
    free(ls);
    free(lf);
    free(hs.rows);
    free(hf.rows);
    qkv_model_close(swa);
    qkv_model_close(full);
}

/* ------------------------------------------------------------------ bytes */

/* qkv_model_kv_bytes at 32K equals qkv_cost's figure for the model's
 * config, and for its preset: kv_cache_bytes_swa with swa_cache (at the default n_batch, the
 * cost model's default chunk, and at 256 with chunk 256), kv_cache_bytes
 * without, for 2- and 4-byte KV. */
TEST(model_swa_cache_bytes_match_the_cost_model) {
    if (!test_require_gemma3()) return;
    enum { CTX = 32768 };
    qkv_model_config cc;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&cc, NULL, "gemma-3-270m", &err) == QKV_OK, "%s", err.msg);
    const struct {
        qkv_dtype dtype;
        size_t elem;
        int n_batch, swa;
    } cases[] = {{QKV_DTYPE_F16, 2, 0, 1}, {QKV_DTYPE_BF16, 2, 0, 1}, {QKV_DTYPE_F32, 4, 0, 1},
                 {QKV_DTYPE_F16, 2, 256, 1}, {QKV_DTYPE_F16, 2, 512, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qkv_model *m = open_model(test_gemma3_path(), CTX, cases[i].n_batch, cases[i].swa, cases[i].dtype);
        if (!m) continue;
        const qkv_model_config *c = qkv_model_get_config(m);
        CHECK(c->n_layer == cc.n_layer && c->n_kv_head == cc.n_kv_head && c->head_dim == cc.head_dim &&
                  c->window == cc.window && c->swa_period == cc.swa_period,
              "the model (L %d, Hkv %d, D %d, window %d, period %d) is not the preset", c->n_layer, c->n_kv_head,
              c->head_dim, c->window, c->swa_period);
        qkv_cost x, y; /* the file's own config, and the preset's */
        CHECK(qkv_cost_eval(&x, c, cases[i].n_batch, CTX, cases[i].elem, &err) == QKV_OK &&
                  qkv_cost_eval(&y, &cc, cases[i].n_batch, CTX, cases[i].elem, &err) == QKV_OK,
              "%s", err.msg);
        CHECK(x.kv_cache_bytes_swa == y.kv_cache_bytes_swa && x.kv_cache_bytes == y.kv_cache_bytes,
              "the file's config and the preset price differently");
        const double want = cases[i].swa ? x.kv_cache_bytes_swa : x.kv_cache_bytes, got = (double)qkv_model_kv_bytes(m);
        const char *what = cases[i].swa ? "swa_cache" : "full cache", *dt = qkv_dtype_name(cases[i].dtype);
        CHECK(got == want, "%s, %s KV, n_batch %d: qkv_model_kv_bytes %.0f, qkv_cost %.0f", what, dt,
              qkv_model_n_batch(m), got, want);
        printf("  gemma-3-270m at %d, %s, %s KV, n_batch %d: %.0f bytes (%.1f MiB), qkv_cost %.0f\n", CTX, what, dt,
               qkv_model_n_batch(m), got, got / 1048576, want);
        qkv_model_close(m);
    }
}

/* ----------------------------------------------------- sequence operations */

/* The largest qkv_attn_view_key0 of layer 0 (sliding) in a call's
 * hook_pattern: the swa model's first held position (the full one's is 0). */
static qkv_status record_key0(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    int *k0 = user;
    if (qkv_attn_view_key0(a->attn) > *k0) *k0 = qkv_attn_view_key0(a->attn);
    return QKV_OK;
}

/* A tiny gemma3 pair and where its sliding layers' rows start. */
typedef struct {
    qkv_model *swa, *full;
    int32_t ids[TINY_CTX];
    float *ls, *lf;  /* [TINY_BATCH, V] each */
    int key0;        /* the swa model's first held position in layer 0, as of the last call */
    qkv_hook hook;
    qkv_forward_opts opts;
} seq_pair;

/* Both models run n tokens in one call, compared; key0 updated. */
static void seq_call(seq_pair *s, const int32_t *ids, int n, const char *what) {
    s->key0 = 0;
    both_forward(s->swa, s->full, s->ls, s->lf, ids, n, &s->opts, what);
}

/* n more tokens, one call each (ids from s->ids[at]). */
static void seq_steps(seq_pair *s, int at, int n, const char *what) {
    for (int i = 0; i < n && !test_failures(); i++) seq_call(s, s->ids + at + i, 1, what);
}

/* Both tiny gemma3 models after the same 60-token prompt in calls of 16,
 * 16, 16, 12: each sliding layer (window 12, 27 rows) then holds positions
 * [37, 60), the global one all 60. */
enum { SEQ_PROMPT = 60, SEQ_KEY0 = 37 };

static int seq_open(seq_pair *s) {
    memset(s, 0, sizeof *s);
    s->swa = open_model(family_path("gemma3"), TINY_CTX, TINY_BATCH, 1, QKV_DTYPE_F32);
    s->full = open_model(family_path("gemma3"), TINY_CTX, TINY_BATCH, 0, QKV_DTYPE_F32);
    s->hook = (qkv_hook){.point = QKV_HOOK_PATTERN, .layer = 0, .fn = record_key0, .user = &s->key0};
    s->opts = (qkv_forward_opts){.hooks = &s->hook, .n_hooks = 1};
    if (!s->swa || !s->full) return 0;
    const int V = qkv_model_get_config(s->full)->n_vocab;
    s->ls = malloc((size_t)TINY_BATCH * V * sizeof(float));
    s->lf = malloc((size_t)TINY_BATCH * V * sizeof(float));
    random_ids(s->ids, TINY_CTX, V, 5);
    for (int p = 0; p < SEQ_PROMPT; p += TINY_BATCH)
        seq_call(s, s->ids + p, SEQ_PROMPT - p < TINY_BATCH ? SEQ_PROMPT - p : TINY_BATCH, "prompt");
    CHECK(s->key0 == SEQ_KEY0, "after the prompt, layer 0 holds positions from %d on, want %d", s->key0, SEQ_KEY0);
    return !test_failures();
}

static void seq_close(seq_pair *s) {
    free(s->ls);
    free(s->lf);
    qkv_model_close(s->swa);
    qkv_model_close(s->full);
}

/* A refusal: st is QKV_ERR_INVALID with one line containing needle, and the
 * model still where it was. */
static void check_refused(qkv_status st, const qkv_error *err, const char *needle, qkv_model *m, int pos,
                          const char *what) {
    CHECK(st == QKV_ERR_INVALID && strstr(err->msg, needle) && !strchr(err->msg, '\n'),
          "%s: status %d, message '%s' (want QKV_ERR_INVALID, one line with '%s')", what, (int)st, err->msg, needle);
    CHECK(qkv_model_pos(m) == pos, "%s: at %d after the refusal, was at %d", what, qkv_model_pos(m), pos);
}

/* Rewinding keeps what it can: to 0 always, to p > 0 when every sliding
 * layer still holds the W - 1 positions before p (from 37 + 11 = 48 on
 * here), and the continuation then equals the full cache's. */
TEST(model_swa_cache_rewind) {
    seq_pair s;
    qkv_error err = {0};
    if (!seq_open(&s)) goto done;
    check_refused(qkv_model_rewind(s.swa, SEQ_KEY0 + 10, &err), &err, "rewind to 0 or to 48 or later", s.swa,
                  SEQ_PROMPT, "rewind to 47");
    seq_steps(&s, SEQ_PROMPT, 2, "after a refused rewind");
    CHECK(qkv_model_rewind(s.swa, SEQ_KEY0 + 11, &err) == QKV_OK &&
              qkv_model_rewind(s.full, SEQ_KEY0 + 11, &err) == QKV_OK,
          "rewind to 48: %s", err.msg);
    seq_steps(&s, 100, 20, "after a rewind to 48");
    CHECK(qkv_model_rewind(s.swa, 0, &err) == QKV_OK && qkv_model_rewind(s.full, 0, &err) == QKV_OK,
          "rewind to 0: %s", err.msg);
    CHECK(qkv_model_pos(s.swa) == 0 && qkv_model_rope_pos(s.swa) == 0, "after a rewind to 0: at %d",
          qkv_model_pos(s.swa));
    for (int p = 0; p < 40 && !test_failures(); p += 8) seq_call(&s, s.ids + p, 8, "after a rewind to 0");
    /* a fresh sequence's first 27 positions: nothing dropped, any rewind */
    CHECK(qkv_model_rewind(s.swa, 0, &err) == QKV_OK && qkv_model_rewind(s.full, 0, &err) == QKV_OK, "%s", err.msg);
    seq_call(&s, s.ids, 16, "fresh");
    CHECK(qkv_model_rewind(s.swa, 3, &err) == QKV_OK && qkv_model_rewind(s.full, 3, &err) == QKV_OK,
          "rewind to 3: %s", err.msg);
    seq_steps(&s, 50, 4, "after a rewind to 3");
done:
    seq_close(&s);
}

/* Evicting: a range before the sliding layers' rows, across their first
 * row and inside them, each with and without re-rotation, continues as the
 * full cache does; a range that would leave a sliding layer fewer than
 * W - 1 rows is refused and changes nothing. */
TEST(model_swa_cache_evict) {
    seq_pair s;
    qkv_error err = {0};
    if (!seq_open(&s)) goto done;
    /* [30, 50) would leave [50, 60) of [37, 60): 10 rows, the window needs 11 */
    check_refused(qkv_model_evict(s.swa, 30, 20, 0, &err), &err, "would keep 10, fewer than the 11", s.swa, SEQ_PROMPT,
                  "evict [30, 50)");
    CHECK(qkv_model_rope_pos(s.swa) == SEQ_PROMPT, "RoPE position %d after a refused eviction",
          qkv_model_rope_pos(s.swa));
    seq_steps(&s, SEQ_PROMPT, 2, "after a refused eviction");
    /* each range relative to the first held row k0 */
    static const struct {
        int from, n, shift; /* from: relative to k0 */
        const char *what;
    } ev[] = {
        {-8, 4, 1, "a range before the sliding rows, re-rotated"},
        {-5, 3, 0, "a range before the sliding rows, positions kept"},
        {-3, 6, 1, "a range across the sliding rows' first, re-rotated"},
        {-2, 4, 0, "a range across the sliding rows' first, positions kept"},
        {4, 3, 1, "a range inside the sliding rows, re-rotated"},
        {2, 2, 0, "a range inside the sliding rows, positions kept"},
    };
    int at = 70;
    for (size_t i = 0; i < sizeof ev / sizeof ev[0] && !test_failures(); i++) {
        /* 18 to 24 rows held: the step after the eviction drops none */
        while ((qkv_model_pos(s.swa) - s.key0 < 18 || qkv_model_pos(s.swa) - s.key0 > 24) && !test_failures())
            seq_steps(&s, at++, 1, "between evictions");
        const int from = s.key0 + ev[i].from;
        CHECK(qkv_model_evict(s.swa, from, ev[i].n, ev[i].shift, &err) == QKV_OK, "swa: evict %s: %s", ev[i].what,
              err.msg);
        CHECK(qkv_model_evict(s.full, from, ev[i].n, ev[i].shift, &err) == QKV_OK, "full: evict %s: %s", ev[i].what,
              err.msg);
        CHECK(qkv_model_pos(s.swa) == qkv_model_pos(s.full) && qkv_model_rope_pos(s.swa) == qkv_model_rope_pos(s.full),
              "evict %s: swa at %d (RoPE %d), full at %d (%d)", ev[i].what, qkv_model_pos(s.swa),
              qkv_model_rope_pos(s.swa), qkv_model_pos(s.full), qkv_model_rope_pos(s.full));
        const int want = ev[i].from < 0 ? s.key0 - (-ev[i].from < ev[i].n ? -ev[i].from : ev[i].n) : s.key0;
        seq_steps(&s, at, 1, ev[i].what);
        at++;
        CHECK(s.key0 == want, "evict %s: layer 0 holds positions from %d on, want %d", ev[i].what, s.key0, want);
        seq_steps(&s, at, 2, ev[i].what);
        at += 2;
    }
done:
    seq_close(&s);
}

/* The cached keys rows [0, n) of the hooked layer, read in its hook_pattern call. */
typedef struct {
    int n;
    float *k; /* [Hkv, n, D] */
} key_capture;

static qkv_status read_keys(void *user, const qkv_activation *a, qkv_error *err) {
    const key_capture *c = user;
    return qkv_kv_cache_read(c->k, NULL, qkv_attn_view_cache(a->attn), 0, c->n, err);
}

/* An eviction with shift re-rotates each layer's kept keys at that layer's
 * RoPE base: gemma3's sliding layer 0 at 10000, not the global layers' 1e6.
 * In layer 0 a key depends only on its token and position, so after
 * evicting [2, 6) of 20 tokens the 16 cached keys equal those of a fresh
 * sequence of the 16 kept tokens (the composed rotation rounds: 1e-5 of the
 * largest; at the global base they are 0.3 of it off). */
TEST(model_evict_shift_rerotates_at_each_layers_base) {
    qkv_model *m = open_model(family_path("gemma3"), TINY_CTX, 0, 0, QKV_DTYPE_F32);
    qkv_model *fresh = open_model(family_path("gemma3"), TINY_CTX, 0, 0, QKV_DTYPE_F32);
    if (!m || !fresh) goto done;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab, KD = c->n_kv_head * c->head_dim;
    int32_t ids[21], kept[16];
    random_ids(ids, 21, V, 9);
    for (int i = 0; i < 16; i++) kept[i] = i < 2 ? ids[i] : ids[i + 4];
    float *logits = malloc((size_t)16 * V * sizeof(float));
    float *got = malloc((size_t)16 * KD * sizeof(float)), *want = malloc((size_t)16 * KD * sizeof(float));
    qkv_error err = {0};
    key_capture kg = {.n = 16, .k = got}, kw = {.n = 16, .k = want};
    const qkv_hook hg = {.point = QKV_HOOK_PATTERN, .layer = 0, .fn = read_keys, .user = &kg};
    const qkv_hook hw = {.point = QKV_HOOK_PATTERN, .layer = 0, .fn = read_keys, .user = &kw};
    const qkv_forward_opts og = {.hooks = &hg, .n_hooks = 1}, ow = {.hooks = &hw, .n_hooks = 1};
    CHECK(qkv_model_forward(m, logits, ids, 20, 0, NULL, &err) == QKV_OK && qkv_model_evict(m, 2, 4, 1, &err) == QKV_OK &&
              qkv_model_forward(m, logits, ids + 20, 1, 0, &og, &err) == QKV_OK &&
              qkv_model_forward(fresh, logits, kept, 16, 0, &ow, &err) == QKV_OK,
          "%s", err.msg);
    int64_t at;
    const double e = test_failures() ? 0 : test_worst_row(got, want, 1, (int64_t)16 * KD, &at);
    CHECK(e <= REL_TOL, "layer 0: keys after evict-and-shift against fresh keys: %.3g of the largest > %g", e, REL_TOL);
    free(logits);
    free(got);
    free(want);
done:
    qkv_model_close(m);
    qkv_model_close(fresh);
}

/* ------------------------------------------------ exclusions, hook_pattern */

/* Every layer's hook_pattern weights [Hq, n, pos0 + n], and its key0. */
typedef struct {
    float *w; /* [L, Hq, n, N] */
    int Hq, n, N;
    int key0[8];
} pattern_capture;

static qkv_status capture_pattern(void *user, const qkv_activation *a, qkv_error *err) {
    pattern_capture *c = user;
    if (a->shape[1] != c->n || a->shape[2] != c->N) {
        snprintf(err->msg, sizeof err->msg, "hook_pattern [%lld, %lld, %lld]", (long long)a->shape[0],
                 (long long)a->shape[1], (long long)a->shape[2]);
        return QKV_ERR_INVALID;
    }
    c->key0[a->layer] = qkv_attn_view_key0(a->attn);
    for (int h = 0; h < c->Hq; h++) {
        qkv_status st = qkv_pattern_weights(c->w + ((size_t)a->layer * c->Hq + h) * c->n * c->N, a, h, 0, c->n, 0,
                                            c->N, err);
        if (st) return st;
    }
    /* a range that starts before the held rows: its first keys are 0, the rest as in the whole row */
    float part[16 * 20];
    qkv_status st = qkv_pattern_weights(part, a, 1, 2, 3, c->N - 30, 20, err);
    for (int r = 0; r < 3 && !st; r++)
        for (int j = 0; j < 20; j++) {
            const float whole = c->w[(((size_t)a->layer * c->Hq + 1) * c->n + 2 + r) * c->N + c->N - 30 + j];
            if (part[r * 20 + j] != whole) {
                snprintf(err->msg, sizeof err->msg, "layer %d: weight of key %d in a part %g, in the whole row %g",
                         a->layer, c->N - 30 + j, part[r * 20 + j], whole);
                return QKV_ERR_INVALID;
            }
        }
    return st;
}

/* A call at 60 of 16 tokens with exclusions by position (one before the
 * sliding layers' rows, some in their window, one of the call itself;
 * head-scoped ones in a sliding and in the global layer) and hook_pattern
 * on every layer: logits and every weight equal the full cache's; a
 * sliding layer reports its first held position (49: the call dropped 12
 * rows) and weight 0 before it, exactly, as the full cache's mask gives. */
TEST(model_swa_cache_exclusions_and_hook_pattern) {
    seq_pair s;
    pattern_capture ps = {0}, pf = {0};
    if (!seq_open(&s)) goto done;
    const qkv_model_config *c = qkv_model_get_config(s.full);
    const int n = 16, N = SEQ_PROMPT + n, L = c->n_layer, Hq = c->n_head, key0 = SEQ_PROMPT + n - 27;
    ps = (pattern_capture){.w = calloc((size_t)L * Hq * n * N, sizeof(float)), .Hq = Hq, .n = n, .N = N};
    pf = (pattern_capture){.w = calloc((size_t)L * Hq * n * N, sizeof(float)), .Hq = Hq, .n = n, .N = N};
    const int all[] = {2, 50, 55, 70}, head1[] = {52, 66}, global0[] = {1, 3, 64};
    const qkv_exclusion ex[] = {{.positions = all, .n = 4, .layer = QKV_ALL, .head = QKV_ALL},
                                {.positions = head1, .n = 2, .layer = 1, .head = 1},
                                {.positions = global0, .n = 3, .layer = 5, .head = 0}};
    const qkv_hook hs = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = capture_pattern, .user = &ps};
    const qkv_hook hf = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = capture_pattern, .user = &pf};
    const qkv_forward_opts os = {.exclude = ex, .n_exclude = 3, .hooks = &hs, .n_hooks = 1},
                           of = {.exclude = ex, .n_exclude = 3, .hooks = &hf, .n_hooks = 1};
    const int V = c->n_vocab;
    qkv_error err = {0};
    CHECK(qkv_model_forward(s.swa, s.ls, s.ids + SEQ_PROMPT, n, 1, &os, &err) == QKV_OK, "swa: %s", err.msg);
    CHECK(qkv_model_forward(s.full, s.lf, s.ids + SEQ_PROMPT, n, 1, &of, &err) == QKV_OK, "full: %s", err.msg);
    if (test_failures()) goto done;
    check_rows("logits with exclusions", SEQ_PROMPT, s.ls, s.lf, n, V);
    check_rows("hook_pattern weights", SEQ_PROMPT, ps.w, pf.w, (int64_t)L * Hq * n, N);
    for (int l = 0; l < L; l++) {
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, c, l);
        CHECK(ps.key0[l] == (a.window ? key0 : 0) && pf.key0[l] == 0, "layer %d: key0 %d (full %d), want %d", l,
              ps.key0[l], pf.key0[l], a.window ? key0 : 0);
        for (int64_t r = 0; r < (int64_t)Hq * n; r++)
            for (int j = 0; j < ps.key0[l]; j++) {
                const size_t i = ((size_t)l * Hq * n + r) * N + j;
                if (ps.w[i] != 0 || pf.w[i] != 0) {
                    CHECK(0, "layer %d row %lld key %d before the held rows: weight %g (full %g), want 0", l,
                          (long long)r, j, ps.w[i], pf.w[i]);
                    l = L;
                    break;
                }
            }
    }
done:
    free(ps.w);
    free(pf.w);
    seq_close(&s);
}

/* ------------------------------------------------------------- n_batch */

static qkv_status stop_call(void *user, const qkv_activation *a, qkv_error *err) {
    (void)user;
    snprintf(err->msg, sizeof err->msg, "stopped in layer %d", a->layer);
    return QKV_ERR_INVALID;
}

/* n_batch: 0 is n_ctx, or QKV_MODEL_DEFAULT_BATCH with swa_cache (on a
 * model with sliding layers), above n_ctx it is n_ctx, negative is refused;
 * a longer call is refused in one line and leaves the model where it was;
 * swa_cache on a model without sliding layers changes nothing; a call that
 * fails after its sliding layers dropped rows leaves a model that
 * continues as the full one. */
TEST(model_swa_cache_n_batch_rules) {
    const char *g3 = family_path("gemma3");
    const struct {
        int n_ctx, n_batch, swa, want_batch, want_sliding_rows;
    } cases[] = {{192, 0, 1, 192, 192}, {192, 0, 0, 192, 192}, {192, 1000, 1, 192, 192},
                 {4096, 0, 1, QKV_MODEL_DEFAULT_BATCH, 11 + QKV_MODEL_DEFAULT_BATCH}, {4096, 0, 0, 4096, 4096},
                 {192, 100, 1, 100, 111}, {192, 181, 1, 181, 192}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qkv_model *m = open_model(g3, cases[i].n_ctx, cases[i].n_batch, cases[i].swa, QKV_DTYPE_F32);
        if (!m) continue;
        CHECK(qkv_model_n_batch(m) == cases[i].want_batch && qkv_model_kv_rows(m, 0) == cases[i].want_sliding_rows &&
                  qkv_model_kv_rows(m, 5) == cases[i].n_ctx && qkv_model_kv_rows(m, 6) == -1 &&
                  qkv_model_kv_rows(m, -1) == -1,
              "n_ctx %d n_batch %d swa %d: n_batch %d, rows %d / %d, want %d, %d / %d", cases[i].n_ctx,
              cases[i].n_batch, cases[i].swa, qkv_model_n_batch(m), qkv_model_kv_rows(m, 0), qkv_model_kv_rows(m, 5),
              cases[i].want_batch, cases[i].want_sliding_rows, cases[i].n_ctx);
        qkv_model_close(m);
    }
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params bad = {.n_ctx = 64, .n_batch = -1};
    CHECK(qkv_model_open(&m, g3, &bad, &err) == QKV_ERR_INVALID && !m && strstr(err.msg, "n_batch"),
          "n_batch -1: %s", err.msg);
    /* no sliding layer: n_batch n_ctx, every layer n_ctx rows, the bytes of a full cache */
    m = open_model(family_path("qwen2"), 64, 0, 1, QKV_DTYPE_F32);
    if (m) {
        const qkv_model_config *c = qkv_model_get_config(m);
        CHECK(qkv_model_n_batch(m) == 64, "qwen2 with swa_cache: n_batch %d, want n_ctx", qkv_model_n_batch(m));
        for (int l = 0; l < c->n_layer; l++) CHECK(qkv_model_kv_rows(m, l) == 64, "qwen2 layer %d: %d rows", l, qkv_model_kv_rows(m, l));
        CHECK(qkv_model_kv_bytes(m) == (size_t)c->n_layer * 2 * 64 * c->n_kv_head * c->head_dim * 4,
              "qwen2: %zu bytes", qkv_model_kv_bytes(m));
        qkv_model_close(m);
    }
    seq_pair s;
    if (!seq_open(&s)) goto done;
    check_refused(qkv_model_forward(s.swa, s.ls, s.ids, TINY_BATCH + 1, 0, NULL, &err), &err,
                  "17 tokens in one call exceed the model's n_batch of 16", s.swa, SEQ_PROMPT, "a call of 17");
    /* a hook that stops the call in layer 4, after layers 0-3 dropped rows */
    const qkv_hook stop = {.point = QKV_HOOK_RESID_POST, .layer = 4, .fn = stop_call};
    const qkv_forward_opts o = {.hooks = &stop, .n_hooks = 1};
    CHECK(qkv_model_forward(s.swa, s.ls, s.ids + SEQ_PROMPT, 16, 0, &o, &err) == QKV_ERR_INVALID &&
              qkv_model_forward(s.full, s.lf, s.ids + SEQ_PROMPT, 16, 0, &o, &err) == QKV_ERR_INVALID,
          "the stopped calls: %s", err.msg);
    CHECK(qkv_model_pos(s.swa) == SEQ_PROMPT && qkv_model_pos(s.full) == SEQ_PROMPT, "after a failed call: at %d, %d",
          qkv_model_pos(s.swa), qkv_model_pos(s.full));
    seq_call(&s, s.ids + SEQ_PROMPT, 16, "after a failed call");
    seq_steps(&s, 100, 12, "after a failed call");
done:
    seq_close(&s);
}
