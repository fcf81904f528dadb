// rsp-stress: checks, the request registry, slot memory access, record queues.
// SPDX-License-Identifier: Apache-2.0
#include "stress.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace stress
{

uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

uint64_t next_state(rsp::rid rid, rsp::label label, rsp::step_id step, uint64_t prev)
{
    // |1: a written state is never the zero state, so a missed write or a
    // stray zeroing can not pass for the right content.
    uint64_t h =
        mix64(rsp::raw(rid) * 0x9E3779B97F4A7C15ull ^ mix64(rsp::raw(label) + 0x51ED27ull) ^
              mix64(rsp::raw(step) * 0xD6E8FEB86659FD93ull) ^ mix64(prev + 0x2545F491ull));
    return h | 1;
}

// ---------------------------------------------------------------------------
// Checks

const char *Checks::name(Check c)
{
    static const char *const names[CHECK_COUNT_] = {
        "api",     "invalid", "layout",       "addressing", "unique",   "generation",
        "stage",   "vectors", "zeros",        "content",    "stats",    "refusal",
        "holding", "leak",    "hang",         "ranks",      "pipeline", "mixed",
        "ckpt",    "overlap", "newest_first", "spec",       "disagg",   "guard",
    };
    return (c >= 0 && c < CHECK_COUNT_) ? names[c] : "?";
}

void Checks::vfail(Check c, const char *fmt, va_list ap)
{
    failed_[c].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(print_mu_);
    if (print_left_ == 0)
        return;
    if (--print_left_ == 0) {
        std::fprintf(stderr, "FAIL [%s] (further failure details suppressed)\n", name(c));
    }
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::fprintf(stderr, "FAIL [%s] %s\n", name(c), buf);
    std::fflush(stderr);
}

bool Checks::expect(Check c, bool ok, const char *fmt, ...)
{
    if (ok) {
        pass(c);
        return true;
    }
    va_list ap;
    va_start(ap, fmt);
    vfail(c, fmt, ap);
    va_end(ap);
    return false;
}

void Checks::fail(Check c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, fmt, ap);
    va_end(ap);
}

uint64_t Checks::total_passed() const
{
    uint64_t n = 0;
    for (int c = 0; c < CHECK_COUNT_; c++)
        n += passed((Check)c);
    return n;
}

uint64_t Checks::total_failed() const
{
    uint64_t n = 0;
    for (int c = 0; c < CHECK_COUNT_; c++)
        n += failed((Check)c);
    return n;
}

// ---------------------------------------------------------------------------
// Registry

rsp::rid Registry::create(unsigned client)
{
    std::lock_guard<std::mutex> g(mu_);
    rsp::rid rid{next_++};
    pos_[rid] = active_.size();
    active_.push_back(rid);
    all_.push_back(rid);
    if (clients_ > 1) {
        pending_.push_back({rid, 1ull << (client % 64)});
        // Keep the backlog short: a rid nobody else got to is simply ingested fewer times.
        while (pending_.size() > 256)
            pending_.pop_front();
    }
    return rid;
}

bool Registry::take_pending(unsigned client, rsp::rid *rid)
{
    std::lock_guard<std::mutex> g(mu_);
    uint64_t bit = 1ull << (client % 64);
    uint64_t full = clients_ >= 64 ? ~0ull : (1ull << clients_) - 1;
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (tomb_.count(it->rid)) {
            it = pending_.erase(it);
            continue;
        }
        if (!(it->mask & bit)) {
            it->mask |= bit;
            *rid = it->rid;
            if ((it->mask & full) == full)
                pending_.erase(it);
            return true;
        }
        ++it;
    }
    return false;
}

void Registry::retire_locked(rsp::rid rid)
{
    auto p = pos_.find(rid);
    if (p == pos_.end())
        return;
    size_t i = p->second;
    rsp::rid last = active_.back();
    active_[i] = last;
    pos_[last] = i;
    active_.pop_back();
    pos_.erase(rid);
    tomb_.insert(rid);
    tomb_log_.push_back(rid);
}

bool Registry::retire_random(Rng &rng, rsp::rid *rid)
{
    std::lock_guard<std::mutex> g(mu_);
    if (active_.empty())
        return false;
    *rid = active_[rng.below((uint32_t)active_.size())];
    retire_locked(*rid);
    return true;
}

void Registry::set_hot(const std::vector<rsp::rid> &rids)
{
    std::lock_guard<std::mutex> g(mu_);
    hot_ = rids;
}

bool Registry::retire_hot(Rng &rng, rsp::rid *rid)
{
    std::lock_guard<std::mutex> g(mu_);
    for (int tries = 0; tries < 4 && !hot_.empty(); tries++) {
        rsp::rid r = hot_[rng.below((uint32_t)hot_.size())];
        if (pos_.count(r)) {
            *rid = r;
            retire_locked(r);
            return true;
        }
    }
    return false;
}

bool Registry::retire(rsp::rid rid)
{
    std::lock_guard<std::mutex> g(mu_);
    if (!pos_.count(rid))
        return false;
    retire_locked(rid);
    return true;
}

size_t Registry::active_count()
{
    std::lock_guard<std::mutex> g(mu_);
    return active_.size();
}

void Registry::sample(Rng &rng, size_t k, std::vector<rsp::rid> &out)
{
    out.clear();
    std::lock_guard<std::mutex> g(mu_);
    size_t n = active_.size();
    if (k > n)
        k = n;
    // Partial Fisher-Yates over a scratch copy of indices would cost O(n);
    // rejection of repeats is cheap for k << n and exact for any k.
    std::unordered_set<size_t> seen;
    while (out.size() < k) {
        size_t i = rng.below((uint32_t)n);
        if (seen.insert(i).second)
            out.push_back(active_[i]);
    }
}

bool Registry::tombstoned(rsp::rid rid)
{
    std::lock_guard<std::mutex> g(mu_);
    return tomb_.count(rid) != 0;
}

size_t Registry::tombstones_since(size_t from, std::vector<rsp::rid> &out)
{
    out.clear();
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = from; i < tomb_log_.size(); i++)
        out.push_back(tomb_log_[i]);
    return tomb_log_.size();
}

std::vector<rsp::rid> Registry::all()
{
    std::lock_guard<std::mutex> g(mu_);
    return all_;
}

// ---------------------------------------------------------------------------
// Storage

bool Storage::init(const rsp::pool &pool, rsp::pool_config &config, Checks &checks)
{
    auto local = config.try_shard_shapes();
    if (!checks.expect(CHECK_API, local.ok(), "shard_shapes: %s", local.error().message))
        return false;
    const rsp_pool_config &cfg = config.get();
    bool ok = true;
    for (uint32_t layer = 0; layer < cfg.num_layers; layer++) {
        for (uint32_t b = 0; b < cfg.num_blocks; b++) {
            const rsp_block_config &bc = cfg.blocks[b];
            auto view = pool.try_block(bc.name, layer);
            if (!checks.expect(CHECK_API, view.ok(), "pool.block(%s, %u): %s", bc.name, layer,
                               view.error().message)) {
                ok = false;
                continue;
            }
            const rsp_block_view &v = view.value();
            bool shape_ok = v.data != nullptr && v.dtype == bc.dtype && v.ndim == bc.ndim + 1 &&
                            v.shape[0] == (int64_t)cfg.max_slots;
            int64_t expect_stride = 1;
            for (int d = (int)bc.ndim; d >= 1 && shape_ok; d--) {
                shape_ok = v.shape[d] == local.value()[b][d - 1] && v.strides[d] == expect_stride;
                expect_stride *= v.shape[d];
            }
            shape_ok = shape_ok && v.strides[0] == expect_stride;
            if (!checks.expect(CHECK_LAYOUT, shape_ok,
                               "block %s layer %u: view ndim %u shape[0] %" PRId64
                               " stride[0] %" PRId64 " does not match the sharded config",
                               bc.name, layer, v.ndim, v.shape[0], v.strides[0])) {
                ok = false;
                continue;
            }
            Span s;
            s.data = static_cast<uint8_t *>(v.data);
            s.dtype = v.dtype;
            s.esize = rsp_dtype_size(v.dtype);
            s.slot_stride = v.strides[0];
            s.layer = layer;
            s.block = b;
            // Every element offset of one slot, by walking the multi-index with the
            // view's own strides (what a kernel would do).
            std::vector<int64_t> idx(v.ndim, 0);
            for (;;) {
                int64_t off = 0;
                for (uint32_t d = 1; d < v.ndim; d++)
                    off += idx[d] * v.strides[d];
                s.offsets.push_back(off);
                uint32_t d = v.ndim - 1;
                while (d >= 1 && ++idx[d] == v.shape[d]) {
                    idx[d] = 0;
                    d--;
                }
                if (d == 0)
                    break;
            }
            spans_.push_back(std::move(s));
        }
    }
    if (ok && (spans_.empty() || spans_[0].dtype != RSP_DTYPE_I64)) {
        checks.fail(CHECK_LAYOUT, "block 0 must be an i64 tag block");
        ok = false;
    }
    return ok;
}

void Storage::expected(const Span &s, uint64_t v, size_t e, uint8_t out[8]) const
{
    if (v == 0) {
        std::memset(out, 0, 8);
        return;
    }
    if (s.layer == 0 && s.block == 0 && e == 0) {
        std::memcpy(out, &v, 8);
        return;
    }
    uint64_t h = mix64(v ^ mix64(((uint64_t)s.layer << 40) ^ ((uint64_t)s.block << 24) ^ e));
    switch (s.dtype) {
    case RSP_DTYPE_U8:
    case RSP_DTYPE_I8: {
        uint8_t x = (uint8_t)(h | 1);
        std::memcpy(out, &x, 1);
        break;
    }
    case RSP_DTYPE_F32: {
        float x = (float)((h & 0xFFFF) + 1);
        std::memcpy(out, &x, 4);
        break;
    }
    case RSP_DTYPE_F64: {
        double x = (double)((h & 0xFFFFFF) + 1);
        std::memcpy(out, &x, 8);
        break;
    }
    case RSP_DTYPE_I32: {
        uint32_t x = (uint32_t)(h | 1);
        std::memcpy(out, &x, 4);
        break;
    }
    case RSP_DTYPE_F16:
    case RSP_DTYPE_BF16: {
        uint16_t x = (uint16_t)((h & 0x3FFF) | 0x0100); // a finite, non-zero bit pattern
        std::memcpy(out, &x, 2);
        break;
    }
    default: {
        uint64_t x = h | 1;
        std::memcpy(out, &x, 8);
        break;
    }
    }
}

uint64_t Storage::read_tag(int32_t slot) const
{
    const Span &s = spans_[0];
    uint64_t v;
    std::memcpy(&v, s.data + (size_t)(slot * s.slot_stride + s.offsets[0]) * s.esize, 8);
    return v;
}

bool Storage::is_zero(int32_t slot, std::string *why) const
{
    for (const Span &s : spans_) {
        const uint8_t *base = s.data + (size_t)(slot * s.slot_stride) * s.esize;
        for (size_t e = 0; e < s.offsets.size(); e++) {
            const uint8_t *p = base + (size_t)s.offsets[e] * s.esize;
            for (size_t k = 0; k < s.esize; k++) {
                if (p[k]) {
                    if (why) {
                        char buf[128];
                        std::snprintf(buf, sizeof buf, "layer %u block %u element %zu is not zero",
                                      s.layer, s.block, e);
                        *why = buf;
                    }
                    return false;
                }
            }
        }
    }
    return true;
}

bool Storage::matches(int32_t slot, uint64_t v, std::string *why) const
{
    uint8_t want[8];
    for (const Span &s : spans_) {
        const uint8_t *base = s.data + (size_t)(slot * s.slot_stride) * s.esize;
        for (size_t e = 0; e < s.offsets.size(); e++) {
            expected(s, v, e, want);
            if (std::memcmp(base + (size_t)s.offsets[e] * s.esize, want, s.esize) != 0) {
                if (why) {
                    char buf[160];
                    std::snprintf(buf, sizeof buf,
                                  "layer %u block %u element %zu differs from state %016" PRIx64,
                                  s.layer, s.block, e, v);
                    *why = buf;
                }
                return false;
            }
        }
    }
    return true;
}

void Storage::write(int32_t slot, uint64_t v) const
{
    uint8_t want[8];
    for (const Span &s : spans_) {
        uint8_t *base = s.data + (size_t)(slot * s.slot_stride) * s.esize;
        for (size_t e = 0; e < s.offsets.size(); e++) {
            expected(s, v, e, want);
            std::memcpy(base + (size_t)s.offsets[e] * s.esize, want, s.esize);
        }
    }
}

void check_pool_empty(Context &cx, rsp::pool &pool, const char *mode, uint32_t max_slots)
{
    rsp::result<rsp_stats> got = pool.try_stats();
    if (!cx.checks.expect(CHECK_API, got.ok(), "%s stats: %s", mode, got.error().message))
        return;
    const rsp_stats &s = got.value();
    cx.checks.expect(CHECK_LEAK,
                     s.free_slots == max_slots - 1 && s.held_slots == 0 && s.pending_release == 0 &&
                         s.checkpoints_device == 0 && s.checkpoints_host == 0 &&
                         s.swapped_slots == 0,
                     "%s pool at the end: free %u of %u, held %u, pending %u, checkpoints %u + "
                     "%u, swapped %u",
                     mode, s.free_slots, max_slots - 1, s.held_slots, s.pending_release,
                     s.checkpoints_device, s.checkpoints_host, s.swapped_slots);
}

bool plan_ready(Context &cx, rsp::read_section &section, rsp::pool &pool, rsp::step_id id,
                const char *mode, rsp::addressing *out)
{
    Checks &ck = cx.checks;
    rsp::plan_view p = section ? section.plan(pool, id) : rsp::plan_view(nullptr);
    if (!ck.expect(CHECK_API, p && p.id() == id, "%s: step %" PRIu64 "'s plan missing", mode,
                   rsp::raw(id)))
        return false;
    rsp::result<rsp::addressing> am = p.try_addressing(rsp::label::main);
    if (!ck.expect(CHECK_API, am.ok(), "%s: addressing: %s", mode, am.error().message))
        return false;
    rsp::result<void> w = pool.try_event_wait(am.value().ready(), kHang);
    if (!ck.expect(CHECK_HANG, w.ok(), "%s: ready: %s", mode, rsp_strerror(w.status()))) {
        cx.abort.store(true);
        return false;
    }
    *out = am.value();
    return true;
}

bool remove_rid(Checks &ck, rsp::pool &pool, rsp::rid rid, const char *what, Check c,
                bool may_be_gone)
{
    rsp::result<void> r = pool.try_remove(rid);
    return ck.expect(c, r.ok() || (may_be_gone && r.status() == RSP_ENOREQ), "%s: %s", what,
                     r.error().message);
}

// ---------------------------------------------------------------------------
// RecordQueue

void RecordQueue::push(std::shared_ptr<StepRecord> r)
{
    {
        std::lock_guard<std::mutex> g(mu_);
        q_.push_back(std::move(r));
    }
    cv_.notify_one();
}

std::shared_ptr<StepRecord> RecordQueue::pop(std::chrono::nanoseconds timeout)
{
    std::unique_lock<std::mutex> g(mu_);
    if (!cv_.wait_for(g, timeout, [&] { return !q_.empty(); }))
        return nullptr;
    auto r = std::move(q_.front());
    q_.pop_front();
    return r;
}

} // namespace stress
