"""The driver's side of each micro-batch: the foreachBatch handler of the state query (events, quarantine, metrics and
history from the processor's output), the job's health from Spark's progress, and the gate that lets the job stop
between two micro-batches."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.util import InheritableThread

from replmon.core.config import ReplmonConfig
from streaming.exporter import JobExporter
from streaming.parse import quarantined_records
from streaming.processor import KIND_BUCKET, KIND_EVENT, KIND_QUARANTINE, NOT_METRICS, served_rows
from streaming.pyspark_hooks import JsonProgressListener, error_lines, last_batch_id
from streaming.serving import Partials
from streaming.silence import cluster_stale, compact_json, silent_clusters
from streaming.sinks import EventBatches, EventsPublisher, HistoryWriter

STATE_QUERY = "replmon-state"
"""The state query's name (its progress is the job's health: :class:`ProgressListener`)."""


@dataclass
class JobStats:
    """What the driver saw, for tests and benchmarks."""

    batches: int = 0
    samples: int = 0
    events: int = 0
    delays_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class StateBatchHandler:
    """foreachBatch of the state query. The micro-batch's output stays on the executors but for what the driver
    serves (:mod:`streaming.serving`): quarantined records and a message per state bucket (its aggregates, the
    partitions no longer candidates, the candidates' rows that changed as one Arrow stream:
    :func:`streaming.processor.serve`), and the partition STALE events of a silent cluster, merged into one. The
    executors write the events to their topic (:mod:`streaming.event_writer`), and Spark's Parquet writer the
    events' history and the partition snapshots, straight from the output, held in their memory for these uses
    (computed once: the state is applied once)."""

    def __init__(self, config: ReplmonConfig, exporter: JobExporter, stats: JobStats, gate: BatchGate,
                 spark: SparkSession, query: str, replaced: tuple[str, int] | None = None) -> None:
        self.exporter = exporter
        self.stats = stats
        self.gate = gate
        self.events = EventsPublisher(config)
        self.history = HistoryWriter(config.stream.history_dir, spark)
        self.event_batches = EventBatches(spark, str(config.stream.checkpoint_dir), query, replaced)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self.gate.batch(batch_id):
            batch.persist()
            try:
                self.handle(batch, batch_id)
            finally:
                batch.unpersist()

    def handle(self, batch: DataFrame, batch_id: int) -> None:
        out = collect(batch.filter(F.col("kind").isin(KIND_QUARANTINE, KIND_BUCKET)))
        quarantined = out["kind"] == KIND_QUARANTINE
        if quarantined.any():
            self.quarantine(out.loc[quarantined, "payload"].tolist())
        buckets = out[out["kind"] == KIND_BUCKET]
        partitions = served_rows(buckets)  # the candidates' rows, in their buckets' rows (serve)
        messages, aggregates = bucket_messages(buckets)
        told = told_by(messages, aggregates)
        candidates = serve_buckets(self.exporter, messages, aggregates, partitions)
        # the events and the partition snapshots: Spark jobs over the persisted output, independent of each other,
        # run at once (each small job waits mostly on scheduling and its commit, not on the cores), while this
        # thread puts the candidates' rows into the exporter
        calls: list[Callable[[], int]] = [functools.partial(serve_rows, self.exporter, candidates)]
        if told.events:
            calls.append(functools.partial(self.publish_events, batch, batch_id, told))
        if told.history:
            calls.append(functools.partial(self._write_partitions, batch))
        written = sum(together(calls))
        now = time.time()
        self.exporter.count("replmon_job_batches_total", ())
        self.exporter.set_job("replmon_job_last_batch_timestamp_seconds", now)
        with self.stats.lock:
            self.stats.batches += 1
            self.stats.events += written
            if told.newest_sample_ms is not None:
                newest = told.newest_sample_ms / 1000
                self.stats.delays_s.append(now - newest)
                self.exporter.set_job("replmon_job_sample_to_metric_delay_seconds", now - newest)

    def publish_events(self, batch: DataFrame, batch_id: int, told: Told) -> int:
        """The micro-batch's events to the events topic, the counters and the history; returns how many were
        written now. The executors write them, each id once, and count those they wrote
        (:mod:`streaming.event_writer`); the history by Spark's Parquet writer. The partition STALE events of a
        silent cluster (:mod:`streaming.silence`: the buckets' messages count them) come to the driver to become
        one."""
        events = batch.filter(F.col("kind") == KIND_EVENT)
        since, again = self.event_batches.begin(batch_id, self.events.end_offsets)
        silent = silent_clusters(told.stale, self.exporter.partitions_per_cluster)
        partition_stale = (F.col("event_type") == "STALE") & F.col("topic").isNotNull()
        silenced = partition_stale & F.col("cluster").isin(*sorted(silent)) if silent else F.lit(False)
        rest = events.filter(~silenced)
        counts, _ = together([functools.partial(self.events.publish_from_executors, rest, batch_id, since, again),
                              functools.partial(self.history.write_event_rows, rest)])
        self.exporter.add_counts(counts)
        written = sum(amount for (name, _), amount in counts.items() if name == "replmon_events_total")
        if silent:
            groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
            stale = collect(events.filter(silenced).select("payload"))
            for payload in stale["payload"]:
                event = json.loads(payload)
                groups[event["cluster"]].append(event)
            merged = [cluster_stale(cluster, group) for cluster, group in sorted(groups.items())]
            published = self.events.publish(((e["event_id"], compact_json(e)) for e in merged), batch_id)
            self.exporter.count_events(json.loads(p) for p in published)
            self.history.write_events(merged, batch_id)
            written += len(published)
        return int(written)

    def _write_partitions(self, batch: DataFrame) -> int:
        self.history.write_partitions(batch)
        return 0

    def quarantine(self, payloads: list[str]) -> None:
        """The batch's bad records to the quarantine topic, counted by the kind of their reason."""
        bad = quarantined_records(payloads)
        self.events.quarantine(bad)
        for reason, count in bad["reason"].map(lambda r: r.split(":", 1)[0]).value_counts().items():
            self.exporter.count("replmon_quarantined_samples_total", (str(reason),), int(count))


def together(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each call's result, the calls run at once: the first in this thread, each other in a thread that inherits
    this one's Spark local properties (InheritableThread: a query's job group among them, so that a stop cancels
    their Spark jobs too). Raises the first call's error of those that failed, once every call ended."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # raised below, in the caller's thread
            errors[i] = exc

    threads = [InheritableThread(run, args=(i,), daemon=True) for i in range(1, len(calls))]
    for thread in threads:
        thread.start()
    if calls:
        run(0)
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results


def collect(frame: DataFrame) -> pd.DataFrame:
    """``frame`` collected to the driver as Arrow (``toArrow``) and made pandas by Arrow: the frame ``toPandas()``
    gives (integers with nulls as floats, lists as arrays, maps as dicts), without its conversion of each map and
    list in Python (100,000 output rows: 1.0 s -> 0.45 s, docs/benchmarks.md). A collect that fails (a stop
    cancels its job) raises."""
    return frame.toArrow().to_pandas(maps_as_pydicts="strict")


@dataclass
class Told:
    """What the state buckets told the driver in one micro-batch, summed (:func:`told_by`)."""

    history: int = 0
    """Partition rows that are history snapshots."""
    events: int = 0
    stale: Counter[str] = field(default_factory=Counter)
    """Partition STALE events per cluster."""
    newest_sample_ms: int | None = None
    """The newest sample time the buckets hold."""


def take_served(exporter: JobExporter, buckets: pd.DataFrame, partitions: pd.DataFrame) -> Told:
    """A micro-batch's bucket messages and candidate rows (:func:`streaming.processor.serve`) into the exporter;
    returns the rest of what the messages say, summed."""
    messages, aggregates = bucket_messages(buckets)
    serve_rows(exporter, serve_buckets(exporter, messages, aggregates, partitions))
    return told_by(messages, aggregates)


def bucket_messages(buckets: pd.DataFrame) -> tuple[list[dict[str, Any]], dict[int, Partials]]:
    """The micro-batch's bucket rows as their messages, each with its ``bucket``, oldest first (their sequence),
    and each bucket's newest aggregates."""
    messages = sorted((json.loads(p) | {"bucket": int(b)} for b, p in zip(buckets["partition"], buckets["payload"],
                                                                         strict=True)), key=lambda m: m["seq"])
    return messages, {m["bucket"]: Partials.from_dict(m) for m in messages}


def told_by(messages: list[dict[str, Any]], aggregates: dict[int, Partials]) -> Told:
    """What the buckets' messages say beside their candidates, summed; ``aggregates``: each bucket's newest."""
    told = Told()
    for m in messages:
        told.history += int(m["history"])
        told.events += int(m["events"])
        told.stale.update(m["stale"])
    newest = [int(t) for p in aggregates.values() for t in p.clusters.get("last_sample_time_ms", ())]
    told.newest_sample_ms = max(newest) if newest else None
    return told


def serve_buckets(exporter: JobExporter, messages: list[dict[str, Any]], aggregates: dict[int, Partials],
                  partitions: pd.DataFrame) -> pd.DataFrame:
    """The buckets' messages (:func:`bucket_messages`) and their newest aggregates into the exporter: the
    aggregates replaced, the partitions no longer candidates dropped. Returns the candidate rows that hold, for
    :func:`serve_rows`: a bucket called twice in one micro-batch (its samples and its timer) sends two messages,
    and on each partition the newer one's word holds (their sequence, also in the rows' ``payload``)."""
    last_left: dict[tuple[str, str, int], int] = {}
    for m in messages:
        for cluster, topic, partition in m["left"]:
            last_left[(cluster, topic, int(partition))] = m["seq"]
    if last_left and not partitions.empty:
        keep = []
        for key, seq in zip(zip(partitions["cluster"], partitions["topic"], partitions["partition"].tolist(),
                                strict=True), partitions["payload"].astype(int).tolist(), strict=True):
            left_at = last_left.get(key)
            keep.append(left_at is None or left_at < seq)
            if left_at is not None and left_at < seq:  # a candidate again after it left
                del last_left[key]
        partitions = partitions[keep]
    exporter.update_buckets(aggregates, list(last_left))
    return partitions


def serve_rows(exporter: JobExporter, partitions: pd.DataFrame) -> int:
    """The candidates' rows (:func:`serve_buckets`) into the exporter's table. Returns 0: no events written (the
    handler sums what its calls wrote)."""
    if not partitions.empty:  # of two rows of one sample time (a sample's, then its timer's) the later one holds
        order = np.lexsort((partitions["payload"].astype(int).to_numpy(), partitions["sample_time_ms"].to_numpy()))
        exporter.update_partitions(partitions.iloc[order].drop(columns=list(NOT_METRICS)))
    return 0


class ProgressListener(JsonProgressListener):
    """The job's own health, from Spark's progress of the state query."""

    def __init__(self, exporter: JobExporter) -> None:
        self.exporter = exporter

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.name != STATE_QUERY:
            return
        self.exporter.set_job("replmon_job_batch_duration_seconds", progress.batchDuration / 1000.0)
        self.exporter.set_job("replmon_job_input_rows_per_second", float(progress.inputRowsPerSecond or 0))
        self.exporter.set_job("replmon_job_processed_rows_per_second", float(progress.processedRowsPerSecond or 0))
        rows = sum(op.numRowsTotal for op in progress.stateOperators)
        self.exporter.set_job("replmon_job_state_rows", float(rows))


STOP_BATCH_WAIT_S = 10.0
"""How long stopping the job waits for the micro-batch in flight (``replmon run`` gives the job 15 s before a
SIGKILL)."""
STOP_POLL_S = 0.02


class BatchStopped(Exception):
    """A micro-batch's foreachBatch failed because the job was being stopped (its Spark job cancelled or its call
    interrupted): the failure again, in a text Spark's check of it can read (:class:`BatchGate`).

    The text is the error's first line and the Java exceptions behind it, one line each, without PySpark's
    Python traceback and Java stack traces: their length sends the check's regex into a StackOverflowError.
    From these lines Spark tells an interruption by the stop (the cancelled job group, or an
    InterruptedException behind a Py4JJavaError) from a failure, and ends the query as stopped."""

    def __init__(self, batch_id: int, error: BaseException) -> None:
        super().__init__(f"micro-batch {batch_id} stopped: " + " <- ".join(error_lines(error)))


class BatchGate:
    """Which foreachBatch call is in flight, so that the job stops between two micro-batches.

    Stopping a query interrupts the micro-batch it runs. The batch is replayed on restart (deterministic event ids:
    nothing lost or counted twice), but an interrupted foreachBatch fails with a Py4J error whose text Spark
    matches against a regex to tell an interruption from a failure (SPARK-39218), and on PySpark's long error
    text that regex overflows the stack: a StackOverflowError in the log at every stop. Between batches, a stop
    interrupts only Spark's own planning or waiting.

    When a stop has to interrupt a batch after all (it ran past the wait, or the next one started just before the
    stop), the batch's error is raised again as :class:`BatchStopped`, a few lines long: Spark recognises the
    interruption in it and ends the query as stopped, without the regex's overflow; the batch, not committed, is
    replayed on restart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: int | None = None
        self._last = -1
        self._stopping = False

    @contextlib.contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Wraps one foreachBatch call."""
        with self._lock:
            self._running = batch_id
        try:
            yield
        except Exception as exc:
            if self._stopping:  # the stop cancelled the batch's Spark job: it is replayed on restart
                raise BatchStopped(batch_id, exc) from None
            raise
        finally:
            with self._lock:
                self._running, self._last = None, max(self._last, batch_id)

    def stopping(self) -> None:
        """The queries are being stopped: a batch that fails from now on was interrupted by the stop."""
        self._stopping = True

    def between_batches(self, query: StreamingQuery) -> bool:
        """No foreachBatch call in flight, and the last one's micro-batch finished (its progress reported, after
        its commit)."""
        with self._lock:
            running, last = self._running, self._last
        if running is not None:
            return False
        if last < 0:
            # no batch handled yet: the first one may be in planning, where the stateful processor's driver-side
            # Python worker initialises it (a stop then breaks its pipe: a traceback in the log)
            return not query.status.get("isTriggerActive", False)
        newest = last_batch_id(query)
        return newest is not None and newest >= last
