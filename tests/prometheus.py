"""A real Prometheus (Debian's package) scraping the test pipeline with the repo's scrape config and alert rules,
read through its HTTP API."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from replmon.core.processes import stop_processes
from replmon.testbed.kafka_view import wait_until
from replmon.testbed.localcluster.cluster import free_port
from tests.pipeline import DEADLINE_S, Pipeline

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "conf" / "prometheus"
UNDER_REPLICATED = "ReplmonUnderReplicatedPartitions"
DATA_LOSS = "ReplmonCommittedDataLoss"
UNCLEAN = "ReplmonUncleanLeaderElection"
TEST_FOR = "2s"
"""`for:` of every rule in the test copy of alerts.yml (the real ones are up to 5 minutes)."""

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


@contextlib.contextmanager
def running_prometheus(pipeline: Pipeline, work: Path) -> Iterator[Prometheus]:
    """Debian's prometheus on 127.0.0.1, scraping the pipeline's job and collector with the repo's config and
    alert rules (shortened `for:`)."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert Path(binary).exists(), "the prometheus server is missing: scripts/setup installs Debian's package"
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
