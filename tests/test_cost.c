/*
 * test_cost.c — `qkv cost` reproduces the article's accounting for
 * Llama-3.1-8B with its rounding: attention 4.3 and 68.7 GFLOPs per token at
 * 8K and 128K against 15.0 GFLOPs of weight matmuls; prefill attention 14%,
 * 57% and 2.3x of the fixed part at 8K, 32K, 128K; a bf16 score table of
 * 4, 64 and 1024 GiB per layer; a KV cache of 128 KiB per token, 16 GiB at
 * 128K. Also the library's qkv_cost_eval directly, the JSON keys (units in
 * the names), sizes by hand, --dtype, --model on a small GGUF written here,
 * and bad input.
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

static int line_has(const char *text, const char *label, const char *what) {
    const char *line = cli_find_line(text, label);
    if (!line) return 0;
    const char *nl = strchr(line, '\n');
    const char *hit = strstr(line, what);
    return hit && (!nl || hit < nl);
}

TEST(cost_library_formulas) {
    qkv_cost_config c;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&c, "llama-3.1-8b", &err) == QKV_OK, "preset: %s", err.msg);
    qkv_cost r;
    CHECK(qkv_cost_eval(&r, &c, 8192, 2, &err) == QKV_OK, "eval: %s", err.msg);
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
    CHECK(qkv_cost_eval(&r, &c, 0, 2, &err) == QKV_ERR_INVALID, "ctx 0 accepted");
    CHECK(qkv_cost_preset(&c, "gpt-5", &err) == QKV_ERR_INVALID && strstr(err.msg, "llama-3.1-8b"),
          "unknown preset: %s", err.msg);
    CHECK(qkv_cost_preset(&c, "llama-3.1-8b", NULL) == QKV_OK, "preset again");
    c.n_kv_head = 5;
    CHECK(qkv_cost_check(&c, &err) == QKV_ERR_INVALID, "heads 32 / kv-heads 5 accepted");
    for (int i = 0; qkv_cost_preset_id(i); i++) {
        CHECK(qkv_cost_preset(&c, qkv_cost_preset_id(i), &err) == QKV_OK, "preset %d", i);
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

/* A metadata-only GGUF v3 (no tensors) with n_kv_head KV heads (of 4):
 * enough for the cost model. 1 on success. */
static int write_tiny_gguf(const char *path, uint32_t n_kv_head) {
    gguf_buf b = {0};
    gguf_put_header(&b, 0, 9);
    gguf_put_kv_str(&b, "general.architecture", "llama");
    gguf_put_kv_str(&b, "general.name", "Tiny Llama");
    gguf_put_kv_u32(&b, "llama.block_count", 2);
    gguf_put_kv_u32(&b, "llama.embedding_length", 64);
    gguf_put_kv_u32(&b, "llama.attention.head_count", 4);
    gguf_put_kv_u32(&b, "llama.attention.head_count_kv", n_kv_head);
    gguf_put_kv_u32(&b, "llama.feed_forward_length", 128);
    gguf_put_kv_u32(&b, "llama.context_length", 256);
    gguf_put_kv_tokens(&b, "tokenizer.ggml.tokens", 10);
    int ok = gguf_buf_save(&b, path);
    free(b.p);
    return ok;
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
        o1 = run_ok(s1);
        o2 = run_ok(s2);
        c1 = o1 ? strstr(o1, "\"dtype\"") : NULL;
        c2 = o2 ? strstr(o2, "\"dtype\"") : NULL;
        CHECK(c1 && c2 && !strcmp(c1, c2), "SmolLM2 GGUF differs from the smollm2-135m preset");
        free(o1);
        free(o2);
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
