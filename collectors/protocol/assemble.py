"""Answers of one cycle -> PartitionSamples. Pure: plain values in, samples out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors

from collectors.protocol.lineage import TopicPartition
from collectors.protocol.requests import PartitionMeta, TopicConfig
from collectors.samples import EpochEntry, PartitionSample, ReplicaError

UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
KAFKA_STORAGE_ERROR = 56
LEADER_NOT_AVAILABLE = 5

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


def replica_offsets(meta: PartitionMeta, answers: CycleAnswers, label: str) -> list[dict[str, Any]]:
    out = []
    for broker in meta.replicas:
        entry: dict[str, Any] = {"broker_id": broker}
        by_broker = answers.log_end_offset.get(broker)
        found = by_broker.get(meta.tp) if by_broker is not None else None
        if broker in answers.unreachable:
            entry["error"] = ReplicaError.UNREACHABLE
        elif found is None and (broker, label) in answers.failed:
            entry["error"] = ReplicaError.UNKNOWN
            entry["error_detail"] = answers.failed[(broker, label)]
        elif found is None:
            entry["error"] = ReplicaError.OFFLINE if broker in meta.offline_replicas else ReplicaError.UNKNOWN
            entry["error_detail"] = None if broker in meta.offline_replicas else "no answer for this replica"
        else:
            code, offset = found
            if code == 0 and offset >= 0:
                entry["log_end_offset"] = offset
            elif code == 0:
                entry["error"] = ReplicaError.UNKNOWN
                entry["error_detail"] = f"offset {offset}"
            elif code in (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER):
                entry["error"] = ReplicaError.NOT_HOSTED
            elif code == KAFKA_STORAGE_ERROR or broker in meta.offline_replicas:
                entry["error"] = ReplicaError.OFFLINE
            else:
                entry["error"] = ReplicaError.UNKNOWN
                entry["error_detail"] = error_name(code)
        out.append(entry)
    return out


def partition_sample(meta: PartitionMeta, answers: CycleAnswers, *, cluster: str, collector_id: str, cycle: int,
                     sample_time_ms: int, config: TopicConfig | None, lineage: list[EpochEntry] | None,
                     leo_label: str, leader_labels: Mapping[str, str]) -> PartitionSample:
    """``leader_labels``: field name -> request label of the three leader questions."""
    tp = meta.tp
    errors: list[str] = []
    if meta.error_code:
        errors.append(error_name(meta.error_code))
    values: dict[str, int | None] = {"high_watermark": None, "last_stable_offset": None, "log_start_offset": None}
    if meta.leader < 0:
        errors.append("no leader")
    elif meta.leader in answers.unreachable:
        errors.append(f"leader {meta.leader} unreachable")
    else:
        sources = {"high_watermark": answers.high_watermark, "last_stable_offset": answers.last_stable_offset,
                   "log_start_offset": answers.log_start_offset}
        for name, source in sources.items():
            value, err = _offset(source, tp)
            values[name] = value
            failed = answers.failed.get((meta.leader, leader_labels[name]))
            if err and err not in errors:
                errors.append(f"{name}: {err}")
            elif value is None and failed and failed not in errors:
                errors.append(failed)
    return PartitionSample(
        cluster=cluster, collector_id=collector_id, cycle=cycle, sample_time_ms=sample_time_ms,
        topic=meta.topic, topic_id=meta.topic_id, partition=meta.partition, leader=meta.leader,
        leader_epoch=meta.leader_epoch, replicas=meta.replicas, isr=meta.isr, elr=meta.elr,
        last_known_elr=meta.last_known_elr, offline_replicas=meta.offline_replicas,
        replica_offsets=replica_offsets(meta, answers, leo_label),
        epoch_lineage=lineage,
        min_insync_replicas=config.min_insync_replicas if config else None,
        unclean_leader_election=config.unclean_leader_election if config else None,
        error="; ".join(errors) or None,
        **values,
    )
