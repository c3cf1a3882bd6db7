"""docs/metrics.md is generated from the metric definitions (scripts/metrics_doc.py) and kept in step."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from collectors.metrics import CollectorMetrics
from replmon.contracts.metrics import CATALOG
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "metrics.md"
SCRIPT = ROOT / "scripts" / "metrics_doc.py"


def _generator() -> ModuleType:
    return load_script("metrics_doc")


def _documented() -> set[str]:
    return set(re.findall(r"^\| `(\w+)`", DOC.read_text(), flags=re.MULTILINE))


def test_committed_doc_equals_a_fresh_generation() -> None:
    assert DOC.read_text() == _generator().render(), "run .venv/bin/python scripts/metrics_doc.py and commit"


def test_every_catalogue_metric_is_documented_once_with_its_help() -> None:
    text = DOC.read_text()
    for spec in CATALOG:
        rows = [line for line in text.splitlines() if line.startswith(f"| `{spec.name}` |")]
        assert len(rows) == 1, spec.name
        assert spec.help in rows[0] and f"| {spec.type} |" in rows[0]
        assert all(f"`{label}`" in rows[0] for label in spec.labels), spec.name


def test_every_collector_metric_is_documented_under_its_exposed_name() -> None:
    registry = CollectorMetrics().registry
    exposed = set()
    for family in registry.collect():
        # counters are exposed with _total; histograms by their base name (plus _bucket, _sum, _count)
        exposed.add(f"{family.name}_total" if family.type == "counter" else family.name)
    assert len(exposed) == 10
    documented = _documented()
    assert exposed <= documented, sorted(exposed - documented)
    assert documented == exposed | {s.name for s in CATALOG}, "a documented metric that nobody exports"


def test_check_mode_fails_on_a_stale_doc(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    module = _generator()
    stale = tmp_path / "metrics.md"
    stale.write_text("# old\n")
    module.__dict__["DOC"] = stale
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0 and module.main(["--check"]) == 0
