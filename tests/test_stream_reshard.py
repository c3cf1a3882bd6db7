"""A new state parallelism on an existing checkpoint (streaming.reshard): the layout's next generation names a
new query, balanced over the new task count, seeded from the old query's last commit; the old query's state is
read by Spark's state data source and re-keyed bucket by bucket. (The whole move under a running job, on HDFS,
with no event lost or repeated: tests/test_spark_deploy.py.)"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming.buckets import resolve_layout, task_of_ids
from streaming.processor import unpack
from streaming.reshard import QueryLog, seed_state
from streaming.storage import HadoopDirectory
from tests.test_stream_state import _growing_run

pytestmark = [pytest.mark.spark]

SOURCE = {"replmon.samples": {"0": 613, "1": 932}}


def committed_batch(query_dir: Path, batch: int, tasks: int) -> None:
    """Micro-batch ``batch`` of a query as Spark logs it: its offsets (with the session's recorded settings) and
    its commit."""
    (query_dir / "offsets").mkdir(parents=True, exist_ok=True)
    (query_dir / "commits").mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": str(tasks)}}
    (query_dir / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(metadata)}\n{json.dumps(SOURCE)}")
    (query_dir / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_new_parallelism_starts_a_new_query_balanced_over_its_tasks(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = HadoopDirectory(spark, str(tmp_path / "checkpoint"))
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        first = resolve_layout(spark, checkpoint, 12, parallelism=2)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "1")
    assert (first.query, first.shuffle_partitions, first.resharded_from) == ("state", 2, None)
    assert resolve_layout(spark, checkpoint, 12, parallelism=3) == first  # nothing committed: nothing to move
    for batch in (4, 5):
        committed_batch(tmp_path / "checkpoint" / "state", batch, tasks=2)
    assert resolve_layout(spark, checkpoint, 12, parallelism=2) == first  # the count it runs with
    assert resolve_layout(spark, checkpoint, 12) == first  # none configured: the checkpoint's

    moved = resolve_layout(spark, checkpoint, 12, parallelism=3)
    assert (moved.query, moved.shuffle_partitions) == ("state-1", 3)
    assert moved.resharded_from is not None
    assert (moved.resharded_from.query, moved.resharded_from.batch) == ("state", 5)
    assert moved.resharded_from.bucket_ids == first.bucket_ids
    assert Counter(task_of_ids(max(moved.bucket_ids) + 1, 3)[i] for i in moved.bucket_ids) == Counter(
        {0: 4, 1: 4, 2: 4})
    assert "replmon-buckets-1.json" in checkpoint.list()
    # the move is remembered until the new query commits: a job stopped before that starts it again
    assert resolve_layout(spark, checkpoint, 12, parallelism=3) == moved
    assert QueryLog(checkpoint, "state").source_offsets(5) == json.dumps(SOURCE)
    assert QueryLog(checkpoint, "state").tasks(5) == 2
    committed_batch(tmp_path / "checkpoint" / "state-1", 0, tasks=3)
    assert resolve_layout(spark, checkpoint, 12, parallelism=3) == moved
    assert resolve_layout(spark, checkpoint, 12, parallelism=2).query == "state-2"  # and back


def test_the_old_query_s_state_is_read_and_re_keyed_bucket_by_bucket(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    entries = _growing_run(spark, checkpoint / "state")  # a bucket (id 0) whose table grows each micro-batch
    log = QueryLog(HadoopDirectory(spark, str(checkpoint)), "state")
    last = log.last_committed()
    assert last is not None
    rows = seed_state(spark, str(checkpoint), "state", last, {0: 17}).collect()
    assert [row["bucket"] for row in rows] == [17]
    table = unpack(rows[0]["partitions"])
    assert sorted(key[2] for key in table) == entries  # every entry the last commit held
