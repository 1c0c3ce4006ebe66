/*
 * bindings.h — what each feature file of qkv._qkv gives the files above it
 * (model.c, module.c): the method tables the module's init adds, the types it
 * registers, and the Model methods that model.c runs on its open model. A
 * feature file includes this header for its own declarations and calls only
 * util.h and progress.h below it; none calls another feature file or model.c.
 *
 *   util.c  <-  progress.c  <-  attention.c hooks.c inspect.c kv_cache.c ablate.c
 *                               needle.c patch.c sampler.c stream.c weights.c  <-  model.c  <-  module.c
 */
#ifndef QKV_PY_BINDINGS_H
#define QKV_PY_BINDINGS_H

#include "progress.h"

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

/* Per-file registration, called by the module's init. */
extern PyMethodDef pyq_attention_methods[];
extern PyMethodDef pyq_hook_methods[];
extern PyMethodDef pyq_inspect_methods[]; /* png_save, png_has_font, file_replace (inspect.c) */
extern PyMethodDef pyq_stream_methods[];  /* stream_steps (stream.c) */
extern PyMethodDef pyq_patch_methods[];   /* sweeps, spearman, token_labels, heatmap_page (patch.c) */
int pyq_add_kv_cache(PyObject *module);
int pyq_add_sampler(PyObject *module);
int pyq_add_weights(PyObject *module);

/* qkv._qkv.Weights (weights.c): pyq_is_weights 1 if obj is one;
 * pyq_weights_of its open weights, or NULL with TypeError (not a Weights)
 * or ValueError (closed). */
int pyq_is_weights(PyObject *obj);
qkv_weights *pyq_weights_of(PyObject *obj);

/* A Model method that runs on the open model m and its tokenizer tok, which
 * the caller (model.c) holds for the call, with the arguments Python gave it
 * (keywords, each method's docstring in model.c names them). */
typedef PyObject *pyq_model_fn(qkv_model *m, const qkv_tokenizer *tok, PyObject *args, PyObject *kw);
pyq_model_fn pyq_inspect_maps;                       /* inspect.c */
pyq_model_fn pyq_ablate_positions, pyq_ablate_heads; /* ablate.c */
pyq_model_fn pyq_stream_score;                       /* stream.c */
pyq_model_fn pyq_needle_prompt, pyq_needle_run;      /* needle.c */
pyq_model_fn pyq_patch, pyq_attribute, pyq_lens;     /* patch.c */

#endif
