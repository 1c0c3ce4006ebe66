/*
 * test_chart.c — render/chart.c, the SVG charts of the CLI: a bar, a line
 * and a cell chart of known data written to memory and read back: the
 * number of bars, points and cells, their pixel coordinates (exact to the
 * 0.1 px the writer prints), the axis ranges it chose, escaped text, and a
 * well-formed document (svg_check.h).
 */
#include "testing.h"

#include "qkv_render.h"
#include "svg_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The chart drawn by draw into a malloc'd string (the caller frees). */
static char *svg_of(void (*draw)(FILE *f)) {
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f) return NULL;
    draw(f);
    fclose(f);
    return s;
}

static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* ------------------------------------------------------------------- bars */

/* Plot area (100, 50) 400 x 200, y fixed 0 .. 10: 20 px a unit; 4 bars of
 * 100 px bands, 2 px apart. */
static const qkv_chart_box bar_box = {.x = 100, .y = 50, .w = 400, .h = 200, .y_lo = 0, .y_hi = 10,
                                      .title = "bars <&> \"q\"", .y_title = "value"};
static const double bar_v[4] = {2, 5, 10, 0}, bar_marks[4] = {3, 6, 12, 1};
static const char *const bar_labels[4] = {"a<b", "R&D", "x\x01y", "d"};

static void draw_bars(FILE *f) {
    const qkv_chart_bar_set d = {.v = bar_v, .marks = bar_marks, .labels = bar_labels, .n = 4, .colour = "#123456",
                                 .name = "mean", .marks_name = "max"};
    qkv_chart_begin(f, 600, 400, "a title & <more>");
    qkv_chart_bars(f, &bar_box, &d);
    qkv_chart_end(f);
}

TEST(chart_bars_at_their_values) {
    char *s = svg_of(draw_bars);
    CHECK(s && svg_well_formed(s), "not well-formed: %s", s ? s : "(null)");
    if (!s) return;
    CHECK(count_of(s, "<rect class=\"bar\"") == 4, "%d bars", count_of(s, "<rect class=\"bar\""));
    CHECK(count_of(s, "<line class=\"mark\"") == 4, "%d marks", count_of(s, "<line class=\"mark\""));
    int j = 0;
    for (const char *p = s; (p = strstr(p, "<rect class=\"bar\"")); p++, j++) {
        double x, y, w, h;
        if (j >= 4 || sscanf(p, "<rect class=\"bar\" x=\"%lf\" y=\"%lf\" width=\"%lf\" height=\"%lf\"", &x, &y, &w,
                             &h) != 4) {
            CHECK(0, "bar %d unreadable: %.80s", j, p);
            break;
        }
        CHECK(fabs(x - (101 + 100 * j)) < 0.06 && fabs(w - 98) < 0.06, "bar %d: x %g width %g", j, x, w);
        CHECK(fabs(y - (250 - 20 * bar_v[j])) < 0.06 && fabs(h - 20 * bar_v[j]) < 0.06, "bar %d: y %g height %g", j,
              y, h);
    }
    /* a tick at 12 is above the fixed range: drawn where it falls, not clipped */
    CHECK(strstr(s, "y1=\"190.0\" y2=\"190.0\"") && strstr(s, "y1=\"10.0\" y2=\"10.0\""), "marks at 3 and 12");
    /* text escaped; the control byte shown as U+FFFD */
    CHECK(strstr(s, ">a title &amp; &lt;more&gt;</text>") && strstr(s, ">bars &lt;&amp;&gt; &quot;q&quot;</text>"),
          "titles escaped");
    CHECK(strstr(s, ">a&lt;b</text>") && strstr(s, ">R&amp;D</text>") && strstr(s, ">x\xef\xbf\xbdy</text>"),
          "labels escaped");
    CHECK(strstr(s, ">mean</text>") && strstr(s, ">max</text>") && strstr(s, ">value</text>"), "legend, y title");
    free(s);
}

/* ------------------------------------------------------------------ lines */

/* Plot area (100, 50) 400 x 200; x 0 .. 2 from the data (200 px a unit), y
 * 0 .. 10 fixed in the first chart, from the data in the second. */
static const double line_x[3] = {0, 1, 2}, line_y[3] = {0, 5, 10}, gap_y[3] = {1, NAN, 7.3};

static void draw_lines(FILE *f) {
    const qkv_chart_series s[2] = {
        {.name = "up", .x = line_x, .y = line_y, .n = 3, .dot = 3},
        {.name = "with a gap", .y = gap_y, .n = 3, .dash = "4 2"},
    };
    qkv_chart_box box = {.x = 100, .y = 50, .w = 400, .h = 200, .y_lo = 0, .y_hi = 10, .x_title = "x",
                         .legend_cols = 2};
    qkv_chart_begin(f, 600, 400, NULL);
    qkv_chart_lines(f, &box, s, 2);
    box.y_hi = 0; /* from the data: 0 .. 7.3 rounded up to a tick of 1: 8 */
    qkv_chart_lines(f, &box, s + 1, 1);
    const double one[1] = {4};
    const qkv_chart_series level = {.name = "peak", .y = one, .n = 1, .rule = 1};
    box.y_hi = 10;
    qkv_chart_lines(f, &box, &level, 1); /* a rule alone has no x: no data */
    qkv_chart_end(f);
}

TEST(chart_lines_at_their_points) {
    char *s = svg_of(draw_lines);
    CHECK(s && svg_well_formed(s), "not well-formed: %s", s ? s : "(null)");
    if (!s) return;
    CHECK(count_of(s, "<polyline class=\"series\"") == 3, "%d lines", count_of(s, "<polyline class=\"series\""));
    CHECK(count_of(s, "<circle class=\"point\"") == 3, "%d points", count_of(s, "<circle class=\"point\""));
    CHECK(strstr(s, "points=\"100.0,250.0 300.0,150.0 500.0,50.0\""), "the first line's points");
    CHECK(strstr(s, "stroke-dasharray=\"4 2\" points=\"100.0,230.0 500.0,104.0\""), "the NaN left out (y 0 .. 10)");
    CHECK(strstr(s, "points=\"100.0,225.0 500.0,67.5\""), "y 0 .. 8 from the data");
    const char *p = strstr(s, "<circle class=\"point\"");
    double cx, cy;
    CHECK(p && sscanf(p, "<circle class=\"point\" cx=\"%lf\" cy=\"%lf\"", &cx, &cy) == 2 && cx == 100 && cy == 250,
          "first point");
    CHECK(strstr(s, ">8</text>") && strstr(s, ">10</text>"), "top ticks 8 and 10");
    CHECK(strstr(s, ">up</text>") && strstr(s, ">with a gap</text>") && strstr(s, ">(no data)</text>"),
          "legend and the empty chart");
    free(s);
}

/* ------------------------------------------------------------------ cells */

static void draw_cells(FILE *f) {
    static const char *const rows[2] = {"r0", "r<1>"}, *const cols[3] = {"a", "b", "c"};
    static const double v[6] = {0, 0.5, 1, NAN, 0.25, 2};
    const qkv_chart_grid g = {.rows = 2, .cols = 3, .row_labels = rows, .col_labels = cols, .values = v, .vmax = 1};
    const qkv_chart_box box = {.x = 60, .y = 40, .w = 150, .h = 40, .title = "grid"};
    qkv_chart_begin(f, 300, 200, "cells");
    qkv_chart_cells(f, &box, &g);
    qkv_chart_end(f);
}

TEST(chart_cells_coloured_by_value) {
    char *s = svg_of(draw_cells);
    CHECK(s && svg_well_formed(s), "not well-formed: %s", s ? s : "(null)");
    if (!s) return;
    CHECK(count_of(s, "<rect class=\"cell\"") == 6, "%d cells", count_of(s, "<rect class=\"cell\""));
    /* 50 x 20 px cells, 2 px apart; white at 0, the darkest blue from vmax on, grey for NaN */
    CHECK(strstr(s, "x=\"60.0\" y=\"40.0\" width=\"48.0\" height=\"18.0\" fill=\"rgb(247,251,255)\""), "cell 0, 0");
    CHECK(strstr(s, "x=\"160.0\" y=\"40.0\" width=\"48.0\" height=\"18.0\" fill=\"rgb(8,48,107)\""), "cell 0, 2");
    CHECK(strstr(s, "x=\"60.0\" y=\"60.0\" width=\"48.0\" height=\"18.0\" fill=\"#e9ecef\""), "cell 1, 0 (NaN)");
    CHECK(strstr(s, ">0.500</text>") && strstr(s, ">2.000</text>") && strstr(s, ">-</text>"), "cell text");
    CHECK(strstr(s, ">r&lt;1&gt;</text>"), "row label escaped");
    free(s);
}

/* The escaping alone: XML's specials and controls; invalid UTF-8 as U+FFFD. */
TEST(chart_svg_text_escapes) {
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f) return;
    qkv_svg_text(f, "<a href=\"x\">&\t\xff\xc3\xa9</a>");
    qkv_svg_text(f, NULL);
    fclose(f);
    CHECK(s && !strcmp(s, "&lt;a href=&quot;x&quot;&gt;&amp;\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9&lt;/a&gt;"), "got %s", s);
    free(s);
}

/* The checker the CLI tests lean on rejects what XML does. */
TEST(chart_svg_check_rejects_bad_xml) {
    CHECK(svg_well_formed("<svg a=\"1\"><g><text>x &amp; y</text></g><rect/></svg>\n"), "a good one");
    static const char *const bad[] = {"<svg><g></svg>", "<svg>a < b</svg>", "<svg>R&D</svg>", "<svg x=1/>",
                                      "<svg/><svg/>", "text<svg/>", "<svg>\x01</svg>", "<svg><g></h></svg>"};
    for (int i = 0; i < 8; i++) CHECK(!svg_well_formed(bad[i]), "accepted %s", bad[i]);
}
