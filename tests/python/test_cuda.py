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
