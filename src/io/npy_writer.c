/*
 * npy_writer.c — the one .npy writer: float32, format 1.0, C order. The
 * header carries the full shape and the elements follow as they are put, so
 * arrays too large to hold (attention maps) stream to disk; qkv_npy_save_f32
 * is open + one put + close. The file at path is written in place and
 * removed on any failure (no partial file); keeping a previous file until a
 * write has succeeded is the caller's (qkv's CLI: cli/outputs.c).
 */
#include "qkv/io.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct qkv_npy_writer {
    FILE *f;
    char *path;
    int64_t count, written;
};

qkv_status qkv_npy_writer_open(qkv_npy_writer **out, const char *path, int ndim, const int64_t *shape,
                               qkv_error *err) {
    if (!out || !path || (ndim > 0 && !shape)) return util_fail(err, QKV_ERR_INVALID, "npy writer: NULL argument");
    *out = NULL;
    if (ndim < 0 || ndim > QKV_NPY_MAX_DIMS)
        return util_fail(err, QKV_ERR_INVALID, "%s: cannot write %d dimensions", path, ndim);
    char dict[512];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return util_fail(err, QKV_ERR_INVALID, "%s: dimension %d is negative (%lld)", path, i, (long long)shape[i]);
        if (shape[i] && count > INT64_MAX / 4 / shape[i])
            return util_fail(err, QKV_ERR_INVALID, "%s: shape holds more elements than a file can", path);
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld,%s", (long long)shape[i],
                        (i + 1 < ndim) ? " " : "");
        count *= shape[i];
    }
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* the data starts at a multiple of 64; the header ends with '\n' */
    const int pad = (64 - (10 + len + 1) % 64) % 64, hlen = len + pad + 1;
    qkv_npy_writer *w = calloc(1, sizeof *w);
    size_t plen = strlen(path);
    if (w) w->path = malloc(plen + 1);
    if (!w || !w->path) {
        qkv_npy_writer_abort(w);
        return util_fail(err, QKV_ERR_NOMEM, "npy writer: out of memory");
    }
    memcpy(w->path, path, plen + 1);
    w->count = count;
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        qkv_status st = util_fail(err, QKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        qkv_npy_writer_abort(w);
        return st;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, w->f) == 10 && fwrite(dict, 1, (size_t)len, w->f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', w->f) != EOF;
    ok = ok && fputc('\n', w->f) != EOF;
    if (!ok) {
        qkv_status st = util_fail(err, QKV_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        qkv_npy_writer_abort(w);
        return st;
    }
    *out = w;
    return QKV_OK;
}

qkv_status qkv_npy_writer_put(qkv_npy_writer *w, const float *data, int64_t n, qkv_error *err) {
    if (n < 0 || w->written + n > w->count)
        return util_fail(err, QKV_ERR_INVALID, "%s: %lld more elements than the shape holds", w->path,
                        (long long)(w->written + n - w->count));
    if (fwrite(data, sizeof(float), (size_t)n, w->f) != (size_t)n)
        return util_fail(err, QKV_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    w->written += n;
    return QKV_OK;
}

qkv_status qkv_npy_writer_close(qkv_npy_writer *w, qkv_error *err) {
    if (!w) return QKV_OK;
    qkv_status st = QKV_OK;
    if (w->written != w->count)
        st = util_fail(err, QKV_ERR_INVALID, "%s: %lld of %lld elements written; file not kept", w->path,
                      (long long)w->written, (long long)w->count);
    const int flushed = fflush(w->f) == 0 && !ferror(w->f);
    const int e = errno;
    const int closed = fclose(w->f) == 0;
    w->f = NULL;
    if (!st && (!flushed || !closed))
        st = util_fail(err, QKV_ERR_IO, "%s: cannot write: %s", w->path, strerror(flushed ? errno : e));
    if (st) unlink(w->path);
    free(w->path);
    free(w);
    return st;
}

void qkv_npy_writer_abort(qkv_npy_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        unlink(w->path);
    }
    free(w->path);
    free(w);
}

qkv_status qkv_npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape,
                            qkv_error *err) {
    qkv_npy_writer *w;
    qkv_status st = qkv_npy_writer_open(&w, path, ndim, shape, err);
    if (st) return st;
    if ((st = qkv_npy_writer_put(w, data, w->count, err))) {
        qkv_npy_writer_abort(w);
        return st;
    }
    return qkv_npy_writer_close(w, err);
}
