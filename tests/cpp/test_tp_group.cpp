// rsp.hpp's tensor-parallel group and the calls it rests on: synchronous
// calls on an ordered pool, std::function callbacks, typed failures,
// strong checkpoint keys, rows dropped from a step. Host device.
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>

#include <cmocka.h>
}

using namespace std::chrono_literals;

namespace
{

static_assert(!std::is_convertible_v<std::uint64_t, rsp::checkpoint_key>);
static_assert(!std::is_copy_constructible_v<rsp::tp_group>);
static_assert(!std::is_copy_constructible_v<rsp::group_ticket>);

// A short reorder timeout: a number taken and never posted would break the
// pools within the test.
rsp::pool_config config(std::uint32_t slots = 9)
{
    rsp::pool_config cfg;
    cfg.layers(2).slots(slots).block("conv", RSP_DTYPE_F32, {4, 8}).ordered(true, 50ms);
    return cfg;
}

bool mentions(const rsp::result<void> &r, const char *what)
{
    return std::strstr(r.error().message, what) != nullptr;
}

// One engine loop over three ranks: every message to every rank under one
// number, answers and digests compared, each rank's pool agreeing.
void group_runs_steps_on_every_rank(void **)
{
    rsp::tp_group g = rsp::tp_group::create(config(), 3);
    assert_int_equal(g.size(), 3);
    for (std::uint32_t r = 0; r < 3; r++)
        assert_true(g.rank(r).ordered());
    const rsp::label draft = g.intern("draft");
    const rsp::rid a{1}, b{2};
    g.ingest(a);
    const std::vector<rsp::rid> both = {b};
    g.ingest_many(both);
    rsp::step s1(rsp::step_id{1});
    s1.row(a).row(b).row(b, draft);
    rsp_step_outcome o = g.step_next(s1);
    assert_true(o.planned && o.admit.ok);
    rsp::reader me;
    for (std::uint32_t r = 0; r < 3; r++) {
        rsp::read_section rs;
        assert_true(rs.live(g.rank(r)).digest() == o.plan_digest);
    }
    rsp::step s2(rsp::step_id{2});
    s2.row(a).row(b);
    o = g.step_next(s2, &s1, rsp::forward_complete());
    assert_true(o.committed && o.planned);
    assert_int_equal(g.holding(b, draft).index, g.rank(2).holding(b, draft).index);
    g.commit(s2, rsp::forward_complete());
    g.release(b, draft);
    g.barrier();
    std::vector<rsp_stats> st = g.stats();
    assert_int_equal(st.size(), 3);
    for (const rsp_stats &x : st)
        assert_int_equal(x.commits, 2);
    g.remove(a);
    g.remove(b);
    assert_true(g.diverged().ok());
}

// Async: a group ticket collects every rank's reply; forget posts to all.
void group_posts_and_collects(void **)
{
    rsp::tp_group g = rsp::tp_group::create(config(), 2);
    g.post_forget(rsp::msg::ingest(rsp::rid{7}));
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{7});
    rsp::group_ticket t = g.post(rsp::msg::step_next(s));
    assert_true(t.valid());
    assert_true(t.seq() > 1);
    rsp_reply r = t.wait();
    assert_true(r.planned);
    assert_false(t.valid());
    assert_int_equal(t.replies().size(), 2);
    assert_true(t.replies()[1].plan_digest == r.plan_digest);
    assert_int_equal(t.try_wait().status(), RSP_EINVAL); // collected once

    // Each rank's own forward_done.
    rsp::host_fence f0 = rsp::host_fence::create(), f1 = rsp::host_fence::create();
    const std::vector<rsp_event> done = {f0.at(1), f1.at(1)};
    f0.signal(1);
    f1.signal(1);
    g.commit(s, done);
    const std::vector<rsp_event> one = {f0.at(2)};
    assert_int_equal(g.try_commit(s, one).status(), RSP_EINVAL); // one event per rank
    assert_int_equal(g.rank(1).stats().commits, 1);
}

// Checkpoints, swaps and per-rank forward_done through the group: every
// rank answers alike.
void group_checkpoints_swaps_and_rank_events(void **)
{
    rsp::pool_config cfg = config();
    cfg.checkpoints(2, 2);
    rsp::tp_group g = rsp::tp_group::create(cfg, 2);
    g.ingest(rsp::rid{1});
    g.ingest(rsp::rid{2});
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1}).row(rsp::rid{2});
    g.step_next(s1);
    rsp::host_fence f0 = rsp::host_fence::create(), f1 = rsp::host_fence::create();
    f0.signal(1);
    f1.signal(1);
    const std::vector<rsp_event> done = {f0.at(1), f1.at(1)};
    rsp::step s2(rsp::step_id{2});
    s2.row(rsp::rid{1});
    rsp_step_outcome o = g.step_next(s2, &s1, done);
    assert_true(o.committed && o.planned);
    g.commit(s2, rsp::forward_complete());
    const rsp::checkpoint_key k{42};
    g.checkpoint(k, rsp::rid{1});
    rsp_checkpoint_info i = g.checkpoint_query(k);
    assert_int_equal(i.key, 42);
    assert_int_equal(g.rank(1).checkpoint_query(k).slot, i.slot);
    g.checkpoint_pin(k);
    g.checkpoint_unpin(k);
    g.checkpoint_drop(k);
    assert_int_equal(g.try_checkpoint_query(k).status(), RSP_ENOKEY); // every rank alike
    g.swap_out(rsp::rid{2});
    assert_true(g.swap_in(rsp::rid{2}).ok);
    g.reset(rsp::rid{2}, true);
    g.clear_preplan();
    g.plan_wait(rsp::step_id{2});
    assert_true(g.diverged().ok());
}

// A message every rank refuses leaves no gap: the group fills its number
// on every rank and goes on (a gap would time out the next message).
void refused_message_fills_its_number(void **)
{
    rsp::tp_group g = rsp::tp_group::create(config(), 2);
    rsp::step bad(rsp::step_id{1});
    bad.row(rsp::rid{1}, rsp::label{30}); // a label nobody interned
    assert_int_equal(g.try_admit(bad).status(), RSP_ENOLABEL);
    g.ingest(rsp::rid{1});
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1});
    assert_true(g.admit(s).ok);
    assert_true(g.diverged().ok());
    // A rank's own numbered call is refused: it would be a gap elsewhere.
    auto direct = g.rank(1).try_ingest(rsp::rid{2});
    assert_int_equal(direct.status(), RSP_EINVAL);
    assert_true(mentions(direct, "tp_group"));
    assert_int_equal(g.rank(1).holding(rsp::rid{1}).index, g.holding(rsp::rid{1}).index);
    g.plan(s);
}

// Ranks that disagree (rank 1 has fewer slots) are reported, naming the
// ranks and the field, and the group refuses what follows.
void divergence_names_ranks_and_field(void **)
{
    rsp::tp_group g = rsp::tp_group::create(config(), 2, [](rsp::pool_config &c, std::uint32_t r) {
        if (r == 1)
            c.slots(3);
    });
    const std::vector<rsp::rid> rids = {rsp::rid{1}, rsp::rid{2}, rsp::rid{3}, rsp::rid{4}};
    g.ingest_many(rids);
    rsp::step s(rsp::step_id{1});
    for (rsp::rid r : rids)
        s.row(r);
    auto a = g.try_admit(s);
    assert_int_equal(a.status(), RSP_EDEVICE);
    assert_non_null(std::strstr(a.error().message, "ranks 0 and 1"));
    assert_non_null(std::strstr(a.error().message, "admit.ok"));
    assert_non_null(std::strstr(a.error().message, "admit"));
    assert_int_equal(g.diverged().status(), RSP_EDEVICE);
    auto later = g.try_ingest(rsp::rid{9});
    assert_int_equal(later.status(), RSP_EDEVICE);
    assert_true(mentions(later, "admit.ok"));
    assert_int_equal(g.rank(0).try_holding(rsp::rid{9}, rsp::label::main).status(),
                     RSP_ENOREQ); // not posted
}

// A config the group cannot make names the rank.
void group_creation_names_the_rank(void **)
{
    auto g = rsp::tp_group::try_create(config(), 2, [](rsp::pool_config &c, std::uint32_t r) {
        if (r == 1)
            c.layers(0);
    });
    assert_int_equal(g.status(), RSP_EINVAL);
    assert_non_null(std::strstr(g.error().message, "rank 1"));
    assert_int_equal(rsp::tp_group::try_create(config(), 0).status(), RSP_EINVAL);
    rsp::tp_group empty;
    assert_int_equal(empty.try_ingest(rsp::rid{1}).status(), RSP_EINVAL);
    assert_int_equal(empty.size(), 0);
}

// An ordered pool's synchronous calls take the next number themselves, mix
// with numbers taken by hand, and a refused one leaves no gap.
void sync_calls_work_on_an_ordered_pool(void **)
{
    rsp::pool_config cfg = config();
    cfg.checkpoints(2, 2);
    rsp::pool p = rsp::pool::create(cfg);
    assert_true(p.ordered());
    const rsp::label draft = p.intern("draft");
    p.ingest(rsp::rid{1});
    assert_int_equal(p.try_ingest(rsp::rid{1}).status(), RSP_OK); // ingest is idempotent
    p.post(rsp::msg::seq(rsp::msg::ingest(rsp::rid{2}), p.next_seq())).wait();
    rsp::step bad(rsp::step_id{1});
    bad.row(rsp::rid{1}, rsp::label{30});
    assert_int_equal(p.try_admit(bad).status(), RSP_ENOLABEL); // refused at the post
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1}).row(rsp::rid{2}, draft);
    assert_true(p.admit(s).ok);
    p.plan(s);
    p.commit(s, rsp::forward_complete());
    rsp::step s2(rsp::step_id{2});
    s2.row(rsp::rid{1});
    rsp_step_outcome o{};
    assert_true(p.try_step_next(s2, nullptr, {}, &o).ok());
    assert_true(o.planned);
    p.commit(s2, rsp::forward_complete());
    p.checkpoint(rsp::checkpoint_key{5}, rsp::rid{1});
    assert_int_equal(p.checkpoint_query(rsp::checkpoint_key{5}).key, 5);
    p.checkpoint_pin(rsp::checkpoint_key{5});
    p.checkpoint_unpin(rsp::checkpoint_key{5});
    p.checkpoint_drop(rsp::checkpoint_key{5});
    p.swap_out(rsp::rid{2});
    assert_true(p.swap_in(rsp::rid{2}).ok);
    p.release(rsp::rid{2}, draft);
    p.reset(rsp::rid{1}, true);
    const std::vector<rsp::rid> gone = {rsp::rid{1}, rsp::rid{2}};
    p.remove_many(gone);
    p.clear_preplan();
    assert_int_equal(p.stats().posts_failed, 0);
    assert_true(p.next_seq() > 10);
}

// Callbacks as std::function: the failure is typed (the skipped take's key)
// and what they throw is caught.
void function_callbacks_typed_and_caught(void **)
{
    // Written on the owner thread, read here after a barrier (its answer
    // comes after the callbacks ran).
    std::atomic<std::uint64_t> skipped{0}, evicted{0};
    std::atomic<bool> stepless{false};
    rsp::pool_config cfg;
    cfg.layers(2).slots(9).block("conv", RSP_DTYPE_F32, {4, 8}).checkpoints(1);
    cfg.on_error([&](const rsp::failure &f) {
        if (f.skipped)
            skipped = rsp::raw(*f.skipped);
        if (!f.step)
            stepless = true;
        throw std::runtime_error("from on_error");
    });
    cfg.on_checkpoint_evict([&](const rsp_checkpoint_event &e) {
        evicted = e.key;
        throw 42; // not a std::exception
    });
    rsp::pool p = rsp::pool::create(cfg);
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1}).checkpoint(rsp::rid{1}, rsp::label::main, rsp::checkpoint_key{3});
    p.admit(s1);
    p.plan(s1);
    p.commit(s1, rsp::forward_complete());
    p.checkpoint(rsp::checkpoint_key{4}, rsp::rid{1}); // evicts 3 for room
    assert_int_equal(evicted, 3);
    p.checkpoint_pin(rsp::checkpoint_key{4}); // no room left for a take
    rsp::step s2(rsp::step_id{2});
    s2.row(rsp::rid{1}).checkpoint(rsp::rid{1}, rsp::label::main, rsp::checkpoint_key{8});
    p.admit(s2);
    p.plan(s2);
    p.commit(s2, rsp::forward_complete());
    p.barrier();
    assert_int_equal(skipped, 8);
    assert_false(stepless);
    assert_int_equal(p.callback_exceptions(), 2);
    assert_true(static_cast<bool>(p.callback_exception()));
    assert_int_equal(p.stats().checkpoints_skipped, 1);
}

// A step drops a request's rows with its takes and restores.
void step_drops_rows(void **)
{
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1})
        .row(rsp::rid{2})
        .row(rsp::rid{2}, rsp::label{1})
        .row(rsp::rid{3})
        .checkpoint(rsp::rid{2}, rsp::label::main, rsp::checkpoint_key{7})
        .restore(rsp::rid{3}, rsp::label::main, rsp::checkpoint_key{9})
        .restore(rsp::rid{2}, rsp::label{1}, rsp::checkpoint_key{8});
    assert_int_equal(s.drop(rsp::rid{2}), 2);
    assert_int_equal(s.rows().size(), 2);
    assert_int_equal(s.rows()[1].rid, 3);
    assert_int_equal(s.checkpoints().size(), 0);
    assert_int_equal(s.restores().size(), 1);
    assert_int_equal(s.restores()[0].key, 9);
    assert_int_equal(s.drop(rsp::rid{2}), 0);
    assert_true(s.drop_row(0));
    assert_false(s.drop_row(1));
    assert_int_equal(s.get().num_rows, 1);
    assert_int_equal(s.get().rows[0].rid, 3);
    // The admit of a full pool names the rid to drop; dropping it fits.
    rsp::pool_config small = config(3);
    rsp::pool p = rsp::pool::create(small);
    rsp::step big(rsp::step_id{1});
    big.row(rsp::rid{1}).row(rsp::rid{2}).row(rsp::rid{3});
    rsp_admit_outcome o = p.admit(big);
    assert_false(o.ok);
    big.drop(rsp::rid{o.rid});
    while (!(o = p.admit(big)).ok)
        big.drop(rsp::rid{o.rid});
    assert_true(big.rows().size() >= 1);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group_runs_steps_on_every_rank),
        cmocka_unit_test(group_posts_and_collects),
        cmocka_unit_test(group_checkpoints_swaps_and_rank_events),
        cmocka_unit_test(refused_message_fills_its_number),
        cmocka_unit_test(divergence_names_ranks_and_field),
        cmocka_unit_test(group_creation_names_the_rank),
        cmocka_unit_test(sync_calls_work_on_an_ordered_pool),
        cmocka_unit_test(function_callbacks_typed_and_caught),
        cmocka_unit_test(step_drops_rows),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
