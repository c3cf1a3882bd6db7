"""Pure parsers of the log-dir agent, on bytes and text crafted here (no cluster)."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from collectors.logdir.checkpoints import (
    CheckpointError,
    node_id_from_meta_properties,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    parse_partition_metadata,
)
from collectors.logdir.layout import TopicPartition, parse_partition_dir, segment_base_offset
from collectors.logdir.records import (
    SegmentCorrupt,
    last_index_entry,
    parse_index_entry,
    walk_segment,
)
from replmon.contracts.samples import EpochEntry

# ------------------------------------------------------------------------------------------ batch helpers
_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), written out here so that the tests do not trust the code under test."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def batch(base_offset: int, records: int = 1, leader_epoch: int = 0, payload: bytes = b"x" * 10,
          corrupt_crc: bool = False) -> bytes:
    """A v2 record batch with Kafka's header layout (DefaultRecordBatch) and a correct CRC-32C; the records
    section is opaque filler (the agent reads headers only)."""
    body_after_crc = struct.pack(
        ">hiqqqhii",
        0,  # attributes
        records - 1,  # lastOffsetDelta
        1_700_000_000_000, 1_700_000_000_000,  # baseTimestamp, maxTimestamp
        -1, -1, -1,  # producerId, producerEpoch, baseSequence
        records,  # recordsCount
    ) + payload
    crc = crc32c(body_after_crc) ^ (1 if corrupt_crc else 0)
    after_length = struct.pack(">ibI", leader_epoch, 2, crc) + body_after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def read_of(data: bytes):  # type: ignore[no-untyped-def]
    return lambda position, size: data[position:position + size]


def walk(data: bytes, base_offset: int = 0, start: int = 0):  # type: ignore[no-untyped-def]
    return walk_segment(read_of(data), len(data), base_offset, start)


def test_crc32c_helper_matches_the_standard_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


# ------------------------------------------------------------------------------------------ segments
def test_leo_is_last_complete_batch_end_and_its_epoch() -> None:
    data = batch(100, records=3, leader_epoch=4) + batch(103, records=5, leader_epoch=7)
    tail = walk(data, base_offset=100)
    assert tail.log_end_offset == 108
    assert tail.last_batch is not None and tail.last_batch.partition_leader_epoch == 7
    assert tail.trailing_bytes == 0 and tail.valid_bytes == len(data)


@pytest.mark.parametrize("cut", [1, 11, 12, 20, 60, 61, 70])
def test_partial_last_batch_is_ignored(cut: int) -> None:
    last = batch(5, records=2, leader_epoch=2)
    data = batch(0, records=5, leader_epoch=1) + last[:cut]
    tail = walk(data)
    assert tail.log_end_offset == 5
    assert tail.last_batch is not None and tail.last_batch.partition_leader_epoch == 1
    assert tail.trailing_bytes == cut


def test_trailing_zeros_from_preallocation_are_ignored() -> None:
    data = batch(0, records=2) + batch(2, records=3, leader_epoch=9) + bytes(4096)
    tail = walk(data)
    assert tail.log_end_offset == 5
    assert tail.last_batch is not None and tail.last_batch.partition_leader_epoch == 9
    assert tail.trailing_bytes == 4096


def test_empty_segment_leo_is_its_base_offset() -> None:
    assert walk(b"", base_offset=1234).log_end_offset == 1234
    assert walk(bytes(100), base_offset=77).log_end_offset == 77
    only_partial = batch(500, records=4)[:40]
    tail = walk(only_partial, base_offset=500)
    assert tail.log_end_offset == 500 and tail.last_batch is None


def test_walk_from_an_index_position() -> None:
    first = batch(0, records=10)
    data = first + batch(10, records=1) + batch(11, records=4, leader_epoch=3)
    assert walk(data, start=len(first)).log_end_offset == 15


def test_batches_built_by_kafka_python_walk_the_same() -> None:
    """An independent builder (kafka-python's producer code); the broker sets base offset and leader epoch,
    which the CRC does not cover."""
    data = b""
    offset = 40
    for size, epoch in [(3, 1), (1, 1), (7, 2)]:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for i in range(size):
            builder.append(i, timestamp=None, key=None, value=b"v%d" % i, headers=[])
        raw = bytearray(builder.build())
        struct.pack_into(">q", raw, 0, offset)
        struct.pack_into(">i", raw, 12, epoch)
        data += bytes(raw)
        offset += size
    tail = walk(data, base_offset=40)
    assert tail.log_end_offset == 51
    assert tail.last_batch is not None and tail.last_batch.partition_leader_epoch == 2


def test_crc_mismatch_of_last_batch_is_corrupt() -> None:
    data = batch(0, records=2) + batch(2, records=2, corrupt_crc=True)
    with pytest.raises(SegmentCorrupt, match="CRC mismatch"):
        walk(data)


@pytest.mark.parametrize(("mangle", "reason"), [
    (lambda b: b[:16] + b"\x07" + b[17:], "unknown magic 7"),
    (lambda b: b[:8] + struct.pack(">i", 20) + b[12:], "below the minimum"),
])
def test_impossible_header_is_corrupt(mangle, reason) -> None:  # type: ignore[no-untyped-def]
    data = batch(0) + mangle(batch(1)) + batch(2)
    with pytest.raises(SegmentCorrupt, match=reason):
        walk(data)


def test_offsets_going_backwards_are_corrupt() -> None:
    with pytest.raises(SegmentCorrupt, match="below the previous batch's end 5"):
        walk(batch(0, records=5) + batch(3, records=1))
    with pytest.raises(SegmentCorrupt, match="below the segment's base offset 100"):
        walk(batch(50), base_offset=100)


def test_legacy_message_has_no_epoch() -> None:
    import binascii

    body = struct.pack(">bbqii", 1, 0, 1_700_000_000_000, -1, 3) + b"abc"  # magic 1: v1 message
    message = struct.pack(">I", binascii.crc32(body)) + body
    data = struct.pack(">qi", 9, len(message)) + message
    tail = walk(data, base_offset=9)
    assert tail.log_end_offset == 10
    assert tail.last_batch is not None and tail.last_batch.partition_leader_epoch is None


def test_last_index_entry_skips_preallocated_zeros() -> None:
    entries = [(3, 4100), (9, 8300), (20, 12500)] + [(0, 0)] * 1000
    index = b"".join(struct.pack(">ii", *e) for e in entries)

    def entry(i: int) -> tuple[int, int]:
        return parse_index_entry(index[i * 8:i * 8 + 8])

    assert last_index_entry(entry, len(entries)) == (20, 12500)
    assert last_index_entry(entry, 3) == (20, 12500)
    assert last_index_entry(lambda i: (0, 0), 1000) is None
    assert last_index_entry(entry, 0) is None


# ------------------------------------------------------------------------------------------ checkpoints
def test_offset_checkpoint() -> None:
    text = "0\n3\norders 0 1234\norders 1 0\nmy.topic_x-y 12 99\n"
    assert parse_offset_checkpoint(text) == {
        TopicPartition("orders", 0): 1234, TopicPartition("orders", 1): 0,
        TopicPartition("my.topic_x-y", 12): 99}
    assert parse_offset_checkpoint("") == {}
    assert parse_offset_checkpoint("0\n0\n") == {}


@pytest.mark.parametrize(("text", "reason"), [
    ("1\n0\n", "unsupported version 1"),
    ("x\n0\n", "version line: 'x' is not an integer"),
    ("0\n", "no entry count"),
    ("0\n2\na 0 1\n", "expected 2 entries, found 1"),
    ("0\n1\na 0 1\nb 0 2\n", "expected 1 entries, found 2"),
    ("0\n1\na 0\n", "line 3 'a 0': expected 'topic partition offset'"),
    ("0\n1\na 0 -5\n", "offset -5 out of range"),
    ("0\n1\na zero 5\n", "line 3"),
    ("0\n1\na 0 12", None),  # no final newline: fine
])
def test_corrupt_offset_checkpoint(text: str, reason: str | None) -> None:
    if reason is None:
        assert parse_offset_checkpoint(text) == {TopicPartition("a", 0): 12}
        return
    with pytest.raises(CheckpointError, match=reason.replace("(", r"\(")):
        parse_offset_checkpoint(text, "replication-offset-checkpoint")


def test_leader_epoch_checkpoint() -> None:
    assert parse_leader_epoch_checkpoint("0\n3\n0 0\n2 150\n5 151\n") == [
        EpochEntry(leader_epoch=0, start_offset=0), EpochEntry(leader_epoch=2, start_offset=150),
        EpochEntry(leader_epoch=5, start_offset=151)]
    assert parse_leader_epoch_checkpoint("0\n0\n") == []
    with pytest.raises(CheckpointError, match="line 3 '1 -3'"):
        parse_leader_epoch_checkpoint("0\n1\n1 -3\n")
    with pytest.raises(CheckpointError, match="expected 'epoch startOffset'"):
        parse_leader_epoch_checkpoint("0\n1\n1 3 4\n")
    with pytest.raises(CheckpointError, match="expected 2 entries, found 1"):
        parse_leader_epoch_checkpoint("0\n2\n1 3\n")  # a file cut short


def test_partition_metadata() -> None:
    text = "version: 0\ntopic_id: mTOJ9eNIQlK7J1Ix-ndbIw\n"
    assert parse_partition_metadata(text) == "mTOJ9eNIQlK7J1Ix-ndbIw"
    with pytest.raises(CheckpointError, match="unsupported version"):
        parse_partition_metadata("version: 3\ntopic_id: mTOJ9eNIQlK7J1Ix-ndbIw\n")
    with pytest.raises(CheckpointError, match="malformed topic_id"):
        parse_partition_metadata("version: 0\ntopic_id: short\n")
    with pytest.raises(CheckpointError, match="not 'key: value'"):
        parse_partition_metadata("garbage")


def test_meta_properties_node_id() -> None:
    text = "#\n#Thu Jan 01 00:00:00 UTC 2026\ncluster.id=abc\ndirectory.id=xyz\nnode.id=3\nversion=1\n"
    assert node_id_from_meta_properties(text) == 3
    with pytest.raises(CheckpointError, match=r"no node\.id"):
        node_id_from_meta_properties("version=1\n")


# ------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize(("name", "expected"), [
    ("orders-0", TopicPartition("orders", 0)),
    ("my.topic-with-dashes-12", TopicPartition("my.topic-with-dashes", 12)),
    ("__consumer_offsets-2", TopicPartition("__consumer_offsets", 2)),
    ("__cluster_metadata-0", None),
    ("orders-0.9f8e7d6c5b4a43210fedcba987654321-delete", None),
    ("orders-0.9f8e7d6c5b4a43210fedcba987654321-future", None),
    ("orders-0.9f8e7d6c5b4a43210fedcba987654321-stray", None),
    ("orders-01", None),
    ("orders", None),
    ("lost+found", None),
])
def test_partition_dir_names(name: str, expected: TopicPartition | None) -> None:
    assert parse_partition_dir(name) == expected


def test_segment_file_names() -> None:
    assert segment_base_offset("00000000000000001234.log") == 1234
    for other in ("00000000000000001234.index", "00000000000000001234.log.deleted",
                  "00000000000000001234.log.swap", "leader-epoch-checkpoint", "1234.log"):
        assert segment_base_offset(other) is None
