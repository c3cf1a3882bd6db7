"""The replmon pipeline as the operator runs it, for end-to-end tests: `replmon collect` and `replmon stream`
as subprocesses with a YAML configuration, samples and events on a separate one-broker transport cluster.
Shared by the end-to-end modules (one definition)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, TopicPartition

from replmon.core.config import SecurityConfig
from replmon.core.processes import stop_processes
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster.cluster import free_port
from replmon.testbed.workload import SequencedProducer, readable_sequences
from streaming.exporter import Scraped, scrape

TOPIC_PREFIX = "e2e-"
SAMPLES_TOPIC = "e2e.replmon.samples"
EVENTS_TOPIC = "e2e.replmon.events"
QUARANTINE_TOPIC = "e2e.replmon.quarantine"
DEADLINE_S = 120
JOB_START_DEADLINE_S = 240
"""Spark's start and first micro-batch: ~40 s alone, minutes on a shared 2-core machine under other Spark jobs."""


class Pipeline:
    """The collector and the job as the operator runs them: `replmon collect` and `replmon stream`. Samples and
    events travel on a separate one-broker cluster, as they should in production: the watched cluster loses
    most of its brokers in these tests."""

    def __init__(self, cluster: LocalCluster, transport: LocalCluster, root: Path,
                 topic_prefix: str = TOPIC_PREFIX, security: Mapping[str, SecurityConfig] | None = None) -> None:
        """``security``: per command ("collect", "stream"), the settings it uses on both clusters (each then gets
        its own configuration file, ``replmon-<command>.yaml``); by default none (PLAINTEXT)."""
        self.cluster = cluster
        self.transport = transport
        self.root = root
        self.metrics_port = free_port()
        self.collector_metrics_port = free_port()
        self.config = root / "replmon.yaml"
        self.events_topic = EVENTS_TOPIC
        self.samples_topic = SAMPLES_TOPIC
        self.quarantine_topic = QUARANTINE_TOPIC
        settings: dict[str, Any] = {
            "clusters": [{
                "name": "local", "bootstrap_servers": cluster.bootstrap_servers.split(","),
                "topics": {"include": [f"{topic_prefix}.*"]},
            }],
            "collector": {"interval_s": 1.0, "request_timeout_ms": 2000, "metrics_port": self.collector_metrics_port,
                          "lineage_refresh_cycles": 5, "config_refresh_cycles": 2},
            "transport": {"bootstrap_servers": transport.bootstrap_servers.split(","),
                          "samples_topic": self.samples_topic, "events_topic": self.events_topic,
                          "quarantine_topic": self.quarantine_topic, "topic_partitions": 2},
            "stream": {"trigger_interval_s": 1.0, "checkpoint_dir": str(root / "checkpoint"),
                       "history_dir": str(root / "history"), "starting_offsets": "earliest",
                       "metrics_port": self.metrics_port, "state_buckets": 8, "stale_after_s": 120,
                       "hw_stalled_after_s": 120},
        }
        self.config.write_text(yaml.safe_dump(settings))
        self.configs: dict[str, Path] = {}
        for command, sec in (security or {}).items():
            own = copy.deepcopy(settings)
            own["clusters"][0]["security"] = own["transport"]["security"] = security_settings(sec)
            self.configs[command] = root / f"replmon-{command}.yaml"
            self.configs[command].write_text(yaml.safe_dump(own))
        self.collector = self._start("collect")
        self.job: subprocess.Popen[bytes] | None = None
        self.start_job()

    def _start(self, command: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{command}.log").open("ab")
        config = self.configs.get(command, self.config)
        return subprocess.Popen([sys.executable, "-m", "replmon.cli", command, "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def start_job(self) -> None:
        self.job = self._start("stream")
        wait_until(lambda: self.metric("replmon_job_batches_total"), JOB_START_DEADLINE_S,
                   "the job's first micro-batch")

    def kill_job(self) -> None:
        assert self.job is not None
        self.job.send_signal(signal.SIGKILL)
        self.job.wait(timeout=30)

    def stop(self) -> None:
        stop_processes((self.job, self.collector), grace_s=30)

    def scrape(self) -> Scraped:
        assert self.job is not None and self.job.poll() is None, (self.root / "stream.log").read_text()[-3000:]
        return scrape(self.metrics_port)

    def metric(self, name: str, **labels: str) -> float | None:
        for got, value in self.scrape().get(name, []):
            if all(got.get(k) == v for k, v in labels.items()):
                return value
        return None

    def events(self) -> list[dict[str, Any]]:
        return read_topic(self.transport.bootstrap_servers, self.events_topic, self.transport.client_security())

    def wait_event(self, what: str, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            return next((e for e in self.events() if match(e)), None)

        return wait_until(probe, DEADLINE_S, what, interval_s=1.0)


@contextlib.contextmanager
def running_pipeline(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
                     topic_prefix: str = TOPIC_PREFIX) -> Iterator[Pipeline]:
    """A healed ``cluster``, a fresh one-broker transport cluster and the pipeline on both; all stopped (and
    the transport cluster deleted) on exit."""
    cluster.heal()
    transport = LocalCluster.up(tmp_path_factory.mktemp("transport"), brokers=1, die_with_parent=True,
                                remember=False)
    try:
        p = Pipeline(cluster, transport, tmp_path_factory.mktemp("pipeline"), topic_prefix)
        try:
            yield p
        finally:
            p.stop()
    finally:
        transport.down(purge=True)


def security_settings(security: SecurityConfig) -> dict[str, Any]:
    """``security`` as a configuration file holds it (the password in clear, as an operator writes it)."""
    out = security.model_dump(mode="json", exclude_none=True)
    for key in ("password", "ssl_key_password"):
        secret = getattr(security, key)
        if secret is not None:
            out[key] = secret.get_secret_value()
    return out


def read_topic(bootstrap_servers: str, topic: str, security: SecurityConfig | None = None) -> list[dict[str, Any]]:
    """Every JSON record of ``topic`` (committed ones), from the beginning to its current end."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=1000, isolation_level="read_committed",
                             **(security or SecurityConfig()).kafka_python())
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out: list[dict[str, Any]] = []
        while any(consumer.position(tp) < end[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(json.loads(r.value) for r in records)
        return out
    finally:
        consumer.close()


def of(topic: str, type_: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["topic"] == topic and e["type"] == type_


@dataclass
class UncleanLoss:
    replicated_end: int
    """Where every replica's log ended before the followers stopped: the unclean leader's epoch starts here."""
    high_watermark: int
    """The old leader's high watermark (its log end offset) before it died."""
    lost: set[int]
    """Acknowledged sequences that no consumer can read after the election."""


def cause_unclean_loss(cluster: LocalCluster, view: KafkaView, topic: str,
                       producer_factory: Callable[..., SequencedProducer],
                       before_leader_dies: Callable[[int], None]) -> UncleanLoss:
    """Broker 1 leads ``topic``-0 (replicas 1, 2, 3, min.insync.replicas 1, acks=1 writes); the followers stop,
    broker 1 alone takes 150 more messages, ``before_leader_dies(high_watermark)`` waits until the observer
    under test saw them committed; broker 1 dies and broker 2, outside the ISR, is elected uncleanly. Checked
    on Kafka's side (the local cluster's unclean election is tested here): exactly what only broker 1 held is
    lost, everything replicated before is still readable."""
    view.create_topic(topic, assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": "1"})
    producer = producer_factory(topic, acks=1)
    producer.wait_acknowledged(100)
    producer.pause()
    replicated = producer.acknowledged()  # on all three replicas once the HW covers them with a full ISR
    end = max(offset for _, offset in replicated.values()) + 1
    wait_until(lambda: view.high_watermark(topic) == end and len(view.partition(topic).isr) == 3,
               30, "every replica to hold every message")

    cluster.stop(2)
    cluster.stop(3)
    wait_until(lambda: view.partition(topic).isr == [1], 30, "the ISR to shrink to the leader")
    producer.resume()
    producer.wait_acknowledged(150)  # acknowledged by broker 1 alone
    producer.pause()
    acknowledged = producer.acknowledged()
    only_on_leader = set(acknowledged) - set(replicated)
    assert len(only_on_leader) >= 150
    # committed: min.insync.replicas=1 lets the HW cover what the lone leader holds
    assert set(acknowledged) <= set(readable_sequences(cluster.live_bootstrap_servers, topic))
    high_watermark = view.high_watermark(topic)
    former = view.partition(topic)
    before_leader_dies(high_watermark)

    cluster.kill(1)
    cluster.start(2)  # a stale follower: not in the ISR, so no clean election can pick it
    wait_until(lambda: view.partition(topic).leader == -1, 30, "the partition to go offline")
    cluster.elect_unclean(topic, 0)
    after = wait_until(lambda: (v := view.partition(topic)).leader == 2 and v, 30,
                       "the unclean election of broker 2")
    assert 2 not in former.isr and 2 not in former.elr
    assert after.leader_epoch > former.leader_epoch
    readable = set(readable_sequences(cluster.live_bootstrap_servers, topic))
    lost = set(acknowledged) - readable
    assert lost == only_on_leader, "exactly what only the old leader held is lost"
    assert readable == set(replicated)
    return UncleanLoss(end, high_watermark, lost)
