"""Parsing and validation of the samples topic's records, in Spark: each Kafka record to one row with its verdict
(``reason``, null when valid), its parsed sample as the processor takes it and its state bucket; and the rows the
processor takes (valid partition and replica samples, and every bad record with what the quarantine keeps).

The checks derive from the pydantic models of :mod:`replmon.contracts.samples` (:mod:`streaming.schema`): nothing
here spells a field out. The job never dies on bad input: a record that fails is quarantined with its reason.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType

from replmon.contracts.batches import IPC_MARKER
from replmon.contracts.samples import (
    BROKER_CHANGE_SCHEMA,
    PARTITION_CHANGE_SCHEMA,
    PARTITION_SCHEMA,
    REPLICA_SCHEMA,
    SAMPLE_MODELS,
    SampleModel,
)
from streaming import schema
from streaming.batches import split_rows
from streaming.processor import BATCH, PROCESSOR_INPUT, QUARANTINED

SAMPLE_STRUCT = schema.union_struct(*SAMPLE_MODELS.values())
"""Every field of the sample models: any record is parsed once, whatever its kind."""
KEYED = (PARTITION_SCHEMA, REPLICA_SCHEMA, PARTITION_CHANGE_SCHEMA, BROKER_CHANGE_SCHEMA)
"""The kinds of record the processor takes, each to one state bucket: those of a partition (to its bucket) and a
cluster's broker changes (no topic, no partition: to the bucket of the cluster's name)."""
TOP_LEVEL = ArrayType(MapType(StringType(), StringType())).simpleString()
"""A record wrapped in ``[...]``, parsed as a list of objects whose fields are raw JSON text (null for JSON
null): one parse tells every field's presence, and that the record is exactly one JSON object (Spark's parser
stops after the first value; inside brackets, anything after it breaks the array)."""
STRICT_JSON = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
"""Spark's JSON parser held to standard JSON (its other leniencies are off by default): a single-quoted record or
NaN is malformed, not read as if it were JSON."""
CANONICAL_JSON = {"ignoreNullFields": "false"}
"""Spark's to_json written like the collectors' pydantic ``to_json``: every field, nulls included."""

Model = SampleModel


def _violations(model: Model, parsed: schema.Sql, fields: schema.Sql | None) -> list[tuple[schema.Sql, str]]:
    """:func:`streaming.schema.violations`, with each field's raw JSON looked up in ``fields`` (the record parsed
    once as a map) instead of one ``get_json_object`` per field, each of which re-parses the whole record.
    Without ``fields`` (a record known to hold every field of the model, see :func:`_canonical`), a null field
    is a missing one."""
    return schema.violations(model, parsed, None if fields is None else fields.getItem)


def _first_violation(model: Model, parsed: schema.Sql, fields_sql: schema.Sql, fields: Column) -> Column:
    """The reason of the first failed check, else ``unknown_field:<name>`` for a field the model does not have
    (its models forbid extra fields), else null. ``fields`` and ``fields_sql``: the same map of raw fields."""
    known = F.array(*[F.lit(schema.json_name(n, f)) for n, f in model.model_fields.items()])
    unknown = F.array_except(F.map_keys(fields), known)
    return F.coalesce(schema.column(schema.first_violation(_violations(model, parsed, fields_sql))),
                      F.when(F.size(unknown) > 0, F.concat(F.lit(f"{schema.UNKNOWN_FIELD}:"), F.array_min(unknown))))


def _as_model(sample: Column, model: Model) -> Column:
    """The union-parsed record as ``model``'s struct (its fields, in its order)."""
    return F.struct(*[sample[schema.json_name(n, f)].alias(schema.json_name(n, f)) for n, f in
                      model.model_fields.items()])


def _canonical(written: Column, raw: Column) -> Column:
    """The record is exactly what the collectors write (pydantic ``to_json``: compact, every field, nulls
    included), ``written`` being its parse written back: one JSON object, nothing after it, no field the model
    lacks, none missing. Such a record needs no map parse: the checks on the parse alone give its reason."""
    return written == raw


def _once(expression: Column) -> Column:
    """``expression``, made nondeterministic (spark_partition_id() is never negative, but the optimizer cannot
    know), so that it is evaluated once per row where it is projected. The filter on ``reason``
    (:func:`processor_input`) is otherwise pushed below the projections with the expressions it reads inlined:
    every reference to a parsed record replaced by its from_json, which parsed each record hundreds of times
    (~20x slower), and the ~2,800 expressions of ``reason`` itself, which Spark then generated Java code for a
    second time in every task (the checks of list items keep these projections out of whole-stage code
    generation; ~10% of the read stage's CPU: docs/benchmarks.md, "Streaming job")."""
    return F.when(F.spark_partition_id() >= 0, expression)


def parse_samples(raw: DataFrame, bucket_ids: Sequence[int]) -> DataFrame:
    """Kafka records -> one row per record: ``reason`` (null when valid), ``kind`` ('p', 'r', 'm', 'b', 'c'), the parsed
    samples ``p``/``r`` and, as the processor takes it, ``sample``: that parse written back as the collectors
    write it (compact JSON, nulls included; for a record written that way, the record itself), the state
    ``bucket`` (one of ``bucket_ids``: :mod:`streaming.buckets`), and what the quarantine needs (raw value, key,
    offset).

    Two paths, one verdict. Every record is parsed once (``SAMPLE_STRUCT``). A record written the way the
    collectors write (:func:`_canonical`) is judged by the checks on that parse alone; any other record (other
    formatting, a field missing or extra, trailing content, not JSON) is parsed a second time as a map of raw
    fields, which tells a missing field from one of the wrong type and finds extra fields
    (docs/benchmarks.md, "Streaming job": the second parse on every record halved the throughput)."""
    batch_record = F.substring(F.col("value"), 1, len(IPC_MARKER)) == F.lit(bytearray(IPC_MARKER))
    text = F.col("value").cast("string")
    # JSON is UTF-8: a record that is not goes to the quarantine with its bad bytes replaced (U+FFFD), and
    # nothing downstream ever sees an invalid string (Arrow refuses one, failing the whole micro-batch). A batch
    # record is binary, read by the split (streaming.batches): neither its text nor its UTF-8 check is made (both
    # scan the whole value; they were ~45% of the read tasks' JVM CPU with batches of ~1,500 samples)
    value = F.when(~batch_record, F.make_valid_utf8(text))
    rows = raw.select(value.alias("raw"), F.col("key"), F.col("partition"), F.col("offset"),
                      _once(F.when(~batch_record, F.from_json(value, SAMPLE_STRUCT, STRICT_JSON))).alias("u"),
                      F.when(~batch_record, F.is_valid_utf8(text)).alias("utf8"),
                      F.coalesce(batch_record, F.lit(False)).alias("batched"),
                      F.when(batch_record, F.col("value")).alias("batch"))
    name = F.col("u")["schema"]
    models = {s: F.when(name == s, _as_model(F.col("u"), m)) for s, m in SAMPLE_MODELS.items()}
    rows = rows.select("*", *[col.alias(f"m{i}") for i, col in enumerate(models.values())])
    parsed = {s: F.col(f"m{i}") for i, s in enumerate(models)}
    parsed_sql = {s: schema.Sql(f"m{i}") for i, s in enumerate(models)}
    rows = rows.select("*", *[_once(F.to_json(parsed[s], CANONICAL_JSON)).alias(f"j{i}")
                              for i, s in enumerate(models)])
    written = {s: F.col(f"j{i}") for i, s in enumerate(models)}

    fast = F.col("utf8") & F.coalesce(*[
        F.when(name == s, _canonical(written[s], F.col("raw"))
               & schema.column(schema.first_violation(_violations(m, parsed_sql[s], None))).isNull())
        for s, m in SAMPLE_MODELS.items()], F.lit(False))
    rows = rows.select("*", _once(fast).alias("fast"))
    wrapped = F.from_json(F.concat(F.lit("["), F.col("raw"), F.lit("]")), TOP_LEVEL, STRICT_JSON)
    rows = rows.select("*", _once(F.when(~F.col("fast") & ~F.col("batched"), wrapped)).alias("wrapped"))
    fields_sql = schema.Sql("CASE WHEN (size(wrapped) = 1) THEN wrapped[0] END")
    fields = schema.column(fields_sql)
    slow_name = fields["schema"]
    slow: Column = (
        F.when(F.col("raw").isNull(), F.lit(schema.MALFORMED_JSON))
        .when(~F.col("utf8"), F.lit(schema.INVALID_UTF8))
        .when(fields.isNull(), F.lit(schema.MALFORMED_JSON))
        .when(slow_name.isNull() | ~slow_name.isin(*SAMPLE_MODELS), F.lit(schema.UNKNOWN_SCHEMA))
    )
    for s, m in SAMPLE_MODELS.items():
        slow = slow.when(slow_name == s, F.coalesce(schema.text_not_string(m, F.col("raw")),
                                                    _first_violation(m, parsed_sql[s], fields_sql, fields)))
    reason = F.when(F.col("fast") | F.col("batched"), F.lit(None).cast("string")).otherwise(slow)
    kind = (F.when(F.col("batched"), F.lit(BATCH))
            .when(name == PARTITION_SCHEMA, F.lit("p"))
            .when(name == REPLICA_SCHEMA, F.lit("r"))
            .when(name == PARTITION_CHANGE_SCHEMA, F.lit("m"))
            .when(name == BROKER_CHANGE_SCHEMA, F.lit("b")).otherwise(F.lit("c")))

    def either(field_name: str) -> Column:
        return F.when(name.isin(*KEYED), F.col("u")[field_name])

    key = F.concat_ws("/", either("cluster"), either("topic"), either("partition").cast("string"))
    # a partition change is ordered among the samples by the controller's time, and among its kind by its offset
    time_ms = F.coalesce(either("sample_time_ms"), either("append_time_ms"))
    return rows.select(
        "raw", "key", "partition", "offset", parsed[PARTITION_SCHEMA].alias("p"),
        parsed[REPLICA_SCHEMA].alias("r"),
        F.coalesce(*[written[s] for s in KEYED]).alias("sample"),
        _once(reason).alias("reason"), kind.alias("kind"),
        F.element_at(F.array(*map(F.lit, bucket_ids)),
                     (F.pmod(F.xxhash64(key), F.lit(len(bucket_ids))) + 1).cast("int")).alias("bucket"),
        time_ms.alias("sample_time_ms"), F.coalesce(either("cycle"), either("metadata_offset")).alias("cycle"),
        "batch",
    )


QUARANTINE_FIELDS = ("reason", "partition", "offset", "raw", "key")
"""What the quarantine keeps of a bad record, carried through the processor as JSON (``key`` in base64)."""


def processor_input(parsed: DataFrame, bucket_ids: Sequence[int]) -> DataFrame:
    """The rows of :func:`parse_samples` the processor takes, in its columns: valid partition and replica
    samples, partition and broker changes, each batch record's shares per state bucket
    (:func:`streaming.batches.split_rows`: its bad entries, or the whole record when it cannot be read, quarantined
    there), and every bad record as kind :data:`~streaming.processor.QUARANTINED` with its quarantine fields as
    ``sample``. (A valid cycle sample is neither: nothing downstream reads it.)"""
    bad = F.col("reason").isNotNull()
    key = F.base64("key").alias("key")
    quarantined = F.to_json(F.struct(*QUARANTINE_FIELDS[:-1], key), CANONICAL_JSON)
    where = F.to_json(F.struct("partition", "offset", key), CANONICAL_JSON)  # a batch's, for its quarantine
    rows = (parsed.filter(bad | F.col("kind").isin("p", "r", "m", "b", BATCH))
            .withColumns({"kind": F.when(bad, F.lit(QUARANTINED)).otherwise(F.col("kind")),
                          "sample": (F.when(bad, quarantined).when(F.col("kind") == BATCH, where)
                                     .otherwise(F.col("sample")))})
            .select(*PROCESSOR_INPUT))
    return rows.mapInArrow(split_rows(list(bucket_ids)), rows.schema)


def quarantined_records(payloads: list[str]) -> pd.DataFrame:
    """The processor's KIND_QUARANTINE payloads back as the quarantine's columns (``key`` as bytes)."""
    bad = pd.DataFrame([json.loads(p) for p in payloads], columns=list(QUARANTINE_FIELDS))
    bad["key"] = [None if k is None else base64.b64decode(k) for k in bad["key"]]
    return bad
