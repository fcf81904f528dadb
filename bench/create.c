/*
 * create: rsp_pool_create + rsp_pool_destroy of a host-device pool whose
 * slot storage is 64 MiB, 1 GiB and 7 GiB, beside an anonymous mmap +
 * munmap of the same bytes (the floor: the kernel hands out zero pages,
 * touched lazily).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Two slot shapes: 1 MiB slots (few slots: the cost is the storage's) and
 * 1 KiB slots (many slots: what creation does per slot shows). Nothing is
 * touched after creation, so a pool whose storage is zeroed lazily costs
 * what its bookkeeping costs. One sample = one create + destroy (or one
 * mmap + munmap); the median over the repetitions. ratio = baseline / rsp.
 * 7 GiB needs the memory (or overcommit) only for the bookkeeping: the
 * storage is never touched.
 */
#include <stdio.h>
#include <sys/mman.h>

#include "bench.h"

typedef struct cr_size {
    const char *name;
    uint64_t bytes;
} cr_size;

static uint64_t cr_pool(const rsp_pool_config *cfg)
{
    rsp_error err = {0};
    rsp_pool *pool;
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(rsp_pool_create(cfg, &pool, &err), &err);
    rsp_pool_destroy(pool);
    return bench_now_ns() - t0;
}

static uint64_t cr_mmap(uint64_t bytes)
{
    uint64_t t0 = bench_now_ns();
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        bench_die("mmap", RSP_ENOMEM, "create: the baseline mapping failed");
    munmap(p, (size_t)bytes);
    return bench_now_ns() - t0;
}

void bench_create(const bench_opts *o)
{
    static const cr_size sizes[] = {
        {"64MiB", 64ull << 20},
        {"1GiB", 1ull << 30},
        {"7GiB", 7ull << 30},
    };
    static const struct {
        bench_shape shape;
        uint64_t slot_bytes; /* all blocks and layers of one slot */
    } shapes[] = {{BENCH_MIB, 1ull << 20}, {BENCH_KIB, 1ull << 10}};
    const uint32_t reps = o->quick ? 2 : 5;
    for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            rsp_pool_config cfg;
            const uint32_t slots = (uint32_t)(sizes[k].bytes / shapes[h].slot_bytes);
            bench_config(&cfg, shapes[h].shape, slots);
            bench_samples rs, bs;
            bench_samples_init(&rs, reps);
            bench_samples_init(&bs, reps);
            for (uint32_t r = 0; r < reps; r++) {
                bench_samples_add(&rs, (double)cr_pool(&cfg));
                bench_samples_add(&bs, (double)cr_mmap(sizes[k].bytes));
            }
            bench_result res = {.bench = "create", .baseline = "mmap"};
            snprintf(res.params, sizeof res.params,
                     "\"storage\": \"%s\", \"storage_bytes\": %llu, \"slot\": \"%s\", "
                     "\"max_slots\": %u",
                     sizes[k].name, (unsigned long long)sizes[k].bytes,
                     bench_shape_name(shapes[h].shape), slots);
            bench_result_samples(&res, &rs, &bs);
            bench_report(o, &res);
            bench_samples_fini(&rs);
            bench_samples_fini(&bs);
        }
    }
}
