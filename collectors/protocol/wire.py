"""ListOffsets requests encoded by hand (pure: values in, bytes out).

kafka-python builds a Python object per partition and encodes it field by field: ~20 µs per partition, 2.5 s per
cycle at 20k partitions / 60k replicas. The sampler's ListOffsets requests are large and simple, so their body is
packed directly (flexible versions 6+, ``clients/src/main/resources/common/message/ListOffsetsRequest.json``);
kafka-python still frames them, tracks them and decodes the responses.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer.offsets import ListOffsetsRequest

LIST_OFFSETS_MIN_RAW_VERSION = 6
"""The first flexible version: compact arrays and strings, tagged fields."""
LIST_OFFSETS_MAX_RAW_VERSION = 11
"""Versions 6..11 carry the same fields (10 adds TimeoutMs)."""

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
"""ListOffsets from a 'debugging' replica: the broker answers from its local log whether it leads the partition
or follows it, with no isolation level: LATEST is that replica's own log end offset."""
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

_PARTITION = struct.Struct(">iiqB")  # partition_index, current_leader_epoch, timestamp, tagged fields (none)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def encode_list_offsets(version: int, replica_id: int, isolation_level: int, timestamp: int,
                        partitions: Mapping[str, Iterable[int]], timeout_ms: int = 0) -> bytes:
    """The body of a ListOffsetsRequest asking ``timestamp`` for every partition of ``partitions`` (topic ->
    partition indexes), with no leader epoch check (current_leader_epoch -1)."""
    if not LIST_OFFSETS_MIN_RAW_VERSION <= version <= LIST_OFFSETS_MAX_RAW_VERSION:
        raise ValueError(f"ListOffsets v{version} is not encoded here")
    pack = _PARTITION.pack
    parts = [struct.pack(">ib", replica_id, isolation_level), _uvarint(len(partitions) + 1)]
    for topic, indexes in partitions.items():
        idx = list(indexes)
        parts.append(_compact_string(topic))
        parts.append(_uvarint(len(idx) + 1))
        parts.extend(pack(p, -1, timestamp, 0) for p in idx)
        parts.append(b"\x00")  # topic tagged fields
    if version >= 10:
        parts.append(struct.pack(">i", timeout_ms))
    parts.append(b"\x00")  # request tagged fields
    return b"".join(parts)


class EncodedRequest:
    """A request whose body is already encoded, in the shape kafka-python's connection expects of a request
    (``API_VERSION``, ``with_header``, ``encode``, ``header``, ``expect_response``); the response is decoded by
    kafka-python's class for ``message_class``."""

    def __init__(self, message_class: Any, version: int, body: bytes, label: str = "") -> None:
        self.message_class = message_class
        self._version = version
        self.body = body
        self.label = label or message_class.name
        self._header: Any = None
        self._min_version = version
        self._max_version = version

    name = property(lambda self: self.message_class.name)
    API_KEY = property(lambda self: self.message_class.API_KEY)
    min_version = property(lambda self: self._version)
    max_version = property(lambda self: self._version)

    @property
    def API_VERSION(self) -> int:
        return self._version

    @API_VERSION.setter
    def API_VERSION(self, version: int) -> None:
        if version != self._version:
            raise ValueError(f"{self.label} is encoded for v{self._version}, not v{version}")

    @property
    def header(self) -> Any:
        return self._header

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = RequestHeader(request_api_key=self.message_class.API_KEY,
                                     request_api_version=self._version, correlation_id=correlation_id,
                                     client_id=client_id)

    def encode(self, framed: bool = False, header: bool = False, version: int | None = None) -> bytes:
        head = self._header.encode(flexible=self.message_class.flexible_version_q(self._version)) if header else b""
        payload = bytes(head) + self.body
        return struct.pack(">i", len(payload)) + payload if framed else payload

    def __repr__(self) -> str:
        return f"EncodedRequest({self.label} v{self._version}, {len(self.body)} bytes)"


def list_offsets_request(version: int, replica_id: int, isolation_level: int, timestamp: int,
                         partitions: Mapping[str, Iterable[int]], label: str, timeout_ms: int = 0) -> Any:
    """A ListOffsets request: hand-encoded for v6+, else kafka-python's own (older brokers, slower)."""
    if version >= LIST_OFFSETS_MIN_RAW_VERSION:
        version = min(version, LIST_OFFSETS_MAX_RAW_VERSION)
        body = encode_list_offsets(version, replica_id, isolation_level, timestamp, partitions, timeout_ms)
        return EncodedRequest(ListOffsetsRequest, version, body, label)
    topic_cls = ListOffsetsRequest.ListOffsetsTopic
    part_cls = topic_cls.ListOffsetsPartition
    return ListOffsetsRequest(
        replica_id=replica_id, isolation_level=isolation_level,
        topics=[topic_cls(name=t, partitions=[part_cls(partition_index=p, current_leader_epoch=-1,
                                                          timestamp=timestamp, max_num_offsets=1) for p in ps])
                for t, ps in partitions.items()],
        version=version)
