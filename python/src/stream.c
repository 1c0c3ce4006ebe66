/*
 * stream.c — Model.stream's engine: qkv_stream_score (perplexity under a
 * bounded KV cache) on an open model the caller holds.
 *   stream_score(nll, ids, policy, cache, window, sinks, chunk, progress=None) -> max_rows
 *     nll [n - 1] f32 <- NLL of token t + 1;  ids [n] int32;
 *     progress: None or fn(done, total) in tokens run, after each chunk (progress.c)
 *   stream_steps(n, policy, window, sinks, chunk) -> the tokens stream_score runs
 *     for n tokens (qkv_stream_steps: the total its progress counts to)
 */
#include "bindings.h"

PyObject *pyq_stream_score(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"nll", "ids", "policy", "cache", "window", "sinks", "chunk", "progress", NULL};
    (void)tok;
    PyObject *nll_obj, *ids_obj, *progress = NULL;
    int policy, cache, window, sinks, chunk;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOiiiii|O", kwlist, &nll_obj, &ids_obj, &policy, &cache, &window,
                                     &sinks, &chunk, &progress))
        return NULL;
    Py_buffer bi, bn;
    if (PyObject_GetBuffer(ids_obj, &bi, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const Py_ssize_t n = bi.len / 4;
    PyBuffer_Release(&bi);
    if (n < 2 || n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "stream: needs at least 2 tokens, got %zd", n);
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, 0) < 0) return NULL;
    if (pyq_buffer(&bi, ids_obj, PYQ_I32, n, 0, "ids") < 0) return pyq_progress_done(&pr), NULL;
    if (pyq_buffer(&bn, nll_obj, PYQ_F32, n - 1, 1, "nll") < 0)
        return pyq_progress_done(&pr), PyBuffer_Release(&bi), NULL;
    const qkv_stream_params p = {.policy = (qkv_stream_policy)policy, .cache = (qkv_stream_cache)cache,
                                 .window = window, .sinks = sinks, .chunk = chunk,
                                 .progress = pyq_progress_fn(&pr), .progress_user = &pr};
    qkv_error err = {0};
    int max_rows = 0;
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_stream_score(bn.buf, &max_rows, m, bi.buf, (int)n, &p, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bn);
    if (pyq_progress_done(&pr) < 0) return NULL;
    if (st) return pyq_raise(&err);
    return PyLong_FromLong(max_rows);
}

static PyObject *py_stream_steps(PyObject *self, PyObject *args) {
    (void)self;
    int n, policy, window, sinks, chunk;
    if (!PyArg_ParseTuple(args, "iiiii", &n, &policy, &window, &sinks, &chunk)) return NULL;
    const qkv_stream_params p = {.policy = (qkv_stream_policy)policy, .window = window, .sinks = sinks, .chunk = chunk};
    return PyLong_FromLongLong((long long)qkv_stream_steps(&p, n));
}

PyMethodDef pyq_stream_methods[] = {
    {"stream_steps", py_stream_steps, METH_VARARGS,
     "stream_steps(n, policy, window, sinks, chunk) -> tokens stream_score runs for n tokens."},
    {NULL, NULL, 0, NULL},
};
