#!/usr/bin/env python3
"""Write the seed corpus of tests/fuzz (docs/testing.md "Fuzzing").

Each fuzz_api seed is a short scenario in the decoder's language (see
LLVMFuzzerTestOneInput in fuzz_api.c: op, a, b, then the op's own bytes),
one per operation kind and one per branch an outside harness never reached
(leased-buffer conflicts, a live plan taking over a pending zero, ...).
fuzz_config seeds are a few valid and invalid configurations.
Run it after changing the decoder: python3 tests/fuzz/gen_seeds.py
SPDX-License-Identifier: Apache-2.0
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Ops (op byte % 24).
ADMIT, ADMIT_SAME, PLAN, COMMIT, ROLLBACK = 0, 2, 3, 5, 7
INGEST, REMOVE, RESET, CLEAR, LABEL, GRAPH, RAW, BATCH, SIGNAL, CHECKMEM = (
    8, 9, 10, 11, 12, 13, 14, 16, 17, 18)
STRAY, FENCE_DROP, SHUTDOWN, PLAN_FWD = 19, 20, 21, 22

MAIN, DRAFT, BEAM1, BEAM2 = 0, 1, 2, 3
UNKNOWN_LABEL = 12  # pick_label: the first id not interned


def span_code(span):
    return {0: 0, -1: 1, 'min': 2}.get(span, span + 2 if isinstance(span, int) else 0)


def row(rid, label, span=1, padding=False, group=0, skip=False):
    """rid: index into g_rids (0..5); label: pick_label code; span: 0, -1,
    'min' or 1..5; group: fork_group 0 or 1; skip: skip_post_forks."""
    sc = span_code(span)
    a = next(x for x in range(256) if x % 6 == rid and (x >> 3) % 8 == sc)
    b = label | (0x30 if padding else 0) | (0x40 if group else 0) | (0x80 if skip else 0)
    return bytes([a, b])


def fork(frm, to):
    return bytes([frm | (to << 4)])


def decl(rows, pre=(), post=(), capture=False, preplan=False, lease=None, null_arrays=0,
         grouped=False):
    """lease: (bucket_bs code 0..3 -> 1, 4, 8, 0; bucket 0/1; lease slot 0/1).
    grouped: per-rid forks, each fork of group (from ^ to) % 3; needs
    exactly one post-fork (the decoder's f >> 5 == 7)."""
    n = len(rows)
    assert not grouped or len(post) == 1
    f = min(n, 7) | (len(pre) << 3) | ((7 if grouped else len(post)) << 5)
    g = (7 if capture else 0) | (8 if preplan else 0) | (16 if lease else 0)
    out = bytes([f])
    if n >= 7:
        out += bytes([n - 7])  # 7..12 rows
    if null_arrays:
        g |= 0xE0
        out += bytes([g, null_arrays - 1])
    else:
        out += bytes([g])
    for r in rows:
        out += r
    for x in pre:
        out += x
    for x in post:
        out += x
    if lease:
        bs, bucket, slot = lease
        out += bytes([bs | (bucket << 2) | (slot << 3)])
    return out


def admit(entry, d, new_id=True):
    """A fresh declaration for entry (0..3); new_id: a new step id."""
    # b & 1: fresh declaration; idsel = b >> 1, new id when idsel % 4 == 0.
    b = 1 | (0 if new_id else 2)
    return bytes([ADMIT, entry, b]) + d


def readmit(entry, idsel=1):
    return bytes([ADMIT_SAME, entry, idsel])


def plan(entry, toggle_preplan=False, forward=False, new_decl=None, flip_span=False):
    how = (1 if toggle_preplan else 0) | (8 if forward else 0)
    if new_decl is not None:
        return bytes([PLAN, entry, how | 6]) + new_decl
    if flip_span:
        how |= 2
    return bytes([PLAN, entry, how])


EV_NONE, EV_NULL, EV_DONE, EV_LATER, EV_DEVICE = 0, 1, 2, 3, 5


def commit(entry, ev=EV_DONE, new_decl=None):
    how = ev << 1
    if new_decl is not None:
        return bytes([COMMIT, entry, how | 0x30]) + new_decl
    return bytes([COMMIT, entry, how])


def rollback(entry, ev=EV_NONE, unknown=False):
    return bytes([ROLLBACK, entry, (ev << 3) | (0x80 if unknown else 0)])


def op(code, a=0, b=0):
    return bytes([code, a, b])


def release(rid, label):
    """rsp_release of (rid index, pick_label code): op 21 with a % 8 == 1."""
    return op(SHUTDOWN, 1, label * 6 + rid)


def rid_list(kind, rids, free=False):
    """The vector forms: kind 0 ingest, 1 remove, 2 reset (free or
    keep) of the listed rid indices in one message: op 21 with a % 8 == 2."""
    a = next(x for x in range(256)
             if x % 8 == 2 and (x >> 3) % 3 == kind and bool(x & 0x80) == free)
    return op(SHUTDOWN, a, len(rids) - 1) + bytes(rids)


def seeds_api():
    s = {}
    r0 = row(0, MAIN)
    r1 = row(1, MAIN)
    s['step_cycle'] = admit(0, decl([r0, r1])) + plan(0, forward=True) + commit(0) + \
        admit(0, decl([r0, r1])) + plan(0, forward=True) + commit(0, EV_LATER) + op(SIGNAL, 0, 1) + \
        op(CHECKMEM)
    s['rollback'] = admit(0, decl([r0, row(2, DRAFT, 3)])) + plan(0, forward=True) + \
        rollback(0, EV_DONE) + op(CHECKMEM)
    s['forks'] = admit(0, decl([r0], pre=[fork(MAIN, DRAFT)], post=[fork(MAIN, BEAM1)])) + \
        plan(0, forward=True) + commit(0) + \
        admit(0, decl([r0], pre=[fork(MAIN, DRAFT), fork(DRAFT, BEAM2)], post=[fork(BEAM1, BEAM1)])) + \
        plan(0) + commit(0) + op(CHECKMEM)
    s['preplan_promote'] = admit(0, decl([r0, r1], preplan=True)) + plan(0) + \
        plan(0, toggle_preplan=True, forward=True) + commit(0)
    s['preplan_differs'] = admit(0, decl([r0, r1], pre=[fork(MAIN, DRAFT)], preplan=True)) + plan(0) + \
        plan(0, toggle_preplan=True, flip_span=True) + commit(0)
    s['preplan_twice'] = admit(0, decl([r0], preplan=True)) + admit(1, decl([r1], preplan=True)) + \
        plan(0) + plan(1) + op(CLEAR) + plan(1) + rollback(1)
    lease = (1, 0, 0)
    s['lease_conflict'] = admit(0, decl([r0], lease=lease)) + admit(1, decl([r1], lease=lease)) + \
        plan(0, forward=True) + plan(1) + commit(0) + plan(1) + commit(1)
    s['lease_takes_stage'] = admit(0, decl([r0], lease=lease, preplan=True)) + plan(0) + \
        admit(1, decl([r1], lease=lease)) + plan(1, forward=True) + plan(0) + commit(1) + \
        plan(0, toggle_preplan=True) + commit(0)
    s['lease_too_small'] = admit(0, decl([r0], lease=(0, 1, 1))) + plan(0) + commit(0) + \
        admit(0, decl([r0, row(1, MAIN), row(2, MAIN)], lease=(0, 1, 1))) + plan(0) + rollback(0)
    s['lease_graph_bs'] = op(GRAPH, 5, 0) + admit(0, decl([r0], lease=(2, 0, 1))) + \
        plan(0, forward=True) + commit(0)
    s['pending_zero_takeover'] = admit(0, decl([r0])) + plan(0, forward=True) + \
        op(RESET, 0, 0) + admit(1, decl([r0])) + plan(1, forward=True) + commit(0) + commit(1) + \
        op(CHECKMEM)
    s['pending_zero_rollback'] = admit(0, decl([r0])) + plan(0, forward=True) + \
        op(RESET, 0, 0) + admit(1, decl([r0])) + plan(1, forward=True) + rollback(1) + commit(0) + \
        op(CHECKMEM)
    s['remove_in_flight'] = admit(0, decl([r0, r1])) + plan(0, forward=True) + op(REMOVE, 0, 0) + \
        op(RESET, 0, 0x81) + commit(0, EV_LATER) + op(CHECKMEM)
    s['capture'] = admit(0, decl([r0, row(1, MAIN, padding=True)], capture=True)) + commit(0) + \
        admit(0, decl([r0], capture=True, lease=lease)) + plan(0) + commit(0)
    s['capture_preplan'] = admit(0, decl([r0], capture=True, preplan=True)) + plan(0) + commit(0) + \
        admit(1, decl([r1], lease=lease)) + plan(1) + admit(2, decl([row(2, MAIN)], lease=lease)) + \
        plan(2)
    s['pool_full'] = admit(0, decl([row(i, MAIN) for i in range(6)])) + \
        admit(1, decl([row(i, DRAFT) for i in range(6)]))
    s['too_many_steps'] = b''.join(admit(e, decl([row(e, MAIN)])) for e in range(4))
    s['order_errors'] = plan(0) + admit(0, decl([r0])) + commit(0) + plan(0) + plan(0) + \
        commit(0) + readmit(0, 30) + commit(0) + readmit(0, 1)
    s['bad_steps'] = admit(0, decl([r0, r0])) + admit(0, decl([row(0, UNKNOWN_LABEL)])) + \
        admit(0, decl([r0], null_arrays=1)) + admit(0, decl([r0], pre=[fork(MAIN, DRAFT)], null_arrays=2)) + \
        admit(0, decl([r0], post=[fork(MAIN, UNKNOWN_LABEL)])) + admit(0, decl([r0], lease=(3, 0, 0))) + \
        admit(0, decl([row(0, MAIN, 0), row(0, MAIN, -1), row(0, MAIN, 'min'), row(0, MAIN, padding=True)]))
    s['spans'] = admit(0, decl([row(0, MAIN, 0), row(1, DRAFT, -1), row(2, BEAM1, 'min'),
                                row(3, MAIN, 5), row(4, MAIN, padding=True)], post=[fork(MAIN, BEAM2)])) + \
        plan(0, forward=True) + commit(0)
    s['labels'] = b''.join(op(LABEL, 0, b) for b in range(8)) + admit(0, decl([row(0, 4)]))
    s['graph'] = op(GRAPH, 0, 0) + op(GRAPH, 1, 7) + op(GRAPH, 6, 0) + \
        admit(0, decl([r0], lease=lease)) + plan(0)
    s['raw'] = b''.join(op(RAW, k, 0) + op(RAW, k, 1) for k in range(20))
    s['raw_poll'] = b''.join(op(RAW, k, 2 | 4) for k in (8, 11, 12, 14))
    s['batch'] = op(INGEST, 0, 1) + admit(0, decl([r0])) + \
        op(BATCH, 0, 7) + bytes([0, 5, 2, 0x86, 3, 1 | 0x40, 4, 9])
    s['rids'] = b''.join(op(INGEST, 0, i) for i in range(6)) + op(RESET, 0, 2) + op(RESET, 0, 0x83) + \
        b''.join(op(REMOVE, 0, i) for i in range(6))
    s['events'] = admit(0, decl([r0])) + plan(0) + commit(0, EV_DEVICE) + commit(0, EV_LATER) + \
        admit(0, decl([r0])) + plan(0) + rollback(0, EV_DEVICE) + rollback(0, EV_NULL) + \
        op(SIGNAL, 0, 2) + op(SIGNAL, 0, 1)
    s['stray_event'] = admit(0, decl([r0])) + op(STRAY, 0, 0)
    s['fence_drop'] = admit(0, decl([r0])) + plan(0) + op(FENCE_DROP, 0, 0)
    s['shutdown'] = admit(0, decl([r0])) + op(SHUTDOWN, 0xA5, 0x5A)
    s['plan_forward_differs'] = admit(0, decl([r0, r1], pre=[fork(MAIN, DRAFT)])) + \
        plan(0, forward=True, new_decl=decl([r1, r0, row(2, MAIN)])) + \
        commit(0, new_decl=decl([r0], post=[fork(MAIN, BEAM1)]))
    s['pipeline'] = admit(0, decl([r0], post=[fork(MAIN, DRAFT)])) + plan(0) + \
        admit(1, decl([row(0, DRAFT)])) + plan(1) + admit(2, decl([r0], pre=[fork(MAIN, BEAM1)])) + \
        plan(2) + commit(0) + plan(1) + commit(1) + plan(2) + commit(2)
    many = [row(i % 6, i // 6) for i in range(10)]
    s['many_rows'] = admit(0, decl(many)) + plan(0, forward=True) + commit(0) + \
        admit(0, decl(many[:8] + [row(0, MAIN)]))
    s['preplan_chain'] = admit(0, decl([r0, row(0, DRAFT), row(0, BEAM1)],
                                       pre=[fork(MAIN, DRAFT), fork(DRAFT, BEAM1)], preplan=True)) + \
        plan(0) + plan(0, toggle_preplan=True, forward=True) + commit(0)
    s['plan_extra_row'] = admit(0, decl([r0])) + plan(0, forward=True) + commit(0) + \
        admit(1, decl([r1])) + plan(1, forward=True, new_decl=decl([r1, r0])) + commit(1)
    s['five_labels'] = op(LABEL, 0, 4) + admit(0, decl([row(0, k) for k in range(5)])) + \
        plan(0, forward=True) + commit(0) + op(RESET, 0, 0) + op(REMOVE, 0, 0)
    s['promote_lease_dropped'] = admit(0, decl([r0], lease=(0, 0, 0), preplan=True)) + plan(0) + \
        plan(0, new_decl=decl([r0])) + commit(0)
    s['promote_lease_moved'] = admit(0, decl([r0], lease=(0, 0, 0), preplan=True)) + plan(0) + \
        plan(0, new_decl=decl([r0], lease=(0, 1, 0))) + commit(0)
    s['label_flood'] = op(SHUTDOWN, 0x5A, 0xA5) + admit(0, decl([row(0, UNKNOWN_LABEL)]))
    s['many_rids'] = op(INGEST, 0, 0) + op(SHUTDOWN, 8 * 5, 3) + op(SHUTDOWN, 8 * 13, 6)
    # Per-rid forks (group 1: main <-> draft), a rejected draft, mixed groups.
    mixed = [row(0, MAIN), row(1, MAIN, group=1), row(1, DRAFT, 3, group=1), row(2, MAIN, 4)]
    rejected = [row(0, MAIN), row(1, MAIN, group=1, skip=True), row(1, DRAFT, 3, group=1),
                row(2, MAIN, 4)]
    gforks = dict(pre=[fork(MAIN, DRAFT)], post=[fork(DRAFT, MAIN)], grouped=True)
    s['fork_groups'] = admit(0, decl(mixed, **gforks)) + plan(0, forward=True) + commit(0) + \
        admit(0, decl(mixed, **gforks)) + plan(0, forward=True) + \
        commit(0, new_decl=decl(rejected, **gforks)) + \
        admit(0, decl([row(1, MAIN, group=1), row(1, DRAFT, group=0)], **gforks)) + \
        admit(0, decl([row(2, MAIN), row(3, MAIN, group=1)], pre=[fork(MAIN, BEAM1)],
                      post=[fork(MAIN, DRAFT)], grouped=True)) + plan(0, toggle_preplan=True) + \
        plan(0, toggle_preplan=True) + commit(0) + op(CHECKMEM)
    s['release'] = admit(0, decl([row(0, MAIN), row(0, DRAFT)])) + plan(0, forward=True) + \
        release(0, DRAFT) + commit(0) + release(0, MAIN) + release(0, MAIN) + \
        release(1, UNKNOWN_LABEL) + admit(1, decl([row(0, DRAFT)], pre=[fork(MAIN, DRAFT)])) + \
        plan(1) + release(0, DRAFT) + rollback(1, EV_DONE) + op(CHECKMEM)
    s['rid_lists'] = rid_list(0, [0, 1, 2, 5]) + admit(0, decl([row(0, MAIN), row(1, MAIN)])) + \
        plan(0, forward=True) + rid_list(2, [0, 1]) + rid_list(1, [1, 2, 1]) + \
        rid_list(1, [1, 2, 3]) + commit(0) + rid_list(2, [0, 5], free=True) + \
        rid_list(0, [4, 4]) + rid_list(1, [0, 1, 2, 3, 4, 5]) + op(CHECKMEM)
    return s


def seeds_config():
    # a num_layers, b num_blocks, c max_slots|sink, d world/rank, e device, f inbox|inflight
    def block(name_kind, ndim, dims, shard=0, dtype=0):
        g = name_kind | (ndim << 3)
        out = bytes([g, dtype])
        out += bytes(dims[:ndim])
        return out + bytes([shard])
    ok = bytes([2, 1, 8, 0, 0, 0]) + block(4, 2, [5 | 0x10, 6])
    s = {
        'ok_one_block': ok,
        'ok_three_blocks': bytes([3, 3, 11, 0, 0, 8]) + block(4, 1, [5]) + block(5, 3, [4, 5, 6], dtype=3) +
        block(6, 2, [5, 5], dtype=4),
        'tp_shard': bytes([1, 1, 9, 1 | (1 << 3), 0, 0]) + block(4, 2, [4 | 0x10, 5], shard=1),
        'tp_not_divisible': bytes([1, 1, 9, 2, 0, 0]) + block(4, 1, [5 | 0x10], shard=1),
        'no_sink': bytes([1, 1, 0x80 | 1, 0, 0, 0]) + block(4, 1, [5]),
        'sink_one_slot': bytes([1, 1, 1, 0, 0, 0]) + block(4, 1, [5]),
        'zero_layers': bytes([0, 1, 8, 0, 0, 0]) + block(4, 1, [5]),
        'zero_blocks': bytes([1, 0, 8, 0, 0, 0]),
        'too_many_blocks': bytes([1, 7, 8, 0, 0, 0]),
        'null_blocks': bytes([0x81, 0x81, 8, 0, 0, 0]) + block(4, 1, [5]),
        'bad_names': bytes([1, 3, 8, 0, 0, 0]) + block(0, 1, [5]) + block(1, 1, [5]) + block(2, 1, [5]),
        'dup_names': bytes([1, 2, 8, 0, 0, 0]) + block(3, 1, [5]) + block(3, 1, [5]),
        'bad_dims': bytes([1, 1, 8, 0, 0, 0]) + block(4, 3, [0, 1, 5]),
        'huge_dims': bytes([1, 1, 8, 0, 0, 0]) + block(4, 3, [2, 3 | 0x70, 3]),
        'bad_ndim': bytes([1, 1, 8, 0, 0, 0]) + bytes([4 | (31 << 3), 0, 5]),
        'bad_dtype': bytes([1, 1, 8, 0, 0, 0]) + block(4, 1, [5], dtype=15),
        'bad_shard': bytes([1, 1, 8, 1, 0, 0]) + block(4, 1, [4], shard=7),
        'world_zero': bytes([1, 1, 8, 7, 0, 0]) + block(4, 1, [5]),
        'rank_out': bytes([1, 1, 8, 1 | (7 << 3), 0, 0]) + block(4, 1, [5]),
        'cuda': bytes([1, 1, 8, 0, 7, 0]) + block(4, 1, [5]),
        'bad_device': bytes([1, 1, 8, 0, 6, 0]) + block(4, 1, [5]),
        'inbox_inflight': bytes([1, 1, 8, 0, 0, 6 | (7 << 3)]) + block(4, 1, [5]),
        'inflight_max': bytes([1, 1, 8, 0, 0, 7 | (6 << 3)]) + block(4, 1, [5]),
        'total_overflow': bytes([1, 2, 30, 0, 0, 0]) + block(4, 1, [0x83], dtype=3) +
        block(5, 1, [0x83], dtype=3),
        'shard_repeat': bytes([1, 1, 8, 1, 0, 0]) + block(4, 2, [4 | 0x10, 4 | 0x10], shard=2 | (6 << 3)),
        'huge_slots': bytes([1, 1, 31, 0, 0, 0]) + block(4, 2, [2 | 0xF0, 3]),
    }
    return s


def write(target, seeds):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(d):
        if name.startswith('seed-'):
            os.remove(os.path.join(d, name))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, 'seed-' + name), 'wb') as f:
            f.write(data)
    print(f'{target}: {len(seeds)} seeds in {d}')


if __name__ == '__main__':
    write('fuzz_api', seeds_api())
    write('fuzz_config', seeds_config())
    sys.exit(0)
