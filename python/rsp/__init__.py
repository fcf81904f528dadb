"""rsp: a recurrent state pool for LLM inference engines (librsp), with the
seed's RecurrentStatePool API and zero-copy torch tensors. See docs/python.md."""
# SPDX-License-Identifier: Apache-2.0
from .ids import rid64
from .pool import (AdmitOutcome, BlockSpec, Fork, HostFence, Lease, PlanRef, PoolConfig,
                   RecurrentAddressing, RecurrentStatePool, Row, RspError, SlotState, Step)

__all__ = [
    "AdmitOutcome", "BlockSpec", "Fork", "HostFence", "Lease", "PlanRef", "PoolConfig",
    "RecurrentAddressing", "RecurrentStatePool", "Row", "RspError", "SlotState", "Step", "rid64",
]
from .pool import (Checkpoint, CheckpointEvent, CheckpointInfo, CheckpointLoc, Failure,
                   Restore)

__all__ += ["Checkpoint", "CheckpointEvent", "CheckpointInfo", "CheckpointLoc", "Failure",
            "Restore"]
