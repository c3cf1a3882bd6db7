"""What a pydantic field's annotation says: its bare type, whether it may be null, its bounds, its JSON name. The
record contracts' other forms (the job's Spark schemas and checks, the columnar batch's Arrow schema) are read off
the models through these."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

_NONE = type(None)


@dataclass(frozen=True)
class Bounds:
    ge: int | None = None
    le: int | None = None
    min_len: int | None = None
    max_len: int | None = None

    def merged(self, other: Bounds) -> Bounds:
        return Bounds(
            ge=other.ge if other.ge is not None else self.ge,
            le=other.le if other.le is not None else self.le,
            min_len=other.min_len if other.min_len is not None else self.min_len,
            max_len=other.max_len if other.max_len is not None else self.max_len,
        )


def _bounds_of(meta: list[Any]) -> Bounds:
    b = Bounds()
    for item in meta:
        if isinstance(item, FieldInfo):
            b = b.merged(_bounds_of(list(item.metadata)))
        elif isinstance(item, annotated_types.Ge):
            b = b.merged(Bounds(ge=int(item.ge)))  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Gt):
            b = b.merged(Bounds(ge=int(item.gt) + 1))  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Le):
            b = b.merged(Bounds(le=int(item.le)))  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.MinLen):
            b = b.merged(Bounds(min_len=item.min_length))
        elif isinstance(item, annotated_types.MaxLen):
            b = b.merged(Bounds(max_len=item.max_length))
    return b


def unwrap(annotation: Any) -> tuple[Any, bool, Bounds]:
    """(the bare type, whether None is allowed, the bounds of Annotated layers)."""
    optional = False
    bounds = Bounds()
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *meta = get_args(annotation)
            bounds = bounds.merged(_bounds_of(meta))
            annotation = base
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not _NONE]
            optional = optional or len(args) < len(get_args(annotation))
            if len(args) != 1:
                raise TypeError(f"unions other than Optional are not derivable: {annotation}")
            annotation = args[0]
        else:
            return annotation, optional, bounds


def json_name(name: str, field: FieldInfo) -> str:
    return field.alias or name


def annotated(f: FieldInfo) -> Any:
    """The field's annotation with the constraints given on the field itself (``Field(max_length=...)``)."""
    return Annotated[f.annotation, *f.metadata] if f.metadata else f.annotation
