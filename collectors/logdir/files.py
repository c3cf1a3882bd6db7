"""Reading a partition directory from disk, read-only.

Every file is opened, read and closed within one call: nothing stays open between cycles, nothing is locked
or written. Small files (checkpoints, partition.metadata, meta.properties) are read whole in one read, so a
file Kafka replaces by renaming a ``.tmp`` over it is seen either old or new, never half; a read that still
does not parse is tried once more before it counts as corrupt. Of the active segment only the tail is read:
from the position of the last offset index entry (checked to start a valid batch) to the end of the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeVar

from collectors.logdir import layout
from collectors.logdir.checkpoints import (
    CheckpointError,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
)
from collectors.logdir.records import (
    INDEX_ENTRY_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    SegmentCorrupt,
    SegmentTail,
    crc_matches,
    last_index_entry_slot,
    parse_index_entry,
    read_batch_header,
    walk_segment,
)
from replmon.contracts.samples import EpochEntry

T = TypeVar("T")
READ_WINDOW = 64 * 1024
MIN_BATCH_SIZE = LOG_OVERHEAD + min(MIN_BATCH_LENGTH.values())


def read_small_file(path: Path) -> str | None:
    """The whole file as text in one open/read/close; None when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path.name}: not UTF-8 text (byte {exc.start})") from None


def read_parsed(path: Path, parse: Callable[[str], T]) -> T | None:
    """``parse`` of the file's text, None when it does not exist. A parse failure is retried once: the file
    may have been replaced between two reads of a racing writer (Kafka renames a complete .tmp over it)."""
    try:
        text = read_small_file(path)
        return None if text is None else parse(text)
    except CheckpointError:
        text = read_small_file(path)
        return None if text is None else parse(text)


class WindowReader:
    """``read(position, size)`` over an open file descriptor, served from a window of ``READ_WINDOW`` bytes
    so that walking many small batch headers costs few system calls."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._start = 0
        self._data = b""

    def read(self, position: int, size: int) -> bytes:
        end = position + size
        if not (self._start <= position and end <= self._start + len(self._data)):
            self._data = os.pread(self._fd, max(size, READ_WINDOW), position)
            self._start = position
        return self._data[position - self._start:end - self._start]


class VerifiedBatches:
    """Batches whose CRC matched, by identity (file, position, base offset, length, CRC field): a batch that
    is still the last one next cycle is not checked again. CRC-32C runs in pure Python unless the ``crc32c``
    package is installed (kafka-python then uses it), so this matters for idle partitions. Bounded: cleared
    when it grows past ``max_entries``."""

    def __init__(self, max_entries: int = 500_000) -> None:
        self.max_entries = max_entries
        self._seen: set[tuple[str, int, int, int, int]] = set()
        self.checked = 0

    def check(self, path: Path, read: Callable[[int, int], bytes], batch: BatchHeader) -> bool:
        key = (str(path), batch.position, batch.base_offset, batch.batch_length, batch.crc)
        if key in self._seen:
            return True
        self.checked += 1
        if not crc_matches(read, batch):
            return False
        if len(self._seen) >= self.max_entries:
            self._seen.clear()
        self._seen.add(key)
        return True


def index_start_position(index_path: Path, read: Callable[[int, int], bytes], log_size: int,
                         crc_check: Callable[[BatchHeader], bool]) -> int:
    """Where to start walking the segment: the last offset index entry's position when a complete batch with
    a matching CRC starts there, else 0 (no index, no entry yet, or an index that disagrees with the log)."""
    return index_start(index_path, read, log_size, crc_check).position


STALE_INDEX_PROBES = 64
"""Index entries tried, newest first, for one that points at a valid batch."""


class IndexStart(NamedTuple):
    position: int
    """Where to start walking the segment: a batch boundary."""
    problem: str | None
    """What is wrong with the index's last entry, None when it points at a valid batch (or there is none)."""
    last_entry_position: int | None
    """The position the index's last written entry names."""


def index_start(index_path: Path, read: Callable[[int, int], bytes], log_size: int,
                crc_check: Callable[[BatchHeader], bool]) -> IndexStart:
    """:func:`index_start_position`, and what is wrong when the index's last entry does not point at a complete,
    valid batch of the log (None when it does, or has no entry). Kafka appends an index entry only after the batch
    it points at; a disagreement means the segment was truncated or rewritten beneath its index, or the index is
    stale: Kafka truncates an index by moving its end in memory, leaving the old entries' bytes in the file until
    new ones overwrite them. The walk then starts at the newest entry (of the last ``STALE_INDEX_PROBES``) that does
    point at a valid batch, else at the segment's start."""
    try:
        with open(index_path, "rb") as f:
            fd = f.fileno()
            # at most one entry per batch: a bound far below the preallocated size for a young segment
            entries = min(os.fstat(fd).st_size // INDEX_ENTRY_SIZE, log_size // MIN_BATCH_SIZE + 1)
            if entries * INDEX_ENTRY_SIZE <= READ_WINDOW:
                index = os.pread(fd, entries * INDEX_ENTRY_SIZE, 0)
                entries = len(index) // INDEX_ENTRY_SIZE

                def read_entry(i: int) -> tuple[int, int]:
                    return parse_index_entry(index[i * INDEX_ENTRY_SIZE:(i + 1) * INDEX_ENTRY_SIZE])
            else:

                def read_entry(i: int) -> tuple[int, int]:
                    raw = os.pread(fd, INDEX_ENTRY_SIZE, i * INDEX_ENTRY_SIZE)
                    return parse_index_entry(raw) if len(raw) == INDEX_ENTRY_SIZE else (0, 0)

            last = last_index_entry_slot(read_entry, entries)
            if last is None:
                return IndexStart(0, None, None)
            named = read_entry(last)[1]
            problem = _entry_problem(named, read, log_size, crc_check)
            if problem is None:
                return IndexStart(named, None, named)
            for slot in range(last - 1, max(-1, last - 1 - STALE_INDEX_PROBES), -1):
                position = read_entry(slot)[1]
                if _entry_problem(position, read, log_size, crc_check) is None:
                    return IndexStart(position, problem, named)
    except OSError:
        return IndexStart(0, None, None)
    return IndexStart(0, problem, named)


def _entry_problem(position: int, read: Callable[[int, int], bytes], log_size: int,
                   crc_check: Callable[[BatchHeader], bool]) -> str | None:
    """Why an index entry at ``position`` is not a place to start walking the log, or None."""
    if not 0 < position < log_size:
        return f"offset index entry at position {position}, beyond the segment's {log_size} bytes"
    try:
        batch = read_batch_header(read, log_size, position)
    except SegmentCorrupt as exc:
        return f"offset index entry at position {position}: {exc}"
    if batch is None or not crc_check(batch):
        return f"offset index entry at position {position}: no complete valid batch there"
    return None


def stale_index(start: IndexStart, tail: SegmentTail) -> bool:
    """Whether an index that disagrees with its segment is merely stale, the tail walked past it exact: Kafka
    truncates an index (after a log truncation or recovery) by moving its end in memory and leaves the old entries
    in the file until new ones overwrite them, so they name positions beyond the log or inside its new batches.
    Not stale: a segment with no complete batch (zeroed), or whose last entry names the start of the incomplete
    batch the walk ended on (Kafka indexes a batch only once it is written whole: the segment was cut)."""
    if tail.last_batch is None:
        return False
    return not (tail.trailing_bytes > 0 and start.last_entry_position == tail.valid_bytes)


def read_segment_tail(log_path: Path, base_offset: int, verified: VerifiedBatches | None = None) -> SegmentTail:
    return read_segment_tail_checked(log_path, base_offset, verified)[0]


def read_segment_tail_checked(log_path: Path, base_offset: int, verified: VerifiedBatches | None = None
                              ) -> tuple[SegmentTail, str | None]:
    """The segment's tail, and what is wrong beneath its offset index (see :func:`index_start`): None when the
    index is merely stale (:func:`stale_index`) and the tail walked past it exact. A disagreement is looked at
    twice: a reader racing Kafka's own truncation or a compaction swap may see the index and the log of two
    different moments."""
    verified = verified if verified is not None else VerifiedBatches()
    index_path = log_path.with_name(layout.index_file_name(base_offset))
    with open(log_path, "rb") as f:
        fd = f.fileno()
        for _attempt in range(2):
            size = os.fstat(fd).st_size
            reader = WindowReader(fd)  # a fresh window: the second look must not see the first one's bytes
            crc_check = partial(verified.check, log_path, reader.read)
            start = index_start(index_path, reader.read, size, crc_check)
            if start.problem is None:
                break
        try:
            tail = walk_segment(reader.read, size, base_offset, start.position, crc_check)
        except SegmentCorrupt as exc:
            raise SegmentCorrupt(f"segment {log_path.name}: {exc}") from None
    problem = start.problem
    if problem is not None and stale_index(start, tail):
        problem = None
    return tail, None if problem is None else f"segment {log_path.name}: {problem}"


@dataclass
class ReplicaFiles:
    """What one partition directory holds, as read this cycle. ``errors`` says what could not be read."""

    topic_id: str | None = None
    epoch_lineage: list[EpochEntry] = field(default_factory=list)
    tail: SegmentTail | None = None
    first_segment_base_offset: int | None = None
    size_bytes: int = 0
    errors: list[str] = field(default_factory=list)


def read_replica_dir(path: Path, verified: VerifiedBatches | None = None) -> ReplicaFiles:
    """Read one replica's directory; a file that cannot be read or parsed adds to ``errors``, the others are
    still read. A segment deleted under our feet (retention, roll) makes one more attempt."""
    try:
        return _read_replica_dir(path, verified)
    except FileNotFoundError:
        return _read_replica_dir(path, verified)


def _read_replica_dir(path: Path, verified: VerifiedBatches | None) -> ReplicaFiles:
    files = ReplicaFiles()
    bases = []
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                files.size_bytes += entry.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue
            base = layout.segment_base_offset(entry.name)
            if base is not None:
                bases.append(base)
    try:
        files.topic_id = read_parsed(path / layout.PARTITION_METADATA, parse_partition_metadata)
    except (CheckpointError, OSError) as exc:
        files.errors.append(_describe(exc, layout.PARTITION_METADATA))
    try:
        lineage = read_parsed(path / layout.LEADER_EPOCH_CHECKPOINT, parse_leader_epoch_checkpoint)
        files.epoch_lineage = lineage or []
        if lineage is None and bases:
            # Kafka creates it with the log and replaces it only by renaming: missing means deleted
            files.errors.append(f"no {layout.LEADER_EPOCH_CHECKPOINT} (deleted?)")
    except (CheckpointError, OSError) as exc:
        files.errors.append(_describe(exc, layout.LEADER_EPOCH_CHECKPOINT))
    if not bases:
        files.errors.append("no log segment (.log file) in the partition directory")
        return files
    files.first_segment_base_offset = min(bases)
    active = max(bases)
    try:
        files.tail, problem = read_segment_tail_checked(path / f"{active:020d}{layout.LOG_FILE_SUFFIX}", active,
                                                        verified)
        if problem is not None:
            files.errors.append(problem)
    except SegmentCorrupt as exc:
        files.errors.append(str(exc))
    except FileNotFoundError:
        raise
    except OSError as exc:
        files.errors.append(_describe(exc, f"{active:020d}{layout.LOG_FILE_SUFFIX}"))
    return files


def _describe(exc: Exception, name: str) -> str:
    if isinstance(exc, OSError):
        return f"cannot read {name}: {exc.strerror or exc}"
    return str(exc)
