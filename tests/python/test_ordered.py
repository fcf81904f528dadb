# Ordered posting (PoolConfig.ordered, seq= on every slot-changing method)
# and the plan digest ranks compare. Workers record, the main thread asserts.
# SPDX-License-Identifier: Apache-2.0
import itertools
import threading
import time

import pytest

import rsp
from conftest import small_config


def _ordered(**kw):
    kw.setdefault("max_checkpoints", 2)
    kw.setdefault("max_host_checkpoints", 4)
    return rsp.RecurrentStatePool("cpu", small_config(ordered=True, **kw))


def test_an_ordered_pool_refuses_a_slot_changing_call_without_seq():
    p = _ordered()
    for call in (lambda: p.ingest_request("a"), lambda: p.ingest_many(["a"]),
                 lambda: p.checkpoint_drop(1), lambda: p.swap_out("a"),
                 lambda: p.step_next(rsp.Step(1, [("a", "main", 1)]))):
        with pytest.raises(rsp.RspError) as e:
            call()
        assert e.value.name == "RSP_EINVAL" and "ordered" in e.value.message
    # a step naming a label not interned yet: interning is a numbered message too
    with pytest.raises(rsp.RspError) as e:
        p.step_next(rsp.Step(1, [("a", "draft", 1)]), seq=1)
    assert e.value.name == "RSP_EINVAL" and "intern_label('draft', seq=n)" in e.value.message
    # the exempt kinds need no number
    s = p.stats()
    assert s["num_requests"] == 0 and s["messages_handled"] == 0  # nothing was handled
    p.barrier()
    assert p.holding("a") is None and p.checkpoint_info(1) is None
    # number 1 is still free
    p.ingest_request("a", seq=1)
    assert p.stats()["num_requests"] == 1
    p.cleanup()


def test_numbered_messages_are_handled_in_number_order_whoever_posts_them():
    p = _ordered()
    done = []
    # seq 2 (remove "b") arrives first and waits for seq 1 (ingest "b"): in
    # arrival order "b" would stay (a remove of nobody, then the ingest)
    t = threading.Thread(target=lambda: done.append(p.remove_request("b", seq=2)))
    t.start()
    time.sleep(0.1)
    waited = t.is_alive()
    p.ingest_request("b", seq=1)
    t.join()
    assert waited and done == [None]
    assert p.stats()["num_requests"] == 0
    with pytest.raises(rsp.RspError) as e:
        p.ingest_request("c", seq=2)  # an old number
    assert e.value.name == "RSP_EORDER" and "seq 2" in e.value.message
    assert p.stats()["num_requests"] == 0  # nothing changed
    p.cleanup()


def test_a_missing_number_breaks_the_pool_at_the_reorder_timeout():
    p = _ordered(reorder_timeout_ns=100_000_000)
    p.ingest_request("a", seq=1)
    t0 = time.monotonic()
    with pytest.raises(rsp.RspError) as e:
        p.ingest_request("b", seq=3)  # 2 never comes
    assert e.value.name == "RSP_ETIMEDOUT" and "message 2" in e.value.message
    assert time.monotonic() - t0 >= 0.09
    with pytest.raises(rsp.RspError) as e:
        p.ingest_request("b", seq=2)
    assert e.value.name == "RSP_EDEVICE" and "broken" in e.value.message
    p.cleanup()  # a broken pool still closes


def _engine(p, seq):
    """Every slot-changing method once, numbered from seq; returns the
    digests of the steps it planned."""
    n = lambda: next(seq)  # noqa: E731
    digests = []
    assert p.intern_label("draft", seq=n()) == 1
    assert p.intern_label("draft", seq=n()) == 1  # known: same id, the number still used
    p.ingest_many(["a", "b", "c"], seq=n())
    p.ingest_many([], seq=n())  # nothing to do, but its number is used (a barrier)
    p.ingest_request("d", seq=n())
    p.build_accelerator_graph_buffers(None, 8, 0, seq=n())
    s1 = rsp.Step(1, [("a", "main", 4), ("b", "main", 4), ("a", "draft", 1)],
                  pre_forks=[("main", "draft")], checkpoints=[("a", "main", 100)])
    out = p.step_next(s1, seq=n())
    assert out.ok and out.plan_digest == p.plan_digest()
    digests.append(out.plan_digest)
    s2 = rsp.Step(2, [("a", "main", 1), ("c", "main", 4)], restores=[("c", "main", 100)])
    out = p.step_next(s2, prev=s1, seq=n())
    digests.append(out.plan_digest)
    p.commit(s2, seq=n())
    p.release("a", "draft", seq=n())
    p.checkpoint_take(101, "c", tier="host", seq=n())
    p.checkpoint_pin(101, seq=n())
    p.checkpoint_unpin(101, seq=n())
    p.checkpoint_drop(101, seq=n())
    p.swap_out("b", seq=n())
    assert p.swap_in("b", seq=n()).ok
    s3 = rsp.Step(3, [("b", "main", 1), ("d", "main", 1)], preplan=True)
    assert p.admit(s3, seq=n())
    assert p.plan(s3, seq=n()) == 3
    p.clear_preplan(seq=n())
    p.rollback_admit(s3, seq=n())
    s4 = rsp.Step(4, [("b", "main", 1), ("d", "main", 1)])
    assert p.admit(s4, seq=n())
    p.plan(s4, seq=n())
    digests.append(p.plan_digest())
    p.commit(s4, seq=n())
    p.reset_request("d", seq=n())
    p.reset_many(["a", "c"], free=True, seq=n())
    p.barrier(seq=n())
    p.remove_many(["a", "c"], seq=n())
    p.remove_request("b", seq=n())
    return digests


def test_every_slot_changing_method_takes_seq_and_ranks_agree():
    pools = [_ordered(), _ordered()]
    digests = [_engine(p, itertools.count(1)) for p in pools]
    assert digests[0] == digests[1] and len(set(digests[0])) == 3
    for p in pools:
        s = p.stats()
        assert s["num_requests"] == 1 and s["held_slots"] == 1  # "d", reset but kept
        assert s["checkpoints_taken"] == 2 and s["checkpoints_restored"] == 1
        assert s["swaps_out"] == s["swaps_in"] == 1 and s["checkpoints_dropped"] == 1
        assert s["commits"] == 3 and s["rollbacks"] == 1 and s["stages"] == 1
        assert p.holding("d").has_state is False
        p.cleanup()


def test_seq_is_checked_before_anything_is_sent():
    p = _ordered()
    for call, exc, match in [
        (lambda: p.ingest_request("a", seq=-1), ValueError, r"seq -1 is not in \[0, 2\*\*64\)"),
        (lambda: p.ingest_request("a", seq="1"), TypeError, r"seq must be an int, not str"),
        (lambda: p.step_next(rsp.Step(1, [("a", "main", 1)]), seq=1.0), TypeError, r"seq must"),
        (lambda: p.remove_many(["a"], seq=2**64), ValueError, r"seq 18446744073709551616"),
        (lambda: p.checkpoint_take(1, "a", seq=-2), ValueError, r"seq -2"),
        (lambda: p.barrier(seq=-1), ValueError, r"seq -1"),
    ]:
        with pytest.raises(exc, match=match):
            call()
    assert p.stats()["messages_handled"] == 0
    p.ingest_request("a", seq=1)  # number 1 was never used
    p.cleanup()


def test_an_unordered_pool_takes_seq_and_ignores_it(pool):
    pool.ingest_request("a", seq=7)
    pool.ingest_request("b", seq=7)
    assert pool.step_next(rsp.Step(1, [("a", "main", 1)]), seq=1)
    assert pool.stats()["num_requests"] == 2


def _digests(history):
    p = rsp.RecurrentStatePool("cpu", small_config())
    out = []
    prev = None
    for sid, rows in enumerate(history, start=1):
        step = rsp.Step(sid, rows)
        o = p.step_next(step, prev=prev)
        assert o.ok
        with p.plan_ref() as ref:
            assert o.plan_digest == p.plan_digest() == p.plan_digest(sid) == ref.plan_digest
        out.append(o.plan_digest)
        prev = step
    p.commit(prev)
    p.cleanup()
    return out


def test_plan_digests_agree_for_the_same_history_and_differ_otherwise():
    same = [[("a", "main", 4), ("b", "main", 4)], [("a", "main", 1), ("b", "main", 1)]]
    other = [[("b", "main", 4), ("a", "main", 4)], [("a", "main", 1), ("b", "main", 1)]]
    d1, d2, d3 = _digests(same), _digests(same), _digests(other)
    assert d1 == d2 and d1[0] != d1[1]
    # rows swapped: step 1's rows get slots 1, 2 either way (the digest hashes
    # slots in row order, not rids); step 2's a and b then read other slots
    assert d3[0] == d1[0] and d3[1] != d1[1]


def test_plan_digest_failures(pool):
    with pytest.raises(rsp.RspError) as e:
        pool.plan_digest()
    assert e.value.name == "RSP_ENOPLAN"
    step = rsp.Step(1, [("a", "main", 1)])
    out = pool.admit(step)
    assert out.plan_digest is None  # admit plans nothing
    assert out == rsp.AdmitOutcome(True)
    pool.plan(step)
    with pytest.raises(rsp.RspError) as e:
        pool.plan_digest(step_id=9)
    assert e.value.name == "RSP_ENOPLAN" and "step 9" in e.value.message
    with pytest.raises(TypeError, match="step_id must be an int"):
        pool.plan_digest(step_id="1")
    ref = pool.plan_ref()
    ref.release()
    with pytest.raises(rsp.RspError, match="released"):
        ref.plan_digest
    pool.commit(step)
    # a step_next the pool is too full for plans nothing: no digest
    full = rsp.Step(2, [(f"r{i}", "main", 1) for i in range(9)])
    out = pool.step_next(full)
    assert not out.ok and out.plan_digest is None
