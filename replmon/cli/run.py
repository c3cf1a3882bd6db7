"""``replmon run``: the collector and a log-dir agent per local broker as subprocesses, the job in this process;
with no cluster configured, the local cluster, started when it is not running."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rich.console import Console

from replmon.cli.targets import with_default_cluster
from replmon.core.config import ReplmonConfig, load_config
from replmon.core.processes import interrupt_on_sigterm, stop_processes
from replmon.testbed.harness import spawn_stage, stage_command
from replmon.testbed.localcluster import LocalCluster, NodeState, resolve_cluster_dir
from streaming.service import run_job_until_stopped

err = Console(stderr=True, highlight=False)


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
            procs = [spawn_stage(cmd, new_session=True) for cmd in commands]
            for cmd, proc in zip(commands, procs, strict=True):  # each prints its own endpoints as it starts
                err.print(f"replmon run: started {' '.join(cmd[3:])} (pid {proc.pid})", markup=False, soft_wrap=True)
            return run_job_until_stopped(config)
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
        err.print("replmon run: no cluster configured; starting the local cluster")
        LocalCluster.up(cdir if (cdir / "cluster.json").exists() else None)
    return base
