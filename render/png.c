/*
 * png.c — attention maps as a PNG figure (qkv inspect --png): one panel per
 * map, rows = layers, columns = heads, viridis colours, token labels on the
 * outer axes when a token gets at least 16 pixels. The encoder is the render
 * library's own (png_encode.c, deflate.c); the glyphs are GNU Unifont's (8x16
 * and 16x16 bitmaps, one "XXXX:hex" line per code point in unifont.hex,
 * Debian package unifont), read at init when the file is there: without it
 * the figure has no text at all (no labels, title, captions or legend).
 *
 * Each panel keeps a side x side grid of floats (max-pooled weights when the
 * map has more tokens than pixels), so the figure's memory is bounded by its
 * pixel count, never by n^2. Panels are normalised to their own largest
 * weight, as the HTML page does.
 */
#include "png_encode.h"
#include "qkv_render.h"
#include "util/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GLYPH_H 16
#define MARGIN 12
#define LABEL_COLS 12 /* label width, in 8-pixel columns */
#define CAPTION_H 18
#define GAP 10

typedef struct {
    uint8_t rows[GLYPH_H][2]; /* bit 7 of byte 0 = leftmost pixel */
    uint8_t width;            /* 0: no glyph, 8 or 16 */
} glyph;

struct qkv_png_maps {
    int n, nl, nh, side, cell, log_scale, labels;
    float *acc;                 /* [nl * nh, side, side] max-pooled weights, -1 = masked */
    glyph *font;                /* [65536] or NULL */
    char *title;
    char **label;               /* [n] */
    int *layers, *heads;
};

/* ------------------------------------------------------------ viridis */

/* Polynomial fit of matplotlib's viridis (CC0, after Matt Zucker), t in [0, 1]. */
static void viridis(uint8_t rgb[3], double t) {
    static const double k[7][3] = {
        {0.2777273272234177, 0.005407344544966578, 0.3340998053353061},
        {0.1050930431085774, 1.404613529898575, 1.384590162594685},
        {-0.3308618287255563, 0.214847559468213, 0.09509516302823659},
        {-4.634230498983486, -5.799100973351585, -19.33244095627987},
        {6.228269936347081, 14.17993336680509, 56.69055260068105},
        {4.776384997670288, -13.74514537774601, -65.35303263337234},
        {-5.435455855934631, 4.645852612178535, 26.3124352495832}};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    for (int c = 0; c < 3; c++) {
        double v = k[6][c];
        for (int d = 5; d >= 0; d--) v = v * t + k[d][c];
        v = v * 255 + 0.5;
        rgb[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* --------------------------------------------------------------- font */

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The glyphs of the .hex font at path into *out; NULL when there is no such
 * file (the PNG then has no labels). 0, or -1 when out of memory. */
static int font_load(glyph **out, const char *path) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    glyph *g = calloc(65536, sizeof *g);
    if (!g) {
        fclose(f);
        return -1;
    }
    char line[256];
    while (g && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        long cp = strtol(line, NULL, 16);
        const char *h = colon + 1;
        size_t len = strcspn(h, "\r\n");
        if (cp < 0 || cp > 0xFFFF || (len != 32 && len != 64)) continue;
        glyph *gl = &g[cp];
        const int bytes = (int)len / 32; /* 1 or 2 bytes per row */
        gl->width = (uint8_t)(8 * bytes);
        for (int r = 0; r < GLYPH_H; r++)
            for (int b = 0; b < bytes; b++)
                gl->rows[r][b] = (uint8_t)(hexval(h[(r * bytes + b) * 2]) << 4 | hexval(h[(r * bytes + b) * 2 + 1]));
    }
    fclose(f);
    *out = g;
    return 0;
}

/* ------------------------------------------------------------- canvas */

typedef struct {
    uint8_t *px; /* [h, w, 3] */
    int w, h;
} canvas;

static void fill(canvas *c, int x0, int y0, int w, int h, const uint8_t rgb[3]) {
    for (int y = y0 < 0 ? 0 : y0; y < y0 + h && y < c->h; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x0 + w && x < c->w; x++) memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

static void dot(canvas *c, int x, int y, const uint8_t rgb[3]) {
    if (x >= 0 && y >= 0 && x < c->w && y < c->h) memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

/* Draws UTF-8 text from (x, y) (top-left), at most max_w pixels along the
 * line; rotated: the line runs upwards from (x, y) (bottom-left). Returns
 * the pixels used. */
static int text(canvas *c, const glyph *font, int x, int y, const char *s, int max_w, int rotated, const uint8_t rgb[3]) {
    int used = 0;
    uint32_t cp;
    int n;
    while (font && (n = qkv_text_next(&cp, s)) > 0) {
        s += n;
        const glyph *g = cp <= 0xFFFF && font[cp].width ? &font[cp] : &font['?'];
        if (!g->width) continue;
        if (used + g->width > max_w) break;
        for (int r = 0; r < GLYPH_H; r++)
            for (int b = 0; b < g->width; b++)
                if (g->rows[r][b >> 3] & (0x80 >> (b & 7))) {
                    if (rotated) dot(c, x + r, y - used - b, rgb);
                    else dot(c, x + used + b, y + r, rgb);
                }
        used += g->width;
    }
    return used;
}

static int text_width(const glyph *font, const char *s) {
    int w = 0, n;
    uint32_t cp;
    while (font && (n = qkv_text_next(&cp, s)) > 0) {
        s += n;
        const glyph *g = cp <= 0xFFFF && font[cp].width ? &font[cp] : &font['?'];
        w += g->width;
    }
    return w;
}

/* ------------------------------------------------------------- panels */

qkv_status qkv_png_maps_init(qkv_png_maps **out, const qkv_maps_info *info, const qkv_png_params *p,
                             qkv_error *err) {
    if (!out || !info || !info->layers || !info->heads || !info->labels)
        return util_fail(err, QKV_ERR_INVALID, "png: NULL argument");
    *out = NULL;
    const int n = info->n_tok, nl = info->n_layers, nh = info->n_heads, maps = nl * nh;
    if (n < 1 || nl < 1 || nh < 1) return util_fail(err, QKV_ERR_INVALID, "png: empty maps");
    qkv_png_params d = {0}; /* every field's zero is its default */
    if (p) d = *p;
    int max_panel = d.max_panel > 0 ? d.max_panel : maps == 1 ? 768 : 256;
    if (max_panel < 16 || max_panel > 8192)
        return util_fail(err, QKV_ERR_INVALID, "png: panel size %d outside [16, 8192]", max_panel);
    /* keep the whole figure under ~64 M pixels */
    while (max_panel > 16 && (int64_t)maps * max_panel * max_panel > ((int64_t)1 << 26)) max_panel /= 2;
    qkv_png_maps *pm = calloc(1, sizeof *pm);
    if (!pm) return util_fail(err, QKV_ERR_NOMEM, "png: out of memory");
    pm->n = n;
    pm->nl = nl;
    pm->nh = nh;
    pm->log_scale = d.log_scale;
    pm->cell = n <= max_panel ? (max_panel / n > 32 ? 32 : max_panel / n) : 1;
    if (maps > 1 && pm->cell > 16) pm->cell = 16;
    pm->side = n <= max_panel ? n : max_panel; /* accumulation grid: one entry per panel pixel or token */
    const char *fp = d.font_path ? d.font_path : getenv("QKV_FONT");
    if (!fp) fp = "/usr/share/unifont/unifont.hex";
    if (font_load(&pm->font, fp)) {
        qkv_png_maps_free(pm);
        return util_fail(err, QKV_ERR_NOMEM, "png: out of memory for the font %s", fp);
    }
    pm->labels = pm->font && pm->cell >= GLYPH_H;
    pm->acc = malloc((size_t)maps * pm->side * pm->side * sizeof(float));
    pm->label = calloc((size_t)n, sizeof(char *));
    pm->layers = malloc((size_t)nl * sizeof(int));
    pm->heads = malloc((size_t)nh * sizeof(int));
    pm->title = strdup(info->title ? info->title : "");
    if (!pm->acc || !pm->label || !pm->layers || !pm->heads || !pm->title) {
        const int side = pm->side;
        qkv_png_maps_free(pm);
        return util_fail(err, QKV_ERR_NOMEM, "png: out of memory for %d panels of %d pixels", maps, side);
    }
    for (size_t i = 0; i < (size_t)maps * pm->side * pm->side; i++) pm->acc[i] = -1;
    for (int i = 0; i < n; i++)
        if (!(pm->label[i] = strdup(info->labels[i] ? info->labels[i] : ""))) {
            qkv_png_maps_free(pm);
            return util_fail(err, QKV_ERR_NOMEM, "png: out of memory");
        }
    memcpy(pm->layers, info->layers, (size_t)nl * sizeof(int));
    memcpy(pm->heads, info->heads, (size_t)nh * sizeof(int));
    *out = pm;
    return QKV_OK;
}

int qkv_png_maps_has_font(const qkv_png_maps *pm) { return pm->font != NULL; }

void qkv_png_maps_row(qkv_png_maps *pm, int li, int hi, int row, const float *w) {
    if (li < 0 || li >= pm->nl || hi < 0 || hi >= pm->nh || row < 0 || row >= pm->n) return;
    const int s = pm->side, n = pm->n;
    float *a = pm->acc + ((size_t)li * pm->nh + hi) * s * s + (size_t)((int64_t)row * s / n) * s;
    for (int j = 0; j <= row; j++) {
        const int x = (int)((int64_t)j * s / n);
        if (w[j] > a[x]) a[x] = w[j];
    }
}

qkv_status qkv_png_maps_encode(const qkv_png_maps *pm, uint8_t **png, size_t *len, qkv_error *err) {
    *png = NULL;
    *len = 0;
    static const uint8_t white[3] = {255, 255, 255}, ink[3] = {40, 40, 40}, grey[3] = {235, 235, 235},
                         mute[3] = {110, 110, 115};
    const int n = pm->n, s = pm->side, P = n <= s ? n * pm->cell : s; /* panel pixels */
    const int label_w = pm->labels ? LABEL_COLS * 8 + 4 : 0;
    const int top = MARGIN + (pm->font ? GLYPH_H + 6 : 0) + (pm->labels ? label_w : 0);
    const int left = MARGIN + label_w;
    canvas c;
    c.w = left + pm->nh * (P + GAP) + MARGIN;
    c.h = top + pm->nl * (P + CAPTION_H + GAP) + (pm->font ? GLYPH_H + 16 : 12) + MARGIN;
    c.px = malloc((size_t)c.w * c.h * 3);
    if (!c.px) return util_fail(err, QKV_ERR_NOMEM, "png: cannot allocate a %d x %d image", c.w, c.h);
    fill(&c, 0, 0, c.w, c.h, white);
    if (pm->font) text(&c, pm->font, MARGIN, MARGIN, pm->title, c.w - 2 * MARGIN, 0, ink);
    for (int li = 0; li < pm->nl; li++)
        for (int hi = 0; hi < pm->nh; hi++) {
            const float *a = pm->acc + ((size_t)li * pm->nh + hi) * s * s;
            float vmax = 0;
            for (int i = 0; i < s * s; i++) vmax = a[i] > vmax ? a[i] : vmax;
            if (vmax <= 0) vmax = 1;
            const int x0 = left + hi * (P + GAP), y0 = top + li * (P + CAPTION_H + GAP) + CAPTION_H;
            char cap[64];
            snprintf(cap, sizeof cap, "layer %d head %d", pm->layers[li], pm->heads[hi]);
            if (pm->font) text(&c, pm->font, x0, y0 - CAPTION_H, cap, P, 0, mute);
            const int cs = P / s; /* pixels per accumulated entry (>= 1) */
            for (int y = 0; y < s; y++)
                for (int x = 0; x < s; x++) {
                    const float v = a[(size_t)y * s + x];
                    uint8_t rgb[3];
                    if (v < 0) memcpy(rgb, grey, 3);
                    else if (pm->log_scale) viridis(rgb, v > 0 ? (log10(v / vmax) + 4) / 4 : 0);
                    else viridis(rgb, v / vmax);
                    fill(&c, x0 + x * cs, y0 + y * cs, cs, cs, rgb);
                }
            if (!pm->labels) continue;
            /* token labels on the outer axes: query rows left, key columns on top */
            for (int t = 0; t < n; t++) {
                if (hi == 0) {
                    int tw = text_width(pm->font, pm->label[t]);
                    if (tw > LABEL_COLS * 8) tw = LABEL_COLS * 8;
                    text(&c, pm->font, x0 - 4 - tw, y0 + t * pm->cell + (pm->cell - GLYPH_H) / 2, pm->label[t],
                         LABEL_COLS * 8, 0, ink);
                }
                if (li == 0)
                    text(&c, pm->font, x0 + t * pm->cell + (pm->cell - GLYPH_H) / 2, y0 - CAPTION_H - 4, pm->label[t],
                         LABEL_COLS * 8, 1, ink);
            }
        }
    /* colour bar */
    const int by = c.h - MARGIN - (pm->font ? GLYPH_H + 4 : 0) - 8;
    for (int x = 0; x < 256; x++) {
        uint8_t rgb[3];
        viridis(rgb, x / 255.0);
        fill(&c, left + x, by, 1, 8, rgb);
    }
    if (pm->font)
        text(&c, pm->font, left, by + 10, pm->log_scale ? "1e-4 x max ... max of each map (log)" : "0 ... max of each map",
             c.w - left, 0, mute);

    const qkv_status st = qkv_png_encode_rgb(png, len, c.px, c.w, c.h, err);
    free(c.px);
    return st;
}

qkv_status qkv_png_maps_save(const qkv_png_maps *pm, const char *path, qkv_error *err) {
    uint8_t *png;
    size_t len;
    qkv_status st = qkv_png_maps_encode(pm, &png, &len, err);
    if (st) return st;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(png);
        return util_fail(err, QKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    int ok = fwrite(png, 1, len, f) == len;
    free(png);
    ok = fflush(f) == 0 && !ferror(f) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        unlink(path);
        return util_fail(err, QKV_ERR_IO, "%s: cannot write the PNG", path);
    }
    return QKV_OK;
}

void qkv_png_maps_free(qkv_png_maps *pm) {
    if (!pm) return;
    if (pm->label)
        for (int i = 0; i < pm->n; i++) free(pm->label[i]);
    free(pm->label);
    free(pm->acc);
    free(pm->font);
    free(pm->title);
    free(pm->layers);
    free(pm->heads);
    free(pm);
}
