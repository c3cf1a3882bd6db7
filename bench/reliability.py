"""Reliability of the streaming job under SIGKILL: ``replmon stream`` killed at random points and restarted
from its checkpoint, under a load of producers and broker faults that keep causing events; then every event
id of the events topic is checked against a single uninterrupted reference computation over the same samples.

    .venv/bin/python bench/reliability.py [--cycles 20] [--seed 6] [--doc docs/reliability.md]

Starts its own clusters: a 3-broker watched cluster and a one-broker transport cluster (samples, events),
runs ``replmon collect`` and ``replmon stream`` as the operator does (the test bed's pipeline harness,
replmon.testbed.harness), and writes its figures to the "Job: SIGKILL and restart" section of
docs/reliability.md.

The reference: every valid partition sample of the samples topic, per partition in topic order, through
:func:`streaming.detect.step` (the job's own detection, pure, one process, no restarts). The verdict:

* lost: an event the reference expects that is not in the events topic;
* duplicated: an event id found more than once in the events topic;
* unexpected: an event id the reference does not produce;
* differing: an event whose content (every field but ``detected_time_ms``, the job's clock) is not the
  reference's; its fields (previous leader, previous ISR, lag, committed loss...) come from the state the job
  carried across the restarts, so a lost or corrupted state shows here;
* the partition gauges on /metrics after the last restart against the reference's final state.

STALE events depend on processing time (when the job happened to run), not on the samples: the job runs with
``stale_after_s`` far above the run's length, so none is expected and none may appear.

tests/test_job_restarts.py runs the same code for 2 kill cycles on the test suite's pipeline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from replmon.contracts.batches import decode_batch, is_batch  # noqa: E402
from replmon.contracts.events import Event, EventType  # noqa: E402
from replmon.contracts.samples import PartitionSample, parse_sample  # noqa: E402
from replmon.core.processes import wait_until  # noqa: E402
from replmon.testbed.harness import Pipeline, scratch_clusters  # noqa: E402
from replmon.testbed.localcluster import LocalCluster  # noqa: E402
from replmon.testbed.workload import SequencedProducer  # noqa: E402
from streaming.detect import DetectConfig, metrics_of, step  # noqa: E402
from streaming.exporter import PARTITION_GAUGES, Scraped, scrape  # noqa: E402
from streaming.state import PartitionState  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
JOB_START_DEADLINE_S = 600.0
CATCH_UP_DEADLINE_S = 300.0
Key = tuple[str, str, int]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_for(probe: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    return wait_until(probe, timeout_s, what, interval_s)


# ------------------------------------------------------------------------------------------------ reading topics
def read_records(bootstrap: str, topic: str, until: dict[int, int] | None = None
                 ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record of ``topic`` up to ``until`` (partition -> end offset,
    exclusive; default: the current end), in offset order per partition."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             isolation_level="read_committed", request_timeout_ms=20_000,
                             max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return []
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = {tp: (until or {}).get(tp.partition, off) for tp, off in consumer.end_offsets(tps).items()}
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} up to {end} in 120 s")
            for tp, records in consumer.poll(timeout_ms=500).items():
                out.extend((tp.partition, r.offset, r.key, r.value) for r in records if r.offset < end[tp])
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------------ the reference
@dataclass
class Reference:
    """What one uninterrupted run of the detection makes of the samples."""

    events: dict[str, dict[str, Any]]
    """event id -> the event (JSON form)."""
    final: dict[Key, PartitionState]
    last_sample_ms: dict[Key, int]
    samples: int


def reference(bootstrap: str, samples_topic: str, cfg: DetectConfig, topics: set[str],
              until: dict[int, int] | None = None) -> Reference:
    """The detection over the valid partition samples of ``topics`` in the samples topic (up to ``until``),
    one partition after the other in topic order, as a single run that was never interrupted."""
    by_key: dict[Key, list[PartitionSample]] = {}
    count = 0
    for _p, _o, _k, value in read_records(bootstrap, samples_topic, until):
        if value is None:
            continue
        for sample in _samples_of(value):
            if isinstance(sample, PartitionSample) and sample.topic in topics:
                by_key.setdefault((sample.cluster, sample.topic, sample.partition), []).append(sample)
                count += 1
    events: dict[str, dict[str, Any]] = {}
    final: dict[Key, PartitionState] = {}
    last: dict[Key, int] = {}
    for key, samples in by_key.items():
        state: PartitionState | None = None
        # time order, as the job takes them: in a topic of JSON records and batches (an upgrade) a partition's
        # samples are in two Kafka partitions, read one after the other
        for sample in sorted(samples, key=lambda s: (s.sample_time_ms, s.cycle)):
            state, found, _ = step(state, sample, cfg)
            for event in found:
                events[event.event_id] = event.model_dump(mode="json")
        assert state is not None
        final[key] = state
        last[key] = max(s.sample_time_ms for s in samples)
    return Reference(events, final, last, count)


def _samples_of(value: bytes) -> list[Any]:
    """The valid samples of a record: a JSON record's one, a batch's entries (the others are the quarantine's
    business)."""
    try:
        if is_batch(value):
            return [PartitionSample.model_validate(entry) for entry in decode_batch(value)]
        return [parse_sample(value)]
    except Exception:
        return []


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    """An event as this version's contract reads it (a field added after the version that wrote it is its default:
    null), without the job's processing time; one the contract refuses, as it is."""
    try:
        read = Event.model_validate(event).model_dump(mode="json")
    except ValueError:  # pydantic's ValidationError
        read = event
    return {k: v for k, v in read.items() if k != "detected_time_ms"}


@dataclass
class Verdict:
    expected: int
    found: int
    lost: list[str]
    duplicated: dict[str, int]
    unexpected: list[str]
    differing: list[str]
    by_type: dict[str, int]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.differing)

    def describe(self, ref: Reference, actual: list[dict[str, Any]]) -> str:
        got = {e["event_id"]: e for e in actual}
        lines = [f"expected {self.expected}, found {self.found}; lost {len(self.lost)}, duplicated "
                 f"{len(self.duplicated)}, unexpected {len(self.unexpected)}, differing {len(self.differing)}"]
        lines += [f"  lost: {ref.events[i]}" for i in self.lost[:5]]
        lines += [f"  unexpected: {got.get(i, i)}" for i in self.unexpected[:5]]
        lines += [f"  differing: {comparable(got.get(i, {}))} != {comparable(ref.events[i])}"
                  for i in self.differing[:5]]
        return "\n".join(lines)


def job_events(bootstrap: str, events_topic: str, ref: Reference, ignore_stale: bool = False
               ) -> list[dict[str, Any]]:
    """The events topic's events of the reference's partitions, revealed by samples the reference covers.
    STALE events are included (the bench's job never expects one) unless ``ignore_stale``: they follow the
    job's processing time, not the samples, and a job that was down longer than ``stale_after_s`` may rightly
    report one."""
    out = []
    for _p, _o, _k, value in read_records(bootstrap, events_topic):
        event = json.loads(value or b"{}")
        key = (event.get("cluster"), event.get("topic"), event.get("partition"))
        if key not in ref.last_sample_ms:
            continue
        if event["type"] == EventType.STALE:
            if not ignore_stale:
                out.append(event)
        elif event["event_time_ms"] <= ref.last_sample_ms[key]:
            out.append(event)
    return out


def verdict(ref: Reference, actual: list[dict[str, Any]]) -> Verdict:
    counts = Counter(e["event_id"] for e in actual)
    got = {e["event_id"]: e for e in actual}
    return Verdict(
        expected=len(ref.events), found=len(counts),
        lost=sorted(set(ref.events) - set(counts)),
        duplicated={i: n for i, n in counts.items() if n > 1},
        unexpected=sorted(set(counts) - set(ref.events)),
        differing=sorted(i for i in set(ref.events) & set(got) if comparable(got[i]) != comparable(ref.events[i])),
        by_type=dict(Counter(e["type"] for e in ref.events.values())),
    )


def gauge_mismatches(ref: Reference, metrics: Scraped) -> list[str]:
    """The per-partition gauges that differ from the reference's final state ([] when all agree)."""
    bad = []
    for key, state in ref.final.items():
        m = metrics_of(state)
        labels = {"cluster": key[0], "topic": key[1], "partition": str(key[2])}
        for name, attr in PARTITION_GAUGES.items():
            want = getattr(m, attr)
            if want is None:
                continue
            got = [v for lab, v in metrics.get(name, []) if all(lab.get(k) == v2 for k, v2 in labels.items())]
            if got != [float(want)]:
                bad.append(f"{name}{labels}: job {got}, reference {float(want)}")
    return bad


def verify(bootstrap: str, samples_topic: str, events_topic: str, metrics_port: int, cfg: DetectConfig,
           topics: set[str], until: dict[int, int], deadline_s: float = CATCH_UP_DEADLINE_S,
           ignore_stale: bool = False) -> tuple[Verdict, list[str], Reference]:
    """Wait (with a deadline) until the job has caught up with the samples up to ``until`` (every expected
    event written and the gauges at the reference's final state), then judge. Returns the verdict, the gauge
    mismatches and the reference."""
    ref = reference(bootstrap, samples_topic, cfg, topics, until)
    last: list[Any] = []

    def caught_up() -> bool:
        actual = job_events(bootstrap, events_topic, ref, ignore_stale)
        mismatches = gauge_mismatches(ref, scrape(metrics_port))
        last[:] = [actual, mismatches]
        return set(ref.events) <= {e["event_id"] for e in actual} and not mismatches

    with contextlib.suppress(AssertionError):
        wait_for(caught_up, deadline_s, "the job to catch up", interval_s=2.0)
    if not last:
        last[:] = [job_events(bootstrap, events_topic, ref, ignore_stale), ["no scrape"]]
    actual, mismatches = last
    return verdict(ref, actual), mismatches, ref


# ------------------------------------------------------------------------------------------------ load and faults
class FaultLoad:
    """Producers (acks=all) on the watched topics and a fault loop over the brokers: pause until Kafka drops
    the broker from an ISR, resume until it is back; kill, start again until it is back. Every fault is waited
    for on Kafka's own view, so each one causes events (ISR_SHRINK/EXPAND, LEADER_CHANGE, UNDER_MIN_ISR...)."""

    def __init__(self, cluster: LocalCluster, topics: dict[str, int], rng: random.Random,
                 fault_deadline_s: float = 40.0) -> None:
        from replmon.testbed.kafka_view import KafkaView

        self.cluster = cluster
        self.topics = topics
        """topic -> the broker that leads it at creation."""
        self.rng = rng
        self.deadline_s = fault_deadline_s
        self.view = KafkaView(cluster.bootstrap_servers)
        self.stop = threading.Event()
        self.producers = [SequencedProducer(cluster.bootstrap_servers, t, interval_s=0.02) for t in topics]
        self.faults: Counter[str] = Counter()
        self.failed: list[str] = []
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> FaultLoad:
        for p in self.producers:
            p.start()
        self._thread.start()
        return self

    def _in_isr(self, broker: int, alive: int) -> bool:
        return all(broker in self.view.partition(t, via=alive).isr for t in self.topics)

    def _out_of_isr(self, broker: int, alive: int) -> bool:
        return all(broker not in self.view.partition(t, via=alive).isr for t in self.topics)

    def _one(self, broker: int, kind: str) -> None:
        alive = next(b for b in self.cluster.broker_ids if b != broker)
        if kind == "pause":
            self.cluster.pause(broker)
            try:
                wait_for(lambda: self._out_of_isr(broker, alive), self.deadline_s, f"broker {broker} out of ISRs")
            finally:
                self.cluster.resume(broker)
        else:
            self.cluster.kill(broker)
            try:
                wait_for(lambda: self._out_of_isr(broker, alive), self.deadline_s, f"broker {broker} out of ISRs")
            finally:
                self.cluster.start(broker)
        self.view.reconnect()
        wait_for(lambda: self._in_isr(broker, alive), self.deadline_s, f"broker {broker} back in every ISR")
        self.faults[kind] += 1

    def _run(self) -> None:
        brokers = list(self.cluster.broker_ids)
        i = 0
        while not self.stop.is_set():
            broker = brokers[i % len(brokers)]
            kind = self.rng.choice(["pause", "kill"])
            i += 1
            try:
                self._one(broker, kind)
            except Exception as exc:  # counted; the loop heals and goes on
                self.failed.append(f"{kind} {broker}: {exc}")
                with contextlib.suppress(Exception):
                    self.cluster.heal()
                self.view.reconnect()
            self.stop.wait(self.rng.uniform(0.5, 3.0))

    def close(self) -> None:
        """Stop faults and producers; every broker running again."""
        self.stop.set()
        self._thread.join(timeout=300)
        for p in self.producers:
            p.close()
        self.cluster.heal()
        self.view.close()

    @property
    def acknowledged(self) -> int:
        return sum(len(p.acknowledged()) for p in self.producers)

    @property
    def send_failures(self) -> int:
        return sum(p.ack.failed for p in self.producers)


# ------------------------------------------------------------------------------------------------ kill cycles
class Job(Protocol):
    """A ``replmon stream`` process that can be started, waited for and SIGKILLed."""

    def spawn(self) -> None: ...

    def running(self) -> bool:
        """True once the job has completed a micro-batch since it was spawned."""
        ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...


@dataclass
class KillRecord:
    cycle: int
    during_start: bool
    killed_after_s: float
    batches_before_kill: int


@dataclass
class Cycles:
    records: list[KillRecord] = field(default_factory=list)
    restart_s: list[float] = field(default_factory=list)
    """Spawn to first micro-batch of every (re)start that got that far."""


def kill_cycles(job: Job, cycles: int, rng: random.Random, batches: Callable[[], int],
                during_start_share: float = 0.25, max_run_s: float = 15.0,
                plan: Sequence[bool] | None = None) -> Cycles:
    """Kill the job ``cycles`` times at random points (``during_start_share`` of them before its first
    micro-batch, the others a random time after it; ``plan`` says which, when given), restarting it from its
    checkpoint each time; the job is left running (and past its first micro-batch) at the end."""
    out = Cycles()
    for i in range(cycles):
        during_start = plan[i] if plan is not None else rng.random() < during_start_share
        spawned = time.monotonic()
        job.spawn()
        if during_start:
            delay = rng.uniform(2.0, 25.0)
            _wait_or_dead(job, delay)
            done = 0
        else:
            wait_for(job.running, JOB_START_DEADLINE_S, f"cycle {i}: the job's first micro-batch")
            out.restart_s.append(time.monotonic() - spawned)
            _wait_or_dead(job, rng.uniform(0.0, max_run_s))
            done = batches()
        assert job.alive(), f"cycle {i}: the job died on its own"
        job.kill()
        out.records.append(KillRecord(i, during_start, time.monotonic() - spawned, done))
        log(f"cycle {i + 1}/{cycles}: SIGKILL {'during start' if during_start else 'while running'} "
            f"{time.monotonic() - spawned:.1f} s after spawn ({done} batches)")
    spawned = time.monotonic()
    job.spawn()
    wait_for(job.running, JOB_START_DEADLINE_S, "the job's first micro-batch after the last restart")
    out.restart_s.append(time.monotonic() - spawned)
    return out


def _wait_or_dead(job: Job, seconds: float) -> None:
    """The random kill point: ``seconds`` from now, sooner if the job dies by itself (then the caller fails)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and job.alive():
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


class PipelineJob:
    """A pipeline's ``replmon stream`` as a :class:`Job`."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def spawn(self) -> None:
        self.pipeline.spawn("stream")

    def alive(self) -> bool:
        return self.pipeline.alive("stream")

    def batches(self) -> int:
        return self.pipeline.batches() if self.alive() else 0

    def running(self) -> bool:
        return self.pipeline.batches() > 0  # fails with the end of the job's log when the job exited

    def kill(self) -> None:
        self.pipeline.kill("stream")


# ------------------------------------------------------------------------------------------------ the benchmark
def pipeline(work: Path, watched: LocalCluster, transport: LocalCluster, topics: Iterable[str]) -> Pipeline:
    """The pipeline on ``topics`` (their exact names), samples and events on ``rel.*``; no STALE event expected
    (``stale_after_s`` far above the run's length)."""
    return Pipeline(work, watched, transport, include=sorted(topics), cluster_name="watched", topic_names="rel",
                    stale_after_s=86_400, hw_stalled_after_s=30, collector_metrics_port=0, cwd=ROOT)




def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from replmon.core.config import load_config
    from replmon.testbed.kafka_view import KafkaView

    rng = random.Random(args.seed)
    started = time.monotonic()
    log(f"starting a 3-broker watched cluster and a one-broker transport cluster in {work}")
    with scratch_clusters(work) as (watched, transport):
        view = KafkaView(watched.bootstrap_servers)
        topics = {f"rel-{b}": b for b in watched.broker_ids}
        for t, leader in topics.items():
            others = [b for b in watched.broker_ids if b != leader]
            view.create_topic(t, assignment={0: [leader, *others]})
        view.close()
        p = pipeline(work, watched, transport, topics)
        cfg = DetectConfig.from_stream_config(load_config(p.config).stream)
        bootstrap, samples, events = transport.bootstrap_servers, p.samples_topic, p.events_topic
        p.spawn("collect")
        job = PipelineJob(p)
        try:
            load = FaultLoad(watched, topics, rng).start()
            log(f"load: {len(topics)} producers (acks=all) and a fault loop; {args.cycles} kill cycles")
            try:
                cycles = kill_cycles(job, args.cycles, rng, job.batches)
                log("kill cycles done; stopping the faults, healing the cluster")
            finally:
                load.close()
            log("waiting until every partition is sampled healthy, then stopping the collector")
            wait_for(lambda: healthy_sampled(bootstrap, samples, topics), 120, "healthy samples")
            p.stop("collect", grace_s=60)
            until = end_offsets(bootstrap, samples)
            log("checking the events topic against the reference")
            result, mismatches, ref = verify(bootstrap, samples, events, p.metrics_port, cfg, set(topics), until)
        finally:
            p.stop(grace_s=60)
        log(result.describe(ref, job_events(bootstrap, events, ref)))
        if mismatches:
            log("gauge mismatches: " + "; ".join(mismatches[:10]))
        return {
            "cycles": cycles, "verdict": result, "gauge_mismatches": mismatches, "samples": ref.samples,
            "acknowledged": load.acknowledged, "send_failures": load.send_failures, "faults": dict(load.faults),
            "fault_failures": load.failed, "duration_s": time.monotonic() - started,
            "partitions": len(ref.final),
        }


def healthy_sampled(bootstrap: str, samples_topic: str, topics: Iterable[str]) -> bool:
    """The newest sample of every partition of ``topics`` shows a full ISR and every replica at the high
    watermark: nothing will change any more once the producers have stopped."""
    newest: dict[tuple[str, int], PartitionSample] = {}
    for _p, _o, _k, value in read_records(bootstrap, samples_topic):
        for s in _samples_of(value or b""):
            if isinstance(s, PartitionSample) and s.topic in topics:
                newest[(s.topic, s.partition)] = s
    wanted = set(topics)
    return {t for t, _ in newest} == wanted and all(
        len(s.isr) == len(s.replicas) and s.high_watermark is not None
        and all(r.log_end_offset == s.high_watermark for r in s.replica_offsets) for s in newest.values())


def write_section(doc: Path, heading: str, body: str) -> None:
    """Replace (or append) the ``## heading`` section of ``doc``."""
    text = doc.read_text() if doc.exists() else "# Reliability\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == f"## {heading}"), None)
    section = [f"## {heading}", *body.rstrip().splitlines(), ""]
    if start is None:
        lines += ["", *section]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section
    doc.write_text("\n".join(lines).rstrip() + "\n")


def report(r: dict[str, Any], command: str) -> str:
    v: Verdict = r["verdict"]
    cycles: Cycles = r["cycles"]
    during = sum(1 for c in cycles.records if c.during_start)
    restart = sorted(cycles.restart_s)
    lines = [
        f"Measured with `{command}` ({time.strftime('%Y-%m-%d')}, 2 cores shared with other work; "
        f"{r['duration_s'] / 60:.0f} min).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| SIGKILLs of `replmon stream`, each followed by a restart from the checkpoint | {len(cycles.records)} "
        f"({during} during start-up, {len(cycles.records) - during} while processing) |",
        f"| restart to first micro-batch (median / max) | {restart[len(restart) // 2]:.0f} s / {restart[-1]:.0f} s |",
        f"| load: messages acknowledged (acks=all) to {r['partitions']} watched partitions during the run | "
        f"{r['acknowledged']} ({r['send_failures']} sends failed during faults) |",
        f"| broker faults caused meanwhile | {sum(r['faults'].values())} "
        f"({', '.join(f'{n} {k}' for k, n in sorted(r['faults'].items()))}; {len(r['fault_failures'])} "
        "did not take effect in time) |",
        f"| partition samples, input of the reference | {r['samples']} |",
        f"| events the uninterrupted reference expects | {v.expected} "
        f"({', '.join(f'{n} {t}' for t, n in sorted(v.by_type.items()))}) |",
        f"| events in the events topic | {v.found} distinct ids |",
        f"| lost / duplicated / unexpected / differing in content | {len(v.lost)} / {len(v.duplicated)} / "
        f"{len(v.unexpected)} / {len(v.differing)} |",
        f"| partition gauges differing from the reference's final state | {len(r['gauge_mismatches'])} |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--doc", type=Path, default=DOC, help="the Markdown file to write the figures to")
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="replmon-reliability-"))
    command = "bench/reliability.py " + " ".join(sys.argv[1:])
    try:
        r = run(args, work)
    finally:
        log(f"logs in {work}")
    text = report(r, command.strip())
    print(text)
    if not args.no_doc:
        write_section(args.doc, "Job: SIGKILL and restart", text)
    ok = r["verdict"].ok and not r["gauge_mismatches"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
