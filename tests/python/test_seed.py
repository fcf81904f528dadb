# Rows given as NamedTuples (an engine's Segment) and rsp's last-rows cache.
# SPDX-License-Identifier: Apache-2.0
import rsp


def test_namedtuple_rows_are_kept_by_the_last_rows_cache():
    from typing import NamedTuple

    class Seg(NamedTuple):
        request_id: str
        label: str
        span: int

    class Loose(tuple):  # instances have a dict: a kept row could change
        pass

    assert not rsp.pool.keep_row_type(Loose) and not rsp.pool.keep_row_type(list)
    p = rsp.pool.RecurrentStatePool("cpu", rsp.PoolConfig(1, [rsp.BlockSpec("s", (4,))], 8))
    s1 = rsp.Step(1, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s1)
    assert p._last_rows is None  # not a type the cache keeps yet
    assert rsp.pool.keep_row_type(Seg)
    s2 = rsp.Step(2, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s2, prev=s1)
    s3 = rsp.Step(3, [Seg("a", "main", 1), Seg("b", "main", 1)])
    p.step_next(s3, prev=s2)
    assert s3._wire[1].keep is s2._wire[1].keep  # equal rows: the bytes reused
    p.commit(s3)
    p.cleanup()
