"""End to end on the real cluster: faults caused on Kafka -> collector -> samples topic -> Spark job -> the
/metrics endpoint, the events topic, and a real Prometheus (127.0.0.1, scraping the job and the collector with
the repo's scrape config and alert rules) whose alerts are read through its HTTP API; last, every dashboard panel
query answered from this live Prometheus. Expected values come from Kafka's own view
(replmon.testbed.kafka_view) and from the sequenced producer and consumer, never from replmon.

The tests run in file order: the dashboard check relies on the scenarios before it (an unclean election with
committed data lost, a divergent lineage) having put data into Prometheus. The job killed and restarted from its
checkpoint, with a broker fault while it is down, is tests/test_job_restarts.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kafka import KafkaProducer, TopicPartition

from dashboards.build import build_all
from replmon.testbed.harness import metric
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster, NodeState
from replmon.testbed.workload import SequencedProducer
from tests.pipeline import (
    DEADLINE_S,
    OLD_LEADER,
    OTHER,
    STALE_REPLICA,
    TOPIC_PREFIX,
    WAITING_FOR_SAMPLES,
    Pipeline,
    cause_unclean_loss,
    events_of,
    line_count,
    logged_truncation,
    of,
)
from tests.prometheus import DATA_LOSS, PROMETHEUS_DIR, ROOT, UNCLEAN, UNDER_REPLICATED, Prometheus

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

TRUNCATION_SEEN_WITHIN_S = 15
"""From the broker's own log line of its truncation to the agent's sample of its truncated log (1 s intervals; a
loaded machine delays a cycle). Timed from the broker's start command instead, the JVM start and log recovery
(5-20 s) would make the figure the machine's, not the agent's."""
FRESH_S = 4.0
"""How old the job's newest figure of a partition may be here: a 1 s sampling interval, a 1 s trigger, the
micro-batch itself."""


@pytest.fixture
def e2e_topic(topic_name: str) -> str:
    return TOPIC_PREFIX + topic_name


def test_a_job_started_before_any_collector_waits_for_the_samples_topic_in_one_line(pipeline: Pipeline) -> None:
    """The session's pipeline started its job on a transport cluster without the samples topic, and the collector
    only once the job said it waits (tests.pipeline.running_pipeline): the job read from the topic the collector
    created, without a query failure on the way (Spark's Kafka source failed on the missing topic, a Java stack
    trace each time, until the job gave up)."""
    log = pipeline.log("stream").read_text(errors="replace")
    started = log.index("replmon stream: reading ")
    before = log[:started]
    assert before.count(WAITING_FOR_SAMPLES) == 1
    assert f"{WAITING_FOR_SAMPLES}{pipeline.samples_topic} on {pipeline.transport.bootstrap_servers}:" in before
    assert "a query failed" not in before and "UnknownTopicOrPartition" not in before and "\tat " not in before
    assert pipeline.metric("replmon_job_batches_total")


def test_prometheus_scrapes_both_targets_with_the_rules_loaded(prometheus: Prometheus) -> None:
    targets = {t["labels"]["job"]: t for t in prometheus.api("targets")["activeTargets"]}
    assert set(targets) == {"replmon-stream", "replmon-collector"}
    loaded = {r["name"] for g in prometheus.api("rules")["groups"] for r in g["rules"]}
    expected = {r["alert"] for g in yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())["groups"]
                for r in g["rules"]}
    assert loaded == expected
    wait_until(lambda: prometheus.query("replmon_job_batches_total"), 30, "the job's series in Prometheus")
    wait_until(lambda: prometheus.query("replmon_collector_partitions"), 30, "the collector's series")


def test_paused_follower_gives_isr_shrink_the_gauge_drop_and_the_alert_then_expand(
    pipeline: Pipeline, prometheus: Prometheus, healthy_cluster: LocalCluster, kafka_view: KafkaView,
    e2e_topic: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    # LogAppendTime: Kafka stamps each record with the leader's append time, the ground truth of the time lag below
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2, 3]}, configs={"message.timestamp.type": "LogAppendTime"})
    producer = producer_factory(e2e_topic)
    producer.wait_acknowledged(50)  # keeps producing: an idle follower never leaves the ISR
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "the ISR-size gauge at 3")
    wait_until(lambda: prometheus.query(f'replmon_topic_under_replicated_partitions{{topic="{e2e_topic}"}} == 0'),
               DEADLINE_S, "the topic healthy in Prometheus")
    assert not prometheus.alerts(UNDER_REPLICATED, topic=e2e_topic)

    healthy_cluster.pause(3)
    paused_at = time.time()
    wait_until(lambda: 3 not in kafka_view.partition(e2e_topic).isr, 30, "Kafka to shrink the ISR")
    # The follower's time lag: how long ago the leader's log ended at the follower's log end offset as the
    # collector last read it (a paused broker answers no reading; its last one came up to a cycle before the
    # pause, later still on a loaded machine). Ground truth: Kafka's append time of the first message the follower
    # lacks, against the cluster's newest sample time (the partition's, or up to a cycle newer). The figure must
    # follow the pause, and exceed the truth by no more than the interpolation between the leader's remembered
    # log end offsets can (a producer writing unevenly).
    def lag_and_truth() -> tuple[float, float] | None:
        scraped = pipeline.scrape()
        lag = metric(scraped, "replmon_replica_lag_seconds", topic=e2e_topic, partition="0", broker="3")
        behind = metric(scraped, "replmon_replica_lag_messages", topic=e2e_topic, partition="0", broker="3")
        leader_leo = metric(scraped, "replmon_partition_log_end_offset", topic=e2e_topic, partition="0")
        sampled = metric(scraped, "replmon_cluster_last_sample_timestamp_seconds", cluster="local")
        if lag is None or behind is None or leader_leo is None or sampled is None:
            return None
        appended_ms = producer.appended_at_ms(0, int(leader_leo - behind))
        paused_for = sampled - paused_at
        if appended_ms is None or paused_for < 2 * FRESH_S or lag < paused_for - FRESH_S:
            return None
        return lag, sampled - appended_ms / 1000

    time_lag, truth = wait_until(lag_and_truth, DEADLINE_S, "a time lag of broker 3 that follows the pause")
    assert time_lag <= truth + 1.5, (time_lag, truth)
    shrink = pipeline.wait_event("ISR_SHRINK", of(e2e_topic, "ISR_SHRINK"))
    assert shrink["brokers"] == [3]
    assert shrink["isr"] == kafka_view.partition(e2e_topic).isr
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 2,
               DEADLINE_S, "the ISR-size gauge at 2")
    assert pipeline.metric("replmon_partition_under_replicated", topic=e2e_topic, partition="0") == 1
    assert pipeline.metric("replmon_replica_in_isr", topic=e2e_topic, partition="0", broker="3") == 0
    alert = prometheus.wait_firing(UNDER_REPLICATED, topic=e2e_topic)
    assert alert["labels"]["cluster"] == "local" and alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) == 1.0  # one under-replicated partition
    in_isr = prometheus.query(f'replmon_replica_in_isr{{topic="{e2e_topic}", broker="3"}}')
    assert [float(s["value"][1]) for s in in_isr] == [0.0]

    healthy_cluster.resume(3)
    expand = pipeline.wait_event("ISR_EXPAND", of(e2e_topic, "ISR_EXPAND"))
    assert expand["brokers"] == [3]
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "the ISR-size gauge back at 3")
    wait_until(lambda: not prometheus.alerts(UNDER_REPLICATED, topic=e2e_topic), DEADLINE_S,
               f"{UNDER_REPLICATED} to resolve after the resume", interval_s=1.0)
    assert_events_command_lists(pipeline, e2e_topic)


def test_killed_leader_gives_leader_change_with_the_next_epoch(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(e2e_topic, assignment={0: [2, 3, 1]})
    producer_factory(e2e_topic).wait_acknowledged(50)
    before = kafka_view.partition(e2e_topic)
    wait_until(lambda: pipeline.metric("replmon_partition_leader_epoch", topic=e2e_topic, partition="0")
               == before.leader_epoch, DEADLINE_S, "the leader epoch gauge")

    healthy_cluster.kill(2)
    after = wait_until(lambda: (v := kafka_view.partition(e2e_topic)).leader not in (-1, 2) and v, 30,
                       "Kafka to elect a new leader")
    change = pipeline.wait_event("LEADER_CHANGE", of(e2e_topic, "LEADER_CHANGE"))
    assert change["previous_leader"] == 2 and change["leader"] == after.leader
    assert change["leader_epoch"] == before.leader_epoch + 1 == after.leader_epoch
    assert change["clean"] is True
    wait_until(lambda: pipeline.metric("replmon_partition_leader_epoch", topic=e2e_topic, partition="0")
               == after.leader_epoch, DEADLINE_S, "the leader epoch gauge at +1")


def test_a_reassignment_is_two_replicas_changes_and_no_shrink_nor_under_replication_while_it_copies(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    """The partition moves from brokers [1, 2] to [1, 3] under a replication throttle, the producer writing
    throughout. While Kafka's controller lists the move in flight (broker 3 added, outside the ISR, copying; broker
    2 to be removed), the job shows its three replicas, two in sync, and not under-replicated: Kafka's own count
    leaves out the replicas being added. It shows the move in flight (the partition reassigning, counted in the
    cluster's reassigning partitions; broker 3's replica being added, the others not) and the copy as broker 3's
    replica lag alone: broker 3's largest replica lag, what ReplmonReplicaLagHigh watches, leaves it out. Its
    REPLICAS_CHANGE names the move as the controller lists it. Once the throttle is lifted and Kafka has completed
    the move, a second REPLICAS_CHANGE gives Kafka's new replicas; broker 3 joined the ISR (ISR_EXPAND) and broker
    2, removed, is no ISR_SHRINK; nothing is reassigning any more."""
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2]})
    producer = producer_factory(e2e_topic)
    producer.wait_acknowledged(50)
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 2,
               DEADLINE_S, "the ISR-size gauge at 2")
    # out-of-sync replicas of the topic copy at 1 byte/s once past their quota: broker 3 cannot catch up. The
    # quota is counted after a fetch, and one fetch brings up to replica.fetch.max.bytes (1 MiB, at least a batch):
    # the log holds more than that first, or a first fetch could bring the new replica all the way
    kafka_view.set_configs("topic", e2e_topic, {"leader.replication.throttled.replicas": "*",
                                                "follower.replication.throttled.replicas": "*"})
    throttles = {"leader.replication.throttled.rate": "1", "follower.replication.throttled.rate": "1"}
    for broker in (1, 3):
        kafka_view.set_configs("broker", str(broker), dict(throttles))
    bulk = KafkaProducer(bootstrap_servers=healthy_cluster.bootstrap_servers, acks="all")
    try:
        for _ in range(4):
            bulk.send(e2e_topic, os.urandom(700_000), partition=0).get(timeout=30)
    finally:
        bulk.close()
    try:
        kafka_view.call(lambda admin: admin.alter_partition_reassignments({TopicPartition(e2e_topic, 0): [1, 3]}))
        assert wait_until(lambda: kafka_view.reassignment(e2e_topic), 30, "the move in flight") == ([3], [2])

        def in_flight() -> bool:
            scraped = pipeline.scrape()
            figures = [metric(scraped, name, topic=e2e_topic, partition="0") for name in (
                "replmon_partition_replicas", "replmon_partition_isr_size", "replmon_partition_under_replicated")]
            return figures == [3, 2, 0]

        wait_until(in_flight, DEADLINE_S, "the job's three replicas, two in sync, not under-replicated")
        # ... shown while Kafka still copies: broker 3 outside the ISR, the move listed
        assert kafka_view.reassignment(e2e_topic) == ([3], [2])
        during = kafka_view.partition(e2e_topic)
        assert sorted(during.replicas) == [1, 2, 3] and sorted(during.isr) == [1, 2]
        copying: list[Any] = []

        def copy_shown() -> bool:
            """The move in flight in one scrape, and broker 3's copy behind as its replica's lag but not as its
            broker's largest replica lag (which would be at least the copy's, had it counted)."""
            scraped = pipeline.scrape()
            partition = {"topic": e2e_topic, "partition": "0"}
            copying[:] = [
                metric(scraped, "replmon_partition_reassigning", **partition),
                [metric(scraped, "replmon_replica_adding", **partition, broker=str(b)) for b in (1, 2, 3)],
                metric(scraped, "replmon_cluster_reassigning_partitions", cluster="local"),
                metric(scraped, "replmon_replica_lag_messages", **partition, broker="3"),
                metric(scraped, "replmon_broker_max_replica_lag_messages", cluster="local", broker="3")]
            reassigning, adding, in_cluster, lag, broker_max = copying
            return (reassigning == 1 and adding == [0, 0, 1] and (in_cluster or 0) >= 1
                    and lag is not None and broker_max is not None and lag > 0 and lag > broker_max)

        try:
            wait_until(copy_shown, DEADLINE_S, "the move in flight and broker 3's copy out of its broker's max lag")
        except AssertionError:
            pytest.fail(f"scraped (reassigning, adding of brokers 1-3, cluster's reassigning, broker 3's replica "
                        f"lag, broker 3's max replica lag): {copying}")
        assert kafka_view.reassignment(e2e_topic) == ([3], [2])  # ... while Kafka's controller still lists it
        started = pipeline.wait_event("the move's REPLICAS_CHANGE", of(e2e_topic, "REPLICAS_CHANGE"))
        assert (sorted(started["replicas"]), started["previous_replicas"], started["brokers"]) == ([1, 2, 3], [1, 2],
                                                                                                   [3])
        assert (started["adding_replicas"], started["removing_replicas"]) == ([3], [2])
    finally:
        for broker in (1, 3):
            kafka_view.set_configs("broker", str(broker), dict.fromkeys(throttles))
    # (one read: brokers apply the controller's records a moment apart, one may still show the move in flight)
    after = wait_until(lambda: kafka_view.reassignment(e2e_topic) is None
                       and sorted((v := kafka_view.partition(e2e_topic)).replicas) == [1, 3] and v,
                       60, "Kafka to complete the move")
    ended = pipeline.wait_event("the completion's REPLICAS_CHANGE",
                                lambda e: of(e2e_topic, "REPLICAS_CHANGE")(e) and sorted(e["replicas"]) == [1, 3])
    assert ended["replicas"] == after.replicas
    assert (sorted(ended["previous_replicas"]), ended["brokers"]) == ([1, 2, 3], [2])
    def moved() -> bool:
        scraped = pipeline.scrape()
        partition = {"topic": e2e_topic, "partition": "0"}
        return (metric(scraped, "replmon_partition_replicas", **partition) == 2
                and metric(scraped, "replmon_partition_under_replicated", **partition) == 0
                and metric(scraped, "replmon_partition_reassigning", **partition) == 0
                and [metric(scraped, "replmon_replica_adding", **partition, broker=str(b)) for b in (1, 3)] == [0, 0]
                and metric(scraped, "replmon_cluster_reassigning_partitions", cluster="local") == 0)

    wait_until(moved, DEADLINE_S, "the job's two replicas after the move, nothing reassigning")
    assert [e["brokers"] for e in events_of(pipeline, e2e_topic, "ISR_EXPAND")] == [[3]]
    assert events_of(pipeline, e2e_topic, "ISR_SHRINK") == []
    producer.wait_acknowledged(50)  # it wrote throughout, and still does


def test_unclean_election_gives_unclean_leader_change_the_exact_committed_loss_and_its_alerts(
    agents: None, pipeline: Pipeline, prometheus: Prometheus, healthy_cluster: LocalCluster, kafka_view: KafkaView,
    e2e_topic: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    """tests.pipeline.cause_unclean_loss at a tight timing (follower 2 stops ~1.5 s after follower 3, the leader
    dies ~2 s after that; the chaos test runs random ones), the producer writing on throughout: the events, the
    counters and the alerts hold the consumer's ground truth; the agent beside the dead old leader reads its log
    and the job reports the divergence before the broker comes back; back, it truncates where Kafka's own log line
    says, reported once with Kafka's figure."""
    loss = cause_unclean_loss(healthy_cluster, kafka_view, e2e_topic, producer_factory, before_second=150,
                              before_kill=200)
    lost, first, end = loss.lost, loss.lost_offsets[0], loss.lost_offsets[-1] + 1

    change = pipeline.wait_event("UNCLEAN LEADER_CHANGE", lambda e: of(e2e_topic, "LEADER_CHANGE")(e)
                                 and e["leader"] == STALE_REPLICA)
    assert change["clean"] is False
    assert change["forced"] is True, "the topic keeps Kafka's default unclean.leader.election.enable=false"
    wait_until(lambda: pipeline.metric("replmon_committed_messages_lost_total", cluster="local", topic=e2e_topic)
               == len(lost), DEADLINE_S, "the committed-loss counter at the ground truth")
    losses = events_of(pipeline, e2e_topic, "DATA_LOSS")
    assert sum(e["committed_lost"] for e in losses) == len(lost)
    assert (losses[0]["offset_start"], losses[-1]["offset_end"]) == (first, end)
    assert all(e["previous_leader"] == OLD_LEADER and e["severity"] == "critical" for e in losses)
    assert pipeline.metric("replmon_unclean_leader_elections_total", cluster="local", topic=e2e_topic) == 1
    # once the whole count is scraped the alert's value, the counter itself (a new series), is the loss
    alert = wait_until(lambda: [a for a in prometheus.alerts(DATA_LOSS, "firing", topic=e2e_topic)
                                if float(a["value"]) == len(lost)], DEADLINE_S,
                       "the data-loss alert at the messages lost", interval_s=1.0)[0]
    assert alert["labels"]["cluster"] == "local" and alert["labels"]["severity"] == "critical"
    assert prometheus.wait_firing(UNCLEAN, topic=e2e_topic)["labels"]["severity"] == "critical"

    # The old leader is still down, its log holding what only it had: read from its disk, the divergence and the
    # offsets it will truncate are reported before it comes back.
    divergence = pipeline.wait_event("EPOCH_DIVERGENCE of the stopped old leader", lambda e: of(
        e2e_topic, "EPOCH_DIVERGENCE")(e) and e["brokers"][0] == OLD_LEADER)
    assert divergence["leader"] == STALE_REPLICA
    assert divergence["leader_epoch"] == kafka_view.partition(e2e_topic).leader_epoch
    assert (divergence["offset_start"], divergence["offset_end"]) == (first, end)
    assert divergence["severity"] == "critical" and divergence["uncommitted_lost"] == 0
    assert healthy_cluster.node_state(OLD_LEADER) == NodeState.STOPPED, "reported before the old leader truncates"

    # Broker 1 back: it truncates where broker 2's log leaves its epoch (its own log line says where), reported
    # once with Kafka's figure, none of it uncommitted (it led alone), read from its disk within seconds.
    log = healthy_cluster.node(OLD_LEADER).log_file
    restart_line = line_count(log)
    healthy_cluster.start(OLD_LEADER)
    healthy_cluster.start(OTHER)
    truncated = wait_until(lambda: logged_truncation(log, e2e_topic, restart_line), 60,
                           "broker 1 to truncate (its log line)")
    assert truncated.offset == first, "where broker 2's log leaves broker 1's epoch"
    (truncation,) = wait_until(lambda: [e for e in events_of(pipeline, e2e_topic, "LOG_TRUNCATION")
                                        if e["brokers"] == [OLD_LEADER]], DEADLINE_S, "broker 1's LOG_TRUNCATION")
    assert (truncation["offset_start"], truncation["offset_end"]) == (truncated.offset, end)
    assert truncation["uncommitted_lost"] == 0
    seen_after_s = (truncation["event_time_ms"] - truncated.logged_ms) / 1000
    print(f"LOG_TRUNCATION sampled {seen_after_s:.1f} s after broker 1 logged its truncation")
    # a scan's time is its start, so it may precede the log line it saw by the scan's length; a zone misread is hours
    assert -5 < seen_after_s < TRUNCATION_SEEN_WITHIN_S, "the agent reads the truncated log within seconds"
    assert all(e["uncommitted_lost"] == 0 and e["severity"] == "critical"
               for e in events_of(pipeline, e2e_topic, "EPOCH_DIVERGENCE"))


# Panel queries that may legitimately return no data in this run, by the metric that has no series: counters
# that replmon creates on their first increment, and nothing here need increment them.
NO_DATA_METRICS = {
    "replmon_quarantined_samples_total": "only when a sample was quarantined since the job's last start (the "
                                         "bad-samples test comes after this one)",
    "replmon_collector_cycles_skipped_total": "no sampling cycle overran its 1 s interval",
    "replmon_collector_errors_total": "only when the collector met an error this run",
    "replmon_uncommitted_messages_lost_total": "only when a leader change discarded offsets never committed: "
                                               "writes in flight on the old leader at the fault "
                                               "(tests/test_failover_under_load.py makes one and checks the count)",
}


# ------------------------------------------------------------------------------------------------ dashboards
def _label_values(prometheus: Prometheus, label: str, match: str) -> list[str]:
    values: list[str] = prometheus.api(f"label/{label}/values", **{"match[]": match})
    return sorted(values)


def _variables(prometheus: Prometheus) -> dict[str, str]:
    """One concrete choice per template variable, as Grafana would offer it from this Prometheus: the
    values come from the variables' own label_values() queries; the topic is one with an unclean election,
    so that every partition panel and annotation has something to show."""
    clusters = _label_values(prometheus, "cluster", "replmon_cluster_partitions")
    # the watched local cluster; tests on the same pipeline may add others (the hostile-input test's "hostile")
    assert "local" in clusters, clusters
    topics = _label_values(prometheus, "topic", 'replmon_partition_isr_size{cluster="local"}')
    lossy = set(_label_values(prometheus, "topic", "replmon_committed_messages_lost_total"))
    assert lossy & set(topics), f"no topic with lost messages among {topics}: did the unclean test run?"
    topic = sorted(lossy & set(topics))[0]
    partitions = _label_values(prometheus, "partition",
                               f'replmon_partition_isr_size{{cluster="local", topic="{topic}"}}')
    brokers = _label_values(prometheus, "broker", 'replmon_broker_replicas{cluster="local"}')
    assert partitions == ["0"] and brokers == ["1", "2", "3"]
    return {"cluster": "local", "topic": topic, "partition": "0", "broker": "2", "datasource": "prometheus",
            "__rate_interval": "1m", "__interval": "1s", "__range": "5m"}


def _substitute(expr: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)


def _panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expression) of every panel target."""
    out: list[tuple[str, str, str]] = []

    def walk(uid: str, panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            out.extend((uid, panel["title"], t["expr"]) for t in panel.get("targets") or [] if t.get("expr"))
            walk(uid, panel.get("panels") or [])

    for uid, data in build_all().items():
        walk(uid, data["panels"])
    return out


# Panels that filter with a comparison show what is wrong *now*: on a healthy cluster they are empty by design.
# Each one's condition is caused on the cluster before its query is checked, by the variable it depends on.
CONDITION_PANELS = {
    ("replmon-brokers", "Replicas out of ISR"): "a follower on the selected broker paused until its replica "
                                                "leaves the ISR",
}
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?![^{]*})")  # outside label matchers


def _wait_all_have_data(prometheus: Prometheus, queries: list[tuple[str, str, str]]) -> None:
    empty: list[tuple[str, str, str]] = []

    def all_have_data() -> bool:
        empty[:] = [(u, t, q) for u, t, q in queries if not prometheus.query(q)]
        return not empty

    try:  # a rate() over a series born seconds ago needs its second scrape
        wait_until(all_have_data, 30, "every panel query to return data", interval_s=1.0)
    except AssertionError:
        pytest.fail("panel queries without data:\n" + "\n".join(f"{u} / {t}: {q}" for u, t, q in empty))


def test_every_dashboard_panel_query_returns_data_from_the_live_run(
    prometheus: Prometheus, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    values = _variables(prometheus)
    queries = _panel_queries()
    committed = {p.stem for p in (ROOT / "dashboards" / "generated").glob("*.json")}
    assert {uid for uid, _, _ in queries} == committed
    conditional = {(uid, title) for uid, title, expr in queries if _COMPARISON.search(expr)}
    assert conditional == set(CONDITION_PANELS), "a panel that filters on a condition needs its fault caused here"
    absent = {name for name in NO_DATA_METRICS if not prometheus.query(f"count({{__name__={name!r}}})")}
    expect_data = [(uid, title, _substitute(expr, values)) for uid, title, expr in queries
                   if not any(name in expr for name in absent)]
    legit = [f"{uid} / {title}: {expr}  ({NO_DATA_METRICS[name]})" for uid, title, expr in queries
             for name in sorted(absent) if name in expr]
    print("panel queries legitimately without data (their metric has no series in this run):", *legit, sep="\n  ")
    for uid, title, expr in queries:
        if any(name in expr for name in absent):
            query = _substitute(expr, values)
            assert not prometheus.query(query), f"{uid}/{title}: data from a metric without series: {query}"
    _wait_all_have_data(prometheus, [q for q in expect_data if q[:2] not in CONDITION_PANELS])
    assert "replmon_committed_messages_lost_total" not in absent

    # the conditions, caused: a follower on the selected broker falls out of the ISR (producing all along)
    broker = int(values["broker"])
    kafka_view.create_topic(e2e_topic, assignment={0: [1 if broker != 1 else 2, broker]})
    producer_factory(e2e_topic).wait_acknowledged(20)
    healthy_cluster.pause(broker)
    wait_until(lambda: broker not in kafka_view.partition(e2e_topic).isr, 30, f"Kafka to drop broker {broker}")
    _wait_all_have_data(prometheus, [q for q in expect_data if q[:2] in CONDITION_PANELS])
    healthy_cluster.resume(broker)


def test_bad_samples_are_quarantined_and_the_job_goes_on(
    pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView, e2e_topic: str,
    producer_factory: Callable[..., SequencedProducer],
) -> None:
    import json

    from kafka import KafkaConsumer, KafkaProducer

    def count(reason: str) -> float:
        return pipeline.metric("replmon_quarantined_samples_total", reason=reason) or 0.0

    before = {r: count(r) for r in ("malformed_json", "unknown_schema", "out_of_range")}
    sample = {"schema": "partition/v1", "cluster": "local", "collector_id": "evil", "cycle": 1,
              "sample_time_ms": 1, "topic": e2e_topic, "partition": 0, "leader": 1, "leader_epoch": 0,
              "replicas": [1], "isr": [1], "high_watermark": -42}
    bad = [b"{nope", json.dumps({"schema": "partition/v99"}).encode(), json.dumps(sample).encode()]
    producer = KafkaProducer(bootstrap_servers=pipeline.transport.bootstrap_servers)
    for value in bad:
        producer.send("e2e.replmon.samples", key=b"evil", value=value)
    producer.flush()
    producer.close()
    wait_until(lambda: all(count(r) == before[r] + 1 for r in before), DEADLINE_S, "one quarantined sample per reason")

    consumer = KafkaConsumer("e2e.replmon.quarantine", bootstrap_servers=pipeline.transport.bootstrap_servers,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None)
    reasons = {json.loads(r.value)["value"]: json.loads(r.value)["reason"] for r in consumer}
    consumer.close()
    assert reasons["{nope"] == "malformed_json"
    assert reasons[bad[2].decode()] == "out_of_range:high_watermark"

    # the job is alive and keeps turning good samples into metrics
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2, 3]})
    producer_factory(e2e_topic).wait_acknowledged(20)
    wait_until(lambda: pipeline.metric("replmon_partition_isr_size", topic=e2e_topic, partition="0") == 3,
               DEADLINE_S, "metrics of a topic created after the bad samples")


def assert_events_command_lists(pipeline: Pipeline, topic: str) -> None:
    """`replmon events` prints, from the Parquet history, every event the events topic holds."""
    def printed() -> bool:
        ids = {e["event_id"] for e in pipeline.events()}
        out = subprocess.run([sys.executable, "-m", "replmon.cli", "events", "--config", str(pipeline.config)],
                             capture_output=True, text=True, timeout=120)
        return out.returncode == 0 and f"{len(ids)} events" in out.stdout

    wait_until(printed, DEADLINE_S, "`replmon events` to list every event of the events topic", interval_s=2.0)
    out = subprocess.run([sys.executable, "-m", "replmon.cli", "events", "--config", str(pipeline.config),
                          "--topic", topic, "--type", "isr_shrink", "--since", "1h"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    rows = [line for line in out.stdout.splitlines() if topic[:20] in line]
    assert rows and all("ISR_SHRINK" in line for line in rows)
    assert_events_as_json(pipeline, topic)


def assert_events_as_json(pipeline: Pipeline, topic: str) -> None:
    """`replmon events --json` prints the event records themselves, one a line, the same from the history and from
    the events topic; `--follow` prints them and keeps reading until Ctrl-C."""
    import json
    import signal

    base = [sys.executable, "-m", "replmon.cli", "events", "--config", str(pipeline.config), "--json",
            "--topic", topic]

    def printed(*args: str) -> dict[str, dict[str, object]]:
        out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return {e["event_id"]: e for e in map(json.loads, out.stdout.splitlines())}

    published = {e["event_id"]: e for e in pipeline.events() if e["topic"] == topic}
    from_topic = printed("--from", "topic")
    assert published and set(published) <= set(from_topic)
    assert all(from_topic[i] == published[i] for i in published), "the topic's records, as published"
    wait_until(lambda: set(published) <= set(printed()), DEADLINE_S, "the history to hold the topic's events")
    from_history = printed()
    assert all(from_history[i] == published[i] for i in published), "the history's rows as the same records"

    follow = subprocess.Popen([*base, "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        seen: set[str] = set()
        while not set(published) <= seen:
            line = follow.stdout.readline()
            assert line, follow.stderr.read() if follow.stderr else "--follow ended"
            seen.add(json.loads(line)["event_id"])
        assert follow.poll() is None, "--follow keeps reading once it has caught up"
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 0
        assert "Traceback" not in (follow.stderr.read() if follow.stderr else "")
    finally:
        if follow.poll() is None:
            follow.kill()
