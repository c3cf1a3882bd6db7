"""docs/samples.md and docs/events.md are generated from the record contracts (scripts/records_doc.py) and kept in
step: every field of every record and every event type documented, with its meaning."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from replmon.contracts.events import EVENT_TYPES, Event, EventType
from replmon.contracts.samples import SAMPLE_MODELS, EpochEntry, ReplicaError, ReplicaOffsets
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "records_doc.py"


def _generator() -> ModuleType:
    return load_script("records_doc")


def test_committed_docs_equal_a_fresh_generation() -> None:
    gen = _generator()
    assert (ROOT / "docs" / "samples.md").read_text() == gen.render_samples(), "run scripts/records_doc.py"
    assert (ROOT / "docs" / "events.md").read_text() == gen.render_events(), "run scripts/records_doc.py"


def test_every_field_of_every_record_is_documented_once_with_its_meaning() -> None:
    samples = (ROOT / "docs" / "samples.md").read_text()
    events = (ROOT / "docs" / "events.md").read_text()
    for doc, models in ((samples, [*SAMPLE_MODELS.values(), ReplicaOffsets, EpochEntry]), (events, [Event])):
        for model in models:
            section = doc.split(f"{model.__name__}\n", 1)[1].split("\n## ", 1)[0]
            for name, field in model.model_fields.items():
                assert field.description, f"{model.__name__}.{name} has no docstring"
                rows = re.findall(rf"^\| `{field.alias or name}` \| .+ \| (.+) \|$", section, flags=re.M)
                assert len(rows) == 1 and rows[0].strip(), f"{model.__name__}.{name}"


def test_every_event_type_and_replica_error_is_documented() -> None:
    assert set(EVENT_TYPES) == set(EventType)
    events = (ROOT / "docs" / "events.md").read_text()
    samples = (ROOT / "docs" / "samples.md").read_text()
    for etype, spec in EVENT_TYPES.items():
        assert spec.severities and spec.meaning and spec.causes
        assert len(re.findall(rf"^\| `{etype.value}` \| ", events, flags=re.M)) == 1
    for error in ReplicaError:
        assert re.search(rf"^\| `{error.value}` \| \w", samples, flags=re.M), error


def test_the_check_mode_fails_on_a_stale_doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    samples_doc, events_doc = tmp_path / "samples.md", tmp_path / "events.md"
    monkeypatch.setattr(gen, "SAMPLES_DOC", samples_doc)
    monkeypatch.setattr(gen, "EVENTS_DOC", events_doc)
    samples_doc.write_text(gen.render_samples())
    events_doc.write_text(gen.render_events().replace("| `STALE` |", "| `STAIL` |"))
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    out = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
