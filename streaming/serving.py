"""What a state bucket tells the driver, so that the driver's work and memory follow what it serves, not the
partitions tracked.

The driver serves per-partition series for at most ``series_budget`` partitions (unhealthy first, then the most
lagging) and aggregates per cluster, topic and broker over every partition. Each bucket keeps the newest metrics
of its partitions in the few numbers those two need (:class:`ServedColumns`: flags, lags, and each replica's broker,
ISR membership, lag and time lag), and with every micro-batch that reaches it sends:

* its **aggregates** (:func:`partials`): counts and maxima over its own partitions, a row per cluster, topic and
  (cluster, broker); the driver keeps each bucket's newest ones and combines them (:func:`combine`: sums and
  maxima), which equals the aggregates over every partition at once;
* the metrics rows of its **candidates** (:func:`ranked`): its own ``series_budget`` first partitions in the
  budget's order, a total order (health, lag, then the partition's name), so that the first ``series_budget`` of
  all buckets' candidates are exactly the first ``series_budget`` of all partitions. A candidate's row is sent
  when its metrics changed (it was sampled) or it became a candidate; the keys that stopped being candidates are
  sent for the driver to drop. A bucket remembers the run of the processor it last told (a driver that starts
  again has none of its rows) and tells a new run its candidates whole.

The driver holds at most ``state_buckets x series_budget`` rows, and each micro-batch brings it a row per bucket,
the candidates that moved and the events, whatever the number of partitions.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streaming.rowindex import RowIndex, codes_of, pruned_names
from streaming.state import PartitionKey
from streaming.steady import MATRICES

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

NULL = np.iinfo(np.int64).min
"""An unknown lag in an integer column."""
_INT_COLUMNS = ("cluster_code", "topic_code", "partition", "sample_time_ms", "leader", "health", "hw_lag",
                "max_follower_lag")
FLAGS = ("under_replicated", "under_min_isr", "at_min_isr", "offline", "hw_stalled", "stale", "reassigning")
_BOOL_COLUMNS = (*FLAGS, "served")
MATRIX_COLUMNS = ("replica", "in_isr", "lag", "isr_time_lag_ms", "adding")
"""The served columns' matrices, each with a slot per replica: its broker, whether it is in the ISR, its lag, its
time lag while in the ISR, whether a reassignment in flight is adding it (copying the log)."""
SERVED_COLUMNS = (*_INT_COLUMNS, *_BOOL_COLUMNS, *MATRIX_COLUMNS)
"""Every column, in the order the state store keeps them (:func:`streaming.table.pack`)."""
ADDED_COLUMNS = ("reassigning", "adding")
"""The columns a bucket stored in a state format before 5 lacks: it loads them false (no reassignment known until
its partitions' next metrics)."""
_BOOL_MATRICES = ("in_isr", "adding")

RANK = ["health", "_lag", "cluster", "topic", "partition"]
RANK_ASCENDING = [True, False, True, True, True]
"""The budget's order: least healthy first, then the most lagging (HW lag + largest follower lag), then by name (a
total order: the same partitions come first whichever buckets they are in)."""


def rank_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (metrics rows) in the budget's order (:data:`RANK`)."""
    lag = pd.to_numeric(frame["hw_lag"]).fillna(0) + pd.to_numeric(frame["max_follower_lag"]).fillna(0)
    return frame.assign(_lag=lag).sort_values(RANK, ascending=RANK_ASCENDING, kind="stable").drop(columns="_lag")


def budgeted(frame: pd.DataFrame, budget: int) -> pd.DataFrame:
    """The partitions that get their own series: the first ``budget`` in the budget's order."""
    if len(frame) <= budget:
        return frame
    return rank_frame(frame).head(budget)


# ---- lists and maps of a metrics frame, as arrays ----

def flat(cells: Iterable[Any]) -> tuple[Ints, Ints]:
    """The items of a column of lists (lists, tuples or arrays; None: empty) as one array, with the row each
    came from."""
    lists = [() if c is None else c for c in cells]
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    items = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
    return items, np.repeat(np.arange(len(lists), dtype=np.int64), lengths)


def flat_map(cells: Iterable[Any]) -> tuple[Ints, Ints, Ints]:
    """The entries of a column of maps (dicts or lists of pairs; None: empty) as keys, values (a null value: 0) and
    the row each came from."""
    maps = [{} if c is None else c if isinstance(c, dict) else dict(c) for c in cells]
    lengths = np.fromiter(map(len, maps), dtype=np.int64, count=len(maps))
    count = int(lengths.sum())
    keys = np.fromiter(itertools.chain.from_iterable(maps), dtype=np.int64, count=count)
    values = np.array(list(itertools.chain.from_iterable(m.values() for m in maps)), dtype=np.float64)  # None: NaN
    ints: Ints = np.nan_to_num(values, nan=0.0).astype(np.int64)
    return keys, ints, np.repeat(np.arange(len(maps), dtype=np.int64), lengths)


def _pair_keys(rows: Ints, brokers: Ints) -> Ints:
    """One int64 per (row, broker id): broker ids are 31-bit, rows far fewer than 2^32."""
    return (rows << 32) | (brokers & 0xFFFFFFFF)


def _lookup(keys: Ints, table_keys: Ints, table_values: Ints) -> Ints:
    """``table_values`` at ``keys`` (0 where a key is absent)."""
    if len(table_keys) == 0:
        return np.zeros(len(keys), dtype=np.int64)
    order = np.argsort(table_keys, kind="stable")
    sorted_keys = table_keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return np.where(sorted_keys[at] == keys, table_values[order][at], 0)


def _nullable(values: Iterable[Any]) -> Ints:
    """A column of integers or None/NaN as int64, unknown as :data:`NULL`."""
    return np.array([NULL if v is None or v != v else int(v) for v in values], np.int64)


def _flags(values: Iterable[Any]) -> Bools:
    """A column of flags (None/NaN: false) as booleans."""
    return np.array([v is not None and v == v and bool(v) for v in values], np.bool_)


RECORDED = ("cluster", "topic", "partition", "sample_time_ms", "leader", "health", "hw_lag", "max_follower_lag",
            *FLAGS, "replicas", "isr", "follower_lag", "follower_time_lag_ms", "adding_replicas")
"""The metrics :meth:`ServedColumns.record` reads."""


def recorded_columns(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Metrics rows (dicts: :func:`streaming.processor.partition_row`) as the columns :meth:`ServedColumns.record`
    reads: a bucket call's few rows, without a frame built to be taken apart."""
    return {name: [row.get(name) for row in rows] for name in RECORDED}


@dataclass
class ServedColumns:
    """A bucket's partitions as the driver's series need them: a row each, in the order they first came; the
    matrices have a slot per replica (``replica`` -1 where a partition has fewer). ``run`` is the processor run
    that holds this bucket's candidates (:mod:`streaming.serving`)."""

    names: list[str]
    columns: dict[str, np.ndarray]
    run: str = ""
    sent: int = 0
    """How many times the bucket told the driver (its messages' sequence: the newest wins)."""

    @classmethod
    def empty(cls) -> ServedColumns:
        columns: dict[str, np.ndarray] = {name: np.zeros(0, np.int64) for name in _INT_COLUMNS}
        columns.update({name: np.zeros(0, np.bool_) for name in _BOOL_COLUMNS})
        columns.update({name: np.zeros((0, 1), np.bool_ if name in _BOOL_MATRICES else np.int64)
                        for name in MATRIX_COLUMNS})
        return cls([], columns)

    def __post_init__(self) -> None:
        self._codes = {name: code for code, name in enumerate(self.names)}
        self._index: RowIndex | None = None

    def __len__(self) -> int:
        return len(self.columns["partition"])

    def _rows_index(self) -> RowIndex:
        if self._index is None:
            c = self.columns
            self._index = RowIndex.of(c["cluster_code"], c["topic_code"], c["partition"], np.arange(len(self)))
        return self._index

    def holds(self, keys: Sequence[PartitionKey]) -> Bools:
        """Whether each partition has a row."""
        if not keys:
            return np.zeros(0, np.bool_)
        clusters, topics, partitions = zip(*keys, strict=True)
        return self._rows_index().find(codes_of(pa.array(clusters, pa.string()), self._codes),
                                       codes_of(pa.array(topics, pa.string()), self._codes),
                                       np.array(partitions, np.int64)) >= 0

    def copy(self) -> ServedColumns:
        return ServedColumns(list(self.names), {name: column.copy() for name, column in self.columns.items()},
                             self.run, self.sent)

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def keys(self, rows: Sequence[int] | Ints) -> list[PartitionKey]:
        c = self.columns
        names = self.names
        at = np.asarray(rows, np.int64)
        return [(names[cluster], names[topic], partition) for cluster, topic, partition in zip(
            c["cluster_code"][at].tolist(), c["topic_code"][at].tolist(), c["partition"][at].tolist(), strict=True)]

    def _rows(self, clusters: pa.Array, topics: pa.Array, partitions: Ints) -> Ints:
        """The rows of these partitions (each once; names as Arrow strings), new ones added."""
        rows = self._rows_index().find(codes_of(clusters, self._codes), codes_of(topics, self._codes), partitions)
        added = np.flatnonzero(rows < 0)
        if len(added):
            first = len(self)
            self._grow(len(added))
            rows[added] = first + np.arange(len(added))
            picked = pa.array(added)
            for names, column in ((clusters, "cluster_code"), (topics, "topic_code")):
                names = names.take(picked)
                for name in pc.unique(names).to_pylist():
                    self._code(name)
                self.columns[column][rows[added]] = codes_of(names, self._codes)
            self.columns["partition"][rows[added]] = partitions[added]
            self._index = None
        return rows

    def _widen(self, width: int) -> None:
        c = self.columns
        if width > c["replica"].shape[1]:
            for name in MATRIX_COLUMNS:
                c[name] = np.pad(c[name], ((0, 0), (0, width - c[name].shape[1])),
                                 constant_values=-1 if name == "replica" else 0)

    def record(self, metrics: pd.DataFrame | Mapping[str, Sequence[Any]]) -> Ints:
        """Each row of ``metrics`` (metrics rows, a partition once: a frame, or the columns of
        :func:`recorded_columns`) in its partition's row; returns the rows."""
        n = len(metrics["partition"])
        if not n:
            return np.zeros(0, np.int64)
        rows = self._rows(pa.array(metrics["cluster"], pa.string()), pa.array(metrics["topic"], pa.string()),
                          np.asarray(list(metrics["partition"]), np.int64))
        c = self.columns
        for name in ("sample_time_ms", "leader", "health", "hw_lag", "max_follower_lag"):
            c[name][rows] = _nullable(metrics[name])
        for name in FLAGS:
            c[name][rows] = _flags(metrics[name])
        replica, of = flat(metrics["replicas"])
        starts = np.concatenate([[0], np.cumsum(np.bincount(of, minlength=n))[:-1]])
        slot = np.arange(len(replica), dtype=np.int64) - starts[of]
        self._widen(int(slot.max()) + 1 if len(slot) else 1)
        for name in MATRIX_COLUMNS:
            c[name][rows] = -1 if name == "replica" else 0
        keys_ = _pair_keys(of, replica)
        isr, isr_of = flat(metrics["isr"])
        in_isr = _lookup(keys_, _pair_keys(isr_of, isr), np.ones(len(isr), np.int64)) == 1
        adding, adding_of = flat(metrics["adding_replicas"])
        lag_brokers, lags, lag_of = flat_map(metrics["follower_lag"])
        time_brokers, time_lags, time_of = flat_map(metrics["follower_time_lag_ms"])
        at = rows[of]
        c["replica"][at, slot] = replica
        c["in_isr"][at, slot] = in_isr
        c["lag"][at, slot] = _lookup(keys_, _pair_keys(lag_of, lag_brokers), lags)
        c["isr_time_lag_ms"][at, slot] = np.where(
            in_isr, _lookup(keys_, _pair_keys(time_of, time_brokers), time_lags), 0)
        c["adding"][at, slot] = _lookup(keys_, _pair_keys(adding_of, adding), np.ones(len(adding), np.int64)) == 1
        return rows

    def record_steady(self, steady: dict[str, Any]) -> Ints:
        """The steady step's metrics (:func:`streaming.steady.steady_metrics`: every replica answered, the leader
        among them) in their partitions' rows, from its matrices; returns the rows. What :meth:`record` makes of
        the same metrics as rows (``tests/test_stream_serving.py``)."""
        n = len(steady["partition"])
        if not n:
            return np.zeros(0, np.int64)
        rows = self._rows(steady["cluster"], steady["topic"], np.asarray(steady["partition"], np.int64))
        c = self.columns
        for name in ("sample_time_ms", "leader", "health", "hw_lag"):
            c[name][rows] = steady[name]
        c["max_follower_lag"][rows] = pc.fill_null(steady["max_follower_lag"], NULL).to_numpy()
        for name in FLAGS:
            c[name][rows] = steady[name]
        brokers, lag, time_lag = steady[MATRICES]
        width = brokers.shape[1]
        self._widen(width)
        valid = brokers >= 0
        in_isr = valid.copy()
        isr = steady["isr"]  # an Arrow list array
        for k in np.flatnonzero(np.asarray(steady["isr_size"]) < np.asarray(steady["replica_count"])).tolist():
            in_isr[k] = np.isin(brokers[k], isr[k].as_py()) & valid[k]
        for name in MATRIX_COLUMNS:  # "adding" stays false: a steady partition has no reassignment in flight
            c[name][rows] = -1 if name == "replica" else 0
        c["replica"][rows, :width] = brokers
        c["in_isr"][rows, :width] = in_isr
        c["lag"][rows, :width] = np.where(valid, lag, 0)
        c["isr_time_lag_ms"][rows, :width] = np.where(in_isr, time_lag, 0)
        return rows

    def forget(self, keys: Sequence[PartitionKey]) -> list[PartitionKey]:
        """Drop the rows of ``keys`` (those it has), and the names no row refers to any more; returns the dropped
        partitions that were candidates (the driver holds their rows)."""
        if not keys or not len(self):
            return []
        clusters, topics, partitions = zip(*keys, strict=True)
        rows = self._rows_index().find(codes_of(pa.array(clusters, pa.string()), self._codes),
                                       codes_of(pa.array(topics, pa.string()), self._codes),
                                       np.array(partitions, np.int64))
        rows = rows[rows >= 0]
        served = self.keys(rows[self.columns["served"][rows]])
        keep = np.ones(len(self), np.bool_)
        keep[rows] = False
        columns = {name: column[keep] for name, column in self.columns.items()}
        self.names, (columns["cluster_code"], columns["topic_code"]) = pruned_names(
            self.names, [columns["cluster_code"], columns["topic_code"]])
        self.columns = columns
        self.__post_init__()
        return served

    def _grow(self, count: int) -> None:
        for name, column in self.columns.items():
            shape = (count, *column.shape[1:])
            extra = np.full(shape, -1, column.dtype) if name == "replica" else np.zeros(shape, column.dtype)
            self.columns[name] = np.concatenate([column, extra])

    def frame(self) -> pd.DataFrame:
        """The rows' names, health and lags (what :func:`rank_frame` orders)."""
        c = self.columns
        names = np.array(self.names, dtype=object) if self.names else np.zeros(0, object)
        return pd.DataFrame({
            "cluster": names[c["cluster_code"]], "topic": names[c["topic_code"]], "partition": c["partition"],
            "health": c["health"], "hw_lag": np.where(c["hw_lag"] == NULL, 0, c["hw_lag"]),
            "max_follower_lag": np.where(c["max_follower_lag"] == NULL, 0, c["max_follower_lag"])})


def ranked(served: ServedColumns, budget: int) -> npt.NDArray[np.bool_]:
    """Which rows are the bucket's candidates: its first ``budget`` in the budget's order."""
    n = len(served)
    if n <= budget:
        return np.ones(n, np.bool_)
    c = served.columns
    by_name = np.empty(len(served.names), np.int64)
    by_name[sorted(range(len(served.names)), key=served.names.__getitem__)] = np.arange(len(served.names))
    lag = (np.where(c["hw_lag"] == NULL, 0, c["hw_lag"])
           + np.where(c["max_follower_lag"] == NULL, 0, c["max_follower_lag"]))
    # rank_frame's order over the columns' numbers: names by their place in the sorted names (keys last to first)
    top = np.lexsort((c["partition"], by_name[c["topic_code"]], by_name[c["cluster_code"]], -lag,
                      c["health"]))[:budget]
    chosen = np.zeros(n, np.bool_)
    chosen[top] = True
    return chosen


# ---- aggregates ----

CLUSTER_SUMS = ("partitions", *FLAGS)
TOPIC_SUMS = ("partitions", "under_replicated", "under_min_isr", "offline")
BROKER_SUMS = ("replicas", "leaders", "out_of_isr")
BROKER_MAXES = ("max_lag", "max_isr_lag_ms")


@dataclass
class Partials:
    """Aggregates over some partitions, a frame per scope: ``clusters`` (cluster; counts, reassignments in flight
    among them, newest sample time), ``topics`` (cluster, topic; counts, largest HW lag, NaN when none known) and
    ``brokers`` (cluster, broker; replicas, partitions led, replicas out of the ISR, largest lag of a replica not
    being added by a reassignment, largest lag in seconds of an in-sync replica, in ms)."""

    clusters: pd.DataFrame
    topics: pd.DataFrame
    brokers: pd.DataFrame

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Each scope's columns as lists (JSON's types; NaN: None): :func:`_scope_dict`."""
        return {scope: _scope_dict({str(c): frame[c].tolist() for c in frame.columns})
                for scope, frame in self.scopes()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Partials:
        """The inverse of :meth:`to_dict`: a column that JSON left all null (NaN written as None) is a float
        column of NaN again, not an object column of None (pandas' concat of such a column is deprecated)."""
        def frame(scope: str) -> pd.DataFrame:
            f = pd.DataFrame(data[scope]["data"], columns=data[scope]["columns"])
            nulls = [c for c in f.columns if len(f) and f[c].dtype == object and f[c].isna().all()]
            return f.astype(dict.fromkeys(nulls, float)) if nulls else f
        return cls(frame("clusters"), frame("topics"), frame("brokers"))

    def scopes(self) -> list[tuple[str, pd.DataFrame]]:
        return [("clusters", self.clusters), ("topics", self.topics), ("brokers", self.brokers)]


def _sum_max(codes: Ints, sums: dict[str, np.ndarray], maxes: dict[str, np.ndarray]
             ) -> tuple[Ints, dict[str, np.ndarray]]:
    """Per distinct code: the sum of each of ``sums``, the largest of each of ``maxes`` (NaN where a group has only
    NaN); returns the codes, ascending, and the columns (numpy: a bucket's call pays this every time)."""
    groups, inverse = np.unique(codes, return_inverse=True)
    columns: dict[str, np.ndarray] = {
        name: np.bincount(inverse, weights=values, minlength=len(groups)).astype(np.int64)
        for name, values in sums.items()}
    if len(groups):
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(groups)))
        for name, values in maxes.items():
            columns[name] = np.fmax.reduceat(values[order], starts)
    else:
        columns.update({name: values[:0] for name, values in maxes.items()})
    return groups, columns


def _scope_dict(columns: dict[str, list[Any]]) -> dict[str, Any]:
    """A scope's aggregates as a bucket's message holds them: its column names, and its rows as lists of JSON's
    types (NaN: None)."""
    return {"columns": list(columns),
            "data": [[None if isinstance(v, float) and v != v else v for v in row]
                     for row in zip(*columns.values(), strict=True)]}


def _partial_columns(served: ServedColumns) -> dict[str, dict[str, np.ndarray]]:
    """The bucket's aggregates (pure), each scope's columns as arrays (:class:`Partials`' frames)."""
    c = served.columns
    names = np.array(served.names, dtype=object) if served.names else np.zeros(0, object)
    cluster_code = c["cluster_code"]
    ones = np.ones(len(served), np.int64)
    flags = {flag: c[flag].astype(np.int64) for flag in FLAGS}
    codes, columns = _sum_max(cluster_code, {"partitions": ones, **flags},
                              {"last_sample_time_ms": c["sample_time_ms"]})
    clusters = {"cluster": names[codes], **columns}
    hw_lag = np.where(c["hw_lag"] == NULL, np.nan, c["hw_lag"].astype(np.float64))
    codes, columns = _sum_max((cluster_code << 32) | c["topic_code"],
                              {"partitions": ones, **{flag: flags[flag] for flag in TOPIC_SUMS[1:]}},
                              {"max_hw_lag": hw_lag})
    topics = {"cluster": names[codes >> 32], "topic": names[codes & 0xFFFFFFFF], **columns}
    valid = c["replica"] >= 0
    row, _slot = np.nonzero(valid)
    replica = c["replica"][valid]
    codes, columns = _sum_max((cluster_code[row] << 32) | (replica & 0xFFFFFFFF),
                              {"replicas": np.ones(len(replica), np.int64),
                               "leaders": (c["leader"][row] == replica).astype(np.int64),
                               "out_of_isr": (~c["in_isr"][valid]).astype(np.int64)},
                              # a replica being added copies the log: its lag is no follower falling behind
                              {"max_lag": np.where(c["adding"][valid], 0, c["lag"][valid]),
                               "max_isr_lag_ms": c["isr_time_lag_ms"][valid]})
    brokers = {"cluster": names[codes >> 32], "broker": (codes & 0xFFFFFFFF).astype(np.int32).astype(np.int64),
               **columns}
    return {"clusters": clusters, "topics": topics, "brokers": brokers}


def partials(served: ServedColumns) -> Partials:
    """The bucket's aggregates (pure)."""
    scopes = _partial_columns(served)
    return Partials(*(pd.DataFrame(scopes[scope]) for scope in ("clusters", "topics", "brokers")))


def partials_dict(served: ServedColumns) -> dict[str, dict[str, Any]]:
    """The bucket's aggregates as its message holds them (what :meth:`Partials.to_dict` gives of
    :func:`partials`), from the arrays without frames: a bucket call pays this every time."""
    return {scope: _scope_dict({name: values.tolist() for name, values in columns.items()})
            for scope, columns in _partial_columns(served).items()}


def combine(parts: Iterable[Partials]) -> Partials:
    """The aggregates over the partitions of all ``parts`` together (each partition in one of them)."""
    parts = list(parts)

    def merged(scope: str, keys: list[str], sums: Sequence[str], maxes: Sequence[str]) -> pd.DataFrame:
        frames = [getattr(p, scope) for p in parts if not getattr(p, scope).empty]
        if not frames:
            return pd.DataFrame(columns=[*keys, *sums, *maxes])
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        agg: dict[str, str] = {name: "sum" for name in sums} | {name: "max" for name in maxes}
        return frame.groupby(keys, sort=True).agg(agg).reset_index()

    return Partials(merged("clusters", ["cluster"], CLUSTER_SUMS, ["last_sample_time_ms"]),
                    merged("topics", ["cluster", "topic"], TOPIC_SUMS, ["max_hw_lag"]),
                    merged("brokers", ["cluster", "broker"], BROKER_SUMS, BROKER_MAXES))


CounterKey = tuple[str, tuple[str, ...]]


def event_counts(events: Iterable[dict[str, Any]]) -> Counter[CounterKey]:
    """What ``events`` add to the job's counters, by (counter, labels) (pure): the one definition, for the
    executors' counts and the driver's."""
    counts: Counter[CounterKey] = Counter()
    for e in events:
        cluster, topic = e["cluster"], e.get("topic") or ""
        counts[("replmon_events_total", (cluster, e["type"]))] += 1
        if e["type"] == "LEADER_CHANGE" and e.get("clean") is False:
            counts[("replmon_unclean_leader_elections_total", (cluster, topic))] += 1
        if e["type"] in ("DATA_LOSS", "HW_REGRESSION") and e.get("committed_lost"):
            # an election's loss is one of the two, never both (streaming.detect)
            counts[("replmon_committed_messages_lost_total", (cluster, topic))] += int(e["committed_lost"])
        if e.get("uncommitted_counted"):
            counts[("replmon_uncommitted_messages_lost_total", (cluster, topic))] += int(e["uncommitted_counted"])
        if e["type"] == "BROKER_FENCED" and e.get("severity") == "warning":
            for broker in e.get("brokers") or ():
                counts[("replmon_broker_fencings_total", (cluster, str(broker)))] += 1
        if e["type"] == "EPOCH_DIVERGENCE" and e.get("severity") == "critical":
            counts[("replmon_epoch_divergences_total", (cluster, topic))] += 1
    return counts


def served_of(metrics: pd.DataFrame) -> ServedColumns:
    """The columns of metrics rows (the newest row of each partition)."""
    served = ServedColumns.empty()
    served.record(metrics.reset_index(drop=True))
    return served

