/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader and dequantisation.
 * Writes each input to a file (the reader maps files), opens it, and touches
 * every value a consumer could read. Not part of `make`; build and run:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *     tools/fuzz/fuzz_gguf.c src/model/gguf.c src/model/dequant.c \
 *     src/attn/dtype.c src/util/error.c -o build/fuzz_gguf
 *   mkdir -p build/fuzz-corpus && cp tests/fixtures/gguf/meta.gguf tests/fixtures/gguf/quant.gguf build/fuzz-corpus/
 *   ./build/fuzz_gguf -max_total_time=120 -max_len=70000 build/fuzz-corpus
 */
#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_gguf_%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    qkv_gguf *g = NULL;
    qkv_error err;
    if (qkv_gguf_open(&g, path, &err) != QKV_OK) {
        if (!err.msg[0] || g) abort();   /* every failure has a message and no handle */
        return 0;
    }
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
            const uint8_t *d = qkv_gguf_arr_data(g, i);
            h += d[0];
        }
    }
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        if (t->nbytes) h += ((const uint8_t *)t->data)[t->nbytes - 1];
        if (qkv_dequantize_supported(t->type) && t->n_elements > 0 && t->n_elements <= 65536) {
            float *y = malloc((size_t)t->n_elements * sizeof *y);
            if (y && qkv_dequantize(y, t->data, t->type, t->n_elements, NULL) == QKV_OK) h += y[0] == y[0];
            free(y);
        }
    }
    sink += h;
    qkv_gguf_close(g);
    return 0;
}
