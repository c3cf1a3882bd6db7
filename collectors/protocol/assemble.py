"""Answers of one cycle -> PartitionSamples. Pure: plain values in, samples out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import kafka.errors as Errors

from collectors.protocol.lineage import TopicPartition
from collectors.protocol.requests import PartitionMeta, TopicConfig
from replmon.contracts.samples import (
    PARTITION_SCHEMA,
    EpochEntry,
    PartitionSample,
    ReplicaError,
    ReplicaOffsets,
    trusted,
)

# Kafka's error codes, as kafka-python defines them
UNKNOWN_TOPIC_OR_PARTITION: int = Errors.UnknownTopicOrPartitionError.errno
NOT_LEADER_OR_FOLLOWER: int = Errors.NotLeaderForPartitionError.errno
KAFKA_STORAGE_ERROR: int = Errors.KafkaStorageError.errno

OffsetAnswers = dict[TopicPartition, tuple[int, int]]


@dataclass
class CycleAnswers:
    """What the brokers answered in one cycle."""

    high_watermark: OffsetAnswers = field(default_factory=dict)
    last_stable_offset: OffsetAnswers = field(default_factory=dict)
    log_start_offset: OffsetAnswers = field(default_factory=dict)
    log_end_offset: dict[int, OffsetAnswers] = field(default_factory=dict)
    """broker -> its replicas' own log end offsets."""
    unreachable: set[int] = field(default_factory=set)
    failed: dict[tuple[int, str], str] = field(default_factory=dict)
    """(broker, request label) -> why that request got no answer (broker reachable otherwise)."""
    reassignments: dict[TopicPartition, tuple[list[int], list[int]]] | None = None
    """Partition -> (adding, removing replicas) of each reassignment in flight; None when the cycle could not ask."""


def error_name(code: int) -> str:
    try:
        return str(Errors.for_code(code).__name__)
    except Exception:
        return f"error code {code}"


def _offset(answers: OffsetAnswers, tp: TopicPartition) -> tuple[int | None, str | None]:
    found = answers.get(tp)
    if found is None:
        return None, None
    code, offset = found
    if code:
        return None, error_name(code)
    return (offset if offset >= 0 else None), None


def _replica(broker: int, log_end_offset: int | None = None, error: ReplicaError | None = None,
             error_detail: str | None = None) -> ReplicaOffsets:
    return trusted(ReplicaOffsets, {"broker_id": broker, "log_end_offset": log_end_offset, "error": error,
                                    "error_detail": error_detail})


_NO_ANSWERS: OffsetAnswers = {}
_NOT_MOVING: tuple[list[int], list[int]] = ([], [])
"""A partition no reassignment moves (shared by the samples: never mutated)."""


class SampleAssembler:
    """One cycle's answers -> its partition samples.

    Samples are built without validation (:func:`replmon.contracts.samples.trusted`): every value is a decoded protocol
    field of its type, or None. A partition whose answers are all there and clean takes a short path (most of a
    cycle's 20k partitions); anything else, the long one that names what is missing and why."""

    def __init__(self, answers: CycleAnswers, *, cluster: str, collector_id: str, cycle: int, sample_time_ms: int,
                 leo_label: str, leader_labels: Mapping[str, str]) -> None:
        """``leader_labels``: field name -> request label of the three leader questions."""
        self.answers = answers
        self.leo_label = leo_label
        self.leader_labels = leader_labels
        self._head = {"schema_": PARTITION_SCHEMA, "cluster": cluster, "collector_id": collector_id,
                      "cycle": cycle, "sample_time_ms": sample_time_ms}

    def sample(self, meta: PartitionMeta, config: TopicConfig | None,
               lineage: list[EpochEntry] | None) -> PartitionSample:
        answers = self.answers
        tp = (meta.topic, meta.partition)
        leader = meta.leader
        hw = answers.high_watermark.get(tp)
        lso = answers.last_stable_offset.get(tp)
        lss = answers.log_start_offset.get(tp)
        offsets: tuple[int | None, int | None, int | None]
        if (hw is not None and lso is not None and lss is not None and not (hw[0] or lso[0] or lss[0])
                and hw[1] >= 0 and lso[1] >= 0 and lss[1] >= 0 and not meta.error_code and leader >= 0
                and leader not in answers.unreachable):
            offsets, error = (hw[1], lso[1], lss[1]), None  # the common case
        else:
            offsets, error = self._leader_offsets(meta, tp)
        unreachable = answers.unreachable
        by_broker = answers.log_end_offset
        replicas = []
        for broker in meta.replicas:
            found = by_broker.get(broker, _NO_ANSWERS).get(tp)
            if found is not None and not found[0] and found[1] >= 0 and broker not in unreachable:
                replicas.append(_replica(broker, found[1]))
            else:
                replicas.append(self._replica_error(meta, broker, found))
        moving = answers.reassignments
        adding, removing = (None, None) if moving is None else moving.get(tp, _NOT_MOVING)
        return trusted(PartitionSample, {
            **self._head, "topic": meta.topic, "topic_id": meta.topic_id, "partition": meta.partition,
            "leader": leader, "leader_epoch": meta.leader_epoch, "replicas": meta.replicas, "isr": meta.isr,
            "elr": meta.elr, "last_known_elr": meta.last_known_elr, "offline_replicas": meta.offline_replicas,
            "adding_replicas": adding, "removing_replicas": removing,
            "high_watermark": offsets[0], "last_stable_offset": offsets[1], "log_start_offset": offsets[2],
            "replica_offsets": replicas, "epoch_lineage": lineage,
            "min_insync_replicas": config.min_insync_replicas if config else None,
            "unclean_leader_election": config.unclean_leader_election if config else None,
            "error": error,
        })

    def _leader_offsets(self, meta: PartitionMeta, tp: TopicPartition
                        ) -> tuple[tuple[int | None, int | None, int | None], str | None]:
        """(high watermark, last stable offset, log start offset), and what kept any of them away."""
        answers = self.answers
        errors: list[str] = []
        if meta.error_code:
            errors.append(error_name(meta.error_code))
        values: list[int | None] = [None, None, None]
        if meta.leader < 0:
            errors.append("no leader")
        elif meta.leader in answers.unreachable:
            errors.append(f"leader {meta.leader} unreachable")
        else:
            sources = (("high_watermark", answers.high_watermark), ("last_stable_offset", answers.last_stable_offset),
                       ("log_start_offset", answers.log_start_offset))
            for i, (name, source) in enumerate(sources):
                value, err = _offset(source, tp)
                values[i] = value
                failed = answers.failed.get((meta.leader, self.leader_labels[name]))
                if err and err not in errors:
                    errors.append(f"{name}: {err}")
                elif value is None and failed and failed not in errors:
                    errors.append(failed)
        return (values[0], values[1], values[2]), "; ".join(errors) or None

    def _replica_error(self, meta: PartitionMeta, broker: int, found: tuple[int, int] | None) -> ReplicaOffsets:
        """A replica whose log end offset is missing: why."""
        answers = self.answers
        if broker in answers.unreachable:
            return _replica(broker, error=ReplicaError.UNREACHABLE)
        if found is None and (broker, self.leo_label) in answers.failed:
            return _replica(broker, error=ReplicaError.UNKNOWN, error_detail=answers.failed[(broker, self.leo_label)])
        if found is None:
            if broker in meta.offline_replicas:
                return _replica(broker, error=ReplicaError.OFFLINE)
            return _replica(broker, error=ReplicaError.UNKNOWN, error_detail="no answer for this replica")
        code, offset = found
        if code == 0:
            return _replica(broker, error=ReplicaError.UNKNOWN, error_detail=f"offset {offset}")
        if code in (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER):
            return _replica(broker, error=ReplicaError.NOT_HOSTED)
        if code == KAFKA_STORAGE_ERROR or broker in meta.offline_replicas:
            return _replica(broker, error=ReplicaError.OFFLINE)
        return _replica(broker, error=ReplicaError.UNKNOWN, error_detail=error_name(code))
