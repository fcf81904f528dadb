/*
 * Plans: their memory (reserved, recycled: M1/M2), building one,
 * addressing, references (X1, X2), and publication of the live and staged
 * plan (P1) with the reads of them (P2).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "publish_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"
#include "util/mem.h"
#include "util/time.h"

/* 1 + the stripe of rsp__publisher.user_refs this thread counts its plan
 * references on, 0 until its first; stripes are dealt round robin. */
static RSP__TLS uint32_t rsp__ref_stripe;
static uint32_t rsp__ref_stripes_dealt;

/* The calling thread's stripe of p's reference count. */
static inline uint32_t *ref_count(rsp__publisher *p)
{
    uint32_t s = rsp__ref_stripe;
    if (__builtin_expect(s == 0, 0))
        s = rsp__ref_stripe =
            rsp__fetch_add_relaxed_u32(&rsp__ref_stripes_dealt, 1) % REF_STRIPES + 1;
    return &p->user_refs[s - 1].n;
}

/* ASan: a recycled plan's memory past its two header words (the stack link
 * and the size) is poisoned until the owner reuses it, so a reader that
 * touches a reclaimed plan is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define RSP__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSP__ASAN 1
#endif
#endif
#ifdef RSP__ASAN
#include <sanitizer/asan_interface.h>
#define RECYCLED_HEAD (offsetof(rsp_plan, alloc_bytes) + sizeof(size_t))
static void recycled_poison(rsp_plan *plan, bool poison)
{
    char *body = (char *)plan + RECYCLED_HEAD;
    if (poison)
        ASAN_POISON_MEMORY_REGION(body, plan->alloc_bytes - RECYCLED_HEAD);
    else
        ASAN_UNPOISON_MEMORY_REGION(body, plan->alloc_bytes - RECYCLED_HEAD);
}
#else
static void recycled_poison(rsp_plan *plan, bool poison)
{
    (void)plan;
    (void)poison;
}
#endif

/* The last reference is gone: the memory goes on the publisher's recycled
 * stack (M1), where the owner takes it for a later plan instead of a
 * malloc (and this thread's free). */
void rsp__plan_free(rsp_plan *plan)
{
    rsp__publisher *p = plan->pub;
    recycled_poison(plan, true);
    rsp_plan *head = __atomic_load_n(&p->recycled, __ATOMIC_RELAXED);
    do
        plan->next_retired = head;
    while (!__atomic_compare_exchange_n(&p->recycled, &head, plan, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
    /* Last access to the publisher: its destroy waits for zero. Release:
     * pairs with destroy's acquire load of `objects` before free(p). */
    const uint32_t objects = rsp__fetch_add_release_u32(&p->objects, UINT32_MAX);
    RSP__ASSERT(objects != 0); /* one per rsp__plan_new */
    (void)objects;
}

/* Owner (M2): a recycled plan's memory of at least `bytes`, or NULL. Takes
 * the whole recycled stack when the owner's own list is empty; a block too
 * small for this plan is freed (plans of one pool are of similar sizes, so
 * the list soon holds blocks of the largest). */
static void *recycled_take(rsp__publisher *p, size_t bytes, size_t *got)
{
    if (!p->reuse)
        p->reuse = __atomic_exchange_n(&p->recycled, NULL, __ATOMIC_ACQUIRE);
    while (p->reuse) {
        rsp_plan *plan = p->reuse;
        p->reuse = plan->next_retired;
        if (plan->alloc_bytes >= bytes) {
            recycled_poison(plan, false);
            *got = plan->alloc_bytes;
            return plan;
        }
        free(plan);
    }
    return NULL;
}

/* Free a list of recycled plans (destroy). */
void rsp__plan_recycled_free(rsp_plan *plan)
{
    while (plan) {
        rsp_plan *next = plan->next_retired;
        free(plan);
        plan = next;
    }
}

/* Byte offsets of a plan's parts in its one allocation; returns its size. */
typedef struct plan_offsets {
    size_t gens, idx, flags, spec;
} plan_offsets;

static size_t plan_layout(uint32_t num_labels, size_t gens, size_t entries, size_t spec,
                          plan_offsets *o)
{
    o->gens = rsp__align_up(sizeof(rsp_plan) + (size_t)num_labels * sizeof(rsp__plan_label),
                            alignof(uint64_t));
    o->idx = rsp__align_up(o->gens + gens * sizeof(uint64_t), alignof(int32_t));
    o->flags = o->idx + entries * sizeof(int32_t);
    o->spec = rsp__align_up(o->flags + entries * sizeof(bool), alignof(int32_t));
    return o->spec + spec * sizeof(int32_t);
}

rsp_status rsp__plan_reserve(rsp__publisher *p, uint32_t num_labels, uint64_t rows,
                             uint64_t entries, uint64_t spec_entries, rsp_error *err)
{
    if (rows > SIZE_MAX / 16 || entries > SIZE_MAX / 16 || spec_entries > SIZE_MAX / 16)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for a plan of %llu entries",
                         (unsigned long long)entries);
    plan_offsets o;
    size_t bytes = plan_layout(num_labels, (size_t)rows, (size_t)entries, (size_t)spec_entries, &o);
    if (p->spare_size >= bytes)
        return RSP_OK;
    free(p->spare);
    p->spare_size = 0;
    if ((p->spare = recycled_take(p, bytes, &p->spare_size)) != NULL)
        return RSP_OK;
    if (!(p->spare = malloc(bytes)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory for a plan of %llu entries",
                         (unsigned long long)entries);
    p->spare_size = bytes;
    return RSP_OK;
}

/* Owner: the memory of a plan of `bytes`: the reserved memory when it fits
 * (the owner reserved it before the core changed anything), else a
 * recycled plan's, else a new allocation (NULL: out of memory). */
static unsigned char *plan_memory(rsp__publisher *p, size_t bytes, size_t *alloc_bytes)
{
    unsigned char *mem;
    if (p->spare && p->spare_size >= bytes) {
        mem = p->spare;
        *alloc_bytes = p->spare_size;
        p->spare = NULL;
        p->spare_size = 0;
        return mem;
    }
    if ((mem = recycled_take(p, bytes, alloc_bytes)) != NULL)
        return mem;
    *alloc_bytes = bytes;
    return malloc(bytes);
}

/* Label l's per-token indices: a plain label's are its slot_indices copy
 * si (width 1); others are copied to *sp, which moves past them. The
 * device copy is a leased key's tensor buffer; without one the host
 * device reads the host copy. */
static void plan_spec(rsp__plan_label *l, const rsp__plan_label_src *s, const int32_t *si,
                      int32_t **sp, uint64_t step_id, rsp_event ready)
{
    uint32_t width = s->spec_width > 1 ? s->spec_width : 1;
    const int32_t *idx = si;
    if (width > 1) {
        size_t n = (size_t)s->length * width;
        memcpy(*sp, s->spec_indices, n * sizeof **sp);
        idx = *sp;
        *sp += n;
    }
    l->spec = (rsp_spec_indices){
        .label = s->label,
        .step_id = step_id,
        .num_rows = s->num_rows,
        .length = s->length,
        .width = width,
        .indices = idx,
        .device_indices = s->device_spec_indices ? s->device_spec_indices
                          : s->host_device       ? (void *)idx
                                                 : NULL,
        .ready = ready,
    };
}

rsp_status rsp__plan_new(rsp__publisher *p, uint64_t step_id, bool staged, rsp_event ready,
                         const rsp__plan_label_src *labels, uint32_t num_labels, rsp_plan **out,
                         rsp_error *err)
{
    size_t gens = 0, idx = 0, spec = 0;
    for (uint32_t i = 0; i < num_labels; i++) {
        gens += labels[i].num_rows;
        idx += labels[i].length;
        spec += labels[i].spec_width > 1 ? (size_t)labels[i].length * labels[i].spec_width : 0;
    }
    plan_offsets off;
    const size_t bytes = plan_layout(num_labels, gens, idx, spec, &off);
    size_t alloc_bytes;
    unsigned char *mem = plan_memory(p, bytes, &alloc_bytes);
    if (!mem)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the plan of step %llu",
                         (unsigned long long)step_id);
    rsp_plan *plan = (rsp_plan *)mem;
    memset(plan, 0, sizeof *plan);
    plan->alloc_bytes = alloc_bytes;
    plan->refs = 1; /* the publisher's */
    plan->pub = p;
    plan->step_id = step_id;
    plan->staged = staged;
    plan->ready = ready;
    plan->digest = 0;
    plan->num_labels = num_labels;
    plan->labels_known = p->labels_known;
    memset(plan->label_index, NO_INDEX, sizeof plan->label_index);
    uint64_t *g = (uint64_t *)(mem + off.gens);
    int32_t *si = (int32_t *)(mem + off.idx);
    bool *hs = (bool *)(mem + off.flags);
    int32_t *sp = (int32_t *)(mem + off.spec);
    for (uint32_t i = 0; i < num_labels; i++) {
        const rsp__plan_label_src *s = &labels[i];
        rsp__plan_label *l = &plan->labels[i];
        /* The name, truncated (a bounded copy, not snprintf: this runs for
         * every label of every plan). */
        const char *name = s->name ? s->name : "?";
        size_t n = strnlen(name, sizeof l->name - 1);
        memcpy(l->name, name, n);
        l->name[n] = '\0';
        if (s->num_rows)
            memcpy(g, s->generations, s->num_rows * sizeof *g);
        if (s->length) {
            memcpy(si, s->slot_indices, s->length * sizeof *si);
            memcpy(hs, s->has_state, s->length * sizeof *hs);
        }
        l->addr = (rsp_addressing){
            .label = s->label,
            .step_id = step_id,
            .staged = staged,
            .num_rows = s->num_rows,
            .length = s->length,
            .slot_indices = si,
            .has_state = hs,
            .generations = g,
            .device_slot_indices = s->device_slot_indices,
            .device_has_state = s->device_has_state,
            .ready = ready,
        };
        plan_spec(l, s, si, &sp, step_id, ready);
        if (s->label < RSP_MAX_LABELS && plan->label_index[s->label] == NO_INDEX)
            plan->label_index[s->label] = (uint8_t)i;
        g += s->num_rows;
        si += s->length;
        hs += s->length;
    }
    /* Relaxed: destroy reads the count only after the owner stopped
     * (pthread_join orders this), and frees after the decrements (release). */
    rsp__fetch_add_relaxed_u32(&p->objects, 1);
    *out = plan;
    return RSP_OK;
}

void rsp__plan_discard(rsp_plan *plan)
{
    /* Never published: the publisher's reference is the only one. */
    RSP__ASSERT(!plan || (plan->published == 0 && plan->refs == 1));
    if (plan)
        rsp__plan_free(plan);
}

uint64_t rsp__plan_step_id(const rsp_plan *plan)
{
    return plan->step_id;
}

bool rsp__plan_is_staged(const rsp_plan *plan)
{
    return plan->staged;
}

void rsp__plan_set_digest(rsp_plan *plan, uint64_t digest)
{
    plan->digest = digest;
}

uint64_t rsp__plan_digest(const rsp_plan *plan)
{
    return plan->digest;
}

/* The refusals of rsp__plan_addressing, out of its fast path (which then
 * needs no stack frame). */
__attribute__((noinline, cold)) static rsp_status
addressing_refused(const rsp_plan *plan, rsp_label_id label, rsp_error *err)
{
    if (label >= plan->labels_known)
        return rsp__fail(err, RSP_ENOLABEL,
                         "label %u is not interned (the pool had %u labels when step %llu was "
                         "planned)",
                         label, plan->labels_known, (unsigned long long)plan->step_id);
    /* Name the labels that were planned, so the caller sees its mistake. */
    char list[RSP_ERROR_MAX];
    size_t n = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < plan->num_labels && n < sizeof list; i++) {
        int w = snprintf(list + n, sizeof list - n, "%s%s (%u)", i ? ", " : "",
                         plan->labels[i].name, plan->labels[i].addr.label);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return rsp__fail(err, RSP_ENOPLAN, "label %u is not planned in %s step %llu; planned: %s",
                     label, plan->staged ? "staged" : "live", (unsigned long long)plan->step_id,
                     plan->num_labels ? list : "no label");
}

rsp_status rsp__plan_addressing(const rsp_plan *plan, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err)
{
    const uint32_t i = label < RSP_MAX_LABELS ? plan->label_index[label] : NO_INDEX;
    if (__builtin_expect(i == NO_INDEX, 0))
        return addressing_refused(plan, label, err);
    *out = plan->labels[i].addr;
    return RSP_OK;
}

rsp_status rsp__plan_spec_indices(const rsp_plan *plan, rsp_label_id label, rsp_spec_indices *out,
                                  rsp_error *err)
{
    const uint32_t i = label < RSP_MAX_LABELS ? plan->label_index[label] : NO_INDEX;
    if (i == NO_INDEX)
        return addressing_refused(plan, label, err);
    *out = plan->labels[i].spec;
    return RSP_OK;
}

const rsp_plan *rsp__plan_ref(const rsp_plan *plan)
{
    /* X1: the caller is in a read section (the publisher's reference is
     * still there) or holds a reference, so refs > 0 here. Relaxed, as for
     * any increment made while holding a reference: the reclaimer's drop
     * comes after a grace period (G1/G2), so after this increment, and
     * every drop is acq_rel. */
    const uint32_t refs = rsp__fetch_add_relaxed_u32(&((rsp_plan *)plan)->refs, 1);
    RSP__ASSERT(refs != 0); /* a plan already freed */
    (void)refs;
    rsp__fetch_add_relaxed_u32(ref_count(plan->pub), 1); /* X2 */
    return plan;
}

void rsp__plan_unref(const rsp_plan *plan)
{
    /* X2 first: the drop may free the plan, and the publisher with it
     * only once objects is zero, which this plan keeps above zero. */
    rsp__fetch_add_release_u32(ref_count(plan->pub), UINT32_MAX);
    plan_drop((rsp_plan *)plan);
}

void rsp__unpublish(rsp__publisher *p, rsp_plan *plan, uint32_t where)
{
    if (!plan)
        return;
    RSP__ASSERT(plan->published & where); /* published there, once */
    plan->published &= ~where;
    if (!plan->published)
        rsp__publisher_retire(p, plan);
}

void rsp__publish_live(rsp__publisher *p, rsp_plan *plan)
{
    rsp_plan *old = p->live; /* owner is the only writer: a plain read */
    /* Published once, fresh from rsp__plan_new: only the publisher's
     * reference (no reader can have seen it yet). */
    RSP__ASSERT(plan->published == 0 && plan->refs == 1);
    rsp__hb_release(plan); /* P1 (TSan mirror: liburcu is not instrumented) */
    plan->published = PUB_LIVE;
    /* P1: release store; pairs with rcu_dereference (P2) in readers. */
    rcu_assign_pointer(p->live, plan);
    /* W1: pairs with W2 in rsp__publisher_wait. */
    rsp__step_publish(p, plan); /* its step's entry (before W1: wait_step sees it) */
    rsp__store_release_u64(&p->live_step, plan->step_id);
    if (!rsp__load_relaxed_u32(&p->has_live))
        rsp__store_release_u32(&p->has_live, 1);
    /* W1: seq_cst RMW (a release too: a waiter whose snapshot reads it sees
     * live_step), then seq_cst load of `waiters` (store->load against W2). */
    rsp__fetch_add_seq_cst_u32(&p->wait_seq, 1);
    if (rsp__load_seq_cst_u32(&p->waiters) != 0)
        rsp__futex_wake_all(&p->wait_seq);
    rsp__unpublish(p, old, PUB_LIVE);
}

void rsp__publisher_set_labels(rsp__publisher *p, uint32_t num_labels)
{
    p->labels_known = num_labels;
}

void rsp__publish_staged(rsp__publisher *p, rsp_plan *plan)
{
    rsp_plan *old = p->staged;
    if (old == plan)
        return;
    RSP__ASSERT(!plan || (plan->published == 0 && plan->refs == 1));
    if (plan)
        rsp__hb_release(plan);           /* P1 (TSan mirror) */
    rcu_assign_pointer(p->staged, plan); /* P1 */
    rsp__publisher_retire(p, old);
}

const rsp_plan *rsp__publisher_live(const rsp__publisher *p)
{
    return read_pointer(&p->live);
}

const rsp_plan *rsp__publisher_staged(const rsp__publisher *p)
{
    return read_pointer(&p->staged);
}

/* The refusals of rsp__live_addressing, out of its fast path. */
__attribute__((noinline, cold)) static rsp_status live_refused(rsp_error *err)
{
    if (rsp__forked()) /* a forked child's threads start outside any section */
        return rsp__fail_forked(err);
    if (tls_mode() == MODE_NONE)
        return rsp__fail(err, RSP_ENOTREG,
                         "rsp_plan_live_addressing: the calling thread is not registered: call "
                         "rsp_reader_register first");
    if (tls_depth() == 0)
        return rsp__fail(err, RSP_EINVAL,
                         "rsp_plan_live_addressing called outside a read section (rsp_read_begin)");
    return rsp__fail(err, RSP_ENOPLAN, "no live plan yet (no step was planned)");
}

rsp_status rsp__live_addressing(const rsp__publisher *p, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err)
{
    const rsp_plan *plan = read_pointer(&p->live);
    if (__builtin_expect(!plan, 0))
        return live_refused(err);
    return rsp__plan_addressing(plan, label, out, err);
}

uint32_t rsp__publisher_objects(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->objects);
}

uint32_t rsp__publisher_refs(const rsp__publisher *p)
{
    /* A ref and its unref may count on different stripes (threads): only
     * the sum means anything. */
    uint32_t n = 0;
    for (uint32_t i = 0; i < REF_STRIPES; i++)
        n += rsp__load_acquire_u32(&p->user_refs[i].n); /* X2 */
    return n;
}

uint32_t rsp__publisher_refs_wait(const rsp__publisher *p, uint64_t deadline)
{
    /* Polled: an unref that wakes a waiter would cost every unref a check
     * for one, and a close is rare. */
    uint32_t n;
    while ((n = rsp__publisher_refs(p)) != 0) {
        uint64_t now = rsp__now_ns();
        if (now >= deadline)
            break;
        uint64_t nap = deadline - now < 1000000u ? deadline - now : 1000000u;
        struct timespec ts = rsp__timespec_of(nap);
        nanosleep(&ts, NULL);
    }
    return n;
}
