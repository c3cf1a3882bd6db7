"""``replmon run``: the collector and a log-dir agent per local broker as subprocesses, the job in this process;
with no cluster configured, the local cluster, started when it is not running."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

from replmon.cli.targets import with_default_cluster
from replmon.core.config import ReplmonConfig, load_config
from replmon.core.console import say
from replmon.core.processes import interrupt_on_sigterm, stop_processes
from replmon.testbed.harness import spawn_stage, stage_command
from replmon.testbed.localcluster import LocalCluster, NodeState, cluster_dir_to_start, resolve_cluster_dir
from streaming.service import run_job_until_stopped

if TYPE_CHECKING:
    from streaming.job import RunningJob


COLLECTOR_ENDPOINT = re.compile(r"replmon collect: metrics on (\S+)")
ENDPOINT_WAIT_S = 30.0
"""How long the summary waits for the collector to say where it serves (it starts in a second or two, the job in
ten or more)."""


class StderrTee:
    """A child's standard error, copied line by line to ours as it comes, watched for the collector's endpoint
    (``replmon collect: metrics on URL``, which says which port 0 picked)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.endpoint: str | None = None
        self.found = threading.Event()
        self._thread = threading.Thread(target=self._copy, args=(stream,), name="replmon-run-stderr", daemon=True)
        self._thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        try:
            for line in iter(stream.readline, b""):
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()
                if self.endpoint is None:
                    match = COLLECTOR_ENDPOINT.search(line.decode(errors="replace"))
                    if match:
                        self.endpoint = match.group(1)
                        self.found.set()
        finally:
            self.found.set()  # the child ended: nothing more to wait for

    def join(self, timeout_s: float) -> None:
        """Wait until the child's standard error has ended and every line of it is copied."""
        self._thread.join(timeout_s)


def summary(config: ReplmonConfig, job: RunningJob, collector_endpoint: str | None) -> str:
    """What ``replmon run`` started and where to look: the endpoints actually served (port 0 resolved), the
    topics and the history."""
    clusters = ", ".join(f"{c.name} ({','.join(c.bootstrap_servers)})" for c in config.clusters)
    collector = collector_endpoint or ("metrics off" if config.collector.metrics_port is None
                                       else "metrics endpoint not reported")
    return (f"replmon run: watching {clusters}; collector {collector}; job "
            f"http://{config.stream.metrics_host}:{job.port}/metrics; events in {config.transport.events_topic} "
            f"and {config.stream.history_dir}; Ctrl-C stops everything")


def children(config_path: Path | None, config: ReplmonConfig, cluster_dir: Path | None = None) -> list[list[str]]:
    """The collector, and a log-dir agent per broker whose log dirs are on this host (each told the local
    cluster's directory when it watches the local cluster)."""
    local = ["--cluster-dir", str(cluster_dir)] if cluster_dir is not None else []
    commands = [stage_command("collect", config_path, *local)]
    for cluster in config.clusters:
        for broker, dirs in sorted(cluster.log_dirs.items()):
            commands.append(stage_command("agent", config_path, "--log-dir", *map(str, dirs),
                                          "--broker-id", str(broker), *local))
    return commands


def run(config_path: Path | None, cluster_dir: Path | None = None) -> int:
    """Collector + agents (subprocesses) + the job (here). SIGTERM or Ctrl-C stops all of them; the children also
    die with this process if it is killed. ``cluster_dir``: the local cluster to watch when none is configured."""
    procs: list[subprocess.Popen[bytes]] = []
    with interrupt_on_sigterm(sigint=True):  # every child is stopped (stop_processes)
        try:
            base = load_config(config_path)
            local = None if base.clusters else resolve_cluster_dir(cluster_dir)
            config = with_default_cluster(ensure_local_cluster(base, local), local)
            commands = children(config_path, config, local)
            # the collector's standard error passes through a tee that reads its endpoint for the summary
            procs = [spawn_stage(cmd, new_session=True, pipe_stderr=i == 0) for i, cmd in enumerate(commands)]
            assert procs[0].stderr is not None
            tee = StderrTee(procs[0].stderr)
            for cmd, proc in zip(commands, procs, strict=True):  # each prints its own endpoints as it starts
                say(f"replmon run: started {' '.join(cmd[3:])} (pid {proc.pid})")

            def started(job: RunningJob) -> None:
                if config.collector.metrics_port is not None:
                    tee.found.wait(ENDPOINT_WAIT_S)
                say(summary(config, job, tee.endpoint))

            return run_job_until_stopped(config, on_started=started)
        except KeyboardInterrupt:
            return 0
        finally:
            stop_processes(procs, grace_s=15)


def ensure_local_cluster(base: ReplmonConfig, cluster_dir: Path | None = None) -> ReplmonConfig:
    """With no cluster configured, make sure the local cluster (in ``cluster_dir``, by default the one `cluster up`
    started last) runs, starting it if needed."""
    if base.clusters:
        return base
    cdir = resolve_cluster_dir(cluster_dir)
    running = (cdir / "cluster.json").exists() and all(
        s.state == NodeState.RUNNING for s in LocalCluster.open(cdir).status())
    if not running:
        where = cluster_dir_to_start(cluster_dir)
        say(f"replmon run: no cluster configured; starting the local cluster in {where or 'its default directory'}")
        LocalCluster.up(where)
    return base
