/*
 * weights.c — qkv._qkv.Weights: a GGUF's weights (qkv_weights), opened once
 * and shared by any number of Models (each takes its own reference in C, so
 * a Model outlives a closed Weights).
 *   Weights(path);  close();  nbytes() -> int (the mapping and what open dequantised)
 */
#include "bindings.h"

typedef struct {
    PyObject_HEAD qkv_weights *w;
} weights_object;

static int weights_init(PyObject *self, PyObject *args, PyObject *kw) {
    weights_object *o = (weights_object *)self;
    static char *kwlist[] = {"path", NULL};
    PyObject *path_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", kwlist, PyUnicode_FSConverter, &path_obj)) return -1;
    if (o->w) {
        Py_DECREF(path_obj);
        return PyErr_SetString(PyExc_RuntimeError, "Weights: already open"), -1;
    }
    qkv_error err = {0};
    qkv_status st;
    const char *path = PyBytes_AS_STRING(path_obj);
    Py_BEGIN_ALLOW_THREADS
    st = qkv_weights_open(&o->w, path, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    return st ? (pyq_raise(&err), -1) : 0;
}

static void weights_dealloc(PyObject *self) {
    qkv_weights_close(((weights_object *)self)->w);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *weights_close(PyObject *self, PyObject *args) {
    (void)args;
    weights_object *o = (weights_object *)self;
    qkv_weights_close(o->w); /* the models on them keep theirs */
    o->w = NULL;
    Py_RETURN_NONE;
}

static PyObject *weights_nbytes(PyObject *self, PyObject *args) {
    (void)args;
    qkv_weights *w = pyq_weights_of(self);
    return w ? PyLong_FromSize_t(qkv_weights_bytes(w)) : NULL;
}

static PyMethodDef weights_methods[] = {
    {"close", weights_close, METH_NOARGS, "close(): drops these weights (the Models on them keep theirs)."},
    {"nbytes", weights_nbytes, METH_NOARGS, "nbytes() -> the bytes of the mapping and of what open dequantised."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject weights_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qkv._qkv.Weights",
    .tp_basicsize = sizeof(weights_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Weights(path): a GGUF's weights, shared by the Models made on them.",
    .tp_new = PyType_GenericNew,
    .tp_init = weights_init,
    .tp_dealloc = weights_dealloc,
    .tp_methods = weights_methods,
};

qkv_weights *pyq_weights_of(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &weights_type))
        return PyErr_Format(PyExc_TypeError, "expected qkv._qkv.Weights, got %s", Py_TYPE(obj)->tp_name), NULL;
    qkv_weights *w = ((weights_object *)obj)->w;
    if (!w) PyErr_SetString(PyExc_ValueError, "Weights: the weights are closed");
    return w;
}

int pyq_is_weights(PyObject *obj) { return PyObject_TypeCheck(obj, &weights_type); }

int pyq_add_weights(PyObject *module) {
    if (PyType_Ready(&weights_type) < 0) return -1;
    Py_INCREF(&weights_type);
    return PyModule_AddObject(module, "Weights", (PyObject *)&weights_type);
}
