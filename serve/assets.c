/* assets.c — GET / and /assets/NAME from the embedded table (assets.h):
 * gzipped when the client accepts gzip, else the file as written. */
#include "assets.h"
#include "server.h"

#include <string.h>

const serve_asset *serve_asset_find(const char *name) {
    for (int i = 0; i < serve_asset_count; i++)
        if (!strcmp(serve_asset_table[i].name, name)) return &serve_asset_table[i];
    return NULL;
}

/* 1 when Accept-Encoding lists gzip (without q=0). */
static int accepts_gzip(struct mg_connection *c) {
    const char *ae = mg_get_header(c, "Accept-Encoding");
    const char *g = ae ? strstr(ae, "gzip") : NULL;
    if (!g) return 0;
    return strncmp(g + 4, ";q=0", 4) != 0 || !strncmp(g + 4, ";q=0.", 5);
}

int serve_assets(struct mg_connection *c, const char *path) {
    const char *name = !strcmp(path, "/") ? "index.html" : !strncmp(path, "/assets/", 8) ? path + 8 : NULL;
    const serve_asset *a = name ? serve_asset_find(name) : NULL;
    if (!a) return http_error(c, 404, "not found: %.80s", path);
    const int gz = accepts_gzip(c);
    const unsigned char *data = gz ? a->gz : a->raw, *end = gz ? a->gz_end : a->raw_end;
    const size_t len = (size_t)(end - data);
    mg_printf(c,
              "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sVary: Accept-Encoding\r\n"
              "Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
              "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:\r\n\r\n",
              a->type, len, gz ? "Content-Encoding: gzip\r\n" : "");
    if (strcmp(mg_get_request_info(c)->request_method, "HEAD")) mg_write(c, data, len);
    return 200;
}
