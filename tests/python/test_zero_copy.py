# Zero copy both ways, and memory that outlives the pool: writes through a
# torch view are what rsp zeroes and forks, rsp's copies are seen in the
# view; views and addressing tensors stay valid after cleanup(), after the
# pool is garbage-collected, and at interpreter exit.
# SPDX-License-Identifier: Apache-2.0
import gc
import os
import subprocess
import sys
import textwrap

import torch

import rsp
from conftest import PKG, small_config


def _run(pool, step):
    assert pool.admit(step)
    pool.plan(step)
    return pool.addressing()


def test_a_write_through_the_view_is_forked_by_rsp(pool):
    ssm = [pool.block("ssm", layer) for layer in range(2)]
    s1 = rsp.Step(1, [("a", "main", 4)])
    a = _run(pool, s1)
    slot = a.slot_indices[0]
    for layer in range(2):
        ssm[layer][slot] = torch.arange(32, dtype=torch.float32).view(4, 8) + layer
    pool.commit(s1)
    # a draft branch: pre-fork main -> draft copies the bytes written above
    s2 = rsp.Step(2, [("a", "main", 1), ("a", "draft", 1)], pre_forks=[rsp.Fork("main", "draft")])
    _run(pool, s2)
    d = pool.addressing("draft").slot_indices[0]
    assert d != slot
    for layer in range(2):
        assert torch.equal(ssm[layer][d], ssm[layer][slot])  # rsp's copy, seen in the view
    pool.commit(s2)


def test_a_write_through_the_view_is_zeroed_by_reset(pool):
    conv = pool.block("conv", 1)
    s1 = rsp.Step(1, [("a", "main", 1)])
    a = _run(pool, s1)
    slot = a.slot_indices[0]
    conv[slot] = 3.0
    pool.commit(s1)
    pool.reset_request("a")  # keeps the slot, zeroes it
    s2 = rsp.Step(2, [("a", "main", 1)])
    a2 = _run(pool, s2)  # waits for the plan's ready: the zero ran before it
    assert a2.slot_indices[0] == slot and a2.has_state.tolist() == [False]
    assert torch.count_nonzero(conv[slot]) == 0
    pool.commit(s2)


def test_released_slots_are_zero_when_handed_out_again(pool):
    ssm = pool.block("ssm", 0)
    s1 = rsp.Step(1, [("a", "main", 1)])
    slot = _run(pool, s1).slot_indices[0]
    ssm[slot] = 9.0
    pool.commit(s1)
    pool.remove_request("a")
    s2 = rsp.Step(2, [("b", "main", 1)])
    a = _run(pool, s2)
    assert a.slot_indices[0] == slot  # LIFO: the slot a gave back
    assert torch.count_nonzero(ssm[slot]) == 0
    pool.commit(s2)


def test_views_outlive_cleanup_and_the_pool_object():
    p = rsp.RecurrentStatePool("cpu", small_config())
    ssm = p.block("ssm", 0)
    s1 = rsp.Step(1, [("a", "main", 1)])
    a = _run(p, s1)
    ssm[a.slot_indices[0]] = 5.0
    p.commit(s1)
    p.cleanup()
    assert float(ssm.sum()) == 5.0 * 32  # the storage is still there
    ssm += 1  # and writable
    idx = a.slot_indices
    del p
    gc.collect()
    assert idx.tolist() == [1]  # an addressing tensor owns its copy
    assert float(ssm[1].sum()) == 6.0 * 32
    del ssm  # the last export: the storage is freed here


def test_a_pool_garbage_collected_with_live_views():
    p = rsp.RecurrentStatePool("cpu", small_config())
    views = [p.block("ssm", 0), p.block("conv", 1)]
    del p  # __del__ closes it; the views keep the storage
    gc.collect()
    views[0].fill_(2.0)
    assert float(views[0].sum()) == 2.0 * 8 * 32
    views.clear()


def test_interpreter_exit_with_live_views_and_an_open_pool():
    code = textwrap.dedent("""
        import rsp, torch
        cfg = rsp.PoolConfig(num_layers=1, blocks=[rsp.BlockSpec("ssm", (16,))], max_slots=4)
        p = rsp.RecurrentStatePool("cpu", cfg)
        v = p.block("ssm", 0)
        s = rsp.Step(1, [("a", "main", 1)])
        p.admit(s); p.plan(s)
        a = p.addressing()
        v[a.slot_indices[0]] = 1.0
        keep = [v, a, p, p.block("ssm", 0)]
        closed = rsp.RecurrentStatePool("cpu", cfg)
        w = closed.block("ssm", 0)
        closed.cleanup()
        print("done", float(v.sum()))
    """)
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["done", "16.0"]


def test_rollback_after_a_forward_wrote_a_held_slot_keeps_the_write(pool):
    # State is updated in place: a forward that raised after writing the
    # slot a request already held leaves that write, and rollback_admit
    # only frees what the admit took fresh. The documented recovery
    # (docs/python.md): reset_request(rid) (free=False) or remove_request,
    # then prefill again.
    ssm = pool.block("ssm", 0)
    s1 = rsp.Step(1, [("a", "main", 4), ("c", "main", 4)])
    a1 = _run(pool, s1)
    slot_a, slot_c = a1.host_slot_indices
    ssm[slot_a] = 1.0
    ssm[slot_c] = 2.0
    pool.commit(s1)
    s2 = rsp.Step(2, [("a", "main", 1), ("b", "main", 4), ("c", "main", 1)])
    a2 = _run(pool, s2)
    slot_b = a2.host_slot_indices[1]
    assert a2.host_has_state == [True, False, True]
    ssm[slot_a] = 7.0  # the forward writes a's and b's slots, then raises
    ssm[slot_b] = 9.0
    pool.rollback_admit(s2)
    assert pool.holding("b") is None  # b's slot was fresh: freed
    h = pool.holding("a")
    assert h.index == slot_a and h.has_state  # a keeps its slot, has_state ...
    assert torch.all(ssm[slot_a] == 7.0)  # ... and the half-step's bytes, not step 1's
    # recovery: reset a (keeps the slot, zeroes it), remove c; prefill both again
    pool.reset_request("a")
    pool.remove_request("c")
    assert not pool.holding("a").has_state and pool.holding("c") is None
    s3 = rsp.Step(3, [("a", "main", 4), ("c", "main", 4)])
    a3 = _run(pool, s3)  # waits for the plan's ready: the zeroing ran before it
    assert a3.host_has_state == [False, False]
    assert a3.host_slot_indices[0] == slot_a
    for s in a3.host_slot_indices:
        assert torch.count_nonzero(ssm[s]) == 0
    assert torch.count_nonzero(ssm[slot_b]) == 0  # rollback zeroed b's fresh slot too
    pool.commit(s3)
