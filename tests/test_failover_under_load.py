"""A clean failover under acks=all load, on the real cluster: the dead leader held a tail no follower had, which
Kafka discards when it returns. Nothing committed is lost, so nothing may page: no critical event, no DATA_LOSS;
the old leader's truncation is reported with Kafka's own figure, all of it never committed.

The tail is made certain, not hoped for: both followers are paused (SIGSTOP) for a moment, well inside
replica.lag.time.max.ms (they stay in the ISR), while the leader appends what three acks=all producers send and
cannot acknowledge; the leader is SIGKILLed then and the followers resumed. The oracles are Kafka's: the old
leader's log read by Kafka's dump tool while it is down, its own "Truncating partition" line when it returns, and
a sequenced consumer against what the producers saw acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer, readable_sequences, unreadable
from tests.kafka_dump import log_batches
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, events_of, line_count, truncation_offset

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

LEADER, NEW_LEADER, OTHER = 1, 2, 3
TAIL_MESSAGES = 150
"""Messages sent while the followers are paused, before the leader dies: a few hundred milliseconds of the three
producers, well inside the local cluster's replica.lag.time.max.ms (3 s)."""


def test_a_clean_failover_under_acks_all_load_pages_nobody_and_reports_the_discarded_tail_with_kafkas_figure(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    cluster = healthy_cluster
    topic = TOPIC_PREFIX + topic_name
    kafka_view.create_topic(topic, assignment={0: [LEADER, NEW_LEADER, OTHER]}, configs={"min.insync.replicas": "2"})
    producers = [producer_factory(topic, acks="all", interval_s=0.003, first_seq=i * 10**9) for i in range(3)]
    for producer in producers:
        producer.wait_acknowledged(100)
    wait_until(lambda: len(kafka_view.partition(topic).isr) == 3, 30, "a full ISR")
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", cluster="local", topic=topic, partition="0")
               == 3, DEADLINE_S, "the partition sampled")

    sent = sum(p.sent for p in producers)
    for follower in (NEW_LEADER, OTHER):
        cluster.pause(follower)
    # the leader appends on its own what the producers send on: the tail the followers will never fetch
    wait_until(lambda: sum(p.sent for p in producers) >= sent + TAIL_MESSAGES, 2, "messages sent to the leader alone")
    cluster.kill(LEADER)
    for follower in (NEW_LEADER, OTHER):
        cluster.resume(follower)
    wait_until(lambda: kafka_view.partition(topic, via=NEW_LEADER).leader == NEW_LEADER, 60, "broker 2 elected")
    old_log_end = log_batches(cluster.broker_log_dir(LEADER) / f"{topic}-0")[-1].last_offset + 1
    for producer in producers:
        producer.wait_acknowledged(100, timeout_s=60)  # writing on to the new leader

    log = cluster.node(LEADER).log_file
    restart_line = line_count(log)
    cluster.start(LEADER)
    truncated_to = wait_until(lambda: truncation_offset(log, topic, restart_line), 60, "broker 1 to truncate")
    wait_until(lambda: len(kafka_view.partition(topic).isr) == 3, 90, "the ISR full again")
    assert truncated_to < old_log_end, "the old leader held a tail the new leader never had"

    (truncation,) = wait_until(lambda: [e for e in events_of(pipeline, topic, "LOG_TRUNCATION")
                                        if e["brokers"] == [LEADER]], DEADLINE_S, "broker 1's LOG_TRUNCATION")
    assert (truncation["offset_start"], truncation["offset_end"]) == (truncated_to, old_log_end)
    assert truncation["truncated"] == truncation["uncommitted_lost"] == old_log_end - truncated_to
    # settled: the job has processed a sample taken after the ISR was full again
    after_s = time.time() + 1
    wait_until(lambda: (pipeline.metric("replmon_cluster_last_sample_timestamp_seconds", cluster="local") or 0)
               > after_s, DEADLINE_S, "a sample taken after the failover processed")

    acknowledged = {seq: at for producer in producers for seq, at in producer.acknowledged().items()}
    lost = len(unreadable(acknowledged, readable_sequences(cluster.live_bootstrap_servers, topic)))
    events = [e for e in pipeline.events() if e["topic"] == topic]
    print(f"tail [{truncated_to}, {old_log_end}); events: {[(e['type'], e['severity']) for e in events]}")
    assert lost == 0, "acks=all: every acknowledged message is readable"
    (change,) = [e for e in events if e["type"] == "LEADER_CHANGE"]
    assert change["clean"] is True and change["leader"] == NEW_LEADER
    assert not [e for e in events if e["severity"] == "critical"], "nothing committed was at stake"
    assert not [e for e in events if e["type"] == "DATA_LOSS"]
