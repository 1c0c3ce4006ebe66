/*
 * test_model_gguf.c — the real model through the GGUF reader: SmolLM2-135M-
 * Instruct Q4_1 (models/, fetched by scripts/get-model.sh; $QKV_MODEL
 * overrides the path). Checks its hyper-parameters and that dequantised rows
 * of q8_0, q4_1 and f32 tensors equal the gguf Python package's
 * (tests/fixtures/gguf/smollm2_rows.gguf, made by
 * tools/oracle/make_model_gguf_fixture.py). Tolerance zero, as in
 * test_dequant.c. Without the model it is SKIPPED (and
 * `make test` fails).
 */
#include "qkv.h"
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(model_gguf_smollm2) {
    const char *path = test_model_path();
    if (!test_require_model()) return;
    qkv_gguf *g = NULL, *fx = NULL;
    qkv_error err = {0};
    char fpath[600];
    snprintf(fpath, sizeof fpath, "%s/gguf/smollm2_rows.gguf", test_fixture_dir());
    if (qkv_gguf_open(&g, path, &err) || qkv_gguf_open(&fx, fpath, &err)) {
        CHECK(0, "open: %s", err.msg);
        qkv_gguf_close(g);
        return;
    }

    const char *str;
    CHECK(qkv_gguf_get_string(&str, NULL, g, "general.architecture", &err) == 0 &&
              !strcmp(str, "llama"),
          "architecture: %s", err.msg);
    static const struct { const char *key; int64_t v; } hp[] = {
        {"llama.block_count", 30},           {"llama.attention.head_count", 9},
        {"llama.attention.head_count_kv", 3}, {"llama.embedding_length", 576},
        {"llama.feed_forward_length", 1536},  {"llama.context_length", 8192},
        {"llama.rope.dimension_count", 64},   {"llama.vocab_size", 49152},
        {"tokenizer.ggml.bos_token_id", 1},   {"tokenizer.ggml.eos_token_id", 2},
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) {
        int64_t v = -1;
        CHECK(qkv_gguf_get_int(&v, g, hp[i].key, &err) == 0 && v == hp[i].v, "%s = %lld (%s)",
              hp[i].key, (long long)v, err.msg);
    }
    float f;
    CHECK(qkv_gguf_get_f32(&f, g, "llama.rope.freq_base", &err) == 0 && f == 100000.0f,
          "rope theta %g", f);
    CHECK(qkv_gguf_get_f32(&f, g, "llama.attention.layer_norm_rms_epsilon", &err) == 0 &&
              f == 1e-5f,
          "rms eps %g", f);
    CHECK(qkv_gguf_get_string(&str, NULL, g, "tokenizer.ggml.model", &err) == 0 &&
              !strcmp(str, "gpt2"),
          "tokenizer model");
    int64_t tok = qkv_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK(qkv_gguf_arr_type(g, tok) == QKV_GGUF_TYPE_STRING && qkv_gguf_arr_len(g, tok) == 49152,
          "vocab array");
    const char *t1 = qkv_gguf_arr_str(g, tok, 1, NULL);
    CHECK(t1 && !strcmp(t1, "<|im_start|>"), "token 1 = %s", t1 ? t1 : "(null)");
    int64_t merges = qkv_gguf_find_key(g, "tokenizer.ggml.merges");
    CHECK(qkv_gguf_arr_len(g, merges) == 48900, "merges %llu",
          (unsigned long long)qkv_gguf_arr_len(g, merges));

    int64_t n_t = 0;
    CHECK(qkv_gguf_get_int(&n_t, fx, "model.n_tensors", &err) == 0 &&
              qkv_gguf_n_tensors(g) == n_t && n_t == 272,
          "n_tensors %lld", (long long)qkv_gguf_n_tensors(g));
    uint64_t fsize = 0;
    CHECK(qkv_gguf_get_u64(&fsize, fx, "model.file_size", &err) == 0 &&
              fsize == qkv_gguf_file_size(g),
          "file size %llu (another model at %s?)", (unsigned long long)fsize, path);

    const qkv_gguf_tensor *emb =
        qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, "token_embd.weight"));
    CHECK(emb && emb->type == QKV_GGML_TYPE_Q8_0 && emb->n_dims == 2 && emb->shape[0] == 49152 &&
              emb->shape[1] == 576,
          "token_embd.weight [49152, 576] q8_0");
    CHECK(qkv_gguf_find_tensor(g, "output.weight") == -1, "tied embeddings: no output.weight");
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        CHECK(qkv_dequantize_supported(t->type), "%s: type %s", t->name,
              qkv_ggml_type_name(t->type));
    }

    /* rows against the gguf package: fixture tensor "rows.NAME" [n_rows, cols] */
    int n_checked = 0;
    for (int64_t i = 0; i < qkv_gguf_n_tensors(fx); i++) {
        const qkv_gguf_tensor *want = qkv_gguf_tensor_info(fx, i);
        const char *name = want->name + strlen("rows.");
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, name));
        CHECK(t != NULL, "%s in model", name);
        if (!t) continue;
        char key[200];
        snprintf(key, sizeof key, "type.%s", name);
        int64_t type = -1;
        qkv_gguf_get_int(&type, fx, key, NULL);
        CHECK(type == (int64_t)t->type, "%s: type %s, fixture says %lld", name,
              qkv_ggml_type_name(t->type), (long long)type);
        int64_t rows_id = qkv_gguf_find_key(fx, want->name);
        const int32_t *rows = qkv_gguf_arr_data(fx, rows_id);
        int64_t n_rows = (int64_t)qkv_gguf_arr_len(fx, rows_id);
        int64_t cols = t->shape[t->n_dims - 1];
        CHECK(rows && n_rows == want->shape[0] && cols == want->shape[1], "%s: fixture shape",
              name);
        if (!rows || n_rows != want->shape[0] || cols != want->shape[1]) continue;
        size_t rs = qkv_ggml_row_size(t->type, cols);
        float *got = malloc((size_t)cols * sizeof *got), *exp = malloc((size_t)cols * sizeof *exp);
        for (int64_t r = 0; r < n_rows; r++) {
            CHECK(rows[r] >= 0 && rows[r] < t->n_elements / cols, "row %d", rows[r]);
            const uint8_t *src = (const uint8_t *)t->data + (size_t)rows[r] * rs;
            qkv_status s = qkv_dequantize(got, src, t->type, cols, &err);
            CHECK(s == QKV_OK, "%s: %s", name, err.msg);
            memcpy(exp, (const float *)want->data + r * cols, (size_t)cols * sizeof *exp);
            char what[240];
            snprintf(what, sizeof what, "%s row %d", name, rows[r]);
            CHECK_CLOSE(what, got, exp, (size_t)cols, 0, 0);
            n_checked++;
        }
        free(got);
        free(exp);
    }
    CHECK(n_checked >= 10, "only %d rows checked", n_checked);
    qkv_gguf_close(fx);
    qkv_gguf_close(g);
}
