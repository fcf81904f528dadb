/*
 * rsp._fast's steady step: next and read (see _fast.c's opening comment
 * and docs/python.md, "The fast path"), which take the package's own
 * objects and answer its AdmitOutcome and RecurrentAddressing for the
 * steady case, and decline (NotImplemented) every other.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "rsp/rsp.h"

#include "_fast.h"

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

/* ---- the steady step: the package's objects in, its answers out ---- */

#define NAME(id) py.name[N_##id]

/*
 * bind(AdmitOutcome, _ADMIT_OK, _Marshal, RecurrentAddressing): the
 * package's classes the steady step builds. Until it is called, next and
 * read answer NotImplemented.
 */
PyObject *fast__bind(PyObject *self, PyObject *args)
{
    PyObject *fast__outcome, *ok, *marshal, *address;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OO!O!", &PyType_Type, &fast__outcome, &ok, &PyType_Type,
                          &marshal, &PyType_Type, &address))
        return NULL;
    PyObject *fields = PyObject_GetAttrString(ok, "__dict__");
    if (fields == NULL)
        return NULL;
    if (!PyDict_Check(fields)) {
        Py_DECREF(fields);
        PyErr_SetString(PyExc_TypeError, "bind: the ok fast__outcome has no field dict");
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
    Py_INCREF(fast__outcome);
    Py_INCREF(ok);
    Py_INCREF(marshal);
    Py_INCREF(address);
    Py_XSETREF(py.outcome_cls, (PyTypeObject *)fast__outcome);
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
        (void)fast__as_ptr(h, &p);
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
    PyObject *r = fast__run_next(pool, cur, pc, &ev, &out);
    Py_DECREF(cur);
    Py_DECREF(pc);
    if (r != Py_True)
        return r;
    Py_DECREF(r);
    if (!out.admit.ok)
        return fast__outcome(&out.admit);
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

PyObject *fast__next(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
        if (buf == NULL || fast__get_out(buf, len[i], &view) < 0) {
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
 * (fast__read_copy), the two vectors written into the pair, the ready wait when
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
        rc = fast__read_copy(pool, lid, 1, 0, &a, &copy, &st, &err);
    if (rc > 0 || (rc == 0 && (Py_ssize_t)a.length > cap))
        r = new_ref(Py_NotImplemented);
    else if (rc == 0 && fill_persistent(p, copy, a.length, pn) == 0 &&
             (!wait || fast__wait_ready(pool, &a) == 0))
        r = persistent_addressing(p, &a, copy);
    PyMem_RawFree(copy);
    Py_DECREF(p);
    return r;
}

PyObject *fast__read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
