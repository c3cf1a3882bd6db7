"""The protocol sampler on the real local cluster, its values checked against Kafka's own view."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import TopicPartition
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest
from kafka.protocol.parser import KafkaProtocol

from collectors.protocol import requests as rq
from collectors.protocol.sampler import ClusterSampler
from replmon.contracts.samples import CycleSample, PartitionSample, ReplicaError, parse_sample
from replmon.core.config import ClusterConfig, CollectorConfig, TopicFilter
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.workload import SequencedProducer
from tests.kafka_dump import lineage_of, log_batches

pytestmark = pytest.mark.cluster
TIMEOUT_MS = 2000


def offsets_for_leader_epoch(view: KafkaView, leader: int, topic: str, partition: int,
                             epoch: int) -> tuple[int, int]:
    """Kafka's raw answer to OffsetsForLeaderEpoch(epoch) from ``leader``: (leader epoch, end offset). The
    oracle of the lineage tests, written against kafka-python only."""
    topic_cls = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[topic_cls(topic=topic, partitions=[
        topic_cls.OffsetForLeaderPartition(partition=partition, current_leader_epoch=-1, leader_epoch=epoch)])])
    manager = view.admin._manager

    async def ask() -> Any:
        return await manager.send(request, node_id=leader)

    response = manager.run(ask)
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0, answer
    return answer.leader_epoch, answer.end_offset


class Sampling:
    """A sampler restricted to some topics, and helpers to look at its samples."""

    def __init__(self, cluster: LocalCluster, topics: list[str], **collector: Any) -> None:
        config = ClusterConfig(name="test", bootstrap_servers=cluster.bootstrap_servers.split(","),
                               topics=TopicFilter(include=topics))
        self.sampler = ClusterSampler(config, CollectorConfig(request_timeout_ms=TIMEOUT_MS, **collector), "tests")
        self.last_cycle: CycleSample | None = None

    def cycle(self) -> dict[tuple[str, int], PartitionSample]:
        result = self.sampler.cycle()
        out = {}
        for s in result.samples:
            if isinstance(s, PartitionSample):
                out[(s.topic, s.partition)] = s
            elif isinstance(s, CycleSample):
                self.last_cycle = s
        return out

    def partition(self, topic: str, partition: int = 0) -> PartitionSample:
        return self.cycle()[(topic, partition)]

    def close(self) -> None:
        self.sampler.close()


@pytest.fixture
def view(cluster: LocalCluster) -> Iterator[KafkaView]:
    """A fresh oracle per test: the session ``kafka_view`` keeps sending admin requests to a broker it saw as
    controller, and fails once that broker was killed (kafka-python does not refresh it)."""
    oracle = KafkaView(cluster.bootstrap_servers)
    yield oracle
    oracle.close()


@pytest.fixture
def sampling(cluster: LocalCluster) -> Iterator[Callable[..., Sampling]]:
    made: list[Sampling] = []

    def make(topics: list[str], **collector: Any) -> Sampling:
        s = Sampling(cluster, topics, **collector)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def leo(sample: PartitionSample, broker: int) -> int | None:
    return next(r.log_end_offset for r in sample.replica_offsets if r.broker_id == broker)


def replica_error(sample: PartitionSample, broker: int) -> ReplicaError | None:
    return next(r.error for r in sample.replica_offsets if r.broker_id == broker)


def test_topic_id_is_the_one_kafka_writes_in_the_log_dir(
        cluster: LocalCluster, view: KafkaView, topic_name: str, sampling: Callable[..., Sampling]) -> None:
    """The sampler's topic id (from DescribeTopicPartitions) and the log-dir agent's (from the partition.metadata
    file Kafka writes) are the same text: the job matches the agent's replicas to the sampler's partitions by it."""
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    sampled = wait_until(lambda: sampling([topic_name]).partition(topic_name), 20, "a sample").topic_id
    on_disk = (cluster.broker_log_dir(1) / f"{topic_name}-0" / "partition.metadata").read_text()
    assert sampled is not None and f"topic_id: {sampled}" in on_disk.splitlines(), (sampled, on_disk)


def test_paused_follower_falls_behind_leaves_the_isr_and_catches_up(
        healthy_cluster: LocalCluster, view: KafkaView, topic_name: str,
        producer_factory: Callable[..., SequencedProducer], sampling: Callable[..., Sampling]) -> None:
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    s = sampling([topic_name])
    producer = producer_factory(topic_name, acks=1)
    producer.wait_acknowledged(20)
    before = wait_until(lambda: (x := s.partition(topic_name)) and leo(x, 3) and x, 20, "follower 3 sampled")
    follower_leo = leo(before, 3)
    assert follower_leo is not None and before.isr == view.partition(topic_name).isr

    healthy_cluster.pause(3)
    behind = wait_until(lambda: (x := s.partition(topic_name)) and 3 not in x.isr
                        and (leo(x, 1) or 0) > follower_leo + 50 and x, 30,
                        "the paused follower out of the ISR while the leader's log grows")
    assert replica_error(behind, 3) == ReplicaError.UNREACHABLE and leo(behind, 3) is None
    assert s.last_cycle is not None and s.last_cycle.unreachable_brokers == [3]
    assert s.last_cycle.duration_ms < TIMEOUT_MS + 1500, "a silent broker holds a cycle no longer than the timeout"
    # Kafka's view, asked again if the oracle happened to ask the paused broker
    wait_until(lambda: 3 not in view.partition(topic_name).isr, 20, "Kafka's ISR without broker 3")

    healthy_cluster.resume(3)  # the producer writes on: Kafka's figures bound the sampled ones
    wait_until(lambda: 3 in view.partition(topic_name).isr, 30, "Kafka's ISR with broker 3 again")
    low = view.high_watermark(topic_name)
    caught_up = wait_until(lambda: (x := s.partition(topic_name)) and 3 in x.isr and x.high_watermark and x, 30,
                           "the resumed follower back in the sampled ISR")
    high = view.high_watermark(topic_name)
    assert low <= (caught_up.high_watermark or 0) <= high
    # in the ISR, a follower's LEO is at least the HW, which was at least ``low`` when the sampler asked
    assert all((leo(caught_up, b) or 0) >= low for b in (1, 3))
    assert sorted(caught_up.isr) == sorted(view.partition(topic_name).isr)
    assert (caught_up.high_watermark or 0) > follower_leo + 50


def test_leader_kill_raises_the_epoch_and_extends_the_lineage(
        healthy_cluster: LocalCluster, view: KafkaView, topic_name: str,
        producer_factory: Callable[..., SequencedProducer], sampling: Callable[..., Sampling]) -> None:
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    s = sampling([topic_name])
    producer = producer_factory(topic_name, acks="all")
    producer.wait_acknowledged(30)

    def with_lineage_and_hw() -> PartitionSample | None:
        x = s.partition(topic_name)
        return x if x.epoch_lineage and x.high_watermark else None

    first = wait_until(with_lineage_and_hw, 20, "the first lineage and high watermark")
    assert first.leader == 1
    assert first.epoch_lineage is not None and first.epoch_lineage[-1].leader_epoch == first.leader_epoch
    old_epoch = first.leader_epoch

    healthy_cluster.kill(1)

    def with_new_epoch_in_lineage() -> PartitionSample | None:
        x = s.partition(topic_name)
        return x if (x.leader_epoch > old_epoch and x.epoch_lineage
                     and x.epoch_lineage[-1].leader_epoch == x.leader_epoch) else None

    new = wait_until(with_new_epoch_in_lineage, 40, "a new leader epoch and its lineage entry")
    assert new.leader in (2, 3)
    kafka_says = view.partition(topic_name)
    assert (kafka_says.leader, kafka_says.leader_epoch) == (new.leader, new.leader_epoch)
    assert new.epoch_lineage is not None
    newest, previous = new.epoch_lineage[-1], new.epoch_lineage[-2]
    # Kafka's own answer: asking the epoch before the new one yields the new epoch's start offset
    answer_epoch, end_offset = offsets_for_leader_epoch(view, new.leader, topic_name, 0, new.leader_epoch - 1)
    assert (previous.leader_epoch, newest.start_offset) == (answer_epoch, end_offset)
    # the new epoch starts where the new leader's copy ended, as its log files say, past the HW sampled before
    # (once the producer, writing on, has reached the new leader: its first batch of the epoch is on disk)
    new_log = healthy_cluster.broker_log_dir(new.leader) / f"{topic_name}-0"
    started = wait_until(lambda: dict(lineage_of(log_batches(new_log))).get(new.leader_epoch), 60,
                         "the new leader's first batch of its epoch, as Kafka's dump tool reads it")
    assert started == newest.start_offset >= (first.high_watermark or 0)
    assert replica_error(new, 1) == ReplicaError.UNREACHABLE
    assert s.last_cycle is not None and 1 in s.last_cycle.unreachable_brokers


def test_a_leader_moved_between_cycles_is_read_from_the_new_leader_in_the_next_cycle(
        healthy_cluster: LocalCluster, view: KafkaView, topic_name: str,
        producer_factory: Callable[..., SequencedProducer], sampling: Callable[..., Sampling]) -> None:
    """A cycle asks the offsets of the previous cycle's leaders before it reads the metadata. Here leadership
    moves in between (a reassignment and a preferred leader election) while the old leader stays up and answers
    NOT_LEADER_OR_FOLLOWER: the same cycle asks the new leader, and the sample holds its offsets, no error. The
    producer writes throughout."""
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    s = sampling([topic_name])
    producer = producer_factory(topic_name, acks="all")
    producer.wait_acknowledged(20)
    before = wait_until(lambda: (x := s.partition(topic_name)).leader == 1 and x.high_watermark and x, 20,
                        "the partition led by broker 1 with a high watermark")

    view.admin.alter_partition_reassignments({TopicPartition(topic_name, 0): [2, 3, 1]})
    wait_until(lambda: view.partition(topic_name).replicas == [2, 3, 1], 20, "the new replica order")
    view.admin.elect_leaders(0, {topic_name: [0]})
    wait_until(lambda: view.partition(topic_name).leader == 2, 20, "broker 2 elected preferred leader")
    # a new leader answers OFFSET_NOT_AVAILABLE until its high watermark reaches its epoch's start offset; the
    # producer writes on, so Kafka's figures before and after the cycle bound the sampled ones
    low = wait_until(lambda: (hw := view.high_watermark(topic_name)) >= (before.high_watermark or 0) and hw, 20,
                     "the new leader's high watermark, as Kafka answers it")

    asked_before = dict(s.sampler.requests_by_label)
    after = s.partition(topic_name)  # the one cycle after the move
    asked = {label: n - asked_before.get(label, 0) for label, n in s.sampler.requests_by_label.items()}
    # the reassignment's end may bump the epoch again: OFFSET_NOT_AVAILABLE anew for a moment
    high = wait_until(lambda: view.high_watermark(topic_name), 20, "the high watermark after the cycle")
    assert (after.leader, after.error) == (2, None)
    assert low <= (after.high_watermark or 0) <= high and low <= (after.last_stable_offset or 0) <= high
    assert after.log_start_offset == 0
    assert all((leo(after, b) or 0) >= low for b in (2, 3, 1))  # in the ISR: at least the HW
    # the high watermark was asked twice: early of broker 1 (it answered NOT_LEADER_OR_FOLLOWER), then of broker 2
    assert asked[rq.HIGH_WATERMARK] == 2 and asked[rq.LOG_END_OFFSET] == 3, asked

    # the cycle after: the early questions follow the new layout
    asked_before = dict(s.sampler.requests_by_label)
    again = s.partition(topic_name)
    asked = {label: n - asked_before.get(label, 0) for label, n in s.sampler.requests_by_label.items()}
    assert (again.leader, again.error) == (2, None) and (again.high_watermark or 0) >= (after.high_watermark or 0)
    assert asked[rq.HIGH_WATERMARK] == 1 and asked[rq.LOG_END_OFFSET] == 3, asked


def test_a_steady_cycle_costs_a_few_requests_per_broker(
        cluster: LocalCluster, view: KafkaView, many_partitions: list[str], sampling: Callable[..., Sampling],
        monkeypatch: pytest.MonkeyPatch) -> None:
    topics = many_partitions
    sent: list[tuple[str, int]] = []
    original = KafkaProtocol.send_request

    def counting(self: KafkaProtocol, request: Any, correlation_id: int | None = None) -> int:
        sent.append((self._client_id, request.API_KEY))
        return original(self, request, correlation_id)

    monkeypatch.setattr(KafkaProtocol, "send_request", counting)
    # refresh lineage and configs every 2nd cycle: cycle 2 is a steady cycle with both refreshes
    s = sampling(topics, lineage_refresh_cycles=2, config_refresh_cycles=2)
    wait_until(lambda: len(x := s.cycle()) == 600 and all(len(p.isr) == 3 for p in x.values()), 60,
               "all 600 partitions sampled with their full ISR")
    brokers = len(cluster.broker_ids)
    for _ in range(3):
        sent.clear()
        samples = s.cycle()
        ours = [api for client, api in sent if client == "replmon-tests"]
        assert s.last_cycle is not None
        assert len(samples) == 600 and not s.last_cycle.unreachable_brokers
        assert len(ours) <= 6 * brokers, f"{len(ours)} requests: {sorted(ours)}"
        assert len(ours) == s.last_cycle.requests
    for t in topics[:2]:
        for p in (0, 57):
            sample = samples[(t, p)]
            kafka_says = view.partition(t, p)
            assert ((sample.leader, sample.leader_epoch, sorted(sample.isr))
                    == (kafka_says.leader, kafka_says.leader_epoch, sorted(kafka_says.isr)))
            assert sample.high_watermark == view.high_watermark(t, p) == 0
            assert [r.log_end_offset for r in sample.replica_offsets] == [0, 0, 0]


@pytest.fixture
def many_partitions(view: KafkaView, topic_name: str) -> Iterator[list[str]]:
    """6 topics of 100 partitions, deleted after the test: the session's cluster would otherwise carry them
    through every later broker restart (log recovery, elections and catch-up of 1,800 more replicas)."""
    topics = [f"{topic_name}-{i}" for i in range(6)]
    for t in topics:
        view.create_topic(t, partitions=100, replication_factor=3)
    yield topics
    view.call(lambda admin: admin.delete_topics(topics))


def run_collect(args: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "replmon.cli", "collect", *args], capture_output=True,
                          text=True, timeout=timeout_s)


def test_collect_once_prints_valid_samples(cluster: LocalCluster, view: KafkaView, topic_name: str) -> None:
    view.create_topic(topic_name, partitions=3)
    done = run_collect(["--once", "--output", "-"])  # no config: the local cluster of `replmon cluster up`
    assert done.returncode == 0, done.stderr
    samples = [parse_sample(line) for line in done.stdout.splitlines()]
    mine = sorted(s.partition for s in samples if isinstance(s, PartitionSample) and s.topic == topic_name)
    assert mine == [0, 1, 2]
    cycles = [s for s in samples if isinstance(s, CycleSample)]
    assert len(cycles) == 1 and cycles[0].cluster == "local" and cycles[0].brokers == cluster.broker_ids


def test_bad_clusters_get_one_clear_line_each_and_the_good_one_is_served(
        cluster: LocalCluster, view: KafkaView, topic_name: str, tmp_path: Path) -> None:
    view.create_topic(topic_name)
    good = cluster.bootstrap_servers
    config = {
        "clusters": [
            {"name": "good", "bootstrap_servers": good, "topics": {"include": [topic_name, "no-such-topic"]}},
            {"name": "nowhere", "bootstrap_servers": "127.0.0.1:1"},
            {"name": "typo", "bootstrap_servers": "no-such-host.invalid:9092"},
            {"name": "tls", "bootstrap_servers": good, "security": {"protocol": "SSL"}},
            {"name": "sasl", "bootstrap_servers": good, "security": {
                "protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "username": "u",
                "password": "hunter2-secret"}},
        ],
        "collector": {"request_timeout_ms": 3000},
    }
    path = tmp_path / "replmon.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_collect(["--config", str(path), "--once", "--output", "-"])
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    for name in ("nowhere", "typo", "tls", "sasl"):
        assert len([line for line in lines if f"cluster {name}:" in line]) == 1, lines
    assert "127.0.0.1:1 (connection refused: nothing listens there)" in next(
        line for line in lines if "cluster nowhere:" in line)
    assert "host name 'no-such-host.invalid' does not resolve" in next(
        line for line in lines if "cluster typo:" in line)
    tls_line = next(line for line in lines if "cluster tls:" in line)
    assert "TLS handshake" in tls_line and "security.protocol" in tls_line, tls_line
    assert "no-such-topic" in done.stderr and "matches no topic" in done.stderr
    # what the good cluster's first cycle samples, shown at the collector's default level (Kafka's metadata says
    # how many partitions the topic has)
    partitions = view.partition_count(topic_name)
    expected = f"replmon: cluster good: sampling 1 topic, {partitions} partition{'' if partitions == 1 else 's'}"
    assert expected in lines, lines
    assert "hunter2" not in done.stderr + done.stdout
    samples = [parse_sample(line) for line in done.stdout.splitlines()]
    assert [s.topic for s in samples if isinstance(s, PartitionSample)] == [topic_name]
    errors = {s.cluster: s.error for s in samples if isinstance(s, CycleSample)}
    assert errors["good"] is None and all(errors[n] for n in ("nowhere", "tls", "sasl"))


def test_metrics_port_zero_serves_on_a_free_port_and_says_which(cluster: LocalCluster, view: KafkaView,
                                                                 topic_name: str, tmp_path: Path) -> None:
    """Two collectors on one host need no port planning: ``metrics_port: 0`` picks a free port, printed at start.
    SIGTERM (a container or a unit stopped) stops each as Ctrl-C does: its cycle ends, it says so and exits 0, where
    Python's default would end it at once, its samples unflushed."""
    import re

    from streaming.exporter import scrape

    def counted_a_cycle(port: int) -> bool:
        return sum(v for _, v in scrape(port).get("replmon_collector_cycles_total", [])) >= 1

    view.create_topic(topic_name)
    path = tmp_path / "replmon.yaml"
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "local", "bootstrap_servers": cluster.bootstrap_servers,
                      "topics": {"include": [topic_name]}}],
        "collector": {"interval_s": 1.0, "metrics_port": 0}}))
    procs = [subprocess.Popen([sys.executable, "-m", "replmon.cli", "collect", "--config", str(path), "--output", "-"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        ports = []
        for proc in procs:
            assert proc.stderr is not None
            line = proc.stderr.readline()  # the first line a collector prints: where its metrics are
            found = re.fullmatch(r"replmon collect: metrics on http://127\.0\.0\.1:(\d+)/metrics\n", line)
            assert found, line
            ports.append(int(found.group(1)))
        assert len(set(ports)) == 2 and 0 not in ports
        for port in ports:
            wait_until(partial(counted_a_cycle, port), 60, f"a cycle counted on port {port}")
        for proc in procs:
            proc.terminate()
        for proc in procs:
            assert proc.wait(timeout=30) == 0
            assert proc.stderr is not None
            said = proc.stderr.read()
            assert said.splitlines()[-1:] == ["replmon collect: stopping"] and "Traceback" not in said, said
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def test_a_broker_that_stops_answering_costs_a_cycle_a_bounded_share_of_its_interval(
        healthy_cluster: LocalCluster, view: KafkaView, topic_name: str,
        producer_factory: Callable[..., SequencedProducer]) -> None:
    """At the defaults (a cycle every 5 s, 5 s per request) the first cycle after a broker goes silent waits for it
    0.6 x 5 s, not the request timeout, so the next cycle starts on time; the ones after wait only a short grace."""
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    producer_factory(topic_name, acks=1)  # writes through the fault
    config = ClusterConfig(name="test", bootstrap_servers=healthy_cluster.bootstrap_servers.split(","),
                           topics=TopicFilter(include=[topic_name]))
    defaults = CollectorConfig()
    sampler = ClusterSampler(config, defaults, "tests")
    try:
        assert sampler.cycle_wait_s == 0.6 * defaults.interval_s < defaults.request_timeout_ms / 1000
        sampler.cycle()
        assert sampler.cycle().cycle.unreachable_brokers == []
        healthy_cluster.pause(3)
        try:
            for _ in range(3):
                started = time.monotonic()
                result = sampler.cycle()
                took = time.monotonic() - started
                assert result.cycle.unreachable_brokers == [3]
                assert took < sampler.cycle_wait_s + 0.5, took
            assert took < 1.0, "a broker silent last cycle gets only a short grace"
        finally:
            healthy_cluster.resume(3)
    finally:
        sampler.close()
