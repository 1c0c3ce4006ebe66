/*
 * progress.h — progress= of Model's long calls, and the probes' one pattern
 * pass that reports through it (progress.c). Above util.h, below every file
 * that runs a probe.
 */
#ifndef QKV_PY_PROGRESS_H
#define QKV_PY_PROGRESS_H

#include "util.h"

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
 * Runs without the GIL. */
qkv_status pyq_pattern_pass(qkv_model *m, const int32_t *ids, int n, qkv_hook_fn fn, void *user, pyq_progress *pr,
                            qkv_error *err);

#endif
