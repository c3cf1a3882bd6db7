"""Batch records Arrow's IPC reader takes and the job must not: damaged below the level that reader checks (it
trusts the lengths and offsets they declare; ``streaming.batches.read_batch`` validates them in full), and one that
declares more than the job decompresses."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from replmon.contracts.batches import ARROW_SCHEMA, COMPRESSED, read_stream, write_stream


def offsets_backwards(value: bytes) -> bytes:
    """The batch ``value`` with its topics' string offsets running backwards between its first two entries (it
    must hold at least two)."""
    table = read_stream(value)
    topics = table.column("topic").combine_chunks()
    offsets = np.frombuffer(topics.buffers()[1], dtype=np.int32)[: len(topics) + 1].copy()
    offsets[1] = offsets[2] + 1  # past the second entry's end
    topic = pa.Array.from_buffers(pa.string(), len(topics), [None, pa.py_buffer(offsets.tobytes()),
                                                             topics.buffers()[2]])
    return write_stream(table.set_column(table.schema.get_field_index("topic"), "topic", topic)
                        .replace_schema_metadata(ARROW_SCHEMA.metadata))


def items_overstated(value: bytes, items: int) -> bytes:
    """The batch ``value`` declaring ten times ``items`` items for the first of its lists that holds ``items``
    (the first such length in its metadata), its buffers unchanged."""
    declared = struct.pack("<q", items)
    at = value.index(declared)
    return value[:at] + struct.pack("<q", items * 10) + value[at + len(declared):]


def inflated(value: bytes, size: int) -> bytes:
    """The batch ``value``'s first entry alone, its topic ``size`` bytes of one letter, as LZ4 frames: a record
    ~250 times smaller than what it declares decompressed (0.8 MB for 200 MB)."""
    table = read_stream(value).slice(0, 1)
    topic = pa.array(["z" * size], pa.string())
    return write_stream(table.set_column(table.schema.get_field_index("topic"), "topic", topic)
                        .replace_schema_metadata(ARROW_SCHEMA.metadata), COMPRESSED)
