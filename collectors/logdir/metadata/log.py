"""Reading ``__cluster_metadata-0`` from disk, read-only: its segments incrementally, its snapshots whole.

The KRaft metadata log is a Raft log in the node's metadata log dir: segments ``<base offset>.log`` (with
``.index``) that roll like any Kafka log's, and snapshots ``<end offset>-<epoch>.checkpoint`` (written as
``.checkpoint.part`` and renamed when complete). Once a snapshot covers them, old segments are deleted (renamed
``.log.deleted``, then removed); a follower far behind may have its whole log replaced, starting again at a
snapshot's end offset.

:class:`MetadataLogReader` remembers the segment, position and next offset it has read up to, so each
:meth:`~MetadataLogReader.poll` reads only what was appended since; each file is opened, read and closed within
the call. A torn last batch (a write in progress) ends a poll and is read whole by a later one. It follows a roll
into the next segment; when the segment holding its next offset is gone it goes on at the first segment there is
and reports the offsets it can no longer read as a ``gap`` (read the latest snapshot to make up for them). A log
that shrank beneath it, or whose last read batch changed (a follower truncates its log to the leader's), is
reported as ``truncated_to``: the records from that offset on are read again, as they are now.

The log holds what was appended, not only what is committed: on a controller that is a follower, or a broker, the
last records may not be committed yet, and can be truncated as above.
"""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from collectors.logdir import layout
from collectors.logdir.files import MIN_BATCH_SIZE, WindowReader
from collectors.logdir.metadata.batches import BatchMark, BatchRun, MetadataRecord, Skipped, read_batches
from collectors.logdir.metadata.specs import MetadataSpecs, metadata_specs
from collectors.logdir.records import (
    INDEX_ENTRY_SIZE,
    Read,
    SegmentCorrupt,
    crc_matches,
    parse_index_entry,
    read_batch_header,
)

SNAPSHOT_SUFFIX = ".checkpoint"
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
"""Bytes of batches one poll reads at most (at least one batch): a long log is caught up over several polls."""
RECENT_BATCHES = 64
"""Batches of the current segment remembered to find where a truncated log still agrees with what was read."""
_SNAPSHOT_FILE = re.compile(r"^(?P<offset>[0-9]{20})-(?P<epoch>[0-9]{10})\.checkpoint$")


@dataclass
class LogRead:
    """What one poll read."""

    records: list[MetadataRecord] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)
    """Records of a type or version without a schema here, by (type, version)."""
    control_records: int = 0
    problems: list[str] = field(default_factory=list)
    gap: tuple[int, int] | None = None
    """Offsets [from, to) that were not read because the log no longer has them (segments deleted)."""
    truncated_to: int | None = None
    """The log was truncated beneath the reader: records from this offset on, returned by earlier polls, are no
    longer in the log (those in ``records`` are the ones there now)."""
    more: bool = False
    """The poll stopped at its byte budget: poll again for the rest."""

    def add(self, run: BatchRun, segment: str) -> None:
        self.records.extend(run.records)
        self.skipped.update(run.skipped)
        self.control_records += run.control_records
        self.problems.extend(f"segment {segment}: {p}" for p in run.problems)


class MetadataLogReader:
    """Reads the metadata log in ``partition_dir`` (a ``__cluster_metadata-0`` directory) from ``start_offset``
    on, a little more each :meth:`poll`."""

    def __init__(self, partition_dir: Path, start_offset: int = 0, specs: MetadataSpecs | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.partition_dir = Path(partition_dir)
        self.specs = specs if specs is not None else metadata_specs()
        self.max_bytes = max_bytes
        self.next_offset = start_offset
        """The offset of the next record to read."""
        self.segment: int | None = None
        """The base offset of the segment being read."""
        self.position = 0
        """Where in it the next read starts (a batch boundary)."""
        self._recent: deque[BatchMark] = deque(maxlen=RECENT_BATCHES)

    def poll(self) -> LogRead:
        """Everything complete appended since the last poll (up to ``max_bytes``)."""
        result = LogRead()
        budget = self.max_bytes
        for _attempt in range(1000):  # segments, and a re-listing when one vanishes under the read
            bases = self._segment_bases(result)
            if not bases:
                return result
            if self.segment not in bases:
                self._enter(bases, result)
            assert self.segment is not None
            name = f"{self.segment:020d}{layout.LOG_FILE_SUFFIX}"
            try:
                run = self._read_segment(self.partition_dir / name, budget, result)
            except FileNotFoundError:
                self.segment = None  # deleted since the listing: look again
                continue
            result.add(run, name)
            budget -= run.position - run.start_position
            if run.corrupt:
                return result
            if run.full:
                result.more = True
                return result
            later = [b for b in bases if b > self.segment]
            if not later:
                return result
            if budget <= 0:
                result.more = True
                return result
            if run.trailing_bytes:
                result.problems.append(f"segment {name}: {run.trailing_bytes} bytes after its last complete batch, "
                                       "and a newer segment follows")
            self._move_to(later[0], result)
        return result

    def _segment_bases(self, result: LogRead) -> list[int]:
        try:
            names = os.listdir(self.partition_dir)
        except OSError as exc:
            result.problems.append(f"cannot list {self.partition_dir}: {exc.strerror or exc}")
            return []
        bases = sorted(b for b in map(layout.segment_base_offset, names) if b is not None)
        if not bases:
            result.problems.append(f"no segment (.log file) in {self.partition_dir}")
        return bases

    def _enter(self, bases: list[int], result: LogRead) -> None:
        """Start reading the segment that holds ``next_offset``, at the batch that holds it; when the log no
        longer has it, at the first segment (a gap)."""
        holding = [b for b in bases if b <= self.next_offset]
        if holding:
            self.segment = holding[-1]
            self.position = self._seek(self.segment, self.next_offset)
        else:
            self._move_to(bases[0], result)
        self._recent.clear()

    def _move_to(self, base: int, result: LogRead) -> None:
        if base > self.next_offset:
            start = self.next_offset if result.gap is None else result.gap[0]
            result.gap = (start, base)
            self.next_offset = base
        self.segment = base
        self.position = 0
        self._recent.clear()

    def _seek(self, base: int, offset: int) -> int:
        """Where to start reading ``offset`` in segment ``base``: the position of its offset index's last entry
        at or below ``offset`` when a valid batch starts there, else 0."""
        try:
            with open(self.partition_dir / f"{base:020d}{layout.LOG_FILE_SUFFIX}", "rb") as log:
                log_fd = log.fileno()
                reader = WindowReader(log_fd)
                with open(self.partition_dir / layout.index_file_name(base), "rb") as index:
                    return seek_position(index.fileno(), reader.read, os.fstat(log_fd).st_size, base, offset)
        except OSError:
            return 0

    def _read_segment(self, path: Path, budget: int, result: LogRead) -> BatchRun:
        with open(path, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            reader = WindowReader(fd)
            self._check_unchanged(reader.read, size, result)
            run = read_batches(reader.read, size, self.position, self.specs, self.next_offset, max(budget, 1))
        self._recent.extend(run.marks)
        self.position = run.position
        if run.next_offset is not None:
            self.next_offset = max(self.next_offset, run.next_offset)
        return run

    def _check_unchanged(self, read: Read, size: int, result: LogRead) -> None:
        """When the batches last read are no longer there as they were (the segment was truncated, or replaced),
        go back to the newest one that still is, else to the segment's start."""
        if not self._recent and size >= self.position:
            return
        if self._recent and _still_there(read, size, self._recent[-1]):
            return
        while self._recent and not _still_there(read, size, self._recent[-1]):
            self._recent.pop()
        assert self.segment is not None
        if self._recent:
            self.position = self._recent[-1].end_position
            resume = self._recent[-1].last_offset + 1
        else:
            self.position, resume = 0, self.segment
        if resume < self.next_offset:
            self.next_offset = resume
            result.truncated_to = resume if result.truncated_to is None else min(result.truncated_to, resume)


def _still_there(read: Read, size: int, mark: BatchMark) -> bool:
    try:
        header = read_batch_header(read, size, mark.position)
    except SegmentCorrupt:
        return False
    return header is not None and (header.base_offset, header.size, header.crc) == (
        mark.base_offset, mark.size, mark.crc)


def seek_position(index_fd: int, read: Read, log_size: int, base: int, offset: int) -> int:
    """The position of the last written offset index entry whose offset is at most ``offset``, when a complete
    batch with a matching CRC starts there and does not start past ``offset``; else 0. Kafka's index entries
    (relative offset, position) grow in both and name a batch by its last offset; the first batch (position 0)
    never gets one, and unwritten entries of a preallocated index are zeros."""
    entries = min(os.fstat(index_fd).st_size // INDEX_ENTRY_SIZE, log_size // MIN_BATCH_SIZE + 1)

    def entry(slot: int) -> tuple[int, int]:
        raw = os.pread(index_fd, INDEX_ENTRY_SIZE, slot * INDEX_ENTRY_SIZE)
        return parse_index_entry(raw) if len(raw) == INDEX_ENTRY_SIZE else (0, 0)

    low, high = 0, entries  # entries [0, low) are written and at most `offset`, [high, entries) are not
    while low < high:
        middle = (low + high) // 2
        relative, position = entry(middle)
        if position > 0 and base + relative <= offset:
            low = middle + 1
        else:
            high = middle
    if low == 0:
        return 0
    position = entry(low - 1)[1]
    try:
        header = read_batch_header(read, log_size, position)
    except SegmentCorrupt:
        return 0
    if header is None or header.base_offset > offset or not crc_matches(read, header):
        return 0
    return position


@dataclass(frozen=True, order=True)
class SnapshotId:
    """A snapshot of the metadata log: it holds the state up to (not including) ``end_offset``, written at
    ``epoch``."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> SnapshotId | None:
    """The snapshot a file name is (Kafka's ``Snapshots.parse``); None for anything else (``.checkpoint.part``,
    ``.checkpoint.deleted``, segments)."""
    match = _SNAPSHOT_FILE.match(name)
    return SnapshotId(int(match["offset"]), int(match["epoch"])) if match else None


def list_snapshots(partition_dir: Path) -> list[SnapshotId]:
    """The complete snapshots in ``partition_dir``, oldest first."""
    found = (parse_snapshot_name(name) for name in os.listdir(partition_dir))
    return sorted(s for s in found if s is not None)


@dataclass
class SnapshotRead:
    snapshot: SnapshotId | None
    records: list[MetadataRecord] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)
    control_records: int = 0
    problems: list[str] = field(default_factory=list)


def read_snapshot(path: Path, specs: MetadataSpecs | None = None) -> SnapshotRead:
    """Every record of a snapshot file (Kafka renames it into place complete: bytes after its last complete
    batch are a problem, not a write in progress)."""
    specs = specs if specs is not None else metadata_specs()
    with open(path, "rb") as f:
        fd = f.fileno()
        reader = WindowReader(fd)
        run = read_batches(reader.read, os.fstat(fd).st_size, 0, specs)
    result = SnapshotRead(parse_snapshot_name(Path(path).name), run.records, run.skipped, run.control_records,
                          list(run.problems))
    if run.trailing_bytes:
        result.problems.append(f"{run.trailing_bytes} bytes after the last complete batch: an incomplete snapshot")
    return result
