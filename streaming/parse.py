"""The samples topic's records to the processor's input, in the Python workers of the read stage: each JSON record
validated by the pydantic models themselves (:data:`SAMPLES`, strict, the one definition of a sample) and given
its state bucket; each batch record split by bucket (:mod:`streaming.batches`); every record or entry that fails
a check quarantined with its reason (:func:`judge`). The job never dies on bad input.

Spark's plan for the stage is the Kafka source and one ``mapInArrow`` (:func:`processor_input`): the checks are not
Spark expressions. Derived as SQL from the models they would be ~2,800 expressions that every micro-batch plans
and every read task deserializes, batch records included, which need none of them (docs/benchmarks.md,
"Streaming job").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Any, NamedTuple

import pandas as pd
import pyarrow as pa
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import from_json
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, DataType, IntegerType, LongType, StringType, StructField, StructType

from replmon.contracts.batches import IPC_MARKER
from replmon.contracts.samples import (
    INT64_MAX,
    SAMPLE_MODELS,
    BrokerChange,
    PartitionChange,
    PartitionSample,
    ReplicaSample,
    Sample,
    to_json,
)
from streaming.batches import BATCH, HEARD, QUARANTINED, bucket_of, split_task_records
from streaming.processor import PROCESSOR_INPUT
from streaming.schema import (
    BAD_LENGTH,
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_FIELD,
    OUT_OF_RANGE,
    QUARANTINE_VALUE_MAX_CHARS,
    UNKNOWN_FIELD,
    UNKNOWN_SCHEMA,
    WRONG_TYPE,
)

SAMPLES: TypeAdapter[Sample] = TypeAdapter(Annotated[Sample, Field(discriminator="schema_")])
"""Every sample model, chosen by the record's ``schema``: one parse and validation of a JSON record whatever its
kind. Validated strictly, as JSON is typed: ``"topic": 12345`` is not the topic "12345", nor ``"cycle": "7"`` the
cycle 7."""
KINDS: dict[type, str] = {PartitionSample: "p", ReplicaSample: "r", PartitionChange: "m", BrokerChange: "b"}
"""The processor's kinds of record, by model (a cycle sample has none: nothing downstream reads it)."""
_INPUT_TYPES: dict[str, DataType] = {"bucket": IntegerType(), "kind": StringType(), "sample": StringType(),
                                     "sample_time_ms": LongType(), "cycle": LongType(), "batch": BinaryType()}
INPUT_SCHEMA = StructType([StructField(name, _INPUT_TYPES[name], nullable=name != "bucket")
                           for name in PROCESSOR_INPUT])
"""The processor's input rows (:data:`streaming.processor.PROCESSOR_INPUT`). The bucket is the state's key: its
type, never null, is part of the state store's key schema, which a checkpoint records and Spark holds every later
version of the query to."""
ARROW_INPUT = to_arrow_schema(INPUT_SCHEMA)
QUARANTINE_FIELDS = ("reason", "partition", "offset", "raw", "raw_chars", "key")
"""What the quarantine keeps of a bad record, carried through the processor as JSON (``key`` in base64): ``raw``
cut to :data:`QUARANTINE_VALUE_MAX_CHARS`, ``raw_chars`` its whole length when it was cut."""
QUARANTINE_VALUE_MAX_BYTES = 48_000
"""How much of a batch record that cannot be read the quarantine keeps (base64: 64 kB of text)."""

_RANGE = {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}
_LENGTH = {"too_short", "too_long", "string_too_short", "string_too_long"}
_NOT_AN_OBJECT = {"model_type", "dict_type", "model_attributes_type"}
_NO_SCHEMA = {"union_tag_not_found", "union_tag_invalid"}


class Verdict(NamedTuple):
    """A JSON record judged: its quarantine reason, or the sample it holds."""

    reason: str | None
    sample: Sample | None


def judge(value: bytes | None) -> Verdict:
    """The record as a sample (:data:`SAMPLES`), or the reason it is quarantined with: ``<kind>`` or
    ``<kind>:<field>`` (:data:`streaming.schema.QUARANTINE_REASONS`; a field inside a list as ``isr[]`` or
    ``replica_offsets[].log_end_offset``), the first failed check in the model's field order."""
    if value is None:
        return Verdict(MALFORMED_JSON, None)
    try:
        return Verdict(None, SAMPLES.validate_json(value, strict=True))
    except ValidationError as exc:
        return Verdict(_reason(value, exc), None)


def _reason(value: bytes, exc: ValidationError) -> str:
    try:
        value.decode()
    except UnicodeDecodeError:
        return INVALID_UTF8
    try:
        from_json(value, allow_inf_nan=False)  # standard JSON: NaN and Infinity are not (the validator reads them)
    except ValueError:
        return MALFORMED_JSON
    error = exc.errors(include_url=False, include_context=False)[0]
    kind, loc, given = error["type"], error["loc"], error.get("input")
    if kind == "json_invalid" or (kind in _NOT_AN_OBJECT and not loc):
        return MALFORMED_JSON
    if kind in _NO_SCHEMA:
        return UNKNOWN_SCHEMA
    where = _where(loc[1:] if loc and loc[0] in SAMPLE_MODELS else loc)
    if kind == "extra_forbidden":
        return f"{UNKNOWN_FIELD}:{where}"
    if kind == "missing" or given is None:
        return f"{MISSING_FIELD}:{where}"  # a required field given null is missing
    if kind in _RANGE:
        # a number no 64-bit integer holds is not of the field's type (every integer of a record is 64 bits at
        # most: the batches' Arrow columns, the state's arrays)
        outside = isinstance(given, int) and not -INT64_MAX - 1 <= given <= INT64_MAX
        return f"{WRONG_TYPE if outside else OUT_OF_RANGE}:{where}"
    if kind in _LENGTH:
        return f"{BAD_LENGTH}:{where}"
    return f"{WRONG_TYPE}:{where}"


def _where(loc: Sequence[int | str]) -> str:
    """A field's path as the reasons name it: ``replica_offsets[].log_end_offset`` for pydantic's
    ``('replica_offsets', 0, 'log_end_offset')``."""
    out = ""
    for part in loc:
        out += "[]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _key(sample: Sample) -> str:
    """The state key a sample hashes by: ``cluster/topic/partition``, a cluster's broker changes by its name."""
    if isinstance(sample, BrokerChange):
        return sample.cluster
    return f"{sample.cluster}/{sample.topic}/{sample.partition}"  # type: ignore[union-attr]


def _order(sample: Sample) -> tuple[int, int]:
    """Where the sample goes in time order: a metadata-log change by the controller's time and its offset."""
    if isinstance(sample, (PartitionChange, BrokerChange)):
        return sample.append_time_ms, sample.metadata_offset
    return sample.sample_time_ms, sample.cycle


def read_records(bucket_ids: Sequence[int]) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Kafka records (``key``, ``value``, ``partition``, ``offset``) -> the processor's input rows
    (:data:`INPUT_SCHEMA`, ``mapInArrow``): a row per valid JSON sample the processor takes (its ``sample`` as the
    collectors write it, whatever the record's spacing), a row per bucket the task's batch records reach (one IPC
    stream of their valid entries: :func:`streaming.batches.split_records`), a row of kind
    :data:`~streaming.batches.QUARANTINED` per bad record or entry, with what the quarantine keeps as its
    ``sample``, and a row of kind :data:`~streaming.batches.HEARD` per bucket naming the clusters the task read
    partition samples of."""
    ids = list(bucket_ids)

    def json_row(key: bytes | None, value: bytes | None, partition: int, offset: int, clusters: set[str]
                 ) -> tuple[Any, ...] | None:
        reason, sample = judge(value)
        if sample is None:
            raw = None if value is None else value.decode(errors="replace")
            return quarantine(str(reason), partition, offset, raw, None if raw is None else len(raw), key)
        kind = KINDS.get(type(sample))
        if kind is None:
            return None
        if isinstance(sample, PartitionSample):
            clusters.add(sample.cluster)
        time_ms, cycle = _order(sample)
        return bucket_of(_key(sample), ids), kind, to_json(sample).decode(), time_ms, cycle, None

    def quarantine(reason: str, partition: int, offset: int, raw: str | None, chars: int | None, key: bytes | None
                   ) -> tuple[Any, ...]:
        """``raw``: the value as the quarantine shows it, or its start; ``chars``: the whole value's length."""
        raw_chars = None
        if raw is not None and chars is not None and (chars > len(raw) or len(raw) > QUARANTINE_VALUE_MAX_CHARS):
            raw, raw_chars = raw[:QUARANTINE_VALUE_MAX_CHARS], chars
        kept = json.dumps({"reason": reason, "partition": partition, "offset": offset, "raw": raw,
                           "raw_chars": raw_chars, "key": None if key is None else base64.b64encode(key).decode()})
        return ids[partition % len(ids)], QUARANTINED, kept, None, None, None  # any bucket: spread by partition

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        values: list[bytes] = []
        wheres: list[tuple[int, int, bytes | None]] = []
        clusters: set[str] = set()
        for records in batches:
            rows: list[tuple[Any, ...]] = []
            columns = [records.column(name).to_pylist() for name in ("key", "value", "partition", "offset")]
            for key, value, partition, offset in zip(*columns, strict=True):
                if value is not None and value[:len(IPC_MARKER)] == IPC_MARKER:
                    values.append(value)
                    wheres.append((partition, offset, key))
                elif (row := json_row(key, value, partition, offset, clusters)) is not None:
                    rows.append(row)
            if rows:
                yield _batch(rows)
        rows = []
        if values:
            shares, quarantined, sampled = split_task_records(values, ids)
            clusters.update(sampled)
            rows = [(bucket_id, BATCH, None, None, None, share) for bucket_id, share in shares.items()]
            for index, reason, entry, chars in quarantined:
                partition, offset, key = wheres[index]
                if not entry:  # a whole record: its bytes' start in base64, and the whole record's base64 length
                    whole = len(values[index])
                    entry, chars = base64.b64encode(values[index][:QUARANTINE_VALUE_MAX_BYTES]).decode(), \
                        4 * ((whole + 2) // 3)
                rows.append(quarantine(reason, partition, offset, entry, chars, key))
        if clusters:  # every bucket hears which clusters are sampled, also one without any of their samples
            heard = json.dumps(sorted(clusters))
            rows += [(bucket_id, HEARD, heard, None, None, None) for bucket_id in ids]
        if rows:
            yield _batch(rows)
    return read


def _batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(list(column), field.type) for column, field in
                                       zip(zip(*rows, strict=True), ARROW_INPUT, strict=True)], schema=ARROW_INPUT)


def processor_input(records: DataFrame, bucket_ids: Sequence[int]) -> DataFrame:
    """The Kafka source's records as the processor's input rows (:func:`read_records`)."""
    kafka = records.select("key", "value", "partition", "offset")
    return kafka.mapInArrow(read_records(bucket_ids), INPUT_SCHEMA)


def quarantined_records(payloads: list[str]) -> pd.DataFrame:
    """The processor's KIND_QUARANTINE payloads back as the quarantine's columns (``key`` as bytes)."""
    bad = pd.DataFrame([json.loads(p) for p in payloads], columns=list(QUARANTINE_FIELDS))
    bad["key"] = [None if k is None else base64.b64decode(k) for k in bad["key"]]
    return bad

