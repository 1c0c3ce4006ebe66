/*
 * session_run.c — running a session's model: the prefill and generation
 * (serve_session_append), the restore after a probe that empties the cache,
 * and the handlers that create, list, show, delete and continue sessions.
 * A prefill streams progress as Server-Sent Events when the client asks
 * (Accept: text/event-stream); a client that goes away stops it between
 * chunks and the session is freed.
 */
#include "server.h"
#include "prompt.h"
#include "json_out.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Progress inside one forward call: after each layer (hook_resid_post), the
 * call's tokens counted in proportion, so that a long chunk reports often
 * and a client that went away stops it within a layer. */
typedef struct {
    int (*progress)(void *user, int done, int total);
    void *user;
    int done, chunk, total, n_layer;
} layer_progress;

static qkv_status on_layer(void *user, const qkv_activation *a, qkv_error *err) {
    const layer_progress *lp = user;
    const int done = lp->done + (int)((int64_t)lp->chunk * (a->layer + 1) / lp->n_layer);
    if (!lp->progress(lp->user, done, lp->total)) return QKV_OK;
    if (err) snprintf(err->msg, sizeof err->msg, "cancelled");
    return QKV_ERR_CANCELLED;
}

int serve_session_append(serve_server *sv, serve_session *s, const int32_t *ids, int n,
                         int (*progress)(void *user, int done, int total), void *user, char *msg, size_t cap) {
    if (s->n + n > s->cap) {
        snprintf(msg, cap, "the session holds %d of its %d positions: %d more do not fit", s->n, s->cap, n);
        return -1;
    }
    layer_progress lp = {.progress = progress, .user = user, .total = n, .n_layer = sv->cfg.n_layer};
    const qkv_hook hooks[2] = {{.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_overview_hook, .user = s->overview},
                               {.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = on_layer, .user = &lp}};
    const qkv_forward_opts opts = {.hooks = hooks, .n_hooks = progress ? 2 : 1};
    for (int done = 0; done < n;) {
        const int chunk = n - done < SERVE_CHUNK ? n - done : SERVE_CHUNK;
        qkv_error err = {0};
        lp.done = done;
        lp.chunk = chunk;
        if (qkv_model_forward(s->m, s->logits, ids + done, chunk, 0, &opts, &err)) {
            snprintf(msg, cap, "%s", err.msg);
            return -1;
        }
        for (int i = 0; i < chunk; i++) {
            s->ids[s->n] = ids[done + i];
            if (!(s->pieces[s->n] = serve_piece(sv, ids[done + i]))) {
                snprintf(msg, cap, "out of memory");
                return -1;
            }
            s->n++;
        }
        done += chunk;
    }
    return 0;
}

qkv_model *serve_scratch_model(struct mg_connection *c, serve_server *sv, int n, int64_t probe_bytes, const char *what) {
    const qkv_model_params mp = {.n_ctx = n, .kv_dtype = sv->o.kv_dtype, .n_threads = sv->o.threads};
    qkv_model *m = NULL;
    qkv_error err = {0};
    if (qkv_model_new(&m, sv->weights, &mp, &err)) {
        http_error(c, err.status == QKV_ERR_TOO_LARGE ? 413 : 500, "%s", err.msg);
        return NULL;
    }
    const int64_t bytes = (int64_t)qkv_model_state_bytes(m);
    if (bytes + probe_bytes > sv->o.max_bytes) {
        qkv_model_close(m);
        http_error(c, 400,
                   "this probe runs %d of the session's tokens in one call: %.1f MiB of run state and %.1f MiB of %s, "
                   "above --max-mib %lld",
                   n, (double)bytes / (1 << 20), (double)probe_bytes / (1 << 20), what, (long long)(sv->o.max_bytes >> 20));
        return NULL;
    }
    return m;
}

/* Bytes a session holds: its model's state (run state, attention plan, KV
 * cache: qkv_model_state_bytes), its overview, ids, pieces (their pointers and about 16
 * bytes of label each) and the logits row. */
static size_t session_bytes(const serve_server *sv, const serve_session *s) {
    return qkv_model_state_bytes(s->m) + qkv_overview_bytes(s->overview) +
           (size_t)s->cap * (sizeof(int32_t) + sizeof(char *) + 16) + (size_t)sv->cfg.n_vocab * sizeof(float);
}

/* ---------------------------------------------------------------- create */

typedef struct {
    struct mg_connection *c;
    serve_server *sv;
    serve_session *s;
} prefill_progress;

static int send_progress(void *user, int done, int total) {
    prefill_progress *p = user;
    if (p->sv->stopping || serve_table_dropped(&p->sv->table, p->s)) return 1;
    if (!p->c) return 0;
    char data[96];
    const int len = snprintf(data, sizeof data, "{\"done\": %d, \"total\": %d}", done, total);
    return http_sse_event(p->c, "progress", data, (size_t)len) ? 1 : 0;
}

/* The session as an SSE event or a JSON response. */
static void send_session(struct mg_connection *c, serve_server *sv, serve_session *s, int sse, const char *event) {
    http_buf b;
    if (http_buf_open(c, &b)) return;
    serve_session_json(b.f, sv, s);
    if (!sse) {
        fputc('\n', b.f);
        http_buf_send(c, &b, 200, NULL);
        return;
    }
    if (fclose(b.f) == 0) http_sse_event(c, event, b.data, b.len);
    b.f = NULL;
    http_buf_drop(&b);
}

/* An error as an SSE event (the stream has started: its status is 200). */
static void sse_error(struct mg_connection *c, const char *msg) {
    char *data = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&data, &len);
    if (!f) return;
    fputs("{\"error\": ", f);
    cli_json_string(f, msg);
    fputc('}', f);
    if (fclose(f) == 0) http_sse_event(c, "error", data, len);
    free(data);
}

int serve_api_sessions_create(struct mg_connection *c, serve_server *sv) {
    int32_t *ids;
    int n;
    int st = serve_body_prompt(c, sv, &ids, &n);
    if (st) return st;
    const int n_ctx = n + SERVE_GEN_ROOM < sv->o.ctx ? n + SERVE_GEN_ROOM : sv->o.ctx;
    const qkv_model_params mp = {.n_ctx = n_ctx, .kv_dtype = sv->o.kv_dtype, .n_threads = sv->o.threads,
                                 .n_batch = n_ctx < SERVE_CHUNK ? n_ctx : SERVE_CHUNK};
    qkv_model *m = NULL;
    qkv_error err = {0};
    if (qkv_model_new(&m, sv->weights, &mp, &err)) {
        free(ids);
        return http_error(c, err.status == QKV_ERR_TOO_LARGE ? 413 : 500, "%s", err.msg);
    }
    char msg[512];
    qkv_overview *ov = NULL;
    if (qkv_overview_init(&ov, &sv->cfg, SERVE_OVERVIEW_BINS, &err)) {
        qkv_model_close(m);
        free(ids);
        return http_error(c, 500, "%s", err.msg);
    }
    serve_session tmp = {.m = m, .overview = ov, .cap = n_ctx};
    serve_session *s = serve_table_add(&sv->table, session_bytes(sv, &tmp), &st, msg, sizeof msg);
    if (!s) {
        qkv_model_close(m);
        qkv_overview_free(ov);
        free(ids);
        return http_error(c, st, "%s", msg);
    }
    s->m = m;
    s->overview = ov;
    s->cap = n_ctx;
    s->ids = malloc((size_t)n_ctx * sizeof(int32_t));
    s->pieces = calloc((size_t)n_ctx, sizeof(char *));
    s->logits = malloc((size_t)sv->cfg.n_vocab * sizeof(float));
    const int sse = http_wants_sse(c);
    prefill_progress pp = {.c = sse ? c : NULL, .sv = sv, .s = s};
    int rc = !s->ids || !s->pieces || !s->logits ? (snprintf(msg, sizeof msg, "out of memory"), -1) : 0;
    if (!rc && sse && http_sse_start(c)) rc = (snprintf(msg, sizeof msg, "the client went away"), -1);
    pthread_mutex_lock(&s->mu);
    if (!rc) rc = serve_session_append(sv, s, ids, n, send_progress, &pp, msg, sizeof msg);
    pthread_mutex_unlock(&s->mu);
    free(ids);
    if (rc) {
        char ignore[8];
        if (serve_table_dropped(&sv->table, s)) snprintf(msg, sizeof msg, "session %s was evicted or deleted during its prefill", s->id);
        serve_table_remove(&sv->table, s->id, ignore, sizeof ignore);
        serve_table_release(&sv->table, s);
        if (!sse) return http_error(c, 500, "%s", msg);
        sse_error(c, msg);
        http_sse_end(c);
        return 200;
    }
    serve_table_ready(&sv->table, s);
    send_session(c, sv, s, sse, "session");
    if (sse) http_sse_end(c);
    serve_table_release(&sv->table, s);
    return 200;
}

/* ------------------------------------------------------ list, get, delete */

int serve_api_sessions_list(struct mg_connection *c, serve_server *sv) {
    http_buf b;
    if (http_buf_open(c, &b)) return 500;
    serve_table *t = &sv->table;
    const double now = serve_now_s();
    fputs("{\"sessions\": [", b.f);
    pthread_mutex_lock(&t->mu);
    int64_t total = 0;
    for (int i = 0, k = 0; i < t->n; i++) {
        const serve_session *s = t->s[i];
        total += (int64_t)s->bytes;
        fprintf(b.f, "%s{\"id\": \"%s\", \"n_tokens\": %d, \"bytes\": %zu, \"idle_s\": %.3f, \"ready\": %s}",
                k++ ? ", " : "", s->id, s->n, s->bytes, now - s->last_use, s->ready ? "true" : "false");
    }
    fprintf(b.f, "], \"bytes\": %lld, \"evicted\": %d, \"max_sessions\": %d, \"max_mib\": %lld}\n", (long long)total,
            t->n_evicted, t->max_sessions, (long long)(t->max_bytes >> 20));
    pthread_mutex_unlock(&t->mu);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_session_get(struct mg_connection *c, serve_server *sv, serve_session *s) {
    send_session(c, sv, s, 0, NULL);
    return 200;
}

/* -------------------------------------------------------------- generate */

int serve_api_generate(struct mg_connection *c, serve_server *sv, serve_session *s) {
    cJSON *req;
    int st = serve_body_json(c, sv, &req);
    if (st) return st;
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(req, "n"), *jt = cJSON_GetObjectItemCaseSensitive(req, "temperature"),
                *jk = cJSON_GetObjectItemCaseSensitive(req, "top_k"), *jp = cJSON_GetObjectItemCaseSensitive(req, "top_p"),
                *js = cJSON_GetObjectItemCaseSensitive(req, "seed");
    const int room = s->cap - s->n;
    qkv_sampler_params sp = {.seed = 1};
    int n = 16;
    if (jn && !(cJSON_IsNumber(jn) && jn->valuedouble >= 1 && jn->valuedouble <= room && jn->valuedouble == (int)jn->valuedouble))
        st = http_error(c, 400, "\"n\": want an integer in [1, %d] (the session's free positions)", room);
    else if (jt && !(cJSON_IsNumber(jt) && jt->valuedouble >= 0 && jt->valuedouble <= 100))
        st = http_error(c, 400, "\"temperature\": want a number in [0, 100]");
    else if (jk && !(cJSON_IsNumber(jk) && jk->valuedouble >= 0 && jk->valuedouble <= sv->cfg.n_vocab && jk->valuedouble == (int)jk->valuedouble))
        st = http_error(c, 400, "\"top_k\": want an integer in [0, %d]", sv->cfg.n_vocab);
    else if (jp && !(cJSON_IsNumber(jp) && jp->valuedouble >= 0 && jp->valuedouble <= 1))
        st = http_error(c, 400, "\"top_p\": want a number in [0, 1]");
    else if (js && !(cJSON_IsNumber(js) && js->valuedouble >= 0 && js->valuedouble <= 9007199254740992.0))
        st = http_error(c, 400, "\"seed\": want an integer in [0, 2^53]");
    else if (room < 1)
        st = http_error(c, 400, "the session's %d positions are all used", s->cap);
    if (jn) n = (int)jn->valuedouble;
    if (jt) sp.temperature = (float)jt->valuedouble;
    if (jk) sp.top_k = (int)jk->valuedouble;
    if (jp) sp.top_p = (float)jp->valuedouble;
    if (js) sp.seed = (uint64_t)js->valuedouble;
    cJSON_Delete(req);
    if (st) return st;
    if (n > room) n = room;
    qkv_sampler *smp = NULL;
    qkv_error err = {0};
    if (qkv_sampler_init(&smp, sv->cfg.n_vocab, &sp, &err)) return http_error(c, 400, "%s", err.msg);
    const int sse = http_wants_sse(c);
    if (sse && http_sse_start(c)) {
        qkv_sampler_free(smp);
        return 200;
    }
    char msg[512] = "";
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const int32_t tok = qkv_sample(smp, s->logits);
        rc = serve_session_append(sv, s, &tok, 1, NULL, NULL, msg, sizeof msg);
        if (!rc && sse) {
            char *data = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&data, &len);
            if (f) {
                fputs("{\"token\": ", f);
                cli_json_token(f, tok, s->pieces[s->n - 1]);
                fprintf(f, ", \"n_tokens\": %d}", s->n);
            }
            const int gone = !f || fclose(f) || http_sse_event(c, "token", data, len);
            free(data);
            if (gone) break; /* the client went away: keep what was made */
        }
        if (qkv_token_ends_turn(sv->tok, tok) || tok == qkv_tokenizer_eos(sv->tok)) break;
    }
    qkv_sampler_free(smp);
    if (rc) {
        /* the cache and the ids may disagree now: start the sequence again from its ids */
        char ignore[8];
        serve_table_remove(&sv->table, s->id, ignore, sizeof ignore);
        if (!sse) return http_error(c, 500, "%s (session %s dropped)", msg, s->id);
        sse_error(c, msg);
        http_sse_end(c);
        return 200;
    }
    send_session(c, sv, s, sse, "session");
    if (sse) http_sse_end(c);
    return 200;
}
