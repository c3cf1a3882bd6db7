"""How soon the collector's publisher delivers again once its samples cluster is back: a one-broker samples cluster
SIGKILLed while the publisher has produce requests in flight, started again after ``--outage`` s, the samples
taken after its return awaited in the samples topic.

    .venv/bin/python bench/publisher_outage.py [--trials 4] [--outage 40] [--deadline 150] [--no-write]

Starts its own one-broker cluster (replmon.testbed.localcluster) in a temporary directory. Each trial: a
:class:`collectors.publisher.SamplePublisher` with ``collector.buffer_max_samples`` 40 (as
tests/test_collector_faults.py) on a fresh samples topic, fed 4 samples every 20 ms from a thread that keeps
publishing through the outage; once 100 samples are acknowledged the broker is SIGKILLed, started again
``--outage`` s later, and the trial measures from the moment the broker serves again until 8 samples taken
after it can be read from the topic (``--deadline`` s at most: a trial that does not get there is reported as
not resumed). Writes the "Collector: the samples cluster restarted under load" section of docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.docsection import write_section  # noqa: E402
from collectors.publisher import SamplePublisher  # noqa: E402
from replmon.contracts.samples import PartitionSample  # noqa: E402
from replmon.core.config import ReplmonConfig  # noqa: E402
from replmon.testbed.harness import read_topic  # noqa: E402
from replmon.testbed.localcluster import LocalCluster  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
HEADING = "Collector: the samples cluster restarted under load"
BUFFER = 40
NEWER = 8
"""Samples taken after the return that must be in the topic for the trial to count as resumed."""


def feed(publisher: SamplePublisher, stop: threading.Event) -> None:
    """4 samples every 20 ms, each with the current time, until ``stop``."""
    cycle = 0
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        publisher.publish([PartitionSample(cluster="c", collector_id="bench", cycle=cycle, sample_time_ms=now_ms,
                                           topic="t", partition=p, leader=1, leader_epoch=0, replicas=[1], isr=[1])
                           for p in range(4)])
        cycle += 1
        stop.wait(0.02)


def trial(cluster: LocalCluster, number: int, outage_s: float, deadline_s: float) -> dict[str, Any]:
    topic = f"bench.outage.{number}"
    config = ReplmonConfig(clusters=[{"name": "c", "bootstrap_servers": cluster.bootstrap_servers.split(",")}],
                           transport={"samples_topic": topic, "topic_partitions": 1, "sample_format": "json"},
                           collector={"buffer_max_samples": BUFFER})
    publisher = SamplePublisher(config)
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(publisher, stop), daemon=True)
    feeder.start()
    try:
        started = time.monotonic()
        while publisher.published < 100:
            if time.monotonic() - started > 60:
                raise RuntimeError(f"trial {number}: fewer than 100 samples acknowledged in 60 s")
            time.sleep(0.05)
        cluster.kill(1)
        time.sleep(outage_s)  # the outage itself: what is measured is what follows it
        cluster.start(1)
        back_ms, back = time.time() * 1000, time.monotonic()
        resumed_s = None
        while time.monotonic() - back < deadline_s:
            with contextlib.suppress(Exception):  # the broker may still be electing
                if sum(r["sample_time_ms"] > back_ms for r in read_topic(cluster.bootstrap_servers, topic)) >= NEWER:
                    resumed_s = time.monotonic() - back
                    break
            time.sleep(0.1)
        return {"trial": number, "resumed_s": resumed_s, "dropped": publisher.dropped}
    finally:
        stop.set()
        feeder.join()
        publisher.close(timeout_s=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--outage", type=float, default=40.0, help="seconds the samples cluster is away")
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds at most to wait for the resumption")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/ alone")
    args = parser.parse_args()
    for name in ("trials", "outage", "deadline"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    command = ("python bench/publisher_outage.py " + shlex.join(sys.argv[1:])).strip()
    work = Path(tempfile.mkdtemp(prefix="replmon-bench-outage-"))
    cluster = LocalCluster.up(work, brokers=1, die_with_parent=True, remember=False)
    try:
        results = []
        for number in range(args.trials):
            result = trial(cluster, number, args.outage, args.deadline)
            results.append(result)
            resumed = "not resumed" if result["resumed_s"] is None else f"{result['resumed_s']:.2f} s"
            print(f"trial {number}: {resumed} after the return; {result['dropped']:,} samples dropped and counted",
                  flush=True)
    finally:
        cluster.down(purge=True)
    rows = ["| trial | samples after the return in the topic | samples dropped and counted |", "|---:|---:|---:|"]
    rows += [f"| {r['trial']} | " + ("not within the deadline" if r["resumed_s"] is None
                                     else f"{r['resumed_s']:.2f} s") + f" | {r['dropped']:,} |" for r in results]
    section = "\n".join([
        f"## {HEADING}",
        f"Measured with `{command}` (see its docstring): a one-broker samples cluster SIGKILLed while the "
        f"publisher (`collector.buffer_max_samples` {BUFFER}) has produce requests in flight, started again "
        f"{args.outage:g} s later; the time from its return until {NEWER} samples taken after it are in the topic.",
        "", *rows, ""])
    print("\n".join(rows))
    if not args.no_write:
        write_section(DOC, HEADING, section)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
