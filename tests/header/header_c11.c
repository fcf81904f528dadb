/* The public header as strict C11 (-Wpedantic). SPDX-License-Identifier: Apache-2.0 */
#include <rsp/rsp.h>

_Static_assert(RSP_OK == 0, "RSP_OK is zero");
_Static_assert(sizeof(rsp_event) >= sizeof(void *) + sizeof(uint64_t), "rsp_event holds both");

/* One external definition so the translation unit is not empty. */
rsp_status rsp_header_c11_probe(void);
rsp_status rsp_header_c11_probe(void)
{
    return RSP_OK;
}
