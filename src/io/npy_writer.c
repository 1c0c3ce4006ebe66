/*
 * npy_writer.c — a float32 .npy written as it is produced (attention maps too
 * large to hold): the header carries the full shape, the elements follow in
 * C order. The data goes to path.tmp.PID and is renamed to path only when
 * close has seen every element, so an interrupted run leaves no partial file.
 */
#include "qkv.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct qkv_npy_writer {
    FILE *f;
    char *path, *tmp;
    int64_t count, written;
};

qkv_status qkv_npy_writer_open(qkv_npy_writer **out, const char *path, int ndim, const int64_t *shape,
                               qkv_error *err) {
    if (!out || !path) return qkv_fail(err, QKV_ERR_INVALID, "npy writer: NULL argument");
    *out = NULL;
    if (ndim < 0 || ndim > QKV_NPY_MAX_DIMS)
        return qkv_fail(err, QKV_ERR_INVALID, "%s: cannot write %d dimensions", path, ndim);
    char dict[512];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return qkv_fail(err, QKV_ERR_INVALID, "%s: negative dimension", path);
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld,%s", (long long)shape[i],
                        (i + 1 < ndim) ? " " : "");
        count *= shape[i];
    }
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* the data starts at a multiple of 64; the header ends with '\n' */
    const int pad = (64 - (10 + len + 1) % 64) % 64, hlen = len + pad + 1;
    qkv_npy_writer *w = calloc(1, sizeof *w);
    size_t plen = strlen(path);
    if (w) w->path = malloc(plen + 1), w->tmp = malloc(plen + 32);
    if (!w || !w->path || !w->tmp) {
        qkv_npy_writer_abort(w);
        return qkv_fail(err, QKV_ERR_NOMEM, "npy writer: out of memory");
    }
    memcpy(w->path, path, plen + 1);
    snprintf(w->tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    w->count = count;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        qkv_status st = qkv_fail(err, QKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        qkv_npy_writer_abort(w);
        return st;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, w->f) == 10 && fwrite(dict, 1, (size_t)len, w->f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', w->f) != EOF;
    ok = ok && fputc('\n', w->f) != EOF;
    if (!ok) {
        qkv_status st = qkv_fail(err, QKV_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        qkv_npy_writer_abort(w);
        return st;
    }
    *out = w;
    return QKV_OK;
}

qkv_status qkv_npy_writer_put(qkv_npy_writer *w, const float *data, int64_t n, qkv_error *err) {
    if (n < 0 || w->written + n > w->count)
        return qkv_fail(err, QKV_ERR_INVALID, "%s: %lld more elements than the shape holds", w->path,
                        (long long)(w->written + n - w->count));
    if (fwrite(data, sizeof(float), (size_t)n, w->f) != (size_t)n)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    w->written += n;
    return QKV_OK;
}

qkv_status qkv_npy_writer_close(qkv_npy_writer *w, qkv_error *err) {
    if (!w) return QKV_OK;
    qkv_status st = QKV_OK;
    if (w->written != w->count)
        st = qkv_fail(err, QKV_ERR_INVALID, "%s: %lld of %lld elements written; file not kept", w->path,
                      (long long)w->written, (long long)w->count);
    int closed = fclose(w->f) == 0;
    w->f = NULL;
    if (!st && (!closed || rename(w->tmp, w->path) != 0))
        st = qkv_fail(err, QKV_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    if (st) unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w);
    return st;
}

void qkv_npy_writer_abort(qkv_npy_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    free(w);
}
