/*
 * libFuzzer target: rsp_pool_create's configuration. Every config must give
 * RSP_OK (then info, the block views and a round trip must be consistent)
 * or a clear error (a status and a message, *out left NULL); never a crash,
 * a leak (ASan's leak check at exit) or a pool that does not work.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Pools stay tiny: the decoder bounds dims, layers and slots so that no
 * accepted config allocates more than a few MiB (the size checks of the
 * library itself are fuzzed with huge dims whose product overflows, which
 * must be refused before anything is allocated).
 */
#include <rsp/rsp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t u8(input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

__attribute__((noreturn)) static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_config: %s (%s)\n", what, detail ? detail : "");
    abort();
}

#define CHECK(cond, what, detail)                                                                  \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail(what, detail);                                                                    \
    } while (0)

/* A dim: mostly small; now and then 0, negative or huge (must be refused,
 * or overflow-checked: huge dims are only ever paired with a refusal). */
static int64_t pick_dim(input *in, bool *huge)
{
    uint8_t b = u8(in);
    switch (b % 16) {
    case 0: return 0;
    case 1: return -1 - (b >> 4);
    case 2: *huge = true; return INT64_MAX;
    case 3: *huge = true; return (int64_t)1 << (32 + (b >> 4));
    case 4: return 2 + (b >> 4) * 2; /* even: shardable */
    default: return 1 + (b >> 4) % 6;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024)
        return -1;
    input in = {data, size};
    static char names[RSP_MAX_BLOCKS + 2][RSP_NAME_MAX + 8];
    rsp_block_config blocks[RSP_MAX_BLOCKS + 2];
    memset(blocks, 0, sizeof blocks);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    uint8_t a = u8(&in), b = u8(&in), c = u8(&in), d = u8(&in);
    cfg.num_layers = a % 16 == 15 ? UINT32_MAX : a % 4;       /* 0 is invalid */
    cfg.num_blocks = b % 8 == 7 ? RSP_MAX_BLOCKS + 1 : b % 4; /* 0 and 33 invalid */
    /* 0 and 1 are invalid with the sink, UINT32_MAX above INT32_MAX; 2^20
     * only pairs with huge dims (a total that overflows 64 bits). */
    cfg.max_slots = c % 32 == 31 ? UINT32_MAX : c % 32 == 30 ? 1u << 20 : c % 12;
    cfg.sink = !(c & 0x80);
    cfg.world_size = d % 8 == 7 ? 0 : 1 + d % 4;
    cfg.rank =
        (d >> 3) % 8 == 7 ? cfg.world_size : (d >> 3) % (cfg.world_size ? cfg.world_size : 1);
    uint8_t e = u8(&in);
    cfg.device = e % 8 == 7 ? RSP_DEVICE_CUDA : e % 8 == 6 ? (rsp_device_kind)5 : RSP_DEVICE_HOST;
    cfg.cuda_ordinal = (e >> 3) % 4 == 3 ? -1 : (e >> 3) % 4;
    uint8_t f = u8(&in);
    cfg.inbox_capacity = f % 8 == 7 ? UINT32_MAX : f % 8 == 6 ? 1 : (f % 4) * 16;
    cfg.max_inflight_steps = (f >> 3) % 8 == 7 ? 65 : (f >> 3) % 8 == 6 ? UINT32_MAX : (f >> 3) % 5;
    bool huge = false;
    bool null_blocks = (b & 0x80) && cfg.num_blocks;
    uint32_t nb = cfg.num_blocks <= RSP_MAX_BLOCKS ? cfg.num_blocks : RSP_MAX_BLOCKS + 1;
    for (uint32_t i = 0; i < nb; i++) {
        rsp_block_config *bl = &blocks[i];
        uint8_t g = u8(&in), h = u8(&in);
        switch (g % 8) {
        case 0: bl->name = NULL; break;
        case 1: bl->name = ""; break;
        case 2: /* RSP_NAME_MAX chars: one too many */
            memset(names[i], 'n', RSP_NAME_MAX);
            names[i][RSP_NAME_MAX] = 0;
            bl->name = names[i];
            break;
        case 3: bl->name = "dup"; break;
        default:
            snprintf(names[i], sizeof names[i], "b%u", i);
            bl->name = names[i];
            break;
        }
        bl->dtype = h % 16 == 15 ? RSP_DTYPE_COUNT_ : (rsp_dtype)(h % RSP_DTYPE_COUNT_);
        bl->ndim = g >> 3 == 31 ? RSP_MAX_DIMS + 1 : (g >> 3) % 4; /* 0 and 9 invalid */
        for (uint32_t k = 0; k < RSP_MAX_DIMS; k++)
            bl->shape[k] = k < bl->ndim ? pick_dim(&in, &huge) : 0;
        uint8_t s = u8(&in);
        bl->num_shard_dims = s % 8 == 7 ? RSP_MAX_DIMS + 1 : s % 3;
        for (uint32_t k = 0; k < RSP_MAX_DIMS; k++)
            bl->shard_dims[k] = (s >> 3) % 8 == 7   ? 100 /* out of range */
                                : (s >> 3) % 8 == 6 ? 0   /* repeated */
                                                    : ((s >> 3) + k) % (bl->ndim ? bl->ndim : 1);
    }
    cfg.blocks = null_blocks && (a & 0x80) ? NULL : blocks;

    /* Tiny pools only. rsp_shard_shapes gives the local shapes of a config it
     * accepts; from them the bytes the pool would allocate. A config whose size
     * overflows 64 bits must be refused (docs/semantics.md 1); a valid one
     * above 64 MiB is skipped (it would only test the machine's memory); one
     * rsp_shard_shapes refuses must be refused by create. */
    int64_t local[RSP_MAX_BLOCKS][RSP_MAX_DIMS];
    rsp_status shapes = rsp_shard_shapes(&cfg, local, NULL);
    bool overflow = false;
    if (shapes == RSP_OK) {
        unsigned __int128 total = 0;
        for (uint32_t i = 0; i < cfg.num_blocks; i++) {
            unsigned __int128 n = rsp_dtype_size(blocks[i].dtype);
            for (uint32_t k = 0; k < blocks[i].ndim && n; k++) {
                n *= (uint64_t)local[i][k];
                if (n >> 64)
                    overflow = true, n = (unsigned __int128)1 << 64;
            }
            total += n;
        }
        total *= (unsigned __int128)cfg.num_layers * cfg.max_slots;
        overflow |= (total >> 64) != 0;
        if (!overflow && total > (64u << 20))
            return 0;
    }
    (void)huge;

    rsp_pool *pool = (rsp_pool *)&cfg; /* must be set to NULL on failure */
    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK) {
        CHECK(st < RSP_STATUS_COUNT_, "unknown status", NULL);
        CHECK(err.status == st, "err.status differs from the returned status", err.message);
        CHECK(err.message[0] != 0, "an error without a message", rsp_strerror(st));
        CHECK(memchr(err.message, 0, sizeof err.message) != NULL, "message not terminated", NULL);
        CHECK(pool == NULL || pool == (rsp_pool *)&cfg, "failed create returned a pool", NULL);
        CHECK(cfg.device == RSP_DEVICE_CUDA || st != RSP_ENODEV, "ENODEV for a host pool",
              err.message);
        return 0;
    }
    CHECK(shapes == RSP_OK, "create accepted a config rsp_shard_shapes refuses", NULL);
    CHECK(!overflow, "a config whose size overflows 64 bits was accepted", NULL);
    rsp_pool_info info;
    CHECK(rsp_pool_info_get(pool, &info, &err) == RSP_OK, "info", err.message);
    CHECK(info.max_slots == cfg.max_slots && info.num_layers == cfg.num_layers &&
              info.num_blocks == cfg.num_blocks && info.sink == cfg.sink &&
              info.usable_slots == cfg.max_slots - (cfg.sink ? 1 : 0) &&
              info.total_bytes == info.slot_bytes * info.max_slots,
          "info disagrees with the config", NULL);
    uint64_t slot_bytes = 0;
    for (uint32_t i = 0; i < cfg.num_blocks; i++) {
        for (uint32_t l = 0; l < cfg.num_layers; l++) {
            rsp_block_view v;
            CHECK(rsp_pool_block(pool, blocks[i].name, l, &v, &err) == RSP_OK, "block view",
                  err.message);
            CHECK(v.ndim == blocks[i].ndim + 1 && v.shape[0] == cfg.max_slots &&
                      v.dtype == blocks[i].dtype,
                  "block view shape", blocks[i].name);
            uint64_t elems = 1;
            for (uint32_t k = 0; k < blocks[i].ndim; k++) {
                CHECK(v.shape[k + 1] == local[i][k], "view shape != shard_shapes", NULL);
                elems *= (uint64_t)local[i][k];
            }
            /* Every byte of a fresh pool is zero. */
            const unsigned char *p = v.data;
            size_t n = elems * rsp_dtype_size(v.dtype) * cfg.max_slots;
            for (size_t k = 0; k < n; k++)
                CHECK(p[k] == 0, "a fresh pool does not read zero", blocks[i].name);
            if (l == 0)
                slot_bytes += elems * rsp_dtype_size(v.dtype);
        }
        rsp_block_view v;
        CHECK(rsp_pool_block(pool, blocks[i].name, cfg.num_layers, &v, &err) == RSP_EINVAL,
              "layer out of range accepted", NULL);
    }
    CHECK(info.slot_bytes == slot_bytes * cfg.num_layers, "slot_bytes", NULL);
    CHECK(rsp_pool_block(pool, "no such block", 0, NULL, &err) == RSP_EINVAL, "unknown block",
          NULL);
    /* The pool works: a request takes a slot and gives it back. */
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step step = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    CHECK(rsp_step_admit(pool, &step, &out, &err) == RSP_OK, "admit", err.message);
    CHECK(out.ok == (info.usable_slots > 0), "admit outcome", NULL);
    CHECK(rsp_step_rollback(pool, 1, NULL, &err) == RSP_OK, "rollback", err.message);
    rsp_stats stats;
    CHECK(rsp_stats_snapshot(pool, &stats, &err) == RSP_OK, "stats", err.message);
    CHECK(stats.free_slots == info.usable_slots && stats.held_slots == 0, "not clean", NULL);
    rsp_pool_destroy(pool);
    return 0;
}
