"""Security on a real secure cluster (`replmon cluster up --secure`: SASL_SSL, SCRAM-SHA-512, TLS, ACLs enforced by
StandardAuthorizer): the collector and the job run end to end as their least-privilege users; a missing ACL, a
wrong password and an untrusted certificate each end a stage with one clear line; no secret leaks into logs,
/metrics, events, history or --help; the exporters listen on loopback unless told otherwise.

One one-broker secure cluster for the module; it is both the watched and the transport cluster. One Spark start
(the `secure_pipeline` fixture), used by the last tests.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from kafka import KafkaProducer
from kafka.errors import ClusterAuthorizationFailedError
from pydantic import SecretStr

from replmon.core import security
from replmon.core.config import ReplmonConfig, SecurityConfig, TransportConfig, load_config
from replmon.core.errors import ReplmonError
from replmon.core.kafka_topics import ensure_topic
from replmon.core.security import GRANTS, Grant, Role, Where
from replmon.testbed import harness
from replmon.testbed.harness import read_topic, security_settings
from replmon.testbed.kafka_view import wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster import tls as local_tls
from replmon.testbed.localcluster.cluster import free_port
from streaming.exporter import JobExporter
from tests.pipeline import (
    DEADLINE_S,
    EVENTS_TOPIC,
    QUARANTINE_TOPIC,
    SAMPLES_TOPIC,
    TOPIC_PREFIX,
    TRANSPORT_TOPICS,
    Pipeline,
)

pytestmark = [pytest.mark.cluster]

TRANSPORT = TransportConfig(samples_topic=SAMPLES_TOPIC, events_topic=EVENTS_TOPIC, quarantine_topic=QUARANTINE_TOPIC,
                            topic_partitions=2)
LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1")


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path_factory.mktemp("secure"), brokers=1, die_with_parent=True, remember=False,
                              secure=True)
    try:
        cluster.grant_roles(TRANSPORT)  # the pipeline's topic names
        admin_config = ReplmonConfig(clusters=[], transport=TRANSPORT.model_copy(update={
            "bootstrap_servers": cluster.bootstrap_servers.split(","), "security": cluster.client_security()}))
        for topic in (SAMPLES_TOPIC, EVENTS_TOPIC, QUARANTINE_TOPIC):
            ensure_topic(admin_config, topic)
        yield cluster
    finally:
        cluster.down(purge=True)


def role_config(cluster: LocalCluster, sec: SecurityConfig, path: Path, watched: SecurityConfig | None = None,
                **stream: Any) -> Path:
    """A configuration file for one stage, watching (as ``watched``, default ``sec``) and publishing to the secure
    cluster as ``sec``'s user."""
    servers = cluster.bootstrap_servers.split(",")
    settings = {
        "clusters": [{"name": "local", "bootstrap_servers": servers, "security": security_settings(watched or sec),
                      "topics": {"include": [f"{TOPIC_PREFIX}.*"]}}],
        "collector": {"interval_s": 1.0, "request_timeout_ms": 2000, "metrics_port": 0},
        "transport": {**TRANSPORT.model_dump(mode="json", exclude_none=True), "bootstrap_servers": servers,
                      "security": security_settings(sec)},
        "stream": {"checkpoint_dir": str(path.parent / "checkpoint"), "history_dir": str(path.parent / "history"),
                   "metrics_port": 0, **stream},
    }
    path.write_text(yaml.safe_dump(settings))
    return path


def replmon(*args: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "replmon.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def acl(grant: Grant) -> list[Any]:
    return security.acl_objects([grant], TRANSPORT, f"User:{grant.role}")


class Revoked:
    """``grant`` withdrawn from its role's user inside the block, given back after it; both seen in effect on
    ``topic`` (default: the grant's own topic) before going on."""

    def __init__(self, cluster: LocalCluster, grant: Grant, topic: str | None = None) -> None:
        self.cluster = cluster
        self.grant = grant
        self.topic = topic or grant.resource_name(TRANSPORT)

    def _config(self) -> ReplmonConfig:
        return ReplmonConfig(clusters=[], transport=TRANSPORT.model_copy(update={
            "bootstrap_servers": self.cluster.bootstrap_servers.split(","),
            "security": self.cluster.client_security(str(self.grant.role))}))

    def _withheld(self) -> bool:
        as_role = security.admin_client(self.cluster.bootstrap_servers.split(","),
                                        self.cluster.client_security(str(self.grant.role)), "replmon-test")
        try:
            if self.grant.resource_type == "CLUSTER":  # DESCRIBE on the cluster: the reassignments in flight
                try:
                    as_role.list_partition_reassignments()
                except ClusterAuthorizationFailedError:
                    return True
                return False
            return security.check_topic_grants(as_role, None, [(self.topic, self.grant)]) is not None
        finally:
            as_role.close()

    def _admin(self, change: Any) -> None:
        admin = self.cluster.admin_client(10_000)
        try:
            change(admin, acl(self.grant))
        finally:
            admin.close()

    def __enter__(self) -> Revoked:
        self._admin(security.delete_acls)
        wait_until(self._withheld, 30, f"{self.grant} to be withdrawn")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._admin(security.create_acls)
        wait_until(lambda: not self._withheld(), 30, f"{self.grant} to be given back")


def _refused(config: ReplmonConfig, role: Role) -> str | None:
    try:
        security.check_access(config, role)
    except ReplmonError as exc:
        return str(exc)
    return None


def under_min_isr_topic(cluster: LocalCluster, topic: str, messages: int, also: dict[str, bytes] | None = None
                        ) -> None:
    """``topic``, one partition, min.insync.replicas 2 on the one broker (under it from the start), holding
    ``messages`` messages written as the admin; ``also``: one record more to each topic named."""
    admin = cluster.admin_client(10_000)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1,
                                     "configs": {"min.insync.replicas": "2"}}}, timeout_ms=15_000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                             **cluster.client_security().kafka_python())
    try:
        for i in range(messages):
            producer.send(topic, f"m{i}".encode())
        for other, value in (also or {}).items():
            producer.send(other, value)
        producer.flush(timeout=30)
    finally:
        producer.close()


# ---------------------------------------------------------------------------------------------- the cluster
def test_secure_cluster_takes_a_scram_login_or_a_client_certificate_and_keeps_secrets_out_of_cluster_json(
        secure_cluster: LocalCluster) -> None:
    from kafka.admin import KafkaAdminClient

    sec = secure_cluster.spec.security
    assert sec is not None
    assert [s.listener.split(":")[0] for s in secure_cluster.status()] == ["CONTROLLER(SSL)", "SASL_SSL"]
    with pytest.raises(Exception, match="bootstrap"):  # PLAINTEXT is not offered at all
        KafkaAdminClient(bootstrap_servers=secure_cluster.bootstrap_servers, bootstrap_timeout_ms=3000,
                         request_timeout_ms=3000)
    passwords = json.loads(sec.credentials_file.read_text())
    assert sorted(passwords) == sorted(["admin", *map(str, Role)])
    state = (secure_cluster.dir / "cluster.json").read_text()
    assert not [user for user, pw in passwords.items() if pw in state]
    for secret in (sec.credentials_file, sec.keystore_file, *sec.users.values(), *sec.keys.values(),
                   *(n.config_file for n in secure_cluster.spec.nodes if n.role == "broker")):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    status = replmon("cluster", "status", "--dir", str(secure_cluster.dir))
    assert status.returncode == 0, status.stderr
    assert "(SASL_SSL)" in status.stdout and str(sec.ca_file) in status.stdout
    assert f"mutual TLS (SSL, a user's client certificate) at {secure_cluster.mtls_bootstrap_servers}" in \
        status.stdout.replace("\n", "")
    record = json.loads(replmon("cluster", "status", "--dir", str(secure_cluster.dir), "--json").stdout)["security"]
    assert record["mtls_bootstrap_servers"] == secure_cluster.mtls_bootstrap_servers.split(",")
    assert record["client_certificates"]["job"] == {"certificate": str(sec.certificates["job"]),
                                                    "key": str(sec.keys["job"])}
    # the mutual-TLS listener takes no client without a certificate, however well it trusts the broker
    with pytest.raises(Exception, match="bootstrap"):
        KafkaAdminClient(bootstrap_servers=secure_cluster.mtls_bootstrap_servers, bootstrap_timeout_ms=3000,
                         request_timeout_ms=3000, security_protocol="SSL", ssl_cafile=str(sec.ca_file))
    # the Java client settings of a user work as they are: kafka-acls.sh --command-config takes them
    props = dict(line.split("=", 1) for line in sec.users["collector"].read_text().splitlines())
    assert props["security.protocol"] == "SASL_SSL" and props["ssl.truststore.location"] == str(sec.ca_file)


# ---------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("command", ["collect", "stream"])
@pytest.mark.parametrize("defect", ["wrong password", "untrusted certificate"])
def test_a_refused_login_is_one_clear_line_and_exit_2(secure_cluster: LocalCluster, tmp_path: Path, command: str,
                                                      defect: str) -> None:
    wrong = "wrong-" + os.urandom(8).hex()
    sec = secure_cluster.client_security("collector" if command == "collect" else "job")
    if defect == "wrong password":
        sec = sec.model_copy(update={"password": SecretStr(wrong)})
        expected = "user " + str(sec.username)
    else:
        other_ca = tmp_path / "other-ca.pem"
        other_ca.write_bytes(local_tls.new_authority("someone else's CA").cert_pem)
        sec = sec.model_copy(update={"ssl_cafile": other_ca})
        expected = f"the broker's certificate is not trusted by security.ssl_cafile {other_ca}"
    config = role_config(secure_cluster, sec, tmp_path / "replmon.yaml")
    args = ["collect", "--once"] if command == "collect" else ["stream"]
    result = replmon(*args, "--config", str(config))
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"replmon: samples cluster {secure_cluster.bootstrap_servers}: ")
    assert expected in line
    assert wrong not in result.stderr + result.stdout


def test_a_watched_cluster_that_refuses_the_collector_is_named_in_one_line(secure_cluster: LocalCluster,
                                                                            tmp_path: Path) -> None:
    sec = secure_cluster.client_security("collector")
    wrong = sec.model_copy(update={"password": SecretStr("wrong-" + os.urandom(8).hex())})
    config = role_config(secure_cluster, sec, tmp_path / "replmon.yaml", watched=wrong)
    result = replmon("collect", "--once", "--config", str(config))
    assert result.returncode == 2, result.stderr
    # replmon.core.kafka_diagnose has two wordings: which one depends on whether kafka-python reads the broker's
    # SASL error response before the broker closes the connection (a race); both name the user and mechanism
    # and point at the credentials
    line = one_line(result.stderr)
    assert line.startswith(("replmon: cluster local: authentication of user collector with SCRAM-SHA-512 failed",
                            "replmon: cluster local: the broker closed every connection while authenticating user "
                            "collector with SCRAM-SHA-512")), line
    assert "check security.username" in line, line
    assert wrong.password is not None and wrong.password.get_secret_value() not in result.stderr


# ---------------------------------------------------------------------------------------------- ACLs
CHECKED = [g for g in GRANTS if g.where == Where.TRANSPORT and not g.create_only]


@pytest.mark.parametrize("grant", CHECKED, ids=[f"{g.role}-{g.operation}-{g.resource.strip('{}')}" for g in CHECKED])
def test_each_withdrawn_grant_is_named(secure_cluster: LocalCluster, grant: Grant) -> None:
    with Revoked(secure_cluster, grant) as revoked:
        message = _refused(revoked._config(), grant.role)
    topic = grant.resource_name(TRANSPORT)
    assert message == (f"samples cluster {secure_cluster.bootstrap_servers}: TOPIC_AUTHORIZATION_FAILED: user "
                       f"{grant.role} lacks {grant.operation} on topic {topic} (docs/security.md lists the ACLs of the "
                       f"{grant.role})")


def _grant(role: Role, operation: str, resource: str) -> Grant:
    return next(g for g in GRANTS if (g.role, g.operation, g.resource) == (role, operation, resource))


def test_collector_without_write_on_the_samples_topic_stops_with_the_missing_acl(secure_cluster: LocalCluster,
                                                                                 tmp_path: Path) -> None:
    config = role_config(secure_cluster, secure_cluster.client_security("collector"), tmp_path / "collector.yaml")
    with Revoked(secure_cluster, _grant(Role.COLLECTOR, "WRITE", "{samples_topic}")):
        result = replmon("collect", "--once", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr) == (
        f"replmon: samples cluster {secure_cluster.bootstrap_servers}: TOPIC_AUTHORIZATION_FAILED: user collector "
        f"lacks WRITE on topic {SAMPLES_TOPIC} (docs/security.md lists the ACLs of the collector)")
    ok = replmon("collect", "--once", "--config", str(config))  # given back: the same command works
    assert ok.returncode == 0, ok.stderr


def test_job_without_read_on_the_samples_topic_stops_before_spark_starts(secure_cluster: LocalCluster,
                                                                         tmp_path: Path) -> None:
    config = role_config(secure_cluster, secure_cluster.client_security("job"), tmp_path / "job.yaml")
    with Revoked(secure_cluster, _grant(Role.JOB, "READ", "{samples_topic}")):
        result = replmon("stream", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr).endswith(
        f"TOPIC_AUTHORIZATION_FAILED: user job lacks READ on topic {SAMPLES_TOPIC} (docs/security.md lists the "
        "ACLs of the job)")


def test_collector_without_describe_configs_names_it_and_samples_without_min_isr(secure_cluster: LocalCluster,
                                                                                 tmp_path: Path) -> None:
    topic = f"{TOPIC_PREFIX}secure-configs-{os.urandom(3).hex()}"
    admin = secure_cluster.admin_client(10_000)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, timeout_ms=15_000)
    finally:
        admin.close()
    config = role_config(secure_cluster, secure_cluster.client_security("collector"), tmp_path / "collector.yaml")
    with Revoked(secure_cluster, _grant(Role.COLLECTOR, "DESCRIBE_CONFIGS", "*"), topic):
        result = replmon("collect", "--once", "--output", "-", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "replmon: cluster local: TOPIC_AUTHORIZATION_FAILED: user collector lacks DESCRIBE_CONFIGS on topic " \
        in result.stderr and topic in result.stderr, result.stderr
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    mine = [s for s in samples if s.get("topic") == topic]
    assert mine and all(s["min_insync_replicas"] is None for s in mine)


def test_collector_without_describe_on_the_cluster_names_it_and_samples_without_the_reassignments(
        secure_cluster: LocalCluster, tmp_path: Path) -> None:
    """ListPartitionReassignments takes DESCRIBE on the cluster: refused, the collector says so in one line and its
    samples leave the reassignments in flight unknown (None); given back, they say none is in flight."""
    config = role_config(secure_cluster, secure_cluster.client_security("collector"), tmp_path / "collector.yaml")
    with Revoked(secure_cluster, _grant(Role.COLLECTOR, "DESCRIBE", "kafka-cluster")):
        result = replmon("collect", "--once", "--output", "-", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert ("replmon: cluster local: ListPartitionReassignments refused (CLUSTER_AUTHORIZATION_FAILED: user "
            "collector lacks DESCRIBE on cluster kafka-cluster): the replicas a reassignment in flight adds count as "
            "under-replicated while they catch up") in result.stderr.splitlines(), result.stderr
    refused = [json.loads(line) for line in result.stdout.splitlines()]
    partitions = [s for s in refused if s.get("schema") == "partition/v1"]
    assert partitions and all(s["adding_replicas"] is None and s["removing_replicas"] is None for s in partitions)
    given = replmon("collect", "--once", "--output", "-", "--config", str(config))
    assert given.returncode == 0 and "ListPartitionReassignments" not in given.stderr, given.stderr
    samples = [json.loads(line) for line in given.stdout.splitlines()]
    partitions = [s for s in samples if s.get("schema") == "partition/v1"]
    assert partitions and all(s["adding_replicas"] == [] and s["removing_replicas"] == [] for s in partitions)


def test_create_is_needed_only_to_create_a_missing_topic(secure_cluster: LocalCluster) -> None:
    """A samples topic the operator creates needs no CREATE grant; a missing one is named when it is missing."""
    fresh = TransportConfig(samples_topic=f"sec.fresh.{os.urandom(4).hex()}")
    write = security.acl_objects([_grant(Role.COLLECTOR, "WRITE", "{samples_topic}")], fresh, "User:collector")
    admin = secure_cluster.admin_client(10_000)
    try:
        security.create_acls(admin, write)
        as_collector = ReplmonConfig(clusters=[], transport=fresh.model_copy(update={
            "bootstrap_servers": secure_cluster.bootstrap_servers.split(","),
            "security": secure_cluster.client_security("collector")}))
        with pytest.raises(ReplmonError) as refused:
            ensure_topic(as_collector, fresh.samples_topic)
        assert str(refused.value).startswith(
            f"TOPIC_AUTHORIZATION_FAILED: user collector lacks CREATE on topic {fresh.samples_topic}")
        as_admin = as_collector.model_copy(update={"transport": as_collector.transport.model_copy(
            update={"security": secure_cluster.client_security()})})
        ensure_topic(as_admin, fresh.samples_topic)
        ensure_topic(as_collector, fresh.samples_topic)  # exists: no CREATE needed
        security.check_access(as_collector, Role.COLLECTOR)
    finally:
        security.delete_acls(admin, write)
        admin.close()


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def secure_pipeline(secure_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """`replmon collect` as user collector and `replmon stream` as user job, nothing more granted than
    replmon.core.security.GRANTS."""
    p = Pipeline(secure_cluster, secure_cluster, tmp_path_factory.mktemp("secure-pipeline"), security={
        "collect": secure_cluster.client_security("collector"), "stream": secure_cluster.client_security("job")})
    try:
        yield p
    finally:
        p.stop()


@pytest.mark.spark
def test_least_privilege_users_run_the_pipeline_end_to_end(secure_pipeline: Pipeline,
                                                           secure_cluster: LocalCluster) -> None:
    topic = f"{TOPIC_PREFIX}secure-under-min-isr"
    # and a record to the quarantine, which the job must be able to write
    under_min_isr_topic(secure_cluster, topic, 20, also={SAMPLES_TOPIC: b"not a sample"})
    p = secure_pipeline
    # the collector described the topic, its offsets and its configs (DESCRIBE, DESCRIBE_CONFIGS) and wrote samples
    # (WRITE); the job read them (READ) and exported them
    wait_until(lambda: p.metric("replmon_partition_high_watermark", topic=topic, partition="0") == 20, DEADLINE_S,
               "the high watermark gauge at 20")
    assert p.metric("replmon_partition_min_insync_replicas", topic=topic, partition="0") == 2
    event = p.wait_event("UNDER_MIN_ISR_START", lambda e: e["topic"] == topic and e["type"] == "UNDER_MIN_ISR_START")
    assert event["isr"] == [1]
    wait_until(lambda: p.metric("replmon_quarantined_samples_total", reason="malformed_json"), DEADLINE_S,
               "the malformed record quarantined")
    quarantined = read_topic(secure_cluster.bootstrap_servers, QUARANTINE_TOPIC, secure_cluster.client_security())
    assert any(q["value"] == "not a sample" for q in quarantined)
    history = wait_until(lambda: (r := replmon("events", "--config", str(p.configs["stream"]), "--topic", topic))
                         .returncode == 0 and "UNDER_MIN_ISR_START" in r.stdout and r, 60, "the event in the history")
    assert "below min.insync.replicas=2" in history.stdout.replace("\n", " ")


@pytest.mark.spark
def test_client_certificates_alone_authenticate_the_job_its_kafka_source_and_its_publisher(
        secure_pipeline: Pipeline, secure_cluster: LocalCluster, tmp_path: Path) -> None:
    """``replmon stream`` as user job by its client certificate on the mutual-TLS listener (``CN=job`` is
    ``User:job``: the job's grants, nothing more), its key encrypted with a password: Spark's Kafka source takes the
    certificate and the key inline (no executor needs the files), the events and quarantine publisher reads them
    from the files. The samples are those the SCRAM pipeline's collector writes; the events go to topics of this
    job's own. Neither the key nor its password reaches the job's log."""
    transport = TRANSPORT.model_copy(update={"events_topic": f"{EVENTS_TOPIC}-mtls",
                                             "quarantine_topic": f"{QUARANTINE_TOPIC}-mtls"})
    secure_cluster.grant_roles(transport)
    topic = f"{TOPIC_PREFIX}secure-mtls"
    under_min_isr_topic(secure_cluster, topic, 7)
    sec = secure_cluster.client_security("job", mtls=True)
    assert sec.protocol == "SSL" and sec.username is None and sec.password is None and sec.ssl_key_password
    job = harness.Pipeline(tmp_path, secure_cluster, secure_cluster, include=[f"{TOPIC_PREFIX}.*"],
                           topic_names=TRANSPORT_TOPICS, security={"stream": sec},
                           servers={"stream": secure_cluster.mtls_bootstrap_servers},
                           overrides={"transport": {"events_topic": transport.events_topic,
                                                    "quarantine_topic": transport.quarantine_topic},
                                      # a job joining the running pipeline: the samples from now on, not the
                                      # backlog every test of this module has left in the topic
                                      "stream": {"starting_offsets": "latest"}})
    try:
        job.start_job()  # a second Spark driver beside the pipeline's: its own start deadline
        wait_until(lambda: job.metric("replmon_partition_high_watermark", topic=topic, partition="0") == 7,
                   DEADLINE_S, "the mTLS job's high watermark gauge at 7")
        event = job.wait_event("UNDER_MIN_ISR_START in the mTLS job's events topic",
                               lambda e: e["topic"] == topic and e["type"] == "UNDER_MIN_ISR_START")
        assert event["isr"] == [1]
    finally:
        job.stop()
    assert sec.ssl_keyfile is not None
    keys = [sec.ssl_keyfile.read_text(), sec.java_client(inline=True)["ssl.keystore.key"]]  # the file, the inline
    log = job.log("stream").read_bytes()
    assert b"replmon" in log
    for key in keys:
        body = key.strip().splitlines()[1:-1]
        assert body and not [line for line in body if line.encode() in log]
    assert sec.ssl_key_password.get_secret_value().encode() not in log
    assert b"PRIVATE KEY" not in log


@pytest.mark.spark
def test_no_secret_in_logs_metrics_events_history_or_help(secure_pipeline: Pipeline,
                                                          secure_cluster: LocalCluster, tmp_path: Path) -> None:
    """Runs after the end-to-end test: everything the pipeline wrote so far, searched for every user's password."""
    sec = secure_cluster.spec.security
    assert sec is not None
    passwords = json.loads(sec.credentials_file.read_text())
    p = secure_pipeline
    texts: dict[str, bytes] = {}
    collector_metrics = urllib.request.urlopen(f"http://127.0.0.1:{p.collector_metrics_port}/metrics", timeout=5)
    texts["collector /metrics"] = collector_metrics.read()
    texts["job /metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/metrics", timeout=5).read()
    for topic in (EVENTS_TOPIC, QUARANTINE_TOPIC, SAMPLES_TOPIC):
        texts[f"topic {topic}"] = raw_records(secure_cluster, topic)
    # logs of the stages (the job's includes Spark's), the job's history and checkpoints, the nodes' own logs
    for path in [*p.root.rglob("*"), *secure_cluster.dir.glob("*/*.log")]:
        if path.is_file() and not path.name.startswith("replmon-"):  # the stages' configuration files hold them
            texts[str(path)] = path.read_bytes()
    assert any("history" in name and name.endswith(".parquet") for name in texts)
    assert any(name.endswith("stream.log") for name in texts)
    # kafka-python's own debug log while a collector authenticates
    config = role_config(secure_cluster, secure_cluster.client_security("collector"), tmp_path / "c.yaml")
    debug = replmon("collect", "--once", "--config", str(config), env={"REPLMON_DEBUG": "1"})
    assert debug.returncode == 0, debug.stderr[-2000:]
    texts["collect --once with REPLMON_DEBUG=1"] = (debug.stdout + debug.stderr).encode()
    events = replmon("events", "--config", str(p.configs["stream"]))
    texts["replmon events"] = (events.stdout + events.stderr).encode()
    with_secret_env = {"REPLMON_TRANSPORT__SECURITY": json.dumps(security_settings(secure_cluster.client_security()))}
    for command in ([], ["cluster"], ["cluster", "up"], ["collect"], ["agent"], ["stream"], ["run"], ["events"]):
        shown = replmon(*command, "--help", env=with_secret_env)
        assert shown.returncode == 0, shown.stderr
        texts[f"replmon {' '.join(command)} --help"] = shown.stdout.encode()
    # the configuration model prints secrets masked
    assert passwords["job"] not in repr(load_config(p.configs["stream"]))
    leaks = [(name, user) for name, text in texts.items() for user, pw in passwords.items() if pw.encode() in text]
    assert not leaks


def raw_records(cluster: LocalCluster, topic: str) -> bytes:
    """Every key and value of ``topic``, as the admin reads them."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=1000, **cluster.client_security().kafka_python())
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out = b""
        while any(consumer.position(tp) < end[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=500).values():
                out += b"".join((r.key or b"") + b"\n" + (r.value or b"") + b"\n" for r in records)
        assert out, f"nothing read from {topic}"
        return out
    finally:
        consumer.close()


def _listening_by_process(pid: int) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of ``pid`` and its descendants, read in one
    walk (Spark's state servers come and go with its tasks)."""
    proc = psutil.Process(pid)
    out = []
    for q in [proc, *proc.children(recursive=True)]:
        try:
            out += [(c.laddr.ip, c.laddr.port, q.name()) for c in q.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
    return out


def _listening(pid: int) -> list[tuple[str, int]]:
    return [(address, port) for address, port, _ in _listening_by_process(pid)]


WILDCARD = ("::", "0.0.0.0")


@pytest.mark.spark
def test_every_listening_socket_is_on_loopback_by_default(secure_pipeline: Pipeline) -> None:
    p = secure_pipeline
    assert p.collector.poll() is None and p.job is not None and p.job.poll() is None
    collector = _listening(p.collector.pid)
    job_sockets = _listening_by_process(p.job.pid)  # the driver's /metrics, Spark's JVM and its Python workers
    job = [(address, port) for address, port, _ in job_sockets]
    assert ("127.0.0.1", p.collector_metrics_port) in collector
    assert ("127.0.0.1", p.metrics_port) in job
    # Known exception (docs/security.md): Spark 4.0.0 opens the state server of transformWithStateInPandas with
    # `new ServerSocket(0, 1)`, on every interface, for the duration of each state task: it is the JVM's, on the
    # wildcard address, never on a specific external address (which a missing spark.driver.bindAddress would give).
    spark_state_servers = {(a, port) for a, port, name in job_sockets if name == "java" and a in WILDCARD}
    assert [a for a in collector + job if a[0] not in LOOPBACK and a not in spark_state_servers] == []


def test_a_configured_metrics_address_is_honoured(secure_cluster: LocalCluster, tmp_path: Path) -> None:
    host, port = "127.0.0.2", free_port()
    config = role_config(secure_cluster, secure_cluster.client_security("collector"), tmp_path / "c.yaml")
    settings = yaml.safe_load(config.read_text())
    settings["collector"].update(metrics_host=host, metrics_port=port)
    config.write_text(yaml.safe_dump(settings))
    proc = subprocess.Popen([sys.executable, "-m", "replmon.cli", "collect", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: (host, port) in _listening(proc.pid), 60, f"the collector listening on {host}:{port}")
        assert [a for a in _listening(proc.pid) if a != (host, port)] == []
        assert b"replmon_collector" in urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    exporter = JobExporter(10)
    job_port = exporter.serve(host, 0)
    assert (host, job_port) in _listening(os.getpid())
