"""Prometheus metrics of rsp pools.

PoolCollector(pool, name) is a prometheus_client collector: each scrape
reads the pool's metrics text (Pool.metrics_text: every counter and gauge,
the latency histograms once turned on) and hands prometheus_client the
families its own parser makes of it, so the names, types and help are
exactly those of the C exposition. prometheus_client is optional: importing
this module works without it; building a collector does not.
"""

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # optional dependency
    text_string_to_metric_families = None


class PoolCollector:
    """A prometheus_client collector for one pool (labels pool=name,
    rank). Register it: prometheus_client.REGISTRY.register(
    PoolCollector(pool, "decode-0")). A scrape of a pool already cleaned up
    yields nothing."""

    def __init__(self, pool, name="rsp"):
        if text_string_to_metric_families is None:
            raise ImportError("rsp.metrics.PoolCollector needs prometheus_client "
                              "(pip install prometheus-client)")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if not hasattr(pool, "metrics_text"):
            raise TypeError(f"pool must be an rsp.Pool, not {type(pool).__name__}")
        self._pool = pool
        self._name = name

    def collect(self):
        from .pool import RspError
        try:
            text = self._pool.metrics_text(self._name)
        except RspError:
            return
        yield from text_string_to_metric_families(text)
