/*
 * Internal: filling an rsp_error.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_UTIL_ERROR_H
#define RSP_UTIL_ERROR_H

#include <rsp/rsp.h>

/* Set err (if not NULL) to status and a printf-formatted message; return status. */
rsp_status rsp__fail(rsp_error *err, rsp_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
