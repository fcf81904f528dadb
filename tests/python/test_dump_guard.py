# The state dump as a dict (Pool.dump) and guard mode's findings through
# on_error (Failure.guard).
# SPDX-License-Identifier: Apache-2.0
import rsp
from conftest import small_config


def test_dump_is_the_pools_state_and_changes_nothing(pool):
    pool.ingest_request(1)
    pool.ingest_request(2)
    d = pool.dump()
    assert d["pool"]["device"] == "host"
    assert d["pool"]["guard"] is None
    assert [r["rid"] for r in d["requests"]] == [1, 2]
    assert d["requests"][0]["holdings"] == []
    assert d["steps"] == [] and d["stage"] is None
    assert d["slots"]["max"] == pool.max_slots
    assert d["labels"][0] == {"id": 0, "name": "main"}
    assert pool.dump() == d


def test_guard_reports_a_write_into_a_free_slot():
    found = []
    cfg = small_config(guard=True, on_error=found.append)
    p = rsp.Pool("cpu", cfg)
    try:
        assert p.dump()["pool"]["guard"] == {"checks": 0, "violations": 0}
        free_slot = p.dump()["slots"]["max"] - 1
        p.block("ssm", 0)[free_slot].fill_(1)  # a "kernel" writing past its batch
        step = rsp.Step(1, [rsp.Row(5, "main", 1)])
        assert p.admit(step)
        p.plan(step)
        p.commit(step)
        d = p.dump()
        assert d["pool"]["guard"]["violations"] == 1
        assert len(found) == 1
        g = found[0].guard
        assert g["slot"] == free_slot and not g["held"]
        assert (g["block"], g["layer"], g["regions"], g["step_id"]) == (0, 0, 1, 1)
        assert found[0].kind == "commit" and found[0].name == "RSP_EDEVICE"
    finally:
        p.cleanup()
