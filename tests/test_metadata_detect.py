"""The KRaft metadata log as the job reads it (pure): the agent's replay of the log (collectors.logdir.metadata.view)
and the detection of ISR and leader changes from its records (streaming.detect.step_partition_change), with the
protocol samples beside them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pandas as pd

from collectors.logdir.metadata.batches import MetadataRecord
from collectors.logdir.metadata.view import MetadataView
from replmon.contracts.events import EventSource, EventType
from replmon.contracts.samples import (
    MAX_REPLICAS,
    BrokerChange,
    LeaderRecoveryState,
    PartitionChange,
    parse_sample,
    to_json,
)
from streaming.detect import step_broker_change, step_partition_change
from streaming.parse import judge
from streaming.processor import KIND_EVENT, process_bucket
from streaming.state import BrokerRegistry
from tests.test_detect import CFG, Feed, S, replica, sample

TOPIC_ID = "7J5r3yWzTqWbL3X8RvoL0A"


def record(offset: int, kind: str, fields: dict[str, Any], time_ms: int | None = None) -> MetadataRecord:
    return MetadataRecord(offset=offset, append_time_ms=offset * 10 if time_ms is None else time_ms,
                          leader_epoch=1, api_key=0, type=kind, version=0, fields=fields)


def partition_record(offset: int, *, isr: list[int], leader: int = 1, epoch: int = 0) -> MetadataRecord:
    return record(offset, "PartitionRecord", {
        "partitionId": 7, "topicId": TOPIC_ID, "replicas": [1, 2, 3], "isr": isr, "removingReplicas": [],
        "addingReplicas": [], "leader": leader, "leaderRecoveryState": 0, "leaderEpoch": epoch,
        "partitionEpoch": 0, "directories": [], "eligibleLeaderReplicas": None, "lastKnownElr": None})


def change_record(offset: int, *, isr: list[int] | None = None, leader: int = -2, recovery: int = -1,
                  elr: list[int] | None = None, time_ms: int | None = None) -> MetadataRecord:
    return record(offset, "PartitionChangeRecord", {
        "partitionId": 7, "topicId": TOPIC_ID, "isr": isr, "leader": leader, "replicas": None,
        "removingReplicas": None, "addingReplicas": None, "leaderRecoveryState": recovery, "directories": None,
        "eligibleLeaderReplicas": elr, "lastKnownElr": None}, time_ms)


def topic_record(offset: int = 0) -> MetadataRecord:
    return record(offset, "TopicRecord", {"name": "orders", "topicId": TOPIC_ID})


def partition_changes(view: MetadataView, rec: MetadataRecord) -> list[PartitionChange]:
    """The changes the view makes of ``rec``, every one a partition's."""
    changes = view.apply(rec)
    partitions = [c for c in changes if isinstance(c, PartitionChange)]
    assert partitions == changes, changes
    return partitions


def broker_changes(view: MetadataView, rec: MetadataRecord) -> list[BrokerChange]:
    """The changes the view makes of ``rec``, every one a broker's."""
    changes = view.apply(rec)
    brokers = [c for c in changes if isinstance(c, BrokerChange)]
    assert brokers == changes, changes
    return brokers


# ------------------------------------------------------------------------------------------------ the replay

def test_the_view_replays_kafkas_merge_rules() -> None:
    view = MetadataView("prod", "a/logdir-agent", 1)
    assert view.apply(topic_record(0)) == []
    (created,) = partition_changes(view, partition_record(1, isr=[1, 2, 3], epoch=4))
    assert (created.leader, created.leader_epoch, created.isr, created.previous_isr) == (1, 4, [1, 2, 3], None)
    (shrunk,) = partition_changes(view, change_record(2, isr=[1, 3]))  # no leader change: the leader epoch stays
    assert (shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == (1, 4, 1)
    assert (shrunk.isr, shrunk.previous_isr, shrunk.previous_leader) == ([1, 3], [1, 2, 3], 1)
    (elected,) = partition_changes(view, change_record(3, leader=3, isr=[3], recovery=1, elr=[]))
    assert (elected.leader, elected.leader_epoch, elected.partition_epoch) == (3, 5, 2)
    assert elected.leader_recovery_state is LeaderRecoveryState.RECOVERING
    assert (elected.previous_leader, elected.previous_leader_epoch, elected.previous_isr) == (1, 4, [1, 3])
    (recovered,) = partition_changes(view, change_record(4, recovery=0))  # -1 would keep it: 0 is RECOVERED
    assert recovered.leader_recovery_state is LeaderRecoveryState.RECOVERED
    # the same leader named again: a new epoch (Kafka's rule)
    (bumped,) = partition_changes(view, change_record(5, leader=3))
    assert (bumped.leader, bumped.leader_epoch) == (3, 6)
    assert parse_sample(to_json(bumped)) == bumped  # the record validates as its contract


def test_the_view_clears_elr_forgets_removed_topics_and_skips_what_it_cannot_place() -> None:
    view = MetadataView("prod", "a", 1)
    assert view.apply(change_record(1, isr=[1])) == []  # no registration read yet: nothing to merge into
    view.apply(topic_record(2))
    view.apply(partition_record(3, isr=[1, 2, 3]))
    (with_elr,) = partition_changes(view, change_record(4, isr=[1], elr=[2, 3]))
    assert with_elr.elr == [2, 3]
    (cleared,) = partition_changes(view, record(5, "ClearElrRecord", {"topicName": "orders"}))
    assert (cleared.elr, cleared.last_known_elr, cleared.record_type) == ([], [], "ClearElrRecord")
    assert view.apply(record(6, "ClearElrRecord", {"topicName": ""})) == []  # nothing left to clear
    assert view.apply(record(7, "RemoveTopicRecord", {"topicId": TOPIC_ID})) == []
    assert view.partitions == {} and view.topics == {}
    assert view.apply(record(8, "FenceBrokerRecord", {"id": 2, "epoch": 9})) == []


def test_a_partition_beyond_the_contract_s_replicas_is_published_for_the_job_to_quarantine() -> None:
    """Kafka sets no bound on a partition's replicas; the contract does (MAX_REPLICAS). The agent's replay goes on
    past such a partition, and the job quarantines its change with the reason."""
    view = MetadataView("prod", "a", 1)
    view.apply(topic_record(0))
    wide = list(range(1, MAX_REPLICAS + 2))
    (change,) = partition_changes(view, record(1, "PartitionRecord", {
        "partitionId": 7, "topicId": TOPIC_ID, "replicas": wide, "isr": wide, "removingReplicas": [],
        "addingReplicas": [], "leader": 1, "leaderRecoveryState": 0, "leaderEpoch": 0, "partitionEpoch": 0,
        "directories": [], "eligibleLeaderReplicas": None, "lastKnownElr": None}))
    assert change.replicas == wide and judge(to_json(change)).reason == "bad_length:replicas"
    (shrunk,) = partition_changes(view, change_record(2, isr=[1, 2]))  # the replay goes on, the partition known
    assert (shrunk.replicas, shrunk.isr, shrunk.previous_isr) == (wide, [1, 2], wide)


def test_a_snapshot_replaces_the_view_and_reports_nothing() -> None:
    view = MetadataView("prod", "a", 1)
    view.apply(topic_record(0))
    view.apply(partition_record(1, isr=[1]))
    view.load_snapshot([topic_record(0), partition_record(1, isr=[1, 2, 3], epoch=9)])
    (change,) = partition_changes(view, change_record(50, isr=[1, 2]))
    assert (change.leader_epoch, change.previous_isr, change.isr) == (9, [1, 2, 3], [1, 2])


# --------------------------------------------------------------------------------------- detection from it

class Changes:
    """PartitionChange records of the partition the samples of tests.test_detect describe (prod/orders-7), as the
    agent's replay makes them, one metadata offset after another."""

    def __init__(self, *, isr: list[int], leader: int = 1, epoch: int = 5) -> None:
        self.view = MetadataView("prod", "agent-1", 1)
        self.view.apply(record(0, "TopicRecord", {"name": "orders", "topicId": TOPIC_ID}))
        self.view.apply(partition_record(1, isr=isr, leader=leader, epoch=epoch))
        self.offset = 1

    def change(self, t_ms: int, **fields: Any) -> dict[str, Any]:
        self.offset += 1
        (change,) = self.view.apply(change_record(self.offset, time_ms=t_ms, **fields))
        return change.model_dump()


def apply(feed: Feed, change: dict[str, Any]) -> list[Any]:
    state, events = step_partition_change(feed.state, change, feed.cfg)
    feed.state = state
    feed.events += events
    return events


def at_ms(t_ms: int, s: dict[str, Any]) -> dict[str, Any]:
    """A sample taken at ``t_ms``."""
    return {**s, "sample_time_ms": t_ms}


def kinds(events: Iterable[Any]) -> list[tuple[EventType, int]]:
    return [(e.type, e.event_time_ms) for e in events]


def test_an_isr_flap_between_two_samples_is_reported_at_the_controllers_times() -> None:
    feed, log = Feed(), Changes(isr=[1, 2, 3])
    feed.partition(sample(0))
    shrink = apply(feed, log.change(3_250, isr=[1, 3]))
    expand = apply(feed, log.change(7_400, isr=[1, 3, 2]))
    assert kinds(shrink + expand) == [(EventType.ISR_SHRINK, 3_250), (EventType.ISR_EXPAND, 7_400)]
    assert all(e.source is EventSource.METADATA_LOG for e in shrink + expand)
    assert (shrink[0].brokers, expand[0].brokers) == ([2], [2])
    assert feed.partition(sample(10)) == []  # the next sample shows what the log told: nothing new


def test_each_record_is_applied_once_whichever_agents_publish_it() -> None:
    feed, log = Feed(), Changes(isr=[1, 2, 3])
    feed.partition(sample(0))
    shrink = log.change(3_000, isr=[1, 3])
    assert len(apply(feed, shrink)) == 1
    assert apply(feed, {**shrink, "agent_id": "agent-2", "broker_id": 2}) == []
    assert feed.state is not None and feed.state.meta.metadata_offset == shrink["metadata_offset"]


def test_a_change_the_samples_showed_first_makes_no_second_event() -> None:
    feed, log = Feed(), Changes(isr=[1, 2, 3])
    feed.partition(sample(0))
    sampled = feed.partition(sample(5, isr=[1, 3]))
    assert [(e.type, e.source) for e in sampled] == [(EventType.ISR_SHRINK, EventSource.SAMPLER)]
    assert apply(feed, log.change(4_800, isr=[1, 3])) == []  # the agent's record arrived after the sample


def test_a_sample_taken_before_a_recorded_change_or_while_brokers_catch_up_does_not_undo_it() -> None:
    feed, log = Feed(), Changes(isr=[1, 2, 3])
    feed.partition(sample(0))
    apply(feed, log.change(5_000, isr=[1, 3]))
    # a broker that has not applied the record yet still answers the old ISR 0.4 s later
    assert feed.partition(at_ms(5_400, sample(5, isr=[1, 2, 3]))) == []
    assert feed.state is not None and feed.state.meta.isr == (1, 3)
    expand = feed.partition(sample(10, isr=[1, 3, 2]))  # later samples are judged again (no agent, say)
    assert [(e.type, e.source) for e in expand] == [(EventType.ISR_EXPAND, EventSource.SAMPLER)]


def test_a_leader_that_rejoined_the_isr_between_two_samples_and_was_elected_is_clean() -> None:
    feed, log = Feed(), Changes(isr=[1, 3])
    feed.partition(sample(0, isr=[1, 3]))
    expand = log.change(2_000, isr=[1, 3, 2])
    election = log.change(3_000, leader=2, isr=[3, 2])
    apply(feed, expand)
    (change, shrink) = apply(feed, election)
    assert (change.type, change.clean, change.source) == (EventType.LEADER_CHANGE, True, EventSource.METADATA_LOG)
    assert (change.leader, change.previous_leader, change.leader_epoch, change.event_time_ms) == (2, 1, 6, 3_000)
    assert (shrink.type, shrink.brokers) == (EventType.ISR_SHRINK, [1])

    # an agent that started after the expand: its record of the election tells the ISR the controller judged by
    late, log = Feed(), Changes(isr=[1, 3])
    late.partition(sample(0, isr=[1, 3]))
    log.change(2_000, isr=[1, 3, 2])
    (change, *_) = apply(late, log.change(3_000, leader=2, isr=[3, 2]))
    assert (change.type, change.clean, change.previous_isr) == (EventType.LEADER_CHANGE, True, [1, 3, 2])


def test_an_election_the_controller_recorded_as_unclean_is_unclean_and_forced_when_the_topic_forbids_it() -> None:
    feed, log = Feed(), Changes(isr=[1])
    feed.partition(sample(0, isr=[1]))
    apply(feed, log.change(1_000, leader=-1))
    (change, *_) = [e for e in apply(feed, log.change(4_000, leader=2, isr=[2], recovery=1))
                    if e.type is EventType.LEADER_CHANGE]
    assert (change.clean, change.forced, change.previous_isr) == (False, True, [1])
    assert change.severity == "critical"


def test_a_late_sample_of_the_ended_epoch_raises_what_it_committed_and_is_no_epoch_regression() -> None:
    feed, log = Feed(), Changes(isr=[1])
    feed.partition(sample(0, isr=[1], hw=100, leos={1: 100, 2: 60, 3: 60}))
    apply(feed, log.change(3_000, leader=2, isr=[2], recovery=1))
    assert feed.state is not None and feed.state.meta.loss is not None
    assert feed.state.meta.loss.committed_end == 100
    # the sampler's cycle started before the election and its answers came from broker 1, leader alone
    late = feed.partition(at_ms(2_500, sample(2, isr=[1], hw=130, leos={1: 130, 2: 60, 3: 60})))
    assert EventType.EPOCH_REGRESSION not in [e.type for e in late]
    assert feed.state.meta.loss.committed_end == 130
    settled = feed.partition(sample(6, leader=2, epoch=6, isr=[2], hw=70, leos={1: None, 2: 70, 3: 60},
                                    lineage=[(0, 0), (6, 60)]))
    (loss,) = [e for e in settled if e.type is EventType.DATA_LOSS]
    assert (loss.committed_lost, loss.offset_start, loss.offset_end) == (70, 60, 130)


def test_records_of_an_unsampled_partition_or_an_older_epoch_change_nothing() -> None:
    log = Changes(isr=[1, 2, 3])
    assert step_partition_change(None, log.change(1_000, isr=[1, 3]), CFG) == (None, [])
    feed = Feed()
    feed.partition(sample(10, epoch=7))
    old = log.change(2_000, leader=2)  # epoch 6 < the sampled 7
    assert apply(feed, old) == []
    assert feed.state is not None and (feed.state.meta.leader, feed.state.meta.leader_epoch) == (1, 7)


def test_the_processor_orders_records_and_samples_by_time_and_shows_the_new_isr_at_once() -> None:
    log = Changes(isr=[1, 2, 3])
    first = sample(0)
    change = log.change(3 * S, isr=[1, 3])
    rows = pd.DataFrame({
        "kind": ["m", "p"], "sample": [to_json(PartitionChange(**change)).decode(), json.dumps(first)],
        "sample_time_ms": [3 * S, 0], "cycle": [change["metadata_offset"], 0]})
    _, out = process_bucket({}, rows, CFG, now_ms=4 * S)
    events = [r for r in out if r["kind"] == KIND_EVENT]
    assert [r["event_type"] for r in events] == ["ISR_SHRINK"]
    (metrics,) = [r for r in out if r["kind"] == "partition"]
    assert metrics["isr"] == [1, 3]


def test_the_controllers_own_recovery_from_the_last_known_elr_is_unclean_but_not_forced() -> None:
    """KIP-966: the leader, alone in the ISR, dies uncleanly (its ELR eligibility goes with its clean shutdown);
    when it returns, the controller elects it from the last known ELR and marks it recovering. Kafka's verdict is
    unclean; nobody forced it."""
    feed, log = Feed(), Changes(isr=[1])
    feed.partition(sample(0, isr=[1]))
    apply(feed, log.change(1_000, leader=-1, isr=[], elr=[1]))
    apply(feed, log.change(1_100, elr=[]))
    log.view.partitions[(TOPIC_ID, 7)] = replace(log.view.partitions[(TOPIC_ID, 7)], last_known_elr=(1,))
    (change,) = [e for e in apply(feed, log.change(9_000, leader=1, isr=[1], recovery=1))
                 if e.type is EventType.LEADER_CHANGE]
    assert (change.clean, change.forced, change.severity) == (False, False, "critical")
    assert "last known ELR" in change.message


def test_a_replica_diverging_in_an_epoch_ended_elections_ago_is_judged_by_what_that_epoch_committed() -> None:
    """Broker 3 led epoch 5 and died with a tail past what epoch 5 committed (100); two clean elections later its
    disk, read by its agent, diverges at 110, where leader 2's log left epoch 5. That epoch had committed 100:
    nothing committed at stake, whatever the later epochs committed since."""
    feed = Feed()
    feed.partition(sample(0, leader=3, epoch=5, hw=100, leos={1: 100, 2: 100, 3: 130}))
    feed.partition(sample(5, leader=1, epoch=6, hw=400, leos={1: 400, 2: 400, 3: None},
                          lineage=[(0, 0), (5, 0), (6, 110)]))
    feed.partition(sample(10, leader=2, epoch=7, hw=500, leos={1: 500, 2: 500, 3: None},
                          lineage=[(0, 0), (5, 0), (6, 110), (7, 450)]))
    assert feed.state is not None and feed.state.meta.earlier_committed_ends == ((5, 100),)
    (divergence,) = feed.replica(replica(12, 3, 130, lineage=[(0, 0), (5, 0)], last_batch_epoch=5))
    assert (divergence.offset_start, divergence.offset_end) == (110, 130)
    assert (divergence.severity, divergence.uncommitted_lost) == ("warning", 20)


def test_a_leader_alone_commits_what_it_appends_only_where_the_high_watermark_may_advance() -> None:
    """KIP-966: the high watermark does not advance while the ISR is below min.insync.replicas. A cluster that
    reports ELRs has it; a leader alone in the ISR of a topic with min.insync.replicas 2 commits nothing more."""
    for min_isr, elr, committed in ((2, [], 100), (1, [], 130), (2, None, 130)):
        feed = Feed()
        feed.partition(sample(0, isr=[1], elr=elr, min_isr=min_isr, hw=100, leos={1: 130, 2: 90, 3: 90}))
        assert feed.state is not None and feed.state.committed_end == committed, (min_isr, elr)


# ------------------------------------------------------------------------------------------------ brokers

def register_record(offset: int, broker: int, epoch: int, *, fenced: bool = True) -> MetadataRecord:
    return record(offset, "RegisterBrokerRecord", {
        "brokerId": broker, "isMigratingZkBroker": False, "incarnationId": "AAAAAAAAAAAAAAAAAAAAAA",
        "brokerEpoch": epoch, "endPoints": [], "features": [], "rack": None, "fenced": fenced,
        "inControlledShutdown": False, "logDirs": []})


def registration_change(offset: int, broker: int, epoch: int, *, fenced: int = 0, shutdown: int = 0
                        ) -> MetadataRecord:
    return record(offset, "BrokerRegistrationChangeRecord", {
        "brokerId": broker, "brokerEpoch": epoch, "fenced": fenced, "inControlledShutdown": shutdown,
        "logDirs": None})


def test_the_view_replays_broker_registrations_fencing_and_controlled_shutdown_as_kafka_does() -> None:
    view = MetadataView("prod", "a/logdir-agent", 1)
    (registered,) = broker_changes(view, register_record(10, 2, 10))
    assert (registered.broker, registered.fenced, registered.previous_registered) == (2, True, False)
    (unfenced,) = broker_changes(view, registration_change(11, 2, 10, fenced=-1))
    assert (unfenced.fenced, unfenced.previous_fenced, unfenced.record_type) == (
        False, True, "BrokerRegistrationChangeRecord")
    assert view.apply(registration_change(12, 2, 9, fenced=1)) == []  # a stale epoch: Kafka ignores it too
    assert view.apply(registration_change(13, 2, 10)) == []  # no change at all
    (stopping,) = broker_changes(view, registration_change(14, 2, 10, shutdown=1))
    assert (stopping.in_controlled_shutdown, stopping.fenced) == (True, False)
    (stopped,) = broker_changes(view, registration_change(15, 2, 10, fenced=1))
    assert (stopped.fenced, stopped.previous_in_controlled_shutdown) == (True, True)
    (fenced_old_style,) = broker_changes(view, register_record(16, 3, 16, fenced=False))
    assert fenced_old_style.fenced is False
    (fence,) = broker_changes(view, record(17, "FenceBrokerRecord", {"id": 3, "epoch": 16}))
    assert (fence.fenced, fence.previous_fenced) == (True, False)
    (gone,) = broker_changes(view, record(18, "UnregisterBrokerRecord", {"brokerId": 3, "brokerEpoch": 16}))
    assert (gone.registered, gone.previous_registered) == (False, True)
    assert parse_sample(to_json(gone)) == gone  # the record validates as its contract
    view.load_snapshot([register_record(20, 2, 20)])
    assert view.brokers == {2: view.brokers[2]} and view.brokers[2].fenced


def test_broker_fencing_and_unfencing_are_events_at_the_controllers_time_each_record_once() -> None:
    view = MetadataView("prod", "a/logdir-agent", 1)
    records = [register_record(10, 2, 10), registration_change(11, 2, 10, fenced=-1),
               registration_change(20, 2, 10, fenced=1),  # heartbeats lost
               register_record(30, 2, 30), registration_change(31, 2, 30, fenced=-1),
               registration_change(40, 2, 30, shutdown=1), registration_change(41, 2, 30, fenced=1)]
    changes = [c for r in records for c in view.apply(r)]
    rows = pd.DataFrame({"kind": "b", "sample": [to_json(c).decode() for c in changes * 2],  # a second agent
                         "sample_time_ms": [c.append_time_ms for c in changes * 2],
                         "cycle": [c.metadata_offset for c in changes * 2]})
    table, out = process_bucket({}, rows, CFG, now_ms=1_000)
    events = [json.loads(r["payload"]) for r in out if r["kind"] == KIND_EVENT]
    assert [(e["type"], e["severity"], e["brokers"], e["event_time_ms"], e["source"]) for e in events] == [
        ("BROKER_UNFENCED", "info", [2], 110, "metadata_log"),
        ("BROKER_FENCED", "warning", [2], 200, "metadata_log"),
        ("BROKER_UNFENCED", "info", [2], 310, "metadata_log"),
        ("BROKER_FENCED", "info", [2], 410, "metadata_log"),  # after its controlled shutdown: planned
    ]
    assert all(e["topic"] is None and e["partition"] is None for e in events)
    assert len({e["event_id"] for e in events}) == 4
    _, again = process_bucket(table, rows, CFG, now_ms=2_000)  # replayed: nothing new
    assert not [r for r in again if r["kind"] == KIND_EVENT]
    (registry,) = table.values()
    assert isinstance(registry, BrokerRegistry)
    assert registry.fenced == {2: True}


def test_a_restarted_broker_registering_again_before_it_was_fenced_is_reported_fenced() -> None:
    view = MetadataView("prod", "a", 1)
    changes = [c for r in [register_record(10, 2, 10, fenced=False), register_record(20, 2, 20)]
               for c in broker_changes(view, r)]
    registry, first = step_broker_change(None, changes[0])
    _, second = step_broker_change(registry, changes[1])
    assert [e.type for e in first] == [EventType.BROKER_UNFENCED]
    (fenced,) = second
    assert fenced.type is EventType.BROKER_FENCED and "registered again" in fenced.message


def test_eligible_leader_replicas_changes_are_events_from_the_log_and_from_samples() -> None:
    feed, log = Feed(), Changes(isr=[1, 2, 3])
    feed.partition(sample(0, elr=[]))
    shrink = apply(feed, log.change(3_000, isr=[1], elr=[2, 3]))  # below min.insync.replicas 2: 2, 3 stay eligible
    (elr,) = [e for e in shrink if e.type is EventType.ELR_CHANGE]
    assert (elr.elr, elr.previous_elr, elr.brokers, elr.event_time_ms, elr.source) == (
        [2, 3], [], [2, 3], 3_000, EventSource.METADATA_LOG)
    assert elr.severity == "info"
    back = feed.partition(sample(10, isr=[1, 3], elr=[2]))  # sampled: broker 3 rejoined the ISR
    (elr,) = [e for e in back if e.type is EventType.ELR_CHANGE]
    assert (elr.elr, elr.previous_elr, elr.brokers, elr.source) == ([2], [2, 3], [3], EventSource.SAMPLER)
    assert not [e for e in feed.partition(sample(20, isr=[1, 3], elr=[2])) if e.type is EventType.ELR_CHANGE]


def test_a_reassignment_from_the_log_is_two_replicas_changes_and_its_new_replica_no_under_replication() -> None:
    """The controller's records of a reassignment [1, 2, 3] -> [1, 2, 4]: its start (replicas [1, 2, 3, 4], adding
    [4], removing [3]), the new replica in the ISR, its end (replicas [1, 2, 4], the ISR without 3, nothing in
    flight). The view replays them as Kafka merges them; the job reports the two replica changes at the
    controller's times, no ISR_SHRINK for the replica removed, and no under-replicated partition while the
    new one catches up, whatever the samples beside it cannot tell (here: a collector without the request)."""
    view = MetadataView("prod", "agent-1", 1)
    view.apply(topic_record(0))
    view.apply(partition_record(1, isr=[1, 2, 3], epoch=5))

    def change(offset: int, fields: dict[str, Any]) -> dict[str, Any]:
        (c,) = partition_changes(view, record(offset, "PartitionChangeRecord", {
            "partitionId": 7, "topicId": TOPIC_ID, "isr": None, "leader": -2, "replicas": None,
            "removingReplicas": None, "addingReplicas": None, "leaderRecoveryState": -1, "directories": None,
            "eligibleLeaderReplicas": None, "lastKnownElr": None, **fields}, offset * 1_000))
        return c.model_dump()

    start = change(2, {"replicas": [1, 2, 3, 4], "addingReplicas": [4], "removingReplicas": [3]})
    assert (start["replicas"], start["adding_replicas"], start["removing_replicas"]) == ([1, 2, 3, 4], [4], [3])
    joined = change(3, {"isr": [1, 2, 3, 4]})
    assert (joined["adding_replicas"], joined["removing_replicas"]) == ([4], [3])  # kept: null in the record
    end = change(4, {"replicas": [1, 2, 4], "isr": [1, 2, 4], "addingReplicas": [], "removingReplicas": []})
    assert (end["replicas"], end["adding_replicas"], end["removing_replicas"]) == ([1, 2, 4], [], [])

    feed = Feed()
    feed.partition(sample(0))
    started = apply(feed, start)
    assert kinds(started) == [(EventType.REPLICAS_CHANGE, 2_000)] and started[0].source is EventSource.METADATA_LOG
    assert (started[0].adding_replicas, started[0].removing_replicas) == ([4], [3])
    assert feed.partition(sample(3, replicas=[1, 2, 3, 4], isr=[1, 2, 3], leos={1: 100, 2: 100, 3: 100, 4: 0})) == []
    assert feed.metrics is not None and not feed.metrics.under_replicated
    assert kinds(apply(feed, joined)) == [(EventType.ISR_EXPAND, 3_000)]
    ended = apply(feed, end)
    assert kinds(ended) == [(EventType.REPLICAS_CHANGE, 4_000)] and ended[0].brokers == [3]
    assert feed.partition(sample(6, replicas=[1, 2, 4])) == [] and not feed.metrics.under_replicated
    assert feed.of(EventType.ISR_SHRINK) == []
