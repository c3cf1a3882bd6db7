"""The bucket state store on a real Spark streaming query: a bucket's table, megabytes of it, is read back whole
in every micro-batch after the one that saved it. (The short read of large value-state updates in Spark 4.0.0,
SPARK-53870, that BucketTable avoids is a race this test does not provoke: bench_stream's memory phase, 300k
partitions, did.)"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues
from pyspark.sql.types import LongType, StructField, StructType

from replmon.contracts.samples import PartitionSample, ReplicaOffsets, to_json
from replmon.testbed.kafka_view import wait_until
from streaming.batch import STATE_QUERY, BatchGate, JobStats, ProgressListener
from streaming.detect import DetectConfig
from streaming.exporter import JobExporter
from streaming.job import RunningJob
from streaming.processor import (
    KIND_EVENT,
    KIND_PARTITION,
    OUTPUT_SCHEMA,
    BucketTable,
    PackedTable,
    ReplicationProcessor,
)
from streaming.session import CHECKPOINT_MANAGER, CHECKPOINTING, FILESYSTEM_CHECKPOINT_MANAGER, STATE_CONF
from streaming.state import PartitionState

pytestmark = [pytest.mark.spark]

ENTRY_BYTES = 2_000_000
"""What each micro-batch adds to the bucket's table: a partition state holding that many random characters
(incompressible), so that the stored table grows by at least as much (300k partitions in 32 buckets
make ~2 MB tables)."""
OUTPUT = StructType([StructField("entries_before", LongType()), StructField("table_bytes", LongType())])


class GrowingTable(StatefulProcessor):
    """Each batch: load the bucket's table, add one big entry, save it, and say what it found."""

    def __init__(self, entry_bytes: int = ENTRY_BYTES) -> None:
        self.entry_bytes = entry_bytes

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.table = BucketTable(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        table = self.table.load() or PackedTable()
        before = len(table)
        table[("c", "t", before)] = PartitionState.new("c", "t", before, os.urandom(self.entry_bytes).decode("latin-1"))
        self.table.save(table)
        table_bytes = 0
        for state in table.values():
            assert isinstance(state, PartitionState)  # the only kind this processor stores
            table_bytes += len(state.meta.topic_id or "")
        yield pd.DataFrame({"entries_before": [before], "table_bytes": [table_bytes]})

    def close(self) -> None:
        pass


def test_a_bucket_table_of_megabytes_survives_each_micro_batch(spark: SparkSession, tmp_path: Any) -> None:
    source = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    query = (source.select(F.lit(0).alias("bucket"), "value").groupBy("bucket")
             .transformWithStateInPandas(GrowingTable(), OUTPUT, "Append", "None")
             .writeStream.format("memory").queryName("growing_table").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second").start())
    try:
        def batches() -> list[tuple[int, int]]:
            assert query.exception() is None, query.exception()
            return [(r[0], r[1]) for r in spark.sql("SELECT * FROM growing_table ORDER BY entries_before").collect()]

        wait_until(lambda: len(batches()) >= 5, 180, "five micro-batches")
    finally:
        query.stop()
    seen = batches()[:5]
    # each batch found every entry the batches before it saved: up to a table of 10 MB, read back whole
    assert seen == [(n, (n + 1) * ENTRY_BYTES) for n in range(5)]


SPARK_DEFAULT_MANAGER = f"{CHECKPOINTING}.FileContextBasedCheckpointFileManager"


def _checkpoint_manager(spark: SparkSession, checkpoint: Path) -> str:
    """The class of the file manager Spark makes for a query's checkpoint with the session's settings now."""
    jvm = spark._jvm
    assert jvm is not None
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    package = functools.reduce(getattr, CHECKPOINTING.split("."), jvm)
    manager = package.CheckpointFileManager.create(jvm.org.apache.hadoop.fs.Path(str(checkpoint)), conf)
    return str(manager.getClass().getName())


def _growing_run(spark: SparkSession, checkpoint: Path) -> list[int]:
    """Two or more committed micro-batches of GrowingTable on ``checkpoint``: the entries each found. A batch that
    ran but was stopped before its commit is left out: the next run on the checkpoint runs it again."""
    found: dict[int, list[int]] = {}

    def record(batch: DataFrame, batch_id: int) -> None:
        found[batch_id] = [r[0] for r in batch.collect()]

    source = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    query = (source.select(F.lit(0).alias("bucket"), "value").groupBy("bucket")
             .transformWithStateInPandas(GrowingTable(entry_bytes=100), OUTPUT, "Append", "None")
             .writeStream.foreachBatch(record)
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="500 milliseconds").start())

    def committed() -> int:
        progress = query.lastProgress  # reported once the batch's commit is written
        return -1 if progress is None else int(progress["batchId"])

    def two_batches() -> bool:
        assert query.exception() is None, query.exception()
        last = committed()
        return sum(1 for batch_id, entries in list(found.items()) if entries and batch_id <= last) >= 2

    try:
        wait_until(two_batches, 120, "two committed micro-batches")
    finally:
        query.stop()
    last = committed()
    return sorted(entry for batch_id, entries in found.items() if batch_id <= last for entry in entries)


def test_a_checkpoint_moves_between_spark_s_default_file_manager_and_the_job_s(
        spark: SparkSession, tmp_path: Any) -> None:
    """The job writes its checkpoint with Hadoop's FileSystem API (STATE_CONF: FileContext's rename starts a
    process per file on the local filesystem), Spark's default is FileContext: a checkpoint of a replmon before
    the change is read by the new one, and the other way round. Three runs on one checkpoint, default / the
    job's / default, each going on from the state and offsets the run before left."""
    checkpoint = tmp_path / "checkpoint"
    assert _checkpoint_manager(spark, checkpoint) == FILESYSTEM_CHECKPOINT_MANAGER  # the session's setting holds
    seen: list[int] = []
    try:
        for manager in (SPARK_DEFAULT_MANAGER, FILESYSTEM_CHECKPOINT_MANAGER, SPARK_DEFAULT_MANAGER):
            spark.conf.set(CHECKPOINT_MANAGER, manager)
            assert _checkpoint_manager(spark, checkpoint) == manager
            seen.extend(_growing_run(spark, checkpoint))
    finally:
        spark.conf.set(CHECKPOINT_MANAGER, STATE_CONF[CHECKPOINT_MANAGER])
    # every batch found the entries of all the batches before it, whichever manager wrote them
    assert seen == list(range(len(seen))), seen
    assert len(seen) >= 6


def test_python_workers_import_nothing_from_the_archives_spark_puts_on_their_path(spark: SparkSession) -> None:
    """The job's worker daemon (streaming.worker_daemon): PySpark is the venv's, not pyspark.zip, and no archive
    is searched by an import, so the invalidate_caches() of each task re-reads none (0.3-0.5 s per task)."""
    def facts(_: Any) -> tuple[str, str, list[str]]:
        import sys
        import zipimport

        import pyspark
        archives = [entry for entry, finder in sys.path_importer_cache.items()
                    if isinstance(finder, zipimport.zipimporter)]
        return pyspark.__file__ or "", os.environ.get("PYTHONPATH", ""), archives

    pyspark_file, pythonpath, archives = spark.sparkContext.parallelize([0], 1).map(facts).collect()[0]
    assert "pyspark.zip" in pythonpath  # the archive is on the worker's path, as Spark puts it
    assert ".zip" not in pyspark_file and pyspark_file.endswith("pyspark/__init__.py"), pyspark_file
    assert archives == []


def test_a_reused_python_worker_s_collections_walk_only_what_its_last_task_created(spark: SparkSession) -> None:
    """The job's worker daemon freezes what a task leaves alive (streaming.worker_daemon.frozen_before_each): the
    full collection PySpark's daemon runs after each task walks what the next task creates, not the tens of
    thousands of objects of the worker's modules."""
    def collector(_: Any) -> tuple[int, int, int]:
        import gc

        return os.getpid(), gc.get_freeze_count(), len(gc.get_objects())

    runs = [spark.sparkContext.parallelize([0], 1).map(collector).collect()[0] for _ in range(3)]
    pid, frozen, walked = runs[-1]
    assert pid == runs[-2][0]  # an idle worker is reused
    assert frozen > 20_000, runs  # pyspark, cloudpickle, ... as the tasks before left them
    assert walked < frozen / 4, runs  # what this task made so far


def _sample_json(partition: int, cycle: int, sample_time_ms: int, high_watermark: int = 0) -> str:
    """A partition sample's JSON (leader 1, the only replica, its log end offset the high watermark)."""
    sample = PartitionSample(cluster="c", collector_id="x", cycle=cycle, sample_time_ms=sample_time_ms, topic="t",
                             partition=partition, leader=1, leader_epoch=0, replicas=[1], isr=[1],
                             high_watermark=high_watermark,
                             replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=high_watermark)])
    return to_json(sample).decode()


def _sample_text(partition: int) -> str:
    """A partition sample's JSON with ``%d`` where its cycle and sample time go (filled in by Spark)."""
    return _sample_json(partition, 123456789, 987654321).replace("123456789", "%d").replace("987654321", "%d")


def _sample_line(partition: int, cycle: int) -> str:
    """A partition sample's JSON, sampled now; its high watermark is its cycle, so a partition row tells which
    sample it came from."""
    return _sample_json(partition, cycle, int(time.time() * 1000), high_watermark=cycle)


def test_the_staleness_timer_of_a_bucket_fires_again_and_again_without_samples(
        spark: SparkSession, tmp_path: Path) -> None:
    """The job's processor on a real query, fed by the test (a file per write): partitions 0 and 1 of one
    bucket sampled once, then partition 1 alone until partition 0 has gone STALE, then silence. Partition 1 goes
    STALE after its last sample, from a timer later than partition 0's: the bucket's timer fired, and registered
    the next one, again and again, the last ones without any sample arriving. Partition 0 goes STALE once, however
    many timers fire during its silence. (Partition 1 may also go STALE while fed, should a micro-batch stall for
    longer than stale_after: staleness is the job's processing time, and that is a silence too.)"""
    cfg = DetectConfig(stale_after_ms=2000)  # a timer every second
    feed, staging = tmp_path / "feed", tmp_path / "staging"
    feed.mkdir()
    staging.mkdir()
    written: list[int] = []

    def write(*lines: str) -> None:
        name = f"{len(written):05d}.json"
        (staging / name).write_text("\n".join(lines) + "\n")
        os.rename(staging / name, feed / name)  # whole files only: the source lists the folder any time
        written.append(len(lines))

    def number(path: str) -> Any:
        return F.get_json_object("value", path).cast("long")

    write(_sample_line(0, 0), _sample_line(1, 0))
    samples = spark.readStream.format("text").load(str(feed)).select(
        F.lit(0).alias("bucket"), F.lit("p").alias("kind"), F.col("value").alias("sample"),
        number("$.sample_time_ms").alias("sample_time_ms"), number("$.cycle").alias("cycle"))
    query = (samples.groupBy("bucket")
             .transformWithStateInPandas(ReplicationProcessor(cfg), OUTPUT_SCHEMA, "Append", "ProcessingTime")
             .writeStream.format("memory").queryName("stale_timers").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="500 milliseconds")
             .start())

    def stale(partition: int) -> list[int]:
        """The times of the partition's STALE events, in order."""
        assert query.exception() is None, query.exception()
        return sorted(r[0] for r in spark.sql(
            f"SELECT sample_time_ms FROM stale_timers WHERE kind = '{KIND_EVENT}' AND event_type = 'STALE' "
            f"AND partition = {partition}").collect())

    def stale_after(partition: int, cycle: int) -> bool:
        """Whether the partition went stale with the sample of ``cycle`` its newest."""
        return bool(spark.sql(
            f"SELECT 1 FROM stale_timers WHERE kind = '{KIND_PARTITION}' AND partition = {partition} AND stale "
            f"AND high_watermark = {cycle}").collect())

    def feed_partition_1() -> bool:
        if stale(0):
            return True
        write(_sample_line(1, len(written)))
        return False

    try:
        wait_until(feed_partition_1, 120, "STALE for partition 0 while partition 1 is sampled")
        last_cycle = len(written) - 1
        wait_until(lambda: stale_after(1, last_cycle), 120, f"STALE for partition 1 after its cycle {last_cycle}")
        stale_0, stale_1 = stale(0), stale(1)
    finally:
        query.stop()
    assert stale_after(0, 0)
    assert len(stale_0) == 1, stale_0  # once for its one silence
    assert last_cycle >= 2  # partition 1 was sampled after partition 0's last sample
    assert stale_1 and stale_1[-1] > stale_0[0], (stale_0, stale_1)  # a later timer


def test_the_job_health_gauges_carry_spark_s_progress_of_the_state_query(spark: SparkSession, tmp_path: Any) -> None:
    """ProgressListener on a real stateful query named as the job's state query: its gauges come to hold the figures
    of Spark's own progress report of the same micro-batch (read as the event's JSON, one Py4J call per event)."""
    exporter = JobExporter(series_budget=10)
    listener = ProgressListener(exporter)
    spark.streams.addListener(listener)
    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    time_ms = (F.col("timestamp").cast("double") * 1000).cast("long")
    samples = rows.select((F.col("value") % 3).cast("int").alias("bucket"), F.lit("p").alias("kind"),
                          F.format_string(_sample_text(0), "value", time_ms).alias("sample"),
                          time_ms.alias("sample_time_ms"), F.col("value").alias("cycle"))
    query = (samples.groupBy("bucket")
             .transformWithStateInPandas(ReplicationProcessor(DetectConfig()), OUTPUT_SCHEMA, "Append",
                                         "ProcessingTime")
             .writeStream.format("noop").queryName(STATE_QUERY).outputMode("append")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second").start())

    def gauges() -> dict[str, float]:
        return {f.name: f.samples[0].value for f in exporter.collect()
                if f.name.startswith("replmon_job_") and f.samples and not f.samples[0].labels}

    def agree() -> bool:
        assert query.exception() is None, query.exception()
        progress, seen = query.lastProgress, gauges()
        return progress is not None and progress.numInputRows > 0 and seen.get("replmon_job_state_rows", 0) > 0 \
            and seen == {**seen,
                         "replmon_job_batch_duration_seconds": progress.batchDuration / 1000.0,
                         "replmon_job_input_rows_per_second": float(progress.inputRowsPerSecond),
                         "replmon_job_processed_rows_per_second": float(progress.processedRowsPerSecond),
                         "replmon_job_state_rows": float(sum(op.numRowsTotal for op in progress.stateOperators))}

    try:
        wait_until(agree, 120, "the job's gauges to match the state query's progress")
    finally:
        query.stop()
        spark.streams.removeListener(listener)


def gated_job(spark: SparkSession, handler: Callable[[Any, int], None], gate: BatchGate, checkpoint: Path
              ) -> tuple[StreamingQuery, RunningJob]:
    """A query of a rate source into ``handler``, as a RunningJob stopping through ``gate``."""
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
             .foreachBatch(handler).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="500 milliseconds").start())
    return query, RunningJob(spark, [query], JobExporter(series_budget=10), JobStats(), 0, gate)


def test_stopping_the_job_lets_the_micro_batch_in_flight_finish(spark: SparkSession, tmp_path: Any) -> None:
    """RunningJob.stop waits for the micro-batch in flight: its foreachBatch returns normally and its commit is
    written, instead of Spark interrupting it (a replay on restart, and a StackOverflowError in Spark's check of
    the interrupted batch's error text)."""
    gate = BatchGate()
    entered, release = threading.Event(), threading.Event()
    handled: list[int] = []

    def handler(batch: Any, batch_id: int) -> None:  # as the job's handler: each call wrapped in the gate
        with gate.batch(batch_id):
            if not entered.is_set() and batch.count():
                entered.set()
                release.wait(120)  # the batch is in flight until the test lets it go
                handled.append(batch_id)

    checkpoint = tmp_path / "checkpoint"
    query, job = gated_job(spark, handler, gate, checkpoint)
    try:
        assert entered.wait(120), "no micro-batch with rows"
        stopper = threading.Thread(target=job.stop, kwargs={"batch_wait_s": 120})
        stopper.start()
        release.set()
        stopper.join(120)
        assert not stopper.is_alive(), "stop() did not return"
    finally:
        release.set()
        query.stop()
    assert not query.isActive and query.exception() is None
    assert len(handled) == 1
    assert (checkpoint / "commits" / str(handled[0])).exists(), "the batch in flight was not committed"


def test_a_stop_that_interrupts_a_micro_batch_ends_the_query_as_stopped(spark: SparkSession, tmp_path: Any) -> None:
    """When stopping has to interrupt a micro-batch (here: no wait at all, while its foreachBatch runs a Spark job
    that would take hours), the query ends as stopped: no error, no StackOverflowError from Spark's check of
    PySpark's error text, and the batch is not committed (replayed on restart)."""
    gate = BatchGate()
    entered = threading.Event()
    interrupted: list[int] = []

    def handler(batch: Any, batch_id: int) -> None:  # as the job's handler: each call wrapped in the gate
        with gate.batch(batch_id):
            if not entered.is_set() and batch.count():
                entered.set()
                try:
                    spark.range(10**13).agg(F.sum("id")).collect()
                finally:
                    interrupted.append(batch_id)

    checkpoint = tmp_path / "checkpoint"
    query, job = gated_job(spark, handler, gate, checkpoint)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    system_err, stderr = jvm.java.lang.System.err, jvm.java.io.ByteArrayOutputStream()
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(stderr, True))  # where a thread's uncaught error goes
    try:
        assert entered.wait(120), "no micro-batch with rows"
        wait_until(lambda: bool(spark.sparkContext.statusTracker().getActiveJobsIds()), 60, "the long Spark job")
        job.stop(batch_wait_s=0)
    finally:
        query.stop()
        jvm.java.lang.System.setErr(system_err)
    assert not query.isActive and query.exception() is None, query.exception()
    assert len(interrupted) == 1
    assert not (checkpoint / "commits" / str(interrupted[0])).exists(), "the interrupted batch was committed"
    assert (checkpoint / "offsets" / str(interrupted[0])).exists()  # planned: read again on restart
    assert "StackOverflowError" not in str(stderr.toString())
