/*
 * rsp_pool_create under failure (item 8): fail the N-th thread
 * creation, for every N along creation, and the N-th allocation of the
 * library; each must return a status with nothing left behind (no thread
 * running or unjoined, no allocation live; the ASan build's LeakSanitizer
 * checks the same), and creation must succeed once nothing fails.
 *
 * Thread creation is interposed for the whole process (this executable
 * defines pthread_create and pthread_join, so liburcu's calls come here
 * too: before the publisher had its own reclaimer, liburcu's call_rcu
 * set-up aborted the process when its pthread_create failed). Allocations
 * are wrapped at link time (-Wl,--wrap, see CMakeLists.txt): only the calls
 * of this executable and of the static library it links, i.e. rsp's own.
 * The general allocation sweep over every operation is tests/fault/.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include <rsp/rsp.h>

/* forward_done of a commit whose forward (none runs here) is already done:
 * rsp_event_complete(). */
static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

/* ------------------------------------------------------------------------ */
/* Thread creation: interposed                                               */
/* ------------------------------------------------------------------------ */

static uint32_t fail_thread_at; /* 0: never; N: the N-th call fails with EAGAIN */
static uint32_t thread_calls;
static uint32_t threads_started, threads_joined;

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*join_fn)(pthread_t, void **);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static create_fn real;
    if (!real)
        real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    uint32_t n = __atomic_add_fetch(&thread_calls, 1, __ATOMIC_RELAXED);
    if (n == __atomic_load_n(&fail_thread_at, __ATOMIC_RELAXED))
        return EAGAIN;
    int rc = real(t, attr, fn, arg);
    if (rc == 0)
        __atomic_add_fetch(&threads_started, 1, __ATOMIC_RELAXED);
    return rc;
}

int pthread_join(pthread_t t, void **ret)
{
    static join_fn real;
    if (!real)
        real = (join_fn)dlsym(RTLD_NEXT, "pthread_join");
    int rc = real(t, ret);
    if (rc == 0)
        __atomic_add_fetch(&threads_joined, 1, __ATOMIC_RELAXED);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Allocations: wrapped (--wrap), tracked while armed                        */
/* ------------------------------------------------------------------------ */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void __real_free(void *p);
void *__real_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t n);

static uint32_t armed;         /* count and track the calls */
static uint32_t fail_alloc_at; /* the N-th counted call fails */
static uint32_t alloc_calls;

/* Blocks allocated while armed and not freed yet (any thread frees). */
enum { LIVE_MAX = 1u << 14 };
static void *live[LIVE_MAX];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t live_count, live_overflow;

static void live_add(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&live_lock);
    uint32_t i;
    for (i = 0; i < LIVE_MAX && live[i]; i++)
        ;
    if (i < LIVE_MAX) {
        live[i] = p;
        __atomic_store_n(&live_count, live_count + 1, __ATOMIC_RELAXED);
    } else {
        live_overflow++;
    }
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(void *p)
{
    if (!p || __atomic_load_n(&live_count, __ATOMIC_RELAXED) == 0)
        return; /* nothing tracked: the usual case, kept cheap */
    pthread_mutex_lock(&live_lock);
    for (uint32_t i = 0; i < LIVE_MAX; i++) {
        if (live[i] == p) {
            live[i] = NULL;
            __atomic_store_n(&live_count, live_count - 1, __ATOMIC_RELAXED);
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

/* Whether this armed call fails. */
static int alloc_fails(void)
{
    if (!__atomic_load_n(&armed, __ATOMIC_RELAXED))
        return 0;
    uint32_t n = __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED);
    return n == __atomic_load_n(&fail_alloc_at, __ATOMIC_RELAXED);
}

static int tracking(void)
{
    return __atomic_load_n(&armed, __ATOMIC_RELAXED) != 0;
}

void *__wrap_malloc(size_t n)
{
    if (alloc_fails())
        return NULL;
    void *p = __real_malloc(n);
    if (tracking())
        live_add(p);
    return p;
}

void *__wrap_calloc(size_t k, size_t n)
{
    if (alloc_fails())
        return NULL;
    void *p = __real_calloc(k, n);
    if (tracking())
        live_add(p);
    return p;
}

void *__wrap_realloc(void *old, size_t n)
{
    if (alloc_fails())
        return NULL;
    void *p = __real_realloc(old, n);
    if (p && tracking()) {
        live_remove(old);
        live_add(p);
    }
    return p;
}

int __wrap_posix_memalign(void **out, size_t a, size_t n)
{
    if (alloc_fails())
        return ENOMEM;
    int rc = __real_posix_memalign(out, a, n);
    if (rc == 0 && tracking())
        live_add(*out);
    return rc;
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
    if (alloc_fails())
        return NULL;
    void *p = __real_aligned_alloc(a, n);
    if (tracking())
        live_add(p);
    return p;
}

void __wrap_free(void *p)
{
    live_remove(p);
    __real_free(p);
}

/* The host device's slot storage is an anonymous mapping: counted and
 * tracked like an allocation (munmap ends it). */
static uint32_t mmap_failures; /* armed mmap calls made to fail */

void *__wrap_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off)
{
    if (alloc_fails()) {
        __atomic_add_fetch(&mmap_failures, 1, __ATOMIC_RELAXED);
        errno = ENOMEM;
        return MAP_FAILED;
    }
    void *p = __real_mmap(addr, n, prot, flags, fd, off);
    if (tracking() && p != MAP_FAILED)
        live_add(p);
    return p;
}

int __wrap_munmap(void *addr, size_t n)
{
    live_remove(addr);
    return __real_munmap(addr, n);
}

/* ------------------------------------------------------------------------ */

static const rsp_block_config block = {
    .name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};

static rsp_pool_config config(void)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 2;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 8;
    return cfg;
}

/* The pool works: one step end to end. */
static void use(rsp_pool *pool)
{
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, NULL), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
    assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, NULL), RSP_OK);
}

static void failed_thread_creation_in_pool_create_leaves_nothing(void **state)
{
    (void)state;
    rsp_pool_config cfg = config();
    uint32_t failures = 0;
    for (uint32_t n = 1; n < 64; n++) {
        __atomic_store_n(&thread_calls, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fail_thread_at, n, __ATOMIC_RELAXED);
        rsp_pool *pool = (rsp_pool *)&cfg; /* must be overwritten */
        rsp_error err = {0};
        rsp_status st = rsp_pool_create(&cfg, &pool, &err);
        __atomic_store_n(&fail_thread_at, 0, __ATOMIC_RELAXED);
        if (st == RSP_OK) {
            /* Creation needs fewer than n threads: nothing failed. */
            assert_true(__atomic_load_n(&thread_calls, __ATOMIC_RELAXED) < n);
            use(pool);
            rsp_pool_destroy(pool);
            assert_int_equal(threads_started, threads_joined);
            break;
        }
        failures++;
        if (st != RSP_ENOMEM)
            print_error("thread creation %u failed: %s (%s)\n", n, rsp_strerror(st), err.message);
        assert_int_equal(st, RSP_ENOMEM);
        assert_int_equal(err.status, RSP_ENOMEM);
        assert_null(pool);
        /* Every thread started before the failure was stopped and joined. */
        assert_int_equal(threads_started, threads_joined);
    }
    /* The owner, the host device's worker and the plan reclaimer. */
    assert_true(failures >= 3);
}

static void failed_allocation_in_pool_create_leaves_nothing(void **state)
{
    (void)state;
    rsp_pool_config cfg = config();
    uint32_t failures = 0;
    for (uint32_t n = 1; n < 1000; n++) {
        __atomic_store_n(&alloc_calls, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fail_alloc_at, n, __ATOMIC_RELAXED);
        __atomic_store_n(&armed, 1, __ATOMIC_RELAXED);
        rsp_pool *pool = (rsp_pool *)&cfg;
        rsp_error err = {0};
        rsp_status st = rsp_pool_create(&cfg, &pool, &err);
        __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
        if (st == RSP_OK) {
            assert_true(__atomic_load_n(&alloc_calls, __ATOMIC_RELAXED) < n);
            use(pool);
            rsp_pool_destroy(pool);
            assert_int_equal(threads_started, threads_joined);
            break;
        }
        failures++;
        if (st != RSP_ENOMEM)
            print_error("allocation %u failed: %s (%s)\n", n, rsp_strerror(st), err.message);
        assert_int_equal(st, RSP_ENOMEM);
        assert_null(pool);
        assert_int_equal(threads_started, threads_joined);
        pthread_mutex_lock(&live_lock);
        uint32_t left = live_count, overflow = live_overflow;
        pthread_mutex_unlock(&live_lock);
        if (left)
            print_error("allocation %u failed: %u blocks left allocated\n", n, left);
        assert_int_equal(left, 0);
        assert_int_equal(overflow, 0);
    }
    assert_true(failures >= 5);
    /* The storage mapping was among the failures (and left nothing). */
    assert_true(__atomic_load_n(&mmap_failures, __ATOMIC_RELAXED) >= 1);
    pthread_mutex_lock(&live_lock);
    memset(live, 0, sizeof live);
    live_count = 0;
    pthread_mutex_unlock(&live_lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_thread_creation_in_pool_create_leaves_nothing),
        cmocka_unit_test(failed_allocation_in_pool_create_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
