"""Kafka's wire format written and read by hand where kafka-python's generic codec costs too much (pure: values
in, bytes out, and back).

kafka-python builds a Python object per partition and encodes it field by field: ~20 µs per partition, 2.5 s per
cycle at 20k partitions / 60k replicas. The sampler's ListOffsets requests are large and simple, so their body is
packed directly (flexible versions 6+, ``clients/src/main/resources/common/message/ListOffsetsRequest.json``),
and their answers read straight into plain values (:func:`decode_list_offsets`). kafka-python still frames the
requests, tracks them, and reads the response headers: an :class:`EncodedRequest` that brings its own decoder of
the response body stands in its parser as :class:`HandDecodedResponse`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import RequestHeader, ResponseHeader
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


# ---------------------------------------------------------------------------------------------- reading
INT32 = struct.Struct(">i")


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, position after it)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def skip_tagged_fields(data: bytes, pos: int) -> int:
    """Past a tagged-fields section (a count, then tag, size and bytes of each): none is read, as kafka-python's
    own classes skip the tags they do not know."""
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
    return pos


def read_compact_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A compact (nullable) string: its length + 1 as a varint (0: null), then UTF-8 bytes."""
    size, pos = read_uvarint(data, pos)
    if size == 0:
        return None, pos
    end = pos + size - 1
    if end > len(data):
        raise ValueError(f"a string of {size - 1} bytes runs past the end of the response")
    return data[pos:end].decode(), end


class HandDecodedResponse:
    """Stands where kafka-python's parser expects a response class (``KafkaProtocol._process_response`` calls
    ``parse_header``, then ``decode``, on the request header's ``get_response_class()``): reads the flexible
    response header with kafka-python's own ``ResponseHeader`` and gives the body's bytes to ``decode_body``. Any
    malformed body raises ValueError, which kafka-python turns into KafkaProtocolError for that request's
    caller."""

    def __init__(self, name: str, decode_body: Callable[[bytes], Any]) -> None:
        self.__name__ = name
        self._decode_body = decode_body

    def parse_header(self, buffer: Any) -> Any:
        return ResponseHeader.decode(buffer, flexible=True)

    def decode(self, buffer: Any) -> Any:
        data = buffer.read()
        try:
            return self._decode_body(data)
        except (IndexError, struct.error) as exc:
            raise ValueError(f"{self.__name__}: the response ends early ({exc})") from exc

    def __repr__(self) -> str:
        return f"HandDecodedResponse({self.__name__})"


class _InFlightHeader:
    """A request header that names the hand decoder as its response class; everything else is the header's."""

    def __init__(self, header: Any, response: HandDecodedResponse) -> None:
        self._header = header
        self._response = response

    def get_response_class(self) -> HandDecodedResponse:
        return self._response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._header, name)

    def __repr__(self) -> str:
        return repr(self._header)


class EncodedRequest:
    """A request whose body is already encoded, in the shape kafka-python's connection expects of a request
    (``API_VERSION``, ``with_header``, ``encode``, ``header``, ``expect_response``); the response is decoded by
    ``decode_response`` (the response body's bytes -> any value) when given, else by kafka-python's class for
    ``message_class``."""

    def __init__(self, message_class: Any, version: int, body: bytes, label: str = "",
                 decode_response: Callable[[bytes], Any] | None = None) -> None:
        self.message_class = message_class
        self._version = version
        self.body = body
        self.label = label or message_class.name
        self._header: Any = None
        self._response: HandDecodedResponse | None = None
        if decode_response is not None:
            name = f"{message_class.name.removesuffix('Request')}Response v{version}"
            self._response = HandDecodedResponse(name, decode_response)
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
        if self._response is None or self._header is None:
            return self._header
        return _InFlightHeader(self._header, self._response)

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


@dataclass
class ListOffsetsAnswer:
    """A ListOffsets answer: (topic, partition) -> (error code, offset)."""

    offsets: dict[tuple[str, int], tuple[int, int]]
    throttle_time_ms: int = 0
    """Read by kafka-python's connection (client-side quota throttling), as on its own responses."""


_PARTITION_ANSWER = struct.Struct(">ihqqi")  # partition_index, error_code, timestamp, offset, leader_epoch


def decode_list_offsets(data: bytes) -> ListOffsetsAnswer:
    """A ListOffsetsResponse body of versions 6 to 11 (after the response header), as
    ``clients/src/main/resources/common/message/ListOffsetsResponse.json`` lays it out: throttle time; topics
    (name, partitions, tags), each partition (index, error code, timestamp, offset, leader epoch, tags); tags.
    ~2x faster than kafka-python's decoding and walking its objects (docs/benchmarks.md, "Collector")."""
    throttle_time_ms = INT32.unpack_from(data, 0)[0]
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    unpack = _PARTITION_ANSWER.unpack_from
    topic_count, pos = read_uvarint(data, 4)
    for _topic in range(topic_count - 1):
        name, pos = read_compact_string(data, pos)
        topic = name or ""
        partition_count, pos = read_uvarint(data, pos)
        for _partition in range(partition_count - 1):
            index, error_code, _timestamp, offset, _leader_epoch = unpack(data, pos)
            pos += _PARTITION_ANSWER.size
            pos = pos + 1 if data[pos] == 0 else skip_tagged_fields(data, pos)
            offsets[(topic, index)] = (error_code, offset)
        pos = skip_tagged_fields(data, pos)
    pos = skip_tagged_fields(data, pos)
    if pos != len(data):
        raise ValueError(f"ListOffsets: {len(data) - pos} bytes past the end of the answer")
    return ListOffsetsAnswer(offsets, throttle_time_ms)


def list_offsets_request(version: int, replica_id: int, isolation_level: int, timestamp: int,
                         partitions: Mapping[str, Iterable[int]], label: str, timeout_ms: int = 0) -> Any:
    """A ListOffsets request: hand-encoded for v6+ (its answer read by :func:`decode_list_offsets`), else
    kafka-python's own (older brokers, slower)."""
    if version >= LIST_OFFSETS_MIN_RAW_VERSION:
        version = min(version, LIST_OFFSETS_MAX_RAW_VERSION)
        body = encode_list_offsets(version, replica_id, isolation_level, timestamp, partitions, timeout_ms)
        return EncodedRequest(ListOffsetsRequest, version, body, label, decode_response=decode_list_offsets)
    topic_cls = ListOffsetsRequest.ListOffsetsTopic
    part_cls = topic_cls.ListOffsetsPartition
    return ListOffsetsRequest(
        replica_id=replica_id, isolation_level=isolation_level,
        topics=[topic_cls(name=t, partitions=[part_cls(partition_index=p, current_leader_epoch=-1,
                                                          timestamp=timestamp, max_num_offsets=1) for p in ps])
                for t, ps in partitions.items()],
        version=version)
