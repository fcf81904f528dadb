/*
 * rsp-replay: replay a pool's recording (rsp_pool_config.record_path) into
 * a fresh pool and check that every answer and every plan's digest is the
 * one recorded. Exit 0: all equal; 1: a divergence, the first one named
 * (message number, kind, field, recorded and replayed values); 2: the
 * file or the pool failed.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The fresh pool has the recording's config, unordered (the messages come
 * in the order the owner handled them, from this one thread), no
 * callbacks, no recording. Every message is posted and waited for in turn;
 * a forward_done the recording names (a handle of the recorded process)
 * becomes rsp_event_complete(), the forward being long done.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rsp/rsp.h>

#include "msg.h"
#include "pool.h"
#include "pool_record.h"

typedef struct recording {
    FILE *f;
    const char *path;
    rsp_pool_config cfg;
    rsp_block_config *blocks;
    rsp__record_block *raw;
} recording;

static int die(const char *path, const char *what)
{
    fprintf(stderr, "rsp-replay: %s: %s\n", path, what);
    return 2;
}

static int read_head(recording *r)
{
    rsp__record_head h;
    if (fread(&h, sizeof h, 1, r->f) != 1 || memcmp(h.magic, RSP__RECORD_MAGIC, 8) != 0)
        return die(r->path, "not an rsp recording");
    if (h.version != RSP__RECORD_VERSION || h.config_size != sizeof(rsp_pool_config) ||
        h.reply_size != sizeof(rsp_reply) || h.msg_size != sizeof(rsp_msg))
        return die(r->path, "recorded by another build of librsp (its struct sizes differ)");
    if (fread(&r->cfg, sizeof r->cfg, 1, r->f) != 1 || h.num_blocks > RSP_MAX_BLOCKS)
        return die(r->path, "the pool's config is cut short");
    r->raw = calloc(h.num_blocks + 1, sizeof *r->raw);
    r->blocks = calloc(h.num_blocks + 1, sizeof *r->blocks);
    if (!r->raw || !r->blocks)
        return die(r->path, "out of memory");
    if (h.num_blocks && fread(r->raw, sizeof *r->raw, h.num_blocks, r->f) != h.num_blocks)
        return die(r->path, "the blocks are cut short");
    for (uint32_t i = 0; i < h.num_blocks; i++) {
        r->raw[i].name[RSP_NAME_MAX - 1] = '\0';
        r->blocks[i] = r->raw[i].config;
        r->blocks[i].name = r->raw[i].name;
    }
    r->cfg.blocks = r->blocks;
    r->cfg.num_blocks = h.num_blocks;
    r->cfg.ordered = false;
    r->cfg.record_path = NULL;
    return 0;
}

/* The next record of `tag`: its bytes in *buf (grown as needed), its size
 * in *size. 1 at the clean end of the file, 2 on a cut or a wrong tag. */
static int read_record(recording *r, uint32_t tag, void **buf, size_t *cap, size_t *size)
{
    rsp__record_tag t;
    const size_t got = fread(&t, 1, sizeof t, r->f);
    if (got == 0 && tag == RSP__RECORD_MSG)
        return 1;
    if (got != sizeof t || t.tag != tag)
        return die(r->path, "a record is cut short or out of place");
    if (t.size > *cap) {
        void *n = realloc(*buf, t.size);
        if (!n)
            return die(r->path, "out of memory");
        *buf = n;
        *cap = t.size;
    }
    if (t.size && fread(*buf, 1, t.size, r->f) != t.size)
        return die(r->path, "a record is cut short");
    *size = t.size;
    return 0;
}

/* The first field on which the replayed answer differs from the recorded
 * one (NULL: none), and both values. */
typedef struct diff {
    const char *field;
    uint64_t want, got;
} diff;

static void check(diff *d, const char *f, uint64_t want, uint64_t got)
{
    if (!d->field && want != got)
        *d = (diff){f, want, got};
}

static void check_admit(diff *d, const rsp_admit_outcome *w, const rsp_admit_outcome *g)
{
    check(d, "admit.ok", w->ok, g->ok);
    check(d, "admit.rid", w->rid, g->rid);
    check(d, "admit.label", w->label, g->label);
    check(d, "admit.slots_short", w->slots_short, g->slots_short);
    check(d, "admit.free", w->free, g->free);
}

static diff compare(rsp_msg_kind k, const rsp_reply *w, const rsp_reply *g)
{
    diff d = {0};
    check(&d, "status", (uint64_t)w->error.status, (uint64_t)g->error.status);
    if (k == RSP_MSG_STEP)
        check(&d, "committed", w->committed, g->committed);
    if (d.field || w->error.status != RSP_OK)
        return d;
    if (k == RSP_MSG_ADMIT || k == RSP_MSG_SWAP_IN || k == RSP_MSG_STEP)
        check_admit(&d, &w->admit, &g->admit);
    if (k == RSP_MSG_STEP)
        check(&d, "planned", w->planned, g->planned);
    if (k == RSP_MSG_PLAN || (k == RSP_MSG_STEP && w->planned)) {
        check(&d, "plan_step_id", w->plan_step_id, g->plan_step_id);
        check(&d, "plan_staged", w->plan_staged, g->plan_staged);
        check(&d, "plan_digest", w->plan_digest, g->plan_digest);
    }
    if (k == RSP_MSG_LABEL)
        check(&d, "label", w->label, g->label);
    if (k == RSP_MSG_HOLDING) {
        check(&d, "holding.index", (uint32_t)w->holding.index, (uint32_t)g->holding.index);
        check(&d, "holding.has_state", w->holding.has_state, g->holding.has_state);
        check(&d, "holding.generation", w->holding.generation, g->holding.generation);
    }
    if (k == RSP_MSG_CHECKPOINT_QUERY) {
        check(&d, "checkpoint.tier", w->checkpoint.tier, g->checkpoint.tier);
        check(&d, "checkpoint.slot", (uint32_t)w->checkpoint.slot, (uint32_t)g->checkpoint.slot);
        check(&d, "checkpoint.pins", w->checkpoint.pins, g->checkpoint.pins);
    }
    return d;
}

/* Post the recorded message m to pool and wait for the answer. */
static rsp_status replay_one(rsp_pool *pool, rsp_msg m, rsp_reply *got, rsp_error *err)
{
    if (m.kind == RSP_MSG_COMMIT || m.kind == RSP_MSG_ROLLBACK ||
        (m.kind == RSP_MSG_STEP && m.commit))
        m.event = rsp_event_complete();
    rsp_ticket *t = NULL;
    rsp_status st = rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, err);
    if (st != RSP_OK)
        return st;
    memset(got, 0, sizeof *got);
    (void)rsp_wait(t, RSP_WAIT_FOREVER, got);
    return RSP_OK;
}

typedef struct totals {
    uint64_t messages, plans;
} totals;

/* Replay every message; 0, 1 (divergence) or 2. */
static int replay(recording *r, rsp_pool *pool, totals *n)
{
    void *wire = NULL, *want = NULL;
    size_t wcap = 0, rcap = 0, wsize = 0, rsize = 0;
    int rc = 0;
    while (rc == 0) {
        int x = read_record(r, RSP__RECORD_MSG, &wire, &wcap, &wsize);
        if (x == 1)
            break;
        if (x || (x = read_record(r, RSP__RECORD_REPLY, &want, &rcap, &rsize)) != 0 ||
            wsize < sizeof(rsp_msg) || rsize != sizeof(rsp_reply)) {
            rc = 2;
            break;
        }
        const rsp_msg m = *rsp__msg_decode(wire, wsize);
        n->messages++;
        if (m.kind == RSP_MSG_SHUTDOWN)
            continue; /* the fresh pool shuts down at the end */
        rsp_reply got;
        rsp_error err = {0};
        if (replay_one(pool, m, &got, &err) != RSP_OK) {
            printf("rsp-replay: message %" PRIu64 " (%s): refused at the post: %s\n", n->messages,
                   rsp__pool_kind_name(m.kind), err.message);
            rc = 1;
            break;
        }
        const diff d = compare(m.kind, (const rsp_reply *)want, &got);
        if (d.field) {
            printf("rsp-replay: message %" PRIu64 " (%s) diverged: %s recorded %" PRIu64
                   " (0x%" PRIx64 "), replayed %" PRIu64 " (0x%" PRIx64 ")\n",
                   n->messages, rsp__pool_kind_name(m.kind), d.field, d.want, d.want, d.got, d.got);
            rc = 1;
        }
        n->plans += (m.kind == RSP_MSG_PLAN || (m.kind == RSP_MSG_STEP && got.planned)) &&
                    got.error.status == RSP_OK;
    }
    free(wire);
    free(want);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: rsp-replay RECORDING\n"
                        "  replays a pool's recording (rsp_pool_config.record_path) into a\n"
                        "  fresh pool; exit 0 when every answer and plan digest is the same\n");
        return 2;
    }
    recording r = {.path = argv[1]};
    r.f = fopen(r.path, "rb");
    if (!r.f)
        return die(r.path, "cannot open");
    int rc = read_head(&r);
    rsp_pool *pool = NULL;
    if (rc == 0) {
        rsp_error err = {0};
        if (rsp_pool_create(&r.cfg, &pool, &err) != RSP_OK)
            rc = die(r.path, err.message);
    }
    totals n = {0};
    if (rc == 0)
        rc = replay(&r, pool, &n);
    if (rc == 0)
        printf("rsp-replay: %s: %" PRIu64 " messages, %" PRIu64
               " plans: every answer and digest the same\n",
               r.path, n.messages, n.plans);
    if (pool)
        rsp_pool_destroy(pool);
    fclose(r.f);
    free(r.raw);
    free(r.blocks);
    return rc;
}
