"""The cluster's partitions as the KRaft metadata log describes them, replayed record by record (pure).

Replays what the controller replays (Kafka's ``PartitionRegistration``: a PartitionRecord registers a partition
whole; a PartitionChangeRecord changes only the fields it carries, a leader other than "no change" (-2) raising the
leader epoch by one, every record raising the partition epoch; ClearElrRecord empties ELR and last known ELR of a
topic, or of every topic) and turns each change of a partition into a :class:`PartitionChange` record with the
partition before and after it. Topic names come from the log's TopicRecords; a RemoveTopicRecord forgets a topic.

Brokers the same way (Kafka's ``ClusterControlManager`` replay): a RegisterBrokerRecord registers a broker whole
(fenced or not, as the record says), a BrokerRegistrationChangeRecord changes its fencing (-1 unfenced, 1 fenced, 0
no change) and its controlled shutdown (1 in it, 0 no change), Fence/UnfenceBrokerRecord fence and unfence (older
metadata versions), UnregisterBrokerRecord removes it; each change is a :class:`BrokerChange` record.

A snapshot is loaded with :meth:`MetadataView.load_snapshot`: it replaces what the view knew and reports nothing
(it is a state, not a change).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from collectors.logdir.metadata.batches import MetadataRecord
from replmon.contracts.samples import BrokerChange, LeaderRecoveryState, PartitionChange

NO_LEADER_CHANGE = -2
"""PartitionChangeRecord's ``leader`` when the record does not change the leader (Kafka's LeaderConstants)."""
_RECOVERY_STATES = {0: LeaderRecoveryState.RECOVERED, 1: LeaderRecoveryState.RECOVERING}
PARTITION_RECORDS = ("PartitionRecord", "PartitionChangeRecord", "ClearElrRecord")
BROKER_RECORDS = ("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord",
                  "UnfenceBrokerRecord", "UnregisterBrokerRecord")
_FENCING = {-1: False, 1: True}
"""BrokerRegistrationChangeRecord's ``fenced`` (Kafka's BrokerRegistrationFencingChange; 0: no change)."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One broker's registration, as the controller holds it."""

    broker_epoch: int
    fenced: bool
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class Registration:
    """One partition's registration, as the controller holds it."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    leader_recovery_state: LeaderRecoveryState
    adding_replicas: tuple[int, ...] = ()
    """A reassignment in flight: the replicas it adds (among ``replicas``)."""
    removing_replicas: tuple[int, ...] = ()
    """A reassignment in flight: the replicas it removes once the adding ones are in the ISR."""


def _ints(values: Iterable[int] | None) -> tuple[int, ...]:
    return () if values is None else tuple(int(v) for v in values)


def _recovery_state(value: int, current: LeaderRecoveryState) -> LeaderRecoveryState:
    """Kafka's ``LeaderRecoveryState.changeTo``: -1 keeps the current state."""
    return current if value < 0 else _RECOVERY_STATES.get(value, current)


def register(fields: dict[str, Any]) -> Registration:
    """A PartitionRecord's registration."""
    return Registration(
        topic_id=fields["topicId"], partition=int(fields["partitionId"]), replicas=_ints(fields["replicas"]),
        isr=_ints(fields["isr"]), leader=int(fields["leader"]), leader_epoch=int(fields["leaderEpoch"]),
        partition_epoch=int(fields["partitionEpoch"]), elr=_ints(fields.get("eligibleLeaderReplicas")),
        last_known_elr=_ints(fields.get("lastKnownElr")),
        leader_recovery_state=_recovery_state(int(fields.get("leaderRecoveryState", 0)),
                                              LeaderRecoveryState.RECOVERED),
        adding_replicas=_ints(fields.get("addingReplicas")), removing_replicas=_ints(fields.get("removingReplicas")))


def merge(current: Registration, fields: dict[str, Any]) -> Registration:
    """A PartitionChangeRecord applied to ``current`` (Kafka's ``PartitionRegistration.merge``)."""
    leader, epoch = current.leader, current.leader_epoch
    if int(fields["leader"]) != NO_LEADER_CHANGE:
        leader, epoch = int(fields["leader"]), epoch + 1

    def changed(name: str, value: tuple[int, ...]) -> tuple[int, ...]:
        given = fields.get(name)
        return value if given is None else _ints(given)

    return replace(
        current, replicas=changed("replicas", current.replicas), isr=changed("isr", current.isr), leader=leader,
        leader_epoch=epoch, partition_epoch=current.partition_epoch + 1,
        elr=changed("eligibleLeaderReplicas", current.elr),
        last_known_elr=changed("lastKnownElr", current.last_known_elr),
        leader_recovery_state=_recovery_state(int(fields.get("leaderRecoveryState", -1)),
                                              current.leader_recovery_state),
        adding_replicas=changed("addingReplicas", current.adding_replicas),
        removing_replicas=changed("removingReplicas", current.removing_replicas))


class MetadataView:
    """Topics and partitions as the metadata log has described them so far."""

    def __init__(self, cluster: str, agent_id: str, broker_id: int) -> None:
        self.cluster = cluster
        self.agent_id = agent_id
        self.broker_id = broker_id
        self.topics: dict[str, str] = {}
        """Topic id -> name."""
        self.partitions: dict[tuple[str, int], Registration] = {}
        self.brokers: dict[int, BrokerRegistration] = {}

    def load_snapshot(self, records: Iterable[MetadataRecord]) -> None:
        """Replace the view by a snapshot's state."""
        self.topics.clear()
        self.partitions.clear()
        self.brokers.clear()
        for record in records:
            self.apply(record)

    def apply(self, record: MetadataRecord) -> list[PartitionChange | BrokerChange]:
        """Replay one record; the partition and broker changes it made, as records."""
        fields = record.fields
        kind = record.type
        if kind in BROKER_RECORDS:
            return self._broker(record)
        if kind == "TopicRecord":
            self.topics[fields["topicId"]] = fields["name"]
            return []
        if kind == "RemoveTopicRecord":
            topic_id = fields["topicId"]
            self.topics.pop(topic_id, None)
            for key in [k for k in self.partitions if k[0] == topic_id]:
                del self.partitions[key]
            return []
        if kind == "PartitionRecord":
            new = register(fields)
            key = (new.topic_id, new.partition)
            before = self.partitions.get(key)
            self.partitions[key] = new
            return self._changes(record, [(before, new)])
        if kind == "PartitionChangeRecord":
            key = (fields["topicId"], int(fields["partitionId"]))
            before = self.partitions.get(key)
            if before is None:
                return []  # a partition the view never saw registered (read from mid-log without its snapshot)
            new = merge(before, fields)
            self.partitions[key] = new
            return self._changes(record, [(before, new)])
        if kind == "ClearElrRecord":
            name = fields.get("topicName") or ""
            cleared = []
            for key, before in self.partitions.items():
                if (not name or self.topics.get(key[0]) == name) and (before.elr or before.last_known_elr):
                    cleared.append((before, replace(before, elr=(), last_known_elr=())))
            for _, new in cleared:
                self.partitions[(new.topic_id, new.partition)] = new
            return self._changes(record, cleared)
        return []

    def _broker(self, record: MetadataRecord) -> list[PartitionChange | BrokerChange]:
        fields, kind = record.fields, record.type
        broker = int(fields["brokerId"] if "brokerId" in fields else fields["id"])
        epoch = int(fields["brokerEpoch"] if "brokerEpoch" in fields else fields["epoch"])
        before = self.brokers.get(broker)
        new: BrokerRegistration | None
        if kind == "RegisterBrokerRecord":
            new = BrokerRegistration(epoch, bool(fields.get("fenced", True)),
                                     bool(fields.get("inControlledShutdown", False)))
        elif before is None or before.broker_epoch != epoch:
            return []  # a change to a registration the view does not hold (Kafka ignores a stale epoch too)
        elif kind == "UnregisterBrokerRecord":
            new = None
        elif kind in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
            new = replace(before, fenced=kind == "FenceBrokerRecord")
        else:
            fenced = _FENCING.get(int(fields.get("fenced", 0)), before.fenced)
            shutdown = int(fields.get("inControlledShutdown", 0)) == 1 or before.in_controlled_shutdown
            new = replace(before, fenced=fenced, in_controlled_shutdown=shutdown)
        if new is None:
            del self.brokers[broker]
        else:
            self.brokers[broker] = new
        if new == before:
            return []
        if new is not None:
            after = new
        else:  # unregistered: it serves nothing
            assert before is not None
            after = replace(before, fenced=True, in_controlled_shutdown=False)
        return [BrokerChange(
            cluster=self.cluster, agent_id=self.agent_id, broker_id=self.broker_id,
            metadata_offset=record.offset, append_time_ms=record.append_time_ms,
            record_type=kind,  # one of BROKER_RECORDS
            broker=broker, broker_epoch=epoch, registered=new is not None, fenced=after.fenced,
            in_controlled_shutdown=after.in_controlled_shutdown,
            previous_registered=before is not None,
            previous_fenced=None if before is None else before.fenced,
            previous_in_controlled_shutdown=None if before is None else before.in_controlled_shutdown,
        )]

    def _changes(self, record: MetadataRecord,
                 pairs: Sequence[tuple[Registration | None, Registration]]) -> list[PartitionChange | BrokerChange]:
        out: list[PartitionChange | BrokerChange] = []
        for before, new in pairs:
            topic = self.topics.get(new.topic_id)
            if topic is None:
                continue  # its TopicRecord was never read
            out.append(_partition_change(
                cluster=self.cluster, agent_id=self.agent_id, broker_id=self.broker_id,
                metadata_offset=record.offset, append_time_ms=record.append_time_ms,
                record_type=record.type,  # one of PARTITION_RECORDS
                topic=topic, topic_id=new.topic_id, partition=new.partition, leader=new.leader,
                leader_epoch=new.leader_epoch, partition_epoch=new.partition_epoch, replicas=list(new.replicas),
                isr=list(new.isr), elr=list(new.elr), last_known_elr=list(new.last_known_elr),
                leader_recovery_state=new.leader_recovery_state,
                previous_leader=None if before is None else before.leader,
                previous_leader_epoch=None if before is None else before.leader_epoch,
                previous_isr=None if before is None else list(before.isr),
                previous_elr=None if before is None else list(before.elr),
                previous_last_known_elr=None if before is None else list(before.last_known_elr),
                adding_replicas=list(new.adding_replicas), removing_replicas=list(new.removing_replicas),
            ))
        return out


def _partition_change(**fields: Any) -> PartitionChange:
    """The change as its contract has it; one beyond the contract's bounds (a partition of more replicas than
    :data:`~replmon.contracts.samples.MAX_REPLICAS`, which Kafka allows) as it is, unvalidated: published, the
    job quarantines it with the reason (``bad_length:replicas``), and the replay goes on."""
    try:
        return PartitionChange(**fields)
    except ValidationError:
        return PartitionChange.model_construct(**fields)
