"""Prometheus exposition of the job, served by the driver (prometheus-client).

The driver keeps what the state buckets send it (:mod:`streaming.serving`): each bucket's newest aggregates per
cluster, topic and broker, combined over the buckets, and the newest metrics row of each bucket's candidates for
the series budget (columns updated in place in foreachBatch); at scrape time the first ``series_budget`` of the
candidates get per-partition and per-replica series. Counters (events, lost messages,
quarantined samples) only ever grow and are fed from rows already de-duplicated by event id.
"""

from __future__ import annotations

import threading
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from replmon.contracts.metrics import BY_NAME, CATALOG, MetricSpec
from replmon.core.metrics_http import serve_metrics
from streaming.serving import Partials, budgeted, combine, event_counts

KEY = ["cluster", "topic", "partition"]

PARTITION_GAUGES = {
    "replmon_partition_isr_size": "isr_size",
    "replmon_partition_replicas": "replica_count",
    "replmon_partition_min_insync_replicas": "min_insync_replicas",
    "replmon_partition_under_replicated": "under_replicated",
    "replmon_partition_under_min_isr": "under_min_isr",
    "replmon_partition_at_min_isr": "at_min_isr",
    "replmon_partition_offline": "offline",
    "replmon_partition_leader": "leader",
    "replmon_partition_leader_epoch": "leader_epoch",
    "replmon_partition_high_watermark": "high_watermark",
    "replmon_partition_log_end_offset": "log_end_offset",
    "replmon_partition_hw_lag_messages": "hw_lag",
    "replmon_partition_reassigning": "reassigning",
}


def _family(spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.type == "counter":
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


def aggregate_families(aggregates: Partials) -> list[Metric]:
    """Cluster, topic and broker aggregates (pure): over every partition, as the buckets' :class:`Partials`
    combined give them."""
    fams = {s.name: _family(s) for s in CATALOG if s.labels in (("cluster",), ("cluster", "topic"),
                                                                  ("cluster", "broker")) and s.type == "gauge"}
    for row in aggregates.clusters.itertuples(index=False):
        labels = [str(row.cluster)]
        fams["replmon_cluster_partitions"].add_metric(labels, row.partitions)
        fams["replmon_cluster_under_replicated_partitions"].add_metric(labels, row.under_replicated)
        fams["replmon_cluster_under_min_isr_partitions"].add_metric(labels, row.under_min_isr)
        fams["replmon_cluster_at_min_isr_partitions"].add_metric(labels, row.at_min_isr)
        fams["replmon_cluster_offline_partitions"].add_metric(labels, row.offline)
        fams["replmon_cluster_hw_stalled_partitions"].add_metric(labels, row.hw_stalled)
        fams["replmon_cluster_stale_partitions"].add_metric(labels, row.stale)
        fams["replmon_cluster_last_sample_timestamp_seconds"].add_metric(labels, row.last_sample_time_ms / 1000.0)
        fams["replmon_cluster_reassigning_partitions"].add_metric(labels, row.reassigning)
    for row in aggregates.topics.itertuples(index=False):
        labels = [str(row.cluster), str(row.topic)]
        fams["replmon_topic_partitions"].add_metric(labels, row.partitions)
        fams["replmon_topic_under_replicated_partitions"].add_metric(labels, row.under_replicated)
        fams["replmon_topic_under_min_isr_partitions"].add_metric(labels, row.under_min_isr)
        fams["replmon_topic_offline_partitions"].add_metric(labels, row.offline)
        fams["replmon_topic_max_hw_lag_messages"].add_metric(labels, 0 if pd.isna(row.max_hw_lag)
                                                             else row.max_hw_lag)
    for row in aggregates.brokers.itertuples(index=False):
        labels = [str(row.cluster), str(int(row.broker))]
        fams["replmon_broker_replicas"].add_metric(labels, row.replicas)
        fams["replmon_broker_leaders"].add_metric(labels, row.leaders)
        fams["replmon_broker_out_of_isr_replicas"].add_metric(labels, row.out_of_isr)
        fams["replmon_broker_max_replica_lag_messages"].add_metric(labels, max(0, int(row.max_lag)))
        fams["replmon_broker_max_in_sync_replica_lag_seconds"].add_metric(labels,
                                                                         max(0, int(row.max_isr_lag_ms)) / 1000)
    return list(fams.values())


def partition_families(table: pd.DataFrame) -> list[Metric]:
    """Per-partition and per-replica series of the given (already budgeted) partitions (pure)."""
    fams = {s.name: _family(s) for s in CATALOG if s.budgeted}
    for row in table.itertuples(index=False):
        labels = [row.cluster, row.topic, str(row.partition)]
        for name, column in PARTITION_GAUGES.items():
            value = getattr(row, column)
            if value is not None and not pd.isna(value):
                fams[name].add_metric(labels, float(value))
        in_isr = set(row.isr if row.isr is not None else ())
        in_elr = set(row.elr if row.elr is not None else ())
        in_last_known_elr = set(row.last_known_elr if row.last_known_elr is not None else ())
        adding = set(row.adding_replicas if row.adding_replicas is not None else ())
        lags = dict(row.follower_lag) if row.follower_lag is not None else {}
        time_lags = dict(row.follower_time_lag_ms) if row.follower_time_lag_ms is not None else {}
        for broker in row.replicas if row.replicas is not None else ():
            replica = [*labels, str(broker)]
            fams["replmon_replica_in_isr"].add_metric(replica, float(broker in in_isr))
            fams["replmon_replica_in_elr"].add_metric(replica, float(broker in in_elr))
            fams["replmon_replica_in_last_known_elr"].add_metric(replica, float(broker in in_last_known_elr))
            fams["replmon_replica_adding"].add_metric(replica, float(broker in adding))
            if broker == row.leader:
                fams["replmon_replica_lag_messages"].add_metric(replica, 0.0)
                fams["replmon_replica_lag_seconds"].add_metric(replica, 0.0)
                continue
            if lags.get(broker) is not None:
                fams["replmon_replica_lag_messages"].add_metric(replica, float(lags[broker]))
            if time_lags.get(broker) is not None:
                fams["replmon_replica_lag_seconds"].add_metric(replica, time_lags[broker] / 1000)
    return list(fams.values())


def _common(old: np.ndarray, values: np.ndarray) -> np.dtype[Any]:
    """The type a column takes to hold both its values and new ones: the wider number, else object."""
    if old.dtype == values.dtype:
        return old.dtype
    if old.dtype.kind in "biuf" and values.dtype.kind in "biuf":
        return np.result_type(old.dtype, values.dtype)
    return np.dtype(object)


class PartitionTable:
    """The newest metrics row of each partition, as columns changed in place: a batch's rows go where their
    partitions' rows are (found through a key index whose hash table is built once), new partitions after the
    last row, into arrays that grow by doubling. A batch costs what its rows cost, whatever the table holds; only
    a column that must change type (an integer column meets a null: float) is copied whole, once.
    Not thread-safe: :class:`JobExporter` holds its lock around every call."""

    def __init__(self) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._size = 0
        self._keys = pd.MultiIndex.from_tuples([], names=KEY)

    def __len__(self) -> int:
        return self._size

    @staticmethod
    def newest(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.MultiIndex]:
        """Each partition's newest row of a batch (by ``sample_time_ms``; on a tie, the later row) and their keys:
        what :meth:`update` takes, prepared without the table."""
        new = rows.sort_values("sample_time_ms", kind="stable").drop_duplicates(subset=KEY, keep="last")
        return new, pd.MultiIndex.from_frame(new[KEY])

    def update(self, new: pd.DataFrame, keys: pd.MultiIndex) -> None:
        """Rows of :meth:`newest` replace their partitions' older rows; new partitions join."""
        if new.empty:
            return
        if not self._columns:
            self._columns = {name: new[name].to_numpy().copy() for name in new.columns}
            self._size, self._keys = len(new), keys
            return
        position = self._keys.get_indexer(keys)
        seen = position >= 0
        times = new["sample_time_ms"].to_numpy()
        replace = seen.copy()
        replace[seen] = times[seen] >= self._columns["sample_time_ms"][position[seen]]
        added = ~seen
        joining = int(added.sum())
        self._reserve(self._size + joining)
        at = np.concatenate([position[replace], np.arange(self._size, self._size + joining)])
        take = np.concatenate([np.flatnonzero(replace), np.flatnonzero(added)])
        if len(at):
            for name, column in self._columns.items():
                values = new[name].to_numpy()[take]
                dtype = _common(column, values)
                if dtype != column.dtype:
                    column = self._columns[name] = column.astype(dtype)
                column[at] = values
        if joining:
            self._keys = self._keys.append(keys[added])
            self._size += joining

    def remove(self, keys: pd.MultiIndex) -> None:
        """The rows of ``keys`` leave the table (a key not in it is ignored); the rest keep their order."""
        if not self._size or not len(keys):
            return
        position = self._keys.get_indexer(keys)
        position = position[position >= 0]
        if not len(position):
            return
        keep = np.ones(self._size, np.bool_)
        keep[position] = False
        kept = int(keep.sum())
        for column in self._columns.values():
            column[:kept] = column[:self._size][keep]
            if column.dtype.kind == "O":
                column[kept:self._size] = None
        self._keys = self._keys[keep]
        self._size = kept

    def _reserve(self, size: int) -> None:
        capacity = len(next(iter(self._columns.values())))
        if size <= capacity:
            return
        capacity = max(size, 2 * capacity)
        for name, column in self._columns.items():
            grown = np.empty(capacity, dtype=column.dtype)
            if column.dtype.kind == "O":
                grown[:] = None
            grown[:self._size] = column[:self._size]
            self._columns[name] = grown

    def frame(self) -> pd.DataFrame:
        """A copy of the table as a frame (the scrape's: later batches do not change it)."""
        if not self._columns:
            return pd.DataFrame()
        return pd.DataFrame({name: column[:self._size].copy() for name, column in self._columns.items()})


class JobExporter(Collector):
    """The job's metrics registry: the state buckets' aggregates and candidate rows (:mod:`streaming.serving`),
    counters, job health; thread-safe against scrapes."""

    def __init__(self, series_budget: int) -> None:
        self.series_budget = series_budget
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._table = PartitionTable()
        self._buckets: dict[int, Partials] = {}
        self._aggregates = combine([])
        self._counters: dict[str, Counter[tuple[str, ...]]] = {
            s.name: Counter() for s in CATALOG if s.type == "counter"}
        self._job: dict[str, float] = {}
        self._port: int | None = None
        self.registry.register(self)

    # ---- updates (driver, foreachBatch / listener) ----
    def update_partitions(self, rows: pd.DataFrame) -> None:
        """Candidate rows (:mod:`streaming.serving`): each partition's newest row (by ``sample_time_ms``; on a
        tie, the later row) replaces its older one, in place (:class:`PartitionTable`): the cost follows the batch,
        not the table. A scrape copies the table under the lock instead: a scrape a few times a minute, a batch
        every trigger."""
        if rows.empty:
            return
        new, keys = PartitionTable.newest(rows)  # outside the lock: a scrape waits only for the writes
        with self._lock:
            self._table.update(new, keys)

    def new_run(self) -> None:
        """A new run of the state query: its buckets tell it their candidates whole (:mod:`streaming.serving`),
        so the rows of the run before leave (the aggregates stay until each bucket replaces its own)."""
        with self._lock:
            self._table = PartitionTable()

    def update_buckets(self, aggregates: dict[int, Partials], left: list[tuple[str, str, int]]) -> None:
        """Each bucket's newest aggregates replace its older ones; the ``left`` partitions are no longer
        candidates (their rows leave the table)."""
        if not aggregates and not left:
            return
        with self._lock:
            buckets = dict(self._buckets)
        buckets.update(aggregates)
        combined = combine(buckets.values())  # outside the lock; only this thread writes the buckets
        gone = pd.MultiIndex.from_tuples(left, names=KEY) if left else None
        with self._lock:
            self._buckets, self._aggregates = buckets, combined
            if gone is not None:
                self._table.remove(gone)

    def count_events(self, events: Iterable[dict[str, Any]]) -> None:
        self.add_counts(event_counts(events))

    def add_counts(self, counts: Mapping[tuple[str, tuple[str, ...]], float]) -> None:
        """Add ``counts`` (by counter and labels: :func:`streaming.serving.event_counts`) to the counters."""
        with self._lock:
            for (name, labels), amount in counts.items():
                self._counters[name][labels] += amount  # type: ignore[assignment]

    def count(self, name: str, labels: tuple[str, ...], amount: float = 1) -> None:
        with self._lock:
            self._counters[name][labels] += amount  # type: ignore[assignment]

    def set_job(self, name: str, value: float) -> None:
        assert name in BY_NAME, name
        with self._lock:
            self._job[name] = value

    def partitions_per_cluster(self) -> dict[str, int]:
        """How many partitions each cluster has (over every bucket)."""
        with self._lock:
            clusters = self._aggregates.clusters
        return {str(c): int(n) for c, n in zip(clusters["cluster"], clusters["partitions"], strict=True)}

    def tracked(self) -> int:
        """How many partitions the job tracks (over every bucket)."""
        return sum(self.partitions_per_cluster().values())

    def snapshot(self) -> pd.DataFrame:
        """The candidates' rows (every partition's while they fit the budget)."""
        with self._lock:
            return self._table.frame()

    # ---- exposition ----
    def collect(self) -> Iterator[Metric]:
        with self._lock:
            table = self._table.frame()
            aggregates = self._aggregates
            counters = {name: dict(c) for name, c in self._counters.items()}
            job = dict(self._job)
        exported = budgeted(table, self.series_budget) if not table.empty else table
        tracked = int(aggregates.clusters["partitions"].sum()) if not aggregates.clusters.empty else 0
        yield from partition_families(exported)
        yield from aggregate_families(aggregates)
        for name, values in counters.items():
            fam = _family(BY_NAME[name])
            for labels, value in values.items():
                fam.add_metric(list(labels), value)
            yield fam
        job["replmon_job_partition_series"] = float(len(exported))
        job["replmon_job_partition_series_dropped"] = float(max(0, tracked - len(exported)))
        for spec in CATALOG:
            if spec.labels == () and spec.type == "gauge" and spec.name in job:
                fam = GaugeMetricFamily(spec.name, spec.help)
                fam.add_metric([], job[spec.name])
                yield fam

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on host:port (port 0: a free one); returns the port. Serving again (a restarted
        job) keeps the one server."""
        if self._port is None:
            server = serve_metrics(self.registry, host, port, "stream")
            self._port = int(server.server_port)
        return self._port


Scraped = dict[str, list[tuple[dict[str, str], float]]]


def scrape(port: int, host: str = "127.0.0.1", timeout_s: float = 5.0) -> Scraped:
    """Read a /metrics page as Prometheus would: every sample by name, as (labels, value) pairs."""
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s).read().decode()
    out: Scraped = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out
