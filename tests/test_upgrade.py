"""An upgrade of the streaming job on a real checkpoint: the Spark checkpoint, the samples topic and the events
topic written by the version before ``partition_batch/v1``, the columnar state and the executors' events
(``tests/data/upgrade/spark_checkpoint.py`` made them with that version), its last micro-batch run and never
committed. This version's job starts on that checkpoint while the collector, upgraded too, publishes batches (a
mixed samples topic). Every event an uninterrupted run of the detection makes of all the samples is in the events
topic once, none other; the gauges end where that run ends; each unclean election destroyed the committed
messages the scenario scripted."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from bench.reliability import end_offsets, job_events, verify
from collectors.publisher import encode_records
from replmon.contracts.events import EventType
from replmon.contracts.samples import PartitionSample
from replmon.core.config import load_config
from replmon.core.processes import stop_processes
from replmon.testbed.harness import log_tail, spawn_stage, stage_command, write_config
from replmon.testbed.kafka_view import KafkaView
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster.cluster import free_port
from streaming.detect import DetectConfig
from tests.pipeline import JOB_START_DEADLINE_S

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

FIXTURE = Path(__file__).resolve().parent / "data" / "upgrade"
_spec = importlib.util.spec_from_file_location("spark_checkpoint", FIXTURE / "spark_checkpoint.py")
assert _spec is not None and _spec.loader is not None
scenario = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scenario)


def replay(bootstrap: str, topic: str, records: list[dict[str, Any]], partitions: int) -> None:
    """The records into a new topic, each in its partition at its offset (the checkpoint's offsets point there)."""
    view = KafkaView(bootstrap)
    try:
        view.create_topic(topic, partitions=partitions, replication_factor=3)
    finally:
        view.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_in_flight_requests_per_connection=1)
    try:
        for r in records:
            meta = producer.send(topic, partition=r["partition"], key=r["key"] and r["key"].encode(),
                                 value=r["value"].encode(),
                                 headers=[(k, v.encode()) for k, v in r["headers"]]).get(timeout=30)
            assert (meta.partition, meta.offset) == (r["partition"], r["offset"]), (topic, r)
    finally:
        producer.close()


@pytest.fixture
def checkpoint_path_held() -> Iterator[None]:
    """The checkpoint's one path (:data:`scenario.CHECKPOINT`) held for the test: two test runs on one machine would
    otherwise extract the checkpoint over each other's and delete it under each other's job (then events repeat)."""
    lock = scenario.CHECKPOINT.parent.with_name(scenario.CHECKPOINT.parent.name + ".lock")
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("checkpoint_path_held")
def test_a_checkpoint_and_topics_of_the_previous_version_go_on_with_no_event_lost_or_repeated(
        cluster: LocalCluster, tmp_path: Path) -> None:
    written = json.loads((FIXTURE / "spark-topics.json").read_text())
    bootstrap = cluster.bootstrap_servers
    replay(bootstrap, scenario.SAMPLES_TOPIC, written["samples"], scenario.TOPIC_PARTITIONS)
    replay(bootstrap, scenario.EVENTS_TOPIC, written["events"], scenario.TOPIC_PARTITIONS)
    checkpoint = scenario.CHECKPOINT  # where the previous version wrote it (an upgrade in place)
    shutil.rmtree(checkpoint.parent, ignore_errors=True)
    with tarfile.open(FIXTURE / "spark-checkpoint.tar.gz") as tar:
        tar.extractall(checkpoint.parent, filter="data")
    old_events = {json.loads(r["value"])["event_id"] for r in written["events"]}
    uncommitted = [r for r in written["events"]
                   if ["replmon-batch", str(written["uncommitted_batch"])] in r["headers"]]
    assert uncommitted, "the fixture's micro-batch without a commit had written events"

    # the collector, upgraded, publishes the next cycles as batches
    samples = [PartitionSample.model_validate(s) for cycle in scenario.NEW_CYCLES
               for s in scenario.cycle_samples(cycle, written["base_ms"])]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        records = encode_records(samples)
        assert all(value[:4] == b"\xff\xff\xff\xff" for _, value, _ in records)
        for key, value, _ in records:
            producer.send(scenario.SAMPLES_TOPIC, key=key, value=value)
        producer.flush()
    finally:
        producer.close()
    until = end_offsets(bootstrap, scenario.SAMPLES_TOPIC)

    settings = {
        "transport": {"bootstrap_servers": bootstrap.split(","), "samples_topic": scenario.SAMPLES_TOPIC,
                      "events_topic": scenario.EVENTS_TOPIC, "quarantine_topic": scenario.QUARANTINE_TOPIC,
                      "topic_partitions": scenario.TOPIC_PARTITIONS},
        "stream": {"trigger_interval_s": 1, "checkpoint_dir": str(checkpoint),
                   "history_dir": str(tmp_path / "history"), "starting_offsets": "earliest",
                   "max_offsets_per_trigger": scenario.MAX_OFFSETS, "metrics_port": free_port(),
                   "state_buckets": scenario.STATE_BUCKETS, "stale_after_s": scenario.STALE_AFTER_S}}
    config = load_config(write_config(tmp_path / "replmon.yaml", settings))
    log = tmp_path / "stream.log"
    job = spawn_stage(stage_command("stream", tmp_path / "replmon.yaml"), log)  # this version's job, as deployed
    try:
        topics = {topic for topic, _ in scenario.PARTITIONS}
        result, gauges, ref = verify(bootstrap, scenario.SAMPLES_TOPIC, scenario.EVENTS_TOPIC,
                                     config.stream.metrics_port, DetectConfig.from_stream_config(config.stream),
                                     topics, until, deadline_s=JOB_START_DEADLINE_S)
        assert job.poll() is None, log_tail(log)
    finally:
        stop_processes([job])
        shutil.rmtree(checkpoint.parent, ignore_errors=True)
    actual = job_events(bootstrap, scenario.EVENTS_TOPIC, ref)
    assert result.ok, result.describe(ref, actual)
    assert not gauges, gauges
    assert old_events < set(ref.events)  # the old version's events are the uninterrupted run's, and more came
    losses = {(e["topic"], e["partition"]): e["committed_lost"] for e in actual if e["type"] == EventType.DATA_LOSS}
    assert losses == scenario.expected_losses(written["base_ms"])
    by_type = result.by_type
    assert by_type.get("ISR_SHRINK") and by_type.get("ISR_EXPAND") and by_type.get("LEADER_CHANGE") == 3, by_type
