"""Configuration files of the local cluster's nodes (pure functions: values in, text out).

The defaults make replication dynamics fast and visible in tests: a follower that stops fetching leaves the ISR
after ``replica.lag.time.max.ms`` (3 s), a broker that stops heartbeating is fenced after 6 s, and
``min.insync.replicas`` is 2 so that one lost follower puts a partition at min ISR and two put it under.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CONTROLLER_ID = 0

BROKER_DEFAULTS: dict[str, str] = {
    "replica.lag.time.max.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "6000",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "num.partitions": "1",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "replica.fetch.wait.max.ms": "200",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.replica.fetchers": "1",
    "background.threads": "2",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "8388608",
}
"""Broker settings of the local cluster; ``replmon cluster up --set KEY=VALUE`` overrides any of them."""

CONTROLLER_SETTINGS = ("min.insync.replicas", "default.replication.factor", "num.partitions",
                       "unclean.leader.election.enable", "auto.leader.rebalance.enable")
"""In KRaft the controller creates topics and elects leaders: these settings must be its own too (without
``auto.leader.rebalance.enable=false`` the controller runs its periodic preferred-leader election and moves
leaders behind a test's back)."""

CONTROLLER_HEAP = "256m"
BROKER_HEAP = "512m"


def sized_defaults(brokers: int) -> dict[str, str]:
    """Replication settings a cluster of ``brokers`` can satisfy (a one-broker cluster cannot hold RF 3)."""
    if brokers >= 3:
        return {}
    rf = str(brokers)
    min_isr = str(min(2, brokers) if brokers > 1 else 1)
    return {"default.replication.factor": rf, "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf, "min.insync.replicas": min_isr,
            "transaction.state.log.min.isr": min_isr}


def render(props: Mapping[str, str]) -> str:
    """Java properties text, one ``key=value`` a line, in the given order."""
    return "".join(f"{key}={value}\n" for key, value in props.items())


def controller_properties(controller_port: int, data_dir: Path,
                          overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    settings = {**BROKER_DEFAULTS, **(overrides or {})}
    return {
        **{key: settings[key] for key in CONTROLLER_SETTINGS},
        "process.roles": "controller",
        "node.id": str(CONTROLLER_ID),
        "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_port}",
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "broker.heartbeat.interval.ms": BROKER_DEFAULTS["broker.heartbeat.interval.ms"],
        "broker.session.timeout.ms": BROKER_DEFAULTS["broker.session.timeout.ms"],
        "num.io.threads": "2",
        "num.network.threads": "2",
    }


def broker_properties(
    node_id: int,
    port: int,
    controller_port: int,
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    props = {
        "process.roles": "broker",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        **BROKER_DEFAULTS,
    }
    props.update(overrides or {})
    return props


LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
"""
"""log4j2 configuration of every node: INFO to stdout, which the node's ``server.log`` captures."""


def jvm_options(heap: str) -> list[str]:
    """Small heaps and C1-only JIT: four nodes on two cores start fast and leave room for Spark."""
    return [
        f"-Xmx{heap}",
        "-Xms128m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:TieredStopAtLevel=1",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
    ]
