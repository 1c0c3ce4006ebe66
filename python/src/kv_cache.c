/*
 * kv_cache.c — qkv._qkv.KVCache: one layer's K/V cache (qkv_kv_cache),
 * [Hkv, capacity, D] of f32, bf16 or f16, and attention against it.
 *   append(k, v, n):   k, v: [Hkv, n, D] f32
 *   read(k, v, start, n): k, v outputs [Hkv, n, D] f32
 *   attention(o, lse, q, *, n_q_head, q_len, scale, softcap, mask, window, sinks, exclude, kernel, threads)
 *     o: [Hq, Lq, D] f32, lse: [Hq, Lq] f32 or None, q: [Hq, Lq, D] f32
 */
#include "bindings.h"

#include <string.h>

typedef struct {
    PyObject_HEAD qkv_kv_cache *c;
    int n_kv_head, head_dim, busy;
} kv_cache_object;

static int kv_init(PyObject *self, PyObject *args, PyObject *kw) {
    kv_cache_object *o = (kv_cache_object *)self;
    static char *kwlist[] = {"n_kv_head", "head_dim", "capacity", "dtype", NULL};
    int hkv, d, cap;
    const char *dtype = "f32";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iii|s", kwlist, &hkv, &d, &cap, &dtype)) return -1;
    qkv_error err = {0};
    qkv_dtype t;
    if (o->c) return PyErr_SetString(PyExc_RuntimeError, "KVCache: already initialised"), -1;
    if (pyq_parse_dtype(&t, dtype) < 0) return -1;
    if (qkv_kv_cache_init(&o->c, hkv, d, cap, t, &err))
        return pyq_raise(&err), -1;
    o->n_kv_head = hkv;
    o->head_dim = d;
    return 0;
}

static void kv_dealloc(PyObject *self) {
    qkv_kv_cache_free(((kv_cache_object *)self)->c);
    Py_TYPE(self)->tp_free(self);
}

static qkv_kv_cache *kv_get(PyObject *self) {
    kv_cache_object *o = (kv_cache_object *)self;
    if (!o->c) PyErr_SetString(PyExc_ValueError, "KVCache: not initialised");
    return o->c;
}

static PyObject *kv_append(PyObject *self, PyObject *args) {
    kv_cache_object *o = (kv_cache_object *)self;
    PyObject *ko, *vo;
    int n;
    if (!kv_get(self) || !PyArg_ParseTuple(args, "OOi", &ko, &vo, &n)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "KVCache.append: n = %d", n);
    Py_ssize_t count = (Py_ssize_t)o->n_kv_head * n * o->head_dim;
    Py_buffer bk, bv;
    if (pyq_buffer(&bk, ko, PYQ_F32, count, 0, "k") < 0) return NULL;
    if (pyq_buffer(&bv, vo, PYQ_F32, count, 0, "v") < 0) return PyBuffer_Release(&bk), NULL;
    if (pyq_enter(&o->busy, "KVCache") < 0) return PyBuffer_Release(&bk), PyBuffer_Release(&bv), NULL;
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_kv_cache_append(o->c, bk.buf, bv.buf, n, &err);
    Py_END_ALLOW_THREADS
    pyq_leave(&o->busy);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bv);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *kv_read(PyObject *self, PyObject *args) {
    kv_cache_object *o = (kv_cache_object *)self;
    PyObject *ko, *vo;
    int start, n;
    if (!kv_get(self) || !PyArg_ParseTuple(args, "OOii", &ko, &vo, &start, &n)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "KVCache.read: n = %d", n);
    Py_ssize_t count = (Py_ssize_t)o->n_kv_head * n * o->head_dim;
    Py_buffer bk, bv;
    if (pyq_buffer(&bk, ko, PYQ_F32, count, 1, "k") < 0) return NULL;
    if (pyq_buffer(&bv, vo, PYQ_F32, count, 1, "v") < 0) return PyBuffer_Release(&bk), NULL;
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    if (pyq_enter(&o->busy, "KVCache") < 0) st = QKV_ERR_INVALID;
    else {
        st = qkv_kv_cache_read(bk.buf, bv.buf, o->c, start, n, &err);
        pyq_leave(&o->busy);
    }
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bv);
    if (st) return PyErr_Occurred() ? NULL : pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *kv_truncate(PyObject *self, PyObject *args) {
    kv_cache_object *o = (kv_cache_object *)self;
    int len;
    if (!kv_get(self) || !PyArg_ParseTuple(args, "i", &len)) return NULL;
    if (pyq_enter(&o->busy, "KVCache") < 0) return NULL;
    qkv_error err = {0};
    qkv_status st = qkv_kv_cache_truncate(o->c, len, &err);
    pyq_leave(&o->busy);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *kv_attention(PyObject *self, PyObject *args, PyObject *kw) {
    kv_cache_object *o = (kv_cache_object *)self;
    static char *kwlist[] = {"o",     "lse",   "q",       "n_q_head", "q_len",   "scale", "softcap",
                             "mask",  "window", "sinks", "exclude",  "kernel",  "threads", NULL};
    PyObject *oo, *lo, *qo, *exclude = Py_None;
    qkv_attn_desc d = {0};
    int kind = QKV_MASK_NONE, window = 0, sinks = 0;
    const char *kernel = "auto";
    if (!kv_get(self) ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OOO|$iiffiiiOsi", kwlist, &oo, &lo, &qo, &d.n_q_head, &d.q_len,
                                     &d.scale, &d.softcap, &kind, &window, &sinks, &exclude, &kernel, &d.n_threads))
        return NULL;
    qkv_error err = {0};
    qkv_kernel kern;
    if (pyq_parse_kernel(&kern, kernel) < 0) return NULL;
    if (d.n_q_head < 1 || d.q_len < 1)
        return PyErr_Format(PyExc_ValueError, "KVCache.attention: %d heads of %d rows", d.n_q_head, d.q_len);
    Py_ssize_t nq = (Py_ssize_t)d.n_q_head * d.q_len * o->head_dim;
    Py_buffer bo, bq, bl = {0}, bex;
    if (pyq_mask(&d.mask, &bex, kind, window, sinks, exclude) < 0) return NULL;
    if (pyq_buffer(&bo, oo, PYQ_F32, nq, 1, "o") < 0) goto fail0;
    if (pyq_buffer(&bq, qo, PYQ_F32, nq, 0, "q") < 0) goto fail1;
    if (lo != Py_None && pyq_buffer(&bl, lo, PYQ_F32, (Py_ssize_t)d.n_q_head * d.q_len, 1, "lse") < 0) goto fail2;
    if (pyq_enter(&o->busy, "KVCache") < 0) goto fail3;
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_attn_cached(bo.buf, bl.obj ? bl.buf : NULL, bq.buf, o->c, &d, kern, &err);
    Py_END_ALLOW_THREADS
    pyq_leave(&o->busy);
    if (bl.obj) PyBuffer_Release(&bl);
    PyBuffer_Release(&bq);
    PyBuffer_Release(&bo);
    if (bex.obj) PyBuffer_Release(&bex);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
fail3:
    if (bl.obj) PyBuffer_Release(&bl);
fail2:
    PyBuffer_Release(&bq);
fail1:
    PyBuffer_Release(&bo);
fail0:
    if (bex.obj) PyBuffer_Release(&bex);
    return NULL;
}

static PyObject *kv_len(PyObject *self, void *closure) {
    (void)closure;
    qkv_kv_cache *c = kv_get(self);
    return c ? PyLong_FromLong(qkv_kv_cache_len(c)) : NULL;
}

static PyObject *kv_capacity(PyObject *self, void *closure) {
    (void)closure;
    qkv_kv_cache *c = kv_get(self);
    return c ? PyLong_FromLong(qkv_kv_cache_capacity(c)) : NULL;
}

static PyObject *kv_dtype(PyObject *self, void *closure) {
    (void)closure;
    qkv_kv_cache *c = kv_get(self);
    return c ? PyUnicode_FromString(qkv_dtype_name(qkv_kv_cache_dtype(c))) : NULL;
}

static PyMethodDef kv_methods[] = {
    {"append", kv_append, METH_VARARGS, "append(k, v, n): k, v [Hkv, n, D] f32."},
    {"read", kv_read, METH_VARARGS, "read(k_out, v_out, start, n)."},
    {"truncate", kv_truncate, METH_VARARGS, "truncate(len)."},
    {"attention", PYQ_KW(kv_attention), METH_VARARGS | METH_KEYWORDS, "attention(o, lse, q, *, ...)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kv_getset[] = {
    {"length", kv_len, NULL, "positions held", NULL},
    {"capacity", kv_capacity, NULL, "positions it can hold", NULL},
    {"dtype", kv_dtype, NULL, "element type: f32, bf16 or f16", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject kv_cache_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qkv._qkv.KVCache",
    .tp_basicsize = sizeof(kv_cache_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KVCache(n_kv_head, head_dim, capacity, dtype='f32'): one layer's K/V cache.",
    .tp_new = PyType_GenericNew,
    .tp_init = kv_init,
    .tp_dealloc = kv_dealloc,
    .tp_methods = kv_methods,
    .tp_getset = kv_getset,
};

int pyq_add_kv_cache(PyObject *module) {
    if (PyType_Ready(&kv_cache_type) < 0) return -1;
    Py_INCREF(&kv_cache_type);
    return PyModule_AddObject(module, "KVCache", (PyObject *)&kv_cache_type);
}
