// Export and import through rsp.hpp (rsp::regions, rsp::state_export,
// rsp::state_import): a request and a checkpoint carried between two pools
// by memcpy through their regions, every byte compared; RAII closes an
// export and aborts an import left open; refusals come back as statuses.
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <cstddef>
#include <csetjmp>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

extern "C" {
#include <cmocka.h>
}

namespace
{

static_assert(!std::is_copy_constructible_v<rsp::state_export>);
static_assert(!std::is_copy_constructible_v<rsp::state_import>);
static_assert(std::is_nothrow_move_constructible_v<rsp::state_export>);
static_assert(std::is_nothrow_move_constructible_v<rsp::state_import>);

rsp::pool make_pool(std::uint32_t layers = 2)
{
    rsp::pool_config cfg;
    cfg.layers(layers)
        .slots(8)
        .checkpoints(2)
        .block("conv", RSP_DTYPE_F32, {4, 8})
        .block("ssm", RSP_DTYPE_U8, {6});
    return rsp::pool::create(cfg);
}

void run_step(rsp::pool &p, std::uint64_t id, rsp::rid r)
{
    rsp::step s(rsp::step_id{id});
    s.row(r);
    p.step_next(s);
    p.commit(s, rsp::forward_complete());
}

std::uint8_t *at(const std::vector<rsp_region> &regions, const rsp_extent &x)
{
    return static_cast<std::uint8_t *>(regions[x.region].base) + x.offset;
}

// Paint the export's bytes (a forward) and carry them into the import.
void paint_and_carry(const rsp::pool &src, const rsp::state_export &e, const rsp::pool &dst,
                     const rsp::state_import &imp, std::uint8_t seed)
{
    auto sr = rsp::regions(src), dr = rsp::regions(dst);
    auto from = e.extents();
    auto to = imp.extents();
    assert_int_equal(to.size(), from.size());
    for (std::size_t i = 0; i < from.size(); i++) {
        assert_int_equal(to[i].length, from[i].length);
        for (std::uint64_t k = 0; k < from[i].length; k++)
            at(sr, from[i])[k] = static_cast<std::uint8_t>(seed + i * 5 + k);
        std::memcpy(at(dr, to[i]), at(sr, from[i]), from[i].length);
    }
}

// Every byte of src's export equals dst's export of what it imported.
void assert_same_bytes(const rsp::pool &src, const rsp::state_export &a, const rsp::pool &dst,
                       const rsp::state_export &b)
{
    auto sr = rsp::regions(src), dr = rsp::regions(dst);
    auto x = a.extents(), y = b.extents();
    assert_int_equal(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); i++)
        assert_memory_equal(at(sr, x[i]), at(dr, y[i]), x[i].length);
}

void a_request_moves_between_pools(void **)
{
    rsp::pool a = make_pool(), b = make_pool();
    run_step(a, 1, rsp::rid{5});
    auto regions = rsp::regions(a);
    assert_int_equal(regions.size(), 4u); // slots and device tier, 2 blocks each
    rsp::state_export e = rsp::state_export::open(a, rsp::export_request(rsp::rid{5}, 7));
    assert_int_equal(e.header().tag, 7u);
    assert_int_equal(a.try_remove(rsp::rid{5}).status(), RSP_EPINNED);
    rsp::state_import imp = rsp::state_import::begin(b, e.header(), rsp::rid{50});
    paint_and_carry(a, e, b, imp, 3);
    imp.commit();
    assert_false(static_cast<bool>(imp));
    assert_true(b.holding(rsp::rid{50}).has_state);
    {
        rsp::state_export back = rsp::state_export::open(b, rsp::export_request(rsp::rid{50}));
        assert_same_bytes(a, e, b, back);
    } // closed here
    e.close();
    a.remove(rsp::rid{5});
    b.remove(rsp::rid{50});
}

void a_checkpoint_moves_between_pools(void **)
{
    rsp::pool a = make_pool(), b = make_pool();
    run_step(a, 1, rsp::rid{5});
    a.checkpoint(42, rsp::rid{5});
    rsp::state_export e =
        rsp::state_export::open(a, rsp::export_checkpoint(rsp::checkpoint_key{42}));
    rsp::state_import imp = rsp::state_import::begin(b, e.header(), rsp::rid{0});
    assert_int_equal(b.try_checkpoint_query(42).status(), RSP_ENOKEY);
    paint_and_carry(a, e, b, imp, 9);
    imp.commit();
    assert_int_equal(b.checkpoint_query(42).tier, RSP_TIER_DEVICE);
    rsp::state_export back =
        rsp::state_export::open(b, rsp::export_checkpoint(rsp::checkpoint_key{42}));
    assert_same_bytes(a, e, b, back);
}

void raii_closes_and_aborts(void **)
{
    rsp::pool a = make_pool(), b = make_pool();
    run_step(a, 1, rsp::rid{5});
    std::uint32_t free_before = b.stats().free_slots;
    {
        rsp::state_export e = rsp::state_export::open(a, rsp::export_request(rsp::rid{5}));
        rsp::state_import imp = rsp::state_import::begin(b, e.header(), rsp::rid{50});
        rsp::state_import moved = std::move(imp);
        assert_false(static_cast<bool>(imp));
        assert_true(static_cast<bool>(moved));
        assert_int_equal(b.stats().free_slots, free_before - 1);
    } // the import aborted, the export closed
    assert_int_equal(b.stats().free_slots, free_before);
    assert_int_equal(b.try_holding(rsp::rid{50}, rsp::label::main).status(), RSP_ENOREQ);
    a.remove(rsp::rid{5});
}

void refusals_are_statuses(void **)
{
    rsp::pool a = make_pool(), other = make_pool(3);
    auto r = rsp::state_export::try_open(a, rsp::export_request(rsp::rid{9}));
    assert_int_equal(r.status(), RSP_ENOREQ);
    run_step(a, 1, rsp::rid{5});
    rsp::state_export e = rsp::state_export::open(a, rsp::export_request(rsp::rid{5}));
    auto i = rsp::state_import::try_begin(other, e.header(), rsp::rid{5});
    assert_int_equal(i.status(), RSP_EINVAL);
    assert_non_null(std::strstr(i.error().message, "num_layers 3 here, 2"));
    try {
        rsp::state_import::begin(other, e.header(), rsp::rid{5});
        fail_msg("an import of another layout was begun");
    } catch (const rsp::error &x) {
        assert_int_equal(x.status(), RSP_EINVAL);
    }
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_request_moves_between_pools),
        cmocka_unit_test(a_checkpoint_moves_between_pools),
        cmocka_unit_test(raii_closes_and_aborts),
        cmocka_unit_test(refusals_are_statuses),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
