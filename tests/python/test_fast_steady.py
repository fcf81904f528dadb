# The steady step in compiled code (rsp._fast's next and read): a
# step_next of a step of rows and flags whose rows equal the last step's,
# and a persistent addressing() of a label whose pair exists, each one call
# into C that answers exactly what pool.py's general path answers. Every
# other case is declined (NotImplemented) and takes the general path, which
# also raises every error. SPDX-License-Identifier: Apache-2.0
import threading

import pytest

import rsp
from rsp import pool as pool_mod

from conftest import small_config

needs_fast = pytest.mark.skipif(not pool_mod._fast_enabled(),
                                reason="rsp._fast not built or RSP_PY_FAST=0")


class _Spy:
    """rsp._fast with next and read recorded: True where the compiled
    steady path answered, False where it declined."""

    def __init__(self, fast):
        self._fast = fast
        self.nexts = []
        self.reads = []

    def __getattr__(self, name):
        return getattr(self._fast, name)

    def next(self, *a):
        r = self._fast.next(*a)
        self.nexts.append(r is not NotImplemented)
        return r

    def read(self, *a):
        r = self._fast.read(*a)
        self.reads.append(r is not NotImplemented)
        return r


@pytest.fixture
def spy(monkeypatch):
    s = _Spy(pool_mod._FAST)
    monkeypatch.setattr(pool_mod, "_FAST", s)
    return s


def _slow(monkeypatch, fn, *a, **kw):
    """fn on the ctypes path (_FAST None for the call)."""
    fast = pool_mod._FAST
    monkeypatch.setattr(pool_mod, "_FAST", None)
    try:
        return fn(*a, **kw)
    finally:
        monkeypatch.setattr(pool_mod, "_FAST", fast)


def _addr(a):
    return (a.slot_indices.tolist(), a.has_state.tolist(), a.slot_indices.dtype,
            a.has_state.dtype, a.num_rows, a.step_id, list(a.host_slot_indices),
            list(a.host_has_state), list(a.generations), a.ready.kind, a.ready.value)


@needs_fast
def test_a_steady_step_is_answered_in_c_as_the_general_path_answers(spy, monkeypatch):
    fast = rsp.Pool("cpu", small_config(max_slots=8))
    slow = rsp.Pool("cpu", small_config(max_slots=8))
    two = [("a", "main", 1), ("b", "main", 1)]
    three = [("a", "main", 1), ("b", "main", 1), ("c", "main", 2)]
    try:
        prev_f = prev_s = None
        for sid, rows in enumerate([two, two, two, three, three], 1):
            sf, ss = rsp.Step(sid, list(rows)), rsp.Step(sid, list(rows))
            of = fast.step_next(sf, prev=prev_f)
            os_ = _slow(monkeypatch, slow.step_next, ss, prev=prev_s)
            assert of == os_ and of.plan_digest == os_.plan_digest is not None
            af = fast.addressing(persistent=True)
            assert _addr(af) == _addr(_slow(monkeypatch, slow.addressing, persistent=True))
            prev_f, prev_s = sf, ss
        # declined: the first step (no rows kept yet) and new rows; the first
        # read (no pair yet); another row count within the pair is answered
        assert spy.nexts == [False, True, True, False, True]
        assert spy.reads == [False, True, True, True, True]
        fast.commit(prev_f)
        _slow(monkeypatch, slow.commit, prev_s)
        assert fast.stats() == slow.stats()
    finally:
        fast.cleanup()
        slow.cleanup()


@needs_fast
def test_the_marshal_the_c_path_caches_is_the_one_pool_py_makes(spy):
    p = rsp.Pool("cpu", small_config())
    try:
        rows = [("a", "main", 1), ("b", "main", 1)]
        s1 = rsp.Step(1, list(rows))
        p.step_next(s1)
        s2 = rsp.Step(2, list(rows))
        p.step_next(s2, prev=s1)
        assert spy.nexts == [False, True]
        made = s2._wire[1]  # by rsp._fast
        want = pool_mod._Marshal(p, rsp.Step(2, list(rows)))  # by pool.py
        for f in pool_mod._Marshal.__slots__:
            assert getattr(made, f) == getattr(want, f), f
        assert made.keep is s1._wire[1].keep  # the kept rows' bytes, shared
        st = made.step  # the ctypes struct, built from it on first use
        assert (st.step_id, st.num_rows, st.capture, st.preplan) == (2, 2, False, False)
        p.commit(s2)  # the general path, through that struct's fields
        assert p.holding("b").has_state
    finally:
        p.cleanup()


@needs_fast
def test_steps_the_steady_path_declines_go_the_general_way(spy):
    p = rsp.Pool("cpu", small_config(max_slots=8, max_checkpoints=2))
    other = rsp.Pool("cpu", small_config())
    rows = [("a", "main", 1)]
    try:
        steps = [rsp.Step(1, list(rows)),  # no rows kept yet
                 rsp.Step(2, list(rows), capture=1),  # a flag not a bool
                 rsp.Step(3, list(rows), checkpoints=[rsp.Checkpoint("a", "main", 7)]),
                 rsp.Step(4, list(rows)),  # its prev has a checkpoint: sent by its struct
                 rsp.Step(5, list(rows))]  # steady
        prev = None
        for s in steps:
            out = p.step_next(s, prev=prev)
            assert out and out.plan_digest is not None
            prev = s
        assert spy.nexts == [False, False, False, False, True]
        assert p.checkpoint_info(7) is not None
        # forward_done given, or seq: the general path without asking C
        p.step_next(rsp.Step(6, list(rows)), prev=prev, forward_done=None)
        assert spy.nexts[-1] is True
        n = len(spy.nexts)
        p.step_next(rsp.Step(7, list(rows)), prev=rsp.Step(6, list(rows)), seq=1)
        assert len(spy.nexts) == n
        p.commit(rsp.Step(7, list(rows)))
        assert p.step_next(rsp.Step(8, list(rows)), prev=None)
        assert spy.nexts[-1] is True
        # a prev marshalled for another pool: declined, and the general path
        # answers as it would (that step was never admitted here)
        t = rsp.Step(1, list(rows))
        assert other.step_next(t)
        n = len(spy.nexts)
        with pytest.raises(rsp.RspError) as e:
            p.step_next(rsp.Step(9, list(rows)), prev=t)
        assert spy.nexts[n:] == [False] and "step 1" in e.value.message
    finally:
        p.cleanup()
        other.cleanup()


@needs_fast
def test_reads_the_steady_path_declines_go_the_general_way(spy):
    p = rsp.Pool("cpu", small_config(max_slots=80))
    try:
        s1 = rsp.Step(1, [("a", "main", 1)])
        p.step_next(s1)
        a1 = p.addressing(persistent=True)  # no pair yet
        assert p.addressing(0, persistent=True).host_slot_indices == a1.host_slot_indices  # an id
        with pytest.raises(rsp.RspError) as e:
            p.addressing("never-named", persistent=True)
        assert e.value.name == "RSP_ENOLABEL"
        assert p.addressing(persistent=True, step_id=1).step_id == 1
        assert spy.reads == [False, False, False]  # (the step_id read never asks)
        # past the pair's capacity: declined, the pool grows the pair
        s2 = rsp.Step(2, [(f"r{i}", "main", 1) for i in range(70)])
        p.step_next(s2, prev=s1)
        a2 = p.addressing(persistent=True)
        assert spy.reads[-1] is False and a2.num_rows == 70
        assert a2.slot_indices.tolist() == a2.host_slot_indices
        # a thread's first read (not yet an rsp reader): declined, then the
        # general path registers it; its next read is answered
        got = []

        def reader():
            got.append(_addr(p.addressing(persistent=True)))
            got.append(_addr(p.addressing(persistent=True)))

        n = len(spy.reads)
        t = threading.Thread(target=reader)
        t.start()
        t.join()
        assert spy.reads[n:] == [False, True]
        assert got[0] == got[1] == _addr(p.addressing())
        p.commit(s2)
    finally:
        p.cleanup()


@needs_fast
def test_the_seed_class_steps_through_the_steady_path(spy):
    p = rsp.RecurrentStatePool("cpu", small_config())
    try:
        prev = None
        for sid in range(1, 5):
            s = rsp.Step(sid, [("a", "main", 1), ("b", "main", 1)])
            assert p.step_next(s, prev=prev)
            a = p.addressing("main", persistent=True)
            assert a.host_slot_indices == [1, 2] and a.step_id == sid
            assert a.host_has_state == [sid > 1] * 2
            prev = s
        p.commit(prev)
        assert spy.nexts == [False, True, True, True]
        assert spy.reads == [False, True, True, True]
    finally:
        p.cleanup()


@needs_fast
def test_the_steady_calls_keep_the_calls_guard(spy):
    p = rsp.Pool("cpu", small_config())
    try:
        rows = [("a", "main", 1)]
        s1, s2 = rsp.Step(1, list(rows)), rsp.Step(2, list(rows))
        p.step_next(s1)
        p.addressing(persistent=True)
        p.step_next(s2, prev=s1)
        p.addressing(persistent=True)
        assert spy.nexts[-1] and spy.reads[-1] and p._calls == []  # entered and left
        # an error inside the C call: raised, and the guard left all the same
        with pytest.raises(rsp.RspError):
            p.step_next(rsp.Step(3, list(rows)), prev=s1)  # s1 was committed already
        assert spy.nexts[-1] and p._calls == []
        # a caller inside one of the pool's callbacks, and a closing pool:
        # declined in C, refused by the guarded path as before
        me = threading.get_ident()
        p._in_callback.add(me)
        try:
            for call in (lambda: p.step_next(rsp.Step(3, list(rows)), prev=s2),
                         lambda: p.addressing(persistent=True)):
                with pytest.raises(rsp.RspError) as e:
                    call()
                assert e.value.name == "RSP_EINVAL" and "callback" in e.value.message
        finally:
            p._in_callback.discard(me)
        p._closing = True
        try:
            with pytest.raises(rsp.RspError) as e:
                p.addressing(persistent=True)
            assert e.value.name == "RSP_ESHUTDOWN"
        finally:
            p._closing = False
        assert spy.nexts[-1] is False and spy.reads[-2:] == [False, False] and p._calls == []
        p.commit(s2)
    finally:
        p.cleanup()
