"""What the job keeps and hands over, pinned: the output row's Spark schema (derived from PartitionMetrics; the
history and the foreachBatch handler read it), the state value's format version (checkpoints written by earlier
versions must load), and the private PySpark hooks' version gate."""

from __future__ import annotations

import pickle
import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from replmon.contracts.samples import PartitionSample, ReplicaOffsets
from replmon.core.processes import wait_until
from streaming import pyspark_hooks
from streaming.detect import DetectConfig, PartitionMetrics, step
from streaming.processor import KIND_PARTITION, OUTPUT_SCHEMA, partition_row, rows_batch
from streaming.state import PartitionState, dump_state
from streaming.table import STATE_MAGIC, STATE_VERSION, ColumnarTable, StateVersionError, pack, unpack

ROOT = Path(__file__).resolve().parents[1]

# The output schema as checkpoints, history files and the handler know it: a change here is a format change.
WRITTEN_SCHEMA = StructType([
    StructField("kind", StringType(), False), StructField("cluster", StringType(), True),
    StructField("topic", StringType(), True), StructField("partition", LongType(), True),
    StructField("sample_time_ms", LongType(), True), StructField("event_id", StringType(), True),
    StructField("event_type", StringType(), True), StructField("payload", StringType(), True),
    StructField("leader", LongType(), True), StructField("leader_epoch", LongType(), True),
    StructField("replica_count", LongType(), True), StructField("isr_size", LongType(), True),
    StructField("min_insync_replicas", LongType(), True), StructField("offline", BooleanType(), True),
    StructField("under_replicated", BooleanType(), True), StructField("under_min_isr", BooleanType(), True),
    StructField("at_min_isr", BooleanType(), True), StructField("high_watermark", LongType(), True),
    StructField("log_end_offset", LongType(), True), StructField("log_start_offset", LongType(), True),
    StructField("hw_lag", LongType(), True), StructField("max_follower_lag", LongType(), True),
    StructField("health", LongType(), True), StructField("follower_lag", MapType(LongType(), LongType()), True),
    StructField("isr", ArrayType(LongType()), True), StructField("replicas", ArrayType(LongType()), True),
    StructField("hw_stalled", BooleanType(), True), StructField("stale", BooleanType(), True),
    # added at the end: history files written before them lack the columns
    StructField("elr", ArrayType(LongType()), True), StructField("last_known_elr", ArrayType(LongType()), True),
    StructField("follower_time_lag_ms", MapType(LongType(), LongType()), True),
    StructField("adding_replicas", ArrayType(LongType()), True), StructField("reassigning", BooleanType(), True),
    # after the metrics: not a metric, not in the history files
    StructField("history", BooleanType(), True), StructField("served", BooleanType(), True),
    StructField("served_rows", BinaryType(), True),
])


def a_state() -> tuple[PartitionState, PartitionMetrics]:
    sample = PartitionSample(
        cluster="c", collector_id="x", cycle=1, sample_time_ms=1_000, topic="t", partition=0, leader=1,
        leader_epoch=4, replicas=[1, 2, 3], isr=[1, 2], high_watermark=90, min_insync_replicas=2,
        replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=100), ReplicaOffsets(broker_id=2,
                         log_end_offset=95), ReplicaOffsets(broker_id=3, error="unreachable")])
    state, _events, metrics = step(None, sample, DetectConfig())
    return state, metrics


def test_the_output_schema_derived_from_the_metrics_is_the_one_written_before() -> None:
    assert OUTPUT_SCHEMA == WRITTEN_SCHEMA


def test_a_partition_row_has_every_column_of_the_schema_with_its_values() -> None:
    _state, metrics = a_state()
    row = partition_row(metrics)
    assert set(row) == set(OUTPUT_SCHEMA.fieldNames()) - {"event_id", "event_type", "payload", "served", "served_rows"}
    assert row["kind"] == KIND_PARTITION and row["isr"] == [1, 2] and row["replicas"] == [1, 2, 3]
    assert row["follower_lag"] == {2: 5} and row["hw_lag"] == 10 and row["health"] == int(metrics.health)
    table = pa.Table.from_pylist([row], schema=pa.schema([(f.name, _arrow(f.dataType)) for f in OUTPUT_SCHEMA
                                                          if f.name in row]))
    assert table.num_rows == 1


def _arrow(spark_type: object) -> pa.DataType:
    if isinstance(spark_type, LongType):
        return pa.int64()
    if isinstance(spark_type, BooleanType):
        return pa.bool_()
    if isinstance(spark_type, StringType):
        return pa.string()
    if isinstance(spark_type, ArrayType):
        return pa.list_(_arrow(spark_type.elementType))
    assert isinstance(spark_type, MapType)
    return pa.map_(_arrow(spark_type.keyType), _arrow(spark_type.valueType))


def test_a_state_value_carries_its_format_version_and_round_trips() -> None:
    state, _ = a_state()
    key = ("c", "t", 0)
    value = pack({key: state})
    assert value[:len(STATE_MAGIC) + 1] == STATE_MAGIC + bytes([STATE_VERSION])
    assert dict(unpack(value).items()) == {key: state}


def test_state_values_written_before_the_version_still_load() -> None:
    """The formats of existing checkpoints: version 1 (the packed states alone), LZ4 without a version header, an
    uncompressed pickle of packed states, and a pickle of whole states."""
    state, _ = a_state()
    key = ("c", "t", 0)
    raw = pickle.dumps({key: dump_state(state)}, protocol=pickle.HIGHEST_PROTOCOL)
    legacy_lz4 = b"LZ4\x00" + len(raw).to_bytes(8, "big") + pa.compress(raw, codec="lz4", asbytes=True)
    version_1 = b"RPL\x01" + len(raw).to_bytes(8, "big") + pa.compress(raw, codec="lz4", asbytes=True)
    for value in (legacy_lz4, raw, version_1):
        assert unpack(value).side.packed() == {key: dump_state(state)} and dict(unpack(value).items()) == {key: state}
    whole = unpack(pickle.dumps({key: state}))
    assert isinstance(whole, ColumnarTable) and whole.side.packed() == {key: dump_state(state)}
    assert dict(unpack(None).items()) == {}


def test_a_state_value_of_an_unknown_version_is_refused_with_the_way_out() -> None:
    state, _ = a_state()
    newer = bytearray(pack({("c", "t", 0): state}))
    newer[len(STATE_MAGIC)] = STATE_VERSION + 1
    with pytest.raises(StateVersionError, match=rf"format version {STATE_VERSION + 1}: this replmon reads version "
                                                 rf"{STATE_VERSION}.*the replmon that wrote the checkpoint"):
        unpack(bytes(newer))


def test_the_hooks_are_written_for_the_pyspark_pyproject_pins() -> None:
    pinned = re.search(r'"pyspark==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None and pinned.group(1) == pyspark_hooks.PINNED_PYSPARK
    assert pyspark_hooks.PYSPARK_VERSION == pyspark_hooks.PINNED_PYSPARK and pyspark_hooks.enabled()
    assert pyspark_hooks.daemon_conf() == {"spark.python.daemon.module": "streaming.worker_daemon"}


def test_the_jvm_shutdown_hook_stops_the_job_and_holds_the_jvm_until_done(spark: SparkSession) -> None:
    """The hook Hadoop's ShutdownHookManager runs when the driver's JVM exits (called here as Hadoop calls it, from
    the JVM): it sets the job's stop and returns only once told the job stopped. A job that stops on its own removes
    it (Hadoop finds a hook by reference)."""
    stop = threading.Event()
    hook = pyspark_hooks.JvmShutdown.register(spark, stop)
    manager = hook._manager
    assert manager.hasShutdownHook(hook._registered)
    ran = threading.Thread(target=hook._registered.run, daemon=True)  # what Hadoop's executor calls
    ran.start()
    try:
        wait_until(stop.is_set, 30, "the hook to set the job's stop")
        assert hook.exiting.is_set() and ran.is_alive(), "the hook holds the JVM until the job stopped"
    finally:
        hook.done()
        ran.join(30)
        manager.removeShutdownHook(hook._registered)  # not close(): that lets go of the session's accumulator server
    assert not ran.is_alive()

    kept = pyspark_hooks.JvmShutdown.register(spark, threading.Event())
    assert not kept.close() and not manager.hasShutdownHook(kept._registered)


def test_on_another_pyspark_the_hooks_fall_back_to_the_public_api(
        spark: SparkSession, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """One warning, no daemon of the job's own, PySpark's own listener wrapper, the last batch id from the
    public progress, and the processor's output as pandas for PySpark's own conversion: the job works on the public
    API alone."""
    monkeypatch.setattr(pyspark_hooks, "PYSPARK_VERSION", "9.9.9")
    pyspark_hooks.enabled.cache_clear()
    pyspark_hooks.install_arrow_output.cache_clear()
    try:
        assert not pyspark_hooks.enabled() and not pyspark_hooks.enabled()
        assert len([r for r in caplog.records if "PySpark 9.9.9 is not the version" in r.message]) == 1
        assert pyspark_hooks.daemon_conf() == {}
        unhooked = pyspark_hooks.JvmShutdown.register(spark, threading.Event())  # the JVM stops as Spark's own
        assert unhooked._registered is None and not unhooked.close()
        output = rows_batch([partition_row(a_state()[1])])
        frame = pyspark_hooks.arrow_output(output)
        assert not frame.attrs and frame.equals(pyspark_hooks.as_pandas(output)) and frame["isr"][0].tolist() == [1, 2]

        class Listener(pyspark_hooks.JsonProgressListener):
            batches: list[int] = []

            def onQueryProgress(self, event: object) -> None:
                self.batches.append(event.progress.batchId)  # type: ignore[attr-defined]

        listener = Listener()
        spark.streams.addListener(listener)
        query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.format("noop")
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_until(lambda: (pyspark_hooks.last_batch_id(query) or 0) >= 1 and listener.batches, 60,
                       "a micro-batch seen by the public progress and the listener")
            assert not hasattr(listener, "_json_jlistener"), "PySpark's own listener wrapper"
        finally:
            query.stop()
            spark.streams.removeListener(listener)
    finally:
        pyspark_hooks.enabled.cache_clear()
        pyspark_hooks.install_arrow_output.cache_clear()
