"""The KRaft metadata log decoder and reader (collectors/logdir/metadata).

Pure tests build bytes the way Kafka does (kafka-python's v2 batch builder, Kafka's message encoding rules by hand)
and check the decoding, the framing, what is skipped and how the reader follows a log on disk. The cluster tests
decode the real metadata log of the local cluster and compare every record with what Kafka's own dump tool
(``kafka-dump-log.sh --cluster-metadata-decoder``: ``org.apache.kafka.tools.DumpLogSegments``) makes of it.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c, encode_varint

from collectors.logdir.metadata import (
    ApiMessageAndVersion,
    MessageDecodeError,
    MetadataLogReader,
    MetadataRecord,
    Skipped,
    Unsupported,
    list_snapshots,
    metadata_specs,
    read_metadata_value,
    read_snapshot,
)
from collectors.logdir.metadata.batches import read_batches
from collectors.logdir.metadata.log import seek_position
from collectors.logdir.metadata.messages import read_message, uuid_text
from collectors.logdir.metadata.serde import read_frame
from collectors.logdir.metadata.specs import (
    VENDORED_FROM,
    MessageSpec,
    MetadataSpecs,
    StructSpec,
    default_value,
    parse_message_spec,
    vendored_schema_files,
)
from replmon.testbed.kafka_view import KafkaView, PartitionView, wait_until
from replmon.testbed.localcluster import LocalCluster, artifacts
from tests.kafka_dump import dump_metadata_log as dump

SPECS = metadata_specs()
METADATA_DIR = "__cluster_metadata-0"
REQUIRED = ("TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord", "RegisterBrokerRecord",
            "UnregisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
            "ClearElrRecord", "FeatureLevelRecord", "NoOpRecord")
TOPIC_ID = bytes(range(16))
PARTITION_CHANGE = 5


# ---------------------------------------------------------------------------------------------- encoding helpers
def uvarint(value: int) -> bytes:
    """An unsigned varint (Kafka's ``writeUnsignedVarint``): kafka-python writes zigzag varints, so it is given the
    value whose zigzag encoding is ``value``."""
    out = bytearray()
    encode_varint((value >> 1) ^ -(value & 1), out.append)
    return bytes(out)


def compact_array(items: Iterable[bytes] | None) -> bytes:
    if items is None:
        return uvarint(0)
    items = list(items)
    return uvarint(len(items) + 1) + b"".join(items)


def compact_string(text: str | None) -> bytes:
    if text is None:
        return uvarint(0)
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def int32s(values: Iterable[int]) -> list[bytes]:
    return [struct.pack(">i", v) for v in values]


def tagged(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(tag) + uvarint(len(body)) + body for tag, body in fields)


def frame(api_key: int, version: int, message: bytes, frame_version: int = 1) -> bytes:
    """``MetadataRecordSerde``'s frame around a message."""
    return uvarint(frame_version) + uvarint(api_key) + uvarint(version) + message


def partition_change(isr: list[int] | None = None, leader: int | None = None, extra_tags: Iterable[
        tuple[int, bytes]] = (), version: int = 0) -> bytes:
    """A framed PartitionChangeRecord: PartitionId 7, TopicId, the given tagged fields."""
    tags = [*([] if isr is None else [(0, compact_array(int32s(isr)))]),
            *([] if leader is None else [(1, struct.pack(">i", leader))]), *extra_tags]
    return frame(PARTITION_CHANGE, version, struct.pack(">i", 7) + TOPIC_ID + tagged(*sorted(tags)))


def batch(base_offset: int, values: list[bytes], epoch: int = 3, timestamp: int = 1_700_000_000_000,
          compression: int = 0, control: bool = False, attributes: int | None = None) -> bytes:
    """A v2 record batch as Kafka's Raft layer writes one (no key, CREATE_TIME, the leader epoch set), built with
    kafka-python's builder; ``attributes`` overrides the attributes (the CRC is computed again)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta, value in enumerate(values):
        builder.append(delta, timestamp=timestamp + delta, key=b"\x00\x00\x00\x00" if control else None,
                       value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, epoch)
    if control or attributes is not None:
        attrs = attributes if attributes is not None else struct.unpack_from(">h", data, 21)[0] | 0x20
        struct.pack_into(">h", data, 21, attrs)
        struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    return bytes(data)


def noops(base_offset: int, count: int, epoch: int = 3) -> bytes:
    return batch(base_offset, [frame(20, 0, b"\x00")] * count, epoch=epoch)


def read_all(data: bytes, from_offset: int = 0) -> Any:
    return read_batches(lambda position, size: data[position:position + size], len(data), 0, SPECS, from_offset)


# ---------------------------------------------------------------------------------------------- schemas
def test_vendored_schemas_are_byte_identical_to_the_jar_of_the_local_cluster() -> None:
    artifact, version, folder = VENDORED_FROM
    assert version == artifacts.KAFKA_VERSION, "re-vendor the schemas from the Kafka the local cluster runs"
    jar = artifacts.kafka_libs() / f"{artifact}-{version}.jar"
    with zipfile.ZipFile(jar) as z:
        shipped = {Path(n).name: z.read(n) for n in z.namelist()
                   if n.startswith(folder) and n.endswith(".json") and "/" not in n[len(folder):]}
    vendored = vendored_schema_files()
    assert set(vendored) == set(shipped)
    for name, data in vendored.items():
        assert data == shipped[name], f"{name} differs from {jar.name}!{folder}{name}"


def test_every_vendored_schema_parses_and_the_needed_types_are_there() -> None:
    names = {spec.name: key for key, spec in SPECS.by_api_key.items()}
    assert set(REQUIRED) <= set(names)
    assert names["PartitionChangeRecord"] == PARTITION_CHANGE
    change = SPECS.by_api_key[PARTITION_CHANGE]
    assert str(change.valid_versions) == "0-2" and str(change.flexible_versions) == "0+"
    elr = next(f for f in change.struct.fields if f.name == "EligibleLeaderReplicas")
    assert (elr.json_name, elr.tag, str(elr.versions), str(elr.tagged_versions)) == (
        "eligibleLeaderReplicas", 6, "2+", "2+")


TEST_SCHEMA = """\
// Licensed to nobody: a schema of this test, in the format of Kafka's, with what the metadata schemas rarely use.
{
  "apiKey": 99,
  "type": "metadata",
  "name": "TestRecord",
  // Version 2 is flexible.
  "validVersions": "0-2",
  "flexibleVersions": "2+",
  "fields": [
    { "name": "Id", "type": "int32", "versions": "0+", "about": "Has // no comment in it." },
    { "name": "Name", "type": "string", "versions": "0+", "nullableVersions": "1+" }, /* a block comment */
    { "name": "Added", "type": "int64", "versions": "1+", "default": "0x10" },
    { "name": "Ratio", "type": "float64", "versions": "0+" },
    { "name": "Flag", "type": "bool", "versions": "0+", "default": "true" },
    { "name": "Port", "type": "uint16", "versions": "0+" },
    { "name": "Uid", "type": "uuid", "versions": "0+" },
    { "name": "Blob", "type": "bytes", "versions": "0+", "nullableVersions": "0+" },
    { "name": "Names", "type": "[]string", "versions": "0+" },
    { "name": "Items", "type": "[]Item", "versions": "0+", "fields": [
      { "name": "Key", "type": "string", "versions": "0+" },
      { "name": "Value", "type": "int16", "versions": "0+" },
      { "name": "Note", "type": "string", "versions": "2+", "nullableVersions": "2+", "default": "null",
        "taggedVersions": "2+", "tag": 0 }
    ]},
    { "name": "Shared", "type": "Common", "versions": "0+", "nullableVersions": "1+" },
    { "name": "Extra", "type": "[]int32", "versions": "2+", "nullableVersions": "2+", "default": "null",
      "taggedVersions": "2+", "tag": 0 }
  ],
  "commonStructs": [
    { "name": "Common", "versions": "0+", "fields": [
      { "name": "X", "type": "int8", "versions": "0+", "default": "-3" }
    ]}
  ]
}
"""
UID = bytes(range(100, 116))


def legacy_string(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text.encode()


def test_a_version_below_flexible_versions_uses_int16_strings_int32_arrays_and_no_tagged_fields() -> None:
    spec = parse_message_spec(TEST_SCHEMA)
    item = legacy_string("k") + struct.pack(">h", 5)
    v0 = (struct.pack(">i", 42) + legacy_string("x") + struct.pack(">d", 0.5) + b"\x01" + struct.pack(">H", 65535)
          + UID + struct.pack(">i", 2) + b"\xff\x00" + struct.pack(">i", 2) + legacy_string("a") + legacy_string("bc")
          + struct.pack(">i", 1) + item + struct.pack(">b", 9))
    assert read_message(spec, 0, v0) == {
        "id": 42, "name": "x", "added": 16, "ratio": 0.5, "flag": True, "port": 65535, "uid": uuid_text(UID),
        "blob": b"\xff\x00", "names": ["a", "bc"], "items": [{"key": "k", "value": 5, "note": None}],
        "shared": {"x": 9}, "extra": None}
    with pytest.raises(MessageDecodeError, match="non-nullable field Name"):
        read_message(spec, 0, v0[:4] + legacy_string(None) + v0[4 + 3:])
    v1 = (struct.pack(">i", 1) + legacy_string(None) + struct.pack(">q", -5) + struct.pack(">d", 0) + b"\x00"
          + struct.pack(">H", 1) + bytes(16) + struct.pack(">i", -1) + struct.pack(">i", 0) + struct.pack(">i", 0)
          + b"\xff")
    assert read_message(spec, 1, v1) == {
        "id": 1, "name": None, "added": -5, "ratio": 0.0, "flag": False, "port": 1, "uid": "AAAAAAAAAAAAAAAAAAAAAA",
        "blob": None, "names": [], "items": [], "shared": None, "extra": None}
    with pytest.raises(MessageDecodeError, match="left after TestRecord"):
        read_message(spec, 1, v1 + b"\x00")
    with pytest.raises(MessageDecodeError, match="wanted"):
        read_message(spec, 1, v1[:-2])


def test_a_flexible_version_uses_compact_lengths_and_tagged_fields_and_skips_unknown_tags() -> None:
    spec = parse_message_spec(TEST_SCHEMA)
    item = compact_string("k") + struct.pack(">h", 5) + tagged((0, compact_string("n")), (7, b"zzz"))
    v2 = (struct.pack(">i", 42) + compact_string(None) + struct.pack(">q", 1) + struct.pack(">d", 2.5) + b"\x01"
          + struct.pack(">H", 8) + UID + uvarint(0) + compact_array([compact_string("a")])
          + compact_array([item, compact_string("j") + struct.pack(">h", 6) + tagged()]) + b"\x01\x04" + tagged()
          + tagged((0, compact_array(int32s([1, 2]))), (3, b"unknown")))
    assert read_message(spec, 2, v2) == {
        "id": 42, "name": None, "added": 1, "ratio": 2.5, "flag": True, "port": 8, "uid": uuid_text(UID),
        "blob": None, "names": ["a"],
        "items": [{"key": "k", "value": 5, "note": "n"}, {"key": "j", "value": 6, "note": None}],
        "shared": {"x": 4}, "extra": [1, 2]}


def test_defaults_are_kafkas() -> None:
    spec = parse_message_spec(TEST_SCHEMA)

    def default(struct_spec: StructSpec, name: str) -> Any:
        return default_value(next(f for f in struct_spec.fields if f.name == name), spec, 0)

    assert [default(spec.struct, n) for n in ("Id", "Name", "Added", "Ratio", "Flag", "Uid", "Blob", "Names",
                                               "Shared", "Extra")] == [
        0, "", 16, 0.0, True, "AAAAAAAAAAAAAAAAAAAAAA", b"", [], {"x": -3}, None]
    change = SPECS.by_api_key[PARTITION_CHANGE]
    assert default(change.struct, "Leader") == -2 and default(change.struct, "LeaderRecoveryState") == -1


# ---------------------------------------------------------------------------------------------- framing
def test_the_frame_names_api_key_and_version_and_the_message_follows() -> None:
    value = partition_change(isr=[1, 3], leader=3)
    assert read_frame(value) == (PARTITION_CHANGE, 0, 3)
    decoded = read_metadata_value(value, SPECS)
    assert decoded == ApiMessageAndVersion(PARTITION_CHANGE, "PartitionChangeRecord", 0, {
        "partitionId": 7, "topicId": uuid_text(TOPIC_ID), "isr": [1, 3], "leader": 3, "replicas": None,
        "removingReplicas": None, "addingReplicas": None, "leaderRecoveryState": -1, "directories": None,
        "eligibleLeaderReplicas": None, "lastKnownElr": None})
    with pytest.raises(MessageDecodeError, match="frame version 0"):
        read_metadata_value(frame(PARTITION_CHANGE, 0, b"", frame_version=0), SPECS)
    with pytest.raises(MessageDecodeError, match="unknown frame version 2"):
        read_metadata_value(frame(PARTITION_CHANGE, 0, b"", frame_version=2), SPECS)
    with pytest.raises(MessageDecodeError, match="too large"):
        read_metadata_value(uvarint(1) + uvarint(0x8000), SPECS)
    with pytest.raises(MessageDecodeError, match="left after"):
        read_metadata_value(value + b"\x00", SPECS)


def test_tagged_fields_of_a_real_record_and_an_unknown_tag_skipped() -> None:
    value = partition_change(isr=[2], extra_tags=[(6, compact_array(int32s([1]))), (42, b"\x01\x02\x03")],
                             version=2)
    fields = read_metadata_value(value, SPECS)
    assert isinstance(fields, ApiMessageAndVersion)
    assert (fields.fields["isr"], fields.fields["leader"], fields.fields["eligibleLeaderReplicas"]) == ([2], -2, [1])
    # ELR is tag 6 from version 2 on: in version 1 Kafka refuses the tag
    with pytest.raises(MessageDecodeError, match="tag 6"):
        read_metadata_value(partition_change(extra_tags=[(6, compact_array(int32s([1])))], version=1), SPECS)


def test_a_null_compact_string() -> None:
    # RegisterBrokerRecord v0: a null Rack is a compact length 0
    endpoint = compact_string("PLAINTEXT") + compact_string("h") + struct.pack(">H", 9092) + struct.pack(">h", 0)
    message = (struct.pack(">i", 1) + UID + struct.pack(">q", 10) + compact_array([endpoint + tagged()])
               + compact_array([]) + compact_string(None) + b"\x00" + tagged())
    decoded = read_metadata_value(frame(0, 0, message), SPECS)
    assert isinstance(decoded, ApiMessageAndVersion)
    assert decoded.fields["rack"] is None and decoded.fields["fenced"] is False
    assert decoded.fields["endPoints"] == [{"name": "PLAINTEXT", "host": "h", "port": 9092, "securityProtocol": 0}]
    assert decoded.fields["logDirs"] == [] and decoded.fields["cordonedLogDirs"] is None  # not in version 0


def test_unknown_api_keys_and_versions_beyond_the_schema_are_skipped_and_counted() -> None:
    assert read_metadata_value(frame(200, 0, b"\x00"), SPECS) == Unsupported(200, "apiKey 200", 0)
    assert read_metadata_value(partition_change(version=3), SPECS) == Unsupported(
        PARTITION_CHANGE, "PartitionChangeRecord", 3)
    data = batch(10, [partition_change(isr=[1]), frame(200, 0, b"\x00"), partition_change(version=3),
                      frame(200, 1, b"\x00"), frame(200, 0, b"")])
    run = read_all(data)
    assert [r.offset for r in run.records] == [10] and not run.problems
    assert run.skipped == Counter({Skipped("apiKey 200", 0): 2, Skipped("PartitionChangeRecord", 3): 1,
                                   Skipped("apiKey 200", 1): 1})


# ---------------------------------------------------------------------------------------------- batches
def test_records_carry_offset_append_time_epoch_type_version_and_fields() -> None:
    data = batch(0, [frame(20, 0, b"\x00")], epoch=1) + batch(1, [partition_change(isr=[1, 2]),
                                                                  partition_change(leader=-1)], epoch=4,
                                                              timestamp=2_000)
    run = read_all(data)
    assert [(r.offset, r.append_time_ms, r.leader_epoch, r.type, r.version) for r in run.records] == [
        (0, 1_700_000_000_000, 1, "NoOpRecord", 0), (1, 2_000, 4, "PartitionChangeRecord", 0),
        (2, 2_001, 4, "PartitionChangeRecord", 0)]
    assert (run.position, run.next_offset, run.trailing_bytes) == (len(data), 3, 0)
    assert [r.offset for r in read_all(data, from_offset=2).records] == [2]


def test_control_batches_are_skipped_not_errors() -> None:
    data = batch(0, [b"\x00\x00\x00\x00"], control=True) + noops(1, 2)
    run = read_all(data)
    assert [r.offset for r in run.records] == [1, 2]
    assert run.control_records == 1 and not run.problems


def test_a_record_that_does_not_decode_is_a_problem_and_the_read_goes_on() -> None:
    run = read_all(batch(0, [b"\x01\x05\x00\x01", frame(20, 0, b"\x00")]))
    assert [r.offset for r in run.records] == [1]
    assert len(run.problems) == 1 and run.problems[0].startswith("offset 0: PartitionChangeRecord v0")


def test_a_compressed_batch_is_decompressed_or_refused_with_a_problem() -> None:
    gzip = batch(0, [partition_change(isr=[1])] * 3, compression=1)
    assert [r.offset for r in read_all(gzip).records] == [0, 1, 2]
    # snappy bits on uncompressed records: whether or not python-snappy is installed, the batch cannot be read
    snappy = batch(3, [partition_change(isr=[1])], attributes=2)
    run = read_all(gzip + snappy + noops(4, 1))
    assert [r.offset for r in run.records] == [0, 1, 2, 4]
    assert len(run.problems) == 1 and "offsets 3..3" in run.problems[0] and "cannot read its records" in \
        run.problems[0]


def test_a_torn_last_batch_ends_the_read_and_a_bad_crc_stops_it() -> None:
    data = noops(0, 2) + noops(2, 3)
    torn = read_all(data[:-7])
    assert [r.offset for r in torn.records] == [0, 1] and not torn.problems and not torn.corrupt
    assert (torn.position, torn.trailing_bytes) == (len(noops(0, 2)), len(noops(2, 3)) - 7)
    bad = bytearray(data)
    bad[-1] ^= 0xFF
    run = read_all(bytes(bad))
    assert [r.offset for r in run.records] == [0, 1] and run.corrupt
    assert run.problems == [f"batch at position {len(noops(0, 2))} (offsets 2..4): CRC mismatch"]


# ---------------------------------------------------------------------------------------------- the reader
def segment(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}.log"


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def offsets(records: Iterable[MetadataRecord]) -> list[int]:
    return [r.offset for r in records]


def test_the_reader_reads_only_what_was_appended_across_a_torn_write_and_a_segment_roll(tmp_path: Path) -> None:
    first = noops(0, 2) + noops(2, 2)
    append(segment(tmp_path, 0), first[:-5])  # a write in progress
    reader = MetadataLogReader(tmp_path)
    assert offsets(reader.poll().records) == [0, 1]
    assert offsets(reader.poll().records) == []
    append(segment(tmp_path, 0), first[-5:] + noops(4, 1))
    assert offsets(reader.poll().records) == [2, 3, 4]
    append(segment(tmp_path, 5), noops(5, 2))  # Kafka rolls: the old segment is complete
    read = reader.poll()
    assert offsets(read.records) == [5, 6] and (reader.segment, reader.next_offset) == (5, 7)
    assert read.gap is None and read.truncated_to is None and not read.problems
    segment(tmp_path, 0).unlink()  # retention deletes the old segment: nothing to notice
    append(segment(tmp_path, 5), noops(7, 1))
    assert offsets(reader.poll().records) == [7]


def test_the_reader_catches_up_over_several_polls_within_its_byte_budget(tmp_path: Path) -> None:
    for base in range(0, 30, 3):
        append(segment(tmp_path, 0), noops(base, 3))
    reader = MetadataLogReader(tmp_path, max_bytes=len(noops(0, 3)) * 4)
    polls = [reader.poll() for _ in range(4)]
    assert [offsets(p.records) for p in polls] == [list(range(0, 12)), list(range(12, 24)), list(range(24, 30)), []]
    assert [p.more for p in polls] == [True, True, False, False]


def test_segments_deleted_before_they_were_read_are_a_gap(tmp_path: Path) -> None:
    append(segment(tmp_path, 0), noops(0, 2))
    reader = MetadataLogReader(tmp_path)
    assert offsets(reader.poll().records) == [0, 1]
    append(segment(tmp_path, 0), noops(2, 2))
    append(segment(tmp_path, 4), noops(4, 2))
    append(segment(tmp_path, 6), noops(6, 2))
    segment(tmp_path, 0).unlink()
    segment(tmp_path, 4).unlink()
    read = reader.poll()
    assert offsets(read.records) == [6, 7] and read.gap == (2, 6)
    late = MetadataLogReader(tmp_path)  # from offset 0, on a log that starts at 6 (after a snapshot)
    read = late.poll()
    assert offsets(read.records) == [6, 7] and read.gap == (0, 6)


def test_a_truncated_log_is_read_again_from_where_it_still_agrees(tmp_path: Path) -> None:
    path = segment(tmp_path, 0)
    append(path, noops(0, 2) + noops(2, 2) + noops(4, 2, epoch=3))
    reader = MetadataLogReader(tmp_path)
    assert offsets(reader.poll().records) == list(range(6))
    os.truncate(path, len(noops(0, 2)))  # a follower truncates to the new leader's log...
    append(path, batch(2, [partition_change(isr=[1])] * 3, epoch=4))  # ...and appends the leader's records
    read = reader.poll()
    assert read.truncated_to == 2 and offsets(read.records) == [2, 3, 4]
    assert {r.type for r in read.records} == {"PartitionChangeRecord"} and reader.next_offset == 5
    os.truncate(path, 0)
    append(path, noops(0, 1, epoch=5))
    read = reader.poll()
    assert read.truncated_to == 0 and offsets(read.records) == [0]


def test_a_reader_started_at_an_offset_seeks_with_the_offset_index(tmp_path: Path) -> None:
    batches = [noops(base, 2) for base in range(0, 40, 2)]
    append(segment(tmp_path, 0), b"".join(batches))
    positions = [sum(map(len, batches[:i])) for i in range(len(batches))]
    index = b"".join(struct.pack(">ii", 2 * i + 1, positions[i]) for i in (4, 9, 14)) + bytes(8 * 100)
    (tmp_path / f"{0:020d}.index").write_bytes(index)
    reader = MetadataLogReader(tmp_path, start_offset=21)
    read = reader.poll()
    assert offsets(read.records) == list(range(21, 40)) and read.gap is None
    with open(segment(tmp_path, 0), "rb") as log, open(tmp_path / f"{0:020d}.index", "rb") as idx:
        data = log.read()

        def read_log(position: int, size: int) -> bytes:
            return data[position:position + size]

        assert seek_position(idx.fileno(), read_log, len(data), 0, 21) == positions[9]
        assert seek_position(idx.fileno(), read_log, len(data), 0, 5) == 0
        assert seek_position(idx.fileno(), read_log, len(data), 0, 100) == positions[14]


def test_snapshots_are_listed_by_their_file_names_and_read_whole(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000036-0000000001.checkpoint").write_bytes(
        batch(0, [b"\x00\x00\x00\x00"], control=True) + noops(1, 2) + b"\x00\x00")
    (tmp_path / "00000000000000000050-0000000002.checkpoint.part").write_bytes(b"")
    (tmp_path / "00000000000000000010-0000000001.checkpoint.deleted").write_bytes(b"")
    [snapshot] = list_snapshots(tmp_path)
    assert (snapshot.end_offset, snapshot.epoch) == (36, 1)
    read = read_snapshot(tmp_path / snapshot.file_name)
    assert offsets(read.records) == [1, 2] and read.control_records == 1 and read.snapshot == snapshot
    assert read.problems == ["2 bytes after the last complete batch: an incomplete snapshot"]


# ---------------------------------------------------------------------------------------------- the oracle


def enum_name(name: str) -> str:
    """Kafka's ``MetadataRecordType`` constant for a record type (``MessageGenerator.toSnakeCase``, upper case):
    the ``type`` the dump tool prints."""
    out, previous_upper = [], True
    for char in name:
        if char.isupper():
            if not previous_upper:
                out.append("_")
            previous_upper = True
        else:
            previous_upper = False
        out.append(char.upper())
    return "".join(out)


def as_kafka_json(spec: MessageSpec, version: int, fields: dict[str, Any], struct_spec: StructSpec | None = None
                  ) -> dict[str, Any]:
    """Our decoded fields as Kafka's generated JSON converter writes them: only the fields of this version, a
    tagged field only when it is not at its default, bytes in base64 (Jackson's BinaryNode)."""
    import base64

    out = {}
    for field in (struct_spec or spec.struct).fields:
        if version not in field.versions:
            continue
        value = fields[field.json_name]
        if version in field.tagged_versions and value == default_value(field, spec, version):
            continue
        if value is not None and field.type.is_struct_array:
            value = [as_kafka_json(spec, version, v, spec.struct_of(field)) for v in value]
        elif value is not None and field.type.is_struct:
            value = as_kafka_json(spec, version, value, spec.struct_of(field))
        elif isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        out[field.json_name] = value
    return out


def as_dumped(record: MetadataRecord, specs: MetadataSpecs = SPECS) -> dict[str, Any]:
    spec = specs.by_api_key[record.api_key]
    return {"time": record.append_time_ms, "epoch": record.leader_epoch, "type": enum_name(record.type),
            "version": record.version, "data": as_kafka_json(spec, record.version, record.fields)}


def test_enum_name_is_kafkas() -> None:
    assert enum_name("PartitionChangeRecord") == "PARTITION_CHANGE_RECORD"
    assert enum_name("ZkMigrationStateRecord") == "ZK_MIGRATION_STATE_RECORD"


def compare_with_dump(records: list[MetadataRecord], dumped: dict[int, dict[str, Any]]) -> Counter[str]:
    """Every record the dump decoded is ours, equal; ours has no record the dump has not, up to its last offset.
    Returns how many matched, per type."""
    ours = {r.offset: r for r in records}
    assert len(ours) == len(records), "a record read twice"
    last = max(dumped)
    missing = sorted(set(dumped) - set(ours))
    assert not missing, f"offsets Kafka decoded and we did not: {missing[:20]}"
    extra = sorted(o for o in ours if o <= last and o not in dumped)
    assert not extra, f"offsets we decoded and Kafka did not: {extra[:20]}"
    for offset, expected in dumped.items():
        assert as_dumped(ours[offset]) == expected, f"offset {offset}"
    return Counter(r.type for r in records if r.offset in dumped)


def catch_up(reader: MetadataLogReader) -> list[MetadataRecord]:
    """Poll until the reader has read everything complete on disk; nothing may be skipped or go wrong."""
    records: list[MetadataRecord] = []
    while True:
        read = reader.poll()
        assert not read.problems and not read.skipped and read.gap is None and read.truncated_to is None, read
        records.extend(read.records)
        if not read.more:
            return records


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def isr_history(records: Iterable[MetadataRecord], topic_id: str) -> list[set[int]]:
    """The ISRs the metadata log gave partition 0 of a topic, in order: its PartitionRecord's, then each
    PartitionChangeRecord's that changed it."""
    return [set(r.fields["isr"]) for r in records
            if r.type in ("PartitionRecord", "PartitionChangeRecord") and r.fields["topicId"] == topic_id
            and r.fields["partitionId"] == 0 and r.fields["isr"] is not None]


def topic_id_of(records: Iterable[MetadataRecord], topic: str) -> str:
    return next(r.fields["topicId"] for r in records if r.type == "TopicRecord" and r.fields["name"] == topic)


def test_the_controllers_metadata_log_decodes_as_kafka_decodes_it_through_isr_and_elr_changes(
        healthy_cluster: LocalCluster, kafka_view: KafkaView, producer_factory: Callable[..., Any],
        topic_name: str) -> None:
    cluster = healthy_cluster
    log_dir = cluster.node(0).data_dir / METADATA_DIR
    reader = MetadataLogReader(log_dir)
    records = catch_up(reader)
    kafka_view.create_topic(topic_name, replication_factor=3)
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(20)
    before = kafka_view.partition(topic_name)
    follower = next(b for b in before.replicas if b != before.leader)
    records += catch_up(reader)
    topic_id = topic_id_of(records, topic_name)

    def without_follower() -> PartitionView | None:
        p = kafka_view.partition(topic_name, via=before.leader)  # not via the paused broker: it would not answer
        return p if follower not in p.isr else None

    def full() -> PartitionView | None:
        p = kafka_view.partition(topic_name)
        return p if len(p.isr) == 3 else None

    cluster.pause(follower)
    try:
        shrunk = wait_until(without_follower, 60, f"broker {follower} out of the ISR of {topic_name}")
        producer.wait_acknowledged(20, timeout_s=60)  # writing goes on with the ISR shrunk
        records += catch_up(reader)
        assert set(shrunk.isr) in isr_history(records, topic_id)  # read while the follower is still out
    finally:
        cluster.resume(follower)
    expanded = wait_until(full, 90, f"broker {follower} back in the ISR of {topic_name}")
    producer.wait_acknowledged(20, timeout_s=60)

    # both followers out: the ISR falls below min.insync.replicas (2) and the controller keeps them as eligible
    # leader replicas (ELR, KIP-966), until they are back
    followers = [b for b in before.replicas if b != before.leader]

    def leader_alone_with_elr() -> PartitionView | None:
        p = kafka_view.partition(topic_name, via=before.leader)
        return p if p.isr == [before.leader] and p.elr else None

    def elr_empty() -> PartitionView | None:
        p = kafka_view.partition(topic_name)
        return p if len(p.isr) == 3 and not p.elr else None

    for b in followers:
        cluster.pause(b)
    try:
        alone = wait_until(leader_alone_with_elr, 60, f"the ISR of {topic_name} down to its leader, with an ELR")
        records += catch_up(reader)
    finally:
        for b in followers:
            cluster.resume(b)
    wait_until(elr_empty, 90, f"the ISR of {topic_name} full again and its ELR empty")
    producer.wait_acknowledged(20, timeout_s=60)
    removed = f"{topic_name}-removed"
    kafka_view.create_topic(removed, replication_factor=3)
    kafka_view.call(lambda admin: admin.delete_topics([removed], timeout_ms=15000))
    records += catch_up(reader)

    dumped = dump(segments(log_dir))
    records += catch_up(reader)  # what was appended while the dump ran
    matched = compare_with_dump(records, {o: r for per_file in dumped.values() for o, r in per_file.items()})
    assert matched["PartitionChangeRecord"] >= 2 and matched["TopicRecord"] >= 2, matched
    assert [r.fields["topicId"] for r in records if r.type == "RemoveTopicRecord"][-1] == topic_id_of(records, removed)
    print(f"controller log: {matched.total()} records equal to Kafka's decoding: {dict(matched)}")

    history = isr_history(records, topic_id)
    assert history[0] == set(before.replicas)
    shrink = history.index(set(shrunk.isr))
    assert set(shrunk.isr) == set(before.replicas) - {follower}
    assert set(expanded.isr) in history[shrink + 1:]
    alone_at = history.index({before.leader}, shrink + 1)
    assert set(expanded.isr) in history[alone_at + 1:]
    elrs = [set(r.fields["eligibleLeaderReplicas"]) for r in records
            if r.type == "PartitionChangeRecord" and r.fields["topicId"] == topic_id
            and r.fields["eligibleLeaderReplicas"] is not None]
    assert set(alone.elr) in elrs and set() in elrs[elrs.index(set(alone.elr)) + 1:]

    # a broker's copy of the log holds the same records at the same offsets
    broker = next(b for b in cluster.broker_ids if b != follower)
    copy = catch_up(MetadataLogReader(cluster.broker_log_dir(broker) / METADATA_DIR))
    ours = {r.offset: r for r in records}
    common = [r for r in copy if r.offset in ours]
    assert len(common) > len(copy) // 2 and all(r == ours[r.offset] for r in common)


@pytest.mark.cluster
def test_a_brokers_snapshots_and_rolled_segments_decode_as_kafka_decodes_them(tmp_path: Path) -> None:
    """A one-broker cluster whose broker snapshots its metadata often and rolls its metadata log every few seconds
    (the controller keeps Kafka's defaults: these are broker settings)."""
    cluster = LocalCluster.up(tmp_path / "cluster", brokers=1, die_with_parent=True, remember=False, overrides={
        "metadata.log.max.record.bytes.between.snapshots": "1000", "metadata.log.segment.ms": "3000"})
    view = KafkaView(cluster.bootstrap_servers)
    try:
        log_dir = cluster.broker_log_dir(1) / METADATA_DIR
        reader = MetadataLogReader(log_dir)
        records = catch_up(reader)
        topic = "snapshotted"
        view.create_topic(topic, replication_factor=1)

        def snapshot_after_topic_and_rolls() -> bool:
            records.extend(catch_up(reader))
            created = [r.offset for r in records if r.type == "TopicRecord" and r.fields["name"] == topic]
            return bool(created) and len(segments(log_dir)) >= 3 and any(
                s.end_offset > created[0] for s in list_snapshots(log_dir))

        wait_until(snapshot_after_topic_and_rolls, 120, "a snapshot holding the topic, and rolled segments")
        snapshot = log_dir / list_snapshots(log_dir)[-1].file_name
        files = segments(log_dir)
        dumped = dump([*files, snapshot])
        records += catch_up(reader)
        matched = compare_with_dump(records, {o: r for f in files for o, r in dumped[f].items()})
        assert matched["TopicRecord"] == 1 and matched["NoOpRecord"] > 0, matched
        print(f"{len(files)} broker log segments: {matched.total()} records equal to Kafka's decoding: {dict(matched)}")

        read = read_snapshot(snapshot)
        assert not read.problems and not read.skipped and read.control_records >= 2  # header and footer
        in_snapshot = compare_with_dump(read.records, dumped[snapshot])
        assert in_snapshot["TopicRecord"] >= 1 and in_snapshot["PartitionRecord"] >= 1, in_snapshot
        print(f"snapshot {snapshot.name}: {in_snapshot.total()} records equal to Kafka's decoding: {dict(in_snapshot)}")
        topic_id = topic_id_of(read.records, topic)
        assert [r.fields["isr"] for r in read.records
                if r.type == "PartitionRecord" and r.fields["topicId"] == topic_id] == [[1]]
    finally:
        view.close()
        cluster.down(purge=True)
