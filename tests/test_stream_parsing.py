"""Parsing and validation of samples on a real Spark session: the schema and the checks derived from the
pydantic models, and the quarantine reason of each kind of bad record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

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
from streaming.parse import parse_samples, processor_input, quarantined_records

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


def parse(spark: SparkSession, values: Sequence[bytes | None]) -> list[dict[str, Any]]:
    rows = [(b"k", v, 0, i) for i, v in enumerate(values)]
    parsed = parse_samples(spark.createDataFrame(rows, KAFKA_RECORD), bucket_ids=range(8))
    return [r.asDict(recursive=True) for r in parsed.orderBy("offset").collect()]


def test_spark_schema_has_every_field_of_the_models() -> None:
    for model in (PartitionSample, ReplicaSample, Event):
        names = [f.name for f in schema.spark_schema(model).fields]
        assert names == [f.alias or n for n, f in model.model_fields.items()]
    lineage = schema.spark_schema(PartitionSample)["epoch_lineage"].dataType
    assert lineage.elementType.fieldNames() == ["leader_epoch", "start_offset"]  # type: ignore[attr-defined]


def test_valid_samples_pass_with_their_values(spark: SparkSession) -> None:
    replica = ReplicaSample(cluster="c1", agent_id="a", cycle=1, sample_time_ms=1, broker_id=2, log_dir="/d",
                            topic="orders", partition=3, log_end_offset=100,
                            epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0)])
    out = parse(spark, [json.dumps(partition_sample()).encode(), to_json(replica)])
    assert [r["reason"] for r in out] == [None, None]
    assert [r["kind"] for r in out] == ["p", "r"]
    p = out[0]["p"]
    assert p["high_watermark"] == 100 and p["isr"] == [1, 2]
    assert p["replica_offsets"][0] == {"broker_id": 1, "log_end_offset": 105, "error": None, "error_detail": None}
    assert out[1]["r"]["log_end_offset"] == 100
    # what the processor takes: the parse written back as the collectors write it, whatever the record's spacing
    assert out[0]["sample"] == to_json(PartitionSample.model_validate(partition_sample())).decode()
    assert out[1]["sample"] == to_json(replica).decode()
    # both samples of partition orders-3 land in the same state bucket
    assert out[0]["bucket"] == out[1]["bucket"]


# (record, reason): records other than the collectors' own form (other spacing, fields missing or extra,
# trailing content), judged on the map parse
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
    # only standard JSON, and a string field takes only a JSON string: Spark would read 12345 as the topic "12345"
    # (a phantom partition), and single quotes or NaN as if they were JSON
    (json.dumps(partition_sample(topic=12345)).encode(), "wrong_type:topic"),
    (json.dumps(partition_sample(cluster=True)).encode(), "wrong_type:cluster"),
    (json.dumps(partition_sample(collector_id={"a": 1})).encode(), "wrong_type:collector_id"),
    (json.dumps(partition_sample(replica_offsets=[{"broker_id": 1, "log_end_offset": 3, "error_detail": 7}])).encode(),
     "wrong_type:replica_offsets[].error_detail"),
    (json.dumps(partition_sample()).replace('"', "'").encode(), "malformed_json"),
    (json.dumps(partition_sample(high_watermark=float("nan"))).encode(), "malformed_json"),
    (json.dumps(partition_sample(topic_id=None, error=None)).encode(), None),  # null is fine for an optional one
]


def test_bad_records_get_their_reason(spark: SparkSession) -> None:
    out = parse(spark, [value for value, _ in BAD_RECORDS])  # one Spark job for all of them
    wrong = [(value, reason, row["reason"]) for (value, reason), row in zip(BAD_RECORDS, out, strict=True)
             if row["reason"] != reason]
    assert not wrong, wrong


def test_valid_cycle_samples_and_leading_whitespace_pass(spark: SparkSession) -> None:
    cycle = CycleSample(cluster="c1", collector_id="col", cycle=3, sample_time_ms=1, duration_ms=5, partitions=2,
                        brokers=[1, 2])
    out = parse(spark, [to_json(cycle), b" \n" + json.dumps(partition_sample()).encode()])
    assert [(r["kind"], r["reason"]) for r in out] == [("c", None), ("p", None)]


def test_bad_records_do_not_disturb_good_ones(spark: SparkSession) -> None:
    good = json.dumps(partition_sample()).encode()
    out = parse(spark, [good, b"\x00\xff garbage", good, json.dumps(partition_sample(cycle=-1)).encode()])
    assert [r["reason"] is None for r in out] == [True, False, True, False]
    assert out[3]["reason"] == "out_of_range:cycle"


def canonical(sample: PartitionSample | ReplicaSample | CycleSample, **changes: Any) -> bytes:
    """The collectors' own JSON form of ``sample`` with ``changes`` (values the model would refuse) written in."""
    return to_json(sample.model_copy(update=changes))


def test_the_collectors_own_records_are_judged_without_the_map_parse(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from replmon.contracts.samples import SAMPLE_MODELS
    from streaming.parse import CANONICAL_JSON, SAMPLE_STRUCT, _as_model, _canonical

    replica = ReplicaSample(cluster="c1", agent_id="a", cycle=1, sample_time_ms=1, broker_id=2, log_dir="/d",
                            topic="orders", partition=3, log_end_offset=100,
                            epoch_lineage=[EpochEntry(leader_epoch=0, start_offset=0)])
    cycle = CycleSample(cluster="c1", collector_id="col", cycle=3, sample_time_ms=1, duration_ms=5, partitions=2,
                        brokers=[1, 2])
    records = [to_json(PartitionSample.model_validate(partition_sample())), to_json(replica), to_json(cycle),
               json.dumps(partition_sample()).encode()]  # the same partition sample, spaced: not canonical
    frame = spark.createDataFrame([(r.decode(),) for r in records], "raw string")
    u = F.from_json("raw", SAMPLE_STRUCT)
    canon = [F.when(u["schema"] == s, _canonical(F.to_json(_as_model(u, m), CANONICAL_JSON), F.col("raw")))
             for s, m in SAMPLE_MODELS.items()]
    flags = [row[0] for row in frame.select(F.coalesce(*canon)).collect()]
    assert flags == [True, True, True, False]


def test_canonical_records_that_break_a_rule_get_the_same_reasons(spark: SparkSession) -> None:
    """Records in the collectors' form with values the models refuse take the path without the map parse and
    get the reasons the map path gives (the spaced variant of each, judged on the map parse, agrees)."""
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
    compact = [canonical(sample, **changes) for changes in cases.values()]
    spaced = [json.dumps(json.loads(r)).encode() for r in compact]
    good = to_json(sample)
    # what makes the collectors' form no longer canonical is still caught
    broken = {"malformed_json": good + b" trailing", "unknown_field:evil": good[:-1] + b',"evil":1}',
              "invalid_utf8": good.replace(b'"c1"', b'"c\xff1"')}
    out = parse(spark, compact + spaced + list(broken.values()) + [good, good * 2])
    reasons = [r["reason"] for r in out]
    assert reasons == [*cases, *cases, *broken, None, "malformed_json"]


def test_the_processor_takes_valid_samples_and_bad_records_with_what_the_quarantine_keeps(
        spark: SparkSession) -> None:
    cycle = CycleSample(cluster="c1", collector_id="col", cycle=7, sample_time_ms=1, duration_ms=5, partitions=1,
                        brokers=[1, 2, 3])
    values = [json.dumps(partition_sample()).encode(), to_json(cycle), b"\xff{not json", None,
              json.dumps(partition_sample(leader_epoch=-5)).encode()]
    keys = [b"c1/orders/3", b"c1", b"\x00\xfe binary key", None, b"k"]
    rows = [(k, v, 4, 100 + i) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    parsed = parse_samples(spark.createDataFrame(rows, KAFKA_RECORD), bucket_ids=range(8))
    taken = processor_input(parsed, range(8)).collect()
    # the valid cycle sample is dropped; the valid partition sample is passed as the collectors wrote it
    assert sorted(r["kind"] for r in taken) == ["p", "q", "q", "q"]
    assert [json.loads(r["sample"]) for r in taken if r["kind"] == "p"] == [partition_sample()]
    bad = quarantined_records([r["sample"] for r in taken if r["kind"] == "q"]).sort_values("offset")
    assert bad["offset"].tolist() == [102, 103, 104] and set(bad["partition"]) == {4}
    assert bad["key"].tolist() == [b"\x00\xfe binary key", None, b"k"]
    assert bad["raw"].tolist() == ["\ufffd{not json", None, values[4].decode()]
    assert bad["reason"].tolist() == [schema.INVALID_UTF8, schema.MALFORMED_JSON,
                                      f"{schema.OUT_OF_RANGE}:leader_epoch"]


def test_a_filter_on_the_reason_leaves_each_record_parsed_and_judged_once(spark: SparkSession) -> None:
    """The processor's input (and the benchmark's baseline) filters on ``reason``; pushed below the projections,
    that filter would carry one from_json per reference to the parsed record (hundreds: ~20x slower), and the
    checks of ``reason`` a second time, whose Java code every task then generates twice. Once for the record,
    once for the map of the records judged on it; each check once."""
    from pyspark.sql import functions as F

    rows = spark.createDataFrame([], KAFKA_RECORD)
    parsed = parse_samples(rows, bucket_ids=range(8))
    with_cycle = sum("cycle" in m.model_fields for m in SAMPLE_MODELS.values())
    for kept in (processor_input(parsed, range(8)), parsed.filter(F.col("reason").isNull()),
                 parsed.filter(F.col("reason").isNotNull())):
        plan = kept._jdf.queryExecution().optimizedPlan().toString()
        assert plan.count("from_json(") == 2, plan[:3000]
        # extra fields: one check per model, on the map path; a cycle's range: the fast path's and the map path's
        assert plan.count(f"{schema.UNKNOWN_FIELD}:") == len(SAMPLE_MODELS), plan[:3000]
        assert plan.count(f"{schema.OUT_OF_RANGE}:cycle") == 2 * with_cycle, plan[:3000]


def test_the_checks_sql_literals_read_back_as_written(spark: SparkSession) -> None:
    """The checks reach the JVM as SQL text (schema.Sql): a reason, a field name or a bound must read back as the
    value it was, quotes and backslashes included, and a value with no SQL literal is refused."""
    values: list[str | int] = ["out_of_range:replica_offsets[].log_end_offset", "it's", "back\\slash", "\\'", "",
                               -1, 0, 2**31 - 1, 2**31, 2**53, 2**63 - 1]
    row = spark.range(1).select(*[schema.column(schema.literal(v)).alias(f"v{i}")
                                  for i, v in enumerate(values)]).first()
    assert row is not None and list(row) == values
    assert [type(v) for v in row] == [type(v) for v in values], "an integer bound stays an integer (no decimal)"
    for bad in (1.5, True):
        try:
            schema.literal(bad)  # type: ignore[arg-type]
        except TypeError:
            continue
        raise AssertionError(f"{bad!r} given an SQL literal")
