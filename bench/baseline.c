/*
 * The baseline: the core behind one mutex, work executed in the caller.
 * SPDX-License-Identifier: Apache-2.0
 * See baseline.h for why each choice is the fair one.
 */
#include "baseline.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/work.h"
#include "util/error.h"

/* One addressing buffer (the baseline's "device" vectors), by core buffer id. */
typedef struct bl_buf {
    int32_t *slots;
    bool *has;
    uint32_t cap;
} bl_buf;

/* One label of the published plan: host copies and the addressing view. */
typedef struct bl_pub_label {
    rsp_addressing a;
    int32_t *slots;
    uint32_t scap;
    bool *has;
    uint32_t hcap;
    uint64_t *gens;
    uint32_t gcap;
} bl_pub_label;

struct bl_pool {
    /* Guards everything from here to `rw`. */
    pthread_mutex_t mu;
    rsp__core *core;
    const rsp__layout *lay;
    uint8_t *base[RSP_MAX_BLOCKS];
    rsp__work work;
    bl_buf *bufs;
    uint32_t nbufs;

    /* Guards the published plan below: written by bl_plan (holding mu too),
     * read by bl_read_*. */
    pthread_rwlock_t rw;
    bool published;
    uint32_t pub_nlabels;
    bl_pub_label pub[RSP_MAX_LABELS];
};

rsp_status bl_create(const rsp_pool_config *cfg, bl_pool **out, rsp_error *err)
{
    bl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rsp__fail(err, RSP_ENOMEM, "baseline: out of memory");
    rsp_status st = rsp__core_create(cfg, &p->core, err);
    if (st != RSP_OK) {
        free(p);
        return st;
    }
    p->lay = rsp__core_layout(p->core);
    for (uint32_t b = 0; b < p->lay->num_blocks; b++) {
        uint64_t bytes = (p->lay->blocks[b].bytes + 63u) & ~(uint64_t)63u;
        p->base[b] = aligned_alloc(64, (size_t)bytes);
        if (!p->base[b]) {
            bl_destroy(p);
            return rsp__fail(err, RSP_ENOMEM, "baseline: out of memory for block %u", b);
        }
        /* Zero-filled at creation, like the devices; touching every page
         * here also keeps page faults out of the measured loop. */
        memset(p->base[b], 0, (size_t)bytes);
    }
    rsp__work_init(&p->work);
    pthread_mutex_init(&p->mu, NULL);
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&p->rw, &ra);
    pthread_rwlockattr_destroy(&ra);
    *out = p;
    return RSP_OK;
}

void bl_destroy(bl_pool *p)
{
    if (!p)
        return;
    if (p->lay)
        for (uint32_t b = 0; b < p->lay->num_blocks; b++)
            free(p->base[b]);
    for (uint32_t i = 0; i < p->nbufs; i++) {
        free(p->bufs[i].slots);
        free(p->bufs[i].has);
    }
    free(p->bufs);
    for (uint32_t i = 0; i < RSP_MAX_LABELS; i++) {
        free(p->pub[i].slots);
        free(p->pub[i].has);
        free(p->pub[i].gens);
    }
    if (p->core) {
        rsp__work_fini(&p->work);
        pthread_mutex_destroy(&p->mu);
        pthread_rwlock_destroy(&p->rw);
        rsp__core_destroy(p->core);
    }
    free(p);
}

/* Make buffer `id` hold at least cap entries (growth keeps the contents, as
 * a device's BUFFER op does). Caller holds mu. */
static rsp_status bl_buffer(bl_pool *p, uint32_t id, uint32_t cap, rsp_error *err)
{
    if (id >= p->nbufs) {
        uint32_t n = p->nbufs ? p->nbufs : 8;
        while (n <= id)
            n *= 2;
        bl_buf *b = realloc(p->bufs, n * sizeof *b);
        if (!b)
            return rsp__fail(err, RSP_ENOMEM, "baseline: out of memory for buffers");
        memset(b + p->nbufs, 0, (n - p->nbufs) * sizeof *b);
        p->bufs = b;
        p->nbufs = n;
    }
    bl_buf *b = &p->bufs[id];
    if (b->cap >= cap)
        return RSP_OK;
    int32_t *s = realloc(b->slots, cap * sizeof *s);
    if (!s)
        return rsp__fail(err, RSP_ENOMEM, "baseline: out of memory for buffer %u", id);
    b->slots = s;
    bool *h = realloc(b->has, cap * sizeof *h);
    if (!h)
        return rsp__fail(err, RSP_ENOMEM, "baseline: out of memory for buffer %u", id);
    b->has = h;
    b->cap = cap;
    return RSP_OK;
}

/* Run the core's work list now, in list order, then forget it. Caller holds mu. */
static rsp_status bl_exec(bl_pool *p, rsp_error *err)
{
    const rsp__work *w = &p->work;
    const rsp__layout *lay = p->lay;
    rsp_status st = RSP_OK;
    for (uint32_t i = 0; i < w->num_ops && st == RSP_OK; i++) {
        const rsp__op *op = &w->ops[i];
        switch (op->kind) {
        case RSP__OP_WAIT:
            /* The forward this waits for already ran in a synchronous design;
             * honour the event anyway. */
            if (op->event.handle)
                st = rsp_host_fence_wait(op->event.handle, op->event.value, RSP_WAIT_FOREVER);
            break;
        case RSP__OP_ZERO:
            for (uint32_t b = 0; b < lay->num_blocks; b++) {
                const rsp__block_layout *bl = &lay->blocks[b];
                for (uint32_t l = 0; l < lay->num_layers; l++)
                    for (uint32_t k = op->first; k < op->first + op->count; k++)
                        memset(p->base[b] + rsp__layout_offset(lay, b, l, w->slots[k]), 0,
                               (size_t)bl->slot_bytes);
            }
            break;
        case RSP__OP_COPY:
            for (uint32_t b = 0; b < lay->num_blocks; b++) {
                const rsp__block_layout *bl = &lay->blocks[b];
                for (uint32_t l = 0; l < lay->num_layers; l++)
                    for (uint32_t k = op->first; k < op->first + op->count; k++)
                        memcpy(p->base[b] + rsp__layout_offset(lay, b, l, w->pairs[k].dst),
                               p->base[b] + rsp__layout_offset(lay, b, l, w->pairs[k].src),
                               (size_t)bl->slot_bytes);
            }
            break;
        case RSP__OP_BUFFER: st = bl_buffer(p, op->buffer, op->capacity, err); break;
        case RSP__OP_UPLOAD:
            if (op->buffer >= p->nbufs || p->bufs[op->buffer].cap < op->count) {
                st = rsp__fail(err, RSP_EINVAL, "baseline: upload into missing buffer %u",
                               op->buffer);
                break;
            }
            memcpy(p->bufs[op->buffer].slots, op->slot_indices, op->count * sizeof(int32_t));
            memcpy(p->bufs[op->buffer].has, op->has_state, op->count * sizeof(bool));
            break;
        }
    }
    rsp__work_clear(&p->work);
    return st;
}

rsp_status bl_label(bl_pool *p, const char *name, rsp_label_id *out, rsp_error *err)
{
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_label(p->core, name, out, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

rsp_status bl_ingest(bl_pool *p, rsp_rid rid, rsp_error *err)
{
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_ingest(p->core, rid, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

rsp_status bl_remove(bl_pool *p, rsp_rid rid, rsp_error *err)
{
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_remove(p->core, rid, &p->work, err);
    if (st == RSP_OK)
        st = bl_exec(p, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

void bl_set_fast(bl_pool *p, bool on)
{
    rsp__core_set_fast(p->core, on);
}

rsp_status bl_admit(bl_pool *p, const rsp_step *step, rsp_admit_outcome *out, rsp_error *err)
{
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_admit(p->core, step, out, &p->work, err);
    if (st == RSP_OK)
        st = bl_exec(p, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Return ptr grown to hold at least n elements of size sz (NULL on failure,
 * ptr still valid then). */
static void *bl_grow(void *ptr, uint32_t *cap, uint32_t n, size_t sz)
{
    if (*cap >= n && ptr)
        return ptr;
    uint32_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *d = realloc(ptr, c * sz);
    if (d)
        *cap = c;
    return d;
}

/* Publish a live plan: host copies + views, under the write lock. Caller holds mu. */
static rsp_status bl_publish(bl_pool *p, const rsp__plan_out *plan, rsp_error *err)
{
    rsp_status st = RSP_OK;
    pthread_rwlock_wrlock(&p->rw);
    for (uint32_t i = 0; i < plan->num_labels; i++) {
        const rsp__label_plan *lp = &plan->labels[i];
        bl_pub_label *pl = &p->pub[i];
        int32_t *slots = bl_grow(pl->slots, &pl->scap, lp->length, sizeof *slots);
        if (slots)
            pl->slots = slots;
        bool *has = bl_grow(pl->has, &pl->hcap, lp->length, sizeof *has);
        if (has)
            pl->has = has;
        uint64_t *gens = bl_grow(pl->gens, &pl->gcap, lp->num_rows, sizeof *gens);
        if (gens)
            pl->gens = gens;
        if (!slots || !has || !gens) {
            st = rsp__fail(err, RSP_ENOMEM, "baseline: out of memory publishing a plan");
            p->published = false;
            break;
        }
        memcpy(pl->slots, lp->slot_indices, lp->length * sizeof *slots);
        memcpy(pl->has, lp->has_state, lp->length * sizeof *has);
        memcpy(pl->gens, lp->generations, lp->num_rows * sizeof *gens);
        bl_buf *b = lp->buffer < p->nbufs ? &p->bufs[lp->buffer] : NULL;
        pl->a = (rsp_addressing){
            .label = lp->label,
            .step_id = plan->step_id,
            .staged = false,
            .num_rows = lp->num_rows,
            .length = lp->length,
            .slot_indices = pl->slots,
            .has_state = pl->has,
            .generations = pl->gens,
            .device_slot_indices = b ? (void *)b->slots : NULL,
            .device_has_state = b ? (void *)b->has : NULL,
            .ready = {.handle = NULL}, /* the uploads ran synchronously */
        };
    }
    if (st == RSP_OK) {
        p->pub_nlabels = plan->num_labels;
        p->published = true;
    }
    pthread_rwlock_unlock(&p->rw);
    return st;
}

rsp_status bl_plan(bl_pool *p, const rsp_step *step, rsp_error *err)
{
    rsp__plan_out plan;
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_plan(p->core, step, &plan, &p->work, err);
    if (st == RSP_OK)
        st = bl_exec(p, err);
    /* A stage is not visible to readers of the live plan (docs/semantics.md 4.3). */
    if (st == RSP_OK && !plan.staged)
        st = bl_publish(p, &plan, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

rsp_status bl_commit(bl_pool *p, const rsp_step *step, const rsp_event *forward_done,
                     rsp_error *err)
{
    pthread_mutex_lock(&p->mu);
    rsp_status st = rsp__core_commit(p->core, step, forward_done, &p->work, NULL, err);
    if (st == RSP_OK)
        st = bl_exec(p, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

void bl_read_begin(bl_pool *p)
{
    pthread_rwlock_rdlock(&p->rw);
}

rsp_status bl_plan_addressing(bl_pool *p, rsp_label_id label, rsp_addressing *out)
{
    if (!p->published)
        return RSP_ENOPLAN;
    for (uint32_t i = 0; i < p->pub_nlabels; i++)
        if (p->pub[i].a.label == label) {
            *out = p->pub[i].a;
            return RSP_OK;
        }
    return RSP_ENOPLAN;
}

void bl_read_end(bl_pool *p)
{
    pthread_rwlock_unlock(&p->rw);
}
