/*
 * test_cuda_kernels: the batched zero and copy kernels (kernels/), byte for
 * byte, for many block shapes, dtypes, slot counts and base alignments.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Each scenario runs twice over: on the host emulators (the kernels' own
 * chunk code run on the CPU, with several thread counts; runs everywhere the
 * CUDA build runs, CI included) and on the GPU (skipped visibly without one).
 * Every byte of every block, plus guard bytes on both sides, is compared with
 * a reference computed with memset/memmove.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../../kernels/rsp_kernels.h"
#include "cuda/gpu.h"

#define GUARD 64u

/* One block of a case: element size and count give slot_bytes. */
typedef struct kblock_spec {
    const char *what; /* dtype[shape], for messages */
    uint32_t elem;
    uint64_t elems;
} kblock_spec;

typedef struct kcase {
    const char *name;
    uint32_t layers;
    uint32_t slots;
    uint32_t nblocks;
    kblock_spec blocks[4];
} kcase;

static const kcase cases[] = {
    {"f32[4,8]", 3, 5, 1, {{"f32[4,8]", 4, 32}}},
    {"bf16[3] + u8[1] + u8[7]", 2, 9, 3, {{"bf16[3]", 2, 3}, {"u8[1]", 1, 1}, {"u8[7]", 1, 7}}},
    {"f16[5,3] f64[2048] i64[4097] bf16[16384]",
     2,
     4,
     4,
     {{"f16[5,3]", 2, 15},
      {"f64[2048]", 8, 2048},
      {"i64[4097]", 8, 4097},
      {"bf16[16384]", 2, 16384}}},
    {"f32[3,10001] + i8[33001]", 2, 3, 2, {{"f32[3,10001]", 4, 30003}, {"i8[33001]", 1, 33001}}},
    {"300 slots u8[20] + f32[4]", 4, 300, 2, {{"u8[20]", 1, 20}, {"f32[4]", 4, 4}}},
    {"two slots f32[4]", 1, 2, 1, {{"f32[4]", 4, 4}}},
};
#define NUM_CASES (sizeof cases / sizeof cases[0])

/* Base pointer offsets: aligned, and misaligned by odd, even, 8 and 12. */
static const uint32_t aligned_offsets[4] = {0, 0, 0, 0};
static const uint32_t odd_offsets[4] = {1, 6, 8, 12};

typedef enum runner { RUN_EMU, RUN_GPU } runner;

typedef struct fixture {
    const kcase *kc;
    runner run;
    unsigned threads; /* emulator */
    rsp__kgeom geom;
    uint64_t alloc[4];
    uint8_t *img[4]; /* what the kernels act on (EMU) / read back (GPU) */
    uint8_t *ref[4];
    uint8_t *dmem[4]; /* GPU allocations */
    uint32_t off[4];
    uint64_t seed;
} fixture;

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void fx_init(fixture *f, const kcase *kc, runner run, unsigned threads, const uint32_t *off)
{
    memset(f, 0, sizeof *f);
    f->kc = kc;
    f->run = run;
    f->threads = threads;
    f->seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)kc->slots;
    f->geom.num_blocks = kc->nblocks;
    f->geom.num_layers = kc->layers;
    for (uint32_t b = 0; b < kc->nblocks; b++) {
        const uint64_t sb = kc->blocks[b].elem * kc->blocks[b].elems;
        f->off[b] = off[b];
        f->alloc[b] = GUARD + off[b] + sb * kc->slots * kc->layers + GUARD;
        f->img[b] = malloc(f->alloc[b]);
        f->ref[b] = malloc(f->alloc[b]);
        assert_non_null(f->img[b]);
        assert_non_null(f->ref[b]);
        uint8_t *base = f->img[b];
#ifdef RSP_HAVE_CUDA
        if (run == RUN_GPU) {
            RSP_TEST_CUDA(cudaMalloc((void **)&f->dmem[b], f->alloc[b]));
            base = f->dmem[b];
        }
#endif
        f->geom.blocks[b] = (rsp__kblock){
            .base = base + GUARD + off[b], .slot_bytes = sb, .layer_bytes = sb * kc->slots};
    }
}

static void fx_fini(fixture *f)
{
    for (uint32_t b = 0; b < f->kc->nblocks; b++) {
        free(f->img[b]);
        free(f->ref[b]);
#ifdef RSP_HAVE_CUDA
        if (f->dmem[b])
            (void)cudaFree(f->dmem[b]);
#endif
    }
}

/* Fresh nonzero pattern everywhere (guards included), mirrored in ref. */
static void fx_fill(fixture *f)
{
    const uint64_t salt = lcg(&f->seed);
    for (uint32_t b = 0; b < f->kc->nblocks; b++) {
        for (uint64_t i = 0; i < f->alloc[b]; i++)
            f->img[b][i] = (uint8_t)(1 + (i * 2654435761u + b * 97u + salt) % 255u);
        memcpy(f->ref[b], f->img[b], f->alloc[b]);
#ifdef RSP_HAVE_CUDA
        if (f->run == RUN_GPU)
            RSP_TEST_CUDA(cudaMemcpy(f->dmem[b], f->img[b], f->alloc[b], cudaMemcpyHostToDevice));
#endif
    }
}

static uint8_t *ref_at(fixture *f, uint32_t b, uint32_t l, uint32_t s)
{
    const rsp__kblock *kb = &f->geom.blocks[b];
    return f->ref[b] + GUARD + f->off[b] + l * kb->layer_bytes + (uint64_t)s * kb->slot_bytes;
}

/* Compare every byte (guards too) with the reference. */
static void fx_check(fixture *f, const char *what)
{
    for (uint32_t b = 0; b < f->kc->nblocks; b++) {
#ifdef RSP_HAVE_CUDA
        if (f->run == RUN_GPU)
            RSP_TEST_CUDA(cudaMemcpy(f->img[b], f->dmem[b], f->alloc[b], cudaMemcpyDeviceToHost));
#endif
        if (memcmp(f->img[b], f->ref[b], f->alloc[b]) == 0)
            continue;
        uint64_t i = 0;
        while (f->img[b][i] == f->ref[b][i])
            i++;
        const uint64_t rel = i - GUARD - f->off[b];
        const uint64_t sb = f->geom.blocks[b].slot_bytes;
        fail_msg("%s (%s, %s, base+%u, %s threads=%u): block %s byte %llu differs "
                 "(layer %llu slot %llu offset %llu): got %u want %u",
                 f->kc->name, what, f->run == RUN_GPU ? "gpu" : "emulator", f->off[b],
                 f->run == RUN_GPU ? "" : "emulated", f->threads, f->kc->blocks[b].what,
                 (unsigned long long)i, (unsigned long long)(rel / f->geom.blocks[b].layer_bytes),
                 (unsigned long long)(rel % f->geom.blocks[b].layer_bytes / sb),
                 (unsigned long long)(rel % sb), f->img[b][i], f->ref[b][i]);
    }
}

static void fx_zero(fixture *f, const uint32_t *slots, uint32_t n)
{
    fx_fill(f);
    for (uint32_t b = 0; b < f->kc->nblocks; b++)
        for (uint32_t l = 0; l < f->kc->layers; l++)
            for (uint32_t i = 0; i < n; i++)
                memset(ref_at(f, b, l, slots[i]), 0, f->geom.blocks[b].slot_bytes);
    if (f->run == RUN_EMU) {
        assert_int_equal(rsp__kernels_zero_host(&f->geom, slots, n, f->threads), 0);
    } else {
#ifdef RSP_HAVE_CUDA
        uint32_t *d = NULL;
        RSP_TEST_CUDA(cudaMalloc((void **)&d, (n ? n : 1) * sizeof *d));
        RSP_TEST_CUDA(cudaMemcpy(d, slots, n * sizeof *d, cudaMemcpyHostToDevice));
        RSP_TEST_CUDA(rsp__kernels_zero(&f->geom, d, n, 0, 0));
        RSP_TEST_CUDA(cudaDeviceSynchronize());
        (void)cudaFree(d);
#endif
    }
    fx_check(f, "zero");
}

static void fx_copy(fixture *f, const rsp__kpair *pairs, uint32_t n)
{
    fx_fill(f);
    for (uint32_t b = 0; b < f->kc->nblocks; b++)
        for (uint32_t l = 0; l < f->kc->layers; l++)
            for (uint32_t i = 0; i < n; i++)
                memmove(ref_at(f, b, l, pairs[i].dst), ref_at(f, b, l, pairs[i].src),
                        f->geom.blocks[b].slot_bytes);
    if (f->run == RUN_EMU) {
        assert_int_equal(rsp__kernels_copy_host(&f->geom, pairs, n, f->threads), 0);
    } else {
#ifdef RSP_HAVE_CUDA
        rsp__kpair *d = NULL;
        RSP_TEST_CUDA(cudaMalloc((void **)&d, (n ? n : 1) * sizeof *d));
        RSP_TEST_CUDA(cudaMemcpy(d, pairs, n * sizeof *d, cudaMemcpyHostToDevice));
        RSP_TEST_CUDA(rsp__kernels_copy(&f->geom, d, n, 0, 0));
        RSP_TEST_CUDA(cudaDeviceSynchronize());
        (void)cudaFree(d);
#endif
    }
    fx_check(f, "copy");
}

/* A random permutation of the slots. */
static void shuffle(fixture *f, uint32_t *perm)
{
    const uint32_t n = f->kc->slots;
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        const uint32_t j = (uint32_t)(lcg(&f->seed) % (i + 1));
        const uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* The scenarios of one (case, runner, base offsets). */
static void run_case(const kcase *kc, runner run, unsigned threads, const uint32_t *off)
{
    fixture f;
    fx_init(&f, kc, run, threads, off);
    const uint32_t n = kc->slots, last = n - 1;
    uint32_t *perm = malloc(n * sizeof *perm);
    uint32_t *slots = malloc(n * sizeof *slots);
    rsp__kpair *pairs = malloc(n * sizeof *pairs);
    assert_non_null(perm);
    assert_non_null(slots);
    assert_non_null(pairs);

    /* the largest slot index alone, then slot 0 alone */
    fx_zero(&f, &last, 1);
    const uint32_t zero = 0;
    fx_zero(&f, &zero, 1);
    /* about half the slots, then all of them, in random order */
    shuffle(&f, perm);
    fx_zero(&f, perm, n / 2 ? n / 2 : 1);
    fx_zero(&f, perm, n);

    /* copies onto the largest slot and out of it */
    rsp__kpair p = {0, last};
    fx_copy(&f, &p, 1);
    p = (rsp__kpair){last, 0};
    fx_copy(&f, &p, 1);
    /* a slot copied onto itself: bytes unchanged */
    p = (rsp__kpair){last, last};
    fx_copy(&f, &p, 1);

    /* random disjoint batches: sources from the front of a permutation,
     * destinations from the back, one self copy from what is left; every
     * slot distance parity, so every access width, shows up */
    for (int round = 0; round < 3; round++) {
        shuffle(&f, perm);
        const uint32_t k = n / 2;
        uint32_t m = 0;
        for (uint32_t i = 0; i < k; i++)
            pairs[m++] = (rsp__kpair){perm[i], perm[n - 1 - i]};
        if (n % 2)
            pairs[m++] = (rsp__kpair){perm[k], perm[k]};
        fx_copy(&f, pairs, m);
    }
    /* every slot onto the next, in one batch: impossible (chains); instead
     * the even slots onto the odd ones, adjacent, which misaligns the most */
    uint32_t m = 0;
    for (uint32_t s = 0; s + 1 < n; s += 2)
        pairs[m++] = (rsp__kpair){s, s + 1};
    fx_copy(&f, pairs, m);
    (void)slots;

    free(perm);
    free(slots);
    free(pairs);
    fx_fini(&f);
}

/* ------------------------------------------------------------------------ */

static void emulated_kernels_move_exact_bytes_aligned_bases(void **state)
{
    (void)state;
    for (size_t c = 0; c < NUM_CASES; c++) {
        run_case(&cases[c], RUN_EMU, RSP__KTHREADS, aligned_offsets);
        run_case(&cases[c], RUN_EMU, 1, aligned_offsets);
    }
}

static void emulated_kernels_move_exact_bytes_misaligned_bases(void **state)
{
    (void)state;
    for (size_t c = 0; c < NUM_CASES; c++) {
        run_case(&cases[c], RUN_EMU, RSP__KTHREADS, odd_offsets);
        run_case(&cases[c], RUN_EMU, 37, odd_offsets);
    }
}

static void chunk_count_covers_every_region_once(void **state)
{
    (void)state;
    rsp__kgeom g;
    memset(&g, 0, sizeof g);
    g.num_layers = 2;
    g.num_blocks = 3;
    g.blocks[0].slot_bytes = 100000; /* (100000 + 15) / 32768 rounded up: 4 chunks */
    g.blocks[1].slot_bytes = 6;      /* 1 chunk */
    g.blocks[2].slot_bytes = 0;      /* empty block: no chunks */
    assert_int_equal(rsp__kernels_chunks(&g, 3), 3 * 2 * (4 + 1));
    assert_int_equal(rsp__kernels_chunks(&g, 0), 0);
    g.num_blocks = RSP__KMAX_BLOCKS + 1; /* refused, never read past the table */
    assert_int_equal(rsp__kernels_chunks(&g, 3), 0);
}

static void launch_of_nothing_is_no_launch(void **state)
{
    (void)state;
    /* count 0: no CUDA call at all, so this holds without a GPU */
    rsp__kgeom g;
    memset(&g, 0, sizeof g);
    g.num_layers = 1;
    g.num_blocks = 1;
    g.blocks[0].slot_bytes = 16;
    assert_int_equal(rsp__kernels_zero(&g, NULL, 0, 0, 0), cudaSuccess);
    assert_int_equal(rsp__kernels_copy(&g, NULL, 0, 0, 0), cudaSuccess);
    g.num_blocks = RSP__KMAX_BLOCKS + 1;
    assert_int_equal(rsp__kernels_zero(&g, NULL, 1, 0, 0), cudaErrorInvalidValue);
}

/*
 * Slot ids past the request slots resolve to the checkpoint tiers
 * (rsp__kgeom.tier_first): request slots 0..2, device tier 3..4, host
 * tier 5..6, each storage its own allocation (bases misaligned
 * differently, guards around). Copies in every direction, in one launch,
 * then a zero of one slot of each storage, on the emulators: every byte of every
 * storage, guards included, as the reference says, and no misaligned wide
 * access.
 */
#define TK_LAYERS 2u
static const uint32_t tk_count[3] = {3, 2, 2}; /* request slots, device tier, host tier */
static const uint64_t tk_sb[2] = {6, 4100};    /* bf16[3], f32[1025] */
static const uint32_t tk_off[3] = {0, 6, 1};

static uint8_t *tk_at(uint8_t *mem[2][3], uint32_t b, uint32_t l, uint32_t id)
{
    uint32_t sp = 0;
    while (sp < 2 && id >= tk_count[sp]) {
        id -= tk_count[sp];
        sp++;
    }
    return mem[b][sp] + GUARD + tk_off[sp] + ((uint64_t)l * tk_count[sp] + id) * tk_sb[b];
}

static void emulated_copy_resolves_tier_ids(void **state)
{
    (void)state;
    uint8_t *img[2][3], *ref[2][3];
    uint64_t size[2][3];
    rsp__kgeom g;
    memset(&g, 0, sizeof g);
    g.num_blocks = 2;
    g.num_layers = TK_LAYERS;
    g.tier_first[0] = tk_count[0];
    g.tier_first[1] = tk_count[0] + tk_count[1];
    for (uint32_t b = 0; b < 2; b++) {
        for (uint32_t sp = 0; sp < 3; sp++) {
            size[b][sp] = 2 * GUARD + tk_off[sp] + tk_sb[b] * tk_count[sp] * TK_LAYERS;
            img[b][sp] = malloc(size[b][sp]);
            ref[b][sp] = malloc(size[b][sp]);
            assert_non_null(img[b][sp]);
            assert_non_null(ref[b][sp]);
        }
        g.blocks[b] = (rsp__kblock){.base = img[b][0] + GUARD + tk_off[0],
                                    .slot_bytes = tk_sb[b],
                                    .layer_bytes = tk_sb[b] * tk_count[0]};
        for (uint32_t t = 0; t < 2; t++) {
            g.blocks[b].tier_base[t] = img[b][t + 1] + GUARD + tk_off[t + 1];
            g.blocks[b].tier_layer_bytes[t] = tk_sb[b] * tk_count[t + 1];
        }
    }
    /* request -> device, request -> host, device -> host, host -> device,
     * host -> request, device -> request: no id both read and written */
    const rsp__kpair pairs[] = {{0, 3}, {1, 5}, {4, 6}};
    const rsp__kpair back[] = {{5, 4}, {6, 0}, {3, 2}};
    const uint32_t zero[] = {1, 4, 5}; /* a request slot, a device-tier one, a host-tier one */
    static const unsigned threads[3] = {1, 3, 32};
    for (int k = 0; k < 3; k++) {
        for (uint32_t b = 0; b < 2; b++)
            for (uint32_t sp = 0; sp < 3; sp++) {
                for (uint64_t i = 0; i < size[b][sp]; i++)
                    img[b][sp][i] = (uint8_t)(1 + (i * 2654435761u + b * 97u + sp * 31u) % 255u);
                memcpy(ref[b][sp], img[b][sp], size[b][sp]);
            }
        assert_int_equal(rsp__kernels_copy_host(&g, pairs, 3, threads[k]), 0);
        assert_int_equal(rsp__kernels_copy_host(&g, back, 3, threads[k]), 0);
        assert_int_equal(rsp__kernels_zero_host(&g, zero, 3, threads[k]), 0);
        for (uint32_t b = 0; b < 2; b++)
            for (uint32_t l = 0; l < TK_LAYERS; l++) {
                for (uint32_t i = 0; i < 3; i++)
                    memcpy(tk_at(ref, b, l, pairs[i].dst), tk_at(ref, b, l, pairs[i].src),
                           tk_sb[b]);
                for (uint32_t i = 0; i < 3; i++)
                    memcpy(tk_at(ref, b, l, back[i].dst), tk_at(ref, b, l, back[i].src), tk_sb[b]);
                for (uint32_t i = 0; i < 3; i++)
                    memset(tk_at(ref, b, l, zero[i]), 0, tk_sb[b]);
            }
        for (uint32_t b = 0; b < 2; b++)
            for (uint32_t sp = 0; sp < 3; sp++)
                if (memcmp(img[b][sp], ref[b][sp], size[b][sp]) != 0)
                    fail_msg("threads %u: block %u storage %u differs from the reference",
                             threads[k], b, sp);
    }
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t sp = 0; sp < 3; sp++) {
            free(img[b][sp]);
            free(ref[b][sp]);
        }
}

static void gpu_kernels_move_exact_bytes_aligned_bases(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    for (size_t c = 0; c < NUM_CASES; c++)
        run_case(&cases[c], RUN_GPU, RSP__KTHREADS, aligned_offsets);
}

static void gpu_kernels_move_exact_bytes_misaligned_bases(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    for (size_t c = 0; c < NUM_CASES; c++)
        run_case(&cases[c], RUN_GPU, RSP__KTHREADS, odd_offsets);
}

#ifdef RSP_HAVE_CUDA
/* A grid capped to one block still covers every chunk (grid-stride loop). */
static void gpu_kernels_grid_stride_covers_all_with_one_block(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    const kcase *kc = &cases[3];
    fixture f;
    fx_init(&f, kc, RUN_GPU, RSP__KTHREADS, aligned_offsets);
    const uint32_t slots[2] = {2, 0};
    fx_fill(&f);
    for (uint32_t b = 0; b < kc->nblocks; b++)
        for (uint32_t l = 0; l < kc->layers; l++)
            for (uint32_t i = 0; i < 2; i++)
                memset(ref_at(&f, b, l, slots[i]), 0, f.geom.blocks[b].slot_bytes);
    uint32_t *d = NULL;
    RSP_TEST_CUDA(cudaMalloc((void **)&d, sizeof slots));
    RSP_TEST_CUDA(cudaMemcpy(d, slots, sizeof slots, cudaMemcpyHostToDevice));
    RSP_TEST_CUDA(rsp__kernels_zero(&f.geom, d, 2, 1, 0));
    RSP_TEST_CUDA(cudaDeviceSynchronize());
    (void)cudaFree(d);
    fx_check(&f, "zero, grid of 1");
    fx_fini(&f);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_count_covers_every_region_once),
        cmocka_unit_test(launch_of_nothing_is_no_launch),
        cmocka_unit_test(emulated_kernels_move_exact_bytes_aligned_bases),
        cmocka_unit_test(emulated_kernels_move_exact_bytes_misaligned_bases),
        cmocka_unit_test(emulated_copy_resolves_tier_ids),
        cmocka_unit_test(gpu_kernels_move_exact_bytes_aligned_bases),
        cmocka_unit_test(gpu_kernels_move_exact_bytes_misaligned_bases),
#ifdef RSP_HAVE_CUDA
        cmocka_unit_test(gpu_kernels_grid_stride_covers_all_with_one_block),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
