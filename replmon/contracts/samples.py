"""The sample records the collectors publish to the samples topic: defined here once.

Every record is one JSON object whose ``schema`` field names its kind and version. The streaming job derives
its Spark schema and its validation from these models (``streaming.schema``); nothing else spells the fields
out.

Offsets follow Kafka: ``log_end_offset`` is the offset of the next message a replica will write,
``high_watermark`` is the first offset not yet committed (consumers read below it).
"""

from __future__ import annotations

import base64
import functools
import uuid
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

MAX_OFFSET = 2**62
"""Anything above this is not an offset a real log can reach: such a sample is rejected."""

Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
BrokerId = Annotated[int, Field(ge=-1, le=2**31 - 1)]
Epoch = Annotated[int, Field(ge=-1, le=2**31 - 1)]
PartitionId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TimeMs = Annotated[int, Field(ge=0, le=2**53)]

PARTITION_SCHEMA: Final = "partition/v1"
REPLICA_SCHEMA: Final = "replica/v1"
CYCLE_SCHEMA: Final = "cycle/v1"


class ReplicaError(StrEnum):
    """Why a replica's offsets are missing from a sample."""

    UNREACHABLE = "unreachable"  # its broker did not answer in this cycle
    NOT_HOSTED = "not_hosted"  # the broker answered that it has no such replica
    OFFLINE = "offline"  # Kafka lists it in offline_replicas (log dir failure)
    NOT_LEADER = "not_leader"  # leader-only offsets asked of a broker that is no longer leader
    UNKNOWN = "unknown"  # any other error code; the detail is in ``error_detail``


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class EpochEntry(_Record):
    """One line of a leader-epoch-checkpoint: from ``start_offset`` on, messages were written in
    ``leader_epoch``."""

    leader_epoch: Epoch
    start_offset: Offset


class ReplicaOffsets(_Record):
    """One replica's own log end offset, as its broker answered ListOffsets with replica_id -2."""

    broker_id: BrokerId
    log_end_offset: Offset | None = None
    error: ReplicaError | None = None
    error_detail: str | None = None


class PartitionSample(_Record):
    """One partition in one collector cycle (protocol sampler)."""

    schema_: Literal["partition/v1"] = Field(default=PARTITION_SCHEMA, alias="schema")
    cluster: str = Field(min_length=1, max_length=200)
    collector_id: str = Field(min_length=1, max_length=200)
    cycle: Annotated[int, Field(ge=0)]
    sample_time_ms: TimeMs
    topic: str = Field(min_length=1, max_length=249)
    topic_id: str | None = None
    partition: PartitionId
    leader: BrokerId
    """-1 when the partition has no leader (offline)."""
    leader_epoch: Epoch
    replicas: list[BrokerId]
    isr: list[BrokerId]
    elr: list[BrokerId] | None = None
    """Eligible leader replicas (KIP-966); None when the cluster does not report them."""
    last_known_elr: list[BrokerId] | None = None
    offline_replicas: list[BrokerId] = []
    high_watermark: Offset | None = None
    last_stable_offset: Offset | None = None
    log_start_offset: Offset | None = None
    replica_offsets: list[ReplicaOffsets] = []
    epoch_lineage: list[EpochEntry] | None = None
    """The leader's lineage (epoch -> start offset), when the sampler fetched it this cycle."""
    min_insync_replicas: Annotated[int, Field(ge=1)] | None = None
    unclean_leader_election: bool | None = None
    error: str | None = None
    """A partition-level error (leader not available, ...), when metadata or offsets failed."""


class ReplicaSample(_Record):
    """One replica as found on disk by the log-dir agent (works while its broker is down)."""

    schema_: Literal["replica/v1"] = Field(default=REPLICA_SCHEMA, alias="schema")
    cluster: str = Field(min_length=1, max_length=200)
    agent_id: str = Field(min_length=1, max_length=200)
    cycle: Annotated[int, Field(ge=0)]
    sample_time_ms: TimeMs
    broker_id: BrokerId
    log_dir: str
    topic: str = Field(min_length=1, max_length=249)
    topic_id: str | None = None
    partition: PartitionId
    log_end_offset: Offset | None = None
    high_watermark_checkpoint: Offset | None = None
    """The replica's high watermark as last written to replication-offset-checkpoint."""
    recovery_point: Offset | None = None
    log_start_offset: Offset | None = None
    epoch_lineage: list[EpochEntry] = []
    last_batch_leader_epoch: Epoch | None = None
    """partitionLeaderEpoch of the last complete batch of the active segment."""
    size_bytes: Annotated[int, Field(ge=0)] = 0
    error: str | None = None


class CycleSample(_Record):
    """One collector cycle over one cluster: lets the job tell a silent cluster from a quiet one."""

    schema_: Literal["cycle/v1"] = Field(default=CYCLE_SCHEMA, alias="schema")
    cluster: str = Field(min_length=1, max_length=200)
    collector_id: str = Field(min_length=1, max_length=200)
    cycle: Annotated[int, Field(ge=0)]
    sample_time_ms: TimeMs
    duration_ms: Annotated[int, Field(ge=0)]
    partitions: Annotated[int, Field(ge=0)]
    brokers: list[BrokerId]
    unreachable_brokers: list[BrokerId] = []
    requests: Annotated[int, Field(ge=0)] = 0
    error: str | None = None


Sample = PartitionSample | ReplicaSample | CycleSample
SAMPLE_MODELS: dict[str, type[PartitionSample] | type[ReplicaSample] | type[CycleSample]] = {
    PARTITION_SCHEMA: PartitionSample,
    REPLICA_SCHEMA: ReplicaSample,
    CYCLE_SCHEMA: CycleSample,
}


Record = TypeVar("Record", bound=_Record)


@functools.cache
def _fields(model: type[_Record]) -> tuple[tuple[str, ...], set[str]]:
    names = tuple(model.__pydantic_fields__)
    return names, set(names)


def trusted(model: type[Record], values: dict[str, Any]) -> Record:
    """A record of ``values`` without validating them, for the collectors' hot path: validating the samples a
    cycle has just built from decoded protocol fields would cost about as much CPU again as building them
    (docs/benchmarks.md, "Collector").

    The caller vouches for the values' types and ranges and gives every field, by name (``schema_``, not its
    alias), in the model's order: the order the JSON is written in, which the streaming job's fast parse expects.
    A missing, extra or misplaced field is an error. What ``model_construct`` does, minus its per-field loop over
    aliases and defaults. Tests validate what the builders make (``parse_sample(to_json(s)) == s``); the streaming
    job validates every record it reads, whoever wrote it, and quarantines what fails."""
    names, fields_set = _fields(model)
    if tuple(values) != names:
        raise ValueError(f"{model.__name__} needs the fields {', '.join(names)} in this order, "
                         f"not {', '.join(values)}")
    record = object.__new__(model)
    object.__setattr__(record, "__dict__", values)
    object.__setattr__(record, "__pydantic_fields_set__", fields_set)  # pydantic copies it before changing it
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


def kafka_uuid(value: uuid.UUID | str | bytes) -> str | None:
    """A topic id as Kafka writes it (``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding), as in
    partition.metadata and kafka-topics.sh; None for the zero id (no id). Both collectors report this form, so
    that the job can tell two incarnations of a topic apart and match the agent's replicas to the sampler's."""
    if isinstance(value, bytes):
        raw = value
    else:
        raw = (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes
    return None if raw == bytes(16) else base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def sample_key(cluster: str, topic: str, partition: int) -> bytes:
    """The samples topic key: all samples of one partition land in one Kafka partition, in order."""
    return f"{cluster}/{topic}/{partition}".encode()


def to_json(sample: Sample) -> bytes:
    return sample.model_dump_json(by_alias=True, exclude_none=False).encode()


def parse_sample(raw: bytes | str) -> Sample:
    """Validate one JSON record (used by tests and by tools; the Spark job validates with derived
    expressions instead, for speed)."""
    import json

    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("schema") not in SAMPLE_MODELS:
        raise ValueError(f"unknown schema {data.get('schema') if isinstance(data, dict) else None!r}")
    return SAMPLE_MODELS[data["schema"]].model_validate(data)
