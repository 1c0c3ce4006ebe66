/*
 * chat.c — the chat templates qkv knows, recognised from the GGUF's Jinja
 * tokenizer.chat_template by their markers rather than by running Jinja:
 *   ChatML   <|im_start|>role\\ncontent<|im_end|>\\n ... <|im_start|>assistant\\n
 *            (SmolLM2's template inserts a default system turn when the first
 *            message is not a system one; its text is read from the template)
 *   Llama-3  <|begin_of_text|><|start_header_id|>role<|end_header_id|>\\n\\ncontent<|eot_id|>
 *   Gemma    <start_of_turn>user\\n[system\\n\\n]content<end_of_turn>\\n<start_of_turn>model\\n
 *            (no system role: its text opens the first user turn, as Gemma
 *            3's template and llama.cpp do; the tokenizer adds the BOS)
 */
#include "tokenizer/internal.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends printf-style text to a growing buffer. */
static int append(char **buf, size_t *len, size_t *cap, const char *a, const char *b, const char *c) {
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (!parts[i]) continue;
        size_t n = strlen(parts[i]);
        if (*len + n + 1 > *cap) {
            size_t nc = (*len + n + 1) * 2;
            char *nb = realloc(*buf, nc);
            if (!nb) return -1;
            *buf = nb;
            *cap = nc;
        }
        memcpy(*buf + *len, parts[i], n);
        *len += n;
        (*buf)[*len] = 0;
    }
    return 0;
}

/* The default system text a ChatML template inserts, into *out (malloc'd;
 * NULL when the template has none). The template writes it as a literal:
 * '<|im_start|>system\\n' TEXT '<|im_end|>\\n' where \\n is spelled as a
 * backslash-n escape or a real newline. 0, or -1 when out of memory. */
static int chatml_default_system(char **out, const char *tmpl) {
    *out = NULL;
    const char *mark = "<|im_start|>system";
    const char *p = strstr(tmpl, mark);
    if (!p) return 0;
    p += strlen(mark);
    if (p[0] == '\\' && p[1] == 'n') p += 2;
    else if (p[0] == '\n') p += 1;
    else return 0;
    const char *e = strstr(p, "<|im_end|>");
    if (!e || memchr(p, '\'', (size_t)(e - p)) || memchr(p, '"', (size_t)(e - p)) || memchr(p, '{', (size_t)(e - p)))
        return 0; /* not a plain literal: the template computes it */
    char *s = malloc((size_t)(e - p) + 1);
    if (!s) return -1;
    memcpy(s, p, (size_t)(e - p));
    s[e - p] = 0;
    *out = s;
    return 0;
}

qkv_status tokenizer_chat_template(const char **out, const qkv_gguf *g, qkv_error *err) {
    static const char key[] = "tokenizer.chat_template";
    if (qkv_gguf_find_key(g, key) < 0) return util_fail(err, QKV_ERR_FORMAT, "%s: no %s", qkv_gguf_path(g), key);
    size_t len;
    qkv_status st = qkv_gguf_get_string(out, &len, g, key, err);
    if (st) return st;
    if (len > QKV_CHAT_TEMPLATE_MAX)
        return util_fail(err, QKV_ERR_FORMAT, "%s: %s is %zu bytes, more than the limit of %d", qkv_gguf_path(g), key,
                        len, QKV_CHAT_TEMPLATE_MAX);
    return QKV_OK;
}

qkv_status qkv_chat_format(char **out, const qkv_gguf *g, const char *system, const char *user,
                           qkv_error *err) {
    *out = NULL;
    if (!user) return util_fail(err, QKV_ERR_INVALID, "chat: no user text");
    const char *tmpl;
    qkv_status st = tokenizer_chat_template(&tmpl, g, err);
    if (st) return st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int bad = 0;
    if (strstr(tmpl, "<|im_start|>")) {
        char *dflt = NULL;
        if (!system && chatml_default_system(&dflt, tmpl)) return util_fail(err, QKV_ERR_NOMEM, "chat: out of memory");
        const char *sys = system ? system : dflt;
        if (sys) bad |= append(&buf, &len, &cap, "<|im_start|>system\n", sys, "<|im_end|>\n");
        bad |= append(&buf, &len, &cap, "<|im_start|>user\n", user, "<|im_end|>\n");
        bad |= append(&buf, &len, &cap, "<|im_start|>assistant\n", NULL, NULL);
        free(dflt);
    } else if (strstr(tmpl, "<|start_header_id|>")) {
        bad |= append(&buf, &len, &cap, "<|begin_of_text|>", NULL, NULL);
        if (system) bad |= append(&buf, &len, &cap, "<|start_header_id|>system<|end_header_id|>\n\n", system, "<|eot_id|>");
        bad |= append(&buf, &len, &cap, "<|start_header_id|>user<|end_header_id|>\n\n", user, "<|eot_id|>");
        bad |= append(&buf, &len, &cap, "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL, NULL);
    } else if (strstr(tmpl, "<start_of_turn>")) {
        bad |= append(&buf, &len, &cap, "<start_of_turn>user\n", system, system ? "\n\n" : NULL);
        bad |= append(&buf, &len, &cap, user, "<end_of_turn>\n", "<start_of_turn>model\n");
    } else {
        return util_fail(err, QKV_ERR_UNSUPPORTED, "%s: chat template not recognised (ChatML, Llama-3 and Gemma are)",
                        qkv_gguf_path(g));
    }
    if (bad) {
        free(buf);
        return util_fail(err, QKV_ERR_NOMEM, "chat: out of memory");
    }
    *out = buf;
    return QKV_OK;
}

/* 1 if text starts with the tokenizer's BOS token. */
static int starts_with_bos(const qkv_tokenizer *t, const char *text, size_t len) {
    size_t bl = 0;
    const int32_t bos = qkv_tokenizer_bos(t);
    const char *b = bos >= 0 ? qkv_token_text(t, bos, &bl) : NULL;
    return b && bl > 0 && len >= bl && !memcmp(text, b, bl);
}

qkv_status qkv_chat_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                             int32_t *out_ids, int64_t max_ids, int64_t *n, qkv_error *err) {
    if (t && text && starts_with_bos(t, text, len)) add_special = 0; /* the template's BOS, not a second one */
    return qkv_tokenize(t, text, len, add_special, 1, out_ids, max_ids, n, err);
}
