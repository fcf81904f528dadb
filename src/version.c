/*
 * The library's version (rsp.h "Version"): the RSP_VERSION_* macros of the
 * header this file is compiled with, so the numbers a program reads at run
 * time are those of the library it loaded.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <rsp/rsp.h>

#include "util/error.h"

#define RSP__STR_(x) #x
#define RSP__STR(x) RSP__STR_(x)

uint32_t rsp_version(void)
{
    return RSP_VERSION;
}

uint32_t rsp_version_major(void)
{
    return RSP_VERSION_MAJOR;
}

uint32_t rsp_version_minor(void)
{
    return RSP_VERSION_MINOR;
}

uint32_t rsp_version_patch(void)
{
    return RSP_VERSION_PATCH;
}

const char *rsp_version_string(void)
{
    return RSP__STR(RSP_VERSION_MAJOR) "." RSP__STR(RSP_VERSION_MINOR) "." RSP__STR(
        RSP_VERSION_PATCH);
}

rsp_status rsp_version_check(uint32_t major, uint32_t minor, rsp_error *err)
{
    /* Within one major, a newer minor only adds (docs/abi.md), so an older
     * caller is served; a newer caller may use what this library lacks. */
    if (major == RSP_VERSION_MAJOR && minor <= RSP_VERSION_MINOR)
        return RSP_OK;
    return rsp__fail(err, RSP_EINVAL,
                     "rsp: this program was built against rsp %u.%u but loaded librsp %s; it "
                     "needs librsp %u.x with x >= %u (rebuild it, or load a matching librsp)",
                     (unsigned)major, (unsigned)minor, rsp_version_string(), (unsigned)major,
                     (unsigned)minor);
}
