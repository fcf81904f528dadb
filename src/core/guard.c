/*
 * Guard mode's question to the core: what each request slot is now (free,
 * sink, held, pending), whether an in-flight step addresses it (and one
 * other than a given step), whether a zero waits for it, and whose holding
 * it is. The pool's guard (pool_guard.c) decides from it which slots to
 * checksum; the core reads no slot bytes.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "core_impl.h"
#include "step.h"

void rsp__core_guard_slots(const rsp__core *c, uint64_t step_id, rsp__guard_slot *out)
{
    const uint32_t n = c->layout.max_slots, rec = rsp__step_find(c, step_id);
    const uint64_t mine = rec == RSP__NONE ? 0 : 1ull << rec;
    for (uint32_t s = 0; s < n; s++) {
        const rsp__slot *sl = &c->slots[s];
        out[s] = (rsp__guard_slot){.state = sl->state,
                                   .pinned = sl->pins != 0,
                                   .others = (sl->pins & ~mine) != 0,
                                   .zero_pending = sl->zero_pending};
    }
    /* Holders from the records: the core keeps no slot -> holder map, and
     * guard mode is the only reader that needs one. */
    for (uint32_t i = 0; i < c->num_recs; i++) {
        const rsp__req *r = &c->reqs[i];
        if (!r->live)
            continue;
        const rsp__hold *h = r->heap ? r->heap : r->inl;
        for (uint32_t k = 0; k < r->num_holds; k++) {
            if (h[k].slot >= n)
                continue;
            rsp__guard_slot *g = &out[h[k].slot];
            g->rid = r->rid;
            g->label = h[k].label;
            g->generation = h[k].generation;
        }
    }
}
