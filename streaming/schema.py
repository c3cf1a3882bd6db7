"""Spark schemas derived from the pydantic records (replmon.contracts.samples and .events), and the quarantine's
reasons.

Nothing here spells a field out: the Spark StructType of each record is read off its pydantic model, so a field
added there is written here without a second definition. The records themselves are validated by the models
(:mod:`streaming.parse`, :mod:`streaming.batches`), each failure named by one of :data:`QUARANTINE_REASONS`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
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

from replmon.contracts.fields import json_name, unwrap


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


# ------------------------------------------------------------------------------------------ the quarantine
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
QUARANTINE_VALUE_MAX_CHARS = 64 * 1024
"""How much of a bad record's value (or a batch's bad entry, as JSON) the quarantine keeps. Cut where the record is
read (:mod:`streaming.parse`): a bad entry of a batch record holds up to what the record decompresses to
(MAX_STREAM_BYTES), and whole it would cross the JVM and the driver."""
