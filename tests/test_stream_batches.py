"""``partition_batch/v1`` records: written from the pydantic model, read back as the samples they hold, checked entry
by entry with the model's own checks (the bad entries quarantined alone, with the JSON path's reasons), split by
state bucket exactly as Spark hashes a JSON record's key; and in Spark, the processor's input with batches and
JSON records mixed on one topic."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

import streaming.batches as batches
from replmon.contracts.batches import (
    ARROW_SCHEMA,
    BATCH_SCHEMA,
    COMPRESSED,
    MAX_STREAM_BYTES,
    StreamTooLarge,
    declared_size,
    decode_batch,
    encode_batch,
    entries,
    is_batch,
    read_stream,
    write_stream,
)
from replmon.contracts.samples import (
    MAX_LINEAGE,
    MAX_REPLICAS,
    EpochEntry,
    PartitionSample,
    ReplicaError,
    ReplicaOffsets,
    to_json,
)
from streaming.batches import (
    BATCH,
    HEARD,
    MALFORMED_BATCH,
    OVERSIZED_BATCH,
    QUARANTINED,
    KeyHashes,
    bucket_of,
    buckets_of,
    entry_reasons,
    read_batch,
    split_batch,
    split_records,
)
from streaming.parse import judge, processor_input
from streaming.schema import QUARANTINE_VALUE_MAX_CHARS
from tests.damaged_batches import inflated, items_overstated, offsets_backwards

KAFKA_RECORD = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                           StructField("partition", IntegerType()), StructField("offset", LongType())])


def sample(partition: int, topic: str = "orders", **fields: Any) -> PartitionSample:
    values: dict[str, Any] = dict(
        cluster="prod", collector_id="c", cycle=7, sample_time_ms=1_700_000_000_000, topic=topic,
        topic_id="AAAAAAAAAAAAAAAAAAAAAA", partition=partition, leader=1, leader_epoch=3, replicas=[1, 2, 3],
        isr=[1, 2], elr=[3], last_known_elr=[], high_watermark=100, log_start_offset=4,
        replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=110), ReplicaOffsets(broker_id=2,
                         log_end_offset=104), ReplicaOffsets(broker_id=3, error=ReplicaError.UNREACHABLE,
                                                             error_detail="timed out")],
        epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0), EpochEntry(leader_epoch=3, start_offset=90)]
        if partition % 2 else None, min_insync_replicas=2 if partition % 3 else None,
        unclean_leader_election=False if partition % 3 else None)
    values.update(fields)
    return PartitionSample(**values)


def as_dict(s: PartitionSample) -> dict[str, Any]:
    written: dict[str, Any] = json.loads(to_json(s))
    del written["schema"]
    return written


def invalid(**fields: Any) -> PartitionSample:
    """A sample the model refuses (built without validation, as a faulty or hostile writer would)."""
    values = sample(0).__dict__ | fields
    return PartitionSample.model_construct(**values)


def test_a_batch_holds_the_samples_the_model_defines() -> None:
    written = [sample(p) for p in range(7)]
    value = encode_batch(written)
    assert is_batch(value) and not is_batch(to_json(written[0]))
    table = read_batch(value)
    assert table.schema.metadata[b"schema"] == BATCH_SCHEMA.encode()
    assert table.schema.names == [n for n in json.loads(to_json(written[0])) if n != "schema"]
    assert entries(table) == [as_dict(s) for s in written]
    assert entries(table, [5, 2]) == [as_dict(written[5]), as_dict(written[2])]
    assert entry_reasons(table) == [None] * 7


def test_a_bad_entry_is_quarantined_alone_with_the_reason_the_json_path_gives() -> None:
    bad = [invalid(partition=-1), invalid(cluster=""), invalid(leader=None),
           invalid(replica_offsets=[ReplicaOffsets.model_construct(broker_id=-5, log_end_offset=1)]),
           invalid(isr=[1, -2]), invalid(topic="t" * 250), invalid(high_watermark=-3),
           invalid(replicas=list(range(1, MAX_REPLICAS + 2))), invalid(topic_id="A" * 65),
           invalid(epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0)] * (MAX_LINEAGE + 1))]
    good = [sample(p) for p in range(5)]
    table = read_batch(encode_batch([good[0], *bad, *good[1:]]))
    assert entry_reasons(table) == [None, "out_of_range:partition", "bad_length:cluster", "missing_field:leader",
                                    "out_of_range:replica_offsets[].broker_id", "out_of_range:isr[]",
                                    "bad_length:topic", "out_of_range:high_watermark", "bad_length:replicas",
                                    "bad_length:topic_id", "bad_length:epoch_lineage", None, None, None, None]
    shares, quarantined = split_batch(encode_batch([good[0], *bad, *good[1:]]), list(range(4)))
    assert [reason for reason, _, _ in quarantined] == entry_reasons(table)[1:11]
    # the entry as the quarantine keeps it, a JSON record, gets the same reason from the models
    assert [judge(entry.encode()).reason for _, entry, _ in quarantined] == entry_reasons(table)[1:11]
    assert [chars for _, _, chars in quarantined] == [len(entry) for _, entry, _ in quarantined]  # none cut
    widest = sample(0, replicas=list(range(1, MAX_REPLICAS + 1)))  # a replica set at the bound is read
    assert entry_reasons(read_batch(encode_batch([widest]))) == [None]
    assert json.loads(quarantined[0][1])["partition"] == -1 and json.loads(quarantined[0][1])["schema"] == \
        "partition/v1"
    kept = [e for share in shares.values() for e in entries(share)]
    assert sorted(kept, key=lambda e: e["partition"]) == [as_dict(s) for s in good]


def test_a_bad_entry_s_long_list_is_written_for_the_quarantine_as_far_as_it_keeps_it() -> None:
    """A bad entry of a batch record may hold a list of millions of items (a lineage in LZ4 frames, a few kB);
    its JSON is written with as many items as the quarantine keeps characters, and the text the quarantine keeps
    (its first QUARANTINE_VALUE_MAX_CHARS characters) is the whole JSON's."""
    long = invalid(epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0)] * 200_000)
    value = encode_batch([sample(1), long])
    shares, quarantined = split_batch(value, [0])
    ((reason, written, chars),) = quarantined
    whole = to_json(long).decode()
    assert reason == "bad_length:epoch_lineage" and len(whole) > len(written) > QUARANTINE_VALUE_MAX_CHARS
    assert chars == len(whole)  # the whole JSON's length, its list counted whole
    assert written[:QUARANTINE_VALUE_MAX_CHARS] == whole[:QUARANTINE_VALUE_MAX_CHARS]
    assert json.loads(written)["epoch_lineage"] == [{"leader_epoch": 0, "start_offset": 0}] * QUARANTINE_VALUE_MAX_CHARS
    assert [e["partition"] for e in entries(shares[0])] == [1]


def test_a_record_that_is_not_a_batch_of_this_schema_is_quarantined_whole() -> None:
    value = encode_batch([sample(p) for p in range(3)])
    table = read_batch(value)
    meta = ARROW_SCHEMA.metadata
    cases = {
        MALFORMED_BATCH: value[: len(value) // 2],  # truncated
        "unknown_schema": write_stream(table.replace_schema_metadata({b"schema": b"partition_batch/v9"})),
        "missing_field:leader": write_stream(table.drop_columns(["leader"]).replace_schema_metadata(meta)),
        "wrong_type:leader": write_stream(table.set_column(table.schema.get_field_index("leader"), "leader",
                                                  pa.array(["1", "1", "1"])).replace_schema_metadata(
                                                      ARROW_SCHEMA.metadata)),
        "unknown_field:rack": write_stream(table.append_column("rack", pa.array(["a", "b", "c"]))
                                           .replace_schema_metadata(meta)),
    }
    for reason, bad in cases.items():
        assert split_batch(bad, [0, 1]) == ({}, [(reason, "", 0)]), reason
    shares, quarantined = split_records([value, cases[MALFORMED_BATCH], value], [4, 9])
    assert quarantined == [(1, MALFORMED_BATCH, "", 0)]  # the record's index among those split
    assert {bucket: [e["partition"] for e in entries(read_batch(share))] for bucket, share in shares.items()} == {
        bucket: [p for p in (0, 1, 2, 0, 1, 2) if [4, 9][buckets_of(table, 2)[p]] == bucket] for bucket in shares}


def test_a_batch_of_a_collector_older_than_a_field_reads_it_null_and_is_valid() -> None:
    """A collector of the version before the reassignments in flight writes no such columns (its schema is this
    one without them): the job reads its batches, those fields null ("not told") in every entry; a batch without
    any other field is still quarantined."""
    from streaming.batches import ADDED_FIELDS

    written = [sample(p, adding_replicas=[4], removing_replicas=[3]) for p in range(3)]
    table = read_batch(encode_batch(written))
    older = table.drop_columns(list(ADDED_FIELDS)).replace_schema_metadata(ARROW_SCHEMA.metadata)
    read = read_batch(write_stream(older))
    assert read.schema == ARROW_SCHEMA
    assert entries(read) == [as_dict(s) | {"adding_replicas": None, "removing_replicas": None} for s in written]
    assert entry_reasons(read) == [None] * 3
    assert split_batch(write_stream(older.drop_columns(["isr"])), [0, 1]) == ({}, [("missing_field:isr", "", 0)])


def test_a_damaged_record_that_arrow_s_reader_takes_is_quarantined_whole() -> None:
    """Arrow's IPC reader trusts the lengths and offsets a record declares. Unless validated, a record whose
    string offsets run backwards crashes the Python worker (a segmentation fault: the task, then the micro-batch,
    on every retry), and one that declares more list items than its buffers hold fails the task; each is
    quarantined whole and the records beside it go on. Read as the tools read a batch (``decode_batch``), it
    raises rather than abort the process."""
    value = encode_batch([sample(p) for p in range(300)])
    backwards, overstated = offsets_backwards(value), items_overstated(value, 900)  # 3 replicas an entry
    for damaged in (backwards, overstated):
        pa.ipc.open_stream(damaged).read_all()  # Arrow's reader takes it as it is
        assert split_batch(damaged, [0, 1]) == ({}, [(MALFORMED_BATCH, "", 0)])
        with pytest.raises(pa.ArrowInvalid):  # the tools' reading of a batch (the ground truth's, in the tests)
            decode_batch(damaged)
    shares, quarantined = split_records([value, backwards, overstated, value], [0])
    assert [(index, reason) for index, reason, _, _ in quarantined] == [(1, MALFORMED_BATCH), (2, MALFORMED_BATCH)]
    assert read_batch(shares[0]).num_rows == 600


def test_a_task_s_records_checked_together_give_each_record_s_own_outcome() -> None:
    """split_records checks the entries of all its records at once: each record's entries are kept or quarantined
    (with that record's index) as that record checked alone gives them, in the records' order; a record whose
    writer marked its fields non-nullable goes with the rest."""
    good = encode_batch([sample(p) for p in range(4)])
    mixed = encode_batch([sample(10), invalid(partition=-1), sample(11), invalid(isr=[1, -2])])
    strict_table = read_batch(encode_batch([sample(p, topic="payments") for p in range(3)]))
    strict = write_stream(strict_table.cast(pa.schema(
        [f.with_nullable(f.name not in ("cluster", "topic", "partition")) for f in strict_table.schema],
        metadata=ARROW_SCHEMA.metadata)))
    assert not read_stream(strict).schema.field("cluster").nullable
    also_bad = encode_batch([invalid(cluster=""), sample(20, topic="audit")])
    values = [good, mixed, good[: len(good) // 2], strict, also_bad, encode_batch([invalid(leader=None)])]
    ids = [3, 7, 8]
    shares, quarantined = split_records(values, ids)

    alone = [split_batch(value, ids) for value in values]
    assert quarantined == [(index, *each) for index, (_, bad) in enumerate(alone) for each in bad]
    assert [(i, reason) for i, reason, _, _ in quarantined] == [
        (1, "out_of_range:partition"), (1, "out_of_range:isr[]"), (2, MALFORMED_BATCH), (4, "bad_length:cluster"),
        (5, "missing_field:leader")]
    expected: dict[int, list[dict[str, Any]]] = {}
    for kept, _ in alone:
        for bucket, table in kept.items():
            expected.setdefault(bucket, []).extend(entries(table))
    assert {bucket: entries(read_batch(share)) for bucket, share in shares.items()} == expected
    assert sum(map(len, expected.values())) == 4 + 2 + 3 + 1


def test_a_bucket_s_share_travels_lz4_compressed_and_reads_back_whole() -> None:
    """A share crosses the JVM (the read stage's output, the shuffle and its sort, the state stage's input) as
    LZ4 frames of Arrow's IPC format: a fraction of the entries' size, read back by any Arrow reader as they were."""
    values = [encode_batch([sample(p, topic=f"t{t}") for p in range(500)]) for t in range(4)]
    shares, quarantined = split_records(values, [0])
    assert not quarantined and list(shares) == [0]
    share = read_batch(shares[0])
    assert len(shares[0]) * 3 < len(write_stream(share))
    assert entries(share) == [entry for value in values for entry in entries(read_batch(value))]


def test_a_batch_record_travels_lz4_compressed_and_records_written_uncompressed_are_read_beside_it() -> None:
    """A collector writes its batch records' buffers as LZ4 frames; collectors of the version before wrote them
    uncompressed, and a samples topic holding both (an upgrade) is read whole."""
    written = [sample(p, topic=f"t{p % 4}") for p in range(400)]
    compressed = encode_batch(written)
    table = read_batch(compressed)
    uncompressed = write_stream(table)  # as the version before wrote it
    assert len(compressed) * 3 < len(uncompressed)
    assert entries(table) == entries(read_batch(uncompressed)) == [as_dict(s) for s in written]
    shares, quarantined = split_records([uncompressed, compressed], [5])
    assert not quarantined and entries(read_batch(shares[5])) == [as_dict(s) for s in written] * 2


def test_an_oversized_batch_is_quarantined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches, "MAX_BATCH_ENTRIES", 10)
    assert split_batch(encode_batch([sample(p) for p in range(11)]), [0]) == ({}, [(OVERSIZED_BATCH, "", 0)])
    shares, quarantined = split_batch(encode_batch([sample(p) for p in range(10)]), [0])
    assert list(shares) == [0] and shares[0].num_rows == 10 and quarantined == []


def declared_by_arrow(value: bytes) -> tuple[int, int]:
    """The rows and the bytes of buffers Arrow's reader gives for ``value``, decompressed."""
    table = pa.ipc.open_stream(value).read_all()
    return table.num_rows, sum(buffer.size for batch in table.to_batches() for column in batch.columns
                               for buffer in column.buffers() if buffer is not None)


def test_a_stream_s_declared_size_is_what_arrow_s_reader_decompresses() -> None:
    """The size read from a stream's metadata without decompressing it (``declared_size``), against Arrow's reader
    as the oracle: compressed or not (LZ4, zstd), with nulls, lists, structs, a dictionary and several record
    batches."""
    value = encode_batch([sample(p, topic=f"t{p % 7}" * (p % 5 + 1)) for p in range(500)])
    table = read_batch(value)
    extra = pa.table({"n": pa.array([1, None, 3] * 100), "d": pa.array(["x", "yy", "x"] * 100).dictionary_encode(),
                      "l": pa.array([[1, 2], None, []] * 100, pa.list_(pa.int64()))})
    several = pa.concat_tables([table.slice(0, 100), table.slice(100, 300), table.slice(400)])
    for written in (table, extra, several):
        for options in (None, COMPRESSED, pa.ipc.IpcWriteOptions(compression="zstd")):
            stream = write_stream(written, options)
            assert declared_size(stream) == declared_by_arrow(stream)
    assert declared_size(value) == (500, declared_by_arrow(value)[1])


def test_a_record_that_would_decompress_past_the_bound_is_quarantined_without_being_decompressed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An LZ4 frame expands up to ~255 times: a 0.8 MB record holding 200 MB would make a read task allocate them
    before any check. Its declared size refuses it (``oversized_batch``) before Arrow's reader opens it; a record
    declaring more entries than a batch holds likewise. The records beside it go on."""
    value = encode_batch([sample(p) for p in range(3)])
    bomb = inflated(value, 200 * 2**20)
    assert len(bomb) < 2**20 and declared_size(bomb)[1] > 200 * 2**20 > MAX_STREAM_BYTES
    monkeypatch.setattr(batches, "MAX_BATCH_ENTRIES", 2)
    with monkeypatch.context() as m:
        m.setattr(pa.ipc, "open_stream", lambda *_: pytest.fail("a stream past the bounds was decompressed"))
        assert split_batch(bomb, [0]) == ({}, [(OVERSIZED_BATCH, "", 0)])
        assert split_batch(value, [0]) == ({}, [(OVERSIZED_BATCH, "", 0)])  # 3 entries
        with pytest.raises(StreamTooLarge):  # the tools' reading too
            decode_batch(bomb)
    monkeypatch.setattr(batches, "MAX_BATCH_ENTRIES", 3)
    shares, quarantined = split_records([value, bomb, value], [0])
    assert [(index, reason) for index, reason, _, _ in quarantined] == [(1, OVERSIZED_BATCH)]
    assert read_stream(shares[0]).num_rows == 6
    under = inflated(value, MAX_STREAM_BYTES // 2)  # within the bound: read, its one entry refused alone
    assert [reason for reason, _, _ in split_batch(under, [0])[1]] == ["bad_length:topic"]


RECORD = encode_batch([sample(p) for p in range(5)])


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.data())
def test_a_record_with_any_bytes_changed_is_read_or_quarantined_never_an_error(data: st.DataObject) -> None:
    """Whatever bytes of a record are damaged (its metadata, the lengths before its LZ4 frames, the frames), the
    split reads it or quarantines it: the sizes read from its metadata by hand never raise past it."""
    value = bytearray(RECORD)
    for _ in range(data.draw(st.integers(1, 8))):
        value[data.draw(st.integers(0, len(value) - 1))] = data.draw(st.integers(0, 255))
    shares, quarantined = split_batch(bytes(value), [0, 1])
    assert shares or quarantined


def test_entries_go_to_the_bucket_spark_hashes_their_key_to(spark: SparkSession) -> None:
    topics = ["orders", "Zahlungseingänge", "日本語トピック", "t" * 249, "a.b_c-d"]
    written = [sample(p, topic=t, cluster=c) for t in topics for p in (0, 7, 2**31 - 1)
               for c in ("prod", "clüster-ß")]
    table = read_batch(encode_batch(written))
    keys = spark.createDataFrame([(f"{s.cluster}/{s.topic}/{s.partition}",) for s in written], ["key"])
    hashes = KeyHashes()
    for buckets in (1, 7, 32, 256):
        expected = [r[0] for r in keys.select(F.pmod(F.xxhash64("key"), F.lit(buckets))).collect()]
        assert buckets_of(table, buckets, hashes).tolist() == expected  # the hashes made, then kept
        # a JSON record's key, hashed alone (streaming.parse), the same
        assert [bucket_of(f"{s.cluster}/{s.topic}/{s.partition}", range(buckets)) for s in written] == expected


def test_kept_key_hashes_are_the_keys_hashed_as_written() -> None:
    """A worker keeps each topic's partition key hashes (KeyHashes); whatever it holds, grows or drops, every
    entry's bucket is its key's, hashed as it is written (bucket_of, which the Spark test above checks)."""

    class Small(KeyHashes):
        MAX_CACHED_PARTITION = 50
        MAX_CACHED_KEYS = 120

    hashes = Small()
    rounds = [[("a", p) for p in range(5)], [("a", p) for p in (3, 40, 7)] + [("b", 49), ("b", 50), ("b", 2**31 - 1)],
              [("c", p) for p in range(45)] + [("a", 1)], [("d", 0), ("a", 44)]]
    for asked in rounds:
        written = [sample(p, topic=t) for t, p in asked]
        expected = [bucket_of(f"{s.cluster}/{s.topic}/{s.partition}", range(13)) for s in written]
        assert buckets_of(read_batch(encode_batch(written)), 13, hashes).tolist() == expected
        assert hashes.keys == sum(len(h) for h in hashes.by_topic.values()) <= Small.MAX_CACHED_KEYS
    # past 120 keys it started again in the third round: "b" gone, "a" hashed again as far as it was asked
    assert {topic: len(h) for topic, h in hashes.by_topic.items()} == {"prod/c": 45, "prod/a": 45, "prod/d": 1}


def test_the_processor_input_holds_each_batch_split_by_bucket_beside_the_json_records(spark: SparkSession) -> None:
    written = [sample(p) for p in range(40)]
    bad_entry = invalid(partition=-1)
    values = [encode_batch([*written[:20], bad_entry]), to_json(written[20]), encode_batch(written[21:]),
              encode_batch(written)[:100]]
    keys = [b"prod/#1", b"prod/orders/20", b"prod/#2", b"prod/#3"]
    rows = [(k, v, 4, 100 + i) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    bucket_ids = [3, 5, 8, 13]
    taken = processor_input(spark.createDataFrame(rows, KAFKA_RECORD), bucket_ids).collect()
    shares = [r for r in taken if r["kind"] == BATCH]
    got = {e["partition"]: (r["bucket"], e) for r in shares for e in entries(read_batch(bytes(r["batch"])))}
    json_rows = [r for r in taken if r["kind"] == "p"]
    assert [json.loads(r["sample"])["partition"] for r in json_rows] == [20]
    assert sorted(got) == [p for p in range(40) if p != 20]
    expected_bucket = dict(zip(range(40), (bucket_ids[b] for b in buckets_of(read_batch(encode_batch(written)),
                                                                               len(bucket_ids))), strict=True))
    assert all(bucket == expected_bucket[p] and e == as_dict(written[p]) for p, (bucket, e) in got.items())
    assert json_rows[0]["bucket"] == expected_bucket[20]
    assert len({r["bucket"] for r in shares}) > 1 and all(r["bucket"] in bucket_ids for r in taken)
    # every bucket, with a share or not, hears that the cluster is sampled
    assert sorted((r["bucket"], json.loads(r["sample"])) for r in taken if r["kind"] == HEARD) == [
        (b, ["prod"]) for b in bucket_ids]
    quarantined = sorted((json.loads(r["sample"]) for r in taken if r["kind"] == QUARANTINED),
                         key=lambda q: q["offset"])
    assert [(q["reason"], q["offset"]) for q in quarantined] == [("out_of_range:partition", 100),
                                                                  (MALFORMED_BATCH, 103)]
    assert json.loads(quarantined[0]["raw"])["partition"] == -1 and quarantined[0]["key"] == "cHJvZC8jMQ=="
