/*
 * model.h — qkv._qkv.Model's registration (model.c), called by the module's
 * init. model.c sits above every feature file (bindings.h) and below module.c.
 */
#ifndef QKV_PY_MODEL_H
#define QKV_PY_MODEL_H

#include "util.h"

int pyq_add_model(PyObject *module);

#endif
