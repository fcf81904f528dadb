# Per-token states for speculative decoding through rsp's own Step API
# (docs/semantics.md 9.3): rows that ask for them, the index tensor, the
# accept by relabel at commit. SPDX-License-Identifier: Apache-2.0
import pytest
import torch

import rsp
from conftest import small_config


def verify_step(step_id, rids, span, accepted=None):
    acc = accepted or [0] * len(rids)
    return rsp.Step(step_id, [rsp.Row(r, "main", span, per_token_states=True, accepted=a)
                              for r, a in zip(rids, acc)])


def test_verify_loop_keeps_the_accepted_tokens_state():
    pool = rsp.Pool("cpu", small_config(max_slots=16))
    ssm = pool.block("ssm", 0)
    total = {"a": 0.0, "b": 0.0}
    for sid in range(1, 6):
        acc = [1 + sid % 3, 1 + (sid + 1) % 3]
        step = verify_step(sid, ["a", "b"], 3)
        assert pool.admit(step)
        pool.plan(step)
        x = pool.spec_indices()
        assert x.width == 4 and x.num_rows == 2
        assert x.indices.shape == (x.length, 4) and x.indices.dtype == torch.int32
        addr = pool.addressing()
        for i, r in enumerate(["a", "b"]):
            row = x.row(i)
            assert row[0] == addr.host_slot_indices[i]
            base = ssm[row[0]].clone() if addr.host_has_state[i] else torch.zeros(4, 8)
            for t in (1, 2, 3):
                ssm[row[t]] = base + t  # the state after token t
        pool.commit(verify_step(sid, ["a", "b"], 3, acc))
        for i, r in enumerate(["a", "b"]):
            total[r] += acc[i]
            h = pool.holding(r)
            assert h.has_state
            assert torch.equal(ssm[h.index], torch.full((4, 8), total[r]))
    assert pool.stats()["held_slots"] == 2
    pool.cleanup()


def test_accept_zero_keeps_the_state_and_bad_counts_are_refused():
    pool = rsp.Pool("cpu", small_config(max_slots=16))
    step = verify_step(1, ["a"], 2)
    assert pool.admit(step)
    pool.plan(step)
    with pytest.raises(rsp.RspError) as e:
        pool.commit(verify_step(1, ["a"], 2, [3]))
    assert e.value.name == "RSP_EINVAL" and "accepted = 3" in e.value.message
    held = pool.stats()["held_slots"]
    assert held == 3  # the holding and two output slots
    slot = pool.holding("a").index
    pool.commit(verify_step(1, ["a"], 2, [0]))
    assert pool.holding("a").index == slot and not pool.holding("a").has_state
    assert pool.stats()["held_slots"] == 1
    pool.cleanup()


def test_per_token_row_fields_are_checked_in_python():
    pool = rsp.Pool("cpu", small_config(max_slots=16))
    with pytest.raises(TypeError, match=r"rows\[0\]\.per_token_states must be a bool"):
        pool.admit(rsp.Step(1, [rsp.Row("a", span=2, per_token_states=1)]))
    with pytest.raises(ValueError, match=r"rows\[0\]\.accepted"):
        pool.admit(rsp.Step(1, [rsp.Row("a", span=2, per_token_states=True, accepted=-1)]))
    with pytest.raises(rsp.RspError) as e:  # librsp's rule: 1 <= span <= 64
        pool.admit(rsp.Step(1, [rsp.Row("a", span=65, per_token_states=True)]))
    assert e.value.name == "RSP_EINVAL"
    assert pool.stats()["admits_ok"] == 0
    pool.cleanup()
