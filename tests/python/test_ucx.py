# rsp.ucx (librsp_ucx from Python) between two processes: this test is the
# decode side; a child process (this file run as a script, a fresh
# interpreter: a forked child of a process that used rsp may not use it)
# is the prefill side. The prefill side fills requests with a known
# pattern through block views, exports and sends them; the decode side
# receives, checks every byte through its block views and addresses the
# request in a decode step. A caller's abort and a refused import reach the
# sender as RspError with the importer's status, and leave both pools
# consistent. Over shared memory and TCP (UCX_TLS, set before either side
# creates its transport). The child reports on stdout; this side asserts.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, "..", "..", "python"))

LAYERS = 2
# (name, dtype, shape, bytes a slot): a float block, read bytewise, and a byte block.
BLOCKS = (("conv", "float32", (4, 16), 4 * 16 * 4), ("ssm", "uint8", (512,), 512))
TIMEOUT = 20.0  # seconds, each call of either side


def _config(rsp):
    return rsp.PoolConfig(num_layers=LAYERS, max_slots=16, max_checkpoints=2,
                          blocks=[rsp.BlockSpec(n, s, d) for n, d, s, _ in BLOCKS])


def _pattern(torch, seed, b, layer, n):
    i = torch.arange(n, dtype=torch.int64)
    return ((seed * 131 + b * 17 + layer * 7 + i * 13 + (i >> 8) + 1) & 0xFF).to(torch.uint8)


def _slot_bytes(pool, slot, b, layer):
    import torch

    name, _, _, n = BLOCKS[b]
    return pool.block(name, layer)[slot].view(torch.uint8).view(n)  # the pool's memory


def _fill(pool, rid, seed):
    import torch

    slot = pool.holding(rid).index
    for b, (_, _, _, n) in enumerate(BLOCKS):
        for layer in range(LAYERS):
            _slot_bytes(pool, slot, b, layer).copy_(_pattern(torch, seed, b, layer, n))


def _wrong_bytes(pool, rid, seed):
    """How many of rid's bytes differ from seed's pattern (through block views)."""
    import torch

    slot = pool.holding(rid).index
    return sum(int((_slot_bytes(pool, slot, b, layer) != _pattern(torch, seed, b, layer, n))
                   .sum()) for b, (_, _, _, n) in enumerate(BLOCKS) for layer in range(LAYERS))


def _step(pool, sid, rid):
    import rsp

    s = rsp.Step(sid, [(rid, "main", 1)])
    assert pool.step_next(s)
    slots = pool.addressing("main").slot_indices.tolist()
    pool.commit(s)
    return slots


# --- the prefill side (a child process) ----------------------------------------

REQS = 5  # 1-3 committed, 4 aborted by the importer, 5 refused by it
CKPT = 77  # then a checkpoint of request 1's state
BATCH = (6, 7, 8, 9)  # then a batch, 8 refused by the importer
TOO_MANY = (10, 11)  # then a batch larger than the importer takes


def _prefill(fd):
    import rsp

    out = {"sent": {}}
    pool = rsp.Pool("cpu", _config(rsp))
    sock = socket.socket(fileno=fd)
    with rsp.ucx.Transport(pool) as t:
        t.connect(sock, timeout=TIMEOUT)
        every = list(range(1, REQS + 1)) + list(BATCH) + list(TOO_MANY)
        for r in every:
            _step(pool, r, r)
            _fill(pool, r, r)
        pool.checkpoint_take(CKPT, 1)
        for r in range(1, REQS + 1):
            with pool.export(rid=r, tag=1000 + r) as e:
                try:
                    t.send(e, timeout=TIMEOUT)
                    out["sent"][r] = "RSP_OK"
                except rsp.RspError as err:
                    out["sent"][r] = err.name
                    out.setdefault("messages", {})[r] = err.message
        with pool.export(key=CKPT) as e:
            t.send(e, timeout=TIMEOUT)
        for name, rids in (("batch", BATCH), ("too_many", TOO_MANY)):
            exps = [pool.export(rid=r) for r in rids]
            out[name] = [o.status for o in t.send_many(exps, timeout=TIMEOUT)]
            for e in exps:
                e.close()
        # Every export closed: each request can go (none pinned), every slot with it.
        for r in every:
            pool.remove_request(r)
        st = pool.stats()
        out["stats"] = {k: st[k] for k in ("held_slots", "free_slots", "usable_slots")}
    pool.cleanup()
    sock.close()
    print(json.dumps(out))
    return 0


# --- the decode side (pytest) ---------------------------------------------------

if __name__ != "__main__":
    import pytest

    import rsp

    needs_ucx = pytest.mark.skipif(
        not rsp.ucx.available(),
        reason=f"the UCX transport is not here: {rsp.ucx.unavailable_reason()}")

    def _spawn(tls):
        """The prefill side over one end of a socket pair; this side's end."""
        a, b = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=PKG, UCX_TLS=f"{tls},self",
                   UCX_WARN_UNUSED_ENV_VARS="n")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(b.fileno())],
                                 pass_fds=(b.fileno(),), env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        b.close()
        return child, a

    @needs_ucx
    @pytest.mark.parametrize("tls", ["sm", "tcp"])
    def test_requests_move_between_processes(tls, monkeypatch):
        monkeypatch.setenv("UCX_TLS", f"{tls},self")
        child, sock = _spawn(tls)
        pool = rsp.Pool("cpu", _config(rsp))
        usable = pool.stats()["usable_slots"]
        _step(pool, 1, 105)  # 105 holds main: its import is refused
        try:
            with rsp.ucx.Transport(pool) as t:
                t.connect(sock, timeout=TIMEOUT)
                for r in (1, 2):  # whole: receive
                    h = t.receive(100 + r, timeout=TIMEOUT)
                    assert (h.what, h.rid, h.tag) == ("request", r, 1000 + r)
                    assert [(x.label, x.has_state) for x in h.holdings] == [("main", True)]
                    assert _wrong_bytes(pool, 100 + r, r) == 0
                    slot = pool.holding(100 + r).index
                    assert _step(pool, 10 + r, 100 + r) == [slot]  # a decode step addresses it
                # In two halves: the bytes are there before the commit.
                imp = t.receive_begin(103, timeout=TIMEOUT)
                assert imp.open and imp.header.rid == 3
                assert _wrong_bytes(pool, 103, 3) == 0
                assert sum(x.length for x in imp.extents()) == LAYERS * sum(
                    n for *_, n in BLOCKS)
                assert t.receive_end(imp, timeout=TIMEOUT) is True
                assert not imp.open
                assert _step(pool, 13, 103) == [pool.holding(103).index]
                # The importer's abort: the sender gets its status.
                imp = t.receive_begin(104, timeout=TIMEOUT)
                assert t.receive_end(imp, ok=False, status="RSP_ECAPACITY",
                                     timeout=TIMEOUT) is False
                assert pool.holding(104) is None
                # A refused import (105 already holds main): RSP_EINVAL on both sides.
                with pytest.raises(rsp.RspError) as err:
                    t.receive(105, timeout=TIMEOUT)
                assert err.value.name == "RSP_EINVAL"
                # A checkpoint's offer lands under its key (the rid is not used).
                h = t.receive("unused", timeout=TIMEOUT)
                assert (h.what, h.key) == ("checkpoint", CKPT)
                assert pool.checkpoint_info(CKPT).tier == "device"
                s = rsp.Step(20, [("y", "main", 1)], restores=[("y", "main", CKPT)])
                assert pool.step_next(s)
                pool.commit(s)
                assert _wrong_bytes(pool, "y", 1) == 0
                # A batch: one offer, each request whole or refused alone.
                _step(pool, 21, 108)
                got = t.receive_many([100 + r for r in BATCH], timeout=TIMEOUT)
                assert [o.status for o in got] == ["RSP_OK", "RSP_OK", "RSP_EINVAL", "RSP_OK"]
                assert [o.header.rid for o in got] == list(BATCH)
                for r in (6, 7, 9):
                    assert _wrong_bytes(pool, 100 + r, r) == 0
                s = rsp.Step(22, [(100 + r, "main", 1) for r in (6, 7, 9)])
                assert pool.step_next(s)
                assert pool.addressing("main").slot_indices.tolist() == [
                    pool.holding(100 + r).index for r in (6, 7, 9)]
                pool.commit(s)
                # An offer larger than the rids given: refused whole.
                with pytest.raises(rsp.RspError) as err:
                    t.receive_many(["z"], timeout=TIMEOUT)
                assert err.value.name == "RSP_ECAPACITY"
            out, errs = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            sock.close()
        assert child.returncode == 0, errs
        rep = json.loads(out.splitlines()[-1])  # UCX may log to stdout before it
        assert rep["sent"] == {"1": "RSP_OK", "2": "RSP_OK", "3": "RSP_OK",
                               "4": "RSP_ECAPACITY", "5": "RSP_EINVAL"}
        assert rep["batch"] == ["RSP_OK", "RSP_OK", "RSP_EINVAL", "RSP_OK"]
        assert rep["too_many"] == ["RSP_ECAPACITY", "RSP_ECAPACITY"]
        assert "refused" in rep["messages"]["5"]
        # The prefill pool: nothing pinned (every request removed), every slot free.
        assert rep["stats"]["held_slots"] == 0
        assert rep["stats"]["free_slots"] == rep["stats"]["usable_slots"]
        # The decode pool: 101-103, 105, y and 106-109 hold a slot each, no
        # import left open.
        st = pool.stats()
        assert st["held_slots"] == 9 and st["free_slots"] == usable - 9
        assert pool.holding("z") is None
        for r in (1, 2, 3, 6, 7, 9):
            assert _wrong_bytes(pool, 100 + r, r) == 0
        pool.cleanup()

    @needs_ucx
    def test_bad_arguments_are_named():
        p, q = rsp.Pool("cpu", _config(rsp)), rsp.Pool("cpu", _config(rsp))
        with pytest.raises(TypeError, match="pool"):
            rsp.ucx.Transport("p")
        t = rsp.ucx.Transport(p)
        with pytest.raises(TypeError, match="sock"):
            t.connect("fd")
        with pytest.raises(ValueError, match="sock"):
            t.connect(-1)
        a, b = socket.socketpair()
        with pytest.raises(TypeError, match="timeout"):
            t.connect(a, timeout="1")
        with pytest.raises(ValueError, match="timeout"):
            t.connect(a, timeout=-1)
        with pytest.raises(TypeError, match="export"):
            t.send(b"header")
        _step(q, 1, "r")
        with q.export(rid="r") as e:
            with pytest.raises(ValueError, match="another pool"):
                t.send(e)
        _step(p, 1, "r")
        with p.export(rid="r") as e:
            with pytest.raises(rsp.RspError) as err:
                t.send(e, timeout=0)
            assert err.value.name == "RSP_EINVAL" and "not connected" in err.value.message
        with pytest.raises(TypeError, match="request id"):
            t.receive(1.5)
        with pytest.raises(ValueError, match="seq_begin"):
            t.receive("x", seq_begin=-1)
        with pytest.raises(TypeError, match="imp"):
            t.receive_end(object())
        with p.export(rid="r") as e:
            with pytest.raises(TypeError, match="exports"):
                t.send_many(e)
            with pytest.raises(TypeError, match=r"exports\[1\]"):
                t.send_many([e, "x"])
            with pytest.raises(ValueError, match="exports"):
                t.send_many([])
            with pytest.raises(rsp.RspError) as err:
                t.send_many([e, e], timeout=0)
            assert "not connected" in err.value.message
        with pytest.raises(ValueError, match="rids"):
            t.receive_many([])
        with pytest.raises(TypeError, match=r"rids\[1\]"):
            t.receive_many(["a", 1.5])
        with pytest.raises(TypeError, match="seqs"):
            t.receive_many(["a"], seqs=[1])
        with pytest.raises(ValueError, match=r"seqs\[0\]\[1\]"):
            t.receive_many(["a"], seqs=[(1, -2)])
        t.close()
        t.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            t.receive("x")
        # A transport left open is destroyed by its pool's cleanup, before the pool.
        u = rsp.ucx.Transport(p)
        p.cleanup()
        assert u.closed
        a.close()
        b.close()
        q.cleanup()

    @needs_ucx
    def test_a_second_thread_is_refused():
        """Not thread-safe: a call while another thread's runs is refused
        (RuntimeError), never run beside it. The main thread runs at all
        while the other blocks in the C connect because ctypes released
        the GIL (held, this test would hang until the connect's timeout)."""
        import threading

        p = rsp.Pool("cpu", _config(rsp))
        a, b = socket.socketpair()
        got = []
        with rsp.ucx.Transport(p) as t:
            # No peer answers on b: the connect blocks until b is closed.
            th = threading.Thread(target=lambda: got.append(_raised(t.connect, a, timeout=60)))
            th.start()
            while not t._busy.locked():
                th.join(0.001)
            with pytest.raises(RuntimeError, match="not thread-safe"):
                t.receive("x")
            b.close()  # the peer goes: the connect fails
            th.join()
        assert [type(e).__name__ for e in got] == ["RspError"] and got[0].name == "RSP_EDEVICE"
        a.close()
        p.cleanup()

    @needs_ucx
    def test_no_answer_raises():
        """A peer that goes before it answers: send and send_many raise
        RspError RSP_EDEVICE (the exporter cannot know more), nothing else
        changes; the exports close and their requests can go."""
        import threading

        p, q = rsp.Pool("cpu", _config(rsp)), rsp.Pool("cpu", _config(rsp))
        a, b = socket.socketpair()
        t, u = rsp.ucx.Transport(p), rsp.ucx.Transport(q)
        th = threading.Thread(target=u.connect, args=(b,), kwargs={"timeout": TIMEOUT})
        th.start()
        t.connect(a, timeout=TIMEOUT)
        th.join()
        u.close()
        b.close()  # the peer goes
        for r in ("r", "s"):
            _step(p, 1 if r == "r" else 2, r)
        with p.export(rid="r") as e, p.export(rid="s") as f:
            for call in (lambda: t.send(e, timeout=TIMEOUT),
                         lambda: t.send_many([e, f], timeout=TIMEOUT)):
                with pytest.raises(rsp.RspError) as err:
                    call()
                assert err.value.name == "RSP_EDEVICE"
        p.remove_request("r")  # closed: not pinned
        p.remove_request("s")
        assert p.stats()["held_slots"] == 0
        t.close()
        a.close()
        p.cleanup()
        q.cleanup()

    def _raised(fn, *args, **kw):
        try:
            fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 (recorded for the main thread to assert)
            return e
        return None

    def test_without_librsp_ucx(monkeypatch):
        """available() is False and a Transport is a RuntimeError naming the
        library; the package itself imports and works."""
        monkeypatch.setenv("RSP_UCX_LIBRARY", "/nonexistent/librsp_ucx.so")
        monkeypatch.setattr(rsp.ucx, "_state", None)
        assert rsp.ucx.available() is False
        assert "librsp_ucx" in rsp.ucx.unavailable_reason()
        p = rsp.Pool("cpu", _config(rsp))
        with pytest.raises(RuntimeError, match="librsp_ucx"):
            rsp.ucx.Transport(p)
        p.cleanup()

else:
    sys.exit(_prefill(int(sys.argv[1])))
