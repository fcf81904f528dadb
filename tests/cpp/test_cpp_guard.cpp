// Guard mode and the state dump through rsp.hpp: pool_config::guard, a
// finding in on_error's rsp_failure::guard, pool::dump().
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstring>
#include <string>

extern "C" {
#include <cmocka.h>
}

namespace
{

struct seen {
    int count = 0;
    rsp_guard_violation last{};
};

void on_error(void *ctx, const rsp_failure *f)
{
    auto *s = static_cast<seen *>(ctx);
    if (f->guard) {
        s->count++;
        s->last = *f->guard;
    }
}

void a_free_slot_write_is_found_and_the_dump_counts_it(void **)
{
    seen found;
    rsp::pool_config cfg;
    cfg.layers(1).slots(6).block("s", RSP_DTYPE_F32, {4}).guard().on_error(on_error, &found);
    rsp::pool pool = rsp::pool::create(cfg);
    assert_non_null(std::strstr(pool.dump().c_str(), "\"guard\":{\"checks\":0,\"violations\":0}"));
    rsp::step s(rsp::step_id{1});
    s.row(rsp::rid{3}, rsp::label::main, 1);
    assert_true(pool.admit(s).ok);
    pool.plan(s);
    rsp_block_view v = pool.block("s", 0);
    static_cast<float *>(v.data)[5 * v.strides[0]] = 1.0f; // slot 5: past the batch
    pool.commit(s, rsp_event_complete());
    assert_int_equal(found.count, 1);
    assert_int_equal(found.last.slot, 5);
    assert_false(found.last.held);
    const std::string d = pool.dump();
    assert_non_null(std::strstr(d.c_str(), "\"guard\":{\"checks\":1,\"violations\":1}"));
    assert_non_null(std::strstr(d.c_str(), "{\"rid\":3,"));
    assert_int_equal(d.back(), '}');
    static_cast<float *>(v.data)[5 * v.strides[0]] = 0.0f;
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_free_slot_write_is_found_and_the_dump_counts_it),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
