/*
 * The actor: create (the owner thread, pinned or not) and destroy.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "actor_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "util/error.h"

rsp_status rsp__actor_check_cpu(int cpu, rsp_error *err)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return rsp__fail(err, RSP_EINVAL,
                         "owner_cpu %d is not a CPU number (0..%d, or -1: not pinned)", cpu,
                         CPU_SETSIZE - 1);
    const int n = get_nprocs_conf();
    if (cpu >= n)
        return rsp__fail(err, RSP_EINVAL, "owner_cpu %d is not a CPU of this machine (%d CPUs)",
                         cpu, n);
    return RSP_OK;
}

int rsp__actor_pinned_cpu(const rsp__actor *a)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(a->thread, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return -1;
}

/* pthread_create the owner, pinned to cfg->cpu when cfg->pin (set in its
 * attributes, so it never runs elsewhere). Returns pthread_create's code. */
static int start_owner(rsp__actor *a, const rsp__actor_config *cfg)
{
    if (!cfg->pin)
        return pthread_create(&a->thread, NULL, rsp__actor_owner_main, a);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return rc;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cfg->cpu, &set);
    rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    if (rc == 0)
        rc = pthread_create(&a->thread, &attr, rsp__actor_owner_main, a);
    pthread_attr_destroy(&attr);
    return rc;
}

rsp_status rsp__actor_create(const rsp__actor_config *cfg, rsp__actor **out, rsp_error *err)
{
    if (!cfg || !cfg->handle || !out)
        return rsp__fail(err, RSP_EINVAL, "actor config: handler and out are required");
    if (cfg->pin) {
        rsp_status st = rsp__actor_check_cpu(cfg->cpu, err);
        if (st != RSP_OK)
            return st;
    }
    size_t size = rsp__align_up(sizeof(rsp__actor), RSP__CACHELINE);
    rsp__actor *a = aligned_alloc(RSP__CACHELINE, size);
    if (!a)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the inbox");
    memset(a, 0, size);
    pthread_mutex_init(&a->chunk_lock, NULL); /* cannot fail: default attributes */
    a->chunk_next = RSP__TICKET_CHUNK;
    a->cfg = *cfg;
    a->capacity = cfg->capacity ? cfg->capacity : RSP__ACTOR_DEFAULT_CAPACITY;
    a->credits = a->capacity;
    a->wake_threshold = a->capacity / 4 ? a->capacity / 4 : 1;
    a->spin_ns = cfg->spin_max ? cfg->spin_max : RSP__OWNER_SPIN_NS;
    a->lend = cfg->inline_calls && !cfg->ordered;
    a->partner_cpu = -1;
    a->owner_cpu_now = -1;
    __cds_wfcq_init(&a->head, &a->tail);
    if (cfg->ordered) {
        /* The reorder heap: held tickets keep their credits, so capacity
         * entries are enough (actor.h, "Ordered delivery"). */
        a->held = calloc(a->capacity, sizeof *a->held);
        if (!a->held) {
            free(a);
            return rsp__fail(err, RSP_ENOMEM, "out of memory for the reorder window");
        }
        a->next_seq = 1;
        a->gap_ns = cfg->reorder_timeout_ns ? cfg->reorder_timeout_ns : RSP__REORDER_TIMEOUT_NS;
    }

    /* Allocated now so that destroy can always close the inbox. */
    void *none;
    a->stop_ticket = rsp__ticket_new(0, &none);
    if (!a->stop_ticket) {
        free(a->held);
        free(a);
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the inbox");
    }
    a->stop_ticket->stop_only = true;
    int rc = start_owner(a, cfg);
    if (rc != 0) {
        free(a->stop_ticket);
        free(a->held);
        free(a);
        if (cfg->pin && rc == EINVAL) /* outside the cpuset this process may use */
            return rsp__fail(err, RSP_EINVAL,
                             "owner_cpu %d is not a CPU this process may run on (pthread_create: "
                             "%s)",
                             cfg->cpu, strerror(rc));
        return rsp__fail(err, rc == EAGAIN ? RSP_ENOMEM : RSP_EINVAL,
                         "cannot start the owner thread (pthread_create: %s)", strerror(rc));
    }
    *out = a;
    return RSP_OK;
}

void rsp__actor_destroy(rsp__actor *a)
{
    if (!a)
        return;
    rsp__actor_close(a, NULL, false, NULL); /* RSP_ESHUTDOWN if already closed: fine */
    pthread_join(a->thread, NULL);

    /* Unreachable by S1/S2, but a message left here would hang its waiter:
     * answer whatever is left. No producer is mid-enqueue any more (the
     * close waited for them), so the splice cannot block for long. */
    bool stopped = true;
    while (rsp__actor_drain(a, &stopped))
        ;
    RSP__ASSERT(a->num_held == 0);
    /* Every pooled ticket is back on the stack now: fire-and-forget
     * tickets are released by the owner once answered, and all are. They
     * live in the chunks. */
    RSP__ASSERT(rsp__ticket_pooled_free(a) == rsp__load_relaxed_u32(&a->pooled));
    while (a->chunks) {
        ticket_chunk *c = a->chunks;
        a->chunks = c->next;
        free(c);
    }
    pthread_mutex_destroy(&a->chunk_lock);
    free(a->stop_ticket);
    free(a->held);
    free(a);
}
