# The compiled fast path (rsp._fast, python/rsp/_fast.c): loaded as
# RSP_PY_FAST says, and answering exactly what the ctypes path answers:
# outcomes, digests, addressing, errors (status and message) and the
# lifetime of addressing()'s tensors. run.sh runs the whole suite with
# RSP_PY_FAST=1 (the module required) and again with RSP_PY_FAST=0.
# SPDX-License-Identifier: Apache-2.0
import os

import pytest
import torch

import rsp
from rsp import pool as pool_mod

from conftest import small_config

needs_fast = pytest.mark.skipif(not pool_mod._fast_enabled(),
                                reason="rsp._fast not built or RSP_PY_FAST=0")


def test_the_fast_path_is_loaded_as_rsp_py_fast_says():
    mode = os.environ.get("RSP_PY_FAST", "")
    if mode == "0":
        assert not pool_mod._fast_enabled()
    elif mode == "1":
        assert pool_mod._fast_enabled()  # import would have failed otherwise


class _Paths:
    """Run a call on the fast path or, with _FAST set to None for its
    duration, on the ctypes path."""

    def __init__(self, monkeypatch):
        self.mp = monkeypatch
        self.fast = pool_mod._FAST

    def slow(self, fn, *a, **kw):
        self.mp.setattr(pool_mod, "_FAST", None)
        try:
            return fn(*a, **kw)
        finally:
            self.mp.setattr(pool_mod, "_FAST", self.fast)


def _addr(a):
    return (a.slot_indices.tolist(), a.has_state.tolist(), a.slot_indices.dtype,
            a.has_state.dtype, a.num_rows, a.step_id, list(a.host_slot_indices),
            list(a.host_has_state), list(a.generations), a.ready.kind)


def _raised(fn, *a, **kw):
    with pytest.raises(rsp.RspError) as e:
        fn(*a, **kw)
    return e.value.status, e.value.name, e.value.message


@needs_fast
def test_step_next_and_addressing_match_the_ctypes_path(monkeypatch):
    paths = _Paths(monkeypatch)
    fast = rsp.RecurrentStatePool("cpu", small_config(max_slots=8))
    slow = rsp.RecurrentStatePool("cpu", small_config(max_slots=8))
    try:
        steps = [
            [("a", "main", 1), ("b", "main", 1)],
            [("a", "main", 1), ("b", "main", 1)],  # the same rows: the reused buffer
            [("a", "main", 1), ("c", "main", 2), ("d", "draft", 1)],
            [rsp.Row("a", "main", 1, padding=True), ("c", "main", 1)],
            [],
        ]
        prev_f = prev_s = None
        for sid, rows in enumerate(steps, 1):
            sf, ss = rsp.Step(sid, list(rows)), rsp.Step(sid, list(rows))
            of = fast.step_next(sf, prev=prev_f)
            os_ = paths.slow(slow.step_next, ss, prev=prev_s)
            assert of == os_ and of.plan_digest == os_.plan_digest is not None
            if not rows:  # nothing planned under main: the same error on both
                assert _raised(fast.addressing) == paths.slow(_raised, slow.addressing)
            for label in {r[1] for r in rows}:
                assert _addr(fast.addressing(label)) == _addr(paths.slow(slow.addressing, label))
                assert (_addr(fast.addressing(label, step_id=sid, wait=False))
                        == _addr(paths.slow(slow.addressing, label, step_id=sid, wait=False)))
            prev_f, prev_s = sf, ss
        fast.commit(prev_f)
        paths.slow(slow.commit, prev_s)
        assert fast.stats() == slow.stats()
    finally:
        fast.cleanup()
        slow.cleanup()


@needs_fast
def test_a_prev_with_forks_and_checkpoints_goes_by_its_struct(monkeypatch):
    paths = _Paths(monkeypatch)
    pools = [rsp.RecurrentStatePool("cpu", small_config(max_slots=8, max_checkpoints=2))
             for _ in range(2)]
    try:
        out = []
        for p, call in zip(pools, (lambda f, *a, **k: f(*a, **k), paths.slow)):
            s1 = rsp.Step(1, [("a", "main", 1), ("a", "draft", 1)],
                          post_forks=[rsp.Fork("main", "draft")],
                          checkpoints=[rsp.Checkpoint("a", "main", 7)])
            s2 = rsp.Step(2, [("a", "main", 1)])
            r1 = call(p.step_next, s1)
            r2 = call(p.step_next, s2, prev=s1)
            call(p.commit, s2)
            out.append((r1, r1.plan_digest, r2, r2.plan_digest, p.checkpoint_info(7),
                        p.holding("a", "draft"), p.stats()))
        assert out[0] == out[1]
    finally:
        for p in pools:
            p.cleanup()


@needs_fast
def test_errors_are_the_ctypes_paths_status_and_message(monkeypatch):
    paths = _Paths(monkeypatch)
    pools = [rsp.RecurrentStatePool("cpu", small_config(max_slots=3)) for _ in range(2)]
    try:
        got = []
        for p, call in zip(pools, (lambda f, *a, **k: f(*a, **k), paths.slow)):
            r = [_raised(call, p.addressing)]  # no plan yet
            s5 = rsp.Step(5, [("a", "main", 1)])
            call(p.step_next, s5)
            r.append(_raised(call, p.addressing, step_id=99))  # no such plan
            r.append(_raised(call, p.step_next, rsp.Step(4, [("a", "main", 1)])))
            r.append(_raised(call, p.step_next, rsp.Step(6, [("a", "main", 1)] * 2)))
            # the pool full: an outcome in the caller's terms, nothing planned
            full = call(p.step_next, rsp.Step(6, [("a", "main", 1), ("b", "main", 1),
                                                  ("c", "main", 1)]), prev=s5)
            r.append((full, full.plan_digest, full.reason))
            got.append(r)
        assert got[0] == got[1]
        assert got[0][0][1] == "RSP_ENOPLAN" and got[0][0][2] == "no live plan yet"
        assert got[0][1][2] == "no plan of step 99"
        assert got[0][2][1] == "RSP_EORDER" and got[0][3][1] == "RSP_EDUPROW"
        assert not got[0][4][0] and got[0][4][0].rid == "c" and got[0][4][1] is None
    finally:
        for p in pools:
            p.cleanup()


@needs_fast
def test_admit_plan_commit_match_the_ctypes_path(monkeypatch):
    """The three synchronous step calls (rsp._fast.step): the same
    outcomes, plans, errors (status and message) and counters."""
    paths = _Paths(monkeypatch)
    pools = [rsp.RecurrentStatePool("cpu", small_config(max_slots=4, max_checkpoints=2))
             for _ in range(2)]
    try:
        got = []
        for p, call in zip(pools, (lambda f, *a, **k: f(*a, **k), paths.slow)):
            r = []
            s1 = rsp.Step(1, [("a", "main", 1), ("b", "main", 2)])
            r.append(call(p.admit, s1))
            r.append(call(p.plan, s1))
            r.append(_addr(call(p.addressing)))
            call(p.commit, s1)
            # a step with forks and a checkpoint goes by its ctypes struct
            s2 = rsp.Step(2, [("a", "main", 1), ("a", "draft", 1)],
                          pre_forks=[rsp.Fork("main", "draft")],
                          checkpoints=[rsp.Checkpoint("a", "main", 7)])
            r.append(call(p.admit, s2))
            call(p.plan, s2)
            r.append(_addr(call(p.addressing, "draft")))
            call(p.commit, s2)
            r.append(p.checkpoint_info(7))
            # refusals: a duplicate row, a plan and a commit of a step never
            # admitted, the pool full (an outcome, nothing changed)
            r.append(_raised(call, p.admit, rsp.Step(3, [("a", "main", 1)] * 2)))
            r.append(_raised(call, p.plan, rsp.Step(4, [("a", "main", 1)])))
            r.append(_raised(call, p.commit, rsp.Step(4, [("a", "main", 1)])))
            full = call(p.admit, rsp.Step(5, [("c", "main", 1), ("d", "main", 1),
                                               ("e", "main", 1)]))
            r.append((full, full.reason))
            r.append(p.stats())
            got.append(r)
        assert got[0] == got[1]
        assert got[0][0].ok and got[0][1] == 1
        assert got[0][6][1] == "RSP_EDUPROW" and got[0][8][1] != "RSP_OK"
        assert not got[0][9][0] and got[0][9][0].rid == "c" and got[0][9][0].slots_short == 3
    finally:
        for p in pools:
            p.cleanup()


@needs_fast
def test_the_seed_class_reads_its_plan_as_the_ctypes_path_does(monkeypatch):
    """The seed's plan() on a CPU pool reads through rsp._fast: the same
    RecurrentAddressing, tensors and host lists included."""
    from rsp.seed import RecurrentStep, Segment, StepContext

    paths = _Paths(monkeypatch)
    pools = [rsp.RecurrentStatePool("cpu", small_config(max_slots=8)) for _ in range(2)]
    try:
        got = []
        for p, call in zip(pools, (lambda f, *a, **k: f(*a, **k), paths.slow)):
            r = []
            for segs in ((("a", "main", 3), ("b", "main", 1)), (("a", "main", 1),)):
                st = RecurrentStep(segments=tuple(Segment(*x) for x in segs))
                c = StepContext(request_ids=tuple(x[0] for x in segs), graph_walk="decode",
                                slot=0, capture=False)
                assert call(p.admit, st, c).ok
                plan = call(p.plan, st, c)
                a = plan["main"]
                r.append((a.slot_indices.tolist(), a.has_state.tolist(), a.num_rows,
                          list(a.host_slot_indices), list(a.host_has_state), a.generations,
                          a.ready.kind, a.staged))
                call(p.commit, st, c)
            got.append(r)
        assert got[0] == got[1]
        assert got[0][1][4] == [True]  # a's state written by the first step
        for r in got[0]:  # the host mirrors are ints and bools, as the original's lists
            assert all(type(x) is int for x in r[3]) and all(type(x) is bool for x in r[4])
    finally:
        for p in pools:
            p.cleanup()


@needs_fast
def test_the_seed_class_reads_a_padded_leased_plan_as_the_ctypes_path_does(monkeypatch):
    """A leased plan is as long as its bucket, past its rows: the host lists
    are its num_rows real rows, has_state included, on both paths."""
    from rsp.seed import BucketKey, RecurrentStep, Segment, SlotLease, StepContext

    paths = _Paths(monkeypatch)
    pools = [rsp.RecurrentStatePool("cpu", small_config(max_slots=8)) for _ in range(2)]
    try:
        got = []
        for p, call in zip(pools, (lambda f, *a, **k: f(*a, **k), paths.slow)):
            call(p.build_cuda_graph_buffers, [], 4, 1)
            lease = SlotLease(slot=0, bucket=BucketKey("decode", 4, 4))
            r = []
            for _ in range(2):  # the second step: both rows hold state
                st = RecurrentStep(segments=(Segment("a", "main", 1), Segment("b", "main", 1)))
                c = StepContext(request_ids=("a", "b"), graph_walk="decode", slot=0,
                                capture=False, slot_lease=lease)
                c.set_padded_rids(("a", "b", "pad0", "pad1"))
                assert call(p.admit, st, c).ok
                a = call(p.plan, st, c)["main"]
                r.append((a.slot_indices.tolist(), a.has_state.tolist(), a.num_rows,
                          list(a.host_slot_indices), list(a.host_has_state)))
                call(p.commit, st, c)
            got.append(r)
        assert got[0] == got[1]
        assert got[0][1][1] == [True, True, False, False]
        assert got[0][1][3] == got[0][1][0][:2] and got[0][1][4] == [True, True]
    finally:
        for p in pools:
            p.cleanup()


def test_addressing_tensors_are_copies_that_outlive_the_step_and_the_pool():
    p = rsp.RecurrentStatePool("cpu", small_config(max_slots=8))
    s1 = rsp.Step(1, [("a", "main", 1), ("b", "main", 1)])
    p.step_next(s1)
    a1 = p.addressing()
    first = a1.slot_indices.tolist()
    s2 = rsp.Step(2, [("c", "main", 1)])
    p.step_next(s2, prev=s1)
    a2 = p.addressing()
    assert a1.slot_indices.tolist() == first and a1.has_state.tolist() == [False, False]
    assert a2.num_rows == 1 and a2.slot_indices.tolist() != first[:1]
    a1.slot_indices[0] = 5  # writable, and its own memory: the host lists are apart
    assert a1.host_slot_indices == first
    p.commit(s2)
    p.cleanup()
    assert a2.slot_indices.tolist() == a2.host_slot_indices
    assert a1.slot_indices.is_contiguous() and a1.slot_indices.device.type == "cpu"


@pytest.mark.parametrize("path", ["fast", "ctypes"])
def test_persistent_addressing_is_one_pair_rewritten_in_place(path, monkeypatch):
    if path == "ctypes":
        monkeypatch.setattr(pool_mod, "_FAST", None)
    elif not pool_mod._fast_enabled():
        pytest.skip("rsp._fast not built or RSP_PY_FAST=0")
    p = rsp.RecurrentStatePool("cpu", small_config(max_slots=80))
    s1 = rsp.Step(1, [("a", "main", 1), ("b", "main", 1)])
    p.step_next(s1)
    a1 = p.addressing(persistent=True)
    assert _addr(a1)[:2] == _addr(p.addressing())[:2]
    s2 = rsp.Step(2, [("b", "main", 1), ("c", "main", 1)])
    p.step_next(s2, prev=s1)
    a2 = p.addressing(persistent=True)
    # the same tensors, holding step 2's addressing now: valid until the
    # next step is planned, as docs/python.md says
    assert a2.slot_indices is a1.slot_indices and a2.has_state is a1.has_state
    assert a1.slot_indices.tolist() == a2.host_slot_indices != a1.host_slot_indices
    assert a2.has_state.tolist() == [True, False]
    assert _addr(a2) == _addr(p.addressing())
    # another row count: views of the same storage, rewritten in place
    s3 = rsp.Step(3, [("b", "main", 1)])
    p.step_next(s3, prev=s2)
    a3 = p.addressing(persistent=True)
    assert a3.slot_indices.data_ptr() == a1.slot_indices.data_ptr()
    assert _addr(a3) == _addr(p.addressing())
    # past the capacity: new storage, the right contents
    rows = [(f"r{i}", "main", 1) for i in range(70)]
    s4 = rsp.Step(4, rows)
    p.step_next(s4, prev=s3)
    a4 = p.addressing(persistent=True)
    assert a4.num_rows == 70 and _addr(a4) == _addr(p.addressing())
    p.commit(s4)
    p.cleanup()


def test_a_call_after_cleanup_is_refused_on_either_path():
    p = rsp.RecurrentStatePool("cpu", small_config())
    p.step_next(rsp.Step(1, [("a", "main", 1)]))
    p.cleanup()
    for fn in (lambda: p.step_next(rsp.Step(2, [("a", "main", 1)])), p.addressing):
        assert _raised(fn)[1] == "RSP_ESHUTDOWN"


@needs_fast
def test_types_within_asks_the_set_for_each_run_of_one_type():
    """The seed's segments check: every item's exact type in the set."""
    from rsp.seed import Segment

    tw = pool_mod._FAST.types_within
    known = {tuple, Segment}
    assert tw([], known) is True
    assert tw((Segment("a", "main", 1), Segment("b", "main", 1), ("c", "main", 1)), known)
    # A subclass is not its base, and one stray item among many is found.
    assert tw([("a", "main", 1)] * 50 + [["b", "main", 1]] + [("c", "main", 1)], known) is False
    assert tw([True], {int}) is False
    with pytest.raises(TypeError, match="known is a set"):
        tw([1], [int])
    with pytest.raises(TypeError, match="list or tuple"):
        tw(5, {int})
