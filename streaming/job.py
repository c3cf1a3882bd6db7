"""The Spark Structured Streaming job, wired: samples topic -> parse and validate -> bucketed state -> sinks.

One query, ``replmon-state``, reads the samples topic (:mod:`streaming.source`) and validates each record once
against the sample models, in the read stage's Python workers (:mod:`streaming.parse`):

* valid samples, hashed into state buckets (:mod:`streaming.buckets`), go through
  :class:`streaming.processor.ReplicationProcessor` (transformWithStateInPandas, RocksDB state store,
  processing-time timers); the foreachBatch handler (:mod:`streaming.batch`) publishes events (once per id),
  updates the Prometheus table and writes the history;
* records that fail parsing or validation pass through the processor untouched, with their reason, to the
  quarantine topic and ``replmon_quarantined_samples_total{reason}``. The job never dies on bad input. (One query
  for both: a second one for bad records would read and parse every record again: docs/benchmarks.md,
  "Streaming job".)
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from replmon.core import locations
from replmon.core.config import ReplmonConfig
from streaming.batch import (
    STATE_QUERY,
    STOP_BATCH_WAIT_S,
    STOP_POLL_S,
    BatchGate,
    JobStats,
    ProgressListener,
    StateBatchHandler,
)
from streaming.buckets import resolve_layout
from streaming.detect import DetectConfig
from streaming.exporter import JobExporter
from streaming.parse import processor_input
from streaming.processor import OUTPUT_SCHEMA, ReplicationProcessor
from streaming.pyspark_hooks import quiet_stop_noise
from streaming.reshard import QueryLog, seed_state
from streaming.source import kafka_source
from streaming.storage import HadoopDirectory

log = logging.getLogger(__name__)


@dataclass
class RunningJob:
    spark: SparkSession
    queries: list[StreamingQuery]
    exporter: JobExporter
    stats: JobStats
    port: int
    gate: BatchGate = field(default_factory=BatchGate)
    """The foreachBatch handler's (every query's handler wraps its calls in it)."""

    def stop(self, batch_wait_s: float = STOP_BATCH_WAIT_S) -> None:
        """Stop every query between two micro-batches (:class:`BatchGate`): the one in flight is let finish (its
        events published, its commit written) for up to ``batch_wait_s``, and only then interrupted."""
        deadline = time.monotonic() + batch_wait_s
        quiet_stop_noise()
        for query in self.queries:
            try:
                while (query.isActive and not self.gate.between_batches(query)
                       and time.monotonic() < deadline):
                    time.sleep(STOP_POLL_S)
                self.gate.stopping()
                query.stop()
            except Exception as exc:  # stopping is best effort
                log.warning("stopping %s: %s", query.name, exc)

    def await_any(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> None:
        """Block until a query ends (raises its error), ``timeout_s`` passes or ``stop`` is set (checked every
        second, between two waits on the JVM)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (deadline is None or time.monotonic() < deadline) and not (stop is not None and stop.is_set()):
            for query in self.queries:
                if not query.isActive:
                    exc = query.exception()
                    if exc is not None:
                        raise RuntimeError(f"query {query.name} failed: {exc}")
                    return
            try:
                self.spark.streams.awaitAnyTermination(timeout=1)
            except StreamingQueryException:
                # a query failed: the loop above raises its error (the caller restarts it); forget the failure so
                # that the restarted queries are awaited, not the old one again
                self.spark.streams.resetTerminated()


def start_job(spark: SparkSession, config: ReplmonConfig, exporter: JobExporter | None = None) -> RunningJob:
    stream = config.stream
    exporter = exporter or JobExporter(stream.series_budget)
    checkpoint = HadoopDirectory(spark, stream.checkpoint_dir)
    checkpoint.check_writable("stream.checkpoint_dir")
    HadoopDirectory(spark, stream.history_dir).check_writable("stream.history_dir")
    layout = resolve_layout(spark, checkpoint, stream.state_buckets, stream.state_parallelism)
    seed, starting_offsets, replaced = None, None, None
    moved = layout.resharded_from
    if moved is not None and QueryLog(checkpoint, layout.query).last_committed() is None:
        replaced = (moved.query, moved.batch)
        # a new state parallelism: the new query starts from the old one's last commit (streaming.reshard)
        starting_offsets = QueryLog(checkpoint, moved.query).source_offsets(moved.batch)
        seed = seed_state(spark, stream.checkpoint_dir, moved.query, moved.batch,
                          dict(zip(moved.bucket_ids, layout.bucket_ids, strict=True))).groupBy("bucket")
        spark.conf.set("spark.sql.shuffle.partitions", str(layout.shuffle_partitions))
        log.warning("state parallelism %s: moving the state of %s (micro-batch %d) to %s", layout.shuffle_partitions,
                    moved.query, moved.batch, layout.query)
    port = exporter.serve(stream.metrics_host, stream.metrics_port)
    stats = JobStats()
    spark.streams.addListener(ProgressListener(exporter))
    gate = BatchGate()
    state_handler = StateBatchHandler(config, exporter, stats, gate, spark, layout.query, replaced)
    processor = ReplicationProcessor(DetectConfig.from_stream_config(stream), stream.series_budget)
    exporter.new_run()
    processed = (processor_input(kafka_source(spark, config, starting_offsets), layout.bucket_ids)
                 .groupBy("bucket")
                 .transformWithStateInPandas(statefulProcessor=processor, outputStructType=OUTPUT_SCHEMA,
                                             outputMode="Append", timeMode="ProcessingTime", initialState=seed))
    trigger = f"{stream.trigger_interval_s} seconds"
    query_checkpoint = locations.spark_uri(locations.join(stream.checkpoint_dir, layout.query))
    state_query = (processed.writeStream.queryName(STATE_QUERY).foreachBatch(state_handler)
                   .option("checkpointLocation", query_checkpoint)
                   .trigger(processingTime=trigger).start())
    return RunningJob(spark, [state_query], exporter, stats, port, gate)
