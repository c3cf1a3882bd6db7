"""Pure parts of the protocol sampler, without a cluster: lineage derivation, request encoding and building,
topic patterns, sample assembly."""

from __future__ import annotations

import base64
import uuid

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest

from collectors.protocol import requests as rq
from collectors.protocol.assemble import CycleAnswers, partition_sample
from collectors.protocol.lineage import LineageBook, clip_to_log_start
from collectors.protocol.sampler import LEADER_LABELS
from collectors.protocol.topics import TopicSelector
from collectors.protocol.wire import EncodedRequest, encode_list_offsets, list_offsets_request
from collectors.samples import EpochEntry, ReplicaError, kafka_uuid, parse_sample, to_json
from replmon.config import TopicFilter
from replmon.errors import ReplmonError


# ---------------------------------------------------------------------------------------------- lineage
def end_offset_for(cache: dict[int, int], log_end: int, q: int) -> tuple[int, int]:
    """Kafka's LeaderEpochFileCache.endOffsetFor, written from its documented contract (the oracle)."""
    epochs = sorted(cache)
    if q == -1:
        return -1, -1
    if epochs and q == epochs[-1]:
        return q, log_end
    higher = [e for e in epochs if e > q]
    if not higher:
        return -1, -1
    floor = [e for e in epochs if e <= q]
    return (floor[-1] if floor else q), cache[higher[0]]


def walk_to_end(book: LineageBook, tp: tuple[str, int], leader: int, cache: dict[int, int], log_start: int,
                full_refresh: bool = False, max_cycles: int = 50) -> tuple[list[EpochEntry], int]:
    """Drive the book as the sampler does (one question per cycle) until a lineage comes out."""
    epoch = max(cache)
    log_end = max(cache.values()) + 10
    for cycle in range(1, max_cycles + 1):
        ask = book.plan({tp: (leader, epoch)}, full_refresh=full_refresh and cycle == 1)
        if tp in ask:
            answer_epoch, end = end_offset_for(cache, log_end, ask[tp].query)
            done = book.answer(tp, answer_epoch, end, log_start)
            if done is not None:
                return done, cycle
        settled = book.settle({tp: log_start})
        if tp in settled:
            return settled[tp], cycle
    raise AssertionError("walk did not finish")


def as_entries(cache: dict[int, int]) -> list[EpochEntry]:
    return [EpochEntry(leader_epoch=e, start_offset=s) for e, s in sorted(cache.items())]


@pytest.mark.parametrize("cache, log_start", [
    ({0: 0}, 0),
    ({0: 0, 1: 40}, 0),
    ({0: 0, 2: 50, 5: 90}, 0),
    ({0: 7, 3: 20}, 7),               # log start moved: epoch 0 starts at the log start
    ({3: 10, 4: 20, 9: 35}, 10),      # first epoch above 0 (older entries truncated away)
    ({1: 5, 2: 6, 3: 7, 4: 8}, 5),    # consecutive epochs (the ambiguous answers)
])
def test_lineage_walk_finds_the_leader_cache(cache: dict[int, int], log_start: int) -> None:
    lineage, _ = walk_to_end(LineageBook(), ("t", 0), 1, cache, log_start)
    assert lineage == as_entries(cache)


def test_lineage_walk_stops_at_a_known_entry() -> None:
    book, tp = LineageBook(), ("t", 0)
    old = {0: 0, 2: 50, 5: 90}
    lineage, cycles = walk_to_end(book, tp, 1, old, 0)
    assert lineage == as_entries(old) and cycles == 2  # epoch 0 needs no question
    new = {**old, 6: 120}  # clean leader change: one new epoch on top of the same history
    lineage, cycles = walk_to_end(book, tp, 2, new, 0)
    assert lineage == as_entries(new) and cycles == 2
    # a full refresh with nothing changed costs one question
    lineage, cycles = walk_to_end(book, tp, 2, new, 0, full_refresh=True)
    assert lineage == as_entries(new) and cycles == 1
    assert book.plan({tp: (2, 6)}, full_refresh=False) == {}  # steady: no question at all


def test_lineage_after_unclean_election_drops_what_the_new_leader_never_had() -> None:
    book, tp = LineageBook(), ("t", 0)
    walk_to_end(book, tp, 1, {0: 0, 1: 100}, 0)
    lineage, _ = walk_to_end(book, tp, 2, {0: 0, 2: 80}, 0)  # new leader never saw epoch 1
    assert lineage == as_entries({0: 0, 2: 80})


def test_lineage_walk_restarts_when_the_epoch_moves() -> None:
    book, tp = LineageBook(), ("t", 0)
    ask = book.plan({tp: (1, 4)}, full_refresh=False)
    assert ask[tp].query == 3
    ask = book.plan({tp: (2, 5)}, full_refresh=False)
    assert ask[tp].leader == 2 and ask[tp].query == 4


def test_clip_to_log_start() -> None:
    lineage = as_entries({0: 0, 2: 50, 5: 90})
    assert clip_to_log_start(lineage, 60) == as_entries({2: 60, 5: 90})
    assert clip_to_log_start(lineage, 90) == as_entries({5: 90})
    assert clip_to_log_start(lineage, 0) == lineage


# ---------------------------------------------------------------------------------------------- requests
@pytest.mark.parametrize("version", [6, 8, 10, 11])
def test_hand_encoded_list_offsets_matches_kafka_python(version: int) -> None:
    parts = {"a": [0, 1, 2], "b" * 300: list(range(200))}
    topic_cls = ListOffsetsRequest.ListOffsetsTopic
    ref = ListOffsetsRequest(
        replica_id=-2, isolation_level=1, timeout_ms=0,
        topics=[topic_cls(name=t, partitions=[topic_cls.ListOffsetsPartition(
            partition_index=p, current_leader_epoch=-1, timestamp=-2) for p in ps]) for t, ps in parts.items()])
    assert encode_list_offsets(version, -2, 1, -2, parts) == bytes(ref.encode(version=version))


def test_encoded_request_frames_like_kafka_python() -> None:
    req = list_offsets_request(10, -1, 0, -1, {"t": [0, 1]}, "x")
    assert isinstance(req, EncodedRequest)
    req.with_header(correlation_id=7, client_id="me")
    frame = req.encode(framed=True, header=True)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded = ListOffsetsRequest.decode(frame[4:], version=10, header=True)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in decoded.topics] == [("t", [0, 1])]
    assert req.header.get_response_class().__name__.startswith("ListOffsetsResponse")


def meta(topic: str, partition: int, leader: int, replicas: list[int], **kw: object) -> rq.PartitionMeta:
    fields: dict[str, object] = dict(topic=topic, topic_id=None, partition=partition, leader=leader,
                                     leader_epoch=3, replicas=replicas, isr=list(replicas), elr=[],
                                     last_known_elr=[], offline_replicas=[])
    fields.update(kw)
    return rq.PartitionMeta(**fields)  # type: ignore[arg-type]


def test_request_count_is_per_broker_not_per_partition() -> None:
    metas = [meta(f"t{t}", p, 1 + (p % 3), [1 + (p % 3), 1 + ((p + 1) % 3), 1 + ((p + 2) % 3)])
             for t in range(6) for p in range(100)]
    leads, hosts = rq.group_by_broker(metas)
    calls = rq.list_offsets_requests(leads, hosts, version=10, timeout_ms=1000)
    assert len(calls) == 3 * 3 + 3
    per_broker_leo = {b: sum(len(ps) for ps in parts.values()) for b, parts in hosts.items()}
    assert per_broker_leo == {1: 600, 2: 600, 3: 600}
    labels = sorted(label for b, label, _ in calls if b == 1)
    assert labels == sorted([rq.HIGH_WATERMARK, rq.LAST_STABLE_OFFSET, rq.LOG_START_OFFSET, rq.LOG_END_OFFSET])


def test_a_steady_layout_leaves_nothing_to_ask_after_the_metadata() -> None:
    """The early questions (previous cycle's layout) cover a steady cycle; what moved or is new is asked after."""
    before = [meta("t", 0, 1, [1, 2, 3]), meta("t", 1, 2, [2, 3, 1]), meta("u", 0, 3, [3, 1, 2])]
    leads, hosts = rq.group_by_broker(before)
    assert rq.unasked(leads, leads) == {} and rq.unasked(hosts, hosts) == {}
    # t-1's leadership moves from 2 to 3; a new partition t-2 on brokers 1, 2, 4
    after = [meta("t", 0, 1, [1, 2, 3]), meta("t", 1, 3, [2, 3, 1]), meta("u", 0, 3, [3, 1, 2]),
             meta("t", 2, 4, [4, 1, 2])]
    new_leads, new_hosts = rq.group_by_broker(after)
    assert rq.unasked(new_leads, leads) == {3: {"t": [1]}, 4: {"t": [2]}}
    assert rq.unasked(new_hosts, hosts) == {1: {"t": [2]}, 2: {"t": [2]}, 4: {"t": [2]}}
    assert rq.unasked(new_leads, {}) == {b: dict(t) for b, t in new_leads.items()}


# ---------------------------------------------------------------------------------------------- topics
def test_topic_patterns_full_match_and_internal_topics_off_by_default() -> None:
    sel = TopicSelector.from_config(TopicFilter(include=["orders.*", "pay"], exclude=[".*-dlq"]))
    assert sel.wants("orders", False) and sel.wants("orders.eu", False)
    assert not sel.wants("orders-dlq", False)
    assert not sel.wants("payments", False)  # full match, not search
    assert not sel.wants("__consumer_offsets", True)
    assert TopicSelector.from_config(TopicFilter(include_internal=True)).wants("__consumer_offsets", True)


def test_a_pattern_matching_nothing_is_reported_once() -> None:
    sel = TopicSelector.from_config(TopicFilter(include=["orders", "nothing.*"]))
    assert sel.unmatched_includes([("orders", False)]) == ["nothing.*"]
    assert sel.unmatched_includes([("orders", False)]) == []


def test_a_bad_pattern_is_one_clear_error() -> None:
    with pytest.raises(ReplmonError, match="not a valid regular expression"):
        TopicSelector.from_config(TopicFilter(include=["("]), "prod")


# ---------------------------------------------------------------------------------------------- samples
def test_sample_assembly_marks_unreachable_and_missing_replicas() -> None:
    m = meta("t", 0, 1, [1, 2, 3], offline_replicas=[3])
    answers = CycleAnswers(
        high_watermark={("t", 0): (0, 90)}, last_stable_offset={("t", 0): (0, 85)},
        log_start_offset={("t", 0): (0, 0)},
        log_end_offset={1: {("t", 0): (0, 100)}, 3: {("t", 0): (56, -1)}}, unreachable={2})
    sample = partition_sample(m, answers, cluster="c", collector_id="x", cycle=4, sample_time_ms=1, config=None,
                              lineage=[EpochEntry(leader_epoch=3, start_offset=10)],
                              leo_label=rq.LOG_END_OFFSET, leader_labels=LEADER_LABELS)
    assert (sample.high_watermark, sample.last_stable_offset, sample.log_start_offset) == (90, 85, 0)
    by_broker = {r.broker_id: r for r in sample.replica_offsets}
    assert by_broker[1].log_end_offset == 100 and by_broker[1].error is None
    assert by_broker[2].error == ReplicaError.UNREACHABLE and by_broker[2].log_end_offset is None
    assert by_broker[3].error == ReplicaError.OFFLINE
    assert parse_sample(to_json(sample)) == sample


def test_sample_of_a_partition_whose_leader_is_unreachable() -> None:
    m = meta("t", 0, 2, [1, 2])
    answers = CycleAnswers(log_end_offset={1: {("t", 0): (3, -1)}}, unreachable={2})
    sample = partition_sample(m, answers, cluster="c", collector_id="x", cycle=0, sample_time_ms=1, config=None,
                              lineage=None, leo_label=rq.LOG_END_OFFSET, leader_labels=LEADER_LABELS)
    assert sample.high_watermark is None and sample.error == "leader 2 unreachable"
    assert [r.error for r in sample.replica_offsets] == [ReplicaError.NOT_HOSTED, ReplicaError.UNREACHABLE]


def test_topic_ids_are_written_as_kafka_writes_them() -> None:
    """Uuid.toString(): URL-safe base64 without padding, as in partition.metadata; the zero id is no id."""
    on_disk = "mTOJ9eNIQlK7J1Ix-ndbIw"
    as_uuid = uuid.UUID(bytes=base64.urlsafe_b64decode(on_disk + "=="))
    assert kafka_uuid(as_uuid) == kafka_uuid(str(as_uuid)) == on_disk
    assert kafka_uuid(uuid.UUID(int=0)) is None
