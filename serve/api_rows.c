/*
 * api_rows.c — a session's attention and next-token endpoints: one row
 * (attention), every layer and head's row of one query summarised (grid),
 * a block of rows (rows), the top tokens (next), and the edit: heads zeroed
 * and keys hidden for the last query, its next-token distribution before
 * and after, their KL, and the row it changes.
 */
#include "server.h"
#include "replay.h"
#include "json_out.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* head=H or head=mean (QKV_ALL); 0, or 400 sent. */
static int query_head(struct mg_connection *c, const serve_server *sv, int *head) {
    char buf[16];
    const int r = http_query(c, "head", buf, sizeof buf);
    if (r < 0) return 400;
    if (r == 1 && !strcmp(buf, "mean")) {
        *head = QKV_ALL;
        return 0;
    }
    return http_query_int(c, "head", head, 0, sv->cfg.n_head - 1, 0, 0);
}

static void floats_json(FILE *f, const float *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, i ? ", %.9g" : "%.9g", (double)v[i]);
    fputc(']', f);
}

/* m: [rows, cols] as rows of floats_json, one a line */
static void matrix_json(FILE *f, const float *m, int rows, int cols) {
    for (int i = 0; i < rows; i++) {
        fputs(i ? ",\n" : "", f);
        floats_json(f, m + (size_t)i * cols, cols);
    }
}

static void head_json(FILE *f, int head) {
    if (head == QKV_ALL) fputs("\"mean\"", f);
    else fprintf(f, "%d", head);
}

int serve_api_attention(struct mg_connection *c, serve_server *sv, serve_session *s) {
    int layer, head, q, st;
    char fmt[16] = "json";
    if ((st = http_query_int(c, "layer", &layer, 0, sv->cfg.n_layer - 1, 0, 0)) || (st = query_head(c, sv, &head)) ||
        (st = http_query_int(c, "query", &q, 0, s->n - 1, 1, s->n - 1)) || http_query(c, "format", fmt, sizeof fmt) < 0)
        return st ? st : 400;
    if (strcmp(fmt, "json") && strcmp(fmt, "f32")) return http_error(c, 400, "format=%s: want json or f32", fmt);
    float *w = malloc((size_t)(q + 1) * sizeof(float));
    char msg[512];
    if (!w) return http_error(c, 500, "out of memory");
    if (serve_rows(s, w, layer, head, q, 1, 0, q + 1, msg, sizeof msg)) {
        free(w);
        return http_error(c, 500, "%s", msg);
    }
    if (!strcmp(fmt, "f32")) {
        mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %zu\r\n\r\n",
                  (size_t)(q + 1) * sizeof(float));
        mg_write(c, w, (size_t)(q + 1) * sizeof(float));
        free(w);
        return 200;
    }
    http_buf b;
    if (http_buf_open(c, &b)) {
        free(w);
        return 500;
    }
    fprintf(b.f, "{\"layer\": %d, \"head\": ", layer);
    head_json(b.f, head);
    fprintf(b.f, ", \"query\": %d, \"window\": %d, \"sink\": %.9g, \"weights\": ", q,
            qkv_model_layer_slides(&sv->cfg, layer) ? sv->cfg.window : 0, (double)w[0]);
    floats_json(b.f, w, q + 1);
    fputs("}\n", b.f);
    free(w);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_rows(struct mg_connection *c, serve_server *sv, serve_session *s) {
    int layer, head, q0, q1, k0, k1, st;
    if ((st = http_query_int(c, "layer", &layer, 0, sv->cfg.n_layer - 1, 0, 0)) || (st = query_head(c, sv, &head)) ||
        (st = http_query_int(c, "q0", &q0, 0, s->n - 1, 0, 0)) || (st = http_query_int(c, "q1", &q1, q0 + 1, s->n, 0, 0)) ||
        (st = http_query_int(c, "k0", &k0, 0, s->n - 1, 1, 0)) || (st = http_query_int(c, "k1", &k1, k0 + 1, s->n, 1, s->n)))
        return st;
    if (q1 - q0 > 256 || k1 - k0 > 4096)
        return http_error(c, 400, "at most 256 rows and 4096 keys per request (asked %d x %d)", q1 - q0, k1 - k0);
    const int nq = q1 - q0, nk = k1 - k0;
    float *w = malloc((size_t)nq * nk * sizeof(float));
    char msg[512];
    if (!w) return http_error(c, 500, "out of memory");
    if (serve_rows(s, w, layer, head, q0, nq, k0, nk, msg, sizeof msg)) {
        free(w);
        return http_error(c, 500, "%s", msg);
    }
    http_buf b;
    if (http_buf_open(c, &b)) {
        free(w);
        return 500;
    }
    fprintf(b.f, "{\"layer\": %d, \"head\": ", layer);
    head_json(b.f, head);
    fprintf(b.f, ", \"q0\": %d, \"q1\": %d, \"k0\": %d, \"k1\": %d, \"values\": [", q0, q1, k0, k1);
    matrix_json(b.f, w, nq, nk);
    fputs("]}\n", b.f);
    free(w);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_grid(struct mg_connection *c, serve_server *sv, serve_session *s) {
    int q, key = 0, st;
    char metric[16] = "sink";
    const int L = sv->cfg.n_layer, H = sv->cfg.n_head;
    if ((st = http_query_int(c, "query", &q, 0, s->n - 1, 1, s->n - 1)) || http_query(c, "metric", metric, sizeof metric) < 0)
        return st ? st : 400;
    const int is_key = !strcmp(metric, "key"), is_entropy = !strcmp(metric, "entropy");
    if (!is_key && !is_entropy && strcmp(metric, "sink"))
        return http_error(c, 400, "metric=%s: want key, entropy or sink", metric);
    if (is_key && (st = http_query_int(c, "key", &key, 0, q, 0, 0))) return st;
    const size_t row = (size_t)q + 1;
    float *w = malloc((size_t)L * H * row * sizeof(float));
    char msg[512];
    if (!w) return http_error(c, 500, "out of memory");
    if (serve_rows_all_layers(s, w, q, msg, sizeof msg)) {
        free(w);
        return http_error(c, 500, "%s", msg);
    }
    http_buf b;
    if (http_buf_open(c, &b)) {
        free(w);
        return 500;
    }
    fprintf(b.f, "{\"metric\": \"%s\", \"query\": %d, ", metric, q);
    if (is_key) fprintf(b.f, "\"key\": %d, ", key);
    fputs("\"windows\": [", b.f);
    for (int l = 0; l < L; l++) fprintf(b.f, "%s%d", l ? ", " : "", qkv_model_layer_slides(&sv->cfg, l) ? sv->cfg.window : 0);
    fputs("], \"values\": [", b.f);
    for (int l = 0; l < L; l++) {
        fputs(l ? ",\n[" : "[", b.f);
        for (int h = 0; h < H; h++) {
            const float *r = w + ((size_t)l * H + h) * row;
            qkv_row_stats rs;
            qkv_row_stats_of(&rs, r, (int)row, 1);
            const double v = is_key ? r[key] : is_entropy ? rs.entropy : rs.sink;
            fprintf(b.f, h ? ", %.9g" : "%.9g", v);
        }
        fputc(']', b.f);
    }
    fputs("]}\n", b.f);
    free(w);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_overview(struct mg_connection *c, serve_server *sv, serve_session *s) {
    int layer, head, st;
    if ((st = http_query_int(c, "layer", &layer, 0, sv->cfg.n_layer - 1, 0, 0)) ||
        (st = http_query_int(c, "head", &head, 0, sv->cfg.n_head - 1, 0, 0)))
        return st;
    float *grid = malloc((size_t)SERVE_OVERVIEW_BINS * SERVE_OVERVIEW_BINS * sizeof(float));
    if (!grid) return http_error(c, 500, "out of memory");
    int block = 0;
    const int bins = qkv_overview_get(s->overview, grid, layer, head, s->n, &block);
    if (bins < 1) {
        free(grid);
        return http_error(c, 500, "the overview does not cover the session's %d positions", s->n);
    }
    http_buf b;
    if (http_buf_open(c, &b)) {
        free(grid);
        return 500;
    }
    fprintf(b.f, "{\"layer\": %d, \"head\": %d, \"n\": %d, \"block\": %d, \"bins\": %d, \"window\": %d, \"values\": [", layer,
            head, s->n, block, bins, qkv_model_layer_slides(&sv->cfg, layer) ? sv->cfg.window : 0);
    matrix_json(b.f, grid, bins, bins);
    fputs("]}\n", b.f);
    free(grid);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

int serve_api_next(struct mg_connection *c, serve_server *sv, serve_session *s) {
    int k, st;
    if ((st = http_query_int(c, "k", &k, 1, SERVE_MAX_K, 1, 10))) return st;
    http_buf b;
    if (http_buf_open(c, &b)) return 500;
    fputs("{\"top\": ", b.f);
    serve_top_json(b.f, sv, s->logits, k);
    fputs("}\n", b.f);
    http_buf_send(c, &b, 200, NULL);
    return 200;
}

/* ------------------------------------------------------------------ edit */

/* An optional integer member in [lo, hi]: 0 (absent: *out untouched), or 400 sent. */
static int member_int(struct mg_connection *c, const cJSON *req, const char *key, int *out, long lo, long hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi || v->valuedouble != floor(v->valuedouble))
        return http_error(c, 400, "\"%s\": want an integer in [%ld, %ld]", key, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

/* "zero_heads": [[L, H], ...] and "exclude": [positions] into the options' arrays; 0 or 400 sent. */
static int edit_lists(struct mg_connection *c, const serve_server *sv, const serve_session *s, const cJSON *req,
                      qkv_head_ref **heads, int *n_heads, int **pos, int *n_pos) {
    const cJSON *zh = cJSON_GetObjectItemCaseSensitive(req, "zero_heads"), *ex = cJSON_GetObjectItemCaseSensitive(req, "exclude");
    if (zh && !cJSON_IsArray(zh)) return http_error(c, 400, "\"zero_heads\" must be an array of [layer, head] pairs");
    if (ex && !cJSON_IsArray(ex)) return http_error(c, 400, "\"exclude\" must be an array of positions");
    const int nz = zh ? cJSON_GetArraySize(zh) : 0, ne = ex ? cJSON_GetArraySize(ex) : 0;
    if (nz > sv->cfg.n_layer * sv->cfg.n_head) return http_error(c, 400, "\"zero_heads\" lists %d heads; the model has %d", nz, sv->cfg.n_layer * sv->cfg.n_head);
    if (ne > s->n) return http_error(c, 400, "\"exclude\" lists %d positions; the session has %d", ne, s->n);
    *heads = malloc((size_t)(nz ? nz : 1) * sizeof **heads);
    *pos = malloc((size_t)(ne ? ne : 1) * sizeof **pos);
    if (!*heads || !*pos) return http_error(c, 500, "out of memory");
    int i = 0;
    for (const cJSON *e = zh ? zh->child : NULL; e; e = e->next, i++) {
        const cJSON *l = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 ? e->child : NULL, *h = l ? l->next : NULL;
        if (!l || !cJSON_IsNumber(l) || !cJSON_IsNumber(h) || l->valuedouble < 0 || l->valuedouble >= sv->cfg.n_layer ||
            h->valuedouble < 0 || h->valuedouble >= sv->cfg.n_head || l->valuedouble != floor(l->valuedouble) ||
            h->valuedouble != floor(h->valuedouble))
            return http_error(c, 400, "\"zero_heads\"[%d]: want [layer, head] with layer in [0, %d) and head in [0, %d)", i,
                              sv->cfg.n_layer, sv->cfg.n_head);
        (*heads)[i] = (qkv_head_ref){(int)l->valuedouble, (int)h->valuedouble};
    }
    i = 0;
    for (const cJSON *e = ex ? ex->child : NULL; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= s->n || e->valuedouble != floor(e->valuedouble))
            return http_error(c, 400, "\"exclude\"[%d]: want a position in [0, %d)", i, s->n);
        (*pos)[i] = (int)e->valuedouble;
    }
    *n_heads = nz;
    *n_pos = ne;
    return 0;
}

int serve_api_edit(struct mg_connection *c, serve_server *sv, serve_session *s) {
    cJSON *req;
    int st = serve_body_json(c, sv, &req);
    if (st) return st;
    int k = 10, layer = -1, head = -2;
    qkv_head_ref *heads = NULL;
    int *pos = NULL, n_heads = 0, n_pos = 0;
    const cJSON *jh = cJSON_GetObjectItemCaseSensitive(req, "head");
    if (cJSON_IsString(jh) && !strcmp(jh->valuestring, "mean")) head = QKV_ALL;
    else if ((st = member_int(c, req, "head", &head, 0, sv->cfg.n_head - 1))) goto done;
    if ((st = member_int(c, req, "k", &k, 1, SERVE_MAX_K)) || (st = member_int(c, req, "layer", &layer, 0, sv->cfg.n_layer - 1)) ||
        (st = edit_lists(c, sv, s, req, &heads, &n_heads, &pos, &n_pos)))
        goto done;
    if ((layer >= 0) != (head != -2)) {
        st = http_error(c, 400, "\"layer\" and \"head\" go together (the row shown before and after)");
        goto done;
    }
    if (!n_heads && !n_pos) {
        st = http_error(c, 400, "nothing to edit: give \"zero_heads\" or \"exclude\"");
        goto done;
    }
    const int V = sv->cfg.n_vocab, n = s->n;
    float *before = malloc((size_t)V * sizeof(float)), *after = malloc((size_t)V * sizeof(float));
    float *rb = malloc((size_t)n * sizeof(float)), *ra = malloc((size_t)n * sizeof(float));
    const qkv_exclusion excl = {.positions = pos, .n = n_pos, .layer = QKV_ALL, .head = QKV_ALL};
    const qkv_forward_opts opts = {.zero_heads = heads, .n_zero_heads = n_heads, .exclude = n_pos ? &excl : NULL,
                                   .n_exclude = n_pos ? 1 : 0};
    char msg[512];
    http_buf b = {0};
    if (!before || !after || !rb || !ra) st = http_error(c, 500, "out of memory");
    else {
        memcpy(before, s->logits, (size_t)V * sizeof(float));
        if (serve_edit_last(s, after, &opts, layer, head == -2 ? 0 : head, rb, ra, msg, sizeof msg))
            st = http_error(c, 500, "%s", msg);
    }
    if (!st && !http_buf_open(c, &b)) {
        fprintf(b.f, "{\"query\": %d, \"kl\": %.10g, \"before\": {\"top\": ", n - 1, qkv_kl_logits(before, after, V));
        serve_top_json(b.f, sv, before, k);
        fputs("}, \"after\": {\"top\": ", b.f);
        serve_top_json(b.f, sv, after, k);
        fputc('}', b.f);
        if (layer >= 0) {
            fprintf(b.f, ", \"row\": {\"layer\": %d, \"head\": ", layer);
            head_json(b.f, head);
            fputs(", \"before\": ", b.f);
            floats_json(b.f, rb, n);
            fputs(", \"after\": ", b.f);
            floats_json(b.f, ra, n);
            fputc('}', b.f);
        }
        fputs("}\n", b.f);
        http_buf_send(c, &b, 200, NULL);
        st = 200;
    } else if (!st) {
        st = 500;
    }
    free(before);
    free(after);
    free(rb);
    free(ra);
done:
    free(heads);
    free(pos);
    cJSON_Delete(req);
    return st;
}
