"""How many characters Arrow values take as JSON, as :func:`json.dumps` writes them (compact separators,
``ensure_ascii``), without writing them: a bad entry of a batch record may hold a list of millions of items, which
the quarantine keeps only the start of (:func:`streaming.batches.entry_json`), yet tells the whole length of.

Counted column by column with numpy: an integer's digits and sign, a string's UTF-8 bytes through a table of what
each byte becomes (an ASCII character one, or two for an escape such as ``\\n``, or six for ``\\u00XX``; a
character beyond ASCII six, ``\\uXXXX``, or twelve beyond the Basic Multilingual Plane, a surrogate pair; a
continuation byte nothing), a struct's keys and separators, a list's brackets and commas, a null four."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NULL_CHARS = len("null")

_BYTE_CHARS = np.ones(256, np.int64)
"""Characters ``json.dumps`` writes for each byte of a valid UTF-8 string (ensure_ascii), the quotes aside."""
_BYTE_CHARS[:0x20] = 6  # \u00XX
_BYTE_CHARS[[0x08, 0x09, 0x0A, 0x0C, 0x0D]] = 2  # \b \t \n \f \r
_BYTE_CHARS[[0x22, 0x5C]] = 2  # \" \\
_BYTE_CHARS[0x7F] = 6  # DEL is outside the printable range json keeps as it is
_BYTE_CHARS[0x80:0xC0] = 0  # a continuation byte: its character is counted at its first byte
_BYTE_CHARS[0xC0:0xF0] = 6  # a character of two or three bytes: \uXXXX
_BYTE_CHARS[0xF0:] = 12  # four bytes, beyond the BMP: a surrogate pair

_POWERS = np.array([10 ** k for k in range(1, 20)], np.uint64)


def json_chars(array: pa.Array) -> np.ndarray:
    """Each value's length as JSON (int64): integers, booleans, strings, and lists and structs of them; a null is
    ``null``. Raises TypeError for another type."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)
    kind = array.type
    if pa.types.is_integer(kind):
        chars = _integer_chars(np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), np.int64))
    elif pa.types.is_boolean(kind):
        chars = np.where(np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), bool), 4, 5)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        chars = _string_chars(array)
    elif pa.types.is_struct(kind):
        chars = np.full(len(array), 2 + max(kind.num_fields - 1, 0), np.int64)  # {} and the commas
        for i in range(kind.num_fields):
            name = kind.field(i).name
            chars += len(json.dumps(name)) + 1 + json_chars(pc.struct_field(array, [i]))  # "name":value
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = np.asarray(pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        items = json_chars(pc.list_flatten(array))
        sums = np.concatenate([[0], np.cumsum(items)])
        ends = np.cumsum(lengths)
        chars = 2 + sums[ends] - sums[ends - lengths] + np.maximum(lengths - 1, 0)  # [] and the commas
    else:
        raise TypeError(f"no JSON length for Arrow type {kind}")
    return np.where(valid, chars, NULL_CHARS).astype(np.int64)


def _integer_chars(values: np.ndarray) -> np.ndarray:
    magnitude = np.abs(values).astype(np.uint64)  # the smallest int64 stays negative in abs: as uint64, 2**63
    return np.searchsorted(_POWERS, magnitude, side="right").astype(np.int64) + 1 + (values < 0)


def _string_chars(array: pa.Array) -> np.ndarray:
    """Each string's JSON length, quotes included (a null's value is not read: its slot is empty or ignored)."""
    _, offset_buffer, data = array.buffers()
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    if offset_buffer is None:  # an empty array
        return np.zeros(len(array), np.int64)
    offsets = np.frombuffer(offset_buffer, width)[array.offset:array.offset + len(array) + 1].astype(np.int64)
    raw = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)
    counted = np.concatenate([[0], np.cumsum(_BYTE_CHARS[raw[offsets[0]:offsets[-1]]])])
    return 2 + counted[offsets[1:] - offsets[0]] - counted[offsets[:-1] - offsets[0]]

