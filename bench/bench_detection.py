"""Benchmark of detection delay: for each fault of the demo's timeline, how long after Kafka itself reacted replmon
reported it, at the default intervals (a collector cycle every 5 s, a micro-batch every 2 s).

    .venv/bin/python bench/bench_detection.py [--rounds 3] [--interval-s 5] [--trigger-s 2] [--no-agents]
                                              [--no-write]

Starts a 3-broker watched cluster and a one-broker transport cluster in a temporary directory, the pipeline
(``replmon collect``, a log-dir agent beside each broker as ``replmon run`` starts them, and ``replmon stream``,
through the test bed's harness; ``--no-agents``: the protocol sampler alone) and two sequenced producers that write
through every fault (acks=all on a topic with min.insync.replicas 2, acks=1 on one with 1). Each round injects:
a follower paused (ISR_SHRINK), resumed (ISR_EXPAND), the leader killed (a clean LEADER_CHANGE), both followers
stopped (UNDER_MIN_ISR_START), and an unclean election of a stale follower (an unclean LEADER_CHANGE).

Kafka's reaction is Kafka's own view, not replmon's: a thread asks the brokers (DescribeTopicPartitions) every
100 ms and records when the leader, leader epoch or ISR it expects first shows. replmon's is the event's
``detected_time_ms`` (the job's clock, same host). Writes the figures, the command and a plot to the
"## Detection delay" section of docs/benchmarks.md and docs/bench_detection.png.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docsection import write_section  # noqa: E402
from replmon.core.processes import interrupt_on_sigterm  # noqa: E402
from replmon.testbed.harness import EventFollower, Pipeline, scratch_clusters  # noqa: E402
from replmon.testbed.kafka_view import KafkaView, PartitionView  # noqa: E402
from replmon.testbed.localcluster import LocalCluster, NodeState  # noqa: E402
from replmon.testbed.workload import SequencedProducer  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_detection.png"
HEADING = "Detection delay"
POLL_S = 0.1
STEP_TIMEOUT_S = 90.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class KafkaWatch:
    """Kafka's own view of some partitions, every ``POLL_S``: each change of leader, leader epoch or ISR with the
    time it was first seen."""

    def __init__(self, cluster: LocalCluster, topics: list[str]) -> None:
        self.cluster = cluster
        self.view = KafkaView(cluster.bootstrap_servers)
        self.topics = topics
        self.history: dict[str, list[tuple[float, PartitionView]]] = {t: [] for t in topics}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kafka-watch")

    def start(self) -> KafkaWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            running = [b for b in self.cluster.broker_ids if self.cluster.node_state(b) == NodeState.RUNNING]
            for topic in self.topics:
                with contextlib.suppress(Exception):
                    # asked of the leader while it runs (the faults stop, pause or kill other brokers first), else
                    # of a running broker: one going down under the request would hold the answer
                    leader = self.history[topic][-1][1].leader if self.history[topic] else -1
                    seen = self.view.partition(topic, via=leader if leader in running else running[0])
                    now = time.time()
                    last = self.history[topic][-1][1] if self.history[topic] else None
                    if last is None or (seen.leader, seen.leader_epoch, seen.isr) != (
                            last.leader, last.leader_epoch, last.isr):
                        self.history[topic].append((now, seen))
            self._stop.wait(POLL_S)

    def first(self, topic: str, since: float, match: Callable[[PartitionView], bool]) -> float | None:
        return next((t for t, v in self.history[topic] if t >= since and match(v)), None)

    def now(self, topic: str) -> PartitionView:
        return self.history[topic][-1][1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.view.close()


@dataclass
class Delay:
    kind: str
    """The fault, whatever the broker: "pause a follower", ..."""
    fault: str
    event: str
    injected: float
    kafka: float | None = None
    replmon: float | None = None
    source: str | None = None
    """What revealed the event (its ``source``: metadata_log, sampler)."""

    @property
    def kafka_s(self) -> float | None:
        return None if self.kafka is None else self.kafka - self.injected

    @property
    def beyond_kafka_s(self) -> float | None:
        return None if self.kafka is None or self.replmon is None else self.replmon - self.kafka


@dataclass
class Round:
    cluster: LocalCluster
    watch: KafkaWatch
    events: EventFollower
    isr_topic: str
    loss_topic: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    delays: list[Delay] = field(default_factory=list)

    def poll(self) -> None:
        self.seen.extend(self.events.poll(timeout_ms=200))

    def wait(self, what: str, probe: Callable[[], Any], timeout_s: float = STEP_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            with contextlib.suppress(Exception):
                value = probe()
                if value:
                    return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    def measure(self, kind: str, fault: str, event: str, topic: str, inject: Callable[[], None],
                kafka_did: Callable[[PartitionView], bool], replmon_saw: Callable[[dict[str, Any]], bool]) -> None:
        injected = time.time()
        inject()
        delay = Delay(kind, fault, event, injected)
        delay.kafka = self.wait(f"Kafka: {fault}", lambda: self.watch.first(topic, injected, kafka_did))
        found = self.wait(f"replmon: {event}", lambda: next(
            (e for e in self.seen if e.get("topic") == topic and e["type"] == event and replmon_saw(e)
             and e["detected_time_ms"] / 1000 >= injected), None))
        delay.replmon = found["detected_time_ms"] / 1000
        delay.source = found.get("source")
        log(f"{fault}: Kafka after {delay.kafka_s:.1f} s, replmon {delay.beyond_kafka_s:.1f} s later "
            f"(from the {delay.source})")
        self.delays.append(delay)

    def full_isr(self, topic: str) -> bool:
        view = self.watch.now(topic)
        return view.leader >= 0 and len(view.isr) == 3

    def run(self) -> None:
        c, topic, loss = self.cluster, self.isr_topic, self.loss_topic
        self.wait("full ISRs", lambda: self.full_isr(topic) and self.full_isr(loss))
        follower = [b for b in self.watch.now(topic).isr if b != self.watch.now(topic).leader][-1]
        self.measure("pause a follower", f"pause broker {follower}", "ISR_SHRINK", topic, lambda: c.pause(follower),
                     lambda v: follower not in v.isr, lambda e: follower in e["brokers"])
        self.measure("resume it", f"resume broker {follower}", "ISR_EXPAND", topic, lambda: c.resume(follower),
                     lambda v: follower in v.isr, lambda e: follower in e["brokers"])
        self.wait("full ISRs", lambda: self.full_isr(topic) and self.full_isr(loss))
        leader, epoch = self.watch.now(topic).leader, self.watch.now(topic).leader_epoch
        self.measure("kill the leader", f"kill leader {leader}", "LEADER_CHANGE", topic, lambda: c.kill(leader),
                     lambda v: v.leader_epoch > epoch and v.leader >= 0,
                     lambda e: e.get("previous_leader") == leader and e.get("clean") is True)
        c.start(leader)
        self.wait("full ISRs", lambda: self.full_isr(topic) and self.full_isr(loss))
        now = self.watch.now(topic)
        followers = [b for b in now.isr if b != now.leader]

        def stop_followers() -> None:
            for b in followers:
                c.stop(b)

        self.measure("stop both followers", f"stop followers {followers}", "UNDER_MIN_ISR_START", topic, stop_followers,
                     lambda v: len(v.isr) < 2, lambda e: True)
        for b in followers:
            c.start(b)
        self.wait("full ISRs", lambda: self.full_isr(topic) and self.full_isr(loss))
        now = self.watch.now(loss)
        leader, (stale, other) = now.leader, [b for b in now.isr if b != now.leader][:2]
        for b in (stale, other):
            c.stop(b)
        self.wait(f"the ISR of {loss} down to its leader", lambda: self.watch.now(loss).isr == [leader])
        c.kill(leader)
        c.start(stale)
        self.wait(f"{loss} offline", lambda: self.watch.now(loss).leader == -1)
        self.measure("unclean election", f"unclean election of broker {stale}", "LEADER_CHANGE", loss,
                     lambda: c.elect_unclean(loss, 0), lambda v: v.leader == stale,
                     lambda e: e.get("clean") is False)
        c.heal()
        self.wait("full ISRs", lambda: self.full_isr(topic) and self.full_isr(loss), timeout_s=180)




def run(args: argparse.Namespace, work: Path) -> list[Delay]:
    with scratch_clusters(work) as (watched, transport):
        view = KafkaView(watched.bootstrap_servers)
        topics = {"delay-isr": "2", "delay-loss": "1"}
        for topic, min_isr in topics.items():
            view.create_topic(topic, assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": min_isr})
        view.close()
        (work / "pipeline").mkdir()
        pipeline = Pipeline(work / "pipeline", watched, transport, include=["delay-.*"], topic_names="delay",
                            stale_after_s=600, hw_stalled_after_s=600,
                            overrides={"collector": {"interval_s": args.interval_s, "request_timeout_ms": 5000},
                                       "stream": {"trigger_interval_s": args.trigger_s}})
        producers = [SequencedProducer(watched.bootstrap_servers, "delay-isr", acks="all", interval_s=0.01),
                     SequencedProducer(watched.bootstrap_servers, "delay-loss", acks=1, interval_s=0.01)]
        watch = KafkaWatch(watched, list(topics)).start()
        events = pipeline.follow_events("replmon-bench-detection")
        delays: list[Delay] = []
        try:
            for producer in producers:
                producer.start()
            pipeline.start()
            if args.agents:
                pipeline.spawn_agents()
            log(f"pipeline started (collector every {args.interval_s:g} s, micro-batch every {args.trigger_s:g} s)")
            pipeline.wait_first_batch()
            for number in range(args.rounds):
                log(f"round {number + 1} of {args.rounds}")
                one = Round(watched, watch, events, "delay-isr", "delay-loss")
                one.run()
                delays += one.delays
        finally:
            events.close()
            watch.close()
            for producer in producers:
                producer.close()
            pipeline.stop()
        return delays


def report(delays: list[Delay], args: argparse.Namespace, command: str) -> str:
    lines = [f"## {HEADING}", "",
             f"`{command}`: {args.rounds} round(s) of the demo's faults, producers writing throughout; collector every "
             f"{args.interval_s:g} s, a micro-batch every {args.trigger_s:g} s, "
             + ("a log-dir agent beside each broker following its copy of the metadata log every 0.25 s"
                if args.agents else "no log-dir agent (the protocol sampler alone)")
             + ". *Kafka* is how long after the "
             "injection Kafka's own metadata showed the change (polled every 100 ms); *replmon* is how long after "
             "that the job reported the event (its `detected_time_ms`).", "",
             "| fault | event | Kafka (s, median) | replmon after Kafka (s): median | max | reported from |",
             "|---|---|---:|---:|---:|---|"]
    by_event: dict[tuple[str, str], list[Delay]] = {}
    for d in delays:
        by_event.setdefault((d.kind, d.event), []).append(d)
    for (kind, event), group in by_event.items():
        kafka = [d.kafka_s for d in group if d.kafka_s is not None]
        beyond = [d.beyond_kafka_s for d in group if d.beyond_kafka_s is not None]
        sources = ", ".join(sorted({d.source or "?" for d in group}))
        lines.append(f"| {kind} | {event} | {statistics.median(kafka):.1f} | {statistics.median(beyond):.1f} | "
                     f"{max(beyond):.1f} | {sources} |")
    everything = [d.beyond_kafka_s for d in delays if d.beyond_kafka_s is not None]
    lines += ["", f"All faults: replmon reported {statistics.median(everything):.1f} s (median), "
              f"{max(everything):.1f} s (max) after Kafka reacted. Plot: [bench_detection.png](bench_detection.png).",
              ""]
    return "\n".join(lines)


def plot(delays: list[Delay]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{d.event}\n{d.fault}" for d in delays]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(delays) + 1.5))
    y = range(len(delays))
    ax.barh(y, [d.kafka_s or 0 for d in delays], color="#999999", label="Kafka reacts (after the injection)")
    ax.barh(y, [d.beyond_kafka_s or 0 for d in delays], left=[d.kafka_s or 0 for d in delays], color="#1f77b4",
            label="replmon reports (after Kafka)")
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds after the fault was injected")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Fault to event, at the default intervals")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-s", type=float, default=5.0, help="collector.interval_s (default: its default)")
    parser.add_argument("--trigger-s", type=float, default=2.0, help="stream.trigger_interval_s (its default)")
    parser.add_argument("--no-agents", dest="agents", action="store_false",
                        help="no log-dir agents: ISR and leader changes from the protocol sampler alone")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ as it is")
    args = parser.parse_args()
    command = "python bench/bench_detection.py " + shlex.join(sys.argv[1:])
    with interrupt_on_sigterm(), tempfile.TemporaryDirectory(prefix="replmon-bench-detection-") as tmp:
        delays = run(args, Path(tmp))
    text = report(delays, args, command.strip())
    print(text)
    if not args.no_write:
        write_section(DOC, HEADING, text)
        plot(delays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
