/*
 * ablate.c — Model.ablate's engine: qkv_ablate_positions (hide key j from
 * the scoped rows, for every j) and qkv_ablate_heads (zero one head's output
 * at a time), on an open model the caller holds. n = tokens, L x Hq heads.
 *   ablate_positions(values, top, ids, scope, layer, head, target, progress=None)
 *     values [4, n] f64 <- attn_mean, attn_max, kl, dp_target;  top [n] int32 <- top_after
 *   ablate_heads(values, top, ids, target, progress=None)
 *     values [2, L * Hq] f64 <- kl, dp_target;  top [L * Hq] int32 <- top_after
 * Both return (target, p_target, top_full, spearman_attn_kl). progress: None
 * or fn(done, total) in tokens run, after each forward call (progress.c).
 */
#include "bindings.h"

#include <stdlib.h>

/* ids as an int32 buffer held in *b, its length in *n. */
static int ids_buffer(Py_buffer *b, PyObject *obj, Py_ssize_t *n) {
    if (pyq_buffer_n(b, obj, PYQ_I32, n, "ids") < 0) return -1;
    if (*n < 1 || *n > INT32_MAX) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_ValueError, "ablate: %zd tokens", *n);
        return -1;
    }
    return 0;
}

static PyObject *summary(const qkv_ablate_summary *s) {
    return Py_BuildValue("(idid)", (int)s->target, s->p_target, (int)s->top_full, s->spearman_attn_kl);
}

PyObject *pyq_ablate_positions(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"values", "top", "ids", "scope", "layer", "head", "target", "progress", NULL};
    (void)tok;
    PyObject *values_obj, *top_obj, *ids_obj, *progress = NULL;
    qkv_ablate_params p = {0};
    int scope, target;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOiiii|O", kwlist, &values_obj, &top_obj, &ids_obj, &scope, &p.layer, &p.head, &target,
                          &progress))
        return NULL;
    p.scope = scope ? QKV_ABLATE_LAST : QKV_ABLATE_ALL;
    p.target = target;
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, 0) < 0) return NULL;
    p.progress = pyq_progress_fn(&pr);
    p.progress_user = &pr;
    Py_buffer bi, bv, bt;
    Py_ssize_t n;
    if (ids_buffer(&bi, ids_obj, &n) < 0) return pyq_progress_done(&pr), NULL;
    if (pyq_buffer(&bv, values_obj, PYQ_F64, 4 * n, 1, "values") < 0)
        return pyq_progress_done(&pr), PyBuffer_Release(&bi), NULL;
    if (pyq_buffer(&bt, top_obj, PYQ_I32, n, 1, "top") < 0)
        return pyq_progress_done(&pr), PyBuffer_Release(&bi), PyBuffer_Release(&bv), NULL;
    qkv_ablate_row *rows = malloc((size_t)n * sizeof *rows);
    qkv_ablate_summary sum;
    qkv_error err = {0};
    qkv_status st = QKV_ERR_NOMEM;
    if (rows) {
        Py_BEGIN_ALLOW_THREADS
        st = qkv_ablate_positions(rows, &sum, m, bi.buf, &p, (int)n, &err);
        Py_END_ALLOW_THREADS
    }
    double *v = bv.buf;
    int32_t *top = bt.buf;
    for (Py_ssize_t j = 0; st == QKV_OK && j < n; j++) {
        v[j] = rows[j].attn_mean;
        v[n + j] = rows[j].attn_max;
        v[2 * n + j] = rows[j].effect.kl;
        v[3 * n + j] = rows[j].effect.dp_target;
        top[j] = rows[j].effect.top;
    }
    free(rows);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bt);
    if (pyq_progress_done(&pr) < 0) return NULL;
    if (!rows && st == QKV_ERR_NOMEM && !err.msg[0]) return PyErr_NoMemory();
    if (st) return pyq_raise(&err);
    return summary(&sum);
}

PyObject *pyq_ablate_heads(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"values", "top", "ids", "target", "progress", NULL};
    (void)tok;
    PyObject *values_obj, *top_obj, *ids_obj, *progress = NULL;
    int target;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOi|O", kwlist, &values_obj, &top_obj, &ids_obj, &target, &progress))
        return NULL;
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const Py_ssize_t LH = (Py_ssize_t)cfg->n_layer * cfg->n_head;
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, 0) < 0) return NULL;
    const qkv_ablate_params p = {.target = target, .progress = pyq_progress_fn(&pr), .progress_user = &pr};
    Py_buffer bi, bv, bt;
    Py_ssize_t n;
    if (ids_buffer(&bi, ids_obj, &n) < 0) return pyq_progress_done(&pr), NULL;
    if (pyq_buffer(&bv, values_obj, PYQ_F64, 2 * LH, 1, "values") < 0)
        return pyq_progress_done(&pr), PyBuffer_Release(&bi), NULL;
    if (pyq_buffer(&bt, top_obj, PYQ_I32, LH, 1, "top") < 0)
        return pyq_progress_done(&pr), PyBuffer_Release(&bi), PyBuffer_Release(&bv), NULL;
    qkv_ablate_effect *e = malloc((size_t)LH * sizeof *e);
    qkv_ablate_summary sum;
    qkv_error err = {0};
    qkv_status st = QKV_ERR_NOMEM;
    if (e) {
        Py_BEGIN_ALLOW_THREADS
        st = qkv_ablate_heads(e, &sum, m, bi.buf, &p, (int)n, &err);
        Py_END_ALLOW_THREADS
    }
    double *v = bv.buf;
    int32_t *top = bt.buf;
    for (Py_ssize_t i = 0; st == QKV_OK && i < LH; i++) {
        v[i] = e[i].kl;
        v[LH + i] = e[i].dp_target;
        top[i] = e[i].top;
    }
    free(e);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bt);
    if (pyq_progress_done(&pr) < 0) return NULL;
    if (!e && st == QKV_ERR_NOMEM && !err.msg[0]) return PyErr_NoMemory();
    if (st) return pyq_raise(&err);
    return summary(&sum);
}
