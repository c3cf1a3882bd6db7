"""The bucket state store on a real Spark streaming query: a bucket's table, megabytes of it, is read back whole
in every micro-batch after the one that saved it. (The short read of large value-state updates in Spark 4.0.0,
SPARK-53870, that BucketTable avoids is a race this test does not provoke: bench_stream's memory phase, 300k
partitions, did.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues
from pyspark.sql.types import LongType, StructField, StructType

from streaming.processor import BucketTable
from tests.kafka_view import wait_until

pytestmark = [pytest.mark.spark]

ENTRY_BYTES = 2_000_000
"""What each micro-batch adds to the bucket's table: incompressible bytes, so that the pickled table grows by
as much (300k partitions in the default 32 buckets make ~8 MB tables)."""
OUTPUT = StructType([StructField("entries_before", LongType()), StructField("table_bytes", LongType())])


class GrowingTable(StatefulProcessor):
    """Each batch: load the bucket's table, add one big entry, save it, and say what it found."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.table = BucketTable(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        table: dict[Any, Any] = self.table.load()
        before = len(table)
        table[("c", "t", before)] = os.urandom(ENTRY_BYTES)
        self.table.save(table)
        yield pd.DataFrame({"entries_before": [before], "table_bytes": [sum(len(v) for v in table.values())]})

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
