// rsp-stress: the two-rank mode. Two ordered pools stand for two
// tensor-parallel ranks; --rank-threads scheduler threads post the same
// messages to both, numbered from one shared counter, in a random order
// with random delays between the ranks, and compare the plan digests of
// every step (check kind "ranks").
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <chrono>
#include <thread>

namespace stress
{

namespace
{

struct Ranks {
    rsp::pool pool[2];
    std::atomic<uint64_t> seq{0}; // the shared counter: the last number taken
};

// Post m numbered with the next number to both ranks, first rank and delay
// at random, then wait for both answers (kHang at most). *seq gets the
// number. False when a post or an answer failed (counted), or on a hang.
bool both(Context &cx, Ranks &rk, Rng &rng, rsp_msg m, rsp_reply r[2], uint64_t *seq)
{
    const uint64_t n = rk.seq.fetch_add(1, std::memory_order_relaxed) + 1;
    *seq = n;
    if (m.kind == RSP_MSG_ADMIT)
        m.step.step_id = n; // steps admitted in number order: ids increase on both ranks
    m = rsp::msg::seq(m, n);
    const unsigned first = rng.below(2);
    rsp::ticket t[2];
    bool ok = true;
    for (unsigned k = 0; k < 2; k++) {
        const unsigned p = k ^ first;
        rsp::result<rsp::ticket> posted = rk.pool[p].try_post(m);
        if (!cx.checks.expect(CHECK_API, posted.ok(), "rank %u post of message %llu: %s", p,
                              (unsigned long long)n, posted.error().message))
            ok = false; // the other rank still gets it: numbers never go missing
        else
            t[p] = std::move(posted).value();
        for (uint32_t spin = rng.below(32); spin-- > 0;)
            std::this_thread::yield();
    }
    for (unsigned p = 0; p < 2; p++) {
        if (!t[p].valid())
            continue;
        rsp::result<rsp_reply> got = t[p].try_wait(kHang);
        if (got.status() == RSP_ETIMEDOUT) {
            cx.checks.fail(CHECK_HANG, "rank %u: message %llu not answered in %llds", p,
                           (unsigned long long)n, (long long)kHang.count());
            cx.abort.store(true);
            (void)t[0].release(); // the pools may be wedged: waiting again would hang
            (void)t[1].release();
            return false;
        }
        if (!cx.checks.expect(CHECK_API, got.ok(), "rank %u message %llu: %s", p,
                              (unsigned long long)n, got.error().message))
            ok = false;
        else
            r[p] = got.value();
    }
    return ok;
}

// One scheduler thread: its own requests, one step at a time (admit, plan,
// commit), a random one of them removed now and then.
void rank_thread(Context &cx, Ranks &rk, unsigned id)
{
    Rng rng(mix64(cx.opt.seed * 1000003u + 77 + id));
    const uint64_t base = (uint64_t)(id + 1) << 40; // apart from the main model's rids
    rsp::rid live[3] = {rsp::rid{base}, rsp::rid{base + 1}, rsp::rid{base + 2}};
    uint64_t fresh = base + 3, seq = 0;
    rsp_reply r[2];
    while (!cx.stop.load(std::memory_order_relaxed) && !cx.abort.load()) {
        if (rng.chance(0.3)) {
            const unsigned k = rng.below(3);
            if (!both(cx, rk, rng, rsp::msg::remove(live[k]), r, &seq))
                return;
            live[k] = rsp::rid{fresh++};
        }
        int32_t span[3];
        rsp::step s(rsp::step_id{0});
        for (unsigned k = 0; k < 3; k++)
            s.row(live[k], rsp::label::main, span[k] = 1 + (int32_t)rng.below(4));
        if (!both(cx, rk, rng, rsp::msg::admit(s), r, &seq))
            return;
        s.reset(rsp::step_id{seq}); // the admit's number is its id: plan and commit name it
        for (unsigned k = 0; k < 3; k++)
            s.row(live[k], rsp::label::main, span[k]);
        if (!cx.checks.expect(CHECK_RANKS, r[0].admit.ok == r[1].admit.ok,
                              "step %llu admitted on one rank only", (unsigned long long)seq) ||
            !r[0].admit.ok)
            continue;
        if (!both(cx, rk, rng, rsp::msg::plan(s), r, &seq))
            return;
        cx.checks.expect(CHECK_RANKS, r[0].plan_digest == r[1].plan_digest,
                         "step %llu: plan digests differ (%016llx, %016llx)",
                         (unsigned long long)rsp::raw(s.id()), (unsigned long long)r[0].plan_digest,
                         (unsigned long long)r[1].plan_digest);
        cx.rank_steps.fetch_add(1, std::memory_order_relaxed);
        if (!both(cx, rk, rng, rsp::msg::commit(s, rsp::forward_complete()), r, &seq))
            return;
    }
}

} // namespace

void ranks_main(Context &cx)
{
    Ranks rk;
    rsp::pool_config cfg;
    // A thread numbers a message, then posts it: descheduled in between for
    // longer than the reorder timeout, it breaks the pool. Under TSan on a
    // loaded 2-core machine that took over the default 1 s once; 10 s still
    // catches a message that never comes.
    cfg.layers(1).slots(64).inflight_steps(16).ordered(true, std::chrono::seconds(10));
    cfg.block("ssm", RSP_DTYPE_F32, {4});
    for (unsigned p = 0; p < 2; p++) {
        rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
        if (!cx.checks.expect(CHECK_API, created.ok(), "rank %u pool create: %s", p,
                              created.error().message))
            return;
        rk.pool[p] = std::move(created).value();
    }
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < cx.opt.rank_threads; i++)
        threads.emplace_back(rank_thread, std::ref(cx), std::ref(rk), i);
    for (auto &t : threads)
        t.join();
    // Both ranks handled the same numbered messages: the same counters.
    rsp::result<rsp_stats> s0 = rk.pool[0].try_stats(), s1 = rk.pool[1].try_stats();
    if (s0 && s1)
        cx.checks.expect(CHECK_RANKS,
                         s0.value().free_slots == s1.value().free_slots &&
                             s0.value().generation == s1.value().generation &&
                             s0.value().commits == s1.value().commits,
                         "ranks end apart: free %u / %u, generation %llu / %llu",
                         s0.value().free_slots, s1.value().free_slots,
                         (unsigned long long)s0.value().generation,
                         (unsigned long long)s1.value().generation);
}

} // namespace stress
