/*
 * patch.c — Model.patch / attribute / lens's engine (qkv_patch,
 * qkv_attribute, qkv_lens on an open model the caller holds), and the
 * module's sweeps, spearman, token_labels and heatmap_page (render/: the page
 * `qkv patch / attribute / lens --html` write). L = layers, Hq = query heads,
 * n = tokens, k = the lens's top-k. The Python side (python/qkv/_patch.py,
 * _model.py) checks the arguments and allocates every output:
 *   patch(outs, clean, corrupt, metric, answer, wrong, max_bytes, progress=None)
 *         -> (clean, corrupt, layer_token_steps, naive_layer_token_steps, n_components, n_unchanged)
 *     outs: one entry per sweep, in qkv_sweep's order, a float32 array of the sweep's shape
 *     (sweeps) or None (not swept); clean, corrupt [n] int32; metric 0 kl, 1 logit-diff;
 *     answer, wrong ids (-1: none)
 *   sweeps(n_layer, n_head, n) -> [(name, shape)]:  qkv_sweep's names and recovery shapes, in order
 *   attribute(heads, attn, mlp, ids, answer, wrong) -> (embed, total, logit_diff, heads_linear, final_softcap,
 *         answer, wrong):  heads [L, Hq], attn [L], mlp [L] float32; answer, wrong -1: the model's top-2
 *   lens(top_ids, top_probs, target_prob, ids, k, target):  top_ids [L, n, k] int32, top_probs [L, n, k]
 *     float32, target_prob [L, n] float32 or None (target -1: none)
 *   spearman(x, y) -> float:  x, y [m] float64 (qkv_spearman)
 *   token_labels([bytes]) -> [str]:  qkv_token_labels
 *   heatmap_page(title, intro, maps) -> str:  maps a list of dicts (title, values [rows, cols] float32,
 *     row_labels, col_labels; caption, text, hover ([rows][cols] str, None entries allowed in hover),
 *     diverging, vmax optional): qkv_heatmap_page's page
 */
#include "bindings.h"
#include "qkv_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ids as an int32 buffer held in *b, its length in *n (>= 1). */
static int ids_of(Py_buffer *b, PyObject *obj, Py_ssize_t *n, const char *what) {
    if (pyq_buffer_n(b, obj, PYQ_I32, n, what) < 0) return -1;
    if (*n < 1 || *n > INT32_MAX) {
        PyBuffer_Release(b);
        return PyErr_Format(PyExc_ValueError, "%s: %zd tokens", what, *n), -1;
    }
    return 0;
}

/* An optional float32 output of count elements: NULL for None. */
static int out_of(Py_buffer *b, float **p, PyObject *obj, Py_ssize_t count, const char *what) {
    *p = NULL;
    b->obj = NULL;
    if (obj == Py_None) return 0;
    if (pyq_buffer(b, obj, PYQ_F32, count, 1, what) < 0) return -1;
    *p = b->buf;
    return 0;
}

static void release(Py_buffer *b) {
    if (b->obj) PyBuffer_Release(b);
}

/* ------------------------------------------------------------------ patch */

PyObject *pyq_patch(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"outs", "clean", "corrupt", "metric", "answer", "wrong", "max_bytes", "progress", NULL};
    (void)tok;
    PyObject *outs_obj, *clean_obj, *corrupt_obj, *progress = NULL;
    int metric, answer, wrong;
    long long max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOiiiL|O", kwlist, &outs_obj, &clean_obj, &corrupt_obj, &metric,
                                     &answer, &wrong, &max_bytes, &progress))
        return NULL;
    PyObject *outs = PySequence_Fast(outs_obj, "outs: a sequence of arrays or None");
    if (!outs) return NULL;
    if (PySequence_Fast_GET_SIZE(outs) != QKV_SWEEP_COUNT)
        return Py_DECREF(outs), PyErr_Format(PyExc_ValueError, "outs: %zd entries, want %d",
                                             PySequence_Fast_GET_SIZE(outs), QKV_SWEEP_COUNT);
    const qkv_model_config *c = qkv_model_get_config(m);
    Py_buffer bc, bk, bo[QKV_SWEEP_COUNT] = {{0}};
    Py_ssize_t n, nk;
    if (ids_of(&bc, clean_obj, &n, "clean") < 0) return Py_DECREF(outs), NULL;
    if (ids_of(&bk, corrupt_obj, &nk, "corrupt") < 0) return Py_DECREF(outs), PyBuffer_Release(&bc), NULL;
    qkv_patch_out out = {{0}};
    int ok = nk == n || (PyErr_Format(PyExc_ValueError, "the clean prompt is %zd tokens and the corrupted one %zd", n,
                                      nk), 0);
    for (int s = 0; ok && s < QKV_SWEEP_COUNT; s++) {
        int64_t sh[3];
        qkv_sweep_shape(sh, (qkv_sweep)s, c->n_layer, c->n_head, (int)n);
        ok = out_of(&bo[s], &out.recovery[s], PySequence_Fast_GET_ITEM(outs, s), (Py_ssize_t)(sh[0] * sh[1] * sh[2]),
                    qkv_sweep_name((qkv_sweep)s)) == 0;
    }
    pyq_progress pr = {0};
    ok = ok && pyq_progress_init(&pr, progress, 0) == 0;
    qkv_patch_summary sum = {0};
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    if (ok) {
        const qkv_patch_params p = {.metric = {.kind = (qkv_metric_kind)metric, .answer = answer, .wrong = wrong},
                                    .max_bytes = max_bytes, .progress = pyq_progress_fn(&pr), .progress_user = &pr};
        Py_BEGIN_ALLOW_THREADS
        st = qkv_patch(&out, &sum, m, bc.buf, bk.buf, (int)n, &p, &err);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bc);
    PyBuffer_Release(&bk);
    for (int s = 0; s < QKV_SWEEP_COUNT; s++) release(&bo[s]);
    Py_DECREF(outs);
    if (pr.fn && pyq_progress_done(&pr) < 0) return NULL;
    if (!ok) return NULL;
    if (st) return pyq_raise(&err);
    return Py_BuildValue("(ddLLLL)", sum.clean, sum.corrupt, (long long)sum.layer_token_steps,
                         (long long)sum.naive_layer_token_steps, (long long)sum.n_components,
                         (long long)sum.n_unchanged);
}

/* -------------------------------------------------------------- attribute */

PyObject *pyq_attribute(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"heads", "attn", "mlp", "ids", "answer", "wrong", NULL};
    (void)tok;
    PyObject *heads_obj, *attn_obj, *mlp_obj, *ids_obj;
    int answer, wrong;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOii", kwlist, &heads_obj, &attn_obj, &mlp_obj, &ids_obj, &answer,
                                     &wrong))
        return NULL;
    const qkv_model_config *c = qkv_model_get_config(m);
    const Py_ssize_t L = c->n_layer, H = c->n_head;
    Py_buffer bi, bh, ba, bm;
    Py_ssize_t n;
    if (ids_of(&bi, ids_obj, &n, "ids") < 0) return NULL;
    if (pyq_buffer(&bh, heads_obj, PYQ_F32, L * H, 1, "heads") < 0) return PyBuffer_Release(&bi), NULL;
    if (pyq_buffer(&ba, attn_obj, PYQ_F32, L, 1, "attn") < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bh), NULL;
    if (pyq_buffer(&bm, mlp_obj, PYQ_F32, L, 1, "mlp") < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bh), PyBuffer_Release(&ba), NULL;
    qkv_attribution a = {.heads = bh.buf, .attn = ba.buf, .mlp = bm.buf};
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_attribute(&a, m, bi.buf, (int)n, answer, wrong, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bh);
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bm);
    if (st) return pyq_raise(&err);
    return Py_BuildValue("(dddiiii)", a.embed, a.total, a.logit_diff, a.heads_linear, a.final_softcap, (int)a.answer,
                         (int)a.wrong);
}

/* ------------------------------------------------------------------- lens */

PyObject *pyq_lens(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"top_ids", "top_probs", "target_prob", "ids", "k", "target", NULL};
    (void)tok;
    PyObject *ids_out, *probs_out, *target_out, *ids_obj;
    int k, target;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOii", kwlist, &ids_out, &probs_out, &target_out, &ids_obj, &k,
                                     &target))
        return NULL;
    const Py_ssize_t L = qkv_model_get_config(m)->n_layer;
    Py_buffer bi, bt, bp, bg = {0};
    Py_ssize_t n;
    if (k < 1) return PyErr_Format(PyExc_ValueError, "lens: k = %d", k);
    if (ids_of(&bi, ids_obj, &n, "ids") < 0) return NULL;
    float *tp = NULL;
    if (pyq_buffer(&bt, ids_out, PYQ_I32, L * n * k, 1, "top_ids") < 0) return PyBuffer_Release(&bi), NULL;
    if (pyq_buffer(&bp, probs_out, PYQ_F32, L * n * k, 1, "top_probs") < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bt), NULL;
    if (out_of(&bg, &tp, target_out, L * n, "target_prob") < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bt), PyBuffer_Release(&bp), NULL;
    qkv_lens_out out = {.top_ids = bt.buf, .top_probs = bp.buf, .target_prob = tp};
    const qkv_lens_params p = {.k = k, .target = target};
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_lens(&out, m, bi.buf, (int)n, &p, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bp);
    release(&bg);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------- the module's helpers */

static PyObject *py_spearman(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x_obj, *y_obj;
    if (!PyArg_ParseTuple(args, "OO", &x_obj, &y_obj)) return NULL;
    Py_buffer bx, by;
    Py_ssize_t n;
    if (pyq_buffer_n(&bx, x_obj, PYQ_F64, &n, "x") < 0) return NULL;
    if (n > INT32_MAX) return PyBuffer_Release(&bx), PyErr_Format(PyExc_ValueError, "spearman: %zd values", n);
    if (pyq_buffer(&by, y_obj, PYQ_F64, n, 0, "y") < 0) return PyBuffer_Release(&bx), NULL;
    double r;
    Py_BEGIN_ALLOW_THREADS
    r = qkv_spearman(bx.buf, by.buf, (int)n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return PyFloat_FromDouble(r);
}

static PyObject *py_token_labels(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    const Py_ssize_t n = PyList_GET_SIZE(list);
    if (n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "token_labels: %zd pieces", n);
    const char **pieces = malloc(((size_t)n + 1) * sizeof *pieces);
    size_t *lens = malloc(((size_t)n + 1) * sizeof *lens);
    char **labels = calloc((size_t)n + 1, sizeof *labels);
    PyObject *out = NULL;
    if (!pieces || !lens || !labels) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(p)) {
            PyErr_Format(PyExc_TypeError, "token_labels: piece %zd is not bytes", i);
            goto done;
        }
        pieces[i] = PyBytes_AS_STRING(p);
        lens[i] = (size_t)PyBytes_GET_SIZE(p);
    }
    qkv_error err = {0};
    if (qkv_token_labels(labels, pieces, lens, (int)n, &err)) {
        pyq_raise(&err);
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(labels[i], (Py_ssize_t)strlen(labels[i]), "replace");
        if (!s) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, s);
    }
    qkv_token_labels_free(labels, (int)n);
    labels = NULL;
done:
    if (labels) qkv_token_labels_free(labels, (int)n);
    free(pieces);
    free(lens);
    return out;
}

/* ------------------------------------------------------------ heatmap page */

/* The strings of one map, kept alive (as UTF-8 in Python objects) until the page is written. */
typedef struct {
    qkv_heatmap map;
    Py_buffer values;
    const char **labels;  /* row labels, column labels, text, hover: 2 (rows + cols) + 2 rows x cols at most */
} map_args;

/* The UTF-8 of str (kept by its object), or NULL with TypeError. */
static const char *utf8_of(PyObject *s, const char *what) {
    if (!PyUnicode_Check(s)) return PyErr_Format(PyExc_TypeError, "heatmap_page: %s must be str", what), NULL;
    return PyUnicode_AsUTF8(s);
}

/* count strings from a sequence (or a sequence of rows of cols) into out; None entries NULL if allowed. */
static int strings_of(const char **out, PyObject *seq, Py_ssize_t rows, Py_ssize_t cols, int none_ok,
                      const char *what) {
    PyObject *outer = PySequence_Fast(seq, what);
    if (!outer) return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(outer) != rows)
        rc = (PyErr_Format(PyExc_ValueError, "heatmap_page: %s has %zd entries, expected %zd", what,
                           PySequence_Fast_GET_SIZE(outer), rows), -1);
    for (Py_ssize_t r = 0; !rc && r < rows; r++) {
        PyObject *item = PySequence_Fast_GET_ITEM(outer, r);
        if (cols == 0) {
            out[r] = none_ok && item == Py_None ? NULL : utf8_of(item, what);
            if (!out[r] && PyErr_Occurred()) rc = -1;
            continue;
        }
        rc = strings_of(out + r * cols, item, cols, 0, none_ok, what);
    }
    Py_DECREF(outer);
    return rc;
}

/* One map's dict into a (the dict's objects keep its strings). */
static int map_of(map_args *a, PyObject *d) {
    if (!PyDict_Check(d)) return PyErr_SetString(PyExc_TypeError, "heatmap_page: each map is a dict"), -1;
    PyObject *title = PyDict_GetItemString(d, "title"), *values = PyDict_GetItemString(d, "values");
    PyObject *rl = PyDict_GetItemString(d, "row_labels"), *cl = PyDict_GetItemString(d, "col_labels");
    PyObject *caption = PyDict_GetItemString(d, "caption"), *text = PyDict_GetItemString(d, "text");
    PyObject *hover = PyDict_GetItemString(d, "hover"), *div = PyDict_GetItemString(d, "diverging");
    PyObject *vmax = PyDict_GetItemString(d, "vmax");
    if (!title || !values || !rl || !cl)
        return PyErr_SetString(PyExc_ValueError, "heatmap_page: a map needs title, values, row_labels, col_labels"), -1;
    const Py_ssize_t rows = PySequence_Size(rl), cols = PySequence_Size(cl);
    if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "heatmap_page: a map without cells"), -1);
    if (pyq_buffer(&a->values, values, PYQ_F32, rows * cols, 0, "values") < 0) return -1;
    a->labels = calloc((size_t)(rows + cols + 2 * rows * cols), sizeof *a->labels);
    if (!a->labels) return PyErr_NoMemory(), -1;
    const char **row_l = a->labels, **col_l = row_l + rows, **text_l = col_l + cols, **hover_l = text_l + rows * cols;
    a->map = (qkv_heatmap){.rows = (int)rows, .cols = (int)cols, .values = a->values.buf, .row_labels = row_l,
                           .col_labels = col_l};
    if (!(a->map.title = utf8_of(title, "title"))) return -1;
    if (caption && caption != Py_None && !(a->map.caption = utf8_of(caption, "caption"))) return -1;
    if (strings_of(row_l, rl, rows, 0, 0, "row_labels") < 0 || strings_of(col_l, cl, cols, 0, 0, "col_labels") < 0)
        return -1;
    if (text && text != Py_None) {
        if (strings_of(text_l, text, rows, cols, 0, "text") < 0) return -1;
        a->map.text = text_l;
    }
    if (hover && hover != Py_None) {
        if (strings_of(hover_l, hover, rows, cols, 1, "hover") < 0) return -1;
        a->map.hover = hover_l;
    }
    a->map.diverging = div && PyObject_IsTrue(div) == 1;
    if (vmax && vmax != Py_None && (a->map.vmax = PyFloat_AsDouble(vmax)) == -1.0 && PyErr_Occurred()) return -1;
    return 0;
}

static PyObject *py_heatmap_page(PyObject *self, PyObject *args) {
    (void)self;
    const char *title, *intro = NULL;
    PyObject *maps_obj;
    if (!PyArg_ParseTuple(args, "szO", &title, &intro, &maps_obj)) return NULL;
    PyObject *seq = PySequence_Fast(maps_obj, "heatmap_page: maps must be a list of dicts");
    if (!seq) return NULL;
    const Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    map_args *a = calloc((size_t)k + 1, sizeof *a);
    qkv_heatmap *maps = calloc((size_t)k + 1, sizeof *maps);
    PyObject *page = NULL;
    int ok = a && maps ? 1 : (PyErr_NoMemory(), 0);
    for (Py_ssize_t i = 0; ok && i < k; i++) {
        ok = map_of(&a[i], PySequence_Fast_GET_ITEM(seq, i)) == 0;
        if (ok) maps[i] = a[i].map;
    }
    if (ok) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        qkv_error err = {0};
        qkv_status st = f ? qkv_heatmap_page(f, title, intro, maps, (int)k, &err) : QKV_ERR_NOMEM;
        if (f && fclose(f) && !st) st = QKV_ERR_NOMEM;
        if (st == QKV_OK) page = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
        else if (st == QKV_ERR_NOMEM && !err.msg[0]) PyErr_NoMemory();
        else pyq_raise(&err);
        free(buf);
    }
    for (Py_ssize_t i = 0; a && i < k; i++) {
        release(&a[i].values);
        free(a[i].labels);
    }
    free(a);
    free(maps);
    Py_DECREF(seq);
    return page;
}

static PyObject *py_sweeps(PyObject *self, PyObject *args) {
    (void)self;
    int L, H, n;
    if (!PyArg_ParseTuple(args, "iii", &L, &H, &n)) return NULL;
    PyObject *list = PyList_New(QKV_SWEEP_COUNT);
    for (int s = 0; list && s < QKV_SWEEP_COUNT; s++) {
        int64_t sh[3];
        const int ndim = qkv_sweep_shape(sh, (qkv_sweep)s, L, H, n);
        PyObject *t = ndim == 3 ? Py_BuildValue("(s(LLL))", qkv_sweep_name((qkv_sweep)s), (long long)sh[0],
                                                (long long)sh[1], (long long)sh[2])
                                : Py_BuildValue("(s(LL))", qkv_sweep_name((qkv_sweep)s), (long long)sh[0],
                                                (long long)sh[1]);
        if (!t) return Py_DECREF(list), NULL;
        PyList_SET_ITEM(list, s, t);
    }
    return list;
}

PyMethodDef pyq_patch_methods[] = {
    {"sweeps", py_sweeps, METH_VARARGS, "sweeps(n_layer, n_head, n) -> [(name, shape)]: the patching sweeps, in order."},
    {"spearman", py_spearman, METH_VARARGS, "spearman(x, y) -> Spearman's rank correlation (float64 arrays)."},
    {"token_labels", py_token_labels, METH_VARARGS, "token_labels([bytes]) -> [str]: readable token labels."},
    {"heatmap_page", py_heatmap_page, METH_VARARGS, "heatmap_page(title, intro, maps) -> str: a heatmap page."},
    {NULL, NULL, 0, NULL},
};
