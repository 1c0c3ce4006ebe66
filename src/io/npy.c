/*
 * npy.c — reading NumPy .npy files (format versions 1.0, 2.0, 3.0):
 * little-endian float32, int32 and int64 in C order. Everything in the
 * header is checked against the file before the data is read. Writing is
 * npy_writer.c's.
 */
#include "qkv/io.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *dict_value(const char *hdr, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static qkv_status parse_header(qkv_npy *out, const char *hdr, const char *path, qkv_error *err) {
    const char *descr = dict_value(hdr, "descr");
    if (!descr || *descr != '\'') return util_fail(err, QKV_ERR_FORMAT, "%s: npy header has no 'descr'", path);
    char dt[16] = {0};
    const char *end = strchr(descr + 1, '\'');
    if (!end || end - descr - 1 >= (long)sizeof dt)
        return util_fail(err, QKV_ERR_FORMAT, "%s: bad npy 'descr'", path);
    memcpy(dt, descr + 1, (size_t)(end - descr - 1));
    if (!strcmp(dt, "<f4")) out->type = QKV_NPY_F32;
    else if (!strcmp(dt, "<i4")) out->type = QKV_NPY_I32;
    else if (!strcmp(dt, "<i8")) out->type = QKV_NPY_I64;
    else if (!strcmp(dt, "<f8")) out->type = QKV_NPY_F64;
    else if (!strcmp(dt, ">f4") || !strcmp(dt, ">i4") || !strcmp(dt, ">i8") || !strcmp(dt, ">f8"))
        return util_fail(err, QKV_ERR_FORMAT, "%s: big-endian data ('%s') is not supported", path, dt);
    else
        return util_fail(err, QKV_ERR_FORMAT, "%s: dtype '%s' is not float32, int32, int64 or float64", path, dt);

    const char *fo = dict_value(hdr, "fortran_order");
    if (!fo) return util_fail(err, QKV_ERR_FORMAT, "%s: npy header has no 'fortran_order'", path);
    if (!strncmp(fo, "True", 4))
        return util_fail(err, QKV_ERR_FORMAT, "%s: Fortran-order arrays are not supported (use C order)", path);
    if (strncmp(fo, "False", 5)) return util_fail(err, QKV_ERR_FORMAT, "%s: bad 'fortran_order'", path);

    const char *sh = dict_value(hdr, "shape");
    if (!sh || *sh != '(') return util_fail(err, QKV_ERR_FORMAT, "%s: npy header has no 'shape'", path);
    sh++;
    out->ndim = 0;
    out->count = 1;
    for (;;) {
        while (*sh == ' ' || *sh == ',') sh++;
        if (*sh == ')') break;
        char *e;
        errno = 0;
        long long v = strtoll(sh, &e, 10);
        if (e == sh || errno || v < 0) return util_fail(err, QKV_ERR_FORMAT, "%s: bad npy shape", path);
        if (out->ndim >= QKV_NPY_MAX_DIMS)
            return util_fail(err, QKV_ERR_FORMAT, "%s: more than %d dimensions", path, QKV_NPY_MAX_DIMS);
        out->shape[out->ndim++] = v;
        if (v && out->count > ((int64_t)1 << 40) / v)
            return util_fail(err, QKV_ERR_FORMAT, "%s: npy shape is absurdly large", path);
        out->count *= v;
        sh = e;
    }
    return QKV_OK;
}

qkv_status qkv_npy_load(qkv_npy *out, const char *path, qkv_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return util_fail(err, QKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char pre[12];
    qkv_status st = QKV_OK;
    char *hdr = NULL;
    size_t n = fread(pre, 1, 10, f);
    if (n < 10 || memcmp(pre, "\x93NUMPY", 6)) {
        st = util_fail(err, QKV_ERR_FORMAT, "%s: not a .npy file (bad magic or too short)", path);
        goto done;
    }
    size_t hlen;
    int major = pre[6];
    if (major == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            st = util_fail(err, QKV_ERR_FORMAT, "%s: truncated npy header", path);
            goto done;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        st = util_fail(err, QKV_ERR_FORMAT, "%s: unsupported npy version %d", path, major);
        goto done;
    }
    if (hlen > (1u << 20)) {
        st = util_fail(err, QKV_ERR_FORMAT, "%s: npy header length %zu is absurd", path, hlen);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
        st = util_fail(err, QKV_ERR_FORMAT, "%s: truncated npy header", path);
        goto done;
    }
    hdr[hlen] = 0;
    st = parse_header(out, hdr, path, err);
    if (st) goto done;
    size_t esize = out->type == QKV_NPY_I64 || out->type == QKV_NPY_F64 ? 8 : 4;
    long data_start = ftell(f);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || data_start < 0) {
        st = util_fail(err, QKV_ERR_IO, "%s: cannot stat", path);
        goto done;
    }
    uint64_t need = (uint64_t)out->count * esize, have = (uint64_t)sb.st_size - (uint64_t)data_start;
    if (have < need) {
        st = util_fail(err, QKV_ERR_FORMAT, "%s: truncated: header promises %llu bytes of data, file has %llu",
                      path, (unsigned long long)need, (unsigned long long)have);
        goto done;
    }
    out->data = malloc(need ? need : 1);
    if (!out->data) {
        st = util_fail(err, QKV_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)need);
        goto done;
    }
    if (fread(out->data, 1, need, f) != need) {
        st = util_fail(err, QKV_ERR_IO, "%s: read error", path);
        goto done;
    }
done:
    free(hdr);
    fclose(f);
    if (st) qkv_npy_free(out);
    return st;
}

void qkv_npy_free(qkv_npy *a) {
    free(a->data);
    a->data = NULL;
}
