# Export and import (docs/semantics.md 9.4, docs/transfer.md): the pool's
# regions, an export's header and extents, an import's extents, commit
# and abort. RecurrentStatePool.regions / export / import_begin make these
# objects; a transport (ctypes.memmove in one process, UCX, NIXL, ...)
# moves the bytes between them.
#
# SPDX-License-Identifier: Apache-2.0
import ctypes
import threading
from typing import List, NamedTuple

from . import _ffi as ffi


class Region(NamedTuple):
    """One allocation of a pool's storage (rsp_region): a transport
    registers each once. memory: "host" or "cuda"; block: the block's name;
    space: "slots", "device_tier" or "host_tier"."""

    base: int
    length: int
    memory: str
    block: str
    space: str


class Extent(NamedTuple):
    """Bytes inside a region (rsp_extent): region is an index into the
    pool's regions()."""

    region: int
    offset: int
    length: int


class Holding(NamedTuple):
    """One exported holding of a header: its label's name, has_state and the
    exporter's generation (a checkpoint's label is "")."""

    label: str
    has_state: bool
    generation: int


class Header(NamedTuple):
    """The fields of an export's header an engine reads (header_fields)."""

    what: str  # "request" or "checkpoint"
    rid: int
    key: int
    tag: int
    world_size: int
    rank: int
    target_world_size: int
    target_rank: int
    holdings: List[Holding]


def header_fields(header) -> Header:
    """The fields of a header (bytes, as Export.header gives and a transport
    carries). ValueError when it is not an rsp_xfer_header's size."""
    h = _header_struct(header, "header")
    return Header("checkpoint" if h.what == ffi.XFER_CHECKPOINT else "request", h.rid, h.key,
                  h.tag, h.world_size, h.rank, h.target_world_size, h.target_rank,
                  [Holding(x.label.decode("utf-8", "replace"), bool(x.has_state), x.generation)
                   for x in h.holdings[:min(h.num_holdings, ffi.MAX_LABELS)]])


def _header_struct(header, what):
    if not isinstance(header, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes (Export.header), not {type(header).__name__}")
    size = ctypes.sizeof(ffi.XferHeader)
    if len(header) != size:
        raise ValueError(f"{what} has {len(header)} bytes, not the {size} of an rsp_xfer_header")
    return ffi.XferHeader.from_buffer_copy(bytes(header))


def _extents(ptr, n):
    return [Extent(ptr[i].region, ptr[i].offset, ptr[i].length) for i in range(n)]


def _check(status, err):
    # pool.py's, imported late: pool.py imports this module
    from .pool import _check as check

    check(status, err)


class Export:
    """An open export (rsp_export_open): its holdings stay pinned (no step
    may write them; release, reset, remove and swap-out of them are
    RSP_EPINNED; a checkpoint keeps a caller pin) until close(), the end of
    a with block, or the pool's cleanup() (the pool holds it until then:
    dropping it does not close it). header: the bytes to send; extents:
    this pool's bytes, in the order the importer lists its own."""

    def __init__(self, pool, handle):
        self._pool = pool
        self._h = handle
        self._mu = threading.Lock()
        self.header = ctypes.string_at(ffi.export_header(handle), ctypes.sizeof(ffi.XferHeader))
        n = ctypes.c_uint32()
        self.extents = _extents(ffi.export_extents(handle, ctypes.byref(n)), n.value)

    @property
    def fields(self) -> Header:
        return header_fields(self.header)

    def _end(self):
        with self._mu:
            h, self._h = self._h, None
            if h is None:
                return
            err = ffi.Error()
            st = ffi.export_close(h, ctypes.byref(err))
            if st != ffi.OK:
                self._h = h  # still open: close again
                _check(st, err)
        self._pool._xfer_keep(self, False)

    def close(self):
        """Unpin (rsp_export_close). Idempotent; after cleanup() a no-op."""
        if self._h is not None:
            self._pool._xfer_end(self._end)

    release = _end  # what the pool's cleanup() calls on what is still open

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Import:
    """An import begun (rsp_import_begin): its slots (or checkpoint slot)
    are reserved and zeroed, invisible until commit(). A with block aborts
    it on the way out unless it was committed (unordered pools); so does the
    pool's cleanup(), which holds it until then."""

    def __init__(self, pool, handle, what):
        self._pool = pool
        self._h = handle
        self._mu = threading.Lock()
        self.what = what

    def extents(self, src_world_size=1, src_rank=0) -> List[Extent]:
        """This pool's extents that receive source rank src_rank's share (a
        source of src_world_size ranks), paired one to one with that rank's
        Export.extents (rsp_import_extents)."""
        from .pool import _uint

        sw = _uint(src_world_size, "src_world_size")
        sr = _uint(src_rank, "src_rank")
        with self._mu:
            if self._h is None:
                raise ValueError("the import was committed or aborted")
            n = ctypes.c_uint32()
            err = ffi.Error()
            _check(ffi.import_extents(self._h, sw, sr, None, 0, ctypes.byref(n),
                                      ctypes.byref(err)), err)
            out = (ffi.Extent * max(n.value, 1))()
            _check(ffi.import_extents(self._h, sw, sr, out, n.value, ctypes.byref(n),
                                      ctypes.byref(err)), err)
            return _extents(out, n.value)

    def _end(self, commit, seq):
        with self._mu:
            h, self._h = self._h, None
            if h is None:
                if commit:
                    raise ValueError("the import was committed or aborted")
                return
            err = ffi.Error()
            fn = ffi.import_commit if commit else ffi.import_abort
            st = fn(h, seq, ctypes.byref(err))
            if st != ffi.OK:
                self._h = h  # still open: commit again, or abort
                _check(st, err)
        self._pool._xfer_keep(self, False)

    def commit(self, seq=None):
        """Make it visible (rsp_import_commit): has_state as exported, or the
        checkpoint under its key. A failure (RspError) leaves it open."""
        self._pool._xfer_end(self._end, True, self._pool._xfer_seq(seq))

    def abort(self, seq=None):
        """Zero and free what begin reserved (rsp_import_abort). Idempotent;
        after cleanup() a no-op."""
        if self._h is not None:
            self._pool._xfer_end(self._end, False, self._pool._xfer_seq(seq))

    def release(self):
        """The pool's cleanup(): abort what is still open. An ordered pool's
        abort needs a number the caller did not give: the handle is dropped
        and the reserved slots go with the pool."""
        if not self._pool._ordered:
            self._end(False, 0)
        with self._mu:
            self._h = None

    @property
    def open(self) -> bool:
        return self._h is not None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._h is not None and not self._pool._ordered:
            self.abort()
