# The binding on a CUDA pool: tensors on the GPU without a copy, the
# forward's stream ordered after the plan's ready event, forward_done from a
# torch.cuda.Event. Runs only where torch sees a GPU (tests/gpu/run.sh).
# SPDX-License-Identifier: Apache-2.0
import pytest
import torch

import rsp
from conftest import small_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU visible to torch")


def test_cuda_step_with_torch_streams_and_events():
    pool = rsp.RecurrentStatePool("cuda:0", small_config())
    ssm = pool.block("ssm", 0)
    assert ssm.is_cuda and ssm.shape == (8, 4, 8)
    s1 = rsp.Step(1, [("a", "main", 1)])
    assert pool.admit(s1)
    pool.plan(s1)
    a = pool.addressing()
    assert a.slot_indices.is_cuda
    stream = torch.cuda.Stream()
    pool.wait_ready(a, stream)
    with torch.cuda.stream(stream):
        ssm[a.slot_indices.long()] = 2.0
        done = torch.cuda.Event()
        done.record(stream)
    pool.commit(s1, forward_done=done)
    s2 = rsp.Step(2, [("a", "main", 1), ("a", "draft", 1)], pre_forks=[rsp.Fork("main", "draft")])
    assert pool.admit(s2)
    pool.plan(s2)
    d = pool.addressing("draft")
    pool.wait_ready(d)
    assert torch.equal(ssm[d.slot_indices.long()], ssm[a.slot_indices.long()])
    pool.commit(s2, forward_done=None)
    pool.cleanup()
    torch.cuda.synchronize()
    assert float(ssm.sum()) == 2 * 2.0 * 32  # main and its fork, after cleanup


def test_cuda_checkpoint_restore_and_swap_are_ordered_before_ready():
    # the restore's copy and swap_in's copy run on the pool's stream before
    # the next plan's ready event: a stream that waits for it reads them
    pool = rsp.RecurrentStatePool("cuda:0", small_config(max_checkpoints=2,
                                                         max_host_checkpoints=2))
    ssm = pool.block("ssm", 0)
    s1 = rsp.Step(1, [("a", "main", 4)], checkpoints=[rsp.Checkpoint("a", "main", 7)])
    assert pool.step_next(s1)
    a = pool.addressing()
    pool.wait_ready(a)
    ssm[a.slot_indices.long()] = 3.0
    done = torch.cuda.Event()
    done.record()
    s2 = rsp.Step(2, [("b", "main", 1)], restores=[rsp.Restore("b", "main", 7)])
    assert pool.step_next(s2, prev=s1, forward_done=done)  # the take runs after done
    b = pool.addressing()
    pool.wait_ready(b)
    assert b.host_has_state == [True]
    assert bool((ssm[b.slot_indices.long()] == 3.0).all())
    pool.commit(s2, forward_done=None)  # nothing written on the GPU
    assert pool.checkpoint_info(7).tier == "device"
    pool.swap_out("b")
    assert pool.swap_in("b").ok
    s3 = rsp.Step(3, [("b", "main", 1)])
    assert pool.step_next(s3)
    c = pool.addressing()
    pool.wait_ready(c)
    assert c.host_has_state == [True]
    assert bool((ssm[c.slot_indices.long()] == 3.0).all())
    pool.commit(s3, forward_done=None)
    assert pool.stats()["swaps_in"] == 1 and pool.stats()["checkpoints_restored"] == 1
    pool.cleanup()
