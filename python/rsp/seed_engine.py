# Stand-ins for the engine objects the seed's RecurrentStatePool is driven
# with: the step, context, lease and config shapes of the original's
# mstar.engine.resources.step, .base and .recurrent.config modules, as the
# seed page and its callers use them (docs/python.md, "The seed's class").
#
# rsp never imports the engine. The seed's class reads whatever objects it
# is given by duck typing; these exist so that code and tests without the
# engine installed have the same shapes to build (rsp.seed.install_alias
# maps the engine's module names onto them when the engine is absent).
#
# SPDX-License-Identifier: Apache-2.0
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

# --- mstar.engine.resources.step --------------------------------------------


class Segment(NamedTuple):
    """One row of a step: (request_id, label, span). span 0 reads the
    request's state without extending it."""

    request_id: str
    label: str
    span: int


@dataclass(frozen=True)
class ResourceStep:
    """One resource's work for one step."""

    segments: Optional[Tuple[Segment, ...]] = None


@dataclass(frozen=True)
class BucketKey:
    """A captured graph's bucket: its walk, batch size and token count."""

    graph_walk: str
    bs: int
    num_tokens: int
    cg_key_info: Any = None

    def __str__(self):
        key = "" if self.cg_key_info is None else f",key={self.cg_key_info}"
        return f"{self.graph_walk}[bs={self.bs},tokens={self.num_tokens}{key}]"


@dataclass(frozen=True)
class SlotLease:
    """The capture slot a step plans into and replays; bucket None: eager."""

    slot: int
    bucket: Optional[BucketKey]


@dataclass
class StepContext:
    """The engine's per-step context. Mutable: the engine pads request_ids
    (set_padded_rids) and fills the lease in on the context it carries."""

    request_ids: Sequence[str]
    graph_walk: str
    slot: int
    capture: bool
    is_preplan: bool = False
    plan_results: dict = field(default_factory=dict)
    slot_lease: Optional[SlotLease] = None
    piecewise_leases: Mapping = field(default_factory=dict)
    _padded_request_ids: Optional[Sequence[str]] = None

    @property
    def padded_request_ids(self):
        """request_ids padded with dummy rids to a bucket's batch size (the
        request_ids themselves outside a padded replay)."""
        if self._padded_request_ids is None:
            return self.request_ids
        return self._padded_request_ids

    def set_padded_rids(self, padded_rids):
        self._padded_request_ids = padded_rids

    def set_piecewise_leases(self, leases):
        self.piecewise_leases = leases

    def is_real_row(self, rid):
        """Whether rid is one of the step's requests (not a bucket's dummy)."""
        if self._padded_request_ids is None:
            return True
        return rid in _as_set(self.request_ids)

    def is_padding_row(self, rid):
        """Whether rid is a dummy row that pads a replay to its bucket."""
        return not self.is_real_row(rid)


def _as_set(ids):
    return ids if isinstance(ids, (set, frozenset)) else frozenset(ids)


@dataclass
class AdmitFailedReason:
    message: str


@dataclass
class AllocationFailed(AdmitFailedReason):
    """Admission refused for want of room: how much is short, for whom."""

    pages_short: int
    label: str
    request_id: str


class AdmitOutcome(NamedTuple):
    ok: bool
    ready: bool = True
    reason: Optional[AdmitFailedReason] = None


ADMIT_OK = AdmitOutcome(ok=True, ready=True)

# --- mstar.engine.resources.base --------------------------------------------


@dataclass(frozen=True)
class CGSlotSpec:
    """One capture slot a runner sizes graph buffers for."""

    bucket: BucketKey
    slot: int
    config: Any = None
    config_idx: Optional[int] = None

    @property
    def bs(self):
        return self.bucket.bs

    @property
    def num_tokens(self):
        return self.bucket.num_tokens


@dataclass(frozen=True)
class CGSlotKey:
    bucket: BucketKey
    slot: int
    label: str


@dataclass(frozen=True)
class EngineResourceInfo:
    """What the engine offers a resource at build time: the device, and the
    tensor-parallel group (its world_size shards the blocks)."""

    device: Any
    joint_comm_group: Any = None
    transfer_engine_info: Any = None
    kv_dtype: Any = None
    needs_remote_transfer: bool = True
    dependencies: Mapping = field(default_factory=dict)

    def dependency(self, key):
        spec = self.dependencies.get(key)
        if spec is None:
            raise KeyError(f"resource {key!r} was not resolved; declare it in the spec's "
                           f"`depends_on`")
        return spec


# --- mstar.engine.resources.recurrent.config --------------------------------


_ITEMSIZE = (4, 2, 2, 8, 1, 1, 4, 8)  # bytes of each of rsp's dtypes, in _ffi.DTYPES order


def _itemsize(dtype):
    """Bytes per element of a torch dtype or a dtype name."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    from .pool import _dtype_code

    return _ITEMSIZE[_dtype_code(dtype)]


@dataclass
class RecurrentBlockConfig:
    """One per-slot block: its shape (opaque to the pool), dtype, the axes
    tensor parallelism divides, and whether each layer has its own
    (per_layer False: one per slot, block(name) without a layer)."""

    shape: Tuple[int, ...]
    dtype: Any
    shard_dims: Tuple[int, ...] = ()
    per_layer: bool = True

    def __post_init__(self):
        self.shape = tuple(self.shape)
        self._unsharded_shape = self.shape

    def shard(self, num_shards):
        """Narrow the sharded axes by num_shards, from the unsharded shape
        (so sharding twice is harmless)."""
        shape = list(self._unsharded_shape)
        for dim in self.shard_dims:
            if shape[dim] % num_shards:
                raise ValueError(f"block dim {dim} ({shape[dim]}) is not divisible by "
                                 f"{num_shards} shards")
            shape[dim] //= num_shards
        self.shape = tuple(shape)

    @property
    def numel(self):
        return prod(self.shape)

    @property
    def nbytes(self):
        return self.numel * _itemsize(self.dtype)


@dataclass
class RecurrentStateConfig:
    """The pool's shape: recurrent layers, named blocks, slots (the sink
    included), and whether padding rows address a sink slot or NO_SLOT."""

    num_layers: int
    blocks: dict = field(default_factory=dict)
    max_slots: int = 256
    disable_sink_slot: bool = False

    def __post_init__(self):
        if not self.blocks:
            raise ValueError("a recurrent state pool must declare a block")
        if not self.disable_sink_slot and self.max_slots < 2:
            raise ValueError(f"max_slots={self.max_slots} leaves nothing to hand out: the sink "
                             f"takes one. Raise it or set disable_sink_slot.")

    @property
    def usable_slots(self):
        return self.max_slots - (0 if self.disable_sink_slot else 1)

    def shard(self, num_shards):
        for block in self.blocks.values():
            block.shard(num_shards)

    @property
    def slot_bytes(self):
        return sum(b.nbytes * (self.num_layers if b.per_layer else 1)
                   for b in self.blocks.values())

    @property
    def total_bytes(self):
        return self.slot_bytes * self.max_slots


@dataclass
class RecurrentStateSpec:
    """A model's declaration of a recurrent state pool on some nodes."""

    resource_key: str
    nodes: set
    config: RecurrentStateConfig

    def __post_init__(self):
        if not isinstance(self.nodes, set):
            self.nodes = set(self.nodes)

    def depends_on(self):
        """The resource keys this one needs (the engine's spec hook): none."""
        return set()

    @property
    def resource_class(self):
        from .seed import RecurrentStatePool

        return RecurrentStatePool

    def apply_yaml_overrides(self, max_slots=None, state_dtype=None):
        """A deployment's slot count, and the "state" block's dtype by its
        torch name (ValueError for a name that is not a torch dtype)."""
        if max_slots is not None:
            self.config.max_slots = max_slots
        if state_dtype is not None:
            import torch

            dtype = getattr(torch, state_dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"state_dtype {state_dtype!r} is not a torch dtype")
            block = self.config.blocks.get("state")
            if block is None:
                raise ValueError(f"state_dtype was set but the pool has no 'state' block; "
                                 f"it has {sorted(self.config.blocks)}")
            self.config.blocks["state"] = replace(block, dtype=dtype)


@dataclass(frozen=True)
class RecurrentStep(ResourceStep):
    """One step's work against the pool: its segments, and forks as
    (from_label, to_label) pairs (pre: copied at plan; post: at commit).
    A verify step of speculative decoding names its per-token segments
    (per_token_states: True, or their request ids) and, for the commit,
    num_accepted_tokens (request id -> count, or one per segment or per
    per-token segment)."""

    pre_forks: Tuple[Tuple[str, str], ...] = ()
    post_forks: Tuple[Tuple[str, str], ...] = ()
    per_token_states: Any = None
    num_accepted_tokens: Any = None


# --- mstar.engine.resources (the package) and .runner ------------------------
#
# What the pool's tests take from the engine's package beside the pool: the
# resource base class, the multi-resource step and a runner that drives
# resources through a step. The runner here keeps only what those tests
# lean on: dependency order, the pre-plan pass, and a refused admit unwound
# by rollback_admit on every resource it reached, newest first.


class Resource:
    """The engine's resource base class: every hook answers "nothing to do"."""

    @classmethod
    def build(cls, spec, info):
        raise NotImplementedError(f"{cls.__name__}.build")

    def depends_on(self):
        return set()

    def ingest_request(self, rid, overrides=None):
        return None

    def remove_request(self, rid):
        return None

    def reset_request(self, rid, free=False):
        return None

    def admit(self, step, ctx):
        return ADMIT_OK

    def plan(self, step, ctx):
        return None

    def commit(self, step, ctx):
        return None

    @property
    def supports_preplan(self):
        return False

    def clear_preplan(self):
        return None


class FullAdmitOutcome(NamedTuple):
    """A runner's admit: one resource's outcome and the key of the resource
    that refused (None when none did)."""

    outcome: AdmitOutcome
    failed_resource: Optional[str] = None

    @property
    def ok(self):
        return self.outcome.ok

    @property
    def ready(self):
        return self.outcome.ready

    @property
    def reason(self):
        return self.outcome.reason


@dataclass(frozen=True)
class SubmoduleStep:
    """One node's step: resource key -> that resource's step. segments, when
    given, fill in every resource step declared without its own."""

    steps: Mapping[str, ResourceStep]
    segments: Optional[Sequence[Segment]] = None
    cg_key_info: Any = None
    _ctx: Any = None

    def __post_init__(self):
        if self.segments is not None:
            for st in self.steps.values():
                if st.segments is None:
                    object.__setattr__(st, "segments", self.segments)

    @property
    def ctx(self):
        return self._ctx

    def set_ctx(self, ctx):
        object.__setattr__(self, "_ctx", ctx)

    def get(self, key):
        return self.steps.get(key)

    def keys(self):
        return self.steps.keys()

    def __contains__(self, key):
        return key in self.steps


def _dependency_order(resources):
    """Resource keys, every key after those it depends on (ties by name)."""
    deps = {k: set(r.depends_on()) for k, r in resources.items()}
    for k, d in deps.items():
        if d - deps.keys():
            raise ValueError(f"resource {k!r} depends on unknown {sorted(d - deps.keys())}")
    order = []
    while deps:
        ready = sorted(k for k, d in deps.items() if not d & deps.keys())
        if not ready:
            raise ValueError(f"dependency cycle among {sorted(deps)}")
        order += ready
        for k in ready:
            del deps[k]
    return order


class StepRunner:
    """Drives a node's resources through admit, plan and commit in
    dependency order; the pre-plan pass covers the resources that pre-plan.
    A live admit or plan of a step other than the one planned ahead (by
    walk, padded rows, lease slot, graph key and each resource's segments)
    clears every resource's stage first: a resource's next plan promotes
    whatever it staged."""

    def __init__(self, resources, node_resources=None):
        self._resources = dict(resources)
        self._order = _dependency_order(self._resources)
        self._preplan_order = [k for k in self._order if self._resources[k].supports_preplan]
        self._staged = None  # the key of the step planned ahead

    def _step_key(self, step):
        ctx = step.ctx
        lease = ctx.slot_lease
        return (ctx.graph_walk, tuple(ctx.padded_request_ids),
                None if lease is None else lease.slot, getattr(step, "cg_key_info", None),
                tuple((k, tuple(step.get(k).segments or ()))
                      for k in self._keys(step, self._order)))

    def _drop_stale_preplan(self, step):
        if self._staged is not None and not step.ctx.is_preplan \
                and self._staged != self._step_key(step):
            self.clear_preplan()

    def _keys(self, step, order):
        unknown = set(step.keys()) - self._resources.keys()
        if unknown:
            raise KeyError(f"the step names resources {sorted(unknown)} the runner lacks")
        return [k for k in order if k in step]

    def ingest_request(self, rid, overrides=None):
        for k in self._order:
            self._resources[k].ingest_request(rid, None if overrides is None else
                                              overrides.get(k))

    def remove_request(self, rid):
        for k in self._order:
            self._resources[k].remove_request(rid)

    def _admit(self, step, order):
        ready, reached = True, []
        for k in self._keys(step, order):
            reached.append(k)
            o = self._resources[k].admit(step.get(k), step.ctx)
            if not o.ok:
                for r in reversed(reached):  # the refusing resource included
                    undo = getattr(self._resources[r], "rollback_admit", None)
                    if undo is not None:
                        undo(step.get(r), step.ctx)
                return FullAdmitOutcome(o, k)
            ready = ready and o.ready
        return FullAdmitOutcome(AdmitOutcome(ok=True, ready=ready))

    def admit(self, step):
        self._drop_stale_preplan(step)
        return self._admit(step, self._order)

    def pre_admit(self, step):
        return self._admit(step, self._preplan_order)

    def _plan(self, step, order):
        results = step.ctx.plan_results
        for k in self._keys(step, order):
            results[k] = self._resources[k].plan(step.get(k), step.ctx)
        return results

    def plan(self, step):
        self._drop_stale_preplan(step)
        if not step.ctx.is_preplan:
            self._staged = None
        return self._plan(step, self._order)

    def pre_plan(self, step):
        results = self._plan(step, self._preplan_order)
        self._staged = self._step_key(step)
        return results

    def commit(self, step):
        for k in self._keys(step, self._order):
            self._resources[k].commit(step.get(k), step.ctx)

    def clear_preplan(self):
        self._staged = None
        for k in self._order:
            self._resources[k].clear_preplan()
