"""Hostile samples on the samples topic of the running pipeline: hypothesis makes malformed, truncated,
oversized and adversarial records (wrong types, negative offsets, huge integers, NaN, unknown schema versions,
deep nesting, invalid UTF-8, empty values, null keys...), each knowing the reason it must be quarantined with;
they are written in bulk between valid samples, then the test waits for the quarantine topic: every bad record
is there once with its reason, the job never failed a query, and every valid sample produced its metrics.

The reasons are the contract of ``streaming.schema`` (``<kind>`` or ``<kind>:<field>``); the fields, types and
bounds come from the pydantic models (replmon/contracts/samples.py), the one definition of a valid sample."""

from __future__ import annotations

import json
import math
import os
import sys
import types
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
import pyarrow as pa
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from pydantic import BaseModel

from replmon.contracts.batches import encode_batch
from replmon.contracts.samples import (
    INT64_MAX,
    MAX_LINEAGE,
    SAMPLE_MODELS,
    CycleSample,
    EpochEntry,
    PartitionSample,
    ReplicaOffsets,
    ReplicaSample,
    to_json,
)
from replmon.testbed.kafka_view import wait_until
from tests.damaged_batches import inflated, items_overstated, offsets_backwards
from tests.pipeline import DEADLINE_S, Pipeline

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

EXAMPLES = 240
VALID = 30
MAX_MESSAGE_BYTES = 1_048_588
"""The samples topic's max.message.bytes (Kafka's default: the topic is created without one)."""
CLUSTER = "hostile"
MAX_DIGITS = sys.int_info.default_max_str_digits
"""The most digits the job's JSON parser (pydantic-core's) reads in a number: Python's own default, 4,300."""
MAX_DEPTH = 200
"""The deepest nesting the job's JSON parser (pydantic-core's, jiter) reads: its recursion limit, 200 arrays deep in a
record."""


@dataclass(frozen=True)
class Hostile:
    what: str
    key: bytes | None
    value: bytes | None
    reason: str


def base(model: type[BaseModel], i: int = 0) -> dict[str, Any]:
    """A valid sample of ``model`` as JSON data."""
    common = {"cluster": CLUSTER, "cycle": i, "sample_time_ms": 1_700_000_000_000 + i}
    sample: BaseModel
    if model is PartitionSample:
        sample = PartitionSample(**common, collector_id="c", topic="hostile-bad", partition=0, leader=1,
                                 leader_epoch=3, replicas=[1, 2], isr=[1, 2], high_watermark=10,
                                 replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=10)],
                                 epoch_lineage=[EpochEntry(leader_epoch=3, start_offset=0)])
    elif model is ReplicaSample:
        sample = ReplicaSample(**common, agent_id="a", broker_id=1, log_dir="/d", topic="hostile-bad", partition=0,
                               log_end_offset=10, epoch_lineage=[EpochEntry(leader_epoch=3, start_offset=0)])
    else:
        sample = CycleSample(**common, collector_id="c", duration_ms=1, partitions=1, brokers=[1])
    data: dict[str, Any] = json.loads(to_json(sample))
    return data


def encode(data: Any) -> bytes:
    # compact, as the collectors write; NaN and Infinity are written as such: not JSON (malformed), but seen on the
    # wire
    return json.dumps(data, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------------------------ the fields
@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    """int, str, list_int (list of ints), other."""
    required: bool
    ge: int | None
    le: int | None
    max_len: int | None
    min_len: int | None


def _spec(name: str, annotation: Any, required: bool, metadata: list[Any]) -> FieldSpec:
    ge = le = max_len = min_len = None
    optional = False
    kind = "other"
    meta = list(metadata)
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *more = get_args(annotation)
            meta += more
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(get_args(annotation))
            annotation = args[0]
        else:
            break
    for m in meta:
        for item in getattr(m, "metadata", [m]):
            if isinstance(item, annotated_types.Ge):
                ge = int(item.ge)  # type: ignore[call-overload]
            elif isinstance(item, annotated_types.Le):
                le = int(item.le)  # type: ignore[call-overload]
            elif isinstance(item, annotated_types.MaxLen):
                max_len = item.max_length
            elif isinstance(item, annotated_types.MinLen):
                min_len = item.min_length
    if annotation is int:
        kind = "int"
    elif annotation is str:
        kind = "str"
    elif get_origin(annotation) is list and get_args(annotation) and _is_int(get_args(annotation)[0]):
        kind = "list_int"
    return FieldSpec(name, kind, required and not optional, ge, le, max_len, min_len)


def _is_int(annotation: Any) -> bool:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation is int


def fields_of(model: type[BaseModel]) -> list[FieldSpec]:
    return [_spec(f.alias or n, f.annotation, f.is_required(), list(f.metadata))
            for n, f in model.model_fields.items() if (f.alias or n) != "schema"]


MODELS: list[type[BaseModel]] = [PartitionSample, ReplicaSample, CycleSample]


# ------------------------------------------------------------------------------------------------ strategies
models = st.sampled_from(MODELS)
wrong_for_int = st.one_of(
    st.text(max_size=8), st.booleans(), st.just(float("nan")), st.just(float("inf")), st.just(float("-inf")),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)) | st.just(100.0),
    st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def truncated(draw: st.DrawFn) -> Hostile:
    raw = encode(base(draw(models)))
    cut = draw(st.integers(0, len(raw) - 1))
    return Hostile(f"truncated at {cut}", draw(keys), raw[:cut], "malformed_json")


@st.composite
def wrong_type(draw: st.DrawFn) -> Hostile:
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.kind in ("int", "list_int")]))
    data = base(model)
    if spec.kind == "int":
        data[spec.name] = draw(wrong_for_int)
    else:
        data[spec.name] = draw(st.one_of(st.text(max_size=8), st.integers(), st.dictionaries(st.text(max_size=3),
                                                                                            st.integers(), max_size=2)))
    value = data[spec.name]
    # NaN and Infinity are not JSON: the record does not parse at all
    expected = "malformed_json" if isinstance(value, float) and not math.isfinite(value) else f"wrong_type:{spec.name}"
    return Hostile(f"{spec.name}={value!r}", draw(keys), encode(data), expected)


@st.composite
def text_not_string(draw: st.DrawFn) -> Hostile:
    """A string field given another JSON value: read as its text, it would be a phantom topic named 12345."""
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.kind == "str"]))
    data = base(model)
    data[spec.name] = draw(st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2),
                                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
    return Hostile(f"{spec.name}={data[spec.name]!r}", draw(keys), encode(data), f"wrong_type:{spec.name}")


@st.composite
def out_of_range(draw: st.DrawFn) -> Hostile:
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.kind == "int" and (f.ge is not None or f.le)]))
    data = base(model)
    choices = []
    if spec.ge is not None:
        choices.append(st.integers(-(2**63), spec.ge - 1))  # negative offsets, epochs below -1...
    if spec.le is not None and spec.le < INT64_MAX:
        choices.append(st.integers(spec.le + 1, INT64_MAX))
    data[spec.name] = draw(st.one_of(*choices))
    return Hostile(f"{spec.name}={data[spec.name]}", draw(keys), encode(data), f"out_of_range:{spec.name}")


@st.composite
def huge_int(draw: st.DrawFn) -> Hostile:
    """Integers past 64 bits: a type error; past the JSON parser's limit on a number's digits (pydantic-core's,
    Python's own default limit on an integer's text): the record does not parse at all."""
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.kind == "int"]))
    digits = draw(st.sampled_from([20, 40, 300, 1001, MAX_DIGITS, MAX_DIGITS + 1, 5000]))
    data = {**base(model), spec.name: "HUGE"}
    raw = encode(data).replace(b'"HUGE"', b"9" * digits)  # past Python's own int-to-text limit too
    reason = f"wrong_type:{spec.name}" if digits <= MAX_DIGITS else "malformed_json"
    return Hostile(f"{spec.name} with {digits} digits", draw(keys), raw, reason)


@st.composite
def nested_offsets(draw: st.DrawFn) -> Hostile:
    data = base(PartitionSample)
    if draw(st.booleans()):
        data["replica_offsets"] = [{"broker_id": 1, "log_end_offset": draw(st.integers(-(2**62), -1))}]
        reason = "out_of_range:replica_offsets[].log_end_offset"
    else:
        data["epoch_lineage"] = [{"leader_epoch": draw(st.integers(-(2**31), -2)), "start_offset": 0}]
        reason = "out_of_range:epoch_lineage[].leader_epoch"
    return Hostile(reason, draw(keys), encode(data), reason)


@st.composite
def missing(draw: st.DrawFn) -> Hostile:
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.required]))
    data = base(model)
    if draw(st.booleans()):
        del data[spec.name]
    else:
        data[spec.name] = None
    return Hostile(f"no {spec.name}", draw(keys), encode(data), f"missing_field:{spec.name}")


@st.composite
def bad_length(draw: st.DrawFn) -> Hostile:
    model = draw(models)
    spec = draw(st.sampled_from([f for f in fields_of(model) if f.kind == "str" and f.max_len]))
    data = base(model)
    too_short = [""] if spec.min_len else []  # a topic id has no least length
    data[spec.name] = draw(st.sampled_from([*too_short, "x" * (spec.max_len + 1), "y" * 100_000]))  # type: ignore[operator]
    return Hostile(f"{spec.name} of {len(data[spec.name])} chars", draw(keys), encode(data),
                   f"bad_length:{spec.name}")


@st.composite
def unknown_schema(draw: st.DrawFn) -> Hostile:
    data = base(draw(models))
    version = draw(st.one_of(st.sampled_from(["partition/v2", "partition/v0", "replica/v9", "cycle/v1.1", "",
                                              "PARTITION/V1"]), st.integers(), st.none(),
                             st.text(max_size=12).filter(lambda v: v not in SAMPLE_MODELS)))
    if version is None and draw(st.booleans()):
        del data["schema"]
    else:
        data["schema"] = version
    return Hostile(f"schema={version!r}", draw(keys), encode(data), "unknown_schema")


@st.composite
def invalid_utf8(draw: st.DrawFn) -> Hostile:
    raw = encode(base(draw(models)))
    bad = draw(st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82"]))
    at = raw.index(b'"hostile"') + 2
    return Hostile(f"bytes {bad!r} in a string", draw(keys), raw[:at] + bad + raw[at:], "invalid_utf8")


@st.composite
def deep(draw: st.DrawFn) -> Hostile:
    """Nesting in an extra field: a field the models do not have; past the JSON parser's depth limit
    (pydantic-core's), no parse."""
    depth = draw(st.sampled_from([10, MAX_DEPTH, MAX_DEPTH + 1, 300, 1500, 20_000]))
    raw = encode(base(draw(models)))
    raw = raw[:-1] + b', "nested": ' + b"[" * depth + b"]" * depth + b"}"
    reason = "unknown_field:nested" if depth <= MAX_DEPTH else "malformed_json"
    return Hostile(f"nested {depth} deep", draw(keys), raw, reason)


not_an_object = st.one_of(
    st.sampled_from([b"", b"null", b"[]", b"[1, 2]", b'"partition/v1"', b"42", b"true", b"\x00", b"   ", b"{",
                     b"}", b"{}{}", b'{"schema": "partition/v1"}garbage']),
    st.builds(lambda v: encode(v), st.lists(st.integers(), max_size=3) | st.text(max_size=10) | st.floats()),
    st.builds(lambda m: encode(base(m)) * 2, models),
    st.builds(lambda m: b"[" + encode(base(m)) + b"]", models),
    st.builds(lambda m: b"\xef\xbb\xbf" + encode(base(m)), models),  # a byte order mark: not JSON
).map(lambda v: ("not one JSON object", v, "malformed_json"))
keys = st.one_of(st.none(), st.binary(max_size=20))


@st.composite
def malformed(draw: st.DrawFn) -> Hostile:
    what, value, reason = draw(not_an_object)
    return Hostile(what, draw(keys), value, reason)


hostile_records = st.one_of(truncated(), wrong_type(), text_not_string(), out_of_range(), huge_int(), nested_offsets(),
                            missing(), bad_length(), unknown_schema(), invalid_utf8(), deep(), malformed())


def generate() -> list[Hostile]:
    made: list[Hostile] = []

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(hostile_records)
    def collect(h: Hostile) -> None:
        made.append(h)

    collect()
    return made


def fixed() -> list[Hostile]:
    """What hypothesis may not draw: the tombstone, and records at the topic's size limit."""
    near_limit = base(PartitionSample)
    near_limit["topic"] = "z" * (MAX_MESSAGE_BYTES - 2_000 - len(encode(near_limit)))
    big_error = base(PartitionSample)
    big_error["collector_id"] = "c" * 600_000
    escaped = base(PartitionSample)
    escaped["topic"] = "\u00e9" * 300_000  # 600 kB here; quoted as JSON text in the quarantine: 1.8 MB
    long_lineage = base(ReplicaSample)
    long_lineage["epoch_lineage"] = [{"leader_epoch": e, "start_offset": e} for e in range(MAX_LINEAGE + 1)]
    return [
        Hostile("tombstone (null value)", b"k", None, "malformed_json"),
        Hostile("null value, empty key", b"", None, "malformed_json"),
        Hostile("topic near max.message.bytes", None, encode(near_limit), "bad_length:topic"),
        Hostile("collector_id of 600 kB", b"k", encode(big_error), "bad_length:collector_id"),
        Hostile("topic of 300k non-ASCII characters", b"k", json.dumps(escaped, ensure_ascii=False).encode(),
                "bad_length:topic"),
        Hostile("extra field", b"k", encode({**base(ReplicaSample), "evil": {"$ne": 1}}), "unknown_field:evil"),
        Hostile(f"replica lineage of {MAX_LINEAGE + 1} entries", b"k", encode(long_lineage),
                "bad_length:epoch_lineage"),
    ]


def batch_sample(i: int, **fields: Any) -> PartitionSample:
    """An entry of a batch, valid unless ``fields`` break it (built without validation, as a hostile writer)."""
    data = base(PartitionSample, i)
    data.update(topic="hostile-batch", partition=i, high_watermark=2000 + i,
                replica_offsets=[ReplicaOffsets(broker_id=1, log_end_offset=2000 + i)])
    return PartitionSample.model_construct(**{**PartitionSample.model_validate(data).__dict__, **fields})


def hostile_batches() -> list[tuple[str, bytes, list[str]]]:
    """(what, value, the quarantine's reasons for it): batch records the job cannot read whole, and one whose bad
    entries go to the quarantine alone while its valid ones count (partitions 0-2 of topic hostile-batch)."""
    good = encode_batch([batch_sample(i) for i in range(3)])
    table = pa.ipc.open_stream(good).read_all()
    renamed = table.replace_schema_metadata({b"schema": b"partition_batch/v0"})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, renamed.schema) as writer:
        writer.write_table(renamed)
    mixed = encode_batch([batch_sample(0), batch_sample(9, partition=-9), batch_sample(1),
                          batch_sample(8, cluster=""), batch_sample(2)])
    return [("a batch cut in half", good[: len(good) // 2], ["malformed_batch"]),
            ("a batch whose string offsets run backwards", offsets_backwards(good), ["malformed_batch"]),
            ("a batch declaring more list items than it holds", items_overstated(good, 6),  # 2 replicas an entry
             ["malformed_batch"]),
            ("a batch of 0.8 MB holding 200 MB in its LZ4 frames", inflated(good, 200 * 2**20), ["oversized_batch"]),
            ("a batch of another schema", sink.getvalue().to_pybytes(), ["unknown_schema"]),
            ("a batch whose one entry's topic is 5 MB", encode_batch([batch_sample(7, topic="h" * 5_000_000)]),
             ["bad_length:topic"]),
            ("a batch with two bad entries among three good ones", mixed,
             ["bad_length:cluster", "out_of_range:partition"])]


def valid_sample(i: int) -> bytes:
    data = base(PartitionSample, i)
    data.update(topic="hostile-valid", partition=i, high_watermark=1000 + i,
                replica_offsets=[{"broker_id": 1, "log_end_offset": 1000 + i, "error": None, "error_detail": None}])
    raw = encode(data)
    return b" \n" + raw if i % 10 == 3 else raw  # whitespace before the object is still JSON


# ------------------------------------------------------------------------------------------------ the test
def test_hostile_samples_are_quarantined_with_their_reason_and_valid_ones_still_count(pipeline: Pipeline) -> None:
    hostile = generate() + fixed()
    assert len(hostile) == EXAMPLES + len(fixed())
    assert all(h.value is None or len(h.value) < MAX_MESSAGE_BYTES - 1_000 for h in hostile)
    stream_log = pipeline.root / "stream.log"
    failures_before = stream_log.read_text().count("a query failed")
    config = yaml.safe_load(pipeline.config.read_text())
    samples_topic = config["transport"]["samples_topic"]
    quarantine_topic = config["transport"]["quarantine_topic"]
    hostile_batch_records = hostile_batches()
    counted_before = {r: pipeline.metric("replmon_quarantined_samples_total", reason=r) or 0.0
                      for r in {h.reason.split(":")[0] for h in hostile}
                      | {r.split(":")[0] for _, _, reasons in hostile_batch_records for r in reasons}}

    producer = KafkaProducer(bootstrap_servers=pipeline.transport.bootstrap_servers, acks="all",
                             max_request_size=2 * 1024 * 1024, linger_ms=20)
    sent: list[tuple[Hostile | int, Any]] = []
    valid_every = len(hostile) // VALID
    for n, h in enumerate(hostile):
        if n % valid_every == 0 and n // valid_every < VALID:
            i = n // valid_every
            sent.append((i, producer.send(samples_topic, key=None if i % 2 else f"hostile/{i}".encode(),
                                          value=valid_sample(i))))
        sent.append((h, producer.send(samples_topic, key=h.key, value=h.value)))
    batches = [(what, reasons, producer.send(samples_topic, key=b"hostile/#0", value=value))
               for what, value, reasons in hostile_batch_records]
    producer.flush(timeout=60)
    producer.close()
    where = {(m.partition, m.offset): item for item, f in sent for m in [f.get(timeout=30)]}
    batch_at = {(m.partition, m.offset): (what, reasons) for what, reasons, f in batches for m in [f.get(timeout=30)]}
    bad = {k: h for k, h in where.items() if isinstance(h, Hostile)}
    assert len(bad) == len(hostile) and len(where) - len(bad) == VALID

    def quarantined() -> dict[tuple[int, int], list[dict[str, Any]]]:
        consumer = KafkaConsumer(quarantine_topic, bootstrap_servers=pipeline.transport.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None,
                                 max_partition_fetch_bytes=4 * 1024 * 1024)
        found: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for record in consumer:
            entry = json.loads(record.value)
            found.setdefault((entry["source_partition"], entry["source_offset"]), []).append(entry)
        consumer.close()
        return found if all(k in found for k in bad) and all(
            len(found.get(k, ())) == len(reasons) for k, (_, reasons) in batch_at.items()) else {}

    found = wait_until(quarantined, DEADLINE_S * 2, f"{len(bad)} hostile records in the quarantine topic",
                       interval_s=2.0)
    wrong = [(bad[k].what, bad[k].reason, [e["reason"] for e in found[k]]) for k in bad
             if [e["reason"] for e in found[k]] != [bad[k].reason]]
    assert not wrong, f"{len(wrong)} records quarantined with another reason or more than once: {wrong[:10]}"
    assert not [k for k in where if k not in bad and k in found], "a valid sample was quarantined"
    for k, h in bad.items():  # the record as it was (its first 64 kB), for someone to look at
        entry = found[k][0]
        if h.value is None:
            assert entry["value"] is None
        elif h.reason != "invalid_utf8":
            text = h.value.decode()
            assert entry["value"] == text[:len(entry["value"])] and (
                entry["value"] == text or entry["value_chars"] == len(text)), h.what

    for k, (what, reasons) in batch_at.items():  # a batch's bad entries alone, each with its JSON
        assert sorted(e["reason"] for e in found[k]) == reasons, what
        for entry in found[k]:
            if entry["reason"] in ("malformed_batch", "oversized_batch", "unknown_schema"):
                assert entry["value"]  # the record's start, in base64
            elif entry.get("value_truncated"):  # the entry's JSON, its start and its length
                assert entry["value"].startswith('{"schema":"partition/v1"') and len(entry["value"]) == 65_536
                assert entry["value_chars"] > 5_000_000
            else:
                assert json.loads(entry["value"])["topic"] == "hostile-batch"

    by_reason = Counter(h.reason.split(":")[0] for h in hostile)
    for _, reasons in batch_at.values():
        by_reason.update(r.split(":")[0] for r in reasons)
    wait_until(lambda: all((pipeline.metric("replmon_quarantined_samples_total", reason=r) or 0) - counted_before[r]
                           == n for r, n in by_reason.items()), DEADLINE_S, "the quarantine counters")

    def metrics_of_valid() -> bool:
        shown = {i: pipeline.metric("replmon_partition_high_watermark", cluster=CLUSTER, topic="hostile-valid",
                                    partition=str(i)) for i in range(VALID)}
        wrong = {i: hw for i, hw in shown.items() if hw != 1000 + i}
        if wrong:  # the failure message shows the last of these
            raise AssertionError(f"partition -> high watermark shown, where not 1000 + partition: {wrong}")
        return True

    wait_until(metrics_of_valid, DEADLINE_S, "the metrics of every valid sample sent between the hostile ones")
    wait_until(lambda: [pipeline.metric("replmon_partition_high_watermark", cluster=CLUSTER, topic="hostile-batch",
                                        partition=str(i)) for i in range(3)] == [2000, 2001, 2002], DEADLINE_S,
               "the metrics of the valid entries of the batch with bad ones")
    assert stream_log.read_text().count("a query failed") == failures_before, "a query failed on hostile input"
    assert pipeline.job is not None and pipeline.job.poll() is None
    print(f"{len(hostile)} hostile records ({dict(sorted(by_reason.items()))}), {VALID} valid ones, "
          f"largest {max(len(h.value or b'') for h in hostile)} bytes, pid {os.getpid()}")
