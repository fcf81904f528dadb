"""rsp: a recurrent state pool for LLM inference engines (librsp), with the
seed's RecurrentStatePool and zero-copy torch tensors. See docs/python.md.

rsp.RecurrentStatePool is the seed's class (rsp.seed), driven with the
engine's step and context objects; rsp.Pool is the package's own Step API
underneath it."""
# SPDX-License-Identifier: Apache-2.0
from .ids import rid64
from .pool import (AdmitOutcome, BlockSpec, Fork, HostFence, Lease, PlanRef, PoolConfig,
                   RecurrentAddressing, Row, RspError, SlotState, Step)
from .pool import RecurrentStatePool as Pool
from . import seed
from .seed import RecurrentStatePool

__all__ = [
    "AdmitOutcome", "BlockSpec", "Fork", "HostFence", "Lease", "PlanRef", "Pool", "PoolConfig",
    "RecurrentAddressing", "RecurrentStatePool", "Row", "RspError", "SlotState", "Step", "rid64",
    "seed",
]
from .pool import (Checkpoint, CheckpointEvent, CheckpointInfo, CheckpointLoc, Failure,
                   Restore)

__all__ += ["Checkpoint", "CheckpointEvent", "CheckpointInfo", "CheckpointLoc", "Failure",
            "Restore"]
from .pool import SpecIndices

__all__ += ["SpecIndices"]
from . import xfer
from .xfer import Export, Extent, Import, Region, header_fields

__all__ += ["Export", "Extent", "Import", "Region", "header_fields", "xfer"]
from . import ucx  # the UCX transport (librsp_ucx), loaded on first use

__all__ += ["ucx"]
