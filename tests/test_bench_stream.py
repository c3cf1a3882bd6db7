"""The streaming benchmark's choice of steady micro-batches: the capacity, the Python workers' figures and the
stages' wall times are all of the same micro-batches."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from bench.bench_stream import capacity, mean_batch_s, steady_batches, steady_window


def _progress(rows: list[int], start: str = "2026-01-01T00:00:00.000Z", every_s: float = 5.0,
              duration_ms: int = 4000) -> list[dict[str, Any]]:
    t0 = pd.Timestamp(start)
    return [{"timestamp": (t0 + pd.Timedelta(seconds=i * every_s)).isoformat(), "numInputRows": n,
             "batchDuration": duration_ms} for i, n in enumerate(rows)]


def test_steady_batches_skip_the_warm_up_the_empty_and_a_last_partial_one() -> None:
    progress = _progress([0, 1000, 1000, 1000, 0, 1000, 1000, 300])
    steady = steady_batches(progress, skip=2)
    assert [p["timestamp"] for p in steady] == [progress[i]["timestamp"] for i in (3, 5, 6)]
    rate, count, series = capacity(progress, skip=2)
    assert (rate, count) == (pytest.approx(250.0), 3)  # 3,000 rows in 3 x 4 s
    assert len(series) == 6  # every batch with rows, the warm-up's too


def test_steady_window_spans_the_first_steady_start_to_the_last_steady_end() -> None:
    progress = _progress([1000, 1000, 1000, 1000, 200])
    since, until = steady_window(progress, skip=2)
    t0 = pd.Timestamp(progress[0]["timestamp"]).timestamp()
    assert since == pytest.approx(t0 + 10.0)
    assert until == pytest.approx(t0 + 15.0 + 4.0)


def test_steady_window_is_empty_without_steady_batches() -> None:
    since, until = steady_window(_progress([1000, 1000]), skip=2)
    assert since > until


def test_mean_batch_s_is_of_the_steady_batches() -> None:
    progress = _progress([1000, 1000, 1000, 1000, 200])
    for p, ms in zip(progress, (9000, 9000, 4000, 6000, 1000), strict=True):
        p["batchDuration"] = ms
    assert mean_batch_s(progress, skip=2) == pytest.approx(5.0)
    assert mean_batch_s(progress[:2], skip=2) != mean_batch_s(progress[:2], skip=2)  # NaN: no steady batch


def test_the_bench_producer_writes_batches_the_job_reads_whole_as_a_collector_s() -> None:
    """bench/batch_producer.py builds the collector's records column by column: every field of the batch schema,
    every entry valid, nothing in flight (no reassignment), as a collector with nothing to report writes them."""
    from bench.batch_producer import chunks, record
    from replmon.contracts.batches import entries
    from streaming.batches import entry_reasons, read_batch

    (first, *_) = chunks("bench", topics=2, per_topic=50)
    table = read_batch(record(first, cycle=3, churn=100, now_ms=1_700_000_000_000))
    assert table.num_rows == len(first.index) and entry_reasons(table) == [None] * table.num_rows
    assert all((e["adding_replicas"], e["removing_replicas"]) == ([], []) for e in entries(table))
