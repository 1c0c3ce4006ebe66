/*
 * attention.c — qkv._qkv's functions on plain arrays: attention (any kernel,
 * a batch of independent problems through one plan), the reference kernel
 * with its weights, RoPE, and the f32 -> bf16/f16 rounding a KV cache
 * applies. Shapes as in qkv/attn.h, with an outer batch B:
 *   o: [B, Hq, Lq, D] f32   lse: [B, Hq, Lq] f32 or None   q: [B, Hq, Lq, D] f32
 *   k, v: [B, Hkv, Lk, D] of kv_dtype (f32, f16, or bf16 as uint16)
 * Each call releases the GIL from the first kernel call to the last.
 */
#include "bindings.h"

#include <string.h>

/* n = a * b * c * d, 0 if it overflows. */
static Py_ssize_t count4(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d) {
    Py_ssize_t r;
    if (a < 0 || b < 0 || c < 0 || d < 0 || __builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r) ||
        __builtin_mul_overflow(r, d, &r))
        return 0;
    return r;
}

static pyq_elem kv_elem(qkv_dtype t) { return t == QKV_DTYPE_F16 ? PYQ_F16 : t == QKV_DTYPE_BF16 ? PYQ_U16 : PYQ_F32; }

/* The arguments both attention entry points take. */
typedef struct {
    PyObject *o, *lse, *weights, *q, *k, *v, *exclude;
    int batch, mask_kind, window, sinks, threads;
    const char *kv_dtype, *kernel;
    qkv_attn_desc d;
    qkv_kernel kern;
    Py_buffer bo, blse, bw, bq, bk, bv, bex;
} attn_call;

static void attn_call_release(attn_call *c) {
    Py_buffer *all[] = {&c->bo, &c->blse, &c->bw, &c->bq, &c->bk, &c->bv, &c->bex};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->obj) PyBuffer_Release(all[i]);
}

/* Checks the descriptor with the library, then every buffer against it. */
static int attn_call_prepare(attn_call *c, int with_weights) {
    qkv_error err = {0};
    qkv_dtype t;
    if (pyq_parse_dtype(&t, c->kv_dtype) < 0 || pyq_parse_kernel(&c->kern, c->kernel) < 0) return -1;
    if (pyq_mask(&c->d.mask, &c->bex, c->mask_kind, c->window, c->sinks, c->exclude) < 0) return -1;
    c->d.kv_dtype = t;
    c->d.n_threads = c->threads;
    if (c->batch < 1) return PyErr_SetString(PyExc_ValueError, "batch must be >= 1"), -1;
    if (qkv_attn_check(&c->d, &err)) return pyq_raise(&err), -1;
    const qkv_attn_desc *d = &c->d;
    Py_ssize_t nq = count4(c->batch, d->n_q_head, d->q_len, d->head_dim);
    Py_ssize_t nkv = count4(c->batch, d->n_kv_head, d->kv_len, d->head_dim);
    Py_ssize_t nl = count4(c->batch, d->n_q_head, d->q_len, 1);
    Py_ssize_t nw = count4(c->batch, d->n_q_head, d->q_len, d->kv_len);
    if (!nq || !nkv || !nw) return PyErr_SetString(PyExc_ValueError, "attention: shape too large"), -1;
    if (pyq_buffer(&c->bo, c->o, PYQ_F32, nq, 1, "o") < 0 || pyq_buffer(&c->bq, c->q, PYQ_F32, nq, 0, "q") < 0 ||
        pyq_buffer(&c->bk, c->k, kv_elem(t), nkv, 0, "k") < 0 ||
        pyq_buffer(&c->bv, c->v, kv_elem(t), nkv, 0, "v") < 0)
        return -1;
    if (c->lse != Py_None && pyq_buffer(&c->blse, c->lse, PYQ_F32, nl, 1, "lse") < 0) return -1;
    if (with_weights && c->weights != Py_None && pyq_buffer(&c->bw, c->weights, PYQ_F32, nw, 1, "weights") < 0)
        return -1;
    return 0;
}

static char *attn_kwlist[] = {"o", "lse", "q", "k", "v", "batch", "n_q_head", "n_kv_head", "q_len", "kv_len",
                              "head_dim", "scale", "mask", "window", "sinks", "exclude", "kv_dtype", "kernel",
                              "threads", "weights", "softcap", NULL};

static int attn_call_parse(attn_call *c, PyObject *args, PyObject *kw) {
    memset(c, 0, sizeof *c);
    c->weights = Py_None;
    c->kv_dtype = "f32";
    c->kernel = "auto";
    return PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|$iiiiiifiiiOssiOf", attn_kwlist, &c->o, &c->lse, &c->q,
                                       &c->k, &c->v, &c->batch, &c->d.n_q_head, &c->d.n_kv_head, &c->d.q_len,
                                       &c->d.kv_len, &c->d.head_dim, &c->d.scale, &c->mask_kind, &c->window,
                                       &c->sinks, &c->exclude, &c->kv_dtype, &c->kernel, &c->threads, &c->weights,
                                       &c->d.softcap)
               ? 0
               : -1;
}

static PyObject *py_attention(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    attn_call c;
    if (attn_call_parse(&c, args, kw) < 0) return NULL;
    if (attn_call_prepare(&c, 0) < 0) return attn_call_release(&c), NULL;
    const qkv_attn_desc *d = &c.d;
    size_t q_step = (size_t)d->n_q_head * d->q_len * d->head_dim, l_step = (size_t)d->n_q_head * d->q_len;
    size_t kv_step = (size_t)d->n_kv_head * d->kv_len * d->head_dim * qkv_dtype_size(d->kv_dtype);
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    qkv_attn_plan *plan = NULL;
    st = qkv_attn_plan_init(&plan, d, c.kern, c.threads, &err);
    for (int b = 0; b < c.batch && st == QKV_OK; b++)
        st = qkv_attn_run(plan, (float *)c.bo.buf + b * q_step, c.blse.obj ? (float *)c.blse.buf + b * l_step : NULL,
                          (const float *)c.bq.buf + b * q_step, (const char *)c.bk.buf + b * kv_step,
                          (const char *)c.bv.buf + b * kv_step, d, &err);
    qkv_attn_plan_free(plan);
    Py_END_ALLOW_THREADS
    attn_call_release(&c);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *py_attention_reference(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    attn_call c;
    if (attn_call_parse(&c, args, kw) < 0) return NULL;
    if (attn_call_prepare(&c, 1) < 0) return attn_call_release(&c), NULL;
    const qkv_attn_desc *d = &c.d;
    size_t q_step = (size_t)d->n_q_head * d->q_len * d->head_dim, l_step = (size_t)d->n_q_head * d->q_len;
    size_t w_step = l_step * d->kv_len;
    size_t kv_step = (size_t)d->n_kv_head * d->kv_len * d->head_dim * qkv_dtype_size(d->kv_dtype);
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    Py_BEGIN_ALLOW_THREADS
    for (int b = 0; b < c.batch && st == QKV_OK; b++)
        st = qkv_attn_reference((float *)c.bo.buf + b * q_step,
                                     c.blse.obj ? (float *)c.blse.buf + b * l_step : NULL,
                                     c.bw.obj ? (float *)c.bw.buf + b * w_step : NULL,
                                     (const float *)c.bq.buf + b * q_step, (const char *)c.bk.buf + b * kv_step,
                                     (const char *)c.bv.buf + b * kv_step, d, &err);
    Py_END_ALLOW_THREADS
    attn_call_release(&c);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

/* rope(x, pos, n_head, n_tok, head_dim, *, pairing, theta, scaling, factor, low, high, orig):
 *   x: [n_head, n_tok, D] f32, rotated in place;  pos: [n_tok] int64; the rest by keyword, qkv_rope's fields */
static PyObject *py_rope(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"x", "pos", "n_head", "n_tok", "head_dim", "pairing", "theta", "scaling", "factor",
                             "low", "high", "orig", NULL};
    PyObject *xo, *po;
    int n_head, n_tok, head_dim, pairing, scaling, orig;
    float theta, factor, low, high;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOiiiififffi", kwlist, &xo, &po, &n_head, &n_tok, &head_dim,
                                     &pairing, &theta, &scaling, &factor, &low, &high, &orig))
        return NULL;
    qkv_rope r = qkv_rope_default();
    r.pairing = pairing ? QKV_ROPE_INTERLEAVED : QKV_ROPE_HALF;
    r.theta = theta;
    r.scaling = scaling ? QKV_ROPE_SCALING_LLAMA3 : QKV_ROPE_SCALING_NONE;
    r.factor = factor;
    r.low_freq_factor = low;
    r.high_freq_factor = high;
    r.original_max_position = orig;
    Py_buffer bx, bp;
    Py_ssize_t nx = count4(n_head, n_tok, head_dim, 1);
    if (!nx && n_head > 0 && n_tok > 0 && head_dim > 0) return PyErr_Format(PyExc_ValueError, "rope: shape too large");
    if (pyq_buffer(&bx, xo, PYQ_F32, nx, 1, "x") < 0) return NULL;
    if (pyq_buffer(&bp, po, PYQ_I64, n_tok > 0 ? n_tok : 0, 0, "positions") < 0) return PyBuffer_Release(&bx), NULL;
    qkv_error err = {0};
    qkv_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qkv_rope_apply(bx.buf, bp.buf, &r, n_head, n_tok, head_dim, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bp);
    if (st) return pyq_raise(&err);
    Py_RETURN_NONE;
}

/* round_kv(dst, src, dtype): dst [n] uint16 <- src [n] f32 as bf16 or f16 (round to nearest even). */
static PyObject *py_round_kv(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dst, *src;
    const char *name;
    if (!PyArg_ParseTuple(args, "OOs", &dst, &src, &name)) return NULL;
    qkv_dtype t;
    if (pyq_parse_dtype(&t, name) < 0) return NULL;
    if (t == QKV_DTYPE_F32) return PyErr_Format(PyExc_ValueError, "round_kv: dtype must be bf16 or f16");
    Py_buffer bs, bd;
    if (PyObject_GetBuffer(src, &bs, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t n = bs.len / 4;
    PyBuffer_Release(&bs);
    if (pyq_buffer(&bs, src, PYQ_F32, n, 0, "src") < 0) return NULL;
    if (pyq_buffer(&bd, dst, PYQ_U16, n, 1, "dst") < 0) return PyBuffer_Release(&bs), NULL;
    Py_BEGIN_ALLOW_THREADS
    qkv_convert_from_f32(bd.buf, t, bs.buf, (size_t)n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bd);
    Py_RETURN_NONE;
}

PyMethodDef pyq_attention_methods[] = {
    {"attention", PYQ_KW(py_attention), METH_VARARGS | METH_KEYWORDS,
     "attention(o, lse, q, k, v, *, batch, n_q_head, ..., softcap=0): o, lse <- attention of a batch (qkv_attn_run)."},
    {"attention_reference", PYQ_KW(py_attention_reference), METH_VARARGS | METH_KEYWORDS,
     "attention_reference(o, lse, q, k, v, *, ..., weights=None): the reference kernel and its weights."},
    {"rope", PYQ_KW(py_rope), METH_VARARGS | METH_KEYWORDS,
     "rope(x, pos, n_head, n_tok, head_dim, *, pairing, theta, scaling, factor, low, high, orig): rotates x in place."},
    {"round_kv", py_round_kv, METH_VARARGS, "round_kv(dst_u16, src_f32, 'bf16'|'f16')."},
    {NULL, NULL, 0, NULL},
};
