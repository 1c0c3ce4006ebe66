/*
 * util.c — the helpers of util.h: exceptions from libqkv's errors, checked
 * buffers, names of dtypes and kernels, the busy guard, masks, and a held
 * Python exception. Nothing here knows a model or a feature.
 */
#include "util.h"

#include <string.h>

PyObject *pyq_raise(const qkv_error *e) {
    PyObject *type = PyExc_ValueError;
    if (e->status == QKV_ERR_IO) type = PyExc_OSError;
    if (e->status == QKV_ERR_NOMEM) type = PyExc_MemoryError;
    if (e->status == QKV_ERR_CANCELLED) type = PyExc_RuntimeError; /* a callback that raised re-raises its own */
    PyErr_SetString(type, e->msg[0] ? e->msg : qkv_status_str(e->status));
    return NULL;
}

static const struct {
    const char *formats; /* struct-module characters accepted (after a byte-order prefix) */
    Py_ssize_t size;
    const char *name;
} elem_info[] = {
    [PYQ_F32] = {"f", 4, "float32"}, [PYQ_F16] = {"e", 2, "float16"}, [PYQ_U16] = {"H", 2, "uint16"},
    [PYQ_I32] = {"i", 4, "int32"},   [PYQ_I64] = {"lq", 8, "int64"},  [PYQ_F64] = {"d", 8, "float64"},
};

int pyq_buffer(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t count, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s %s array", what, writable ? " writable" : "",
                     elem_info[elem].name);
        return -1;
    }
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != elem_info[elem].size || strlen(f) != 1 || !strchr(elem_info[elem].formats, *f)) {
        PyErr_Format(PyExc_TypeError, "%s: expected %s elements, got format '%s'", what, elem_info[elem].name,
                     b->format ? b->format : "B");
        PyBuffer_Release(b);
        return -1;
    }
    if (b->len != count * b->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd elements, got %zd", what, count, b->len / b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

int pyq_buffer_n(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t *n, const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) < 0) return -1;
    *n = b->len / elem_info[elem].size;
    PyBuffer_Release(b);
    return pyq_buffer(b, obj, elem, *n, 0, what);
}

qkv_dtype pyq_kv_dtype(pyq_elem e) {
    return e == PYQ_F16 ? QKV_DTYPE_F16 : e == PYQ_U16 ? QKV_DTYPE_BF16 : QKV_DTYPE_F32;
}

int pyq_parse_dtype(qkv_dtype *out, const char *name) {
    qkv_error err = {0};
    if (qkv_dtype_parse(out, name, &err) == QKV_OK) return 0;
    PyErr_SetString(PyExc_ValueError, err.msg);
    return -1;
}

int pyq_parse_kernel(qkv_kernel *out, const char *name) {
    qkv_error err = {0};
    if (qkv_kernel_parse(out, name, &err) == QKV_OK) return 0;
    PyErr_SetString(PyExc_ValueError, err.msg);
    return -1;
}

int pyq_enter(int *busy, const char *what) {
    if (*busy) {
        PyErr_Format(PyExc_RuntimeError, "%s is in use by another thread (it serves one call at a time)", what);
        return -1;
    }
    *busy = 1;
    return 0;
}

int pyq_mask(qkv_mask *m, Py_buffer *ex, int kind, int window, int sinks, PyObject *exclude) {
    memset(m, 0, sizeof *m);
    memset(ex, 0, sizeof *ex);
    m->kind = (qkv_mask_kind)kind;
    m->window = window;
    m->sinks = sinks;
    if (exclude && exclude != Py_None) {
        if (PyObject_GetBuffer(exclude, ex, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
        if (ex->itemsize != 4 || ex->len / 4 > INT32_MAX) {
            PyBuffer_Release(ex);
            ex->obj = NULL;
            PyErr_SetString(PyExc_TypeError, "exclude: expected an int32 array");
            return -1;
        }
        m->exclude = ex->buf;
        m->n_exclude = (int)(ex->len / 4);
    }
    return 0;
}

/* An exception leaves the error indicator while C code that cannot pass it
 * on runs (a hook stopping the forward, a progress callback), and is put
 * back when that code has returned. */
void pyq_exc_save(pyq_exc *e) {
#if PY_VERSION_HEX >= 0x030C0000
    e->type = e->tb = NULL;
    e->value = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&e->type, &e->value, &e->tb);
    PyErr_NormalizeException(&e->type, &e->value, &e->tb);
#endif
}

void pyq_exc_restore(pyq_exc *e) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(e->value);
#else
    PyErr_Restore(e->type, e->value, e->tb);
#endif
    e->type = e->value = e->tb = NULL;
}

void pyq_exc_clear(pyq_exc *e) {
    Py_CLEAR(e->type);
    Py_CLEAR(e->value);
    Py_CLEAR(e->tb);
}
