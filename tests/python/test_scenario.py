# The seed page's methods in the order an engine's runner calls them:
# ingest, admit, plan, a forward on the tensors, commit, a draft fork,
# reset, remove; every byte of every slot checked against a model.
# SPDX-License-Identifier: Apache-2.0
import torch

import rsp
from conftest import small_config

LAYERS = 2


def forward(pool, labels, step_id):
    """A stand-in model: each row's state becomes f(old state, step id)."""
    for label in labels:
        a = pool.addressing(label)
        for layer in range(LAYERS):
            for name in ("ssm", "conv"):
                t = pool.block(name, layer)
                for row in range(a.num_rows):
                    s = int(a.slot_indices[row])
                    old = t[s].float() if a.has_state[row] else torch.zeros_like(t[s].float())
                    t[s] = (old * 0.5 + step_id + layer).to(t.dtype)


def expect(pool, model):
    """Every slot: the model's bytes for held slots, zero for the rest."""
    held = {}
    for (rid, label), state in model.items():
        h = pool.holding(rid, label)
        assert h is not None, (rid, label)
        held[h.index] = state
    for layer in range(LAYERS):
        for name in ("ssm", "conv"):
            t = pool.block(name, layer)
            for s in range(pool.max_slots):
                if s in held:
                    assert torch.equal(t[s], held[s][(name, layer)]), (s, name, layer)
                else:
                    assert torch.count_nonzero(t[s]) == 0, (s, name, layer)


def snapshot(pool, rid, label):
    h = pool.holding(rid, label)
    return {(n, layer): pool.block(n, layer)[h.index].clone()
            for n in ("ssm", "conv") for layer in range(LAYERS)}


def test_engine_sequence_every_byte():
    pool = rsp.RecurrentStatePool("cpu", small_config(max_slots=8, layers=LAYERS))
    model = {}
    for rid in ("req-a", "req-b"):
        pool.ingest_request(rid)
    # prefill, then two decode steps
    for sid in (1, 2, 3):
        step = rsp.Step(sid, [("req-a", "main", 16 if sid == 1 else 1),
                              ("req-b", "main", 8 if sid == 1 else 1)])
        assert pool.admit(step)
        pool.plan(step)
        forward(pool, ["main"], sid)
        pool.commit(step)
    for rid in ("req-a", "req-b"):
        model[(rid, "main")] = snapshot(pool, rid, "main")
    expect(pool, model)
    # a draft for req-a: fork main -> draft before the forward, run the draft
    step = rsp.Step(4, [("req-a", "main", 1), ("req-a", "draft", 1)],
                    pre_forks=[rsp.Fork("main", "draft")])
    assert pool.admit(step)
    pool.plan(step)
    d = pool.addressing("draft")
    assert d.has_state.tolist() == [True]  # the fork gave it main's state
    forward(pool, ["main", "draft"], 4)
    pool.commit(step)
    model[("req-a", "main")] = snapshot(pool, "req-a", "main")
    model[("req-a", "draft")] = snapshot(pool, "req-a", "draft")
    expect(pool, model)
    # accept the draft: release it; reset req-b (zeroed, kept); remove req-a
    pool.release("req-a", "draft")
    del model[("req-a", "draft")]
    pool.reset_request("req-b")
    model[("req-b", "main")] = {k: torch.zeros_like(v) for k, v in model[("req-b", "main")].items()}
    step = rsp.Step(5, [("req-b", "main", 1)])
    assert pool.admit(step)
    pool.plan(step)  # the plan's ready orders the zeroing before we look
    pool.addressing()
    expect(pool, model)
    forward(pool, ["main"], 5)
    pool.commit(step)
    model[("req-b", "main")] = snapshot(pool, "req-b", "main")
    pool.remove_request("req-a")
    del model[("req-a", "main")]
    step = rsp.Step(6, [("req-b", "main", 1)])
    assert pool.admit(step)
    pool.plan(step)
    pool.addressing()
    expect(pool, model)
    pool.commit(step)
    assert pool.num_free_slots == 6
    pool.cleanup()
