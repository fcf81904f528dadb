#!/usr/bin/env python3
"""The seed's class against the Python original: random engine call
sequences run on both, compared after every call.

    MSTAR_ANCHOR_DIR=DIR RSP_LIBRARY=build/src/librsp.so PYTHONPATH=python \\
        /usr/bin/python3 tests/python/differential.py [--seeds N] [--ops N]

DIR holds a copy of the original's `mstar` package (docs/python.md, "The
original's own tests"). Each seed builds a small pool on both sides (4, 6
or 9 slots, so admits get refused) and runs --ops calls: ingest, remove,
reset (free or not), and steps of random rows (labels main and draft,
spans 0-2) with a pre- or post-fork main -> draft, some captured, some
padded to a bucket with rows of ids that are not requests (most of those
under a lease, a graph replay), some planned
ahead (is_preplan) and then promoted or cleared and rolled back, some
refused (then rolled back, as the runner does) or rolled back after the
plan. After every call the two must agree on:

- admit's ok;
- every plan (staged and live): each label's slot indices and has_state
  over its rows (and rsp's host lists equal to its tensors' rows), and under a lease whether its tensors are the storage of
  the lease's last plan;
- `addressing(label)` after a live plan, of a planned label and of one
  the step did not plan (KeyError);
- num_free_slots and every (rid, label) holding: slot index and has_state;
- the bytes of every held slot at each plan (the original's forward is
  simulated: each row with span > 0 writes a value of its own), which
  checks zeroing and fork copies.

A step forks for one request at most: the original reserves the fork
targets of several requests in set order (its string hashes), rsp in the
order of the rows (docs/python.md, "What the seed's class does
differently"). Exit status 0 when every seed agrees, 1 at the first that
does not (its last calls printed), 77 when the original does not import.
SPDX-License-Identifier: Apache-2.0
"""
import os
import random
import sys

import torch

RIDS = ("a", "b", "c", "d", "e")


def load(anchor):
    """The original's pool class and the engine classes both sides take."""
    sys.path.insert(0, anchor)
    from mstar.engine.resources.recurrent.config import (RecurrentBlockConfig,
                                                         RecurrentStateConfig, RecurrentStep)
    from mstar.engine.resources.recurrent.pool import RecurrentStatePool
    from mstar.engine.resources.step import BucketKey, Segment, SlotLease, StepContext

    eng = dict(Segment=Segment, StepContext=StepContext, RecurrentStep=RecurrentStep,
               SlotLease=SlotLease, BucketKey=BucketKey,
               RecurrentStateConfig=RecurrentStateConfig,
               RecurrentBlockConfig=RecurrentBlockConfig)
    return RecurrentStatePool, type("Engine", (), eng)


class Diverged(Exception):
    pass


class Run:
    """One seed's sequence on the original (o) and rsp's seed class (r)."""

    def __init__(self, orig_cls, eng, seed):
        import rsp.seed

        self.eng = eng
        self.rng = random.Random(seed)
        slots = self.rng.choice((4, 6, 9))

        def config():
            return eng.RecurrentStateConfig(
                num_layers=2, max_slots=slots,
                blocks={"state": eng.RecurrentBlockConfig(shape=(2,), dtype=torch.float32)})

        self.o = orig_cls(torch.device("cpu"), config())
        self.r = rsp.seed.RecurrentStatePool(torch.device("cpu"), config())
        self.max_bs = self.rng.choice((4, 8))
        self.both("build_cuda_graph_buffers", [], self.max_bs, 1)
        self.buffers = ({}, {})  # per side: (lease slot, label) -> the last plan's data_ptr
        self.live = set()
        self.log = []
        self.compared = 0  # held slots whose bytes were compared non-zero

    def both(self, name, *args, **kw):
        return [getattr(p, name)(*args, **kw) for p in (self.o, self.r)]

    def same(self, what, pair):
        if pair[0] != pair[1]:
            raise Diverged(f"{what}: the original {pair[0]!r}, rsp {pair[1]!r}")

    def holdings(self, p):
        return {rid: {lab: (s.index, s.has_state) for lab, s in labs.items()}
                for rid, labs in p._slots.items() if labs}

    def check_pools(self):
        self.same("num_free_slots", self.both("__getattribute__", "num_free_slots"))
        self.same("holdings", [self.holdings(p) for p in (self.o, self.r)])

    def check_bytes(self):
        for rid, labs in self.holdings(self.o).items():
            for lab, (index, _) in labs.items():
                got = [p._blocks["state"][:, index].tolist() for p in (self.o, self.r)]
                self.same(f"bytes of {rid}/{lab} (slot {index})", got)
                self.compared += any(x != 0 for row in got[0] for x in row)

    @staticmethod
    def rows(plan):
        return {lab: (a.slot_indices[:a.num_rows].tolist(), a.has_state[:a.num_rows].tolist())
                for lab, a in plan.items()}

    def host_mirrors(self, plan):
        """rsp's host lists (the original's copy has none) are the tensors'
        real rows."""
        for lab, a in plan.items():
            n = a.num_rows
            want = (a.slot_indices[:n].tolist(), a.has_state[:n].tolist())
            self.same(f"rsp's host lists of {lab!r} against its tensors",
                      [want, (list(a.host_slot_indices), list(a.host_has_state))])

    def read(self, p, label):
        """addressing(label) after a live plan: its rows, or the exception's type."""
        try:
            return self.rows({label: p.addressing(label)})
        except Exception as e:  # the original raises KeyError for a label not planned
            return "KeyError" if isinstance(e, KeyError) else repr(e)

    def same_buffers(self, plans, lease):
        """Under a lease: whether each label's tensors are the storage of the
        key's last plan, on both sides (the original's graph buffers)."""
        if lease is None:
            return
        seen = []
        for side, plan in zip(self.buffers, plans):
            mine = {}
            for lab, a in plan.items():
                ptr = a.slot_indices.data_ptr()
                mine[lab] = side.get((lease.slot, lab), ptr) == ptr
                side[(lease.slot, lab)] = ptr
            seen.append(mine)
        self.same("leased tensors kept", seen)

    def forward(self, segs, plan, value):
        """Each planned row with span > 0 writes a value of its own."""
        for lab, (indices, _) in plan.items():
            for j, seg in enumerate(s for s in segs if s.label == lab):
                if seg.span > 0 and indices[j] > 0:
                    for p in (self.o, self.r):
                        p._blocks["state"][:, indices[j]].fill_(value + j / 16)

    def step(self, i):
        eng, rng = self.eng, self.rng
        rids = rng.sample(sorted(self.live), rng.randint(1, len(self.live)))
        segs = []
        for rid in rids:
            segs.append(eng.Segment(rid, "main", rng.choice((0, 1, 1, 2))))
            if rng.random() < 0.2:
                segs.append(eng.Segment(rid, "draft", 1))
        pre = post = ()
        if rng.random() < 0.3:
            segs = [s for s in segs if s.request_id == rids[0]]  # one request forks
            if rng.random() < 0.5:
                pre = (("main", "draft"),)
            else:
                post = (("main", "draft"),)
        kind = rng.random()
        capture, preplan, padded = kind < 0.08, 0.08 <= kind < 0.25, 0.25 <= kind < 0.35
        real = tuple(dict.fromkeys(s.request_id for s in segs))
        pads = ()
        if padded:
            pads = tuple(f"pad{j}" for j in range(rng.randint(1, 2)))
            segs += [eng.Segment(p, "main", 1) for p in pads]
        lease = None
        if padded and len(segs) <= self.max_bs and rng.random() < 0.7:
            # a graph replay: the bucket's size holds every row
            lease = eng.SlotLease(slot=rng.randint(0, 1),
                                  bucket=eng.BucketKey("decode", self.max_bs, self.max_bs))
        step = eng.RecurrentStep(segments=tuple(segs), pre_forks=pre, post_forks=post)
        ctx = eng.StepContext(request_ids=real, graph_walk="decode", slot=0, capture=capture,
                              slot_lease=lease)
        if padded:
            ctx.set_padded_rids(real + pads)
        self.log.append(f"step {[tuple(s) for s in segs]} pre={pre} post={post} "
                        f"capture={capture} preplan={preplan} padded={padded} "
                        f"lease={None if lease is None else lease.slot}")
        ok = [o.ok for o in self.both("admit", step, ctx)]
        self.same("admit ok", ok)
        if not ok[0]:
            self.log.append("  refused: rolled back")
            self.both("rollback_admit", step, ctx)
            return
        if preplan:
            ahead = eng.StepContext(request_ids=real, graph_walk="decode", slot=0,
                                    capture=False, is_preplan=True, slot_lease=lease)
            if padded:
                ahead.set_padded_rids(real + pads)
            staged = self.both("plan", step, ahead)
            self.same("staged plan", [self.rows(p) for p in staged])
            self.host_mirrors(staged[1])
            self.same_buffers(staged, lease)
            if rng.random() < 0.3:
                self.log.append("  stage cleared: rolled back")
                self.both("clear_preplan")
                self.both("rollback_admit", step, ctx)
                return
        planned = self.both("plan", step, ctx)
        plan = [self.rows(p) for p in planned]
        self.same("plan", plan)
        self.host_mirrors(planned[1])
        self.same_buffers(planned, lease)
        for label in ("main", "draft"):
            self.same(f"addressing({label!r})", [self.read(p, label) for p in (self.o, self.r)])
        self.check_bytes()
        self.forward(segs, plan[0], float(i + 1))
        if rng.random() < 0.1:
            self.log.append("  rolled back after its plan")
            self.both("rollback_admit", step, ctx)
        else:
            self.both("commit", step, ctx)

    def call(self, i):
        rng = self.rng
        op = rng.random()
        if op < 0.15:
            rid = rng.choice(RIDS)
            self.log.append(f"ingest {rid}")
            self.both("ingest_request", rid)
            self.live.add(rid)
        elif op < 0.25 and self.live:
            rid = rng.choice(sorted(self.live))
            self.log.append(f"remove {rid}")
            self.both("remove_request", rid)
            self.live.discard(rid)
        elif op < 0.30 and self.live:
            rid, free = rng.choice(sorted(self.live)), rng.random() < 0.5
            self.log.append(f"reset {rid} free={free}")
            self.both("reset_request", rid, free=free)
        elif self.live:
            self.step(i)
        self.check_pools()

    def close(self):
        self.r.cleanup()


def main():
    anchor = os.environ.get("MSTAR_ANCHOR_DIR")
    if not anchor:
        print("SKIPPED: MSTAR_ANCHOR_DIR does not name a copy of the original")
        return 77
    try:
        orig_cls, eng = load(anchor)
    except Exception as e:  # a copy that does not import: say why
        print(f"SKIPPED: the original did not import from {anchor}: {type(e).__name__}: {e}")
        return 77
    seeds = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 100
    ops = int(sys.argv[sys.argv.index("--ops") + 1]) if "--ops" in sys.argv else 150
    compared = 0
    for seed in range(seeds):
        run = Run(orig_cls, eng, seed)
        try:
            for i in range(ops):
                run.call(i)
        except Diverged as e:
            print(f"seed {seed}, call {i}: {e}")
            for line in run.log[-8:]:
                print("   ", line)
            return 1
        finally:
            run.close()
        compared += run.compared
    print(f"{seeds} seeds x {ops} calls: the seed's class and the original agree "
          f"({compared} non-zero slot contents compared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
