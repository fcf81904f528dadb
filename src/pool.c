/*
 * The pool's creation and destruction, next to the state they build and
 * tear down: core, device and its storage, publisher, key index, then the
 * actor whose owner runs the handler (pool_handler.c); and the actor's
 * callbacks that are about the pool rather than one message.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/sync.h"

/* The actor's settle: the lock-free readers' gauges (rsp_stats_peek)
 * follow the core before any waiter sees an answer, and at each batch end
 * (a stream of fire-and-forget messages mirrors once a batch). Owner. */
static void settle_gauges(void *ctx)
{
    rsp__pool_mirror_gauges(ctx);
}

/* The actor's on_gap (ordered pools): message `missing` never arrived, so
 * this pool handled a different sequence than the other ranks' pools
 * will: break it, as a failed device submit does (every later message
 * RSP_EDEVICE naming why, plan waiters released). Owner thread. */
static void on_order_gap(void *ctx, uint64_t missing)
{
    rsp_pool *p = ctx;
    if (p->broken)
        return;
    snprintf(p->broken_why, sizeof p->broken_why,
             "ordered posting: message %llu (msg->seq) did not arrive within the reorder "
             "timeout, so the messages after it were refused and the ranks can no longer agree",
             (unsigned long long)missing);
    p->broken = true;
    rsp__publisher_close(p->pub);
}

/* ------------------------------------------------------------------------ */
/* Creation and destruction                                                  */
/* ------------------------------------------------------------------------ */

/* Whether a synchronous call may run on its caller's thread while the
 * owner sleeps (rsp__actor_post_call): not when the owner is pinned (the
 * caller asked for the core to run on that CPU), nor with RSP_INLINE_CALLS=0
 * in the environment (docs/performance.md). */
static bool inline_calls(const rsp_pool_config *cfg)
{
    const char *env = getenv("RSP_INLINE_CALLS");
    return cfg->owner_cpu == -1 && !(env && strcmp(env, "0") == 0);
}

/* The parts only some pools have: the readers' checkpoint key index (a
 * pool with checkpoint slots) and the recording (record_path). */
static rsp_status create_optional(rsp_pool *p, const rsp_pool_config *cfg, rsp_error *err)
{
    /* The core checked the sum fits int32. */
    const uint32_t ckpts = cfg->max_checkpoints + cfg->max_host_checkpoints;
    if (ckpts) {
        rsp_status st = rsp__keys_create(p->pub, ckpts, &p->keys, err);
        if (st != RSP_OK)
            return st;
    }
    if (cfg->record_path)
        return rsp__record_open(cfg->record_path, cfg, &p->rec, err);
    return RSP_OK;
}

/* The caller's callbacks, immutable from here on. */
static void take_callbacks(rsp_pool *p, const rsp_pool_config *cfg)
{
    p->on_error = cfg->on_error;
    p->on_error_ctx = cfg->on_error_ctx;
    p->on_checkpoint_evict = cfg->on_checkpoint_evict;
    p->on_checkpoint_evict_ctx = cfg->on_checkpoint_evict_ctx;
}

rsp_status rsp__pool_create(const rsp_pool_config *cfg, rsp_pool **out, rsp_error *err)
{
    /* Before anything is made (the storage may be large). */
    if (cfg->owner_cpu != -1 && rsp__actor_check_cpu(cfg->owner_cpu, err) != RSP_OK)
        return RSP_EINVAL;
    rsp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the pool");
    rsp__work_init(&p->work);
    if (pthread_mutex_init(&p->fwd_lock, NULL) != 0) {
        free(p);
        return rsp__fail(err, RSP_ENOMEM, "cannot create the pool's forward-wait lock");
    }
    p->fwd_lock_ready = true;
    take_callbacks(p, cfg);
    rsp_status st = rsp__core_create(cfg, &p->core, err);
    if (st != RSP_OK)
        goto fail;
    p->layout = rsp__core_layout(p->core);
    if (cfg->guard && (st = rsp__guard_create(p->layout, &p->guard, err)) != RSP_OK)
        goto fail;
    p->device_kind = cfg->device;
    st = rsp__device_create(cfg->device, cfg->cuda_ordinal, p->layout, &p->dev, err);
    if (st != RSP_OK)
        goto fail;
    p->storage = malloc(sizeof *p->storage);
    if (!p->storage) {
        st = rsp__fail(err, RSP_ENOMEM, "rsp_pool_create: no memory for the storage keeper");
        goto fail;
    }
    *p->storage = (rsp__storage){.refs = 1, .dev = p->dev};
    p->cuda_ordinal = cfg->cuda_ordinal;
    st = rsp__publisher_create(0, &p->pub, err);
    if (st != RSP_OK)
        goto fail;
    st = create_optional(p, cfg, err);
    if (st != RSP_OK)
        goto fail;
    /* The device job memory and the plan object are reserved inside each
     * core call, before it changes anything (rsp__pool_reserve). */
    rsp__core_set_reserve_hook(p->core, rsp__pool_reserve, p);
    p->num_labels = rsp__core_num_labels(p->core);
    rsp__publisher_set_labels(p->pub, p->num_labels);
    rsp__pool_mirror_gauges(p);

    /* Starting the owner hands it the core, the device and the work list
     * (pthread_create orders everything above before the owner's start). */
    rsp__actor_config acfg = {
        .capacity = cfg->inbox_capacity,
        .handle = rsp__pool_handle,
        .ctx = p,
        .on_idle = rsp__pool_owner_idle,
        .lent_idle = rsp__pool_lent_idle,
        .settle = settle_gauges,
        .inline_calls = inline_calls(cfg),
        .pin = cfg->owner_cpu != -1,
        .cpu = cfg->owner_cpu,
        .ordered = cfg->ordered,
        .reorder_timeout_ns = cfg->reorder_timeout_ns,
        .on_gap = on_order_gap,
        .on_failure = cfg->on_error ? rsp__pool_report_failure : NULL,
    };
    p->ordered = cfg->ordered;
    p->rank = cfg->rank;
    p->owner_cpu = cfg->owner_cpu;
    st = rsp__actor_create(&acfg, &p->actor, err);
    if (st != RSP_OK)
        goto fail;
    *out = p;
    return RSP_OK;

fail:
    rsp__pool_destroy(p); /* the parts made so far; the rest are NULL */
    return st;
}

rsp__storage *rsp__pool_storage_hold(rsp_pool *p)
{
    (void)rsp__fetch_add_relaxed_u32(&p->storage->refs, 1);
    return p->storage;
}

void rsp__storage_release(rsp__storage *s)
{
    /* acq_rel: this holder's accesses to the storage happen before the
     * last holder's destroy, which sees them all. */
    if (rsp__fetch_add_acq_rel_u32(&s->refs, (uint32_t)-1) != 1)
        return;
    rsp__device_destroy(s->dev);
    free(s);
}

void rsp__pool_destroy(rsp_pool *p)
{
    /* Closes the inbox, handles everything queued, joins the owner. */
    rsp__actor_destroy(p->actor);
    /* The key index's nodes go to the publisher, whose last grace period
     * covers them; the table itself goes after it. */
    rsp__keys_clear(p->keys);
    /* Releases plan waiters and waits for them to leave, then for readers'
     * references; joins the reclaimer. */
    rsp__publisher_destroy(p->pub);
    rsp__keys_destroy(p->keys);
    /* Close waits for all submitted device work, whether the storage goes
     * now or with the last DLPack export of it (export.c). Teardown has
     * nothing to undo: a device that fails the wait (a CUDA error) is
     * freed like one that passes, as rsp__device_destroy does. */
    if (p->storage) {
        (void)rsp__device_sync(p->dev, NULL);
        rsp__storage_release(p->storage);
    } else {
        rsp__device_destroy(p->dev); /* a create that failed before the keeper */
    }
    rsp__work_fini(&p->work);
    rsp__record_close(p->rec); /* after the owner's last message */
    rsp__guard_destroy(p->guard);
    rsp__core_destroy(p->core);
    if (p->fwd_lock_ready)
        pthread_mutex_destroy(&p->fwd_lock);
    free(p->fwd);
    free(p);
}
