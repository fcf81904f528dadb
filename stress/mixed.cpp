// rsp-stress: the mixed-batch mode. A pool of its own; one thread declares
// steps that mix prefill rows, plain decode rows and drafting requests, each
// drafting request with its own fork group (pre-fork main -> draft and
// post-fork draft -> main of that group), runs the forward itself from the
// step's plan, commits with rsp::forward_complete(), rejects some drafts
// (skip_post_forks) and releases finished draft labels (pool.release).
// Check kind "mixed": plain rows get no draft slot, every main row reads
// what the model predicts (plain writes survive the post-forks, a skipped
// rid keeps its forward's write), a released draft slot reads zero.
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <cinttypes>

namespace stress
{

namespace
{

constexpr unsigned kRids = 10;
constexpr uint32_t kSlots = 48; // more than 2 * kRids: never refused

struct Hold {
    int32_t slot = -1; // -1: not held
    bool has_state = false;
    uint64_t v = 0;
};

struct MReq {
    rsp::rid rid{0};
    Hold main, draft;
};

enum Kind : uint8_t { PREFILL, DECODE, DRAFT };

struct Pick {
    unsigned k;   // index in reqs_
    Kind kind;    // what the request does this step
    uint16_t grp; // its fork group (drafting only)
    bool reject;  // drafting: skip_post_forks at commit
};

class Mixed
{
  public:
    Mixed(Context &cx, rsp::pool &pool, Storage &st, rsp::label draft, unsigned index)
        : cx_(cx), pool_(pool), st_(st), draft_(draft),
          rng_(mix64(cx.opt.seed * 31337u + 11 + index))
    {
        for (MReq &q : reqs_)
            q.rid = fresh();
    }
    bool step();
    void finish();

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{3} << 50) + next_rid_++};
    }
    void declare(std::vector<Pick> &picks);
    bool learn_slots(const std::vector<Pick> &picks);
    void forward(const std::vector<Pick> &picks);
    void check_row(const char *what, rsp::label l, const rsp::addressing &ad, uint32_t pos,
                   const MReq &q, const Hold &h);
    void commit_model(const std::vector<Pick> &picks);
    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    rsp::label draft_;
    Rng rng_;
    MReq reqs_[kRids];
    rsp::step decl_{rsp::step_id{0}};
    uint64_t next_rid_ = 1, next_id_ = 1;
    std::vector<int32_t> released_; // draft slots released since the last forward
};

// Pick 2..6 requests; a request whose main has a state may draft (with its
// own group), the others prefill or decode. Build the declaration.
void Mixed::declare(std::vector<Pick> &picks)
{
    unsigned idx[kRids];
    for (unsigned k = 0; k < kRids; k++)
        idx[k] = k;
    const unsigned n = 2 + rng_.below(5);
    decl_.reset(rsp::step_id{next_id_++});
    uint16_t group = 0;
    for (unsigned i = 0; i < n; i++) {
        std::swap(idx[i], idx[i + rng_.below(kRids - i)]);
        const MReq &q = reqs_[idx[i]];
        Pick p{idx[i], rng_.chance(0.3) ? PREFILL : DECODE, 0, false};
        if (q.main.has_state && rng_.chance(0.5)) {
            p.kind = DRAFT;
            p.grp = ++group; // per-rid fork group
            p.reject = rng_.chance(0.4);
        }
        picks.push_back(p);
        if (p.kind == DRAFT) {
            decl_.row(q.rid, rsp::label::main, 1, p.grp);
            decl_.row(q.rid, draft_, 1 + (int32_t)rng_.below(3), p.grp);
            decl_.pre_fork(rsp::label::main, draft_, p.grp);
            decl_.post_fork(draft_, rsp::label::main, p.grp);
        } else {
            decl_.row(q.rid, rsp::label::main, p.kind == PREFILL ? 2 + (int32_t)rng_.below(7) : 1);
        }
    }
}

// After admit: every main is held, drafting requests hold a draft, the
// others none (RSP_ENOREQ: a step-wide fork would have given them one).
bool Mixed::learn_slots(const std::vector<Pick> &picks)
{
    Checks &ck = cx_.checks;
    for (const Pick &p : picks) {
        MReq &q = reqs_[p.k];
        rsp::result<rsp_holding> m = pool_.try_holding(q.rid, rsp::label::main);
        if (!ck.expect(CHECK_API, m.ok(), "mixed: holding(main): %s", m.error().message))
            return false;
        ck.expect(CHECK_UNIQUE, q.main.slot < 0 || q.main.slot == m.value().index,
                  "mixed: rid %" PRIu64 "'s main moved from %d to %d", rsp::raw(q.rid), q.main.slot,
                  m.value().index);
        q.main.slot = m.value().index;
        rsp::result<rsp_holding> d = pool_.try_holding(q.rid, draft_);
        if (p.kind == DRAFT) {
            if (!ck.expect(CHECK_MIXED, d.ok(), "mixed: drafting rid %" PRIu64 " has no draft: %s",
                           rsp::raw(q.rid), d.error().message))
                return false;
            q.draft.slot = d.value().index;
        } else if (q.draft.slot < 0) {
            ck.expect(CHECK_MIXED, d.status() == RSP_ENOREQ,
                      "mixed: plain rid %" PRIu64 " in a step with drafts: draft holding %s",
                      rsp::raw(q.rid), d.ok() ? "exists" : rsp_strerror(d.status()));
        }
    }
    return true;
}

void Mixed::check_row(const char *what, rsp::label l, const rsp::addressing &ad, uint32_t pos,
                      const MReq &q, const Hold &h)
{
    Checks &ck = cx_.checks;
    const uint64_t id = rsp::raw(decl_.id());
    if (!ck.expect(
            CHECK_ADDRESSING,
            pos < ad.num_rows() && ad.slots()[pos] == h.slot && ad.has_state()[pos] == h.has_state,
            "mixed step %" PRIu64 " %s row of rid %" PRIu64 " (label %u): slot %d/%d", id, what,
            rsp::raw(q.rid), rsp::raw(l), pos < ad.num_rows() ? ad.slots()[pos] : -9, h.slot))
        return;
    std::string why;
    ck.expect(CHECK_MIXED, h.has_state ? st_.matches(h.slot, h.v, &why) : st_.is_zero(h.slot, &why),
              "mixed step %" PRIu64 " %s row of rid %" PRIu64 " slot %d: %s", id, what,
              rsp::raw(q.rid), h.slot, why.c_str());
    st_.write(h.slot, next_state(q.rid, l, decl_.id(), h.has_state ? h.v : 0));
}

// The forward, on this thread, from the step's own plan.
void Mixed::forward(const std::vector<Pick> &picks)
{
    Checks &ck = cx_.checks;
    rsp::read_section section(std::nothrow);
    rsp::plan_view p = section ? section.plan(pool_, decl_.id()) : rsp::plan_view(nullptr);
    if (!ck.expect(CHECK_API, p && p.id() == decl_.id(), "mixed: step %" PRIu64 "'s plan missing",
                   rsp::raw(decl_.id())))
        return;
    bool drafts = false;
    for (const Pick &k : picks)
        drafts |= k.kind == DRAFT;
    rsp::result<rsp::addressing> am = p.try_addressing(rsp::label::main);
    rsp::result<rsp::addressing> ad = drafts ? p.try_addressing(draft_) : am;
    if (!ck.expect(CHECK_API, am.ok() && ad.ok(), "mixed: addressing: %s",
                   am.ok() ? ad.error().message : am.error().message))
        return;
    for (const rsp::addressing *a : {&am.value(), &ad.value()}) {
        rsp::result<void> w = pool_.try_event_wait(a->ready(), kHang);
        if (!ck.expect(CHECK_HANG, w.ok(), "mixed: ready: %s", rsp_strerror(w.status()))) {
            cx_.abort.store(true);
            return;
        }
    }
    // Draft slots released before this step: zero now (the device is FIFO),
    // unless the step's admit handed them out again.
    for (int32_t slot : released_) {
        bool held = false;
        for (const MReq &q : reqs_)
            held |= q.main.slot == slot || q.draft.slot == slot;
        std::string why;
        if (!held)
            ck.expect(CHECK_MIXED, st_.is_zero(slot, &why),
                      "mixed: released draft slot %d not zero: %s", slot, why.c_str());
    }
    released_.clear();
    uint32_t pm = 0, pd = 0;
    for (const Pick &k : picks) {
        MReq &q = reqs_[k.k];
        check_row("main", rsp::label::main, am.value(), pm++, q, q.main);
        if (k.kind == DRAFT) {
            // The pre-fork of its group copied main onto draft before the forward.
            Hold copy{q.draft.slot, q.main.has_state, q.main.v};
            check_row("draft", draft_, ad.value(), pd++, q, copy);
        }
    }
}

// The commit's effect: rows wrote, accepted drafts' post-forks copy draft
// onto main, rejected ones leave main with the forward's write.
void Mixed::commit_model(const std::vector<Pick> &picks)
{
    const rsp::step_id id = decl_.id();
    for (const Pick &k : picks) {
        MReq &q = reqs_[k.k];
        const uint64_t read = q.main.has_state ? q.main.v : 0;
        q.main = Hold{q.main.slot, true, next_state(q.rid, rsp::label::main, id, read)};
        if (k.kind != DRAFT)
            continue;
        q.draft = Hold{q.draft.slot, true, next_state(q.rid, draft_, id, read)};
        if (!k.reject)
            q.main.v = q.draft.v;
    }
}

bool Mixed::step()
{
    Checks &ck = cx_.checks;
    std::vector<Pick> picks;
    declare(picks);
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(decl_);
    if (!ck.expect(CHECK_MIXED, out.ok() && out.value().ok, "mixed: admit of step %" PRIu64 ": %s",
                   rsp::raw(decl_.id()), out.ok() ? "refused" : out.error().message))
        return false;
    if (!learn_slots(picks))
        return false;
    rsp::result<void> r = pool_.try_plan(decl_);
    if (!ck.expect(CHECK_MIXED, r.ok(), "mixed: plan: %s", r.error().message))
        return false;
    forward(picks);
    for (const Pick &k : picks)
        if (k.kind == DRAFT && k.reject) {
            decl_.skip_post_forks(reqs_[k.k].rid);
            cx_.mixed_rejected.fetch_add(1, std::memory_order_relaxed);
        }
    r = pool_.try_commit(decl_, rsp::forward_complete());
    if (!ck.expect(CHECK_MIXED, r.ok(), "mixed: commit: %s", r.error().message))
        return false;
    commit_model(picks);
    cx_.mixed_steps.fetch_add(1, std::memory_order_relaxed);
    // Some finished drafts give their label back; the request stays.
    for (const Pick &k : picks) {
        MReq &q = reqs_[k.k];
        if (k.kind != DRAFT || !rng_.chance(0.5))
            continue;
        r = pool_.try_release(q.rid, draft_);
        if (!ck.expect(CHECK_API, r.ok(), "mixed: release: %s", r.error().message))
            return false;
        rsp::result<rsp_holding> d = pool_.try_holding(q.rid, draft_);
        ck.expect(CHECK_MIXED, d.status() == RSP_ENOREQ,
                  "mixed: rid %" PRIu64 "'s draft still held after release: %s", rsp::raw(q.rid),
                  rsp_strerror(d.status()));
        released_.push_back(q.draft.slot);
        q.draft = Hold{};
        cx_.mixed_released.fetch_add(1, std::memory_order_relaxed);
    }
    // Now and then a request finishes: removed, replaced by a fresh one.
    if (rng_.chance(0.05)) {
        MReq &q = reqs_[rng_.below(kRids)];
        remove_rid(ck, pool_, q.rid, "mixed: remove");
        q = MReq{};
        q.rid = fresh();
    }
    return true;
}

void Mixed::finish()
{
    for (MReq &q : reqs_) {
        remove_rid(cx_.checks, pool_, q.rid, "mixed: remove");
    }
    check_pool_empty(cx_, pool_, "mixed", kSlots);
}

} // namespace

void mixed_main(Context &cx, unsigned index)
{
    rsp::pool_config cfg;
    cfg.layers(2).slots(kSlots);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("ssm", RSP_DTYPE_F32, {2, 3});
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "mixed pool create: %s",
                          created.error().message))
        return;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    if (!storage.init(pool, cfg, cx.checks))
        return;
    rsp::result<rsp::label> draft = pool.try_intern("draft");
    if (!cx.checks.expect(CHECK_API, draft.ok(), "mixed: intern: %s", draft.error().message))
        return;
    rsp::reader reg(std::nothrow);
    if (!cx.checks.expect(CHECK_API, reg.ok(), "mixed thread: %s", reg.error().message))
        return;
    Mixed m(cx, pool, storage, draft.value(), index);
    while (!cx.stop.load(std::memory_order_relaxed) && !cx.abort.load())
        if (!m.step())
            return;
    m.finish();
}

} // namespace stress
