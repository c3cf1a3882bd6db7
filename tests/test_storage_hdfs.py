"""What the job keeps on a Hadoop filesystem (a real HDFS on loopback): the files beside the checkpoint through the
session's Hadoop FileSystem, and the history through Spark's Parquet writer, read back as `replmon events` reads
it."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from replmon.cli import main
from replmon.core.errors import ReplmonError
from replmon.testbed.hdfs import MiniHdfs
from streaming.buckets import LAYOUT_FILE, resolve_layout
from streaming.sinks import HistoryWriter, read_events
from streaming.storage import HadoopDirectory
from tests.test_stream_driver import metrics_rows
from tests.test_stream_history import output

pytestmark = [pytest.mark.hdfs, pytest.mark.spark]

EVENT = {"event_id": "e1", "type": "ISR_SHRINK", "severity": "warning", "cluster": "c", "topic": "t",
         "partition": 0, "event_time_ms": 1_700_000_000_000, "detected_time_ms": 1_700_000_000_500,
         "brokers": [3], "isr": [1, 2], "previous_isr": [1, 2, 3], "message": "m"}


def test_the_files_beside_the_checkpoint_live_on_hdfs(hdfs: MiniHdfs, spark: SparkSession, topic_name: str) -> None:
    location = f"{hdfs.uri}/{topic_name}/checkpoint"
    directory = HadoopDirectory(spark, location)
    assert directory.list() == [] and not directory.exists(LAYOUT_FILE)
    layout = resolve_layout(spark, directory, 8)
    assert directory.list() == [LAYOUT_FILE] and directory.read_bytes(LAYOUT_FILE) == layout.model_dump_json().encode()
    assert resolve_layout(spark, HadoopDirectory(spark, location), 8) == layout  # read back, not made again
    with pytest.raises(Exception, match="already exists"):  # never replaced: a second job cannot overwrite it
        directory.create(LAYOUT_FILE, b"{}")
    with pytest.raises(ReplmonError, match="Set state_buckets back to 8"):
        resolve_layout(spark, directory, 16)
    with pytest.raises(ReplmonError, match=r"no Hadoop filesystem for nosuchfs://"):
        HadoopDirectory(spark, "nosuchfs://bucket/checkpoint")


def test_the_history_on_hdfs_is_written_by_spark_and_read_back_once_per_event(
    hdfs: MiniHdfs, spark: SparkSession, topic_name: str,
) -> None:
    location = f"{hdfs.uri}/{topic_name}/history"
    writer = HistoryWriter(location, spark)
    assert read_events(location, spark).empty
    writer.write_events([EVENT], batch_id=7)
    writer.write_events([EVENT], batch_id=7)  # the replay of batch 7: appended again, read once
    writer.write_events([{**EVENT, "event_id": "e2", "event_time_ms": 1_700_000_001_000}], batch_id=8)
    events = read_events(location, spark)
    assert list(events["event_id"]) == ["e1", "e2"] and list(events["brokers"][0]) == [3]
    assert set(events["date"]) == {"2023-11-14"}
    # the partition snapshots: from the micro-batch's output as Spark holds it (not from the driver's rows), the
    # rows the processor marked only
    rows = metrics_rows(4, unhealthy={1}).assign(history=[True, True, False, True], sample_time_ms=1_700_000_000_000)
    writer.write_partitions(output(spark, rows))
    partitions = spark.read.parquet(f"{location}/partitions").orderBy("partition").collect()
    marked = rows[rows["history"]]
    assert [(r["cluster"], str(r["date"]), r["partition"], r["isr_size"]) for r in partitions] == [
        (c, "2023-11-14", int(p), int(i)) for c, p, i in marked[["cluster", "partition", "isr_size"]].itertuples(
            index=False)]
    assert partitions[1]["follower_lag"] == dict(rows.loc[1, "follower_lag"])
    assert "history" not in partitions[0].asDict() and "kind" not in partitions[0].asDict()
    with pytest.raises(ValueError, match="takes a Spark session"):
        HistoryWriter(location)



def test_replmon_events_reads_a_history_on_hdfs(hdfs: MiniHdfs, spark: SparkSession, topic_name: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    location = f"{hdfs.uri}/{topic_name}/history"
    HistoryWriter(location, spark).write_events([EVENT, {**EVENT, "event_id": "e2", "type": "ISR_EXPAND"}], 1)
    assert main(["events", "--history-dir", location, "--json", "--type", "isr_expand"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["event_id"] == "e2"
    missing = f"{hdfs.uri}/{topic_name}/histroy"
    assert main(["events", "--history-dir", missing, "--json"]) == 2
    assert capsys.readouterr().err.startswith(f"replmon: no history at {missing}: no such directory")
