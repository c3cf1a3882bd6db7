"""The detection logic of the streaming job: pure functions from (state, sample) to (state, events, metrics).

No Spark and no I/O here. The Spark job keeps one :class:`~streaming.state.PartitionState` per partition and
calls :func:`step` for every PartitionSample, :func:`step_replica` for every ReplicaSample of the log-dir
agents, :func:`step_partition_change` for every record of the KRaft metadata log an agent read, and
:func:`expire` for partitions that got no sample in a micro-batch, and :func:`forget` for those that left the
cluster's samples for good.

The leader and ISR come from two sources. The metadata log, where an agent reads it, is the controller's own
history: every change, at the controller's time, also those between two samples. The samples show the partition
as of their cycle; a sample taken before the newest change the metadata log told (or within
:data:`METADATA_PROPAGATION_MS` after it) is not judged for leader and ISR, and a change the samples showed first
makes no second event when its record arrives. Without an agent the samples are all there is.

Samples come as the pydantic models of :mod:`replmon.contracts.samples` or, on the hot path, as plain dicts with the
same field names holding Python ints/strs/lists/None (``replica_offsets`` a list of dicts ``{broker_id,
log_end_offset, error}``, ``epoch_lineage`` a list of dicts ``{leader_epoch, start_offset}`` or None).

Samples of one partition are ordered by ``(sample_time_ms, cycle)``: one that is not newer than the state is a
duplicate or arrived out of order and is ignored, so replaying a micro-batch emits nothing twice. Event ids
derive from the triggering sample, never from the clock, so a replay that does emit yields the same ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

from replmon.contracts.events import Event, EventSource, EventType, Severity, event_id
from replmon.contracts.samples import (
    BrokerChange,
    LeaderRecoveryState,
    PartitionChange,
    PartitionSample,
    ReplicaSample,
)
from replmon.core.config import StreamConfig
from streaming.state import (
    BROKERS_TOPIC,
    NO_SAMPLE,
    BrokerRegistry,
    ElectionBasis,
    ElectionLoss,
    Lineage,
    PartitionMeta,
    PartitionState,
    ReplicaLog,
)

__all__ = [
    "DetectConfig",
    "Health",
    "PartitionMetrics",
    "PartitionState",
    "expire",
    "forget",
    "metrics_of",
    "step",
    "step_broker_change",
    "step_dict",
    "step_partition_change",
    "step_replica",
    "step_state",
]


STREAM_DEFAULTS = StreamConfig.model_construct()
"""The job's settings as the configuration's defaults give them: the detection's defaults."""


@dataclass(frozen=True, slots=True)
class DetectConfig:
    """The settings of the detection (``stream.*`` in milliseconds: :meth:`from_stream_config`), by default the
    configuration's defaults."""

    stale_after_ms: int = round(STREAM_DEFAULTS.stale_after_s * 1000)
    hw_stalled_after_ms: int = round(STREAM_DEFAULTS.hw_stalled_after_s * 1000)
    flapping_window_ms: int = round(STREAM_DEFAULTS.flapping_window_s * 1000)
    flapping_threshold: int = STREAM_DEFAULTS.flapping_threshold
    """ISR_FLAPPING when more than this many ISR shrinks + expands fall within ``flapping_window_ms``."""
    forget_after_ms: int = round(STREAM_DEFAULTS.forget_after() * 1000)
    """A partition with no sample for this long while its cluster's samples keep coming is forgotten
    (:func:`forget`); 0: never."""

    @classmethod
    def from_stream_config(cls, stream: StreamConfig) -> DetectConfig:
        return cls(
            stale_after_ms=round(stream.stale_after_s * 1000),
            hw_stalled_after_ms=round(stream.hw_stalled_after_s * 1000),
            flapping_window_ms=round(stream.flapping_window_s * 1000),
            flapping_threshold=stream.flapping_threshold,
            forget_after_ms=round(stream.forget_after() * 1000),
        )


class Health(IntEnum):
    """Rank for the per-partition series budget: sort ascending, unhealthy first."""

    OFFLINE = 0
    UNDER_MIN_ISR = 1
    UNDER_REPLICATED = 2
    AT_MIN_ISR = 3
    LAGGING = 4
    HEALTHY = 5


class PartitionMetrics(NamedTuple):
    """Derived from a partition's newest sample: the job's per-partition output row, defined here once (its Spark
    schema, :data:`streaming.processor.OUTPUT_SCHEMA`, and the row, :func:`streaming.processor.partition_row`,
    derive from these fields, in this order). Lags are in messages and clamped at 0: HW and LEOs come from
    different requests, so a little skew between them is normal."""

    cluster: str
    topic: str
    partition: int
    sample_time_ms: int
    leader: int
    leader_epoch: int
    replica_count: int
    isr_size: int
    min_insync_replicas: int | None
    offline: bool
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    high_watermark: int | None
    log_end_offset: int | None
    """The leader's LEO."""
    log_start_offset: int | None
    hw_lag: int | None
    """max(0, leader LEO - HW); None when either is unknown."""
    max_follower_lag: int | None
    """The largest of the followers' lags, the replicas a reassignment in flight is adding left out (they copy the
    log from its start: their lag is the copy's progress, not a follower falling behind); None when none is
    known."""
    health: Health
    """The partition's rank for the series budget: its worst condition; LAGGING by the HW lag and
    :attr:`max_follower_lag`, so a reassignment's copy alone leaves a partition HEALTHY."""
    follower_lag: dict[int, int | None]
    """Follower broker -> max(0, leader LEO - its LEO); for a follower that did not answer, its last LEO read (a
    dead or paused follower's lag keeps growing as the leader appends); None when either was never read. A replica
    being added is here too (its copy's progress)."""
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    hw_stalled: bool
    stale: bool
    elr: tuple[int, ...]
    """Eligible leader replicas (KIP-966); empty when none or not reported."""
    last_known_elr: tuple[int, ...]
    """The last known ELR (KIP-966); empty when none or not reported."""
    follower_time_lag_ms: dict[int, int | None]
    """Follower broker -> how long ago the leader's log ended where the follower's ends now (interpolated between
    samples of the leader's LEO): Kafka drops a follower from the ISR when it has not caught up for
    replica.lag.time.max.ms. 0 when caught up; for a follower behind everything remembered, the age of the oldest
    reading (a lower bound); None when either LEO was never read."""
    adding_replicas: tuple[int, ...]
    """The replicas a reassignment in flight is adding (Kafka's ListPartitionReassignments, or the metadata log's
    records): they copy the log and are left out of :attr:`max_follower_lag` and the health. Empty when none, or
    when the samples do not tell (refused, an older collector)."""
    reassigning: bool
    """A reassignment of the partition is in flight: it has replicas being added or removed."""


# ----------------------------------------------------------------------------------------------------------
# Public entry points


def step(
    prev: PartitionState | None,
    sample: PartitionSample | Mapping[str, Any],
    cfg: DetectConfig,
    now_ms: int | None = None,
) -> tuple[PartitionState, list[Event], PartitionMetrics]:
    """Apply one PartitionSample. ``now_ms`` is the job's clock (staleness, ``detected_time_ms``); it
    defaults to the sample time. An ignored (duplicate or out-of-order) sample returns ``prev`` itself."""
    if isinstance(sample, PartitionSample):
        sample = sample.model_dump()
    return step_dict(prev, sample, cfg, now_ms)


def step_dict(
    prev: PartitionState | None, s: Mapping[str, Any], cfg: DetectConfig, now_ms: int | None = None
) -> tuple[PartitionState, list[Event], PartitionMetrics]:
    """:func:`step` for a sample given as a dict."""
    state, events = step_state(prev, s, cfg, now_ms)
    return state, events, metrics_of(state)


def step_state(
    prev: PartitionState | None, s: Mapping[str, Any], cfg: DetectConfig, now_ms: int | None = None
) -> tuple[PartitionState, list[Event]]:
    """:func:`step_dict` without the metrics (the hot path: a partition stepped several times in a micro-batch
    shows the metrics of its last state only)."""
    t: int = s["sample_time_ms"]
    cycle: int = s["cycle"]
    if prev is not None and (t < prev.sample_time_ms or (t == prev.sample_time_ms and cycle <= prev.cycle)):
        return prev, []
    topic_id = s.get("topic_id")
    if prev is None or (topic_id is not None and prev.meta.topic_id not in (None, topic_id)):
        prev = PartitionState.new(s["cluster"], s["topic"], s["partition"], topic_id)  # new or recreated
    pm = prev.meta
    st = prev.copy()
    out = _Emitter(pm, t, cycle, t if now_ms is None else now_ms)

    leos, unread = _read_log_end_offsets(s["replica_offsets"])
    st.log_end_offsets = leos
    if unread or len(leos) != len(prev.last_log_end_offsets):
        st.last_log_end_offsets = {**prev.last_log_end_offsets, **leos}
    else:
        st.last_log_end_offsets = leos  # every replica answered: no older reading to keep

    # The metadata log told the leader and ISR as of a change after this sample was taken (or just before it,
    # while brokers' metadata caches catch up with the controller): the sample's view of them is older.
    told = pm.metadata_offset >= 0 and t < pm.metadata_time_ms + METADATA_PROPAGATION_MS
    if told:
        _apply_topic_configs(prev, st, s, out)
    elif (
        s["leader"] != pm.leader
        or s["leader_epoch"] != pm.leader_epoch
        or tuple(s["isr"]) != pm.isr
        or tuple(s["replicas"]) != pm.replicas
        or _opt_tuple(s.get("elr")) != pm.elr
        or _opt_tuple(s.get("last_known_elr")) != pm.last_known_elr
        or s.get("min_insync_replicas") not in (None, pm.min_insync_replicas)
        or s.get("unclean_leader_election") not in (None, pm.unclean_leader_election)
        or _reassignment_told(s) not in (None, (pm.adding_replicas, pm.removing_replicas))
        or pm.epoch_regressed_to is not None
        or prev.sample_time_ms == NO_SAMPLE
    ):
        _apply_metadata(prev, st, s, cfg, out)
    _check_log_truncation(prev, st, out)
    lineage = s.get("epoch_lineage")
    hw = s.get("high_watermark")
    if told and s["leader_epoch"] < st.meta.leader_epoch:
        # answered by the leader of an epoch the metadata log has already ended: its high watermark is evidence
        # of what that epoch committed, not of the current one
        _note_late_commit(prev, st, s, hw, out)
    else:
        _apply_high_watermark(prev, st, hw, lineage is not None, out)
        _check_hw_stalled(prev, st, cfg, out)
        if lineage is not None:
            _apply_leader_lineage(st, lineage, out)
        _note_sampled_commit(st, hw)
    log_start_offset = s.get("log_start_offset")
    if log_start_offset is not None:
        st.log_start_offset = log_start_offset
    if st.meta.loss is not None and st.meta.loss.divergence is None:
        _settle_loss(st, out)  # a sample changes a settled loss only by the lineage that settles it

    st.leader_log_end_history = _remember_leader_log_end(st, t)
    st.sample_time_ms = t
    st.cycle = cycle
    st.received_ms = out.detected_ms
    st.stale = False
    return st, out.events


METADATA_PROPAGATION_MS = 1_000
"""How long after a change the controller recorded a sample may still show the partition as before it: brokers
apply metadata records a moment after the controller appends them, and the collectors' and the controller's
clocks may differ by that much."""


def step_partition_change(
    prev: PartitionState | None,
    change: PartitionChange | Mapping[str, Any],
    cfg: DetectConfig,
    now_ms: int | None = None,
) -> tuple[PartitionState | None, list[Event]]:
    """Apply one record of the KRaft metadata log (a :class:`PartitionChange`, as a log-dir agent read it): ISR and
    leader changes at the controller's time, elections judged by what the controller recorded (the ISR and ELR
    before the record, and the leader recovery state an unclean election sets).

    Each metadata offset is applied once (every agent publishes the same records); a change the samples have
    already shown makes no second event; a record of an older leader epoch than the state's is only noted. A
    partition never sampled is not watched here (the collector's topic selection decides): ignored."""
    c: Mapping[str, Any] = change.model_dump() if isinstance(change, PartitionChange) else change
    if prev is None or prev.sample_time_ms == NO_SAMPLE:
        return prev, []
    pm = prev.meta
    offset: int = c["metadata_offset"]
    if offset <= pm.metadata_offset or c["topic_id"] != (pm.topic_id or c["topic_id"]):
        return prev, []
    t: int = c["append_time_ms"]
    st = prev.copy()
    out = _Emitter(pm, t, offset, t if now_ms is None else now_ms, source="metadata", origin=EventSource.METADATA_LOG)
    elr = c["elr"]
    if c["leader_epoch"] >= pm.leader_epoch and (
        c["leader"] != pm.leader
        or c["leader_epoch"] != pm.leader_epoch
        or tuple(c["isr"]) != pm.isr
        or tuple(c["replicas"]) != pm.replicas
        or (tuple(elr) != pm.elr and (pm.elr is not None or elr))
        or tuple(c["last_known_elr"]) != (pm.last_known_elr or ())
        or _reassignment_told(c) not in (None, (pm.adding_replicas, pm.removing_replicas))
    ):
        s = {"leader": c["leader"], "leader_epoch": c["leader_epoch"], "replicas": c["replicas"], "isr": c["isr"],
             "elr": elr if pm.elr is not None or elr else None, "last_known_elr": c["last_known_elr"],
             "adding_replicas": c.get("adding_replicas"), "removing_replicas": c.get("removing_replicas")}
        previous_isr = c.get("previous_isr")
        judge = None if previous_isr is None else Judgement(
            tuple(previous_isr), tuple(c.get("previous_elr") or ()), tuple(c.get("previous_last_known_elr") or ()),
            c["leader_recovery_state"] == LeaderRecoveryState.RECOVERING)
        _apply_metadata(prev, st, s, cfg, out, judge)
    m = st.meta = st.meta.copy() if st.meta is pm else st.meta
    m.metadata_offset = offset
    m.metadata_time_ms = max(pm.metadata_time_ms, t)
    return st, out.events


def step_broker_change(
    prev: BrokerRegistry | None, change: BrokerChange | Mapping[str, Any], now_ms: int | None = None,
) -> tuple[BrokerRegistry, list[Event]]:
    """Apply one broker record of the KRaft metadata log (a :class:`BrokerChange`, as a log-dir agent read it):
    BROKER_FENCED when a registered broker that was not fenced is fenced (or unregistered, or registered again by
    a restarted process, fenced until it catches up), BROKER_UNFENCED when one is unfenced, at the controller's
    time. Each metadata offset is applied once (every agent publishes the same records)."""
    c: Mapping[str, Any] = change.model_dump() if isinstance(change, BrokerChange) else change
    registry = prev if prev is not None else BrokerRegistry()
    offset: int = c["metadata_offset"]
    if offset <= registry.metadata_offset:
        return registry, []
    broker: int = c["broker"]
    fenced = dict(registry.fenced)
    if c["registered"]:
        fenced[broker] = c["fenced"]
    else:
        fenced.pop(broker, None)
    new = BrokerRegistry(offset, fenced)
    was: bool | None = c["previous_fenced"]
    cluster: str = c["cluster"]
    t: int = c["append_time_ms"]
    planned = bool(c["previous_in_controlled_shutdown"])
    if was is False and c["fenced"]:
        etype = EventType.BROKER_FENCED
        severity = Severity.INFO if planned else Severity.WARNING
        why = ("unregistered" if not c["registered"] else
               "registered again (its process restarted)" if c["record_type"] == "RegisterBrokerRecord" else
               "after its controlled shutdown" if planned else "its heartbeats stopped")
        message = f"{cluster}: broker {broker} fenced ({why})"
    elif was is not False and c["registered"] and not c["fenced"]:
        etype, severity = EventType.BROKER_UNFENCED, Severity.INFO
        message = f"{cluster}: broker {broker} unfenced (epoch {c['broker_epoch']})"
    else:
        return new, []
    return new, [Event(
        event_id=event_id(cluster, BROKERS_TOPIC, broker, etype, "metadata", t, offset), type=etype,
        severity=severity, cluster=cluster, event_time_ms=t, detected_time_ms=t if now_ms is None else now_ms,
        source=EventSource.METADATA_LOG, brokers=[broker], message=message)]


def step_replica(
    prev: PartitionState | None,
    sample: ReplicaSample | Mapping[str, Any],
    cfg: DetectConfig,
    now_ms: int | None = None,
) -> tuple[PartitionState, list[Event]]:
    """Apply one log-dir agent sample: the replica's LEO and lineage on disk, keyed by its broker id.

    Emits LOG_TRUNCATION when that replica's LEO went down since the agent's previous reading and
    EPOCH_DIVERGENCE when its log disagrees with the leader's. Unusable or not-newer samples are ignored."""
    r: Mapping[str, Any] = sample.model_dump() if isinstance(sample, ReplicaSample) else sample
    if prev is None:
        prev = PartitionState.new(r["cluster"], r["topic"], r["partition"], r.get("topic_id"))
    broker: int = r["broker_id"]
    old = prev.meta.replica_logs.get(broker)
    if not _usable_replica_sample(prev.meta, r, old):
        return prev, []
    log = ReplicaLog(
        sample_time_ms=r["sample_time_ms"],
        cycle=r["cycle"],
        log_end_offset=r["log_end_offset"],
        high_watermark_checkpoint=r.get("high_watermark_checkpoint"),
        last_batch_leader_epoch=r.get("last_batch_leader_epoch"),
        epoch_lineage=_lineage(r.get("epoch_lineage") or ()),
    )
    st = prev.copy()
    m = st.meta = prev.meta.copy()
    m.replica_logs = {**m.replica_logs, broker: log}
    detected = log.sample_time_ms if now_ms is None else now_ms
    out = _Emitter(m, log.sample_time_ms, log.cycle, detected, source=f"agent/{broker}", origin=EventSource.LOG_DIR)
    cut = None if old is None else _truncated_to(old, log)
    if old is not None and cut is not None:
        _log_truncation(out, m, broker, old.log_end_offset, cut, "log-dir agent")
        last = st.last_log_end_offsets.get(broker)
        if last is not None and last > log.log_end_offset:  # the sampler must not report it a second time
            st.last_log_end_offsets = {**st.last_log_end_offsets, broker: log.log_end_offset}
    _note_disk_commit(st, broker, log)
    _check_divergence(st.meta, _followers(m) if broker == m.leader else (broker,), out)
    if st.meta.loss is not None:
        _settle_loss(st, out)
    return st, out.events


def _truncated_to(old: ReplicaLog, new: ReplicaLog) -> int | None:
    """Where a replica's log was cut between two readings of its disk, or None. A follower truncates to where
    its new leader's log leaves its epochs and at once appends the leader's messages from there, so its log end
    offset may be past the old one by the next reading: the lineage tells, its first epoch after the old tail
    starting below the old end. A lineage older than the log's last batch (checkpoint not yet rewritten) is not
    judged."""
    cut = new.log_end_offset if new.log_end_offset < old.log_end_offset else None
    old_tail = _tail_epoch(old)
    lineage = new.epoch_lineage
    stale = new.last_batch_leader_epoch is not None and lineage and new.last_batch_leader_epoch > lineage[-1][0]
    if old_tail is not None and lineage and not stale:
        start = next((s for e, s in lineage if e > old_tail), None)
        if start is not None and start < old.log_end_offset:
            cut = start if cut is None else min(cut, start)
    return cut


def _usable_replica_sample(m: PartitionMeta, r: Mapping[str, Any], old: ReplicaLog | None) -> bool:
    """False for an agent sample without a LEO, of another incarnation of the topic, of a replica no longer
    assigned (a leftover of a reassignment) or not newer than the agent's previous reading."""
    topic_id = r.get("topic_id")
    if r.get("error") is not None or r.get("log_end_offset") is None:
        return False
    if topic_id is not None and m.topic_id is not None and topic_id != m.topic_id:
        return False
    if m.replicas and r["broker_id"] not in m.replicas:
        return False
    t, cycle = r["sample_time_ms"], r["cycle"]
    return old is None or t > old.sample_time_ms or (t == old.sample_time_ms and cycle > old.cycle)


def expire(state: PartitionState, now_ms: int, cfg: DetectConfig) -> tuple[PartitionState, list[Event]]:
    """Processing-time timers: STALE once when no PartitionSample arrived for ``cfg.stale_after_ms`` (the next
    sample clears it). HW_STALLED is judged on sample time by :func:`step`: without samples there is nothing
    to judge, and the collector's and the job's clocks are never mixed."""
    silent_ms = now_ms - state.received_ms
    if state.stale or state.received_ms == NO_SAMPLE or silent_ms <= cfg.stale_after_ms:
        return state, []
    st = state.copy()
    st.stale = True
    m = st.meta
    out = _Emitter(m, state.sample_time_ms, state.cycle, now_ms, source="expire", origin=EventSource.JOB)
    out.emit(
        EventType.STALE, Severity.WARNING,
        event_time_ms=now_ms, leader=m.leader, leader_epoch=m.leader_epoch,
        message=f"no sample of {_name(m)} for {silent_ms / 1000:.0f} s",
    )  # fmt: skip
    return st, out.events


def forget(state: PartitionState, now_ms: int, cluster_received_ms: int, cfg: DetectConfig) -> list[Event]:
    """PARTITION_FORGOTTEN when the partition got no sample for ``cfg.forget_after_ms`` while its cluster's samples
    kept coming (``cluster_received_ms``, the newest sample of the cluster the job received, is within
    ``cfg.stale_after_ms`` of now): the collector no longer samples it, because its topic was deleted or left the
    collector's topic selection (a partition in the metadata is sampled every cycle, its leader unreachable or
    not). The caller drops the state; [] keeps it. A cluster that went silent as a whole keeps every partition: its
    collector is down or cut off, and the states are what a leader change during the silence is judged by."""
    silent_ms = now_ms - state.received_ms
    if (cfg.forget_after_ms <= 0 or state.received_ms == NO_SAMPLE or silent_ms <= cfg.forget_after_ms
            or now_ms - cluster_received_ms > cfg.stale_after_ms):
        return []
    m = state.meta
    out = _Emitter(m, state.sample_time_ms, state.cycle, now_ms, source="forget", origin=EventSource.JOB)
    out.emit(
        EventType.PARTITION_FORGOTTEN, Severity.INFO,
        event_time_ms=now_ms, leader=m.leader, leader_epoch=m.leader_epoch,
        message=f"{_name(m)} forgotten: no sample for {silent_ms / 1000:.0f} s while the cluster's other partitions "
                f"were sampled (topic deleted, or no longer selected by the collector)",
    )  # fmt: skip
    return out.events


LEO_HISTORY_STEP_MS = 5_000
LEO_HISTORY_LENGTH = 8
"""The leader's LEO is remembered every 5 s at most, 8 times: the time lags of the last 35 to 40 s are measured
(Kafka's replica.lag.time.max.ms defaults to 30 s), beyond that a lower bound; 8 pairs of integers per
partition."""


def _remember_leader_log_end(st: PartitionState, t: int) -> tuple[tuple[int, int], ...]:
    history = st.leader_log_end_history
    leader_leo = st.log_end_offsets.get(st.meta.leader)
    if leader_leo is None or (history and t - history[-1][0] < LEO_HISTORY_STEP_MS):
        return history
    return (*history[-(LEO_HISTORY_LENGTH - 1):], (t, leader_leo))


def _time_lag_ms(history: tuple[tuple[int, int], ...], now: int, leader_leo: int, follower_leo: int) -> int:
    """How long ago the leader's log ended at ``follower_leo``: the newest stretch of the leader's LEO history
    (with ``(now, leader_leo)`` last) that reached it, interpolated; behind all of it, the age of the oldest."""
    if follower_leo >= leader_leo:
        return 0
    later_t, later_leo = now, leader_leo
    for t, leo in reversed(history):
        if leo <= follower_leo:
            share = (follower_leo - leo) / (later_leo - leo) if later_leo > leo else 1.0
            return max(0, now - int(t + share * (later_t - t)))
        later_t, later_leo = t, leo
    return max(0, now - later_t)


def metrics_of(st: PartitionState) -> PartitionMetrics:
    """The metrics of a partition as its state holds it."""
    m = st.meta
    leader = m.leader
    leos = st.log_end_offsets
    leader_leo = leos.get(leader)
    adding = m.adding_replicas
    follower_lag: dict[int, int | None] = {}
    time_lag: dict[int, int | None] = {}
    max_lag: int | None = None
    for broker in m.replicas:
        if broker == leader:
            continue
        leo = leos.get(broker)
        if leo is None:
            leo = st.last_log_end_offsets.get(broker)
        if leo is None or leader_leo is None:
            follower_lag[broker] = time_lag[broker] = None
            continue
        lag = leader_leo - leo if leader_leo > leo else 0
        follower_lag[broker] = lag
        time_lag[broker] = _time_lag_ms(st.leader_log_end_history, st.sample_time_ms, leader_leo, leo)
        # a replica being added copies the log from its start: its lag is no follower falling behind
        if (max_lag is None or lag > max_lag) and broker not in adding:
            max_lag = lag
    hw = st.high_watermark
    hw_lag = None if hw is None or leader_leo is None else (leader_leo - hw if leader_leo > hw else 0)
    isr_size = len(m.isr)
    replica_count = len(m.replicas)
    min_isr = m.min_insync_replicas
    offline = leader < 0
    # Kafka's replication factor, as its UnderReplicatedPartitions counts it: the replicas a reassignment in flight
    # is adding are not yet in it
    under_replicated = isr_size < replica_count - len(m.adding_replicas)
    under_min_isr = min_isr is not None and isr_size < min_isr
    at_min_isr = min_isr is not None and isr_size == min_isr
    if offline:
        health = Health.OFFLINE
    elif under_min_isr:
        health = Health.UNDER_MIN_ISR
    elif under_replicated:
        health = Health.UNDER_REPLICATED
    elif at_min_isr:
        health = Health.AT_MIN_ISR
    elif hw_lag or max_lag:
        health = Health.LAGGING
    else:
        health = Health.HEALTHY
    return PartitionMetrics(
        cluster=m.cluster, topic=m.topic, partition=m.partition, sample_time_ms=st.sample_time_ms, leader=leader,
        leader_epoch=m.leader_epoch, replica_count=replica_count, isr_size=isr_size, min_insync_replicas=min_isr,
        offline=offline, under_replicated=under_replicated, under_min_isr=under_min_isr, at_min_isr=at_min_isr,
        high_watermark=hw, log_end_offset=leader_leo, log_start_offset=st.log_start_offset, hw_lag=hw_lag,
        max_follower_lag=max_lag, health=health, follower_lag=follower_lag, isr=m.isr, replicas=m.replicas,
        hw_stalled=st.hw_stalled, stale=st.stale, elr=m.elr or (), last_known_elr=m.last_known_elr or (),
        follower_time_lag_ms=time_lag, adding_replicas=adding,
        reassigning=bool(adding or m.removing_replicas),
    )


# ----------------------------------------------------------------------------------------------------------
# Event construction


class _Emitter:
    """Collects the events one sample reveals; ids derive from the partition, the sample and the source."""

    __slots__ = ("cycle", "detected_ms", "events", "meta", "origin", "source", "time_ms")

    def __init__(self, meta: PartitionMeta, time_ms: int, cycle: int, detected_ms: int, source: str = "",
                 origin: EventSource = EventSource.SAMPLER) -> None:
        self.meta = meta  # for the partition's identity only
        self.time_ms = time_ms
        self.cycle = cycle
        self.detected_ms = detected_ms
        self.source = source  # in the event id: tells apart what two sources revealed at one time
        self.origin = origin
        self.events: list[Event] = []

    def emit(self, etype: EventType, severity: Severity, *key: object, message: str, **fields: Any) -> None:
        m = self.meta
        fields.setdefault("event_time_ms", self.time_ms)
        fields.setdefault("source", self.origin)
        eid = event_id(m.cluster, m.topic, m.partition, etype, self.source, self.time_ms, self.cycle, *key)
        self.events.append(
            Event(
                event_id=eid,
                type=etype,
                severity=severity,
                cluster=m.cluster,
                topic=m.topic,
                partition=m.partition,
                detected_time_ms=self.detected_ms,
                message=message,
                **fields,
            )
        )


def _name(m: PartitionMeta) -> str:
    return f"{m.topic}-{m.partition}"


# ----------------------------------------------------------------------------------------------------------
# Reading samples


def _read_log_end_offsets(replica_offsets: Iterable[Mapping[str, Any]]) -> tuple[dict[int, int], bool]:
    """Broker -> LEO of the replicas that answered, and whether any did not."""
    leos: dict[int, int] = {}
    unread = False
    for ro in replica_offsets:
        leo = ro["log_end_offset"]
        if leo is None or ro.get("error") is not None:
            unread = True
        else:
            leos[ro["broker_id"]] = leo
    return leos, unread


def _opt_tuple(values: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _lineage(entries: Iterable[Mapping[str, Any]]) -> Lineage:
    return tuple(sorted((int(e["leader_epoch"]), int(e["start_offset"])) for e in entries))


# ----------------------------------------------------------------------------------------------------------
# Metadata: leader, leader epoch, ISR, ELR, replicas, min.insync.replicas


class Judgement(NamedTuple):
    """What the controller recorded about an election: the ISR, ELR and last known ELR just before it, and whether
    the new leader is recovering its log (the LeaderRecoveryState the controller sets on an unclean election: its
    own verdict)."""

    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    recovering: bool


def _apply_topic_configs(prev: PartitionState, st: PartitionState, s: Mapping[str, Any], out: _Emitter) -> None:
    """The topic configs a sample carries (min.insync.replicas, unclean.leader.election.enable), alone."""
    pm = prev.meta
    min_isr, unclean = s.get("min_insync_replicas"), s.get("unclean_leader_election")
    if min_isr in (None, pm.min_insync_replicas) and unclean in (None, pm.unclean_leader_election):
        return
    m = st.meta = pm.copy()
    _set_topic_configs(m, s)
    _under_min_isr(m, out)


def _set_topic_configs(m: PartitionMeta, s: Mapping[str, Any]) -> None:
    """The topic configs a sample reports (the sampler re-reads them every few cycles: absent in between)."""
    if s.get("min_insync_replicas") is not None:
        m.min_insync_replicas = s["min_insync_replicas"]
    if s.get("unclean_leader_election") is not None:
        m.unclean_leader_election = s["unclean_leader_election"]


def _note_late_commit(prev: PartitionState, st: PartitionState, s: Mapping[str, Any], hw: int | None,
                      out: _Emitter) -> None:
    """A sample of a leader epoch the metadata log has already ended: its high watermark, and its leader's whole
    log while the ISR was that leader alone, count for the last leader change's loss."""
    m = st.meta
    loss = m.loss
    epoch: int = s["leader_epoch"]
    if loss is None or epoch > loss.previous_leader_epoch:
        return
    leader: int = s["leader"]
    alone = leader >= 0 and tuple(s["isr"]) == (leader,) and _alone_commits(m)
    committed = _latest(loss.committed_end, hw, st.log_end_offsets.get(leader) if alone else None)
    if committed == loss.committed_end:
        return
    m = st.meta = m.copy() if m is prev.meta else m
    m.loss = loss._replace(committed_end=committed)
    if loss.divergence is not None:
        _settle_loss(st, out)


def _apply_metadata(
    prev: PartitionState, st: PartitionState, s: Mapping[str, Any], cfg: DetectConfig, out: _Emitter,
    judge: Judgement | None = None,
) -> None:
    pm = prev.meta
    m = st.meta = pm.copy()
    first = prev.sample_time_ms == NO_SAMPLE
    leader: int = s["leader"]
    epoch: int = s["leader_epoch"]
    if not first and epoch < pm.leader_epoch:
        # Metadata from a broker that has not caught up yet: report it, but keep the newer view, or the next
        # sample would look like a second leader change.
        if pm.epoch_regressed_to != epoch:
            out.emit(
                EventType.EPOCH_REGRESSION, Severity.CRITICAL, epoch,
                brokers=[leader] if leader >= 0 else [], leader=leader, leader_epoch=epoch,
                previous_leader=pm.leader, previous_leader_epoch=pm.leader_epoch,
                message=f"{_name(m)}: leader epoch went down from {pm.leader_epoch} to {epoch}",
            )  # fmt: skip
        m.epoch_regressed_to = epoch
        return
    m.epoch_regressed_to = None
    m.leader = leader
    m.leader_epoch = epoch
    m.replicas = _ints(s["replicas"])
    m.isr = _ints(s["isr"])
    elr = s.get("elr")
    m.elr = None if elr is None else _ints(elr)
    m.last_known_elr = _opt_tuple(s.get("last_known_elr"))
    m.adding_replicas, m.removing_replicas = _reassignment(s, pm, m.replicas)
    _set_topic_configs(m, s)
    if m.replicas != pm.replicas:
        _forget_removed_replicas(st)
    leadership_changed = leader != pm.leader or epoch != pm.leader_epoch
    if first:
        if leader < 0:
            _offline_start(st, None, out)
    else:
        if m.replicas != pm.replicas:
            _replicas_change(pm, m, out, told=_reassignment_told(s) is not None)
        if leadership_changed:
            _leadership(prev, st, out, judge)
        if m.isr != pm.isr:
            _isr_change(pm, st, cfg, out)
        if m.elr is not None and pm.elr is not None and m.elr != pm.elr:
            _elr_change(pm, m, out)
    _under_min_isr(m, out)
    if leadership_changed:
        _check_divergence(m, _followers(m), out)


def _reassignment_told(s: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The adding and removing replicas a sample or a metadata record tells; None when it does not tell them."""
    adding, removing = s.get("adding_replicas"), s.get("removing_replicas")
    return None if adding is None or removing is None else (_ints(adding), _ints(removing))


def _reassignment(s: Mapping[str, Any], pm: PartitionMeta, replicas: tuple[int, ...]
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The adding and removing replicas after ``s``: those it tells, among its replicas (a collector reads them in
    a request of their own, which may answer from a moment before or after the replicas'); when it does not tell
    them, what the state knew, while the replicas stay those it knew them for."""
    told = _reassignment_told(s)
    if told is None:
        return (pm.adding_replicas, pm.removing_replicas) if replicas == pm.replicas else ((), ())
    members = set(replicas)
    adding, removing = told
    return tuple(b for b in adding if b in members), tuple(b for b in removing if b in members)


def _replicas_change(pm: PartitionMeta, m: PartitionMeta, out: _Emitter, told: bool) -> None:
    """REPLICAS_CHANGE: a reassignment started (the new replicas beside the old ones), completed or was cancelled
    (the old or the new ones removed), or reordered the replicas (a new preferred leader). ``told``: the sample or
    record told the reassignment in flight (else its replicas to add and remove are unknown: None)."""
    before, after = set(pm.replicas), set(m.replicas)
    added, removed = sorted(after - before), sorted(before - after)
    moves = "; ".join(text for text in (added and f"added {added}", removed and f"removed {removed}") if text)
    flight = (f", reassignment in flight: adding {list(m.adding_replicas)}, removing {list(m.removing_replicas)}"
              if m.adding_replicas or m.removing_replicas else "")
    out.emit(
        EventType.REPLICAS_CHANGE, Severity.INFO, m.replicas,
        brokers=sorted(after ^ before), leader=m.leader, leader_epoch=m.leader_epoch,
        replicas=list(m.replicas), previous_replicas=list(pm.replicas), isr=list(m.isr), previous_isr=list(pm.isr),
        adding_replicas=list(m.adding_replicas) if told else None,
        removing_replicas=list(m.removing_replicas) if told else None,
        message=f"{_name(m)}: replicas {list(pm.replicas)} -> {list(m.replicas)}"
                + (f" ({moves})" if moves else " (reordered)") + flight,
    )  # fmt: skip


def _forget_removed_replicas(st: PartitionState) -> None:
    """A broker that leaves the replica set and comes back later starts a new log: no baseline to keep."""
    m = st.meta
    keep = set(m.replicas)
    st.last_log_end_offsets = {b: v for b, v in st.last_log_end_offsets.items() if b in keep}
    m.replica_logs = {b: v for b, v in m.replica_logs.items() if b in keep}
    m.diverged = {b: v for b, v in m.diverged.items() if b in keep}


def _leadership(prev: PartitionState, st: PartitionState, out: _Emitter, judge: Judgement | None = None) -> None:
    """OFFLINE_START when the leader goes to -1; otherwise LEADER_CHANGE (plus OFFLINE_END coming back), judged
    against the controller's record of the election when there is one (``judge``), else against the partition as
    the job last knew it."""
    pm, m = prev.meta, st.meta
    if m.leader < 0:
        if pm.leader >= 0:
            _offline_start(st, ElectionBasis(pm.leader, pm.leader_epoch, pm.isr, pm.elr), out)
        return
    if pm.leader < 0:
        m.offline = False
        out.emit(
            EventType.OFFLINE_END, Severity.INFO,
            brokers=[m.leader], leader=m.leader, leader_epoch=m.leader_epoch,
            message=f"{_name(m)} is online again, led by broker {m.leader}",
        )  # fmt: skip
        basis = pm.before_offline
        # While offline the controller keeps the last ISR member (or the ELR): the freshest judge. When it
        # reports neither, fall back on the partition as last seen online.
        isr, elr = (pm.isr, pm.elr) if basis is None or pm.isr or pm.elr else (basis.isr, basis.elr)
        previous_leader = None if basis is None else basis.leader
        previous_epoch = pm.leader_epoch if basis is None else basis.leader_epoch
        last_online_isr = isr if basis is None else basis.isr
        m.before_offline = None
    else:
        isr, elr = (judge.isr, judge.elr) if judge is not None else (pm.isr, pm.elr)
        previous_leader = pm.leader
        previous_epoch = pm.leader_epoch
        last_online_isr = isr
    recovery = False
    if judge is not None:
        isr, elr = judge.isr, judge.elr
        clean: bool | None = not judge.recovering
        # the controller's own last resort (KIP-966): the ISR empty, no ELR member available, one of the last
        # known ELR back
        recovery = judge.recovering and m.leader in judge.last_known_elr and m.leader not in (*isr, *elr)
    elif m.leader in isr or (elr is not None and m.leader in elr):
        clean = True
    elif not isr and elr is None:
        clean = None  # nothing to judge against
    else:
        clean = False
    st.hw_stuck_since_ms = None
    st.hw_stalled = False
    st.leader_log_end_history = ()  # the new leader's log: an unclean election may have cut it below the old one
    kind = {True: "clean", False: "UNCLEAN", None: "unjudged"}[clean]
    elr_text = "" if elr is None else f", ELR {list(elr)}"
    # the topic forbids unclean elections: an operator forced this one (ElectLeaders UNCLEAN), unless it was the
    # controller's own recovery from the last known ELR
    forced = (None if clean is not False or m.unclean_leader_election is None
              else not m.unclean_leader_election and not recovery)
    forced_text = ("; the controller's unclean recovery from the last known ELR (KIP-966): no ISR or ELR member "
                   "available" if recovery else "; forced: the topic has unclean.leader.election.enable=false"
                   if forced else "")
    out.emit(
        EventType.LEADER_CHANGE, Severity.CRITICAL if clean is False else Severity.INFO,
        brokers=[m.leader] if previous_leader in (None, m.leader) else [previous_leader, m.leader],
        leader=m.leader, previous_leader=previous_leader,
        leader_epoch=m.leader_epoch, previous_leader_epoch=pm.leader_epoch, clean=clean, forced=forced,
        isr=list(m.isr), previous_isr=list(isr),
        message=(
            f"{_name(m)}: {kind} leader change from {previous_leader} to broker {m.leader} "
            f"(leader epoch {pm.leader_epoch} -> {m.leader_epoch}; previous ISR {list(isr)}{elr_text}{forced_text})"
        ),
    )  # fmt: skip
    if previous_leader is not None:
        # What the old epochs committed is judged against the new leader's log once its lineage is known.
        if pm.loss is not None:
            m.earlier_committed_ends = (*pm.earlier_committed_ends[-(EARLIER_LOSSES - 1):],
                                        (pm.loss.previous_leader_epoch, pm.loss.committed_end))
        alone = tuple(last_online_isr) == (previous_leader,) and _alone_commits(pm)
        m.loss = ElectionLoss(previous_leader, previous_epoch, alone, st.committed_end, None, 0)
        st.committed_end = None


def _offline_start(st: PartitionState, basis: ElectionBasis | None, out: _Emitter) -> None:
    m = st.meta
    m.offline = True
    m.before_offline = basis
    st.hw_stuck_since_ms = None
    st.hw_stalled = False
    previous = None if basis is None else basis.leader
    was = "" if previous is None else f", was led by broker {previous}"
    out.emit(
        EventType.OFFLINE_START, Severity.CRITICAL,
        brokers=[] if previous is None else [previous], previous_leader=previous,
        leader=-1, leader_epoch=m.leader_epoch, isr=list(m.isr),
        message=f"{_name(m)} is offline (no leader){was}",
    )  # fmt: skip


def _isr_change(pm: PartitionMeta, st: PartitionState, cfg: DetectConfig, out: _Emitter) -> None:
    m = st.meta
    # a replica removed from the assignment (a reassignment completed) leaves the ISR with it: no shrink
    left = [b for b in pm.isr if b not in m.isr and b in m.replicas]
    joined = [b for b in m.isr if b not in pm.isr]
    lags = metrics_of(st).follower_lag
    changes = ((EventType.ISR_SHRINK, left, "left"), (EventType.ISR_EXPAND, joined, "joined"))
    for etype, brokers, verb in changes:
        for b in brokers:
            lag = lags.get(b)
            out.emit(
                etype, Severity.WARNING if etype is EventType.ISR_SHRINK else Severity.INFO, b,
                brokers=[b], leader=m.leader, leader_epoch=m.leader_epoch,
                isr=list(m.isr), previous_isr=list(pm.isr), lag=lag,
                message=(
                    f"{_name(m)}: broker {b} {verb} the ISR {list(pm.isr)} -> {list(m.isr)}"
                    + ("" if lag is None else f" (follower lag {lag} messages)")
                ),
            )  # fmt: skip
    if left or joined:
        _check_flapping(m, [(out.time_ms, b) for b in left + joined], cfg, out)


def _elr_change(pm: PartitionMeta, m: PartitionMeta, out: _Emitter) -> None:
    """KIP-966: the replicas that left the ISR while it was below min.insync.replicas and still hold every committed
    message (the controller may elect them cleanly) changed."""
    before, after = pm.elr or (), m.elr or ()
    moved = sorted({*before, *after} - ({*before} & {*after}))
    out.emit(
        EventType.ELR_CHANGE, Severity.INFO, after,
        brokers=moved, leader=m.leader, leader_epoch=m.leader_epoch, isr=list(m.isr), previous_isr=list(pm.isr),
        elr=list(after), previous_elr=list(before),
        message=f"{_name(m)}: eligible leader replicas {list(before)} -> {list(after)} (ISR {list(m.isr)})",
    )  # fmt: skip


def _check_flapping(m: PartitionMeta, changes: list[tuple[int, int]], cfg: DetectConfig, out: _Emitter) -> None:
    """ISR_FLAPPING once per window when more than cfg.flapping_threshold ISR changes fall within it."""
    window = cfg.flapping_window_ms
    now = out.time_ms
    recent = tuple(c for c in m.isr_changes if now - c[0] < window) + tuple(changes)
    m.isr_changes = recent
    if len(recent) <= cfg.flapping_threshold:
        return
    if m.flapping_reported_ms is not None and now - m.flapping_reported_ms < window:
        return
    m.flapping_reported_ms = now
    brokers = sorted({b for _, b in recent})
    out.emit(
        EventType.ISR_FLAPPING, Severity.WARNING,
        brokers=brokers, leader=m.leader, leader_epoch=m.leader_epoch, isr=list(m.isr),
        message=(
            f"{_name(m)}: {len(recent)} ISR shrinks and expands within {window / 1000:.0f} s "
            f"(brokers {brokers})"
        ),
    )  # fmt: skip


def _under_min_isr(m: PartitionMeta, out: _Emitter) -> None:
    min_isr = m.min_insync_replicas
    under = min_isr is not None and len(m.isr) < min_isr
    if under == m.under_min_isr:
        return
    m.under_min_isr = under
    out.emit(
        EventType.UNDER_MIN_ISR_START if under else EventType.UNDER_MIN_ISR_END,
        Severity.CRITICAL if under else Severity.INFO,
        leader=m.leader, leader_epoch=m.leader_epoch, isr=list(m.isr),
        message=(
            f"{_name(m)}: ISR {list(m.isr)} is {'below' if under else 'back at'} "
            f"min.insync.replicas={min_isr}" + ("; acks=all writes fail" if under else "")
        ),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Offsets: log end offsets, high watermark


AGENT_AUTHORITY_MS = 60_000
"""A broker whose disk a log-dir agent read within this long before a sample has its truncations reported by the
agent alone: it knows the log end offset before the cut (also while the broker was down) and where the cut was."""


def _check_log_truncation(prev: PartitionState, st: PartitionState, out: _Emitter) -> None:
    last = prev.last_log_end_offsets
    agents = prev.meta.replica_logs
    for broker, leo in st.log_end_offsets.items():
        before = last.get(broker)
        read = agents.get(broker)
        if read is not None and out.time_ms - read.sample_time_ms <= AGENT_AUTHORITY_MS:
            continue
        if before is not None and leo < before:
            m = st.meta = st.meta.copy() if st.meta is prev.meta else st.meta
            _log_truncation(out, m, broker, before, leo, "sampler")
            log = m.replica_logs.get(broker)
            if log is not None and log.log_end_offset > leo:  # the agent must not report it a second time
                m.replica_logs = {**m.replica_logs, broker: log._replace(log_end_offset=leo)}


def _log_truncation(out: _Emitter, m: PartitionMeta, broker: int, before: int, after: int, seen_by: str) -> None:
    loss = m.loss
    committed = loss.committed_end if loss is not None and broker == loss.previous_leader else None
    uncommitted = None if committed is None else max(0, before - max(after, committed))
    counted = None
    if loss is not None and uncommitted is not None:
        counted = _count_uncommitted(m, loss.previous_leader_epoch, before - uncommitted, before)
    never = "" if not uncommitted else f", {uncommitted} of them never committed"
    out.emit(
        EventType.LOG_TRUNCATION, Severity.WARNING, broker, before, after,
        brokers=[broker], leader=m.leader, leader_epoch=m.leader_epoch,
        truncated=before - after, uncommitted_lost=uncommitted, uncommitted_counted=counted,
        offset_start=after, offset_end=before,
        message=(
            f"{_name(m)}: replica on broker {broker} truncated its log from {before} to {after} "
            f"({before - after} messages{never}, seen by the {seen_by})"
        ),
    )  # fmt: skip


def _apply_high_watermark(
    prev: PartitionState, st: PartitionState, hw: int | None, lineage_sampled: bool, out: _Emitter
) -> None:
    """HW_REGRESSION when the partition's high watermark goes down; samples without one change nothing.

    The loss itself is DATA_LOSS, from the new leader's lineage (:func:`_settle_loss`): two sampled high
    watermarks tell only a lower bound while producers write on. Without any lineage (pre-0.11 message formats)
    the regression is all there is, and it carries the count."""
    if hw is None:
        return
    before = prev.high_watermark
    st.high_watermark = hw
    if before is None or hw >= before:
        return
    pm, m = prev.meta, st.meta
    counted = not (lineage_sampled or _has_lineage(m))
    lost = f"{before - hw} committed messages lost" if counted else "committed messages lost"
    out.emit(
        EventType.HW_REGRESSION, Severity.CRITICAL, before, hw,
        brokers=[m.leader] if m.leader >= 0 else [], leader=m.leader, leader_epoch=m.leader_epoch,
        previous_leader=pm.leader if pm.leader != m.leader else None,
        previous_leader_epoch=pm.leader_epoch if pm.leader_epoch != m.leader_epoch else None,
        isr=list(m.isr), committed_lost=before - hw if counted else None, offset_start=hw, offset_end=before,
        message=(
            f"{_name(m)}: high watermark went down from {before} to {hw}: "
            f"{lost} (leader {m.leader}, leader epoch {m.leader_epoch})"
        ),
    )  # fmt: skip


def _has_lineage(m: PartitionMeta) -> bool:
    return m.epoch_lineage is not None or any(log.epoch_lineage for log in m.replica_logs.values())


# ----------------------------------------------------------------------------------------------------------
# Committed offsets and the loss of a leader change


def _note_sampled_commit(st: PartitionState, hw: int | None) -> None:
    """The sample's high watermark is committed; so is the leader's whole log while the ISR is the leader alone
    (the HW is then its log end offset)."""
    m = st.meta
    alone = m.leader >= 0 and m.isr == (m.leader,) and _alone_commits(m)
    st.committed_end = _latest(st.committed_end, hw, st.log_end_offsets.get(m.leader) if alone else None)


def _note_disk_commit(st: PartitionState, broker: int, log: ReplicaLog) -> None:
    """What an agent's reading of ``broker``'s disk proves committed: its HW checkpoint, and its whole log when
    it was the leader with the ISR to itself. A log still ending in the epochs before the last leader change
    (the old leader's, read while it is down) counts for that change's loss; any other for the current epoch.
    ``st.meta`` must be a fresh copy."""
    m = st.meta
    tail = _tail_epoch(log)
    loss = m.loss
    if loss is not None and tail is not None and tail <= loss.previous_leader_epoch:
        alone = loss.leader_alone and broker == loss.previous_leader
        committed = _latest(loss.committed_end, log.high_watermark_checkpoint, log.log_end_offset if alone else None)
        if committed != loss.committed_end:
            m.loss = loss._replace(committed_end=committed)
        return
    if tail is not None and tail > m.leader_epoch:
        return  # the disk is ahead of our metadata: judge on a later sample
    basis = m.before_offline
    alone = _alone_commits(m) and (
        (m.leader == broker and m.isr == (broker,))
        or (m.leader < 0 and basis is not None and basis.leader == broker and basis.isr == (broker,))
    )  # the leader alone in the ISR, or it was when the partition went offline
    st.committed_end = _latest(st.committed_end, log.high_watermark_checkpoint, log.log_end_offset if alone else None)


def _alone_commits(m: PartitionMeta) -> bool:
    """Whether a leader alone in the ISR commits all it appends. Before KIP-966 it does (its HW is its LEO). With
    KIP-966 (the cluster reports ELRs) the HW does not advance while the ISR is below min.insync.replicas: a leader
    alone commits only with min.insync.replicas 1."""
    return m.elr is None or m.min_insync_replicas is None or m.min_insync_replicas <= 1


def _latest(*offsets: int | None) -> int | None:
    """The highest of the known offsets; None when none is known."""
    return max((o for o in offsets if o is not None), default=None)


def _tail_epoch(log: ReplicaLog) -> int | None:
    """The leader epoch the replica's log ends in."""
    tail = log.epoch_lineage[-1][0] if log.epoch_lineage else None
    last = log.last_batch_leader_epoch
    return last if tail is None or (last is not None and last > tail) else tail


def _settle_loss(st: PartitionState, out: _Emitter) -> None:
    """DATA_LOSS for the committed offsets of the old epochs the new leader's log does not hold:
    ``[D, C)`` with D where its lineage leaves the old epochs and C their committed end; reported again, for the
    further offsets only, when C grows. The prefix below D is the new epoch's committed log too."""
    m = st.meta
    loss = m.loss
    assert loss is not None
    if loss.divergence is None:
        reference = _reference_lineage(m)
        divergence = None if reference is None else _end_of_epochs(reference, loss.previous_leader_epoch)
        if divergence is None:
            return
        loss = loss._replace(divergence=divergence)
        if loss.committed_end is not None:
            st.committed_end = _latest(st.committed_end, min(loss.committed_end, divergence))
    assert loss.divergence is not None
    lost = 0 if loss.committed_end is None else loss.committed_end - loss.divergence
    if lost > loss.reported:
        start, end = loss.divergence + loss.reported, loss.divergence + lost
        more = "" if not loss.reported else f" more ({lost} in all)"
        out.emit(
            EventType.DATA_LOSS, Severity.CRITICAL, loss.previous_leader_epoch, start, end,
            brokers=[b for b in (loss.previous_leader, m.leader) if b >= 0], leader=m.leader,
            leader_epoch=m.leader_epoch, previous_leader=loss.previous_leader,
            previous_leader_epoch=loss.previous_leader_epoch, isr=list(m.isr),
            committed_lost=end - start, offset_start=start, offset_end=end,
            message=(
                f"{_name(m)}: {end - start} committed messages{more} lost, offsets [{start}, {end}): leader "
                f"{m.leader}'s log leaves leader epoch {loss.previous_leader_epoch} (broker "
                f"{loss.previous_leader}) at {loss.divergence}, below what it had committed"
            ),
        )  # fmt: skip
        loss = loss._replace(reported=lost)
    if loss != m.loss:
        m = st.meta = m.copy()
        m.loss = loss


def _end_of_epochs(lineage: Lineage, epoch: int) -> int | None:
    """Where a log leaves the leader epochs up to ``epoch``: the start of its first later epoch (what Kafka's
    OffsetsForLeaderEpoch answers for ``epoch``); None when the lineage holds no earlier epoch to compare."""
    if not lineage or lineage[0][0] > epoch:
        return None
    return next((start for e, start in lineage if e > epoch), None)


def _check_hw_stalled(prev: PartitionState, st: PartitionState, cfg: DetectConfig, out: _Emitter) -> None:
    """HW_STALLED once when the HW stays below the leader's LEO, unmoved, for over cfg.hw_stalled_after_ms."""
    hw = st.high_watermark
    m = st.meta
    leader_leo = st.log_end_offsets.get(m.leader)
    if hw is None or leader_leo is None:
        return
    if hw >= leader_leo:
        st.hw_stuck_since_ms = None
        st.hw_stalled = False
        return
    if st.hw_stuck_since_ms is None or hw != prev.high_watermark:
        st.hw_stuck_since_ms = out.time_ms
        st.hw_stuck_log_end_offset = leader_leo
        st.hw_stalled = False
        return
    stuck_ms = out.time_ms - st.hw_stuck_since_ms
    if st.hw_stalled or stuck_ms <= cfg.hw_stalled_after_ms:
        return
    st.hw_stalled = True
    out.emit(
        EventType.HW_STALLED, Severity.WARNING, hw, st.hw_stuck_since_ms,
        brokers=[m.leader], leader=m.leader, leader_epoch=m.leader_epoch, isr=list(m.isr),
        lag=leader_leo - hw, offset_start=hw, offset_end=leader_leo,
        message=(
            f"{_name(m)}: high watermark stuck at {hw} for {stuck_ms / 1000:.0f} s while the leader's "
            f"log end offset went from {st.hw_stuck_log_end_offset} to {leader_leo}"
        ),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Leader epoch lineage


def _apply_leader_lineage(st: PartitionState, entries: Iterable[Mapping[str, Any]], out: _Emitter) -> None:
    lineage = _lineage(entries)
    m = st.meta
    if lineage == m.epoch_lineage and m.lineage_leader_epoch == m.leader_epoch:
        return
    m = st.meta = m.copy()
    m.epoch_lineage = lineage
    m.lineage_leader_epoch = m.leader_epoch
    _check_divergence(m, _followers(m), out)


def _followers(m: PartitionMeta) -> tuple[int, ...]:
    return tuple(b for b in m.replica_logs if b != m.leader)


def _check_divergence(m: PartitionMeta, brokers: Iterable[int], out: _Emitter) -> None:
    """EPOCH_DIVERGENCE once per diverging replica and offset; forgotten when the replica agrees again.
    ``m`` must be a fresh copy: its ``diverged`` is replaced."""
    if m.leader < 0:
        return
    reference = _reference_lineage(m)
    for broker in brokers:
        log = m.replica_logs.get(broker)
        if log is None or broker == m.leader:
            continue
        found = _divergence(m, reference, log)
        if found is None:
            if broker in m.diverged:
                m.diverged = {b: v for b, v in m.diverged.items() if b != broker}
            continue
        offset, replica_epoch, leader_epoch = found
        if m.diverged.get(broker) == offset:
            continue
        m.diverged = {**m.diverged, broker: offset}
        end = log.log_end_offset
        ended, committed = _ledger_of_epoch(m, replica_epoch)
        uncommitted = None if committed is None else max(0, end - max(offset, committed))
        counted = None if uncommitted is None else _count_uncommitted(m, ended, end - uncommitted, end)
        holds_committed = committed is None or offset < committed
        stake = (
            "committed end unknown" if committed is None
            else "committed offsets among them" if holds_committed else "none of them ever committed"
        )
        out.emit(
            EventType.EPOCH_DIVERGENCE, Severity.CRITICAL if holds_committed else Severity.WARNING,
            broker, offset, replica_epoch, leader_epoch,
            brokers=[broker, m.leader], leader=m.leader, leader_epoch=m.leader_epoch,
            offset_start=offset, offset_end=end, uncommitted_lost=uncommitted, uncommitted_counted=counted,
            message=(
                f"{_name(m)}: replica on broker {broker} diverges from leader {m.leader} at offset "
                f"{offset} (written in epoch {replica_epoch} there, in epoch {leader_epoch} on the leader); "
                f"offsets [{offset}, {end}) at stake, {stake}"
            ),
        )  # fmt: skip


EARLIER_LOSSES = 4


def _ledger_of_epoch(m: PartitionMeta, epoch: int) -> tuple[int, int | None]:
    """The leader change that ended leader epoch ``epoch`` (the first one remembered that ended it or a later one:
    each ended epoch has its own) as its previous leader epoch, and what had been committed then (its committed end
    C); ``(-1, None)`` when unknown."""
    ledgers = [*m.earlier_committed_ends]
    if m.loss is not None:
        ledgers.append((m.loss.previous_leader_epoch, m.loss.committed_end))
    return next(((ended, committed) for ended, committed in ledgers if ended >= epoch), (-1, None))


def _count_uncommitted(m: PartitionMeta, ended: int, start: int, end: int) -> int:
    """How many of a never-committed tail ``[start, end)`` of the leader change that ended epoch ``ended`` no
    earlier event counted; raises that change's high mark. ``m`` must be a fresh copy."""
    counted = dict(m.uncommitted_counted)
    new = end - max(start, counted.get(ended, start))
    if new <= 0:
        return 0
    counted[ended] = end
    m.uncommitted_counted = tuple(sorted(counted.items()))[-(EARLIER_LOSSES + 1):]
    return new


def _reference_lineage(m: PartitionMeta) -> Lineage | None:
    """The leader's lineage, if known for the current leader epoch (from the sampler, else from disk)."""
    if m.epoch_lineage and m.lineage_leader_epoch == m.leader_epoch:
        return m.epoch_lineage
    log = m.replica_logs.get(m.leader)
    if log is not None and log.epoch_lineage and log.epoch_lineage[-1][0] == m.leader_epoch:
        return log.epoch_lineage
    return None


def _divergence(m: PartitionMeta, reference: Lineage | None, log: ReplicaLog) -> tuple[int, int, int] | None:
    """(first diverging offset, replica's epoch there, leader's epoch there), or None."""
    lineage = log.epoch_lineage
    if reference is not None and lineage:
        if lineage[-1][0] > m.leader_epoch:
            return None  # the replica is ahead of our metadata: judge on a later sample
        if log.last_batch_leader_epoch is not None and log.last_batch_leader_epoch > lineage[-1][0]:
            return None  # checkpoint read before the tail of the log: stale
        return _lineage_divergence(reference, lineage, log.log_end_offset)
    # No lineage (pre-epoch message formats): two logs of the same length whose last batches were written in
    # different leader epochs hold different messages at their last offset.
    leader_log = m.replica_logs.get(m.leader)
    if (
        leader_log is None
        or log.log_end_offset == 0
        or leader_log.log_end_offset != log.log_end_offset
        or log.last_batch_leader_epoch is None
        or leader_log.last_batch_leader_epoch is None
        or log.last_batch_leader_epoch == leader_log.last_batch_leader_epoch
    ):
        return None
    return log.log_end_offset - 1, log.last_batch_leader_epoch, leader_log.last_batch_leader_epoch


def _lineage_divergence(leader: Lineage, replica: Lineage, replica_leo: int) -> tuple[int, int, int] | None:
    """The first offset below ``replica_leo`` written in one epoch on the replica and another on the leader.

    Only offsets both lineages cover count: retention drops old entries and moves the first one's start."""
    covered_from = max(leader[0][1], replica[0][1])
    starts = sorted({s for _, s in leader} | {s for _, s in replica} | {covered_from})
    for offset in starts:
        if offset < covered_from:
            continue
        if offset >= replica_leo:
            break
        replica_epoch = _epoch_at(replica, offset)
        leader_epoch = _epoch_at(leader, offset)
        if replica_epoch != leader_epoch:
            return offset, replica_epoch, leader_epoch
    return None


def _epoch_at(lineage: Lineage, offset: int) -> int:
    epoch = -1
    for e, start in lineage:
        if start > offset:
            break
        epoch = e
    return epoch
