"""Where each partition of a bucket's columns is: rows looked up by partition, many at once.

The steady columns (:mod:`streaming.steady`) and the served columns (:mod:`streaming.serving`) name a partition by
the codes of its cluster and topic in their list of names and by its partition number. Every micro-batch looks up
the row of each of its samples, and every load of a bucket would rebuild a dict of ``(cluster, topic, partition)``
tuples: a Python tuple and a hash per partition, the largest share of a steady bucket's cost after the arithmetic.
Here a partition's key is one integer, the rank of its (cluster code, topic code) pair among the columns' pairs in
the high 32 bits and the partition (Kafka's non-negative int32) in the low ones; the keys are sorted once, and a
lookup is a binary search over arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Ints = npt.NDArray[np.int64]

_LOW = 32
_PARTITIONS = 1 << 31
"""Kafka's partition numbers are non-negative int32s; a number outside them has no row."""


def _pairs(cluster_code: Ints, topic_code: Ints) -> Ints:
    return (cluster_code.astype(np.int64) << _LOW) | topic_code.astype(np.int64)


@dataclass(frozen=True)
class RowIndex:
    """The rows of some partitions, by key (immutable: columns that add rows build a new one)."""

    pairs: Ints
    """The (cluster code, topic code) pairs of the rows, each once, sorted (:func:`_pairs`)."""
    keys: Ints
    """Each row's key, sorted."""
    rows: Ints
    """The row of each key."""

    @classmethod
    def of(cls, cluster_code: Ints, topic_code: Ints, partition: Ints, rows: Ints) -> RowIndex:
        """The index of ``rows``, whose partitions are these (one row per partition)."""
        pairs, rank = np.unique(_pairs(cluster_code, topic_code), return_inverse=True)
        keys = (rank.astype(np.int64).reshape(-1) << _LOW) | partition.astype(np.int64)
        order = np.argsort(keys, kind="stable")
        return cls(pairs, keys[order], rows.astype(np.int64)[order])

    def find(self, cluster_code: Ints, topic_code: Ints, partition: Ints) -> Ints:
        """Each partition's row, -1 where it has none (a negative code is a name the columns do not hold)."""
        out = np.full(len(partition), -1, np.int64)
        if not len(self.keys) or not len(partition):
            return out
        pair = _pairs(cluster_code, topic_code)
        at = np.minimum(np.searchsorted(self.pairs, pair), len(self.pairs) - 1)
        known = ((self.pairs[at] == pair) & (cluster_code >= 0) & (topic_code >= 0) & (partition >= 0)
                 & (partition < _PARTITIONS))
        keys = (at.astype(np.int64) << _LOW) | np.where(known, partition, 0).astype(np.int64)
        k = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        hit = known & (self.keys[k] == keys)
        out[hit] = self.rows[k[hit]]
        return out

    def find_one(self, cluster_code: int, topic_code: int, partition: int) -> int:
        """:meth:`find` of one partition (numpy's scalar calls: the arrays' per call cost is the larger)."""
        if cluster_code < 0 or topic_code < 0 or not 0 <= partition < _PARTITIONS or not len(self.keys):
            return -1
        pair = (cluster_code << _LOW) | topic_code
        at = int(np.searchsorted(self.pairs, pair))
        if at == len(self.pairs) or int(self.pairs[at]) != pair:
            return -1
        key = (at << _LOW) | partition
        k = int(np.searchsorted(self.keys, key))
        return int(self.rows[k]) if k < len(self.keys) and int(self.keys[k]) == key else -1


def codes_of(names: pa.Array | pa.ChunkedArray, codes: dict[str, int]) -> Ints:
    """Each name's code in ``codes``, -1 for a name not there or none (each distinct name looked up once)."""
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks() if names.num_chunks else pa.array([], names.type)
    encoded = pc.dictionary_encode(names)
    lookup = np.array([codes.get(name, -1) if name is not None else -1
                       for name in encoded.dictionary.to_pylist()] + [-1], np.int64)
    indices = pc.fill_null(encoded.indices, len(lookup) - 1).to_numpy(zero_copy_only=False)
    return lookup[np.asarray(indices, np.int64)]


def pruned_names(names: list[str], codes: Sequence[Ints]) -> tuple[list[str], list[Ints]]:
    """The names some code of ``codes`` refers to, in their order, and ``codes`` numbered anew in them (-1, no name,
    stays -1): ``names`` itself when every name is used. A deleted topic's name leaves with its partitions."""
    used = np.unique(np.concatenate(codes)) if codes else np.zeros(0, np.int64)
    used = used[used >= 0]
    if len(used) == len(names):
        return names, list(codes)
    renumbered = np.full(len(names), -1, np.int64)
    renumbered[used] = np.arange(len(used))
    return ([names[code] for code in used.tolist()],
            [np.where(code >= 0, renumbered[np.maximum(code, 0)], -1) for code in codes])
