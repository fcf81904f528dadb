// rsp.hpp, the C++17 binding: RAII, both error styles, strong types, the
// step builder, tickets, read sections and references, on the host device.
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

extern "C" {
#include <cmocka.h>
}

using namespace std::chrono_literals;

namespace
{

// Strong types do not mix: a rid is not a step id nor a label.
static_assert(!std::is_convertible_v<rsp::rid, rsp::step_id>);
static_assert(!std::is_convertible_v<std::uint64_t, rsp::rid>);
static_assert(!std::is_copy_constructible_v<rsp::pool>);
static_assert(!std::is_copy_constructible_v<rsp::ticket>);
static_assert(std::is_nothrow_move_constructible_v<rsp::pool>);

rsp::pool_config small_config(std::uint32_t slots = 9)
{
    rsp::pool_config cfg;
    cfg.layers(2)
        .slots(slots)
        .block("conv", RSP_DTYPE_F32, {4, 8})
        .block("ssm", RSP_DTYPE_F32, {2, 4, 4}, {0});
    return cfg;
}

float first_float(const rsp::pool &p, std::int32_t slot)
{
    rsp_block_view v = p.block("conv", 0);
    const float *row = static_cast<const float *>(v.data) + slot * v.strides[0];
    return row[0];
}

void timeouts_map_onto_rsp(void **)
{
    assert_int_equal(rsp::timeout_ns(rsp::forever), RSP_WAIT_FOREVER);
    assert_int_equal(rsp::timeout_ns(rsp::poll), RSP_WAIT_POLL);
    assert_int_equal(rsp::timeout_ns(-5ms), RSP_WAIT_POLL);
    assert_int_equal(rsp::timeout_ns(3ms), 3000000u);
    assert_int_equal(rsp::timeout_ns(std::chrono::hours::max()), RSP_WAIT_FOREVER);
}

void create_failure_throws_with_status_and_message(void **)
{
    rsp::pool_config cfg = small_config();
    cfg.layers(0);
    try {
        rsp::pool p = rsp::pool::create(cfg);
        fail_msg("a pool with 0 layers was created");
    } catch (const rsp::error &e) {
        assert_int_equal(e.status(), RSP_EINVAL);
        assert_non_null(std::strstr(e.what(), "num_layers"));
    }
    auto r = rsp::pool::try_create(cfg);
    assert_false(r.ok());
    assert_int_equal(r.status(), RSP_EINVAL);
    assert_non_null(std::strstr(r.error().message, "num_layers"));
}

// The guide's first step (docs/guide.md), in C++: ingest, admit, plan,
// forward, commit, remove.
void one_step_end_to_end(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::reader me;
    rsp::host_fence fence = rsp::host_fence::create();
    const rsp::rid r{7};
    pool.ingest(r);

    rsp::step s(rsp::step_id{1});
    s.row(r, rsp::label::main, 16);
    rsp_admit_outcome out = pool.admit(s);
    assert_true(out.ok);
    pool.plan(s);

    std::int32_t slot;
    {
        rsp::plan_ref ref;
        {
            rsp::read_section rs;
            rsp::plan_view plan = rs.live(pool);
            assert_true(static_cast<bool>(plan));
            assert_true(plan.id() == rsp::step_id{1});
            ref = rsp::plan_ref(plan);
        }
        rsp::addressing a = ref.view().at(rsp::label::main);
        assert_int_equal(a.num_rows(), 1);
        slot = a.slots()[0];
        assert_false(a.has_state()[0]);
        // The device uploads the vectors after the plan is published: wait
        // (a poll here would race with it), outside the read section.
        pool.event_wait(a.ready(), 30s);
    }
    // The "forward" writes the slot, then signals its fence.
    rsp_block_view v = pool.block("conv", 0);
    static_cast<float *>(v.data)[slot * v.strides[0]] = 3.0f;
    pool.commit(s, fence.at(1));
    fence.signal(1);
    rsp_holding h = pool.holding(r);
    assert_int_equal(h.index, slot);
    assert_true(h.has_state);

    pool.remove(r);
    pool.barrier();
    assert_false(pool.try_holding(r, rsp::label::main).ok());
    assert_int_equal(pool.try_holding(r, rsp::label::main).status(), RSP_ENOREQ);
    // Released slots are zeroed (the device ran the zero after the fence).
    rsp::step flush(rsp::step_id{2});
    flush.pad();
    assert_true(pool.admit(flush).ok);
    pool.plan(flush);
    {
        rsp::plan_ref ref;
        {
            rsp::read_section rs;
            ref = rsp::plan_ref(rs.live(pool));
        }
        pool.event_wait(ref.view().at(rsp::label::main).ready(), 30s);
    }
    pool.rollback(flush.id());
    assert_true(first_float(pool, slot) == 0.0f);
    pool.close();
    assert_null(pool.get());
}

// try_ calls never throw: a bad step is a result with the pool's message.
void errors_as_results(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::step s(rsp::step_id{5});
    s.row(rsp::rid{1}, rsp::label{9}); // never interned
    auto r = pool.try_admit(s);
    assert_false(r.ok());
    assert_int_equal(r.status(), RSP_ENOLABEL);
    assert_true(r.error().message[0] != '\0');
    bool threw = false;
    try {
        pool.plan(s);
    } catch (const rsp::error &e) {
        threw = true;
        assert_int_not_equal(e.status(), RSP_OK);
    }
    assert_true(threw);
    // value() of a failed result throws the same error.
    threw = false;
    try {
        (void)r.value();
    } catch (const rsp::error &e) {
        threw = e.status() == RSP_ENOLABEL;
    }
    assert_true(threw);
    // A full pool is an outcome, not an error.
    rsp::step big(rsp::step_id{6});
    for (std::uint64_t i = 1; i <= 9; i++) { // 8 usable slots
        pool.ingest(rsp::rid{i});
        big.row(rsp::rid{i});
    }
    rsp_admit_outcome out = pool.admit(big);
    assert_false(out.ok);
    assert_int_equal(out.slots_short, 1);
    pool.rollback(big.id());
}

// Labels, forks and the step builder's arrays reach the pool intact.
void forks_through_the_builder(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    const rsp::label draft = pool.intern("draft");
    assert_true(draft != rsp::label::main);
    assert_true(pool.intern("draft") == draft); // idempotent
    pool.ingest(rsp::rid{3});
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{3}, rsp::label::main, 4)
        .row(rsp::rid{3}, draft, 1)
        .pre_fork(rsp::label::main, draft);
    assert_int_equal(s.rows().size(), 2);
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    pool.commit(s, rsp::forward_complete());
    rsp_holding m = pool.holding(rsp::rid{3}, rsp::label::main);
    rsp_holding d = pool.holding(rsp::rid{3}, draft);
    assert_int_not_equal(m.index, d.index);
    rsp_stats st = pool.stats();
    assert_int_equal(st.forks, 1);
    assert_int_equal(st.held_slots, 2);
}

// Tickets: waited once, polled, or dropped (the destructor forgets it).
void tickets(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp_msg m{};
    m.kind = RSP_MSG_INGEST;
    m.rid = 11;
    rsp::ticket t = pool.post(m);
    assert_true(t.valid());
    rsp_reply r = t.wait();
    assert_int_equal(r.error.status, RSP_OK);
    assert_false(t.valid());
    assert_int_equal(t.try_wait().status(), RSP_EINVAL); // already consumed
    {
        rsp::ticket dropped = pool.post(m); // never waited: the destructor forgets it
    }
    m.kind = RSP_MSG_STATS;
    rsp::ticket s = pool.post(m);
    rsp_reply sr = s.wait(1s);
    assert_int_equal(sr.stats.num_requests, 1);
    pool.post_forget(m);
    // A failing message: the ticket's result carries the status.
    m.kind = RSP_MSG_LABEL;
    m.label_name = "";
    auto bad = pool.try_post(m);
    assert_false(bad.ok()); // refused by validation, nothing posted
    assert_int_equal(bad.status(), RSP_EINVAL);
}

// A plan reference outlives its read section; copies take references.
void plan_references(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::reader me;
    pool.ingest(rsp::rid{1});
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1});
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    rsp::plan_ref keep;
    {
        rsp::read_section rs;
        keep = rsp::plan_ref(rs.live(pool));
        assert_true(rs.staged(pool).get() == nullptr);
    }
    rsp::plan_ref copy = keep;
    pool.commit(s, rsp::forward_complete());
    // Another step replaces the live plan; the references still read step 1.
    rsp::step s2(rsp::step_id{2});
    s2.row(rsp::rid{1});
    assert_true(pool.admit(s2).ok);
    pool.plan(s2);
    assert_true(copy.view().id() == rsp::step_id{1});
    assert_int_equal(copy.view().at(rsp::label::main).num_rows(), 1);
    auto missing = copy.view().try_addressing(rsp::label{5});
    assert_int_equal(missing.status(), RSP_ENOLABEL);
    pool.commit(s2, rsp::forward_complete());
}

// rsp::read_section::live_addressing (rsp_plan_live_addressing) and a QSBR
// reader's quiescent / offline / online (rsp::reader(rsp::qsbr)).
void live_addressing_and_qsbr_reader(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    {
        rsp::reader me;
        rsp::read_section rs;
        auto none = rs.try_live_addressing(pool, rsp::label::main);
        assert_int_equal(none.status(), RSP_ENOPLAN);
        bool threw = false;
        try {
            (void)rs.live_addressing(pool, rsp::label::main);
        } catch (const rsp::error &e) {
            threw = e.status() == RSP_ENOPLAN;
        }
        assert_true(threw);
        assert_true(me.try_quiescent().status() == RSP_EINVAL); // inside the section
    }
    pool.ingest(rsp::rid{1});
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1});
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    rsp::reader q(rsp::qsbr);
    {
        rsp::read_section rs;
        rsp::addressing a = rs.live_addressing(pool, rsp::label::main);
        assert_int_equal(a.num_rows(), 1);
        assert_true(a.step() == rsp::step_id{1});
        assert_int_equal(rs.try_live_addressing(pool, rsp::label{9}).status(), RSP_ENOLABEL);
    }
    q.quiescent();
    // Online, a QSBR reader may not wait for the owner; offline it may.
    assert_int_equal(pool.try_commit(s, rsp::forward_complete()).status(), RSP_EINVAL);
    q.offline();
    assert_int_equal(q.try_offline().status(), RSP_OK);
    {
        rsp::read_section rs(std::nothrow);
        assert_false(rs.ok());
        assert_int_equal(rs.status(), RSP_EINVAL);
    }
    pool.commit(s, rsp::forward_complete());
    q.online();
    assert_int_equal(q.try_online().status(), RSP_OK);
    q.quiescent();
    q.offline(); // before the pool's destructor waits for the owner
}

// A read section on a thread that is not a reader is an error, not UB.
void read_section_needs_a_reader(void **)
{
    std::atomic<int> status{-1};
    std::thread([&] {
        try {
            rsp::read_section rs;
            status = RSP_OK;
        } catch (const rsp::error &e) {
            status = e.status();
        }
    }).join();
    assert_int_equal(status.load(), RSP_ENOTREG);
}

// plan_wait with a chrono timeout, answered by a planning thread.
void plan_wait_across_threads(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    assert_int_equal(pool.try_plan_wait(rsp::step_id{1}, 1ms).status(), RSP_ETIMEDOUT);
    std::thread planner([&] {
        rsp::step s(rsp::step_id{1});
        s.pad();
        if (pool.try_admit(s).ok())
            (void)pool.try_plan(s);
    });
    rsp::result<void> r = pool.try_plan_wait(rsp::step_id{1}, 30s);
    planner.join();
    assert_true(r.ok());
    pool.rollback(rsp::step_id{1});
}

// rsp::msg builds every message from the strong types; a const step goes
// to admit, plan and commit, through post and post_forget as through the
// synchronous calls.
void messages_and_const_steps(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::host_fence fence = rsp::host_fence::create();
    const rsp::label draft = pool.intern("draft");
    const rsp::rid r{21};
    assert_int_equal(pool.post(rsp::msg::ingest(r)).wait().error.status, RSP_OK);

    rsp::step building(rsp::step_id{1});
    building.row(r, rsp::label::main, 2)
        .pre_fork(rsp::label::main, draft)
        .post_fork(rsp::label::main, draft);
    const rsp::step s = building;
    assert_int_equal(s.pre_forks().size(), 1);
    assert_int_equal(s.post_forks().size(), 1);
    assert_true(s.pre_forks()[0].to == rsp::raw(draft));
    const rsp_step c = s.get();
    assert_int_equal(c.step_id, 1);
    assert_int_equal(c.num_rows, 1);
    assert_ptr_equal(c.rows, s.rows().data());

    rsp_reply a = pool.post(rsp::msg::admit(s)).wait();
    assert_true(a.admit.ok);
    rsp_reply p = pool.post(rsp::msg::plan(s)).wait();
    assert_int_equal(p.plan_step_id, 1);
    assert_false(p.plan_staged);
    pool.post_forget(rsp::msg::commit(s, fence.at(1)));
    fence.signal(1);
    rsp_reply h = pool.post(rsp::msg::holding(r, draft)).wait();
    assert_true(h.holding.has_state); // the post-fork copied the state main's row wrote
    assert_int_equal(pool.post(rsp::msg::intern("draft")).wait().label, rsp::raw(draft));

    // The same step id twice, now through the synchronous calls with a const step.
    rsp::step next(rsp::step_id{2});
    next.row(r);
    const rsp::step &cn = next;
    assert_true(pool.admit(cn).ok);
    rsp_reply rb = pool.post(rsp::msg::rollback(cn.id())).wait();
    assert_int_equal(rb.error.status, RSP_OK);
    pool.post_forget(rsp::msg::reset(r, true));
    pool.post_forget(rsp::msg::build_graph_buffers(8, 64));
    pool.post_forget(rsp::msg::clear_preplan());
    pool.post_forget(rsp::msg::remove(r));
    assert_int_equal(pool.post(rsp::msg::barrier()).wait().error.status, RSP_OK);
    rsp_stats_0_1 st = pool.post(rsp::msg::stats()).wait().stats;
    assert_int_equal(st.num_requests, 0);
    assert_int_equal(st.commits, 1);
    assert_int_equal(st.rollbacks, 1);
    assert_int_equal(pool.post(rsp::msg::shutdown()).wait().error.status, RSP_OK);
    assert_int_equal(pool.try_post_forget(rsp::msg::barrier()).status(), RSP_ESHUTDOWN);
}

// release() gives the C ticket up: the object is empty, the caller waits.
void ticket_release(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::ticket t = pool.post(rsp::msg::ingest(rsp::rid{4}));
    rsp_ticket *c = t.release();
    assert_non_null(c);
    assert_false(t.valid());
    assert_null(t.release());
    rsp_reply r{};
    assert_int_equal(rsp_wait(c, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_int_equal(pool.stats().num_requests, 1);
}

// host_fence::wait_event waits on a fence the caller does not own.
void host_fence_wait_event(void **)
{
    rsp::host_fence fence = rsp::host_fence::create();
    const rsp_event ev = fence.at(2);
    assert_int_equal(rsp::host_fence::wait_event(ev, rsp::poll).status(), RSP_ETIMEDOUT);
    fence.signal(2);
    assert_true(rsp::host_fence::wait_event(ev, rsp::poll).ok());
    assert_true(rsp::host_fence::wait_event(rsp_event{}).ok()); // no handle: complete
    int not_a_fence = 0;
    rsp_event cuda = rsp_event_cuda(&not_a_fence);
    assert_int_equal(rsp::host_fence::wait_event(cuda, rsp::poll).status(), RSP_EINVAL);

    // A plan's ready event on the host device: the pool's own fence.
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::reader me;
    rsp::step s(rsp::step_id{1});
    s.pad();
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    rsp::plan_ref ref;
    {
        rsp::read_section rs;
        ref = rsp::plan_ref(rs.live(pool));
    }
    rsp::addressing a = ref.view().at(rsp::label::main);
    assert_true(rsp::host_fence::wait_event(a.ready(), 30s).ok());
    // The typed accessors read the same vectors as the raw fields.
    assert_true(a.step() == rsp::step_id{1});
    assert_false(a.staged());
    assert_int_equal(a.length(), a.num_rows());
    assert_int_equal(a.device_slots().size(), a.length());
    assert_int_equal(a.device_slots()[0], a.slots()[0]);
    assert_int_equal(a.device_has_state()[0], a.has_state()[0]);
    pool.rollback(s.id());
}

// std::nothrow: a reader and a section that report failure instead of
// throwing, and end nothing they did not begin; end() ends a section once.
void nothrow_reader_and_section(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    std::atomic<int> unregistered{-1}, registered{-1}, inside{-1}, after{-1};
    std::atomic<bool> open_inside{false}, open_after{true};
    std::thread([&] {
        {
            rsp::read_section rs(std::nothrow);
            unregistered = rs.status();
        }
        rsp::reader me(std::nothrow);
        registered = me.status();
        rsp::read_section rs(std::nothrow);
        open_inside = rs.ok();
        // Closing inside a read section is refused: the section is real.
        inside = pool.try_close().status();
        rs.end();
        rs.end(); // once only
        open_after = rs.ok();
        after = rsp_read_end(); // unbalanced now: RSP_EINVAL, nothing changes
    }).join();
    assert_true(open_inside.load());
    assert_false(open_after.load());
    assert_int_equal(unregistered.load(), RSP_ENOTREG);
    assert_int_equal(registered.load(), RSP_OK);
    assert_int_equal(inside.load(), RSP_EINVAL);
    assert_int_equal(after.load(), RSP_EINVAL);
    assert_true(pool.try_close().ok());
}

// try_info / try_counters answer a closed pool with a status, not a throw.
// The owner pinned through the builder (rsp_pool_config.owner_cpu): the
// pool reports it; a CPU the machine lacks throws RSP_EINVAL naming it.
void owner_cpu_through_the_builder(void **)
{
    rsp::pool_config cfg = small_config();
    assert_int_equal(cfg.get().owner_cpu, -1);
    assert_int_equal(rsp::pool::create(cfg).info().owner_cpu, -1);
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &set))
        cpu++;
    cfg.owner_cpu(cpu);
    assert_int_equal(rsp::pool::create(cfg).info().owner_cpu, cpu);
    cfg.owner_cpu(CPU_SETSIZE);
    auto r = rsp::pool::try_create(cfg);
    assert_int_equal(r.status(), RSP_EINVAL);
    assert_non_null(std::strstr(r.error().message, "owner_cpu"));
}

void info_and_counters_as_results(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    auto info = pool.try_info();
    assert_true(info.ok());
    assert_int_equal(info.value().max_slots, 9);
    assert_true(pool.try_counters().ok());
    assert_int_equal(pool.try_counters().value().usable_slots, 8);
    pool.close();
    assert_int_equal(pool.try_info().status(), RSP_EINVAL);
    assert_int_equal(pool.try_counters().status(), RSP_EINVAL);
}

// shard_shapes: each block's local shape on this rank.
void shard_shapes(void **)
{
    rsp::pool_config cfg = small_config();
    cfg.rank(1, 2);
    auto shapes = cfg.shard_shapes();
    assert_int_equal(shapes.size(), 2);
    assert_int_equal(shapes[0][0], 4); // conv: not sharded
    assert_int_equal(shapes[0][1], 8);
    assert_int_equal(shapes[1][0], 1); // ssm: heads split over 2 ranks
    assert_int_equal(shapes[1][1], 4);
    assert_int_equal(shapes[1][2], 4);
    cfg.rank(2, 2); // rank out of range
    assert_int_equal(cfg.try_shard_shapes().status(), RSP_EINVAL);
}

// reset() starts a new declaration in the same object: nothing of the old
// one (rows, forks, flags, lease) reaches the pool, and the capacity stays.
void step_reset_reuses_the_object(void **)
{
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1}).row(rsp::rid{2}).pre_fork(rsp::label::main, rsp::label{1});
    s.post_fork(rsp::label::main, rsp::label{1}).capture().preplan().lease(8, 1, 0);
    const rsp_row *before = s.rows().data();
    s.reset(rsp::step_id{2}).row(rsp::rid{3});
    const rsp_step c = s.get();
    assert_int_equal(c.step_id, 2);
    assert_int_equal(c.num_rows, 1);
    assert_int_equal(c.rows[0].rid, 3);
    assert_int_equal(c.num_pre_forks, 0);
    assert_int_equal(c.num_post_forks, 0);
    assert_false(c.capture);
    assert_false(c.preplan);
    assert_false(c.has_lease);
    assert_ptr_equal(c.rows, before); /* the rows' storage was kept */
}

// Ordered posting: numbered messages (msg::seq) are handled in number
// order, a missing number in an ordered pool is refused at the post, and
// two pools that handled the same sequence give equal plan digests.
void ordered_posting_and_digests(void **)
{
    rsp::pool_config cfg = small_config();
    cfg.ordered(true, 50ms);
    assert_true(cfg.get().ordered);
    assert_int_equal(cfg.get().reorder_timeout_ns, 50000000u);
    rsp::pool a = rsp::pool::create(cfg);
    rsp::pool b = rsp::pool::create(cfg);
    auto refused = a.try_post(rsp::msg::ingest(rsp::rid{1})); // no number
    assert_int_equal(refused.status(), RSP_EINVAL);
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{1}).row(rsp::rid{2});
    const rsp_msg seqd[] = {rsp::msg::seq(rsp::msg::admit(s), 1),
                            rsp::msg::seq(rsp::msg::plan(s), 2)};
    // b gets 2 before 1: it waits for 1, and both pools agree.
    rsp::ticket b2 = b.post(seqd[1]);
    rsp::ticket b1 = b.post(seqd[0]);
    assert_true(a.post(seqd[0]).wait().admit.ok);
    const std::uint64_t da = a.post(seqd[1]).wait().plan_digest;
    assert_true(b1.wait().admit.ok);
    assert_true(b2.wait().plan_digest == da);
    rsp::reader me;
    rsp::read_section rs;
    rsp::plan_view va = rs.live(a), vb = rs.live(b);
    assert_true(va.digest() == da);
    assert_true(vb.digest() == da);
    assert_true(rsp::plan_view(nullptr).digest() == 0);
}

// Per-rid forks (fork groups), skip_post_forks at commit, release of one
// label: the builder sets the C fields, the pool follows them.
void per_rid_forks_skip_and_release(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    const rsp::label draft = pool.intern("draft");
    const rsp::rid plain{1}, drafter{2};
    rsp::step s(rsp::step_id{1});
    s.row(plain)
        .row(drafter, rsp::label::main, 1, 1)
        .row(drafter, draft, 3, 1)
        .pre_fork(rsp::label::main, draft, 1)
        .post_fork(draft, rsp::label::main, 1);
    assert_int_equal(s.rows()[1].fork_group, 1);
    assert_int_equal(s.pre_forks()[0].group, 1);
    assert_int_equal(s.post_forks()[0].group, 1);
    assert_true(pool.admit(s).ok);
    assert_int_equal(pool.try_holding(plain, draft).status(), RSP_ENOREQ); // no draft slot
    assert_true(pool.holding(drafter, draft).index > 0);
    pool.plan(s);
    s.skip_post_forks(drafter);
    assert_true(s.rows()[1].skip_post_forks && s.rows()[2].skip_post_forks);
    assert_false(s.rows()[0].skip_post_forks);
    s.skip_post_forks(drafter, false);
    assert_false(s.rows()[2].skip_post_forks);
    s.skip_post_forks(drafter);
    pool.commit(s, rsp::forward_complete());
    rsp_stats st = pool.counters();
    assert_int_equal(st.forks, 1); // the pre-fork only: the post-fork was skipped

    pool.release(drafter, draft);
    assert_int_equal(pool.try_holding(drafter, draft).status(), RSP_ENOREQ);
    assert_true(pool.holding(drafter).index > 0); // the request and its main stay
    assert_true(pool.try_release(rsp::rid{99}, draft).ok());
    auto bad = pool.try_release(drafter, rsp::label{40});
    assert_int_equal(bad.status(), RSP_ENOLABEL);
    assert_int_equal(pool.post(rsp::msg::release(plain, rsp::label::main)).wait().error.status,
                     RSP_OK);
    assert_int_equal(pool.try_holding(plain, rsp::label::main).status(), RSP_ENOREQ);
}

// Verify rows (per-token states) and accepted counts through the builder;
// the plan's spec indices; the accept makes the output slot the holding's.
void verify_rows_and_accept(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::reader reg;
    const rsp::rid a{1}, b{2};
    rsp::step s(rsp::step_id{1});
    s.verify_row(a, rsp::label::main, 3).row(b);
    assert_int_equal(s.rows()[0].per_token_states, 1);
    assert_int_equal(s.rows()[1].per_token_states, 0);
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    int32_t out2 = -1, col0 = -1, plain1 = -1;
    const int32_t held = pool.holding(a).index, pad = pool.info().pad_index;
    {
        rsp::read_section section; // no synchronous call inside it
        rsp::plan_view p = section.plan(pool, s.id());
        rsp::spec_indices x = p.spec(rsp::label::main);
        assert_int_equal(x.width(), 4);
        assert_ptr_equal(x.device(), x.all().data()); // no lease: the host copy
        col0 = x.row(0)[0];
        plain1 = x.row(1)[1];
        out2 = x.row(0)[2];
    }
    assert_int_equal(col0, held);
    assert_int_equal(plain1, pad);                                   // a plain row
    s.accept(a, rsp::label::main, 2).accept(b, rsp::label::main, 1); // b: not a verify row
    assert_int_equal(s.rows()[0].accepted, 2);
    assert_int_equal(s.rows()[1].accepted, 0);
    pool.commit(s, rsp::forward_complete());
    assert_int_equal(pool.holding(a).index, out2);
    assert_true(pool.holding(a).has_state);
    assert_int_equal(pool.counters().held_slots, 2);
}

} // namespace

// per-step plans, a bounded close, forgetting tickets, the
// read section's message, the error callback.
void count_failure(void *ctx, const rsp_failure *f)
{
    if (f->status != RSP_OK)
        ++*static_cast<int *>(ctx); // the owner thread; read after a barrier
}

void per_step_plans_and_bounded_close(void **)
{
    int failures = 0;
    rsp::pool_config cfg = small_config();
    cfg.on_error(count_failure, &failures);
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::step never(rsp::step_id{9});
    never.row(rsp::rid{9});
    pool.post_forget(rsp::msg::commit(never, rsp::forward_complete())); // RSP_EORDER
    pool.barrier();
    assert_int_equal(failures, 1);
    assert_int_equal(pool.stats().posts_failed, 1);
    rsp::reader me;
    rsp::step s1(rsp::step_id{1}), s2(rsp::step_id{2});
    s1.row(rsp::rid{1});
    s2.row(rsp::rid{2}).row(rsp::rid{3});
    assert_true(pool.admit(s1).ok);
    pool.plan(s1);
    assert_true(pool.admit(s2).ok);
    pool.plan(s2);
    pool.plan_wait_step(rsp::step_id{1}, 1s);
    assert_true(pool.try_plan_wait_step(rsp::step_id{2}, rsp::poll).ok());
    {
        rsp::read_section rs;
        assert_true(rs.live(pool).id() == rsp::step_id{2});
        rsp::plan_view p1 = rs.plan(pool, rsp::step_id{1});
        assert_true(p1.id() == rsp::step_id{1});
        assert_int_equal(p1.at(rsp::label::main).num_rows(), 1);
        assert_int_equal(rs.plan(pool, rsp::step_id{2}).at(rsp::label::main).num_rows(), 2);
        assert_true(rs.plan(pool, rsp::step_id{3}).get() == nullptr);
    }
    rsp::host_fence fence = rsp::host_fence::create();
    pool.commit(s1, fence.at(1));
    auto gone = pool.try_plan_wait_step(rsp::step_id{1}, rsp::poll);
    assert_int_equal(gone.status(), RSP_ENOPLAN);
    // Step 1's forward_done is not signalled: the bounded close names it.
    rsp_close_report rep{};
    auto late = pool.try_close_timed(1ms, &rep);
    assert_int_equal(late.status(), RSP_ETIMEDOUT);
    assert_false(rep.closed);
    assert_int_equal(rep.num_steps, 1);
    assert_int_equal(rep.step_ids[0], 1);
    assert_true(pool.get() != nullptr); // still usable
    // A forgotten ticket (destructor or forget()) never blocks.
    rsp_msg m{};
    m.kind = RSP_MSG_BARRIER;
    rsp::ticket t = pool.post(m);
    t.forget();
    assert_false(t.valid());
    pool.commit(s2, rsp::forward_complete());
    fence.signal(1);
    pool.close_timed(rsp::forever, &rep);
    assert_true(rep.closed);
    assert_true(pool.get() == nullptr);
    // An unregistered thread's section throws with rsp_read_explain's message.
    std::string what;
    std::thread([&] {
        try {
            rsp::read_section rs;
        } catch (const rsp::error &e) {
            what = e.what();
        }
    }).join();
    assert_non_null(std::strstr(what.c_str(), "rsp_reader_register"));
}

// One trip a step and vector messages: step_next, *_many, and
// their msg builders; errors as results and as exceptions.
void one_trip_steps_and_vector_messages(void **)
{
    int failures = 0;
    rsp::pool_config cfg = small_config();
    cfg.on_error(count_failure, &failures);
    rsp::pool pool = rsp::pool::create(cfg);
    const rsp::rid arrivals[3] = {rsp::rid{1}, rsp::rid{2}, rsp::rid{3}};
    pool.ingest_many(rsp::span<const rsp::rid>(arrivals, 3));
    assert_int_equal(pool.stats().num_requests, 3);
    const rsp::rid twice[2] = {rsp::rid{4}, rsp::rid{4}};
    auto dup = pool.try_ingest_many(rsp::span<const rsp::rid>(twice, 2));
    assert_int_equal(dup.status(), RSP_EINVAL);
    assert_non_null(std::strstr(dup.error().message, "rids[1] (rid 4) repeats rids[0]"));
    assert_int_equal(pool.stats().num_requests, 3);
    bool threw = false;
    try {
        pool.remove_many(rsp::span<const rsp::rid>(twice, 2));
    } catch (const rsp::error &e) {
        threw = e.status() == RSP_EINVAL;
    }
    assert_true(threw);

    rsp::step s1(rsp::step_id{1}), s2(rsp::step_id{2});
    s1.row(rsp::rid{1}).row(rsp::rid{2});
    s2.row(rsp::rid{1}).row(rsp::rid{2});
    rsp_step_outcome o = pool.step_next(s1);
    assert_true(o.planned && !o.committed && o.admit.ok);
    assert_int_equal(o.plan_step_id, 1);
    o = pool.step_next(s2, &s1, rsp::forward_complete());
    assert_true(o.planned && o.committed);
    {
        rsp::reader me;
        rsp::read_section rs;
        rsp::plan_view p2 = rs.plan(pool, rsp::step_id{2});
        assert_true(p2.id() == rsp::step_id{2});
        assert_true(p2.at(rsp::label::main).has_state()[0]);
        assert_true(rs.plan(pool, rsp::step_id{1}).get() == nullptr);
    }
    // Rows wrote and no forward_done: refused before posting.
    rsp::step s3(rsp::step_id{3});
    s3.row(rsp::rid{1});
    auto r = pool.try_step_next(s3, &s2);
    assert_int_equal(r.status(), RSP_EINVAL);
    // A commit of a step not in flight stops the message; *out says so.
    rsp::step s9(rsp::step_id{9});
    s9.row(rsp::rid{9});
    rsp::step s10(rsp::step_id{10});
    s10.row(rsp::rid{10});
    rsp_step_outcome out{};
    r = pool.try_step_next(s10, &s9, rsp::forward_complete(), &out);
    assert_int_equal(r.status(), RSP_EORDER);
    assert_false(out.committed || out.planned);
    // Pipelined: the message, fire-and-forget, then the per-step plan.
    rsp_step keep{}; // the commit's declaration, for the post
    pool.post_forget(rsp::msg::step_next(s3, &s2, rsp::forward_complete(), keep));
    pool.plan_wait_step(rsp::step_id{3}, 1s);
    pool.post_forget(rsp::msg::step_next(s10, &s9, rsp::forward_complete(), keep)); // RSP_EORDER
    pool.post_forget(rsp::msg::step_next(s10)); // no commit: admitted and planned
    pool.barrier();
    assert_int_equal(failures, 1);
    pool.plan_wait_step(rsp::step_id{10}, 1s);
    pool.commit(s3, rsp::forward_complete());
    pool.commit(s10, rsp::forward_complete());
    const rsp::rid gone[2] = {rsp::rid{1}, rsp::rid{2}};
    pool.post_forget(rsp::msg::reset_many(rsp::span<const rsp::rid>(gone, 2), true));
    pool.post_forget(rsp::msg::remove_many(rsp::span<const rsp::rid>(gone, 2)));
    pool.post_forget(rsp::msg::ingest_many(rsp::span<const rsp::rid>(arrivals, 3)));
    pool.reset_many(rsp::span<const rsp::rid>(arrivals, 3), false);
    rsp_stats st = pool.stats();
    assert_int_equal(st.held_slots, 1); // rid 10's
    assert_int_equal(st.num_requests, 4);
    pool.remove_many(rsp::span<const rsp::rid>(arrivals, 3));
    assert_int_equal(pool.stats().num_requests, 1);
    assert_int_equal(failures, 1);
}

// The value policy through the binding: the lowest value is evicted.
static void checkpoint_values_rank_evictions(void **)
{
    rsp::pool_config cfg = small_config();
    cfg.checkpoints(2).checkpoint_policy(RSP_CHECKPOINT_VALUE, 1e9);
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1});
    pool.admit(s1);
    pool.plan(s1);
    pool.commit(s1, rsp::forward_complete());
    pool.checkpoint(1, rsp::rid{1});
    pool.checkpoint_value(1, 50);
    pool.checkpoint(2, rsp::rid{1});
    pool.checkpoint_value(2, 10);
    pool.checkpoint(3, rsp::rid{1}); // evicts 2, the lower value, though newer
    assert_int_equal(pool.try_checkpoint_query(2).status(), RSP_ENOKEY);
    assert_int_equal(pool.checkpoint_query(1).key, 1);
    assert_int_equal(pool.try_checkpoint_value(9, 1).status(), RSP_ENOKEY);
    assert_int_equal(pool.stats().checkpoints_evicted_device, 1);
}

// Checkpoints through the binding: a take declared in a step, a restore,
// the wrappers and messages, a swap, the reader's lookup.
static int evicted = 0;
static void count_evictions(void *, const rsp_checkpoint_event *)
{
    evicted++;
}

static void checkpoints_and_swaps(void **)
{
    rsp::pool_config cfg = small_config();
    cfg.checkpoints(1, 2, true).on_checkpoint_evict(count_evictions, nullptr);
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1}).checkpoint(rsp::rid{1}, rsp::label::main, 40);
    assert_int_equal(s1.get().num_checkpoints, 1);
    pool.admit(s1);
    pool.plan(s1);
    pool.commit(s1, rsp::forward_complete());
    rsp_checkpoint_info info = pool.checkpoint_query(40);
    assert_int_equal(info.tier, RSP_TIER_DEVICE);
    assert_int_equal(pool.stats().checkpoints_taken, 1);
    {
        rsp::reader me;
        rsp::read_section rs;
        assert_true(rs.has_checkpoint(pool, 40));
        assert_false(rs.has_checkpoint(pool, 41));
        assert_int_equal(rs.try_checkpoint(pool, 40).value().slot, info.slot);
        assert_int_equal(rs.try_checkpoint(pool, 41).status(), RSP_ENOKEY);
    }
    // A second take demotes the first (checkpoint_demote).
    pool.checkpoint(41, rsp::rid{1});
    assert_int_equal(evicted, 1);
    assert_int_equal(pool.checkpoint_query(40).tier, RSP_TIER_HOST);
    pool.checkpoint_pin(41);
    assert_int_equal(pool.try_checkpoint_drop(41).status(), RSP_EPINNED);
    pool.checkpoint_unpin(41);
    assert_int_equal(pool.try_checkpoint_unpin(41).status(), RSP_EINVAL);
    try {
        pool.checkpoint_query(99);
        fail();
    } catch (const rsp::error &e) {
        assert_int_equal(e.status(), RSP_ENOKEY);
    }
    // A restore in the next step.
    rsp::step s2(rsp::step_id{2});
    s2.row(rsp::rid{2}).restore(rsp::rid{2}, rsp::label::main, 40);
    assert_int_equal(s2.get().num_restores, 1);
    pool.admit(s2);
    pool.plan(s2);
    assert_true(pool.holding(rsp::rid{2}).has_state);
    assert_int_equal(pool.checkpoint_query(40).pins, 1);
    pool.commit(s2, rsp::forward_complete());
    assert_int_equal(pool.stats().checkpoints_restored, 1);
    s2.reset(rsp::step_id{3});
    assert_int_equal(s2.get().num_restores, 0);
    // Messages, then a swap out and in.
    pool.post(rsp::msg::checkpoint(42, rsp::rid{2})).wait();
    rsp_reply r = pool.post(rsp::msg::checkpoint_query(42)).wait();
    assert_int_equal(r.checkpoint.key, 42);
    pool.post(rsp::msg::checkpoint_pin(42, true)).wait();
    pool.post(rsp::msg::checkpoint_pin(42, false)).wait();
    pool.post(rsp::msg::checkpoint_drop(42)).wait();
    assert_int_equal(pool.try_checkpoint_query(42).status(), RSP_ENOKEY);
    pool.swap_out(rsp::rid{1});
    assert_int_equal(pool.try_holding(rsp::rid{1}, rsp::label::main).status(), RSP_ENOREQ);
    r = pool.post(rsp::msg::swap_in(rsp::rid{1})).wait();
    assert_true(r.admit.ok);
    assert_true(pool.holding(rsp::rid{1}).has_state);
    pool.post(rsp::msg::swap_out(rsp::rid{1})).wait();
    assert_true(pool.swap_in(rsp::rid{1}).ok);
    assert_int_equal(pool.stats().swaps_in, 2);
}

// Whether `flag` became true within `limit` (polled every millisecond):
// a test of a call that once hung waits for it this long, then fails
// instead of hanging with it.
static bool became_true(const std::atomic<bool> &flag, std::chrono::milliseconds limit)
{
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!flag.load(std::memory_order_acquire)) {
        if (std::chrono::steady_clock::now() >= until)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// A thread that holds its own plan_ref and closes with a timeout gets the
// timeout, with the reference named, and the pool stays usable; once the
// reference goes the close goes through.
static void close_timed_is_bounded_by_own_plan_ref(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1});
    pool.admit(s1);
    pool.plan(s1);
    pool.commit(s1, rsp::forward_complete());
    std::atomic<bool> done{false};
    rsp_status st = RSP_OK;
    std::string what;
    rsp_close_report rep{};
    bool still_open = false;
    std::thread closer([&] {
        rsp::reader me;
        rsp::plan_ref ref;
        {
            rsp::read_section rs;
            ref = rsp::plan_ref(rs.live(pool));
        }
        auto r = pool.try_close_timed(500ms, &rep);
        st = r.status();
        what = r.error().message;
        still_open = pool.get() != nullptr;
        done.store(true, std::memory_order_release);
    });
    if (!became_true(done, 30s)) {
        closer.detach(); // hung in the close: leave it, fail
        fail_msg("try_close_timed(500ms) did not return within 30 s");
    }
    closer.join();
    assert_int_equal(st, RSP_ETIMEDOUT);
    assert_false(rep.closed);
    assert_true(still_open);
    assert_non_null(std::strstr(what.c_str(), "1 plan reference held"));
    pool.barrier(); // usable
    pool.close_timed(30s, &rep);
    assert_true(rep.closed);
    assert_true(pool.get() == nullptr);
}

// Threads of this process (/proc/self/status): a pool runs three (owner,
// device worker, reclaimer), and its close joins them.
static int threads_now()
{
    std::FILE *f = std::fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    int n = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "Threads: %d", &n) == 1)
            break;
    std::fclose(f);
    return n;
}

// threads_now() once it has come down to want, or its value after 10 s: a
// thread pthread_join returned for can still be counted for a moment (the
// kernel clears the tid before the task is gone; under qemu-user longer).
static int threads_settled(int want)
{
    int n = threads_now();
    for (int i = 0; i < 1000 && n != want; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        n = threads_now();
    }
    return n;
}

// The pool's threads are gone again: the count is back to what it was.
// Under qemu-user (RSP_TEST_EMULATED, set by the cross build) the count
// includes the emulator's own threads, which it starts when it likes: the
// check is skipped there (the deferred-close counts above still run).
static bool threads_back(int before)
{
    if (std::getenv("RSP_TEST_EMULATED"))
        return true;
    return threads_settled(before) == before;
}

// ~pool inside a read section: the C close refuses there (it would wait
// for that very section), so the binding closes the pool when the thread
// leaves its outermost section, instead of leaking it with its threads.
static void pool_destroyed_in_a_section_closes_when_it_ends(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::reader me;
    const int before = threads_now();
    assert_true(before > 0);
    rsp_pool *raw = nullptr;
    {
        rsp::read_section rs;
        {
            rsp::pool pool = rsp::pool::create(cfg);
            raw = pool.get();
            assert_true(threads_now() > before);
        }
        assert_int_equal(rsp::deferred_closes(), 1);
        rsp_stats st{}; // still running: its counters answer
        assert_int_equal(rsp_stats_peek(raw, &st, nullptr), RSP_OK);
        assert_true(threads_now() > before);
        {
            rsp::read_section inner; // a nested section's end closes nothing
        }
        assert_int_equal(rsp::deferred_closes(), 1);
        assert_int_equal(rsp::close_deferred(), 1); // refused: still inside
        // Move assignment closes the pool it replaces the same way.
        rsp::pool a = rsp::pool::create(cfg);
        a = rsp::pool::create(cfg);
        assert_int_equal(rsp::deferred_closes(), 2);
        a = rsp::pool();
        assert_int_equal(rsp::deferred_closes(), 3);
    } // the outermost section ends
    assert_int_equal(rsp::deferred_closes(), 0);
    assert_true(threads_back(before));

    // An online QSBR reader counts as inside a section: closed once offline.
    std::atomic<int> left{-1}, at_offline{-1}, after{-1};
    std::thread([&] {
        rsp::reader q(rsp::qsbr);
        {
            rsp::pool pool = rsp::pool::create(cfg);
        }
        left = static_cast<int>(rsp::deferred_closes());
        q.offline();
        at_offline = static_cast<int>(rsp::deferred_closes());
        q.online();
        {
            rsp::pool pool = rsp::pool::create(cfg);
        }
        after = static_cast<int>(rsp::deferred_closes()); // closed by ~reader
    }).join();
    assert_int_equal(left, 1);
    assert_int_equal(at_offline, 0);
    assert_int_equal(after, 1);
    assert_true(threads_back(before));

    // A section ended with the C call: closed at thread exit at the latest.
    std::atomic<int> pending{-1};
    std::thread([&] {
        if (rsp_reader_register(nullptr) != RSP_OK || rsp_read_begin() != RSP_OK)
            return;
        {
            rsp::pool pool = rsp::pool::create(cfg);
        }
        (void)rsp_read_end();
        pending = static_cast<int>(rsp::deferred_closes());
        // No rsp::reader: the thread's exit closes the pool, then
        // unregisters it (rsp.h: a key destructor).
    }).join();
    assert_int_equal(pending, 1);
    assert_true(threads_back(before));
}

// Callbacks that throw, as an engine's may: the binding catches the
// exception at the C boundary (it would otherwise unwind into the owner's C
// frames and call std::terminate), counts it, keeps the first, and the pool
// goes on.
static int throwing_calls = 0;
static void throw_on_error(void *, const rsp_failure *)
{
    throwing_calls++;
    throw std::runtime_error("on_error: the engine's bookkeeping failed");
}
static void throw_on_evict(void *, const rsp_checkpoint_event *)
{
    throwing_calls++;
    throw 42; // not a std::exception
}

static void callback_exceptions_are_caught_and_kept(void **)
{
    throwing_calls = 0;
    rsp::pool_config cfg = small_config();
    cfg.on_error(throw_on_error, nullptr)
        .checkpoints(1)
        .on_checkpoint_evict(throw_on_evict, nullptr);
    rsp::pool pool = rsp::pool::create(cfg);
    assert_int_equal(pool.callback_exceptions(), 0);
    assert_true(pool.callback_exception() == nullptr);
    rsp::step never(rsp::step_id{9});
    never.row(rsp::rid{9});
    pool.post_forget(rsp::msg::commit(never, rsp::forward_complete())); // RSP_EORDER
    pool.post_forget(rsp::msg::commit(never, rsp::forward_complete()));
    pool.barrier();
    assert_int_equal(throwing_calls, 2);
    assert_int_equal(pool.callback_exceptions(), 2);
    assert_int_equal(pool.stats().posts_failed, 2); // the failures stand
    std::exception_ptr first = pool.callback_exception();
    assert_true(first != nullptr);
    try {
        std::rethrow_exception(first);
    } catch (const std::runtime_error &e) {
        assert_non_null(std::strstr(e.what(), "bookkeeping failed"));
    }
    // The pool goes on: a step, and an eviction whose callback throws a
    // non-std exception (counted, the first one kept).
    rsp::step s1(rsp::step_id{1});
    s1.row(rsp::rid{1});
    assert_true(pool.admit(s1).ok);
    pool.plan(s1);
    pool.commit(s1, rsp::forward_complete());
    pool.checkpoint(1, rsp::rid{1});
    pool.checkpoint(2, rsp::rid{1}); // the tier holds one: evicts key 1
    assert_int_equal(throwing_calls, 3);
    assert_int_equal(pool.callback_exceptions(), 3);
    assert_int_equal(pool.stats().checkpoints_evicted, 1);
    assert_true(pool.callback_exception() == first);
    assert_int_equal(pool.checkpoint_query(2).key, 2);
    // Moved, the pool keeps its callbacks and their count.
    rsp::pool moved = std::move(pool);
    assert_int_equal(moved.callback_exceptions(), 3);
    assert_int_equal(pool.callback_exceptions(), 0);
    moved.close();
}

// Overlap scheduling (docs/semantics.md 9.1) and the commit check (9.2), as an
// engine's loop meets them: step 2 planned while step 1 (the prefill) is in
// flight reads has_state true; a commit that names other rows than its
// admit is RSP_EINVAL with nothing changed; rollback is newest first.
static void overlap_steps_and_commit_check(void **)
{
    rsp::pool_config cfg = small_config();
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::reader reader;
    rsp::step prefill(rsp::step_id{1}), decode(rsp::step_id{2});
    prefill.row(rsp::rid{1}, rsp::label::main, 8);
    decode.row(rsp::rid{1}, rsp::label::main, 1);
    assert_true(pool.try_admit(prefill).ok());
    pool.plan(prefill);
    assert_true(pool.try_admit(decode).ok());
    pool.plan(decode);
    {
        rsp::read_section rs;
        rsp::plan_view v = rs.plan(pool, rsp::step_id{2});
        assert_true(v.at(rsp::label::main).has_state()[0]);
    }
    // Newest first: step 1 wrote the slot step 2 reads.
    auto rb = pool.try_rollback(rsp::step_id{1});
    assert_int_equal(rb.status(), RSP_EORDER);
    assert_non_null(std::strstr(rb.error().message, "newest first"));
    // A commit of another request than the admitted one.
    rsp::step other(rsp::step_id{1});
    other.row(rsp::rid{2}, rsp::label::main, 8);
    auto bad = pool.try_commit(other, rsp::forward_complete());
    assert_int_equal(bad.status(), RSP_EINVAL);
    assert_non_null(std::strstr(bad.error().message, "rows[0].rid differs from its admit"));
    assert_int_equal(pool.try_holding(rsp::rid{2}, rsp::label::main).status(), RSP_ENOREQ);
    pool.commit(prefill, rsp::forward_complete());
    pool.commit(decode, rsp::forward_complete());
    assert_true(pool.holding(rsp::rid{1}, rsp::label::main).has_state);
    pool.close();
}

// rsp_version_check, wrapped at link time (tests/cpp/CMakeLists.txt): with
// fake_newer_minor set, the binding's check asks as a program built against
// the next minor would, as it does when it loaded an older librsp.
static bool fake_newer_minor = false;
extern "C" rsp_status __real_rsp_version_check(std::uint32_t, std::uint32_t, rsp_error *);
extern "C" rsp_status __wrap_rsp_version_check(std::uint32_t major, std::uint32_t minor,
                                               rsp_error *err)
{
    return __real_rsp_version_check(major, minor + (fake_newer_minor ? 1 : 0), err);
}

// A library that cannot serve the header's version: pool creation fails
// with the check's message (both versions named), nothing created.
static void version_mismatch_fails_pool_creation(void **)
{
    assert_true(rsp::check_version().ok());
    auto older = rsp::check_version(RSP_VERSION_MAJOR + 1, 0);
    assert_int_equal(older.status(), RSP_EINVAL);
    assert_non_null(std::strstr(older.error().message, rsp_version_string()));
    rsp::pool_config cfg = small_config();
    fake_newer_minor = true;
    auto r = rsp::pool::try_create(cfg);
    bool threw = false;
    try {
        rsp::pool p = rsp::pool::create(cfg);
    } catch (const rsp::error &e) {
        threw = e.status() == RSP_EINVAL && std::strstr(e.what(), "loaded librsp") != nullptr;
    }
    fake_newer_minor = false;
    assert_false(r.ok());
    assert_int_equal(r.status(), RSP_EINVAL);
    char built[32];
    std::snprintf(built, sizeof built, "built against rsp %d.%d ", RSP_VERSION_MAJOR,
                  RSP_VERSION_MINOR + 1);
    assert_non_null(std::strstr(r.error().message, built));
    assert_non_null(std::strstr(r.error().message, rsp_version_string()));
    assert_true(threw);
    // The same config creates a pool once the versions agree.
    rsp::pool ok = rsp::pool::create(cfg);
    ok.close();
}

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_mismatch_fails_pool_creation),
        cmocka_unit_test(timeouts_map_onto_rsp),
        cmocka_unit_test(create_failure_throws_with_status_and_message),
        cmocka_unit_test(one_step_end_to_end),
        cmocka_unit_test(errors_as_results),
        cmocka_unit_test(forks_through_the_builder),
        cmocka_unit_test(tickets),
        cmocka_unit_test(plan_references),
        cmocka_unit_test(live_addressing_and_qsbr_reader),
        cmocka_unit_test(read_section_needs_a_reader),
        cmocka_unit_test(plan_wait_across_threads),
        cmocka_unit_test(messages_and_const_steps),
        cmocka_unit_test(ticket_release),
        cmocka_unit_test(host_fence_wait_event),
        cmocka_unit_test(nothrow_reader_and_section),
        cmocka_unit_test(info_and_counters_as_results),
        cmocka_unit_test(owner_cpu_through_the_builder),
        cmocka_unit_test(shard_shapes),
        cmocka_unit_test(per_rid_forks_skip_and_release),
        cmocka_unit_test(verify_rows_and_accept),
        cmocka_unit_test(step_reset_reuses_the_object),
        cmocka_unit_test(ordered_posting_and_digests),
        cmocka_unit_test(per_step_plans_and_bounded_close),
        cmocka_unit_test(one_trip_steps_and_vector_messages),
        cmocka_unit_test(checkpoints_and_swaps),
        cmocka_unit_test(checkpoint_values_rank_evictions),
        cmocka_unit_test(close_timed_is_bounded_by_own_plan_ref),
        cmocka_unit_test(pool_destroyed_in_a_section_closes_when_it_ends),
        cmocka_unit_test(callback_exceptions_are_caught_and_kept),
        cmocka_unit_test(overlap_steps_and_commit_check),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
