/*
 * test_tokenizer_load_checks.c — tokenizer metadata that cannot describe one
 * vocabulary, built here one fault per file (gguf_build.h): a token type
 * outside GGUF's enum, a padding, separator or EOS id outside the vocabulary,
 * an empty token list, a chat template past QKV_CHAT_TEMPLATE_MAX. Each is
 * refused by qkv_tokenizer_load with the exact message naming the key and
 * the limit; the boundary cases (type 0 = undefined, the last id, a template
 * of exactly the limit) load.
 */
#include "gguf_build.h"
#include "testing.h"

/* One crafted vocabulary: n_tokens SentencePiece tokens "t0".., all of type
 * normal but token 4 of type bad_type; id_key (if any) = id_value; a ChatML
 * template of template_len bytes (0: none). */
typedef struct {
    const char *file;
    int n_tokens;
    int32_t bad_type;
    const char *id_key;
    int32_t id_value;
    size_t template_len;
} vocab_spec;

static const char *write_vocab(const vocab_spec *v) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), v->file);
    gguf_buf b = {0};
    gguf_put_header(&b, 0, 3 + (v->id_key != NULL) + (v->template_len > 0));
    gguf_put_kv_str(&b, "tokenizer.ggml.model", "llama");
    gguf_put_kv_tokens(&b, "tokenizer.ggml.tokens", (uint64_t)v->n_tokens);
    gguf_put_str(&b, "tokenizer.ggml.token_type");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_I32);
    gguf_put_u64(&b, (uint64_t)v->n_tokens);
    for (int i = 0; i < v->n_tokens; i++) gguf_put_u32(&b, (uint32_t)(i == 4 ? v->bad_type : QKV_TOKEN_NORMAL));
    if (v->id_key) {
        gguf_put_str(&b, v->id_key);
        gguf_put_u32(&b, QKV_GGUF_TYPE_I32);
        gguf_put_u32(&b, (uint32_t)v->id_value);
    }
    if (v->template_len) {
        char *t = malloc(v->template_len + 1);
        memset(t, 'x', v->template_len);
        memcpy(t, "<|im_start|>", 12);
        t[v->template_len] = 0;
        gguf_put_kv_str(&b, "tokenizer.chat_template", t);
        free(t);
    }
    int ok = gguf_buf_save(&b, path);
    free(b.p);
    CHECK(ok, "cannot write %s", path);
    return path;
}

/* Loads v's file: the status, err filled. */
static qkv_status load(const vocab_spec *v, qkv_error *err) {
    qkv_gguf *g = NULL;
    qkv_status st = qkv_gguf_open(&g, write_vocab(v), err);
    CHECK(st == QKV_OK, "%s: open: %s", v->file, err->msg);
    if (st) return st;
    qkv_tokenizer *t = (qkv_tokenizer *)1;
    st = qkv_tokenizer_load(&t, g, err);
    CHECK(st == QKV_OK || t == NULL, "%s: failed load leaves a tokenizer", v->file);
    if (st == QKV_OK && v->template_len) { /* the chat formatter applies the same bound */
        char *text = NULL;
        CHECK(qkv_chat_format(&text, g, NULL, "hi", err) == QKV_OK, "%s: chat format: %s", v->file, err->msg);
        free(text);
    }
    if (st == QKV_OK) qkv_tokenizer_free(t);
    qkv_gguf_close(g);
    return st;
}

TEST(tokenizer_load_checks_accept_the_boundaries) {
    static const vocab_spec ok[] = {
        {"type0.gguf", 12, 0, NULL, 0, 0},
        {"type_byte.gguf", 12, QKV_TOKEN_BYTE, NULL, 0, 0},
        {"last_pad.gguf", 12, 1, "tokenizer.ggml.padding_token_id", 11, 0},
        {"template_at_limit.gguf", 12, 1, NULL, 0, QKV_CHAT_TEMPLATE_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        qkv_error err = {0};
        CHECK(load(&ok[i], &err) == QKV_OK, "%s: %s", ok[i].file, err.msg);
    }
}

TEST(tokenizer_load_checks_refuse_hostile_vocabularies) {
    static const struct {
        vocab_spec v;
        const char *msg;
    } cases[] = {
        {{"type7.gguf", 12, 7, NULL, 0, 0}, "type7.gguf: tokenizer.ggml.token_type[4] = 7 is outside [0, 6]"},
        {{"type_neg.gguf", 12, -1, NULL, 0, 0}, "type_neg.gguf: tokenizer.ggml.token_type[4] = -1 is outside [0, 6]"},
        {{"pad.gguf", 12, 1, "tokenizer.ggml.padding_token_id", 12, 0},
         "pad.gguf: tokenizer.ggml.padding_token_id = 12 is not a token id (vocabulary of 12)"},
        {{"sep.gguf", 12, 1, "tokenizer.ggml.seperator_token_id", -1, 0},
         "sep.gguf: tokenizer.ggml.seperator_token_id = -1 is not a token id (vocabulary of 12)"},
        {{"eos.gguf", 12, 1, "tokenizer.ggml.eos_token_id", 1000000, 0},
         "eos.gguf: tokenizer.ggml.eos_token_id = 1000000 is not a token id (vocabulary of 12)"},
        {{"empty.gguf", 0, 1, NULL, 0, 0}, "empty.gguf: tokenizer.ggml.tokens has 0 entries, out of range [1, 16777216]"},
        {{"template.gguf", 12, 1, NULL, 0, QKV_CHAT_TEMPLATE_MAX + 1},
         "template.gguf: tokenizer.chat_template is 1048577 bytes, more than the limit of 1048576"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vocab_spec v = cases[i].v;
        if (v.n_tokens == 0) v.bad_type = 0; /* no token 4 to carry it */
        qkv_error err = {0};
        qkv_status st = load(&v, &err);
        CHECK(st == QKV_ERR_FORMAT, "%s: status %d (%s)", v.file, (int)st, err.msg);
        CHECK(strstr(err.msg, cases[i].msg) != NULL, "%s: message '%s' lacks '%s'", v.file, err.msg, cases[i].msg);
    }
    /* the chat formatter refuses the oversized template on its own too */
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    const vocab_spec big = {"template_chat.gguf", 12, 1, NULL, 0, QKV_CHAT_TEMPLATE_MAX + 1};
    if (qkv_gguf_open(&g, write_vocab(&big), &err) == QKV_OK) {
        char *text = (char *)1;
        CHECK(qkv_chat_format(&text, g, NULL, "hi", &err) == QKV_ERR_FORMAT && text == NULL &&
                  strstr(err.msg, "tokenizer.chat_template is 1048577 bytes, more than the limit of 1048576"),
              "chat format: %s", err.msg);
        qkv_gguf_close(g);
    }
}
