/*
 * Recording every message the owner handles, with its reply, to a file
 * (pool_record.h says the form), for rsp-replay.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool_record.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

struct rsp__record {
    FILE *f;
    bool failed; /* a write failed: nothing more is written */
};

static bool put(rsp__record *r, const void *p, size_t n)
{
    if (r->failed)
        return false;
    if (n && fwrite(p, 1, n, r->f) != n) {
        r->failed = true;
        fprintf(stderr, "rsp: recording stopped: a write failed (%s)\n", strerror(errno));
        return false;
    }
    return true;
}

static bool put_head(rsp__record *r, const rsp_pool_config *cfg)
{
    rsp__record_head h = {.version = RSP__RECORD_VERSION,
                          .config_size = (uint32_t)sizeof(rsp_pool_config),
                          .reply_size = (uint32_t)sizeof(rsp_reply),
                          .msg_size = (uint32_t)sizeof(rsp_msg),
                          .num_blocks = cfg->num_blocks};
    memcpy(h.magic, RSP__RECORD_MAGIC, sizeof h.magic);
    rsp_pool_config c = *cfg; /* what replays it: no pointer means anything there */
    c.blocks = NULL;
    c.on_error = NULL;
    c.on_error_ctx = NULL;
    c.on_checkpoint_evict = NULL;
    c.on_checkpoint_evict_ctx = NULL;
    c.record_path = NULL;
    if (!put(r, &h, sizeof h) || !put(r, &c, sizeof c))
        return false;
    for (uint32_t i = 0; i < cfg->num_blocks; i++) {
        rsp__record_block b;
        memset(&b, 0, sizeof b);
        b.config = cfg->blocks[i];
        b.config.name = NULL;
        snprintf(b.name, sizeof b.name, "%s", cfg->blocks[i].name);
        if (!put(r, &b, sizeof b))
            return false;
    }
    return true;
}

rsp_status rsp__record_open(const char *path, const rsp_pool_config *cfg, rsp__record **out,
                            rsp_error *err)
{
    rsp__record *r = calloc(1, sizeof *r);
    if (!r)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the recording");
    r->f = fopen(path, "wb");
    if (!r->f) {
        const int e = errno;
        free(r);
        return rsp__fail(err, RSP_EINVAL, "record_path \"%.100s\": %s", path, strerror(e));
    }
    if (!put_head(r, cfg) || fflush(r->f) != 0) {
        fclose(r->f);
        free(r);
        return rsp__fail(err, RSP_EINVAL, "record_path \"%.100s\": the head cannot be written",
                         path);
    }
    *out = r;
    return RSP_OK;
}

void rsp__record_msg(rsp__record *r, const void *wire, size_t size)
{
    const rsp__record_tag t = {RSP__RECORD_MSG, (uint32_t)size};
    if (put(r, &t, sizeof t))
        (void)put(r, wire, size);
}

void rsp__record_reply(rsp__record *r, const rsp_reply *reply)
{
    const rsp__record_tag t = {RSP__RECORD_REPLY, (uint32_t)sizeof *reply};
    if (put(r, &t, sizeof t))
        (void)put(r, reply, sizeof *reply);
}

void rsp__record_flush(rsp__record *r)
{
    if (!r->failed && fflush(r->f) != 0) {
        r->failed = true;
        fprintf(stderr, "rsp: recording stopped: a write failed (%s)\n", strerror(errno));
    }
}

void rsp__record_close(rsp__record *r)
{
    if (!r)
        return;
    rsp__record_flush(r);
    fclose(r->f);
    free(r);
}
