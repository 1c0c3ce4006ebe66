/*
 * sampler.c — qkv._qkv.Sampler: the next token from a logit row
 * (qkv_sampler: greedy, or temperature with top-k / top-p from a seeded
 * splitmix64 stream).
 *   Sampler(n_vocab, temperature=0, top_k=0, top_p=1, seed=1)
 *   sample(logits) -> int     logits: [V] f32
 */
#include "bindings.h"

typedef struct {
    PyObject_HEAD qkv_sampler *s;
    int n_vocab, busy;
} sampler_object;

static int sampler_init(PyObject *self, PyObject *args, PyObject *kw) {
    sampler_object *o = (sampler_object *)self;
    static char *kwlist[] = {"n_vocab", "temperature", "top_k", "top_p", "seed", NULL};
    qkv_sampler_params p = {.top_p = 1, .seed = 1};
    unsigned long long seed = 1;
    int n_vocab;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|fifK", kwlist, &n_vocab, &p.temperature, &p.top_k, &p.top_p,
                                     &seed))
        return -1;
    if (o->s) return PyErr_SetString(PyExc_RuntimeError, "Sampler: already initialised"), -1;
    p.seed = seed;
    qkv_error err = {0};
    if (qkv_sampler_init(&o->s, n_vocab, &p, &err)) return pyq_raise(&err), -1;
    o->n_vocab = n_vocab;
    return 0;
}

static void sampler_dealloc(PyObject *self) {
    qkv_sampler_free(((sampler_object *)self)->s);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *sampler_sample(PyObject *self, PyObject *arg) {
    sampler_object *o = (sampler_object *)self;
    if (!o->s) return PyErr_Format(PyExc_ValueError, "Sampler: not initialised");
    Py_buffer b;
    if (pyq_buffer(&b, arg, PYQ_F32, o->n_vocab, 0, "logits") < 0) return NULL;
    if (pyq_enter(&o->busy, "Sampler") < 0) return PyBuffer_Release(&b), NULL;
    int32_t id = qkv_sample(o->s, b.buf);
    pyq_leave(&o->busy);
    PyBuffer_Release(&b);
    return PyLong_FromLong(id);
}

static PyMethodDef sampler_methods[] = {
    {"sample", sampler_sample, METH_O, "sample(logits [V] f32) -> token id."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject sampler_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qkv._qkv.Sampler",
    .tp_basicsize = sizeof(sampler_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sampler(n_vocab, temperature=0, top_k=0, top_p=1, seed=1).",
    .tp_new = PyType_GenericNew,
    .tp_init = sampler_init,
    .tp_dealloc = sampler_dealloc,
    .tp_methods = sampler_methods,
};

int pyq_add_sampler(PyObject *module) {
    if (PyType_Ready(&sampler_type) < 0) return -1;
    Py_INCREF(&sampler_type);
    return PyModule_AddObject(module, "Sampler", (PyObject *)&sampler_type);
}
