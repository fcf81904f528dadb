// rsp-stress: the disaggregated mode (docs/stress.md, docs/transfer.md), the
// decode side. It spawns the prefill process (disagg_prefill.cpp) with one
// socket per link and one for its report, and runs one thread per link: each
// reads the prefill side's frames and imports every offer over rsp_ucx into
// a decode pool of its own (rsp_ucx_receive_begin, then _end; a batch,
// on the odd links, with rsp_ucx_receive_many, each request refused for
// room or committed on its own). Before the commit a random eighth of the
// single offers are aborted on purpose (kAbortOnPurpose): then a probe
// import takes slots again and every byte of them must be zero. A
// committed import is read through the block views: every byte must be the
// prefill pattern of (rid, label, steps) before the decode steps, which this
// thread runs (one row of span 1 per holding, the forward checking and
// writing the state) until each request is removed. With --disagg-kill the
// first prefill process is killed mid-run and a second one spawned: the
// decode pool must stay whole (imports committed or absent).
// Check kind "disagg": calls, frames, the byte and zero checks' outcome and
// both sides' counts (moved, bytes, aborted, refused) equal.
// SPDX-License-Identifier: Apache-2.0
#include "disagg.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <shared_mutex>
#include <string>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stress
{

void disagg_config(rsp::pool_config &cfg, uint32_t slots)
{
    cfg.layers(3).slots(slots);
    cfg.block("tag", RSP_DTYPE_I64, {3}); // Storage: block 0 holds the state value
    cfg.block("conv", RSP_DTYPE_U8, {4, 130});
    cfg.block("ssm", RSP_DTYPE_F32, {8, 64});
}

uint64_t prefill_value(rsp::rid rid, rsp::label label, uint64_t k)
{
    uint64_t v = 0;
    for (uint64_t i = 1; i <= k; i++)
        v = next_state(rid, label, rsp::step_id{i}, v);
    return v;
}

bool fd_io(int fd, void *buf, size_t n, bool out, std::chrono::steady_clock::time_point deadline)
{
    char *p = static_cast<char *>(buf);
    while (n) {
        auto left = deadline - std::chrono::steady_clock::now();
        if (left <= left.zero())
            return false;
        struct pollfd pfd = {fd, short(out ? POLLOUT : POLLIN), 0};
        int ms = (int)std::min<int64_t>(
            100, std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1);
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR)
            return false;
        if (r <= 0)
            continue;
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
            return false;
        if (k > 0)
            p += k, n -= size_t(k);
    }
    return true;
}

// Check each row's addressing for label l and learn the slots not known.
static void address_rows(Context &cx, const rsp::addressing &ad, rsp::label l,
                         std::vector<FRow> &rows, uint64_t id, const char *side)
{
    uint32_t pos = 0;
    for (FRow &r : rows) {
        if (r.label != l)
            continue;
        const uint32_t at = pos++;
        const bool ok = at < ad.num_rows() && (r.slot < 0 || ad.slots()[at] == r.slot) &&
                        ad.has_state()[at] == r.has_state;
        if (cx.checks.expect(
                CHECK_ADDRESSING, ok,
                "%s step %" PRIu64 " rid %" PRIu64 " label %u: slot %d has_state %d, "
                "model %d %d",
                side, id, rsp::raw(r.rid), rsp::raw(l), at < ad.num_rows() ? ad.slots()[at] : -9,
                at < ad.num_rows() ? (int)ad.has_state()[at] : -1, r.slot, (int)r.has_state))
            r.slot = ad.slots()[at];
    }
}

void disagg_run_rows(Context &cx, Storage &st, std::vector<FRow> &rows, rsp::step_id id,
                     const char *side)
{
    for (FRow &r : rows) {
        if (r.slot < 0)
            continue; // its addressing check failed
        std::string why;
        const bool ok = r.has_state ? st.matches(r.slot, r.v_read, &why) : st.is_zero(r.slot, &why);
        cx.checks.expect(CHECK_CONTENT, ok,
                         "%s step %" PRIu64 " rid %" PRIu64 " label %u slot %d: %s (tag %016" PRIx64
                         ")",
                         side, rsp::raw(id), rsp::raw(r.rid), rsp::raw(r.label), r.slot,
                         why.c_str(), st.read_tag(r.slot));
        st.write(r.slot, r.v_write);
    }
}

bool disagg_forward(Context &cx, rsp::pool &pool, Storage &st, rsp::step_id id,
                    std::vector<FRow> &rows, const char *side, bool run)
{
    Checks &ck = cx.checks;
    {
        rsp::read_section section(std::nothrow);
        rsp::plan_view p = section ? section.plan(pool, id) : rsp::plan_view(nullptr);
        if (!ck.expect(CHECK_API, p && p.id() == id, "%s: step %" PRIu64 "'s plan missing", side,
                       rsp::raw(id)))
            return false;
        std::vector<rsp::label> labels;
        for (const FRow &r : rows)
            if (std::find(labels.begin(), labels.end(), r.label) == labels.end())
                labels.push_back(r.label);
        for (rsp::label l : labels) {
            rsp::result<rsp::addressing> ad = p.try_addressing(l);
            if (!ck.expect(CHECK_API, ad.ok(), "%s: addressing: %s", side, ad.error().message))
                return false;
            rsp::result<void> w = pool.try_event_wait(ad.value().ready(), kHang);
            if (!ck.expect(CHECK_HANG, w.ok(), "%s: ready: %s", side, rsp_strerror(w.status()))) {
                cx.abort.store(true);
                return false;
            }
            address_rows(cx, ad.value(), l, rows, rsp::raw(id), side);
        }
    }
    if (run)
        disagg_run_rows(cx, st, rows, id, side);
    return true;
}

namespace
{

struct DReq {
    rsp::rid rid{0};  // here
    rsp::rid from{0}; // in the prefill pool: the pattern's rid
    std::vector<rsp::label> labels;
    std::vector<int32_t> slots;
    std::vector<uint64_t> v; // per label: the state now
    uint32_t left = 0;       // decode steps to run
};

// Counts of one prefill process's lifetime, compared with its report.
struct GenCounts {
    std::atomic<uint64_t> moved{0}, bytes{0}, aborted{0}, refused{0};
};

class Decode
{
  public:
    Decode(Context &cx, rsp::pool &pool, Storage &st, rsp::label draft, rsp::host_fence &fence)
        : cx_(cx), pool_(pool), st_(st), draft_(draft), fence_(fence), links_(cx.opt.disagg_links),
          rng_(mix64(cx.opt.seed * 2053u + 17))
    {
    }
    ~Decode();
    bool setup();
    void run();

  private:
    void drop_live();
    struct Link {
        rsp_ucx *u = nullptr;
        int fd = -1;
        uint64_t next_rid = 0;
        std::thread t;
    };
    bool spawn(double seconds, unsigned die_ms);
    void end_generation();
    void link_main(unsigned index, uint64_t gen);
    bool receive_one(unsigned index, Rng &rng, bool dying);
    bool receive_batch(unsigned index, bool dying);
    void count_moved(rsp::rid rid, const rsp_xfer_header &h, uint64_t bytes);
    void abort_and_probe(rsp_ucx *u, rsp_import *imp, const rsp_xfer_header &h,
                         std::shared_lock<std::shared_mutex> &shared);
    void verify_and_queue(rsp::rid rid, const rsp_xfer_header &h);
    bool step();
    bool extents_zero(const rsp_extent *x, uint32_t n, std::string *why) const;
    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    rsp::label draft_;
    rsp::host_fence &fence_; // the decode forwards' forward_done timeline
    std::vector<Link> links_;
    Rng rng_; // this thread's
    std::vector<rsp_region> regions_;
    std::shared_mutex import_mu_; // shared: an import in progress; exclusive: abort + probe
    std::mutex gate_; // held by a prober waiting for import_mu_: no new import starves it
    std::mutex arr_mu_;
    std::vector<DReq> arrivals_; // committed and verified, not decoding yet
    std::vector<DReq> live_;     // this thread's
    std::atomic<unsigned> links_up_{0};
    GenCounts gen_;
    pid_t child_ = -1;
    int ctl_ = -1;
    uint64_t gen_id_ = 0, next_step_ = 1;
    bool dying_ = false; // the current prefill process is told to die
};

Decode::~Decode()
{
    for (Link &l : links_)
        rsp_ucx_destroy(l.u);
}

bool Decode::setup()
{
    Checks &ck = cx_.checks;
    uint32_t n = 0;
    rsp_error err{};
    regions_.resize(3 * RSP_MAX_BLOCKS);
    rsp_status st =
        rsp_pool_regions(pool_.get(), regions_.data(), uint32_t(regions_.size()), &n, &err);
    if (!ck.expect(CHECK_API, st == RSP_OK, "decode: regions: %s", err.message))
        return false;
    regions_.resize(n);
    for (Link &l : links_) {
        st = rsp_ucx_create(pool_.get(), &l.u, &err);
        if (!ck.expect(CHECK_DISAGG, st == RSP_OK, "decode: rsp_ucx_create: %s", err.message))
            return false;
    }
    return true;
}

// Start a prefill process for seconds (die_ms > 0: it kills itself then),
// one socket per link and the report's, and the link threads.
bool Decode::spawn(double seconds, unsigned die_ms)
{
    std::vector<int> theirs;
    std::string spec;
    int sv[2];
    for (size_t i = 0; i <= links_.size(); i++) {
        // Ours close on exec (a later child must not keep them open); theirs
        // are inherited.
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
            fcntl(sv[1], F_SETFD, 0) != 0) {
            cx_.checks.fail(CHECK_DISAGG, "decode: socketpair: %s", std::strerror(errno));
            return false;
        }
        (i == 0 ? ctl_ : links_[i - 1].fd) = sv[0];
        theirs.push_back(sv[1]);
        spec += (i ? "," : "") + std::to_string(sv[1]);
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3f", seconds);
    std::vector<std::string> args = {"rsp-stress",
                                     "--disagg-child",
                                     spec,
                                     "--seconds",
                                     secs,
                                     "--seed",
                                     std::to_string(cx_.opt.seed + 1000 * gen_id_),
                                     "--disagg-die-ms",
                                     std::to_string(die_ms)};
    std::vector<char *> argv;
    for (std::string &a : args)
        argv.push_back(&a[0]);
    argv.push_back(nullptr);
    child_ = fork();
    if (child_ == 0) {
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    for (int fd : theirs)
        close(fd);
    if (!cx_.checks.expect(CHECK_DISAGG, child_ > 0, "decode: fork: %s", std::strerror(errno)))
        return false;
    dying_ = die_ms > 0;
    gen_.moved = gen_.bytes = gen_.aborted = gen_.refused = 0;
    links_up_.store(unsigned(links_.size()));
    for (unsigned i = 0; i < links_.size(); i++)
        links_[i].t = std::thread(&Decode::link_main, this, i, gen_id_);
    cx_.disagg_processes.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// The prefill process's links are all down: join them, reap it and compare
// its report with what arrived here.
void Decode::end_generation()
{
    Checks &ck = cx_.checks;
    for (Link &l : links_) {
        l.t.join();
        close(l.fd);
        l.fd = -1;
    }
    Report r{};
    bool got = fd_io(ctl_, &r, sizeof r, false, std::chrono::steady_clock::now() + kHang) &&
               r.magic == kReportMagic;
    close(ctl_);
    ctl_ = -1;
    int ws = 0;
    pid_t w = waitpid(child_, &ws, 0);
    const bool killed = w == child_ && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
    if (dying_ && killed) {
        cx_.disagg_kills.fetch_add(1, std::memory_order_relaxed);
        return; // no report; the pool's consistency is checked at the end
    }
    ck.expect(CHECK_DISAGG, w == child_ && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && got,
              "the prefill process ended with status %d (%s)%s", ws,
              WIFSIGNALED(ws) ? strsignal(WTERMSIG(ws)) : "exited", got ? "" : ", no report");
    if (!got)
        return;
    ck.expect(CHECK_DISAGG,
              r.moved == gen_.moved && r.bytes == gen_.bytes && r.aborted == gen_.aborted &&
                  r.refused == gen_.refused,
              "prefill says moved %" PRIu64 " (%" PRIu64 " bytes), aborted %" PRIu64
              ", refused %" PRIu64 "; decode says %" PRIu64 " (%" PRIu64 " bytes), %" PRIu64
              ", %" PRIu64,
              r.moved, r.bytes, r.aborted, r.refused, gen_.moved.load(), gen_.bytes.load(),
              gen_.aborted.load(), gen_.refused.load());
    ck.expect(CHECK_DISAGG, r.failed == 0, "the prefill process failed %" PRIu64 " checks",
              r.failed);
    cx_.disagg_prefill_steps.fetch_add(r.steps, std::memory_order_relaxed);
    cx_.disagg_prefill_checks.fetch_add(r.passed, std::memory_order_relaxed);
}

void Decode::link_main(unsigned index, uint64_t gen)
{
    Checks &ck = cx_.checks;
    Link &l = links_[index];
    Rng rng(mix64(cx_.opt.seed * 8191u + index + 64 * gen));
    rsp_error err{};
    rsp_status st = rsp_ucx_connect(l.u, l.fd, kXferTimeoutNs, &err);
    bool up = st == RSP_OK;
    if (!dying_)
        ck.expect(CHECK_DISAGG, up, "decode: link %u: connect: %s", index, err.message);
    while (up && !cx_.abort.load()) {
        Frame f{};
        if (!fd_io(l.fd, &f, sizeof f, false, std::chrono::steady_clock::now() + kHang)) {
            // A killed prefill process closes its sockets; a live one never
            // goes quiet this long.
            if (!dying_)
                ck.fail(CHECK_DISAGG, "decode: link %u: no frame from the prefill side", index);
            break;
        }
        if (!ck.expect(CHECK_DISAGG,
                       f.magic == kFrameMagic &&
                           (f.kind == (batch_link(index) ? FRAME_BATCH : FRAME_OFFER) ||
                            f.kind == FRAME_END),
                       "decode: link %u: a bad frame (%#x, %u)", index, f.magic, f.kind) ||
            f.kind == FRAME_END)
            break;
        up = f.kind == FRAME_BATCH ? receive_batch(index, dying_) : receive_one(index, rng, dying_);
    }
    links_up_.fetch_sub(1);
}

// Receive one offer on link index: refused for room, aborted on purpose, or
// committed and verified. false when the link is down.
bool Decode::receive_one(unsigned index, Rng &rng, bool dying)
{
    Checks &ck = cx_.checks;
    Link &l = links_[index];
    const rsp::rid rid{(uint64_t(index + 1) << 48) + ++l.next_rid};
    const bool abort_it = rng.chance(0.125);
    {
        std::lock_guard<std::mutex> wait_for_probe(gate_);
    }
    std::shared_lock<std::shared_mutex> shared(import_mu_);
    rsp_xfer_header h{};
    rsp_import *imp = nullptr;
    rsp_error err{};
    rsp_status st = rsp_ucx_receive_begin(l.u, rsp::raw(rid), 0, kXferTimeoutNs, &h, &imp, &err);
    if (!imp && st == RSP_ECAPACITY) {
        gen_.refused++;
        cx_.disagg_refused.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    if (st != RSP_OK) {
        // A failed pull left the import open: ending it aborts it.
        if (imp)
            (void)rsp_ucx_receive_end(l.u, imp, st, 0, kXferTimeoutNs, nullptr);
        cx_.disagg_failed.fetch_add(1, std::memory_order_relaxed);
        if (!dying)
            ck.fail(CHECK_DISAGG, "decode: link %u: receive: %s", index, err.message);
        rsp::result<rsp_holding> gone = pool_.try_holding(rid, rsp::label::main);
        ck.expect(CHECK_DISAGG, gone.status() == RSP_ENOREQ,
                  "decode: a failed import of rid %" PRIu64 " left a holding (%s)", rsp::raw(rid),
                  rsp_strerror(gone.status()));
        return false;
    }
    uint32_t n = 0;
    std::vector<rsp_extent> x(4096);
    st = rsp_import_extents(imp, h.world_size, h.rank, x.data(), uint32_t(x.size()), &n, &err);
    ck.expect(CHECK_API, st == RSP_OK && n <= x.size(), "decode: import extents: %s", err.message);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n && i < x.size(); i++)
        bytes += x[i].length;
    if (abort_it) {
        abort_and_probe(l.u, imp, h, shared);
        return true;
    }
    st = rsp_ucx_receive_end(l.u, imp, RSP_OK, 0, kXferTimeoutNs, &err);
    shared.unlock();
    if (!ck.expect(CHECK_DISAGG, st == RSP_OK || dying, "decode: commit: %s", err.message) ||
        st != RSP_OK)
        return false;
    count_moved(rid, h, bytes);
    return true;
}

void Decode::count_moved(rsp::rid rid, const rsp_xfer_header &h, uint64_t bytes)
{
    gen_.moved++;
    gen_.bytes += bytes;
    cx_.disagg_moved.fetch_add(1, std::memory_order_relaxed);
    cx_.disagg_bytes.fetch_add(bytes, std::memory_order_relaxed);
    verify_and_queue(rid, h);
}

// An unsharded request's bytes as its header describes them: every block
// of every layer, once per holding (what its extents add up to).
static uint64_t header_bytes(const rsp_xfer_header &h)
{
    uint64_t slot = 0;
    for (uint32_t b = 0; b < h.num_blocks; b++) {
        uint64_t n = rsp_dtype_size(rsp_dtype(h.blocks[b].dtype));
        for (uint32_t d = 0; d < h.blocks[b].ndim; d++)
            n *= uint64_t(h.blocks[b].shape[d]);
        slot += n;
    }
    return slot * h.num_layers * h.num_holdings;
}

// Receive one batch on link index (rsp_ucx_receive_many): each request
// refused for room or committed and verified. false when the link is down.
bool Decode::receive_batch(unsigned index, bool dying)
{
    Checks &ck = cx_.checks;
    Link &l = links_[index];
    rsp_rid rids[kBatch];
    for (uint32_t i = 0; i < kBatch; i++)
        rids[i] = (uint64_t(index + 1) << 48) + ++l.next_rid;
    {
        std::lock_guard<std::mutex> wait_for_probe(gate_);
    }
    std::shared_lock<std::shared_mutex> shared(import_mu_);
    rsp_xfer_header h[kBatch];
    rsp_status sts[kBatch];
    uint32_t count = 0;
    rsp_error err{};
    // Its status is the first request's failure: each is read from sts.
    (void)rsp_ucx_receive_many(l.u, rids, kBatch, nullptr, kXferTimeoutNs, &count, h, sts, &err);
    shared.unlock();
    // The offer was read when count is set; a transport failure after it
    // leaves every import that was not refused with its status.
    bool down = count == 0 || count > kBatch;
    for (uint32_t i = 0; !down && i < count; i++) {
        const bool transport = sts[i] == RSP_EDEVICE || sts[i] == RSP_ETIMEDOUT;
        if (sts[i] == RSP_OK) {
            count_moved(rsp::rid{rids[i]}, h[i], header_bytes(h[i]));
            cx_.disagg_batched.fetch_add(1, std::memory_order_relaxed);
        } else if (sts[i] == RSP_ECAPACITY) {
            gen_.refused++;
            cx_.disagg_refused.fetch_add(1, std::memory_order_relaxed);
        } else if (!transport || !dying) {
            ck.fail(CHECK_DISAGG, "decode: link %u: batch request %u: %s (%s)", index, i,
                    rsp_strerror(sts[i]), err.message);
        }
        down |= transport;
    }
    for (uint32_t i = 0; i < kBatch; i++) {
        if (i < count && !down && sts[i] == RSP_OK)
            continue;
        rsp::result<rsp_holding> gone = pool_.try_holding(rsp::rid{rids[i]}, rsp::label::main);
        ck.expect(CHECK_DISAGG, gone.status() == RSP_ENOREQ,
                  "decode: batch import of rid %" PRIu64 " not committed but holding (%s)", rids[i],
                  rsp_strerror(gone.status()));
    }
    cx_.disagg_batches.fetch_add(!down, std::memory_order_relaxed);
    if (down) {
        cx_.disagg_failed.fetch_add(1, std::memory_order_relaxed);
        if (!dying)
            ck.fail(CHECK_DISAGG, "decode: link %u: receive batch: %s", index, err.message);
    }
    return !down;
}

bool Decode::extents_zero(const rsp_extent *x, uint32_t n, std::string *why) const
{
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = static_cast<const uint8_t *>(regions_[x[i].region].base) + x[i].offset;
        for (uint64_t b = 0; b < x[i].length; b++)
            if (p[b]) {
                *why = "extent " + std::to_string(i) + " (region " + std::to_string(x[i].region) +
                       " offset " + std::to_string(x[i].offset) + ") byte " + std::to_string(b) +
                       " is " + std::to_string(p[b]);
                return false;
            }
    }
    return true;
}

// Abort imp on purpose (every byte arrived), then, with no other import
// under way, begin a probe import of the same header: the slots it gets
// (usually the ones just freed) must read zero. The exporter is answered
// kAbortOnPurpose and exports again.
void Decode::abort_and_probe(rsp_ucx *u, rsp_import *imp, const rsp_xfer_header &h,
                             std::shared_lock<std::shared_mutex> &shared)
{
    Checks &ck = cx_.checks;
    shared.unlock();
    std::unique_lock<std::mutex> first(gate_);
    std::unique_lock<std::shared_mutex> alone(import_mu_);
    first.unlock();
    rsp_error err{};
    rsp_status st = rsp_ucx_receive_end(u, imp, kAbortOnPurpose, 0, kXferTimeoutNs, &err);
    ck.expect(CHECK_DISAGG, st == kAbortOnPurpose, "decode: abort on purpose answered %s: %s",
              rsp_strerror(st), err.message);
    gen_.aborted++;
    cx_.disagg_aborted.fetch_add(1, std::memory_order_relaxed);
    rsp_import *probe = nullptr;
    st = rsp_import_begin(pool_.get(), &h, (uint64_t{0xFF} << 48) + 1, 0, &probe, &err);
    if (st == RSP_ECAPACITY)
        return;
    if (!ck.expect(CHECK_DISAGG, st == RSP_OK, "decode: probe import: %s", err.message))
        return;
    std::vector<rsp_extent> x(4096);
    uint32_t n = 0;
    st = rsp_import_extents(probe, h.world_size, h.rank, x.data(), uint32_t(x.size()), &n, &err);
    std::string why;
    if (ck.expect(CHECK_API, st == RSP_OK && n <= x.size(), "decode: probe extents: %s",
                  err.message)) {
        const bool zero = extents_zero(x.data(), n, &why);
        ck.expect(CHECK_ZEROS, zero,
                  "decode: a slot an import begin hands out after an abort is not zero: %s",
                  why.c_str());
    }
    st = rsp_import_abort(probe, 0, &err);
    ck.expect(CHECK_API, st == RSP_OK, "decode: probe abort: %s", err.message);
    cx_.disagg_probes.fetch_add(1, std::memory_order_relaxed);
}

// A committed import: every holding the header names is here with its
// state, and every byte is the prefill pattern; then it waits for decode.
void Decode::verify_and_queue(rsp::rid rid, const rsp_xfer_header &h)
{
    Checks &ck = cx_.checks;
    DReq q;
    q.rid = rid;
    q.from = rsp::rid{h.rid};
    for (uint32_t i = 0; i < h.num_holdings; i++) {
        const bool main = std::strcmp(h.holdings[i].label, "main") == 0;
        if (!ck.expect(CHECK_DISAGG, main || std::strcmp(h.holdings[i].label, "draft") == 0,
                       "decode: an import names label \"%s\"", h.holdings[i].label))
            continue;
        const rsp::label l = main ? rsp::label::main : draft_;
        rsp::result<rsp_holding> got = pool_.try_holding(rid, l);
        if (!ck.expect(CHECK_DISAGG, got.ok() && got.value().has_state && h.holdings[i].has_state,
                       "decode: rid %" PRIu64 " label %s after the commit: %s", rsp::raw(rid),
                       h.holdings[i].label, got.ok() ? "no state" : got.error().message))
            continue;
        const uint64_t v = prefill_value(q.from, l, h.tag);
        std::string why;
        const bool ok = st_.matches(got.value().index, v, &why);
        ck.expect(CHECK_CONTENT, ok,
                  "decode: imported rid %" PRIu64 " (prefill rid %" PRIu64 ") label %s slot %d: %s",
                  rsp::raw(rid), h.rid, h.holdings[i].label, got.value().index, why.c_str());
        q.labels.push_back(l);
        q.slots.push_back(got.value().index);
        q.v.push_back(v);
    }
    q.left = 2 + uint32_t(mix64(rsp::raw(rid)) % 5);
    std::lock_guard<std::mutex> g(arr_mu_);
    arrivals_.push_back(std::move(q));
}

// One decode step over every live request (a row of span 1 a holding); the
// requests whose steps are done are removed.
bool Decode::step()
{
    Checks &ck = cx_.checks;
    rsp::step decl(rsp::step_id{next_step_++});
    std::vector<FRow> rows;
    for (DReq &q : live_)
        for (size_t i = 0; i < q.labels.size(); i++) {
            decl.row(q.rid, q.labels[i], 1);
            rows.push_back({q.rid, q.labels[i], q.slots[i], true, q.v[i],
                            next_state(q.rid, q.labels[i], decl.id(), q.v[i])});
        }
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(decl);
    if (!ck.expect(CHECK_DISAGG, out.ok() && out.value().ok,
                   "decode: admit of step %" PRIu64 ": %s", rsp::raw(decl.id()),
                   out.ok() ? "refused" : out.error().message))
        return false;
    rsp::result<void> r = pool_.try_plan(decl);
    if (!ck.expect(CHECK_DISAGG, r.ok(), "decode: plan: %s", r.error().message))
        return false;
    // With --disagg-ahead half the commits go before the forward's writes,
    // with a forward_done the forward signals after them (the CPU ahead of
    // the device), and the requests done are removed at once: the zeroing
    // of their slots queues behind that wait while imports go on.
    const bool ahead = cx_.opt.disagg_ahead && rng_.chance(0.5);
    if (!disagg_forward(cx_, pool_, st_, decl.id(), rows, "decode", !ahead))
        return false;
    r = pool_.try_commit(decl, ahead ? fence_.at(rsp::raw(decl.id())) : rsp::forward_complete());
    if (!ck.expect(CHECK_DISAGG, r.ok(), "decode: commit: %s", r.error().message))
        return false;
    cx_.disagg_decode_steps.fetch_add(1, std::memory_order_relaxed);
    size_t k = 0;
    for (DReq &q : live_)
        for (size_t i = 0; i < q.labels.size(); i++)
            q.v[i] = rows[k++].v_write;
    for (size_t j = 0; j < live_.size();) {
        DReq &q = live_[j];
        if (--q.left) {
            j++;
            continue;
        }
        remove_rid(ck, pool_, q.rid, "decode: remove", CHECK_DISAGG);
        live_[j] = std::move(live_.back());
        live_.pop_back();
    }
    if (ahead) {
        disagg_run_rows(cx_, st_, rows, decl.id(), "decode");
        fence_.signal(rsp::raw(decl.id()));
    }
    return true;
}

void Decode::run()
{
    const auto t0 = std::chrono::steady_clock::now();
    const double secs = cx_.opt.seconds;
    Rng rng(mix64(cx_.opt.seed * 131u + 5));
    // The first prefill process dies between 30 % and 60 % of the run.
    unsigned die_ms = cx_.opt.disagg_kill ? unsigned(secs * (300 + rng.below(300))) : 0;
    bool spawned = spawn(secs, die_ms);
    bool transfers = spawned;
    while (!cx_.abort.load()) {
        {
            std::lock_guard<std::mutex> g(arr_mu_);
            for (DReq &q : arrivals_)
                live_.push_back(std::move(q));
            arrivals_.clear();
        }
        if (!live_.empty()) {
            if (!step())
                drop_live();
        } else if (!transfers) {
            break;
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (transfers && links_up_.load() == 0) {
            end_generation();
            const double left =
                secs - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            gen_id_++;
            // After a kill, a second prefill process runs for what is left
            // (at least half a second: a transfer the kill cut can have
            // waited out its timeout, past the end of the run).
            transfers = dying_ && spawn(std::max(left, 0.5), 0);
        }
    }
    if (transfers) { // a hang elsewhere: stop the prefill process; every link wait is bounded
        kill(child_, SIGKILL);
        for (Link &l : links_)
            l.t.join();
        (void)waitpid(child_, nullptr, 0);
    }
}

// After a failed step (a check failed already) the live requests go.
void Decode::drop_live()
{
    for (DReq &q : live_) {
        remove_rid(cx_.checks, pool_, q.rid, "decode: remove");
    }
    live_.clear();
}

} // namespace

void disagg_main(Context &cx)
{
    rsp::result<rsp::host_fence> fence = rsp::host_fence::try_create(); // outlives the pool
    if (!cx.checks.expect(CHECK_API, fence.ok(), "decode fence: %s", fence.error().message))
        return;
    rsp::pool_config cfg;
    disagg_config(cfg, kDecodeSlots);
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "decode pool: %s", created.error().message))
        return;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    rsp::result<rsp::label> draft = pool.try_intern("draft");
    if (!storage.init(pool, cfg, cx.checks) ||
        !cx.checks.expect(CHECK_API, draft.ok(), "decode: intern: %s", draft.error().message))
        return;
    rsp::reader reader(std::nothrow); // the forward reads plans on this thread
    if (!cx.checks.expect(CHECK_API, reader.ok(), "decode reader: %s", reader.error().message))
        return;
    {
        Decode d(cx, pool, storage, draft.value(), fence.value());
        if (d.setup())
            d.run();
    }
    if (cx.abort.load())
        return;
    // Every import committed was decoded and removed, every abort freed:
    // nothing held, nothing importing (a half-done import holds its slots).
    check_pool_empty(cx, pool, "decode", kDecodeSlots);
}

} // namespace stress
