# RecurrentStatePool: the seed page's pool (docs/python.md) on librsp.
#
# SPDX-License-Identifier: Apache-2.0
import array
import ctypes
import functools
import json
import operator
import os
import struct
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

from . import _dlpack
from . import _ffi as ffi
from . import xfer as _xfer
from .ids import RidMap

# --- errors -----------------------------------------------------------------


class RspError(Exception):
    """A failed rsp call: `status` (an int), `name` ("RSP_EINVAL") and rsp's message."""

    def __init__(self, status, message):
        self.status = status
        self.name = ffi.STATUS_NAMES[status] if 0 <= status < len(ffi.STATUS_NAMES) else str(status)
        self.message = message
        super().__init__(f"{self.name}: {message}")


def _check(status, err):
    if status != ffi.OK:
        raise RspError(status, err.message.decode("utf-8", "replace"))


def _c_name(name, what):
    """name (a str) as the UTF-8 bytes of a C string; `what` names the
    argument in the error. A NUL is refused: C would see the name cut there
    ("ssm\\0x" would be block "ssm")."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"{what} {name!r} has a NUL byte")
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate
        raise ValueError(f"{what} {name!r} is not valid UTF-8: {e.reason}") from None


_U64 = 1 << 64


def _uint(v, what, bits=32):
    """v, an int that fits an unsigned C field of `bits` bits (ctypes would
    wrap -1 to 2**bits - 1 without a word)."""
    if not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    if not 0 <= v < 1 << bits:
        raise ValueError(f"{what} {v} is not in [0, 2**{bits})")
    return v


def _int(v, what, bits=32):
    """v, an int that fits a signed C field of `bits` bits."""
    if not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise ValueError(f"{what} {v} does not fit {bits} bits")
    return v


# --- declarations ------------------------------------------------------------

_DTYPE_CODES = {name: i for i, name in enumerate(ffi.DTYPES)}


def _dtype_code(dtype):
    """rsp_dtype of a name ("float32") or a torch dtype (torch.float32)."""
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    aliases = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
               "long": "int64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}
    name = aliases.get(name, name)
    if name not in _DTYPE_CODES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(ffi.DTYPES)}")
    return _DTYPE_CODES[name]


@dataclass(frozen=True)
class BlockSpec:
    """One named block of per-slot state: its unsharded shape, dtype and the
    axes split across tensor-parallel ranks."""

    name: str
    shape: Tuple[int, ...]
    dtype: object = "float32"
    shard_dims: Tuple[int, ...] = ()


@dataclass
class PoolConfig:
    """The pool's shape (rsp_pool_config); fields as in rsp.h."""

    num_layers: int
    blocks: Sequence[BlockSpec]
    max_slots: int
    sink: bool = True
    world_size: int = 1
    rank: int = 0
    cuda_ordinal: int = 0
    max_inflight_steps: int = 0
    inbox_capacity: int = 0
    owner_cpu: int = -1
    max_checkpoints: int = 0
    max_host_checkpoints: int = 0
    checkpoint_demote: bool = False
    # Which checkpoint a full tier evicts: "lru" or "value" (recency +
    # checkpoint_value_weight x f x value per byte, f growing with the log
    # of its restores; Pool.checkpoint_value).
    checkpoint_policy: str = "lru"
    checkpoint_value_weight: float = 0.0
    # Ordered posting: every slot-changing call then carries seq= (see
    # "Ordered posting" in docs/python.md); 0: the default gap timeout (1 s).
    ordered: bool = False
    reorder_timeout_ns: int = 0
    # Guard mode (docs/guide.md, "Debugging"): each commit checks that the
    # forward wrote no slot it did not address; findings go to on_error
    # (Failure.guard). Costs a device wait and checksums per plan and commit.
    guard: bool = False
    # Called on the pool's owner thread (docs/python.md, "Callbacks"):
    # on_error(Failure), on_checkpoint_evict(CheckpointEvent). They must not
    # block or call the pool; what they raise is caught and kept.
    on_error: Optional[Callable] = None
    on_checkpoint_evict: Optional[Callable] = None
    # Record every message the owner handles to this file (rsp-replay
    # replays it; docs/guide.md, "Operating"); None: no recording.
    record_path: Optional[str] = None


class Row(NamedTuple):
    """One row of a step: (rid, label, span) and its flags."""

    rid: object
    label: str = "main"
    span: int = 1
    padding: bool = False
    skip_post_forks: bool = False
    fork_group: int = 0
    # Speculative decoding (docs/semantics.md 9.3): per-token states, and at
    # commit the accepted count (0 .. span).
    per_token_states: bool = False
    accepted: int = 0


class Fork(NamedTuple):
    """Copy label `src`'s slot onto label `dst`'s, per rid of the step (group 0:
    every rid; g: the rids whose rows carry fork_group g)."""

    src: str
    dst: str
    group: int = 0


class Lease(NamedTuple):
    bucket_bs: int
    bucket_id: int
    lease_slot: int


class Checkpoint(NamedTuple):
    """A checkpoint a step takes at its commit (rsp_checkpoint_decl): the
    state its forward left in (rid, label), stored under key in tier
    ("device" or "host"). (rid, label) must be a row of the step with span > 0."""

    rid: object
    label: str
    key: int
    tier: str = "device"


class Restore(NamedTuple):
    """A step row that starts from the checkpoint under key (rsp_restore):
    the plan copies it into the row's slot before the forward, has_state
    true. (rid, label) must be a row of the step with span > 0."""

    rid: object
    label: str
    key: int


@dataclass
class Step:
    """One batched forward, passed to admit, plan and commit alike."""

    step_id: int
    rows: Sequence = ()
    pre_forks: Sequence[Fork] = ()
    post_forks: Sequence[Fork] = ()
    capture: bool = False
    preplan: bool = False
    lease: Optional[Lease] = None
    checkpoints: Sequence[Checkpoint] = ()  # taken at commit
    restores: Sequence[Restore] = ()  # copied in at plan
    # The marshalled declaration, built on first use by a pool (see _Marshal).
    _wire: object = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True)
class AdmitOutcome:
    """What admit says: ok, or the (rid, label) that found no slot and by how much."""

    ok: bool
    rid: object = None
    label: Optional[str] = None
    slots_short: int = 0
    usable: int = 0
    free: int = 0
    # step_next: the published plan's rsp_plan_digest (None: nothing planned,
    # or not a step_next). Not part of equality: an ok outcome is an ok outcome.
    plan_digest: Optional[int] = field(default=None, compare=False)

    def __bool__(self):
        return self.ok

    @property
    def reason(self):
        if self.ok:
            return None
        return (f"pool full: ({self.rid!r}, {self.label!r}) found no slot; "
                f"{self.slots_short} short, {self.free} of {self.usable} free")


@dataclass(frozen=True)
class SlotState:
    index: int
    has_state: bool = False
    generation: int = 0


# What admit answers when the step got its slots: one shared (frozen)
# object, since a frozen dataclass's __init__ costs ~0.8 us (a setattr per
# field), a cost the step loop would pay every step.
_ADMIT_OK = AdmitOutcome(True)
_ADMIT_OK_FIELDS = dict(_ADMIT_OK.__dict__)
_new = object.__new__


def _admit_ok(digest):
    """An ok AdmitOutcome carrying a plan digest, built from _ADMIT_OK's
    fields (~0.25 us instead of __init__'s ~0.8)."""
    o = _new(AdmitOutcome)
    d = o.__dict__
    d.update(_ADMIT_OK_FIELDS)
    d["plan_digest"] = digest
    return o


def _tier_name(tier):
    return ffi.TIERS[tier] if 0 <= tier < len(ffi.TIERS) else tier


@dataclass(frozen=True)
class CheckpointInfo:
    """What is stored under a key (rsp_checkpoint_query): its tier ("device"
    or "host"), slot id (request slots first, then the device tier, then the
    host tier), bytes (the pool's slot_bytes), pins (steps in flight
    restoring from it), user_pins (checkpoint_pin count) and last_use (the
    pool's use clock at its last take, restore or pin)."""

    key: int
    tier: str
    slot: int
    bytes: int
    pins: int
    user_pins: int
    last_use: int


@dataclass(frozen=True)
class CheckpointLoc:
    """Where a checkpoint is, as a reader sees it (rsp_checkpoint_lookup)."""

    key: int
    tier: str
    slot: int


@dataclass(frozen=True)
class Failure:
    """A failure nobody would otherwise see (rsp_failure), as on_error gets
    it: status and name ("RSP_ECAPACITY"), the message kind ("commit",
    "step", ...), its step id (None when the kind names no step), rsp's
    message, and checkpoint_key: the key of a take its commit skipped (None
    for any other failure)."""

    status: int
    name: str
    kind: str
    step_id: Optional[int]
    message: str
    checkpoint_key: Optional[int] = None
    # Guard mode's finding (rsp_guard_violation as a dict: slot, held, rid,
    # label, step_id, block, layer, regions); None for any other failure.
    guard: Optional[dict] = None


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint the pool evicted for room (rsp_checkpoint_event), as
    on_checkpoint_evict gets it: key, the tier it left, and demoted (True:
    it moved to the host tier and is still stored under key; False: gone)."""

    key: int
    tier: str
    demoted: bool


class SpecIndices(NamedTuple):
    """One label's per-token state indices in a plan (docs/semantics.md 9.3):
    [length][width] int32, row-major, the rows in addressing order; column 0
    the initial state's slot, columns 1..span a per-token row's output
    slots, the pad index elsewhere. indices: a torch.int32 tensor of shape
    (length, width) (a copy; None without torch); raw: the same as bytes.
    device: under a lease, the (length, width) tensor over rsp's own buffer
    of the key, on the pool's device (no copy): the address a captured
    graph keeps, this step's while it is in flight; None without a lease
    or without torch."""

    indices: object
    width: int
    num_rows: int
    length: int
    raw: bytes
    device: object = None

    def row(self, i):
        """Entry i's width slot ids, as ints."""
        if not 0 <= i < self.length:
            raise ValueError(f"i = {i}: the tensor has {self.length} rows")
        w = self.width
        return list(struct.unpack_from(f"={w}i", self.raw, 4 * w * i))


class _CudaArray:
    """__cuda_array_interface__ over rsp's device memory: torch.as_tensor
    wraps it without a copy (and without owning it)."""

    def __init__(self, addr, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<i4", "data": (addr, False),
                                         "version": 3, "strides": None}


def _buffer_tensor(addr, length, width, cuda):
    """An int32 (length, width) torch tensor over rsp's buffer at addr: on
    the GPU (cuda) or in host memory. Not owned: valid while rsp keeps the
    buffer's contents for the step (semantics.md 9.3)."""
    torch = _torch()
    if cuda:
        return torch.as_tensor(_CudaArray(addr, (length, width)))  # the pointer names its GPU
    arr = (ctypes.c_int32 * (length * width)).from_address(addr)
    return torch.frombuffer(arr, dtype=torch.int32).reshape(length, width)


class RecurrentAddressing:
    """Where one label's rows live this step: the pool's whole plan output.

    slot_indices (int32) and has_state (bool) are tensors on the pool's
    device; the host copies (host_slot_indices, host_has_state,
    generations) are lists made on first access from bytes copied at the
    read (a 256-row list costs ~10 us; most steps never ask)."""

    __slots__ = ("slot_indices", "has_state", "num_rows", "step_id", "_ready", "_si", "_hs",
                 "_gen", "_lists")

    def __init__(self, slot_indices, has_state, num_rows, si_bytes, hs_bytes, step_id, gen_bytes,
                 ready):
        self.slot_indices = slot_indices
        self.has_state = has_state
        self.num_rows = num_rows
        self.step_id = step_id
        # The plan's ready event: an ffi.Event, or its (kind, handle, value),
        # made into one on first use (a ctypes struct costs ~0.2 us, and a
        # CPU step that waited in addressing() never asks).
        self._ready = ready
        self._si, self._hs, self._gen = si_bytes, hs_bytes, gen_bytes
        self._lists = None

    @property
    def ready(self):
        """The plan's ready event (rsp_event): wait for it before the forward."""
        r = self._ready
        if type(r) is tuple:
            r = self._ready = ffi.Event(*r)
        return r

    def _host(self):
        if self._lists is None:
            si = array.array("i")
            si.frombytes(self._si)
            gen = array.array("Q")
            gen.frombytes(self._gen)
            self._lists = (si.tolist(), [b != 0 for b in self._hs], gen.tolist())
        return self._lists

    @property
    def host_slot_indices(self) -> Sequence[int]:
        return self._host()[0]

    @property
    def host_has_state(self) -> Sequence[bool]:
        return self._host()[1]

    @property
    def generations(self) -> Sequence[int]:
        return self._host()[2]

    def __repr__(self):
        return (f"RecurrentAddressing(step_id={self.step_id}, num_rows={self.num_rows}, "
                f"host_slot_indices={self.host_slot_indices})")


# --- marshalling ---------------------------------------------------------------

# rsp_row packed by struct (faster than ctypes field stores); the tail pad
# makes it sizeof(rsp_row), which test_abi.py checks against the compiler.
_ROW = struct.Struct("<QIi??H4x")
if _ROW.size != ctypes.sizeof(ffi.Row):
    raise ImportError(f"rsp: rsp_row packs to {_ROW.size} bytes, ctypes says "
                      f"{ctypes.sizeof(ffi.Row)}")


_ROW_WORDS = _ROW.size // 8  # rsp_row in u64 words (rid is word 0)


def _column(get, keys, slow):
    """[get(k) for k in keys], with slow(k) for the keys get misses."""
    col = list(map(get, keys))
    if None in col:
        col = [slow(k) if v is None else v for k, v in zip(keys, col)]
    return col


def _fill_rows(pool, rows, buf):
    """rows (tuples or lists (rid, label, span[, padding, skip_post_forks,
    fork_group, per_token_states, accepted]) or Rows) -> rsp_row[len(rows)] in buf. Returns whether every
    row is a tuple or a Row (immutable: the last-rows cache may keep them).

    Each column is converted at C speed; only when a conversion fails are
    the rows walked again in Python, to name the first bad one."""
    n = len(rows)
    w = _ROW.size
    mv = memoryview(buf)
    types = set(map(type, rows))
    if not _ROW_TYPES.issuperset(types) and not all(
            issubclass(t, (tuple, list)) and not issubclass(t, (str, bytes)) for t in types):
        _bad_row(rows)
    lens = set(map(len, rows))
    if not _ROW_LENS.issuperset(lens):
        _bad_row(rows)
    keys = list(map(_item0, rows))
    rids = pool._rids
    try:
        try:
            ints = array.array("Q", keys)  # int ids: checked (int, 0..2**64) in C
            if True in map(type(True).__instancecheck__, keys):
                raise TypeError("a bool is not a request id")
        except (TypeError, OverflowError):
            ints = array.array("Q", _column(rids.cache_get, keys, rids.get))
        else:
            rids.add_ints(keys)
    except (TypeError, ValueError, OverflowError):
        _name_bad(keys, "rid", rids.get)
        raise
    mv.cast("Q")[0::_ROW_WORDS] = ints
    col = list(map(_item1, rows))
    try:
        mv.cast("I")[2::w // 4] = array.array("I", _column(pool._labels.get, col, pool._label_id))
    except (TypeError, ValueError, OverflowError):
        _name_bad(col, "label", pool._label_id)
        raise
    col = list(map(_item2, rows))
    try:
        mv.cast("i")[3::w // 4] = array.array("i", col)
    except (TypeError, OverflowError):
        _name_bad(col, "span", functools.partial(_int, what="span", bits=32))
        raise
    if lens != {3}:  # flags: only Rows (or 4- to 8-tuples) carry them
        full = [r if len(r) == 8 else Row(*r) for r in rows]
        mv[16::w] = _bools(list(map(_item3, full)), "padding")
        mv[17::w] = _bools(list(map(_item4, full)), "skip_post_forks")
        col = list(map(_item5, full))
        try:
            mv.cast("H")[9::w // 2] = array.array("H", col)
        except (TypeError, OverflowError):
            _name_bad(col, "fork_group", functools.partial(_uint, what="fork_group", bits=16))
            raise
        mv[20::w] = _bools(list(map(_item6, full)), "per_token_states")
        col = list(map(_item7, full))
        try:
            mv.cast("H")[11::w // 2] = array.array("H", col)
        except (TypeError, OverflowError):
            _name_bad(col, "accepted", functools.partial(_uint, what="accepted", bits=16))
            raise
    assert len(mv) == n * w
    return _FROZEN_ROWS.issuperset(types)


_item0, _item1, _item2, _item3, _item4, _item5, _item6, _item7 = (
    operator.itemgetter(i) for i in range(8))
_BOOL = frozenset((bool,))
_ROW_TYPES = frozenset((tuple, list, Row))
_ROW_LENS = frozenset((3, 4, 5, 6, 7, 8))
_FROZEN_ROWS = frozenset((tuple, Row))  # the row types the last-rows cache keeps


def keep_row_type(t):
    """Let the last-rows cache keep rows of type t, as it keeps tuples and
    Rows: t must be a tuple subclass with tuple's equality and no instance
    dict (a NamedTuple, such as an engine's Segment), so a kept row cannot
    change after the comparison. Returns whether t was accepted."""
    global _FROZEN_ROWS
    if not (isinstance(t, type) and issubclass(t, tuple) and t.__eq__ is tuple.__eq__
            and t.__dictoffset__ == 0):
        return False
    _FROZEN_ROWS = _FROZEN_ROWS | {t}
    return True


def _bad_row(rows):
    """Raise for the first row that is not a 3- to 6-item tuple, list or Row."""
    for i, r in enumerate(rows):
        if not isinstance(r, (tuple, list)) or isinstance(r, (str, bytes)):
            raise TypeError(f"rows[{i}]: a row is a (rid, label, span) tuple or a Row, not "
                            f"{type(r).__name__} {r!r}")
        if not 3 <= len(r) <= 8:
            raise ValueError(f"rows[{i}]: a row is (rid, label, span[, padding, "
                             f"skip_post_forks, fork_group, per_token_states, accepted]), not "
                             f"{len(r)} items {tuple(r)!r}")
    raise AssertionError("no bad row")  # pragma: no cover


def _name_bad(col, what, check):
    """Re-raise the error of the first value of a row column that `check`
    refuses as TypeError / ValueError naming the row (rows[i].what). Returns
    when check accepts every value (the caller re-raises its own error)."""
    for i, v in enumerate(col):
        try:
            check(v)
        except (TypeError, ValueError, OverflowError) as e:
            cls = TypeError if isinstance(e, TypeError) else ValueError
            raise cls(f"rows[{i}].{what}: {e}") from None


def _bools(col, what):
    """A column of row flags as bytes. Only bools: a C bool holding 2 (from
    padding=2) is undefined behaviour, and normalising would hide the
    caller's mistake."""
    if not _BOOL.issuperset(map(type, col)):
        i, v = next((i, v) for i, v in enumerate(col) if type(v) is not bool)
        raise TypeError(f"rows[{i}].{what} must be a bool, not {type(v).__name__}")
    return bytes(col)


class _Marshal:
    """A step's declaration in rsp's layout, built once and reused for admit,
    plan and commit of that Step (the arrays live as long as the Step).

    Rows are written a column at a time into one buffer through strided
    memoryviews (each column one C-level map and one strided copy), which
    is what keeps a 256-row step's marshalling a few microseconds; a row
    loop in Python costs ~0.2 us a row."""

    __slots__ = ("_step", "_n", "_sid", "_flags", "pre", "post", "keep", "ckpts", "rests",
                 "lite")

    def __init__(self, pool, step):
        rows = step.rows
        n = len(rows)
        last = pool._last_rows
        if n and last is not None and last[0] == rows:
            # The previous step's rows again (steady decode): the same
            # buffer, never written after it was filled, so a step_next
            # committing that step names the very rows of the new one and
            # the message carries (and the owner compares) them once.
            buf = last[1]
        else:
            buf = bytearray(_ROW.size * n)
            # Kept for the next step to compare with only when no row can
            # change: a list row edited in place would compare equal to
            # itself and the next step would get this step's bytes.
            if n and _fill_rows(pool, rows, buf):
                pool._last_rows = (list(rows), buf)
        sid = step.step_id
        if (not step.pre_forks and not step.post_forks and step.lease is None
                and not step.checkpoints and not step.restores
                and type(sid) is int and 0 <= sid < _U64):
            # rows and flags only (a steady step): what rsp._fast takes
            self.pre = self.post = self.ckpts = self.rests = self._step = None
            self._n, self._sid, self.keep = n, sid, buf
            self._flags = (step.capture, step.preplan)
            self.lite = (sid, buf, n, step.capture is True, step.preplan is True)
            if type(step.capture) is not bool or type(step.preplan) is not bool:
                self.lite = (sid, buf, n, bool(step.capture), bool(step.preplan))
            return
        self.pre = self._forks(pool, step.pre_forks, "pre_forks")
        self.post = self._forks(pool, step.post_forks, "post_forks")
        if type(sid) is not int or not 0 <= sid < _U64:  # the common case without a call
            _uint(sid, "step_id", 64)
        lease = _lease(step.lease) if step.lease is not None else None
        self.ckpts = self.rests = None
        if step.checkpoints:
            self.ckpts = _decls(pool, step.checkpoints, "checkpoints", Checkpoint)
        if step.restores:
            self.rests = _decls(pool, step.restores, "restores", Restore)
        self._n, self._sid, self.keep = n, sid, buf
        self._flags = (step.capture, step.preplan)
        self._step = None
        if lease is not None:
            self._build(lease)
        # The step as rsp._fast takes it (no ctypes struct built) when it
        # has nothing but rows and flags; None: pass the struct's address.
        self.lite = ((sid, buf, n, bool(step.capture), bool(step.preplan))
                     if self.pre is None and self.post is None and lease is None
                     and self.ckpts is None and self.rests is None else None)

    @property
    def step(self):
        """The rsp_step (ctypes), built on first use: a step that only
        rsp._fast's step_next sends never needs one."""
        s = self._step
        return s if s is not None else self._build(None)

    def _build(self, lease):
        n = self._n
        s = ffi.Step()
        s.step_id = self._sid
        if n:
            s.rows = (ffi.Row * n).from_buffer(self.keep)
            s.num_rows = n
        if self.pre is not None:
            s.pre_forks, s.num_pre_forks = self.pre, len(self.pre)
        if self.post is not None:
            s.post_forks, s.num_post_forks = self.post, len(self.post)
        s.capture, s.preplan = self._flags
        if lease is not None:
            s.has_lease = True
            s.lease = lease
        if self.ckpts is not None:
            s.checkpoints, s.num_checkpoints = self.ckpts, len(self.ckpts)
        if self.rests is not None:
            s.restores, s.num_restores = self.rests, len(self.rests)
        self._step = s
        return s

    @staticmethod
    def _forks(pool, forks, what):
        if not forks:
            return None
        arr = (ffi.Fork * len(forks))()
        for i, f in enumerate(forks):
            if not isinstance(f, Fork):
                if (not isinstance(f, (tuple, list)) or isinstance(f, (str, bytes))
                        or not 2 <= len(f) <= 3):
                    raise TypeError(f"{what}[{i}]: a fork is Fork(src, dst, group) or a "
                                    f"(src, dst[, group]) tuple, not {f!r}")
                f = Fork(*f)
            try:
                arr[i] = ffi.Fork(pool._label_id(f.src), pool._label_id(f.dst),
                                  _uint(f.group, "group"))
            except (TypeError, ValueError) as e:
                cls = TypeError if isinstance(e, TypeError) else ValueError
                raise cls(f"{what}[{i}]: {e}") from None
        return arr


def _tier(tier, what="tier"):
    """rsp_tier of "device" or "host"."""
    if not isinstance(tier, str):
        raise TypeError(f"{what} must be 'device' or 'host', not {type(tier).__name__}")
    if tier not in ffi.TIERS:
        raise ValueError(f"{what} {tier!r} is not 'device' or 'host'")
    return ffi.TIERS.index(tier)


def _decls(pool, items, what, cls):
    """A step's checkpoint takes (cls Checkpoint) or restores (Restore) as
    rsp_checkpoint_decl / rsp_restore arrays. Labels are interned as a
    step's rows and forks intern them; rids are looked up, not registered
    (each must be a row of the step, which registers it)."""
    if isinstance(items, (Checkpoint, Restore)) or not isinstance(items, (tuple, list)):
        raise TypeError(f"{what} must be a list of {cls.__name__}, not {type(items).__name__}")
    arr = ((ffi.CheckpointDecl if cls is Checkpoint else ffi.Restore) * len(items))()
    lo = 3
    hi = len(cls._fields)
    for i, d in enumerate(items):
        if not isinstance(d, cls):
            if (not isinstance(d, (tuple, list)) or isinstance(d, (str, bytes))
                    or not lo <= len(d) <= hi):
                raise TypeError(f"{what}[{i}]: {cls.__name__}({', '.join(cls._fields)}) or a "
                                f"tuple of those, not {d!r}")
            d = cls(*d)
        try:
            c = arr[i]
            c.rid = pool._rids.lookup(d.rid)
            c.label = pool._label_id(d.label)
            c.key = _uint(d.key, "key", 64)
            if cls is Checkpoint:
                c.tier = _tier(d.tier)
        except (TypeError, ValueError) as e:
            exc = TypeError if isinstance(e, TypeError) else ValueError
            raise exc(f"{what}[{i}]: {e}") from None
    return arr


def _lease(lease):
    """A step's lease as an rsp_lease; every field a u32."""
    if not isinstance(lease, (tuple, list)) or len(lease) != 3:
        raise TypeError(f"lease must be Lease(bucket_bs, bucket_id, lease_slot), not {lease!r}")
    return ffi.Lease(*(_uint(v, f"lease.{name}") for v, name in zip(lease, Lease._fields)))


# --- readers -------------------------------------------------------------------


class _Reader(threading.local):
    """This thread's registration as an rsp plan reader: made on its first
    read, undone when the thread ends (the finaliser of a thread-local runs
    in the exiting thread)."""

    registered = False

    def ensure(self):
        if not self.registered:
            err = ffi.Error()
            _check(ffi.reader_register(ctypes.byref(err)), err)
            self.registered = True
            self._token = _Unregister()


class _Unregister:
    def __del__(self):
        ffi.reader_unregister()


_reader = _Reader()

# --- the pool ------------------------------------------------------------------

_ESHUTDOWN = ffi.STATUS_NAMES.index("RSP_ESHUTDOWN")
_ECAPACITY = ffi.STATUS_NAMES.index("RSP_ECAPACITY")
_get_ident = threading.get_ident


def _guarded(method):
    """A pool method that keeps the C pool alive while it runs.

    The call enters itself in pool._calls before it reads pool._closing, and
    cleanup() sets _closing before it waits for _calls to empty: whichever
    of the two stores comes first (the GIL orders them), either cleanup sees
    the call and waits, or the call sees _closing and is refused. list
    append and remove are atomic under the GIL, so the hot path takes no
    lock (about 0.1 us a call).

    A call on the pool's owner thread (from inside an on_error or
    on_checkpoint_evict callback: _Hooks records the owner's ident before
    the callback runs) is refused too: a message posted there would wait
    for the very thread that must answer it."""

    @functools.wraps(method)
    def call(self, *args, **kw):
        calls = self._calls
        me = _get_ident()
        calls.append(me)
        try:
            if self._closing or me in self._in_callback:
                raise self._refusal(me)
            return method(self, *args, **kw)
        finally:
            calls.remove(me)

    return call


_IN_CALLBACK = ("called inside an on_error or on_checkpoint_evict callback (on the pool's owner "
                "thread, or on the thread of a synchronous call that ran in the owner's role): "
                "a callback must not call the pool, whose owner cannot answer while it runs "
                "the callback; copy what it needs and act on another thread")


class _Hooks:
    """The pool's Python callbacks (PoolConfig.on_error, on_checkpoint_evict)
    behind the C function pointers librsp calls in the owner's role: on the
    owner thread, or on the thread of a synchronous call that found the
    owner asleep and ran in its role (docs/python.md, "Callbacks").

    ctypes takes the GIL for each call, so the owner waits for the GIL
    while another thread holds it (up to sys.getswitchinterval()). What a
    callback raises is caught here: a Python exception must not cross into
    librsp's owner loop, and ctypes alone would only print it. The first is
    kept (RecurrentStatePool.callback_exception) and said on stderr; all
    are counted (callback_exceptions).

    The C pool holds pointers to the thunks until it is closed, so the
    pool takes a reference on this object that no Python teardown drops
    (Py_IncRef; given back after a close that succeeded): a thunk freed
    while the owner may still call it would crash the process."""

    def __init__(self, pool, on_error, on_evict):
        self._pool = weakref.ref(pool)
        self.on_error = on_error
        self.on_evict = on_evict
        self.count = 0
        self.first = None
        self.c_error = ffi.ON_ERROR(self._error) if on_error is not None else None
        self.c_evict = ffi.ON_EVICT(self._evict) if on_evict is not None else None

    def _enter(self):
        """Note this thread as inside a callback (_guarded refuses its pool
        calls meanwhile); returns the set to leave, or None."""
        pool = self._pool()
        if pool is None:
            return None
        pool._in_callback.add(_get_ident())
        return pool._in_callback

    def _error(self, ctx, failure):
        inside = None
        try:
            inside = self._enter()
            f = ctypes.cast(failure, ctypes.POINTER(ffi.Failure)).contents
            kind = ffi.MSG_KINDS[f.kind] if 0 <= f.kind < len(ffi.MSG_KINDS) else f.kind
            name = (ffi.STATUS_NAMES[f.status] if 0 <= f.status < len(ffi.STATUS_NAMES)
                    else str(f.status))
            guard = None
            if f.guard:
                g = f.guard.contents
                guard = {n: getattr(g, n) for n, _ in ffi.GuardViolation._fields_}
            self.on_error(Failure(f.status, name, kind, f.step_id if f.has_step else None,
                                  (f.message or b"").decode("utf-8", "replace"),
                                  f.checkpoint_key if f.has_checkpoint_key else None, guard))
        except BaseException as e:  # nothing may escape into the owner loop
            self._caught("on_error", e)
        finally:
            if inside is not None:
                inside.discard(_get_ident())

    def _evict(self, ctx, event):
        inside = None
        try:
            inside = self._enter()
            ev = ctypes.cast(event, ctypes.POINTER(ffi.CheckpointEvent)).contents
            self.on_evict(CheckpointEvent(ev.key, _tier_name(ev.tier), ev.demoted))
        except BaseException as e:
            self._caught("on_checkpoint_evict", e)
        finally:
            if inside is not None:
                inside.discard(_get_ident())

    def _caught(self, what, e):
        self.count += 1
        if self.first is None:
            self.first = e
            try:
                sys.stderr.write(f"rsp: the pool's {what} callback raised {type(e).__name__}: "
                                 f"{e} (kept as pool.callback_exception; later ones are only "
                                 f"counted)\n")
            except BaseException:  # a closed stderr must not escape either
                pass


def _keep_alive(obj, keep):
    """Take (keep True) or give back (keep False) a reference on obj that
    no Python object owns, so no teardown drops it (see _Hooks)."""
    (ctypes.pythonapi.Py_IncRef if keep else ctypes.pythonapi.Py_DecRef)(ctypes.py_object(obj))


_COMPLETE = ffi.Event(ffi.EVENT_COMPLETE, None, 0)


def _msg(kind, seq):
    """A message of kind numbered seq, for RecurrentStatePool._send."""
    m = ffi.Msg()
    m.kind = kind
    m.seq = _uint(seq, "seq", 64)
    return m


def _event(ev):
    """A caller's forward_done as an rsp_event: None -> "already complete"
    (a host forward ran synchronously), an ffi.Event, a HostFence value
    pair, or a torch.cuda.Event."""
    if ev is None:
        return _COMPLETE
    if isinstance(ev, ffi.Event):
        return ev
    if isinstance(ev, tuple) and len(ev) == 2 and isinstance(ev[0], HostFence):
        return ffi.Event(ffi.EVENT_HOST_FENCE, ev[0]._ptr, ev[1])
    handle = getattr(ev, "cuda_event", None)
    if handle is not None:
        return ffi.Event(ffi.EVENT_CUDA, handle, 0)
    raise TypeError(f"forward_done must be None, (HostFence, value), an rsp event or a "
                    f"torch.cuda.Event, not {type(ev).__name__}")


class HostFence:
    """A host-device timeline (rsp_host_fence): signal(v) completes every wait
    for a value <= v. Pass (fence, v) as a commit's forward_done."""

    def __init__(self):
        p = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.host_fence_create(ctypes.byref(p), ctypes.byref(err)), err)
        self._ptr = p.value

    def signal(self, value):
        ffi.host_fence_signal(self._ptr, value)

    def wait(self, value, timeout_ns=ffi.WAIT_FOREVER):
        """Block until the timeline reaches value (rsp_host_fence_wait);
        RspError RSP_ETIMEDOUT after timeout_ns."""
        st = ffi.host_fence_wait(self._ptr, _uint(value, "value", 64),
                                 _uint(timeout_ns, "timeout_ns", 64))
        if st != ffi.OK:
            raise RspError(st, f"waiting for host fence value {value} (the fence is at "
                               f"{self.value})")

    @property
    def value(self):
        return ffi.host_fence_value(self._ptr)

    def __del__(self):
        if getattr(self, "_ptr", None):
            ffi.host_fence_destroy(self._ptr)
            self._ptr = None


class PlanRef:
    """A reference on one published plan (rsp_plan_ref): its addressing stays
    readable, without a read section, until release() (or the end of a
    with block). The pool releases what is still held at cleanup(), since
    closing waits for every reference."""

    def __init__(self, pool, plan):
        self._pool = pool
        self._plan = plan
        # Held by addressing() and release(): a release on one thread must
        # not drop the plan under another thread's read of it.
        self._mu = threading.Lock()
        self.step_id = ffi.plan_step_id(plan)

    def addressing(self, label="main") -> RecurrentAddressing:
        return self._pool._ref_addressing(self, label)

    @property
    def plan_digest(self) -> int:
        """The plan's rsp_plan_digest (see RecurrentStatePool.plan_digest)."""
        with self._mu:
            if self._plan is None:
                raise RspError(ffi.EINVAL, "the plan reference was released")
            return ffi.plan_digest(self._plan)

    def release(self):
        """Drop the reference (idempotent; after cleanup() a no-op: cleanup
        released it)."""
        with self._mu:
            plan, self._plan = self._plan, None
        if plan is not None:
            ffi.plan_unref(plan)
            with self._pool._lock:
                self._pool._refs.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if getattr(self, "_plan", None) is not None:
            ffi.plan_unref(self._plan)
            self._plan = None


def _c_block(i, b, bc):
    """BlockSpec b (blocks[i]) into rsp_block_config bc; returns the name's bytes."""
    if not isinstance(b, BlockSpec):
        raise TypeError(f"blocks[{i}] must be a BlockSpec, not {type(b).__name__}")
    name = _c_name(b.name, f"blocks[{i}].name")
    bc.name = name
    bc.dtype = _dtype_code(b.dtype)
    for what, dims in (("shape", b.shape), ("shard_dims", b.shard_dims)):
        if not isinstance(dims, (tuple, list)):
            raise TypeError(f"blocks[{i}].{what} must be a tuple of ints, not "
                            f"{type(dims).__name__} {dims!r}")
        lo = 1 if what == "shape" else 0
        if not lo <= len(dims) <= ffi.MAX_DIMS:
            raise ValueError(f"blocks[{i}].{what} {tuple(dims)}: {lo} to {ffi.MAX_DIMS} dims")
    bc.ndim = len(b.shape)
    for d, n in enumerate(b.shape):
        bc.shape[d] = _int(n, f"blocks[{i}].shape[{d}]", 64)
    bc.num_shard_dims = len(b.shard_dims)
    for d, a in enumerate(b.shard_dims):
        bc.shard_dims[d] = _uint(a, f"blocks[{i}].shard_dims[{d}]")
    return name


_CONFIG_UINTS = ("num_layers", "max_slots", "world_size", "rank", "max_inflight_steps",
                 "inbox_capacity", "max_checkpoints", "max_host_checkpoints")


def _c_checkpoint_policy(cfg, config):
    """checkpoint_policy and checkpoint_value_weight into cfg, checked."""
    policy, weight = config.checkpoint_policy, config.checkpoint_value_weight
    if not isinstance(policy, str):
        raise TypeError(f"checkpoint_policy must be a str, not {type(policy).__name__}")
    if policy not in ffi.CHECKPOINT_POLICIES:
        raise ValueError(f"checkpoint_policy {policy!r}: 'lru' or 'value'")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise TypeError(f"checkpoint_value_weight must be a number, not {type(weight).__name__}")
    if not (0 <= weight < float("inf")):
        raise ValueError(f"checkpoint_value_weight {weight!r}: finite and >= 0")
    cfg.checkpoint_policy = ffi.CHECKPOINT_POLICIES.index(policy)
    cfg.checkpoint_value_weight = float(weight)


def _c_config(device, config):
    """An rsp_pool_config for (device, config), and what it points into
    (kept alive by the pool). Each field is checked here, since ctypes
    wraps a negative number into an unsigned field and names no field in
    its TypeError."""
    if not isinstance(config, PoolConfig):
        raise TypeError(f"config must be a PoolConfig, not {type(config).__name__}")
    cfg = ffi.PoolConfig()
    ffi.pool_config_init(ctypes.byref(cfg))
    if not isinstance(config.blocks, (tuple, list)):
        raise TypeError(f"blocks must be a list of BlockSpec, not {type(config.blocks).__name__}")
    blocks = (ffi.BlockConfig * len(config.blocks))()
    names = [_c_block(i, b, blocks[i]) for i, b in enumerate(config.blocks)]
    for f in _CONFIG_UINTS:
        setattr(cfg, f, _uint(getattr(config, f), f))
    cfg.blocks = blocks
    cfg.num_blocks = len(config.blocks)
    cfg.sink = config.sink
    dev = str(device)
    if dev == "cpu":
        cfg.device = ffi.DEVICE_HOST
    elif dev == "cuda" or dev.startswith("cuda:"):
        cfg.device = ffi.DEVICE_CUDA
        ordinal = dev[5:] if ":" in dev else config.cuda_ordinal
        try:
            cfg.cuda_ordinal = _int(int(ordinal) if isinstance(ordinal, str) else ordinal,
                                    "cuda_ordinal")
        except ValueError:
            raise ValueError(f"device {device!r}: 'cpu' or 'cuda[:N]'") from None
    else:
        raise ValueError(f"device {device!r}: 'cpu' or 'cuda[:N]'")
    cfg.owner_cpu = _int(config.owner_cpu, "owner_cpu")
    cfg.checkpoint_demote = config.checkpoint_demote
    _c_checkpoint_policy(cfg, config)
    cfg.ordered = _flag(config.ordered, "ordered")
    cfg.reorder_timeout_ns = _uint(config.reorder_timeout_ns, "reorder_timeout_ns", 64)
    cfg.guard = _flag(config.guard, "guard")
    for f in ("on_error", "on_checkpoint_evict"):
        fn = getattr(config, f)
        if fn is not None and not callable(fn):
            raise TypeError(f"{f} must be a callable or None, not {type(fn).__name__}")
    path = None
    if config.record_path is not None:
        if not isinstance(config.record_path, str):
            raise TypeError(f"record_path must be a str or None, "
                            f"not {type(config.record_path).__name__}")
        path = config.record_path.encode()
        cfg.record_path = path
    return cfg, (blocks, names, path)


def _flag(v, what):
    """v, a bool: anything else (a 1, "yes") is refused rather than
    normalised, as a row's flags are."""
    if type(v) is not bool:
        raise TypeError(f"{what} must be a bool, not {type(v).__name__}")
    return v


class RecurrentStatePool:
    """A pool of fixed-size recurrent state slots (the seed's class), backed by
    librsp. `device`: "cpu" (rsp's host device) or "cuda[:N]".

    Every method that changes slots, labels or checkpoints takes seq=, the
    message's number in an ordered pool (PoolConfig.ordered: 1, 2, 3, ...
    per pool, the same on every rank); without it the method calls rsp's
    synchronous wrapper, with it the package posts the numbered message and
    waits for its answer. An unordered pool ignores the number."""

    def __init__(self, device, config: PoolConfig):
        self.device = str(device)
        self._lock = threading.RLock()  # the rid map and the label cache (marshalling holds it)
        self._rids = RidMap()
        self._labels = {"main": ffi.LABEL_MAIN}
        self._label_names = {ffi.LABEL_MAIN: "main"}
        self._pool = None
        # Calls in progress (their threads' idents) and the flag that refuses
        # new ones: see _guarded. _close_lock makes concurrent cleanups one.
        self._calls = []
        self._closing = False
        self._close_lock = threading.Lock()
        self._refs = weakref.WeakSet()  # live PlanRefs, released at cleanup
        # The last marshalled rows of tuples or Rows (immutable) and their
        # bytes: a step whose rows equal them reuses the bytes.
        self._last_rows = None
        # Threads inside one of the pool's callbacks now: the owner thread, or
        # a synchronous call's that ran in the owner's role (_guarded).
        self._in_callback = set()
        self._hooks = None
        self._persist = {}  # label id -> _Persistent: addressing(persistent=True)'s tensors
        self._host = None  # set below: whether the pool's device is the host
        cfg, self._keep = _c_config(device, config)
        self._ordered = config.ordered
        hooks = None
        if config.on_error is not None or config.on_checkpoint_evict is not None:
            hooks = _Hooks(self, config.on_error, config.on_checkpoint_evict)
            if hooks.c_error is not None:
                cfg.on_error = ctypes.cast(hooks.c_error, ctypes.c_void_p).value
            if hooks.c_evict is not None:
                cfg.on_checkpoint_evict = ctypes.cast(hooks.c_evict, ctypes.c_void_p).value
        p = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.pool_create(ctypes.byref(cfg), ctypes.byref(p), ctypes.byref(err)), err)
        self._pool = p.value
        if hooks is not None:
            _keep_alive(hooks, True)
            self._hooks = hooks
        info = ffi.PoolInfo()
        _check(ffi.pool_info_get(self._pool, ctypes.byref(info), ctypes.byref(err)), err)
        self._info = info
        self._host = info.device == ffi.DEVICE_HOST
        self.config = config

    # -- lifetime --

    def _handle(self):
        """The C pool, inside a _guarded call (which keeps it alive)."""
        if self._pool is None:
            raise RspError(_ESHUTDOWN, "the pool was cleaned up")
        return self._pool

    def _refusal(self, me):
        """The error of a call _guarded refuses."""
        if me in self._in_callback:
            return RspError(ffi.EINVAL, _IN_CALLBACK)
        return RspError(_ESHUTDOWN, "the pool was cleaned up")

    def cleanup(self, timeout_ns=None):
        """Close the pool (rsp_pool_close), from any thread: later calls are
        refused (RspError RSP_ESHUTDOWN), and the close waits for the calls
        in progress on other threads to return. Tensors from block() and
        addressing() stay valid: their memory goes with the last of them.

        timeout_ns: bound the close's own waits (rsp_pool_close_timed: the
        messages queued, every forward_done given to a commit or rollback, a
        grace period). Past it, RspError RSP_ETIMEDOUT naming what was still
        pending (e.g. the steps whose forward_done never completed) and
        nothing is closed: the pool stays usable (signal the events, call
        again). The plan references still held are released either way.
        None: wait as long as it takes."""
        if timeout_ns is not None:
            _uint(timeout_ns, "timeout_ns", 64)
        with self._close_lock:
            if self._pool is None:
                return
            me = _get_ident()
            if me in self._calls or me in self._in_callback:
                # A finaliser or signal handler run inside this thread's own
                # call would wait for itself; so would the owner thread
                # (a callback), which the close joins.
                raise RspError(ffi.EINVAL, "cleanup() inside a call on this pool on the "
                                           "same thread (a finaliser, a signal handler or "
                                           "one of the pool's callbacks?)")
            self._closing = True
            delay = 1e-5
            while self._calls:  # calls in progress: usually one C call each
                time.sleep(delay)
                delay = min(2 * delay, 1e-3)
            with self._lock:
                refs = list(self._refs)
            for ref in refs:
                ref.release()
            err = ffi.Error()
            if timeout_ns is None:
                st = ffi.pool_close(self._pool, ctypes.byref(err))
            else:
                rep = ffi.CloseReport()
                st = ffi.pool_close_timed(self._pool, timeout_ns, ctypes.byref(rep),
                                          ctypes.byref(err))
            if st != ffi.OK:
                self._closing = False  # nothing destroyed: the pool is still usable
                e = RspError(st, err.message.decode("utf-8", "replace"))
                if timeout_ns is not None:
                    # the steps whose forward_done the device still waits for
                    e.pending_steps = list(rep.step_ids[:rep.num_steps])
                raise e
            self._pool = None
            if self._hooks is not None:  # the owner is joined: nothing calls the thunks now
                _keep_alive(self._hooks, False)

    close = cleanup

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def __del__(self):
        if getattr(self, "_pool", None) is not None:
            try:
                self.cleanup()
            except Exception:
                pass

    # -- names --

    def _label_id(self, name):
        """The id of label `name` (a str, interned on first use; or an int,
        an rsp label id, as it is)."""
        lid = self._labels.get(name) if isinstance(name, str) else None
        if lid is not None:
            return lid
        if isinstance(name, int) and not isinstance(name, bool):
            return _uint(name, "label")
        if self._ordered:
            _c_name(name, "label")
            # rsp_label carries no seq, which an ordered pool refuses.
            raise RspError(ffi.EINVAL, f"label {name!r} is not interned, and an ordered pool "
                                       f"interns a label only by a numbered message: call "
                                       f"intern_label({name!r}, seq=n) first")
        out = ctypes.c_uint32()
        err = ffi.Error()
        _check(ffi.label(self._handle(), _c_name(name, "label"), ctypes.byref(out),
                         ctypes.byref(err)), err)
        with self._lock:
            self._labels[name] = out.value
            self._label_names[out.value] = name
        return out.value

    def _known_label(self, name):
        """The id of a label some step has named, for a read: a read never
        interns (64 typos would use up every label id), so a name the pool
        has not seen is RSP_ENOLABEL, as the C API answers an id it has not
        interned."""
        lid = self._labels.get(name) if isinstance(name, str) else None
        if lid is not None:
            return lid
        if isinstance(name, int) and not isinstance(name, bool):
            return _uint(name, "label")
        _c_name(name, "label")
        raise RspError(ffi.ENOLABEL, f"label {name!r} is not known to this pool (no step has "
                                     f"named it; known: {', '.join(map(repr, self._labels))})")

    def _marshal(self, step):
        w = step._wire
        if w is None or w[0] is not self:
            with self._lock:
                m = _Marshal(self, step)
            step._wire = (self, m)
            return m
        return w[1]

    # -- ordered posting --

    def _send(self, msg):
        """Post msg (from _msg, numbered) and wait for its answer: the
        synchronous wrappers' round trip, for a message that carries a seq
        (the wrappers carry none, which an ordered pool refuses)."""
        t = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.post(self._handle(), ctypes.byref(msg), ctypes.byref(t), ffi.WAIT_FOREVER,
                        ctypes.byref(err)), err)
        reply = ffi.Reply()
        _check(ffi.wait(t, ffi.WAIT_FOREVER, ctypes.byref(reply)), reply.error)
        return reply

    @_guarded
    def intern_label(self, name, seq=None) -> int:
        """Intern label `name` (idempotent: a known name keeps its id) and
        return its rsp id. Steps intern the labels they name on first use,
        so an unordered pool never needs this; an ordered pool interns only
        by a numbered message, so there every label but "main" is interned
        here, with its seq, before a step names it. With seq the message is
        always posted (the number is used even for a known name)."""
        b = _c_name(name, "name")
        if seq is None:
            return self._label_id(name)
        msg = _msg(ffi.MSG_LABEL, seq)
        msg.label_name = b
        lid = self._send(msg).label
        with self._lock:
            self._labels[name] = lid
            self._label_names[lid] = name
        return lid

    # -- requests --

    @_guarded
    def ingest_request(self, rid, overrides=None, seq=None):
        """Make sure request rid exists (idempotent). seq: an ordered pool's
        number for the message (every slot-changing method takes one)."""
        msg = None if seq is None else _msg(ffi.MSG_INGEST, seq)
        err = ffi.Error()
        with self._lock:
            v = self._rids.get(rid)
        if msg is None:
            _check(ffi.ingest(self._handle(), v, ctypes.byref(err)), err)
        else:
            msg.rid = v
            self._send(msg)

    @_guarded
    def remove_request(self, rid, seq=None):
        """Zero and free rid's slots (after the steps that address them) and forget it."""
        msg = None if seq is None else _msg(ffi.MSG_REMOVE, seq)
        err = ffi.Error()
        with self._lock:
            v = self._rids.lookup(rid)
        if msg is None:
            _check(ffi.remove(self._handle(), v, ctypes.byref(err)), err)
        else:
            msg.rid = v
            self._send(msg)
        with self._lock:
            self._rids.forget(rid)
            # A step reusing the last rows' bytes skips the id map: were rid
            # among those rows, it would be live again in rsp but not here.
            self._last_rows = None

    @_guarded
    def reset_request(self, rid, free=False, seq=None):
        """Zero rid's slots; free=True hands them back to the pool."""
        msg = None if seq is None else _msg(ffi.MSG_RESET, seq)
        err = ffi.Error()
        with self._lock:
            v = self._rids.lookup(rid)
        if msg is None:
            _check(ffi.reset(self._handle(), v, free, ctypes.byref(err)), err)
        else:
            msg.rid, msg.free = v, free
            self._send(msg)

    @_guarded
    def release(self, rid, label, seq=None):
        """Give back rid's slot under label (a finished beam, a rejected draft).
        A label no step has named is RSP_ENOLABEL (rsp_release's answer for
        a label not interned); it is not interned here."""
        msg = None if seq is None else _msg(ffi.MSG_RELEASE, seq)
        err = ffi.Error()
        with self._lock:
            v = self._rids.lookup(rid)
        lid = self._known_label(label)
        if msg is None:
            _check(ffi.release(self._handle(), v, lid, ctypes.byref(err)), err)
        else:
            msg.rid, msg.label = v, lid
            self._send(msg)

    def _rid_array(self, rids, register):
        """rids (a list or tuple of request ids) as a u64 array, each checked
        (TypeError / ValueError naming rids[i]) before anything is sent;
        register: make them live (an ingest), else only look them up."""
        if isinstance(rids, (str, bytes)) or not isinstance(rids, (list, tuple)):
            raise TypeError(f"rids must be a list or tuple of request ids, not "
                            f"{type(rids).__name__}")
        if len(rids) > ffi.MAX_MSG_RIDS:
            raise ValueError(f"rids: {len(rids)} request ids, more than one message takes "
                             f"({ffi.MAX_MSG_RIDS})")
        with self._lock:
            # Looked up first, every one, so that a bad id registers none.
            for conv in ((self._rids.lookup, self._rids.get) if register
                         else (self._rids.lookup,)):
                vals = []
                for i, r in enumerate(rids):
                    try:
                        vals.append(conv(r))
                    except (TypeError, ValueError) as e:
                        raise type(e)(f"rids[{i}]: {e}") from None
        return array.array("Q", vals)

    def _many(self, kind, fn, rids, seq, register, *extra):
        """ingest_many / remove_many / reset_many: one message, all or nothing."""
        msg = None if seq is None else _msg(kind, seq)
        vals = self._rid_array(rids, register)
        n = len(vals)
        ptr = (ctypes.c_uint64 * n).from_buffer(vals) if n else None
        if msg is not None:
            if n == 0:
                # Nothing to do, but the number must still be used: a gap
                # would stall the ordered pool (and break it at the timeout).
                msg.kind = ffi.MSG_BARRIER
            else:
                msg.rids = ptr
                msg.num_rids = n
                if extra:
                    msg.free = extra[0]
            self._send(msg)
        elif n:
            err = ffi.Error()
            _check(fn(self._handle(), ptr, n, *extra, ctypes.byref(err)), err)

    @_guarded
    def ingest_many(self, rids, seq=None):
        """ingest_request of each of rids, in one message and one owner turn
        (rsp_ingest_many): all or nothing, a rid listed twice is RSP_EINVAL
        naming it, nothing changed. An empty list does nothing (with seq: a
        numbered barrier, so that the number is used)."""
        self._many(ffi.MSG_INGEST, ffi.ingest_many, rids, seq, True)

    @_guarded
    def remove_many(self, rids, seq=None):
        """remove_request of each of rids in one message (rsp_remove_many),
        all or nothing, as ingest_many."""
        self._many(ffi.MSG_REMOVE, ffi.remove_many, rids, seq, False)
        with self._lock:
            for r in rids:
                self._rids.forget(r)
            self._last_rows = None  # as remove_request

    @_guarded
    def reset_many(self, rids, free=False, seq=None):
        """reset_request(rid, free) of each of rids in one message
        (rsp_reset_many), all or nothing, as ingest_many."""
        self._many(ffi.MSG_RESET, ffi.reset_many, rids, seq, False, _flag(free, "free"))

    # -- steps --

    @_guarded
    def admit(self, step: Step, ctx=None, seq=None) -> AdmitOutcome:
        """Reserve a slot per addressed (rid, label), plus fork targets. A
        restore of a key that is not stored is RSP_ENOKEY naming it, nothing
        changed."""
        msg = None if seq is None else _msg(ffi.MSG_ADMIT, seq)
        m = self._marshal(step)
        if msg is not None:
            msg.step = m.step
            return self._outcome(self._send(msg).admit, step)
        if _FAST is not None:
            r = _FAST.step(_FAST_ADMIT, self._handle(), _fast_step(m), 0, None, 0)
            return _ADMIT_OK if r is None else self._outcome(ffi.AdmitOutcome(False, *r), step)
        out = ffi.AdmitOutcome()
        err = ffi.Error()
        _check(ffi.step_admit(self._handle(), ctypes.byref(m.step), ctypes.byref(out),
                              ctypes.byref(err)), err)
        return self._outcome(out, step)

    def _outcome(self, out, step, digest=None):
        if out.ok:
            return _ADMIT_OK if digest is None else _admit_ok(digest)
        rid = out.rid
        for r in step.rows:  # the caller's own id for the pair that found no slot
            r0 = r[0]
            if self._rids.lookup(r0) == out.rid:
                rid = r0
                break
        return AdmitOutcome(False, rid, self._label_names.get(out.label, out.label),
                            out.slots_short, out.usable, out.free)

    @_guarded
    def rollback_admit(self, step: Step, ctx=None, forward_done=None, seq=None):
        """Free the slots this step's admit took fresh (docs/semantics.md 4.2)."""
        msg = None if seq is None else _msg(ffi.MSG_ROLLBACK, seq)
        err = ffi.Error()
        sid = _uint(step.step_id, "step_id", 64)
        ev = None if forward_done is None else _event(forward_done)
        if msg is not None:
            msg.step.step_id = sid
            if ev is not None:
                msg.event = ev
            self._send(msg)
            return
        _check(ffi.step_rollback(self._handle(), sid,
                                 ctypes.byref(ev) if ev is not None else None,
                                 ctypes.byref(err)), err)

    @_guarded
    def plan(self, step: Step, ctx=None, seq=None):
        """Publish the step's plan (its staged plan with step.preplan). Returns
        the step id; read the plan with addressing()."""
        msg = None if seq is None else _msg(ffi.MSG_PLAN, seq)
        m = self._marshal(step)
        if msg is not None:
            msg.step = m.step
            self._send(msg)
            return step.step_id
        if _FAST is not None:
            _FAST.step(_FAST_PLAN, self._handle(), _fast_step(m), 0, None, 0)
            return step.step_id
        err = ffi.Error()
        _check(ffi.step_plan(self._handle(), ctypes.byref(m.step), ctypes.byref(err)), err)
        return step.step_id

    @_guarded
    def commit(self, step: Step, ctx=None, forward_done=None, seq=None):
        """Record the step's consumption. forward_done: None when the forward
        has already finished (CPU), else its event (a torch.cuda.Event).
        The step's checkpoint takes run here, after forward_done; one that
        finds no room is skipped (the commit stands), counted
        (checkpoints_skipped) and reported to on_error."""
        msg = None if seq is None else _msg(ffi.MSG_COMMIT, seq)
        m = self._marshal(step)
        ev = _event(forward_done)
        if msg is not None:
            msg.step = m.step
            msg.event = ev
            self._send(msg)
            return
        if _FAST is not None:
            _FAST.step(_FAST_COMMIT, self._handle(), _fast_step(m), ev.kind, ev.handle, ev.value)
            return
        err = ffi.Error()
        _check(ffi.step_commit(self._handle(), ctypes.byref(m.step), ctypes.byref(ev),
                               ctypes.byref(err)), err)

    def step_next(self, step: Step, prev: Optional[Step] = None, forward_done=None, seq=None):
        """Commit prev (if given), then admit and plan step: one round trip.
        Returns the admit outcome (not ok: nothing planned); when the step
        was planned, its plan_digest is the published plan's rsp_plan_digest."""
        if _FAST is not None and seq is None and forward_done is None:
            # A steady step (rows and flags only, the last step's rows) in
            # one call into C, which takes the calls guard itself and
            # answers NotImplemented for any other step.
            r = _FAST.next(self, step, prev)
            if r is not NotImplemented:
                return r if type(r) is not tuple else self._outcome(
                    ffi.AdmitOutcome(False, *r), step)
        return self._step_next(step, prev, forward_done, seq)

    @_guarded
    def _step_next(self, step, prev, forward_done, seq):
        msg = None if seq is None else _msg(ffi.MSG_STEP, seq)
        m = self._marshal(step)
        pm = self._marshal(prev) if prev is not None else None
        if _FAST is not None and msg is None:
            # One call into C, the ctypes structs not built (rsp._fast).
            if forward_done is None:
                kind, handle, value = ffi.EVENT_COMPLETE, None, 0
            else:
                ev = _event(forward_done)
                kind, handle, value = ev.kind, ev.handle, ev.value
            cur = _fast_step(m)
            pc = None if pm is None else _fast_step(pm)
            r = _FAST.step_next(self._handle(), cur, pc, kind, handle, value)
            if r is None:
                return _ADMIT_OK
            if type(r) is int:
                return _admit_ok(r)
            return self._outcome(ffi.AdmitOutcome(False, *r), step)
        ev = _event(forward_done)
        if msg is not None:
            msg.step = m.step
            if pm is not None:
                msg.commit = ctypes.pointer(pm.step)
            msg.event = ev
            out = self._send(msg)
        else:
            out = ffi.StepOutcome()
            err = ffi.Error()
            st = ffi.step_next(self._handle(), ctypes.byref(m.step),
                               ctypes.byref(pm.step) if pm is not None else None,
                               ctypes.byref(ev), ctypes.byref(out), ctypes.byref(err))
            _check(st, err)
        return self._outcome(out.admit, step, out.plan_digest if out.planned else None)

    @_guarded
    def clear_preplan(self, seq=None):
        """Drop the staged plan, if any."""
        if seq is not None:
            self._send(_msg(ffi.MSG_CLEAR_PREPLAN, seq))
            return
        err = ffi.Error()
        _check(ffi.step_unstage(self._handle(), ctypes.byref(err)), err)

    @_guarded
    def build_accelerator_graph_buffers(self, slots=None, max_bs=1, max_seq_len=0, seq=None):
        """Leased addressing buffers created from now on hold >= max_bs rows."""
        msg = None if seq is None else _msg(ffi.MSG_BUILD_GRAPH_BUFFERS, seq)
        max_bs, max_seq_len = _uint(max_bs, "max_bs"), _uint(max_seq_len, "max_seq_len")
        if msg is not None:
            msg.max_bs, msg.max_seq_len = max_bs, max_seq_len
            self._send(msg)
            return
        err = ffi.Error()
        _check(ffi.build_graph_buffers(self._handle(), max_bs, max_seq_len, ctypes.byref(err)),
               err)

    # -- checkpoints and swap --

    @_guarded
    def checkpoint_take(self, key, rid, label="main", tier="device", after_step=0, seq=None):
        """Store a copy of rid's slot of label under key (a u64, the engine's
        prefix hash) in tier "device" or "host" (rsp_checkpoint_take).
        after_step 0: the slot as the device queue has it now; a committed
        step's id: the state that step's forward left (a take in a step in
        flight is declared in the step: Step.checkpoints). A key that exists
        is replaced unless pinned (RSP_EPINNED). A full tier evicts its least
        recently used unpinned checkpoint (on_checkpoint_evict); none
        unpinned: RSP_ECAPACITY. A tier of size 0: RSP_EINVAL. rid holding
        nothing under label: RSP_ENOREQ. A label no step has named:
        RSP_ENOLABEL (not interned)."""
        msg = None if seq is None else _msg(ffi.MSG_CHECKPOINT, seq)
        key = _uint(key, "key", 64)
        t = _tier(tier)
        after_step = _uint(after_step, "after_step", 64)
        with self._lock:
            v = self._rids.lookup(rid)
        lid = self._known_label(label)
        if msg is not None:
            msg.key, msg.rid, msg.label, msg.tier, msg.after_step = key, v, lid, t, after_step
            self._send(msg)
            return
        err = ffi.Error()
        _check(ffi.checkpoint_take(self._handle(), key, v, lid, t, after_step,
                                   ctypes.byref(err)), err)

    def _key_call(self, kind, fn, key, seq, pin=False):
        msg = None if seq is None else _msg(kind, seq)
        key = _uint(key, "key", 64)
        if msg is not None:
            msg.key, msg.pin = key, pin
            self._send(msg)
            return
        err = ffi.Error()
        _check(fn(self._handle(), key, ctypes.byref(err)), err)

    @_guarded
    def checkpoint_drop(self, key, seq=None):
        """Drop the checkpoint under key and free its slot (counted as a
        drop, not reported as an eviction). RSP_ENOKEY: none stored;
        RSP_EPINNED: pinned (by the caller or a step restoring from it)."""
        self._key_call(ffi.MSG_CHECKPOINT_DROP, ffi.checkpoint_drop, key, seq)

    @_guarded
    def checkpoint_pin(self, key, seq=None):
        """Pin key: never evicted, replaced or dropped until unpinned. Pins
        count (pin twice, unpin twice) and mark it used. RSP_ENOKEY."""
        self._key_call(ffi.MSG_CHECKPOINT_PIN, ffi.checkpoint_pin, key, seq, True)

    @_guarded
    def checkpoint_unpin(self, key, seq=None):
        """Undo one checkpoint_pin. RSP_ENOKEY; RSP_EINVAL when the caller
        holds no pin on key (nothing changed)."""
        self._key_call(ffi.MSG_CHECKPOINT_PIN, ffi.checkpoint_unpin, key, seq, False)

    @_guarded
    def checkpoint_value(self, key, value, seq=None):
        """Set what restoring the checkpoint under key saves (a u64 in the
        caller's unit: tokens, FLOPs), the value checkpoint_policy "value"
        ranks it by (rsp_checkpoint_value). Not a use. A take starts at 0:
        set it right after the take, or after the commit of a step that
        declared it. RSP_ENOKEY: none stored."""
        msg = None if seq is None else _msg(ffi.MSG_CHECKPOINT_VALUE, seq)
        key = _uint(key, "key", 64)
        value = _uint(value, "value", 64)
        if msg is not None:
            msg.key, msg.value = key, value
            self._send(msg)
            return
        err = ffi.Error()
        _check(ffi.checkpoint_value(self._handle(), key, value, ctypes.byref(err)), err)

    @_guarded
    def checkpoint_info(self, key) -> Optional[CheckpointInfo]:
        """What is stored under key (rsp_checkpoint_query, a round trip), or
        None when nothing is."""
        key = _uint(key, "key", 64)
        out = ffi.CheckpointInfo()
        err = ffi.Error()
        st = ffi.checkpoint_query(self._handle(), key, ctypes.byref(out), ctypes.byref(err))
        if st == ffi.ENOKEY:
            return None
        _check(st, err)
        return CheckpointInfo(out.key, _tier_name(out.tier), out.slot, out.bytes, out.pins,
                              out.user_pins, out.last_use)

    @_guarded
    def checkpoint_lookup(self, key) -> Optional[CheckpointLoc]:
        """Whether key is stored, and where, without a message
        (rsp_checkpoint_lookup in a read section of the calling thread): for
        a scheduler thread asking whether a prefix is still cached. None:
        not stored (or its take not queued yet). As of the lookup: the owner
        may evict it right after; pin it to keep it."""
        key = _uint(key, "key", 64)
        _reader.ensure()
        loc = ffi.CheckpointLoc()
        err = ffi.Error()
        st = ffi.read_begin()
        if st != ffi.OK:
            _check(ffi.read_explain(st, ctypes.byref(err)), err)
        try:
            st = ffi.checkpoint_lookup(self._handle(), key, ctypes.byref(loc), ctypes.byref(err))
        finally:
            ffi.read_end()
        if st == ffi.ENOKEY:
            return None
        _check(st, err)
        return CheckpointLoc(loc.key, _tier_name(loc.tier), loc.slot)

    @_guarded
    def swap_out(self, rid, seq=None):
        """Preempt rid without recompute (rsp_swap_out): every label's state
        is copied to host-tier slots and its request slots are released. It
        stays a request; steps naming it are RSP_EORDER until swap_in
        (remove_request / reset_request drop the saved state). RSP_ECAPACITY:
        no host tier (max_host_checkpoints 0) or no room in it; RSP_ENOREQ:
        unknown rid; RSP_EORDER: already swapped out, or a slot a step in
        flight pins."""
        msg = None if seq is None else _msg(ffi.MSG_SWAP_OUT, seq)
        with self._lock:
            v = self._rids.lookup(rid)
        if msg is not None:
            msg.rid = v
            self._send(msg)
            return
        err = ffi.Error()
        _check(ffi.swap_out(self._handle(), v, ctypes.byref(err)), err)

    @_guarded
    def swap_in(self, rid, seq=None) -> AdmitOutcome:
        """Bring a swapped-out rid back into fresh slots, all labels or none
        (rsp_swap_in), has_state as before. A pool without enough free slots
        answers an AdmitOutcome that is not ok (nothing changed), as admit.
        RSP_ENOREQ: unknown rid; RSP_EORDER: not swapped out."""
        msg = None if seq is None else _msg(ffi.MSG_SWAP_IN, seq)
        with self._lock:
            v = self._rids.lookup(rid)
        if msg is not None:
            msg.rid = v
            out = self._send(msg).admit
        else:
            out = ffi.AdmitOutcome()
            err = ffi.Error()
            _check(ffi.swap_in(self._handle(), v, ctypes.byref(out), ctypes.byref(err)), err)
        if out.ok:
            return _ADMIT_OK
        return AdmitOutcome(False, rid, self._label_names.get(out.label, out.label),
                            out.slots_short, out.usable, out.free)

    # -- export and import (docs/semantics.md 9.4; rsp.xfer) --

    @_guarded
    def regions(self) -> "list[_xfer.Region]":
        """The pool's storage as regions (rsp_pool_regions): per space (request
        slots, device tier, host tier), per block; a transport registers each
        once. Extents name them by index."""
        n = ctypes.c_uint32()
        err = ffi.Error()
        _check(ffi.pool_regions(self._handle(), None, 0, ctypes.byref(n), ctypes.byref(err)), err)
        out = (ffi.Region * max(n.value, 1))()
        _check(ffi.pool_regions(self._handle(), out, n.value, ctypes.byref(n), ctypes.byref(err)),
               err)
        names = [b.name for b in self.config.blocks]
        return [_xfer.Region(r.base or 0, r.length, "cuda" if r.memory == ffi.DEVICE_CUDA else "host",
                             names[r.block], ffi.REGION_SPACES[r.space]) for r in out[:n.value]]

    @_guarded
    def export(self, rid=None, labels=None, key=None, tag=0, target_world_size=0, target_rank=0,
               timeout_ns=None) -> "_xfer.Export":
        """Open an export of request rid (labels: names, None: every holding)
        or of the checkpoint under key (exactly one of the two), for target
        rank target_rank of target_world_size (0: this pool's). Waits for the
        request's steps in flight (up to timeout_ns: RSP_ETIMEDOUT), pins what
        it names and returns once the bytes are final (rsp_export_open). Use
        it as a context manager, or close() it."""
        if (rid is None) == (key is None):
            raise ValueError("export: give exactly one of rid and key")
        spec = ffi.ExportSpec()
        spec.struct_size = ctypes.sizeof(ffi.ExportSpec)
        spec.tag = _uint(tag, "tag", 64)
        spec.target_world_size = _uint(target_world_size, "target_world_size")
        spec.target_rank = _uint(target_rank, "target_rank")
        spec.timeout_ns = ffi.WAIT_FOREVER if timeout_ns is None else _uint(timeout_ns,
                                                                           "timeout_ns", 64)
        if key is not None:
            if labels is not None:
                raise ValueError("export: labels are a request's, not a checkpoint's")
            spec.what, spec.key = ffi.XFER_CHECKPOINT, _uint(key, "key", 64)
        else:
            with self._lock:
                spec.rid = self._rids.lookup(rid)
            if isinstance(labels, str):
                raise TypeError("labels must be a sequence of label names, not a str")
            for name in labels or ():
                spec.labels |= 1 << self._known_label(name)
        h = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.export_open(self._handle(), ctypes.byref(spec), ctypes.byref(h),
                               ctypes.byref(err)), err)
        e = _xfer.Export(self, h.value)
        self._xfer_keep(e, True)
        return e

    @_guarded
    def import_begin(self, header, rid=None, seq=None) -> "_xfer.Import":
        """Begin an import of header (bytes: an Export.header, from any
        source rank) as request rid, or, for a checkpoint's header, under
        its key (rid None): zeroed slots that nothing may address until
        commit() (rsp_import_begin). Refused with the first layout
        difference named (RSP_EINVAL), RSP_ENOLABEL, RSP_ECAPACITY,
        RSP_EPINNED. In a with block, an import not committed is aborted."""
        h = _xfer._header_struct(header, "header")
        if h.what == ffi.XFER_CHECKPOINT:
            if rid is not None:
                raise ValueError("import_begin: a checkpoint's header takes no rid (its key "
                                 "is the header's)")
            v = 0
        else:
            if rid is None:
                raise ValueError("import_begin: a request's header needs rid")
            with self._lock:
                v = self._rids.get(rid)
        out = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.import_begin(self._handle(), ctypes.byref(h), v, self._xfer_seq(seq),
                                ctypes.byref(out), ctypes.byref(err)), err)
        imp = _xfer.Import(self, out.value,
                           "checkpoint" if h.what == ffi.XFER_CHECKPOINT else "request")
        self._xfer_keep(imp, True)
        return imp

    def _xfer_keep(self, obj, keep):
        """An open export or import is held here until closed (one dropped
        unclosed still pins its state: nothing closes it behind the caller's
        back but cleanup()) and in _refs, which cleanup() releases."""
        with self._lock:
            held = self.__dict__.setdefault("_xfer_held", set())
            if keep:
                held.add(obj)
                self._refs.add(obj)
            else:
                held.discard(obj)
                self._refs.discard(obj)

    @staticmethod
    def _xfer_seq(seq):
        return 0 if seq is None else _uint(seq, "seq", 64)

    @_guarded
    def _xfer_end(self, end, *args):
        """An export's close or an import's commit or abort, or a UCX
        transport's call (rsp.ucx), while the pool lives (they name it):
        end(*args)'s answer."""
        return end(*args)

    @_guarded
    def barrier(self, seq=None):
        """Return once every message posted before it (by any thread whose
        call returned) has been handled; device work they queued may still
        run (rsp_barrier). In an ordered pool a barrier without seq is
        answered once everything that arrived before it was handled or waits
        for a missing number; with seq it waits its turn."""
        if seq is not None:
            self._send(_msg(ffi.MSG_BARRIER, seq))
            return
        err = ffi.Error()
        _check(ffi.barrier(self._handle(), ctypes.byref(err)), err)

    # -- reading --

    @_guarded
    def spec_indices(self, label="main", step_id=None, wait=True) -> SpecIndices:
        """The per-token state indices of label in the live plan (or step_id's
        plan, a step in flight): what a kernel written for vLLM's
        speculative state indices reads (rsp_plan_spec_indices). A copy, on
        the host. wait=True on a CPU pool first waits for the plan's ready
        event, as addressing() does."""
        lid = self._known_label(label)

        def read(plan):
            x = ffi.SpecIndices()
            err = ffi.Error()
            _check(ffi.plan_spec_indices(plan, lid, ctypes.byref(x), ctypes.byref(err)), err)
            return (x, ctypes.string_at(x.indices, 4 * x.length * x.width),
                    ffi.Event(x.ready.kind, x.ready.handle, x.ready.value))

        x, raw, ready = self._with_plan(step_id, read)
        if wait and self._host:
            self._wait(ready)
        t = dev = None
        if _torch_available():
            t = _torch().frombuffer(bytearray(raw), dtype=_torch().int32)
            t = t.reshape(x.length, x.width)
            # A device copy other than the host copy is a leased key's buffer.
            host = ctypes.cast(x.indices, ctypes.c_void_p).value
            if x.device_indices and x.device_indices != host:
                dev = _buffer_tensor(x.device_indices, x.length, x.width, not self._host)
        return SpecIndices(t, x.width, x.num_rows, x.length, raw, dev)

    def addressing(self, label="main", step_id=None, wait=True,
                   persistent=False) -> RecurrentAddressing:
        """This step's addressing under label: the live plan's, or step_id's
        plan (a pipelined step in flight). The tensors are copies of the
        plan's vectors on a CPU pool (they outlive it) and the pool's
        addressing buffers on a CUDA pool (this step's while it is in
        flight). On a CPU pool, wait=True first waits for the plan's ready
        event (its zeroing and copies done), as a CUDA stream would.

        persistent=True (a CPU pool): the tensors are the label's persistent
        pair, which every persistent read of the label rewrites in place
        (an engine's state-index buffers for CUDA graphs): valid until the
        next step is planned; the same tensor objects while the row count
        stays the same. Saves two tensors a step."""
        if persistent and step_id is None and _FAST is not None:
            # The steady read (a label whose pair exists, on a CPU pool) in
            # one call into C, which takes the calls guard itself and
            # answers NotImplemented for any other read.
            a = _FAST.read(self, label, wait)
            if a is not NotImplemented:
                return a
        return self._addressing_of(label, step_id, wait, persistent)

    @_guarded
    def _addressing_of(self, label, step_id, wait, persistent):
        lid = self._known_label(label)
        if step_id is not None:
            _uint(step_id, "step_id", 64)
        _reader.ensure()
        if _FAST is not None and self._host:
            return self._fast_addressing(lid, step_id, wait, persistent)

        def read(plan):
            a = ffi.Addressing()
            err = ffi.Error()
            _check(ffi.plan_addressing(plan, lid, ctypes.byref(a), ctypes.byref(err)), err)
            return self._addressing(a)

        out = self._with_plan(step_id, read, checked=True)
        if wait and self._host:
            self._wait(out.ready)
        if persistent and self._host and out.slot_indices is not None:
            p = self._persistent(lid, len(out._hs))
            p.ts.copy_(out.slot_indices)
            p.th.copy_(out.has_state)
            out.slot_indices, out.has_state = p.ts, p.th
        return out

    def _persistent(self, lid, n):
        """The label's persistent tensors, viewed at n entries."""
        return _pair_at(self._persist, lid, n)

    @_guarded
    def _ref_addressing(self, ref, label):
        """PlanRef.addressing: the pool kept alive, the reference held."""
        lid = self._known_label(label)
        with ref._mu:
            if ref._plan is None:
                raise RspError(ffi.EINVAL, "the plan reference was released")
            a = ffi.Addressing()
            err = ffi.Error()
            _check(ffi.plan_addressing(ref._plan, lid, ctypes.byref(a), ctypes.byref(err)), err)
            return self._addressing(a)

    @_guarded
    def plan_ref(self, step_id=None) -> PlanRef:
        """A reference on the live plan (or step_id's, a step in flight), a
        context manager: `with pool.plan_ref() as plan: plan.addressing()`."""
        ref = self._with_plan(step_id, lambda plan: PlanRef(self, ffi.plan_ref(plan)))
        with self._lock:
            self._refs.add(ref)
        return ref

    @_guarded
    def plan_digest(self, step_id=None) -> int:
        """The 64-bit digest of the live plan (or of step_id's, a step in
        flight) for ranks to compare (rsp_plan_digest): a hash of the step,
        each label's rows and slots, the free stack and the generation.
        Pools that handled the same messages in the same order give equal
        digests. step_next answers it too (AdmitOutcome.plan_digest), without
        this read. RSP_ENOPLAN when there is no such plan."""
        return self._with_plan(step_id, ffi.plan_digest)

    def _with_plan(self, step_id, use, checked=False):
        """use(plan) on the live plan (or step_id's) inside a read section;
        RSP_ENOPLAN when there is none. checked: step_id checked and the
        thread registered as a reader already."""
        if not checked:
            if step_id is not None:
                _uint(step_id, "step_id", 64)
            _reader.ensure()
        err = ffi.Error()
        st = ffi.read_begin()
        if st != ffi.OK:
            _check(ffi.read_explain(st, ctypes.byref(err)), err)
        try:
            plan = (ffi.plan_live(self._handle()) if step_id is None
                    else ffi.plan_of_step(self._handle(), step_id))
            if not plan:
                raise RspError(ffi.ENOPLAN, "no live plan yet" if step_id is None
                               else f"no plan of step {step_id}")
            return use(plan)
        finally:
            ffi.read_end()

    @_guarded
    def wait_ready(self, addressing, stream=None):
        """Order work after the plan's ready event (its zeroing and copies):
        on a CUDA pool, make `stream` (default: torch's current stream) wait
        for it on the device (cudaStreamWaitEvent, no host wait); on a CPU
        pool, wait on the host (addressing() already did, unless wait=False)."""
        ev = addressing.ready
        if self._info.device == ffi.DEVICE_HOST or ev is None or not ev.handle:
            if ev is not None:
                self._wait(ev)
            return
        if stream is None:
            stream = _torch().cuda.current_stream()
        handle = getattr(stream, "cuda_stream", stream)  # a torch stream or a raw cudaStream_t
        rc = _cudart().cudaStreamWaitEvent(ctypes.c_void_p(handle), ctypes.c_void_p(ev.handle), 0)
        if rc != 0:
            raise RspError(ffi.STATUS_NAMES.index("RSP_EDEVICE"),
                           f"cudaStreamWaitEvent failed with CUDA error {rc}")

    @_guarded
    def wait(self, event, timeout_ns=ffi.WAIT_FOREVER):
        """Wait on the host for one of the pool's events (an addressing's ready)."""
        self._wait(event, timeout_ns)

    def _wait(self, event, timeout_ns=ffi.WAIT_FOREVER):
        err = ffi.Error()
        if not isinstance(event, ffi.Event):
            raise TypeError(f"event must be an rsp event (an addressing's ready), not "
                            f"{type(event).__name__}")
        _check(ffi.event_wait(self._handle(), ctypes.byref(event),
                              _uint(timeout_ns, "timeout_ns", 64), ctypes.byref(err)), err)

    def _addressing(self, a):
        n = a.length
        si = hs = None
        if _torch_available():
            dev = self._info.device == ffi.DEVICE_CUDA
            si = self._addr_tensor(a, ffi.DLPACK_DEVICE_SLOT_INDICES if dev
                                   else ffi.DLPACK_SLOT_INDICES)
            hs = self._addr_tensor(a, ffi.DLPACK_DEVICE_HAS_STATE if dev
                                   else ffi.DLPACK_HAS_STATE).view(_torch().bool)
        return RecurrentAddressing(si, hs, a.num_rows, ctypes.string_at(a.slot_indices, 4 * n),
                                   ctypes.string_at(a.has_state, n), a.step_id,
                                   ctypes.string_at(a.generations, 8 * a.num_rows),
                                   ffi.Event(a.ready.kind, a.ready.handle, a.ready.value))

    def _fast_addressing(self, lid, step_id, wait, persistent):
        """addressing() of a CPU pool through rsp._fast: the read section,
        the copies and the ready wait in one call; the tensors share
        bytearrays of their own (torch.frombuffer), copies of the plan's
        vectors as the DLPack exports are, or (persistent) the label's
        persistent tensors, written in place."""
        p = self._persist.get(lid) if persistent else None
        if p is not None:
            (si_buf, hs_buf, num_rows, si, hs, sid, gen, kind, handle,
             value) = _FAST.addressing(self._handle(), lid, step_id, wait, p.si, p.hs)
        else:
            (si_buf, hs_buf, num_rows, si, hs, sid, gen, kind, handle,
             value) = _FAST.addressing(self._handle(), lid, step_id, wait)
        tt = _TENSORS or _tensor_makers()
        if persistent and tt[0] is not None:
            n = len(hs)
            if si_buf is not None:  # no persistent pair yet, or too small
                p = self._persistent(lid, n)
                p.si[:4 * n] = si_buf
                p.hs[:n] = hs_buf
            elif p.n != n:
                p.view(n)
            return RecurrentAddressing(p.ts, p.th, num_rows, si, hs, sid, gen,
                                       (kind, handle, value))
        if tt[0] is None:
            ts = th = None
        elif si_buf:
            frombuffer, i32, b8 = tt
            ts = frombuffer(si_buf, dtype=i32)
            th = frombuffer(hs_buf, dtype=b8)
        else:  # frombuffer refuses an empty buffer
            t = _torch()
            ts = t.empty(0, dtype=t.int32)
            th = t.empty(0, dtype=t.bool)
        return RecurrentAddressing(ts, th, num_rows, si, hs, sid, gen, (kind, handle, value))

    def _addr_tensor(self, a, part):
        out = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.addressing_dlpack(self._handle(), ctypes.byref(a), part, ctypes.byref(out),
                                     ctypes.byref(err)), err)
        return _dlpack.to_torch(out.value)

    @_guarded
    def block(self, name, layer_idx):
        """One layer's contiguous slot-major view of a block: a torch tensor
        [max_slots, *shape] sharing the pool's memory (no copy)."""
        out = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.pool_block_dlpack(self._handle(), _c_name(name, "name"),
                                     _uint(layer_idx, "layer_idx"),
                                     ctypes.byref(out), ctypes.byref(err)), err)
        return _dlpack.to_torch(out.value)

    # -- queries --

    @_guarded
    def stats(self):
        """A consistent snapshot of rsp's counters (a dict)."""
        s = ffi.Stats()
        err = ffi.Error()
        _check(ffi.stats_snapshot(self._handle(), ctypes.byref(s), ctypes.byref(err)), err)
        return {f: getattr(s, f) for f, _ in ffi.Stats._fields_}

    # -- metrics (rsp_metrics_text, rsp_metrics_latency) --

    @_guarded
    def metrics_text(self, name="rsp"):
        """Every counter and gauge (holdings per label included), and the
        latency histograms once turned on, in the Prometheus text format
        (a str), each sample labelled pool=name and rank
        (rsp_metrics_text). Any thread, no message."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        raw = name.encode()
        err = ffi.Error()
        need = ctypes.c_size_t(0)
        _check(ffi.metrics_text(self._handle(), raw, None, 0, ctypes.byref(need),
                                ctypes.byref(err)), err)
        while True:  # the counters move between the calls: grow and retry
            buf = ctypes.create_string_buffer(need.value + 256)
            st = ffi.metrics_text(self._handle(), raw, buf, len(buf), ctypes.byref(need),
                                  ctypes.byref(err))
            if st != _ECAPACITY:
                _check(st, err)
                return buf.value.decode()

    @_guarded
    def metrics_latency(self, on):
        """Turn the latency histograms on or off (rsp_metrics_latency; off
        at creation): rsp_owner_seconds per message kind,
        rsp_post_to_plan_seconds and rsp_device_lag_seconds. Off, no clock
        is read."""
        if not isinstance(on, bool):
            raise TypeError(f"on must be a bool, not {type(on).__name__}")
        err = ffi.Error()
        _check(ffi.metrics_latency(self._handle(), on, ctypes.byref(err)), err)

    @_guarded
    def counters(self):
        """rsp's counters and gauges (a dict, the fields of stats()) read
        without a message (rsp_stats_peek): any thread, lock-free, each
        field atomic but the set not a snapshot (stats() is one). The gauges
        include every message answered before the read."""
        s = ffi.Stats()
        err = ffi.Error()
        _check(ffi.stats_peek(self._handle(), ctypes.byref(s), ctypes.byref(err)), err)
        return {f: getattr(s, f) for f, _ in ffi.Stats._fields_}

    # --- the state dump -------------------------------------------------------

    @_guarded
    def dump(self):
        """The pool's state as a dict (rsp_pool_dump's JSON, parsed): taken in
        one owner turn, changes nothing. Keys: pool (device, layers, blocks,
        ordered, guard: its counts or None), labels, slots, free_stack,
        free_fresh, pending, requests, checkpoints, steps, stage; the format
        is in docs/guide.md, "Debugging". Waits for the owner."""
        size = 16384
        while True:
            buf = ctypes.create_string_buffer(size)
            needed = ctypes.c_size_t(0)
            err = ffi.Error()
            st = ffi.pool_dump(self._handle(), buf, size, ctypes.byref(needed), ctypes.byref(err))
            if st == ffi.ECAPACITY:
                size = max(needed.value + needed.value // 4, size * 2)  # it may grow meanwhile
                continue
            _check(st, err)
            return json.loads(buf.value.decode("utf-8"))

    def info(self):
        """The pool's immutable facts (rsp_pool_info, a dict): num_layers,
        num_blocks, max_slots, usable_slots, sink, pad_index, slot_bytes (all
        layers and blocks of one slot, a checkpoint's size), total_bytes,
        device ("cpu" or "cuda"), owner_cpu (-1: not pinned)."""
        i = self._info
        out = {f: getattr(i, f) for f, _ in ffi.PoolInfo._fields_}
        out["device"] = "cuda" if i.device == ffi.DEVICE_CUDA else "cpu"
        return out

    @property
    def callback_exceptions(self) -> int:
        """How many exceptions this pool's on_error and on_checkpoint_evict
        callbacks raised (each caught on the owner thread; the failure or
        eviction it was told of stands)."""
        return self._hooks.count if self._hooks is not None else 0

    @property
    def callback_exception(self) -> Optional[BaseException]:
        """The first exception a callback raised (also said on stderr), or None."""
        return self._hooks.first if self._hooks is not None else None

    @property
    @_guarded
    def num_free_slots(self) -> int:
        s = ffi.Stats()
        err = ffi.Error()
        _check(ffi.stats_peek(self._handle(), ctypes.byref(s), ctypes.byref(err)), err)
        return s.free_slots

    @_guarded
    def holding(self, rid, label="main") -> Optional[SlotState]:
        """rid's slot under label, or None when it holds none."""
        h = ffi.Holding()
        err = ffi.Error()
        with self._lock:
            v = self._rids.lookup(rid)
        st = ffi.holding_get(self._handle(), v, self._known_label(label), ctypes.byref(h),
                             ctypes.byref(err))
        if st == ffi.ENOREQ:
            return None
        _check(st, err)
        return SlotState(h.index, h.has_state, h.generation)

    @property
    def pad_index(self) -> int:
        """What an unaddressed row points at (the sink, or -1 without one)."""
        return self._info.pad_index

    @property
    def max_slots(self) -> int:
        return self._info.max_slots

    @property
    def supports_preplan(self) -> bool:
        return True


_CUDART = []


def _cudart():
    """The CUDA runtime (libcudart), loaded on first use by a CUDA pool."""
    if not _CUDART:
        import ctypes.util

        name = ctypes.util.find_library("cudart") or "libcudart.so"
        lib = ctypes.CDLL(name)
        lib.cudaStreamWaitEvent.restype = ctypes.c_int
        lib.cudaStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        _CUDART.append(lib)
    return _CUDART[0]


def _torch():
    """The torch module, or None without one (imported once, under a lock)."""
    return _dlpack.torch_module()


def _torch_available():
    return _torch() is not None


_TENSORS = []


class _Persistent:
    """A label's persistent addressing tensors (addressing(persistent=True)):
    bytearrays of cap entries, the tensors over them, and ts/th, their
    views at the last read's n entries."""

    __slots__ = ("si", "hs", "cap", "base_s", "base_h", "ts", "th", "n")

    def __init__(self, cap):
        frombuffer, i32, b8 = _TENSORS or _tensor_makers()
        self.si = bytearray(4 * cap)
        self.hs = bytearray(cap)
        self.cap = cap
        self.base_s = frombuffer(self.si, dtype=i32)
        self.base_h = frombuffer(self.hs, dtype=b8)
        self.n = -1

    def view(self, n):
        self.ts = self.base_s[:n]
        self.th = self.base_h[:n]
        self.n = n


def _pair_at(table, key, n):
    """table[key], a _Persistent viewed at n entries: made, or made anew
    (new storage) when n passes its capacity, a power of two of at least
    64 entries."""
    p = table.get(key)
    if p is None or n > p.cap:
        p = table[key] = _Persistent(max(64, 1 << (n - 1).bit_length()))
    if p.n != n:
        p.view(n)
    return p


def _tensor_makers():
    """(torch.frombuffer, torch.int32, torch.bool), or (None,) * 3 without
    torch: looked up once for the fast addressing()."""
    t = _torch()
    _TENSORS[:] = (t.frombuffer, t.int32, t.bool) if t is not None else (None, None, None)
    return _TENSORS


def _fast_step(m):
    """A marshalled step as rsp._fast takes it: its rows and flags (a
    steady step), else the address of its ctypes rsp_step, which m keeps
    alive for the call."""
    lite = m.lite
    return lite if lite is not None else ctypes.addressof(m.step)


# In the order rsp._fast's init takes them (python/rsp/_fast.c).
_FAST_FUNCTIONS = ("rsp_step_next", "rsp_read_begin", "rsp_read_explain", "rsp_read_end",
                   "rsp_plan_live", "rsp_plan_of_step", "rsp_plan_addressing", "rsp_event_wait",
                   "rsp_step_admit", "rsp_step_plan", "rsp_step_commit")
# rsp._fast.step's first argument.
_FAST_ADMIT, _FAST_PLAN, _FAST_COMMIT = 0, 1, 2


def _load_fast():
    """rsp._fast (python/rsp/_fast.c), the compiled step_next and CPU
    addressing(), from the package's directory or librsp's (a build tree
    puts it beside librsp.so); None when it is not built, or RSP_PY_FAST=0.
    RSP_PY_FAST=1 makes a missing or unloadable module an ImportError.
    It calls the functions of the librsp ctypes loaded (their addresses
    given to init), never a second copy of the library."""
    mode = os.environ.get("RSP_PY_FAST", "")
    if mode == "0":
        return None
    import importlib.machinery
    import importlib.util

    dirs = [os.path.dirname(os.path.abspath(__file__))]
    lib_path = getattr(ffi.lib, "_name", "") or ""
    if os.path.sep in lib_path:
        dirs.append(os.path.dirname(os.path.abspath(lib_path)))
    tried = []
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_fast" + suffix)
            if not os.path.exists(path):
                continue
            try:
                spec = importlib.util.spec_from_file_location("rsp._fast", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                mod.init(RspError, tuple(ctypes.cast(getattr(ffi.lib, f), ctypes.c_void_p).value
                                         for f in _FAST_FUNCTIONS))
                mod.bind(AdmitOutcome, _ADMIT_OK, _Marshal, RecurrentAddressing)
                return mod
            except (ImportError, OSError, AttributeError) as e:
                tried.append(f"{path} ({e})")
    if mode == "1":
        raise ImportError("rsp: RSP_PY_FAST=1 but rsp._fast is not usable; looked in "
                          + ", ".join(dirs) + (": " + "; ".join(tried) if tried else ""))
    return None


_FAST = _load_fast()


def _fast_enabled():
    """Whether the compiled fast path (rsp._fast) is in use."""
    return _FAST is not None
