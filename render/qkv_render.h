/*
 * qkv_render.h — pictures of attention maps: a self-contained HTML page and
 * PNG heatmaps. Not part of libqkv: this small library (build/libqkv_render.a)
 * is what `qkv inspect` and the Python package's Model.inspect draw with; it
 * needs nothing beyond libc, libm and pthreads (its PNG encoder is its own).
 * The maps come from libqkv's probes (qkv_inspect_hook) row by row; nothing
 * here holds an n x n map. Conventions as in qkv.h.
 */
#ifndef QKV_RENDER_H
#define QKV_RENDER_H

#include "qkv.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------- text width and token labels */

/* Decodes the UTF-8 code point at s into *cp; returns the bytes it took, 0 at
 * the terminating NUL. An invalid or truncated sequence gives U+FFFD and 1. */
int qkv_text_next(uint32_t *cp, const char *s);
/* Terminal columns of one code point: 2 for East Asian Wide and Fullwidth
 * (CJK ideographs, kana, hangul, fullwidth forms, emoji), 0 for combining
 * marks, zero-width characters and controls, else 1. */
int qkv_text_char_width(uint32_t cp);
/* Terminal columns of a NUL-terminated UTF-8 string (sum of the above). */
int qkv_text_width(const char *s);

/* Readable labels for token pieces (bytes, as qkv_token_piece gives them):
 * a space is shown as "·", a newline "↵", a tab "→", other controls as
 * "\xNN"; a piece that holds only part of a UTF-8 character (byte-level BPE
 * splits 年 into two tokens) shows the whole character with "…" on the side
 * that continues in the neighbouring token ("年…", "…年"); bytes that form
 * no character anywhere show as "\xNN".
 *   labels: [n] output, each malloc'd and NUL-terminated (qkv_token_labels_free) */
qkv_status qkv_token_labels(char **labels, const char *const *pieces, const size_t *lens, int n,
                            qkv_error *err);
void qkv_token_labels_free(char **labels, int n);

/* s (UTF-8, NULL as "") as a JSON string, quotes included: " and \ escaped,
 * controls as \n or \u00XX, each byte of an invalid UTF-8 sequence as \ufffd;
 * in_script also escapes <, > and & so the string can stand inside an HTML
 * <script> block. */
void qkv_json_string(FILE *f, const char *s, int in_script);

/* s (UTF-8, NULL as "") as HTML text or a quoted attribute's value: <, >, &
 * and " escaped. */
void qkv_html_text(FILE *f, const char *s);

/* A set of causal maps for the writers below: n_layers x n_heads maps of
 * [n_tok, n_tok] (query rows, key columns). */
typedef struct {
    const char *title;          /* UTF-8 */
    const char *subtitle;       /* UTF-8, may be NULL */
    int n_tok;
    const char *const *labels;  /* [n_tok] token labels (qkv_token_labels) */
    const int32_t *ids;         /* [n_tok] token ids, may be NULL */
    const int *layers;          /* [n_layers] layer number of each row of maps */
    int n_layers;
    const int *heads;           /* [n_heads] head number of each column of maps */
    int n_heads;
    const int *windows;         /* [n_layers] each row's sliding window W (0: a global layer); NULL: all global */
} qkv_maps_info;

/* One self-contained HTML page (no network: works from file://): a grid of
 * every map as a small heatmap with its sink mass and entropy, a large view
 * of the chosen map with the tokens on both axes, hover for query, key and
 * weight, toggles for log scale and for hiding token 0. Rows are streamed
 * into the file in order (layer, head, row); each keeps its keys 0 .. row
 * as 16-bit log-coded weights (relative error < 2e-4), so a page holds
 * n_layers x n_heads x n(n+1)/2 of them: at most QKV_HTML_MAX_WEIGHTS. */
#define QKV_HTML_MAX_WEIGHTS ((int64_t)1 << 26)
typedef struct qkv_html_writer qkv_html_writer;
qkv_status qkv_html_open(qkv_html_writer **out, const char *path, const qkv_maps_info *info,
                         qkv_error *err);
/* Row `row` of map (li, hi): w[row + 1] (keys 0 .. row), in order. */
qkv_status qkv_html_row(qkv_html_writer *h, int li, int hi, int row, const float *w, qkv_error *err);
/* Writes the end of the page. The page is written in place at path, and
 * removed by abort or by any failure (no partial file); keeping a previous
 * file until the write succeeded is the caller's (cli/outputs.c). */
qkv_status qkv_html_close(qkv_html_writer *h, qkv_error *err);
void qkv_html_abort(qkv_html_writer *h);

/* Heatmaps in a PNG (the render library's own encoder, render/png_encode.c:
 * no libpng): viridis colour map, token labels on the axes when a token gets
 * >= 16 pixels, one panel per map with its layer and head. The text (title,
 * captions, labels, legend) is drawn with GNU Unifont glyphs read at init
 * from font_path (default /usr/share/unifont/unifont.hex, Debian package
 * unifont); without that file the figure has no text at all, which
 * qkv_png_maps_has_font tells. Each panel is at most max_panel pixels a side
 * (larger maps are max-pooled down), so memory does not grow with n^2.
 * Rows in any order. */
typedef struct {
    int log_scale;              /* colour by log10(w) over 4 decades instead of w */
    int max_panel;              /* 0: 768 for one map, 256 for several */
    const char *font_path;      /* NULL: $QKV_FONT, else the default above */
} qkv_png_params;
typedef struct qkv_png_maps qkv_png_maps;
qkv_status qkv_png_maps_init(qkv_png_maps **out, const qkv_maps_info *info, const qkv_png_params *p,
                             qkv_error *err);
void qkv_png_maps_row(qkv_png_maps *pm, int li, int hi, int row, const float *w);
/* 1 if the labels could be drawn (a font was found). */
int qkv_png_maps_has_font(const qkv_png_maps *pm);
/* Draws the figure and encodes it: *png (malloc'd, the caller frees) of
 * *len bytes; *png NULL on failure. pm is unchanged: it can be encoded again. */
qkv_status qkv_png_maps_encode(const qkv_png_maps *pm, uint8_t **png, size_t *len, qkv_error *err);
/* Draws and encodes the PNG at path, in place; a failure removes it. Keeping
 * a previous file until the write succeeded is the caller's (cli/outputs.c,
 * or qkv_png_maps_encode + qkv_file_replace). */
qkv_status qkv_png_maps_save(const qkv_png_maps *pm, const char *path, qkv_error *err);
void qkv_png_maps_free(qkv_png_maps *pm);

/* ------------------------------------------------- heatmap tables (HTML) */

/* One small matrix (a layer x head or layer x position array) for
 * qkv_heatmap_page: a table cell per value, coloured by it. */
typedef struct {
    const char *title;              /* the map's heading, UTF-8 */
    const char *caption;            /* a paragraph under it, or NULL */
    int rows, cols;
    const char *const *row_labels;  /* [rows] */
    const char *const *col_labels;  /* [cols] */
    const float *values;            /* [rows, cols]; NaN or inf: a grey cell, no colour */
    const char *const *text;        /* [rows, cols] what each cell shows, or NULL: its value (%.2f) */
    const char *const *hover;       /* [rows, cols] more lines on hover (NULL entries: none), or NULL */
    int diverging;                  /* 1: blue < 0 < red by |v| / vmax; 0: white to blue over [0, vmax] */
    double vmax;                    /* the value of the strongest colour (larger ones saturate); 0: max |v| */
} qkv_heatmap;

/* A self-contained HTML page (inline CSS, no script, no network): title,
 * intro (each line a paragraph; may be NULL), then each map with its rows'
 * and columns' labels; hovering a cell shows "row, column: value" and its
 * hover text. Written to f as it goes; QKV_ERR_INVALID for a map without
 * cells, values or labels, QKV_ERR_IO when f has a write error. */
qkv_status qkv_heatmap_page(FILE *f, const char *title, const char *intro, const qkv_heatmap *maps, int n_maps,
                            qkv_error *err);

/* ---------------------------------------------------------------- SVG charts */

/* Charts in an SVG picture (render/chart.c) for the CLI's --svg plots: lines
 * (several series), bars, and a grid of coloured cells, each drawn in a box
 * of the picture with its title, axes, ticks, axis titles and legend, so one
 * picture can hold several. Pixels throughout; written to f as it goes; text
 * is UTF-8, escaped here (controls and invalid bytes as U+FFFD). Around a
 * box (x, y, w, h), the plot area: the title just above it, tick labels and
 * the y title in the 60 pixels to its left, tick labels and the x title in
 * the 40 under it (a grid's are its rows' and columns' labels), then the
 * legend, 18 pixels a row, and the caption: qkv_chart_below says how far. */
typedef struct {
    int x, y, w, h;             /* the plot area in the picture */
    const char *title;          /* bold, above the area; may be NULL */
    const char *x_title, *y_title;  /* may be NULL */
    double x_lo, x_hi;          /* x range; equal: the data's */
    double y_lo, y_hi;          /* y range; equal: min(0, data) .. the data's max, rounded up to a tick */
    int x_whole;                /* x ticks at whole numbers only (layers, positions) */
    int x_log2;                 /* x on a log2 scale (x > 0), ticks at powers of two labelled 512, 1K, 64K */
    int legend_cols;            /* legend entries a row (0: 1) */
    const char *caption;        /* a grey line under the legend, may be NULL */
} qkv_chart_box;

/* The height under a box that its tick labels, x title, n_legend legend
 * entries and caption take. */
int qkv_chart_below(const qkv_chart_box *b, int n_legend);

/* The picture: <svg> of w x h on white, title (may be NULL) bold at the top
 * left; qkv_chart_end closes it. */
void qkv_chart_begin(FILE *f, int w, int h, const char *title);
void qkv_chart_end(FILE *f);
/* s as SVG (XML) text or attribute value. */
void qkv_svg_text(FILE *f, const char *s);

/* One line of a line chart. */
typedef struct {
    const char *name;           /* legend entry; NULL: none */
    const double *x;            /* [n]; NULL: 0, 1, .., n - 1 */
    const double *y;            /* [n]; a non-finite y is left out */
    int n;
    const char *colour;         /* CSS colour; NULL: the palette's, by index */
    const char *dash;           /* stroke-dasharray ("5 4"); NULL: solid */
    double width;               /* line width; 0: 2 */
    double dot;                 /* a dot of this radius at each point; 0: none */
    double dot_opacity;         /* 0: opaque */
    int no_line;                /* dots only (a scatter) */
    int rule;                   /* a level line at y[0] across the plot (a peak); x unused */
} qkv_chart_series;
void qkv_chart_lines(FILE *f, const qkv_chart_box *b, const qkv_chart_series *s, int n_series);

/* One bar per category, with an optional tick across each at a second value. */
typedef struct {
    const double *v;            /* [n] bar heights */
    const double *marks;        /* [n] a tick across each bar at this value, or NULL */
    const char *const *labels;  /* [n] under each bar (turned 60 degrees when they do not fit), or NULL */
    int n;
    const char *colour;
    const char *name, *marks_name;  /* legend entries of the bars and the ticks; NULL: none */
} qkv_chart_bar_set;
void qkv_chart_bars(FILE *f, const qkv_chart_box *b, const qkv_chart_bar_set *d);

/* A grid of cells (rows x cols), each coloured by its value and showing it. */
typedef enum {
    QKV_CHART_BLUES,            /* white to blue over [0, vmax] */
    QKV_CHART_BLUES_SQRT,       /* the same by sqrt(v / vmax) */
    QKV_CHART_YES_NO,           /* non-zero: green "yes", 0: red "no" */
} qkv_chart_scale;
typedef struct {
    int rows, cols;
    const char *const *row_labels;  /* [rows], left of the rows */
    const char *const *col_labels;  /* [cols], under the columns */
    const double *values;       /* [rows, cols]; non-finite: a grey cell showing "-" */
    const char *fmt;            /* printf of a cell's value; NULL: "%.3f" */
    qkv_chart_scale scale;
    double vmax;                /* the strongest colour's value; 0: the largest */
} qkv_chart_grid;
void qkv_chart_cells(FILE *f, const qkv_chart_box *b, const qkv_chart_grid *g);

/* Writes data [len] to path whole or not at all: into a new temporary beside
 * it (PATH.qkv-XXXXXX), synced, then renamed onto path. An existing path must
 * be a regular file and keeps its mode (a new one gets 0666 less the umask);
 * on any failure it is left as it was and no temporary remains. QKV_ERR_IO
 * names path and the system's reason. */
qkv_status qkv_file_replace(const char *path, const void *data, size_t len, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_RENDER_H */
