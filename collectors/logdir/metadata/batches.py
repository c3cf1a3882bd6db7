"""Metadata records out of the v2 record batches of a metadata log segment or snapshot, parsed from bytes (no file
I/O here: bytes come through a ``Read``, as in :mod:`collectors.logdir.records`).

The walk from batch to batch is :func:`collectors.logdir.records.read_batch_header`'s, with Kafka's
``FileLogInputStream`` rules: a batch whose declared length runs past the end of the file is a write in progress
and ends the read (the next read starts there again), so do zeros where a header should be; a header Kafka would
reject stops the read with a problem. Inside a complete batch kafka-python's ``DefaultRecordBatch`` checks the
CRC-32C, decompresses (gzip, lz4, zstd, snappy as far as their libraries are installed; Kafka writes metadata
batches uncompressed by default) and parses each ``DefaultRecord`` (varint length, attributes, timestamp delta,
offset delta, key, value, headers).

Control batches (attribute bit 5: ``LeaderChangeMessage``, ``SnapshotHeader``/``SnapshotFooter``,
``KRaftVersion``, ``Voters``) are Raft's own bookkeeping: skipped and counted. Every other record's value is an
``ApiMessageAndVersion`` (:mod:`.serde`). A record of a type or version without a schema here is skipped and
counted per (type, version); a record that does not decode, or a batch that cannot be read (a codec that is not
installed, a malformed record), is skipped with a problem; a batch whose CRC does not match, or a header Kafka
would reject, stops the read before it (the reader does not get past a corrupt batch, as Kafka's does not).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafka.record.default_records import DefaultRecordBatch

from collectors.logdir.metadata.messages import MessageDecodeError
from collectors.logdir.metadata.serde import ApiMessageAndVersion, read_metadata_value
from collectors.logdir.metadata.specs import MetadataSpecs
from collectors.logdir.records import MAGIC_V2, BatchHeader, Read, SegmentCorrupt, read_batch_header

MAX_PROBLEMS = 50
"""Problems kept per read; more are counted in the last one."""


@dataclass(frozen=True)
class MetadataRecord:
    """One metadata record as the log holds it."""

    offset: int
    """Its offset in the metadata log; in a snapshot, its offset inside the snapshot (Kafka numbers a snapshot's
    records from 0; the snapshot's own end offset and epoch are in its file name)."""
    append_time_ms: int
    """The batch's ``baseTimestamp`` + the record's ``timestampDelta``, the record's ``CREATE_TIME`` timestamp:
    Kafka's Raft ``BatchAccumulator`` gives every record of a batch the time the Raft leader (the active
    controller) started the batch, as the controller wrote its first record (delta 0); followers and brokers keep
    the leader's batch as it is. In a snapshot it is the time the node wrote the snapshot."""
    leader_epoch: int
    """The batch's ``partitionLeaderEpoch``: the Raft epoch of the controller that appended it."""
    api_key: int
    type: str
    """The schema's name: ``PartitionChangeRecord``."""
    version: int
    fields: dict[str, Any]
    """Every field of the schema by Kafka's JSON name (``partitionId``, ``isr``); see :mod:`.messages`."""


class Skipped(NamedTuple):
    """What a skipped record was: its type (``apiKey <n>`` when unknown) and version."""

    type: str
    version: int


class BatchMark(NamedTuple):
    """Where a batch was and what it held: enough to see later whether it is still there, unchanged."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    crc: int

    @property
    def end_position(self) -> int:
        return self.position + self.size


@dataclass
class BatchRun:
    """What one read of consecutive batches found."""

    start_position: int
    position: int
    """Right after the last batch read (where the next read starts)."""
    records: list[MetadataRecord] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)
    control_records: int = 0
    problems: list[str] = field(default_factory=list)
    marks: list[BatchMark] = field(default_factory=list)
    """Every batch read, in order."""
    next_offset: int | None = None
    """The offset after the last batch read; None when none was."""
    corrupt: bool = False
    """Stopped before a batch that cannot be read (see ``problems``); the next read stops there again."""
    full: bool = False
    """Stopped because ``max_bytes`` were read; more complete batches may follow."""
    trailing_bytes: int = 0
    """Bytes after the last complete batch when the read reached it: a write in progress (or zeros)."""

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
        elif len(self.problems) == MAX_PROBLEMS:
            self.problems.append("... more problems not listed")


def read_batches(read: Read, file_size: int, position: int, specs: MetadataSpecs, from_offset: int = 0,
                 max_bytes: int | None = None) -> BatchRun:
    """Decode the complete batches from ``position`` (a batch boundary) to the end of the written file, or until at
    least ``max_bytes`` were read; records below ``from_offset`` are passed over."""
    run = BatchRun(position, position)
    while True:
        if max_bytes is not None and run.position - run.start_position >= max_bytes:
            run.full = run.position < file_size
            return run
        try:
            header = read_batch_header(read, file_size, run.position)
        except SegmentCorrupt as exc:
            run.problem(str(exc))
            run.corrupt = True
            return run
        if header is None:
            run.trailing_bytes = file_size - run.position
            return run
        where = f"batch at position {header.position} (offsets {header.base_offset}..{header.last_offset})"
        if header.magic != MAGIC_V2:
            run.problem(f"{where}: magic {header.magic}, not a metadata log batch")
            run.corrupt = True
            return run
        batch = DefaultRecordBatch(read(header.position, header.size))
        if not batch.validate_crc():
            run.problem(f"{where}: CRC mismatch")
            run.corrupt = True
            return run
        if header.last_offset >= from_offset:
            if batch.is_control_batch:
                run.control_records += batch.records_count
            else:
                _read_records(batch, header, specs, from_offset, run, where)
        run.marks.append(BatchMark(header.position, header.size, header.base_offset, header.last_offset, header.crc))
        run.position = header.end_position
        run.next_offset = header.next_offset


def _read_records(batch: DefaultRecordBatch, header: BatchHeader, specs: MetadataSpecs, from_offset: int,
                  run: BatchRun, where: str) -> None:
    try:
        records = list(batch)
    except Exception as exc:  # kafka-python: CorruptRecordError, UnsupportedCodecError
        run.problem(f"{where}: cannot read its records: {exc}")
        return
    epoch = header.partition_leader_epoch if header.partition_leader_epoch is not None else -1
    for record in records:
        if record.offset < from_offset:
            continue
        if record.value is None:
            run.problem(f"offset {record.offset}: a record without value")
            continue
        try:
            decoded = read_metadata_value(record.value, specs)
        except MessageDecodeError as exc:
            run.problem(f"offset {record.offset}: {exc}")
            continue
        if isinstance(decoded, ApiMessageAndVersion):
            run.records.append(MetadataRecord(record.offset, record.timestamp, epoch, decoded.api_key,
                                              decoded.type, decoded.version, decoded.fields))
        else:
            run.skipped[Skipped(decoded.type, decoded.version)] += 1
