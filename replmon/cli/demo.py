"""``replmon demo``: the pipeline on the local cluster with a workload, and a scripted fault timeline narrated
live in the terminal, ending with a summary of each injected fault, the event that saw it and the delay.

What runs: the local 3-broker cluster (started when it is not running, stopped again at the end if the demo
started it), a second one-broker local cluster that carries samples and events (the timeline takes most
watched brokers down, which would take a samples topic on the watched cluster down with them; it is deleted
afterwards), ``replmon collect``, a ``replmon agent`` beside each broker and ``replmon stream`` as
subprocesses, and two sequenced producers. Everything is stopped on the way out, also on Ctrl-C (SIGINT) or
SIGTERM.

``REPLMON_DEMO_FAST=1`` skips the pauses that let a reader follow (the tests use it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from replmon.core.errors import ReplmonError
from replmon.core.paths import state_dir
from replmon.core.processes import interrupt_on_sigterm
from replmon.testbed.harness import (
    JOB_START_TIMEOUT_S,
    EventFollower,
    Pipeline,
    StageExited,
    metric,
    start_transport,
)
from replmon.testbed.localcluster import LocalCluster, NodeState, cluster_dir_to_start, resolve_cluster_dir
from replmon.testbed.workload import SequencedProducer, committed_unreadable, log_held, readable_records
from streaming.exporter import Scraped

STEP_TIMEOUT_S = 90.0
"""Longest wait for Kafka to act or for replmon to report, per wait."""
MAX_RESTARTS = 2
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "green"}
SOURCE_TEXT = {"metadata_log": "the controller's metadata log", "sampler": "sampled", "log_dir": "read from disk"}
"""How each event's ``source`` reads in the narration."""

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


@dataclass
class Partition:
    leader: int
    isr: list[int]
    replicas: list[int]


@dataclass
class Outcome:
    """One injected fault and what replmon saw of it."""

    fault: str
    injected_ms: int
    expected: str
    event: dict[str, Any] | None = None
    note: str = ""

    @property
    def delay_s(self) -> float | None:
        if self.event is None:
            return None
        return (int(self.event["detected_time_ms"]) - self.injected_ms) / 1000


@dataclass
class Demo:
    fast: bool
    work: Path
    cluster_dir: Path | None = None
    """The local cluster to use (started when it is not running); None: the one `cluster up` started last."""
    console: Console = field(default_factory=lambda: console)
    started_at: float = field(default_factory=time.monotonic)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    cluster: LocalCluster | None = None
    cluster_was_running: bool = False
    transport: LocalCluster | None = None
    pipeline: Pipeline | None = None
    producers: list[SequencedProducer] = field(default_factory=list)
    follower: EventFollower | None = None
    admin: KafkaAdminClient | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    earlier: int = 0
    """Events dated before this run, received since the last line that told how many."""
    metrics: Scraped = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: time.strftime("%H%M%S"))
    _metrics_at: float = 0.0

    # ------------------------------------------------------------------ names
    @property
    def topic(self) -> str:
        return f"replmon-demo-{self.run_id}"

    @property
    def loss_topic(self) -> str:
        return f"replmon-demo-{self.run_id}-loss"

    def say(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.started_at:6.1f}s[/] {text}")

    def hold(self, seconds: float) -> None:
        """Let the reader look (not in fast mode); events keep arriving meanwhile."""
        if not self.fast:
            end = time.monotonic() + seconds
            self.wait_for("", lambda: time.monotonic() >= end, seconds + 5)

    # ------------------------------------------------------------------ setup
    def start_clusters(self) -> None:
        # the watched cluster is the default or last one, resolved before the transport starts; the transport
        # starts first because LocalCluster.up remembers the cluster it started last, and that must stay the
        # watched one (`replmon cluster status` afterwards)
        cdir, start_at = resolve_cluster_dir(self.cluster_dir), cluster_dir_to_start(self.cluster_dir)
        self.say("starting a one-broker local cluster for samples and events (deleted at the end)")
        self.transport = start_transport(self.work / "transport")
        exists = (cdir / "cluster.json").exists()
        self.cluster_was_running = exists and all(
            s.state == NodeState.RUNNING for s in LocalCluster.open(cdir).status())
        where = cdir if self.cluster_was_running else start_at
        if self.cluster_was_running:
            self.say(f"using the running local cluster in {cdir}")
        else:
            self.say(f"starting the local cluster in {where or 'its default directory'}")
        self.cluster = LocalCluster.up(where, die_with_parent=not self.cluster_was_running)
        if len(self.cluster.broker_ids) < 3:
            raise ReplmonError(f"the demo needs 3 brokers; the local cluster in {self.cluster.dir} has "
                               f"{len(self.cluster.broker_ids)} (`replmon cluster down --purge` and retry)")
        self.say(f"watched cluster: brokers {self.cluster.broker_ids} at {self.cluster.bootstrap_servers}")

    def start_pipeline(self) -> None:
        """``replmon collect`` and ``replmon stream`` on the demo topics, in their own sessions (a Ctrl-C reaches
        the demo alone, which stops them in order)."""
        assert self.cluster is not None and self.transport is not None
        self.pipeline = Pipeline(self.work, self.cluster, self.transport, include=[f"replmon-demo-{self.run_id}.*"],
                                 topic_names="replmon.demo", topic_partitions=1, stale_after_s=300,
                                 hw_stalled_after_s=300, new_session=True)
        self.pipeline.start()
        self.pipeline.spawn_agents()
        self.say(f"collector pid {self.pipeline.collector.pid}, streaming job pid {self.pipeline.job.pid}; "
                 f"metrics on http://127.0.0.1:{self.pipeline.metrics_port}/metrics; logs in {self.work}")

    def check_children(self) -> None:
        """A collector or job that died is started again (the job resumes from its checkpoint), twice at most:
        on a loaded machine Spark's Python workers can time out connecting back, which ends the job."""
        if self.pipeline is None:
            return
        for stage, code in self.pipeline.restart_dead(MAX_RESTARTS):
            self.say(f"[yellow]replmon {stage} exited with {code}; starting it again[/] "
                     f"(log: {self.pipeline.log(stage)})")
            self.say(f"replmon {stage} pid {self.pipeline.procs[stage].pid}")

    def start_workload(self) -> None:
        assert self.cluster is not None
        b1, b2, b3 = self.cluster.broker_ids[:3]
        admin = self.kafka_admin()
        admin.create_topics({
            self.topic: {"assignments": {0: [b1, b2, b3]}, "configs": {"min.insync.replicas": "2"}},
            self.loss_topic: {"assignments": {0: [b1, b2, b3]}, "configs": {"min.insync.replicas": "1"}},
        }, timeout_ms=15000)
        self.wait_for("leaders of the demo topics",
                      lambda: self.partition(self.topic).leader >= 0 and self.partition(self.loss_topic).leader >= 0,
                      30)
        for topic, acks in ((self.topic, "all"), (self.loss_topic, 1)):
            producer = SequencedProducer(self.cluster.bootstrap_servers, topic, acks=acks, interval_s=0.02)
            producer.start()
            self.producers.append(producer)
        self.say(f"producing to [bold]{self.topic}[/] (acks=all, min.insync.replicas=2) and "
                 f"[bold]{self.loss_topic}[/] (acks=1, min.insync.replicas=1), replicas {[b1, b2, b3]}")

    # ------------------------------------------------------------------ Kafka's view (to drive the timeline)
    def kafka_admin(self) -> KafkaAdminClient:
        assert self.cluster is not None
        if self.admin is None:
            self.admin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers, request_timeout_ms=5000,
                                          client_id="replmon-demo")
        return self.admin

    def partition(self, topic: str) -> Partition:
        try:
            result = self.kafka_admin().describe_topic_partitions([topic])
        except Exception:
            admin, self.admin = self.admin, None
            if admin is not None:
                with contextlib.suppress(Exception):
                    admin.close()
            raise
        p = result["topics"][0]["partitions"][0]
        return Partition(int(p["leader_id"]), list(p["isr_nodes"]), list(p["replica_nodes"]))

    # ------------------------------------------------------------------ replmon's view
    def poll(self) -> None:
        """Read new events (printing them) and, once a second, the job's metrics; waits up to 0.5 s."""
        assert self.pipeline is not None
        if self.follower is None:
            self.follower = self.pipeline.follow_events(client_id="replmon-demo")
        self.show_events(self.follower.poll(timeout_ms=500))
        if time.monotonic() - self._metrics_at >= 1.0:
            self._metrics_at = time.monotonic()
            with contextlib.suppress(OSError, ValueError, StageExited):
                self.metrics = self.pipeline.scrape(timeout_s=3)

    def show_events(self, events: list[dict[str, Any]]) -> None:
        """Keep ``events`` and print those of this run; the others are counted, for one line before the next table
        or step (:meth:`tell_earlier`). A log-dir agent publishes the metadata log from its newest snapshot on: a
        local cluster started before holds its earlier runs' broker fences and unfences, true events of their own
        times, not this run's."""
        for event in events:
            self.events.append(event)
            if int(event["event_time_ms"]) < self.started_ms:
                self.earlier += 1
            else:
                self.print_event(event)

    def tell_earlier(self) -> None:
        """One line for the events dated before this run received since the last such line."""
        if self.earlier:
            self.say(f"  [dim]{self.earlier} event(s) dated before this run (the watched cluster's metadata log since "
                     "its newest snapshot: earlier runs of this cluster), not shown[/]")
            self.earlier = 0

    def print_event(self, e: dict[str, Any]) -> None:
        style = SEVERITY_STYLE.get(e.get("severity", ""), "")
        where = f"{e['topic']}-{e['partition']}" if e.get("topic") is not None else e["cluster"]
        message = str(e["message"]).removeprefix(f"{where}: ")
        source = SOURCE_TEXT.get(str(e.get("source")), "")
        self.say(f"  [{style}]event {e['type']:<19}[/] {where}: {message}" + (f" [dim]({source})[/]" if source else ""))

    def wait_for(self, what: str, probe: Callable[[], Any], timeout_s: float = STEP_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while True:
            self.poll()
            try:
                value = probe()
            except Exception as exc:  # leaders move, brokers restart: not yet
                value, last = None, exc
            if value:
                return value
            if time.monotonic() > deadline:
                raise ReplmonError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                                   + (f" (last error: {last})" if last else "") + f"; logs in {self.work}")
            self.check_children()

    def wait_event(self, outcome: Outcome, match: Callable[[dict[str, Any]], bool]) -> None:
        """Wait for the first event at or after the injection that ``match`` accepts."""
        def found() -> dict[str, Any] | None:
            return next((e for e in self.events if match(e)
                         and int(e["detected_time_ms"]) >= outcome.injected_ms - 1000), None)

        try:
            outcome.event = self.wait_for(f"replmon to report {outcome.expected}", found)
        except ReplmonError as exc:
            outcome.note = str(exc)
            self.say(f"[red]not detected:[/] {exc}")
        else:
            assert outcome.event is not None
            self.say(f"[bold green]detected[/] {outcome.fault} as {outcome.event['type']} "
                     f"after {outcome.delay_s:.1f}s")

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(self.metrics, name, **labels)

    def partition_table(self) -> Table:
        table = Table(title="demo partitions, as replmon's job exports them", title_justify="left")
        for col in ("partition", "leader", "epoch", "ISR / replicas", "min ISR", "HW", "LEO", "HW lag", "state"):
            table.add_column(col, justify="left" if col in ("partition", "state") else "right")
        for topic in (self.topic, self.loss_topic):
            labels = {"topic": topic, "partition": "0"}

            def value(name: str, labels: dict[str, str] = labels) -> str:
                v = self.metric(name, **labels)
                return "-" if v is None else str(int(v))

            flags = [text for name, text in (("replmon_partition_offline", "[bold red]offline[/]"),
                                             ("replmon_partition_under_min_isr", "[red]under min ISR[/]"),
                                             ("replmon_partition_under_replicated", "[yellow]under-replicated[/]"))
                     if self.metric(name, **labels) == 1]
            state = " ".join(flags) or ("[green]healthy[/]" if self.metric("replmon_partition_isr_size", **labels)
                                        is not None else "[dim]no data yet[/]")
            table.add_row(f"{topic}-0", value("replmon_partition_leader"), value("replmon_partition_leader_epoch"),
                          f"{value('replmon_partition_isr_size')} / {value('replmon_partition_replicas')}",
                          value("replmon_partition_min_insync_replicas"), value("replmon_partition_high_watermark"),
                          value("replmon_partition_log_end_offset"), value("replmon_partition_hw_lag_messages"),
                          state)
        return table

    def live_view(self) -> RenderableType:
        failed = sum(p.ack.failed for p in self.producers)
        acked = sum(len(p.acknowledged()) for p in self.producers)
        return Group(self.partition_table(), f"[dim]workload: {acked} acknowledged, {failed} failed sends[/]")

    # ------------------------------------------------------------------ the timeline
    def step(self, number: int, title: str, explain: str) -> None:
        self.tell_earlier()
        self.console.rule(f"[bold]step {number}/5: {title}")
        self.say(explain)

    def inject(self, fault: str, expected: str, action: Callable[[], None]) -> Outcome:
        outcome = Outcome(fault, int(time.time() * 1000), expected)
        action()
        self.say(f"[bold magenta]injected:[/] {fault}")
        self.outcomes.append(outcome)
        return outcome

    def show_table(self) -> None:
        """Print the partition table once the job has exported a micro-batch newer than the events seen (the
        metrics of a batch are exported after its events are published)."""
        self.tell_earlier()
        if self.console.is_terminal:  # a terminal has the live table at the bottom
            return
        seen = self.metric("replmon_job_batches_total") or 0
        with contextlib.suppress(ReplmonError):
            self.wait_for("a newer micro-batch", lambda: (self.metric("replmon_job_batches_total") or 0) > seen + 1, 20)
        self.console.print(self.partition_table())

    def timeline(self) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        topic, loss_topic = self.topic, self.loss_topic

        def of(t: str, type_: str, pred: Callable[[dict[str, Any]], bool] = lambda e: True
               ) -> Callable[[dict[str, Any]], bool]:
            return lambda e: e.get("topic") == t and e["type"] == type_ and pred(e)

        # 1. pause a follower
        before = self.partition(topic)
        follower = before.replicas[-1]
        self.step(1, "pause a follower", f"broker {follower} gets SIGSTOP: it stops fetching; after "
                  "replica.lag.time.max.ms (3 s here) the leader drops it from the ISR. The topic keeps working.")
        out = self.inject(f"pause broker {follower} (follower)", "ISR_SHRINK", lambda: cluster.pause(follower))
        self.wait_event(out, of(topic, "ISR_SHRINK", lambda e: follower in e.get("brokers", [])))
        self.show_table()
        self.hold(4)

        # 2. resume it
        self.step(2, "resume the follower", f"broker {follower} gets SIGCONT, catches up and rejoins the ISR.")
        out = self.inject(f"resume broker {follower}", "ISR_EXPAND", lambda: cluster.resume(follower))
        self.wait_event(out, of(topic, "ISR_EXPAND", lambda e: follower in e.get("brokers", [])))
        self.show_table()
        self.hold(4)

        # 3. kill the leader
        leader = self.wait_for("the ISR back to full", lambda: (p := self.partition(topic)).leader >= 0
                               and len(p.isr) == len(p.replicas) and p).leader
        self.step(3, "kill the leader", f"broker {leader} leads {topic}-0 and gets SIGKILL: the controller "
                  "fences it and elects a leader from the ISR (a clean election, nothing committed is lost).")
        out = self.inject(f"kill broker {leader} (leader)", "LEADER_CHANGE (clean)", lambda: cluster.kill(leader))
        self.wait_event(out, of(topic, "LEADER_CHANGE", lambda e: e.get("previous_leader") == leader
                                and e.get("clean") is True))
        self.show_table()
        self.say(f"restarting broker {leader}")
        cluster.start(leader, wait=False)
        self.wait_for(f"broker {leader} back in the ISRs", lambda: all(
            len((p := self.partition(t)).isr) == len(p.replicas) for t in (topic, loss_topic)))
        self.hold(3)

        # 4. below min ISR
        p = self.partition(topic)
        followers = [b for b in p.replicas if b != p.leader]
        self.step(4, "drop below min.insync.replicas", f"brokers {followers} (the followers of {topic}-0) stop; "
                  "the ISR is the leader alone, below min.insync.replicas=2: acks=all writes fail.")
        def stop_followers() -> None:
            for b in followers:
                cluster.stop(b)

        out = self.inject(f"stop brokers {followers} (ISR 1 < min ISR 2)", "UNDER_MIN_ISR_START", stop_followers)
        self.wait_event(out, of(topic, "UNDER_MIN_ISR_START"))
        failed = sum(pr.ack.failed for pr in self.producers[:1])
        self.say(f"acks=all producer: {failed} sends failed so far")
        self.show_table()
        self.say(f"restarting brokers {followers}")
        for b in followers:
            cluster.start(b, wait=False)
        end = of(topic, "UNDER_MIN_ISR_END")
        self.wait_for("UNDER_MIN_ISR_END", lambda: any(end(e) for e in self.events))
        self.wait_for("every replica back in the ISRs", lambda: all(
            len((p := self.partition(t)).isr) == len(p.replicas) for t in (topic, loss_topic)))
        self.hold(3)

        # 5. unclean election with loss
        self.unclean_election(of)

    def unclean_election(self, of: Callable[..., Callable[[dict[str, Any]], bool]]) -> None:
        assert self.cluster is not None
        cluster, topic = self.cluster, self.loss_topic
        producer = self.producers[1]
        p = self.partition(topic)
        leader, (stale, other) = p.leader, [b for b in p.replicas if b != p.leader][:2]
        self.step(5, "unclean election with data loss", f"{topic} has min.insync.replicas=1 and an acks=1 "
                  f"producer. Brokers {stale} and {other} stop; leader {leader} keeps accepting writes alone, and "
                  f"they count as committed. Then leader {leader} dies, {stale} comes back and is elected "
                  "UNCLEAN: what only the old leader had is gone.")
        for b in (stale, other):
            cluster.stop(b)
        self.wait_for(f"the ISR of {topic}-0 to shrink to the leader", lambda: self.partition(topic).isr == [leader])
        producer.wait_acknowledged(150)  # the producer never pauses: writes go on through the whole fault
        out = self.inject(f"kill leader {leader}, unclean election of broker {stale}", "LEADER_CHANGE (unclean)",
                          lambda: cluster.kill(leader))
        old_end = max(offset for _, offset in producer.acknowledged().values()) + 1
        cluster.start(stale)
        self.wait_for(f"{topic}-0 offline", lambda: self.partition(topic).leader == -1)
        cluster.elect_unclean(topic, 0)
        self.wait_for(f"broker {stale} to lead {topic}-0", lambda: self.partition(topic).leader == stale)
        self.wait_event(out, of(topic, "LEADER_CHANGE", lambda e: e.get("clean") is False))
        loss = Outcome("committed messages lost", out.injected_ms, "DATA_LOSS")
        self.outcomes.append(loss)
        self.wait_event(loss, of(topic, "DATA_LOSS"))
        self.wait_for(f"the producer's writes on broker {stale} past where broker {leader}'s log ended",
                      lambda: self.high_watermark(topic) > old_end)
        # committed: all the old leader held (it led alone; a write in flight at the kill is committed and was
        # never acknowledged), read from its disk before it comes back. Not what the acks=1 producer saw
        # acknowledged: a write the leader of step 3 acknowledged alone and died with was never committed.
        held = log_held(cluster.broker_log_dir(leader) / f"{topic}-0")
        lost = committed_unreadable(producer.committed_acknowledged(), held,
                                    readable_records(cluster.live_bootstrap_servers, topic))

        def replmon_says() -> int:
            return sum(e.get("committed_lost") or 0 for e in self.events if of(topic, "DATA_LOSS")(e))

        with contextlib.suppress(ReplmonError):  # the old leader's disk may add a last part
            self.wait_for("replmon's count of the loss", lambda: replmon_says() >= len(lost), 30)
        loss.note = f"{len(lost)} committed messages unreadable; replmon: {replmon_says()} committed lost"
        offsets = sorted(offset for _, _, offset in lost)
        where = f" (offsets {offsets[0]} to {offsets[-1]})" if offsets else ""
        ended = max((offset for _, _, offset in held), default=-1) + 1
        self.say(f"a consumer can no longer read {len(lost)} committed messages{where}; replmon reports "
                 f"committed_lost={replmon_says()}; broker {leader}'s log ended at offset {ended}")
        self.show_table()
        self.say("bringing every broker back")
        for b in (leader, other):
            cluster.start(b, wait=False)
        self.wait_for("every broker registered", lambda: set(cluster.registered_brokers()) >= set(cluster.broker_ids))

    def high_watermark(self, topic: str) -> int:
        from kafka.protocol.consumer.offsets import OffsetSpec

        tp = TopicPartition(topic, 0)
        return int(self.kafka_admin().list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset)

    # ------------------------------------------------------------------ summary and cleanup
    def summary(self) -> Table:
        table = Table(title="summary: each injected fault and what replmon saw", title_justify="left")
        for col in ("#", "fault injected", "seen as", "detected after", "detail"):
            table.add_column(col, justify="right" if col in ("#", "detected after") else "left",
                             no_wrap=col != "detail")
        for i, o in enumerate(self.outcomes, 1):
            if o.event is None:
                table.add_row(str(i), o.fault, f"[red]NOT DETECTED[/] (expected {o.expected})", "-", o.note)
                continue
            seen = o.event["type"] + ("" if o.event.get("clean") is None
                                      else " (clean)" if o.event["clean"] else " (UNCLEAN)")
            message = str(o.event["message"]).removeprefix(f"{o.event.get('topic')}-{o.event.get('partition')}: ")
            table.add_row(str(i), o.fault, f"[green]{seen}[/]", f"{o.delay_s:.1f}s", o.note or message)
        return table

    def cleanup(self) -> None:
        started = _descendants()  # before anything stops: a child killed below orphans its own children
        if self.pipeline is not None:  # its stages stop while the producers close (each may take seconds)
            self.pipeline.terminate()
        with ThreadPoolExecutor(max_workers=max(1, len(self.producers))) as pool:
            for producer in self.producers:
                pool.submit(producer.close)  # SequencedProducer.close is bounded and never raises
        if self.follower is not None:
            self.follower.close()
        if self.admin is not None:
            with contextlib.suppress(Exception):
                self.admin.close()
        if self.pipeline is not None:
            self.pipeline.stop(grace_s=30)
        if self.cluster is not None:
            if self.cluster_was_running:  # leave it as it was found: every broker up, no demo topics
                with contextlib.suppress(Exception):
                    self.cluster.heal()
                    admin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers,
                                             request_timeout_ms=10000, client_id="replmon-demo")
                    try:
                        admin.delete_topics([self.topic, self.loss_topic], timeout_ms=10000)
                    finally:
                        admin.close()
            else:
                self.cluster.down()
        if self.transport is not None:
            self.transport.down(purge=True)
        _stop_processes(started + _descendants())


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _stop_processes(procs: list[psutil.Process], grace_s: float = 10.0) -> None:
    """What is left of what the demo started (a Spark Python worker, a JVM whose parent was killed): SIGTERM,
    then SIGKILL after ``grace_s``; returns when all are gone."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM: the cleanup must run to its end (each of its waits is bounded)."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def demo(cluster_dir: Path | None = None) -> int:
    fast = os.environ.get("REPLMON_DEMO_FAST", "") not in ("", "0")
    root = state_dir() / "demo"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    d = Demo(fast=fast, work=work, cluster_dir=cluster_dir)
    d.console.rule("[bold]replmon demo")
    d.say("a real Kafka cluster, replmon's collector and streaming job, a workload, and five faults")
    ok = False
    try:
        with interrupt_on_sigterm(sigint=True):  # also when started in the background by a script (SIGINT ignored)
            d.start_clusters()
            d.start_pipeline()
            d.start_workload()
            d.wait_for("the streaming job's first micro-batch (Spark starts in 20-60 s, minutes on a loaded machine)",
                       lambda: d.metric("replmon_partition_isr_size", topic=d.topic, partition="0") == 3,
                       JOB_START_TIMEOUT_S)
            d.say("replmon sees the demo partitions")
            d.show_table()
            live = Live(get_renderable=d.live_view, console=d.console, refresh_per_second=2, transient=True) \
                if d.console.is_terminal else contextlib.nullcontext()
            with live:
                d.timeline()
            d.console.print(d.summary())
            ok = len(d.outcomes) == 6 and all(o.event is not None for o in d.outcomes)
            d.say("every fault was detected" if ok else "[red]some faults were not detected[/]")
    except KeyboardInterrupt:
        d.console.print("[yellow]interrupted[/]")
        if d.outcomes:
            d.console.print(d.summary())
        with _shielded():
            d.say("cleaning up")
            d.cleanup()
        d.say("stopped every process the demo started")
        return 130
    except BaseException:
        with _shielded():
            d.cleanup()
        raise
    with _shielded():
        d.say("cleaning up")
        d.cleanup()
    kept = "" if d.cluster_was_running else ", the local cluster included (`replmon cluster up` keeps one)"
    d.say(f"stopped every process the demo started{kept}")
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        d.say(f"logs kept in {work}")
    return 0 if ok else 1
