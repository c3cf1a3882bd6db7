"""The stateful heart of the job: samples of a state bucket in, events and per-partition metrics out.

Partitions are hashed into ``stream.state_buckets`` buckets; each bucket keeps ONE state value, its table
(:class:`~streaming.table.ColumnarTable`: the steady partitions as columns, every other partition's state pickled
on its own). Per-key state calls from Python cost ~1 ms each, so a key per partition would cap the job at a few
thousand samples per second; a bucket costs one read and one write per micro-batch whatever its size (with the
rest of a bucket call, ~20 ms of the worker's CPU and its round trips to the JVM: hence few buckets,
streaming.buckets).
The detection itself is :mod:`streaming.detect` (pure, tested without Spark); this module only moves rows in
and out of it.

A processing-time timer per bucket fires every ``stale_after`` / 2 to find partitions that went silent, and
those that left the collector's view (a deleted topic) to forget.
"""

from __future__ import annotations

import json
import types
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic_core import from_json
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from replmon.contracts.batches import COMPRESSED, read_stream, write_stream
from replmon.contracts.batches import entries as batch_entries
from replmon.contracts.events import Event
from replmon.core.gcpause import paused as gc_paused
from streaming.batches import BATCH, HEARD, QUARANTINED, as_entries, gather_entries
from streaming.detect import (
    STREAM_DEFAULTS,
    DetectConfig,
    PartitionMetrics,
    expire,
    forget,
    metrics_of,
    step_broker_change,
    step_partition_change,
    step_replica,
    step_state,
)
from streaming.pyspark_hooks import arrow_output, as_pandas
from streaming.serving import ServedColumns, partials_dict, ranked, recorded_columns
from streaming.state import (
    NO_SAMPLE,
    BrokerRegistry,
    BucketValue,
    PartitionKey,
    PartitionState,
    brokers_key,
)
from streaming.steady import (
    HISTORY_INTERVAL_MS,
    MATRICES,
    MEMBERSHIP,
    SteadyBatch,
    SteadyColumns,
    steady_form,
    steady_metrics,
    steady_step,
)
from streaming.table import ColumnarTable, PackedTable, newest_received, pack, unpack

Table = TypeVar("Table", ColumnarTable, PackedTable, dict[PartitionKey, BucketValue])
"""What the bucket steps take and give back: the state store's :class:`ColumnarTable` (or its packed part alone),
or a plain dict (the reference the tests compare it with)."""

KIND_EVENT = "event"
KIND_PARTITION = "partition"
KIND_QUARANTINE = "quarantine"
KIND_BUCKET = "bucket"
STATE_SCHEMA = StructType([StructField("partitions", BinaryType(), True)])

ROW_HEAD = StructType([
    StructField("kind", StringType(), False),
    StructField("cluster", StringType(), True),  # null in a KIND_QUARANTINE row
    StructField("topic", StringType(), True),
    StructField("partition", LongType(), True),
    StructField("sample_time_ms", LongType(), True),
    StructField("event_id", StringType(), True),
    StructField("event_type", StringType(), True),
    StructField("payload", StringType(), True),
])
"""The columns every output row has a place for: what it is, whose, when, and an event's or a quarantined
record's payload."""


def _spark_type(annotation: Any) -> DataType:
    """The Spark type of a :class:`~streaming.detect.PartitionMetrics` field: integers (and the Health rank) as
    longs, flags as booleans, broker lists as arrays, the follower lags as a map."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in args if a is not type(None)]
        return _spark_type(inner)
    if origin is tuple:
        return ArrayType(_spark_type(args[0]))
    if origin is dict:
        return MapType(_spark_type(args[0]), _spark_type(args[1]))
    if annotation is bool:
        return BooleanType()
    if annotation is str:
        return StringType()
    if isinstance(annotation, type) and issubclass(annotation, int):
        return LongType()
    raise TypeError(f"no Spark type for {annotation!r}")


ROW_TAIL = StructType([
    StructField("history", BooleanType(), True),  # a partition row that goes into the history (history_due)
    StructField("served", BooleanType(), True),  # a partition row the driver takes (streaming.serving)
    StructField("served_rows", BinaryType(), True),  # a bucket row's: its served partition rows (serve)
])
"""After the metrics: whether a partition row is a history snapshot, whether it goes to the driver, and, in a
:data:`KIND_BUCKET` row, the partition rows that go to the driver as one Arrow IPC stream (:func:`serve`)."""

OUTPUT_SCHEMA = StructType(list(ROW_HEAD.fields) + [
    StructField(name, _spark_type(annotation), True)
    for name, annotation in typing.get_type_hints(PartitionMetrics).items() if name not in ROW_HEAD.fieldNames()]
    + list(ROW_TAIL.fields))
"""The processor's output rows: :data:`ROW_HEAD`, the fields of :class:`~streaming.detect.PartitionMetrics`, then
:data:`ROW_TAIL`."""
OUTPUT_ARROW = to_arrow_schema(OUTPUT_SCHEMA)
"""The output rows as the Arrow batch the processor yields (:func:`streaming.pyspark_hooks.arrow_output`)."""
OUTPUT_STRUCT = pa.struct(list(OUTPUT_ARROW))
"""An output row as an Arrow struct (:func:`rows_batch`)."""
NOT_METRICS = ("kind", "event_id", "event_type", "payload", "history", "served", "served_rows")
"""The output columns that are not a partition's metrics (the exporter's table and the history leave them out)."""
OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]


def event_row(event: Event) -> dict[str, Any]:
    return {"kind": KIND_EVENT, "cluster": event.cluster, "topic": event.topic, "partition": event.partition,
            "sample_time_ms": event.event_time_ms, "event_id": event.event_id, "event_type": str(event.type),
            "payload": event.model_dump_json()}


def _history_signature(state: PartitionState) -> tuple[Any, ...]:
    """What a history snapshot is taken on a change of: leadership, membership, and the conditions the metrics'
    health derives from (offsets excepted: they move with every sample)."""
    m = state.meta
    return (m.leader, m.leader_epoch, m.isr, m.replicas, m.min_insync_replicas, m.offline, m.under_min_isr,
            state.stale, state.hw_stalled)


def history_due(before: PartitionState | None, after: PartitionState) -> bool:
    """Whether the partition's row after a sample is a history snapshot: its first sample, a change of what
    :func:`_history_signature` holds, or the first sample of a new minute (sample time, UTC). Decided from the
    state alone, so a replayed micro-batch chooses the same snapshots, wherever it runs."""
    if before is None or before.sample_time_ms < 0:
        return True
    if after.sample_time_ms // HISTORY_INTERVAL_MS != before.sample_time_ms // HISTORY_INTERVAL_MS:
        return True
    if after.meta is before.meta:  # the step left the membership as it was (a changed meta is a copy): the flags
        return after.stale != before.stale or after.hw_stalled != before.hw_stalled
    return _history_signature(after) != _history_signature(before)


def partition_row(m: PartitionMetrics, history: bool = True) -> dict[str, Any]:
    """A KIND_PARTITION output row: the metrics' fields, as Arrow takes them; ``history``: a history snapshot."""
    row: dict[str, Any] = m._asdict()
    row.update(kind=KIND_PARTITION, history=history, health=int(m.health), isr=list(m.isr),
               replicas=list(m.replicas),
               elr=list(m.elr), last_known_elr=list(m.last_known_elr), adding_replicas=list(m.adding_replicas),
               follower_lag={b: lag for b, lag in m.follower_lag.items() if lag is not None},
               follower_time_lag_ms={b: lag for b, lag in m.follower_time_lag_ms.items() if lag is not None})
    return row


PROCESSOR_INPUT = ("bucket", "kind", "sample", "sample_time_ms", "cycle", "batch")
"""The processor's input columns (of :func:`streaming.parse.processor_input`): a bucket's share of a batch
record travels as its IPC stream (``batch``, kind :data:`BATCH`); every other record as the JSON the collectors
write, which pydantic-core's JSON parser (``from_json``: 3.3 µs for a replication-factor-3 sample, ``json.loads``
7.0 µs) turns into the dicts :mod:`streaming.detect` takes, integers as integers. (A nested struct column arrives
through pandas with every nullable integer a float and every list a numpy array: the conversion back cost more
than the detection.)"""


class BucketOutput(NamedTuple):
    """What a bucket's micro-batch gives: the rows its steps gave (quarantined records, events, the metrics of
    partitions :mod:`streaming.detect` stepped) and the metrics of the partitions the steady step moved, as
    columns (:func:`streaming.steady.steady_metrics`; empty without a :class:`ColumnarTable`)."""

    rows: list[dict[str, Any]]
    steady: dict[str, Any] | None


def process_bucket(table: Table, samples: pd.DataFrame, cfg: DetectConfig, now_ms: int
                   ) -> tuple[Table, list[dict[str, Any]]]:
    """:func:`apply_bucket`, every output as a row (for tests and tools)."""
    table, out = apply_bucket(table, samples, cfg, now_ms)
    return table, out.rows + ([] if out.steady is None else steady_rows(out.steady))


SETTLING_PASSES = 8
"""How many times a micro-batch's remaining samples go through the steady step again after partitions reached a
steady form in the step of :mod:`streaming.detect` (:func:`apply_bucket`): a partition whose samples alternate
between steady and not would otherwise make a pass per sample; after these passes the step takes the rest."""
SETTLING_WORTH = 100
"""A pass of the steady step costs a few milliseconds per round (a round per sample of a partition: the longest
run of samples left to one partition), a step of detect.py ~60-80 µs per sample: the partitions that reached a
steady form go into the columns only when their remaining samples are at least this many per round (a fresh
bucket's micro-batch: thousands of partitions; a steady one's: the few whose ISR changed, stepped on)."""


def apply_bucket(table: Table, samples: pd.DataFrame, cfg: DetectConfig, now_ms: int, *, copy: bool = True
                 ) -> tuple[Table, BucketOutput]:
    """Apply one micro-batch of a bucket's samples (pure: tested without Spark). ``samples`` has the columns
    ``kind`` ('p' partition sample, 'r' replica sample, 'm' partition change and 'b' broker change of the metadata
    log, :data:`QUARANTINED`), ``sample`` (its JSON),
    ``sample_time_ms`` and ``cycle``. Returns the new table and the output: the quarantined records, every
    event, and the newest metrics of each partition that got a partition sample or a change from the metadata log,
    a history snapshot when any of its steps called for one (:func:`history_due`; a metadata-log change always).

    With a :class:`ColumnarTable`, the partition samples that change only offsets are applied to the steady columns
    at once (:mod:`streaming.steady`, a round per sample of a partition: :func:`_apply_steady`); every other record
    takes its step of :mod:`streaming.detect`, in time order. A partition the step leaves in a steady form with
    more partition samples to come in the micro-batch (a new partition's first sample, a lineage learnt, a
    change absorbed) moves into the columns there, and the rest of its samples go through the steady step again
    (up to :data:`SETTLING_PASSES` times, where :data:`SETTLING_WORTH` says a pass pays): a fresh job's first
    micro-batch, every partition new, takes the step of detect.py for each partition's first sample and its first
    lineage, not for every sample. Partitions are independent, so only each one's own samples need to stay in
    order. ``copy=False`` changes ``table`` itself (the processor's, loaded for this
    micro-batch alone), instead of a copy of it."""
    bad = samples["kind"] == QUARANTINED
    rows: list[dict[str, Any]] = [{"kind": KIND_QUARANTINE, "payload": text}
                                  for text in samples.loc[bad, "sample"].tolist()]
    batched = samples["kind"] == BATCH
    heard = samples["kind"] == HEARD
    ordered = samples[~bad & ~batched & ~heard].sort_values(["sample_time_ms", "cycle"], kind="stable")
    if copy:
        table = table.copy()
    if isinstance(table, ColumnarTable) and heard.any():
        table.hear(heard_clusters(samples.loc[heard, "sample"].tolist()), now_ms, cfg.stale_after_ms)
    kinds: list[str] = ordered["kind"].tolist()
    parsed: list[dict[str, Any]] = [from_json(text) for text in ordered["sample"].tolist()]
    entries = _entries(samples.loc[batched, "batch"].tolist()) if batched.any() else None
    steps = _Steps(table, cfg, now_ms, rows)
    columnar = isinstance(table, ColumnarTable)
    finished: list[SteadyBatch] = []
    for settling in range(SETTLING_PASSES + 1):
        taken = np.zeros(0, np.int64)
        if isinstance(table, ColumnarTable) and len(table.steady):
            part = _apply_steady(table, kinds, parsed, entries, cfg, now_ms)
            if part.records:
                kinds = [kind for i, kind in enumerate(kinds) if i not in part.records]
                parsed = [s for i, s in enumerate(parsed) if i not in part.records]
            if part.batch is not None:
                finished.append(part.batch)
            steps.snapshot |= part.history
            taken = part.entries
        rest = None if entries is None else np.setdiff1d(np.arange(entries.num_rows), taken, assume_unique=True)
        records = _in_time_order(kinds, parsed, entries, rest)
        deferred = steps.run(records, entries, settle=columnar and settling < SETTLING_PASSES)
        if not deferred:
            break
        assert isinstance(table, ColumnarTable)
        table.settle({key for _, _, _, key in deferred if key is not None})
        kinds = [kind for kind, s, _, _ in deferred if s is not None]
        parsed = [s for _, s, _, _ in deferred if s is not None]
        at = [i for _, s, i, _ in deferred if s is None]
        entries = entries.take(pa.array(at, pa.int64())) if entries is not None and at else None
    rows.extend(partition_row(metrics_of(state), key in steps.snapshot) for key, state in steps.newest.items())
    metrics = None
    if finished:
        assert isinstance(table, ColumnarTable)
        metrics = steady_metrics(table.steady, _finished(table.steady, finished, steps.snapshot))
    return table, BucketOutput(rows, metrics)


Record = tuple[str, dict[str, Any] | None, int, PartitionKey | None]
"""A record that takes the step of :mod:`streaming.detect`: its kind, its fields (``None``: a batch entry not yet
read into a dict), its place among the micro-batch's batch entries (-1: a JSON record), and its partition (``None``:
a cluster's broker change)."""


def _in_time_order(kinds: list[str], parsed: list[dict[str, Any]], entries: pa.Table | None,
                   rest: np.ndarray | None) -> list[Record]:
    """The JSON records and the batch entries at ``rest`` as one list in time order, the JSON records first among
    those of the same time and cycle (the order :func:`_apply_steady` compares them in), each group's records of
    one time and cycle in the order given.
    An entry's fields are read only when it takes a step (:meth:`_Steps.run`)."""
    records: list[Record] = [(kind, s, -1, None if kind == "b" else (s["cluster"], s["topic"], s["partition"]))
                             for kind, s in zip(kinds, parsed, strict=True)]
    if entries is None or rest is None or not len(rest):
        return records
    picked = entries.select(["cluster", "topic", "partition", "sample_time_ms", "cycle"]).take(pa.array(rest))
    keys = _keys(picked.column("cluster"), picked.column("topic"), picked.column("partition"))
    times = np.asarray(picked.column("sample_time_ms").to_numpy(), np.int64)
    cycles = np.asarray(picked.column("cycle").to_numpy(), np.int64)
    more: list[Record] = [("p", None, i, key) for i, key in zip(rest.tolist(), keys, strict=True)]
    if not records:
        return [more[j] for j in np.lexsort((cycles, times)).tolist()]
    places = [(*_order(s), 0, j) for j, (_, s, _, _) in enumerate(records) if s is not None]
    places += [(t, c, 1, j) for j, (t, c) in enumerate(zip(times.tolist(), cycles.tolist(), strict=True))]
    return [records[j] if entry == 0 else more[j] for *_, entry, j in sorted(places)]


def _keys(clusters: pa.ChunkedArray, topics: pa.ChunkedArray, partitions: pa.ChunkedArray) -> list[PartitionKey]:
    """Each entry's ``(cluster, topic, partition)``, each distinct name made a Python string once."""
    names = []
    for column in (clusters, topics):
        encoded = column.combine_chunks().dictionary_encode()
        values = encoded.dictionary.to_pylist()
        names.append([values[i] for i in encoded.indices.to_numpy().tolist()])
    return list(zip(names[0], names[1], partitions.to_numpy().tolist(), strict=True))


class _Steps:
    """The steps of :mod:`streaming.detect` of one micro-batch of a bucket: the rows they give (events), each
    partition's newest state (whose metrics leave), and the partitions whose steps called for a history
    snapshot."""

    def __init__(self, table: ColumnarTable | PackedTable | dict[PartitionKey, BucketValue], cfg: DetectConfig,
                 now_ms: int, rows: list[dict[str, Any]]) -> None:
        self.table, self.cfg, self.now_ms, self.rows = table, cfg, now_ms, rows
        self.newest: dict[PartitionKey, PartitionState] = {}
        self.snapshot: set[PartitionKey] = set()

    def run(self, records: list[Record], entries: pa.Table | None, settle: bool) -> list[Record]:
        """Step ``records`` (in time order). With ``settle``, a partition with only partition samples here takes
        the step of its first one, and if that leaves it in a steady form (:func:`streaming.steady.steady_form`)
        with more to come, its remaining records are returned (in order) for the steady step and the table takes it
        into the columns (its metrics leave with them); every other record takes its step. Partitions are
        independent: each one's records keep their order, not their order among other partitions' (the returned
        records are in order partition by partition)."""
        if not settle:
            self._step(self._read(records, entries))
            return []
        others = {key for kind, _, _, key in records if kind not in ("p", "b")}
        first: list[Record] = []
        later: dict[PartitionKey, list[Record]] = {}
        for record in records:
            key = record[3]
            if key is None or key in others:
                first.append(record)
            elif key in later:
                later[key].append(record)
            else:
                later[key] = []
                first.append(record)
        self._step(self._read(first, entries))
        settled: list[PartitionKey] = []
        stepped: list[Record] = []
        for key, rest in later.items():
            if not rest:
                continue
            state = self.table.get(key)
            if isinstance(state, PartitionState) and steady_form(state):
                settled.append(key)
            else:
                stepped.extend(rest)
        deferred = [record for key in settled for record in later[key]]
        if len(deferred) < SETTLING_WORTH * max((len(later[key]) for key in settled), default=0):
            stepped, deferred = stepped + deferred, []  # too few to be worth a pass: stepped here
        else:
            for key in settled:
                del self.newest[key]  # its metrics leave with its last steady sample
        self._step(self._read(stepped, entries))
        return deferred

    @staticmethod
    def _read(records: list[Record], entries: pa.Table | None) -> list[Record]:
        """``records`` with every batch entry's fields read (one read for all)."""
        unread = [j for j, (_, s, _, _) in enumerate(records) if s is None]
        if not unread or entries is None:
            return records
        fields = batch_entries(entries, np.array([records[j][2] for j in unread], np.int64))
        out = list(records)
        for j, s in zip(unread, fields, strict=True):
            kind, _, at, key = out[j]
            out[j] = (kind, s, at, key)
        return out

    def _step(self, records: list[Record]) -> None:
        table, cfg, now_ms = self.table, self.cfg, self.now_ms
        for kind, s, _, key in records:
            assert s is not None
            state: BucketValue
            if key is None:  # kind "b"
                brokers = brokers_key(s["cluster"])
                registry = table.get(brokers)
                state, events = step_broker_change(registry if isinstance(registry, BrokerRegistry) else None, s,
                                                   now_ms)
                if state is registry:
                    continue
                table[brokers] = state
                self.rows.extend(event_row(e) for e in events)
                continue
            prev = table.get(key)
            before = prev if isinstance(prev, PartitionState) else None
            if kind == "p":
                state, events = step_state(before, s, cfg, now_ms)
                self.newest[key] = state
                if history_due(before, state):
                    self.snapshot.add(key)
            elif kind == "m":
                changed, events = step_partition_change(before, s, cfg, now_ms)
                if changed is None or changed is before:
                    continue
                state = changed
                self.newest[key] = changed  # the ISR or leader may have changed: the metrics show it
                self.snapshot.add(key)
            else:  # a replica sample changes nothing the metrics show
                state, events = step_replica(before, s, cfg, now_ms)
            table[key] = state
            self.rows.extend(event_row(e) for e in events)


def _finished(columns: SteadyColumns, batches: list[SteadyBatch], snapshot: set[PartitionKey]) -> SteadyBatch:
    """The partitions the steady step took to the end of the micro-batch, each at its last steady sample, over
    the passes of :func:`apply_bucket`; a history snapshot where the step of detect.py called for one before."""
    if len(batches) == 1:
        batch = batches[0]
    else:
        lists = [b.lists for b in batches]
        batch = SteadyBatch.of(np.concatenate([b.rows for b in batches]),
                               {name: pa.concat_arrays([each[name] for each in lists]) for name in MEMBERSHIP},
                               np.concatenate([b.history for b in batches]))
    marked = [row for row in (columns.row_of(key) for key in snapshot) if row is not None]
    if marked:
        batch = SteadyBatch(batch.rows, batch.source, batch.at, batch.history | np.isin(batch.rows, marked))
    return batch


@dataclass
class SteadyPart:
    """What the steady step took of a micro-batch: the partitions it took whole (at their last steady sample),
    which records it took (JSON records by their place in time order, batch entries by theirs), and the partitions
    it took in part whose steps called for a history snapshot (their last records take the step of
    :mod:`streaming.detect`)."""

    batch: SteadyBatch | None = None
    records: set[int] = field(default_factory=set)
    entries: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    history: set[PartitionKey] = field(default_factory=set)


def _apply_steady(table: ColumnarTable, kinds: list[str], parsed: list[dict[str, Any]], entries: pa.Table | None,
                  cfg: DetectConfig, now_ms: int) -> SteadyPart:
    """The steady step (:mod:`streaming.steady`) over the micro-batch's partition samples, JSON records and batch
    entries compared alike (as entries), a round per sample of a partition in time order: each round takes the
    next sample of every partition all of whose samples so far were steady. A partition with any other record in
    the micro-batch (a replica sample, a metadata-log change) takes every step of :mod:`streaming.detect`, and so
    does the rest of a partition from its first sample that is not steady."""
    json_at = [i for i, kind in enumerate(kinds) if kind == "p"]
    candidates = as_entries([parsed[i] for i in json_at])
    if entries is not None:
        candidates = pa.concat_tables([candidates, entries])
    n = candidates.num_rows
    steady = table.steady
    rows = steady.find(candidates.column("cluster"), candidates.column("topic"),
                       pc.fill_null(candidates.column("partition"), -1).to_numpy())
    others = [steady.row_of((s["cluster"], s["topic"], s["partition"])) for kind, s in zip(kinds, parsed, strict=True)
              if kind not in ("p", "b")]
    if others:  # a partition with any other record takes every step of detect.py
        rows[np.isin(rows, [row for row in others if row is not None])] = -1
    # a partition is its row; a sample without one (never steady) is alone in its group
    code = np.where(rows >= 0, rows, len(steady.alive) + np.arange(n))
    groups = len(steady.alive) + n
    # each sample's place among its partition's: time order, JSON records before entries at equal times (the
    # order of the steps of detect.py in apply_bucket)
    times = candidates.column("sample_time_ms").to_numpy(zero_copy_only=False)
    cycles = candidates.column("cycle").to_numpy(zero_copy_only=False)
    order = np.lexsort((np.arange(n), cycles, times, code))
    first = np.ones(n, bool)
    first[1:] = code[order][1:] != code[order][:-1]
    starts = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - starts
    out = SteadyPart()
    dropped = np.zeros(groups, bool)
    taken = np.zeros(n, bool)
    history = np.zeros(groups, bool)
    last_round = np.full(groups, -1, np.int64)  # each partition's last round taken, and its place there
    last_at = np.zeros(groups, np.int64)
    rounds: list[SteadyBatch] = []
    # every sample gathered at once (what the gathering compares, the steady step never changes), then the
    # samples by round, each round's in their order; a round takes its gathered samples by their places
    gathered = gather_entries(steady, candidates, rows)
    place = np.full(n, -1, np.int64)  # each sample's place among the gathered, -1: not steady
    place[gathered.at] = np.arange(len(gathered.at))
    by_round = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[by_round], np.arange(int(rank.max(initial=-1)) + 2))
    for r in range(len(bounds) - 1):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        keep = (rows[by_round[lo:hi]] >= 0) & ~dropped[code[by_round[lo:hi]]]
        sel = by_round[lo:hi][keep]
        if not len(sel):
            break
        picks = place[sel]
        batch = steady_step(steady, gathered.take(picks[picks >= 0]), cfg, now_ms)
        applied = np.isin(rows[sel], batch.rows)
        taken[sel[applied]] = True
        dropped[code[sel[~applied]]] = True
        history[batch.rows] |= batch.history
        last_round[batch.rows] = len(rounds)
        last_at[batch.rows] = np.arange(len(batch.rows))
        rounds.append(batch)
    seen = last_round >= 0
    out.history = set(steady.keys(np.flatnonzero(seen & dropped & history)))
    taken_at = np.flatnonzero(taken)
    out.records = {json_at[i] for i in taken_at[taken_at < len(json_at)].tolist()}
    out.entries = taken_at[taken_at >= len(json_at)] - len(json_at)
    whole = np.flatnonzero(seen & ~dropped)  # rows: a partition's group is its row
    if not len(whole):
        return out
    if len(rounds) == 1:  # the usual micro-batch: a sample per partition, the round's batch is the answer
        out.batch = rounds[0]
    else:
        starts = np.cumsum([0] + [len(batch.rows) for batch in rounds])
        picks = starts[last_round[whole]] + last_at[whole]  # its place in the rounds, one after another
        # every round's samples were gathered at once: their lists are at their places in the same arrays
        out.batch = SteadyBatch(whole, gathered.lists, np.concatenate([batch.at for batch in rounds])[picks],
                                history[whole])
    return out


def _order(s: dict[str, Any]) -> tuple[int, int]:
    """Where a record goes in time order, as :func:`streaming.parse.read_records` sets its columns."""
    if "append_time_ms" in s:
        return s["append_time_ms"], s["metadata_offset"]
    return s["sample_time_ms"], s["cycle"]


def _entries(values: list[bytes]) -> pa.Table:
    """The batches' entries, as one table (each value is one bucket's share of a batch: streaming.batches)."""
    tables = [read_stream(value, trusted=True) for value in values]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def heard_clusters(texts: list[str]) -> set[str]:
    """The clusters :data:`~streaming.batches.HEARD` rows name (their ``sample``: a JSON list each)."""
    return {cluster for text in texts for cluster in json.loads(text)}


def expire_bucket(table: Table, cfg: DetectConfig, now_ms: int
                  ) -> tuple[Table, list[dict[str, Any]], list[PartitionKey]]:
    """The timer: PARTITION_FORGOTTEN for every partition :func:`streaming.detect.forget` drops (the table holds
    them no more), then STALE for every other partition silent for longer than ``cfg.stale_after_ms``. Returns the
    new table, the output rows and the forgotten partitions the driver held as candidates (:func:`serve` tells it
    to drop them)."""
    rows: list[dict[str, Any]] = []
    expired = table.copy()  # holds only what changed as new states (a PackedTable re-pickles only those)
    forgotten, gone = _forget(expired, cfg, now_ms, rows)
    keys = table.expiring(now_ms, cfg.stale_after_ms) if isinstance(table, ColumnarTable) else list(table)
    for key in keys:
        if key in forgotten:
            continue
        state = table.get(key) if not isinstance(table, ColumnarTable) else expired.get(key)
        if not isinstance(state, PartitionState):
            continue  # a cluster's brokers: no samples to miss
        new, events = expire(state, now_ms, cfg)
        if events:
            expired[key] = new
            rows.extend(event_row(e) for e in events)
            rows.append(partition_row(metrics_of(new)))
    return expired, rows, gone


def _forget(table: Table, cfg: DetectConfig, now_ms: int, rows: list[dict[str, Any]]
            ) -> tuple[set[PartitionKey], list[PartitionKey]]:
    """The partitions :func:`streaming.detect.forget` drops, dropped from ``table`` with their events in ``rows``;
    returns them, and those the driver held as candidates. A cluster's newest sample is the newest this bucket
    holds or heard of (:meth:`ColumnarTable.newest_received`)."""
    if cfg.forget_after_ms <= 0:
        return set(), []
    if isinstance(table, ColumnarTable):
        newest = table.newest_received()
        columns: SteadyColumns = table.steady
        keys = [*table.side, *columns.keys(columns.silent_rows(now_ms, cfg.forget_after_ms))]
    else:
        newest = newest_received(table.values())
        keys = list(table)
    forgotten: set[PartitionKey] = set()
    for key in keys:
        state = table.peek(key) if isinstance(table, ColumnarTable) else table.get(key)
        if isinstance(state, PartitionState) and (events := forget(state, now_ms, newest.get(key[0], NO_SAMPLE), cfg)):
            forgotten.add(key)
            rows.extend(event_row(e) for e in events)
    if not forgotten:
        return forgotten, []
    if isinstance(table, ColumnarTable):
        return forgotten, table.forget(forgotten)
    for key in forgotten:
        del table[key]
    return forgotten, []


def steady_rows(steady: dict[str, Any]) -> list[dict[str, Any]]:
    """The steady step's metrics as :func:`partition_row` gives them, a dict per partition (lists, not arrays;
    maps as dicts)."""
    names = [name for name in steady if name != MATRICES]
    values = [_python(steady[name]) for name in names]
    rows = []
    for row in zip(*values, strict=True):
        out = dict(zip(names, row, strict=True))
        out["kind"] = KIND_PARTITION
        rows.append(out)
    return rows


def _python(values: Any) -> list[Any]:
    """A column of the steady step's metrics as Python values."""
    if isinstance(values, pa.Array):
        return list(values.to_pylist(maps_as_pydicts="strict"))
    if isinstance(values, np.ndarray):
        return list(values.tolist())
    return [x.tolist() if isinstance(x, np.ndarray) else x for x in values]


def steady_frame(steady: dict[str, Any]) -> pd.DataFrame:
    """The steady step's metrics as output rows (:data:`OUTPUT_COLUMNS`), column by column, as pandas."""
    return as_pandas(_steady_batch(steady, None, {}))


def rows_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Output rows (dicts: the steps of detect.py, events, quarantined records, a bucket's message) as one Arrow
    batch in :data:`OUTPUT_ARROW`, a key absent a null: Arrow's own conversion of the rows as structs, one call
    (column by column, each a call of its own, cost four times as much on a bucket call's few dozen rows)."""
    return pa.RecordBatch.from_struct_array(pa.array(rows, OUTPUT_STRUCT))


def _steady_batch(steady: dict[str, Any], at: np.ndarray | None, extra: dict[str, Any]) -> pa.RecordBatch:
    """The steady step's metrics (all, or those ``at``) as output rows in :data:`OUTPUT_ARROW`; ``extra``: a value
    for every row. Numeric columns are taken whole, Arrow arrays as they are."""
    n = len(steady["partition"]) if at is None else len(at)
    picks = None if at is None else pa.array(at)  # once, for every Arrow column
    constant = {"kind": KIND_PARTITION, **extra}
    arrays: list[pa.Array] = []
    for f in OUTPUT_ARROW:
        values = steady.get(f.name)
        if f.name in constant:
            array = pa.repeat(pa.scalar(constant[f.name], f.type), n)
        elif values is None:
            array = pa.nulls(n, f.type)
        elif isinstance(values, pa.Array):
            array = values if picks is None else values.take(picks)
        else:
            array = pa.array(values if at is None else np.asarray(values)[at], f.type)
        arrays.append(array if array.type == f.type else array.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_ARROW)


def output_of(rows: list[dict[str, Any]], steady: dict[str, Any] | None = None) -> pa.RecordBatch:
    """Every output of a bucket's steps as rows (:class:`BucketOutput`'s rows, then the steady step's metrics),
    none chosen (for tests and tools: what a bucket call would give without :func:`serve`)."""
    return _concat([rows_batch(rows)] + ([] if steady is None else [_steady_batch(steady, None, {})]))


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of the rows of ``batches`` (all in :data:`OUTPUT_ARROW`), in order."""
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_arrays([pa.concat_arrays([b.column(i) for b in batches])
                                       for i in range(len(OUTPUT_ARROW))], schema=OUTPUT_ARROW)


def serve(table: ColumnarTable, rows: list[dict[str, Any]], bucket: int, budget: int, run: str,
          steady: dict[str, Any] | None = None, gone: list[PartitionKey] | None = None) -> pa.RecordBatch:
    """What of a bucket call's output leaves the processor (:mod:`streaming.serving`), in :data:`OUTPUT_ARROW`:
    the quarantined records and events; the partition rows that are history snapshots (``served`` false: the
    executors write them); and one :data:`KIND_BUCKET` row (:func:`_message`) that carries, in ``served_rows``,
    the partition rows the driver takes as one Arrow IPC stream (``served`` true): the bucket's candidates among
    the partitions its steps reached, and the partitions that became candidates without a sample (all of them for
    a run the bucket has not told yet). Each partition row carries the message's sequence in ``payload``: the
    driver takes the newest word of a bucket on each partition. ``rows``: the rows of :mod:`streaming.detect`'s
    steps; ``steady``: the steady step's metrics (its rows are built for those that leave only); ``gone``: candidates
    the table no longer holds (:func:`expire_bucket`), which the driver drops. Records every partition's metrics in
    ``table.served``.

    The served rows travel as one stream, not a row each, because Spark turns every output row into its own rows:
    from the processor's Arrow into the micro-batch's cache, out of it, to Arrow again for the driver's collect:
    ~100,000 wide rows (maps and lists) made, cached and collected in 1.45 s on 2 cores, the same rows as 32
    streams in 0.52 s (docs/benchmarks.md, "Streaming job"). A row both served and a history snapshot is in both."""
    served = table.served
    told = served.run == run
    partitions = [row for row in rows if row["kind"] == KIND_PARTITION]
    stepped = served.record(recorded_columns(partitions))
    steady_at = served.record_steady(steady) if steady is not None else np.zeros(0, np.int64)
    if not told:  # a run not told yet (new bucket or run, format-2 state): partitions still without a row join now
        keys = list(table)
        served.record(recorded_columns([partition_row(metrics_of(state)) for key, held in zip(
            keys, served.holds(keys).tolist(), strict=True)
            if not held and isinstance(state := table.peek(key), PartitionState)]))
    before = served.columns["served"].copy()
    top = ranked(served, budget)
    sampled = np.zeros(len(served), np.bool_)
    sampled[stepped] = True
    sampled[steady_at] = True
    entering = served.keys(np.flatnonzero(top & ~sampled & (~before | (not told))))
    left = [*served.keys(np.flatnonzero(before & ~top)), *(gone or ())] if told else []
    served.columns["served"], served.run = top, run
    served.sent += 1
    seq = str(served.sent)
    to_driver: list[dict[str, Any]] = []
    stay = [row for row in rows if row["kind"] != KIND_PARTITION]
    history = 0
    for row, flag in zip(partitions, top[stepped].tolist(), strict=True):
        if flag:
            to_driver.append(row | {"served": True, "payload": seq})
        if row.get("history"):
            stay.append(row | {"served": False, "payload": seq})
            history += 1
    to_driver.extend(partition_row(metrics_of(state), history=False) | {"served": True, "payload": seq}
                     for key in entering if isinstance(state := table.peek(key), PartitionState))
    driver_batches = [rows_batch(to_driver)]
    stay_batches: list[pa.RecordBatch] = []
    if steady is not None:
        steady_top = top[steady_at]
        driver_batches.append(_steady_batch(steady, None if steady_top.all() else np.flatnonzero(steady_top),
                                            {"payload": seq, "served": True}))
        snapshots = np.flatnonzero(np.asarray(steady["history"], np.bool_))
        history += len(snapshots)
        if len(snapshots):
            stay_batches.append(_steady_batch(steady, snapshots, {"payload": seq, "served": False}))
    stream = (write_stream(pa.Table.from_batches(driver_batches), COMPRESSED)
              if any(b.num_rows for b in driver_batches) else None)
    message = _message(served, stay, bucket, left, history) | {"served_rows": stream}
    stay_batches.insert(0, rows_batch([*stay, message]))
    return _concat(stay_batches)


def served_rows(buckets: pd.DataFrame) -> pd.DataFrame:
    """The partition rows the bucket rows of a micro-batch's output carry (:func:`serve`), one frame, as the
    driver's collect makes rows pandas (maps as dicts, lists as arrays); none: an empty frame of the output
    columns."""
    streams = [value for value in buckets["served_rows"].tolist() if value is not None]
    if not streams:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in OUTPUT_COLUMNS})
    tables = [read_stream(value, trusted=True) for value in streams]
    return pa.concat_tables(tables).to_pandas(maps_as_pydicts="strict")


def _message(served: ServedColumns, rows: list[dict[str, Any]], bucket: int, left: list[PartitionKey],
             history: int) -> dict[str, Any]:
    """A bucket's :data:`KIND_BUCKET` row: its aggregates, the partitions no longer candidates, how many history
    rows and events the call gave (of ``rows``; and of them partition STALE events per cluster, for the driver to
    tell a silent cluster, :mod:`streaming.silence`), and the message's sequence."""
    events = [row for row in rows if row["kind"] == KIND_EVENT]
    stale = Counter(row["cluster"] for row in events if row["event_type"] == "STALE" and row["topic"] is not None)
    message = {"seq": served.sent, "left": left, "history": history, "events": len(events), "stale": stale,
               **partials_dict(served)}
    return {"kind": KIND_BUCKET, "partition": bucket, "payload": json.dumps(message)}


Step = Callable[[str, int], None]


class BucketTable:
    """A bucket's partition table in the state store: one value, the :class:`PackedTable`'s map of pickled states,
    pickled and compressed (:func:`pack`).

    A list state of one row, not a value state: a list state's put travels to the JVM as Arrow, read in full,
    while a value state's update travels in one protobuf message that Spark 4.0.0 reads with InputStream.read,
    which returns early on a large one (SPARK-53870, fixed in 4.0.2): a bucket of a thousand partitions (300k
    partitions in 256 buckets) failed the query with "invalid pickle opcode: 0"."""

    def __init__(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getListState("partitions", STATE_SCHEMA)

    def load(self) -> ColumnarTable | None:
        """The bucket's table; None when the bucket has never been saved (its first micro-batch).

        One round trip to the JVM: the list's first (only) row. ``exists()`` first, or reading the list to its
        end, would take one more each (PySpark asks for the next row of a list until the JVM says there is none),
        ~1 ms apiece per bucket and micro-batch on a busy machine."""
        row = next(iter(self.state.get()), None)
        return None if row is None else unpack(row[0])

    def save(self, table: ColumnarTable | PackedTable | dict[PartitionKey, BucketValue]) -> None:
        self.state.put([(pack(table),)])


class ReplicationProcessor(StatefulProcessor):
    """transformWithStateInPandas processor over state buckets.

    The staleness timer of a bucket is a chain: its first micro-batch registers one, and each timer, when it
    fires, registers the next, so a bucket always has exactly one pending (timers are state, committed with the
    micro-batch that changed them). Listing a bucket's timers in every micro-batch to make sure cost a round
    trip to the JVM of 2-4 ms per bucket; registering the same one again logs a warning in Spark."""

    def __init__(self, cfg: DetectConfig, series_budget: int = STREAM_DEFAULTS.series_budget,
                 run: str | None = None) -> None:
        self.cfg = cfg
        self.series_budget = series_budget
        self.run = run if run is not None else uuid.uuid4().hex
        """This processor's run: made on the driver, the same on every executor; a driver that starts again makes a
        new one, and each bucket then tells it its candidates whole (:func:`serve`)."""
        self.timer_period_ms = max(1000, cfg.stale_after_ms // 2)
        self.heard_every_ms = cfg.stale_after_ms // 4
        """A bucket told only which clusters are sampled saves that no more often: its state is written once
        in this many milliseconds, not in every micro-batch, and a cluster is known sampled within
        :attr:`DetectConfig.stale_after_ms <streaming.detect.DetectConfig>` all the same."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.table = BucketTable(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        yield arrow_output(self.process_rows(rows, timerValues.getCurrentProcessingTimeInMs(), int(key[0])))

    def process_rows(self, rows: Iterator[pd.DataFrame], now_ms: int, bucket: int = 0,
                     step: Step = lambda _name, _count: None) -> pa.RecordBatch:
        """One bucket's samples of a micro-batch through its table; ``step(name, count)`` is called after each
        step (input: samples, load: partitions, process: outputs, save: partitions, frame: rows), for the
        benchmark's timings."""
        with gc_paused():  # a bucket's table is thousands of dicts, unpickled and pickled: see replmon.core.gcpause
            chunks = list(rows)
            samples = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
            step("input", len(samples))
            stored = self.table.load()
            table = stored if stored is not None else ColumnarTable()
            step("load", len(table))
            if stored is not None and stored.served.run == self.run and (samples["kind"] == HEARD).all() \
                    and stored.heard_within(heard_clusters(samples["sample"].tolist()), now_ms, self.heard_every_ms):
                return rows_batch([])  # heard of lately, nothing else: nothing changes, nothing is saved
            table, out = apply_bucket(table, samples, self.cfg, now_ms, copy=False)
            step("process", len(out.rows) + (0 if out.steady is None else len(out.steady["partition"])))
            output = serve(table, out.rows, bucket, self.series_budget, self.run, out.steady)
            step("frame", output.num_rows)
            self.table.save(table)
            if stored is None:  # a new bucket starts its chain of timers: each one registers the next
                self.handle.registerTimer(now_ms + self.timer_period_ms)
            step("save", len(table))
        return output

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues) -> None:
        """A bucket's table from the query this one replaced (streaming.reshard), stored as it was packed; its
        chain of timers starts again here."""
        for packed in initialState["partitions"]:
            unpack(packed)  # a format this replmon cannot read fails here, not in a later micro-batch
            self.table.state.put([(packed,)])
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + self.timer_period_ms)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        with gc_paused():
            stored = self.table.load()
            table, out, gone = expire_bucket(stored if stored is not None else ColumnarTable(), self.cfg, now_ms)
            if out or (stored is not None and stored.served.run != self.run):
                output = serve(table, out, int(key[0]), self.series_budget, self.run, gone=gone)
                self.table.save(table)
            else:
                output = rows_batch(out)
            self.handle.registerTimer(now_ms + self.timer_period_ms)  # the chain goes on, samples or not
        yield arrow_output(output)

    def close(self) -> None:
        pass
