/* progress.h — the progress line on stderr (cli/progress.c). */
#ifndef QKV_CLI_PROGRESS_H
#define QKV_CLI_PROGRESS_H

#include "qkv.h"

#include <stdint.h>

/* One line on stderr while long work runs (cli/progress.c): "<label>:
 * done/total unit (p%), elapsed, ~rest left", redrawn in place with \r at
 * most 10 times a second, erased by finish, by clear and by cli_fail. Shown
 * when stderr is a terminal, --progress forces it on, --no-progress off;
 * disabled, every call below does nothing. Never on stdout: call
 * cli_progress_clear before printing anything while it may be drawn. */
typedef struct {
    int on, off;
} cli_progress_flags;
void cli_progress_init(const cli_progress_flags *f); /* after cli_parse, before any other call */
int cli_progress_enabled(void);
/* total <= 0: unknown (elapsed time only); unit: a string literal ("tokens") */
void cli_progress_start(const char *label, int64_t total, const char *unit);
void cli_progress_label(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* the stage now running */
void cli_progress_update(int64_t done);
void cli_progress_clear(void);  /* erases the line; the next update draws it again */
void cli_progress_finish(void); /* erases the line; updates are ignored until the next start */
/* A qkv_progress_fn for the probes: the total becomes the probe's, then
 * cli_progress_update(done); never cancels. */
int cli_progress_report(void *user, int64_t done, int64_t total);
/* A hook for QKV_HOOK_RESID_POST, layer QKV_ALL: cli_progress_update(layer + 1),
 * so one forward call started with total = n_layer reports each layer; user
 * NULL, or an int64_t added to it: the layers of the calls before (a prompt
 * in several calls, total = calls x n_layer). */
qkv_status cli_progress_layer_hook(void *user, const qkv_activation *a, qkv_error *err);
#define CLI_PROGRESS_LAYER_HOOK \
    ((qkv_hook){.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = cli_progress_layer_hook})

#endif /* QKV_CLI_PROGRESS_H */
