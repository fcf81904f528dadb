// rsp-stress: setup, the per-second monitor, final leak checks and the summary.
// SPDX-License-Identifier: Apache-2.0
//
// Usage: rsp-stress [--seconds S] [--clients N] [--readers N] [--slots N]
//                   [--layers N] [--seed N] [--max-rows N] [--no-sink] [--rank-threads N]
//                   [--pipeline-readers N] [--mixed-threads N] [--prefix-threads N]
//                   [--spec-threads N] [--guard-threads N] [--disagg-links N] [--disagg-kill]
//                   [--disagg-ahead] [--json]
// Exit status 0 only when no check failed. The last line of the output is
// always "N passed, M failed".
#include "stress.h"
#ifdef RSP_STRESS_UCX
#include "disagg.h"
#endif

#include <cerrno>
#include <csignal>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace stress
{

namespace
{

void usage(FILE *f)
{
    std::fprintf(
        f,
        "usage: rsp-stress [options]\n"
        "  --seconds S    run time (default 10)\n"
        "  --clients N    client threads: ingest/remove (default 2)\n"
        "  --readers N    partition threads: read plans, run the forward (default 2)\n"
        "  --slots N      max_slots of the pool, sink included (default 128)\n"
        "  --layers N     recurrent layers (default 4)\n"
        "  --seed N       random seed (default 1)\n"
        "  --max-rows N   rows per step at most (default 16)\n"
        "  --no-sink      pool without the sink slot (pad_index = -1)\n"
        "  --rank-threads N  two-rank mode: threads posting to two ordered pools,\n"
        "                 digests compared every step (default 3; 0 = off)\n"
        "  --pipeline-readers N  pipelined mode: reader threads of a pool with 2..4 steps\n"
        "                 in flight naming the same requests, each forward reading its own\n"
        "                 step's plan, in step order (default 2; 0 = off)\n"
        "  --mixed-threads N  mixed-batch mode: threads, each on its own pool, mixing\n"
        "                 prefill, decode and drafting rows with fork groups (default 1; 0 = off)\n"
        "  --prefix-threads N  prefix-reuse mode: threads, each on its own pool with small\n"
        "                 checkpoint tiers (odd ones demote), requests sharing prompts restore\n"
        "                 from checkpoints, every restore verified byte for byte (default 2; 0 = "
        "off)\n"
        "  --spec-threads N  speculative mode: threads, each on its own pool, committing\n"
        "                 verify steps with per-token states and random accepted counts\n"
        "                 (default 1; 0 = off)\n"
        "  --guard-threads N  guard mode: threads, each on its own pool with guard mode on,\n"
        "                 a deliberately wrong forward now and then, every write reported\n"
        "                 (default 1; 0 = off)\n"
        "  --disagg-links N  disaggregated mode: a prefill process (spawned) and a decode pool\n"
        "                 here, requests moved over UCX (UCX_TLS picks sm or tcp) on N links,\n"
        "                 every byte checked (default 0 = off; needs librsp_ucx)\n"
        "  --disagg-kill  disaggregated mode: kill the first prefill process mid-run, spawn "
        "another\n"
        "  --disagg-ahead disaggregated mode: half the decode commits go before the forward's\n"
        "                 writes (forward_done signalled after them), removals at once\n"
        "  --json         also print the summary as one JSON object\n"
        "  --record FILE  record the main pool's messages and replies (rsp-replay FILE)\n");
}

bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

// Returns 0 to run, 1 for a usage error, 2 for --help.
int parse(int argc, char **argv, Options &o)
{
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&](const char *name) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "rsp-stress: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        uint64_t v = 0;
        const char *s = nullptr;
        if (a == "--help" || a == "-h") {
            usage(stdout);
            return 2;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--no-sink") {
            o.sink = false;
        } else if (a == "--disagg-kill") {
            o.disagg_kill = true;
        } else if (a == "--disagg-ahead") {
            o.disagg_ahead = true;
        } else if (a == "--disagg-child") { // set by the decode side for its prefill process
            if (!(s = value("--disagg-child")))
                return 1;
            o.disagg_child = s;
        } else if (a == "--record") {
            if (!(s = value("--record")))
                return 1;
            o.record = s;
        } else if (a == "--seconds") {
            if (!(s = value("--seconds")))
                return 1;
            char *end = nullptr;
            o.seconds = std::strtod(s, &end);
            if (!end || *end || !(o.seconds > 0 && o.seconds < 1e6)) {
                std::fprintf(stderr, "rsp-stress: bad --seconds '%s'\n", s);
                return 1;
            }
        } else if (a == "--clients" || a == "--readers" || a == "--slots" || a == "--layers" ||
                   a == "--seed" || a == "--max-rows" || a == "--rank-threads" ||
                   a == "--pipeline-readers" || a == "--mixed-threads" || a == "--prefix-threads" ||
                   a == "--spec-threads" || a == "--guard-threads" || a == "--disagg-links" ||
                   a == "--disagg-die-ms") {
            if (!(s = value(a.c_str())))
                return 1;
            uint64_t lo = a == "--slots" ? 4
                          : a == "--seed" || a == "--clients" || a == "--rank-threads" ||
                                  a == "--pipeline-readers" || a == "--mixed-threads" ||
                                  a == "--prefix-threads" || a == "--spec-threads" ||
                                  a == "--guard-threads" || a == "--disagg-links" ||
                                  a == "--disagg-die-ms"
                              ? 0
                              : 1;
            uint64_t hi = a == "--seed"      ? UINT64_MAX
                          : a == "--slots"   ? (1u << 20)
                          : a == "--clients" ? 64
                                             : 4096;
            if (a == "--readers")
                hi = 256;
            if (a == "--rank-threads" || a == "--pipeline-readers" || a == "--mixed-threads" ||
                a == "--prefix-threads" || a == "--spec-threads" || a == "--guard-threads")
                hi = 16;
            if (a == "--disagg-links")
                hi = 8;
            if (a == "--disagg-die-ms")
                hi = 1u << 30;
            if (!parse_u64(s, lo, hi, &v)) {
                std::fprintf(stderr, "rsp-stress: bad %s '%s' (allowed %llu..%llu)\n", a.c_str(), s,
                             (unsigned long long)lo, (unsigned long long)hi);
                return 1;
            }
            if (a == "--clients")
                o.clients = (unsigned)v;
            else if (a == "--readers")
                o.readers = (unsigned)v;
            else if (a == "--slots")
                o.slots = (uint32_t)v;
            else if (a == "--layers")
                o.layers = (uint32_t)v;
            else if (a == "--seed")
                o.seed = v;
            else if (a == "--rank-threads")
                o.rank_threads = (unsigned)v;
            else if (a == "--pipeline-readers")
                o.pipeline_readers = (unsigned)v;
            else if (a == "--mixed-threads")
                o.mixed_threads = (unsigned)v;
            else if (a == "--prefix-threads")
                o.prefix_threads = (unsigned)v;
            else if (a == "--spec-threads")
                o.spec_threads = (unsigned)v;
            else if (a == "--guard-threads")
                o.guard_threads = (unsigned)v;
            else if (a == "--disagg-links")
                o.disagg_links = (unsigned)v;
            else if (a == "--disagg-die-ms")
                o.disagg_die_ms = (unsigned)v;
            else
                o.max_rows = (unsigned)v;
        } else {
            std::fprintf(stderr, "rsp-stress: unknown option '%s'\n", a.c_str());
            usage(stderr);
            return 1;
        }
    }
    return 0;
}

// Blocks of every dtype family a kernel meets, with odd sizes so a stride
// mistake lands on a neighbour, and one tensor-parallel-sharded block.
void add_blocks(rsp::pool_config &cfg)
{
    cfg.block("tag", RSP_DTYPE_I64, {3}); // layer 0 element 0 holds the state value itself
    cfg.block("conv", RSP_DTYPE_U8, {3, 5});
    // Heads sharded over 2 ranks: this pool is rank 1.
    cfg.block("ssm", RSP_DTYPE_F32, {4, 3, 2}, {0});
}
constexpr uint32_t kNumBlocks = 3;

void stats_line_check(Context &cx, const char *when)
{
    rsp::result<rsp_stats> got = cx.pool.try_stats();
    if (!cx.checks.expect(CHECK_API, got.ok(), "stats: %s", got.error().message))
        return;
    const rsp_stats &s = got.value();
    uint32_t sink = cx.info.sink ? 1 : 0;
    note_pending(cx, s.pending_release);
    cx.checks.expect(CHECK_STATS,
                     (uint64_t)s.free_slots + s.held_slots + s.pending_release + sink ==
                         s.max_slots,
                     "%s: free %u + held %u + pending %u + sink %u != max %u", when, s.free_slots,
                     s.held_slots, s.pending_release, sink, s.max_slots);
}

// Wait until every device operation posted so far has run: plan a capture
// step (it reserves, copies and commits nothing) and wait for its ready
// event, which the device reaches only after all earlier work.
bool drain_device(Context &cx, rsp::step_id id)
{
    rsp::step s(id);
    s.pad().capture();
    rsp::result<rsp_admit_outcome> out = cx.pool.try_admit(s);
    if (!cx.checks.expect(CHECK_API, out.ok() && out.value().ok, "final capture admit: %s",
                          out.error().message))
        return false;
    rsp::result<void> r = cx.pool.try_plan(s);
    if (!cx.checks.expect(CHECK_API, r.ok(), "final capture plan: %s", r.error().message))
        return false;
    bool ok = false;
    {
        rsp::read_section section(std::nothrow);
        if (section) {
            rsp::plan_view p = section.live(cx.pool);
            rsp::result<rsp::addressing> ad = p.try_addressing(rsp::label::main);
            if (p && p.id() == id && ad) {
                rsp::result<void> w = cx.pool.try_event_wait(ad.value().ready(), kHang);
                ok = cx.checks.expect(CHECK_HANG, w.ok(), "final drain: %s",
                                      rsp_strerror(w.status()));
            } else {
                cx.checks.fail(CHECK_API, "final capture plan not readable");
            }
        }
    }
    r = cx.pool.try_commit(s);
    cx.checks.expect(CHECK_API, r.ok(), "final capture commit: %s", r.error().message);
    return ok;
}

void final_checks(Context &cx)
{
    // Remove every request ever created (and the padding rid), then drain.
    for (rsp::rid rid : cx.reg.all()) {
        rsp::result<void> r = cx.pool.try_post_forget(rsp::msg::remove(rid));
        cx.checks.expect(CHECK_API, r.ok(), "final remove: %s", r.error().message);
    }
    rsp::result<void> r = cx.pool.try_remove(kPadRid);
    cx.checks.expect(CHECK_API, r.ok(), "remove: %s", r.error().message);
    r = cx.pool.try_barrier();
    cx.checks.expect(CHECK_API, r.ok(), "barrier: %s", r.error().message);
    bool drained = drain_device(cx, rsp::step_id{rsp::raw(cx.last_step_id.load()) + 1000});
    r = cx.pool.try_remove(kPadRid);
    cx.checks.expect(CHECK_API, r.ok(), "remove: %s", r.error().message);

    rsp::result<rsp_stats> got = cx.pool.try_stats();
    if (cx.checks.expect(CHECK_API, got.ok(), "stats: %s", got.error().message)) {
        const rsp_stats &s = got.value();
        cx.checks.expect(CHECK_LEAK,
                         s.free_slots == cx.info.usable_slots && s.held_slots == 0 &&
                             s.pending_release == 0,
                         "after removing everything: free %u of %u usable, held %u, pending %u",
                         s.free_slots, cx.info.usable_slots, s.held_slots, s.pending_release);
        cx.checks.expect(CHECK_LEAK, s.num_requests == 0 && s.num_holdings == 0,
                         "after removing everything: %u requests, %u holdings remain",
                         s.num_requests, s.num_holdings);
    }
    if (drained) {
        uint32_t dirty = 0, first = 0;
        for (uint32_t slot = cx.info.sink ? 1 : 0; slot < cx.info.max_slots; slot++)
            if (!cx.storage.is_zero((int32_t)slot, nullptr) && dirty++ == 0)
                first = slot;
        cx.checks.expect(CHECK_LEAK, dirty == 0, "%u free slots are not zero (first: %u)", dirty,
                         first);
    }
}

void summary(Context &cx, double elapsed)
{
    rsp::result<rsp_stats> counters = cx.pool.try_counters();
    const rsp_stats s = counters ? counters.value() : rsp_stats{};
    std::printf(
        "\nrsp-stress: %.1f s, %u clients, %u readers, %u slots (%s), %u layers, seed %" PRIu64
        "\n",
        elapsed, cx.opt.clients, cx.opt.readers, cx.opt.slots, cx.opt.sink ? "sink" : "no sink",
        cx.opt.layers, cx.opt.seed);
    std::printf("steps      %" PRIu64 " live (%" PRIu64 " capture, %" PRIu64
                " staged first, %" PRIu64 " commit deferred), %" PRIu64 " refused, %" PRIu64
                " abandoned stages, %" PRIu64 " bad-input probes, %" PRIu64 " resets\n",
                cx.steps.load(), cx.captures.load(), cx.preplanned.load(), cx.overlapped.load(),
                cx.refused.load(), cx.abandoned.load(), cx.invalid.load(), cx.resets.load());
    std::printf("requests   %" PRIu64 " created, %" PRIu64 " removed by clients; %" PRIu64
                " client messages (%" PRIu64 " EFULL retries)\n",
                cx.reg.created(), cx.reg.retired(), cx.client_msgs.load(), cx.efull.load());
    std::printf("forward    %" PRIu64 " partition forwards, %" PRIu64 " rows read+written; %" PRIu64
                " rows of requests removed around their step (pending release up to %u slots)\n",
                cx.forwards.load(), cx.rows_checked.load(), cx.rows_removed.load(),
                cx.max_pending.load());
    std::printf("pool       %" PRIu64 " messages, admits %" PRIu64 " ok / %" PRIu64
                " refused, %" PRIu64 " rollbacks, %" PRIu64 " plans, %" PRIu64 " stages, %" PRIu64
                " promotions, %" PRIu64 " commits, %" PRIu64 " forks, %" PRIu64
                " bytes zeroed, %" PRIu64 " bytes copied\n",
                s.messages_handled, s.admits_ok, s.admits_refused, s.rollbacks, s.plans, s.stages,
                s.promotions, s.commits, s.forks, s.bytes_zeroed, s.bytes_copied);
    std::printf("ranks      %" PRIu64 " steps compared across 2 ordered pools (%u threads)\n",
                cx.rank_steps.load(), cx.opt.rank_threads);
    std::printf("pipeline   %" PRIu64 " steps committed with up to %u in flight (%u readers; "
                "steps planned with 1/2/3/4 in flight: %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64
                "), %" PRIu64 " rows read a state an earlier step in flight writes, %" PRIu64
                " prefills, %" PRIu64 " forwards read their own plan while a newer one was live; "
                "%" PRIu64 " requests removed in flight, %" PRIu64 " resets, %" PRIu64
                " newest steps rolled back, %" PRIu64 " older rollbacks tried\n",
                cx.pipe_steps.load(), cx.pipe_max_inflight.load(), cx.opt.pipeline_readers,
                cx.pipe_depth[1].load(), cx.pipe_depth[2].load(), cx.pipe_depth[3].load(),
                cx.pipe_depth[4].load(), cx.pipe_overlap.load(), cx.pipe_prefills.load(),
                cx.pipe_behind.load(), cx.pipe_removed_inflight.load(), cx.pipe_resets.load(),
                cx.pipe_rollbacks.load(), cx.pipe_older_probes.load());
    std::printf("mixed      %" PRIu64 " steps committed (%u threads), %" PRIu64
                " drafts rejected (skip_post_forks), %" PRIu64 " draft labels released\n",
                cx.mixed_steps.load(), cx.opt.mixed_threads, cx.mixed_rejected.load(),
                cx.mixed_released.load());
    std::printf("spec       %" PRIu64 " verify steps committed (%u threads), %" PRIu64
                " tokens accepted by relabel\n",
                cx.spec_steps.load(), cx.opt.spec_threads, cx.spec_accepted.load());
    std::printf("guard      %" PRIu64 " steps committed and checked (%u threads), %" PRIu64
                " deliberately wrong writes, each reported\n",
                cx.guard_steps.load(), cx.opt.guard_threads, cx.guard_wrong.load());
    std::printf("prefix     %" PRIu64 " steps (%u threads), %" PRIu64
                " restores verified byte for byte (%" PRIu64 " from the host tier), %" PRIu64
                " takes, %" PRIu64 " evicted + %" PRIu64 " demoted, %" PRIu64
                " restores of evicted keys refused, %" PRIu64 " takes skipped, %" PRIu64
                " engine pins, %" PRIu64 " swaps, %" PRIu64 " rollbacks, %" PRIu64
                " refused by a tier full of pins; %" PRIu64
                " lookups by concurrent readers (%" PRIu64 " found), %" PRIu64 " rewinds\n",
                cx.prefix_steps.load(), cx.opt.prefix_threads, cx.prefix_restores.load(),
                cx.prefix_host_restores.load(), cx.prefix_takes.load(), cx.prefix_evicted.load(),
                cx.prefix_demoted.load(), cx.prefix_enokey.load(), cx.prefix_skipped.load(),
                cx.prefix_pins.load(), cx.prefix_swaps.load(), cx.prefix_rollbacks.load(),
                cx.prefix_full.load(), cx.prefix_lookups.load(), cx.prefix_lookup_hits.load(),
                cx.prefix_rewinds.load());
    std::printf("disagg     %" PRIu64 " requests moved (%" PRIu64 " bytes) on %u links, %" PRIu64
                " of them in %" PRIu64 " batches, %" PRIu64 " aborted on purpose (%" PRIu64
                " probes read zeros), %" PRIu64 " refused for room, %" PRIu64
                " transfers failed; %" PRIu64 " decode steps; %" PRIu64
                " prefill processes (%" PRIu64 " killed), %" PRIu64 " prefill steps, %" PRIu64
                " checks passed there\n",
                cx.disagg_moved.load(), cx.disagg_bytes.load(), cx.opt.disagg_links,
                cx.disagg_batched.load(), cx.disagg_batches.load(), cx.disagg_aborted.load(),
                cx.disagg_probes.load(), cx.disagg_refused.load(), cx.disagg_failed.load(),
                cx.disagg_decode_steps.load(), cx.disagg_processes.load(), cx.disagg_kills.load(),
                cx.disagg_prefill_steps.load(), cx.disagg_prefill_checks.load());
    std::printf("checks     %-12s %12s %8s\n", "kind", "passed", "failed");
    for (int c = 0; c < CHECK_COUNT_; c++)
        std::printf("           %-12s %12" PRIu64 " %8" PRIu64 "%s\n", Checks::name((Check)c),
                    cx.checks.passed((Check)c), cx.checks.failed((Check)c),
                    cx.checks.failed((Check)c) ? "  <-- FAILED" : "");
    if (cx.opt.json) {
        std::printf(
            "{\"seconds\":%.3f,\"clients\":%u,\"readers\":%u,\"slots\":%u,\"layers\":%u,"
            "\"sink\":%s,"
            "\"seed\":%" PRIu64 ",\"steps\":%" PRIu64 ",\"refused\":%" PRIu64
            ",\"captures\":%" PRIu64 ",\"preplanned\":%" PRIu64 ",\"abandoned\":%" PRIu64
            ",\"deferred_commits\":%" PRIu64 ",\"requests_created\":%" PRIu64
            ",\"requests_removed\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"rows\":%" PRIu64
            ",\"rows_removed\":%" PRIu64 ",\"max_pending\":%u,\"rank_steps\":%" PRIu64
            ",\"pipeline_steps\":%" PRIu64 ",\"pipeline_behind\":%" PRIu64
            ",\"pipeline_overlap_rows\":%" PRIu64 ",\"pipeline_prefills\":%" PRIu64
            ",\"pipeline_depth\":[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]"
            ",\"pipeline_removed_inflight\":%" PRIu64 ",\"pipeline_resets\":%" PRIu64
            ",\"pipeline_rollbacks\":%" PRIu64 ",\"pipeline_older_rollbacks\":%" PRIu64
            ",\"mixed_steps\":%" PRIu64 ",\"mixed_rejected\":%" PRIu64
            ",\"mixed_released\":%" PRIu64 ",\"prefix\":{\"steps\":%" PRIu64
            ",\"restores\":%" PRIu64 ",\"host_restores\":%" PRIu64 ",\"takes\":%" PRIu64
            ",\"evicted\":%" PRIu64 ",\"demoted\":%" PRIu64 ",\"enokey\":%" PRIu64
            ",\"skipped\":%" PRIu64 ",\"pins\":%" PRIu64 ",\"swaps\":%" PRIu64
            ",\"rollbacks\":%" PRIu64 ",\"full\":%" PRIu64 ",\"lookups\":%" PRIu64
            ",\"lookup_hits\":%" PRIu64 ",\"rewinds\":%" PRIu64 "},\"disagg\":{\"moved\":%" PRIu64
            ",\"bytes\":%" PRIu64 ",\"aborted\":%" PRIu64 ",\"refused\":%" PRIu64
            ",\"failed\":%" PRIu64 ",\"decode_steps\":%" PRIu64 ",\"processes\":%" PRIu64
            ",\"killed\":%" PRIu64 "},\"pool\":{\"plans\":%" PRIu64 ",\"stages\":%" PRIu64
            ",\"promotions\":%" PRIu64 ",\"commits\":%" PRIu64 ",\"forks\":%" PRIu64
            ",\"rollbacks\":%" PRIu64 "},\"checks\":{",
            elapsed, cx.opt.clients, cx.opt.readers, cx.opt.slots, cx.opt.layers,
            cx.opt.sink ? "true" : "false", cx.opt.seed, cx.steps.load(), cx.refused.load(),
            cx.captures.load(), cx.preplanned.load(), cx.abandoned.load(), cx.overlapped.load(),
            cx.reg.created(), cx.reg.retired(), s.messages_handled, cx.rows_checked.load(),
            cx.rows_removed.load(), cx.max_pending.load(), cx.rank_steps.load(),
            cx.pipe_steps.load(), cx.pipe_behind.load(), cx.pipe_overlap.load(),
            cx.pipe_prefills.load(), cx.pipe_depth[1].load(), cx.pipe_depth[2].load(),
            cx.pipe_depth[3].load(), cx.pipe_depth[4].load(), cx.pipe_removed_inflight.load(),
            cx.pipe_resets.load(), cx.pipe_rollbacks.load(), cx.pipe_older_probes.load(),
            cx.mixed_steps.load(), cx.mixed_rejected.load(), cx.mixed_released.load(),
            cx.prefix_steps.load(), cx.prefix_restores.load(), cx.prefix_host_restores.load(),
            cx.prefix_takes.load(), cx.prefix_evicted.load(), cx.prefix_demoted.load(),
            cx.prefix_enokey.load(), cx.prefix_skipped.load(), cx.prefix_pins.load(),
            cx.prefix_swaps.load(), cx.prefix_rollbacks.load(), cx.prefix_full.load(),
            cx.prefix_lookups.load(), cx.prefix_lookup_hits.load(), cx.prefix_rewinds.load(),
            cx.disagg_moved.load(), cx.disagg_bytes.load(), cx.disagg_aborted.load(),
            cx.disagg_refused.load(), cx.disagg_failed.load(), cx.disagg_decode_steps.load(),
            cx.disagg_processes.load(), cx.disagg_kills.load(), s.plans, s.stages, s.promotions,
            s.commits, s.forks, s.rollbacks);
        for (int c = 0; c < CHECK_COUNT_; c++)
            std::printf("%s\"%s\":{\"passed\":%" PRIu64 ",\"failed\":%" PRIu64 "}", c ? "," : "",
                        Checks::name((Check)c), cx.checks.passed((Check)c),
                        cx.checks.failed((Check)c));
        std::printf("},\"passed\":%" PRIu64 ",\"failed\":%" PRIu64 "}\n", cx.checks.total_passed(),
                    cx.checks.total_failed());
    }
}

// Start the clients, the step thread and the partitions, print a progress
// line per second until the run time is over, stop and join them. Returns
// the seconds they ran. A hang ends the process here (exit status 1).
double run_threads(Context &cx)
{
    const Options &opt = cx.opt;
    Checks &ck = cx.checks;
    for (unsigned p = 0; p < opt.readers; p++)
        cx.queues.emplace_back(new RecordQueue());
    std::vector<std::thread> partitions, clients;
    for (unsigned p = 0; p < opt.readers; p++)
        partitions.emplace_back(partition_main, std::ref(cx), p);
    std::thread stepper(step_main, std::ref(cx));
    std::thread ranker; // the two-rank mode
    if (opt.rank_threads)
        ranker = std::thread(ranks_main, std::ref(cx));
    std::thread piper; // the pipelined mode
    if (opt.pipeline_readers)
        piper = std::thread(pipeline_main, std::ref(cx));
    std::vector<std::thread> mixers; // the mixed-batch mode
    for (unsigned i = 0; i < opt.mixed_threads; i++)
        mixers.emplace_back(mixed_main, std::ref(cx), i);
    for (unsigned i = 0; i < opt.prefix_threads; i++) // the prefix-reuse mode
        mixers.emplace_back(prefix_main, std::ref(cx), i);
    for (unsigned i = 0; i < opt.spec_threads; i++) // the speculative mode
        mixers.emplace_back(spec_main, std::ref(cx), i);
    for (unsigned i = 0; i < opt.guard_threads; i++) // the guard mode
        mixers.emplace_back(guard_main, std::ref(cx), i);
#ifdef RSP_STRESS_UCX
    if (opt.disagg_links) // the disaggregated mode
        mixers.emplace_back(disagg_main, std::ref(cx));
#endif
    for (unsigned c = 0; c < opt.clients; c++)
        clients.emplace_back(client_main, std::ref(cx), c);

    // Monitor: one progress line per second, a consistent stats snapshot each time.
    auto t0 = std::chrono::steady_clock::now();
    auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(opt.seconds));
    auto next = t0 + std::chrono::seconds(1);
    uint64_t last_steps = 0, last_msgs = 0;
    auto last_t = t0;
    while (!cx.abort.load()) {
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline)
            break;
        auto wake = std::min(next, deadline);
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            wake - now, std::chrono::milliseconds(50)));
        now = std::chrono::steady_clock::now();
        if (now < next)
            continue;
        next += std::chrono::seconds(1);
        rsp::result<rsp_stats> counters = cx.pool.try_counters();
        const rsp_stats c = counters ? counters.value() : rsp_stats{};
        stats_line_check(cx, "monitor");
        double dt = std::chrono::duration<double>(now - last_t).count();
        uint64_t steps = cx.steps.load();
        std::printf("[%4.0fs] steps/s %7.0f  msgs/s %8.0f  free %5u/%-5u  requests %5u  inbox %4u  "
                    "violations %" PRIu64 "\n",
                    std::chrono::duration<double>(now - t0).count(), (steps - last_steps) / dt,
                    (c.messages_handled - last_msgs) / dt, c.free_slots, cx.info.usable_slots,
                    c.num_requests, c.inbox_depth, ck.total_failed());
        std::fflush(stdout);
        last_steps = steps;
        last_msgs = c.messages_handled;
        last_t = now;
    }
    auto hung = [&]() {
        // Something hung: the pool may be wedged, so neither join threads that
        // may be stuck in it nor wait on it again.
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        summary(cx, elapsed);
        std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(),
                    ck.total_failed());
        std::fflush(stdout);
        std::_Exit(1);
    };
    if (cx.abort.load())
        hung();
    cx.stop.store(true);
    for (auto &t : clients)
        t.join();
    stepper.join();
    if (ranker.joinable())
        ranker.join();
    if (piper.joinable())
        piper.join();
    for (auto &t : mixers)
        t.join();
    for (auto &t : partitions)
        t.join();
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cx.abort.load())
        hung();
    return elapsed;
}

int run(const Options &opt)
{
    Context cx(opt);
    rsp::pool_config cfg;
    cfg.layers(opt.layers).slots(opt.slots).sink(opt.sink).rank(1, 2).record(opt.record);
    add_blocks(cfg);
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!created) {
        std::fprintf(stderr, "rsp-stress: pool create: %s\n", created.error().message);
        std::printf("0 passed, 1 failed\n");
        return 1;
    }
    cx.pool = std::move(created).value();
    Checks &ck = cx.checks;
    rsp::result<rsp_pool_info> info = cx.pool.try_info();
    if (ck.expect(CHECK_API, info.ok(), "pool info: %s", info.error().message))
        cx.info = info.value();
    ck.expect(CHECK_LAYOUT,
              cx.info.max_slots == opt.slots &&
                  cx.info.usable_slots == opt.slots - (opt.sink ? 1 : 0) &&
                  cx.info.sink == opt.sink &&
                  cx.info.pad_index == (opt.sink ? RSP_SINK_SLOT : RSP_NO_SLOT) &&
                  cx.info.num_layers == opt.layers && cx.info.num_blocks == kNumBlocks &&
                  cx.info.total_bytes == cx.info.slot_bytes * opt.slots,
              "pool info: max %u usable %u sink %d pad %d layers %u blocks %u", cx.info.max_slots,
              cx.info.usable_slots, (int)cx.info.sink, cx.info.pad_index, cx.info.num_layers,
              cx.info.num_blocks);
    if (!cx.storage.init(cx.pool, cfg, ck)) {
        (void)cx.pool.try_close();
        std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(),
                    ck.total_failed());
        return 1;
    }
    uint32_t dirty = 0;
    for (uint32_t slot = 0; slot < cx.info.max_slots; slot++)
        dirty += !cx.storage.is_zero((int32_t)slot, nullptr);
    ck.expect(CHECK_ZEROS, dirty == 0, "a fresh pool has %u non-zero slots", dirty);

    static const char *const names[kNumLabels] = {"main", "draft", "beam1", "beam2"};
    for (unsigned l = 0; l < kNumLabels; l++) {
        rsp::result<rsp::label> id = cx.pool.try_intern(names[l]);
        if (ck.expect(CHECK_API, id.ok(), "intern(%s): %s", names[l], id.error().message))
            cx.labels[l] = id.value();
    }
    ck.expect(CHECK_LAYOUT, cx.labels[0] == rsp::label::main, "\"main\" interned as %u",
              rsp::raw(cx.labels[0]));
    rsp::result<rsp::label> again = cx.pool.try_intern("draft");
    ck.expect(CHECK_LAYOUT, again.ok() && again.value() == cx.labels[1],
              "interning \"draft\" twice gave %u then %u", rsp::raw(cx.labels[1]),
              again.ok() ? rsp::raw(again.value()) : 99u);
    {
        rsp::read_section unregistered(std::nothrow);
        ck.expect(CHECK_INVALID, unregistered.status() == RSP_ENOTREG,
                  "a read section on an unregistered thread: %s",
                  rsp_strerror(unregistered.status()));
    }
    rsp::result<void> built = cx.pool.try_build_graph_buffers(kGraphMaxBs, 4096);
    ck.expect(CHECK_API, built.ok(), "build_graph_buffers: %s", built.error().message);
    rsp::result<rsp::host_fence> fence = rsp::host_fence::try_create();
    if (!fence) {
        ck.fail(CHECK_API, "host fence create: %s", fence.error().message);
        (void)cx.pool.try_close();
        std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(),
                    ck.total_failed());
        return 1;
    }
    cx.fence = std::move(fence).value();

    {
        // This thread reads plans in final_checks; it is no reader once the pool closes.
        rsp::reader reader(std::nothrow);
        ck.expect(CHECK_API, reader.ok(), "reader registration: %s", reader.error().message);
        double elapsed = run_threads(cx);
        stats_line_check(cx, "end of run");
        final_checks(cx);
        summary(cx, elapsed);
    }
    // Destroy with messages still queued: each must be answered or dropped
    // cleanly (ASan/LSan builds see a leak or a use after free here).
    uint64_t last_rid = cx.reg.created() + 1000;
    for (uint64_t i = 0; i < 256; i++) {
        const rsp::rid rid{last_rid + i / 2};
        (void)cx.pool.try_post_forget(i % 2 ? rsp::msg::remove(rid) : rsp::msg::ingest(rid));
    }
    (void)cx.pool.try_close();
    cx.fence = rsp::host_fence();
    uint64_t failed = ck.total_failed();
    std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(), failed);
    std::fflush(stdout);
    return failed == 0 ? 0 : 1;
}

} // namespace

} // namespace stress

int main(int argc, char **argv)
{
    stress::Options opt;
    int r = stress::parse(argc, argv, opt);
    if (r == 2)
        return 0;
    if (r == 1)
        return 2;
    if (!opt.disagg_child.empty() || opt.disagg_links) {
#ifdef RSP_STRESS_UCX
        if (!opt.disagg_child.empty())
            return stress::disagg_child_main(opt);
        std::signal(SIGPIPE, SIG_IGN); // a dead prefill process's socket: EPIPE, not a signal
#else
        std::fprintf(stderr, "rsp-stress: the disaggregated mode needs librsp_ucx, which this "
                             "build lacks (no UCX found)\n");
        return 2;
#endif
    }
    if (opt.readers == 0) {
        std::fprintf(stderr, "rsp-stress: --readers must be at least 1\n");
        return 2;
    }
    return stress::run(opt);
}
