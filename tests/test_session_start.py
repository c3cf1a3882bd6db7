"""The job's Spark session as ``replmon stream`` starts it, twice on a cache of its own: the first start has Ivy
resolve the Kafka connector and remembers the jars, the second names them instead (no Ivy, no copies among the
session's files); both read the same records from Kafka through the connector, the second also through the job's
own source (streaming.source), its read of a partition split among ``stream.read_tasks`` tasks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaProducer

from replmon.testbed.kafka_view import KafkaView
from replmon.testbed.localcluster import LocalCluster
from streaming.session import KAFKA_CONNECTOR, RESOLVED, ivy_dir

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

START = """
import json, sys
from replmon.core.config import StreamConfig
from streaming.session import get_session
spark = get_session(StreamConfig(spark_master="local[1]", code_archive="none"), app_name="replmon-session-test")
read = (spark.read.format("kafka").option("kafka.bootstrap.servers", sys.argv[1]).option("subscribe", sys.argv[2])
        .option("startingOffsets", "earliest").load())
conf = spark.sparkContext.getConf()
out = {"records": sorted(r.value.decode() for r in read.select("value").collect()),
       "packages": conf.get("spark.jars.packages", None), "jars": conf.get("spark.jars", ""),
       "files": conf.get("spark.files", "")}
if len(sys.argv) > 3:  # the job's own source, its read split into stream.read_tasks tasks
    from replmon.core.config import ReplmonConfig
    from streaming.source import kafka_source
    config = ReplmonConfig(transport={"bootstrap_servers": [sys.argv[1]], "samples_topic": sys.argv[2]},
                           stream={"starting_offsets": "earliest", "read_tasks": int(sys.argv[4])})
    batches = []
    def each(batch, batch_id):
        batches.append({"tasks": batch.rdd.getNumPartitions(),
                        "records": sorted(r.value.decode() for r in batch.select("value").collect())})
    query = (kafka_source(spark, config).writeStream.foreachBatch(each).trigger(availableNow=True)
             .option("checkpointLocation", sys.argv[3]).start())
    query.awaitTermination(240)
    out["stream"] = batches
print(json.dumps(out))
spark.stop()
"""


def start(cache: Path, bootstrap: str, topic: str, *stream: str) -> dict[str, object]:
    """``stream``: a checkpoint directory and ``stream.read_tasks``, to read the topic through the job's source."""
    env = {**os.environ, "REPLMON_CACHE_DIR": str(cache), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-c", START, bootstrap, topic, *stream], capture_output=True, text=True,
                          env=env, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(600)
def test_the_connector_is_resolved_once_then_given_as_jars(
        healthy_cluster: LocalCluster, topic_name: str, tmp_path: Path) -> None:
    view = KafkaView(healthy_cluster.bootstrap_servers)
    try:
        view.create_topic(topic_name, partitions=1)
    finally:
        view.close()
    producer = KafkaProducer(bootstrap_servers=healthy_cluster.bootstrap_servers, acks="all")
    try:
        for n in range(3):
            producer.send(topic_name, f"m{n}".encode()).get(timeout=30)
    finally:
        producer.close()
    cache = tmp_path / "cache"
    downloaded = ivy_dir() / "cache"  # Ivy's downloads on this machine (prefetched): no network needed
    if downloaded.is_dir():
        shutil.copytree(downloaded, cache / "ivy" / "cache")

    first = start(cache, healthy_cluster.bootstrap_servers, topic_name)
    assert first["packages"] == KAFKA_CONNECTOR
    assert first["records"] == ["m0", "m1", "m2"]
    resolved = json.loads((cache / "ivy" / RESOLVED).read_text())
    assert resolved["packages"] == [KAFKA_CONNECTOR]
    assert any("spark-sql-kafka-0-10" in Path(j).name for j in resolved["jars"])
    assert all(Path(j).is_file() and Path(j).is_relative_to(cache) for j in resolved["jars"])

    # the job's source splits the one partition's 3 records among 3 read tasks (Kafka's minPartitions), each
    # record read once
    second = start(cache, healthy_cluster.bootstrap_servers, topic_name, str(tmp_path / "checkpoint"), "3")
    assert second["packages"] is None
    assert second["records"] == ["m0", "m1", "m2"]
    assert second["stream"] == [{"tasks": 3, "records": ["m0", "m1", "m2"]}]
    named = [Path(j.removeprefix("file:")).name for j in str(second["jars"]).split(",")]
    assert any("spark-sql-kafka-0-10" in n for n in named) and any("kafka-clients" in n for n in named)
    assert not [n for n in named if "hadoop-client" in n], "Spark's own Hadoop client is not given again"
    assert len(named) < len(resolved["jars"])
    assert not second["files"], "no jar copied among the session's files"

