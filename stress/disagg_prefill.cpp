// rsp-stress: the disaggregated mode's prefill process (docs/stress.md). The
// decode side spawns it (rsp-stress --disagg-child CTL,FD0,FD1,...). Its
// main thread keeps several requests prefilling on a pool of its own, a few
// rows of span 2..8 a step, the forward writing prefill_value(rid, label,
// k) at the request's k-th step; a finished request goes to a queue. One
// thread per link (FD0, FD1, ...) takes finished requests, exports each,
// offers it over rsp_ucx and closes the export: committed by the peer, it
// is removed here; aborted on purpose or refused for room, it is exported
// again. The odd links take up to kBatch finished requests at once and
// offer them as one batch (rsp_ucx_send_many), each settled by its own
// status. At the end every request is gone and the pool is empty; the totals
// go back on CTL.
// SPDX-License-Identifier: Apache-2.0
#include "disagg.h"

#include <cinttypes>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include <unistd.h>

namespace stress
{

namespace
{

constexpr unsigned kPrefilling = 6; // requests prefilling at once
constexpr unsigned kMaxTries = 16;  // exports of one request before it is dropped

struct PReq {
    rsp::rid rid{0};
    bool draft = false;    // also holds the "draft" label
    uint32_t k = 0, n = 0; // prefill steps done, and to do
    int32_t slot_main = -1, slot_draft = -1;
    uint32_t tries = 0;
};

class Prefill
{
  public:
    Prefill(Context &cx, rsp::pool &pool, Storage &st, rsp::label draft)
        : cx_(cx), pool_(pool), st_(st), draft_(draft), rng_(mix64(cx.opt.seed * 4099u + 3))
    {
    }
    void run_steps(std::chrono::steady_clock::time_point deadline);
    void link_main(unsigned index, int fd);
    bool take(PReq *q);
    bool try_take(PReq *q);
    void give_back(const PReq &q);
    void done_with_one();
    Report report{};
    std::mutex mu; // guards report, queue_, outstanding_, producing_

  private:
    bool step(std::vector<PReq> &live);
    bool offer(rsp_ucx *u, int fd, PReq &q);
    bool offer_batch(rsp_ucx *u, int fd, PReq &first);
    rsp_export *open_export(const PReq &q, uint64_t *bytes);
    bool settle(PReq &q, rsp_status st, uint64_t bytes, const char *why);
    Context &cx_;
    rsp::pool &pool_;
    Storage &st_;
    rsp::label draft_;
    Rng rng_;
    uint64_t next_rid_ = 1, next_id_ = 1;
    std::condition_variable cv_;
    std::deque<PReq> queue_;
    uint64_t outstanding_ = 0; // finished and not yet moved (queued or being offered)
    bool producing_ = true;
};

// One prefill step over every live request; the finished ones are queued.
bool Prefill::step(std::vector<PReq> &live)
{
    Checks &ck = cx_.checks;
    rsp::step decl(rsp::step_id{next_id_++});
    std::vector<FRow> rows;
    for (PReq &q : live) {
        const int32_t span = 2 + (int32_t)rng_.below(7);
        decl.row(q.rid, rsp::label::main, span);
        rows.push_back({q.rid, rsp::label::main, q.slot_main, q.k > 0,
                        prefill_value(q.rid, rsp::label::main, q.k),
                        prefill_value(q.rid, rsp::label::main, q.k + 1)});
        if (q.draft) {
            decl.row(q.rid, draft_, span);
            rows.push_back({q.rid, draft_, q.slot_draft, q.k > 0, prefill_value(q.rid, draft_, q.k),
                            prefill_value(q.rid, draft_, q.k + 1)});
        }
    }
    rsp::result<rsp_admit_outcome> out = pool_.try_admit(decl);
    if (!ck.expect(CHECK_DISAGG, out.ok() && out.value().ok,
                   "prefill: admit of step %" PRIu64 ": %s", rsp::raw(decl.id()),
                   out.ok() ? "refused" : out.error().message))
        return false;
    rsp::result<void> r = pool_.try_plan(decl);
    if (!ck.expect(CHECK_DISAGG, r.ok(), "prefill: plan: %s", r.error().message))
        return false;
    if (!disagg_forward(cx_, pool_, st_, decl.id(), rows, "prefill", true))
        return false;
    r = pool_.try_commit(decl, rsp::forward_complete());
    if (!ck.expect(CHECK_DISAGG, r.ok(), "prefill: commit: %s", r.error().message))
        return false;
    size_t i = 0;
    for (PReq &q : live) {
        q.slot_main = rows[i++].slot;
        if (q.draft)
            q.slot_draft = rows[i++].slot;
        q.k++;
    }
    std::lock_guard<std::mutex> g(mu);
    report.steps++;
    for (size_t j = 0; j < live.size();) {
        if (live[j].k < live[j].n) {
            j++;
            continue;
        }
        queue_.push_back(live[j]);
        outstanding_++;
        live[j] = live.back();
        live.pop_back();
    }
    cv_.notify_all();
    return true;
}

// Keep kPrefilling requests prefilling until the deadline (fewer while the
// links fall behind), then finish the ones started.
void Prefill::run_steps(std::chrono::steady_clock::time_point deadline)
{
    std::vector<PReq> live;
    for (;;) {
        const bool open = std::chrono::steady_clock::now() < deadline;
        uint64_t backlog;
        {
            std::lock_guard<std::mutex> g(mu);
            backlog = outstanding_;
        }
        while (open && live.size() < kPrefilling && backlog < 2 * kPrefilling) {
            PReq q;
            q.rid = rsp::rid{next_rid_++};
            q.draft = rng_.chance(0.3);
            q.n = 1 + rng_.below(4);
            live.push_back(q);
            std::lock_guard<std::mutex> g(mu);
            report.requests++;
        }
        if (live.empty() && !open)
            break;
        if (live.empty() || cx_.abort.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (cx_.abort.load())
                break;
            continue;
        }
        if (!step(live))
            break;
    }
    // Whatever a failed step left prefilling is removed here.
    for (const PReq &q : live) {
        remove_rid(cx_.checks, pool_, q.rid, "prefill: remove");
    }
    std::lock_guard<std::mutex> g(mu);
    producing_ = false;
    cv_.notify_all();
}

// The next finished request to offer; false once none will come.
bool Prefill::take(PReq *q)
{
    std::unique_lock<std::mutex> g(mu);
    cv_.wait(g, [&] { return !queue_.empty() || (!producing_ && outstanding_ == 0); });
    if (queue_.empty())
        return false;
    *q = queue_.front();
    queue_.pop_front();
    return true;
}

// The next finished request if one is queued now.
bool Prefill::try_take(PReq *q)
{
    std::lock_guard<std::mutex> g(mu);
    if (queue_.empty())
        return false;
    *q = queue_.front();
    queue_.pop_front();
    return true;
}

void Prefill::give_back(const PReq &q)
{
    std::lock_guard<std::mutex> g(mu);
    queue_.push_back(q);
    cv_.notify_all();
}

void Prefill::done_with_one()
{
    std::lock_guard<std::mutex> g(mu);
    outstanding_--;
    cv_.notify_all();
}

// q's export (its extents' bytes in *bytes), or nullptr after a failed check.
rsp_export *Prefill::open_export(const PReq &q, uint64_t *bytes)
{
    rsp_export_spec spec;
    rsp_export_spec_init(&spec);
    spec.rid = rsp::raw(q.rid);
    spec.tag = q.k;
    rsp_export *e = nullptr;
    rsp_error err{};
    rsp_status st = rsp_export_open(pool_.get(), &spec, &e, &err);
    if (!cx_.checks.expect(CHECK_DISAGG, st == RSP_OK, "prefill: export of rid %" PRIu64 ": %s",
                           rsp::raw(q.rid), err.message))
        return nullptr;
    uint32_t n = 0;
    const rsp_extent *x = rsp_export_extents(e, &n);
    *bytes = 0;
    for (uint32_t i = 0; i < n; i++)
        *bytes += x[i].length;
    return e;
}

// q's offer answered st (its export closed): remove q (moved, or given up)
// or queue it again. false when the link is down.
bool Prefill::settle(PReq &q, rsp_status st, uint64_t bytes, const char *why)
{
    Checks &ck = cx_.checks;
    if (st == kAbortOnPurpose || st == RSP_ECAPACITY) {
        std::lock_guard<std::mutex> g(mu);
        (st == RSP_ECAPACITY ? report.refused : report.aborted)++;
    }
    q.tries += st == kAbortOnPurpose;
    // A full decode pool empties as it decodes: refusals are not counted as tries.
    const bool again = st == RSP_ECAPACITY || (st == kAbortOnPurpose && q.tries < kMaxTries);
    if (again) {
        if (st == RSP_ECAPACITY)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        give_back(q);
        return true;
    }
    ck.expect(CHECK_DISAGG, st == RSP_OK, "prefill: rid %" PRIu64 " not moved after %u tries: %s",
              rsp::raw(q.rid), q.tries, why);
    if (st == RSP_OK) {
        std::lock_guard<std::mutex> g(mu);
        report.moved++;
        report.bytes += bytes;
    }
    // Nothing pins it any more: the export is closed.
    remove_rid(ck, pool_, q.rid, "prefill: remove of a moved rid", CHECK_DISAGG);
    done_with_one();
    return st == RSP_OK || st == kAbortOnPurpose || st == RSP_ECAPACITY;
}

// Export q, offer it on the link, close the export, settle q.
bool Prefill::offer(rsp_ucx *u, int fd, PReq &q)
{
    uint64_t bytes = 0;
    rsp_export *e = open_export(q, &bytes);
    if (!e)
        return false;
    rsp_error err{};
    Frame f{kFrameMagic, FRAME_OFFER};
    bool sent = fd_io(fd, &f, sizeof f, true, std::chrono::steady_clock::now() + kHang);
    rsp_status st = sent ? rsp_ucx_send(u, e, kXferTimeoutNs, &err) : RSP_EDEVICE;
    rsp_error cerr{};
    cx_.checks.expect(CHECK_DISAGG, rsp_export_close(e, &cerr) == RSP_OK,
                      "prefill: export close: %s", cerr.message);
    return settle(q, st, bytes, sent ? err.message : "the link's socket failed");
}

// first and up to kBatch - 1 more finished requests exported and offered as
// one batch; each settled by its own status (a transport failure: every one
// by it). false when the link is down.
bool Prefill::offer_batch(rsp_ucx *u, int fd, PReq &first)
{
    std::vector<PReq> qs{first};
    for (PReq more; qs.size() < kBatch && try_take(&more);)
        qs.push_back(more);
    std::vector<rsp_export *> xs;
    std::vector<uint64_t> bytes(qs.size());
    for (size_t i = 0; i < qs.size(); i++) {
        rsp_export *e = open_export(qs[i], &bytes[i]);
        if (!e) {
            for (rsp_export *x : xs)
                rsp_export_close(x, nullptr);
            return false;
        }
        xs.push_back(e);
    }
    rsp_error err{};
    Frame f{kFrameMagic, FRAME_BATCH};
    bool sent = fd_io(fd, &f, sizeof f, true, std::chrono::steady_clock::now() + kHang);
    // A send whose answer never came gives every request its status.
    std::vector<rsp_status> sts(qs.size(), RSP_EDEVICE);
    if (sent)
        (void)rsp_ucx_send_many(u, xs.data(), uint32_t(xs.size()), kXferTimeoutNs, sts.data(),
                                &err);
    for (rsp_export *x : xs) {
        rsp_error cerr{};
        cx_.checks.expect(CHECK_DISAGG, rsp_export_close(x, &cerr) == RSP_OK,
                          "prefill: export close: %s", cerr.message);
    }
    bool up = true;
    for (size_t i = 0; i < qs.size(); i++)
        up &= settle(qs[i], sts[i], bytes[i], sent ? err.message : "the link's socket failed");
    return up;
}

void Prefill::link_main(unsigned index, int fd)
{
    Checks &ck = cx_.checks;
    rsp_ucx *u = nullptr;
    rsp_error err{};
    rsp_status st = rsp_ucx_create(pool_.get(), &u, &err);
    if (st == RSP_OK)
        st = rsp_ucx_connect(u, fd, kXferTimeoutNs, &err);
    bool up = ck.expect(CHECK_DISAGG, st == RSP_OK, "prefill: link %u: %s", index, err.message);
    PReq q;
    while (take(&q)) {
        if (!up) { // a dead link still drains its share, so the others can end
            remove_rid(ck, pool_, q.rid, "prefill: remove");
            done_with_one();
            continue;
        }
        up = batch_link(index) ? offer_batch(u, fd, q) : offer(u, fd, q);
    }
    Frame f{kFrameMagic, FRAME_END};
    if (up)
        ck.expect(CHECK_DISAGG,
                  fd_io(fd, &f, sizeof f, true, std::chrono::steady_clock::now() + kHang),
                  "prefill: link %u: the end frame was not sent", index);
    rsp_ucx_destroy(u);
}

// "CTL,FD0,FD1,...": the descriptors the decode side passed.
bool parse_fds(const std::string &s, std::vector<int> &fds)
{
    const char *p = s.c_str();
    while (*p) {
        char *end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p || v < 0 || v > 65535 || (*end && *end != ','))
            return false;
        fds.push_back((int)v);
        p = *end ? end + 1 : end;
    }
    return fds.size() >= 2;
}

// SIGKILL this process after ms (the decode side asked it to die mid-run).
void die_after(unsigned ms)
{
    std::thread([ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        std::raise(SIGKILL);
    }).detach();
}

} // namespace

int disagg_child_main(const Options &opt)
{
    std::vector<int> fds;
    if (!parse_fds(opt.disagg_child, fds)) {
        std::fprintf(stderr, "rsp-stress: bad --disagg-child '%s'\n", opt.disagg_child.c_str());
        return 2;
    }
    std::signal(SIGPIPE, SIG_IGN); // a dead peer's socket: EPIPE, not a signal
    Context cx(opt);
    rsp::pool_config cfg;
    disagg_config(cfg, kPrefillSlots);
    rsp::result<rsp::pool> created = rsp::pool::try_create(cfg);
    if (!cx.checks.expect(CHECK_API, created.ok(), "prefill pool: %s", created.error().message))
        return 1;
    rsp::pool pool = std::move(created).value();
    Storage storage;
    rsp::result<rsp::label> draft = pool.try_intern("draft");
    if (!storage.init(pool, cfg, cx.checks) || !draft.ok())
        return 1;
    if (opt.disagg_die_ms)
        die_after(opt.disagg_die_ms);
    Prefill pf(cx, pool, storage, draft.value());
    std::vector<std::thread> links;
    for (size_t i = 1; i < fds.size(); i++)
        links.emplace_back(&Prefill::link_main, &pf, unsigned(i - 1), fds[i]);
    {
        rsp::reader reader(std::nothrow); // the forward reads plans on this thread
        cx.checks.expect(CHECK_API, reader.ok(), "prefill reader: %s", reader.error().message);
        auto t0 = std::chrono::steady_clock::now();
        pf.run_steps(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(opt.seconds)));
        for (auto &t : links)
            t.join();
    }
    check_pool_empty(cx, pool, "prefill", kPrefillSlots);
    (void)pool.try_close();
    Report &r = pf.report;
    r.magic = kReportMagic;
    r.links = unsigned(fds.size() - 1);
    r.passed = cx.checks.total_passed();
    r.failed = cx.checks.total_failed();
    bool sent = fd_io(fds[0], &r, sizeof r, true, std::chrono::steady_clock::now() + kHang);
    return sent && r.failed == 0 ? 0 : 1;
}

} // namespace stress
