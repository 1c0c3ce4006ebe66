/*
 * chart.c — line, bar and cell charts as SVG, for the CLI's --svg plots
 * (qkv bench, needle, sinks, stream, ablate). A chart is drawn in a box of
 * the picture: the plot area, with its title above, tick labels and the y
 * title left, tick labels and the x title under it, then the legend and a
 * caption. Axes pick "nice" ticks (1, 2 or 5 times a power of ten) unless
 * the caller fixes the range. Streams the SVG to f; holds nothing. What it
 * does not do: interaction, clipping of points outside a fixed range, text
 * measurement beyond an average glyph width (qkv_text_width columns).
 */
#include "qkv_render.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TICK_FONT_PX 6.5 /* average width of a column of 11 px text */
#define LEGEND_ROW 18
#define TURNED_MAX 120   /* pixels of a turned bar label at most */

static const char *const palette[] = {"#1f5fbf", "#e8590c", "#2f9e44", "#9c36b5", "#e03131", "#868e96"};

/* ------------------------------------------------------------------ text */

void qkv_svg_text(FILE *f, const char *s) {
    uint32_t cp;
    for (int n; s && (n = qkv_text_next(&cp, s)) > 0; s += n) {
        if (cp == '<') fputs("&lt;", f);
        else if (cp == '>') fputs("&gt;", f);
        else if (cp == '&') fputs("&amp;", f);
        else if (cp == '"') fputs("&quot;", f);
        else if (cp < 0x20 || cp == 0x7f || cp == 0xFFFD) fputs("\xef\xbf\xbd", f); /* XML has no controls */
        else fwrite(s, 1, (size_t)n, f);
    }
}

static double text_px(const char *s) { return qkv_text_width(s) * TICK_FONT_PX; }

void qkv_chart_begin(FILE *f, int w, int h, const char *title) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            w, h, w, h);
    if (!title) return;
    fputs("<text x=\"20\" y=\"22\" font-size=\"14\" font-weight=\"bold\">", f);
    qkv_svg_text(f, title);
    fputs("</text>\n", f);
}

void qkv_chart_end(FILE *f) { fputs("</svg>\n", f); }

/* ----------------------------------------------------------------- layout */

/* Pixels under the area taken by tick labels and the x title (extra: turned
 * bar labels). */
static int under(const qkv_chart_box *b, int extra) { return extra + (b->x_title ? 40 : 24); }

static int legend_rows(const qkv_chart_box *b, int n) {
    const int cols = b->legend_cols > 0 ? b->legend_cols : 1;
    return (n + cols - 1) / cols;
}

int qkv_chart_below(const qkv_chart_box *b, int n_legend) {
    return under(b, 0) + LEGEND_ROW * legend_rows(b, n_legend) + (b->caption ? LEGEND_ROW : 0) + 4;
}

/* Title above, axis titles (the y title left of tick labels label_px wide),
 * caption under n_legend legend rows. */
static void frame(FILE *f, const qkv_chart_box *b, double label_px, int extra, int n_legend) {
    if (b->title) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", b->x, b->y - 10);
        qkv_svg_text(f, b->title);
        fputs("</text>\n", f);
    }
    if (b->x_title) {
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">", b->x + b->w / 2.0,
                b->y + b->h + extra + 34);
        qkv_svg_text(f, b->x_title);
        fputs("</text>\n", f);
    }
    if (b->y_title) {
        const double tx = b->x - 6 - label_px - 10, ty = b->y + b->h / 2.0;
        fprintf(f, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">", tx, ty);
        qkv_svg_text(f, b->y_title);
        fputs("</text>\n", f);
    }
    if (b->caption) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#666\">", b->x,
                b->y + b->h + under(b, extra) + LEGEND_ROW * legend_rows(b, n_legend) + 14);
        qkv_svg_text(f, b->caption);
        fputs("</text>\n", f);
    }
}

/* Legend entry i: a line (dash; a dot if dot > 0) or, with swatch, a square. */
static void legend(FILE *f, const qkv_chart_box *b, int i, int extra, const char *colour, const char *dash, double dot,
                   int swatch, const char *name) {
    const int cols = b->legend_cols > 0 ? b->legend_cols : 1;
    const double lx = b->x + (i % cols) * (double)b->w / cols;
    const int ly = b->y + b->h + under(b, extra) + LEGEND_ROW * (i / cols) + 10;
    if (swatch)
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", lx + 4, ly - 5, colour);
    else
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>\n", lx,
                lx + 22, ly, ly, colour, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    if (dot > 0) fprintf(f, "<circle cx=\"%.1f\" cy=\"%d\" r=\"%.1f\" fill=\"%s\"/>\n", lx + 11, ly, dot, colour);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#333\">", lx + 28, ly + 4);
    qkv_svg_text(f, name);
    fputs("</text>\n", f);
}

/* ------------------------------------------------------------------- axes */

/* A tick step of 1, 2 or 5 times a power of ten giving about 5 intervals. */
static double nice_step(double span) {
    const double raw = span / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

typedef struct {
    double lo, hi;   /* in plot units (log2 of x on a log2 axis) */
    int px, len;     /* the axis' first pixel and its length (y: bottom-up) */
    int flip;        /* y: larger values higher up */
} axis;

static double to_px(const axis *a, double v) {
    const double t = (v - a->lo) / (a->hi - a->lo);
    return a->flip ? a->px + a->len - t * a->len : a->px + t * a->len;
}

/* The range of values v[n] (non-finite ones left out); 0 when none. */
static int widen(double *lo, double *hi, const double *v, int n, int log_scale) {
    int any = 0;
    for (int i = 0; i < n; i++) {
        const double x = v ? (log_scale ? log2(v[i]) : v[i]) : i;
        if (!isfinite(x)) continue;
        if (x < *lo) *lo = x;
        if (x > *hi) *hi = x;
        any = 1;
    }
    return any;
}

/* A value axis from 0 (or below) to the data's max rounded up to a tick. */
static void value_range(double *lo, double *hi, double dlo, double dhi) {
    *lo = dlo < 0 ? dlo : 0;
    *hi = dhi > *lo ? dhi : *lo + 1;
    const double step = nice_step(*hi - *lo);
    *hi = ceil(*hi / step - 1e-9) * step;
    if (*lo < 0) *lo = floor(*lo / step + 1e-9) * step;
}

static void tick_label(char *s, size_t n, double v, int log2_scale) {
    if (log2_scale) {
        const double len = pow(2, v);
        if (len >= 1048576) snprintf(s, n, "%gM", len / 1048576);
        else if (len >= 1024) snprintf(s, n, "%gK", len / 1024);
        else snprintf(s, n, "%g", len);
    } else {
        snprintf(s, n, "%g", fabs(v) < 1e-12 ? 0 : v);
    }
}

/* Ticks of an axis: x under the area (whole: whole numbers; log2: powers of
 * two), y left of it with a light grid line; returns the widest y label. */
static double ticks(FILE *f, const qkv_chart_box *b, const axis *a, int is_y, int whole, int log2_scale) {
    double step = log2_scale ? 1 : nice_step(a->hi - a->lo), widest = 0;
    if (whole && step < 1) step = 1;
    const long k0 = (long)ceil(a->lo / step - 1e-9), k1 = (long)floor(a->hi / step + 1e-9);
    const long every = log2_scale && k1 - k0 > 8 ? (k1 - k0 + 7) / 8 : 1;
    for (long k = k0; k <= k1; k += every) {
        const double v = k * step, p = to_px(a, v);
        char s[32];
        tick_label(s, sizeof s, v, log2_scale);
        if (is_y) {
            fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", b->x, b->x + b->w, p, p);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\" fill=\"#666\">%s</text>\n",
                    b->x - 6, p + 4, s);
            if (text_px(s) > widest) widest = text_px(s);
        } else {
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n", p, p, b->y + b->h,
                    b->y + b->h + 4);
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" fill=\"#666\">%s</text>\n", p,
                    b->y + b->h + 16, s);
        }
    }
    return widest;
}

static void axis_lines(FILE *f, const qkv_chart_box *b) {
    fprintf(f, "<path d=\"M%d %dV%dH%d\" fill=\"none\" stroke=\"#999\"/>\n", b->x, b->y, b->y + b->h, b->x + b->w);
}

/* ------------------------------------------------------------------ lines */

void qkv_chart_lines(FILE *f, const qkv_chart_box *b, const qkv_chart_series *s, int n_series) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int any = 0, n_legend = 0;
    for (int k = 0; k < n_series; k++) {
        if (!s[k].rule) any |= widen(&xlo, &xhi, s[k].x, s[k].n, b->x_log2);
        widen(&ylo, &yhi, s[k].y, s[k].rule ? 1 : s[k].n, 0);
        n_legend += s[k].name != NULL;
    }
    if (!any) {
        frame(f, b, 0, 0, 0);
        axis_lines(f, b);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#666\">(no data)</text>\n",
                b->x + b->w / 2.0, b->y + b->h / 2.0);
        return;
    }
    axis ax = {xlo, xhi, b->x, b->w, 0}, ay = {0, 1, b->y, b->h, 1};
    if (b->x_lo < b->x_hi) ax.lo = b->x_log2 ? log2(b->x_lo) : b->x_lo, ax.hi = b->x_log2 ? log2(b->x_hi) : b->x_hi;
    if (ax.hi <= ax.lo) ax.lo -= 0.5, ax.hi += 0.5; /* one x: in the middle */
    if (b->y_lo < b->y_hi) ay.lo = b->y_lo, ay.hi = b->y_hi;
    else value_range(&ay.lo, &ay.hi, ylo, yhi);
    const double label_px = ticks(f, b, &ay, 1, 0, 0);
    ticks(f, b, &ax, 0, b->x_whole, b->x_log2);
    axis_lines(f, b);
    frame(f, b, label_px, 0, n_legend);
    int li = 0;
    for (int k = 0; k < n_series; k++) {
        const qkv_chart_series *c = &s[k];
        const char *colour = c->colour ? c->colour : palette[k % 6];
        if (c->rule && isfinite(c->y[0])) {
            const double y = to_px(&ay, c->y[0]);
            fprintf(f, "<line class=\"rule\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"%g\"", b->x, b->x + b->w, y, y, colour, c->width > 0 ? c->width : 2);
            if (c->dash) fprintf(f, " stroke-dasharray=\"%s\"", c->dash);
            fputs("/>\n", f);
        } else if (!c->no_line) {
            fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%g\"", colour,
                    c->width > 0 ? c->width : 2);
            if (c->dash) fprintf(f, " stroke-dasharray=\"%s\"", c->dash);
            fputs(" points=\"", f);
            for (int i = 0, first = 1; i < c->n; i++) {
                const double x = c->x ? (b->x_log2 ? log2(c->x[i]) : c->x[i]) : i;
                if (!isfinite(x) || !isfinite(c->y[i])) continue;
                fprintf(f, "%s%.1f,%.1f", first ? "" : " ", to_px(&ax, x), to_px(&ay, c->y[i]));
                first = 0;
            }
            fputs("\"/>\n", f);
        }
        for (int i = 0; c->dot > 0 && !c->rule && i < c->n; i++) {
            const double x = c->x ? (b->x_log2 ? log2(c->x[i]) : c->x[i]) : i;
            if (!isfinite(x) || !isfinite(c->y[i])) continue;
            fprintf(f, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"", to_px(&ax, x),
                    to_px(&ay, c->y[i]), c->dot, colour);
            if (c->dot_opacity > 0) fprintf(f, " fill-opacity=\"%g\"", c->dot_opacity);
            fputs("/>\n", f);
        }
        if (c->name) legend(f, b, li++, 0, colour, c->no_line ? NULL : c->dash, c->no_line ? c->dot : 0, 0, c->name);
    }
}

/* ------------------------------------------------------------------- bars */

void qkv_chart_bars(FILE *f, const qkv_chart_box *b, const qkv_chart_bar_set *d) {
    double ylo = INFINITY, yhi = -INFINITY, widest = 0;
    widen(&ylo, &yhi, d->v, d->n, 0);
    if (d->marks) widen(&ylo, &yhi, d->marks, d->n, 0);
    axis ay = {0, 1, b->y, b->h, 1};
    if (b->y_lo < b->y_hi) ay.lo = b->y_lo, ay.hi = b->y_hi;
    else value_range(&ay.lo, &ay.hi, ylo, yhi);
    const double band = d->n > 0 ? (double)b->w / d->n : b->w, gap = band > 3 ? 2 : 0;
    for (int j = 0; d->labels && j < d->n; j++)
        if (text_px(d->labels[j]) > widest) widest = text_px(d->labels[j]);
    const int turned = widest > band - 2;
    const int extra = turned ? (int)((widest < TURNED_MAX ? widest : TURNED_MAX) * 0.87) : 0;
    const double label_px = ticks(f, b, &ay, 1, 0, 0);
    axis_lines(f, b);
    const double zero = to_px(&ay, ay.lo > 0 ? ay.lo : ay.hi < 0 ? ay.hi : 0);
    for (int j = 0; j < d->n; j++) {
        const double x = b->x + j * band + gap / 2;
        if (isfinite(d->v[j])) {
            const double top = to_px(&ay, d->v[j]);
            fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x,
                    top < zero ? top : zero, band - gap, fabs(zero - top), d->colour);
        }
        if (d->marks && isfinite(d->marks[j])) {
            const double m = to_px(&ay, d->marks[j]);
            fprintf(f, "<line class=\"mark\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
                       "stroke-width=\"2\"/>\n",
                    x, x + band - gap, m, m);
        }
        if (!d->labels) continue;
        const double cx = b->x + (j + 0.5) * band;
        if (turned) fprintf(f, "<text transform=\"translate(%.1f %d) rotate(60)\" fill=\"#333\">", cx - 3, b->y + b->h + 10);
        else fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">", cx, b->y + b->h + 16);
        qkv_svg_text(f, d->labels[j]);
        fputs("</text>\n", f);
    }
    frame(f, b, label_px, extra, (d->name != NULL) + (d->marks && d->marks_name));
    int li = 0;
    if (d->name) legend(f, b, li++, extra, d->colour, NULL, 0, 1, d->name);
    if (d->marks && d->marks_name) legend(f, b, li++, extra, "#333", NULL, 0, 0, d->marks_name);
}

/* ------------------------------------------------------------------ cells */

void qkv_chart_cells(FILE *f, const qkv_chart_box *b, const qkv_chart_grid *g) {
    double vmax = g->vmax, widest = 0;
    if (vmax <= 0)
        for (int i = 0; i < g->rows * g->cols; i++)
            if (isfinite(g->values[i]) && g->values[i] > vmax) vmax = g->values[i];
    const double cw = (double)b->w / g->cols, ch = (double)b->h / g->rows;
    for (int r = 0; r < g->rows; r++) {
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">", b->x - 6, b->y + (r + 0.5) * ch + 4);
        qkv_svg_text(f, g->row_labels[r]);
        fputs("</text>\n", f);
        if (text_px(g->row_labels[r]) > widest) widest = text_px(g->row_labels[r]);
        for (int c = 0; c < g->cols; c++) {
            const double v = g->values[(size_t)r * g->cols + c];
            double t = 0;
            char fill[32], text[32];
            if (!isfinite(v)) {
                snprintf(fill, sizeof fill, "#e9ecef");
                snprintf(text, sizeof text, "-");
            } else if (g->scale == QKV_CHART_YES_NO) {
                snprintf(fill, sizeof fill, "%s", v != 0 ? "#2f9e44" : "#e03131");
                snprintf(text, sizeof text, "%s", v != 0 ? "yes" : "no");
                t = 1;
            } else {
                t = vmax > 0 ? v / vmax : 0;
                t = t < 0 ? 0 : t > 1 ? 1 : t;
                if (g->scale == QKV_CHART_BLUES_SQRT) t = sqrt(t);
                snprintf(fill, sizeof fill, "rgb(%d,%d,%d)", (int)lround(247 - 239 * t), (int)lround(251 - 203 * t),
                         (int)lround(255 - 148 * t));
                snprintf(text, sizeof text, g->fmt ? g->fmt : "%.3f", v);
            }
            const double x = b->x + c * cw, y = b->y + r * ch;
            fprintf(f, "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, y,
                    cw - 2, ch - 2, fill);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" fill=\"%s\">%s</text>\n",
                    x + cw / 2 - 1, y + ch / 2 + 3, t > 0.55 ? "white" : "#333", text);
        }
    }
    for (int c = 0; c < g->cols; c++) {
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">", b->x + (c + 0.5) * cw - 1,
                b->y + b->h + 14);
        qkv_svg_text(f, g->col_labels[c]);
        fputs("</text>\n", f);
    }
    frame(f, b, widest, 0, 0);
}
