"""Pure parts of the protocol sampler, without a cluster: lineage derivation, request encoding and building,
topic patterns, sample assembly."""

from __future__ import annotations

import base64
import struct
import uuid
from typing import Any, cast

import kafka.errors as Errors
import pytest
from kafka.protocol.admin.topics import DescribeTopicPartitionsResponse, ListPartitionReassignmentsResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.parser import KafkaProtocol

from collectors.protocol import requests as rq
from collectors.protocol.assemble import CycleAnswers, SampleAssembler
from collectors.protocol.client import ClusterClient
from collectors.protocol.lineage import LineageBook, clip_to_log_start
from collectors.protocol.sampler import LEADER_LABELS, ClusterSampler
from collectors.protocol.topics import TopicSelector, topic_changes
from collectors.protocol.wire import EncodedRequest, decode_list_offsets, encode_list_offsets, list_offsets_request
from replmon.contracts.samples import (
    MAX_REPLICAS,
    EpochEntry,
    PartitionSample,
    ReplicaError,
    ReplicaOffsets,
    kafka_uuid,
    parse_sample,
    to_json,
    trusted,
)
from replmon.core.config import ClusterConfig, CollectorConfig, SecurityConfig, TopicFilter
from replmon.core.errors import ReplmonError


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


@pytest.mark.parametrize("version", [6, 8, 11])
def test_list_offsets_answers_read_by_hand_as_kafka_python_reads_them(version: int) -> None:
    response_cls = ListOffsetsResponse[version]
    topic_cls = response_cls.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    answers = {"a": [(0, 0, 120), (1, 6, -1), (2, 0, 2**40)], "b" * 200: [(i, 0, 10 * i) for i in range(200)]}
    response = response_cls(throttle_time_ms=3, topics=[
        topic_cls(name=name, partitions=[part_cls(partition_index=i, error_code=code, timestamp=-1, offset=offset,
                                                  leader_epoch=4) for i, code, offset in parts])
        for name, parts in answers.items()])
    body = bytes(response.encode(version=version))
    decoded = decode_list_offsets(body)
    expected = {(name, i): (code, offset) for name, parts in answers.items() for i, code, offset in parts}
    assert decoded.offsets == expected == rq.parse_list_offsets(response_cls.decode(body, version=version))
    assert decoded.throttle_time_ms == 3

    parser = KafkaProtocol(client_id="replmon-test")
    correlation_id = parser.send_request(list_offsets_request(version, -2, 0, -1, {"a": [0, 1, 2]}, "x"))
    assert parser.receive_bytes(framed_response(correlation_id, body)) == [(correlation_id, decoded)]
    partition_with_tags = body.replace(struct.pack(">ihqqi", 0, 0, -1, 120, 4) + b"\x00",
                                       struct.pack(">ihqqi", 0, 0, -1, 120, 4) + b"\x01\x07\x02hi")
    assert len(partition_with_tags) == len(body) + 4 and decode_list_offsets(partition_with_tags) == decoded
    for malformed in (body[:-1], body[:30], body + b"\x00"):
        correlation_id = parser.send_request(list_offsets_request(version, -2, 0, -1, {"a": [0]}, "x"))
        with pytest.raises(Errors.KafkaProtocolError):
            parser.receive_bytes(framed_response(correlation_id, malformed))
        parser = KafkaProtocol(client_id="replmon-test")  # a protocol error leaves the parser mid-frame


DTP_RESPONSE = DescribeTopicPartitionsResponse[0]
DTP_TOPIC = DTP_RESPONSE.DescribeTopicPartitionsResponseTopic
DTP_PARTITION = DTP_TOPIC.DescribeTopicPartitionsResponsePartition


def walk_kafka_python_page(response: Any) -> rq.DescribePage:
    """The oracle: kafka-python's own decoding of the answer, walked attribute by attribute."""
    topics, partitions = [], []
    for t in response.topics:
        topics.append(rq.TopicMeta(t.name, bool(t.is_internal), t.error_code))
        for p in t.partitions:
            partitions.append(rq.PartitionMeta(
                topic=t.name, topic_id=kafka_uuid(t.topic_id), partition=p.partition_index, leader=p.leader_id,
                leader_epoch=p.leader_epoch, replicas=list(p.replica_nodes), isr=list(p.isr_nodes),
                elr=None if p.eligible_leader_replicas is None else list(p.eligible_leader_replicas),
                last_known_elr=None if p.last_known_elr is None else list(p.last_known_elr),
                offline_replicas=list(p.offline_replicas or []), error_code=p.error_code, internal=bool(t.is_internal)))
    cursor = response.next_cursor
    return rq.DescribePage(topics, partitions, (cursor.topic_name, cursor.partition_index) if cursor else None,
                           response.throttle_time_ms)


def framed_response(correlation_id: int, body: bytes, header_tags: bytes = b"\x00") -> bytes:
    payload = struct.pack(">i", correlation_id) + header_tags + body
    return struct.pack(">i", len(payload)) + payload


def dtp_partition(i: int, wide: list[int]) -> Any:
    return DTP_PARTITION(
        error_code=0 if i % 7 else 9, partition_index=i, leader_id=-1 if i == 3 else 1 + i % 3, leader_epoch=i,
        replica_nodes=wide if i == 5 else [1, 2, 3], isr_nodes=[1, 2][: i % 3],
        eligible_leader_replicas=None if i % 2 else [2, 3], last_known_elr=[1] if i == 4 else None,
        offline_replicas=[3] if i == 6 else [])


@pytest.mark.parametrize("cursor", [None, ("b" * 200, 150)])
def test_describe_topic_partitions_read_by_hand_as_kafka_python_reads_it(cursor: tuple[str, int] | None) -> None:
    """Long names and arrays (two-byte varints), null and present ELRs, many replicas, a zero topic id, errors."""
    wide = list(range(1, 21))
    response = DTP_RESPONSE(
        throttle_time_ms=7,
        next_cursor=None if cursor is None else DTP_RESPONSE.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
        topics=[DTP_TOPIC(error_code=0, name="b" * 200, topic_id=uuid.UUID("993389f5-e348-4252-bb27-5231fa775b23"),
                          is_internal=False, topic_authorized_operations=-2147483648,
                          partitions=[dtp_partition(i, wide) for i in range(150)]),
                DTP_TOPIC(error_code=0, name="__consumer_offsets", topic_id=uuid.UUID(int=0), is_internal=True,
                          topic_authorized_operations=0, partitions=[]),
                DTP_TOPIC(error_code=3, name="gone", topic_id=uuid.UUID(int=0), is_internal=False,
                          topic_authorized_operations=0, partitions=[])])
    body = bytes(response.encode(version=0))
    decoded = rq.decode_describe_topic_partitions(body)
    assert decoded == walk_kafka_python_page(DTP_RESPONSE.decode(body, version=0))
    assert len(decoded.partitions) == 150 and decoded.cursor == cursor and decoded.throttle_time_ms == 7
    assert decoded.partitions[5].replicas == wide and decoded.partitions[4].last_known_elr == [1]
    assert decoded.partitions[1].elr is None and decoded.partitions[2].elr == [2, 3]  # null: not reported
    assert decoded.topics[1] == rq.TopicMeta("__consumer_offsets", True, 0)
    assert decoded.partitions[0].topic_id == "mTOJ9eNIQlK7J1Ix-ndbIw"

    # through kafka-python's own protocol parser, as the connection reads it off the socket
    parser = KafkaProtocol(client_id="replmon-test")
    correlation_id = parser.send_request(rq.describe_topic_partitions_request(cursor))
    assert parser.receive_bytes(framed_response(correlation_id, body)) == [(correlation_id, decoded)]


def test_describe_topic_partitions_skips_tagged_fields_and_refuses_a_malformed_answer() -> None:
    def tags(*fields: tuple[int, bytes]) -> bytes:
        return bytes([len(fields)]) + b"".join(bytes([tag, len(raw)]) + raw for tag, raw in fields)

    def ids(*values: int) -> bytes:
        return bytes([len(values) + 1]) + b"".join(struct.pack(">i", v) for v in values)

    topic_id = uuid.uuid4()
    partition = struct.pack(">hiii", 0, 4, 2, 9) + ids(1, 2) + ids(2) + b"\x00" + ids(1) + ids() + tags((0, b"xy"))
    body = (struct.pack(">i", 0) + b"\x02" + struct.pack(">h", 0) + b"\x02t" + topic_id.bytes + b"\x00"
            + b"\x02" + partition + struct.pack(">i", 0) + tags((1, b"abc"), (2, b""))
            + b"\x01" + b"\x02t" + struct.pack(">i", 5) + tags((0, b"z")) + tags((3, b"q")))
    page = rq.decode_describe_topic_partitions(body)
    assert page.cursor == ("t", 5) and page.topics == [rq.TopicMeta("t", False, 0)]
    assert page.partitions == [rq.PartitionMeta("t", kafka_uuid(topic_id), 4, 2, 9, [1, 2], [2], None, [1], [])]

    parser = KafkaProtocol(client_id="replmon-test")
    correlation_id = parser.send_request(rq.describe_topic_partitions_request(None))
    assert parser.receive_bytes(framed_response(correlation_id, body, tags((0, b"hello")))) == [(correlation_id, page)]

    with pytest.raises(ValueError, match="bytes past the end"):
        rq.decode_describe_topic_partitions(body + b"\x00")
    for malformed in (body[:-3], body[:40], body + b"\x00"):  # cut short, or longer than its fields
        parser = KafkaProtocol(client_id="replmon-test")
        correlation_id = parser.send_request(rq.describe_topic_partitions_request(None))
        with pytest.raises(Errors.KafkaProtocolError):
            parser.receive_bytes(framed_response(correlation_id, malformed))


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


def test_topic_changes_name_what_appeared_left_and_grew() -> None:
    changes = topic_changes({"orders": 6, "gone": 3, "same": 1}, {"orders": 12, "same": 1, "new": 2})
    assert changes.appeared == {"new": 2} and changes.left == {"gone": 3} and changes.resized == {"orders": (6, 12)}
    assert not topic_changes({"same": 1}, {"same": 1})


def no_client(*_args: Any, **_kwargs: Any) -> ClusterClient:
    """No client, for a sampler whose tests give it what it reads: a test that reached for one fails at once."""
    return cast(ClusterClient, None)


def test_a_topic_that_leaves_the_metadata_is_one_warning_naming_why(caplog: pytest.LogCaptureFixture) -> None:
    """The collector's side of PARTITION_FORGOTTEN: the topic's partitions are no longer sampled, and why."""
    cluster = ClusterConfig(name="prod", bootstrap_servers=["127.0.0.1:9092"],
                            security=SecurityConfig(username="monitor"))
    sampler = ClusterSampler(cluster, CollectorConfig(), "c1", client_factory=no_client)
    orders = [meta("orders", p, 1, [1, 2, 3]) for p in range(3)]
    with caplog.at_level("INFO", logger="collectors.protocol.sampler"):
        assert sampler._note_topics([*orders, meta("doomed", 0, 1, [1, 2, 3]), meta("doomed", 1, 2, [2, 3, 1])]) == []
        assert sampler._note_topics([*orders, meta("doomed", 0, 1, [1, 2, 3]), meta("doomed", 1, 2, [2, 3, 1])]) == []
        warnings = sampler._note_topics([*orders, meta("fresh", 0, 1, [1, 2, 3])])
        assert sampler._note_topics([*orders, meta("fresh", 0, 1, [1, 2, 3])]) == []
    assert warnings == ["cluster prod: topic doomed (2 partitions) left the cluster's metadata (deleted, or user "
                        "monitor lost DESCRIBE on it): its partitions are no longer sampled, and the streaming job "
                        "forgets them after stream.forget_after_s (PARTITION_FORGOTTEN)"]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [("INFO", "cluster prod: sampling 2 topics, 5 partitions"),
                     ("INFO", "cluster prod: sampling topic fresh (1 partition) from now on"),
                     ("WARNING", warnings[0])]


def test_a_partition_wider_than_the_contract_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Kafka sets no bound on a partition's replicas; a sample holds MAX_REPLICAS, and the job quarantines a wider
    one: the collector says so once per partition, beside the samples it still publishes."""
    sampler = ClusterSampler(ClusterConfig(name="prod", bootstrap_servers=["127.0.0.1:9092"]), CollectorConfig(),
                             "c1", client_factory=no_client)
    wide = meta("wide", 1, 1, list(range(1, MAX_REPLICAS + 2)))
    fits = meta("wide", 0, 1, list(range(1, MAX_REPLICAS + 1)))
    with caplog.at_level("WARNING", logger="collectors.protocol.sampler"):
        first = sampler._note_too_wide([fits, wide])
        assert sampler._note_too_wide([fits, wide]) == []
    assert first == [f"cluster prod: partition wide-1 has {MAX_REPLICAS + 1} replicas, more than the {MAX_REPLICAS} "
                     "a sample holds: the streaming job quarantines its samples (bad_length:replicas)"]
    assert [r.getMessage() for r in caplog.records] == first


def test_a_bad_pattern_is_one_clear_error() -> None:
    with pytest.raises(ReplmonError, match="not a valid regular expression"):
        TopicSelector.from_config(TopicFilter(include=["("]), "prod")


# ---------------------------------------------------------------------------------------------- samples
def assemble(m: rq.PartitionMeta, answers: CycleAnswers, cycle: int = 0, config: rq.TopicConfig | None = None,
             lineage: list[EpochEntry] | None = None) -> PartitionSample:
    """One sample, checked against the schema: the assembler builds without validating (samples.trusted)."""
    sample = SampleAssembler(answers, cluster="c", collector_id="x", cycle=cycle, sample_time_ms=1,
                             leo_label=rq.LOG_END_OFFSET, leader_labels=LEADER_LABELS).sample(m, config, lineage)
    validated = PartitionSample.model_validate(sample.model_dump())
    assert validated == sample and to_json(validated) == to_json(sample)  # the same values, the same JSON
    assert parse_sample(to_json(sample)) == sample
    return sample


def test_sample_assembly_marks_unreachable_and_missing_replicas() -> None:
    m = meta("t", 0, 1, [1, 2, 3], offline_replicas=[3])
    answers = CycleAnswers(
        high_watermark={("t", 0): (0, 90)}, last_stable_offset={("t", 0): (0, 85)},
        log_start_offset={("t", 0): (0, 0)},
        log_end_offset={1: {("t", 0): (0, 100)}, 3: {("t", 0): (56, -1)}}, unreachable={2})
    sample = assemble(m, answers, cycle=4, lineage=[EpochEntry(leader_epoch=3, start_offset=10)])
    assert (sample.high_watermark, sample.last_stable_offset, sample.log_start_offset) == (90, 85, 0)
    assert sample.error is None and sample.cycle == 4
    assert sample.epoch_lineage == [EpochEntry(leader_epoch=3, start_offset=10)]
    by_broker = {r.broker_id: r for r in sample.replica_offsets}
    assert by_broker[1].log_end_offset == 100 and by_broker[1].error is None
    assert by_broker[2].error == ReplicaError.UNREACHABLE and by_broker[2].log_end_offset is None
    assert by_broker[3].error == ReplicaError.OFFLINE


def test_reassignments_in_flight_read_as_kafka_python_decodes_them_and_go_into_the_samples() -> None:
    """ListPartitionReassignments: its answer (encoded and decoded by kafka-python) gives each partition being
    moved its adding and removing replicas; every other partition of the cycle has none; a refused or unanswered
    request leaves them unknown (None) in every sample."""
    topic, part = ListPartitionReassignmentsResponse.OngoingTopicReassignment, \
        ListPartitionReassignmentsResponse.OngoingTopicReassignment.OngoingPartitionReassignment
    answer = ListPartitionReassignmentsResponse(
        version=0, throttle_time_ms=0, error_code=0, error_message=None,
        topics=[topic(name="t", partitions=[part(partition_index=0, replicas=[1, 2, 3, 4], adding_replicas=[4],
                                                 removing_replicas=[3])])])
    decoded = ListPartitionReassignmentsResponse.decode(answer.encode(version=0), version=0)
    moving, code = rq.parse_list_partition_reassignments(decoded)
    assert (moving, code) == ({("t", 0): ([4], [3])}, 0)
    refused = ListPartitionReassignmentsResponse(version=0, throttle_time_ms=0, error_code=31,
                                                 error_message="denied", topics=[])
    assert rq.parse_list_partition_reassignments(refused) == ({}, 31)

    offsets = {("t", 0): (0, 90), ("t", 1): (0, 90)}
    answers = CycleAnswers(high_watermark=offsets, last_stable_offset=offsets, log_start_offset=offsets,
                           log_end_offset={b: offsets for b in (1, 2, 3, 4)}, reassignments=moving)
    assert rq.list_partition_reassignments_request(5_000).topics is None  # every partition's
    moved = assemble(meta("t", 0, 1, [1, 2, 3, 4], isr=[1, 2, 3]), answers)
    assert (moved.adding_replicas, moved.removing_replicas) == ([4], [3])
    still = assemble(meta("t", 1, 1, [1, 2, 3]), answers)
    assert (still.adding_replicas, still.removing_replicas) == ([], [])
    answers.reassignments = None
    unknown = assemble(meta("t", 0, 1, [1, 2, 3, 4], isr=[1, 2, 3]), answers)
    assert (unknown.adding_replicas, unknown.removing_replicas) == (None, None)


def test_sample_of_a_partition_whose_leader_is_unreachable() -> None:
    m = meta("t", 0, 2, [1, 2])
    answers = CycleAnswers(log_end_offset={1: {("t", 0): (3, -1)}}, unreachable={2})
    sample = assemble(m, answers)
    assert sample.high_watermark is None and sample.error == "leader 2 unreachable"
    assert [r.error for r in sample.replica_offsets] == [ReplicaError.NOT_HOSTED, ReplicaError.UNREACHABLE]


def test_every_missing_or_refused_offset_is_named_in_the_sample() -> None:
    """What keeps an offset away, leader question by leader question and replica by replica; a partition-level
    metadata error is reported even when every offset came (the short path is only for clean answers)."""
    tp = ("t", 0)
    answers = CycleAnswers(
        high_watermark={tp: (6, -1)},  # NOT_LEADER_OR_FOLLOWER: the leader moved after the metadata
        last_stable_offset={tp: (0, 40)},
        log_end_offset={1: {tp: (0, -1)}, 2: {tp: (56, -1)}, 3: {tp: (87, -1)}, 4: {tp: (6, -1)}},
        failed={(1, rq.LOG_START_OFFSET): "RequestTimedOutError", (5, rq.LOG_END_OFFSET): "RequestTimedOutError"})
    sample = assemble(meta("t", 0, 1, [1, 2, 3, 4, 5, 6]), answers)
    assert (sample.high_watermark, sample.last_stable_offset, sample.log_start_offset) == (None, 40, None)
    assert sample.error == "high_watermark: NotLeaderForPartitionError; RequestTimedOutError"
    assert [(r.broker_id, r.error, r.error_detail) for r in sample.replica_offsets] == [
        (1, ReplicaError.UNKNOWN, "offset -1"),
        (2, ReplicaError.OFFLINE, None),  # KAFKA_STORAGE_ERROR
        (3, ReplicaError.UNKNOWN, "InvalidRecordError"),  # any other code: named
        (4, ReplicaError.NOT_HOSTED, None),
        (5, ReplicaError.UNKNOWN, "RequestTimedOutError"),  # the broker's request failed
        (6, ReplicaError.UNKNOWN, "no answer for this replica"),  # asked, not answered for this partition
    ]
    clean = CycleAnswers(high_watermark={tp: (0, 9)}, last_stable_offset={tp: (0, 9)}, log_start_offset={tp: (0, 2)},
                         log_end_offset={1: {tp: (0, 9)}})
    replica_not_available = 9
    flagged = assemble(meta("t", 0, 1, [1], error_code=replica_not_available), clean, config=rq.TopicConfig(2, False))
    assert (flagged.high_watermark, flagged.log_start_offset, flagged.error) == (9, 2, "ReplicaNotAvailableError")
    assert (flagged.min_insync_replicas, flagged.unclean_leader_election) == (2, False)
    leaderless = assemble(meta("t", 0, -1, [1]), clean)
    assert (leaderless.high_watermark, leaderless.error) == (None, "no leader")


def test_trusted_records_need_every_field_in_the_models_order() -> None:
    values = {"broker_id": 1, "log_end_offset": 5, "error": None, "error_detail": None}
    record = trusted(ReplicaOffsets, dict(values))
    assert record == ReplicaOffsets(broker_id=1, log_end_offset=5)
    assert record.model_copy(update={"log_end_offset": 6}).log_end_offset == 6 and record.log_end_offset == 5
    assert record.model_fields_set == trusted(ReplicaOffsets, dict(values)).model_fields_set == set(values)
    with pytest.raises(ValueError, match="broker_id, log_end_offset, error, error_detail in this order"):
        trusted(ReplicaOffsets, {"log_end_offset": 5, "broker_id": 1, "error": None, "error_detail": None})
    with pytest.raises(ValueError, match="needs the fields"):
        trusted(ReplicaOffsets, {"broker_id": 1, "log_end_offset": 5, "error": None})


def test_topic_ids_are_written_as_kafka_writes_them() -> None:
    """Uuid.toString(): URL-safe base64 without padding, as in partition.metadata; the zero id is no id."""
    on_disk = "mTOJ9eNIQlK7J1Ix-ndbIw"
    as_uuid = uuid.UUID(bytes=base64.urlsafe_b64decode(on_disk + "=="))
    assert kafka_uuid(as_uuid) == kafka_uuid(str(as_uuid)) == on_disk
    assert kafka_uuid(uuid.UUID(int=0)) is None


def test_a_call_unanswered_at_the_deadline_says_how_long_it_was_given() -> None:
    """kafka-python's own timeout names what was left of the deadline for each wait ("Timed out after 32.9 ms",
    a new figure every cycle); the sample and the log line say the wait the calls were given, and a kafka-python
    error is named once."""
    import time

    from kafka.future import Future
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    from collectors.protocol.client import Call, ClusterClient, Pending
    from collectors.protocol.sampler import _describe_error

    client = ClusterClient(ClusterConfig(name="c", bootstrap_servers=["127.0.0.1:1"]), 5_000, "tests")
    client._net = NetworkSelector(**client._config)
    client._net.start()
    client._manager = KafkaConnectionManager(client._net, **client._config)
    try:
        calls = [Call(1, None, "first"), Call(2, None, "second")]  # never sent: their answers never come
        outcomes = client.gather(Pending(calls, [Future(), Future()], time.monotonic() + 0.3, 0.3))
    finally:
        client.close()
    assert [_describe_error(o.error) for o in outcomes] == ["KafkaTimeoutError: no answer within 0.3 s"] * 2
    assert _describe_error(Errors.RequestTimedOutError()) == "[Error 7] RequestTimedOutError"
    assert _describe_error(Errors.KafkaConnectionError("socket closed")) == "KafkaConnectionError: socket closed"
    assert _describe_error(ValueError("bad")) == "ValueError: bad"
    assert _describe_error(None) == "no answer"


def test_an_unreachable_bootstrap_server_says_whether_its_name_resolves_or_nothing_listens() -> None:
    """A typo in a host name and a broker that is down are different fixes: the line tells them apart."""
    import socket

    from replmon.core.kafka_diagnose import probe, unreachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as bound:  # bound, never listening: the port refuses connections
            bound.bind(("127.0.0.1", 0))
            refused = f"127.0.0.1:{bound.getsockname()[1]}"
            reachable, failures = probe([up, refused, "no-such-host.invalid:9092"])
    assert reachable == [up] and list(failures) == [refused, "no-such-host.invalid:9092"]
    assert failures[refused] == "connection refused: nothing listens there"
    assert failures["no-such-host.invalid:9092"].startswith("host name 'no-such-host.invalid' does not resolve: ")
    assert unreachable(failures) == ("cannot connect to any bootstrap server: " + "; ".join(
        f"{server} ({why})" for server, why in failures.items()))


def test_no_kafka_client_is_made_for_a_samples_cluster_nothing_of_which_accepts_a_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The topics' creation, the stages' access check and `replmon events --from topic` say at once why the samples
    cluster cannot be reached (the probe's line), instead of waiting out a Kafka client's bootstrap timeout."""
    import socket

    import kafka
    import kafka.admin

    from replmon.cli.events import topic_events
    from replmon.core import kafka_topics
    from replmon.core.config import ReplmonConfig
    from replmon.core.security import Role, check_access

    def no_client(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a Kafka client was made for a cluster nothing of which accepts a connection")

    for module, name in ((kafka_topics, "KafkaAdminClient"), (kafka, "KafkaConsumer"),
                         (kafka.admin, "KafkaAdminClient")):
        monkeypatch.setattr(module, name, no_client)
    monkeypatch.setattr("replmon.core.security.admin_client", no_client)
    with socket.socket() as bound:  # bound, never listening: the port refuses connections
        bound.bind(("127.0.0.1", 0))
        refused = f"127.0.0.1:{bound.getsockname()[1]}"
        config = ReplmonConfig.model_validate({"transport": {"bootstrap_servers": ["no-such-host.invalid:9092",
                                                                                   refused]}})
        with pytest.raises(ReplmonError) as created:
            kafka_topics.ensure_topic(config, "replmon.samples")
        with pytest.raises(ReplmonError) as read:
            next(topic_events(config, None, follow=False))
        check_access(config, Role.JOB)  # an unreachable cluster passes: the stages wait for it and say so
        assert not kafka_topics.topic_missing(config, "replmon.samples")
    why = (f"cannot connect to any bootstrap server: no-such-host.invalid:9092 (host name 'no-such-host.invalid' "
           f"does not resolve: {{}}); {refused} (connection refused: nothing listens there)")
    for raised, what in ((created, "the samples cluster"), (read, "the events topic's cluster")):
        said = str(raised.value)
        head = f"cannot reach {what} no-such-host.invalid:9092,{refused}: "
        assert said.startswith(head), said
        resolver = said[len(head):].split("does not resolve: ", 1)[1].split(")", 1)[0]
        assert said == head + why.format(resolver)
