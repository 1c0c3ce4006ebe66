/*
 * hooks.c — one forward call's options from Python (Model.forward's hooks=
 * and zero_heads=, qkv_forward_opts) and the trampoline that runs a Python
 * function at a named activation point (qkv_hook). It keeps nothing between
 * calls: the options are built before the forward and freed after it.
 *   hooks:      [(name, fn)]: name as qkv_hook_parse reads it ("blocks.3.attn.hook_z",
 *               "blocks.*.hook_resid_pre", "hook_embed"); fn(data, shape, layer)
 *               gets a copy of the activation (data: a bytearray of float32,
 *               shape its shape, layer -1 outside the blocks) and returns None
 *               (nothing written back) or a C-contiguous float32 buffer of the
 *               same element count that replaces the activation. hook_pattern's
 *               copy is the whole [Hq, n, n_keys] map; it takes None only.
 *   zero_heads: int32 [k, 2] (layer, head) pairs, or None.
 *   hook_points() -> [(name, per_layer)]: qkv_hook_point's names, in order.
 * The copies are the point: Python may keep an activation (the cache of
 * run_with_cache does) while the model reuses its buffers. It does not check
 * names against the model's layers (the forward does) nor shapes (the
 * Python side does, with messages in TransformerLens's words).
 */
#include "bindings.h"

#include <stdlib.h>
#include <string.h>

struct pyq_hook {
    PyObject *fn;       /* fn(data, shape, layer) -> None or a float32 buffer (a strong reference) */
    pyq_exc *raised;  /* the call's first exception, shared by its hooks */
};

/* hook_pattern's weights, every head and row against every key:
 *   w: [Hq, n, n_keys] */
static qkv_status pattern_all(float *w, const qkv_activation *a, qkv_error *err) {
    const int H = (int)a->shape[0], n = (int)a->shape[1], nk = (int)a->shape[2];
    for (int h = 0; h < H; h++) {
        qkv_status st = qkv_pattern_weights(w + (size_t)h * n * nk, a, h, 0, n, 0, nk, err);
        if (st) return st;
    }
    return QKV_OK;
}

/* The activation as a new bytearray (hook_pattern's computed into it);
 * NULL with a Python exception, or with *st and err set if the weights failed. */
static PyObject *activation_copy(const qkv_activation *a, Py_ssize_t count, qkv_status *st, qkv_error *err) {
    PyObject *data = PyByteArray_FromStringAndSize(a->data ? (const char *)a->data : NULL, count * 4);
    if (!data || a->data) return data;
    float *w = (float *)PyByteArray_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    *st = pattern_all(w, a, err);
    Py_END_ALLOW_THREADS
    if (*st) Py_CLEAR(data);
    return data;
}

/* Writes fn's result r over the activation; -1 with a Python exception. */
static int write_back(const qkv_activation *a, PyObject *r, Py_ssize_t count, const char *name) {
    if (!a->data)
        return PyErr_Format(PyExc_ValueError, "hook at %s returned a value: hook_pattern is read-only", name), -1;
    Py_buffer b;
    if (pyq_buffer(&b, r, PYQ_F32, count, 0, "hook result") < 0) return -1;
    memcpy(a->data, b.buf, (size_t)count * sizeof(float));
    PyBuffer_Release(&b);
    return 0;
}

/* The forward runs with the GIL released (its matmuls let other Python
 * threads run, as the plain forward does), and llama.c calls the hooks on
 * the thread that called qkv_model_forward, between its layers, never from
 * the thread pool: that thread's state exists, so PyGILState_Ensure takes
 * the GIL back for the call into Python and Release lets it go again. */
static qkv_status hook_trampoline(void *user, const qkv_activation *a, qkv_error *err) {
    struct pyq_hook *h = user;
    char name[80];
    qkv_hook_format(name, sizeof name, a->point, a->layer);
    const Py_ssize_t count = (Py_ssize_t)(a->shape[0] * a->shape[1] * (a->ndim == 3 ? a->shape[2] : 1));
    qkv_status st = QKV_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *data = activation_copy(a, count, &st, err), *r = NULL;
    if (data) {
        PyObject *shape = a->ndim == 3 ? Py_BuildValue("(LLL)", (long long)a->shape[0], (long long)a->shape[1],
                                                       (long long)a->shape[2])
                                       : Py_BuildValue("(LL)", (long long)a->shape[0], (long long)a->shape[1]);
        if (shape) r = PyObject_CallFunction(h->fn, "OOi", data, shape, a->layer);
        Py_XDECREF(shape);
        if (r && r != Py_None && write_back(a, r, count, name) < 0) Py_CLEAR(r);
    }
    if (!st && !r) {
        /* only the first exception is kept: the forward stops at it */
        if (!h->raised->type && !h->raised->value) pyq_exc_save(h->raised);
        else PyErr_Clear();
        st = err->status = QKV_ERR_INVALID;
        snprintf(err->msg, sizeof err->msg, "the Python hook at %s raised", name);
    }
    Py_XDECREF(r);
    Py_XDECREF(data);
    PyGILState_Release(g);
    return st;
}

/* ------------------------------------------------------- one call's options */

/* qkv_hook's list from [(name, fn)]; -1 with a Python exception. */
static int hooks_of(pyq_forward *f, PyObject *hooks) {
    PyObject *seq = PySequence_Fast(hooks, "hooks: expected a list of (name, function) pairs");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT32_MAX / 2) return Py_DECREF(seq), PyErr_SetString(PyExc_ValueError, "hooks: too many"), -1;
    f->hooks = calloc((size_t)n + 1, sizeof *f->hooks);
    f->calls = calloc((size_t)n + 1, sizeof *f->calls);
    if (!f->hooks || !f->calls) return Py_DECREF(seq), PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name;
        PyObject *fn;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sO;hooks: expected (name, function) pairs", &name,
                              &fn))
            return Py_DECREF(seq), -1;
        if (!PyCallable_Check(fn))
            return Py_DECREF(seq), PyErr_Format(PyExc_TypeError, "hooks: the function for '%s' is not callable", name), -1;
        qkv_hook *h = &f->hooks[i];
        qkv_error err = {0};
        if (qkv_hook_parse(&h->point, &h->layer, name, &err)) return Py_DECREF(seq), pyq_raise(&err), -1;
        Py_INCREF(fn);
        f->calls[i] = (struct pyq_hook){.fn = fn, .raised = &f->raised};
        h->fn = hook_trampoline;
        h->user = &f->calls[i];
        f->opts.n_hooks = (int)i + 1;
    }
    f->opts.hooks = f->hooks;
    Py_DECREF(seq);
    return 0;
}

/* qkv_head_ref's list from an int32 [k, 2] buffer; -1 with a Python exception. */
static int zero_heads_of(pyq_forward *f, PyObject *zero) {
    Py_buffer b;
    if (PyObject_GetBuffer(zero, &b, PyBUF_C_CONTIGUOUS) < 0) return -1;
    const Py_ssize_t k = b.len / 8;
    PyBuffer_Release(&b);
    if (k > INT32_MAX) return PyErr_SetString(PyExc_ValueError, "zero_heads: too many"), -1;
    if (pyq_buffer(&b, zero, PYQ_I32, 2 * k, 0, "zero_heads") < 0) return -1;
    f->zero = malloc(((size_t)k + 1) * sizeof *f->zero);
    if (!f->zero) return PyBuffer_Release(&b), PyErr_NoMemory(), -1;
    const int32_t *p = b.buf;
    for (Py_ssize_t i = 0; i < k; i++) f->zero[i] = (qkv_head_ref){.layer = p[2 * i], .head = p[2 * i + 1]};
    PyBuffer_Release(&b);
    f->opts.zero_heads = f->zero;
    f->opts.n_zero_heads = (int)k;
    return 0;
}

int pyq_forward_init(pyq_forward *f, PyObject *hooks, PyObject *zero_heads) {
    memset(f, 0, sizeof *f);
    if (hooks && hooks != Py_None && hooks_of(f, hooks) < 0) return pyq_forward_free(f), -1;
    if (zero_heads && zero_heads != Py_None && zero_heads_of(f, zero_heads) < 0) return pyq_forward_free(f), -1;
    return 0;
}

void pyq_forward_free(pyq_forward *f) {
    for (int i = 0; f->calls && i < f->opts.n_hooks; i++) Py_CLEAR(f->calls[i].fn);
    free(f->hooks);
    free(f->calls);
    free(f->zero);
    pyq_exc_clear(&f->raised);
    memset(f, 0, sizeof *f);
}

PyObject *pyq_forward_done(pyq_forward *f, qkv_status st, const qkv_error *err) {
    const int raised = f->raised.type || f->raised.value;
    if (raised) {
        PyErr_Clear(); /* the hook's own exception explains the failure better than any other */
        pyq_exc_restore(&f->raised);
    }
    pyq_forward_free(f);
    if (raised || PyErr_Occurred()) return NULL;
    if (st) return pyq_raise(err);
    Py_RETURN_NONE;
}

/* --------------------------------------------------------------- names */

static PyObject *py_hook_points(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    PyObject *out = PyList_New(QKV_HOOK_COUNT);
    for (int p = 0; out && p < QKV_HOOK_COUNT; p++) {
        PyObject *t = Py_BuildValue("(sO)", qkv_hook_point_name((qkv_hook_point)p),
                                    qkv_hook_point_per_layer((qkv_hook_point)p) ? Py_True : Py_False);
        if (!t) Py_CLEAR(out);
        else PyList_SET_ITEM(out, p, t);
    }
    return out;
}

PyMethodDef pyq_hook_methods[] = {
    {"hook_points", py_hook_points, METH_NOARGS,
     "hook_points() -> [(name, per_layer)]: the activation points, in forward order."},
    {NULL, NULL, 0, NULL},
};
