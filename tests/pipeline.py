"""The end-to-end tests' pipeline: the test bed's harness (replmon.testbed.harness) under the tests' topic
names, started for them, and the pytest glue that gives it a transport cluster; with the fault scenario several
end-to-end modules share."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from replmon.core.config import SecurityConfig
from replmon.testbed import harness
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import Record, SequencedProducer, committed_unreadable, log_held, readable_records

TOPIC_PREFIX = "e2e-"
TRANSPORT_TOPICS = "e2e.replmon"
SAMPLES_TOPIC = f"{TRANSPORT_TOPICS}.samples"
EVENTS_TOPIC = f"{TRANSPORT_TOPICS}.events"
QUARANTINE_TOPIC = f"{TRANSPORT_TOPICS}.quarantine"
DEADLINE_S = 120
JOB_START_DEADLINE_S = harness.JOB_START_TIMEOUT_S


WAITING_FOR_SAMPLES = "replmon stream: waiting for topic "
"""The job's line while the samples topic does not exist (streaming.service.samples_topic_ready)."""


class Pipeline(harness.Pipeline):
    """The collector and the job as the operator runs them, watching the ``topic_prefix`` topics of ``cluster``,
    samples and events on ``transport`` (``e2e.replmon.*``); on return the collector runs and the job has
    completed its first micro-batch (or both are stopped again). ``security``: per stage, as
    :class:`replmon.testbed.harness.Pipeline` takes it. ``job_first``: the job starts before the collector, on a
    transport cluster without the samples topic, and the collector only once the job says it waits for it."""

    def __init__(self, cluster: LocalCluster, transport: LocalCluster, root: Path,
                 topic_prefix: str = TOPIC_PREFIX, security: Mapping[str, SecurityConfig] | None = None,
                 overrides: Mapping[str, Mapping[str, Any]] | None = None, job_first: bool = False) -> None:
        super().__init__(root, cluster, transport, include=[f"{topic_prefix}.*"], topic_names=TRANSPORT_TOPICS,
                         security=security, overrides=overrides)
        try:
            if job_first:
                self.spawn("stream")
                wait_until(self._waiting_for_samples, JOB_START_DEADLINE_S, "the job waiting for the samples topic",
                           fatal=(harness.StageExited,))
                self.spawn("collect")
                self.wait_first_batch()
            else:
                self.spawn("collect")
                self.start_job()
        except BaseException:
            self.stop()
            raise

    def _waiting_for_samples(self) -> bool:
        if not self.alive("stream"):
            raise harness.StageExited(f"replmon stream exited; the end of {self.log('stream')}:\n"
                                      + harness.log_tail(self.log("stream")))
        return WAITING_FOR_SAMPLES in self.log("stream").read_text(errors="replace")


@contextlib.contextmanager
def running_pipeline(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
                     topic_prefix: str = TOPIC_PREFIX, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                     ) -> Iterator[Pipeline]:
    """A healed ``cluster``, a fresh one-broker transport cluster and the pipeline on both, the job started before
    the collector (``overrides``: settings by section over the harness's); all stopped (and the transport cluster
    deleted) on exit."""
    cluster.heal()
    with harness.transport_cluster(tmp_path_factory.mktemp("transport")) as transport:
        # a fresh transport cluster has no samples topic: the job is started first, as an operator may
        p = Pipeline(cluster, transport, tmp_path_factory.mktemp("pipeline"), topic_prefix, overrides=overrides,
                     job_first=True)
        try:
            yield p
        finally:
            p.stop()


def of(topic: str, type_: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["topic"] == topic and e["type"] == type_


OLD_LEADER, STALE_REPLICA, OTHER = 1, 2, 3
"""The unclean scenario's brokers: the leader that dies, the stale follower elected, the other follower."""


@dataclass
class UncleanLoss:
    lost: set[Record]
    """The committed records no consumer can read after the election: (sequence, partition, offset)."""
    lost_offsets: list[int]
    """Their offsets in the old leader's log, ascending."""


def cause_unclean_loss(cluster: LocalCluster, view: KafkaView, topic: str,
                       producer_factory: Callable[..., SequencedProducer], before_second: int = 300,
                       before_kill: int = 250) -> UncleanLoss:
    """Broker 1 leads ``topic``-0 (replicas 1, 2, 3, min.insync.replicas 1) under an acks=1 producer (~150-200
    msg/s) that never pauses. Follower 3 stops; ``before_second`` acknowledgements later follower 2 stops;
    broker 1, alone in the ISR, commits all it appends; ``before_kill`` acknowledgements later it is SIGKILLed.
    Stale broker 2 is elected uncleanly and the producer moves to it at once. Returns, broker 1 still down, once
    the new leader's log has passed where broker 1's ended: the ground truth is what a consumer can no longer
    read of what broker 1's log held (Kafka's dump tool reads it; an acks=1 acknowledgement proves nothing
    committed)."""
    view.create_topic(topic, assignment={0: [OLD_LEADER, STALE_REPLICA, OTHER]},
                      configs={"min.insync.replicas": "1"})
    producer = producer_factory(topic, acks=1, interval_s=0.005)
    producer.wait_acknowledged(300)
    wait_until(lambda: len(view.partition(topic).isr) == 3, 30, "a full ISR")

    cluster.stop(OTHER)
    producer.wait_acknowledged(before_second)
    cluster.stop(STALE_REPLICA)
    wait_until(lambda: view.partition(topic, via=OLD_LEADER).isr == [OLD_LEADER], 30, "the leader alone in the ISR")
    producer.wait_acknowledged(before_kill)
    cluster.kill(OLD_LEADER)
    old_log_end = max(offset for _, offset in producer.acknowledged().values()) + 1  # at least; acks=1

    cluster.start(STALE_REPLICA)
    wait_until(lambda: view.partition(topic, via=STALE_REPLICA).leader == -1, 30, "the partition offline")
    cluster.elect_unclean(topic, 0)
    wait_until(lambda: view.partition(topic, via=STALE_REPLICA).leader == STALE_REPLICA, 30,
               "the unclean election of broker 2")
    # the producer writes on to the new leader: its log soon passes where the old one ended
    wait_until(lambda: view.high_watermark(topic) > old_log_end + 100, 60, "the new leader's log past the old one")
    held = log_held(cluster.broker_log_dir(OLD_LEADER) / f"{topic}-0")  # all committed: it led alone
    lost = committed_unreadable(producer.committed_acknowledged(), held,
                                readable_records(cluster.live_bootstrap_servers, topic))
    assert lost, "the scenario lost committed messages"
    return UncleanLoss(lost, sorted(offset for _, _, offset in lost))


def events_of(pipeline: Pipeline, topic: str, type_: str) -> list[dict[str, Any]]:
    return [e for e in pipeline.events() if of(topic, type_)(e)]


@dataclass(frozen=True)
class Truncation:
    """A broker's own log line saying where it truncated a partition, and when (its log4j timestamp)."""
    offset: int
    logged_ms: float


LOG_TIME = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})\]")


def logged_truncation(log: Path, topic: str, after_line: int) -> Truncation | None:
    """Where and when the broker's log says it truncated ``topic``-0 (ReplicaFetcherThread's "Truncating partition
    ... with TruncationState(offset=N, completed=true)"), among the lines after ``after_line``. The line's time is
    the broker's local time (log4j's ``%d``), read in the same zone: the JVM and this process share the machine's."""
    pattern = re.compile(rf"Truncating partition {re.escape(topic)}-0 with TruncationState\(offset=(\d+), "
                         r"completed=true\) due to leader epoch")
    lines = log.read_text(errors="replace").splitlines()[after_line:]
    found = [(m, line) for line in lines if (m := pattern.search(line))]
    if not found:
        return None
    match, line = found[-1]
    logged = LOG_TIME.match(line)
    assert logged, f"a broker log line without its log4j time: {line!r}"
    at = datetime.strptime(logged.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return Truncation(int(match.group(1)), at.timestamp() * 1000)


def line_count(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())
