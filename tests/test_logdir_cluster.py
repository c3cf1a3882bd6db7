"""The log-dir agent on the real local cluster: what it reads from disk is checked against Kafka's own view
(replmon/testbed/kafka_view.py) and, for the faults, against Kafka's own reading of the same files
(kafka-dump-log, tests/kafka_dump.py), including for brokers that are down; producers write through every fault."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collectors.logdir.scanner import ScanContext, scan_log_dir
from replmon.cli import main
from replmon.contracts.samples import EpochEntry, ReplicaSample, parse_sample
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster, NodeState
from replmon.testbed.workload import SequencedProducer
from tests.kafka_dump import Batch, lineage_of, log_batches

pytestmark = pytest.mark.cluster
CTX = ScanContext(cluster="local", agent_id="test", cycle=0, sample_time_ms=0)


@pytest.fixture
def view(healthy_cluster: LocalCluster) -> Iterator[KafkaView]:
    """Kafka's view through a client of this test alone: one that lived through brokers dying and coming back
    (earlier fault tests) may no longer find the cluster."""
    fresh = KafkaView(healthy_cluster.bootstrap_servers)
    yield fresh
    fresh.close()


def replica(cluster: LocalCluster, broker_id: int, topic: str, partition: int = 0) -> ReplicaSample:
    """The agent's sample of one replica, read from the broker's log dir now."""
    scan = scan_log_dir(cluster.broker_log_dir(broker_id), CTX)
    assert scan.error is None and scan.broker_id == broker_id
    found = [s for s in scan.samples if (s.topic, s.partition) == (topic, partition)]
    assert len(found) == 1, f"{topic}-{partition} not on broker {broker_id}"
    return found[0]


def leos(cluster: LocalCluster, topic: str) -> list[int | None]:
    return [replica(cluster, b, topic).log_end_offset for b in cluster.broker_ids]


def caught_up(cluster: LocalCluster, view: KafkaView, topic: str) -> int:
    """The high watermark, once the ISR is full and every replica's LEO on disk equals it (else 0)."""
    hw = view.high_watermark(topic)
    if len(view.partition(topic).isr) == 3 and leos(cluster, topic) == [hw] * 3:
        return hw
    return 0


def test_leo_of_every_replica_matches_the_high_watermark(
    cluster: LocalCluster, view: KafkaView, topic_name: str, producer_factory: Callable[..., SequencedProducer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    view.create_topic(topic_name, replication_factor=3)
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(300)
    for b in cluster.broker_ids:  # read while the producer appends: never an error, never past Kafka's LEO
        sample = replica(cluster, b, topic_name)
        assert sample.error is None and sample.log_end_offset is not None
    producer.pause()
    last_acked = max(offset for _, offset in producer.acknowledged().values())
    hw = wait_until(lambda: caught_up(cluster, view, topic_name), 30, "every replica at the HW")
    assert hw == last_acked + 1
    state = view.partition(topic_name)
    for b in cluster.broker_ids:
        sample = replica(cluster, b, topic_name)
        assert sample.last_batch_leader_epoch == state.leader_epoch
        assert sample.epoch_lineage[-1].leader_epoch == state.leader_epoch
        assert sample.topic_id is not None and sample.size_bytes > 0 and sample.error is None
    # the leader checkpoints its high watermark every replica.high.watermark.checkpoint.interval.ms (5 s)
    wait_until(lambda: replica(cluster, state.leader, topic_name).high_watermark_checkpoint == hw, 20,
               "the checkpointed high watermark to reach the high watermark")

    # the same through the command line, all three log dirs in one agent
    dirs = [str(cluster.broker_log_dir(b)) for b in cluster.broker_ids]
    assert main(["agent", "--log-dir", *dirs, "--once", "--output", "-"]) == 0
    samples = [parse_sample(line) for line in capsys.readouterr().out.splitlines()]
    ours = {s.broker_id: s for s in samples if isinstance(s, ReplicaSample) and s.topic == topic_name}
    assert sorted(ours) == cluster.broker_ids
    assert all(s.log_end_offset == hw and s.error is None for s in ours.values())


def partition_dir(cluster: LocalCluster, broker_id: int, topic: str) -> Path:
    return cluster.broker_log_dir(broker_id) / f"{topic}-0"


def assert_reads_as_kafka(sample: ReplicaSample, kafka: list[Batch]) -> None:
    """The agent's reading of a log Kafka's own dump tool read at rest: its end, its last batch's epoch, its
    lineage."""
    assert sample.error is None
    assert sample.log_end_offset == kafka[-1].last_offset + 1
    assert sample.last_batch_leader_epoch == kafka[-1].leader_epoch
    assert [(e.leader_epoch, e.start_offset) for e in sample.epoch_lineage] == lineage_of(kafka)


def test_reads_a_stopped_brokers_log_dir(
    healthy_cluster: LocalCluster, view: KafkaView, topic_name: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    """Broker 3 stops while the producer writes on: its log on disk, read by the agent, is what Kafka's dump tool
    reads there, and the others' logs go on past it."""
    view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(100)
    wait_until(lambda: len(view.partition(topic_name).isr) == 3, 30, "a full ISR")

    healthy_cluster.stop(3)
    producer.wait_acknowledged(100)  # acks=all: committed without broker 3
    assert healthy_cluster.node_state(3) == NodeState.STOPPED
    stopped = replica(healthy_cluster, 3, topic_name)
    assert_reads_as_kafka(stopped, log_batches(partition_dir(healthy_cluster, 3, topic_name)))
    assert (stopped.log_end_offset or 0) < view.high_watermark(topic_name)
    # a follower learns the HW one fetch late; its shutdown checkpoints what it knew
    assert 0 < (stopped.high_watermark_checkpoint or 0) <= (stopped.log_end_offset or 0)


def test_new_leader_lineage_after_a_leader_kill(
    healthy_cluster: LocalCluster, view: KafkaView, topic_name: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    """Leader 2 is SIGKILLed while the producer writes on: the dead leader's log and the new leader's new epoch
    entry, read by the agent, are what Kafka's dump tool reads in the same files."""
    view.create_topic(topic_name, assignment={0: [2, 3, 1]})
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(100)
    before = view.partition(topic_name)
    assert before.leader == 2

    healthy_cluster.kill(2)
    after = wait_until(lambda: (v := view.partition(topic_name)).leader not in (2, -1) and v, 30,
                       "a new leader after the kill")
    producer.wait_acknowledged(50)
    killed = replica(healthy_cluster, 2, topic_name)  # the dead leader's log, read from disk
    assert_reads_as_kafka(killed, log_batches(partition_dir(healthy_cluster, 2, topic_name)))
    assert killed.last_batch_leader_epoch == before.leader_epoch
    new_leader = replica(healthy_cluster, after.leader, topic_name)
    kafka = lineage_of(log_batches(partition_dir(healthy_cluster, after.leader, topic_name)))
    started = dict(kafka)[after.leader_epoch]
    assert EpochEntry(leader_epoch=after.leader_epoch, start_offset=started) in new_leader.epoch_lineage
    assert new_leader.epoch_lineage[-1].leader_epoch == after.leader_epoch
    assert started <= (killed.log_end_offset or 0), "the new epoch begins where the new leader's copy ended"


def test_unclean_election_old_leader_holds_what_the_new_lineage_lacks(
    healthy_cluster: LocalCluster, view: KafkaView, topic_name: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    """The unclean scenario, an acks=1 producer writing throughout: the followers stop, leader 1 alone takes
    writes and dies, stale broker 2 is elected. Read from disk before broker 1 returns, its log goes on past
    where the new leader's lineage says its epoch ended: the offsets only it holds."""
    view.create_topic(topic_name, assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": "1"})
    producer = producer_factory(topic_name, acks=1)
    producer.wait_acknowledged(100)
    wait_until(lambda: len(view.partition(topic_name).isr) == 3, 30, "a full ISR")
    healthy_cluster.stop(2)
    healthy_cluster.stop(3)
    wait_until(lambda: view.partition(topic_name, via=1).isr == [1], 30, "the ISR to shrink to the leader")
    producer.wait_acknowledged(100)  # on broker 1 alone
    former = view.partition(topic_name, via=1)

    healthy_cluster.kill(1)
    healthy_cluster.start(2)
    wait_until(lambda: view.partition(topic_name, via=2).leader == -1, 30, "the partition to go offline")
    healthy_cluster.elect_unclean(topic_name, 0)
    after = wait_until(lambda: (v := view.partition(topic_name, via=2)).leader == 2 and v, 30,
                       "broker 2 to become leader by unclean election")
    # the new leader writes new messages at offsets where the old leader holds others
    producer.wait_acknowledged(100)

    assert healthy_cluster.node_state(1) == NodeState.STOPPED  # before the old leader restarts
    old = replica(healthy_cluster, 1, topic_name)
    old_kafka = log_batches(partition_dir(healthy_cluster, 1, topic_name))
    assert_reads_as_kafka(old, old_kafka)
    assert old.last_batch_leader_epoch == former.leader_epoch
    new = replica(healthy_cluster, 2, topic_name)
    started = dict(lineage_of(log_batches(partition_dir(healthy_cluster, 2, topic_name))))[after.leader_epoch]
    assert EpochEntry(leader_epoch=after.leader_epoch, start_offset=started) in new.epoch_lineage
    assert after.leader_epoch not in {e.leader_epoch for e in old.epoch_lineage}
    # where the new lineage says the old leader's last epoch ended, the old leader's log goes on: divergence
    old_last_epoch = old.epoch_lineage[-1].leader_epoch
    new_end_of_it = min(e.start_offset for e in new.epoch_lineage if e.leader_epoch > old_last_epoch)
    assert new_end_of_it == started < (old.log_end_offset or 0)
    assert (old.log_end_offset or 0) - new_end_of_it >= 100  # offsets held by the old leader alone


def test_agent_publishes_to_the_samples_topic(cluster: LocalCluster, view: KafkaView, topic_name: str) -> None:
    """Without --output the agent publishes every sample to the samples topic of the (local) cluster: the
    replicas of this test's topic arrive from all three brokers."""
    from replmon.core.config import load_config
    from replmon.testbed.harness import read_topic

    transport = load_config().transport
    view.create_topic(topic_name, replication_factor=3)
    dirs = [cluster.broker_log_dir(b) for b in cluster.broker_ids]
    assert main(["agent", "--log-dir", *map(str, dirs), "--once"]) == 0

    def ours() -> dict[int, dict[str, object]]:
        return {s["broker_id"]: s for s in read_topic(cluster.bootstrap_servers, transport.samples_topic)
                if s.get("schema") == "replica/v1" and s.get("topic") == topic_name}

    published = wait_until(lambda: len(ours()) == 3 and ours(), 30, f"{topic_name}'s replicas in the samples topic")
    assert sorted(published) == cluster.broker_ids
    assert all(s["log_end_offset"] == 0 and s["error"] is None for s in published.values())


def test_sigterm_stops_the_agent_after_its_cycle(cluster: LocalCluster) -> None:
    """SIGTERM (a container or a unit stopped) stops the agent as Ctrl-C does: the cycle under way ends, what it read
    is flushed, it says so and exits 0, where Python's default would end it at once, its samples unflushed."""
    proc = subprocess.Popen([sys.executable, "-m", "replmon.cli", "agent", "--log-dir",
                             str(cluster.broker_log_dir(cluster.broker_ids[0])), "--output", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: lines, 60, "the agent's first samples")
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        reader.join(timeout=10)
        said = proc.stderr.read()
        assert said.splitlines()[-1:] == ["replmon agent: stopping"] and "Traceback" not in said, said
        samples = [parse_sample(line) for line in lines]  # every line whole: the last cycle was not cut
        assert any(isinstance(s, ReplicaSample) for s in samples)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
