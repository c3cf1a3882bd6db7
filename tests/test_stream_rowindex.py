"""The row index of a bucket's columns (:mod:`streaming.rowindex`) against a dict of ``(cluster, topic,
partition)`` keys, on generated columns and lookups: names the columns hold and names they do not, absent names,
partitions at and past Kafka's int32 bounds, dead rows, and rows added after the index was built."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import from_json

from replmon.contracts.samples import PartitionSample, ReplicaOffsets, to_json
from streaming.detect import DetectConfig, step_dict
from streaming.rowindex import RowIndex, codes_of
from streaming.serving import ServedColumns
from streaming.state import PartitionState
from streaming.steady import SteadyColumns, steady_form

NAMES = ["c1", "c2", "t-a", "t-b", "t-c", "id-1"]
PARTITIONS = st.one_of(st.integers(0, 40), st.sampled_from([2**31 - 1, 2**31, 2**32 + 3, -1, -(2**31)]))
KEYS = st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["t-a", "t-b", "t-c", "t-d", "id-1"]),
                 PARTITIONS)


def steady_state(key: tuple[str, str, int]) -> PartitionState:
    """A partition's state after its first sample, one the steady columns hold."""
    sample = PartitionSample(
        cluster=key[0], collector_id="test", cycle=1, sample_time_ms=1_000_000, topic=key[1], topic_id="id-1",
        partition=key[2], leader=1, leader_epoch=0, replicas=[1, 2], isr=[1, 2], elr=[], last_known_elr=[],
        high_watermark=10, last_stable_offset=10, log_start_offset=0,
        replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=10) for b in (1, 2)])
    state = step_dict(None, from_json(to_json(sample)), DetectConfig(), 1_000_000)[0]
    assert steady_form(state)
    return state


def _codes(names: list[str | None], known: list[str]) -> np.ndarray:
    return codes_of(pa.array(names, pa.string()), {name: code for code, name in enumerate(known)})


@settings(max_examples=300, deadline=None)
@given(held=st.lists(KEYS, unique=True, max_size=60), asked=st.lists(KEYS, max_size=60), data=st.data())
def test_the_index_finds_each_partition_s_row_as_a_dict_of_its_keys_does(
        held: list[tuple[str, str, int]], asked: list[tuple[str, str, int]], data: st.DataObject) -> None:
    # rows hold Kafka's partitions, their names among the columns' (c3 and t-d are not)
    held = [key for key in held if 0 <= key[2] < 2**31 and key[0] in NAMES and key[1] in NAMES]
    rows = np.array(data.draw(st.permutations(range(100, 100 + len(held)))), np.int64)
    expected = dict(zip(held, rows.tolist(), strict=True))
    index = RowIndex.of(_codes([k[0] for k in held], NAMES), _codes([k[1] for k in held], NAMES),
                        np.array([k[2] for k in held], np.int64), rows)
    asked = asked + held
    found = index.find(_codes([k[0] for k in asked], NAMES), _codes([k[1] for k in asked], NAMES),
                       np.array([k[2] for k in asked], np.int64))
    assert found.tolist() == [expected.get(key, -1) for key in asked]
    codes = {name: code for code, name in enumerate(NAMES)}
    assert [index.find_one(codes.get(c, -1), codes.get(t, -1), p) for c, t, p in asked] == found.tolist()


def test_codes_of_names_absent_chunked_and_unknown() -> None:
    chunked = pa.chunked_array([pa.array(["t-a", None], pa.string()), pa.array(["zz", "t-a", "c1"], pa.string())])
    assert codes_of(chunked, {"c1": 0, "t-a": 2}).tolist() == [2, -1, -1, 2, 0]
    assert codes_of(pa.chunked_array([], pa.string()), {"c1": 0}).tolist() == []


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "drop", "copy", "compact"]),
                              st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["t-a", "t-b"]),
                                                 st.integers(0, 6)), unique=True, min_size=1, max_size=8)),
                    max_size=12))
def test_steady_and_served_columns_find_their_live_rows_through_adds_drops_and_compaction(
        ops: list[tuple[str, list[tuple[str, str, int]]]]) -> None:
    columns = SteadyColumns.empty()
    live: set[tuple[str, str, int]] = set()
    for op, keys in ops:
        if op == "add":
            columns.add({key: steady_state(key) for key in keys})
            live |= set(keys)
        elif op == "drop":
            for key in keys:
                assert columns.drop(key) == (key in live)
                live.discard(key)
        elif op == "copy":
            columns = columns.copy()
        else:
            columns = columns.compacted()
        assert sorted(columns.live_keys()) == sorted(live)
        assert len(columns) == len(live)
        for key in live:
            row = columns.row_of(key)
            assert row is not None and columns.keys(np.array([row]))[0] == key
        everything = [(c, t, p) for c in ("c1", "c2", "c3") for t in ("t-a", "t-b") for p in range(8)]
        found = columns.find(pa.array([k[0] for k in everything]), pa.array([k[1] for k in everything]),
                             np.array([k[2] for k in everything]))
        assert [row >= 0 for row in found.tolist()] == [key in live for key in everything]
    served = ServedColumns.empty()
    seen: list[tuple[str, str, int]] = []
    for _, keys in ops:
        rows = served._rows(pa.array([k[0] for k in keys]), pa.array([k[1] for k in keys]),
                            np.array([k[2] for k in keys], np.int64))
        for key, row in zip(keys, rows.tolist(), strict=True):
            if key not in seen:
                seen.append(key)
            assert row == seen.index(key)
        assert served.keys(np.arange(len(served))) == seen
        assert served.holds([*seen, ("c3", "t-a", 0)]).tolist() == [True] * len(seen) + [False]
