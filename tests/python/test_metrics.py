"""Pool.metrics_text / metrics_latency and the prometheus_client collector."""
import importlib
import re
import sys
import time

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


def _sample(text, name, labels):
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


def _lag_seen(p, name, want):
    """The device lag count once the owner has seen `want` forwards done:
    each stats() is a message, after which the owner looks again."""
    for _ in range(5000):
        got = _sample(p.metrics_text(name), "rsp_device_lag_seconds_count",
                      f'pool="{name}",rank="0"')
        if got == want:
            return got
        p.stats()
        time.sleep(0.001)
    return got


def test_holdings_per_label_and_step_latencies_in_the_text():
    p = rsp.Pool("cpu", small_config())
    try:
        text = p.metrics_text("d")
        assert "rsp_post_to_plan_seconds" not in text and "rsp_device_lag" not in text
        assert _sample(text, "rsp_guard_checks_total", 'pool="d",rank="0"') == 0
        p.metrics_latency(True)
        fence = rsp.HostFence()
        step = rsp.Step(1, [("a", "main", 1), ("b", "main", 1), ("a", "draft", 1)])
        assert p.step_next(step)
        fence.signal(1)
        p.commit(step, forward_done=(fence, 1))
        text = p.metrics_text("d")
        assert _sample(text, "rsp_holdings", 'pool="d",rank="0",label="main"') == 2
        assert _sample(text, "rsp_holdings", 'pool="d",rank="0",label="draft"') == 1
        assert _sample(text, "rsp_post_to_plan_seconds_count", 'pool="d",rank="0"') == 1
        assert _lag_seen(p, "d", 1) == 1
        p.release("a", "draft")
        text = p.metrics_text("d")
        assert _sample(text, "rsp_holdings", 'pool="d",rank="0",label="draft"') == 0
    finally:
        p.cleanup()


# A stand-in for prometheus_client where it is not installed: its parser
# groups samples into families the way the real one does (a histogram's
# _bucket, _sum and _count, a counter's _total under the declared name
# less _total) and records what the collector yields.
_FAKE_PARSER = '''
import importlib
import re
import sys
import time
from collections import namedtuple

Sample = namedtuple("Sample", "name labels value")


class Metric:
    def __init__(self, name, documentation, typ):
        self.name, self.documentation, self.type, self.samples = name, documentation, typ, []


_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\\{(.*)\\} (\\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\\]|\\\\.)*)"')


def text_string_to_metric_families(text):
    fams, helps = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, doc = line[7:].split(" ", 1)
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, typ = line[7:].split(" ")
            base = name[:-6] if typ == "counter" and name.endswith("_total") else name
            fams[name] = Metric(base, helps.get(name, ""), typ)
        elif line:
            m = _LINE.match(line)
            assert m, line
            name = m.group(1)
            fam = next(f for n, f in fams.items()
                       if name == n or (f.type == "histogram" and name in
                                        (n + "_bucket", n + "_sum", n + "_count")))
            labels = {k: v.replace('\\\\"', '"').replace("\\\\\\\\", "\\\\")
                      for k, v in _LABEL.findall(m.group(2))}
            fam.samples.append(Sample(name, labels, float(m.group(3))))
    yield from fams.values()
'''


@pytest.fixture
def fake_prometheus(tmp_path, monkeypatch):
    """rsp.metrics reloaded against the stand-in (the real module when it
    is installed: then the test checks the real parser's families)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        pkg = tmp_path / "prometheus_client"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "parser.py").write_text(_FAKE_PARSER)
        monkeypatch.syspath_prepend(str(tmp_path))
    import rsp.metrics
    yield importlib.reload(rsp.metrics)
    for mod in ("prometheus_client.parser", "prometheus_client"):
        if mod in sys.modules and str(tmp_path) in (getattr(sys.modules[mod], "__file__", "")
                                                     or ""):
            del sys.modules[mod]
    monkeypatch.undo()
    importlib.reload(rsp.metrics)


def test_the_collector_yields_every_family(fake_prometheus):
    p = rsp.Pool("cpu", small_config())
    try:
        p.metrics_latency(True)
        fence = rsp.HostFence()
        for sid in (1, 2, 3):
            step = rsp.Step(sid, [("a", "main", 1), ("a", "draft", 1)])
            assert p.step_next(step)
            fence.signal(sid)
            p.commit(step, forward_done=(fence, sid))
        assert _lag_seen(p, "dec", 3) == 3
        fams = {f.name: f for f in fake_prometheus.PoolCollector(p, "dec").collect()}
        for field in p.counters():  # every rsp_stats field, counters under their base name
            assert field in fams or f"rsp_{field}" in fams, field
        assert fams["rsp_commits"].type == "counter"
        assert fams["rsp_guard_violations"].type == "counter"
        hold = {s.labels["label"]: s.value for s in fams["rsp_holdings"].samples}
        assert fams["rsp_holdings"].type == "gauge" and hold == {"main": 1, "draft": 1}
        for name in ("rsp_post_to_plan_seconds", "rsp_device_lag_seconds", "rsp_owner_seconds"):
            assert fams[name].type == "histogram", name
        for name in ("rsp_post_to_plan_seconds", "rsp_device_lag_seconds"):
            s = {(x.name, x.labels.get("le")): x.value for x in fams[name].samples}
            assert s[(name + "_count", None)] == 3, name
            assert s[(name + "_bucket", "+Inf")] == 3, name
            assert s[(name + "_sum", None)] > 0, name
        every = [s for f in fams.values() for s in f.samples]
        assert every and all(s.labels["pool"] == "dec" and s.labels["rank"] == "0"
                             for s in every)
    finally:
        p.cleanup()
    assert list(fake_prometheus.PoolCollector(p, "dec").collect()) == []  # cleaned up: nothing
