// quickstart.c on the C++17 binding (include/rsp/rsp.hpp): the same pool and
// the same step; errors are rsp::error exceptions. Built and run by ctest
// (example_quickstart_cpp). SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include <cstdio>

int main()
try {
    rsp::pool_config cfg;    // sink on, world_size 1, host device
    cfg.layers(4).slots(17); // 16 usable + the sink: 1.1 MiB in all
    cfg.block("conv", RSP_DTYPE_BF16, {4, 256});
    cfg.block("ssm", RSP_DTYPE_F32, {8, 16, 16}, /*shard_dims=*/{0});
    rsp::pool pool = rsp::pool::create(cfg);
    rsp::host_fence fence = rsp::host_fence::create();
    rsp::reader reader; // this thread reads plans

    const rsp::rid rid{42};
    pool.ingest(rid);
    rsp::step step(rsp::step_id{1});
    step.row(rid, rsp::label::main, 32);
    if (!pool.admit(step).ok) { // a full pool is an outcome: roll back, retry later
        pool.rollback(step.id());
        return 1;
    }
    pool.plan(step);

    // A partition thread: wait for the plan, read it without locks.
    pool.plan_wait(step.id());
    {
        rsp::plan_ref plan; // keeps the plan (and its vectors) past the read section
        {
            rsp::read_section section;
            plan = rsp::plan_ref(section.live(pool));
        }
        rsp::addressing a = plan.view().at(rsp::label::main);
        pool.event_wait(a.ready()); // never inside a section
        std::printf("step 1: rid 42 reads and writes slot %d (has_state %d)\n", a.slots()[0],
                    a.has_state()[0]);
    } // the reference goes: a pool waits for every plan reference when it closes

    // ... the forward runs on a.raw.device_slot_indices, then:
    pool.commit(step, fence.at(1));
    fence.signal(1);

    rsp_holding h = pool.holding(rid);
    std::printf("after commit: slot %d, has_state %d\n", h.index, h.has_state);
    pool.remove(rid); // zeroed and freed
    pool.close();
    return h.has_state ? 0 : 1;
} catch (const rsp::error &e) {
    std::fprintf(stderr, "quickstart: %s (%s)\n", e.what(), rsp_strerror(e.status()));
    return 1;
}
