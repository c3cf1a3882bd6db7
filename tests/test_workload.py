"""The sequenced workload's ground truth for committed loss, without a cluster (the fault tests use it on one)."""

from __future__ import annotations

from replmon.testbed.workload import by_sequence, committed_unreadable, proven_committed, unreadable


def test_a_write_in_flight_when_the_lone_leader_died_is_committed_and_lost_where_it_was() -> None:
    """Broker 1 led alone and held seq 0-4 at offsets 0-4; the response for seq 4 never left it. The new leader
    had 0-2; the producer wrote seq 4 again at offset 3 and seq 5 at 4, and a consumer reads them there."""
    # seq 3 acknowledged by broker 1 before it died; seq 4's retry and seq 5 by the new leader
    acknowledged = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (0, 3), 4: (0, 3), 5: (0, 4)}
    held_alone = {(seq, 0, seq) for seq in range(5)}
    readable = {(0, 0, 0), (1, 0, 1), (2, 0, 2), (4, 0, 3), (5, 0, 4)}
    lost = committed_unreadable(acknowledged, held_alone, readable)
    # offsets 3 and 4 of broker 1's log: seq 3 (acknowledged) and seq 4 (in flight, written again elsewhere)
    assert lost == {(3, 0, 3), (4, 0, 4)}
    # the producer alone sees one: what the consumer's count by acknowledged sequence misses
    assert unreadable(acknowledged, by_sequence(readable)) == {3}


def test_only_offsets_the_consumer_read_past_are_judged() -> None:
    acknowledged = {0: (0, 0), 1: (0, 1), 2: (0, 9)}
    readable = {(0, 0, 0), (1, 0, 1)}
    assert committed_unreadable(acknowledged, set(), readable) == set()
    assert committed_unreadable(acknowledged, {(7, 0, 1)}, readable) == {(7, 0, 1)}


def test_an_acks_1_acknowledgement_proves_nothing_committed() -> None:
    """A leader acknowledged seq 2 at offset 2 alone (acks=1) and died before any follower had it: the clean
    election's leader wrote seq 3 there. Later the partition's leader died alone holding 0, 1, 3, 4, and the new
    leader had 0 and 1. Committed and lost: offsets 2 and 3 of the lone leader's log, not the acks=1 seq 2."""
    acknowledged = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (0, 2), 4: (0, 3)}
    held_alone = {(0, 0, 0), (1, 0, 1), (3, 0, 2), (4, 0, 3)}
    readable = {(0, 0, 0), (1, 0, 1), (5, 0, 2), (6, 0, 3)}
    assert proven_committed(acknowledged, 1) == {} == proven_committed(acknowledged, 0)
    assert proven_committed(acknowledged, "all") == acknowledged == proven_committed(acknowledged, -1)
    assert committed_unreadable(proven_committed(acknowledged, 1), held_alone, readable) == {(3, 0, 2), (4, 0, 3)}
    # counting the acks=1 acknowledgement as committed would add seq 2: one more than was ever committed
    assert len(committed_unreadable(acknowledged, held_alone, readable)) == 3
