/* serve_client.c — the child server and the HTTP client of the serve tests (serve_client.h). */
#include "serve_client.h"
#include "testing.h"

#include <civetweb.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int serve_start(serve_child *s, const char *model, const char *const *extra) {
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    const char *argv[40] = {bin, "serve", "-m", model, "--port", "0", "--host", "127.0.0.1"};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 39; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    static int serial;
    snprintf(s->err_path, sizeof s->err_path, "%s/serve-%d.stderr", test_tmpdir(), serial++);
    int fd[2];
    if (pipe(fd)) {
        CHECK(0, "pipe: %s", strerror(errno));
        return 0;
    }
    s->pid = fork();
    if (s->pid == 0) {
        const int e = open(s->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd[1], 1);
        if (e >= 0) dup2(e, 2);
        close(fd[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    /* the listening line, within 120 s (a sanitizer build starts slowly) */
    char line[512];
    size_t got = 0;
    s->port = 0;
    struct pollfd p = {.fd = fd[0], .events = POLLIN};
    while (got < sizeof line - 1 && poll(&p, 1, 120000) > 0) {
        const ssize_t r = read(fd[0], line + got, 1);
        if (r <= 0) break;
        if (line[got++] == '\n') break;
    }
    line[got] = 0;
    close(fd[0]);
    const char *at = strstr(line, "http://127.0.0.1:");
    if (at) s->port = atoi(at + strlen("http://127.0.0.1:"));
    CHECK(s->port > 0 && !strncmp(line, "qkv serve: http://", 18), "no listening line from qkv serve: '%s' (stderr in %s)", line,
          s->err_path);
    if (s->port > 0) return 1;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    return 0;
}

void serve_stop(serve_child *s) {
    kill(s->pid, SIGTERM);
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 600 && (r = waitpid(s->pid, &status, WNOHANG)) == 0; i++) usleep(100000);
    if (r == 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
        CHECK(0, "qkv serve did not stop within 60 s of SIGTERM");
        return;
    }
    char *err = test_read_file(s->err_path, NULL);
    if (getenv("SERVE_DEBUG")) fprintf(stderr, "%s", err ? err : "");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "qkv serve exited with status %d (signal %d); stderr: %s",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0, err ? err : "");
    free(err);
}

static const char *header_of(const struct mg_response_info *ri, const char *name) {
    for (int i = 0; i < ri->num_headers; i++)
        if (!strcasecmp(ri->http_headers[i].name, name)) return ri->http_headers[i].value;
    return NULL;
}

int serve_req(int port, const char *method, const char *path, const char *headers, const void *body, size_t len,
              serve_resp *r) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    char ebuf[256] = "";
    mg_init_library(0);
    struct mg_connection *c = mg_connect_client("127.0.0.1", port, 0, ebuf, sizeof ebuf);
    if (!c) {
        mg_exit_library();
        return -1;
    }
    mg_printf(c, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n%s\r\n", method, path, len,
              headers ? headers : "");
    if (len) mg_write(c, body, len);
    if (mg_get_response(c, ebuf, sizeof ebuf, 300000) >= 0) {
        const struct mg_response_info *ri = mg_get_response_info(c);
        r->status = ri->status_code;
        const char *t = header_of(ri, "Content-Type"), *e = header_of(ri, "Content-Encoding");
        snprintf(r->type, sizeof r->type, "%s", t ? t : "");
        snprintf(r->encoding, sizeof r->encoding, "%s", e ? e : "");
        size_t cap = 4096;
        r->body = malloc(cap + 1);
        for (int got; r->body && (got = mg_read(c, r->body + r->len, cap - r->len)) > 0;) {
            r->len += (size_t)got;
            if (r->len == cap) {
                char *g = realloc(r->body, 2 * cap + 1);
                if (!g) break;
                r->body = g;
                cap *= 2;
            }
        }
        if (r->body) r->body[r->len] = 0;
    }
    mg_close_connection(c);
    mg_exit_library();
    return r->status;
}

void serve_resp_free(serve_resp *r) {
    free(r->body);
    r->body = NULL;
}

test_json *serve_json(int port, const char *method, const char *path, const char *body, int *status) {
    serve_resp r;
    serve_req(port, method, path, body ? "Content-Type: application/json\r\n" : NULL, body, body ? strlen(body) : 0, &r);
    if (status) *status = r.status;
    char err[256] = "";
    test_json *j = r.body ? test_json_parse(r.body, err, sizeof err) : NULL;
    CHECK(j != NULL, "%s %s: status %d, the body is not JSON (%s): %.200s", method, path, r.status, err, r.body ? r.body : "");
    serve_resp_free(&r);
    return j;
}

double serve_num(const test_json *v, const char *key) {
    const test_json *x = test_json_get(v, key);
    return x && x->kind == TEST_JSON_NUMBER ? x->number : NAN;
}

void serve_check_error(const char *file, int line, int port, const char *method, const char *path, const char *body,
                       size_t len, int want_status, const char *needle) {
    serve_resp r;
    serve_req(port, method, path, body ? "Content-Type: application/json\r\n" : NULL, body, len, &r);
    char err[256] = "";
    test_json *j = r.body ? test_json_parse(r.body, err, sizeof err) : NULL;
    const test_json *e = j ? test_json_get(j, "error") : NULL;
    if (r.status != want_status) test_fail(file, line, "%s %s: status %d, want %d: %.200s", method, path, r.status, want_status, r.body ? r.body : "");
    if (!e || e->kind != TEST_JSON_STRING || strchr(e->string, '\n'))
        test_fail(file, line, "%s %s: the body is not {\"error\": \"one line\"}: %.200s", method, path, r.body ? r.body : "");
    else if (needle && !strstr(e->string, needle))
        test_fail(file, line, "%s %s: the error lacks '%s': %s", method, path, needle, e->string);
    if (strncmp(r.type, "application/json", 16)) test_fail(file, line, "%s %s: Content-Type %s", method, path, r.type);
    test_json_free(j);
    serve_resp_free(&r);
}

size_t serve_strlen(const char *s) { return s ? strlen(s) : 0; }

/* The CLI's stdout for argv (exit 0 checked); malloc'd. */
char *serve_cli_stdout(const char *const *argv) {
    char *out = NULL, *err = NULL;
    const int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "qkv %s: exit %d: %s", argv[0], rc, err ? err : "");
    free(err);
    return out;
}

void serve_check_same_as_cli(int port, const char *method, const char *path, const char *body, const char *const *argv) {
    serve_resp r;
    serve_req(port, method, path, NULL, body, serve_strlen(body), &r);
    char *cli = serve_cli_stdout(argv);
    CHECK(r.status == 200, "%s %s: status %d", method, path, r.status);
    if (cli && r.status == 200) {
        const size_t n = strlen(cli);
        size_t at = 0;
        while (at < n && at < r.len && cli[at] == r.body[at]) at++;
        CHECK(at == n && at == r.len, "%s %s: %zu bytes, qkv %s --json %zu; they differ from byte %zu: '%.60s' vs '%.60s'",
              method, path, r.len, argv[0], n, at, r.body + at, cli + at);
    }
    serve_resp_free(&r);
    free(cli);
}

