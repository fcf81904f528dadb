// rsp-ordered-sched: the threads of one engine share a pool; the same
// workload runs unordered and ordered (rsp_pool_config.ordered), the ordered
// runs under several ways of numbering the messages, and each run counts the
// admits the pool refused per committed step. What it found, and what an
// engine should do: docs/semantics.md 8.3, "Numbering an engine's
// messages".
//
// The engine: --schedulers threads each own their running requests and run
// one step at a time (admit, plan, forward, commit). After a commit a
// scheduler takes the scheduler lock, decides which requests finished
// (decoded --tokens), gives their slots back to the engine's room count and
// takes waiting requests while the room count allows; then the removes of
// the finished requests are posted (fire-and-forget) and the next step's
// admit. The room count is the engine's own idea of the free slots: a finish
// gives its slot back when decided, the pool frees it when it handles the
// remove. An admit that relies on a slot whose remove the pool has not
// handled yet is refused (ok == false); the scheduler retries it.
//
// Who posts what: by default each scheduler posts its own removes and draws
// the arrivals (and ingests its new requests) itself. --detok: a detokenizer
// thread posts the removes, handed to it by the schedulers. --ingester: an
// arrivals thread ingests new requests (per scheduler iteration) and queues
// them.
// `--schedulers 1 --detok --ingester` is the scheduler + detokenizer +
// ingest engine; the default, three peer schedulers.
//
// Numbering variants (ordered pools; unordered runs use `post` unless
// `--mode unordered --numbering ...`: there the numbers only set step ids):
//   post     every message numbered from the shared counter just before its
//            post, by the thread that posts it
//   lock     a step's ingest and admit numbered under the scheduler lock with
//            the batch decision; removes numbered when posted, after it
//   lock-rm  under the lock, the step's removes first (when the finish is
//            decided), then its ingest and admit
//   decided  removes numbered under the lock when the finish is decided;
//            ingest and admit numbered when posted
// A retried admit takes a new number where the variant numbers admits. Step
// ids are the admit's number (ids must increase in the order the pool
// handles admits: rsp_step_admit's RSP_EORDER).
//
// Ordered runs also replay every numbered message in number order from one
// thread on a fresh unordered pool and compare each admit's outcome: equal
// outcomes mean the ordered pool did exactly what number order asks, so its
// refusals are a property of the numbering. Exit status 1 when a replay
// differs, the pool's refusal count disagrees with the program's, or a
// message failed (other than the counted refusals); with --check also when
// lock-rm or decided saw a refused admit.
//
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace
{

using clk = std::chrono::steady_clock;

enum class numbering { post, lock, lock_rm, decided };
const char *const numbering_names[] = {"post", "lock", "lock-rm", "decided"};

struct options {
    bool run_unordered = true, run_ordered = true;
    std::vector<numbering> variants{numbering::post, numbering::lock, numbering::lock_rm,
                                    numbering::decided};
    unsigned schedulers = 3;
    bool detok = false, ingester = false;
    uint64_t steps = 6000; // committed steps per run, all schedulers together
    uint32_t slots = 48;   // usable slots (the sink is one more)
    uint32_t batch = 24;   // most running requests per scheduler
    uint32_t tokens = 15;  // decode steps per request (after its prefill step)
    int32_t prefill = 32;  // a new request's span
    unsigned forward_us = 200, build_us = 50, detok_us = 20;
    double lambda = 1.05; // mean arrivals per scheduler iteration, in bursts of 4
    uint32_t waiting_cap = 32;
    unsigned retries = 8; // refusals of one step before its new requests wait
    uint64_t seed = 1;
    bool replay = true, replay_unordered = false;
    bool check = false; // fail when a numbering that numbers removes at the finish sees a refusal
    bool unordered_variants = false; // --mode unordered: its runs number as --numbering says
};

// One numbered message as posted, for the replay and the inversion count.
struct record {
    uint64_t seq = 0;
    rsp_msg_kind kind = RSP_MSG_INGEST;
    unsigned sched = 0;        // the scheduler whose request or step it is
    std::vector<rsp_rid> rids; // INGEST, REMOVE
    std::vector<rsp_row> rows; // ADMIT, PLAN, COMMIT
    uint64_t step_id = 0;
    clk::time_point begin, end; // around rsp_post
    bool answered = false;
    rsp_status status = RSP_OK;
    rsp_admit_outcome admit{};
};

struct request {
    rsp::rid rid;
    uint32_t done = 0; // steps run (the prefill step is the first)
};

struct counts {
    uint64_t steps = 0, refused_full = 0, refused_eorder = 0, gave_up = 0, failures = 0;
    uint64_t decisions = 0, full_decisions = 0; // full: requests left waiting for room
};

struct rng {
    uint64_t s;
    explicit rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1)
    {
    }
    uint64_t next()
    {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    double unit()
    {
        return (double)(next() >> 11) / 9007199254740992.0;
    }
    // Arrivals of one step: Poisson(lambda / 4) bursts of 4.
    uint32_t arrivals(double lambda)
    {
        const double limit = std::exp(-lambda / 4);
        uint32_t bursts = 0;
        for (double p = unit(); p > limit; p *= unit())
            bursts++;
        return 4 * bursts;
    }
};

struct engine {
    const options &opt;
    bool ordered;
    numbering num;
    rsp::pool pool;
    std::atomic<uint64_t> seq{0}; // the shared counter: the last number taken
    std::atomic<uint64_t> committed{0};
    std::atomic<uint64_t> ticks{0}; // scheduler iterations: the ingester's clock
    std::atomic<bool> stop{false};
    std::atomic<unsigned> running{0}; // schedulers still stepping
    std::mutex mu;                    // the scheduler lock: room, waiting, next_rid
    int64_t room;
    std::deque<uint64_t> waiting;
    uint64_t next_rid = 1, dropped = 0; // dropped: arrivals turned away (queue full)
    // The detokenizer's queue: (rid, number taken at the finish or 0).
    std::mutex dq_mu;
    std::condition_variable dq_cv;
    std::deque<std::pair<record, uint64_t>> dq;
    // The ingester waits for commits.
    std::mutex in_mu;
    std::condition_variable in_cv;
    // Per thread: schedulers, then the detokenizer, then the ingester.
    std::vector<std::vector<record>> log;
    std::vector<counts> cnt;
    uint64_t detok_failures = 0, ingester_failures = 0; // each written by its thread only
    engine(const options &o, bool ord, numbering n)
        : opt(o), ordered(ord), num(n), room(o.slots), log(o.schedulers + 2), cnt(o.schedulers)
    {
    }
    uint64_t take()
    {
        return seq.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    bool admits_under_lock() const
    {
        return num == numbering::lock || num == numbering::lock_rm;
    }
    bool removes_at_finish() const
    {
        return num == numbering::lock_rm || num == numbering::decided;
    }
    // Arrivals of one committed step (under mu): queued, the rids returned.
    void arrive(rng &r, std::vector<rsp_rid> *out)
    {
        for (uint32_t k = r.arrivals(opt.lambda); k > 0; k--) {
            if (waiting.size() >= opt.waiting_cap) {
                dropped++;
                continue;
            }
            if (out)
                out->push_back(next_rid);
            waiting.push_back(next_rid++);
        }
    }
};

// What post() saw: answered RSP_OK (a full pool's admit included), an admit
// answered RSP_EORDER (the caller counts both refusals), or a failure
// (counted here).
enum class posted { ok, eorder, failed };

// Post m numbered n (0: take the number now) and log it; wait for the answer
// when asked.
posted post(engine &e, rsp_msg m, uint64_t n, bool wait, record rec, unsigned thread,
            uint64_t *failures, rsp_reply *reply)
{
    if (n == 0)
        n = e.take();
    rec.seq = n;
    rec.kind = m.kind;
    m = rsp::msg::seq(m, n);
    rec.begin = clk::now();
    rsp::result<rsp::ticket> t = e.pool.try_post(m);
    rec.end = clk::now();
    if (!t.ok()) {
        std::fprintf(stderr, "post of message %" PRIu64 ": %s\n", n, t.error().message);
        (*failures)++;
        return posted::failed; // not logged: the replay posts only what was posted
    }
    posted out = posted::ok;
    if (wait) {
        rsp::result<rsp_reply> r = std::move(t).value().try_wait();
        rec.answered = true;
        rec.status = r.status();
        if (r.ok()) {
            rec.admit = r.value().admit;
            if (reply)
                *reply = r.value();
        } else if (r.status() == RSP_EORDER && m.kind == RSP_MSG_ADMIT) {
            out = posted::eorder;
        } else {
            std::fprintf(stderr, "message %" PRIu64 " (kind %d): %s\n", n, (int)m.kind,
                         r.error().message);
            (*failures)++;
            out = posted::failed;
        }
    }
    e.log[thread].push_back(std::move(rec));
    return out;
}

void fill_rows(rsp::step &s, const std::vector<request> &run, const std::vector<request> &fresh,
               int32_t prefill)
{
    for (const request &r : run)
        s.row(r.rid, rsp::label::main, 1);
    for (const request &r : fresh)
        s.row(r.rid, rsp::label::main, prefill);
}

class scheduler
{
  public:
    scheduler(engine &e, unsigned id) : e_(e), id_(id), rng_(e.opt.seed * 1000003u + id)
    {
    }
    void run();

  private:
    enum class admitted { yes, nothing, failed };
    engine &e_;
    unsigned id_;
    rng rng_;
    std::vector<request> run_, fresh_;
    std::vector<rsp::rid> finished_;
    std::vector<uint64_t> remove_seq_; // numbers taken for finished_ (empty: at post)
    std::vector<rsp_rid> arrived_;     // this step's arrivals, without an ingester
    uint64_t ingest_seq_ = 0, admit_seq_ = 0;

    counts &c()
    {
        return e_.cnt[id_];
    }
    void decide();
    void post_removes_and_ingest();
    admitted admit(rsp::step &s);
    void give_up();
    bool step_once(rsp::step &s);
};

// Under the scheduler lock: the finish and batch decisions, and the numbers
// the variant takes there.
void scheduler::decide()
{
    finished_.clear();
    remove_seq_.clear();
    arrived_.clear();
    ingest_seq_ = admit_seq_ = 0;
    std::lock_guard<std::mutex> g(e_.mu);
    for (size_t i = 0; i < run_.size();) {
        if (run_[i].done > e_.opt.tokens) {
            finished_.push_back(run_[i].rid);
            run_[i] = run_.back();
            run_.pop_back();
            e_.room++;
        } else {
            i++;
        }
    }
    if (!e_.opt.ingester)
        e_.arrive(rng_, nullptr);
    while (e_.room > 0 && !e_.waiting.empty() && run_.size() + fresh_.size() < e_.opt.batch) {
        fresh_.push_back(request{rsp::rid{e_.waiting.front()}});
        if (!e_.opt.ingester)
            arrived_.push_back(e_.waiting.front());
        e_.waiting.pop_front();
        e_.room--;
    }
    c().decisions++;
    e_.ticks.fetch_add(1);
    c().full_decisions += !e_.waiting.empty() && e_.room == 0;
    if (e_.removes_at_finish())
        for (size_t i = 0; i < finished_.size(); i++)
            remove_seq_.push_back(e_.take());
    // A number taken must be posted: with nothing to run, take none (the gap
    // would hold every later message until the reorder timeout).
    if (e_.admits_under_lock() && !(run_.empty() && fresh_.empty())) {
        if (!arrived_.empty())
            ingest_seq_ = e_.take();
        admit_seq_ = e_.take();
    }
}

void scheduler::post_removes_and_ingest()
{
    for (size_t i = 0; i < finished_.size(); i++) {
        record rec;
        rec.sched = id_;
        rec.rids.push_back(rsp::raw(finished_[i]));
        const uint64_t n = remove_seq_.empty() ? 0 : remove_seq_[i];
        if (e_.opt.detok) {
            std::lock_guard<std::mutex> g(e_.dq_mu);
            e_.dq.emplace_back(std::move(rec), n);
        } else {
            post(e_, rsp::msg::remove(finished_[i]), n, false, std::move(rec), id_, &c().failures,
                 nullptr);
        }
    }
    if (e_.opt.detok && !finished_.empty())
        e_.dq_cv.notify_one();
    if (!arrived_.empty()) {
        record rec;
        rec.sched = id_;
        rec.rids = arrived_;
        rsp_msg m = rsp::msg::of(RSP_MSG_INGEST);
        m.rids = arrived_.data();
        m.num_rids = (uint32_t)arrived_.size();
        post(e_, m, ingest_seq_, false, std::move(rec), id_, &c().failures, nullptr);
    }
}

// The new requests go back to the front of the queue: the step runs without
// them.
void scheduler::give_up()
{
    std::lock_guard<std::mutex> g(e_.mu);
    for (auto it = fresh_.rbegin(); it != fresh_.rend(); ++it)
        e_.waiting.push_front(rsp::raw(it->rid));
    e_.room += (int64_t)fresh_.size();
    fresh_.clear();
    c().gave_up++;
}

// Admit the step (its id is the admit's number), retrying a refusal with a
// new number; after opt.retries refusals the step runs without its new
// requests.
scheduler::admitted scheduler::admit(rsp::step &s)
{
    uint64_t n = admit_seq_;
    for (unsigned refusals = 0;;) {
        if (n == 0)
            n = e_.take();
        s.reset(rsp::step_id{n});
        fill_rows(s, run_, fresh_, e_.opt.prefill);
        record rec;
        rec.sched = id_;
        rec.rows.assign(s.get().rows, s.get().rows + s.get().num_rows);
        rec.step_id = n;
        rsp_reply reply{};
        const posted p =
            post(e_, rsp::msg::admit(s), n, true, std::move(rec), id_, &c().failures, &reply);
        if (p == posted::failed)
            return admitted::failed;
        if (p == posted::ok && reply.admit.ok)
            return admitted::yes;
        (p == posted::ok ? c().refused_full : c().refused_eorder)++;
        if (++refusals >= e_.opt.retries && !fresh_.empty())
            give_up();
        if (run_.empty() && fresh_.empty())
            return admitted::nothing;
        std::this_thread::yield();
        n = 0;
        if (e_.admits_under_lock()) {
            std::lock_guard<std::mutex> g(e_.mu);
            n = e_.take();
        }
    }
}

// One iteration: decide, post the removes and the ingest, run a step. False
// on a failure.
bool scheduler::step_once(rsp::step &s)
{
    decide();
    post_removes_and_ingest();
    if (run_.empty() && fresh_.empty()) {
        if (e_.opt.ingester)
            e_.in_cv.notify_one();
        std::this_thread::sleep_for(std::chrono::microseconds(e_.opt.forward_us));
        return true;
    }
    if (e_.opt.ingester)
        e_.in_cv.notify_one();
    std::this_thread::sleep_for(std::chrono::microseconds(e_.opt.build_us));
    const admitted a = admit(s);
    if (a != admitted::yes)
        return a == admitted::nothing;
    record prec;
    prec.sched = id_;
    prec.rows.assign(s.get().rows, s.get().rows + s.get().num_rows);
    prec.step_id = rsp::raw(s.id());
    record crec = prec;
    if (post(e_, rsp::msg::plan(s), 0, true, std::move(prec), id_, &c().failures, nullptr) !=
        posted::ok)
        return false;
    std::this_thread::sleep_for(std::chrono::microseconds(e_.opt.forward_us));
    if (post(e_, rsp::msg::commit(s, rsp::forward_complete()), 0, true, std::move(crec), id_,
             &c().failures, nullptr) != posted::ok)
        return false;
    for (request &r : fresh_)
        run_.push_back(r);
    fresh_.clear();
    for (request &r : run_)
        r.done++;
    c().steps++;
    if (e_.committed.fetch_add(1) + 1 >= e_.opt.steps)
        e_.stop.store(true);
    return true;
}

void scheduler::run()
{
    rsp::step s(rsp::step_id{0});
    while (!e_.stop.load() && step_once(s)) {
    }
    e_.stop.store(true);
    // The last scheduler out wakes the helpers: their queues are final.
    // Each lock orders the decrement before the helper's next check of its
    // wait condition (made under that lock), so the wake cannot be lost.
    if (e_.running.fetch_sub(1) == 1) {
        {
            std::lock_guard<std::mutex> g(e_.dq_mu);
        }
        e_.dq_cv.notify_all();
        {
            std::lock_guard<std::mutex> g(e_.in_mu);
        }
        e_.in_cv.notify_all();
    }
}

// The detokenizer: posts the removes handed to it (after detok_us of work
// per batch), every one it was given, numbered or not: a number taken must
// be posted.
void detok_main(engine &e)
{
    const unsigned me = e.opt.schedulers;
    std::unique_lock<std::mutex> g(e.dq_mu);
    for (;;) {
        e.dq_cv.wait(g, [&] { return !e.dq.empty() || e.running.load() == 0; });
        if (e.dq.empty())
            return;
        std::deque<std::pair<record, uint64_t>> batch;
        batch.swap(e.dq);
        g.unlock();
        if (e.opt.detok_us)
            std::this_thread::sleep_for(std::chrono::microseconds(e.opt.detok_us));
        for (auto &item : batch) {
            const rsp::rid r{item.first.rids[0]};
            post(e, rsp::msg::remove(r), item.second, false, std::move(item.first), me,
                 &e.detok_failures, nullptr);
        }
        g.lock();
    }
}

// The ingester: per scheduler iteration, its arrivals, ingested (numbered
// when posted) and then queued for the schedulers.
void ingester_main(engine &e)
{
    const unsigned me = e.opt.schedulers + 1;
    rng r(e.opt.seed * 7919u + 5);
    uint64_t served = 0;
    std::unique_lock<std::mutex> g(e.in_mu);
    while (e.running.load() != 0) {
        e.in_cv.wait_for(g, std::chrono::milliseconds(1));
        const uint64_t now = e.ticks.load();
        for (; served < now; served++) {
            std::vector<rsp_rid> rids;
            {
                std::lock_guard<std::mutex> q(e.mu);
                const uint64_t first = e.next_rid;
                const uint32_t k = r.arrivals(e.opt.lambda);
                for (uint32_t i = 0; i < k; i++)
                    rids.push_back(first + i);
                e.next_rid += k;
            }
            if (rids.empty())
                continue;
            record rec;
            rec.rids = rids;
            rsp_msg m = rsp::msg::of(RSP_MSG_INGEST);
            m.rids = rids.data();
            m.num_rids = (uint32_t)rids.size();
            post(e, m, 0, false, std::move(rec), me, &e.ingester_failures, nullptr);
            std::lock_guard<std::mutex> q(e.mu);
            for (rsp_rid id : rids) {
                if (e.waiting.size() < e.opt.waiting_cap)
                    e.waiting.push_back(id);
                else
                    e.dropped++;
            }
        }
    }
}

rsp::pool_config make_config(const options &opt, bool ordered)
{
    rsp::pool_config cfg;
    cfg.layers(1).slots(opt.slots + 1).inflight_steps(8).inbox(4096);
    cfg.block("ssm", RSP_DTYPE_F32, {16});
    // A thread numbers a message, then posts it: on a loaded machine the
    // wait between can be long; 10 s still catches a number never posted.
    if (ordered)
        cfg.ordered(true, std::chrono::seconds(10));
    return cfg;
}

// Replay the numbered messages in number order from one thread on a fresh
// unordered pool; count the admits whose outcome differs.
uint64_t replay(const options &opt, std::vector<const record *> &all)
{
    std::sort(all.begin(), all.end(),
              [](const record *a, const record *b) { return a->seq < b->seq; });
    rsp::pool_config cfg = make_config(opt, false);
    rsp::pool p = rsp::pool::create(cfg);
    uint64_t differ = 0;
    for (const record *r : all) {
        rsp_msg m = rsp::msg::of(r->kind);
        if (!r->rids.empty()) {
            m.rids = r->rids.data();
            m.num_rids = (uint32_t)r->rids.size();
        }
        m.step.step_id = r->step_id;
        m.step.rows = r->rows.data();
        m.step.num_rows = (uint32_t)r->rows.size();
        if (r->kind == RSP_MSG_COMMIT)
            m.event = rsp::forward_complete();
        rsp::result<rsp_reply> got = p.post(m).try_wait();
        if (r->kind != RSP_MSG_ADMIT)
            continue;
        const bool same =
            got.status() == r->status && (!got.ok() || (got.value().admit.ok == r->admit.ok &&
                                                        got.value().admit.free == r->admit.free));
        if (!same && differ++ < 5)
            std::fprintf(stderr, "replay: admit %" PRIu64 " differs (status %d/%d)\n", r->seq,
                         (int)got.status(), (int)r->status);
    }
    return differ;
}

// For each admit refused as full: the removes numbered after it whose post
// had returned before it was posted (so in the inbox first, handled after it
// in an ordered pool). The refusal is "inverted" when those removes cover
// what it was short of; "own" when the removes of its own scheduler's
// requests do.
void inversions(std::vector<const record *> &all, uint64_t *inverted, uint64_t *own)
{
    *inverted = *own = 0;
    std::vector<const record *> removes;
    for (const record *r : all)
        if (r->kind == RSP_MSG_REMOVE)
            removes.push_back(r);
    for (const record *a : all) {
        if (a->kind != RSP_MSG_ADMIT || !a->answered || a->status != RSP_OK || a->admit.ok)
            continue;
        uint32_t late = 0, late_own = 0;
        for (const record *r : removes)
            if (r->seq > a->seq && r->end < a->begin) {
                late++;
                late_own += r->sched == a->sched;
            }
        if (late >= a->admit.slots_short) {
            (*inverted)++;
            *own += late_own >= a->admit.slots_short;
        }
    }
}

struct result_line {
    counts sum;
    double secs = 0;
    rsp_stats stats{};
    uint64_t differ = 0, inverted = 0, inverted_own = 0, dropped = 0;
    bool replayed = false;
};

bool run_one(const options &opt, bool ordered, numbering num, result_line *out)
{
    engine e(opt, ordered, num);
    rsp::pool_config cfg = make_config(opt, ordered);
    e.pool = rsp::pool::create(cfg);
    const clk::time_point t0 = clk::now();
    std::vector<scheduler> sch;
    sch.reserve(opt.schedulers);
    for (unsigned i = 0; i < opt.schedulers; i++)
        sch.emplace_back(e, i);
    e.running.store(opt.schedulers);
    std::vector<std::thread> th;
    for (unsigned i = 0; i < opt.schedulers; i++)
        th.emplace_back([&sch, i] { sch[i].run(); });
    if (opt.detok)
        th.emplace_back([&e] { detok_main(e); });
    if (opt.ingester)
        th.emplace_back([&e] { ingester_main(e); });
    for (auto &t : th)
        t.join();
    out->secs = std::chrono::duration<double>(clk::now() - t0).count();
    // Every post has returned: an unnumbered barrier (exempt in an ordered
    // pool) is answered once all of them were handled.
    e.pool.barrier();
    out->stats = e.pool.stats();
    out->dropped = e.dropped;
    out->sum.failures = e.detok_failures + e.ingester_failures;
    for (const counts &c : e.cnt) {
        out->sum.steps += c.steps;
        out->sum.refused_full += c.refused_full;
        out->sum.refused_eorder += c.refused_eorder;
        out->sum.gave_up += c.gave_up;
        out->sum.failures += c.failures;
        out->sum.decisions += c.decisions;
        out->sum.full_decisions += c.full_decisions;
    }
    std::vector<const record *> all;
    for (const auto &l : e.log)
        for (const record &r : l)
            all.push_back(&r);
    if (ordered)
        inversions(all, &out->inverted, &out->inverted_own);
    if (ordered ? opt.replay : opt.replay_unordered) {
        out->differ = replay(opt, all);
        out->replayed = true;
    }
    // An unordered pool handles messages as they arrive, not in number order:
    // its replay may differ (that it does shows the check can fail).
    const bool replay_ok = !ordered || out->differ == 0;
    const bool agree = out->stats.admits_refused == out->sum.refused_full;
    if (!agree)
        std::fprintf(stderr,
                     "the pool counted %" PRIu64 " refused admits, the program %" PRIu64 "\n",
                     out->stats.admits_refused, out->sum.refused_full);
    // Removes numbered when the finish is decided, under the lock that gives
    // their slots back, come before every admit that can count on them:
    // an ordered pool then refuses none (the engine's room count never runs
    // ahead of the pool's free slots, and step ids follow the numbers).
    const bool fixed_ok = !opt.check || !ordered || !e.removes_at_finish() ||
                          (out->sum.refused_full == 0 && out->sum.refused_eorder == 0);
    if (!fixed_ok)
        std::fprintf(stderr, "numbering %s: %" PRIu64 " refused admits, expected none\n",
                     numbering_names[(int)num], out->sum.refused_full + out->sum.refused_eorder);
    return out->sum.failures == 0 && replay_ok && out->stats.posts_failed == 0 && agree && fixed_ok;
}

void print_header()
{
    std::printf("%-9s %-8s %6s %9s %9s %6s %6s %7s %8s %6s %8s %7s\n", "mode", "numbering", "steps",
                "full/step", "eord/step", "gaveup", "full%", "steps/s", "inverted", "(own)",
                "pool_ref", "replay");
}

void print_line(bool ordered, numbering num, const result_line &r)
{
    const double st = r.sum.steps ? (double)r.sum.steps : 1.0;
    char rep[16] = "-", inv[24] = "-", own[24] = "-";
    if (r.replayed)
        std::snprintf(rep, sizeof rep, "%s", r.differ ? "DIFFERS" : "same");
    if (ordered) {
        std::snprintf(inv, sizeof inv, "%" PRIu64, r.inverted);
        std::snprintf(own, sizeof own, "%" PRIu64, r.inverted_own);
    }
    std::printf(
        "%-9s %-8s %6" PRIu64 " %9.3f %9.3f %6" PRIu64 " %6.1f %7.0f %8s %6s %8" PRIu64 " %7s\n",
        ordered ? "ordered" : "unordered", numbering_names[(int)num], r.sum.steps,
        (double)r.sum.refused_full / st, (double)r.sum.refused_eorder / st, r.sum.gave_up,
        100.0 * (double)r.sum.full_decisions / (double)(r.sum.decisions ? r.sum.decisions : 1),
        (double)r.sum.steps / r.secs, inv, own, r.stats.admits_refused, rep);
    std::fflush(stdout);
}

void usage()
{
    std::fprintf(stderr,
                 "usage: rsp-ordered-sched [--mode both|ordered|unordered] [--numbering "
                 "all|post|lock|lock-rm|decided[,...]]\n"
                 "  [--steps N] [--slots N] [--batch N] [--tokens N] [--prefill N] "
                 "[--forward-us N] [--build-us N]\n"
                 "  [--schedulers N] [--detok] [--detok-us N] [--ingester] [--waiting N]\n"
                 "  [--lambda X] [--retries N] [--seed N] [--no-replay] [--replay-unordered] "
                 "[--check] [--quick]\n");
}

bool parse_numbering(const char *arg, std::vector<numbering> *out)
{
    out->clear();
    std::string all(arg);
    size_t start = 0;
    while (start <= all.size()) {
        size_t comma = all.find(',', start);
        std::string one =
            all.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (one == "all") {
            *out = {numbering::post, numbering::lock, numbering::lock_rm, numbering::decided};
        } else {
            bool found = false;
            for (int k = 0; k < 4; k++)
                if (one == numbering_names[k]) {
                    out->push_back((numbering)k);
                    found = true;
                }
            if (!found) {
                std::fprintf(stderr,
                             "--numbering: '%s' is not post, lock, lock-rm, decided or "
                             "all\n",
                             one.c_str());
                return false;
            }
        }
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    return true;
}

bool parse(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        auto num = [&](auto *dst) {
            if (!v) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                return false;
            }
            char *end = nullptr;
            const double x = std::strtod(v, &end);
            if (*v == '\0' || *end != '\0' || x < 0) {
                std::fprintf(stderr, "%s: '%s' is not a non-negative number\n", a.c_str(), v);
                return false;
            }
            *dst = static_cast<std::remove_pointer_t<decltype(dst)>>(x);
            i++;
            return true;
        };
        bool ok = true;
        if (a == "--mode") {
            const std::string m = v ? v : "";
            o->run_ordered = m == "both" || m == "ordered";
            o->run_unordered = m == "both" || m == "unordered";
            o->unordered_variants = m == "unordered";
            ok = o->run_ordered || o->run_unordered;
            if (!ok)
                std::fprintf(stderr, "--mode: '%s' is not both, ordered or unordered\n", m.c_str());
            i++;
        } else if (a == "--numbering") {
            ok = v && parse_numbering(v, &o->variants);
            i++;
        } else if (a == "--steps") {
            ok = num(&o->steps);
        } else if (a == "--slots") {
            ok = num(&o->slots);
        } else if (a == "--batch") {
            ok = num(&o->batch);
        } else if (a == "--tokens") {
            ok = num(&o->tokens);
        } else if (a == "--prefill") {
            ok = num(&o->prefill);
        } else if (a == "--forward-us") {
            ok = num(&o->forward_us);
        } else if (a == "--build-us") {
            ok = num(&o->build_us);
        } else if (a == "--lambda") {
            ok = num(&o->lambda);
        } else if (a == "--retries") {
            ok = num(&o->retries);
        } else if (a == "--seed") {
            ok = num(&o->seed);
        } else if (a == "--schedulers") {
            ok = num(&o->schedulers);
        } else if (a == "--detok-us") {
            ok = num(&o->detok_us);
        } else if (a == "--waiting") {
            ok = num(&o->waiting_cap);
        } else if (a == "--detok") {
            o->detok = true;
        } else if (a == "--ingester") {
            o->ingester = true;
        } else if (a == "--check") {
            o->check = true;
        } else if (a == "--replay-unordered") {
            o->replay_unordered = true;
        } else if (a == "--no-replay") {
            o->replay = false;
        } else if (a == "--quick") {
            o->steps = 600;
        } else {
            std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
            ok = false;
        }
        if (!ok)
            return false;
    }
    if (o->slots == 0 || o->batch == 0 || o->schedulers == 0 || o->steps == 0 || o->retries == 0) {
        std::fprintf(stderr, "--slots, --batch, --schedulers, --steps and --retries must be > 0\n");
        return false;
    }
    return true;
}

} // namespace

int main(int argc, char **argv)
try {
    options opt;
    if (!parse(argc, argv, &opt)) {
        usage();
        return 2;
    }
    std::printf("# %u schedulers%s%s, %u usable slots, batch <= %u, %u tokens + prefill %d, "
                "forward %u us, build %u us, detok %u us, lambda %.2f, retries %u, %" PRIu64
                " steps\n",
                opt.schedulers, opt.detok ? " + detokenizer" : "",
                opt.ingester ? " + ingester" : "", opt.slots, opt.batch, opt.tokens, opt.prefill,
                opt.forward_us, opt.build_us, opt.detok_us, opt.lambda, opt.retries, opt.steps);
    print_header();
    bool ok = true;
    if (opt.run_unordered)
        for (numbering n :
             opt.unordered_variants ? opt.variants : std::vector<numbering>{numbering::post}) {
            result_line r;
            ok &= run_one(opt, false, n, &r);
            print_line(false, n, r);
        }
    if (opt.run_ordered)
        for (numbering n : opt.variants) {
            result_line r;
            ok &= run_one(opt, true, n, &r);
            print_line(true, n, r);
        }
    return ok ? 0 : 1;
} catch (const rsp::error &e) {
    std::fprintf(stderr, "rsp-ordered-sched: %s (%s)\n", e.what(), rsp_strerror(e.status()));
    return 1;
}
