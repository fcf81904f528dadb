# The UCX transport (librsp_ucx, include/rsp/rsp_ucx.h; docs/transfer.md)
# from Python: a prefill process sends an rsp.Export, a decode process
# receives it as an import, every byte pulled one-sidedly by UCX.
#
# librsp_ucx is loaded on first use from beside the librsp the package
# loaded (_ffi.load_ucx), so `import rsp` works where it was not built;
# available() says whether it loads, and a Transport made without it raises
# RuntimeError naming what was tried.
#
# A Transport is not thread-safe (one rsp_ucx is one thread's): a second
# thread's call while one runs is refused with RuntimeError instead of
# corrupting the connection. ctypes releases the GIL during each C call, so
# other Python threads run while a transfer waits.
#
# SPDX-License-Identifier: Apache-2.0
import contextlib
import ctypes
import numbers
import threading
from typing import List, NamedTuple, Optional

from . import _ffi as ffi
from . import xfer as _xfer

_state = None  # (library or None, why not): _load's cache
_EDEVICE = ffi.STATUS_NAMES.index("RSP_EDEVICE")
_ETIMEDOUT = ffi.STATUS_NAMES.index("RSP_ETIMEDOUT")
_load_lock = threading.Lock()


def _load():
    global _state
    with _load_lock:
        if _state is None:
            try:
                _state = (ffi.load_ucx(), None)
            except OSError as e:
                _state = (None, str(e))
        return _state


def available() -> bool:
    """Whether librsp_ucx loads here (built with UCX, and UCX's libraries
    present). Loads it on the first call."""
    return _load()[0] is not None


def unavailable_reason() -> Optional[str]:
    """Why available() is False (the paths tried), or None."""
    return _load()[1]


def _status(name):
    """The rsp_status of a name ("RSP_EINVAL") or an int status."""
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        raise TypeError(f"status must be an rsp status name (e.g. 'RSP_EINVAL'), not "
                        f"{type(name).__name__}")
    st = ffi.STATUS_NAMES.index(name) if name in ffi.STATUS_NAMES else name
    if not isinstance(st, int) or not 0 < st < len(ffi.STATUS_NAMES):
        raise ValueError(f"status {name!r} is not an rsp status other than RSP_OK")
    return st


def _timeout_ns(timeout):
    """timeout (seconds, an int or a float; None: no bound) in nanoseconds."""
    if timeout is None:
        return ffi.WAIT_FOREVER
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds or None, not "
                        f"{type(timeout).__name__}")
    if not 0 <= timeout < 1e9:  # NaN fails too
        raise ValueError(f"timeout {timeout!r} is not a number of seconds in [0, 1e9)")
    return int(timeout * 1e9)


def _header(h):
    return _xfer.header_fields(ctypes.string_at(ctypes.addressof(h), ctypes.sizeof(h)))


class Outcome(NamedTuple):
    """One request of a batch (send_many, receive_many): status, an rsp
    status name ("RSP_OK": committed by the importer), and, on the
    importing side, the offer's header for it (None on the exporting
    side)."""

    status: str
    header: Optional[_xfer.Header] = None

    @property
    def ok(self) -> bool:
        return self.status == "RSP_OK"


def _status_name(st):
    return ffi.STATUS_NAMES[st] if 0 <= st < len(ffi.STATUS_NAMES) else str(st)


class Received(_xfer.Import):
    """An import that Transport.receive_begin began and filled: its extents
    hold the offer's bytes (read them through the pool's regions or block
    views), nothing may address it yet, and the exporter waits. End it with
    Transport.receive_end (commit() and abort() do the same): the exporter's
    send() then returns or raises with the outcome. header: the offer's
    fields (rsp.xfer.Header)."""

    def __init__(self, transport, handle, header):
        super().__init__(transport._pool, handle, header.what)
        self._transport = transport
        self.header = header

    def commit(self, seq=None):
        """Transport.receive_end(self, ok=True, seq_end=seq)."""
        self._transport.receive_end(self, True, seq_end=0 if seq is None else seq)

    def abort(self, seq=None):
        """Transport.receive_end(self, ok=False, seq_end=seq); a no-op once ended."""
        if self._h is not None:
            self._transport.receive_end(self, False, seq_end=0 if seq is None else seq)


class Transport:
    """One pool's side of one UCX connection (rsp_ucx_create): a UCP
    context and worker, the pool's regions registered once. connect() over
    a connected stream socket both sides hold, then send() on the exporting
    side and receive() (or receive_begin / receive_end) on the importing
    side, one call for one call. Not thread-safe (see the module's
    comment). A context manager; close() (or the pool's cleanup(), which
    holds it until then) destroys it. timeout: seconds, None for no bound.
    Cost: creating one registers the pool's regions (UCX context and
    worker: milliseconds); each send/receive is a socket round trip plus
    the pull of the bytes, the exporter's thread blocked meanwhile."""

    def __init__(self, pool):
        from .pool import RecurrentStatePool

        if not isinstance(pool, RecurrentStatePool):
            raise TypeError(f"pool must be an rsp.Pool, not {type(pool).__name__}")
        lib, why = _load()
        if lib is None:
            raise RuntimeError(f"rsp.ucx: the UCX transport is unavailable: {why}")
        self._lib = lib
        self._pool = pool
        self._u = None
        self._sock = None  # the connected socket, kept open while in use
        self._busy = threading.Lock()
        out = ctypes.c_void_p()
        err = ffi.Error()

        def create():
            self._check(lambda: lib.rsp_ucx_create(pool._handle(), ctypes.byref(out),
                                                   ctypes.byref(err)), err)
            self._u = out.value
            pool._xfer_keep(self, True)  # cleanup() destroys it before the pool

        pool._xfer_end(create)

    def _check(self, call, err):
        from .pool import _check

        _check(call(), err)

    def _enter(self):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("rsp.ucx.Transport is not thread-safe: another call on it is "
                               "in progress")
        if self._u is None:
            self._busy.release()
            raise ValueError("the transport is closed")

    def _run(self, fn, *args):
        """fn(*args) as one of the pool's calls (cleanup() waits for it),
        alone on this transport."""
        self._enter()
        try:
            return self._pool._xfer_end(fn, *args)
        finally:
            self._busy.release()

    def connect(self, sock, timeout=None):
        """Exchange worker addresses, regions and remote keys with the peer
        over sock (a connected stream socket.socket, or its file
        descriptor; both sides call connect on theirs) and open the
        endpoint (rsp_ucx_connect). The socket stays the caller's: keep it
        open while the transport is used. RspError RSP_ETIMEDOUT,
        RSP_EDEVICE (UCX or the socket failed)."""
        if isinstance(sock, bool) or not (isinstance(sock, int) or hasattr(sock, "fileno")):
            raise TypeError(f"sock must be a socket or a file descriptor, not "
                            f"{type(sock).__name__}")
        fd = sock if isinstance(sock, int) else sock.fileno()
        if not isinstance(fd, int) or not 0 <= fd < 1 << 31:
            raise ValueError(f"sock: file descriptor {fd!r} is not open")
        t = _timeout_ns(timeout)
        err = ffi.Error()

        def run():
            self._sock = sock
            self._check(lambda: self._lib.rsp_ucx_connect(self._u, fd, t, ctypes.byref(err)), err)

        self._run(run)

    def send(self, export, timeout=None):
        """Offer export (an open rsp.Export of this transport's pool) to the
        peer and wait for its answer (rsp_ucx_send): returns once the peer
        committed its import; RspError with the peer's status and message
        if it refused or aborted, RSP_EDEVICE if it went away, RSP_ETIMEDOUT.
        The export stays open either way: close it after."""
        if not isinstance(export, _xfer.Export):
            raise TypeError(f"export must be an rsp.Export, not {type(export).__name__}")
        if export._pool is not self._pool:
            raise ValueError("export: an export of another pool than the transport's")
        t = _timeout_ns(timeout)
        err = ffi.Error()

        def run():
            with export._mu:  # a close() on another thread waits for the send
                if export._h is None:
                    raise ValueError("export: the export is closed")
                self._check(lambda: self._lib.rsp_ucx_send(self._u, export._h, t,
                                                           ctypes.byref(err)), err)

        self._run(run)

    def _rid(self, rid):
        with self._pool._lock:
            return self._pool._rids.get(rid)

    def receive(self, rid, timeout=None, seq_begin=0, seq_end=0) -> "_xfer.Header":
        """Receive one offer and import it as request rid (a checkpoint's
        offer: under its key, rid ignored) (rsp_ucx_receive): all of it
        committed, or nothing (the import aborted, the exporter told).
        seq_begin, seq_end: the begin's and the commit's numbers in an
        ordered pool. Returns the offer's header fields (its tag, the
        exporter's generations). RspError on a refusal (RSP_EINVAL naming
        the layout difference, RSP_ECAPACITY, ...) or a transport failure
        (RSP_EDEVICE, RSP_ETIMEDOUT: the connection is then closed)."""
        v = self._rid(rid)
        t = _timeout_ns(timeout)
        sb = _u64(seq_begin, "seq_begin")
        se = _u64(seq_end, "seq_end")
        h = ffi.XferHeader()
        err = ffi.Error()
        self._run(self._check, lambda: self._lib.rsp_ucx_receive(
            self._u, v, sb, se, t, ctypes.byref(h), ctypes.byref(err)), err)
        return _header(h)

    def receive_begin(self, rid, timeout=None, seq_begin=0) -> Received:
        """Receive one offer, begin its import as rid and pull every byte
        into it (rsp_ucx_receive_begin): a Received whose extents can be
        read before receive_end commits or aborts it; the exporter waits
        meanwhile. A refused begin is RspError (the exporter told); a
        failed pull aborts the import before RspError is raised, so nothing
        stays reserved."""
        v = self._rid(rid)
        t = _timeout_ns(timeout)
        sb = _u64(seq_begin, "seq_begin")
        h = ffi.XferHeader()
        imp = ctypes.c_void_p()
        err = ffi.Error()

        def run():
            st = self._lib.rsp_ucx_receive_begin(self._u, v, sb, t, ctypes.byref(h),
                                                 ctypes.byref(imp), ctypes.byref(err))
            if st != ffi.OK and imp.value:
                # The pull failed: the import is open and the endpoint
                # closed, so the end only aborts it (seq 0: an ordered
                # pool's caller gets the begin's failure to act on).
                self._lib.rsp_ucx_receive_end(self._u, imp.value, st, 0, 0, None)
            self._check(lambda: st, err)
            return Received(self, imp.value, _header(h))

        r = self._run(run)
        self._pool._xfer_keep(r, True)
        return r

    def receive_end(self, imp, ok=True, seq_end=0, timeout=None, status="RSP_EINVAL") -> bool:
        """End imp (a Received of this transport) (rsp_ucx_receive_end):
        ok: commit it; else abort it (its slots zeroed and freed) and the
        exporter's send() raises RspError with status. Answers the exporter
        either way. Returns True once committed, False when aborted as
        asked; RspError if the commit failed (then aborted, the exporter
        told). seq_end: the commit's or abort's number in an ordered pool."""
        if not isinstance(imp, Received) or imp._transport is not self:
            raise TypeError(f"imp must be a Received of this transport's receive_begin, not "
                            f"{type(imp).__name__}")
        if not isinstance(ok, bool):
            raise TypeError(f"ok must be a bool, not {type(ok).__name__}")
        verdict = ffi.OK if ok else _status(status)
        se = _u64(seq_end, "seq_end")
        t = _timeout_ns(timeout)
        err = ffi.Error()

        def run():
            with imp._mu:
                h, imp._h = imp._h, None
                if h is None:
                    raise ValueError("imp: the import was already ended")
                st = self._lib.rsp_ucx_receive_end(self._u, h, verdict, se, t, ctypes.byref(err))
            self._pool._xfer_keep(imp, False)  # freed by the end, whatever its outcome
            if ok:
                self._check(lambda: st, err)
            return st == ffi.OK

        return self._run(run)

    def _batch_fn(self, name):
        fn = getattr(self._lib, name, None)
        if fn is None:
            raise RuntimeError(f"rsp.ucx: this librsp_ucx has no {name} (it is older than the "
                               f"batch form)")
        return fn

    def send_many(self, exports, timeout=None) -> List[Outcome]:
        """Offer every export (a list or tuple of 1 to 65536 open rsp.Exports
        of this pool) in one message and wait for the peer's one answer
        (rsp_ucx_send_many): each request's Outcome, in order (a refused one
        fails alone; a malformed answer: RSP_EINVAL for every one).
        RspError when no answer came (RSP_EDEVICE, RSP_ETIMEDOUT): the peer
        commits only once every byte arrived, but an answer lost after its
        commit looks the same here, so the importer's outcome is the one
        that counts. The exports stay open: close them after.
        O(len(exports) + extents) plus the transfer."""
        fn = self._batch_fn("rsp_ucx_send_many")
        if isinstance(exports, _xfer.Export) or not isinstance(exports, (list, tuple)):
            raise TypeError(f"exports must be a list or tuple of rsp.Exports, not "
                            f"{type(exports).__name__}")
        if not 0 < len(exports) <= ffi.MAX_MSG_RIDS:
            raise ValueError(f"exports: {len(exports)} exports, not 1 to {ffi.MAX_MSG_RIDS}")
        for i, e in enumerate(exports):
            if not isinstance(e, _xfer.Export):
                raise TypeError(f"exports[{i}] must be an rsp.Export, not {type(e).__name__}")
            if e._pool is not self._pool:
                raise ValueError(f"exports[{i}]: an export of another pool than the transport's")
        n = len(exports)
        t = _timeout_ns(timeout)
        unset = -1  # what the call leaves in statuses when an argument is bad
        statuses = (ffi.c_status * n)(*([unset] * n))
        err = ffi.Error()

        def run():
            with contextlib.ExitStack() as held:
                # Each export's lock once (a close() on another thread waits).
                for e in {id(e): e for e in exports}.values():
                    held.enter_context(e._mu)
                for i, e in enumerate(exports):
                    if e._h is None:
                        raise ValueError(f"exports[{i}]: the export is closed")
                handles = (ctypes.c_void_p * n)(*[e._h for e in exports])
                st = fn(self._u, handles, n, t, statuses, ctypes.byref(err))
            # No answer: the call wrote its own status for every request.
            if st != ffi.OK and (statuses[0] == unset or (
                    st in (_EDEVICE, _ETIMEDOUT) and all(x == st for x in statuses))):
                self._check(lambda: st, err)
            return [Outcome(_status_name(x)) for x in statuses]

        return self._run(run)

    def receive_many(self, rids, timeout=None, seqs=None) -> List[Outcome]:
        """Receive one offer of up to len(rids) requests and import request
        i as rids[i] (rsp_ucx_receive_many): one flush for all, each
        committed whole or aborted alone, one answer. seqs: None, or one
        (begin, end) pair of numbers per rid for an ordered pool. Returns an
        Outcome per request the offer carried (status and header). RspError
        when the offer never came, when it carried more than len(rids)
        (RSP_ECAPACITY: every request refused), or when the transfer failed
        as a whole (RSP_EDEVICE, RSP_ETIMEDOUT: none committed, the
        connection closed)."""
        fn = self._batch_fn("rsp_ucx_receive_many")
        if isinstance(rids, (list, tuple)) and not rids:
            raise ValueError("rids: no request ids")
        vals = self._pool._rid_array(rids, True)
        cap = len(vals)
        seq_arr = None
        if seqs is not None:
            if not isinstance(seqs, (list, tuple)) or len(seqs) != cap:
                raise TypeError(f"seqs must be None or a list of {cap} (begin, end) pairs")
            flat = []
            for i, pair in enumerate(seqs):
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise TypeError(f"seqs[{i}] must be a (begin, end) pair")
                flat += [_u64(pair[0], f"seqs[{i}][0]"), _u64(pair[1], f"seqs[{i}][1]")]
            seq_arr = (ctypes.c_uint64 * (2 * cap))(*flat)
        t = _timeout_ns(timeout)
        ids = (ctypes.c_uint64 * cap).from_buffer(vals)
        headers = (ffi.XferHeader * cap)()
        statuses = (ffi.c_status * cap)()
        count = ctypes.c_uint32()
        err = ffi.Error()

        def run():
            st = fn(self._u, ids, cap, seq_arr, t, ctypes.byref(count), headers, statuses,
                    ctypes.byref(err))
            k = min(count.value, cap)
            out = [Outcome(_status_name(statuses[i]), _header(headers[i])) for i in range(k)]
            if st != ffi.OK and (count.value == 0 or count.value > cap or (
                    st in (_EDEVICE, _ETIMEDOUT) and not any(o.ok for o in out))):
                self._check(lambda: st, err)
            return out

        return self._run(run)

    def _destroy(self):
        u, self._u = self._u, None
        if u is not None:
            self._lib.rsp_ucx_destroy(u)
        self._sock = None

    def release(self):
        """The pool's cleanup(): destroy it before the pool closes."""
        self._destroy()

    def close(self):
        """Close the endpoint, unregister the pool's regions and free
        (rsp_ucx_destroy). Idempotent; the socket stays open."""
        if self._u is None:
            return
        from .pool import RspError

        self._enter()
        try:
            self._pool._xfer_end(self._destroy)
            self._pool._xfer_keep(self, False)
        except RspError:
            pass  # the pool is closing: its cleanup() destroys the transport
        finally:
            self._busy.release()

    @property
    def closed(self) -> bool:
        return self._u is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _u64(v, what):
    from .pool import _uint

    return _uint(v, what, 64)
