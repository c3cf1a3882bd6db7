"""Benchmark of the job's driver against the number of partitions it tracks: its time per micro-batch, its memory
and the cost of a /metrics scrape, from 10,000 to 300,000 partitions, at one batch size.

    .venv/bin/python bench/bench_driver.py [--sizes 10000,30000,100000,300000] [--steady-batches 6]
        [--backlog-batch 20000] [--trigger 2] [--no-write]

Starts a one-broker local Kafka in a temporary directory and, for each size in turn, a fresh job (local[2], the
job's own code through ``streaming.job.start_job``, instrumented as bench_stream.py instruments it) reading from
the end of the samples topic, then has the producer JVM of bench_stream.py write one cycle over that many
partitions (20 topics x 1000 make 20,000: a size brings its topics with it) and as many cycles after it as the
steady batches need. The first cycle creates every partition's state and its row in the exporter; the steady
batches after it are measured, all of ``--backlog-batch`` samples:

- the driver's share of a micro-batch: the foreachBatch handler's exporter, events and history steps, and the
  end of its collect (the handler's time less its steps and the Spark jobs it waits for is Spark's own);
- the batch duration (Spark's progress), for scale;
- after them: the partition rows the driver holds (the buckets' candidates for the series budget, at most
  ``state_buckets x --series-budget``: streaming.serving) and their table in memory (pandas, deep), the driver
  process's RSS (cumulative over the sizes, which run in one process in increasing order), the driver JVM's heap
  after GC, and the time one /metrics scrape takes (the median of 5);
- the executors' state: the state store's memory as Spark reports it (RocksDB's, in the last steady batch's
  progress) and the size of the checkpoint's state directory (every version Spark keeps, not only the last).

Issue 22 asks for the driver's time and memory per batch flat over this range. Prints a table and writes the
"## Driver against partitions tracked" section of docs/benchmarks.md and docs/bench_driver.png.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_cluster import transport_config  # noqa: E402
from bench.bench_stream import (  # noqa: E402
    PER_TOPIC,
    SAMPLES_TOPIC,
    Latency,
    ProducerRun,
    ProgressLog,
    bench_classes,
    check_template,
    consumed,
    loadavg,
    memory,
    sample_template,
    shut_down,
    start_producer,
    topic_end,
)
from bench.docsection import write_figures  # noqa: E402
from replmon.core.config import ReplmonConfig, StreamConfig  # noqa: E402
from replmon.core.kafka_topics import ensure_topic  # noqa: E402
from replmon.core.processes import interrupt_on_sigterm  # noqa: E402
from replmon.testbed.localcluster import LocalCluster  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_driver.png"
HEADING = "Driver against partitions tracked"
SCRAPES = 5


def scrape_s(port: int) -> float:
    """Seconds one GET /metrics of the job's exporter takes."""
    started = time.perf_counter()
    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read()
    return time.perf_counter() - started


def one_size(spark: Any, log: ProgressLog, timings: list[dict[str, float]], work: Path, bootstrap: str,
             partitions: int, args: argparse.Namespace, first_cycle: int,
             producers: list[ProducerRun]) -> tuple[dict[str, Any], int]:
    """A fresh job on ``partitions`` partitions: its steady batches' figures, and the next producer cycle."""
    from bench.bench_stream import BenchExporter  # type: ignore[attr-defined]  # made by bench_classes
    from streaming.job import start_job

    name = f"size-{partitions}"
    config = ReplmonConfig(
        transport=transport_config(bootstrap),
        stream=StreamConfig(trigger_interval_s=args.trigger, checkpoint_dir=work / name / "checkpoint",
                            history_dir=work / name / "history", starting_offsets="latest",
                            max_offsets_per_trigger=args.backlog_batch, metrics_port=0,
                            stale_after_s=600, hw_stalled_after_s=600, series_budget=args.series_budget,
                            spark_conf={"spark.ui.showConsoleProgress": "false"}))
    started = time.time()
    job = start_job(spark, config, exporter=BenchExporter(config.stream.series_budget))
    query = job.queries[0]
    run_id = str(query.runId)

    def progress() -> list[dict[str, Any]]:
        return [p for p in log.get(query.name) if p.get("runId") == run_id]

    def alive() -> None:
        for q in job.queries:
            if not q.isActive:
                raise RuntimeError(f"query {q.name} died: {q.exception()}")

    try:
        deadline = time.monotonic() + 120
        while not progress():  # its first (empty) batch: it reads from here on
            alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the job made no first batch in 120 s")
            time.sleep(0.5)
        start = topic_end(bootstrap)
        first_batches = -(-partitions // args.backlog_batch) + 1  # the first cycle, and one for its stragglers
        wanted = (first_batches + args.steady_batches) * args.backlog_batch
        cycles = -(-wanted // partitions)
        producer = start_producer(work, bootstrap, name, partitions, first_cycle, cycles=cycles)
        producers.append(producer)
        producer.wait(timeout_s=900)
        target = start + cycles * partitions
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            alive()
            done = progress()
            if done and consumed(done[-1]) >= target:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{name}: the job did not read its {cycles} cycles in {args.timeout:.0f} s")
        read = [p for p in progress() if p.get("numInputRows", 0) > 0]
        steady = [p for p in read[first_batches:] if p["numInputRows"] >= 0.9 * args.backlog_batch]
        ids = {int(p["batchId"]) for p in steady}
        handler = [t for t in timings if int(t["batch_id"]) in ids and t["t"] >= started]
        if not steady or len(handler) != len(steady):
            raise RuntimeError(f"{name}: {len(steady)} steady batches, {len(handler)} timed")
        scrapes = [scrape_s(job.port) for _ in range(SCRAPES)]
        tracked, table = job.exporter.tracked(), job.exporter.snapshot()
        mem = memory(spark)
        state_memory = sum(op.get("memoryUsedBytes", 0) for op in steady[-1].get("stateOperators", []))
    finally:
        job.stop()
    state_files = [f for f in (work / name / "checkpoint" / "state").rglob("*") if f.is_file()]

    def mean(key: str) -> float:
        return statistics.fmean(t.get(key, 0.0) for t in handler)

    out = {
        "partitions": partitions, "tracked": tracked, "driver_rows": len(table),
        "topics": max(1, partitions // PER_TOPIC),
        "steady_batches": len(steady), "batch_rows": statistics.fmean(p["numInputRows"] for p in steady),
        "batch_s": statistics.fmean(p["batchDuration"] / 1000 for p in steady),
        "handler_s": mean("handler"), "exporter_s": mean("exporter"), "history_s": mean("history"),
        "publish_s": mean("publish"), "spark_and_collect_s": mean("spark_and_collect"),
        "scrape_s": statistics.median(scrapes),
        "table_mb": float(table.memory_usage(deep=True).sum()) / 2**20,
        "driver_python_rss_mb": mem["driver_python_rss_mb"], "heap_used_mb": mem["heap_used_mb"],
        "jvm_rss_mb": mem["jvm_rss_mb"], "state_memory_mb": state_memory / 2**20,
        "state_checkpoint_mb": sum(f.stat().st_size for f in state_files) / 2**20,
    }
    out["driver_steps_s"] = out["exporter_s"] + out["history_s"] + out["publish_s"]
    print(f"{name}: {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()})}",
          flush=True)
    return out, first_cycle + cycles


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from streaming.pyspark_hooks import JsonProgressListener
    from streaming.session import get_session

    results: dict[str, Any] = {"load_start": loadavg(), "sizes": []}
    check_template(sample_template())
    cluster = LocalCluster.up(work / "cluster", brokers=1, die_with_parent=True, remember=False)
    producers: list[ProducerRun] = []
    spark = None
    try:
        bootstrap = cluster.bootstrap_servers
        ensure_topic(ReplmonConfig(transport=transport_config(bootstrap)), SAMPLES_TOPIC)
        spark = get_session(StreamConfig(spark_conf={"spark.ui.showConsoleProgress": "false"}),
                            app_name="replmon-bench-driver")
        log = ProgressLog()

        class Listener(JsonProgressListener):
            def onQueryProgress(self, event: Any) -> None:
                log.add(json.loads(event.progress.json))

        spark.streams.addListener(Listener())
        timings: list[dict[str, float]] = []
        profile_dir = work / "profile"
        profile_dir.mkdir()
        bench_classes(Latency(), timings, profile_dir, cprofile=False)
        cycle = 0
        for size in args.sizes:
            figures, cycle = one_size(spark, log, timings, work, bootstrap, size, args, cycle, producers)
            results["sizes"].append(figures)
    finally:
        shut_down(producers, cluster, spark)
    results["load_end"] = loadavg()
    return results


COLUMNS: list[tuple[str, str, Callable[[float], str]]] = [
    ("partitions", "partitions tracked", lambda v: f"{v:,.0f}"),
    ("topics", "topics", lambda v: f"{v:,.0f}"),
    ("driver_rows", "partition rows the driver holds", lambda v: f"{v:,.0f}"),
    ("batch_s", "batch duration (s)", lambda v: f"{v:.2f}"),
    ("handler_s", "foreachBatch handler (s)", lambda v: f"{v:.2f}"),
    ("exporter_s", "of which the exporter (s)", lambda v: f"{v:.3f}"),
    ("history_s", "the history (s)", lambda v: f"{v:.3f}"),
    ("publish_s", "the events (s)", lambda v: f"{v:.3f}"),
    ("scrape_s", "one /metrics scrape (s)", lambda v: f"{v:.3f}"),
    ("table_mb", "exporter table (MiB)", lambda v: f"{v:,.0f}"),
    ("driver_python_rss_mb", "driver Python RSS (MiB, cumulative)", lambda v: f"{v:,.0f}"),
    ("heap_used_mb", "driver JVM heap after GC (MiB)", lambda v: f"{v:,.0f}"),
    ("state_memory_mb", "executors' state store memory (MiB, Spark's memoryUsedBytes)", lambda v: f"{v:,.0f}"),
    ("state_checkpoint_mb", "state in the checkpoint (MiB, every version kept)", lambda v: f"{v:,.0f}"),
]


def table(results: dict[str, Any]) -> list[str]:
    sizes = results["sizes"]
    rows = ["| figure | " + " | ".join(f"{s['partitions']:,}" for s in sizes) + " |",
            "|---|" + "---:|" * len(sizes)]
    for key, label, fmt in COLUMNS[1:]:
        rows.append(f"| {label} | " + " | ".join(fmt(float(s[key])) for s in sizes) + " |")
    return rows


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = results["sizes"]
    x = [s["partitions"] for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("exporter_s", "exporter step"), ("history_s", "history step"),
                       ("publish_s", "events step"), ("scrape_s", "one /metrics scrape")):
        left.plot(x, [s[key] for s in sizes], marker="o", label=label)
    left.set(xscale="log", xlabel="partitions tracked", ylabel="seconds", title="driver time per batch / scrape")
    left.legend()
    for key, label in (("table_mb", "exporter table"), ("driver_python_rss_mb", "driver Python RSS"),
                       ("heap_used_mb", "driver JVM heap")):
        right.plot(x, [s[key] for s in sizes], marker="o", label=label)
    right.set(xscale="log", xlabel="partitions tracked", ylabel="MiB", title="driver memory")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda text: [int(v) for v in text.split(",")],
                        default=[10_000, 30_000, 100_000, 300_000], help="partitions tracked, comma-separated")
    parser.add_argument("--steady-batches", type=int, default=6)
    parser.add_argument("--backlog-batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--trigger", type=float, default=2.0)
    parser.add_argument("--series-budget", type=int, default=StreamConfig().series_budget,
                        help="stream.series_budget: the driver holds at most state_buckets x this many rows")
    parser.add_argument("--timeout", type=float, default=600, help="seconds at most for a size's batches")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/ alone")
    args = parser.parse_args()
    bad = [s for s in args.sizes if s < PER_TOPIC or s % PER_TOPIC]
    if bad:
        parser.error(f"--sizes must be multiples of {PER_TOPIC}: {bad}")
    args.sizes = sorted(args.sizes)
    command = ("python bench/bench_driver.py " + shlex.join(sys.argv[1:])).strip()
    with interrupt_on_sigterm(), tempfile.TemporaryDirectory(prefix="replmon-bench-driver-") as tmp:
        results = run(args, Path(tmp))
    rows = table(results)
    print("\n".join(rows))
    if not args.no_write:
        plot(results, PLOT)
        intro = (f"`{command}` ({time.strftime('%Y-%m-%d')}; load average {results['load_start']} at the start, "
                 f"{results['load_end']} at the end). Steady micro-batches of {args.backlog_batch:,} samples after "
                 "each size's first cycle; see the docstring of `bench/bench_driver.py`.")
        write_figures(DOC, HEADING, intro, rows, PLOT, "driver against partitions tracked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
