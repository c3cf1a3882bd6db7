"""Benchmark of the streaming job's start-up: how long ``replmon stream`` takes to its first micro-batch on a new
checkpoint and after a SIGKILL, and what the driver's own set-up steps cost.

    .venv/bin/python bench/bench_startup.py [--restarts 2] [--no-write]

Starts a 3-broker watched cluster and a one-broker transport cluster in a temporary directory (the reliability
bench's, :func:`replmon.testbed.harness.scratch_clusters`), a topic led by each broker and the collector on them,
then ``replmon stream`` as the test bed spawns it, on a new checkpoint and then ``--restarts`` times SIGKILLed and
started again on it. Each start is timed, from the spawn, to:

- ``set-up``: the job's line "replmon stream: reading ..." (the Spark session, the state layout, the query's plan
  built and started);
- ``first micro-batch``: the job's /metrics counting its first batch (the Kafka read, the state stage and the
  driver's writes of a first micro-batch, cold).

Then, in this process (the same code, the same machine, after the job stopped), the driver's set-up steps one by
one: the Spark session (:func:`streaming.session.get_session`, a JVM and its SparkContext), the processor's
input (:func:`streaming.parse.processor_input`: the Py4J calls that build its plan, counted) and a new
checkpoint's state layout (:func:`streaming.buckets.new_bucket_ids`). Prints a table and writes the
"## Job start-up" section of docs/benchmarks.md and docs/bench_startup.png.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docsection import write_figures  # noqa: E402
from bench.reliability import pipeline  # noqa: E402
from replmon.core.config import load_config  # noqa: E402
from replmon.core.processes import interrupt_on_sigterm  # noqa: E402
from replmon.testbed.harness import JOB_START_TIMEOUT_S, Pipeline, scratch_clusters  # noqa: E402
from replmon.testbed.kafka_view import KafkaView, wait_until  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_startup.png"
HEADING = "Job start-up"
READING = "replmon stream: reading"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def time_start(p: Pipeline) -> dict[str, float]:
    """Spawn the job; seconds to its set-up line and to its first micro-batch."""
    path = p.log("stream")
    offset = len(path.read_text(errors="replace")) if path.exists() else 0
    started = time.monotonic()
    p.spawn("stream")
    wait_until(lambda: READING in path.read_text(errors="replace")[offset:], JOB_START_TIMEOUT_S,
               "the job's set-up line")
    set_up = time.monotonic() - started
    p.wait_first_batch()
    return {"set_up_s": set_up, "first_batch_s": time.monotonic() - started}


@contextmanager
def counted_py4j_calls() -> Iterator[list[int]]:
    """How many commands Py4J sends to the JVM meanwhile (each one a round trip)."""
    from py4j.clientserver import ClientServerConnection

    calls = [0]
    send = ClientServerConnection.send_command

    def counting(self: ClientServerConnection, command: str) -> Any:
        calls[0] += 1
        return send(self, command)

    ClientServerConnection.send_command = counting
    try:
        yield calls
    finally:
        ClientServerConnection.send_command = send


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    result = call()
    return time.monotonic() - started, result


def driver_steps(config_path: Path) -> dict[str, float]:
    """The driver's set-up steps in this process, on the job's configuration."""
    from streaming.buckets import default_buckets, new_bucket_ids, state_tasks
    from streaming.parse import processor_input
    from streaming.session import get_session
    from streaming.source import kafka_source

    config = load_config(config_path)
    session_s, spark = timed(lambda: get_session(config.stream, "replmon-bench-startup"))
    try:
        count = config.stream.state_buckets or default_buckets(state_tasks(spark))
        buckets = list(range(count))
        source_s, raw = timed(lambda: kafka_source(spark, config, None))
        with counted_py4j_calls() as calls:
            input_s, _ = timed(lambda: processor_input(raw, buckets))
            input_calls = calls[0]
        layout_s, _ = timed(lambda: new_bucket_ids(count, state_tasks(spark)))
    finally:
        spark.stop()
    return {"session_s": session_s, "source_s": source_s, "input_calls": input_calls, "input_s": input_s,
            "layout_s": layout_s}


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    log(f"starting a 3-broker watched cluster and a one-broker transport cluster in {work}")
    with scratch_clusters(work) as (watched, transport):
        view = KafkaView(watched.bootstrap_servers)
        topics = {f"rel-{b}": b for b in watched.broker_ids}
        for topic, leader in topics.items():
            view.create_topic(topic, assignment={0: [leader, *(b for b in watched.broker_ids if b != leader)]})
        view.close()
        p = pipeline(work, watched, transport, topics)
        p.spawn("collect")
        starts: list[dict[str, Any]] = []
        try:
            for n in range(args.restarts + 1):
                kind = "new checkpoint" if n == 0 else "after a SIGKILL"
                figures = time_start(p)
                starts.append({"kind": kind, **figures})
                log(f"{kind}: set-up {figures['set_up_s']:.1f} s, first micro-batch {figures['first_batch_s']:.1f} s")
                p.kill("stream")
        finally:
            p.stop(grace_s=30)
        log("the driver's set-up steps, in this process")
        steps = driver_steps(p.config)
    log(f"steps: {steps}")
    return {"starts": starts, "steps": steps}


def table(results: dict[str, Any]) -> list[str]:
    rows = ["| start | to the set-up line | to the first micro-batch |", "|---|---:|---:|"]
    rows += [f"| {s['kind']} | {s['set_up_s']:.1f} s | {s['first_batch_s']:.1f} s |" for s in results["starts"]]
    st = results["steps"]
    rows += ["", "| the driver's set-up step (this process) | seconds |", "|---|---:|",
             f"| Spark session (`get_session`: the JVM, its SparkContext) | {st['session_s']:.1f} |",
             f"| the Kafka source (`kafka_source`) | {st['source_s']:.1f} |",
             f"| the processor's input (`processor_input`: {st['input_calls']:,} Py4J calls) | {st['input_s']:.1f} |",
             f"| a new checkpoint's layout (`new_bucket_ids`) | {st['layout_s']:.1f} |"]
    return rows


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    starts = results["starts"]
    labels = [f"{i}: {s['kind']}" for i, s in enumerate(starts)]
    set_up = [s["set_up_s"] for s in starts]
    first = [s["first_batch_s"] - s["set_up_s"] for s in starts]
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.6 * len(starts)))
    ax.barh(labels, set_up, label="spawn to set-up line")
    ax.barh(labels, first, left=set_up, label="set-up line to first micro-batch")
    ax.invert_yaxis()
    ax.set(xlabel="seconds", title="replmon stream: spawn to first micro-batch")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--restarts", type=int, default=2, help="SIGKILLs, each followed by a start on the checkpoint")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/ alone")
    args = parser.parse_args()
    if args.restarts < 0:
        parser.error("--restarts must be 0 or more")
    command = ("python bench/bench_startup.py " + shlex.join(sys.argv[1:])).strip()
    with interrupt_on_sigterm(), tempfile.TemporaryDirectory(prefix="replmon-bench-startup-") as tmp:
        results = run(args, Path(tmp))
    rows = table(results)
    print("\n".join(rows))
    if not args.no_write:
        plot(results, PLOT)
        intro = (f"`{command}` ({time.strftime('%Y-%m-%d')}). Each start of `replmon stream` timed from its spawn, "
                 "with the collector sampling 3 partitions; then the driver's set-up steps timed one by one in the "
                 "bench's process: see the docstring of `bench/bench_startup.py`.")
        write_figures(DOC, HEADING, intro, rows, PLOT, "job start-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
