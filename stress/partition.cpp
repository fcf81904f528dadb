// rsp-stress: partition threads (the backend's forward, one model shard each).
// SPDX-License-Identifier: Apache-2.0
//
// For every live step, in order: wait for the plan (pool.plan_wait), take it
// (even partitions keep an rsp::plan_ref and leave the read section at once;
// odd partitions stay inside one read section for the whole forward), wait
// for each label's ready event, then run the toy recurrence on this
// partition's rows (row j belongs to partition j % readers): read the slot,
// check it, write the next state. The device vectors are compared with the
// host copies before and after the forward, so an upload that overwrote a
// vector still in use is caught. The last partition to finish signals the
// forward-done fence.
#include "stress.h"

#include <chrono>
#include <cinttypes>
#include <string>
#include <thread>

namespace stress
{

namespace
{

struct LabelView {
    rsp::label label;
    rsp::addressing ad;
    bool ok;
};

class Partition
{
  public:
    Partition(Context &cx, unsigned index) : cx_(cx), index_(index)
    {
    }
    void run();

  private:
    bool wait_plan(rsp::step_id step_id);
    bool wait_ready(const rsp::addressing &ad);
    rsp::plan_view take_plan(const StepRecord &rec, rsp::read_section &section, rsp::plan_ref &ref);
    void ack(StepRecord &rec);
    void run_forward(const StepRecord &rec, rsp::plan_view plan);
    void forward(const StepRecord &rec, const std::vector<LabelView> &views);
    void compare_vectors(const StepRecord &rec, const std::vector<LabelView> &views,
                         const char *when);
    const LabelView *view_of(const std::vector<LabelView> &views, rsp::label label) const;

    Context &cx_;
    unsigned index_;
};

bool Partition::wait_plan(rsp::step_id step_id)
{
    std::chrono::nanoseconds waited{0};
    for (;;) {
        rsp::result<void> r = cx_.pool.try_plan_wait(step_id, 100ms);
        if (r.ok())
            return true;
        if (r.status() != RSP_ETIMEDOUT) {
            cx_.checks.fail(CHECK_API, "partition %u: plan_wait(%" PRIu64 "): %s", index_,
                            rsp::raw(step_id), r.error().message);
            return false;
        }
        if (cx_.abort.load(std::memory_order_relaxed))
            return false;
        waited += 100ms;
        if (waited >= kHang) {
            cx_.checks.fail(CHECK_HANG,
                            "partition %u: plan of step %" PRIu64 " not published in %llu s",
                            index_, rsp::raw(step_id), (unsigned long long)kHang.count());
            cx_.abort.store(true);
            return false;
        }
    }
}

bool Partition::wait_ready(const rsp::addressing &ad)
{
    const rsp_event &ready = ad.ready();
    // Both ways a host backend may wait; they must agree.
    rsp::result<void> r = ready.handle && (rsp::raw(ad.step()) & 1)
                              ? rsp::host_fence::wait_event(ready, kHang)
                              : cx_.pool.try_event_wait(ready, kHang);
    if (r.status() == RSP_ETIMEDOUT) {
        cx_.checks.fail(CHECK_HANG,
                        "partition %u: ready event {%p, %" PRIu64 "} of step %" PRIu64
                        " label %u never completed",
                        index_, ready.handle, ready.value, rsp::raw(ad.step()), ad.raw.label);
        cx_.abort.store(true);
        return false;
    }
    return cx_.checks.expect(CHECK_API, r.ok(), "partition %u: waiting for the ready event: %s %s",
                             index_, rsp_strerror(r.status()), r.ok() ? "" : r.error().message);
}

const LabelView *Partition::view_of(const std::vector<LabelView> &views, rsp::label label) const
{
    for (const LabelView &v : views)
        if (v.label == label)
            return v.ok ? &v : nullptr;
    return nullptr;
}

void Partition::compare_vectors(const StepRecord &rec, const std::vector<LabelView> &views,
                                const char *when)
{
    const unsigned readers = cx_.opt.readers;
    for (size_t j = index_; j < rec.rows.size(); j += readers) {
        const RowRecord &row = rec.rows[j];
        const LabelView *v = view_of(views, row.label);
        if (!v)
            continue;
        rsp::span<const int32_t> dev_slots = v->ad.device_slots(), slots = v->ad.slots();
        rsp::span<const bool> dev_has = v->ad.device_has_state(), has = v->ad.has_state();
        uint32_t k = row.label_pos;
        cx_.checks.expect(CHECK_VECTORS, dev_slots[k] == slots[k] && dev_has[k] == has[k],
                          "step %" PRIu64
                          " label %u row %u %s the forward: device (%d, %d) != host (%d, %d)",
                          rsp::raw(rec.step_id), rsp::raw(row.label), k, when, dev_slots[k],
                          (int)dev_has[k], slots[k], (int)has[k]);
    }
    // The padded tail (graph buckets) is read by every row of a replay too.
    if (index_ == 0) {
        for (const LabelView &v : views) {
            if (!v.ok)
                continue;
            rsp::span<const int32_t> dev_slots = v.ad.device_slots();
            rsp::span<const bool> dev_has = v.ad.device_has_state();
            bool ok = true;
            for (uint32_t k = v.ad.num_rows(); k < v.ad.length(); k++)
                ok = ok && dev_slots[k] == cx_.info.pad_index && !dev_has[k];
            cx_.checks.expect(CHECK_VECTORS, ok,
                              "step %" PRIu64
                              " label %u: device tail past %u rows is not pad/false %s the forward",
                              rsp::raw(rec.step_id), rsp::raw(v.label), v.ad.num_rows(), when);
        }
    }
}

void Partition::forward(const StepRecord &rec, const std::vector<LabelView> &views)
{
    const unsigned readers = cx_.opt.readers;
    const int32_t pad = cx_.info.pad_index;
    const uint64_t step = rsp::raw(rec.step_id);
    std::string why;
    bool any_pad = false;
    for (size_t j = 0; j < rec.rows.size(); j++) {
        const RowRecord &row = rec.rows[j];
        const LabelView *v = view_of(views, row.label);
        if (!v)
            continue;
        int32_t slot = v->ad.device_slots()[row.label_pos];
        if (slot == pad) {
            any_pad = true;
            continue;
        }
        if (j % readers != index_)
            continue;
        if (slot < 0 || slot >= (int32_t)cx_.info.max_slots)
            continue; // the step thread reports a wild slot; never touch memory for it
        bool has = v->ad.device_has_state()[row.label_pos];
        uint64_t prev = 0;
        if (!has) {
            bool zero = cx_.storage.is_zero(slot, &why); // before why.c_str() is taken
            cx_.checks.expect(CHECK_ZEROS, zero,
                              "step %" PRIu64 " rid %" PRIu64
                              " label %u slot %d: has_state false but %s",
                              step, rsp::raw(row.rid), rsp::raw(row.label), slot, why.c_str());
        } else {
            prev = cx_.storage.read_tag(slot);
            bool self = cx_.storage.matches(slot, prev, &why);
            if (row.kind == ROW_HOLD) {
                cx_.checks.expect(CHECK_CONTENT, self && prev == row.v,
                                  "step %" PRIu64 " rid %" PRIu64
                                  " label %u slot %d: read state %016" PRIx64
                                  " expected %016" PRIx64 "%s%s",
                                  step, rsp::raw(row.rid), rsp::raw(row.label), slot, prev, row.v,
                                  self ? "" : "; torn: ", self ? "" : why.c_str());
            } else {
                cx_.checks.expect(
                    CHECK_CONTENT, self && prev != 0,
                    "step %" PRIu64 " rid %" PRIu64 " (removed) label %u slot %d: state %016" PRIx64
                    " is not a whole written state: %s",
                    step, rsp::raw(row.rid), rsp::raw(row.label), slot, prev, why.c_str());
            }
        }
        cx_.storage.write(slot, next_state(row.rid, row.label, rec.step_id, prev));
        cx_.rows_checked.fetch_add(1, std::memory_order_relaxed);
    }
    // A replay's dummy rows write the sink; one partition per step does it, so
    // partitions never race on it. If the sink were ever handed out as a real
    // slot, this garbage would show up as a content failure.
    if (any_pad && cx_.info.sink && step % readers == index_)
        cx_.storage.write(RSP_SINK_SLOT, mix64(step) | 1);
}

// The live plan of rec's step, read through `section`: odd partitions keep
// it open for the whole forward; even ones keep `ref` and end it at once.
rsp::plan_view Partition::take_plan(const StepRecord &rec, rsp::read_section &section,
                                    rsp::plan_ref &ref)
{
    if (!cx_.checks.expect(CHECK_API, section.ok(), "read section: %s",
                           rsp::read_section::why(section.status())))
        return rsp::plan_view(nullptr);
    rsp::plan_view plan = section.live(cx_.pool);
    bool right = plan && plan.id() == rec.step_id && !plan.staged();
    cx_.checks.expect(CHECK_API, right,
                      "partition %u: live plan is step %" PRIu64 " (staged %d), expected %" PRIu64,
                      index_, plan ? rsp::raw(plan.id()) : 0, plan ? (int)plan.staged() : -1,
                      rsp::raw(rec.step_id));
    if (!right)
        return rsp::plan_view(nullptr);
    if (index_ % 2 == 1)
        return plan;
    ref = rsp::plan_ref(plan);
    section.end();
    return ref.view();
}

// Tell the step thread the plan is in hand: it may publish the next one.
void Partition::ack(StepRecord &rec)
{
    {
        std::lock_guard<std::mutex> g(rec.mu);
        rec.acks.fetch_add(1);
    }
    rec.cv.notify_all();
}

// Each label's addressing and ready event, then the forward between two
// comparisons of the device vectors with the host copies.
void Partition::run_forward(const StepRecord &rec, rsp::plan_view plan)
{
    std::vector<LabelView> views;
    for (rsp::label label : rec.labels) {
        LabelView v{};
        v.label = label;
        rsp::result<rsp::addressing> ad = plan.try_addressing(label);
        v.ok = cx_.checks.expect(CHECK_API, ad.ok(), "partition %u: addressing of label %u: %s",
                                 index_, rsp::raw(label), ad.error().message);
        if (v.ok) {
            v.ad = ad.value();
            v.ok = wait_ready(v.ad);
        }
        views.push_back(v);
    }
    compare_vectors(rec, views, "before");
    forward(rec, views);
    compare_vectors(rec, views, "after");
    cx_.forwards.fetch_add(1, std::memory_order_relaxed);
}

void Partition::run()
{
    rsp::reader reader(std::nothrow);
    if (!cx_.checks.expect(CHECK_API, reader.ok(), "reader registration: %s",
                           reader.error().message)) {
        cx_.abort.store(true);
        return;
    }
    std::chrono::nanoseconds idle{0};
    while (!cx_.abort.load(std::memory_order_relaxed)) {
        std::shared_ptr<StepRecord> rec = cx_.queues[index_]->pop(100ms);
        if (!rec) {
            idle += 100ms;
            if (idle >= kHang) {
                cx_.checks.fail(CHECK_HANG, "partition %u: no step for %llu s", index_,
                                (unsigned long long)kHang.count());
                cx_.abort.store(true);
            }
            continue;
        }
        idle = idle.zero();
        if (rec->end)
            break;

        rsp::plan_ref ref;
        if (!wait_plan(rec->step_id)) {
            ack(*rec);
        } else {
            rsp::read_section section(std::nothrow);
            rsp::plan_view plan = take_plan(*rec, section, ref);
            ack(*rec);
            if (plan)
                run_forward(*rec, plan);
        } // the section ends here (if take_plan left it open)
        ref = rsp::plan_ref();
        // acq_rel: the last partition sees every other partition's slot writes
        // before it signals the fence the pool's device work waits on.
        if (rec->done.fetch_add(1, std::memory_order_acq_rel) + 1 == cx_.opt.readers)
            cx_.fence.signal(rsp::raw(rec->step_id));
    }
}

} // namespace

void partition_main(Context &cx, unsigned index)
{
    Partition p(cx, index);
    p.run();
}

} // namespace stress
