# The seed's class (rsp.seed.RecurrentStatePool, also rsp.RecurrentStatePool)
# driven as the original's callers drive it: the engine's step and context
# objects, build(spec, info), plans as dicts of RecurrentAddressing, the
# outcome types. The behaviours rsp deliberately changes are at the end
# (docs/python.md, "What the seed's class does differently").
# SPDX-License-Identifier: Apache-2.0
import dataclasses
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import rsp
from conftest import PKG
from rsp.seed import (ADMIT_OK, NO_SLOT, SINK_SLOT, AdmitOutcome, AllocationFailed, BucketKey,
                      EngineResourceInfo, RecurrentAddressing, RecurrentBlockConfig,
                      RecurrentStateConfig, RecurrentStatePool, RecurrentStateSpec, RecurrentStep,
                      Segment, SlotLease, SlotState, StepContext)

LAYERS = 2


def config(max_slots=8, sink=True):
    return RecurrentStateConfig(
        num_layers=LAYERS,
        blocks={"state": RecurrentBlockConfig(shape=(2, 4, 4), dtype=torch.float32),
                "conv": RecurrentBlockConfig(shape=(8, 3), dtype=torch.bfloat16)},
        max_slots=max_slots, disable_sink_slot=not sink)


def build(max_slots=8, sink=True, group=None):
    spec = RecurrentStateSpec("gdn_state", {"llm"}, config(max_slots, sink))
    return RecurrentStatePool.build(spec, EngineResourceInfo(device=torch.device("cpu"),
                                                             joint_comm_group=group))


@pytest.fixture
def pool():
    p = build()
    yield p
    p.cleanup()


def ctx(rids, walk="decode", **kw):
    return StepContext(request_ids=tuple(rids), graph_walk=walk, slot=0,
                       capture=kw.pop("capture", False), **kw)


def step(*segs, pre=(), post=()):
    return RecurrentStep(segments=tuple(Segment(*s) for s in segs), pre_forks=tuple(pre),
                         post_forks=tuple(post))


def run(pool, st, c):
    """admit + plan + commit, as the runner does; returns the plan."""
    assert pool.admit(st, c).ok
    out = pool.plan(st, c)
    pool.commit(st, c)
    return out


def state_of(pool, rid, label="main"):
    return pool.block("state", 0)[pool._slots[rid][label].index]


# --- the class and its construction ---------------------------------------------


def test_the_package_name_is_the_seed_class_over_rsps_own():
    assert rsp.RecurrentStatePool is RecurrentStatePool
    assert issubclass(rsp.RecurrentStatePool, rsp.Pool)
    assert rsp.Pool is rsp.pool.RecurrentStatePool  # rsp's own Step API, its module name
    # the page's result types, as the page constructs them
    assert SlotState(3) == SlotState(3, has_state=False, generation=0)
    a = RecurrentAddressing(torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.bool), 2)
    assert a.host_slot_indices is None and a.host_has_state is None
    assert [f.name for f in dataclasses.fields(RecurrentAddressing)] == [
        "slot_indices", "has_state", "num_rows", "host_slot_indices", "host_has_state"]
    assert AdmitOutcome(ok=True) == ADMIT_OK == (True, True, None)
    r = AllocationFailed(message="m", pages_short=1, label="main", request_id="r")
    assert (r.pages_short, r.label, r.request_id) == (1, "main", "r")


def test_build_from_spec_and_info(pool):
    assert isinstance(pool.config, RecurrentStateConfig)
    assert pool.num_free_slots == 7 and pool.pad_index == SINK_SLOT == 0
    assert pool.supports_preplan is True
    off = build(sink=False)
    assert off.num_free_slots == 8 and off.pad_index == NO_SLOT == -1
    off.cleanup()
    # the Resource base class's hooks a runner calls on every resource
    assert pool.depends_on() == set() and pool.publish("r") is None
    assert pool.narrow(step(("r", "main", 1)), ctx(["r"])) is None
    assert pool.admit_retrieve("r", "llm", "decode", None) == ADMIT_OK
    assert not pool.supports_eviction and not pool.force_double_buffer


def test_build_shards_the_config_for_the_tensor_parallel_group():
    spec = RecurrentStateSpec("s", ["llm"], RecurrentStateConfig(
        num_layers=1, blocks={"state": RecurrentBlockConfig((8, 4), torch.float32,
                                                            shard_dims=(0,))}, max_slots=4))
    p = RecurrentStatePool.build(spec, EngineResourceInfo(
        device="cpu", joint_comm_group=SimpleNamespace(world_size=2, rank=1)))
    assert p.block("state", 0).shape == (4, 4, 4)
    assert spec.config.blocks["state"].shape == (4, 4)  # the original's side effect
    p.cleanup()


class _Ranks:
    """A comm group whose all_gather answers what every rank holds (None:
    every rank holds what this one does)."""

    def __init__(self, values):
        self.values = values
        self.world_size = 1 if values is None else len(values)
        self.seen = []

    def all_gather(self, local, dim=0):
        self.seen.append((local.dtype, tuple(local.shape), dim))
        return torch.tensor(self.values or [int(local.item())], dtype=local.dtype)


def test_post_warmup_validate_compares_free_slots_across_ranks():
    def joint(tp, sp=None):
        g = SimpleNamespace(tp_group=_Ranks(tp), sp_group=_Ranks(sp))
        g.world_size = g.tp_group.world_size * g.sp_group.world_size
        return g

    spec = lambda: RecurrentStateSpec("s", ["llm"], RecurrentStateConfig(  # noqa: E731
        num_layers=1, blocks={"state": RecurrentBlockConfig((4, 2), torch.float32,
                                                            shard_dims=(0,))}, max_slots=5))
    pools = []
    for group, bad in ((joint([4, 4]), None), (joint([4, 3]), r"\[4, 3\]"),
                       (joint([4, 4], [4, 2]), r"\[4, 2\]"), (None, None),
                       (joint(None), None)):
        p = RecurrentStatePool.build(spec(), EngineResourceInfo(device="cpu",
                                                                joint_comm_group=group))
        pools.append(p)
        if bad is None:
            p.post_warmup_validate()
        else:
            with pytest.raises(RuntimeError, match="asymmetric free slots.*" + bad):
                p.post_warmup_validate()
    assert pools[0]._comm_group.tp_group.seen == [(torch.int64, (1,), 0)]
    # The original's constructor takes the group too (it shards nothing).
    direct = RecurrentStatePool(torch.device("cpu"), spec().config, comm_group=joint([4, 3]))
    pools.append(direct)
    assert direct.block("state", 0).shape == (5, 4, 2)
    with pytest.raises(RuntimeError, match=r"asymmetric free slots.*\[4, 3\]"):
        direct.post_warmup_validate()
    for p in pools:
        p.cleanup()


def test_config_errors_are_the_originals():
    with pytest.raises(ValueError, match="must declare a block"):
        RecurrentStateConfig(num_layers=1, blocks={})
    with pytest.raises(ValueError, match="the sink takes one"):
        RecurrentStateConfig(num_layers=1, blocks={"s": RecurrentBlockConfig((4,), "float32")},
                             max_slots=1)
    with pytest.raises(ValueError, match="must declare a block"):
        RecurrentStatePool("cpu", {"num_layers": 1, "blocks": {}})
    with pytest.raises(ValueError) as e:  # rsp's refusal is a ValueError too
        RecurrentStatePool("cpu", SimpleNamespace(num_layers=0, max_slots=4, blocks={
            "s": SimpleNamespace(shape=(4,), dtype=torch.float32)}))
    assert isinstance(e.value, rsp.RspError) and "num_layers" in e.value.message


def test_a_duck_typed_config_works():
    cfg = {"num_layers": 1, "max_slots": 3,
           "blocks": {"s": SimpleNamespace(shape=[4], dtype=torch.float16)}}
    p = RecurrentStatePool(torch.device("cpu"), cfg)
    assert p.block("s", 0).shape == (3, 4) and p.block("s", 0).dtype == torch.float16
    assert p.num_free_slots == 2
    p.cleanup()


def test_block_views(pool):
    state, conv = pool.block("state", 0), pool.block("conv", 1)
    assert state.shape == (8, 2, 4, 4) and state.dtype == torch.float32
    assert conv.shape == (8, 8, 3) and conv.dtype == torch.bfloat16
    assert state.is_contiguous() and torch.count_nonzero(state) == 0
    assert pool.block("state", 0) is state  # the storage never moves: one tensor
    assert pool.block("state", -1).data_ptr() == pool.block("state", 1).data_ptr()
    with pytest.raises(KeyError) as e:
        pool.block("nope", 0)
    assert isinstance(e.value, rsp.RspError) and "nope" in str(e.value)
    with pytest.raises(IndexError):
        pool.block("state", 2)
    with pytest.raises(TypeError):
        pool.block("state", 1.0)


def test_a_per_slot_block_takes_no_layer():
    # The original's RecurrentBlockConfig(per_layer=False): one row per
    # slot, block(name) without a layer, zeroed and forked with the slot.
    cfg = RecurrentStateConfig(num_layers=LAYERS, max_slots=4, blocks={
        "state": RecurrentBlockConfig(shape=(2,), dtype=torch.float32),
        "pos": RecurrentBlockConfig(shape=(1,), dtype=torch.int64, per_layer=False)})
    assert cfg.slot_bytes == LAYERS * 8 + 8
    pool = RecurrentStatePool(torch.device("cpu"), cfg)
    pos = pool.block("pos")
    assert pos.shape == (4, 1) and pos.dtype == torch.int64 and pool.block("pos") is pos
    assert pool._blocks["pos"] is pos and pool._blocks["state"].shape == (LAYERS, 4, 2)
    with pytest.raises(ValueError, match="'pos' is per slot; got layer_idx=0"):
        pool.block("pos", 0)
    with pytest.raises(ValueError, match="'state' is per layer; got layer_idx=None"):
        pool.block("state")
    with pytest.raises(KeyError):
        pool.block("nope")
    st, c = step(("a", "main", 3), post=[("main", "alt")]), ctx(["a"])
    assert pool.admit(st, c).ok
    a = pool.plan(st, c)["main"].host_slot_indices[0]
    pos[a] = 3  # the forward's write
    pool.commit(st, c)  # forks main -> alt: pos is copied with the slot
    alt = pool._slots["a"]["alt"].index
    assert alt != a and int(pool.block("pos")[alt]) == 3
    st, c = step(("a", "alt", 1)), ctx(["a"])
    assert pool.admit(st, c).ok
    assert pool.gather("pos", pool.plan(st, c)["alt"]).tolist() == [[3]]
    pool.commit(st, c)
    pool.remove_request("a")
    assert torch.count_nonzero(pool.block("pos")) == 0  # zeroed with the slots
    pool.cleanup()


def test_private_blocks_are_the_whole_storage_layer_major(pool):
    # The original kept each block as one [num_layers, max_slots, *shape]
    # tensor in _blocks, and its tests write a slot across every layer
    # through it (pool._blocks[name][:, index]).
    whole = pool._blocks
    assert sorted(whole) == ["conv", "state"]
    assert whole["state"].shape == (LAYERS, 8, 2, 4, 4) and whole["conv"].dtype == torch.bfloat16
    whole["state"][:, 3].fill_(5.0)
    for layer in range(LAYERS):
        assert whole["state"][layer].data_ptr() == pool.block("state", layer).data_ptr()
        assert bool((pool.block("state", layer)[3] == 5.0).all())
    pool.block("conv", LAYERS - 1)[2] = 1.5
    assert bool((whole["conv"][LAYERS - 1, 2] == 1.5).all()) and not whole["conv"][0].any()
    assert pool._blocks["state"] is whole["state"]  # made once
    run(pool, step(("a", "main", 1)), ctx(["a"]))
    index = pool.slot_index("a")
    whole["state"][:, index].fill_(2.0)  # what a's forward wrote
    pool.remove_request("a")  # a zeroing queued on rsp's device...
    assert not pool._blocks["state"][:, index].any()  # ...is waited for, as block() does
    pool.cleanup()
    assert bool((whole["state"][:, 3] == 5.0).all())  # still valid after the pool is gone


def test_gather_and_scatter_follow_the_addressing():
    for sink in (True, False):
        pool = build(max_slots=6, sink=sink)
        c = ctx(["a", "b"])
        c.set_padded_rids(["a", "b", "pad"])
        st = step(("a", "main", 1), ("b", "main", 1), ("pad", "main", 1))
        assert pool.admit(st, c).ok
        rows = pool.plan(st, c)["main"]
        value = torch.arange(3 * 8 * 3, dtype=torch.float32).view(3, 8, 3)
        pool.scatter_("conv", rows, value, layer_idx=1)
        got = pool.gather("conv", rows, layer_idx=1)
        assert torch.equal(got[:2], value[:2].to(torch.bfloat16))
        conv = pool.block("conv", 1)
        held = [pool._slots[r]["main"].index for r in "ab"]
        if sink:  # the padding row wrote the sink, and reads it back
            assert torch.equal(got[2], conv[SINK_SLOT])
            assert torch.equal(conv[SINK_SLOT], value[2].to(torch.bfloat16))
        else:  # NO_SLOT: nothing written, zeros read
            assert torch.count_nonzero(got[2]) == 0
        untouched = [i for i in range(6) if i not in held and (i != SINK_SLOT or not sink)]
        assert all(torch.count_nonzero(conv[i]) == 0 for i in untouched)
        assert torch.count_nonzero(pool.block("conv", 0)) == 0
        pool.cleanup()


# --- the step -------------------------------------------------------------------


def test_prefill_then_decode(pool):
    for rid in ("a", "b"):
        pool.ingest_request(rid)
    pre = step(("a", "main", 12), ("b", "main", 5))
    c = ctx(["a", "b"], "prefill")
    out = pool.admit(pre, c)
    assert out == ADMIT_OK and out.ok and out.ready and out.reason is None
    assert pool.num_free_slots == 5
    plan = pool.plan(pre, c)
    assert isinstance(plan, dict) and list(plan) == ["main"]
    main = plan["main"]
    assert isinstance(main, RecurrentAddressing) and main.num_rows == 2
    assert main.slot_indices.dtype == torch.int32 and main.has_state.dtype == torch.bool
    assert main.slot_indices.tolist() == main.host_slot_indices == [1, 2]
    assert main.has_state.tolist() == main.host_has_state == [False, False]  # fresh: zeros
    assert pool.addressing() is main and pool.addressing("main") is main
    state = pool.block("state", 0)
    state[main.slot_indices.long()] = 1.0  # the forward writes its rows' slots
    pool.commit(pre, c)
    dec = step(("a", "main", 1), ("b", "main", 1))
    d = run(pool, dec, ctx(["a", "b"]))["main"]
    assert d.host_slot_indices == [1, 2] and d.host_has_state == [True, True]
    assert pool._slots["a"]["main"] == SlotState(1, True, pool._slots["a"]["main"].generation)
    assert bool((state[1] == 1.0).all())


def test_plan_results_is_what_the_runner_files(pool):
    c = ctx(["a"])
    st = step(("a", "main", 1), ("a", "draft", 1))
    assert pool.admit(st, c).ok
    # The runner files the plan under the resource's key; the pool itself
    # leaves the context alone (it does not know its key).
    c.plan_results["gdn_state"] = pool.plan(st, c)
    assert list(c.plan_results) == ["gdn_state"]
    plan = c.plan_results["gdn_state"]
    assert list(plan) == ["main", "draft"]  # labels in first-appearance order
    assert plan["draft"].host_slot_indices == [2]
    pool.commit(st, c)


def test_zero_span_rows_reserve_nothing_and_address_the_pad(pool):
    c = ctx(["a", "b"])
    st = step(("a", "main", 0), ("b", "main", 1))
    assert pool.admit(st, c).ok and pool.num_free_slots == 6
    assert pool.plan(st, c)["main"].host_slot_indices == [SINK_SLOT, 1]
    pool.commit(st, c)
    assert "main" not in pool._slots["a"]


def test_padding_rows_take_no_slot_and_are_never_committed():
    pool = build(max_slots=4)  # 3 usable, a bucket of 8
    names = [f"__cg_LLM_0_{i}__" for i in range(8)]
    for rid in ["a", *names]:
        pool.ingest_request(rid)
    padded = ["a", *names[1:]]
    c = ctx(["a"], slot_lease=SlotLease(slot=0, bucket=BucketKey("decode", 8, 8)))
    c.set_padded_rids(padded)
    for _ in range(3):
        st = step(*[(r, "main", 1) for r in padded])
        assert pool.admit(st, c).ok and pool.num_free_slots == 2
        m = pool.plan(st, c)["main"]
        assert m.host_slot_indices == [1] + [SINK_SLOT] * 7
        assert not m.has_state[1:].any()
        pool.commit(st, c)
    assert all(not pool._slots.get(r) for r in names)
    for r in names:
        pool.reset_request(r, free=False)  # the runner's rotation: a no-op
    assert pool.num_free_slots == 2


def test_padding_rows_carry_no_slot_without_a_sink():
    pool = build(max_slots=4, sink=False)
    c = ctx(["r"])
    c.set_padded_rids(["r", "pad0", "pad1"])
    st = step(("r", "main", 1), ("pad0", "main", 1), ("pad1", "main", 1))
    assert pool.admit(st, c).ok
    assert pool.plan(st, c)["main"].host_slot_indices == [0, NO_SLOT, NO_SLOT]
    pool.cleanup()


def test_capture_reserves_copies_and_commits_nothing():
    pool = build(max_slots=2)  # one usable slot, a bucket of 16
    names = [f"__cg_LLM_0_{i}__" for i in range(16)]
    st = step(*[(r, "main", 1) for r in names], pre=[("main", "draft")])
    c = ctx(names, capture=True)
    assert pool.admit(st, c).ok and pool.num_free_slots == 1
    plan = pool.plan(st, c)
    assert plan["main"].slot_indices[:16].tolist() == [SINK_SLOT] * 16
    pool.commit(st, c)
    assert all(not pool._slots.get(r) for r in names) and pool.num_free_slots == 1
    pool.cleanup()


def test_preplan_stages_and_the_next_plan_promotes(pool):
    first = step(("a", "main", 4))
    run(pool, first, ctx(["a"]))
    live = pool.addressing()
    pool.block("state", 0)[1] = 3.0  # what a's forward wrote
    st = step(("a", "main", 1), ("a", "draft", 1), ("b", "main", 1), pre=[("main", "draft")])
    c = ctx(["a", "b"], is_preplan=True)
    assert pool.admit(st, c).ok  # the pre-plan pass reserves
    free = pool.num_free_slots
    staged = pool.plan(st, c)
    staged_rows = dict(staged)  # promotion refills the dict itself
    assert staged["draft"].staged and staged["draft"].host_has_state == [True]  # a's, ahead
    assert staged["main"].host_slot_indices == [1, 3] and staged["draft"].host_slot_indices == [2]
    assert torch.count_nonzero(pool.block("state", 0)[2]) == 0  # staging copied nothing
    assert pool.addressing() is live  # readers of the live plan do not see the stage
    c.is_preplan = False
    assert pool.admit(st, c).ok and pool.num_free_slots == free  # nothing new
    promoted = pool.plan(st, c)
    assert not promoted["draft"].staged
    for label in ("main", "draft"):
        assert promoted[label].host_slot_indices == staged_rows[label].host_slot_indices
        assert promoted[label].host_has_state == staged_rows[label].host_has_state
    assert bool((pool.block("state", 0)[2] == 3.0).all())  # the deferred fork, now
    assert pool.addressing("draft") is promoted["draft"]
    pool.commit(st, c)


def test_promotion_returns_the_staged_dict_with_the_live_plan_in_it(pool):
    # The original's promotion handed back the very dict its preplan
    # returned (its tests check `promoted is staged`), and its private
    # _preplanned flag said whether a stage was waiting.
    st = step(("a", "main", 1), ("b", "main", 1), ("c", "main", 1))
    live_ctx = ctx(["a", "b", "c"])
    assert pool.admit(st, live_ctx).ok
    assert not pool._preplanned
    staged = pool.plan(st, ctx(["a", "b", "c"], is_preplan=True))
    assert pool._preplanned
    before = staged["main"]
    promoted = pool.plan(st, live_ctx)
    assert promoted is staged and not pool._preplanned
    assert promoted["main"] is not before and not promoted["main"].staged
    assert before.staged  # what a caller kept of the stage is left as it was
    assert promoted["main"].slot_indices.tolist() == before.slot_indices.tolist() == [1, 2, 3]
    assert pool.addressing() is promoted["main"]
    assert pool.plan(st, live_ctx) is promoted  # planned again: the same answer
    pool.commit(st, live_ctx)


def test_a_second_stage_is_the_originals_assertion(pool):
    c = ctx(["a"], is_preplan=True)
    st = step(("a", "main", 1))
    assert pool.admit(st, c).ok
    pool.plan(st, c)
    other = step(("b", "main", 1))
    c2 = ctx(["b"], is_preplan=True)
    assert pool.admit(other, c2).ok
    with pytest.raises(AssertionError, match="already pending") as e:
        pool.plan(other, c2)
    assert e.value.name == "RSP_ESTAGED"
    pool.clear_preplan()
    pool.plan(other, c2)  # the stage is free again
    pool.clear_preplan()
    pool.clear_preplan()  # nothing staged: fine


def test_clear_preplan_gives_back_what_a_step_admitted_only_ahead_took(pool):
    # A runner that discards a stage calls clear_preplan alone: the slots
    # the pre-plan pass reserved come back, in the free stack's old order.
    c = ctx(["a", "b"], is_preplan=True)
    st = step(("a", "main", 1), ("b", "main", 1))
    before = pool._free
    assert pool.admit(st, c).ok
    pool.plan(st, c)
    assert pool.num_free_slots == 5
    pool.clear_preplan()
    assert pool._free == before and pool._slots["a"] == {} and not pool._preplanned
    pool.rollback_admit(st, c)  # the older runner's unwind after it: nothing left to do
    assert pool._free == before
    assert pool.admit(st, ctx(["a", "b"])).ok  # admitted again, live: the same slots
    assert [pool._slots[r]["main"].index for r in "ab"] == [1, 2]
    pool.rollback_admit(st, c)


def test_clear_preplan_keeps_a_stage_whose_step_was_also_admitted_live(pool):
    st = step(("a", "main", 1))
    ahead = ctx(["a"], is_preplan=True)
    assert pool.admit(st, ahead).ok
    pool.plan(st, ahead)
    assert pool.admit(st, ctx(["a"])).ok  # the live pass: the step is the runner's now
    pool.clear_preplan()
    assert pool._slots["a"]["main"].index == 1 and pool.num_free_slots == 6
    pool.rollback_admit(st, ctx(["a"]))  # its unwind frees what it reserved
    assert pool._slots["a"] == {} and pool.num_free_slots == 7


def test_a_live_admit_of_another_step_drops_a_stage_admitted_only_ahead(pool):
    # An engine planned its next step ahead, then arrivals changed the step
    # and it admits the new one live without clear_preplan (the original's
    # runner clears a stale stage at admit). The new step names a request
    # the stage reserved fresh: the stage is dropped before the admit, so
    # the new step's plan neither promotes the stale one nor rolls the
    # ahead step back from under it.
    run(pool, step(("a", "main", 4)), ctx(["a"]))
    ahead = ctx(["a", "b"], is_preplan=True)
    staged_step = step(("a", "main", 1), ("b", "main", 3))
    assert pool.admit(staged_step, ahead).ok
    pool.plan(staged_step, ahead)
    assert pool.num_free_slots == 5
    st = step(("a", "main", 1), ("b", "main", 3), ("c", "main", 2))
    assert pool.admit(st, ctx(["a", "b", "c"])).ok
    assert not pool._preplanned
    out = pool.plan(st, ctx(["a", "b", "c"]))
    assert out["main"].host_has_state == [True, False, False]
    pool.commit(st, ctx(["a", "b", "c"]))
    assert pool.num_free_slots == 4
    assert all(pool._slots[r]["main"].has_state for r in "abc")
    pool.rollback_admit(staged_step, ahead)  # the stage's step is over: nothing to do
    assert pool.num_free_slots == 4 and all(pool._slots[r] for r in "abc")


def test_rollback_frees_fresh_slots_keeps_held_ones_and_zeroes(pool):
    run(pool, step(("a", "main", 3)), ctx(["a"]))
    pool.block("state", 0)[1] = 5.0
    st = step(("a", "main", 1), ("b", "main", 1))
    c = ctx(["a", "b"])
    assert pool.admit(st, c).ok
    pool.plan(st, c)
    b = pool._slots["b"]["main"].index
    pool.block("state", 0)[b] = 7.0  # a forward that wrote, then failed
    pool.rollback_admit(st, c)
    assert pool._slots["b"] == {} and pool.num_free_slots == 6
    assert torch.count_nonzero(pool.block("state", 0)[b]) == 0
    a = pool._slots["a"]["main"]
    assert a.index == 1 and a.has_state and bool((pool.block("state", 0)[1] == 5.0).all())
    # the retried step gets the same slot (the free stack's order came back)
    assert pool.admit(st, c).ok and pool._slots["b"]["main"].index == b
    pool.rollback_admit(st, c)
    pool.rollback_admit(st, c)  # not in flight any more: nothing happens


def test_rollback_after_commit_or_removal_frees_nothing_twice(pool):
    st, c = step(("a", "main", 1)), ctx(["a"])
    run(pool, st, c)
    pool.rollback_admit(st, c)
    assert pool._slots["a"]["main"].index == 1 and pool.num_free_slots == 6
    st2, c2 = step(("b", "main", 2)), ctx(["b"])
    assert pool.admit(st2, c2).ok
    pool.remove_request("b")
    pool.rollback_admit(st2, c2)
    assert sorted(pool._free) == [2, 3, 4, 5, 6, 7] and pool.num_free_slots == 6


def test_pool_full_is_an_allocation_failed_outcome():
    pool = build(max_slots=4)  # 3 usable
    c = ctx("wxyz")
    out = pool.admit(step(*[(r, "main", 1) for r in "wxyz"]), c)
    assert out.ok is False and out.ready is True
    r = out.reason
    assert isinstance(r, AllocationFailed)
    assert (r.request_id, r.label, r.pages_short) == ("z", "main", 1)
    assert "recurrent state pool is full: 3 usable slots" in r.message
    assert pool.num_free_slots == 3
    # a fork target that does not fit is named too
    assert pool.admit(step(("a", "main", 1)), ctx("a")).ok
    full = pool.admit(step(("a", "main", 1), pre=[("main", "d1"), ("main", "d2"),
                                                  ("main", "d3")]), ctx("a"))
    assert (full.reason.request_id, full.reason.label) == ("a", "d3")
    pool.cleanup()


def test_graph_buffers_under_both_names(pool):
    assert pool.build_cuda_graph_buffers == pool.build_accelerator_graph_buffers
    pool.build_cuda_graph_buffers([], max_bs=4, max_seq_len=4096)
    pool.build_accelerator_graph_buffers([], max_bs=16, max_seq_len=1)
    pool.build_cuda_graph_buffers([], max_bs=2, max_seq_len=1)  # keeps the largest
    pool.build_accelerator_graph_buffers([], max_bs=0, max_seq_len=0)  # nothing
    lease = SlotLease(slot=1, bucket=BucketKey("decode", 8, 8))
    st, c = step(("a", "main", 1)), ctx(["a"], slot_lease=lease)
    m = run(pool, st, c)["main"]
    assert m.num_rows == 1 and m.slot_indices.numel() == 16
    assert m.slot_indices.tolist()[1:] == [SINK_SLOT] * 15 and m.host_slot_indices == [1]
    wide = step(*[(f"r{i}", "main", 0) for i in range(17)])
    c = ctx([f"r{i}" for i in range(17)], slot_lease=lease)
    assert pool.admit(wide, c).ok
    with pytest.raises(AssertionError):  # more rows than the captured buffer
        pool.plan(wide, c)
    pool.rollback_admit(wide, c)
    eager = run(pool, step(("a", "main", 1)), ctx(["a"]))["main"]
    assert eager.slot_indices.numel() == 1  # an eager plan is not padded


def test_leased_plans_rewrite_one_pair_of_tensors(pool):
    """Under a lease each (bucket, slot, label) has one pair of addressing
    tensors that every plan of the key rewrites, as the original's graph
    buffers: a captured graph reads this step's slots at replay."""
    pool.build_cuda_graph_buffers([], max_bs=4, max_seq_len=1)
    bucket = BucketKey("decode", 4, 4)
    a1, b1 = SlotLease(slot=0, bucket=bucket), SlotLease(slot=1, bucket=bucket)

    def leased(rids, lease):
        c = ctx(rids, slot_lease=lease)
        c.set_padded_rids(tuple(rids) + ("pad",) * (4 - len(rids)))
        return run(pool, step(*[(r, "main", 1) for r in rids]), c)["main"]

    first = leased(["a", "b"], a1)
    ptrs = (first.slot_indices.data_ptr(), first.has_state.data_ptr())
    assert first.slot_indices.tolist() == [1, 2, SINK_SLOT, SINK_SLOT]
    assert first.has_state.tolist() == [False, False, False, False]
    second = leased(["b"], a1)
    assert (second.slot_indices.data_ptr(), second.has_state.data_ptr()) == ptrs
    assert second.slot_indices.tolist() == [2, SINK_SLOT, SINK_SLOT, SINK_SLOT]
    assert second.has_state.tolist() == [True, False, False, False]
    assert first.slot_indices.tolist() == [2, SINK_SLOT, SINK_SLOT, SINK_SLOT]  # rewritten
    other = leased(["a"], b1)  # another lease slot: a pair of its own
    assert other.slot_indices.data_ptr() not in ptrs
    assert second.slot_indices.tolist()[0] == 2 and other.slot_indices.tolist()[0] == 1
    eager = run(pool, step(("a", "main", 1)), ctx(["a"]))["main"]  # no lease: tensors of its own
    again = run(pool, step(("a", "main", 1)), ctx(["a"]))["main"]
    assert eager.slot_indices.data_ptr() != again.slot_indices.data_ptr()
    assert eager.slot_indices.data_ptr() not in ptrs


def test_pre_and_post_forks(pool):
    run(pool, step(("a", "main", 4)), ctx(["a"]))
    pool.block("state", 0)[1] = 2.0
    gen = pool._slots["a"]["main"].generation
    st = step(("a", "main", 1), ("a", "draft", 1), pre=[("main", "draft")],
              post=[("draft", "beam")])
    c = ctx(["a"])
    assert pool.admit(st, c).ok and pool.num_free_slots == 4  # draft and beam reserved
    plan = pool.plan(st, c)
    d = pool._slots["a"]["draft"]
    assert plan["draft"].host_has_state == [True] and d.generation > gen
    assert bool((pool.block("state", 0)[d.index] == 2.0).all())  # copied at plan
    beam = pool._slots["a"]["beam"]
    assert torch.count_nonzero(pool.block("state", 0)[beam.index]) == 0
    pool.block("state", 0)[d.index] = 9.0  # the forward runs the draft
    pool.commit(st, c)
    assert bool((pool.block("state", 0)[beam.index] == 9.0).all())  # copied at commit
    assert pool._slots["a"]["beam"].has_state
    # a fork from a label the request does not hold copies nothing
    run(pool, step(("b", "main", 1), pre=[("x", "y")]), ctx(["b"]))
    assert pool._slots["b"]["y"].has_state is False


def test_reset_and_remove(pool):
    run(pool, step(("a", "main", 2), ("a", "draft", 2)), ctx(["a"]))
    pool.block("state", 1)[1] = 4.0
    pool.reset_request("a")  # zeroed, kept
    a = pool._slots["a"]
    assert sorted(a) == ["draft", "main"] and not a["main"].has_state
    assert torch.count_nonzero(pool.block("state", 1)[1]) == 0 and pool.num_free_slots == 5
    pool.reset_request("a", free=True)  # zeroed, given back
    assert pool._slots["a"] == {} and pool.num_free_slots == 7
    run(pool, step(("a", "main", 1)), ctx(["a"]))
    pool.remove_request("a")
    assert "a" not in pool._slots and pool.num_free_slots == 7
    pool.remove_request("a")  # idempotent
    pool.reset_request("nobody", free=True)  # unknown: nothing happens


def test_ingest_is_idempotent_after_a_step(pool):
    pool.ingest_request("a")
    run(pool, step(("a", "main", 3)), ctx(["a"]))
    pool.ingest_request("a", overrides=None)  # once per partition, after a step ran
    pool.ingest_request("a")
    assert pool._slots["a"]["main"].has_state and pool.num_free_slots == 6


def test_addressing_of_a_label_the_step_did_not_plan(pool):
    with pytest.raises(KeyError):
        pool.addressing()  # nothing planned yet
    run(pool, step(("a", "main", 1), ("a", "draft", 1)), ctx(["a"]))
    with pytest.raises(KeyError, match=r"planned \['draft', 'main'\]") as e:
        pool.addressing("beam")
    assert isinstance(e.value, rsp.RspError)
    m = pool.addressing()
    assert m.host_has_state == [False] and m.generations[0] > 0


def test_duck_typed_steps_and_contexts(pool):
    # plain tuples or objects for segments, lists for forks, dicts for the context
    seg = SimpleNamespace(request_id="a", label="main", span=3)
    st = SimpleNamespace(segments=[seg, ("b", "main", 2)], pre_forks=[["main", "draft"]],
                         post_forks=())
    c = {"request_ids": ["a", "b"], "capture": False, "is_preplan": False}
    assert pool.admit(st, c).ok and pool.num_free_slots == 3
    assert pool.plan(st, c)["main"].host_slot_indices == [1, 2]
    pool.commit(st, c)
    assert pool._slots["b"]["main"].has_state and pool._slots["b"]["draft"].index == 4
    with pytest.raises(TypeError, match=r"step.segments\[0\]"):
        pool.admit(SimpleNamespace(segments=[("a", "main")]), c)
    with pytest.raises(TypeError, match=r"step.segments\[0\]\.span"):
        pool.admit(SimpleNamespace(segments=[("a", "main", 1.5)]), c)
    assert pool.num_free_slots == 3


def test_fresh_objects_equal_to_the_admitted_step_find_it(pool):
    # the original's callers may rebuild the step for each call
    c = ctx(["a"])
    assert pool.admit(step(("a", "main", 1)), c).ok
    assert pool.plan(step(("a", "main", 1)), c)["main"].host_slot_indices == [1]
    pool.commit(step(("a", "main", 1)), c)
    assert pool._slots["a"]["main"].has_state and not pool._recs


def test_a_step_is_translated_once(pool, monkeypatch):
    calls = []
    real = RecurrentStatePool._declare
    monkeypatch.setattr(RecurrentStatePool, "_declare",
                        lambda self, s, c: calls.append(1) or real(self, s, c))
    st, c = step(("a", "main", 1)), ctx(["a"])
    run(pool, st, c)
    assert len(calls) == 1  # admit's: plan and commit find the step by its object


def test_namedtuple_rows_are_kept_by_the_last_rows_cache():
    from typing import NamedTuple

    class Seg(NamedTuple):
        request_id: str
        label: str
        span: int

    class Loose(tuple):  # instances have a dict: a kept row could change
        pass

    assert not rsp.pool.keep_row_type(Loose) and not rsp.pool.keep_row_type(list)
    p = rsp.Pool("cpu", rsp.PoolConfig(1, [rsp.BlockSpec("s", (4,))], 8))
    s1 = rsp.Step(1, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s1)
    assert p._last_rows is None  # not a type the cache keeps yet
    assert rsp.pool.keep_row_type(Seg)
    s2 = rsp.Step(2, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s2, prev=s1)
    s3 = rsp.Step(3, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s3, prev=s2)
    assert s3._wire[1].keep is s2._wire[1].keep  # equal rows: the bytes reused
    p.commit(s3)
    p.cleanup()


def test_planning_without_an_admit_admits_first(pool):
    c = ctx(["a"])
    st = step(("a", "main", 1))
    assert pool.plan(st, c)["main"].host_slot_indices == [1]
    pool.commit(st, c)
    pool.commit(step(("b", "main", 1)), ctx(["b"]))  # a request the pool never saw
    assert "b" not in pool._slots  # the original's commit had nothing to record either


def test_a_step_whose_requests_were_all_removed_ends_at_a_later_commit():
    # The original's runner unwinds a live step whose forward raised by
    # removing its requests; it never commits or rolls the step back.
    pool = build(max_slots=4)  # 3 usable
    failed, c = step(("a", "main", 1), ("b", "main", 1)), ctx(["a", "b"])
    assert pool.admit(failed, c).ok
    for i in pool.plan(failed, c)["main"].host_slot_indices:
        pool.block("state", 0)[i] = 7.0  # written before the raise
    pool.remove_request("a")
    pool.remove_request("b")
    assert pool.num_free_slots == 1  # their slots wait for the step's end
    nxt, c2 = step(("c", "main", 1)), ctx(["c"])
    assert pool.admit(nxt, c2).ok and pool.num_free_slots == 0
    assert pool._slots["c"]["main"].index not in (1, 2)  # not while the step may run
    run(pool, nxt, c2)  # a later step committed: the failed one is over
    assert pool.num_free_slots == 2
    assert torch.count_nonzero(pool.block("state", 0)[1:3]) == 0  # zeroed on release
    pool.commit(failed, c)  # a late commit of it records nothing
    assert "a" not in pool._slots and pool.num_free_slots == 2
    # a step with a request left is not ended: it may still be committed
    kept, c3 = step(("c", "main", 1), ("d", "main", 1)), ctx(["c", "d"])
    assert pool.admit(kept, c3).ok
    pool.plan(kept, c3)
    pool.remove_request("d")
    run(pool, step(("e", "main", 1)), ctx(["e"]))
    assert pool.num_free_slots == 0  # d's slot still waits
    pool.commit(kept, c3)
    assert pool.num_free_slots == 1 and pool._slots["c"]["main"].has_state
    pool.cleanup()


def test_a_refused_live_admit_ends_a_step_whose_requests_were_all_removed():
    # The runner's unwind left every slot with a step no later commit can
    # end: the pool would refuse the next step for ever. The refused live
    # admit ends it and takes its slots; a stage ahead does not.
    pool = build(max_slots=4)  # 3 usable
    failed, c = step(("a", "main", 1), ("b", "main", 1), ("c", "main", 1)), ctx(["a", "b", "c"])
    assert pool.admit(failed, c).ok
    pool.plan(failed, c)
    for rid in "abc":
        pool.remove_request(rid)
    assert pool.num_free_slots == 0
    ahead = ctx(["d"], is_preplan=True)
    assert not pool.admit(step(("d", "main", 1)), ahead).ok
    assert pool.num_free_slots == 0
    nxt, c2 = step(("d", "main", 1)), ctx(["d"])
    assert pool.admit(nxt, c2).ok and pool.num_free_slots == 2
    run(pool, nxt, c2)
    assert pool._slots["d"]["main"].has_state
    # a newer step left the same way is ended by the commit after it
    older, c3 = step(("d", "main", 1)), ctx(["d"])
    assert pool.admit(older, c3).ok
    pool.plan(older, c3)
    newer, c4 = step(("e", "main", 1), ("f", "main", 1)), ctx(["e", "f"])
    assert pool.admit(newer, c4).ok
    pool.plan(newer, c4)
    pool.remove_request("e")
    pool.remove_request("f")
    pool.commit(older, c3)  # newer than the commit: still in flight
    assert pool.num_free_slots == 0
    assert pool.admit(step(("g", "main", 1)), ctx(["g"])).ok
    assert pool.num_free_slots == 1
    pool.cleanup()


def test_a_step_ended_with_its_requests_plans_as_padding_and_commits_as_nothing():
    # Admitted, its requests all removed before its plan (clients gone), then
    # ended by a refused live admit: planning it is what the original plans
    # for requests it no longer holds, and neither call takes the ids up again.
    pool = build(max_slots=4)  # 3 usable
    gone, c = step(("a", "main", 1), ("b", "main", 2), ("a", "draft", 1)), ctx(["a", "b"])
    assert pool.admit(gone, c).ok
    for rid in "ab":
        pool.remove_request(rid)
    nxt, c2 = step(("c", "main", 1)), ctx(["c"])
    assert pool.admit(nxt, c2).ok  # refused at first: ends `gone`, then fits
    plan = pool.plan(gone, c)
    assert list(plan) == ["main", "draft"]
    m = plan["main"]
    assert (m.num_rows, m.slot_indices.tolist(), m.has_state.tolist()) == \
        (2, [SINK_SLOT, SINK_SLOT], [False, False])
    assert (m.host_slot_indices, m.host_has_state) == ([SINK_SLOT] * 2, [False] * 2)
    assert pool.addressing("draft").slot_indices.tolist() == [SINK_SLOT]
    pool.commit(gone, c)
    assert set(pool._slots) == {"c"}
    run(pool, nxt, c2)
    assert pool.num_free_slots == 2 and pool._slots["c"]["main"].has_state
    pool.cleanup()


def test_rsps_own_step_api_still_works_through_the_seed_class():
    p = RecurrentStatePool("cpu", rsp.PoolConfig(1, [rsp.BlockSpec("s", (4,))], 4))
    s = rsp.Step(7, [("a", "main", 1)])
    out = p.admit(s)
    assert isinstance(out, rsp.AdmitOutcome) and out.ok  # rsp's own outcome
    assert p.plan(s) == 7
    assert isinstance(p.addressing(), rsp.RecurrentAddressing)
    p.commit(s)
    assert p.holding("a").has_state
    # and the engine path after it picks ids above the caller's
    run(p, step(("b", "main", 1)), ctx(["b"]))
    assert p.addressing().step_id > 7
    p.cleanup()


def test_cleanup_refuses_later_calls_and_is_idempotent():
    p = build()
    view = p.block("state", 0)
    p.cleanup()
    p.cleanup()
    with pytest.raises(rsp.RspError, match="RSP_ESHUTDOWN"):
        p.block("state", 0)
    with pytest.raises(rsp.RspError, match="RSP_ESHUTDOWN"):
        p.admit(step(("a", "main", 1)), ctx(["a"]))
    assert view.shape == (8, 2, 4, 4)  # views stay valid


def test_block_waits_for_device_work_queued_before_it(pool):
    # The original's copies were done when commit returned; rsp's run on the
    # device after the forward. block() waits for them, so a view read
    # after commit sees what the original's would.
    run(pool, step(("a", "main", 2)), ctx(["a"]))
    pool.block("state", 0)[1] = 6.0
    st, c = step(("a", "main", 1), post=[("main", "copy")]), ctx(["a"])
    assert pool.admit(st, c).ok
    pool.plan(st, c)
    fence = rsp.HostFence()
    pool.commit(st, c, forward_done=(fence, 1))  # the forward has not finished
    dst = pool._slots["a"]["copy"].index
    got = []
    reader = threading.Thread(target=lambda: got.append(pool.block("state", 0)[dst].clone()))
    reader.start()
    time.sleep(0.2)
    early = list(got)
    fence.signal(1)  # before any assert: cleanup waits for every forward_done
    reader.join(10)
    assert not early  # it waited for the post-fork, which waited for the forward
    assert got and bool((got[0] == 6.0).all())


# --- the import alias ------------------------------------------------------------------

_ALIASED = r"""
import sys, torch, rsp.seed
assert "mstar" not in sys.modules
names = rsp.seed.install_alias()
from mstar.engine.resources.base import EngineResourceInfo
from mstar.engine.resources.recurrent.config import (RecurrentBlockConfig, RecurrentStateConfig,
                                                     RecurrentStateSpec, RecurrentStep)
from mstar.engine.resources.recurrent.pool import SINK_SLOT, RecurrentStatePool
from mstar.engine.resources.step import Segment, StepContext
import mstar.engine.resources.recurrent.pool as mod
assert mod is rsp.seed and RecurrentStatePool is rsp.RecurrentStatePool
spec = RecurrentStateSpec("gdn_state", {"llm"}, RecurrentStateConfig(
    num_layers=1, blocks={"state": RecurrentBlockConfig(shape=(4,), dtype=torch.float32)},
    max_slots=3))
pool = RecurrentStatePool.build(spec, EngineResourceInfo(device=torch.device("cpu")))
st = RecurrentStep(segments=(Segment("r", "main", 1),))
ctx = StepContext(request_ids=("r",), graph_walk="decode", slot=0, capture=False)
assert pool.admit(st, ctx).ok
print(pool.plan(st, ctx)["main"].host_slot_indices, SINK_SLOT, sorted(names)[0],
      rsp.seed.install_alias())
try:
    import mstar.engine.resources.kv.manager
except ModuleNotFoundError:
    print("no kv")
"""


def test_install_alias_runs_code_written_for_the_original():
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", _ALIASED], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[1] 0 mstar ()", "no kv"]


_RUNNER = r"""
import torch, rsp.seed
rsp.seed.install_alias(engine_stubs=True)
from mstar.engine.resources import AdmitOutcome, AllocationFailed, Resource, StepRunner, SubmoduleStep
from mstar.engine.resources.runner import StepRunner as Runner2
from mstar.engine.resources.recurrent.pool import RecurrentStatePool, RecurrentStep
from mstar.engine.resources.step import Segment, StepContext
assert Runner2 is StepRunner

class Later(Resource):  # planned after the pool; refuses when told to
    refuse = False
    def depends_on(self):
        return {"pool"}
    def admit(self, step, ctx):
        if self.refuse:
            return AdmitOutcome(False, True, AllocationFailed("no", 1, "main", "b"))
        return AdmitOutcome(True)

pool = RecurrentStatePool("cpu", rsp.seed.RecurrentStateConfig(
    num_layers=1, blocks={"s": rsp.seed.RecurrentBlockConfig((4,), torch.float32)}, max_slots=5))
later = Later()
run = StepRunner({"later": later, "pool": pool})
def step(rids, preplan=False):
    segs = [Segment(r, "main", 2) for r in rids]
    st = SubmoduleStep(steps={k: RecurrentStep() for k in ("pool", "later")}, segments=segs)
    st.set_ctx(StepContext(request_ids=tuple(rids), graph_walk="prefill", slot=0, capture=False,
                           is_preplan=preplan))
    return st
for r in "ab":
    run.ingest_request(r, {})
later.refuse = True
o = run.admit(step("ab"))
print(o.ok, o.failed_resource, pool.num_free_slots, pool._slots["a"])
later.refuse = False
st = step("ab", preplan=True)
print(run._preplan_order, run.pre_admit(st).ok, pool.num_free_slots)
run.pre_plan(st)
run.clear_preplan()
print(pool.num_free_slots, pool._free)
st = step("ab")
print(run.admit(st).ok, sorted(run.plan(st)), run.commit(st), pool._slots["b"]["main"].has_state)
"""


def test_install_alias_stands_in_for_the_engines_runner():
    # The original's own pool tests drive it through the engine's runner:
    # a refused admit is unwound on every resource it reached.
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", _RUNNER], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["False later 4 {}", "['pool'] True 2",
                                         "4 [4, 3, 2, 1]", "True ['later', 'pool'] None True"]


def test_the_stand_in_runner_clears_a_stale_stage_as_the_originals_does():
    # The engine's runner keeps a stage while the live step is the one
    # planned ahead and clears every resource's stage before admitting
    # another; a backend that pre-plans relies on it.
    from rsp.seed_engine import Resource, ResourceStep, StepRunner, SubmoduleStep

    class Backend(Resource):
        supports_preplan = True
        cleared = 0

        def clear_preplan(self):
            self.cleared += 1

    pool, backend = build(), Backend()
    runner = StepRunner({"gdn_state": pool, "backend": backend})

    def sub(rids, **kw):
        segs = tuple(Segment(r, "main", 1) for r in rids)
        return SubmoduleStep(steps={"gdn_state": RecurrentStep(segments=segs),
                                    "backend": ResourceStep(segments=segs)}, _ctx=ctx(rids, **kw))

    for rids in (["a"], ["a"]):  # planned ahead, then the same step live: promoted
        ahead = sub(rids, is_preplan=True)
        assert runner.pre_admit(ahead).ok
        runner.pre_plan(ahead)
        live = sub(rids)
        assert runner.admit(live).ok
        assert runner.plan(live)["gdn_state"]["main"].host_slot_indices == [1]
        runner.commit(live)
    assert backend.cleared == 0
    ahead = sub(["a", "b"], is_preplan=True)
    assert runner.pre_admit(ahead).ok
    runner.pre_plan(ahead)
    assert pool._slots["b"]["main"].index == 2
    live = sub(["a"])  # another step: the stage is cleared before its admit
    assert runner.admit(live).ok
    assert backend.cleared == 1 and not pool._preplanned and pool._slots["b"] == {}
    runner.plan(live)
    runner.commit(live)
    assert pool.num_free_slots == 6
    pool.cleanup()


def test_the_stand_in_spec_takes_the_state_dtype_override():
    spec = RecurrentStateSpec("s", ["llm"], config())
    conv = spec.config.blocks["conv"]
    spec.apply_yaml_overrides(max_slots=9, state_dtype="float64")
    assert spec.config.max_slots == 9 and spec.config.blocks["state"].dtype is torch.float64
    assert spec.config.blocks["state"].shape == (2, 4, 4) and spec.config.blocks["conv"] is conv
    for bad in ("float33", "nn"):
        with pytest.raises(ValueError, match="not a torch dtype"):
            spec.apply_yaml_overrides(state_dtype=bad)
    assert spec.depends_on() == set()  # the engine's spec hook, read when it resolves specs


_WITH_ENGINE = r"""
import sys, rsp.seed
assert rsp.seed.install_alias() == ("mstar.engine.resources.recurrent.pool",)
import mstar.engine.resources.recurrent.pool as mod
import mstar.engine.resources.recurrent as package
assert mod is rsp.seed and package.pool is rsp.seed
assert package.RecurrentStatePool is rsp.seed.RecurrentStatePool  # its own import, aliased
assert package.config.MARK == "the engine's"  # the engine's other modules stay its own
print("ok")
"""


def _fake_engine(root, recurrent_init):
    pkg = root / "mstar" / "engine" / "resources" / "recurrent"
    pkg.mkdir(parents=True)
    for d in (pkg.parents[2], pkg.parents[1], pkg.parents[0]):
        (d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(recurrent_init)
    (pkg / "config.py").write_text("MARK = \"the engine's\"\n")
    (pkg / "pool.py").write_text("raise ImportError('the original pool was imported')\n")


def test_install_alias_with_the_engine_installed_imports_its_packages(tmp_path):
    # With the engine importable only the pool is aliased; an import of the
    # pool by its full name must still reach it through the packages above.
    _fake_engine(tmp_path, "from . import config\n"
                           "from mstar.engine.resources.recurrent.pool import RecurrentStatePool\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, str(tmp_path)]))
    r = subprocess.run([sys.executable, "-c", _WITH_ENGINE], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"


def test_install_alias_leaves_nothing_when_the_engine_fails_to_import(tmp_path):
    _fake_engine(tmp_path, "raise RuntimeError('engine broken')\n")
    code = ("import sys, rsp.seed\n"
            "try:\n    rsp.seed.install_alias()\n"
            "except RuntimeError as e:\n    print(e)\n"
            "print('mstar.engine.resources.recurrent.pool' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, str(tmp_path)]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["engine broken", "False"]


# --- what the seed's class does differently (docs/python.md) ----------------------


def test_change_admit_is_all_or_nothing():
    # The original kept the slots it took before running out (until the
    # runner's rollback_admit); rsp leaves the pool as it was.
    pool = build(max_slots=4)
    before = pool._free
    out = pool.admit(step(*[(r, "main", 1) for r in "abcd"]), ctx("abcd"))
    assert not out.ok and out.reason.request_id == "d"
    assert pool._free == before and pool.num_free_slots == 3
    assert all(pool._slots[r] == {} for r in "abcd")
    # and the step one request shorter gets the slots in order
    assert pool.admit(step(*[(r, "main", 1) for r in "abc"]), ctx("abc")).ok
    assert [pool._slots[r]["main"].index for r in "abc"] == [1, 2, 3]
    pool.cleanup()


def test_change_pages_short_is_the_whole_steps_shortfall():
    pool = build(max_slots=3)  # 2 usable, 5 requests: 3 short (the original said 1)
    out = pool.admit(step(*[(r, "main", 1) for r in "abcde"]), ctx("abcde"))
    assert out.reason.pages_short == 3 and out.reason.request_id == "c"
    pool.cleanup()


def test_change_fork_targets_are_allocated_in_row_order(pool):
    # The original walked a set of rids (hash order, differing between
    # processes, so TP ranks could disagree); rsp takes the rows' order.
    st = step(("b", "main", 1), ("a", "main", 1), pre=[("main", "draft")])
    run(pool, st, ctx(["b", "a"]))
    assert [pool._slots[r]["draft"].index for r in "ba"] == [3, 4]


def test_change_staged_and_live_plans_are_separate(pool):
    run(pool, step(("a", "main", 1)), ctx(["a"]))
    live = pool.addressing()
    c = ctx(["b"], is_preplan=True)
    st = step(("b", "main", 1))
    assert pool.admit(st, c).ok
    staged = pool.plan(st, c)["main"]
    # The original's addressing() answered the stage from here on.
    assert pool.addressing() is live and staged.staged and not live.staged
    # A live plan of another step consumes the stage, as the original's
    # next plan did, but plans its own rows (the original returned the
    # stage's).
    other = step(("a", "main", 1))
    assert pool.admit(other, ctx(["a"])).ok
    assert pool.plan(other, ctx(["a"]))["main"].host_slot_indices == [1]
    pool.commit(other, ctx(["a"]))
    c2 = ctx(["c"], is_preplan=True)
    assert pool.admit(step(("c", "main", 1)), c2).ok
    pool.plan(step(("c", "main", 1)), c2)  # a new stage: the old one is gone


def test_change_removal_during_an_in_flight_step_is_safe(pool):
    st, c = step(("a", "main", 1)), ctx(["a"])
    assert pool.admit(st, c).ok
    pool.plan(st, c)
    pool.remove_request("a")  # while a's forward may still write slot 1
    assert "a" not in pool._slots and pool.num_free_slots == 6  # the original: 7
    other, c2 = step(("b", "main", 1)), ctx(["b"])
    assert pool.admit(other, c2).ok and pool._slots["b"]["main"].index != 1
    pool.commit(st, c)  # a's forward is over: now its slot is freed
    assert pool.num_free_slots == 6
    pool.commit(other, c2)


def test_change_generations_are_pool_wide(pool):
    # The original counted forks per slot from 0; rsp's counter is the
    # pool's, moved by every assignment, fork and reset.
    run(pool, step(("a", "main", 1), ("b", "main", 1)), ctx(["a", "b"]))
    ga, gb = pool._slots["a"]["main"].generation, pool._slots["b"]["main"].generation
    assert 0 < ga < gb
    pool.reset_request("a")
    assert pool._slots["a"]["main"].generation > gb


def test_change_duplicate_rows_are_refused(pool):
    # Two rows on one slot make an indexed scatter nondeterministic; the
    # original planned both onto it.
    with pytest.raises(ValueError) as e:
        pool.admit(step(("a", "main", 1), ("a", "main", 1)), ctx(["a"]))
    assert e.value.name == "RSP_EDUPROW" and pool.num_free_slots == 7 and not pool._recs


def test_change_private_slots_is_a_snapshot(pool):
    # The original's tests set up "a slot with state" by writing its
    # SlotState; here has_state comes from commits only.
    st, c = step(("a", "main", 1), ("a", "draft", 1), pre=[("main", "draft")]), ctx(["a"])
    assert pool.admit(st, c).ok
    pool._slots["a"]["main"].has_state = True  # changes nothing
    assert pool._slots["a"]["main"].has_state is False
    assert pool.plan(st, c)["draft"].host_has_state == [False]  # the fork's source had none
    pool.commit(st, c)
    assert pool._slots["a"]["main"].has_state is True  # written by the committed step


def test_change_has_state_counts_an_earlier_step_in_flight(pool):
    # Overlap scheduling: step 2 is planned while step 1's forward runs. The
    # original read the flag step 1 had not set yet (a kernel would zero
    # the state step 1 is writing).
    s1, c1 = step(("a", "main", 4)), ctx(["a"])
    assert pool.admit(s1, c1).ok
    pool.plan(s1, c1)
    s2, c2 = step(("a", "main", 1)), ctx(["a"])
    assert pool.admit(s2, c2).ok
    assert pool.plan(s2, c2)["main"].host_has_state == [True]
    pool.commit(s1, c1)
    pool.commit(s2, c2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")
def test_seed_class_on_cuda_orders_the_device_work_on_the_current_stream():
    spec = RecurrentStateSpec("s", {"llm"}, config())
    p = RecurrentStatePool.build(spec, EngineResourceInfo(device=torch.device("cuda", 0)))
    state = p.block("state", 0)
    assert state.is_cuda
    st, c = step(("a", "main", 4)), ctx(["a"])
    assert p.admit(st, c).ok
    m = p.plan(st, c)["main"]
    assert m.slot_indices.is_cuda and m.host_slot_indices == [1]
    state[m.slot_indices.long()] = 2.0  # the forward, on the current stream
    p.commit(st, c)  # forward_done: an event on the current stream
    st2 = step(("a", "main", 1), ("a", "draft", 1), pre=[("main", "draft")], post=[("main", "b")])
    assert p.admit(st2, c).ok
    plan = p.plan(st2, c)  # the current stream waits for the fork's copy
    d = plan["draft"].host_slot_indices[0]
    assert torch.equal(state[d], state[1]) and plan["draft"].host_has_state == [True]
    state[1] = 3.0
    p.commit(st2, c)
    b = p._slots["a"]["b"].index
    assert bool((p.block("state", 0)[b] == 3.0).all())  # block() waited for the post-fork
    p.reset_request("a")
    assert int(torch.count_nonzero(p.block("state", 0))) == 0
    whole = p._blocks["state"]  # the original's private whole block, on the device
    assert whole.is_cuda and whole.shape == (LAYERS, 8, 2, 4, 4)
    assert whole[1].data_ptr() == p.block("state", 1).data_ptr()
    p.cleanup()
