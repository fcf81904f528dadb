# The pool's Python callbacks (PoolConfig.on_error, on_checkpoint_evict):
# what they are told, on which thread, and that what they raise or a pool
# call they make is caught, kept and counted, never crossing into librsp.
# SPDX-License-Identifier: Apache-2.0
import gc
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import rsp
from conftest import PKG, small_config


def _committed(pool, sid, rid="a", **kw):
    step = rsp.Step(sid, [(rid, "main", 1)], **kw)
    assert pool.step_next(step)
    pool.commit(step)


@pytest.mark.parametrize("inline", ["1", "0"])
def test_evictions_and_demotions_are_reported_on_the_thread_in_the_owners_role(
        inline, monkeypatch):
    # RSP_INLINE_CALLS=0: every message is handled on the owner thread; by
    # default a synchronous call that finds the owner asleep runs in its
    # role on the caller's thread, callbacks included.
    monkeypatch.setenv("RSP_INLINE_CALLS", inline)
    events, threads = [], []

    def on_evict(ev):
        events.append(ev)
        threads.append(threading.get_ident())

    p = rsp.RecurrentStatePool("cpu", small_config(
        max_checkpoints=1, max_host_checkpoints=1, checkpoint_demote=True,
        on_checkpoint_evict=on_evict))
    _committed(p, 1)
    p.checkpoint_take(1, "a")
    assert events == []
    p.checkpoint_take(2, "a")  # the device tier is full: 1 moves to the host tier
    assert events == [rsp.CheckpointEvent(1, "device", True)]
    assert p.checkpoint_info(1).tier == "host"
    p.checkpoint_take(3, "a")  # 2 is demoted, which evicts 1 from the full host tier
    assert events[1:] == [rsp.CheckpointEvent(1, "host", False),
                          rsp.CheckpointEvent(2, "device", True)]
    assert p.checkpoint_info(1) is None and p.checkpoint_info(2).tier == "host"
    s = p.stats()
    assert s["checkpoints_evicted"] == 1 and s["checkpoints_demoted"] == 2
    others = set(threads) - {threading.get_ident()}
    if inline == "0":
        assert threading.get_ident() not in threads and len(others) == 1
    else:
        assert len(others) <= 1  # the owner thread, when it was awake
    assert p.callback_exceptions == 0 and p.callback_exception is None
    p.cleanup()


def test_a_take_a_commit_skips_goes_to_on_error_and_the_commit_stands():
    failures = []
    p = rsp.RecurrentStatePool("cpu", small_config(max_checkpoints=1,
                                                   on_error=failures.append))
    _committed(p, 1)
    p.checkpoint_take(1, "a")
    p.checkpoint_pin(1)  # the only device slot, pinned: no room for another
    _committed(p, 2, checkpoints=[("a", "main", 2)])
    assert len(failures) == 1
    f = failures[0]
    assert isinstance(f, rsp.Failure)
    assert f.name == "RSP_ECAPACITY" and f.kind == "commit" and f.step_id == 2
    assert "key 2" in f.message and "skipped" in f.message
    s = p.stats()
    assert s["checkpoints_skipped"] == 1 and s["commits"] == 2
    assert s["posts_failed"] == 0  # a skipped take is counted apart
    assert p.checkpoint_info(2) is None and p.holding("a").has_state
    # a step_next's commit reports it under the STEP message
    s3 = rsp.Step(3, [("a", "main", 1)], checkpoints=[("a", "main", 3)])
    assert p.step_next(s3)
    assert p.step_next(rsp.Step(4, [("a", "main", 1)]), prev=s3)
    assert failures[1].kind == "step" and failures[1].step_id == 3
    p.cleanup()


def test_what_a_callback_raises_is_caught_counted_and_kept(capfd):
    def on_error(f):
        raise ValueError(f"on_error saw {f.name}")

    def on_evict(ev):
        raise KeyError(ev.key)

    p = rsp.RecurrentStatePool("cpu", small_config(max_checkpoints=1, on_error=on_error,
                                                   on_checkpoint_evict=on_evict))
    _committed(p, 1)
    p.checkpoint_take(1, "a")
    p.checkpoint_take(2, "a")  # evicts 1: on_evict raises
    assert p.callback_exceptions == 1
    first = p.callback_exception
    assert isinstance(first, KeyError) and first.args == (1,)
    p.checkpoint_pin(2)
    _committed(p, 2, checkpoints=[("a", "main", 3)])  # skipped: on_error raises
    assert p.callback_exceptions == 2 and p.callback_exception is first
    err = capfd.readouterr().err
    assert err.count("rsp: the pool's") == 1  # the first is said, later ones counted
    assert "on_checkpoint_evict callback raised KeyError" in err
    # the pool goes on: the eviction and the commit stood
    s = p.stats()
    assert s["checkpoints_evicted"] == 1 and s["checkpoints_skipped"] == 1 and s["commits"] == 2
    p.cleanup()


def test_a_callback_that_calls_the_pool_is_refused_instead_of_deadlocking():
    # in a child: were the call not refused, the owner would wait for itself
    # and the child would hang (the timeout fails the test)
    code = textwrap.dedent("""
        import rsp
        seen = []

        def on_evict(ev):
            for call in (p.stats, p.cleanup, lambda: p.ingest_request("x"),
                         lambda: p.checkpoint_lookup(ev.key)):
                try:
                    call()
                    seen.append("no error")
                except rsp.RspError as e:
                    seen.append(e)
            p.stats()  # raised out of the callback: caught and kept

        cfg = rsp.PoolConfig(1, [rsp.BlockSpec("ssm", (4,))], 4, max_checkpoints=1,
                             on_checkpoint_evict=on_evict)
        p = rsp.RecurrentStatePool("cpu", cfg)
        s = rsp.Step(1, [("a", "main", 1)])
        p.step_next(s)
        p.commit(s)
        p.checkpoint_take(1, "a")
        p.checkpoint_take(2, "a")
        assert len(seen) == 4, seen
        for e in seen:
            assert isinstance(e, rsp.RspError) and e.name == "RSP_EINVAL", e
        assert "owner thread" in seen[0].message and "callbacks" in seen[1].message
        assert p.callback_exceptions == 1 and "owner thread" in str(p.callback_exception)
        # the calling thread is not refused, and the pool is intact
        assert p.stats()["num_requests"] == 1 and p.checkpoint_info(2) is not None
        p.cleanup()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=PKG),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_bad_callbacks_and_ordering_config_are_named():
    for kw, exc, match in [
        (dict(on_error=5), TypeError, r"on_error must be a callable or None, not int"),
        (dict(on_checkpoint_evict="f"), TypeError, r"on_checkpoint_evict must be a callable"),
        (dict(ordered=1), TypeError, r"ordered must be a bool, not int"),
        (dict(reorder_timeout_ns=-1), ValueError, r"reorder_timeout_ns -1"),
    ]:
        with pytest.raises(exc, match=match):
            rsp.RecurrentStatePool("cpu", small_config(**kw))


def test_a_pool_with_callbacks_gives_its_reference_back_when_closed():
    p = rsp.RecurrentStatePool("cpu", small_config(on_error=lambda f: None))
    hooks = p._hooks
    held = sys.getrefcount(hooks)
    p.cleanup()
    assert sys.getrefcount(hooks) == held - 1  # the pool's own reference, given back
    p.cleanup()  # twice: given back once
    assert sys.getrefcount(hooks) == held - 1
    # collected without cleanup(): the finaliser closes it
    q = rsp.RecurrentStatePool("cpu", small_config(on_error=lambda f: None))
    hooks = q._hooks
    held = sys.getrefcount(hooks)
    del q
    gc.collect()
    assert sys.getrefcount(hooks) == held - 2  # the pool's attribute and its reference


def test_a_pool_with_callbacks_left_open_at_exit_does_not_crash():
    code = textwrap.dedent("""
        import rsp
        cfg = rsp.PoolConfig(1, [rsp.BlockSpec("ssm", (4,))], 4, max_checkpoints=1,
                             on_error=print, on_checkpoint_evict=print)
        p = rsp.RecurrentStatePool("cpu", cfg)
        s = rsp.Step(1, [("a", "main", 1)])
        p.step_next(s)
        p.commit(s)
        p.checkpoint_take(1, "a")
        p.checkpoint_take(2, "a")
        keep = p  # alive at exit
        print("done")
    """)
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=PKG),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "CheckpointEvent(key=1, tier='device', demoted=False)" in r.stdout
    assert r.stdout.strip().endswith("done")
