/* SPDX-License-Identifier: Apache-2.0 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "assert.h"

#ifdef RSP_DEBUG_ASSERTS
void rsp__assert_fail(const char *cond, const char *file, int line, const char *func)
{
    fprintf(stderr, "rsp: internal invariant violated: %s (%s:%d, %s)\n", cond, file, line, func);
    abort();
}
#endif

rsp_status rsp__fail(rsp_error *err, rsp_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

const char *rsp_strerror(rsp_status status)
{
    switch (status) {
    case RSP_OK: return "RSP_OK: success";
    case RSP_EINVAL: return "RSP_EINVAL: invalid argument";
    case RSP_ENOLABEL: return "RSP_ENOLABEL: unknown label";
    case RSP_EDUPROW: return "RSP_EDUPROW: duplicate (rid, label) row";
    case RSP_EORDER: return "RSP_EORDER: step out of order";
    case RSP_ESTAGED: return "RSP_ESTAGED: a stage already exists";
    case RSP_ENOREQ: return "RSP_ENOREQ: no such request";
    case RSP_ENOPLAN: return "RSP_ENOPLAN: label not planned";
    case RSP_ECAPACITY: return "RSP_ECAPACITY: capacity exceeded";
    case RSP_ESHUTDOWN: return "RSP_ESHUTDOWN: pool shut down";
    case RSP_EFULL: return "RSP_EFULL: inbox full";
    case RSP_EAGAIN: return "RSP_EAGAIN: not ready";
    case RSP_ETIMEDOUT: return "RSP_ETIMEDOUT: timed out";
    case RSP_ENOMEM: return "RSP_ENOMEM: out of memory";
    case RSP_EDEVICE: return "RSP_EDEVICE: device error";
    case RSP_ENODEV: return "RSP_ENODEV: no such device";
    case RSP_ENOTREG: return "RSP_ENOTREG: reader thread not registered";
    case RSP_EFORKED: return "RSP_EFORKED: called in a forked child";
    case RSP_ENOKEY: return "RSP_ENOKEY: no checkpoint under that key";
    case RSP_EPINNED: return "RSP_EPINNED: checkpoint pinned";
    case RSP_STATUS_COUNT_: break;
    }
    return "unknown rsp_status";
}
