// rsp-stress: the prefix-reuse mode. A pool of its own per
// thread, with small checkpoint tiers so evictions happen all the time; one
// thread plays the engine: its radix tree of prefixes (here: a map from
// key to what the engine believes is stored), requests that share a few
// "system prompts", steps that restore from the longest stored prefix and
// declare checkpoints at block boundaries, checkpoints taken by message
// (a conversation's state for its next turn), pins while it relies on a
// key, drops, and swap out / in of requests.
//
// The model writes deterministic bytes: the state after block b of prompt p
// is V(p, b) (a chain from the zero state, independent of the request), a
// request's own tokens continue with next_state. So the checker knows the
// bytes every key must hold, and every restored slot is compared byte for
// byte (Storage::matches: every element of every block and layer) before
// the forward overwrites it. Evictions come back through on_checkpoint_evict
// and are pruned from the tree; a later restore of an evicted key must fail
// RSP_ENOKEY (counted, not a failure). The tree is exact after every call
// (each call is synchronous and the callback runs before its answer), so
// rsp_checkpoint_lookup, rsp_checkpoint_query and the stats gauges are
// checked against it. Check kind "ckpt". Thread index even: demotion off;
// odd: checkpoint_demote on.
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <algorithm>
#include <cinttypes>
#include <map>
#include <thread>

namespace stress
{

namespace
{

constexpr unsigned kPrompts = 4;
constexpr unsigned kMaxBlocks = 6;   // a prompt has 2..6 blocks
constexpr int32_t kBlockTokens = 16; // tokens a block (a row's span is in tokens)
constexpr unsigned kReqs = 8;        // requests alive at once
constexpr uint32_t kSlots = 24;      // request slots (sink included): never refused
constexpr uint32_t kDevTier = 6;     // max_checkpoints
constexpr uint32_t kHostTier = 8;    // max_host_checkpoints
constexpr unsigned kMaxUserPins = 2; // keys the engine pins at once at most
constexpr uint64_t kPrefixBit = 1ull << 62;
constexpr uint64_t kConvBit = 1ull << 61;

uint64_t prefix_key(unsigned p, unsigned b)
{
    return (mix64(((uint64_t)p << 32) | b) & ~(3ull << 61)) | kPrefixBit;
}
uint64_t conv_key(rsp::rid rid)
{
    return (mix64(rsp::raw(rid) ^ 0xC0117ull) & ~(3ull << 61)) | kConvBit;
}
uint64_t rewind_key(rsp::rid rid)
{
    return (mix64(rsp::raw(rid) ^ 0x5EEDull) & ~(7ull << 60)) | (1ull << 60);
}
const char *tier_name(rsp_tier t)
{
    return t == RSP_TIER_DEVICE ? "device" : "host";
}

// What the engine believes is stored under a key.
struct Stored {
    uint64_t v;    // the state value the bytes must match
    rsp_tier tier; // where (moved by demotion events)
    unsigned pins; // the engine's own pins (rsp_checkpoint_pin)
    unsigned at;   // rewind keys: the prompt blocks the state holds
};

struct PReq {
    rsp::rid rid{0};
    unsigned prompt = 0, blocks = 0; // prompt and its length in blocks
    unsigned at = 0;                 // prompt blocks the state holds (0 .. blocks)
    unsigned decoded = 0, target = 0;
    bool held = false;      // has a slot (its first step committed)
    uint64_t v = 0;         // the state value (held)
    uint64_t start_key = 0; // a conversation key to start from (0: none)
    bool swapped = false;
};

// The status of a pool call, its error (the message) into e.
template <class T> rsp_status st_of(const rsp::result<T> &r, rsp_error &e)
{
    e = r.error();
    return r.status();
}

// Declare the model's takes and restores in the step (rsp::step::checkpoint,
// rsp::step::restore).
void declare(rsp::step &s, const std::vector<rsp_checkpoint_decl> &takes,
             const std::vector<rsp_restore> &restores)
{
    for (const rsp_checkpoint_decl &t : takes)
        s.checkpoint(rsp::rid{t.rid}, rsp::label{t.label}, t.key, t.tier);
    for (const rsp_restore &x : restores)
        s.restore(rsp::rid{x.rid}, rsp::label{x.label}, x.key);
}

// One row of a step as the model plans it.
struct PRow {
    unsigned k;             // index in reqs_
    uint64_t restore = 0;   // key restored from (0: none)
    uint64_t expect_v = 0;  // the state the forward must read (0: zeros)
    uint64_t write_v = 0;   // the state the forward writes
    unsigned at_before = 0; // prompt blocks the state holds when the row starts
    unsigned at_after = 0;  // prompt blocks held after the step
    bool decode = false;
};

class Prefix
{
  public:
    Prefix(Context &cx, rsp::pool &pool, Storage &st, const rsp::host_fence &fence, unsigned index,
           uint64_t slot_bytes)
        : cx_(cx), pool_(pool), st_(st), fence_(fence),
          rng_(mix64(cx.opt.seed * 7727u + 17 + index)), index_(index), slot_bytes_(slot_bytes)
    {
        for (unsigned p = 0; p < kPrompts; p++) {
            blocks_[p] = 2 + rng_.below(kMaxBlocks - 1);
            chain_[p][0] = 0;
            for (unsigned b = 1; b <= kMaxBlocks; b++)
                chain_[p][b] = mix64(((uint64_t)p << 40) ^ ((uint64_t)b << 20) ^ chain_[p][b - 1] ^
                                     0xB10Cull) |
                               1;
        }
        for (PReq &q : reqs_)
            renew(q, 0);
    }
    bool step();
    void finish();

    // on_checkpoint_evict: the owner thread, during a call of this thread.
    static void on_evict(void *ctx, const rsp_checkpoint_event *ev)
    {
        auto *self = static_cast<Prefix *>(ctx);
        std::lock_guard<std::mutex> g(self->ev_mu_);
        self->events_.push_back(*ev);
    }
    // on_error: the owner thread; a take a commit skipped is reported here.
    static void on_error(void *ctx, const rsp_failure *f)
    {
        auto *self = static_cast<Prefix *>(ctx);
        std::lock_guard<std::mutex> g(self->ev_mu_);
        self->failures_.push_back({f->status, f->kind, f->step_id});
    }

  private:
    rsp::rid fresh()
    {
        return rsp::rid{(uint64_t{5} << 50) + ((uint64_t)index_ << 40) + next_rid_++};
    }
    void renew(PReq &q, uint64_t start_key);
    bool plan_rows(std::vector<PRow> &rows, std::vector<rsp_checkpoint_decl> &takes,
                   std::vector<rsp_restore> &restores);
    bool forward(const std::vector<PRow> &rows, bool write);
    void write_rows(const std::vector<PRow> &rows);
    void after_call(const char *what);
    void apply_takes(const std::vector<rsp_checkpoint_decl> &takes,
                     const std::vector<uint64_t> &values, uint64_t skipped_before);
    void check_lookup(uint64_t key);
    void check_query(uint64_t key);
    void check_stats(const char *when);
    void probe_enokey();
    void probe_pinned();
    void probe_full();
    void skip_step(PReq &q, uint64_t key);
    void msg_take(const PReq &q, uint64_t key, uint64_t after);
    void maybe_swap();
    void maybe_save();
    void maybe_drop();
    void end_requests();
    rsp_checkpoint_info query(uint64_t key, rsp_status *st);

    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    const rsp::host_fence &fence_; // forward_done of steps committed before their writes
    Rng rng_;
    std::vector<int32_t> slots_; // the rows' slots in the last forward (-1: unchecked)
    unsigned index_;
    uint64_t slot_bytes_;
    unsigned blocks_[kPrompts];
    uint64_t chain_[kPrompts][kMaxBlocks + 1];
    PReq reqs_[kReqs];
    std::map<uint64_t, Stored> tree_;   // the engine's view: exactly the pool's key set
    std::vector<uint64_t> evicted_;     // keys gone (evicted or dropped), not taken again
    std::vector<uint64_t> engine_pins_; // keys pinned for the step being built
    std::mutex ev_mu_;
    std::vector<rsp_checkpoint_event> events_; // from on_evict, not yet applied
    struct Failure {
        rsp_status status;
        rsp_msg_kind kind;
        uint64_t step_id;
    };
    std::vector<Failure> failures_; // from on_error
    uint64_t next_rid_ = 1, next_id_ = 1;
    uint64_t last_commit_ = 0; // the last committed step (a take's after_step)
    unsigned swapped_ = 0;
};

void Prefix::renew(PReq &q, uint64_t start_key)
{
    q = PReq{};
    q.rid = fresh();
    q.prompt = rng_.below(kPrompts);
    q.blocks = blocks_[q.prompt];
    q.target = 1 + rng_.below(6);
    q.start_key = start_key;
}

// ---------------------------------------------------------------------------
// The key set: events, takes, and the checks against the pool's own views.

// Apply the evictions the last call reported, in order. Every one must name
// a key the engine knows, in the tier it says, never one the engine pins.
void Prefix::after_call(const char *what)
{
    std::vector<rsp_checkpoint_event> evs;
    {
        std::lock_guard<std::mutex> g(ev_mu_);
        evs.swap(events_);
    }
    Checks &ck = cx_.checks;
    for (const rsp_checkpoint_event &e : evs) {
        auto it = tree_.find(e.key);
        if (!ck.expect(CHECK_CKPT, it != tree_.end() && it->second.tier == e.tier,
                       "prefix %u %s: eviction of key %016" PRIx64 " from the %s tier, which the "
                       "engine %s",
                       index_, what, e.key, tier_name(e.tier),
                       it == tree_.end() ? "does not know" : "has in the other tier"))
            continue;
        ck.expect(CHECK_CKPT, it->second.pins == 0,
                  "prefix %u %s: key %016" PRIx64 " evicted while the engine pins it", index_, what,
                  e.key);
        ck.expect(CHECK_CKPT, !e.demoted || (index_ % 2 == 1 && e.tier == RSP_TIER_DEVICE),
                  "prefix %u %s: key %016" PRIx64 " demoted from the %s tier (demotion %s)", index_,
                  what, e.key, tier_name(e.tier), index_ % 2 ? "on" : "off");
        if (e.demoted) {
            it->second.tier = RSP_TIER_HOST;
            cx_.prefix_demoted.fetch_add(1, std::memory_order_relaxed);
        } else {
            tree_.erase(it);
            evicted_.push_back(e.key);
            cx_.prefix_evicted.fetch_add(1, std::memory_order_relaxed);
        }
    }
    if (evicted_.size() > 64)
        evicted_.erase(evicted_.begin(), evicted_.begin() + 32);
}

// A take the pool did: the key is now stored with these bytes (replacing
// what was under it: the bytes, and the key leaves the evicted list).
static void store(std::map<uint64_t, Stored> &tree, std::vector<uint64_t> &evicted, uint64_t key,
                  uint64_t v, rsp_tier tier)
{
    auto it = tree.find(key);
    unsigned pins = it == tree.end() ? 0 : it->second.pins;
    tree[key] = Stored{v, tier, pins, 0};
    evicted.erase(std::remove(evicted.begin(), evicted.end(), key), evicted.end());
}

void Prefix::apply_takes(const std::vector<rsp_checkpoint_decl> &takes,
                         const std::vector<uint64_t> &values, uint64_t skipped_before)
{
    // Takes first, then the evictions (a commit's takes can evict each other,
    // never themselves: the engine declares only keys it does not have).
    for (size_t i = 0; i < takes.size(); i++)
        store(tree_, evicted_, takes[i].key, values[i], takes[i].tier);
    after_call("commit");
    rsp::result<rsp_stats> s = pool_.try_counters();
    uint64_t skipped = s ? s.value().checkpoints_skipped - skipped_before : 0;
    for (const rsp_checkpoint_decl &t : takes) {
        rsp::read_section section(std::nothrow);
        if (section && !section.has_checkpoint(pool_, t.key) && skipped > 0) {
            // A tier full of pinned checkpoints: the commit skipped the take
            // (counted, reported to on_error). The engine learns it here.
            skipped--;
            tree_.erase(t.key);
            cx_.prefix_skipped.fetch_add(1, std::memory_order_relaxed);
        }
    }
    for (const rsp_checkpoint_decl &t : takes)
        check_lookup(t.key);
}

// rsp_checkpoint_lookup agrees with the tree: present in the tier it says, or not.
void Prefix::check_lookup(uint64_t key)
{
    rsp::read_section section(std::nothrow);
    if (!section)
        return;
    rsp::result<rsp_checkpoint_loc> found = section.try_checkpoint(pool_, key);
    rsp_status st = found.status();
    const rsp_error &e = found.error();
    const rsp_checkpoint_loc loc = found.ok() ? found.value() : rsp_checkpoint_loc{};
    auto it = tree_.find(key);
    if (it == tree_.end())
        cx_.checks.expect(CHECK_CKPT, st == RSP_ENOKEY,
                          "prefix %u: lookup of key %016" PRIx64 " the engine lost: %s", index_,
                          key, st == RSP_OK ? "found" : e.message);
    else
        cx_.checks.expect(CHECK_CKPT,
                          st == RSP_OK && loc.key == key && loc.tier == it->second.tier &&
                              loc.slot >= (int32_t)kSlots,
                          "prefix %u: lookup of stored key %016" PRIx64 " (%s tier): %s, tier %s "
                          "slot %d",
                          index_, key, tier_name(it->second.tier),
                          st == RSP_OK ? "found" : e.message, tier_name(loc.tier), loc.slot);
}

rsp_checkpoint_info Prefix::query(uint64_t key, rsp_status *st)
{
    rsp::result<rsp_checkpoint_info> r = pool_.try_checkpoint_query(key);
    *st = r.status();
    return r.ok() ? r.value() : rsp_checkpoint_info{};
}

// rsp_checkpoint_query agrees with the tree (no step in flight: no step pins).
void Prefix::check_query(uint64_t key)
{
    rsp_status st;
    rsp_checkpoint_info info = query(key, &st);
    auto it = tree_.find(key);
    if (it == tree_.end()) {
        cx_.checks.expect(CHECK_CKPT, st == RSP_ENOKEY,
                          "prefix %u: query of key %016" PRIx64 " the engine lost: %s", index_, key,
                          rsp_strerror(st));
        return;
    }
    cx_.checks.expect(
        CHECK_CKPT,
        st == RSP_OK && info.key == key && info.tier == it->second.tier &&
            info.user_pins == it->second.pins && info.pins == 0 && info.bytes == slot_bytes_,
        "prefix %u: query of key %016" PRIx64 ": %s tier %s (model %s) user pins %u "
        "(model %u) pins %u bytes %" PRIu64,
        index_, key, rsp_strerror(st), tier_name(info.tier), tier_name(it->second.tier),
        info.user_pins, it->second.pins, info.pins, info.bytes);
}

void Prefix::check_stats(const char *when)
{
    rsp::result<rsp_stats> got = pool_.try_stats();
    if (!cx_.checks.expect(CHECK_API, got.ok(), "prefix stats: %s", got.error().message))
        return;
    const rsp_stats &s = got.value();
    uint32_t dev = 0, host = 0;
    for (const auto &kv : tree_)
        (kv.second.tier == RSP_TIER_DEVICE ? dev : host)++;
    cx_.checks.expect(CHECK_CKPT,
                      s.checkpoints_device == dev && s.checkpoints_host == host &&
                          s.swapped_slots == swapped_,
                      "prefix %u %s: stats say %u device + %u host checkpoints, %u swapped slots; "
                      "the engine %u + %u, %u",
                      index_, when, s.checkpoints_device, s.checkpoints_host, s.swapped_slots, dev,
                      host, swapped_);
    cx_.checks.expect(CHECK_STATS,
                      (uint64_t)s.free_slots + s.held_slots + s.pending_release + 1 == kSlots,
                      "prefix %u %s: free %u + held %u + pending %u + sink != %u", index_, when,
                      s.free_slots, s.held_slots, s.pending_release, kSlots);
}

// ---------------------------------------------------------------------------
// Steps

// Choose 1..3 requests and what each does; declare the takes and restores.
bool Prefix::plan_rows(std::vector<PRow> &rows, std::vector<rsp_checkpoint_decl> &takes,
                       std::vector<rsp_restore> &restores)
{
    unsigned idx[kReqs];
    for (unsigned k = 0; k < kReqs; k++)
        idx[k] = k;
    const unsigned n = 1 + rng_.below(3);
    for (unsigned i = 0; i < kReqs && rows.size() < n; i++) {
        std::swap(idx[i], idx[i + rng_.below(kReqs - i)]);
        PReq &q = reqs_[idx[i]];
        if (q.swapped)
            continue;
        PRow r{idx[i]};
        unsigned at = q.at;
        uint64_t v = q.v;
        auto rewind = q.held && rng_.chance(0.1) ? tree_.find(rewind_key(q.rid)) : tree_.end();
        if (rewind != tree_.end()) {
            // Back to a state the request saved (a retry): a restore into
            // a slot it already holds.
            r.restore = rewind->first;
            v = rewind->second.v;
            at = rewind->second.at;
            restores.push_back({rsp::raw(q.rid), RSP_LABEL_MAIN, r.restore});
            cx_.prefix_rewinds.fetch_add(1, std::memory_order_relaxed);
        } else if (!q.held) {
            // New: start from the conversation, else the longest stored prefix.
            auto conv = q.start_key ? tree_.find(q.start_key) : tree_.end();
            if (conv != tree_.end()) {
                r.restore = q.start_key;
                v = conv->second.v;
                at = q.blocks;
            } else {
                for (unsigned b = q.blocks; b >= 1 && !r.restore; b--)
                    if (tree_.count(prefix_key(q.prompt, b))) {
                        r.restore = prefix_key(q.prompt, b);
                        v = chain_[q.prompt][b];
                        at = b;
                    }
            }
            if (r.restore) {
                restores.push_back({rsp::raw(q.rid), RSP_LABEL_MAIN, r.restore});
                // The engine relies on the key from here to the admit.
                if (rng_.chance(0.3) && engine_pins_.size() < kMaxUserPins &&
                    pool_.get() != nullptr) {
                    rsp_error e{};
                    rsp_status st = st_of(pool_.try_checkpoint_pin(r.restore), e);
                    if (cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: pin: %s", index_,
                                          e.message)) {
                        tree_[r.restore].pins++;
                        engine_pins_.push_back(r.restore);
                        cx_.prefix_pins.fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
        }
        r.expect_v = v;
        r.at_before = at;
        if (at < q.blocks) {
            // Prefill up to 2 blocks, ending at a block boundary.
            unsigned to = std::min(q.blocks, at + 1 + rng_.below(2));
            r.write_v = chain_[q.prompt][to];
            r.at_after = to;
            uint64_t key = prefix_key(q.prompt, to);
            bool declared = false;
            for (const rsp_checkpoint_decl &t : takes)
                declared |= t.key == key;
            if (!tree_.count(key) && !declared && rng_.chance(0.8)) {
                rsp_tier tier = rng_.chance(0.15) ? RSP_TIER_HOST : RSP_TIER_DEVICE;
                takes.push_back({rsp::raw(q.rid), RSP_LABEL_MAIN, tier, key});
            }
        } else {
            r.decode = true;
            r.at_after = at;
            r.write_v = next_state(q.rid, rsp::label::main, rsp::step_id{next_id_}, v);
        }
        rows.push_back(r);
    }
    return !rows.empty();
}

// The forward, on this thread: every row reads what the model says (a
// restored row: the checkpoint's bytes), then writes its new state.
bool Prefix::forward(const std::vector<PRow> &rows, bool write)
{
    Checks &ck = cx_.checks;
    const rsp::step_id id{next_id_};
    rsp::read_section section(std::nothrow);
    rsp::addressing am{};
    if (!plan_ready(cx_, section, pool_, id, "prefix", &am))
        return false;
    slots_.assign(rows.size(), -1);
    for (size_t i = 0; i < rows.size(); i++) {
        const PRow &r = rows[i];
        const PReq &q = reqs_[r.k];
        int32_t slot = am.slots()[i];
        bool has = am.has_state()[i];
        if (!ck.expect(CHECK_ADDRESSING, has == (r.expect_v != 0) && slot >= 0,
                       "prefix step %" PRIu64 " rid %" PRIu64 ": slot %d has_state %d, model %d",
                       rsp::raw(id), rsp::raw(q.rid), slot, (int)has, (int)(r.expect_v != 0)))
            continue;
        std::string why;
        bool ok = r.expect_v ? st_.matches(slot, r.expect_v, &why) : st_.is_zero(slot, &why);
        if (r.restore) {
            ck.expect(CHECK_CKPT, ok,
                      "prefix step %" PRIu64 " rid %" PRIu64 " restored from key %016" PRIx64
                      " into slot %d: %s",
                      rsp::raw(id), rsp::raw(q.rid), r.restore, slot, why.c_str());
            cx_.prefix_restores.fetch_add(1, std::memory_order_relaxed);
            auto it = tree_.find(r.restore);
            if (it != tree_.end() && it->second.tier == RSP_TIER_HOST)
                cx_.prefix_host_restores.fetch_add(1, std::memory_order_relaxed);
        } else {
            ck.expect(CHECK_CONTENT, ok, "prefix step %" PRIu64 " rid %" PRIu64 " slot %d: %s",
                      rsp::raw(id), rsp::raw(q.rid), slot, why.c_str());
        }
        slots_[i] = slot;
        if (write)
            st_.write(slot, r.write_v);
    }
    return true;
}

// The forward's writes, after its reads (forward(rows, false)).
void Prefix::write_rows(const std::vector<PRow> &rows)
{
    for (size_t i = 0; i < rows.size() && i < slots_.size(); i++)
        if (slots_[i] >= 0)
            st_.write(slots_[i], rows[i].write_v);
}

bool Prefix::step()
{
    Checks &ck = cx_.checks;
    std::vector<PRow> rows;
    std::vector<rsp_checkpoint_decl> takes;
    std::vector<rsp_restore> restores;
    if (!plan_rows(rows, takes, restores))
        return true;
    std::vector<uint64_t> values;
    for (const rsp_checkpoint_decl &t : takes)
        for (const PRow &r : rows)
            if (rsp::raw(reqs_[r.k].rid) == t.rid)
                values.push_back(r.write_v);
    const rsp::step_id id{next_id_};
    rsp::step s(id);
    bool fresh_only = true;
    for (const PRow &r : rows) {
        const PReq &q = reqs_[r.k];
        s.row(q.rid, rsp::label::main,
              r.decode ? 1 : (int32_t)(r.at_after - r.at_before) * kBlockTokens);
        fresh_only &= !q.held;
    }
    declare(s, takes, restores);
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(s);
    if (!ck.expect(CHECK_CKPT, out.ok() && out.value().ok,
                   "prefix %u: admit of step %" PRIu64 ": %s", index_, rsp::raw(id),
                   out.ok() ? "refused" : out.error().message))
        return false;
    rsp::result<void> r = pool_.try_plan(s);
    if (!ck.expect(CHECK_CKPT, r.ok(), "prefix %u: plan: %s", index_, r.error().message))
        return false;
    // A step restoring a key pins it while in flight.
    for (const rsp_restore &x : restores) {
        rsp_status st;
        rsp_checkpoint_info info = query(x.key, &st);
        ck.expect(CHECK_CKPT, st == RSP_OK && info.pins >= 1,
                  "prefix %u: key %016" PRIx64 " restored by step %" PRIu64 " in flight: %s, "
                  "pins %u",
                  index_, x.key, rsp::raw(id), rsp_strerror(st), info.pins);
    }
    // The pipelining rule: a take by message of a step in flight is refused.
    if (rng_.chance(0.05)) {
        rsp_error e{};
        const PReq &q = reqs_[rows[0].k];
        uint64_t key = conv_key(q.rid) ^ 1;
        rsp_status st = st_of(pool_.try_checkpoint(key, q.rid, rsp::label::main, RSP_TIER_DEVICE,
                                                   rsp::step_id{rsp::raw(id)}),
                              e);
        ck.expect(CHECK_CKPT, st == RSP_EORDER,
                  "prefix %u: take after step %" PRIu64 " in flight: %s, expected RSP_EORDER",
                  index_, rsp::raw(id), rsp_strerror(st));
        after_call("refused take");
        check_lookup(key);
    }
    bool rollback = fresh_only && rng_.chance(0.05);
    // Half the commits go out before the forward's writes, with a
    // forward_done the fence signals after them: the takes must still copy
    // what the forward wrote (they wait for forward_done on the device).
    bool late = !rollback && rng_.chance(0.5);
    if (!forward(rows, !rollback && !late))
        return false;
    if (rollback) {
        // The step never happened: its fresh slots go back, its pins go.
        r = pool_.try_rollback(id);
        ck.expect(CHECK_API, r.ok(), "prefix rollback: %s", r.error().message);
        for (const rsp_restore &x : restores)
            check_query(x.key); // pins 0 again, user pins as the model says
        cx_.prefix_rollbacks.fetch_add(1, std::memory_order_relaxed);
    } else {
        rsp::result<rsp_stats> before = pool_.try_counters();
        r = pool_.try_commit(s, late ? fence_.at(rsp::raw(id)) : rsp::forward_complete());
        if (late) {
            write_rows(rows);
            fence_.signal(rsp::raw(id));
        }
        if (!ck.expect(CHECK_CKPT, r.ok(), "prefix %u: commit: %s", index_, r.error().message))
            return false;
        last_commit_ = rsp::raw(id);
        apply_takes(takes, values, before ? before.value().checkpoints_skipped : 0);
        cx_.prefix_takes.fetch_add(takes.size(), std::memory_order_relaxed);
        for (const PRow &x : rows) {
            PReq &q = reqs_[x.k];
            q.held = true;
            q.v = x.write_v;
            q.at = x.at_after;
            q.decoded += x.decode;
        }
    }
    for (uint64_t key : engine_pins_) {
        rsp_error e{};
        rsp_status st = st_of(pool_.try_checkpoint_unpin(key), e);
        if (ck.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: unpin: %s", index_, e.message))
            tree_[key].pins--;
    }
    engine_pins_.clear();
    next_id_++;
    cx_.prefix_steps.fetch_add(1, std::memory_order_relaxed);
    end_requests();
    maybe_save();
    maybe_swap();
    maybe_drop();
    if (rng_.chance(0.1))
        probe_enokey();
    if (rng_.chance(0.05))
        probe_pinned();
    if (rng_.chance(0.02))
        probe_full();
    if (!tree_.empty()) {
        auto it = tree_.begin();
        std::advance(it, rng_.below((uint32_t)tree_.size()));
        check_query(it->first);
        check_lookup(it->first);
    }
    if (next_id_ % 16 == 0)
        check_stats("step");
    return !cx_.abort.load();
}

// ---------------------------------------------------------------------------
// Message takes, swaps, drops, probes

void Prefix::msg_take(const PReq &q, uint64_t key, uint64_t after)
{
    rsp_tier tier = rng_.chance(0.3) ? RSP_TIER_HOST : RSP_TIER_DEVICE;
    rsp_error e{};
    rsp_status st =
        st_of(pool_.try_checkpoint(key, q.rid, rsp::label::main, tier, rsp::step_id{after}), e);
    auto it = tree_.find(key);
    bool pinned = it != tree_.end() && it->second.pins > 0;
    if (pinned) {
        cx_.checks.expect(CHECK_CKPT, st == RSP_EPINNED,
                          "prefix %u: take of pinned key %016" PRIx64 ": %s, expected RSP_EPINNED",
                          index_, key, rsp_strerror(st));
    } else if (st == RSP_ECAPACITY) {
        cx_.prefix_skipped.fetch_add(1, std::memory_order_relaxed); // a tier full of pins
    } else if (cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: take by message: %s", index_,
                                 e.message)) {
        store(tree_, evicted_, key, q.v, tier);
        cx_.prefix_takes.fetch_add(1, std::memory_order_relaxed);
    }
    after_call("take");
    check_lookup(key);
}

// Finished requests: some save their conversation (a take by message) for
// a next turn that restores from it; all are removed and replaced.
void Prefix::end_requests()
{
    for (PReq &q : reqs_) {
        if (q.swapped || !q.held || q.decoded < q.target)
            continue;
        uint64_t next_start = 0;
        if (rng_.chance(0.5)) {
            uint64_t key = conv_key(q.rid);
            msg_take(q, key, rng_.chance(0.5) ? last_commit_ : 0);
            next_start = key;
        }
        rsp::result<void> r = pool_.try_remove(q.rid);
        cx_.checks.expect(CHECK_API, r.ok(), "prefix remove: %s", r.error().message);
        renew(q, next_start);
    }
}

// Now and then a request saves its state by message, to come back to it.
void Prefix::maybe_save()
{
    PReq &q = reqs_[rng_.below(kReqs)];
    if (!q.held || q.swapped || !rng_.chance(0.05))
        return;
    const uint64_t key = rewind_key(q.rid);
    msg_take(q, key, rng_.chance(0.5) ? last_commit_ : 0);
    auto it = tree_.find(key);
    if (it != tree_.end() && it->second.v == q.v)
        it->second.at = q.at;
}

void Prefix::maybe_swap()
{
    Checks &ck = cx_.checks;
    for (PReq &q : reqs_) {
        if (q.swapped && rng_.chance(0.2)) {
            rsp::result<rsp_admit_outcome> in = pool_.try_swap_in(q.rid);
            rsp_status st = in.status();
            const rsp_error &e = in.error();
            const rsp_admit_outcome out = in.ok() ? in.value() : rsp_admit_outcome{};
            if (ck.expect(CHECK_CKPT, st == RSP_OK && out.ok, "prefix %u: swap in: %s", index_,
                          st == RSP_OK ? "pool full" : e.message)) {
                q.swapped = false;
                swapped_--;
                cx_.prefix_swaps.fetch_add(1, std::memory_order_relaxed);
            }
            after_call("swap in");
        }
    }
    if (swapped_ > 0 || !rng_.chance(0.05))
        return;
    PReq &q = reqs_[rng_.below(kReqs)];
    if (!q.held)
        return;
    rsp_error e{};
    rsp_status st = st_of(pool_.try_swap_out(q.rid), e);
    after_call("swap out");
    if (st == RSP_ECAPACITY)
        return; // the host tier is full of pinned checkpoints: counted as a refusal
    if (!ck.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: swap out: %s", index_, e.message))
        return;
    q.swapped = true;
    swapped_++;
    // A swapped request cannot be in a step.
    rsp::step s(rsp::step_id{next_id_++});
    s.row(q.rid, rsp::label::main, 1);
    rsp_status a = pool_.try_admit(s).status();
    ck.expect(CHECK_CKPT, a == RSP_EORDER,
              "prefix %u: a step naming swapped-out rid %" PRIu64 ": %s, expected RSP_EORDER",
              index_, rsp::raw(q.rid), rsp_strerror(a));
    if (a == RSP_OK)
        (void)pool_.try_rollback(s.id()); // keep going after the failure
}

void Prefix::maybe_drop()
{
    if (tree_.empty() || !rng_.chance(0.03))
        return;
    auto it = tree_.begin();
    std::advance(it, rng_.below((uint32_t)tree_.size()));
    uint64_t key = it->first;
    rsp_error e{};
    rsp_status st = st_of(pool_.try_checkpoint_drop(key), e);
    if (it->second.pins) {
        cx_.checks.expect(CHECK_CKPT, st == RSP_EPINNED,
                          "prefix %u: drop of pinned key: %s, expected RSP_EPINNED", index_,
                          rsp_strerror(st));
    } else if (cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: drop: %s", index_,
                                 e.message)) {
        tree_.erase(it);
        evicted_.push_back(key);
    }
    after_call("drop");
    check_lookup(key);
}

// A restore of a key the pool evicted (or dropped): a typed admit failure,
// nothing changed. Counted; the engine would recompute the prefix.
void Prefix::probe_enokey()
{
    if (evicted_.empty())
        return;
    uint64_t key = evicted_[rng_.below((uint32_t)evicted_.size())];
    PReq *q = nullptr;
    for (PReq &x : reqs_)
        if (!x.held && !x.swapped)
            q = &x;
    if (!q)
        return;
    rsp::step s(rsp::step_id{next_id_++});
    s.row(q->rid, rsp::label::main, kBlockTokens);
    s.restore(q->rid, rsp::label::main, key);
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(s);
    if (cx_.checks.expect(CHECK_CKPT, out.status() == RSP_ENOKEY,
                          "prefix %u: restore of evicted key %016" PRIx64 ": %s, expected "
                          "RSP_ENOKEY",
                          index_, key, out.ok() ? "admitted" : out.error().message))
        cx_.prefix_enokey.fetch_add(1, std::memory_order_relaxed);
    if (out.ok())
        (void)pool_.try_rollback(s.id()); // keep going after the failure
    rsp::result<rsp_holding> h = pool_.try_holding(q->rid, rsp::label::main);
    cx_.checks.expect(CHECK_CKPT, h.status() == RSP_ENOREQ,
                      "prefix %u: a refused restore left rid %" PRIu64 " a holding: %s", index_,
                      rsp::raw(q->rid), rsp_strerror(h.status()));
}

// Pins hold: drop and take of a pinned key are refused, unpin at zero too.
void Prefix::probe_pinned()
{
    if (tree_.empty())
        return;
    auto it = tree_.begin();
    std::advance(it, rng_.below((uint32_t)tree_.size()));
    const uint64_t key = it->first;
    rsp_error e{};
    rsp_status st = st_of(pool_.try_checkpoint_unpin(key), e);
    cx_.checks.expect(CHECK_CKPT, st == RSP_EINVAL,
                      "prefix %u: unpin of an unpinned key: %s, expected RSP_EINVAL", index_,
                      rsp_strerror(st));
    st = st_of(pool_.try_checkpoint_pin(key), e);
    if (!cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: pin: %s", index_, e.message))
        return;
    it->second.pins++;
    check_query(key);
    st = st_of(pool_.try_checkpoint_drop(key), e);
    cx_.checks.expect(CHECK_CKPT, st == RSP_EPINNED,
                      "prefix %u: drop of a pinned key: %s, expected RSP_EPINNED", index_,
                      rsp_strerror(st));
    for (const PReq &q : reqs_)
        if (q.held && !q.swapped) {
            msg_take(q, key, 0); // must be refused RSP_EPINNED
            break;
        }
    st = st_of(pool_.try_checkpoint_unpin(key), e);
    if (cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: unpin: %s", index_, e.message))
        it->second.pins--;
    check_query(key);
}

// A tier full of pinned checkpoints has no victim: a take into it is
// RSP_ECAPACITY, and so is a swap out into a full host tier; nothing
// changes (no eviction reported).
void Prefix::probe_full()
{
    const PReq *held = nullptr;
    for (const PReq &q : reqs_)
        if (q.held && !q.swapped)
            held = &q;
    if (!held)
        return;
    uint32_t count[RSP_TIER_COUNT_] = {0, swapped_};
    std::vector<uint64_t> pinned;
    for (auto &kv : tree_) {
        rsp_error e{};
        rsp_status st = st_of(pool_.try_checkpoint_pin(kv.first), e);
        if (!cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: pin: %s", index_, e.message))
            continue;
        kv.second.pins++;
        pinned.push_back(kv.first);
        count[kv.second.tier]++;
    }
    const uint32_t cap[RSP_TIER_COUNT_] = {kDevTier, kHostTier};
    for (int t = 0; t < RSP_TIER_COUNT_; t++) {
        if (count[t] != cap[t])
            continue;
        const uint64_t key = conv_key(held->rid) ^ 2;
        rsp_error e{};
        rsp_status st = st_of(
            pool_.try_checkpoint(key, held->rid, rsp::label::main, (rsp_tier)t, rsp::step_id{0}),
            e);
        if (cx_.checks.expect(CHECK_CKPT, st == RSP_ECAPACITY,
                              "prefix %u: take into a %s tier full of pins: %s, expected "
                              "RSP_ECAPACITY",
                              index_, tier_name((rsp_tier)t), rsp_strerror(st)))
            cx_.prefix_full.fetch_add(1, std::memory_order_relaxed);
        if (st == RSP_OK)
            store(tree_, evicted_, key, held->v, (rsp_tier)t); // keep the model exact
        if (t == RSP_TIER_DEVICE)
            skip_step(*const_cast<PReq *>(held), key ^ 4);
        if (t == RSP_TIER_HOST) {
            st = st_of(pool_.try_swap_out(held->rid), e);
            if (cx_.checks.expect(CHECK_CKPT, st == RSP_ECAPACITY,
                                  "prefix %u: swap out into a host tier full of pins: %s, "
                                  "expected RSP_ECAPACITY",
                                  index_, rsp_strerror(st)))
                cx_.prefix_full.fetch_add(1, std::memory_order_relaxed);
            if (st == RSP_OK) {
                const_cast<PReq *>(held)->swapped = true;
                swapped_++;
            }
        }
        after_call("take into a full tier");
        check_lookup(key);
    }
    for (uint64_t key : pinned) {
        rsp_error e{};
        rsp_status st = st_of(pool_.try_checkpoint_unpin(key), e);
        if (cx_.checks.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: unpin: %s", index_, e.message))
            tree_[key].pins--;
    }
}

// A step declaring a take into the device tier full of pins: the commit is
// never refused, the take is skipped, counted and reported to on_error.
void Prefix::skip_step(PReq &q, uint64_t key)
{
    Checks &ck = cx_.checks;
    const rsp::step_id id{next_id_};
    PRow r{(unsigned)(&q - reqs_)};
    r.expect_v = q.v;
    r.write_v = next_state(q.rid, rsp::label::main, id, q.v);
    r.at_after = q.at;
    r.decode = true;
    rsp::step s(id);
    s.row(q.rid, rsp::label::main, 1);
    s.checkpoint(q.rid, rsp::label::main, key, RSP_TIER_DEVICE);
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(s);
    if (!ck.expect(CHECK_CKPT, out.ok() && out.value().ok, "prefix %u: admit: %s", index_,
                   out.ok() ? "refused" : out.error().message))
        return;
    rsp::result<void> planned = pool_.try_plan(s);
    if (!ck.expect(CHECK_CKPT, planned.ok(), "prefix %u: plan: %s", index_,
                   planned.error().message) ||
        !forward({r}, true))
        return;
    rsp::result<rsp_stats> before = pool_.try_stats();
    rsp::result<void> c = pool_.try_commit(s, rsp::forward_complete());
    rsp::result<rsp_stats> after = pool_.try_stats();
    if (!ck.expect(CHECK_CKPT, c.ok() && before.ok() && after.ok(), "prefix %u: commit: %s", index_,
                   c.error().message))
        return;
    next_id_++;
    last_commit_ = rsp::raw(id);
    q.v = r.write_v;
    q.decoded++;
    std::vector<Failure> fs;
    {
        std::lock_guard<std::mutex> g(ev_mu_);
        fs.swap(failures_);
    }
    bool told = false;
    for (const Failure &f : fs)
        told |= f.status == RSP_ECAPACITY && f.kind == RSP_MSG_COMMIT && f.step_id == rsp::raw(id);
    ck.expect(CHECK_CKPT,
              after.value().checkpoints_skipped == before.value().checkpoints_skipped + 1 && told,
              "prefix %u: a take into a tier full of pins at step %" PRIu64
              "'s commit: skipped %" PRIu64 " -> %" PRIu64 ", on_error %s",
              index_, rsp::raw(id), before.value().checkpoints_skipped,
              after.value().checkpoints_skipped, told ? "told" : "not told");
    cx_.prefix_skipped.fetch_add(1, std::memory_order_relaxed);
    after_call("skipped take");
    check_lookup(key);
}

void Prefix::finish()
{
    Checks &ck = cx_.checks;
    for (PReq &q : reqs_) {
        rsp::result<void> r = pool_.try_remove(q.rid); // a swapped request too
        ck.expect(CHECK_API, r.ok(), "prefix remove: %s", r.error().message);
    }
    swapped_ = 0;
    for (auto it = tree_.begin(); it != tree_.end();) {
        rsp_error e{};
        rsp_status st = st_of(pool_.try_checkpoint_drop(it->first), e);
        ck.expect(CHECK_CKPT, st == RSP_OK, "prefix %u: final drop: %s", index_, e.message);
        it = tree_.erase(it);
    }
    after_call("final drops");
    check_pool_empty(cx_, pool_, "prefix", kSlots);
}

// A partition thread asking whether keys are stored, without a message,
// while the engine takes, evicts, demotes and drops them: every answer is
// RSP_OK with a sane place (the key asked, a slot of the tier it names) or
// RSP_ENOKEY. Odd pools' readers are QSBR readers (quiescent every 16
// lookups, then a pause). Its own thread, until stop.
void lookup_reader(Context &cx, const rsp::pool &pool, unsigned index,
                   const std::atomic<bool> &stop)
{
    const bool qsbr = index % 2 == 1;
    std::unique_ptr<rsp::reader> reg(qsbr ? new rsp::reader(rsp::qsbr, std::nothrow)
                                          : new rsp::reader(std::nothrow));
    if (!cx.checks.expect(CHECK_API, reg->ok(), "prefix lookup reader: %s", reg->error().message))
        return;
    Rng rng(mix64(cx.opt.seed * 131u + index));
    uint64_t n = 0, hits = 0;
    while (!stop.load(std::memory_order_relaxed) && !cx.abort.load(std::memory_order_relaxed)) {
        const uint64_t key = prefix_key(rng.below(kPrompts), 1 + rng.below(kMaxBlocks));
        rsp_status st;
        rsp_checkpoint_loc loc{};
        {
            rsp::read_section section(std::nothrow);
            rsp::result<rsp_checkpoint_loc> got = section.try_checkpoint(pool, key);
            st = got.status();
            if (got.ok())
                loc = got.value();
        }
        const int32_t lo =
            loc.tier == RSP_TIER_DEVICE ? (int32_t)kSlots : (int32_t)(kSlots + kDevTier);
        const int32_t hi = lo + (int32_t)(loc.tier == RSP_TIER_DEVICE ? kDevTier : kHostTier);
        bool ok = st == RSP_ENOKEY || (st == RSP_OK && loc.key == key &&
                                       (loc.tier == RSP_TIER_DEVICE || loc.tier == RSP_TIER_HOST) &&
                                       loc.slot >= lo && loc.slot < hi);
        if (!cx.checks.expect(CHECK_CKPT, ok,
                              "prefix %u reader: lookup of %016" PRIx64 ": %s, key %016" PRIx64
                              " tier %d slot %d",
                              index, key, rsp_strerror(st), loc.key, (int)loc.tier, loc.slot))
            break;
        hits += st == RSP_OK;
        if (++n % 16 == 0) {
            // A partition asks a few keys a step, not in a tight loop: leave
            // the 2 cores to the engine and the owner.
            if (qsbr)
                (void)reg->try_quiescent();
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    cx.prefix_lookups.fetch_add(n, std::memory_order_relaxed);
    cx.prefix_lookup_hits.fetch_add(hits, std::memory_order_relaxed);
}

// A pool callback (owner thread) handed on to the engine, once it exists:
// ctx points at the engine pointer.
template <class Event, void (*Fn)(void *, const Event *)> void to_engine(void *ctx, const Event *e)
{
    if (Prefix *p = *static_cast<Prefix **>(ctx))
        Fn(p, e);
}

} // namespace

void prefix_main(Context &cx, unsigned index)
{
    rsp::pool_config cfg;
    cfg.layers(2).slots(kSlots);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("conv", RSP_DTYPE_U8, {5});
    cfg.block("ssm", RSP_DTYPE_F32, {2, 3});
    cfg.checkpoints(kDevTier, kHostTier, index % 2 == 1);
    // The fence outlives the pool (its destroy waits for what it waits on).
    rsp::result<rsp::host_fence> fence = rsp::host_fence::try_create();
    if (!cx.checks.expect(CHECK_API, fence.ok(), "prefix fence: %s", fence.error().message))
        return;
    std::unique_ptr<Prefix> engine;
    // The callback needs the engine, the engine needs the pool: the context
    // pointer is set before the pool exists and read only during calls.
    Prefix *slot = nullptr;
    cfg.on_checkpoint_evict(to_engine<rsp_checkpoint_event, &Prefix::on_evict>, &slot);
    cfg.on_error(to_engine<rsp_failure, &Prefix::on_error>, &slot);
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "prefix pool create: %s",
                          created.error().message))
        return;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    if (!storage.init(pool, cfg, cx.checks))
        return;
    rsp::result<rsp_pool_info> info = pool.try_info();
    if (!cx.checks.expect(CHECK_API, info.ok(), "prefix pool info: %s", info.error().message))
        return;
    rsp::reader reg(std::nothrow);
    if (!cx.checks.expect(CHECK_API, reg.ok(), "prefix thread: %s", reg.error().message))
        return;
    engine.reset(new Prefix(cx, pool, storage, fence.value(), index, info.value().slot_bytes));
    slot = engine.get();
    std::atomic<bool> stop{false};
    std::thread reader(lookup_reader, std::ref(cx), std::cref(pool), index, std::cref(stop));
    while (!cx.stop.load(std::memory_order_relaxed) && !cx.abort.load())
        if (!engine->step())
            break;
    stop.store(true);
    reader.join();
    if (cx.stop.load() && !cx.abort.load())
        engine->finish();
    (void)pool.try_close();
}

} // namespace stress
