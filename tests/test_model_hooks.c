/*
 * test_model_hooks.c — one forward call's options on the real model
 * (models/SmolLM2-135M-Instruct.Q4_1.gguf): the named activation points are
 * called in forward order with TransformerLens's shapes; the residual stream
 * adds up exactly (resid_post of L is resid_pre of L + 1, resid_mid is
 * resid_pre + attn_out); hooks that only read change nothing, bit for bit;
 * zeroing a head's hook_z by hand is exactly the zeroed-head option; two
 * different interventions back to back share nothing; a failing hook stops
 * the call with its message and leaves the cache as it was; a head-scoped
 * exclusion shows in that head's pattern only; qkv_model_head_result is one
 * head's attention output, bit for bit, in calls of any length. The
 * comparison of the points with transformers is test_model_hooks_oracle.c.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t prompt[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
enum { N = 12 };

static qkv_model *open_model(void) {
    if (!test_require_model()) return NULL;
    qkv_model_params p = {.n_ctx = 64, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "open: %s", err.msg);
    return m;
}

/* logits [N, V] of the prompt under o, from an empty cache */
static float *run(qkv_model *m, const qkv_forward_opts *o) {
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)N * V * sizeof(float));
    qkv_error err = {0};
    qkv_model_rewind(m, 0, NULL);
    CHECK(qkv_model_forward(m, logits, prompt, N, 1, o, &err) == QKV_OK, "%s", err.msg);
    return logits;
}

TEST(model_hook_names_parse_and_format) {
    for (int p = 0; p < QKV_HOOK_COUNT; p++)
        for (int layer = -1; layer < 3; layer += 2) {
            char name[64];
            qkv_hook_format(name, sizeof name, (qkv_hook_point)p, layer);
            qkv_hook_point got;
            int got_layer = 7;
            qkv_error err = {0};
            CHECK(qkv_hook_parse(&got, &got_layer, name, &err) == QKV_OK, "%s: %s", name, err.msg);
            const int want_layer = qkv_hook_point_per_layer((qkv_hook_point)p) ? layer : QKV_ALL;
            CHECK(got == (qkv_hook_point)p && got_layer == want_layer, "%s parsed as point %d layer %d", name, (int)got,
                  got_layer);
        }
    char name[64];
    qkv_hook_format(name, sizeof name, QKV_HOOK_Z, 5);
    CHECK(!strcmp(name, "blocks.5.attn.hook_z"), "hook_z of layer 5 is named %s", name);
    static const char *const bad[] = {"", "hook_z", "blocks.5.hook_z", "blocks..attn.hook_z", "blocks.x.attn.hook_z",
                                      "blocks.-1.attn.hook_z", "blocks.5.attn.hook_z.", "blocks.99999999.hook_resid_pre",
                                      "blocks.5.hook_embed", "hook_embed2", "blocks.*"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_hook_point p;
        int l;
        qkv_error err = {0};
        CHECK(qkv_hook_parse(&p, &l, bad[i], &err) == QKV_ERR_INVALID && strstr(err.msg, "hook name"),
              "'%s' accepted (%s)", bad[i], err.msg);
    }
}

/* ------------------------------------------------ every point, in order */

typedef struct {
    int n_layer, E, Hq, Hkv, D;
    int calls[QKV_HOOK_COUNT];
    int last_layer, last_point; /* forward order: layers ascending, points ascending within a layer */
    int order_ok, shapes_ok;
    float *resid_pre, *attn_out, *resid_mid, *mlp_out, *resid_post; /* [N, E] of the current layer */
    int chain_differs;           /* resid_pre of L + 1 differs from resid_post of L */
    double worst_mid, worst_post; /* max |difference| of the residual sums */
} tracer;

static double max_diff(const float *a, const float *b, const float *c, size_t n) {
    double d = 0; /* max |a + b - c| */
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)(a[i] + b[i]) - c[i]));
    return d;
}

static qkv_status trace(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    tracer *t = user;
    const size_t nE = (size_t)N * t->E;
    t->calls[a->point]++;
    const int layer = a->layer < 0 ? (a->point == QKV_HOOK_EMBED ? -1 : t->n_layer) : a->layer;
    if (layer < t->last_layer || (layer == t->last_layer && (int)a->point <= t->last_point)) t->order_ok = 0;
    t->last_layer = layer;
    t->last_point = a->point;
    int64_t want[3] = {N, t->E, 0};
    int ndim = 2;
    switch (a->point) {
    case QKV_HOOK_Q: case QKV_HOOK_ROT_Q: case QKV_HOOK_Z: want[1] = t->Hq, want[2] = t->D, ndim = 3; break;
    case QKV_HOOK_K: case QKV_HOOK_V: case QKV_HOOK_ROT_K: want[1] = t->Hkv, want[2] = t->D, ndim = 3; break;
    case QKV_HOOK_PATTERN: want[0] = t->Hq, want[1] = N, want[2] = N, ndim = 3; break;
    default: break;
    }
    if (a->ndim != ndim || a->shape[0] != want[0] || a->shape[1] != want[1] || (ndim == 3 && a->shape[2] != want[2]) ||
        a->pos0 != 0 || (a->point == QKV_HOOK_PATTERN) != (a->data == NULL))
        t->shapes_ok = 0;
    switch (a->point) {
    case QKV_HOOK_RESID_PRE:
        if (a->layer > 0 && memcmp(t->resid_post, a->data, nE * 4)) t->chain_differs = 1;
        memcpy(t->resid_pre, a->data, nE * 4);
        break;
    case QKV_HOOK_ATTN_OUT: memcpy(t->attn_out, a->data, nE * 4); break;
    case QKV_HOOK_RESID_MID:
        t->worst_mid = fmax(t->worst_mid, max_diff(t->resid_pre, t->attn_out, a->data, nE));
        memcpy(t->resid_mid, a->data, nE * 4);
        break;
    case QKV_HOOK_MLP_OUT: memcpy(t->mlp_out, a->data, nE * 4); break;
    case QKV_HOOK_RESID_POST:
        t->worst_post = fmax(t->worst_post, max_diff(t->resid_mid, t->mlp_out, a->data, nE));
        memcpy(t->resid_post, a->data, nE * 4);
        break;
    default: break;
    }
    return QKV_OK;
}

TEST(model_hooks_see_every_point_in_order_and_change_nothing) {
    qkv_model *m = open_model();
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int V = c->n_vocab;
    tracer t = {.n_layer = c->n_layer, .E = c->n_embd, .Hq = c->n_head, .Hkv = c->n_kv_head, .D = c->head_dim,
                .last_layer = -2, .order_ok = 1, .shapes_ok = 1};
    float *bufs[5];
    for (int i = 0; i < 5; i++) bufs[i] = malloc((size_t)N * c->n_embd * 4);
    t.resid_pre = bufs[0], t.attn_out = bufs[1], t.resid_mid = bufs[2], t.mlp_out = bufs[3], t.resid_post = bufs[4];
    qkv_hook hooks[QKV_HOOK_COUNT];
    for (int p = 0; p < QKV_HOOK_COUNT; p++)
        hooks[p] = (qkv_hook){.point = (qkv_hook_point)p, .layer = QKV_ALL, .fn = trace, .user = &t};
    float *plain = run(m, NULL);
    float *traced = run(m, &(qkv_forward_opts){.hooks = hooks, .n_hooks = QKV_HOOK_COUNT});
    for (int p = 0; p < QKV_HOOK_COUNT; p++) {
        const int want = qkv_hook_point_per_layer((qkv_hook_point)p) ? c->n_layer : 1;
        CHECK(t.calls[p] == want, "%s called %d times, want %d", qkv_hook_point_name((qkv_hook_point)p), t.calls[p],
              want);
    }
    CHECK(t.order_ok, "points are called in forward order");
    CHECK(t.shapes_ok, "every point has TransformerLens's shape");
    CHECK(!t.chain_differs, "resid_pre of layer L + 1 is resid_post of layer L, bit for bit");
    CHECK(t.worst_mid == 0 && t.worst_post == 0, "resid_mid = resid_pre + attn_out (%g), resid_post = resid_mid + mlp_out (%g)",
          t.worst_mid, t.worst_post);
    CHECK(!memcmp(plain, traced, (size_t)N * V * 4), "hooks that only read change nothing, bit for bit");
    /* one layer only */
    memset(t.calls, 0, sizeof t.calls);
    t.last_layer = -2;
    const qkv_hook one = {.point = QKV_HOOK_Z, .layer = 3, .fn = trace, .user = &t};
    free(run(m, &(qkv_forward_opts){.hooks = &one, .n_hooks = 1}));
    CHECK(t.calls[QKV_HOOK_Z] == 1, "a hook on blocks.3.attn.hook_z is called once (%d)", t.calls[QKV_HOOK_Z]);
    for (int i = 0; i < 5; i++) free(bufs[i]);
    free(plain);
    free(traced);
    qkv_model_close(m);
}

/* ------------------------------------------------------ writing a point */

typedef struct {
    int head, D;
} zero_spec;

/* hook_z [n, Hq, D]: head zero_spec.head <- 0 at every position */
static qkv_status zero_z(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    const zero_spec *z = user;
    for (int64_t t = 0; t < a->shape[0]; t++)
        memset(a->data + ((size_t)t * a->shape[1] + z->head) * z->D, 0, (size_t)z->D * sizeof(float));
    return QKV_OK;
}

TEST(model_zeroing_hook_z_is_the_zeroed_head_option) {
    qkv_model *m = open_model();
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const size_t size = (size_t)N * c->n_vocab * 4;
    zero_spec z = {.head = 4, .D = c->head_dim};
    const qkv_hook by_hand = {.point = QKV_HOOK_Z, .layer = 7, .fn = zero_z, .user = &z};
    const qkv_head_ref head = {.layer = 7, .head = 4};
    float *plain = run(m, NULL);
    float *hooked = run(m, &(qkv_forward_opts){.hooks = &by_hand, .n_hooks = 1});
    float *option = run(m, &(qkv_forward_opts){.zero_heads = &head, .n_zero_heads = 1});
    CHECK(!memcmp(hooked, option, size), "zeroing hook_z by hand equals the zeroed-head option, bit for bit");
    CHECK(memcmp(hooked, plain, size), "zeroing a head changes the logits");
    free(plain);
    free(hooked);
    free(option);
    qkv_model_close(m);
}

/* hook_resid_pre: every value scaled by 1.5 (a patch that must show) */
static qkv_status scale_resid(void *user, const qkv_activation *a, qkv_error *err) {
    (void)user, (void)err;
    for (int64_t i = 0; i < a->shape[0] * a->shape[1]; i++) a->data[i] *= 1.5f;
    return QKV_OK;
}

TEST(model_interventions_end_with_their_call) {
    qkv_model *m = open_model();
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const size_t size = (size_t)N * c->n_vocab * 4;
    float *plain = run(m, NULL);
    /* first: a bit of everything */
    const int drop[2] = {2, 5}, drop_head[1] = {7};
    const qkv_exclusion ex[2] = {{.positions = drop, .n = 2, .layer = 1, .head = QKV_ALL},
                                 {.positions = drop_head, .n = 1, .layer = QKV_ALL, .head = 3}};
    const qkv_head_ref zero[2] = {{.layer = 0, .head = 1}, {.layer = 20, .head = 8}};
    const qkv_hook patch = {.point = QKV_HOOK_RESID_PRE, .layer = 10, .fn = scale_resid};
    const qkv_forward_opts first = {.mask = QKV_MASK_WINDOW, .window = 4, .exclude = ex, .n_exclude = 2,
                                    .zero_heads = zero, .n_zero_heads = 2, .hooks = &patch, .n_hooks = 1,
                                    .rope_offset = 3};
    float *a = run(m, &first);
    /* second: only the zeroed head of the first */
    float *b = run(m, &(qkv_forward_opts){.zero_heads = &zero[1], .n_zero_heads = 1});
    float *b_fresh = NULL;
    qkv_model_close(m);
    m = open_model();
    b_fresh = run(m, &(qkv_forward_opts){.zero_heads = &zero[1], .n_zero_heads = 1});
    float *plain_after = run(m, NULL);
    CHECK(memcmp(a, plain, size), "the first call's interventions change the logits");
    CHECK(!memcmp(b, b_fresh, size), "the second call sees none of the first, bit for bit");
    CHECK(!memcmp(plain_after, plain, size), "a plain call after them is the plain forward, bit for bit");
    free(plain); free(a); free(b); free(b_fresh); free(plain_after);
    qkv_model_close(m);
}

/* ------------------------------------------------------------ failures */

static qkv_status fail_with_message(void *user, const qkv_activation *a, qkv_error *err) {
    (void)user;
    err->status = QKV_ERR_IO;
    snprintf(err->msg, sizeof err->msg, "the probe's file is full at layer %d", a->layer);
    return QKV_ERR_IO;
}

static qkv_status fail_silently(void *user, const qkv_activation *a, qkv_error *err) {
    (void)user, (void)a, (void)err;
    return QKV_ERR_INVALID;
}

TEST(model_failing_hook_stops_the_call) {
    qkv_model *m = open_model();
    if (!m) return;
    const int V = qkv_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)N * V * 4);
    qkv_error err = {0};
    CHECK(qkv_model_forward(m, logits, prompt, 4, 0, NULL, &err) == QKV_OK, "%s", err.msg);
    const qkv_hook h1 = {.point = QKV_HOOK_MLP_OUT, .layer = 6, .fn = fail_with_message};
    CHECK(qkv_model_forward(m, logits, prompt + 4, 8, 0, &(qkv_forward_opts){.hooks = &h1, .n_hooks = 1}, &err) ==
              QKV_ERR_IO && !strcmp(err.msg, "the probe's file is full at layer 6"),
          "the hook's status and message: %d '%s'", (int)err.status, err.msg);
    CHECK(qkv_model_pos(m) == 4, "the cache is as before the call (%d)", qkv_model_pos(m));
    const qkv_hook h2 = {.point = QKV_HOOK_ROT_K, .layer = 2, .fn = fail_silently};
    CHECK(qkv_model_forward(m, logits, prompt + 4, 8, 0, &(qkv_forward_opts){.hooks = &h2, .n_hooks = 1}, &err) ==
              QKV_ERR_INVALID && strstr(err.msg, "blocks.2.attn.hook_rot_k"),
          "a hook without a message: '%s'", err.msg);
    const qkv_hook bad[3] = {{.point = QKV_HOOK_COUNT, .fn = fail_silently},
                             {.point = QKV_HOOK_Z, .layer = 30, .fn = fail_silently},
                             {.point = QKV_HOOK_Z, .layer = 0}};
    for (int i = 0; i < 3; i++)
        CHECK(qkv_model_forward(m, logits, prompt + 4, 8, 0, &(qkv_forward_opts){.hooks = &bad[i], .n_hooks = 1},
                                &err) == QKV_ERR_INVALID && strstr(err.msg, "hook 0"),
              "bad hook %d refused: '%s'", i, err.msg);
    const int neg = -1;
    const qkv_exclusion ex = {.positions = &neg, .n = 1, .layer = QKV_ALL, .head = QKV_ALL};
    CHECK(qkv_model_forward(m, logits, prompt + 4, 8, 0, &(qkv_forward_opts){.exclude = &ex, .n_exclude = 1}, &err) ==
              QKV_ERR_INVALID && strstr(err.msg, "negative"),
          "a negative position refused: '%s'", err.msg);
    CHECK(qkv_model_pos(m) == 4, "refused calls leave the cache as it was (%d)", qkv_model_pos(m));
    free(logits);
    qkv_model_close(m);
}

/* ------------------------------------------------ head-scoped exclusion */

typedef struct {
    int layer, head, key;
    double hidden[2], row_sum_err; /* the hidden key's weight: in `head`, in another head */
} pattern_check;

static qkv_status check_pattern(void *user, const qkv_activation *a, qkv_error *err) {
    pattern_check *p = user;
    if (a->layer != p->layer) return QKV_OK;
    const int n = (int)a->shape[1], n_keys = (int)a->shape[2];
    float w[N * N];
    for (int k = 0; k < 2; k++) {
        const int head = k ? (p->head + 1) % (int)a->shape[0] : p->head;
        qkv_status st = qkv_pattern_weights(w, a, head, 0, n, 0, n_keys, err);
        if (st) return st;
        p->hidden[k] = w[(size_t)(n - 1) * n_keys + p->key];
        for (int r = 0; r < n; r++) {
            double s = 0;
            for (int j = 0; j < n_keys; j++) s += w[(size_t)r * n_keys + j];
            /* row 0 of the scoped head sees no key once key 0 is hidden: O = 0, weights 0 */
            p->row_sum_err = fmax(p->row_sum_err, fabs(s - (k == 0 && r == 0 ? 0 : 1)));
        }
    }
    return qkv_pattern_weights(w, a, 0, n - 1, 2, 0, 1, err) == QKV_ERR_INVALID ? QKV_OK : QKV_ERR_INVALID;
}

TEST(model_head_scoped_exclusion_shows_in_that_head_only) {
    qkv_model *m = open_model();
    if (!m) return;
    pattern_check pc = {.layer = 5, .head = 2, .key = 0};
    const qkv_exclusion ex = {.positions = &pc.key, .n = 1, .layer = 5, .head = 2};
    const qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = 5, .fn = check_pattern, .user = &pc};
    free(run(m, &(qkv_forward_opts){.exclude = &ex, .n_exclude = 1, .hooks = &h, .n_hooks = 1}));
    CHECK(pc.hidden[0] == 0, "the hidden key's weight in the scoped head is 0 (%g)", pc.hidden[0]);
    CHECK(pc.hidden[1] > 0.01, "and not in another head (%g: token 0 is a sink)", pc.hidden[1]);
    CHECK(pc.row_sum_err < 1e-5, "every recomputed row sums to 1 (+- %g)", pc.row_sum_err);
    qkv_model_close(m);
}

/* ------------------------------------------- each head in the residual basis */

/* Keeps one [N, w] activation of the layer it hooks. */
static qkv_status keep_activation(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    memcpy(user, a->data, (size_t)(a->shape[0] * a->shape[1] * (a->ndim == 3 ? a->shape[2] : 1)) * sizeof(float));
    return QKV_OK;
}

TEST(model_head_result_is_the_attention_output_of_one_head) {
    qkv_model *m = open_model();
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const int E = c->n_embd, Hq = c->n_head, D = c->head_dim, layer = 5;
    float *z = malloc((size_t)N * Hq * D * 4), *attn_out = malloc((size_t)N * E * 4);
    float *result = malloc((size_t)N * Hq * E * 4), *one = malloc((size_t)N * E * 4);
    const qkv_hook keep[2] = {{.point = QKV_HOOK_Z, .layer = layer, .fn = keep_activation, .user = z},
                              {.point = QKV_HOOK_ATTN_OUT, .layer = layer, .fn = keep_activation, .user = attn_out}};
    free(run(m, &(qkv_forward_opts){.hooks = keep, .n_hooks = 2}));
    qkv_error err = {0};
    CHECK(qkv_model_head_result(result, m, layer, z, N, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_model_pos(m) == N, "head_result leaves the KV cache alone (%d positions)", qkv_model_pos(m));
    /* head h alone: the attention output of a call with every other head of the layer zeroed */
    const qkv_hook keep_out = {.point = QKV_HOOK_ATTN_OUT, .layer = layer, .fn = keep_activation, .user = one};
    qkv_head_ref others[QKV_MODEL_MAX_HEADS];
    int exact = 1;
    for (int h = 0; h < Hq; h++) {
        int k = 0;
        for (int g = 0; g < Hq; g++)
            if (g != h) others[k++] = (qkv_head_ref){.layer = layer, .head = g};
        free(run(m, &(qkv_forward_opts){.hooks = &keep_out, .n_hooks = 1, .zero_heads = others, .n_zero_heads = k}));
        for (int t = 0; t < N; t++)
            if (memcmp(one + (size_t)t * E, result + ((size_t)t * Hq + h) * E, (size_t)E * 4)) exact = 0;
    }
    CHECK(exact, "each head's result is the attention output with the layer's other heads zeroed, bit for bit");
    /* summed over heads: z Wo^T, the layer's attention output (SmolLM2: no post-attention norm);
     * float32 sums in another order: 1e-5 of the largest value */
    double worst = 0, top = 0;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < E; i++) {
            double s = 0;
            for (int h = 0; h < Hq; h++) s += result[((size_t)t * Hq + h) * E + i];
            worst = fmax(worst, fabs(s - attn_out[(size_t)t * E + i]));
            top = fmax(top, fabs(attn_out[(size_t)t * E + i]));
        }
    CHECK(worst <= 1e-5 * top, "sum over heads - hook_attn_out: %.3g (largest |attn_out| %.3g)", worst, top);
    CHECK(qkv_model_head_result(result, m, c->n_layer, z, N, &err) == QKV_ERR_INVALID && strstr(err.msg, "layer"),
          "a layer out of range is refused (%s)", err.msg);
    CHECK(qkv_model_head_result(result, m, layer, z, 0, &err) == QKV_ERR_INVALID, "n = 0 is refused");
    CHECK(qkv_model_head_result(result, m, layer, z, 65, &err) == QKV_ERR_INVALID, "n above the context is refused");
    free(z); free(attn_out); free(result); free(one);
    qkv_model_close(m);
}

/* More rows than one matmul takes (4M floats of masked z: 809 positions of SmolLM2): each row as
 * computed alone in a short call, bit for bit (a row's result does not depend on its neighbours). */
TEST(model_head_result_in_chunks) {
    if (!test_require_model()) return;
    enum { LONG = 2000, SHORT = 8 };
    qkv_model_params p = {.n_ctx = LONG, .n_threads = 2};
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, test_model_path(), &p, &err) == QKV_OK, "open: %s", err.msg);
    if (!m) return;
    const qkv_model_config *c = qkv_model_get_config(m);
    const size_t zrow = (size_t)c->n_head * c->head_dim, orow = (size_t)c->n_head * c->n_embd;
    float *z = malloc(LONG * zrow * 4), *all = malloc(LONG * orow * 4), *part = malloc(SHORT * orow * 4);
    uint32_t x = 12345;
    for (size_t i = 0; i < LONG * zrow; i++) {
        x = x * 1664525u + 1013904223u;
        z[i] = (float)((x >> 8) * (1.0 / 16777216.0) - 0.5);
    }
    CHECK(qkv_model_head_result(all, m, 3, z, LONG, &err) == QKV_OK, "%s", err.msg);
    static const int starts[] = {0, 800, 1000, LONG - SHORT};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        CHECK(qkv_model_head_result(part, m, 3, z + starts[i] * zrow, SHORT, &err) == QKV_OK, "%s", err.msg);
        CHECK(!memcmp(part, all + starts[i] * orow, SHORT * orow * 4), "rows %d..%d of %d differ from a call of %d",
              starts[i], starts[i] + SHORT, LONG, SHORT);
    }
    free(z); free(all); free(part);
    qkv_model_close(m);
}
