// rsp-stress: the pipelined mode. A pool of its own with max_inflight_steps
// 4; a step thread keeps 3 steps in flight (it admits and plans steps N+1,
// N+2 while N's forward runs) and commits them in order, each with its
// forward_done (a host fence). --pipeline-readers partition threads run
// every step's forward on their share of its rows, reading that step's own
// plan (pool.plan_wait_step, read_section::plan(pool, id)), not the newest
// live one, and check its addressing, device vectors and slot contents
// against the step thread's model (check kind "pipeline", and "addressing",
// "vectors", "zeros", "content" per step).
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <cinttypes>
#include <thread>

namespace stress
{

namespace
{

constexpr unsigned kDepth = 3;  // steps in flight at once
constexpr unsigned kRids = 12;  // requests the mode cycles through
constexpr uint32_t kSlots = 48; // the pool's max_slots (more than kRids: never refused)

struct PRow {
    rsp::rid rid;
    int32_t slot;
    bool has_state;
    uint64_t v; // the state the row reads (0 when has_state is false)
};

struct PStep {
    explicit PStep(rsp::step_id i) : id(i), decl(i)
    {
    }
    rsp::step_id id;
    rsp::step decl;
    bool end = false;
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

// One reader's forward of one step: its own plan, then its rows (row j
// belongs to reader j mod readers): check, read, write the next state.
void forward(Context &cx, Pipe &pp, PStep &st, unsigned index, unsigned readers)
{
    Checks &ck = cx.checks;
    if (!wait_own_plan(cx, pp, st.id, index))
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
        const PRow &r = st.rows[j];
        ck.expect(
            CHECK_ADDRESSING, slots[j] == r.slot && has[j] == r.has_state,
            "step %" PRIu64 " row %zu (rid %" PRIu64 "): slot %d has_state %d, expected %d %d",
            rsp::raw(st.id), j, rsp::raw(r.rid), slots[j], (int)has[j], r.slot, (int)r.has_state);
        ck.expect(CHECK_VECTORS, dslots[j] == slots[j] && dhas[j] == has[j],
                  "step %" PRIu64 " row %zu: device vectors %d/%d, host %d/%d", rsp::raw(st.id), j,
                  dslots[j], (int)dhas[j], slots[j], (int)has[j]);
        std::string why;
        if (r.has_state)
            ck.expect(CHECK_CONTENT, pp.storage.matches(r.slot, r.v, &why),
                      "step %" PRIu64 " rid %" PRIu64 " slot %d: %s", rsp::raw(st.id),
                      rsp::raw(r.rid), r.slot, why.c_str());
        else
            ck.expect(CHECK_ZEROS, pp.storage.is_zero(r.slot, &why),
                      "step %" PRIu64 " rid %" PRIu64 " slot %d: %s", rsp::raw(st.id),
                      rsp::raw(r.rid), r.slot, why.c_str());
        pp.storage.write(r.slot, next_state(r.rid, rsp::label::main, st.id, r.v));
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
        std::lock_guard<std::mutex> g(st->mu);
        st->done.fetch_add(1);
        st->cv.notify_all();
    }
}

struct Req {
    rsp::rid rid{0};
    int32_t slot = -1; // RSP_NO_SLOT until its first admit
    bool has_state = false;
    uint64_t v = 0;
    bool busy = false; // in a step in flight
};

class Stepper
{
  public:
    Stepper(Context &cx, Pipe &pp, unsigned readers)
        : cx_(cx), pp_(pp), readers_(readers), rng_(mix64(cx.opt.seed * 7919u + 5))
    {
        for (unsigned k = 0; k < kRids; k++)
            reqs_[k].rid = fresh();
    }
    void run();
    void finish();

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{1} << 50) + next_rid_++};
    }
    bool launch();
    bool retire_oldest();
    Context &cx_;
    Pipe &pp_;
    unsigned readers_;
    Rng rng_;
    Req reqs_[kRids];
    uint64_t next_rid_ = 1, next_id_ = 1;
    std::deque<std::shared_ptr<PStep>> inflight_;
};

// Admit and plan one more step on 1..4 requests not in flight, hand it to
// the readers. False when it could not (counted).
bool Stepper::launch()
{
    Checks &ck = cx_.checks;
    std::vector<unsigned> idle;
    for (unsigned k = 0; k < kRids; k++)
        if (!reqs_[k].busy)
            idle.push_back(k);
    auto st = std::make_shared<PStep>(rsp::step_id{next_id_++});
    const unsigned n = 1 + rng_.below(std::min<uint32_t>(4, (uint32_t)idle.size()));
    std::vector<unsigned> pick;
    for (unsigned i = 0; i < n; i++) {
        const unsigned at = i + rng_.below((uint32_t)idle.size() - i);
        std::swap(idle[i], idle[at]);
        pick.push_back(idle[i]);
        st->decl.row(reqs_[idle[i]].rid, rsp::label::main, 1 + (int32_t)rng_.below(3));
    }
    rsp::result<rsp_admit_outcome> out = pp_.pool.try_admit(st->decl);
    if (!ck.expect(CHECK_PIPELINE, out.ok() && out.value().ok,
                   "admit of step %" PRIu64 " with %zu in flight: %s", rsp::raw(st->id),
                   inflight_.size(), out.ok() ? "refused" : out.error().message))
        return false;
    for (unsigned k : pick) {
        Req &q = reqs_[k];
        rsp::result<rsp_holding> h = pp_.pool.try_holding(q.rid, rsp::label::main);
        if (!ck.expect(CHECK_API, h.ok(), "holding: %s", h.error().message))
            return false;
        ck.expect(CHECK_UNIQUE, q.slot < 0 || q.slot == h.value().index,
                  "rid %" PRIu64 " moved from slot %d to %d", rsp::raw(q.rid), q.slot,
                  h.value().index);
        q.slot = h.value().index;
        q.busy = true;
        st->rows.push_back(PRow{q.rid, q.slot, q.has_state, q.has_state ? q.v : 0});
    }
    rsp::result<void> planned = pp_.pool.try_plan(st->decl);
    if (!ck.expect(CHECK_PIPELINE, planned.ok(), "plan of step %" PRIu64 ": %s", rsp::raw(st->id),
                   planned.error().message))
        return false;
    inflight_.push_back(st);
    for (auto &q : pp_.queues)
        q->push(st);
    cx_.pipe_steps.fetch_add(1, std::memory_order_relaxed);
    uint32_t cur = cx_.pipe_max_inflight.load(std::memory_order_relaxed);
    if (inflight_.size() > cur)
        cx_.pipe_max_inflight.store((uint32_t)inflight_.size(), std::memory_order_relaxed);
    return true;
}

// Wait for the oldest step's forward, signal its forward_done, commit it;
// its plan must be gone, the next step's still readable.
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
    inflight_.pop_front();
    pp_.fence.signal(rsp::raw(st->id)); // commits in order: the fence only moves forward
    rsp::result<void> c = pp_.pool.try_commit(st->decl, pp_.fence.at(rsp::raw(st->id)));
    if (!ck.expect(CHECK_PIPELINE, c.ok(), "commit of step %" PRIu64 ": %s", rsp::raw(st->id),
                   c.error().message))
        return false;
    for (const PRow &r : st->rows)
        for (Req &q : reqs_)
            if (q.rid == r.rid) {
                q.v = next_state(r.rid, rsp::label::main, st->id, r.v);
                q.has_state = true;
                q.busy = false;
            }
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

void Stepper::run()
{
    rsp::reader reg(std::nothrow);
    if (!cx_.checks.expect(CHECK_API, reg.ok(), "pipeline step thread: %s", reg.error().message))
        return;
    while (!cx_.stop.load(std::memory_order_relaxed) && !cx_.abort.load()) {
        while (inflight_.size() < kDepth)
            if (!launch())
                break;
        if (inflight_.empty() || !retire_oldest())
            break;
        // Now and then a request not in flight finishes: removed, replaced.
        if (rng_.chance(0.05)) {
            Req &q = reqs_[rng_.below(kRids)];
            if (!q.busy) {
                rsp::result<void> r = pp_.pool.try_remove(q.rid);
                cx_.checks.expect(CHECK_API, r.ok(), "remove: %s", r.error().message);
                q = Req{};
                q.rid = fresh();
            }
        }
    }
    while (!inflight_.empty() && !cx_.abort.load())
        if (!retire_oldest())
            break;
}

// Every request removed: nothing held, every slot back.
void Stepper::finish()
{
    for (Req &q : reqs_) {
        rsp::result<void> r = pp_.pool.try_remove(q.rid);
        cx_.checks.expect(CHECK_API, r.ok(), "remove: %s", r.error().message);
    }
    rsp::result<rsp_stats> s = pp_.pool.try_stats();
    if (cx_.checks.expect(CHECK_API, s.ok(), "stats: %s", s.error().message))
        cx_.checks.expect(CHECK_LEAK,
                          s.value().free_slots == kSlots - 1 && s.value().held_slots == 0 &&
                              s.value().pending_release == 0,
                          "pipeline pool at the end: free %u of %u, held %u, pending %u",
                          s.value().free_slots, kSlots - 1, s.value().held_slots,
                          s.value().pending_release);
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
    cfg.layers(2).slots(kSlots).inflight_steps(kDepth + 1);
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
