/* error.h — filling a qkv_error: every library failure goes through util_fail. */
#ifndef QKV_UTIL_ERROR_H
#define QKV_UTIL_ERROR_H

#include "qkv/base.h"

/* Writes the formatted one-line message into err (if non-NULL); returns s. */
qkv_status util_fail(qkv_error *err, qkv_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
