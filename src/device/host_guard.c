/*
 * Guard mode on the host device: the checksums of request slots, computed
 * on the owner thread straight from the storage (device.c synced first,
 * so the worker has run everything submitted and is idle).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "host_impl.h"

rsp_status rsp__host_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                              rsp_error *err)
{
    (void)err;
    const rsp__layout *lay = dev->layout;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t b = 0; b < lay->num_blocks; b++)
            for (uint32_t l = 0; l < lay->num_layers; l++)
                out[((uint64_t)i * lay->num_blocks + b) * lay->num_layers + l] = rsp__sum_bytes(
                    rsp__device_region(dev, b, l, slots[i]), lay->blocks[b].slot_bytes);
    return RSP_OK;
}
