# Export and import through the package (docs/python.md "Export and
# import"): two pools in one process, the bytes carried by ctypes.memmove
# between their regions, every byte compared.
# SPDX-License-Identifier: Apache-2.0
import ctypes
import gc

import pytest

import rsp
from conftest import small_config


def _pool(**kw):
    kw.setdefault("max_checkpoints", 2)
    return rsp.Pool("cpu", small_config(**kw))


def _step(p, sid, rid, restores=()):
    s = rsp.Step(sid, [(rid, "main", 1)], restores=list(restores))
    assert p.step_next(s)
    p.commit(s)


def _paint(p, extents, seed):
    """A forward: the extents' bytes := a pattern of seed."""
    regions = p.regions()
    for i, x in enumerate(extents):
        data = bytes((seed + 7 * i + k) & 0xFF for k in range(x.length))
        ctypes.memmove(regions[x.region].base + x.offset, data, x.length)


def _read(p, extents):
    regions = p.regions()
    return [ctypes.string_at(regions[x.region].base + x.offset, x.length) for x in extents]


def _carry(src, exp, dst, imp, src_world=1, src_rank=0):
    """The transport: every exported extent into its paired import extent."""
    sr, dr = src.regions(), dst.regions()
    to = imp.extents(src_world, src_rank)
    assert [x.length for x in to] == [x.length for x in exp.extents]
    for f, t in zip(exp.extents, to):
        ctypes.memmove(dr[t.region].base + t.offset, sr[f.region].base + f.offset, f.length)
    return to


def test_regions_cover_the_blocks():
    p = _pool()
    r = p.regions()
    assert [(x.block, x.space) for x in r] == [
        ("ssm", "slots"), ("conv", "slots"), ("ssm", "device_tier"), ("conv", "device_tier")]
    assert all(x.memory == "host" and x.base and x.length > 0 for x in r)
    assert r[0].length == 8 * 2 * 4 * 8 * 4  # slots x layers x (4, 8) float32
    p.cleanup()


def test_a_request_moves_between_two_pools():
    a, b = _pool(), _pool()
    _step(a, 1, "r")
    with a.export(rid="r", tag=5) as e:
        _paint(a, e.extents, 3)
        f = e.fields
        assert f.what == "request" and f.tag == 5
        assert [(h.label, h.has_state) for h in f.holdings] == [("main", True)]
        with pytest.raises(rsp.RspError) as err:
            a.remove_request("r")
        assert err.value.name == "RSP_EPINNED"
        with b.import_begin(e.header, rid="x") as imp:
            assert b.holding("x") is not None  # reserved, not yet addressable
            to = _carry(a, e, b, imp)
            imp.commit()
        assert not imp.open
        assert b.holding("x").has_state
        assert _read(b, to) == _read(a, e.extents)
    a.remove_request("r")  # closed: unpinned
    _step(b, 1, "x")  # an ordinary request now
    a.cleanup()
    b.cleanup()


def test_an_import_left_uncommitted_is_aborted():
    a, b = _pool(), _pool()
    _step(a, 1, "r")
    free = b.num_free_slots
    with a.export(rid="r") as e:
        with pytest.raises(RuntimeError):
            with b.import_begin(e.header, rid="x") as imp:
                _carry(a, e, b, imp)
                raise RuntimeError("the transport failed")
        assert not imp.open
    assert b.holding("x") is None
    assert b.num_free_slots == free
    a.cleanup()
    b.cleanup()


def test_a_checkpoint_moves_between_two_pools():
    a, b = _pool(), _pool()
    _step(a, 1, "r")
    a.checkpoint_take(0xAB, "r")
    with a.export(key=0xAB) as e:
        _paint(a, e.extents, 9)  # the checkpoint's bytes
        want = _read(a, e.extents)
        assert e.fields.what == "checkpoint" and e.fields.key == 0xAB
        imp = b.import_begin(e.header)
        assert imp.what == "checkpoint"
        assert b.checkpoint_info(0xAB) is None  # invisible until the commit
        _carry(a, e, b, imp)
        imp.commit()
    assert b.checkpoint_info(0xAB).tier == "device"
    _step(b, 1, "y", restores=[("y", "main", 0xAB)])
    with b.export(rid="y") as got:
        assert _read(b, got.extents) == want
    a.cleanup()
    b.cleanup()


def test_bad_arguments_are_named():
    a, b = _pool(), rsp.Pool("cpu", small_config(layers=3))
    _step(a, 1, "r")
    with pytest.raises(ValueError, match="exactly one of rid and key"):
        a.export()
    with pytest.raises(ValueError, match="exactly one of rid and key"):
        a.export(rid="r", key=1)
    with pytest.raises(TypeError, match="labels"):
        a.export(rid="r", labels="main")
    with pytest.raises(ValueError, match="tag"):
        a.export(rid="r", tag=-1)
    with pytest.raises(TypeError, match="header must be bytes"):
        b.import_begin("header", rid="x")
    with pytest.raises(ValueError, match="bytes, not the"):
        b.import_begin(b"short", rid="x")
    with a.export(rid="r") as e:
        with pytest.raises(ValueError, match="needs rid"):
            b.import_begin(e.header)
        with pytest.raises(rsp.RspError) as err:
            b.import_begin(e.header, rid="x")
        assert err.value.name == "RSP_EINVAL" and "num_layers 3 here, 2" in err.value.message
    with pytest.raises(rsp.RspError) as err:
        a.export(key=77)
    assert err.value.name == "RSP_ENOKEY"
    a.cleanup()
    b.cleanup()


def test_cleanup_closes_and_aborts_what_is_open():
    a, b = _pool(), _pool()
    _step(a, 1, "r")
    e = a.export(rid="r")
    imp = b.import_begin(e.header, rid="x")
    b.cleanup()
    assert not imp.open
    imp.abort()  # a no-op now
    a.cleanup()
    e.close()  # a no-op now


def test_a_dropped_export_stays_open_until_closed_or_cleanup():
    a = _pool()
    _step(a, 1, "r")
    a.export(rid="r")  # dropped at once: the pool keeps it open
    gc.collect()
    with pytest.raises(rsp.RspError) as err:
        a.remove_request("r")
    assert err.value.name == "RSP_EPINNED"
    a.cleanup()  # closes it, then the pool
