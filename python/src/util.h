/*
 * util.h — the helpers every binding file of qkv._qkv shares, and nothing
 * else: the library's error as a Python exception, buffer arguments checked
 * for element type and count, dtype and kernel names, the "one call at a
 * time" guard of the objects with scratch, a mask from keyword arguments, and
 * a Python exception held while C code that cannot pass it on runs. It is
 * the bottom of the bindings: it calls libqkv and Python only (util.c).
 *
 * The bindings are thin on purpose: the modules of python/qkv turn user arguments
 * into C-contiguous arrays and allocate the outputs; a binding checks every
 * buffer it is given against the shape it is told (so a wrong call from
 * Python raises, never overruns), releases the GIL and calls libqkv.
 */
#ifndef QKV_PY_UTIL_H
#define QKV_PY_UTIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "qkv.h"

/* Element kinds a buffer may hold, by the struct-module format character. */
typedef enum { PYQ_F32 = 0, PYQ_F16 = 1, PYQ_U16 = 2, PYQ_I32 = 3, PYQ_I64 = 4, PYQ_F64 = 5 } pyq_elem;

/* Raises the exception for e->status (QKV_ERR_IO: OSError, QKV_ERR_NOMEM:
 * MemoryError, QKV_ERR_CANCELLED: RuntimeError, anything else: ValueError)
 * with e->msg; returns NULL. */
PyObject *pyq_raise(const qkv_error *e);

/* Gets a C-contiguous buffer of exactly count elements of kind elem from obj
 * (writable if asked); on failure raises TypeError / ValueError naming `what`
 * and returns -1 (nothing to release). Release with PyBuffer_Release. */
int pyq_buffer(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t count, int writable, const char *what);

/* pyq_buffer (read-only) of however many elements obj holds: their count in *n. */
int pyq_buffer_n(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t *n, const char *what);

/* The kv element type of a K/V buffer kind (f32, f16, or u16 as bf16). */
qkv_dtype pyq_kv_dtype(pyq_elem e);

/* "f32" | "bf16" | "f16" and the kernel names of qkv_kernel_parse; 0, or -1
 * with ValueError naming what is accepted. */
int pyq_parse_dtype(qkv_dtype *out, const char *name);
int pyq_parse_kernel(qkv_kernel *out, const char *name);

/* Guards an object that serves one call at a time while the GIL is released:
 * 0 and *busy = 1, or -1 with RuntimeError if another thread is inside. */
int pyq_enter(int *busy, const char *what);
static inline void pyq_leave(int *busy) { *busy = 0; }

/* A mask from the bindings' keyword arguments; exclude (int32 buffer or
 * None) is held in *ex until PyBuffer_Release (ex->obj NULL if none). */
int pyq_mask(qkv_mask *m, Py_buffer *ex, int kind, int window, int sinks, PyObject *exclude);

/* A Python exception taken out of the error indicator while C code that
 * cannot pass it on runs (a hook, a progress callback), and put back when
 * that code has returned. save and restore need the GIL. */
typedef struct {
    PyObject *type, *value, *tb; /* 3.12+: value only */
} pyq_exc;
void pyq_exc_save(pyq_exc *e);    /* e <- the error indicator, which is cleared */
void pyq_exc_restore(pyq_exc *e); /* the error indicator <- e, which is emptied */
void pyq_exc_clear(pyq_exc *e);   /* drops e's exception */

/* PyCFunction from a METH_VARARGS | METH_KEYWORDS function, without a cast
 * between incompatible function types (-Wcast-function-type). */
#define PYQ_KW(fn) ((PyCFunction)(void (*)(void))(fn))

#endif
