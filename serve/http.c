/* http.c — response and request helpers over CivetWeb (http.h). */
#include "http.h"
#include "qkv_render.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void send_bytes(struct mg_connection *c, int status, const char *type, const char *extra, const void *data,
                       size_t len) {
    mg_printf(c,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
              "X-Content-Type-Options: nosniff\r\n%s\r\n",
              status, status_text(status), type, len, extra ? extra : "");
    if (len) mg_write(c, data, len);
}

int http_buf_open(struct mg_connection *c, http_buf *b) {
    *b = (http_buf){0};
    if ((b->f = open_memstream(&b->data, &b->len))) return 0;
    http_error(c, 500, "out of memory");
    return -1;
}

void http_buf_drop(http_buf *b) {
    if (b->f) fclose(b->f);
    free(b->data);
    *b = (http_buf){0};
}

void http_buf_send(struct mg_connection *c, http_buf *b, int status, const char *type) {
    if (fclose(b->f)) {
        b->f = NULL;
        http_buf_drop(b);
        http_error(c, 500, "out of memory");
        return;
    }
    b->f = NULL;
    send_bytes(c, status, type ? type : "application/json", NULL, b->data, b->len);
    http_buf_drop(b);
}

int http_error(struct mg_connection *c, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *data = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&data, &len);
    if (f) {
        fputs("{\"error\": ", f);
        qkv_json_string(f, msg, 0);
        fputs("}\n", f);
    }
    if (!f || fclose(f)) {
        static const char oom[] = "{\"error\": \"out of memory\"}\n";
        send_bytes(c, status, "application/json", NULL, oom, sizeof oom - 1);
    } else {
        send_bytes(c, status, "application/json", status == 405 ? "Allow: GET, POST, DELETE\r\n" : NULL, data, len);
    }
    free(data);
    return status;
}

int http_read_body(struct mg_connection *c, int64_t max, char **out, size_t *len) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    *out = NULL;
    *len = 0;
    if (ri->content_length > max)
        return http_error(c, 413, "the request body is %lld bytes, above the limit of %lld (--max-body-mib)",
                          ri->content_length, (long long)max);
    /* a chunked body has no length: read up to one byte past the limit */
    size_t cap = ri->content_length >= 0 ? (size_t)ri->content_length : 65536, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return http_error(c, 500, "out of memory");
    for (;;) {
        if (n == cap) {
            if (ri->content_length >= 0 || (int64_t)cap > max) break;
            char *grown = realloc(buf, cap * 2 + 1);
            if (!grown) {
                free(buf);
                return http_error(c, 500, "out of memory");
            }
            buf = grown;
            cap *= 2;
        }
        const int r = mg_read(c, buf + n, cap - n);
        if (r < 0) {
            free(buf);
            return http_error(c, 400, "the request body could not be read");
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if ((int64_t)n > max) {
        free(buf);
        return http_error(c, 413, "the request body is above the limit of %lld bytes (--max-body-mib)", (long long)max);
    }
    if (ri->content_length >= 0 && (int64_t)n != ri->content_length) {
        free(buf);
        return http_error(c, 400, "the request body ended after %zu of its %lld bytes", n, ri->content_length);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int http_query(struct mg_connection *c, const char *name, char *buf, size_t cap) {
    const char *qs = mg_get_request_info(c)->query_string;
    if (!qs) return 0;
    char tmp[256];
    const int r = mg_get_var(qs, strlen(qs), name, tmp, cap < sizeof tmp ? cap : sizeof tmp);
    if (r == -1) return 0; /* absent: buf keeps the caller's default */
    if (r < 0) {
        http_error(c, 400, "query parameter %s: too long or malformed", name);
        return -1;
    }
    memcpy(buf, tmp, (size_t)r + 1);
    return 1;
}

int http_query_int(struct mg_connection *c, const char *name, int *out, long lo, long hi, int has_def, int def) {
    char buf[64];
    const int r = http_query(c, name, buf, sizeof buf);
    if (r < 0) return 400;
    if (r == 0) {
        if (has_def) {
            *out = def;
            return 0;
        }
        return http_error(c, 400, "query parameter %s is missing (an integer in [%ld, %ld])", name, lo, hi);
    }
    char *end;
    const long v = strtol(buf, &end, 10);
    if (!*buf || *end || v < lo || v > hi)
        return http_error(c, 400, "query parameter %s=%s: want an integer in [%ld, %ld]", name, buf, lo, hi);
    *out = (int)v;
    return 0;
}

int http_wants_sse(struct mg_connection *c) {
    const char *a = mg_get_header(c, "Accept");
    return a && strstr(a, "text/event-stream") != NULL;
}

int http_sse_start(struct mg_connection *c) {
    return mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                        "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n") > 0
               ? 0
               : -1;
}

int http_sse_event(struct mg_connection *c, const char *name, const char *data, size_t len) {
    char head[96];
    const int h = snprintf(head, sizeof head, "event: %s\ndata: ", name);
    char *ev = malloc((size_t)h + len + 3);
    if (!ev) return -1;
    memcpy(ev, head, (size_t)h);
    memcpy(ev + h, data, len);
    memcpy(ev + h + len, "\n\n", 2);
    const int r = mg_send_chunk(c, ev, (unsigned)((size_t)h + len + 2));
    free(ev);
    return r > 0 ? 0 : -1;
}

void http_sse_end(struct mg_connection *c) { mg_send_chunk(c, "", 0); }

int http_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        const unsigned c = *p;
        int extra;
        unsigned cp, min;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (end - p <= extra) return 0;
        for (int i = 1; i <= extra; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        p += extra + 1;
    }
    return 1;
}
