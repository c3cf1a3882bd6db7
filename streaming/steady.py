"""A state bucket's steady partitions as columns, and the sample that changes only their offsets, applied to many
partitions at once.

Nearly every sample of a healthy cluster changes only offsets: the leader, epoch, replicas, ISR and ELR are those
the state holds, every replica answered, no log went backwards, the high watermark moved up or stayed. For such a
sample :func:`streaming.detect.step_dict` emits nothing and rewrites a dozen numbers. A bucket keeps the
partitions whose state allows that (:func:`steady_form`) as numpy columns (:class:`SteadyColumns`), their
:class:`~streaming.state.PartitionMeta` as its pickled bytes, untouched; :func:`steady_step` tells which of a
micro-batch's samples are of that kind (:func:`steady_mask`) and applies them to their rows at once, the
partitions' metrics computed over the same columns. Every other sample, and every partition whose state is in
any other condition, takes :mod:`streaming.detect`'s step, which stays the one definition of what a sample
means: the columns hold exactly the :class:`~streaming.state.PartitionState` that step would have produced
(:meth:`SteadyColumns.state`, property-tested in ``tests/test_stream_steady.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from streaming.detect import LEO_HISTORY_LENGTH, LEO_HISTORY_STEP_MS, METADATA_PROPAGATION_MS, DetectConfig, Health
from streaming.rowindex import RowIndex, codes_of, pruned_names
from streaming.state import (
    NO_SAMPLE,
    PartitionKey,
    PartitionMeta,
    PartitionState,
    dump_meta,
    load_meta,
)

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

NULL = np.iinfo(np.int64).min
"""An absent offset or time in an integer column (``None`` in the state)."""
_INT_COLUMNS = ("partition", "cluster_code", "topic_code", "topic_id_code", "leader", "leader_epoch", "fingerprint",
                "min_insync_replicas", "unclean", "told_until_ms", "isr_size", "replica_count", "leader_slot",
                "sample_time_ms", "cycle", "received_ms", "high_watermark", "log_start_offset", "committed_end",
                "hw_stuck_since_ms", "hw_stuck_log_end_offset", "history_length", "lineage_fingerprint")
_BOOL_COLUMNS = ("alone", "hw_stalled", "stale", "lineage_known")
SLOTTED_COLUMNS = ("brokers", "log_end_offsets")
"""The matrices with a slot per replica (the LEO history's have a fixed width)."""
_MATRIX_COLUMNS = (*SLOTTED_COLUMNS, "history_time_ms", "history_log_end_offset")
COLUMNS = (*_INT_COLUMNS, *_BOOL_COLUMNS, *_MATRIX_COLUMNS)
"""Every column, in the order the state store keeps them (:func:`streaming.table.pack`)."""


HISTORY_INTERVAL_MS = 60_000
"""A partition whose state does not change gets a history snapshot once per minute of sample time (the steady
step here, :func:`streaming.processor.history_due` for the step of :mod:`streaming.detect`)."""


def _opt(value: int | None) -> int:
    return NULL if value is None else value


def _none(value: int) -> int | None:
    return None if value == NULL else int(value)


def steady_form(state: PartitionState) -> bool:
    """Whether ``state`` is one the columns hold: sampled, every replica's LEO read in its newest sample and none
    kept from before, the leader among its replicas, a high watermark known, no epoch regression pending, no
    reassignment in flight, and the last leader change's loss settled (or none)."""
    m = state.meta
    leos = state.log_end_offsets
    return (state.sample_time_ms != NO_SAMPLE and m.epoch_regressed_to is None
            and not m.adding_replicas and not m.removing_replicas
            and (m.loss is None or m.loss.divergence is not None) and state.high_watermark is not None
            and m.leader >= 0 and m.leader in leos and len(set(m.replicas)) == len(m.replicas) == len(leos)
            and all(b in leos for b in m.replicas) and state.last_log_end_offsets == leos
            and len(state.leader_log_end_history) <= LEO_HISTORY_LENGTH)


def _alone_commits(m: PartitionMeta) -> bool:
    """:func:`streaming.detect._note_sampled_commit`'s condition: the leader alone in the ISR commits its log."""
    return (m.leader >= 0 and m.isr == (m.leader,)
            and (m.elr is None or m.min_insync_replicas is None or m.min_insync_replicas <= 1))


@dataclass
class SteadyColumns:
    """The steady partitions of one bucket, a row each: identity, what a sample is compared with (leader, epoch,
    membership fingerprint, topic configs, the metadata log's last word), the offsets and timers a steady sample
    rewrites, and each partition's :class:`PartitionMeta` as pickled bytes (:func:`~streaming.state.dump_meta`).
    Rows whose partition left the columns (:meth:`take`) are dead until :meth:`compacted`."""

    names: list[str]
    """Cluster names, topic names and topic ids, each once: the ``*_code`` columns index it."""
    metas: list[bytes]
    columns: dict[str, np.ndarray]
    alive: Bools

    @classmethod
    def empty(cls, slots: int = 1) -> SteadyColumns:
        columns: dict[str, np.ndarray] = {name: np.zeros(0, np.int64) for name in _INT_COLUMNS}
        columns.update({name: np.zeros(0, np.bool_) for name in _BOOL_COLUMNS})
        columns["brokers"] = np.zeros((0, slots), np.int64)
        columns["log_end_offsets"] = np.zeros((0, slots), np.int64)
        columns["history_time_ms"] = np.zeros((0, LEO_HISTORY_LENGTH), np.int64)
        columns["history_log_end_offset"] = np.zeros((0, LEO_HISTORY_LENGTH), np.int64)
        return cls([], [], columns, np.zeros(0, np.bool_))

    def __post_init__(self) -> None:
        self._codes = {name: code for code, name in enumerate(self.names)}
        self._index: RowIndex | None = None

    def _rows(self) -> RowIndex:
        """The live rows by partition (built when first needed after rows were added; a dead row is skipped by
        the lookups, which check :attr:`alive`)."""
        if self._index is None:
            c = self.columns
            live = np.flatnonzero(self.alive)
            self._index = RowIndex.of(c["cluster_code"][live], c["topic_code"][live], c["partition"][live], live)
        return self._index

    def rows_of(self, cluster_code: Ints, topic_code: Ints, partition: Ints) -> Ints:
        """The live row of each partition (its cluster and topic as codes of :attr:`names`, -1 for a name not
        there), -1 where it has none."""
        rows = self._rows().find(cluster_code, topic_code, partition)
        return np.where(rows >= 0, np.where(self.alive[np.maximum(rows, 0)], rows, -1), -1) if len(self.alive) \
            else rows

    def find(self, clusters: pa.Array | pa.ChunkedArray, topics: pa.Array | pa.ChunkedArray, partitions: Ints
             ) -> Ints:
        """The live row of each partition named by its cluster and topic names (Arrow strings), -1 where it has
        none."""
        return self.rows_of(self.codes(clusters), self.codes(topics), np.asarray(partitions, np.int64))

    def codes(self, names: pa.Array | pa.ChunkedArray) -> Ints:
        """Each name's code in :attr:`names`, -1 for one not there (or none)."""
        return codes_of(names, self._codes)

    def row_of(self, key: PartitionKey) -> int | None:
        """The partition's live row, if it has one."""
        if not len(self.alive):
            return None
        row = self._rows().find_one(self._codes.get(key[0], -1), self._codes.get(key[1], -1), key[2])
        return None if row < 0 or not self.alive[row] else row

    def keys(self, rows: Ints) -> list[PartitionKey]:
        """The partitions of these rows."""
        c = self.columns
        names = self.names
        return [(names[cluster], names[topic], partition) for cluster, topic, partition in zip(
            c["cluster_code"][rows].tolist(), c["topic_code"][rows].tolist(), c["partition"][rows].tolist(),
            strict=True)]

    def live_keys(self) -> list[PartitionKey]:
        """The partitions the columns hold."""
        return self.keys(np.flatnonzero(self.alive))

    def __len__(self) -> int:
        return int(np.count_nonzero(self.alive))

    def copy(self) -> SteadyColumns:
        copied = SteadyColumns.__new__(SteadyColumns)
        copied.names, copied.metas = list(self.names), list(self.metas)
        copied.columns = {name: column.copy() for name, column in self.columns.items()}
        copied.alive = self.alive.copy()
        copied._codes, copied._index = dict(self._codes), self._index
        return copied

    def _code(self, name: str | None) -> int:
        if name is None:
            return -1
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def state(self, row: int) -> PartitionState:
        """The partition's state as :mod:`streaming.detect` holds it."""
        c = self.columns
        names = self.names
        key = (names[c["cluster_code"][row]], names[c["topic_code"][row]], int(c["partition"][row]))
        meta = load_meta(key, self.metas[row])
        leos = {int(b): int(leo) for b, leo in zip(c["brokers"][row].tolist(), c["log_end_offsets"][row].tolist(),
                                                   strict=True) if b >= 0}
        length = int(c["history_length"][row])
        history = tuple(zip(c["history_time_ms"][row, :length].tolist(),
                            c["history_log_end_offset"][row, :length].tolist(), strict=True))
        return PartitionState(
            meta, sample_time_ms=int(c["sample_time_ms"][row]), cycle=int(c["cycle"][row]),
            received_ms=int(c["received_ms"][row]), high_watermark=int(c["high_watermark"][row]),
            log_start_offset=_none(c["log_start_offset"][row]), log_end_offsets=leos, last_log_end_offsets=leos,
            hw_stuck_since_ms=_none(c["hw_stuck_since_ms"][row]),
            hw_stuck_log_end_offset=_none(c["hw_stuck_log_end_offset"][row]), hw_stalled=bool(c["hw_stalled"][row]),
            stale=bool(c["stale"][row]), committed_end=_none(c["committed_end"][row]),
            leader_log_end_history=history)

    def take(self, key: PartitionKey) -> PartitionState | None:
        """The partition's state, its row dead from now on (the state goes on outside the columns)."""
        row = self.row_of(key)
        if row is None:
            return None
        self.alive[row] = False
        return self.state(row)

    def drop(self, key: PartitionKey) -> bool:
        """The partition's row dead (its state replaced outside the columns); whether it had one."""
        row = self.row_of(key)
        if row is None:
            return False
        self.alive[row] = False
        return True

    def add(self, states: Mapping[PartitionKey, PartitionState]) -> None:
        """Rows for states in :func:`steady_form` (appended; a key already here is replaced)."""
        if not states:
            return
        if len(self.alive):
            keys = list(states)
            known = self.rows_of(np.array([self._codes.get(key[0], -1) for key in keys], np.int64),
                                 np.array([self._codes.get(key[1], -1) for key in keys], np.int64),
                                 np.array([key[2] for key in keys], np.int64))
            self.alive[known[known >= 0]] = False
        slots = max(len(s.meta.replicas) for s in states.values())
        if slots > self.columns["brokers"].shape[1]:
            self._widen(slots)
        width = self.columns["brokers"].shape[1]
        new: dict[str, list[Any]] = {name: [] for name in (*_INT_COLUMNS, *_BOOL_COLUMNS, *_MATRIX_COLUMNS)}
        for key, st in states.items():
            m = st.meta
            self.metas.append(dump_meta(m))
            brokers = list(m.replicas)
            history = st.leader_log_end_history
            pad = [NULL] * (LEO_HISTORY_LENGTH - len(history))
            values = {
                "partition": key[2], "cluster_code": self._code(key[0]), "topic_code": self._code(key[1]),
                "topic_id_code": self._code(m.topic_id), "leader": m.leader, "leader_epoch": m.leader_epoch,
                "fingerprint": 0,
                "min_insync_replicas": _opt(m.min_insync_replicas),
                "unclean": -1 if m.unclean_leader_election is None else int(m.unclean_leader_election),
                "told_until_ms": (m.metadata_time_ms + METADATA_PROPAGATION_MS if m.metadata_offset >= 0
                                  else NULL),
                "isr_size": len(m.isr), "replica_count": len(m.replicas), "leader_slot": brokers.index(m.leader),
                "sample_time_ms": st.sample_time_ms, "cycle": st.cycle, "received_ms": st.received_ms,
                "high_watermark": st.high_watermark, "log_start_offset": _opt(st.log_start_offset),
                "committed_end": _opt(st.committed_end), "hw_stuck_since_ms": _opt(st.hw_stuck_since_ms),
                "hw_stuck_log_end_offset": _opt(st.hw_stuck_log_end_offset), "history_length": len(history),
                "alone": _alone_commits(m), "hw_stalled": st.hw_stalled, "stale": st.stale,
                "lineage_fingerprint": 0,
                "lineage_known": m.epoch_lineage is not None and m.lineage_leader_epoch == m.leader_epoch,
                "brokers": brokers + [-1] * (width - len(brokers)),
                "log_end_offsets": [st.log_end_offsets[b] for b in brokers] + [NULL] * (width - len(brokers)),
                "history_time_ms": [t for t, _ in history] + pad,
                "history_log_end_offset": [leo for _, leo in history] + pad,
            }
            for name, value in values.items():
                new[name].append(value)
        metas = [st.meta for st in states.values()]
        new["fingerprint"] = fingerprints(*(lists_of([getattr(m, name) for m in metas])
                                            for name in MEMBERSHIP)).tolist()
        lineages = [None if m.epoch_lineage is None else [x for pair in m.epoch_lineage for x in pair] for m in metas]
        new["lineage_fingerprint"] = lineage_fingerprints(lists_of(lineages)).tolist()
        c = self.columns
        for name in _INT_COLUMNS:
            c[name] = np.concatenate([c[name], np.array(new[name], np.int64)])
        for name in _BOOL_COLUMNS:
            c[name] = np.concatenate([c[name], np.array(new[name], np.bool_)])
        for name in _MATRIX_COLUMNS:
            c[name] = np.concatenate([c[name], np.array(new[name], np.int64).reshape(len(states), -1)])
        self.alive = np.concatenate([self.alive, np.ones(len(states), np.bool_)])
        self._index = None

    def _widen(self, slots: int) -> None:
        c = self.columns
        extra = slots - c["brokers"].shape[1]
        c["brokers"] = np.pad(c["brokers"], ((0, 0), (0, extra)), constant_values=-1)
        c["log_end_offsets"] = np.pad(c["log_end_offsets"], ((0, 0), (0, extra)), constant_values=NULL)

    def compacted(self) -> SteadyColumns:
        """The live rows only (what the state store keeps)."""
        if self.alive.all():
            return self
        keep = np.flatnonzero(self.alive)
        return SteadyColumns(self.names, [self.metas[row] for row in keep.tolist()],
                             {name: column[keep] for name, column in self.columns.items()},
                             np.ones(len(keep), np.bool_))

    def pruned(self) -> SteadyColumns:
        """The same rows with only the names they refer to (a deleted topic's name leaves with its partitions)."""
        coded = ("cluster_code", "topic_code", "topic_id_code")
        names, codes = pruned_names(self.names, [self.columns[name] for name in coded])
        if names is self.names:
            return self
        return SteadyColumns(names, self.metas, {**self.columns, **dict(zip(coded, codes, strict=True))}, self.alive)

    def silent_rows(self, now_ms: int, silent_ms: int) -> Ints:
        """The live rows whose newest sample was received more than ``silent_ms`` before ``now_ms``."""
        c = self.columns
        return np.flatnonzero(self.alive & (c["received_ms"] != NO_SAMPLE) & (now_ms - c["received_ms"] > silent_ms))

    def newest_received(self) -> dict[str, int]:
        """Per cluster, the newest ``received_ms`` of its live rows."""
        c = self.columns
        live = np.flatnonzero(self.alive)
        if not len(live):
            return {}
        codes, received = c["cluster_code"][live], c["received_ms"][live]
        newest = np.full(len(self.names), NULL, np.int64)
        np.maximum.at(newest, codes, received)
        return {self.names[code]: int(newest[code]) for code in np.unique(codes).tolist()}

    def stale_candidates(self, now_ms: int, stale_after_ms: int) -> list[PartitionKey]:
        """The partitions :func:`streaming.detect.expire` would mark STALE now."""
        silent = self.silent_rows(now_ms, stale_after_ms)
        return self.keys(silent[~self.columns["stale"][silent]])


class Lists(NamedTuple):
    """Integer lists of k entries, flattened: every entry's values one after the other, each entry's length, and
    whether it has a list at all (``None`` is not ``[]``: a cluster without ELRs is not one with none)."""

    values: Ints
    lengths: Ints
    present: Bools


def lists_of(entries: Sequence[Sequence[int] | None]) -> Lists:
    values: list[int] = []
    lengths: list[int] = []
    for entry in entries:
        if entry is None:
            lengths.append(0)
        else:
            values.extend(entry)
            lengths.append(len(entry))
    return Lists(np.array(values, np.int64), np.array(lengths, np.int64),
                 np.array([entry is not None for entry in entries], np.bool_))


_U64 = np.uint64


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser: every input bit moves every output bit."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _list_hashes(lists: Lists, salt: int) -> npt.NDArray[np.uint64]:
    """One 64-bit hash per entry of its list (order and length count, a missing list is its own value)."""
    n = len(lists.lengths)
    ends = np.cumsum(lists.lengths)
    starts = ends - lists.lengths
    position = np.arange(len(lists.values), dtype=np.int64) - np.repeat(starts, lists.lengths)
    items = _mix(lists.values.astype(np.uint64) ^ (position.astype(np.uint64) * _U64(0x9E3779B97F4A7C15)
                                                   + _U64(salt)))
    sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(items, dtype=np.uint64)])
    hashes = _mix(sums[ends] - sums[starts] + lists.lengths.astype(np.uint64) * _U64(0xD6E8FEB86659FD93)
                  + _U64(salt))
    return np.where(lists.present, hashes, _mix(np.full(n, salt * 0x2545F4914F6CDD1D + 1, np.uint64)))


def fingerprints(isr: Lists, replicas: Lists, elr: Lists, last_known_elr: Lists) -> Ints:
    """The membership lists of each entry as one number (the leader and epoch are compared as themselves): equal
    lists give equal numbers, in every process, from Python lists and from Arrow arrays alike; two different
    memberships of one partition share a number with a chance of 2^-64."""
    combined = np.zeros(len(isr.lengths), np.uint64)
    for salt, lists in enumerate((isr, replicas, elr, last_known_elr), start=1):
        combined = _mix(combined * _U64(0x100000001B3) + _list_hashes(lists, salt))
    return combined.view(np.int64)


def lineage_fingerprints(pairs: Lists) -> Ints:
    """A leader lineage as one number per entry: its ``(leader epoch, start offset)`` pairs, flattened, in order."""
    return _mix(_list_hashes(pairs, 5)).view(np.int64)


MEMBERSHIP = ("isr", "replicas", "elr", "last_known_elr")
MEMBERSHIP_TYPE = pa.list_(pa.int64())
"""The membership lists of steady samples, as Arrow arrays (a batch's entries hold them so: taken, not
converted)."""
SAMPLE_VALUES = ("sample_time_ms", "cycle", "leader", "leader_epoch", "fingerprint", "high_watermark",
                 "log_start_offset", "lineage_sampled", "lineage_fingerprint")


def _every_in_order(picks: Ints, count: int) -> bool:
    """Whether ``picks`` are the places 0..count-1 in order: a take of them is what it takes from."""
    return len(picks) == count and bool(np.array_equal(picks, np.arange(count)))


@dataclass
class SampleColumns:
    """The samples of a micro-batch that may be steady (each the only record of its partition, its partition
    with a row), as arrays: their rows, the numbers :func:`steady_step` compares and writes, each replica's LEO in
    the row's broker order, and the membership lists as the metrics give them (Arrow list arrays, of every sample
    gathered: each sample's are at its place in ``list_at``; taken once, for the samples whose metrics leave)."""

    rows: Ints
    values: dict[str, Ints]
    log_end_offsets: Ints
    lists: dict[str, pa.Array]
    at: Ints
    """Each sample's place among the entries it was gathered from."""
    list_at: Ints
    """Each sample's place in :attr:`lists`."""

    @classmethod
    def empty(cls, width: int) -> SampleColumns:
        return cls(np.zeros(0, np.int64), {name: np.zeros(0, np.int64) for name in SAMPLE_VALUES},
                   np.zeros((0, width), np.int64), {name: pa.array([], MEMBERSHIP_TYPE) for name in MEMBERSHIP},
                   np.zeros(0, np.int64), np.zeros(0, np.int64))

    def take(self, picks: Ints) -> SampleColumns:
        """The samples at ``picks`` (places in these columns), in that order."""
        if _every_in_order(picks, len(self.rows)):
            return self
        return SampleColumns(self.rows[picks], {name: values[picks] for name, values in self.values.items()},
                             self.log_end_offsets[picks], self.lists, self.at[picks], self.list_at[picks])


@dataclass
class SteadyBatch:
    """The steady samples of a micro-batch: their rows, their membership lists (those of :attr:`source` at
    :attr:`at`: a round of the steady step takes no list, the metrics take them once), and which rows' metrics
    are a history snapshot (:func:`streaming.processor.history_due`)."""

    rows: Ints
    source: dict[str, pa.Array]
    at: Ints
    """Each row's sample's place in :attr:`source`."""
    history: Bools

    @classmethod
    def of(cls, rows: Ints, lists: dict[str, pa.Array], history: Bools) -> SteadyBatch:
        """A batch whose lists are the rows' own, in their order."""
        return cls(rows, lists, np.arange(len(rows)), history)

    @property
    def lists(self) -> dict[str, pa.Array]:
        """The rows' membership lists, in their order."""
        if all(_every_in_order(self.at, len(lists)) for lists in self.source.values()):
            return self.source
        taken = pa.array(self.at, pa.int64())
        return {name: lists.take(taken) for name, lists in self.source.items()}


def steady_step(columns: SteadyColumns, gathered: SampleColumns, cfg: DetectConfig, now_ms: int) -> SteadyBatch:
    """Apply the steady samples among ``gathered`` to their rows, in place, as :func:`streaming.detect.step_dict`
    would one by one (no events: a sample that would emit one is not steady). The samples left out take the
    step of :mod:`streaming.detect`."""
    if not len(gathered.rows):
        return SteadyBatch.of(np.zeros(0, np.int64), {name: pa.array([], MEMBERSHIP_TYPE) for name in MEMBERSHIP},
                              np.zeros(0, np.bool_))
    c = columns.columns
    rows = gathered.rows
    v = gathered.values
    leos = gathered.log_end_offsets
    t, cycle, hw = v["sample_time_ms"], v["cycle"], v["high_watermark"]
    prev_t, prev_hw = c["sample_time_ms"][rows], c["high_watermark"][rows]
    valid = c["brokers"][rows] >= 0
    pick = np.arange(len(rows))
    leader_slot = c["leader_slot"][rows]
    leader_leo = leos[pick, leader_slot]
    since, stalled = c["hw_stuck_since_ms"][rows], c["hw_stalled"][rows]
    below = hw < leader_leo
    restart = (since == NULL) | (hw != prev_hw)
    would_stall = below & ~restart & ~stalled & (t - since > cfg.hw_stalled_after_ms)
    steady = (
        ((t > prev_t) | ((t == prev_t) & (cycle > c["cycle"][rows])))
        & (t >= c["told_until_ms"][rows])
        & (v["leader"] == c["leader"][rows]) & (v["leader_epoch"] == c["leader_epoch"][rows])
        & (v["fingerprint"] == c["fingerprint"][rows])
        # a lineage the state already holds for this leader epoch changes nothing (_apply_leader_lineage)
        & ((v["lineage_sampled"] == 0) | (c["lineage_known"][rows]
                                          & (v["lineage_fingerprint"] == c["lineage_fingerprint"][rows])))
        & np.all(~valid | (leos >= c["log_end_offsets"][rows]), axis=1)
        & (hw >= prev_hw) & ~would_stall
    )
    keep = np.flatnonzero(steady)
    rows, t, cycle, hw, leos, leader_leo = rows[keep], t[keep], cycle[keep], hw[keep], leos[keep], leader_leo[keep]
    below, restart, since, prev_t = below[keep], restart[keep], since[keep], prev_t[keep]
    log_start = v["log_start_offset"][keep]
    before_stale, before_stalled = c["stale"][rows], c["hw_stalled"][rows]

    # _check_hw_stalled: caught up clears the timer (its LEO kept); a moved or first HW below the LEO starts it
    caught_up = ~below
    started = below & restart
    c["hw_stuck_since_ms"][rows] = np.where(caught_up, NULL, np.where(started, t, since))
    c["hw_stuck_log_end_offset"][rows] = np.where(started, leader_leo, c["hw_stuck_log_end_offset"][rows])
    c["hw_stalled"][rows] = np.where(caught_up | started, False, before_stalled)
    # _note_sampled_commit: the HW is committed, and the leader's whole log while it is alone in the ISR
    committed = np.maximum(c["committed_end"][rows], hw)
    c["committed_end"][rows] = np.where(c["alone"][rows], np.maximum(committed, leader_leo), committed)
    c["log_start_offset"][rows] = np.where(log_start == NULL, c["log_start_offset"][rows], log_start)
    c["log_end_offsets"][rows] = leos
    c["high_watermark"][rows] = hw
    # _remember_leader_log_end: the leader's LEO every LEO_HISTORY_STEP_MS, the newest LEO_HISTORY_LENGTH kept
    length = c["history_length"][rows]
    last_t = c["history_time_ms"][rows, np.maximum(length - 1, 0)]
    remember = (length == 0) | (t - last_t >= LEO_HISTORY_STEP_MS)
    full = remember & (length == LEO_HISTORY_LENGTH)
    if full.any():  # shift out the oldest
        at = rows[full]
        for name in ("history_time_ms", "history_log_end_offset"):
            c[name][at, :-1] = c[name][at, 1:]
    slot = np.minimum(length, LEO_HISTORY_LENGTH - 1)[remember]
    c["history_time_ms"][rows[remember], slot] = t[remember]
    c["history_log_end_offset"][rows[remember], slot] = leader_leo[remember]
    c["history_length"][rows] = np.where(remember, np.minimum(length + 1, LEO_HISTORY_LENGTH), length)
    c["sample_time_ms"][rows] = t
    c["cycle"][rows] = cycle
    c["received_ms"][rows] = now_ms
    c["stale"][rows] = False
    history = (((t // HISTORY_INTERVAL_MS) != (prev_t // HISTORY_INTERVAL_MS)) | before_stale
               | (c["hw_stalled"][rows] != before_stalled))
    return SteadyBatch(rows, gathered.lists, gathered.list_at[keep], history)


MATRICES = "_matrices"
"""The key of :func:`steady_metrics`'s replicas as matrices (brokers, -1 where a row has fewer; each one's lag, 0
for the leader; its time lag): not a metric, for :meth:`streaming.serving.ServedColumns.record_steady`."""


def _none_empty(lists: pa.Array) -> pa.Array:
    """A list per row, an empty one for none (the metrics' ELRs)."""
    return pc.fill_null(lists, pa.scalar([], lists.type)) if lists.null_count else lists


BROKER_MAP = pa.map_(pa.int64(), pa.int64())
"""A map of follower broker -> lag, as Arrow holds the metrics' follower lags."""


def steady_metrics(columns: SteadyColumns, batch: SteadyBatch) -> dict[str, Any]:
    """The :class:`~streaming.detect.PartitionMetrics` of the batch's rows, as columns (numpy arrays where no value
    is absent; Arrow arrays: the nullable ones, the lists, and the follower lags as maps built from the matrices
    at once) under the metrics' field names: what
    :func:`streaming.detect.metrics_of` gives for each row's state; and the replicas' as matrices under
    :data:`MATRICES`."""
    c = columns.columns
    rows = batch.rows
    n = len(rows)
    pick = np.arange(n)
    brokers, leos = c["brokers"][rows], c["log_end_offsets"][rows]
    leader_slot = c["leader_slot"][rows]
    leader_leo = leos[pick, leader_slot]
    now = c["sample_time_ms"][rows]
    hist_t, hist_leo = c["history_time_ms"][rows], c["history_log_end_offset"][rows]
    hist_len = c["history_length"][rows]
    entries = np.arange(LEO_HISTORY_LENGTH)[None, :] < hist_len[:, None]
    followers = (brokers >= 0) & (np.arange(brokers.shape[1])[None, :] != leader_slot[:, None])
    lag = np.maximum(leader_leo[:, None] - leos, 0)
    time_lag = np.zeros_like(leos)
    oldest = np.where(hist_len > 0, hist_t[:, 0], now)
    for slot in range(brokers.shape[1]):
        follower = leos[:, slot]
        reached = entries & (hist_leo <= follower[:, None])
        found = reached.any(axis=1)
        newest = LEO_HISTORY_LENGTH - 1 - np.argmax(reached[:, ::-1], axis=1)
        later = np.minimum(newest + 1, LEO_HISTORY_LENGTH - 1)
        has_later = newest + 1 < hist_len
        later_t = np.where(has_later, hist_t[pick, later], now)
        later_leo = np.where(has_later, hist_leo[pick, later], leader_leo)
        at_t, at_leo = hist_t[pick, newest], hist_leo[pick, newest]
        span = later_leo - at_leo
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(span > 0, (follower - at_leo) / np.where(span > 0, span, 1), 1.0)
        at_t = np.where(found, at_t, now)  # rows with no such entry (padding included) are not interpolated
        interpolated = (at_t + share * (np.where(found, later_t, now) - at_t)).astype(np.int64)
        ago = np.where(found, now - interpolated, now - oldest)
        time_lag[:, slot] = np.where(follower >= leader_leo, 0, np.maximum(ago, 0))
    has_followers = followers.any(axis=1)
    max_lag = np.where(followers, lag, -1).max(axis=1, initial=-1)
    hw = c["high_watermark"][rows]
    hw_lag = np.maximum(leader_leo - hw, 0)
    isr_size, replica_count = c["isr_size"][rows], c["replica_count"][rows]
    min_isr = c["min_insync_replicas"][rows]
    configured = min_isr != NULL
    under_replicated = isr_size < replica_count
    under_min_isr = configured & (isr_size < min_isr)
    at_min_isr = configured & (isr_size == min_isr)
    lagging = (hw_lag > 0) | (has_followers & (max_lag > 0))
    health = np.select([under_min_isr, under_replicated, at_min_isr, lagging],
                       [Health.UNDER_MIN_ISR, Health.UNDER_REPLICATED, Health.AT_MIN_ISR, Health.LAGGING],
                       Health.HEALTHY)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(followers.sum(axis=1), out=offsets[1:])
    follower_brokers = pa.array(brokers[followers])  # row by row, each row's slots in order

    def by_follower(values: np.ndarray) -> pa.MapArray:
        return pa.MapArray.from_arrays(pa.array(offsets), follower_brokers, pa.array(values[followers]),
                                       type=BROKER_MAP)

    lists = batch.lists
    names = pa.array(columns.names, pa.string())
    log_start = c["log_start_offset"][rows]
    return {
        "cluster": names.take(pa.array(c["cluster_code"][rows])),
        "topic": names.take(pa.array(c["topic_code"][rows])),
        "partition": c["partition"][rows], "sample_time_ms": now, "leader": c["leader"][rows],
        "leader_epoch": c["leader_epoch"][rows], "replica_count": replica_count, "isr_size": isr_size,
        "min_insync_replicas": pa.array(min_isr, pa.int64(), mask=~configured),
        "offline": np.zeros(n, np.bool_), "under_replicated": under_replicated, "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr, "high_watermark": hw, "log_end_offset": leader_leo,
        "log_start_offset": pa.array(log_start, pa.int64(), mask=log_start == NULL), "hw_lag": hw_lag,
        "max_follower_lag": pa.array(max_lag, pa.int64(), mask=~has_followers),
        "health": health.astype(np.int64), "follower_lag": by_follower(lag),
        "isr": lists["isr"], "replicas": lists["replicas"],
        "hw_stalled": c["hw_stalled"][rows], "stale": c["stale"][rows],
        "elr": _none_empty(lists["elr"]), "last_known_elr": _none_empty(lists["last_known_elr"]),
        "follower_time_lag_ms": by_follower(time_lag),
        # steady_form holds no reassignment in flight: nothing being added
        "adding_replicas": pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.int64())),
        "reassigning": np.zeros(n, np.bool_), "history": batch.history,
        MATRICES: (brokers, np.where(followers, lag, 0), time_lag),
    }
