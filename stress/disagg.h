// rsp-stress: the disaggregated mode's parts shared by its two processes
// (disagg.cpp: the decode side, in the rsp-stress process; disagg_prefill.cpp:
// the prefill side, in a process it spawns). Both pools have one layout
// (disagg_config); the socket of each link carries rsp_ucx's own messages
// between the frames below.
// SPDX-License-Identifier: Apache-2.0
#ifndef RSP_STRESS_DISAGG_H
#define RSP_STRESS_DISAGG_H

#include "stress.h"

#include <rsp/rsp_ucx.h>

namespace stress
{

constexpr uint32_t kPrefillSlots = 96; // sink included; the layout ignores max_slots
constexpr uint32_t kDecodeSlots = 24;  // small: imports are refused for room now and then
constexpr uint64_t kXferTimeoutNs = 5'000'000'000ull; // one transfer, UCX and socket
constexpr uint32_t kFrameMagic = 0x72737064u;         // "rspd"
constexpr uint32_t kReportMagic = 0x72737072u;        // "rspr"
constexpr rsp_status kAbortOnPurpose = RSP_EAGAIN;    // the decode side's verdict: export again

// Before each rsp_ucx offer, and once at the end, the prefill side writes a
// frame on the link's socket: FRAME_OFFER before one request
// (rsp_ucx_send), FRAME_BATCH before up to kBatch (rsp_ucx_send_many; the
// odd links move requests so, the even ones one at a time).
enum FrameKind : uint32_t { FRAME_OFFER = 1, FRAME_END = 2, FRAME_BATCH = 3 };
constexpr uint32_t kBatch = 4;
inline bool batch_link(unsigned index)
{
    return index % 2 == 1;
}
struct Frame {
    uint32_t magic;
    uint32_t kind;
};

// The prefill process's totals, written once on the control socket at its
// end. The decode side compares each with its own count.
struct Report {
    uint32_t magic;
    uint32_t links;
    uint64_t moved;    // exports the decode side committed
    uint64_t bytes;    // their extents' bytes
    uint64_t aborted;  // exports answered kAbortOnPurpose (exported again)
    uint64_t refused;  // exports answered RSP_ECAPACITY (exported again)
    uint64_t steps;    // prefill steps committed
    uint64_t requests; // requests created
    uint64_t passed, failed;
};

// The layout both pools share: a tag block (the Storage convention), an odd
// u8 block and an f32 block; 3 layers; slots as given.
void disagg_config(rsp::pool_config &cfg, uint32_t slots);

// A request's state after its k-th prefill step: the chain of next_state
// over its steps 1..k, so the decode side knows every byte from (rid, label,
// k) alone. 0 (the zero state) for k = 0.
uint64_t prefill_value(rsp::rid rid, rsp::label label, uint64_t k);

// Move all of buf through fd by the deadline (poll, then read or write);
// false on end of file, an error or the deadline. Any thread.
bool fd_io(int fd, void *buf, size_t n, bool out, std::chrono::steady_clock::time_point deadline);

// One row of a forward: which slot the plan must address, the state it
// must read (has_state false: zeros) and the state the forward writes.
struct FRow {
    rsp::rid rid;
    rsp::label label;
    int32_t slot; // -1: not known yet (learnt from the plan: a fresh slot)
    bool has_state;
    uint64_t v_read, v_write;
};

// Step id's forward from its own plan on this thread: every row's
// addressing (declaration order per label, after its ready event; fills
// unknown slots), then, if run, disagg_run_rows. false when the plan was
// not readable.
bool disagg_forward(Context &cx, rsp::pool &pool, Storage &st, rsp::step_id id,
                    std::vector<FRow> &rows, const char *side, bool run);
// The forward's memory part: check every row's content, write its next
// state (a forward that runs after its step's commit has no plan to read).
void disagg_run_rows(Context &cx, Storage &st, std::vector<FRow> &rows, rsp::step_id id,
                     const char *side);

// The prefill process (rsp-stress --disagg-child CTL,FD...): its exit status.
int disagg_child_main(const Options &opt);

} // namespace stress

#endif
