"""A silent cluster's partition STALE events collapse into one cluster-level STALE event (streaming.silence)."""

from __future__ import annotations

from typing import Any

from replmon.contracts.events import Event, EventType, Severity, event_id
from streaming.silence import collapse_stale, compact_json


def stale(cluster: str, topic: str, partition: int, now_ms: int = 5_000) -> dict[str, Any]:
    return Event(
        event_id=event_id(cluster, topic, partition, EventType.STALE, "expire", 1_000, 1), type=EventType.STALE,
        severity=Severity.WARNING, cluster=cluster, topic=topic, partition=partition, event_time_ms=now_ms,
        detected_time_ms=now_ms, message=f"no sample of {topic}-{partition} for 31 s",
    ).model_dump(mode="json")


def other(cluster: str) -> dict[str, Any]:
    return Event(event_id=event_id(cluster, "t", 0, "x"), type=EventType.ISR_SHRINK, severity=Severity.WARNING,
                 cluster=cluster, topic="t", partition=0, event_time_ms=1, detected_time_ms=2,
                 message="shrink").model_dump(mode="json")


def test_a_silent_clusters_partitions_are_one_cluster_level_event() -> None:
    silent = [stale("east", f"orders{t}", p, now_ms=5_000 + p) for t in range(7) for p in range(3)]
    lone = stale("west", "audit", 0)
    events = [other("east"), *silent[:10], lone, *silent[10:], other("west")]
    asked: list[int] = []

    def known() -> dict[str, int]:
        asked.append(1)
        return {"east": 21, "west": 50}

    out = collapse_stale(events, known)
    assert [e["type"] for e in out] == ["ISR_SHRINK", "STALE", "STALE", "ISR_SHRINK"]
    cluster_event = out[1]
    assert (cluster_event["cluster"], cluster_event["topic"], cluster_event["partition"]) == ("east", None, None)
    assert "21 partitions" in cluster_event["message"] and "and 2 more" in cluster_event["message"]
    assert cluster_event["event_time_ms"] == 5_000 and cluster_event["detected_time_ms"] == 5_002
    assert out[2] is lone  # one partition of a 50-partition cluster: its own event
    assert asked == [1]
    Event.model_validate(cluster_event)
    # a replayed batch gives the same id; another set of partitions another
    assert collapse_stale(events, known)[1]["event_id"] == cluster_event["event_id"]
    assert collapse_stale(silent[1:], known)[0]["event_id"] != cluster_event["event_id"]


def test_a_few_quiet_partitions_stay_partition_events() -> None:
    events = [stale("east", "gone", 0), stale("east", "gone", 1)]
    assert collapse_stale(events, lambda: {"east": 100}) == events
    single = [stale("east", "gone", 0)]
    assert collapse_stale(single, lambda: {}) == single  # the partition counts are not even asked


def test_compact_json_is_the_payloads_format() -> None:
    e = stale("east", "orders", 0)
    assert compact_json(e) == Event.model_validate(e).model_dump_json()
