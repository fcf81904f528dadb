# Checkpoints ranked by value through the package: the policy and weight in
# PoolConfig (checked, TypeError/ValueError naming the field), the value of
# a take, eviction by value, and the policy's counters in stats().
# SPDX-License-Identifier: Apache-2.0
import pytest

import rsp
from conftest import small_config


def _pool(**kw):
    return rsp.RecurrentStatePool("cpu", small_config(max_checkpoints=3, **kw))


def _holding(p):
    s = rsp.Step(1, [("a", "main", 1)])
    assert p.step_next(s)
    p.commit(s)


def test_the_value_policy_evicts_the_lowest_value():
    evicted = []
    p = _pool(checkpoint_policy="value", checkpoint_value_weight=1e9,
              on_checkpoint_evict=lambda ev: evicted.append(ev.key))
    _holding(p)
    for key, value in ((1, 30), (2, 10), (3, 20), (4, 50)):
        p.checkpoint_take(key, "a")
        p.checkpoint_value(key, value)
    p.barrier()
    assert evicted == [2]
    p.checkpoint_value(1, 5)  # re-ranked: 1 is now the lowest
    p.checkpoint_take(5, "a")
    p.barrier()
    assert evicted == [2, 1]
    s = p.stats()
    assert s["checkpoints_evicted_device"] == 2 and s["checkpoints_evicted_host"] == 0


def test_lru_is_the_default_and_ignores_values():
    evicted = []
    p = _pool(on_checkpoint_evict=lambda ev: evicted.append(ev.key))
    _holding(p)
    for key, value in ((1, 1000), (2, 1), (3, 1), (4, 1)):
        p.checkpoint_take(key, "a")
        p.checkpoint_value(key, value)
    p.barrier()
    assert evicted == [1]


def test_a_restore_counts_a_hit_and_its_value():
    p = _pool(checkpoint_policy="value", checkpoint_value_weight=1.0)
    _holding(p)
    p.checkpoint_take(7, "a")
    p.checkpoint_value(7, 123)
    s = rsp.Step(2, [("b", "main", 1)], restores=[("b", "main", 7)])
    assert p.step_next(s)
    p.commit(s)
    st = p.stats()
    assert st["checkpoint_hits_device"] == 1 and st["checkpoint_value_restored"] == 123
    assert st["checkpoint_bytes_restored"] == p.info()["slot_bytes"]
    with pytest.raises(rsp.RspError) as e:
        p.checkpoint_value(99, 1)
    assert e.value.name == "RSP_ENOKEY"


@pytest.mark.parametrize("field,value,exc", [
    ("checkpoint_policy", "mru", ValueError),
    ("checkpoint_policy", 1, TypeError),
    ("checkpoint_value_weight", -1.0, ValueError),
    ("checkpoint_value_weight", float("nan"), ValueError),
    ("checkpoint_value_weight", float("inf"), ValueError),
    ("checkpoint_value_weight", "1", TypeError),
])
def test_a_bad_policy_or_weight_is_refused_naming_it(field, value, exc):
    with pytest.raises(exc, match=field):
        _pool(**{field: value})


def test_a_bad_value_is_refused_naming_it():
    p = _pool()
    _holding(p)
    p.checkpoint_take(1, "a")
    with pytest.raises((TypeError, ValueError), match="value"):
        p.checkpoint_value(1, -1)
