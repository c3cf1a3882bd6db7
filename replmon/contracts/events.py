"""The event record the streaming job publishes to the events topic and the history: defined here once.

The Spark schema of the events topic is derived from :class:`Event`; field types stay simple (str, int,
bool, list[int] and optionals of those). Offsets follow Kafka: a range ``[offset_start, offset_end)`` excludes
its end, like a log end offset.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class EventType(StrEnum):
    ISR_SHRINK = "ISR_SHRINK"
    ISR_EXPAND = "ISR_EXPAND"
    LEADER_CHANGE = "LEADER_CHANGE"
    HW_REGRESSION = "HW_REGRESSION"
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


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Event(BaseModel):
    """One replication event of one partition (``topic``/``partition`` are None for a cluster-level event)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str
    """Deterministic (see :func:`event_id`): replaying the same samples yields the same ids."""
    type: EventType
    severity: Severity
    cluster: str
    topic: str | None = None
    partition: int | None = None
    event_time_ms: int
    """The sample time that revealed the event (for STALE: the processing time that noticed the silence)."""
    detected_time_ms: int
    brokers: list[int] = []
    """The brokers involved: who left or joined the ISR, who truncated, who diverged, ..."""
    leader: int | None = None
    previous_leader: int | None = None
    leader_epoch: int | None = None
    previous_leader_epoch: int | None = None
    clean: bool | None = None
    """LEADER_CHANGE only: False for an UNCLEAN election (new leader outside the previous ISR and ELR)."""
    isr: list[int] | None = None
    previous_isr: list[int] | None = None
    lag: int | None = None
    """Messages: the follower lag of the broker that left or joined the ISR."""
    committed_lost: int | None = None
    """HW_REGRESSION: previous high watermark - new high watermark."""
    truncated: int | None = None
    """LOG_TRUNCATION: previous log end offset - new log end offset."""
    offset_start: int | None = None
    offset_end: int | None = None
    """The offsets at stake, ``[offset_start, offset_end)``."""
    message: str


def event_id(*parts: object) -> str:
    """sha1 of the parts that identify an event: cluster, topic, partition, type, the sample (time, cycle)
    that triggered it, and the values that tell it from its neighbours."""
    raw = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(raw.encode()).hexdigest()
