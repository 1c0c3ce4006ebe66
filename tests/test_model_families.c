/*
 * test_model_families.c — the forward pass of each model family against
 * transformers, on tiny random models written to GGUF the way llama.cpp's
 * converter writes them (tools/oracle/make_family_fixtures.py,
 * tests/fixtures/families/, always run: the models are committed).
 *
 *   qwen2    QKV biases, NEOX (rotate-half) RoPE on unpermuted q/k rows
 *   qwen3    attn_q_norm / attn_k_norm, key_length 32 != hidden / heads 16,
 *            F16 matrices, untied output.weight
 *   gemma2   sliding window 8 on layer 0 (llama.cpp's pattern 2), attention
 *            soft-cap 5, final soft-cap 4, query scale 1/sqrt(key_length),
 *            norms stored as 1 + w, post-norms, embeddings x sqrt(E), GELU
 *   gemma3   6 layers: window 12 on layers 0-4 (pattern 6), layer 5 global;
 *            local RoPE base 10000 against the global 1e6, QK-norm, as gemma2
 *            without soft-caps
 *   mistral  arch "llama" (llama.cpp's converter maps MistralForCausalLM to
 *            LlamaModel: permuted q/k, no sliding window): passes today
 *   smollm3  8 layers, layers 3 and 7 without RoPE (llama.cpp's
 *            n_no_rope_layer_step 4; transformers' no_rope_layers), q/k
 *            permuted as llama's (SmolLM3Model is a LlamaModel), F16, GQA 2:1
 *   olmo2    no pre-norms (x + post_norm(attn(x))), post-norms, QK-norm over
 *            the whole projection ([Hq*D] for q, [Hkv*D] for k) before the
 *            head split, NEOX RoPE on unpermuted q/k, F16, untied, GQA 2:1
 *   phi3     fused attn_qkv and ffn_up (gate, up), partial rotary 16 of 32
 *            dims, LongRoPE of context 512 at original 128 (n_ctx 128: the
 *            short factors) and the attention factor; phi3_long: original 8
 *            (the long factors)
 *
 * Per family, one prompt of 48 tokens (tests/fixtures/families/<family>/):
 *   - logits of every position, one forward call (all_logits);
 *   - every layer's attention map, through a hook on attn.hook_pattern for
 *     all layers (qkv_pattern_weights, every head and row against keys 0..n-1);
 *   - greedy: rewind, the prompt, then 16 tokens one call each, argmax (lowest
 *     id on ties) equal to transformers'. The fixture's top-2 margins are
 *     >= 0.03, far above any rounding, so equality is exact.
 * Metric, per row (a position's [V] logits; a (layer, head, query) row of a
 * map):  rel = max |qkv - ref| / max |ref|,  the worst row reported.
 * Tolerance REL_TOL = 1e-4 (the issue's): the GGUF holds exactly the weights
 * transformers ran with (F32, or F16 values the reference was rounded to),
 * both sides compute in float32, so what differs is the summation order
 * (~1e-7 relative per dot product, through at most 6 layers). Dropping any one
 * of the features above moves the logits by 0.31 to 3 in this metric (the
 * table in tests/fixtures/families/manifest.txt); llama.cpp itself agrees to
 * 1e-6 on the F32 qwen2 file and to ~1e-3 elsewhere (F16 activations in its
 * F16 matmuls, its GELU table).
 *
 * Until src/model/ implements an architecture, qkv_model_open fails with
 * "architecture '<arch>' is not supported" and that family's test fails,
 * saying so.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4
#define N_CTX 128

typedef struct {
    qkv_npy ids, logits, maps, gen, margin;  /* [n] i32, [n, V], [L, Hq, n, n], [G] i32, [G] */
} family_fixture;

static void fixture_free(family_fixture *f) {
    qkv_npy_free(&f->ids);
    qkv_npy_free(&f->logits);
    qkv_npy_free(&f->maps);
    qkv_npy_free(&f->gen);
    qkv_npy_free(&f->margin);
}

static int load_npy(qkv_npy *a, const char *dir, const char *file, qkv_npy_type type, int ndim) {
    char path[700];
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (qkv_npy_load(a, path, &err)) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    CHECK(a->type == type && a->ndim == ndim, "%s: type %d with %d dims, want type %d with %d", path, a->type,
          a->ndim, type, ndim);
    return a->type == type && a->ndim == ndim;
}

static int fixture_load(family_fixture *f, const char *dir) {
    memset(f, 0, sizeof *f);
    return load_npy(&f->ids, dir, "ids.npy", QKV_NPY_I32, 1) && load_npy(&f->logits, dir, "logits.npy", QKV_NPY_F32, 2) &&
           load_npy(&f->maps, dir, "maps.npy", QKV_NPY_F32, 4) && load_npy(&f->gen, dir, "gen.npy", QKV_NPY_I32, 1) &&
           load_npy(&f->margin, dir, "gen_margin.npy", QKV_NPY_F32, 1);
}

/* The hook on attn.hook_pattern: every layer's [Hq, n, n] weights into maps. */
typedef struct {
    float *maps;      /* [L, Hq, n, n] */
    int L, Hq, n;
    int calls;
} map_capture;

static qkv_status capture_maps(void *user, const qkv_activation *a, qkv_error *err) {
    map_capture *c = user;
    if (a->layer < 0 || a->layer >= c->L || a->shape[0] != c->Hq || a->shape[1] != c->n || a->shape[2] != c->n) {
        snprintf(err->msg, sizeof err->msg,
                 "hook_pattern of layer %d is [%lld, %lld, %lld], the fixture's [%d, %d, %d] (keys 0..n-1 of one call "
                 "from position 0)",
                 a->layer, (long long)a->shape[0], (long long)a->shape[1], (long long)a->shape[2], c->Hq, c->n, c->n);
        return QKV_ERR_INVALID;
    }
    for (int h = 0; h < c->Hq; h++) {
        float *w = c->maps + (((size_t)a->layer * c->Hq + h) * c->n) * c->n;
        qkv_status st = qkv_pattern_weights(w, a, h, 0, c->n, 0, c->n, err);
        if (st) return st;
    }
    c->calls++;
    return QKV_OK;
}

/* One family: open, all-position logits and maps in one call, then greedy. */
static void check_family(const char *name, const char *arch) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/families/%s", test_fixture_dir(), name);
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    family_fixture fx;
    qkv_model *m = NULL;
    float *lg = NULL;
    map_capture mc = {0};
    qkv_error err = {0};
    if (!fixture_load(&fx, dir)) goto done;
    const int n = (int)fx.ids.shape[0], V = (int)fx.logits.shape[1], G = (int)fx.gen.shape[0];
    mc.L = (int)fx.maps.shape[0], mc.Hq = (int)fx.maps.shape[1], mc.n = n;

    const qkv_model_params p = {.n_ctx = N_CTX, .n_threads = 2};
    qkv_status st = qkv_model_open(&m, path, &p, &err);
    if (st == QKV_ERR_UNSUPPORTED) {
        CHECK(0, "%s (arch '%s'): qkv_model_open: %s -- the %s architecture is not implemented yet (src/model/)", name,
              arch, err.msg, arch);
        goto done;
    }
    CHECK(st == QKV_OK, "%s: qkv_model_open: %s", name, err.msg);
    if (!m) goto done;
    const qkv_model_config *cfg = qkv_model_get_config(m);
    CHECK(!strcmp(cfg->arch, arch) && cfg->n_vocab == V && cfg->n_layer == mc.L && cfg->n_head == mc.Hq,
          "%s: config arch '%s' V %d L %d Hq %d, the fixture's '%s' V %d L %d Hq %d", name, cfg->arch, cfg->n_vocab,
          cfg->n_layer, cfg->n_head, arch, V, mc.L, mc.Hq);
    if (test_failures()) goto done;

    /* every position's logits and every layer's map, one forward call */
    lg = malloc((size_t)n * V * sizeof(float));                       /* [n, V] */
    mc.maps = calloc((size_t)mc.L * mc.Hq * n * n, sizeof(float));    /* [L, Hq, n, n] */
    const qkv_hook hook = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = capture_maps, .user = &mc};
    const qkv_forward_opts opts = {.hooks = &hook, .n_hooks = 1};
    CHECK(qkv_model_forward(m, lg, fx.ids.data, n, 1, &opts, &err) == QKV_OK, "%s: forward: %s", name, err.msg);
    if (test_failures()) goto done;
    CHECK(mc.calls == mc.L, "%s: hook_pattern called %d times, want %d", name, mc.calls, mc.L);
    int64_t at;
    const double e_logits = test_worst_row(lg, fx.logits.data, n, V, &at);
    CHECK(e_logits <= REL_TOL, "%s: logits of position %lld: max |qkv - transformers| / max |transformers| = %.3g > %g",
          name, (long long)at, e_logits, REL_TOL);
    const double e_maps = test_worst_row(mc.maps, fx.maps.data, (int64_t)mc.L * mc.Hq * n, n, &at);
    const int64_t row = at % n, head = at / n % mc.Hq, layer = at / n / mc.Hq;
    CHECK(e_maps <= REL_TOL, "%s: attention map of layer %lld head %lld row %lld: rel err %.3g > %g", name,
          (long long)layer, (long long)head, (long long)row, e_maps, REL_TOL);
    printf("  %-8s logits [%d, %d] worst row rel err %.2e; maps [%d, %d, %d, %d] %.2e (layer %lld head %lld row %lld)\n",
           name, n, V, e_logits, mc.L, mc.Hq, n, n, e_maps, (long long)layer, (long long)head, (long long)row);

    /* greedy: the prompt, then one token per call */
    if (qkv_model_rewind(m, 0, &err) || qkv_model_forward(m, lg, fx.ids.data, n, 0, NULL, &err)) {
        CHECK(0, "%s: greedy prompt: %s", name, err.msg);
        goto done;
    }
    const int32_t *want = fx.gen.data;
    const float *margin = fx.margin.data;
    int same = 0;
    for (int t = 0; t < G; t++) {
        const int32_t tok = test_argmax(lg, V);
        if (tok != want[t]) {
            CHECK(0, "%s: greedy token %d is %d, transformers' %d (its top-2 margin %.3g)", name, t, tok, want[t],
                  margin[t]);
            break;
        }
        same++;
        if (t + 1 < G && qkv_model_forward(m, lg, &tok, 1, 0, NULL, &err) != QKV_OK) {
            CHECK(0, "%s: decode %d: %s", name, t, err.msg);
            break;
        }
    }
    printf("  %-8s greedy: %d of %d tokens equal\n", name, same, G);
done:
    fixture_free(&fx);
    free(lg);
    free(mc.maps);
    qkv_model_close(m);
}

TEST(model_family_qwen2) { check_family("qwen2", "qwen2"); }
TEST(model_family_qwen3) { check_family("qwen3", "qwen3"); }
TEST(model_family_gemma2) { check_family("gemma2", "gemma2"); }
TEST(model_family_gemma3) { check_family("gemma3", "gemma3"); }
/* arch "llama": supported today */
TEST(model_family_mistral_as_llama) { check_family("mistral", "llama"); }
TEST(model_family_smollm3) { check_family("smollm3", "smollm3"); }
TEST(model_family_olmo2) { check_family("olmo2", "olmo2"); }

/* What config.c's olmo2 row makes of the fixture: post-norms without
 * pre-norms, QK-norm over the whole projection, rotate-half pairs. */
TEST(model_family_olmo2_config) {
    char path[700];
    snprintf(path, sizeof path, "%s/families/olmo2/model.gguf", test_fixture_dir());
    qkv_model *m = NULL;
    qkv_error err = {0};
    if (qkv_model_open(&m, path, &(qkv_model_params){.n_ctx = 16, .n_threads = 2}, &err)) {
        CHECK(0, "%s: %s", path, err.msg);
        return;
    }
    const qkv_model_config *c = qkv_model_get_config(m);
    qkv_layer_attn a;
    qkv_model_layer_attn(&a, c, 1);
    CHECK(c->no_pre_norms && c->post_norms && c->qk_norm == QKV_QK_NORM_FULL && a.qk_norm == QKV_QK_NORM_FULL &&
              c->rope.pairing == QKV_ROPE_HALF && !c->tied_embeddings && c->swa_period == 1 && !a.window,
          "olmo2: no_pre_norms %d post_norms %d qk_norm %d pairing %d tied %d", c->no_pre_norms, c->post_norms,
          c->qk_norm, (int)c->rope.pairing, c->tied_embeddings);
    qkv_model_close(m);
}
TEST(model_family_phi3) { check_family("phi3", "phi3"); }
TEST(model_family_phi3_long) { check_family("phi3_long", "phi3"); }

/* rope_ctx picks LongRoPE's table apart from the cache's size (qkv-mpi's ranks
 * hold part of a sequence): phi3's original context is 128, so a 64-row cache
 * told the context is 256 rotates with the long factors, exactly as a 256-row
 * cache does, and not as a plain 64-row one. */
TEST(model_family_phi3_rope_ctx_picks_the_table) {
    char path[700];
    snprintf(path, sizeof path, "%s/families/phi3/model.gguf", test_fixture_dir());
    const qkv_model_params ps[3] = {{.n_ctx = 64, .n_threads = 2, .rope_ctx = 256},
                                    {.n_ctx = 256, .n_threads = 2},
                                    {.n_ctx = 64, .n_threads = 2}};
    enum { N = 12 };
    static float logits[3][N * 320];
    int32_t toks[N];
    for (int t = 0; t < N; t++) toks[t] = (int32_t)(3 + t * 17 % 300);
    for (int i = 0; i < 3; i++) {
        qkv_model *m = NULL;
        qkv_error err = {0};
        if (qkv_model_open(&m, path, &ps[i], &err)) {
            CHECK(0, "%s: %s", path, err.msg);
            return;
        }
        CHECK(qkv_model_get_config(m)->n_vocab == 320, "vocab %d", qkv_model_get_config(m)->n_vocab);
        CHECK(qkv_model_forward(m, logits[i], toks, N, 1, NULL, &err) == QKV_OK, "%s", err.msg);
        qkv_model_close(m);
    }
    CHECK(!memcmp(logits[0], logits[1], sizeof logits[0]), "rope_ctx 256 on 64 rows differs from a 256-row cache");
    CHECK(memcmp(logits[0], logits[2], sizeof logits[0]), "rope_ctx 256 rotated as the 64-row cache's short table");
    qkv_error err = {0};
    qkv_model *m = NULL;
    CHECK(qkv_model_open(&m, path, &(qkv_model_params){.rope_ctx = -1}, &err) == QKV_ERR_INVALID && !m,
          "a negative rope_ctx: %s", err.msg);
}

/* A copy of one hooked activation ([n, H, D] at hook_q / hook_rot_q), or of
 * the layer's cached keys rows [0, n) at hook_pattern ([Hkv, n, D]). */
typedef struct {
    float *x;
    size_t count;
    int n;
} copy_capture;

static qkv_status copy_activation(void *user, const qkv_activation *a, qkv_error *err) {
    copy_capture *c = user;
    if (a->point == QKV_HOOK_PATTERN) return qkv_kv_cache_read(c->x, NULL, qkv_attn_view_cache(a->attn), 0, c->n, err);
    memcpy(c->x, a->data, c->count * sizeof(float));
    return QKV_OK;
}

/* SmolLM3's NoPE layers (3 and 7 of 8) as the forward runs them: there
 * hook_rot_q and hook_rot_k equal hook_q and hook_k bit for bit (no QK-norm
 * in this family), elsewhere they differ; an eviction with shift moves a
 * NoPE layer's keys unrotated (the kept rows bit for bit the rows before),
 * where a RoPE layer's move and turn. */
TEST(model_family_smollm3_nope_layers) {
    char path[700];
    snprintf(path, sizeof path, "%s/families/smollm3/model.gguf", test_fixture_dir());
    qkv_model *m = NULL;
    qkv_error err = {0};
    const qkv_model_params p = {.n_ctx = N_CTX, .n_threads = 2};
    if (qkv_model_open(&m, path, &p, &err)) {
        CHECK(0, "%s: %s", path, err.msg);
        return;
    }
    const qkv_model_config *c = qkv_model_get_config(m);
    enum { N = 20, CUT = 2, GONE = 4 };
    const int Hq = c->n_head, KD = c->n_kv_head * c->head_dim;
    CHECK(c->no_rope_interval == 4 && c->n_layer == 8, "smollm3: no_rope_interval %d, %d layers", c->no_rope_interval,
          c->n_layer);
    int32_t ids[N + 1];
    for (int i = 0; i <= N; i++) ids[i] = (37 * i + 11) % c->n_vocab;
    float *buf = calloc((size_t)8 * N * Hq * c->head_dim, sizeof(float));
    float *q = buf, *rq = q + (size_t)N * Hq * c->head_dim;
    float *k = rq + (size_t)N * Hq * c->head_dim, *rk = k + (size_t)N * KD;
    float *before = rk + (size_t)N * KD, *after = before + (size_t)N * KD;
    for (int l = 0; l < 4 && !test_failures(); l++) {
        copy_capture cq = {q, (size_t)N * Hq * c->head_dim, N}, crq = {rq, cq.count, N};
        copy_capture ck = {k, (size_t)N * KD, N}, crk = {rk, ck.count, N}, cb = {before, 0, N}, ca = {after, 0, N - GONE};
        const qkv_hook hooks[] = {{QKV_HOOK_Q, l, copy_activation, &cq},     {QKV_HOOK_ROT_Q, l, copy_activation, &crq},
                                  {QKV_HOOK_K, l, copy_activation, &ck},     {QKV_HOOK_ROT_K, l, copy_activation, &crk},
                                  {QKV_HOOK_PATTERN, l, copy_activation, &cb}};
        const qkv_hook later = {QKV_HOOK_PATTERN, l, copy_activation, &ca};
        const qkv_forward_opts o = {.hooks = hooks, .n_hooks = 5}, o2 = {.hooks = &later, .n_hooks = 1};
        CHECK(qkv_model_rewind(m, 0, &err) == QKV_OK && qkv_model_forward(m, NULL, ids, N, 0, &o, &err) == QKV_OK &&
                  qkv_model_evict(m, CUT, GONE, 1, &err) == QKV_OK &&
                  qkv_model_forward(m, NULL, ids + N, 1, 0, &o2, &err) == QKV_OK,
              "layer %d: %s", l, err.msg);
        const int nope = l == 3;
        const int same_q = !memcmp(q, rq, cq.count * sizeof(float)), same_k = !memcmp(k, rk, ck.count * sizeof(float));
        /* the kept rows: [0, CUT) stay, [CUT + GONE, N) move down by GONE */
        const int moved = !memcmp(after, before, (size_t)CUT * KD * sizeof(float)) &&
                          !memcmp(after + (size_t)CUT * KD, before + (size_t)(CUT + GONE) * KD,
                                  (size_t)(N - CUT - GONE) * KD * sizeof(float));
        CHECK(same_q == nope && same_k == nope && moved == nope,
              "layer %d (%s): rot_q == q %d, rot_k == k %d, shifted keys unchanged %d", l, nope ? "NoPE" : "RoPE",
              same_q, same_k, moved);
    }
    free(buf);
    qkv_model_close(m);
}

/* Every fixture's tokenizer (the converter's minimal ones) loads with the
 * vocabulary the model has: the GGUFs are complete llama.cpp files. */
TEST(model_family_tokenizers_load) {
    static const char *const names[] = {"qwen2",   "qwen3", "gemma2", "gemma3",    "mistral",
                                        "smollm3", "olmo2", "phi3",   "phi3_long"};
    static const int vocab[] = {272, 272, 288, 288, 320, 272, 272, 320, 320};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/families/%s/model.gguf", test_fixture_dir(), names[i]);
        qkv_gguf *g = NULL;
        qkv_tokenizer *t = NULL;
        qkv_error err = {0};
        CHECK(qkv_gguf_open(&g, path, &err) == QKV_OK && qkv_tokenizer_load(&t, g, &err) == QKV_OK, "%s: %s", path,
              err.msg);
        if (t) CHECK(qkv_tokenizer_n_vocab(t) == vocab[i], "%s: %d tokens, want %d", path, qkv_tokenizer_n_vocab(t), vocab[i]);
        qkv_tokenizer_free(t);
        qkv_gguf_close(g);
    }
}
