/*
 * rsp._fast's internals shared by its two files: _fast.c (the module, the
 * step calls and the general addressing read) and _fast_steady.c (the
 * steady step). Each function is described at its definition.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_PY_FAST_H
#define RSP_PY_FAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "rsp/rsp.h"

/* _fast.c */
int fast__as_ptr(PyObject *o, void **out);
PyObject *fast__outcome(const rsp_admit_outcome *o);
PyObject *fast__run_next(void *pool, PyObject *cur_spec, PyObject *prev_spec, const rsp_event *ev,
                         rsp_step_outcome *out);
int fast__get_out(PyObject *o, size_t need, Py_buffer *view);
int fast__read_copy(void *pool, unsigned long lid, int live, unsigned long long sid,
                    rsp_addressing *a, char **copy, rsp_status *st, rsp_error *err);
int fast__wait_ready(void *pool, const rsp_addressing *a);

/* _fast_steady.c: the module's bind, next and read */
PyObject *fast__bind(PyObject *self, PyObject *args);
PyObject *fast__next(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fast__read(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
