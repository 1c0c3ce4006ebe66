/*
 * needle.c — Model.needle's engine, on an open model the caller holds:
 *   needle_prompt(hay, needle, question, system, max_answer, length, depth, plain)
 *     -> (ids bytes int32 [n], needle_pos, needle_len, haystack_tokens)
 *     hay [n_hay] int32: the haystack's tokens (qkv_needle_prompt_build)
 *   needle_run(answer, mass, step, retrieval, ids, needle_pos, needle_len) -> n_answer
 *     answer [A] int32 <- the greedy reply (A = max_answer);
 *     mass [2, L] f64 <- the first reply token's needle mass, max and mean over heads;
 *     step [2, A, L] f64 <- the same for the row producing reply token k;
 *     retrieval [L, Hq] f64 += each head's retrieval score (qkv_needle_run)
 */
#include "bindings.h"

PyObject *pyq_needle_prompt(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"hay", "needle", "question", "system", "max_answer", "length", "depth", "plain", NULL};
    PyObject *hay_obj;
    const char *needle, *question, *system;
    int max_answer, length, plain;
    double depth;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oyyziidp", kwlist, &hay_obj, &needle, &question, &system, &max_answer,
                                     &length, &depth, &plain))
        return NULL;
    Py_buffer bh;
    if (PyObject_GetBuffer(hay_obj, &bh, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const Py_ssize_t n_hay = bh.len / 4;
    PyBuffer_Release(&bh);
    if (pyq_buffer(&bh, hay_obj, PYQ_I32, n_hay, 0, "haystack ids") < 0) return NULL;
    const qkv_needle_text nt = {.needle = needle, .question = question, .system = system, .max_answer = max_answer,
                                .plain = plain};
    qkv_needle_prompt p;
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_needle_prompt_build(&p, qkv_model_gguf(m), tok, bh.buf, n_hay, &nt, length, depth, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bh);
    if (st) return pyq_raise(&err);
    PyObject *r = Py_BuildValue("(y#iii)", (const char *)p.ids, (Py_ssize_t)p.n * 4, p.needle_pos, p.needle_len,
                                p.haystack_tokens);
    qkv_needle_prompt_free(&p);
    return r;
}

PyObject *pyq_needle_run(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"answer", "mass", "step", "retrieval", "ids", "needle_pos", "needle_len", NULL};
    PyObject *answer_obj, *mass_obj, *step_obj, *retrieval_obj, *ids_obj;
    int needle_pos, needle_len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOii", kwlist, &answer_obj, &mass_obj, &step_obj, &retrieval_obj,
                                     &ids_obj, &needle_pos, &needle_len))
        return NULL;
    const qkv_model_config *c = qkv_model_get_config(m);
    const Py_ssize_t L = c->n_layer, H = c->n_head;
    Py_buffer ba, bm, bs, br, bi;
    if (PyObject_GetBuffer(answer_obj, &ba, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const Py_ssize_t A = ba.len / 4;
    PyBuffer_Release(&ba);
    if (PyObject_GetBuffer(ids_obj, &bi, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const Py_ssize_t n = bi.len / 4;
    PyBuffer_Release(&bi);
    if (A < 1 || n < 1 || n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "needle: %zd answer, %zd prompt tokens", A, n);
    if (pyq_buffer(&ba, answer_obj, PYQ_I32, A, 1, "answer") < 0) return NULL;
    if (pyq_buffer(&bm, mass_obj, PYQ_F64, 2 * L, 1, "mass") < 0) return PyBuffer_Release(&ba), NULL;
    if (pyq_buffer(&bs, step_obj, PYQ_F64, 2 * A * L, 1, "step") < 0)
        return PyBuffer_Release(&ba), PyBuffer_Release(&bm), NULL;
    if (pyq_buffer(&br, retrieval_obj, PYQ_F64, L * H, 1, "retrieval") < 0)
        return PyBuffer_Release(&ba), PyBuffer_Release(&bm), PyBuffer_Release(&bs), NULL;
    if (pyq_buffer(&bi, ids_obj, PYQ_I32, n, 0, "ids") < 0)
        return PyBuffer_Release(&ba), PyBuffer_Release(&bm), PyBuffer_Release(&bs), PyBuffer_Release(&br), NULL;
    const qkv_needle_prompt p = {.ids = bi.buf, .n = (int)n, .needle_pos = needle_pos, .needle_len = needle_len};
    double *mass = bm.buf, *step = bs.buf;
    qkv_needle_result r = {.answer = ba.buf, .mass_max = mass, .mass_mean = mass + L, .retrieval = br.buf,
                           .step_mass_max = step, .step_mass_mean = step + A * L};
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_needle_run(&r, m, tok, &p, (int)A, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bm);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&br);
    PyBuffer_Release(&bi);
    if (st) return pyq_raise(&err);
    return PyLong_FromLong(r.n_answer);
}
