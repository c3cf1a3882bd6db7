"""The job where a platform's Spark runs: a standalone master and two workers on loopback, each worker in a mount
namespace of its own that hides the project's source tree and the driver's /tmp (replmon.testbed.sparkcluster),
checkpoint and history on a real HDFS (replmon.testbed.hdfs). The code reaches the executors only through the
archive the job ships; the driver starts under spark-submit with the command `replmon package` prints.

Under producers and broker faults a worker is SIGKILLed mid-stream (its state tasks move to the other executor,
which reads their state from HDFS), then the driver is SIGKILLed and started again with `replmon stream` and one
state task for the one worker left (the state moves to a new query, streaming.reshard): every
event an uninterrupted run computes from the same samples is in the events topic exactly once, with the same
content, the gauges end where that run ends, and the history on HDFS holds the same events. Last, a SIGTERM to the
driver's JVM alone (what reaches a driver under spark-submit) stops the job between two micro-batches.

The watched cluster and the transport are the test's own (replmon.testbed.harness.scratch_clusters), not the
session's: the test injects its faults there, so it runs beside the tests of the session cluster (its xdist group,
tests/conftest.py), not after them."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.reliability import FaultLoad, end_offsets, healthy_sampled, job_events, verify
from replmon.cli.package import submit_command
from replmon.core import locations
from replmon.core.config import ReplmonConfig, load_config
from replmon.testbed.harness import Pipeline, scratch_clusters, spawn_stage
from replmon.testbed.hdfs import MiniHdfs
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.sparkcluster import SPARK_HOME, StandaloneCluster
from streaming import code_archive
from streaming.buckets import BucketLayout
from streaming.detect import DetectConfig
from streaming.reshard import QueryLog
from streaming.session import KAFKA_CONNECTOR, ivy_conf, ivy_dir
from streaming.sinks import read_events
from streaming.storage import HadoopDirectory
from tests.pipeline import JOB_START_DEADLINE_S, TOPIC_PREFIX

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.hdfs]


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path / "spark", workers=2, cores=1, memory="1g") as cluster:
        yield cluster


def spark_submit(pipeline: Pipeline, master: str, work: Path) -> list[str]:
    """The job's spark-submit command as `replmon package` prints it, with the master and the Ivy settings of
    this machine's Maven mirror (what a site's spark-defaults.conf would hold)."""
    archive = code_archive.build(work / "dist")
    words = submit_command(archive, str(pipeline.config))
    ivy = ivy_conf(ivy_dir(), [KAFKA_CONNECTOR])
    return [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master,
            "--conf", f"spark.jars.ivy={ivy['spark.jars.ivy']}",
            "--conf", f"spark.jars.ivySettings={ivy['spark.jars.ivySettings']}", *words[1:]]


@pytest.mark.timeout(1200)
def test_the_job_on_a_standalone_cluster_with_hdfs_survives_a_worker_and_its_driver_killed(
    standalone: StandaloneCluster, hdfs: MiniHdfs, spark: SparkSession, topic_name: str, tmp_path: Path,
) -> None:
    # samples and events on a cluster of their own, as in production: the faults hit the watched brokers, not the
    # job's source and sink (on the watched cluster every fault stalled the job's reads and writes for its length)
    with scratch_clusters(tmp_path / "clusters") as (watched, transport):
        run_on_the_cluster(standalone, hdfs, spark, watched, transport, topic_name, tmp_path)


def run_on_the_cluster(standalone: StandaloneCluster, hdfs: MiniHdfs, spark: SparkSession, watched: LocalCluster,
                       transport: LocalCluster, topic_name: str, tmp_path: Path) -> None:
    topics = {f"{TOPIC_PREFIX}{topic_name}-{b}": b for b in watched.broker_ids}
    view = KafkaView(watched.bootstrap_servers)
    try:
        for topic, leader in topics.items():
            view.create_topic(topic, assignment={0: [leader, *(b for b in watched.broker_ids if b != leader)]})
    finally:
        view.close()
    store = f"{hdfs.uri}/{topic_name}"
    (tmp_path / "pipeline").mkdir()
    pipeline = Pipeline(
        tmp_path / "pipeline", watched, transport, include=[re.escape(t) for t in topics],
        topic_names=f"deploy-{topic_name}", overrides={"stream": {
            "spark_master": standalone.master_url, "checkpoint_dir": f"{store}/checkpoint",
            "history_dir": f"{store}/history", "driver_host": "127.0.0.1", "driver_bind_address": "127.0.0.1",
            # every worker is 127.0.0.1 here: without this Spark reads another executor's shuffle files from
            # "the same host's" disk, which each worker's private /tmp hides (distinct hosts in a real cluster)
            "spark_conf": {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                           "spark.shuffle.readHostLocalDisk": "false"}}})
    config = load_config(pipeline.config)
    python = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}  # the executors' too
    load = FaultLoad(watched, topics, random.Random(22))
    try:
        pipeline.spawn("collect")
        pipeline.procs["stream"] = spawn_stage(spark_submit(pipeline, standalone.master_url, tmp_path),
                                               pipeline.log("stream"), env=python)
        pipeline.wait_first_batch(JOB_START_DEADLINE_S)
        wait_until(lambda: all(pipeline.metric("replmon_partition_isr_size", topic=t, partition="0") == 3
                               for t in topics), JOB_START_DEADLINE_S, "the job to see the topics")
        assert all(list(standalone.work_dir(i).glob("app-*/*/stderr")) for i in (0, 1)), "an executor on each worker"
        load.start()
        loaded = pipeline.batches()
        wait_until(lambda: pipeline.batches() >= loaded + 2, 120, "micro-batches under the load")

        standalone.kill_worker(0)  # mid-stream: its state task moves to worker 1, which reads its state from HDFS
        after_kill = pipeline.batches()
        wait_until(lambda: pipeline.batches() >= after_kill + 3 and sum(load.faults.values()) >= 1, 240,
                   "micro-batches on the surviving executor, through a broker fault")

        # the driver SIGKILLed, started again with the other entry on the checkpoint in HDFS, and one state task
        # for the one worker left: the state moves to a new query (streaming.reshard)
        pipeline.kill("stream")
        pipeline.reconfigure("stream", {"stream": {"state_parallelism": 1}})
        pipeline.wait_first_batch(JOB_START_DEADLINE_S)
        # the gauges of every partition right after that first micro-batch (the backlog of the downtime)
        assert all(pipeline.metric("replmon_partition_isr_size", topic=t, partition="0") for t in topics)
    except BaseException:
        pipeline.stop()
        raise
    finally:
        load.close()
    try:
        check_caught_up_and_stored(pipeline, spark, config, topics, tmp_path)
        check_stops_on_the_jvms_sigterm(pipeline)
    finally:
        pipeline.stop()


def check_caught_up_and_stored(pipeline: Pipeline, spark: SparkSession, config: ReplmonConfig,
                               topics: dict[str, int], tmp_path: Path) -> None:
    transport = pipeline.transport.bootstrap_servers
    wait_until(lambda: healthy_sampled(transport, pipeline.samples_topic, topics), 120,
               "samples of the healed, quiet partitions")
    until = end_offsets(transport, pipeline.samples_topic)
    result, gauges, ref = verify(transport, pipeline.samples_topic, pipeline.events_topic, pipeline.metrics_port,
                                 DetectConfig.from_stream_config(config.stream), set(topics), until,
                                 deadline_s=JOB_START_DEADLINE_S, ignore_stale=True)
    actual = job_events(transport, pipeline.events_topic, ref, ignore_stale=True)
    assert result.expected > 0 and result.by_type.get("ISR_SHRINK"), result.by_type
    assert result.ok, result.describe(ref, actual)
    assert not gauges, gauges

    # everything the job keeps is on HDFS, nothing on the driver's disk
    checkpoint = HadoopDirectory(spark, config.stream.checkpoint_dir)
    assert checkpoint.exists("replmon-buckets.json") and checkpoint.is_dir("state/offsets")
    moved = BucketLayout.model_validate_json(checkpoint.read_bytes("replmon-buckets-1.json") or b"")
    assert (moved.query, moved.shuffle_partitions) == ("state-1", 1) and moved.resharded_from is not None
    new_query = QueryLog(checkpoint, "state-1")
    last = new_query.last_committed()
    assert last is not None and new_query.tasks(last) == 1
    assert not [p for p in tmp_path.rglob("*") if p.name in ("checkpoint", "history")]
    assert not locations.is_local(config.stream.history_dir)

    missing: list[str] = []

    def all_in_history() -> bool:  # a micro-batch writes its history after it publishes its events
        history = read_events(config.stream.history_dir, spark)
        missing[:] = sorted(set(ref.events) - set(history["event_id"] if not history.empty else ()))
        return not missing

    try:
        wait_until(all_in_history, 60, "every event in the history on HDFS", interval_s=2)
    except AssertionError:
        pytest.fail(f"{len(missing)} events not in the history on HDFS, e.g. {missing[:5]}")
    # the partition snapshots, written by the executors from the micro-batches: every topic's, each of its leaders
    # each topic's last leader (a micro-batch holding several leader changes of a partition shows only its last)
    changes = sorted((e["topic"], e["leader_epoch"]) for e in ref.events.values() if e["type"] == "LEADER_CHANGE")
    leaders = set(dict(changes).items())
    unseen: list[Any] = []

    def every_leader_snapshotted() -> bool:
        snapshots = (spark.read.parquet(locations.join(config.stream.history_dir, "partitions"))
                     .filter(F.col("topic").isin(list(topics))).select("topic", "leader_epoch").distinct().collect())
        seen = {(r["topic"], r["leader_epoch"]) for r in snapshots}
        unseen[:] = sorted(leaders - seen) + sorted(set(topics) - {topic for topic, _ in seen})
        return not unseen

    try:
        wait_until(every_leader_snapshotted, 60, "a partition snapshot of every topic and leader epoch", interval_s=2)
    except AssertionError:
        pytest.fail(f"topics or last leader epochs without a partition snapshot on HDFS: {unseen}; leader changes "
                    f"{changes}")


def driver_jvm(pid: int) -> int:
    """The driver JVM PySpark started for the Python process ``pid`` (its child)."""
    children = psutil.Process(pid).children()
    jvms = [c.pid for c in children if c.name() == "java"]
    assert len(jvms) == 1, f"the driver's JVM among the children {children} of {pid}"
    return jvms[0]


def check_stops_on_the_jvms_sigterm(pipeline: Pipeline) -> None:
    """A SIGTERM to the driver's JVM alone, as a Kubernetes pod's deletion reaches the driver under spark-submit
    (the JVM there, the job's Python its child): the job stops between two micro-batches, without an error in its
    log, and its Python ends with 0. Stopped by the JVM's own shutdown instead, the SparkContext stops under the
    micro-batch in flight: the query ends with an INTERNAL_ERROR (a NullPointerException of the stopped session).
    (A micro-batch whose offsets were written but whose handler had not begun is run again at the next start: the
    stop may land in its planning.)"""
    proc = pipeline.procs["stream"]
    log = pipeline.log("stream")
    start = log.stat().st_size
    os.kill(driver_jvm(proc.pid), signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        tail = log.read_text(errors="replace")[start:][-3000:]
        pytest.fail(f"the job still runs 60 s after its JVM's SIGTERM: {tail}")
    said = log.read_text(errors="replace")[start:]
    assert proc.returncode == 0 and "replmon stream: stopping" in said, said[-3000:]
    for error in ("INTERNAL_ERROR", "NullPointerException", "StackOverflowError", "Traceback"):
        assert error not in said, said[-3000:]
