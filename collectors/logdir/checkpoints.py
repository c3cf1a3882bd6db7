"""Parsers of Kafka's small text files in a log dir, from their text (no file I/O here).

Offset checkpoints (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``) and ``leader-epoch-checkpoint`` share Kafka's ``CheckpointFile`` layout::

    0                <- version
    2                <- number of entries
    orders 0 1234    <- entries: "topic partition offset" (offset checkpoints) or "epoch startOffset"
    orders 1 987

An empty file holds no entries (Kafka reads it so too). Anything else that does not fit raises
:class:`CheckpointError` with the line at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from collectors.logdir.layout import TopicPartition
from replmon.contracts.samples import MAX_OFFSET, EpochEntry

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
MAX_ENTRIES = 10_000_000

E = TypeVar("E")


class CheckpointError(ValueError):
    """A checkpoint or metadata file whose content Kafka would not accept either."""


def _checkpoint_entries(text: str, what: str, parse_entry: Callable[[list[str]], E]) -> list[E]:
    lines = text.splitlines()
    if not lines:
        return []
    version = _int(lines[0], f"{what}: version line")
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"{what}: unsupported version {version} (expected {CHECKPOINT_VERSION})")
    if len(lines) < 2:
        raise CheckpointError(f"{what}: no entry count line after the version")
    count = _int(lines[1], f"{what}: entry count")
    if not 0 <= count <= MAX_ENTRIES:
        raise CheckpointError(f"{what}: entry count {count} out of range")
    body = lines[2:]
    while body and not body[-1].strip():
        body.pop()
    if len(body) != count:
        raise CheckpointError(f"{what}: expected {count} entries, found {len(body)}")
    entries = []
    for number, line in enumerate(body, start=3):
        try:
            entries.append(parse_entry(line.split()))
        except (ValueError, ValidationError) as exc:
            reason = exc.errors(include_input=False)[0]["msg"] if isinstance(exc, ValidationError) else exc
            raise CheckpointError(f"{what}: line {number} {line!r}: {reason}") from None
    return entries


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise CheckpointError(f"{what}: {text.strip()[:40]!r} is not an integer") from None


def _offset(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_OFFSET:
        raise ValueError(f"offset {value} out of range")
    return value


def parse_offset_checkpoint(text: str, what: str = "offset checkpoint") -> dict[TopicPartition, int]:
    """``topic partition offset`` entries, as a mapping."""

    def entry(parts: list[str]) -> tuple[TopicPartition, int]:
        if len(parts) != 3:
            raise ValueError(f"expected 'topic partition offset', got {len(parts)} fields")
        partition = int(parts[1])
        if not 0 <= partition <= 2**31 - 1:
            raise ValueError(f"partition {partition} out of range")
        return TopicPartition(parts[0], partition), _offset(parts[2])

    return dict(_checkpoint_entries(text, what, entry))


def parse_leader_epoch_checkpoint(text: str, what: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
    """The lineage ``epoch -> start offset``, in file order (Kafka writes it in increasing epochs)."""

    def entry(parts: list[str]) -> EpochEntry:
        if len(parts) != 2:
            raise ValueError(f"expected 'epoch startOffset', got {len(parts)} fields")
        return EpochEntry(leader_epoch=int(parts[0]), start_offset=int(parts[1]))

    return _checkpoint_entries(text, what, entry)


def parse_partition_metadata(text: str, what: str = "partition.metadata") -> str:
    """The topic id (Kafka's base64 Uuid) from ``version: 0`` / ``topic_id: <id>``."""
    fields = {}
    for line in text.splitlines():
        if line.strip():
            key, sep, value = line.partition(":")
            if not sep:
                raise CheckpointError(f"{what}: line {line.strip()[:60]!r} is not 'key: value'")
            fields[key.strip()] = value.strip()
    version = fields.get("version")
    if version is None:
        raise CheckpointError(f"{what}: no version")
    if _int(version, f"{what}: version") != PARTITION_METADATA_VERSION:
        raise CheckpointError(f"{what}: unsupported version {version}")
    topic_id = fields.get("topic_id")
    if not topic_id or len(topic_id) != 22:
        raise CheckpointError(f"{what}: missing or malformed topic_id {topic_id!r}")
    return topic_id


def parse_properties(text: str) -> dict[str, str]:
    """Java properties as Kafka writes them (``key=value``, ``#`` comments); enough for meta.properties."""
    props = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


def node_id_from_meta_properties(text: str, what: str = "meta.properties") -> int:
    """``node.id`` (KRaft; ``broker.id`` in ZooKeeper-era v0 files)."""
    props = parse_properties(text)
    value = props.get("node.id", props.get("broker.id"))
    if value is None:
        raise CheckpointError(f"{what}: no node.id")
    node_id = _int(value, f"{what}: node.id")
    if not 0 <= node_id <= 2**31 - 1:
        raise CheckpointError(f"{what}: node.id {node_id} out of range")
    return node_id
