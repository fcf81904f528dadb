/*
 * Guard mode's question to the core: what each request slot is now (free,
 * sink, held, pending), whether an in-flight step addresses it, and whose
 * holding it is. The pool's guard (pool_guard.c) decides from it which
 * slots to checksum; the core reads no slot bytes.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "core_impl.h"

void rsp__core_guard_slots(const rsp__core *c, rsp__guard_slot *out)
{
    uint32_t n = c->layout.max_slots;
    for (uint32_t s = 0; s < n; s++)
        out[s] = (rsp__guard_slot){.state = c->slots[s].state, .pinned = c->slots[s].pins != 0};
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
