// rsp-stress: the speculative mode (docs/semantics.md 9.3). A pool of its
// own; one thread declares verify steps: 2..6 requests, each a verify row of
// 1 + K tokens (K = 0..4) with per-token states. It runs the forward itself
// from the step's plan: the index tensor's column 0 is the request's slot
// (read with has_state), columns 1..span fresh output slots reading zeros,
// the pad index beyond; it writes the state after each token into its
// output slot. The commit accepts a random count per request (0 .. span).
// Check kind "spec": the holding then holds exactly the bytes the forward
// wrote for the accepted token (or the state before the step with 0), no
// byte copied; every slot let go (the old one, rejected outputs) reads zero
// by the next forward; free + held = usable after every commit.
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <cinttypes>

namespace stress
{

namespace
{

constexpr unsigned kRids = 8;
constexpr unsigned kMaxK = 4;   // draft tokens per request: span = 1 + 0..kMaxK
constexpr uint32_t kSlots = 64; // > kRids * (2 + kMaxK): never refused

struct SReq {
    rsp::rid rid{0};
    int32_t slot = -1; // -1: not held yet
    bool has_state = false;
    uint64_t v = 0;
};

struct SPick {
    unsigned k;
    int32_t span;
    uint16_t accepted;
    int32_t out[1 + kMaxK];    // output slot of token t at out[t - 1]
    uint64_t value[1 + kMaxK]; // the state after token t
};

class Spec
{
  public:
    Spec(Context &cx, rsp::pool &pool, Storage &st, unsigned index)
        : cx_(cx), pool_(pool), st_(st), rng_(mix64(cx.opt.seed * 7919u + 29 + index))
    {
        for (SReq &q : reqs_)
            q.rid = fresh();
    }
    bool step();
    void finish();

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{5} << 50) + next_rid_++};
    }
    bool forward(std::vector<SPick> &picks);
    void check_after_commit(const std::vector<SPick> &picks);
    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    Rng rng_;
    SReq reqs_[kRids];
    rsp::step decl_{rsp::step_id{0}};
    uint64_t next_rid_ = 1, next_id_ = 1;
    std::vector<int32_t> let_go_; // slots the last commit freed: zero by the next forward
};

// The forward from the step's own plan: checks the index tensor and the
// initial states, writes the state after each token into its output slot.
bool Spec::forward(std::vector<SPick> &picks)
{
    Checks &ck = cx_.checks;
    const uint64_t id = rsp::raw(decl_.id());
    rsp::read_section section(std::nothrow);
    rsp::plan_view p = section ? section.plan(pool_, decl_.id()) : rsp::plan_view(nullptr);
    if (!ck.expect(CHECK_API, p && p.id() == decl_.id(), "spec: step %" PRIu64 "'s plan missing",
                   id))
        return false;
    rsp::result<rsp::addressing> am = p.try_addressing(rsp::label::main);
    rsp::result<rsp::spec_indices> sx = p.try_spec_indices(rsp::label::main);
    if (!ck.expect(CHECK_API, am.ok() && sx.ok(), "spec: addressing: %s",
                   am.ok() ? sx.error().message : am.error().message))
        return false;
    rsp::result<void> w = pool_.try_event_wait(am.value().ready(), kHang);
    if (!ck.expect(CHECK_HANG, w.ok(), "spec: ready: %s", rsp_strerror(w.status()))) {
        cx_.abort.store(true);
        return false;
    }
    // What the last commit let go is zero once this plan is ready (FIFO).
    for (int32_t slot : let_go_) {
        std::string why;
        ck.expect(CHECK_SPEC, st_.is_zero(slot, &why),
                  "spec: slot %d let go at step %" PRIu64 " not zero: %s", slot, id - 1,
                  why.c_str());
    }
    let_go_.clear();
    const rsp::spec_indices &si = sx.value();
    int32_t widest = 0;
    for (const SPick &k : picks)
        widest = k.span > widest ? k.span : widest;
    ck.expect(CHECK_SPEC, si.width() == uint32_t(1 + widest), "spec: width %u, widest span %d",
              si.width(), widest);
    const int32_t pad = pool_.info().pad_index;
    for (uint32_t pos = 0; pos < picks.size() && si.width() == uint32_t(1 + widest); pos++) {
        SPick &k = picks[pos];
        SReq &q = reqs_[k.k];
        rsp::span<const int32_t> row = si.row(pos);
        if (!ck.expect(CHECK_ADDRESSING,
                       row[0] == q.slot && am.value().has_state()[pos] == q.has_state,
                       "spec step %" PRIu64 " rid %" PRIu64 ": column 0 slot %d has_state %d, "
                       "model %d %d",
                       id, rsp::raw(q.rid), row[0], (int)am.value().has_state()[pos], q.slot,
                       (int)q.has_state))
            return false;
        std::string why;
        ck.expect(CHECK_CONTENT,
                  q.has_state ? st_.matches(q.slot, q.v, &why) : st_.is_zero(q.slot, &why),
                  "spec step %" PRIu64 " rid %" PRIu64 " initial slot %d: %s", id, rsp::raw(q.rid),
                  q.slot, why.c_str());
        uint64_t v = q.has_state ? q.v : 0;
        for (int32_t t = 1; t < (int32_t)si.width(); t++) {
            if (t > k.span) {
                ck.expect(CHECK_SPEC, row[t] == pad,
                          "spec: rid %" PRIu64 " column %d is %d, "
                          "not the pad index",
                          rsp::raw(q.rid), t, row[t]);
                continue;
            }
            k.out[t - 1] = row[t];
            ck.expect(CHECK_SPEC, row[t] != pad && row[t] != q.slot && st_.is_zero(row[t], &why),
                      "spec: rid %" PRIu64 " output %d is slot %d: %s", rsp::raw(q.rid), t, row[t],
                      why.c_str());
            v = next_state(q.rid, rsp::label::main, rsp::step_id{id * 8 + uint64_t(t)}, v);
            k.value[t - 1] = v;
            st_.write(row[t], v);
        }
    }
    return true;
}

// After the commit: the holding is the accepted output slot with exactly
// its bytes (or the old slot and state with 0); everything else let go;
// free + held = usable (no output slot outlives its step).
void Spec::check_after_commit(const std::vector<SPick> &picks)
{
    Checks &ck = cx_.checks;
    for (const SPick &k : picks) {
        SReq &q = reqs_[k.k];
        rsp::result<rsp_holding> h = pool_.try_holding(q.rid, rsp::label::main);
        if (!ck.expect(CHECK_API, h.ok(), "spec: holding: %s", h.error().message))
            return;
        const int32_t want = k.accepted ? k.out[k.accepted - 1] : q.slot;
        ck.expect(CHECK_SPEC, h.value().index == want,
                  "spec: rid %" PRIu64 " accepted %u: holds slot %d, want %d", rsp::raw(q.rid),
                  (unsigned)k.accepted, h.value().index, want);
        if (k.accepted) {
            let_go_.push_back(q.slot);
            q.slot = want;
            q.has_state = true;
            q.v = k.value[k.accepted - 1];
        }
        ck.expect(CHECK_SPEC, h.value().has_state == q.has_state,
                  "spec: rid %" PRIu64 " has_state %d, model %d", rsp::raw(q.rid),
                  (int)h.value().has_state, (int)q.has_state);
        std::string why;
        ck.expect(CHECK_CONTENT,
                  q.has_state ? st_.matches(q.slot, q.v, &why) : st_.is_zero(q.slot, &why),
                  "spec: rid %" PRIu64 " after accepting %u, slot %d: %s", rsp::raw(q.rid),
                  (unsigned)k.accepted, q.slot, why.c_str());
        for (int32_t t = 1; t <= k.span; t++)
            if (t != k.accepted)
                let_go_.push_back(k.out[t - 1]);
    }
    rsp::result<rsp_stats> s = pool_.try_stats();
    if (ck.expect(CHECK_API, s.ok(), "spec: stats: %s", s.error().message)) {
        uint32_t held = 0;
        for (const SReq &q : reqs_)
            held += q.slot >= 0;
        ck.expect(CHECK_STATS,
                  s.value().held_slots == held && s.value().pending_release == 0 &&
                      s.value().free_slots + s.value().held_slots == s.value().usable_slots,
                  "spec: free %u + held %u (model %u), pending %u, usable %u", s.value().free_slots,
                  s.value().held_slots, held, s.value().pending_release, s.value().usable_slots);
    }
}

bool Spec::step()
{
    Checks &ck = cx_.checks;
    unsigned idx[kRids];
    for (unsigned k = 0; k < kRids; k++)
        idx[k] = k;
    const unsigned n = 2 + rng_.below(5);
    decl_.reset(rsp::step_id{next_id_++});
    std::vector<SPick> picks;
    for (unsigned i = 0; i < n; i++) {
        std::swap(idx[i], idx[i + rng_.below(kRids - i)]);
        SPick p{};
        p.k = idx[i];
        p.span = 1 + (int32_t)rng_.below(kMaxK + 1);
        p.accepted = (uint16_t)rng_.below((uint32_t)p.span + 1);
        picks.push_back(p);
        decl_.verify_row(reqs_[p.k].rid, rsp::label::main, p.span);
    }
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(decl_);
    if (!ck.expect(CHECK_SPEC, out.ok() && out.value().ok, "spec: admit of step %" PRIu64 ": %s",
                   rsp::raw(decl_.id()), out.ok() ? "refused" : out.error().message))
        return false;
    for (const SPick &k : picks) {
        SReq &q = reqs_[k.k];
        rsp::result<rsp_holding> h = pool_.try_holding(q.rid, rsp::label::main);
        if (!ck.expect(CHECK_API, h.ok(), "spec: holding: %s", h.error().message))
            return false;
        ck.expect(CHECK_UNIQUE, q.slot < 0 || q.slot == h.value().index,
                  "spec: rid %" PRIu64 " moved from %d to %d before its commit", rsp::raw(q.rid),
                  q.slot, h.value().index);
        q.slot = h.value().index;
    }
    rsp::result<void> r = pool_.try_plan(decl_);
    if (!ck.expect(CHECK_SPEC, r.ok(), "spec: plan: %s", r.error().message))
        return false;
    if (!forward(picks))
        return false;
    for (const SPick &k : picks)
        decl_.accept(reqs_[k.k].rid, rsp::label::main, k.accepted);
    r = pool_.try_commit(decl_, rsp::forward_complete());
    if (!ck.expect(CHECK_SPEC, r.ok(), "spec: commit: %s", r.error().message))
        return false;
    check_after_commit(picks);
    cx_.spec_steps.fetch_add(1, std::memory_order_relaxed);
    for (const SPick &k : picks)
        cx_.spec_accepted.fetch_add(k.accepted, std::memory_order_relaxed);
    // Now and then a request finishes: removed, replaced by a fresh one.
    if (rng_.chance(0.05)) {
        SReq &q = reqs_[rng_.below(kRids)];
        remove_rid(ck, pool_, q.rid, "spec: remove");
        if (q.slot >= 0)
            let_go_.push_back(q.slot);
        q = SReq{};
        q.rid = fresh();
    }
    return true;
}

void Spec::finish()
{
    for (SReq &q : reqs_) {
        remove_rid(cx_.checks, pool_, q.rid, "spec: remove", CHECK_API, true);
    }
    check_pool_empty(cx_, pool_, "spec", kSlots);
}

} // namespace

void spec_main(Context &cx, unsigned index)
{
    rsp::pool_config cfg;
    cfg.layers(2).slots(kSlots);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("ssm", RSP_DTYPE_F32, {2, 3});
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "spec pool create: %s", created.error().message))
        return;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    if (!storage.init(pool, cfg, cx.checks))
        return;
    rsp::reader reg(std::nothrow);
    if (!cx.checks.expect(CHECK_API, reg.ok(), "spec thread: %s", reg.error().message))
        return;
    Spec s(cx, pool, storage, index);
    while (!cx.stop.load(std::memory_order_relaxed) && !cx.abort.load())
        if (!s.step())
            return;
    s.finish();
}

} // namespace stress
