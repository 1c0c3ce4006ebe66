/*
 * serve.h — `qkv serve`: the explorer's HTTP server (CivetWeb) over one
 * model. What cli/cmd_serve.c hands it and the one call that runs it; the
 * API it serves is docs/serve.md. Only the qkv binary links serve/ (and
 * -lcivetweb -lcjson); libqkv stays free of both.
 */
#ifndef QKV_SERVE_H
#define QKV_SERVE_H

#include "qkv.h"

#include <stdint.h>

typedef struct {
    const char *model;      /* GGUF path */
    const char *host;       /* address to bind (default 127.0.0.1) */
    int port;               /* 0: a free port, named in the listening line */
    int ctx;                /* the most positions one session holds (prompt + generated) */
    int threads;            /* libqkv's worker threads (0: all cores) */
    int max_sessions;       /* sessions held at once; the least recently used goes first */
    int64_t max_bytes;      /* bytes all sessions may hold together */
    int64_t max_body;       /* the largest request body (413 above) */
    int http_threads;       /* CivetWeb's worker threads */
    qkv_dtype kv_dtype;
} serve_opts;

/* Opens the model's GGUF and tokenizer, starts listening, prints
 * "qkv serve: http://HOST:PORT/ (model ..., ctx ...)" on stdout, and serves
 * until SIGINT or SIGTERM; then stops, frees every session and returns 0.
 * A failure to start: one line on stderr, 2. */
int serve_run(const serve_opts *o);

#endif /* QKV_SERVE_H */
