// rsp-stress: partition threads (the backend's forward, one model shard each).
// SPDX-License-Identifier: Apache-2.0
//
// For every live step, in order: wait for the plan (rsp_plan_wait), take it
// (even partitions keep a reference and leave the read section at once; odd
// partitions stay inside one read section for the whole forward), wait for
// each label's ready event, then run the toy recurrence on this partition's
// rows (row j belongs to partition j % readers): read the slot, check it,
// write the next state. The device vectors are compared with the host copies
// before and after the forward, so an upload that overwrote a vector still in
// use is caught. The last partition to finish signals the forward-done fence.
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
    rsp_label_id label;
    rsp_addressing ad;
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
    bool wait_plan(uint64_t step_id);
    bool wait_ready(const rsp_addressing &ad);
    void forward(const StepRecord &rec, const std::vector<LabelView> &views);
    void compare_vectors(const StepRecord &rec, const std::vector<LabelView> &views,
                         const char *when);
    const LabelView *view_of(const std::vector<LabelView> &views, rsp_label_id label) const;

    Context &cx_;
    unsigned index_;
};

bool Partition::wait_plan(uint64_t step_id)
{
    uint64_t waited = 0;
    for (;;) {
        rsp_error err{};
        rsp_status st = rsp_plan_wait(cx_.pool, step_id, 100 * kMs, &err);
        if (st == RSP_OK)
            return true;
        if (st != RSP_ETIMEDOUT) {
            cx_.checks.fail(CHECK_API, "partition %u: rsp_plan_wait(%" PRIu64 "): %s", index_,
                            step_id, err.message);
            return false;
        }
        if (cx_.abort.load(std::memory_order_relaxed))
            return false;
        waited += 100 * kMs;
        if (waited >= kHangNs) {
            cx_.checks.fail(CHECK_HANG,
                            "partition %u: plan of step %" PRIu64 " not published in %llu s",
                            index_, step_id, (unsigned long long)(kHangNs / kSecond));
            cx_.abort.store(true);
            return false;
        }
    }
}

bool Partition::wait_ready(const rsp_addressing &ad)
{
    rsp_status st;
    rsp_error err{};
    // Both ways a host backend may wait; they must agree.
    if (ad.ready.handle && (ad.step_id & 1))
        st = rsp_host_fence_wait(static_cast<const rsp_host_fence *>(ad.ready.handle),
                                 ad.ready.value, kHangNs);
    else
        st = rsp_event_wait(cx_.pool, &ad.ready, kHangNs, &err);
    if (st == RSP_ETIMEDOUT) {
        cx_.checks.fail(CHECK_HANG,
                        "partition %u: ready event {%p, %" PRIu64 "} of step %" PRIu64
                        " label %u never completed",
                        index_, ad.ready.handle, ad.ready.value, ad.step_id, ad.label);
        cx_.abort.store(true);
        return false;
    }
    return cx_.checks.expect(CHECK_API, st == RSP_OK,
                             "partition %u: waiting for the ready event: %s %s", index_,
                             rsp_strerror(st), err.message);
}

const LabelView *Partition::view_of(const std::vector<LabelView> &views, rsp_label_id label) const
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
        const int32_t *dev_slots = static_cast<const int32_t *>(v->ad.device_slot_indices);
        const bool *dev_has = static_cast<const bool *>(v->ad.device_has_state);
        uint32_t k = row.label_pos;
        cx_.checks.expect(CHECK_VECTORS,
                          dev_slots[k] == v->ad.slot_indices[k] && dev_has[k] == v->ad.has_state[k],
                          "step %" PRIu64
                          " label %u row %u %s the forward: device (%d, %d) != host (%d, %d)",
                          rec.step_id, row.label, k, when, dev_slots[k], (int)dev_has[k],
                          v->ad.slot_indices[k], (int)v->ad.has_state[k]);
    }
    // The padded tail (graph buckets) is read by every row of a replay too.
    if (index_ == 0) {
        for (const LabelView &v : views) {
            if (!v.ok)
                continue;
            const int32_t *dev_slots = static_cast<const int32_t *>(v.ad.device_slot_indices);
            const bool *dev_has = static_cast<const bool *>(v.ad.device_has_state);
            bool ok = true;
            for (uint32_t k = v.ad.num_rows; k < v.ad.length; k++)
                ok = ok && dev_slots[k] == cx_.info.pad_index && !dev_has[k];
            cx_.checks.expect(CHECK_VECTORS, ok,
                              "step %" PRIu64
                              " label %u: device tail past %u rows is not pad/false %s the forward",
                              rec.step_id, v.label, v.ad.num_rows, when);
        }
    }
}

void Partition::forward(const StepRecord &rec, const std::vector<LabelView> &views)
{
    const unsigned readers = cx_.opt.readers;
    const int32_t pad = cx_.info.pad_index;
    std::string why;
    bool any_pad = false;
    for (size_t j = 0; j < rec.rows.size(); j++) {
        const RowRecord &row = rec.rows[j];
        const LabelView *v = view_of(views, row.label);
        if (!v)
            continue;
        int32_t slot = static_cast<const int32_t *>(v->ad.device_slot_indices)[row.label_pos];
        if (slot == pad) {
            any_pad = true;
            continue;
        }
        if (j % readers != index_)
            continue;
        if (slot < 0 || slot >= (int32_t)cx_.info.max_slots)
            continue; // the step thread reports a wild slot; never touch memory for it
        bool has = static_cast<const bool *>(v->ad.device_has_state)[row.label_pos];
        uint64_t prev = 0;
        if (!has) {
            bool zero = cx_.storage.is_zero(slot, &why); // before why.c_str() is taken
            cx_.checks.expect(CHECK_ZEROS, zero,
                              "step %" PRIu64 " rid %" PRIu64
                              " label %u slot %d: has_state false but %s",
                              rec.step_id, row.rid, row.label, slot, why.c_str());
        } else {
            prev = cx_.storage.read_tag(slot);
            bool self = cx_.storage.matches(slot, prev, &why);
            if (row.kind == ROW_HOLD) {
                cx_.checks.expect(CHECK_CONTENT, self && prev == row.v,
                                  "step %" PRIu64 " rid %" PRIu64
                                  " label %u slot %d: read state %016" PRIx64
                                  " expected %016" PRIx64 "%s%s",
                                  rec.step_id, row.rid, row.label, slot, prev, row.v,
                                  self ? "" : "; torn: ", self ? "" : why.c_str());
            } else {
                cx_.checks.expect(CHECK_CONTENT, self && prev != 0,
                                  "step %" PRIu64 " rid %" PRIu64
                                  " (removed) label %u slot %d: state %016" PRIx64
                                  " is not a whole written state: %s",
                                  rec.step_id, row.rid, row.label, slot, prev, why.c_str());
            }
        }
        cx_.storage.write(slot, next_state(row.rid, row.label, rec.step_id, prev));
        cx_.rows_checked.fetch_add(1, std::memory_order_relaxed);
    }
    // A replay's dummy rows write the sink; one partition per step does it, so
    // partitions never race on it. If the sink were ever handed out as a real
    // slot, this garbage would show up as a content failure.
    if (any_pad && cx_.info.sink && rec.step_id % readers == index_)
        cx_.storage.write(RSP_SINK_SLOT, mix64(rec.step_id) | 1);
}

void Partition::run()
{
    rsp_error err{};
    if (!cx_.checks.expect(CHECK_API, rsp_reader_register(&err) == RSP_OK,
                           "rsp_reader_register: %s", err.message)) {
        cx_.abort.store(true);
        return;
    }
    const bool whole_section = index_ % 2 == 1;
    uint64_t idle = 0;
    while (!cx_.abort.load(std::memory_order_relaxed)) {
        std::shared_ptr<StepRecord> rec = cx_.queues[index_]->pop(100 * kMs);
        if (!rec) {
            idle += 100 * kMs;
            if (idle >= kHangNs) {
                cx_.checks.fail(CHECK_HANG, "partition %u: no step for %llu s", index_,
                                (unsigned long long)(kHangNs / kSecond));
                cx_.abort.store(true);
            }
            continue;
        }
        idle = 0;
        if (rec->end)
            break;

        bool have_plan = wait_plan(rec->step_id);
        const rsp_plan *plan = nullptr;
        const rsp_plan *ref = nullptr;
        bool in_section = false;
        if (have_plan) {
            rsp_status st = rsp_read_begin();
            if (cx_.checks.expect(CHECK_API, st == RSP_OK, "rsp_read_begin: %s",
                                  rsp_strerror(st))) {
                in_section = true;
                plan = rsp_plan_live(cx_.pool);
                bool right =
                    plan && rsp_plan_step_id(plan) == rec->step_id && !rsp_plan_is_staged(plan);
                cx_.checks.expect(CHECK_API, right,
                                  "partition %u: live plan is step %" PRIu64
                                  " (staged %d), expected %" PRIu64,
                                  index_, plan ? rsp_plan_step_id(plan) : 0,
                                  plan ? (int)rsp_plan_is_staged(plan) : -1, rec->step_id);
                if (!right)
                    plan = nullptr;
                if (plan && !whole_section) {
                    ref = rsp_plan_ref(plan);
                    plan = ref;
                    rsp_read_end();
                    in_section = false;
                }
            }
        }
        // Tell the step thread the plan is in hand: it may publish the next one.
        {
            std::lock_guard<std::mutex> g(rec->mu);
            rec->acks.fetch_add(1);
        }
        rec->cv.notify_all();

        std::vector<LabelView> views;
        if (plan) {
            for (rsp_label_id label : rec->labels) {
                LabelView v{};
                v.label = label;
                rsp_status st = rsp_plan_addressing(plan, label, &v.ad, &err);
                v.ok = cx_.checks.expect(CHECK_API, st == RSP_OK,
                                         "partition %u: addressing of label %u: %s", index_, label,
                                         err.message);
                if (v.ok)
                    v.ok = wait_ready(v.ad);
                views.push_back(v);
            }
            compare_vectors(*rec, views, "before");
            forward(*rec, views);
            compare_vectors(*rec, views, "after");
            cx_.forwards.fetch_add(1, std::memory_order_relaxed);
        }
        if (in_section)
            rsp_read_end();
        if (ref)
            rsp_plan_unref(ref);
        // acq_rel: the last partition sees every other partition's slot writes
        // before it signals the fence the pool's device work waits on.
        if (rec->done.fetch_add(1, std::memory_order_acq_rel) + 1 == cx_.opt.readers)
            rsp_host_fence_signal(cx_.fence, rec->step_id);
    }
    rsp_reader_unregister();
}

} // namespace

void partition_main(Context &cx, unsigned index)
{
    Partition p(cx, index);
    p.run();
}

} // namespace stress
