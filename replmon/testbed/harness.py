"""The pipeline harness: replmon's stages run as an operator runs them, ``replmon collect`` and ``replmon stream``
as subprocesses with a YAML configuration, samples and events on a transport cluster of their own. One
definition of the configuration, of each stage's command line, of starting a stage (its log, tied to this
process), of restarting one that died and of stopping them, of reading the job's metrics and the events topic;
used by ``replmon demo``, ``replmon run``, the end-to-end tests and the benches.

The transport cluster is separate from the watched one, as it should be in production: the demo, the tests and
the benches take most watched brokers down, and a samples topic on the watched cluster would go down with them.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaConsumer, TopicPartition

from replmon.contracts.batches import decode_batch, is_batch
from replmon.core.config import SecurityConfig
from replmon.core.errors import ReplmonError
from replmon.core.processes import stop_processes, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster.cluster import die_with_parent, free_port
from streaming.exporter import Scraped, scrape

STAGES = ("collect", "stream")
"""The stages a pipeline runs, in the order they start."""
AGENT_PREFIX = "agent-"
"""A log-dir agent's stage name: ``agent-<broker id>`` (:meth:`Pipeline.spawn_agents`)."""
JOB_START_TIMEOUT_S = 420.0
"""Spark's start and first micro-batch: ~40 s alone, minutes on a shared 2-core machine under other Spark jobs
(docs/reliability.md: restarts under faults took up to 268 s to their first micro-batch)."""
EVENT_TIMEOUT_S = 120.0
"""Longest wait for an event once its cause happened."""
KILL_WAIT_S = 30.0
"""Longest wait for a SIGKILLed stage to be reaped."""
STOP_GRACE_S = 30.0
"""How long a stopped stage may take to exit after SIGTERM (the job ends its micro-batch) before SIGKILL."""


class StageExited(ReplmonError):
    """A stage the harness started is no longer running; the message names its log or ends with its last lines."""


# ------------------------------------------------------------------------------------------------ configuration
def pipeline_settings(watched: LocalCluster, transport: LocalCluster, work: Path, *, include: Sequence[str],
                      metrics_port: int, collector_metrics_port: int, cluster_name: str = "local",
                      topic_names: str = "replmon", topic_partitions: int = 2, stale_after_s: float = 120,
                      hw_stalled_after_s: float = 120) -> dict[str, Any]:
    """The configuration of a pipeline watching the topics of ``watched`` that match ``include`` (patterns) and
    publishing to ``transport``'s topics ``<topic_names>.samples``, ``.events`` and ``.quarantine``; the job's
    checkpoint and history under ``work``, 1 s collection and trigger intervals."""
    return {
        "clusters": [{"name": cluster_name, "bootstrap_servers": watched.bootstrap_servers.split(","),
                      "topics": {"include": list(include)}}],
        "collector": {"interval_s": 1.0, "request_timeout_ms": 2000, "metrics_port": collector_metrics_port,
                      "lineage_refresh_cycles": 5, "config_refresh_cycles": 2},
        "transport": {"bootstrap_servers": transport.bootstrap_servers.split(","),
                      "samples_topic": f"{topic_names}.samples", "events_topic": f"{topic_names}.events",
                      "quarantine_topic": f"{topic_names}.quarantine", "topic_partitions": topic_partitions},
        "stream": {"trigger_interval_s": 1.0, "checkpoint_dir": str(work / "checkpoint"),
                   "history_dir": str(work / "history"), "starting_offsets": "earliest",
                   "metrics_port": metrics_port, "state_buckets": 8, "stale_after_s": stale_after_s,
                   "hw_stalled_after_s": hw_stalled_after_s},
    }


def with_security(settings: Mapping[str, Any], security: SecurityConfig, servers: str | None = None
                  ) -> dict[str, Any]:
    """``settings`` with ``security`` on every cluster it names, the watched ones and the transport; with
    ``servers``, those as every cluster's bootstrap servers (another listener of theirs)."""
    out = copy.deepcopy(dict(settings))
    for section in (*out["clusters"], out["transport"]):
        section["security"] = security_settings(security)
        if servers is not None:
            section["bootstrap_servers"] = servers.split(",")
    return out


def security_settings(security: SecurityConfig) -> dict[str, Any]:
    """``security`` as a configuration file holds it (the password in clear, as an operator writes it)."""
    out = security.model_dump(mode="json", exclude_none=True)
    for key in ("password", "ssl_key_password"):
        secret = getattr(security, key)
        if secret is not None:
            out[key] = secret.get_secret_value()
    return out


def write_config(path: Path, settings: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(settings)))
    return path


# ------------------------------------------------------------------------------------------------ processes
def stage_command(stage: str, config: Path | None, *args: str) -> list[str]:
    """The command line of ``replmon <stage>``, run by this interpreter: ``--config`` (when given) right after the
    stage's name, then ``args``."""
    return [sys.executable, "-m", "replmon.cli", stage, *(["--config", str(config)] if config else []), *args]


def spawn_stage(command: Sequence[str], log: Path | None = None, *, new_session: bool = False,
                cwd: Path | None = None, env: Mapping[str, str] | None = None,
                pipe_stderr: bool = False) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log`` (inherited when None), unbuffered; it is SIGKILLed
    when the thread that started it dies, so that a crashed parent leaves nothing running. ``new_session`` keeps
    a Ctrl-C in the terminal from reaching it: its parent decides when it stops. ``env``: variables over this
    process's environment. ``pipe_stderr`` (with no ``log``): its standard error on a pipe, for the caller to
    read."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("ab")) if log is not None else None
        stderr = subprocess.STDOUT if out is not None else subprocess.PIPE if pipe_stderr else None
        return subprocess.Popen(list(command), stdout=out, stderr=stderr,
                                stdin=subprocess.DEVNULL, start_new_session=new_session, cwd=cwd,
                                preexec_fn=die_with_parent,
                                env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


# ------------------------------------------------------------------------------------------------ the pipeline
class Pipeline:
    """``replmon collect`` and ``replmon stream`` on ``watched``, publishing to ``transport``; their
    configuration, logs (``<stage>.log``), checkpoint and history in ``root``. Nothing starts until
    :meth:`start` (or :meth:`spawn`).

    ``security``: per stage, the settings it uses on both clusters (that stage then gets its own configuration
    file, ``replmon-<stage>.yaml``); by default none (PLAINTEXT). ``servers``: per stage with security settings,
    the bootstrap servers it uses on both clusters, when not theirs by default (a secure local cluster's
    mutual-TLS listeners). ``collector_metrics_port``: a free port by
    default. ``overrides``: settings by section that replace the harness's (e.g. ``{"collector": {"interval_s":
    5.0}}``)."""

    def __init__(self, root: Path, watched: LocalCluster, transport: LocalCluster, *, include: Sequence[str],
                 cluster_name: str = "local", topic_names: str = "replmon", topic_partitions: int = 2,
                 stale_after_s: float = 120, hw_stalled_after_s: float = 120,
                 collector_metrics_port: int | None = None, security: Mapping[str, SecurityConfig] | None = None,
                 servers: Mapping[str, str] | None = None, new_session: bool = False, cwd: Path | None = None,
                 overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.root = root
        self.cluster = watched
        self.transport = transport
        self.new_session = new_session
        self.cwd = cwd
        self.metrics_port = free_port()
        self.collector_metrics_port = free_port() if collector_metrics_port is None else collector_metrics_port
        self.settings = pipeline_settings(
            watched, transport, root, include=include, metrics_port=self.metrics_port,
            collector_metrics_port=self.collector_metrics_port, cluster_name=cluster_name, topic_names=topic_names,
            topic_partitions=topic_partitions, stale_after_s=stale_after_s, hw_stalled_after_s=hw_stalled_after_s)
        for section, values in (overrides or {}).items():
            self.settings[section] = {**self.settings.get(section, {}), **values}
        transport_settings = self.settings["transport"]
        self.samples_topic: str = transport_settings["samples_topic"]
        self.events_topic: str = transport_settings["events_topic"]
        self.quarantine_topic: str = transport_settings["quarantine_topic"]
        self.config = write_config(root / "replmon.yaml", self.settings)
        self.configs: dict[str, Path] = {
            stage: write_config(root / f"replmon-{stage}.yaml",
                                with_security(self.settings, sec, (servers or {}).get(stage)))
            for stage, sec in (security or {}).items()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = {}

    # -------------------------------------------------------------------------------------------- stages
    @property
    def collector(self) -> subprocess.Popen[bytes]:
        """The last collector process spawned (KeyError before the first)."""
        return self.procs["collect"]

    @property
    def job(self) -> subprocess.Popen[bytes]:
        """The last job process spawned (KeyError before the first)."""
        return self.procs["stream"]

    def log(self, stage: str) -> Path:
        return self.root / f"{stage}.log"

    def command(self, stage: str) -> list[str]:
        """``replmon <stage>``; ``agent-<broker id>`` is the log-dir agent beside that broker of the watched
        cluster."""
        if stage.startswith(AGENT_PREFIX):
            broker = int(stage[len(AGENT_PREFIX):])
            return stage_command("agent", self.configs.get("agent", self.config), "--log-dir",
                                 str(self.cluster.broker_log_dir(broker)), "--broker-id", str(broker))
        return stage_command(stage, self.configs.get(stage, self.config))

    def spawn_agents(self) -> None:
        """A log-dir agent beside each broker of the watched cluster (it reads the disk also while its broker is
        down), as ``replmon run`` starts them."""
        for broker in self.cluster.broker_ids:
            self.spawn(f"{AGENT_PREFIX}{broker}")

    def spawn(self, stage: str) -> subprocess.Popen[bytes]:
        """Start ``stage`` (again: the job resumes from its checkpoint), its output appended to its log."""
        self.procs[stage] = spawn_stage(self.command(stage), self.log(stage), new_session=self.new_session,
                                        cwd=self.cwd)
        return self.procs[stage]

    def start(self) -> None:
        for stage in STAGES:
            self.spawn(stage)

    def reconfigure(self, stage: str, overrides: Mapping[str, Mapping[str, Any]] | None) -> None:
        """Restart ``stage`` on its own configuration: the pipeline's with ``overrides`` by section, or again on the
        pipeline's with None. (Not for a stage with its own security settings.)"""
        self.stop(stage)
        if overrides is None:
            self.configs.pop(stage, None)
        else:
            settings = copy.deepcopy(self.settings)
            for section, values in overrides.items():
                settings[section] = {**settings.get(section, {}), **values}
            self.configs[stage] = write_config(self.root / f"replmon-{stage}.yaml", settings)
        self.spawn(stage)

    def start_job(self, timeout_s: float = JOB_START_TIMEOUT_S) -> None:
        """Start the job and wait for its first micro-batch."""
        self.spawn("stream")
        self.wait_first_batch(timeout_s)

    def wait_first_batch(self, timeout_s: float = JOB_START_TIMEOUT_S) -> None:
        """Until the job's first micro-batch; a job that exited ends the wait at once, with the end of its log."""
        wait_until(lambda: self.metric("replmon_job_batches_total"), timeout_s, "the job's first micro-batch",
                   fatal=(StageExited,))

    def alive(self, stage: str) -> bool:
        proc = self.procs.get(stage)
        return proc is not None and proc.poll() is None

    def restart_dead(self, max_restarts: int) -> list[tuple[str, int]]:
        """Start again every stage that exited, ``max_restarts`` times per stage at most (on a loaded machine
        Spark's Python workers can time out connecting back, which ends the job); returns (stage, exit code) of
        each one restarted. Raises :class:`StageExited` for a stage that exited once more than that."""
        restarted = []
        for stage, proc in list(self.procs.items()):
            code = proc.poll()
            if code is None:
                continue
            self.restarts[stage] = self.restarts.get(stage, 0) + 1
            if self.restarts[stage] > max_restarts:
                raise StageExited(f"replmon {stage} exited with {code} {max_restarts + 1} times; "
                                  f"see {self.log(stage)}")
            self.spawn(stage)
            restarted.append((stage, code))
        return restarted

    def kill(self, stage: str) -> None:
        """SIGKILL ``stage`` (no chance to clean up) and reap it."""
        proc = self.procs[stage]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=KILL_WAIT_S)

    def terminate(self) -> None:
        """SIGTERM to every running stage, without waiting: they stop while the caller closes other things."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()

    def stop(self, *stages: str, grace_s: float = STOP_GRACE_S) -> None:
        """Stop ``stages`` (default: all) with SIGTERM, SIGKILL after ``grace_s``."""
        stop_processes([self.procs.get(s) for s in stages or tuple(self.procs)], grace_s=grace_s)

    # -------------------------------------------------------------------------------------------- what it reports
    def scrape(self, timeout_s: float = 5.0) -> Scraped:
        """The job's /metrics; :class:`StageExited` (with the end of its log) when the job is not running."""
        if not self.alive("stream"):
            raise StageExited(f"replmon stream is not running; the end of {self.log('stream')}:\n"
                              + log_tail(self.log("stream")))
        return scrape(self.metrics_port, timeout_s=timeout_s)

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(self.scrape(), name, **labels)

    def batches(self) -> int:
        """The job's completed micro-batches since it started."""
        return int(self.metric("replmon_job_batches_total") or 0)

    def events(self) -> list[dict[str, Any]]:
        return read_topic(self.transport.bootstrap_servers, self.events_topic, self.transport.client_security())

    def wait_event(self, what: str, match: Callable[[dict[str, Any]], bool],
                   timeout_s: float = EVENT_TIMEOUT_S) -> dict[str, Any]:
        """The first event of the events topic that ``match`` accepts, within ``timeout_s``."""
        def probe() -> dict[str, Any] | None:
            return next((e for e in self.events() if match(e)), None)

        return wait_until(probe, timeout_s, what, interval_s=1.0)

    def follow_events(self, client_id: str = "replmon-testbed") -> EventFollower:
        return EventFollower(self.transport.bootstrap_servers, self.events_topic, self.transport.client_security(),
                             client_id)


def metric(scraped: Scraped, name: str, **labels: str) -> float | None:
    """The value of the first sample of ``name`` in ``scraped`` that carries ``labels`` (None if none does)."""
    for got, value in scraped.get(name, []):
        if all(got.get(k) == v for k, v in labels.items()):
            return value
    return None


# ------------------------------------------------------------------------------------------------ reading topics
def read_topic(bootstrap_servers: str, topic: str, security: SecurityConfig | None = None) -> list[dict[str, Any]]:
    """Every record of ``topic`` (committed ones), from the beginning to its current end, as JSON objects: a batch
    of partition samples (``partition_batch/v1``) as its samples."""
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
                for r in records:
                    if is_batch(r.value):
                        out.extend(decode_batch(r.value))
                    else:
                        out.append(json.loads(r.value))
        return out
    finally:
        consumer.close()


class EventFollower:
    """The events topic read as it grows, from its beginning: each :meth:`poll` returns the events committed
    since the last one. Until the job has created the topic, a poll waits half a second and returns nothing."""

    def __init__(self, bootstrap_servers: str, topic: str, security: SecurityConfig | None = None,
                 client_id: str = "replmon-testbed") -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.security = security or SecurityConfig()
        self.client_id = client_id
        self.consumer: KafkaConsumer | None = None

    def poll(self, timeout_ms: int = 500) -> list[dict[str, Any]]:
        if self.consumer is None:
            consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                     group_id=None, isolation_level="read_committed", client_id=self.client_id,
                                     **self.security.kafka_python())
            parts = consumer.partitions_for_topic(self.topic)
            if not parts:
                consumer.close()
                time.sleep(timeout_ms / 1000)
                return []
            tps = [TopicPartition(self.topic, p) for p in parts]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            self.consumer = consumer
        return [json.loads(r.value) for records in self.consumer.poll(timeout_ms=timeout_ms).values()
                for r in records]

    def close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()


# ------------------------------------------------------------------------------------------------ clusters
def start_transport(directory: Path) -> LocalCluster:
    """A one-broker local cluster for samples and events: not remembered as the user's cluster, and its JVMs die
    with this process."""
    return LocalCluster.up(directory, brokers=1, die_with_parent=True, remember=False)


@contextlib.contextmanager
def transport_cluster(directory: Path) -> Iterator[LocalCluster]:
    """:func:`start_transport`, deleted on exit."""
    transport = start_transport(directory)
    try:
        yield transport
    finally:
        transport.down(purge=True)


@contextlib.contextmanager
def scratch_clusters(work: Path, brokers: int = 3) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    """A watched cluster of ``brokers`` and a transport cluster (:func:`start_transport`) under ``work``, neither
    remembered as the user's cluster, both dying with this process and deleted on exit: a bench's own clusters."""
    watched = LocalCluster.up(work / "watched", brokers=brokers, die_with_parent=True, remember=False)
    try:
        with transport_cluster(work / "transport") as transport:
            yield watched, transport
    finally:
        watched.down(purge=True)
