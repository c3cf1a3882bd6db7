"""The alert rules and scrape configs in conf/prometheus/: promtool's checks and unit tests, and what promtool
cannot check (every alert tested firing and not firing, only exported metrics, runbook anchors that exist)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.catalog import known_series_names, referenced_names
from replmon.contracts.events import EventType
from replmon.core.config import CollectorConfig, StreamConfig

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
PROM = ROOT / "conf" / "prometheus"
RULES = PROM / "alerts.yml"
UNIT_TESTS = sorted((PROM / "tests").glob("*.yml"))
CONFIGS = [PROM / "prometheus.yml", PROM / "prometheus.compose.yml"]
DOCS = ROOT / "docs" / "alerts.md"


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: scripts/setup installs Debian's prometheus package"
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=PROM, capture_output=True, text=True, timeout=60)


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def _seconds(duration: str) -> int:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"unparsed duration {duration!r}"
    return int(sum(int(n) * units[u] for n, u in parts))


def test_promtool_check_rules() -> None:
    out = _run("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in out.stdout


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_promtool_check_config(config: Path) -> None:
    out = _run("check", "config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS, "no promtool unit tests in conf/prometheus/tests"
    out = _run("test", "rules", *(str(p.relative_to(PROM)) for p in UNIT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(UNIT_TESTS), out.stdout


def test_promtool_unit_tests_can_fail(tmp_path: Path) -> None:
    """The unit tests are real: a rule whose threshold changed makes them fail."""
    broken = tmp_path / "alerts.yml"
    broken.write_text(RULES.read_text().replace("replmon_topic_under_min_isr_partitions > 0",
                                                "replmon_topic_under_min_isr_partitions > 5"))
    suite = tmp_path / "tests" / "replication.yml"
    suite.parent.mkdir()
    suite.write_text((PROM / "tests" / "replication.yml").read_text())
    out = subprocess.run([_promtool(), "test", "rules", str(suite)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "ReplmonUnderMinIsrPartitions" in out.stdout + out.stderr


def _unit_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(test file, test group, alert_rule_test case) for every case of every unit test file."""
    cases = []
    for path in UNIT_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../alerts.yml"], f"{path.name} must test conf/prometheus/alerts.yml"
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []):
                cases.append((path.name, group, case))
    return cases


def test_every_alert_has_firing_and_not_firing_cases_and_its_for_boundary() -> None:
    cases = _unit_cases()
    problems = []
    for rule in _rules():
        name = rule["alert"]
        mine = [(g, c) for _f, g, c in cases if c["alertname"] == name]
        firing = [(g, c) for g, c in mine if c.get("exp_alerts")]
        quiet = [(g, c) for g, c in mine if not c.get("exp_alerts")]
        if not firing:
            problems.append(f"{name}: no firing case")
        if not quiet:
            problems.append(f"{name}: no not-firing case")
        hold = _seconds(rule.get("for", "0s"))
        if hold and firing:
            # the boundary: in the same input, a case still pending (within `for:` before a firing case)
            boundary = any(
                qg is fg and _seconds(fc["eval_time"]) - hold <= _seconds(qc["eval_time"]) < _seconds(fc["eval_time"])
                for fg, fc in firing for qg, qc in quiet
            )
            if not boundary:
                problems.append(f"{name}: no not-firing case within for: {rule['for']} before a firing one")
    unknown = {c["alertname"] for _f, _g, c in cases} - {r["alert"] for r in _rules()}
    if unknown:
        problems.append(f"unit tests for alerts that do not exist: {sorted(unknown)}")
    assert not problems, "\n".join(problems)


def test_rules_reference_only_exported_metrics() -> None:
    known = known_series_names()
    referenced: dict[str, set[str]] = {}
    for rule in _rules():
        for name in referenced_names(rule["expr"]):
            referenced.setdefault(name, set()).add(rule["alert"])
    assert referenced, "the regex found no replmon_ metric in the rules"
    unknown = {name: sorted(alerts) for name, alerts in referenced.items() if name not in known}
    assert not unknown, f"rules use metrics neither the job nor the collector exports: {unknown}"


def test_metric_name_check_catches_unknown_names() -> None:
    expr = 'sum(rate(replmon_events_total{job="replmon-stream"}[5m])) + replmon_no_such_metric'
    assert referenced_names(expr) == {"replmon_events_total", "replmon_no_such_metric"}
    assert "replmon_no_such_metric" not in known_series_names()


def test_rules_use_only_event_types_the_job_emits() -> None:
    emitted = {t.value for t in EventType}
    used = {(rule["alert"], event_type) for rule in _rules()
            for value in re.findall(r'type=~?"([^"]+)"', rule["expr"]) for event_type in value.split("|")}
    assert used, "no rule selects an event type: the pattern no longer reads the rules' selectors"
    for alert, event_type in sorted(used):
        assert event_type in emitted, f"{alert}: event type {event_type} is never emitted"


def test_alerts_are_well_formed_and_their_runbooks_exist() -> None:
    anchors = {_anchor(h) for h in re.findall(r"^#{2,3} (.+)$", DOCS.read_text(), re.M)}
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names)), "duplicate alert names"
    for rule in _rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
        links = re.findall(r"docs/alerts\.md#([a-z0-9-]+)", rule["annotations"]["runbook"])
        assert links == [name.lower()], f"{name}: runbook must point to docs/alerts.md#{name.lower()}"
        assert links[0] in anchors, f"{name}: docs/alerts.md has no section {name}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_scrape_targets_are_replmons_default_ports() -> None:
    doc = yaml.safe_load((PROM / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in doc["scrape_configs"]}
    stream, collector = StreamConfig(), CollectorConfig()
    assert targets == {
        "replmon-stream": [f"{stream.metrics_host}:{stream.metrics_port}"],
        "replmon-collector": [f"{collector.metrics_host}:{collector.metrics_port}"],
    }
    assert targets == {"replmon-stream": ["127.0.0.1:9464"], "replmon-collector": ["127.0.0.1:9465"]}
    # the alerts select the collector's scrape job by this name
    assert 'job="replmon-collector"' in RULES.read_text()
