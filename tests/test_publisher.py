"""The publisher: bounded buffer, drops counted, backoff while the samples cluster is away; and on the real
cluster, samples keyed by cluster/topic/partition in a topic created with retention and compression."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.errors import NotEnoughReplicasError
from kafka.future import Future

from collectors import publisher
from collectors.metrics import CollectorMetrics
from collectors.publisher import JsonLinesOutput, SamplePublisher, record_key
from replmon.contracts.batches import entries, is_batch
from replmon.contracts.samples import CycleSample, PartitionSample, parse_sample
from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from streaming.batches import read_batch


def partition_sample(i: int, topic: str = "orders") -> PartitionSample:
    return PartitionSample(cluster="prod", collector_id="c", cycle=i, sample_time_ms=1, topic=topic, partition=i % 3,
                           leader=1, leader_epoch=0, replicas=[1], isr=[1])


def config(sample_format: str = "batch", **collector: Any) -> ReplmonConfig:
    return ReplmonConfig(clusters=[{"name": "prod", "bootstrap_servers": ["127.0.0.1:1"]}],
                         collector=collector, transport={"sample_format": sample_format})


def sent_samples(values: list[bytes]) -> list[PartitionSample]:
    """The partition samples of the records a producer got, in order: JSON records and batches alike."""
    out: list[PartitionSample] = []
    for value in values:
        if is_batch(value):
            out += [PartitionSample.model_validate(e) for e in entries(read_batch(value))]
        else:
            out.append(parse_sample(value))  # type: ignore[arg-type]
    return out


class FakeProducer:
    """Fails its first ``failures`` sends with ``error``, then succeeds."""

    def __init__(self, fail: bool = False, failures: int = 0, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.failures = 1 << 30 if fail else failures
        self.error = error or RuntimeError("broker away")

    def send(self, topic: str, key: bytes, value: bytes) -> Future:
        self.sent.append((topic, key, value))
        future = Future()
        if len(self.sent) <= self.failures:
            return future.failure(self.error)
        return future.success(None)

    def close(self, timeout: float | None = None) -> None:
        pass


def test_json_lines_output_prints_parseable_samples() -> None:
    out = io.StringIO()
    sink = JsonLinesOutput(out)
    sink.publish([partition_sample(1), partition_sample(2)])
    sink.close()
    assert [parse_sample(line) for line in out.getvalue().splitlines()] == [partition_sample(1), partition_sample(2)]
    assert sink.dropped == 0 and sink.buffered == 0


def test_keys_keep_a_partition_in_one_kafka_partition() -> None:
    assert record_key(partition_sample(4)) == b"prod/orders/1"
    cycle = CycleSample(cluster="prod", collector_id="c", cycle=0, sample_time_ms=1, duration_ms=0, partitions=0,
                        brokers=[])
    assert record_key(cycle) == b"prod"


@pytest.mark.parametrize("sample_format", ["batch", "json"])
def test_publishes_in_order_when_the_cluster_is_there(sample_format: str) -> None:
    producer = FakeProducer()
    metrics = CollectorMetrics()
    pub = SamplePublisher(config(sample_format), producer_factory=lambda kw: producer, topic_creator=lambda c: None,
                          metrics=metrics)
    pub.publish([partition_sample(i) for i in range(50)])
    assert pub.flush(timeout_s=10)
    pub.close()
    sent = sent_samples([v for _, _, v in producer.sent])
    assert sorted(s.cycle for s in sent) == list(range(50))
    for partition in range(3):  # each partition's samples in order, under one key
        assert [s.cycle for s in sent if s.partition == partition] == list(range(partition, 50, 3))
        keys = {k for _, k, v in producer.sent if any(s.partition == partition for s in sent_samples([v]))}
        assert len(keys) == 1
    assert len(producer.sent) == (50 if sample_format == "json" else 3)
    assert all(t == "replmon.samples" for t, _, _ in producer.sent)
    assert pub.published == 50 and pub.dropped == 0
    assert metrics.registry.get_sample_value("replmon_collector_samples_published_total") == 50


def test_while_the_samples_cluster_is_away_the_buffer_is_bounded_and_drops_counted() -> None:
    attempts = threading.Event()
    calls: list[int] = []

    def unreachable(_config: ReplmonConfig) -> None:
        calls.append(1)
        attempts.set()
        raise ConnectionError("samples cluster away")

    metrics = CollectorMetrics()
    pub = SamplePublisher(config("json", buffer_max_samples=100), topic_creator=unreachable, metrics=metrics)
    pub.publish([partition_sample(i) for i in range(250)])
    assert attempts.wait(10)
    assert pub.buffered == 100 and pub.dropped == 150
    # the attempt failed inside the topic creator; the publisher's thread records the outage after it
    wait_until(lambda: pub.outage is not None, 10, "the outage recorded", interval_s=0.01)
    assert pub.outage is not None and "samples cluster away" in pub.outage
    assert metrics.registry.get_sample_value("replmon_collector_samples_dropped_total") == 150
    assert metrics.registry.get_sample_value("replmon_collector_samples_buffered") == 100
    assert not pub.flush(timeout_s=1.2)
    assert len(calls) <= 3, "backs off instead of hammering the samples cluster"
    pub.close(timeout_s=0.1)
    assert pub.dropped == 250


def test_an_outage_the_topic_creation_describes_is_told_in_its_words_once() -> None:
    said = "cannot reach the samples cluster 127.0.0.1:1: KafkaTimeoutError: Unable to bootstrap"

    def unreachable(_config: ReplmonConfig) -> None:
        raise ReplmonError(said)

    pub = SamplePublisher(config("json"), topic_creator=unreachable)
    pub.publish([partition_sample(0)])
    wait_until(lambda: pub.outage is not None, 10, "the outage recorded", interval_s=0.01)
    assert pub.outage == said  # not wrapped in a second "cannot reach ...: ReplmonError: cannot reach ..."
    pub.close(timeout_s=0.1)


def test_a_full_buffer_drops_whole_batches_counted_in_samples() -> None:
    pub = SamplePublisher(config(buffer_max_samples=100), topic_creator=lambda c: (_ for _ in ()).throw(
        ConnectionError("samples cluster away")))
    pub.publish([partition_sample(i, topic=f"t{i % 40}") for i in range(250)])  # a batch record per group
    assert 0 < pub.buffered <= 100 and pub.buffered + pub.dropped == 250
    pub.close(timeout_s=0.1)
    assert pub.dropped == 250


def test_failed_deliveries_are_dropped_and_counted() -> None:
    pub = SamplePublisher(config(), producer_factory=lambda kw: FakeProducer(fail=True),
                          topic_creator=lambda c: None)
    pub.publish([partition_sample(i) for i in range(5)])
    wait_until(lambda: pub.dropped == 5, 10, "five failed deliveries counted")
    assert pub.outage is not None and pub.buffered == 0
    pub.close()


def test_retriable_delivery_failures_are_sent_again_not_dropped() -> None:
    """Too few in-sync replicas on the samples topic (a broker of the samples cluster restarting) is retriable:
    the samples wait in the buffer and go out once the partition is writable again."""
    producer = FakeProducer(failures=3, error=NotEnoughReplicasError())
    pub = SamplePublisher(config(), producer_factory=lambda kw: producer, topic_creator=lambda c: None)
    pub.publish([partition_sample(i) for i in range(3)])
    assert pub.flush(timeout_s=20), pub.outage
    pub.close()
    assert pub.dropped == 0 and pub.published == 3 and pub.outage is None
    delivered = [s.cycle for s in sent_samples([v for _, _, v in producer.sent])]
    assert sorted(delivered[-3:]) == [0, 1, 2]


class SilentProducer(FakeProducer):
    """Takes every record and never reports one: a producer that lost track of its sends."""

    def __init__(self) -> None:
        super().__init__()
        self.futures: list[Future] = []
        self.closed = threading.Event()

    def send(self, topic: str, key: bytes, value: bytes) -> Future:
        self.sent.append((topic, key, value))
        self.futures.append(Future())
        return self.futures[-1]

    def close(self, timeout: float | None = None) -> None:
        self.closed.set()


def test_a_retriable_failure_retires_the_producer_and_a_new_one_delivers() -> None:
    """The records a failing producer still holds go back to the buffer with the one that failed; a new producer
    sends them. What the retired producer reports afterwards changes nothing: no sample counted twice."""
    first, second = SilentProducer(), FakeProducer()
    producers = iter([first, second])
    pub = SamplePublisher(config("json"), producer_factory=lambda kw: next(producers), topic_creator=lambda c: None)
    pub.publish([partition_sample(i) for i in range(3)])
    wait_until(lambda: len(first.sent) == 3, 10, "three records handed to the first producer", interval_s=0.01)
    first.futures[1].failure(NotEnoughReplicasError())
    assert first.closed.wait(10), "the failing producer is closed"
    assert pub.flush(timeout_s=20), pub.outage
    first.futures[0].success(None)  # a late report of the retired producer
    first.futures[2].failure(NotEnoughReplicasError())
    assert [s.cycle for s in sent_samples([v for _, _, v in second.sent])] == [0, 1, 2]
    assert pub.published == 3 and pub.dropped == 0 and pub.buffered == 0 and pub.outage is None
    pub.close()


def test_a_producer_that_stops_reporting_is_retired_after_its_delivery_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python reports every record by delivery.timeout.ms; one it never reports does not hold the buffer's
    room for ever (while records are unreported, newer samples are dropped to keep the bound)."""
    monkeypatch.setattr(publisher, "DELIVERY_TIMEOUT_MS", 300)
    monkeypatch.setattr(publisher, "UNREPORTED_GRACE_S", 0.2)
    first, second = SilentProducer(), FakeProducer()
    producers = iter([first, second])
    metrics = CollectorMetrics()
    pub = SamplePublisher(config("json", buffer_max_samples=4), producer_factory=lambda kw: next(producers),
                          topic_creator=lambda c: None, metrics=metrics)
    pub.publish([partition_sample(i) for i in range(4)])
    wait_until(lambda: len(first.sent) == 4, 10, "four records handed to the first producer", interval_s=0.01)
    pub.publish([partition_sample(4)])  # no room while the four are unreported: the newest goes
    assert pub.dropped == 1
    assert first.closed.wait(10), "the silent producer is retired"
    assert pub.flush(timeout_s=20), pub.outage
    assert sorted(s.cycle for s in sent_samples([v for _, _, v in second.sent])) == [0, 1, 2, 3]
    assert pub.published == 4 and pub.outage is None
    assert metrics.registry.get_sample_value("replmon_collector_samples_published_total") == 4
    pub.close()


@pytest.fixture
def samples_config(cluster: LocalCluster, topic_name: str) -> ReplmonConfig:
    return ReplmonConfig(clusters=[{"name": "local", "bootstrap_servers": cluster.bootstrap_servers}],
                         transport={"samples_topic": f"{topic_name}-samples", "retention_ms": 3_600_000})


@pytest.fixture
def view(healthy_cluster: LocalCluster) -> Iterator[KafkaView]:
    oracle = KafkaView(healthy_cluster.bootstrap_servers)
    yield oracle
    oracle.close()


@pytest.mark.cluster
def test_publishes_to_a_created_samples_topic(samples_config: ReplmonConfig, cluster: LocalCluster,
                                              view: KafkaView) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = samples_config.transport.samples_topic
    pub = SamplePublisher(samples_config)
    sent = [partition_sample(i, topic="orders") for i in range(30)]
    pub.publish(sent)
    assert pub.flush(timeout_s=30), pub.outage
    pub.close()
    assert pub.published == 30 and pub.dropped == 0

    described = view.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    text = repr(described)
    assert "'retention.ms'" in text and "3600000" in text and "zstd" in text
    parts = view.admin.describe_topic_partitions([topic])["topics"][0]["partitions"]
    assert len(parts) == samples_config.transport.topic_partitions
    assert all(len(p["replica_nodes"]) == 3 for p in parts)

    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=2000, group_id=None)
    try:
        records = wait_until(lambda: list(consumer) or None, 30, "samples in the topic")
        while sum(len(sent_samples([r.value])) for r in records) < 30:
            more = list(consumer)
            assert more, f"only {len(records)} records read"
            records += more
    finally:
        consumer.close()
    assert all(is_batch(r.value) for r in records)  # the default format: a few batch records per cycle
    by_partition: dict[int, list[int]] = {}
    keys: dict[int, set[bytes]] = {}
    for r in records:
        for sample in sent_samples([r.value]):
            by_partition.setdefault(sample.partition, []).append(sample.cycle)
            keys.setdefault(sample.partition, set()).add(r.key)
    assert sorted(by_partition) == [0, 1, 2] and sum(map(len, by_partition.values())) == 30
    for partition, cycles in by_partition.items():
        assert cycles == sorted(cycles), "one partition's samples arrive in order"
        assert len(keys[partition]) == 1 and next(iter(keys[partition])).startswith(b"prod/#")
