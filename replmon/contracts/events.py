"""The event record the streaming job publishes to the events topic and the history: defined here once.

The Spark schema of the events topic is derived from :class:`Event`; field types stay simple (str, int,
bool, list[int] and optionals of those). Offsets follow Kafka: a range ``[offset_start, offset_end)`` excludes
its end, like a log end offset.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict


class EventType(StrEnum):
    ISR_SHRINK = "ISR_SHRINK"
    ISR_EXPAND = "ISR_EXPAND"
    LEADER_CHANGE = "LEADER_CHANGE"
    HW_REGRESSION = "HW_REGRESSION"
    DATA_LOSS = "DATA_LOSS"
    LOG_TRUNCATION = "LOG_TRUNCATION"
    EPOCH_DIVERGENCE = "EPOCH_DIVERGENCE"
    EPOCH_REGRESSION = "EPOCH_REGRESSION"
    UNDER_MIN_ISR_START = "UNDER_MIN_ISR_START"
    UNDER_MIN_ISR_END = "UNDER_MIN_ISR_END"
    OFFLINE_START = "OFFLINE_START"
    OFFLINE_END = "OFFLINE_END"
    HW_STALLED = "HW_STALLED"
    ISR_FLAPPING = "ISR_FLAPPING"
    STALE = "STALE"
    PARTITION_FORGOTTEN = "PARTITION_FORGOTTEN"
    ELR_CHANGE = "ELR_CHANGE"
    BROKER_FENCED = "BROKER_FENCED"
    BROKER_UNFENCED = "BROKER_UNFENCED"
    REPLICAS_CHANGE = "REPLICAS_CHANGE"


class EventSource(StrEnum):
    """What revealed an event."""

    SAMPLER = "sampler"  # the protocol sampler's samples: the change happened at most one cycle before
    METADATA_LOG = "metadata_log"  # a record of the KRaft metadata log: at the controller's own time
    LOG_DIR = "log_dir"  # the log-dir agent's reading of a replica on disk
    JOB = "job"  # the job itself (a silence its timer noticed)


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Event(BaseModel):
    """One replication event of one partition. The fields' docstrings are their documentation (docs/events.md is
    generated from them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    event_id: str
    """Deterministic (sha1 of what identifies the event, see :func:`event_id`): replaying the same samples yields
    the same id, so a consumer de-duplicates by it."""
    type: EventType
    """What happened: one of the event types below."""
    severity: Severity
    """info, warning or critical (each type's severity is in the table of event types)."""
    cluster: str
    """The watched cluster's name (``clusters[].name`` of the configuration)."""
    topic: str | None = None
    """The partition's topic; None for a cluster-level STALE and for broker events (BROKER_FENCED/UNFENCED)."""
    partition: int | None = None
    """The partition's number."""
    event_time_ms: int
    """Milliseconds since the epoch: when it happened, as well as ``source`` tells. For metadata_log, the active
    controller's time of the record; for sampler and log_dir, the collector's time of the sample that revealed it
    (the change happened within the cycle before); for job (STALE, PARTITION_FORGOTTEN), the job's time that
    noticed the silence."""
    detected_time_ms: int
    """Milliseconds since the epoch, on the job's clock: when the job processed the sample."""
    source: EventSource | None = None
    """What revealed it: metadata_log (the controller's record), sampler (protocol samples), log_dir (the log-dir
    agent's reading of a disk) or job."""
    brokers: list[int] = []
    """Broker ids involved: who left or joined the ISR, who truncated, who diverged, the old and new leader, the
    broker fenced or unfenced."""
    leader: int | None = None
    """The partition's leader after the event (-1: none, the partition is offline)."""
    previous_leader: int | None = None
    """LEADER_CHANGE, OFFLINE_START, EPOCH_REGRESSION, HW_REGRESSION, DATA_LOSS: the leader before."""
    leader_epoch: int | None = None
    """The leader epoch after the event."""
    previous_leader_epoch: int | None = None
    """LEADER_CHANGE, EPOCH_REGRESSION, HW_REGRESSION, DATA_LOSS: the leader epoch before."""
    clean: bool | None = None
    """LEADER_CHANGE only: True when the new leader was in the previous ISR or ELR, False for an UNCLEAN election
    (a replica outside both became leader), None when there was nothing to judge against."""
    forced: bool | None = None
    """LEADER_CHANGE, unclean only: True when the topic forbids unclean elections (unclean.leader.election.enable
    false), so an operator forced it (ElectLeaders UNCLEAN, `kafka-leader-election.sh --election-type unclean`);
    False when the topic allows them, or when the controller elected one of the last known ELR as its own last
    resort (KIP-966: no ISR or ELR member available); None when the setting is unknown."""
    isr: list[int] | None = None
    """The in-sync replicas after the event (broker ids, in Kafka's order)."""
    previous_isr: list[int] | None = None
    """The in-sync replicas before the event."""
    lag: int | None = None
    """Messages: the follower lag (leader's log end offset - the follower's) of the broker that left or joined the
    ISR; for HW_STALLED, the leader's log end offset - the high watermark."""
    committed_lost: int | None = None
    """DATA_LOSS: committed messages a leader change destroyed, ``[offset_start, offset_end)``: the old leader epochs'
    committed end - where the new leader's log leaves them (from its epoch lineage), whatever was written since.
    HW_REGRESSION carries it only for a partition without any known lineage (pre-0.11 message formats): the
    previous high watermark - the new one."""
    uncommitted_lost: int | None = None
    """EPOCH_DIVERGENCE, LOG_TRUNCATION: of the offsets at stake, those above every committed offset: messages a
    leader appended that no ISR ever covered (acknowledged at most to acks=0/1 producers). None when the committed
    end is unknown."""
    truncated: int | None = None
    """LOG_TRUNCATION: messages a replica removed from its log, its previous log end offset - the new one."""
    offset_start: int | None = None
    """First offset at stake (inclusive)."""
    offset_end: int | None = None
    """End of the offsets at stake (exclusive, like a log end offset): ``[offset_start, offset_end)``."""
    message: str
    """One line for a human, naming the partition."""
    elr: list[int] | None = None
    """ELR_CHANGE: the eligible leader replicas after the event (KIP-966)."""
    previous_elr: list[int] | None = None
    """ELR_CHANGE: the eligible leader replicas before the event."""
    uncommitted_counted: int | None = None
    """EPOCH_DIVERGENCE, LOG_TRUNCATION: of ``uncommitted_lost``, the offsets no earlier event counted for the same
    leader change (the old leader's divergence and its truncation, or two replicas' tails, cover the same
    offsets): what this event adds to ``replmon_uncommitted_messages_lost_total``. Summed over a leader change's
    events it is the size of the union of their never-committed tails."""
    replicas: list[int] | None = None
    """REPLICAS_CHANGE: the assigned replicas after the event (during a reassignment, old and new together)."""
    previous_replicas: list[int] | None = None
    """REPLICAS_CHANGE: the assigned replicas before the event."""
    adding_replicas: list[int] | None = None
    """REPLICAS_CHANGE: the replicas the reassignment in flight is adding (empty when none is in flight; None when
    the collector could not tell)."""
    removing_replicas: list[int] | None = None
    """REPLICAS_CHANGE: the replicas the reassignment in flight will remove."""


class EventTypeSpec(NamedTuple):
    """What an event type means, for operators (docs/events.md) and for the tests that hold detection to it."""

    severities: tuple[Severity, ...]
    severity_rule: str
    meaning: str
    causes: str


EVENT_TYPES: dict[EventType, EventTypeSpec] = {
    EventType.ISR_SHRINK: EventTypeSpec(
        (Severity.WARNING,), "warning",
        "A replica left the ISR (one event per broker that left; `brokers`, `lag`, `isr`, `previous_isr`).",
        "The follower stopped fetching or fell behind for longer than the broker's replica.lag.time.max.ms: its "
        "broker is down, paused (GC, SIGSTOP), partitioned off, or its disk or network is slow."),
    EventType.ISR_EXPAND: EventTypeSpec(
        (Severity.INFO,), "info",
        "A replica joined the ISR again (one event per broker that joined).",
        "The follower caught up with the leader's log end offset."),
    EventType.LEADER_CHANGE: EventTypeSpec(
        (Severity.INFO, Severity.CRITICAL), "critical when unclean (`clean` false), else info",
        "The leader or the leader epoch changed (`leader`, `previous_leader`, the epochs, `clean`).",
        "A controlled shutdown or a preferred-leader election (clean), the leader's broker failing (clean when a "
        "replica of the ISR or ELR took over), or an unclean election (unclean.leader.election.enable, or an "
        "operator's ElectLeaders UNCLEAN): a replica outside the ISR and ELR became leader and what only the old "
        "leader held is lost."),
    EventType.HW_REGRESSION: EventTypeSpec(
        (Severity.CRITICAL,), "critical",
        "The partition's high watermark went down from `offset_end` to `offset_start` (the loss itself is "
        "DATA_LOSS; `committed_lost` here only for a partition without any epoch lineage).",
        "An unclean election: the new leader's log ends below what the old one had committed."),
    EventType.DATA_LOSS: EventTypeSpec(
        (Severity.CRITICAL,), "critical",
        "A leader change destroyed `committed_lost` committed messages, offsets `[offset_start, offset_end)`: the "
        "new leader's log leaves the old leader epochs (`previous_leader_epoch`) below what they had committed. "
        "Exact from the new leader's epoch lineage, whatever producers write after the election; reported again, "
        "for the further offsets only, when later evidence (an agent's reading of the old leader's disk) shows "
        "more was committed.",
        "An unclean election (a replica outside the ISR and ELR became leader), or a clean one after a replica "
        "lost acknowledged data on disk (an unflushed log after a power loss)."),
    EventType.LOG_TRUNCATION: EventTypeSpec(
        (Severity.WARNING,), "warning",
        "A replica's log end offset went down by `truncated` messages (`brokers`: whose); `uncommitted_lost` of "
        "them had never been committed.",
        "A follower truncating to its new leader's log after a leader change (messages it held that the leader "
        "never had), or a replica recovering from an unclean shutdown."),
    EventType.EPOCH_DIVERGENCE: EventTypeSpec(
        (Severity.WARNING, Severity.CRITICAL), "critical when the range holds committed offsets (or the committed "
        "end is unknown); warning for a never-committed tail (`uncommitted_lost` messages)",
        "A replica's leader-epoch lineage disagrees with its leader's from `offset_start` on: the same offsets hold "
        "different messages.",
        "An unclean election, or a leader change that left a replica with a tail the new leader does not have "
        "(it truncates it when it fetches again)."),
    EventType.EPOCH_REGRESSION: EventTypeSpec(
        (Severity.CRITICAL,), "critical",
        "Metadata reported a leader epoch below one already seen.",
        "A broker answering with stale metadata (it has not caught up with the controller), or a recreated "
        "topic read without its topic id."),
    EventType.UNDER_MIN_ISR_START: EventTypeSpec(
        (Severity.CRITICAL,), "critical",
        "The ISR is below the topic's min.insync.replicas: acks=all writes fail.",
        "Followers down or lagging."),
    EventType.UNDER_MIN_ISR_END: EventTypeSpec(
        (Severity.INFO,), "info", "The ISR is back at min.insync.replicas or above.", "Followers caught up."),
    EventType.OFFLINE_START: EventTypeSpec(
        (Severity.CRITICAL,), "critical", "The partition has no leader: nobody can read or write it.",
        "Every replica of the ISR (and ELR) is down, and no unclean election is allowed."),
    EventType.OFFLINE_END: EventTypeSpec(
        (Severity.INFO,), "info", "The partition has a leader again (a LEADER_CHANGE follows with its judgement).",
        "A replica came back, or an unclean election."),
    EventType.HW_STALLED: EventTypeSpec(
        (Severity.WARNING,), "warning",
        "The high watermark stayed below the leader's log end offset, unmoved, for over stream.hw_stalled_after_s "
        "while the leader appended (`lag`: how far behind).",
        "A follower of the ISR that stopped fetching but has not been dropped yet, or a stuck leader."),
    EventType.ISR_FLAPPING: EventTypeSpec(
        (Severity.WARNING,), "warning",
        "More than stream.flapping_threshold ISR shrinks and expands within stream.flapping_window_s.",
        "A follower at the edge of replica.lag.time.max.ms: GC pauses, an overloaded broker or disk, a flaky "
        "network."),
    EventType.STALE: EventTypeSpec(
        (Severity.WARNING,), "warning",
        "No sample of the partition for over stream.stale_after_s. When one micro-batch finds most of a cluster's "
        "partitions silent, a single cluster-level STALE (no `topic`, no `partition`) stands for them.",
        "The collector is down or cannot reach the cluster, or the samples topic is not delivered to the job."),
    EventType.PARTITION_FORGOTTEN: EventTypeSpec(
        (Severity.INFO,), "info",
        "The job stopped tracking the partition: no sample of it for over stream.forget_after_s while the "
        "cluster's other partitions were sampled. Its state and its series are dropped (it no longer counts as "
        "stale); a sample that comes again starts it afresh.",
        "Its topic was deleted, or it left the collector's topic selection (`clusters[].topics`). A partition "
        "still in the cluster's metadata is sampled every cycle, whether its leader answers or not."),
    EventType.ELR_CHANGE: EventTypeSpec(
        (Severity.INFO,), "info",
        "The eligible leader replicas (KIP-966) changed (`elr`, `previous_elr`; `brokers`: who entered or left): "
        "replicas out of the ISR that still hold every committed message, whom the controller may elect cleanly.",
        "The ISR fell below min.insync.replicas (the replicas that leave it then stay eligible), a replica came "
        "back into the ISR or was elected, or the controller cleared the ELR (ClearElrRecord, a topic's "
        "min.insync.replicas changed)."),
    EventType.BROKER_FENCED: EventTypeSpec(
        (Severity.INFO, Severity.WARNING), "info after a controlled shutdown, else warning",
        "The controller fenced a broker (`brokers`): it leads no partition and leaves every ISR; from the "
        "controller's metadata log (a log-dir agent), at the controller's time.",
        "The broker's heartbeats stopped for broker.session.timeout.ms (its process died or froze, or it is cut "
        "off from the controller), it finished a controlled shutdown (a planned stop or rolling restart), it "
        "registered again after a restart (fenced until it catches up), or it was unregistered "
        "(`kafka-cluster.sh unregister`)."),
    EventType.BROKER_UNFENCED: EventTypeSpec(
        (Severity.INFO,), "info",
        "The controller unfenced a broker (`brokers`): it may lead and rejoin ISRs again.",
        "The broker (re)started and caught up with the metadata log."),
    EventType.REPLICAS_CHANGE: EventTypeSpec(
        (Severity.INFO,), "info",
        "The partition's assigned replicas changed (`replicas`, `previous_replicas`; `brokers`: who joined or left "
        "the assignment; `adding_replicas` and `removing_replicas` while a reassignment is in flight). A "
        "reassignment shows twice: when it starts (the new replicas added beside the old ones) and when it "
        "completes (the old ones removed). A replica removed from the assignment leaves the ISR with it: that is "
        "no ISR_SHRINK; and while a reassignment is in flight the replicas it is adding do not count in the "
        "replication factor (no under-replicated partition for them, as Kafka's own UnderReplicatedPartitions).",
        "A partition reassignment (kafka-reassign-partitions.sh, Cruise Control, AlterPartitionReassignments: "
        "replicas moved to other brokers, or the replication factor changed) started, completed or was cancelled."),
}
"""Every event type, once: its severities, what it means and what causes it."""


def event_id(*parts: object) -> str:
    """sha1 of the parts that identify an event: cluster, topic, partition, type, the sample (time, cycle)
    that triggered it, and the values that tell it from its neighbours."""
    raw = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(raw.encode()).hexdigest()
