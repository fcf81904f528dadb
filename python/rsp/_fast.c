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
 * The steady step (next and read) goes further: it takes the package's
 * own objects (the pool, its Step, the label's name) and does in C what
 * pool.py's step_next and addressing(persistent=True) do in Python for a
 * step of rows and flags only whose rows equal the last step's, answering
 * the package's AdmitOutcome and RecurrentAddressing. After the engine's
 * forward has left the caches cold, each Python line of that path costs
 * a few cache misses; one C call touches far fewer lines. Anything else
 * answers NotImplemented and pool.py takes its general path, which also
 * raises every error.
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

/* The attribute names the steady step reads and writes, interned once
 * (bind): pool.py's RecurrentStatePool, Step, _Marshal, _Persistent and
 * RecurrentAddressing fields, by the names pool.py gives them. */
#define FAST_NAMES(X)                                                                              \
    X(POOL, "_pool")                                                                               \
    X(CALLS, "_calls")                                                                             \
    X(CLOSING, "_closing")                                                                         \
    X(IN_CALLBACK, "_in_callback")                                                                 \
    X(HOST, "_host")                                                                               \
    X(LABELS, "_labels")                                                                           \
    X(PERSIST, "_persist")                                                                         \
    X(LAST_ROWS, "_last_rows")                                                                     \
    X(WIRE, "_wire")                                                                               \
    X(ROWS, "rows")                                                                                \
    X(STEP_ID, "step_id")                                                                          \
    X(PRE_FORKS, "pre_forks")                                                                      \
    X(POST_FORKS, "post_forks")                                                                    \
    X(LEASE, "lease")                                                                              \
    X(CHECKPOINTS, "checkpoints")                                                                  \
    X(RESTORES, "restores")                                                                        \
    X(CAPTURE, "capture")                                                                          \
    X(PREPLAN, "preplan")                                                                          \
    X(LITE, "lite")                                                                                \
    X(KEEP, "keep")                                                                                \
    X(PRE, "pre")                                                                                  \
    X(POST, "post")                                                                                \
    X(CKPTS, "ckpts")                                                                              \
    X(RESTS, "rests")                                                                              \
    X(M_STEP, "_step")                                                                             \
    X(M_N, "_n")                                                                                   \
    X(M_SID, "_sid")                                                                               \
    X(M_FLAGS, "_flags")                                                                           \
    X(P_SI, "si")                                                                                  \
    X(P_HS, "hs")                                                                                  \
    X(P_TS, "ts")                                                                                  \
    X(P_TH, "th")                                                                                  \
    X(P_N, "n")                                                                                    \
    X(P_CAP, "cap")                                                                                \
    X(P_VIEW, "view")                                                                              \
    X(A_SI_T, "slot_indices")                                                                      \
    X(A_HS_T, "has_state")                                                                         \
    X(A_NUM_ROWS, "num_rows")                                                                      \
    X(A_STEP_ID, "step_id")                                                                        \
    X(A_READY, "_ready")                                                                           \
    X(A_SI, "_si")                                                                                 \
    X(A_HS, "_hs")                                                                                 \
    X(A_GEN, "_gen")                                                                               \
    X(A_LISTS, "_lists")                                                                           \
    X(DIGEST, "plan_digest")

#define FAST_NAME_ENUM(id, text) N_##id,
enum { FAST_NAMES(FAST_NAME_ENUM) N_COUNT_ };
#define FAST_NAME_TEXT(id, text) text,
static const char *const name_text[N_COUNT_] = {FAST_NAMES(FAST_NAME_TEXT)};

/* The package's classes and objects the steady step builds from (bind). */
static struct {
    PyObject *name[N_COUNT_];
    PyTypeObject *outcome_cls; /* AdmitOutcome */
    PyObject *outcome_ok;      /* _ADMIT_OK, the shared ok outcome */
    PyObject *outcome_fields;  /* _ADMIT_OK's __dict__, copied into a digest's outcome */
    PyTypeObject *marshal_cls; /* _Marshal */
    PyTypeObject *address_cls; /* RecurrentAddressing */
    PyObject *empty;           /* () for object.__new__ */
} py;

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

static int as_ptr(PyObject *o, void **out)
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
        if (as_ptr(PyTuple_GET_ITEM(fns, i), &p[i]) < 0)
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
        if (as_ptr(spec, &p) < 0)
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
    if (args[1] != Py_None && as_ptr(args[1], &handle) < 0)
        return -1;
    ev->handle = handle;
    ev->value = PyLong_AsUnsignedLongLong(args[2]);
    return PyErr_Occurred() ? -1 : 0;
}

/* The admit outcome as step_next and step answer it: None when ok, else
 * (rid, label, slots_short, usable, free). */
static PyObject *outcome(const rsp_admit_outcome *o)
{
    if (o->ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(KIIII)", (unsigned long long)o->rid, o->label, o->slots_short, o->usable,
                         o->free);
}

/*
 * step(op, pool, step, ev_kind, ev_handle, ev_value): one of the three
 * synchronous step calls, the GIL released for it: op 0 rsp_step_admit
 * (answers outcome()), 1 rsp_step_plan (None), 2 rsp_step_commit with
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
    if (as_ptr(args[1], &pool) < 0 || get_event(args + 3, &ev) < 0)
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
        return outcome(&out);
    Py_RETURN_NONE;
}

/* rsp_step_next(pool, cur, prev, ev) with the GIL released, the steps
 * given as get_step takes them: Py_True with *out filled, or NULL with
 * RspError raised. */
static PyObject *run_next(void *pool, PyObject *cur_spec, PyObject *prev_spec, const rsp_event *ev,
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
    if (as_ptr(args[0], &pool) < 0 || get_event(args + 3, &ev) < 0)
        return NULL;
    rsp_step_outcome out;
    PyObject *r = run_next(pool, args[1], args[2], &ev, &out);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    if (out.admit.ok && out.planned)
        return PyLong_FromUnsignedLongLong(out.plan_digest);
    return outcome(&out.admit);
}

/* A writable buffer of at least need bytes (view held), or 0 with
 * view->obj NULL when o is None or too small; -1 with an exception when o
 * is not a writable buffer. */
static int get_out(PyObject *o, size_t need, Py_buffer *view)
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
static int read_copy(void *pool, unsigned long lid, int live, unsigned long long sid,
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
static int wait_ready(void *pool, const rsp_addressing *a)
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

/*
 * addressing(pool, label, step_id, wait[, si_out, hs_out]): the live
 * plan's addressing of label (step_id None) or step_id's plan's, read in
 * one read section, as (slot_indices, has_state, num_rows, slot_bytes,
 * has_bytes, step_id, gen_bytes, ready_kind, ready_handle, ready_value):
 * the first two bytearrays (each its own copy, for writable tensors), the
 * others bytes. si_out and hs_out (writable buffers, the persistent
 * tensors' memory): when both hold the vectors, they are written there in
 * place and the first two items are None. wait: then wait for the ready
 * event on the host, the GIL released.
 */
static PyObject *fast_addressing(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "addressing takes 4 or 6 arguments");
        return NULL;
    }
    void *pool;
    if (as_ptr(args[0], &pool) < 0)
        return NULL;
    unsigned long lid = PyLong_AsUnsignedLong(args[1]);
    int live = args[2] == Py_None;
    unsigned long long sid = live ? 0 : PyLong_AsUnsignedLongLong(args[2]);
    int wait = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred())
        return NULL;
    rsp_addressing a;
    rsp_error err;
    rsp_status st;
    char *copy = NULL;
    int rc = read_copy(pool, lid, live, sid, &a, &copy, &st, &err);
    if (rc != 0)
        return rc > 0 ? raise_rsp(st, err.message) : NULL;
    size_t n = a.length, si_n = 4 * (size_t)n, g_n = 8 * (size_t)a.num_rows;
    /* The persistent buffers, filled after the section (the copy above is
     * what the section reads): a buffer's exporter may run Python code. */
    Py_buffer si_view = {0}, hs_view = {0};
    if (nargs == 6) {
        if (get_out(args[4], si_n, &si_view) < 0 || get_out(args[5], n, &hs_view) < 0) {
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
    if (wait && wait_ready(pool, &a) < 0) {
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
    PyObject *r = Py_BuildValue("(N N I y# y# K y# i N K)", si_arr, hs_arr, a.num_rows, copy,
                                (Py_ssize_t)si_n, copy + si_n, (Py_ssize_t)n,
                                (unsigned long long)a.step_id, copy + si_n + n, (Py_ssize_t)g_n,
                                (int)a.ready.kind, handle, (unsigned long long)a.ready.value);
    PyMem_RawFree(copy);
    return r;
}

/* ---- the steady step: the package's objects in, its answers out ---- */

#define NAME(id) py.name[N_##id]

/*
 * bind(AdmitOutcome, _ADMIT_OK, _Marshal, RecurrentAddressing): the
 * package's classes the steady step builds. Until it is called, next and
 * read answer NotImplemented.
 */
static PyObject *fast_bind(PyObject *self, PyObject *args)
{
    PyObject *outcome, *ok, *marshal, *address;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OO!O!", &PyType_Type, &outcome, &ok, &PyType_Type, &marshal,
                          &PyType_Type, &address))
        return NULL;
    PyObject *fields = PyObject_GetAttrString(ok, "__dict__");
    if (fields == NULL)
        return NULL;
    if (!PyDict_Check(fields)) {
        Py_DECREF(fields);
        PyErr_SetString(PyExc_TypeError, "bind: the ok outcome has no field dict");
        return NULL;
    }
    for (int i = 0; i < N_COUNT_; i++)
        if (py.name[i] == NULL && (py.name[i] = PyUnicode_InternFromString(name_text[i])) == NULL) {
            Py_DECREF(fields);
            return NULL;
        }
    if (py.empty == NULL && (py.empty = PyTuple_New(0)) == NULL) {
        Py_DECREF(fields);
        return NULL;
    }
    Py_INCREF(outcome);
    Py_INCREF(ok);
    Py_INCREF(marshal);
    Py_INCREF(address);
    Py_XSETREF(py.outcome_cls, (PyTypeObject *)outcome);
    Py_XSETREF(py.outcome_ok, ok);
    Py_XSETREF(py.outcome_fields, PyDict_Copy(fields));
    Py_XSETREF(py.marshal_cls, (PyTypeObject *)marshal);
    Py_XSETREF(py.address_cls, (PyTypeObject *)address);
    Py_DECREF(fields);
    if (py.outcome_fields == NULL)
        return NULL;
    Py_RETURN_NONE;
}

/* object.__new__(cls): an instance whose fields the caller sets. */
static PyObject *new_of(PyTypeObject *cls)
{
    return PyBaseObject_Type.tp_new(cls, py.empty, NULL);
}

/* Set n attributes of o from (name id, value) pairs, stealing each value
 * (NULL: an error already raised, the rest released). 0, or -1. */
static int set_fields(PyObject *o, int n, const int *ids, PyObject **vals)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && (vals[i] == NULL || PyObject_SetAttr(o, py.name[ids[i]], vals[i]) < 0))
            rc = -1;
        Py_XDECREF(vals[i]);
    }
    return rc;
}

static PyObject *new_ref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

/* Whether attribute id of o is falsy (1), truthy (0), or -1 on error. */
static int falsy(PyObject *o, int id)
{
    PyObject *v = PyObject_GetAttr(o, py.name[id]);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t < 0 ? -1 : !t;
}

/* Whether step declares nothing but rows and flags: no forks, lease,
 * checkpoints or restores. 1, 0, or -1 on error. */
static int rows_and_flags_only(PyObject *step)
{
    static const int empty_ids[] = {N_PRE_FORKS, N_POST_FORKS, N_CHECKPOINTS, N_RESTORES};
    for (int i = 0; i < 4; i++) {
        int e = falsy(step, empty_ids[i]);
        if (e <= 0)
            return e;
    }
    PyObject *lease = PyObject_GetAttr(step, NAME(LEASE));
    if (lease == NULL)
        return -1;
    Py_DECREF(lease);
    return lease == Py_None;
}

/* The step's _Marshal of a lite step, as _Marshal.__init__ makes it, and
 * cached on the step as pool._marshal caches it. 0, or -1. */
static int cache_marshal(PyObject *pool, PyObject *step, PyObject *lite)
{
    PyObject *m = new_of(py.marshal_cls);
    if (m == NULL)
        return -1;
    static const int ids[] = {N_PRE, N_POST,  N_CKPTS,   N_RESTS, N_M_STEP,
                              N_M_N, N_M_SID, N_M_FLAGS, N_KEEP,  N_LITE};
    PyObject *v[10] = {new_ref(Py_None),
                       new_ref(Py_None),
                       new_ref(Py_None),
                       new_ref(Py_None),
                       new_ref(Py_None),
                       new_ref(PyTuple_GET_ITEM(lite, 2)),
                       new_ref(PyTuple_GET_ITEM(lite, 0)),
                       PyTuple_GetSlice(lite, 3, 5),
                       new_ref(PyTuple_GET_ITEM(lite, 1)),
                       new_ref(lite)};
    PyObject *w = NULL;
    int rc = set_fields(m, 10, ids, v);
    if (rc == 0 &&
        ((w = PyTuple_Pack(2, pool, m)) == NULL || PyObject_SetAttr(step, NAME(WIRE), w) < 0))
        rc = -1;
    Py_XDECREF(w);
    Py_DECREF(m);
    return rc;
}

/*
 * The lite form (step_id, rows buffer, num_rows, capture, preplan) of a
 * step that pool.py's _Marshal would give the same: rows equal to the
 * pool's last kept rows (so their packed bytes are reused), nothing but
 * rows and flags, an int step id and bool flags. A new reference;
 * NotImplemented when the step is not such a step.
 */
static PyObject *marshal_steady(PyObject *pool, PyObject *step)
{
    PyObject *last = PyObject_GetAttr(pool, NAME(LAST_ROWS));
    if (last == NULL)
        return NULL;
    PyObject *rows = NULL, *f[3] = {NULL, NULL, NULL}, *res = NULL, *lite = NULL;
    static const int f_ids[] = {N_STEP_ID, N_CAPTURE, N_PREPLAN};
    int ok = 0;
    if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2 ||
        !PyList_CheckExact(PyTuple_GET_ITEM(last, 0)) ||
        PyList_GET_SIZE(PyTuple_GET_ITEM(last, 0)) == 0)
        goto done;
    if ((rows = PyObject_GetAttr(step, NAME(ROWS))) == NULL ||
        (ok = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 0), rows, Py_EQ)) <= 0 ||
        (ok = rows_and_flags_only(step)) <= 0)
        goto done;
    for (int i = 0; i < 3 && ok; i++)
        if ((f[i] = PyObject_GetAttr(step, py.name[f_ids[i]])) == NULL)
            ok = -1;
    if (ok <= 0 || !PyLong_CheckExact(f[0]) || !PyBool_Check(f[1]) || !PyBool_Check(f[2])) {
        ok = ok < 0 ? -1 : 0;
        goto done;
    }
    (void)PyLong_AsUnsignedLongLong(f[0]);
    if (PyErr_Occurred()) { /* negative or past 64 bits: _Marshal's checks name it */
        PyErr_Clear();
        ok = 0;
        goto done;
    }
    PyObject *n = PyLong_FromSsize_t(PyList_GET_SIZE(PyTuple_GET_ITEM(last, 0)));
    if (n == NULL ||
        (lite = PyTuple_Pack(5, f[0], PyTuple_GET_ITEM(last, 1), n, f[1], f[2])) == NULL ||
        cache_marshal(pool, step, lite) < 0)
        ok = -1;
    Py_XDECREF(n);
done:
    if (ok > 0)
        res = new_ref(lite);
    else if (ok == 0)
        res = new_ref(Py_NotImplemented);
    Py_XDECREF(lite);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(f[i]);
    Py_XDECREF(rows);
    Py_DECREF(last);
    return res;
}

/*
 * A step as next sends it: the lite form cached on the step for this
 * pool (step._wire), or one marshal_steady makes. A new reference;
 * NotImplemented for a step pool.py must marshal (one with more than rows
 * and flags, rows other than the last kept ones, another pool's).
 */
static PyObject *lite_of(PyObject *pool, PyObject *step)
{
    PyObject *w = PyObject_GetAttr(step, NAME(WIRE));
    if (w == NULL)
        return NULL;
    if (w == Py_None) {
        Py_DECREF(w);
        return marshal_steady(pool, step);
    }
    PyObject *lite = Py_NotImplemented;
    if (PyTuple_CheckExact(w) && PyTuple_GET_SIZE(w) == 2 && PyTuple_GET_ITEM(w, 0) == pool) {
        lite = PyObject_GetAttr(PyTuple_GET_ITEM(w, 1), NAME(LITE));
        if (lite == Py_None) {
            Py_DECREF(lite);
            lite = Py_NotImplemented;
        } else if (lite != NULL) {
            Py_DECREF(w);
            return lite;
        }
    }
    Py_DECREF(w);
    return lite == NULL ? NULL : new_ref(lite);
}

/*
 * pool.py's calls guard (_guarded), for the steady calls that pool.py does
 * not wrap in it: the caller's thread ident is appended to pool._calls
 * before pool._closing is read, as _guarded appends it, so that either
 * cleanup() sees the call and waits for it, or the call sees _closing (the
 * GIL orders the two). A guard that finds the pool closing, or the caller
 * inside one of the pool's callbacks, leaves at once and the call answers
 * NotImplemented: pool.py's guarded path then raises the refusal.
 */
typedef struct {
    PyObject *calls; /* pool._calls, NULL once left */
    PyObject *me;    /* the caller's ident */
} guard;

static void guard_leave(guard *g)
{
    if (g->calls == NULL)
        return;
        /* The call's own error, kept aside while the list is edited. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    /* One entry of this thread's ident (all equal: which one goes does
     * not matter), looked for from the end, where it usually is. */
    for (Py_ssize_t i = PyList_GET_SIZE(g->calls) - 1; i >= 0; i--)
        if (PyObject_RichCompareBool(PyList_GET_ITEM(g->calls, i), g->me, Py_EQ) == 1) {
            (void)PyList_SetSlice(g->calls, i, i + 1, NULL);
            break;
        }
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, tb);
#endif
    Py_CLEAR(g->calls);
    Py_CLEAR(g->me);
}

/* 1 entered; 0 refused (nothing held: take pool.py's path); -1 error. */
static int guard_enter(PyObject *pool, guard *g)
{
    g->me = NULL;
    g->calls = PyObject_GetAttr(pool, NAME(CALLS));
    if (g->calls == NULL)
        return -1;
    if (!PyList_CheckExact(g->calls)) {
        Py_CLEAR(g->calls);
        return 0;
    }
    if ((g->me = PyLong_FromUnsignedLong(PyThread_get_thread_ident())) == NULL ||
        PyList_Append(g->calls, g->me) < 0) {
        Py_CLEAR(g->me);
        Py_CLEAR(g->calls);
        return -1;
    }
    PyObject *closing = PyObject_GetAttr(pool, NAME(CLOSING));
    PyObject *inside = closing ? PyObject_GetAttr(pool, NAME(IN_CALLBACK)) : NULL;
    int refused = -1;
    if (inside != NULL) {
        refused = PyObject_IsTrue(closing);
        if (refused == 0)
            refused = PySet_Check(inside) ? PySet_Contains(inside, g->me) : 1;
    }
    Py_XDECREF(inside);
    Py_XDECREF(closing);
    if (refused != 0) {
        guard_leave(g);
        return refused < 0 ? -1 : 0;
    }
    return 1;
}

/* The pool's C handle (pool._pool), or NULL with *ni set when the pool is
 * closed (pool.py's path raises for it) or NULL with an error. */
static void *handle_of(PyObject *pool, int *ni)
{
    *ni = 0;
    PyObject *h = PyObject_GetAttr(pool, NAME(POOL));
    if (h == NULL)
        return NULL;
    void *p = NULL;
    if (h == Py_None)
        *ni = 1;
    else
        (void)as_ptr(h, &p);
    Py_DECREF(h);
    return p;
}

/* An ok AdmitOutcome carrying digest, built from _ADMIT_OK's fields. */
static PyObject *outcome_digest(uint64_t digest)
{
    PyObject *o = new_of(py.outcome_cls);
    if (o == NULL)
        return NULL;
    PyObject *d = PyObject_GenericGetDict(o, NULL);
    PyObject *v = d ? PyLong_FromUnsignedLongLong(digest) : NULL;
    if (v == NULL || PyDict_Update(d, py.outcome_fields) < 0 ||
        PyDict_SetItem(d, NAME(DIGEST), v) < 0)
        Py_CLEAR(o);
    Py_XDECREF(v);
    Py_XDECREF(d);
    return o;
}

/*
 * next(pool, step, prev): RecurrentStatePool.step_next(step, prev) with
 * forward_done None, for steps of rows and flags only (see lite_of),
 * inside the pool's calls guard: rsp_step_next with the GIL released,
 * then its AdmitOutcome (the shared ok one, or one with the plan digest),
 * or (rid, label, slots_short, usable, free) when admit found no slot
 * (pool.py names the rid). NotImplemented: take pool.py's general path.
 */
static PyObject *steady_next(PyObject *const *args)
{
    int ni;
    void *pool = handle_of(args[0], &ni);
    if (pool == NULL)
        return ni ? new_ref(Py_NotImplemented) : NULL;
    PyObject *cur = lite_of(args[0], args[1]);
    if (cur == NULL || cur == Py_NotImplemented)
        return cur;
    PyObject *pc = args[2] == Py_None ? new_ref(Py_None) : lite_of(args[0], args[2]);
    if (pc == NULL || pc == Py_NotImplemented) {
        Py_DECREF(cur);
        return pc;
    }
    rsp_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RSP_EVENT_COMPLETE;
    rsp_step_outcome out;
    PyObject *r = run_next(pool, cur, pc, &ev, &out);
    Py_DECREF(cur);
    Py_DECREF(pc);
    if (r != Py_True)
        return r;
    Py_DECREF(r);
    if (!out.admit.ok)
        return outcome(&out.admit);
    return out.planned ? outcome_digest(out.plan_digest) : new_ref(py.outcome_ok);
}

/* fn(args) inside the calls guard of pool args[0] (NotImplemented when the
 * guard refuses). */
static PyObject *guarded(PyObject *(*fn)(PyObject *const *), PyObject *const *args)
{
    guard g;
    int in = guard_enter(args[0], &g);
    if (in <= 0)
        return in < 0 ? NULL : new_ref(Py_NotImplemented);
    PyObject *r = fn(args);
    guard_leave(&g);
    return r;
}

static PyObject *fast_next(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "next takes 3 arguments");
        return NULL;
    }
    if (py.outcome_cls == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    return guarded(steady_next, args);
}

/* An integer attribute of o as a Py_ssize_t: 0, or -1 with an error. */
static int ssize_attr(PyObject *o, int id, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(o, py.name[id]);
    if (v == NULL)
        return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A read's two vectors (copy) written into the persistent pair p, viewed
 * at n entries first when its last view had another count (p.view(n)).
 * The caller checked n against p.cap. 0, or -1 with an error. */
static int fill_persistent(PyObject *p, const char *copy, size_t n, Py_ssize_t pn)
{
    if ((Py_ssize_t)n != pn) {
        PyObject *count = PyLong_FromSize_t(n);
        PyObject *r = count ? PyObject_CallMethodOneArg(p, NAME(P_VIEW), count) : NULL;
        Py_XDECREF(count);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    static const int ids[2] = {N_P_SI, N_P_HS};
    const size_t len[2] = {4 * n, n};
    const char *src[2] = {copy, copy + 4 * n};
    for (int i = 0; i < 2; i++) {
        PyObject *buf = PyObject_GetAttr(p, py.name[ids[i]]);
        Py_buffer view;
        if (buf == NULL || get_out(buf, len[i], &view) < 0) {
            Py_XDECREF(buf);
            return -1;
        }
        Py_DECREF(buf);
        if (view.obj == NULL) {
            PyErr_SetString(PyExc_AssertionError, "a persistent buffer below its capacity");
            return -1;
        }
        memcpy(view.buf, src[i], len[i]);
        PyBuffer_Release(&view);
    }
    return 0;
}

/* The RecurrentAddressing of a persistent read, as pool.py builds it: the
 * pair's tensors (p.ts, p.th), the read's own host copies and ready event
 * (kind, handle, value). A new reference, or NULL with an error. */
static PyObject *persistent_addressing(PyObject *p, const rsp_addressing *a, const char *copy)
{
    size_t n = a->length, si_n = 4 * n;
    PyObject *o = new_of(py.address_cls);
    if (o == NULL)
        return NULL;
    PyObject *handle = a->ready.handle ? PyLong_FromVoidPtr(a->ready.handle) : new_ref(Py_None);
    static const int ids[] = {N_A_SI_T, N_A_HS_T, N_A_NUM_ROWS, N_A_STEP_ID, N_A_READY,
                              N_A_SI,   N_A_HS,   N_A_GEN,      N_A_LISTS};
    PyObject *v[9] = {
        PyObject_GetAttr(p, NAME(P_TS)),
        PyObject_GetAttr(p, NAME(P_TH)),
        PyLong_FromUnsignedLong(a->num_rows),
        PyLong_FromUnsignedLongLong(a->step_id),
        handle
            ? Py_BuildValue("(iNK)", (int)a->ready.kind, handle, (unsigned long long)a->ready.value)
            : NULL,
        PyBytes_FromStringAndSize(copy, (Py_ssize_t)si_n),
        PyBytes_FromStringAndSize(copy + si_n, (Py_ssize_t)n),
        PyBytes_FromStringAndSize(copy + si_n + n, 8 * (Py_ssize_t)a->num_rows),
        new_ref(Py_None),
    };
    if (set_fields(o, 9, ids, v) < 0)
        Py_CLEAR(o);
    return o;
}

/* The label's persistent pair (pool._persist[pool._labels[label]]) and
 * the label's id: a new reference, or NULL with *ni set when the pool
 * has none yet (or label is not a known str), or NULL with an error. */
static PyObject *persistent_of(PyObject *pool, PyObject *label, unsigned long *lid, int *ni)
{
    *ni = 1;
    if (!PyUnicode_CheckExact(label))
        return NULL;
    PyObject *labels = PyObject_GetAttr(pool, NAME(LABELS));
    PyObject *persist = labels ? PyObject_GetAttr(pool, NAME(PERSIST)) : NULL;
    PyObject *p = NULL;
    if (persist != NULL && PyDict_CheckExact(labels) && PyDict_CheckExact(persist)) {
        PyObject *id = PyDict_GetItemWithError(labels, label);
        if (id != NULL && PyLong_CheckExact(id)) {
            *lid = PyLong_AsUnsignedLong(id);
            p = PyErr_Occurred() ? NULL : PyDict_GetItemWithError(persist, id);
            Py_XINCREF(p);
        }
    }
    if (PyErr_Occurred())
        *ni = 0;
    Py_XDECREF(persist);
    Py_XDECREF(labels);
    return p;
}

/*
 * read(pool, label, wait): RecurrentStatePool.addressing(label,
 * persistent=True) of the live plan on a CPU pool whose label already has
 * its persistent pair, inside the pool's calls guard: one read
 * (read_copy), the two vectors written into the pair, the ready wait when
 * wait (GIL released), and the RecurrentAddressing. NotImplemented: take
 * pool.py's path (no pair yet, a row count past its capacity, a CUDA
 * pool, any refusal: the general path reads again and raises it).
 */
static PyObject *steady_read(PyObject *const *args)
{
    PyObject *host = PyObject_GetAttr(args[0], NAME(HOST));
    if (host == NULL)
        return NULL;
    Py_DECREF(host);
    if (host != Py_True)
        Py_RETURN_NOTIMPLEMENTED;
    int ni, wait = PyObject_IsTrue(args[2]);
    if (wait < 0)
        return NULL;
    void *pool = handle_of(args[0], &ni);
    if (pool == NULL)
        return ni ? new_ref(Py_NotImplemented) : NULL;
    unsigned long lid = 0;
    PyObject *p = persistent_of(args[0], args[1], &lid, &ni), *r = NULL;
    if (p == NULL)
        return ni ? new_ref(Py_NotImplemented) : NULL;
    Py_ssize_t pn, cap;
    rsp_addressing a;
    rsp_error err;
    rsp_status st;
    char *copy = NULL;
    int rc = -1;
    if (ssize_attr(p, N_P_N, &pn) == 0 && ssize_attr(p, N_P_CAP, &cap) == 0)
        rc = read_copy(pool, lid, 1, 0, &a, &copy, &st, &err);
    if (rc > 0 || (rc == 0 && (Py_ssize_t)a.length > cap))
        r = new_ref(Py_NotImplemented);
    else if (rc == 0 && fill_persistent(p, copy, a.length, pn) == 0 &&
             (!wait || wait_ready(pool, &a) == 0))
        r = persistent_addressing(p, &a, copy);
    PyMem_RawFree(copy);
    Py_DECREF(p);
    return r;
}

static PyObject *fast_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read takes 3 arguments");
        return NULL;
    }
    if (py.address_cls == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    return guarded(steady_read, args);
}

static PyMethodDef methods[] = {
    {"init", fast_init, METH_VARARGS, "init(RspError, function addresses)"},
    {"step", (PyCFunction)(void (*)(void))fast_step, METH_FASTCALL,
     "step(op, pool, step, ev_kind, ev_handle, ev_value): admit, plan or commit"},
    {"step_next", (PyCFunction)(void (*)(void))fast_step_next, METH_FASTCALL,
     "step_next(pool, step, prev, ev_kind, ev_handle, ev_value)"},
    {"addressing", (PyCFunction)(void (*)(void))fast_addressing, METH_FASTCALL,
     "addressing(pool, label, step_id, wait[, si_out, hs_out])"},
    {"bind", fast_bind, METH_VARARGS,
     "bind(AdmitOutcome, ok outcome, _Marshal, RecurrentAddressing): the steady step's classes"},
    {"next", (PyCFunction)(void (*)(void))fast_next, METH_FASTCALL,
     "next(pool, step, prev): a steady step_next, or NotImplemented"},
    {"read", (PyCFunction)(void (*)(void))fast_read, METH_FASTCALL,
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
