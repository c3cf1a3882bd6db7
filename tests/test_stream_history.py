"""The history's partition snapshots, written by Spark's Parquet writer from a micro-batch's output (they never
pass through the driver), into a local directory: the marked rows only, one schema whatever is null."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from streaming.processor import KIND_PARTITION, OUTPUT_COLUMNS, OUTPUT_SCHEMA
from streaming.sinks import HistoryWriter, read_events
from tests.test_stream_driver import metrics_rows


def output(spark: SparkSession, rows: pd.DataFrame) -> DataFrame:
    """``rows`` as the processor's output of a micro-batch, as Spark holds it."""
    out = rows.assign(kind=KIND_PARTITION, event_id=None, event_type=None, payload=None, served=False,
                      served_rows=None)
    return spark.createDataFrame(out[OUTPUT_COLUMNS], schema=OUTPUT_SCHEMA)


def test_history_files_share_one_schema_whatever_is_null(spark: SparkSession, tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path)
    first = metrics_rows(2, unhealthy={1}).assign(min_insync_replicas=None, hw_lag=None)
    second = metrics_rows(2, unhealthy=set()).assign(sample_time_ms=200_000)
    writer.write_partitions(output(spark, first))
    writer.write_partitions(output(spark, second))
    writer.write_events([{"event_id": "a", "type": "STALE", "severity": "warning", "cluster": "c",
                          "event_time_ms": 5, "detected_time_ms": 6, "message": "m"}], batch_id=1)
    writer.write_events([{"event_id": "b", "type": "ISR_SHRINK", "severity": "warning", "cluster": "c",
                          "topic": "t", "partition": 0, "event_time_ms": 7, "detected_time_ms": 8, "brokers": [3],
                          "lag": 12, "message": "m"}], batch_id=2)
    partitions = pq.read_table(str(tmp_path / "partitions")).to_pandas()
    assert len(partitions) == 4
    assert partitions["min_insync_replicas"].isna().sum() == 2
    events = read_events(tmp_path)
    assert list(events["event_id"]) == ["a", "b"] and list(events["brokers"][1]) == [3]


def test_history_holds_the_marked_snapshots_with_their_values(spark: SparkSession, tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path)
    rows = metrics_rows(3, unhealthy={1}).astype({"hw_lag": object, "follower_lag": object})
    rows.loc[0, "hw_lag"] = None
    rows.at[2, "follower_lag"] = None
    writer.write_partitions(output(spark, rows))
    later = rows.assign(sample_time_ms=6_000, high_watermark=15, history=[False, True, False])
    later.loc[1, ["isr_size", "health"]] = [1, 1]
    writer.write_partitions(output(spark, later))
    writer.write_partitions(output(spark, later.assign(history=False)))
    written = pq.read_table(str(tmp_path / "partitions")).sort_by([("sample_time_ms", "ascending"),
                                                                   ("partition", "ascending")]).to_pylist()
    assert [(r["partition"], r["sample_time_ms"]) for r in written] == [(0, 5_000), (1, 5_000), (2, 5_000),
                                                                        (1, 6_000)]
    assert not {"history", "kind", "served", "served_rows"} & set(written[0])
    assert {r["date"] for r in written} == {"1970-01-01"} and {r["cluster"] for r in written} == {"c"}
    first = written[:3]
    assert first[0]["hw_lag"] is None and first[1]["hw_lag"] == 0
    assert dict(first[1]["follower_lag"]) == {2: 0, 3: 7} and first[2]["follower_lag"] is None
    assert first[1]["isr"] == [1, 2] and written[3]["isr_size"] == 1 and written[3]["high_watermark"] == 15
