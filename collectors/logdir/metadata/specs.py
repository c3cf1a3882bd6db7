"""Kafka's message schemas (the JSON files its code generator reads), parsed into specs a generic decoder follows.

The metadata record schemas are vendored unchanged from the ``kafka-metadata`` jar of the Kafka version the local
cluster runs (entries ``common/metadata/*.json``, see :data:`VENDORED_FROM`) into ``schemas/`` beside this module;
a test checks each file is byte-identical to the jar's entry. The rules for reading them are Kafka's generator's
(``generator/src/main/java/org/apache/kafka/message/``: ``MessageSpec``, ``StructSpec``, ``FieldSpec``,
``FieldType``, ``Versions``): a field's ``versions`` default to its ``taggedVersions``, absent
``nullableVersions``/``taggedVersions`` mean none, ``default`` is read per type as ``FieldSpec.fieldDefault``
does. The files carry ``//`` comments (the Apache license, notes), which Kafka's Jackson parser allows and
:func:`strip_comments` removes.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

VENDORED_FROM = ("kafka-metadata", "4.4.0", "common/metadata/")
"""The jar (artifact, version) and the folder inside it the files in ``schemas/`` were copied from."""
SCHEMA_DIR = "schemas"
SHORT_MAX = 0x7FFF
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
"""``Uuid.ZERO_UUID.toString()``: the default of a uuid field."""


class SchemaError(ValueError):
    """A schema file Kafka's generator would refuse (or one this decoder does not understand)."""


@dataclass(frozen=True)
class Versions:
    """A range of versions, both ends included; empty when ``lowest > highest`` (Kafka's ``Versions.NONE``)."""

    lowest: int
    highest: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lowest <= version <= self.highest

    @property
    def empty(self) -> bool:
        return self.lowest > self.highest

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.highest == SHORT_MAX:
            return f"{self.lowest}+"
        return str(self.lowest) if self.lowest == self.highest else f"{self.lowest}-{self.highest}"


NONE = Versions(0, -1)


def parse_versions(text: str | None, default: Versions | None) -> Versions | None:
    """Kafka's ``Versions.parse``: ``"3"``, ``"1-4"``, ``"2+"`` (up to Short.MAX_VALUE), ``"none"``; missing or
    blank text gives ``default``."""
    if text is None or not str(text).strip():
        return default
    text = str(text).strip()
    if text == "none":
        return NONE
    try:
        if text.endswith("+"):
            return Versions(int(text[:-1]), SHORT_MAX)
        low, dash, high = text.partition("-")
        return Versions(int(low), int(high if dash else low))
    except ValueError:
        raise SchemaError(f"invalid versions {text!r}") from None


PRIMITIVES = frozenset({"bool", "int8", "int16", "uint16", "uint32", "int32", "int64", "float64", "uuid",
                        "string", "bytes", "records"})
"""Kafka's ``FieldType`` names; any other type is ``[]<element>`` or a struct (a capitalized name)."""
INTEGERS = frozenset({"int8", "int16", "uint16", "uint32", "int32", "int64"})
ARRAY_PREFIX = "[]"


@dataclass(frozen=True)
class FieldType:
    """A field's type as written in the schema: ``int32``, ``[]int32``, ``BrokerEndpoint``, ``[]BrokerEndpoint``."""

    name: str

    @classmethod
    def parse(cls, text: str) -> FieldType:
        text = text.strip()
        if text.startswith(ARRAY_PREFIX):
            element = text[len(ARRAY_PREFIX):]
            if not element or element.startswith(ARRAY_PREFIX):
                raise SchemaError(f"invalid array type {text!r} (no element type, or an array of arrays)")
            cls.parse(element)
        elif text not in PRIMITIVES and not text[:1].isupper():
            raise SchemaError(f"unknown type {text!r}")
        return cls(text)

    @property
    def is_array(self) -> bool:
        return self.name.startswith(ARRAY_PREFIX)

    @property
    def element(self) -> FieldType:
        """The element type of an array."""
        return FieldType(self.name[len(ARRAY_PREFIX):])

    @property
    def is_struct(self) -> bool:
        """A single struct (not an array of them)."""
        return self.name[:1].isupper()

    @property
    def is_struct_array(self) -> bool:
        return self.is_array and self.element.is_struct

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class FieldSpec:
    name: str
    """As in the schema (``PartitionId``)."""
    type: FieldType
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str
    """The schema's ``default`` text, ``""`` when it has none (:func:`default_value` gives the value)."""
    flexible_versions: Versions | None
    """A string or bytes field's own ``flexibleVersions`` (overrides the message's), else None."""
    fields: tuple[FieldSpec, ...] = ()
    """The fields of an inline struct or struct array."""

    @property
    def json_name(self) -> str:
        """Kafka's ``camelCaseName()``: the name in its JSON converters' output (``partitionId``)."""
        return self.name[:1].lower() + self.name[1:]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> FieldSpec:
        try:
            name = str(raw["name"])
            type_ = FieldType.parse(str(raw["type"]))
        except KeyError as missing:
            raise SchemaError(f"field without {missing}: {dict(raw)}") from None
        tagged = parse_versions(raw.get("taggedVersions"), NONE)
        assert tagged is not None
        versions = parse_versions(raw.get("versions"), None if tagged.empty else tagged)
        if versions is None:
            raise SchemaError(f"field {name}: no versions")
        nullable = parse_versions(raw.get("nullableVersions"), NONE)
        assert nullable is not None
        tag = raw.get("tag")
        if (tag is None) != tagged.empty:
            raise SchemaError(f"field {name}: tag {tag} with taggedVersions {tagged}")
        default = raw.get("default")
        default_text = "" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        flexible = parse_versions(raw.get("flexibleVersions"), None)
        fields = tuple(cls.parse(f) for f in raw.get("fields") or ())
        if fields and not (type_.is_struct or type_.is_struct_array):
            raise SchemaError(f"field {name} of type {type_} cannot have fields")
        return cls(name, type_, versions, nullable, tagged, None if tag is None else int(tag), default_text,
                   flexible, fields)


@dataclass(frozen=True)
class StructSpec:
    name: str
    versions: Versions
    fields: tuple[FieldSpec, ...]

    @classmethod
    def parse(cls, name: str, versions: str | None, fields: list[Mapping[str, Any]] | None) -> StructSpec:
        parsed = parse_versions(versions, None)
        if parsed is None:
            raise SchemaError(f"struct {name}: no versions")
        specs = tuple(FieldSpec.parse(f) for f in fields or ())
        tags = [f.tag for f in specs if f.tag is not None]
        if len(set(tags)) != len(tags):
            raise SchemaError(f"struct {name}: duplicate tags {sorted(tags)}")
        return cls(name, parsed, specs)


@dataclass(frozen=True)
class MessageSpec:
    """One schema file: a message (a metadata record type) and the structs it names."""

    name: str
    api_key: int | None
    type: str
    """``metadata``, ``data``, ``request``, ...: the schema's ``type``."""
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec
    common_structs: Mapping[str, StructSpec] = field(default_factory=dict)

    def struct_of(self, spec: FieldSpec) -> StructSpec:
        """The struct a struct (array) field holds: its inline fields, else the common struct of its type's name
        (inline fields take the field's versions, as Kafka's generator does)."""
        type_name = (spec.type.element if spec.type.is_array else spec.type).name
        if spec.fields:
            return StructSpec(type_name, spec.versions, spec.fields)
        try:
            return self.common_structs[type_name]
        except KeyError:
            raise SchemaError(f"{self.name}.{spec.name}: no struct {type_name}") from None


def strip_comments(text: str) -> str:
    """The JSON without its ``//`` line and ``/* */`` block comments (outside strings), which Kafka's schema
    files carry and ``json`` refuses."""
    return _COMMENT.sub(lambda m: m.group(1) or "", text)


_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)


def parse_message_spec(text: str) -> MessageSpec:
    """A schema file's text into its spec."""
    try:
        raw = json.loads(strip_comments(text))
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc}") from None
    try:
        name = str(raw["name"])
        valid = parse_versions(raw["validVersions"], None)
        flexible = parse_versions(raw["flexibleVersions"], NONE)
    except KeyError as missing:
        raise SchemaError(f"schema without {missing}") from None
    if valid is None or flexible is None:
        raise SchemaError(f"{name}: no validVersions or flexibleVersions")
    if not flexible.empty and flexible.highest != SHORT_MAX:
        raise SchemaError(f"{name}: flexibleVersions {flexible} is not open-ended")
    common = {str(s["name"]): StructSpec.parse(str(s["name"]), s.get("versions"), s.get("fields"))
              for s in raw.get("commonStructs") or ()}
    api_key = raw.get("apiKey")
    return MessageSpec(name, None if api_key is None else int(api_key), str(raw.get("type", "")), valid, flexible,
                       StructSpec.parse(name, raw["validVersions"], raw.get("fields")), common)


def default_value(spec: FieldSpec, message: MessageSpec, version: int) -> Any:
    """The value a field takes when it is absent (not in this version, or tagged and not written): Kafka's
    ``FieldSpec.fieldDefault``, as a decoded value (uuid as Kafka's base64 text, a struct as the dict of its fields'
    defaults, an array without ``"null"`` default as an empty list)."""
    type_, text = spec.type, spec.default
    if type_.is_array:
        return None if text == "null" else []
    if type_.is_struct:
        if text == "null":
            return None
        struct = message.struct_of(spec)
        return {f.json_name: default_value(f, message, version) for f in struct.fields}
    name = type_.name
    if name == "bool":
        return text.lower() == "true"
    if name in INTEGERS:
        if not text:
            return 0
        negative = text.startswith("-")
        digits = text[1:] if negative else text
        value = int(digits[2:], 16) if digits.startswith("0x") else int(digits)
        return -value if negative else value
    if name == "float64":
        return float(text) if text else 0.0
    if name == "uuid":
        return text or ZERO_UUID
    if name == "string":
        return None if text == "null" else text
    if name in ("bytes", "records"):
        return None if text == "null" or name == "records" else b""
    raise SchemaError(f"{spec.name}: no default for type {type_}")


@dataclass(frozen=True)
class MetadataSpecs:
    """The metadata record types by api key (the ``apiKey`` of each ``"type": "metadata"`` schema)."""

    by_api_key: Mapping[int, MessageSpec]

    def get(self, api_key: int) -> MessageSpec | None:
        return self.by_api_key.get(api_key)


def vendored_schema_files() -> dict[str, bytes]:
    """The vendored schema files, name -> bytes, as shipped with the package."""
    folder = resources.files(__package__).joinpath(SCHEMA_DIR)
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.name.endswith(".json")}


def metadata_specs(files: Mapping[str, bytes] | None = None) -> MetadataSpecs:
    """The specs of the metadata record schemas in ``files`` (default: the vendored ones, parsed once)."""
    return _vendored_specs() if files is None else _parse_specs(files)


@functools.cache
def _vendored_specs() -> MetadataSpecs:
    return _parse_specs(vendored_schema_files())


def _parse_specs(files: Mapping[str, bytes]) -> MetadataSpecs:
    by_key: dict[int, MessageSpec] = {}
    for file_name, data in sorted(files.items()):
        try:
            spec = parse_message_spec(data.decode("utf-8"))
        except SchemaError as exc:
            raise SchemaError(f"{file_name}: {exc}") from None
        if spec.type != "metadata" or spec.api_key is None:
            continue
        if spec.api_key in by_key:
            raise SchemaError(f"{file_name}: api key {spec.api_key} also of {by_key[spec.api_key].name}")
        by_key[spec.api_key] = spec
    return MetadataSpecs(by_key)
