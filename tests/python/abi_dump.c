/*
 * Prints, for every struct python/rsp/_ffi.py mirrors, its size and the
 * offset of each field in declaration order, as one JSON object
 * ({"rsp_row": [24, [0, 8, 12, 16, 17, 18]], ...}). tests/python/test_abi.py
 * compares them with ctypes' layout of the mirror.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stddef.h>
#include <stdio.h>

#include <rsp/rsp.h>

static int first_struct = 1;
static int first_field;

static void begin(const char *name, size_t size)
{
    printf("%s\"%s\": [%zu, [", first_struct ? "{" : ", ", name, size);
    first_struct = 0;
    first_field = 1;
}

static void field(size_t offset)
{
    printf("%s%zu", first_field ? "" : ", ", offset);
    first_field = 0;
}

static void end(void)
{
    printf("]]");
}

#define S(T) begin(#T, sizeof(T))
#define F(T, f) field(offsetof(T, f))

int main(void)
{
    S(rsp_error), F(rsp_error, status), F(rsp_error, message), end();
    S(rsp_block_config), F(rsp_block_config, name), F(rsp_block_config, dtype),
        F(rsp_block_config, ndim), F(rsp_block_config, shape), F(rsp_block_config, num_shard_dims),
        F(rsp_block_config, shard_dims), end();
    S(rsp_pool_config), F(rsp_pool_config, struct_size), F(rsp_pool_config, num_layers),
        F(rsp_pool_config, blocks), F(rsp_pool_config, num_blocks), F(rsp_pool_config, max_slots),
        F(rsp_pool_config, sink), F(rsp_pool_config, world_size), F(rsp_pool_config, rank),
        F(rsp_pool_config, device), F(rsp_pool_config, cuda_ordinal),
        F(rsp_pool_config, inbox_capacity), F(rsp_pool_config, max_inflight_steps),
        F(rsp_pool_config, ordered), F(rsp_pool_config, reorder_timeout_ns),
        F(rsp_pool_config, on_error), F(rsp_pool_config, on_error_ctx),
        F(rsp_pool_config, owner_cpu), F(rsp_pool_config, max_checkpoints),
        F(rsp_pool_config, max_host_checkpoints), F(rsp_pool_config, checkpoint_demote),
        F(rsp_pool_config, on_checkpoint_evict), F(rsp_pool_config, on_checkpoint_evict_ctx),
        F(rsp_pool_config, record_path), F(rsp_pool_config, checkpoint_policy),
        F(rsp_pool_config, checkpoint_value_weight), F(rsp_pool_config, guard), end();
    S(rsp_pool_info), F(rsp_pool_info, num_layers), F(rsp_pool_info, num_blocks),
        F(rsp_pool_info, max_slots), F(rsp_pool_info, usable_slots), F(rsp_pool_info, sink),
        F(rsp_pool_info, pad_index), F(rsp_pool_info, slot_bytes), F(rsp_pool_info, total_bytes),
        F(rsp_pool_info, device), F(rsp_pool_info, owner_cpu), end();
    S(rsp_block_view), F(rsp_block_view, data), F(rsp_block_view, dtype), F(rsp_block_view, ndim),
        F(rsp_block_view, shape), F(rsp_block_view, strides), end();
    S(rsp_row), F(rsp_row, rid), F(rsp_row, label), F(rsp_row, span), F(rsp_row, padding),
        F(rsp_row, skip_post_forks), F(rsp_row, fork_group), F(rsp_row, per_token_states),
        F(rsp_row, resv_), F(rsp_row, accepted), end();
    S(rsp_fork), F(rsp_fork, from), F(rsp_fork, to), F(rsp_fork, group), end();
    S(rsp_lease), F(rsp_lease, bucket_bs), F(rsp_lease, bucket_id), F(rsp_lease, lease_slot), end();
    S(rsp_checkpoint_decl), F(rsp_checkpoint_decl, rid), F(rsp_checkpoint_decl, label),
        F(rsp_checkpoint_decl, tier), F(rsp_checkpoint_decl, key), end();
    S(rsp_restore), F(rsp_restore, rid), F(rsp_restore, label), F(rsp_restore, key), end();
    S(rsp_step), F(rsp_step, step_id), F(rsp_step, rows), F(rsp_step, num_rows),
        F(rsp_step, pre_forks), F(rsp_step, num_pre_forks), F(rsp_step, post_forks),
        F(rsp_step, num_post_forks), F(rsp_step, capture), F(rsp_step, preplan),
        F(rsp_step, has_lease), F(rsp_step, lease), F(rsp_step, checkpoints),
        F(rsp_step, num_checkpoints), F(rsp_step, restores), F(rsp_step, num_restores), end();
    S(rsp_admit_outcome), F(rsp_admit_outcome, ok), F(rsp_admit_outcome, rid),
        F(rsp_admit_outcome, label), F(rsp_admit_outcome, slots_short),
        F(rsp_admit_outcome, usable), F(rsp_admit_outcome, free), end();
    S(rsp_holding), F(rsp_holding, index), F(rsp_holding, has_state), F(rsp_holding, generation),
        end();
    S(rsp_event), F(rsp_event, kind), F(rsp_event, handle), F(rsp_event, value), end();
    S(rsp_stats), F(rsp_stats, max_slots), F(rsp_stats, usable_slots), F(rsp_stats, free_slots),
        F(rsp_stats, held_slots), F(rsp_stats, pending_release), F(rsp_stats, num_requests),
        F(rsp_stats, num_holdings), F(rsp_stats, inbox_depth), F(rsp_stats, messages_handled),
        F(rsp_stats, admits_ok), F(rsp_stats, admits_refused), F(rsp_stats, rollbacks),
        F(rsp_stats, plans), F(rsp_stats, stages), F(rsp_stats, promotions), F(rsp_stats, commits),
        F(rsp_stats, forks), F(rsp_stats, bytes_zeroed), F(rsp_stats, bytes_copied),
        F(rsp_stats, generation), F(rsp_stats, posts_failed), F(rsp_stats, forward_waits),
        F(rsp_stats, checkpoints_device), F(rsp_stats, checkpoints_host),
        F(rsp_stats, swapped_slots), F(rsp_stats, checkpoints_taken),
        F(rsp_stats, checkpoints_restored), F(rsp_stats, checkpoints_evicted),
        F(rsp_stats, checkpoints_demoted), F(rsp_stats, checkpoints_dropped),
        F(rsp_stats, checkpoints_skipped), F(rsp_stats, swaps_out), F(rsp_stats, swaps_in),
        F(rsp_stats, checkpoint_hits_device), F(rsp_stats, checkpoint_hits_host),
        F(rsp_stats, checkpoint_misses), F(rsp_stats, checkpoints_evicted_device),
        F(rsp_stats, checkpoints_evicted_host), F(rsp_stats, checkpoint_bytes_restored),
        F(rsp_stats, checkpoint_value_restored), F(rsp_stats, guard_checks),
        F(rsp_stats, guard_violations), end();
    S(rsp_addressing), F(rsp_addressing, label), F(rsp_addressing, step_id),
        F(rsp_addressing, staged), F(rsp_addressing, num_rows), F(rsp_addressing, length),
        F(rsp_addressing, slot_indices), F(rsp_addressing, has_state),
        F(rsp_addressing, generations), F(rsp_addressing, device_slot_indices),
        F(rsp_addressing, device_has_state), F(rsp_addressing, ready), end();
    S(rsp_spec_indices), F(rsp_spec_indices, label), F(rsp_spec_indices, step_id),
        F(rsp_spec_indices, num_rows), F(rsp_spec_indices, length), F(rsp_spec_indices, width),
        F(rsp_spec_indices, indices), F(rsp_spec_indices, device_indices),
        F(rsp_spec_indices, ready), end();
    S(rsp_step_outcome), F(rsp_step_outcome, committed), F(rsp_step_outcome, admit),
        F(rsp_step_outcome, planned), F(rsp_step_outcome, plan_step_id),
        F(rsp_step_outcome, plan_staged), F(rsp_step_outcome, plan_digest), end();
    S(rsp_checkpoint_event), F(rsp_checkpoint_event, key), F(rsp_checkpoint_event, tier),
        F(rsp_checkpoint_event, demoted), end();
    S(rsp_failure), F(rsp_failure, status), F(rsp_failure, kind), F(rsp_failure, step_id),
        F(rsp_failure, has_step), F(rsp_failure, message), F(rsp_failure, checkpoint_key),
        F(rsp_failure, has_checkpoint_key), F(rsp_failure, guard), end();
    S(rsp_guard_violation), F(rsp_guard_violation, slot), F(rsp_guard_violation, held),
        F(rsp_guard_violation, rid), F(rsp_guard_violation, label), F(rsp_guard_violation, step_id),
        F(rsp_guard_violation, block), F(rsp_guard_violation, layer),
        F(rsp_guard_violation, regions), end();
    S(rsp_checkpoint_info), F(rsp_checkpoint_info, key), F(rsp_checkpoint_info, tier),
        F(rsp_checkpoint_info, slot), F(rsp_checkpoint_info, bytes), F(rsp_checkpoint_info, pins),
        F(rsp_checkpoint_info, user_pins), F(rsp_checkpoint_info, last_use), end();
    S(rsp_checkpoint_loc), F(rsp_checkpoint_loc, key), F(rsp_checkpoint_loc, tier),
        F(rsp_checkpoint_loc, slot), end();
    S(rsp_msg), F(rsp_msg, kind), F(rsp_msg, rid), F(rsp_msg, label), F(rsp_msg, free),
        F(rsp_msg, label_name), F(rsp_msg, step), F(rsp_msg, event), F(rsp_msg, max_bs),
        F(rsp_msg, max_seq_len), F(rsp_msg, seq), F(rsp_msg, rids), F(rsp_msg, num_rids),
        F(rsp_msg, commit), F(rsp_msg, key), F(rsp_msg, tier), F(rsp_msg, after_step),
        F(rsp_msg, pin), end(); /* after_step: the union with value (_ffi: _u) */
    S(rsp_reply), F(rsp_reply, error), F(rsp_reply, admit), F(rsp_reply, plan_step_id),
        F(rsp_reply, plan_staged), F(rsp_reply, plan_digest), F(rsp_reply, committed),
        F(rsp_reply, planned), F(rsp_reply, label), F(rsp_reply, holding), F(rsp_reply, stats),
        F(rsp_reply, checkpoint), end();
    S(rsp_close_report), F(rsp_close_report, closed), F(rsp_close_report, forward_waits),
        F(rsp_close_report, num_steps), F(rsp_close_report, step_ids), end();
    S(rsp_region), F(rsp_region, base), F(rsp_region, length), F(rsp_region, memory),
        F(rsp_region, block), F(rsp_region, space), end();
    S(rsp_extent), F(rsp_extent, region), F(rsp_extent, reserved), F(rsp_extent, offset),
        F(rsp_extent, length), end();
    S(rsp_xfer_block), F(rsp_xfer_block, name), F(rsp_xfer_block, dtype), F(rsp_xfer_block, ndim),
        F(rsp_xfer_block, shape), F(rsp_xfer_block, shard_mask), F(rsp_xfer_block, reserved), end();
    S(rsp_xfer_holding), F(rsp_xfer_holding, label), F(rsp_xfer_holding, generation),
        F(rsp_xfer_holding, has_state), end();
    S(rsp_xfer_header), F(rsp_xfer_header, format), F(rsp_xfer_header, what),
        F(rsp_xfer_header, fingerprint), F(rsp_xfer_header, world_size), F(rsp_xfer_header, rank),
        F(rsp_xfer_header, target_world_size), F(rsp_xfer_header, target_rank),
        F(rsp_xfer_header, rid), F(rsp_xfer_header, key), F(rsp_xfer_header, tag),
        F(rsp_xfer_header, num_layers), F(rsp_xfer_header, num_blocks), F(rsp_xfer_header, blocks),
        F(rsp_xfer_header, num_holdings), F(rsp_xfer_header, holdings), end();
    S(rsp_export_spec), F(rsp_export_spec, struct_size), F(rsp_export_spec, what),
        F(rsp_export_spec, rid), F(rsp_export_spec, labels), F(rsp_export_spec, key),
        F(rsp_export_spec, tag), F(rsp_export_spec, target_world_size),
        F(rsp_export_spec, target_rank), F(rsp_export_spec, timeout_ns), end();
    printf("}\n");
    return 0;
}
