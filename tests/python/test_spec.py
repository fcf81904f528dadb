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


# --- under a lease: the graph-stable device copy --------------------------------


def test_spec_indices_device_copy_under_a_lease_stays_put():
    pool = rsp.Pool("cpu", small_config(max_slots=16))
    lease = rsp.Lease(4, 0, 0)
    ptrs = set()
    for sid, span in ((1, 3), (2, 1)):
        step = rsp.Step(sid, [rsp.Row("a", "main", span, per_token_states=True)], lease=lease)
        assert pool.admit(step)
        pool.plan(step)
        x = pool.spec_indices()
        assert x.width == 4 and x.length == 4  # the first plan's width, the bucket's rows
        assert x.device is not None and x.device.shape == (4, 4)
        assert torch.equal(x.device, x.indices)
        ptrs.add(x.device.data_ptr())
        pool.commit(rsp.Step(sid, [rsp.Row("a", "main", span, per_token_states=True,
                                           accepted=span)], lease=lease))
    assert len(ptrs) == 1  # one buffer: a captured graph's address
    step = rsp.Step(3, [rsp.Row("a", "main", 4, per_token_states=True)], lease=lease)
    assert pool.admit(step)
    with pytest.raises(rsp.RspError) as e:  # wider than the key's tensor
        pool.plan(step)
    assert e.value.name == "RSP_ECAPACITY" and "too small" in e.value.message
    pool.rollback_admit(step)
    plain = rsp.Step(4, [rsp.Row("a", "main", 2, per_token_states=True)])
    assert pool.admit(plain)
    pool.plan(plain)
    assert pool.spec_indices().device is None  # no lease, no buffer: the copy is the tensor
    pool.commit(rsp.Step(4, [rsp.Row("a", "main", 2, per_token_states=True, accepted=1)]))
    pool.cleanup()


# --- the seed's class: a verify step as an engine declares it -------------------


def seed_pool(max_slots=16):
    from rsp.seed import RecurrentBlockConfig, RecurrentStateConfig, RecurrentStatePool
    cfg = RecurrentStateConfig(num_layers=1,
                               blocks={"state": RecurrentBlockConfig(shape=(4,),
                                                                     dtype=torch.float32)},
                               max_slots=max_slots)
    return RecurrentStatePool("cpu", cfg)


def test_seed_verify_step_keeps_the_accepted_tokens_state():
    from rsp.seed import RecurrentStep, Segment
    pool = seed_pool()
    state = pool.block("state", 0)
    total = {"a": 0.0, "b": 0.0, "c": 0.0}
    for n in range(1, 5):
        # "c" decodes plainly beside the two speculative requests.
        st = RecurrentStep(segments=(Segment("a", "main", 3), Segment("b", "main", 3),
                                     Segment("c", "main", 1)),
                           per_token_states={"a", "b"})
        assert pool.admit(st).ok
        addr = pool.plan(st)["main"]
        idx = addr.spec_state_indices
        assert idx.dtype == torch.int32 and idx.shape[1] == 4
        host = addr.host_spec_state_indices
        assert len(host) == 3 and host[2][1:] == [pool.pad_index] * 3  # c: no outputs
        for i, rid in enumerate(("a", "b")):
            row = host[i]
            assert row[0] == addr.host_slot_indices[i]
            base = state[row[0]].clone() if addr.host_has_state[i] else torch.zeros(4)
            for t in (1, 2, 3):
                state[row[t]] = base + t
        c = addr.host_slot_indices[2]
        state[c] = (state[c] if addr.host_has_state[2] else torch.zeros(4)) + 1
        acc = [1 + n % 3, 1 + (n + 1) % 3]
        pool.commit(st, num_accepted_tokens=torch.tensor(acc))  # one per spec decode
        total["a"] += acc[0]
        total["b"] += acc[1]
        total["c"] += 1
        for rid, v in total.items():
            assert torch.equal(state[pool.slot_index(rid)], torch.full((4,), v))
    assert pool.num_free_slots == 16 - 1 - 3  # the sink, one slot per request
    pool.cleanup()


def test_seed_verify_step_counts_from_the_step_and_refusals():
    from rsp.seed import RecurrentStep, Segment
    pool = seed_pool()
    segs = (Segment("a", "main", 2),)
    with pytest.raises(TypeError, match="step.per_token_states"):
        pool.admit(RecurrentStep(segments=segs, per_token_states="a"), None)
    st = RecurrentStep(segments=segs, per_token_states=True)
    assert pool.admit(st).ok
    pool.plan(st)
    with pytest.raises(TypeError, match="num_accepted_tokens"):
        pool.commit(st)
    with pytest.raises(ValueError, match=r"accepted 3: an int 0 \.\. 2"):
        pool.commit(st, num_accepted_tokens={"a": 3})
    slot = pool.slot_index("a")
    done = RecurrentStep(segments=segs, per_token_states=True, num_accepted_tokens={"a": 0})
    pool.commit(done)  # an equal declaration finds the step; 0 keeps the old state
    assert pool.slot_index("a") == slot and not pool._slots["a"]["main"].has_state
    pool.cleanup()


def test_seed_leased_verify_steps_share_one_tensor_buffer():
    from rsp.seed import BucketKey, RecurrentStep, Segment, SlotLease, StepContext
    pool = seed_pool()
    lease = SlotLease(slot=0, bucket=BucketKey("decode", 2, 6))

    def ctx(capture=False):
        return StepContext(request_ids=("a", "b"), graph_walk="decode", slot=0,
                           capture=capture, slot_lease=lease)

    # The capture declares K = 3 (span 4): the width every replay reads.
    cap = RecurrentStep(segments=(Segment("x", "main", 4), Segment("y", "main", 4)),
                        per_token_states=True)
    assert pool.admit(cap, ctx(True)).ok
    t = pool.plan(cap, ctx(True))["main"].spec_state_indices
    assert t.shape == (2, 5)
    ptr = t.data_ptr()
    pool.commit(cap, ctx(True))
    for n in range(1, 4):
        st = RecurrentStep(segments=(Segment("a", "main", 1 + n), Segment("b", "main", 2)),
                           per_token_states=True, num_accepted_tokens=[1, 2])
        assert pool.admit(st, ctx()).ok
        a = pool.plan(st, ctx())["main"]
        assert a.spec_state_indices.data_ptr() == ptr and a.spec_state_indices.shape == (2, 5)
        assert a.spec_state_indices[:, 0].tolist() == a.host_slot_indices
        pool.commit(st, ctx())
    pool.cleanup()
