#!/usr/bin/env python3
"""A serving loop written against the Python original's RecurrentStatePool,
run unchanged on the original or on rsp's seed class.

    RSP_LIBRARY=build/src/librsp.so PYTHONPATH=python \\
        /usr/bin/python3 tests/python/seed_engine_loop.py [--side rsp]
    MSTAR_ANCHOR_DIR=DIR /usr/bin/python3 tests/python/seed_engine_loop.py --side orig
    MSTAR_ANCHOR_DIR=DIR RSP_LIBRARY=... PYTHONPATH=python \\
        /usr/bin/python3 tests/python/seed_engine_loop.py --side rsp-engine

--side (or SEED_LOOP_SIDE) picks the pool: `orig`, the original's package
from MSTAR_ANCHOR_DIR (docs/python.md, "The original's own tests");
`rsp`, rsp's seed class behind `rsp.seed.install_alias()` with
rsp.seed_engine's stand-ins for the engine's modules; `rsp-engine`, rsp's
seed class with the original's engine modules (step, config, base). Below
the imports, nothing knows which side it runs on.

The loop serves a tiny Mamba-2-style model (random float64 weights from a
seed; per layer a conv state and an SSM state, the pool's blocks "conv"
and "ssm") with continuous batching on a pool of 4 usable slots: prompts
in chunks mixed with decode rows, arrivals, retirements
(remove_request), admits refused and the request waiting (the step
rolled back with rollback_admit and admitted again without it, as a
runner unwinds), decode steps padded to a CUDA-graph bucket
(ctx.set_padded_rids, a SlotLease with a BucketKey) whose "graph" reads
the addressing tensors it captured at start (build_cuda_graph_buffers,
then a capture step per bucket and lease slot), the next step planned
ahead after each commit (ctx.is_preplan) and promoted by the next live
plan, or cleared when arrivals change the step, and one prompt forked
(post_forks main -> alt) into two sampled continuations. The forward
reads and writes state only at the plan's slot_indices, from zeros where
has_state is False. Every branch's tokens must equal the prompt generated
alone (a plain loop, its state a local); the loop must have exercised
each of the above. Exit 0 when it all holds, 1 otherwise, 77 when torch
or the chosen side is missing.
SPDX-License-Identifier: Apache-2.0
"""
import argparse
import os
import random
import sys
from collections import deque

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def choose_side():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", choices=("orig", "rsp", "rsp-engine"),
                    default=os.environ.get("SEED_LOOP_SIDE", "rsp"))
    ap.add_argument("--seeds", type=int, default=4, help="runs, each of its own random requests")
    ap.add_argument("--trace", action="store_true", help="print each step")
    args = ap.parse_args()
    anchor = os.environ.get("MSTAR_ANCHOR_DIR")
    if args.side in ("orig", "rsp-engine"):
        if not anchor or not os.path.isdir(os.path.join(anchor, "mstar")):
            print(f"SKIPPED: --side {args.side} needs MSTAR_ANCHOR_DIR naming the original's copy")
            sys.exit(77)
        sys.path.insert(0, anchor)
    if args.side != "orig":
        if os.path.isdir(os.path.join(ROOT, "python", "rsp")):
            sys.path.insert(0, os.path.join(ROOT, "python"))
        built = os.path.join(ROOT, "build/src/librsp.so")
        if "RSP_LIBRARY" not in os.environ and os.path.exists(built):
            os.environ["RSP_LIBRARY"] = built
        import rsp.seed

        rsp.seed.install_alias(engine_stubs=args.side == "rsp")
    return args


ARGS = choose_side()
try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed")
    sys.exit(77)

# --- from here on, engine code written for the original ----------------------
from mstar.engine.resources.base import EngineResourceInfo, Resource  # noqa: E402
from mstar.engine.resources.recurrent.config import (RecurrentBlockConfig,  # noqa: E402
                                                     RecurrentStateConfig, RecurrentStateSpec,
                                                     RecurrentStep)
from mstar.engine.resources.recurrent.pool import RecurrentStatePool  # noqa: E402
from mstar.engine.resources.runner import StepRunner  # noqa: E402
from mstar.engine.resources.step import (AdmitOutcome, AllocationFailed, BucketKey,  # noqa: E402
                                         ResourceStep, Segment, SlotLease, StepContext,
                                         SubmoduleStep)

# The model examples/serve_mamba.py serves (plain torch).
sys.path.insert(0, os.path.join(ROOT, "examples"))
from mamba2 import (CONV_CH, D_CONV, D_STATE, F64, HEAD_DIM, HEADS, N_LAYERS,  # noqa: E402
                    VOCAB, Mamba2)

CHUNK, BUCKETS, LEASE_SLOTS = 6, (1, 2, 4, 8), 2
KEY, PAGES, PAGE_TOKENS = "recurrent", "pages", 4


class Pages(Resource):
    """The attention layers' KV pages, as a second resource beside the pool:
    a request reserves the pages of its whole length (ingest's override) at
    its first admit. It does not pre-plan, so a live admit can refuse a
    step the pool admitted ahead; the runner then unwinds the pool too."""

    def __init__(self, total):
        self.free, self.need, self.held, self.reserved = total, {}, {}, []

    @classmethod
    def build(cls, spec, info):
        return cls(spec)

    def ingest_request(self, rid, overrides=None):
        self.need[rid] = overrides

    def remove_request(self, rid):
        self.reset_request(rid, free=True)
        self.need.pop(rid, None)

    def reset_request(self, rid, free=False):
        if free:
            self.free += self.held.pop(rid, 0)

    def admit(self, step, ctx):
        self.reserved = []
        if ctx.capture:
            return AdmitOutcome(ok=True)
        for seg in step.segments:
            rid = seg.request_id
            if ctx.is_padding_row(rid) or rid in self.held:
                continue
            if self.need[rid] > self.free:
                return AdmitOutcome(ok=False, reason=AllocationFailed(
                    message=f"{self.free} KV pages free, {rid} needs {self.need[rid]}",
                    pages_short=self.need[rid] - self.free, label=seg.label, request_id=rid))
            self.free -= self.need[rid]
            self.held[rid] = self.need[rid]
            self.reserved.append(rid)
        return AdmitOutcome(ok=True)

    def rollback_admit(self, step, ctx):
        for rid in self.reserved:
            self.free += self.held.pop(rid, 0)  # 0: removed since
        self.reserved = []


def sample(logits, gen):
    cdf = torch.cumsum(torch.softmax(logits / 0.8, dim=-1), dim=-1)
    return min(int(torch.searchsorted(cdf, torch.rand(1, generator=gen, dtype=F64))), VOCAB - 1)


class Branch:
    def __init__(self, label, max_new, seed):
        self.label, self.max_new, self.seed = label, max_new, seed
        self.gen = torch.Generator().manual_seed(seed)
        self.tokens = []

    @property
    def done(self):
        return len(self.tokens) == self.max_new


class Request:
    def __init__(self, rid, prompt, arrival, branches):
        self.rid, self.prompt, self.arrival, self.branches = rid, prompt, arrival, branches
        self.pos = 0  # prompt tokens whose effect is in the pool's state
        self.fed = prompt  # what the state is built from: the prompt, then a recompute's tokens
        self.steps = 0  # steps it ran in
        self.waited = 0  # steps it waited at the head of the queue
        self.cancel_after = None
        self.cancelled = self.preempted = False

    @property
    def forks(self):
        return len(self.branches) > 1

    @property
    def done(self):
        return self.cancelled or all(b.done for b in self.branches)


def requests(rng):
    """Ten requests: prompt lengths, arrivals and lengths drawn from rng; one
    forks into two branches, one is cancelled mid-step, and the prompts of
    the first two arrivals are long enough to be chunked."""
    reqs, at = [], 0
    fork_at, cancel_at = rng.randrange(1, 6), rng.randrange(6, 10)
    bad_at = rng.choice([i for i in range(2, 10) if i not in (fork_at, cancel_at)])
    for i in range(10):
        n = rng.randrange(CHUNK + 1, 3 * CHUNK) if i in (0, 1, fork_at) else rng.randrange(1, 12)
        news = ((rng.randrange(3, 8), rng.randrange(3, 10)) if i == fork_at
                else (rng.randrange(2, 10),))
        prompt = [rng.randrange(VOCAB) for _ in range(n)]
        req = Request(f"r{i}", prompt, at, [Branch(("main", "alt")[k], m, 100 * i + k)
                                            for k, m in enumerate(news)])
        req.cancel_after = rng.randrange(1, 4) if i == cancel_at else None
        if i == bad_at:  # a token the model has no embedding for: its forward fails
            prompt[rng.randrange(len(prompt))] = VOCAB
        reqs.append(req)
        at += rng.choice((0, 0, 1, 1, 2, 3))
    return reqs


def alone(model, req):
    """The reference: the prompt generated alone, its state a local."""
    state = [(torch.zeros(1, D_CONV, CONV_CH, dtype=F64),
              torch.zeros(1, HEADS, HEAD_DIM, D_STATE, dtype=F64)) for _ in range(N_LAYERS)]
    if max(req.prompt) >= VOCAB:
        return {b.label: [] for b in req.branches}  # its forward fails
    for tok in req.prompt:
        logits, state = model.step(torch.tensor([tok]), state)
    out = {}
    for b in req.branches:
        gen, st, lg, toks = torch.Generator().manual_seed(b.seed), state, logits, []
        while len(toks) < b.max_new:
            toks.append(sample(lg[0], gen))
            if len(toks) < b.max_new:
                lg, st = model.step(torch.tensor([toks[-1]]), st)
        out[b.label] = toks
    return out


class Server:
    """The engine's side: a scheduler, the runner's calls on the pool, the
    model's forward on the pool's blocks, and "graphs" captured per bucket."""

    def __init__(self, model, reqs, max_slots, pages, overlap, abort_all, sink):
        self.overlap, self.abort_all = overlap, abort_all
        self.model = model
        self.arrivals = deque(sorted(reqs, key=lambda r: r.arrival))
        self.waiting, self.running = deque(), []
        config = RecurrentStateConfig(num_layers=N_LAYERS, max_slots=max_slots,
                                      disable_sink_slot=not sink, blocks={
            "conv": RecurrentBlockConfig(shape=(D_CONV, CONV_CH), dtype=F64),
            "ssm": RecurrentBlockConfig(shape=(HEADS, HEAD_DIM, D_STATE), dtype=F64),
            # the tokens in a slot's state, one per slot: the positions a model reads
            "pos": RecurrentBlockConfig(shape=(1,), dtype=torch.int64, per_layer=False)})
        spec = RecurrentStateSpec(KEY, {"llm"}, config)
        self.pool = RecurrentStatePool.build(spec, EngineResourceInfo(device=torch.device("cpu")))
        self.pages = Pages(total=pages)
        self.runner = StepRunner({KEY: self.pool, PAGES: self.pages})
        # The model binds its state tensors once, at load, as a graph capture needs.
        self.blocks = [(self.pool.block("conv", i), self.pool.block("ssm", i))
                       for i in range(N_LAYERS)]
        self.pos = self.pool.block("pos")
        self.pool.build_cuda_graph_buffers([], max(BUCKETS), 1)
        self.graphs = {}
        self.capture_graphs()
        self.staged = None  # (rows, step, lease, padded rids) planned ahead
        self.n = 0
        self.seen = dict(refused=0, waited=set(), mixed=0, graph=0, eager=0, promoted=0,
                         cleared=0, forked=0, retired=0, cancelled=0, preempted=0,
                         overlapped=0, graph_alt=0, padded=0, failed=0, wrong_pos=0,
                         wrong_addressing=0, restarted=0)

    # -- graphs ---------------------------------------------------------------
    def lease_ctx(self, real, padded, bs, slot, **kw):
        ctx = StepContext(request_ids=list(real), graph_walk="decode", slot=slot,
                          slot_lease=SlotLease(slot=slot, bucket=BucketKey("decode", bs, bs)), **kw)
        ctx.set_padded_rids(list(padded))
        return ctx

    def capture_graphs(self):
        """One capture step per bucket, lease slot and label set (a forked
        request decodes "alt" rows too): the graph keeps the addressing
        tensors it was captured with and reads them at replay."""
        for bs in BUCKETS:
            for slot in range(LEASE_SLOTS):
                for labels in (("main",), ("main", "alt")):
                    pads = [f"pad{i}" for i in range(bs)]
                    segs = tuple(Segment(p, lab, 1) for lab in labels for p in pads)
                    ctx = self.lease_ctx([], pads, bs, slot, capture=True)
                    step = SubmoduleStep(steps={KEY: RecurrentStep(segments=segs),
                                                PAGES: ResourceStep(segments=segs)}, _ctx=ctx)
                    assert self.runner.admit(step).ok
                    plan = self.runner.plan(step)[KEY]
                    self.runner.commit(step)
                    self.graphs[(bs, slot, labels)] = {
                        lab: (plan[lab].slot_indices, plan[lab].has_state) for lab in labels}

    # -- scheduling -----------------------------------------------------------
    def rows_for(self, req):
        if req.pos < len(req.fed):
            return [(req, "main", req.fed[req.pos:req.pos + CHUNK])]
        return [(req, b.label, [b.tokens[-1]]) for b in req.branches if not b.done]

    def fork_due(self, req):
        return req.forks and req.pos < len(req.fed) <= req.pos + CHUNK

    def schedule(self):
        """The rows of the next step: running requests first, then waiting
        ones in arrival order. A step with post_forks forks every request
        in it (the original's _fork_rids), so a forking chunk runs alone."""
        for req in self.running:
            if self.fork_due(req):
                return [(req, "main", req.fed[req.pos:req.pos + CHUNK])], True, []
        rows = [row for req in self.running if not self.fork_due(req) for row in self.rows_for(req)]
        cands = [r for r in self.waiting if not self.fork_due(r)]
        return rows, False, cands

    def declare(self, rows, fork, preplan=False, n=None):
        """The step and its context: a decode-only step runs in a graph
        bucket under a lease, its main rows padded to the bucket; any other
        runs eager, padded to an even batch."""
        segs = [Segment(r.rid, label, len(toks)) for r, label, toks in rows]
        real = [r.rid for r, _, _ in rows]
        mains = sum(1 for _, lab, _ in rows if lab == "main")
        graph = (not fork and rows and all(len(t) == 1 for _, _, t in rows)
                 and mains <= max(BUCKETS))
        lease = None
        if not graph:  # as a data-parallel rank pads
            pads = ["dp_pad"] if len(rows) % 2 else []
            segs += [Segment(p, "main", 1) for p in pads]
            ctx = StepContext(request_ids=real, graph_walk="mixed", slot=0, capture=False,
                              is_preplan=preplan)
            ctx.set_padded_rids(real + pads)
        else:
            bs = next(b for b in BUCKETS if b >= mains)
            pads = [f"pad{i}" for i in range(bs - mains)]
            segs += [Segment(p, "main", 1) for p in pads]
            labels = ("main", "alt") if mains < len(rows) else ("main",)
            lease = (bs, (self.n if n is None else n) % LEASE_SLOTS, labels)
            ctx = self.lease_ctx(real, real + pads, bs, lease[1], capture=False, is_preplan=preplan)
        segs = tuple(segs)
        step = SubmoduleStep(steps={
            KEY: RecurrentStep(segments=segs, post_forks=(("main", "alt"),) if fork else ()),
            PAGES: ResourceStep(segments=segs)}, _ctx=ctx)
        return step, ctx, lease

    def admit(self, preplan):
        """Admit the next step (ahead: the pre-plan pass); on a refusal,
        which the runner has unwound with rollback_admit, try again without
        the refused request and those behind it. Returns (rows, step, ctx,
        lease key, fork) or None when there is nothing to run."""
        rows, fork, cands = self.schedule()
        while True:
            new = [(r, "main", r.fed[:CHUNK]) for r in cands]
            if not rows and not new:
                return None
            step, ctx, lease = self.declare(rows + new, fork, preplan)
            out = (self.runner.pre_admit if preplan else self.runner.admit)(step)
            if out.ok:
                return rows + new, step, ctx, lease, fork
            self.seen["refused"] += 1  # the runner unwound it on every resource it reached
            who = out.reason.request_id
            if fork:  # the fork's branch found no slot: run the others meanwhile
                fork, cands = False, []
                rows = [row for r in self.running if not self.fork_due(r)
                        for row in self.rows_for(r)]
                continue
            k = next((i for i, r in enumerate(cands) if r.rid == who), None)
            if k is None:
                raise AssertionError(f"a running request was refused: {out.reason}")
            for r in cands[k:]:
                self.seen["waited"].add(r.rid)
            cands = cands[:k]

    # -- the loop -------------------------------------------------------------
    def step(self):
        while self.arrivals and self.arrivals[0].arrival <= self.n:
            req = self.arrivals.popleft()
            self.runner.ingest_request(req.rid, {PAGES: -(-(len(req.prompt) + sum(
                b.max_new for b in req.branches)) // PAGE_TOKENS)})
            self.waiting.append(req)
        self.preempt()
        self.restart()
        # The runner keeps a plan made ahead when this step is that one (its
        # key: walk, padded rows, lease slot, segments) and clears it if not.
        plan = self.admit(preplan=False)
        if self.staged is not None:
            ahead = [(r.rid, lab, len(t)) for r, lab, t in self.staged[0]]
            now = plan and [(r.rid, lab, len(t)) for r, lab, t in plan[0]]
            self.seen["promoted" if now == ahead else "cleared"] += 1
            self.staged = None
        if plan is None:
            self.n += 1
            return
        rows, step, ctx, lease, fork = plan
        fresh = [r for r in self.waiting if any(r is x for x, _, _ in rows)]
        for r in fresh:
            self.waiting.remove(r)
            self.running.append(r)
        if self.waiting:
            self.waiting[0].waited += 1
        results = self.runner.plan(step)
        if self.overlap:
            self.preplan_overlapped(rows, fork)
        bad = [r for r, _, t in rows if max(t) >= VOCAB]
        if bad:  # the forward would fail: unwind the step
            self.fail(step, ctx, rows, bad, fresh)
            self.n += 1
            return
        self.forward(rows, results[KEY], lease)
        self.cancel(rows)
        self.runner.commit(step)
        self.after(rows, fork)
        self.n += 1
        if self.staged is None:
            self.preplan()

    def preplan_overlapped(self, rows, fork):
        """Overlap scheduling: plan step n+1 ahead while step n runs, before
        its commit. The original's stage keeps the has_state of when it was
        made, so this engine does it only where that is already right: step
        n decodes every running request and nothing else, and step n+1 is
        their decode rows again, less the branches that finish at step n."""
        if fork or self.staged is not None or not all(
                r.pos >= len(r.fed) for r, _, _ in rows) or len(rows) != sum(
                    1 for r in self.running for b in r.branches if not b.done):
            return
        nxt = [(r, lab, [0]) for r, lab, _ in rows
               if len(next(b for b in r.branches if b.label == lab).tokens) + 1
               < next(b for b in r.branches if b.label == lab).max_new]
        if not nxt:
            return
        step, ctx, lease = self.declare(nxt, False, preplan=True, n=self.n + 1)
        if self.runner.pre_admit(step).ok:
            self.runner.pre_plan(step)
            self.staged = nxt, step, ctx, lease, False
            self.seen["overlapped"] += 1

    def preplan(self):
        """Plan the next step ahead: the live plan of that step promotes it."""
        nxt = self.admit(preplan=True)
        if nxt is not None:
            self.runner.pre_plan(nxt[1])
            self.staged = nxt

    def forward(self, rows, addressing, lease):
        """Each label's rows in one batch, ragged chunks masked. The state is
        read at slot_indices (zeros where has_state is False) and written
        back there; a graph replay reads the tensors it captured and runs
        the whole bucket, its padding rows on whatever slot they address."""
        if not self.overlap:  # model code that asks the pool for the step's addressing
            for label, a in addressing.items():
                if self.pool.addressing(label) is not a:
                    self.seen["wrong_addressing"] += 1
        if lease is not None:
            self.seen["graph"] += 1
            bs = lease[0]
            self.seen["graph_alt"] += "alt" in lease[2]
            groups = {}
            for label, (idx_t, has_t) in self.graphs[lease].items():
                mine = [row for row in rows if row[1] == label]
                groups[label] = (mine + [None] * (bs - len(mine)), idx_t[:bs], has_t[:bs])
        else:
            self.seen["eager"] += 1
            groups = {}
            for label, a in addressing.items():
                mine = [row for row in rows if row[1] == label]
                mine += [None] * (a.num_rows - len(mine))  # the padding rows, last
                self.seen["padded"] += a.num_rows > len(mine) - mine.count(None)
                groups[label] = (mine, a.slot_indices[:a.num_rows], a.has_state[:a.num_rows])
        if any(len(t) > 1 for _, _, t in rows) and any(len(t) == 1 and r.pos >= len(r.fed)
                                                     for r, _, t in rows):
            self.seen["mixed"] += 1
        self.logits = {}
        for label, (mine, idx, has) in groups.items():
            # Without a sink, padding rows address NO_SLOT (-1): read as
            # zeros, written nowhere.
            slot = idx.long() >= 0
            idx, has = idx.long().clamp(min=0), has & slot
            toks = [row[2] if row else [0] for row in mine]
            span = torch.tensor([len(t) for t in toks])
            tok = torch.tensor([t + [0] * (int(span.max()) - len(t)) for t in toks])
            keep = has.view(-1, 1, 1)
            state = []
            for conv, ssm in self.blocks:
                conv, ssm = conv[idx], ssm[idx]
                state.append((torch.where(keep, conv, 0.0), torch.where(keep[..., None], ssm, 0.0)))
            last = torch.zeros(len(toks), VOCAB, dtype=F64)
            for t in range(int(span.max())):
                logits, new = self.model.step(tok[:, t], state)
                on = t < span
                state = [(torch.where(on.view(-1, 1, 1), nc, c),
                          torch.where(on.view(-1, 1, 1, 1), ns, s))
                         for (nc, ns), (c, s) in zip(new, state)]
                last = torch.where((t == span - 1).view(-1, 1), logits, last)
            for (conv_blk, ssm_blk), (conv, ssm) in zip(self.blocks, state):
                conv_blk[idx[slot]] = conv[slot]
                ssm_blk[idx[slot]] = ssm[slot]
            pos = torch.where(has, self.pos[idx, 0], 0)
            for k, row in enumerate(mine):
                if row and int(pos[k]) != self.consumed(row[0], label):
                    self.seen["wrong_pos"] += 1
            self.pos[idx[slot], 0] = (pos + span)[slot]
            for k, row in enumerate(mine):
                if row:
                    self.logits[(row[0].rid, label)] = last[k]

    @staticmethod
    def consumed(req, label):
        """The tokens whose effect is in req's state under label."""
        if req.pos < len(req.fed):
            return req.pos
        return len(req.prompt) + len(next(b for b in req.branches if b.label == label).tokens) - 1

    def after(self, rows, fork):
        """Sample, advance, retire."""
        for req, label, toks in rows:
            if req.cancelled:
                continue
            lg = self.logits[(req.rid, label)]
            if req.pos < len(req.fed):
                req.pos += len(toks)
                if req.pos < len(req.fed):
                    continue
                if fork:
                    self.seen["forked"] += 1
                for b in req.branches:  # each branch draws from the prompt's last logits
                    if not b.done:
                        b.tokens.append(sample(lg, b.gen))
            else:
                b = next(b for b in req.branches if b.label == label)
                b.tokens.append(sample(lg, b.gen))
        for req in [r for r in self.running if r.done]:
            self.running.remove(req)
            self.runner.remove_request(req.rid)
            self.seen["retired"] += 1

    def fail(self, step, ctx, step_rows, bad, fresh):
        """A step whose forward failed before it wrote anything: the engine
        aborts the request at fault and unwinds the step on every resource,
        newest first (rollback_admit after the plan, as the runner unwinds a
        refusal): the other requests it admitted lose their slots and wait
        again; the rest run the same rows next step. With abort_all, as the
        engine's runner unwinds a forward that raised: every request of the
        step is removed, and the step is neither committed nor rolled back."""
        if self.abort_all:
            bad = [r for r in self.running if any(r is x for x, _, _ in step_rows)]
        for req in bad:
            self.runner.remove_request(req.rid)
            req.cancelled = True
            self.running.remove(req)
            self.seen["failed"] += 1
        if self.abort_all:
            return
        self.pages.rollback_admit(step.get(PAGES), ctx)
        self.pool.rollback_admit(step.get(KEY), ctx)
        for req in reversed([r for r in fresh if r not in bad]):
            self.running.remove(req)
            self.waiting.appendleft(req)

    def cancel(self, rows):
        """A client that went away while its row ran: the engine removes the
        request between plan and commit and drops its output."""
        for req, _, _ in rows:
            req.steps += 1
            if req.cancel_after is not None and req.steps == req.cancel_after and not req.cancelled:
                req.cancelled = True
                self.runner.remove_request(req.rid)
                self.seen["cancelled"] += 1

    def restart(self):
        """Every fifth step the oldest decoding request (not a forked one)
        drops its state but keeps its slot, reset_request(rid), and runs
        its prompt and tokens so far again from zeros, as an engine does
        when a request's state is no longer valid."""
        victims = [r for r in self.running if not r.forks and r.pos >= len(r.fed)]
        if self.n % 5 != 4 or not victims:
            return
        if self.staged is not None:  # the staged step reads its state
            self.staged = None
            self.runner.clear_preplan()
            self.seen["cleared"] += 1
        req = victims[0]
        self.pool.reset_request(req.rid)
        req.fed, req.pos = req.prompt + req.branches[0].tokens, 0
        self.seen["restarted"] += 1

    def preempt(self):
        """The queue's head waited too long: the newest decoding request
        (not a forked one) gives its slot back, reset_request(free=True),
        and waits to be recomputed from its prompt and tokens so far."""
        if not self.waiting or self.waiting[0].waited < 3:
            return False
        victims = [r for r in self.running if not r.forks and r.pos >= len(r.fed)]
        if not victims:
            return False
        if self.staged is not None:  # the staged step names it
            self.staged = None
            self.runner.clear_preplan()
            self.seen["cleared"] += 1
        req = victims[-1]
        for resource in (self.pool, self.pages):  # the runner has no reset
            resource.reset_request(req.rid, free=True)
        self.running.remove(req)
        req.fed, req.pos, req.preempted = req.prompt + req.branches[0].tokens, 0, True
        self.waiting.append(req)
        self.waiting[0].waited = 0
        self.seen["preempted"] += 1
        return True

    def serve(self, limit=400):
        while (self.arrivals or self.waiting or self.running) and self.n < limit:
            self.step()
            if ARGS.trace:
                print(f"step {self.n}: running {[r.rid for r in self.running]} "
                      f"waiting {[r.rid for r in self.waiting]} free {self.pool.num_free_slots}")


def run(model, seed):
    rng = random.Random(seed)
    max_slots = rng.choice((4, 5, 6))
    reqs = requests(rng)
    pages = rng.randrange(14, 24)
    server = Server(model, reqs, max_slots, pages, overlap=seed % 2 == 1,
                    abort_all=seed % 3 == 2, sink=seed % 4 != 3)
    server.serve()
    # One more request once the queue has drained: served like the others,
    # and after it every slot must be free. (On rsp a step whose requests
    # were all removed gives its slots back at the next live admit, not at
    # once: docs/python.md.)
    last = Request("last", [rng.randrange(VOCAB) for _ in range(5)], server.n,
                   [Branch("main", 4, 999)])
    reqs.append(last)
    server.arrivals.append(last)
    server.serve()
    bad = []
    for req in reqs:
        want = alone(model, req)
        for b in req.branches:
            got = want[b.label][:len(b.tokens)] if req.cancelled else want[b.label]
            if b.tokens != got:
                bad.append(f"{req.rid}/{b.label}: served {b.tokens}, alone {want[b.label]}")
    if server.seen["wrong_addressing"]:
        bad.append(f"addressing(label) was not the plan's {server.seen['wrong_addressing']} times")
    if server.seen["wrong_pos"]:
        bad.append(f"{server.seen['wrong_pos']} rows read a position other than their own")
    if server.n >= 400:
        bad.append("the requests were not all served in 400 steps")
    if server.pages.free != pages:
        bad.append(f"{server.pages.free} KV pages free at the end, not {pages}")
    usable = max_slots - (seed % 4 != 3)
    if server.pool.num_free_slots != usable:
        bad.append(f"{server.pool.num_free_slots} slots free at the end, not {usable}")
    server.pool.cleanup()
    seen = server.seen
    seen["waited"] = len(seen["waited"])
    print(f"{ARGS.side} seed {seed}: {max_slots} slots, {pages} pages, {server.n} steps, "
          + ", ".join(f"{k} {v}" for k, v in seen.items()))
    return bad, seen


def main():
    model = Mamba2(seed=7)
    total, bad = {}, []
    for seed in range(ARGS.seeds):
        wrong, seen = run(model, seed)
        bad += [f"seed {seed}: {line}" for line in wrong]
        for k, v in seen.items():
            total[k] = total.get(k, 0) + v
    for what in ("refused", "waited", "mixed", "graph", "eager", "promoted", "cleared", "forked",
                 "cancelled", "preempted", "overlapped", "graph_alt", "padded", "failed",
                 "restarted"):
        if not total[what]:
            bad.append(f"no seed showed {what!r}")
    for line in bad:
        print("FAIL:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
