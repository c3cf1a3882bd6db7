"""Benchmark of the streaming job: sustained samples/s, sample-to-metric latency and driver memory, against a
stateless baseline (same Kafka source and processor_input, no state) in the same run.

    .venv/bin/python bench/bench_stream.py [--partitions 100000] [--rate 100000] [--duration 120]
        [--kept-fraction 0.5 | --kept-rate R] [--kept-duration 60] [--transport batch|json]
        [--backlog-cycles 24] [--warmup-cycles 12] [--backlog-batch 20000] [--heap-partitions 300000]
        [--trigger 2] [--churn 1] [--series-budget N] [--stages] [--stateful-floor] [--cprofile] [--no-write]

Starts a one-broker local Kafka in a temporary directory (stopped and deleted at the end, also on error), creates
the samples topic (6 partitions) and feeds it from a separate producer process: ``partition_batch/v1`` records as
the collector publishes a cycle (bench/batch_producer.py, the default), or a JSON record per sample
(``--transport json``: bench/SampleProducer.java fills a template derived from a real PartitionSample). Samples
are counted as samples, whatever a record holds (the batch producer logs each record's entries). Phases:

1. backlog: ``--backlog-cycles`` cycles over ``--partitions`` partitions (RF 3) written as fast as possible;
2. baseline: a stateless query (processor_input: the processor's input rows to Spark's noop sink) reads the
   backlog;
3. job: the real job (streaming.job.start_job) reads the same backlog from the start: its capacity; with
   ``--stateful-floor``, then the same stateful query without detection (processor_input, the shuffle into state
   buckets and transformWithStateInPandas, its processor reading its rows and keeping a count: what keeping state
   in Spark costs on this transport, to Spark's noop sink); then the baseline again (a machine whose speed drifts
   during the run moves both baselines);
4. live: a fresh job (startingOffsets latest) while the producer paces ``--rate`` samples/s (one cycle per
   ``partitions / rate`` s) for ``--duration`` s: processed rate, sample-to-metric latency;
   then the same at a rate the job keeps up with (``--kept-fraction`` of its capacity in phase 3, or
   ``--kept-rate``) for ``--kept-duration`` s: the latency that batching alone costs. Both after a warm-up of
   ``--warmup-cycles`` cycles at their rate, not measured (as the capacity's); the latency is given after it,
   and once the job caught up with what came during it (its batches after the first that read all the topic
   held when planned);
5. memory: a fresh job, one cycle over ``--heap-partitions`` partitions, then driver JVM heap (after GC), JVM
   RSS, driver and Python worker RSS, state rows, partitions in the exporter.

Phases 2 and 3 stop ``--phase-timeout`` s after their warm-up batches (given ``--warmup-timeout`` s), phase 5
after ``--memory-timeout`` s, so the run stays bounded on a slow or loaded machine; they read batches of about
``--backlog-batch`` samples (the live phases: at most that or a trigger's worth of their rate, whichever is more).

Capacity is samples / batch duration over the batches after the first ``--warmup-cycles`` cycles (the job
creates every partition's state, then learns each one's lineage: one-offs of a fresh job; at least two
batches), baseline and job on batches of the same size. The baseline runs before the job and again after it; the
job is compared with their mean. ``--stages`` turns Spark's UI on and sums the job's stages from its REST API.
Prints a table and writes the "## Streaming job" section of docs/benchmarks.md and docs/bench_stream.png.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.docsection import write_section  # noqa: E402
from collectors.publisher import BATCH_GROUPS, BATCH_MAX_ENTRIES  # noqa: E402
from replmon.contracts.batches import decode_batch, is_batch  # noqa: E402
from replmon.contracts.samples import PartitionSample, ReplicaOffsets, parse_sample, to_json  # noqa: E402
from replmon.core.config import ReplmonConfig, StreamConfig, TransportConfig  # noqa: E402
from replmon.core.kafka_topics import ensure_topic  # noqa: E402
from replmon.core.processes import interrupt_on_sigterm  # noqa: E402
from replmon.testbed.localcluster import KAFKA_VERSION, LocalCluster  # noqa: E402
from replmon.testbed.localcluster.artifacts import java_executable, kafka_libs  # noqa: E402
from streaming.session import SPARK_VERSION  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_stream.png"
PRODUCER = Path(__file__).resolve().parent / "SampleProducer.java"
BATCH_PRODUCER = Path(__file__).resolve().parent / "batch_producer.py"
PER_TOPIC = 1000
CLUSTER = "bench"
SAMPLES_TOPIC = "bench.samples"
WARMUP_BATCHES = 2
HIST_STEP_S = 0.01
HIST_MAX_S = 600.0

# ---------------------------------------------------------------- synthetic samples


def sample_template() -> str:
    """The JSON of a real PartitionSample with placeholders ({HW}, {TIME}, ...) that SampleProducer fills in."""
    sentinel = PartitionSample(
        cluster="@CLUSTER@", collector_id="bench", cycle=911111111, sample_time_ms=922222222, topic="@TOPIC@",
        topic_id="@TOPICID@", partition=933333333, leader=944444444, leader_epoch=3,
        replicas=[944444444, 955555555, 966666666], isr=[977777777], elr=[], last_known_elr=[],
        high_watermark=988888888, last_stable_offset=988888888, log_start_offset=0,
        replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=leo) for b, leo in
                         ((944444444, 999999991), (955555555, 999999992), (966666666, 999999993))],
        epoch_lineage=None, min_insync_replicas=2, unclean_leader_election=False)
    text = to_json(sentinel).decode()
    for old, new in (('"@CLUSTER@"', '"{CLUSTER}"'), ('"@TOPIC@"', '"{TOPIC}"'), ('"@TOPICID@"', '"{TOPIC_ID}"'),
                     ("911111111", "{CYCLE}"), ("922222222", "{TIME}"), ("933333333", "{PARTITION}"),
                     ("944444444", "{R0}"), ("955555555", "{R1}"), ("966666666", "{R2}"),
                     ("[977777777]", "{ISR}"), ("988888888", "{HW}"), ("999999991", "{LEO0}"),
                     ("999999992", "{LEO1}"), ("999999993", "{LEO2}"),
                     ('"epoch_lineage":null', '"epoch_lineage":{LINEAGE}')):
        assert old in text, old
        text = text.replace(old, new)
    return text


def check_template(template: str) -> None:
    """The filled-in template is a valid PartitionSample (pydantic), with and without lineage / full ISR."""
    for isr, lineage in (("[1,2,3]", "null"), ("[1,2]", '[{"leader_epoch":3,"start_offset":0}]')):
        filled = template
        for token, value in (("CLUSTER", CLUSTER), ("TOPIC", "bench-000"), ("TOPIC_ID", "BENCHTOPIC000000000000"),
                             ("CYCLE", "1"), ("TIME", str(int(time.time() * 1000))), ("PARTITION", "7"),
                             ("R0", "1"), ("R1", "2"), ("R2", "3"), ("ISR", isr), ("HW", "100"), ("LEO0", "110"),
                             ("LEO1", "105"), ("LEO2", "100"), ("LINEAGE", lineage)):
            filled = filled.replace("{" + token + "}", value)
        parse_sample(filled)


@dataclass
class ProducerRun:
    proc: subprocess.Popen[bytes]
    out: Path

    def wait(self, timeout_s: float) -> tuple[int, float, list[tuple[float, int]]]:
        """(records sent, seconds, [(epoch s, sent so far)])"""
        self.proc.wait(timeout=timeout_s)
        lines = self.out.read_text().split("\n")
        done = [line.split() for line in lines if line.startswith("done ")]
        if self.proc.returncode != 0 or not done:
            raise RuntimeError(f"producer failed ({self.proc.returncode}): {self.out.read_text()[-2000:]}")
        progress = [(float(p[1]), int(p[2])) for p in (line.split() for line in lines if line.startswith("progress "))]
        progress.append((float(done[0][1]), int(done[0][2])))
        return int(done[0][2]), float(done[0][3]), progress

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()


def start_producer(work: Path, bootstrap: str, name: str, partitions: int, first_cycle: int, *, cycles: int = 0,
                   rate: float = 0, duration: float = 0, churn: int = 0, transport: str = "json") -> ProducerRun:
    """The workload's producer in its own process: JSON records from the Java producer, or ``partition_batch/v1``
    records from bench/batch_producer.py (acknowledged offsets and entries in ``offsets-NAME.txt``)."""
    out = work / f"producer-{name}.log"
    args: dict[str, Any] = {"bootstrap": bootstrap, "topic": SAMPLES_TOPIC, "cluster": CLUSTER,
                            "topics": max(1, partitions // PER_TOPIC), "per_topic": min(PER_TOPIC, partitions),
                            "first_cycle": first_cycle, "cycles": cycles, "rate": rate, "duration": duration,
                            "churn": churn}
    if transport == "batch":
        cmd = [sys.executable, str(BATCH_PRODUCER), f"offsets={work / f'offsets-{name}.txt'}"]
    else:
        template = work / "template.json"
        if not template.exists():
            template.write_text(sample_template())
        args["template"] = template
        cmd = [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-cp", f"{kafka_libs()}/*", str(PRODUCER)]
    with out.open("w") as log:
        proc = subprocess.Popen([*cmd, *(f"{k}={v}" for k, v in args.items())], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return ProducerRun(proc, out)


class SampleCounts:
    """How many samples a range of the samples topic's offsets holds: one per JSON record; for batch records, what
    the batch producer logged for each acknowledged record (``offsets-*.txt``)."""

    def __init__(self, work: Path, transport: str) -> None:
        self.work, self.transport = work, transport
        self.cumulative: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.read: tuple[tuple[str, int], ...] = ()

    def _load(self) -> None:
        """The producers' logs read again when they grew (the bench polls progress twice a second)."""
        paths = sorted(self.work.glob("offsets-*.txt"))
        sizes = tuple((path.name, path.stat().st_size) for path in paths)
        if sizes == self.read:
            return
        self.read = sizes
        lines = [line.split() for path in paths for line in path.read_text().splitlines() if line]
        by_partition: dict[int, list[tuple[int, int]]] = {}
        for kafka_partition, offset, entries in lines:
            by_partition.setdefault(int(kafka_partition), []).append((int(offset), int(entries)))
        self.cumulative = {}
        for number, pairs in by_partition.items():
            pairs.sort()
            offsets = np.array([o for o, _ in pairs], np.int64)
            self.cumulative[number] = (offsets, np.concatenate([[0], np.cumsum([n for _, n in pairs])]))

    def before(self, partition: int, offset: int) -> int:
        """Samples in the records of ``partition`` below ``offset``."""
        if self.transport != "batch":
            return offset
        offsets, sums = self.cumulative.get(partition, (np.zeros(0, np.int64), np.zeros(1, np.int64)))
        return int(sums[np.searchsorted(offsets, offset)])

    def at(self, offsets: Mapping[int, int]) -> int:
        """Samples in the records below ``offsets`` (by Kafka partition)."""
        self._load()
        return sum(self.before(p, o) for p, o in offsets.items())

    def annotate(self, progress: dict[str, Any]) -> dict[str, Any]:
        """The progress with ``numInputRows`` counted in samples (Spark's count of records kept as
        ``numInputRecords``)."""
        if self.transport != "batch" or not progress.get("numInputRows"):
            return {**progress, "numInputRecords": progress.get("numInputRows", 0)}
        self._load()
        samples = 0
        for source in progress.get("sources", []):
            ends = [json.loads(o) if isinstance(o, str) else o for o in (source.get("startOffset"),
                                                                       source.get("endOffset"))]
            start, end = ((o or {}).get(SAMPLES_TOPIC, {}) for o in ends)
            samples += sum(self.before(int(p), int(e)) - self.before(int(p), int(start.get(p, 0)))
                           for p, e in end.items())
        return {**progress, "numInputRecords": progress["numInputRows"], "numInputRows": samples}


# ---------------------------------------------------------------- measuring the job


class ProgressLog:
    """Every query progress (as dicts), by query name; a StreamingQueryListener feeds it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_name: dict[str, list[dict[str, Any]]] = {}

    def add(self, progress: dict[str, Any]) -> None:
        with self.lock:
            self.by_name.setdefault(progress.get("name") or "", []).append(progress)

    def get(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.by_name.get(name, []))


def end_offsets(progress: dict[str, Any]) -> dict[int, int]:
    """The samples topic's offsets a query has read up to at the end of this batch, by Kafka partition."""
    out: dict[int, int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        offsets = json.loads(end) if isinstance(end, str) else end
        out |= {int(p): int(v) for p, v in (offsets or {}).get(SAMPLES_TOPIC, {}).items()}
    return out


def caught_up(progress: dict[str, Any]) -> bool:
    """Whether a batch read all that the samples topic held when it was planned (its end offsets are the source's
    ``latestOffset``): the query had no backlog left after it. False where Spark reports no latest offsets."""
    sources = progress.get("sources", [])
    for source in sources:
        latest, end = ((json.loads(o) if isinstance(o, str) else o) for o in (source.get("latestOffset"),
                                                                             source.get("endOffset")))
        if not latest or not end or latest.get(SAMPLES_TOPIC) != end.get(SAMPLES_TOPIC):
            return False
    return bool(sources)


def consumed(progress: dict[str, Any]) -> int:
    """Records of the samples topic a query has read up to the end of this batch."""
    return sum(end_offsets(progress).values())


def topic_ends(bootstrap: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(SAMPLES_TOPIC, p) for p in consumer.partitions_for_topic(SAMPLES_TOPIC) or ()]
        return {tp.partition: int(end) for tp, end in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def topic_end(bootstrap: str) -> int:
    return sum(topic_ends(bootstrap).values())


def check_topic_records(bootstrap: str, count: int = 20) -> None:
    """A few records as the job will read them from Kafka validate as PartitionSample."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(SAMPLES_TOPIC, bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        seen = 0
        for record in consumer:
            if is_batch(record.value):  # every entry a valid PartitionSample, under the collector's key
                decoded = [parse_sample(json.dumps(entry)) for entry in decode_batch(record.value)]
                assert all(isinstance(d, PartitionSample) and record.key.startswith(f"{d.cluster}/#".encode())
                           for d in decoded) and decoded, record.key
            else:
                sample = parse_sample(record.value)
                assert isinstance(sample, PartitionSample) and record.key == \
                    f"{sample.cluster}/{sample.topic}/{sample.partition}".encode()
            seen += 1
            if seen >= count:
                return
        raise RuntimeError(f"only {seen} records readable from {SAMPLES_TOPIC}")
    finally:
        consumer.close()


@dataclass
class Latency:
    """Sample-to-metric latency histograms (10 ms bins) and per-batch figures, recorded in the driver."""

    per_sample: np.ndarray = field(default_factory=lambda: np.zeros(int(HIST_MAX_S / HIST_STEP_S) + 1))
    batches: list[dict[str, Any]] = field(default_factory=list)
    """Figures per batch, floats; ``per_partition`` a histogram (an array) while recording, else None."""
    recording: bool = False
    previous_newest_s: float | None = None
    batch_id: int = -1

    def reset(self) -> None:
        """A new phase: empty histograms, no previous batch."""
        self.per_sample[:] = 0
        self.previous_newest_s = None

    def add(self, target: np.ndarray, values: np.ndarray) -> None:
        target += self.histogram(values)

    @staticmethod
    def histogram(values: np.ndarray) -> np.ndarray:
        bins = int(HIST_MAX_S / HIST_STEP_S) + 1
        return np.bincount(np.clip((values / HIST_STEP_S).astype(int), 0, bins - 1), minlength=bins)

    @staticmethod
    def percentile(hist: np.ndarray, q: float) -> float:
        total = hist.sum()
        if total == 0:
            return float("nan")
        return float(np.searchsorted(np.cumsum(hist), q / 100 * total) * HIST_STEP_S)


def bench_classes(latency: Latency, timings: list[dict[str, float]], profile_dir: Path, cprofile: bool) -> None:
    """Instrument the job without changing it: subclasses of its exporter, batch handler and processor are put in
    place of the originals in streaming.job (the processor subclass travels to the Python workers by value)."""
    import streaming.batch as batch_module
    import streaming.job as job_module
    from streaming.exporter import JobExporter
    from streaming.processor import ReplicationProcessor
    from streaming.pyspark_hooks import arrow_output

    class BenchExporter(JobExporter):
        def update_partitions(self, rows: pd.DataFrame) -> None:
            super().update_partitions(rows)
            now = time.time()
            if rows.empty:
                return
            times = rows["sample_time_ms"].to_numpy(dtype=np.float64) / 1000
            newest = float(times.max())
            lat = now - times
            latency.batches.append({"t": now, "batch_id": float(latency.batch_id), "rows": float(len(rows)),
                                    "newest": newest, "previous_newest": latency.previous_newest_s or newest,
                                    "newest_delay": now - newest, "p50": float(np.percentile(lat, 50)),
                                    "p95": float(np.percentile(lat, 95)), "max": float(lat.max()),
                                    "recording": float(latency.recording),
                                    "per_partition": Latency.histogram(lat) if latency.recording else None})
            latency.previous_newest_s = newest

    handlers: list[Any] = []

    class TimedHandler(job_module.StateBatchHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            handlers.append(self)
            self._phase: dict[str, float] = {}
            self.exporter.update_partitions = self._timed("exporter", self.exporter.update_partitions)  # type: ignore[method-assign]

        def _timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._phase[name] = self._phase.get(name, 0.0) + time.perf_counter() - started
            return wrapper

        def __call__(self, batch: Any, batch_id: int) -> None:
            self._phase = {}
            latency.batch_id = batch_id
            started = time.perf_counter()
            super().__call__(batch, batch_id)
            total = time.perf_counter() - started
            timings.append({"batch_id": float(batch_id), "t": time.time(), "handler": total,
                            "spark_and_collect": total - self._phase.get("writes", 0.0), **self._phase})

    class TimedProcessor(ReplicationProcessor):
        out_dir = str(profile_dir)
        use_cprofile = cprofile

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            import cProfile

            if self.use_cprofile and not hasattr(TimedProcessor, "_prof"):
                TimedProcessor._prof = cProfile.Profile()  # type: ignore[attr-defined]
                TimedProcessor._calls = 0  # type: ignore[attr-defined]
            prof = getattr(TimedProcessor, "_prof", None)
            if prof is not None:
                prof.enable()
            spent: dict[str, float] = {}
            counts: dict[str, int] = {}
            last = time.perf_counter()
            cpu_started = time.process_time()

            def step(name: str, count: int) -> None:  # each step starts where the one before ended
                nonlocal last
                now = time.perf_counter()
                spent[name], counts[name], last = now - last, count, now

            output = self.process_rows(rows, timerValues.getCurrentProcessingTimeInMs(), int(key[0]), step)
            spent["cpu"] = time.process_time() - cpu_started
            if prof is not None:
                prof.disable()
                TimedProcessor._calls += 1  # type: ignore[attr-defined]
                if TimedProcessor._calls % 8 == 0:  # type: ignore[attr-defined]
                    prof.dump_stats(f"{self.out_dir}/prof-{os.getpid()}.pstats")
            with open(f"{self.out_dir}/worker-{os.getpid()}.jsonl", "a") as f:
                # partitions sampled (the processor's outputs): an input row is a batch's share of a bucket
                f.write(json.dumps({"t": time.time(), "rows_in": counts["process"], "rows_out": counts["frame"],
                                    "partitions": counts["save"], **spent}) + "\n")
            yield arrow_output(output)

    job_module.StateBatchHandler = TimedHandler  # type: ignore[misc]
    # the micro-batch's writes (events, their history, the snapshots) and the exporter's table update run at once:
    # their wall time as one phase, the outermost call's (the events' own writes are a call within it)
    plain_together = batch_module.together
    depth = [0]
    depth_lock = threading.Lock()

    def timed_together(calls: Any) -> list[Any]:
        with depth_lock:
            outer = depth[0] == 0
            depth[0] += 1
        started = time.perf_counter()
        try:
            return plain_together(calls)
        finally:
            with depth_lock:
                depth[0] -= 1
            handler = handlers[-1] if handlers else None
            if outer and handler is not None:
                handler._phase["writes"] = handler._phase.get("writes", 0.0) + time.perf_counter() - started

    batch_module.together = timed_together
    job_module.ReplicationProcessor = TimedProcessor  # type: ignore[misc]
    job_module.JobExporter = BenchExporter  # type: ignore[misc]
    globals()["BenchExporter"] = BenchExporter


# ---------------------------------------------------------------- memory


def stateful_floor() -> Any:
    """A state processor that detects nothing: each bucket reads its input rows, loads its state and saves a count
    in it, as :class:`streaming.processor.ReplicationProcessor` loads and saves its table, and outputs one row. The
    query around it is the job's without detection: what any job that keeps its state in Spark pays."""
    from pyspark.sql.streaming import StatefulProcessor

    from streaming.processor import STATE_SCHEMA

    class StatefulFloor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.state = handle.getListState("partitions", STATE_SCHEMA)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            count = sum(len(frame) for frame in rows)
            before = next(iter(self.state.get()), None)
            seen = count + (0 if before is None else int(bytes(before[0])))
            self.state.put([(str(seen).encode(),)])
            yield pd.DataFrame({"bucket": [int(key[0])], "rows": [count]})

        def close(self) -> None:
            pass

    return StatefulFloor()


def rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def python_workers(jvm_pid: int) -> list[int]:
    """Processes below the driver JVM running pyspark (daemon and workers)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    out = []
    for pid in parent:
        p, hops = parent.get(pid), 0
        while p and p != jvm_pid and hops < 10:
            p, hops = parent.get(p), hops + 1
        if p == jvm_pid:
            with contextlib.suppress(OSError):
                if b"pyspark" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(pid)
    return out


def driver_jvm_pid(spark: Any) -> int:
    """The process id of the session's JVM (the driver's; in local mode the executors' too)."""
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def memory(spark: Any) -> dict[str, float]:
    jvm = spark._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    for _ in range(2):
        jvm.java.lang.System.gc()
        time.sleep(0.5)
    gc.collect()
    jvm_pid = driver_jvm_pid(spark)
    workers = python_workers(jvm_pid)
    return {"heap_used_mb": (runtime.totalMemory() - runtime.freeMemory()) / 2**20,
            "heap_max_mb": runtime.maxMemory() / 2**20, "jvm_rss_mb": rss_mb(jvm_pid),
            "driver_python_rss_mb": rss_mb(os.getpid()), "python_workers": float(len(workers)),
            "python_workers_rss_mb": sum(rss_mb(p) for p in workers)}


def heap_histogram(jvm_pid: int, top: int = 8) -> list[tuple[str, int, float]]:
    """The live heap (``jcmd GC.class_histogram``, after a full collection): its total, then its largest classes,
    each (class, instances, MiB), largest first; empty, with a line printed, where the JDK has no jcmd."""
    jcmd = Path(java_executable()).resolve().parent / "jcmd"
    if not jcmd.exists():
        print(f"no heap histogram: {jcmd} is missing (a JRE without the JDK's tools)", flush=True)
        return []
    out = subprocess.run([str(jcmd), str(jvm_pid), "GC.class_histogram"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    rows = []
    total = ("(all classes)", 0, 0.0)
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].rstrip(":").isdigit():  # " 1:  123  4567  java.lang.Foo (java.base)"
            rows.append((parts[3], int(parts[1]), int(parts[2]) / 2**20))
        elif len(parts) == 3 and parts[0] == "Total":
            total = ("(all classes)", int(parts[1]), int(parts[2]) / 2**20)
    return [total, *sorted(rows, key=lambda r: -r[2])[:top]] if rows else []


# ---------------------------------------------------------------- figures


def records_for(samples: int, partitions: int, transport: str) -> int:
    """Kafka records that hold about ``samples`` samples (maxOffsetsPerTrigger counts records): one sample each
    as JSON; as batches, a cycle of ``partitions`` takes the collector's records of at most
    ``BATCH_MAX_ENTRIES`` in each of ``BATCH_GROUPS`` groups."""
    if transport != "batch":
        return samples
    per_group = -(-partitions // BATCH_GROUPS)
    per_record = partitions / (BATCH_GROUPS * -(-per_group // BATCH_MAX_ENTRIES))
    return max(1, round(samples / per_record))


def first_cycle_batches(partitions: int, batch: int) -> int:
    """The backlog batches a query needs to read every partition once: the job creates each partition's state in
    them, a one-off of a fresh job, so they are not its sustained rate."""
    return -(-partitions // batch)


def rows_per_s(batches: list[dict[str, Any]]) -> float:
    """Rows / batch duration summed over ``batches`` (query progress reports)."""
    seconds = sum(p["batchDuration"] for p in batches) / 1000
    return sum(p["numInputRows"] for p in batches) / seconds if seconds else float("nan")


def capacity(progress: list[dict[str, Any]], skip: int = WARMUP_BATCHES
             ) -> tuple[float, int, list[tuple[float, float]]]:
    """(rows/s over the steady batches: those after the first ``skip``, number of those batches,
    [(epoch s, rows/s)] of every batch)."""
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    series = [(pd.Timestamp(p["timestamp"]).timestamp() + p["batchDuration"] / 1000,
               p["numInputRows"] / max(p["batchDuration"], 1) * 1000) for p in batches]
    steady = steady_batches(progress, skip)
    return rows_per_s(steady), len(steady), series


def steady_batches(progress: list[dict[str, Any]], skip: int = WARMUP_BATCHES) -> list[dict[str, Any]]:
    """The progress of the steady batches: those with rows after the first ``skip``, less a last partial one."""
    steady = [p for p in progress if p.get("numInputRows", 0) > 0][skip:]
    if steady and len(steady) > 1:  # the last one is usually a partial batch
        steady = [p for p in steady if p["numInputRows"] >= 0.9 * max(q["numInputRows"] for q in steady)]
    return steady


def mean_batch_s(progress: list[dict[str, Any]], skip: int = WARMUP_BATCHES) -> float:
    """The steady batches' (:func:`steady_batches`) mean duration, seconds; NaN without any."""
    steady = steady_batches(progress, skip)
    return float(np.mean([p["batchDuration"] for p in steady])) / 1000 if steady else float("nan")


def steady_window(progress: list[dict[str, Any]], skip: int = WARMUP_BATCHES) -> tuple[float, float]:
    """When the first steady batch (:func:`steady_batches`) began and the last one ended, epoch seconds; an empty
    window if there is none."""
    steady = steady_batches(progress, skip)
    if not steady:
        return float("inf"), float("-inf")
    return (pd.Timestamp(steady[0]["timestamp"]).timestamp(),
            pd.Timestamp(steady[-1]["timestamp"]).timestamp() + steady[-1]["batchDuration"] / 1000)


def profile_summary(profile_dir: Path, since: float, until: float) -> dict[str, float]:
    """The Python workers' bucket calls that ended between ``since`` and ``until``: their count, partitions and
    seconds per step (wall), and their CPU seconds (``cpu``: the calls' own process time)."""
    rows = []
    for path in profile_dir.glob("worker-*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if since <= r["t"] <= until:
                rows.append(r)
    if not rows:
        return {}
    frame = pd.DataFrame(rows)
    sums = frame[["input", "load", "process", "save", "frame", "cpu"]].sum()
    return {"calls": float(len(frame)), "rows_in": float(frame["rows_in"].sum()),
            **{k: float(v) for k, v in sums.items()}, "partitions_per_bucket": float(frame["partitions"].median())}


def cprofile_top(profile_dir: Path, limit: int = 15) -> str:
    import io
    import pstats

    files = [str(p) for p in profile_dir.glob("prof-*.pstats")]
    if not files:
        return ""
    out = io.StringIO()
    stats = pstats.Stats(*files, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def stage_times(spark: Any, since: float, until: float) -> dict[str, dict[str, float]]:
    """Spark's completed stages submitted between ``since`` and ``until`` (epoch s), by the first line of their
    name: count, tasks, the executors' run and CPU seconds and the stages' wall seconds (submission to completion)
    summed (the UI must be on: --stages)."""
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete", timeout=30) as r:
        stages = json.load(r)
    out: dict[str, dict[str, float]] = {}
    for stage in stages:
        submitted = pd.Timestamp(stage.get("submissionTime", "1970-01-01T00:00:00.000GMT").replace("GMT", "Z"))
        if not since <= submitted.timestamp() <= until:
            continue
        name = stage["name"].split("\n")[0][:60]
        agg = out.setdefault(name, {"stages": 0, "tasks": 0, "run_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0})
        agg["stages"] += 1
        completed = pd.Timestamp(stage.get("completionTime", stage["submissionTime"]).replace("GMT", "Z"))
        agg["wall_s"] += (completed - submitted).total_seconds()
        agg["tasks"] += stage["numTasks"]
        agg["run_s"] += stage["executorRunTime"] / 1000
        agg["cpu_s"] += stage["executorCpuTime"] / 1e9
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = results["t0"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True)
    phases = [(label, results[key]) for label, key in (("live", "live"), ("kept rate", "kept")) if key in results]
    curves = [(f"baseline (stateless), backlog, {when}", baseline["series"], style)
              for when, baseline, style in zip(("before the job", "after the job"), results["baselines"],
                                               ("o-", "D-"), strict=False)]
    curves += [("job, backlog", results["job_series"], "s-")]
    if "floor" in results:
        curves += [("stateful floor (the job's query without detection), backlog", results["floor"]["series"], "x-")]
    curves += [(f"job, {label} phase", phase["series"], style)
               for (label, phase), style in zip(phases, ("^-", "v-"), strict=False)]
    for name, series, style in curves:
        if series:
            xs, ys = zip(*series, strict=True)
            ax1.plot([x - t0 for x in xs], [y / 1000 for y in ys], style, ms=3, label=name)
    for label, phase in phases:
        if phase["producer_series"]:
            xs, ys = zip(*phase["producer_series"], strict=True)
            ax1.plot([x - t0 for x in xs], [y / 1000 for y in ys], "-", color="grey", alpha=0.7,
                     label=f"producer, {label} phase (samples/s produced)")
    ax1.axhline(100, color="red", ls=":", label="target 100k/s")
    ax1.set_ylabel("samples/s (thousands)\nper batch: rows / duration")
    ax1.set_yscale("log")
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(f"replmon streaming job: {results['partitions']:,} partitions x RF 3, trigger "
                  f"{results['trigger']:g} s, {os.cpu_count()} cores")
    figures = (("newest_delay", "o-", "C0", "newest sample of the batch (JobStats)"),
               ("p95", "s-", "C1", "p95 over the partitions of the batch"),
               ("max", "^-", "C2", "max over the partitions of the batch"))
    for index, (_, phase) in enumerate(phases):  # a line per phase: the phases are separate jobs
        batches = phase["latency_batches"]
        offsets = [b["t"] - t0 for b in batches]
        for key, style, color, label in figures:
            ax2.plot(offsets, [b[key] for b in batches], style, ms=3, color=color,
                     label=label if index == 0 else None)
    for index, (_, phase) in enumerate(phases):
        for ax in (ax1, ax2):
            ax.axvline(phase["measured_from"] - t0, color="grey", ls="--", lw=0.8,
                       label="a phase's warm-up ends" if index == 0 and ax is ax2 else None)
    ax2.axhline(2 * results["trigger"], color="red", ls=":", label="target p95: 2 trigger intervals")
    ax2.set_ylabel("sample-to-metric latency (s)")
    ax2.set_yscale("log")
    ax2.set_xlabel("seconds since the baseline started")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def write_doc(command: str, table: list[tuple[str, str, str, str]], notes: list[str]) -> None:
    lines = ["| figure | measured | target | met |", "|---|---:|---:|:---:|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in table]
    section = "\n".join([
        "## Streaming job", "",
        "The Spark job (`streaming/job.py`: Kafka source, processor_input, bucketed transformWithStateInPandas, "
        "foreachBatch to events/Prometheus/history and the quarantine, one query) against a stateless baseline "
        "(same source and processor_input, the processor's input rows to Spark's noop sink) run before and after the "
        "job in the same run, on a one-broker local Kafka; synthetic samples from a separate producer process "
        "(`partition_batch/v1` records from `bench/batch_producer.py`, the collector's format; `--transport json`: "
        "a JSON record per sample from `bench/SampleProducer.java`), see the docstring of `bench/bench_stream.py` "
        "for the phases.", "",
        "```", command, "```", "", *lines, "", *(line for note in notes for line in (note, "")),
        "![streaming benchmark](bench_stream.png)", ""])
    write_section(DOC, "Streaming job", section)


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from streaming.buckets import default_buckets, new_bucket_ids, state_tasks
    from streaming.job import RunningJob, start_job
    from streaming.parse import processor_input
    from streaming.pyspark_hooks import JsonProgressListener
    from streaming.session import get_session
    from streaming.source import kafka_source

    results: dict[str, Any] = {"partitions": args.partitions, "trigger": args.trigger, "load_start": loadavg()}
    check_template(sample_template())
    print(f"load average at start: {results['load_start']}", flush=True)
    cluster = LocalCluster.up(work / "cluster", brokers=1, die_with_parent=True, remember=False)
    producers: list[ProducerRun] = []
    jobs: list[RunningJob] = []
    spark = None
    try:
        bootstrap = cluster.bootstrap_servers

        def config_for(phase: str, starting: str, max_samples: int, stale_after_s: float = 0,
                       partitions: int = args.partitions) -> ReplmonConfig:
            """The job's configuration for a phase; ``max_samples`` per micro-batch, as Kafka records."""
            max_offsets = records_for(max_samples, partitions, args.transport)
            return ReplmonConfig(
                transport=TransportConfig(bootstrap_servers=bootstrap.split(","), samples_topic=SAMPLES_TOPIC,
                                          events_topic="bench.events", quarantine_topic="bench.quarantine",
                                          topic_partitions=6),
                stream=StreamConfig(trigger_interval_s=args.trigger, checkpoint_dir=work / phase / "checkpoint",
                                    history_dir=work / phase / "history", starting_offsets=starting,
                                    max_offsets_per_trigger=max_offsets, metrics_port=0,
                                    state_buckets=args.state_buckets, series_budget=args.series_budget,
                                    stale_after_s=stale_after_s or StreamConfig().stale_after_s,
                                    spark_conf={"spark.ui.showConsoleProgress": "false",
                                                **({"spark.ui.enabled": "true", "spark.ui.port": "0"}
                                                   if args.stages else {}), **dict(args.spark_conf)}))

        config = config_for("baseline", "earliest", args.backlog_batch)
        ensure_topic(config, SAMPLES_TOPIC)

        # 1. backlog
        started = time.monotonic()
        sent, seconds, backlog = fill_backlog(work, bootstrap, args.partitions, args.backlog_cycles, args.churn,
                                              producers, args.transport)
        counts = SampleCounts(work, args.transport)
        results["backlog"] = counts.at(topic_ends(bootstrap))
        print(f"backlog: {sent:,} samples produced in {seconds:.1f}s ({sent / seconds:,.0f}/s); topic holds "
              f"{results['backlog']:,} in {backlog:,} records", flush=True)
        if results["backlog"] != sent:
            raise RuntimeError(f"topic holds {results['backlog']} samples, {sent} sent")

        spark = get_session(config.stream, app_name="replmon-bench")
        print(f"spark session up {time.monotonic() - started:.0f}s after the start", flush=True)
        # the job's bucket count: the one set, or what a new checkpoint of the job gets (streaming.buckets)
        results["state_buckets"] = args.state_buckets or default_buckets(state_tasks(spark))
        log = ProgressLog()

        class Listener(JsonProgressListener):  # the job's own way: one Py4J call per event, in every phase
            def onQueryProgress(self, event: Any) -> None:
                log.add(json.loads(event.progress.json))

        spark.streams.addListener(Listener())

        def of_run(query: Any) -> list[dict[str, Any]]:
            run_id = str(query.runId)
            return [counts.annotate(p) for p in log.get(query.name) if p.get("runId") == run_id]

        cycle_batches = results["first_cycle_batches"] = first_cycle_batches(args.partitions, args.backlog_batch)
        skip = results["skipped_batches"] = max(WARMUP_BATCHES, first_cycle_batches(
            args.partitions * max(1, args.warmup_cycles), args.backlog_batch))

        def read_until(query: Any, target: int, timeout_s: float, alive: Callable[[], None],
                       warmup_s: float = 0) -> bool:
            """Wait until ``query`` has read ``target`` records, at most ``timeout_s`` (after its first
            ``skip`` batches, the first cycle, given at most ``warmup_s``). Prints each batch."""
            started = time.monotonic()
            deadline = started + timeout_s + warmup_s
            shown = 0
            while time.monotonic() < deadline:
                alive()
                got = [p for p in of_run(query) if p.get("numInputRows", 0) > 0]
                for p in got[shown:]:
                    print(f"  {query.name} batch {p['batchId']}: {p['numInputRows']:,} rows in "
                          f"{p['batchDuration'] / 1000:.1f} s", flush=True)
                shown = len(got)
                if warmup_s and len(got) >= skip:
                    deadline = min(deadline, time.monotonic() + timeout_s)
                    warmup_s = 0
                    print(f"  {query.name}: warmed up after {time.monotonic() - started:.0f} s", flush=True)
                all_ = of_run(query)
                if all_ and consumed(all_[-1]) >= target:
                    return True
                time.sleep(0.5)
            return False

        def run_to_noop(frame: Any, run: str, what: str) -> dict[str, Any]:
            """``frame`` (a query over the backlog from its start) to Spark's noop sink, with a fresh checkpoint."""
            query = (frame.writeStream.queryName(f"bench-{run}").format("noop")
                     .option("checkpointLocation", str(work / run / "checkpoint"))
                     .trigger(processingTime=f"{args.trigger} seconds").start())

            def query_alive() -> None:
                if not query.isActive:
                    raise RuntimeError(f"{what} query died: {query.exception()}")

            read_until(query, backlog, args.phase_timeout, query_alive, args.warmup_timeout)
            query.stop()
            progress = of_run(query)
            out: dict[str, Any] = {"read": counts.at(end_offsets(progress[-1])) if progress else 0,
                                   "first_s": progress[0]["batchDuration"] / 1000 if progress else float("nan")}
            out["rate"], out["batches"], out["series"] = capacity(progress, skip)
            if args.stages:
                out["steady_stages"] = stage_times(spark, *steady_window(progress, skip))
                out["batch_s"] = mean_batch_s(progress, skip)
            print(f"{what}: {out['rate']:,.0f} samples/s over {out['batches']} steady batches "
                  f"({out['read']:,} read)", flush=True)
            return out

        def run_baseline(run: str) -> dict[str, Any]:
            """The stateless baseline on the backlog."""
            return run_to_noop(processor_input(kafka_source(spark, config), range(results["state_buckets"])), run,
                               f"baseline ({run})")

        def run_floor() -> dict[str, Any]:
            """The job's query without detection (:func:`stateful_floor`) on the backlog."""
            ids = new_bucket_ids(results["state_buckets"], state_tasks(spark))  # balanced, as the job's
            floor = (processor_input(kafka_source(spark, config), ids)
                     .groupBy("bucket")
                     .transformWithStateInPandas(statefulProcessor=stateful_floor(),
                                                 outputStructType="bucket int, rows long", outputMode="Append",
                                                 timeMode="None"))
            return run_to_noop(floor, "floor", "stateful floor")

        # 2. baseline (and 3b. again after the job: the ratio is against their mean, so that a machine that
        # slows down or speeds up during the run does not pass for the job's doing)
        results["t0"] = time.time()
        results["baselines"] = [run_baseline("baseline")]

        latency = Latency()
        timings: list[dict[str, float]] = []
        profile_dir = work / "profile"
        profile_dir.mkdir()
        bench_classes(latency, timings, profile_dir, args.cprofile)

        def new_job(phase: str, starting: str, max_samples: int, stale_after_s: float = 0,
                    partitions: int = args.partitions) -> RunningJob:
            cfg = config_for(phase, starting, max_samples, stale_after_s, partitions)
            job = start_job(spark, cfg, exporter=globals()["BenchExporter"](cfg.stream.series_budget))
            jobs.append(job)
            return job

        def alive_of(job: RunningJob) -> Callable[[], None]:
            def alive() -> None:
                for q in job.queries:
                    if not q.isActive:
                        raise RuntimeError(f"query {q.name} died: {q.exception()}")
            return alive

        # 3. the job on the backlog (capacity)
        job = new_job("job", "earliest", args.backlog_batch)
        state_query = job.queries[0]
        job_started = time.time()
        read_until(state_query, backlog, args.phase_timeout, alive_of(job), args.warmup_timeout)
        backlog_done = time.time()
        job.stop()
        progress = of_run(state_query)
        results["job_read"] = counts.at(end_offsets(progress[-1])) if progress else 0
        results["job_rate"], results["job_batches"], results["job_series"] = capacity(progress, skip)
        # the first cycle after the first batch (warm-up)
        results["job_first_cycle_rate"] = rows_per_s([p for p in progress if p["numInputRows"]][1:cycle_batches])
        results["job_first_s"] = next((p["batchDuration"] / 1000 for p in progress if p["numInputRows"]),
                                      float("nan"))
        steady = steady_window(progress, skip)
        results["backlog_profile"] = profile_summary(profile_dir, *steady)
        if args.stages:
            results["stages"] = stage_times(spark, job_started, backlog_done)
            results["steady_stages"] = stage_times(spark, *steady)
            results["job_batch_s"] = mean_batch_s(progress, skip)
            print("stages of the job on the backlog (Spark's REST API): " + json.dumps(results["stages"]), flush=True)
        results["backlog_timings"] = [t for t in timings if t["t"] <= backlog_done][skip:]
        print(f"job: {results['job_rate']:,.0f} samples/s over {results['job_batches']} steady batches "
              f"({results['job_read']:,} read)", flush=True)
        if args.stateful_floor:
            results["floor"] = run_floor()
        results["baselines"].append(run_baseline("baseline-after"))
        results["baseline_rate"] = float(np.mean([b["rate"] for b in results["baselines"]]))

        def start_from_latest(phase: str, max_samples: int, stale_after_s: float = 0,
                              partitions: int = args.partitions) -> RunningJob:
            """A fresh job reading from the end of the topic: wait for its first (empty) batch."""
            job = new_job(phase, "latest", max_samples, stale_after_s, partitions)
            deadline = time.monotonic() + 120
            while not of_run(job.queries[0]) and time.monotonic() < deadline:
                alive_of(job)()
                time.sleep(0.5)
            return job

        def live_phase(phase: str, rate: float, duration: float, first_cycle: int) -> dict[str, Any]:
            """A fresh job (startingOffsets latest) while the producer paces ``rate`` samples/s for the time of
            ``--warmup-cycles`` cycles, then ``duration`` s: the processed rate, how far behind it ended and the
            sample-to-metric latency, over the batches after those that read the first ``--warmup-cycles`` cycles
            (as the capacity's: the fresh job creates every partition's state and learns each one's first lineage
            in them)."""
            # a partition is sampled once per cycle (partitions / rate s): the job's stale_after_s covers 3 cycles,
            # as an operator sampling that slowly would set it (else every partition goes STALE between samples)
            cycle_s = args.partitions / rate
            warmup_cycles_s = args.warmup_cycles * cycle_s
            stale_after_s = max(StreamConfig().stale_after_s, 3 * cycle_s)
            out: dict[str, Any] = {"rate": rate, "duration": duration, "cycle_s": cycle_s,
                                   "stale_after_s": stale_after_s}
            # the job's bound is the backlog's (one max_offsets_per_trigger for all its phases), at least a
            # trigger's worth of the offered rate
            job = start_from_latest(phase, max(args.backlog_batch, int(rate * args.trigger)), stale_after_s)
            state_query = job.queries[0]
            live_start = time.time()
            latency.reset()
            latency.recording = True
            run_ = start_producer(work, bootstrap, phase, args.partitions, first_cycle, rate=rate,
                                  duration=warmup_cycles_s + duration, churn=args.churn, transport=args.transport)
            producers.append(run_)
            sent, seconds, series = run_.wait(timeout_s=warmup_cycles_s + duration + 120)
            out["sent"], out["seconds"] = sent, seconds
            out["cycles"] = int(seconds * rate / args.partitions) + 2
            out["producer_series"] = [(t, (n - n0) / (t - t0_)) for (t0_, n0), (t, n) in itertools.pairwise(series)
                                      if t > t0_]
            live_ends = topic_ends(bootstrap)
            live_end_offset = sum(live_ends.values())
            produced_until = time.time()
            read_until(state_query, live_end_offset, args.drain, alive_of(job))
            latency.recording = False
            drained_at = time.time()
            job.stop()
            live = [p for p in of_run(state_query) if p.get("numInputRows", 0) > 0]
            input_rows = {int(p["batchId"]): int(p["numInputRows"]) for p in live}
            # the warm-up: the batches that read the first --warmup-cycles cycles (however long they took)
            read_before = np.cumsum([0, *(p["numInputRows"] for p in live)])[:-1]
            measured_ids = {int(p["batchId"]) for p, before in zip(live, read_before, strict=True)
                            if before >= args.warmup_cycles * args.partitions}
            measured_from = out["measured_from"] = next(
                (pd.Timestamp(p["timestamp"]).timestamp() for p in live if int(p["batchId"]) in measured_ids),
                produced_until)
            out["warmup_s"] = measured_from - live_start
            # caught up: the batches after the first measured one that read all the topic held when it was
            # planned (a fresh job's warm-up leaves a backlog it drains at its capacity first)
            first_caught = next((p for p in live if int(p["batchId"]) in measured_ids and caught_up(p)), None)
            caught_ids = set() if first_caught is None else {
                i for i in measured_ids if i > int(first_caught["batchId"])}
            out["caught_up_s"] = float("nan") if first_caught is None else (
                pd.Timestamp(first_caught["timestamp"]).timestamp() + first_caught["batchDuration"] / 1000
                - live_start)
            batches = [b | {"measured": int(b["batch_id"]) in measured_ids} for b in latency.batches
                       if b["recording"] and b["t"] >= live_start]
            per_partition = np.zeros_like(latency.per_sample)
            with_warmup = np.zeros_like(latency.per_sample)
            once_caught_up = np.zeros_like(latency.per_sample)
            for b in batches:
                if input_rows.get(int(b["batch_id"])):
                    # samples are stamped when built, at a constant rate: those of this batch are spread evenly
                    # between the newest sample of the previous batch and the newest of this one
                    spread = np.linspace(b["previous_newest"], b["newest"], input_rows[int(b["batch_id"])])
                    latency.add(with_warmup, b["t"] - spread)
                    if b["measured"]:
                        latency.add(latency.per_sample, b["t"] - spread)
                    if int(b["batch_id"]) in caught_ids:
                        latency.add(once_caught_up, b["t"] - spread)
                if b["measured"] and b["per_partition"] is not None:
                    per_partition += b["per_partition"]
                b.pop("per_partition")
            out["lag_at_end"] = counts.at(live_ends) - (counts.at(end_offsets(of_run(state_query)[-1]))
                                                        if of_run(state_query) else 0)
            steady = [p for p in live if int(p["batchId"]) in measured_ids
                      and pd.Timestamp(p["timestamp"]).timestamp() <= produced_until]
            span = (pd.Timestamp(steady[-1]["timestamp"]).timestamp() + steady[-1]["batchDuration"] / 1000
                    - pd.Timestamp(steady[0]["timestamp"]).timestamp()) if steady else 0
            out["processed_rate"] = sum(p["numInputRows"] for p in steady) / span if span else float("nan")
            out["batch_s"] = float(np.median([p["batchDuration"] / 1000 for p in steady])) if steady \
                else float("nan")
            out["series"] = capacity(live)[2]
            out["duration_ms"] = pd.DataFrame([p.get("durationMs", {}) for p in steady]).mean().to_dict() \
                if steady else {}
            out["drain_s"] = drained_at - produced_until
            out["window_s"] = drained_at - live_start
            out["profile"] = profile_summary(profile_dir, measured_from, produced_until)
            out["timings"] = [t for t in timings if measured_from <= t["t"] <= produced_until]
            delays = [b["newest_delay"] for b in batches if b["measured"]]
            out["latency_batch_p95"] = float(np.percentile(delays, 95)) if delays else float("nan")
            out["latency_partition_p95"] = Latency.percentile(per_partition, 95)
            out["latency_sample_p50"] = Latency.percentile(latency.per_sample, 50)
            out["latency_sample_p95"] = Latency.percentile(latency.per_sample, 95)
            out["latency_sample_p95_with_warmup"] = Latency.percentile(with_warmup, 95)
            out["latency_sample_p95_caught_up"] = Latency.percentile(once_caught_up, 95)
            out["latency_batches"] = batches
            out["events"] = job.stats.events
            print(f"{phase}: produced {sent:,} in {seconds:.0f}s ({sent / seconds:,.0f}/s), processed "
                  f"{out['processed_rate']:,.0f}/s steady, {out['lag_at_end']:,} behind at the end, p95 latency "
                  f"per sample {out['latency_sample_p95']:.2f}s after a {out['warmup_s']:.0f}s warm-up "
                  f"({out['latency_sample_p95_with_warmup']:.2f}s with it; "
                  f"{out['latency_sample_p95_caught_up']:.2f}s once caught up, {out['caught_up_s']:.0f}s in)",
                  flush=True)
            print(f"{phase}: batches (s since the phase began: rows, newest sample's latency, p95 over the "
                  "partitions): " + ", ".join(f"{b['t'] - live_start:.0f}: {b['rows']:,.0f}, {b['newest_delay']:.1f}"
                                              f", {b['p95']:.1f}" for b in batches), flush=True)
            return out

        # 4. live: the target rate offered to a job that starts with it
        first_cycle = args.backlog_cycles
        results["live"] = live_phase("live", args.rate, args.duration, first_cycle)
        first_cycle += results["live"]["cycles"]
        # 4b. kept: a rate this job keeps up with, for the latency that batching alone gives
        kept_rate = args.kept_rate or round(args.kept_fraction * results["job_rate"], -2)
        if kept_rate > 0 and args.kept_duration > 0:
            results["kept"] = live_phase("kept", kept_rate, args.kept_duration, first_cycle)
            first_cycle += results["kept"]["cycles"]

        # 5. memory with --heap-partitions tracked, by a fresh job
        job = start_from_latest("memory", args.memory_batch or args.backlog_batch, partitions=args.heap_partitions)
        state_query = job.queries[0]
        run_ = start_producer(work, bootstrap, "memory", args.heap_partitions, first_cycle, cycles=1,
                              churn=args.churn, transport=args.transport)
        producers.append(run_)
        run_.wait(timeout_s=600)
        end = topic_end(bootstrap)
        results["memory_complete"] = read_until(state_query, end, args.memory_timeout, alive_of(job))
        time.sleep(args.trigger * 2)
        last = of_run(state_query)[-1]
        results["state_rows"] = sum(op.get("numRowsTotal", 0) for op in last.get("stateOperators", []))
        results["state_memory_mb"] = sum(op.get("memoryUsedBytes", 0) for op in last.get("stateOperators", [])) / 2**20
        results["tracked"] = job.exporter.tracked()
        results["memory"] = memory(spark)
        results["heap_histogram"] = heap_histogram(driver_jvm_pid(spark))
        quarantined: Mapping[Any, float] = job.exporter._counters.get("replmon_quarantined_samples_total", {})
        results["quarantined"] = int(sum(quarantined.values()))
        results["cprofile"] = cprofile_top(profile_dir) if args.cprofile else ""
        print(f"memory with {results['tracked']:,} partitions tracked: {results['memory']}; the live heap's "
              f"largest classes: {results['heap_histogram']}", flush=True)
    finally:
        shut_down(producers, cluster, spark, jobs)
    results["load_end"] = loadavg()
    return results


def shut_down(producers: list[ProducerRun], cluster: LocalCluster, spark: Any = None, jobs: Iterable[Any] = ()
              ) -> None:
    """The end of a bench run, also on error: its producers, jobs and Spark session stopped, its cluster gone."""
    for p in producers:
        p.stop()
    for j in jobs:
        j.stop()
    if spark is not None:
        with contextlib.suppress(Exception):
            spark.stop()
    cluster.down(purge=True)


def report(args: argparse.Namespace, r: dict[str, Any], command: str) -> tuple[list[tuple[str, str, str, str]],
                                                                               list[str]]:
    trig = args.trigger
    mem = r["memory"]
    ok = {True: "yes", False: "**no**"}
    skip = r["skipped_batches"]
    baseline_rates = " / ".join(f"{b['rate']:,.0f}" for b in r["baselines"])
    baseline_reads = " / ".join(f"{b['read']:,}" for b in r["baselines"])
    ratio = r["job_rate"] / r["baseline_rate"]

    def live_rows(phase: dict[str, Any], what: str, target: str) -> list[tuple[str, str, str, str]]:
        def lat(value: float) -> str:
            return f"{value:.1f} s" if value == value else f"> {phase['window_s']:.0f} s (no batch done)"

        rate = phase["rate"]
        produced = phase["sent"] / phase["seconds"]
        # kept up: never more than a batch and a half behind, and the steady batches processed what was offered
        # (the target row) or what the producer managed (the kept-rate row: its own pacing varies by a few %)
        kept_up = (phase["lag_at_end"] <= rate * trig * 1.5
                   and phase["processed_rate"] >= (0.97 * rate if target else 0.9 * produced))
        processed_ok = phase["processed_rate"] >= 0.8 * rate  # the target: >= 80,000/s live at 100,000 offered
        return [
            (f"{what}: {rate:,.0f} samples/s offered ({produced:,.0f} produced) for {phase['duration']:.0f} s "
             f"after {args.warmup_cycles} cycles, processed after they were read ({phase['warmup_s']:.0f} s)",
             f"{phase['processed_rate']:,.0f} samples/s (median batch {phase['batch_s']:.1f} s; "
             f"{phase['lag_at_end']:,} behind when the producer stopped)", target, ok[processed_ok] if target else
             ("kept up" if kept_up else "**fell behind**")),
            (f"p95 latency per sample ({what}, estimated, see notes), once caught up "
             f"({phase['caught_up_s']:.0f} s into the phase)", lat(phase["latency_sample_p95_caught_up"]),
             f"≤ {2 * trig:g} s" if not target else "",
             ok[phase["latency_sample_p95_caught_up"] <= 2 * trig] if not target else ""),
            (f"p95 latency per sample ({what}, estimated), after the warm-up, the catch-up included",
             lat(phase["latency_sample_p95"]), "", ""),
            (f"p95 latency, newest sample per partition per batch ({what})", lat(phase["latency_partition_p95"]),
             "", ""),
            (f"p95 latency, newest sample of each batch ({what}, JobStats.delays_s)",
             lat(phase["latency_batch_p95"]), "", ""),
            (f"p95 latency per sample ({what}, estimated), the warm-up included",
             lat(phase["latency_sample_p95_with_warmup"]), "", ""),
        ]

    table = [
        ("job capacity (backlog, samples / batch duration)", f"{r['job_rate']:,.0f} samples/s", "≥ 100,000",
         ok[r["job_rate"] >= 100_000]),
        ("stateless baseline capacity (same batches): mean of a run before and a run after the job",
         f"{r['baseline_rate']:,.0f} samples/s ({baseline_rates})",
         "", ""),
        *([(f"job, first cycle (batches 2-{r['first_cycle_batches']}: every partition's state created; not in "
            "the capacity)", f"{r['job_first_cycle_rate']:,.0f} samples/s", "", "")]
          if r["first_cycle_batches"] > 1 else []),  # a cycle of one batch is the warm-up batch itself
        ("first batch (warm-up, not measured): baseline / job",
         f"{r['baselines'][0]['first_s']:.0f} s / {r['job_first_s']:.0f} s for {args.backlog_batch:,} rows",
         "", ""),
        ("job / baseline", f"{ratio:.2f}", "≥ 0.8", ok[ratio >= 0.8]),
        *([("stateful floor: the job's query without detection (the same shuffle into state buckets and "
            "transformWithStateInPandas, its processor only reading its rows and keeping a count), noop sink; "
            "/ baseline", f"{r['floor']['rate']:,.0f} samples/s; {r['floor']['rate'] / r['baseline_rate']:.2f}",
            "", "")] if "floor" in r else []),
        *live_rows(r["live"], "live", f"≥ {0.8 * r['live']['rate']:,.0f}"),
        *(live_rows(r["kept"], "kept rate", "") if "kept" in r else []),
        (f"driver JVM heap used after GC, {r['tracked']:,} partitions tracked"
         + ("" if r["memory_complete"] else f" (of {args.heap_partitions:,}: phase timed out)"),
         f"{mem['heap_used_mb']:,.0f} MiB (max {mem['heap_max_mb']:,.0f})", "≤ 2,048 MiB",
         ok[mem["heap_used_mb"] <= 2048]),
        *([("driver JVM live heap: what one more full collection keeps (`jcmd GC.class_histogram`'s total)",
            f"{r['heap_histogram'][0][2]:,.0f} MiB", "", "")] if r.get("heap_histogram") else []),
        ("driver JVM RSS (heap + RocksDB + off-heap)", f"{mem['jvm_rss_mb']:,.0f} MiB", "", ""),
        ("driver Python RSS", f"{mem['driver_python_rss_mb']:,.0f} MiB", "", ""),
        (f"Python workers RSS ({mem['python_workers']:.0f} processes)", f"{mem['python_workers_rss_mb']:,.0f} MiB",
         "", ""),
        ("state rows (buckets) / state memory reported", f"{r['state_rows']:,} / {r['state_memory_mb']:,.0f} MiB",
         "", ""),
    ]
    notes = [
        f"Run on {os.cpu_count()} cores, Python {platform.python_version()}, PySpark {SPARK_VERSION} (local[2]), "
        f"one broker of Kafka {KAFKA_VERSION}; load average (1, 5, 15 min) {r['load_start']} at the start and "
        f"{r['load_end']} at the end. The job shares the cores with the broker and the producer JVM (and with "
        "whatever else the load average shows).",
        f"Workload: {args.partitions:,} partitions ({args.partitions // PER_TOPIC} topics x {PER_TOPIC}) x RF 3, "
        f"one sample per partition per cycle (leader LEO +100 per cycle, followers a few behind, HW = min ISR "
        f"LEO, lineage in 1 sample of 12, {args.churn}/1000 of the partitions per cycle with a shrunk ISR: "
        f"{sum(r[k]['events'] for k in ('live', 'kept') if k in r):,} events in the live phases); samples topic "
        f"of 6 partitions, zstd. Backlog {r['backlog']:,} samples (read within --phase-timeout "
        f"{args.phase_timeout:g} s after the first cycle: baselines {baseline_reads}, "
        f"job {r['job_read']:,}) in batches of "
        f"{args.backlog_batch:,} (maxOffsetsPerTrigger; the live phases: the same, at least rate x trigger), "
        f"trigger {trig:g} s, "
        f"{r['state_buckets']} state buckets; "
        f"the first {skip} batches of each backlog query (its first {args.warmup_cycles} cycles: every "
        "partition's state created and its first lineage learnt, and at "
        f"least {WARMUP_BATCHES}) excluded; "
        f"{r['quarantined']} samples quarantined.",
        "Capacity = samples / batch duration over the steady backlog batches (the query is never starved). The live "
        "and memory phases each run a fresh job (new checkpoint, startingOffsets latest), so neither inherits the "
        "lag of the phase before. The live phase offers the target rate for real: the job keeps up or falls "
        "behind. The kept-rate phase (a fresh job again) "
        f"offers {args.kept_fraction:g} x the job's backlog capacity (--kept-fraction), or --kept-rate: the "
        "latency of a job that keeps up, which is what the batching itself costs. Each of the two phases offers "
        f"its rate for {args.warmup_cycles} cycles first, and the batches that read them are its warm-up, as the "
        "capacity excludes them: the fresh job creates every partition's state and learns its first lineage in "
        "them (the plot shows them); a phase's figures are of the batches after its warm-up, the last row of "
        "each the whole phase's. The fresh job then drains, at its capacity, what came while it warmed up; it "
        "has caught up after the first batch that read all the samples topic held when it was planned (its end "
        "offsets are the source's latestOffset in Spark's progress): the p95 once caught up is over the batches "
        "after that one, a job that keeps up, and the target's row. Samples of a partition come "
        "once per cycle (partitions / rate): a live phase's stream.stale_after_s is 3 cycles when that is above "
        f"the default ({StreamConfig().stale_after_s:g} s), as an operator sampling that slowly would set it"
        + (f" (kept-rate phase: cycle {r['kept']['cycle_s']:.0f} s, stale_after_s {r['kept']['stale_after_s']:.0f})"
           if "kept" in r else "") + ". Latency = time the "
        "Prometheus table is updated (in foreachBatch) - sample_time_ms, which the producer stamps when it "
        "builds the record. The job outputs only the newest sample of each partition per batch, so per-sample "
        "latency is estimated: the samples of a batch are spread evenly between the newest sample time of the "
        "previous batch and that of this one (true at a constant production rate).",
        "The heap figure: `spark.driver.memory` is 2g (streaming/session.py): a job that needs more fails with "
        "an OutOfMemoryError rather than pass the target. Partition state lives in RocksDB (off-heap, in the "
        "JVM's RSS) and in the Python workers while a bucket is processed; the driver Python keeps the rows it "
        f"serves (at most state_buckets x series_budget). The memory phase reads micro-batches of "
        f"{args.memory_batch or args.backlog_batch:,} samples." + heap_classes(r.get("heap_histogram", [])),
    ]
    notes += breakdown(r, args)
    if r.get("stages"):
        notes.append("Spark's stages of the job on the backlog (its REST API; every micro-batch of the phase, the "
                     "warm-up's included), executors' run / CPU seconds (CPU: the JVM's threads, not the Python "
                     "workers'): " + "; ".join(
                         f"{name}: {v['stages']:.0f} stages, {v['tasks']:.0f} tasks, {v['run_s']:.1f} / "
                         f"{v['cpu_s']:.1f} s"
                         for name, v in sorted(r["stages"].items(), key=lambda kv: -kv[1]["run_s"])))
    if r.get("steady_stages"):
        notes.append(steady_stages_note(r))
    return table, notes


def heap_classes(histogram: list[Any]) -> str:
    """The live heap's largest classes after the heap figure (:func:`heap_histogram`), as a sentence."""
    if not histogram:
        return ""
    return (" The live heap then (`jcmd GC.class_histogram`, its own full collection), in all and its largest classes: "
            + ", ".join(f"`{name}` {mib:,.0f} MiB ({count:,})" for name, count, mib in histogram) + ".")


def steady_stages_note(r: dict[str, Any]) -> str:
    """The stages' wall time per steady backlog micro-batch, the job's and each baseline's: how much of the job's
    micro-batch its read stage alone takes, against the baseline's whole micro-batch."""
    def per_batch(stages: dict[str, dict[str, float]], batches: int) -> str:
        return ", ".join(f"{name} {v['wall_s'] / max(batches, 1):.2f} s ({v['stages'] / max(batches, 1):.0f} a "
                         "micro-batch)" for name, v in sorted(stages.items(), key=lambda kv: -kv[1]["wall_s"]))

    baselines = [b for b in r["baselines"] if b.get("steady_stages")]
    text = ("Spark's stages of the steady backlog micro-batches (the capacity's), wall seconds per micro-batch "
            f"(submission to completion): the job ({r['job_batches']} micro-batches of "
            f"{r['job_batch_s']:.2f} s each): {per_batch(r['steady_stages'], r['job_batches'])}")
    for when, b in zip(("before", "after"), baselines, strict=False):
        text += (f"; the baseline {when} the job ({b['batches']} of {b['batch_s']:.2f} s): "
                 f"{per_batch(b['steady_stages'], b['batches'])}")
    floor = r.get("floor", {})
    if floor.get("steady_stages"):
        text += (f"; the stateful floor ({floor['batches']} of {floor['batch_s']:.2f} s): "
                 f"{per_batch(floor['steady_stages'], floor['batches'])}")
    return text + "."


def breakdown(r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    out = []
    phases = [("backlog", r.get("backlog_profile"), r.get("backlog_timings"))]
    phases += [(label, r[key]["profile"], r[key]["timings"]) for label, key in (("live", "live"),
                                                                                ("kept-rate", "kept")) if key in r]
    spark_parts = {"live": r["live"].get("duration_ms")} | ({"kept-rate": r["kept"].get("duration_ms")}
                                                           if "kept" in r else {})
    for label, prof, timings in phases:
        prof = prof or {}
        if not timings:
            continue
        frame = pd.DataFrame(timings).fillna(0)
        mean = frame.mean(numeric_only=True)
        parts = (f"spark_and_collect {mean.get('spark_and_collect', 0):.2f} s, writes {mean.get('writes', 0):.2f} s "
                 f"(the exporter's table update, {mean.get('exporter', 0):.2f} s, at once with them)")
        line = (f"Where a {label} batch goes (means over {len(frame)} batches): foreachBatch handler "
                f"{mean['handler']:.2f} s = {parts}. 'spark_and_collect' is the driver's collect (toArrow): the "
                "Kafka read, parsing, shuffle into buckets and the Python processor, and the collect to the driver; "
                "'writes': the events to their topic and the history, and the partition snapshots, Spark jobs at once.")
        if prof:
            per = prof["rows_in"] / 1e6
            line += (f" In the Python workers ({prof['calls']:.0f} bucket calls, {prof['rows_in']:,.0f} partitions "
                     "sampled: the calls' outputs, a partition sampled more than once in a micro-batch counts once; "
                     f"~{prof['partitions_per_bucket']:.0f} partitions per bucket), seconds per million partitions "
                     "sampled: "
                     f"input {prof['input'] / per:.2f}, state load (unpickle) {prof['load'] / per:.2f}, detection "
                     f"{prof['process'] / per:.2f}, state save (pickle) {prof['save'] / per:.2f}, output frame "
                     f"{prof['frame'] / per:.2f}, of the workers' CPU {prof['cpu'] / per:.2f} in all (summed over "
                     "the 2 worker processes).")
        if parts_ms := spark_parts.get(label):
            line += (" Spark's own figures (StreamingQueryProgress.durationMs, mean ms per batch): " + ", ".join(
                f"{name} {ms:,.0f}" for name, ms in sorted(parts_ms.items(), key=lambda kv: -kv[1])) + ".")
        out.append(line)
    return out


def spark_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"{text!r} is not spark.KEY=VALUE")
    return key, value


def fill_backlog(work: Path, bootstrap: str, partitions: int, cycles: int, churn: int,
                 producers: list[Any], transport: str = "json") -> tuple[int, float, int]:
    """``cycles`` cycles of ``partitions`` samples written to the samples topic by the producer JVM (added to
    ``producers``, for the caller to stop); returns the samples sent, the seconds it took and the topic's end,
    the records checked."""
    producer = start_producer(work, bootstrap, "backlog", partitions, 0, cycles=cycles, churn=churn,
                              transport=transport)
    producers.append(producer)
    sent, seconds, _ = producer.wait(timeout_s=600)
    backlog = topic_end(bootstrap)
    check_topic_records(bootstrap)
    return sent, seconds, backlog


def job_arguments(parser: argparse.ArgumentParser, backlog_batch_help: str) -> None:
    """The options of the job's runs that bench_stream and bench_cluster share."""
    parser.add_argument("--trigger", type=float, default=2.0)
    parser.add_argument("--transport", choices=("batch", "json"), default="batch",
                        help="the samples' format: partition_batch/v1 records (the collector's default) or a JSON "
                             "record per sample")
    parser.add_argument("--churn", type=int, default=1, help="per mille of partitions with a shrunk ISR per cycle")
    parser.add_argument("--warmup-timeout", type=float, default=240,
                        help="seconds at most for the first batches of each run (not measured)")
    parser.add_argument("--backlog-batch", type=int, default=20_000, help=backlog_batch_help)
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/ alone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100_000, help="samples/s offered in the live phase")
    parser.add_argument("--duration", type=float, default=120, help="seconds of the live phase")
    parser.add_argument("--kept-fraction", type=float, default=0.5,
                        help="rate of the kept-rate phase, as a fraction of the job's backlog capacity")
    parser.add_argument("--kept-rate", type=float, default=0,
                        help="samples/s of the kept-rate phase (over --kept-fraction)")
    parser.add_argument("--kept-duration", type=float, default=60, help="seconds of the kept-rate phase (0: none)")
    parser.add_argument("--backlog-cycles", type=int, default=24)
    parser.add_argument("--warmup-cycles", type=int, default=12,
                        help="cycles not measured, of the backlog and of each live phase: every state created, and "
                             "every partition's first lineage learnt (the workload samples a lineage in 1 cycle of 12)")
    parser.add_argument("--heap-partitions", type=int, default=300_000)
    parser.add_argument("--state-buckets", type=int, default=StreamConfig().state_buckets,
                        help="stream.state_buckets of the job (default: the job's own, per state task)")
    parser.add_argument("--series-budget", type=int, default=StreamConfig().series_budget,
                        help="stream.series_budget of the job (each bucket's candidates: its first this many)")
    parser.add_argument("--drain", type=float, default=30, help="seconds to wait for the job after the live phase")
    parser.add_argument("--phase-timeout", type=float, default=75,
                        help="seconds at most for the baseline and for the job on the backlog")
    parser.add_argument("--memory-timeout", type=float, default=180, help="seconds at most for the memory phase")
    parser.add_argument("--memory-batch", type=int, default=0,
                        help="samples per micro-batch of the memory phase (default: --backlog-batch)")
    job_arguments(parser, "maxOffsetsPerTrigger of the job, in samples (the memory phase: --memory-batch; the live "
                          "phases: at least rate x trigger)")
    parser.add_argument("--stages", action="store_true",
                        help="Spark's UI on, and the job's stages on the backlog summed from its REST API")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the processor in the Python workers")
    parser.add_argument("--stateful-floor", action="store_true",
                        help="after the job, the same stateful query without detection on the backlog")
    parser.add_argument("--spark-conf", type=spark_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting over the job's (stream.spark_conf), for A/B runs; repeatable")
    args = parser.parse_args()
    if args.partitions % PER_TOPIC and args.partitions > PER_TOPIC:
        parser.error(f"--partitions must be a multiple of {PER_TOPIC}")
    command = ("python bench/bench_stream.py " + shlex.join(sys.argv[1:])).strip()
    with interrupt_on_sigterm(), tempfile.TemporaryDirectory(prefix="replmon-bench-stream-") as tmp:
        results = run(args, Path(tmp))
    table, notes = report(args, results, command)
    width = max(len(row[0]) for row in table)
    print()
    for name, value, target, met in table:
        print(f"{name:<{width}}  {value:<40} {target:>12} {met.strip('*')}")
    for note in notes:
        print("\n" + note)
    if results.get("cprofile"):
        print(results["cprofile"])
    if not args.no_write:
        plot(results, PLOT)
        write_doc(command, table, notes)
        print(f"\nwrote {DOC.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
