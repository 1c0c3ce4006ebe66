/*
 * module.c — the qkv._qkv extension module's init: the library's version and
 * kernel ISA, and every feature file's functions and types added to the
 * module. The Python package (python/qkv) is the public face; this module is
 * its private engine. The top of the bindings: nothing calls into it.
 */
#include "bindings.h"
#include "model.h"

static PyObject *py_version(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyUnicode_FromString(qkv_version());
}

static PyObject *py_isa(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyUnicode_FromString(qkv_attn_isa());
}

static PyMethodDef module_methods[] = {
    {"version", py_version, METH_NOARGS, "The version of libqkv compiled in, \"MAJOR.MINOR.PATCH\"."},
    {"isa", py_isa, METH_NOARGS, "The instruction set the attention kernels run on: avx512, avx2 or scalar."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "qkv._qkv", "libqkv's engine for the qkv package (private: use qkv).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__qkv(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, module_methods) < 0 || PyModule_AddFunctions(m, pyq_attention_methods) < 0 ||
        PyModule_AddFunctions(m, pyq_inspect_methods) < 0 || PyModule_AddFunctions(m, pyq_hook_methods) < 0 ||
        PyModule_AddFunctions(m, pyq_stream_methods) < 0 ||
        PyModule_AddFunctions(m, pyq_patch_methods) < 0 ||
        pyq_add_kv_cache(m) < 0 || pyq_add_model(m) < 0 || pyq_add_sampler(m) < 0 || pyq_add_weights(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
