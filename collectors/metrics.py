"""The collectors' own metrics (prometheus-client), served on ``collector.metrics_host:metrics_port``.

Each :class:`CollectorMetrics` owns its registry, so several collectors (or tests) in one process do not
clash.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from replmon.core.metrics_http import serve_metrics

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_duration = Histogram(
            "replmon_collector_cycle_duration_seconds", "Wall time of one sampling cycle of one cluster",
            ["cluster"], buckets=CYCLE_BUCKETS, registry=r)
        self.cycles = Counter("replmon_collector_cycles", "Sampling cycles completed", ["cluster"],
                              registry=r)
        self.cycles_skipped = Counter(
            "replmon_collector_cycles_skipped", "Cycles skipped: the previous one overran its interval",
            ["cluster"], registry=r)
        self.requests = Counter("replmon_collector_requests", "Kafka protocol requests sent",
                                ["cluster", "api", "broker"], registry=r)
        self.errors = Counter("replmon_collector_errors", "Errors met while sampling or publishing",
                              ["cluster", "kind"], registry=r)
        self.partitions = Gauge("replmon_collector_partitions", "Partitions sampled in the last cycle",
                                ["cluster"], registry=r)
        self.unreachable_brokers = Gauge("replmon_collector_unreachable_brokers",
                                         "Brokers that did not answer in the last cycle", ["cluster"],
                                         registry=r)
        self.samples_published = Counter("replmon_collector_samples_published",
                                         "Samples acknowledged by the samples cluster", registry=r)
        self.samples_dropped = Counter("replmon_collector_samples_dropped",
                                       "Samples dropped (buffer full or delivery failed)", registry=r)
        self.samples_buffered = Gauge("replmon_collector_samples_buffered",
                                      "Samples waiting to be published", registry=r)

    def serve(self, host: str, port: int) -> Any:
        """Serve /metrics over HTTP from a daemon thread (port 0: a free one, ``server.server_port`` tells which);
        returns the server (``.shutdown()`` stops it)."""
        return serve_metrics(self.registry, host, port, "collector")
