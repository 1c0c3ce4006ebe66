/*
 * test_model_config.c — qkv_model_config_read on metadata-only GGUFs built
 * here: a good file gives its sizes; each hostile value (sizes that would
 * overflow the run state, heads that do not divide, a NaN epsilon or RoPE
 * base, a missing key, no vocabulary, another architecture) is refused with a
 * message that names the key and the limit, before anything is allocated.
 */
#include "gguf_build.h"
#include "testing.h"

#include <math.h>

/* One metadata entry; is_f32 picks the value. */
typedef struct {
    const char *key;
    int is_f32;
    uint32_t u;
    float f;
} meta;

static const meta k_good[] = {
    {"llama.block_count", 0, 2, 0},           {"llama.embedding_length", 0, 64, 0},
    {"llama.attention.head_count", 0, 4, 0},  {"llama.attention.head_count_kv", 0, 2, 0},
    {"llama.feed_forward_length", 0, 128, 0}, {"llama.context_length", 0, 256, 0},
    {"llama.attention.layer_norm_rms_epsilon", 1, 0, 1e-5f}, {"llama.rope.freq_base", 1, 0, 500000.0f},
};
#define N_GOOD (sizeof k_good / sizeof k_good[0])

static void put_meta(gguf_buf *b, const meta *m) {
    if (m->is_f32) gguf_put_kv_f32(b, m->key, m->f);
    else gguf_put_kv_u32(b, m->key, m->u);
}

/* The override of key among over[n_over], or NULL. */
static const meta *find_meta(const meta *over, size_t n_over, const char *key) {
    for (size_t i = 0; i < n_over; i++)
        if (!strcmp(over[i].key, key)) return &over[i];
    return NULL;
}

/* Reads the config of k_good with the entries of over[n_over] replacing (or
 * added to) it; drop: the overridden keys are left out instead. */
static qkv_status read_with(const meta *over, size_t n_over, int drop, const char *arch, qkv_model_config *c,
                            qkv_error *err) {
    gguf_buf b = {0};
    gguf_put_header(&b, 0, 0); /* the key count is set below */
    gguf_put_kv_str(&b, "general.architecture", arch);
    uint64_t n_kv = 1;
    for (size_t i = 0; i < N_GOOD; i++) {
        const meta *m = find_meta(over, n_over, k_good[i].key);
        if (m && drop) continue;
        put_meta(&b, m ? m : &k_good[i]);
        n_kv++;
    }
    for (size_t i = 0; i < n_over && !drop; i++) {
        int known = 0;
        for (size_t j = 0; j < N_GOOD; j++) known |= !strcmp(over[i].key, k_good[j].key);
        if (!known) put_meta(&b, &over[i]), n_kv++;
    }
    gguf_put_kv_tokens(&b, "tokenizer.ggml.tokens", 10);
    n_kv++;
    memcpy(b.p + 16, &n_kv, 8); /* "GGUF", version, n_tensors, then n_kv */
    char path[600];
    snprintf(path, sizeof path, "%s/config.gguf", test_tmpdir());
    CHECK(gguf_buf_save(&b, path), "cannot write %s", path);
    free(b.p);
    qkv_gguf *g = NULL;
    qkv_status st = qkv_gguf_open(&g, path, err);
    if (st == QKV_OK) st = qkv_model_config_read(c, g, err);
    qkv_gguf_close(g);
    return st;
}

TEST(model_config_reads_a_metadata_only_file) {
    qkv_model_config c;
    qkv_error err = {0};
    CHECK(read_with(NULL, 0, 0, "llama", &c, &err) == QKV_OK, "%s", err.msg);
    CHECK(c.n_layer == 2 && c.n_embd == 64 && c.n_head == 4 && c.n_kv_head == 2 && c.head_dim == 16 &&
              c.n_ff == 128 && c.n_ctx_train == 256 && c.n_vocab == 10 && c.tied_embeddings,
          "sizes %d %d %d %d %d %d %d %d", c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.n_ff,
          c.n_ctx_train, c.n_vocab);
    CHECK(c.norm_eps == 1e-5f && c.rope.theta == 500000.0f && c.rope.pairing == QKV_ROPE_INTERLEAVED &&
              c.rope.freq_factors == NULL,
          "eps %g theta %g", (double)c.norm_eps, (double)c.rope.theta);
}

TEST(model_config_refuses_hostile_metadata) {
    static const struct {
        meta m;
        int drop;
        qkv_status want;
        const char *msg;
    } cases[] = {
        {{"llama.block_count", 0, 1u << 30, 0}, 0, QKV_ERR_FORMAT, "llama.block_count = 1073741824 is out of range [1, 4096]"},
        {{"llama.block_count", 0, 0, 0}, 0, QKV_ERR_FORMAT, "llama.block_count = 0 is out of range"},
        {{"llama.attention.head_count", 0, 1u << 24, 0}, 0, QKV_ERR_FORMAT, "llama.attention.head_count = 16777216 is out of range [1, 1024]"},
        {{"llama.attention.head_count_kv", 0, 8, 0}, 0, QKV_ERR_FORMAT, "llama.attention.head_count_kv = 8 is out of range [1, 4]"},
        {{"llama.attention.head_count_kv", 0, 3, 0}, 0, QKV_ERR_FORMAT, "4 heads is not a multiple of 3 KV heads"},
        {{"llama.embedding_length", 0, 1u << 31, 0}, 0, QKV_ERR_FORMAT, "llama.embedding_length = 2147483648 is out of range [1, 131072]"},
        {{"llama.feed_forward_length", 0, 4000000000u, 0}, 0, QKV_ERR_FORMAT, "llama.feed_forward_length = 4000000000 is out of range"},
        {{"llama.context_length", 0, 1u << 30, 0}, 0, QKV_ERR_FORMAT, "llama.context_length = 1073741824 is out of range [1, 16777216]"},
        {{"llama.attention.key_length", 0, 1024, 0}, 0, QKV_ERR_FORMAT, "llama.attention.key_length = 1024 is out of range [1, 256]"},
        {{"llama.attention.key_length", 0, 17, 0}, 0, QKV_ERR_UNSUPPORTED, "head_dim 17 is not supported"},
        {{"llama.attention.layer_norm_rms_epsilon", 1, 0, NAN}, 0, QKV_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon = nan is outside (0, 1)"},
        {{"llama.attention.layer_norm_rms_epsilon", 1, 0, 0}, 0, QKV_ERR_FORMAT, "layer_norm_rms_epsilon = 0 is outside"},
        {{"llama.rope.freq_base", 1, 0, NAN}, 0, QKV_ERR_FORMAT, "llama.rope.freq_base = nan is outside (1, 1e+30)"},
        {{"llama.rope.freq_base", 1, 0, INFINITY}, 0, QKV_ERR_FORMAT, "llama.rope.freq_base = inf is outside"},
        {{"llama.block_count", 0, 0, 0}, 1, QKV_ERR_FORMAT, "missing metadata key llama.block_count"},
        {{"llama.rope.dimension_count", 0, 18, 0}, 0, QKV_ERR_FORMAT, "llama.rope.dimension_count 18 must be even and at most head_dim 16"},
        {{"llama.rope.dimension_count", 0, 7, 0}, 0, QKV_ERR_FORMAT, "llama.rope.dimension_count 7 must be even and at most head_dim 16"},
        {{"llama.vocab_size", 0, 12, 0}, 0, QKV_ERR_FORMAT, "llama.vocab_size = 12, the vocabulary has 10 tokens: they must agree"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qkv_model_config c;
        qkv_error err = {0};
        qkv_status st = read_with(&cases[i].m, 1, cases[i].drop, "llama", &c, &err);
        CHECK(st == cases[i].want, "%s: status %d, want %d (%s)", cases[i].m.key, (int)st, (int)cases[i].want, err.msg);
        CHECK(strstr(err.msg, cases[i].msg) != NULL, "%s: message '%s' lacks '%s'", cases[i].m.key, err.msg,
              cases[i].msg);
        CHECK(strstr(err.msg, "config.gguf") != NULL, "%s: message does not name the file: %s", cases[i].m.key,
              err.msg);
    }
    /* 1024 heads of 256 dims: each within its limit, the product is not */
    qkv_model_config c;
    qkv_error err = {0};
    const meta wide[] = {{"llama.attention.head_count", 0, 1024, 0}, {"llama.attention.head_count_kv", 0, 1024, 0},
                         {"llama.attention.key_length", 0, 256, 0}, {"llama.rope.dimension_count", 0, 256, 0}};
    CHECK(read_with(wide, 4, 0, "llama", &c, &err) == QKV_ERR_FORMAT &&
              strstr(err.msg, "1024 heads x head_dim 256 exceeds 131072"),
          "heads x head_dim: %s", err.msg);
    CHECK(read_with(NULL, 0, 0, "gpt2", &c, &err) == QKV_ERR_UNSUPPORTED && strstr(err.msg, "architecture 'gpt2'"),
          "architecture: %s", err.msg);
}

/* qkv_model_layer_slides, the one rule of sliding layers, on gemma2's and
 * gemma3's patterns (llama.cpp's set_swa_pattern: of each period the last
 * layer is global), and qkv_model_layer_attn built on it. */
TEST(model_config_layer_slides) {
    static const char gemma2[] = "101010", gemma3[] = "111110111110111110";
    qkv_model_config c = {.n_head = 4, .n_kv_head = 1, .head_dim = 16, .window = 512, .swa_period = 6,
                          .rope = {.theta = 1e6f}, .rope_theta_swa = 1e4f};
    for (int l = 0; l < 18; l++) {
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, &c, l);
        const int want = gemma3[l] == '1';
        CHECK(qkv_model_layer_slides(&c, l) == want, "gemma3 layer %d", l);
        CHECK(a.window == (want ? 512 : 0) && a.rope.theta == (want ? 1e4f : 1e6f), "gemma3 layer %d: window %d",
              l, a.window);
    }
    c.swa_period = 2;
    for (int l = 0; l < 6; l++) CHECK(qkv_model_layer_slides(&c, l) == (gemma2[l] == '1'), "gemma2 layer %d", l);
    /* no window, or a period without a global layer: nothing slides */
    const int no_slide[][2] = {{0, 6}, {0, 2}, {512, 1}, {512, 0}};
    for (size_t i = 0; i < sizeof no_slide / sizeof no_slide[0]; i++) {
        c.window = no_slide[i][0], c.swa_period = no_slide[i][1];
        for (int l = 0; l < 7; l++)
            CHECK(!qkv_model_layer_slides(&c, l), "window %d period %d: layer %d slides", c.window, c.swa_period, l);
    }
}

/* qkv_model_layer_rotates, SmolLM3's NoPE layers (llama.cpp: layer il uses
 * RoPE iff (il + 1) % n_no_rope_layer_step != 0, the step 4), and
 * qkv_layer_attn.no_rope built on it; an interval of 0 rotates every layer. */
TEST(model_config_layer_rotates) {
    static const char smollm3[] = "111011101110"; /* transformers' no_rope_layers for 12 layers, interval 4 */
    qkv_model_config c = {.n_head = 4, .n_kv_head = 1, .head_dim = 16, .no_rope_interval = 4, .rope = {.theta = 1e6f}};
    for (int l = 0; l < 12; l++) {
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, &c, l);
        const int want = smollm3[l] == '1';
        CHECK(qkv_model_layer_rotates(&c, l) == want && a.no_rope == !want && a.rope.theta == 1e6f,
              "smollm3 layer %d: no_rope %d", l, a.no_rope);
    }
    c.no_rope_interval = 0;
    for (int l = 0; l < 12; l++) CHECK(qkv_model_layer_rotates(&c, l), "interval 0: layer %d without RoPE", l);
}

/* phi3 (gguf_build.h's tiny one: head 16, rope.dimension_count 8, context 256
 * of original 64): partial rotary, fused weights, LongRoPE's original context
 * and attention factor: the file's 1.19, else llama.cpp's converter's
 * sqrt(1 + ln(256 / 64) / ln(64)) = sqrt(4 / 3). The llama row: neither. */
TEST(model_config_phi3_partial_rotary_and_longrope) {
    const gguf_kv none = {.key = "phi3.rope.scaling.attn_factor", .type = QKV_GGUF_TYPE_F32, .f = 1.19f};
    for (int drop = 0; drop < 2; drop++) {
        gguf_tiny_spec s = {.arch = "phi3", .n_layer = 2, .n_embd = 32, .n_head = 2, .n_kv_head = 1, .head_dim = 16,
                            .n_ff = 64, .byte_vocab = 1, .bad_block = -1, .kv = &none, .n_kv = 1,
                            .drop = drop ? "phi3.rope.scaling.attn_factor" : NULL};
        gguf_buf b = {0};
        gguf_put_tiny_model(&b, &s);
        char path[600];
        snprintf(path, sizeof path, "%s/phi3-%d.gguf", test_tmpdir(), drop);
        CHECK(gguf_buf_save(&b, path), "cannot write %s", path);
        free(b.p);
        qkv_gguf *g = NULL;
        qkv_model_config c;
        qkv_error err = {0};
        CHECK(qkv_gguf_open(&g, path, &err) == QKV_OK && qkv_model_config_read(&c, g, &err) == QKV_OK, "%s", err.msg);
        qkv_gguf_close(g);
        if (test_failures()) return;
        const float want = drop ? sqrtf(4.0f / 3.0f) : 1.19f;
        CHECK(c.rope.n_rot == 8 && c.fused && c.rope_ctx_orig == 64 && c.rope.pairing == QKV_ROPE_HALF &&
                  fabsf(c.rope.attn_factor - want) < 1e-6f && c.window == 0,
              "drop %d: n_rot %d fused %d orig %d attn_factor %g (want %g) window %d", drop, c.rope.n_rot, c.fused,
              c.rope_ctx_orig, (double)c.rope.attn_factor, (double)want, c.window);
    }
    qkv_model_config c;
    qkv_error err = {0};
    CHECK(read_with(NULL, 0, 0, "llama", &c, &err) == QKV_OK && c.rope.n_rot == 0 && c.rope.attn_factor == 0 &&
              c.rope_ctx_orig == 0 && !c.fused,
          "llama: n_rot %d attn_factor %g orig %d fused %d", c.rope.n_rot, (double)c.rope.attn_factor, c.rope_ctx_orig,
          c.fused);
}
