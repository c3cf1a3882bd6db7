"""A state bucket's table of partitions, as the job works on it and as the state store keeps it.

A bucket keeps its steady partitions as columns (:class:`streaming.steady.SteadyColumns`: a sample that changes
only offsets is applied to many at once) and every other state pickled on its own (:class:`PackedTable`: a
micro-batch unpickles and pickles again only the partitions it reaches). :class:`ColumnarTable` is the two as one
mapping of ``(cluster, topic, partition)`` to its state, which :mod:`streaming.detect`'s steps read and write;
:func:`pack` writes it as one versioned value, :func:`unpack` reads every format written before.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

import numpy as np
import pyarrow as pa

from replmon.core.errors import ReplmonError
from streaming.detect import LEO_HISTORY_LENGTH
from streaming.serving import ADDED_COLUMNS, MATRIX_COLUMNS, SERVED_COLUMNS, ServedColumns
from streaming.state import NO_SAMPLE, BucketValue, PartitionKey, PartitionState, dump_state, load_state
from streaming.steady import COLUMNS, SLOTTED_COLUMNS, SteadyColumns, steady_form


class _Table(MutableMapping[PartitionKey, BucketValue]):
    """A bucket's table: ``get`` loads a state where it is kept, ``[]`` is ``get`` that raises."""

    __slots__ = ()

    def __getitem__(self, key: PartitionKey) -> BucketValue:
        state: BucketValue | None = self.get(key)
        if state is None:
            raise KeyError(key)
        return state


class PackedTable(_Table):
    """A bucket's partitions as the state store keeps them: each partition's state pickled on its own, unpickled
    when a sample reaches it, and pickled again only then. A micro-batch reaches a fraction of a bucket's
    partitions (a 20,000-sample batch over 100,000 partitions, a fifth); unpickling and pickling every state
    of every bucket it reached cost more than the detection (docs/benchmarks.md, "Streaming job").

    ``copy()`` is shallow and cheap: the packed bytes are shared, never changed."""

    __slots__ = ("_live", "_packed")

    def __init__(self, packed: dict[PartitionKey, bytes] | None = None,
                 live: dict[PartitionKey, BucketValue] | None = None) -> None:
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

    def __setitem__(self, key: PartitionKey, state: BucketValue) -> None:
        self._live[key] = state

    def __delitem__(self, key: PartitionKey) -> None:
        found = self._live.pop(key, None) is not None
        if self._packed.pop(key, None) is None and not found:
            raise KeyError(key)

    def holds(self, key: PartitionKey) -> bool:
        return key in self._live or key in self._packed

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

    def live(self) -> dict[PartitionKey, BucketValue]:
        """The states unpickled or set since the table was loaded (the table's own: a key deleted from it leaves
        the table, a key unpickled is no longer packed)."""
        for key in self._live:
            self._packed.pop(key, None)
        return self._live


def newest_received(states: Iterable[BucketValue], newest: dict[str, int] | None = None) -> dict[str, int]:
    """Per cluster, the newest ``received_ms`` of the partition states among ``states`` (with ``newest``'s)."""
    newest = {} if newest is None else newest
    for state in states:
        if isinstance(state, PartitionState) and state.received_ms != NO_SAMPLE:
            cluster = state.meta.cluster
            newest[cluster] = max(newest.get(cluster, NO_SAMPLE), state.received_ms)
    return newest


class ColumnarTable(_Table):
    """A bucket's partitions: the steady ones as columns, the others (and a cluster's brokers) packed. A state read
    from the columns leaves them (its row dead) and lives in the packed table until :meth:`fold` puts it back,
    if it is then steady. ``copy()`` copies the columns (the steady step changes them in place). ``served``: the
    partitions' newest metrics as the driver's series need them (:mod:`streaming.serving`). ``heard``: per cluster,
    when the bucket last heard that the cluster's partitions are sampled, from the read stage
    (:data:`streaming.batches.HEARD`), also while the bucket holds none of them that are."""

    __slots__ = ("heard", "served", "side", "steady")

    def __init__(self, side: PackedTable | None = None, steady: SteadyColumns | None = None,
                 served: ServedColumns | None = None, heard: dict[str, int] | None = None) -> None:
        self.side = side if side is not None else PackedTable()
        self.steady = steady if steady is not None else SteadyColumns.empty()
        self.served = served if served is not None else ServedColumns.empty()
        self.heard = heard if heard is not None else {}

    def get(self, key: PartitionKey, default: Any = None) -> Any:
        state = self.side.get(key)
        if state is None:
            state = self.steady.take(key)
            if state is None:
                return default
            self.side[key] = state
        return state

    def __setitem__(self, key: PartitionKey, state: BucketValue) -> None:
        if not self.side.holds(key):  # a partition is in one of the two: read from the columns, it left them
            self.steady.drop(key)
        self.side[key] = state

    def __delitem__(self, key: PartitionKey) -> None:
        if not self.steady.drop(key):
            del self.side[key]

    def __iter__(self) -> Iterator[PartitionKey]:
        yield from self.side
        yield from self.steady.live_keys()

    def __len__(self) -> int:
        return len(self.side) + len(self.steady)

    def copy(self) -> ColumnarTable:
        return ColumnarTable(self.side.copy(), self.steady.copy(), self.served.copy(), dict(self.heard))

    def peek(self, key: PartitionKey) -> BucketValue | None:
        """The partition's state, where it is kept (a steady one stays in the columns)."""
        state = self.side.get(key)
        if state is None:
            row = self.steady.row_of(key)
            return None if row is None else self.steady.state(row)
        return state

    def unpickled(self) -> int:
        return self.side.unpickled()

    def expiring(self, now_ms: int, stale_after_ms: int) -> list[PartitionKey]:
        """The keys :func:`streaming.detect.expire` may change now: the packed ones, and the rows gone silent."""
        return [*self.side, *self.steady.stale_candidates(now_ms, stale_after_ms)]

    def forget(self, keys: Iterable[PartitionKey]) -> list[PartitionKey]:
        """The partitions ``keys`` dropped from the table and its served columns, with the names only they used;
        returns those of them the driver held as candidates (:meth:`ServedColumns.forget`)."""
        keys = list(keys)
        for key in keys:
            del self[key]
        self.steady = self.steady.compacted().pruned()
        return self.served.forget(keys)

    def hear(self, clusters: Iterable[str], now_ms: int, keep_ms: int | None = None) -> None:
        """The clusters' partitions are sampled as of ``now_ms``; with ``keep_ms``, the clusters not heard of within
        it are dropped (a cluster no longer watched leaves no entry behind). :func:`streaming.detect.forget` asks
        whether a cluster was sampled within ``stale_after_ms``: an older word of it tells nothing."""
        for cluster in clusters:
            self.heard[cluster] = max(now_ms, self.heard.get(cluster, now_ms))
        if keep_ms is not None:
            self.heard = {cluster: at for cluster, at in self.heard.items() if now_ms - at <= keep_ms}

    def heard_within(self, clusters: Iterable[str], now_ms: int, within_ms: int) -> bool:
        """Whether every one of ``clusters`` was heard within ``within_ms`` of ``now_ms``."""
        return all(now_ms - self.heard.get(cluster, NO_SAMPLE) <= within_ms for cluster in clusters)

    def newest_received(self) -> dict[str, int]:
        """Per cluster, the newest time the bucket knows its partitions sampled: its partitions' states'
        ``received_ms``, and :attr:`heard`."""
        newest = self.steady.newest_received()
        for cluster, heard_ms in self.heard.items():
            newest[cluster] = max(newest.get(cluster, NO_SAMPLE), heard_ms)
        return newest_received((self.side.get(key) for key in self.side), newest)

    def settle(self, keys: Iterable[PartitionKey]) -> None:
        """The states of ``keys``, set since the table was loaded and each in :func:`steady_form`, moved into the
        columns now, as :meth:`fold` moves them at the end of a micro-batch: the rest of the micro-batch's samples
        of those partitions may then take the steady step."""
        states: dict[PartitionKey, PartitionState] = {}
        for key in keys:
            state = self.side.get(key)
            if not isinstance(state, PartitionState) or not steady_form(state):
                raise ValueError(f"{key} is not in a steady form: it cannot move into the columns")
            states[key] = state
            del self.side[key]
        self.steady.add(states)

    def fold(self) -> tuple[dict[PartitionKey, bytes], SteadyColumns]:
        """What the state store keeps: the states read or set that are steady moved back into the columns (the
        table holds the same states after it), every other one pickled."""
        live = self.side.live()
        steady = {key: state for key, state in live.items()
                  if isinstance(state, PartitionState) and steady_form(state)}
        self.steady.add(steady)  # they move: the columns hold them from now on, the packed part no longer
        for key in steady:
            del live[key]
        self.steady = self.steady.compacted()
        return self.side.packed(), self.steady


STATE_MAGIC = b"RPL"
"""The first bytes of a bucket value (:func:`pack`), before its format version (one byte)."""
STATE_VERSION = 5
"""The format :func:`pack` writes: the packed states (a map of pickled states), the steady columns (the names
they refer to, the pickled metas, the arrays at their narrowest integer type one after the other in the order of
:data:`streaming.steady.COLUMNS`), the served columns (their names, the arrays the same way in the order of
:data:`streaming.serving.SERVED_COLUMNS`, the run they were last sent to and how many times) and the clusters the
bucket heard of (:attr:`ColumnarTable.heard`), pickled together and LZ4-compressed (the size in 8 bytes, then
Arrow's LZ4 frame). Version 4: the same without the served columns of reassignments
(:data:`streaming.serving.ADDED_COLUMNS`: which partitions are reassigning, which replicas are being added); it
loads them false, and each partition's next metrics tell them. Version 3: the same without the clusters heard of
either; it loads with none (the read stage tells every bucket again within a micro-batch). Version 2: the same
without the served columns; it loads with none (a partition joins them with its next metrics; the bucket tells
the driver its candidates whole then, as to a new run). Version 1: the map of pickled states alone, the same way;
it loads with no steady columns either (a partition joins them when its next sample reaches it)."""
LEGACY_LZ4 = b"LZ4\x00"
"""The first bytes of a bucket value written before the format had a version: the same layout as version 1."""
_SIZE = 8


class StateVersionError(ReplmonError):
    """A bucket value in a format this replmon does not read (written by a newer one)."""


def _narrow(column: np.ndarray) -> np.ndarray:
    """An integer column in the smallest of int8/16/32/64 that holds its values (it is widened back on load)."""
    if column.dtype != np.int64 or not column.size:
        return column
    low, high = int(column.min()), int(column.max())
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return column.astype(dtype)
    return column


def pack(table: ColumnarTable | PackedTable | dict[PartitionKey, BucketValue]) -> bytes:
    """A bucket's table as the state store keeps it (format :data:`STATE_VERSION`). A bucket's value goes to the
    JVM and back in every micro-batch that reaches the bucket, whole, and a busy JVM moves ~200 MB/s of it
    (docs/benchmarks.md, "Streaming job"): it is compressed, and the columns are narrowed."""
    if not isinstance(table, ColumnarTable):
        table = ColumnarTable(table if isinstance(table, PackedTable) else PackedTable(live=dict(table)))
    packed, columns = table.fold()
    slots = _slots_in_use(columns.columns["brokers"])
    arrays = [_narrow(_first_slots(columns.columns[name], slots, name in SLOTTED_COLUMNS)) for name in COLUMNS]
    layout = (len(columns.metas), slots, "".join(a.dtype.char for a in arrays))
    served = table.served
    served_slots = _slots_in_use(served.columns["replica"])
    served_arrays = [_narrow(_first_slots(served.columns[name], served_slots, name in MATRIX_COLUMNS))
                     for name in SERVED_COLUMNS]
    served_layout = (len(served), served_slots, "".join(a.dtype.char for a in served_arrays))
    raw = pickle.dumps((packed, columns.names, columns.metas, layout, b"".join(a.tobytes() for a in arrays),
                        served.names, served_layout, b"".join(a.tobytes() for a in served_arrays), served.run,
                        served.sent, table.heard),
                       protocol=pickle.HIGHEST_PROTOCOL)
    return (STATE_MAGIC + bytes([STATE_VERSION]) + len(raw).to_bytes(_SIZE, "big")
            + pa.compress(raw, codec="lz4", asbytes=True))


def unpack(value: bytes | None) -> ColumnarTable:
    """The table :func:`pack` wrote, of any format version this replmon knows; also the formats from before the
    version: LZ4-compressed packed states (:data:`LEGACY_LZ4`), an uncompressed pickle of packed states, or of
    whole states. A version from a newer replmon is refused (:class:`StateVersionError`): read as another format,
    it would lose every partition's state."""
    if value is None:
        return ColumnarTable()
    if value.startswith(STATE_MAGIC):
        version = value[len(STATE_MAGIC)]
        if version not in (1, 2, 3, 4, STATE_VERSION):
            raise StateVersionError(f"a state bucket value of format version {version}: this replmon reads version "
                                    f"{STATE_VERSION} (and the formats before it); run the replmon that wrote the "
                                    "checkpoint, or a newer one")
        raw = _decompress(value[len(STATE_MAGIC) + 1:])
        if version >= 2:
            packed, names, metas, layout, data, *rest = pickle.loads(raw)
            served = None
            heard: dict[str, int] = {}
            if rest:
                served_names, served_layout, served_data, run, sent, *more = rest
                served = ServedColumns(served_names, _served_columns(served_layout, served_data, version), run,
                                       sent)
                if more:
                    (heard,) = more
            return ColumnarTable(PackedTable(packed), SteadyColumns(names, metas, _columns(
                layout, data, COLUMNS, _steady_widths(layout[1])), np.ones(len(metas), np.bool_)), served, heard)
        value = raw
    elif value.startswith(LEGACY_LZ4):
        value = _decompress(value[len(LEGACY_LZ4):])
    table = pickle.loads(value)
    if isinstance(next(iter(table.values()), b""), bytes):  # one format per table: its first value tells
        return ColumnarTable(PackedTable(table))
    return ColumnarTable(PackedTable(live=table))  # whole states, not their pickles


def _slots_in_use(replicas: np.ndarray) -> int:
    """How many replica slots a bucket's matrix (``replicas``: a broker id, -1 for none) uses: up to the last one
    any partition fills, at least one. A bucket's matrices are as wide as its widest partition's replicas; packed
    this wide, they shrink back when that partition narrows (a reassignment done, a bad sample corrected)."""
    used = np.flatnonzero((replicas >= 0).any(axis=0))
    return int(used[-1]) + 1 if len(used) else 1


def _first_slots(column: np.ndarray, slots: int, slotted: bool) -> np.ndarray:
    return column[:, :slots] if slotted and column.shape[1] > slots else column


def _steady_widths(slots: int) -> dict[str, int]:
    return {**dict.fromkeys(SLOTTED_COLUMNS, slots), "history_time_ms": LEO_HISTORY_LENGTH,
            "history_log_end_offset": LEO_HISTORY_LENGTH}


def _served_widths(slots: int) -> dict[str, int]:
    return dict.fromkeys(MATRIX_COLUMNS, slots)


def _served_columns(layout: tuple[int, int, str], data: bytes, version: int) -> dict[str, np.ndarray]:
    """The served columns :func:`pack` wrote in format ``version``; those the format lacks
    (:data:`streaming.serving.ADDED_COLUMNS`, before version 5), false."""
    if version >= 5:
        return _columns(layout, data, SERVED_COLUMNS, _served_widths(layout[1]))
    rows, slots, _dtypes = layout
    written = tuple(name for name in SERVED_COLUMNS if name not in ADDED_COLUMNS)
    columns = _columns(layout, data, written, _served_widths(slots))
    for name in ADDED_COLUMNS:
        columns[name] = np.zeros((rows, slots) if name in MATRIX_COLUMNS else rows, np.bool_)
    return {name: columns[name] for name in SERVED_COLUMNS}


def _columns(layout: tuple[int, int, str], data: bytes, names: tuple[str, ...], widths: dict[str, int]
             ) -> dict[str, np.ndarray]:
    """The arrays :func:`pack` wrote one after the other (``layout``: rows, broker slots, each one's dtype), named
    ``names``; ``widths``: the matrices' columns."""
    rows, _slots, dtypes = layout
    columns: dict[str, np.ndarray] = {}
    at = 0
    for name, char in zip(names, dtypes, strict=True):
        dtype = np.dtype(char)
        count = rows * widths.get(name, 1)
        column = np.frombuffer(data, dtype, count, at)
        at += count * dtype.itemsize
        if name in widths:
            column = column.reshape(rows, widths[name])
        columns[name] = column.astype(np.int64) if dtype.kind == "i" else column.copy()
    return columns


def _decompress(sized: bytes) -> bytes:
    size = int.from_bytes(sized[:_SIZE], "big")
    return pa.decompress(sized[_SIZE:], decompressed_size=size, codec="lz4", asbytes=True)
