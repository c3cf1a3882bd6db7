"""The value of a metadata record: an ``ApiMessageAndVersion`` as Kafka's ``MetadataRecordSerde`` writes it.

``AbstractApiMessageSerde`` frames the message with three unsigned varints: the frame version (1; 0 was KRaft's
2.8 preview, which Kafka refuses), the api key (the record type, ``apiKey`` in the schema) and the message
version, each at most ``Short.MAX_VALUE``; the message follows and must use every remaining byte.

A record type this decoder has no schema for, or a version outside its schema's ``validVersions`` (a newer Kafka
wrote it), is not an error: :func:`read_metadata_value` returns :class:`Unsupported` so that the reader skips and
counts it. Anything else that does not parse raises :class:`MessageDecodeError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collectors.logdir.metadata.messages import MessageDecodeError, Readable, read_message
from collectors.logdir.metadata.specs import SHORT_MAX, MetadataSpecs

DEFAULT_FRAME_VERSION = 1


@dataclass(frozen=True)
class ApiMessageAndVersion:
    api_key: int
    type: str
    """The schema's name: ``PartitionChangeRecord``."""
    version: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class Unsupported:
    """A record this decoder cannot read: an unknown api key (``type`` is then ``apiKey <n>``) or a version beyond
    its schema."""

    api_key: int
    type: str
    version: int


def read_frame(value: bytes | memoryview) -> tuple[int, int, int]:
    """The (api key, version, position of the message) of a framed metadata record value."""
    readable = Readable(value)
    frame_version = _short(readable, "frame version")
    if frame_version == 0:
        raise MessageDecodeError("frame version 0 (KRaft's 2.8 preview), which Kafka does not read")
    if frame_version != DEFAULT_FRAME_VERSION:
        raise MessageDecodeError(f"unknown frame version {frame_version} (only {DEFAULT_FRAME_VERSION} is known)")
    api_key = _short(readable, "type")
    version = _short(readable, "version")
    return api_key, version, readable.position


def _short(readable: Readable, entity: str) -> int:
    value = readable.unsigned_varint()
    if value > SHORT_MAX:
        raise MessageDecodeError(f"value for {entity} was too large: {value}")
    return value


def read_metadata_value(value: bytes | memoryview, specs: MetadataSpecs) -> ApiMessageAndVersion | Unsupported:
    """A metadata record's value decoded, or what it is when this decoder has no schema for it."""
    api_key, version, position = read_frame(value)
    spec = specs.get(api_key)
    if spec is None:
        return Unsupported(api_key, f"apiKey {api_key}", version)
    if version not in spec.valid_versions:
        return Unsupported(api_key, spec.name, version)
    try:
        fields = read_message(spec, version, value, position)
    except MessageDecodeError as exc:
        raise MessageDecodeError(f"{spec.name} v{version}: {exc}") from None
    return ApiMessageAndVersion(api_key, spec.name, version, fields)
