"""Pool.metrics_text / metrics_latency and the prometheus_client collector."""
import re

import pytest

import rsp
from conftest import small_config


def _step(pool, sid):
    step = rsp.Step(sid, [("a", "main", 1)])
    assert pool.step_next(step)
    pool.commit(step)


def test_metrics_text_has_every_counter_labelled():
    p = rsp.Pool("cpu", small_config())
    try:
        _step(p, 1)
        text = p.metrics_text('dec"0')
        counters = p.counters()
        for field in counters:
            assert re.search(rf"^# TYPE rsp_{field}(_total)? (counter|gauge)$", text, re.M), field
        assert 'rsp_commits_total{pool="dec\\"0",rank="0"} 1\n' in text
        assert "rsp_owner_seconds" not in text
        p.metrics_latency(True)
        _step(p, 2)
        text = p.metrics_text()
        assert re.search(r'^rsp_owner_seconds_count\{pool="rsp",rank="0",kind="step"\} 1$',
                         text, re.M)
        with pytest.raises(TypeError, match="name"):
            p.metrics_text(3)
        with pytest.raises(TypeError, match="on"):
            p.metrics_latency(1)
    finally:
        p.cleanup()


def test_prometheus_collector():
    prometheus_client = pytest.importorskip("prometheus_client")
    from rsp.metrics import PoolCollector

    p = rsp.Pool("cpu", small_config())
    try:
        _step(p, 1)
        registry = prometheus_client.CollectorRegistry()
        registry.register(PoolCollector(p, "decode"))
        value = registry.get_sample_value("rsp_commits_total",
                                          {"pool": "decode", "rank": "0"})
        assert value == 1
        with pytest.raises(TypeError, match="name"):
            PoolCollector(p, 5)
    finally:
        p.cleanup()


def test_record_path_writes_a_recording(tmp_path):
    path = tmp_path / "run.rsprec"
    p = rsp.Pool("cpu", small_config(record_path=str(path)))
    try:
        _step(p, 1)
    finally:
        p.cleanup()
    data = path.read_bytes()
    assert data.startswith(b"RSPREC1\n") and len(data) > 1000
    with pytest.raises(TypeError, match="record_path"):
        rsp.Pool("cpu", small_config(record_path=3))
