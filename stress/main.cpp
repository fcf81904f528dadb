// rsp-stress: setup, the per-second monitor, final leak checks and the summary.
// SPDX-License-Identifier: Apache-2.0
//
// Usage: rsp-stress [--seconds S] [--clients N] [--readers N] [--slots N]
//                   [--layers N] [--seed N] [--max-rows N] [--no-sink] [--json]
// Exit status 0 only when no check failed. The last line of the output is
// always "N passed, M failed".
#include "stress.h"

#include <cerrno>
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
    std::fprintf(f, "usage: rsp-stress [options]\n"
                    "  --seconds S    run time (default 10)\n"
                    "  --clients N    client threads: ingest/remove (default 2)\n"
                    "  --readers N    partition threads: read plans, run the forward (default 2)\n"
                    "  --slots N      max_slots of the pool, sink included (default 128)\n"
                    "  --layers N     recurrent layers (default 4)\n"
                    "  --seed N       random seed (default 1)\n"
                    "  --max-rows N   rows per step at most (default 16)\n"
                    "  --no-sink      pool without the sink slot (pad_index = -1)\n"
                    "  --json         also print the summary as one JSON object\n");
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
                   a == "--seed" || a == "--max-rows") {
            if (!(s = value(a.c_str())))
                return 1;
            uint64_t lo = a == "--slots" ? 4 : a == "--seed" || a == "--clients" ? 0 : 1;
            uint64_t hi = a == "--seed"      ? UINT64_MAX
                          : a == "--slots"   ? (1u << 20)
                          : a == "--clients" ? 64
                                             : 4096;
            if (a == "--readers")
                hi = 256;
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
const rsp_block_config *block_configs(uint32_t *n)
{
    static rsp_block_config b[3];
    std::memset(b, 0, sizeof b);
    b[0].name = "tag"; // i64; layer 0 element 0 holds the state value itself
    b[0].dtype = RSP_DTYPE_I64;
    b[0].ndim = 1;
    b[0].shape[0] = 3;
    b[1].name = "conv";
    b[1].dtype = RSP_DTYPE_U8;
    b[1].ndim = 2;
    b[1].shape[0] = 3;
    b[1].shape[1] = 5;
    b[2].name = "ssm"; // heads sharded over 2 ranks: this pool is rank 1
    b[2].dtype = RSP_DTYPE_F32;
    b[2].ndim = 3;
    b[2].shape[0] = 4;
    b[2].shape[1] = 3;
    b[2].shape[2] = 2;
    b[2].num_shard_dims = 1;
    b[2].shard_dims[0] = 0;
    *n = 3;
    return b;
}

void stats_line_check(Context &cx, const char *when)
{
    rsp_stats s{};
    rsp_error err{};
    if (!cx.checks.expect(CHECK_API, rsp_stats_get(cx.pool, &s, &err) == RSP_OK,
                          "rsp_stats_get: %s", err.message))
        return;
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
bool drain_device(Context &cx, uint64_t step_id)
{
    rsp_row row{kPadRid, RSP_LABEL_MAIN, 1, true};
    rsp_step s{};
    s.step_id = step_id;
    s.rows = &row;
    s.num_rows = 1;
    s.capture = true;
    rsp_error err{};
    rsp_admit_outcome out{};
    if (!cx.checks.expect(CHECK_API, rsp_step_admit(cx.pool, &s, &out, &err) == RSP_OK && out.ok,
                          "final capture admit: %s", err.message))
        return false;
    if (!cx.checks.expect(CHECK_API, rsp_step_plan(cx.pool, &s, &err) == RSP_OK,
                          "final capture plan: %s", err.message))
        return false;
    bool ok = false;
    if (rsp_read_begin() == RSP_OK) {
        const rsp_plan *p = rsp_plan_live(cx.pool);
        rsp_addressing ad{};
        if (p && rsp_plan_step_id(p) == step_id &&
            rsp_plan_addressing(p, RSP_LABEL_MAIN, &ad, &err) == RSP_OK) {
            rsp_status st = rsp_event_wait(cx.pool, &ad.ready, kHangNs, &err);
            ok = cx.checks.expect(CHECK_HANG, st == RSP_OK, "final drain: %s", rsp_strerror(st));
        } else {
            cx.checks.fail(CHECK_API, "final capture plan not readable");
        }
        rsp_read_end();
    }
    cx.checks.expect(CHECK_API, rsp_step_commit(cx.pool, &s, nullptr, &err) == RSP_OK,
                     "final capture commit: %s", err.message);
    return ok;
}

void final_checks(Context &cx)
{
    rsp_error err{};
    // Remove every request ever created (and the padding rid), then drain.
    for (rsp_rid rid : cx.reg.all()) {
        rsp_msg m{};
        m.kind = RSP_MSG_REMOVE;
        m.rid = rid;
        cx.checks.expect(CHECK_API,
                         rsp_post(cx.pool, &m, nullptr, RSP_WAIT_FOREVER, &err) == RSP_OK,
                         "final remove: %s", err.message);
    }
    cx.checks.expect(CHECK_API, rsp_remove(cx.pool, kPadRid, &err) == RSP_OK, "remove: %s",
                     err.message);
    cx.checks.expect(CHECK_API, rsp_barrier(cx.pool, &err) == RSP_OK, "barrier: %s", err.message);
    bool drained = drain_device(cx, cx.last_step_id.load() + 1000);
    cx.checks.expect(CHECK_API, rsp_remove(cx.pool, kPadRid, &err) == RSP_OK, "remove: %s",
                     err.message);

    rsp_stats s{};
    if (cx.checks.expect(CHECK_API, rsp_stats_get(cx.pool, &s, &err) == RSP_OK, "rsp_stats_get: %s",
                         err.message)) {
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
    rsp_stats s{};
    rsp_error err{};
    rsp_pool_counters(cx.pool, &s, &err);
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
    std::printf("checks     %-12s %12s %8s\n", "kind", "passed", "failed");
    for (int c = 0; c < CHECK_COUNT_; c++)
        std::printf("           %-12s %12" PRIu64 " %8" PRIu64 "%s\n", Checks::name((Check)c),
                    cx.checks.passed((Check)c), cx.checks.failed((Check)c),
                    cx.checks.failed((Check)c) ? "  <-- FAILED" : "");
    if (cx.opt.json) {
        std::printf("{\"seconds\":%.3f,\"clients\":%u,\"readers\":%u,\"slots\":%u,\"layers\":%u,"
                    "\"sink\":%s,"
                    "\"seed\":%" PRIu64 ",\"steps\":%" PRIu64 ",\"refused\":%" PRIu64
                    ",\"captures\":%" PRIu64 ",\"preplanned\":%" PRIu64 ",\"abandoned\":%" PRIu64
                    ",\"deferred_commits\":%" PRIu64 ",\"requests_created\":%" PRIu64
                    ",\"requests_removed\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"rows\":%" PRIu64
                    ",\"rows_removed\":%" PRIu64 ",\"max_pending\":%u,\"pool\":{\"plans\":%" PRIu64
                    ",\"stages\":%" PRIu64 ",\"promotions\":%" PRIu64 ",\"commits\":%" PRIu64
                    ",\"forks\":%" PRIu64 ",\"rollbacks\":%" PRIu64 "},\"checks\":{",
                    elapsed, cx.opt.clients, cx.opt.readers, cx.opt.slots, cx.opt.layers,
                    cx.opt.sink ? "true" : "false", cx.opt.seed, cx.steps.load(), cx.refused.load(),
                    cx.captures.load(), cx.preplanned.load(), cx.abandoned.load(),
                    cx.overlapped.load(), cx.reg.created(), cx.reg.retired(), s.messages_handled,
                    cx.rows_checked.load(), cx.rows_removed.load(), cx.max_pending.load(), s.plans,
                    s.stages, s.promotions, s.commits, s.forks, s.rollbacks);
        for (int c = 0; c < CHECK_COUNT_; c++)
            std::printf("%s\"%s\":{\"passed\":%" PRIu64 ",\"failed\":%" PRIu64 "}", c ? "," : "",
                        Checks::name((Check)c), cx.checks.passed((Check)c),
                        cx.checks.failed((Check)c));
        std::printf("},\"passed\":%" PRIu64 ",\"failed\":%" PRIu64 "}\n", cx.checks.total_passed(),
                    cx.checks.total_failed());
    }
}

int run(const Options &opt)
{
    Context cx(opt);
    rsp_error err{};
    uint32_t nblocks = 0;
    const rsp_block_config *blocks = block_configs(&nblocks);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = opt.layers;
    cfg.blocks = blocks;
    cfg.num_blocks = nblocks;
    cfg.max_slots = opt.slots;
    cfg.sink = opt.sink;
    cfg.world_size = 2;
    cfg.rank = 1;
    cfg.device = RSP_DEVICE_HOST;
    if (rsp_pool_create(&cfg, &cx.pool, &err) != RSP_OK) {
        std::fprintf(stderr, "rsp-stress: rsp_pool_create: %s\n", err.message);
        std::printf("0 passed, 1 failed\n");
        return 1;
    }
    Checks &ck = cx.checks;
    ck.expect(CHECK_API, rsp_pool_info_get(cx.pool, &cx.info, &err) == RSP_OK,
              "rsp_pool_info_get: %s", err.message);
    ck.expect(CHECK_LAYOUT,
              cx.info.max_slots == opt.slots &&
                  cx.info.usable_slots == opt.slots - (opt.sink ? 1 : 0) &&
                  cx.info.sink == opt.sink &&
                  cx.info.pad_index == (opt.sink ? RSP_SINK_SLOT : RSP_NO_SLOT) &&
                  cx.info.num_layers == opt.layers && cx.info.num_blocks == nblocks &&
                  cx.info.total_bytes == cx.info.slot_bytes * opt.slots,
              "pool info: max %u usable %u sink %d pad %d layers %u blocks %u", cx.info.max_slots,
              cx.info.usable_slots, (int)cx.info.sink, cx.info.pad_index, cx.info.num_layers,
              cx.info.num_blocks);
    if (!cx.storage.init(cx.pool, cfg, ck)) {
        rsp_pool_destroy(cx.pool);
        std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(),
                    ck.total_failed());
        return 1;
    }
    uint32_t dirty = 0;
    for (uint32_t slot = 0; slot < cx.info.max_slots; slot++)
        dirty += !cx.storage.is_zero((int32_t)slot, nullptr);
    ck.expect(CHECK_ZEROS, dirty == 0, "a fresh pool has %u non-zero slots", dirty);

    static const char *const names[kNumLabels] = {"main", "draft", "beam1", "beam2"};
    for (unsigned l = 0; l < kNumLabels; l++)
        ck.expect(CHECK_API, rsp_label(cx.pool, names[l], &cx.labels[l], &err) == RSP_OK,
                  "rsp_label(%s): %s", names[l], err.message);
    ck.expect(CHECK_LAYOUT, cx.labels[0] == RSP_LABEL_MAIN, "\"main\" interned as %u",
              cx.labels[0]);
    rsp_label_id again = 99;
    ck.expect(CHECK_LAYOUT,
              rsp_label(cx.pool, "draft", &again, &err) == RSP_OK && again == cx.labels[1],
              "interning \"draft\" twice gave %u then %u", cx.labels[1], again);
    rsp_status st = rsp_read_begin();
    ck.expect(CHECK_INVALID, st == RSP_ENOTREG, "rsp_read_begin on an unregistered thread: %s",
              rsp_strerror(st));
    if (st == RSP_OK)
        rsp_read_end();
    ck.expect(CHECK_API, rsp_reader_register(&err) == RSP_OK, "rsp_reader_register: %s",
              err.message);
    ck.expect(CHECK_API, rsp_build_graph_buffers(cx.pool, kGraphMaxBs, 4096, &err) == RSP_OK,
              "rsp_build_graph_buffers: %s", err.message);
    if (rsp_host_fence_create(&cx.fence, &err) != RSP_OK) {
        ck.fail(CHECK_API, "rsp_host_fence_create: %s", err.message);
        rsp_pool_destroy(cx.pool);
        std::printf("%" PRIu64 " passed, %" PRIu64 " failed\n", ck.total_passed(),
                    ck.total_failed());
        return 1;
    }

    for (unsigned p = 0; p < opt.readers; p++)
        cx.queues.emplace_back(new RecordQueue());
    std::vector<std::thread> partitions, clients;
    for (unsigned p = 0; p < opt.readers; p++)
        partitions.emplace_back(partition_main, std::ref(cx), p);
    std::thread stepper(step_main, std::ref(cx));
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
        rsp_stats c{};
        rsp_pool_counters(cx.pool, &c, &err);
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
    for (auto &t : partitions)
        t.join();
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cx.abort.load())
        hung();
    stats_line_check(cx, "end of run");
    final_checks(cx);
    summary(cx, elapsed);
    rsp_reader_unregister();
    // Destroy with messages still queued: each must be answered or dropped
    // cleanly (ASan/LSan builds see a leak or a use after free here).
    uint64_t last_rid = cx.reg.created() + 1000;
    for (uint64_t i = 0; i < 256; i++) {
        rsp_msg m{};
        m.kind = i % 2 ? RSP_MSG_REMOVE : RSP_MSG_INGEST;
        m.rid = last_rid + i / 2;
        rsp_post(cx.pool, &m, nullptr, RSP_WAIT_FOREVER, &err);
    }
    rsp_pool_destroy(cx.pool);
    rsp_host_fence_destroy(cx.fence);
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
    if (opt.readers == 0) {
        std::fprintf(stderr, "rsp-stress: --readers must be at least 1\n");
        return 2;
    }
    return stress::run(opt);
}
