/*
 * Reference model of the pool's bookkeeping (see model.h for the choices it
 * makes where docs/semantics.md is silent). It shares no code with src/core.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "model.h"

#include <assert.h>
#include <string.h>

void rspm_init(rspm *m, uint32_t max_slots, bool sink, uint32_t num_rids)
{
    assert(max_slots <= RSPM_MAX_SLOTS && num_rids <= RSPM_MAX_RIDS);
    memset(m, 0, sizeof *m);
    m->max_slots = max_slots;
    m->sink = sink;
    m->pad = sink ? RSP_SINK_SLOT : RSP_NO_SLOT;
    m->num_rids = num_rids;
    uint32_t first = sink ? 1 : 0;
    if (sink)
        m->slot[0].state = RSPM_SINK, m->slot[0].content = RSPM_UNKNOWN;
    /* Pops give ascending ids: the lowest id sits on top. */
    for (uint32_t s = max_slots; s-- > first;) {
        m->slot[s].state = RSPM_FREE;
        m->free_stack[m->num_free++] = (int32_t)s;
    }
}

/* --- slots ------------------------------------------------------------- */

static int32_t pop_slot(rspm *m)
{
    assert(m->num_free > 0);
    int32_t s = m->free_stack[--m->num_free];
    assert(m->slot[s].state == RSPM_FREE && m->slot[s].content == 0);
    m->slot[s].state = RSPM_HELD;
    return s;
}

/* Zero a slot and push it (every release zeroes first). */
static void push_slot(rspm *m, int32_t s)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++)
        m->steps[i].fslot[s] = false; /* post-fork marks of the holding that left */
    m->slot[s].state = RSPM_FREE;
    m->slot[s].content = 0;
    m->slot[s].written = false;
    m->slot[s].zero_pending = false;
    m->free_stack[m->num_free++] = s;
}

/* A holding lets go of its slot: free now, or pending while an in-flight
 * step addresses it (docs/semantics.md 3, removal during a step). */
static void let_go(rspm *m, int32_t s)
{
    if (m->slot[s].pins > 0) {
        m->slot[s].state = RSPM_PENDING;
        m->slot[s].content = RSPM_UNKNOWN; /* a forward may still write it */
        m->cov.pending++;
    } else {
        push_slot(m, s);
    }
}

static void forget_writes(rspm *m, int32_t s);

static void zero_content(rspm *m, int32_t s)
{
    m->slot[s].content = 0;
    m->slot[s].written = false;
    m->slot[s].zero_pending = false;
}

/* --- holdings ------------------------------------------------------------ */

static rspm_holding *find(rspm *m, uint32_t ridx, uint32_t label)
{
    rspm_request *r = &m->req[ridx];
    if (!r->exists)
        return NULL;
    for (uint32_t i = 0; i < r->num_holdings; i++)
        if (r->h[i].label == label)
            return &r->h[i];
    return NULL;
}

const rspm_holding *rspm_holding_get(const rspm *m, uint32_t ridx, uint32_t label)
{
    return find((rspm *)m, ridx, label);
}

static void drop_holding(rspm *m, uint32_t ridx, uint32_t label)
{
    rspm_request *r = &m->req[ridx];
    for (uint32_t i = 0; i < r->num_holdings; i++)
        if (r->h[i].label == label) {
            memmove(&r->h[i], &r->h[i + 1], (r->num_holdings - i - 1) * sizeof r->h[0]);
            r->num_holdings--;
            return;
        }
    assert(0);
}

static bool pinned_by(const rspm_step *st, int32_t s);

/* Is slot s pinned by a planned step other than `except`? Only a planned
 * step's forward may be writing it. */
static bool planned_pin(const rspm *m, const rspm_step *except, int32_t s)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++) {
        const rspm_step *u = &m->steps[i];
        if (u != except && u->used && u->planned && pinned_by(u, s))
            return true;
    }
    return false;
}

/* --- checkpoints --------------------------------------------------------- */

void rspm_ck_init(rspm *m, uint32_t device, uint32_t host, bool demote)
{
    m->tier_size[0] = device;
    m->tier_size[1] = host;
    m->demote = demote;
}

static bool ck_pinned(const rspm_ck *k)
{
    return k->user_pins || k->step_pins;
}

static void lru_remove(rspm *m, uint64_t key)
{
    uint32_t t = m->ck[key].tier, i = 0;
    while (m->lru[t][i] != key)
        i++;
    memmove(&m->lru[t][i], &m->lru[t][i + 1], (m->lru_n[t] - i - 1) * sizeof m->lru[t][0]);
    m->lru_n[t]--;
}

void rspm_ck_value_policy(rspm *m, double weight_byte)
{
    m->value = true;
    m->weight_byte = weight_byte;
}

rsp_status rspm_ck_value(rspm *m, uint64_t key, uint64_t value)
{
    if (!m->ck[key].present)
        return RSP_ENOKEY;
    m->ck[key].value = value;
    return RSP_OK;
}

/* A use: key becomes its tier's most recent. */
static void ck_touch(rspm *m, uint64_t key)
{
    lru_remove(m, key);
    m->lru[m->ck[key].tier][m->lru_n[m->ck[key].tier]++] = key;
    m->ck[key].seq = ++m->ck_seq;
}

static void ck_forget(rspm *m, uint64_t key)
{
    lru_remove(m, key);
    m->tier_count[m->ck[key].tier]--;
    m->ck[key].present = false;
}

/* Store key in tier as its most recent, with value and restores (0 for a
 * take, a demoted key's own). */
static void ck_store(rspm *m, uint64_t key, uint32_t tier, uint64_t content, uint64_t value,
                     uint32_t restores)
{
    m->ck[key] = (rspm_ck){.present = true,
                           .tier = tier,
                           .content = content,
                           .seq = ++m->ck_seq,
                           .value = value,
                           .restores = restores};
    m->lru[tier][m->lru_n[tier]++] = key;
    m->tier_count[tier]++;
}

/* The value policy's score of key, as the core computes it. */
static double ck_score(const rspm *m, uint64_t key)
{
    const rspm_ck *k = &m->ck[key];
    double f = 1.0;
    for (uint32_t r = k->restores; r > 1; r /= 2)
        f += 1.0;
    return (double)k->seq + m->weight_byte * f * (double)k->value;
}

/* The unpinned key of tier t a full tier gives up, 0 when none: the least
 * recently used (LRU), or the lowest (score, seq) (value). */
static uint64_t lru_victim(rspm *m, uint32_t t)
{
    uint64_t best = 0, first = 0;
    for (uint32_t i = 0; i < m->lru_n[t]; i++) {
        uint64_t k = m->lru[t][i];
        if (ck_pinned(&m->ck[k]))
            continue;
        if (!m->value)
            return k;
        if (!first)
            first = k;
        if (!best || ck_score(m, k) < ck_score(m, best) ||
            (ck_score(m, k) == ck_score(m, best) && m->ck[k].seq < m->ck[best].seq))
            best = k;
    }
    m->value_not_lru += best != first;
    return best;
}

/* Slots of tier t in use: its checkpoints, and on the host tier the
 * swapped requests' slots. */
static uint32_t tier_used(const rspm *m, uint32_t t)
{
    return m->tier_count[t] + (t == 1 ? m->swapped_slots : 0);
}

/* Take `content` under key into tier (the source checks were made). */
static rsp_status take(rspm *m, uint64_t key, uint32_t tier, uint64_t content)
{
    rspm_ck *k = &m->ck[key];
    if (k->present && ck_pinned(k))
        return RSP_EPINNED;
    uint64_t victim = 0, hv = 0;
    bool demote = false;
    if (tier_used(m, tier) - (k->present && k->tier == tier) >= m->tier_size[tier]) {
        victim = lru_victim(m, tier);
        if (!victim)
            return RSP_ECAPACITY;
        if (tier == 0 && m->demote && m->tier_size[1]) {
            if (tier_used(m, 1) - (k->present && k->tier == 1) < m->tier_size[1])
                demote = true;
            else
                demote = (hv = lru_victim(m, 1)) != 0;
        }
    }
    if (k->present)
        ck_forget(m, key);
    if (victim) {
        m->evictions++;
        rspm_ck v = m->ck[victim];
        ck_forget(m, victim);
        if (hv) {
            ck_forget(m, hv);
            m->evictions++;
        }
        if (demote)
            ck_store(m, victim, 1, v.content, v.value, v.restores);
    }
    ck_store(m, key, tier, content, 0, 0);
    return RSP_OK;
}

rsp_status rspm_ck_take(rspm *m, uint64_t key, uint32_t ridx, uint32_t label, uint32_t tier)
{
    m->evictions = 0;
    const rspm_holding *h = rspm_holding_get(m, ridx, label);
    if (!h)
        return RSP_ENOREQ;
    if (planned_pin(m, NULL, h->slot))
        return RSP_EORDER; /* a planned forward may be writing it */
    return take(m, key, tier, m->slot[h->slot].content);
}

rsp_status rspm_ck_drop(rspm *m, uint64_t key)
{
    if (!m->ck[key].present)
        return RSP_ENOKEY;
    if (ck_pinned(&m->ck[key]))
        return RSP_EPINNED;
    ck_forget(m, key);
    return RSP_OK;
}

rsp_status rspm_ck_pin(rspm *m, uint64_t key, bool pin)
{
    rspm_ck *k = &m->ck[key];
    if (!k->present)
        return RSP_ENOKEY;
    if (!pin && !k->user_pins)
        return RSP_EINVAL;
    k->user_pins += pin ? 1u : (uint32_t)-1;
    if (pin)
        ck_touch(m, key);
    return RSP_OK;
}

/* Is slot s pinned, or marked by post-forks or takes, by a step in flight? */
static bool slot_busy(const rspm *m, int32_t s)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++)
        if (m->steps[i].used && (pinned_by(&m->steps[i], s) || m->steps[i].fslot[s]))
            return true;
    return false;
}

rsp_status rspm_swap_out(rspm *m, uint32_t ridx)
{
    rspm_request *r = &m->req[ridx];
    m->evictions = 0;
    if (!m->tier_size[1])
        return RSP_ECAPACITY; /* no host tier: refused for every rid */
    if (!r->exists)
        return RSP_ENOREQ;
    if (r->swapped)
        return RSP_EORDER;
    for (uint32_t i = 0; i < r->num_holdings; i++)
        if (slot_busy(m, r->h[i].slot))
            return RSP_EORDER;
    uint32_t room = m->tier_size[1] - tier_used(m, 1);
    for (uint32_t i = 0; i < m->lru_n[1]; i++)
        room += !ck_pinned(&m->ck[m->lru[1][i]]);
    if (room < r->num_holdings)
        return RSP_ECAPACITY;
    for (uint32_t i = 0; i < r->num_holdings; i++) {
        if (tier_used(m, 1) == m->tier_size[1]) {
            ck_forget(m, lru_victim(m, 1));
            m->evictions++;
        }
        m->swapped_slots++;
        r->swap_label[i] = r->h[i].label;
        r->swap_content[i] = m->slot[r->h[i].slot].content;
        r->swap_has[i] = r->h[i].has_state;
    }
    r->swap_n = r->num_holdings;
    rspm_reset(m, ridx, true); /* released as any release (not swapped yet) */
    r->swapped = true;
    return RSP_OK;
}

rsp_status rspm_swap_in(rspm *m, uint32_t ridx, rspm_admit *out)
{
    rspm_request *r = &m->req[ridx];
    *out = (rspm_admit){.ok = true, .free = m->num_free};
    if (!r->exists)
        return RSP_ENOREQ;
    if (!r->swapped)
        return RSP_EORDER;
    if (r->swap_n > m->num_free) {
        *out = (rspm_admit){.ok = false,
                            .ridx = ridx,
                            .label = r->swap_label[m->num_free],
                            .slots_short = r->swap_n - m->num_free,
                            .free = m->num_free};
        return RSP_OK;
    }
    for (uint32_t i = 0; i < r->swap_n; i++) {
        rspm_holding *h = &r->h[r->num_holdings++];
        *h = (rspm_holding){.label = r->swap_label[i],
                            .slot = pop_slot(m),
                            .has_state = r->swap_has[i],
                            .gen_moved = true,
                            .gen = ++m->gen};
        m->slot[h->slot].content = r->swap_content[i];
        m->slot[h->slot].written = r->swap_content[i] != 0;
    }
    m->swapped_slots -= r->swap_n;
    r->swapped = false;
    return RSP_OK;
}

bool rspm_swapped_row(const rspm *m, const rspm_decl *d)
{
    for (uint32_t i = 0; i < d->num_rows; i++)
        if (!d->rows[i].padding && m->req[d->rows[i].ridx].exists &&
            m->req[d->rows[i].ridx].swapped)
            return true;
    return false;
}

bool rspm_ck_restores_present(const rspm *m, const rspm_decl *d)
{
    for (uint32_t i = 0; i < d->num_restores; i++)
        if (!m->ck[d->restores[i].key].present)
            return false;
    return true;
}

/* A live plan's restores, before its pre-forks: each (present, pinned by
 * the step) key's state into its row's holding. */

/* --- requests ------------------------------------------------------------ */

void rspm_ingest(rspm *m, uint32_t ridx)
{
    if (!m->req[ridx].exists) {
        m->req[ridx].exists = true;
        m->req[ridx].num_holdings = 0;
    }
}

void rspm_reset(rspm *m, uint32_t ridx, bool free)
{
    rspm_request *r = &m->req[ridx];
    if (!r->exists)
        return;
    if (r->swapped) { /* holds nothing: its host slots go back */
        m->swapped_slots -= r->swap_n;
        r->swapped = false;
    }
    if (free) {
        for (uint32_t i = 0; i < r->num_holdings; i++)
            let_go(m, r->h[i].slot);
        r->num_holdings = 0;
        return;
    }
    for (uint32_t i = 0; i < r->num_holdings; i++) {
        rspm_holding *h = &r->h[i];
        h->has_state = false;
        h->gen_moved = true;
        h->gen = ++m->gen;
        forget_writes(m, h->slot);
        if (planned_pin(m, NULL, h->slot))
            m->slot[h->slot].zero_pending = true,
            m->cov.zero_deferred++; /* zeroed after the forward */
        else
            zero_content(m, h->slot);
    }
}

void rspm_remove(rspm *m, uint32_t ridx)
{
    if (!m->req[ridx].exists)
        return;
    rspm_reset(m, ridx, true);
    m->req[ridx].exists = false;
}

void rspm_release(rspm *m, uint32_t ridx, uint32_t label)
{
    rspm_holding *h = find(m, ridx, label);
    if (!h)
        return;
    int32_t s = h->slot;
    drop_holding(m, ridx, label);
    let_go(m, s);
}

/* --- steps --------------------------------------------------------------- */

static rspm_step *step_find(rspm *m, uint64_t id)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++)
        if (m->steps[i].used && m->steps[i].step_id == id)
            return &m->steps[i];
    return NULL;
}

bool rspm_step_open(const rspm *m, uint64_t step_id)
{
    return step_find((rspm *)m, step_id) != NULL;
}

/* Forking rids: the rids of all non-padding rows, first appearance order. */
static uint32_t forking_rids(const rspm_decl *d, uint32_t *out)
{
    uint32_t n = 0;
    if (d->num_pre + d->num_post == 0)
        return 0;
    for (uint32_t i = 0; i < d->num_rows; i++) {
        if (d->rows[i].padding)
            continue;
        bool seen = false;
        for (uint32_t j = 0; j < n; j++)
            seen |= out[j] == d->rows[i].ridx;
        if (!seen)
            out[n++] = d->rows[i].ridx;
    }
    return n;
}

/* Per-rid forks: a fork of group g > 0 applies to the rids whose rows
 * carry g (the first non-padding row says: the step is valid). */
static bool fork_applies(const rspm_decl *d, const rsp_fork *f, uint32_t ridx)
{
    if (f->group == 0)
        return true;
    for (uint32_t i = 0; i < d->num_rows; i++)
        if (!d->rows[i].padding && d->rows[i].ridx == ridx)
            return d->rows[i].fork_group == f->group;
    return false;
}

/* A commit's skip_post_forks for ridx: any non-padding row says so. */
static bool rid_skips(const rspm_decl *d, uint32_t ridx)
{
    for (uint32_t i = 0; i < d->num_rows; i++)
        if (!d->rows[i].padding && d->rows[i].ridx == ridx && d->rows[i].skip_post_forks)
            return true;
    return false;
}

typedef struct want {
    uint32_t ridx, label;
} want;

/* The (request, label) pairs admit allocates, in order, without repeats. */
static uint32_t admit_wants(const rspm_decl *d, want *w)
{
    uint32_t n = 0;
#define ADD(R, L)                                                                                  \
    do {                                                                                           \
        bool dup_ = false;                                                                         \
        for (uint32_t k_ = 0; k_ < n; k_++)                                                        \
            dup_ |= w[k_].ridx == (R) && w[k_].label == (L);                                       \
        if (!dup_)                                                                                 \
            w[n++] = (want){(R), (L)};                                                             \
    } while (0)
    for (uint32_t i = 0; i < d->num_rows; i++)
        if (!d->rows[i].padding && d->rows[i].span > 0)
            ADD(d->rows[i].ridx, d->rows[i].label);
    uint32_t fr[RSPM_MAX_ROWS];
    uint32_t nf = forking_rids(d, fr);
    for (uint32_t i = 0; i < nf; i++) {
        for (uint32_t f = 0; f < d->num_pre; f++)
            if (fork_applies(d, &d->pre[f], fr[i]))
                ADD(fr[i], d->pre[f].to);
        for (uint32_t f = 0; f < d->num_post; f++)
            if (fork_applies(d, &d->post[f], fr[i]))
                ADD(fr[i], d->post[f].to);
    }
#undef ADD
    return n;
}

static void pin(rspm *m, rspm_step *st, int32_t s)
{
    for (uint32_t i = 0; i < st->num_pins; i++)
        if (st->pins[i] == s)
            return;
    st->pins[st->num_pins++] = s;
    m->slot[s].pins++;
}

/* Does row r ask for per-token states? */
static bool spec_row(const rspm_row *r)
{
    return r->per_token && !r->padding && r->span > 0;
}

/* The output slots of d's per-token rows, in row order, pinned; their
 * holdings' slots marked. */
static void take_outputs(rspm *m, rspm_step *st, const rspm_decl *d)
{
    st->num_spec = 0;
    for (uint32_t i = 0; i < d->num_rows; i++) {
        const rspm_row *r = &d->rows[i];
        if (!spec_row(r))
            continue;
        assert(r->span <= RSPM_SPEC_MAX);
        rspm_spec *sp = &st->spec[st->num_spec++];
        *sp = (rspm_spec){.row = i, .ridx = r->ridx, .label = r->label, .span = (uint32_t)r->span};
        const rspm_holding *h = find(m, r->ridx, r->label);
        assert(h);
        st->spec_to[h->slot] = true;
        for (int32_t k = 0; k < r->span; k++) {
            sp->out[k] = pop_slot(m);
            pin(m, st, sp->out[k]);
        }
    }
}

int32_t rspm_spec_out(const rspm *m, uint64_t step_id, uint32_t row, uint32_t t)
{
    const rspm_step *st = step_find((rspm *)m, step_id);
    for (uint32_t k = 0; st && k < st->num_spec; k++)
        if (st->spec[k].row == row && t >= 1 && t <= st->spec[k].span)
            return st->spec[k].out[t - 1];
    return -1;
}

rspm_admit rspm_admit_step(rspm *m, const rspm_decl *d)
{
    rspm_admit out = {.ok = true, .free = m->num_free};
    /* A step already in flight is a re-admit: it allocates only what is
     * missing (docs/design.md), all or nothing like a first admit. */
    rspm_step *st = step_find(m, d->step_id);
    if (st && d->capture)
        return out;
    if (!d->capture) {
        want w[RSPM_MAX_ROWS * (1 + 2 * RSPM_MAX_FORKS)];
        uint32_t n = admit_wants(d, w);
        uint32_t fresh = 0;
        bool failed = false;
        for (uint32_t i = 0; i < n; i++) {
            if (find(m, w[i].ridx, w[i].label))
                continue;
            fresh++;
            if (fresh > m->num_free && !failed) {
                failed = true;
                out.ok = false;
                out.ridx = w[i].ridx;
                out.label = w[i].label;
            }
        }
        /* Output slots after them; a re-admit keeps the ones it has. */
        for (uint32_t i = 0; !st && i < d->num_rows; i++) {
            const rspm_row *r = &d->rows[i];
            if (!spec_row(r))
                continue;
            fresh += (uint32_t)r->span;
            if (fresh > m->num_free && !failed) {
                failed = true;
                out.ok = false;
                out.ridx = r->ridx;
                out.label = r->label;
            }
        }
        if (failed) {
            out.slots_short = fresh - m->num_free;
            return out;
        }
    }
    bool fresh_rec = !st;
    if (!st) {
        for (uint32_t i = 0; i < RSPM_MAX_STEPS && !st; i++)
            if (!m->steps[i].used)
                st = &m->steps[i];
        assert(st);
        memset(st, 0, sizeof *st);
        st->used = true;
        st->step_id = d->step_id;
        st->seq = ++m->clock;
    }
    /* A capture step reserves nothing, not even a request: its rows are
     * the runner's dummies (docs/core.md). */
    if (d->capture)
        return out;
    /* Implicit ingest of every non-padding row's rid. */
    for (uint32_t i = 0; i < d->num_rows; i++)
        if (!d->rows[i].padding)
            rspm_ingest(m, d->rows[i].ridx);
    want w[RSPM_MAX_ROWS * (1 + 2 * RSPM_MAX_FORKS)];
    uint32_t n = admit_wants(d, w);
    for (uint32_t i = 0; i < n; i++) {
        rspm_holding *h = find(m, w[i].ridx, w[i].label);
        if (!h) {
            rspm_request *r = &m->req[w[i].ridx];
            h = &r->h[r->num_holdings++];
            *h = (rspm_holding){
                .label = w[i].label, .slot = pop_slot(m), .gen_moved = true, .gen = ++m->gen};
            assert(st->num_journal < sizeof st->journal / sizeof st->journal[0]);
            st->journal[st->num_journal++] = (rspm_journal_entry){w[i].ridx, w[i].label, h->slot};
        }
        pin(m, st, h->slot);
    }
    for (uint32_t i = 0; i < d->num_rows; i++) {
        const rspm_row *r = &d->rows[i];
        const rspm_holding *h = r->padding || r->span <= 0 ? NULL : find(m, r->ridx, r->label);
        if (h)
            st->writes[h->slot] = true;
    }
    if (fresh_rec)
        take_outputs(m, st, d);
    uint32_t fr[RSPM_MAX_ROWS];
    uint32_t nfr = d->num_post ? forking_rids(d, fr) : 0;
    for (uint32_t i = 0; i < nfr; i++)
        for (uint32_t k = 0; k < d->num_post; k++) {
            const rspm_holding *h =
                fork_applies(d, &d->post[k], fr[i]) ? find(m, fr[i], d->post[k].to) : NULL;
            if (h)
                st->post_to[h->slot] = true;
        }
    for (uint32_t i = 0; i < d->num_restores; i++) {
        assert(m->ck[d->restores[i].key].present);
        m->ck[d->restores[i].key].step_pins |= 1u << (st - m->steps);
    }
    return out;
}

/* Step st's restores pin no key any more. */
static void unpin_keys(rspm *m, const rspm_step *st)
{
    uint32_t bit = 1u << (st - m->steps);
    for (uint32_t k = 0; k < RSPM_MAX_KEYS; k++)
        m->ck[k].step_pins &= ~bit;
}

/* The holding on slot s moved its generation: a planned step's write of
 * it no longer counts (its commit compares generations). */
static void forget_writes(rspm *m, int32_t s)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++)
        if (m->steps[i].used && m->steps[i].planned)
            m->steps[i].writes[s] = false;
}

/* A plan row's flag: has_state, or some in-flight step admitted before
 * `self` writes slot s (docs/semantics.md 9.1). */
static bool earlier_writes(rspm *m, const rspm_step *self, int32_t s, bool has_state)
{
    for (uint32_t i = 0; i < RSPM_MAX_STEPS && !has_state; i++) {
        const rspm_step *u = &m->steps[i];
        if (u->used && u != self && (!self || u->seq < self->seq) && u->writes[s]) {
            m->cov.overlap_flags++;
            return true;
        }
    }
    return has_state;
}

/* The step is over: unpin its slots in pin order; a slot whose last pin
 * this was is released if it is pending; a slot with a deferred zero is
 * zeroed once no other planned step pins it. A rollback gives back the
 * pending zeros its plan took over. */
static void finish(rspm *m, rspm_step *st, bool rollback)
{
    for (uint32_t i = 0; i < st->num_pins; i++) {
        int32_t s = st->pins[i];
        rspm_slot *sl = &m->slot[s];
        if (st->took[s]) {
            st->took[s] = false;
            if (rollback && sl->state == RSPM_HELD)
                sl->zero_pending = true;
        }
        if (st->unpinned[i])
            continue;
        assert(sl->pins > 0);
        --sl->pins;
        if (sl->pins == 0 && sl->state == RSPM_PENDING)
            push_slot(m, s), m->cov.pending_freed++;
        else if (sl->zero_pending && sl->state == RSPM_HELD && !planned_pin(m, st, s))
            zero_content(m, s);
    }
    unpin_keys(m, st);
    st->used = false;
}

static bool pinned_by(const rspm_step *st, int32_t s)
{
    for (uint32_t i = 0; i < st->num_pins; i++)
        if (st->pins[i] == s && !st->unpinned[i])
            return true;
    return false;
}

static void unpin_one(rspm *m, rspm_step *st, int32_t s)
{
    for (uint32_t i = 0; i < st->num_pins; i++)
        if (st->pins[i] == s && !st->unpinned[i]) {
            st->unpinned[i] = true;
            m->slot[s].pins--;
        }
}

uint64_t rspm_admit_blocker(const rspm *m, const rspm_decl *d)
{
    const rspm_step *self = step_find((rspm *)m, d->step_id);
    for (uint32_t i = 0; i < d->num_rows && !d->capture; i++) {
        const rspm_row *r = &d->rows[i];
        const rspm_holding *h =
            r->padding || r->span <= 0 ? NULL : rspm_holding_get(m, r->ridx, r->label);
        for (uint32_t k = 0; h && k < RSPM_MAX_STEPS; k++)
            if (m->steps[k].used && &m->steps[k] != self &&
                (m->steps[k].post_to[h->slot] || m->steps[k].spec_to[h->slot]))
                return m->steps[k].step_id;
    }
    /* A fork may not write a holding another step accepts into: the
     * accept moves its slot. */
    uint32_t fr[RSPM_MAX_ROWS];
    uint32_t nfr = d->capture ? 0 : forking_rids(d, fr);
    for (uint32_t i = 0; i < nfr; i++)
        for (uint32_t f = 0; f < d->num_pre + d->num_post; f++) {
            const rsp_fork *fk = f < d->num_pre ? &d->pre[f] : &d->post[f - d->num_pre];
            const rspm_holding *h =
                fork_applies(d, fk, fr[i]) ? rspm_holding_get(m, fr[i], fk->to) : NULL;
            for (uint32_t k = 0; h && k < RSPM_MAX_STEPS; k++)
                if (m->steps[k].used && &m->steps[k] != self && m->steps[k].spec_to[h->slot])
                    return m->steps[k].step_id;
        }
    return 0;
}

uint64_t rspm_rollback_blocker(const rspm *m, uint64_t step_id)
{
    const rspm_step *st = step_find((rspm *)m, step_id);
    for (uint32_t i = 0; st && i < st->num_pins; i++) {
        int32_t s = st->pins[i];
        if (st->unpinned[i] || m->slot[s].state != RSPM_HELD)
            continue;
        for (uint32_t k = 0; k < RSPM_MAX_STEPS; k++) {
            const rspm_step *u = &m->steps[k];
            if (u->used && u->seq > st->seq && pinned_by(u, s))
                return u->step_id;
        }
    }
    return 0;
}

void rspm_rollback(rspm *m, uint64_t step_id)
{
    rspm_step *st = step_find(m, step_id);
    if (!st)
        return;
    /* The output slots first (popped last), newest first. */
    for (uint32_t k = st->num_spec; k-- > 0;)
        for (uint32_t j = st->spec[k].span; j-- > 0;) {
            unpin_one(m, st, st->spec[k].out[j]);
            push_slot(m, st->spec[k].out[j]);
        }
    st->num_spec = 0;
    /* Reverse allocation order, so the free stack ends as before the admit.
     * An entry whose holding is gone (request removed) is skipped. */
    for (uint32_t i = st->num_journal; i-- > 0;) {
        rspm_journal_entry *e = &st->journal[i];
        rspm_holding *h = find(m, e->ridx, e->label);
        if (!h || h->slot != e->slot) {
            /* Removed during the step: pending. If this step is its last
             * pin, it is released here, at its journal position. */
            m->cov.rollback_skips++;
            rspm_slot *sl = &m->slot[e->slot];
            if (sl->state == RSPM_PENDING && sl->pins == 1 && pinned_by(st, e->slot)) {
                unpin_one(m, st, e->slot);
                push_slot(m, e->slot);
                m->cov.pending_freed++;
            }
            continue;
        }
        m->cov.rollback_frees++;
        drop_holding(m, e->ridx, e->label);
        unpin_one(m, st, e->slot);
        let_go(m, e->slot);
    }
    finish(m, st, true);
}

/* Apply forks in order: copy contents, to.has_state = from.has_state.
 * only != NULL (a commit's post-forks): a fork touching a slot another
 * planned step pins is skipped (that forward may be writing it). */
static void apply_forks(rspm *m, const rspm_decl *d, const rsp_fork *f, uint32_t nf,
                        const rspm_step *only)
{
    uint32_t fr[RSPM_MAX_ROWS];
    uint32_t n = forking_rids(d, fr);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < nf; k++) {
            if (!fork_applies(d, &f[k], fr[i]) || (only && rid_skips(d, fr[i])))
                continue; /* not its group's fork; a commit's rejected draft */
            rspm_holding *from = find(m, fr[i], f[k].from);
            rspm_holding *to = find(m, fr[i], f[k].to);
            if (!from || !to)
                continue;
            if (only && (planned_pin(m, only, from->slot) || planned_pin(m, only, to->slot)))
                continue;
            to->gen_moved = true;
            to->gen = ++m->gen;
            forget_writes(m, to->slot);
            if (from == to)
                continue;
            m->cov.fork_copies++;
            if (m->slot[from->slot].zero_pending) {
                /* The source reads as zeros (its zero waits for a forward in
                 * flight): the target gets zeros, not the doomed bytes. */
                m->cov.fork_from_reset++;
                m->slot[to->slot].content = 0;
                m->slot[to->slot].written = false;
            } else {
                /* A copy of bytes a forward wrote counts as written. */
                m->slot[to->slot].content = m->slot[from->slot].content;
                m->slot[to->slot].written = m->slot[from->slot].written;
            }
            to->has_state = from->has_state;
        }
}

static void build(const rspm *m, const rspm_decl *d, const bool *flag_of_holding, rspm_plan *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < d->num_rows; i++) {
        const rspm_row *r = &d->rows[i];
        rspm_label_plan *lp = NULL;
        for (uint32_t j = 0; j < out->num_labels; j++)
            if (out->labels[j].label == r->label)
                lp = &out->labels[j];
        if (!lp) {
            lp = &out->labels[out->num_labels++];
            lp->label = r->label;
        }
        uint32_t k = lp->num_rows++;
        lp->row_of[k] = i;
        lp->slot[k] = m->pad;
        lp->has_state[k] = false;
        if (d->capture || r->padding || r->span <= 0)
            continue;
        const rspm_request *rq = &m->req[r->ridx];
        if (!rq->exists)
            continue;
        for (uint32_t h = 0; h < rq->num_holdings; h++)
            if (rq->h[h].label == r->label) {
                lp->slot[k] = rq->h[h].slot;
                lp->has_state[k] = flag_of_holding[r->ridx * RSPM_MAX_LABELS + h];
            }
    }
}

/* A plan pins every slot it addresses: the forward of this step may write
 * it, so it must not be released before the step ends. */
static void pin_addressed(rspm *m, const rspm_decl *d, const rspm_plan *p)
{
    rspm_step *st = step_find(m, d->step_id);
    assert(st);
    for (uint32_t i = 0; i < d->num_rows; i++)
        for (uint32_t j = 0; j < p->num_labels; j++) {
            const rspm_label_plan *lp = &p->labels[j];
            for (uint32_t k = 0; k < lp->num_rows; k++)
                if (lp->row_of[k] == i && lp->slot[k] != m->pad)
                    pin(m, st, lp->slot[k]);
        }
}

/* Forking rids' (from, to) slots of every fork that does something. */
static uint32_t fork_slots(const rspm *m, const rspm_decl *d, const rsp_fork *f, uint32_t nf,
                           int32_t *out)
{
    uint32_t fr[RSPM_MAX_ROWS], n = 0;
    uint32_t nr = forking_rids(d, fr);
    for (uint32_t i = 0; i < nr; i++)
        for (uint32_t k = 0; k < nf; k++) {
            if (!fork_applies(d, &f[k], fr[i]))
                continue;
            const rspm_holding *from = rspm_holding_get(m, fr[i], f[k].from);
            const rspm_holding *to = rspm_holding_get(m, fr[i], f[k].to);
            if (!from || !to)
                continue;
            out[n++] = from->slot;
            out[n++] = to->slot;
        }
    return n;
}

uint64_t rspm_plan_blocker(const rspm *m, const rspm_decl *d)
{
    if (d->capture)
        return 0;
    int32_t fs[2 * RSPM_MAX_ROWS * 2 * RSPM_MAX_FORKS];
    uint32_t n = fork_slots(m, d, d->pre, d->num_pre, fs);
    n += fork_slots(m, d, d->post, d->num_post, fs + n);
    /* The core checks the forks in order, then the rows; the first hit
     * names the lowest step record, so report any blocker: the test only
     * checks that one exists and that it is in flight. */
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++) {
        const rspm_step *u = &m->steps[i];
        if (!u->used || !u->planned || step_find((rspm *)m, d->step_id) == u)
            continue;
        for (uint32_t k = 0; k < n; k++)
            if (pinned_by(u, fs[k]) || u->fslot[fs[k]])
                return u->step_id;
        for (uint32_t r = 0; r < d->num_rows; r++) {
            const rspm_row *row = &d->rows[r];
            if (row->padding || row->span <= 0)
                continue;
            const rspm_holding *h = rspm_holding_get(m, row->ridx, row->label);
            if (h && u->fslot[h->slot])
                return u->step_id;
        }
        /* A restore writes, a take reads its slot: not under a forward. */
        for (uint32_t k = 0; k < d->num_restores + d->num_takes; k++) {
            const rspm_ckdecl *c =
                k < d->num_restores ? &d->restores[k] : &d->takes[k - d->num_restores];
            const rspm_holding *h = rspm_holding_get(m, c->ridx, c->label);
            if (h && pinned_by(u, h->slot))
                return u->step_id;
        }
    }
    return 0;
}

static void restore(rspm *m, const rspm_decl *d)
{
    rspm_step *st = step_find(m, d->step_id);
    for (uint32_t i = 0; i < d->num_restores; i++) {
        const rspm_ckdecl *c = &d->restores[i];
        assert(m->ck[c->key].present);
        m->ck[c->key].step_pins |= 1u << (st - m->steps);
        rspm_holding *h = find(m, c->ridx, c->label);
        if (!h)
            continue;
        m->slot[h->slot].content = m->ck[c->key].content;
        m->slot[h->slot].written = true;
        h->has_state = true;
        h->gen = ++m->gen;
        h->gen_moved = true;
        forget_writes(m, h->slot);
        m->ck[c->key].restores++;
        ck_touch(m, c->key);
    }
}

void rspm_plan_step(rspm *m, const rspm_decl *d, bool staged, rspm_plan *out)
{
    bool flags[RSPM_MAX_RIDS * RSPM_MAX_LABELS] = {0};
    if (staged) {
        /* Flags as the pre-forks will leave them, nothing copied. */
        rspm copy = *m;
        if (!d->capture)
            apply_forks(&copy, d, d->pre, d->num_pre, NULL);
        const rspm_step *self = step_find(m, d->step_id);
        for (uint32_t r = 0; r < m->num_rids; r++)
            for (uint32_t h = 0; h < m->req[r].num_holdings; h++)
                flags[r * RSPM_MAX_LABELS + h] =
                    earlier_writes(m, self, m->req[r].h[h].slot, copy.req[r].h[h].has_state);
        build(m, d, flags, out);
        pin_addressed(m, d, out);
        return;
    }
    if (!d->capture) {
        restore(m, d);
        apply_forks(m, d, d->pre, d->num_pre, NULL);
    }
    const rspm_step *self = step_find(m, d->step_id);
    for (uint32_t r = 0; r < m->num_rids; r++)
        for (uint32_t h = 0; h < m->req[r].num_holdings; h++)
            flags[r * RSPM_MAX_LABELS + h] =
                earlier_writes(m, self, m->req[r].h[h].slot, m->req[r].h[h].has_state);
    build(m, d, flags, out);
    pin_addressed(m, d, out);
    rspm_step *st = step_find(m, d->step_id);
    st->planned = !d->capture;
    st->num_prows = 0;
    memset(st->fslot, 0, sizeof st->fslot);
    if (d->capture)
        return;
    for (uint32_t i = 0; i < d->num_rows; i++) {
        const rspm_row *r = &d->rows[i];
        rspm_holding *h = r->padding || r->span <= 0 ? NULL : find(m, r->ridx, r->label);
        if (!h)
            continue;
        st->prows[st->num_prows].ridx = r->ridx;
        st->prows[st->num_prows].label = r->label;
        st->prows[st->num_prows].gen = h->gen;
        st->num_prows++;
        if (m->slot[h->slot].zero_pending) {
            /* This forward rewrites the slot from zeros after the earlier
             * planned forward: it supersedes the deferred zero. */
            m->slot[h->slot].zero_pending = false;
            st->took[h->slot] = true;
            m->cov.zero_taken++;
        }
    }
    int32_t fs[2 * RSPM_MAX_ROWS * RSPM_MAX_FORKS];
    uint32_t n = fork_slots(m, d, d->post, d->num_post, fs);
    for (uint32_t k = 0; k < n; k++)
        st->fslot[fs[k]] = true;
    /* Its takes read their slots at its commit: a later plan addressing
     * them waits for it, like its post-forks' slots. */
    for (uint32_t i = 0; i < d->num_takes; i++) {
        const rspm_holding *h = find(m, d->takes[i].ridx, d->takes[i].label);
        if (h)
            st->fslot[h->slot] = true;
    }
}

/* A commit's takes, in order; those that fail are skipped (recorded). */
static void commit_takes(rspm *m, const rspm_decl *d, const rspm_step *st)
{
    m->num_skips = 0;
    m->evictions = 0;
    for (uint32_t i = 0; i < d->num_takes; i++) {
        const rspm_ckdecl *c = &d->takes[i];
        const rspm_holding *h = find(m, c->ridx, c->label);
        rsp_status r = RSP_ENOREQ;
        /* Reset (or forked into, re-created) since the plan: the state the
         * forward wrote is not there; the take is skipped (RSP_ENOREQ). */
        bool planned = false;
        for (uint32_t k = 0; h && k < st->num_prows; k++)
            if (st->prows[k].ridx == c->ridx && st->prows[k].label == c->label)
                planned = st->prows[k].gen == h->gen;
        if (!planned)
            h = NULL;
        if (h && planned_pin(m, st, h->slot))
            r = RSP_EORDER;
        else if (h)
            r = take(m, c->key, c->tier, m->slot[h->slot].content);
        if (r != RSP_OK) {
            m->skip_key[m->num_skips] = c->key;
            m->skip_st[m->num_skips++] = r;
        }
    }
}

/* The accepts of st's per-token rows (d names its admitted rows): a >= 1
 * on the planned holding relabels output slot a into it; everything else
 * is let go. kept[p]: prow p accepted nothing on the planned holding,
 * whose has_state stays. */
static void accept_outputs(rspm *m, const rspm_decl *d, rspm_step *st, bool *kept)
{
    for (uint32_t k = 0; k < st->num_spec; k++) {
        rspm_spec *sp = &st->spec[k];
        /* Its row in the commit (a re-admit may have dropped it: then
         * nothing of it is accepted). */
        const rspm_row *row = NULL;
        for (uint32_t i = 0; i < d->num_rows && !row; i++)
            if (d->rows[i].per_token && !d->rows[i].padding && d->rows[i].span > 0 &&
                d->rows[i].ridx == sp->ridx && d->rows[i].label == sp->label)
                row = &d->rows[i];
        uint32_t a = row ? row->accepted : 0;
        rspm_holding *h = row ? find(m, sp->ridx, sp->label) : NULL;
        int32_t p = -1;
        for (uint32_t i = 0; h && i < st->num_prows; i++)
            if (st->prows[i].ridx == sp->ridx && st->prows[i].label == sp->label)
                p = st->prows[i].gen == h->gen ? (int32_t)i : -1;
        if (p >= 0 && a == 0)
            kept[p] = true;
        if (p >= 0 && a >= 1) {
            int32_t old = h->slot;
            h->slot = sp->out[a - 1];
            h->has_state = true;
            h->gen = ++m->gen;
            h->gen_moved = true;
            st->prows[p].gen = h->gen;
            let_go(m, old);
        }
        for (uint32_t j = 0; j < sp->span; j++)
            if (p < 0 || a == 0 || j != a - 1)
                let_go(m, sp->out[j]);
    }
}

void rspm_commit(rspm *m, const rspm_decl *d)
{
    rspm_step *st = step_find(m, d->step_id);
    assert(st);
    if (!d->capture) {
        bool kept[RSPM_MAX_ROWS] = {0};
        accept_outputs(m, d, st, kept);
        /* The rows its live plan addressed, if the holding is still the one
         * addressed (generation unchanged): this forward's write counts. */
        for (uint32_t i = 0; i < st->num_prows; i++) {
            rspm_holding *h = find(m, st->prows[i].ridx, st->prows[i].label);
            if (kept[i])
                continue; /* the forward wrote only output slots */
            if (h && h->gen == st->prows[i].gen)
                h->has_state = true;
            else
                m->cov.commit_stale++;
        }
        /* Deferred zeroes no other planned step waits on: after the
         * forward, before post-forks read them. */
        for (uint32_t i = 0; i < st->num_pins; i++) {
            int32_t sl_ = st->pins[i];
            rspm_slot *sl = &m->slot[sl_];
            if (sl->zero_pending && !st->unpinned[i] && sl->state == RSPM_HELD &&
                !planned_pin(m, st, sl_))
                zero_content(m, sl_);
        }
        unpin_keys(m, st);
        commit_takes(m, d, st);
        apply_forks(m, d, d->post, d->num_post, st);
    }
    finish(m, st, false);
}

void rspm_forward_write(rspm *m, int32_t slot, uint64_t seed)
{
    if (slot < 0 || m->slot[slot].state == RSPM_SINK || m->slot[slot].state == RSPM_PENDING)
        return;
    m->slot[slot].content = seed;
    m->slot[slot].written = true;
}

uint32_t rspm_count(const rspm *m, rspm_slot_state st)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < m->max_slots; s++)
        n += m->slot[s].state == st;
    return n;
}

uint32_t rspm_num_requests(const rspm *m)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < m->num_rids; r++)
        n += m->req[r].exists;
    return n;
}

uint32_t rspm_num_holdings(const rspm *m)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < m->num_rids; r++)
        n += m->req[r].exists ? m->req[r].num_holdings : 0;
    return n;
}

void rspm_clear_gen_moved(rspm *m)
{
    for (uint32_t r = 0; r < m->num_rids; r++)
        for (uint32_t h = 0; h < m->req[r].num_holdings; h++)
            m->req[r].h[h].gen_moved = false;
}
