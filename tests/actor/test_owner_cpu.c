/*
 * The owner thread pinned to a CPU: the actor's `pin` (its handler runs on
 * that CPU, its affinity is that CPU alone) and the pool's
 * rsp_pool_config.owner_cpu (rsp_pool_info reports it; an invalid CPU is
 * RSP_EINVAL naming it, nothing created). The main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>

#include <cmocka.h>

#include "actor/actor.h"
#include "pool.h"
#include "util/sync.h"

/* The CPU the handler ran on, per message (owner writes, main reads after
 * the answer: the ticket's T1/T2 orders it). */
static void record_cpu(void *ctx, void *payload, size_t size, rsp_reply *reply)
{
    (void)payload;
    (void)size;
    rsp__store_relaxed_u32(ctx, (uint32_t)sched_getcpu());
    reply->error.status = RSP_OK;
}

/* The last CPU of this process's affinity mask (not CPU 0 where there are
 * two or more, so that "pinned" differs from a zeroed field). */
static int some_allowed_cpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int last = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            last = c;
    assert_true(last >= 0);
    return last;
}

/* A CPU number this machine does not have (but below CPU_SETSIZE), or -1
 * if it has them all. */
static int some_forbidden_cpu(void)
{
    int n = get_nprocs_conf();
    return n < CPU_SETSIZE ? n : -1;
}

static void pinned_actor_handles_on_its_cpu(void **state)
{
    (void)state;
    const int cpu = some_allowed_cpu();
    uint32_t seen = UINT32_MAX;
    rsp__actor_config cfg = {.handle = record_cpu, .ctx = &seen, .pin = true, .cpu = cpu};
    rsp__actor *a = NULL;
    rsp_error err;
    assert_int_equal(rsp__actor_create(&cfg, &a, &err), RSP_OK);
    assert_int_equal(rsp__actor_pinned_cpu(a), cpu);
    for (int i = 0; i < 20; i++) {
        void *payload;
        rsp_ticket *t = rsp__ticket_new(8, &payload);
        assert_non_null(t);
        assert_int_equal(rsp__actor_post(a, t, true, RSP_WAIT_FOREVER, &err), RSP_OK);
        assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
        assert_int_equal((int)rsp__load_relaxed_u32(&seen), cpu);
    }
    rsp__actor_destroy(a);
}

static void unpinned_actor_keeps_the_process_mask(void **state)
{
    (void)state;
    uint32_t seen = 0;
    rsp__actor_config cfg = {.handle = record_cpu, .ctx = &seen};
    rsp__actor *a = NULL;
    assert_int_equal(rsp__actor_create(&cfg, &a, NULL), RSP_OK);
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_int_equal(rsp__actor_pinned_cpu(a), CPU_COUNT(&set) == 1 ? some_allowed_cpu() : -1);
    rsp__actor_destroy(a);
}

static void bad_cpu_is_refused_naming_it(void **state)
{
    (void)state;
    const int bad[] = {-2, CPU_SETSIZE, 1 << 30, some_forbidden_cpu()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i] == -1)
            continue; /* every CPU allowed: no forbidden one to try */
        rsp_error err;
        memset(&err, 0, sizeof err);
        assert_int_equal(rsp__actor_check_cpu(bad[i], &err), RSP_EINVAL);
        char num[32];
        snprintf(num, sizeof num, "owner_cpu %d ", bad[i]);
        assert_non_null(strstr(err.message, num));
        uint32_t seen = 0;
        rsp__actor_config cfg = {.handle = record_cpu, .ctx = &seen, .pin = true, .cpu = bad[i]};
        rsp__actor *a = (rsp__actor *)&seen;
        assert_int_equal(rsp__actor_create(&cfg, &a, &err), RSP_EINVAL);
        assert_ptr_equal(a, (rsp__actor *)&seen); /* untouched: nothing made */
    }
    assert_int_equal(rsp__actor_check_cpu(some_allowed_cpu(), NULL), RSP_OK);
}

static const rsp_block_config blocks[1] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}},
};

static void config(rsp_pool_config *cfg)
{
    rsp_pool_config_init(cfg);
    cfg->num_layers = 1;
    cfg->blocks = blocks;
    cfg->num_blocks = 1;
    cfg->max_slots = 8;
}

static void pool_owner_cpu_default_is_unpinned(void **state)
{
    (void)state;
    rsp_pool_config cfg;
    config(&cfg);
    assert_int_equal(cfg.owner_cpu, -1);
    rsp_pool *pool = NULL;
    rsp_error err;
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_OK);
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, &err), RSP_OK);
    assert_int_equal(info.owner_cpu, -1);
    rsp_pool_destroy(pool);
}

static void pool_owner_runs_on_owner_cpu(void **state)
{
    (void)state;
    const int cpu = some_allowed_cpu();
    rsp_pool_config cfg;
    config(&cfg);
    cfg.owner_cpu = cpu;
    rsp_pool *pool = NULL;
    rsp_error err;
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_OK);
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, &err), RSP_OK);
    assert_int_equal(info.owner_cpu, cpu);
    assert_int_equal(rsp__actor_pinned_cpu(pool->actor), cpu);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK); /* and it works */
    rsp_pool_destroy(pool);
}

static void pool_bad_owner_cpu_creates_nothing(void **state)
{
    (void)state;
    const int bad[] = {-2, CPU_SETSIZE, some_forbidden_cpu()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i] == -1)
            continue;
        rsp_pool_config cfg;
        config(&cfg);
        cfg.owner_cpu = bad[i];
        rsp_pool *pool = (rsp_pool *)&cfg;
        rsp_error err;
        memset(&err, 0, sizeof err);
        assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_EINVAL);
        assert_null(pool);
        char num[32];
        snprintf(num, sizeof num, "owner_cpu %d ", bad[i]);
        assert_non_null(strstr(err.message, num));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pinned_actor_handles_on_its_cpu),
        cmocka_unit_test(unpinned_actor_keeps_the_process_mask),
        cmocka_unit_test(bad_cpu_is_refused_naming_it),
        cmocka_unit_test(pool_owner_cpu_default_is_unpinned),
        cmocka_unit_test(pool_owner_runs_on_owner_cpu),
        cmocka_unit_test(pool_bad_owner_cpu_creates_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
