"""A silent cluster is one event: the STALE events of one micro-batch that cover most of a cluster's partitions
become a single cluster-level STALE event. Pure.

Every partition's staleness timer runs in its own state bucket, so a collector that stops (or cannot reach its
cluster, or whose samples stop reaching the job) would report one STALE per partition: a storm of thousands for
one cause. The partitions of a cycle arrive in the same micro-batches, so their timers fire together; the driver
sees them side by side and reports the cause once. A few partitions going quiet (a deleted topic) stay
per-partition events. Each partition is still marked stale in the metrics.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from replmon.contracts.events import Event, EventSource, EventType, Severity, event_id

SILENT_SHARE = 0.5
"""A cluster whose STALE events in one micro-batch cover at least this share of its known partitions is silent."""


def collapse_stale(
    events: list[dict[str, Any]], partitions_of: Callable[[], Mapping[str, int]], share: float = SILENT_SHARE
) -> list[dict[str, Any]]:
    """``events`` (Event fields as dicts) with each silent cluster's partition STALE events replaced by one
    cluster-level STALE (no topic, no partition), placed where the first of them was. ``partitions_of``: the
    partitions known per cluster, asked only when a cluster has more than one STALE event in the batch. The new
    event's id derives from the ids it replaces: a replayed batch yields the same one."""
    stale: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["type"] == EventType.STALE and e.get("topic") is not None:
            stale[e["cluster"]].append(e)
    chosen = silent_clusters({cluster: len(group) for cluster, group in stale.items()}, partitions_of, share)
    if not chosen:
        return events
    silent = {cluster: cluster_stale(cluster, stale[cluster]) for cluster in chosen}
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    for e in events:
        cluster = e["cluster"]
        if e["type"] == EventType.STALE and e.get("topic") is not None and cluster in silent:
            if cluster not in placed:  # the first one's place; the others go
                placed.add(cluster)
                out.append(silent[cluster])
            continue
        out.append(e)
    return out


def silent_clusters(stale: Mapping[str, int], partitions_of: Callable[[], Mapping[str, int]],
                    share: float = SILENT_SHARE) -> set[str]:
    """The clusters whose ``stale`` partition STALE events of one micro-batch (a count per cluster) make them silent:
    more than one, covering at least ``share`` of their known partitions (``partitions_of``, asked only when a
    cluster has more than one)."""
    candidates = {cluster: count for cluster, count in stale.items() if count > 1}
    if not candidates:
        return set()
    known = partitions_of()
    return {cluster for cluster, count in candidates.items() if count >= share * known.get(cluster, 0)}


def cluster_stale(cluster: str, group: list[dict[str, Any]]) -> dict[str, Any]:
    """One STALE event for ``group``, the partition STALE events of a silent ``cluster``."""
    topics = sorted({e["topic"] for e in group})
    first = min(e["event_time_ms"] for e in group)
    detected = max(e["detected_time_ms"] for e in group)
    shown = ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")
    return Event(
        event_id=event_id(cluster, None, None, EventType.STALE, "cluster", *sorted(e["event_id"] for e in group)),
        type=EventType.STALE, severity=Severity.WARNING, cluster=cluster, event_time_ms=first,
        detected_time_ms=detected, source=EventSource.JOB,
        message=(
            f"cluster {cluster}: no sample of {len(group)} partitions (topics {shown}) for over "
            "stream.stale_after_s: the collector is down or cannot reach the cluster, or its samples do not reach "
            "the job"
        ),
    ).model_dump(mode="json")


def compact_json(event: dict[str, Any]) -> str:
    """An event dict as the job's payloads hold events (pydantic's compact JSON)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)
