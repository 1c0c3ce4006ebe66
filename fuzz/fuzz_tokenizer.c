/*
 * fuzz_tokenizer.c — arbitrary bytes through the two real vocabularies
 * (SmolLM2's "smollm" BPE and Llama-3's "llama-bpe", from models/; make
 * model makes them). The first byte picks the vocabulary (bit 0), whether
 * control tokens in the text are recognised (bit 1) and BOS/EOS added (bit
 * 2); the rest is the text. The ids are turned back into pieces and text, and
 * every id must be inside the vocabulary.
 */
#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static qkv_gguf *g_gguf[2];
static qkv_tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *paths[2] = {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/llama3-vocab.gguf"};
    for (int i = 0; i < 2; i++) {
        qkv_error err = {0};
        if (qkv_gguf_open(&g_gguf[i], paths[i], &err) || qkv_tokenizer_load(&g_tok[i], g_gguf[i], &err)) {
            fprintf(stderr, "fuzz_tokenizer: %s (run make model)\n", err.msg);
            exit(2);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const qkv_tokenizer *t = g_tok[data[0] & 1];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int64_t cap = qkv_tokenize_bound(len), n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return 0;
    if (qkv_tokenize(t, text, len, data[0] & 4, data[0] & 2, ids, cap, &n, NULL) == QKV_OK) {
        if (n > cap) abort(); /* qkv_tokenize_bound is an upper bound */
        for (int64_t i = 0; i < n; i++)
            if (!qkv_token_piece(t, ids[i], NULL)) abort(); /* an id the vocabulary cannot spell */
        size_t out_cap = 4 * len + 64, out_len = 0;
        char *out = malloc(out_cap);
        if (out) qkv_detokenize(t, ids, n, 0, out, out_cap, &out_len, NULL);
        free(out);
    }
    free(ids);
    return 0;
}
