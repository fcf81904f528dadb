// rsp-stress: the guard mode (docs/semantics.md 9.6). A pool of its own with
// guard mode on; one thread runs steps of 1..kRids requests and their
// forward itself (each addressed slot gets the request's next state). Now
// and then the forward is deliberately wrong: it also writes a held slot
// that the step does not address (a neighbour, held and committed before)
// or a free slot (what a padding row aimed past the batch does). Check
// kind "guard": each wrong write is reported to on_error once, at the
// commit whose check finds it, with its slot, its holder (or free) and the
// step; a correct forward is reported never; the pool's guard counts equal
// the commits and the wrong writes.
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <algorithm>
#include <cinttypes>

namespace stress
{

namespace
{

constexpr unsigned kRids = 6;
constexpr uint32_t kSlots = 16; // the sink, kRids held, the rest free: room for wrong writes

struct GReq {
    rsp::rid rid{0};
    int32_t slot = -1;      // -1: not held yet
    bool committed = false; // held at a commit's check: its bytes have a baseline
    uint64_t v = 0;
};

// What on_error was told (the owner's thread writes, the mode's reads after
// the commit's answer; a mutex as the harness's, not the library's).
struct Reports {
    std::mutex mu;
    std::vector<rsp_guard_violation> found;
    uint64_t other = 0; // failures that were not guard findings
};

void on_error(void *ctx, const rsp_failure *f)
{
    Reports *r = static_cast<Reports *>(ctx);
    std::lock_guard<std::mutex> g(r->mu);
    if (f->guard)
        r->found.push_back(*f->guard);
    else
        r->other++;
}

class Guard
{
  public:
    Guard(Context &cx, rsp::pool &pool, Storage &st, Reports &rep, unsigned index)
        : cx_(cx), pool_(pool), st_(st), rep_(rep), rng_(mix64(cx.opt.seed * 6151u + 31 + index))
    {
        for (GReq &q : reqs_)
            q.rid = fresh();
    }
    bool step();
    void finish();

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{6} << 50) + next_rid_++};
    }
    // The wrong writes of this step's forward: a committed neighbour the
    // step leaves out, a free slot. Returns the slots written.
    std::vector<rsp_guard_violation> wrong_writes(const bool in_step[kRids]);
    bool wait_ready(uint64_t id);
    bool check_reports(uint64_t id, std::vector<rsp_guard_violation> want);
    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    Reports &rep_;
    Rng rng_;
    GReq reqs_[kRids];
    uint64_t next_rid_ = 1, next_id_ = 1, commits_ = 0, wrong_ = 0;
};

// The forward starts once step id's plan is ready: the zeros queued
// before it (a removed request's slot) ran, so a stray write is not undone.
bool Guard::wait_ready(uint64_t id)
{
    rsp::read_section section(std::nothrow);
    rsp::addressing am{};
    return plan_ready(cx_, section, pool_, rsp::step_id{id}, "guard", &am);
}

std::vector<rsp_guard_violation> Guard::wrong_writes(const bool in_step[kRids])
{
    std::vector<rsp_guard_violation> want;
    if (rng_.chance(0.15)) {
        std::vector<unsigned> cand;
        for (unsigned k = 0; k < kRids; k++)
            if (!in_step[k] && reqs_[k].committed)
                cand.push_back(k);
        if (!cand.empty()) {
            GReq &q = reqs_[cand[rng_.below((uint32_t)cand.size())]];
            q.v = mix64(q.v + 1) | 1; // what the stray write leaves: the new baseline
            st_.write(q.slot, q.v);
            rsp_guard_violation v{};
            v.slot = (uint32_t)q.slot;
            v.held = true;
            v.rid = rsp::raw(q.rid);
            want.push_back(v);
        }
    }
    if (rng_.chance(0.15)) {
        std::vector<int32_t> free;
        for (int32_t s = RSP_SINK_SLOT + 1; s < (int32_t)kSlots; s++)
            if (std::none_of(reqs_, reqs_ + kRids, [s](const GReq &q) { return q.slot == s; }))
                free.push_back(s);
        if (!free.empty()) {
            rsp_guard_violation v{};
            v.slot = (uint32_t)free[rng_.below((uint32_t)free.size())];
            st_.write((int32_t)v.slot, mix64(next_id_) | 1);
            want.push_back(v);
        }
    }
    return want;
}

// The reports of step id's commit are exactly `want` (by slot and holder),
// each naming that step and the first region. A free slot is zeroed again
// after its report, as an engine would once told.
bool Guard::check_reports(uint64_t id, std::vector<rsp_guard_violation> want)
{
    Checks &ck = cx_.checks;
    std::vector<rsp_guard_violation> got;
    uint64_t other;
    {
        std::lock_guard<std::mutex> g(rep_.mu);
        got.swap(rep_.found);
        other = rep_.other;
    }
    ck.expect(CHECK_API, other == 0, "guard: %" PRIu64 " failures that were not findings", other);
    auto by_slot = [](const rsp_guard_violation &a, const rsp_guard_violation &b) {
        return a.slot < b.slot;
    };
    std::sort(got.begin(), got.end(), by_slot);
    std::sort(want.begin(), want.end(), by_slot);
    bool ok = ck.expect(CHECK_GUARD, got.size() == want.size(),
                        "guard: step %" PRIu64 ": %zu findings for %zu wrong writes", id,
                        got.size(), want.size());
    for (size_t i = 0; ok && i < got.size(); i++)
        ok = ck.expect(CHECK_GUARD,
                       got[i].slot == want[i].slot && got[i].held == want[i].held &&
                           (!want[i].held || got[i].rid == want[i].rid) && got[i].step_id == id &&
                           got[i].block == 0 && got[i].layer == 0 && got[i].regions > 0,
                       "guard: step %" PRIu64 ": found slot %u held %d rid %" PRIu64
                       " step %" PRIu64 " block %u layer %u, wrote slot %u held %d rid %" PRIu64,
                       id, got[i].slot, got[i].held, got[i].rid, got[i].step_id, got[i].block,
                       got[i].layer, want[i].slot, want[i].held, want[i].rid);
    for (const rsp_guard_violation &v : want)
        if (!v.held)
            st_.write((int32_t)v.slot, 0);
    wrong_ += want.size();
    return ok;
}

bool Guard::step()
{
    Checks &ck = cx_.checks;
    const uint64_t id = next_id_++;
    rsp::step decl{rsp::step_id{id}};
    bool in_step[kRids] = {};
    const unsigned n = 1 + rng_.below(kRids);
    for (unsigned i = 0; i < n; i++)
        in_step[rng_.below(kRids)] = true;
    for (unsigned k = 0; k < kRids; k++)
        if (in_step[k])
            decl.row(reqs_[k].rid);
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(decl);
    if (!ck.expect(CHECK_API, out.ok() && out.value().ok, "guard: admit of step %" PRIu64 ": %s",
                   id, out.ok() ? "refused" : out.error().message))
        return false;
    // The forward: each addressed slot gets the next state.
    for (unsigned k = 0; k < kRids; k++) {
        if (!in_step[k])
            continue;
        GReq &q = reqs_[k];
        rsp::result<rsp_holding> h = pool_.try_holding(q.rid, rsp::label::main);
        if (!ck.expect(CHECK_API, h.ok(), "guard: holding: %s", h.error().message))
            return false;
        q.slot = h.value().index;
    }
    rsp::result<void> r = pool_.try_plan(decl);
    if (!ck.expect(CHECK_API, r.ok(), "guard: plan: %s", r.error().message) || !wait_ready(id))
        return false;
    for (unsigned k = 0; k < kRids; k++)
        if (in_step[k]) {
            reqs_[k].v = next_state(reqs_[k].rid, rsp::label::main, rsp::step_id{id}, reqs_[k].v);
            st_.write(reqs_[k].slot, reqs_[k].v);
        }
    std::vector<rsp_guard_violation> want = wrong_writes(in_step);
    r = pool_.try_commit(decl, rsp::forward_complete());
    if (!ck.expect(CHECK_API, r.ok(), "guard: commit: %s", r.error().message))
        return false;
    commits_++;
    for (unsigned k = 0; k < kRids; k++)
        reqs_[k].committed |= in_step[k];
    if (!check_reports(id, std::move(want)))
        return false;
    cx_.guard_steps.fetch_add(1, std::memory_order_relaxed);
    // Now and then a request finishes: removed, replaced by a fresh one.
    if (rng_.chance(0.05)) {
        GReq &q = reqs_[rng_.below(kRids)];
        remove_rid(ck, pool_, q.rid, "guard: remove", CHECK_API, true);
        q = GReq{};
        q.rid = fresh();
    }
    return true;
}

void Guard::finish()
{
    for (GReq &q : reqs_) {
        remove_rid(cx_.checks, pool_, q.rid, "guard: remove", CHECK_API, true);
    }
    rsp::result<rsp_stats> s = pool_.try_stats();
    if (cx_.checks.expect(CHECK_API, s.ok(), "guard: stats: %s", s.error().message))
        cx_.checks.expect(
            CHECK_GUARD, s.value().guard_checks == commits_ && s.value().guard_violations == wrong_,
            "guard: the pool counts %" PRIu64 " checks, %" PRIu64 " violations; the mode %" PRIu64
            " commits, %" PRIu64 " wrong writes",
            s.value().guard_checks, s.value().guard_violations, commits_, wrong_);
    cx_.guard_wrong.fetch_add(wrong_, std::memory_order_relaxed);
    check_pool_empty(cx_, pool_, "guard", kSlots);
}

} // namespace

void guard_main(Context &cx, unsigned index)
{
    Reports rep;
    rsp::pool_config cfg;
    cfg.layers(2).slots(kSlots).guard(true).on_error(on_error, &rep);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("ssm", RSP_DTYPE_F32, {2, 3});
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "guard pool create: %s",
                          created.error().message))
        return;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    if (!storage.init(pool, cfg, cx.checks))
        return;
    rsp::reader reg(std::nothrow);
    if (!cx.checks.expect(CHECK_API, reg.ok(), "guard thread: %s", reg.error().message))
        return;
    Guard g(cx, pool, storage, rep, index);
    while (!cx.stop.load(std::memory_order_relaxed) && !cx.abort.load())
        if (!g.step())
            return;
    g.finish();
}

} // namespace stress
