/*
 * fuzz_gguf.c — a GGUF file from a stranger, as qkv reads and runs one: the
 * reader (every key, every value and array element, every tensor's last
 * byte, small tensors dequantised and checked for non-finite values), the
 * model configuration, the tokenizer (with its chat template), the chat
 * formatter and a tokenization of its output, qkv_model_open (weights' shapes
 * and types, norm weights, RoPE factors, a run state of 4 positions) and,
 * when it opens, one forward call of 2 tokens (each family's layers: windows,
 * soft-caps, QK-norms, biases, post-norms). A crash, a sanitizer report or a
 * leak is a finding; a refusal must come with a message and no handle.
 */
#include "fuzz_file.h"
#include "qkv.h"

#include <string.h>

static volatile uint64_t g_sink; /* keeps the reads from being optimised away */

/* Reads every value a consumer could read. */
static void touch_everything(const qkv_gguf *g) {
    uint64_t h = 0;
    for (int64_t i = 0; i < qkv_gguf_n_kv(g); i++) {
        const char *k = qkv_gguf_key(g, i);
        h += strlen(k) + (uint64_t)qkv_gguf_find_key(g, k);
        int64_t v;
        float x;
        const char *s;
        size_t len;
        if (qkv_gguf_get_int(&v, g, k, NULL) == QKV_OK) h += (uint64_t)v;
        if (qkv_gguf_get_f32(&x, g, k, NULL) == QKV_OK) h += x == x;
        if (qkv_gguf_get_string(&s, &len, g, k, NULL) == QKV_OK) h += (uint8_t)s[len];
        uint64_t n = qkv_gguf_arr_len(g, i);
        if (qkv_gguf_arr_type(g, i) == QKV_GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                s = qkv_gguf_arr_str(g, i, j, &len);
                h += (uint8_t)s[len];
            }
        } else if (qkv_gguf_arr_data(g, i) && n) {
            h += ((const uint8_t *)qkv_gguf_arr_data(g, i))[0];
        }
    }
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        if (t->nbytes) h += ((const uint8_t *)t->data)[t->nbytes - 1];
        if (qkv_dequantize_supported(t->type) && t->n_elements > 0 && t->n_elements <= 65536) {
            float *y = malloc((size_t)t->n_elements * sizeof *y);
            if (y && qkv_dequantize(y, t->data, t->type, t->n_elements, NULL) == QKV_OK) h += y[0] == y[0];
            free(y);
            int64_t bad;
            float v;
            if (qkv_dequantize_check(&bad, &v, t->data, t->type, t->n_elements, NULL) == QKV_OK) h += (uint64_t)bad;
        }
    }
    g_sink += h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, path, &err) != QKV_OK) {
        if (!err.msg[0] || g) abort(); /* every failure has a message and no handle */
        return 0;
    }
    touch_everything(g);
    qkv_model_config c;
    int config_ok = qkv_model_config_read(&c, g, NULL) == QKV_OK;
    qkv_tokenizer *t = NULL;
    if (qkv_tokenizer_load(&t, g, NULL) == QKV_OK) {
        char *chat = NULL;
        if (qkv_chat_format(&chat, g, NULL, "hi", NULL) == QKV_OK) {
            int32_t ids[64];
            int64_t n;
            qkv_tokenize(t, chat, strlen(chat), 1, 1, ids, 64, &n, NULL);
            free(chat);
        }
        qkv_tokenizer_free(t);
    }
    qkv_gguf_close(g);
    if (config_ok) {
        const qkv_model_params p = {.n_ctx = 4, .n_threads = 1};
        qkv_model *m = NULL;
        err.msg[0] = 0;
        if (qkv_model_open(&m, path, &p, &err) == QKV_OK) {
            const int32_t ids[2] = {0, c.n_vocab - 1};
            float *logits = malloc((size_t)c.n_vocab * sizeof *logits); /* [V] */
            err.msg[0] = 0;
            if (logits && qkv_model_forward(m, logits, ids, 2, 0, NULL, &err) != QKV_OK && !err.msg[0]) abort();
            free(logits);
            qkv_model_close(m);
        } else if (!err.msg[0] || m) {
            abort();
        }
    }
    return 0;
}
