"""What the streaming job remembers about one partition between samples (thousands per state bucket, each as
the bytes of :func:`dump_state`).

A :class:`PartitionState` holds what moves with every sample (offsets, timers) and refers to a
:class:`PartitionMeta` for what changes seldom (identity, leader, ISR, lineage, the agents' readings, the
memory of reported conditions), so the common sample, where only offsets moved, copies a dozen fields.

Treat both and everything they hold as immutable: :mod:`streaming.detect` copies a record with ``copy()`` and
replaces whole containers (dicts, tuples), it never changes one in place. So a state and its successor may
share containers, and a replayed step starts from an untouched ``prev``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, NamedTuple

NO_SAMPLE = -1
"""``sample_time_ms``/``cycle``/``received_ms`` of a state that has seen no PartitionSample yet."""

Lineage = tuple[tuple[int, int], ...]
"""A leader-epoch-checkpoint: ``(leader_epoch, start_offset)`` pairs in epoch order."""


class ReplicaLog(NamedTuple):
    """What the log-dir agent last found on disk for one replica."""

    sample_time_ms: int
    cycle: int
    log_end_offset: int
    high_watermark_checkpoint: int | None
    last_batch_leader_epoch: int | None
    epoch_lineage: Lineage


class ElectionBasis(NamedTuple):
    """The partition as last seen online: a later election is judged clean or unclean against it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None


class ElectionLoss(NamedTuple):
    """The loss accounting of the partition's last leader change: what the old leader epochs had committed
    against where the new leader's log leaves them.

    ``committed_end`` (C) is the highest offset known committed in the old epochs (exclusive end): sampled high
    watermarks, replicas' HW checkpoints on disk, and the old leader's log end offset while the ISR was that leader
    alone. ``divergence`` (D) is where the new leader's log leaves the old epochs (its lineage's end offset for
    them), None until that lineage is known. The committed messages lost are ``max(0, C - D)``, whatever producers
    write after the election; ``reported`` is how many of them events have reported so far."""

    previous_leader: int
    previous_leader_epoch: int
    leader_alone: bool
    """The old epochs' last known ISR was the old leader alone: everything it appended was committed."""
    committed_end: int | None
    divergence: int | None
    reported: int


@dataclass(slots=True)
class PartitionMeta:
    cluster: str
    topic: str
    partition: int
    topic_id: str | None = None

    leader: int = -1
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    elr: tuple[int, ...] | None = None
    min_insync_replicas: int | None = None
    """The last value the sampler reported (it re-reads topic configs only every few cycles)."""

    # Conditions whose start was reported (edge-triggered events).
    offline: bool = False
    under_min_isr: bool = False
    epoch_regressed_to: int | None = None
    before_offline: ElectionBasis | None = None

    isr_changes: tuple[tuple[int, int], ...] = ()
    """``(sample_time_ms, broker)`` of recent ISR shrinks and expands, for ISR_FLAPPING."""
    flapping_reported_ms: int | None = None

    epoch_lineage: Lineage | None = None
    """The leader's lineage as last fetched by the sampler, and the leader epoch of that sample."""
    lineage_leader_epoch: int = -1
    replica_logs: dict[int, ReplicaLog] = field(default_factory=dict)
    """Broker -> the log-dir agent's newest reading of its replica (also while the broker is down)."""
    diverged: dict[int, int] = field(default_factory=dict)
    """Broker -> first diverging offset of the EPOCH_DIVERGENCE reported for it (cleared when it agrees)."""
    loss: ElectionLoss | None = None
    """The loss accounting of the last leader change (replaced by the next one)."""
    unclean_leader_election: bool | None = None
    """The topic's unclean.leader.election.enable as the sampler last reported it."""
    metadata_offset: int = -1
    """The metadata-log offset of the last partition change applied (every agent publishes the same records: each is
    applied once)."""
    metadata_time_ms: int = -1
    """The controller's time of the newest partition change applied: samples taken before it (or just after, while
    the brokers' metadata catches up) tell nothing new of the leader and ISR."""
    last_known_elr: tuple[int, ...] | None = None
    """KIP-966's last known ELR: the replicas last in the ELR before it emptied (None when not reported)."""
    earlier_committed_ends: tuple[tuple[int, int | None], ...] = ()
    """``(previous leader epoch, committed end)`` of the leader changes before the last one (:attr:`loss`), oldest
    first, at most ``EARLIER_LOSSES``: what each ended epoch had committed, for a replica that diverges in one of
    them (a broker down through several elections)."""
    uncommitted_counted: tuple[tuple[int, int], ...] = ()
    """``(previous leader epoch, offset)`` per leader change (those :attr:`loss` and
    :attr:`earlier_committed_ends` remember): the end of the never-committed tail of that change's old epochs
    counted so far. Every replica's tail of one change starts where the new leader's log leaves the old epochs or
    at their committed end, whichever is higher, so the union of the tails reported is ``[start, offset)``."""
    adding_replicas: tuple[int, ...] = ()
    """The replicas a reassignment in flight is adding (among :attr:`replicas`): not counted in the replication
    factor, as Kafka counts it (its UnderReplicatedPartitions)."""
    removing_replicas: tuple[int, ...] = ()
    """The replicas a reassignment in flight will remove."""

    def copy(self) -> PartitionMeta:
        """A shallow copy (containers shared: replace them, never mutate them)."""
        return PartitionMeta(*_meta_fields(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartitionMeta, _meta_fields(self))  # positional: no field names in every pickled state


@dataclass(slots=True)
class PartitionState:
    meta: PartitionMeta

    # The newest accepted PartitionSample, on the collector's clock, and when the job received it.
    sample_time_ms: int = NO_SAMPLE
    cycle: int = NO_SAMPLE
    received_ms: int = NO_SAMPLE

    high_watermark: int | None = None
    """The last high watermark a leader answered (samples without one keep it)."""
    log_start_offset: int | None = None
    log_end_offsets: dict[int, int] = field(default_factory=dict)
    """Broker -> its replica's LEO in the newest sample; brokers that did not answer are missing."""
    last_log_end_offsets: dict[int, int] = field(default_factory=dict)
    """Broker -> the last LEO the sampler read from it: the baseline for LOG_TRUNCATION."""

    hw_stuck_since_ms: int | None = None
    """Sample time since which the high watermark has stayed at ``high_watermark``, below the leader's LEO."""
    hw_stuck_log_end_offset: int | None = None
    """The leader's LEO at ``hw_stuck_since_ms``."""
    hw_stalled: bool = False
    stale: bool = False
    committed_end: int | None = None
    """The highest offset known committed in the current leader epoch's log (exclusive): sampled high
    watermarks, HW checkpoints, the leader's log end offset while the ISR is the leader alone. A leader change
    moves it into :attr:`PartitionMeta.loss`."""
    leader_log_end_history: tuple[tuple[int, int], ...] = ()
    """``(sample_time_ms, the leader's LEO)`` of past samples, oldest first, at least ``LEO_HISTORY_STEP_MS``
    apart, at most ``LEO_HISTORY_LENGTH``: when the leader's log reached an offset, for the followers' time lag
    (reset by a leader change)."""

    @classmethod
    def new(cls, cluster: str, topic: str, partition: int, topic_id: str | None = None) -> PartitionState:
        return cls(PartitionMeta(cluster, topic, partition, topic_id))

    def copy(self) -> PartitionState:
        """A shallow copy (``meta`` and containers shared: replace them, never mutate them)."""
        return PartitionState(*_state_fields(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartitionState, _state_fields(self))


_meta_fields = attrgetter(*(f.name for f in fields(PartitionMeta)))
_state_fields = attrgetter(*(f.name for f in fields(PartitionState)))

PartitionKey = tuple[str, str, int]
"""``(cluster, topic, partition)``: a partition's key in a state bucket, and the identity of its state."""

BROKERS_TOPIC = ""
"""The topic of the one state key per cluster that holds its brokers, not a partition (``(cluster, "", -1)``:
Kafka forbids an empty topic name)."""


@dataclass(slots=True)
class BrokerRegistry:
    """A cluster's brokers as the metadata log's broker records left them (:class:`BrokerChange` records)."""

    metadata_offset: int = -1
    """The metadata-log offset of the last broker change applied: every agent publishes the same records, each is
    applied once."""
    fenced: dict[int, bool] = field(default_factory=dict)
    """Registered broker -> fenced."""


def brokers_key(cluster: str) -> PartitionKey:
    return (cluster, BROKERS_TOPIC, -1)


BucketValue = PartitionState | BrokerRegistry
"""What a state bucket keeps under a key: a partition's state, or (under :func:`brokers_key`) its cluster's
brokers."""

_IDENTITY = ("cluster", "topic", "partition")
assert tuple(f.name for f in fields(PartitionMeta)[:3]) == _IDENTITY
_meta_rest = attrgetter(*(f.name for f in fields(PartitionMeta)[3:]))
_state_rest = attrgetter(*(f.name for f in fields(PartitionState)[1:]))
_LOSS = [f.name for f in fields(PartitionMeta)[3:]].index("loss")


def _meta_values(meta: PartitionMeta) -> tuple[Any, ...]:
    """A meta's fields after its identity, the ElectionLoss as a plain tuple."""
    values = _meta_rest(meta)
    if meta.loss is not None:
        values = (*values[:_LOSS], tuple(meta.loss), *values[_LOSS + 1 :])
    return values


def _meta_of(key: PartitionKey, values: tuple[Any, ...]) -> PartitionMeta:
    if len(values) > _LOSS and values[_LOSS] is not None:
        values = (*values[:_LOSS], ElectionLoss(*values[_LOSS]), *values[_LOSS + 1 :])
    return PartitionMeta(*key, *values)


def dump_meta(meta: PartitionMeta) -> bytes:
    """A meta alone, as :func:`dump_state` writes it inside a state (the steady columns keep it this way)."""
    return pickle.dumps(_meta_values(meta), protocol=pickle.HIGHEST_PROTOCOL)


def load_meta(key: PartitionKey, data: bytes) -> PartitionMeta:
    return _meta_of(key, pickle.loads(data))


def dump_state(state: BucketValue) -> bytes:
    """A state as its state bucket stores it: the two records' field values as tuples (no class names; the rare
    ElectionBasis and ReplicaLog inside keep theirs; the ElectionLoss every partition that changed leader holds
    goes as a plain tuple), without the identity the bucket's key holds. 151 bytes for
    a steady RF 3 partition, against 234 for the pickled objects.

    Positional: a field added to PartitionMeta or PartitionState goes at the end, with a default, and states
    written before it still load. A :class:`BrokerRegistry` goes as its two fields."""
    if isinstance(state, BrokerRegistry):
        return pickle.dumps((state.metadata_offset, state.fenced), protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps((_meta_values(state.meta), _state_rest(state)), protocol=pickle.HIGHEST_PROTOCOL)


def load_state(key: PartitionKey, data: bytes) -> BucketValue:
    """The state :func:`dump_state` wrote for ``key``; also a pickled PartitionState (the format before it)."""
    value = pickle.loads(data)
    if key[1] == BROKERS_TOPIC:
        return BrokerRegistry(*value)
    if isinstance(value, PartitionState):
        return value
    meta, rest = value
    return PartitionState(_meta_of(key, meta), *rest)
