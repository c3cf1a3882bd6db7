"""ISR and leader changes from the KRaft metadata log, on the real cluster: the log-dir agents beside the brokers
follow their copies of ``__cluster_metadata-0`` and the job reports each change at the controller's time, also a
flap the protocol sampler never sees. The oracle is the controller's own log, read by Kafka's dump tool
(DumpLogSegments with its cluster metadata decoder). Producers write throughout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer
from tests.kafka_dump import controller_metadata_records
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, events_of

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

SAMPLING_INTERVAL_S = 10.0
"""The collector's interval in these tests: longer than the flaps they cause."""
CONTROLLER_TIME_TOLERANCE_MS = 1000


def partition_records(cluster: LocalCluster, topic: str) -> list[dict[str, Any]]:
    """The PartitionRecord and PartitionChangeRecords of partition 0 of ``topic`` in the controller's metadata log,
    in log order, as Kafka's dump tool decodes the log."""
    records = controller_metadata_records(cluster)
    topic_id = next(r["data"]["topicId"] for r in records
                    if r["type"] == "TOPIC_RECORD" and r["data"]["name"] == topic)
    return [r for r in records if r["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")
            and r["data"].get("topicId") == topic_id and r["data"].get("partitionId") == 0]


def controller_isr_changes(cluster: LocalCluster, topic: str) -> list[tuple[int, list[int]]]:
    """(append time, ISR) of every record that set the ISR of partition 0 of ``topic``."""
    return [(r["time"], r["data"]["isr"]) for r in partition_records(cluster, topic)
            if r["data"].get("isr") is not None]


def test_an_isr_flap_shorter_than_the_sampling_interval_is_reported_at_the_controllers_times(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    cluster = healthy_cluster
    topic = TOPIC_PREFIX + topic_name
    kafka_view.create_topic(topic, assignment={0: [1, 2, 3]})
    producer = producer_factory(topic, interval_s=0.01)  # acks=all, on and on
    producer.wait_acknowledged(50)
    pipeline.reconfigure("collect", {"collector": {"interval_s": SAMPLING_INTERVAL_S}})
    try:
        # the job knows the partition (a partition never sampled is not watched)
        wait_until(lambda: pipeline.metric("replmon_partition_isr_size", cluster="local", topic=topic,
                                           partition="0") == 3, DEADLINE_S, "the partition sampled")
        follower = 2
        paused_at = time.monotonic()
        cluster.pause(follower)
        try:
            wait_until(lambda: follower not in kafka_view.partition(topic, via=1).isr, 30,
                       f"broker {follower} out of the ISR")
        finally:
            cluster.resume(follower)
        wait_until(lambda: follower in kafka_view.partition(topic, via=1).isr, 30, f"broker {follower} back")
        flap_s = time.monotonic() - paused_at
        producer.wait_acknowledged(50, timeout_s=60)

        def flap_events() -> tuple[dict[str, Any], dict[str, Any]] | None:
            shrinks = [e for e in events_of(pipeline, topic, "ISR_SHRINK") if e["brokers"] == [follower]]
            expands = [e for e in events_of(pipeline, topic, "ISR_EXPAND") if e["brokers"] == [follower]]
            return (shrinks[0], expands[0]) if shrinks and expands else None

        shrink, expand = wait_until(flap_events, DEADLINE_S, "the flap's ISR_SHRINK and ISR_EXPAND")
        # a second report of either would come from another agent's copy of the log (within a second) or from the
        # sampler's next cycle: wait until the job has processed a sample taken after the flap
        after_s = expand["event_time_ms"] / 1000 + 1
        wait_until(lambda: (pipeline.metric("replmon_cluster_last_sample_timestamp_seconds", cluster="local") or 0)
                   > after_s, DEADLINE_S, "a sample taken after the flap processed")
        shrinks = [e for e in events_of(pipeline, topic, "ISR_SHRINK") if e["brokers"] == [follower]]
        expands = [e for e in events_of(pipeline, topic, "ISR_EXPAND") if e["brokers"] == [follower]]
    finally:
        pipeline.reconfigure("collect", None)

    changes = controller_isr_changes(cluster, topic)
    print(f"flap of {flap_s:.1f} s; controller: {changes}; replmon: "
          f"{[(e['type'], e['event_time_ms'], e['source']) for e in shrinks + expands]}")
    assert flap_s < SAMPLING_INTERVAL_S, "the flap fits between two samples"
    shrunk_at = next(t for t, isr in changes if follower not in isr)
    expanded_at = next(t for t, isr in changes if t >= shrunk_at and follower in isr)
    assert len(shrinks) == 1 and len(expands) == 1, "each change once, whichever agents and samples saw it"
    assert abs(shrink["event_time_ms"] - shrunk_at) <= CONTROLLER_TIME_TOLERANCE_MS
    assert abs(expand["event_time_ms"] - expanded_at) <= CONTROLLER_TIME_TOLERANCE_MS
    assert "metadata_log" in (shrink["source"], expand["source"]), "the metadata log told the flap"


def controller_leader_changes(cluster: LocalCluster, topic: str) -> list[tuple[int, int, list[int] | None]]:
    """(append time, leader, ISR or None when unchanged) of every PartitionChangeRecord that named a leader of
    partition 0 of ``topic``."""
    return [(r["time"], r["data"]["leader"], r["data"].get("isr")) for r in partition_records(cluster, topic)
            if r["type"] == "PARTITION_CHANGE_RECORD" and r["data"].get("leader", -2) != -2]


def test_a_follower_that_rejoined_the_isr_between_two_samples_and_was_elected_is_a_clean_election(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    """Follower 2 leaves the ISR and rejoins it, and leader 1 stops at once: the controller elects 2, first of the
    assignment in the ISR. The sampler's last view may still show the ISR without 2 (by samples alone the election
    would look unclean); the controller's record of the election tells the ISR it judged by."""
    cluster = healthy_cluster
    topic = TOPIC_PREFIX + topic_name
    kafka_view.create_topic(topic, assignment={0: [1, 2, 3]})
    producer = producer_factory(topic, interval_s=0.01)
    producer.wait_acknowledged(50)
    pipeline.reconfigure("collect", {"collector": {"interval_s": SAMPLING_INTERVAL_S}})
    try:
        wait_until(lambda: pipeline.metric("replmon_partition_isr_size", cluster="local", topic=topic,
                                           partition="0") == 3, DEADLINE_S, "the partition sampled")
        cluster.pause(2)
        try:
            wait_until(lambda: 2 not in kafka_view.partition(topic, via=1).isr, 30, "broker 2 out of the ISR")
        finally:
            cluster.resume(2)
        wait_until(lambda: 2 in kafka_view.partition(topic, via=1).isr, 30, "broker 2 back in the ISR")
        cluster.stop(1)
        wait_until(lambda: kafka_view.partition(topic, via=2).leader == 2, 30, "broker 2 elected")
        producer.wait_acknowledged(50, timeout_s=60)
        change = pipeline.wait_event("the LEADER_CHANGE to broker 2", lambda e: e["topic"] == topic
                                     and e["type"] == "LEADER_CHANGE" and e["leader"] == 2, DEADLINE_S)
    finally:
        pipeline.reconfigure("collect", None)
    elections = controller_leader_changes(cluster, topic)
    print(f"controller: {elections}; replmon: {change['event_time_ms']} {change['source']} clean={change['clean']} "
          f"previous ISR {change['previous_isr']}")
    elected_at = next(t for t, leader, _ in elections if leader == 2)
    assert change["clean"] is True and change["severity"] == "info"
    assert change["previous_leader"] == 1 and 2 in change["previous_isr"]
    assert change["source"] == "metadata_log"
    assert abs(change["event_time_ms"] - elected_at) <= CONTROLLER_TIME_TOLERANCE_MS
    assert not [e for e in events_of(pipeline, topic, "LEADER_CHANGE") if e["clean"] is False]
