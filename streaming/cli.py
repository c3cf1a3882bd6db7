"""``replmon stream``, ``replmon run`` and ``replmon events``."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from replmon.config import ReplmonConfig, load_config
from replmon.errors import ReplmonError
from replmon.processes import interrupt_on_sigterm, stop_processes
from replmon.targets import with_default_cluster

err = Console(stderr=True, highlight=False)


def stream_config(path: Path | None) -> ReplmonConfig:
    """The job's configuration. The job reads only the samples topic: with ``transport.bootstrap_servers`` set it
    needs no watched cluster (it may run on another host than the collectors, or start before the clusters);
    without, the samples topic is on the first watched cluster, by default the local one."""
    config = load_config(path)
    return config if config.transport.bootstrap_servers else with_default_cluster(config)


MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0


def run_job_until_stopped(config: ReplmonConfig) -> int:
    """Run the job until a signal; call it inside :func:`~replmon.processes.interrupt_on_sigterm`. A query that
    fails (on a starved machine Spark's Python workers can time out connecting back) is restarted from its
    checkpoint, with the same metrics endpoint; more than MAX_RESTARTS failures within RESTART_WINDOW_S end the job
    with an error."""
    from replmon import redact
    from replmon.security import Role, check_access
    from streaming.exporter import JobExporter
    from streaming.job import start_job
    from streaming.session import get_session

    redact.install(config)
    check_access(config, Role.JOB)  # before Spark starts: a refused user or a missing ACL is one line, at once
    spark = get_session(config.stream)
    exporter = JobExporter(config.stream.series_budget)
    failures: list[float] = []
    try:
        while True:
            job = start_job(spark, config, exporter)
            err.print(f"replmon stream: reading {config.transport.samples_topic} from "
                      f"{','.join(config.samples_bootstrap())}, metrics on "
                      f"http://{config.stream.metrics_host}:{job.port}/metrics")
            try:
                job.await_any()
                return 0
            except RuntimeError as exc:
                now = time.monotonic()
                failures = [t for t in failures if now - t < RESTART_WINDOW_S] + [now]
                reason = str(exc).splitlines()[0][:300]
                if len(failures) > MAX_RESTARTS:
                    raise ReplmonError(f"the job failed {len(failures)} times within {RESTART_WINDOW_S:.0f} s; "
                                       f"last: {reason}") from exc
                err.print(f"replmon stream: a query failed ({reason}); restarting from the checkpoint")
            finally:
                job.stop()
    except KeyboardInterrupt:
        err.print("replmon stream: stopping")
    finally:
        spark.stop()
    return 0


def stream(args: argparse.Namespace) -> int:
    with interrupt_on_sigterm(sigint=True):  # the current micro-batch completes (RunningJob.stop)
        try:
            return run_job_until_stopped(stream_config(args.config))
        except KeyboardInterrupt:
            return 0


def _children(config_path: Path | None, config: ReplmonConfig) -> list[list[str]]:
    """The collector, and a log-dir agent per broker whose log dirs are on this host."""
    base = [sys.executable, "-m", "replmon.cli"]
    conf = ["--config", str(config_path)] if config_path else []
    commands = [[*base, "collect", *conf]]
    for cluster in config.clusters:
        for broker, dirs in sorted(cluster.log_dirs.items()):
            commands.append([*base, "agent", "--log-dir", *map(str, dirs), "--broker-id", str(broker), *conf])
    return commands


def run(args: argparse.Namespace) -> int:
    """Collector + agents (subprocesses) + the job (here); with no cluster configured, the local cluster,
    started when it is not running. SIGTERM or Ctrl-C stops all of them; the children also die with this
    process if it is killed."""
    from replmon.localcluster.cluster import die_with_parent

    procs: list[subprocess.Popen[bytes]] = []
    with interrupt_on_sigterm(sigint=True):  # every child is stopped (stop_processes)
        try:
            config = with_default_cluster(_ensure_local_cluster(load_config(args.config)))
            procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=die_with_parent)
                     for cmd in _children(args.config, config)]
            return run_job_until_stopped(config)
        except KeyboardInterrupt:
            return 0
        finally:
            _stop_children(procs)


def _ensure_local_cluster(base: ReplmonConfig) -> ReplmonConfig:
    """With no cluster configured, make sure the local cluster runs (starting it if needed)."""
    if base.clusters:
        return base
    from replmon.localcluster import LocalCluster, NodeState, resolve_cluster_dir

    cdir = resolve_cluster_dir(None)
    running = (cdir / "cluster.json").exists() and all(
        s.state == NodeState.RUNNING for s in LocalCluster.open(cdir).status())
    if not running:
        err.print("replmon run: no cluster configured; starting the local cluster")
        LocalCluster.up(cdir if (cdir / "cluster.json").exists() else None)
    return base


def _stop_children(procs: list[subprocess.Popen[bytes]]) -> None:
    stop_processes(procs, grace_s=15)


_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'15m', '2h', '1d' (ago) or an ISO time."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return now - timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: amount})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ReplmonError(f"--since takes a duration such as 15m, 2h, 1d or an ISO time, not {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def events(args: argparse.Namespace) -> int:
    from streaming.sinks import read_events

    config = load_config(args.config)
    frame = read_events(config.stream.history_dir)
    if frame.empty:
        err.print(f"no events in {config.stream.history_dir}")
        return 0
    if args.cluster:
        frame = frame[frame["cluster"] == args.cluster]
    if args.topic:
        frame = frame[frame["topic"] == args.topic]
    if args.event_type:
        frame = frame[frame["type"] == args.event_type.upper()]
    if args.since:
        frame = frame[frame["event_time_ms"] >= parse_since(args.since).timestamp() * 1000]
    table = Table(title=f"{len(frame)} events")
    for col in ("time (UTC)", "cluster", "partition", "type", "severity", "message"):
        table.add_column(col)
    for row in frame.itertuples(index=False):
        when = datetime.fromtimestamp(row.event_time_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        where = f"{row.topic}-{int(row.partition)}" if row.topic is not None and row.partition == row.partition \
            else "-"
        table.add_row(when, row.cluster, where, row.type, row.severity, row.message)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0
