/*
 * qkv_py.h — what the binding files of qkv._qkv share: the library's error
 * as a Python exception, buffer arguments checked for element type and
 * count, and the "one call at a time" guard of the objects with scratch.
 *
 * The bindings are thin on purpose: the modules of python/qkv turn user arguments
 * into C-contiguous arrays and allocates the outputs; a binding checks every
 * buffer it is given against the shape it is told (so a wrong call from
 * Python raises, never overruns), releases the GIL and calls libqkv.
 */
#ifndef QKV_PY_H
#define QKV_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "qkv.h"

/* Element kinds a buffer may hold, by the struct-module format character. */
typedef enum { PYQ_F32 = 0, PYQ_F16 = 1, PYQ_U16 = 2, PYQ_I32 = 3, PYQ_I64 = 4, PYQ_F64 = 5 } pyq_elem;

/* Raises the exception for e->status (QKV_ERR_IO: OSError, QKV_ERR_NOMEM:
 * MemoryError, QKV_ERR_CANCELLED: RuntimeError, anything else: ValueError)
 * with e->msg; returns NULL. */
PyObject *pyq_raise(const qkv_error *e);

/* Gets a C-contiguous buffer of exactly count elements of kind elem from obj
 * (writable if asked); on failure raises TypeError / ValueError naming `what`
 * and returns -1 (nothing to release). Release with PyBuffer_Release. */
int pyq_buffer(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t count, int writable, const char *what);

/* pyq_buffer (read-only) of however many elements obj holds: their count in *n. */
int pyq_buffer_n(Py_buffer *b, PyObject *obj, pyq_elem elem, Py_ssize_t *n, const char *what);

/* The kv element type of a K/V buffer kind (f32, f16, or u16 as bf16). */
qkv_dtype pyq_kv_dtype(pyq_elem e);

/* "f32" | "bf16" | "f16" and the kernel names of qkv_kernel_parse; 0, or -1
 * with ValueError naming what is accepted. */
int pyq_parse_dtype(qkv_dtype *out, const char *name);
int pyq_parse_kernel(qkv_kernel *out, const char *name);

/* Guards an object that serves one call at a time while the GIL is released:
 * 0 and *busy = 1, or -1 with RuntimeError if another thread is inside. */
int pyq_enter(int *busy, const char *what);
static inline void pyq_leave(int *busy) { *busy = 0; }

/* A mask from the bindings' keyword arguments; exclude (int32 buffer or
 * None) is held in *ex until PyBuffer_Release (ex->obj NULL if none). */
int pyq_mask(qkv_mask *m, Py_buffer *ex, int kind, int window, int sinks, PyObject *exclude);

/* A Python exception taken out of the error indicator while C code that
 * cannot pass it on runs (a hook, a progress callback), and put back when
 * that code has returned (hooks.c). save and restore need the GIL. */
typedef struct {
    PyObject *type, *value, *tb; /* 3.12+: value only */
} pyq_exc;
void pyq_exc_save(pyq_exc *e);    /* e <- the error indicator, which is cleared */
void pyq_exc_restore(pyq_exc *e); /* the error indicator <- e, which is emptied */
void pyq_exc_clear(pyq_exc *e);   /* drops e's exception */

/* One forward call's options from Python (hooks.c): hooks [(name, fn)] as
 * qkv_hooks calling fn with the GIL, zero_heads an int32 [k, 2] buffer of
 * (layer, head); either may be NULL or None. Build with the GIL held (-1 with
 * a Python exception, nothing to free), pass &f->opts to qkv_model_forward,
 * then pyq_forward_done: it frees f and returns None, or NULL with the
 * exception a hook raised (re-raised as it was), else the forward's error. */
struct pyq_hook;
typedef struct {
    qkv_forward_opts opts;
    qkv_hook *hooks;         /* [opts.n_hooks] */
    struct pyq_hook *calls;  /* [opts.n_hooks] each hook's function */
    qkv_head_ref *zero;      /* [opts.n_zero_heads] */
    pyq_exc raised;          /* the first exception a hook raised */
} pyq_forward;
int pyq_forward_init(pyq_forward *f, PyObject *hooks, PyObject *zero_heads);
void pyq_forward_free(pyq_forward *f);
PyObject *pyq_forward_done(pyq_forward *f, qkv_status st, const qkv_error *err);

/* A long call's progress= (progress.c): fn(done, total) called with the GIL
 * taken back (PyGILState_Ensure) on the thread that runs the probe, which
 * holds a thread state: the probes report on their calling thread, and
 * llama.c calls hooks there too. fn's return value is ignored; an exception
 * it raises (KeyboardInterrupt included: pending signals are checked after
 * each call) is kept and cancels the probe. Init with the GIL (-1 with
 * TypeError if fn is neither None nor callable), run the probe with
 * progress_fn (NULL when fn is None) and &p as its user, then
 * pyq_progress_done: -1 with the kept exception restored as it was raised,
 * or 0 (nothing raised); it drops fn either way. */
typedef struct {
    PyObject *fn;   /* a strong reference, or NULL: nothing reported */
    int n_layer;    /* the layer hook's total */
    pyq_exc raised; /* the first exception fn raised */
} pyq_progress;
int pyq_progress_init(pyq_progress *p, PyObject *fn, int n_layer);
int pyq_progress_done(pyq_progress *p);
/* The qkv_progress_fn of qkv_ablate_params / qkv_stream_params: fn(done,
 * total); nonzero once fn has raised. NULL when p has no fn. */
qkv_progress_fn pyq_progress_fn(const pyq_progress *p);
/* The per-layer report of one long forward call: a hook for
 * QKV_HOOK_RESID_POST, layer QKV_ALL, user a pyq_progress: fn(layer + 1,
 * n_layer); QKV_ERR_CANCELLED once fn has raised. */
qkv_status pyq_progress_layer(void *user, const qkv_activation *a, qkv_error *err);

/* One pass of ids from an empty cache with fn on hook_pattern of every layer
 * (the probes' hook: qkv_inspect_hook, qkv_sinks_hook) and pr's per-layer
 * report (pr NULL or without fn: none); the cache is empty again on return.
 * Runs without the GIL (model.c). */
qkv_status pyq_pattern_pass(qkv_model *m, const int32_t *ids, int n, qkv_hook_fn fn, void *user, pyq_progress *pr,
                            qkv_error *err);

/* Per-file registration, called by the module's init. */
extern PyMethodDef pyq_attention_methods[];
extern PyMethodDef pyq_hook_methods[];
extern PyMethodDef pyq_stream_methods[];
int pyq_add_kv_cache(PyObject *module);
int pyq_add_model(PyObject *module);
int pyq_add_sampler(PyObject *module);

/* Model.inspect_maps(path, ids, layers, heads, title, subtitle) on an open
 * model the caller holds, and the module's png_save, png_has_font and
 * file_replace (inspect.c). */
PyObject *pyq_inspect_maps(qkv_model *m, const qkv_tokenizer *tok, PyObject *args);
extern PyMethodDef pyq_inspect_methods[];

/* Model.ablate_positions / ablate_heads (ablate.c), on an open model the caller holds. */
PyObject *pyq_ablate_positions(qkv_model *m, PyObject *args);
PyObject *pyq_ablate_heads(qkv_model *m, PyObject *args);

/* Model.stream_score (stream.c) and needle_prompt / needle_run (needle.c),
 * on an open model the caller holds; the module's stream_steps (stream.c). */
PyObject *pyq_stream_score(qkv_model *m, PyObject *args);
PyObject *pyq_needle_prompt(qkv_model *m, const qkv_tokenizer *tok, PyObject *args);
PyObject *pyq_needle_run(qkv_model *m, const qkv_tokenizer *tok, PyObject *args);

/* Model.patch / attribute / lens (patch.c), on an open model the caller
 * holds; the module's spearman, token_labels and heatmap_page. */
PyObject *pyq_patch(qkv_model *m, PyObject *args);
PyObject *pyq_attribute(qkv_model *m, PyObject *args);
PyObject *pyq_lens(qkv_model *m, PyObject *args);
extern PyMethodDef pyq_patch_methods[];

/* PyCFunction from a METH_VARARGS | METH_KEYWORDS function, without a cast
 * between incompatible function types (-Wcast-function-type). */
#define PYQ_KW(fn) ((PyCFunction)(void (*)(void))(fn))

#endif
