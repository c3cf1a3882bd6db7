"""What the state buckets tell the driver (streaming.serving): their aggregates, combined, equal the aggregates over
every partition counted one by one; their candidates, through the driver's handling, give the series budget's
exact choice over every partition, micro-batch after micro-batch, across timers, two calls of one bucket in a
micro-batch, and a driver that starts again."""

from __future__ import annotations

import json
import random
import warnings
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer
from pyspark.sql.pandas.types import to_arrow_type

from replmon.contracts.samples import PartitionSample, ReplicaOffsets, to_json
from streaming.batch import take_served
from streaming.detect import DetectConfig
from streaming.exporter import JobExporter, aggregate_families
from streaming.processor import (
    KIND_BUCKET,
    KIND_EVENT,
    KIND_PARTITION,
    KIND_QUARANTINE,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    QUARANTINED,
    apply_bucket,
    expire_bucket,
    output_of,
    rows_batch,
    serve,
    served_rows,
    steady_frame,
    steady_rows,
)
from streaming.pyspark_hooks import arrow_output, as_pandas
from streaming.serving import (
    NULL,
    Partials,
    ServedColumns,
    budgeted,
    combine,
    partials,
    partials_dict,
    rank_frame,
    ranked,
    recorded_columns,
    served_of,
)
from streaming.state import PartitionKey
from streaming.table import ColumnarTable, pack, unpack

CFG = DetectConfig(stale_after_ms=10_000)
KEY = ["cluster", "topic", "partition"]


def object_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Output rows as a frame of object columns (lists and dicts as they are, absent values None): what the
    processor yielded before its output was Arrow, for PySpark's own conversion."""
    return pd.DataFrame({name: pd.Series([row.get(name) for row in rows], dtype=object) for name in OUTPUT_COLUMNS})


def metrics_row(rng: random.Random, cluster: str, topic: str, partition: int) -> dict[str, Any]:
    """A metrics row as the processor gives it, with random membership, lags, flags and nulls."""
    replicas = rng.sample(range(1, 6), rng.randint(1, 4))
    isr = [b for b in replicas if rng.random() < 0.75]
    leader = rng.choice([*replicas, -1])
    lags = {b: None if rng.random() < 0.1 else rng.randrange(300) for b in replicas if b != leader}
    time_lags = {b: None if rng.random() < 0.1 else rng.randrange(20_000) for b in replicas if b != leader}
    # a reassignment in flight: a follower being added (copying: its lag left out of max_follower_lag), or only
    # replicas being removed
    adding = [b for b in replicas if b != leader and rng.random() < 0.2]
    reassigning = bool(adding) or rng.random() < 0.05
    known = [x for b, x in lags.items() if x is not None and b not in adding]
    return {"cluster": cluster, "topic": topic, "partition": partition, "sample_time_ms": rng.randrange(10**12),
            "leader": leader, "leader_epoch": 3, "replica_count": len(replicas), "isr_size": len(isr),
            "min_insync_replicas": rng.choice([None, 1, 2]), "offline": leader < 0,
            "under_replicated": len(isr) < len(replicas), "under_min_isr": rng.random() < 0.2,
            "at_min_isr": rng.random() < 0.2, "high_watermark": 10, "log_end_offset": 12, "log_start_offset": 0,
            "hw_lag": None if rng.random() < 0.2 else rng.randrange(50),
            "max_follower_lag": max(known) if known else None, "health": rng.randrange(6),
            "follower_lag": lags, "isr": isr, "replicas": replicas,
            "hw_stalled": rng.random() < 0.2, "stale": rng.choice([True, False, None]),
            "elr": [], "last_known_elr": [], "follower_time_lag_ms": time_lags,
            "adding_replicas": adding, "reassigning": reassigning, "history": False}


def plain_aggregates(rows: list[dict[str, Any]]) -> dict[str, dict[tuple[Any, ...], dict[str, float]]]:
    """Every aggregate counted partition by partition, replica by replica."""
    clusters: dict[tuple[Any, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    topics: dict[tuple[Any, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    brokers: dict[tuple[Any, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        c = clusters[(r["cluster"],)]
        c["partitions"] += 1
        for flag in ("under_replicated", "under_min_isr", "at_min_isr", "offline", "hw_stalled", "stale",
                     "reassigning"):
            c[flag] += r[flag] is True
        c["last"] = max(c["last"], r["sample_time_ms"])
        t = topics[(r["cluster"], r["topic"])]
        t["partitions"] += 1
        for flag in ("under_replicated", "under_min_isr", "offline"):
            t[flag] += r[flag] is True
        t["max_hw_lag"] = max(t["max_hw_lag"], r["hw_lag"] or 0)
        for b in r["replicas"]:
            x = brokers[(r["cluster"], b)]
            x["replicas"] += 1
            x["leaders"] += b == r["leader"]
            x["out_of_isr"] += b not in r["isr"]
            # a replica being added copies the log: its lag is no follower's
            copying = b in r["adding_replicas"]
            x["max_lag"] = max(x["max_lag"], 0 if copying else r["follower_lag"].get(b) or 0)
            x["max_isr_lag_ms"] += 0
            if b in r["isr"]:
                x["max_isr_lag_ms"] = max(x["max_isr_lag_ms"], r["follower_time_lag_ms"].get(b) or 0)
    return {"clusters": clusters, "topics": topics, "brokers": brokers}


def exported(aggregates: Partials) -> dict[str, dict[tuple[Any, ...], dict[str, float]]]:
    """The aggregates as the exporter's families give them."""
    names = {"replmon_cluster_partitions": ("clusters", "partitions"),
             "replmon_cluster_under_replicated_partitions": ("clusters", "under_replicated"),
             "replmon_cluster_under_min_isr_partitions": ("clusters", "under_min_isr"),
             "replmon_cluster_at_min_isr_partitions": ("clusters", "at_min_isr"),
             "replmon_cluster_offline_partitions": ("clusters", "offline"),
             "replmon_cluster_hw_stalled_partitions": ("clusters", "hw_stalled"),
             "replmon_cluster_stale_partitions": ("clusters", "stale"),
             "replmon_cluster_last_sample_timestamp_seconds": ("clusters", "last"),
             "replmon_cluster_reassigning_partitions": ("clusters", "reassigning"),
             "replmon_topic_partitions": ("topics", "partitions"),
             "replmon_topic_under_replicated_partitions": ("topics", "under_replicated"),
             "replmon_topic_under_min_isr_partitions": ("topics", "under_min_isr"),
             "replmon_topic_offline_partitions": ("topics", "offline"),
             "replmon_topic_max_hw_lag_messages": ("topics", "max_hw_lag"),
             "replmon_broker_replicas": ("brokers", "replicas"), "replmon_broker_leaders": ("brokers", "leaders"),
             "replmon_broker_out_of_isr_replicas": ("brokers", "out_of_isr"),
             "replmon_broker_max_replica_lag_messages": ("brokers", "max_lag"),
             "replmon_broker_max_in_sync_replica_lag_seconds": ("brokers", "max_isr_lag_ms")}
    out: dict[str, dict[tuple[Any, ...], dict[str, float]]] = {s: defaultdict(dict) for s in ("clusters", "topics",
                                                                                            "brokers")}
    for family in aggregate_families(aggregates):
        scope, field = names[family.name]
        for s in family.samples:
            labels = tuple(s.labels[k] if k != "broker" else int(s.labels[k]) for k in s.labels)
            value = s.value * 1000 if field in ("last", "max_isr_lag_ms") else s.value
            out[scope][labels][field] = round(value)
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40), st.integers(1, 5))
def test_the_buckets_aggregates_combined_are_the_aggregates_over_every_partition(seed: int, partitions: int,
                                                                                  buckets: int) -> None:
    rng = random.Random(seed)
    rows = [metrics_row(rng, rng.choice("ab"), rng.choice(["t", "u", "v"]), p) for p in range(partitions)]
    split: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        split[rng.randrange(buckets)].append(row)
    parts = [partials(served_of(pd.DataFrame(bucket))) for bucket in split.values()]
    want = {scope: {k: {f: round(v) for f, v in fields.items()} for k, fields in values.items()}
            for scope, values in plain_aggregates(rows).items()}
    got = exported(combine(parts))
    assert {s: dict(v) for s, v in got.items()} == want
    # through the bucket message's JSON, as the driver reads it, without pandas' warning of a deprecated concat
    # (a column JSON left all null: the job's log showed it at every start)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert exported(combine(Partials.from_dict(json.loads(json.dumps(p.to_dict()))) for p in parts)) == got
    # as the processor records its rows (columns of dicts, not a frame) and writes its message (no frames)
    for bucket, part in zip(split.values(), parts, strict=True):
        columns = ServedColumns.empty()
        columns.record(recorded_columns(bucket))
        assert json.dumps(partials_dict(columns)) == json.dumps(part.to_dict())


def sample(rng: random.Random, partition: int, cycle: int, moves: bool = False) -> dict[str, Any]:
    """A partition sample of a 3-broker topic whose ISR, leader and offsets move at random; with ``moves``, now and
    then a reassignment in flight from broker 3 to broker 4, which copies the log far behind."""
    isr = [1, 2, 3] if rng.random() < 0.6 else sorted(rng.sample([1, 2, 3], rng.randint(1, 2)))
    hw = 1_000 + 100 * cycle
    leos = {b: hw + rng.randrange(0, 30) if b in isr else hw - rng.randrange(0, 200) for b in (1, 2, 3)}
    moving = moves and rng.random() < 0.25
    if moving:
        leos[4] = rng.randrange(0, 500)
    s = PartitionSample(cluster="c", collector_id="x", cycle=cycle, sample_time_ms=1_000_000 + cycle * 1000,
                        topic=f"t{partition % 3}", partition=partition, leader=isr[0], leader_epoch=0,
                        replicas=[1, 2, 3, 4] if moving else [1, 2, 3], isr=isr, high_watermark=hw,
                        min_insync_replicas=2, adding_replicas=[4] if moving else [],
                        removing_replicas=[3] if moving else [],
                        replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=o) for b, o in leos.items()])
    return json.loads(to_json(s))


def records(samples: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame({"kind": ["p"] * len(samples), "sample": [json.dumps(s) for s in samples],
                         "sample_time_ms": [s["sample_time_ms"] for s in samples],
                         "cycle": [s["cycle"] for s in samples]})


def plain_top(newest: dict[tuple[str, str, int], dict[str, Any]], budget: int) -> list[tuple[str, str, int]]:
    """The budget's choice over every partition, by its rule written out: least healthy, then most lagging, then
    by name."""
    def rank(key: tuple[str, str, int]) -> tuple[Any, ...]:
        r = newest[key]
        return (r["health"], -((r["hw_lag"] or 0) + (r["max_follower_lag"] or 0)), key)
    return sorted(newest, key=rank)[:budget]


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 6))
@example(282, 1)  # its first micro-batches reach no partition: only timers, nothing to serve yet
def test_the_driver_serves_the_budget_s_exact_choice_over_every_partition(seed: int, budget: int) -> None:
    """Random micro-batches over 3 buckets of 12 partitions (each bucket's table packed and unpacked between
    calls, as the state store keeps it): after each, the driver's series are the first ``budget`` partitions of
    all the job tracks, with each one's newest metrics, and its aggregates those of every partition's newest
    metrics. Timers mark silent partitions stale (candidates change without a sample) and forget those silent for
    long (the last four of each bucket are no longer sampled from the sixth cycle: a deleted topic), a bucket is
    sometimes called twice in one micro-batch, and the driver sometimes starts again (a new exporter, a new
    run)."""
    cfg = DetectConfig(stale_after_ms=CFG.stale_after_ms, forget_after_ms=2 * CFG.stale_after_ms)
    rng = random.Random(seed)
    buckets = {b: pack(ColumnarTable()) for b in range(3)}
    exporter, run = JobExporter(series_budget=budget), "run-0"
    newest: dict[tuple[str, str, int], dict[str, Any]] = {}
    forgotten: set[tuple[str, str, int]] = set()
    now_ms = 2_000_000
    seen: set[tuple[str, str, int]] = set()
    moving: set[tuple[str, str, int]] = set()  # sampled with a reassignment in flight
    last = 14
    for cycle in range(1, last + 1):
        now_ms += 4_000
        if rng.random() < 0.15 and cycle < last:  # the driver starts again
            exporter, run = JobExporter(series_budget=budget), f"run-{cycle}"
        outputs = []
        for bucket in range(3):
            calls = ["samples"] if rng.random() < 0.8 or cycle == last else []
            if rng.random() < 0.3 or cycle == last:
                calls.append("timer")
            for call in calls:
                table = unpack(buckets[bucket])
                steady = None
                if call == "samples":
                    chosen = [p for p in range(bucket, 36, 3)
                              if (rng.random() < 0.7 or cycle == last) and (p < 24 or cycle < 6)]
                    table, out = apply_bucket(table, records([sample(rng, p, cycle, moves=True) for p in chosen]),
                                              cfg, now_ms, copy=False)
                    gone: list[PartitionKey] = []
                    rows, steady = out.rows, out.steady
                    every = rows + ([] if steady is None else steady_rows(steady))
                else:
                    table, rows, gone = expire_bucket(table, cfg, now_ms)
                    every = rows
                for row in every:
                    key = (row["cluster"], row["topic"], int(row["partition"] or 0))
                    if row["kind"] == KIND_PARTITION:
                        newest[key] = row
                        seen.add(key)
                        if row["reassigning"]:
                            moving.add(key)
                    elif row.get("event_type") == "PARTITION_FORGOTTEN":
                        forgotten.add(key)
                        del newest[key]
                outputs.append(as_pandas(serve(table, rows, bucket, budget, run, steady, gone)))
                buckets[bucket] = pack(table)
        if not outputs:
            continue
        rng.shuffle(outputs)  # Spark's collect keeps no order between tasks
        out = pd.concat(outputs, ignore_index=True)
        assert not out.loc[out["kind"] == KIND_PARTITION, "served"].any()  # served only in the bucket rows
        buckets_out = out[out["kind"] == KIND_BUCKET]  # what the driver collects, as it reads it
        take_served(exporter, buckets_out, served_rows(buckets_out))
        if not newest or exporter.tracked() < len(newest):
            # no partition sampled yet (only timers so far), or a driver that started again, which hears from
            # each bucket at its next call
            continue
        table_ = exporter.snapshot()
        served = budgeted(table_, budget)
        keys = list(zip(served["cluster"], served["topic"], served["partition"].astype(int), strict=True))
        assert sorted(keys) == sorted(plain_top(newest, budget))
        for row in served.to_dict("records"):
            want = newest[(row["cluster"], row["topic"], int(row["partition"]))]
            assert (row["sample_time_ms"], row["isr_size"], row["stale"], row["hw_lag"], row["reassigning"],
                    list(row["adding_replicas"])) == (want["sample_time_ms"], want["isr_size"], want["stale"],
                                                      want["hw_lag"], want["reassigning"], want["adding_replicas"])
        with exporter._lock:
            aggregates = exporter._aggregates
        assert exported(aggregates) == exported(partials(served_of(pd.DataFrame(list(newest.values())))))
    assert moving  # reassignments (a copy far behind) went through the buckets and the driver
    # the last cycle sampled every partition still in the topics and fired every bucket's timer
    assert {key for key in newest if key[2] >= 24} == set() and forgotten >= {key for key in seen if key[2] >= 24}
    assert {key for key in zip(*(exporter.snapshot()[name] for name in KEY), strict=True) if key[2] >= 24} == set()


def test_the_served_rows_leave_in_their_bucket_s_row_and_the_history_snapshots_stay_rows() -> None:
    """serve: the partition rows a bucket serves (its candidates among the partitions the call reached) travel as
    one Arrow stream in its bucket row, which the driver reads back as the rows the steps gave; history snapshots
    (served or not), events and quarantined records stay rows, none of them served; a call that serves nothing
    sends no stream."""
    rng = random.Random(11)
    table = ColumnarTable()
    for cycle in range(1, 4):  # the first cycle: every row a history snapshot; later ones mostly steady
        bad = pd.DataFrame({"kind": [QUARANTINED], "sample": ['{"reason": "malformed_json", "raw": "x{"}'],
                            "sample_time_ms": [None], "cycle": [None]})
        table, out = apply_bucket(table, pd.concat([records([sample(rng, p, cycle) for p in range(30)]), bad],
                                                   ignore_index=True), CFG, 1_000_000 + cycle * 1000 + 500,
                                  copy=False)
        # all the call's rows, none chosen, as the driver reads rows (served_rows)
        every = output_of(out.rows, out.steady).to_pandas(maps_as_pydicts="strict")
        leaving = serve(table, out.rows, 0, 10, "run", out.steady)
        packed = as_pandas(leaving)
        candidates = set(table.served.keys(np.flatnonzero(table.served.columns["served"])))
        assert len(candidates) == 10
        partition = every["kind"] == KIND_PARTITION
        chosen = partition & np.array([(c, t, p) in candidates for c, t, p in zip(
            every["cluster"], every["topic"], every["partition"], strict=True)])
        driver = served_rows(packed[packed["kind"] == KIND_BUCKET])
        assert 0 < len(driver) <= 10 and driver["served"].all()
        assert (driver["payload"] == str(cycle)).all()  # the message's sequence

        def ordered(frame: pd.DataFrame) -> pd.DataFrame:
            return frame.drop(columns=["served", "payload"]).sort_values(KEY).reset_index(drop=True)

        pd.testing.assert_frame_equal(ordered(driver), ordered(every[chosen]), check_dtype=False)
        shown = [*KEY, "kind", "history", "event_id"]
        stays = [tuple(row[k] for k in shown) for row in output_of(out.rows, out.steady).to_pylist()
                 if row["kind"] != KIND_PARTITION or row["history"]]
        assert sorted((tuple(row[k] for k in shown) for row in leaving.to_pylist() if row["kind"] != KIND_BUCKET),
                      key=str) == sorted(stays, key=str)
        assert not packed.loc[packed["kind"] == KIND_PARTITION, "served"].any()
        assert packed["served_rows"].notna().sum() == 1 and set(packed["kind"]) >= {KIND_BUCKET, KIND_QUARANTINE}
        stream = packed["served_rows"].dropna().iloc[0]  # held once: the column's data is that one stream
        held = leaving.column("served_rows").get_total_buffer_size()
        assert held <= len(stream) + 5 * (leaving.num_rows + 1)
        table = unpack(pack(table))
    nothing = as_pandas(serve(table, [{"kind": KIND_QUARANTINE, "payload": "x"}], 0, 10, "run"))
    assert nothing["kind"].tolist() == [KIND_QUARANTINE, KIND_BUCKET] and nothing["served_rows"].isna().all()
    assert served_rows(pd.DataFrame({"served_rows": [None]})).empty


def test_a_bucket_s_first_call_over_thousands_of_partitions_packs_its_rows() -> None:
    """A bucket's first call: every partition row a history snapshot and served (a bucket the size of 100,000
    partitions in 32 buckets), the stream ~1 MB; packed, it is held once, not once per row that stays."""
    rng = random.Random(3)
    table, out = apply_bucket(ColumnarTable(), records([sample(rng, p, 1) for p in range(3_200)]), CFG, 2_000_000)
    packed = as_pandas(serve(table, out.rows, 0, 5_000, "run", out.steady))
    assert (packed["kind"] == KIND_PARTITION).sum() == 3_200  # every one a history snapshot
    assert len(served_rows(packed[packed["kind"] == KIND_BUCKET])) == 3_200


def test_a_bucket_stored_before_the_served_columns_tells_every_partition_at_its_first_call() -> None:
    """A state value of format 2 loads without served columns: the bucket's first call of a run sends the
    aggregates and candidates of all its partitions, not only of those sampled since."""
    rng = random.Random(5)
    table, _ = apply_bucket(ColumnarTable(), records([sample(rng, p, 1) for p in range(6)]), CFG, 2_000_000)
    table = unpack(pack(table))
    table.served = ServedColumns.empty()  # as format 2 loads
    _, again = apply_bucket(table, records([sample(rng, 0, 2)]), CFG, 2_001_000, copy=False)
    output = as_pandas(serve(table, again.rows, 0, 100, "r", again.steady))
    [message] = [json.loads(p) for p in output.loc[output["kind"] == KIND_BUCKET, "payload"]]
    assert Partials.from_dict(message).clusters["partitions"].tolist() == [6]
    served = served_rows(output[output["kind"] == KIND_BUCKET])
    assert sorted(served["partition"].astype(int)) == list(range(6)) and served["served"].all()


def test_the_steady_step_s_metrics_recorded_from_their_matrices_are_those_recorded_as_rows() -> None:
    """The served columns of steady samples, from the steady step's matrices, equal those of the same metrics as
    output rows (ISR shrunk and full, lags, time lags)."""
    def steady_sample(partition: int, cycle: int) -> dict[str, Any]:  # membership kept, offsets moving
        isr = [1, 2] if partition % 4 == 0 else [1, 2, 3]
        hw = 1_000 + 100 * cycle
        leos = {1: hw + partition, 2: hw + partition % 7, 3: hw - 50 if 3 not in isr else hw + 2}
        s = PartitionSample(cluster="c", collector_id="x", cycle=cycle, sample_time_ms=1_000_000 + cycle * 4000,
                            topic=f"t{partition % 3}", partition=partition, leader=1, leader_epoch=0,
                            replicas=[1, 2, 3], isr=isr, high_watermark=hw, min_insync_replicas=2,
                            replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=o) for b, o in leos.items()])
        return json.loads(to_json(s))

    table = ColumnarTable()
    for cycle in range(1, 8):
        table, out = apply_bucket(table, records([steady_sample(p, cycle) for p in range(40)]), CFG,
                                  2_000_000 + cycle * 4000, copy=False)
        table = unpack(pack(table))
    assert out.steady is not None and len(out.steady["partition"]) == 40
    assert min(out.steady["isr_size"]) < 3  # steady with a shrunk ISR too
    fast, plain = ServedColumns.empty(), ServedColumns.empty()
    fast.record_steady(out.steady)
    plain.record(steady_frame(out.steady))
    rows = ServedColumns.empty()  # as the processor records detect.py's rows
    rows.record(recorded_columns(steady_rows(out.steady)))
    assert fast.names == plain.names == rows.names
    for name, column in plain.columns.items():
        assert np.array_equal(fast.columns[name], column), name
        assert np.array_equal(rows.columns[name], column), name


def test_the_output_reaches_the_jvm_as_pyspark_s_own_conversion_makes_it() -> None:
    """What the processor yields, through the serializer's hook (its Arrow batch handed over as it is), is the Arrow
    data PySpark's public path makes of the same rows: of the rows as dicts and lists in object columns (the frame
    the processor yielded before), and of what leaves a bucket as pandas (the fallback on another PySpark).
    Events, a quarantined record, rows of detect.py's steps and of the steady step, timers' rows and the buckets'
    messages; a frame that carries no batch still takes PySpark's own conversion."""
    serializer = TransformWithStateInPandasSerializer("UTC", False, True, 10_000)
    struct = to_arrow_type(OUTPUT_SCHEMA)

    def hooked(batch: pa.RecordBatch) -> pa.RecordBatch:
        return serializer._create_batch([(arrow_output(batch), struct)])

    def public(frame: pd.DataFrame) -> pa.RecordBatch:
        return serializer._create_batch([(frame, struct)])

    rng = random.Random(7)
    table = ColumnarTable()
    kinds: set[str] = set()
    steady = 0
    for cycle in range(1, 9):
        now_ms = 1_000_000 + cycle * 1000 + 500
        if cycle == 6:  # partitions 0-5 silent: the timer marks them stale
            table, rows, _ = expire_bucket(table, CFG, now_ms + 30_000)
            leaving = serve(table, rows, 0, 4, "run")
        else:
            chosen = range(6, 20) if cycle > 6 else range(20)
            samples = records([sample(rng, p, cycle) for p in chosen])
            bad = pd.DataFrame({"kind": [QUARANTINED], "sample": ['{"reason": "malformed_json", "raw": "x{"}'],
                                "sample_time_ms": [None], "cycle": [None]})
            table, out = apply_bucket(table, pd.concat([samples, bad], ignore_index=True), CFG, now_ms, copy=False)
            rows = out.rows + ([] if out.steady is None else steady_rows(out.steady))
            steady += 0 if out.steady is None else len(out.steady["partition"])
            leaving = serve(table, out.rows, 0, 4, "run", out.steady)
        assert hooked(rows_batch(rows)).equals(public(object_frame(rows)))
        assert hooked(leaving).equals(public(as_pandas(leaving)))
        kinds |= {row["kind"] for row in rows} | set(leaving.column("kind").to_pylist())
        table = unpack(pack(table))  # as the state store keeps it: the steady partitions move into columns
    assert kinds == {KIND_PARTITION, KIND_BUCKET, KIND_EVENT, KIND_QUARANTINE} and steady > 0


@settings(max_examples=200, deadline=None)
@given(data=st.data(), names=st.lists(st.text(min_size=1, max_size=4), min_size=2, max_size=8, unique=True),
       rows=st.integers(1, 60), budget=st.integers(0, 70))
def test_a_bucket_ranks_its_columns_as_the_driver_ranks_a_frame(data: st.DataObject, names: list[str], rows: int,
                                                                  budget: int) -> None:
    served = ServedColumns.empty()
    served.names[:] = names
    c = served.columns
    picks = st.lists(st.integers(0, len(names) - 1), min_size=rows, max_size=rows)
    c["cluster_code"] = np.array(data.draw(picks), np.int64)
    c["topic_code"] = np.array(data.draw(picks), np.int64)
    c["partition"] = np.array(data.draw(st.permutations(range(rows))), np.int64)  # each partition once
    lags = st.lists(st.one_of(st.just(int(NULL)), st.integers(0, 3)), min_size=rows, max_size=rows)
    c["hw_lag"], c["max_follower_lag"] = np.array(data.draw(lags), np.int64), np.array(data.draw(lags), np.int64)
    c["health"] = np.array(data.draw(st.lists(st.integers(0, 2), min_size=rows, max_size=rows)), np.int64)
    expected = np.zeros(rows, bool)
    expected[rank_frame(served.frame()).index.to_numpy()[:budget]] = True
    assert ranked(served, budget).tolist() == expected.tolist()
