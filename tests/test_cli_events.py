"""``replmon events``: one record format whatever the source (the history's columns or the topic's JSON), filters
as an operator types them, and every mistake one clear line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from replmon.cli import main
from replmon.cli.events import EventFilter, canonical, event_type
from replmon.contracts.events import Event, EventType, Severity
from replmon.core.errors import ReplmonError

EVENT = Event(event_id="e1", type=EventType.LEADER_CHANGE, severity=Severity.CRITICAL, cluster="c", topic="t",
              partition=3, event_time_ms=1_700_000_000_000, detected_time_ms=1_700_000_001_000, brokers=[2],
              leader=2, previous_leader=1, leader_epoch=5, previous_leader_epoch=4, clean=False, isr=[2],
              previous_isr=[1], message="t-3: unclean")


def test_a_history_row_and_a_topic_record_print_as_the_same_record() -> None:
    published = json.loads(EVENT.model_dump_json())
    # as pandas gives a Parquet row: a nullable integer column as float, a missing value as NaN, lists as arrays
    row = {**published, "partition": 3.0, "lag": math.nan, "committed_lost": math.nan, "brokers": np.array([2]),
           "isr": np.array([2]), "previous_isr": np.array([1]), "date": "2026-11-24"}
    assert canonical(row) == canonical(published) == EVENT.model_dump(mode="json")
    assert canonical(row)["partition"] == 3 and canonical(row)["lag"] is None


def test_filters_select_by_cluster_topic_type_and_time() -> None:
    e = EVENT.model_dump(mode="json")
    assert EventFilter()(e)
    assert EventFilter(cluster="c", topic="t", type=EventType.LEADER_CHANGE, since_ms=e["event_time_ms"])(e)
    assert not EventFilter(cluster="other")(e)
    assert not EventFilter(topic="u")(e)
    assert not EventFilter(type=EventType.ISR_SHRINK)(e)
    assert not EventFilter(since_ms=e["event_time_ms"] + 1)(e)


def test_an_event_type_is_taken_in_any_case_and_an_unknown_one_is_refused() -> None:
    assert event_type("isr_shrink") is EventType.ISR_SHRINK
    with pytest.raises(ReplmonError, match=r"--type takes one of ISR_SHRINK, .*ELR_CHANGE, .*, not 'shrink'"):
        event_type("shrink")


@pytest.mark.parametrize(("argv", "message"), [
    (["--from", "history", "--follow"], "--follow reads the events topic: it goes with --from topic"),
    (["--from", "topic", "--history-dir", "/x"], "--history-dir goes with --from history"),
    (["--type", "nope"], "--type takes one of"),
])
def test_contradictory_options_are_one_clear_line(argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replmon: ") and message in err and "\n" not in err


def test_an_empty_history_prints_nothing_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--history-dir", str(tmp_path), "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_a_history_directory_that_does_not_exist_is_one_clear_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "histroy"
    for extra in ([], ["--json"]):
        assert main(["events", "--history-dir", str(missing), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        err = captured.err.strip()
        assert err == f"replmon: no history at {missing}: no such directory (the job's stream.history_dir, made " \
                      "when the job starts; --history-dir reads another)"
    assert not missing.exists()
