/*
 * rsp._fast: the Python package's steady step in compiled code.
 *
 * The calls that the package otherwise makes through ctypes a piece at a
 * time: step (rsp_step_admit, _plan or _commit) and step_next
 * (rsp_step_next), the GIL released for the round trip, and addressing
 * (the read section, the plan, its addressing and the host copies, then
 * the ready wait with the GIL released). Everything else stays in
 * pool.py, which falls back to ctypes when this module is not built or
 * RSP_PY_FAST=0.
 *
 * The steady step (next and read, in _fast_steady.c) goes further: it
 * takes the package's own objects (the pool, its Step, the label's name)
 * and does in C what pool.py's step_next and addressing(persistent=True)
 * do in Python for a step of rows and flags only whose rows equal the
 * last step's, answering the package's AdmitOutcome and
 * RecurrentAddressing. After the engine's forward has left the caches
 * cold, each Python line of that path costs a few cache misses; one C
 * call touches far fewer lines. Anything else answers NotImplemented and
 * pool.py takes its general path, which also raises every error.
 *
 * librsp's functions are not linked: pool.py passes the addresses of the
 * library ctypes loaded (init), so both paths call the very same librsp
 * (a second copy would have its own reader registrations and pools).
 * Only rsp.h's types are used here.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "rsp/rsp.h"

#include "_fast.h"

typedef rsp_status (*step_next_fn)(rsp_pool *, const rsp_step *, const rsp_step *,
                                   const rsp_event *, rsp_step_outcome *, rsp_error *);
typedef rsp_status (*read_begin_fn)(void);
typedef rsp_status (*read_explain_fn)(rsp_status, rsp_error *);
typedef rsp_status (*read_end_fn)(void);
typedef const rsp_plan *(*plan_live_fn)(const rsp_pool *);
typedef const rsp_plan *(*plan_of_step_fn)(const rsp_pool *, uint64_t);
typedef rsp_status (*plan_addressing_fn)(const rsp_plan *, rsp_label_id, rsp_addressing *,
                                         rsp_error *);
typedef rsp_status (*event_wait_fn)(const rsp_pool *, const rsp_event *, uint64_t, rsp_error *);
typedef rsp_status (*step_admit_fn)(rsp_pool *, const rsp_step *, rsp_admit_outcome *, rsp_error *);
typedef rsp_status (*step_plan_fn)(rsp_pool *, const rsp_step *, rsp_error *);
typedef rsp_status (*step_commit_fn)(rsp_pool *, const rsp_step *, const rsp_event *, rsp_error *);

static struct {
    PyObject *error_cls; /* pool.RspError */
    step_next_fn step_next;
    read_begin_fn read_begin;
    read_explain_fn read_explain;
    read_end_fn read_end;
    plan_live_fn plan_live;
    plan_of_step_fn plan_of_step;
    plan_addressing_fn plan_addressing;
    event_wait_fn event_wait;
    step_admit_fn step_admit;
    step_plan_fn step_plan;
    step_commit_fn step_commit;
} lib;

#define FAST_FUNCTIONS 11

/* RspError(status, message) raised, as pool._check does: the message is
 * rsp_error's NUL-terminated text, decoded with errors="replace". */
static PyObject *raise_rsp(rsp_status st, const char *message)
{
    PyObject *msg =
        PyUnicode_DecodeUTF8(message, (Py_ssize_t)strnlen(message, RSP_ERROR_MAX), "replace");
    if (msg == NULL)
        return NULL;
    PyObject *e = PyObject_CallFunction(lib.error_cls, "iO", (int)st, msg);
    Py_DECREF(msg);
    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

int fast__as_ptr(PyObject *o, void **out)
{
    *out = PyLong_AsVoidPtr(o);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* init(RspError, (step_next, read_begin, read_explain, read_end,
 * plan_live, plan_of_step, plan_addressing, event_wait, step_admit,
 * step_plan, step_commit)): the addresses of librsp's functions, as ctypes
 * loaded them. */
static PyObject *fast_init(PyObject *self, PyObject *args)
{
    PyObject *cls, *fns;
    void *p[FAST_FUNCTIONS];
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!", &cls, &PyTuple_Type, &fns))
        return NULL;
    if (PyTuple_GET_SIZE(fns) != FAST_FUNCTIONS) {
        PyErr_Format(PyExc_ValueError, "init: %d function addresses", FAST_FUNCTIONS);
        return NULL;
    }
    for (int i = 0; i < FAST_FUNCTIONS; i++)
        if (fast__as_ptr(PyTuple_GET_ITEM(fns, i), &p[i]) < 0)
            return NULL;
    Py_INCREF(cls);
    Py_XDECREF(lib.error_cls);
    lib.error_cls = cls;
    lib.step_next = (step_next_fn)p[0];
    lib.read_begin = (read_begin_fn)p[1];
    lib.read_explain = (read_explain_fn)p[2];
    lib.read_end = (read_end_fn)p[3];
    lib.plan_live = (plan_live_fn)p[4];
    lib.plan_of_step = (plan_of_step_fn)p[5];
    lib.plan_addressing = (plan_addressing_fn)p[6];
    lib.event_wait = (event_wait_fn)p[7];
    lib.step_admit = (step_admit_fn)p[8];
    lib.step_plan = (step_plan_fn)p[9];
    lib.step_commit = (step_commit_fn)p[10];
    Py_RETURN_NONE;
}

/*
 * A step as pool.py hands it over: None (no step), an int (the address of
 * a ctypes rsp_step that pool.py keeps alive: a step with forks, a lease,
 * checkpoints or restores) or (step_id, rows, num_rows, capture, preplan)
 * with rows a buffer of num_rows packed rsp_row (held by `view` until
 * release_step). *out points at the step, or is NULL for None.
 */
static int get_step(PyObject *spec, rsp_step *tmp, Py_buffer *view, const rsp_step **out)
{
    view->obj = NULL;
    *out = NULL;
    if (spec == Py_None)
        return 0;
    if (PyLong_Check(spec)) {
        void *p;
        if (fast__as_ptr(spec, &p) < 0)
            return -1;
        *out = p;
        return 0;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5) {
        PyErr_SetString(PyExc_TypeError, "step: an address or a 5-tuple");
        return -1;
    }
    memset(tmp, 0, sizeof *tmp);
    tmp->step_id = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(spec, 0));
    unsigned long n = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(spec, 2));
    if (PyErr_Occurred())
        return -1;
    if (n != 0) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 1), view, PyBUF_SIMPLE) < 0)
            return -1;
        if ((size_t)view->len != n * sizeof(rsp_row)) {
            PyBuffer_Release(view);
            view->obj = NULL;
            PyErr_SetString(PyExc_ValueError, "step: rows buffer of the wrong size");
            return -1;
        }
        tmp->rows = view->buf;
        tmp->num_rows = (uint32_t)n;
    }
    tmp->capture = PyTuple_GET_ITEM(spec, 3) == Py_True;
    tmp->preplan = PyTuple_GET_ITEM(spec, 4) == Py_True;
    *out = tmp;
    return 0;
}

static void release_step(Py_buffer *view)
{
    if (view->obj != NULL)
        PyBuffer_Release(view);
}

/* An event given as three arguments (kind, handle or None, value). */
static int get_event(PyObject *const *args, rsp_event *ev)
{
    void *handle = NULL;
    memset(ev, 0, sizeof *ev);
    ev->kind = (rsp_event_kind)PyLong_AsLong(args[0]);
    if (args[1] != Py_None && fast__as_ptr(args[1], &handle) < 0)
        return -1;
    ev->handle = handle;
    ev->value = PyLong_AsUnsignedLongLong(args[2]);
    return PyErr_Occurred() ? -1 : 0;
}

/* The admit fast__outcome as step_next and step answer it: None when ok, else
 * (rid, label, slots_short, usable, free). */
PyObject *fast__outcome(const rsp_admit_outcome *o)
{
    if (o->ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(KIIII)", (unsigned long long)o->rid, o->label, o->slots_short, o->usable,
                         o->free);
}

/*
 * step(op, pool, step, ev_kind, ev_handle, ev_value): one of the three
 * synchronous step calls, the GIL released for it: op 0 rsp_step_admit
 * (answers fast__outcome()), 1 rsp_step_plan (None), 2 rsp_step_commit with
 * forward_done the event (None). Raises RspError for a failed status.
 */
static PyObject *fast_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "step takes 6 arguments");
        return NULL;
    }
    const long op = PyLong_AsLong(args[0]);
    void *pool;
    rsp_event ev;
    if (op == -1 && PyErr_Occurred())
        return NULL;
    if (op < 0 || op > 2) {
        PyErr_SetString(PyExc_ValueError, "step: op is 0 (admit), 1 (plan) or 2 (commit)");
        return NULL;
    }
    if (fast__as_ptr(args[1], &pool) < 0 || get_event(args + 3, &ev) < 0)
        return NULL;
    rsp_step tmp;
    Py_buffer view;
    const rsp_step *step;
    if (get_step(args[2], &tmp, &view, &step) < 0)
        return NULL;
    if (step == NULL) {
        PyErr_SetString(PyExc_TypeError, "step: a step, not None");
        return NULL;
    }
    rsp_admit_outcome out;
    rsp_error err;
    memset(&out, 0, sizeof out);
    err.status = RSP_OK;
    err.message[0] = '\0';
    rsp_status st;
    Py_BEGIN_ALLOW_THREADS;
    if (op == 0)
        st = lib.step_admit(pool, step, &out, &err);
    else if (op == 1)
        st = lib.step_plan(pool, step, &err);
    else
        st = lib.step_commit(pool, step, &ev, &err);
    Py_END_ALLOW_THREADS;
    release_step(&view);
    if (st != RSP_OK)
        return raise_rsp(st, err.message);
    if (op == 0)
        return fast__outcome(&out);
    Py_RETURN_NONE;
}

/* rsp_step_next(pool, cur, prev, ev) with the GIL released, the steps
 * given as get_step takes them: Py_True with *out filled, or NULL with
 * RspError raised. */
PyObject *fast__run_next(void *pool, PyObject *cur_spec, PyObject *prev_spec, const rsp_event *ev,
                         rsp_step_outcome *out)
{
    rsp_step cur_tmp, prev_tmp;
    Py_buffer cur_view, prev_view;
    const rsp_step *cur, *prev;
    if (get_step(cur_spec, &cur_tmp, &cur_view, &cur) < 0)
        return NULL;
    if (get_step(prev_spec, &prev_tmp, &prev_view, &prev) < 0) {
        release_step(&cur_view);
        return NULL;
    }
    rsp_error err;
    memset(out, 0, sizeof *out);
    err.status = RSP_OK;
    err.message[0] = '\0';
    rsp_status st;
    Py_BEGIN_ALLOW_THREADS st = lib.step_next(pool, cur, prev, ev, out, &err);
    Py_END_ALLOW_THREADS release_step(&cur_view);
    release_step(&prev_view);
    if (st != RSP_OK)
        return raise_rsp(st, err.message);
    Py_RETURN_TRUE;
}

/*
 * step_next(pool, step, prev, ev_kind, ev_handle, ev_value): rsp_step_next
 * with forward_done the event (kind, handle, value). Answers the plan
 * digest (an int) when the step was admitted and planned, None when
 * admitted but not planned, and (rid, label, slots_short, usable, free)
 * when admit found no slot; raises RspError for a failed status.
 */
static PyObject *fast_step_next(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "step_next takes 6 arguments");
        return NULL;
    }
    void *pool;
    rsp_event ev;
    if (fast__as_ptr(args[0], &pool) < 0 || get_event(args + 3, &ev) < 0)
        return NULL;
    rsp_step_outcome out;
    PyObject *r = fast__run_next(pool, args[1], args[2], &ev, &out);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    if (out.admit.ok && out.planned)
        return PyLong_FromUnsignedLongLong(out.plan_digest);
    return fast__outcome(&out.admit);
}

/* A writable buffer of at least need bytes (view held), or 0 with
 * view->obj NULL when o is None or too small; -1 with an exception when o
 * is not a writable buffer. */
int fast__get_out(PyObject *o, size_t need, Py_buffer *view)
{
    view->obj = NULL;
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, view, PyBUF_WRITABLE) < 0)
        return -1;
    if ((size_t)view->len < need) {
        PyBuffer_Release(view);
        view->obj = NULL;
    }
    return 0;
}

/*
 * One read of a plan's addressing of label lid: the live plan's (live) or
 * step sid's, in one read section, its three host vectors copied into
 * *copy (PyMem_RawMalloc'd: slot indices, then has_state, then
 * generations; the caller frees it). 0; 1 when rsp refused (*st and err
 * say why, nothing raised); -1 with MemoryError raised.
 */
int fast__read_copy(void *pool, unsigned long lid, int live, unsigned long long sid,
                    rsp_addressing *a, char **copy, rsp_status *st, rsp_error *err)
{
    err->message[0] = '\0';
    *st = lib.read_begin();
    if (*st != RSP_OK) {
        /* The words only on a refusal: rsp_read_begin stays the few-ns call. */
        (void)lib.read_explain(*st, err); /* returns *st */
        return 1;
    }
    /* Inside the read section only C runs: no Python object is made, so no
     * finaliser can run here (one closing a pool would wait for this very
     * section). */
    const rsp_plan *plan = live ? lib.plan_live(pool) : lib.plan_of_step(pool, sid);
    if (plan == NULL) {
        lib.read_end();
        *st = RSP_ENOPLAN;
        if (live)
            snprintf(err->message, sizeof err->message, "no live plan yet");
        else
            snprintf(err->message, sizeof err->message, "no plan of step %llu", sid);
        return 1;
    }
    *st = lib.plan_addressing(plan, (rsp_label_id)lid, a, err);
    if (*st != RSP_OK) {
        lib.read_end();
        return 1;
    }
    size_t n = a->length, si_n = 4 * (size_t)n, g_n = 8 * (size_t)a->num_rows;
    *copy = PyMem_RawMalloc(si_n + n + g_n + 1);
    if (*copy == NULL) {
        lib.read_end();
        PyErr_NoMemory();
        return -1;
    }
    if (n) {
        memcpy(*copy, a->slot_indices, si_n);
        memcpy(*copy + si_n, a->has_state, n);
    }
    if (g_n)
        memcpy(*copy + si_n + n, a->generations, g_n);
    lib.read_end();
    return 0;
}

/* Wait on the host for a read's ready event, the GIL released: 0, or -1
 * with RspError raised. */
int fast__wait_ready(void *pool, const rsp_addressing *a)
{
    rsp_error err;
    err.message[0] = '\0';
    rsp_status st;
    Py_BEGIN_ALLOW_THREADS st = lib.event_wait(pool, &a->ready, RSP_WAIT_FOREVER, &err);
    Py_END_ALLOW_THREADS if (st != RSP_OK)
    {
        raise_rsp(st, err.message);
        return -1;
    }
    return 0;
}

/* The num_rows real rows of a copied addressing (fast__read_copy's copy:
 * length slot indices, then length has_state bytes; a leased plan's length
 * is its bucket's, past num_rows) as the host mirrors the seed's
 * RecurrentAddressing carries: a list of ints and a list of bools (in C,
 * where a Python pass over 256 bytes costs microseconds). 0, or -1 with
 * MemoryError raised and nothing made. */
static int host_lists(const char *copy, size_t length, size_t num_rows, PyObject **si,
                      PyObject **hs)
{
    *si = PyList_New((Py_ssize_t)num_rows);
    *hs = PyList_New((Py_ssize_t)num_rows);
    if (*si == NULL || *hs == NULL)
        goto fail;
    const char *has = copy + 4 * length;
    for (size_t i = 0; i < num_rows; i++) {
        int32_t v;
        memcpy(&v, copy + 4 * i, sizeof v);
        PyObject *o = PyLong_FromLong(v);
        if (o == NULL)
            goto fail;
        PyList_SET_ITEM(*si, (Py_ssize_t)i, o);
        o = has[i] ? Py_True : Py_False;
        Py_INCREF(o);
        PyList_SET_ITEM(*hs, (Py_ssize_t)i, o);
    }
    return 0;
fail:
    Py_XDECREF(*si);
    Py_XDECREF(*hs);
    return -1;
}

/*
 * addressing(pool, label, step_id, wait[, si_out, hs_out[, lists]]): the
 * live plan's addressing of label (step_id None) or step_id's plan's, read
 * in one read section, as (slot_indices, has_state, num_rows, slot_bytes,
 * has_bytes, step_id, gen_bytes, ready_kind, ready_handle, ready_value):
 * the first two bytearrays (each its own copy, for writable tensors), the
 * others bytes. si_out and hs_out (writable buffers, the persistent
 * tensors' memory, or None): when both hold the vectors, they are written
 * there in place and the first two items are None. lists true: slot_bytes
 * and has_bytes are instead the num_rows real rows as a list of ints and a
 * list of bools (the seed's host mirrors). wait: then wait for the ready
 * event on the host, the GIL released.
 */
static PyObject *fast_addressing(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 && nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "addressing takes 4, 6 or 7 arguments");
        return NULL;
    }
    void *pool;
    if (fast__as_ptr(args[0], &pool) < 0)
        return NULL;
    unsigned long lid = PyLong_AsUnsignedLong(args[1]);
    int live = args[2] == Py_None;
    unsigned long long sid = live ? 0 : PyLong_AsUnsignedLongLong(args[2]);
    int wait = PyObject_IsTrue(args[3]);
    int lists = nargs == 7 ? PyObject_IsTrue(args[6]) : 0;
    if (PyErr_Occurred())
        return NULL;
    rsp_addressing a;
    rsp_error err;
    rsp_status st;
    char *copy = NULL;
    int rc = fast__read_copy(pool, lid, live, sid, &a, &copy, &st, &err);
    if (rc != 0)
        return rc > 0 ? raise_rsp(st, err.message) : NULL;
    size_t n = a.length, si_n = 4 * (size_t)n, g_n = 8 * (size_t)a.num_rows;
    /* The persistent buffers, filled after the section (the copy above is
     * what the section reads): a buffer's exporter may run Python code. */
    Py_buffer si_view = {0}, hs_view = {0};
    if (nargs >= 6) {
        if (fast__get_out(args[4], si_n, &si_view) < 0 || fast__get_out(args[5], n, &hs_view) < 0) {
            if (si_view.obj)
                PyBuffer_Release(&si_view);
            PyMem_RawFree(copy);
            return NULL;
        }
        if (si_view.obj && hs_view.obj) {
            memcpy(si_view.buf, copy, si_n);
            memcpy(hs_view.buf, copy + si_n, n);
        }
    }
    const int in_place = si_view.obj && hs_view.obj;
    if (si_view.obj)
        PyBuffer_Release(&si_view);
    if (hs_view.obj)
        PyBuffer_Release(&hs_view);
    if (wait && fast__wait_ready(pool, &a) < 0) {
        PyMem_RawFree(copy);
        return NULL;
    }
    PyObject *host_si = NULL, *host_hs = NULL;
    if (lists && host_lists(copy, n, a.num_rows, &host_si, &host_hs) < 0) {
        PyMem_RawFree(copy);
        return NULL;
    }
    PyObject *handle = a.ready.handle ? PyLong_FromVoidPtr(a.ready.handle) : Py_None;
    if (handle == Py_None)
        Py_INCREF(handle);
    PyObject *si_arr, *hs_arr;
    if (in_place) {
        si_arr = Py_None;
        hs_arr = Py_None;
        Py_INCREF(si_arr);
        Py_INCREF(hs_arr);
    } else {
        si_arr = PyByteArray_FromStringAndSize(copy, (Py_ssize_t)si_n);
        hs_arr = PyByteArray_FromStringAndSize(copy + si_n, (Py_ssize_t)n);
    }
    PyObject *r;
    if (lists)
        r = Py_BuildValue("(N N I N N K y# i N K)", si_arr, hs_arr, a.num_rows, host_si, host_hs,
                          (unsigned long long)a.step_id, copy + si_n + n, (Py_ssize_t)g_n,
                          (int)a.ready.kind, handle, (unsigned long long)a.ready.value);
    else
        r = Py_BuildValue("(N N I y# y# K y# i N K)", si_arr, hs_arr, a.num_rows, copy,
                          (Py_ssize_t)si_n, copy + si_n, (Py_ssize_t)n,
                          (unsigned long long)a.step_id, copy + si_n + n, (Py_ssize_t)g_n,
                          (int)a.ready.kind, handle, (unsigned long long)a.ready.value);
    PyMem_RawFree(copy);
    return r;
}

/*
 * types_within(seq, known): whether the exact type of every item of seq (a
 * list or tuple) is in the set known. The seed's segments are one engine
 * class each, so the set is asked once per run of one type, where Python's
 * set(map(type, seq)) hashes every item's type.
 */
static PyObject *fast_types_within(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyAnySet_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "types_within(seq, known): known is a set");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "types_within: seq is a list or tuple");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyTypeObject *seen = NULL;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        PyTypeObject *t = Py_TYPE(items[i]);
        if (t == seen)
            continue;
        ok = PySet_Contains(args[1], (PyObject *)t);
        if (ok < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        seen = t;
    }
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"init", fast_init, METH_VARARGS, "init(RspError, function addresses)"},
    {"step", (PyCFunction)(void (*)(void))fast_step, METH_FASTCALL,
     "step(op, pool, step, ev_kind, ev_handle, ev_value): admit, plan or commit"},
    {"step_next", (PyCFunction)(void (*)(void))fast_step_next, METH_FASTCALL,
     "step_next(pool, step, prev, ev_kind, ev_handle, ev_value)"},
    {"addressing", (PyCFunction)(void (*)(void))fast_addressing, METH_FASTCALL,
     "addressing(pool, label, step_id, wait[, si_out, hs_out[, lists]])"},
    {"types_within", (PyCFunction)(void (*)(void))fast_types_within, METH_FASTCALL,
     "types_within(seq, known): every item's exact type is in the set known"},
    {"bind", fast__bind, METH_VARARGS,
     "bind(AdmitOutcome, ok fast__outcome, _Marshal, RecurrentAddressing): the steady step's "
     "classes"},
    {"next", (PyCFunction)(void (*)(void))fast__next, METH_FASTCALL,
     "next(pool, step, prev): a steady step_next, or NotImplemented"},
    {"read", (PyCFunction)(void (*)(void))fast__read, METH_FASTCALL,
     "read(pool, label, wait): a steady persistent addressing(), or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_fast",
    "rsp's steady step in compiled code (see pool.py)",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    return PyModule_Create(&module);
}
