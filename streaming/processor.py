"""The stateful heart of the job: samples of a state bucket in, events and per-partition metrics out.

Partitions are hashed into ``stream.state_buckets`` buckets; each bucket keeps ONE state value, the pickled and
compressed map ``(cluster, topic, partition) -> its PartitionState as bytes`` (:func:`streaming.state.dump_state`)
of its partitions (:class:`PackedTable`: a batch unpickles and pickles again only the partitions it reaches). Per-key
state calls from Python cost ~1 ms each, so a key per partition would cap the job at a few thousand samples per
second; a bucket costs one read and one write per micro-batch whatever its size (with the rest of a bucket call,
~9 ms: hence few buckets).
The detection itself is :mod:`streaming.detect` (pure, tested without Spark); this module only moves rows in
and out of it.

A processing-time timer per bucket fires every ``stale_after`` / 2 to find partitions that went silent.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa
from pydantic_core import from_json
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
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from replmon.contracts.events import Event
from replmon.core.gcpause import paused as gc_paused
from streaming.detect import DetectConfig, PartitionMetrics, expire, metrics_of, step_dict, step_replica
from streaming.state import PartitionKey, PartitionState, dump_state, load_state


class PackedTable(MutableMapping[PartitionKey, PartitionState]):
    """A bucket's partitions as the state store keeps them: each partition's state pickled on its own, unpickled
    when a sample reaches it, and pickled again only then. A micro-batch reaches a fraction of a bucket's
    partitions (a 20,000-sample batch over 100,000 partitions, a fifth); unpickling and pickling every state
    of every bucket it reached cost more than the detection (docs/benchmarks.md, "Streaming job").

    ``copy()`` is shallow and cheap: the packed bytes are shared, never changed."""

    __slots__ = ("_live", "_packed")

    def __init__(self, packed: dict[PartitionKey, bytes] | None = None,
                 live: dict[PartitionKey, PartitionState] | None = None) -> None:
        self._packed = packed if packed is not None else {}
        self._live = live if live is not None else {}

    def get(self, key: PartitionKey, default: Any = None) -> Any:
        state = self._live.get(key)
        if state is None:
            packed = self._packed.get(key)
            if packed is None:
                return default
            state = self._live[key] = load_state(key, packed)
        return state

    def __getitem__(self, key: PartitionKey) -> PartitionState:
        state: PartitionState | None = self.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def __setitem__(self, key: PartitionKey, state: PartitionState) -> None:
        self._live[key] = state

    def __delitem__(self, key: PartitionKey) -> None:
        found = self._live.pop(key, None) is not None
        if self._packed.pop(key, None) is None and not found:
            raise KeyError(key)

    def __iter__(self) -> Iterator[PartitionKey]:
        yield from self._packed
        yield from (key for key in self._live if key not in self._packed)

    def __len__(self) -> int:  # per bucket call: no set of its thousands of keys; the live ones are few
        return len(self._packed) + sum(key not in self._packed for key in self._live)

    def copy(self) -> PackedTable:
        return PackedTable(dict(self._packed), dict(self._live))

    def unpickled(self) -> int:
        """How many partitions were unpickled or set since the table was loaded (these are pickled again)."""
        return len(self._live)

    def packed(self) -> dict[PartitionKey, bytes]:
        """Every partition's pickled state: those never unpickled as they were loaded."""
        out = dict(self._packed)
        for key, state in self._live.items():
            out[key] = dump_state(state)
        return out


Table = TypeVar("Table", PackedTable, dict[PartitionKey, PartitionState])
"""What the bucket steps take and give back: the state store's :class:`PackedTable`, or a plain dict (tests)."""

KIND_EVENT = "event"
KIND_PARTITION = "partition"
KIND_QUARANTINE = "quarantine"
QUARANTINED = "q"
"""Input ``kind`` of a record that failed parsing or validation (the job reads and parses each record once, for
the state and the quarantine): its ``sample`` is what the quarantine keeps of it, passed through untouched as
the ``payload`` of a KIND_QUARANTINE output row."""

STATE_SCHEMA = StructType([StructField("partitions", BinaryType(), True)])

OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType(), False),
    StructField("cluster", StringType(), True),  # null in a KIND_QUARANTINE row
    StructField("topic", StringType(), True),
    StructField("partition", LongType(), True),
    StructField("sample_time_ms", LongType(), True),
    StructField("event_id", StringType(), True),
    StructField("event_type", StringType(), True),
    StructField("payload", StringType(), True),
    StructField("leader", LongType(), True),
    StructField("leader_epoch", LongType(), True),
    StructField("replica_count", LongType(), True),
    StructField("isr_size", LongType(), True),
    StructField("min_insync_replicas", LongType(), True),
    StructField("offline", BooleanType(), True),
    StructField("under_replicated", BooleanType(), True),
    StructField("under_min_isr", BooleanType(), True),
    StructField("at_min_isr", BooleanType(), True),
    StructField("high_watermark", LongType(), True),
    StructField("log_end_offset", LongType(), True),
    StructField("log_start_offset", LongType(), True),
    StructField("hw_lag", LongType(), True),
    StructField("max_follower_lag", LongType(), True),
    StructField("health", LongType(), True),
    StructField("follower_lag", MapType(LongType(), LongType()), True),
    StructField("isr", ArrayType(LongType()), True),
    StructField("replicas", ArrayType(LongType()), True),
    StructField("hw_stalled", BooleanType(), True),
    StructField("stale", BooleanType(), True),
])
OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]


def event_row(event: Event) -> dict[str, Any]:
    return {"kind": KIND_EVENT, "cluster": event.cluster, "topic": event.topic, "partition": event.partition,
            "sample_time_ms": event.event_time_ms, "event_id": event.event_id, "event_type": str(event.type),
            "payload": event.model_dump_json()}


def partition_row(m: PartitionMetrics, st: PartitionState) -> dict[str, Any]:
    return {
        "kind": KIND_PARTITION, "cluster": m.cluster, "topic": m.topic, "partition": m.partition,
        "sample_time_ms": m.sample_time_ms, "leader": m.leader, "leader_epoch": m.leader_epoch,
        "replica_count": m.replica_count, "isr_size": m.isr_size, "min_insync_replicas": m.min_insync_replicas,
        "offline": m.offline, "under_replicated": m.under_replicated, "under_min_isr": m.under_min_isr,
        "at_min_isr": m.at_min_isr, "high_watermark": m.high_watermark, "log_end_offset": m.log_end_offset,
        "log_start_offset": m.log_start_offset, "hw_lag": m.hw_lag, "max_follower_lag": m.max_follower_lag,
        "health": int(m.health), "follower_lag": {b: lag for b, lag in m.follower_lag.items() if lag is not None},
        "isr": list(st.meta.isr), "replicas": list(st.meta.replicas), "hw_stalled": st.hw_stalled,
        "stale": st.stale,
    }


PROCESSOR_INPUT = ("bucket", "kind", "sample", "sample_time_ms", "cycle")
"""The processor's input columns (of :func:`streaming.job.parse_samples`): the samples travel as the JSON the
collectors write, which pydantic-core's JSON parser (``from_json``: 3.3 µs for a replication-factor-3 sample,
``json.loads`` 7.0 µs) turns into the dicts :mod:`streaming.detect` takes, integers as integers.
(A nested struct column arrives through pandas with every nullable integer a float and every list a numpy array:
the conversion back cost more than the detection.)"""


def process_bucket(table: Table, samples: pd.DataFrame, cfg: DetectConfig, now_ms: int
                   ) -> tuple[Table, list[dict[str, Any]]]:
    """Apply one micro-batch of a bucket's samples (pure: tested without Spark). ``samples`` has the columns
    ``kind`` ('p' partition sample, 'r' replica sample, :data:`QUARANTINED`), ``sample`` (its JSON),
    ``sample_time_ms`` and ``cycle``. Returns the new table and the output rows: the quarantined records, every
    event, and the newest metrics of each partition that got a partition sample."""
    bad = samples["kind"] == QUARANTINED
    rows: list[dict[str, Any]] = [{"kind": KIND_QUARANTINE, "payload": text}
                                  for text in samples.loc[bad, "sample"].tolist()]
    ordered = samples[~bad].sort_values(["sample_time_ms", "cycle"], kind="stable")
    newest: dict[PartitionKey, PartitionMetrics] = {}
    table = table.copy()
    loads = from_json
    for kind, text in zip(ordered["kind"].tolist(), ordered["sample"].tolist(), strict=True):
        s = loads(text)
        key = (s["cluster"], s["topic"], s["partition"])
        if kind == "p":
            state, events, newest[key] = step_dict(table.get(key), s, cfg, now_ms)
        else:  # a replica sample changes nothing the metrics show
            state, events = step_replica(table.get(key), s, cfg, now_ms)
        table[key] = state
        rows.extend(event_row(e) for e in events)
    rows.extend(partition_row(metrics, table[key]) for key, metrics in newest.items())
    return table, rows


def expire_bucket(table: Table, cfg: DetectConfig, now_ms: int) -> tuple[Table, list[dict[str, Any]]]:
    """The timer: STALE for every partition silent for longer than ``cfg.stale_after_ms``."""
    rows: list[dict[str, Any]] = []
    expired = table.copy()  # holds only what changed as new states (a PackedTable re-pickles only those)
    for key, state in table.items():
        new, events = expire(state, now_ms, cfg)
        if events:
            expired[key] = new
            rows.extend(event_row(e) for e in events)
            rows.append(partition_row(metrics_of(new), new))
    return expired, rows


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Output rows as a frame; absent values are None (a NaN in a map or array column breaks Arrow). From tuples:
    a third faster than from the dicts themselves, which pandas reads key by key."""
    frame = pd.DataFrame.from_records([tuple(map(row.get, OUTPUT_COLUMNS)) for row in rows], columns=OUTPUT_COLUMNS)
    for column in ("follower_lag", "isr", "replicas"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


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

    def load(self) -> PackedTable | None:
        """The bucket's table; None when the bucket has never been saved (its first micro-batch).

        One round trip to the JVM: the list's first (only) row. ``exists()`` first, or reading the list to its
        end, would take one more each (PySpark asks for the next row of a list until the JVM says there is none),
        ~1 ms apiece per bucket and micro-batch on a busy machine."""
        row = next(iter(self.state.get()), None)
        return None if row is None else unpack(row[0])

    def save(self, table: PackedTable | dict[PartitionKey, PartitionState]) -> None:
        self.state.put([(pack(table),)])


LZ4 = b"LZ4\x00"
"""The first bytes of a compressed bucket value (:func:`pack`); a pickle starts with b"\\x80"."""
_SIZE = 8


def pack(table: PackedTable | dict[PartitionKey, PartitionState]) -> bytes:
    """A bucket's table as the state store keeps it: the map of pickled states, pickled, compressed with LZ4 (Arrow's
    codec). A bucket's value goes to the JVM and back in every micro-batch that reaches the bucket, whole, and a
    busy JVM moves ~200 MB/s of it (docs/benchmarks.md, "Streaming job"). The packed states of a bucket compress
    (their keys repeat the cluster and topic names, their values the same small tuples): 2.1 times for 3,125
    partitions of 300 topics with random names, ids and offsets, in 0.7 ms (0.1 ms back)."""
    packed = table.packed() if isinstance(table, PackedTable) else PackedTable(live=dict(table)).packed()
    raw = pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)
    return LZ4 + len(raw).to_bytes(_SIZE, "big") + pa.compress(raw, codec="lz4", asbytes=True)


def unpack(value: bytes | None) -> PackedTable:
    """The table :func:`pack` wrote; also one written uncompressed (before session 15), or of whole states
    (before session 7)."""
    if value is not None and value.startswith(LZ4):
        size = int.from_bytes(value[len(LZ4):len(LZ4) + _SIZE], "big")
        value = pa.decompress(value[len(LZ4) + _SIZE:], decompressed_size=size, codec="lz4", asbytes=True)
    table = pickle.loads(value) if value is not None else {}
    if isinstance(next(iter(table.values()), b""), bytes):  # one format per table: its first value tells
        return PackedTable(table)
    return PackedTable(live=table)  # the format before session 7: states, not their pickles


class ReplicationProcessor(StatefulProcessor):
    """transformWithStateInPandas processor over state buckets.

    The staleness timer of a bucket is a chain: its first micro-batch registers one, and each timer, when it
    fires, registers the next, so a bucket always has exactly one pending (timers are state, committed with the
    micro-batch that changed them). Listing a bucket's timers in every micro-batch to make sure cost a round
    trip to the JVM of 2-4 ms per bucket; registering the same one again logs a warning in Spark."""

    def __init__(self, cfg: DetectConfig) -> None:
        self.cfg = cfg
        self.timer_period_ms = max(1000, cfg.stale_after_ms // 2)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.table = BucketTable(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        yield self.process_rows(rows, timerValues.getCurrentProcessingTimeInMs())

    def process_rows(self, rows: Iterator[pd.DataFrame], now_ms: int, step: Step = lambda _name, _count: None
                     ) -> pd.DataFrame:
        """One bucket's samples of a micro-batch through its table; ``step(name, count)`` is called after each
        step (input: samples, load: partitions, process: outputs, save: partitions, frame: rows), for the
        benchmark's timings."""
        with gc_paused():  # a bucket's table is thousands of dicts, unpickled and pickled: see replmon.core.gcpause
            chunks = list(rows)
            samples = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
            step("input", len(samples))
            stored = self.table.load()
            table = stored if stored is not None else PackedTable()
            step("load", len(table))
            table, out = process_bucket(table, samples, self.cfg, now_ms)
            step("process", len(out))
            self.table.save(table)
            if stored is None:  # a new bucket starts its chain of timers: each one registers the next
                self.handle.registerTimer(now_ms + self.timer_period_ms)
            step("save", len(table))
            frame = _frame(out)
            step("frame", len(frame))
        return frame

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        now_ms = timerValues.getCurrentProcessingTimeInMs()
        with gc_paused():
            stored = self.table.load()
            table, out = expire_bucket(stored if stored is not None else PackedTable(), self.cfg, now_ms)
            if out:
                self.table.save(table)
            self.handle.registerTimer(now_ms + self.timer_period_ms)  # the chain goes on, samples or not
            frame = _frame(out)
        yield frame

    def close(self) -> None:
        pass
