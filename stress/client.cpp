// rsp-stress: client threads (the scheduler's request side).
// SPDX-License-Identifier: Apache-2.0
//
// Each client creates requests, ingests requests other clients created (ingest
// is sent once per partition in a real engine, so the same rid arrives from
// several threads, possibly after steps already ran for it), removes requests
// at random (also while a step addresses them), and asks for holdings. It
// mixes fire-and-forget posts, posts with a ticket, and the sync wrappers.
#include "stress.h"

#include <cinttypes>
#include <thread>

namespace stress
{

namespace
{

enum class Op { ingest, remove };

class Client
{
  public:
    Client(Context &cx, unsigned index)
        : cx_(cx), index_(index), rng_(mix64(cx.opt.seed * 1000003u + 17 + index))
    {
    }
    void run();

  private:
    void send(Op op, rsp::rid rid);
    void ask_holding();
    void burst();

    Context &cx_;
    unsigned index_;
    Rng rng_;
};

// Post one ingest or remove in one of four ways; every way must answer OK
// (remove of an unknown rid is a no-op, ingest is idempotent).
void Client::send(Op op, rsp::rid rid)
{
    rsp::pool &pool = cx_.pool;
    const char *what = op == Op::ingest ? "ingest" : "remove";
    const rsp_msg m = op == Op::ingest ? rsp::msg::ingest(rid) : rsp::msg::remove(rid);
    switch (rng_.below(4)) {
    case 0: { // sync wrapper
        rsp::result<void> r = op == Op::ingest ? pool.try_ingest(rid) : pool.try_remove(rid);
        cx_.checks.expect(CHECK_API, r.ok(), "sync %s(%" PRIu64 "): %s", what, rsp::raw(rid),
                          r.error().message);
        break;
    }
    case 1: { // ticket, blocking wait
        rsp::result<rsp::ticket> t = pool.try_post(m);
        if (!cx_.checks.expect(CHECK_API, t.ok(), "post %s: %s", what, t.error().message))
            break;
        rsp::result<rsp_reply> r = t.value().try_wait();
        cx_.checks.expect(CHECK_API, r.ok(), "wait %s(%" PRIu64 "): %s / %s", what, rsp::raw(rid),
                          rsp_strerror(r.status()), r.error().message);
        break;
    }
    case 2: { // fire-and-forget, no waiting for credit: EFULL is a legal answer
        rsp::result<void> r = pool.try_post_forget(m, rsp::poll);
        if (r.status() == RSP_EFULL) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            r = pool.try_post_forget(m);
        }
        cx_.checks.expect(CHECK_API, r.ok(), "post(nb) %s: %s", what, r.error().message);
        break;
    }
    default: { // fire-and-forget, waiting for credit
        rsp::result<void> r = pool.try_post_forget(m, 10ms);
        // A timed credit wait that expires answers RSP_ETIMEDOUT (RSP_EFULL is
        // the immediate answer of a zero timeout); accept either.
        if (r.status() == RSP_EFULL || r.status() == RSP_ETIMEDOUT) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            r = pool.try_post_forget(m);
        }
        cx_.checks.expect(CHECK_API, r.ok(), "post %s: %s", what, r.error().message);
        break;
    }
    }
    cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
}

// A holding query on some request: OK with a sane slot, or ENOREQ.
void Client::ask_holding()
{
    std::vector<rsp::rid> one;
    cx_.reg.sample(rng_, 1, one);
    if (one.empty())
        return;
    rsp::label label = cx_.labels[rng_.below(kNumLabels)];
    rsp::result<rsp_holding> h = cx_.pool.try_holding(one[0], label);
    cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
    if (h.status() == RSP_ENOREQ) {
        cx_.checks.pass(CHECK_HOLDING);
        return;
    }
    int32_t lo = cx_.info.sink ? 1 : 0;
    int32_t index = h.ok() ? h.value().index : RSP_NO_SLOT;
    cx_.checks.expect(CHECK_HOLDING, h.ok() && index >= lo && index < (int32_t)cx_.info.max_slots,
                      "holding(%" PRIu64 ", %u): %s, index %d", rsp::raw(one[0]), rsp::raw(label),
                      rsp_strerror(h.status()), index);
}

// Fill the inbox: fire-and-forget barriers (they change nothing) without
// waiting for credit, until the pool says RSP_EFULL or the burst ends.
// Every other answer is an error.
void Client::burst()
{
    const rsp_msg m = rsp::msg::barrier();
    for (int i = 0; i < 20000; i++) {
        rsp::result<void> r = cx_.pool.try_post_forget(m, rsp::poll);
        cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
        if (r.status() == RSP_EFULL) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            cx_.checks.pass(CHECK_API);
            return;
        }
        if (!cx_.checks.expect(CHECK_API, r.ok(), "burst post: %s", r.error().message))
            return;
    }
}

void Client::run()
{
    // Aim at a number of live requests that keeps the pool busy but leaves
    // room for forks: about a third of the slots.
    size_t target = cx_.info.usable_slots / 3 + 2;
    while (!cx_.stop.load(std::memory_order_relaxed) &&
           !cx_.abort.load(std::memory_order_relaxed)) {
        rsp::rid rid{rsp::raw(kPadRid) + 1};
        for (int k = 0; k < 2 && cx_.reg.take_pending(index_, &rid); k++)
            send(Op::ingest, rid);
        size_t active = cx_.reg.active_count();
        if (active < target) {
            rid = cx_.reg.create(index_);
            send(Op::ingest, rid);
        } else if (rng_.chance(0.35)) {
            // Tombstone first, then remove: the step thread relies on this order.
            // A third of the removals hit the step in flight (commit pending).
            bool got = rng_.chance(0.33) ? cx_.reg.retire_hot(rng_, &rid) : false;
            if (got || cx_.reg.retire_random(rng_, &rid))
                send(Op::remove, rid);
        }
        if (rng_.chance(0.05))
            ask_holding();
        if (rng_.chance(0.0005))
            burst();
        if (rng_.chance(0.0005)) {
            // A runner capturing graphs mid-run: buffers that exist must not
            // move (partitions may be reading them right now).
            rsp::result<void> r =
                cx_.pool.try_build_graph_buffers(kGraphMaxBs + rng_.below(48), 4096);
            cx_.checks.expect(CHECK_API, r.ok(), "build_graph_buffers: %s", r.error().message);
            cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50 + rng_.below(400)));
    }
}

} // namespace

void client_main(Context &cx, unsigned index)
{
    Client c(cx, index);
    c.run();
}

} // namespace stress
