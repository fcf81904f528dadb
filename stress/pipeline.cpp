// rsp-stress: the pipelined mode, an overlap scheduler (docs/semantics.md
// 9.1). A pool of its own; a step thread keeps 2..4 steps in flight (the depth
// changes every kDepthPeriod steps) and puts the same decoding requests in
// consecutive ones, as SGLang's overlap mode and vLLM's async scheduling
// plan step N+1 while N's forward runs. It commits in order, each step with
// its forward_done (a host fence). --pipeline-readers threads run every
// step's forward on their share of its rows, in step order (the forward of
// step M starts only once M-1's forward is done, as on one device stream),
// reading that step's own plan (pool.plan_wait_step, read_section::plan(pool,
// id)), not the newest live one. They check each row's addressing, device
// vectors and slot contents against the step thread's model, which knows the
// state after every step that writes a request, committed or still in
// flight (check kinds "pipeline", "overlap", "addressing", "vectors",
// "zeros", "content"). Around the steps in flight, requests enter
// (prefill), finish while their last steps are in flight (removed: the slot
// must not change hands before the last of them ends, "unique"), are reset
// with free = false once no step in flight names them; now and then the
// newest step is rolled back, and a rollback of the oldest while a later
// step names its requests must be refused ("newest_first").
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <cctype>
#include <cinttypes>
#include <string>
#include <thread>

namespace stress
{

namespace
{

constexpr unsigned kMinDepth = 2, kMaxDepth = 4; // steps in flight at once
constexpr unsigned kDepthPeriod = 64;            // steps between changes of the depth
constexpr unsigned kRids = 12;                   // requests alive at once
constexpr uint32_t kSlots = 48; // the pool's max_slots (more than kRids: never refused)
constexpr double kInStep = 0.8; // chance that a live request is in the next step
// Chances per retired step: a request in flight finishes (removed), one in
// no step in flight finishes, one is put on hold for a reset; a step beyond
// the depth is planned and rolled back (the newest); a rollback of the
// oldest step while a later one names its requests is tried (refused).
constexpr double kFinishInFlight = 0.1, kFinishIdle = 0.05, kHold = 0.03;
constexpr double kRollbackNewest = 0.03, kOlderRollback = 0.05;
// The status of a rollback of step N while a later step in flight names a
// holding N writes (docs/semantics.md 9.1: roll back newest first). One
// constant: the status the core gives for it.
constexpr rsp_status kOlderRollbackStatus = RSP_EORDER;

struct PRow {
    rsp::rid rid;
    int32_t slot;
    bool has_state; // what the plan must say: an earlier step (committed or in flight) wrote rid
    uint64_t v;     // the state the forward reads (0 when has_state is false)
    bool overlap;   // the latest of those writes is a step still in flight at this plan
};

struct PStep {
    explicit PStep(rsp::step_id i) : id(i), decl(i)
    {
    }
    rsp::step_id id;
    rsp::step decl;
    bool end = false;
    uint64_t seq = 0;       // position in forward order (0, 1, 2, ...)
    bool fresh = false;     // its admit allocated a slot (a request's first step)
    std::vector<PRow> rows; // declaration order: row j is at position j of main's vectors
    std::atomic<unsigned> done{0};
    std::mutex mu;
    std::condition_variable cv;
};

class PQueue
{
  public:
    void push(std::shared_ptr<PStep> r)
    {
        std::lock_guard<std::mutex> g(mu_);
        q_.push_back(std::move(r));
        cv_.notify_one();
    }
    std::shared_ptr<PStep> pop(std::chrono::nanoseconds timeout)
    {
        std::unique_lock<std::mutex> g(mu_);
        if (!cv_.wait_for(g, timeout, [&] { return !q_.empty(); }))
            return nullptr;
        std::shared_ptr<PStep> r = std::move(q_.front());
        q_.pop_front();
        return r;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<PStep>> q_;
};

struct Pipe {
    rsp::host_fence fence; // outlives the pool
    rsp::pool pool;
    Storage storage;
    std::vector<std::unique_ptr<PQueue>> queues; // one per reader
    // Forwards run in step order, as on one device stream: forwards_done is
    // the number of steps (in seq order) whose forward every reader finished.
    std::mutex fwd_mu;
    std::condition_variable fwd_cv;
    uint64_t forwards_done = 0; // under fwd_mu
};

// Wait for step id's own plan in 100 ms slices (so an abort elsewhere ends
// the wait). False on a failure (counted) or a hang.
bool wait_own_plan(Context &cx, Pipe &pp, rsp::step_id id, unsigned index)
{
    for (std::chrono::milliseconds waited{0}; waited < kHang; waited += 100ms) {
        rsp::result<void> r = pp.pool.try_plan_wait_step(id, 100ms);
        if (r.ok())
            return true;
        if (r.status() != RSP_ETIMEDOUT)
            return cx.checks.expect(CHECK_PIPELINE, false,
                                    "reader %u: plan_wait_step(%" PRIu64 "): %s", index,
                                    rsp::raw(id), r.error().message);
        if (cx.abort.load())
            return false;
    }
    cx.checks.fail(CHECK_HANG, "pipeline reader %u: plan of step %" PRIu64 " never published",
                   index, rsp::raw(id));
    cx.abort.store(true);
    return false;
}

// Wait until the forward of every step before st is done (100 ms slices).
bool wait_turn(Context &cx, Pipe &pp, const PStep &st, unsigned index)
{
    std::unique_lock<std::mutex> g(pp.fwd_mu);
    for (std::chrono::milliseconds waited{0}; waited < kHang; waited += 100ms) {
        if (pp.fwd_cv.wait_for(g, 100ms, [&] { return pp.forwards_done == st.seq; }))
            return true;
        if (cx.abort.load())
            return false;
    }
    cx.checks.fail(CHECK_HANG,
                   "pipeline reader %u: the forward before step %" PRIu64 " never ended", index,
                   rsp::raw(st.id));
    cx.abort.store(true);
    return false;
}

// Check row j's slot and has_state against the model. A row whose request
// an earlier in-flight step writes counts its has_state in "overlap"
// (docs/semantics.md 9.1), every other row in "addressing".
void check_row_addressing(Context &cx, const PStep &st, size_t j, int32_t slot, bool has)
{
    Checks &ck = cx.checks;
    const PRow &r = st.rows[j];
    ck.expect(CHECK_ADDRESSING, slot == r.slot,
              "step %" PRIu64 " row %zu (rid %" PRIu64 "): slot %d, expected %d", rsp::raw(st.id),
              j, rsp::raw(r.rid), slot, r.slot);
    ck.expect(r.overlap ? CHECK_OVERLAP : CHECK_ADDRESSING, has == r.has_state,
              "step %" PRIu64 " row %zu (rid %" PRIu64 ", slot %d): has_state %d, expected %d%s",
              rsp::raw(st.id), j, rsp::raw(r.rid), r.slot, (int)has, (int)r.has_state,
              r.overlap ? " (an earlier step in flight writes it)" : "");
}

// Check one row's addressing and content, then write the next state (its
// content counts in "overlap" as its has_state does, else in "content" /
// "zeros").
void forward_row(Context &cx, Pipe &pp, const PStep &st, size_t j, int32_t slot, bool has)
{
    Checks &ck = cx.checks;
    const PRow &r = st.rows[j];
    check_row_addressing(cx, st, j, slot, has);
    std::string why;
    if (r.has_state)
        ck.expect(r.overlap ? CHECK_OVERLAP : CHECK_CONTENT, pp.storage.matches(r.slot, r.v, &why),
                  "step %" PRIu64 " rid %" PRIu64 " slot %d: %s", rsp::raw(st.id), rsp::raw(r.rid),
                  r.slot, why.c_str());
    else
        ck.expect(CHECK_ZEROS, pp.storage.is_zero(r.slot, &why),
                  "step %" PRIu64 " rid %" PRIu64 " slot %d: %s", rsp::raw(st.id), rsp::raw(r.rid),
                  r.slot, why.c_str());
    // The model's state, whatever the plan said: the next rows stay checkable.
    pp.storage.write(r.slot, next_state(r.rid, rsp::label::main, st.id, r.v));
}

// One reader's forward of one step: its own plan, its turn after the
// forward of the step before, the ready event, then its rows (row j belongs
// to reader j mod readers).
void forward(Context &cx, Pipe &pp, PStep &st, unsigned index, unsigned readers)
{
    Checks &ck = cx.checks;
    if (!wait_own_plan(cx, pp, st.id, index) || !wait_turn(cx, pp, st, index))
        return;
    rsp::read_section section(std::nothrow);
    if (!ck.expect(CHECK_API, section.ok(), "pipeline reader %u: %s", index,
                   rsp::read_section::why(section.status())))
        return;
    rsp::plan_view p = section.plan(pp.pool, st.id);
    if (!ck.expect(CHECK_PIPELINE, p && p.id() == st.id && !p.staged(),
                   "reader %u: plan(pool, %" PRIu64 ") gave %s %" PRIu64, index, rsp::raw(st.id),
                   p ? "step" : "nothing", p ? rsp::raw(p.id()) : 0))
        return;
    rsp::plan_view live = section.live(pp.pool);
    if (live && live.id() != st.id)
        cx.pipe_behind.fetch_add(1, std::memory_order_relaxed); // a newer step is planned
    rsp::result<rsp::addressing> got = p.try_addressing(rsp::label::main);
    if (!ck.expect(CHECK_API, got.ok(), "reader %u step %" PRIu64 ": addressing: %s", index,
                   rsp::raw(st.id), got.error().message))
        return;
    const rsp::addressing &ad = got.value();
    ck.expect(CHECK_PIPELINE, ad.step() == st.id && ad.num_rows() == st.rows.size(),
              "reader %u: step %" PRIu64 "'s addressing names step %" PRIu64 " with %u rows (%zu)",
              index, rsp::raw(st.id), rsp::raw(ad.step()), ad.num_rows(), st.rows.size());
    if (ad.num_rows() != st.rows.size())
        return;
    rsp::result<void> w = pp.pool.try_event_wait(ad.ready(), kHang);
    if (!ck.expect(CHECK_HANG, w.ok(), "reader %u step %" PRIu64 ": ready: %s", index,
                   rsp::raw(st.id), rsp_strerror(w.status()))) {
        cx.abort.store(true);
        return;
    }
    auto slots = ad.slots();
    auto has = ad.has_state();
    auto dslots = ad.device_slots();
    auto dhas = ad.device_has_state();
    for (size_t j = index; j < st.rows.size(); j += readers) {
        ck.expect(CHECK_VECTORS, dslots[j] == slots[j] && dhas[j] == has[j],
                  "step %" PRIu64 " row %zu: device vectors %d/%d, host %d/%d", rsp::raw(st.id), j,
                  dslots[j], (int)dhas[j], slots[j], (int)has[j]);
        forward_row(cx, pp, st, j, slots[j], has[j]);
    }
}

void reader_main(Context &cx, Pipe &pp, unsigned index, unsigned readers)
{
    rsp::reader reg(std::nothrow);
    if (!cx.checks.expect(CHECK_API, reg.ok(), "pipeline reader %u: %s", index,
                          reg.error().message))
        cx.abort.store(true);
    for (;;) {
        std::shared_ptr<PStep> st = pp.queues[index]->pop(kHang);
        if (!st) {
            if (!cx.abort.load())
                cx.checks.fail(CHECK_HANG, "pipeline reader %u: no step in %llds", index,
                               (long long)kHang.count());
            cx.abort.store(true);
            return;
        }
        if (st->end)
            return;
        if (reg.ok() && !cx.abort.load())
            forward(cx, pp, *st, index, readers);
        bool last = false;
        {
            std::lock_guard<std::mutex> g(st->mu);
            last = st->done.fetch_add(1) + 1 == readers;
            st->cv.notify_all();
        }
        if (last) { // the next step's forward may start
            std::lock_guard<std::mutex> g(pp.fwd_mu);
            pp.forwards_done = st->seq + 1;
            pp.fwd_cv.notify_all();
        }
    }
}

// The step thread's model of one request.
struct Req {
    rsp::rid rid{0};
    int32_t slot = -1;    // RSP_NO_SLOT until its first admit
    bool written = false; // a step admitted since its last reset (committed or in flight) writes it
    uint64_t v = 0;       // the state after the latest of those writes
    rsp::step_id writer{0}; // that step
    unsigned inflight = 0;  // steps in flight naming it
    bool hold = false;      // in no new step: it is reset (free = false) once inflight is 0
};

class Stepper
{
  public:
    Stepper(Context &cx, Pipe &pp, unsigned readers)
        : cx_(cx), pp_(pp), readers_(readers), rng_(mix64(cx.opt.seed * 7919u + 5))
    {
        for (unsigned k = 0; k < kRids; k++)
            reqs_[k].rid = fresh();
        depth_ = kMinDepth + rng_.below(kMaxDepth - kMinDepth + 1);
    }
    void run();
    void finish();

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{1} << 50) + next_rid_++};
    }
    Req *find(rsp::rid rid)
    {
        for (Req &q : reqs_)
            if (q.rid == rid)
                return &q;
        return nullptr;
    }
    // The step that wrote q last is still in flight (steps retire in id order).
    bool writer_in_flight(const Req &q) const
    {
        return q.written && !inflight_.empty() && q.writer >= inflight_.front()->id;
    }
    std::vector<Req *> choose();
    std::shared_ptr<PStep> admit_and_plan(const std::vector<Req *> &pick);
    bool check_slot(const PStep &st, rsp::rid rid, int32_t slot);
    void start(const std::shared_ptr<PStep> &st, const std::vector<Req *> &pick);
    bool launch();
    void rollback_newest();
    bool older_rollback_accepted(const PStep &old);
    bool retire_oldest();
    void churn();
    void restart();
    void wait_ready(rsp::step_id id);
    void drain_device();
    Context &cx_;
    Pipe &pp_;
    unsigned readers_;
    Rng rng_;
    Req reqs_[kRids];
    uint64_t next_rid_ = 1, next_id_ = 1, next_seq_ = 0, launched_ = 0;
    unsigned depth_;
    bool desync_ = false; // the pool rolled an older step back: drain, then restart the model
    std::deque<std::shared_ptr<PStep>> inflight_;
};

// rid's holding at slot: no other request's holding named by a step in
// flight has that slot, nor does another row of this step (the slot of a
// request removed while in flight is not handed out before its last step
// ends).
bool Stepper::check_slot(const PStep &st, rsp::rid rid, int32_t slot)
{
    for (const auto &s : inflight_)
        for (const PRow &r : s->rows)
            if (r.slot == slot && r.rid != rid)
                return cx_.checks.expect(CHECK_UNIQUE, false,
                                         "step %" PRIu64 " gives rid %" PRIu64
                                         " slot %d, which rid %" PRIu64 " holds in step %" PRIu64,
                                         rsp::raw(st.id), rsp::raw(rid), slot, rsp::raw(r.rid),
                                         rsp::raw(s->id));
    for (const PRow &r : st.rows)
        if (r.slot == slot)
            return cx_.checks.expect(CHECK_UNIQUE, false,
                                     "step %" PRIu64 " gives rids %" PRIu64 " and %" PRIu64
                                     " slot %d",
                                     rsp::raw(st.id), rsp::raw(r.rid), rsp::raw(rid), slot);
    cx_.checks.pass(CHECK_UNIQUE);
    return true;
}

// The requests of the next step: each live one not on hold with chance
// kInStep (at least one), whether or not earlier steps in flight name it.
std::vector<Req *> Stepper::choose()
{
    std::vector<Req *> pick, idle;
    for (Req &q : reqs_)
        if (!q.hold)
            (rng_.chance(kInStep) ? pick : idle).push_back(&q);
    if (pick.empty() && !idle.empty())
        pick.push_back(idle[rng_.below((uint32_t)idle.size())]);
    return pick;
}

// Admit and plan a step of pick (a request without a slot prefills, span
// 2..8; the others decode); the model predicts each row's has_state and
// read. Null when it could not (counted; the step is rolled back).
std::shared_ptr<PStep> Stepper::admit_and_plan(const std::vector<Req *> &pick)
{
    Checks &ck = cx_.checks;
    auto st = std::make_shared<PStep>(rsp::step_id{next_id_++});
    for (Req *q : pick)
        st->decl.row(q->rid, rsp::label::main, q->slot < 0 ? 2 + (int32_t)rng_.below(7) : 1);
    rsp::result<rsp_admit_outcome> out = pp_.pool.try_admit(st->decl);
    if (!ck.expect(CHECK_PIPELINE, out.ok() && out.value().ok,
                   "admit of step %" PRIu64 " with %zu in flight: %s", rsp::raw(st->id),
                   inflight_.size(), out.ok() ? "refused" : out.error().message)) {
        (void)pp_.pool.try_rollback(st->id);
        return nullptr;
    }
    for (Req *q : pick) {
        rsp::result<rsp_holding> h = pp_.pool.try_holding(q->rid, rsp::label::main);
        if (!ck.expect(CHECK_API, h.ok(), "holding: %s", h.error().message)) {
            (void)pp_.pool.try_rollback(st->id);
            return nullptr;
        }
        const int32_t slot = h.value().index;
        ck.expect(CHECK_UNIQUE, q->slot < 0 || q->slot == slot,
                  "rid %" PRIu64 " moved from slot %d to %d", rsp::raw(q->rid), q->slot, slot);
        check_slot(*st, q->rid, slot);
        st->fresh |= q->slot < 0;
        st->rows.push_back(
            PRow{q->rid, slot, q->written, q->written ? q->v : 0, writer_in_flight(*q)});
    }
    rsp::result<void> planned = pp_.pool.try_plan(st->decl);
    if (!ck.expect(CHECK_PIPELINE, planned.ok(), "plan of step %" PRIu64 ": %s", rsp::raw(st->id),
                   planned.error().message)) {
        (void)pp_.pool.try_rollback(st->id);
        return nullptr;
    }
    return st;
}

// Step st (planned, rows pick) is in flight: the model takes its writes and
// the readers get it.
void Stepper::start(const std::shared_ptr<PStep> &st, const std::vector<Req *> &pick)
{
    for (size_t i = 0; i < pick.size(); i++) {
        Req &q = *pick[i];
        const PRow &r = st->rows[i];
        cx_.pipe_overlap.fetch_add(r.overlap, std::memory_order_relaxed);
        cx_.pipe_prefills.fetch_add(q.slot < 0, std::memory_order_relaxed);
        q.slot = r.slot;
        q.v = next_state(q.rid, rsp::label::main, st->id, r.v);
        q.written = true;
        q.writer = st->id;
        q.inflight++;
    }
    if (inflight_.size() < kMaxDepth)
        cx_.pipe_depth[inflight_.size() + 1].fetch_add(1, std::memory_order_relaxed);
    st->seq = next_seq_++;
    inflight_.push_back(st);
    for (auto &q : pp_.queues)
        q->push(st);
    uint32_t cur = cx_.pipe_max_inflight.load(std::memory_order_relaxed);
    if (inflight_.size() > cur)
        cx_.pipe_max_inflight.store((uint32_t)inflight_.size(), std::memory_order_relaxed);
}

// One more step in flight (the depth is redrawn every kDepthPeriod steps).
bool Stepper::launch()
{
    if (launched_++ % kDepthPeriod == 0)
        depth_ = kMinDepth + rng_.below(kMaxDepth - kMinDepth + 1);
    std::vector<Req *> pick = choose();
    std::shared_ptr<PStep> st = pick.empty() ? nullptr : admit_and_plan(pick);
    if (!st)
        return false;
    start(st, pick);
    return true;
}

// Plan one more step on top of those in flight, check its plan from this
// thread, and roll it back (the newest in flight, its forward never run):
// its plan is withdrawn, the holdings it allocated are gone, the others
// stay where they were. Half the time the next step retries its id.
void Stepper::rollback_newest()
{
    Checks &ck = cx_.checks;
    std::vector<Req *> pick = choose();
    std::shared_ptr<PStep> st = pick.empty() ? nullptr : admit_and_plan(pick);
    if (!st)
        return;
    {
        rsp::read_section section(std::nothrow);
        rsp::plan_view p = section ? section.plan(pp_.pool, st->id) : rsp::plan_view(nullptr);
        rsp::result<rsp::addressing> ad =
            p ? p.try_addressing(rsp::label::main) : rsp::result<rsp::addressing>(rsp_error{});
        if (ck.expect(CHECK_PIPELINE, ad.ok() && ad.value().num_rows() == st->rows.size(),
                      "step %" PRIu64 " (to be rolled back): no plan of its rows",
                      rsp::raw(st->id)))
            for (size_t j = 0; j < st->rows.size(); j++)
                check_row_addressing(cx_, *st, j, ad.value().slots()[j], ad.value().has_state()[j]);
    }
    rsp::result<void> r = pp_.pool.try_rollback(st->id);
    if (!ck.expect(CHECK_PIPELINE, r.ok(), "rollback of the newest step %" PRIu64 ": %s",
                   rsp::raw(st->id), r.error().message)) {
        start(st, pick); // still in flight: run it as any other
        return;
    }
    cx_.pipe_rollbacks.fetch_add(1, std::memory_order_relaxed);
    rsp::result<void> gone = pp_.pool.try_plan_wait_step(st->id, 0ns);
    ck.expect(CHECK_PIPELINE, gone.status() == RSP_ENOPLAN,
              "plan_wait_step of rolled-back step %" PRIu64 ": %s", rsp::raw(st->id),
              rsp_strerror(gone.status()));
    for (size_t i = 0; i < pick.size(); i++) {
        const Req &q = *pick[i];
        rsp::result<rsp_holding> h = pp_.pool.try_holding(q.rid, rsp::label::main);
        if (q.slot < 0)
            ck.expect(CHECK_PIPELINE, h.status() == RSP_ENOREQ,
                      "rid %" PRIu64 " allocated by rolled-back step %" PRIu64 ": holding %s",
                      rsp::raw(q.rid), rsp::raw(st->id), rsp_strerror(h.status()));
        else
            ck.expect(CHECK_PIPELINE, h.ok() && h.value().index == q.slot,
                      "rid %" PRIu64 " after rolled-back step %" PRIu64 ": %s slot %d, was %d",
                      rsp::raw(q.rid), rsp::raw(st->id), rsp_strerror(h.status()),
                      h.ok() ? h.value().index : -1, q.slot);
    }
    if (rng_.chance(0.5))
        next_id_--; // a rolled-back id may be admitted again
}

// True when msg names step id as a number of its own.
bool names_step(const char *msg, rsp::step_id id)
{
    const std::string want = std::to_string(rsp::raw(id));
    const std::string m = msg;
    for (size_t at = m.find(want); at != std::string::npos; at = m.find(want, at + 1)) {
        const bool left = at == 0 || !std::isdigit((unsigned char)m[at - 1]);
        const size_t end = at + want.size();
        if (left && (end == m.size() || !std::isdigit((unsigned char)m[end])))
            return true;
    }
    return false;
}

// With old (the oldest step in flight, its forward done, no slot allocated)
// and a later step in flight naming one of its requests: a rollback of old
// must be refused with kOlderRollbackStatus naming a later step, and leave
// old in flight with its plan (roll back newest first). True when the pool
// rolled old back instead (counted as a failure): then old is not committed.
bool Stepper::older_rollback_accepted(const PStep &old)
{
    Checks &ck = cx_.checks;
    rsp::step_id later{0}; // a later step in flight naming a live request of old
    rsp::rid shared{0};
    for (size_t i = 1; i < inflight_.size() && !rsp::raw(later); i++)
        for (const PRow &r : inflight_[i]->rows)
            for (const PRow &o : old.rows)
                if (r.rid == o.rid && find(r.rid)) {
                    shared = r.rid;
                    later = inflight_[i]->id;
                }
    if (!rsp::raw(later))
        return false;
    cx_.pipe_older_probes.fetch_add(1, std::memory_order_relaxed);
    rsp::result<void> r = pp_.pool.try_rollback(old.id, pp_.fence.at(rsp::raw(old.id)));
    if (r.ok()) {
        ck.fail(CHECK_NEWEST_FIRST,
                "rollback of step %" PRIu64 " accepted while step %" PRIu64
                " (in flight) names its rid %" PRIu64 ": expected %s",
                rsp::raw(old.id), rsp::raw(later), rsp::raw(shared),
                rsp_strerror(kOlderRollbackStatus));
        return true;
    }
    ck.expect(CHECK_NEWEST_FIRST, r.status() == kOlderRollbackStatus,
              "rollback of step %" PRIu64 " while step %" PRIu64 " names rid %" PRIu64
              ": %s, expected %s",
              rsp::raw(old.id), rsp::raw(later), rsp::raw(shared), r.error().message,
              rsp_strerror(kOlderRollbackStatus));
    bool named = false; // any later step: it may name one by a slot it pins, not a request
    for (size_t i = 1; i < inflight_.size(); i++)
        named |= names_step(r.error().message, inflight_[i]->id);
    ck.expect(CHECK_NEWEST_FIRST, named,
              "refused rollback of step %" PRIu64 " names no later step (step %" PRIu64
              " names rid %" PRIu64 "): %s",
              rsp::raw(old.id), rsp::raw(later), rsp::raw(shared), r.error().message);
    rsp::read_section section(std::nothrow);
    if (section)
        ck.expect(CHECK_NEWEST_FIRST, (bool)section.plan(pp_.pool, old.id),
                  "step %" PRIu64 "'s plan gone after its refused rollback", rsp::raw(old.id));
    return false;
}

// Wait for the oldest step's forward, signal its forward_done, now and then
// try to roll it back (refused: a later step names its requests), commit
// it; its plan must be gone, the later steps' still readable.
bool Stepper::retire_oldest()
{
    Checks &ck = cx_.checks;
    std::shared_ptr<PStep> st = inflight_.front();
    {
        std::unique_lock<std::mutex> g(st->mu);
        if (!st->cv.wait_for(g, kHang, [&] { return st->done.load() == readers_; })) {
            ck.fail(CHECK_HANG, "pipeline: forward of step %" PRIu64 " not done in %llds",
                    rsp::raw(st->id), (long long)kHang.count());
            cx_.abort.store(true);
            return false;
        }
    }
    pp_.fence.signal(rsp::raw(st->id)); // commits in order: the fence only moves forward
    const bool rolled = inflight_.size() >= 2 && !st->fresh && rng_.chance(kOlderRollback) &&
                        older_rollback_accepted(*st);
    inflight_.pop_front();
    for (const PRow &r : st->rows)
        if (Req *q = find(r.rid))
            q->inflight--;
    if (rolled) {
        desync_ = true; // the model no longer says what the pool holds: start again
        return true;
    }
    rsp::result<void> c = pp_.pool.try_commit(st->decl, pp_.fence.at(rsp::raw(st->id)));
    if (!ck.expect(CHECK_PIPELINE, c.ok(), "commit of step %" PRIu64 ": %s", rsp::raw(st->id),
                   c.error().message))
        return false;
    cx_.pipe_steps.fetch_add(1, std::memory_order_relaxed);
    rsp::result<void> gone = pp_.pool.try_plan_wait_step(st->id, 0ns);
    ck.expect(CHECK_PIPELINE, gone.status() == RSP_ENOPLAN,
              "plan_wait_step of committed step %" PRIu64 ": %s", rsp::raw(st->id),
              rsp_strerror(gone.status()));
    rsp::read_section section(std::nothrow);
    if (section) {
        ck.expect(CHECK_PIPELINE, !section.plan(pp_.pool, st->id),
                  "step %" PRIu64 "'s plan still readable after its commit", rsp::raw(st->id));
        for (const auto &later : inflight_) {
            rsp::plan_view p = section.plan(pp_.pool, later->id);
            ck.expect(CHECK_PIPELINE, p && p.id() == later->id,
                      "step %" PRIu64 " in flight but its plan is not readable",
                      rsp::raw(later->id));
        }
    }
    return true;
}

// Requests come and go around the steps in flight: one finishes while its
// last steps are in flight (removed at once: its slot stays pending until
// the last of them ends), one in no step in flight finishes, one is put on
// hold and, once no step in flight names it, reset with free = false.
void Stepper::churn()
{
    Checks &ck = cx_.checks;
    Req &a = reqs_[rng_.below(kRids)];
    if (a.inflight > 0 && !a.hold && rng_.chance(kFinishInFlight)) {
        remove_rid(ck, pp_.pool, a.rid, "remove");
        rsp::result<rsp_stats> s = pp_.pool.try_stats();
        ck.expect(CHECK_PIPELINE, s.ok() && s.value().pending_release >= 1,
                  "rid %" PRIu64 " removed while %u steps in flight name it: pending %u",
                  rsp::raw(a.rid), a.inflight, s.ok() ? s.value().pending_release : 0);
        cx_.pipe_removed_inflight.fetch_add(1, std::memory_order_relaxed);
        a = Req{};
        a.rid = fresh();
    }
    Req &b = reqs_[rng_.below(kRids)];
    if (b.inflight == 0 && !b.hold && rng_.chance(kFinishIdle)) {
        remove_rid(ck, pp_.pool, b.rid, "remove");
        b = Req{};
        b.rid = fresh();
    }
    Req &c = reqs_[rng_.below(kRids)];
    if (c.slot >= 0 && rng_.chance(kHold))
        c.hold = true;
    for (Req &q : reqs_) {
        if (!q.hold || q.inflight > 0)
            continue;
        rsp::result<void> r = pp_.pool.try_reset(q.rid, false);
        ck.expect(CHECK_API, r.ok(), "reset: %s", r.error().message);
        rsp::result<rsp_holding> h = pp_.pool.try_holding(q.rid, rsp::label::main);
        ck.expect(CHECK_PIPELINE, h.ok() && h.value().index == q.slot && !h.value().has_state,
                  "rid %" PRIu64 " after reset(free = false): %s slot %d (was %d) has_state %d",
                  rsp::raw(q.rid), rsp_strerror(h.status()), h.ok() ? h.value().index : -1, q.slot,
                  h.ok() ? (int)h.value().has_state : -1);
        q.written = false;
        q.v = 0;
        q.hold = false;
        cx_.pipe_resets.fetch_add(1, std::memory_order_relaxed);
    }
}

// After the pool accepted a rollback it should have refused: with nothing
// in flight, every request is removed and replaced, so the model is exact
// again.
void Stepper::restart()
{
    for (Req &q : reqs_) {
        remove_rid(cx_.checks, pp_.pool, q.rid, "remove");
        q = Req{};
        q.rid = fresh();
    }
    desync_ = false;
}

void Stepper::run()
{
    rsp::reader reg(std::nothrow);
    if (!cx_.checks.expect(CHECK_API, reg.ok(), "pipeline step thread: %s", reg.error().message))
        return;
    while (!cx_.stop.load(std::memory_order_relaxed) && !cx_.abort.load()) {
        if (desync_ && inflight_.empty())
            restart();
        while (!desync_ && inflight_.size() < depth_)
            if (!launch())
                break;
        if (!desync_ && !inflight_.empty() && rng_.chance(kRollbackNewest))
            rollback_newest(); // one more than the depth: max_inflight_steps allows it
        if (inflight_.empty() || !retire_oldest())
            break;
        churn();
    }
    while (!inflight_.empty() && !cx_.abort.load())
        if (!retire_oldest())
            break;
}

// Wait for step id's ready event (its plan read in a read section).
void Stepper::wait_ready(rsp::step_id id)
{
    Checks &ck = cx_.checks;
    rsp::read_section section(std::nothrow);
    if (!ck.expect(CHECK_API, section.ok(), "pipeline step thread: %s",
                   rsp::read_section::why(section.status())))
        return;
    rsp::plan_view p = section.plan(pp_.pool, id);
    if (!ck.expect(CHECK_API, (bool)p, "pipeline: no plan of step %" PRIu64, rsp::raw(id)))
        return;
    rsp::result<rsp::addressing> ad = p.try_addressing(rsp::label::main);
    if (!ck.expect(CHECK_API, ad.ok(), "pipeline: addressing: %s", ad.error().message))
        return;
    rsp::result<void> w = pp_.pool.try_event_wait(ad.value().ready(), kHang);
    ck.expect(CHECK_HANG, w.ok(), "pipeline: ready of step %" PRIu64 ": %s", rsp::raw(id),
              rsp_strerror(w.status()));
}

// Wait until every device operation posted so far has run: a capture step
// (it reserves, copies and commits nothing) and its ready event.
void Stepper::drain_device()
{
    Checks &ck = cx_.checks;
    rsp::step s(rsp::step_id{next_id_++});
    s.pad().capture();
    rsp::result<rsp_admit_outcome> out = pp_.pool.try_admit(s);
    if (!ck.expect(CHECK_API, out.ok() && out.value().ok, "pipeline drain admit: %s",
                   out.ok() ? "refused" : out.error().message))
        return;
    rsp::result<void> r = pp_.pool.try_plan(s);
    if (ck.expect(CHECK_API, r.ok(), "pipeline drain plan: %s", r.error().message))
        wait_ready(s.id());
    r = pp_.pool.try_commit(s);
    ck.expect(CHECK_API, r.ok(), "pipeline drain commit: %s", r.error().message);
}

// Every request removed: nothing held, every slot back and zero.
void Stepper::finish()
{
    rsp::reader reg(std::nothrow);
    for (Req &q : reqs_) {
        remove_rid(cx_.checks, pp_.pool, q.rid, "remove");
    }
    check_pool_empty(cx_, pp_.pool, "pipeline", kSlots);
    if (!reg.ok())
        return;
    drain_device();
    uint32_t dirty = 0, first = 0;
    for (uint32_t slot = 1; slot < kSlots; slot++)
        if (!pp_.storage.is_zero((int32_t)slot, nullptr) && dirty++ == 0)
            first = slot;
    cx_.checks.expect(CHECK_LEAK, dirty == 0,
                      "pipeline pool: %u free slots are not zero (first: %u)", dirty, first);
}

} // namespace

void pipeline_main(Context &cx)
{
    Pipe pp;
    rsp::result<rsp::host_fence> fence = rsp::host_fence::try_create();
    if (!cx.checks.expect(CHECK_API, fence.ok(), "pipeline fence: %s", fence.error().message))
        return;
    pp.fence = std::move(fence).value();
    rsp::pool_config cfg;
    cfg.layers(2).slots(kSlots).inflight_steps(kMaxDepth + 1);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("conv", RSP_DTYPE_U8, {3, 5});
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "pipeline pool create: %s",
                          created.error().message))
        return;
    pp.pool = std::move(created).value();
    if (!pp.storage.init(pp.pool, cfg, cx.checks))
        return;
    const unsigned readers = cx.opt.pipeline_readers;
    for (unsigned i = 0; i < readers; i++)
        pp.queues.emplace_back(new PQueue());
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < readers; i++)
        threads.emplace_back(reader_main, std::ref(cx), std::ref(pp), i, readers);
    Stepper stepper(cx, pp, readers);
    stepper.run();
    auto end = std::make_shared<PStep>(rsp::step_id{0});
    end->end = true;
    for (auto &q : pp.queues)
        q->push(end);
    for (auto &t : threads)
        t.join();
    if (!cx.abort.load())
        stepper.finish();
}

} // namespace stress
