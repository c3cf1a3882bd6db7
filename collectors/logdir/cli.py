"""``replmon agent --log-dir DIR... [--config FILE] [--broker-id ID] [--once] [--output -]``.

Scans the log dirs every ``collector.interval_s`` (or once), printing samples as JSON lines (``--output -``)
or publishing them to the samples topic. A cycle that overruns the interval is reported and the ticks it
overran are skipped, never piled up. A log dir that cannot be read is reported once when it fails and once
when it is back; the other log dirs are scanned meanwhile.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from collectors.logdir.files import VerifiedBatches
from collectors.logdir.scanner import LogDirScan, scan_log_dirs
from replmon.config import ReplmonConfig, load_config
from replmon.errors import ReplmonError
from replmon.targets import LOCAL_CLUSTER_NAME

ONCE_FLUSH_TIMEOUT_S = 15.0


def say(message: str) -> None:
    print(f"replmon agent: {message}", file=sys.stderr, flush=True)


def cluster_name(config: ReplmonConfig, log_dirs: Sequence[Path]) -> str:
    """The configured cluster whose ``log_dirs`` hold one of ours, else the only configured cluster; with no
    cluster configured, the local cluster (named ``local``, also when it is not running: the agent's point is
    to read brokers that are down)."""
    if not config.clusters:
        return LOCAL_CLUSTER_NAME
    ours = {d.resolve() for d in log_dirs}
    for cluster in config.clusters:
        if any(Path(d).resolve() in ours for dirs in cluster.log_dirs.values() for d in dirs):
            return cluster.name
    if len(config.clusters) == 1:
        return config.clusters[0].name
    names = ", ".join(c.name for c in config.clusters)
    raise ReplmonError(f"cannot tell which configured cluster ({names}) these log dirs belong to: list them "
                       "under that cluster's log_dirs")


class LogDirReporter:
    """Tells the operator when a log dir becomes unreadable and when it is readable again, once each."""

    def __init__(self) -> None:
        self._failing: dict[Path, str] = {}

    def report(self, scans: Sequence[LogDirScan]) -> None:
        for scan in scans:
            before = self._failing.get(scan.log_dir)
            if scan.error and scan.error != before:
                say(scan.error)
                self._failing[scan.log_dir] = scan.error
            elif not scan.error and before:
                say(f"log dir {scan.log_dir} is readable again")
                del self._failing[scan.log_dir]


def agent(args: argparse.Namespace) -> int:
    from replmon import redact

    config = load_config(args.config)
    redact.install(config)
    if args.output not in (None, "-"):
        raise ReplmonError(f"--output takes only '-' (JSON lines on stdout), not {args.output!r}")
    log_dirs = [Path(d) for d in args.log_dirs]
    cluster = cluster_name(config, log_dirs)
    agent_id = f"{config.collector.collector_id or socket.gethostname()}/logdir-agent"
    from collectors.publisher import JsonLinesOutput, SamplePublisher, SampleSink

    sink: SampleSink
    if args.output == "-":
        sink = JsonLinesOutput()
    else:
        from replmon.security import Role, check_access
        from replmon.targets import with_default_cluster

        check_access(with_default_cluster(config), Role.AGENT)
        sink = SamplePublisher(with_default_cluster(config), client_id="replmon-logdir-agent")
    reporter = LogDirReporter()
    verified = VerifiedBatches()
    interval = config.collector.interval_s
    cycle = 0
    try:
        next_tick = time.monotonic()
        while True:
            scans = scan_log_dirs(log_dirs, cluster, agent_id, cycle, args.broker_id, verified)
            reporter.report(scans)
            sink.publish(s for scan in scans for s in scan.samples)
            if args.once:
                delivered = sink.flush(timeout_s=ONCE_FLUSH_TIMEOUT_S) and not sink.dropped
                if not delivered:
                    why = getattr(sink, "outage", None)
                    say(f"{sink.buffered + sink.dropped} sample(s) not delivered within {ONCE_FLUSH_TIMEOUT_S:g} s"
                        + (f": {why}" if why else ""))
                return 1 if not delivered or any(scan.error for scan in scans) else 0
            cycle += 1
            next_tick += interval
            now = time.monotonic()
            if now > next_tick:
                skipped = int((now - next_tick) // interval) + 1
                say(f"cycle {cycle - 1} took longer than the interval ({interval:g} s): skipping {skipped} "
                    "cycle(s)")
                next_tick += skipped * interval
            time.sleep(max(0.0, next_tick - time.monotonic()))
    finally:
        sink.close()
