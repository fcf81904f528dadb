// rsp-stress: a multithreaded model of an inference engine driving one pool.
// SPDX-License-Identifier: Apache-2.0
//
// The public API only, through the C++17 binding (include/rsp/rsp.hpp, over
// rsp.h), std::thread. Threads:
//
//   thread        | count      | talks to the pool with
//   --------------+------------+---------------------------------------------
//   main/monitor  | 1          | setup, pool.try_counters, pool.try_stats, final checks
//   client        | --clients  | ingest / remove / holding (post + sync mixed)
//   step          | 1          | admit / plan / commit / rollback / reset; owns the shadow
//   partition     | --readers  | plan_wait, read sections, slot memory (the "forward")
//   disagg        | 1 + links  | a decode pool of its own, rsp_ucx imports (disagg.cpp); the
//                 |            | prefill pool lives in a process it spawns (disagg_prefill.cpp)
//
// Every pool call is a try_ call: a failure is a counted check, never an
// exception (one escaping a thread would end the run without a summary).
//
// The shadow model (step thread only) predicts every holding's content; clients
// tombstone a request in the Registry *before* posting its removal, so any
// removal the pool handled before a step-thread call returned is visible to the
// step thread afterwards, and the model stays exact for every other request.
#ifndef RSP_STRESS_STRESS_H
#define RSP_STRESS_STRESS_H

#include <rsp/rsp.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace stress
{

using namespace std::chrono_literals;

constexpr std::chrono::seconds kHang{30}; // any wait longer than this is a hang
constexpr rsp::rid kPadRid{0};            // padding rows use it; real rids start at 1
constexpr unsigned kNumLabels = 4;        // main, draft, beam1, beam2
constexpr uint32_t kGraphMaxBs = 16;      // build_graph_buffers(max_bs)

struct Options {
    double seconds = 10.0;
    unsigned clients = 2;
    unsigned readers = 2;
    uint32_t slots = 128;
    uint32_t layers = 4;
    uint64_t seed = 1;
    bool json = false;
    bool sink = true;
    unsigned max_rows = 16;        // rows per step at most
    unsigned print_failures = 20;  // detailed failure lines before going quiet
    unsigned rank_threads = 3;     // two-rank mode: threads posting to two ordered pools; 0 = off
    unsigned pipeline_readers = 2; // pipelined mode: reader threads of its own pool; 0 = off
    unsigned mixed_threads = 1;    // mixed-batch mode: threads, each with its own pool; 0 = off
    unsigned prefix_threads = 2;   // prefix-reuse mode: threads, each with its own pool; 0 = off
    std::string record;            // the main pool's recording (rsp-replay), "" = none
    unsigned spec_threads = 1;     // speculative mode: threads, each with its own pool; 0 = off
    unsigned disagg_links = 0;  // disaggregated mode: transfer links to a prefill process; 0 = off
    bool disagg_kill = false;   // disaggregated mode: the first prefill process dies mid-run
    bool disagg_ahead = false;  // disaggregated mode: decode commits before the forward's writes
    std::string disagg_child;   // set in the prefill process: "CTL,FD0,FD1,..."
    unsigned disagg_die_ms = 0; // prefill process: SIGKILL itself after this (0 = never)
    unsigned guard_threads = 1; // guard mode: threads, each with its own guarded pool; 0 = off
};

// Small deterministic generator (splitmix64); one per thread.
class Rng
{
  public:
    explicit Rng(uint64_t seed) : s_(seed)
    {
    }
    uint64_t next()
    {
        uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t below(uint32_t n)
    {
        return n ? (uint32_t)(next() % n) : 0;
    }
    bool chance(double p)
    {
        return (double)(next() >> 11) * 0x1.0p-53 < p;
    }

  private:
    uint64_t s_;
};

uint64_t mix64(uint64_t x);

// ---------------------------------------------------------------------------
// Checks: every check is counted passed or failed; failures print details.
// Any thread.
enum Check : int {
    CHECK_API = 0,    // a call returned what the contract says
    CHECK_INVALID,    // bad input refused with the right status
    CHECK_LAYOUT,     // info, block views, label ids
    CHECK_ADDRESSING, // row -> slot / has_state as the model predicts
    CHECK_UNIQUE,     // no slot addressed twice, no slot held by two live holdings
    CHECK_GENERATION, // generations stay / move as they must
    CHECK_STAGE,      // staged plan as predicted, apart from the live one
    CHECK_VECTORS,    // device vectors equal host copies during the whole forward
    CHECK_ZEROS,      // has_state false reads zeros
    CHECK_CONTENT,    // has_state true reads exactly what the model predicts
    CHECK_STATS,      // free + held + pending + sink == max_slots
    CHECK_REFUSAL,    // a refused admit reports sane numbers and changes nothing
    CHECK_HOLDING,    // holding answers are sane
    CHECK_LEAK,       // at exit nothing is held and every slot reads zeros
    CHECK_HANG,       // no wait ran past kHang
    CHECK_RANKS,      // two ordered pools fed the same numbered messages agree every step
    CHECK_PIPELINE, // 2..4 steps in flight: each reader gets its own step's plan, commits in order
    CHECK_MIXED,    // prefill + decode + drafting rows with per-rid fork groups, skips, releases
    CHECK_CKPT,     // checkpoints: restored bytes, key set, pins, evictions, swaps, typed failures
    CHECK_OVERLAP,  // a row whose request an earlier in-flight step writes: has_state and content
    CHECK_NEWEST_FIRST, // a rollback of a step a later in-flight step depends on is refused
    CHECK_SPEC,         // per-token states: the accepted output is the holding, the rest freed
    CHECK_DISAGG,       // two processes over UCX: transfers, frames, both sides' counts equal
    CHECK_GUARD,        // guard mode: each deliberately wrong write reported once, nothing else
    CHECK_COUNT_
};

class Checks
{
  public:
    explicit Checks(unsigned print_failures) : print_left_(print_failures)
    {
    }
    void pass(Check c, uint64_t n = 1)
    {
        passed_[c].fetch_add(n, std::memory_order_relaxed);
    }
    // Count one check; on failure print what went wrong. Returns ok.
    bool expect(Check c, bool ok, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
    void fail(Check c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
    uint64_t passed(Check c) const
    {
        return passed_[c].load(std::memory_order_relaxed);
    }
    uint64_t failed(Check c) const
    {
        return failed_[c].load(std::memory_order_relaxed);
    }
    uint64_t total_passed() const;
    uint64_t total_failed() const;
    static const char *name(Check c);

  private:
    void vfail(Check c, const char *fmt, va_list ap);
    std::atomic<uint64_t> passed_[CHECK_COUNT_]{};
    std::atomic<uint64_t> failed_[CHECK_COUNT_]{};
    std::mutex print_mu_;
    unsigned print_left_;
};

// ---------------------------------------------------------------------------
// Registry of requests, shared by clients and the step thread. Any thread
// (one mutex: this is the harness, not the library under test).
class Registry
{
  public:
    explicit Registry(unsigned clients) : clients_(clients)
    {
    }
    // A new rid, schedulable at once, to be ingested by the other clients too.
    rsp::rid create(unsigned client);
    // A rid another client created that `client` has not ingested yet.
    bool take_pending(unsigned client, rsp::rid *rid);
    // Tombstone a random active rid (call before posting its removal).
    bool retire_random(Rng &rng, rsp::rid *rid);
    // The rids of the step in flight (step thread); clients aim some
    // removals there, so removal during a step is frequent.
    void set_hot(const std::vector<rsp::rid> &rids);
    // Tombstone a random active rid of the step in flight, if any.
    bool retire_hot(Rng &rng, rsp::rid *rid);
    // Tombstone one given rid if it is active (step thread preemption).
    bool retire(rsp::rid rid);
    size_t active_count();
    void sample(Rng &rng, size_t k, std::vector<rsp::rid> &out);
    bool tombstoned(rsp::rid rid);
    // Tombstones logged since index `from`; returns the new index.
    size_t tombstones_since(size_t from, std::vector<rsp::rid> &out);
    std::vector<rsp::rid> all();
    uint64_t created()
    {
        std::lock_guard<std::mutex> g(mu_);
        return all_.size();
    }
    uint64_t retired()
    {
        std::lock_guard<std::mutex> g(mu_);
        return tomb_log_.size();
    }

  private:
    void retire_locked(rsp::rid rid);
    std::mutex mu_;
    unsigned clients_;
    uint64_t next_ = 1;
    std::vector<rsp::rid> active_;
    std::unordered_map<rsp::rid, size_t> pos_;
    std::unordered_set<rsp::rid> tomb_;
    std::vector<rsp::rid> tomb_log_;
    struct Pending {
        rsp::rid rid;
        uint64_t mask;
    };
    std::deque<Pending> pending_;
    std::vector<rsp::rid> all_;
    std::vector<rsp::rid> hot_;
};

// ---------------------------------------------------------------------------
// Slot memory through the pool's block views (pool.try_block). The content of a slot is a pure
// function of one 64-bit value V: block 0 ("tag", i64) of layer 0 element 0
// holds V itself, every other element a hash of (V, layer, block, element)
// (never zero). V = 0 is the zero state. Any thread (plain memory; the pool's
// events order it against the device worker).
class Storage
{
  public:
    bool init(const rsp::pool &pool, rsp::pool_config &cfg, Checks &checks);
    uint64_t read_tag(int32_t slot) const;
    bool is_zero(int32_t slot, std::string *why) const;
    bool matches(int32_t slot, uint64_t v, std::string *why) const;
    void write(int32_t slot, uint64_t v) const;

  private:
    struct Span {
        uint8_t *data;
        rsp_dtype dtype;
        size_t esize;
        int64_t slot_stride;          // elements
        std::vector<int64_t> offsets; // elements, inside one slot
        uint32_t layer, block;
    };
    void expected(const Span &s, uint64_t v, size_t e, uint8_t out[8]) const;
    std::vector<Span> spans_; // layer-major
};

// The toy recurrence: the state a forward writes from the state it read.
uint64_t next_state(rsp::rid rid, rsp::label label, rsp::step_id step, uint64_t prev);

// ---------------------------------------------------------------------------
// What partitions get for each live step (immutable once pushed, except the
// two counters).
enum RowKind : uint8_t {
    ROW_PAD = 0, // must address pad_index, has_state false
    ROW_HOLD,    // model knows it: has_state and V are exact
    ROW_UNKNOWN, // request removed around the step: only self-consistency
};

struct RowRecord {
    rsp::rid rid;
    rsp::label label;
    uint32_t label_pos; // index in that label's addressing vector
    RowKind kind;
    bool has_state;
    uint64_t v;
};

struct StepRecord {
    rsp::step_id step_id{0};
    bool end = false; // no more steps: partitions exit
    bool capture = false;
    std::vector<rsp::label> labels; // first-appearance order
    std::vector<RowRecord> rows;    // declaration order
    std::atomic<unsigned> acks{0};  // partitions holding the plan
    std::atomic<unsigned> done{0};  // partitions done with the forward
    std::mutex mu;
    std::condition_variable cv; // acks moved
};

class RecordQueue
{
  public:
    void push(std::shared_ptr<StepRecord> r);
    // Next record, or nullptr after the timeout.
    std::shared_ptr<StepRecord> pop(std::chrono::nanoseconds timeout);

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<StepRecord>> q_;
};

// ---------------------------------------------------------------------------
struct Context {
    explicit Context(const Options &o) : opt(o), checks(o.print_failures), reg(o.clients)
    {
    }
    Options opt;
    rsp::host_fence fence; // forward-done timeline of the step thread (outlives the pool)
    rsp::pool pool;
    rsp_pool_info info{};
    Checks checks;
    Registry reg;
    Storage storage;
    rsp::label labels[kNumLabels] = {};
    std::vector<std::unique_ptr<RecordQueue>> queues; // one per partition

    std::atomic<bool> stop{false};  // clients and step thread wind down
    std::atomic<bool> abort{false}; // a hang: everybody leaves at once

    // Progress counters (relaxed; statistics only).
    std::atomic<uint64_t> steps{0}, refused{0}, captures{0}, preplanned{0}, abandoned{0},
        overlapped{0}, invalid{0}, resets{0}, client_msgs{0}, efull{0}, forwards{0},
        rows_checked{0}, rows_removed{0};
    std::atomic<uint32_t> max_pending{0}; // largest pending_release seen in a snapshot
    std::atomic<rsp::step_id> last_step_id{rsp::step_id{0}};
    std::atomic<uint64_t> rank_steps{0}; // two-rank mode: steps whose digests were compared
    // Pipelined mode: steps committed, forwards that ran while a newer step
    // was planned, the most steps in flight at once, rows whose request an
    // earlier step still in flight writes, prefill rows (a request's first
    // write), steps by the number in flight once they were planned (1..4).
    // Then requests removed while steps in flight named them, resets
    // (free = false), newest steps rolled back, rollbacks of the oldest step
    // tried while a later one named its requests.
    std::atomic<uint64_t> pipe_steps{0}, pipe_behind{0}, pipe_overlap{0}, pipe_prefills{0};
    std::atomic<uint64_t> pipe_removed_inflight{0}, pipe_resets{0}, pipe_rollbacks{0},
        pipe_older_probes{0};
    std::atomic<uint64_t> pipe_depth[5]{};
    std::atomic<uint32_t> pipe_max_inflight{0};
    // Mixed-batch mode: steps committed, drafts rejected, draft labels released.
    std::atomic<uint64_t> mixed_steps{0}, mixed_rejected{0}, mixed_released{0};
    std::atomic<uint64_t> spec_steps{0}, spec_accepted{0}; // the speculative mode
    std::atomic<uint64_t> guard_steps{0}, guard_wrong{0};  // guard mode: steps, wrong writes
    // Prefix-reuse mode: steps committed or rolled back, restores verified
    // byte for byte, takes (in steps and by message), evictions and demotions
    // reported, restores of evicted keys refused RSP_ENOKEY, takes skipped
    // for a tier full of pins, engine pins, swaps in, rollbacks of steps with
    // restores, restores from the host tier, takes and swaps refused
    // RSP_ECAPACITY by a tier full of pins, lookups of the concurrent readers
    // (and their hits), restores of a request's own saved state into its slot.
    std::atomic<uint64_t> prefix_steps{0}, prefix_restores{0}, prefix_takes{0}, prefix_evicted{0},
        prefix_demoted{0}, prefix_enokey{0}, prefix_skipped{0}, prefix_pins{0}, prefix_swaps{0},
        prefix_rollbacks{0}, prefix_host_restores{0}, prefix_full{0}, prefix_lookups{0},
        prefix_lookup_hits{0}, prefix_rewinds{0};
    // Disaggregated mode: imports committed (and their bytes), aborted on
    // purpose, refused for room, failed with the transport; probe imports
    // that read zeros after an abort; decode steps; prefill processes
    // spawned and killed; the prefill processes' steps and passed checks.
    std::atomic<uint64_t> disagg_moved{0}, disagg_bytes{0}, disagg_aborted{0}, disagg_refused{0},
        disagg_failed{0}, disagg_probes{0}, disagg_decode_steps{0}, disagg_processes{0},
        disagg_kills{0}, disagg_prefill_steps{0}, disagg_prefill_checks{0}, disagg_batches{0},
        disagg_batched{0};
};

// Remember the largest pending_release seen (evidence that removal during a
// step happened). Any thread.
inline void note_pending(Context &cx, uint32_t pending)
{
    uint32_t cur = cx.max_pending.load(std::memory_order_relaxed);
    while (pending > cur &&
           !cx.max_pending.compare_exchange_weak(cur, pending, std::memory_order_relaxed)) {
    }
}

// A pool of its own (sink included) at the end of a mode: every slot free,
// nothing held or pending, no checkpoint stored, nothing swapped (check kinds
// api, leak). The mode's thread.
void check_pool_empty(Context &cx, rsp::pool &pool, const char *mode, uint32_t max_slots);

// The forward's start: step id's plan read in section (the caller's, so
// that *out's vectors stay valid while it holds it), its main label's
// addressing into *out, and its ready event waited for (kHang), so the
// zeros and copies queued before the forward have run. False when a check
// failed (kinds api and hang, "<mode>: ..."; a hang also sets cx.abort).
// The mode's thread.
bool plan_ready(Context &cx, rsp::read_section &section, rsp::pool &pool, rsp::step_id id,
                const char *mode, rsp::addressing *out);

// Remove rid (rsp_remove); a refusal is a check of kind c reported as
// "<what>: <rsp's message>". may_be_gone: RSP_ENOREQ passes too (a rid the
// mode never ingested, or removed already). Whether the check passed. Any
// thread with its own Checks.
bool remove_rid(Checks &ck, rsp::pool &pool, rsp::rid rid, const char *what, Check c = CHECK_API,
                bool may_be_gone = false);

void client_main(Context &cx, unsigned index);
void step_main(Context &cx);
void partition_main(Context &cx, unsigned index);
void ranks_main(Context &cx);                  // the two-rank mode (ranks.cpp)
void pipeline_main(Context &cx);               // the pipelined mode (pipeline.cpp)
void spec_main(Context &cx, unsigned index);   // the speculative mode (spec.cpp)
void mixed_main(Context &cx, unsigned index);  // the mixed-batch mode (mixed.cpp)
void prefix_main(Context &cx, unsigned index); // the prefix-reuse mode (prefix.cpp)
void disagg_main(Context &cx);                 // the disaggregated mode (disagg.cpp)
void guard_main(Context &cx, unsigned index);  // the guard mode (guard.cpp)

} // namespace stress

#endif
