/*
 * heatmap.c — small matrices as a self-contained HTML page: one table per
 * matrix, a cell per value, coloured by it, the rows' and columns' labels on
 * the sides, the value (or a text of the caller's) in the cell and more in
 * its hover text (the cell's title attribute). Inline CSS only: no script,
 * no network, so the page works from file:// and in a notebook's output.
 * For the [L, Hq] and [L, n] arrays of `qkv patch`, `qkv attribute` and
 * `qkv lens`; the attention maps of `qkv inspect` (n x n per head, too many
 * cells for a table) are html.c's.
 */
#include "qkv_render.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* s[0 .. n) as HTML text or attribute value. */
static void put_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '<') fputs("&lt;", f);
        else if (s[i] == '>') fputs("&gt;", f);
        else if (s[i] == '&') fputs("&amp;", f);
        else if (s[i] == '"') fputs("&quot;", f);
        else fputc(s[i], f);
    }
}

void qkv_html_text(FILE *f, const char *s) { put_escaped(f, s ? s : "", s ? strlen(s) : 0); }

/* The colour of value v (0 .. 255 each): diverging blue (< 0) - white - red
 * (> 0) by |v| / vmax, else white - blue by v / vmax; t: the strength. */
static void colour_of(int rgb[3], double *t, double v, double vmax, int diverging) {
    static const int red[3] = {178, 24, 43}, blue[3] = {33, 102, 172}, deep[3] = {8, 81, 156};
    double s = vmax > 0 ? v / vmax : 0;
    s = s > 1 ? 1 : s < -1 ? -1 : s;
    if (!diverging && s < 0) s = 0;
    const int *to = !diverging ? deep : s >= 0 ? red : blue;
    *t = fabs(s);
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(255 + (to[c] - 255) * *t);
}

static const char style[] =
    "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:18px}h2{font-size:15px;margin-top:28px}"
    "p{max-width:60em}table.hm{border-collapse:collapse;font-size:11px}"
    "table.hm td{min-width:34px;height:18px;padding:1px 3px;text-align:center;border:1px solid #fff;white-space:nowrap}"
    "table.hm th{font-weight:normal;color:#555;padding:1px 4px;white-space:nowrap}"
    "table.hm th.c{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;max-height:9em;overflow:hidden}"
    "table.hm td.x{background:#eee}table.hm td:hover{outline:2px solid #222}";

/* One matrix as a table. */
static void put_map(FILE *f, const qkv_heatmap *m) {
    double vmax = m->vmax;
    if (vmax <= 0)
        for (int64_t i = 0; i < (int64_t)m->rows * m->cols; i++)
            if (isfinite(m->values[i]) && fabs(m->values[i]) > vmax) vmax = fabs(m->values[i]);
    fputs("<h2>", f);
    qkv_html_text(f, m->title);
    fputs("</h2>\n", f);
    if (m->caption) {
        fputs("<p>", f);
        qkv_html_text(f, m->caption);
        fputs("</p>\n", f);
    }
    fputs("<table class=\"hm\">\n<tr><th></th>", f);
    for (int c = 0; c < m->cols; c++) {
        fputs("<th class=\"c\">", f);
        qkv_html_text(f, m->col_labels[c]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int r = 0; r < m->rows; r++) {
        fputs("<tr><th>", f);
        qkv_html_text(f, m->row_labels[r]);
        fputs("</th>", f);
        for (int c = 0; c < m->cols; c++) {
            const size_t i = (size_t)r * m->cols + c;
            const double v = m->values[i];
            fputs("<td", f);
            if (!isfinite(v)) {
                fputs(" class=\"x\"", f);
            } else {
                int rgb[3];
                double t;
                colour_of(rgb, &t, v, vmax, m->diverging);
                fprintf(f, " style=\"background:rgb(%d,%d,%d)%s\"", rgb[0], rgb[1], rgb[2], t > 0.6 ? ";color:#fff" : "");
            }
            fputs(" title=\"", f);
            qkv_html_text(f, m->row_labels[r]);
            fputs(", ", f);
            qkv_html_text(f, m->col_labels[c]);
            if (isfinite(v)) fprintf(f, ": %.6g", v);
            else fputs(": none", f);
            if (m->hover && m->hover[i]) {
                fputs("&#10;", f);
                qkv_html_text(f, m->hover[i]);
            }
            fputs("\">", f);
            if (m->text) qkv_html_text(f, m->text[i]);
            else if (isfinite(v)) fprintf(f, "%.2f", v);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

qkv_status qkv_heatmap_page(FILE *f, const char *title, const char *intro, const qkv_heatmap *maps, int n_maps,
                            qkv_error *err) {
    if (!f || n_maps < 0 || (n_maps > 0 && !maps)) return util_fail(err, QKV_ERR_INVALID, "heatmap page: NULL argument");
    for (int k = 0; k < n_maps; k++) {
        const qkv_heatmap *m = &maps[k];
        if (m->rows < 1 || m->cols < 1 || !m->values || !m->row_labels || !m->col_labels)
            return util_fail(err, QKV_ERR_INVALID, "heatmap page: map %d has no cells or labels", k);
    }
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>", f);
    qkv_html_text(f, title);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>", style);
    qkv_html_text(f, title);
    fputs("</h1>\n", f);
    /* the intro's lines are paragraphs */
    for (const char *p = intro; p && *p;) {
        const size_t n = strcspn(p, "\n");
        fputs("<p>", f);
        put_escaped(f, p, n);
        fputs("</p>\n", f);
        p += n + (p[n] != 0);
    }
    for (int k = 0; k < n_maps; k++) put_map(f, &maps[k]);
    fputs("</body></html>\n", f);
    if (ferror(f)) return util_fail(err, QKV_ERR_IO, "heatmap page: write error");
    return QKV_OK;
}
