/*
 * server.c — serve_run: the model's GGUF and tokenizer, CivetWeb started on
 * the host and port asked for, one request handler that routes by method
 * and path, and a clean stop on SIGINT or SIGTERM (serve.h, docs/serve.md).
 */
#include "server.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One session's handler, run with the session's mutex held. */
typedef int (*session_handler)(struct mg_connection *c, serve_server *sv, serve_session *s);

typedef struct {
    const char *action;     /* the path after /api/sessions/{id}/ ("" for the session itself) */
    const char *method;
    session_handler fn;
} session_route;

static const session_route session_routes[] = {
    {"", "GET", serve_api_session_get},
    {"attention", "GET", serve_api_attention},
    {"grid", "GET", serve_api_grid},
    {"rows", "GET", serve_api_rows},
    {"next", "GET", serve_api_next},
    {"overview", "GET", serve_api_overview},
    {"lens", "GET", serve_api_lens},
    {"edit", "POST", serve_api_edit},
    {"patch", "POST", serve_api_patch},
    {"generate", "POST", serve_api_generate},
};

static int session_request(struct mg_connection *c, serve_server *sv, const char *method, const char *rest) {
    char id[32], msg[512];
    const char *slash = strchr(rest, '/');
    const size_t id_len = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *action = slash ? slash + 1 : "";
    if (id_len == 0 || id_len >= sizeof id) return http_error(c, 404, "no session %.40s", rest);
    memcpy(id, rest, id_len);
    id[id_len] = 0;
    if (!*action && !strcmp(method, "DELETE")) {
        const int st = serve_table_remove(&sv->table, id, msg, sizeof msg);
        if (st) return http_error(c, st, "%s", msg);
        mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n{\"deleted\": \"%s\"}\n",
                  strlen(id) + 16, id);
        return 200;
    }
    const session_route *r = NULL;
    int path_known = 0;
    for (size_t i = 0; i < sizeof session_routes / sizeof session_routes[0]; i++)
        if (!strcmp(session_routes[i].action, action)) {
            path_known = 1;
            if (!strcmp(session_routes[i].method, method)) r = &session_routes[i];
        }
    if (!path_known) return http_error(c, 404, "no such endpoint: /api/sessions/%s/%.60s", id, action);
    if (!r) return http_error(c, 405, "%s is not allowed on /api/sessions/{id}%s%s", method, *action ? "/" : "", action);
    int st;
    serve_session *s = serve_table_get(&sv->table, id, &st, msg, sizeof msg);
    if (!s) return http_error(c, st, "%s", msg);
    pthread_mutex_lock(&s->mu);
    st = r->fn(c, sv, s);
    pthread_mutex_unlock(&s->mu);
    serve_table_release(&sv->table, s);
    return st;
}

static int route(struct mg_connection *c, serve_server *sv) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *method = ri->request_method, *path = ri->local_uri_raw ? ri->local_uri_raw : ri->local_uri;
    if (!path) return http_error(c, 404, "no such path");
    if (!strncmp(path, "/api/", 5) || !strcmp(path, "/api")) {
        if (!strcmp(path, "/api/model")) {
            if (strcmp(method, "GET")) return http_error(c, 405, "%s is not allowed on /api/model", method);
            return serve_api_model(c, sv);
        }
        if (!strcmp(path, "/api/tokenize")) {
            if (strcmp(method, "POST")) return http_error(c, 405, "%s is not allowed on /api/tokenize", method);
            return serve_api_tokenize(c, sv);
        }
        if (!strcmp(path, "/api/sessions") || !strcmp(path, "/api/sessions/")) {
            if (!strcmp(method, "GET")) return serve_api_sessions_list(c, sv);
            if (!strcmp(method, "POST")) return serve_api_sessions_create(c, sv);
            return http_error(c, 405, "%s is not allowed on /api/sessions", method);
        }
        if (!strncmp(path, "/api/sessions/", 14)) return session_request(c, sv, method, path + 14);
        return http_error(c, 404, "no such endpoint: %.80s", path);
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return http_error(c, 405, "%s is not allowed on %.80s", method, path);
    if (!strcmp(path, "/health")) { /* llama.cpp's server answers the same */
        mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"status\": \"ok\"}\n");
        return 200;
    }
    return serve_assets(c, path);
}

/* CivetWeb's workers have small stacks (Debian builds it with 100 KiB);
 * libqkv's kernels keep their tiles on the stack, as on any thread of their
 * own pool (the default 8 MiB). A request runs on a thread of this size while
 * the worker waits for it. */
#define REQUEST_STACK_BYTES ((size_t)16 << 20)

typedef struct {
    struct mg_connection *c;
    serve_server *sv;
    int status;
} request_job;

static void *run_request(void *user) {
    request_job *j = user;
    j->status = route(j->c, j->sv);
    return NULL;
}

static int handle(struct mg_connection *c, void *user) {
    request_job j = {.c = c, .sv = user, .status = 500};
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr)) return http_error(c, 503, "cannot start a request thread");
    const int started = !pthread_attr_setstacksize(&attr, REQUEST_STACK_BYTES) && !pthread_create(&t, &attr, run_request, &j);
    pthread_attr_destroy(&attr);
    if (!started) return http_error(c, 503, "cannot start a request thread");
    pthread_join(t, NULL);
    return j.status;
}

/* CivetWeb's messages once it listens go to stderr; those before (a port
 * that cannot be bound) become serve_run's one line. */
static int log_message(const struct mg_connection *c, const char *message) {
    const struct mg_context *ctx = c ? mg_get_context(c) : NULL;
    const serve_server *sv = ctx ? mg_get_user_data(ctx) : NULL;
    if (sv && sv->listening) fprintf(stderr, "qkv serve: civetweb: %s\n", message);
    return 1;
}

static int is_loopback(const char *host) {
    return !strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") || !strcmp(host, "::1") || !strncmp(host, "127.", 4);
}

int serve_run(const serve_opts *o) {
    serve_server sv = {.o = *o};
    qkv_error err = {0};
    if (qkv_weights_open(&sv.weights, o->model, &err) ||
        qkv_tokenizer_load(&sv.tok, (sv.gguf = qkv_weights_gguf(sv.weights)), &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_weights_close(sv.weights);
        return 2;
    }
    sv.cfg = *qkv_weights_config(sv.weights);
    if (sv.o.ctx <= 0) sv.o.ctx = sv.cfg.n_ctx_train < QKV_MODEL_DEFAULT_CTX ? sv.cfg.n_ctx_train : QKV_MODEL_DEFAULT_CTX;
    if (sv.o.ctx > sv.cfg.n_ctx_train) {
        fprintf(stderr, "qkv: --ctx %d: the model was trained on %d positions\n", sv.o.ctx, sv.cfg.n_ctx_train);
        qkv_tokenizer_free(sv.tok);
        qkv_weights_close(sv.weights);
        return 2;
    }
    if (serve_table_init(&sv.table, o->max_sessions, o->max_bytes)) {
        fprintf(stderr, "qkv: out of memory\n");
        return 2;
    }
    /* the workers inherit this mask: only the main thread takes SIGINT and SIGTERM */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    char ports[300], threads[16];
    snprintf(ports, sizeof ports, strchr(o->host, ':') ? "[%s]:%d" : "%s:%d", o->host, o->port);
    snprintf(threads, sizeof threads, "%d", o->http_threads);
    const char *options[] = {"listening_ports", ports, "num_threads", threads, "request_timeout_ms", "600000",
                             "enable_keep_alive", "yes", "keep_alive_timeout_ms", "5000", NULL};
    struct mg_callbacks cb = {.log_message = log_message};
    mg_init_library(0);
    struct mg_context *ctx = mg_start(&cb, &sv, options);
    int rc = 0;
    if (!ctx) {
        fprintf(stderr, "qkv: could not listen on %s (in use, or not an address of this machine)\n", ports);
        rc = 2;
    } else {
        sv.listening = 1;
        mg_set_request_handler(ctx, "/", handle, &sv);
        if (!is_loopback(o->host))
            fprintf(stderr, "qkv serve: warning: listening on %s, not loopback: anyone who can reach this address can "
                            "run the model and read every session (there is no authentication)\n", o->host);
        struct mg_server_port sp[4];
        const int np = mg_get_server_ports(ctx, 4, sp);
        printf("qkv serve: http://%s%s%s:%d/ (model %s, ctx %d, %d sessions, %lld MiB)\n", strchr(o->host, ':') ? "[" : "",
               o->host, strchr(o->host, ':') ? "]" : "", np > 0 ? sp[0].port : o->port, o->model, sv.o.ctx,
               o->max_sessions, (long long)(o->max_bytes >> 20));
        fflush(stdout);
        sigset_t wait = stop;
        sigdelset(&wait, SIGPIPE);
        int sig = 0;
        sigwait(&wait, &sig);
        fprintf(stderr, "qkv serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        sv.stopping = 1;
        mg_stop(ctx);
    }
    mg_exit_library();
    serve_table_free(&sv.table);
    qkv_tokenizer_free(sv.tok);
    qkv_weights_close(sv.weights);
    return rc;
}
