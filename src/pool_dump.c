/*
 * RSP_MSG_DUMP: the pool's state as JSON, written by the owner in its turn
 * straight into the caller's buffer (rsp_pool_dump). The core writes its
 * part (rsp__core_dump); this file adds the pool's own fields and answers
 * the size. Owner thread.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include "util/error.h"
#include "util/sync.h"
#include "util/json.h"

rsp_status rsp__pool_on_dump(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    rsp__dump_args *args = (rsp__dump_args *)(uintptr_t)m->key;
    rsp__jw w = {.buf = args->buf, .size = args->size};
    rsp__jw_put(&w,
                "{\"pool\":{\"device\":\"%s\",\"num_layers\":%u,\"num_blocks\":%u,"
                "\"ordered\":%s,",
                p->device_kind == RSP_DEVICE_CUDA ? "cuda" : "host", p->layout->num_layers,
                p->layout->num_blocks, p->ordered ? "true" : "false");
    if (p->guard) {
        rsp__jw_put(&w, "\"guard\":{\"checks\":%llu,\"violations\":%llu}},",
                    (unsigned long long)rsp__load_relaxed_u64(&p->ctr.guard_checks),
                    (unsigned long long)rsp__load_relaxed_u64(&p->ctr.guard_violations));
    } else {
        rsp__jw_put(&w, "\"guard\":null},");
    }
    rsp__core_dump(p->core, &w);
    rsp__jw_put(&w, "}");
    args->needed = w.len + 1;
    if (w.len < args->size || !args->buf)
        return RSP_OK;
    args->buf[0] = '\0';
    return rsp__fail(&r->error, RSP_ECAPACITY,
                     "rsp_pool_dump: the buffer holds %zu bytes, the dump needs %zu", args->size,
                     w.len + 1);
}
