"""The local cluster itself: lifecycle through the CLI, its error messages, and the replication faults it can
cause, each checked against Kafka's own metadata (replmon.testbed.kafka_view), never against replmon. The unclean
election under load is tests.pipeline.cause_unclean_loss, which the end-to-end tests run: its loss is what the
sequenced consumer can no longer read of what the dead leader's log held."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from replmon.core.errors import ReplmonError
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import KAFKA_VERSION, LocalCluster
from replmon.testbed.localcluster.cluster import cluster_dir_to_start, cluster_pids
from replmon.testbed.localcluster.properties import BROKER_DEFAULTS
from replmon.testbed.workload import SequencedProducer, readable_sequences

REPLMON = [sys.executable, "-m", "replmon.cli"]
LAG_MAX_S = int(BROKER_DEFAULTS["replica.lag.time.max.ms"]) / 1000


CLI_STATE = tempfile.mkdtemp(prefix="replmon-cli-state-")
"""The CLI tests' own state dir: their clusters must not become the session's default (last started) cluster."""


def replmon(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*REPLMON, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "REPLMON_STATE_DIR": CLI_STATE, **(env or {})})


def no_process_of(cluster_dir: Path) -> bool:
    return not cluster_pids(cluster_dir.resolve())


# ---------------------------------------------------------------------------------------------- lifecycle
@pytest.mark.cluster
def test_up_status_down_through_the_cli(tmp_path: Path) -> None:
    cdir = tmp_path / "c"
    up = replmon("cluster", "up", "--brokers", "1", "--dir", str(cdir))
    assert up.returncode == 0, up.stderr
    bootstrap = up.stdout.strip()
    assert bootstrap.startswith("127.0.0.1:")

    status = replmon("cluster", "status", "--dir", str(cdir))
    assert status.returncode == 0, status.stderr
    rows = [line for line in status.stdout.splitlines() if "running" in line]
    assert len(rows) == 2  # the controller and the one broker
    assert bootstrap in status.stdout

    # what a script reads: the same cluster as JSON
    as_json = replmon("cluster", "status", "--dir", str(cdir), "--json")
    assert as_json.returncode == 0, as_json.stderr
    record = json.loads(as_json.stdout)
    assert record["bootstrap_servers"] == bootstrap.split(",") and record["security_protocol"] == "PLAINTEXT"
    assert [(n["node_id"], n["role"], n["state"]) for n in record["nodes"]] == [
        (0, "controller", "running"), (1, "broker", "running")]
    assert record["log_dirs"] == {"1": [str(LocalCluster.open(cdir).broker_log_dir(1))]}
    assert record["dir"] == str(cdir.resolve()) and record["security"] is None

    # a second process sees the cluster and can use it
    view = KafkaView(bootstrap)
    try:
        assert view.admin.describe_cluster()["brokers"][0]["broker_id"] == 1
        view.create_topic("watched", replication_factor=1)
    finally:
        view.close()

    # replmon watches the local cluster of a directory the user names, whatever cluster was started last
    elsewhere = {"REPLMON_STATE_DIR": str(tmp_path / "other-state")}
    missing = replmon("collect", "--once", "--output", "-", env=elsewhere)
    assert missing.returncode == 2 and "no local cluster in" in missing.stderr
    collected = replmon("collect", "--cluster-dir", str(cdir), "--once", "--output", "-", env=elsewhere)
    assert collected.returncode == 0, collected.stderr
    samples = [json.loads(line) for line in collected.stdout.splitlines()]
    watched = [s for s in samples if s.get("topic") == "watched"]
    assert len(watched) == 1 and watched[0]["cluster"] == "local" and watched[0]["leader"] == 1

    pids = cluster_pids(cdir.resolve())
    assert len(pids) == 2
    down = replmon("cluster", "down", "--dir", str(cdir))
    assert down.returncode == 0, down.stderr
    assert no_process_of(cdir)
    assert all(not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text() for pid in pids)

    again = replmon("cluster", "down", "--dir", str(cdir))
    assert again.returncode != 0
    assert "not running" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    # up again on the existing directory: once it returns, the broker takes requests (it registers a moment
    # before its listener opens)
    cluster = LocalCluster.up(cdir, die_with_parent=True, remember=False)
    try:
        assert cluster.bootstrap_servers == bootstrap
        assert all(cluster.listening(b) for b in cluster.broker_ids)
        view = KafkaView(bootstrap)
        try:
            view.create_topic("after-restart", replication_factor=1)
        finally:
            view.close()
    finally:
        cluster.down()


@pytest.mark.cluster
def test_a_node_dying_at_start_shows_its_log_and_leaves_nothing_running(tmp_path: Path) -> None:
    cdir = tmp_path / "c"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        listener = f"PLAINTEXT://127.0.0.1:{port}"
        up = replmon("cluster", "up", "--brokers", "1", "--dir", str(cdir),
                     "--set", f"listeners={listener}", "--set", f"advertised.listeners={listener}")
    assert up.returncode == 2
    assert "broker 1 died while starting" in up.stderr
    assert "Address already in use" in up.stderr or "BindException" in up.stderr  # the tail of its log
    assert no_process_of(cdir)


@pytest.mark.cluster
def test_no_jvm_survives_a_crashed_owner(tmp_path: Path) -> None:
    """A test process that dies (SIGKILL) takes its cluster with it."""
    cdir = tmp_path / "c"
    script = (
        "import os, signal, sys\n"
        "from replmon.testbed.localcluster import LocalCluster\n"
        f"LocalCluster.up({str(cdir)!r}, brokers=1, die_with_parent=True, remember=False)\n"
        "print('up', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.stdout.strip() == "up", proc.stderr
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: no_process_of(cdir), 15, "the cluster's JVMs to die with their owner")


def _bin_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only the named tools (and the basics a shell needs)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in tools:
        real = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        assert real, f"{tool} must be installed for this test"
        (bindir / tool).symlink_to(real)
    return str(bindir)


def test_free_ports_are_below_the_ephemeral_range_and_never_given_twice(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A port picked for a server started later must not be one an outgoing connection can take first (the
    kernel gives those from ip_local_port_range), nor one given before to another server."""
    from replmon.testbed.localcluster import cluster as cluster_module

    start = int(cluster_module.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [cluster_module.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(max(1024, start - cluster_module.PORT_SPAN) <= p < start for p in ports)
    with socket.socket() as taken:  # a port bound by someone else is never given: the next pick is
        taken.bind(("127.0.0.1", ports[0]))
        cluster_module._ports_given.difference_update(ports[:2])
        picks = iter(ports[:2])
        monkeypatch.setattr(cluster_module._port_picker, "randrange", lambda first, end: next(picks))
        assert cluster_module.free_port() == ports[1]
    low = tmp_path / "ip_local_port_range"
    low.write_text("1024\t60999\n")  # no room below the range: the kernel's own pick
    monkeypatch.setattr(cluster_module, "EPHEMERAL_RANGE", low)
    with socket.socket() as check:
        check.bind(("127.0.0.1", cluster_module.free_port()))


def test_missing_java_is_one_clear_error(tmp_path: Path) -> None:
    env = {"PATH": _bin_with(tmp_path), "JAVA_HOME": ""}
    out = replmon("cluster", "up", "--dir", str(tmp_path / "c"), env=env)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("replmon: Java not found")
    assert len(out.stderr.strip().splitlines()) == 1


def test_missing_maven_with_nothing_cached_is_one_clear_error(tmp_path: Path) -> None:
    env = {"PATH": _bin_with(tmp_path, "java"), "REPLMON_CACHE_DIR": str(tmp_path / "cache")}
    out = replmon("cluster", "up", "--dir", str(tmp_path / "c"), env=env)
    assert out.returncode == 2
    assert "Maven (mvn) not found" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert no_process_of(tmp_path / "c")


def test_unreachable_maven_central_with_nothing_cached_is_one_clear_error(tmp_path: Path) -> None:
    env = {
        "REPLMON_CACHE_DIR": str(tmp_path / "cache"),
        "REPLMON_MAVEN_REPOSITORY": "http://127.0.0.1:9/maven2",  # nothing listens on the discard port
        "MAVEN_OPTS": f"-Dmaven.repo.local={tmp_path / 'm2'}",  # and nothing in Maven's own cache
    }
    out = replmon("cluster", "up", "--dir", str(tmp_path / "c"), env=env)
    assert out.returncode == 2
    assert "cannot download Apache Kafka" in out.stderr
    assert "127.0.0.1:9" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cache" / f"kafka-{KAFKA_VERSION}" / "complete").exists()


def test_cluster_commands_without_a_cluster_say_so(tmp_path: Path) -> None:
    for args in (["down"], ["status"], ["fault", "pause", "1"]):
        out = replmon("cluster", *args, "--dir", str(tmp_path / "none"))
        assert out.returncode == 2, args
        assert "no local cluster in" in out.stderr, args


@pytest.mark.parametrize("damage, why", [
    ('{"dir": ', "Invalid JSON: EOF while parsing a value at line 1 column 8"),
    ("{}", "dir: Field required; cluster_id: Field required; kafka_version: Field required; nodes: Field required"),
    (None, "Is a directory"),
])
def test_a_cluster_json_that_describes_no_cluster_is_one_line_and_purge_removes_it(
        damage: str | None, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from replmon.cli import main

    monkeypatch.setenv("REPLMON_STATE_DIR", str(tmp_path / "state"))
    cdir = (tmp_path / "c").resolve()
    cdir.mkdir()
    if damage is None:
        (cdir / "cluster.json").mkdir()
    else:
        (cdir / "cluster.json").write_text(damage)
    expected = (f"replmon: {cdir}/cluster.json is not a local cluster's description ({why}); "
                f"`replmon cluster down --dir {cdir} --purge` removes it")
    for args in (["cluster", "status", "--dir"], ["cluster", "fault", "pause", "1", "--dir"],
                 ["cluster", "down", "--dir"], ["collect", "--once", "--cluster-dir"]):
        assert main([*args, str(cdir)]) == 2, args
        assert capsys.readouterr().err.strip() == expected, args
    assert main(["cluster", "down", "--dir", str(cdir), "--purge"]) == 0
    assert not cdir.exists()


def test_an_election_in_a_cluster_not_running_is_refused_at_once(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Not after the admin client's bootstrap gives up (30 s) with a traceback."""
    from replmon.cli import main
    from replmon.testbed.localcluster.cluster import ClusterSpec, NodeRole, NodeSpec

    nodes = [NodeSpec(node_id=0, role=NodeRole.CONTROLLER, port=9000, dir=tmp_path / "controller"),
             NodeSpec(node_id=1, role=NodeRole.BROKER, port=9001, dir=tmp_path / "broker-1")]
    spec = ClusterSpec(dir=tmp_path, cluster_id="AQEBAQEBAQEBAQEBAQEBAQ", kafka_version=KAFKA_VERSION, nodes=nodes)
    (tmp_path / "cluster.json").write_text(spec.model_dump_json())
    started = time.monotonic()
    assert main(["cluster", "elect", "t", "0", "--unclean", "--dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: the local cluster in {tmp_path} is not running"
    assert time.monotonic() - started < 10


def test_a_command_given_a_cluster_dir_starts_its_cluster_there(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`replmon run` and `replmon demo` start the local cluster where --cluster-dir says, new or not (run started
    the default one, then looked for it in the given directory); without it, the one `up` started last while it
    is there, else the default directory."""
    monkeypatch.setenv("REPLMON_STATE_DIR", str(tmp_path / "state"))
    assert cluster_dir_to_start(tmp_path / "new") == (tmp_path / "new").resolve()
    assert cluster_dir_to_start(None) is None  # nothing started yet: the default directory
    last = tmp_path / "last"
    last.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "last-cluster").write_text(str(last))
    assert cluster_dir_to_start(None) is None  # the last one is gone
    (last / "cluster.json").write_text("{}")
    assert cluster_dir_to_start(None) == last


# ---------------------------------------------------------------------------------------------- replication
@pytest.mark.cluster
def test_rf3_topic_produce_and_consume(cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
                                       producer_factory: Callable[..., SequencedProducer]) -> None:
    kafka_view.create_topic(topic_name, partitions=2, replication_factor=3)
    for p in (0, 1):
        assert sorted(kafka_view.partition(topic_name, p).replicas) == cluster.broker_ids
    producer = producer_factory(topic_name, partition=None)
    producer.wait_acknowledged(200)
    producer.pause()
    acked = producer.acknowledged()
    read = readable_sequences(cluster.bootstrap_servers, topic_name, partitions=(0, 1))
    assert set(acked) <= set(read)
    assert all(read[seq] == where for seq, where in acked.items())


@pytest.mark.cluster
def test_a_paused_producer_has_every_message_it_sent_settled(
    cluster: LocalCluster, kafka_view: KafkaView, topic_name: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    """pause() returns with nothing in flight: every sequence number the producer took is acknowledged or failed,
    so what it reports acknowledged is final (the demo and the unclean scenario compare it with what a consumer
    still reads). Sending without pause between messages, a send the loop had begun used to land after the flush."""
    kafka_view.create_topic(topic_name, replication_factor=1)
    producer = producer_factory(topic_name, acks=1, interval_s=0)
    producer.wait_acknowledged(10)
    for _ in range(100):
        producer.pause()
        settled = len(producer.acknowledged()) + producer.ack.failed
        assert settled == producer.sent, "a message sent before pause() returned is still in flight"
        producer.resume()


@pytest.mark.cluster
def test_paused_follower_leaves_the_isr_and_returns_on_resume(
    healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(50)
    wait_until(lambda: len(kafka_view.partition(topic_name).isr) == 3, 30, "a full ISR")

    port = {b: healthy_cluster.broker(b).port for b in (1, 2, 3)}
    assert healthy_cluster.live_bootstrap_servers == ",".join(f"127.0.0.1:{port[b]}" for b in (1, 2, 3))
    healthy_cluster.pause(3)
    paused_at = time.monotonic()
    assert healthy_cluster.live_bootstrap_servers == f"127.0.0.1:{port[1]},127.0.0.1:{port[2]}"  # no paused one
    wait_until(lambda: 3 not in kafka_view.partition(topic_name, via=1).isr, 2 * LAG_MAX_S,
               "broker 3 to leave the ISR within 2 x replica.lag.time.max.ms")
    assert time.monotonic() - paused_at <= 2 * LAG_MAX_S + 1
    assert kafka_view.partition(topic_name, via=1).leader == 1

    healthy_cluster.resume(3)
    wait_until(lambda: sorted(kafka_view.partition(topic_name).isr) == [1, 2, 3], 60,
               "broker 3 to rejoin the ISR after resume")


@pytest.mark.cluster
def test_killed_leader_is_replaced_with_the_next_leader_epoch(
    healthy_cluster: LocalCluster, kafka_view: KafkaView, topic_name: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(topic_name, assignment={0: [2, 3, 1]})
    producer = producer_factory(topic_name)
    producer.wait_acknowledged(50)
    before = kafka_view.partition(topic_name)
    assert before.leader == 2

    healthy_cluster.kill(2)
    assert f":{healthy_cluster.broker(2).port}" not in healthy_cluster.live_bootstrap_servers  # nor a dead one
    after = wait_until(lambda: (v := kafka_view.partition(topic_name)).leader not in (2, -1) and v,
                       30, "a new leader after the kill")
    assert after.leader in (1, 3)
    assert after.leader_epoch == before.leader_epoch + 1
    assert 2 not in after.isr
    producer.wait_acknowledged(20)  # the new leader takes writes


@pytest.mark.cluster
def test_topic_defaults_apply_to_topics_created_without_settings(healthy_cluster: LocalCluster,
                                                                kafka_view: KafkaView, topic_name: str) -> None:
    """In KRaft the controller creates topics: the cluster's defaults must be the controller's too."""
    kafka_view.call(lambda admin: admin.create_topics({topic_name: {}}, timeout_ms=15000))
    view = wait_until(lambda: (v := kafka_view.partition(topic_name)).leader >= 0 and v, 30, "a leader")
    assert len(view.replicas) == int(BROKER_DEFAULTS["default.replication.factor"]) == 3
    # the broker asked may learn of the topic from the metadata log after the one that gave its leader: until then
    # it describes no config of it
    effective = wait_until(lambda: kafka_view.topic_config(topic_name).get("min.insync.replicas"), 30,
                           "the topic's configs")
    assert effective == BROKER_DEFAULTS["min.insync.replicas"] == "2"


@pytest.mark.cluster
def test_the_controller_runs_without_automatic_leader_rebalancing(healthy_cluster: LocalCluster) -> None:
    """Leaders move only when a test moves them: the controller, which runs the periodic preferred-leader
    election in KRaft, reports the setting off in the configuration it logs at start."""
    controller = next(n for n in healthy_cluster.spec.nodes if n.role == "controller")
    logged = controller.log_file.read_text()
    assert "process.roles = [controller]" in logged
    assert "auto.leader.rebalance.enable = false" in logged
    assert "auto.leader.rebalance.enable = true" not in logged


@pytest.mark.cluster
def test_an_election_kafka_refuses_is_one_line_with_kafka_s_reason(healthy_cluster: LocalCluster,
                                                                   kafka_view: KafkaView, topic_name: str) -> None:
    with pytest.raises(ReplmonError) as info:
        healthy_cluster.elect_unclean(f"{topic_name}-none", 0)
    assert str(info.value) == (f"unclean election of {topic_name}-none-0 failed: UNKNOWN_TOPIC_OR_PARTITION: No such "
                               f"topic as {topic_name}-none")
    # a partition whose leader is in its ISR needs no election: not an error
    kafka_view.create_topic(topic_name, assignment={0: [1, 2, 3]})
    leader = wait_until(lambda: kafka_view.partition(topic_name).leader, 30, "a leader")
    healthy_cluster.elect_unclean(topic_name, 0)
    assert kafka_view.partition(topic_name).leader == leader


def test_cluster_ids_never_start_with_a_dash() -> None:
    """kafka-storage.sh format -t <id> reads an id starting with '-' as an option (a random id does so once in
    64): like Kafka's Uuid.randomUuid(), such an id is drawn again."""
    from replmon.testbed.localcluster.cluster import new_cluster_id

    draws = iter([b"\xf8" + bytes(15), b"\x01" * 16])  # the first encodes to '-AAAA...'
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == "AQEBAQEBAQEBAQEBAQEBAQ"
    assert all(not new_cluster_id().startswith("-") and len(new_cluster_id()) == 22 for _ in range(500))


def test_broker_jvm_options_follow_the_defaults_and_reach_only_the_brokers(tmp_path: Path) -> None:
    """HotSpot takes the last of repeated options: the spec's come after the defaults, so they win."""
    from replmon.testbed.localcluster.cluster import ClusterSpec, NodeRole, NodeSpec
    from replmon.testbed.localcluster.properties import BROKER_HEAP, CONTROLLER_HEAP

    nodes = [NodeSpec(node_id=0, role=NodeRole.CONTROLLER, port=9000, dir=tmp_path / "controller"),
             NodeSpec(node_id=1, role=NodeRole.BROKER, port=9001, dir=tmp_path / "broker-1")]
    spec = ClusterSpec(dir=tmp_path, cluster_id="AQEBAQEBAQEBAQEBAQEBAQ", kafka_version=KAFKA_VERSION, nodes=nodes,
                       broker_jvm_options=["-Xmx1g", "-XX:TieredStopAtLevel=4"])
    cluster = LocalCluster(ClusterSpec.model_validate_json(spec.model_dump_json()))  # as cluster.json keeps it
    broker = cluster.node_command(nodes[1], "java", tmp_path)
    controller = cluster.node_command(nodes[0], "java", tmp_path)
    assert broker.index("-Xmx1g") > broker.index(f"-Xmx{BROKER_HEAP}")
    assert broker.index("-XX:TieredStopAtLevel=4") > broker.index("-XX:TieredStopAtLevel=1")
    assert broker[-2:] == ["kafka.Kafka", str(nodes[1].config_file)]
    assert f"-Xmx{CONTROLLER_HEAP}" in controller and "-Xmx1g" not in controller
