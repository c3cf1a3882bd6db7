"""The log-dir agent as a service: ``replmon agent`` once the front door has resolved the configuration.

Scans the log dirs every ``collector.interval_s`` (or once), printing samples as JSON lines (``--output -``)
or publishing them to the samples topic. Where a log dir holds the KRaft metadata log, its partition changes are
read and published every ``collector.metadata_interval_s`` in between (:mod:`collectors.logdir.metadata.tail`).
A cycle that overruns the interval is reported and the ticks it overran are skipped, never piled up. A log dir
that cannot be read is reported once when it fails and once when it is back; the other log dirs are scanned
meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from collectors.logdir.files import VerifiedBatches
from collectors.logdir.metadata.tail import MetadataTail, TailRead, find_metadata_log
from collectors.logdir.scanner import LogDirScan, broker_id_conflict, read_broker_id, scan_log_dirs
from replmon.core import console
from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from replmon.core.processes import stop_signalled

ONCE_FLUSH_TIMEOUT_S = 15.0


def say(message: str) -> None:
    console.say(f"replmon agent: {message}")


def cluster_name(config: ReplmonConfig, log_dirs: Sequence[Path]) -> str:
    """The configured cluster whose ``log_dirs`` hold one of ours, else the only configured cluster."""
    if not config.clusters:
        raise ReplmonError("no cluster configured: the agent's samples need the name of the cluster they describe")
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


class TailReporter:
    """Tells the operator what the metadata tail skipped or could not read, once per new kind of trouble."""

    def __init__(self) -> None:
        self._skipped: set[object] = set()

    def report(self, read: TailRead) -> None:
        for skipped in sorted(set(read.skipped) - self._skipped):
            say(f"metadata log: skipping {skipped.type} version {skipped.version} records (no schema here)")
            self._skipped.add(skipped)
        for problem in read.problems[:5]:
            say(f"metadata log: {problem}")
        if read.restarted:
            say(f"metadata log: {read.restarted}; reading again from the newest snapshot")


def metadata_tail(config: ReplmonConfig, log_dirs: Sequence[Path], cluster: str, agent_id: str,
                  broker_id: int | None) -> MetadataTail | None:
    """The tail of the metadata log in ``log_dirs``; None when none holds one or the configuration turns it off."""
    if config.collector.metadata_interval_s is None:
        return None
    found = find_metadata_log(list(log_dirs))
    if found is None:
        return None
    node = broker_id if broker_id is not None else read_broker_id(found.parent)
    say(f"following the metadata log {found} every {config.collector.metadata_interval_s:g} s")
    return MetadataTail(found, cluster, agent_id, node)


def agent(config: ReplmonConfig, log_dirs: Sequence[Path], *, cluster: str, broker_id: int | None = None,
          once: bool = False, json_lines: bool = False) -> int:
    """Scan ``log_dirs`` (of one broker of ``cluster``) every ``collector.interval_s`` until interrupted, or once
    with ``once``; ``json_lines`` prints the samples as JSON lines, else they are published to the samples topic
    of ``config`` (complete: its transport, or its first watched cluster)."""
    from replmon.core import redact

    redact.install(config)
    if broker_id is not None:  # a wrong id is a mistake to fix before any sample, not a disk to ride out
        conflicts = [c for d in log_dirs if (c := broker_id_conflict(Path(d), broker_id)) is not None]
        if conflicts:
            raise ReplmonError("; ".join(conflicts))
    agent_id = f"{config.collector.collector_id or socket.gethostname()}/logdir-agent"
    from collectors.publisher import JsonLinesOutput, SamplePublisher, SampleSink, require_samples_cluster

    sink: SampleSink
    if json_lines:
        sink = JsonLinesOutput()
    else:
        from replmon.core.security import Role, check_access

        if once:
            require_samples_cluster(config)
        check_access(config, Role.AGENT)
        sink = SamplePublisher(config, client_id="replmon-logdir-agent")
    reporter = LogDirReporter()
    verified = VerifiedBatches()
    interval = config.collector.interval_s
    tail = metadata_tail(config, log_dirs, cluster, agent_id, broker_id)
    tail_reporter = TailReporter()

    def follow_metadata() -> None:
        if tail is not None:
            read = tail.poll()
            tail_reporter.report(read)
            sink.publish(read.changes)

    cycle = 0
    # SIGTERM (a container or a unit stopped) as Ctrl-C, outside --once: the cycle under way ends, then the samples
    # are flushed
    with contextlib.nullcontext(threading.Event()) if once else stop_signalled() as stop:
        try:
            next_tick = time.monotonic()
            while True:
                follow_metadata()
                scans = scan_log_dirs(log_dirs, cluster, agent_id, cycle, broker_id, verified)
                reporter.report(scans)
                sink.publish(s for scan in scans for s in scan.samples)
                if once:
                    delivered = sink.flush(timeout_s=ONCE_FLUSH_TIMEOUT_S) and not sink.dropped
                    if not delivered:
                        why = getattr(sink, "outage", None)
                        say(f"{sink.buffered + sink.dropped} sample(s) not delivered within "
                            f"{ONCE_FLUSH_TIMEOUT_S:g} s" + (f": {why}" if why else ""))
                    return 1 if not delivered or any(scan.error for scan in scans) else 0
                cycle += 1
                next_tick += interval
                now = time.monotonic()
                if now > next_tick:
                    skipped = int((now - next_tick) // interval) + 1
                    say(f"cycle {cycle - 1} took longer than the interval ({interval:g} s): skipping {skipped} "
                        "cycle(s)")
                    next_tick += skipped * interval
                _wait(next_tick, None if tail is None else config.collector.metadata_interval_s, follow_metadata,
                      stop)
                if stop.is_set():
                    say("stopping")
                    return 0
        finally:
            sink.close()


def _wait(until: float, every_s: float | None, poll: Callable[[], None], stop: threading.Event) -> None:
    """Wait until the monotonic time ``until`` or ``stop``, calling ``poll`` every ``every_s`` meanwhile (when
    given)."""
    while not stop.is_set():
        left = until - time.monotonic()
        if left <= 0:
            return
        if stop.wait(left if every_s is None else min(left, every_s)) or every_s is None:
            return
        if until - time.monotonic() > 0:
            poll()
