/*
 * qkv/io.h — arrays on disk: .npy read whole and written as produced.
 */
#ifndef QKV_IO_H
#define QKV_IO_H

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------------- npy */

/* A .npy array in memory: little-endian, C order; float32, int32, int64 or
 * float64 (the oracles' fixtures; a caller checks the type it needs). */
typedef enum { QKV_NPY_F32 = 0, QKV_NPY_I32 = 1, QKV_NPY_I64 = 2, QKV_NPY_F64 = 3 } qkv_npy_type;

#define QKV_NPY_MAX_DIMS 8
typedef struct {
    qkv_npy_type type;
    int ndim;
    int64_t shape[QKV_NPY_MAX_DIMS];
    int64_t count;      /* product of shape */
    void *data;         /* [shape...] of type, malloc'd */
} qkv_npy;

/* Loads path; QKV_ERR_IO / QKV_ERR_FORMAT (the message names the file and the
 * problem: truncated, big-endian, Fortran order, unsupported dtype ...). */
QKV_API qkv_status qkv_npy_load(qkv_npy *out, const char *path, qkv_error *err);
QKV_API void qkv_npy_free(qkv_npy *a);

/* Writes a float32 array (qkv_npy_writer open, put, close). path is written
 * in place and removed if any step fails, so no partial file is left; a
 * negative dimension is QKV_ERR_INVALID. Keeping a previous file at path
 * until the write succeeded is the caller's (write a temporary beside it,
 * then rename: qkv's CLI does, cli/outputs.c).
 *   data: [shape[0], ..., shape[ndim-1]] f32 */
QKV_API qkv_status qkv_npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape,
                                    qkv_error *err);

/* .npy written as it is produced: open with the full shape (a negative
 * dimension is QKV_ERR_INVALID), put the elements in C order, close. path is
 * written in place; a failed write, a close that finds elements missing, or
 * abort removes it (see qkv_npy_save_f32 on keeping a previous file). */
typedef struct qkv_npy_writer qkv_npy_writer;
QKV_API qkv_status qkv_npy_writer_open(qkv_npy_writer **out, const char *path, int ndim, const int64_t *shape,
                                       qkv_error *err);
QKV_API qkv_status qkv_npy_writer_put(qkv_npy_writer *w, const float *data, int64_t n, qkv_error *err);
QKV_API qkv_status qkv_npy_writer_close(qkv_npy_writer *w, qkv_error *err);
QKV_API void qkv_npy_writer_abort(qkv_npy_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* QKV_IO_H */
