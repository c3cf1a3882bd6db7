"""Throughput of the streaming job on a Spark standalone cluster of 1 and 2 workers, against local[2] in the same
run: the same backlog, the same settings, checkpoint and history on HDFS in every case; per-task rates from
Spark's event log.

    .venv/bin/python bench/bench_cluster.py [--partitions 20000] [--backlog-cycles 15] [--backlog-batch 20000]
        [--workers 1 2] [--local-cores 2] [--transport batch] [--trigger 2] [--phase-timeout 120]
        [--warmup-timeout 240] [--keep] [--no-write]

Starts a one-broker local Kafka and a one-datanode HDFS (replmon.testbed.hdfs) in a temporary directory, fills
the samples topic (6 partitions) with a backlog of ``--backlog-cycles`` cycles over ``--partitions`` partitions
(bench_stream's producers and workload: the collector's batch records, or a JSON record per sample), then, one
mode after the other, runs the job (streaming.job.start_job) on the whole backlog from its start, about
``--backlog-batch`` samples a micro-batch (maxOffsetsPerTrigger: the records that hold them), until it has read
it all or ``--phase-timeout`` s after its warm-up batches:

* ``local[N]`` (``--local-cores``, 0: none): the reference, the tasks in the driver's JVM;
* ``W workers`` (each of ``--workers``): a StandaloneCluster (replmon.testbed.sparkcluster) of W workers of one
  core, spark.executor.cores 1, spark.cores.max W, stream.state_parallelism W: the executors are processes of
  their own, without the source tree or the driver's /tmp (the job ships its code, stream.code_archive auto).

Each mode's driver is a process of its own (``--drive``: a fresh driver JVM per mode), with a fresh checkpoint
on HDFS, Spark's event log on the driver's disk and bench_stream's instrumented foreachBatch handler (the
processor runs unchanged: the executors cannot reach the driver's files). Figures, over the steady batches
(after the first cycle and at least bench_stream.WARMUP_BATCHES, as bench_stream counts them):

* samples/s: rows / batch duration (Spark's progress), bench_stream.capacity;
* per stage and per task, from the event log: the read stage (Kafka read, parse, shuffle write; one task per
  topic partition, or stream.read_tasks, the executor cores by default, where those are more) and the state
  stage (shuffle read, transformWithStateInPandas, the Arrow collect to the driver); a task's rate is the
  samples it handled (its batch's samples in the share of its records) / its executor run time;
* the driver's share: batch duration - the time Spark jobs ran (the collect's job and the history writes), i.e.
  planning, commits, the Arrow-to-pandas end of the collect and the handler's own Python, all on the driver.

Prints a table and writes the "## Streaming job on a standalone cluster" section of docs/benchmarks.md and
docs/bench_cluster.png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.bench_stream import (  # noqa: E402
    PER_TOPIC,
    SAMPLES_TOPIC,
    WARMUP_BATCHES,
    Latency,
    ProgressLog,
    SampleCounts,
    bench_classes,
    capacity,
    check_template,
    consumed,
    end_offsets,
    fill_backlog,
    first_cycle_batches,
    job_arguments,
    loadavg,
    records_for,
    sample_template,
    shut_down,
    topic_ends,
)
from bench.docsection import write_section  # noqa: E402
from replmon.core.config import ReplmonConfig, StreamConfig, TransportConfig  # noqa: E402
from replmon.core.kafka_topics import ensure_topic  # noqa: E402
from replmon.core.processes import interrupt_on_sigterm  # noqa: E402
from replmon.testbed.hdfs import HADOOP_VERSION  # noqa: E402
from replmon.testbed.localcluster import KAFKA_VERSION  # noqa: E402
from streaming.session import SPARK_VERSION  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_cluster.png"
HEADING = "Streaming job on a standalone cluster"
TOPIC_PARTITIONS = 6
EXECUTOR_MEMORY = "768m"
WORKER_MEMORY = "1g"
PROJECTED_CORES = (1, 2, 4, 8, 16, 32, 64)
STATE_BUCKETS = 32
"""stream.state_buckets of every mode, whatever its tasks (the projection's state stage has min(cores, buckets)
tasks): the count its figures were measured with."""

# ---------------------------------------------------------------- the job's configuration


def transport_config(bootstrap: str) -> TransportConfig:
    return TransportConfig(bootstrap_servers=bootstrap.split(","), samples_topic=SAMPLES_TOPIC,
                           events_topic="bench.events", quarantine_topic="bench.quarantine",
                           topic_partitions=TOPIC_PARTITIONS)


def job_config(spec: dict[str, Any]) -> ReplmonConfig:
    """The job of one mode: checkpoint and history on HDFS, the cluster's settings when ``spec['workers']``."""
    conf = {"spark.ui.showConsoleProgress": "false", "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": Path(spec["eventlog"]).as_uri(), "spark.eventLog.compress": "false"}
    if spec["workers"]:
        # every worker is 127.0.0.1 with a private disk: no reading another executor's shuffle files "locally"
        conf |= {"spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.cores": "1",
                 "spark.cores.max": str(spec["workers"]), "spark.shuffle.readHostLocalDisk": "false"}
    store = f"{spec['hdfs']}/{spec['name']}"
    return ReplmonConfig(
        transport=transport_config(spec["bootstrap"]),
        stream=StreamConfig(spark_master=spec["master"], trigger_interval_s=spec["trigger"],
                            checkpoint_dir=f"{store}/checkpoint", history_dir=f"{store}/history",
                            starting_offsets="earliest", metrics_port=0,
                            max_offsets_per_trigger=records_for(spec["batch"], spec["partitions"], spec["transport"]),
                            state_parallelism=spec["tasks"], state_buckets=STATE_BUCKETS, driver_host="127.0.0.1",
                            driver_bind_address="127.0.0.1", spark_conf=conf))


# ---------------------------------------------------------------- one mode's driver (a process of its own)


def drive(spec_path: Path) -> int:
    """Run the job of the mode ``spec_path`` describes on the backlog; write its progress and handler timings to
    ``result.json`` beside the spec."""
    import streaming.job as job_module
    from streaming.job import start_job
    from streaming.pyspark_hooks import JsonProgressListener
    from streaming.session import get_session

    spec = json.loads(spec_path.read_text())
    work = spec_path.parent
    config = job_config(spec)
    Path(spec["eventlog"]).mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"load_start": loadavg()}
    spark = job = None
    try:
        started = time.time()
        spark = get_session(config.stream, app_name=f"replmon-bench-cluster-{spec['name']}")
        result["session_s"] = time.time() - started
        log = ProgressLog()

        class Listener(JsonProgressListener):
            def onQueryProgress(self, event: Any) -> None:
                log.add(json.loads(event.progress.json))

        spark.streams.addListener(Listener())
        timings: list[dict[str, float]] = []
        processor = job_module.ReplicationProcessor
        bench_classes(Latency(), timings, work / "profile", cprofile=False)
        # the handler and the exporter are timed on the driver; the processor runs on the executors as it is (the
        # timed one writes to the driver's /tmp, which executors in other processes do not see)
        job_module.ReplicationProcessor = processor  # type: ignore[misc]
        job_started = time.time()
        job = start_job(spark, config)
        query = job.queries[0]
        result["start_job_s"] = time.time() - job_started

        def progress() -> list[dict[str, Any]]:
            return [p for p in log.get(query.name) if p.get("runId") == str(query.runId)]

        skip = max(WARMUP_BATCHES, first_cycle_batches(spec["partitions"], spec["batch"]))
        deadline = time.monotonic() + spec["warmup_timeout"] + spec["phase_timeout"]
        warmed, shown, complete = False, 0, False
        while time.monotonic() < deadline:
            if not query.isActive:
                raise RuntimeError(f"query {query.name} died: {query.exception()}")
            got = [p for p in progress() if p.get("numInputRows", 0) > 0]
            for p in got[shown:]:
                print(f"  {spec['label']} batch {p['batchId']}: {p['numInputRows']:,} rows in "
                      f"{p['batchDuration'] / 1000:.1f} s", flush=True)
            shown = len(got)
            if not warmed and len(got) >= skip:
                deadline = min(deadline, time.monotonic() + spec["phase_timeout"])
                warmed = True
            every = progress()
            if every and consumed(every[-1]) >= spec["backlog"]:
                complete = True
                break
            time.sleep(0.5)
        result |= {"complete": complete, "skip": skip, "app_id": spark.sparkContext.applicationId}
        job.stop()
        job = None
        result |= {"progress": progress(), "timings": timings, "load_end": loadavg()}
    finally:
        if job is not None:
            job.stop()
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()  # ends the event log
    (work / "result.json").write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------- Spark's event log


def _events(paths: list[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        with path.open() as f:
            yield from (json.loads(line) for line in f)


def read_eventlog(directory: Path) -> dict[str, Any]:
    """Jobs (batch id, submission and completion, stages), stages (submission, completion, successful tasks) and
    the executors added, from the one application's event log in ``directory``."""
    apps = list(directory.iterdir())
    if len(apps) != 1:
        raise RuntimeError(f"expected one application's event log in {directory}, found {[p.name for p in apps]}")
    # Spark 4 rolls the log by default: eventlog_v2_<app>/events_<n>_<app>; else one file
    logs = sorted(apps[0].glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if apps[0].is_dir() \
        else apps
    jobs: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    executors: set[str] = set()
    for event in _events(logs):
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            batch = props.get("streaming.sql.batchId")
            jobs[event["Job ID"]] = {"start": event["Submission Time"] / 1000, "stages": event["Stage IDs"],
                                     "batch": int(batch) if batch is not None else None}
            for stage_id in event["Stage IDs"]:
                stages.setdefault(stage_id, {"tasks": []})["job"] = event["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]]["end"] = event["Completion Time"] / 1000
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stage = stages.setdefault(info["Stage ID"], {"tasks": []})
            stage |= {"name": info.get("Stage Name", ""), "start": info.get("Submission Time", 0) / 1000,
                      "end": info.get("Completion Time", 0) / 1000}
        elif kind == "SparkListenerTaskEnd":
            info, metrics = event["Task Info"], event.get("Task Metrics") or {}
            if info.get("Failed") or info.get("Killed"):
                continue
            shuffle_read = metrics.get("Shuffle Read Metrics") or {}
            shuffle_write = metrics.get("Shuffle Write Metrics") or {}
            stages.setdefault(event["Stage ID"], {"tasks": []})["tasks"].append({
                "executor": info["Executor ID"], "launch": info["Launch Time"] / 1000,
                "finish": info["Finish Time"] / 1000, "run_s": metrics.get("Executor Run Time", 0) / 1000,
                "deserialize_s": metrics.get("Executor Deserialize Time", 0) / 1000,
                "gc_s": metrics.get("JVM GC Time", 0) / 1000,
                "read_records": int(shuffle_read.get("Total Records Read", 0)),
                "written_records": int(shuffle_write.get("Shuffle Records Written", 0)),
                "input_records": int((metrics.get("Input Metrics") or {}).get("Records Read", 0))})
        elif kind == "SparkListenerExecutorAdded":
            executors.add(event["Executor ID"])
    for stage in stages.values():
        tasks = stage["tasks"]
        stage["kind"] = ("state" if sum(t["read_records"] for t in tasks) else
                         "read" if sum(t["written_records"] for t in tasks) else "other")
    return {"jobs": jobs, "stages": stages, "executors": len(executors - {"driver"}), "app": apps[0].name}


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``intervals``."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


# ---------------------------------------------------------------- one mode's figures


def steady_batches(progress: list[dict[str, Any]], skip: int) -> list[dict[str, Any]]:
    """The batches bench_stream.capacity counts: those with rows after the first ``skip``, without a partial one."""
    batches = [p for p in progress if p.get("numInputRows", 0) > 0][skip:]
    if len(batches) > 1:
        batches = [p for p in batches if p["numInputRows"] >= 0.9 * max(q["numInputRows"] for q in batches)]
    return batches


def figures(spec: dict[str, Any], result: dict[str, Any], spark_log: dict[str, Any],
            counts: SampleCounts) -> dict[str, Any]:
    """One mode's figures over its steady batches, in samples (``counts``: the samples the backlog's records hold).
    A task's samples: its records' share of its batch's samples (a read task's Kafka records, a state task's
    bucket shares read from the shuffle); batch records of one cycle are alike in size, so the share is close."""
    progress, skip = [counts.annotate(p) for p in result["progress"]], result["skip"]
    rate, count, series = capacity(progress, skip)
    steady = steady_batches(progress, skip)
    if len(steady) != count:
        raise AssertionError(f"{len(steady)} steady batches, capacity counted {count}")
    timings = {int(t["batch_id"]): t for t in result["timings"]}
    by_batch: dict[int, list[int]] = {}
    for job_id, job in spark_log["jobs"].items():
        if job["batch"] is not None and "end" in job:
            by_batch.setdefault(job["batch"], []).append(job_id)
    rows = []
    state_tasks: list[dict[str, Any]] = []
    read_tasks: list[dict[str, Any]] = []
    for p in steady:
        batch_id = int(p["batchId"])
        jobs = [spark_log["jobs"][j] for j in by_batch.get(batch_id, [])]
        stages = [spark_log["stages"][s] for job in jobs for s in job["stages"] if s in spark_log["stages"]]
        stages = [s for s in stages if s.get("tasks")]  # skipped stages have none
        state = [s for s in stages if s["kind"] == "state"]
        read = [s for s in stages if s["kind"] == "read"]
        if len(state) != 1 or len(read) != 1:
            raise RuntimeError(f"batch {batch_id}: {len(read)} read and {len(state)} state stages in the event log")
        collect_job = spark_log["jobs"][state[0]["job"]]
        other_jobs = [j for j in jobs if j is not collect_job]
        batch_s = p["batchDuration"] / 1000
        spark_s = union_s([(j["start"], j["end"]) for j in jobs])
        timing = timings.get(batch_id, {})
        tail = float("nan")
        if timing:
            handler_start = timing["t"] - timing["handler"]
            tail = handler_start + timing["spark_and_collect"] - collect_job["end"]
        samples = p["numInputRows"]
        read_key = "input_records" if sum(t["input_records"] for t in read[0]["tasks"]) else "written_records"
        for tasks, key in ((state[0]["tasks"], "read_records"), (read[0]["tasks"], read_key)):
            records = sum(t[key] for t in tasks) or 1
            for t in tasks:
                t["samples"] = samples * t[key] / records
        state_tasks += state[0]["tasks"]
        read_tasks += read[0]["tasks"]
        rows.append({
            "batch": batch_id, "rows": p["numInputRows"], "batch_s": batch_s,
            "collect_job_s": collect_job["end"] - collect_job["start"],
            "read_stage_s": read[0]["end"] - read[0]["start"], "state_stage_s": state[0]["end"] - state[0]["start"],
            "other_jobs_s": union_s([(j["start"], j["end"]) for j in other_jobs]), "spark_s": spark_s,
            "driver_s": batch_s - spark_s, "collect_tail_s": tail,
            "state_tasks": len(state[0]["tasks"]), "read_tasks": len(read[0]["tasks"]),
            "state_task_parallelism": sum(t["run_s"] for t in state[0]["tasks"]) / max(
                state[0]["end"] - state[0]["start"], 1e-3),
            **{f"handler_{k}": float(timing.get(k, 0.0)) for k in ("handler", "spark_and_collect", "exporter",
                                                                   "history", "publish")},
            **{f"ms_{k}": float(v) for k, v in (p.get("durationMs") or {}).items()}})
    frame = pd.DataFrame(rows)
    mean = frame.mean(numeric_only=True)

    def per_task(tasks: list[dict[str, Any]]) -> dict[str, float]:
        records = np.array([t["samples"] for t in tasks], dtype=float)
        run = np.array([t["run_s"] for t in tasks], dtype=float)
        return {"tasks": float(len(tasks)), "records": float(records.mean()), "run_s": float(np.median(run)),
                "rate": float(records.sum() / run.sum()), "rate_median": float(np.median(records / run)),
                "wall_s": float(np.median([t["finish"] - t["launch"] for t in tasks])),
                "deserialize_s": float(np.median([t["deserialize_s"] for t in tasks])),
                "gc_s": float(np.median([t["gc_s"] for t in tasks]))}

    start = min(x for x, _ in series) if series else 0.0
    return {"label": spec["label"], "workers": spec["workers"], "tasks": spec["tasks"], "rate": rate,
            "steady": count, "complete": result["complete"],
            "read": counts.at(end_offsets(progress[-1])) if progress else 0, "executors": spark_log["executors"],
            "batch_s_median": float(frame["batch_s"].median()), "mean": {k: float(v) for k, v in mean.items()},
            "state": per_task(state_tasks), "read_stage": per_task(read_tasks),
            "series": [(x - start, y) for x, y in series],
            "first_batch_s": next((q["batchDuration"] / 1000 for q in progress if q.get("numInputRows")),
                                  float("nan")),
            "session_s": result["session_s"], "start_job_s": result["start_job_s"],
            "load_start": result["load_start"], "load_end": result["load_end"]}


def projected_read_tasks(cores: int) -> int:
    """The read stage's tasks with ``cores`` executor cores: one per topic partition, or stream.read_tasks (by
    default the cores: the Kafka source's minPartitions) where those are more."""
    return max(TOPIC_PARTITIONS, cores)


def projection(f: dict[str, Any], batch: int, cores: int, buckets: int) -> float:
    """Samples/s of a batch of ``batch`` samples with ``cores`` executor cores, from one mode's measured figures:
    the driver's time and the history writes fixed per batch, the read stage's :func:`projected_read_tasks` in
    ceil(tasks / cores) waves, the state stage's min(cores, buckets) tasks in one, each task at its measured
    rate (an estimate: each task costs the same per sample as it did here, with nothing else on its core)."""
    m = f["mean"]
    tasks = projected_read_tasks(cores)
    read = math.ceil(tasks / cores) * (batch / tasks) / f["read_stage"]["rate"]
    state = batch / min(cores, buckets) / f["state"]["rate"]
    return batch / (m["driver_s"] + m["other_jobs_s"] + read + state)


# ---------------------------------------------------------------- the run


def run_mode(work: Path, spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One mode's driver, a child process; its result.json."""
    from replmon.testbed.sparkcluster import StandaloneCluster

    mode_dir = work / spec["name"]
    mode_dir.mkdir()
    spec["eventlog"] = str(mode_dir / "eventlog")
    spec_path = mode_dir / "spec.json"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with contextlib.ExitStack() as stack:
        if spec["workers"]:
            started = time.monotonic()
            cluster = stack.enter_context(StandaloneCluster(mode_dir / "spark", workers=spec["workers"], cores=1,
                                                            memory=WORKER_MEMORY))
            spec["master"] = cluster.master_url
            print(f"{spec['label']}: standalone cluster {cluster.master_url} up in "
                  f"{time.monotonic() - started:.0f} s", flush=True)
        spec_path.write_text(json.dumps(spec))
        log = (mode_dir / "driver.log").open("wb")
        stack.callback(log.close)
        proc = subprocess.Popen([sys.executable, __file__, "--drive", str(spec_path)], stdout=None, stderr=log,
                                stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        try:
            proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        result_path = mode_dir / "result.json"
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
        if proc.returncode != 0 or "progress" not in result:
            tail = (mode_dir / "driver.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{spec['label']}: the driver exited {proc.returncode}; its log ends:\n{tail}")
        if spec["workers"]:
            result["executor_logs"] = [str(p) for i in range(spec["workers"])
                                       for p in cluster.work_dir(i).glob("app-*/*/stderr")]
    return result


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from replmon.testbed.hdfs import MiniHdfs
    from replmon.testbed.localcluster import LocalCluster

    results: dict[str, Any] = {"load_start": loadavg(), "modes": []}
    check_template(sample_template())
    print(f"load average at start: {results['load_start']}", flush=True)
    started = time.monotonic()
    cluster = LocalCluster.up(work / "kafka", brokers=1, die_with_parent=True, remember=False)
    producers: list[Any] = []
    try:
        with MiniHdfs(work / "hdfs") as hdfs:
            bootstrap = cluster.bootstrap_servers
            print(f"kafka {bootstrap} and hdfs {hdfs.uri} up in {time.monotonic() - started:.0f} s", flush=True)
            ensure_topic(ReplmonConfig(transport=transport_config(bootstrap)), SAMPLES_TOPIC)
            sent, seconds, backlog = fill_backlog(work, bootstrap, args.partitions, args.backlog_cycles, args.churn,
                                                  producers, transport=args.transport)
            counts = SampleCounts(work, args.transport)
            held = counts.at(topic_ends(bootstrap))
            if held != sent:
                raise RuntimeError(f"topic holds {held} samples, {sent} sent")
            results["backlog"], results["backlog_samples"] = backlog, sent
            print(f"backlog: {sent:,} samples in {seconds:.1f} s; topic holds {backlog:,}", flush=True)
            modes = ([(f"local[{args.local_cores}]", 0, args.local_cores)] if args.local_cores else [])
            modes += [(f"{w} worker{'s' if w > 1 else ''}", w, w) for w in args.workers]
            for label, workers, tasks in modes:
                spec = {"label": label, "name": label.replace(" ", "-").replace("[", "").replace("]", ""),
                        "workers": workers, "tasks": tasks, "master": label if not workers else "",
                        "bootstrap": bootstrap, "hdfs": hdfs.uri, "trigger": args.trigger, "transport": args.transport,
                        "batch": args.backlog_batch, "partitions": args.partitions, "backlog": backlog,
                        "phase_timeout": args.phase_timeout, "warmup_timeout": args.warmup_timeout}
                print(f"{label}: starting", flush=True)
                result = run_mode(work, spec, args.warmup_timeout + args.phase_timeout + 300)
                mode = figures(spec, result, read_eventlog(Path(spec["eventlog"])), counts)
                results["modes"].append(mode)
                print(f"{label}: {mode['rate']:,.0f} samples/s over {mode['steady']} steady batches "
                      f"({mode['read']:,} read), {mode['executors']} executors; state task "
                      f"{mode['state']['rate']:,.0f} samples/s", flush=True)
    finally:
        shut_down(producers, cluster)
    results["load_end"] = loadavg()
    return results


# ---------------------------------------------------------------- report


def report(args: argparse.Namespace, r: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    modes = r["modes"]
    header = ["figure", *(m["label"] for m in modes)]

    def row(name: str, fn: Any) -> list[str]:
        return [name, *(fn(m) for m in modes)]

    def s(value: float) -> str:
        return f"{value:.2f} s"

    table = [
        row("samples/s sustained on the backlog (rows / batch duration, steady batches)",
            lambda m: f"{m['rate']:,.0f}"),
        row("vs local[2]" if modes and modes[0]["workers"] == 0 else "vs the first mode",
            lambda m: f"{m['rate'] / modes[0]['rate']:.2f}"),
        row("steady batches (backlog read)", lambda m: f"{m['steady']} ({m['read']:,}"
            + ("" if m["complete"] else ", timed out") + ")"),
        row("batch duration, median (mean)", lambda m: f"{m['batch_s_median']:.2f} s ({m['mean']['batch_s']:.2f})"),
        row("executors / state tasks per batch", lambda m: f"{m['executors'] or 'driver'} / "
            f"{m['mean']['state_tasks']:.0f}"),
        row("Spark job of the collect (read + state stage), mean", lambda m: s(m["mean"]["collect_job_s"])),
        row("read stage (Kafka read, parse, shuffle write), mean", lambda m: s(m["mean"]["read_stage_s"])),
        row("read task: samples, run time (median)", lambda m: f"{m['read_stage']['records']:,.0f} in "
            f"{m['read_stage']['run_s']:.2f} s"),
        row("read task rate: samples / executor run time", lambda m: f"{m['read_stage']['rate']:,.0f}/s"),
        row("state stage (shuffle read, state, Arrow collect), mean", lambda m: s(m["mean"]["state_stage_s"])),
        row("state task: samples, run time (median)", lambda m: f"{m['state']['records']:,.0f} in "
            f"{m['state']['run_s']:.2f} s"),
        row("**state task rate: samples / executor run time**", lambda m: f"**{m['state']['rate']:,.0f}/s**"),
        row("state tasks running at once (task run time / stage wall)",
            lambda m: f"{m['mean']['state_task_parallelism']:.2f}"),
        row("history writes (Spark jobs from the handler), mean", lambda m: s(m["mean"]["other_jobs_s"])),
        row("**driver only: batch - Spark jobs, mean (share of the batch)**",
            lambda m: f"**{m['mean']['driver_s']:.2f} s ({m['mean']['driver_s'] / m['mean']['batch_s']:.0%})**"),
        row("of which the collect's end on the driver (job end to pandas)",
            lambda m: s(m["mean"]["collect_tail_s"])),
        row("of which the handler's exporter + publish", lambda m: s(m["mean"]["handler_exporter"]
                                                                     + m["mean"]["handler_publish"])),
        row("of which query planning / offsets and commit logs (durationMs)",
            lambda m: f"{m['mean'].get('ms_queryPlanning', 0) / 1000:.2f} / "
            f"{(m['mean'].get('ms_walCommit', 0) + m['mean'].get('ms_commitOffsets', 0)) / 1000:.2f} s"),
        row("first batch (warm-up, not measured)", lambda m: s(m["first_batch_s"])),
    ]
    notes = [
        f"Run on {os.cpu_count()} cores, Python {platform.python_version()}, PySpark {SPARK_VERSION}, one broker of "
        f"Kafka {KAFKA_VERSION}, HDFS {HADOOP_VERSION} (one namenode and datanode in one JVM); the broker, the HDFS "
        "JVM, the driver (JVM and Python), the standalone master and workers and their executors and Python workers "
        "all share the same cores. Load "
        f"average (1, 5, 15 min) {r['load_start']} at the start and {r['load_end']} at the end; per mode "
        + "; ".join(f"{m['label']} {m['load_start']} -> {m['load_end']}" for m in modes) + ".",
        f"Workload: bench_stream's: {args.partitions:,} partitions ({max(1, args.partitions // PER_TOPIC)} topics x "
        f"{min(PER_TOPIC, args.partitions)}) x RF 3, one sample per partition per cycle, {args.churn}/1000 of the "
        f"partitions per cycle with a shrunk ISR; samples topic of {TOPIC_PARTITIONS} partitions. Backlog "
        f"{r['backlog_samples']:,} samples ({args.backlog_cycles} cycles) in {r['backlog']:,} Kafka records ("
        + ("partition_batch/v1 records, as the collector writes them" if args.transport == "batch"
           else "a JSON record per sample")
        + f"), read by each mode from its start in batches of {args.backlog_batch:,} samples ("
        f"{records_for(args.backlog_batch, args.partitions, args.transport):,} records: maxOffsetsPerTrigger), "
        f"trigger {args.trigger:g} s, "
        f"{STATE_BUCKETS} state buckets; the first cycle and at least {WARMUP_BATCHES} batches "
        "excluded, as bench_stream does. Each mode: a driver process of its own (a fresh JVM), a fresh checkpoint "
        "and history on HDFS, spark.driver.memory 2g; the clusters: workers of one core and "
        f"{WORKER_MEMORY}, spark.executor.cores 1, spark.executor.memory {EXECUTOR_MEMORY}, spark.cores.max = "
        "workers, stream.state_parallelism = workers, spark.shuffle.readHostLocalDisk false; local[2]: "
        "stream.state_parallelism 2. Modes in the order of the table, one run each.",
        "Per task, from Spark's event log (spark.eventLog.enabled): a task's samples are its batch's samples in "
        "the share of its records (a read task's Kafka records, a state task's bucket shares read from the "
        "shuffle); its rate = samples / executor run time, summed over the steady batches' tasks. The state "
        "task's run time includes its Python worker (transformWithStateInPandas) and sending its output to the "
        "driver's collect. 'Driver only' = batch duration (progress) - the union of the batch's Spark jobs "
        "(submission to completion, event log): query planning, offsets and commit logs on HDFS, the end of the "
        "collect of the buckets' messages and the foreachBatch handler's Python (exporter, events); the collect's "
        "end = the end of the handler's collect (its timer, bench_stream's TimedHandler) - the completion of its "
        "Spark job, and includes the handler's few untimed steps.",
    ]
    return header, table, notes


def projection_note(args: argparse.Namespace, r: dict[str, Any]) -> tuple[str, dict[str, list[float]]]:
    buckets = STATE_BUCKETS
    curves = {m["label"]: [projection(m, args.backlog_batch, c, buckets) for c in PROJECTED_CORES]
              for m in r["modes"] if m["workers"]}
    if not curves:
        return "", curves
    base = [m for m in r["modes"] if m["workers"]][-1]
    values = curves[base["label"]]
    m = base["mean"]
    # unbounded cores: the read in as many tasks (its time goes to nothing), the state in one task per bucket
    limit = args.backlog_batch / (m["driver_s"] + m["other_jobs_s"]
                                  + args.backlog_batch / buckets / base["state"]["rate"])
    note = (
        f"Projection to more executor cores (an estimate from the {base['label']} run's measured figures, not a "
        f"measurement): a batch of {args.backlog_batch:,} samples takes the driver's {m['driver_s']:.2f} s and the "
        f"history writes' {m['other_jobs_s']:.2f} s as measured (they do not shrink with executors), the read stage "
        f"max({TOPIC_PARTITIONS} topic partitions, cores) tasks (stream.read_tasks: the cores) at "
        f"{base['read_stage']['rate']:,.0f} samples/s each in ceil(tasks / cores) waves, the "
        f"state stage min(cores, {buckets} buckets) tasks at "
        f"{base['state']['rate']:,.0f} samples/s each: "
        + ", ".join(f"{c} cores {v:,.0f}" for c, v in zip(PROJECTED_CORES, values, strict=True))
        + f" samples/s; the limit with unbounded cores is {limit:,.0f} samples/s, set by the driver's "
        f"{m['driver_s'] + m['other_jobs_s']:.2f} s per batch and the state stage's "
        f"{args.backlog_batch / buckets / base['state']['rate']:.2f} s in one task per bucket. It assumes each "
        "task keeps the rate it had here and "
        "the driver, broker and HDFS have cores of their own (here they share them, so the measured per-task rates "
        "are lower bounds for a dedicated core), and neglects the fixed cost per task (state store load and commit, "
        "Python worker), which grows in share as tasks get fewer samples each.")
    return note, curves


def plot(r: dict[str, Any], curves: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = r["modes"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 5.2))
    for m, style in zip(modes, ("o-", "s-", "^-", "v-", "D-"), strict=False):
        if m["series"]:
            xs, ys = zip(*m["series"], strict=True)
            ax1.plot(xs, [y / 1000 for y in ys], style, ms=3, label=f"{m['label']} ({m['rate']:,.0f}/s steady)")
    ax1.set_xlabel("seconds since the mode's first batch ended")
    ax1.set_ylabel("samples/s (thousands), per batch: rows / duration")
    ax1.set_title("backlog throughput per batch")
    ax1.legend(fontsize=8)
    parts = (("read stage", "read_stage_s"), ("state stage", "state_stage_s"),
             ("rest of the collect's job", None), ("history writes", "other_jobs_s"),
             ("driver only", "driver_s"))
    bottoms = np.zeros(len(modes))
    for name, key in parts:
        values = np.array([(m["mean"][key] if key else m["mean"]["collect_job_s"] - m["mean"]["read_stage_s"]
                            - m["mean"]["state_stage_s"]) for m in modes])
        ax2.bar([m["label"] for m in modes], values, bottom=bottoms, label=name)
        bottoms += values
    ax2.set_ylabel("seconds per batch (means over the steady batches)")
    ax2.set_title(f"where a batch of {r['batch']:,} samples goes")
    ax2.legend(fontsize=8)
    for (label, estimate), style in zip(curves.items(), ("s--", "^--"), strict=False):
        ax3.plot(PROJECTED_CORES, [v / 1000 for v in estimate], style, ms=4, label=f"estimate from {label}")
    for m in modes:
        if m["workers"]:
            ax3.plot([m["workers"]], [m["rate"] / 1000], "ko", ms=6)
            ax3.annotate(f"measured, {m['label']}", (m["workers"], m["rate"] / 1000), fontsize=8,
                         textcoords="offset points", xytext=(6, -10))
    ax3.set_xscale("log", base=2)
    ax3.set_xlabel("executor cores (= state tasks, up to 32 buckets)")
    ax3.set_ylabel("samples/s (thousands)")
    ax3.set_title("more cores: measured per-task rates x tasks")
    ax3.legend(fontsize=8)
    fig.suptitle(f"replmon streaming job on a Spark standalone cluster: {r['partitions']:,} partitions, "
                 f"{os.cpu_count()} cores shared by everything")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def write_doc(command: str, header: list[str], table: list[list[str]], notes: list[str]) -> None:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in table]
    section = "\n".join([
        f"## {HEADING}", "",
        "The job (`streaming/job.py`, unchanged) on a Spark standalone master with 1 and 2 workers of one core "
        "(`replmon.testbed.sparkcluster`: executors in processes of their own, without the source tree or the "
        "driver's /tmp, the job's code shipped to them), against local[2] in the same run; checkpoint and history "
        "on HDFS (`replmon.testbed.hdfs`) in every mode; the same backlog in the samples topic, read from its "
        "start by each. See the docstring of `bench/bench_cluster.py`.", "",
        "```", command, "```", "", *lines, "", *(line for note in notes if note for line in (note, "")),
        "![standalone cluster benchmark](bench_cluster.png)", ""])
    write_section(DOC, HEADING, section)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--backlog-cycles", type=int, default=15)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="the standalone clusters' sizes")
    parser.add_argument("--local-cores", type=int, default=2, help="N of the local[N] reference (0: none)")
    parser.add_argument("--phase-timeout", type=float, default=120,
                        help="seconds at most for a mode after its warm-up batches")
    job_arguments(parser, "samples per micro-batch of every mode (maxOffsetsPerTrigger: the records holding them)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, event logs)")
    parser.add_argument("--drive", type=Path, help=argparse.SUPPRESS)  # one mode's driver (internal)
    args = parser.parse_args()
    if args.drive:
        with interrupt_on_sigterm():
            return drive(args.drive)
    if args.partitions % PER_TOPIC and args.partitions > PER_TOPIC:
        parser.error(f"--partitions must be a multiple of {PER_TOPIC}")
    command = ("python bench/bench_cluster.py " + shlex.join(sys.argv[1:])).strip()
    work = Path(tempfile.mkdtemp(prefix="replmon-bench-cluster-"))
    try:
        with interrupt_on_sigterm():
            results = run(args, work)
        results |= {"partitions": args.partitions, "batch": args.backlog_batch}
        (work / "results.json").write_text(json.dumps(results))
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    header, table, notes = report(args, results)
    note, curves = projection_note(args, results)
    notes.append(note)
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    print()
    for row in [header, *table]:
        print("  ".join(cell.replace("**", "").ljust(w) for cell, w in zip(row, widths, strict=True)))
    for text in notes:
        print("\n" + text)
    if not args.no_write:
        plot(results, curves, PLOT)
        write_doc(command, header, table, notes)
        print(f"\nwrote {DOC.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
