/*
 * test_serve_hostile.c — `qkv serve` under hostile requests (issue 40's list):
 * malformed JSON, wrong types, bodies over the limit (413), layer, head,
 * query and positions out of range (400), unknown, deleted (404) and evicted
 * (410) sessions, unknown paths and methods, path traversal on the assets,
 * text that is not UTF-8, a client that goes away mid-stream (the prefill
 * stops, the session is freed), and 8 clients asking for rows while another
 * session prefills (every answer the same as alone). Each error is one JSON
 * message with its status; the server keeps serving and exits 0 (no
 * sanitizer report) at the end.
 */
#include "serve_client.h"
#include "testing.h"

#include <civetweb.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fixture(char *path, size_t cap, const char *family) {
    snprintf(path, cap, "%s/families/%s/model.gguf", test_fixture_dir(), family);
}

/* Sessions the server holds now (-1 on failure). */
static int n_sessions(int port) {
    test_json *l = serve_json(port, "GET", "/api/sessions", NULL, NULL);
    const test_json *a = l ? test_json_get(l, "sessions") : NULL;
    const int n = a ? a->n : -1;
    test_json_free(l);
    return n;
}

TEST(serve_hostile_requests) {
    char model[700];
    fixture(model, sizeof model, "qwen2");
    if (!test_require_file(model, "the family fixtures")) return;
    serve_child sv;
    const char *extra[] = {"--max-sessions", "2", "--max-body-mib", "1", NULL};
    if (!serve_start(&sv, model, extra)) return;
    const int p = sv.port;
    int st;
    test_json *s = serve_json(p, "POST", "/api/sessions", "{\"text\": \"hello world\"}", &st);
    CHECK(st == 200 && s && serve_num(s, "n_tokens") >= 2, "create: %d", st);
    const int n = s ? (int)serve_num(s, "n_tokens") : 0;
    test_json_free(s);
    /* malformed JSON and wrong types */
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": ", 400, "not JSON");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"a\"} trailing", 400, "not JSON");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "", 400, "not JSON");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "[1, 2]", 400, "JSON object");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": 5}", 400, "non-empty string");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"\"}", 400, "non-empty string");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{}", 400, "exactly one");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"a\", \"tokens\": [1]}", 400, "exactly one");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": \"1,2\"}", 400, "array of token ids");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": []}", 400, "array of token ids");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [1, 2.5]}", 400, "[1]");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [1, -1]}", 400, "token id");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [272]}", 400, "[0, 272)");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [1e300]}", 400, "token id");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [null]}", 400, "token id");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"a\", \"chat\": \"yes\"}", 400, "true or false");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"tokens\": [1], \"chat\": true}", 400, "\"chat\" needs");
    /* text that is not UTF-8: a lone continuation byte, an overlong, a surrogate, a cut sequence */
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"a\x80z\"}", 400, "not valid UTF-8");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"\xC0\xAF\"}", 400, "not valid UTF-8");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"\xED\xA0\x80\"}", 400, "not valid UTF-8");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"\xE5\xB9\"}", 400, "not valid UTF-8");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions", "{\"text\": \"\\ud800\"}", 400, NULL);
    /* a body over --max-body-mib 1 */
    const size_t big = (3u << 20) / 2;
    char *body = malloc(big + 32);
    if (body) {
        memcpy(body, "{\"text\": \"", 10);
        memset(body + 10, 'a', big);
        memcpy(body + 10 + big, "\"}", 3);
        serve_check_error(__FILE__, __LINE__, p, "POST", "/api/sessions", body, strlen(body), 413, "above the limit");
        free(body);
    }
    /* out of range: layer, head, query, keys, positions, k, n */
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=2&head=0&query=0", NULL, 400, "layer=2");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=-1&head=0", NULL, 400, "layer=-1");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=0&head=4", NULL, 400, "head=4");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=0&head=x", NULL, 400, "head=x");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=0&head=0&query=99", NULL, 400, "query=99");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=1x&head=0", NULL, 400, "layer=1x");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?head=0", NULL, 400, "layer is missing");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=99999999999999999999&head=0", NULL, 400, "layer=");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/attention?layer=0&head=0&format=xml", NULL, 400, "format=xml");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/rows?layer=0&head=0&q0=1&q1=1", NULL, 400, "q1=1");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/rows?layer=0&head=0&q0=0&q1=1&k0=0&k1=999", NULL, 400, "k1=999");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/grid?metric=volume", NULL, 400, "metric=volume");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/grid?metric=key&key=99", NULL, 400, "key=99");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/next?k=0", NULL, 400, "k=0");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/overview?layer=2&head=0", NULL, 400, "layer=2");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/overview?layer=0&head=mean", NULL, 400, "head=mean");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/lens?k=101", NULL, 400, "k=101");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/lens?pos0=99", NULL, 400, "pos0=99");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/lens?pos0=1&pos1=1", NULL, 400, "pos1=1");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"exclude\": [99]}", 400, "\"exclude\"[0]");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"exclude\": \"0\"}", 400, "array of positions");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"zero_heads\": [[0, 4]]}", 400, "\"zero_heads\"[0]");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"zero_heads\": [[0]]}", 400, "\"zero_heads\"[0]");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"zero_heads\": [[2, 0]]}", 400, "\"zero_heads\"[0]");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{}", 400, "nothing to edit");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/edit", "{\"exclude\": [0], \"layer\": 0}", 400, "go together");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"hello\"}", 400, "same count");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"hello world\"}", 400, "nothing to patch");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"hello\\u00ff\", \"metric\": \"l2\"}", 400, "\"metric\"");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"jello world\", \"sweeps\": [\"all\"]}", 400, "\"sweeps\"");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"jello world\", \"metric\": \"logit-diff\"}", 400, "needs \"answer\"");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/patch", "{\"corrupt\": \"je\xFFlo world\"}", 400, "not valid UTF-8");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/generate", "{\"n\": 100000}", 400, "\"n\"");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/generate", "{\"n\": 1, \"temperature\": -1}", 400, "temperature");
    /* unknown paths, methods, sessions */
    SERVE_CHECK_ERROR(p, "GET", "/api/nothing", NULL, 404, "no such endpoint");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s1/nothing", NULL, 404, "no such endpoint");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s99", NULL, 404, "no session s99");
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s99/attention?layer=0&head=0", NULL, 404, "no session s99");
    SERVE_CHECK_ERROR(p, "DELETE", "/api/sessions/s99", NULL, 404, "no session s99");
    SERVE_CHECK_ERROR(p, "PUT", "/api/sessions", "{}", 405, "PUT");
    SERVE_CHECK_ERROR(p, "DELETE", "/api/model", NULL, 405, "DELETE");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s1/attention?layer=0&head=0", "{}", 405, "POST");
    SERVE_CHECK_ERROR(p, "POST", "/", "x", 405, "POST");
    /* path traversal and names outside the embedded table */
    const char *paths[] = {"/assets/../Makefile", "/assets/..%2fMakefile", "/assets/%2e%2e/%2e%2e/etc/passwd",
                           "/../../../../etc/passwd", "/assets/", "/assets/index.html/", "/index.htm", "/assets//etc/passwd",
                           "/assets/%00index.html", "/web/index.html", NULL};
    for (int i = 0; paths[i]; i++) {
        serve_resp r;
        serve_req(p, "GET", paths[i], NULL, NULL, 0, &r);
        CHECK(r.status == 404 || r.status == 400, "GET %s: status %d, want 404", paths[i], r.status);
        CHECK(!r.body || (!strstr(r.body, "qkv —") && !strstr(r.body, "root:")), "GET %s: served a file", paths[i]);
        serve_resp_free(&r);
    }
    /* eviction: the least recently used of --max-sessions 2 goes, and is 410 after */
    test_json *s2 = serve_json(p, "POST", "/api/sessions", "{\"tokens\": [1, 2, 3]}", &st);
    test_json_free(s2);
    test_json *touch = serve_json(p, "GET", "/api/sessions/s1", NULL, &st);
    CHECK(st == 200, "get s1: %d", st);
    test_json_free(touch);
    test_json *s3 = serve_json(p, "POST", "/api/sessions", "{\"tokens\": [4, 5, 6]}", &st);
    CHECK(st == 200 && s3 && !strcmp(test_json_get(s3, "id")->string, "s3"), "create s3: %d", st);
    test_json_free(s3);
    SERVE_CHECK_ERROR(p, "GET", "/api/sessions/s2/next", NULL, 410, "evicted");
    SERVE_CHECK_ERROR(p, "POST", "/api/sessions/s2/edit", "{\"exclude\": [0]}", 410, "least recently used");
    touch = serve_json(p, "GET", "/api/sessions/s1", NULL, &st);
    CHECK(st == 200 && touch && serve_num(touch, "n_tokens") == n, "s1 after the eviction: %d", st);
    test_json_free(touch);
    CHECK(n_sessions(p) == 2, "sessions held: %d, want 2", n_sessions(p));
    /* the server still answers well */
    test_json *a = serve_json(p, "GET", "/api/sessions/s1/attention?layer=1&head=3", NULL, &st);
    CHECK(st == 200 && a && test_json_get(a, "weights")->n == n, "attention after it all: %d", st);
    test_json_free(a);
    serve_stop(&sv);
}

/* A server that cannot start: one line on stderr, exit 2, nothing on stdout. */
TEST(serve_hostile_cli_bad_start) {
    char model[700];
    fixture(model, sizeof model, "qwen2");
    if (!test_require_file(model, "the family fixtures")) return;
    CHECK_BAD_CLI(((const char *const[]){"serve", "-m", "/nonexistent/model.gguf", "--port", "0", NULL}), "/nonexistent/model.gguf");
    CHECK_BAD_CLI(((const char *const[]){"serve", "-m", model, "--port", "0", "--ctx", "16777216", NULL}), "--ctx 16777216");
    CHECK_BAD_CLI(((const char *const[]){"serve", "-m", model, "--port", "0", "--host", "256.0.0.1", NULL}), "could not listen");
    CHECK_BAD_CLI(((const char *const[]){"serve", "-m", model, "--max-sessions", "0", NULL}), "out of range");
}

TEST(serve_hostile_session_too_large) {
    if (!test_require_model()) return;
    serve_child sv;
    const char *extra[] = {"--max-mib", "1", "--ctx", "32", NULL};
    if (!serve_start(&sv, test_model_path(), extra)) return;
    /* 33 tokens: above --ctx */
    char body[400] = "{\"tokens\": [1";
    for (int i = 1; i < 33; i++) strcat(body, ", 1");
    strcat(body, "]}");
    SERVE_CHECK_ERROR(sv.port, "POST", "/api/sessions", body, 400, "above --ctx 32");
    SERVE_CHECK_ERROR(sv.port, "POST", "/api/sessions", "{\"tokens\": [1, 2]}", 400, "above --max-mib 1");
    CHECK(n_sessions(sv.port) == 0, "a refused session was kept");
    serve_stop(&sv);
}

/* Lens and patch run the whole sequence in one call on a model of their own:
 * its state and the probe's own bytes (the lens's L x n x E residuals, its
 * logit rows and [L, n, k] outputs) are held to --max-mib together. Here
 * 1200 tokens: 3.7 MiB of run state, the lens 1.9 MiB at k=1 (fits in 6),
 * 9.2 MiB at k=100 (does not). */
TEST(serve_hostile_probe_too_large) {
    char model[700];
    fixture(model, sizeof model, "qwen2");
    if (!test_require_file(model, "the family fixtures")) return;
    serve_child sv;
    const char *extra[] = {"--max-mib", "6", "--ctx", "4096", NULL};
    if (!serve_start(&sv, model, extra)) return;
    char *body = malloc(1200 * 8 + 32);
    if (body) {
        size_t len = (size_t)sprintf(body, "{\"tokens\": [5");
        for (int i = 1; i < 1200; i++) len += (size_t)sprintf(body + len, ", %d", 5 + (i * 7) % 250);
        strcpy(body + len, "]}");
        int st;
        test_json *s = serve_json(sv.port, "POST", "/api/sessions", body, &st);
        CHECK(st == 200 && s && serve_num(s, "bytes") < 3 << 20, "create: %d", st);
        test_json_free(s);
        SERVE_CHECK_ERROR(sv.port, "GET", "/api/sessions/s1/lens?k=100", NULL, 400,
                          "3.7 MiB of run state and 9.2 MiB of the lens's residuals and outputs, above --max-mib 6");
        test_json *a = serve_json(sv.port, "GET", "/api/sessions/s1/attention?layer=1&head=0&query=600", NULL, &st);
        CHECK(st == 200, "the session after the refused probe: %d", st);
        test_json_free(a);
        test_json *l = serve_json(sv.port, "GET", "/api/sessions/s1/lens?k=1", NULL, &st);
        CHECK(st == 200 && l && serve_num(l, "n_tokens") == 1200, "the lens within --max-mib: %d", st);
        test_json_free(l);
    }
    free(body);
    serve_stop(&sv);
}

/* ------------------------------------------------ disconnect, concurrency */

/* {"tokens": [...n ids...]} of SmolLM2 ids, malloc'd. */
static char *long_tokens(int n) {
    char *b = malloc((size_t)n * 8 + 32);
    if (!b) return NULL;
    strcpy(b, "{\"tokens\": [1");
    size_t len = strlen(b);
    for (int i = 1; i < n; i++) len += (size_t)sprintf(b + len, ", %d", 200 + (i * 7919) % 40000);
    strcpy(b + len, "]}");
    return b;
}

TEST(serve_hostile_client_leaves_mid_stream) {
    if (!test_require_model()) return;
    serve_child sv;
    const char *extra[] = {"--threads", "2", NULL};
    if (!serve_start(&sv, test_model_path(), extra)) return;
    char *body = long_tokens(1500), ebuf[256];
    mg_init_library(0);
    struct mg_connection *c = body ? mg_connect_client("127.0.0.1", sv.port, 0, ebuf, sizeof ebuf) : NULL;
    CHECK(c != NULL, "connect: %s", ebuf);
    if (c) {
        mg_printf(c, "POST /api/sessions HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Length: %zu\r\n\r\n", strlen(body));
        mg_write(c, body, strlen(body));
        CHECK(mg_get_response(c, ebuf, sizeof ebuf, 120000) >= 0 && mg_get_response_info(c)->status_code == 200, "no stream");
        char first[64] = "";
        const int got = mg_read(c, first, sizeof first - 1);
        CHECK(got > 0 && strstr(first, "event: progress"), "no progress event: %s", first);
        mg_close_connection(c); /* gone mid-prefill */
    }
    mg_exit_library();
    /* the prefill stops and the session is freed */
    int held = -1;
    for (int i = 0; i < 600 && (held = n_sessions(sv.port)) != 0; i++) usleep(100000);
    CHECK(held == 0, "the abandoned session is still held (%d sessions)", held);
    char err[64] = "";
    (void)err;
    test_json *m = serve_json(sv.port, "GET", "/api/model", NULL, NULL);
    CHECK(m && serve_num(m, "n_layer") == 30, "the server stopped answering");
    test_json_free(m);
    free(body);
    serve_stop(&sv);
}

/* The other session's prefill: 0 before its first progress event, 1 while
 * it streams, 2 once its stream has ended. */
static atomic_int prefilling;

typedef struct {
    int port, failures, asked, during;
    const double *want;
} row_client;

/* Waits for the prefill to start, then asks for the row at least 3 times and
 * on until the prefill ends; `during`: answers asked and read while it ran. */
static void *ask_rows(void *user) {
    row_client *rc = user;
    while (atomic_load(&prefilling) == 0) usleep(1000);
    for (int i = 0; i < 3 || (atomic_load(&prefilling) == 1 && i < 2000); i++) {
        const int before = atomic_load(&prefilling);
        test_json *a = serve_json(rc->port, "GET", "/api/sessions/s1/attention?layer=5&head=1&query=12", NULL, NULL);
        const test_json *w = a ? test_json_get(a, "weights") : NULL;
        double v[13];
        if (!w || test_json_numbers(w, v, 13) != 13) rc->failures++;
        else
            for (int k = 0; k < 13; k++)
                if (fabs(v[k] - rc->want[k]) > 1e-6) rc->failures++;
        test_json_free(a);
        rc->asked++;
        if (before == 1 && atomic_load(&prefilling) == 1) rc->during++;
    }
    return NULL;
}

typedef struct {
    int port, ok;
    const char *body;
} prefill_client;

/* POST /api/sessions as an event stream: prefilling is 1 from its first
 * progress event to its end; ok when the stream ends with the session. */
static void *prefill(void *user) {
    prefill_client *pc = user;
    char ebuf[256], tail[4096] = "";
    struct mg_connection *c = mg_connect_client("127.0.0.1", pc->port, 0, ebuf, sizeof ebuf);
    if (c) {
        mg_printf(c, "POST /api/sessions HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Length: %zu\r\n\r\n",
                  strlen(pc->body));
        mg_write(c, pc->body, strlen(pc->body));
        if (mg_get_response(c, ebuf, sizeof ebuf, 120000) >= 0 && mg_get_response_info(c)->status_code == 200) {
            size_t len = 0;
            int got;
            /* small reads: mg_read waits until it has all the bytes asked for */
            while ((got = mg_read(c, tail + len, 16)) > 0) {
                len += (size_t)got;
                tail[len] = 0;
                if (strstr(tail, "event: progress")) atomic_store(&prefilling, 1);
                if (strstr(tail, "event: session")) pc->ok = 1;
                if (len > sizeof tail / 2) { /* keep the last quarter: a marker cut by a read is in it */
                    memmove(tail, tail + len - sizeof tail / 4, sizeof tail / 4);
                    len = sizeof tail / 4;
                    tail[len] = 0;
                }
            }
        }
        mg_close_connection(c);
    }
    atomic_store(&prefilling, 2);
    return NULL;
}

/* 8 clients read a row of one session while another session prefills: every
 * row read during the prefill equals the row read alone, the prefill ends
 * with its session, and both sessions are held afterwards (none leaked, none
 * lost). 160 tokens: 30 layers of progress events to read rows between. */
TEST(serve_hostile_rows_during_prefill) {
    if (!test_require_model()) return;
    serve_child sv;
    const char *extra[] = {"--threads", "2", NULL};
    if (!serve_start(&sv, test_model_path(), extra)) return;
    int st;
    test_json *s = serve_json(sv.port, "POST", "/api/sessions", "{\"text\": \"One, two, three, four, five, six, seven, eight, nine\"}", &st);
    CHECK(st == 200 && s && serve_num(s, "n_tokens") > 13, "create: %d", st);
    test_json_free(s);
    test_json *a = serve_json(sv.port, "GET", "/api/sessions/s1/attention?layer=5&head=1&query=12", NULL, &st);
    double want[13];
    CHECK(a && test_json_numbers(test_json_get(a, "weights"), want, 13) == 13, "reference row: %d", st);
    test_json_free(a);
    mg_init_library(0); /* held while the clients connect and leave */
    atomic_store(&prefilling, 0);
    char *body = long_tokens(160);
    prefill_client pc = {.port = sv.port, .body = body ? body : "{}"};
    row_client rc[8];
    pthread_t tp, tr[8];
    for (int i = 0; i < 8; i++) {
        rc[i] = (row_client){.port = sv.port, .want = want};
        pthread_create(&tr[i], NULL, ask_rows, &rc[i]);
    }
    pthread_create(&tp, NULL, prefill, &pc);
    int during = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(tr[i], NULL);
        CHECK(rc[i].failures == 0, "client %d: %d of %d rows differ from the row asked alone", i, rc[i].failures, rc[i].asked);
        during += rc[i].during;
    }
    pthread_join(tp, NULL);
    mg_exit_library();
    CHECK(pc.ok, "the prefill beside them did not end with its session");
    CHECK(during > 0, "no row was read while the prefill ran: the test proves nothing");
    CHECK(n_sessions(sv.port) == 2, "sessions held: %d, want 2", n_sessions(sv.port));
    free(body);
    serve_stop(&sv);
}
