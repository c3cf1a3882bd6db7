"""End to end with a real Prometheus: faults caused on the local cluster -> collector -> samples topic -> the
Spark job -> Prometheus (127.0.0.1, scraping the job and the collector with the repo's scrape config and alert
rules) -> alerts read through Prometheus' HTTP API; and every dashboard panel query answered from this live
Prometheus.

The tests run in file order: the dashboard check comes last and relies on the scenarios before it (an unclean
election, committed data lost) having put data into Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.build import build_all
from replmon.localcluster import LocalCluster
from replmon.localcluster.cluster import free_port
from replmon.processes import stop_processes
from replmon.workload import SequencedProducer
from tests.kafka_view import KafkaView, wait_until
from tests.pipeline import DEADLINE_S, TOPIC_PREFIX, Pipeline, cause_unclean_loss

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "conf" / "prometheus"
UNDER_REPLICATED = "ReplmonUnderReplicatedPartitions"
DATA_LOSS = "ReplmonCommittedDataLoss"
UNCLEAN = "ReplmonUncleanLeaderElection"
TEST_FOR = "2s"
"""`for:` of every rule in the test copy of alerts.yml (the real ones are up to 5 minutes)."""

# Panel queries that legitimately return no data in this run, by the metric that has no series: counters that
# replmon creates on their first increment, and nothing increments them here.
NO_DATA_METRICS = {
    "replmon_epoch_divergences_total": "no replica lineage diverges in these scenarios (modern Kafka truncates "
                                       "by leader epoch; divergence is tested with sample sequences)",
    "replmon_quarantined_samples_total": "every sample of this run is valid",
    "replmon_collector_cycles_skipped_total": "no sampling cycle overran its 1 s interval",
    "replmon_collector_errors_total": "only when the collector met an error this run",
}


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        assert self.proc.poll() is None, f"prometheus exited: {self.log.read_text()[-2000:]}"
        url = f"{self.url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body: dict[str, Any] = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400 bad_data carries the error as JSON
            body = json.load(exc)
        assert body["status"] == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] in ("vector", "matrix") else [data]
        return result

    def alerts(self, name: str, state: str | None = None, **labels: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"]
                if a["labels"]["alertname"] == name and (state is None or a["state"] == state)
                and all(a["labels"].get(k) == v for k, v in labels.items())]

    def wait_firing(self, name: str, **labels: str) -> dict[str, Any]:
        found = wait_until(lambda: self.alerts(name, "firing", **labels), DEADLINE_S,
                           f"alert {name} {labels} to fire", interval_s=1.0)
        return found[0]


def _test_rules(work: Path) -> Path:
    """alerts.yml with every `for:` shortened to TEST_FOR, so that the test need not wait minutes; the
    expressions, labels and annotations are the real ones, byte for byte."""
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = TEST_FOR
    path = work / "alerts.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    original = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    assert [r["expr"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]] == \
        [r["expr"] for g in original["groups"] for r in g["rules"]]
    return path


def _scrape_config(pipeline: Pipeline, rules: Path) -> dict[str, Any]:
    """conf/prometheus/prometheus.yml with the pipeline's ports, 1 s scrapes and rule evaluations."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    assert config["rule_files"] == ["alerts.yml"]
    config["rule_files"] = [str(rules)]
    ports = {"replmon-stream": pipeline.metrics_port, "replmon-collector": pipeline.collector_metrics_port}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(ports), f"scrape jobs changed: {sorted(jobs)}"
    for name, port in ports.items():
        jobs[name]["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    return config


@pytest.fixture(scope="module")
def prometheus(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert Path(binary).exists(), "the prometheus server is missing: scripts/setup installs Debian's package"
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(_scrape_config(pipeline, _test_rules(work)), sort_keys=False))
    port = free_port()
    log_path = work / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        wait_until(lambda: server.api("targets")["activeTargets"], 30, "prometheus to answer")
        wait_until(lambda: all(t["health"] == "up" for t in server.api("targets")["activeTargets"]), 30,
                   "both targets up (job and collector)")
        yield server
    finally:
        stop_processes([proc], grace_s=15)


@pytest.fixture
def e2e_topic(topic_name: str) -> str:
    return TOPIC_PREFIX + topic_name


def test_prometheus_scrapes_both_targets_with_the_rules_loaded(prometheus: Prometheus) -> None:
    targets = {t["labels"]["job"]: t for t in prometheus.api("targets")["activeTargets"]}
    assert set(targets) == {"replmon-stream", "replmon-collector"}
    loaded = {r["name"] for g in prometheus.api("rules")["groups"] for r in g["rules"]}
    expected = {r["alert"] for g in yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())["groups"]
                for r in g["rules"]}
    assert loaded == expected
    wait_until(lambda: prometheus.query("replmon_job_batches_total"), 30, "the job's series in Prometheus")
    wait_until(lambda: prometheus.query("replmon_collector_partitions"), 30, "the collector's series")


def test_paused_follower_under_production_fires_the_under_replication_alert(
    prometheus: Prometheus, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView,
    e2e_topic: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    kafka_view.create_topic(e2e_topic, assignment={0: [1, 2, 3]})
    producer_factory(e2e_topic).wait_acknowledged(50)  # keeps producing: an idle follower never leaves the ISR
    wait_until(lambda: prometheus.query(f'replmon_topic_under_replicated_partitions{{topic="{e2e_topic}"}} == 0'),
               DEADLINE_S, "the topic healthy in Prometheus")
    assert not prometheus.alerts(UNDER_REPLICATED, topic=e2e_topic)

    healthy_cluster.pause(3)
    wait_until(lambda: 3 not in kafka_view.partition(e2e_topic).isr, 30, "Kafka to shrink the ISR")
    alert = prometheus.wait_firing(UNDER_REPLICATED, topic=e2e_topic)
    assert alert["labels"]["cluster"] == "local" and alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) == 1.0  # one under-replicated partition
    in_isr = prometheus.query(f'replmon_replica_in_isr{{topic="{e2e_topic}", broker="3"}}')
    assert [float(s["value"][1]) for s in in_isr] == [0.0]

    healthy_cluster.resume(3)
    wait_until(lambda: 3 in kafka_view.partition(e2e_topic).isr, 30, "Kafka to expand the ISR")
    wait_until(lambda: not prometheus.alerts(UNDER_REPLICATED, topic=e2e_topic), DEADLINE_S,
               f"{UNDER_REPLICATED} to resolve after the resume", interval_s=1.0)


def test_unclean_election_fires_the_committed_data_loss_alert(
    prometheus: Prometheus, pipeline: Pipeline, healthy_cluster: LocalCluster, kafka_view: KafkaView,
    e2e_topic: str, producer_factory: Callable[..., SequencedProducer],
) -> None:
    def seen_by_prometheus(high_watermark: int) -> None:  # Prometheus must hold the committed offsets first
        wait_until(lambda: [s for s in prometheus.query(f'replmon_partition_high_watermark{{topic="{e2e_topic}"}}')
                            if float(s["value"][1]) == high_watermark], DEADLINE_S,
                   "Prometheus to see Kafka's high watermark")
        assert not prometheus.alerts(DATA_LOSS, topic=e2e_topic)

    lost = cause_unclean_loss(healthy_cluster, kafka_view, e2e_topic, producer_factory, seen_by_prometheus).lost

    alert = prometheus.wait_firing(DATA_LOSS, topic=e2e_topic)
    assert alert["labels"]["cluster"] == "local" and alert["labels"]["severity"] == "critical"
    # first increment of a new series: the value is the counter itself, i.e. the messages lost
    assert float(alert["value"]) == len(lost)
    assert prometheus.wait_firing(UNCLEAN, topic=e2e_topic)["labels"]["severity"] == "critical"


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


def test_every_dashboard_panel_query_returns_data_from_the_live_run(prometheus: Prometheus) -> None:
    values = _variables(prometheus)
    queries = _panel_queries()
    committed = {p.stem for p in (ROOT / "dashboards" / "generated").glob("*.json")}
    assert {uid for uid, _, _ in queries} == committed
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

    empty: list[tuple[str, str, str]] = []

    def all_have_data() -> bool:
        empty[:] = [(u, t, q) for u, t, q in expect_data if not prometheus.query(q)]
        return not empty

    try:  # a rate() over a series born seconds ago needs its second scrape
        wait_until(all_have_data, 30, "every panel query to return data", interval_s=1.0)
    except AssertionError:
        pytest.fail("panel queries without data:\n" + "\n".join(f"{u} / {t}: {q}" for u, t, q in empty))
    assert "replmon_committed_messages_lost_total" not in absent
