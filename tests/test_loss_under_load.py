"""Committed-data loss under continuous production, on the real cluster: the unclean scenario of an incident as it
happens, the producer never paused and replmon never waited for.

Leader 1 of a partition (replicas 1, 2, 3, min.insync.replicas 1, acks=1 writes) loses its followers one after
the other while the producer writes on; it leads alone (so it commits everything it appends), is SIGKILLed,
stale broker 2 is elected uncleanly, the producer moves to it at once, and broker 1 returns and truncates. The
ground truth is what a consumer can still read of the committed messages: those the sequenced producer saw
acknowledged, and those broker 1's log held when it died (Kafka's dump tool reads it: a write in flight at the
kill was committed, never acknowledged); the truncation's oracle is broker 1's own log line. The pipeline runs a
log-dir agent beside each broker, as ``replmon run`` does: broker 1's disk, read while it is down, tells how far
it had committed. The end-to-end module runs the scenario at the default timing (3 s, then 2.5 s), the chaos
test at random ones; here at a tighter one, the truncation's offsets checked too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer
from tests.pipeline import (
    DEADLINE_S,
    OLD_LEADER,
    OTHER,
    STALE_REPLICA,
    TOPIC_PREFIX,
    Pipeline,
    cause_unclean_loss,
    events_of,
    line_count,
    of,
    truncation_offset,
)

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

TRUNCATION_SEEN_WITHIN_S = 20
"""From the broker's start command (a JVM start and log recovery, ~5-10 s here) to the agent's sample of its
truncated log (1 s intervals)."""


@pytest.mark.parametrize(("before_second", "before_kill"), [
    pytest.param(150, 200, id="followers-out-3.5s-and-2s-before-the-kill"),
])
def test_unclean_election_under_load_reports_exactly_the_committed_messages_lost(
    agents: None, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer], before_second: int, before_kill: int,
) -> None:
    """``before_second``/``before_kill``: messages acknowledged (~100/s) after follower 3 stops before follower 2
    stops, and after that before the leader dies (tests.pipeline.cause_unclean_loss)."""
    cluster = healthy_cluster
    topic = TOPIC_PREFIX + topic_name
    loss = cause_unclean_loss(cluster, kafka_view, topic, producer_factory, before_second, before_kill)
    lost, lost_offsets = loss.lost, loss.lost_offsets
    log = cluster.node(OLD_LEADER).log_file
    restart_line = line_count(log)
    restarted_ms = time.time() * 1000
    cluster.start(OLD_LEADER)
    cluster.start(OTHER)
    truncated_to = wait_until(lambda: truncation_offset(log, topic, restart_line), 60,
                              "broker 1 to truncate (its log line)")
    wait_until(lambda: set(kafka_view.partition(topic).isr) == {OLD_LEADER, STALE_REPLICA, OTHER}, 90,
               "the ISR full again")
    assert lost_offsets[0] >= truncated_to, "what is lost lies above where broker 1 truncated"

    change = pipeline.wait_event("the UNCLEAN LEADER_CHANGE", lambda e: of(topic, "LEADER_CHANGE")(e)
                                 and e["leader"] == STALE_REPLICA)
    assert change["clean"] is False and change["previous_leader"] == OLD_LEADER
    try:
        wait_until(lambda: sum(e["committed_lost"] for e in events_of(pipeline, topic, "DATA_LOSS")) >= len(lost),
                   DEADLINE_S, "DATA_LOSS to count the lost messages")
    finally:
        losses = events_of(pipeline, topic, "DATA_LOSS")
        print("DATA_LOSS:", [(e["offset_start"], e["offset_end"], e["committed_lost"]) for e in losses],
              "ground truth:", len(lost), "from", lost_offsets[0], "to", lost_offsets[-1])
    assert sum(e["committed_lost"] for e in losses) == len(lost)
    assert losses[0]["offset_start"] == truncated_to, "where broker 2's log leaves broker 1's epoch"
    assert losses[-1]["offset_end"] == lost_offsets[-1] + 1, "the end of what broker 1 had committed"
    assert all(e["previous_leader"] == OLD_LEADER and e["severity"] == "critical" for e in losses)
    wait_until(lambda: pipeline.metric("replmon_committed_messages_lost_total", cluster="local", topic=topic)
               == len(lost), DEADLINE_S, "the committed-loss counter at the ground truth")

    # broker 1's truncation, once, with Kafka's own figure; none of it uncommitted: it led alone
    (truncation,) = wait_until(lambda: [e for e in events_of(pipeline, topic, "LOG_TRUNCATION")
                                        if e["brokers"] == [OLD_LEADER]], DEADLINE_S, "broker 1's LOG_TRUNCATION")
    assert (truncation["offset_start"], truncation["offset_end"]) == (truncated_to, lost_offsets[-1] + 1)
    assert truncation["uncommitted_lost"] == 0
    seen_after_s = (truncation["event_time_ms"] - restarted_ms) / 1000
    print(f"LOG_TRUNCATION sampled {seen_after_s:.1f} s after broker 1 was started again")
    assert seen_after_s < TRUNCATION_SEEN_WITHIN_S, "the agent reads the truncated log within seconds"
    divergences = events_of(pipeline, topic, "EPOCH_DIVERGENCE")
    assert all(e["uncommitted_lost"] == 0 and e["severity"] == "critical" for e in divergences)
