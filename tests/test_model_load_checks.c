/*
 * test_model_load_checks.c — whole models that disagree with themselves,
 * built here (gguf_build.h's tiny Llama, one fault per file): a tokenizer
 * with fewer or more tokens than token_embd.weight has rows (the crash of
 * issue 13: `qkv run` sampled an id the tokenizer could not spell), a
 * non-finite norm weight, a RoPE factor that is not finite and positive.
 * Each is refused by qkv_model_open with the exact message naming the key or
 * tensor and the limit, and `qkv run` says so in one line with exit 2; the
 * same file without the fault loads and runs.
 */
#include "gguf_build.h"
#include "testing.h"

#include <math.h>

static const char *write_tiny(const char *name, int n_tokens, int n_rows, const char *poison, float value) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    gguf_buf b = {0};
    gguf_put_tiny_llama(&b, n_tokens, n_rows, poison, value);
    int ok = gguf_buf_save(&b, path);
    free(b.p);
    CHECK(ok, "cannot write %s", path);
    return path;
}

TEST(model_load_checks_a_good_tiny_model_runs) {
    const char *path = write_tiny("good.gguf", 12, 12, NULL, 0);
    qkv_model *m = NULL;
    qkv_error err = {0};
    CHECK(qkv_model_open(&m, path, NULL, &err) == QKV_OK, "open: %s", err.msg);
    qkv_model_close(m);
    const char *argv[] = {"run", "-m", path, "--tokens", "1,5,7", "-n", "2", "--print-ids", NULL};
    char *out = NULL, *e = NULL;
    int rc = test_run_cli(argv, NULL, &out, &e);
    CHECK(rc == 0, "run exit %d: %s", rc, e);
    free(out);
    free(e);
}

TEST(model_load_checks_refuse_disagreeing_models) {
    static const struct {
        const char *file;
        int n_tokens, n_rows;
        const char *poison;
        float value;
        const char *msg;
    } cases[] = {
        {"fewer_tokens.gguf", 10, 12, NULL, 0,
         "fewer_tokens.gguf: tokenizer.ggml.tokens has 10 entries, token_embd.weight has 12 rows: they must agree"},
        {"more_tokens.gguf", 14, 12, NULL, 0,
         "more_tokens.gguf: tokenizer.ggml.tokens has 14 entries, token_embd.weight has 12 rows: they must agree"},
        {"nan_norm.gguf", 12, 12, "blk.1.ffn_norm.weight", NAN,
         "nan_norm.gguf: blk.1.ffn_norm.weight[3] = nan is not finite"},
        {"inf_norm.gguf", 12, 12, "output_norm.weight", INFINITY,
         "inf_norm.gguf: output_norm.weight[3] = inf is not finite"},
        {"nan_rope.gguf", 12, 12, "rope_freqs.weight", NAN, "nan_rope.gguf: rope_freqs.weight[3] = nan is not finite"},
        {"nan_wq.gguf", 12, 12, "blk.0.attn_q.weight", NAN, "nan_wq.gguf: blk.0.attn_q.weight[3] = nan is not finite"},
        {"inf_down.gguf", 12, 12, "blk.1.ffn_down.weight", -INFINITY,
         "inf_down.gguf: blk.1.ffn_down.weight[3] = -inf is not finite"},
        {"zero_rope.gguf", 12, 12, "rope_freqs.weight", 0.0f,
         "zero_rope.gguf: rope_freqs.weight[3] = 0 is not finite and > 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_tiny(cases[i].file, cases[i].n_tokens, cases[i].n_rows, cases[i].poison,
                                      cases[i].value);
        qkv_model *m = (qkv_model *)1;
        qkv_error err = {0};
        qkv_status st = qkv_model_open(&m, path, NULL, &err);
        CHECK(st == QKV_ERR_FORMAT && m == NULL, "%s: status %d (%s)", cases[i].file, (int)st, err.msg);
        CHECK(strstr(err.msg, cases[i].msg) != NULL, "%s: message '%s' lacks '%s'", cases[i].file, err.msg,
              cases[i].msg);
        const char *argv[] = {"run", "-m", path, "--tokens", "1,5,7", "-n", "2", NULL};
        CHECK_BAD_CLI(argv, cases[i].msg);
    }
}
