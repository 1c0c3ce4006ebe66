/*
 * fuzz_chat.c — the chat-template formatter (qkv_chat_format) on any
 * template, system and user text: the input is TEMPLATE \0 SYSTEM \0 USER
 * (a missing part: no system turn, an empty user turn), written as the
 * tokenizer.chat_template of a one-key GGUF (tests/gguf_build.h). The
 * formatted text must hold the user text.
 */
#include "../tests/gguf_build.h"
#include "fuzz_file.h"

/* The next NUL-ended part of data[*at .. size) as a malloc'd string. */
static char *next_part(const uint8_t *data, size_t size, size_t *at) {
    size_t start = *at, end = start;
    while (end < size && data[end]) end++;
    char *s = malloc(end - start + 1);
    if (!s) abort();
    memcpy(s, data + start, end - start);
    s[end - start] = 0;
    *at = end < size ? end + 1 : end;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at = 0;
    int has_system = memchr(data, 0, size) != NULL;
    char *tmpl = next_part(data, size, &at), *system = next_part(data, size, &at), *user = next_part(data, size, &at);
    gguf_buf b = {0};
    gguf_put_header(&b, 0, 1);
    gguf_put_kv_str(&b, "tokenizer.chat_template", tmpl);
    qkv_gguf *g = NULL;
    if (qkv_gguf_open(&g, fuzz_file(b.p, b.n), NULL) == QKV_OK) {
        char *out = NULL;
        if (qkv_chat_format(&out, g, has_system ? system : NULL, user, NULL) == QKV_OK) {
            if (!strstr(out, user)) abort(); /* the user's turn went missing */
            free(out);
        }
        qkv_gguf_close(g);
    }
    free(b.p);
    free(tmpl);
    free(system);
    free(user);
    return 0;
}
