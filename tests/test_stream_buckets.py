"""The state bucket layout (streaming.buckets): ids that split the buckets evenly between the state query's tasks
under Spark's own hash partitioning, recorded with the checkpoint, and a changed bucket count refused."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from replmon.core.errors import ReplmonError
from streaming.buckets import (
    LAYOUT_FILE,
    LEGACY_BUCKETS,
    BucketLayout,
    balanced_ids,
    default_buckets,
    resolve_layout,
    task_of_ids,
)
from streaming.parse import processor_input
from streaming.session import STOPPED_CONTEXT, start_failure
from streaming.storage import HadoopDirectory
from tests.test_stream_parsing import KAFKA_RECORD, partition_sample


def test_balanced_ids_take_the_smallest_ids_of_each_task_in_turn() -> None:
    task_of = [1, 1, 0, 1, 0, 0, 1]  # ids 2, 4, 5 on task 0; ids 0, 1, 3, 6 on task 1
    assert balanced_ids(task_of, 5, 2) == [2, 0, 4, 1, 5]
    assert balanced_ids(task_of, 2, 3) == [2, 0]  # more tasks than buckets: the first tasks get one each
    with pytest.raises(ValueError, match="too few"):
        balanced_ids(task_of, 8, 2)  # 4 needed on task 0, which has 3


def conf_values(spark: SparkSession, *keys: str) -> dict[str, str]:
    """The session's values of ``keys``, settings Spark has a default for."""
    values: dict[str, str] = {}
    for key in keys:
        value = spark.conf.get(key)
        assert value is not None, key
        values[key] = value
    return values


@pytest.fixture
def two_tasks(spark: SparkSession) -> Iterator[SparkSession]:
    """The job's 2 state tasks (streaming.session), without adaptive execution merging shuffle partitions."""
    before = conf_values(spark, "spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    yield spark
    for key, value in before.items():
        spark.conf.set(key, value)


def shuffle_tasks(spark: SparkSession, bucket_ids: list[int]) -> Counter[int]:
    """How many of the ids each task of a groupBy on them gets: the state query's shuffle (hash partitioning of
    the grouping key over spark.sql.shuffle.partitions)."""
    ids = spark.createDataFrame([(i,) for i in bucket_ids], "bucket int")
    grouped = ids.groupBy("bucket").count().select(F.spark_partition_id().alias("task"))
    return Counter(row["task"] for row in grouped.collect())


@pytest.mark.spark
def test_a_new_checkpoint_gets_ids_that_split_the_buckets_evenly_between_the_tasks(
        two_tasks: SparkSession, tmp_path: Path) -> None:
    assert shuffle_tasks(two_tasks, list(range(32))) == Counter({1: 20, 0: 12})  # the ids 0..31: one task waits
    checkpoint = HadoopDirectory(two_tasks, str(tmp_path / "checkpoint"))
    layout = resolve_layout(two_tasks, checkpoint, 32)
    assert layout.shuffle_partitions == 2 and len(set(layout.bucket_ids)) == 32
    assert shuffle_tasks(two_tasks, layout.bucket_ids) == Counter({0: 16, 1: 16})
    # recorded: the same on restart
    assert resolve_layout(two_tasks, checkpoint, 32) == layout
    # the job's parse sends every partition to one of the layout's ids, each partition always to the same one
    rows = [(f"c/t/{p}".encode(), json.dumps(partition_sample(cluster="c", topic="t", partition=p)).encode(), 0, p)
            for p in range(2000)]

    def buckets() -> dict[int, int]:
        taken = processor_input(two_tasks.createDataFrame(rows, KAFKA_RECORD), layout.bucket_ids)
        return {json.loads(row["sample"])["partition"]: row["bucket"] for row in taken.collect() if row["kind"] == "p"}

    first = buckets()
    assert sorted(first) == list(range(2000)) and set(first.values()) == set(layout.bucket_ids)
    assert buckets() == first


@pytest.mark.spark
def test_each_id_s_task_is_the_one_spark_s_hash_partitioning_gives(spark: SparkSession) -> None:
    """The task of each id is computed without Spark (a Spark job at every new checkpoint's start cost ~3 s):
    Spark's own ``pmod(hash(id), tasks)`` of an int, and its shuffle, are the oracles."""
    ids = spark.range(5000).select(F.col("id").cast("int").alias("id"))
    for tasks in (1, 2, 3, 7, 64):
        rows = ids.select("id", F.pmod(F.hash("id"), F.lit(tasks)).alias("task")).orderBy("id").collect()
        assert task_of_ids(5000, tasks) == [int(row["task"]) for row in rows]
    before = conf_values(spark, "spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        assert shuffle_tasks(spark, list(range(40))) == Counter(task_of_ids(40, 3))
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def test_a_new_checkpoint_s_default_count_is_a_few_buckets_per_state_task() -> None:
    assert [default_buckets(tasks) for tasks in (1, 2, 4, 16, 10_000)] == [8, 16, 32, 128, 65536]


@pytest.mark.spark
def test_an_unset_bucket_count_is_the_checkpoint_s_own(two_tasks: SparkSession, tmp_path: Path) -> None:
    """Unset: a new checkpoint gets the default count of its state tasks, balanced and recorded; a job on it
    with the count unset, or set to the recorded one, goes on with the recorded layout (a checkpoint written
    under another default keeps its count); a checkpoint written before layouts were recorded has the count of
    its time."""
    new = HadoopDirectory(two_tasks, str(tmp_path / "new"))
    layout = resolve_layout(two_tasks, new, None)
    assert layout.state_buckets == default_buckets(2) == 16 and layout.shuffle_partitions == 2
    assert shuffle_tasks(two_tasks, layout.bucket_ids) == Counter({0: 8, 1: 8})
    assert resolve_layout(two_tasks, new, None) == resolve_layout(two_tasks, new, 16) == layout
    older = HadoopDirectory(two_tasks, str(tmp_path / "older"))
    thirty_two = resolve_layout(two_tasks, older, 32)  # a checkpoint of the default before: 32 buckets
    assert resolve_layout(two_tasks, older, None) == thirty_two and thirty_two.state_buckets == 32
    unrecorded = tmp_path / "unrecorded"
    (unrecorded / "state" / "offsets").mkdir(parents=True)
    legacy = resolve_layout(two_tasks, HadoopDirectory(two_tasks, str(unrecorded)), None)
    assert legacy == BucketLayout(state_buckets=LEGACY_BUCKETS, shuffle_partitions=None,
                                  bucket_ids=list(range(LEGACY_BUCKETS)))


@pytest.mark.spark
def test_a_checkpoint_written_before_layouts_keeps_its_ids(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"  # a running job's checkpoint, no layout recorded
    (checkpoint / "state" / "offsets").mkdir(parents=True)
    layout = resolve_layout(spark, HadoopDirectory(spark, str(checkpoint)), 8)
    assert layout == BucketLayout(state_buckets=8, shuffle_partitions=None, bucket_ids=list(range(8)))
    assert BucketLayout.model_validate_json((checkpoint / LAYOUT_FILE).read_text()) == layout


@pytest.mark.spark
def test_a_changed_bucket_count_is_refused_with_the_way_out(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    directory = HadoopDirectory(spark, str(checkpoint))
    resolve_layout(spark, directory, 8)
    recorded = (checkpoint / LAYOUT_FILE).read_text()
    with pytest.raises(ReplmonError) as refused:
        resolve_layout(spark, directory, 16)
    message = str(refused.value)
    assert "stream.state_buckets is 16" in message and str(checkpoint) in message
    assert "Set state_buckets back to 8" in message and "new checkpoint_dir" in message
    assert (checkpoint / LAYOUT_FILE).read_text() == recorded  # nothing changed
    (checkpoint / LAYOUT_FILE).write_text("{not json")
    with pytest.raises(ReplmonError, match="cannot read the state bucket layout"):
        resolve_layout(spark, directory, 8)
    (checkpoint / LAYOUT_FILE).write_text(recorded.replace('"state_buckets":8', '"state_buckets":9'))
    with pytest.raises(ReplmonError, match="damaged: 8 distinct bucket ids for 9 buckets"):
        resolve_layout(spark, directory, 9)


def test_a_checkpoint_or_history_the_job_cannot_write_is_one_clear_error_before_it_starts(
        spark: SparkSession, tmp_path: Path) -> None:
    """A directory that cannot be made (its parent is a file, or /proc) is named with its setting and the
    filesystem's reason before any query starts, not as a Java stack from deep in the job's start."""
    from replmon.core.config import ReplmonConfig, StreamConfig, TransportConfig
    from streaming.job import start_job

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    good = tmp_path / "good"
    for checkpoint, history, setting, where in [
            (blocker / "checkpoint", good / "history", "stream.checkpoint_dir", blocker / "checkpoint"),
            (good / "checkpoint", Path("/proc/replmon-history"), "stream.history_dir", "/proc/replmon-history")]:
        config = ReplmonConfig(transport=TransportConfig(bootstrap_servers=["127.0.0.1:1"]), stream=StreamConfig(
            checkpoint_dir=str(checkpoint), history_dir=str(history), metrics_port=0))
        with pytest.raises(ReplmonError) as refused:
            start_job(spark, config)
        message = str(refused.value)
        assert message.startswith(f"cannot write to {where} ({setting}): ") and "\n" not in message, message
        assert not spark.streams.active
    assert not list(good.glob("checkpoint/**/*"))  # nothing written where it could be: no layout, no probe left


@pytest.mark.spark
def test_a_spark_start_failure_is_told_by_its_innermost_java_exception(spark: SparkSession) -> None:
    """What ``cannot start Spark (master ...): ...`` says (streaming.session.start_failure), from real Py4J errors:
    the innermost Java exception, not Py4J's "An error occurred while calling None.org.apache...SparkSession"."""
    jvm: Any = spark._jvm
    with pytest.raises(Exception) as info:  # PySpark gives a Py4J error or a captured one
        jvm.java.lang.Integer.parseInt("x")
    assert start_failure(info.value) == 'java.lang.NumberFormatException: For input string: "x"'
    # a standalone master that never took the application: after its registration timeout Spark stops the context
    # it was starting, and the session's constructor fails on the stopped context with this message
    with pytest.raises(Exception) as info:  # PySpark gives a Py4J error or a captured one
        jvm.java.util.Objects.requireNonNull(None, f"{STOPPED_CONTEXT}. This stopped SparkContext was created at:")
    assert start_failure(info.value) == (
        "Spark stopped the context it was starting: the master did not take the application (an unreachable "
        "master: \"All masters are unresponsive\" in Spark's log above; stream.spark_master)")
    # no JVM answered at all: PySpark's own error
    gateway = "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."
    assert start_failure(RuntimeError(gateway)) == gateway
