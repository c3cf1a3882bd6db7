"""Validation of the samples topic's JSON records by the pydantic models (streaming.parse.judge: the quarantine
reason of each kind of bad record), and the processor's input built from Kafka records on a real Spark session."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from replmon.contracts.batches import IPC_MARKER, encode_batch
from replmon.contracts.events import Event
from replmon.contracts.samples import (
    SAMPLE_MODELS,
    CycleSample,
    EpochEntry,
    PartitionSample,
    ReplicaOffsets,
    ReplicaSample,
    to_json,
)
from streaming import schema
from streaming.batches import HEARD, MALFORMED_BATCH
from streaming.parse import judge, processor_input, quarantined_records
from streaming.schema import QUARANTINE_VALUE_MAX_CHARS
from streaming.sinks import quarantine_record

KAFKA_RECORD = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
])


def partition_sample(**changes: Any) -> dict[str, Any]:
    sample = PartitionSample(
        cluster="c1", collector_id="col", cycle=7, sample_time_ms=1_700_000_000_000, topic="orders",
        partition=3, leader=1, leader_epoch=4, replicas=[1, 2, 3], isr=[1, 2], high_watermark=100,
        replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=105),
                         ReplicaOffsets(broker_id=2, log_end_offset=100)],
        epoch_lineage=[EpochEntry(leader_epoch=4, start_offset=90)], min_insync_replicas=2,
    )
    data: dict[str, Any] = json.loads(to_json(sample))
    data.update(changes)
    return data


def rows(spark: SparkSession, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None
         ) -> list[dict[str, Any]]:
    """The processor's input rows of Kafka records with ``values`` (partition 4, offsets 100...)."""
    keys = keys or [b"k"] * len(values)
    records = [(k, v, 4, 100 + i) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return [r.asDict() for r in processor_input(spark.createDataFrame(records, KAFKA_RECORD), range(8)).collect()]


def reason(value: bytes | None) -> str | None:
    return judge(value).reason


def test_spark_schema_has_every_field_of_the_models() -> None:
    for model in (PartitionSample, ReplicaSample, Event):
        names = [f.name for f in schema.spark_schema(model).fields]
        assert names == [f.alias or n for n, f in model.model_fields.items()]
    lineage = schema.spark_schema(PartitionSample)["epoch_lineage"].dataType
    assert lineage.elementType.fieldNames() == ["leader_epoch", "start_offset"]  # type: ignore[attr-defined]


def test_valid_samples_pass_as_the_collectors_write_them(spark: SparkSession) -> None:
    replica = ReplicaSample(cluster="c1", agent_id="a", cycle=1, sample_time_ms=1, broker_id=2, log_dir="/d",
                            topic="orders", partition=3, log_end_offset=100,
                            epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0)])
    spaced = json.dumps(partition_sample()).encode()
    assert judge(spaced).sample == PartitionSample.model_validate(partition_sample())
    assert judge(to_json(replica)).sample == replica
    out = rows(spark, [spaced, to_json(replica)])
    heard = [r for r in out if r["kind"] == HEARD]  # every bucket hears the cluster of the partition sample
    assert sorted((r["bucket"], json.loads(r["sample"])) for r in heard) == [(b, ["c1"]) for b in range(8)]
    out = [r for r in out if r["kind"] != HEARD]
    assert [r["kind"] for r in out] == ["p", "r"]
    # what the processor takes: the sample written back as the collectors write it, whatever the record's spacing
    assert out[0]["sample"] == to_json(PartitionSample.model_validate(partition_sample())).decode()
    assert out[1]["sample"] == to_json(replica).decode()
    assert [(r["sample_time_ms"], r["cycle"]) for r in out] == [(1_700_000_000_000, 7), (1, 1)]
    # both samples of partition orders-3 land in the same state bucket
    assert out[0]["bucket"] == out[1]["bucket"]


# (record, reason)
BAD_RECORDS: list[tuple[bytes | None, str | None]] = [
    (b"{not json", "malformed_json"),
    (b"[1, 2, 3]", "malformed_json"),
    (None, "malformed_json"),
    (json.dumps({"schema": "partition/v9"}).encode(), "unknown_schema"),
    (json.dumps({"cluster": "c1"}).encode(), "unknown_schema"),
    (json.dumps({k: v for k, v in partition_sample().items() if k != "leader"}).encode(),
     "missing_field:leader"),
    (json.dumps(partition_sample(leader_epoch="four")).encode(), "wrong_type:leader_epoch"),
    (json.dumps(partition_sample(high_watermark=-5)).encode(), "out_of_range:high_watermark"),
    (json.dumps(partition_sample(high_watermark=2**63 - 1)).encode(), "out_of_range:high_watermark"),
    (json.dumps(partition_sample(topic="")).encode(), "bad_length:topic"),
    (json.dumps(partition_sample(topic="x" * 300)).encode(), "bad_length:topic"),
    (json.dumps(partition_sample(isr=[1, -7])).encode(), "out_of_range:isr[]"),
    (json.dumps(partition_sample(replica_offsets=[{"broker_id": 1, "log_end_offset": -1}])).encode(),
     "out_of_range:replica_offsets[].log_end_offset"),
    # JSON is UTF-8; one object, nothing after it (Spark's parser alone would stop at the first value)
    (json.dumps(partition_sample()).encode().replace(b'"c1"', b'"c\xff1"'), "invalid_utf8"),
    (json.dumps(partition_sample()).encode() + b" trailing", "malformed_json"),
    (json.dumps(partition_sample()).encode() * 2, "malformed_json"),
    (b"[" + json.dumps(partition_sample()).encode() + b"]", "malformed_json"),
    (b"", "malformed_json"),
    (json.dumps(partition_sample(evil=1)).encode(), "unknown_field:evil"),  # the models forbid extra fields
    (json.dumps({"schema": "cycle/v1", "cluster": "c1"}).encode(), "missing_field:collector_id"),
    # only standard JSON, and a field takes only a JSON value of its type: 12345 is not the topic "12345" (a phantom
    # partition), "7" not the cycle 7; single quotes and NaN are not JSON
    (json.dumps(partition_sample(topic=12345)).encode(), "wrong_type:topic"),
    (json.dumps(partition_sample(cluster=True)).encode(), "wrong_type:cluster"),
    (json.dumps(partition_sample(collector_id={"a": 1})).encode(), "wrong_type:collector_id"),
    (json.dumps(partition_sample(replica_offsets=[{"broker_id": 1, "log_end_offset": 3, "error_detail": 7}])).encode(),
     "wrong_type:replica_offsets[].error_detail"),
    (json.dumps(partition_sample()).replace('"', "'").encode(), "malformed_json"),
    (json.dumps(partition_sample(high_watermark=float("nan"))).encode(), "malformed_json"),
    (json.dumps(partition_sample(cycle="7")).encode(), "wrong_type:cycle"),
    (json.dumps(partition_sample(cycle=7.0)).encode(), "wrong_type:cycle"),
    (json.dumps(partition_sample(leader=True)).encode(), "wrong_type:leader"),
    (json.dumps(partition_sample(leader=None)).encode(), "missing_field:leader"),  # null for a required field
    (json.dumps(partition_sample(isr=[1, None])).encode(), "missing_field:isr[]"),
    # past 64 bits: not an integer of the field's type, whatever its bounds
    (json.dumps(partition_sample(cycle=2**63)).encode(), "wrong_type:cycle"),
    (json.dumps(partition_sample(cycle=2**63 - 1)).encode(), None),
    (json.dumps(partition_sample(high_watermark=-(2**63) - 1)).encode(), "wrong_type:high_watermark"),
    (json.dumps(partition_sample(replica_offsets=[{"broker_id": 1, "log_end_offset": 3, "error": "lost"}])).encode(),
     "wrong_type:replica_offsets[].error"),  # not one of the enum's values
    (json.dumps(partition_sample(replica_offsets=[{"broker_id": 1, "rack": "a"}])).encode(),
     "unknown_field:replica_offsets[].rack"),
    (json.dumps(partition_sample(cycle=-1, leader="x")).encode(), "out_of_range:cycle"),  # the first, field order
    (json.dumps(partition_sample(leader="x", evil=1)).encode(), "wrong_type:leader"),  # extra fields come last
    (json.dumps(partition_sample(evil=None)).encode(), "unknown_field:evil"),
    # a lone surrogate escaped: no Unicode text (Arrow would refuse it downstream, failing the micro-batch)
    (json.dumps(partition_sample(topic="or\ud800ders")).encode(), "malformed_json"),
    (json.dumps(partition_sample(topic_id=None, error=None)).encode(), None),  # null is fine for an optional one
]


def test_bad_records_get_their_reason() -> None:
    wrong = [(value, expected, reason(value)) for value, expected in BAD_RECORDS if reason(value) != expected]
    assert not wrong, wrong


def test_valid_cycle_samples_and_leading_whitespace_pass() -> None:
    cycle = CycleSample(cluster="c1", collector_id="col", cycle=3, sample_time_ms=1, duration_ms=5, partitions=2,
                        brokers=[1, 2])
    assert judge(to_json(cycle)).sample == cycle
    assert reason(b" \n" + json.dumps(partition_sample()).encode()) is None


def test_every_model_judges_its_own_samples_and_names_its_fields_alike() -> None:
    """Each model's records are told apart by ``schema`` and judged against that model alone."""
    for name, model in SAMPLE_MODELS.items():
        fields = [f.alias or n for n, f in model.model_fields.items()]
        assert reason(json.dumps({"schema": name}).encode()) == f"missing_field:{fields[1]}", name
        assert reason(json.dumps({"schema": name, "zz_evil": 1}).encode()) == f"missing_field:{fields[1]}", name


def test_the_collectors_compact_form_and_any_spacing_get_the_same_reasons() -> None:
    sample = PartitionSample.model_validate(partition_sample())
    cases: dict[str, dict[str, Any]] = {
        "out_of_range:high_watermark": dict(high_watermark=-5),
        "bad_length:topic": dict(topic=""),
        "out_of_range:isr[]": dict(isr=[1, -7]),
        "missing_field:leader": dict(leader=None),
        "out_of_range:replica_offsets[].log_end_offset": dict(
            replica_offsets=[ReplicaOffsets.model_construct(broker_id=1, log_end_offset=-1, error=None,
                                                            error_detail=None)]),
    }
    compact = [to_json(sample.model_copy(update=changes)) for changes in cases.values()]
    spaced = [json.dumps(json.loads(r), indent=2).encode() for r in compact]
    good = to_json(sample)
    broken = {"malformed_json": good + b" trailing", "unknown_field:evil": good[:-1] + b',"evil":1}',
              "invalid_utf8": good.replace(b'"c1"', b'"c\xff1"')}
    assert [reason(r) for r in [*compact, *spaced, *broken.values(), good, good * 2]] == [
        *cases, *cases, *broken, None, "malformed_json"]


def test_the_processor_takes_valid_samples_and_bad_records_with_what_the_quarantine_keeps(
        spark: SparkSession) -> None:
    cycle = CycleSample(cluster="c1", collector_id="col", cycle=7, sample_time_ms=1, duration_ms=5, partitions=1,
                        brokers=[1, 2, 3])
    out_of_range = json.dumps(partition_sample(leader_epoch=-5)).encode()
    values = [json.dumps(partition_sample()).encode(), to_json(cycle), b"\xff{not json", None, out_of_range]
    keys = [b"c1/orders/3", b"c1", b"\x00\xfe binary key", None, b"k"]
    taken = rows(spark, values, keys)
    # the valid cycle sample is dropped; the valid partition sample is passed as the collectors wrote it
    assert sorted(r["kind"] for r in taken) == ["h"] * 8 + ["p", "q", "q", "q"]
    assert [json.loads(r["sample"]) for r in taken if r["kind"] == "p"] == [partition_sample()]
    bad = quarantined_records([r["sample"] for r in taken if r["kind"] == "q"]).sort_values("offset")
    assert bad["offset"].tolist() == [102, 103, 104] and set(bad["partition"]) == {4}
    assert bad["key"].tolist() == [b"\x00\xfe binary key", None, b"k"]
    assert bad["raw"].tolist() == ["\ufffd{not json", None, out_of_range.decode()]
    assert bad["reason"].tolist() == [schema.INVALID_UTF8, schema.MALFORMED_JSON,
                                      f"{schema.OUT_OF_RANGE}:leader_epoch"]


def test_the_quarantine_keeps_the_start_of_a_long_value_where_it_is_read(spark: SparkSession) -> None:
    """A bad JSON record near max.message.bytes, a batch record's bad entry of up to what the record decompresses
    to (a long string; lists of more items than the quarantine keeps characters, written with that many), and a
    batch record that cannot be read, longer than the quarantine keeps of it: each carried on as its first
    QUARANTINE_VALUE_MAX_CHARS characters (the record's bytes in base64) and its whole length, not whole through
    the JVM and the driver; the quarantine record tells that length, which the whole value written out gives."""
    long_json = json.dumps(partition_sample(topic="t" * 900_000)).encode()
    valid = PartitionSample.model_validate(partition_sample()).__dict__
    entry = PartitionSample.model_construct(**(valid | {"topic": "b" * 5_000_000}))
    lists = PartitionSample.model_construct(**(valid | {  # its lists cut for the quarantine, counted whole
        "isr": [0, 9, 10, 2**63 - 1, 10**12] * 20_000,
        "epoch_lineage": [EpochEntry(leader_epoch=e, start_offset=e * 1_000) for e in range(100_000)]}))
    unreadable = IPC_MARKER + bytes(range(256)) * 189  # 48,388 bytes, the quarantine keeps 48,000 (in base64:
    # 64,000 characters of 64,520, both fewer than QUARANTINE_VALUE_MAX_CHARS)
    taken = rows(spark, [long_json, encode_batch([entry]), encode_batch([lists]), unreadable])
    bad = quarantined_records([r["sample"] for r in taken if r["kind"] == "q"]).sort_values("offset")
    assert bad["reason"].tolist() == [f"{schema.BAD_LENGTH}:topic"] * 2 + [
        f"{schema.BAD_LENGTH}:isr", MALFORMED_BATCH]
    assert all(len(r["sample"]) < QUARANTINE_VALUE_MAX_CHARS + 1_000 for r in taken)
    whole = [long_json.decode(), to_json(entry).decode(), to_json(lists).decode(),
             base64.b64encode(unreadable).decode()]
    kept = [w[:QUARANTINE_VALUE_MAX_CHARS] for w in whole[:3]] + [whole[3][:64_000]]
    assert bad["raw"].tolist() == kept
    assert bad["raw_chars"].tolist() == [len(w) for w in whole]
    for row, w, start in zip(bad.itertuples(index=False), whole, kept, strict=True):
        record = json.loads(quarantine_record(row.reason, row.partition, row.offset, row.raw, int(row.raw_chars)))
        assert (record["value"], record["value_truncated"], record["value_chars"]) == (start, True, len(w))
    short = json.loads(quarantine_record("malformed_json", 0, 1, "{x"))
    assert short["value"] == "{x" and "value_chars" not in short


def test_the_read_stage_plans_no_checks(spark: SparkSession) -> None:
    """Spark's plan of the processor's input is the Kafka record's columns and one Python map: the checks are the
    models', in the workers, not expressions every micro-batch plans and every task deserializes."""
    plan = processor_input(spark.createDataFrame([], KAFKA_RECORD), range(8))._jdf.queryExecution().optimizedPlan()
    text = plan.toString()
    assert "MapInArrow" in text and "from_json" not in text, text
    assert len(text) < 2_000, text


