// The public header as C++17: it must compile warning-free and its types
// must be usable from C++ (no C-only constructs, extern "C" linkage).
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.h>

#include <type_traits>

static_assert(std::is_standard_layout<rsp_step>::value, "rsp_step is plain data");
static_assert(std::is_trivially_copyable<rsp_msg>::value, "rsp_msg is plain data");
static_assert(std::is_trivially_copyable<rsp_addressing>::value, "rsp_addressing is plain data");
static_assert(RSP_OK == 0, "RSP_OK is zero");

// Taking addresses checks that the declarations have C linkage types.
using create_fn = rsp_status (*)(const rsp_pool_config *, rsp_pool **, rsp_error *);
[[maybe_unused]] static create_fn rsp_header_probe_create = &rsp_pool_create;
[[maybe_unused]] static void (*rsp_header_probe_signal)(rsp_host_fence *,
                                                        uint64_t) = &rsp_host_fence_signal;
