"""End to end on the real cluster: faults caused on Kafka -> collector -> samples topic -> Spark job -> the
/metrics endpoint and the events topic. Expected values come from Kafka's own view (tests.kafka_view) and from
the sequenced producer and consumer, never from replmon."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from replmon.localcluster import LocalCluster, NodeState
from replmon.workload import SequencedProducer
from tests.kafka_view import KafkaView, wait_until
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, cause_unclean_loss, of

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

@pytest.fixture
def e2e_topic(topic_name: str) -> str:
    return TOPIC_PREFIX + topic_name


def test_paused_follower_gives_isr_shrink_and_the_gauge_drops_then_expand(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2, 3]})
    producer_factory(e2e_topic).wait_acknowledged(50)
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "the ISR-size gauge at 3")

    healthy_cluster.pause(3)
    wait_until(lambda: 3 not in kafka_view.partition(e2e_topic).isr, 30, "Kafka to shrink the ISR")
    shrink = pipeline.wait_event("ISR_SHRINK", of(e2e_topic, "ISR_SHRINK"))
    assert shrink["brokers"] == [3]
    assert shrink["isr"] == kafka_view.partition(e2e_topic).isr
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 2,
               DEADLINE_S, "the ISR-size gauge at 2")
    assert pipeline.metric("replmon_partition_under_replicated", topic=e2e_topic, partition="0") == 1
    assert pipeline.metric("replmon_replica_in_isr", topic=e2e_topic, partition="0", broker="3") == 0

    healthy_cluster.resume(3)
    expand = pipeline.wait_event("ISR_EXPAND", of(e2e_topic, "ISR_EXPAND"))
    assert expand["brokers"] == [3]
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "the ISR-size gauge back at 3")
    assert_events_command_lists(pipeline, e2e_topic)


def test_killed_leader_gives_leader_change_with_the_next_epoch(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(e2e_topic, assignment={0: [2, 3, 1]})
    producer_factory(e2e_topic).wait_acknowledged(50)
    before = kafka_view.partition(e2e_topic)
    wait_until(lambda: pipeline.metric("replmon_partition_leader_epoch", topic=e2e_topic, partition="0")
               == before.leader_epoch, DEADLINE_S, "the leader epoch gauge")

    healthy_cluster.kill(2)
    after = wait_until(lambda: (v := kafka_view.partition(e2e_topic)).leader not in (-1, 2) and v, 30,
                       "Kafka to elect a new leader")
    change = pipeline.wait_event("LEADER_CHANGE", of(e2e_topic, "LEADER_CHANGE"))
    assert change["previous_leader"] == 2 and change["leader"] == after.leader
    assert change["leader_epoch"] == before.leader_epoch + 1 == after.leader_epoch
    assert change["clean"] is True
    wait_until(lambda: pipeline.metric("replmon_partition_leader_epoch", topic=e2e_topic, partition="0")
               == after.leader_epoch, DEADLINE_S, "the leader epoch gauge at +1")


def test_unclean_election_gives_unclean_leader_change_and_the_exact_committed_loss(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    def seen_by_replmon(high_watermark: int) -> None:  # replmon must see the committed offsets first
        wait_until(lambda: pipeline.metric("replmon_partition_high_watermark", topic=e2e_topic, partition="0")
                   == high_watermark, DEADLINE_S, "the high watermark gauge to reach Kafka's")

    loss = cause_unclean_loss(healthy_cluster, kafka_view, e2e_topic, producer_factory, seen_by_replmon)
    end, high_watermark, lost = loss.replicated_end, loss.high_watermark, loss.lost

    change = pipeline.wait_event("UNCLEAN LEADER_CHANGE", lambda e: of(e2e_topic, "LEADER_CHANGE")(e)
                                 and e["leader"] == 2)
    assert change["clean"] is False
    regression = pipeline.wait_event("HW_REGRESSION", of(e2e_topic, "HW_REGRESSION"))
    assert regression["committed_lost"] == len(lost)
    wait_until(lambda: pipeline.metric("replmon_committed_messages_lost_total", cluster="local", topic=e2e_topic)
               == len(lost), DEADLINE_S, "the committed-loss counter")
    assert pipeline.metric("replmon_unclean_leader_elections_total", cluster="local", topic=e2e_topic) == 1

    # The old leader is still down, its log holding what only it had. The log-dir agent reads that log from disk
    # and the job reports the divergence and the offsets the broker will truncate, before it comes back.
    agent = subprocess.run(
        [sys.executable, "-m", "replmon.cli", "agent", "--log-dir", str(healthy_cluster.broker_log_dir(1)),
         "--broker-id", "1", "--once", "--config", str(pipeline.config)],
        capture_output=True, text=True, timeout=120)
    assert agent.returncode == 0, agent.stdout + agent.stderr
    divergence = pipeline.wait_event("EPOCH_DIVERGENCE of the stopped old leader", lambda e: of(
        e2e_topic, "EPOCH_DIVERGENCE")(e) and e["brokers"][0] == 1)
    assert divergence["leader"] == 2 and divergence["leader_epoch"] == kafka_view.partition(e2e_topic).leader_epoch
    assert divergence["offset_start"] == end, "where broker 2's log ended and its unclean epoch began"
    assert divergence["offset_end"] == high_watermark, "the old leader's log end offset"
    assert divergence["offset_end"] - divergence["offset_start"] == len(lost)
    assert healthy_cluster.node_state(1) == NodeState.STOPPED, "reported before the old leader truncates"


def test_job_killed_mid_stream_loses_and_duplicates_no_event(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(e2e_topic, assignment={0: [3, 1, 2]})
    producer_factory(e2e_topic).wait_acknowledged(20)
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "the ISR-size gauge at 3")

    pipeline.kill_job()  # SIGKILL: no chance to finish its batch or commit
    healthy_cluster.stop(2)  # happens while the job is down
    wait_until(lambda: 2 not in kafka_view.partition(e2e_topic).isr, 30, "Kafka to shrink the ISR")
    pipeline.start_job()
    shrink = pipeline.wait_event("ISR_SHRINK after restart", of(e2e_topic, "ISR_SHRINK"))
    assert shrink["brokers"] == [2]
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 2,
               DEADLINE_S, "the gauge right after the restart")
    healthy_cluster.start(2)
    pipeline.wait_event("ISR_EXPAND after restart", of(e2e_topic, "ISR_EXPAND"))

    ids = [e["event_id"] for e in pipeline.events()]
    assert len(ids) == len(set(ids)), "an event id appears twice in the events topic"


def test_bad_samples_are_quarantined_and_the_job_goes_on(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    import json

    from kafka import KafkaConsumer, KafkaProducer

    def count(reason: str) -> float:
        return pipeline.metric("replmon_quarantined_samples_total", reason=reason) or 0.0

    before = {r: count(r) for r in ("malformed_json", "unknown_schema", "out_of_range")}
    sample = {"schema": "partition/v1", "cluster": "local", "collector_id": "evil", "cycle": 1,
              "sample_time_ms": 1, "topic": e2e_topic, "partition": 0, "leader": 1, "leader_epoch": 0,
              "replicas": [1], "isr": [1], "high_watermark": -42}
    bad = [b"{nope", json.dumps({"schema": "partition/v99"}).encode(), json.dumps(sample).encode()]
    producer = KafkaProducer(bootstrap_servers=pipeline.transport.bootstrap_servers)
    for value in bad:
        producer.send("e2e.replmon.samples", key=b"evil", value=value)
    producer.flush()
    producer.close()
    wait_until(lambda: all(count(r) == before[r] + 1 for r in before), DEADLINE_S, "one quarantined sample per reason")

    consumer = KafkaConsumer("e2e.replmon.quarantine", bootstrap_servers=pipeline.transport.bootstrap_servers,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None)
    reasons = {json.loads(r.value)["value"]: json.loads(r.value)["reason"] for r in consumer}
    consumer.close()
    assert reasons["{nope"] == "malformed_json"
    assert reasons[bad[2].decode()] == "out_of_range:high_watermark"

    # the job is alive and keeps turning good samples into metrics
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2, 3]})
    producer_factory(e2e_topic).wait_acknowledged(20)
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "metrics of a topic created after the bad samples")


def assert_events_command_lists(pipeline: Pipeline, topic: str) -> None:
    """`replmon events` prints, from the Parquet history, every event the events topic holds."""
    import subprocess
    import sys

    def printed() -> bool:
        ids = {e["event_id"] for e in pipeline.events()}
        out = subprocess.run([sys.executable, "-m", "replmon.cli", "events", "--config", str(pipeline.config)],
                             capture_output=True, text=True, timeout=120)
        return out.returncode == 0 and f"{len(ids)} events" in out.stdout

    wait_until(printed, DEADLINE_S, "`replmon events` to list every event of the events topic", interval_s=2.0)
    out = subprocess.run([sys.executable, "-m", "replmon.cli", "events", "--config", str(pipeline.config),
                          "--topic", topic, "--type", "isr_shrink", "--since", "1h"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    rows = [line for line in out.stdout.splitlines() if topic[:20] in line]
    assert rows and all("ISR_SHRINK" in line for line in rows)
