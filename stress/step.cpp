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
#include <map>
#include <thread>

namespace stress
{

namespace
{

struct Decl {
    uint64_t id = 0;
    std::vector<rsp_row> rows;
    std::vector<rsp_fork> pre, post;
    bool capture = false;
    bool preplan = false;
    bool has_lease = false;
    rsp_lease lease{};

    rsp_step step(bool preplan_flag) const
    {
        rsp_step s{};
        s.step_id = id;
        s.rows = rows.data();
        s.num_rows = (uint32_t)rows.size();
        s.pre_forks = pre.data();
        s.num_pre_forks = (uint32_t)pre.size();
        s.post_forks = post.data();
        s.num_post_forks = (uint32_t)post.size();
        s.capture = capture;
        s.preplan = preplan_flag;
        s.has_lease = has_lease;
        s.lease = lease;
        return s;
    }
    bool has_forks() const
    {
        return !pre.empty() || !post.empty();
    }
    // Rids of all non-padding rows (any span), first appearance (SEMANTICS 4.1.3).
    std::vector<rsp_rid> forking_rids() const
    {
        std::vector<rsp_rid> out;
        for (const rsp_row &r : rows)
            if (!r.padding && std::find(out.begin(), out.end(), r.rid) == out.end())
                out.push_back(r.rid);
        return out;
    }
    std::vector<rsp_label_id> labels() const
    {
        std::vector<rsp_label_id> out;
        for (const rsp_row &r : rows)
            if (std::find(out.begin(), out.end(), r.label) == out.end())
                out.push_back(r.label);
        return out;
    }
    bool writes(const rsp_row &r) const
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
using ReqModel = std::map<rsp_label_id, HoldModel>;
using Key = std::pair<rsp_rid, rsp_label_id>;

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
    rsp_status admit(const Decl &d, rsp_admit_outcome *out, rsp_error *err);
    rsp_status plan(const Decl &d, bool preplan, rsp_error *err);
    void commit(const Decl &d);
    // model
    void forget_tombstoned();
    void forget(rsp_rid rid);
    void touch(HoldModel &h) const;
    void apply_admit(const Decl &d, std::vector<Key> &journal);
    void undo_journal(const std::vector<Key> &journal);
    std::vector<Expect> predict(const Decl &d, bool apply);
    void apply_fork(ReqModel &m, const rsp_fork &f) const;
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
    bool tomb(rsp_rid rid)
    {
        return cx_.reg.tombstoned(rid);
    }

    Context &cx_;
    Rng rng_;
    std::unordered_map<rsp_rid, ReqModel> shadow_;
    std::unordered_map<int32_t, Key> owner_; // slot -> holding last seen there (live plans)
    uint64_t gen_seen_ = 0;                  // largest generation seen in any plan
    size_t tomb_pos_ = 0;
    uint64_t next_id_ = 0;
    InFlight pend_; // planned, commit deferred past the next admit
    std::vector<Key> pend_journal_;
    std::shared_ptr<StepRecord> last_live_;
    std::vector<rsp_rid> cleanup_;            // tombstoned rids a step may have re-created
    uint32_t last_lease_slot_[3] = {1, 1, 1}; // per bucket: lease slot of its last live plan
};

// ---------------------------------------------------------------------------
// Declarations

Decl Stepper::make_decl()
{
    Decl d;
    d.id = ++next_id_;
    std::vector<rsp_rid> rids;
    unsigned want = 1 + rng_.below(std::max(1u, cx_.opt.max_rows / 2));
    cx_.reg.sample(rng_, want, rids);
    d.capture = rng_.chance(0.03);
    for (rsp_rid rid : rids) {
        // Decode (span 1) mostly, prefill (span > 1) sometimes, zero span rarely.
        auto span = [&]() -> int32_t {
            uint32_t r = rng_.below(100);
            if (r < 70)
                return 1;
            if (r < 92)
                return 2 + (int32_t)rng_.below(511);
            return r < 96 ? 0 : -(int32_t)rng_.below(3);
        };
        d.rows.push_back({rid, RSP_LABEL_MAIN, span(), false});
        // Extra labels of the same request: drafts and beams.
        for (unsigned l = 1; l < kNumLabels; l++)
            if (rng_.chance(0.15) && d.rows.size() < cx_.opt.max_rows)
                d.rows.push_back({rid, cx_.labels[l], span(), false});
        // A zero-span duplicate of a row is legal and addresses pad_index.
        if (rng_.chance(0.03) && d.rows.size() < cx_.opt.max_rows)
            d.rows.push_back({rid, RSP_LABEL_MAIN, 0, false});
        if (d.rows.size() >= cx_.opt.max_rows)
            break;
    }
    // Padding rows (a replay's dummies), anywhere, any label.
    unsigned pads = rng_.chance(0.2) ? 1 + rng_.below(3) : 0;
    for (unsigned i = 0; i < pads && d.rows.size() < cx_.opt.max_rows; i++) {
        rsp_row p{kPadRid, cx_.labels[rng_.below(kNumLabels)], 1, true};
        d.rows.insert(d.rows.begin() + rng_.below((uint32_t)d.rows.size() + 1), p);
    }
    if (d.rows.empty()) // no live request yet: a pure padding step
        d.rows.push_back({kPadRid, RSP_LABEL_MAIN, 1, true});
    // Shuffle so labels interleave and first-appearance order varies.
    for (size_t i = d.rows.size(); i > 1; i--)
        std::swap(d.rows[i - 1], d.rows[rng_.below((uint32_t)i)]);

    auto fork = [&]() {
        rsp_fork f;
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
    return d;
}

// ---------------------------------------------------------------------------
// Pool calls, varied on purpose (sync wrapper / ticket + blocking, timed, or
// polled wait).

rsp_status Stepper::admit(const Decl &d, rsp_admit_outcome *out, rsp_error *err)
{
    rsp_step s = d.step(d.preplan);
    uint32_t mode = rng_.below(4);
    if (mode == 0)
        return rsp_step_admit(cx_.pool, &s, out, err);
    rsp_msg m{};
    m.kind = RSP_MSG_ADMIT;
    m.step = s;
    rsp_ticket *t = nullptr;
    rsp_status st = rsp_post(cx_.pool, &m, &t, RSP_WAIT_FOREVER, err);
    if (st != RSP_OK)
        return st;
    rsp_reply r{};
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        uint64_t timeout = mode == 1 ? RSP_WAIT_FOREVER : mode == 2 ? 200000 : RSP_WAIT_POLL;
        st = rsp_wait(t, timeout, &r);
        if (st != RSP_ETIMEDOUT && st != RSP_EAGAIN)
            break;
        if (std::chrono::steady_clock::now() - start > std::chrono::nanoseconds(kHangNs)) {
            cx_.checks.fail(CHECK_HANG, "admit of step %" PRIu64 " not answered", d.id);
            cx_.abort.store(true);
            return RSP_ETIMEDOUT; // the ticket is leaked on purpose: we are going down
        }
        if (mode == 3)
            std::this_thread::yield();
    }
    *out = r.admit;
    if (st != RSP_OK && err)
        *err = r.error;
    return st;
}

rsp_status Stepper::plan(const Decl &d, bool preplan, rsp_error *err)
{
    rsp_step s = d.step(preplan);
    if (rng_.chance(0.5))
        return rsp_step_plan(cx_.pool, &s, err);
    rsp_msg m{};
    m.kind = RSP_MSG_PLAN;
    m.step = s;
    rsp_ticket *t = nullptr;
    rsp_status st = rsp_post(cx_.pool, &m, &t, RSP_WAIT_FOREVER, err);
    if (st != RSP_OK)
        return st;
    rsp_reply r{};
    st = rsp_wait(t, RSP_WAIT_FOREVER, &r);
    if (st != RSP_OK) {
        if (err)
            *err = r.error;
        return st;
    }
    cx_.checks.expect(CHECK_API, r.plan_step_id == d.id && r.plan_staged == preplan,
                      "plan reply: step %" PRIu64 " staged %d, expected step %" PRIu64 " staged %d",
                      r.plan_step_id, (int)r.plan_staged, d.id, (int)preplan);
    return st;
}

void Stepper::commit(const Decl &d)
{
    rsp_step s = d.step(false);
    rsp_event ev = rsp_event_host(cx_.fence, d.id);
    rsp_error err{};
    rsp_status st;
    if (rng_.chance(0.5)) {
        st = rsp_step_commit(cx_.pool, &s, &ev, &err);
    } else { // fire-and-forget: a real scheduler does not wait for the owner here
        rsp_msg m{};
        m.kind = RSP_MSG_COMMIT;
        m.step = s;
        m.event = ev;
        st = rsp_post(cx_.pool, &m, nullptr, RSP_WAIT_FOREVER, &err);
    }
    cx_.checks.expect(CHECK_API, st == RSP_OK, "commit of step %" PRIu64 ": %s", d.id, err.message);
    apply_commit(d);
}

// ---------------------------------------------------------------------------
// Model

void Stepper::forget(rsp_rid rid)
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
    std::vector<rsp_rid> fresh;
    tomb_pos_ = cx_.reg.tombstones_since(tomb_pos_, fresh);
    for (rsp_rid rid : fresh)
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
    auto alloc = [&](rsp_rid rid, rsp_label_id label) {
        ReqModel &m = shadow_[rid];
        if (m.count(label))
            return;
        HoldModel h;
        touch(h);
        m[label] = h;
        journal.emplace_back(rid, label);
    };
    for (const rsp_row &r : d.rows)
        if (d.writes(r))
            alloc(r.rid, r.label);
    if (d.has_forks())
        for (rsp_rid rid : d.forking_rids()) {
            for (const rsp_fork &f : d.pre)
                alloc(rid, f.to);
            for (const rsp_fork &f : d.post)
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

void Stepper::apply_fork(ReqModel &m, const rsp_fork &f) const
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
std::vector<Expect> Stepper::predict(const Decl &d, bool apply)
{
    std::unordered_map<rsp_rid, ReqModel> scratch;
    auto model = [&](rsp_rid rid) -> ReqModel * {
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
        for (rsp_rid rid : d.forking_rids())
            if (ReqModel *m = model(rid))
                for (const rsp_fork &f : d.pre)
                    apply_fork(*m, f);
    std::vector<Expect> out;
    for (const rsp_row &r : d.rows) {
        if (!d.writes(r)) {
            out.push_back({ROW_PAD, false, 0});
            continue;
        }
        ReqModel *m = model(r.rid);
        auto h = m ? m->find(r.label) : ReqModel::iterator();
        if (!m || h == m->end()) // only a removed request can lack it after admit
            out.push_back({ROW_UNKNOWN, false, 0});
        else
            out.push_back({ROW_HOLD, h->second.has, h->second.v});
    }
    return out;
}

void Stepper::apply_commit(const Decl &d)
{
    if (d.capture)
        return;
    for (const rsp_row &r : d.rows) {
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
        for (rsp_rid rid : d.forking_rids()) {
            auto it = shadow_.find(rid);
            if (it != shadow_.end())
                for (const rsp_fork &f : d.post)
                    apply_fork(it->second, f);
        }
    for (rsp_rid rid : d.forking_rids())
        if (tomb(rid))
            cleanup_.push_back(rid);
}

// ---------------------------------------------------------------------------
// Checks

void Stepper::check_staged(const Decl &d, const std::vector<Expect> &exp)
{
    if (rsp_read_begin() != RSP_OK) {
        cx_.checks.fail(CHECK_API, "step thread: rsp_read_begin");
        return;
    }
    const rsp_plan *st = rsp_plan_staged(cx_.pool);
    const rsp_plan *live = rsp_plan_live(cx_.pool);
    bool ok =
        cx_.checks.expect(CHECK_STAGE, st && rsp_plan_step_id(st) == d.id && rsp_plan_is_staged(st),
                          "staged plan: step %" PRIu64 ", expected staged step %" PRIu64,
                          st ? rsp_plan_step_id(st) : 0, d.id);
    cx_.checks.expect(CHECK_STAGE,
                      !live || (rsp_plan_step_id(live) < d.id && !rsp_plan_is_staged(live)),
                      "the live plan (step %" PRIu64 ") shows the stage of step %" PRIu64,
                      live ? rsp_plan_step_id(live) : 0, d.id);
    if (ok) {
        const int32_t pad = cx_.info.pad_index;
        std::unordered_map<int32_t, Key> used;
        for (rsp_label_id label : d.labels()) {
            rsp_addressing ad{};
            rsp_error err{};
            if (!cx_.checks.expect(CHECK_API, rsp_plan_addressing(st, label, &ad, &err) == RSP_OK,
                                   "staged addressing of label %u: %s", label, err.message))
                continue;
            cx_.checks.expect(CHECK_STAGE, ad.staged && ad.step_id == d.id && ad.label == label,
                              "staged addressing header: staged %d step %" PRIu64 " label %u",
                              (int)ad.staged, ad.step_id, ad.label);
            uint32_t k = 0;
            for (size_t j = 0; j < d.rows.size(); j++) {
                const rsp_row &r = d.rows[j];
                if (r.label != label)
                    continue;
                if (k >= ad.num_rows)
                    break;
                int32_t slot = ad.slot_indices[k];
                bool has = ad.has_state[k];
                k++;
                if (exp[j].kind == ROW_PAD) {
                    cx_.checks.expect(CHECK_STAGE, slot == pad && !has,
                                      "staged step %" PRIu64 " row %zu (pad): slot %d has %d", d.id,
                                      j, slot, (int)has);
                    continue;
                }
                if (slot != pad) {
                    auto u = used.emplace(slot, Key(r.rid, r.label));
                    cx_.checks.expect(CHECK_UNIQUE, u.second,
                                      "staged step %" PRIu64 ": slot %d addressed by (%" PRIu64
                                      ", %u) and (%" PRIu64 ", %u)",
                                      d.id, slot, u.first->second.first, u.first->second.second,
                                      r.rid, r.label);
                }
                if (exp[j].kind != ROW_HOLD || tomb(r.rid))
                    continue;
                const HoldModel &h = shadow_[r.rid][r.label];
                bool slot_ok = slot != pad && (h.slot < 0 || h.slot == slot);
                cx_.checks.expect(CHECK_STAGE, slot_ok && has == exp[j].has,
                                  "staged step %" PRIu64 " (%" PRIu64
                                  ", %u): slot %d has %d, model slot %d has %d",
                                  d.id, r.rid, r.label, slot, (int)has, h.slot, (int)exp[j].has);
            }
            cx_.checks.expect(CHECK_STAGE, k == ad.num_rows,
                              "staged label %u: %u rows, declared %u", label, ad.num_rows, k);
            for (uint32_t i = 0; i < ad.num_rows; i++)
                gen_seen_ = std::max(gen_seen_, ad.generations[i]);
        }
    }
    rsp_read_end();
}

std::shared_ptr<StepRecord> Stepper::check_live(const Decl &d, const std::vector<Expect> &exp)
{
    auto rec = std::make_shared<StepRecord>();
    rec->step_id = d.id;
    rec->capture = d.capture;
    rec->labels = d.labels();
    if (rsp_read_begin() != RSP_OK) {
        cx_.checks.fail(CHECK_API, "step thread: rsp_read_begin");
        return rec;
    }
    const rsp_plan *plan = rsp_plan_live(cx_.pool);
    cx_.checks.expect(CHECK_API,
                      plan && rsp_plan_step_id(plan) == d.id && !rsp_plan_is_staged(plan),
                      "after plan: live plan is step %" PRIu64 ", expected %" PRIu64,
                      plan ? rsp_plan_step_id(plan) : 0, d.id);
    const int32_t pad = cx_.info.pad_index;
    const uint64_t floor_before = gen_seen_;
    std::unordered_map<int32_t, Key> used; // slot -> (rid, label) in this step
    std::vector<uint32_t> pos(d.rows.size(), 0);
    std::map<rsp_label_id, uint32_t> next_pos;
    for (size_t j = 0; j < d.rows.size(); j++)
        pos[j] = next_pos[d.rows[j].label]++;
    std::map<rsp_label_id, rsp_addressing> ads;
    for (rsp_label_id label : rec->labels) {
        rsp_addressing ad{};
        rsp_error err{};
        if (!plan ||
            !cx_.checks.expect(CHECK_API, rsp_plan_addressing(plan, label, &ad, &err) == RSP_OK,
                               "addressing of label %u in step %" PRIu64 ": %s", label, d.id,
                               err.message))
            continue;
        bool head = ad.label == label && ad.step_id == d.id && !ad.staged &&
                    ad.num_rows == next_pos[label] && ad.length >= ad.num_rows;
        cx_.checks.expect(CHECK_ADDRESSING, head,
                          "step %" PRIu64 " label %u: addressing says label %u step %" PRIu64
                          " staged %d rows %u length %u; declared rows %u",
                          d.id, label, ad.label, ad.step_id, (int)ad.staged, ad.num_rows, ad.length,
                          next_pos[label]);
        if (!head)
            continue;
        bool tail = true;
        for (uint32_t k = ad.num_rows; k < ad.length; k++)
            tail = tail && ad.slot_indices[k] == pad && !ad.has_state[k];
        cx_.checks.expect(CHECK_ADDRESSING, tail,
                          "step %" PRIu64 " label %u: tail past %u rows is not pad/false", d.id,
                          label, ad.num_rows);
        if (d.has_lease)
            cx_.checks.expect(
                CHECK_ADDRESSING, ad.length >= std::max(kGraphMaxBs, d.lease.bucket_bs),
                "step %" PRIu64 " label %u: leased vector length %u < bucket %u / graph max %u",
                d.id, label, ad.length, d.lease.bucket_bs, kGraphMaxBs);
        ads[label] = ad;
    }
    // An unplanned label is a clear error.
    if (plan && rec->labels.size() < kNumLabels && rng_.chance(0.05)) {
        for (rsp_label_id l : cx_.labels) {
            if (std::find(rec->labels.begin(), rec->labels.end(), l) != rec->labels.end())
                continue;
            rsp_addressing ad{};
            rsp_error err{};
            cx_.checks.expect(CHECK_INVALID, rsp_plan_addressing(plan, l, &ad, &err) == RSP_ENOPLAN,
                              "addressing of unplanned label %u did not give RSP_ENOPLAN", l);
            break;
        }
    }
    for (size_t j = 0; j < d.rows.size(); j++) {
        const rsp_row &r = d.rows[j];
        RowRecord rr{r.rid, r.label, pos[j], exp[j].kind, exp[j].has, exp[j].v};
        auto a = ads.find(r.label);
        if (a == ads.end()) {
            rr.kind = ROW_UNKNOWN;
            rec->rows.push_back(rr);
            continue;
        }
        const rsp_addressing &ad = a->second;
        int32_t slot = ad.slot_indices[pos[j]];
        bool has = ad.has_state[pos[j]];
        uint64_t gen = ad.generations[pos[j]];
        if (exp[j].kind == ROW_PAD) {
            cx_.checks.expect(CHECK_ADDRESSING, slot == pad && !has,
                              "step %" PRIu64 " row %zu (rid %" PRIu64
                              " label %u span %d pad %d capture %d): slot %d has %d,"
                              " expected pad %d",
                              d.id, j, r.rid, r.label, r.span, (int)r.padding, (int)d.capture, slot,
                              (int)has, pad);
            rec->rows.push_back(rr);
            continue;
        }
        bool valid = slot >= 0 && slot < (int32_t)cx_.info.max_slots &&
                     !(cx_.info.sink && slot == RSP_SINK_SLOT);
        if (slot != pad) {
            if (!cx_.checks.expect(CHECK_ADDRESSING, valid,
                                   "step %" PRIu64 " (%" PRIu64 ", %u): wild slot %d", d.id, r.rid,
                                   r.label, slot)) {
                rr.kind = ROW_UNKNOWN;
                rec->rows.push_back(rr);
                continue;
            }
            auto u = used.emplace(slot, Key(r.rid, r.label));
            cx_.checks.expect(
                CHECK_UNIQUE, u.second,
                "step %" PRIu64 ": slot %d addressed by (%" PRIu64 ", %u) and (%" PRIu64 ", %u)",
                d.id, slot, u.first->second.first, u.first->second.second, r.rid, r.label);
        }
        if (exp[j].kind == ROW_UNKNOWN || tomb(r.rid)) {
            // Removed around this step: pad, or a slot that is still its own.
            rr.kind = ROW_UNKNOWN;
            cx_.rows_removed.fetch_add(1, std::memory_order_relaxed);
            rec->rows.push_back(rr);
            continue;
        }
        HoldModel &h = shadow_[r.rid][r.label];
        bool ok = cx_.checks.expect(CHECK_ADDRESSING, slot != pad && has == h.has,
                                    "step %" PRIu64 " (%" PRIu64
                                    ", %u): slot %d has_state %d; model: holding has_state %d",
                                    d.id, r.rid, r.label, slot, (int)has, (int)h.has);
        if (!ok || slot == pad) {
            rr.kind = ROW_UNKNOWN;
            rec->rows.push_back(rr);
            continue;
        }
        if (h.slot >= 0)
            cx_.checks.expect(CHECK_UNIQUE, h.slot == slot,
                              "step %" PRIu64 " (%" PRIu64
                              ", %u): holding moved from slot %d to %d",
                              d.id, r.rid, r.label, h.slot, slot);
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
                              d.id, slot, r.rid, r.label, prev.first, prev.second);
        }
        owner_[slot] = Key(r.rid, r.label);
        if (h.gen_known)
            cx_.checks.expect(CHECK_GENERATION, gen == h.gen,
                              "step %" PRIu64 " (%" PRIu64
                              ", %u): untouched holding moved generation %" PRIu64 " -> %" PRIu64,
                              d.id, r.rid, r.label, h.gen, gen);
        else
            cx_.checks.expect(CHECK_GENERATION, gen > h.gen_floor,
                              "step %" PRIu64 " (%" PRIu64 ", %u): generation %" PRIu64
                              " did not move past %" PRIu64 " after assignment/fork/reset",
                              d.id, r.rid, r.label, gen, h.gen_floor);
        h.slot = slot;
        h.gen = gen;
        h.gen_known = true;
        gen_seen_ = std::max(gen_seen_, gen);
        rec->rows.push_back(rr);
    }
    (void)floor_before;
    rsp_read_end();
    return rec;
}

void Stepper::check_stats(const char *when)
{
    rsp_stats s{};
    rsp_error err{};
    if (!cx_.checks.expect(CHECK_API, rsp_stats_get(cx_.pool, &s, &err) == RSP_OK,
                           "rsp_stats_get: %s", err.message))
        return;
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
    std::vector<rsp_rid> rids;
    cx_.reg.sample(rng_, 1, rids);
    rsp_rid rid = rids.empty() ? kPadRid + 1 : rids[0];
    rsp_error err{};
    rsp_admit_outcome out{};
    Decl d;
    d.id = ++next_id_;
    switch (rng_.below(4)) {
    case 0: { // the same (rid, label) twice with span > 0
        d.rows = {{rid, RSP_LABEL_MAIN, 1, false}, {rid, RSP_LABEL_MAIN, 3, false}};
        rsp_step s = d.step(false);
        rsp_status st = rsp_step_admit(cx_.pool, &s, &out, &err);
        cx_.checks.expect(CHECK_INVALID, st == RSP_EDUPROW,
                          "duplicate rows: %s, expected RSP_EDUPROW", rsp_strerror(st));
        break;
    }
    case 1: { // an unknown label
        d.rows = {{rid, RSP_MAX_LABELS - 1, 1, false}};
        rsp_step s = d.step(false);
        rsp_status st = rsp_step_admit(cx_.pool, &s, &out, &err);
        cx_.checks.expect(CHECK_INVALID, st == RSP_ENOLABEL,
                          "unknown label: %s, expected RSP_ENOLABEL", rsp_strerror(st));
        break;
    }
    case 2: { // a fork with an unknown label
        d.rows = {{rid, RSP_LABEL_MAIN, 1, false}};
        d.pre = {{RSP_LABEL_MAIN, RSP_MAX_LABELS - 2}};
        rsp_step s = d.step(false);
        rsp_status st = rsp_step_admit(cx_.pool, &s, &out, &err);
        cx_.checks.expect(CHECK_INVALID, st == RSP_ENOLABEL,
                          "fork to unknown label: %s, expected RSP_ENOLABEL", rsp_strerror(st));
        break;
    }
    default: { // plan and commit of a step that was never admitted
        d.rows = {{rid, RSP_LABEL_MAIN, 1, false}};
        rsp_step s = d.step(false);
        rsp_status st = rsp_step_plan(cx_.pool, &s, &err);
        cx_.checks.expect(CHECK_INVALID, st == RSP_EORDER,
                          "plan of a step never admitted: %s, expected RSP_EORDER",
                          rsp_strerror(st));
        st = rsp_step_commit(cx_.pool, &s, nullptr, &err);
        cx_.checks.expect(CHECK_INVALID, st == RSP_EORDER,
                          "commit of a step never admitted: %s, expected RSP_EORDER",
                          rsp_strerror(st));
        break;
    }
    }
    rsp_holding h{};
    rsp_status st = rsp_holding_get(cx_.pool, kPadRid, RSP_LABEL_MAIN, &h, &err);
    cx_.checks.expect(CHECK_INVALID, st == RSP_ENOREQ,
                      "holding of the padding rid: %s, expected RSP_ENOREQ", rsp_strerror(st));
    cx_.invalid.fetch_add(1, std::memory_order_relaxed);
}

bool Stepper::wait_acks(const std::shared_ptr<StepRecord> &rec)
{
    if (!rec)
        return true;
    std::unique_lock<std::mutex> g(rec->mu);
    bool ok = rec->cv.wait_for(g, std::chrono::nanoseconds(kHangNs), [&] {
        return rec->acks.load() == cx_.opt.readers || cx_.abort.load();
    });
    if (!ok) {
        cx_.checks.fail(CHECK_HANG, "partitions did not take the plan of step %" PRIu64,
                        rec->step_id);
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
                      "refused step %" PRIu64 ": usable %u free %u short %u (pool usable %u)", d.id,
                      out.usable, out.free, out.slots_short, cx_.info.usable_slots);
    rsp_error err{};
    rsp_status st = rsp_step_rollback(cx_.pool, d.id, nullptr, &err);
    cx_.checks.expect(CHECK_API, st == RSP_OK, "rollback of refused step %" PRIu64 ": %s", d.id,
                      err.message);
    rsp_stats s{};
    if (rsp_stats_get(cx_.pool, &s, &err) == RSP_OK)
        cx_.checks.expect(CHECK_REFUSAL, s.free_slots >= out.free,
                          "after rollback of refused step %" PRIu64
                          ": %u free < %u reported at refusal",
                          d.id, s.free_slots, out.free);
}

// The engine's preemption and restarts: reset a request, keeping or
// freeing its slots. Only with no step in flight from the model's view.
void Stepper::maybe_reset()
{
    if (shadow_.empty() || !rng_.chance(0.02))
        return;
    auto it = shadow_.begin();
    std::advance(it, rng_.below((uint32_t)std::min<size_t>(shadow_.size(), 64)));
    rsp_rid rid = it->first;
    if (tomb(rid)) {
        forget(rid);
        return;
    }
    bool free = rng_.chance(0.5);
    rsp_error err{};
    rsp_status st = rsp_reset(cx_.pool, rid, free, &err);
    cx_.checks.expect(CHECK_API, st == RSP_OK, "reset(%" PRIu64 ", %d): %s", rid, (int)free,
                      err.message);
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
    rsp_error err{};
    if (!cx_.checks.expect(CHECK_API, rsp_reader_register(&err) == RSP_OK,
                           "rsp_reader_register: %s", err.message)) {
        cx_.abort.store(true);
        return;
    }
    while (!cx_.stop.load(std::memory_order_relaxed) &&
           !cx_.abort.load(std::memory_order_relaxed)) {
        forget_tombstoned();
        if (rng_.chance(0.01))
            invalid_inputs();
        Decl d = make_decl();
        cx_.last_step_id.store(d.id, std::memory_order_relaxed);

        rsp_admit_outcome out{};
        rsp_status st = admit(d, &out, &err);
        if (!cx_.checks.expect(CHECK_API, st == RSP_OK, "admit of step %" PRIu64 ": %s", d.id,
                               err.message))
            break;
        if (d.capture)
            cx_.checks.expect(CHECK_API, out.ok, "capture step %" PRIu64 " refused", d.id);
        if (!out.ok) {
            after_refusal(d, out);
            if (pend_.active) {
                commit(pend_.d);
                pend_.active = false;
            }
            // Preempt a request, as an engine would when memory runs out.
            std::vector<rsp_rid> victim;
            if (rng_.chance(0.5)) {
                cx_.reg.sample(rng_, 1, victim);
                if (!victim.empty() && cx_.reg.retire(victim[0])) {
                    rsp_status rs = rsp_remove(cx_.pool, victim[0], &err);
                    cx_.checks.expect(CHECK_API, rs == RSP_OK, "remove: %s", err.message);
                }
            }
            continue;
        }
        std::vector<Key> journal;
        apply_admit(d, journal);

        if (d.preplan) {
            std::vector<Expect> staged = predict(d, false);
            st = plan(d, true, &err);
            if (cx_.checks.expect(CHECK_API, st == RSP_OK, "stage of step %" PRIu64 ": %s", d.id,
                                  err.message))
                check_staged(d, staged);
            cx_.preplanned.fetch_add(1, std::memory_order_relaxed);
            if (rng_.chance(0.1)) {
                // Abandon the staged step: drop the stage, give its slots back.
                st = rsp_clear_preplan(cx_.pool, &err);
                cx_.checks.expect(CHECK_API, st == RSP_OK, "clear_preplan: %s", err.message);
                st = rsp_step_rollback(cx_.pool, d.id, nullptr, &err);
                cx_.checks.expect(CHECK_API, st == RSP_OK, "rollback of abandoned step: %s",
                                  err.message);
                undo_journal(journal);
                if (rsp_read_begin() == RSP_OK) {
                    cx_.checks.expect(CHECK_STAGE, rsp_plan_staged(cx_.pool) == nullptr,
                                      "a stage is still published after clear_preplan");
                    rsp_read_end();
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
        st = plan(d, false, &err);
        if (!cx_.checks.expect(CHECK_API, st == RSP_OK, "plan of step %" PRIu64 ": %s", d.id,
                               err.message)) {
            rsp_step_rollback(cx_.pool, d.id, nullptr, &err);
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
            pend_.d = d;
            pend_.active = true;
        } else {
            commit(d);
        }
        if (!pend_.active) {
            for (rsp_rid rid : cleanup_) {
                // A step may have re-created a request its client had already removed.
                rsp_msg m{};
                m.kind = RSP_MSG_REMOVE;
                m.rid = rid;
                cx_.checks.expect(CHECK_API,
                                  rsp_post(cx_.pool, &m, nullptr, RSP_WAIT_FOREVER, &err) == RSP_OK,
                                  "cleanup remove: %s", err.message);
            }
            cleanup_.clear();
            maybe_reset();
        }
        if (d.id % 32 == 0)
            check_stats("step thread");
    }
    if (pend_.active) {
        commit(pend_.d);
        pend_.active = false;
    }
    auto end = std::make_shared<StepRecord>();
    end->end = true;
    publish(end);
    rsp_reader_unregister();
}

} // namespace

void step_main(Context &cx)
{
    Stepper s(cx);
    s.run();
}

} // namespace stress
