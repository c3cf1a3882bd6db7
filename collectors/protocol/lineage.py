"""The leader's epoch lineage (epoch -> start offset), derived from OffsetsForLeaderEpoch answers. Pure.

What a leader answers for a requested epoch ``q`` (LeaderEpochFileCache.endOffsetFor): with ``E1 < ... < En`` the
epochs in its cache and ``S1 < ... < Sn`` their start offsets (strictly increasing: Kafka drops an entry whose
start offset a newer epoch reuses),

- ``q == En``: ``(En, log end offset)``;
- ``Ek <= q < Ek+1``: ``(Ek, Sk+1)``: the largest epoch at or below ``q`` and the start of the next one;
- ``q < E1``: ``(q, S1)``;
- ``q > En``: ``(-1, -1)``.

So asking ``E - 1`` yields the start offset of epoch ``E`` and the epoch before it: a walk from the current
leader epoch downwards, one question per step. It stops early where it meets an entry the lineage already held
(same epoch, same start offset): below such an entry two logs are identical (leader epochs' log matching), so the
rest is kept. Epoch 0 cannot be asked about (``q = -1`` is "undefined"); its start offset is the log start offset
(the first entry of a cache is truncated to the log start offset as the log start moves).

The sampler takes one step per partition and cycle (one OffsetsForLeaderEpoch request per leader), so the cost per
cycle stays constant; after a leader change the walk usually ends after two steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from replmon.contracts.samples import EpochEntry

UNDEFINED_EPOCH = -1
MAX_LINEAGE_DEPTH = 64
"""Entries a walk collects at most (a leader-epoch-checkpoint rarely holds more than a handful)."""


def clip_to_log_start(lineage: list[EpochEntry], log_start_offset: int | None) -> list[EpochEntry]:
    """Drop the entries wholly below the log start offset and raise the first kept entry's start offset to it,
    as Kafka's cache does when the log start moves (``truncateFromStart``)."""
    if not lineage or log_start_offset is None:
        return lineage
    keep_from = 0
    for i in range(1, len(lineage)):
        if lineage[i].start_offset <= log_start_offset:
            keep_from = i
    kept = lineage[keep_from:]
    first = kept[0]
    if first.start_offset < log_start_offset:
        kept = [EpochEntry(leader_epoch=first.leader_epoch, start_offset=log_start_offset), *kept[1:]]
    return kept


@dataclass
class Walk:
    """A walk down one leader's lineage. ``query`` is the epoch to ask about next; its answer's end offset is
    the start offset of ``resolving``."""

    leader: int
    leader_epoch: int
    resolving: int
    query: int
    found: list[EpochEntry] = field(default_factory=list)
    """Entries established so far, newest first."""
    ambiguous: bool = False
    """The last answer echoed the queried epoch: it either exists or lies below the first epoch."""

    @classmethod
    def start(cls, leader: int, leader_epoch: int) -> Walk:
        return cls(leader=leader, leader_epoch=leader_epoch, resolving=leader_epoch, query=leader_epoch - 1)


@dataclass(frozen=True)
class Step:
    """The outcome of one answer: either the next question (``walk``) or the finished lineage (oldest first)."""

    walk: Walk | None = None
    lineage: list[EpochEntry] | None = None
    failed: str | None = None


def _finish(found: list[EpochEntry], below: list[EpochEntry]) -> Step:
    return Step(lineage=[*below, *reversed(found)])


def first_step(walk: Walk, known: list[EpochEntry] | None, log_start_offset: int | None) -> Step | None:
    """Steps that need no question: epoch 0 (its start is the log start offset). None: ask ``walk.query``."""
    if walk.query < 0:
        if log_start_offset is None:
            return Step(failed="log start offset unknown")
        return _finish([*walk.found, EpochEntry(leader_epoch=walk.resolving, start_offset=log_start_offset)], [])
    return None


def advance(walk: Walk, answer_epoch: int, end_offset: int, known: list[EpochEntry] | None,
            log_start_offset: int | None) -> Step:
    """Take the leader's answer ``(answer_epoch, end_offset)`` to ``walk.query``."""
    q = walk.query
    if answer_epoch == UNDEFINED_EPOCH or end_offset < 0 or answer_epoch > q:
        return Step(failed=f"leader answered ({answer_epoch}, {end_offset}) for epoch {q}")
    found = list(walk.found)
    if walk.ambiguous:
        above = found[-1].start_offset
        if end_offset >= above:
            # ``resolving`` is not in the cache: the entry above it is the first epoch.
            return _finish(found, [])
    found.append(EpochEntry(leader_epoch=walk.resolving, start_offset=end_offset))
    if len(found) >= MAX_LINEAGE_DEPTH:
        return _finish(found, [])
    if known:
        newest = found[-1]
        for i, entry in enumerate(known):
            if entry == newest:
                return _finish(found[:-1], known[: i + 1])
    ambiguous = answer_epoch == q
    resolving = answer_epoch
    nxt = Walk(leader=walk.leader, leader_epoch=walk.leader_epoch, resolving=resolving, query=resolving - 1,
               found=found, ambiguous=ambiguous)
    if nxt.query < 0:
        return _epoch_zero(nxt, log_start_offset)
    return Step(walk=nxt)


def _epoch_zero(walk: Walk, log_start_offset: int | None) -> Step:
    """``resolving`` is 0 and cannot be asked about: it starts at the log start offset, if it exists at all
    (when the answer was ambiguous, epoch 0 exists only if the log starts below the next epoch's start)."""
    if log_start_offset is None:
        return Step(failed="log start offset unknown")
    above = walk.found[-1].start_offset
    if walk.ambiguous and log_start_offset >= above:
        return _finish(walk.found, [])
    return _finish([*walk.found, EpochEntry(leader_epoch=0, start_offset=min(log_start_offset, above))], [])


TopicPartition = tuple[str, int]


@dataclass
class Known:
    leader_epoch: int
    lineage: list[EpochEntry]


class LineageBook:
    """Per partition: the leader lineage as last established, and the walks in progress (the sampler's memory
    across cycles). Plans one question per walking partition and cycle; takes the answers."""

    def __init__(self) -> None:
        self.known: dict[TopicPartition, Known] = {}
        self.walks: dict[TopicPartition, Walk] = {}

    def plan(self, leaders: dict[TopicPartition, tuple[int, int]], full_refresh: bool) -> dict[TopicPartition, Walk]:
        """``leaders``: partition -> (leader, leader epoch) of partitions with a leader. Starts walks where the
        epoch changed (or all, on a full refresh) and returns the questions to ask this cycle (partition ->
        walk); walks that need no question are finished by :meth:`settle`."""
        for tp in [tp for tp in self.known if tp not in leaders]:
            del self.known[tp]
        for tp in [tp for tp in self.walks if tp not in leaders]:
            del self.walks[tp]
        ask: dict[TopicPartition, Walk] = {}
        for tp, (leader, epoch) in leaders.items():
            walk = self.walks.get(tp)
            if walk is not None and (walk.leader, walk.leader_epoch) != (leader, epoch):
                walk = None
            if walk is None:
                known = self.known.get(tp)
                if not full_refresh and known is not None and known.leader_epoch == epoch:
                    continue
                walk = Walk.start(leader, epoch)
                self.walks[tp] = walk
            if walk.query >= 0:
                ask[tp] = walk
        return ask

    def settle(self, log_starts: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, list[EpochEntry]]:
        """Finish the walks that need no question (leader epoch 0: it starts at the log start offset)."""
        done = {}
        for tp, walk in list(self.walks.items()):
            if walk.query >= 0:
                continue
            step = first_step(walk, self._known(tp), log_starts.get(tp))
            if step is None or step.lineage is None:
                continue  # log start unknown this cycle: try again next cycle
            del self.walks[tp]
            done[tp] = self._store(tp, walk.leader_epoch, step.lineage)
        return done

    def answer(self, tp: TopicPartition, answer_epoch: int, end_offset: int,
               log_start_offset: int | None) -> list[EpochEntry] | None:
        """Take the answer to this cycle's question for ``tp``; the lineage when the walk finished."""
        walk = self.walks.get(tp)
        if walk is None:
            return None
        step = advance(walk, answer_epoch, end_offset, self._known(tp), log_start_offset)
        if step.walk is not None:
            self.walks[tp] = step.walk
            return None
        del self.walks[tp]
        if step.lineage is None:
            return None  # failed: a new walk starts with the next refresh or epoch change
        return self._store(tp, walk.leader_epoch, step.lineage)

    def abandon(self, tp: TopicPartition) -> None:
        """The leader refused the question (fenced or unknown epoch): start over when the epoch settles."""
        self.walks.pop(tp, None)

    def _known(self, tp: TopicPartition) -> list[EpochEntry] | None:
        known = self.known.get(tp)
        return known.lineage if known else None

    def _store(self, tp: TopicPartition, epoch: int, lineage: list[EpochEntry]) -> list[EpochEntry]:
        self.known[tp] = Known(leader_epoch=epoch, lineage=lineage)
        return lineage
