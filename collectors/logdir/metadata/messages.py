"""A generic reader of Kafka's generated message serialization, driven by the schemas (:mod:`.specs`).

It follows what Kafka's generator (``MessageDataGenerator.generateClassReader``) emits for ``read(Readable,
version)``, field by field in schema order:

- a field not in this version, or tagged in it, takes its default (tagged fields are read later);
- below the message's ``flexibleVersions``: strings have an int16 length, bytes and arrays an int32 length
  (-1 = null); from ``flexibleVersions`` on they are compact: an unsigned varint of length + 1 (0 = null); a
  string or bytes field may carry its own ``flexibleVersions``;
- null is refused for a field outside its ``nullableVersions``; array elements are never null;
- a single (non-array) struct field in its nullable versions has a presence byte (int8, negative = null);
- in flexible versions each struct ends with its tagged fields: an unsigned varint count, then per field its tag,
  its size and its value (always compact); a tag the struct does not know is skipped, a known tag outside the
  field's tagged versions is an error, as in Kafka.

Decoded values: ints for the integer types, float, bool, str (strings; uuids as Kafka's ``Uuid.toString()``, the
URL-safe base64 of the 16 bytes without padding, as topic ids appear everywhere else in Kafka and replmon),
bytes, lists, and dicts for structs keyed by Kafka's JSON names (``partitionId``). Every field of the schema is
in the dict, with its default when this version lacks it, so records of one type have the same keys whatever
their version.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from kafka.record.util import decode_varint

from collectors.logdir.metadata.specs import FieldSpec, FieldType, MessageSpec, StructSpec, Versions, default_value

_FIXED = {name: struct.Struct(fmt) for name, fmt in (
    ("int8", ">b"), ("int16", ">h"), ("uint16", ">H"), ("int32", ">i"), ("uint32", ">I"), ("int64", ">q"),
    ("float64", ">d"))}
_UUID_SIZE = 16
MAX_STRING_LENGTH = 0x7FFF
"""Kafka refuses a longer string (``string field ... had invalid length``)."""
_UNSIGNED_VARINT_MAX_BYTES = 5


class MessageDecodeError(ValueError):
    """Bytes Kafka's generated ``read`` would refuse (``MetadataParseException`` in Kafka's serde)."""


class Readable:
    """A position in a bytes value, read forwards (Kafka's ``Readable``); every read that runs past the end
    raises :class:`MessageDecodeError`."""

    def __init__(self, data: bytes | memoryview, position: int = 0, end: int | None = None) -> None:
        self.data = memoryview(data)
        self.position = position
        self.end = len(self.data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.position

    def take(self, size: int) -> memoryview:
        if size < 0 or size > self.remaining:
            raise MessageDecodeError(f"{size} bytes wanted at byte {self.position}, {self.remaining} left")
        start = self.position
        self.position += size
        return self.data[start:self.position]

    def fixed(self, type_name: str) -> Any:
        layout = _FIXED[type_name]
        return layout.unpack(self.take(layout.size))[0]

    def unsigned_varint(self) -> int:
        """Kafka's ``readUnsignedVarint``: at most 5 bytes. kafka-python decodes zigzag varints; the unsigned
        value is the zigzag encoding of what it returns."""
        start = self.position
        try:
            zigzag, position = decode_varint(self.data, start)
        except (IndexError, ValueError):
            raise MessageDecodeError(f"truncated or invalid varint at byte {start}") from None
        if position > self.end or position - start > _UNSIGNED_VARINT_MAX_BYTES:
            raise MessageDecodeError(f"truncated or invalid unsigned varint at byte {start}")
        self.position = position
        return (zigzag << 1) ^ (zigzag >> 63)


def uuid_text(raw: bytes | memoryview) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode("ascii")


def read_message(spec: MessageSpec, version: int, data: bytes | memoryview, position: int = 0) -> dict[str, Any]:
    """The message ``spec`` of ``version`` serialized in ``data`` from ``position``, every byte of it (bytes left
    over are an error, as in Kafka's ``AbstractApiMessageSerde``)."""
    if version not in spec.valid_versions:
        raise MessageDecodeError(f"{spec.name} has no version {version} (valid: {spec.valid_versions})")
    readable = Readable(data, position)
    fields = _read_struct(spec, spec.struct, version, readable)
    if readable.remaining:
        raise MessageDecodeError(f"{readable.remaining} byte(s) left after {spec.name} v{version}")
    return fields


def _read_struct(message: MessageSpec, struct_spec: StructSpec, version: int, readable: Readable) -> dict[str, Any]:
    if version not in struct_spec.versions:
        raise MessageDecodeError(f"can't read version {version} of {struct_spec.name}")
    flexible = version in message.flexible_versions
    out: dict[str, Any] = {}
    for spec in struct_spec.fields:
        if version in spec.versions and version not in spec.tagged_versions:
            out[spec.json_name] = _read_field(message, spec, version, readable, tagged=False)
        else:
            out[spec.json_name] = default_value(spec, message, version)
    if flexible:
        for _ in range(readable.unsigned_varint()):
            tag = readable.unsigned_varint()
            size = readable.unsigned_varint()
            body = Readable(readable.data, readable.position, readable.position + size)
            readable.take(size)
            tagged = _tagged_field(struct_spec, tag)
            if tagged is None:
                continue  # unknown tag: Kafka keeps it as an unknown tagged field, the JSON shows nothing
            if version not in tagged.versions or version not in tagged.tagged_versions:
                raise MessageDecodeError(f"tag {tag} ({tagged.name}) is not valid for version {version}")
            out[tagged.json_name] = _read_field(message, tagged, version, body, tagged=True)
    return out


def _tagged_field(struct_spec: StructSpec, tag: int) -> FieldSpec | None:
    for spec in struct_spec.fields:
        if spec.tag == tag and _overlap(spec.versions, spec.tagged_versions):
            return spec
    return None


def _overlap(a: Versions, b: Versions) -> bool:
    return max(a.lowest, b.lowest) <= min(a.highest, b.highest)


def _read_field(message: MessageSpec, spec: FieldSpec, version: int, readable: Readable, tagged: bool) -> Any:
    type_ = spec.type
    if type_.is_struct:
        if version in spec.nullable_versions:
            present = readable.unsigned_varint() > 0 if tagged else readable.fixed("int8") >= 0
            if not present:
                return None
        return _read_struct(message, message.struct_of(spec), version, readable)
    if type_.is_array or type_.name in ("string", "bytes", "records"):
        compact = tagged or version in (spec.flexible_versions or message.flexible_versions)
        return _read_variable_length(message, spec, type_, version, readable, compact,
                                     nullable=version in spec.nullable_versions)
    return _read_primitive(type_, readable)


def _read_primitive(type_: FieldType, readable: Readable) -> Any:
    name = type_.name
    if name == "bool":
        return readable.fixed("int8") != 0
    if name == "uuid":
        return uuid_text(readable.take(_UUID_SIZE))
    if name in _FIXED:
        return readable.fixed(name)
    raise MessageDecodeError(f"cannot read type {name}")


def _read_variable_length(message: MessageSpec, spec: FieldSpec, type_: FieldType, version: int,
                          readable: Readable, compact: bool, nullable: bool) -> Any:
    if compact:
        length = readable.unsigned_varint() - 1
    else:
        length = readable.fixed("int16" if type_.name == "string" else "int32")
    if length < 0:
        if not nullable:
            raise MessageDecodeError(f"non-nullable field {spec.name} was serialized as null")
        return None
    if type_.name == "string":
        if length > MAX_STRING_LENGTH:
            raise MessageDecodeError(f"string field {spec.name} had invalid length {length}")
        try:
            return str(readable.take(length), "utf-8")
        except UnicodeDecodeError:
            raise MessageDecodeError(f"string field {spec.name} is not UTF-8") from None
    if type_.name in ("bytes", "records"):
        return bytes(readable.take(length))
    if length > readable.remaining:
        raise MessageDecodeError(f"array field {spec.name} of {length} elements, but only {readable.remaining} "
                                 "bytes remaining")
    element = type_.element
    if element.is_struct:
        struct_spec = message.struct_of(spec)
        return [_read_struct(message, struct_spec, version, readable) for _ in range(length)]
    if element.name in ("string", "bytes"):
        return [_read_variable_length(message, spec, element, version, readable, compact, nullable=False)
                for _ in range(length)]
    return [_read_primitive(element, readable) for _ in range(length)]
