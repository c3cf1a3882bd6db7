"""Many partition samples in one record of the samples topic: ``partition_batch/v1``.

A collector's cycle holds every partition of a cluster at once; one JSON record per partition made the streaming
job handle tens of thousands of Kafka records, Spark rows and JSON parses per cycle (docs/benchmarks.md, "Streaming
job"). A batch is an Arrow IPC stream of :class:`~replmon.contracts.samples.PartitionSample` entries: its columns
are the model's fields under their JSON names (``schema`` aside: the stream's metadata names the batch's schema),
their Arrow types read off the model (:func:`arrow_schema`), so the model stays the one definition of a sample.
The job validates every entry against the same model and quarantines the bad ones alone
(:mod:`streaming.batches`).

A record's value tells its format by its first bytes: an IPC stream opens with :data:`IPC_MARKER`, a JSON record
with ``{``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import Enum
from operator import itemgetter
from typing import Any, Literal, get_args, get_origin

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from replmon.contracts.fields import json_name, unwrap
from replmon.contracts.samples import PARTITION_SCHEMA, PartitionSample

BATCH_SCHEMA = "partition_batch/v1"
SCHEMA_KEY = b"schema"
"""The IPC stream's schema metadata key whose value is :data:`BATCH_SCHEMA`."""
IPC_MARKER = b"\xff\xff\xff\xff"
"""The first four bytes of an Arrow IPC stream (the continuation marker of its first message)."""
ENTRY_MODEL = PartitionSample
SKIPPED = ("schema",)
"""Entry fields a batch does not carry: the batch's own schema names their kind."""


def arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a pydantic field: integers as int64, text, enums and literals as strings, lists as lists,
    models as structs."""
    base, _, _ = unwrap(annotation)
    origin = get_origin(base)
    if origin is list:
        return pa.list_(arrow_type(get_args(base)[0]))
    if origin is Literal:
        return pa.string()
    if isinstance(base, type):
        if issubclass(base, BaseModel):
            return pa.struct(_fields(base))
        if issubclass(base, bool):
            return pa.bool_()
        if issubclass(base, Enum | str):
            return pa.string()
        if issubclass(base, int):
            return pa.int64()
    raise TypeError(f"no Arrow type for {annotation!r}")


def _fields(model: type[BaseModel], skip: Sequence[str] = ()) -> list[pa.Field]:
    return [pa.field(json_name(name, f), arrow_type(f.annotation))
            for name, f in model.model_fields.items() if json_name(name, f) not in skip]


def arrow_schema() -> pa.Schema:
    """The schema of a batch's IPC stream."""
    return pa.schema(_fields(ENTRY_MODEL, SKIPPED), metadata={SCHEMA_KEY: BATCH_SCHEMA.encode()})


ARROW_SCHEMA = arrow_schema()


def _array(values: list[Any], annotation: Any) -> pa.Array:
    """One column from the models' attribute values: lists of models flattened into one struct array each level."""
    base, _, _ = unwrap(annotation)
    if get_origin(base) is list:
        (item,) = get_args(base)
        item_base = unwrap(item)[0]
        if isinstance(item_base, type) and issubclass(item_base, BaseModel):
            offsets = [0]
            flat: list[Any] = []
            for value in values:
                if value is not None:
                    flat.extend(value)
                offsets.append(len(flat))
            mask = pa.array([value is None for value in values]) if None in values else None
            return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), _struct(flat, item_base), mask=mask)
    if isinstance(base, type) and issubclass(base, BaseModel):
        return _struct(values, base)
    return pa.array(values, arrow_type(annotation))


def _struct(objects: list[Any], model: type[BaseModel], skip: Sequence[str] = ()) -> pa.StructArray:
    fields = [(json_name(name, f), name, f) for name, f in model.model_fields.items() if json_name(name, f) not in skip]
    if objects:  # every attribute of every object at once, then column by column (getattr per value: 2.5x slower)
        rows = map(itemgetter(*(attribute for _, attribute, _ in fields)), (o.__dict__ for o in objects))
        values: list[Any] = [list(column) for column in zip(*rows, strict=True)]
    else:
        values = [[] for _ in fields]
    arrays = [_array(column, f.annotation) for column, (_, _, f) in zip(values, fields, strict=True)]
    return pa.StructArray.from_arrays(arrays, fields=[pa.field(key, a.type) for (key, _, _), a in
                                                      zip(fields, arrays, strict=True)])


COMPRESSED = pa.ipc.IpcWriteOptions(compression="lz4")
"""What batch records and the job's own streams are written with (:func:`write_stream`: a collector's batch record, a
bucket's share of batch records, a bucket's served rows): LZ4 frames of Arrow's IPC format, which any Arrow reader
decompresses, compressed or not, so records of collectors that wrote them uncompressed are read beside them. ~5 times
smaller (~52-61 bytes a sample instead of ~284): a share is no slower to write than uncompressed; a record costs the
collector ~0.7 µs a sample more to write, and the job's split ~0.5 to read (docs/benchmarks.md, "Python workers").
Every byte of a record crosses the job's JVM several times (Kafka's decompression, the source's rows, Arrow to and
from the read stage's Python workers; a share also the shuffle, its sort and the state stage's input): uncompressed
shares filled the driver's heap, and uncompressed records made the read stage ~45% longer (docs/benchmarks.md,
"Streaming job"). Kafka's compression of the samples topic (zstd) still applies on top, and costs less there: the
broker and the job's consumers compress and decompress a fifth of the bytes."""


def encode_batch(samples: Sequence[PartitionSample]) -> bytes:
    """The samples as one record value: an Arrow IPC stream of one record batch, its buffers LZ4 frames
    (:data:`COMPRESSED`)."""
    columns = _struct(list(samples), ENTRY_MODEL, SKIPPED)
    return write_stream(pa.Table.from_batches([pa.RecordBatch.from_struct_array(columns)]).replace_schema_metadata(
        ARROW_SCHEMA.metadata), COMPRESSED)


def write_stream(table: pa.Table, options: pa.ipc.IpcWriteOptions | None = None) -> bytes:
    """A table as an Arrow IPC stream (with :data:`COMPRESSED`: a batch record's value, a bucket's share of
    batch records)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


MAX_STREAM_BYTES = 128 * 2**20
"""The most an untrusted stream's buffers may hold decompressed (:func:`read_stream`). An LZ4 frame expands up to
~255 times: without a bound, one record of the samples topic's max.message.bytes (1 MB by default, often set
larger) could make a read task allocate hundreds of MB, gigabytes for a larger limit, before any check reads
it. A collector's record holds at most 2,000 entries (a few hundred bytes each, a few kB with a full epoch
lineage); this bound leaves room for the 200,000 entries the job reads in one record
(``streaming.batches.MAX_BATCH_ENTRIES``) at ~670 bytes each."""


class StreamTooLarge(ValueError):
    """A stream that declares more rows or bytes than its reader takes (:func:`read_stream`), found before any of
    its buffers is decompressed."""


_MESSAGE_HEADER_SLOT = 2
"""format/Message.fbs: ``table Message { version; header: MessageHeader (a union: its type, then its value);
bodyLength; custom_metadata }``; a table's fields are numbered in their order, a union taking two."""
_DICTIONARY_DATA_SLOT = 1
"""``table DictionaryBatch { id; data: RecordBatch; isDelta }``."""
_BATCH_LENGTH_SLOT, _BATCH_BUFFERS_SLOT, _BATCH_COMPRESSION_SLOT = 0, 2, 3
"""``table RecordBatch { length: long; nodes: [FieldNode]; buffers: [Buffer]; compression: BodyCompression;
variadicBufferCounts }``, ``struct Buffer { offset: long; length: long }``."""
_NOT_COMPRESSED = -1
"""A compressed body's buffer opens with its uncompressed length (int64, little-endian), or -1: the bytes that follow
are not compressed (BodyCompressionMethod.BUFFER)."""


def _unpack(fmt: str, data: memoryview, at: int) -> int:
    if at < 0 or at + struct.calcsize(fmt) > len(data):
        raise pa.ArrowInvalid("IPC message metadata points outside itself")
    return int(struct.unpack_from(fmt, data, at)[0])


def _table_field(data: memoryview, table: int, slot: int) -> int | None:
    """Where a flatbuffer table's field ``slot`` is (None: absent): the table's vtable lists its fields' places."""
    vtable = table - _unpack("<i", data, table)
    entry = 4 + 2 * slot
    if entry >= _unpack("<H", data, vtable):
        return None
    place = _unpack("<H", data, vtable + entry)
    return table + place if place else None


def _referenced(data: memoryview, table: int, slot: int) -> int | None:
    """Where the table, vector or union value a flatbuffer table's field ``slot`` refers to is."""
    at = _table_field(data, table, slot)
    return None if at is None else at + _unpack("<I", data, at)


def declared_size(value: bytes) -> tuple[int, int]:
    """The rows and the bytes decompressed that an Arrow IPC stream's record and dictionary batches declare, read
    from their metadata (flatbuffers, after Arrow's reader verified them) and the lengths that open their
    compressed buffers: nothing is decompressed. Raises ``pyarrow.ArrowInvalid`` (or ``OSError``) for a stream
    whose messages cannot be read."""
    reader = pa.ipc.MessageReader.open_stream(value)
    rows = size = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return rows, size
        if message.type not in ("record batch", "dictionary batch"):
            continue
        data = memoryview(message.metadata)
        batch = _referenced(data, _unpack("<I", data, 0), _MESSAGE_HEADER_SLOT)
        if batch is not None and message.type == "dictionary batch":
            batch = _referenced(data, batch, _DICTIONARY_DATA_SLOT)
        if batch is None:
            raise pa.ArrowInvalid(f"IPC {message.type} message without its header")
        rows_at = _table_field(data, batch, _BATCH_LENGTH_SLOT)
        if rows_at is not None and message.type == "record batch":
            rows += _unpack("<q", data, rows_at)
        compressed = _table_field(data, batch, _BATCH_COMPRESSION_SLOT) is not None
        body = memoryview(message.body) if message.body is not None else memoryview(b"")
        for offset, length in _buffers(data, batch):
            if not compressed or length == 0:
                size += length
                continue
            decompressed = _unpack("<q", body, offset)
            if decompressed < _NOT_COMPRESSED:
                raise pa.ArrowInvalid("IPC buffer of a negative uncompressed length")
            size += length - 8 if decompressed == _NOT_COMPRESSED else decompressed


def _buffers(data: memoryview, batch: int) -> list[tuple[int, int]]:
    """A RecordBatch's buffers, each its offset in the body and its length there."""
    vector = _referenced(data, batch, _BATCH_BUFFERS_SLOT)
    if vector is None:
        return []
    return [(_unpack("<q", data, vector + 4 + 16 * i), _unpack("<q", data, vector + 12 + 16 * i))
            for i in range(_unpack("<I", data, vector))]


def read_stream(value: bytes, *, trusted: bool = False, max_rows: int | None = None) -> pa.Table:
    """The table an Arrow IPC stream holds (:func:`write_stream`), its buffers decompressed and, unless
    ``trusted``, validated in full: Arrow's reader trusts the lengths, null counts and offsets a stream declares,
    and a damaged record whose buffers do not hold them would make whatever reads its arrays read outside them (a
    segmentation fault, or an abort). Raises ``pyarrow.ArrowInvalid`` (or ``OSError``) for a stream that cannot be
    read. ``trusted``: a stream the job wrote itself from validated entries (a bucket's share, its served rows),
    not checked again on the state stage's and the driver's paths.

    An untrusted stream is refused with :class:`StreamTooLarge` before any buffer is decompressed when it declares
    more than :data:`MAX_STREAM_BYTES` decompressed, or more than ``max_rows`` rows (:func:`declared_size`)."""
    if not trusted:
        rows, size = declared_size(value)
        if size > MAX_STREAM_BYTES:
            raise StreamTooLarge(f"{size:,} bytes decompressed, more than {MAX_STREAM_BYTES:,}")
        if max_rows is not None and rows > max_rows:
            raise StreamTooLarge(f"{rows:,} rows, more than {max_rows:,}")
    table = pa.ipc.open_stream(value).read_all()
    if not trusted:
        table.validate(full=True)
    return table


def is_batch(value: bytes | None) -> bool:
    return value is not None and value[:4] == IPC_MARKER




def _values(array: pa.Array) -> list[Any]:
    """An Arrow array as Python values, column by column (Arrow's to_pylist builds nested structs ~20x slower)."""
    if pa.types.is_struct(array.type):
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        columns = [_values(array.field(name)) for name in names]
        present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool).tolist()
        return [dict(zip(names, row, strict=True)) if ok else None
                for ok, row in zip(present, zip(*columns, strict=True), strict=True)]
    if pa.types.is_list(array.type):
        items = _values(pc.list_flatten(array))
        offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), np.int64).tolist()
        present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool).tolist()
        return [items[offsets[i]:offsets[i + 1]] if ok else None for i, ok in enumerate(present)]
    return array.to_numpy(zero_copy_only=False).tolist() if array.null_count == 0 and not pa.types.is_string(
        array.type) else array.to_pylist()


def entries(table: pa.Table, rows: Sequence[int] | np.ndarray | None = None) -> list[dict[str, Any]]:
    """The entries (all, or those at ``rows``) as the dicts :mod:`streaming.detect` takes."""
    if rows is not None:
        table = table.take(pa.array(rows, pa.int64()))
    names = table.column_names
    columns = [_values(table.column(name).combine_chunks()) for name in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def decode_batch(value: bytes) -> list[dict[str, Any]]:
    """A batch record's samples as the JSON records of ``partition/v1`` would give them (``schema`` included);
    for tools and tests: the job reads and checks a batch with :mod:`streaming.batches`."""
    return [{"schema": PARTITION_SCHEMA, **entry} for entry in entries(read_stream(value))]
