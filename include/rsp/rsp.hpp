// rsp.hpp: the C++17 face of rsp (header-only, over include/rsp/rsp.h).
// SPDX-License-Identifier: Apache-2.0
//
// What it adds to the C API, nothing else:
//   - Callbacks that may throw: the pool's on_error / on_checkpoint_evict
//     go through trampolines that catch at the C boundary and keep what
//     was thrown (pool::callback_exceptions, pool::callback_exception).
//   - RAII: rsp::pool (close on destruction), rsp::host_fence,
//     rsp::plan_ref, rsp::reader (thread registration; rsp::qsbr for a QSBR
//     reader), rsp::read_section,
//     rsp::ticket (waited for, or its reply dropped, exactly once).
//   - Errors the caller's way: every fallible call `f` throws rsp::error
//     (status + message); its twin `try_f` returns rsp::result<T> and never
//     throws. Both cost the same C call. A constructor cannot be a try_
//     call: rsp::reader and rsp::read_section take std::nothrow instead and
//     report status().
//   - Strong types: rsp::rid, rsp::label, rsp::step_id (enum classes: no
//     silent mixing of a rid with a step id); std::chrono timeouts
//     (rsp::forever, rsp::poll); rsp::span, a pointer + length view (C++17
//     has none).
//   - rsp::step: a step declaration that owns its rows and forks, so the
//     rsp_step it hands to the pool never points at freed memory;
//     rsp::msg builds the messages pool::post sends from the same types.
//   - Ordered pools driven synchronously (each pool numbers its own
//     calls), and rsp::tp_group: the pools of a tensor-parallel group's
//     ranks, every message to every rank under one number, the answers
//     compared and a divergence reported naming the ranks.
//
// Threads, blocking and costs are those of the C function each method
// calls (named in its comment); see rsp.h and docs/ordering.md. Nothing here
// locks or allocates except rsp::step's vectors, rsp::pool_config's (and the
// shapes its shard_shapes returns), the std::string of an rsp::error, and
// one small object per rsp::pool (made at create).
#ifndef RSP_RSP_HPP
#define RSP_RSP_HPP

#include <rsp/rsp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsp
{

// ---------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------

/// A request id (the engine's; 64 bits). rsp::rid{42}.
enum class rid : std::uint64_t {};
/// A label id, from pool::label(name); label::main is always 0.
enum class label : std::uint32_t { main = RSP_LABEL_MAIN };
/// A step id, chosen by the caller, increasing.
enum class step_id : std::uint64_t {};
/// A checkpoint's key, chosen by the caller (a prefix hash, say).
/// rsp::checkpoint_key{h}.
enum class checkpoint_key : std::uint64_t {};

constexpr std::uint64_t raw(rid r) noexcept
{
    return static_cast<std::uint64_t>(r);
}
constexpr std::uint32_t raw(label l) noexcept
{
    return static_cast<std::uint32_t>(l);
}
constexpr std::uint64_t raw(step_id s) noexcept
{
    return static_cast<std::uint64_t>(s);
}
constexpr std::uint64_t raw(checkpoint_key k) noexcept
{
    return static_cast<std::uint64_t>(k);
}

// ---------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------

using nanoseconds = std::chrono::nanoseconds;
/// Wait as long as it takes (RSP_WAIT_FOREVER).
constexpr nanoseconds forever = nanoseconds::max();
/// Do not wait (RSP_WAIT_POLL).
constexpr nanoseconds poll = nanoseconds::zero();

/// A std::chrono duration as rsp's timeout: negative is poll, forever (or
/// anything that does not fit) is RSP_WAIT_FOREVER.
template <class Rep, class Period>
constexpr std::uint64_t timeout_ns(std::chrono::duration<Rep, Period> d) noexcept
{
    if (d <= d.zero())
        return RSP_WAIT_POLL;
    if (d >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(forever))
        return RSP_WAIT_FOREVER;
    const auto ns = std::chrono::duration_cast<nanoseconds>(d).count();
    return static_cast<std::uint64_t>(ns);
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// What a throwing call throws: the status and the pool's message.
class error : public std::runtime_error
{
  public:
    explicit error(const rsp_error &e)
        : std::runtime_error(e.message[0] ? e.message : rsp_strerror(e.status)), status_(e.status)
    {
    }
    error(rsp_status st, const char *what) : std::runtime_error(what), status_(st)
    {
    }
    rsp_status status() const noexcept
    {
        return status_;
    }

  private:
    rsp_status status_;
};

namespace detail
{
inline rsp_error failure(rsp_status st, const char *what)
{
    rsp_error e{};
    e.status = st;
    std::strncpy(e.message, what, sizeof e.message - 1);
    return e;
}
} // namespace detail

/// A value or the rsp_error that explains why there is none: what every
/// try_ call returns. Test it (if (r) / r.ok()), then take value() (throws
/// rsp::error when there is none) or error().
template <class T> class result
{
  public:
    result(T v) : ok_(true), value_(std::move(v))
    {
    } // NOLINT: implicit on purpose
    result(const rsp_error &e) : ok_(false), err_(e)
    {
    } // NOLINT
    bool ok() const noexcept
    {
        return ok_;
    }
    explicit operator bool() const noexcept
    {
        return ok_;
    }
    rsp_status status() const noexcept
    {
        return ok_ ? RSP_OK : err_.status;
    }
    const rsp_error &error() const noexcept
    {
        return err_;
    }
    T &value() &
    {
        if (!ok_)
            throw rsp::error(err_);
        return value_;
    }
    T value() &&
    {
        if (!ok_)
            throw rsp::error(err_);
        return std::move(value_);
    }

  private:
    bool ok_;
    T value_{};
    rsp_error err_{};
};

/// result<void>: a status and its message.
template <> class result<void>
{
  public:
    result() = default;
    result(const rsp_error &e) : err_(e)
    {
    } // NOLINT
    bool ok() const noexcept
    {
        return err_.status == RSP_OK;
    }
    explicit operator bool() const noexcept
    {
        return ok();
    }
    rsp_status status() const noexcept
    {
        return err_.status;
    }
    const rsp_error &error() const noexcept
    {
        return err_;
    }
    void value() const
    {
        if (!ok())
            throw rsp::error(err_);
    }

  private:
    rsp_error err_{};
};

namespace detail
{
/// The result of a C call that filled `e` on failure.
inline result<void> done(rsp_status st, const rsp_error &e)
{
    if (st == RSP_OK)
        return {};
    rsp_error out = e;
    out.status = st; // a call may fail without a message (rsp_read_begin)
    if (!out.message[0])
        std::strncpy(out.message, rsp_strerror(st), sizeof out.message - 1);
    return out;
}
/// A list's length as rsp_msg::num_rids: past RSP_MAX_MSG_RIDS it stays past
/// it (the C call refuses it) instead of wrapping around.
inline std::uint32_t rid_count(std::size_t n) noexcept
{
    return n > RSP_MAX_MSG_RIDS ? RSP_MAX_MSG_RIDS + 1 : static_cast<std::uint32_t>(n);
}
/// The kinds an ordered pool handles without a number (rsp.h, at rsp_post).
inline bool seq_exempt(rsp_msg_kind k) noexcept
{
    return k == RSP_MSG_STATS || k == RSP_MSG_HOLDING || k == RSP_MSG_CHECKPOINT_QUERY ||
           k == RSP_MSG_BARRIER || k == RSP_MSG_SHUTDOWN;
}
/// A STEP reply as rsp_step_next's outcome.
inline rsp_step_outcome step_outcome(const rsp_reply &r) noexcept
{
    rsp_step_outcome o{};
    o.committed = r.committed;
    o.admit = r.admit;
    o.planned = r.planned;
    o.plan_step_id = r.plan_step_id;
    o.plan_staged = r.plan_staged;
    o.plan_digest = r.plan_digest;
    return o;
}
template <class T> result<T> done(rsp_status st, const rsp_error &e, T v)
{
    if (st == RSP_OK)
        return v;
    return done(st, e).error();
}
} // namespace detail

/// A failure nobody reads an answer of (rsp_failure), typed: what a
/// pool_config::on_error std::function receives. Valid during the call
/// only (message points into the pool's buffer).
struct failure {
    rsp_status status = RSP_OK;
    rsp_msg_kind kind = RSP_MSG_INGEST;    ///< the message that failed
    std::optional<step_id> step;           ///< its step, when the kind names one
    std::optional<checkpoint_key> skipped; ///< a take its commit skipped: the key
    std::string_view message;              ///< why

    static failure of(const rsp_failure &f) noexcept
    {
        failure out;
        out.status = f.status;
        out.kind = f.kind;
        if (f.has_step)
            out.step = step_id{f.step_id};
        if (f.has_checkpoint_key)
            out.skipped = checkpoint_key{f.checkpoint_key};
        out.message = f.message ? std::string_view(f.message) : std::string_view();
        return out;
    }
};
/// The engine's callbacks, as std::function (pool_config::on_error,
/// on_checkpoint_evict). They run on the owner thread and must not block
/// or call the pool; what they throw is caught (rsp::pool).
using error_handler = std::function<void(const failure &)>;
using evict_handler = std::function<void(const rsp_checkpoint_event &)>;

/// Whether the librsp this program loaded serves code built against rsp
/// major.minor (rsp_version_check); the default is this header's version.
/// pool::try_create checks it first, so a mismatched library is a clear
/// error naming both versions at pool creation, not misread structs. Any
/// thread, O(1).
inline result<void> check_version(std::uint32_t major = RSP_VERSION_MAJOR,
                                  std::uint32_t minor = RSP_VERSION_MINOR) noexcept
{
    rsp_error e{};
    return detail::done(rsp_version_check(major, minor, &e), e);
}

// ---------------------------------------------------------------------------
// span: pointer + length
// ---------------------------------------------------------------------------

/// A view of n contiguous T owned elsewhere (std::span of C++20, trimmed).
template <class T> class span
{
  public:
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size)
    {
    }
    template <class V>
    span(V &v) noexcept : data_(v.data()), size_(v.size()) // NOLINT: vectors, arrays
    {
    }
    constexpr T *data() const noexcept
    {
        return data_;
    }
    constexpr std::size_t size() const noexcept
    {
        return size_;
    }
    constexpr bool empty() const noexcept
    {
        return size_ == 0;
    }
    constexpr T &operator[](std::size_t i) const noexcept
    {
        return data_[i];
    }
    constexpr T *begin() const noexcept
    {
        return data_;
    }
    constexpr T *end() const noexcept
    {
        return data_ + size_;
    }

  private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// A pool configuration that owns its blocks and their names.
/// pool_config cfg; cfg.layers(48).slots(257).block("conv", RSP_DTYPE_BF16, {4, 8192});
class pool_config
{
  public:
    pool_config() noexcept
    {
        rsp_pool_config_init(&cfg_);
    }
    pool_config &layers(std::uint32_t n) noexcept
    {
        cfg_.num_layers = n;
        return *this;
    }
    pool_config &slots(std::uint32_t max_slots) noexcept
    {
        cfg_.max_slots = max_slots;
        return *this;
    }
    pool_config &sink(bool on) noexcept
    {
        cfg_.sink = on;
        return *this;
    }
    pool_config &rank(std::uint32_t rank, std::uint32_t world_size) noexcept
    {
        cfg_.rank = rank;
        cfg_.world_size = world_size;
        return *this;
    }
    pool_config &cuda(int ordinal) noexcept
    {
        cfg_.device = RSP_DEVICE_CUDA;
        cfg_.cuda_ordinal = ordinal;
        return *this;
    }
    /// rsp_pool_config::on_error: called on the owner thread for each failed
    /// message nobody reads the answer of (fire-and-forget, a forgotten
    /// ticket). It must not block or call the pool. An exception it throws
    /// is caught before it reaches the C library (where it would call
    /// std::terminate): counted and kept on the rsp::pool
    /// (callback_exceptions(), callback_exception()), the first said on
    /// stderr; the pool goes on. That wrapping is rsp::pool::create's: a C
    /// pool made from get() calls fn as it is.
    pool_config &on_error(void (*fn)(void *ctx, const rsp_failure *failure), void *ctx) noexcept
    {
        cfg_.on_error = fn;
        cfg_.on_error_ctx = ctx;
        error_fn_ = nullptr;
        return *this;
    }
    /// The same as a std::function taking an rsp::failure (typed: its step
    /// and the key of a skipped take); replaces a function pointer set
    /// before, as that replaces this. Kept in the rsp::pool (copied at
    /// create); get() does not carry it, so a C pool made from get() has
    /// none.
    pool_config &on_error(error_handler fn)
    {
        error_fn_ = std::move(fn);
        cfg_.on_error = nullptr;
        cfg_.on_error_ctx = nullptr;
        return *this;
    }
    const error_handler &error_function() const noexcept
    {
        return error_fn_;
    }
    pool_config &inbox(std::uint32_t capacity) noexcept
    {
        cfg_.inbox_capacity = capacity;
        return *this;
    }
    pool_config &inflight_steps(std::uint32_t n) noexcept
    {
        cfg_.max_inflight_steps = n;
        return *this;
    }
    /// Pin the owner thread to a CPU (rsp.h, rsp_pool_config::owner_cpu);
    /// -1: not pinned. Checked by the pool at creation.
    pool_config &owner_cpu(int cpu) noexcept
    {
        cfg_.owner_cpu = cpu;
        return *this;
    }
    /// Checkpoint slots (rsp.h, rsp_pool_config::max_checkpoints): `device`
    /// on the device tier, `host` in host memory; `demote`: a device-tier
    /// victim moves to the host tier instead of being dropped.
    pool_config &checkpoints(std::uint32_t device, std::uint32_t host = 0,
                             bool demote = false) noexcept
    {
        cfg_.max_checkpoints = device;
        cfg_.max_host_checkpoints = host;
        cfg_.checkpoint_demote = demote;
        return *this;
    }
    /// rsp_pool_config::checkpoint_policy and checkpoint_value_weight: which
    /// checkpoint a full tier evicts (RSP_CHECKPOINT_LRU or _VALUE).
    pool_config &checkpoint_policy(rsp_checkpoint_policy policy, double weight = 0) noexcept
    {
        cfg_.checkpoint_policy = policy;
        cfg_.checkpoint_value_weight = weight;
        return *this;
    }
    /// rsp_pool_config::on_checkpoint_evict: called on the owner thread for
    /// each checkpoint evicted for room. Must not block or call the pool;
    /// an exception is caught and kept as on_error's (the eviction stands).
    pool_config &on_checkpoint_evict(void (*fn)(void *ctx, const rsp_checkpoint_event *event),
                                     void *ctx) noexcept
    {
        cfg_.on_checkpoint_evict = fn;
        cfg_.on_checkpoint_evict_ctx = ctx;
        evict_fn_ = nullptr;
        return *this;
    }
    /// The same as a std::function (kept as on_error(error_handler) is).
    pool_config &on_checkpoint_evict(evict_handler fn)
    {
        evict_fn_ = std::move(fn);
        cfg_.on_checkpoint_evict = nullptr;
        cfg_.on_checkpoint_evict_ctx = nullptr;
        return *this;
    }
    const evict_handler &evict_function() const noexcept
    {
        return evict_fn_;
    }
    /// Record every message the owner handles, with its reply, to `path`
    /// (rsp_pool_config::record_path; rsp-replay replays it). "" records
    /// nothing. The path is kept here, so the config may outlive `path`.
    pool_config &record(std::string path)
    {
        record_path_ = std::move(path);
        return *this;
    }
    /// Ordered posting (rsp.h, at rsp_post): slot-changing messages carry a
    /// number (msg::seq) and are handled in its order; a gap open longer
    /// than reorder_timeout (zero: 1 s) breaks the pool.
    pool_config &ordered(bool on = true, std::chrono::nanoseconds reorder_timeout = {}) noexcept
    {
        cfg_.ordered = on;
        cfg_.reorder_timeout_ns = static_cast<std::uint64_t>(reorder_timeout.count());
        return *this;
    }
    /// Guard mode (rsp_pool_config::guard, docs/guide.md "Debugging"): each
    /// commit checks that the forward wrote no slot it did not address; each
    /// slot found goes to on_error (rsp_failure::guard). For debugging runs.
    pool_config &guard(bool on = true) noexcept
    {
        cfg_.guard = on;
        return *this;
    }
    /// A block of `shape` per slot per layer, sharded over the tensor-parallel
    /// group along `shard_dims`. Checked by the pool at creation, not here
    /// (a name too long or too many dims is the pool's RSP_EINVAL).
    pool_config &block(const std::string &name, rsp_dtype dtype,
                       std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::uint32_t> shard_dims = {})
    {
        rsp_block_config b{};
        b.dtype = dtype;
        b.ndim = static_cast<std::uint32_t>(shape.size());
        std::size_t i = 0;
        for (auto d : shape)
            if (i < RSP_MAX_DIMS)
                b.shape[i++] = d;
        b.num_shard_dims = static_cast<std::uint32_t>(shard_dims.size());
        i = 0;
        for (auto d : shard_dims)
            if (i < RSP_MAX_DIMS)
                b.shard_dims[i++] = d;
        names_.push_back(name);
        blocks_.push_back(b);
        return *this;
    }
    /// rsp_shard_shapes: each block's local shape on this rank (the sharded
    /// axes narrowed for world_size and rank), in the order blocks were added.
    result<std::vector<std::array<std::int64_t, RSP_MAX_DIMS>>> try_shard_shapes()
    {
        const std::size_t n = blocks_.size();
        auto local = std::make_unique<std::int64_t[][RSP_MAX_DIMS]>(n ? n : 1);
        rsp_error e{};
        rsp_status st = rsp_shard_shapes(&get(), local.get(), &e);
        std::vector<std::array<std::int64_t, RSP_MAX_DIMS>> out(n);
        for (std::size_t b = 0; b < n; b++)
            for (std::size_t d = 0; d < RSP_MAX_DIMS; d++)
                out[b][d] = local[b][d];
        return detail::done(st, e, std::move(out));
    }
    std::vector<std::array<std::int64_t, RSP_MAX_DIMS>> shard_shapes()
    {
        return try_shard_shapes().value();
    }
    /// The C config, pointing into this object (valid while it lives unchanged).
    const rsp_pool_config &get()
    {
        for (std::size_t i = 0; i < blocks_.size(); i++)
            blocks_[i].name = names_[i].c_str();
        cfg_.blocks = blocks_.data();
        cfg_.num_blocks = static_cast<std::uint32_t>(blocks_.size());
        cfg_.record_path = record_path_.empty() ? nullptr : record_path_.c_str();
        return cfg_;
    }
    /// The C config's plain fields, for what has no setter.
    rsp_pool_config &raw() noexcept
    {
        return cfg_;
    }

  private:
    rsp_pool_config cfg_{};
    std::vector<rsp_block_config> blocks_;
    std::vector<std::string> names_;
    error_handler error_fn_;
    evict_handler evict_fn_;
    std::string record_path_;
};

// ---------------------------------------------------------------------------
// The step declaration
// ---------------------------------------------------------------------------

/// A step that owns its rows and forks: build it once, pass it to admit,
/// plan and commit (all three take it const). Copyable.
class step
{
  public:
    explicit step(step_id id) noexcept
    {
        s_.step_id = raw(id);
    }
    step_id id() const noexcept
    {
        return step_id{s_.step_id};
    }
    /// Start over as an empty declaration of step `id` (no rows, forks,
    /// flags or lease), keeping the vectors' capacity: a step object reused
    /// for every batch allocates nothing once it has seen its largest one.
    step &reset(step_id id) noexcept
    {
        rows_.clear();
        pre_.clear();
        post_.clear();
        ckpts_.clear();
        restores_.clear();
        s_ = rsp_step{};
        s_.step_id = raw(id);
        return *this;
    }
    /// A row of `span` tokens of (r, l); span <= 0 reserves nothing.
    /// fork_group: forks of group 0 and of this group apply to r (every row
    /// of one rid carries the same group; docs/semantics.md 8.2).
    step &row(rid r, label l = label::main, std::int32_t span = 1, std::uint16_t fork_group = 0)
    {
        rsp_row x{};
        x.rid = raw(r);
        x.label = raw(l);
        x.span = span;
        x.fork_group = fork_group;
        rows_.push_back(x);
        return *this;
    }
    /// A padding row (a graph replay's dummy): reserves nothing.
    step &pad(label l = label::main)
    {
        rsp_row x{};
        x.label = raw(l);
        x.padding = true;
        rows_.push_back(x);
        return *this;
    }
    /// Copy `from` onto `to` of every rid of the step (group 0), or of the
    /// rids whose rows carry fork_group `group`, before the forward.
    step &pre_fork(label from, label to, std::uint16_t group = 0)
    {
        pre_.push_back(rsp_fork{raw(from), raw(to), group});
        return *this;
    }
    /// The same after the forward, at commit.
    step &post_fork(label from, label to, std::uint16_t group = 0)
    {
        post_.push_back(rsp_fork{raw(from), raw(to), group});
        return *this;
    }
    /// At commit: r's post-forks are not applied (its draft was rejected),
    /// or are again (on = false). Sets the flag on every row of r; admit
    /// and plan ignore it. O(rows).
    step &skip_post_forks(rid r, bool on = true) noexcept
    {
        for (auto &x : rows_)
            if (x.rid == raw(r))
                x.skip_post_forks = on;
        return *this;
    }
    /// A verify row (docs/semantics.md 9.3): `span` tokens of (r, l) whose
    /// forward writes the state after each token into an output slot of its
    /// own (1 <= span <= RSP_SPEC_MAX_TOKENS); the commit keeps the accepted
    /// one (accept()). The plan's spec_indices(l) gives the slots.
    step &verify_row(rid r, label l, std::int32_t span, std::uint16_t fork_group = 0)
    {
        row(r, l, span, fork_group);
        rows_.back().per_token_states = 1;
        return *this;
    }
    /// At commit: r's verify row of l accepted `accepted` tokens (0 .. span;
    /// 0 keeps the state before the step). Admit and plan ignore it. O(rows).
    step &accept(rid r, label l, std::uint16_t accepted) noexcept
    {
        for (auto &x : rows_)
            if (x.rid == raw(r) && x.label == raw(l) && x.per_token_states)
                x.accepted = accepted;
        return *this;
    }
    /// At commit, take a checkpoint of (r, l) under key in tier: the state
    /// the forward left. (r, l) must be a row of the step with span > 0.
    step &checkpoint(rid r, label l, std::uint64_t key, rsp_tier tier = RSP_TIER_DEVICE)
    {
        rsp_checkpoint_decl c{};
        c.rid = raw(r);
        c.label = raw(l);
        c.key = key;
        c.tier = tier;
        ckpts_.push_back(c);
        return *this;
    }
    /// Start (r, l) from the checkpoint under key (copied in before the
    /// forward, has_state true); a missing key refuses the admit
    /// (RSP_ENOKEY). (r, l) must be a row of the step with span > 0.
    step &restore(rid r, label l, std::uint64_t key)
    {
        rsp_restore x{};
        x.rid = raw(r);
        x.label = raw(l);
        x.key = key;
        restores_.push_back(x);
        return *this;
    }
    step &checkpoint(rid r, label l, checkpoint_key key, rsp_tier tier = RSP_TIER_DEVICE)
    {
        return checkpoint(r, l, raw(key), tier);
    }
    step &restore(rid r, label l, checkpoint_key key)
    {
        return restore(r, l, raw(key));
    }
    /// Drop every row of r, and the checkpoint takes and restores that
    /// name it (they need a row), keeping the order of the rest: a request
    /// the engine takes out of a batch (admit found no room for it, it was
    /// aborted) before the step is admitted again. Returns how many rows
    /// went. Forks stay (they apply per rid or group, to the rids left).
    /// O(rows + takes + restores), no allocation.
    std::size_t drop(rid r) noexcept
    {
        const auto mine = [r](const auto &x) { return x.rid == raw(r); };
        const std::size_t before = rows_.size();
        rows_.erase(std::remove_if(rows_.begin(), rows_.end(), mine), rows_.end());
        ckpts_.erase(std::remove_if(ckpts_.begin(), ckpts_.end(), mine), ckpts_.end());
        restores_.erase(std::remove_if(restores_.begin(), restores_.end(), mine), restores_.end());
        return before - rows_.size();
    }
    /// Drop the row at `index` (of rows()) alone; an index past the end
    /// drops nothing and returns false. Takes and restores stay: drop(rid)
    /// is the call that keeps them consistent. O(rows).
    bool drop_row(std::size_t index) noexcept
    {
        if (index >= rows_.size())
            return false;
        rows_.erase(rows_.begin() + static_cast<std::ptrdiff_t>(index));
        return true;
    }
    step &capture(bool on = true) noexcept
    {
        s_.capture = on;
        return *this;
    }
    step &preplan(bool on = true) noexcept
    {
        s_.preplan = on;
        return *this;
    }
    step &lease(std::uint32_t bucket_bs, std::uint32_t bucket_id, std::uint32_t lease_slot) noexcept
    {
        s_.has_lease = true;
        s_.lease = rsp_lease{bucket_bs, bucket_id, lease_slot};
        return *this;
    }
    /// The rows and forks as declared (the C structs, raw ids).
    span<const rsp_row> rows() const noexcept
    {
        return {rows_.data(), rows_.size()};
    }
    span<const rsp_fork> pre_forks() const noexcept
    {
        return {pre_.data(), pre_.size()};
    }
    span<const rsp_fork> post_forks() const noexcept
    {
        return {post_.data(), post_.size()};
    }
    span<const rsp_checkpoint_decl> checkpoints() const noexcept
    {
        return {ckpts_.data(), ckpts_.size()};
    }
    span<const rsp_restore> restores() const noexcept
    {
        return {restores_.data(), restores_.size()};
    }
    /// The C declaration, pointing into this object: valid while it lives
    /// unchanged. Built on each call (a copy of a few words), so a const
    /// step can be passed on, and read by several threads at once.
    rsp_step get() const noexcept
    {
        rsp_step s = s_;
        s.rows = rows_.data();
        s.num_rows = static_cast<std::uint32_t>(rows_.size());
        s.pre_forks = pre_.data();
        s.num_pre_forks = static_cast<std::uint32_t>(pre_.size());
        s.post_forks = post_.data();
        s.num_post_forks = static_cast<std::uint32_t>(post_.size());
        s.checkpoints = ckpts_.data();
        s.num_checkpoints = static_cast<std::uint32_t>(ckpts_.size());
        s.restores = restores_.data();
        s.num_restores = static_cast<std::uint32_t>(restores_.size());
        return s;
    }

  private:
    rsp_step s_{};
    std::vector<rsp_row> rows_;
    std::vector<rsp_fork> pre_, post_;
    std::vector<rsp_checkpoint_decl> ckpts_;
    std::vector<rsp_restore> restores_;
};

// ---------------------------------------------------------------------------
// Host fences and events
// ---------------------------------------------------------------------------

/// rsp_event_complete: a forward_done saying the forward has already
/// finished (a commit whose rows wrote needs one; every device accepts it).
inline rsp_event forward_complete() noexcept
{
    return rsp_event_complete();
}

/// The host device's timeline (rsp_host_fence_*). Move-only; destroyed with
/// the object (a commit already posted keeps it alive: rsp.h).
class host_fence
{
  public:
    static result<host_fence> try_create() noexcept
    {
        rsp_error e{};
        rsp_host_fence *f = nullptr;
        rsp_status st = rsp_host_fence_create(&f, &e);
        if (st != RSP_OK)
            return detail::done(st, e).error();
        return host_fence(f);
    }
    /// rsp_host_fence_create; throws rsp::error (RSP_ENOMEM).
    static host_fence create()
    {
        return try_create().value();
    }
    host_fence() noexcept = default;
    host_fence(host_fence &&o) noexcept : f_(std::exchange(o.f_, nullptr))
    {
    }
    host_fence &operator=(host_fence &&o) noexcept
    {
        if (this != &o) {
            rsp_host_fence_destroy(f_);
            f_ = std::exchange(o.f_, nullptr);
        }
        return *this;
    }
    host_fence(const host_fence &) = delete;
    host_fence &operator=(const host_fence &) = delete;
    ~host_fence()
    {
        rsp_host_fence_destroy(f_);
    }
    /// The event "this fence reached v" (forward_done of a commit).
    rsp_event at(std::uint64_t v) const noexcept
    {
        return rsp_event_host(f_, v);
    }
    void signal(std::uint64_t v) const noexcept
    {
        rsp_host_fence_signal(f_, v);
    }
    std::uint64_t value() const noexcept
    {
        return rsp_host_fence_value(f_);
    }
    /// rsp_host_fence_wait: RSP_ETIMEDOUT in the result when it expires.
    template <class D = nanoseconds> result<void> wait(std::uint64_t v, D timeout = forever) const
    {
        rsp_status st = rsp_host_fence_wait(f_, v, timeout_ns(timeout));
        return detail::done(st, rsp_error{});
    }
    /// rsp_host_fence_wait on the fence an event names, which the caller
    /// need not own (a plan's ready event on the host device). An event
    /// without a handle is complete (rsp.h): ok at once; one of another kind
    /// is RSP_EINVAL, with no C call.
    template <class D = nanoseconds>
    static result<void> wait_event(const rsp_event &ev, D timeout = forever) noexcept
    {
        if (!ev.handle)
            return {};
        if (ev.kind != RSP_EVENT_HOST_FENCE)
            return detail::failure(RSP_EINVAL, "rsp::host_fence::wait_event: not a host fence");
        rsp_status st = rsp_host_fence_wait(static_cast<const rsp_host_fence *>(ev.handle),
                                            ev.value, timeout_ns(timeout));
        return detail::done(st, rsp_error{});
    }
    rsp_host_fence *get() const noexcept
    {
        return f_;
    }

  private:
    explicit host_fence(rsp_host_fence *f) noexcept : f_(f)
    {
    }
    rsp_host_fence *f_ = nullptr;
};

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

/// The messages pool::post and pool::post_forget send, built with the strong
/// types: pool.post_forget(rsp::msg::remove(r)). Pure (no C call, nothing
/// allocated). A message built from an rsp::step points into it, so post it
/// while the step lives unchanged (rsp_post copies the arrays).
namespace msg
{
/// A message of `kind`, every other field zero (the kinds below fill theirs).
inline rsp_msg of(rsp_msg_kind kind) noexcept
{
    rsp_msg m{};
    m.kind = kind;
    return m;
}
inline rsp_msg ingest(rid r) noexcept
{
    rsp_msg m = of(RSP_MSG_INGEST);
    m.rid = raw(r);
    return m;
}
inline rsp_msg remove(rid r) noexcept
{
    rsp_msg m = of(RSP_MSG_REMOVE);
    m.rid = raw(r);
    return m;
}
inline rsp_msg release(rid r, label l) noexcept
{
    rsp_msg m = of(RSP_MSG_RELEASE);
    m.rid = raw(r);
    m.label = raw(l);
    return m;
}
inline rsp_msg reset(rid r, bool free_slots) noexcept
{
    rsp_msg m = of(RSP_MSG_RESET);
    m.rid = raw(r);
    m.free = free_slots;
    return m;
}
/// Reply: admit (a full pool is reply.admit.ok == false, status RSP_OK).
inline rsp_msg admit(const step &s) noexcept
{
    rsp_msg m = of(RSP_MSG_ADMIT);
    m.step = s.get();
    return m;
}
/// Reply: plan_step_id, plan_staged, plan_digest.
inline rsp_msg plan(const step &s) noexcept
{
    rsp_msg m = of(RSP_MSG_PLAN);
    m.step = s.get();
    return m;
}
inline rsp_msg commit(const step &s, const rsp_event &forward_done = {}) noexcept
{
    rsp_msg m = of(RSP_MSG_COMMIT);
    m.step = s.get();
    m.event = forward_done;
    return m;
}
/// RSP_MSG_STEP: commit prev (nullptr: no commit) with prev_done, then admit
/// and plan s, in one owner turn (rsp_step_next). Reply: committed, admit,
/// planned, plan_step_id, plan_staged, plan_digest. `prev_decl` is where the
/// commit's declaration is kept (m.commit points at it): it and both steps
/// must live unchanged until the post returns.
inline rsp_msg step_next(const step &s, const step *prev, const rsp_event &prev_done,
                         rsp_step &prev_decl) noexcept
{
    rsp_msg m = of(RSP_MSG_STEP);
    m.step = s.get();
    if (prev) {
        prev_decl = prev->get();
        m.commit = &prev_decl;
        m.event = prev_done;
    }
    return m;
}
/// RSP_MSG_STEP without a commit (the first step).
inline rsp_msg step_next(const step &s) noexcept
{
    rsp_msg m = of(RSP_MSG_STEP);
    m.step = s.get();
    return m;
}
/// The vector forms (rsp_ingest_many, ...): rids copied by the post.
inline rsp_msg ingest_many(span<const rid> rids) noexcept
{
    rsp_msg m = of(RSP_MSG_INGEST);
    m.rids = reinterpret_cast<const rsp_rid *>(rids.data());
    m.num_rids = detail::rid_count(rids.size());
    return m;
}
inline rsp_msg remove_many(span<const rid> rids) noexcept
{
    rsp_msg m = ingest_many(rids);
    m.kind = RSP_MSG_REMOVE;
    return m;
}
inline rsp_msg reset_many(span<const rid> rids, bool free_slots) noexcept
{
    rsp_msg m = ingest_many(rids);
    m.kind = RSP_MSG_RESET;
    m.free = free_slots;
    return m;
}
inline rsp_msg rollback(step_id id, const rsp_event &forward_done = {}) noexcept
{
    rsp_msg m = of(RSP_MSG_ROLLBACK);
    m.step.step_id = raw(id);
    m.event = forward_done;
    return m;
}
inline rsp_msg clear_preplan() noexcept
{
    return of(RSP_MSG_CLEAR_PREPLAN);
}
inline rsp_msg build_graph_buffers(std::uint32_t max_bs, std::uint32_t max_seq_len) noexcept
{
    rsp_msg m = of(RSP_MSG_BUILD_GRAPH_BUFFERS);
    m.max_bs = max_bs;
    m.max_seq_len = max_seq_len;
    return m;
}
/// Reply: stats, a consistent snapshot.
inline rsp_msg stats() noexcept
{
    return of(RSP_MSG_STATS);
}
inline rsp_msg barrier() noexcept
{
    return of(RSP_MSG_BARRIER);
}
/// Reply: label. `name` is copied by the post.
inline rsp_msg intern(const char *name) noexcept
{
    rsp_msg m = of(RSP_MSG_LABEL);
    m.label_name = name;
    return m;
}
/// Reply: holding.
inline rsp_msg holding(rid r, label l = label::main) noexcept
{
    rsp_msg m = of(RSP_MSG_HOLDING);
    m.rid = raw(r);
    m.label = raw(l);
    return m;
}
inline rsp_msg shutdown() noexcept
{
    return of(RSP_MSG_SHUTDOWN);
}
/// RSP_MSG_CHECKPOINT (rsp_checkpoint_take): after_step 0 = as the device
/// queue has the slot now.
inline rsp_msg checkpoint(std::uint64_t key, rid r, label l = label::main,
                          rsp_tier tier = RSP_TIER_DEVICE, step_id after_step = step_id{0}) noexcept
{
    rsp_msg m = of(RSP_MSG_CHECKPOINT);
    m.key = key;
    m.rid = raw(r);
    m.label = raw(l);
    m.tier = tier;
    m.after_step = raw(after_step);
    return m;
}
inline rsp_msg checkpoint_drop(std::uint64_t key) noexcept
{
    rsp_msg m = of(RSP_MSG_CHECKPOINT_DROP);
    m.key = key;
    return m;
}
/// pin = false unpins.
inline rsp_msg checkpoint_pin(std::uint64_t key, bool pin = true) noexcept
{
    rsp_msg m = of(RSP_MSG_CHECKPOINT_PIN);
    m.key = key;
    m.pin = pin;
    return m;
}
/// Reply: checkpoint.
inline rsp_msg checkpoint_query(std::uint64_t key) noexcept
{
    rsp_msg m = of(RSP_MSG_CHECKPOINT_QUERY);
    m.key = key;
    return m;
}
inline rsp_msg swap_out(rid r) noexcept
{
    rsp_msg m = of(RSP_MSG_SWAP_OUT);
    m.rid = raw(r);
    return m;
}
/// Reply: admit (a full pool is reply.admit.ok == false, status RSP_OK).
inline rsp_msg swap_in(rid r) noexcept
{
    rsp_msg m = of(RSP_MSG_SWAP_IN);
    m.rid = raw(r);
    return m;
}
/// The checkpoint messages keyed by the strong type.
inline rsp_msg checkpoint(checkpoint_key key, rid r, label l = label::main,
                          rsp_tier tier = RSP_TIER_DEVICE, step_id after_step = step_id{0}) noexcept
{
    return checkpoint(raw(key), r, l, tier, after_step);
}
inline rsp_msg checkpoint_drop(checkpoint_key key) noexcept
{
    return checkpoint_drop(raw(key));
}
inline rsp_msg checkpoint_pin(checkpoint_key key, bool pin = true) noexcept
{
    return checkpoint_pin(raw(key), pin);
}
inline rsp_msg checkpoint_query(checkpoint_key key) noexcept
{
    return checkpoint_query(raw(key));
}
/// m numbered n for an ordered pool (1, 2, 3, ... per pool; rsp.h, "Ordered
/// posting"): e.g. post(msg::seq(msg::ingest(r), n)).
inline rsp_msg seq(rsp_msg m, std::uint64_t n) noexcept
{
    m.seq = n;
    return m;
}
} // namespace msg

// ---------------------------------------------------------------------------
// Tickets
// ---------------------------------------------------------------------------

/// The answer to one posted message, collected once. Move-only. A ticket
/// destroyed unwaited is given up (rsp_ticket_forget): the destructor never
/// blocks, the C ticket is freed once the owner answers, and a failure
/// answered after that is counted and reported like a fire-and-forget one
/// (rsp_stats::posts_failed, rsp_pool_config::on_error).
class ticket
{
  public:
    ticket() noexcept = default;
    explicit ticket(rsp_ticket *t) noexcept : t_(t)
    {
    }
    ticket(ticket &&o) noexcept : t_(std::exchange(o.t_, nullptr))
    {
    }
    ticket &operator=(ticket &&o) noexcept
    {
        if (this != &o) {
            drop();
            t_ = std::exchange(o.t_, nullptr);
        }
        return *this;
    }
    ticket(const ticket &) = delete;
    ticket &operator=(const ticket &) = delete;
    ~ticket()
    {
        drop();
    }
    bool valid() const noexcept
    {
        return t_ != nullptr;
    }
    /// rsp_wait: the reply (its error.status is the operation's status), or
    /// RSP_EAGAIN / RSP_ETIMEDOUT with the ticket still valid.
    template <class D = nanoseconds> result<rsp_reply> try_wait(D timeout = forever)
    {
        if (!t_)
            return detail::failure(RSP_EINVAL, "rsp::ticket: no ticket (already waited for)");
        rsp_reply r{};
        rsp_status st = rsp_wait(t_, timeout_ns(timeout), &r);
        if (st == RSP_EAGAIN || st == RSP_ETIMEDOUT)
            return detail::failure(st, rsp_strerror(st));
        t_ = nullptr;
        if (st != RSP_OK)
            return r.error;
        return r;
    }
    /// The reply of a successful operation; throws rsp::error otherwise.
    template <class D = nanoseconds> rsp_reply wait(D timeout = forever)
    {
        return try_wait(timeout).value();
    }
    /// Give the ticket up without waiting: the object becomes empty and the
    /// caller owns the C ticket (pass it to rsp_wait once). What leaks it
    /// on purpose: a process leaving because the pool hangs, where the
    /// destructor's wait would hang too. No C call.
    rsp_ticket *release() noexcept
    {
        return std::exchange(t_, nullptr);
    }
    /// rsp_ticket_forget: give the answer up now, without waiting (what the
    /// destructor does); the object becomes empty. Never blocks.
    void forget() noexcept
    {
        drop();
    }

  private:
    void drop() noexcept
    {
        if (t_)
            rsp_ticket_forget(std::exchange(t_, nullptr));
    }
    rsp_ticket *t_ = nullptr;
};

// ---------------------------------------------------------------------------
// Closes deferred past a read section
// ---------------------------------------------------------------------------

#if defined(__GNUC__)
// A fixed offset from the thread pointer (as librsp's own read-side
// state), not a __tls_get_addr call, in a -fPIC consumer too:
// read_section::end() reads one of these on every section.
#define RSP_HPP_TLS __attribute__((tls_model("initial-exec")))
#else
#define RSP_HPP_TLS
#endif

namespace detail
{
/// What an rsp::pool keeps beside its C pool, at an address that does not
/// move with the pool object: the engine's callbacks, which the C pool
/// calls through the trampolines below with this as their context, what
/// they threw, and the link of a close deferred past the thread's read
/// section.
struct pool_extra {
    void (*on_error)(void *, const rsp_failure *) = nullptr;
    void *on_error_ctx = nullptr;
    void (*on_evict)(void *, const rsp_checkpoint_event *) = nullptr;
    void *on_evict_ctx = nullptr;
    error_handler error_fn; ///< called instead of on_error when set
    evict_handler evict_fn; ///< called instead of on_evict when set
    bool ordered = false;   ///< the pool numbers messages (immutable after create)
    /// A tp_group's rank: numbered messages come from the group only (a
    /// number one rank took alone would be a gap on the others).
    bool grouped = false;
    std::atomic<std::uint64_t> seq{0};    ///< the last number handed out (any thread)
    std::atomic<std::uint64_t> thrown{0}; ///< exceptions caught (owner writes)
    std::atomic<bool> first_taken{false}; ///< the owner claimed `first`
    std::atomic<bool> first_ready{false}; ///< `first` is written (release)
    std::exception_ptr first;             ///< the first exception caught
    rsp_pool *deferred = nullptr;         ///< the C pool whose close waits
    pool_extra *next = nullptr;           ///< the thread's list of them

    /// An exception escaped a callback (inside its catch): counted; the
    /// first is kept and said on stderr, the later ones only counted (a
    /// callback that throws on every failure would flood it). Owner thread.
    void caught(const char *which, const char *what) noexcept
    {
        thrown.fetch_add(1, std::memory_order_relaxed);
        if (first_taken.exchange(true, std::memory_order_relaxed))
            return;
        first = std::current_exception();
        first_ready.store(true, std::memory_order_release);
        std::fprintf(stderr,
                     "rsp: an exception escaped the %s callback on the pool's owner thread "
                     "(%s): caught, counted (rsp::pool::callback_exceptions) and kept "
                     "(rsp::pool::callback_exception); later ones are only counted\n",
                     which, what ? what : "not a std::exception");
    }
};

/// The C pool's callbacks: the engine's, with every exception caught here,
/// at the C boundary (one unwinding into the owner's C frames would call
/// std::terminate), and noted on the pool (pool_extra::caught).
inline void on_error_trampoline(void *ctx, const rsp_failure *f) noexcept
{
    auto *x = static_cast<pool_extra *>(ctx);
    try {
        if (x->error_fn)
            x->error_fn(failure::of(*f));
        else
            x->on_error(x->on_error_ctx, f);
    } catch (const std::exception &e) {
        x->caught("on_error", e.what());
    } catch (...) {
        x->caught("on_error", nullptr);
    }
}
inline void on_evict_trampoline(void *ctx, const rsp_checkpoint_event *event) noexcept
{
    auto *x = static_cast<pool_extra *>(ctx);
    try {
        if (x->evict_fn)
            x->evict_fn(*event);
        else
            x->on_evict(x->on_evict_ctx, event);
    } catch (const std::exception &e) {
        x->caught("on_checkpoint_evict", e.what());
    } catch (...) {
        x->caught("on_checkpoint_evict", nullptr);
    }
}

/// The calling thread's pools destroyed inside a read section, oldest
/// first, and how many. Trivially destructible, so they stay readable
/// while any other thread_local object of the thread (an rsp::reader) is
/// destroyed.
inline thread_local RSP_HPP_TLS pool_extra *deferred_head = nullptr;
inline thread_local RSP_HPP_TLS std::size_t deferred_count = 0;

/// rsp::close_deferred's work: rsp_pool_close each deferred pool, oldest
/// first, until one is refused (still in a section: so is every other).
inline std::size_t close_deferred_now() noexcept
{
    while (deferred_head) {
        pool_extra *x = deferred_head;
        rsp_status st = rsp_pool_close(x->deferred, nullptr);
        if (st == RSP_EINVAL)
            break; // inside a section (or an online QSBR reader) still
        deferred_head = x->next;
        deferred_count--;
        if (st == RSP_OK)
            delete x;
        // RSP_EFORKED: left with its pool (rsp.h), as a direct close would.
    }
    return deferred_count;
}

/// Closes at thread exit what the thread's sections kept; says on stderr
/// what even that could not close (the thread exits inside a section: an
/// rsp::reader destroyed later still closes them, else they are leaked).
struct deferred_flusher {
    ~deferred_flusher()
    {
        if (close_deferred_now() != 0)
            std::fprintf(stderr,
                         "rsp: a thread exits inside a read section with %zu rsp::pool(s) "
                         "destroyed in it and not yet closed: they close when it is left (an "
                         "rsp::reader destroyed later), else they are leaked\n",
                         deferred_count);
    }
};
inline thread_local deferred_flusher flusher;

/// ~pool inside a read section: the close waits for the thread to leave
/// its sections. No allocation (x was made with the pool).
inline void defer_close(rsp_pool *p, std::unique_ptr<pool_extra> x) noexcept
{
    (void)&flusher; // its destructor runs at thread exit from now on
    x->deferred = p;
    x->next = nullptr;
    pool_extra **at = &deferred_head;
    while (*at)
        at = &(*at)->next;
    *at = x.release();
    deferred_count++;
}
} // namespace detail

/// Pools the calling thread destroyed (rsp::pool's destructor or move
/// assignment) inside a read section, or while an online QSBR reader,
/// whose close waits for it to leave: rsp_pool_close refuses there
/// (destroying waits for a grace period, i.e. for that very section), so
/// the binding keeps the pool running and closes it when the thread's
/// outermost rsp::read_section ends, its rsp::reader goes offline or is
/// destroyed, on close_deferred(), or at thread exit. Calling thread, O(1).
inline std::size_t deferred_closes() noexcept
{
    return detail::deferred_count;
}

/// Close the calling thread's deferred pools now if it is outside every
/// read section (for a section ended with the C rsp_read_end); returns how
/// many are left (0 once all are closed). Calling thread; each close costs
/// an rsp_pool_close, a refused one nothing.
inline std::size_t close_deferred() noexcept
{
    return detail::deferred_count ? detail::close_deferred_now() : 0;
}

// ---------------------------------------------------------------------------
// The pool
// ---------------------------------------------------------------------------

/// One pool. Move-only; the destructor closes it (rsp_pool_close: see
/// rsp.h for what it waits for). Destroyed inside a read section (where
/// rsp_pool_close refuses), it is closed when the thread leaves the
/// section instead (rsp::deferred_closes); until then it runs, so what its
/// callbacks' contexts point at must live that long. Closing waits for every plan reference:
/// let each rsp::plan_ref go first (a thread that closes while it holds one
/// waits for itself; close_timed gives up at its timeout, naming them).
/// Every method may be called from any thread
/// concurrently except create, close and destruction (one thread, after the
/// others stopped) and those rsp.h restricts.
class pool
{
  public:
    /// rsp_pool_create.
    static result<pool> try_create(pool_config &cfg) noexcept
    {
        result<void> v = check_version();
        if (!v)
            return v.error();
        std::unique_ptr<detail::pool_extra> x(new (std::nothrow) detail::pool_extra);
        if (!x)
            return detail::failure(RSP_ENOMEM, "rsp::pool: out of memory");
        // The callbacks go through the trampolines (exceptions caught at
        // the C boundary), with x as their context.
        rsp_pool_config c = cfg.get();
        x->ordered = c.ordered;
        try {
            x->error_fn = cfg.error_function();
            x->evict_fn = cfg.evict_function();
        } catch (...) { // a std::function's copy may allocate
            return detail::failure(RSP_ENOMEM, "rsp::pool: out of memory");
        }
        if (x->error_fn) {
            c.on_error = detail::on_error_trampoline;
            c.on_error_ctx = x.get();
        }
        if (x->evict_fn) {
            c.on_checkpoint_evict = detail::on_evict_trampoline;
            c.on_checkpoint_evict_ctx = x.get();
        }
        if (c.on_error && !x->error_fn) {
            x->on_error = c.on_error;
            x->on_error_ctx = c.on_error_ctx;
            c.on_error = detail::on_error_trampoline;
            c.on_error_ctx = x.get();
        }
        if (c.on_checkpoint_evict && !x->evict_fn) {
            x->on_evict = c.on_checkpoint_evict;
            x->on_evict_ctx = c.on_checkpoint_evict_ctx;
            c.on_checkpoint_evict = detail::on_evict_trampoline;
            c.on_checkpoint_evict_ctx = x.get();
        }
        rsp_error e{};
        rsp_pool *p = nullptr;
        rsp_status st = rsp_pool_create(&c, &p, &e);
        if (st != RSP_OK)
            return detail::done(st, e).error();
        return pool(p, std::move(x));
    }
    static pool create(pool_config &cfg)
    {
        return try_create(cfg).value();
    }
    pool() noexcept = default;
    pool(pool &&o) noexcept : p_(std::exchange(o.p_, nullptr)), x_(std::move(o.x_))
    {
    }
    /// Closes the pool this one held first, as the destructor does.
    pool &operator=(pool &&o) noexcept
    {
        if (this != &o) {
            drop();
            p_ = std::exchange(o.p_, nullptr);
            x_ = std::move(o.x_);
        }
        return *this;
    }
    pool(const pool &) = delete;
    pool &operator=(const pool &) = delete;
    /// rsp_pool_close; inside a read section the close is deferred until
    /// the thread leaves it (rsp::deferred_closes), never dropped.
    ~pool()
    {
        drop();
    }
    /// rsp_pool_close: the pool is gone when it returns ok; a refusal
    /// (inside a read section, in a forked child) leaves it usable.
    result<void> try_close() noexcept
    {
        rsp_error e{};
        rsp_status st = rsp_pool_close(p_, &e);
        if (st == RSP_OK)
            gone();
        return detail::done(st, e);
    }
    void close()
    {
        try_close().value();
    }
    /// rsp_pool_close_timed: close once everything close waits for is
    /// through within timeout (earlier messages, forward_done waits, plan
    /// references, other threads' read sections); else RSP_ETIMEDOUT, the
    /// pool still usable, the message naming what is held ("1 plan
    /// reference held"), and *out (if given) the steps whose forward_done
    /// the device waits for.
    template <class D = nanoseconds>
    result<void> try_close_timed(D timeout, rsp_close_report *out = nullptr) noexcept
    {
        rsp_error e{};
        rsp_status st = rsp_pool_close_timed(p_, timeout_ns(timeout), out, &e);
        if (st == RSP_OK)
            gone();
        return detail::done(st, e);
    }
    template <class D = nanoseconds> void close_timed(D timeout, rsp_close_report *out = nullptr)
    {
        try_close_timed(timeout, out).value();
    }
    rsp_pool *get() const noexcept
    {
        return p_;
    }
    /// Exceptions thrown by this pool's on_error and on_checkpoint_evict
    /// callbacks since its creation. Each was caught at the C boundary, on
    /// the owner thread, right after the callback threw (the pool goes on:
    /// the failure or eviction it was told of stands, counted in rsp_stats
    /// as ever); the first was also said on stderr. 0 for an empty pool.
    /// Any thread, an atomic load: after a call whose answer came after the
    /// callback (a barrier), it counts that callback's exception.
    std::uint64_t callback_exceptions() const noexcept
    {
        return x_ ? x_->thrown.load(std::memory_order_acquire) : 0;
    }
    /// The first of those exceptions, to rethrow (std::rethrow_exception)
    /// or inspect on the caller's thread; null when none was thrown (or it
    /// is being stored right now: callback_exceptions() already counts it).
    /// Any thread; copies an std::exception_ptr.
    std::exception_ptr callback_exception() const noexcept
    {
        if (!x_ || !x_->first_ready.load(std::memory_order_acquire))
            return nullptr;
        return x_->first;
    }

    // Ordered pools (rsp.h, "Ordered posting").
    /// Whether the pool numbers its messages (pool_config::ordered); then
    /// every synchronous call of a numbered kind takes the next number of
    /// the pool's counter, posts its message under it and waits (the C
    /// wrappers carry no number and are refused there). Any thread.
    bool ordered() const noexcept
    {
        return x_ && x_->ordered;
    }
    /// The next number of the pool's sequence (1, 2, 3, ...) for a message
    /// posted by hand: pool.post(msg::seq(m, pool.next_seq())); the
    /// synchronous calls take theirs from the same counter, so the two mix.
    /// A number taken must reach the pool (a gap breaks it after
    /// reorder_timeout): one whose post was refused is closed with
    /// fill_seq. 0 on an empty pool. Any thread, an atomic add.
    std::uint64_t next_seq() noexcept
    {
        return x_ ? x_->seq.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
    }
    /// Post a numbered barrier under n, fire-and-forget, waiting for credit
    /// as long as it takes (the awaited number needs none): it changes
    /// nothing and closes the gap a number taken but never posted leaves.
    result<void> try_fill_seq(std::uint64_t n) noexcept
    {
        rsp_error e{};
        const rsp_msg m = msg::seq(msg::barrier(), n);
        return detail::done(rsp_post(p_, &m, nullptr, RSP_WAIT_FOREVER, &e), e);
    }
    void fill_seq(std::uint64_t n)
    {
        try_fill_seq(n).value();
    }
    /// Post m and wait for its answer (rsp_post with a ticket, rsp_wait):
    /// on an ordered pool a message of a numbered kind with seq 0 takes
    /// next_seq() (a refused post fills its number), so any message works
    /// synchronously there. The reply, or its error; *out (if given) gets
    /// the reply whatever the status (a STEP's committed). A rank of an
    /// rsp::tp_group refuses a numbered kind (RSP_EINVAL): the group posts
    /// those to every rank. Calling thread; one post and one wait.
    result<rsp_reply> try_call(rsp_msg m, rsp_reply *out = nullptr) noexcept
    {
        rsp_error e{};
        const bool number = ordered() && m.seq == 0 && !detail::seq_exempt(m.kind);
        if (number && x_->grouped)
            return detail::failure(RSP_EINVAL, "rsp::pool: a rank of an rsp::tp_group takes "
                                               "numbered messages from its group only");
        if (number)
            m.seq = next_seq();
        rsp_ticket *t = nullptr;
        rsp_status st = rsp_post(p_, &m, &t, RSP_WAIT_FOREVER, &e);
        if (st != RSP_OK) {
            if (number)
                (void)try_fill_seq(m.seq);
            return detail::done(st, e).error();
        }
        rsp_reply r{};
        st = rsp_wait(t, RSP_WAIT_FOREVER, &r);
        if (out)
            *out = r;
        if (st != RSP_OK)
            return detail::done(st, r.error).error();
        return r;
    }
    rsp_reply call(const rsp_msg &m)
    {
        return try_call(m).value();
    }

    // Facts and memory (any thread, no message).
    /// rsp_pool_info_get.
    result<rsp_pool_info> try_info() const noexcept
    {
        rsp_pool_info out{};
        rsp_error e{};
        rsp_status st = rsp_pool_info_get(p_, &out, &e);
        return detail::done(st, e, out);
    }
    rsp_pool_info info() const
    {
        return try_info().value();
    }
    /// rsp_pool_block: the [max_slots, *shape] view of one block of one layer.
    result<rsp_block_view> try_block(const char *name, std::uint32_t layer) const noexcept
    {
        rsp_block_view v{};
        rsp_error e{};
        rsp_status st = rsp_pool_block(p_, name, layer, &v, &e);
        return detail::done(st, e, v);
    }
    rsp_block_view block(const char *name, std::uint32_t layer) const
    {
        return try_block(name, layer).value();
    }
    /// rsp_stats_peek: lock-free, not a snapshot.
    result<rsp_stats> try_counters() const noexcept
    {
        rsp_stats s{};
        rsp_error e{};
        rsp_status st = rsp_stats_peek(p_, &s, &e);
        return detail::done(st, e, s);
    }
    rsp_stats counters() const
    {
        return try_counters().value();
    }

    // Messages, synchronously (the C wrappers: post, then wait).
    /// rsp_label: the id of a label name, interned on first use.
    result<label> try_intern(const char *name) noexcept
    {
        if (numbered())
            return called(msg::intern(name), [](const rsp_reply &r) { return label{r.label}; });
        rsp_label_id id = 0;
        rsp_error e{};
        rsp_status st = rsp_label(p_, name, &id, &e);
        return detail::done(st, e, label{id});
    }
    label intern(const char *name)
    {
        return try_intern(name).value();
    }
    result<void> try_ingest(rid r) noexcept
    {
        if (numbered())
            return called(msg::ingest(r));
        rsp_error e{};
        return detail::done(rsp_ingest(p_, raw(r), &e), e);
    }
    void ingest(rid r)
    {
        try_ingest(r).value();
    }
    result<void> try_remove(rid r) noexcept
    {
        if (numbered())
            return called(msg::remove(r));
        rsp_error e{};
        return detail::done(rsp_remove(p_, raw(r), &e), e);
    }
    void remove(rid r)
    {
        try_remove(r).value();
    }
    /// rsp_release: give back r's slot of l, keep the request.
    result<void> try_release(rid r, label l) noexcept
    {
        if (numbered())
            return called(msg::release(r, l));
        rsp_error e{};
        return detail::done(rsp_release(p_, raw(r), raw(l), &e), e);
    }
    void release(rid r, label l)
    {
        try_release(r, l).value();
    }
    result<void> try_reset(rid r, bool free_slots) noexcept
    {
        if (numbered())
            return called(msg::reset(r, free_slots));
        rsp_error e{};
        return detail::done(rsp_reset(p_, raw(r), free_slots, &e), e);
    }
    void reset(rid r, bool free_slots)
    {
        try_reset(r, free_slots).value();
    }
    /// A full pool is ok with outcome.ok == false (then roll the step back).
    result<rsp_admit_outcome> try_admit(const step &s) noexcept
    {
        if (numbered())
            return called(msg::admit(s), [](const rsp_reply &r) { return r.admit; });
        rsp_admit_outcome out{};
        rsp_error e{};
        const rsp_step c = s.get();
        rsp_status st = rsp_step_admit(p_, &c, &out, &e);
        return detail::done(st, e, out);
    }
    rsp_admit_outcome admit(const step &s)
    {
        return try_admit(s).value();
    }
    result<void> try_plan(const step &s) noexcept
    {
        if (numbered())
            return called(msg::plan(s));
        rsp_error e{};
        const rsp_step c = s.get();
        return detail::done(rsp_step_plan(p_, &c, &e), e);
    }
    void plan(const step &s)
    {
        try_plan(s).value();
    }
    /// forward_done: the event recorded after the step's forward. A default
    /// one ({}) is accepted only when no row wrote (span <= 0 or padding)
    /// or for a capture; rsp::forward_complete() says "the forward is done"
    /// (rsp_step_commit).
    result<void> try_commit(const step &s, const rsp_event &forward_done = {}) noexcept
    {
        if (numbered())
            return called(msg::commit(s, forward_done));
        rsp_error e{};
        const rsp_step c = s.get();
        return detail::done(rsp_step_commit(p_, &c, &forward_done, &e), e);
    }
    void commit(const step &s, const rsp_event &forward_done = {})
    {
        try_commit(s, forward_done).value();
    }
    /// rsp_step_next: commit prev (nullptr: no commit) with prev_done, then
    /// admit s and plan it, one round trip. A full pool is ok with
    /// outcome.admit.ok == false (the commit stands). On an error, *out (if
    /// given) still says what was done (outcome.committed: the commit stands).
    result<rsp_step_outcome> try_step_next(const step &s, const step *prev = nullptr,
                                           const rsp_event &prev_done = {},
                                           rsp_step_outcome *out = nullptr) noexcept
    {
        if (numbered()) {
            rsp_step decl{};
            rsp_reply r{};
            auto res = try_call(msg::step_next(s, prev, prev_done, decl), &r);
            if (out)
                *out = detail::step_outcome(r);
            if (!res)
                return res.error();
            return detail::step_outcome(r);
        }
        rsp_step_outcome o{};
        rsp_error e{};
        const rsp_step c = s.get();
        rsp_step pc{};
        if (prev)
            pc = prev->get();
        rsp_status st = rsp_step_next(p_, &c, prev ? &pc : nullptr, &prev_done, &o, &e);
        if (out)
            *out = o;
        return detail::done(st, e, o);
    }
    rsp_step_outcome step_next(const step &s, const step *prev = nullptr,
                               const rsp_event &prev_done = {})
    {
        return try_step_next(s, prev, prev_done).value();
    }
    /// rsp_ingest_many / rsp_remove_many / rsp_reset_many: one message for
    /// the whole list, all or nothing (a rid listed twice: RSP_EINVAL).
    result<void> try_ingest_many(span<const rid> rids) noexcept
    {
        if (numbered())
            return called(msg::ingest_many(rids));
        static_assert(sizeof(rid) == sizeof(rsp_rid), "rid is an rsp_rid");
        rsp_error e{};
        return detail::done(rsp_ingest_many(p_, reinterpret_cast<const rsp_rid *>(rids.data()),
                                            detail::rid_count(rids.size()), &e),
                            e);
    }
    void ingest_many(span<const rid> rids)
    {
        try_ingest_many(rids).value();
    }
    result<void> try_remove_many(span<const rid> rids) noexcept
    {
        if (numbered())
            return called(msg::remove_many(rids));
        rsp_error e{};
        return detail::done(rsp_remove_many(p_, reinterpret_cast<const rsp_rid *>(rids.data()),
                                            detail::rid_count(rids.size()), &e),
                            e);
    }
    void remove_many(span<const rid> rids)
    {
        try_remove_many(rids).value();
    }
    result<void> try_reset_many(span<const rid> rids, bool free_slots) noexcept
    {
        if (numbered())
            return called(msg::reset_many(rids, free_slots));
        rsp_error e{};
        return detail::done(rsp_reset_many(p_, reinterpret_cast<const rsp_rid *>(rids.data()),
                                           detail::rid_count(rids.size()), free_slots, &e),
                            e);
    }
    void reset_many(span<const rid> rids, bool free_slots)
    {
        try_reset_many(rids, free_slots).value();
    }
    result<void> try_rollback(step_id id, const rsp_event &forward_done = {}) noexcept
    {
        if (numbered())
            return called(msg::rollback(id, forward_done));
        rsp_error e{};
        return detail::done(rsp_step_rollback(p_, raw(id), &forward_done, &e), e);
    }
    void rollback(step_id id, const rsp_event &forward_done = {})
    {
        try_rollback(id, forward_done).value();
    }
    result<void> try_clear_preplan() noexcept
    {
        if (numbered())
            return called(msg::clear_preplan());
        rsp_error e{};
        return detail::done(rsp_step_unstage(p_, &e), e);
    }
    void clear_preplan()
    {
        try_clear_preplan().value();
    }
    result<void> try_build_graph_buffers(std::uint32_t max_bs, std::uint32_t max_seq_len) noexcept
    {
        if (numbered())
            return called(msg::build_graph_buffers(max_bs, max_seq_len));
        rsp_error e{};
        return detail::done(rsp_build_graph_buffers(p_, max_bs, max_seq_len, &e), e);
    }
    void build_graph_buffers(std::uint32_t max_bs, std::uint32_t max_seq_len)
    {
        try_build_graph_buffers(max_bs, max_seq_len).value();
    }
    /// rsp_stats_snapshot: a consistent snapshot, taken by the owner.
    result<rsp_stats> try_stats() noexcept
    {
        rsp_stats s{};
        rsp_error e{};
        rsp_status st = rsp_stats_snapshot(p_, &s, &e);
        return detail::done(st, e, s);
    }
    rsp_stats stats()
    {
        return try_stats().value();
    }
    /// rsp_pool_dump: the pool's state as JSON (docs/guide.md "Debugging"),
    /// taken in one owner turn; the string grows until the text fits (the
    /// state may grow between two tries). Throws rsp::error as the others.
    std::string dump()
    {
        std::string s(4096, '\0');
        for (;;) {
            std::size_t need = 0;
            rsp_error e{};
            rsp_status st = rsp_pool_dump(p_, s.data(), s.size(), &need, &e);
            if (st == RSP_ECAPACITY) {
                s.resize(need + need / 4);
                continue;
            }
            detail::done(st, e).value();
            s.resize(need - 1);
            return s;
        }
    }
    result<void> try_barrier() noexcept
    {
        rsp_error e{};
        return detail::done(rsp_barrier(p_, &e), e);
    }
    void barrier()
    {
        try_barrier().value();
    }
    // Checkpoints and swaps (rsp.h: rsp_checkpoint_take, ...).
    result<void> try_checkpoint(std::uint64_t key, rid r, label l = label::main,
                                rsp_tier tier = RSP_TIER_DEVICE,
                                step_id after_step = step_id{0}) noexcept
    {
        if (numbered())
            return called(msg::checkpoint(key, r, l, tier, after_step));
        rsp_error e{};
        return detail::done(rsp_checkpoint_take(p_, key, raw(r), raw(l), tier, raw(after_step), &e),
                            e);
    }
    void checkpoint(std::uint64_t key, rid r, label l = label::main,
                    rsp_tier tier = RSP_TIER_DEVICE, step_id after_step = step_id{0})
    {
        try_checkpoint(key, r, l, tier, after_step).value();
    }
    result<void> try_checkpoint_drop(std::uint64_t key) noexcept
    {
        if (numbered())
            return called(msg::checkpoint_drop(key));
        rsp_error e{};
        return detail::done(rsp_checkpoint_drop(p_, key, &e), e);
    }
    void checkpoint_drop(std::uint64_t key)
    {
        try_checkpoint_drop(key).value();
    }
    /// rsp_checkpoint_value: what restoring key saves (the value policy's rank).
    result<void> try_checkpoint_value(std::uint64_t key, std::uint64_t value) noexcept
    {
        rsp_error e{};
        return detail::done(rsp_checkpoint_value(p_, key, value, &e), e);
    }
    void checkpoint_value(std::uint64_t key, std::uint64_t value)
    {
        try_checkpoint_value(key, value).value();
    }
    result<void> try_checkpoint_pin(std::uint64_t key) noexcept
    {
        if (numbered())
            return called(msg::checkpoint_pin(key, true));
        rsp_error e{};
        return detail::done(rsp_checkpoint_pin(p_, key, &e), e);
    }
    void checkpoint_pin(std::uint64_t key)
    {
        try_checkpoint_pin(key).value();
    }
    result<void> try_checkpoint_unpin(std::uint64_t key) noexcept
    {
        if (numbered())
            return called(msg::checkpoint_pin(key, false));
        rsp_error e{};
        return detail::done(rsp_checkpoint_unpin(p_, key, &e), e);
    }
    void checkpoint_unpin(std::uint64_t key)
    {
        try_checkpoint_unpin(key).value();
    }
    /// RSP_ENOKEY when nothing is stored under key.
    result<rsp_checkpoint_info> try_checkpoint_query(std::uint64_t key) noexcept
    {
        rsp_checkpoint_info i{};
        rsp_error e{};
        rsp_status st = rsp_checkpoint_query(p_, key, &i, &e);
        return detail::done(st, e, i);
    }
    rsp_checkpoint_info checkpoint_query(std::uint64_t key)
    {
        return try_checkpoint_query(key).value();
    }
    /// The checkpoint calls keyed by the strong type (the same C calls).
    result<void> try_checkpoint(checkpoint_key key, rid r, label l = label::main,
                                rsp_tier tier = RSP_TIER_DEVICE,
                                step_id after_step = step_id{0}) noexcept
    {
        return try_checkpoint(raw(key), r, l, tier, after_step);
    }
    void checkpoint(checkpoint_key key, rid r, label l = label::main,
                    rsp_tier tier = RSP_TIER_DEVICE, step_id after_step = step_id{0})
    {
        try_checkpoint(raw(key), r, l, tier, after_step).value();
    }
    result<void> try_checkpoint_drop(checkpoint_key key) noexcept
    {
        return try_checkpoint_drop(raw(key));
    }
    void checkpoint_drop(checkpoint_key key)
    {
        try_checkpoint_drop(raw(key)).value();
    }
    result<void> try_checkpoint_pin(checkpoint_key key) noexcept
    {
        return try_checkpoint_pin(raw(key));
    }
    void checkpoint_pin(checkpoint_key key)
    {
        try_checkpoint_pin(raw(key)).value();
    }
    result<void> try_checkpoint_unpin(checkpoint_key key) noexcept
    {
        return try_checkpoint_unpin(raw(key));
    }
    void checkpoint_unpin(checkpoint_key key)
    {
        try_checkpoint_unpin(raw(key)).value();
    }
    result<rsp_checkpoint_info> try_checkpoint_query(checkpoint_key key) noexcept
    {
        return try_checkpoint_query(raw(key));
    }
    rsp_checkpoint_info checkpoint_query(checkpoint_key key)
    {
        return try_checkpoint_query(raw(key)).value();
    }
    result<void> try_swap_out(rid r) noexcept
    {
        if (numbered())
            return called(msg::swap_out(r));
        rsp_error e{};
        return detail::done(rsp_swap_out(p_, raw(r), &e), e);
    }
    void swap_out(rid r)
    {
        try_swap_out(r).value();
    }
    /// A pool without room is not an error: the outcome's ok is false.
    result<rsp_admit_outcome> try_swap_in(rid r) noexcept
    {
        if (numbered())
            return called(msg::swap_in(r), [](const rsp_reply &r2) { return r2.admit; });
        rsp_admit_outcome o{};
        rsp_error e{};
        rsp_status st = rsp_swap_in(p_, raw(r), &o, &e);
        return detail::done(st, e, o);
    }
    rsp_admit_outcome swap_in(rid r)
    {
        return try_swap_in(r).value();
    }

    /// RSP_ENOREQ when r holds nothing under l.
    result<rsp_holding> try_holding(rid r, label l) noexcept
    {
        rsp_holding h{};
        rsp_error e{};
        rsp_status st = rsp_holding_get(p_, raw(r), raw(l), &h, &e);
        return detail::done(st, e, h);
    }
    rsp_holding holding(rid r, label l = label::main)
    {
        return try_holding(r, l).value();
    }

    // Messages, asynchronously.
    /// rsp_post with a ticket: wait for credit up to `credit_timeout`.
    template <class D = nanoseconds>
    result<ticket> try_post(const rsp_msg &m, D credit_timeout = forever) noexcept
    {
        rsp_ticket *t = nullptr;
        rsp_error e{};
        rsp_status st = rsp_post(p_, &m, &t, timeout_ns(credit_timeout), &e);
        if (st != RSP_OK)
            return detail::done(st, e).error();
        return ticket(t);
    }
    template <class D = nanoseconds> ticket post(const rsp_msg &m, D credit_timeout = forever)
    {
        return try_post(m, credit_timeout).value();
    }
    /// rsp_post fire-and-forget: a failure in handling is only counted.
    template <class D = nanoseconds>
    result<void> try_post_forget(const rsp_msg &m, D credit_timeout = forever) noexcept
    {
        rsp_error e{};
        return detail::done(rsp_post(p_, &m, nullptr, timeout_ns(credit_timeout), &e), e);
    }
    template <class D = nanoseconds> void post_forget(const rsp_msg &m, D credit_timeout = forever)
    {
        try_post_forget(m, credit_timeout).value();
    }

    // Plans.
    /// rsp_plan_wait: the live plan of a step >= id is published.
    template <class D = nanoseconds>
    result<void> try_plan_wait(step_id id, D timeout = forever) noexcept
    {
        rsp_error e{};
        return detail::done(rsp_plan_wait(p_, raw(id), timeout_ns(timeout), &e), e);
    }
    template <class D = nanoseconds> void plan_wait(step_id id, D timeout = forever)
    {
        try_plan_wait(id, timeout).value();
    }
    /// rsp_plan_wait_step: step id's own live plan is published (then
    /// read_section::plan(pool, id) finds it while the step is in flight);
    /// RSP_ENOPLAN saying why when the step ended without one.
    template <class D = nanoseconds>
    result<void> try_plan_wait_step(step_id id, D timeout = forever) noexcept
    {
        rsp_error e{};
        return detail::done(rsp_plan_wait_step(p_, raw(id), timeout_ns(timeout), &e), e);
    }
    template <class D = nanoseconds> void plan_wait_step(step_id id, D timeout = forever)
    {
        try_plan_wait_step(id, timeout).value();
    }
    /// rsp_event_wait: an event of this pool's device kind (a plan's ready).
    template <class D = nanoseconds>
    result<void> try_event_wait(const rsp_event &ev, D timeout = forever) const noexcept
    {
        rsp_error e{};
        return detail::done(rsp_event_wait(p_, &ev, timeout_ns(timeout), &e), e);
    }
    template <class D = nanoseconds> void event_wait(const rsp_event &ev, D timeout = forever) const
    {
        try_event_wait(ev, timeout).value();
    }

  private:
    pool(rsp_pool *p, std::unique_ptr<detail::pool_extra> x) noexcept : p_(p), x_(std::move(x))
    {
    }
    friend class tp_group;
    /// The synchronous calls of numbered kinds go through try_call.
    bool numbered() const noexcept
    {
        return x_ && x_->ordered;
    }
    result<void> called(const rsp_msg &m) noexcept
    {
        result<rsp_reply> r = try_call(m);
        if (!r)
            return r.error();
        return {};
    }
    template <class F>
    auto called(const rsp_msg &m, F pick) noexcept -> result<decltype(pick(rsp_reply{}))>
    {
        result<rsp_reply> r = try_call(m);
        if (!r)
            return r.error();
        return pick(r.value());
    }
    /// The C pool was closed.
    void gone() noexcept
    {
        p_ = nullptr;
        x_.reset();
    }
    /// The destructor's close: refused inside a read section (destroying
    /// waits for a grace period, i.e. for that section), where it is handed
    /// to the thread's deferred closes instead of being dropped with the
    /// status.
    void drop() noexcept
    {
        if (!p_)
            return;
        rsp_status st = rsp_pool_close(p_, nullptr);
        if (st == RSP_OK) {
            gone();
        } else if (st == RSP_EINVAL) {
            detail::defer_close(std::exchange(p_, nullptr), std::move(x_));
        } else { // RSP_EFORKED: the pool stays, as rsp.h says; so does x_
            p_ = nullptr;
            (void)x_.release();
        }
    }
    rsp_pool *p_ = nullptr;
    std::unique_ptr<detail::pool_extra> x_;
};

// ---------------------------------------------------------------------------
// The tensor-parallel group
// ---------------------------------------------------------------------------

namespace detail
{
/// e's message, formatted (cut at RSP_ERROR_MAX, as the library's are).
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline void
say(rsp_error &e, const char *fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
}
/// The first answer field on which two ranks' replies to one message
/// differ: `field` null when they agree. Status first; then, per kind, the
/// fields every rank computes the same way when its pool agrees (a full
/// pool's admit, the plan digest, a holding, a label, a checkpoint's
/// place). STATS and the kinds with no answer compare the status only.
struct reply_diff {
    const char *field = nullptr;
    std::uint64_t a = 0, b = 0;
    void check(const char *name, std::uint64_t x, std::uint64_t y) noexcept
    {
        if (!field && x != y) {
            field = name;
            a = x;
            b = y;
        }
    }
    void admit(const rsp_admit_outcome &x, const rsp_admit_outcome &y) noexcept
    {
        check("admit.ok", x.ok, y.ok);
        check("admit.rid", x.rid, y.rid);
        check("admit.label", x.label, y.label);
        check("admit.slots_short", x.slots_short, y.slots_short);
        check("admit.free", x.free, y.free);
    }
    void plan(const rsp_reply &x, const rsp_reply &y) noexcept
    {
        check("plan_step_id", x.plan_step_id, y.plan_step_id);
        check("plan_staged", x.plan_staged, y.plan_staged);
        check("plan_digest", x.plan_digest, y.plan_digest);
    }
};
inline reply_diff compare_replies(rsp_msg_kind k, const rsp_reply &x, const rsp_reply &y) noexcept
{
    reply_diff d;
    d.check("status", static_cast<std::uint64_t>(x.error.status),
            static_cast<std::uint64_t>(y.error.status));
    if (k == RSP_MSG_STEP)
        d.check("committed", x.committed, y.committed);
    if (d.field || x.error.status != RSP_OK)
        return d;
    switch (k) {
    case RSP_MSG_ADMIT:
    case RSP_MSG_SWAP_IN: d.admit(x.admit, y.admit); break;
    case RSP_MSG_PLAN: d.plan(x, y); break;
    case RSP_MSG_STEP:
        d.admit(x.admit, y.admit);
        d.check("planned", x.planned, y.planned);
        if (x.planned && y.planned)
            d.plan(x, y);
        break;
    case RSP_MSG_LABEL: d.check("label", x.label, y.label); break;
    case RSP_MSG_HOLDING:
        d.check("holding.index", static_cast<std::uint32_t>(x.holding.index),
                static_cast<std::uint32_t>(y.holding.index));
        d.check("holding.has_state", x.holding.has_state, y.holding.has_state);
        d.check("holding.generation", x.holding.generation, y.holding.generation);
        break;
    case RSP_MSG_CHECKPOINT_QUERY:
        d.check("checkpoint.tier", x.checkpoint.tier, y.checkpoint.tier);
        d.check("checkpoint.slot", static_cast<std::uint32_t>(x.checkpoint.slot),
                static_cast<std::uint32_t>(y.checkpoint.slot));
        d.check("checkpoint.pins", x.checkpoint.pins, y.checkpoint.pins);
        d.check("checkpoint.user_pins", x.checkpoint.user_pins, y.checkpoint.user_pins);
        break;
    default: break;
    }
    return d;
}

/// A message kind's name for an error message.
inline const char *kind_name(rsp_msg_kind k) noexcept
{
    switch (k) {
    case RSP_MSG_INGEST: return "ingest";
    case RSP_MSG_REMOVE: return "remove";
    case RSP_MSG_RESET: return "reset";
    case RSP_MSG_ADMIT: return "admit";
    case RSP_MSG_ROLLBACK: return "rollback";
    case RSP_MSG_PLAN: return "plan";
    case RSP_MSG_CLEAR_PREPLAN: return "clear_preplan";
    case RSP_MSG_COMMIT: return "commit";
    case RSP_MSG_BUILD_GRAPH_BUFFERS: return "build_graph_buffers";
    case RSP_MSG_STATS: return "stats";
    case RSP_MSG_BARRIER: return "barrier";
    case RSP_MSG_LABEL: return "label";
    case RSP_MSG_HOLDING: return "holding";
    case RSP_MSG_SHUTDOWN: return "shutdown";
    case RSP_MSG_RELEASE: return "release";
    case RSP_MSG_STEP: return "step";
    case RSP_MSG_CHECKPOINT: return "checkpoint";
    case RSP_MSG_CHECKPOINT_DROP: return "checkpoint_drop";
    case RSP_MSG_CHECKPOINT_PIN: return "checkpoint_pin";
    case RSP_MSG_CHECKPOINT_QUERY: return "checkpoint_query";
    case RSP_MSG_SWAP_OUT: return "swap_out";
    case RSP_MSG_SWAP_IN: return "swap_in";
    default: return "message";
    }
}

/// What a group's pools and tickets share: the one sequence and the first
/// divergence. Any thread.
struct group_state {
    std::atomic<std::uint64_t> seq{0};       ///< the last number handed out
    std::atomic<bool> diverged_taken{false}; ///< a thread claimed `first`
    std::atomic<bool> diverged{false};       ///< `first` is written (release)
    rsp_error first{};                       ///< the first divergence

    /// The ranks disagree: keep the first report (later ones are the same
    /// divergence seen again). Returns e.
    const rsp_error &diverge(const rsp_error &e) noexcept
    {
        if (!diverged_taken.exchange(true, std::memory_order_relaxed)) {
            first = e;
            diverged.store(true, std::memory_order_release);
        }
        return e;
    }
};
} // namespace detail

/// The answers of every rank to one message a tp_group posted, collected
/// once and compared. Move-only; destroyed unwaited, each rank's ticket is
/// given up (rsp::ticket's rule).
class group_ticket
{
  public:
    group_ticket() noexcept = default;
    group_ticket(group_ticket &&) noexcept = default;
    group_ticket &operator=(group_ticket &&) noexcept = default;
    group_ticket(const group_ticket &) = delete;
    group_ticket &operator=(const group_ticket &) = delete;
    /// The number the message was posted under on every rank (0: none).
    std::uint64_t seq() const noexcept
    {
        return seq_;
    }
    bool valid() const noexcept
    {
        return !t_.empty();
    }
    /// Wait for every rank's answer (rsp_wait on each, in rank order; the
    /// timeout applies to each wait, and an RSP_EAGAIN / RSP_ETIMEDOUT
    /// keeps what was collected, the ticket still valid), then compare
    /// them with rank 0's. Agreed: rank 0's reply, or its error when every
    /// rank failed alike. Disagreed: RSP_EDEVICE naming both ranks, the
    /// message and the field ("ranks 0 and 2 diverged on step (message 7):
    /// plan_digest 0x... vs 0x..."); the group then refuses every later
    /// message (tp_group::diverged). Calling thread.
    template <class D = nanoseconds> result<rsp_reply> try_wait(D timeout = forever) noexcept
    {
        if (t_.empty())
            return detail::failure(RSP_EINVAL, "rsp::group_ticket: no ticket (already waited for)");
        for (std::size_t i = 0; i < t_.size(); i++) {
            if (got_[i])
                continue;
            rsp_ticket *t = t_[i].release();
            const rsp_status st = rsp_wait(t, timeout_ns(timeout), &r_[i]);
            if (st == RSP_EAGAIN || st == RSP_ETIMEDOUT) {
                t_[i] = ticket(t);
                return detail::failure(st, rsp_strerror(st));
            }
            got_[i] = true;
        }
        t_.clear();
        return judge();
    }
    template <class D = nanoseconds> rsp_reply wait(D timeout = forever)
    {
        return try_wait(timeout).value();
    }
    /// Every rank's reply, by rank, once try_wait collected them all.
    span<const rsp_reply> replies() const noexcept
    {
        return t_.empty() ? span<const rsp_reply>(r_.data(), r_.size()) : span<const rsp_reply>();
    }

  private:
    friend class tp_group;
    result<rsp_reply> judge() noexcept
    {
        for (std::size_t i = 1; i < r_.size(); i++) {
            const detail::reply_diff d = detail::compare_replies(kind_, r_[0], r_[i]);
            if (!d.field)
                continue;
            rsp_error e{};
            e.status = RSP_EDEVICE;
            if (d.field[0] == 's' && d.field[1] == 't') // "status": say what each answered
                detail::say(e,
                            "rsp::tp_group: ranks 0 and %zu diverged on %s (message %llu): "
                            "rank 0 answered %s, rank %zu %s (%s)",
                            i, detail::kind_name(kind_), (unsigned long long)seq_,
                            rsp_strerror(r_[0].error.status), i, rsp_strerror(r_[i].error.status),
                            r_[r_[0].error.status == RSP_OK ? i : 0].error.message);
            else
                detail::say(e,
                            "rsp::tp_group: ranks 0 and %zu diverged on %s (message %llu): "
                            "%s 0x%llx vs 0x%llx",
                            i, detail::kind_name(kind_), (unsigned long long)seq_, d.field,
                            (unsigned long long)d.a, (unsigned long long)d.b);
            return state_->diverge(e);
        }
        if (r_[0].error.status != RSP_OK)
            return r_[0].error;
        return r_[0];
    }
    rsp_msg_kind kind_ = RSP_MSG_BARRIER;
    std::uint64_t seq_ = 0;
    std::shared_ptr<detail::group_state> state_;
    std::vector<ticket> t_;
    std::vector<rsp_reply> r_;
    std::vector<bool> got_;
};

/// The pools of a tensor-parallel group's ranks, driven from one process:
/// every message goes to every rank under one number (the pools are
/// ordered), and the answers are compared (group_ticket). Each call of
/// rsp::pool that sends a message is here too, sync and async, with its
/// try_ twin; a reply is rank 0's once every rank agreed. What is read per
/// rank (info, counters, blocks, plans, a read section) is read from
/// rank(i). Move-only; destroying it closes the pools, rank 0 first.
/// Every method may be called from any thread concurrently except create,
/// destruction and moves.
class tp_group
{
  public:
    /// A function that adjusts rank r's copy of the config before its pool
    /// is created (its CUDA ordinal, say): per_rank(cfg, r).
    using rank_config = std::function<void(pool_config &, std::uint32_t)>;

    tp_group() noexcept = default;
    tp_group(tp_group &&) noexcept = default;
    /// Closes the pools this one held first, as the destructor does.
    tp_group &operator=(tp_group &&) noexcept = default;
    tp_group(const tp_group &) = delete;
    tp_group &operator=(const tp_group &) = delete;

    /// world_size pools from cfg, rank r with cfg.rank(r, world_size),
    /// ordered (cfg's reorder timeout kept), then per_rank if given. One
    /// failure closes the pools already made: the error names the rank.
    static result<tp_group> try_create(const pool_config &cfg, std::uint32_t world_size,
                                       const rank_config &per_rank = {}) noexcept
    {
        if (world_size == 0)
            return detail::failure(RSP_EINVAL, "rsp::tp_group: world_size is 0");
        try {
            tp_group g;
            g.state_ = std::make_shared<detail::group_state>();
            g.ranks_.reserve(world_size);
            for (std::uint32_t r = 0; r < world_size; r++) {
                pool_config c = cfg;
                c.rank(r, world_size);
                c.raw().ordered = true;
                if (per_rank)
                    per_rank(c, r);
                result<pool> p = pool::try_create(c);
                if (!p) {
                    rsp_error e = p.error();
                    detail::say(e, "rsp::tp_group: rank %u: %s", r, p.error().message);
                    return e;
                }
                if (!p.value().ordered())
                    return detail::failure(RSP_EINVAL,
                                           "rsp::tp_group: per_rank turned ordered posting off");
                p.value().x_->grouped = true;
                g.ranks_.push_back(std::move(p.value()));
            }
            return g;
        } catch (const std::bad_alloc &) {
            return detail::failure(RSP_ENOMEM, "rsp::tp_group: out of memory");
        } catch (const std::exception &e) { // thrown by per_rank
            return detail::failure(RSP_EINVAL, e.what());
        }
    }
    static tp_group create(const pool_config &cfg, std::uint32_t world_size,
                           const rank_config &per_rank = {})
    {
        return try_create(cfg, world_size, per_rank).value();
    }

    std::uint32_t size() const noexcept
    {
        return static_cast<std::uint32_t>(ranks_.size());
    }
    /// Rank r's pool, for what is read per rank. Its synchronous calls of
    /// numbered kinds are refused (RSP_EINVAL): a message one rank took
    /// alone would leave a gap in the others' sequence.
    pool &rank(std::uint32_t r) noexcept
    {
        return ranks_[r];
    }
    /// Ok while the ranks agreed; else the first divergence (RSP_EDEVICE,
    /// naming the ranks, the message and the field). Any thread.
    result<void> diverged() const noexcept
    {
        if (state_ && state_->diverged.load(std::memory_order_acquire))
            return state_->first;
        return {};
    }

    // Messages, asynchronously.
    /// m to every rank under the group's next number (m.seq is ignored;
    /// SHUTDOWN goes unnumbered). credit_timeout is rank 0's wait for
    /// inbox credit; the later ranks wait as long as it takes (the message
    /// is already on rank 0: it must reach them all). A refusal on rank 0
    /// (bad input, no credit) posts nothing anywhere; one on a later rank
    /// means the ranks' pools differ: the ranks without it get a barrier
    /// under the number and the group has diverged. Refused after a
    /// divergence (RSP_EDEVICE). Calling thread; one rsp_post per rank.
    template <class D = nanoseconds>
    result<group_ticket> try_post(const rsp_msg &m, D credit_timeout = forever) noexcept
    {
        return post_ranks(m, nullptr, timeout_ns(credit_timeout));
    }
    template <class D = nanoseconds> group_ticket post(const rsp_msg &m, D credit_timeout = forever)
    {
        return try_post(m, credit_timeout).value();
    }
    /// The same with rank r's m.event = events[r] (COMMIT, ROLLBACK, STEP:
    /// each rank's own forward_done); events.size() must be size().
    template <class D = nanoseconds>
    result<group_ticket> try_post_each(const rsp_msg &m, span<const rsp_event> events,
                                       D credit_timeout = forever) noexcept
    {
        if (events.size() != ranks_.size())
            return detail::failure(RSP_EINVAL,
                                   "rsp::tp_group: one event per rank (events.size() != size())");
        return post_ranks(m, events.data(), timeout_ns(credit_timeout));
    }
    template <class D = nanoseconds>
    group_ticket post_each(const rsp_msg &m, span<const rsp_event> events,
                           D credit_timeout = forever)
    {
        return try_post_each(m, events, credit_timeout).value();
    }
    /// m to every rank, fire-and-forget: nothing compared (a failure is
    /// each rank's on_error and posts_failed); refusals as try_post's.
    template <class D = nanoseconds>
    result<void> try_post_forget(const rsp_msg &m, D credit_timeout = forever) noexcept
    {
        result<group_ticket> t = try_post(m, credit_timeout);
        if (!t)
            return t.error();
        for (ticket &x : t.value().t_)
            x.forget();
        return {};
    }
    template <class D = nanoseconds> void post_forget(const rsp_msg &m, D credit_timeout = forever)
    {
        try_post_forget(m, credit_timeout).value();
    }
    /// Post m to every rank and wait: the agreed reply (group_ticket::try_wait).
    result<rsp_reply> try_call(const rsp_msg &m) noexcept
    {
        result<group_ticket> t = try_post(m);
        if (!t)
            return t.error();
        return t.value().try_wait();
    }
    rsp_reply call(const rsp_msg &m)
    {
        return try_call(m).value();
    }

    // Messages, synchronously: rsp::pool's calls, on every rank.
    result<label> try_intern(const char *name) noexcept
    {
        return pick(msg::intern(name), [](const rsp_reply &r) { return label{r.label}; });
    }
    label intern(const char *name)
    {
        return try_intern(name).value();
    }
    result<void> try_ingest(rid r) noexcept
    {
        return sent(msg::ingest(r));
    }
    void ingest(rid r)
    {
        try_ingest(r).value();
    }
    result<void> try_remove(rid r) noexcept
    {
        return sent(msg::remove(r));
    }
    void remove(rid r)
    {
        try_remove(r).value();
    }
    result<void> try_release(rid r, label l) noexcept
    {
        return sent(msg::release(r, l));
    }
    void release(rid r, label l)
    {
        try_release(r, l).value();
    }
    result<void> try_reset(rid r, bool free_slots) noexcept
    {
        return sent(msg::reset(r, free_slots));
    }
    void reset(rid r, bool free_slots)
    {
        try_reset(r, free_slots).value();
    }
    result<void> try_ingest_many(span<const rid> rids) noexcept
    {
        return sent(msg::ingest_many(rids));
    }
    void ingest_many(span<const rid> rids)
    {
        try_ingest_many(rids).value();
    }
    result<void> try_remove_many(span<const rid> rids) noexcept
    {
        return sent(msg::remove_many(rids));
    }
    void remove_many(span<const rid> rids)
    {
        try_remove_many(rids).value();
    }
    result<void> try_reset_many(span<const rid> rids, bool free_slots) noexcept
    {
        return sent(msg::reset_many(rids, free_slots));
    }
    void reset_many(span<const rid> rids, bool free_slots)
    {
        try_reset_many(rids, free_slots).value();
    }
    /// A full pool is ok with outcome.ok == false on every rank (compared).
    result<rsp_admit_outcome> try_admit(const step &s) noexcept
    {
        return pick(msg::admit(s), [](const rsp_reply &r) { return r.admit; });
    }
    rsp_admit_outcome admit(const step &s)
    {
        return try_admit(s).value();
    }
    /// The plan's digest, equal on every rank (compared).
    result<std::uint64_t> try_plan(const step &s) noexcept
    {
        return pick(msg::plan(s), [](const rsp_reply &r) { return r.plan_digest; });
    }
    std::uint64_t plan(const step &s)
    {
        return try_plan(s).value();
    }
    /// One forward_done for every rank (rsp::forward_complete(), a host
    /// fence the ranks share) ...
    result<void> try_commit(const step &s, const rsp_event &forward_done = {}) noexcept
    {
        return sent(msg::commit(s, forward_done));
    }
    void commit(const step &s, const rsp_event &forward_done = {})
    {
        try_commit(s, forward_done).value();
    }
    /// ... or each rank's own (events[r], size() of them).
    result<void> try_commit(const step &s, span<const rsp_event> forward_done) noexcept
    {
        result<group_ticket> t = try_post_each(msg::commit(s), forward_done);
        if (!t)
            return t.error();
        result<rsp_reply> r = t.value().try_wait();
        if (!r)
            return r.error();
        return {};
    }
    void commit(const step &s, span<const rsp_event> forward_done)
    {
        try_commit(s, forward_done).value();
    }
    /// rsp_step_next on every rank: outcomes compared (the plan digest
    /// included); *out (if given) is rank 0's even on an error.
    result<rsp_step_outcome> try_step_next(const step &s, const step *prev = nullptr,
                                           const rsp_event &prev_done = {},
                                           rsp_step_outcome *out = nullptr) noexcept
    {
        rsp_step decl{};
        return next(msg::step_next(s, prev, prev_done, decl), nullptr, out);
    }
    rsp_step_outcome step_next(const step &s, const step *prev = nullptr,
                               const rsp_event &prev_done = {})
    {
        return try_step_next(s, prev, prev_done).value();
    }
    /// The same with each rank's own forward_done for prev.
    result<rsp_step_outcome> try_step_next(const step &s, const step *prev,
                                           span<const rsp_event> prev_done,
                                           rsp_step_outcome *out = nullptr) noexcept
    {
        if (prev_done.size() != ranks_.size())
            return detail::failure(RSP_EINVAL,
                                   "rsp::tp_group: one event per rank (events.size() != size())");
        rsp_step decl{};
        return next(msg::step_next(s, prev, rsp_event{}, decl), prev_done.data(), out);
    }
    rsp_step_outcome step_next(const step &s, const step *prev, span<const rsp_event> prev_done)
    {
        return try_step_next(s, prev, prev_done).value();
    }
    result<void> try_rollback(step_id id, const rsp_event &forward_done = {}) noexcept
    {
        return sent(msg::rollback(id, forward_done));
    }
    void rollback(step_id id, const rsp_event &forward_done = {})
    {
        try_rollback(id, forward_done).value();
    }
    result<void> try_clear_preplan() noexcept
    {
        return sent(msg::clear_preplan());
    }
    void clear_preplan()
    {
        try_clear_preplan().value();
    }
    result<void> try_build_graph_buffers(std::uint32_t max_bs, std::uint32_t max_seq_len) noexcept
    {
        return sent(msg::build_graph_buffers(max_bs, max_seq_len));
    }
    void build_graph_buffers(std::uint32_t max_bs, std::uint32_t max_seq_len)
    {
        try_build_graph_buffers(max_bs, max_seq_len).value();
    }
    /// Every rank's snapshot, taken at the same point of the sequence.
    result<std::vector<rsp_stats>> try_stats() noexcept
    {
        try {
            std::vector<rsp_stats> out(ranks_.size());
            result<group_ticket> t = try_post(msg::stats());
            if (!t)
                return t.error();
            result<rsp_reply> r = t.value().try_wait();
            if (!r)
                return r.error();
            // The reply carries 0.1's fields (its layout is frozen); the
            // later ones are read after the answer, as rsp_stats_snapshot
            // reads them, so they include every message before it.
            for (std::size_t i = 0; i < out.size(); i++) {
                rsp_error e{};
                const rsp_status st =
                    rsp_stats_peek_size(ranks_[i].get(), &out[i], sizeof out[i], &e);
                if (st != RSP_OK)
                    return detail::done(st, e).error();
                std::memcpy(&out[i], &t.value().r_[i].stats, sizeof(rsp_stats_0_1));
            }
            return out;
        } catch (const std::bad_alloc &) {
            return detail::failure(RSP_ENOMEM, "rsp::tp_group: out of memory");
        }
    }
    std::vector<rsp_stats> stats()
    {
        return try_stats().value();
    }
    /// Every rank has handled every message numbered before this one.
    result<void> try_barrier() noexcept
    {
        return sent(msg::barrier());
    }
    void barrier()
    {
        try_barrier().value();
    }
    result<rsp_holding> try_holding(rid r, label l = label::main) noexcept
    {
        return pick(msg::holding(r, l), [](const rsp_reply &x) { return x.holding; });
    }
    rsp_holding holding(rid r, label l = label::main)
    {
        return try_holding(r, l).value();
    }
    result<void> try_checkpoint(checkpoint_key key, rid r, label l = label::main,
                                rsp_tier tier = RSP_TIER_DEVICE,
                                step_id after_step = step_id{0}) noexcept
    {
        return sent(msg::checkpoint(key, r, l, tier, after_step));
    }
    void checkpoint(checkpoint_key key, rid r, label l = label::main,
                    rsp_tier tier = RSP_TIER_DEVICE, step_id after_step = step_id{0})
    {
        try_checkpoint(key, r, l, tier, after_step).value();
    }
    result<void> try_checkpoint_drop(checkpoint_key key) noexcept
    {
        return sent(msg::checkpoint_drop(key));
    }
    void checkpoint_drop(checkpoint_key key)
    {
        try_checkpoint_drop(key).value();
    }
    result<void> try_checkpoint_pin(checkpoint_key key) noexcept
    {
        return sent(msg::checkpoint_pin(key, true));
    }
    void checkpoint_pin(checkpoint_key key)
    {
        try_checkpoint_pin(key).value();
    }
    result<void> try_checkpoint_unpin(checkpoint_key key) noexcept
    {
        return sent(msg::checkpoint_pin(key, false));
    }
    void checkpoint_unpin(checkpoint_key key)
    {
        try_checkpoint_unpin(key).value();
    }
    result<rsp_checkpoint_info> try_checkpoint_query(checkpoint_key key) noexcept
    {
        return pick(msg::checkpoint_query(key), [](const rsp_reply &r) { return r.checkpoint; });
    }
    rsp_checkpoint_info checkpoint_query(checkpoint_key key)
    {
        return try_checkpoint_query(key).value();
    }
    result<void> try_swap_out(rid r) noexcept
    {
        return sent(msg::swap_out(r));
    }
    void swap_out(rid r)
    {
        try_swap_out(r).value();
    }
    result<rsp_admit_outcome> try_swap_in(rid r) noexcept
    {
        return pick(msg::swap_in(r), [](const rsp_reply &x) { return x.admit; });
    }
    rsp_admit_outcome swap_in(rid r)
    {
        return try_swap_in(r).value();
    }

    // Plans.
    /// pool::plan_wait on every rank in turn (timeout each).
    template <class D = nanoseconds>
    result<void> try_plan_wait(step_id id, D timeout = forever) noexcept
    {
        for (pool &p : ranks_)
            if (result<void> r = p.try_plan_wait(id, timeout); !r)
                return r;
        return {};
    }
    template <class D = nanoseconds> void plan_wait(step_id id, D timeout = forever)
    {
        try_plan_wait(id, timeout).value();
    }
    /// pool::plan_wait_step on every rank in turn (timeout each).
    template <class D = nanoseconds>
    result<void> try_plan_wait_step(step_id id, D timeout = forever) noexcept
    {
        for (pool &p : ranks_)
            if (result<void> r = p.try_plan_wait_step(id, timeout); !r)
                return r;
        return {};
    }
    template <class D = nanoseconds> void plan_wait_step(step_id id, D timeout = forever)
    {
        try_plan_wait_step(id, timeout).value();
    }

  private:
    /// Post to every rank (events: rank r's m.event, or null). Everything
    /// fallible (the ticket's vectors) is reserved before a number is
    /// taken, so a number taken always reaches every rank: as the message
    /// or as a barrier filling its place.
    result<group_ticket> post_ranks(rsp_msg m, const rsp_event *events,
                                    std::uint64_t credit_ns) noexcept
    {
        if (ranks_.empty())
            return detail::failure(RSP_EINVAL, "rsp::tp_group: an empty group (default-made or "
                                               "moved from)");
        if (result<void> d = diverged(); !d && m.kind != RSP_MSG_SHUTDOWN)
            return d.error();
        group_ticket g;
        try {
            g.t_.reserve(ranks_.size());
            g.r_.resize(ranks_.size());
            g.got_.assign(ranks_.size(), false);
        } catch (const std::bad_alloc &) {
            return detail::failure(RSP_ENOMEM, "rsp::tp_group: out of memory");
        }
        g.kind_ = m.kind;
        g.state_ = state_;
        m.seq = m.kind == RSP_MSG_SHUTDOWN
                    ? 0
                    : state_->seq.fetch_add(1, std::memory_order_relaxed) + 1;
        g.seq_ = m.seq;
        for (std::size_t i = 0; i < ranks_.size(); i++) {
            if (events)
                m.event = events[i];
            rsp_ticket *t = nullptr;
            rsp_error e{};
            const rsp_status st =
                rsp_post(ranks_[i].get(), &m, &t, i == 0 ? credit_ns : RSP_WAIT_FOREVER, &e);
            if (st == RSP_OK) {
                g.t_.emplace_back(t);
                continue;
            }
            return refused(m.seq, i, detail::done(st, e).error());
        }
        return g;
    }
    /// Rank i refused message n: ranks i.. get a barrier in its place. A
    /// refusal after rank 0 took it is a divergence.
    result<group_ticket> refused(std::uint64_t n, std::size_t i, const rsp_error &why) noexcept
    {
        for (std::size_t j = i; n && j < ranks_.size(); j++)
            (void)ranks_[j].try_fill_seq(n);
        if (i == 0)
            return why;
        rsp_error e{};
        e.status = RSP_EDEVICE;
        detail::say(e, "rsp::tp_group: rank %zu refused message %llu that ranks below it took: %s",
                    i, (unsigned long long)n, why.message);
        return state_->diverge(e);
    }
    result<void> sent(const rsp_msg &m) noexcept
    {
        result<rsp_reply> r = try_call(m);
        if (!r)
            return r.error();
        return {};
    }
    template <class F> auto pick(const rsp_msg &m, F f) noexcept -> result<decltype(f(rsp_reply{}))>
    {
        result<rsp_reply> r = try_call(m);
        if (!r)
            return r.error();
        return f(r.value());
    }
    result<rsp_step_outcome> next(const rsp_msg &m, const rsp_event *events,
                                  rsp_step_outcome *out) noexcept
    {
        result<group_ticket> t = post_ranks(m, events, RSP_WAIT_FOREVER);
        if (!t)
            return t.error();
        result<rsp_reply> r = t.value().try_wait();
        if (out)
            *out = detail::step_outcome(t.value().r_[0]);
        if (!r)
            return r.error();
        return detail::step_outcome(r.value());
    }

    std::shared_ptr<detail::group_state> state_;
    std::vector<pool> ranks_;
};

// ---------------------------------------------------------------------------
// Reading plans
// ---------------------------------------------------------------------------

/// Tag for a QSBR reader: rsp::reader me(rsp::qsbr).
struct qsbr_t {
    explicit constexpr qsbr_t() = default;
};
inline constexpr qsbr_t qsbr{};

/// The calling thread registered as a plan reader for the object's life
/// (rsp_reader_register / _unregister). Create one per reader thread, on
/// that thread; throws rsp::error if registration fails, or, built with
/// std::nothrow, says so in status() and unregisters nothing at the end.
/// rsp::reader(rsp::qsbr) registers a QSBR reader
/// (rsp_reader_register_qsbr: plans stay valid until quiescent(); call it
/// once per loop, and offline() / online() around blocking).
class reader
{
  public:
    reader()
    {
        rsp_error e{};
        detail::done(rsp_reader_register(&e), e).value();
        st_ = RSP_OK;
    }
    explicit reader(const std::nothrow_t &) noexcept
    {
        rsp_error e{};
        st_ = rsp_reader_register(&e);
        if (st_ != RSP_OK)
            err_ = detail::done(st_, e).error();
    }
    explicit reader(qsbr_t)
    {
        rsp_error e{};
        detail::done(rsp_reader_register_qsbr(&e), e).value();
        st_ = RSP_OK;
    }
    reader(qsbr_t, const std::nothrow_t &) noexcept
    {
        rsp_error e{};
        st_ = rsp_reader_register_qsbr(&e);
        if (st_ != RSP_OK)
            err_ = detail::done(st_, e).error();
    }
    /// rsp_reader_quiescent: RSP_EINVAL inside a read section, nothing for a
    /// default reader.
    result<void> try_quiescent() noexcept
    {
        return detail::done(rsp_reader_quiescent(), rsp_error{});
    }
    void quiescent()
    {
        try_quiescent().value();
    }
    /// rsp_reader_offline: before blocking (a QSBR reader may not read
    /// while offline). Offline, the thread closes the pools it destroyed
    /// while online (rsp::deferred_closes).
    result<void> try_offline() noexcept
    {
        rsp_status st = rsp_reader_offline();
        if (st == RSP_OK)
            close_deferred();
        return detail::done(st, rsp_error{});
    }
    void offline()
    {
        try_offline().value();
    }
    /// rsp_reader_online: after blocking.
    result<void> try_online() noexcept
    {
        return detail::done(rsp_reader_online(), rsp_error{});
    }
    void online()
    {
        try_online().value();
    }
    reader(const reader &) = delete;
    reader &operator=(const reader &) = delete;
    /// Unregisters (ending any section left open: rsp_reader_unregister),
    /// then closes the pools destroyed inside one (rsp::deferred_closes).
    ~reader()
    {
        if (st_ == RSP_OK) {
            rsp_reader_unregister();
            close_deferred();
        }
    }
    /// RSP_OK when the thread is registered.
    rsp_status status() const noexcept
    {
        return st_;
    }
    bool ok() const noexcept
    {
        return st_ == RSP_OK;
    }
    explicit operator bool() const noexcept
    {
        return st_ == RSP_OK;
    }
    /// Why registration failed (a std::nothrow reader whose status() is not RSP_OK).
    const rsp_error &error() const noexcept
    {
        return err_;
    }

  private:
    rsp_status st_ = RSP_EINVAL;
    rsp_error err_{};
};

/// One label's addressing in a plan (rsp_addressing, with spans).
struct addressing {
    rsp_addressing raw;
    span<const std::int32_t> slots() const noexcept
    {
        return {raw.slot_indices, raw.length};
    }
    span<const bool> has_state() const noexcept
    {
        return {raw.has_state, raw.length};
    }
    span<const std::uint64_t> generations() const noexcept
    {
        return {raw.generations, raw.num_rows};
    }
    std::uint32_t num_rows() const noexcept
    {
        return raw.num_rows;
    }
    /// Vector length: num_rows, or the graph bucket's size (the tail is padding).
    std::uint32_t length() const noexcept
    {
        return raw.length;
    }
    step_id step() const noexcept
    {
        return step_id{raw.step_id};
    }
    bool staged() const noexcept
    {
        return raw.staged;
    }
    /// The device vectors (raw.device_slot_indices / _has_state), typed. On
    /// the CUDA device these point at device memory: pass data() to a
    /// kernel, never index them on the host. Valid only while the step is
    /// in flight (rsp_plan_addressing).
    span<const std::int32_t> device_slots() const noexcept
    {
        return {static_cast<const std::int32_t *>(raw.device_slot_indices), raw.length};
    }
    span<const bool> device_has_state() const noexcept
    {
        return {static_cast<const bool *>(raw.device_has_state), raw.length};
    }
    const rsp_event &ready() const noexcept
    {
        return raw.ready;
    }
};

/// One label's per-token state indices (rsp_plan_spec_indices): a
/// [length][width] int32 tensor, row-major; column 0 the initial state's
/// slot, columns 1..span a verify row's output slots, the pad index
/// elsewhere.
struct spec_indices {
    rsp_spec_indices raw;
    std::uint32_t width() const noexcept
    {
        return raw.width;
    }
    std::uint32_t length() const noexcept
    {
        return raw.length;
    }
    /// Entry i's row: width slot ids.
    span<const std::int32_t> row(std::uint32_t i) const noexcept
    {
        return {raw.indices + static_cast<std::size_t>(i) * raw.width, raw.width};
    }
    span<const std::int32_t> all() const noexcept
    {
        return {raw.indices, static_cast<std::size_t>(raw.length) * raw.width};
    }
    /// The device copy, int32 [length * width]: under a lease the key's
    /// graph-stable buffer (this step's while it is in flight); else the
    /// host copy on the host device and nullptr on a CUDA device.
    void *device() const noexcept
    {
        return raw.device_indices;
    }
};

/// A published plan seen through a read section or a reference. Trivially
/// copyable; valid as long as the section or reference it came from.
class plan_view
{
  public:
    explicit plan_view(const rsp_plan *p) noexcept : p_(p)
    {
    }
    explicit operator bool() const noexcept
    {
        return p_ != nullptr;
    }
    step_id id() const noexcept
    {
        return step_id{rsp_plan_step_id(p_)};
    }
    bool staged() const noexcept
    {
        return rsp_plan_is_staged(p_);
    }
    /// rsp_plan_digest: equal on ranks that handled the same messages in
    /// the same order (compare it across ranks every step).
    std::uint64_t digest() const noexcept
    {
        return rsp_plan_digest(p_);
    }
    /// RSP_ENOPLAN (naming the planned labels) for a label the step did not plan.
    result<addressing> try_addressing(label l) const noexcept
    {
        addressing a{};
        rsp_error e{};
        rsp_status st = rsp_plan_addressing(p_, raw(l), &a.raw, &e);
        return detail::done(st, e, a);
    }
    addressing at(label l) const
    {
        return try_addressing(l).value();
    }
    /// rsp_plan_spec_indices; errors as try_addressing.
    result<spec_indices> try_spec_indices(label l) const noexcept
    {
        spec_indices x{};
        rsp_error e{};
        rsp_status st = rsp_plan_spec_indices(p_, raw(l), &x.raw, &e);
        return detail::done(st, e, x);
    }
    spec_indices spec(label l) const
    {
        return try_spec_indices(l).value();
    }
    const rsp_plan *get() const noexcept
    {
        return p_;
    }

  private:
    const rsp_plan *p_;
};

/// A reference that keeps a plan alive past its read section
/// (rsp_plan_ref / _unref). Copying takes another reference.
class plan_ref
{
  public:
    plan_ref() noexcept = default;
    explicit plan_ref(plan_view v) noexcept : p_(v ? rsp_plan_ref(v.get()) : nullptr)
    {
    }
    plan_ref(const plan_ref &o) noexcept : p_(o.p_ ? rsp_plan_ref(o.p_) : nullptr)
    {
    }
    plan_ref(plan_ref &&o) noexcept : p_(std::exchange(o.p_, nullptr))
    {
    }
    plan_ref &operator=(plan_ref o) noexcept
    {
        std::swap(p_, o.p_);
        return *this;
    }
    ~plan_ref()
    {
        if (p_)
            rsp_plan_unref(p_);
    }
    plan_view view() const noexcept
    {
        return plan_view(p_);
    }
    explicit operator bool() const noexcept
    {
        return p_ != nullptr;
    }

  private:
    const rsp_plan *p_ = nullptr;
};

/// An RCU read section for the object's life (rsp_read_begin / _end), on a
/// registered thread. Plans seen inside it stay valid until it ends. Keep
/// it short, and never wait for the pool inside it (rsp.h). end() ends it
/// early (take an rsp::plan_ref first to keep a plan).
class read_section
{
  public:
    /// Throws rsp::error with rsp_read_begin's status and rsp_read_explain's message
    /// (RSP_ENOTREG on an unregistered thread; RSP_EINVAL for an offline
    /// QSBR reader or past the nesting limit).
    read_section() : st_(begin(e_))
    {
        if (st_ != RSP_OK)
            throw error(e_);
    }
    /// No exception: a section that did not begin says so in status() (and
    /// ends nothing when it goes).
    explicit read_section(const std::nothrow_t &) noexcept : st_(rsp_read_begin())
    {
    }
    read_section(const read_section &) = delete;
    read_section &operator=(const read_section &) = delete;
    ~read_section()
    {
        end();
    }
    /// rsp_read_end now, if the section is open; the destructor then does
    /// nothing. Views taken inside it are invalid afterwards, and so are
    /// live() and staged().
    /// Leaving the thread's outermost section closes the pools destroyed
    /// inside it (rsp::deferred_closes).
    void end() noexcept
    {
        if (std::exchange(open_, false)) {
            (void)rsp_read_end();
            close_deferred();
        }
    }
    /// How the section began: RSP_OK, or RSP_ENOTREG on a thread without an
    /// rsp::reader. Unchanged by end().
    rsp_status status() const noexcept
    {
        return st_;
    }
    /// Inside the section: it began and has not ended.
    bool ok() const noexcept
    {
        return open_;
    }
    explicit operator bool() const noexcept
    {
        return open_;
    }
    /// What a status() other than RSP_OK means, as a message.
    static const char *why(rsp_status st) noexcept
    {
        return st == RSP_ENOTREG ? "rsp::read_section on a thread without an rsp::reader"
                                 : rsp_strerror(st);
    }
    /// The newest live plan, or an empty view.
    plan_view live(const pool &p) const noexcept
    {
        return plan_view(rsp_plan_live(p.get()));
    }
    /// rsp_plan_live_addressing: the live plan's addressing of a label in one
    /// call (RSP_ENOPLAN when there is no live plan or it does not plan l).
    result<addressing> try_live_addressing(const pool &p, label l) const noexcept
    {
        addressing a{};
        rsp_error e{};
        rsp_status st = rsp_plan_live_addressing(p.get(), raw(l), &a.raw, &e);
        return detail::done(st, e, a);
    }
    addressing live_addressing(const pool &p, label l) const
    {
        return try_live_addressing(p, l).value();
    }
    /// rsp_plan_of_step: step id's live plan while the step is in flight, or an
    /// empty view. O(steps in flight).
    plan_view plan(const pool &p, step_id id) const noexcept
    {
        return plan_view(rsp_plan_of_step(p.get(), raw(id)));
    }
    /// The staged plan, or an empty view.
    plan_view staged(const pool &p) const noexcept
    {
        return plan_view(rsp_plan_staged(p.get()));
    }
    /// rsp_checkpoint_lookup: where key's checkpoint is (RSP_ENOKEY: none).
    result<rsp_checkpoint_loc> try_checkpoint(const pool &p, std::uint64_t key) const noexcept
    {
        rsp_checkpoint_loc loc{};
        rsp_error e{};
        rsp_status st = rsp_checkpoint_lookup(p.get(), key, &loc, &e);
        return detail::done(st, e, loc);
    }
    /// Whether a checkpoint is stored under key: the cheap probe (no message
    /// is formatted for a miss).
    bool has_checkpoint(const pool &p, std::uint64_t key) const noexcept
    {
        return rsp_checkpoint_lookup(p.get(), key, nullptr, nullptr) == RSP_OK;
    }

  private:
    static rsp_status begin(rsp_error &e) noexcept
    {
        // The words only on a refusal: a section's begin stays one call.
        rsp_status st = rsp_read_begin();
        return st == RSP_OK ? st : rsp_read_explain(st, &e);
    }
    rsp_error e_{};
    rsp_status st_;
    bool open_ = st_ == RSP_OK;
};

// ---------------------------------------------------------------------------
// Export and import (docs/semantics.md 9.4, docs/transfer.md)
// ---------------------------------------------------------------------------

/// The pool's storage as regions (rsp_pool_regions): a transport registers
/// each once. Any thread; allocates the vector (throws std::bad_alloc).
inline std::vector<rsp_region> regions(const pool &p)
{
    rsp_error e{};
    std::uint32_t n = 0;
    detail::done(rsp_pool_regions(p.get(), nullptr, 0, &n, &e), e).value();
    std::vector<rsp_region> out(n);
    detail::done(rsp_pool_regions(p.get(), out.data(), n, &n, &e), e).value();
    return out;
}

/// What rsp::state_export::open takes: request r, every holding (a
/// holding's labels: set .labels), or the checkpoint under key; the pool's
/// own sharding, waiting forever for steps in flight.
inline rsp_export_spec export_request(rid r, std::uint64_t tag = 0) noexcept
{
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.rid = raw(r);
    s.tag = tag;
    return s;
}
inline rsp_export_spec export_checkpoint(checkpoint_key key, std::uint64_t tag = 0) noexcept
{
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.what = RSP_XFER_CHECKPOINT;
    s.key = raw(key);
    s.tag = tag;
    return s;
}

/// An open export (rsp_export_open): what it names stays pinned until
/// close() or destruction (which closes, ignoring a failure). Move-only.
/// The pool must outlive it.
class state_export
{
  public:
    state_export() noexcept = default;
    state_export(state_export &&o) noexcept : e_(std::exchange(o.e_, nullptr))
    {
    }
    state_export &operator=(state_export &&o) noexcept
    {
        if (this != &o) {
            (void)try_close();
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    state_export(const state_export &) = delete;
    state_export &operator=(const state_export &) = delete;
    ~state_export()
    {
        (void)try_close();
    }

    /// Waits for the steps in flight (up to spec.timeout_ns), pins, and
    /// returns once the bytes are final. Synchronous.
    static result<state_export> try_open(const pool &p, const rsp_export_spec &spec) noexcept
    {
        rsp_error e{};
        rsp_export *x = nullptr;
        rsp_status st = rsp_export_open(p.get(), &spec, &x, &e);
        if (st != RSP_OK)
            return detail::done(st, e).error();
        state_export out;
        out.e_ = x;
        return result<state_export>(std::move(out));
    }
    static state_export open(const pool &p, const rsp_export_spec &spec)
    {
        return try_open(p, spec).value();
    }
    explicit operator bool() const noexcept
    {
        return e_ != nullptr;
    }
    /// The header, plain data to send as its bytes (valid until close).
    const rsp_xfer_header &header() const noexcept
    {
        return *rsp_export_header(e_);
    }
    /// This pool's extents, in the order the importer lists its own.
    span<const rsp_extent> extents() const noexcept
    {
        std::uint32_t n = 0;
        const rsp_extent *x = rsp_export_extents(e_, &n);
        return {x, n};
    }
    /// Unpin (rsp_export_close); a failure leaves it open. Closed: a no-op.
    result<void> try_close() noexcept
    {
        if (!e_)
            return {};
        rsp_error e{};
        rsp_status st = rsp_export_close(e_, &e);
        if (st == RSP_OK)
            e_ = nullptr;
        return detail::done(st, e);
    }
    void close()
    {
        try_close().value();
    }
    rsp_export *get() const noexcept
    {
        return e_;
    }

  private:
    rsp_export *e_ = nullptr;
};

/// An import begun (rsp_import_begin): reserved, zeroed, invisible until
/// commit(). Destruction aborts one still open (seq 0: in an ordered pool
/// commit or abort it with its number first). Move-only; the pool must
/// outlive it.
class state_import
{
  public:
    state_import() noexcept = default;
    state_import(state_import &&o) noexcept : i_(std::exchange(o.i_, nullptr))
    {
    }
    state_import &operator=(state_import &&o) noexcept
    {
        if (this != &o) {
            (void)try_abort();
            i_ = std::exchange(o.i_, nullptr);
        }
        return *this;
    }
    state_import(const state_import &) = delete;
    state_import &operator=(const state_import &) = delete;
    ~state_import()
    {
        (void)try_abort();
    }

    /// h: any source rank's header; a request's is imported as r, a
    /// checkpoint's under its key (r unused). seq: an ordered pool's
    /// number, else 0. Synchronous.
    static result<state_import> try_begin(const pool &p, const rsp_xfer_header &h, rid r,
                                          std::uint64_t seq = 0) noexcept
    {
        rsp_error e{};
        rsp_import *x = nullptr;
        rsp_status st = rsp_import_begin(p.get(), &h, raw(r), seq, &x, &e);
        if (st != RSP_OK)
            return detail::done(st, e).error();
        state_import out;
        out.i_ = x;
        return result<state_import>(std::move(out));
    }
    static state_import begin(const pool &p, const rsp_xfer_header &h, rid r, std::uint64_t seq = 0)
    {
        return try_begin(p, h, r, seq).value();
    }
    explicit operator bool() const noexcept
    {
        return i_ != nullptr;
    }
    /// The extents that receive source rank src_rank's share (of a source
    /// of src_world_size ranks), paired one to one with its export's.
    std::vector<rsp_extent> extents(std::uint32_t src_world_size = 1,
                                    std::uint32_t src_rank = 0) const
    {
        rsp_error e{};
        std::uint32_t n = 0;
        detail::done(rsp_import_extents(i_, src_world_size, src_rank, nullptr, 0, &n, &e), e)
            .value();
        std::vector<rsp_extent> out(n);
        detail::done(rsp_import_extents(i_, src_world_size, src_rank, out.data(), n, &n, &e), e)
            .value();
        return out;
    }
    /// Make it visible (rsp_import_commit); a failure leaves it open.
    result<void> try_commit(std::uint64_t seq = 0) noexcept
    {
        if (!i_)
            return detail::failure(RSP_EINVAL, "the import was committed or aborted");
        rsp_error e{};
        rsp_status st = rsp_import_commit(i_, seq, &e);
        if (st == RSP_OK)
            i_ = nullptr;
        return detail::done(st, e);
    }
    void commit(std::uint64_t seq = 0)
    {
        try_commit(seq).value();
    }
    /// Zero and free what begin reserved (rsp_import_abort). Closed: a no-op.
    result<void> try_abort(std::uint64_t seq = 0) noexcept
    {
        if (!i_)
            return {};
        rsp_error e{};
        rsp_status st = rsp_import_abort(i_, seq, &e);
        if (st == RSP_OK)
            i_ = nullptr;
        return detail::done(st, e);
    }
    void abort(std::uint64_t seq = 0)
    {
        try_abort(seq).value();
    }
    rsp_import *get() const noexcept
    {
        return i_;
    }

  private:
    rsp_import *i_ = nullptr;
};

} // namespace rsp

#endif // RSP_RSP_HPP
