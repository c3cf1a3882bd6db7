"""The JSON length of Arrow values (streaming.json_chars), against Python's json writing them out."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replmon.contracts.batches import ARROW_SCHEMA
from streaming.json_chars import json_chars

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.one_of(st.none(), st.text(), st.sampled_from(['"', "\\", "\n\t\b\f\r", "\x00\x1f\x7f", "é", "😀", "中"]))


def written(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


@settings(max_examples=200, deadline=None)
@given(ints=st.lists(st.one_of(st.none(), INT64)), texts=st.lists(TEXT), flags=st.lists(st.one_of(st.none(),
                                                                                                    st.booleans())))
def test_scalars_as_json_writes_them(ints: list[int | None], texts: list[str | None],
                                     flags: list[bool | None]) -> None:
    for values, kind in ((ints, pa.int64()), (texts, pa.string()), (texts, pa.large_string()), (flags, pa.bool_())):
        array = pa.array(values, kind)
        assert json_chars(array).tolist() == [written(v) for v in values]
        if len(values) > 1:  # a slice reads its own values only
            assert json_chars(array.slice(1)).tolist() == [written(v) for v in values[1:]]


REPLICA_OFFSETS = st.one_of(st.none(), st.fixed_dictionaries({
    "broker_id": st.one_of(st.none(), INT64), "log_end_offset": st.one_of(st.none(), INT64),
    "error": TEXT, "error_detail": TEXT}))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), st.lists(REPLICA_OFFSETS, max_size=6))),
       lists=st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), INT64), max_size=6))))
def test_lists_and_structs_of_a_batch_entry_as_json_writes_them(rows: list[Any], lists: list[Any]) -> None:
    offsets = pa.array(rows, ARROW_SCHEMA.field("replica_offsets").type)
    assert json_chars(offsets).tolist() == [written(v) for v in rows]
    assert json_chars(pa.chunked_array([offsets, offsets])).tolist() == [written(v) for v in rows * 2]
    numbers = pa.array(lists, pa.list_(pa.int64()))
    assert json_chars(numbers).tolist() == [written(v) for v in lists]
    if len(lists) > 2:
        assert json_chars(numbers.slice(2)).tolist() == [written(v) for v in lists[2:]]


def test_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="double"):
        json_chars(pa.array([1.5]))
