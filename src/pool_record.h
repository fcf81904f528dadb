/*
 * Recording what the owner handles (pool_record.c), and the file's form,
 * which rsp-replay (tools/) reads back.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The file, in this host's byte order and this library's struct layouts
 * (a recording is replayed by the same build):
 *
 *   rsp__record_head                 magic, version, sizes, num_blocks
 *   rsp_pool_config                  as created; pointers and callbacks zeroed
 *   rsp__record_block[num_blocks]    each block's config and its name
 *   then per message the owner handled, in the order it handled them:
 *     rsp__record_tag{'M', size}     + the message's wire form (msg.h)
 *     rsp__record_tag{'R', size}     + its rsp_reply
 *
 * A message is written before it is handled and its reply after, so a
 * crash inside the handler leaves the message that caused it last.
 */
#ifndef RSP_POOL_RECORD_H
#define RSP_POOL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <rsp/rsp.h>

#define RSP__RECORD_MAGIC "RSPREC1\n"
#define RSP__RECORD_VERSION 1u
#define RSP__RECORD_MSG 0x4du   /* 'M' */
#define RSP__RECORD_REPLY 0x52u /* 'R' */

typedef struct rsp__record_head {
    char magic[8];
    uint32_t version;
    uint32_t config_size; /* sizeof(rsp_pool_config) */
    uint32_t reply_size;  /* sizeof(rsp_reply) */
    uint32_t msg_size;    /* sizeof(rsp_msg) */
    uint32_t num_blocks;
    uint32_t pad;
} rsp__record_head;

typedef struct rsp__record_block {
    rsp_block_config config; /* name zeroed */
    char name[RSP_NAME_MAX];
} rsp__record_block;

typedef struct rsp__record_tag {
    uint32_t tag;  /* RSP__RECORD_MSG or RSP__RECORD_REPLY */
    uint32_t size; /* the bytes that follow */
} rsp__record_tag;

typedef struct rsp__record rsp__record;

/* Create path (truncating it) and write the head for cfg (the pool's
 * imported config). Fails with the file's error, nothing left. Any
 * thread (pool creation). */
rsp_status rsp__record_open(const char *path, const rsp_pool_config *cfg, rsp__record **out,
                            rsp_error *err);
/* A message about to be handled (its wire form) and then its reply. A
 * write that fails stops the recording for good, said once on stderr: the
 * pool goes on. Owner, or the thread in its role (one at a time). */
void rsp__record_msg(rsp__record *r, const void *wire, size_t size);
void rsp__record_reply(rsp__record *r, const rsp_reply *reply);
/* Hand what is buffered to the file (the owner going idle). Owner. */
void rsp__record_flush(rsp__record *r);
/* Flush and close; NULL is fine. After the owner stopped. */
void rsp__record_close(rsp__record *r);

#endif
