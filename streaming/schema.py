"""Spark schemas and validation, derived from the pydantic records (replmon.contracts.samples and .events).

Nothing here spells a field out: the Spark StructType of each record and the checks a sample must pass (required
fields, types, bounds, lengths) are read off the pydantic models, so a field added there is parsed and
validated here without a second definition.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from replmon.contracts.fields import Bounds, annotated, json_name, unwrap


def spark_type(annotation: Any) -> DataType:
    base, _, _ = unwrap(annotation)
    origin = get_origin(base)
    if origin is list:
        return ArrayType(spark_type(get_args(base)[0]), containsNull=False)
    if origin is dict:
        key, value = get_args(base)
        return MapType(spark_type(key), spark_type(value))
    if origin is Literal:
        return StringType()
    if isinstance(base, type):
        if issubclass(base, BaseModel):
            return spark_schema(base)
        if issubclass(base, bool):
            return BooleanType()
        if issubclass(base, Enum) or issubclass(base, str):
            return StringType()
        if issubclass(base, int):
            return LongType()
        if issubclass(base, float):
            return DoubleType()
    raise TypeError(f"no Spark type for {annotation!r}")


def spark_schema(model: type[BaseModel]) -> StructType:
    """The StructType of a pydantic model's JSON form (aliases as names)."""
    return StructType([
        StructField(json_name(name, f), spark_type(f.annotation), nullable=True)
        for name, f in model.model_fields.items()
    ])



def union_struct(*models: type[BaseModel]) -> StructType:
    """Every field of ``models`` in one StructType (first appearance order), for parsing a record once whatever
    its model; a field name the models type differently is refused."""
    fields: dict[str, StructField] = {}
    for model in models:
        for f in spark_schema(model).fields:
            seen = fields.setdefault(f.name, f)
            if seen.dataType != f.dataType:
                raise TypeError(f"field {f.name!r} is {seen.dataType.simpleString()} in one model and "
                                f"{f.dataType.simpleString()} in {model.__name__}")
    return StructType(list(fields.values()))

# ---------------------------------------------------------------------------------------------- validation
MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
UNKNOWN_FIELD = "unknown_field"
UNKNOWN_SCHEMA = "unknown_schema"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
OUT_OF_RANGE = "out_of_range"
BAD_LENGTH = "bad_length"
QUARANTINE_REASONS = (MALFORMED_JSON, INVALID_UTF8, UNKNOWN_SCHEMA, UNKNOWN_FIELD, MISSING_FIELD, WRONG_TYPE,
                      OUT_OF_RANGE, BAD_LENGTH)


class Sql:
    """A Spark SQL expression as text: the checks below are built in Python and handed to the JVM as one
    expression per column (``F.expr``), not as a PySpark ``Column`` per operation, each of which is a Py4J round
    trip (~20,000 of them for the checks of every sample model: seconds of every job start, docs/benchmarks.md,
    "Job start-up"). The operations are those of ``Column`` the checks use, and parse to the same expressions."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __getitem__(self, key: str) -> Sql:
        return Sql(f"{self.text}[{literal(key)}]")

    getItem = __getitem__

    def isNull(self) -> Sql:  # Column's names: the checks read alike on both
        return Sql(f"({self.text} IS NULL)")

    def isNotNull(self) -> Sql:
        return Sql(f"({self.text} IS NOT NULL)")

    def __and__(self, other: Sql) -> Sql:
        return Sql(f"({self.text} AND {other.text})")

    def __lt__(self, other: Sql) -> Sql:
        return Sql(f"({self.text} < {other.text})")

    def __gt__(self, other: Sql) -> Sql:
        return Sql(f"({self.text} > {other.text})")


def literal(value: str | int | None) -> Sql:
    """A literal: a string quoted and escaped as Spark's SQL parser reads it, an integer as it is, None as NULL."""
    if value is None:
        return Sql("NULL")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"no SQL literal for {value!r}")
    if isinstance(value, int):
        return Sql(str(value))
    return Sql("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'")


def _call(name: str, *args: Sql) -> Sql:
    return Sql(f"{name}({', '.join(a.text for a in args)})")


_LAMBDA_NAMES = itertools.count()


def _exists(values: Sql, check: Callable[[Sql], Sql]) -> Sql:
    """Spark's ``exists`` with a lambda of its own variable name (a nested list's lambda shadows none)."""
    x = Sql(f"x_{next(_LAMBDA_NAMES)}")
    return Sql(f"exists({values.text}, {x.text} -> {check(x).text})")


def column(expression: Sql) -> Column:
    """The expression as a PySpark column: one Py4J call."""
    return F.expr(expression.text)


def _scalar_checks(value: Sql, bounds: Bounds, base: Any, where: str) -> list[tuple[Sql, str]]:
    checks: list[tuple[Sql, str]] = []
    if isinstance(base, type) and issubclass(base, int) and not issubclass(base, bool):
        if bounds.ge is not None:
            checks.append((value < literal(bounds.ge), f"{OUT_OF_RANGE}:{where}"))
        if bounds.le is not None:
            checks.append((value > literal(bounds.le), f"{OUT_OF_RANGE}:{where}"))
    if bounds.min_len is not None or bounds.max_len is not None:
        length = _call("size", value) if get_origin(base) is list else _call("length", value)
        if bounds.min_len is not None:
            checks.append((length < literal(bounds.min_len), f"{BAD_LENGTH}:{where}"))
        if bounds.max_len is not None:
            checks.append((length > literal(bounds.max_len), f"{BAD_LENGTH}:{where}"))
    return checks


def violations(model: type[BaseModel], parsed: Sql,
               raw_field: Callable[[str], Sql] | None) -> list[tuple[Sql, str]]:
    """Every check a JSON record must pass to be a valid ``model``: (bad-condition, reason) pairs. ``parsed`` is the
    record parsed with the model's schema; ``raw_field(name)`` gives a field's raw JSON text (null when absent),
    which tells a missing field from a null one and a value of the wrong type from a missing one; without it, a
    null field is a missing one."""
    out: list[tuple[Sql, str]] = []
    for name, f in model.model_fields.items():
        key = json_name(name, f)
        raw = raw_field(key) if raw_field is not None else None
        out += _field_violations(parsed[key], raw, annotated(f), f.is_required(), key)
    return out


def _field_violations(value: Sql, raw_json: Sql | None, annotation: Any, required: bool,
                      where: str) -> list[tuple[Sql, str]]:
    base, optional, bounds = unwrap(annotation)
    out: list[tuple[Sql, str]] = []
    if required and not optional:
        if raw_json is not None:
            out.append((raw_json.isNull() & value.isNull(), f"{MISSING_FIELD}:{where}"))
            out.append((raw_json.isNotNull() & value.isNull(), f"{WRONG_TYPE}:{where}"))
        else:
            out.append((value.isNull(), f"{MISSING_FIELD}:{where}"))
    elif raw_json is not None:
        out.append((raw_json.isNotNull() & value.isNull(), f"{WRONG_TYPE}:{where}"))
    out += [(value.isNotNull() & cond, reason) for cond, reason in _scalar_checks(value, bounds, base, where)]
    origin = get_origin(base)
    if origin is list:
        (item_type,) = get_args(base)
        item_checks = _item_check_builder(item_type, f"{where}[]")
        for reason, build in item_checks:
            out.append((value.isNotNull() & _exists(value, build), reason))
    elif isinstance(base, type) and issubclass(base, BaseModel):
        for name, f in base.model_fields.items():
            key = json_name(name, f)
            out += [(value.isNotNull() & c, r)
                    for c, r in _field_violations(value[key], None, annotated(f), f.is_required(), f"{where}.{key}")]
    return out


def _item_check_builder(item_type: Any, where: str) -> list[tuple[str, Callable[[Sql], Sql]]]:
    """(reason, lambda x -> bad-condition) for the items of a list (checked with Spark's ``exists``)."""
    _, optional, _ = unwrap(item_type)
    probe = _field_violations(literal(None), None, item_type, not optional, where)
    return [(reason, _make_item_lambda(item_type, not optional, where, index))
            for index, (_cond, reason) in enumerate(probe)]


def _make_item_lambda(item_type: Any, required: bool, where: str, index: int) -> Callable[[Sql], Sql]:
    def build(x: Sql) -> Sql:
        return _field_violations(x, None, item_type, required, where)[index][0]

    return build


def string_fields(model: type[BaseModel], where: str = "") -> dict[str, str]:
    """JSON name -> reason path of every field of ``model`` whose JSON value must be a string (text, an enum, a
    literal), nested models and the models in lists included; a name met twice keeps the outermost path."""
    out: dict[str, str] = {}
    nested: dict[str, str] = {}
    for name, f in model.model_fields.items():
        key = json_name(name, f)
        base, _, _ = unwrap(f.annotation)
        if get_origin(base) is list:
            (item,) = get_args(base)
            base, where_item = unwrap(item)[0], f"{where}{key}[]."
        else:
            where_item = f"{where}{key}."
        if isinstance(base, type) and issubclass(base, BaseModel):
            for k, path in string_fields(base, where_item).items():
                nested.setdefault(k, path)
        elif get_origin(base) is Literal or (isinstance(base, type) and issubclass(base, str)):
            out.setdefault(key, f"{where}{key}")
    return {**nested, **out}


def text_not_string(model: type[BaseModel], raw: Column) -> Column:
    """``wrong_type:<field>`` when the raw record gives a string field a value that is not a JSON string (nor
    null), else null. Spark's parser renders any JSON value as text for a string field (``"topic": 12345`` reads
    as the topic "12345"), and its map of raw fields has a string's text without its quotes: only the record's own
    text tells. A regex over it finds the field's name followed by a value that does not open with a quote."""
    checks = [(raw.rlike('"' + re.escape(key) + r'"\s*:\s*(?!null\b)[^"\s]'), f"{WRONG_TYPE}:{path}")
              for key, path in string_fields(model).items()]
    return F.coalesce(*[F.when(cond, F.lit(reason)) for cond, reason in checks], F.lit(None).cast("string"))


def first_violation(checks: list[tuple[Sql, str]]) -> Sql:
    """The reason of the first failed check, or null when the record is valid."""
    whens = [Sql(f"CASE WHEN {cond.text} THEN {literal(reason).text} END") for cond, reason in checks]
    return _call("coalesce", *whens, Sql("CAST(NULL AS STRING)"))
