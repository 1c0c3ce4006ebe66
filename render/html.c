/*
 * html.c — the self-contained attention page (qkv inspect --html). The page
 * is written as the rows arrive, so no map is ever held: each row's keys
 * 0 .. row become 16-bit log codes, base64-encoded into the map's <script>
 * block. The page's fixed parts (style, skeleton, drawing script) are the
 * real HTML file render/inspect_page.html, embedded at build time
 * (render/page.S); this file writes the title into its <title> and the data
 * where the comment <!--qkv:data--> stands.
 *
 * Log code of a weight w: 0 for w = 0, else 1 + round(65534 * (ln w - LMIN) / -LMIN)
 * with ln w clamped to [LMIN, 0]: a step of 23/65534 in ln w, so decoding
 * is off by a relative 1.8e-4 at most.
 */
#include "qkv_render.h"
#include "util/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <assert.h>

/* render/inspect_page.html, NUL-terminated (render/page.S) */
extern const char render_inspect_page[];
#define PAGE_DATA_MARK "<!--qkv:data-->\n"

#define LMIN (-23.0) /* ln of the smallest weight told apart from 1e-10 */

struct qkv_html_writer {
    FILE *f;
    char *path;
    int n, nl, nh;
    int li, hi, row;          /* the next row expected */
    unsigned char carry[3];   /* bytes waiting for a whole base64 group */
    int n_carry, line;
    double *sink, *entropy;   /* [nl * nh] sums over rows */
    int ok;
};

/* The page cut where the writer puts its parts: [page, *title) <title text>
 * [*title_end, *data) <data> [*data + strlen(PAGE_DATA_MARK), end). */
static void page_parts(const char **title, const char **title_end, const char **data) {
    const char *page = render_inspect_page;
    const char *head = strstr(page, "<head>");
    assert(head && "render/inspect_page.html has a <head>");
    *title = strstr(head, "<title>");
    assert(*title && "render/inspect_page.html has a <title>");
    *title += strlen("<title>");
    *title_end = strstr(*title, "</title>");
    assert(*title_end && "render/inspect_page.html closes its <title>");
    *data = strstr(*title_end, PAGE_DATA_MARK);
    assert(*data && "render/inspect_page.html has the data mark");
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_group(qkv_html_writer *h, const unsigned char *b, int n) {
    char out[4];
    out[0] = b64[b[0] >> 2];
    out[1] = b64[((b[0] & 3) << 4) | (n > 1 ? b[1] >> 4 : 0)];
    out[2] = n > 1 ? b64[((b[1] & 15) << 2) | (n > 2 ? b[2] >> 6 : 0)] : '=';
    out[3] = n > 2 ? b64[b[2] & 63] : '=';
    fwrite(out, 1, 4, h->f);
    if ((h->line += 4) >= 4096) {
        fputc('\n', h->f);
        h->line = 0;
    }
}

static void b64_put(qkv_html_writer *h, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h->carry[h->n_carry++] = b[i];
        if (h->n_carry == 3) {
            b64_group(h, h->carry, 3);
            h->n_carry = 0;
        }
    }
}

static void b64_flush(qkv_html_writer *h) {
    if (h->n_carry) b64_group(h, h->carry, h->n_carry);
    h->n_carry = 0;
    h->line = 0;
}

static void open_map(qkv_html_writer *h) {
    fprintf(h->f, "<script type=\"text/plain\" class=\"qkv-map\" data-l=\"%d\" data-h=\"%d\">\n", h->li, h->hi);
}

qkv_status qkv_html_open(qkv_html_writer **out, const char *path, const qkv_maps_info *info, qkv_error *err) {
    if (!out || !path || !info || !info->labels || !info->layers || !info->heads)
        return util_fail(err, QKV_ERR_INVALID, "html: NULL argument");
    *out = NULL;
    const int n = info->n_tok, nl = info->n_layers, nh = info->n_heads;
    if (n < 1 || nl < 1 || nh < 1) return util_fail(err, QKV_ERR_INVALID, "html: empty maps");
    const int64_t weights = (int64_t)nl * nh * ((int64_t)n * (n + 1) / 2);
    if (weights > QKV_HTML_MAX_WEIGHTS)
        return util_fail(err, QKV_ERR_TOO_LARGE,
                        "html: %d x %d maps of %d tokens hold %lld weights, more than a page takes (%lld); "
                        "choose fewer with --layers/--heads",
                        nl, nh, n, (long long)weights, (long long)QKV_HTML_MAX_WEIGHTS);
    qkv_html_writer *h = calloc(1, sizeof *h);
    size_t plen = strlen(path);
    if (h) {
        h->path = malloc(plen + 1);
        h->sink = calloc((size_t)nl * nh, sizeof(double));
        h->entropy = calloc((size_t)nl * nh, sizeof(double));
    }
    if (!h || !h->path || !h->sink || !h->entropy) {
        qkv_html_abort(h);
        return util_fail(err, QKV_ERR_NOMEM, "html: out of memory");
    }
    memcpy(h->path, path, plen + 1);
    h->n = n;
    h->nl = nl;
    h->nh = nh;
    h->f = fopen(h->path, "wb");
    if (!h->f) {
        qkv_status st = util_fail(err, QKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        qkv_html_abort(h);
        return st;
    }
    FILE *f = h->f;
    const char *title, *title_end, *data;
    page_parts(&title, &title_end, &data);
    fwrite(render_inspect_page, 1, (size_t)(title - render_inspect_page), f);
    qkv_html_text(f, info->title);
    fwrite(title_end, 1, (size_t)(data - title_end), f);
    fputs("<script id=\"qkv-meta\" type=\"application/json\">\n{\"title\": ", f);
    qkv_json_string(f, info->title, 1);
    fputs(", \"subtitle\": ", f);
    qkv_json_string(f, info->subtitle, 1);
    fprintf(f, ", \"n\": %d, \"lmin\": %.1f,\n\"layers\": [", n, LMIN);
    for (int i = 0; i < nl; i++) fprintf(f, "%s%d", i ? ", " : "", info->layers[i]);
    fputs("], \"windows\": [", f);
    for (int i = 0; i < nl; i++) fprintf(f, "%s%d", i ? ", " : "", info->windows ? info->windows[i] : 0);
    fputs("], \"heads\": [", f);
    for (int i = 0; i < nh; i++) fprintf(f, "%s%d", i ? ", " : "", info->heads[i]);
    fputs("],\n\"labels\": [", f);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        qkv_json_string(f, info->labels[i], 1);
    }
    fputs("],\n\"ids\": ", f);
    if (info->ids) {
        fputc('[', f);
        for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", (int)info->ids[i]);
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    fputs("}\n</script>\n", f);
    open_map(h);
    h->ok = 1;
    *out = h;
    return QKV_OK;
}

qkv_status qkv_html_row(qkv_html_writer *h, int li, int hi, int row, const float *w, qkv_error *err) {
    if (!h->ok || li != h->li || hi != h->hi || row != h->row)
        return util_fail(err, QKV_ERR_INVALID, "html: row (%d, %d, %d) out of order, expected (%d, %d, %d)", li, hi,
                        row, h->li, h->hi, h->row);
    unsigned char buf[2 * 256];
    for (int j0 = 0; j0 <= row; j0 += 256) {
        int m = row + 1 - j0 < 256 ? row + 1 - j0 : 256;
        for (int j = 0; j < m; j++) {
            const float x = w[j0 + j];
            unsigned code = 0;
            if (x > 0) {
                double l = log((double)x);
                l = l < LMIN ? LMIN : l > 0 ? 0 : l;
                code = 1 + (unsigned)lround(65534.0 * (l - LMIN) / -LMIN);
            }
            buf[2 * j] = (unsigned char)(code & 0xff);
            buf[2 * j + 1] = (unsigned char)(code >> 8);
        }
        b64_put(h, buf, (size_t)m * 2);
    }
    /* the page's per-map figures: weight on token 0 (rows >= 1), entropy */
    const size_t k = (size_t)li * h->nh + hi;
    double ent = 0;
    for (int j = 0; j <= row; j++)
        if (w[j] > 0) ent -= (double)w[j] * log((double)w[j]);
    h->entropy[k] += ent;
    if (row > 0) h->sink[k] += w[0];
    if (++h->row == h->n) {
        b64_flush(h);
        fputs("\n</script>\n", h->f);
        h->row = 0;
        if (++h->hi == h->nh) {
            h->hi = 0;
            h->li++;
        }
        if (h->li < h->nl) open_map(h);
    }
    return QKV_OK;
}

/* The writer's memory (its file already closed or removed). */
static void writer_free(qkv_html_writer *h) {
    free(h->path);
    free(h->sink);
    free(h->entropy);
    free(h);
}

qkv_status qkv_html_close(qkv_html_writer *h, qkv_error *err) {
    if (!h) return QKV_OK;
    qkv_status st = QKV_OK;
    if (h->li != h->nl) {
        st = util_fail(err, QKV_ERR_INVALID, "%s: the page got %d of %d maps; not kept", h->path, h->li * h->nh + h->hi,
                      h->nl * h->nh);
        qkv_html_abort(h);
        return st;
    }
    FILE *f = h->f;
    fputs("<script id=\"qkv-stats\" type=\"application/json\">\n{\"sink\": [", f);
    for (int k = 0; k < h->nl * h->nh; k++) fprintf(f, "%s%.6f", k ? ", " : "", h->n > 1 ? h->sink[k] / (h->n - 1) : 1.0);
    fputs("],\n\"entropy\": [", f);
    for (int k = 0; k < h->nl * h->nh; k++) fprintf(f, "%s%.6f", k ? ", " : "", h->entropy[k] / h->n);
    fputs("]}\n</script>\n", f);
    const char *title, *title_end, *data;
    page_parts(&title, &title_end, &data);
    fputs(data + strlen(PAGE_DATA_MARK), f);
    int ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    h->f = NULL;
    if (!ok) {
        st = util_fail(err, QKV_ERR_IO, "%s: cannot write: %s", h->path, strerror(errno));
        unlink(h->path);
    }
    writer_free(h);
    return st;
}

void qkv_html_abort(qkv_html_writer *h) {
    if (!h) return;
    if (h->f) {
        fclose(h->f);
        unlink(h->path);
    }
    writer_free(h);
}
