"""Unit tests of the detection rules (streaming.detect): each rule firing and not firing, metrics, ids, order."""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from replmon.contracts.events import Event, EventSource, EventType, Severity
from replmon.contracts.samples import PartitionSample, ReplicaSample
from replmon.core.config import StreamConfig
from streaming.detect import (
    DetectConfig,
    Health,
    PartitionMetrics,
    expire,
    forget,
    metrics_of,
    step,
    step_dict,
    step_replica,
)
from streaming.state import (
    ElectionBasis,
    ElectionLoss,
    PartitionMeta,
    PartitionState,
    ReplicaLog,
    dump_state,
    load_state,
)

CFG = DetectConfig(stale_after_ms=30_000, hw_stalled_after_ms=30_000, flapping_window_ms=300_000,
                   flapping_threshold=4)  # fmt: skip
S = 1000  # ms per second: sample times below are written in seconds


def sample(
    t: int,
    *,
    leader: int = 1,
    epoch: int = 5,
    replicas: Iterable[int] = (1, 2, 3),
    isr: Iterable[int] | None = None,
    elr: Iterable[int] | None = None,
    hw: int | None = 100,
    leos: Mapping[int, int | None] | None = None,
    min_isr: int | None = 2,
    lineage: Iterable[tuple[int, int]] | None = None,
    cycle: int | None = None,
    topic_id: str | None = None,
    reassigning: tuple[Iterable[int], Iterable[int]] | None = None,
) -> dict[str, Any]:
    """A PartitionSample as the Spark job hands it over: a plain dict. ``leos``: broker -> LEO, None for a
    broker that did not answer; by default every replica at 100."""
    replicas = list(replicas)
    leos = {b: 100 for b in replicas} if leos is None else leos
    return {
        "schema": "partition/v1", "cluster": "prod", "collector_id": "c1", "cycle": t if cycle is None else cycle,
        "sample_time_ms": t * S, "topic": "orders", "topic_id": topic_id, "partition": 7,
        "leader": leader, "leader_epoch": epoch, "replicas": replicas,
        "isr": replicas if isr is None else list(isr), "elr": None if elr is None else list(elr),
        "last_known_elr": None, "offline_replicas": [], "high_watermark": hw, "last_stable_offset": None,
        "log_start_offset": 0,
        "replica_offsets": [
            {"broker_id": b, "log_end_offset": leo, "error": None if leo is not None else "unreachable"}
            for b, leo in leos.items()
        ],
        "epoch_lineage": None if lineage is None else [{"leader_epoch": e, "start_offset": o} for e, o in lineage],
        "min_insync_replicas": min_isr, "unclean_leader_election": False, "error": None,
        "adding_replicas": None if reassigning is None else list(reassigning[0]),
        "removing_replicas": None if reassigning is None else list(reassigning[1]),
    }  # fmt: skip


def replica(
    t: int,
    broker: int,
    leo: int | None,
    *,
    lineage: Iterable[tuple[int, int]] = (),
    last_batch_epoch: int | None = None,
    cycle: int | None = None,
) -> dict[str, Any]:
    """A ReplicaSample of the log-dir agent, as a dict."""
    return {
        "schema": "replica/v1", "cluster": "prod", "agent_id": f"agent-{broker}",
        "cycle": t if cycle is None else cycle, "sample_time_ms": t * S, "broker_id": broker,
        "log_dir": f"/data/{broker}", "topic": "orders", "topic_id": None, "partition": 7, "log_end_offset": leo,
        "high_watermark_checkpoint": None, "recovery_point": None, "log_start_offset": 0,
        "epoch_lineage": [{"leader_epoch": e, "start_offset": o} for e, o in lineage],
        "last_batch_leader_epoch": last_batch_epoch, "size_bytes": 0, "error": None,
    }  # fmt: skip


class Feed:
    """Feeds samples through the detector like the job does, keeping the state and every event."""

    def __init__(self, cfg: DetectConfig = CFG) -> None:
        self.cfg = cfg
        self.state: PartitionState | None = None
        self.events: list[Event] = []
        self.metrics: PartitionMetrics | None = None

    def partition(self, s: Mapping[str, Any], now_ms: int | None = None) -> list[Event]:
        self.state, events, self.metrics = step_dict(self.state, s, self.cfg, now_ms)
        self.events += events
        return events

    def replica(self, r: Mapping[str, Any]) -> list[Event]:
        self.state, events = step_replica(self.state, r, self.cfg)
        self.events += events
        return events

    def expire(self, now_ms: int) -> list[Event]:
        assert self.state is not None
        self.state, events = expire(self.state, now_ms, self.cfg)
        self.events += events
        return events

    def of(self, etype: EventType) -> list[Event]:
        return [e for e in self.events if e.type is etype]


def types(events: Iterable[Event]) -> list[EventType]:
    return [e.type for e in events]


# ----------------------------------------------------------------------------------------------------------
# Metrics


def test_healthy_partition_has_no_events_and_healthy_metrics() -> None:
    feed = Feed()
    assert feed.partition(sample(1)) == []
    assert feed.partition(sample(2, hw=150, leos={1: 150, 2: 150, 3: 150})) == []
    m = feed.metrics
    assert m is not None
    assert (m.leader, m.leader_epoch, m.replica_count, m.isr_size, m.min_insync_replicas) == (1, 5, 3, 3, 2)
    assert (m.offline, m.under_replicated, m.under_min_isr, m.at_min_isr) == (False, False, False, False)
    assert (m.high_watermark, m.log_end_offset, m.hw_lag, m.log_start_offset) == (150, 150, 0, 0)
    assert m.follower_lag == {2: 0, 3: 0}
    assert m.health is Health.HEALTHY


def test_lags_are_leader_leo_minus_hw_and_minus_follower_leo() -> None:
    feed = Feed()
    feed.partition(sample(1, hw=90, leos={1: 120, 2: 100, 3: 117}))
    m = feed.metrics
    assert m is not None
    assert m.hw_lag == 120 - 90
    assert m.follower_lag == {2: 120 - 100, 3: 120 - 117}
    assert m.max_follower_lag == 20
    assert m.health is Health.LAGGING


def test_lags_are_clamped_at_zero_when_hw_and_leos_come_from_different_moments() -> None:
    feed = Feed()
    # The HW answer and a follower's LEO answer were taken after the leader's LEO answer.
    events = feed.partition(sample(1, hw=105, leos={1: 100, 2: 103, 3: 100}))
    m = feed.metrics
    assert m is not None
    assert m.hw_lag == 0
    assert m.follower_lag == {2: 0, 3: 0}
    assert events == []


def test_unknown_leo_gives_unknown_lag() -> None:
    feed = Feed()
    feed.partition(sample(1, leos={1: 100, 2: None, 3: 90}))
    m = feed.metrics
    assert m is not None
    assert m.follower_lag == {2: None, 3: 10}
    feed.partition(sample(2, leos={1: None, 2: 100, 3: 100}))
    m = feed.metrics
    assert m is not None
    assert (m.log_end_offset, m.hw_lag, m.follower_lag, m.max_follower_lag) == (None, None, {2: None, 3: None}, None)


def test_a_silent_followers_lag_grows_from_its_last_known_log_end_offset() -> None:
    """A dead or paused follower does not answer: its lag is the leader's LEO minus the last LEO read from it, so
    it keeps growing while the leader appends (and ReplmonReplicaLagHigh can fire for it)."""
    feed = Feed()
    feed.partition(sample(1, leos={1: 100, 2: 100, 3: 95}))
    feed.partition(sample(2, leos={1: 180, 2: 180, 3: None}))
    feed.partition(sample(3, leos={1: 260, 2: 260, 3: None}))
    m = feed.metrics
    assert m is not None
    assert m.follower_lag == {2: 0, 3: 260 - 95} and m.max_follower_lag == 165


def test_a_followers_time_lag_is_when_the_leaders_log_ended_where_the_followers_ends_now() -> None:
    """Samples every 5 s of a leader appending 100 messages a second: a follower 150 messages behind is 1.5 s behind
    (interpolated between the leader's LEO readings); a paused one falls further behind as the leader appends,
    second for second; an idle partition's follower is caught up."""
    feed = Feed()
    for i in range(4):
        feed.partition(sample(5 * i, leos={1: 500 * i, 2: 500 * i, 3: 500 * i}))
    feed.partition(sample(20, leos={1: 2000, 2: 1850, 3: 1500}))
    m = feed.metrics
    assert m is not None and m.follower_time_lag_ms == {2: 1_500, 3: 5_000}
    feed.partition(sample(25, leos={1: 2500, 2: 2500, 3: None}))  # broker 3 paused since it read 1500
    assert feed.metrics is not None and feed.metrics.follower_time_lag_ms == {2: 0, 3: 10_000}
    for t in (30, 35, 40, 45, 50, 55, 60, 65):  # idle: nothing appended, nothing to catch up with
        feed.partition(sample(t, leos={1: 2500, 2: 2500, 3: 2500}))
    assert feed.metrics is not None and feed.metrics.follower_time_lag_ms == {2: 0, 3: 0}
    feed.partition(sample(70, leos={1: 2600, 2: 2600, 3: None}))
    feed.partition(sample(75, leos={1: 2700, 2: 2700, 3: 0}))  # behind all the 40 s remembered: at least that
    assert feed.metrics is not None and feed.metrics.follower_time_lag_ms[3] == 75_000 - 40_000


def test_a_leader_change_starts_the_leaders_log_history_again() -> None:
    feed = Feed()
    feed.partition(sample(0, leos={1: 100, 2: 100, 3: 100}))
    feed.partition(sample(5, leos={1: 600, 2: 600, 3: 600}))
    feed.partition(sample(10, leader=2, epoch=6, leos={1: 600, 2: 700, 3: 650}))
    assert feed.state is not None and feed.state.leader_log_end_history == ((10_000, 700),)
    # nothing remembered yet of the new leader's log: a follower behind it is at least 0 s behind
    assert feed.metrics is not None and feed.metrics.follower_time_lag_ms == {1: 0, 3: 0}
    feed.partition(sample(15, leader=2, epoch=6, leos={1: 1200, 2: 1200, 3: 700}))
    assert feed.metrics is not None and feed.metrics.follower_time_lag_ms == {1: 0, 3: 5_000}


@pytest.mark.parametrize(
    ("kwargs", "health", "flags"),
    [
        ({"leader": -1, "isr": [1]}, Health.OFFLINE, (True, True, True, False)),
        ({"isr": [1]}, Health.UNDER_MIN_ISR, (False, True, True, False)),
        ({"isr": [1, 2], "min_isr": 1}, Health.UNDER_REPLICATED, (False, True, False, False)),
        ({"replicas": [1, 2], "isr": [1, 2], "min_isr": 2}, Health.AT_MIN_ISR, (False, False, False, True)),
        ({"leos": {1: 101, 2: 100, 3: 100}, "min_isr": 1}, Health.LAGGING, (False, False, False, False)),
        ({"min_isr": 1}, Health.HEALTHY, (False, False, False, False)),
    ],
)
def test_health_rank(kwargs: dict[str, Any], health: Health, flags: tuple[bool, ...]) -> None:
    feed = Feed()
    feed.partition(sample(1, **kwargs))
    m = feed.metrics
    assert m is not None
    assert m.health is health
    assert (m.offline, m.under_replicated, m.under_min_isr, m.at_min_isr) == flags


def test_health_sorts_unhealthy_first() -> None:
    assert sorted(Health, reverse=True)[-1] is Health.OFFLINE
    assert sorted([Health.HEALTHY, Health.LAGGING, Health.OFFLINE, Health.AT_MIN_ISR]) == [
        Health.OFFLINE, Health.AT_MIN_ISR, Health.LAGGING, Health.HEALTHY,
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# ISR shrink / expand / flapping


def test_isr_shrink_names_the_broker_and_its_lag() -> None:
    feed = Feed()
    feed.partition(sample(1))
    events = feed.partition(sample(2, isr=[1, 3], hw=100, leos={1: 140, 2: 100, 3: 140}))
    assert types(events) == [EventType.ISR_SHRINK]
    shrink = events[0]
    assert (shrink.brokers, shrink.lag, shrink.isr, shrink.previous_isr) == ([2], 140 - 100, [1, 3], [1, 2, 3])
    assert shrink.severity is Severity.WARNING
    assert (shrink.cluster, shrink.topic, shrink.partition, shrink.event_time_ms) == ("prod", "orders", 7, 2 * S)


def test_isr_expand_and_swap() -> None:
    feed = Feed()
    feed.partition(sample(1, isr=[1, 3]))
    events = feed.partition(sample(2, isr=[1, 2]))
    assert {(e.type, e.brokers[0]) for e in events} == {(EventType.ISR_SHRINK, 3), (EventType.ISR_EXPAND, 2)}


def test_isr_reordered_is_not_a_change() -> None:
    feed = Feed()
    feed.partition(sample(1, isr=[1, 2, 3]))
    assert feed.partition(sample(2, isr=[3, 1, 2])) == []


def _flap(feed: Feed, start: int, changes: int, every_s: int) -> None:
    """``changes`` ISR changes of broker 3 (out, in, out, ...), one every ``every_s`` seconds."""
    for i in range(changes):
        assert feed.state is not None
        isr = [1, 2] if 3 in feed.state.meta.isr else [1, 2, 3]
        feed.partition(sample(start + (i + 1) * every_s, isr=isr))


def test_isr_flapping_fires_once_when_over_threshold_within_window() -> None:
    feed = Feed()
    feed.partition(sample(0))
    _flap(feed, 0, CFG.flapping_threshold + 1, every_s=10)
    flapping = feed.of(EventType.ISR_FLAPPING)
    assert len(flapping) == 1
    assert flapping[0].brokers == [3]
    assert flapping[0].event_time_ms == (CFG.flapping_threshold + 1) * 10 * S
    _flap(feed, 100, 4, every_s=10)  # more flapping within the same window: no second event
    assert len(feed.of(EventType.ISR_FLAPPING)) == 1


def test_isr_changes_at_threshold_are_not_flapping() -> None:
    feed = Feed()
    feed.partition(sample(0))
    _flap(feed, 0, CFG.flapping_threshold, every_s=10)
    assert feed.of(EventType.ISR_FLAPPING) == []


def test_isr_changes_spread_over_more_than_the_window_are_not_flapping() -> None:
    feed = Feed()
    feed.partition(sample(0))
    spacing_s = CFG.flapping_window_ms // S // CFG.flapping_threshold + 1
    _flap(feed, 0, 3 * CFG.flapping_threshold, every_s=spacing_s)
    assert len(feed.of(EventType.ISR_SHRINK)) + len(feed.of(EventType.ISR_EXPAND)) == 3 * CFG.flapping_threshold
    assert feed.of(EventType.ISR_FLAPPING) == []


def test_isr_flapping_fires_again_in_a_later_window() -> None:
    feed = Feed()
    feed.partition(sample(0))
    _flap(feed, 0, CFG.flapping_threshold + 1, every_s=10)
    _flap(feed, CFG.flapping_window_ms // S + 100, CFG.flapping_threshold + 1, every_s=10)
    assert len(feed.of(EventType.ISR_FLAPPING)) == 2


# ----------------------------------------------------------------------------------------------------------
# Leader changes and offline


def test_clean_leader_change() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, epoch=5))
    events = feed.partition(sample(2, leader=2, epoch=6, isr=[2, 3]))
    change = feed.of(EventType.LEADER_CHANGE)
    assert len(change) == 1
    c = change[0]
    assert (c.clean, c.leader, c.previous_leader, c.leader_epoch, c.previous_leader_epoch) == (True, 2, 1, 6, 5)
    assert c.brokers == [1, 2]
    assert c.severity is Severity.INFO
    assert c.previous_isr == [1, 2, 3]
    assert EventType.ISR_SHRINK in types(events)


def test_unclean_leader_change_when_new_leader_was_outside_isr_and_elr() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, isr=[1, 2], elr=[]))
    feed.partition(sample(2, leader=3, epoch=6, isr=[3], elr=[]))
    (c,) = feed.of(EventType.LEADER_CHANGE)
    assert c.clean is False
    assert c.severity is Severity.CRITICAL
    assert "UNCLEAN" in c.message


def test_leader_from_elr_is_clean() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, isr=[1], elr=[3]))
    feed.partition(sample(2, leader=3, epoch=6, isr=[3]))
    (c,) = feed.of(EventType.LEADER_CHANGE)
    assert c.clean is True


def test_leader_epoch_bump_with_same_leader_is_a_clean_leader_change() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, epoch=5))
    feed.partition(sample(2, leader=1, epoch=6))
    (c,) = feed.of(EventType.LEADER_CHANGE)
    assert (c.clean, c.leader, c.previous_leader, c.leader_epoch, c.brokers) == (True, 1, 1, 6, [1])


def test_going_offline_is_offline_start_not_a_leader_change() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, isr=[1]))
    events = feed.partition(sample(2, leader=-1, epoch=6, isr=[1], hw=None, leos={1: None, 2: 100, 3: 100}))
    assert types(events) == [EventType.OFFLINE_START]
    assert events[0].previous_leader == 1
    assert events[0].severity is Severity.CRITICAL
    assert feed.partition(sample(3, leader=-1, epoch=6, isr=[1], hw=None, leos={1: None, 2: 100, 3: 100})) == []
    assert feed.metrics is not None and feed.metrics.offline


def test_back_from_offline_judged_against_the_isr_kept_while_offline() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, isr=[1, 2]))
    # Both ISR members died within one cycle: the controller moved leadership to 2, then kept ISR [2].
    feed.partition(sample(2, leader=-1, epoch=7, isr=[2], hw=None, leos={1: None, 2: None, 3: 90}))
    events = feed.partition(sample(3, leader=1, epoch=8, isr=[1], hw=100, leos={1: 100, 2: None, 3: 90}))
    assert types(events)[:2] == [EventType.OFFLINE_END, EventType.LEADER_CHANGE]
    change = events[1]
    assert (change.clean, change.previous_leader, change.previous_isr) == (False, 1, [2])


def test_back_from_offline_judged_against_last_online_isr_when_offline_isr_is_empty() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, isr=[1, 2]))
    feed.partition(sample(2, leader=-1, epoch=6, isr=[], hw=None, leos={1: None, 2: None, 3: 90}))
    feed.partition(sample(3, leader=2, epoch=7, isr=[2], leos={1: None, 2: 100, 3: 90}))
    (c,) = feed.of(EventType.LEADER_CHANGE)
    assert (c.clean, c.previous_leader, c.previous_isr) == (True, 1, [1, 2])
    feed.partition(sample(4, leader=-1, epoch=8, isr=[], hw=None, leos={1: None, 2: None, 3: 90}))
    feed.partition(sample(5, leader=3, epoch=9, isr=[3], leos={1: None, 2: None, 3: 90}))
    assert [e.clean for e in feed.of(EventType.LEADER_CHANGE)] == [True, False]
    assert len(feed.of(EventType.OFFLINE_START)) == len(feed.of(EventType.OFFLINE_END)) == 2


def test_first_sample_of_an_offline_partition_starts_offline() -> None:
    feed = Feed()
    events = feed.partition(sample(1, leader=-1, isr=[1], hw=None))
    assert types(events) == [EventType.OFFLINE_START, EventType.UNDER_MIN_ISR_START]


# ----------------------------------------------------------------------------------------------------------
# High watermark


def test_hw_regression_counts_committed_messages_lost() -> None:
    feed = Feed()
    feed.partition(sample(1, hw=100, leos={1: 100, 2: 100, 3: 100}))
    events = feed.partition(sample(2, hw=93, leos={1: 100, 2: 100, 3: 100}))
    (r,) = events
    assert r.type is EventType.HW_REGRESSION
    assert (r.committed_lost, r.offset_start, r.offset_end) == (100 - 93, 93, 100)
    assert r.severity is Severity.CRITICAL


def test_hw_growing_or_equal_is_not_a_regression() -> None:
    feed = Feed()
    for t, hw in enumerate([100, 100, 120, 121, 121], start=1):
        feed.partition(sample(t, hw=hw, leos={1: 125, 2: 125, 3: 125}))
    assert feed.of(EventType.HW_REGRESSION) == []


def test_samples_without_hw_are_ignored_for_regression() -> None:
    feed = Feed()
    feed.partition(sample(1, hw=100))
    feed.partition(sample(2, hw=None))
    feed.partition(sample(3, hw=100))
    assert feed.of(EventType.HW_REGRESSION) == []
    feed.partition(sample(4, hw=None))
    feed.partition(sample(5, hw=95))
    (r,) = feed.of(EventType.HW_REGRESSION)
    assert r.committed_lost == 5


def test_clean_leader_change_keeping_hw_is_not_a_regression() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, hw=100))
    feed.partition(sample(2, leader=2, epoch=6, hw=None, leos={1: None, 2: 100, 3: 100}))  # OFFSET_NOT_AVAILABLE
    feed.partition(sample(3, leader=2, epoch=6, hw=100, leos={1: None, 2: 100, 3: 100}))
    assert types(feed.events) == [EventType.LEADER_CHANGE]


# ----------------------------------------------------------------------------------------------------------
# HW stalled


def test_hw_stalled_fires_once_after_the_threshold() -> None:
    feed = Feed()
    threshold_s = CFG.hw_stalled_after_ms // S
    feed.partition(sample(0, hw=100, leos={1: 100, 2: 100, 3: 100}))
    feed.partition(sample(5, hw=100, leos={1: 110, 2: 100, 3: 110}))  # the stall starts here
    for t in range(10, 5 + threshold_s + 1, 5):
        feed.partition(sample(t, hw=100, leos={1: 100 + 2 * t, 2: 100, 3: 100 + 2 * t}))
    assert feed.of(EventType.HW_STALLED) == []
    t = 5 + threshold_s + 1
    feed.partition(sample(t, hw=100, leos={1: 200, 2: 100, 3: 200}))
    (stall,) = feed.of(EventType.HW_STALLED)
    assert (stall.offset_start, stall.offset_end, stall.lag, stall.event_time_ms) == (100, 200, 100, t * S)
    feed.partition(sample(t + 5, hw=100, leos={1: 210, 2: 100, 3: 210}))
    assert len(feed.of(EventType.HW_STALLED)) == 1


def test_hw_moving_behind_a_growing_leo_is_not_stalled() -> None:
    feed = Feed()
    for t in range(0, 10 * CFG.hw_stalled_after_ms // S, 5):
        feed.partition(sample(t, hw=1000 + 10 * t, leos={1: 1010 + 10 * t, 2: 1005 + 10 * t, 3: 1010 + 10 * t}))
    assert feed.of(EventType.HW_STALLED) == []


def test_hw_equal_to_leo_on_an_idle_partition_is_not_stalled() -> None:
    feed = Feed()
    for t in range(0, 10 * CFG.hw_stalled_after_ms // S, 5):
        feed.partition(sample(t, hw=100))
    assert feed.of(EventType.HW_STALLED) == []


def test_hw_stall_resets_when_hw_moves_and_can_fire_again() -> None:
    feed = Feed()
    over = CFG.hw_stalled_after_ms // S + 1
    feed.partition(sample(0, hw=100, leos={1: 150, 2: 100, 3: 150}))
    feed.partition(sample(over, hw=100, leos={1: 160, 2: 100, 3: 160}))
    feed.partition(sample(over + 1, hw=160, leos={1: 170, 2: 160, 3: 170}))  # moves: reset
    feed.partition(sample(over + 2, hw=160, leos={1: 180, 2: 160, 3: 180}))
    assert len(feed.of(EventType.HW_STALLED)) == 1
    feed.partition(sample(2 * over + 2, hw=160, leos={1: 190, 2: 160, 3: 190}))
    assert len(feed.of(EventType.HW_STALLED)) == 2


# ----------------------------------------------------------------------------------------------------------
# Log truncation


def test_log_truncation_per_broker() -> None:
    feed = Feed()
    feed.partition(sample(1, hw=100, leos={1: 120, 2: 115, 3: 100}))
    events = feed.partition(sample(2, hw=100, leos={1: 125, 2: 104, 3: 101}))
    (tr,) = events
    assert tr.type is EventType.LOG_TRUNCATION
    assert (tr.brokers, tr.truncated, tr.offset_start, tr.offset_end) == ([2], 115 - 104, 104, 115)


def test_unreachable_replica_is_compared_with_its_last_known_leo() -> None:
    feed = Feed()
    feed.partition(sample(1, leos={1: 120, 2: 120, 3: 120}))
    feed.partition(sample(2, leos={1: 125, 2: None, 3: 125}))
    assert feed.events == []
    feed.partition(sample(3, leos={1: 130, 2: 110, 3: 130}))
    (tr,) = feed.of(EventType.LOG_TRUNCATION)
    assert (tr.brokers, tr.truncated) == ([2], 10)


def test_log_truncation_seen_by_agent_and_sampler_is_reported_once() -> None:
    feed = Feed()
    feed.partition(sample(1, leos={1: 120, 2: 120, 3: 120}))
    feed.replica(replica(1, 2, 120))
    feed.partition(sample(2, leos={1: 125, 2: None, 3: 125}))  # broker 2 is down
    feed.replica(replica(3, 2, 100))  # the agent sees it truncate on restart
    feed.partition(sample(4, leos={1: 130, 2: 100, 3: 130}))  # the sampler sees it back
    feed.replica(replica(5, 2, 100))
    (tr,) = feed.of(EventType.LOG_TRUNCATION)
    assert tr.truncated == 20
    feed2 = Feed()  # the other way round
    feed2.partition(sample(1, leos={1: 120, 2: 120, 3: 120}))
    feed2.replica(replica(1, 2, 120))
    feed2.partition(sample(2, leos={1: 125, 2: 100, 3: 125}))
    feed2.replica(replica(3, 2, 100))
    assert [e.truncated for e in feed2.of(EventType.LOG_TRUNCATION)] == [20]


def test_replica_reassigned_away_and_back_is_not_a_truncation() -> None:
    feed = Feed()
    feed.partition(sample(1, replicas=[1, 2, 3], leos={1: 500, 2: 500, 3: 500}))
    feed.partition(sample(2, replicas=[1, 3], leos={1: 510, 3: 510}))
    feed.partition(sample(3, replicas=[1, 3, 2], isr=[1, 3], leos={1: 520, 3: 520, 2: 0}))
    assert feed.of(EventType.LOG_TRUNCATION) == []


# ----------------------------------------------------------------------------------------------------------
# Reassignments


def test_a_reassignment_is_two_replicas_changes_no_shrink_and_no_under_replicated_partition() -> None:
    """[1, 2, 3] -> [1, 2, 4], as Kafka shows it: the new replica beside the old ones while it catches up (adding
    [4], removing [3]), then the old one gone with its place in the ISR. Kafka counts the partition under-replicated
    only when its ISR is smaller than the replicas less the ones being added."""
    feed = Feed()
    feed.partition(sample(1, reassigning=((), ())))
    start = feed.partition(sample(2, replicas=[1, 2, 3, 4], isr=[1, 2, 3], leos={1: 100, 2: 100, 3: 100, 4: 0},
                                  reassigning=([4], [3])))
    (change,) = start
    assert (change.type, change.severity, change.brokers) == (EventType.REPLICAS_CHANGE, Severity.INFO, [4])
    assert (change.replicas, change.previous_replicas) == ([1, 2, 3, 4], [1, 2, 3])
    assert (change.adding_replicas, change.removing_replicas) == ([4], [3])
    assert "added [4]" in change.message and "adding [4], removing [3]" in change.message
    assert feed.metrics is not None  # the new replica copies the log: not under-replicated, not lagging
    assert (feed.metrics.under_replicated, feed.metrics.health) == (False, Health.HEALTHY)
    assert feed.metrics.follower_lag[4] == 100  # the new replica is behind, as it is
    assert (feed.metrics.reassigning, feed.metrics.adding_replicas) == (True, (4,))
    joined = feed.partition(sample(3, replicas=[1, 2, 3, 4], leos={b: 100 for b in (1, 2, 3, 4)},
                                   reassigning=([4], [3])))
    assert types(joined) == [EventType.ISR_EXPAND] and joined[0].brokers == [4]
    done = feed.partition(sample(4, replicas=[1, 2, 4], leos={1: 100, 2: 100, 4: 100}, reassigning=((), ())))
    (end,) = done  # broker 3 left the ISR with the assignment: no ISR_SHRINK
    assert (end.type, end.brokers, end.replicas, end.previous_replicas) == (
        EventType.REPLICAS_CHANGE, [3], [1, 2, 4], [1, 2, 3, 4])
    assert (end.adding_replicas, end.removing_replicas) == ([], []) and "removed [3]" in end.message
    assert (feed.metrics.under_replicated, feed.metrics.health) == (False, Health.HEALTHY)
    assert (feed.metrics.reassigning, feed.metrics.adding_replicas) == (False, ())
    assert feed.of(EventType.ISR_SHRINK) == [] and feed.of(EventType.ISR_FLAPPING) == []


def test_a_replica_being_added_far_behind_is_no_lagging_follower_and_its_lag_stays_its_own() -> None:
    """A throttled move copies the whole log to the replica being added: its lag is the copy's progress. It stays in
    ``follower_lag`` (its own series) and out of ``max_follower_lag`` and the health; a follower that is not being
    added still counts, and the copy counts again once nothing tells it is one (or the move is done)."""
    feed = Feed()
    leos = {1: 90_000, 2: 90_000, 3: 90_000, 4: 12}
    feed.partition(sample(1, replicas=[1, 2, 3, 4], isr=[1, 2, 3], hw=90_000, leos=leos, reassigning=([4], [3])))
    m = feed.metrics
    assert m is not None
    assert (m.follower_lag, m.max_follower_lag, m.health) == ({2: 0, 3: 0, 4: 89_988}, 0, Health.HEALTHY)
    assert (m.adding_replicas, m.reassigning, m.under_replicated) == ((4,), True, False)
    # a follower that is not being added falls behind: that one lags, the copy still does not count
    feed.partition(sample(2, replicas=[1, 2, 3, 4], isr=[1, 2, 3], hw=90_050,
                          leos={1: 90_100, 2: 90_050, 3: 90_100, 4: 40}, reassigning=([4], [3])))
    m = feed.metrics
    assert m is not None and (m.max_follower_lag, m.health, m.follower_lag[4]) == (50, Health.LAGGING, 90_060)
    # the only follower is the copy (a replication factor raised from 1 to 2): no follower lag to count
    lone = Feed()
    lone.partition(sample(1, replicas=[1, 4], isr=[1], min_isr=None, leos={1: 500, 4: 0}, hw=500,
                          reassigning=([4], [])))
    m = lone.metrics
    assert m is not None and (m.max_follower_lag, m.health, m.follower_lag) == (None, Health.HEALTHY, {4: 500})
    # replicas being removed alone (the copy caught up and the move not yet completed): still reassigning
    feed.partition(sample(3, replicas=[1, 2, 3, 4], isr=[1, 2, 3, 4], hw=90_200,
                          leos=dict.fromkeys((1, 2, 3, 4), 90_200), reassigning=((), [3])))
    m = feed.metrics
    assert m is not None and (m.adding_replicas, m.reassigning, m.health) == ((), True, Health.HEALTHY)
    # replicas Kafka's metadata alone shows (nothing tells a move): a replica behind is a lagging follower
    plain = Feed()
    plain.partition(sample(1, replicas=[1, 2, 3, 4], isr=[1, 2, 3], hw=90_000, leos=leos))
    m = plain.metrics
    assert m is not None and (m.max_follower_lag, m.health, m.reassigning) == (89_988, Health.UNDER_REPLICATED,
                                                                                  False)


def test_a_replica_of_a_reassignment_in_flight_that_leaves_the_isr_is_a_shrink() -> None:
    feed = Feed()
    feed.partition(sample(1, replicas=[1, 2, 3, 4], isr=[1, 2, 3], reassigning=([4], [3])))
    shrink = feed.partition(sample(2, replicas=[1, 2, 3, 4], isr=[1, 3], reassigning=([4], [3])))
    assert types(shrink) == [EventType.ISR_SHRINK] and shrink[0].brokers == [2]
    assert feed.metrics is not None and feed.metrics.under_replicated  # 2 in sync of a replication factor 3


def test_a_sample_that_cannot_tell_the_reassignment_keeps_what_the_state_knew_while_the_replicas_stay() -> None:
    """A collector whose ListPartitionReassignments went unanswered (or an older one) sends no adding and removing
    replicas: the state's hold while the replicas are those it knew them for; without any, the replicas a
    reassignment adds count as Kafka's metadata alone shows them."""
    feed = Feed()
    feed.partition(sample(1, replicas=[1, 2, 3, 4], isr=[1, 2, 3], reassigning=([4], [3])))
    feed.partition(sample(2, replicas=[1, 2, 3, 4], isr=[1, 2, 3]))
    assert feed.metrics is not None and not feed.metrics.under_replicated
    assert feed.state is not None and feed.state.meta.adding_replicas == (4,)
    unknown = feed.partition(sample(3, replicas=[1, 2, 3, 4, 5], isr=[1, 2, 3]))
    assert types(unknown) == [EventType.REPLICAS_CHANGE] and unknown[0].adding_replicas is None
    assert feed.metrics.under_replicated  # nothing tells that 4 and 5 are being added
    told = feed.partition(sample(4, replicas=[1, 2, 3, 4, 5], isr=[1, 2, 3], reassigning=([4, 5, 9], [])))
    assert told == [] and not feed.metrics.under_replicated  # 9: not a replica, ignored
    assert feed.state.meta.adding_replicas == (4, 5)


def test_replicas_reordered_is_a_replicas_change_of_no_broker() -> None:
    feed = Feed()
    feed.partition(sample(1, replicas=[1, 2, 3]))
    (change,) = feed.partition(sample(2, replicas=[2, 3, 1]))
    assert (change.type, change.brokers) == (EventType.REPLICAS_CHANGE, [])
    assert change.message.endswith("replicas [1, 2, 3] -> [2, 3, 1] (reordered)")


def test_agent_truncation_ignores_replicas_no_longer_assigned() -> None:
    feed = Feed()
    feed.partition(sample(1, replicas=[1, 2]))
    feed.replica(replica(1, 3, 500))
    feed.replica(replica(2, 3, 0))
    assert feed.events == []


# ----------------------------------------------------------------------------------------------------------
# Epochs


def test_epoch_regression_is_reported_once_and_not_adopted() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=2, epoch=8))
    events = feed.partition(sample(2, leader=1, epoch=7))  # metadata from a broker that lags
    (r,) = events
    assert r.type is EventType.EPOCH_REGRESSION
    assert (r.leader_epoch, r.previous_leader_epoch) == (7, 8)
    assert feed.partition(sample(3, leader=1, epoch=7)) == []
    assert feed.partition(sample(4, leader=2, epoch=8)) == []  # not a second leader change
    assert feed.metrics is not None and feed.metrics.leader == 2


def test_under_min_isr_start_and_end_once_each() -> None:
    feed = Feed()
    feed.partition(sample(1, isr=[1, 2, 3], min_isr=2))
    feed.partition(sample(2, isr=[1, 2], min_isr=None))  # topic configs are not re-read every cycle
    assert feed.of(EventType.UNDER_MIN_ISR_START) == []
    feed.partition(sample(3, isr=[1], min_isr=None))
    feed.partition(sample(4, isr=[1], min_isr=None))
    (start,) = feed.of(EventType.UNDER_MIN_ISR_START)
    assert (start.isr, start.severity) == ([1], Severity.CRITICAL)
    feed.partition(sample(5, isr=[1, 3], min_isr=None))
    feed.partition(sample(6, isr=[1, 3, 2], min_isr=None))
    (end,) = feed.of(EventType.UNDER_MIN_ISR_END)
    assert end.event_time_ms == 5 * S


def test_unknown_min_isr_never_starts_under_min_isr() -> None:
    feed = Feed()
    feed.partition(sample(1, isr=[1], min_isr=None))
    assert feed.events == []


def test_min_isr_raised_by_config_starts_under_min_isr() -> None:
    feed = Feed()
    feed.partition(sample(1, isr=[1, 2], min_isr=2))
    feed.partition(sample(2, isr=[1, 2], min_isr=3))
    assert types(feed.events) == [EventType.UNDER_MIN_ISR_START]


# ----------------------------------------------------------------------------------------------------------
# Epoch divergence (lineages from the sampler and the log-dir agents)

LEADER_LINEAGE = ((0, 0), (3, 40), (5, 90))


def _with_leader_lineage() -> Feed:
    feed = Feed()
    feed.partition(sample(1, leader=1, epoch=5, lineage=LEADER_LINEAGE, leos={1: 120, 2: 120, 3: 120}))
    return feed


def test_lineage_agreeing_with_the_leader_is_no_divergence() -> None:
    feed = _with_leader_lineage()
    feed.replica(replica(2, 2, 120, lineage=LEADER_LINEAGE, last_batch_epoch=5))
    feed.replica(replica(2, 3, 60, lineage=((0, 0), (3, 40)), last_batch_epoch=3))  # lagging follower
    assert feed.events == []


def test_same_epoch_other_start_offset_diverges_there() -> None:
    feed = _with_leader_lineage()
    events = feed.replica(replica(2, 2, 120, lineage=((0, 0), (3, 40), (5, 95)), last_batch_epoch=5))
    (d,) = events
    assert d.type is EventType.EPOCH_DIVERGENCE
    # Offsets 90..94 are epoch 5 on the leader and epoch 3 on broker 2.
    assert (d.brokers, d.offset_start, d.offset_end, d.leader) == ([2, 1], 90, 120, 1)


def test_epoch_the_leader_never_had_diverges_where_it_starts() -> None:
    feed = _with_leader_lineage()
    (d,) = feed.replica(replica(2, 3, 100, lineage=((0, 0), (3, 40), (4, 80)), last_batch_epoch=4))
    assert (d.offset_start, d.offset_end) == (80, 100)


def test_divergence_reported_once_then_forgotten_when_the_replica_agrees() -> None:
    feed = _with_leader_lineage()
    diverging = ((0, 0), (3, 40), (4, 80))
    feed.replica(replica(2, 3, 100, lineage=diverging, last_batch_epoch=4))
    feed.replica(replica(3, 3, 100, lineage=diverging, last_batch_epoch=4))
    assert len(feed.of(EventType.EPOCH_DIVERGENCE)) == 1
    feed.replica(replica(4, 3, 80, lineage=((0, 0), (3, 40)), last_batch_epoch=3))  # truncated to 80
    feed.replica(replica(5, 3, 100, lineage=diverging, last_batch_epoch=4))
    assert len(feed.of(EventType.EPOCH_DIVERGENCE)) == 2


def test_lineage_trimmed_by_retention_is_no_divergence() -> None:
    feed = Feed()
    # Retention on the leader deleted offsets below 50: its first entry now starts at the log start offset.
    feed.partition(sample(1, leader=1, epoch=5, lineage=((3, 50), (5, 90)), leos={1: 120, 2: 120, 3: 120}))
    feed.replica(replica(2, 2, 120, lineage=LEADER_LINEAGE, last_batch_epoch=5))
    assert feed.events == []


def test_lineage_read_before_the_log_tail_is_not_judged() -> None:
    feed = _with_leader_lineage()
    feed.replica(replica(2, 2, 120, lineage=((0, 0), (3, 40)), last_batch_epoch=5))
    assert feed.events == []


def test_stale_leader_lineage_is_not_a_reference() -> None:
    feed = _with_leader_lineage()
    # A new leader epoch without a fresh lineage: broker 2's newer entry must not look like divergence.
    feed.partition(sample(2, leader=2, epoch=6, leos={1: 120, 2: 120, 3: 120}))
    feed.replica(replica(3, 3, 130, lineage=(*LEADER_LINEAGE, (6, 120)), last_batch_epoch=6))
    assert feed.of(EventType.EPOCH_DIVERGENCE) == []


def test_new_leader_lineage_reveals_a_divergence_already_on_disk() -> None:
    feed = Feed()
    feed.partition(sample(1, leader=1, epoch=5, leos={1: 120, 2: 120, 3: 100}))
    feed.replica(replica(1, 3, 100, lineage=((0, 0), (3, 40), (4, 80)), last_batch_epoch=4))
    assert feed.events == []  # no reference lineage yet
    events = feed.partition(sample(2, leader=1, epoch=5, lineage=LEADER_LINEAGE, leos={1: 120, 2: 120, 3: 100}))
    assert [(e.type, e.offset_start) for e in events] == [(EventType.EPOCH_DIVERGENCE, 80)]


# ----------------------------------------------------------------------------------------------------------
# Staleness


def test_stale_once_after_the_timeout_and_cleared_by_a_sample() -> None:
    feed = Feed()
    feed.partition(sample(1), now_ms=1_000_000)
    assert feed.expire(1_000_000 + CFG.stale_after_ms) == []
    (stale,) = feed.expire(1_000_000 + CFG.stale_after_ms + 1)
    assert (stale.type, stale.event_time_ms, stale.severity) == (
        EventType.STALE, 1_000_000 + CFG.stale_after_ms + 1, Severity.WARNING,
    )  # fmt: skip
    assert feed.expire(1_000_000 + 10 * CFG.stale_after_ms) == []
    feed.partition(sample(2), now_ms=2_000_000)
    assert feed.state is not None and not feed.state.stale
    assert len(feed.expire(2_000_000 + CFG.stale_after_ms + 1)) == 1


def test_stale_uses_the_jobs_clock_not_the_sample_time() -> None:
    feed = Feed()
    feed.partition(sample(1), now_ms=5_000_000)  # the collector's clock says 1 s
    assert feed.expire(5_000_000 + CFG.stale_after_ms // 2) == []


def test_stale_event_id_does_not_depend_on_when_expire_ran() -> None:
    feed_a, feed_b = Feed(), Feed()
    for feed in (feed_a, feed_b):
        feed.partition(sample(1), now_ms=1_000)
    (a,) = feed_a.expire(1_000 + CFG.stale_after_ms + 1)
    (b,) = feed_b.expire(1_000 + CFG.stale_after_ms + 5_000)
    assert a.event_id == b.event_id


def test_no_stale_for_a_partition_only_the_agent_has_seen() -> None:
    feed = Feed()
    feed.replica(replica(1, 1, 100))
    assert feed.expire(10 * CFG.stale_after_ms) == []


def test_a_partition_silent_while_its_cluster_is_sampled_is_forgotten_once_past_forget_after() -> None:
    """forget: after forget_after_ms without a sample while the cluster's newest sample is recent (its topic
    deleted), PARTITION_FORGOTTEN, whose id does not depend on when the timer ran; not before, not for a
    cluster silent as a whole (its collector down: the state is what the next samples are judged by), not for a
    partition only an agent has seen, never with forget_after_ms 0."""
    feed = Feed()
    feed.partition(sample(7), now_ms=1_000_000)
    state = feed.state
    assert state is not None
    silent_until = 1_000_000 + CFG.forget_after_ms
    assert forget(state, silent_until, silent_until, CFG) == []
    (gone,) = forget(state, silent_until + 1, silent_until, CFG)
    assert (gone.type, gone.severity, gone.source, gone.event_time_ms, gone.topic, gone.partition) == (
        EventType.PARTITION_FORGOTTEN, Severity.INFO, EventSource.JOB, silent_until + 1, state.meta.topic,
        state.meta.partition)
    assert "forgotten" in gone.message and f"{CFG.forget_after_ms // 1000} s" in gone.message
    (later,) = forget(state, silent_until + 60_000, silent_until + 60_000, CFG)
    assert later.event_id == gone.event_id
    # the cluster's newest sample older than stale_after: the whole cluster is silent
    assert forget(state, silent_until + 1, silent_until + 1 - CFG.stale_after_ms, CFG) != []
    assert forget(state, silent_until + 1, silent_until - CFG.stale_after_ms, CFG) == []
    assert forget(state, silent_until + 1, silent_until, replace(CFG, forget_after_ms=0)) == []
    agent_only = Feed()
    agent_only.replica(replica(1, 1, 100))
    assert agent_only.state is not None
    assert forget(agent_only.state, 10 * CFG.forget_after_ms, 10 * CFG.forget_after_ms, CFG) == []


# ----------------------------------------------------------------------------------------------------------
# Order, duplicates, determinism, purity


def _eventful_sequence() -> list[dict[str, Any]]:
    return [
        sample(1, isr=[1, 2, 3], hw=100, leos={1: 100, 2: 100, 3: 100}),
        sample(2, isr=[1, 3], hw=100, leos={1: 130, 2: 100, 3: 130}),
        sample(3, leader=-1, epoch=6, isr=[1], hw=None, leos={1: None, 2: 100, 3: 130}),
        sample(4, leader=2, epoch=7, isr=[2], hw=100, leos={1: None, 2: 100, 3: 130}),
        sample(5, leader=2, epoch=7, isr=[2, 3], hw=100, leos={1: None, 2: 100, 3: 100}),
    ]


def test_duplicate_sample_is_ignored() -> None:
    feed = Feed()
    seq = _eventful_sequence()
    for s in seq[:2]:
        feed.partition(s)
    before = feed.state
    state, events, metrics = step_dict(before, seq[1], CFG)
    assert state is before
    assert events == []
    assert metrics == metrics_of(before)


def test_older_sample_is_ignored_and_equal_time_needs_a_newer_cycle() -> None:
    feed = Feed()
    feed.partition(sample(5, isr=[1, 2, 3], cycle=10))
    assert feed.partition(sample(4, isr=[1], cycle=11)) == []
    assert feed.partition(sample(5, isr=[1], cycle=10)) == []
    assert feed.partition(sample(5, isr=[1], cycle=9)) == []
    assert len(feed.partition(sample(5, isr=[1, 2], cycle=11))) == 1  # one ISR_SHRINK


def test_replaying_a_sequence_gives_the_same_events_and_states() -> None:
    runs = []
    for _ in range(2):
        feed = Feed()
        states = []
        for s in _eventful_sequence():
            feed.partition(s, now_ms=s["sample_time_ms"] + 100)
            states.append(pickle.dumps(feed.state))
        runs.append(([e.event_id for e in feed.events], states, feed.events))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]
    assert runs[0][2] == runs[1][2]
    assert len(set(runs[0][0])) == len(runs[0][0]) >= 5


def test_replaying_a_micro_batch_over_the_state_it_produced_emits_nothing() -> None:
    feed = Feed()
    seq = _eventful_sequence()
    for s in seq:
        feed.partition(s)
    n = len(feed.events)
    for s in seq:  # the same batch again, e.g. after a failed commit
        feed.partition(s)
    assert len(feed.events) == n


def test_event_ids_differ_between_partitions_and_times() -> None:
    a = step_dict(step_dict(None, sample(1), CFG)[0], sample(2, isr=[1, 2]), CFG)[1][0]
    b = step_dict(step_dict(None, sample(1), CFG)[0], sample(3, isr=[1, 2]), CFG)[1][0]
    other = sample(2, isr=[1, 2])
    other["partition"] = 8
    first = sample(1)
    first["partition"] = 8
    c = step_dict(step_dict(None, first, CFG)[0], other, CFG)[1][0]
    assert len({a.event_id, b.event_id, c.event_id}) == 3


def test_step_does_not_change_the_previous_state() -> None:
    feed = Feed()
    feed.partition(sample(1, leos={1: 120, 2: 120, 3: 120}))
    feed.replica(replica(1, 2, 120, lineage=LEADER_LINEAGE, last_batch_epoch=5))
    prev = feed.state
    frozen = pickle.dumps(prev)
    for s in _eventful_sequence()[1:]:
        step_dict(prev, s, CFG)
    step_replica(prev, replica(2, 2, 10, lineage=((0, 0), (4, 5)), last_batch_epoch=4), CFG)
    expire(prev, 10**9, CFG)  # type: ignore[arg-type]
    assert pickle.dumps(prev) == frozen


def test_pydantic_and_dict_samples_give_the_same_result() -> None:
    seq = _eventful_sequence()
    by_dict, by_model = Feed(), Feed()
    for s in seq:
        by_dict.partition(s)
        by_model.state, events, by_model.metrics = step(by_model.state, PartitionSample.model_validate(s), CFG)
        by_model.events += events
    assert by_dict.events == by_model.events
    assert by_dict.state == by_model.state
    r = replica(9, 3, 90, lineage=((0, 0), (7, 80)), last_batch_epoch=7)
    assert step_replica(by_dict.state, r, CFG) == step_replica(by_model.state, ReplicaSample.model_validate(r), CFG)


def test_recreated_topic_starts_a_new_state() -> None:
    feed = Feed()
    feed.partition(sample(1, hw=5000, leos={1: 5000, 2: 5000, 3: 5000}, epoch=9, topic_id="AAAA"))
    assert feed.partition(sample(2, hw=0, leos={1: 0, 2: 0, 3: 0}, epoch=0, topic_id="BBBB")) == []


def test_state_pickles_and_stays_small() -> None:
    feed = Feed()
    for s in _eventful_sequence():
        feed.partition(s)
    blob = pickle.dumps(feed.state)
    assert pickle.loads(blob) == feed.state
    assert len(blob) < 1000


def test_the_state_store_codec_keeps_every_field() -> None:
    """dump_state/load_state, the bucket's per-partition format: every field set (checked: a field added later
    must be set here too), and every state of an eventful sequence; states pickled whole (the format before)
    still load."""
    from dataclasses import fields

    meta = PartitionMeta(
        "c", "t", 3, topic_id="AAAA", leader=2, leader_epoch=7, replicas=(1, 2, 3), isr=(2,), elr=(3,),
        min_insync_replicas=2, offline=True, under_min_isr=True, epoch_regressed_to=5,
        before_offline=ElectionBasis(1, 6, (1, 2), None), isr_changes=((1000, 3), (2000, 3)),
        flapping_reported_ms=2000, epoch_lineage=((0, 0), (7, 100)), lineage_leader_epoch=7,
        replica_logs={1: ReplicaLog(900, 4, 130, 120, 6, ((0, 0), (6, 100)))}, diverged={1: 100},
        loss=ElectionLoss(1, 6, True, 130, 100, 30), unclean_leader_election=False, metadata_offset=420,
        metadata_time_ms=2500, last_known_elr=(3,), earlier_committed_ends=((3, 60),),
        uncommitted_counted=((3, 70), (6, 140)), adding_replicas=(3,), removing_replicas=(1,))
    rich = PartitionState(meta, sample_time_ms=3000, cycle=3, received_ms=3100, high_watermark=100,
                          log_start_offset=10, log_end_offsets={2: 100, 3: 90}, last_log_end_offsets={1: 130, 2: 100},
                          hw_stuck_since_ms=1000, hw_stuck_log_end_offset=100, hw_stalled=True, stale=True,
                          committed_end=100, leader_log_end_history=((0, 50), (5000, 90)))
    blank = PartitionState.new("c", "t", 3)
    assert [f.name for f in fields(PartitionMeta) if getattr(meta, f.name) == getattr(blank.meta, f.name)] == [
        "cluster", "topic", "partition"]  # the identity, which the bucket's key holds
    assert [f.name for f in fields(PartitionState) if getattr(rich, f.name) == getattr(blank, f.name)] == []

    feed = Feed()
    states = [rich, blank]
    for s in _eventful_sequence():
        feed.partition(s)
        assert feed.state is not None
        states.append(feed.state)
    for state in states:
        key = (state.meta.cluster, state.meta.topic, state.meta.partition)
        assert load_state(key, dump_state(state)) == state
        assert load_state(key, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)) == state
    assert len(dump_state(states[-1])) < 0.75 * len(pickle.dumps(states[-1], protocol=pickle.HIGHEST_PROTOCOL))


def test_events_serialise_to_json_and_back() -> None:
    feed = Feed()
    for s in _eventful_sequence():
        feed.partition(s)
    for e in feed.events:
        assert Event.model_validate_json(e.model_dump_json()) == e


def test_detect_config_from_stream_config() -> None:
    stream = StreamConfig(stale_after_s=12.5, hw_stalled_after_s=40, flapping_window_s=60, flapping_threshold=3)
    assert DetectConfig.from_stream_config(stream) == DetectConfig(
        stale_after_ms=12_500, hw_stalled_after_ms=40_000, flapping_window_ms=60_000, flapping_threshold=3,
        forget_after_ms=125_000)  # ten times stale_after_s, forget_after_s unset
    assert DetectConfig.from_stream_config(StreamConfig(stale_after_s=12.5, forget_after_s=0)).forget_after_ms == 0
    assert DetectConfig.from_stream_config(StreamConfig(forget_after_s=45)).forget_after_ms == 45_000
