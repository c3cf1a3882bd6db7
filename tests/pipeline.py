"""The end-to-end tests' pipeline: the test bed's harness (replmon.testbed.harness) under the tests' topic
names, started for them, and the pytest glue that gives it a transport cluster; with the fault scenario several
end-to-end modules share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from replmon.core.config import SecurityConfig
from replmon.testbed import harness
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer, readable_sequences

TOPIC_PREFIX = "e2e-"
TRANSPORT_TOPICS = "e2e.replmon"
SAMPLES_TOPIC = f"{TRANSPORT_TOPICS}.samples"
EVENTS_TOPIC = f"{TRANSPORT_TOPICS}.events"
QUARANTINE_TOPIC = f"{TRANSPORT_TOPICS}.quarantine"
DEADLINE_S = 120
JOB_START_DEADLINE_S = harness.JOB_START_TIMEOUT_S


class Pipeline(harness.Pipeline):
    """The collector and the job as the operator runs them, watching the ``topic_prefix`` topics of ``cluster``,
    samples and events on ``transport`` (``e2e.replmon.*``); on return the collector runs and the job has
    completed its first micro-batch (or both are stopped again). ``security``: per stage, as
    :class:`replmon.testbed.harness.Pipeline` takes it."""

    def __init__(self, cluster: LocalCluster, transport: LocalCluster, root: Path,
                 topic_prefix: str = TOPIC_PREFIX, security: Mapping[str, SecurityConfig] | None = None) -> None:
        super().__init__(root, cluster, transport, include=[f"{topic_prefix}.*"], topic_names=TRANSPORT_TOPICS,
                         security=security)
        self.spawn("collect")
        try:
            self.start_job()
        except BaseException:
            self.stop()
            raise


@contextlib.contextmanager
def running_pipeline(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
                     topic_prefix: str = TOPIC_PREFIX) -> Iterator[Pipeline]:
    """A healed ``cluster``, a fresh one-broker transport cluster and the pipeline on both; all stopped (and
    the transport cluster deleted) on exit."""
    cluster.heal()
    with harness.transport_cluster(tmp_path_factory.mktemp("transport")) as transport:
        p = Pipeline(cluster, transport, tmp_path_factory.mktemp("pipeline"), topic_prefix)
        try:
            yield p
        finally:
            p.stop()


def of(topic: str, type_: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["topic"] == topic and e["type"] == type_


@dataclass
class UncleanLoss:
    replicated_end: int
    """Where every replica's log ended before the followers stopped: the unclean leader's epoch starts here."""
    high_watermark: int
    """The old leader's high watermark (its log end offset) before it died."""
    lost: set[int]
    """Acknowledged sequences that no consumer can read after the election."""


def cause_unclean_loss(cluster: LocalCluster, view: KafkaView, topic: str,
                       producer_factory: Callable[..., SequencedProducer],
                       before_leader_dies: Callable[[int], None]) -> UncleanLoss:
    """Broker 1 leads ``topic``-0 (replicas 1, 2, 3, min.insync.replicas 1, acks=1 writes); the followers stop,
    broker 1 alone takes 150 more messages, ``before_leader_dies(high_watermark)`` waits until the observer
    under test saw them committed; broker 1 dies and broker 2, outside the ISR, is elected uncleanly. Checked
    on Kafka's side (the local cluster's unclean election is tested here): exactly what only broker 1 held is
    lost, everything replicated before is still readable."""
    view.create_topic(topic, assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": "1"})
    producer = producer_factory(topic, acks=1)
    producer.wait_acknowledged(100)
    producer.pause()
    replicated = producer.acknowledged()  # on all three replicas once the HW covers them with a full ISR
    end = max(offset for _, offset in replicated.values()) + 1
    wait_until(lambda: view.high_watermark(topic) == end and len(view.partition(topic).isr) == 3,
               30, "every replica to hold every message")

    cluster.stop(2)
    cluster.stop(3)
    wait_until(lambda: view.partition(topic).isr == [1], 30, "the ISR to shrink to the leader")
    producer.resume()
    producer.wait_acknowledged(150)  # acknowledged by broker 1 alone
    producer.pause()
    acknowledged = producer.acknowledged()
    only_on_leader = set(acknowledged) - set(replicated)
    assert len(only_on_leader) >= 150
    # committed: min.insync.replicas=1 lets the HW cover what the lone leader holds
    assert set(acknowledged) <= set(readable_sequences(cluster.live_bootstrap_servers, topic))
    high_watermark = view.high_watermark(topic)
    former = view.partition(topic)
    before_leader_dies(high_watermark)

    cluster.kill(1)
    cluster.start(2)  # a stale follower: not in the ISR, so no clean election can pick it
    wait_until(lambda: view.partition(topic).leader == -1, 30, "the partition to go offline")
    cluster.elect_unclean(topic, 0)
    after = wait_until(lambda: (v := view.partition(topic)).leader == 2 and v, 30,
                       "the unclean election of broker 2")
    assert 2 not in former.isr and 2 not in former.elr
    assert after.leader_epoch > former.leader_epoch
    readable = set(readable_sequences(cluster.live_bootstrap_servers, topic))
    lost = set(acknowledged) - readable
    assert lost == only_on_leader, "exactly what only the old leader held is lost"
    assert readable == set(replicated)
    return UncleanLoss(end, high_watermark, lost)
