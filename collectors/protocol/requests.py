"""The sampler's requests, built from the partition table, and their answers, parsed into plain values. Pure:
no I/O here (requests are kafka-python message objects or hand-encoded bodies, answers are decoded responses).

Per cycle and cluster (B brokers, P pages of 2000 partitions):

====================================  ===============  ===============================================
request                               to               gives
====================================  ===============  ===============================================
DescribeTopicPartitions (paginated)   one broker       leader, leader epoch, replicas, ISR, ELR, offline
ListOffsets LATEST read_uncommitted   each leader      high watermark
ListOffsets LATEST read_committed     each leader      last stable offset
ListOffsets EARLIEST                  each leader      log start offset
ListOffsets LATEST replica_id -2      every broker     each replica's own log end offset
OffsetsForLeaderEpoch                 leaders, when    one step of a lineage walk per partition
                                      needed
DescribeConfigs (topics)              one broker,      min.insync.replicas, unclean.leader.election.enable
                                      every M cycles
ListPartitionReassignments (all)      one broker (to   the reassignments in flight: adding and removing
                                      the controller)  replicas
====================================  ===============  ===============================================

A ListOffsets request carries one replica id and one isolation level, and a partition at most once, hence
four of them; steady cycles cost P + 4B + 1 requests (+B for lineage walks, +1 for configs).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, ListPartitionReassignmentsRequest
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest

from collectors.protocol.lineage import TopicPartition, Walk
from collectors.protocol.wire import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    INT32,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    EncodedRequest,
    ListOffsetsAnswer,
    list_offsets_request,
    read_compact_string,
    read_uvarint,
    skip_tagged_fields,
)
from replmon.contracts.samples import kafka_uuid

DESCRIBE_TOPIC_PARTITIONS_KEY = 75
DESCRIBE_TOPIC_PARTITIONS_VERSION = 0
"""The only version there is (Kafka 3.8 to 4.x); the sampler asks for it and reads its answer by hand."""
LIST_OFFSETS_KEY = 2
LIST_PARTITION_REASSIGNMENTS_KEY = 46
PAGE_PARTITION_LIMIT = 2000
"""Partitions per DescribeTopicPartitions page (the broker caps it with max.request.partition.size.limit)."""
TOPIC_RESOURCE = 2
MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"

# ListOffsets questions: label -> (replica id, isolation level, timestamp)
HIGH_WATERMARK = "ListOffsets/high_watermark"
LAST_STABLE_OFFSET = "ListOffsets/last_stable_offset"
LOG_START_OFFSET = "ListOffsets/log_start_offset"
LOG_END_OFFSET = "ListOffsets/log_end_offset"
LEADER_QUESTIONS = {
    HIGH_WATERMARK: (CONSUMER_REPLICA_ID, READ_UNCOMMITTED, LATEST_TIMESTAMP),
    LAST_STABLE_OFFSET: (CONSUMER_REPLICA_ID, READ_COMMITTED, LATEST_TIMESTAMP),
    LOG_START_OFFSET: (CONSUMER_REPLICA_ID, READ_UNCOMMITTED, EARLIEST_TIMESTAMP),
}
REPLICA_QUESTION = (DEBUGGING_REPLICA_ID, READ_UNCOMMITTED, LATEST_TIMESTAMP)


@dataclass(slots=True)
class PartitionMeta:
    """One partition as the metadata answered."""

    topic: str
    topic_id: str | None
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    elr: list[int] | None
    last_known_elr: list[int] | None
    offline_replicas: list[int]
    error_code: int = 0
    internal: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass
class TopicMeta:
    name: str
    internal: bool
    error_code: int


# ---------------------------------------------------------------------------------------------- metadata
@dataclass
class DescribePage:
    """One DescribeTopicPartitions answer: its topics and partitions, and where the next page starts (None on the
    last page)."""

    topics: list[TopicMeta]
    partitions: list[PartitionMeta]
    cursor: tuple[str, int] | None
    throttle_time_ms: int = 0
    """Read by kafka-python's connection (client-side quota throttling), as on its own responses."""


def describe_topic_partitions_request(cursor: tuple[str, int] | None) -> EncodedRequest:
    """A page of every topic's partitions, from ``cursor`` on. kafka-python encodes the small request; the large
    answer is read by :func:`decode_describe_topic_partitions`: ~2x faster than kafka-python's decoding and
    walking its objects (docs/benchmarks.md, "Collector")."""
    cursor_field = (DescribeTopicPartitionsRequest.Cursor(topic_name=cursor[0], partition_index=cursor[1])
                    if cursor else None)
    request = DescribeTopicPartitionsRequest(topics=[], response_partition_limit=PAGE_PARTITION_LIMIT,
                                             cursor=cursor_field)
    return EncodedRequest(DescribeTopicPartitionsRequest, DESCRIBE_TOPIC_PARTITIONS_VERSION,
                          bytes(request.encode(version=DESCRIBE_TOPIC_PARTITIONS_VERSION)),
                          decode_response=decode_describe_topic_partitions)


_PARTITION_HEAD = struct.Struct(">hiii")  # error_code, partition_index, leader_id, leader_epoch
_TOPIC_HEAD = struct.Struct(">h")  # error_code
_BROKER_IDS = [struct.Struct(f">{n}i") for n in range(16)]


def _broker_ids(data: bytes, pos: int) -> tuple[list[int], int]:
    """A compact array of int32 (a null one, which only nullable fields have, is read as an empty list)."""
    ids, pos = _nullable_broker_ids(data, pos)
    return ([] if ids is None else ids), pos


def _nullable_broker_ids(data: bytes, pos: int) -> tuple[list[int] | None, int]:
    """A compact, nullable array of int32: None for null (the ELR of a cluster that does not report one)."""
    size = data[pos]
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_uvarint(data, pos)
    if size == 0:
        return None, pos
    if size == 1:
        return [], pos
    count = size - 1
    layout = _BROKER_IDS[count] if count < len(_BROKER_IDS) else struct.Struct(f">{count}i")
    return list(layout.unpack_from(data, pos)), pos + 4 * count


def decode_describe_topic_partitions(data: bytes) -> DescribePage:
    """A DescribeTopicPartitionsResponse v0 body (after the response header), field by field as
    ``clients/src/main/resources/common/message/DescribeTopicPartitionsResponse.json`` lays it out: throttle time;
    topics (error code, name, topic id, is internal, partitions, authorized operations, tags), each partition
    (error code, index, leader, leader epoch, replicas, ISR, ELR, last known ELR, offline replicas, tags); the
    next cursor (nullable struct: topic name, partition index, tags); tags."""
    throttle_time_ms = INT32.unpack_from(data, 0)[0]
    pos = 4
    topics: list[TopicMeta] = []
    partitions: list[PartitionMeta] = []
    head = _PARTITION_HEAD.unpack_from
    append = partitions.append
    topic_count, pos = read_uvarint(data, pos)
    for _topic in range(topic_count - 1):
        topic_error = _TOPIC_HEAD.unpack_from(data, pos)[0]
        name, pos = read_compact_string(data, pos + 2)
        topic_id = kafka_uuid(data[pos:pos + 16])
        internal = data[pos + 16] != 0
        partition_count, pos = read_uvarint(data, pos + 17)
        for _partition in range(partition_count - 1):
            error_code, index, leader, leader_epoch = head(data, pos)
            replicas, pos = _broker_ids(data, pos + 14)
            isr, pos = _broker_ids(data, pos)
            elr, pos = _nullable_broker_ids(data, pos)
            last_known_elr, pos = _nullable_broker_ids(data, pos)
            offline, pos = _broker_ids(data, pos)
            pos = pos + 1 if data[pos] == 0 else skip_tagged_fields(data, pos)
            append(PartitionMeta(name or "", topic_id, index, leader, leader_epoch, replicas, isr, elr,
                                 last_known_elr, offline, error_code, internal))
        pos = skip_tagged_fields(data, pos + 4)  # past topic_authorized_operations
        topics.append(TopicMeta(name or "", internal, topic_error))
    cursor = None
    present = data[pos] < 0x80  # a nullable struct's int8 marker: negative for null, as Kafka reads it
    pos += 1
    if present:
        cursor_topic, pos = read_compact_string(data, pos)
        cursor = (cursor_topic or "", INT32.unpack_from(data, pos)[0])
        pos = skip_tagged_fields(data, pos + 4)
    pos = skip_tagged_fields(data, pos)
    if pos != len(data):
        raise ValueError(f"DescribeTopicPartitions: {len(data) - pos} bytes past the end of the answer")
    return DescribePage(topics, partitions, cursor, throttle_time_ms)


def _topic_id(value: Any) -> str | None:
    """kafka-python's uuid.UUID as Kafka prints it (the log-dir agent reads that form from partition.metadata)."""
    return None if value is None or str(value) == "" else kafka_uuid(value)


def metadata_request() -> Any:
    """Metadata for every topic (brokers older than 3.8, without DescribeTopicPartitions)."""
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


def parse_metadata(response: Any) -> tuple[list[TopicMeta], list[PartitionMeta]]:
    topics, partitions = [], []
    for t in response.topics:
        internal = bool(getattr(t, "is_internal", False))
        topics.append(TopicMeta(t.name, internal, t.error_code))
        topic_id = _topic_id(getattr(t, "topic_id", None))
        for p in t.partitions:
            partitions.append(PartitionMeta(
                topic=t.name, topic_id=topic_id, partition=p.partition_index, leader=p.leader_id,
                leader_epoch=getattr(p, "leader_epoch", -1), replicas=list(p.replica_nodes),
                isr=list(p.isr_nodes), elr=None, last_known_elr=None,
                offline_replicas=list(getattr(p, "offline_replicas", None) or []), error_code=p.error_code,
                internal=internal))
    return topics, partitions


# ---------------------------------------------------------------------------------------------- offsets
def group_by_broker(partitions: Iterable[PartitionMeta]) -> tuple[dict[int, dict[str, list[int]]],
                                                                  dict[int, dict[str, list[int]]]]:
    """(leader -> topic -> partitions it leads, broker -> topic -> partitions it hosts a replica of)."""
    leads: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    hosts: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for p in partitions:
        if p.leader >= 0:
            leads[p.leader][p.topic].append(p.partition)
        for replica in p.replicas:
            hosts[replica][p.topic].append(p.partition)
    return leads, hosts


Layout = Mapping[int, Mapping[str, list[int]]]
"""broker -> topic -> partitions (the leads or the hosts of :func:`group_by_broker`)."""


def unasked(layout: Layout, asked: Layout) -> dict[int, dict[str, list[int]]]:
    """The part of ``layout`` that ``asked`` does not cover, in the same shape."""
    out: dict[int, dict[str, list[int]]] = {}
    for broker, topics in layout.items():
        known = asked.get(broker, {})
        for topic, partitions in topics.items():
            have = known.get(topic)
            if have is None:
                missing = list(partitions)
            else:
                seen = set(have)
                missing = [p for p in partitions if p not in seen]
            if missing:
                out.setdefault(broker, {})[topic] = missing
    return out


def list_offsets_requests(leads: Layout, hosts: Layout, version: int, timeout_ms: int) -> list[tuple[int, str, Any]]:
    """(broker, label, request): three to each leader, one (replica id -2) to every broker hosting replicas."""
    out = []
    for broker, partitions in sorted(leads.items()):
        for label, (replica_id, isolation, timestamp) in LEADER_QUESTIONS.items():
            out.append((broker, label, list_offsets_request(version, replica_id, isolation, timestamp,
                                                            partitions, label, timeout_ms)))
    replica_id, isolation, timestamp = REPLICA_QUESTION
    for broker, partitions in sorted(hosts.items()):
        out.append((broker, LOG_END_OFFSET, list_offsets_request(version, replica_id, isolation, timestamp,
                                                                 partitions, LOG_END_OFFSET, timeout_ms)))
    return out


def parse_list_offsets(response: Any) -> dict[TopicPartition, tuple[int, int]]:
    """(topic, partition) -> (error code, offset), from a hand-decoded answer (v6+) or kafka-python's (older)."""
    if isinstance(response, ListOffsetsAnswer):
        return response.offsets
    out = {}
    for t in response.topics:
        name = t.name
        for p in t.partitions:
            out[(name, p.partition_index)] = (p.error_code, p.offset)
    return out


# ---------------------------------------------------------------------------------------------- lineage
def offsets_for_leader_epoch_request(questions: Mapping[TopicPartition, Walk]) -> Any:
    """One step of every walk whose leader this request goes to: ask ``walk.query``, fenced on the leader
    epoch the walk started in (the leader refuses when its epoch differs)."""
    topic_cls = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    part_cls = topic_cls.OffsetForLeaderPartition
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), walk in sorted(questions.items()):
        by_topic[topic].append(part_cls(partition=partition, current_leader_epoch=walk.leader_epoch,
                                        leader_epoch=walk.query))
    return OffsetForLeaderEpochRequest(replica_id=CONSUMER_REPLICA_ID,
                                       topics=[topic_cls(topic=t, partitions=ps) for t, ps in by_topic.items()])


def parse_offsets_for_leader_epoch(response: Any) -> dict[TopicPartition, tuple[int, int, int]]:
    """(topic, partition) -> (error code, leader epoch, end offset)."""
    out = {}
    for t in response.topics:
        for p in t.partitions:
            out[(t.topic, p.partition)] = (p.error_code, p.leader_epoch, p.end_offset)
    return out


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class TopicConfig:
    min_insync_replicas: int | None = None
    unclean_leader_election: bool | None = None


def describe_configs_request(topics: Iterable[str]) -> Any:
    resource = DescribeConfigsRequest.DescribeConfigsResource
    return DescribeConfigsRequest(
        resources=[resource(resource_type=TOPIC_RESOURCE, resource_name=t,
                            configuration_keys=[MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION])
                   for t in sorted(topics)],
        include_synonyms=False, include_documentation=False)


def describe_configs_errors(response: Any) -> dict[str, int]:
    """Topic -> error code, for the resources of a DescribeConfigs answer that failed."""
    return {r.resource_name: r.error_code for r in response.results if r.error_code}


def parse_describe_configs(response: Any) -> dict[str, TopicConfig]:
    out = {}
    for result in response.results:
        if result.error_code:
            continue
        values = {c.name: c.value for c in result.configs}
        min_isr = values.get(MIN_INSYNC_REPLICAS)
        unclean = values.get(UNCLEAN_LEADER_ELECTION)
        out[result.resource_name] = TopicConfig(
            min_insync_replicas=int(min_isr) if min_isr and min_isr.isdigit() and int(min_isr) >= 1 else None,
            unclean_leader_election=None if unclean is None else unclean.strip().lower() == "true")
    return out


Reassignments = dict[TopicPartition, tuple[list[int], list[int]]]
"""Partition -> (adding replicas, removing replicas) of each reassignment in flight."""


def list_partition_reassignments_request(timeout_ms: int) -> Any:
    """Every reassignment in flight (``topics`` null: all of them); a broker forwards it to the controller."""
    return ListPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=None)


def parse_list_partition_reassignments(response: Any) -> tuple[Reassignments, int]:
    """The reassignments in flight, and the answer's error code (0: none; else the reassignments are unknown)."""
    if response.error_code:
        return {}, int(response.error_code)
    return {(t.name, p.partition_index): ([int(b) for b in p.adding_replicas], [int(b) for b in p.removing_replicas])
            for t in response.topics for p in t.partitions}, 0
