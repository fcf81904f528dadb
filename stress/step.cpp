// rsp-stress: the step thread (the scheduler's batch side) and the shadow model.
// SPDX-License-Identifier: Apache-2.0
//
// One thread declares every step, so the pool handles its messages in the
// order it posts them, and the shadow model is updated in that same order:
//   admit   -> fresh holdings appear (has_state false, V 0), journaled;
//   plan    -> pre-forks copy (has_state, V) from -> to;
//   commit  -> each written row gets V' = next_state(rid, label, step, V),
//              has_state true; then post-forks copy.
// Clients tombstone a request before they post its removal. So after any
// call returns, a request that is not tombstoned still has exactly the
// holdings the model says; a tombstoned one is forgotten (its rows are only
// checked for self-consistency: zeros when has_state is false, a whole
// written state otherwise).
//
// Generations: the model keeps, per holding, the generation last seen in a
// plan. Untouched since: it must be equal. Assigned, forked into or reset
// since: it must be larger than every generation seen before the touch.
#include "stress.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <thread>

namespace stress
{

namespace
{

// A row and a fork as the scheduler (and the model) sees them.
struct Row {
    rsp::rid rid;
    rsp::label label;
    int32_t span; // padding rows: 0 (rsp::step::pad), ignored by the pool
    bool padding;
};
struct Fork {
    rsp::label from, to;
};

// One step: the model's view of it (rows, forks, flags) and the rsp::step
// the pool gets, built from that view by finish().
struct Decl {
    rsp::step_id id{0};
    std::vector<Row> rows;
    std::vector<Fork> pre, post;
    bool capture = false;
    bool preplan = false;
    bool has_lease = false;
    rsp_lease lease{};
    rsp::step step{rsp::step_id{0}};

    // Build `step` from the fields above; call once they are final. Its
    // preplan flag starts as `preplan` (for admit); plan sets it per call.
    void finish()
    {
        step = rsp::step(id);
        for (const Row &r : rows) {
            if (r.padding)
                step.pad(r.label);
            else
                step.row(r.rid, r.label, r.span);
        }
        for (const Fork &f : pre)
            step.pre_fork(f.from, f.to);
        for (const Fork &f : post)
            step.post_fork(f.from, f.to);
        step.capture(capture).preplan(preplan);
        if (has_lease)
            step.lease(lease.bucket_bs, lease.bucket_id, lease.lease_slot);
    }
    bool has_forks() const
    {
        return !pre.empty() || !post.empty();
    }
    // Rids of all non-padding rows (any span), first appearance (docs/semantics.md 4.1.3).
    std::vector<rsp::rid> forking_rids() const
    {
        std::vector<rsp::rid> out;
        for (const Row &r : rows)
            if (!r.padding && std::find(out.begin(), out.end(), r.rid) == out.end())
                out.push_back(r.rid);
        return out;
    }
    std::vector<rsp::label> labels() const
    {
        std::vector<rsp::label> out;
        for (const Row &r : rows)
            if (std::find(out.begin(), out.end(), r.label) == out.end())
                out.push_back(r.label);
        return out;
    }
    bool writes(const Row &r) const
    {
        return !capture && !r.padding && r.span > 0;
    }
};

struct HoldModel {
    bool has = false;
    uint64_t v = 0;         // 0 whenever has is false
    int32_t slot = -2;      // -2: not seen in a live plan yet
    uint64_t gen = 0;       // last generation seen
    bool gen_known = false; // untouched since `gen` was seen
    uint64_t gen_floor = 0; // touched: the new generation must exceed this
};
using ReqModel = std::map<rsp::label, HoldModel>;
using Key = std::pair<rsp::rid, rsp::label>;

struct Expect {
    RowKind kind;
    bool has;
    uint64_t v;
};

struct InFlight {
    Decl d;
    bool active = false;
};

class Stepper
{
  public:
    explicit Stepper(Context &cx) : cx_(cx), rng_(mix64(cx.opt.seed * 7919 + 3))
    {
    }
    void run();

  private:
    // declaration
    Decl make_decl();
    // pool calls
    rsp::result<rsp_admit_outcome> admit(const Decl &d);
    rsp::result<void> plan(Decl &d, bool preplan);
    void commit(Decl &d);
    // model
    void forget_tombstoned();
    void forget(rsp::rid rid);
    void touch(HoldModel &h) const;
    void apply_admit(const Decl &d, std::vector<Key> &journal);
    void undo_journal(const std::vector<Key> &journal);
    std::vector<Expect> predict(const Decl &d, bool apply);
    bool pending_writes(rsp::rid rid, rsp::label label) const;
    void apply_fork(ReqModel &m, const Fork &f) const;
    void apply_commit(const Decl &d);
    // checks
    void check_staged(const Decl &d, const std::vector<Expect> &exp);
    std::shared_ptr<StepRecord> check_live(const Decl &d, const std::vector<Expect> &exp);
    void check_stats(const char *when);
    void invalid_inputs();
    bool wait_acks(const std::shared_ptr<StepRecord> &rec);
    void after_refusal(const Decl &d, const rsp_admit_outcome &out);
    void maybe_reset();
    void publish(std::shared_ptr<StepRecord> rec);
    bool tomb(rsp::rid rid)
    {
        return cx_.reg.tombstoned(rid);
    }

    Context &cx_;
    Rng rng_;
    std::unordered_map<rsp::rid, ReqModel> shadow_;
    std::unordered_map<int32_t, Key> owner_; // slot -> holding last seen there (live plans)
    uint64_t gen_seen_ = 0;                  // largest generation seen in any plan
    size_t tomb_pos_ = 0;
    uint64_t next_id_ = 0;
    InFlight pend_; // planned, commit deferred past the next admit
    std::vector<Key> pend_journal_;
    std::shared_ptr<StepRecord> last_live_;
    std::vector<rsp::rid> cleanup_;           // tombstoned rids a step may have re-created
    uint32_t last_lease_slot_[3] = {1, 1, 1}; // per bucket: lease slot of its last live plan
};

// ---------------------------------------------------------------------------
// Declarations

Decl Stepper::make_decl()
{
    Decl d;
    d.id = rsp::step_id{++next_id_};
    std::vector<rsp::rid> rids;
    unsigned want = 1 + rng_.below(std::max(1u, cx_.opt.max_rows / 2));
    cx_.reg.sample(rng_, want, rids);
    d.capture = rng_.chance(0.03);
    for (rsp::rid rid : rids) {
        // Decode (span 1) mostly, prefill (span > 1) sometimes, zero span rarely.
        auto span = [&]() -> int32_t {
            uint32_t r = rng_.below(100);
            if (r < 70)
                return 1;
            if (r < 92)
                return 2 + (int32_t)rng_.below(511);
            return r < 96 ? 0 : -(int32_t)rng_.below(3);
        };
        d.rows.push_back({rid, rsp::label::main, span(), false});
        // Extra labels of the same request: drafts and beams.
        for (unsigned l = 1; l < kNumLabels; l++)
            if (rng_.chance(0.15) && d.rows.size() < cx_.opt.max_rows)
                d.rows.push_back({rid, cx_.labels[l], span(), false});
        // A zero-span duplicate of a row is legal and addresses pad_index.
        if (rng_.chance(0.03) && d.rows.size() < cx_.opt.max_rows)
            d.rows.push_back({rid, rsp::label::main, 0, false});
        if (d.rows.size() >= cx_.opt.max_rows)
            break;
    }
    // Padding rows (a replay's dummies), anywhere, any label.
    unsigned pads = rng_.chance(0.2) ? 1 + rng_.below(3) : 0;
    for (unsigned i = 0; i < pads && d.rows.size() < cx_.opt.max_rows; i++) {
        Row p{kPadRid, cx_.labels[rng_.below(kNumLabels)], 0, true};
        d.rows.insert(d.rows.begin() + rng_.below((uint32_t)d.rows.size() + 1), p);
    }
    if (d.rows.empty()) // no live request yet: a pure padding step
        d.rows.push_back({kPadRid, rsp::label::main, 0, true});
    // Shuffle so labels interleave and first-appearance order varies.
    for (size_t i = d.rows.size(); i > 1; i--)
        std::swap(d.rows[i - 1], d.rows[rng_.below((uint32_t)i)]);

    auto fork = [&]() {
        Fork f;
        f.from = cx_.labels[rng_.below(kNumLabels)];
        f.to = rng_.chance(0.05) ? f.from : cx_.labels[rng_.below(kNumLabels)];
        return f;
    };
    if (rng_.chance(0.25)) {
        unsigned n = 1 + rng_.below(3);
        for (unsigned i = 0; i < n; i++)
            d.pre.push_back(fork());
    }
    if (rng_.chance(0.25)) {
        unsigned n = 1 + rng_.below(2);
        for (unsigned i = 0; i < n; i++)
            d.post.push_back(fork());
    }
    d.preplan = !d.capture && rng_.chance(0.2);
    if (rng_.chance(0.3) && d.rows.size() <= kGraphMaxBs) {
        static const uint32_t buckets[] = {4, 8, 16};
        uint32_t b = 0;
        while (buckets[b] < d.rows.size())
            b++;
        d.has_lease = true;
        d.lease.bucket_bs = buckets[b];
        d.lease.bucket_id = b;
        // Never the lease slot of the bucket's last live plan: partitions may
        // still read its vectors while this step is staged, and the pool
        // rightly refuses to stage into a buffer a live plan still uses.
        d.lease.lease_slot = 1 - last_lease_slot_[b];
    }
    d.finish();
    return d;
}

// ---------------------------------------------------------------------------
// Pool calls, varied on purpose (sync wrapper / ticket + blocking, timed, or
// polled wait).

rsp::result<rsp_admit_outcome> Stepper::admit(const Decl &d)
{
    uint32_t mode = rng_.below(4);
    if (mode == 0)
        return cx_.pool.try_admit(d.step);
    rsp::result<rsp::ticket> posted = cx_.pool.try_post(rsp::msg::admit(d.step));
    if (!posted)
        return posted.error();
    rsp::ticket &t = posted.value();
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        rsp::result<rsp_reply> r = mode == 1   ? t.try_wait(rsp::forever)
                                   : mode == 2 ? t.try_wait(200us)
                                               : t.try_wait(rsp::poll);
        if (r.status() != RSP_ETIMEDOUT && r.status() != RSP_EAGAIN) {
            if (!r)
                return r.error();
            return r.value().admit;
        }
        if (std::chrono::steady_clock::now() - start > kHang) {
            cx_.checks.fail(CHECK_HANG, "admit of step %" PRIu64 " not answered", rsp::raw(d.id));
            cx_.abort.store(true);
            // We are going down: leak the ticket, since the destructor would
            // wait for the answer that never came.
            (void)t.release();
            rsp_error e{};
            e.status = RSP_ETIMEDOUT;
            std::snprintf(e.message, sizeof e.message, "admit of step %" PRIu64 " not answered",
                          rsp::raw(d.id));
            return e;
        }
        if (mode == 3)
            std::this_thread::yield();
    }
}

rsp::result<void> Stepper::plan(Decl &d, bool preplan)
{
    d.step.preplan(preplan);
    if (rng_.chance(0.5))
        return cx_.pool.try_plan(d.step);
    rsp::result<rsp::ticket> posted = cx_.pool.try_post(rsp::msg::plan(d.step));
    if (!posted)
        return posted.error();
    rsp::result<rsp_reply> r = posted.value().try_wait();
    if (!r)
        return r.error();
    cx_.checks.expect(
        CHECK_API, r.value().plan_step_id == rsp::raw(d.id) && r.value().plan_staged == preplan,
        "plan reply: step %" PRIu64 " staged %d, expected step %" PRIu64 " staged %d",
        r.value().plan_step_id, (int)r.value().plan_staged, rsp::raw(d.id), (int)preplan);
    return {};
}

void Stepper::commit(Decl &d)
{
    d.step.preplan(false);
    const rsp_event ev = cx_.fence.at(rsp::raw(d.id));
    rsp::result<void> r;
    if (rng_.chance(0.5))
        r = cx_.pool.try_commit(d.step, ev);
    else // fire-and-forget: a real scheduler does not wait for the owner here
        r = cx_.pool.try_post_forget(rsp::msg::commit(d.step, ev));
    cx_.checks.expect(CHECK_API, r.ok(), "commit of step %" PRIu64 ": %s", rsp::raw(d.id),
                      r.error().message);
    apply_commit(d);
}

// ---------------------------------------------------------------------------
// Model

void Stepper::forget(rsp::rid rid)
{
    auto it = shadow_.find(rid);
    if (it == shadow_.end())
        return;
    for (auto &lh : it->second) {
        auto o = owner_.find(lh.second.slot);
        if (o != owner_.end() && o->second == Key(rid, lh.first))
            owner_.erase(o);
    }
    shadow_.erase(it);
}

void Stepper::forget_tombstoned()
{
    std::vector<rsp::rid> fresh;
    tomb_pos_ = cx_.reg.tombstones_since(tomb_pos_, fresh);
    for (rsp::rid rid : fresh)
        forget(rid);
}

void Stepper::touch(HoldModel &h) const
{
    h.gen_floor = std::max(gen_seen_, h.gen);
    h.gen_known = false;
}

void Stepper::apply_admit(const Decl &d, std::vector<Key> &journal)
{
    if (d.capture)
        return;
    auto alloc = [&](rsp::rid rid, rsp::label label) {
        ReqModel &m = shadow_[rid];
        if (m.count(label))
            return;
        HoldModel h;
        touch(h);
        m[label] = h;
        journal.emplace_back(rid, label);
    };
    for (const Row &r : d.rows)
        if (d.writes(r))
            alloc(r.rid, r.label);
    if (d.has_forks())
        for (rsp::rid rid : d.forking_rids()) {
            for (const Fork &f : d.pre)
                alloc(rid, f.to);
            for (const Fork &f : d.post)
                alloc(rid, f.to);
        }
}

void Stepper::undo_journal(const std::vector<Key> &journal)
{
    for (const Key &k : journal) {
        auto it = shadow_.find(k.first);
        if (it == shadow_.end())
            continue;
        auto h = it->second.find(k.second);
        if (h == it->second.end())
            continue;
        auto o = owner_.find(h->second.slot);
        if (o != owner_.end() && o->second == k)
            owner_.erase(o);
        it->second.erase(h);
    }
}

void Stepper::apply_fork(ReqModel &m, const Fork &f) const
{
    auto src = m.find(f.from);
    if (src == m.end())
        return; // no `from` holding: nothing happens
    HoldModel &dst = m[f.to];
    bool has = src->second.has;
    uint64_t v = src->second.v;
    dst.has = has;
    dst.v = v;
    touch(dst); // from == to copies nothing but still moves the generation
}

// Row expectations after the pre-forks; `apply` also commits them to the model.
// The deferred step, planned and not committed, writes (rid, label): a
// later step's plan has state there (docs/semantics.md 9.1).
bool Stepper::pending_writes(rsp::rid rid, rsp::label label) const
{
    if (!pend_.active || pend_.d.capture)
        return false;
    for (const Row &r : pend_.d.rows)
        if (r.rid == rid && r.label == label && pend_.d.writes(r))
            return true;
    return false;
}

std::vector<Expect> Stepper::predict(const Decl &d, bool apply)
{
    std::unordered_map<rsp::rid, ReqModel> scratch;
    auto model = [&](rsp::rid rid) -> ReqModel * {
        auto it = shadow_.find(rid);
        if (apply)
            return it == shadow_.end() ? nullptr : &it->second;
        auto s = scratch.find(rid);
        if (s != scratch.end())
            return &s->second;
        if (it == shadow_.end())
            return nullptr;
        return &(scratch[rid] = it->second);
    };
    if (!d.capture && !d.pre.empty())
        for (rsp::rid rid : d.forking_rids())
            if (ReqModel *m = model(rid))
                for (const Fork &f : d.pre)
                    apply_fork(*m, f);
    std::vector<Expect> out;
    for (const Row &r : d.rows) {
        if (!d.writes(r)) {
            out.push_back({ROW_PAD, false, 0});
            continue;
        }
        ReqModel *m = model(r.rid);
        auto h = m ? m->find(r.label) : ReqModel::iterator();
        if (!m || h == m->end()) // only a removed request can lack it after admit
            out.push_back({ROW_UNKNOWN, false, 0});
        else
            out.push_back({ROW_HOLD, h->second.has || pending_writes(r.rid, r.label), h->second.v});
    }
    return out;
}

void Stepper::apply_commit(const Decl &d)
{
    if (d.capture)
        return;
    for (const Row &r : d.rows) {
        if (!d.writes(r))
            continue;
        auto it = shadow_.find(r.rid);
        if (it == shadow_.end())
            continue;
        auto h = it->second.find(r.label);
        if (h == it->second.end())
            continue;
        h->second.v = next_state(r.rid, r.label, d.id, h->second.v);
        h->second.has = true;
    }
    if (!d.post.empty())
        for (rsp::rid rid : d.forking_rids()) {
            auto it = shadow_.find(rid);
            if (it != shadow_.end())
                for (const Fork &f : d.post)
                    apply_fork(it->second, f);
        }
    for (rsp::rid rid : d.forking_rids())
        if (tomb(rid))
            cleanup_.push_back(rid);
}

// ---------------------------------------------------------------------------
// Checks

void Stepper::check_staged(const Decl &d, const std::vector<Expect> &exp)
{
    rsp::read_section section(std::nothrow);
    if (!section) {
        cx_.checks.fail(CHECK_API, "step thread: %s", rsp::read_section::why(section.status()));
        return;
    }
    const uint64_t id = rsp::raw(d.id);
    const rsp::plan_view st = section.staged(cx_.pool);
    const rsp::plan_view live = section.live(cx_.pool);
    bool ok = cx_.checks.expect(CHECK_STAGE, st && st.id() == d.id && st.staged(),
                                "staged plan: step %" PRIu64 ", expected staged step %" PRIu64,
                                st ? rsp::raw(st.id()) : 0, id);
    cx_.checks.expect(CHECK_STAGE, !live || (live.id() < d.id && !live.staged()),
                      "the live plan (step %" PRIu64 ") shows the stage of step %" PRIu64,
                      live ? rsp::raw(live.id()) : 0, id);
    if (!ok)
        return;
    const int32_t pad = cx_.info.pad_index;
    std::unordered_map<int32_t, Key> used;
    for (rsp::label label : d.labels()) {
        rsp::result<rsp::addressing> got = st.try_addressing(label);
        if (!cx_.checks.expect(CHECK_API, got.ok(), "staged addressing of label %u: %s",
                               rsp::raw(label), got.error().message))
            continue;
        const rsp::addressing &ad = got.value();
        cx_.checks.expect(CHECK_STAGE,
                          ad.staged() && ad.step() == d.id && ad.raw.label == rsp::raw(label),
                          "staged addressing header: staged %d step %" PRIu64 " label %u",
                          (int)ad.staged(), rsp::raw(ad.step()), ad.raw.label);
        rsp::span<const int32_t> slots = ad.slots();
        rsp::span<const bool> has_state = ad.has_state();
        uint32_t k = 0;
        for (size_t j = 0; j < d.rows.size(); j++) {
            const Row &r = d.rows[j];
            if (r.label != label)
                continue;
            if (k >= ad.num_rows())
                break;
            int32_t slot = slots[k];
            bool has = has_state[k];
            k++;
            if (exp[j].kind == ROW_PAD) {
                cx_.checks.expect(CHECK_STAGE, slot == pad && !has,
                                  "staged step %" PRIu64 " row %zu (pad): slot %d has %d", id, j,
                                  slot, (int)has);
                continue;
            }
            if (slot != pad) {
                auto u = used.emplace(slot, Key(r.rid, r.label));
                cx_.checks.expect(CHECK_UNIQUE, u.second,
                                  "staged step %" PRIu64 ": slot %d addressed by (%" PRIu64
                                  ", %u) and (%" PRIu64 ", %u)",
                                  id, slot, rsp::raw(u.first->second.first),
                                  rsp::raw(u.first->second.second), rsp::raw(r.rid),
                                  rsp::raw(r.label));
            }
            if (exp[j].kind != ROW_HOLD || tomb(r.rid))
                continue;
            const HoldModel &h = shadow_[r.rid][r.label];
            bool slot_ok = slot != pad && (h.slot < 0 || h.slot == slot);
            cx_.checks.expect(
                CHECK_STAGE, slot_ok && has == exp[j].has,
                "staged step %" PRIu64 " (%" PRIu64 ", %u): slot %d has %d, model slot %d has %d",
                id, rsp::raw(r.rid), rsp::raw(r.label), slot, (int)has, h.slot, (int)exp[j].has);
        }
        cx_.checks.expect(CHECK_STAGE, k == ad.num_rows(), "staged label %u: %u rows, declared %u",
                          rsp::raw(label), ad.num_rows(), k);
        for (uint64_t g : ad.generations())
            gen_seen_ = std::max(gen_seen_, g);
    }
}

std::shared_ptr<StepRecord> Stepper::check_live(const Decl &d, const std::vector<Expect> &exp)
{
    auto rec = std::make_shared<StepRecord>();
    rec->step_id = d.id;
    rec->capture = d.capture;
    rec->labels = d.labels();
    rsp::read_section section(std::nothrow);
    if (!section) {
        cx_.checks.fail(CHECK_API, "step thread: %s", rsp::read_section::why(section.status()));
        return rec;
    }
    const uint64_t id = rsp::raw(d.id);
    const rsp::plan_view plan = section.live(cx_.pool);
    cx_.checks.expect(CHECK_API, plan && plan.id() == d.id && !plan.staged(),
                      "after plan: live plan is step %" PRIu64 ", expected %" PRIu64,
                      plan ? rsp::raw(plan.id()) : 0, id);
    const int32_t pad = cx_.info.pad_index;
    const uint64_t floor_before = gen_seen_;
    std::unordered_map<int32_t, Key> used; // slot -> (rid, label) in this step
    std::vector<uint32_t> pos(d.rows.size(), 0);
    std::map<rsp::label, uint32_t> next_pos;
    for (size_t j = 0; j < d.rows.size(); j++)
        pos[j] = next_pos[d.rows[j].label]++;
    std::map<rsp::label, rsp::addressing> ads;
    for (rsp::label label : rec->labels) {
        if (!plan)
            continue;
        rsp::result<rsp::addressing> got = plan.try_addressing(label);
        if (!cx_.checks.expect(CHECK_API, got.ok(),
                               "addressing of label %u in step %" PRIu64 ": %s", rsp::raw(label),
                               id, got.error().message))
            continue;
        const rsp::addressing &ad = got.value();
        bool head = ad.raw.label == rsp::raw(label) && ad.step() == d.id && !ad.staged() &&
                    ad.num_rows() == next_pos[label] && ad.length() >= ad.num_rows();
        cx_.checks.expect(CHECK_ADDRESSING, head,
                          "step %" PRIu64 " label %u: addressing says label %u step %" PRIu64
                          " staged %d rows %u length %u; declared rows %u",
                          id, rsp::raw(label), ad.raw.label, rsp::raw(ad.step()), (int)ad.staged(),
                          ad.num_rows(), ad.length(), next_pos[label]);
        if (!head)
            continue;
        bool tail = true;
        for (uint32_t k = ad.num_rows(); k < ad.length(); k++)
            tail = tail && ad.slots()[k] == pad && !ad.has_state()[k];
        cx_.checks.expect(CHECK_ADDRESSING, tail,
                          "step %" PRIu64 " label %u: tail past %u rows is not pad/false", id,
                          rsp::raw(label), ad.num_rows());
        if (d.has_lease)
            cx_.checks.expect(
                CHECK_ADDRESSING, ad.length() >= std::max(kGraphMaxBs, d.lease.bucket_bs),
                "step %" PRIu64 " label %u: leased vector length %u < bucket %u / graph max %u", id,
                rsp::raw(label), ad.length(), d.lease.bucket_bs, kGraphMaxBs);
        ads[label] = ad;
    }
    // An unplanned label is a clear error.
    if (plan && rec->labels.size() < kNumLabels && rng_.chance(0.05)) {
        for (rsp::label l : cx_.labels) {
            if (std::find(rec->labels.begin(), rec->labels.end(), l) != rec->labels.end())
                continue;
            cx_.checks.expect(CHECK_INVALID, plan.try_addressing(l).status() == RSP_ENOPLAN,
                              "addressing of unplanned label %u did not give RSP_ENOPLAN",
                              rsp::raw(l));
            break;
        }
    }
    for (size_t j = 0; j < d.rows.size(); j++) {
        const Row &r = d.rows[j];
        RowRecord rr{r.rid, r.label, pos[j], exp[j].kind, exp[j].has, exp[j].v};
        auto a = ads.find(r.label);
        if (a == ads.end()) {
            rr.kind = ROW_UNKNOWN;
            rec->rows.push_back(rr);
            continue;
        }
        const rsp::addressing &ad = a->second;
        int32_t slot = ad.slots()[pos[j]];
        bool has = ad.has_state()[pos[j]];
        uint64_t gen = ad.generations()[pos[j]];
        if (exp[j].kind == ROW_PAD) {
            cx_.checks.expect(CHECK_ADDRESSING, slot == pad && !has,
                              "step %" PRIu64 " row %zu (rid %" PRIu64
                              " label %u span %d pad %d capture %d): slot %d has %d,"
                              " expected pad %d",
                              id, j, rsp::raw(r.rid), rsp::raw(r.label), r.span, (int)r.padding,
                              (int)d.capture, slot, (int)has, pad);
            rec->rows.push_back(rr);
            continue;
        }
        bool valid = slot >= 0 && slot < (int32_t)cx_.info.max_slots &&
                     !(cx_.info.sink && slot == RSP_SINK_SLOT);
        if (slot != pad) {
            if (!cx_.checks.expect(CHECK_ADDRESSING, valid,
                                   "step %" PRIu64 " (%" PRIu64 ", %u): wild slot %d", id,
                                   rsp::raw(r.rid), rsp::raw(r.label), slot)) {
                rr.kind = ROW_UNKNOWN;
                rec->rows.push_back(rr);
                continue;
            }
            auto u = used.emplace(slot, Key(r.rid, r.label));
            cx_.checks.expect(CHECK_UNIQUE, u.second,
                              "step %" PRIu64 ": slot %d addressed by (%" PRIu64
                              ", %u) and (%" PRIu64 ", %u)",
                              id, slot, rsp::raw(u.first->second.first),
                              rsp::raw(u.first->second.second), rsp::raw(r.rid), rsp::raw(r.label));
        }
        if (exp[j].kind == ROW_UNKNOWN || tomb(r.rid)) {
            // Removed around this step: pad, or a slot that is still its own.
            rr.kind = ROW_UNKNOWN;
            cx_.rows_removed.fetch_add(1, std::memory_order_relaxed);
            rec->rows.push_back(rr);
            continue;
        }
        HoldModel &h = shadow_[r.rid][r.label];
        bool ok = cx_.checks.expect(
            CHECK_ADDRESSING, slot != pad && has == h.has,
            "step %" PRIu64 " (%" PRIu64 ", %u): slot %d has_state %d; model: holding has_state %d",
            id, rsp::raw(r.rid), rsp::raw(r.label), slot, (int)has, (int)h.has);
        if (!ok || slot == pad) {
            rr.kind = ROW_UNKNOWN;
            rec->rows.push_back(rr);
            continue;
        }
        if (h.slot >= 0)
            cx_.checks.expect(CHECK_UNIQUE, h.slot == slot,
                              "step %" PRIu64 " (%" PRIu64
                              ", %u): holding moved from slot %d to %d",
                              id, rsp::raw(r.rid), rsp::raw(r.label), h.slot, slot);
        auto o = owner_.find(slot);
        if (o != owner_.end() && o->second != Key(r.rid, r.label)) {
            // The previous holder must be gone: removed, reset or rolled back.
            const Key &prev = o->second;
            bool gone = tomb(prev.first);
            if (!gone) {
                auto pm = shadow_.find(prev.first);
                gone = pm == shadow_.end() || !pm->second.count(prev.second) ||
                       pm->second[prev.second].slot != slot;
            }
            cx_.checks.expect(CHECK_UNIQUE, gone,
                              "step %" PRIu64 ": slot %d given to (%" PRIu64 ", %u) while (%" PRIu64
                              ", %u) still holds it",
                              id, slot, rsp::raw(r.rid), rsp::raw(r.label), rsp::raw(prev.first),
                              rsp::raw(prev.second));
        }
        owner_[slot] = Key(r.rid, r.label);
        if (h.gen_known)
            cx_.checks.expect(CHECK_GENERATION, gen == h.gen,
                              "step %" PRIu64 " (%" PRIu64
                              ", %u): untouched holding moved generation %" PRIu64 " -> %" PRIu64,
                              id, rsp::raw(r.rid), rsp::raw(r.label), h.gen, gen);
        else
            cx_.checks.expect(CHECK_GENERATION, gen > h.gen_floor,
                              "step %" PRIu64 " (%" PRIu64 ", %u): generation %" PRIu64
                              " did not move past %" PRIu64 " after assignment/fork/reset",
                              id, rsp::raw(r.rid), rsp::raw(r.label), gen, h.gen_floor);
        h.slot = slot;
        h.gen = gen;
        h.gen_known = true;
        gen_seen_ = std::max(gen_seen_, gen);
        rec->rows.push_back(rr);
    }
    (void)floor_before;
    return rec;
}

void Stepper::check_stats(const char *when)
{
    rsp::result<rsp_stats> got = cx_.pool.try_stats();
    if (!cx_.checks.expect(CHECK_API, got.ok(), "stats: %s", got.error().message))
        return;
    const rsp_stats &s = got.value();
    uint32_t sink = cx_.info.sink ? 1 : 0;
    note_pending(cx_, s.pending_release);
    cx_.checks.expect(
        CHECK_STATS,
        (uint64_t)s.free_slots + s.held_slots + s.pending_release + sink == s.max_slots &&
            s.max_slots == cx_.info.max_slots && s.usable_slots == cx_.info.usable_slots,
        "%s: free %u + held %u + pending %u + sink %u != max %u (usable %u)", when, s.free_slots,
        s.held_slots, s.pending_release, sink, s.max_slots, s.usable_slots);
    cx_.checks.expect(CHECK_STATS, s.generation >= gen_seen_,
                      "%s: stats generation %" PRIu64 " below one already seen in a plan (%" PRIu64
                      ")",
                      when, s.generation, gen_seen_);
}

// Bad declarations are refused with their own status and change nothing. Uses
// fresh step ids so a refused one can not disturb the order of real steps.
void Stepper::invalid_inputs()
{
    std::vector<rsp::rid> rids;
    cx_.reg.sample(rng_, 1, rids);
    const rsp::rid rid = rids.empty() ? rsp::rid{rsp::raw(kPadRid) + 1} : rids[0];
    rsp::step s(rsp::step_id{++next_id_});
    switch (rng_.below(4)) {
    case 0: { // the same (rid, label) twice with span > 0
        s.row(rid, rsp::label::main, 1).row(rid, rsp::label::main, 3);
        rsp_status st = cx_.pool.try_admit(s).status();
        cx_.checks.expect(CHECK_INVALID, st == RSP_EDUPROW,
                          "duplicate rows: %s, expected RSP_EDUPROW", rsp_strerror(st));
        break;
    }
    case 1: { // an unknown label
        s.row(rid, rsp::label{RSP_MAX_LABELS - 1}, 1);
        rsp_status st = cx_.pool.try_admit(s).status();
        cx_.checks.expect(CHECK_INVALID, st == RSP_ENOLABEL,
                          "unknown label: %s, expected RSP_ENOLABEL", rsp_strerror(st));
        break;
    }
    case 2: { // a fork with an unknown label
        s.row(rid, rsp::label::main, 1).pre_fork(rsp::label::main, rsp::label{RSP_MAX_LABELS - 2});
        rsp_status st = cx_.pool.try_admit(s).status();
        cx_.checks.expect(CHECK_INVALID, st == RSP_ENOLABEL,
                          "fork to unknown label: %s, expected RSP_ENOLABEL", rsp_strerror(st));
        break;
    }
    default: { // plan and commit of a step that was never admitted
        s.row(rid, rsp::label::main, 1);
        rsp_status st = cx_.pool.try_plan(s).status();
        cx_.checks.expect(CHECK_INVALID, st == RSP_EORDER,
                          "plan of a step never admitted: %s, expected RSP_EORDER",
                          rsp_strerror(st));
        st = cx_.pool.try_commit(s, rsp::forward_complete()).status();
        cx_.checks.expect(CHECK_INVALID, st == RSP_EORDER,
                          "commit of a step never admitted: %s, expected RSP_EORDER",
                          rsp_strerror(st));
        break;
    }
    }
    rsp_status st = cx_.pool.try_holding(kPadRid, rsp::label::main).status();
    cx_.checks.expect(CHECK_INVALID, st == RSP_ENOREQ,
                      "holding of the padding rid: %s, expected RSP_ENOREQ", rsp_strerror(st));
    cx_.invalid.fetch_add(1, std::memory_order_relaxed);
}

bool Stepper::wait_acks(const std::shared_ptr<StepRecord> &rec)
{
    if (!rec)
        return true;
    std::unique_lock<std::mutex> g(rec->mu);
    bool ok = rec->cv.wait_for(
        g, kHang, [&] { return rec->acks.load() == cx_.opt.readers || cx_.abort.load(); });
    if (!ok) {
        cx_.checks.fail(CHECK_HANG, "partitions did not take the plan of step %" PRIu64,
                        rsp::raw(rec->step_id));
        cx_.abort.store(true);
    }
    return ok && !cx_.abort.load();
}

// Pool full: the numbers must be sane, and the rollback must leave at least
// as many free slots as the refusal reported (only the step thread allocates).
void Stepper::after_refusal(const Decl &d, const rsp_admit_outcome &out)
{
    cx_.refused.fetch_add(1, std::memory_order_relaxed);
    cx_.checks.expect(CHECK_REFUSAL,
                      out.usable == cx_.info.usable_slots && out.free <= out.usable &&
                          out.slots_short >= 1,
                      "refused step %" PRIu64 ": usable %u free %u short %u (pool usable %u)",
                      rsp::raw(d.id), out.usable, out.free, out.slots_short, cx_.info.usable_slots);
    rsp::result<void> r = cx_.pool.try_rollback(d.id);
    cx_.checks.expect(CHECK_API, r.ok(), "rollback of refused step %" PRIu64 ": %s", rsp::raw(d.id),
                      r.error().message);
    rsp::result<rsp_stats> s = cx_.pool.try_stats();
    if (s)
        cx_.checks.expect(CHECK_REFUSAL, s.value().free_slots >= out.free,
                          "after rollback of refused step %" PRIu64
                          ": %u free < %u reported at refusal",
                          rsp::raw(d.id), s.value().free_slots, out.free);
}

// The engine's preemption and restarts: reset a request, keeping or
// freeing its slots. Only with no step in flight from the model's view.
void Stepper::maybe_reset()
{
    if (shadow_.empty() || !rng_.chance(0.02))
        return;
    auto it = shadow_.begin();
    std::advance(it, rng_.below((uint32_t)std::min<size_t>(shadow_.size(), 64)));
    rsp::rid rid = it->first;
    if (tomb(rid)) {
        forget(rid);
        return;
    }
    bool free = rng_.chance(0.5);
    rsp::result<void> r = cx_.pool.try_reset(rid, free);
    cx_.checks.expect(CHECK_API, r.ok(), "reset(%" PRIu64 ", %d): %s", rsp::raw(rid), (int)free,
                      r.error().message);
    cx_.resets.fetch_add(1, std::memory_order_relaxed);
    if (free) {
        forget(rid);
        return;
    }
    for (auto &lh : it->second) {
        lh.second.has = false;
        lh.second.v = 0;
        touch(lh.second);
    }
}

void Stepper::publish(std::shared_ptr<StepRecord> rec)
{
    for (auto &q : cx_.queues)
        q->push(rec);
}

// ---------------------------------------------------------------------------

void Stepper::run()
{
    rsp::reader reader(std::nothrow);
    if (!cx_.checks.expect(CHECK_API, reader.ok(), "reader registration: %s",
                           reader.error().message)) {
        cx_.abort.store(true);
        return;
    }
    while (!cx_.stop.load(std::memory_order_relaxed) &&
           !cx_.abort.load(std::memory_order_relaxed)) {
        forget_tombstoned();
        if (rng_.chance(0.01))
            invalid_inputs();
        Decl d = make_decl();
        const rsp::step_id id = d.id;
        cx_.last_step_id.store(id, std::memory_order_relaxed);

        rsp::result<rsp_admit_outcome> admitted = admit(d);
        if (!admitted.ok() && admitted.status() == RSP_EORDER && pend_.active &&
            std::strstr(admitted.error().message, "post-fork target")) {
            // A row names the deferred step's post-fork target, whose bytes
            // change at its commit (docs/semantics.md 9.1): commit it first and
            // admit again, as an overlap scheduler does.
            commit(pend_.d);
            pend_.active = false;
            admitted = admit(d);
        }
        if (!cx_.checks.expect(CHECK_API, admitted.ok(), "admit of step %" PRIu64 ": %s",
                               rsp::raw(id), admitted.error().message))
            break;
        const rsp_admit_outcome &out = admitted.value();
        if (d.capture)
            cx_.checks.expect(CHECK_API, out.ok, "capture step %" PRIu64 " refused", rsp::raw(id));
        if (!out.ok) {
            after_refusal(d, out);
            if (pend_.active) {
                commit(pend_.d);
                pend_.active = false;
            }
            // Preempt a request, as an engine would when memory runs out.
            std::vector<rsp::rid> victim;
            if (rng_.chance(0.5)) {
                cx_.reg.sample(rng_, 1, victim);
                if (!victim.empty() && cx_.reg.retire(victim[0])) {
                    rsp::result<void> r = cx_.pool.try_remove(victim[0]);
                    cx_.checks.expect(CHECK_API, r.ok(), "remove: %s", r.error().message);
                }
            }
            continue;
        }
        std::vector<Key> journal;
        apply_admit(d, journal);

        if (d.preplan) {
            std::vector<Expect> staged = predict(d, false);
            rsp::result<void> r = plan(d, true);
            if (cx_.checks.expect(CHECK_API, r.ok(), "stage of step %" PRIu64 ": %s", rsp::raw(id),
                                  r.error().message))
                check_staged(d, staged);
            cx_.preplanned.fetch_add(1, std::memory_order_relaxed);
            if (rng_.chance(0.1)) {
                // Abandon the staged step: drop the stage, give its slots back.
                r = cx_.pool.try_clear_preplan();
                cx_.checks.expect(CHECK_API, r.ok(), "clear_preplan: %s", r.error().message);
                r = cx_.pool.try_rollback(id);
                cx_.checks.expect(CHECK_API, r.ok(), "rollback of abandoned step: %s",
                                  r.error().message);
                undo_journal(journal);
                {
                    rsp::read_section section(std::nothrow);
                    if (section)
                        cx_.checks.expect(CHECK_STAGE, !section.staged(cx_.pool),
                                          "a stage is still published after clear_preplan");
                }
                cx_.abandoned.fetch_add(1, std::memory_order_relaxed);
                if (pend_.active) {
                    commit(pend_.d);
                    pend_.active = false;
                }
                continue;
            }
        }
        if (pend_.active) {
            // The previous step's commit was deferred past this admit/stage.
            commit(pend_.d);
            pend_.active = false;
            cx_.overlapped.fetch_add(1, std::memory_order_relaxed);
        }
        if (!wait_acks(last_live_))
            break;
        std::vector<Expect> exp = predict(d, true);
        rsp::result<void> planned = plan(d, false);
        if (!cx_.checks.expect(CHECK_API, planned.ok(), "plan of step %" PRIu64 ": %s",
                               rsp::raw(id), planned.error().message)) {
            (void)cx_.pool.try_rollback(id);
            undo_journal(journal);
            continue;
        }
        std::shared_ptr<StepRecord> rec = check_live(d, exp);
        publish(rec);
        cx_.reg.set_hot(d.forking_rids());
        last_live_ = rec;
        if (d.has_lease)
            last_lease_slot_[d.lease.bucket_id] = d.lease.lease_slot;
        cx_.steps.fetch_add(1, std::memory_order_relaxed);
        if (d.capture)
            cx_.captures.fetch_add(1, std::memory_order_relaxed);

        // Commit now, or after the next step's admit (CPU runs ahead of the device).
        if (!d.capture && rng_.chance(0.3)) {
            pend_.d = std::move(d);
            pend_.active = true;
        } else {
            commit(d);
        }
        if (!pend_.active) {
            for (rsp::rid rid : cleanup_) {
                // A step may have re-created a request its client had already removed.
                rsp::result<void> r = cx_.pool.try_post_forget(rsp::msg::remove(rid));
                cx_.checks.expect(CHECK_API, r.ok(), "cleanup remove: %s", r.error().message);
            }
            cleanup_.clear();
            maybe_reset();
        }
        if (rsp::raw(id) % 32 == 0)
            check_stats("step thread");
    }
    if (pend_.active) {
        commit(pend_.d);
        pend_.active = false;
    }
    auto end = std::make_shared<StepRecord>();
    end->end = true;
    publish(end);
}

} // namespace

void step_main(Context &cx)
{
    Stepper s(cx);
    s.run();
}

} // namespace stress
