# The ctypes mirror of include/rsp/rsp.h: the structs and prototypes the
# package uses, and the loading of librsp. Nothing else in the package
# touches ctypes declarations.
#
# The mirror is checked against the C compiler's layout by
# tests/python/test_abi.py (sizeof and offsetof of every struct below), so
# a header change the mirror missed fails the suite instead of corrupting
# memory. Keep the field order and types exactly as in rsp.h.
#
# SPDX-License-Identifier: Apache-2.0
import ctypes
import ctypes.util
import os

# --- constants (rsp.h) ------------------------------------------------------

MAX_DIMS = 8
MAX_BLOCKS = 32
MAX_LABELS = 64
NAME_MAX = 32
ERROR_MAX = 256
SINK_SLOT = 0
NO_SLOT = -1
LABEL_MAIN = 0
WAIT_FOREVER = (1 << 64) - 1

# rsp_status
OK = 0
STATUS_NAMES = (
    "RSP_OK", "RSP_EINVAL", "RSP_ENOLABEL", "RSP_EDUPROW", "RSP_EORDER", "RSP_ESTAGED",
    "RSP_ENOREQ", "RSP_ENOPLAN", "RSP_ECAPACITY", "RSP_ESHUTDOWN", "RSP_EFULL", "RSP_EAGAIN",
    "RSP_ETIMEDOUT", "RSP_ENOMEM", "RSP_EDEVICE", "RSP_ENODEV", "RSP_ENOTREG", "RSP_EFORKED",
    "RSP_ENOKEY", "RSP_EPINNED",
)
EINVAL = STATUS_NAMES.index("RSP_EINVAL")
ENOLABEL = STATUS_NAMES.index("RSP_ENOLABEL")
ENOREQ = STATUS_NAMES.index("RSP_ENOREQ")
ENOPLAN = STATUS_NAMES.index("RSP_ENOPLAN")
ENOKEY = STATUS_NAMES.index("RSP_ENOKEY")
ECAPACITY = STATUS_NAMES.index("RSP_ECAPACITY")

# rsp_dtype
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")

# rsp_device_kind
DEVICE_HOST = 0
DEVICE_CUDA = 1

# rsp_event_kind
EVENT_NONE = 0
EVENT_HOST_FENCE = 1
EVENT_CUDA = 2
EVENT_COMPLETE = 3

c_status = ctypes.c_int
c_enum = ctypes.c_int


class Error(ctypes.Structure):
    _fields_ = [("status", c_status), ("message", ctypes.c_char * ERROR_MAX)]


class BlockConfig(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", c_enum),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("num_shard_dims", ctypes.c_uint32),
        ("shard_dims", ctypes.c_uint32 * MAX_DIMS),
    ]


ON_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
ON_EVICT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class PoolConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_layers", ctypes.c_uint32),
        ("blocks", ctypes.POINTER(BlockConfig)),
        ("num_blocks", ctypes.c_uint32),
        ("max_slots", ctypes.c_uint32),
        ("sink", ctypes.c_bool),
        ("world_size", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("device", c_enum),
        ("cuda_ordinal", ctypes.c_int),
        ("inbox_capacity", ctypes.c_uint32),
        ("max_inflight_steps", ctypes.c_uint32),
        ("ordered", ctypes.c_bool),
        ("reorder_timeout_ns", ctypes.c_uint64),
        ("on_error", ctypes.c_void_p),
        ("on_error_ctx", ctypes.c_void_p),
        ("owner_cpu", ctypes.c_int),
        ("max_checkpoints", ctypes.c_uint32),
        ("max_host_checkpoints", ctypes.c_uint32),
        ("checkpoint_demote", ctypes.c_bool),
        ("on_checkpoint_evict", ctypes.c_void_p),
        ("on_checkpoint_evict_ctx", ctypes.c_void_p),
        ("record_path", ctypes.c_char_p),
        ("checkpoint_policy", ctypes.c_uint32),
        ("checkpoint_value_weight", ctypes.c_double),
        ("guard", ctypes.c_bool),
    ]


class PoolInfo(ctypes.Structure):
    _fields_ = [
        ("num_layers", ctypes.c_uint32),
        ("num_blocks", ctypes.c_uint32),
        ("max_slots", ctypes.c_uint32),
        ("usable_slots", ctypes.c_uint32),
        ("sink", ctypes.c_bool),
        ("pad_index", ctypes.c_int32),
        ("slot_bytes", ctypes.c_uint64),
        ("total_bytes", ctypes.c_uint64),
        ("device", c_enum),
        ("owner_cpu", ctypes.c_int32),
    ]


class BlockView(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", c_enum),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * (MAX_DIMS + 1)),
        ("strides", ctypes.c_int64 * (MAX_DIMS + 1)),
    ]


class Row(ctypes.Structure):
    _fields_ = [
        ("rid", ctypes.c_uint64),
        ("label", ctypes.c_uint32),
        ("span", ctypes.c_int32),
        ("padding", ctypes.c_bool),
        ("skip_post_forks", ctypes.c_bool),
        ("fork_group", ctypes.c_uint16),
        ("per_token_states", ctypes.c_uint8),
        ("resv_", ctypes.c_uint8),
        ("accepted", ctypes.c_uint16),
    ]


class Fork(ctypes.Structure):
    _fields_ = [("from_", ctypes.c_uint32), ("to", ctypes.c_uint32), ("group", ctypes.c_uint32)]


class Lease(ctypes.Structure):
    _fields_ = [
        ("bucket_bs", ctypes.c_uint32),
        ("bucket_id", ctypes.c_uint32),
        ("lease_slot", ctypes.c_uint32),
    ]


class CheckpointDecl(ctypes.Structure):
    _fields_ = [
        ("rid", ctypes.c_uint64),
        ("label", ctypes.c_uint32),
        ("tier", c_enum),
        ("key", ctypes.c_uint64),
    ]


class Restore(ctypes.Structure):
    _fields_ = [("rid", ctypes.c_uint64), ("label", ctypes.c_uint32), ("key", ctypes.c_uint64)]


class Step(ctypes.Structure):
    _fields_ = [
        ("step_id", ctypes.c_uint64),
        ("rows", ctypes.POINTER(Row)),
        ("num_rows", ctypes.c_uint32),
        ("pre_forks", ctypes.POINTER(Fork)),
        ("num_pre_forks", ctypes.c_uint32),
        ("post_forks", ctypes.POINTER(Fork)),
        ("num_post_forks", ctypes.c_uint32),
        ("capture", ctypes.c_bool),
        ("preplan", ctypes.c_bool),
        ("has_lease", ctypes.c_bool),
        ("lease", Lease),
        ("checkpoints", ctypes.POINTER(CheckpointDecl)),
        ("num_checkpoints", ctypes.c_uint32),
        ("restores", ctypes.POINTER(Restore)),
        ("num_restores", ctypes.c_uint32),
    ]


class AdmitOutcome(ctypes.Structure):
    _fields_ = [
        ("ok", ctypes.c_bool),
        ("rid", ctypes.c_uint64),
        ("label", ctypes.c_uint32),
        ("slots_short", ctypes.c_uint32),
        ("usable", ctypes.c_uint32),
        ("free", ctypes.c_uint32),
    ]


class Holding(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_int32),
        ("has_state", ctypes.c_bool),
        ("generation", ctypes.c_uint64),
    ]


class Event(ctypes.Structure):
    _fields_ = [("kind", c_enum), ("handle", ctypes.c_void_p), ("value", ctypes.c_uint64)]


def _candidates():
    env = os.environ.get("RSP_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("librsp.so", "librsp.so.0", "librsp.dylib"):
        yield os.path.join(here, name)
    found = ctypes.util.find_library("rsp")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "rsp: librsp not found; set RSP_LIBRARY to its path (a build tree's "
        "build/src/librsp.so) or install it. Tried: " + ("; ".join(tried) or "nothing"))


# The version of rsp.h this mirror follows (its RSP_VERSION_MAJOR, _MINOR,
# _PATCH; tests/python/test_version.py compares them).
HEADER_VERSION = (0, 3, 0)


def _check_version(lib, major, minor):
    """ImportError naming both versions unless lib serves a mirror of rsp
    major.minor (rsp_version_check: the same major, a minor as new or newer)."""
    path = getattr(lib, "_name", "librsp")
    try:
        check = lib.rsp_version_check
        name = lib.rsp_version_string
    except AttributeError:
        raise ImportError(
            f"rsp: {path} has no rsp_version_check: it is older than rsp 0.1.0, this "
            f"package needs librsp {major}.x with x >= {minor}") from None
    check.restype = ctypes.c_int
    check.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
    name.restype = ctypes.c_char_p
    name.argtypes = []
    err = Error()
    if check(major, minor, ctypes.byref(err)) != OK:
        raise ImportError(
            f"rsp: this package mirrors rsp {major}.{minor} but {path} is librsp "
            f"{name().decode()}: {err.message.decode(errors='replace')}")


lib = _load()
_check_version(lib, *HEADER_VERSION[:2])


class StatsField(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("metric", ctypes.c_char_p),
        ("help", ctypes.c_char_p),
        ("offset", ctypes.c_uint32),
        ("bits", ctypes.c_uint32),
        ("kind", c_enum),
    ]


def _stats_struct():
    """The mirror of rsp_stats, made at import from the library's own list
    of its fields (rsp_stats_fields, from RSP_STATS_FIELDS in rsp_stats.h),
    so a counter is written once, in C. ImportError if ctypes would lay a
    field out elsewhere than the library does."""
    fn = lib.rsp_stats_fields
    fn.restype = ctypes.POINTER(StatsField)
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint32)]
    n = ctypes.c_uint32()
    table = fn(ctypes.byref(n))
    fields = [table[i] for i in range(n.value)]
    width = {32: ctypes.c_uint32, 64: ctypes.c_uint64}
    cls = type("Stats", (ctypes.Structure,),
               {"_fields_": [(f.name.decode(), width[f.bits]) for f in fields]})
    for f in fields:
        if getattr(cls, f.name.decode()).offset != f.offset:
            raise ImportError(f"rsp: rsp_stats.{f.name.decode()} is at byte {f.offset} in "
                              f"librsp, not where ctypes puts it")
    return cls, tuple((f.name.decode(), f.metric.decode(), f.help.decode(),
                       "counter" if f.kind == 1 else "gauge") for f in fields)


Stats, STATS_FIELDS = _stats_struct()
# rsp_reply.stats is rsp_stats_0_1: 0.1's fields, up to swaps_in (rsp.h).
Stats01 = type("Stats01", (ctypes.Structure,), {"_fields_": Stats._fields_[
    :[name for name, _ in Stats._fields_].index("swaps_in") + 1]})


class Addressing(ctypes.Structure):
    _fields_ = [
        ("label", ctypes.c_uint32),
        ("step_id", ctypes.c_uint64),
        ("staged", ctypes.c_bool),
        ("num_rows", ctypes.c_uint32),
        ("length", ctypes.c_uint32),
        ("slot_indices", ctypes.POINTER(ctypes.c_int32)),
        ("has_state", ctypes.POINTER(ctypes.c_bool)),
        ("generations", ctypes.POINTER(ctypes.c_uint64)),
        ("device_slot_indices", ctypes.c_void_p),
        ("device_has_state", ctypes.c_void_p),
        ("ready", Event),
    ]


class SpecIndices(ctypes.Structure):
    _fields_ = [
        ("label", ctypes.c_uint32),
        ("step_id", ctypes.c_uint64),
        ("num_rows", ctypes.c_uint32),
        ("length", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("indices", ctypes.POINTER(ctypes.c_int32)),
        ("device_indices", ctypes.c_void_p),
        ("ready", Event),
    ]


class StepOutcome(ctypes.Structure):
    _fields_ = [
        ("committed", ctypes.c_bool),
        ("admit", AdmitOutcome),
        ("planned", ctypes.c_bool),
        ("plan_step_id", ctypes.c_uint64),
        ("plan_staged", ctypes.c_bool),
        ("plan_digest", ctypes.c_uint64),
    ]


# rsp_tier
TIER_DEVICE = 0
TIER_HOST = 1
TIERS = ("device", "host")

# rsp_msg_kind, by the names the package reports (rsp_failure.kind)
MSG_KINDS = (
    "ingest", "remove", "reset", "admit", "rollback", "plan", "clear_preplan", "commit",
    "build_graph_buffers", "stats", "barrier", "label", "holding", "shutdown", "release", "step",
    "checkpoint", "checkpoint_drop", "checkpoint_pin", "checkpoint_query", "swap_out", "swap_in",
    "export", "export_close", "import", "checkpoint_value", "dump",
)
(MSG_INGEST, MSG_REMOVE, MSG_RESET, MSG_ADMIT, MSG_ROLLBACK, MSG_PLAN, MSG_CLEAR_PREPLAN,
 MSG_COMMIT, MSG_BUILD_GRAPH_BUFFERS, MSG_STATS, MSG_BARRIER, MSG_LABEL, MSG_HOLDING,
 MSG_SHUTDOWN, MSG_RELEASE, MSG_STEP, MSG_CHECKPOINT, MSG_CHECKPOINT_DROP, MSG_CHECKPOINT_PIN,
 MSG_CHECKPOINT_QUERY, MSG_SWAP_OUT, MSG_SWAP_IN, MSG_EXPORT, MSG_EXPORT_CLOSE, MSG_IMPORT,
 MSG_CHECKPOINT_VALUE, MSG_DUMP) = range(len(MSG_KINDS))
# rsp_checkpoint_policy
CHECKPOINT_POLICIES = ("lru", "value")
MAX_MSG_RIDS = 65536
CLOSE_REPORT_MAX = 64


class CheckpointEvent(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("tier", c_enum), ("demoted", ctypes.c_bool)]


class GuardViolation(ctypes.Structure):
    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("held", ctypes.c_bool),
        ("rid", ctypes.c_uint64),
        ("label", ctypes.c_uint32),
        ("step_id", ctypes.c_uint64),
        ("block", ctypes.c_uint32),
        ("layer", ctypes.c_uint32),
        ("regions", ctypes.c_uint32),
    ]


class Failure(ctypes.Structure):
    _fields_ = [
        ("status", c_status),
        ("kind", c_enum),
        ("step_id", ctypes.c_uint64),
        ("has_step", ctypes.c_bool),
        ("message", ctypes.c_char_p),
        ("checkpoint_key", ctypes.c_uint64),
        ("has_checkpoint_key", ctypes.c_bool),
        ("guard", ctypes.POINTER(GuardViolation)),
    ]


class CheckpointInfo(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_uint64),
        ("tier", c_enum),
        ("slot", ctypes.c_int32),
        ("bytes", ctypes.c_uint64),
        ("pins", ctypes.c_uint32),
        ("user_pins", ctypes.c_uint32),
        ("last_use", ctypes.c_uint64),
    ]


class CheckpointLoc(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("tier", c_enum), ("slot", ctypes.c_int32)]


class _MsgAfterOrValue(ctypes.Union):
    """rsp_msg's anonymous union: after_step (CHECKPOINT) or value
    (CHECKPOINT_VALUE)."""

    _fields_ = [("after_step", ctypes.c_uint64), ("value", ctypes.c_uint64)]


class Msg(ctypes.Structure):
    _fields_ = [
        ("kind", c_enum),
        ("rid", ctypes.c_uint64),
        ("label", ctypes.c_uint32),
        ("free", ctypes.c_bool),
        ("label_name", ctypes.c_char_p),
        ("step", Step),
        ("event", Event),
        ("max_bs", ctypes.c_uint32),
        ("max_seq_len", ctypes.c_uint32),
        ("seq", ctypes.c_uint64),
        ("rids", ctypes.POINTER(ctypes.c_uint64)),
        ("num_rids", ctypes.c_uint32),
        ("commit", ctypes.POINTER(Step)),
        ("key", ctypes.c_uint64),
        ("tier", c_enum),
        ("_u", _MsgAfterOrValue),
        ("pin", ctypes.c_bool),
    ]
    _anonymous_ = ("_u",)


class Reply(ctypes.Structure):
    _fields_ = [
        ("error", Error),
        ("admit", AdmitOutcome),
        ("plan_step_id", ctypes.c_uint64),
        ("plan_staged", ctypes.c_bool),
        ("plan_digest", ctypes.c_uint64),
        ("committed", ctypes.c_bool),
        ("planned", ctypes.c_bool),
        ("label", ctypes.c_uint32),
        ("holding", Holding),
        ("stats", Stats01),
        ("checkpoint", CheckpointInfo),
    ]


class CloseReport(ctypes.Structure):
    _fields_ = [
        ("closed", ctypes.c_bool),
        ("forward_waits", ctypes.c_uint32),
        ("num_steps", ctypes.c_uint32),
        ("step_ids", ctypes.c_uint64 * CLOSE_REPORT_MAX),
    ]


# Export and import (rsp.h, "Export and import"). rsp_region_space,
# rsp_xfer_what:
REGION_SPACES = ("slots", "device_tier", "host_tier")
XFER_REQUEST = 0
XFER_CHECKPOINT = 1


class Region(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("length", ctypes.c_uint64),
        ("memory", c_enum),
        ("block", ctypes.c_uint32),
        ("space", c_enum),
    ]


class Extent(ctypes.Structure):
    _fields_ = [
        ("region", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
    ]


class XferBlock(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * NAME_MAX),
        ("dtype", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("shard_mask", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class XferHolding(ctypes.Structure):
    _fields_ = [
        ("label", ctypes.c_char * NAME_MAX),
        ("generation", ctypes.c_uint64),
        ("has_state", ctypes.c_bool),
    ]


class XferHeader(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_uint32),
        ("what", ctypes.c_uint32),
        ("fingerprint", ctypes.c_uint64),
        ("world_size", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("target_world_size", ctypes.c_uint32),
        ("target_rank", ctypes.c_uint32),
        ("rid", ctypes.c_uint64),
        ("key", ctypes.c_uint64),
        ("tag", ctypes.c_uint64),
        ("num_layers", ctypes.c_uint32),
        ("num_blocks", ctypes.c_uint32),
        ("blocks", XferBlock * MAX_BLOCKS),
        ("num_holdings", ctypes.c_uint32),
        ("holdings", XferHolding * MAX_LABELS),
    ]


class ExportSpec(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("what", c_enum),
        ("rid", ctypes.c_uint64),
        ("labels", ctypes.c_uint64),
        ("key", ctypes.c_uint64),
        ("tag", ctypes.c_uint64),
        ("target_world_size", ctypes.c_uint32),
        ("target_rank", ctypes.c_uint32),
        ("timeout_ns", ctypes.c_uint64),
    ]


# The structs test_abi.py checks, by their C names.
STRUCTS = {
    "rsp_error": Error, "rsp_block_config": BlockConfig, "rsp_pool_config": PoolConfig,
    "rsp_pool_info": PoolInfo, "rsp_block_view": BlockView, "rsp_row": Row, "rsp_fork": Fork,
    "rsp_lease": Lease, "rsp_checkpoint_decl": CheckpointDecl, "rsp_restore": Restore,
    "rsp_step": Step, "rsp_admit_outcome": AdmitOutcome, "rsp_holding": Holding,
    "rsp_event": Event, "rsp_stats": Stats, "rsp_addressing": Addressing,
    "rsp_step_outcome": StepOutcome, "rsp_checkpoint_event": CheckpointEvent,
    "rsp_failure": Failure, "rsp_guard_violation": GuardViolation,
    "rsp_checkpoint_info": CheckpointInfo,
    "rsp_checkpoint_loc": CheckpointLoc, "rsp_msg": Msg, "rsp_reply": Reply,
    "rsp_close_report": CloseReport, "rsp_spec_indices": SpecIndices,
    "rsp_region": Region, "rsp_extent": Extent, "rsp_xfer_block": XferBlock,
    "rsp_xfer_holding": XferHolding, "rsp_xfer_header": XferHeader,
    "rsp_export_spec": ExportSpec,
}

# --- loading ----------------------------------------------------------------



P = ctypes.POINTER
vp = ctypes.c_void_p
PErr = P(Error)


def _proto(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


strerror = _proto("rsp_strerror", ctypes.c_char_p, c_status)
pool_config_init_size = _proto("rsp_pool_config_init_size", c_status, P(PoolConfig),
                               ctypes.c_size_t)


def pool_config_init(cfg):
    """rsp.h's rsp_pool_config_init macro: the defaults, struct_size = this
    mirror's size (so a newer librsp reads only the fields the mirror has)."""
    if pool_config_init_size(cfg, ctypes.sizeof(PoolConfig)) != OK:
        raise RuntimeError("rsp_pool_config_init_size refused the mirror's PoolConfig")
pool_create = _proto("rsp_pool_create", c_status, P(PoolConfig), P(vp), PErr)
pool_close = _proto("rsp_pool_close", c_status, vp, PErr)
pool_info_get = _proto("rsp_pool_info_get", c_status, vp, P(PoolInfo), PErr)
pool_block = _proto("rsp_pool_block", c_status, vp, ctypes.c_char_p, ctypes.c_uint32,
                    P(BlockView), PErr)
_stats_peek_size = _proto("rsp_stats_peek_size", c_status, vp, P(Stats), ctypes.c_size_t, PErr)


def stats_peek(pool, out, err):
    """rsp.h's rsp_stats_peek macro: every field the mirror has."""
    return _stats_peek_size(pool, out, ctypes.sizeof(Stats), err)

metrics_text = _proto("rsp_metrics_text", c_status, vp, ctypes.c_char_p, ctypes.c_char_p,
                      ctypes.c_size_t, P(ctypes.c_size_t), PErr)
metrics_latency = _proto("rsp_metrics_latency", c_status, vp, ctypes.c_bool, PErr)
label = _proto("rsp_label", c_status, vp, ctypes.c_char_p, P(ctypes.c_uint32), PErr)
ingest = _proto("rsp_ingest", c_status, vp, ctypes.c_uint64, PErr)
remove = _proto("rsp_remove", c_status, vp, ctypes.c_uint64, PErr)
reset = _proto("rsp_reset", c_status, vp, ctypes.c_uint64, ctypes.c_bool, PErr)
release = _proto("rsp_release", c_status, vp, ctypes.c_uint64, ctypes.c_uint32, PErr)
step_admit = _proto("rsp_step_admit", c_status, vp, P(Step), P(AdmitOutcome), PErr)
step_rollback = _proto("rsp_step_rollback", c_status, vp, ctypes.c_uint64, P(Event), PErr)
step_plan = _proto("rsp_step_plan", c_status, vp, P(Step), PErr)
step_unstage = _proto("rsp_step_unstage", c_status, vp, PErr)
step_commit = _proto("rsp_step_commit", c_status, vp, P(Step), P(Event), PErr)
step_next = _proto("rsp_step_next", c_status, vp, P(Step), P(Step), P(Event), P(StepOutcome),
                   PErr)
build_graph_buffers = _proto("rsp_build_graph_buffers", c_status, vp, ctypes.c_uint32,
                             ctypes.c_uint32, PErr)
_stats_snapshot_size = _proto("rsp_stats_snapshot_size", c_status, vp, P(Stats), ctypes.c_size_t,
                              PErr)


def stats_snapshot(pool, out, err):
    """rsp.h's rsp_stats_snapshot macro: every field the mirror has."""
    return _stats_snapshot_size(pool, out, ctypes.sizeof(Stats), err)

holding_get = _proto("rsp_holding_get", c_status, vp, ctypes.c_uint64, ctypes.c_uint32,
                     P(Holding), PErr)
reader_register = _proto("rsp_reader_register", c_status, PErr)
reader_unregister = _proto("rsp_reader_unregister", None)
read_begin = _proto("rsp_read_begin", c_status)
read_explain = _proto("rsp_read_explain", c_status, c_status, PErr)
read_end = _proto("rsp_read_end", c_status)
plan_live = _proto("rsp_plan_live", vp, vp)
plan_of_step = _proto("rsp_plan_of_step", vp, vp, ctypes.c_uint64)
plan_ref = _proto("rsp_plan_ref", vp, vp)
plan_unref = _proto("rsp_plan_unref", None, vp)
plan_step_id = _proto("rsp_plan_step_id", ctypes.c_uint64, vp)
plan_addressing = _proto("rsp_plan_addressing", c_status, vp, ctypes.c_uint32, P(Addressing),
                         PErr)
plan_spec_indices = _proto("rsp_plan_spec_indices", c_status, vp, ctypes.c_uint32,
                           P(SpecIndices), PErr)
plan_wait_step = _proto("rsp_plan_wait_step", c_status, vp, ctypes.c_uint64, ctypes.c_uint64,
                        PErr)
event_wait = _proto("rsp_event_wait", c_status, vp, P(Event), ctypes.c_uint64, PErr)
host_fence_create = _proto("rsp_host_fence_create", c_status, P(vp), PErr)
host_fence_destroy = _proto("rsp_host_fence_destroy", None, vp)
host_fence_signal = _proto("rsp_host_fence_signal", None, vp, ctypes.c_uint64)
host_fence_value = _proto("rsp_host_fence_value", ctypes.c_uint64, vp)
plan_live_addressing = _proto("rsp_plan_live_addressing", c_status, vp, ctypes.c_uint32,
                              P(Addressing), PErr)
pool_block_dlpack = _proto("rsp_pool_block_dlpack", c_status, vp, ctypes.c_char_p,
                           ctypes.c_uint32, P(vp), PErr)
addressing_dlpack = _proto("rsp_addressing_dlpack", c_status, vp, P(Addressing), c_enum, P(vp),
                           PErr)
# rsp_dlpack_part
DLPACK_SLOT_INDICES = 0
DLPACK_HAS_STATE = 1
DLPACK_DEVICE_SLOT_INDICES = 2
DLPACK_DEVICE_HAS_STATE = 3

# Checkpoints, swap, the vector forms, ordered posting, the plan digest.
PRid = P(ctypes.c_uint64)
checkpoint_take = _proto("rsp_checkpoint_take", c_status, vp, ctypes.c_uint64, ctypes.c_uint64,
                         ctypes.c_uint32, c_enum, ctypes.c_uint64, PErr)
checkpoint_drop = _proto("rsp_checkpoint_drop", c_status, vp, ctypes.c_uint64, PErr)
checkpoint_pin = _proto("rsp_checkpoint_pin", c_status, vp, ctypes.c_uint64, PErr)
checkpoint_unpin = _proto("rsp_checkpoint_unpin", c_status, vp, ctypes.c_uint64, PErr)
checkpoint_value = _proto("rsp_checkpoint_value", c_status, vp, ctypes.c_uint64, ctypes.c_uint64,
                          PErr)
checkpoint_query = _proto("rsp_checkpoint_query", c_status, vp, ctypes.c_uint64,
                          P(CheckpointInfo), PErr)
checkpoint_lookup = _proto("rsp_checkpoint_lookup", c_status, vp, ctypes.c_uint64,
                           P(CheckpointLoc), PErr)
swap_out = _proto("rsp_swap_out", c_status, vp, ctypes.c_uint64, PErr)
swap_in = _proto("rsp_swap_in", c_status, vp, ctypes.c_uint64, P(AdmitOutcome), PErr)
pool_dump = _proto("rsp_pool_dump", c_status, vp, ctypes.c_char_p, ctypes.c_size_t,
                   P(ctypes.c_size_t), PErr)
ingest_many = _proto("rsp_ingest_many", c_status, vp, PRid, ctypes.c_uint32, PErr)
remove_many = _proto("rsp_remove_many", c_status, vp, PRid, ctypes.c_uint32, PErr)
reset_many = _proto("rsp_reset_many", c_status, vp, PRid, ctypes.c_uint32, ctypes.c_bool, PErr)
barrier = _proto("rsp_barrier", c_status, vp, PErr)
post = _proto("rsp_post", c_status, vp, P(Msg), P(vp), ctypes.c_uint64, PErr)
wait = _proto("rsp_wait", c_status, vp, ctypes.c_uint64, P(Reply))
plan_digest = _proto("rsp_plan_digest", ctypes.c_uint64, vp)
host_fence_wait = _proto("rsp_host_fence_wait", c_status, vp, ctypes.c_uint64, ctypes.c_uint64)
pool_close_timed = _proto("rsp_pool_close_timed", c_status, vp, ctypes.c_uint64, P(CloseReport),
                          PErr)

# Export and import.
pool_regions = _proto("rsp_pool_regions", c_status, vp, P(Region), ctypes.c_uint32,
                      P(ctypes.c_uint32), PErr)
export_open = _proto("rsp_export_open", c_status, vp, P(ExportSpec), P(vp), PErr)
export_header = _proto("rsp_export_header", P(XferHeader), vp)
export_extents = _proto("rsp_export_extents", P(Extent), vp, P(ctypes.c_uint32))
export_close = _proto("rsp_export_close", c_status, vp, PErr)
import_begin = _proto("rsp_import_begin", c_status, vp, P(XferHeader), ctypes.c_uint64,
                      ctypes.c_uint64, P(vp), PErr)
import_extents = _proto("rsp_import_extents", c_status, vp, ctypes.c_uint32, ctypes.c_uint32,
                        P(Extent), ctypes.c_uint32, P(ctypes.c_uint32), PErr)
import_commit = _proto("rsp_import_commit", c_status, vp, ctypes.c_uint64, PErr)
import_abort = _proto("rsp_import_abort", c_status, vp, ctypes.c_uint64, PErr)

# --- librsp_ucx (rsp_ucx.h): the UCX transport, loaded by rsp.ucx on first use ---


def _ucx_candidates():
    """RSP_UCX_LIBRARY alone when set; else beside the librsp loaded above
    (a build tree's src/, or the installed package), then the system's."""
    env = os.environ.get("RSP_UCX_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(getattr(lib, "_name", "") or "")
    if here:
        for name in ("librsp_ucx.so", "librsp_ucx.so.0"):
            yield os.path.join(here, name)
    found = ctypes.util.find_library("rsp_ucx")
    if found:
        yield found


def load_ucx():
    """librsp_ucx with its prototypes declared. OSError naming every path
    tried when none loads (not built, or UCX's own libraries missing). Its
    NEEDED librsp.so.0 resolves to the librsp already loaded (the dynamic
    linker matches a loaded library by its soname)."""
    tried = []
    for path in _ucx_candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            u = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        protos = {
            "rsp_ucx_create": (c_status, vp, P(vp), PErr),
            "rsp_ucx_destroy": (None, vp),
            "rsp_ucx_connect": (c_status, vp, ctypes.c_int, ctypes.c_uint64, PErr),
            "rsp_ucx_send": (c_status, vp, vp, ctypes.c_uint64, PErr),
            "rsp_ucx_receive": (c_status, vp, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                                ctypes.c_uint64, P(XferHeader), PErr),
            "rsp_ucx_receive_begin": (c_status, vp, ctypes.c_uint64, ctypes.c_uint64,
                                      ctypes.c_uint64, P(XferHeader), P(vp), PErr),
            "rsp_ucx_receive_end": (c_status, vp, vp, c_status, ctypes.c_uint64,
                                    ctypes.c_uint64, PErr),
        }
        batch = {
            "rsp_ucx_send_many": (c_status, vp, P(vp), ctypes.c_uint32, ctypes.c_uint64,
                                  P(c_status), PErr),
            "rsp_ucx_receive_many": (c_status, vp, PRid, ctypes.c_uint32, P(ctypes.c_uint64),
                                     ctypes.c_uint64, P(ctypes.c_uint32), P(XferHeader),
                                     P(c_status), PErr),
        }
        # The batch form is newer than the rest: declared where the library has it.
        protos.update({k: v for k, v in batch.items() if hasattr(u, k)})
        for name, (restype, *argtypes) in protos.items():
            fn = getattr(u, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return u
    raise OSError("librsp_ucx not found (the UCX transport: built when pkg-config finds ucx, "
                  "Debian libucx-dev; set RSP_UCX_LIBRARY to its path). Tried: "
                  + ("; ".join(tried) or "nothing"))
