#!/usr/bin/env python3
"""A small Mamba-2-style model served by a continuous-batching loop on rsp.

Run it from a build tree (the library: cmake --build build --target rsp):

    RSP_LIBRARY=build/src/librsp.so PYTHONPATH=python python3 examples/serve_mamba.py

(without RSP_LIBRARY it looks for build/src/librsp.so next to this folder).
The model is random (seeded) and tiny, in float64 on the CPU; its state is a
conv state and an SSM state per layer, which live in the pool's blocks. The
loop admits requests as they arrive, feeds prompts in chunks mixed with
decode rows, lets requests wait while the pool is full, forks one prompt
into two sampled branches, restores a shared prompt prefix from a
checkpoint instead of running it again, and swaps a request out and back
in. Every request's tokens are then checked against the same model run on
that prompt alone, token by token, with a plain dict for the state. Exit
status: 0 when every check holds, 1 otherwise, 77 when torch is missing.
docs/python.md ("A worked example: serving a model") walks through it.
SPDX-License-Identifier: Apache-2.0
"""
import hashlib
import os
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if os.path.isdir(os.path.join(ROOT, "python", "rsp")):
    sys.path.insert(0, os.path.join(ROOT, "python"))
if "RSP_LIBRARY" not in os.environ and os.path.exists(os.path.join(ROOT, "build/src/librsp.so")):
    os.environ["RSP_LIBRARY"] = os.path.join(ROOT, "build/src/librsp.so")
try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(77)
import rsp  # noqa: E402

# --- the model (examples/mamba2.py) ------------------------------------------
from mamba2 import (CONV_CH, D_CONV, D_STATE, F64, HEAD_DIM, HEADS, N_LAYERS,  # noqa: E402
                    VOCAB, Mamba2, zero_state)


def sample(logits, temperature, gen):
    """Greedy at temperature 0; otherwise one draw from gen (each branch has
    its own generator, so a draw never depends on who else is in the batch)."""
    if temperature == 0:
        return int(torch.argmax(logits))
    cdf = torch.cumsum(torch.softmax(logits / temperature, dim=-1), dim=-1)
    u = torch.rand(1, generator=gen, dtype=F64)
    return min(int(torch.searchsorted(cdf, u)), VOCAB - 1)


# --- the requests ------------------------------------------------------------
@dataclass(eq=False)
class Branch:
    """One sampled continuation: the request's "main" label, or a fork's."""
    label: str
    max_new: int
    temperature: float
    seed: int
    tokens: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # the logits each token was drawn from
    gen: object = None

    def __post_init__(self):
        self.gen = torch.Generator().manual_seed(self.seed)

    @property
    def done(self):
        return len(self.tokens) == self.max_new


@dataclass(eq=False)
class Request:
    rid: str
    prompt: list
    arrival: int  # the step at which it reaches the server
    branches: list  # branches[0] is "main"; more: forked from main after the prompt
    pos: int = 0  # prompt tokens whose effect is in the state
    prefill_run: int = 0  # prompt tokens the forward actually ran
    restored_from: int = 0  # prompt tokens a checkpoint gave instead
    waited: int = 0  # steps spent waiting for room
    forked: bool = False
    preempted: bool = False

    @property
    def prefilling(self):
        return self.pos < len(self.prompt)

    @property
    def done(self):
        return all(b.done for b in self.branches)


def scenario():
    """Ten requests: two share a 16-token system prompt (prefix reuse), one is
    forked into two sampled branches, the rest mix greedy and sampled."""
    g = torch.Generator().manual_seed(7)

    def tokens(n):
        return torch.randint(0, VOCAB, (n,), generator=g).tolist()

    system = tokens(CKPT_EVERY)
    reqs = [
        Request("r0", tokens(21), 0, [Branch("main", 8, 0.0, 0)]),
        Request("shared-1", system + tokens(7), 0, [Branch("main", 6, 0.0, 0)]),
        Request("r2", tokens(5), 1, [Branch("main", 12, 0.8, 12)]),
        Request("fork", tokens(11), 2,
                [Branch("main", 9, 1.0, 101), Branch("alt", 6, 1.0, 202)]),
        Request("r4", tokens(30), 3, [Branch("main", 5, 0.0, 0)]),
        Request("r5", tokens(9), 4, [Branch("main", 7, 1.2, 55)]),
        Request("r6", tokens(14), 6, [Branch("main", 10, 0.0, 0)]),
        Request("shared-2", system + tokens(5), 9, [Branch("main", 6, 0.7, 77)]),
        Request("r8", tokens(6), 11, [Branch("main", 4, 0.0, 0)]),
        Request("r9", tokens(18), 12, [Branch("main", 6, 0.9, 99)]),
    ]
    return reqs


def reference(model, req):
    """req generated alone, token by token, its state a plain dict: the
    answer the served tokens must equal. Each branch continues from the
    prompt's state and its last logits, as the fork gives them."""
    state = {"layers": zero_state(1)}
    for tok in req.prompt:
        logits, state["layers"] = model.step(torch.tensor([tok]), state["layers"])
    out = []
    for spec in req.branches:
        b = Branch(spec.label, spec.max_new, spec.temperature, spec.seed)
        s, lg = dict(state), logits
        while True:
            b.logits.append(lg[0])
            b.tokens.append(sample(lg[0], b.temperature, b.gen))
            if b.done:
                break
            lg, s["layers"] = model.step(torch.tensor([b.tokens[-1]]), s["layers"])
        out.append(b)
    return out


# --- the server --------------------------------------------------------------
MAX_SLOTS = 5  # slot 0 is the sink, so 4 requests' states fit at once
CHUNK = 8  # prompt tokens a request feeds per step
CKPT_EVERY = 16  # a checkpoint every 16 prompt tokens (a prefix cache's block)
PREEMPT_AFTER = 6  # a queue head waiting this many steps swaps a running one out
TRACE = "--trace" in sys.argv  # print each step's rows


def prefix_key(tokens):
    """The checkpoint key of a prompt prefix: a 64-bit hash of its tokens."""
    return int.from_bytes(hashlib.blake2b(bytes(tokens), digest_size=8).digest(), "little")


def forward(pool, model, work):
    """Run one batch. work: (request, label, tokens) per row, in the step's
    row order. Reads each row's state from the pool at its slot (zeros when
    has_state is false), runs its tokens, writes the state back into the
    slot in place, and returns each row's last logits."""
    slots, has = [], []
    addr = {label: pool.addressing(label) for label in dict.fromkeys(w[1] for w in work)}
    seen = dict.fromkeys(addr, 0)
    for _, label, _ in work:  # the i-th row of a label is entry i of its addressing
        slots.append(addr[label].slot_indices[seen[label]])
        has.append(addr[label].has_state[seen[label]])
        seen[label] += 1
    idx, has = torch.stack(slots).long(), torch.stack(has)
    state = []
    for layer in range(N_LAYERS):
        conv, ssm = pool.block("conv", layer)[idx], pool.block("ssm", layer)[idx]
        state.append([torch.where(has[:, None, None], conv, 0.0),
                      torch.where(has[:, None, None, None], ssm, 0.0)])
    last = [None] * len(work)
    for t in range(max(len(w[2]) for w in work)):  # rows with a t-th token run together
        rows = [i for i, w in enumerate(work) if len(w[2]) > t]
        r = torch.tensor(rows)
        toks = torch.tensor([work[i][2][t] for i in rows])
        logits, new = model.step(toks, [(c[r], s[r]) for c, s in state])
        for (c, s), (nc, ns) in zip(state, new):
            c[r], s[r] = nc, ns
        for j, i in enumerate(rows):
            if t == len(work[i][2]) - 1:
                last[i] = logits[j]
    for layer, (conv, ssm) in enumerate(state):  # in place: the pool's memory
        pool.block("conv", layer)[idx] = conv
        pool.block("ssm", layer)[idx] = ssm
    return last


class Server:
    """The continuous-batching loop: each step takes the running requests
    (a prefill chunk or a decode token each) and as many waiting ones as the
    pool has room for, runs them as one batch, samples, and retires."""

    def __init__(self, model, requests):
        self.model = model
        self.pending = sorted(requests, key=lambda r: r.arrival)
        self.waiting, self.running, self.swapped, self.finished = [], [], [], []
        self.pool = rsp.RecurrentStatePool("cpu", rsp.PoolConfig(
            num_layers=N_LAYERS, max_slots=MAX_SLOTS,
            blocks=[rsp.BlockSpec("conv", (D_CONV, CONV_CH), "float64"),
                    rsp.BlockSpec("ssm", (HEADS, HEAD_DIM, D_STATE), "float64")],
            max_checkpoints=8, max_host_checkpoints=4))
        self.step_id = 0
        self.clock = 0
        self.log = dict(steps=0, refused=0, mixed=0, waits=0, swaps=[], forks=0)
        self.swap_snapshot = {}
        self.head, self.head_wait = None, 0  # how long the queue's head has waited

    def rows_for(self, req, new):
        """The rows, restores and takes of req in the next step, and what
        the forward feeds it. A new request whose prompt starts with a
        stored prefix restores the prefix's checkpoint and skips it."""
        restores, pos = [], req.pos
        if new:
            for b in range(((len(req.prompt) - 1) // CKPT_EVERY) * CKPT_EVERY, 0, -CKPT_EVERY):
                key = prefix_key(req.prompt[:b])
                if self.pool.checkpoint_lookup(key) is not None:
                    restores.append(rsp.Restore(req.rid, "main", key))
                    pos = b
                    break
        if pos < len(req.prompt):
            chunk = req.prompt[pos:pos + CHUNK]
            last = pos + len(chunk) == len(req.prompt)
            fork = last and len(req.branches) > 1
            # The last chunk of a forked prompt: its state is copied to the
            # other branches' labels at the commit (post-forks of group 1).
            rows = [rsp.Row(req.rid, "main", len(chunk), fork_group=1 if fork else 0)]
            work = [(req, "main", chunk)]
            # A prefix block's end: its state is stored at the commit, for
            # later prompts that start the same way (once per prefix).
            end, takes = pos + len(chunk), []
            key = prefix_key(req.prompt[:end])
            if end % CKPT_EVERY == 0 and self.pool.checkpoint_lookup(key) is None:
                takes.append(rsp.Checkpoint(req.rid, "main", key))
            return rows, work, restores, takes, fork, pos
        live = [b for b in req.branches if not b.done]
        return ([(req.rid, b.label, 1) for b in live],
                [(req, b.label, [b.tokens[-1]]) for b in live], [], [], False, pos)

    def build(self, admitted, sit_out):
        """One step from the running requests (but those in sit_out) and the
        waiting ones in `admitted` (a prefix of self.waiting)."""
        rows, work, restores, takes, forks, starts = [], [], [], [], [], {}
        for req in [r for r in self.running if r.rid not in sit_out] + admitted:
            r, w, rs, tk, fork, pos = self.rows_for(req, req in admitted)
            if fork:
                forks += [rsp.Fork("main", b.label, group=1) for b in req.branches[1:]]
            rows += r
            work += w
            restores += rs
            takes += [t for t in tk if t.key not in {k.key for k in takes}]
            starts[req.rid] = pos
        step = rsp.Step(self.step_id + 1, rows, post_forks=forks,
                        checkpoints=takes, restores=restores)
        return step, work, starts

    def arrivals(self):
        while self.pending and self.pending[0].arrival <= self.clock:
            self.waiting.append(self.pending.pop(0))

    def swap_in(self):
        for req in list(self.swapped):
            if self.pool.swap_in(req.rid):  # not ok: too few free slots, nothing changed
                self.swapped.remove(req)
                self.running.append(req)
                self.log["swaps"].append(("in", req.rid, self.step_id + 1))
                self.check_swapped_state(req)

    def preempt(self):
        """When the head of the queue has waited long enough, swap out the
        decoding request with the most tokens still to go (one at a time)."""
        if self.swapped or not self.waiting or self.head_wait < PREEMPT_AFTER:
            return
        decoding = [r for r in self.running
                    if not r.prefilling and len(r.branches) == 1 and not r.preempted]
        if not decoding:
            return
        victim = max(decoding, key=lambda r: r.branches[0].max_new - len(r.branches[0].tokens))
        self.swap_snapshot[victim.rid] = self.slot_bytes(victim.rid)
        self.pool.swap_out(victim.rid)
        victim.preempted = True  # once: no request is preempted twice
        self.running.remove(victim)
        self.swapped.append(victim)
        self.log["swaps"].append(("out", victim.rid, self.step_id + 1))

    def slot_bytes(self, rid):
        s = self.pool.holding(rid, "main").index
        return [(self.pool.block("conv", layer)[s].clone(),
                 self.pool.block("ssm", layer)[s].clone()) for layer in range(N_LAYERS)]

    def check_swapped_state(self, req):
        after = self.slot_bytes(req.rid)
        for (c0, s0), (c1, s1) in zip(self.swap_snapshot.pop(req.rid), after):
            if not (torch.equal(c0, c1) and torch.equal(s0, s1)):
                self.log.setdefault("errors", []).append(f"{req.rid}: swap in changed its state")

    def one_step(self):
        self.clock += 1
        self.arrivals()
        self.swap_in()
        self.preempt()
        admitted = list(self.waiting)
        sit_out = set()
        while True:
            step, work, starts = self.build(admitted, sit_out)
            out = self.pool.admit(step) if step.rows else None
            if out is None or out:
                break
            # The pool is full: rsp names the first (rid, label) that found
            # no slot, and took nothing. Defer that request and those behind
            # it (first come, first served). A running request named is a
            # fork that needs a slot for its branch: it goes before the
            # waiting ones, so they are deferred first, and with none left
            # it sits this step out.
            self.log["refused"] += 1
            names = [r.rid for r in admitted]
            if out.rid in names:
                admitted = admitted[:names.index(out.rid)]
            elif admitted:
                admitted = admitted[:-1]
            else:
                sit_out.add(out.rid)
        for req in self.waiting:
            if req not in admitted:
                req.waited += 1
                self.log["waits"] += 1
        head = next((r for r in self.waiting if r not in admitted), None)
        self.head_wait = self.head_wait + 1 if head is not None and head is self.head else 0
        self.head = head
        if not step.rows:
            return
        for req in admitted:
            self.waiting.remove(req)
            self.running.append(req)
        if TRACE:
            print(f"step {step.step_id} (clock {self.clock}):",
                  " ".join(f"{r[0]}/{r[1]}:{r[2]}" for r in step.rows),
                  f"waiting {[r.rid for r in self.waiting]}" if self.waiting else "")
        # admit, plan, forward, commit: on a CUDA pool the forward would wait
        # for the plan (pool.wait_ready) and the commit get its event
        # (forward_done=torch.cuda.Event); step_next(step, prev) folds the
        # previous commit and this admit and plan into one round trip.
        self.pool.plan(step)
        last = forward(self.pool, self.model, work)
        self.pool.commit(step)  # forward_done=None: the CPU forward has finished
        self.step_id = step.step_id
        self.after(work, last, starts)

    def after(self, work, last, starts):
        """Account for what the forward ran, sample, and retire."""
        self.log["steps"] += 1
        kinds = set()
        for (req, label, toks), logits in zip(work, last):
            if req.prefilling:
                kinds.add("prefill")
                if starts[req.rid] != req.pos:  # a restore put the state at `start`
                    req.restored_from = starts[req.rid]
                req.pos = starts[req.rid] + len(toks)
                req.prefill_run += len(toks)
                if req.prefilling:
                    continue
                live = req.branches  # the prompt's end: every branch draws from it
                req.forked = len(live) > 1
                self.log["forks"] += req.forked
            else:
                kinds.add("decode")
                live = [b for b in req.branches if b.label == label]
            for b in live:
                b.logits.append(logits)
                b.tokens.append(sample(logits, b.temperature, b.gen))
        self.log["mixed"] += kinds == {"prefill", "decode"}
        for req in list(self.running):
            for b in req.branches[1:]:
                if b.done and self.pool.holding(req.rid, b.label) is not None:
                    self.pool.release(req.rid, b.label)  # a branch done: its slot back
            if req.done:
                self.pool.remove_request(req.rid)  # retired: its slots zeroed and freed
                self.running.remove(req)
                self.finished.append(req)

    def run(self):
        while self.pending or self.waiting or self.running or self.swapped:
            self.one_step()
            if self.clock > 1000:
                raise RuntimeError("the loop made no progress")


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    model = Mamba2(seed=1234)
    server = Server(model, scenario())
    server.run()
    stats = server.pool.stats()
    errors = list(server.log.get("errors", []))

    def check(ok, what):
        if not ok:
            errors.append(what)

    tokens = 0
    for req in server.finished:
        for got, want in zip(req.branches, reference(model, req)):
            tokens += len(got.tokens)
            check(got.tokens == want.tokens,
                  f"{req.rid}/{got.label}: served {got.tokens} != alone {want.tokens}")
            diff = max(float((a - b).abs().max()) for a, b in zip(got.logits, want.logits))
            check(diff < 1e-9, f"{req.rid}/{got.label}: logits differ by {diff:g}")
    by = {r.rid: r for r in server.finished}
    check(len(by) == 10, f"{len(by)} of 10 requests finished")
    log = server.log
    check(log["refused"] > 0 and log["waits"] > 0, "the pool never made a request wait")
    check(log["mixed"] > 0, "no step mixed a prefill chunk with decode rows")
    check(log["forks"] == 1 and by["fork"].forked, "the fork did not happen")
    s2 = by["shared-2"]
    check(s2.restored_from == CKPT_EVERY and s2.prefill_run == len(s2.prompt) - CKPT_EVERY,
          f"shared-2 ran {s2.prefill_run} prompt tokens, restored {s2.restored_from}")
    check(by["shared-1"].prefill_run == len(by["shared-1"].prompt), "shared-1 skipped work")
    check(stats["checkpoints_restored"] >= 1, "no checkpoint was restored")
    check(stats["swaps_out"] >= 1 and stats["swaps_in"] == stats["swaps_out"],
          f"swaps out {stats['swaps_out']}, in {stats['swaps_in']}")
    check(server.pool.num_free_slots == MAX_SLOTS - 1, "slots left held at the end")
    server.pool.cleanup()

    swaps = ", ".join(f"{k} {rid} at step {c}" for k, rid, c in log["swaps"])
    print(f"served {len(by)} requests, {tokens} tokens, in {log['steps']} steps "
          f"({time.time() - t0:.2f} s)")
    print(f"  {log['mixed']} steps mixed prefill chunks with decode; {log['refused']} admits "
          f"refused for room ({log['waits']} request-steps waited)")
    print(f"  fork: 'fork' branched into main and alt after its prompt; "
          f"prefix: shared-2 restored {s2.restored_from} tokens, ran {s2.prefill_run}")
    print(f"  swaps: {swaps}")
    if errors:
        for e in errors:
            print("FAIL:", e)
        return 1
    print("OK: every request's tokens equal those of its prompt generated alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
