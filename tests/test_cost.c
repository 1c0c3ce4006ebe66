/*
 * test_cost.c — `qkv cost` reproduces the article's accounting for
 * Llama-3.1-8B with its rounding: attention 4.3 and 68.7 GFLOPs per token at
 * 8K and 128K against 15.0 GFLOPs of weight matmuls; prefill attention 14%,
 * 57% and 2.3x of the fixed part at 8K, 32K, 128K; a bf16 score table of
 * 4, 64 and 1024 GiB per layer; a KV cache of 128 KiB per token, 16 GiB at
 * 128K. Also the library's qkv_cost_eval directly, the JSON keys (units in
 * the names), sizes by hand, --dtype, --model on a small GGUF written here,
 * and bad input. Sliding layers: Gemma 3 270M's KV bytes at 32K by hand (full,
 * sliding-window and llama.cpp's cache), prefill FLOPs against a brute-force
 * sum over rows and layers, the presets' parameter counts against the ones
 * their hub pages publish, and a Gemma 3 GGUF's metadata against the preset.
 */
#include "gguf_build.h"
#include "testing.h"

#include "clitext.h"
#include "qkv.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *run_ok(const char *const *argv) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "qkv cost: exit %d, stderr: %s", rc, err ? err : "");
    CHECK(err && err[0] == 0, "stderr not empty: %s", err ? err : "");
    free(err);
    return out;
}

/* The numbers of the row with this label, each to decimals. */
static void check_row(const char *text, const char *label, const double *want, int n, int decimals) {
    const char *line = cli_find_line(text, label);
    CHECK(line != NULL, "no row '%s'", label);
    if (!line) return;
    double got[16];
    int k = cli_line_numbers(line, got, 16);
    CHECK(k == n, "row '%s': %d numbers, want %d", label, k, n);
    for (int i = 0; i < n && i < k; i++)
        CHECK(cli_rounds_to(got[i], want[i], decimals), "row '%s' column %d: %.6g, want %.*f", label, i,
              got[i], decimals, want[i]);
}

/* 1 if both commands print the same JSON from the key `from` on (after the
 * model's name and source). */
static int same_figures(const char *const *a, const char *const *b, const char *from) {
    char *o1 = run_ok(a), *o2 = run_ok(b);
    const char *c1 = o1 ? strstr(o1, from) : NULL, *c2 = o2 ? strstr(o2, from) : NULL;
    int same = c1 && c2 && !strcmp(c1, c2);
    free(o1);
    free(o2);
    return same;
}

static int line_has(const char *text, const char *label, const char *what) {
    const char *line = cli_find_line(text, label);
    if (!line) return 0;
    const char *nl = strchr(line, '\n');
    const char *hit = strstr(line, what);
    return hit && (!nl || hit < nl);
}

TEST(cost_library_formulas) {
    qkv_model_config c;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&c, NULL, "llama-3.1-8b", &err) == QKV_OK, "preset: %s", err.msg);
    qkv_cost r;
    CHECK(qkv_cost_eval(&r, &c, 0, 8192, 2, &err) == QKV_OK, "eval: %s", err.msg);
    /* 8,030,261,248 is Llama-3.1-8B's published parameter count */
    CHECK(r.params_total == 8030261248.0, "params_total %.0f", r.params_total);
    /* matmul weights: 32 x (q 4096^2 + k,v 2 x 4096 x 1024 + o 4096^2 + 3 x 4096 x 14336) + lm_head */
    double layer = 4096.0 * 4096 * 2 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336;
    CHECK(r.params_matmul == 32 * layer + 4096.0 * 128256, "params_matmul %.0f", r.params_matmul);
    CHECK(cli_rounds_to(r.weight_flops_per_token / 1e9, 15.0, 1), "weight GFLOPs %.4f", r.weight_flops_per_token / 1e9);
    CHECK(r.attn_flops_per_token == 4.0 * 8192 * 4096 * 32, "attn flops");
    CHECK(r.score_table_bytes_per_layer == 32.0 * 8192 * 8192 * 2, "score table");
    CHECK(r.kv_bytes_per_token == 131072, "kv per token %.0f", r.kv_bytes_per_token);
    CHECK(r.flash_bytes_per_layer == 32.0 * 8192 * 4, "flash bytes");
    /* without the lm_head the figure would be 13.96, not the article's 15.0 */
    CHECK(!cli_rounds_to((r.params_matmul - 4096.0 * 128256) * 2 / 1e9, 15.0, 1), "lm_head made no difference");
    CHECK(qkv_cost_eval(&r, &c, 0, 0, 2, &err) == QKV_ERR_INVALID, "ctx 0 accepted");
    CHECK(qkv_cost_preset(&c, NULL, "gpt-5", &err) == QKV_ERR_INVALID && strstr(err.msg, "llama-3.1-8b"),
          "unknown preset: %s", err.msg);
    CHECK(qkv_cost_preset(&c, NULL, "llama-3.1-8b", NULL) == QKV_OK, "preset again");
    c.n_kv_head = 5;
    CHECK(qkv_cost_check(&c, &err) == QKV_ERR_INVALID, "heads 32 / kv-heads 5 accepted");
    for (int i = 0; qkv_cost_preset_id(i); i++) {
        CHECK(qkv_cost_preset(&c, NULL, qkv_cost_preset_id(i), &err) == QKV_OK, "preset %d", i);
        CHECK(qkv_cost_check(&c, &err) == QKV_OK, "preset %s: %s", qkv_cost_preset_id(i), err.msg);
    }
}

TEST(cost_text_reproduces_the_article) {
    const char *argv[] = {"cost", NULL};
    char *out = run_ok(argv);
    CHECK(out && strstr(out, "Llama-3.1-8B"), "no model name");
    CHECK(line_has(out, "context (tokens)", "8,192") && line_has(out, "context (tokens)", "32,768") &&
              line_has(out, "context (tokens)", "131,072"),
          "default contexts are not 8K, 32K, 128K");
    const double attn[] = {4.3, 17.2, 68.7}, fixed[] = {15.0, 15.0, 15.0};
    check_row(out, "attention  4·n·Hq·D·L", attn, 3, 1);
    check_row(out, "weight matmuls  2 x 7.50 B", fixed, 3, 1);
    CHECK(line_has(out, "attention  4·n·Hq·D·L", "GFLOPs"), "per-token attention not in GFLOPs");
    const double share[] = {14, 57, 2.3};
    check_row(out, "attention / fixed part", share, 3, 1);
    CHECK(line_has(out, "attention / fixed part", "14%") && line_has(out, "attention / fixed part", "57%") &&
              line_has(out, "attention / fixed part", "2.3x"),
          "prefill share is not 14%% 57%% 2.3x");
    const double table[] = {4, 64, 1024};
    check_row(out, "score table per layer  32·n²·2 B", table, 3, 0);
    CHECK(line_has(out, "score table per layer", "1024 GiB"), "score table not in GiB");
    const double kv[] = {1, 4, 16};
    check_row(out, "KV cache, all layers", kv, 3, 0);
    CHECK(line_has(out, "KV cache, all layers", "16 GiB"), "KV cache at 128K is not 16 GiB");
    CHECK(out && strstr(out, "KV cache 128 KiB per token"), "KV cache per token is not 128 KiB");
    CHECK(out && strstr(out, "8.03 B parameters"), "parameter count");
    CHECK(out && strstr(out, "FlashAttention") && strstr(out, "saves"), "no FlashAttention saving");
    free(out);
}

TEST(cost_json_keys_have_units) {
    const char *argv[] = {"cost", "--json", NULL};
    char *out = run_ok(argv);
    const char *keys[] = {"\"model\"", "\"layers\": 32", "\"hidden\": 4096", "\"heads\": 32", "\"kv_heads\": 8",
                          "\"head_dim\": 128", "\"ffn\": 14336", "\"vocab\": 128256", "\"dtype\": \"bf16\"",
                          "\"contexts\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(out && strstr(out, keys[i]), "JSON lacks %s", keys[i]);
    CHECK(cli_rounds_to(cli_json_number(out, "weight_gflops_per_token"), 15.0, 1), "weight_gflops_per_token");
    CHECK(cli_json_number(out, "kv_cache_bytes_per_token") == 131072, "kv_cache_bytes_per_token");
    CHECK(cli_json_number(out, "kv_cache_kib_per_token") == 128, "kv_cache_kib_per_token");
    CHECK(cli_json_number(out, "params_total") == 8030261248.0, "params_total");
    const struct {
        double ctx, attn_gflops, percent, table_gib, kv_gib;
    } want[] = {{8192, 4.3, 14, 4, 1}, {32768, 17.2, 57, 64, 4}, {131072, 68.7, 229, 1024, 16}};
    for (size_t i = 0; i < 3; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"ctx_tokens\": %.0f,", want[i].ctx);
        const char *c = out ? strstr(out, pat) : NULL;
        CHECK(c != NULL, "no context %.0f", want[i].ctx);
        if (!c) continue;
        CHECK(cli_rounds_to(cli_json_number(c, "attn_gflops_per_token"), want[i].attn_gflops, 1),
              "attn_gflops_per_token at %.0f: %.4f", want[i].ctx, cli_json_number(c, "attn_gflops_per_token"));
        CHECK(cli_rounds_to(cli_json_number(c, "prefill_attn_percent"), want[i].percent, 0),
              "prefill_attn_percent at %.0f: %.3f", want[i].ctx, cli_json_number(c, "prefill_attn_percent"));
        CHECK(cli_json_number(c, "score_table_gib_per_layer") == want[i].table_gib, "score_table_gib_per_layer");
        CHECK(cli_json_number(c, "kv_cache_gib") == want[i].kv_gib, "kv_cache_gib");
        const char *unit_keys[] = {"attn_flops_per_token", "prefill_attn_flops", "prefill_fixed_tflops",
                                   "prefill_attn_ratio", "score_table_bytes_per_layer",
                                   "flash_bytes_per_layer", "flash_saves_bytes_per_layer", "kv_cache_bytes"};
        for (size_t k = 0; k < sizeof unit_keys / sizeof unit_keys[0]; k++)
            CHECK(!isnan(cli_json_number(c, unit_keys[k])), "no %s", unit_keys[k]);
    }
    const char *c128 = out ? strstr(out, "\"ctx_tokens\": 131072,") : NULL;
    CHECK(cli_rounds_to(cli_json_number(c128, "prefill_attn_ratio"), 2.3, 1), "2.3x at 128K");
    free(out);
}

TEST(cost_by_hand_dtype_and_ctx) {
    /* sizes by hand equal the preset */
    const char *a[] = {"cost", "--json", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
                       "--head-dim", "128", "--ffn", "14336", "--vocab", "128256", NULL};
    const char *b[] = {"cost", "--json", NULL};
    char *o1 = run_ok(a), *o2 = run_ok(b);
    const char *c1 = o1 ? strstr(o1, "\"dtype\"") : NULL, *c2 = o2 ? strstr(o2, "\"dtype\"") : NULL;
    CHECK(c1 && c2 && !strcmp(c1, c2), "sizes by hand differ from the preset");
    free(o1);
    free(o2);
    /* a preset with one size changed: MHA instead of GQA, 4x the KV cache */
    const char *m[] = {"cost", "--preset", "llama-3.1-8b", "--kv-heads", "32", "--json", NULL};
    char *o = run_ok(m);
    CHECK(cli_json_number(o, "kv_cache_kib_per_token") == 512, "MHA KV per token");
    free(o);
    /* f32 storage doubles the table and the cache */
    const char *f[] = {"cost", "--dtype", "f32", "--ctx", "8K,128k", NULL};
    o = run_ok(f);
    const double table[] = {8, 2048};
    check_row(o, "score table per layer  32·n²·4 B", table, 2, 0);
    CHECK(o && strstr(o, "KV cache 256 KiB per token"), "f32 KV per token is not 256 KiB");
    CHECK(o && strstr(o, "131,072"), "--ctx 128k is not 131,072");
    free(o);
}

typedef struct {
    const char *key; /* after "<arch>." */
    uint32_t v;
} meta_u32;

/* A metadata-only GGUF v3 (no tensors): architecture, name, the u32 keys
 * <arch>.<key> and a token list of n_tokens. 1 on success. */
static int write_meta_gguf(const char *path, const char *arch, const char *name, const meta_u32 *kv, int n_kv,
                           uint64_t n_tokens) {
    gguf_buf b = {0};
    gguf_put_header(&b, 0, (uint64_t)n_kv + 3);
    gguf_put_kv_str(&b, "general.architecture", arch);
    gguf_put_kv_str(&b, "general.name", name);
    for (int i = 0; i < n_kv; i++) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", arch, kv[i].key);
        gguf_put_kv_u32(&b, key, kv[i].v);
    }
    gguf_put_kv_tokens(&b, "tokenizer.ggml.tokens", n_tokens);
    int ok = gguf_buf_save(&b, path);
    free(b.p);
    return ok;
}

/* A tiny Llama with n_kv_head KV heads (of 4): enough for the cost model. */
static int write_tiny_gguf(const char *path, uint32_t n_kv_head) {
    const meta_u32 kv[] = {{"block_count", 2},       {"embedding_length", 64},   {"attention.head_count", 4},
                           {"attention.head_count_kv", n_kv_head}, {"feed_forward_length", 128},
                           {"context_length", 256}};
    return write_meta_gguf(path, "llama", "Tiny Llama", kv, 6, 10);
}

TEST(cost_model_from_gguf) {
    char path[600];
    snprintf(path, sizeof path, "%s/tiny.gguf", test_tmpdir());
    CHECK(write_tiny_gguf(path, 2), "cannot write %s", path);

    /* the library's reader, which qkv_model_open uses too */
    qkv_gguf *g = NULL;
    qkv_model_config mc;
    qkv_error err = {0};
    CHECK(qkv_gguf_open(&g, path, &err) == QKV_OK && qkv_model_config_read(&mc, g, &err) == QKV_OK, "%s", err.msg);
    CHECK(mc.n_layer == 2 && mc.n_embd == 64 && mc.n_head == 4 && mc.n_kv_head == 2 && mc.head_dim == 16 &&
              mc.n_ff == 128 && mc.n_vocab == 10 && mc.n_ctx_train == 256 && mc.tied_embeddings,
          "config %d %d %d %d %d %d %d %d", mc.n_layer, mc.n_embd, mc.n_head, mc.n_kv_head, mc.head_dim, mc.n_ff,
          mc.n_vocab, mc.n_ctx_train);
    qkv_gguf_close(g);

    const char *a[] = {"cost", "--model", path, "--json", NULL};
    const char *b[] = {"cost", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
                       "--vocab", "10", "--tied", "--json", NULL};
    char *o1 = run_ok(a), *o2 = run_ok(b);
    CHECK(o1 && strstr(o1, "\"name\": \"Tiny Llama\""), "general.name not used");
    CHECK(o1 && strstr(o1, "\"head_dim\": 16") && strstr(o1, "\"vocab\": 10"), "head_dim / vocab from GGUF");
    CHECK(o1 && strstr(o1, "\"tied_embeddings\": true"), "no output.weight should mean tied");
    const char *c1 = o1 ? strstr(o1, "\"dtype\"") : NULL, *c2 = o2 ? strstr(o2, "\"dtype\"") : NULL;
    CHECK(c1 && c2 && !strcmp(c1, c2), "GGUF figures differ from the same sizes by hand");
    free(o1);
    free(o2);

    /* the real SmolLM2 file (models/ is not committed: make model) */
    const char *smol = test_model_path();
    if (test_require_model()) {
        const char *s1[] = {"cost", "--model", smol, "--json", NULL};
        const char *s2[] = {"cost", "--preset", "smollm2-135m", "--json", NULL};
        CHECK(same_figures(s1, s2, "\"chunk_tokens\""), "SmolLM2 GGUF differs from the smollm2-135m preset");
    }

    /* a file that is not GGUF */
    snprintf(path, sizeof path, "%s/not.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("this is not a gguf file at all, just text\n", f);
        fclose(f);
    }
    CHECK_BAD_INPUT("cost", "--model", path);

    /* 4 heads over 3 KV heads: refused by the same check qkv_model_open makes */
    snprintf(path, sizeof path, "%s/gqa3.gguf", test_tmpdir());
    CHECK(write_tiny_gguf(path, 3), "cannot write %s", path);
    CHECK_BAD_INPUT("cost", "--model", path);
    char *o = NULL, *e = NULL;
    test_run_cli((const char *[]){"cost", "--model", path, NULL}, NULL, &o, &e);
    CHECK(e && strstr(e, "not a multiple"), "GQA check: %s", e ? e : "");
    free(o);
    free(e);
}

TEST(cost_bad_input) {
    CHECK_BAD_INPUT("cost", "--preset", "llama-9");
    CHECK_BAD_INPUT("cost", "--ctx", "-8192");
    CHECK_BAD_INPUT("cost", "--ctx", "0");
    CHECK_BAD_INPUT("cost", "--ctx", "8192,-1");
    CHECK_BAD_INPUT("cost", "--ctx", "lots");
    CHECK_BAD_INPUT("cost", "--ctx", "8192,");
    CHECK_BAD_INPUT("cost", "--layers", "0");
    CHECK_BAD_INPUT("cost", "--hidden", "4k");
    CHECK_BAD_INPUT("cost", "--layers", "32");
    CHECK_BAD_INPUT("cost", "--dtype", "f64");
    CHECK_BAD_INPUT("cost", "--preset", "llama-3.1-8b", "--kv-heads", "5");
    CHECK_BAD_INPUT("cost", "--model", "/nonexistent/model.gguf");
    CHECK_BAD_INPUT("cost", "--preset", "llama-3.1-8b", "--model", "x.gguf");
    CHECK_BAD_INPUT("cost", "--bogus");
    CHECK_BAD_INPUT("cost", "--preset");
}

/* ---------------------------------------------------------- sliding layers */

TEST(cost_presets_match_published_parameter_counts) {
    /* every count is the hub's safetensors total, except Qwen3-0.6B's 751,632,384,
     * which counts the tied lm_head a second time (+ 151936 x 1024) */
    const struct {
        const char *id;
        double params;
        int window, period, sliding;
    } want[] = {{"llama-3.1-8b", 8030261248.0, 0, 0, 0},     {"smollm2-135m", 134515008.0, 0, 0, 0},
                {"mistral-7b", 7248023552.0, 0, 0, 0},       {"qwen2.5-0.5b", 494032768.0, 0, 0, 0},
                {"qwen3-0.6b", 751632384.0 - 151936.0 * 1024, 0, 0, 0},
                {"gemma-2-2b", 2614341888.0, 4096, 2, 13},   {"gemma-3-270m", 268098176.0, 512, 6, 15},
                {"gemma-3-1b", 999885952.0, 512, 6, 22}};
    qkv_error err = {0};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        qkv_model_config c;
        qkv_cost r;
        CHECK(qkv_cost_preset(&c, NULL, want[i].id, &err) == QKV_OK, "preset %s: %s", want[i].id, err.msg);
        CHECK(qkv_cost_eval(&r, &c, 0, 4096, 2, &err) == QKV_OK, "eval %s: %s", want[i].id, err.msg);
        CHECK(r.params_total == want[i].params, "%s: %.0f parameters, want %.0f", want[i].id, r.params_total,
              want[i].params);
        CHECK(c.window == want[i].window && (!c.window || c.swa_period == want[i].period) &&
                  r.n_sliding == want[i].sliding,
              "%s: window %d period %d, %d sliding layers", want[i].id, c.window, c.swa_period, r.n_sliding);
    }
    qkv_model_config c;
    CHECK(qkv_cost_preset(&c, NULL, "qwen3-0.6b", &err) == QKV_OK && c.head_dim == 128 && c.n_embd / c.n_head == 64,
          "Qwen3-0.6B's key_length 128 is not hidden / heads");
    /* SmolLM3-3B: the count from its config (36 x 78,123,008 + the tied
     * 128256 x 2048 embedding + the final norm), not checked against the hub */
    qkv_cost r;
    CHECK(qkv_cost_preset(&c, NULL, "smollm3-3b", &err) == QKV_OK && qkv_cost_eval(&r, &c, 0, 4096, 2, &err) == QKV_OK &&
              r.params_total == 3075098624.0 && c.no_rope_interval == 4 && !qkv_model_layer_rotates(&c, 35),
          "SmolLM3-3B: %.0f parameters %s", r.params_total, err.msg);
    /* OLMo-2-1B: from its config, not checked against the hub: 16 x (4 x 2048^2
     * + 3 x 2048 x 8192 + two post-norms of 2048 + QK-norms of 2048 and 2048)
     * + the untied 100352 x 2048 embedding and lm_head + the final norm */
    CHECK(qkv_cost_preset(&c, NULL, "olmo-2-1b", &err) == QKV_OK && qkv_cost_eval(&r, &c, 0, 4096, 2, &err) == QKV_OK &&
              r.params_total == 16.0 * (4.0 * 2048 * 2048 + 3.0 * 2048 * 8192 + 4.0 * 2048) + 2.0 * 100352 * 2048 + 2048 &&
              r.params_total == 1484916736.0,
          "OLMo-2-1B: %.0f parameters %s", r.params_total, err.msg);
    /* Phi-3-mini: 32 x (4 x 3072^2 + 3 x 3072 x 8192 + two norms of 3072) + the
     * untied 32064 x 3072 embedding and lm_head + the final norm: the 3.82 B
     * of its model card */
    CHECK(qkv_cost_preset(&c, NULL, "phi-3-mini", &err) == QKV_OK && qkv_cost_eval(&r, &c, 0, 4096, 2, &err) == QKV_OK &&
              r.params_total == 3821079552.0,
          "Phi-3-mini: %.0f parameters %s", r.params_total, err.msg);
}

TEST(cost_gemma3_270m_kv_bytes_at_32k) {
    qkv_model_config c;
    qkv_cost r;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&c, NULL, "gemma-3-270m", &err) == QKV_OK, "preset: %s", err.msg);
    /* 18 layers, l % 6 < 5 slides: 15 sliding (W 512), 3 global (5, 11, 17);
     * a row is one layer's K and V of one token: 2 x 1 KV head x 256 dims */
    for (size_t e = 2; e <= 4; e += 2) {
        CHECK(qkv_cost_eval(&r, &c, 0, 32768, e, &err) == QKV_OK, "eval: %s", err.msg);
        const double row = 2.0 * 1 * 256 * e;
        CHECK(r.n_sliding == 15 && r.chunk == 512, "%d sliding, chunk %d", r.n_sliding, r.chunk);
        CHECK(r.kv_cache_bytes == 18 * 32768 * row, "full %.0f", r.kv_cache_bytes);
        /* a sliding layer keeps W - 1 + C = 511 + 512 rows */
        CHECK(r.kv_cache_bytes_swa == (15 * 1023 + 3 * 32768) * row, "swa %.0f", r.kv_cache_bytes_swa);
        /* llama.cpp: 32768 cells per global layer, pad256(min(32768, 512 + 512)) = 1024 per sliding one */
        CHECK(r.kv_cache_bytes_llama_cpp == (15 * 1024 + 3 * 32768) * row, "llama.cpp %.0f", r.kv_cache_bytes_llama_cpp);
        CHECK(r.kv_read_bytes_per_token == (15 * 512 + 3 * 32768) * row, "read %.0f", r.kv_read_bytes_per_token);
        CHECK(r.attn_flops_per_token == 4.0 * 4 * 256 * (15 * 512 + 3 * 32768), "attn %.0f", r.attn_flops_per_token);
        CHECK(r.attn_flops_per_token_global == 4.0 * 4 * 256 * 18 * 32768, "attn if global");
    }
    CHECK(r.kv_cache_bytes == 1207959552.0 && r.kv_cache_bytes_swa == 232753152.0 &&
              r.kv_cache_bytes_llama_cpp == 232783872.0,
          "f32 figures: %.0f %.0f %.0f", r.kv_cache_bytes, r.kv_cache_bytes_swa, r.kv_cache_bytes_llama_cpp);
    /* short contexts: nothing to drop; llama.cpp pads n to 256 */
    const struct {
        int64_t n;
        double swa_rows, llama_rows;
    } small[] = {{1, 18, 18 * 256}, {100, 18 * 100, 18 * 256}, {600, 18 * 600, 18 * 768},
                 {1023, 18 * 1023, 18 * 1024}, {1024, 15 * 1023 + 3 * 1024, 18 * 1024},
                 {1025, 15 * 1023 + 3 * 1025, 15 * 1024 + 3 * 1280}};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        CHECK(qkv_cost_eval(&r, &c, 0, small[i].n, 2, &err) == QKV_OK, "eval: %s", err.msg);
        CHECK(r.kv_cache_bytes_swa == small[i].swa_rows * 1024 && r.kv_cache_bytes_llama_cpp == small[i].llama_rows * 1024,
              "n %lld: swa %.0f rows, llama.cpp %.0f rows", (long long)small[i].n, r.kv_cache_bytes_swa / 1024,
              r.kv_cache_bytes_llama_cpp / 1024);
    }
    /* one token a call: W rows; llama.cpp pad256(512 + 1) */
    CHECK(qkv_cost_eval(&r, &c, 1, 32768, 2, &err) == QKV_OK && r.kv_cache_bytes_swa == (15 * 512 + 3 * 32768) * 1024.0 &&
              r.kv_cache_bytes_llama_cpp == (15 * 768 + 3 * 32768) * 1024.0,
          "chunk 1: %.0f %.0f", r.kv_cache_bytes_swa, r.kv_cache_bytes_llama_cpp);
    /* without a window every cache is the full one (llama.cpp's only padded) */
    c.window = 0;
    CHECK(qkv_cost_eval(&r, &c, 0, 32768, 2, &err) == QKV_OK && r.n_sliding == 0 &&
              r.kv_cache_bytes_swa == r.kv_cache_bytes && r.kv_cache_bytes_llama_cpp == r.kv_cache_bytes &&
              r.prefill_attn_flops == r.prefill_attn_flops_global,
          "no window");
}

/* Brute force: every layer, every row t, its keys min(t + 1, W) or t + 1. */
static double brute_prefill(const qkv_model_config *c, int64_t n) {
    double keys = 0;
    for (int l = 0; l < c->n_layer; l++) {
        const int slides = qkv_model_layer_slides(c, l);
        for (int64_t t = 0; t < n; t++) keys += slides && t + 1 > c->window ? c->window : (double)(t + 1);
    }
    return 4.0 * c->n_head * c->head_dim * keys;
}

TEST(cost_prefill_flops_with_windows_against_brute_force) {
    qkv_error err = {0};
    qkv_model_config c;
    qkv_cost r;
    CHECK(qkv_cost_preset(&c, NULL, "gemma-3-270m", &err) == QKV_OK, "preset: %s", err.msg);
    const int64_t ns[] = {1, 2, 511, 512, 513, 1000, 4096};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        CHECK(qkv_cost_eval(&r, &c, 0, ns[i], 2, &err) == QKV_OK, "eval: %s", err.msg);
        const double want = brute_prefill(&c, ns[i]);
        CHECK(r.prefill_attn_flops == want, "gemma-3-270m n %lld: %.0f, want %.0f", (long long)ns[i],
              r.prefill_attn_flops, want);
    }
    /* shapes by hand: every layer count against every period, windows below and above n */
    c = (qkv_model_config){.n_layer = 1, .n_embd = 64, .n_head = 4, .n_kv_head = 2, .head_dim = 16, .n_ff = 128,
                           .n_vocab = 10, .tied_embeddings = 1, .window = 7};
    for (int L = 1; L <= 13; L++)
        for (int P = 2; P <= 7; P++)
            for (int W = 1; W <= 40; W += 13) {
                c.n_layer = L, c.swa_period = P, c.window = W;
                int sliding = 0;
                for (int l = 0; l < L; l++) sliding += l % P < P - 1;
                for (int64_t n = 1; n <= 50; n += 7) {
                    if (qkv_cost_eval(&r, &c, 0, n, 4, &err) != QKV_OK) {
                        CHECK(0, "eval: %s", err.msg);
                        return;
                    }
                    CHECK(r.n_sliding == sliding, "L %d P %d: %d sliding, want %d", L, P, r.n_sliding, sliding);
                    CHECK(r.prefill_attn_flops == brute_prefill(&c, n), "L %d P %d W %d n %lld: %.0f, want %.0f", L, P,
                          W, (long long)n, r.prefill_attn_flops, brute_prefill(&c, n));
                    /* decode of the n-th token: the keys the prefill's last row saw */
                    double last = brute_prefill(&c, n) - (n > 1 ? brute_prefill(&c, n - 1) : 0);
                    CHECK(r.attn_flops_per_token == last, "decode at %lld: %.0f, want %.0f", (long long)n,
                          r.attn_flops_per_token, last);
                }
            }
    /* without a window, exactly 2 n (n + 1) Hq D L */
    CHECK(qkv_cost_preset(&c, NULL, "llama-3.1-8b", &err) == QKV_OK && qkv_cost_eval(&r, &c, 0, 8192, 2, &err) == QKV_OK &&
              r.prefill_attn_flops == 2.0 * 8192 * 8193 * 4096 * 32,
          "llama prefill %.0f", r.prefill_attn_flops);
}

TEST(cost_sliding_window_refuses_bad_values) {
    qkv_error err = {0};
    qkv_model_config c;
    qkv_cost r;
    CHECK(qkv_cost_preset(&c, NULL, "gemma-3-270m", &err) == QKV_OK, "preset");
    const struct {
        int window, period, chunk;
        const char *says;
    } bad[] = {{-1, 6, 0, "window"}, {512, 1, 0, "swa-period"}, {512, 0, 0, "swa-period"},
               {0, -2, 0, "swa-period"}, {512, 6, -1, "chunk"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_model_config b = c;
        b.window = bad[i].window, b.swa_period = bad[i].period;
        err.msg[0] = 0;
        CHECK(qkv_cost_eval(&r, &b, bad[i].chunk, 32768, 2, &err) == QKV_ERR_INVALID && strstr(err.msg, bad[i].says) &&
                  !strchr(err.msg, '\n'),
              "window %d period %d chunk %d: %s", b.window, b.swa_period, bad[i].chunk, err.msg);
        /* the chunk is eval's argument, not the model's */
        CHECK((qkv_cost_check(&b, &err) == QKV_ERR_INVALID) == (bad[i].chunk == 0), "check, case %zu", i);
    }
    c.window = 0, c.swa_period = 0; /* no window: the period does not matter */
    CHECK(qkv_cost_check(&c, &err) == QKV_OK, "window 0: %s", err.msg);
    CHECK_BAD_INPUT("cost", "--preset", "gemma-3-270m", "--swa-period", "1");
    CHECK_BAD_INPUT("cost", "--window", "512"); /* llama-3.1-8b has no period */
    CHECK_BAD_INPUT("cost", "--preset", "gemma-3-270m", "--window", "-4");
    CHECK_BAD_INPUT("cost", "--preset", "gemma-3-270m", "--chunk", "0");
    const char *a[] = {"cost", "--preset", "gemma-2-2b", "--swa-period", "1", NULL};
    CHECK_BAD_CLI(a, "swa-period >= 2");
}

TEST(cost_cli_gemma3_270m_32k) {
    const char *j[] = {"cost", "--preset", "gemma-3-270m", "--ctx", "32768", "--json", "--dtype", "f16", NULL};
    char *out = run_ok(j);
    CHECK(out && strstr(out, "\"window\": 512, \"swa_period\": 6, \"sliding_layers\": 15"), "model: %s", out ? out : "");
    CHECK(cli_json_number(out, "chunk_tokens") == 512, "chunk_tokens");
    CHECK(cli_json_number(out, "kv_cache_bytes") == 603979776.0, "kv_cache_bytes %.0f", cli_json_number(out, "kv_cache_bytes"));
    CHECK(cli_json_number(out, "kv_cache_swa_bytes") == 116376576.0, "kv_cache_swa_bytes");
    CHECK(cli_json_number(out, "kv_cache_llama_cpp_bytes") == 116391936.0, "kv_cache_llama_cpp_bytes");
    CHECK(cli_json_number(out, "kv_read_bytes_per_token") == (15 * 512 + 3 * 32768) * 1024.0, "kv_read_bytes_per_token");
    CHECK(cli_json_number(out, "attn_flops_per_token") == 4096.0 * (15 * 512 + 3 * 32768), "attn_flops_per_token");
    CHECK(cli_json_number(out, "attn_flops_per_token_if_global") == 4096.0 * 18 * 32768, "if global");
    CHECK(cli_json_number(out, "prefill_attn_flops") < cli_json_number(out, "prefill_attn_flops_if_global") / 5,
          "sliding layers cut the prefill's attention by more than 5x");
    free(out);

    const char *t[] = {"cost", "--preset", "gemma-3-270m", "--ctx", "8K,32K", "--dtype", "f32", NULL};
    out = run_ok(t);
    CHECK(out && strstr(out, "15 of 18 layers slide"), "sliding line: %s", out ? out : "");
    const double full[] = {288, 1.1}, swa[] = {78, 222}; /* MiB, then 1.125 GiB */
    check_row(out, "KV cache, all layers", full, 2, 1);
    check_row(out, "sliding-window cache, C = 512", swa, 2, 0);
    check_row(out, "llama.cpp's cache (iSWA)", swa, 2, 0);
    CHECK(out && cli_find_line(out, "KV read by one decode token") && cli_find_line(out, "... were every layer global"),
          "rows: %s", out ? out : "");
    free(out);

    /* --window 0: every layer global, no sliding rows; --chunk sizes the caches */
    const char *g[] = {"cost", "--preset", "gemma-3-270m", "--window", "0", "--ctx", "32K", "--json", NULL};
    out = run_ok(g);
    CHECK(out && strstr(out, "\"sliding_layers\": 0") && strstr(out, "(modified)") &&
              cli_json_number(out, "kv_cache_swa_bytes") == cli_json_number(out, "kv_cache_bytes"),
          "window 0: %s", out ? out : "");
    free(out);
    const char *k[] = {"cost", "--preset", "gemma-3-270m", "--chunk", "1", "--ctx", "32K", "--json", NULL};
    out = run_ok(k);
    CHECK(cli_json_number(out, "kv_cache_swa_bytes") == (15 * 512 + 3 * 32768) * 1024.0 &&
              !strstr(out, "(modified)"),
          "chunk 1: %s", out ? out : "");
    free(out);
    /* no sliding layer: none of the sliding rows */
    const char *l[] = {"cost", NULL};
    out = run_ok(l);
    CHECK(out && !cli_find_line(out, "sliding-window cache") && !strstr(out, "layers slide"), "llama: %s", out ? out : "");
    free(out);
}

/* Gemma 3 270M's metadata as llama.cpp's converter writes it (no tensors):
 * the window, pattern and head_dim come from the keys. 1 on success. */
static int write_gemma3_gguf(const char *path) {
    const meta_u32 kv[] = {{"block_count", 18},         {"embedding_length", 640},     {"attention.head_count", 4},
                           {"attention.head_count_kv", 1}, {"attention.key_length", 256}, {"attention.value_length", 256},
                           {"feed_forward_length", 2048}, {"context_length", 32768},    {"attention.sliding_window", 512},
                           {"rope.dimension_count", 256}};
    return write_meta_gguf(path, "gemma3", "Gemma 3 270m", kv, 10, 262144);
}

TEST(cost_model_from_gemma3_gguf) {
    char path[600];
    snprintf(path, sizeof path, "%s/gemma3.gguf", test_tmpdir());
    CHECK(write_gemma3_gguf(path), "cannot write %s", path);
    const char *a[] = {"cost", "--model", path, "--json", NULL};
    const char *b[] = {"cost", "--preset", "gemma-3-270m", "--json", NULL};
    char *o = run_ok(a);
    CHECK(o && strstr(o, "\"window\": 512, \"swa_period\": 6, \"sliding_layers\": 15"), "window from GGUF: %s", o ? o : "");
    free(o);
    CHECK(same_figures(a, b, "\"chunk_tokens\""), "GGUF figures differ from the gemma-3-270m preset");
    /* the real file (make model), if here */
    const char *real = "models/gemma-3-270m-q4_k_m.gguf";
    if (test_require_file(real, "Gemma 3 270M: run `make model`")) {
        const char *r[] = {"cost", "--model", real, "--json", NULL};
        CHECK(same_figures(r, b, "\"chunk_tokens\""), "the Gemma 3 270M GGUF differs from the preset");
    }
}
