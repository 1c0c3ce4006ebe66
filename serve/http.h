/*
 * http.h — the few things every handler does over CivetWeb (serve/http.c):
 * JSON bodies built in a memory stream, one-line JSON errors with a 4xx
 * status, the request body read under a limit (413 above it), query
 * parameters parsed strictly (400 naming the parameter), and Server-Sent
 * Events over a chunked response. No HTTP is parsed here: CivetWeb does it.
 */
#ifndef QKV_SERVE_HTTP_H
#define QKV_SERVE_HTTP_H

#include <civetweb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A response body being written: f is an open_memstream. */
typedef struct {
    FILE *f;
    char *data;
    size_t len;
} http_buf;

/* 0, or -1 (out of memory: a 500 has been sent). */
int http_buf_open(struct mg_connection *c, http_buf *b);
/* Closes b and sends it with status and content type (NULL: application/json). */
void http_buf_send(struct mg_connection *c, http_buf *b, int status, const char *type);
/* Closes b without sending (the handler failed after opening it). */
void http_buf_drop(http_buf *b);

/* Sends {"error": "<message>"} with status (4xx, 5xx); returns status. */
int http_error(struct mg_connection *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The request body, NUL-terminated, malloc'd into *out (len without the NUL).
 * 0, or the status already sent: 413 past max bytes, 400 for a body that
 * could not be read. */
int http_read_body(struct mg_connection *c, int64_t max, char **out, size_t *len);

/* Query parameter name: 1 when present (value decoded into buf[cap], cap <= 256), 0 when absent (buf untouched),
 * -1 when too long or malformed (400 sent). */
int http_query(struct mg_connection *c, const char *name, char *buf, size_t cap);
/* An integer query parameter in [lo, hi]; absent: def when has_def, else
 * 400. 0, or the status sent (400 naming the parameter and its range). */
int http_query_int(struct mg_connection *c, const char *name, int *out, long lo, long hi, int has_def, int def);

/* 1 when the client asked for Server-Sent Events (Accept: text/event-stream). */
int http_wants_sse(struct mg_connection *c);
/* The 200 headers of an event stream (chunked). 0, or -1 when the client is gone. */
int http_sse_start(struct mg_connection *c);
/* One event: "event: name\ndata: <data>\n\n" (data one line). 0, or -1 when the client is gone. */
int http_sse_event(struct mg_connection *c, const char *name, const char *data, size_t len);
/* The terminating chunk. */
void http_sse_end(struct mg_connection *c);

/* 1 when s[0..len) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int http_utf8_valid(const char *s, size_t len);

#endif /* QKV_SERVE_HTTP_H */
