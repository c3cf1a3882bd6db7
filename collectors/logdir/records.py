"""Record batches in a segment file, parsed from bytes (no file I/O here: bytes come through a ``Read``).

Kafka's v2 batch (``DefaultRecordBatch``), big-endian; ``batchLength`` counts the bytes after itself::

    0  baseOffset int64          21 attributes int16        43 producerId int64
    8  batchLength int32         23 lastOffsetDelta int32   51 producerEpoch int16
    12 partitionLeaderEpoch int32  27 baseTimestamp int64   53 baseSequence int32
    16 magic int8                35 maxTimestamp int64      57 recordsCount int32
    17 crc uint32 (CRC-32C of attributes..end)              61 records

Legacy message sets (magic 0 and 1, before Kafka 0.11) share the first 12 bytes (offset, size) and the magic
byte at 16; their offset field is the last offset of the entry and they carry no leader epoch.

The log end offset (LEO) of a segment is the last complete batch's ``baseOffset + lastOffsetDelta + 1``.
As in Kafka's ``FileLogInputStream``, a batch whose declared length runs past the end of the file is an
incomplete write and ends the walk, as do zeros where a header should be (preallocated files). A header Kafka
would reject (unknown magic, length below the minimum, offsets going backwards) or a last batch whose CRC does
not match raises :class:`SegmentCorrupt`.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Callable
from dataclasses import dataclass

from kafka.record.util import calc_crc32c

Read = Callable[[int, int], bytes]
"""``read(position, size)``: up to ``size`` bytes of the file from ``position`` (fewer at its end)."""

LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes in front of what ``batchLength`` counts."""
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
MAGIC_V2 = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LEGACY_MAGIC_OFFSET = 16
MIN_BATCH_LENGTH = {0: 14, 1: 22, 2: RECORD_BATCH_OVERHEAD - LOG_OVERHEAD}
"""Smallest ``batchLength`` per magic: LegacyRecord.RECORD_OVERHEAD_V0/V1, DefaultRecordBatch overhead."""
NO_PARTITION_LEADER_EPOCH = -1

_LOG_OVERHEAD = struct.Struct(">qi")
_V2_FIELDS = struct.Struct(">iBIhi")  # partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
_INDEX_ENTRY = struct.Struct(">ii")
INDEX_ENTRY_SIZE = _INDEX_ENTRY.size


class SegmentCorrupt(ValueError):
    """A segment Kafka's own reader would reject at this place."""


@dataclass(frozen=True)
class BatchHeader:
    position: int
    base_offset: int
    batch_length: int
    magic: int
    crc: int
    last_offset: int
    partition_leader_epoch: int | None
    """None for legacy message sets (no epoch)."""

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def end_position(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True)
class SegmentTail:
    """What the walk found: the segment's LEO and the batch it comes from."""

    log_end_offset: int
    last_batch: BatchHeader | None
    """None when the segment holds no complete batch (LEO = its base offset)."""
    valid_bytes: int
    """Position right after the last complete batch."""
    trailing_bytes: int
    """Bytes after it that were ignored: an incomplete last batch or preallocated zeros."""


def parse_batch_header(header: bytes, position: int) -> BatchHeader | None:
    """The header at ``position`` from the bytes read there (at least ``RECORD_BATCH_OVERHEAD`` of them when
    the file has them). None when the bytes end the log: too few for a header, or all zeros."""
    if len(header) < HEADER_SIZE_UP_TO_MAGIC:
        return None
    base_offset, batch_length = _LOG_OVERHEAD.unpack_from(header)
    if base_offset == 0 and batch_length == 0:
        return None  # preallocated space: no batch was ever written here
    magic = header[LEGACY_MAGIC_OFFSET]
    where = f"at position {position}"
    if magic not in MIN_BATCH_LENGTH:
        raise SegmentCorrupt(f"batch {where}: unknown magic {magic}")
    if batch_length < MIN_BATCH_LENGTH[magic]:
        raise SegmentCorrupt(f"batch {where}: length {batch_length} below the minimum "
                             f"{MIN_BATCH_LENGTH[magic]} of magic {magic}")
    if base_offset < 0:
        raise SegmentCorrupt(f"batch {where}: negative base offset {base_offset}")
    if magic < MAGIC_V2:
        (crc,) = struct.unpack_from(">I", header, LOG_OVERHEAD)
        return BatchHeader(position, base_offset, batch_length, magic, crc, base_offset, None)
    if len(header) < RECORD_BATCH_OVERHEAD:
        return None  # a v2 header cut short: an incomplete write
    epoch, _, crc, _, last_offset_delta = _V2_FIELDS.unpack_from(header, LOG_OVERHEAD)
    if last_offset_delta < 0:
        raise SegmentCorrupt(f"batch {where}: negative lastOffsetDelta {last_offset_delta}")
    last_offset = base_offset + last_offset_delta
    return BatchHeader(position, base_offset, batch_length, magic, crc, last_offset, epoch)


def read_batch_header(read: Read, file_size: int, position: int) -> BatchHeader | None:
    """The complete batch starting at ``position``, or None when none starts there (end of the written
    log)."""
    if file_size - position < LOG_OVERHEAD:
        return None
    header = parse_batch_header(read(position, RECORD_BATCH_OVERHEAD), position)
    if header is None or header.end_position > file_size:
        return None
    return header


def crc_matches(read: Read, batch: BatchHeader) -> bool:
    """CRC-32C of attributes..end (v2), CRC-32 of magic..end (legacy), as Kafka checks them."""
    data = read(batch.position, batch.size)
    if len(data) < batch.size:
        return False
    if batch.magic >= MAGIC_V2:
        return calc_crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) == batch.crc
    return binascii.crc32(memoryview(data)[LEGACY_MAGIC_OFFSET:]) & 0xFFFFFFFF == batch.crc


def walk_segment(read: Read, file_size: int, base_offset: int, start_position: int = 0,
                 crc_check: Callable[[BatchHeader], bool] | None = None) -> SegmentTail:
    """Walk batch headers from ``start_position`` (a batch boundary: 0 or an offset index entry's position)
    to the end of the written log; the LEO is the last complete batch's last offset + 1, else ``base_offset``.
    The last batch's CRC is checked with ``crc_check`` (default: :func:`crc_matches` on ``read``)."""
    position = start_position
    last: BatchHeader | None = None
    expected_from = base_offset
    while True:
        batch = read_batch_header(read, file_size, position)
        if batch is None:
            break
        if batch.base_offset < expected_from:
            raise SegmentCorrupt(
                f"batch at position {position}: base offset {batch.base_offset} below "
                + ("the segment's base offset" if last is None else "the previous batch's end")
                + f" {expected_from}")
        last = batch
        expected_from = batch.next_offset
        position = batch.end_position
    if last is None:
        return SegmentTail(base_offset, None, position, file_size - position)
    if not (crc_check(last) if crc_check is not None else crc_matches(read, last)):
        raise SegmentCorrupt(f"last batch (offsets {last.base_offset}..{last.last_offset} at position "
                             f"{last.position}): CRC mismatch")
    return SegmentTail(last.next_offset, last, position, file_size - position)


def parse_index_entry(entry: bytes) -> tuple[int, int]:
    """An offset index entry: (relative offset, physical position)."""
    relative_offset, position = _INDEX_ENTRY.unpack(entry)
    return relative_offset, position


def last_index_entry(read_entry: Callable[[int], tuple[int, int]], entries: int) -> tuple[int, int] | None:
    """The last written entry of an offset index of ``entries`` slots (the active segment's index is
    preallocated with zeros)."""
    slot = last_index_entry_slot(read_entry, entries)
    return None if slot is None else read_entry(slot)


def last_index_entry_slot(read_entry: Callable[[int], tuple[int, int]], entries: int) -> int | None:
    """The slot of :func:`last_index_entry`. Positions grow strictly and the first batch at position 0 never gets
    an entry, so written entries are the leading ones with a position > 0: binary search for the last of them."""
    low, high = 0, entries  # entries [0, low) are written, [high, entries) are not
    while low < high:
        middle = (low + high) // 2
        if read_entry(middle)[1] > 0:
            low = middle + 1
        else:
            high = middle
    return low - 1 if low > 0 else None
