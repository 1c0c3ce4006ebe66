/*
 * api_sessions.c — /api/model and the sessions: create (prefill, with
 * progress as Server-Sent Events when asked, cancelled when the client goes
 * away), list, get, generate, and the request pieces they share (the body as
 * JSON, a prompt's ids, a session's JSON, the top tokens).
 */
#include "server.h"
#include "json_out.h"
#include "prompt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

char *serve_piece(const serve_server *sv, int32_t id) { return cli_token_label(sv->tok, id); }

/* A string metadata value, NULL when absent or not a string. */
static const char *gguf_str(const qkv_gguf *g, const char *key) {
    const char *v = NULL;
    return qkv_gguf_get_string(&v, NULL, g, key, NULL) == QKV_OK ? v : NULL;
}

int serve_body_json(struct mg_connection *c, serve_server *sv, cJSON **out) {
    char *body;
    size_t len;
    int st = http_read_body(c, sv->o.max_body, &body, &len);
    if (st) return st;
    const char *end = NULL;
    /* len + 1: the NUL after the body, so that nothing may follow the value */
    cJSON *j = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    const long at = end ? (long)(end - body) : 0;
    free(body);
    if (!j) return http_error(c, 400, "the body is not JSON (at byte %ld)", at);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return http_error(c, 400, "the body must be a JSON object");
    }
    *out = j;
    return 0;
}

/* A boolean member: absent gives def; 0, or 400 sent. */
static int member_bool(struct mg_connection *c, const cJSON *req, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return http_error(c, 400, "\"%s\" must be true or false", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int serve_prompt_ids(struct mg_connection *c, serve_server *sv, const cJSON *req, const char *text_key,
                     const char *tokens_key, int32_t **ids, int *n) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(req, text_key);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, tokens_key);
    const int V = sv->cfg.n_vocab;
    *ids = NULL;
    *n = 0;
    if (!!text + !!toks != 1) return http_error(c, 400, "give exactly one of \"%s\" or \"%s\"", text_key, tokens_key);
    int chat = 0, bos = 1, st;
    if ((st = member_bool(c, req, "chat", 0, &chat)) || (st = member_bool(c, req, "bos", 1, &bos))) return st;
    if (toks) {
        if (chat) return http_error(c, 400, "\"chat\" needs \"%s\", not \"%s\"", text_key, tokens_key);
        const int m = cJSON_IsArray(toks) ? cJSON_GetArraySize(toks) : -1;
        if (m < 1) return http_error(c, 400, "\"%s\" must be a non-empty array of token ids", tokens_key);
        if (m > sv->o.ctx) return http_error(c, 400, "\"%s\" has %d ids, above --ctx %d", tokens_key, m, sv->o.ctx);
        if (!(*ids = malloc((size_t)m * sizeof(int32_t)))) return http_error(c, 500, "out of memory");
        int i = 0;
        for (const cJSON *e = toks->child; e; e = e->next, i++) {
            const double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!(d >= 0 && d < V && d == floor(d))) {
                free(*ids);
                *ids = NULL;
                return http_error(c, 400, "\"%s\"[%d]: want a token id in [0, %d)", tokens_key, i, V);
            }
            (*ids)[i] = (int32_t)d;
        }
        *n = m;
        return 0;
    }
    if (!cJSON_IsString(text) || !text->valuestring[0])
        return http_error(c, 400, "\"%s\" must be a non-empty string", text_key);
    const char *s = text->valuestring;
    size_t len = strlen(s);
    if (!http_utf8_valid(s, len)) return http_error(c, 400, "\"%s\" is not valid UTF-8", text_key);
    qkv_error err = {0};
    char *rendered = NULL;
    if (chat) {
        if (qkv_chat_format(&rendered, sv->gguf, NULL, s, &err)) return http_error(c, 400, "chat: %s", err.msg);
        s = rendered;
        len = strlen(s);
    }
    const int64_t bound = qkv_tokenize_bound(len);
    int64_t got = 0;
    *ids = bound > 0 ? malloc((size_t)bound * sizeof(int32_t)) : NULL;
    if (!*ids) st = http_error(c, 500, "out of memory");
    else if (chat ? qkv_chat_tokenize(sv->tok, s, len, bos, *ids, bound, &got, &err)
                  : qkv_tokenize(sv->tok, s, len, bos, 0, *ids, bound, &got, &err))
        st = http_error(c, 400, "%s", err.msg);
    else if (got < 1) st = http_error(c, 400, "\"%s\" has no tokens", text_key);
    else if (got > sv->o.ctx) st = http_error(c, 400, "\"%s\" is %lld tokens, above --ctx %d", text_key, (long long)got, sv->o.ctx);
    free(rendered);
    if (st) {
        free(*ids);
        *ids = NULL;
        return st;
    }
    *n = (int)got;
    return 0;
}

/* ------------------------------------------------------------------ JSON */

void serve_top_json(FILE *f, const serve_server *sv, const float *logits, int k) {
    const int V = sv->cfg.n_vocab;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++) sum += exp((double)logits[v] - mx);
    int top[SERVE_MAX_K];
    if (k > V) k = V;
    /* selection: k passes, each the best not yet taken (lower id on ties) */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = top[i] == v;
            if (!taken && (best < 0 || logits[v] > logits[best])) best = v;
        }
        top[j] = best;
    }
    fputc('[', f);
    for (int j = 0; j < k; j++) {
        char *piece = serve_piece(sv, top[j]);
        fprintf(f, "%s{\"id\": %d, \"piece\": ", j ? ", " : "", top[j]);
        cli_json_string(f, piece ? piece : "");
        fprintf(f, ", \"p\": %.9g, \"logit\": %.9g}", exp((double)logits[top[j]] - mx) / sum, (double)logits[top[j]]);
        free(piece);
    }
    fputc(']', f);
}

void serve_session_json(FILE *f, const serve_server *sv, const serve_session *s) {
    fprintf(f, "{\"id\": \"%s\", \"n_tokens\": %d, \"n_ctx\": %d, \"bytes\": %zu, \"tokens\": [", s->id, s->n, s->cap,
            s->bytes);
    for (int i = 0; i < s->n; i++) {
        if (i) fputs(", ", f);
        cli_json_token(f, s->ids[i], s->pieces[i]);
    }
    fputs("], \"top\": ", f);
    serve_top_json(f, sv, s->logits, 10);
    fputs("}", f);
}

int serve_body_prompt(struct mg_connection *c, serve_server *sv, int32_t **ids, int *n) {
    cJSON *req = NULL;
    int st = serve_body_json(c, sv, &req);
    if (st) return st;
    st = serve_prompt_ids(c, sv, req, "text", "tokens", ids, n);
    cJSON_Delete(req);
    return st;
}

int serve_api_tokenize(struct mg_connection *c, serve_server *sv) {
    int32_t *ids;
    int n;
    const int st = serve_body_prompt(c, sv, &ids, &n);
    if (st) return st;
    http_buf b;
    if (http_buf_open(c, &b)) {
        free(ids);
        return 500;
    }
    fprintf(b.f, "{\"n_tokens\": %d, \"tokens\": [", n);
    for (int i = 0; i < n; i++) {
        char *piece = serve_piece(sv, ids[i]);
        if (i) fputs(", ", b.f);
        cli_json_token(b.f, ids[i], piece ? piece : "");
        free(piece);
    }
    fputs("]}\n", b.f);
    free(ids);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_model(struct mg_connection *c, serve_server *sv) {
    const qkv_model_config *g = &sv->cfg;
    http_buf b;
    if (http_buf_open(c, &b)) return 500;
    const char *name = gguf_str(sv->gguf, "general.name");
    fprintf(b.f, "{\"arch\": \"%s\", \"name\": ", g->arch);
    cli_json_string(b.f, name ? name : "");
    fprintf(b.f, ", \"path\": ");
    cli_json_string(b.f, sv->o.model);
    fprintf(b.f,
            ", \"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"head_dim\": %d, \"n_embd\": %d, \"n_vocab\": %d, "
            "\"ctx\": %d, \"ctx_train\": %d, \"windows\": [",
            g->n_layer, g->n_head, g->n_kv_head, g->head_dim, g->n_embd, g->n_vocab, sv->o.ctx, g->n_ctx_train);
    for (int l = 0; l < g->n_layer; l++) fprintf(b.f, "%s%d", l ? ", " : "", qkv_model_layer_slides(g, l) ? g->window : 0);
    fprintf(b.f, "], \"chat_template\": %s, \"bos\": %d, \"weights_bytes\": %lld, \"max_sessions\": %d, \"max_mib\": %lld}\n",
            gguf_str(sv->gguf, "tokenizer.chat_template") ? "true" : "false", qkv_tokenizer_bos(sv->tok),
            (long long)qkv_weights_bytes(sv->weights), sv->o.max_sessions, (long long)(sv->o.max_bytes >> 20));
    http_buf_send(c, &b, 200, NULL);
    return 200;
}
