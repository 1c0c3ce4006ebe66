/*
 * progress.c — progress= of Model's long calls: the trampoline from libqkv's
 * progress reports (qkv_progress_fn of the ablate and stream probes, a hook on
 * hook_resid_post for one long forward call) to a Python function
 * fn(done, total). It runs fn with the GIL taken back, keeps the first
 * exception fn raises and asks the probe to stop; the binding puts that
 * exception back once the probe has returned (QKV_ERR_CANCELLED, the KV cache
 * empty); and the probes' pattern pass that reports per layer through it.
 * It draws nothing: bars and lines are python/qkv/_progress.py's.
 */
#include "progress.h"

int pyq_progress_init(pyq_progress *p, PyObject *fn, int n_layer) {
    *p = (pyq_progress){.n_layer = n_layer};
    if (!fn || fn == Py_None) return 0;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "progress: expected a function fn(done, total), got %s",
                            Py_TYPE(fn)->tp_name), -1;
    Py_INCREF(fn);
    p->fn = fn;
    return 0;
}

int pyq_progress_done(pyq_progress *p) {
    const int raised = p->raised.type || p->raised.value;
    if (raised) {
        PyErr_Clear(); /* the callback's own exception explains the stop better than any other */
        pyq_exc_restore(&p->raised);
    }
    Py_CLEAR(p->fn);
    return raised ? -1 : 0;
}

/* fn(done, total) with the GIL; 0, or 1 once fn (or a pending signal) raised. */
static int report(pyq_progress *p, int64_t done, int64_t total) {
    if (p->raised.type || p->raised.value) return 1; /* stopped already */
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(p->fn, "LL", (long long)done, (long long)total);
    /* Ctrl-C while the probe ran: a function written in C (print) runs no
     * signal handler itself */
    const int failed = !r || PyErr_CheckSignals() < 0;
    Py_XDECREF(r);
    if (failed) pyq_exc_save(&p->raised);
    PyGILState_Release(g);
    return failed;
}

static int progress_report(void *user, int64_t done, int64_t total) { return report(user, done, total); }

qkv_progress_fn pyq_progress_fn(const pyq_progress *p) { return p->fn ? progress_report : NULL; }

qkv_status pyq_progress_layer(void *user, const qkv_activation *a, qkv_error *err) {
    pyq_progress *p = user;
    if (!report(p, a->layer + 1, p->n_layer)) return QKV_OK;
    err->status = QKV_ERR_CANCELLED;
    snprintf(err->msg, sizeof err->msg, "cancelled by the progress callback after layer %d of %d", a->layer + 1,
             p->n_layer);
    return QKV_ERR_CANCELLED;
}

qkv_status pyq_pattern_pass(qkv_model *m, const int32_t *ids, int n, qkv_hook_fn fn, void *user, pyq_progress *pr,
                            qkv_error *err) {
    const qkv_hook hooks[2] = {{.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = fn, .user = user},
                               {.point = QKV_HOOK_RESID_POST, .layer = QKV_ALL, .fn = pyq_progress_layer, .user = pr}};
    const qkv_forward_opts o = {.hooks = hooks, .n_hooks = pr && pr->fn ? 2 : 1};
    qkv_status st = qkv_model_rewind(m, 0, err);
    if (st == QKV_OK) st = qkv_model_forward(m, NULL, ids, n, 0, &o, err);
    qkv_model_rewind(m, 0, NULL);
    return st;
}
