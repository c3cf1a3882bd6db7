"""`replmon demo` as a user runs it: a subprocess with its own state dir (so its own local cluster), the fast
timeline (REPLMON_DEMO_FAST=1), output read from a pipe. It must report every injected fault with the event
that saw it, and leave no process behind, also when interrupted with SIGINT mid-run."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from replmon.testbed.localcluster.cluster import cluster_pids

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

RUN_TIMEOUT_S = 900
"""The demo takes ~3 minutes alone (Kafka and Spark start, five faults) and twice that on a shared 2-core box."""
EXPECTED = ["ISR_SHRINK", "ISR_EXPAND", "LEADER_CHANGE (clean)", "UNDER_MIN_ISR_START", "LEADER_CHANGE (UNCLEAN)",
            "DATA_LOSS"]


@dataclass
class DemoRun:
    proc: subprocess.Popen[str]
    state: Path
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first line (from the start of the output) matching ``pattern``, within the deadline."""
        for line in self.lines:
            if match := re.search(pattern, line):
                return match
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                got = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if got is None:
                break
            self.lines.append(got)
            if match := re.search(pattern, got):
                return match
        raise AssertionError(f"no line matching {pattern!r} within {timeout_s}s (exit {self.proc.poll()}):\n"
                             + self.output[-6000:])

    def finish(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def _demo_processes(state: Path) -> list[int]:
    """Every live JVM of a local cluster under this state dir (the demo's cluster and its transport cluster)."""
    clusters = {Path(m) for pid in Path("/proc").iterdir() if pid.name.isdigit()
                for m in re.findall(r"-Dreplmon\.cluster=(\S+)", _cmdline(int(pid.name)))
                if m.startswith(str(state))}
    return sorted(p for c in clusters for p in cluster_pids(c))


def _mentioning(state: Path) -> list[int]:
    """Live processes whose command line names the state dir: cluster JVMs, `replmon collect|stream --config`."""
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and str(state) in _cmdline(int(p.name)) and _alive(int(p.name))]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[DemoRun]:
    state = tmp_path / "state"
    env = {**os.environ, "REPLMON_STATE_DIR": str(state), "REPLMON_DEMO_FAST": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONIOENCODING": "utf-8"}
    # started with SIGINT ignored, as a script's background job is: Ctrl-C (SIGINT) must stop the demo all the same
    proc = subprocess.Popen([sys.executable, "-m", "replmon.cli", "demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env,
                            preexec_fn=_ignore_sigint)
    run = DemoRun(proc, state)
    try:
        yield run
    finally:
        if proc.poll() is None:  # a failed test: stop the demo as a user would, then for good
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for pid in {*_demo_processes(state), *_mentioning(state)}:  # a failed test leaves nothing running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(RUN_TIMEOUT_S + 180)
def test_demo_detects_every_fault_and_summarises_it(demo: DemoRun) -> None:
    demo.wait_line(r"summary: each injected fault", RUN_TIMEOUT_S)
    code = demo.finish(120)
    out = demo.output
    print(out)  # `pytest -rP` shows a real run (the README's walk-through comes from one)
    assert code == 0, out[-6000:]
    summary = out[out.index("summary: each injected fault"):]
    rows = [line for line in summary.splitlines() if re.match(r"\s*│\s*\d+\s*│", line)]
    assert len(rows) == len(EXPECTED), summary
    for row, expected in zip(rows, EXPECTED, strict=True):
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[2] == expected, row  # "seen as": the event type that saw the fault
        assert re.fullmatch(r"\d+\.\d+s", cells[3]) and float(cells[3][:-1]) < 120, row
    assert "NOT DETECTED" not in out
    assert "Traceback" not in out, "a user sees no Python traceback, also from clients closed with sends pending"
    assert "every fault was detected" in out
    lost = re.search(r"a consumer can no longer read (\d+) committed messages[^;]*; replmon reports "
                     r"committed_lost=(\d+)", out)
    assert lost and int(lost.group(1)) > 0, out[-4000:]
    step5 = out[out.index("step 5/5"):out.index("summary: each injected fault")]
    assert int(lost.group(2)) == int(lost.group(1)), \
        f"replmon's count is the consumer's, producers writing on:\n{step5[:8000]}"
    assert not _demo_processes(demo.state)
    assert not _mentioning(demo.state), "the collector, the job or a cluster outlived the demo"


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_sigint_mid_run_stops_every_process_of_the_demo(demo: DemoRun) -> None:
    demo.wait_line(r"collector pid \d+, streaming job pid \d+", 300)
    demo.wait_line(r"injected: pause broker", 600)  # mid-timeline: a broker is paused right now
    clusters = _demo_processes(demo.state)
    assert len(clusters) == 6, f"controller + 3 brokers, and the transport cluster: controller + 1 broker; " \
        f"found {[_cmdline(pid)[-120:] for pid in clusters]}"
    everything = _descendants(demo.proc.pid)
    assert set(clusters) <= everything
    commands = [_cmdline(pid) for pid in everything]
    for stage in ("collect", "stream"):
        assert any(f"replmon.cli {stage} --config {demo.state}" in c for c in commands), f"no replmon {stage}"

    demo.proc.send_signal(signal.SIGINT)
    code = demo.finish(240)  # cleanup: producers, collector and job, both clusters; minutes on a loaded box
    assert code == 130, demo.output[-4000:]
    assert "interrupted" in demo.output and "stopped every process the demo started" in demo.output
    assert not _demo_processes(demo.state)
    outlived = [_cmdline(pid)[:200] for pid in everything if _alive(pid)]
    assert not outlived, f"processes of the demo outlived it: {outlived}"
    assert not _mentioning(demo.state)
