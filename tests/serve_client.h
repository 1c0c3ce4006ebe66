/*
 * serve_client.h — what the API tests of `qkv serve` share (tests/serve_client.c):
 * the server started as a child process on a free loopback port (--port 0,
 * the port read from its listening line) and stopped with SIGTERM (its exit
 * status checked: 0, so no sanitizer report either), and HTTP requests
 * through CivetWeb's client (mg_connect_client), the body read whole,
 * chunked or not; and an answer compared with the CLI's --json, byte for byte.
 */
#ifndef QKV_TESTS_SERVE_CLIENT_H
#define QKV_TESTS_SERVE_CLIENT_H

#include "json_read.h"

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char err_path[600];     /* its stderr */
} serve_child;

/* Starts $QKV_BIN serve -m model --port 0 --host 127.0.0.1 plus extra
 * (NULL-terminated, may be NULL); 1 when listening, else 0 after a failed CHECK. */
int serve_start(serve_child *s, const char *model, const char *const *extra);
/* SIGTERM, then waits (CHECK: exit status 0 within 60 s); its stderr is in s->err_path. */
void serve_stop(serve_child *s);

typedef struct {
    int status;             /* -1: no response */
    char *body;             /* NUL-terminated (len bytes before the NUL) */
    size_t len;
    char type[128], encoding[32];
} serve_resp;

/* One request on a fresh connection; headers: extra header lines ("Name: v\r\n"...), or NULL. */
int serve_req(int port, const char *method, const char *path, const char *headers, const void *body, size_t len,
              serve_resp *r);
void serve_resp_free(serve_resp *r);
/* serve_req, then the body parsed as JSON (NULL if it is not JSON: a failed CHECK). */
test_json *serve_json(int port, const char *method, const char *path, const char *body, int *status);
/* A number member of v (NaN when absent). */
double serve_num(const test_json *v, const char *key);
/* status and body of a request that must fail: the status and a JSON body {"error": "..."} holding needle. */
void serve_check_error(const char *file, int line, int port, const char *method, const char *path, const char *body,
                       size_t len, int want_status, const char *needle);
#define SERVE_CHECK_ERROR(port, method, path, body, status, needle) \
    serve_check_error(__FILE__, __LINE__, (port), (method), (path), (body), serve_strlen(body), (status), (needle))
/* strlen, 0 for NULL */
size_t serve_strlen(const char *s);

/* The CLI's stdout for argv (exit 0 checked); malloc'd. */
char *serve_cli_stdout(const char *const *argv);
/* The API's answer to method path (body) is `qkv argv`'s stdout (its --json) byte for byte: one writer
 * prints both (cli/probe_json.c), and the probes compute the same floats. */
void serve_check_same_as_cli(int port, const char *method, const char *path, const char *body, const char *const *argv);

#endif /* QKV_TESTS_SERVE_CLIENT_H */
