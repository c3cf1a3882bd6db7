"""Replication failures as sample sequences fed to the detector (streaming.detect), through the pydantic
sample models the collectors publish.

The two pre-epoch failures of docs/design.md, "Domain in one page" (from the background documents: huxihx,
"Kafka水位(high watermark)与leader epoch的讨论", and "Kafka 可靠性探究—副本刨析") cannot be caused on a modern cluster,
so they are replayed here. Expected counts are computed from each scenario's inputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from replmon.contracts.events import Event, EventType, Severity
from replmon.contracts.samples import EpochEntry, PartitionSample, ReplicaError, ReplicaOffsets, ReplicaSample
from replmon.core.config import StreamConfig
from streaming.detect import DetectConfig, PartitionMetrics, expire, step, step_replica
from streaming.state import PartitionState

S = 1000  # sample times below are in seconds
TOPIC, PARTITION = "payments", 0


def psample(
    t: int,
    leader: int,
    epoch: int,
    isr: Iterable[int],
    hw: int | None,
    leos: Mapping[int, int | None],
    *,
    replicas: Iterable[int] | None = None,
    min_isr: int = 1,
    lineage: Iterable[tuple[int, int]] | None = None,
    unclean_allowed: bool | None = None,
) -> PartitionSample:
    """What the protocol sampler publishes; a None LEO is a broker that did not answer."""
    return PartitionSample(
        cluster="legacy", collector_id="sampler", cycle=t, sample_time_ms=t * S, topic=TOPIC, partition=PARTITION,
        leader=leader, leader_epoch=epoch, replicas=list(leos) if replicas is None else list(replicas),
        isr=list(isr), high_watermark=hw, log_start_offset=0, min_insync_replicas=min_isr,
        unclean_leader_election=unclean_allowed,
        replica_offsets=[
            ReplicaOffsets(broker_id=b, log_end_offset=leo)
            if leo is not None
            else ReplicaOffsets(broker_id=b, error=ReplicaError.UNREACHABLE)
            for b, leo in leos.items()
        ],
        epoch_lineage=None if lineage is None else [EpochEntry(leader_epoch=e, start_offset=o) for e, o in lineage],
    )  # fmt: skip


def rsample(
    t: int, broker: int, leo: int, last_batch_epoch: int, lineage: Iterable[tuple[int, int]] = (),
    hw_checkpoint: int | None = None,
) -> ReplicaSample:
    """What the log-dir agent on ``broker``'s host publishes (it reads the disk, also while the broker is down)."""
    return ReplicaSample(
        cluster="legacy", agent_id=f"agent-{broker}", cycle=t, sample_time_ms=t * S + 300, broker_id=broker,
        log_dir=f"/var/kafka/{broker}", topic=TOPIC, partition=PARTITION, log_end_offset=leo,
        last_batch_leader_epoch=last_batch_epoch, high_watermark_checkpoint=hw_checkpoint,
        epoch_lineage=[EpochEntry(leader_epoch=e, start_offset=o) for e, o in lineage],
    )  # fmt: skip


class Partition:
    """One partition watched by the detector."""

    def __init__(self, cfg: DetectConfig) -> None:
        self.cfg = cfg
        self.state: PartitionState | None = None
        self.events: list[Event] = []
        self.metrics: PartitionMetrics | None = None

    def sampler(self, s: PartitionSample, now_ms: int | None = None) -> list[Event]:
        self.state, events, self.metrics = step(self.state, s, self.cfg, now_ms)
        self.events += events
        return events

    def agent(self, r: ReplicaSample) -> list[Event]:
        self.state, events = step_replica(self.state, r, self.cfg)
        self.events += events
        return events

    def timers(self, now_ms: int) -> list[Event]:
        assert self.state is not None
        self.state, events = expire(self.state, now_ms, self.cfg)
        self.events += events
        return events

    def of(self, etype: EventType) -> list[Event]:
        return [e for e in self.events if e.type is etype]


CFG = DetectConfig.from_stream_config(StreamConfig())


# ----------------------------------------------------------------------------------------------------------
# Pre-epoch failure 1: loss by high watermark truncation


@pytest.mark.parametrize(
    ("committed", "follower_hw"),
    [
        pytest.param(2, 1, id="huxihx: 2 messages acknowledged, follower HW one fetch behind"),
        pytest.param(5, 3, id="reliability article: LEO 5, follower HW 3"),
    ],
)
def test_loss_by_hw_truncation(committed: int, follower_hw: int) -> None:
    """min.insync.replicas=1. Leader A and follower B both hold ``committed`` messages and the partition HW is
    ``committed``, but B's own HW (one fetch round behind) is ``follower_hw``. B restarts and truncates to its
    HW; A dies before B fetches again and B becomes leader; A comes back and truncates to the new leader's HW.
    Messages [follower_hw, committed), acknowledged as committed, are gone from every replica."""
    a, b = 1, 2
    p = Partition(CFG)
    p.sampler(psample(1, a, 0, [a, b], committed, {a: committed, b: committed}))
    p.agent(rsample(1, a, committed, 0))
    p.agent(rsample(1, b, committed, 0))
    p.sampler(psample(2, a, 0, [a, b], committed, {a: committed, b: None}))  # B restarts ...
    p.agent(rsample(2, b, follower_hw, 0))  # ... and truncates its log to its own HW
    p.sampler(psample(3, a, 0, [a, b], committed, {a: committed, b: follower_hw}))
    p.sampler(psample(4, b, 1, [b], follower_hw, {a: None, b: follower_hw}))  # A dies, B leads
    p.agent(rsample(4, a, follower_hw, 0))  # A restarts as a follower and truncates to the leader's HW
    p.sampler(psample(5, b, 1, [b, a], follower_hw, {a: follower_hw, b: follower_hw}))
    p.agent(rsample(5, b, follower_hw, 0))

    lost = committed - follower_hw
    (regression,) = p.of(EventType.HW_REGRESSION)
    assert regression.committed_lost == lost
    assert (regression.offset_start, regression.offset_end) == (follower_hw, committed)
    assert (regression.leader, regression.leader_epoch) == (b, 1)
    truncations = {e.brokers[0]: e for e in p.of(EventType.LOG_TRUNCATION)}
    assert sorted(truncations) == [a, b]  # once each: the agent and the sampler do not both report it
    assert len(p.of(EventType.LOG_TRUNCATION)) == 2
    for broker in (a, b):
        assert truncations[broker].truncated == lost
        assert (truncations[broker].offset_start, truncations[broker].offset_end) == (follower_hw, committed)
    (change,) = p.of(EventType.LEADER_CHANGE)
    assert (change.previous_leader, change.leader, change.clean) == (a, b, True)  # a clean election lost data
    assert p.of(EventType.EPOCH_DIVERGENCE) == []  # what is left is the same on both replicas


# ----------------------------------------------------------------------------------------------------------
# Pre-epoch failure 2: divergence at one offset


@pytest.mark.parametrize("agents_in_order", [True, False], ids=["leader-read-first", "follower-read-first"])
def test_divergence_at_one_offset(agents_in_order: bool) -> None:
    """A leads with ``a_leo`` messages, B has one fewer and its HW is ``b_leo``. A and B die together; B comes
    back first, leads, and takes a new message at offset ``b_leo``, where A holds another one. A comes back:
    its HW equals the new leader's, so it truncates nothing. The logs differ at offset ``b_leo`` for good."""
    a, b = 1, 2
    a_leo, b_leo = 2, 1
    p = Partition(CFG)
    p.sampler(psample(1, a, 0, [a, b], a_leo, {a: a_leo, b: b_leo}))
    p.agent(rsample(1, a, a_leo, 0))
    p.agent(rsample(1, b, b_leo, 0))
    p.sampler(psample(2, -1, 1, [a, b], None, {a: None, b: None}))  # both die
    p.sampler(psample(3, b, 2, [b], b_leo, {a: None, b: b_leo}))  # B first back, leads
    p.sampler(psample(4, b, 2, [b], b_leo + 1, {a: None, b: b_leo + 1}))  # new message at offset b_leo
    leader_read = rsample(4, b, b_leo + 1, 2)
    follower_read = rsample(5, a, a_leo, 0)  # A back, untouched: its LEO equals the leader's
    for r in (leader_read, follower_read) if agents_in_order else (follower_read, leader_read):
        p.agent(r)
    p.sampler(psample(5, b, 2, [b, a], b_leo + 1, {a: a_leo, b: b_leo + 1}))

    assert a_leo == b_leo + 1  # the premise: same log end offset on both sides
    (divergence,) = p.of(EventType.EPOCH_DIVERGENCE)
    assert divergence.offset_start == b_leo
    assert divergence.offset_end == b_leo + 1
    assert divergence.brokers == [a, b]
    assert f"offset {b_leo}" in divergence.message
    assert p.of(EventType.LOG_TRUNCATION) == []  # nobody truncated: nothing but the divergence tells
    (regression,) = p.of(EventType.HW_REGRESSION)  # B's stale HW became the partition's
    assert regression.committed_lost == a_leo - b_leo


# ----------------------------------------------------------------------------------------------------------
# Unclean election (leader epochs: Kafka 0.11+)


def test_unclean_election_loses_committed_messages() -> None:
    """min.insync.replicas=1, unclean.leader.election.enable=true. Followers 2 and 3 fell out of the ISR;
    leader 1, alone in it, committed up to its LEO. Leader 1 dies; 3 is elected uncleanly with a shorter log.
    The HW goes down, broker 1's extra messages diverge from the new leader's lineage, and it truncates them
    when it returns."""
    old_leader, slow, new_leader = 1, 2, 3
    old_epoch, epoch_start = 4, 1000
    new_epoch = old_epoch + 2  # the controller bumps the epoch going offline, and again electing 3
    old_leader_leo, slow_leo, new_leader_leo = 1500, 1200, 1350
    old_lineage = [(0, 0), (old_epoch, epoch_start)]
    new_lineage = [*old_lineage, (new_epoch, new_leader_leo)]
    leos_before = {old_leader: old_leader_leo, slow: slow_leo, new_leader: new_leader_leo}

    p = Partition(CFG)
    p.sampler(psample(1, old_leader, old_epoch, [old_leader], old_leader_leo, leos_before, lineage=old_lineage))
    p.agent(rsample(1, old_leader, old_leader_leo, old_epoch, old_lineage))
    p.sampler(psample(2, -1, old_epoch + 1, [old_leader], None, {**leos_before, old_leader: None}))
    p.sampler(psample(3, new_leader, new_epoch, [new_leader], new_leader_leo, {**leos_before, old_leader: None},
                      lineage=new_lineage))  # fmt: skip
    # Broker 1's disk, still down, holds what the new leader never had.
    p.agent(rsample(3, old_leader, old_leader_leo, old_epoch, old_lineage))
    # Broker 1 returns, asks the leader where epoch 4 ended and truncates there.
    p.sampler(psample(4, new_leader, new_epoch, [new_leader, old_leader], new_leader_leo,
                      {**leos_before, old_leader: new_leader_leo}))  # fmt: skip
    p.agent(rsample(4, old_leader, new_leader_leo, old_epoch, old_lineage))
    p.agent(rsample(5, old_leader, new_leader_leo + 10, new_epoch, new_lineage))  # fetching again

    (change,) = p.of(EventType.LEADER_CHANGE)
    assert (change.clean, change.previous_leader, change.leader) == (False, old_leader, new_leader)
    assert change.previous_isr == [old_leader]
    lost = old_leader_leo - new_leader_leo
    (regression,) = p.of(EventType.HW_REGRESSION)
    assert regression.committed_lost is None  # the count is DATA_LOSS's, from the lineage
    (loss,) = p.of(EventType.DATA_LOSS)
    assert (loss.committed_lost, loss.offset_start, loss.offset_end) == (lost, new_leader_leo, old_leader_leo)
    assert (loss.previous_leader, loss.previous_leader_epoch, loss.leader) == (old_leader, old_epoch, new_leader)
    (divergence,) = p.of(EventType.EPOCH_DIVERGENCE)
    assert divergence.brokers == [old_leader, new_leader]
    assert (divergence.offset_start, divergence.offset_end) == (new_leader_leo, old_leader_leo)
    assert (divergence.severity, divergence.uncommitted_lost) == (Severity.CRITICAL, 0)  # all committed
    (truncation,) = p.of(EventType.LOG_TRUNCATION)
    assert (truncation.brokers, truncation.truncated, truncation.uncommitted_lost) == ([old_leader], lost, 0)
    assert [e.type for e in p.of(EventType.OFFLINE_START) + p.of(EventType.OFFLINE_END)] == [
        EventType.OFFLINE_START, EventType.OFFLINE_END,
    ]  # fmt: skip
    assert slow not in divergence.brokers  # behind, not diverging
    assert p.state is not None and p.state.meta.diverged == {}  # broker 1 agrees again after truncating


@pytest.mark.parametrize("agent_first", [False, True], ids=["lineage-first", "old-leaders-disk-first"])
def test_unclean_loss_is_exact_while_producers_keep_writing(agent_first: bool) -> None:
    """The followers left the ISR; leader 1, alone in it, keeps appending (and so committing) after the last
    sample, then dies; stale broker 2 is elected uncleanly and producers at once write to it, so its HW passes
    the last sampled one before replmon samples it: no HW regression to see. The loss is still exact: what
    broker 1's disk holds (its log end offset, all committed while it led alone) above where broker 2's lineage
    leaves epoch 4. Reported once in all, in disjoint ranges when the disk is read after the lineage."""
    old, new, other = 1, 2, 3
    lineage = [(0, 0), (4, 1000)]
    divergence, last_sampled_hw, disk_leo = 1200, 1400, 1553
    p = Partition(CFG)
    p.sampler(psample(1, old, 4, [old, new, other], 1200, {old: 1200, new: 1200, other: 1200}, lineage=lineage))
    p.sampler(psample(2, old, 4, [old], last_sampled_hw, {old: last_sampled_hw, new: None, other: None}))
    # broker 1 wrote on to 1553 and died; broker 2 elected, producers moved to it
    new_lineage = [*lineage, (6, divergence)]
    disk = rsample(3, old, disk_leo, 4, lineage, hw_checkpoint=1350)
    if agent_first:
        p.agent(disk)
    p.sampler(psample(3, new, 6, [new], 1700, {old: None, new: 1700, other: None}, lineage=new_lineage))
    if not agent_first:
        p.agent(disk)

    (change,) = p.of(EventType.LEADER_CHANGE)
    assert change.clean is False
    assert p.of(EventType.HW_REGRESSION) == []  # 1700 > 1400: two HW samples show no loss at all
    losses = p.of(EventType.DATA_LOSS)
    assert sum(e.committed_lost or 0 for e in losses) == disk_leo - divergence
    ranges = [(e.offset_start, e.offset_end) for e in losses]
    assert ranges == ([(divergence, disk_leo)] if agent_first else [(divergence, last_sampled_hw),
                                                                   (last_sampled_hw, disk_leo)])
    assert all(e.severity is Severity.CRITICAL for e in losses)
    (div,) = p.of(EventType.EPOCH_DIVERGENCE)
    assert (div.offset_start, div.offset_end, div.severity, div.uncommitted_lost) == (
        divergence, disk_leo, Severity.CRITICAL, 0)
    # replayed, nothing new
    assert p.state is not None
    again = Partition(CFG)
    again.state = p.state
    again.agent(rsample(3, old, disk_leo, 4, lineage, hw_checkpoint=1350))
    assert again.events == []
    # Broker 1 returns, truncates to 1200 and fetches on: by the agent's next reading its log is past 1553.
    p.sampler(psample(4, new, 6, [new], 1900, {old: 1890, new: 1900, other: None}))
    p.agent(rsample(4, old, 1890, 6, new_lineage))
    (truncation,) = p.of(EventType.LOG_TRUNCATION)
    assert (truncation.brokers, truncation.offset_start, truncation.offset_end) == ([old], divergence, disk_leo)
    assert (truncation.truncated, truncation.uncommitted_lost) == (disk_leo - divergence, 0)


def test_unclean_loss_counts_the_dead_leaders_disk_when_the_controller_emptied_the_isr() -> None:
    """With eligible leader replicas (KIP-966) the controller may leave the ISR empty and the dead leader in the
    ELR while the partition is offline: the leader led alone when it was last seen online, so its disk, read while
    it is down, is committed all the same."""
    old, new = 1, 2
    lineage = [(0, 0), (4, 1000)]
    p = Partition(CFG)
    p.sampler(psample(1, old, 4, [old], 1400, {old: 1400, new: None}, lineage=lineage))
    p.sampler(psample(2, -1, 5, [], None, {old: None, new: None}))
    p.agent(rsample(2, old, 1460, 4, lineage))  # it wrote on after the last sample, then died
    p.sampler(psample(3, new, 6, [new], 1250, {old: None, new: 1250}, lineage=[*lineage, (6, 1200)]))
    assert sum(e.committed_lost or 0 for e in p.of(EventType.DATA_LOSS)) == 1460 - 1200


@pytest.mark.parametrize(("unclean_allowed", "forced"), [(False, True), (True, False), (None, None)])
def test_an_unclean_election_on_a_topic_that_forbids_them_is_flagged_forced(
    unclean_allowed: bool | None, forced: bool | None
) -> None:
    p = Partition(CFG)
    p.sampler(psample(1, 1, 4, [1], 100, {1: 100, 2: 90}, unclean_allowed=unclean_allowed))
    p.sampler(psample(2, 2, 5, [2], 90, {1: None, 2: 90}))  # the setting is re-read only every few cycles
    (change,) = p.of(EventType.LEADER_CHANGE)
    assert (change.clean, change.forced) == (False, forced)
    assert ("forced" in change.message) is bool(forced)


def test_clean_failover_with_an_unreplicated_tail_is_not_critical() -> None:
    """acks=1 writes: leader 1 appended up to 2040 while the ISR (all three) had replicated, and so committed,
    up to 2000. It dies; broker 2, in the ISR, is elected cleanly with its log ending at 2010. The 30 messages only
    broker 1 held were never committed: a warning with their count, no DATA_LOSS, no critical event; broker 1
    truncates them when it returns."""
    old, new, other = 1, 2, 3
    lineage = [(0, 0), (4, 1000)]
    p = Partition(CFG)
    p.sampler(psample(1, old, 4, [old, new, other], 2000, {old: 2040, new: 2010, other: 2005}, lineage=lineage))
    new_lineage = [*lineage, (5, 2010)]
    p.sampler(psample(2, new, 5, [new, other], 2010, {old: None, new: 2050, other: 2050}, lineage=new_lineage))
    p.agent(rsample(2, old, 2040, 4, lineage, hw_checkpoint=1990))  # broker 1's disk, while it is down
    p.agent(rsample(3, old, 2010, 4, lineage))  # back: truncated to where epoch 4 ends on the leader

    (change,) = p.of(EventType.LEADER_CHANGE)
    assert change.clean is True
    assert p.of(EventType.DATA_LOSS) == [] and p.of(EventType.HW_REGRESSION) == []
    (div,) = p.of(EventType.EPOCH_DIVERGENCE)
    assert (div.offset_start, div.offset_end, div.severity, div.uncommitted_lost) == (2010, 2040, Severity.WARNING, 30)
    (truncation,) = p.of(EventType.LOG_TRUNCATION)
    assert (truncation.brokers, truncation.truncated, truncation.uncommitted_lost) == ([old], 30, 30)
    assert (div.uncommitted_counted, truncation.uncommitted_counted) == (30, 0)  # the same offsets, counted once
    assert not [e for e in p.events if e.severity is Severity.CRITICAL]


def test_the_never_committed_tails_of_one_leader_change_are_counted_once() -> None:
    """Leader 1 appended up to 2040, follower 3 fetched up to 2025, broker 2 up to 2010; 2000 committed. Broker 2
    is elected cleanly: broker 3's tail [2010, 2025) and broker 1's [2010, 2040) were never committed. Every event
    reports its replica's own tail; what they add to the counter is the union, 30, each offset once."""
    old, new, other = 1, 2, 3
    lineage = [(0, 0), (4, 1000)]
    p = Partition(CFG)
    p.sampler(psample(1, old, 4, [old, new, other], 2000, {old: 2040, new: 2010, other: 2025}, lineage=lineage))
    p.sampler(psample(2, new, 5, [new, other], 2010, {old: None, new: 2050, other: 2025},
                      lineage=[*lineage, (5, 2010)]))
    p.agent(rsample(2, other, 2025, 4, lineage))  # broker 3's disk: diverges at 2010
    p.agent(rsample(2, old, 2040, 4, lineage))  # broker 1's, while it is down
    p.agent(rsample(3, old, 2010, 4, lineage))  # back: truncated
    p.agent(rsample(3, other, 2010, 4, lineage))

    divergences = {e.brokers[0]: e for e in p.of(EventType.EPOCH_DIVERGENCE)}
    assert {b: (e.uncommitted_lost, e.uncommitted_counted) for b, e in divergences.items()} == {
        other: (15, 15), old: (30, 15)}
    tails = [(e.brokers[0], e.truncated, e.uncommitted_counted) for e in p.of(EventType.LOG_TRUNCATION)]
    assert tails == [(old, 30, 0), (other, 15, None)]  # broker 3 was not the old leader: no committed end of its own
    assert sum(e.uncommitted_counted or 0 for e in p.events) == 30
    assert not [e for e in p.events if e.severity is Severity.CRITICAL]


# ----------------------------------------------------------------------------------------------------------
# Flapping, stall, staleness


def test_follower_bouncing_in_and_out_of_the_isr_is_flapping() -> None:
    cfg = DetectConfig.from_stream_config(StreamConfig(flapping_window_s=300, flapping_threshold=4))
    leader, bouncer, steady = 1, 2, 3
    replicas = [leader, bouncer, steady]
    every_s = 30
    p = Partition(cfg)
    leo = 10_000
    for i in range(12):
        leo += 500
        isr = [leader, steady] if i % 2 else replicas
        bouncer_leo = leo - 400 if i % 2 else leo
        p.sampler(psample(i * every_s, leader, 3, isr, leo, {leader: leo, bouncer: bouncer_leo, steady: leo},
                          min_isr=2))  # fmt: skip
    changes = len(p.of(EventType.ISR_SHRINK)) + len(p.of(EventType.ISR_EXPAND))
    assert changes == 11
    flapping = p.of(EventType.ISR_FLAPPING)
    # Changes at 30 s, 60 s, ...: the threshold is first exceeded at change number threshold + 1.
    assert [e.event_time_ms for e in flapping] == [(cfg.flapping_threshold + 1) * every_s * S]
    assert flapping[0].brokers == [bouncer]
    assert all(e.lag == 400 for e in p.of(EventType.ISR_SHRINK))
    assert p.of(EventType.UNDER_MIN_ISR_START) == []  # 2 of 3 is still min.insync.replicas=2


def test_hw_stalled_under_min_isr() -> None:
    """Kafka 4.x stops advancing the HW while the ISR is below min.insync.replicas; acks=1 producers keep
    writing to the leader."""
    cfg = DetectConfig.from_stream_config(StreamConfig(hw_stalled_after_s=30))
    leader, f1, f2 = 1, 2, 3
    hw = 5000
    p = Partition(cfg)
    p.sampler(psample(0, leader, 2, [leader, f1, f2], hw, {leader: hw, f1: hw, f2: hw}, min_isr=2))
    leos = []
    for t in range(5, 60, 5):
        leo = hw + 100 * t
        leos.append((t, leo))
        p.sampler(psample(t, leader, 2, [leader], hw, {leader: leo, f1: None, f2: None}, min_isr=2))
    (under,) = p.of(EventType.UNDER_MIN_ISR_START)
    assert under.event_time_ms == 5 * S
    stall_start = 5
    first_over = next((t, leo) for t, leo in leos if (t - stall_start) * S > cfg.hw_stalled_after_ms)
    (stalled,) = p.of(EventType.HW_STALLED)
    assert stalled.event_time_ms == first_over[0] * S
    assert (stalled.offset_start, stalled.offset_end) == (hw, first_over[1])
    # The followers come back and catch up: the HW moves, the ISR is whole again.
    t, leo = leos[-1][0] + 5, leos[-1][1]
    p.sampler(psample(t, leader, 2, [leader, f1, f2], leo, {leader: leo, f1: leo, f2: leo}, min_isr=2))
    assert [e.type for e in p.of(EventType.UNDER_MIN_ISR_END)] == [EventType.UNDER_MIN_ISR_END]
    assert p.state is not None and not p.state.hw_stalled
    assert len(p.of(EventType.HW_STALLED)) == 1


def test_partition_going_silent_is_stale_once() -> None:
    cfg = DetectConfig.from_stream_config(StreamConfig(stale_after_s=30))
    p = Partition(cfg)
    job_clock = 1_700_000_000_000
    for t in range(0, 20, 5):
        p.sampler(psample(t, 1, 0, [1, 2], 100, {1: 100, 2: 100}), now_ms=job_clock + t * S)
    last_received = job_clock + 15 * S
    for tick in range(1, 20):  # the job's timer runs every 5 s, no sample comes
        p.timers(last_received + tick * 5 * S)
    (stale,) = p.of(EventType.STALE)
    first_tick_over = next(k for k in range(1, 20) if k * 5 * S > cfg.stale_after_ms)
    assert stale.event_time_ms == last_received + first_tick_over * 5 * S
    p.sampler(psample(200, 1, 0, [1, 2], 100, {1: 100, 2: 100}), now_ms=job_clock + 200 * S)
    assert p.timers(job_clock + 200 * S + cfg.stale_after_ms) == []
    assert len(p.timers(job_clock + 200 * S + cfg.stale_after_ms + 1)) == 1
