# Every method of RecurrentStatePool, its answers and its failures.
# SPDX-License-Identifier: Apache-2.0
import hashlib
import os
import subprocess
import sys
import threading

import pytest
import torch

import rsp
from conftest import PKG, small_config


def test_config_and_properties(pool):
    assert pool.pad_index == 0
    assert pool.max_slots == 8
    assert pool.num_free_slots == 7  # the sink is not free
    assert pool.supports_preplan
    no_sink = rsp.RecurrentStatePool("cpu", small_config(sink=False))
    assert no_sink.pad_index == -1
    assert no_sink.num_free_slots == 8
    no_sink.cleanup()


def test_bad_config_raises_with_rsp_status_and_message():
    with pytest.raises(rsp.RspError) as e:
        rsp.RecurrentStatePool("cpu", rsp.PoolConfig(num_layers=0, blocks=[
            rsp.BlockSpec("ssm", (4,))], max_slots=4))
    assert e.value.name == "RSP_EINVAL"
    assert "num_layers" in e.value.message
    with pytest.raises(ValueError):
        rsp.RecurrentStatePool("cpu", rsp.PoolConfig(num_layers=1, blocks=[
            rsp.BlockSpec("ssm", (4,), "complex64")], max_slots=4))
    with pytest.raises(ValueError):
        rsp.RecurrentStatePool("tpu", small_config())


def test_block_is_slot_major_with_the_declared_dtype(pool):
    ssm = pool.block("ssm", 0)
    conv = pool.block("conv", 1)
    assert ssm.shape == (8, 4, 8) and ssm.dtype == torch.float32
    assert conv.shape == (8, 3, 5) and conv.dtype == torch.bfloat16
    assert ssm.is_contiguous() and conv.is_contiguous()
    assert ssm.data_ptr() != pool.block("ssm", 1).data_ptr()
    assert pool.block("ssm", 0).data_ptr() == ssm.data_ptr()  # the same memory, no copy
    assert torch.count_nonzero(ssm) == 0  # a new pool reads as zero
    with pytest.raises(rsp.RspError) as e:
        pool.block("nope", 0)
    assert e.value.name == "RSP_EINVAL" and "nope" in e.value.message
    with pytest.raises(rsp.RspError):
        pool.block("ssm", 2)


def test_step_cycle_addressing_and_holdings(pool):
    pool.ingest_request("a")
    pool.ingest_request("a")  # idempotent
    pool.ingest_request("b")
    step = rsp.Step(1, [rsp.Row("a", "main", 4), rsp.Row("b", "main", 1)])
    out = pool.admit(step)
    assert out.ok and bool(out) and out.reason is None
    assert pool.plan(step) == 1
    a = pool.addressing("main")
    assert a.num_rows == 2 and a.step_id == 1
    assert a.slot_indices.dtype == torch.int32 and a.has_state.dtype == torch.bool
    assert a.slot_indices.tolist() == a.host_slot_indices == [1, 2]
    assert a.has_state.tolist() == [False, False]
    pool.commit(step)
    h = pool.holding("a")
    assert h.index == 1 and h.has_state
    assert pool.holding("nobody") is None
    assert pool.num_free_slots == 5
    # the next step of the same rows: has_state now
    step2 = rsp.Step(2, [rsp.Row("a", "main", 1), rsp.Row("b", "main", 1)])
    assert pool.admit(step2)
    pool.plan(step2)
    assert pool.addressing().has_state.tolist() == [True, True]
    pool.commit(step2)


def test_pool_full_names_the_pair_in_the_callers_terms():
    p = rsp.RecurrentStatePool("cpu", small_config(max_slots=3))
    step = rsp.Step(1, [("r0", "main", 1), ("r1", "main", 1), ("r2", "main", 1)])
    out = p.admit(step)
    assert not out.ok and not bool(out)
    assert out.rid == "r2" and out.label == "main"
    assert out.slots_short == 1 and out.usable == 2 and out.free == 2
    assert "r2" in out.reason
    assert p.num_free_slots == 2  # nothing taken
    p.cleanup()


def test_rollback_frees_what_admit_took(pool):
    step = rsp.Step(1, [("x", "main", 1), ("y", "main", 1)])
    assert pool.admit(step)
    assert pool.num_free_slots == 5
    pool.rollback_admit(step)
    assert pool.num_free_slots == 7
    pool.rollback_admit(step)  # finished step: nothing happens


def test_errors_raise_with_status(pool):
    step = rsp.Step(1, [("x", "main", 1)])
    with pytest.raises(rsp.RspError) as e:
        pool.plan(step)  # not admitted
    assert e.value.name == "RSP_EORDER"
    with pytest.raises(rsp.RspError) as e:
        pool.admit(rsp.Step(2, [("x", "main", 1), ("x", "main", 1)]))
    assert e.value.name == "RSP_EDUPROW"
    with pytest.raises(rsp.RspError) as e:
        pool.addressing()  # no live plan yet
    assert e.value.name == "RSP_ENOPLAN"
    with pytest.raises(TypeError):
        pool.ingest_request(1.5)
    with pytest.raises(ValueError):
        pool.ingest_request(-1)


def test_preplan_stage_and_clear(pool):
    step = rsp.Step(1, [("s", "main", 1)], preplan=True)
    assert pool.admit(step)
    pool.plan(step)
    with pytest.raises(rsp.RspError) as e:
        pool.plan(step)  # a second stage
    assert e.value.name == "RSP_ESTAGED"
    pool.clear_preplan()
    pool.clear_preplan()  # none: still fine
    live = rsp.Step(1, [("s", "main", 1)])
    pool.plan(live)
    pool.commit(live)


def test_graph_buffers_and_leases(pool):
    pool.build_accelerator_graph_buffers(None, max_bs=8, max_seq_len=64)
    step = rsp.Step(1, [("g", "main", 1)], lease=rsp.Lease(4, 0, 0))
    assert pool.admit(step)
    pool.plan(step)
    a = pool.addressing()
    assert a.num_rows == 1 and len(a.host_slot_indices) == 8  # bucket padded to the buffer
    assert a.slot_indices.tolist()[1:] == [pool.pad_index] * 7
    pool.commit(step)
    with pytest.raises(rsp.RspError):
        pool.build_accelerator_graph_buffers(None, max_bs=0, max_seq_len=0)


def test_remove_and_reset_free(pool):
    step = rsp.Step(1, [("a", "main", 1), ("b", "main", 1)])
    pool.admit(step)
    pool.plan(step)
    pool.commit(step)
    pool.reset_request("a", free=True)
    assert pool.holding("a") is None
    pool.remove_request("b")
    assert pool.holding("b") is None
    pool.remove_request("never")  # unknown: nothing happens
    assert pool.num_free_slots == 7


def test_stats_count_the_steps(pool):
    step = rsp.Step(1, [("a", "main", 1)])
    pool.admit(step)
    pool.plan(step)
    pool.commit(step)
    s = pool.stats()
    assert s["commits"] == 1 and s["admits_ok"] == 1 and s["held_slots"] == 1


def test_step_next_commits_and_plans_in_one_call(pool):
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert pool.step_next(s1)
    assert pool.addressing().step_id == 1
    s2 = rsp.Step(2, [("a", "main", 1)])
    assert pool.step_next(s2, prev=s1)
    assert pool.addressing().has_state.tolist() == [True]
    pool.commit(s2)


def test_cleanup_then_calls_raise(pool):
    pool.cleanup()
    pool.cleanup()  # twice is fine
    with pytest.raises(rsp.RspError) as e:
        pool.ingest_request("a")
    assert e.value.name == "RSP_ESHUTDOWN"


def test_string_ids_are_blake2b_and_stable_across_processes():
    want = int.from_bytes(hashlib.blake2b(b"req-0", digest_size=8).digest(), "little")
    assert rsp.rid64("req-0") == want
    assert rsp.rid64(42) == 42
    code = "import rsp; print(rsp.rid64('req-0'))"
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=PKG)
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stdout
        assert int(out) == want


def test_two_live_strings_with_one_id_are_refused(monkeypatch):
    from rsp import ids

    monkeypatch.setattr(ids, "rid64", lambda rid: 7)  # every string collides
    m = ids.RidMap()
    assert m.get("a") == 7
    assert m.get("a") == 7  # the same string again is fine
    with pytest.raises(ValueError, match="same 64-bit id"):
        m.get("b")
    m.forget("a")
    assert m.get("b") == 7  # a's id is free once a is gone


def test_plan_refs_are_context_managers_released_at_cleanup():
    p = rsp.RecurrentStatePool("cpu", small_config())
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert p.admit(s1)
    p.plan(s1)
    with p.plan_ref() as ref:
        assert ref.step_id == 1
        assert ref.addressing().host_slot_indices == [1]
    with pytest.raises(rsp.RspError):
        ref.addressing()  # released
    p.commit(s1)
    s2 = rsp.Step(2, [("a", "main", 1)])
    assert p.admit(s2)
    p.plan(s2)
    held = p.plan_ref(2)  # never released by the caller
    assert held.addressing().has_state.tolist() == [True]
    p.commit(s2)
    p.cleanup()  # would wait forever for the reference if the pool kept it
    with pytest.raises(rsp.RspError):
        held.addressing()


def test_rows_equal_to_the_last_reuse_their_bytes_and_others_do_not(pool):
    rows = [("a", "main", 1), ("b", "main", 1)]
    for sid in (1, 2):  # the second step's rows equal the first's: reused
        step = rsp.Step(sid, list(rows))
        assert pool.step_next(step, prev=None if sid == 1 else prev)
        assert pool.addressing().host_slot_indices == [1, 2]
        prev = step
    step = rsp.Step(3, [("b", "main", 1), ("a", "draft", 1)])  # changed: packed again
    assert pool.step_next(step, prev=prev)
    assert pool.addressing("main").host_slot_indices == [2]
    assert pool.addressing("draft").host_slot_indices == [3]
    assert pool.addressing("draft").generations[0] > 0
    pool.commit(step)


def test_cleanup_inside_a_call_on_the_same_thread_is_refused(pool, monkeypatch):
    # a finaliser or signal handler running cleanup() inside this thread's
    # own call would wait for that call forever: refused, nothing closed
    real = rsp._ffi.stats_snapshot
    seen = []

    def stats_snapshot(*args):
        with pytest.raises(rsp.RspError) as e:
            pool.cleanup()
        seen.append(e.value)
        return real(*args)

    monkeypatch.setattr(rsp._ffi, "stats_snapshot", stats_snapshot)
    pool.stats()
    assert seen[0].name == "RSP_EINVAL" and "same thread" in seen[0].message
    monkeypatch.undo()
    assert pool.stats()["commits"] == 0  # still open
    pool.cleanup()
    with pytest.raises(rsp.RspError) as e:
        pool.stats()
    assert e.value.name == "RSP_ESHUTDOWN"


def test_rows_edited_in_place_between_steps_are_seen(pool):
    rows = [["a", "main", 1]]  # list rows, edited in place below
    s1 = rsp.Step(1, rows)
    assert pool.step_next(s1)
    assert pool.addressing().host_slot_indices == [1]
    rows[0][0] = "b"
    s2 = rsp.Step(2, rows)
    assert pool.step_next(s2, prev=s1)
    a = pool.addressing()
    assert a.host_slot_indices == [2] and a.host_has_state == [False]  # b's, not a's
    pool.commit(s2)
    assert pool.holding("b").index == 2 and pool.holding("a").has_state
    assert s2._wire[1].keep is not s1._wire[1].keep  # packed again
    # tuple rows equal to the last step's still share its packed bytes
    s3 = rsp.Step(3, [("a", "main", 1)])
    s4 = rsp.Step(4, [("a", "main", 1)])
    assert pool.step_next(s3)
    assert pool.step_next(s4, prev=s3)
    pool.commit(s4)
    assert s4._wire[1].keep is s3._wire[1].keep


def test_an_int_id_equal_to_a_live_strings_id_is_refused(pool):
    s1 = rsp.Step(1, [("req-1", "main", 1)])
    assert pool.step_next(s1)
    pool.commit(s1)
    v = rsp.rid64("req-1")
    for call in (lambda: pool.remove_request(v), lambda: pool.reset_request(v, free=True),
                 lambda: pool.ingest_request(v), lambda: pool.holding(v),
                 lambda: pool.release(v, "main"),
                 lambda: pool.admit(rsp.Step(2, [(v, "main", 1)]))):
        with pytest.raises(ValueError, match="'req-1'"):
            call()
    assert pool.holding("req-1").has_state  # untouched
    # the other way round: a live int id, then the string whose id it is
    q = rsp.rid64("req-2")
    pool.ingest_request(q)
    for call in (lambda: pool.ingest_request("req-2"), lambda: pool.remove_request("req-2"),
                 lambda: pool.admit(rsp.Step(2, [("req-2", "main", 1)]))):
        with pytest.raises(ValueError, match=str(q)):
            call()
    assert pool.stats()["num_requests"] == 2
    # each is fine once the other is gone
    pool.remove_request(q)
    pool.ingest_request("req-2")
    pool.remove_request("req-1")
    pool.ingest_request(v)
    assert pool.stats()["num_requests"] == 2


def test_an_id_removed_then_stepped_again_is_live_again(pool):
    # the step after the removal repeats the last rows: their packed bytes
    # must not be reused without registering the ids again
    q = rsp.rid64("req-2")
    for sid in (1, 2):
        step = rsp.Step(sid, [(q, "main", 1), ("s", "main", 1)])
        assert pool.step_next(step)
        pool.commit(step)
        if sid == 1:
            pool.remove_request(q)
            pool.remove_request("s")
    with pytest.raises(ValueError, match=str(q)):
        pool.ingest_request("req-2")
    with pytest.raises(ValueError, match="'s'"):
        pool.ingest_request(rsp.rid64("s"))


def test_names_with_a_nul_byte_are_refused(pool):
    # C would see the name cut at the NUL: "ssm\0x" would be block "ssm"
    with pytest.raises(ValueError, match=r"blocks\[0\]\.name.*NUL"):
        rsp.RecurrentStatePool("cpu", rsp.PoolConfig(1, [rsp.BlockSpec("ssm\0x", (4,))], 4))
    with pytest.raises(ValueError, match="name.*NUL"):
        pool.block("ssm\0x", 0)
    with pytest.raises(ValueError, match="name.*not valid UTF-8"):
        pool.block("ssm\ud800", 0)
    with pytest.raises(ValueError, match=r"label.*NUL"):
        pool.admit(rsp.Step(1, [("a", "main\0x", 1)]))
    with pytest.raises(ValueError, match=r"label.*NUL"):
        pool.admit(rsp.Step(1, [("a", "main", 1)], pre_forks=[rsp.Fork("main", "d\0")]))
    assert pool.num_free_slots == 7 and pool.stats()["admits_ok"] == 0


def test_row_flags_must_be_bools(pool):
    # a C bool holding 2 is undefined behaviour: refused, not normalised
    with pytest.raises(TypeError, match=r"rows\[1\]\.padding must be a bool, not int"):
        pool.admit(rsp.Step(1, [rsp.Row("a"), rsp.Row("b", padding=2)]))
    with pytest.raises(TypeError, match=r"rows\[0\]\.skip_post_forks must be a bool"):
        pool.admit(rsp.Step(1, [("a", "main", 1, False, 1)]))
    assert pool.num_free_slots == 7 and pool.stats()["admits_ok"] == 0
    step = rsp.Step(1, [rsp.Row("a"), rsp.Row("p", padding=True)])
    assert pool.admit(step)
    pool.plan(step)
    assert pool.addressing().host_slot_indices == [1, pool.pad_index]
    pool.commit(step)


def test_reading_an_unknown_label_does_not_intern_it(pool):
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert pool.step_next(s1)
    ref = pool.plan_ref()
    # more typos than the pool has label ids (64)
    for i in range(70):
        for read in (lambda: pool.addressing(f"typo{i}"), lambda: ref.addressing(f"typo{i}"),
                     lambda: pool.holding("a", f"typo{i}")):
            with pytest.raises(rsp.RspError) as e:
                read()
            assert e.value.name == "RSP_ENOLABEL" and f"'typo{i}'" in e.value.message
    ref.release()
    pool.commit(s1)
    # a real label still gets an id
    s2 = rsp.Step(2, [("a", "main", 1), ("a", "draft", 1)], pre_forks=[rsp.Fork("main", "draft")])
    assert pool.step_next(s2)
    assert pool.addressing("draft").host_has_state == [True]
    assert pool.holding("a", "draft") is not None
    pool.commit(s2)


def test_release_under_a_label_never_named_is_enolabel(pool):
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert pool.step_next(s1)
    pool.commit(s1)
    with pytest.raises(rsp.RspError) as e:
        pool.release("a", "never-seen")
    assert e.value.name == "RSP_ENOLABEL" and "'never-seen'" in e.value.message
    assert pool.holding("a").has_state  # nothing released
    pool.release("a", "main")
    assert pool.holding("a") is None
    pool.release("a", "main")  # a known label without a slot: nothing happens


def test_malformed_arguments_are_named(pool):
    def refused(exc, match, call):
        with pytest.raises(exc, match=match):
            call()

    # rows: structure, then each column
    for rows, exc, match in [
        ([("a", "main")], ValueError, r"rows\[0\]: a row is .*not 2 items"),
        ([("a", "main", 1), 5], TypeError, r"rows\[1\]: a row is .*not int 5"),
        (["abc"], TypeError, r"rows\[0\]: a row is .*not str"),
        ([("a", "main", 1.0)], TypeError, r"rows\[0\]\.span: span must be an int, not float"),
        ([("a", "main", 1), ("b", "main", 2**31)], ValueError, r"rows\[1\]\.span: .*32 bits"),
        ([(1.5, "main", 1)], TypeError, r"rows\[0\]\.rid: .*not float"),
        ([("a", "main", 1), (-1, "main", 1)], ValueError, r"rows\[1\]\.rid: .*64 bits"),
        ([([1], "main", 1)], TypeError, r"rows\[0\]\.rid: .*not list"),
        ([("a", None, 1)], TypeError, r"rows\[0\]\.label: label must be a str, not NoneType"),
        ([("a", ["main"], 1)], TypeError, r"rows\[0\]\.label: label must be a str, not list"),
        ([("a", 2**32, 1)], ValueError, r"rows\[0\]\.label: label 4294967296"),
        ([rsp.Row("a", fork_group=-1)], ValueError, r"rows\[0\]\.fork_group: fork_group -1"),
        ([rsp.Row("a", fork_group=1.0)], TypeError, r"rows\[0\]\.fork_group: .*not float"),
    ]:
        refused(exc, match, lambda: pool.admit(rsp.Step(1, rows)))
    # forks, step fields
    refused(TypeError, r"pre_forks\[0\]: a fork is", lambda: pool.admit(
        rsp.Step(1, [("a", "main", 1)], pre_forks=["main"])))
    refused(ValueError, r"post_forks\[1\]: group -1", lambda: pool.admit(
        rsp.Step(1, [("a", "main", 1)], post_forks=[("main", "d"), ("main", "d", -1)])))
    refused(ValueError, r"step_id -1", lambda: pool.admit(rsp.Step(-1, [("a", "main", 1)])))
    refused(TypeError, r"step_id must be an int", lambda: pool.rollback_admit(rsp.Step(1.0)))
    refused(ValueError, r"lease\.bucket_id -2", lambda: pool.admit(
        rsp.Step(1, [("a", "main", 1)], lease=rsp.Lease(4, -2, 0))))
    refused(TypeError, r"lease must be Lease", lambda: pool.admit(
        rsp.Step(1, [("a", "main", 1)], lease=4)))
    assert pool.num_free_slots == 7 and pool.stats()["admits_ok"] == 0  # nothing reached rsp
    # other arguments
    refused(ValueError, r"layer_idx -1", lambda: pool.block("ssm", -1))
    refused(TypeError, r"layer_idx must be an int, not float", lambda: pool.block("ssm", 0.0))
    refused(ValueError, r"max_bs -1", lambda: pool.build_accelerator_graph_buffers(None, -1, 0))
    refused(TypeError, r"step_id must be an int", lambda: pool.addressing(step_id="1"))
    refused(TypeError, r"step_id must be an int", lambda: pool.plan_ref(step_id=1.0))
    refused(TypeError, r"event must be an rsp event", lambda: pool.wait(None))


def test_malformed_config_is_named():
    def refused(exc, match, device="cpu", **kw):
        with pytest.raises(exc, match=match):
            rsp.Pool(device, small_config(**kw) if not kw.get("cfg") else kw["cfg"])

    def blocks(*b):
        return rsp.PoolConfig(1, list(b), 4)

    refused(TypeError, r"blocks\[0\]\.shape must be a tuple of ints, not int 4",
            cfg=blocks(rsp.BlockSpec("ssm", 4)))
    refused(TypeError, r"blocks\[1\]\.shape\[1\] must be an int, not float",
            cfg=blocks(rsp.BlockSpec("a", (4,)), rsp.BlockSpec("ssm", (4, 2.0))))
    refused(ValueError, r"blocks\[0\]\.shape \(\): 1 to 8 dims", cfg=blocks(rsp.BlockSpec("a", ())))
    refused(ValueError, r"blocks\[0\]\.shard_dims .*0 to 8 dims",
            cfg=blocks(rsp.BlockSpec("a", (4,), shard_dims=tuple(range(9)))))
    refused(TypeError, r"blocks\[0\] must be a BlockSpec, not tuple", cfg=blocks(("a", (4,))))
    refused(TypeError, r"blocks\[0\]\.name must be a str, not NoneType",
            cfg=blocks(rsp.BlockSpec(None, (4,))))
    refused(TypeError, r"config must be a PoolConfig", cfg={"num_layers": 1})
    refused(ValueError, r"max_slots -1", max_slots=-1)  # ctypes would make it 2**32 - 1
    refused(TypeError, r"num_layers must be an int, not float", layers=2.0)
    refused(ValueError, r"device 'cuda:x'", device="cuda:x")
    refused(ValueError, r"device 'tpu'", device="tpu")


@pytest.mark.core_commit_check
def test_a_commit_that_differs_from_its_admit_is_refused(pool):
    # The check is librsp's (docs/semantics.md 9.2), not the package's: a
    # commit's only per-row choices are its outcomes (skip_post_forks, accepted
    # counts), which the package cannot tell from a mistake. Run
    # `pytest -m "not core_commit_check"` against an older librsp.
    admitted = rsp.Step(3, [("a", "main", 1)])
    assert pool.admit(admitted)
    pool.plan(admitted)
    with pytest.raises((rsp.RspError, ValueError)) as e:
        pool.commit(rsp.Step(3, [("z", "main", 1)]))
    if isinstance(e.value, rsp.RspError):
        assert e.value.name == "RSP_EINVAL", e.value
    assert pool.stats()["commits"] == 0  # nothing changed
    assert pool.holding("z") is None
    pool.commit(admitted)  # the right commit still works
    assert pool.holding("a").has_state
    assert pool.holding("z") is None and pool.stats()["num_requests"] == 1


def test_ingest_remove_and_reset_many_are_one_message_all_or_nothing(pool):
    handled = pool.stats()["messages_handled"]
    pool.ingest_many(["a", "b", 3])
    assert pool.stats()["messages_handled"] == handled + 2  # the ingest and this stats
    assert pool.stats()["num_requests"] == 3
    # a rid listed twice refuses the whole list
    with pytest.raises(rsp.RspError) as e:
        pool.ingest_many(["c", "d", "c"])
    assert e.value.name == "RSP_EINVAL" and "rids[2]" in e.value.message
    assert "repeats rids[0]" in e.value.message
    assert pool.stats()["num_requests"] == 3
    step = rsp.Step(1, [("a", "main", 1), ("b", "main", 1), (3, "main", 1)])
    assert pool.step_next(step)
    pool.commit(step)
    pool.reset_many(["a", "b"])  # zeroed, kept
    assert pool.holding("a").has_state is False and pool.num_free_slots == 4
    pool.reset_many(["a", 3], free=True)
    assert pool.holding("a") is None and pool.holding(3) is None and pool.num_free_slots == 6
    pool.remove_many(["a", "b", 3, "never-seen"])
    assert pool.stats()["num_requests"] == 0 and pool.num_free_slots == 7
    # removed: forgotten by the id map too, so a's 64-bit id may be an int now
    pool.ingest_request(rsp.rid64("a"))
    for call in (pool.ingest_many, pool.remove_many, pool.reset_many):
        call([])  # nothing to do, nothing sent


def test_malformed_rid_lists_are_named(pool):
    pool.ingest_request("live")
    for call, exc, match in [
        (lambda: pool.ingest_many("ab"), TypeError, r"rids must be a list or tuple .*not str"),
        (lambda: pool.remove_many({1, 2}), TypeError, r"rids must be a list or tuple .*not set"),
        (lambda: pool.ingest_many(["a", 1.5]), TypeError, r"rids\[1\]: request id must be"),
        (lambda: pool.reset_many([-1]), ValueError, r"rids\[0\]: request id -1"),
        (lambda: pool.ingest_many(["x", rsp.rid64("live")]), ValueError, r"rids\[1\]: .*'live'"),
        (lambda: pool.reset_many(["live"], free=1), TypeError, r"free must be a bool, not int"),
        (lambda: pool.ingest_many(list(range(65537))), ValueError, r"65537 request ids"),
    ]:
        with pytest.raises(exc, match=match):
            call()
    assert pool.stats()["num_requests"] == 1
    pool.ingest_request("x")  # not registered by the refused list: no collision left over


def test_counters_are_the_stats_fields_read_without_a_message(pool):
    step = rsp.Step(1, [("a", "main", 1)])
    assert pool.step_next(step)
    pool.commit(step)
    s = pool.stats()
    c = pool.counters()
    assert set(c) == set(s) and len(c) == 42  # every rsp_stats field
    for k in ("free_slots", "held_slots", "commits", "admits_ok", "generation", "posts_failed",
              "checkpoints_taken", "swaps_in", "forward_waits"):
        assert c[k] == s[k], k
    handled = c["messages_handled"]
    for _ in range(5):
        pool.counters()
    assert pool.counters()["messages_handled"] == handled  # no message sent


def test_info_is_the_pools_immutable_facts(pool):
    i = pool.info()
    assert i["max_slots"] == 8 and i["usable_slots"] == 7 and i["sink"] and i["pad_index"] == 0
    # ssm 4 x 8 float32 + conv 3 x 5 bfloat16, two layers
    assert i["slot_bytes"] == 2 * (4 * 8 * 4 + 3 * 5 * 2)
    assert i["total_bytes"] == 8 * i["slot_bytes"]
    assert i["device"] == "cpu" and i["owner_cpu"] == -1 and i["num_blocks"] == 2


def test_barrier_returns_once_earlier_messages_are_handled(pool):
    pool.ingest_request("a")
    pool.barrier()
    assert pool.counters()["num_requests"] == 1
    pool.cleanup()
    with pytest.raises(rsp.RspError) as e:
        pool.barrier()
    assert e.value.name == "RSP_ESHUTDOWN"


def test_cleanup_with_a_timeout_names_the_step_whose_forward_never_completed():
    p = rsp.RecurrentStatePool("cpu", small_config())
    fence = rsp.HostFence()
    step = rsp.Step(1, [("a", "main", 1)])
    assert p.step_next(step)
    p.commit(step, forward_done=(fence, 1))  # never signalled, for now
    with pytest.raises(ValueError, match="timeout_ns -1"):
        p.cleanup(timeout_ns=-1)
    with pytest.raises(rsp.RspError) as e:
        p.cleanup(timeout_ns=50_000_000)
    assert e.value.name == "RSP_ETIMEDOUT" and e.value.pending_steps == [1]
    assert p.stats()["commits"] == 1  # still open and usable
    fence.signal(1)
    p.cleanup(timeout_ns=5_000_000_000)
    with pytest.raises(rsp.RspError) as e:
        p.stats()
    assert e.value.name == "RSP_ESHUTDOWN"


def test_host_fence_wait():
    fence = rsp.HostFence()
    with pytest.raises(rsp.RspError) as e:
        fence.wait(1, timeout_ns=1_000_000)
    assert e.value.name == "RSP_ETIMEDOUT"
    t = threading.Timer(0.05, fence.signal, args=(2,))
    t.start()
    fence.wait(2)
    t.join()
    assert fence.value == 2
    fence.wait(1, timeout_ns=0)  # already reached
    with pytest.raises(ValueError, match="value -1"):
        fence.wait(-1)
