"""The job's moving parts that need no Spark: the bucket processor (samples in, rows out), the Prometheus
exporter (series budget, aggregates, counters), the events de-duplication and the history files."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from replmon.contracts.metrics import CATALOG
from replmon.contracts.samples import PartitionSample, ReplicaOffsets, to_json
from streaming.batches import HEARD
from streaming.detect import DetectConfig
from streaming.exporter import JobExporter, scrape
from streaming.processor import (
    KIND_EVENT,
    KIND_PARTITION,
    KIND_QUARANTINE,
    QUARANTINED,
    ReplicationProcessor,
    apply_bucket,
    expire_bucket,
    process_bucket,
    serve,
)
from streaming.serving import partials, served_of
from streaming.sinks import HistoryWriter, RecentIds, read_events
from streaming.table import STATE_MAGIC, STATE_VERSION, ColumnarTable, PackedTable, pack, unpack

CFG = DetectConfig(stale_after_ms=10_000)


def sample(cycle: int, isr: list[int], leader: int = 1, epoch: int = 0, hw: int = 100, partition: int = 0,
           leos: dict[int, int] | None = None) -> dict[str, Any]:
    leos = leos or {1: hw, 2: hw, 3: hw}
    s = PartitionSample(cluster="c", collector_id="x", cycle=cycle, sample_time_ms=1_000_000 + cycle * 1000,
                        topic="t", partition=partition, leader=leader, leader_epoch=epoch, replicas=[1, 2, 3],
                        isr=isr, high_watermark=hw, min_insync_replicas=2,
                        replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=o) for b, o in leos.items()])
    return json.loads(to_json(s))


def frame(*samples: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({"kind": ["p"] * len(samples), "sample": [json.dumps(s) for s in samples],
                         "sample_time_ms": [s["sample_time_ms"] for s in samples],
                         "cycle": [s["cycle"] for s in samples]})


def test_bucket_processor_orders_samples_and_emits_one_metrics_row_per_partition() -> None:
    # shuffled input: the shrink (cycle 2) must be seen after the full ISR (cycle 1)
    batch = frame(sample(2, [1, 2], leos={1: 120, 2: 120, 3: 100}), sample(1, [1, 2, 3]),
                  sample(1, [1, 2, 3], partition=1))
    table, rows = process_bucket({}, batch, CFG, now_ms=2_000_000)
    events = [r for r in rows if r["kind"] == KIND_EVENT]
    metrics = [r for r in rows if r["kind"] == KIND_PARTITION]
    assert [e["event_type"] for e in events] == ["ISR_SHRINK"]
    assert json.loads(events[0]["payload"])["brokers"] == [3]
    assert sorted((m["partition"], m["isr_size"]) for m in metrics) == [(0, 2), (1, 3)]
    assert {("c", "t", 0), ("c", "t", 1)} == set(table)
    # the same batch again (a replayed micro-batch) from the same state: the same rows, the same ids
    _, again = process_bucket({}, batch, CFG, now_ms=2_000_000)
    assert [r.get("event_id") for r in again] == [r.get("event_id") for r in rows]
    # and applied on top of the new state: nothing new to say
    _, repeated = process_bucket(table, batch, CFG, now_ms=2_000_000)
    assert not [r for r in repeated if r["kind"] == KIND_EVENT]


def test_quarantined_records_pass_through_the_processor_untouched() -> None:
    bad = [json.dumps({"reason": "malformed_json", "partition": 2, "offset": 7, "raw": "{nope", "key": None}),
           json.dumps({"reason": "unknown_schema", "partition": 0, "offset": 9, "raw": "{}", "key": "aw=="})]
    batch = pd.concat([frame(sample(1, [1, 2, 3])),
                       pd.DataFrame({"kind": [QUARANTINED] * 2, "sample": bad, "sample_time_ms": [None] * 2,
                                     "cycle": [None] * 2})], ignore_index=True)
    table, rows = process_bucket({}, batch, CFG, now_ms=2_000_000)
    assert [r["payload"] for r in rows if r["kind"] == KIND_QUARANTINE] == bad
    assert [r["isr_size"] for r in rows if r["kind"] == KIND_PARTITION] == [3]
    assert set(table) == {("c", "t", 0)}
    only_bad, rows = process_bucket(table, batch.iloc[1:], CFG, now_ms=2_000_000)
    assert only_bad == table and [r["kind"] for r in rows] == [KIND_QUARANTINE] * 2


def test_a_bucket_moves_steady_partitions_in_its_columns_and_unpickles_only_the_others() -> None:
    first = frame(*[sample(1, [1, 2, 3], partition=p) for p in range(10)])
    plain, _ = process_bucket({}, first, CFG, now_ms=2_000_000)
    stored = pack(plain)
    loaded = unpack(stored)
    assert len(loaded.steady) == 10 and loaded.unpickled() == 0  # every partition steady: all in the columns
    # the next batch: partition 3's ISR shrinks (the step of streaming.detect), 7 moves its offsets (the columns)
    shrink = frame(sample(2, [1, 2], partition=3, leos={1: 120, 2: 120, 3: 100}),
                   sample(2, [1, 2, 3], partition=7, hw=110, leos={1: 110, 2: 110, 3: 110}))
    table, rows = process_bucket(loaded, shrink, CFG, now_ms=2_001_000)
    expected_table, expected_rows = process_bucket(plain, shrink, CFG, now_ms=2_001_000)
    key = lambda r: (r["kind"], r["partition"])  # noqa: E731
    assert sorted(rows, key=key) == sorted(expected_rows, key=key)
    assert [r["event_type"] for r in rows if r["kind"] == KIND_EVENT] == ["ISR_SHRINK"]
    assert isinstance(table, ColumnarTable) and table.unpickled() == 1 and len(table.steady) == 9
    assert len(loaded.steady) == 10 and loaded.unpickled() == 0  # the table it started from is untouched
    again = unpack(pack(table))
    assert len(again.steady) == 10 and dict(again.items()) == expected_table  # the shrunk one is steady again
    # the timer takes out of the columns only the partitions it marks stale
    quiet, stale_rows, _ = expire_bucket(unpack(pack(table)), CFG, now_ms=2_000_000 + 10_500)
    assert quiet.unpickled() == len([r for r in stale_rows if r["kind"] == KIND_PARTITION]) == 8


def test_a_bucket_table_stored_before_packing_is_read() -> None:
    plain, _ = process_bucket({}, frame(sample(1, [1, 2, 3]), sample(1, [1, 2], partition=1)), CFG, now_ms=2_000_000)
    old = pickle.dumps(plain, protocol=pickle.HIGHEST_PROTOCOL)  # what BucketTable.save wrote before the packed format
    assert dict(unpack(old).items()) == plain == dict(unpack(pack(unpack(old))).items())
    assert dict(unpack(None).items()) == {}
    # the oldest format: each partition's state pickled whole (not dump_state's, without class names nor identity)
    whole = pickle.dumps({k: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for k, v in plain.items()})
    assert dict(unpack(whole).items()) == plain == dict(unpack(pack(unpack(whole))).items())
    assert len(pack(plain)) < len(whole)
    # the format before compression: the map of packed states, pickled
    raw = pickle.dumps(PackedTable(live=dict(plain)).packed(), protocol=pickle.HIGHEST_PROTOCOL)
    assert raw.startswith(b"\x80") and dict(unpack(raw).items()) == plain == dict(unpack(pack(unpack(raw))).items())


def test_a_bucket_table_is_stored_compressed() -> None:
    table, _ = process_bucket({}, frame(*[sample(1, [1, 2, 3], partition=p) for p in range(1000)]), CFG,
                              now_ms=2_000_000)
    stored = pack(table)
    raw = pickle.dumps(PackedTable(live=dict(table)).packed(), protocol=pickle.HIGHEST_PROTOCOL)
    assert stored.startswith(STATE_MAGIC + bytes([STATE_VERSION])) and len(stored) < len(raw) / 3
    assert dict(unpack(stored).items()) == table


def test_timer_marks_silent_partitions_stale_once() -> None:
    table, _ = process_bucket({}, frame(sample(1, [1, 2, 3])), CFG, now_ms=1_000_000)
    quiet, rows, _ = expire_bucket(table, CFG, now_ms=1_000_000 + 5_000)
    assert rows == []
    stale, rows, _ = expire_bucket(quiet, CFG, now_ms=1_000_000 + 11_000)
    assert [r["event_type"] for r in rows if r["kind"] == KIND_EVENT] == ["STALE"]
    assert [r["stale"] for r in rows if r["kind"] == KIND_PARTITION] == [True]
    _, rows, _ = expire_bucket(stale, CFG, now_ms=1_000_000 + 30_000)
    assert rows == []


FORGETTING = DetectConfig(stale_after_ms=10_000, forget_after_ms=30_000)


def heard(*clusters: str) -> pd.DataFrame:
    """The read stage's word to a bucket that ``clusters`` are sampled (streaming.parse)."""
    return pd.DataFrame({"kind": [HEARD], "sample": [json.dumps(list(clusters))], "sample_time_ms": [None],
                         "cycle": [None]})


def test_a_bucket_forgets_a_deleted_topic_s_partitions_only_while_it_hears_their_cluster_is_sampled() -> None:
    """A bucket holding only the partitions of a deleted topic: no sample of its cluster reaches it, but the read
    stage tells it every micro-batch that the cluster is sampled; its timer then forgets them after
    forget_after_ms (their events, their candidates for the driver to drop, the table empty, through a pack).
    Told only of another cluster, or told nothing (the cluster's collector down), it keeps them, stale."""
    table, first = apply_bucket(ColumnarTable(), frame(*[sample(1, [1, 2, 3], partition=p) for p in range(3)]),
                                FORGETTING, now_ms=1_000_000)
    serve(table, first.rows, 0, 10, "run", first.steady)  # the driver holds the three as candidates
    outcomes = {}
    for told in (("c",), ("d",), ()):
        bucket = unpack(pack(table))
        for now_ms in range(1_002_000, 1_040_000, 2_000):  # a micro-batch every 2 s, none with a sample of c
            if told:
                bucket, out = apply_bucket(bucket, heard(*told), FORGETTING, now_ms)
                assert out.rows == [] and out.steady is None
            bucket = unpack(pack(bucket))
        assert bucket.heard == dict.fromkeys(told, 1_038_000)
        expired, rows, gone = expire_bucket(bucket, FORGETTING, now_ms=1_040_000)
        outcomes[told] = (sorted((r["event_type"], r["partition"]) for r in rows if r["kind"] == KIND_EVENT),
                          sorted(gone), len(unpack(pack(expired))))
    assert outcomes[("c",)] == ([("PARTITION_FORGOTTEN", p) for p in range(3)], [("c", "t", p) for p in range(3)],
                                0)
    assert outcomes[("d",)] == outcomes[()] == ([("STALE", p) for p in range(3)], [], 3)


def test_a_cluster_no_longer_heard_of_leaves_the_bucket_s_state() -> None:
    """A decommissioned cluster's word is dropped once older than stale_after_ms: forget() asks whether a cluster
    was sampled within it, so an older word tells nothing, and kept it would stay in every bucket for good."""
    table, _ = apply_bucket(ColumnarTable(), heard("old", "kept"), FORGETTING, now_ms=1_000_000)
    assert table.heard == {"old": 1_000_000, "kept": 1_000_000}
    table, _ = apply_bucket(table, heard("kept"), FORGETTING, now_ms=1_000_000 + FORGETTING.stale_after_ms)
    assert set(unpack(pack(table)).heard) == {"old", "kept"}  # the word of "old" still within stale_after_ms
    table, _ = apply_bucket(table, heard("kept"), FORGETTING, now_ms=1_000_001 + FORGETTING.stale_after_ms)
    assert unpack(pack(table)).heard == {"kept": 1_000_001 + FORGETTING.stale_after_ms}


class _StateStore:
    """The handle of a transformWithStateInPandas bucket as the processor uses it: one list state, timers."""

    def __init__(self) -> None:
        self.rows: list[tuple[bytes]] = []
        self.puts = 0
        self.timers: list[int] = []

    def getListState(self, _name: str, _schema: Any) -> _StateStore:
        return self

    def get(self) -> Any:
        return iter(self.rows)

    def put(self, rows: list[tuple[bytes]]) -> None:
        self.rows, self.puts = list(rows), self.puts + 1

    def registerTimer(self, at_ms: int) -> None:
        self.timers.append(at_ms)


def test_a_bucket_told_only_of_a_cluster_heard_lately_saves_nothing() -> None:
    """The read stage tells every bucket in every micro-batch which clusters are sampled: a bucket with nothing
    else to do writes its state once per stale_after_ms / 4, not every time, and gives no output then."""
    store = _StateStore()
    processor = ReplicationProcessor(FORGETTING, series_budget=10, run="run")
    processor.init(store)  # type: ignore[arg-type]
    first = processor.process_rows(iter([pd.concat([frame(sample(1, [1, 2, 3])), heard("c")], ignore_index=True)]),
                                   1_000_000)
    assert store.puts == 1 and first.num_rows > 0 and unpack(store.rows[0][0]).heard == {"c": 1_000_000}
    quiet = processor.process_rows(iter([heard("c")]), 1_000_000 + FORGETTING.stale_after_ms // 4)
    assert store.puts == 1 and quiet.num_rows == 0
    due = processor.process_rows(iter([heard("c")]), 1_000_001 + FORGETTING.stale_after_ms // 4)
    assert store.puts == 2 and unpack(store.rows[0][0]).heard == {"c": 1_000_001 + FORGETTING.stale_after_ms // 4}
    assert [row["kind"] for row in due.to_pylist()] == ["bucket"]
    other = processor.process_rows(iter([heard("d")]), 1_000_002 + FORGETTING.stale_after_ms // 4)
    assert store.puts == 3 and set(unpack(store.rows[0][0]).heard) == {"c", "d"} and other.num_rows == 1


def metrics_rows(n: int, unhealthy: set[int]) -> pd.DataFrame:
    rows = []
    for p in range(n):
        bad = p in unhealthy
        rows.append({"cluster": "c", "topic": "t", "partition": p, "sample_time_ms": 5_000, "leader": 1,
                     "leader_epoch": 0, "replica_count": 3, "isr_size": 2 if bad else 3, "min_insync_replicas": 2,
                     "offline": False, "under_replicated": bad, "under_min_isr": False, "at_min_isr": bad,
                     "high_watermark": 10, "log_end_offset": 10, "log_start_offset": 0, "hw_lag": 0,
                     "max_follower_lag": 7 if bad else 0, "health": 2 if bad else 5,
                     "follower_lag": {2: 0, 3: 7 if bad else 0}, "isr": [1, 2] if bad else [1, 2, 3],
                     "replicas": [1, 2, 3], "hw_stalled": False, "stale": False,
                     "elr": [3] if bad else [], "last_known_elr": [],
                     "follower_time_lag_ms": {2: 1_500 if p == 0 else 0, 3: 12_500 if bad else 0},
                     "adding_replicas": [], "reassigning": False, "history": True})
    return pd.DataFrame(rows)


def feed(exporter: JobExporter, rows: pd.DataFrame, bucket: int = 0) -> None:
    """``rows`` as one bucket holding those partitions tells them to the driver (aggregates and candidates)."""
    exporter.update_buckets({bucket: partials(served_of(rows))}, [])
    exporter.update_partitions(rows)


def test_exporter_budget_aggregates_and_counters_over_http() -> None:
    exporter = JobExporter(series_budget=3)
    port = exporter.serve("127.0.0.1", 0)
    feed(exporter, metrics_rows(10, unhealthy={4, 8}))
    exporter.count_events([
        {"cluster": "c", "topic": "t", "type": "HW_REGRESSION", "committed_lost": 42},  # no lineage known
        {"cluster": "c", "topic": "t", "type": "HW_REGRESSION", "committed_lost": None},  # counted by DATA_LOSS
        {"cluster": "c", "topic": "t", "type": "DATA_LOSS", "committed_lost": 8},
        {"cluster": "c", "topic": "t", "type": "EPOCH_DIVERGENCE", "severity": "warning"},  # never committed
        {"cluster": "c", "topic": "t", "type": "EPOCH_DIVERGENCE", "severity": "critical"},
        {"cluster": "c", "topic": "t", "type": "LEADER_CHANGE", "clean": False},
        {"cluster": "c", "topic": "t", "type": "LEADER_CHANGE", "clean": True},
        {"cluster": "c", "topic": "t", "type": "EPOCH_DIVERGENCE", "uncommitted_lost": 30, "uncommitted_counted": 30},
        {"cluster": "c", "topic": "t", "type": "LOG_TRUNCATION", "uncommitted_lost": 30, "uncommitted_counted": 0},
        {"cluster": "c", "topic": None, "type": "BROKER_FENCED", "severity": "warning", "brokers": [2]},
        {"cluster": "c", "topic": None, "type": "BROKER_FENCED", "severity": "info", "brokers": [3]},  # planned
    ])
    m = scrape(port, timeout_s=10)
    exported = {labels["partition"] for labels, _ in m["replmon_partition_isr_size"]}
    assert len(exported) == 3 and {"4", "8"} <= exported  # the unhealthy ones first
    assert m["replmon_cluster_partitions"] == [({"cluster": "c"}, 10.0)]
    assert m["replmon_cluster_under_replicated_partitions"] == [({"cluster": "c"}, 2.0)]
    out_of_isr = {labels["broker"]: v for labels, v in m["replmon_broker_out_of_isr_replicas"]}
    assert out_of_isr == {"1": 0.0, "2": 0.0, "3": 2.0}
    per_broker = {name: {labels["broker"]: v for labels, v in m[name]} for name in (
        "replmon_broker_replicas", "replmon_broker_leaders", "replmon_broker_max_replica_lag_messages")}
    assert per_broker == {"replmon_broker_replicas": {"1": 10.0, "2": 10.0, "3": 10.0},
                          "replmon_broker_leaders": {"1": 10.0, "2": 0.0, "3": 0.0},
                          "replmon_broker_max_replica_lag_messages": {"1": 0.0, "2": 0.0, "3": 7.0}}
    lag = {(labels["partition"], labels["broker"]): v for labels, v in m["replmon_replica_lag_messages"]}
    assert lag[("4", "3")] == 7.0 and lag[("4", "1")] == 0.0
    elr = {(labels["partition"], labels["broker"]): v for labels, v in m["replmon_replica_in_elr"]}
    assert elr[("4", "3")] == 1.0 and elr[("4", "2")] == 0.0  # out of the ISR, eligible (the rows' ELR [3])
    assert {v for _, v in m["replmon_replica_in_last_known_elr"]} == {0.0}
    time_lag = {(labels["partition"], labels["broker"]): v for labels, v in m["replmon_replica_lag_seconds"]}
    assert time_lag[("4", "3")] == 12.5 and time_lag[("4", "1")] == 0.0
    in_sync_lag = {labels["broker"]: v for labels, v in m["replmon_broker_max_in_sync_replica_lag_seconds"]}
    assert in_sync_lag == {"1": 0.0, "2": 1.5, "3": 0.0}  # broker 3 lags 12.5 s only where it is out of the ISR
    assert m["replmon_committed_messages_lost_total"] == [({"cluster": "c", "topic": "t"}, 50.0)]
    assert m["replmon_uncommitted_messages_lost_total"] == [({"cluster": "c", "topic": "t"}, 30.0)]
    assert m["replmon_broker_fencings_total"] == [({"cluster": "c", "broker": "2"}, 1.0)]
    assert m["replmon_epoch_divergences_total"] == [({"cluster": "c", "topic": "t"}, 1.0)]
    assert m["replmon_unclean_leader_elections_total"] == [({"cluster": "c", "topic": "t"}, 1.0)]
    assert m["replmon_job_partition_series_dropped"] == [({}, 7.0)]
    # a newer row of a partition replaces the older one; the bucket's newer aggregates replace its older ones
    newer = metrics_rows(10, unhealthy={8}).assign(sample_time_ms=6_000)
    feed(exporter, newer)
    after = scrape(port, timeout_s=10)
    assert after["replmon_cluster_under_replicated_partitions"] == [({"cluster": "c"}, 1.0)]
    assert {labels["partition"] for labels, _ in after["replmon_partition_isr_size"]} == {"0", "1", "8"}


def test_a_reassignment_s_copy_is_its_replica_s_lag_and_not_its_broker_s_max_lag() -> None:
    """Partition 1 moves from broker 3 to broker 4 (adding 4, far behind, copying; removing 3), partition 2 has only
    a replica being removed left; partition 0's follower on broker 3 lags. The copy's lag is its replica's series,
    marked as being added; its broker's largest replica lag leaves it out; both partitions count as reassigning."""
    rows = metrics_rows(3, unhealthy={0})
    moving = {"replicas": [1, 2, 3, 4], "replica_count": 4, "isr": [1, 2, 3], "isr_size": 3,
              "follower_lag": {2: 0, 3: 0, 4: 50_000}, "follower_time_lag_ms": {2: 0, 3: 0, 4: 600_000},
              "max_follower_lag": 0, "adding_replicas": [4], "reassigning": True}
    for name, value in moving.items():
        rows.at[1, name] = value
    rows.at[2, "reassigning"] = True
    exporter = JobExporter(series_budget=100)
    feed(exporter, rows)
    m: dict[str, dict[tuple[str, ...], float]] = {}
    for family in exporter.collect():
        for sample in family.samples:
            m.setdefault(sample.name, {})[tuple(sample.labels.get(k, "") for k in ("partition", "broker"))] = \
                sample.value
    assert m["replmon_partition_reassigning"] == {("0", ""): 0.0, ("1", ""): 1.0, ("2", ""): 1.0}
    assert m["replmon_cluster_reassigning_partitions"] == {("", ""): 2.0}
    assert {key: v for key, v in m["replmon_replica_adding"].items() if v} == {("1", "4"): 1.0}
    assert len(m["replmon_replica_adding"]) == 3 + 4 + 3  # every replica's, 0 unless being added
    assert m["replmon_replica_lag_messages"][("1", "4")] == 50_000.0  # the copy's progress, as it is
    assert m["replmon_replica_lag_seconds"][("1", "4")] == 600.0
    max_lag = {broker: v for (_p, broker), v in m["replmon_broker_max_replica_lag_messages"].items()}
    assert max_lag == {"1": 0.0, "2": 0.0, "3": 7.0, "4": 0.0}  # broker 4 hosts only the copy
    assert m["replmon_broker_replicas"][("", "4")] == 1.0 and m["replmon_broker_out_of_isr_replicas"][("", "4")] == 1


def test_the_exporter_keeps_the_newest_row_of_each_partition_batch_after_batch() -> None:
    """Against the plain rule, the whole table and the batch merged and deduplicated: older rows never replace
    newer ones, a tie goes to the later row, new partitions join (the columns grow), and a column that meets a null
    (an integer column becoming float) keeps every value."""
    rng = random.Random(7)
    exporter = JobExporter(series_budget=100)
    expected = pd.DataFrame()
    for batch in range(30):
        rows = metrics_rows(40, unhealthy=set(rng.sample(range(40), 10))).sample(n=rng.randint(1, 40),
                                                                                  random_state=batch)
        rows = rows.assign(partition=[rng.randrange(60) for _ in range(len(rows))],
                           sample_time_ms=[rng.randrange(5) * 1_000 for _ in range(len(rows))],
                           hw_lag=[rng.randrange(100) for _ in range(len(rows))])
        if batch % 7 == 3:
            # as Arrow makes an integer column with nulls: float, NaN
            rows["high_watermark"] = [np.nan if rng.random() < 0.5 else 9 for _ in range(len(rows))]
        exporter.update_partitions(rows)
        merged = rows if expected.empty else pd.concat([expected, rows], ignore_index=True)
        expected = merged.sort_values("sample_time_ms", kind="stable").drop_duplicates(
            subset=["cluster", "topic", "partition"], keep="last")
        got = exporter.snapshot()
        assert len(got) == len(expected)
        for frame_ in (got, expected):
            frame_.sort_values("partition", inplace=True, ignore_index=True)
        assert got[["partition", "sample_time_ms", "hw_lag"]].equals(expected[["partition", "sample_time_ms",
                                                                                "hw_lag"]])
        assert got["high_watermark"].fillna(-1).tolist() == expected["high_watermark"].fillna(-1).tolist()
        for column in ("isr", "follower_lag", "under_replicated", "health"):  # lists, maps, flags: whole
            assert got[column].tolist() == expected[column].tolist(), column
    assert len(got) > 40  # partitions joined after the first batch


def test_broker_aggregates_over_arrays_are_the_plain_count_of_every_replica() -> None:
    """Against the rule counted replica by replica: per (cluster, broker) its replicas, the partitions it leads, its
    replicas out of the ISR, its largest lag, its largest time lag in the ISR; cells as Spark's collect gives them
    (lists or arrays, maps as dicts or pairs, nulls)."""
    rng = random.Random(3)

    def plain(table: pd.DataFrame) -> dict[tuple[str, int], dict[str, int]]:
        out: dict[tuple[str, int], dict[str, int]] = {}
        for row in table.itertuples(index=False):
            isr = set(row.isr if row.isr is not None else ())
            lags = dict(row.follower_lag) if row.follower_lag is not None else {}
            time_lags = dict(row.follower_time_lag_ms) if row.follower_time_lag_ms is not None else {}
            for broker in row.replicas if row.replicas is not None else ():
                c = out.setdefault((row.cluster, int(broker)), dict.fromkeys(
                    ("replicas", "leaders", "out_of_isr", "max_lag", "max_isr_lag_ms"), 0))
                c["replicas"] += 1
                c["leaders"] += broker == row.leader
                c["out_of_isr"] += broker not in isr
                c["max_lag"] = max(c["max_lag"], lags.get(broker) or 0)
                if broker in isr:
                    c["max_isr_lag_ms"] = max(c["max_isr_lag_ms"], time_lags.get(broker) or 0)
        return out

    for _ in range(20):
        rows = []
        for p in range(rng.randint(1, 60)):  # the other metrics as metrics_rows has them
            replicas = rng.sample(range(1, 7), rng.randint(1, 4))
            isr = [b for b in replicas if rng.random() < 0.7]
            lags = {b: (None if rng.random() < 0.1 else rng.randrange(500)) for b in replicas if rng.random() < 0.8}
            time_lags = {b: rng.randrange(30_000) for b in replicas if rng.random() < 0.8}
            rows.append({
                "cluster": rng.choice(["a", "b"]), "partition": p,
                "leader": rng.choice([*replicas, -1]),
                "replicas": np.array(replicas) if rng.random() < 0.5 else replicas,
                "isr": None if rng.random() < 0.05 else np.array(isr, dtype=np.int64) if rng.random() < 0.5 else isr,
                "follower_lag": None if rng.random() < 0.05 else lags if rng.random() < 0.5 else list(lags.items()),
                "follower_time_lag_ms": time_lags if rng.random() < 0.5 else list(time_lags.items())})
        table = pd.DataFrame(rows)
        others = metrics_rows(len(table), set()).drop(columns=list(table.columns), errors="ignore")
        brokers = partials(served_of(pd.concat([table, others], axis=1))).brokers
        got = {(c, int(b)): {"replicas": r, "leaders": ld, "out_of_isr": o, "max_lag": max(0, ml),
                             "max_isr_lag_ms": max(0, mi)}
               for c, b, r, ld, o, ml, mi in brokers.itertuples(index=False)}
        assert got == plain(table)


def test_everything_exported_is_in_the_catalogue() -> None:
    exporter = JobExporter(series_budget=100)
    feed(exporter, metrics_rows(2, unhealthy={1}))
    exporter.count_events([{"cluster": "c", "topic": "t", "type": "EPOCH_DIVERGENCE", "severity": "critical"}])
    exporter.count("replmon_quarantined_samples_total", ("malformed_json",))
    exporter.set_job("replmon_job_batch_duration_seconds", 1.5)
    names = {f.name + ("_total" if f.type == "counter" else "") for f in exporter.collect()}
    catalogue = {s.name for s in CATALOG}
    assert names <= catalogue
    assert "replmon_quarantined_samples_total" in names


def test_recent_ids_are_bounded_and_ordered() -> None:
    ids = RecentIds(capacity=3)
    for i in range(5):
        ids.add(str(i))
    assert len(ids) == 3 and "0" not in ids and "4" in ids


def test_history_is_idempotent_per_batch(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path)
    event = {"event_id": "e1", "type": "ISR_SHRINK", "severity": "warning", "cluster": "c", "topic": "t",
             "partition": 0, "event_time_ms": 1_700_000_000_000, "detected_time_ms": 1_700_000_000_500,
             "brokers": [3], "isr": [1, 2], "previous_isr": [1, 2, 3], "message": "m"}
    writer.write_events([event], batch_id=7)
    writer.write_events([event], batch_id=7)  # the replay of batch 7
    writer.write_events([{**event, "event_id": "e2", "event_time_ms": 1_700_000_001_000}], batch_id=8)
    events = read_events(tmp_path)
    assert list(events["event_id"]) == ["e1", "e2"]
    files = list((tmp_path / "events").rglob("*.parquet"))
    assert len(files) == 2 and all("cluster=c" in str(f) and "date=2023-11-14" in str(f) for f in files)


def test_the_processor_marks_a_history_snapshot_on_a_change_or_once_a_minute() -> None:
    """A partition row is a snapshot on the partition's first sample, on a change of more than its offsets, and
    on its first sample of each minute (sample time); the timer's stale rows are snapshots too."""
    def marks(table: Any, *samples: dict[str, Any]) -> tuple[Any, dict[int, bool]]:
        table, rows = process_bucket(table, frame(*samples), CFG, now_ms=2_000_000)
        return table, {r["partition"]: r["history"] for r in rows if r["kind"] == KIND_PARTITION}

    table, first = marks({}, sample(1, [1, 2, 3]), sample(1, [1, 2, 3], partition=1))
    assert first == {0: True, 1: True}
    # cycle 2, the same minute: partition 0's offsets moved, partition 1's ISR shrank
    table, second = marks(table, sample(2, [1, 2, 3], hw=110),
                          sample(2, [1, 2], partition=1, leos={1: 120, 2: 120, 3: 100}))
    assert second == {0: False, 1: True}
    table, third = marks(table, sample(3, [1, 2, 3], hw=120), sample(3, [1, 2], partition=1, hw=125))
    assert third == {0: False, 1: False}
    # cycle 20 is the next minute of sample time (1,020,000 ms): both again, offsets only or not
    table, fourth = marks(table, sample(20, [1, 2, 3], hw=130), sample(20, [1, 2], partition=1, hw=130))
    assert fourth == {0: True, 1: True}
    _, stale_rows, _ = expire_bucket(table, CFG, now_ms=2_000_000 + 11_000)
    assert [r["history"] for r in stale_rows if r["kind"] == KIND_PARTITION] == [True, True]
