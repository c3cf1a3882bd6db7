"""Benchmark of the protocol sampler: wall time and requests of one steady cycle at growing partition counts.

    .venv/bin/python bench/bench_collector.py [--partitions 1000 5000 20000] [--brokers 3] [--cycles 5] [--no-write]

Starts its own local cluster (``--brokers``, 3 by default) in a temporary directory (stopped and deleted at the
end), creates topics of 1000 partitions (replication factor 3) up to each level, lets the sampler settle (lineage
walks, configs), then times ``--cycles`` steady cycles (no lineage or config refresh due). Prints the figures and
writes them, with the command that produced them, to the "## Collector" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.protocol.sampler import ClusterSampler  # noqa: E402
from collectors.samples import CycleSample, PartitionSample  # noqa: E402
from replmon.config import ClusterConfig, CollectorConfig, TopicFilter  # noqa: E402
from replmon.localcluster import LocalCluster  # noqa: E402

TOPIC_PARTITIONS = 1000
REFRESH = 1_000_000  # no lineage/config refresh during the timed cycles
DOC = ROOT / "docs" / "benchmarks.md"
BROKERS_NOTE = (
    "More brokers than the 3 the target names: with replication factor 3 on 3 brokers every broker hosts all 20k "
    "replicas and keeps a segment file open for each, over this machine's hard limit of 20,000 open files per "
    "process (`ulimit -Hn`, not raisable here). The partitions and replicas are the same; the sampler asks more "
    "brokers per cycle, so the figures are, if anything, pessimistic.\n")


def create_topics(cluster: LocalCluster, first: int, count: int) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=120_000)
    try:
        for i in range(first, first + count):
            admin.create_topics({f"bench-{i:03d}": {"num_partitions": TOPIC_PARTITIONS, "replication_factor": 3}},
                                timeout_ms=120_000)
    finally:
        admin.close()


def settle(sampler: ClusterSampler, partitions: int, timeout_s: float = 300) -> None:
    """Cycle until every partition has a leader and all replicas answer, and no lineage walk is pending."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = sampler.cycle()
        parts = [s for s in result.samples if isinstance(s, PartitionSample)]
        led = [p for p in parts if p.leader >= 0 and len(p.isr) == 3
               and all(r.log_end_offset is not None for r in p.replica_offsets)]
        if len(led) >= partitions and not sampler.lineages.walks:
            return
    raise TimeoutError(f"{partitions} partitions did not settle within {timeout_s}s")


def measure(sampler: ClusterSampler, cycles: int) -> dict[str, float]:
    walls, requests = [], []
    for _ in range(cycles):
        started = time.perf_counter()
        result = sampler.cycle()
        walls.append(time.perf_counter() - started)
        cycle = next(s for s in result.samples if isinstance(s, CycleSample))
        requests.append(cycle.requests)
    return {"median_s": statistics.median(walls), "max_s": max(walls), "requests": statistics.median(requests),
            "partitions": cycle.partitions, "load_1m": os.getloadavg()[0]}


def write_doc(command: str, brokers: int, rows: list[tuple[int, dict[str, float]]], note: str) -> None:
    table = ["| partitions | replicas | steady cycle, median | max | requests per cycle | load average (1 min) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for partitions, r in rows:
        table.append(f"| {partitions:,} | {3 * partitions:,} | {r['median_s']:.2f} s | {r['max_s']:.2f} s "
                     f"| {r['requests']:.0f} | {r.get('load_1m', float('nan')):.1f} |")
    section = "\n".join([
        "## Collector", "",
        "Protocol sampler (`collectors/protocol`), one steady cycle against a local "
        f"{brokers}-broker Kafka 4.3.1 cluster "
        f"(replication factor 3, topics of {TOPIC_PARTITIONS} partitions) on {os.cpu_count()} cores, "
        f"Python {platform.python_version()}: metadata, every ListOffsets question and the samples built (not "
        "published). Target: 20k partitions (60k replicas) in under 2 s.", "",
        "```", command, "```", "", *table, "", *([BROKERS_NOTE] if brokers > 3 else []), note, ""])
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if "## Collector" in text:
        text = re.sub(r"## Collector\n.*?(?=\n## |\Z)", section.rstrip() + "\n", text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--brokers", type=int, default=3,
                        help="brokers of the cluster (replication factor 3 whatever the count): every broker keeps "
                             "a file open per replica it hosts, and this machine allows 20,000 per process")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    args = parser.parse_args()
    command = "python bench/bench_collector.py " + shlex.join(sys.argv[1:])
    rows: list[tuple[int, dict[str, float]]] = []
    note = ""
    with tempfile.TemporaryDirectory(prefix="replmon-bench-") as tmp:
        cluster = LocalCluster.up(Path(tmp) / "cluster", brokers=args.brokers, die_with_parent=True, remember=False,
                                  overrides={"log.index.size.max.bytes": "65536"})
        try:
            config = ClusterConfig(name="bench", bootstrap_servers=cluster.bootstrap_servers.split(","),
                                   topics=TopicFilter(include=["bench-.*"]))
            sampler = ClusterSampler(config, CollectorConfig(request_timeout_ms=30_000,
                                                             lineage_refresh_cycles=REFRESH,
                                                             config_refresh_cycles=REFRESH), "bench")
            topics = 0
            for level in sorted(args.partitions):
                want = level // TOPIC_PARTITIONS
                started = time.monotonic()
                try:
                    create_topics(cluster, topics, want - topics)
                    topics = want
                    settle(sampler, level)
                except Exception as exc:
                    note = (f"Stopped before {level:,} partitions: {type(exc).__name__}: {exc}".strip())
                    print(note, file=sys.stderr)
                    break
                print(f"{level} partitions ready in {time.monotonic() - started:.0f}s", file=sys.stderr)
                result = measure(sampler, args.cycles)
                rows.append((level, result))
                print(f"{level:>6} partitions: steady cycle median {result['median_s']:.3f}s "
                      f"max {result['max_s']:.3f}s, {result['requests']:.0f} requests", flush=True)
            sampler.close()
        finally:
            cluster.down(purge=True)
    if not args.no_write and rows:
        write_doc(command, args.brokers, rows, note)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
