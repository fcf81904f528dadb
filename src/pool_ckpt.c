/*
 * The owner's checkpoint accounting: after each core call that can store,
 * move or drop a checkpoint, the counters, the readers' key index, the
 * eviction callback and the skipped takes, from the core's report
 * (core.h, rsp__ckpt_report). Owner thread only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stdio.h>
#include <string.h>

#include "util/error.h"

/* Owner, before a core call that may take checkpoints (one per take): the
 * key index's nodes for the keys it may add, so that applying the report
 * after the change cannot fail. Evictions, drops and demotions only remove
 * or move keys. */
rsp_status rsp__pool_keys_reserve(rsp_pool *p, uint32_t takes, rsp_error *e)
{
    return p->keys && takes ? rsp__keys_reserve(p->keys, takes, e) : RSP_OK;
}

/* The readers' index follows the report's changes. A key may change more
 * than once in a call (dropped to make room, then taken again): only its
 * last change is applied, so a key is in the index or not, never relinked,
 * and a call adds at most one node per take (rsp__pool_keys_reserve). O(changes^2),
 * a handful per call. */
static void ckpt_index(rsp_pool *p, const rsp__ckpt_report *rep)
{
    for (uint32_t i = 0; p->keys && i < rep->num_changes; i++) {
        const rsp__ckpt_change *c = &rep->changes[i];
        bool later = false;
        for (uint32_t j = i + 1; j < rep->num_changes && !later; j++)
            later = rep->changes[j].key == c->key;
        if (later)
            continue;
        if (c->present)
            rsp__keys_set(p->keys, c->key, c->tier, c->slot);
        else
            rsp__keys_remove(p->keys, c->key);
    }
}

/* A take declared in a committed step that was not done: the commit
 * stands (it is never refused), so nobody reads this failure in an answer:
 * it goes to on_error like an unread message's (counted in
 * checkpoints_skipped, not posts_failed). */
static void ckpt_report_skip(rsp_pool *p, const rsp__ckpt_skip *k)
{
    if (!p->on_error)
        return;
    char msg[RSP_ERROR_MAX];
    snprintf(msg, sizeof msg,
             "the checkpoint of key %llu declared in step %llu was skipped (%s): the step "
             "committed without it",
             (unsigned long long)k->key, (unsigned long long)k->step_id, rsp_strerror(k->status));
    rsp_failure f = {.status = k->status,
                     .kind = p->handling,
                     .step_id = k->step_id,
                     .has_step = true,
                     .message = msg,
                     .checkpoint_key = k->key,
                     .has_checkpoint_key = true};
    p->on_error(p->on_error_ctx, &f);
}

/* Owner, after every core call that can store, move or drop a checkpoint
 * (and whose device work, if any, was submitted: a key enters the index
 * once its copy is queued): counters, the readers' index, the eviction
 * callback, skipped takes. O(report). */
void rsp__pool_ckpt_account(rsp_pool *p)
{
    if (rsp__core_ckpt_report_clean(p->core))
        return; /* the call never reached the checkpoint code: nothing to account */
    const rsp__ckpt_report *rep = rsp__core_ckpt_report(p->core);
    rsp__pool_counters *c = &p->ctr;
    rsp__pool_bump(&c->checkpoints_taken, rep->taken);
    rsp__pool_bump(&c->checkpoints_restored, rep->restored);
    rsp__pool_bump(&c->checkpoints_dropped, rep->dropped);
    rsp__pool_bump(&c->checkpoints_skipped, rep->num_skips);
    rsp__pool_bump(&c->checkpoint_hits_device, rep->restored - rep->restored_host);
    rsp__pool_bump(&c->checkpoint_hits_host, rep->restored_host);
    rsp__pool_bump(&c->checkpoint_bytes_restored, rep->bytes_restored);
    rsp__pool_bump(&c->checkpoint_value_restored, rep->value_restored);
    ckpt_index(p, rep);
    for (uint32_t i = 0; i < rep->num_evictions; i++) {
        const rsp_checkpoint_event *ev = &rep->evictions[i];
        rsp__pool_bump(ev->demoted ? &c->checkpoints_demoted : &c->checkpoints_evicted, 1);
        if (!ev->demoted)
            rsp__pool_bump(ev->tier == RSP_TIER_HOST ? &c->checkpoints_evicted_host
                                                     : &c->checkpoints_evicted_device,
                           1);
        if (p->on_checkpoint_evict)
            p->on_checkpoint_evict(p->on_checkpoint_evict_ctx, ev);
    }
    for (uint32_t i = 0; i < rep->num_skips; i++)
        ckpt_report_skip(p, &rep->skips[i]);
}
