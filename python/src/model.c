/*
 * model.c — qkv._qkv.Model: a GGUF model (qkv_model) with its tokenizer,
 * and the probes that read its attention (qkv_inspect, qkv_sinks) through a
 * hook on hook_pattern. V = vocabulary, n = tokens, L = layers, Hq = query heads.
 *   forward(logits, ids, all, hooks=None, zero_heads=None):  ids [n] int32;
 *       logits [n, V] (all) or [1, V] f32, or None; the call's hooks and
 *       zeroed heads (hooks.c)
 *   maps(out, ids, layers, heads, rows, progress=None):  out [nl, nh, nr, n] f32 exact weights
 *   sinks(means, counts, ids, n_first, skip, every, progress=None):  means [6, L, Hq] f64, counts [2, L, Hq] int64
 *   inspect_maps(path, ids, layers, heads, title, subtitle) -> figure:  the qkv inspect --html page
 *       at path and the --png figure's maps (inspect.c)
 *   ablate_positions(...), ablate_heads(...):  qkv ablate (ablate.c)
 *   patch(...), attribute(...), lens(...):  qkv patch / attribute / lens (patch.c)
 *   stream_score(...):  qkv stream (stream.c);  needle_prompt/needle_run(...):  qkv needle (needle.c)
 *   head_result(out, layer, z):  z [n, Hq, D] f32 (hook_z); out [n, Hq, E] f32 each head through its
 *       slice of Wo (qkv_model_head_result)
 *   config() -> dict:  the rows of config_fields (CONFIG_FIELDS, the module's);  ends_turn(id):  qkv run's stop
 * Every argument may be given by keyword; python/qkv gives the long lists so.
 * The feature files' methods run through model_call, which holds the model.
 * maps and sinks run a fresh sequence (the cache is rewound before and after).
 * progress (here and in the probes' files): None or fn(done, total), called
 * after each layer (maps, sinks, inspect_maps) or forward call (ablate,
 * stream); an exception it raises stops the call and comes out of it (progress.c).
 */
#include "bindings.h"
#include "model.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD qkv_model *m;
    qkv_tokenizer *tok;
    int busy;
} model_object;

static int model_init(PyObject *self, PyObject *args, PyObject *kw) {
    model_object *o = (model_object *)self;
    static char *kwlist[] = {"source", "n_ctx", "kv_dtype", "threads", NULL};
    PyObject *source, *path_obj = NULL;
    qkv_model_params p = {0};
    const char *dtype = "f32";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|isi", kwlist, &source, &p.n_ctx, &dtype, &p.n_threads)) return -1;
    if (o->m) return PyErr_SetString(PyExc_RuntimeError, "Model: already open"), -1;
    /* a Weights object (a sequence over shared weights), else a path */
    qkv_weights *w = NULL;
    if (pyq_is_weights(source) ? !(w = pyq_weights_of(source)) : !PyUnicode_FSConverter(source, &path_obj)) return -1;
    qkv_error err = {0};
    qkv_status st = QKV_ERR_INVALID;
    if (pyq_parse_dtype(&p.kv_dtype, dtype) == 0) {
        /* with the GIL held: no Weights.close() in another thread frees w
         * before the model has taken its reference */
        if (w) st = qkv_model_new(&o->m, w, &p, &err);
        const char *path = path_obj ? PyBytes_AS_STRING(path_obj) : NULL;
        Py_BEGIN_ALLOW_THREADS
        if (!w) st = qkv_model_open(&o->m, path, &p, &err);
        if (st == QKV_OK) st = qkv_tokenizer_load(&o->tok, qkv_model_gguf(o->m), &err);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(path_obj);
    if (st) {
        qkv_model_close(o->m);
        o->m = NULL;
        return PyErr_Occurred() ? -1 : (pyq_raise(&err), -1);
    }
    return 0;
}

static void model_free(model_object *o) {
    qkv_tokenizer_free(o->tok);
    qkv_model_close(o->m);
    o->tok = NULL;
    o->m = NULL;
}

static void model_dealloc(PyObject *self) {
    model_free((model_object *)self);
    Py_TYPE(self)->tp_free(self);
}

/* The open model, or NULL with ValueError (closed) / RuntimeError (busy). */
static model_object *model_enter(PyObject *self) {
    model_object *o = (model_object *)self;
    if (!o->m) return PyErr_SetString(PyExc_ValueError, "Model: the model is closed"), NULL;
    if (pyq_enter(&o->busy, "Model") < 0) return NULL;
    return o;
}

static PyObject *model_close(PyObject *self, PyObject *args) {
    (void)args;
    model_object *o = (model_object *)self;
    if (o->busy) return PyErr_Format(PyExc_RuntimeError, "Model: cannot close while another thread uses it");
    model_free(o);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------- config */

/* Model.config()'s keys: one row per field of qkv_model_config (its qkv_rope
 * flattened to rope_*, the pointer freq_factors left out), then what the open
 * model adds. The module exports the rows as CONFIG_FIELDS, [(name, type)],
 * from which python/qkv makes its Config; tests/python/test_config.py checks
 * the rows against the struct in include/qkv/model.h. */
typedef enum { CFG_INT, CFG_FLOAT, CFG_BOOL, CFG_STR, CFG_ENUM, CFG_LIST } cfg_kind;

static const char *const rope_pairings[] = {[QKV_ROPE_HALF] = "half", [QKV_ROPE_INTERLEAVED] = "interleaved"};
static const char *const rope_scalings[] = {[QKV_ROPE_SCALING_NONE] = "none", [QKV_ROPE_SCALING_LLAMA3] = "llama3"};
static const char *const ffn_acts[] = {[QKV_FFN_SILU] = "silu", [QKV_FFN_GELU_TANH] = "gelu_tanh"};

static PyObject *open_n_ctx(const model_object *o) { return PyLong_FromLong(qkv_model_n_ctx(o->m)); }
static PyObject *open_bos(const model_object *o) { return PyLong_FromLong(qkv_tokenizer_bos(o->tok)); }
static PyObject *open_eos(const model_object *o) { return PyLong_FromLong(qkv_tokenizer_eos(o->tok)); }
static PyObject *open_path(const model_object *o) {
    return PyUnicode_FromString(qkv_gguf_path(qkv_model_gguf(o->m)));
}

/* [{n_head, ...}] every layer's attention spec (Python's LayerAttention). */
static PyObject *open_layers(const model_object *o) {
    const qkv_model_config *c = qkv_model_get_config(o->m);
    PyObject *layers = PyList_New(c->n_layer);
    for (int l = 0; layers && l < c->n_layer; l++) {
        qkv_layer_attn a;
        qkv_model_layer_attn(&a, c, l);
        PyObject *one = Py_BuildValue("{s:i,s:i,s:i,s:f,s:i,s:f,s:f,s:i,s:O,s:O}", "n_head", a.n_head, "n_kv_head",
                                      a.n_kv_head, "head_dim", a.head_dim, "scale", (double)a.scale, "window",
                                      a.window, "softcap", (double)a.softcap, "rope_theta", (double)a.rope.theta,
                                      "qk_norm", a.qk_norm, "qkv_bias",
                                      a.qkv_bias ? Py_True : Py_False, "no_rope", a.no_rope ? Py_True : Py_False);
        if (!one) Py_CLEAR(layers);
        else PyList_SET_ITEM(layers, l, one);
    }
    return layers;
}

#define CFG(field, kind) {#field, kind, offsetof(qkv_model_config, field), NULL, NULL}
#define CFG_ROPE(field, kind) {"rope_" #field, kind, offsetof(qkv_model_config, rope.field), NULL, NULL}
#define CFG_ENUM_OF(name, field, names) {name, CFG_ENUM, offsetof(qkv_model_config, field), names, NULL}
#define CFG_OPEN(field, kind) {#field, kind, 0, NULL, open_##field}
static const struct {
    const char *name;
    cfg_kind kind;
    size_t offset;                            /* in qkv_model_config, unless open */
    const char *const *names;                 /* CFG_ENUM: the value's name by its number */
    PyObject *(*open)(const model_object *o); /* a value of the open model, not of the struct */
} config_fields[] = {
    CFG(arch, CFG_STR),
    CFG(n_layer, CFG_INT),
    CFG(n_embd, CFG_INT),
    CFG(n_head, CFG_INT),
    CFG(n_kv_head, CFG_INT),
    CFG(head_dim, CFG_INT),
    CFG(n_ff, CFG_INT),
    CFG(n_vocab, CFG_INT),
    CFG(n_ctx_train, CFG_INT),
    CFG(norm_eps, CFG_FLOAT),
    CFG_ENUM_OF("rope_pairing", rope.pairing, rope_pairings),
    CFG_ROPE(theta, CFG_FLOAT),
    CFG_ENUM_OF("rope_scaling", rope.scaling, rope_scalings),
    CFG_ROPE(factor, CFG_FLOAT),
    CFG_ROPE(low_freq_factor, CFG_FLOAT),
    CFG_ROPE(high_freq_factor, CFG_FLOAT),
    CFG_ROPE(original_max_position, CFG_INT),
    CFG_ROPE(n_rot, CFG_INT),         /* 0: the whole head rotates */
    CFG_ROPE(attn_factor, CFG_FLOAT), /* 0: 1 */
    CFG(rope_ctx_orig, CFG_INT),
    CFG(tied_embeddings, CFG_BOOL),
    CFG(attn_scale, CFG_FLOAT),
    CFG(window, CFG_INT),
    CFG(swa_period, CFG_INT),
    CFG(rope_theta_swa, CFG_FLOAT),
    CFG(no_rope_interval, CFG_INT),
    CFG(attn_softcap, CFG_FLOAT),
    CFG(qk_norm, CFG_INT), /* qkv_qk_norm: 0 none, 1 per head, 2 the whole projection */
    CFG(qkv_bias, CFG_BOOL),
    CFG(fused, CFG_BOOL),
    CFG(post_norms, CFG_BOOL),
    CFG(no_pre_norms, CFG_BOOL),
    CFG_ENUM_OF("ffn_act", ffn_act, ffn_acts),
    CFG(embd_scale, CFG_FLOAT),
    CFG(final_softcap, CFG_FLOAT),
    CFG_OPEN(n_ctx, CFG_INT), /* positions the KV cache holds */
    CFG_OPEN(bos, CFG_INT),   /* the tokenizer's BOS id, -1: none */
    CFG_OPEN(eos, CFG_INT),
    CFG_OPEN(path, CFG_STR),  /* the GGUF file */
    CFG_OPEN(layers, CFG_LIST),
};
#undef CFG
#undef CFG_ROPE
#undef CFG_ENUM_OF
#undef CFG_OPEN
_Static_assert(sizeof(qkv_rope_pairing) == sizeof(int) && sizeof(qkv_rope_scaling) == sizeof(int) &&
                   sizeof(qkv_ffn_act) == sizeof(int),
               "CFG_ENUM rows are read as int");
enum { N_CONFIG_FIELDS = sizeof config_fields / sizeof *config_fields };

/* Row i's value for the open model o: a new reference, or NULL with an exception. */
static PyObject *config_value(const model_object *o, int i) {
    if (config_fields[i].open) return config_fields[i].open(o);
    const char *p = (const char *)qkv_model_get_config(o->m) + config_fields[i].offset;
    switch (config_fields[i].kind) {
    case CFG_INT: return PyLong_FromLong(*(const int *)p);
    case CFG_FLOAT: return PyFloat_FromDouble((double)*(const float *)p);
    case CFG_BOOL: return PyBool_FromLong(*(const int *)p);
    case CFG_STR: return PyUnicode_FromString(p);
    case CFG_ENUM: return PyUnicode_FromString(config_fields[i].names[*(const int *)p]);
    case CFG_LIST: break;
    }
    return PyErr_Format(PyExc_SystemError, "config: %s has no value", config_fields[i].name);
}

/* config() -> {name: value} of every row of config_fields. */
static PyObject *model_config(PyObject *self, PyObject *args) {
    (void)args;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < N_CONFIG_FIELDS; i++) {
        PyObject *v = config_value(o, i);
        if (!v || PyDict_SetItemString(d, config_fields[i].name, v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    pyq_leave(&o->busy);
    return d;
}

/* CONFIG_FIELDS: ((name, type), ...) in config_fields' order, the types
 * Python's own (layers: tuple, of LayerAttention on the Python side). */
static int add_config_fields(PyObject *module) {
    PyTypeObject *types[] = {[CFG_INT] = &PyLong_Type,    [CFG_FLOAT] = &PyFloat_Type, [CFG_BOOL] = &PyBool_Type,
                             [CFG_STR] = &PyUnicode_Type, [CFG_ENUM] = &PyUnicode_Type, [CFG_LIST] = &PyTuple_Type};
    PyObject *fields = PyTuple_New(N_CONFIG_FIELDS);
    for (int i = 0; fields && i < N_CONFIG_FIELDS; i++) {
        PyObject *row = Py_BuildValue("(sO)", config_fields[i].name, (PyObject *)types[config_fields[i].kind]);
        if (!row) Py_CLEAR(fields);
        else PyTuple_SET_ITEM(fields, i, row);
    }
    if (!fields) return -1;
    if (PyModule_AddObject(module, "CONFIG_FIELDS", fields) < 0) return Py_DECREF(fields), -1;
    return 0;
}

static PyObject *model_tokenize(PyObject *self, PyObject *args) {
    const char *text;
    Py_ssize_t len;
    int add_special, parse_special;
    if (!PyArg_ParseTuple(args, "y#pp", &text, &len, &add_special, &parse_special)) return NULL;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    int64_t cap = qkv_tokenize_bound((size_t)len), n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return pyq_leave(&o->busy), PyErr_NoMemory();
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_tokenize(o->tok, text, (size_t)len, add_special, parse_special, ids, cap, &n, &err);
    Py_END_ALLOW_THREADS
    pyq_leave(&o->busy);
    PyObject *r = st ? pyq_raise(&err) : PyBytes_FromStringAndSize((const char *)ids, (Py_ssize_t)(n * 4));
    free(ids);
    return r;
}

/* chat_text(user, system or None) -> bytes: the GGUF's chat template around one user turn. */
static PyObject *model_chat_text(PyObject *self, PyObject *args) {
    const char *user, *system = NULL;
    if (!PyArg_ParseTuple(args, "y|z", &user, &system)) return NULL;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    char *out = NULL;
    qkv_error err = {0};
    qkv_status st = qkv_chat_format(&out, qkv_model_gguf(o->m), system, user, &err);
    pyq_leave(&o->busy);
    PyObject *r = st ? pyq_raise(&err) : PyBytes_FromString(out);
    free(out);
    return r;
}

static PyObject *model_detokenize(PyObject *self, PyObject *args) {
    PyObject *ids_obj;
    int skip_special;
    if (!PyArg_ParseTuple(args, "Op", &ids_obj, &skip_special)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(ids_obj, &b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t n = b.len / 4;
    PyBuffer_Release(&b);
    if (pyq_buffer(&b, ids_obj, PYQ_I32, n, 0, "ids") < 0) return NULL;
    model_object *o = model_enter(self);
    if (!o) return PyBuffer_Release(&b), NULL;
    qkv_error err = {0};
    size_t len = 0;
    qkv_status st = qkv_detokenize(o->tok, b.buf, n, skip_special, NULL, 0, &len, &err);
    char *out = NULL;
    if (st == QKV_ERR_FULL) {
        out = malloc(len + 1);
        st = out ? qkv_detokenize(o->tok, b.buf, n, skip_special, out, len + 1, &len, &err) : QKV_ERR_NOMEM;
    }
    pyq_leave(&o->busy);
    PyBuffer_Release(&b);
    PyObject *r;
    if (st == QKV_ERR_NOMEM && !err.msg[0]) r = PyErr_NoMemory();
    else r = st ? pyq_raise(&err) : PyBytes_FromStringAndSize(out ? out : "", (Py_ssize_t)len);
    free(out);
    return r;
}

/* piece(id) -> bytes the token stands for in text (None if out of range). */
static PyObject *model_piece(PyObject *self, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    size_t len = 0;
    const char *p = qkv_token_piece(o->tok, id, &len);
    pyq_leave(&o->busy);
    if (!p) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(p, (Py_ssize_t)len);
}

/* ends_turn(id) -> whether generation stops at id, as qkv run's (qkv_token_ends_turn). */
static PyObject *model_ends_turn(PyObject *self, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    const int ends = qkv_token_ends_turn(o->tok, id);
    pyq_leave(&o->busy);
    return PyBool_FromLong(ends);
}

/* forward(logits, ids, all, hooks=None, zero_heads=None): one call, appending
 * to the cache, with this call's options (hooks.c). */
static PyObject *model_forward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"logits", "ids", "all_logits", "hooks", "zero_heads", NULL};
    PyObject *logits_obj, *ids_obj, *hooks = NULL, *zero_heads = NULL;
    int all;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOp|OO", kwlist, &logits_obj, &ids_obj, &all, &hooks, &zero_heads))
        return NULL;
    model_object *o = (model_object *)self;
    if (!o->m) return PyErr_SetString(PyExc_ValueError, "Model: the model is closed"), NULL;
    Py_buffer bi, bl = {0};
    Py_ssize_t n;
    if (pyq_buffer_n(&bi, ids_obj, PYQ_I32, &n, "ids") < 0) return NULL;
    if (n < 1 || n > INT32_MAX) return PyBuffer_Release(&bi), PyErr_Format(PyExc_ValueError, "forward: %zd tokens", n);
    const int V = qkv_model_get_config(o->m)->n_vocab;
    if (logits_obj != Py_None && pyq_buffer(&bl, logits_obj, PYQ_F32, (all ? n : 1) * (Py_ssize_t)V, 1, "logits") < 0)
        return PyBuffer_Release(&bi), NULL;
    pyq_forward f;
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    if (pyq_forward_init(&f, hooks, zero_heads) == 0 && model_enter(self)) {
        Py_BEGIN_ALLOW_THREADS
        st = qkv_model_forward(o->m, bl.obj ? bl.buf : NULL, bi.buf, (int)n, all, &f.opts, &err);
        Py_END_ALLOW_THREADS
        pyq_leave(&o->busy);
    }
    PyBuffer_Release(&bi);
    if (bl.obj) PyBuffer_Release(&bl);
    return pyq_forward_done(&f, st, &err);
}

static PyObject *model_rewind(PyObject *self, PyObject *args) {
    int pos;
    if (!PyArg_ParseTuple(args, "i", &pos)) return NULL;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    qkv_error err = {0};
    qkv_status st = qkv_model_rewind(o->m, pos, &err);
    pyq_leave(&o->busy);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *model_pos(PyObject *self, PyObject *args) {
    (void)args;
    model_object *o = model_enter(self);
    if (!o) return NULL;
    int pos = qkv_model_pos(o->m);
    pyq_leave(&o->busy);
    return PyLong_FromLong(pos);
}

/* head_result(out, layer, z): out [n, Hq, E] <- each head's z [n, Hq, D] through its slice of Wo. */
static PyObject *model_head_result(PyObject *self, PyObject *args) {
    PyObject *out_obj, *z_obj;
    int layer;
    if (!PyArg_ParseTuple(args, "OiO", &out_obj, &layer, &z_obj)) return NULL;
    model_object *o = (model_object *)self;
    if (!o->m) return PyErr_SetString(PyExc_ValueError, "Model: the model is closed"), NULL;
    const qkv_model_config *c = qkv_model_get_config(o->m);
    const Py_ssize_t HD = (Py_ssize_t)c->n_head * c->head_dim;
    Py_buffer bz, bo;
    Py_ssize_t count;
    if (pyq_buffer_n(&bz, z_obj, PYQ_F32, &count, "z") < 0) return NULL;
    const Py_ssize_t n = count / HD;
    if (n < 1 || n > INT32_MAX || count % HD)
        return PyBuffer_Release(&bz), PyErr_Format(PyExc_ValueError, "head_result: z of %zd floats, not n x %zd", count, HD);
    if (pyq_buffer(&bo, out_obj, PYQ_F32, n * c->n_head * (Py_ssize_t)c->n_embd, 1, "out") < 0)
        return PyBuffer_Release(&bz), NULL;
    qkv_error err = {0};
    qkv_status st = QKV_ERR_INVALID;
    if (model_enter(self)) {
        Py_BEGIN_ALLOW_THREADS
        st = qkv_model_head_result(bo.buf, o->m, layer, bz.buf, (int)n, &err);
        Py_END_ALLOW_THREADS
        pyq_leave(&o->busy);
    }
    PyBuffer_Release(&bz);
    PyBuffer_Release(&bo);
    if (PyErr_Occurred()) return NULL;
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- maps */

typedef struct {
    float *out;       /* [nl, nh, nr, n] */
    const int *slot;  /* [n] index of a query row in the request, -1 if not requested */
    int nh, nr, n;
} maps_sink;

static int maps_row(void *user, int li, int hi, int row, const float *w, int n_keys, const qkv_row_stats *s) {
    maps_sink *m = user;
    (void)s;
    if (row < 0 || row >= m->n || m->slot[row] < 0 || n_keys != m->n) return 0;
    memcpy(m->out + (((size_t)li * m->nh + hi) * m->nr + m->slot[row]) * m->n, w, (size_t)m->n * sizeof(float));
    return 0;
}

static PyObject *model_maps(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"out", "ids", "layers", "heads", "rows", "progress", NULL};
    PyObject *out_obj, *ids_obj, *layers_obj, *heads_obj, *rows_obj, *progress = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|O", kwlist, &out_obj, &ids_obj, &layers_obj, &heads_obj,
                                     &rows_obj, &progress))
        return NULL;
    model_object *o = (model_object *)self;
    if (!o->m) return PyErr_SetString(PyExc_ValueError, "Model: the model is closed"), NULL;
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, qkv_model_get_config(o->m)->n_layer) < 0) return NULL;
    Py_buffer bo = {0}, bi = {0}, bla = {0}, bhe = {0}, bro = {0};
    Py_ssize_t n, nl, nh, nr;
    PyObject *r = NULL;
    int *slot = NULL;
    if (pyq_buffer_n(&bi, ids_obj, PYQ_I32, &n, "ids") < 0) goto done;
    if (pyq_buffer_n(&bla, layers_obj, PYQ_I32, &nl, "layers") < 0) goto done;
    if (pyq_buffer_n(&bhe, heads_obj, PYQ_I32, &nh, "heads") < 0) goto done;
    if (pyq_buffer_n(&bro, rows_obj, PYQ_I32, &nr, "rows") < 0) goto done;
    if (n < 1 || n > INT32_MAX || nl < 1 || nh < 1 || nr < 1) {
        PyErr_SetString(PyExc_ValueError, "attention maps: no token, layer, head or row");
        goto done;
    }
    if (pyq_buffer(&bo, out_obj, PYQ_F32, nl * nh * nr * n, 1, "out") < 0) goto done;
    slot = malloc((size_t)n * sizeof *slot);
    if (!slot) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) slot[i] = -1;
    for (Py_ssize_t i = 0; i < nr; i++) {
        int row = ((const int32_t *)bro.buf)[i];
        if (row < 0 || row >= n || slot[row] >= 0) {
            PyErr_Format(PyExc_ValueError, "attention maps: row %d outside [0, %zd) or requested twice", row, n);
            goto done;
        }
        slot[row] = (int)i;
    }
    if (!model_enter(self)) goto done;
    maps_sink sink = {bo.buf, slot, (int)nh, (int)nr, (int)n};
    memset(bo.buf, 0, (size_t)bo.len);
    qkv_inspect_params ip = {.layers = bla.buf, .n_layers = (int)nl, .heads = bhe.buf, .n_heads = (int)nh,
                             .row = maps_row, .user = &sink};
    qkv_inspect *in = NULL;
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_inspect_init(&in, qkv_model_get_config(o->m), &ip, &err);
    if (st == QKV_OK) st = pyq_pattern_pass(o->m, bi.buf, (int)n, qkv_inspect_hook, in, &pr, &err);
    qkv_inspect_free(in);
    Py_END_ALLOW_THREADS
    pyq_leave(&o->busy);
    if (st) pyq_raise(&err);
    else r = Py_None, Py_INCREF(r);
done:
    if (pyq_progress_done(&pr) < 0) Py_CLEAR(r);
    free(slot);
    Py_buffer *all[] = {&bo, &bi, &bla, &bhe, &bro};
    for (size_t i = 0; i < 5; i++)
        if (all[i]->obj) PyBuffer_Release(all[i]);
    return r;
}

/* --------------------------------------------------------------- sinks */

static PyObject *model_sinks(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"means", "counts", "ids", "n_first", "skip", "every", "progress", NULL};
    PyObject *means_obj, *counts_obj, *ids_obj, *progress = NULL;
    qkv_sinks_params sp = qkv_sinks_params_default();
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOiii|O", kwlist, &means_obj, &counts_obj, &ids_obj, &sp.n_first,
                                     &sp.skip, &sp.every, &progress))
        return NULL;
    model_object *o = (model_object *)self;
    if (!o->m) return PyErr_SetString(PyExc_ValueError, "Model: the model is closed"), NULL;
    const qkv_model_config *cfg = qkv_model_get_config(o->m);
    const Py_ssize_t LH = (Py_ssize_t)cfg->n_layer * cfg->n_head;
    Py_buffer bm, bc, bi;
    Py_ssize_t n;
    if (pyq_buffer_n(&bi, ids_obj, PYQ_I32, &n, "ids") < 0) return NULL;
    if (n < 1 || n > INT32_MAX) return PyBuffer_Release(&bi), PyErr_Format(PyExc_ValueError, "sinks: %zd tokens", n);
    if (pyq_buffer(&bm, means_obj, PYQ_F64, 6 * LH, 1, "means") < 0) return PyBuffer_Release(&bi), NULL;
    if (pyq_buffer(&bc, counts_obj, PYQ_I64, 2 * LH, 1, "counts") < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bm), NULL;
    pyq_progress pr;
    if (pyq_progress_init(&pr, progress, cfg->n_layer) < 0)
        return PyBuffer_Release(&bi), PyBuffer_Release(&bm), PyBuffer_Release(&bc), NULL;
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    if (model_enter(self)) {
        double *means = bm.buf;
        int64_t *counts = bc.buf;
        qkv_sinks *s = NULL;
        Py_BEGIN_ALLOW_THREADS
        st = qkv_sinks_init(&s, cfg, &sp, &err);
        if (st == QKV_OK) st = pyq_pattern_pass(o->m, bi.buf, (int)n, qkv_sinks_hook, s, &pr, &err);
        for (Py_ssize_t i = 0; st == QKV_OK && i < LH; i++) {
            const qkv_sinks_head *h = qkv_sinks_get(s, (int)(i / cfg->n_head), (int)(i % cfg->n_head));
            const double v[6] = {h->sink, h->first, h->top_other, h->top_other_dist, h->sink_top, h->entropy};
            for (int f = 0; f < 6; f++) means[f * LH + i] = v[f];
            counts[i] = h->n_rows;
            counts[LH + i] = h->n_sampled;
        }
        qkv_sinks_free(s);
        Py_END_ALLOW_THREADS
        pyq_leave(&o->busy);
    }
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bm);
    PyBuffer_Release(&bc);
    if (pyq_progress_done(&pr) < 0 || PyErr_Occurred()) return NULL;
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

/* A feature file's method (bindings.h) on the open model, held for the call. */
static PyObject *model_call(PyObject *self, PyObject *args, PyObject *kw, pyq_model_fn *fn) {
    model_object *o = model_enter(self);
    if (!o) return NULL;
    PyObject *r = fn(o->m, o->tok, args, kw);
    pyq_leave(&o->busy);
    return r;
}

/* model_<name>: the method table's entry for pyq_<name> through model_call. */
#define MODEL_CALL(name) \
    static PyObject *model_##name(PyObject *self, PyObject *args, PyObject *kw) { \
        return model_call(self, args, kw, pyq_##name); \
    }
MODEL_CALL(inspect_maps)
MODEL_CALL(ablate_positions)
MODEL_CALL(ablate_heads)
MODEL_CALL(stream_score)
MODEL_CALL(needle_prompt)
MODEL_CALL(needle_run)
MODEL_CALL(patch)
MODEL_CALL(attribute)
MODEL_CALL(lens)

static PyMethodDef model_methods[] = {
    {"close", model_close, METH_NOARGS, "Frees the model (later calls raise ValueError)."},
    {"config", model_config, METH_NOARGS, "The configuration as a dict."},
    {"tokenize", model_tokenize, METH_VARARGS, "tokenize(text_bytes, add_special, parse_special) -> int32 bytes."},
    {"chat_text", model_chat_text, METH_VARARGS, "chat_text(user, system=None) -> bytes."},
    {"detokenize", model_detokenize, METH_VARARGS, "detokenize(ids_int32, skip_special) -> bytes."},
    {"piece", model_piece, METH_VARARGS, "piece(id) -> bytes or None."},
    {"ends_turn", model_ends_turn, METH_VARARGS, "ends_turn(id) -> whether generation stops at id (qkv run's rule)."},
    {"forward", PYQ_KW(model_forward), METH_VARARGS | METH_KEYWORDS,
     "forward(logits or None, ids, all_logits, hooks=None, zero_heads=None): appends to the cache."},
    {"rewind", model_rewind, METH_VARARGS, "rewind(pos)."},
    {"head_result", model_head_result, METH_VARARGS,
     "head_result(out, layer, z): out [n, Hq, E] <- each head of z [n, Hq, D] through its slice of Wo."},
    {"pos", model_pos, METH_NOARGS, "Positions in the KV cache."},
    {"maps", PYQ_KW(model_maps), METH_VARARGS | METH_KEYWORDS, "maps(out, ids, layers, heads, rows, progress=None): exact attention weights."},
    {"sinks", PYQ_KW(model_sinks), METH_VARARGS | METH_KEYWORDS, "sinks(means, counts, ids, n_first, skip, every, progress=None)."},
    {"ablate_positions", PYQ_KW(model_ablate_positions), METH_VARARGS | METH_KEYWORDS,
     "ablate_positions(values, top, ids, scope, layer, head, target, progress=None)."},
    {"ablate_heads", PYQ_KW(model_ablate_heads), METH_VARARGS | METH_KEYWORDS, "ablate_heads(values, top, ids, target, progress=None)."},
    {"stream_score", PYQ_KW(model_stream_score), METH_VARARGS | METH_KEYWORDS,
     "stream_score(nll, ids, policy, cache, window, sinks, chunk, progress=None) -> max_rows."},
    {"needle_prompt", PYQ_KW(model_needle_prompt), METH_VARARGS | METH_KEYWORDS,
     "needle_prompt(hay, needle, question, system, max_answer, length, depth, plain) -> (ids, needle_pos, needle_len, "
     "hay_tokens)."},
    {"needle_run", PYQ_KW(model_needle_run), METH_VARARGS | METH_KEYWORDS, "needle_run(answer, mass, step, retrieval, ids, needle_pos, needle_len) -> n."},
    {"patch", PYQ_KW(model_patch), METH_VARARGS | METH_KEYWORDS,
     "patch(outs, clean, corrupt, metric, answer, wrong, max_bytes, progress=None): outs one array or None per "
     "sweep."},
    {"attribute", PYQ_KW(model_attribute), METH_VARARGS | METH_KEYWORDS, "attribute(heads, attn, mlp, ids, answer, wrong)."},
    {"lens", PYQ_KW(model_lens), METH_VARARGS | METH_KEYWORDS, "lens(top_ids, top_probs, target_prob, ids, k, target)."},
    {"inspect_maps", PYQ_KW(model_inspect_maps), METH_VARARGS | METH_KEYWORDS,
     "inspect_maps(path, ids, layers, heads, title, subtitle, progress=None) -> the PNG figure (a capsule)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject model_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qkv._qkv.Model",
    .tp_basicsize = sizeof(model_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Model(source, n_ctx=0, kv_dtype='f32', threads=0): a sequence over a GGUF's weights (source: a "
              "path, or a Weights shared with other Models) and its tokenizer.",
    .tp_new = PyType_GenericNew,
    .tp_init = model_init,
    .tp_dealloc = model_dealloc,
    .tp_methods = model_methods,
};

int pyq_add_model(PyObject *module) {
    if (PyType_Ready(&model_type) < 0 || add_config_fields(module) < 0) return -1;
    Py_INCREF(&model_type);
    return PyModule_AddObject(module, "Model", (PyObject *)&model_type);
}
