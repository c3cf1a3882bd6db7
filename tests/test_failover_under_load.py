"""A clean failover under acks=all and acks=1 load, on the real cluster: the dead leader held a tail no follower had,
which Kafka discards when it returns. Nothing committed is lost, so nothing may page: no critical event, no
DATA_LOSS; the old leader's truncation is reported with Kafka's own figure, all of it never committed, and what it
destroyed of the acks=1 writes is what a consumer can no longer read.

The tail is made certain, not hoped for: both followers are paused (SIGSTOP) for a moment, well inside
replica.lag.time.max.ms (they stay in the ISR), while the leader appends what the producers send on; the leader is
SIGKILLed then and the followers resumed. The oracles are Kafka's: the old
leader's log read by Kafka's dump tool while it is down, its own "Truncating partition" line when it returns, and
a sequenced consumer against what the producers saw acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer, readable_sequences, unreadable
from tests.kafka_dump import controller_metadata_records, log_batches
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, events_of, line_count, logged_truncation

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

LEADER, NEW_LEADER, OTHER = 1, 2, 3


def segment_bytes(partition_dir: Path) -> int:
    """The bytes of a partition's log segments: what the broker has appended, as its files show it."""
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


def test_a_clean_failover_under_load_pages_nobody_and_reports_the_discarded_tail_with_kafkas_figure(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    cluster = healthy_cluster
    topic = TOPIC_PREFIX + topic_name
    kafka_view.create_topic(topic, assignment={0: [LEADER, NEW_LEADER, OTHER]}, configs={"min.insync.replicas": "2"})
    producers = [producer_factory(topic, acks="all", interval_s=0.003, first_seq=i * 10**9) for i in range(3)]
    acks_one = producer_factory(topic, acks=1, interval_s=0.003, first_seq=3 * 10**9)
    for producer in (*producers, acks_one):
        producer.wait_acknowledged(100)
    wait_until(lambda: len(kafka_view.partition(topic).isr) == 3, 30, "a full ISR")
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", cluster="local", topic=topic, partition="0")
               == 3, DEADLINE_S, "the partition sampled")

    leader_dir = cluster.broker_log_dir(LEADER) / f"{topic}-0"
    for follower in (NEW_LEADER, OTHER):
        cluster.pause(follower)
    # The leader appends on its own what the producers send on: the tail the followers will never fetch. The acks=1
    # producer makes it certain. A broker reads a connection's next request only after answering the one before,
    # which for acks=all waits on the paused followers: each acks=all connection appends once more, at most, while
    # acks=1 requests are answered at once. And a paused follower may still hold the answer to the fetch it sent
    # before the pause, which the leader completes at its first append after it: what the leader appends after
    # that lies beyond anything a follower was sent. The segment files on disk are the evidence: Kafka writes each
    # append through to them.
    paused_bytes = segment_bytes(leader_dir)

    first_append = wait_until(lambda: (n := segment_bytes(leader_dir)) > paused_bytes and n, 2,
                              "the leader's first append after the pause")
    wait_until(lambda: segment_bytes(leader_dir) > first_append, 2, "an append the followers were never sent")
    killed_ms = int(time.time() * 1000)
    cluster.kill(LEADER)
    for follower in (NEW_LEADER, OTHER):
        cluster.resume(follower)
    wait_until(lambda: kafka_view.partition(topic, via=NEW_LEADER).leader == NEW_LEADER, 60, "broker 2 elected")
    old_log_end = log_batches(cluster.broker_log_dir(LEADER) / f"{topic}-0")[-1].last_offset + 1
    for producer in (*producers, acks_one):
        producer.wait_acknowledged(100, timeout_s=60)  # writing on to the new leader

    log = cluster.node(LEADER).log_file
    restart_line = line_count(log)
    cluster.start(LEADER)
    truncated_to = wait_until(lambda: logged_truncation(log, topic, restart_line), 60, "broker 1 to truncate").offset
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

    readable = readable_sequences(cluster.live_bootstrap_servers, topic)
    acknowledged = {seq: at for producer in producers for seq, at in producer.acknowledged().items()}
    lost = len(unreadable(acknowledged, readable))
    acks_one_acknowledged = acks_one.acknowledged()
    acks_one_lost = unreadable(acks_one_acknowledged, readable)
    events = [e for e in pipeline.events() if e["topic"] == topic]
    print(f"tail [{truncated_to}, {old_log_end}): {len(acks_one_lost)} of its {old_log_end - truncated_to} messages "
          f"acknowledged to acks=1 and unreadable now; events: {[(e['type'], e['severity']) for e in events]}")
    assert lost == 0, "acks=all: every acknowledged message is readable"
    # acks=1: every acknowledged message the consumer can no longer read was acknowledged at an offset of the tail
    # replmon reported discarded, never committed (the new leader writes at those offsets again: the range alone
    # does not tell the lost from the new)
    assert acks_one_lost and all(truncated_to <= acks_one_acknowledged[seq][1] < old_log_end for seq in acks_one_lost)
    assert len(acks_one_lost) <= truncation["uncommitted_lost"]
    # every replica's never-committed tail of this failover lies inside the old leader's: counted once, the union
    tail = old_log_end - truncated_to
    assert sum(e.get("uncommitted_counted") or 0 for e in events) == tail
    assert pipeline.metric("replmon_uncommitted_messages_lost_total", cluster="local", topic=topic) == tail
    (change,) = [e for e in events if e["type"] == "LEADER_CHANGE"]
    assert change["clean"] is True and change["leader"] == NEW_LEADER
    assert not [e for e in events if e["severity"] == "critical"], "nothing committed was at stake"
    assert not [e for e in events if e["type"] == "DATA_LOSS"]

    # the controller fenced the dead broker (its heartbeats stopped) and unfenced it once it was back (on a slow
    # machine, the restarted broker may miss its heartbeats and be fenced once more): each of the controller's
    # records reported once, from the metadata log, at the record's time
    fences, unfences = fencing_times(cluster, LEADER, killed_ms)
    def broker_events(etype: str) -> list[dict[str, Any]]:
        return [e for e in pipeline.events()
                if e["type"] == etype and e["brokers"] == [LEADER] and e["event_time_ms"] >= killed_ms]

    def all_reported(etype: str, count: int) -> list[dict[str, Any]] | None:
        """The broker's ``etype`` events, once there are ``count`` of them."""
        found = broker_events(etype)
        return found if len(found) >= count else None

    for etype, times, severity in (("BROKER_FENCED", fences, "warning"), ("BROKER_UNFENCED", unfences, "info")):
        count = len(times)
        reported = wait_until(partial(all_reported, etype, count), DEADLINE_S, f"broker 1's {etype} ({count})")
        assert sorted((e["event_time_ms"], e["severity"], e["source"]) for e in reported) == [
            (at, severity, "metadata_log") for at in times]


def fencing_times(cluster: LocalCluster, broker: int, since_ms: int) -> tuple[list[int], list[int]]:
    """When the controller recorded ``broker`` fenced, and when unfenced, after ``since_ms`` (it was unfenced
    then): its records as Kafka's dump tool decodes them (BrokerRegistrationChangeRecord's fenced 1 / -1,
    Fence/UnfenceBrokerRecord, a RegisterBrokerRecord of a restarted broker, fenced until it catches up). The
    changes alternate, from a fence to the last unfence."""
    records = [r for r in controller_metadata_records(cluster) if r["time"] >= since_ms
               and r["data"].get("brokerId", r["data"].get("id")) == broker]
    fenced, changes = False, []
    for r in records:
        kind, data = r["type"], r["data"]
        fence = (kind == "FENCE_BROKER_RECORD" or (kind == "REGISTER_BROKER_RECORD" and data.get("fenced", True))
                 or (kind == "BROKER_REGISTRATION_CHANGE_RECORD" and data.get("fenced") == 1))
        unfence = kind == "UNFENCE_BROKER_RECORD" or (kind == "BROKER_REGISTRATION_CHANGE_RECORD"
                                                      and data.get("fenced") == -1)
        if (fence and not fenced) or (unfence and fenced):
            fenced = not fenced
            changes.append((r["time"], fenced))
    assert changes and changes[0][1] and not fenced, records
    return [t for t, f in changes if f], [t for t, f in changes if not f]
