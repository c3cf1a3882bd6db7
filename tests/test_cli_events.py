"""``replmon events``: one record format whatever the source (the history's columns or the topic's JSON), filters
as an operator types them, and every mistake one clear line."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka import KafkaProducer

from replmon.cli import main
from replmon.cli.events import EventFilter, canonical, event_type, events, topic_events, topic_record
from replmon.contracts.events import Event, EventType, Severity
from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster

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
    (["--type", ""], "--type takes one of ISR_SHRINK"),  # an empty shell variable, not "every type"
    (["--since", ""], "--since takes a duration such as 15m"),
    (["--cluster", ""], "--cluster takes a cluster name, not ''"),
    (["--topic", " "], "--topic takes a topic name, not ' '"),
])
def test_contradictory_options_are_one_clear_line(argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replmon: ") and message in err and "\n" not in err


def test_a_cluster_or_topic_no_event_has_is_named_with_the_closest(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--cluster prdo`` finding nothing says that no event has that cluster, not that the history is empty."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming.schema import spark_schema
    from streaming.sinks import _arrow_schema

    day = tmp_path / "events" / "date=2023-11-14"
    day.mkdir(parents=True)
    rows = [EVENT.model_copy(update={"event_id": f"e{i}", "cluster": cluster, "topic": topic}).model_dump(mode="json")
            for i, (cluster, topic) in enumerate([("prod", "orders"), ("dr", "payments")])]
    pq.write_table(pa.Table.from_pylist(rows, schema=_arrow_schema(spark_schema(Event))), day / "part-0.parquet")
    for argv, said in ((["--cluster", "prdo"], "no event of cluster 'prdo' (did you mean 'prod'?)"),
                       (["--topic", "payment"], "no event of topic 'payment' (did you mean 'payments'?)"),
                       (["--cluster", "qa"], "no event of cluster 'qa' (2 clusters have events)"),
                       (["--cluster", "dr", "--topic", "orders"], f"no events in {tmp_path}"),
                       (["--type", "isr_shrink"], f"no ISR_SHRINK events in {tmp_path}")):
        assert main(["events", "--history-dir", str(tmp_path), *argv]) == 0
        assert capsys.readouterr().err.strip() == said, argv
    assert main(["events", "--history-dir", str(tmp_path), "--cluster", "prod", "--json"]) == 0
    assert [json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()] == ["e0"]


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


def test_a_topic_record_that_is_no_event_is_skipped_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    good = EVENT.model_dump_json().encode()
    assert topic_record(good, "events-0 offset 1") == EVENT.model_dump(mode="json")
    wrong = json.dumps({**json.loads(good), "severity": "CRITICAL"}).encode()
    for value, why in [(wrong, "severity: Input should be 'info', 'warning' or 'critical'"),
                       (b"not json", "Expecting value"), (b"[1]", "'list' object has no attribute 'items'"),
                       (None, "'NoneType' object has no attribute 'items'")]:
        assert topic_record(value, "events-0 offset 7") is None
        err = capsys.readouterr().err
        assert err.startswith("skipping events-0 offset 7: not an event record of this replmon (") and why in err
        assert err.count("\n") == 1


@pytest.mark.cluster
def test_follow_waits_for_the_events_topic_and_gives_what_comes(cluster: LocalCluster, kafka_view: KafkaView,
                                                                  topic_name: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--follow`` started before the job ever ran waits for the topic the job creates, then gives its events, a
    record that is no event told and skipped."""
    config = ReplmonConfig(transport={"bootstrap_servers": cluster.bootstrap_servers.split(","),
                                      "events_topic": topic_name})
    stop = threading.Event()
    got: list[dict[str, Any]] = []

    def follow() -> None:
        for event in topic_events(config, None, follow=True, stop=stop):
            got.append(event)

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        wait_until(lambda: f"waiting for topic {topic_name} on " in capsys.readouterr().err, 30,
                   "the follower waiting for the topic")
        kafka_view.create_topic(topic_name, partitions=1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        try:
            for value in (b"not an event", EVENT.model_dump_json().encode()):
                producer.send(topic_name, key=b"e1", value=value).get(timeout=30)
        finally:
            producer.close()
        told: list[str] = []

        def both() -> bool:
            told.append(capsys.readouterr().err)
            return f"skipping {topic_name}-0 offset 0: " in "".join(told) and bool(got)

        wait_until(both, 30, "the record that is no event told, and the event")
    finally:
        stop.set()
        follower.join(30)
    assert not follower.is_alive()
    assert got == [EVENT.model_dump(mode="json")]
    capsys.readouterr()
    # the events the topic holds, read without --follow: a filter that matches none says why, as for the history
    later = 4_102_444_800_000  # 2100-01-01, after every record of the topic
    for keep, said in ((EventFilter(cluster="cc"), "no event of cluster 'cc' (did you mean 'c'?)"),
                       (EventFilter(type=EventType.ISR_SHRINK), f"no ISR_SHRINK events in topic {topic_name}"),
                       (EventFilter(since_ms=later), f"no events in topic {topic_name} since 2100-01-01 00:00:00 UTC")):
        assert events(config, source="topic", keep=keep) == 0
        captured = capsys.readouterr()
        assert (captured.out, captured.err.strip().splitlines()[-1]) == ("", said), keep
    assert events(config, source="topic", keep=EventFilter(cluster="c")) == 0
    assert "t-3: unclean" in capsys.readouterr().out
