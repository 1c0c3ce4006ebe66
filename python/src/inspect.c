/*
 * inspect.c — Model.inspect's pictures, from the writers `qkv inspect` uses
 * (render/): the self-contained HTML page of --html (render/html.c, the same
 * embedded render/inspect_page.html) and the figure of --png (render/png.c,
 * the same defaults: linear colours, the panel sizes of qkv_png_params' 0),
 * both fed by the inspect hook row by row in one forward pass:
 *   inspect_maps(path, ids, layers, heads, title, subtitle, progress=None) -> figure
 *     ids [n] int32; layers [nl], heads [nh] int32 (layers increasing);
 *     progress: None or fn(done, total) after each layer (progress.c);
 *     the page is written at path; the figure is a capsule holding the maps
 *     max-pooled to the PNG's panels (qkv_png_maps), drawn only when saved.
 *   png_save(figure, path)     encodes it and writes path whole or not at all
 *   png_has_font(figure)       whether the figure has its text (GNU Unifont)
 *   file_replace(path, bytes)  path whole or not at all (save_html)
 * The page appears at path only when whole (the writer's rename).
 */
#include "bindings.h"
#include "qkv_render.h"

#include <stdlib.h>

#define FIGURE "qkv.png_maps"

typedef struct {
    qkv_html_writer *html;
    qkv_png_maps *png;
    qkv_error err;
} page_sink;

static int page_row(void *user, int li, int hi, int row, const float *w, int n_keys, const qkv_row_stats *s) {
    page_sink *p = user;
    (void)n_keys;
    (void)s;
    qkv_png_maps_row(p->png, li, hi, row, w);
    return qkv_html_row(p->html, li, hi, row, w, &p->err) != QKV_OK;
}

/* What inspect_maps asks for: the maps of ids, layers x heads, on a page at path. */
typedef struct {
    const char *path;
    const int32_t *ids;      /* [n] */
    const int *layers;       /* [nl] increasing */
    const int *heads;        /* [nh] */
    int n, nl, nh;
    const char *title, *subtitle;
    pyq_progress *progress;  /* its per-layer report */
} page_request;

/* The page of rq through m and its figure in *png; QKV_OK or the failure in
 * *err (*png NULL then). Runs without the GIL. */
static qkv_status write_page(qkv_png_maps **png, qkv_model *m, const qkv_tokenizer *tok, const page_request *rq,
                             qkv_error *err) {
    const int32_t *ids = rq->ids;
    const int *layers = rq->layers, *heads = rq->heads;
    const int n = rq->n, nl = rq->nl, nh = rq->nh;
    *png = NULL;
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    char **labels = calloc((size_t)n, sizeof *labels);
    int *windows = malloc((size_t)nl * sizeof *windows); /* [nl] each layer's sliding window, 0: global */
    qkv_inspect *in = NULL;
    page_sink sink = {0};
    qkv_status st = QKV_OK;
    if (!pieces || !lens || !labels || !windows) {
        snprintf(err->msg, sizeof err->msg, "inspect: out of memory");
        st = err->status = QKV_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++) pieces[i] = qkv_token_piece(tok, ids[i], &lens[i]);
    for (int i = 0; i < n; i++)
        if (!pieces[i]) {
            snprintf(err->msg, sizeof err->msg, "inspect: token id %d out of range", (int)ids[i]);
            st = err->status = QKV_ERR_INVALID;
            goto done;
        }
    if ((st = qkv_token_labels(labels, pieces, lens, n, err))) goto done;
    for (int i = 0; i < nl; i++) {
        qkv_layer_attn la;
        qkv_model_layer_attn(&la, qkv_model_get_config(m), layers[i]);
        windows[i] = la.window;
    }
    qkv_maps_info info = {.title = rq->title, .subtitle = rq->subtitle, .n_tok = n,
                          .labels = (const char *const *)labels, .ids = ids, .layers = layers, .n_layers = nl, .heads = heads, .n_heads = nh,
                          .windows = windows};
    qkv_inspect_params ip = {.layers = layers, .n_layers = nl, .heads = heads, .n_heads = nh, .row = page_row,
                             .user = &sink};
    if ((st = qkv_inspect_init(&in, qkv_model_get_config(m), &ip, err))) goto done;
    if ((st = qkv_png_maps_init(&sink.png, &info, NULL, err))) goto done;
    if ((st = qkv_html_open(&sink.html, rq->path, &info, err))) goto done;
    if ((st = pyq_pattern_pass(m, ids, n, qkv_inspect_hook, in, rq->progress, err))) {
        if (sink.err.msg[0]) *err = sink.err; /* the page's writer failed: its own error, not the hook's */
        goto done;
    }
    st = qkv_html_close(sink.html, err);
    sink.html = NULL;
    if (!st) *png = sink.png, sink.png = NULL;
done:
    if (sink.html) qkv_html_abort(sink.html);
    qkv_png_maps_free(sink.png);
    qkv_inspect_free(in);
    if (labels) qkv_token_labels_free(labels, n);
    free(pieces);
    free(lens);
    free(windows);
    return st;
}

static void figure_free(PyObject *capsule) { qkv_png_maps_free(PyCapsule_GetPointer(capsule, FIGURE)); }

PyObject *pyq_inspect_maps(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "ids", "layers", "heads", "title", "subtitle", "progress", NULL};
    PyObject *path_obj, *ids_obj, *layers_obj, *heads_obj, *progress = NULL;
    const char *title, *subtitle;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OOOss|O", kwlist, PyUnicode_FSConverter, &path_obj, &ids_obj,
                                     &layers_obj, &heads_obj, &title, &subtitle, &progress))
        return NULL;
    Py_buffer bi = {0}, bl = {0}, bh = {0};
    PyObject *r = NULL;
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, qkv_model_get_config(m)->n_layer) < 0) goto fail;
    if (PyObject_GetBuffer(ids_obj, &bi, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    Py_ssize_t n = bi.len / 4;
    PyBuffer_Release(&bi);
    if (pyq_buffer(&bi, ids_obj, PYQ_I32, n, 0, "ids") < 0) goto fail;
    if (PyObject_GetBuffer(layers_obj, &bl, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    Py_ssize_t nl = bl.len / 4;
    PyBuffer_Release(&bl);
    if (pyq_buffer(&bl, layers_obj, PYQ_I32, nl, 0, "layers") < 0) goto fail;
    if (PyObject_GetBuffer(heads_obj, &bh, PyBUF_C_CONTIGUOUS) < 0) goto fail;
    Py_ssize_t nh = bh.len / 4;
    PyBuffer_Release(&bh);
    if (pyq_buffer(&bh, heads_obj, PYQ_I32, nh, 0, "heads") < 0) goto fail;
    if (n < 1 || n > INT32_MAX || nl < 1 || nh < 1) {
        PyErr_SetString(PyExc_ValueError, "inspect: no token, layer or head");
        goto fail;
    }
    qkv_error err = {0};
    qkv_status st;
    qkv_png_maps *png = NULL;
    const page_request rq = {.path = PyBytes_AS_STRING(path_obj), .ids = bi.buf, .layers = bl.buf, .heads = bh.buf,
                             .n = (int)n, .nl = (int)nl, .nh = (int)nh, .title = title, .subtitle = subtitle,
                             .progress = &pr};
    Py_BEGIN_ALLOW_THREADS
    st = write_page(&png, m, tok, &rq, &err);
    Py_END_ALLOW_THREADS
    if (st) pyq_raise(&err);
    else if (!(r = PyCapsule_New(png, FIGURE, figure_free))) qkv_png_maps_free(png);
fail:
    if (pyq_progress_done(&pr) < 0) Py_CLEAR(r);
    if (bi.obj) PyBuffer_Release(&bi);
    if (bl.obj) PyBuffer_Release(&bl);
    if (bh.obj) PyBuffer_Release(&bh);
    Py_DECREF(path_obj);
    return r;
}

static PyObject *py_png_save(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *figure, *path_obj;
    if (!PyArg_ParseTuple(args, "OO&", &figure, PyUnicode_FSConverter, &path_obj)) return NULL;
    const qkv_png_maps *pm = PyCapsule_GetPointer(figure, FIGURE);
    if (!pm) {
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(path_obj);
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    uint8_t *png = NULL;
    size_t len = 0;
    st = qkv_png_maps_encode(pm, &png, &len, &err);
    if (!st) st = qkv_file_replace(path, png, len, &err);
    free(png);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *py_png_has_font(PyObject *self, PyObject *figure) {
    (void)self;
    const qkv_png_maps *pm = PyCapsule_GetPointer(figure, FIGURE);
    if (!pm) return NULL;
    return PyBool_FromLong(qkv_png_maps_has_font(pm));
}

static PyObject *py_file_replace(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "O&y*", PyUnicode_FSConverter, &path_obj, &data)) return NULL;
    qkv_error err = {0};
    qkv_status st;
    const char *path = PyBytes_AS_STRING(path_obj);
    Py_BEGIN_ALLOW_THREADS
    st = qkv_file_replace(path, data.buf, (size_t)data.len, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    Py_DECREF(path_obj);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

PyMethodDef pyq_inspect_methods[] = {
    {"png_save", py_png_save, METH_VARARGS, "png_save(figure, path): the figure of inspect_maps as a PNG file."},
    {"png_has_font", py_png_has_font, METH_O, "png_has_font(figure): whether the figure's text could be drawn."},
    {"file_replace", py_file_replace, METH_VARARGS, "file_replace(path, data): path whole or not at all."},
    {NULL, NULL, 0, NULL},
};
