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

class Client
{
  public:
    Client(Context &cx, unsigned index)
        : cx_(cx), index_(index), rng_(mix64(cx.opt.seed * 1000003u + 17 + index))
    {
    }
    void run();

  private:
    void send(rsp_msg_kind kind, rsp_rid rid);
    void ask_holding();
    void burst();

    Context &cx_;
    unsigned index_;
    Rng rng_;
};

// Post one ingest or remove in one of four ways; every way must answer OK
// (remove of an unknown rid is a no-op, ingest is idempotent).
void Client::send(rsp_msg_kind kind, rsp_rid rid)
{
    rsp_error err{};
    rsp_status st;
    const char *what = kind == RSP_MSG_INGEST ? "ingest" : "remove";
    switch (rng_.below(4)) {
    case 0: { // sync wrapper
        st = kind == RSP_MSG_INGEST ? rsp_ingest(cx_.pool, rid, &err)
                                    : rsp_remove(cx_.pool, rid, &err);
        cx_.checks.expect(CHECK_API, st == RSP_OK, "sync %s(%" PRIu64 "): %s", what, rid,
                          err.message);
        break;
    }
    case 1: { // ticket, blocking wait
        rsp_msg m{};
        m.kind = kind;
        m.rid = rid;
        rsp_ticket *t = nullptr;
        st = rsp_post(cx_.pool, &m, &t, RSP_WAIT_FOREVER, &err);
        if (!cx_.checks.expect(CHECK_API, st == RSP_OK, "post %s: %s", what, err.message))
            break;
        rsp_reply r{};
        st = rsp_wait(t, RSP_WAIT_FOREVER, &r);
        cx_.checks.expect(CHECK_API, st == RSP_OK && r.error.status == RSP_OK,
                          "wait %s(%" PRIu64 "): %s / %s", what, rid, rsp_strerror(st),
                          r.error.message);
        break;
    }
    case 2: { // fire-and-forget, no waiting for credit: EFULL is a legal answer
        rsp_msg m{};
        m.kind = kind;
        m.rid = rid;
        st = rsp_post(cx_.pool, &m, nullptr, 0, &err);
        if (st == RSP_EFULL) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            st = rsp_post(cx_.pool, &m, nullptr, RSP_WAIT_FOREVER, &err);
        }
        cx_.checks.expect(CHECK_API, st == RSP_OK, "post(nb) %s: %s", what, err.message);
        break;
    }
    default: { // fire-and-forget, waiting for credit
        rsp_msg m{};
        m.kind = kind;
        m.rid = rid;
        st = rsp_post(cx_.pool, &m, nullptr, 10 * kMs, &err);
        // A timed credit wait that expires answers RSP_ETIMEDOUT (RSP_EFULL is
        // the immediate answer of a zero timeout); accept either.
        if (st == RSP_EFULL || st == RSP_ETIMEDOUT) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            st = rsp_post(cx_.pool, &m, nullptr, RSP_WAIT_FOREVER, &err);
        }
        cx_.checks.expect(CHECK_API, st == RSP_OK, "post %s: %s", what, err.message);
        break;
    }
    }
    cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
}

// A holding query on some request: OK with a sane slot, or ENOREQ.
void Client::ask_holding()
{
    std::vector<rsp_rid> one;
    cx_.reg.sample(rng_, 1, one);
    if (one.empty())
        return;
    rsp_label_id label = cx_.labels[rng_.below(kNumLabels)];
    rsp_holding h{};
    rsp_error err{};
    rsp_status st = rsp_holding_get(cx_.pool, one[0], label, &h, &err);
    cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
    if (st == RSP_ENOREQ) {
        cx_.checks.pass(CHECK_HOLDING);
        return;
    }
    int32_t lo = cx_.info.sink ? 1 : 0;
    cx_.checks.expect(
        CHECK_HOLDING, st == RSP_OK && h.index >= lo && h.index < (int32_t)cx_.info.max_slots,
        "holding(%" PRIu64 ", %u): %s, index %d", one[0], label, rsp_strerror(st), h.index);
}

// Fill the inbox: fire-and-forget barriers (they change nothing) without
// waiting for credit, until the pool says RSP_EFULL or the burst ends.
// Every other answer is an error.
void Client::burst()
{
    rsp_msg m{};
    m.kind = RSP_MSG_BARRIER;
    for (int i = 0; i < 20000; i++) {
        rsp_error err{};
        rsp_status st = rsp_post(cx_.pool, &m, nullptr, 0, &err);
        cx_.client_msgs.fetch_add(1, std::memory_order_relaxed);
        if (st == RSP_EFULL) {
            cx_.efull.fetch_add(1, std::memory_order_relaxed);
            cx_.checks.pass(CHECK_API);
            return;
        }
        if (!cx_.checks.expect(CHECK_API, st == RSP_OK, "burst post: %s", err.message))
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
        rsp_rid rid = kPadRid + 1;
        for (int k = 0; k < 2 && cx_.reg.take_pending(index_, &rid); k++)
            send(RSP_MSG_INGEST, rid);
        size_t active = cx_.reg.active_count();
        if (active < target) {
            rid = cx_.reg.create(index_);
            send(RSP_MSG_INGEST, rid);
        } else if (rng_.chance(0.35)) {
            // Tombstone first, then remove: the step thread relies on this order.
            // A third of the removals hit the step in flight (commit pending).
            bool got = rng_.chance(0.33) ? cx_.reg.retire_hot(rng_, &rid) : false;
            if (got || cx_.reg.retire_random(rng_, &rid))
                send(RSP_MSG_REMOVE, rid);
        }
        if (rng_.chance(0.05))
            ask_holding();
        if (rng_.chance(0.0005))
            burst();
        if (rng_.chance(0.0005)) {
            // A runner capturing graphs mid-run: buffers that exist must not
            // move (partitions may be reading them right now).
            rsp_error err{};
            rsp_status st =
                rsp_build_graph_buffers(cx_.pool, kGraphMaxBs + rng_.below(48), 4096, &err);
            cx_.checks.expect(CHECK_API, st == RSP_OK, "build_graph_buffers: %s", err.message);
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
