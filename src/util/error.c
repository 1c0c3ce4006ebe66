/* error.c — status names and the one place error messages are written. */
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *qkv_status_str(qkv_status s) {
    switch (s) {
    case QKV_OK: return "ok";
    case QKV_ERR_INVALID: return "invalid argument";
    case QKV_ERR_NOMEM: return "out of memory";
    case QKV_ERR_IO: return "i/o error";
    case QKV_ERR_FORMAT: return "malformed file";
    case QKV_ERR_FULL: return "full";
    case QKV_ERR_TOO_LARGE: return "too large";
    case QKV_ERR_UNSUPPORTED: return "unsupported";
    case QKV_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

qkv_status util_fail(qkv_error *err, qkv_status s, const char *fmt, ...) {
    if (!err) return s;
    err->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    for (char *p = err->msg; *p; p++)
        if (*p == '\n') *p = ' ';
    return s;
}
