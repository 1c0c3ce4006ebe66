/*
 * progress.c — one progress line on stderr for the commands whose work can
 * take more than a few seconds: what is running, done/total, elapsed and an
 * estimate of the rest, redrawn in place (\r) at most 10 times a second and
 * erased when the work ends or anything else is printed. Shown when stderr is
 * a terminal, or as --progress / --no-progress say. It never writes to
 * stdout, and the commands print nothing else while it is drawn: a
 * command's output is the same with and without it.
 */
#include "cli.h"
#include "progress.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REDRAW_S 0.1 /* at most 10 redraws a second */

static struct {
    int enabled;
    int active;         /* between start and finish */
    int shown;          /* characters of the line now on stderr (0: none) */
    char label[160];
    const char *unit;
    int64_t total, done;
    double t0, last_draw;
} P;

void cli_progress_init(const cli_progress_flags *f) {
    memset(&P, 0, sizeof P);
    P.enabled = f->off ? 0 : f->on ? 1 : isatty(STDERR_FILENO);
    cli_before_error = cli_progress_clear;
}

int cli_progress_enabled(void) { return P.enabled; }

/* "1:05", "12:00:09" */
static void format_seconds(char *buf, size_t size, double s) {
    const long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
}

/* Columns of the terminal on stderr; 0 if it is not one. */
static int terminal_width(void) {
    struct winsize ws;
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
}

static void draw(double now) {
    char line[320], elapsed[32], rest[32];
    format_seconds(elapsed, sizeof elapsed, now - P.t0);
    int len;
    if (P.total > 0) {
        const double frac = P.done < P.total ? (double)P.done / (double)P.total : 1.0;
        if (P.done > 0) format_seconds(rest, sizeof rest, (now - P.t0) * (1 - frac) / frac);
        len = snprintf(line, sizeof line, "%s: %lld/%lld %s (%.0f%%), %s elapsed, %s%s left", P.label,
                       (long long)P.done, (long long)P.total, P.unit, 100 * frac, elapsed, P.done > 0 ? "~" : "",
                       P.done > 0 ? rest : "?");
    } else {
        len = snprintf(line, sizeof line, "%s: %s elapsed", P.label, elapsed);
    }
    if (len >= (int)sizeof line) len = (int)sizeof line - 1;
    const int width = terminal_width();
    if (width > 1 && len > width - 1) len = width - 1; /* a wrapped line could not be redrawn by \r */
    /* the old line is overwritten; what is left of a longer one is blanked */
    fprintf(stderr, "\r%.*s%*s", len, line, P.shown > len ? P.shown - len : 0, "");
    if (P.shown > len) fprintf(stderr, "\r%.*s", len, line);
    fflush(stderr);
    P.shown = len;
    P.last_draw = now;
}

void cli_progress_start(const char *label, int64_t total, const char *unit) {
    if (!P.enabled) return;
    cli_progress_clear();
    snprintf(P.label, sizeof P.label, "%s", label);
    P.unit = unit;
    P.total = total;
    P.done = 0;
    P.active = 1;
    P.t0 = cli_now_s();
    draw(P.t0);
}

void cli_progress_label(const char *fmt, ...) {
    if (!P.active) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P.label, sizeof P.label, fmt, ap);
    va_end(ap);
    draw(cli_now_s()); /* a new stage is shown at once */
}

void cli_progress_update(int64_t done) {
    if (!P.active) return;
    P.done = done;
    const double now = cli_now_s();
    if (!P.shown || now - P.last_draw >= REDRAW_S) draw(now);
}

int cli_progress_report(void *user, int64_t done, int64_t total) {
    (void)user;
    if (P.active && total > 0) P.total = total;
    cli_progress_update(done);
    return 0;
}

qkv_status cli_progress_layer_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    const int64_t *before = user;
    cli_progress_update((before ? *before : 0) + a->layer + 1);
    return QKV_OK;
}

void cli_progress_clear(void) {
    if (!P.shown) return;
    fprintf(stderr, "\r%*s\r", P.shown, "");
    fflush(stderr);
    P.shown = 0;
}

void cli_progress_finish(void) {
    cli_progress_clear();
    P.active = 0;
}
