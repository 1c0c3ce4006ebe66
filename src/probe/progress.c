/*
 * progress.c — how a long probe reports to its caller (qkv/probe.h, "probe:
 * progress"): one call of the caller's callback, and its request to stop
 * turned into QKV_ERR_CANCELLED. It does not time, draw or rate-limit
 * anything: the caller decides what a report is worth.
 */
#include "probe/internal.h"
#include "util/error.h"

qkv_status probe_progress(qkv_progress_fn fn, void *user, int64_t done, int64_t total, const char *probe,
                          const char *unit, qkv_error *err) {
    if (!fn || !fn(user, done, total)) return QKV_OK;
    return util_fail(err, QKV_ERR_CANCELLED, "%s: cancelled by the progress callback after %lld of %lld %s", probe,
                    (long long)done, (long long)total, unit);
}
