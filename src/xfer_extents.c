/*
 * The pure part of export and import: the pool's regions, the header's
 * layout description and fingerprint, and the extents both sides list in
 * one order (docs/design.md "Export and import").
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <string.h>

#include "face.h"
#include "pool.h"
#include "util/error.h"
#include "xfer_impl.h"

/* Slots of each storage, in region order (request slots, device tier,
 * host tier). */
static uint32_t space_count(const rsp__layout *lay, uint32_t sp)
{
    return sp == RSP__SPACE_SLOTS    ? lay->max_slots
           : sp == RSP__SPACE_DEVICE ? lay->max_checkpoints
                                     : lay->max_host_checkpoints;
}

/* Index of (space, block) in rsp_pool_regions' list: absent tiers take no
 * place. */
static uint32_t region_of(const rsp__layout *lay, uint32_t sp, uint32_t b)
{
    uint32_t before = 0;
    for (uint32_t s = 0; s < sp; s++)
        before += space_count(lay, s) ? 1 : 0;
    return before * lay->num_blocks + b;
}

rsp_status rsp_pool_regions(const rsp_pool *pool, rsp_region *out, uint32_t cap, uint32_t *count,
                            rsp_error *err)
{
    if (!pool || !count || (cap && !out))
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : !count ? "count" : "out");
    const rsp__layout *lay = pool->layout;
    uint32_t k = 0;
    for (uint32_t sp = 0; sp < 3; sp++) {
        uint32_t n = space_count(lay, sp);
        for (uint32_t b = 0; n && b < lay->num_blocks; b++, k++) {
            if (k >= cap)
                continue;
            /* The host tier is host memory on either device (CUDA: mapped
             * pinned memory, the same address on both sides under UVA). */
            out[k] = (rsp_region){
                .base = rsp__device_space_base(pool->dev, (rsp__space)sp, b),
                .length = lay->blocks[b].slot_bytes * n * lay->num_layers,
                .memory = sp == RSP__SPACE_HOST ? RSP_DEVICE_HOST : pool->device_kind,
                .block = b,
                .space = (rsp_region_space)sp,
            };
        }
    }
    *count = k;
    return RSP_OK;
}

uint64_t rsp_xfer_header_fingerprint(const rsp_xfer_header *h)
{
    if (!h)
        return 0;
    uint64_t f = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
    const unsigned char *p = (const unsigned char *)&h->num_layers;
    size_t n =
        offsetof(rsp_xfer_header, blocks) - offsetof(rsp_xfer_header, num_layers) +
        (h->num_blocks <= RSP_MAX_BLOCKS ? h->num_blocks : RSP_MAX_BLOCKS) * sizeof(rsp_xfer_block);
    for (size_t i = 0; i < n; i++)
        f = (f ^ p[i]) * 0x100000001b3ull;
    return f;
}

void rsp__xfer_describe(const rsp__layout *lay, rsp_xfer_header *h)
{
    memset(h, 0, sizeof *h); /* names and padding are zeros: the fingerprint hashes bytes */
    h->format = RSP_XFER_FORMAT;
    h->world_size = lay->world_size;
    h->rank = lay->rank;
    h->num_layers = lay->num_layers;
    h->num_blocks = lay->num_blocks;
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        const rsp__block_layout *bl = &lay->blocks[b];
        rsp_xfer_block *xb = &h->blocks[b];
        memcpy(xb->name, bl->name, sizeof xb->name);
        xb->dtype = (uint32_t)bl->dtype;
        xb->ndim = bl->ndim;
        memcpy(xb->shape, bl->full_shape, sizeof xb->shape);
        xb->shard_mask = bl->shard_mask;
    }
    h->fingerprint = rsp_xfer_header_fingerprint(h);
}

/* Block b of h against the pool's: the first field that differs. */
static rsp_status check_block(const rsp_xfer_block *mine, const rsp_xfer_block *x, uint32_t b,
                              rsp_error *err)
{
    if (strncmp(mine->name, x->name, RSP_NAME_MAX) != 0)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: blocks[%" PRIu32 "] is \"%.*s\" here, \"%.*s\" "
                         "in the export",
                         b, RSP_NAME_MAX - 1, mine->name, RSP_NAME_MAX - 1, x->name);
    if (mine->dtype != x->dtype)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: blocks[%" PRIu32 "] (\"%s\") dtype %" PRIu32
                         " here, %" PRIu32 " in the export",
                         b, mine->name, mine->dtype, x->dtype);
    if (mine->ndim != x->ndim)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: blocks[%" PRIu32 "] (\"%s\") ndim %" PRIu32
                         " here, %" PRIu32 " in the export",
                         b, mine->name, mine->ndim, x->ndim);
    for (uint32_t d = 0; d < mine->ndim; d++)
        if (mine->shape[d] != x->shape[d])
            return rsp__fail(err, RSP_EINVAL,
                             "import: layout differs: blocks[%" PRIu32 "] (\"%s\") shape[%" PRIu32
                             "] %" PRId64 " here, %" PRId64 " in the export",
                             b, mine->name, d, mine->shape[d], x->shape[d]);
    if (mine->shard_mask != x->shard_mask)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: blocks[%" PRIu32
                         "] (\"%s\") shard axes 0x%" PRIx32 " here, 0x%" PRIx32 " in the export",
                         b, mine->name, mine->shard_mask, x->shard_mask);
    return RSP_OK;
}

rsp_status rsp__xfer_check_layout(const rsp__layout *lay, const rsp_xfer_header *h, rsp_error *err)
{
    if (h->format != RSP_XFER_FORMAT)
        return rsp__fail(err, RSP_EINVAL,
                         "import: header format %" PRIu32 ", this library reads %u", h->format,
                         RSP_XFER_FORMAT);
    if (h->num_blocks > RSP_MAX_BLOCKS || h->fingerprint != rsp_xfer_header_fingerprint(h))
        return rsp__fail(err, RSP_EINVAL,
                         "import: the header's fingerprint does not match its layout (damaged)");
    rsp_xfer_header mine;
    rsp__xfer_describe(lay, &mine);
    if (mine.num_layers != h->num_layers)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: num_layers %" PRIu32 " here, %" PRIu32
                         " in the export",
                         mine.num_layers, h->num_layers);
    if (mine.num_blocks != h->num_blocks)
        return rsp__fail(err, RSP_EINVAL,
                         "import: layout differs: %" PRIu32 " blocks here, %" PRIu32
                         " in the export",
                         mine.num_blocks, h->num_blocks);
    for (uint32_t b = 0; b < mine.num_blocks; b++) {
        rsp_status st = check_block(&mine.blocks[b], &h->blocks[b], b, err);
        if (st)
            return st;
    }
    return RSP_OK;
}

/* The box of one block that source rank (sw, sr) gives target (tw, tr),
 * in this side's local coordinates: its offset and extent per axis, and
 * the first axis from which runs are contiguous on both sides. false: the
 * two share nothing of it. */
typedef struct xfer_box {
    int64_t off[RSP_MAX_DIMS], ext[RSP_MAX_DIMS];
    uint32_t run_axis; /* runs: ext[run_axis] x everything after it */
} xfer_box;

static bool block_box(const rsp__block_layout *bl, uint32_t sw, uint32_t sr, uint32_t tw,
                      uint32_t tr, bool source, xfer_box *x)
{
    if (!bl->shard_mask && sr != tr % sw)
        return false; /* a replicated block comes from one source rank */
    int64_t peer[RSP_MAX_DIMS];
    for (uint32_t d = 0; d < bl->ndim; d++) {
        int64_t f = bl->full_shape[d];
        if (!(bl->shard_mask >> d & 1)) {
            x->off[d] = 0, x->ext[d] = peer[d] = f;
            continue;
        }
        int64_t slo = (int64_t)sr * f / sw, shi = (int64_t)(sr + 1) * f / sw;
        int64_t tlo = (int64_t)tr * f / tw, thi = (int64_t)(tr + 1) * f / tw;
        int64_t lo = slo > tlo ? slo : tlo, hi = shi < thi ? shi : thi;
        if (lo >= hi)
            return false;
        x->ext[d] = hi - lo;
        x->off[d] = lo - (source ? slo : tlo);
        peer[d] = source ? thi - tlo : shi - slo;
    }
    uint32_t t = bl->ndim; /* axes [t, ndim) are whole on both sides */
    while (t > 0 && x->ext[t - 1] == bl->shape[t - 1] && x->ext[t - 1] == peer[t - 1])
        t--;
    x->run_axis = t > 0 ? t - 1 : 0;
    return true;
}

/* Emit the runs of box x of one (slot, layer) of block bl, whose bytes
 * start at base in region reg. */
static uint64_t box_runs(const rsp__block_layout *bl, const xfer_box *x, uint32_t reg,
                         uint64_t base, rsp_extent *out, uint64_t k, uint64_t cap)
{
    int64_t stride[RSP_MAX_DIMS], idx[RSP_MAX_DIMS] = {0};
    int64_t s = 1;
    for (uint32_t d = bl->ndim; d-- > 0;) {
        stride[d] = s;
        s *= bl->shape[d];
    }
    const uint32_t j = x->run_axis;
    const uint64_t run = (uint64_t)(x->ext[j] * stride[j]) * bl->elem_size;
    for (;;) {
        int64_t off = x->off[j] * stride[j];
        for (uint32_t d = 0; d < j; d++)
            off += (x->off[d] + idx[d]) * stride[d];
        if (out && k < cap)
            out[k] = (rsp_extent){
                .region = reg, .offset = base + (uint64_t)off * bl->elem_size, .length = run};
        k++;
        uint32_t d = j; /* next index over the axes before the run axis */
        while (d > 0 && ++idx[d - 1] == x->ext[d - 1])
            idx[--d] = 0;
        if (d == 0)
            return k;
    }
}

uint64_t rsp__xfer_extents(const rsp__layout *lay, const uint32_t *slots, uint32_t n, uint32_t sw,
                           uint32_t sr, uint32_t tw, uint32_t tr, bool source, rsp_extent *out,
                           uint64_t cap)
{
    uint64_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t index;
        rsp__space sp = rsp__layout_space(lay, slots[i], &index);
        uint32_t count = space_count(lay, sp);
        for (uint32_t b = 0; b < lay->num_blocks; b++) {
            const rsp__block_layout *bl = &lay->blocks[b];
            xfer_box x;
            if (!block_box(bl, sw, sr, tw, tr, source, &x))
                continue;
            for (uint32_t l = 0; l < lay->num_layers; l++) {
                uint64_t base = ((uint64_t)l * count + index) * bl->slot_bytes;
                k = box_runs(bl, &x, region_of(lay, sp, b), base, out, k, cap);
            }
        }
    }
    return k;
}
