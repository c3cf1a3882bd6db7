"""A micro-batch's events leave from the executors (Spark's Kafka sink and Parquet writer) and its counters come
from the buckets' messages; a micro-batch that runs again goes through the driver, which writes only the ids not
written before; a silent cluster's partition STALE events become one. Checked on the real cluster's events topic,
read back by a consumer, and in the history."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.util import InheritableThread

from replmon.contracts.events import Event, EventSource, EventType, Severity
from replmon.core.config import ReplmonConfig, StreamConfig, TransportConfig
from replmon.core.kafka_topics import ensure_topic
from replmon.testbed.kafka_view import wait_until
from replmon.testbed.localcluster import LocalCluster
from streaming.batch import BatchGate, JobStats, StateBatchHandler, together
from streaming.event_writer import EventTarget, _drop_writer, _writer, write_events
from streaming.exporter import JobExporter
from streaming.processor import KIND_BUCKET, OUTPUT_COLUMNS, OUTPUT_SCHEMA, event_row
from streaming.serving import ServedColumns, partials
from streaming.sinks import READ_BACK_PER_PARTITION, EventBatches, read_events


def event(n: int, type_: EventType, cluster: str = "c", topic: str | None = "t", **fields: Any) -> Event:
    return Event(event_id=f"e{n:04d}", type=type_, severity=Severity.WARNING, cluster=cluster, topic=topic,
                 partition=None if topic is None else n, event_time_ms=1_700_000_000_000 + n,
                 detected_time_ms=1_700_000_000_500 + n, source=EventSource.JOB, message=f"event {n}", **fields)


def micro_batch(spark: SparkSession, events: list[Event], partitions_per_cluster: dict[str, int]) -> DataFrame:
    """The state query's output of one micro-batch: the event rows and one bucket's message, as
    :func:`streaming.processor.serve` gives them (its partitions as many as ``partitions_per_cluster`` says)."""
    rows = [event_row(e) for e in events]
    served = ServedColumns.empty()
    metrics = pd.DataFrame([{"cluster": c, "topic": "t", "partition": p, "sample_time_ms": 1, "leader": 1,
                             "health": 5, "hw_lag": 0, "max_follower_lag": 0, "under_replicated": False,
                             "under_min_isr": False, "at_min_isr": False, "offline": False, "hw_stalled": False,
                             "stale": False, "reassigning": False, "replicas": [1], "isr": [1], "follower_lag": {},
                             "follower_time_lag_ms": {}, "adding_replicas": []}
                            for c, n in partitions_per_cluster.items() for p in range(n)])
    served.record(metrics)
    partition_stale = [e for e in events if e.type == EventType.STALE and e.topic is not None]
    message = {"seq": 1, "left": [], "history": 0, "events": len(events),
               "stale": Counter(e.cluster for e in partition_stale), **partials(served).to_dict()}
    rows.append({"kind": KIND_BUCKET, "partition": 0, "payload": json.dumps(message)})
    return spark.createDataFrame([tuple(row.get(c) for c in OUTPUT_COLUMNS) for row in rows], schema=OUTPUT_SCHEMA)


def read_topic(bootstrap: str, topic: str) -> list[tuple[str, dict[str, Any]]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=3000, isolation_level="read_committed")
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        out: list[tuple[str, dict[str, Any]]] = []
        while any(consumer.position(tp) < end[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend((r.key.decode(), json.loads(r.value)) for r in records)
        return out
    finally:
        consumer.close()


def test_a_task_that_may_have_written_before_writes_only_the_ids_not_written(cluster: LocalCluster,
                                                                            topic_name: str) -> None:
    """A task's first run writes its share; run again (a retry, or its micro-batch again) it reads back the ids
    written since the recorded offsets, whichever micro-batch wrote them (after a new state parallelism, the
    replaced query's), and writes the rest."""
    bootstrap = cluster.bootstrap_servers.split(",")
    topic = f"{topic_name}.events"
    config = ReplmonConfig(transport=TransportConfig(bootstrap_servers=bootstrap, events_topic=topic))
    ensure_topic(config, topic)

    def rows(*ns: int) -> pa.RecordBatch:
        picked = [event(n, EventType.ISR_SHRINK, brokers=[3]) for n in ns]
        return pa.RecordBatch.from_pydict({"event_id": [e.event_id for e in picked],
                                           "payload": [e.model_dump_json() for e in picked]})

    since: dict[int, int] = {}  # the topic is new: from its start
    first = list(write_events(EventTarget(bootstrap, topic, {}, 7, since), iter([rows(1, 2)])))
    other = list(write_events(EventTarget(bootstrap, topic, {}, 3, since), iter([rows(3)])))  # another query's
    again = list(write_events(EventTarget(bootstrap, topic, {}, 7, since, again=True), iter([rows(1, 2, 3, 4)])))
    written = [key for key, _ in read_topic(cluster.bootstrap_servers, topic)]
    assert sorted(written) == ["e0001", "e0002", "e0003", "e0004"]
    def counted(out: list[pa.RecordBatch]) -> dict[str, int]:
        [batch] = out
        return dict(zip(batch.column("name").to_pylist(), batch.column("amount").to_pylist(), strict=True))

    assert counted(again) == {"replmon_events_total": 1}  # e0004 alone, written now
    assert counted(first) == {"replmon_events_total": 2} and counted(other) == {"replmon_events_total": 1}


def test_a_python_worker_keeps_its_events_producer_between_tasks(cluster: LocalCluster) -> None:
    """The executors' producer is made once per Python worker (Spark reuses them) and kept for every micro-batch
    to the same cluster with the same settings; other settings replace it, the old one closed, its PEM directory
    removed."""
    target = EventTarget(cluster.bootstrap_servers.split(","), "any.events", {"ssl_cafile": {"pem": "ca"}}, 1)
    first = _writer(target)
    try:
        assert _writer(dataclasses.replace(target, batch_id=2, again=True)) is first
        assert Path(first.client["ssl_cafile"]).read_text() == "ca"
        other = _writer(dataclasses.replace(target, client={"request_timeout_ms": 20_000}))
        assert other is not first and first.producer._closed and not Path(first.directory.name).exists()
    finally:
        _drop_writer()


def test_events_leave_from_the_executors_once_each_and_a_replay_writes_none_again(
    cluster: LocalCluster, spark: SparkSession, topic_name: str, tmp_path: Path,
) -> None:
    config = ReplmonConfig(
        transport=TransportConfig(bootstrap_servers=cluster.bootstrap_servers.split(","),
                                  events_topic=f"{topic_name}.events", quarantine_topic=f"{topic_name}.quarantine"),
        stream=StreamConfig(checkpoint_dir=tmp_path / "checkpoint", history_dir=tmp_path / "history"))
    exporter = JobExporter(series_budget=10)
    stats = JobStats()
    handler = StateBatchHandler(config, exporter, stats, BatchGate(), spark, "state")
    # batch 1: a leader change and a committed loss in cluster c; cluster d silent (3 of its 4 partitions STALE);
    # one STALE in c (of 10 partitions: not silent)
    events = [event(1, EventType.LEADER_CHANGE, clean=False), event(2, EventType.DATA_LOSS, committed_lost=17),
              event(3, EventType.STALE), *(event(10 + p, EventType.STALE, cluster="d") for p in range(3))]
    batch = micro_batch(spark, events, {"c": 10, "d": 4})
    handler(batch, 1)
    handler(batch, 1)  # the same micro-batch again (the job stopped before its commit): nothing written twice
    written = read_topic(cluster.bootstrap_servers, config.transport.events_topic)
    ids = [key for key, _ in written]
    assert len(ids) == len(set(ids)) == 4, ids
    assert {"e0001", "e0002", "e0003"} <= set(ids)  # the executors' ones
    [silent] = [e for _, e in written if e["cluster"] == "d"]  # d's three STALE events are one
    assert silent["type"] == "STALE" and silent["topic"] is None and "3 partitions" in silent["message"]
    counters = {name: dict(values) for name, values in exporter._counters.items()}
    assert counters["replmon_events_total"] == {("c", "LEADER_CHANGE"): 1, ("c", "DATA_LOSS"): 1,
                                                ("c", "STALE"): 1, ("d", "STALE"): 1}
    assert counters["replmon_unclean_leader_elections_total"] == {("c", "t"): 1}
    assert counters["replmon_committed_messages_lost_total"] == {("c", "t"): 17}
    assert stats.events == 4
    history = read_events(config.stream.history_dir)
    assert sorted(history["event_id"]) == sorted(ids)
    assert list(history.loc[history["event_id"] == "e0002", "committed_lost"]) == [17]
    # the next micro-batch: written by the executors again
    handler(micro_batch(spark, [event(4, EventType.ISR_SHRINK, brokers=[3])], {"c": 10, "d": 4}), 2)
    later = [key for key, _ in read_topic(cluster.bootstrap_servers, config.transport.events_topic)]
    assert sorted(later) == sorted([*ids, "e0004"])
    assert exporter._counters["replmon_events_total"][("c", "ISR_SHRINK")] == 1


def test_a_micro_batch_run_again_and_a_query_that_replaces_another_read_back_from_where_events_began(
    spark: SparkSession, tmp_path: Path,
) -> None:
    old = EventBatches(spark, str(tmp_path), "state")
    assert old.begin(0, lambda: {0: 5}) == ({0: 5}, False)  # a new query
    # micro-batch 5 with no file: a checkpoint of a version without them; what it may have written is read back
    older = EventBatches(spark, str(tmp_path), "state-of-an-older-version")
    assert older.begin(5, lambda: {0: READ_BACK_PER_PARTITION + 10, 1: 7}) == ({0: 10, 1: 0}, True)
    assert old.begin(5, lambda: {0: 10}) == ({0: 10}, False)
    assert old.begin(6, lambda: {0: 20}) == ({0: 20}, False)  # 5 committed; 6 never does
    assert old.begin(6, lambda: {0: 99}) == ({0: 20}, True)  # 6 again: from where its first run began
    assert sorted(old.directory.list()) == ["6"]  # the committed ones' files go
    new = EventBatches(spark, str(tmp_path), "state-1", replaced=("state", 5))
    assert new.begin(0, lambda: {0: 30}) == ({0: 20}, True)  # it starts where 5 ended: 6's events, again
    assert new.begin(1, lambda: {0: 40}) == ({0: 40}, False)
    after_a_commit = EventBatches(spark, str(tmp_path), "state-2", replaced=("state", 6))
    assert after_a_commit.begin(0, lambda: {0: 50}) == ({0: 50}, False)


def test_the_micro_batch_writes_run_at_once_in_the_query_s_job_group_and_a_stop_cancels_them(
        spark: SparkSession) -> None:
    """streaming.batch.together, as the foreachBatch handler runs the events and the history: every call at once,
    each in the calling thread's job group (a stop cancels the query's group: every Spark job of the micro-batch
    ends), and an error raised only once every call ended."""
    sc = spark.sparkContext
    meeting = threading.Barrier(3, timeout=60)  # passes only if the three calls run at once

    def group() -> str | None:
        meeting.wait()
        return sc.getLocalProperty("spark.jobGroup.id")

    listener = socket.create_server(("127.0.0.1", 0))
    sc.setJobGroup("replmon-together", "the query's group", interruptOnCancel=True)
    try:
        assert together([group, group, group]) == ["replmon-together"] * 3
        finished = threading.Event()

        def fails() -> None:
            raise ValueError("the events failed")

        with pytest.raises(ValueError, match="the events failed"):
            together([fails, lambda: finished.set()])
        assert finished.is_set()

        # a Spark job whose task waits for this test to answer on a socket (at most two minutes): it runs until
        # it is cancelled; the test answers only by closing the socket, at its end
        port = listener.getsockname()[1]

        def endless() -> list[Any]:
            return spark.range(1, numPartitions=1).rdd.map(lambda _: _wait_for_an_answer(port, 120)).collect()

        errors: list[BaseException] = []

        def handler() -> None:
            try:
                together([endless, endless])
            except BaseException as exc:
                errors.append(exc)

        caller = InheritableThread(handler, daemon=True)
        caller.start()
        wait_until(lambda: len(sc.statusTracker().getJobIdsForGroup("replmon-together")) >= 2, 60,
                   "both Spark jobs submitted in the group")
        sc.cancelJobGroup("replmon-together")
        caller.join(timeout=60)
        assert not caller.is_alive() and errors, "the calls did not end with the group cancelled"
        assert "cancel" in str(errors[0]).lower(), errors[0]
        assert not sc.statusTracker().getActiveJobsIds(), "a job of the group still runs"
    finally:
        listener.close()
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def _wait_for_an_answer(port: int, timeout_s: float) -> int:
    """A task's wait for a byte (or the end) from the test's socket, with a deadline."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        conn.recv(1)
    return 0
