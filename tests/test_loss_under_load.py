"""Committed-data loss under continuous production, on the real cluster: the unclean scenario of an incident as it
happens, the producer never paused and replmon never waited for.

Leader 1 of a partition (replicas 1, 2, 3, min.insync.replicas 1, acks=1 writes) loses its followers one after
the other while the producer writes on; it leads alone (so it commits everything it appends), is SIGKILLed,
stale broker 2 is elected uncleanly, the producer moves to it at once, and broker 1 returns and truncates. The
ground truth is the sequenced producer's acknowledgements against what a consumer can still read; the
truncation's oracle is broker 1's own log line. The pipeline runs a log-dir agent beside each broker, as
``replmon run`` does: broker 1's disk, read while it is down, tells how far it had committed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replmon.testbed.harness import AGENT_PREFIX
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer, readable_sequences, unreadable
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, of

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

OLD_LEADER, STALE, OTHER = 1, 2, 3
TRUNCATION_SEEN_WITHIN_S = 20
"""From the broker's start command (a JVM start and log recovery, ~5-10 s here) to the agent's sample of its
truncated log (1 s intervals)."""


@pytest.fixture(scope="module")
def agents(pipeline: Pipeline, cluster: LocalCluster) -> Iterator[None]:
    """A log-dir agent beside each broker of the session cluster, for this module's tests."""
    pipeline.spawn_agents()
    yield
    pipeline.stop(*(f"{AGENT_PREFIX}{b}" for b in cluster.broker_ids))


def truncation_offset(log: Path, topic: str, after_line: int) -> int | None:
    """Where broker's log says it truncated ``topic``-0 (ReplicaFetcherThread's "Truncating partition ... with
    TruncationState(offset=N, completed=true)"), among the lines after ``after_line``."""
    pattern = re.compile(rf"Truncating partition {re.escape(topic)}-0 with TruncationState\(offset=(\d+), "
                         r"completed=true\) due to leader epoch")
    lines = log.read_text(errors="replace").splitlines()[after_line:]
    found = [int(m.group(1)) for line in lines if (m := pattern.search(line))]
    return found[-1] if found else None


def line_count(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def sum_of(pipeline: Pipeline, topic: str, etype: str, field: str) -> int:
    return sum(e.get(field) or 0 for e in pipeline.events() if of(topic, etype)(e))


@pytest.mark.parametrize(("before_second", "before_kill"), [
    pytest.param(500, 400, id="followers-out-5s-and-4s-before-the-kill"),
    pytest.param(300, 250, id="followers-out-3s-and-2.5s-before-the-kill"),
    pytest.param(150, 200, id="followers-out-3.5s-and-2s-before-the-kill"),
])
def test_unclean_election_under_load_reports_exactly_the_committed_messages_lost(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer], before_second: int, before_kill: int,
) -> None:
    """``before_second``/``before_kill``: messages acknowledged (~100/s) after follower 3 stops before follower 2
    stops, and after that before the leader dies."""
    cluster, view = healthy_cluster, kafka_view
    topic = TOPIC_PREFIX + topic_name
    view.create_topic(topic, assignment={0: [OLD_LEADER, STALE, OTHER]}, configs={"min.insync.replicas": "1"})
    producer = producer_factory(topic, acks=1, interval_s=0.005)
    producer.wait_acknowledged(300)
    wait_until(lambda: len(view.partition(topic).isr) == 3, 30, "a full ISR")

    cluster.stop(OTHER)
    producer.wait_acknowledged(before_second)
    cluster.stop(STALE)
    wait_until(lambda: view.partition(topic, via=OLD_LEADER).isr == [OLD_LEADER], 30, "the leader alone in the ISR")
    producer.wait_acknowledged(before_kill)
    cluster.kill(OLD_LEADER)
    old_log_end = max(offset for _, offset in producer.acknowledged().values()) + 1  # at least; acks=1

    cluster.start(STALE)
    wait_until(lambda: view.partition(topic, via=STALE).leader == -1, 30, "the partition offline")
    cluster.elect_unclean(topic, 0)
    wait_until(lambda: view.partition(topic, via=STALE).leader == STALE, 30, "the unclean election of broker 2")
    # the producer writes on to the new leader: its log soon passes where the old one ended
    wait_until(lambda: view.high_watermark(topic) > old_log_end + 100, 60, "the new leader's log past the old one")
    log = cluster.node(OLD_LEADER).log_file
    restart_line = line_count(log)
    restarted_ms = time.time() * 1000
    cluster.start(OLD_LEADER)
    cluster.start(OTHER)
    truncated_to = wait_until(lambda: truncation_offset(log, topic, restart_line), 60,
                              "broker 1 to truncate (its log line)")
    wait_until(lambda: set(view.partition(topic).isr) == {OLD_LEADER, STALE, OTHER}, 90, "the ISR full again")

    acknowledged = producer.acknowledged()
    lost = unreadable(acknowledged, readable_sequences(cluster.live_bootstrap_servers, topic))
    assert lost, "the scenario lost acknowledged messages"
    lost_offsets = sorted(acknowledged[seq][1] for seq in lost)
    assert lost_offsets[0] >= truncated_to, "what is lost lies above where broker 1 truncated"

    change = pipeline.wait_event("the UNCLEAN LEADER_CHANGE", lambda e: of(topic, "LEADER_CHANGE")(e)
                                 and e["leader"] == STALE)
    assert change["clean"] is False and change["previous_leader"] == OLD_LEADER
    try:
        wait_until(lambda: sum_of(pipeline, topic, "DATA_LOSS", "committed_lost") >= len(lost), DEADLINE_S,
                   "DATA_LOSS to count the lost messages")
    finally:
        losses = [e for e in pipeline.events() if of(topic, "DATA_LOSS")(e)]
        print("DATA_LOSS:", [(e["offset_start"], e["offset_end"], e["committed_lost"]) for e in losses],
              "ground truth:", len(lost), "from", lost_offsets[0], "to", lost_offsets[-1])
    assert sum(e["committed_lost"] for e in losses) == len(lost)
    assert losses[0]["offset_start"] == truncated_to, "where broker 2's log leaves broker 1's epoch"
    assert losses[-1]["offset_end"] == lost_offsets[-1] + 1, "the end of what broker 1 had committed"
    assert all(e["previous_leader"] == OLD_LEADER and e["severity"] == "critical" for e in losses)
    wait_until(lambda: pipeline.metric("replmon_committed_messages_lost_total", cluster="local", topic=topic)
               == len(lost), DEADLINE_S, "the committed-loss counter at the ground truth")

    # broker 1's truncation, once, with Kafka's own figure; none of it uncommitted: it led alone
    def truncations() -> list[dict[str, Any]]:
        return [e for e in pipeline.events() if of(topic, "LOG_TRUNCATION")(e) and e["brokers"] == [OLD_LEADER]]

    (truncation,) = wait_until(truncations, DEADLINE_S, "broker 1's LOG_TRUNCATION")
    assert (truncation["offset_start"], truncation["offset_end"]) == (truncated_to, lost_offsets[-1] + 1)
    assert truncation["uncommitted_lost"] == 0
    seen_after_s = (truncation["event_time_ms"] - restarted_ms) / 1000
    print(f"LOG_TRUNCATION sampled {seen_after_s:.1f} s after broker 1 was started again")
    assert seen_after_s < TRUNCATION_SEEN_WITHIN_S, "the agent reads the truncated log within seconds"
    divergences = [e for e in pipeline.events() if of(topic, "EPOCH_DIVERGENCE")(e)]
    assert all(e["uncommitted_lost"] == 0 and e["severity"] == "critical" for e in divergences)
