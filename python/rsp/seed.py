# The seed's RecurrentStatePool (mstar.engine.resources.recurrent.pool, the
# page in shared/reference) on librsp, driven with the engine's own step and
# context objects. docs/python.md, "The seed's class", says what it reads
# from them, what it returns, and what it deliberately does differently.
#
# It is rsp.Pool (the package's Step API) underneath: each engine step
# becomes one rsp Step with an id of the pool's choosing, found again at
# plan, commit and rollback by the step object (or, failing that, by an
# equal declaration).
#
# SPDX-License-Identifier: Apache-2.0
import array
import ctypes
import dataclasses
import importlib.util
import operator
import sys
import threading
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from . import _dlpack
from . import _ffi as ffi
from . import pool as _pool
from .pool import BlockSpec, Lease, PoolConfig, RspError, Step, _check, _reader
from .pool import RecurrentStatePool as Pool
from .seed_engine import (ADMIT_OK, AdmitFailedReason, AdmitOutcome, AllocationFailed, BucketKey,
                          CGSlotKey, CGSlotSpec, EngineResourceInfo, FullAdmitOutcome,
                          RecurrentBlockConfig, RecurrentStateConfig, RecurrentStateSpec,
                          RecurrentStep, Resource, ResourceStep, Segment, SlotLease, StepContext,
                          StepRunner, SubmoduleStep)

__all__ = [
    "ADMIT_OK", "NO_SLOT", "SINK_SLOT", "AdmitFailedReason", "AdmitOutcome", "AllocationFailed",
    "BucketKey", "CGSlotKey", "CGSlotSpec", "EngineResourceInfo", "RecurrentAddressing",
    "RecurrentBlockConfig", "RecurrentStateConfig", "RecurrentStatePool", "RecurrentStateSpec",
    "RecurrentStep", "ResourceStep", "RspAssertionError", "RspIndexError", "RspKeyError",
    "RspValueError", "Segment", "SlotLease", "SlotState", "StepContext", "install_alias",
]

# What a row that addresses nothing points at: the sink slot (held out of
# circulation, absorbing padding rows' writes), or NO_SLOT without one.
SINK_SLOT = ffi.SINK_SLOT
NO_SLOT = ffi.NO_SLOT

_plan_staged = ffi._proto("rsp_plan_staged", ffi.vp, ffi.vp)
_plan_step_id = ffi.plan_step_id
_EORDER = ffi.STATUS_NAMES.index("RSP_EORDER")
_ESTAGED = ffi.STATUS_NAMES.index("RSP_ESTAGED")
_ECAPACITY = ffi.STATUS_NAMES.index("RSP_ECAPACITY")
_EDUPROW = ffi.STATUS_NAMES.index("RSP_EDUPROW")
_MAX_INFLIGHT = 64  # rsp's most admitted-and-unfinished steps (RSP__MAX_INFLIGHT)
# The rid of device_sync's capture row: a capture row holds, ingests and
# forks nothing, so it never becomes a request.
_SYNC_RID = (1 << 64) - 1

# --- errors: rsp's status, and the exception type the original raised ------


class RspKeyError(RspError, KeyError):
    """An unknown block, or a label this step did not plan (KeyError in the
    original)."""

    def __str__(self):  # KeyError's str() would quote the message
        return f"{self.name}: {self.message}"


class RspIndexError(RspError, IndexError):
    """A layer index out of range (IndexError in the original)."""


class RspAssertionError(RspError, AssertionError):
    """A second stage, or a leased buffer too small (asserts in the original)."""


class RspValueError(RspError, ValueError):
    """A step or configuration rsp refuses as invalid (two rows on one slot,
    a block shape that is not positive)."""


def _recast(e, cls):
    return cls(e.status, e.message)


# --- results ------------------------------------------------------------------


@dataclass
class SlotState:
    """A request's slot under one label: whether it holds state to resume
    from (False: it reads as zeros), and the pool-wide generation of its
    last assignment, fork or reset."""

    index: int
    has_state: bool = False
    generation: int = 0


@dataclass(frozen=True)
class RecurrentAddressing:
    """Where one label's rows live this step: the pool's whole plan output.

    slot_indices (int32) and has_state (bool) are tensors on the pool's
    device, as long as the plan's vector (a graph bucket's padding rows
    point at pad_index); host_slot_indices and host_has_state are lists of
    the num_rows real rows' values, so a backend needs no device read.
    Token layout (cu_seqlens, chunk metadata) is the backend's to build."""

    slot_indices: Any
    has_state: Any
    num_rows: int
    host_slot_indices: Optional[Sequence[int]] = None
    host_has_state: Optional[Sequence[bool]] = None

    # Set by the pool on what it returns (not fields: the original has none).
    step_id = None  # rsp's id of the step this plan belongs to
    staged = False  # a staged (preplanned) plan
    ready = None    # the rsp event the plan's device work completes
    _gen = b""
    # A live plan of a step with per-token rows (step.per_token_states): the
    # [length, 1 + K] int32 state index tensor on the pool's device (under a
    # lease rsp's graph-stable buffer) and its num_rows real rows as lists.
    spec_state_indices = None
    host_spec_state_indices = None

    @property
    def generations(self):
        """Each real row's holding generation (0: no holding), as planned."""
        return array.array("Q", self._gen).tolist()


_BOOLS = (False, True)


def _planned(a, si, hs, staged, dev):
    """A RecurrentAddressing of rsp_addressing a; si and hs: its tensors,
    or None without torch (then made here on a CPU pool, from the copies)."""
    n, length = a.num_rows, a.length
    if dev or si is None:
        si_b = ctypes.string_at(a.slot_indices, 4 * n)
        host_si = array.array("i", si_b).tolist()
        host_hs = list(map(_BOOLS.__getitem__, ctypes.string_at(a.has_state, n)))
    else:
        host_si = si.tolist()
        host_hs = hs.tolist()
        if length > n:
            del host_si[n:], host_hs[n:]
    out = RecurrentAddressing(si, hs, n, host_si, host_hs)
    d = out.__dict__
    d["step_id"] = a.step_id
    d["staged"] = staged
    d["_gen"] = ctypes.string_at(a.generations, 8 * n)
    d["ready"] = ffi.Event(a.ready.kind, a.ready.handle, a.ready.value)
    return out


def _host_bytes(a):
    """A CPU plan's vectors as bytearrays of their own: (slot indices, has_state)."""
    return (bytearray(ctypes.string_at(a.slot_indices, 4 * a.length)),
            bytearray(ctypes.string_at(a.has_state, a.length)))


# --- reading the engine's objects -----------------------------------------------

_item0 = operator.itemgetter(0)
_item1 = operator.itemgetter(1)


_MISSING = object()


def _attr(obj, name, default=None):
    """obj.name, or obj[name] for a mapping (a step or context given as a
    dict). The attribute is tried first: no field name read here is a
    mapping method's, and the getattr is the common case's only cost."""
    v = getattr(obj, name, _MISSING)
    if v is not _MISSING:
        return v
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return default


def _segment(seg, i):
    """One segment as (request_id, label, span): a tuple, a mapping, or an
    object with those attributes."""
    if isinstance(seg, (tuple, list)):
        if len(seg) >= 3:
            return (seg[0], seg[1], seg[2])
    elif isinstance(seg, Mapping):
        if "request_id" in seg and "span" in seg:
            return (seg["request_id"], seg.get("label", "main"), seg["span"])
    else:
        try:
            return (seg.request_id, seg.label, seg.span)
        except AttributeError:
            pass
    raise TypeError(f"step.segments[{i}]: a segment is (request_id, label, span), a Segment "
                    f"or an object with those attributes, not {type(seg).__name__} {seg!r}")


def _fork(f, what, i):
    """One fork as (from_label, to_label)."""
    if isinstance(f, (tuple, list)) and len(f) == 2:
        return (f[0], f[1])
    src = _attr(f, "from_label", None)
    dst = _attr(f, "to_label", None)
    if src is None or dst is None:
        raise TypeError(f"step.{what}[{i}]: a fork is a (from_label, to_label) pair, not "
                        f"{type(f).__name__} {f!r}")
    return (src, dst)


def _forks(step, what):
    forks = _attr(step, what, ())
    if not forks:
        return ()
    if not isinstance(forks, (tuple, list)):
        raise TypeError(f"step.{what} must be a sequence of (from_label, to_label) pairs, not "
                        f"{type(forks).__name__}")
    out = tuple(f if type(f) is tuple and len(f) == 2 else _fork(f, what, i)
                for i, f in enumerate(forks))
    return out


def _padding(rows, ctx):
    """The rids of rows that pad a replay to its bucket: the context's
    is_padding_row (or not is_real_row) for each rid that is not among its
    request_ids; without either, the padded ids that are not request ids."""
    real = _attr(ctx, "request_ids", None)
    padded = _attr(ctx, "padded_request_ids", None)
    if padded is not None and padded is real:
        return ()  # not a padded replay
    is_pad = getattr(ctx, "is_padding_row", None)
    is_real = getattr(ctx, "is_real_row", None)
    if padded is None and is_pad is None and is_real is None:
        return ()
    rids = set(map(_item0, rows))
    if real is not None:
        rids.difference_update(real)
    if not rids:
        return ()
    if callable(is_pad):
        return {r for r in rids if is_pad(r)}
    if callable(is_real):
        return {r for r in rids if not is_real(r)}
    return rids.intersection(padded)


# Row types passed to rsp as they are: NamedTuples of three fields (an
# engine's Segment), filled in as they are seen; plain tuples are passed
# when every one has three items.
_SEG3 = set()
_NOT_SEG3 = set()
_TUPLE = frozenset((tuple,))
_LEN3 = frozenset((3,))


def _seg3(t):
    """Whether every t is a (request_id, label, span) tuple: a NamedTuple of
    three fields with tuple's equality (the last-rows cache may keep it)."""
    if t in _SEG3:
        return True
    if t in _NOT_SEG3:
        return False
    ok = (isinstance(t, type) and issubclass(t, tuple) and len(getattr(t, "_fields", ())) == 3
          and _pool.keep_row_type(t))
    (_SEG3 if ok else _NOT_SEG3).add(t)
    return ok


def _rows(segs):
    """A step's segments as a list of (rid, label, span) tuples: the
    segments themselves when they are such tuples (a Segment NamedTuple,
    the common case: one pass over their types and a list copy)."""
    if not segs:
        return []
    if not isinstance(segs, (tuple, list)):
        segs = list(segs)
    fast = _pool._FAST
    if fast is not None and fast.types_within(segs, _SEG3):
        return list(segs)  # every type seen before (the steady case), in one C pass
    kinds = set(map(type, segs))
    if (_SEG3.issuperset(kinds) or all(map(_seg3, kinds))
            or (kinds == _TUPLE and _LEN3.issuperset(map(len, segs)))):
        return list(segs)
    return [_segment(s, i) for i, s in enumerate(segs)]


class _SpecRows(list):
    """A step's rows after _per_token: some ask for per-token states (rsp's
    7-field rows). Its type says so, so a plain step pays no scan."""


def _per_token(rows, spec):
    """rows with per-token states asked for the segments the step's
    per_token_states names: True, every row that is no padding; else a
    collection of request ids (a verify step's speculative requests)."""
    if spec is not True:
        if isinstance(spec, (str, bytes, bool)) or not hasattr(spec, "__contains__"):
            raise TypeError(f"step.per_token_states must be True or a collection of request "
                            f"ids, not {type(spec).__name__} {spec!r}")
    out = _SpecRows()
    for r in rows:
        if (len(r) < 4 or not r[3]) and (spec is True or r[0] in spec):
            out.append((r[0], r[1], r[2], False, False, 0, True))
        else:
            out.append(r)
    return out


def _accepted_rows(rows, counts):
    """rows with each per-token row's accepted count from counts: a mapping
    request id -> count, or a sequence (a list, a tensor) with one count per
    segment or one per per-token segment (vLLM's num_accepted_tokens)."""
    if hasattr(counts, "tolist") and not isinstance(counts, Mapping):
        counts = counts.tolist()
    spec = [i for i, r in enumerate(rows) if len(r) > 6 and r[6]]
    if isinstance(counts, Mapping):
        get = {i: counts.get(rows[i][0]) for i in spec}
    elif isinstance(counts, (list, tuple)) and len(counts) in (len(rows), len(spec)):
        get = {i: counts[i if len(counts) == len(rows) else k] for k, i in enumerate(spec)}
    else:
        raise TypeError(f"num_accepted_tokens: a mapping request id -> count or a sequence of "
                        f"{len(rows)} (one per segment) or {len(spec)} (one per per-token "
                        f"segment) counts, not {type(counts).__name__} {counts!r}")
    out = list(rows)
    for i in spec:
        a = get[i]
        if a is None:
            raise ValueError(f"num_accepted_tokens: no count for request {rows[i][0]!r} "
                             f"(step.segments[{i}] asks for per-token states)")
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a <= rows[i][2]:
            raise ValueError(f"num_accepted_tokens: request {rows[i][0]!r} accepted {a!r}: "
                             f"an int 0 .. {rows[i][2]} (its span)")
        out[i] = rows[i][:7] + (a,)
    return out


# --- step records --------------------------------------------------------------

_ADMITTED, _STAGED, _PLANNED = 0, 1, 2
# How many steps _reap ended are remembered (RecurrentStatePool._ended):
# an engine plans or commits such a step soon after, if ever.
_ENDED_KEPT = 64
_ANY = (_ADMITTED, _STAGED, _PLANNED)


class _Rec:
    """One engine step in flight in rsp: its rsp Step (id and marshalled
    declaration), the objects it was given as, its phase, its plan."""

    __slots__ = ("sid", "objs", "ctx", "decl", "rstep", "phase", "result", "labels", "ahead")

    def __init__(self, sid, step, ctx, decl):
        self.sid = sid
        self.objs = [step]  # kept alive: the index below is by id()
        self.ctx = ctx
        self.phase = _ADMITTED
        self.result = None
        self.ahead = False  # admitted on a pre-plan pass only, not yet live
        self.set_decl(decl)

    def set_decl(self, decl):
        rows, pre, post, capture, lease = decl
        self.decl = decl
        self.rstep = Step(self.sid, rows, pre, post, capture, False, lease)
        self.labels = None  # made at the first read (_labels_of)


# --- the pool -------------------------------------------------------------------


class _ResourceDefaults:
    """What the engine's Resource base class answers for the hooks this pool
    has no use for, so a runner that calls them on every resource works."""

    def depends_on(self):
        return set()

    def admit_retrieve(self, rid, node_name, graph_walk, published):
        return ADMIT_OK

    def publish(self, request_id):
        return None

    def narrow(self, step, ctx):
        return None  # nothing narrowed: the runner keeps the step as declared

    @property
    def force_double_buffer(self):
        return False

    @property
    def supports_eviction(self):
        return False

    def is_offloaded(self, rid):
        return False

    def offload(self, rid):
        return 0

    def reload(self, rid):
        return True

    def reclaimable(self, rid):
        return 0

    def get_offload_priority(self, rid):
        return 0.0


def _device_name(device):
    """'cpu' or 'cuda:N' for a torch.device, a string or an int ordinal."""
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    name = str(device)
    if name == "cuda":
        torch = _pool._torch()
        if torch is not None and torch.cuda.is_available():
            return f"cuda:{torch.cuda.current_device()}"
    return name


def _block_items(blocks):
    """(name, block) pairs of a config's blocks: a mapping, or a sequence
    of rsp BlockSpecs or (name, block) pairs."""
    if isinstance(blocks, Mapping):
        return list(blocks.items())
    if isinstance(blocks, (tuple, list)):
        out = []
        for i, b in enumerate(blocks):
            if isinstance(b, BlockSpec):
                out.append((b.name, b))
            elif isinstance(b, (tuple, list)) and len(b) == 2:
                out.append((b[0], b[1]))
            else:
                raise TypeError(f"config.blocks[{i}] must be a BlockSpec or a (name, block) "
                                f"pair, not {type(b).__name__}")
        return out
    raise TypeError(f"config.blocks must be a mapping of name -> block, not "
                    f"{type(blocks).__name__}")


def _pool_config(config, world_size=1, rank=0):
    """rsp's PoolConfig for a RecurrentStateConfig (or any object or mapping
    with its fields). Block shapes are taken as they are now: build()
    shards the config first, as the original does."""
    if isinstance(config, PoolConfig):
        if config.max_inflight_steps:
            return config
        return dataclasses.replace(config, max_inflight_steps=_MAX_INFLIGHT)
    num_layers = _attr(config, "num_layers", None)
    if num_layers is None:
        raise TypeError(f"config must be a RecurrentStateConfig (num_layers, blocks, max_slots, "
                        f"disable_sink_slot) or an rsp.PoolConfig, not {type(config).__name__}")
    items = _block_items(_attr(config, "blocks", None) or {})
    if not items:
        raise ValueError("config.blocks: a recurrent state pool must declare a block")
    specs = []
    for name, b in items:
        if isinstance(b, BlockSpec):
            specs.append(BlockSpec(name, tuple(b.shape), b.dtype, ()))
            continue
        shape = _attr(b, "shape", None)
        if shape is None:
            raise TypeError(f"config.blocks[{name!r}] has no shape")
        dims = _attr(b, "shard_dims", ()) or ()
        shape = tuple(shape)
        if world_size > 1:
            specs.append(BlockSpec(name, tuple(_attr(b, "_unsharded_shape", shape)),
                                   _attr(b, "dtype", "float32"), tuple(dims)))
        else:
            specs.append(BlockSpec(name, shape, _attr(b, "dtype", "float32"), ()))
    return PoolConfig(num_layers=num_layers, blocks=specs,
                      max_slots=_attr(config, "max_slots", 256),
                      sink=not _attr(config, "disable_sink_slot", False),
                      world_size=world_size, rank=rank, max_inflight_steps=_MAX_INFLIGHT)


class RecurrentStatePool(Pool, _ResourceDefaults):
    """A pool of fixed-size recurrent state slots: the seed's class.

    Storage only: the pool hands out slots, keeps the per-layer tensors they
    index, and says which slot each row of a step addresses.

    admit / plan / commit / rollback_admit take the engine's step (segments
    of (request_id, label, span), pre_forks, post_forks) and context
    (capture, is_preplan, slot_lease, padded request ids) by duck typing.
    Given an rsp.Step instead, they are rsp.Pool's (the package's Step API),
    and so is every other method this class inherits."""

    def __init__(self, device, config, comm_group=None, *, _tp=(1, 0)):
        cfg = _pool_config(config, *_tp)
        try:
            super().__init__(_device_name(device), cfg)
        except RspError as e:
            if e.status == ffi.EINVAL:
                raise _recast(e, RspValueError) from None
            raise
        self.config = config
        self._seed_lock = threading.RLock()
        self._recs = {}       # rsp step id -> _Rec, in admit order
        self._by_obj = {}     # id(engine step) -> _Rec
        self._next_sid = 1
        self._stage_rec = None  # the _Rec whose plan is staged
        self._live = None       # label -> RecurrentAddressing: the newest live plan's
        self._views = {}        # (name, layer_idx) -> tensor: block()
        self._whole = {}        # name -> the block's whole tensor: _blocks
        self._block_names = [b.name for b in cfg.blocks]
        # Blocks declared per_layer=False: rsp stores every block per layer,
        # so these use layer 0 of theirs (the other layers' bytes are spent
        # and follow the slot's zeroing and forks unread).
        self._per_slot = frozenset(
            name for name, b in _block_items(_attr(config, "blocks", None) or {})
            if not isinstance(b, BlockSpec) and not _attr(b, "per_layer", True))
        self._buckets = {}      # a lease's bucket -> rsp bucket id
        self._graph_bs = 0      # the largest max_bs build_accelerator_graph_buffers took
        # id(engine step) -> the step, for the last steps _reap ended: their
        # plan is the original's plan of requests it no longer holds.
        self._ended = {}
        # (bucket id, lease slot, label id) -> _Persistent: a CPU pool's
        # addressing tensors under a lease, one storage rewritten by every
        # plan of the key, as the original's graph buffers (_leased_pair).
        self._leased = {}
        self._dirty = False     # device work queued that no plan's ready covers yet
        # Set by the first engine step: from then on block() waits for the
        # device work the methods queue (with rsp Steps the caller does,
        # and the caller owns the step ids).
        self._engine = False
        self._done = None       # the last forward_done event this class recorded
        self._labels_last = (None, None)  # (rows buffer, its labels): _labels_of
        self._removed = False   # a request was removed since the last _reap
        self._comm_group = comm_group  # build's info.joint_comm_group: post_warmup_validate

    @classmethod
    def build(cls, spec, info):
        """The engine's constructor: spec.config on info.device, sharded for
        info.joint_comm_group's world size."""
        config = _attr(spec, "config", None)
        if config is None:
            raise TypeError(f"spec must carry a config (a RecurrentStateSpec), not "
                            f"{type(spec).__name__}")
        group = _attr(info, "joint_comm_group", None)
        tp = (1, 0)
        if group is not None:
            world = int(_attr(group, "world_size", 1) or 1)
            if hasattr(config, "shard"):
                config.shard(world)  # the original's side effect: its users read the shapes
            elif world > 1:
                tp = (world, int(_attr(group, "rank", 0) or 0))
        return cls(device=_attr(info, "device", "cpu"), config=config, comm_group=group, _tp=tp)

    def post_warmup_validate(self):
        """Raise RuntimeError unless every rank of the build's comm group
        (its tp_group and sp_group, or the group itself) holds as many free
        slots: each rank admits from its own pool, so the ranks' verdicts
        agree only while their free slots do. One all_gather per group."""
        group = self._comm_group
        if group is None or int(_attr(group, "world_size", 1) or 1) == 1:
            return
        torch = _pool._torch()
        local = torch.tensor([self.num_free_slots], dtype=torch.int64,
                             device=self._view(self._block_names[0]).device)
        subs = [g for g in (_attr(group, "tp_group"), _attr(group, "sp_group")) if g is not None]
        for g in subs or [group]:
            values = g.all_gather(local, dim=0).cpu().tolist()
            if any(v != values[0] for v in values):
                raise RuntimeError(f"recurrent state pool has asymmetric free slots across "
                                   f"ranks: {values}; check for a per-rank max_slots and for "
                                   f"admits before warmup completes")

    # -- lifetime --

    def cleanup(self, timeout_ns=None):
        """Close the pool; later calls raise RspError RSP_ESHUTDOWN.
        Idempotent. Tensors already handed out stay valid. timeout_ns:
        rsp.Pool.cleanup's."""
        Pool.cleanup(self, timeout_ns)
        blocks = getattr(self, "_views", None)
        if blocks is not None:  # None: __init__ failed before it made them
            blocks.clear()
            self._whole.clear()
            self._leased.clear()
            self._ended.clear()
            self._live = None

    close = cleanup

    # -- storage --

    def block(self, name, layer_idx=None):
        """One layer's contiguous slot-major view of a block: a tensor
        [max_slots, *shape] sharing the pool's memory; a block declared
        per_layer=False takes no layer_idx (ValueError either way round, as
        the original). The same tensor each call (the storage never moves).
        Device work the pool queued since the last plan (a rollback's or
        reset's zeroing, post-fork copies) is waited for first, so the view
        reads as the original's synchronous pool would."""
        if self._closing:  # the cache below must not outlive the pool
            raise RspError(_pool._ESHUTDOWN, "the pool was cleaned up")
        if self._dirty and self._engine:
            self.device_sync()
        t = self._views.get((name, layer_idx))
        if t is not None and (type(layer_idx) is int or layer_idx is None):  # 1.0 hashes as 1
            return t
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if layer_idx is None or name in self._per_slot:
            if name not in self._block_names:
                raise RspKeyError(ffi.EINVAL, f"no block named {name!r}; the pool's blocks: "
                                              f"{', '.join(map(repr, self._block_names))}")
            if (layer_idx is None) != (name in self._per_slot):
                kind = "per slot" if name in self._per_slot else "per layer"
                raise RspValueError(ffi.EINVAL, f"recurrent block {name!r} is {kind}; "
                                                f"got layer_idx={layer_idx}")
            t = self._views[(name, None)] = Pool.block(self, name, 0)
            return t
        if isinstance(layer_idx, bool) or not isinstance(layer_idx, int):
            raise TypeError(f"layer_idx must be an int, not {type(layer_idx).__name__}")
        n = self._info.num_layers
        i = layer_idx + n if layer_idx < 0 else layer_idx
        if not 0 <= i < n:
            raise RspIndexError(ffi.EINVAL, f"layer_idx {layer_idx} is out of range: the pool "
                                            f"has {n} layers")
        if name not in self._block_names:
            raise RspKeyError(ffi.EINVAL, f"no block named {name!r}; the pool's blocks: "
                                          f"{', '.join(map(repr, self._block_names))}")
        t = Pool.block(self, name, i)
        self._views[(name, layer_idx)] = t
        return t

    @property
    def _blocks(self):
        """name -> the block's whole tensor [num_layers, max_slots, *shape]
        (the original's private storage, for code and tests that look at
        it): rsp's storage itself, layer-major, so block(name, layer) is
        its [layer]; a per-slot block's is block(name). A new dict of the
        same tensors each call."""
        for name in self._block_names:
            if name not in self._whole:
                self._whole[name] = (self.block(name) if name in self._per_slot
                                     else self._whole_block(name))
        self._view(self._block_names[0])  # waits for queued device work, as block() does
        return dict(self._whole)

    def _view(self, name, layer_idx=0):
        """block(name, layer_idx), or block(name) of a per-slot block, which
        has no layers: where the seed's own reads need some layer's view."""
        return self.block(name, None if name in self._per_slot else layer_idx)

    def _whole_block(self, name):
        n = self._info.num_layers
        first = self.block(name, 0)
        if n > 1 and self.block(name, 1).data_ptr() != (first.data_ptr() +
                                                        first.numel() * first.element_size()):
            raise RspError(ffi.EINVAL, f"block {name!r}: its layers are not one tensor")
        # Layer 0's export, widened to every layer before torch takes it: the
        # layers follow each other in one allocation (checked above), and the
        # export's deleter releases that allocation, not the shape it names.
        # torch copies the shape and strides when it takes the export.
        out = ctypes.c_void_p()
        err = ffi.Error()
        _check(ffi.pool_block_dlpack(self._handle(), name.encode(), 0, ctypes.byref(out),
                                     ctypes.byref(err)), err)
        t = ctypes.cast(out.value, ctypes.POINTER(_dlpack.DLManagedTensor)).contents.dl_tensor
        dims = [n] + [t.shape[d] for d in range(t.ndim)]
        strides = [1] * len(dims)
        for d in range(len(dims) - 2, -1, -1):
            strides[d] = strides[d + 1] * dims[d + 1]
        shape_arr = (ctypes.c_int64 * len(dims))(*dims)
        stride_arr = (ctypes.c_int64 * len(dims))(*strides)
        t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(stride_arr, ctypes.POINTER(ctypes.c_int64))
        t.ndim = len(dims)
        return _dlpack.to_torch(out.value)

    def gather(self, name, addressing, layer_idx=0):
        """The addressed rows' state of block name at layer_idx (none for a
        per-slot block): a new tensor [num_rows, *shape] (a NO_SLOT row
        reads as zeros)."""
        rows, ok = self._rows_of(addressing)
        view = self._view(name, layer_idx)
        if ok is None:
            return view[rows]
        out = view.new_zeros((len(ok),) + tuple(view.shape[1:]))
        out[ok] = view[rows[ok]]
        return out

    def scatter_(self, name, addressing, value, layer_idx=0):
        """Write value [num_rows, *shape] (converted to the block's dtype)
        into the addressed rows' slots of block name at layer_idx (padding
        rows write the sink; NO_SLOT rows nothing)."""
        rows, ok = self._rows_of(addressing)
        view = self._view(name, layer_idx)
        if getattr(value, "dtype", view.dtype) != view.dtype:
            value = value.to(view.dtype)  # an index_put needs the block's dtype
        if ok is None:
            view[rows] = value
        else:
            view[rows[ok]] = value[ok]

    @staticmethod
    def _rows_of(addressing):
        """(slot ids as int64, the mask of rows that address a slot or None
        when every row does) of an addressing's num_rows rows."""
        rows = addressing.slot_indices[:addressing.num_rows].long()
        if NO_SLOT in (addressing.host_slot_indices or ()):
            return rows, rows >= 0
        return rows, None

    def slot_index(self, rid, label="main"):
        """The slot rid holds under label, or None."""
        h = self.holding(rid, label) if label in self._labels else None
        return None if h is None else h.index

    @property
    def _slots(self):
        """rid -> label -> SlotState for every live request: a snapshot (the
        original's private map, for code and tests that look at it). One
        query per (rid, known label): for debugging, not a step's path."""
        with self._lock:
            rids = list(self._rids._ids) + sorted(self._rids._ints - {_SYNC_RID})
            labels = list(self._labels)
        out = {}
        for rid in rids:
            held = {}
            for label in labels:
                h = Pool.holding(self, rid, label)
                if h is not None:
                    held[label] = SlotState(h.index, h.has_state, h.generation)
            out[rid] = held
        return out

    @property
    def _free(self):
        """The free slots (a snapshot, for code and tests that look at the
        original's free list): every slot neither the sink nor held, highest
        first, as a fresh pool's stack holds them. Not rsp's stack order."""
        held = {s.index for labels in self._slots.values() for s in labels.values()}
        first = 1 if self._info.sink else 0
        return [i for i in range(self._info.max_slots - 1, first - 1, -1) if i not in held]

    # -- requests --

    def reset_request(self, rid, free=False, seq=None):
        """Drop a request's slots: zero them; free hands them back to the
        pool. Unknown rid: nothing happens. seq: an ordered pool's number
        (rsp.Pool)."""
        Pool.reset_request(self, rid, free, seq)
        self._dirty = True

    def remove_request(self, rid, seq=None):
        """Zero and free rid's slots and forget it. A slot that an in-flight
        step addresses is zeroed and freed when that step ends. seq: an
        ordered pool's number (rsp.Pool)."""
        Pool.remove_request(self, rid, seq)
        self._dirty = True
        self._removed = True

    def release(self, rid, label, seq=None):
        Pool.release(self, rid, label, seq)
        self._dirty = True

    # -- steps: finding an engine step's record --

    def _declare(self, step, ctx):
        """An engine step as (rows, pre_forks, post_forks, capture, lease)."""
        rows = _rows(_attr(step, "segments", None))
        capture = bool(_attr(ctx, "capture", False))
        if rows and not capture and ctx is not None:
            pads = _padding(rows, ctx)
            if pads:
                rows = [(r[0], r[1], r[2], True) if r[0] in pads else r for r in rows]
        spec = _attr(step, "per_token_states", None)
        if spec and rows:
            rows = _per_token(rows, spec)
        return (rows, _forks(step, "pre_forks"), _forks(step, "post_forks"), capture,
                self._lease(ctx))

    def _lease(self, ctx):
        lease = _attr(ctx, "slot_lease", None)
        if lease is None:
            return None
        bucket = _attr(lease, "bucket", None)
        if bucket is None:
            return None  # an eager lease
        key = bucket
        try:
            hash(key)
        except TypeError:  # an unhashable bucket: its value names it
            key = repr(bucket)
        bid = self._buckets.get(key)
        if bid is None:
            bid = self._buckets[key] = len(self._buckets)
        return Lease(int(_attr(bucket, "bs", 0)), bid, int(_attr(lease, "slot", 0)))

    def _find(self, step, ctx, phases, decl=None):
        """The record of an engine step in flight in one of phases: by the
        step object, else by an equal declaration (the same context first,
        then the oldest). Returns (rec, decl); decl is computed only when
        the object is not known."""
        rec = self._by_obj.get(id(step))
        if rec is not None and rec.phase in phases:
            if ctx is rec.ctx or ctx is None:
                return rec, decl
            decl = self._declare(step, ctx)
            if decl == rec.decl:
                return rec, decl
        if decl is None:
            decl = self._declare(step, ctx)
        found = None
        for r in self._recs.values():
            if r.phase in phases and r.decl == decl:
                if r.ctx is ctx:
                    found = r
                    break
                if found is None:
                    found = r
        if found is not None:
            found.objs.append(step)
            self._by_obj[id(step)] = found
        return found, decl

    def _open(self, step, ctx, decl):
        sid = self._next_sid
        self._next_sid += 1
        return _Rec(sid, step, ctx, decl)

    def _forget(self, rec):
        self._recs.pop(rec.sid, None)
        for o in rec.objs:
            if self._by_obj.get(id(o)) is rec:
                del self._by_obj[id(o)]
        rec.objs = []
        if self._stage_rec is rec:
            self._stage_rec = None

    def _admit_rec(self, rec):
        """rsp's admit of rec's Step: the pool's AdmitOutcome."""
        try:
            return Pool.admit(self, rec.rstep)
        except RspError as e:
            if e.status in (_EDUPROW, ffi.EINVAL):
                raise _recast(e, RspValueError) from None
            raise
        except (TypeError, ValueError) as e:  # the marshalling's, in the caller's names
            msg = str(e).replace("rows[", "step.segments[", 1)
            if msg.startswith(("pre_forks", "post_forks")):
                msg = "step." + msg
            raise type(e)(msg) from None

    def _failed(self, o):
        usable = self._info.usable_slots
        return AdmitOutcome(ok=False, ready=True, reason=AllocationFailed(
            message=(f"recurrent state pool is full: {usable} usable slots, none free for "
                     f"{o.rid}/{o.label} (the step needs {o.slots_short} more than the "
                     f"{o.free} free)"),
            pages_short=o.slots_short, label=o.label, request_id=o.rid))

    # -- steps --

    def admit(self, step, ctx=None, seq=None):
        """Reserve a slot per addressed (rid, label), plus fork targets.

        Capture rows and a replay's padding rows reserve nothing and address
        the sink instead. All or nothing: a pool too full for the whole
        step is AdmitOutcome(ok=False, reason=AllocationFailed(...)) and
        nothing changed. Admitting a step in flight again (the live pass
        after a preplan) reserves only what it lacks."""
        if isinstance(step, Step):
            if isinstance(step.step_id, int) and step.step_id >= self._next_sid:
                self._next_sid = step.step_id + 1  # the engine path's ids follow the caller's
            return Pool.admit(self, step, ctx, seq)
        self._engine = True
        ahead = bool(_attr(ctx, "is_preplan", False))
        with self._seed_lock:
            rec, decl = self._find(step, ctx, (_ADMITTED, _STAGED))
            fresh = rec is None
            if fresh and not ahead:
                self._drop_stale_stage(decl)
            if fresh:
                rec = self._open(step, ctx, decl)
            elif decl is not None and decl != rec.decl:
                rec.set_decl(decl)  # admitted again with other rows: rsp keeps the new ones
            o = self._admit_rec(rec)
            if not o.ok and self._removed and not ahead:
                self._reap(rec.sid)  # slots only an abandoned step holds: see _reap
                o = self._admit_rec(rec)
            if not o.ok:
                return self._failed(o)
            rec.ahead = ahead and (fresh or rec.ahead)  # a live pass makes it the runner's
            if fresh:
                self._recs[rec.sid] = rec
                self._by_obj[id(step)] = rec
        return ADMIT_OK

    def _drop_stale_stage(self, decl):
        """A live admit of a step other than the staged one: the original's
        runner clears such a stage before it admits (the pool's next plan
        would promote it). A stage whose step was admitted only ahead is
        rolled back here, before the new step can name the slots it took
        fresh: rolled back after, when the new step's plan drops the stage,
        it would free slots that step addresses (RSP_EORDER). A capture
        reserves nothing and leaves the stage alone."""
        stage = self._stage_rec
        if stage is not None and stage.ahead and not decl[3]:
            Pool.clear_preplan(self)
            self._unstage(stage)

    def _live_rids(self, rows):
        """The rids of a declaration's rows that are not padding and still live."""
        ids, ints = self._rids._ids, self._rids._ints
        return [r[0] for r in rows
                if (len(r) < 4 or not r[3]) and (r[0] in ids if isinstance(r[0], str)
                                                 else r[0] in ints)]

    def _reap(self, before):
        """End the steps admitted before step id `before` (just committed, or
        refused a live admit) whose every request was removed. The
        original's runner unwinds a live step that raised by removing its
        requests and never finishes the step, and rsp would hold their
        slots until it ends. A later step's commit means that forward is
        over (steps commit in order). A live admit the pool refuses, with
        no step left to commit, would be refused for ever: its slots are
        needed now, and a forward the engine abandoned is taken as over
        (on CUDA the rollback is ordered after the current stream, as
        any). Rolled back, what it reserved is gone with its requests and
        the releases waiting for it happen; a later commit of it is a
        no-op. A newer such step waits for the next commit or refusal."""
        newer = False
        for rec in list(self._recs.values()):
            if rec.decl[3] or not rec.decl[0] or self._live_rids(rec.decl[0]):
                continue  # a capture, no rows, or a request still there
            if rec.sid > before:
                newer = True
                continue
            Pool.rollback_admit(self, rec.rstep, None, self._forward_done(None))
            for o in rec.objs:
                self._ended[id(o)] = o  # kept alive: the key is its id
            self._forget(rec)
        while len(self._ended) > _ENDED_KEPT:
            del self._ended[next(iter(self._ended))]
        self._removed = newer

    def _admit_now(self, step, ctx, decl, what):
        """Admit a step that plan or commit is given without an admit."""
        rec = self._open(step, ctx, decl)
        o = self._admit_rec(rec)
        if not o.ok:
            raise RspError(_EORDER, f"{what}: the step was never admitted, and admitting it "
                                    f"now fails: {self._failed(o).reason.message}")
        self._recs[rec.sid] = rec
        self._by_obj[id(step)] = rec
        return rec

    def plan(self, step, ctx=None, seq=None):
        """The step's addressing: a dict label -> RecurrentAddressing for
        every label with rows, in first-appearance order. The runner files
        it in ctx.plan_results under this resource's key; the pool does not
        touch ctx.

        With ctx.is_preplan the plan is staged (pre-forks deferred, each
        fork target's has_state what the forks will give it) and returned
        like a live one; the next plan of the same step promotes it. Planning
        a step already planned returns its plan again."""
        if isinstance(step, Step):
            self._live = None
            return Pool.plan(self, step, ctx, seq)
        preplan = bool(_attr(ctx, "is_preplan", False))
        self._engine = True
        with self._seed_lock:
            rec, decl = self._find(step, ctx, _ANY)
            if rec is None:
                if (self._ended.get(id(step)) is step
                        and not self._live_rids(decl[0])):
                    return self._gone_plan(decl, preplan)
                rec = self._admit_now(step, ctx, decl, "plan")
                rec.ahead = preplan
            if rec.phase == _PLANNED:
                return rec.result
            if preplan:
                if self._stage_rec is not None:
                    raise RspAssertionError(_ESTAGED, "recurrent preplan is already pending; "
                                                      "clear_preplan before planning a "
                                                      "different step ahead")
                self._plan_rec(rec, True)
                rec.phase = _STAGED
                self._stage_rec = rec
                return rec.result
            return self._plan_live(rec)

    def _gone_plan(self, decl, preplan):
        """The plan of a step rsp no longer has (ended when its requests
        were all removed, _reap) and whose requests are gone: what the
        original plans for requests it does not hold, every row pad_index
        with no state, on the pool's device; nothing is admitted, so the
        removed ids are not taken up again. Under a lease as long as the
        original's graph buffer would be, but not that buffer."""
        torch = _pool._torch()
        rows, lease = decl[0], decl[4]
        dev = self._view(self._block_names[0]).device
        pad = self.pad_index
        out = {}
        for label in dict.fromkeys(map(_item1, rows)):
            n = sum(1 for r in rows if r[1] == label)
            length = n if lease is None else max(n, lease.bucket_bs, self._graph_bs)
            si = hs = None
            if torch is not None:
                si = torch.full((length,), pad, dtype=torch.int32, device=dev)
                hs = torch.zeros(length, dtype=torch.bool, device=dev)
            a = RecurrentAddressing(si, hs, n, [pad] * n, [False] * n)
            a.__dict__["staged"] = preplan
            out[label] = a
        if not preplan:
            self._live = out
        return out

    def _plan_live(self, rec):
        stage = self._stage_rec
        if stage is not None and stage is not rec:
            # The original's next plan consumes the stage whatever it plans;
            # here a stage of another step is dropped first (_unstage).
            Pool.clear_preplan(self)
            self._unstage(stage)
        staged = rec.result if stage is rec else None
        self._plan_rec(rec, False)
        self._stage_rec = None  # promoted, if it was rec's
        if staged is not None:
            # The original's promotion returns the staged dict itself, and
            # its callers compare by identity; its entries become the live
            # plan's (the staged addressing objects stay with whoever holds
            # them).
            staged.clear()
            staged.update(rec.result)
            rec.result = staged
        rec.phase = _PLANNED
        self._live = rec.result
        return rec.result

    def _plan_rec(self, rec, preplan):
        """rsp's plan of rec (staged with preplan), then its addressing read
        into rec.result, ordered after the plan's device work."""
        m = self._marshal(rec.rstep)
        lite = m.lite
        if preplan:  # the struct carries the flag: the compiled call takes it
            m.step.preplan = True
            m.lite = None
        try:
            Pool.plan(self, rec.rstep)
        except RspError as e:
            if e.status in (_ESTAGED, _ECAPACITY):
                raise _recast(e, RspAssertionError) from None
            raise
        finally:
            if preplan:
                m.step.preplan = False
                m.lite = lite
        if _pool._FAST is not None and self._host and not preplan:
            rec.result = self._read_fast(rec)  # waited for the plan's ready event
            self._dirty = False
            if type(rec.decl[0]) is _SpecRows:
                self._attach_spec(rec)
            return
        rec.result = self._read(rec, preplan)
        self._after_ready(rec.result.values())
        if type(rec.decl[0]) is _SpecRows and not preplan:
            self._attach_spec(rec)

    def _attach_spec(self, rec):
        """A verify step's state index tensors onto its live plan's
        addressing (spec_state_indices, host_spec_state_indices)."""
        for name, a in rec.result.items():
            x = Pool.spec_indices(self, name, step_id=rec.sid, wait=False)
            t = x.device
            if t is None and x.indices is not None:
                t = x.indices if self._host else x.indices.to(a.slot_indices.device)
            d = a.__dict__
            d["spec_state_indices"] = t
            d["host_spec_state_indices"] = [x.row(i) for i in range(x.num_rows)]

    def _labels_of(self, rec):
        """rec's labels in first-appearance order; the previous step's when
        its rows are the same (they share the marshalled rows' buffer)."""
        labels = rec.labels
        if labels is None:
            buf = rec.rstep._wire[1].keep if rec.rstep._wire is not None else None
            last = self._labels_last
            if buf is not None and last[0] is buf:
                labels = last[1]
            else:
                labels = list(dict.fromkeys(map(_item1, rec.decl[0])))
                self._labels_last = (buf, labels)
            rec.labels = labels
        return labels

    def _read(self, rec, staged):
        names = self._labels_of(rec)
        lids = [self._labels[name] for name in names]
        dev = self._info.device == ffi.DEVICE_CUDA
        torch = _pool._torch()
        _reader.ensure()
        err = ffi.Error()
        st = ffi.read_begin()
        if st != ffi.OK:
            _check(ffi.read_explain(st, ctypes.byref(err)), err)
        try:
            h = self._handle()
            plan = _plan_staged(h) if staged else ffi.plan_of_step(h, rec.sid)
            if not plan or _plan_step_id(plan) != rec.sid:
                raise RspError(ffi.ENOPLAN, f"the plan of step {rec.sid} is not published")
            out = {}
            for name, lid in zip(names, lids):
                a = ffi.Addressing()
                _check(ffi.plan_addressing(plan, lid, ctypes.byref(a), ctypes.byref(err)), err)
                si = hs = None
                if torch is None:
                    pass
                elif dev:
                    si = self._addr_tensor(a, ffi.DLPACK_DEVICE_SLOT_INDICES)
                    hs = self._addr_tensor(a, ffi.DLPACK_DEVICE_HAS_STATE).view(torch.bool)
                else:
                    si, hs = self._cpu_tensors(rec, lid, *_host_bytes(a))
                out[name] = _planned(a, si, hs, staged, dev)
        finally:
            ffi.read_end()
        return out

    def _read_fast(self, rec):
        """_read of a live plan on a CPU pool through rsp._fast: a label's
        read section, copies and ready wait are one call."""
        torch = _pool._torch()
        _reader.ensure()
        h = self._handle()
        out = {}
        for name in self._labels_of(rec):
            (si_buf, hs_buf, n, host_si, host_hs, sid, gen, kind, handle,
             value) = _pool._FAST.addressing(h, self._labels[name], rec.sid, True, None, None,
                                             True)
            if sid != rec.sid:
                raise RspError(ffi.ENOPLAN, f"the plan of step {rec.sid} is not published")
            si = hs = None
            if torch is not None:
                si, hs = self._cpu_tensors(rec, self._labels[name], si_buf, hs_buf)
            a = RecurrentAddressing(si, hs, n, host_si, host_hs)
            d = a.__dict__
            d["step_id"] = sid
            d["staged"] = False
            d["_gen"] = gen
            d["ready"] = ffi.Event(kind, handle, value)
            out[name] = a
        return out

    def _cpu_tensors(self, rec, lid, si_buf, hs_buf):
        """A CPU plan's addressing tensors from its vectors' bytearrays: over
        them, or under a lease the key's pair rewritten in place. The
        original plans a leased step into graph buffers of its (bucket,
        slot, label), the same tensors every step (a captured graph reads
        them at replay); rsp's CUDA pool does so in its own buffers, and a
        CPU pool here. A step longer than the pair's capacity gets a new
        pair (the original refuses it)."""
        lease = rec.rstep.lease
        frombuffer, i32, b8 = _pool._TENSORS or _pool._tensor_makers()
        if lease is None:
            return frombuffer(si_buf, dtype=i32), frombuffer(hs_buf, dtype=b8)
        n = len(hs_buf)
        p = _pool._pair_at(self._leased, (lease.bucket_id, lease.lease_slot, lid), n)
        p.si[:4 * n] = si_buf
        p.hs[:n] = hs_buf
        return p.ts, p.th

    def _after_ready(self, addrs):
        """Order what follows after the plan's device work (zeroing, fork
        copies, uploads): a host wait on a CPU pool, a wait of torch's
        current stream on a CUDA pool, once per distinct event."""
        seen = set()
        for a in addrs:
            ev = a.ready
            key = (ev.kind, ev.handle, ev.value)
            if key not in seen:
                seen.add(key)
                self.wait_ready(a)
        self._dirty = False

    def _forward_done(self, given):
        """The event a commit or rollback orders its device work after: the
        caller's, else on a CUDA pool one recorded now on torch's current
        stream (where the forward was queued), else None (a CPU forward
        has finished)."""
        if given is not None or self._info.device != ffi.DEVICE_CUDA:
            return given
        ev = _pool._torch().cuda.Event()
        ev.record()
        self._done = ev
        return ev

    def commit(self, step, ctx=None, forward_done=None, seq=None, num_accepted_tokens=None):
        """Record the step's consumption: its written rows now hold state,
        then its post-forks copy them. forward_done: the forward's event
        (default: none on a CPU pool; torch's current stream on CUDA).
        A verify step (step.per_token_states): each per-token row keeps the
        state after its accepted token, from num_accepted_tokens (else the
        step's): a mapping request id -> count, or a sequence per segment
        or per per-token segment; 0 keeps the state before the step."""
        if isinstance(step, Step):
            return Pool.commit(self, step, ctx, forward_done, seq)
        self._engine = True
        with self._seed_lock:
            rec, decl = self._find(step, ctx, (_PLANNED, _ADMITTED, _STAGED))
            if rec is None:
                if not self._live_rids(decl[0]):
                    return  # its requests are gone (a step _reap ended): nothing to record
                rec = self._admit_now(step, ctx, decl, "commit")
            if rec.phase != _PLANNED:  # the original commits a step it never planned
                self._plan_live(rec)
            rstep = rec.rstep
            if type(rec.decl[0]) is _SpecRows and not rec.decl[3]:  # a verify step's counts
                counts = (num_accepted_tokens if num_accepted_tokens is not None
                          else _attr(step, "num_accepted_tokens", None))
                if counts is None:
                    raise TypeError("commit: the step asks for per-token states "
                                    "(step.per_token_states) but names no num_accepted_tokens")
                rows, pre, post, capture, lease = rec.decl
                rstep = Step(rec.sid, _accepted_rows(rows, counts), pre, post, capture, False,
                             lease)
            Pool.commit(self, rstep, None, self._forward_done(forward_done))
            self._forget(rec)
            self._dirty = True
            if self._removed:
                self._reap(rec.sid)

    def rollback_admit(self, step, ctx=None, forward_done=None, seq=None):
        """Free the slots this step's admit took fresh (and drop its stage);
        slots a request already held stay with it. No-op for a step not in
        flight (never admitted, refused, committed or rolled back)."""
        if isinstance(step, Step):
            return Pool.rollback_admit(self, step, ctx, forward_done, seq)
        with self._seed_lock:
            rec, _ = self._find(step, ctx, _ANY)
            if rec is None:
                return
            Pool.rollback_admit(self, rec.rstep, None, self._forward_done(forward_done))
            self._forget(rec)
            self._dirty = True

    @property
    def _preplanned(self):
        """Whether a staged plan waits for promotion (the original's private
        flag, for code and tests that look at it)."""
        return self._stage_rec is not None

    def clear_preplan(self, seq=None):
        """Drop the staged plan; staging touched no live state. A step
        admitted only on a pre-plan pass is rolled back with it (its fresh
        slots come back, zeroed, in the free stack's old order); a step also
        admitted live stays admitted: its rollback_admit gives back what it
        took."""
        with self._seed_lock:
            Pool.clear_preplan(self, seq)
            if self._stage_rec is not None:
                self._unstage(self._stage_rec)

    def _unstage(self, stage):
        """The stage of `stage` (its rsp stage already dropped) forgotten. A
        runner that discards a stage may call clear_preplan alone, and a
        step admitted only ahead would stay in flight holding its slots."""
        stage.phase = _ADMITTED
        stage.result = None
        self._stage_rec = None
        if stage.ahead:
            Pool.rollback_admit(self, stage.rstep, None, self._forward_done(None))
            self._forget(stage)
            self._dirty = True

    # -- reading --

    def addressing(self, label="main", step_id=None, wait=True, persistent=False):
        """This step's addressing under label: the newest live plan's (a
        staged plan is read from plan()'s return). A label the step did not
        plan raises RspKeyError (a KeyError) naming the labels it planned.
        step_id (an rsp step id), persistent: rsp.Pool.addressing."""
        live = self._live
        if step_id is None and live is not None:
            found = live.get(label)
            if found is None:
                raise RspKeyError(ffi.ENOPLAN, f"recurrent state has no plan for label "
                                               f"{label!r}; this step planned {sorted(live)}. "
                                               f"Every label a forward runs must carry a "
                                               f"segment in the step declaration.")
            return found
        read = Pool.addressing
        if persistent and step_id is None and _pool._FAST is not None:
            # rsp.Pool.addressing's steady read, without its frame: it never
            # raises what is recast below (it declines those reads instead).
            a = _pool._FAST.read(self, label, wait)
            if a is not NotImplemented:
                return a
            read = Pool._addressing_of  # declined: the general path
        try:
            return read(self, label, step_id, wait, persistent)
        except RspError as e:
            if e.status in (ffi.ENOPLAN, ffi.ENOLABEL):
                raise _recast(e, RspKeyError) from None
            raise

    def device_sync(self):
        """Wait until the device work the pool has queued so far is done (on
        a CUDA pool: make torch's current stream wait for it): a capture
        step's plan, whose ready event follows that work in device order.
        block() calls this when something was queued since the last plan."""
        with self._seed_lock:
            sid = self._next_sid
            self._next_sid += 1
            s = Step(sid, [(_SYNC_RID, "main", 1)], capture=True)
            Pool.admit(self, s)
            try:
                Pool.plan(self, s)
                rec = _Rec.__new__(_Rec)
                rec.sid, rec.labels, rec.rstep = sid, ["main"], s
                self._after_ready(self._read(rec, False).values())
            finally:
                Pool.rollback_admit(self, s)

    def build_accelerator_graph_buffers(self, slots=None, max_bs=0, max_seq_len=0, seq=None):
        """Size what captured replays read: leased addressing buffers created
        from now on hold at least max_bs rows. Called once per capturing
        runner: keeps the largest max_bs, never moves a buffer that exists.
        slots and max_seq_len are not needed (recurrent state does not grow
        with the sequence); max_bs <= 0 changes nothing."""
        if isinstance(max_bs, bool) or not isinstance(max_bs, int):
            raise TypeError(f"max_bs must be an int, not {type(max_bs).__name__}")
        if max_bs <= 0 and seq is None:
            return
        if max_bs <= 0:  # nothing to size, but an ordered pool's number is used
            self.barrier(seq=seq)
            return
        bound = max(8192, 2 * self._info.max_slots)  # rsp's: past it a batch is padding only
        Pool.build_accelerator_graph_buffers(self, slots, min(max_bs, bound), 0, seq)
        self._graph_bs = max(self._graph_bs, min(max_bs, bound))

    build_cuda_graph_buffers = build_accelerator_graph_buffers


# --- the import alias -------------------------------------------------------------

_ORIGINAL = "mstar.engine.resources.recurrent.pool"
# The engine modules the seed's tests import beside the pool, and their
# packages: stood in for only when the engine is not installed.
_ENGINE_MODULES = ("mstar.engine.resources.step", "mstar.engine.resources.base",
                   "mstar.engine.resources.recurrent.config", "mstar.engine.resources.runner")
_PACKAGES = ("mstar", "mstar.engine", "mstar.engine.resources",
             "mstar.engine.resources.recurrent")


def install_alias(engine_stubs=None):
    """Make `import mstar.engine.resources.recurrent.pool` give this module,
    so code and tests written against the original run on rsp unchanged.

    engine_stubs: also stand in for the engine modules those tests import
    beside it (the step, base and recurrent config modules, and their
    packages) with rsp.seed_engine's shapes; None (the default): only when
    the engine (the `mstar` package) is not installed. With the engine's
    own modules, the packages above the pool are imported here (their
    imports of the pool get this module); an error importing them is
    raised and leaves the pool's name as it was. Names already in
    sys.modules are left alone. Returns the module names it set."""
    if engine_stubs is None:
        engine_stubs = "mstar" not in sys.modules and importlib.util.find_spec("mstar") is None
    me = sys.modules[__name__]
    done = []
    if engine_stubs:
        for name in _PACKAGES:
            if name not in sys.modules:
                pkg = types.ModuleType(name, "rsp.seed's stand-in for the engine package")
                pkg.__path__ = []  # a package, so its other submodules are "not found"
                sys.modules[name] = pkg
                done.append(name)
        for name in _ENGINE_MODULES:
            if name not in sys.modules:
                sys.modules[name] = me
                done.append(name)
        resources = sys.modules["mstar.engine.resources"]
        for attr in ("AdmitOutcome", "AllocationFailed", "Resource", "StepRunner",
                     "SubmoduleStep", "StepContext", "Segment"):
            if not hasattr(resources, attr):
                setattr(resources, attr, getattr(me, attr))
        recurrent = sys.modules["mstar.engine.resources.recurrent"]
        for attr in ("NO_SLOT", "SINK_SLOT", "RecurrentAddressing", "RecurrentBlockConfig",
                     "RecurrentStateConfig", "RecurrentStatePool", "RecurrentStateSpec",
                     "RecurrentStep"):
            if not hasattr(recurrent, attr):
                setattr(recurrent, attr, getattr(me, attr))
    if sys.modules.get(_ORIGINAL) is not me:
        was = sys.modules.get(_ORIGINAL)
        sys.modules[_ORIGINAL] = me
        if not engine_stubs:
            # An import of the pool finds it in sys.modules and so never
            # imports the engine's packages above it, and `import
            # mstar.engine.resources.recurrent.pool as m` then fails to reach
            # it through `mstar.engine`. Importing them now runs their
            # __init__s as the engine wrote them, their imports of the pool
            # getting this module.
            try:
                importlib.import_module(_ORIGINAL.rpartition(".")[0])
            except BaseException:
                if was is None:
                    del sys.modules[_ORIGINAL]
                else:
                    sys.modules[_ORIGINAL] = was
                raise
        done.append(_ORIGINAL)
    for name in done:  # each module an attribute of its parent, as an import leaves it
        parent, _, leaf = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], leaf, sys.modules[name])
    return tuple(done)
