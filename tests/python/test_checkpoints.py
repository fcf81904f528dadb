# Checkpoints (taken in a step and by message, restored in a step, pinned,
# dropped, queried, looked up without a message) and swap out / swap in,
# through the package, with the bytes checked through block() views.
# SPDX-License-Identifier: Apache-2.0
import threading

import pytest

import rsp
from conftest import small_config


def _pool(**kw):
    kw.setdefault("max_checkpoints", 2)
    kw.setdefault("max_host_checkpoints", 2)
    return rsp.RecurrentStatePool("cpu", small_config(**kw))


def _fill(pool, addressing, value):
    """A forward: every block of every layer of the addressed rows := value."""
    idx = addressing.slot_indices.long()
    for name in ("ssm", "conv"):
        for layer in range(2):
            pool.block(name, layer)[idx] = value


def _state(pool, slot):
    return [pool.block(n, layer)[slot].clone() for n in ("ssm", "conv") for layer in range(2)]


def _is(pool, slot, value):
    return all(bool((t == value).all()) for t in _state(pool, slot))


def test_a_step_takes_a_checkpoint_at_commit_and_a_later_step_restores_it():
    p = _pool()
    s1 = rsp.Step(1, [("a", "main", 4)], checkpoints=[rsp.Checkpoint("a", "main", 0xABC)])
    assert p.step_next(s1)
    _fill(p, p.addressing(), 3.0)
    assert p.checkpoint_info(0xABC) is None  # taken at the commit, not before
    p.commit(s1)
    info = p.checkpoint_info(0xABC)
    assert info.tier == "device" and info.key == 0xABC
    assert info.slot >= p.max_slots  # checkpoint slots come after the request slots (not
    # in the block views, which hold the request slots)
    assert info.bytes == p.info()["slot_bytes"] and info.pins == 0 and info.user_pins == 0
    _fill(p, p.addressing(), 9.0)  # a's slot moves on; the checkpoint does not
    # b starts from the checkpoint: has_state, and a's bytes as the commit left them
    s2 = rsp.Step(2, [("b", "main", 1)], restores=[("b", "main", 0xABC)])
    assert p.step_next(s2)
    b = p.addressing()
    assert b.host_has_state == [True]
    assert _is(p, b.host_slot_indices[0], 3.0)
    assert p.checkpoint_info(0xABC).pins == 1  # the step in flight pins it
    with pytest.raises(rsp.RspError) as e:
        p.checkpoint_drop(0xABC)
    assert e.value.name == "RSP_EPINNED"
    p.commit(s2)
    assert p.checkpoint_info(0xABC).pins == 0
    s = p.stats()
    assert s["checkpoints_taken"] == 1 and s["checkpoints_restored"] == 1
    assert s["checkpoints_device"] == 1
    p.checkpoint_drop(0xABC)
    assert p.checkpoint_info(0xABC) is None and p.stats()["checkpoints_dropped"] == 1
    p.cleanup()


def _restored(pool, step_id, key):
    """The state a fresh request starts from when its step restores key."""
    rid = f"from-{key}-{step_id}"
    st = rsp.Step(step_id, [(rid, "main", 1)], restores=[(rid, "main", key)])
    assert pool.step_next(st)
    a = pool.addressing()
    assert a.host_has_state == [True]
    out = _state(pool, a.host_slot_indices[0])
    pool.commit(st)
    pool.remove_request(rid)
    return out


def test_a_take_by_message_copies_the_slot_now_or_after_a_committed_step():
    p = _pool()
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert p.step_next(s1)
    _fill(p, p.addressing(), 2.0)
    # step 1 is in flight: its state is taken in the step, not by message
    for after in (1, 5):  # in flight, not admitted yet
        with pytest.raises(rsp.RspError) as e:
            p.checkpoint_take(7, "a", after_step=after)
        assert e.value.name == "RSP_EORDER", e.value
    assert p.checkpoint_info(7) is None
    p.commit(s1)
    p.checkpoint_take(7, "a", after_step=1)
    p.checkpoint_take(8, "a", "main", "host")
    assert p.checkpoint_info(7).tier == "device" and p.checkpoint_info(8).tier == "host"
    assert all(bool((t == 2.0).all()) for t in _restored(p, 2, 7) + _restored(p, 3, 8))
    # a key that exists is replaced (counted as a drop)
    s4 = rsp.Step(4, [("a", "main", 1)])
    assert p.step_next(s4)
    _fill(p, p.addressing(), 4.0)
    p.commit(s4)
    p.checkpoint_take(7, "a")
    assert all(bool((t == 4.0).all()) for t in _restored(p, 5, 7))
    s = p.stats()
    assert s["checkpoints_taken"] == 3 and s["checkpoints_dropped"] == 1
    assert s["checkpoints_restored"] == 3
    assert s["checkpoints_device"] == 1 and s["checkpoints_host"] == 1
    p.cleanup()


def test_pins_count_and_keep_a_checkpoint_from_drop_and_replace():
    p = _pool()
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert p.step_next(s1)
    p.commit(s1)
    p.checkpoint_take(1, "a")
    p.checkpoint_pin(1)
    p.checkpoint_pin(1)
    assert p.checkpoint_info(1).user_pins == 2
    for call in (lambda: p.checkpoint_drop(1), lambda: p.checkpoint_take(1, "a")):
        with pytest.raises(rsp.RspError) as e:
            call()
        assert e.value.name == "RSP_EPINNED" and "key 1" in e.value.message
    p.checkpoint_unpin(1)
    with pytest.raises(rsp.RspError):
        p.checkpoint_drop(1)  # still one pin
    p.checkpoint_unpin(1)
    with pytest.raises(rsp.RspError) as e:
        p.checkpoint_unpin(1)  # no pin left: nothing to undo
    assert e.value.name == "RSP_EINVAL"
    p.checkpoint_drop(1)
    # a full tier of pinned checkpoints refuses a take by message
    p.checkpoint_take(2, "a")
    p.checkpoint_take(3, "a")
    p.checkpoint_pin(2)
    p.checkpoint_pin(3)
    with pytest.raises(rsp.RspError) as e:
        p.checkpoint_take(4, "a")
    assert e.value.name == "RSP_ECAPACITY"
    assert p.checkpoint_info(4) is None and p.stats()["checkpoints_device"] == 2
    p.cleanup()


def test_checkpoint_failures_change_nothing_and_name_the_problem():
    p = _pool(max_host_checkpoints=0)
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert p.step_next(s1)
    p.commit(s1)
    before = p.stats()
    for call, name in [
        (lambda: p.checkpoint_drop(99), "RSP_ENOKEY"),
        (lambda: p.checkpoint_pin(99), "RSP_ENOKEY"),
        (lambda: p.checkpoint_unpin(99), "RSP_ENOKEY"),
        (lambda: p.checkpoint_take(1, "nobody"), "RSP_ENOREQ"),  # holds no slot
        (lambda: p.checkpoint_take(1, "a", tier="host"), "RSP_EINVAL"),  # no host tier
        (lambda: p.swap_out("a"), "RSP_ECAPACITY"),  # no host tier either
        # a restore of a key that is not stored: refused at admit
        (lambda: p.admit(rsp.Step(2, [("c", "main", 1)], restores=[("c", "main", 77)])),
         "RSP_ENOKEY"),
    ]:
        with pytest.raises(rsp.RspError) as e:
            call()
        assert e.value.name == name, (name, e.value)
    # a label no step has named: RSP_ENOLABEL, and it is not interned
    for i in range(70):  # more than the pool's 64 label ids
        with pytest.raises(rsp.RspError) as e:
            p.checkpoint_take(1, "a", f"typo{i}")
        assert e.value.name == "RSP_ENOLABEL" and f"typo{i}" in e.value.message
    after = p.stats()
    for k in ("checkpoints_taken", "checkpoints_device", "checkpoints_host", "admits_ok",
              "free_slots", "swaps_out"):
        assert after[k] == before[k], k
    assert p.holding("a").has_state
    p.cleanup()


def test_malformed_checkpoint_arguments_are_named():
    p = _pool()

    def refused(exc, match, call):
        with pytest.raises(exc, match=match):
            call()

    refused(ValueError, r"key -1 is not in", lambda: p.checkpoint_take(-1, "a"))
    refused(TypeError, r"key must be an int, not float", lambda: p.checkpoint_drop(1.0))
    refused(ValueError, r"key 18446744073709551616", lambda: p.checkpoint_pin(2**64))
    refused(TypeError, r"key must be an int", lambda: p.checkpoint_unpin("1"))
    refused(TypeError, r"key must be an int", lambda: p.checkpoint_info(None))
    refused(TypeError, r"key must be an int", lambda: p.checkpoint_lookup(None))
    refused(ValueError, r"tier 'gpu' is not 'device' or 'host'",
            lambda: p.checkpoint_take(1, "a", tier="gpu"))
    refused(TypeError, r"tier must be 'device' or 'host', not int",
            lambda: p.checkpoint_take(1, "a", tier=1))
    refused(ValueError, r"after_step -1", lambda: p.checkpoint_take(1, "a", after_step=-1))
    refused(TypeError, r"request id must be a str or an int", lambda: p.checkpoint_take(1, 1.5))
    refused(TypeError, r"request id must be", lambda: p.swap_out(None))
    refused(ValueError, r"request id -1", lambda: p.swap_in(-1))
    row = [("a", "main", 1)]
    for kw, exc, match in [
        (dict(checkpoints=[("a", "main")]), TypeError, r"checkpoints\[0\]: Checkpoint\(rid"),
        (dict(checkpoints=["abc"]), TypeError, r"checkpoints\[0\]: Checkpoint"),
        (dict(checkpoints=[("a", "main", 1), ("a", "main", 2, "gpu")]), ValueError,
         r"checkpoints\[1\]: tier 'gpu'"),
        (dict(checkpoints=[("a", "main", -1)]), ValueError, r"checkpoints\[0\]: key -1"),
        (dict(checkpoints=[(1.5, "main", 1)]), TypeError, r"checkpoints\[0\]: request id"),
        (dict(checkpoints=[("a", None, 1)]), TypeError, r"checkpoints\[0\]: label must be a str"),
        (dict(checkpoints=rsp.Checkpoint("a", "main", 1)), TypeError,
         r"checkpoints must be a list of Checkpoint, not Checkpoint"),
        (dict(restores=[("a", "main", 1, "host")]), TypeError, r"restores\[0\]: Restore\(rid"),
        (dict(restores=[("a", "main", 1.0)]), TypeError, r"restores\[0\]: key must be an int"),
        (dict(restores={"a": 1}), TypeError, r"restores must be a list of Restore, not dict"),
    ]:
        refused(exc, match, lambda: p.admit(rsp.Step(1, row, **kw)))
    assert p.stats()["admits_ok"] == 0 and p.num_free_slots == 7  # nothing reached rsp
    p.cleanup()


def test_a_declared_take_must_name_a_row_of_the_step():
    p = _pool()
    with pytest.raises(rsp.RspError) as e:
        p.admit(rsp.Step(1, [("a", "main", 1)], checkpoints=[("b", "main", 5)]))
    assert e.value.name == "RSP_EINVAL"
    s1 = rsp.Step(1, [("a", "main", 1)], checkpoints=[("a", "main", 5)])
    assert p.step_next(s1)
    p.commit(s1)
    with pytest.raises(rsp.RspError) as e:
        p.admit(rsp.Step(2, [("b", "main", 0)], restores=[("b", "main", 5)]))  # span 0
    assert e.value.name == "RSP_EINVAL", e.value
    assert p.stats()["admits_ok"] == 1 and p.checkpoint_info(5).pins == 0
    p.cleanup()


def test_lookup_answers_without_a_message_from_any_thread():
    p = _pool()
    s1 = rsp.Step(1, [("a", "main", 1)], checkpoints=[("a", "main", 5, "host")])
    assert p.step_next(s1)
    p.commit(s1)
    handled = p.stats()["messages_handled"]
    seen = []

    def look():
        for key in (5, 6):
            seen.append(p.checkpoint_lookup(key))

    t = threading.Thread(target=look)
    t.start()
    t.join()
    look()
    assert seen[0] == rsp.CheckpointLoc(5, "host", p.checkpoint_info(5).slot) == seen[2]
    assert seen[1] is None and seen[3] is None
    # the lookups sent nothing: only the stats message and the query were handled since
    assert p.stats()["messages_handled"] == handled + 2
    p.cleanup()


def test_swap_out_and_in_keeps_the_state_and_refuses_steps_between():
    p = _pool(max_slots=3)  # 2 usable request slots
    s1 = rsp.Step(1, [("a", "main", 1), ("a", "draft", 1)])
    assert p.step_next(s1)
    _fill(p, p.addressing("main"), 5.0)
    _fill(p, p.addressing("draft"), 6.0)
    p.commit(s1)
    p.swap_out("a")
    assert p.holding("a") is None and p.holding("a", "draft") is None
    s = p.stats()
    assert s["swaps_out"] == 1 and s["swapped_slots"] == 2 and s["free_slots"] == 2
    assert s["num_requests"] == 1  # still a request
    with pytest.raises(rsp.RspError) as e:
        p.step_next(rsp.Step(2, [("a", "main", 1)]))
    assert e.value.name == "RSP_EORDER" and "swapped out" in e.value.message
    with pytest.raises(rsp.RspError) as e:
        p.swap_out("a")
    assert e.value.name == "RSP_EORDER"
    # the pool fills up meanwhile: swap_in is refused as a full admit, nothing changed
    s3 = rsp.Step(3, [("b", "main", 1), ("c", "main", 1)])
    assert p.step_next(s3)
    p.commit(s3)
    out = p.swap_in("a")
    assert not out and out.rid == "a" and out.slots_short == 2 and out.free == 0
    assert out.label in ("main", "draft")
    assert p.stats()["swapped_slots"] == 2
    p.remove_many(["b", "c"])
    out = p.swap_in("a")
    assert out.ok
    for label, value in (("main", 5.0), ("draft", 6.0)):
        h = p.holding("a", label)
        assert h.has_state and _is(p, h.index, value)
    s = p.stats()
    assert s["swaps_in"] == 1 and s["swapped_slots"] == 0
    with pytest.raises(rsp.RspError) as e:
        p.swap_in("a")
    assert e.value.name == "RSP_EORDER"
    with pytest.raises(rsp.RspError) as e:
        p.swap_in("nobody")
    assert e.value.name == "RSP_ENOREQ"
    s4 = rsp.Step(4, [("a", "main", 1)])
    assert p.step_next(s4)
    assert p.addressing().host_has_state == [True]
    p.commit(s4)
    p.cleanup()


def test_a_request_holding_nothing_swaps_out_and_in_too():
    p = _pool()
    p.ingest_request("idle")
    p.swap_out("idle")
    with pytest.raises(rsp.RspError) as e:
        p.admit(rsp.Step(1, [("idle", "main", 1)]))
    assert e.value.name == "RSP_EORDER"
    assert p.swap_in("idle").ok
    assert p.admit(rsp.Step(1, [("idle", "main", 1)]))
    p.rollback_admit(rsp.Step(1))
    p.cleanup()
