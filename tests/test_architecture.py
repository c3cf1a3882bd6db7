"""The lot plan, read from the import graph: data moves one way, and no floor imports a floor above it.

Floors, lowest first: the shared plumbing (``replmon.core``), the record contracts (``replmon.contracts``), the
stages in the order data flows through them (``collectors``, ``streaming``, ``dashboards``), the test bed
(``replmon.testbed``), the front door (``replmon.cli``). Every import counts, also one inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["replmon.core", "replmon.contracts", "collectors", "streaming", "dashboards", "replmon.testbed",
          "replmon.cli"]
PACKAGES = ["replmon", "collectors", "streaming", "dashboards"]


def floor(module: str) -> int | None:
    """The floor of a module of the project, None for one outside it (a library) or the root package."""
    for i, prefix in reversed(list(enumerate(FLOORS))):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every import of ``path``; ``from a import b`` is a.b (b may be a module or a name in a)."""
    out: list[tuple[int, str]] = []
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def project_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def violations(path: Path) -> list[str]:
    here = floor(module_name(path))
    if here is None:
        return []
    found: list[str] = []
    for line, target in dict.fromkeys(imports(path)):
        there = floor(target)
        if there is not None and there > here:
            found.append(f"{path.relative_to(ROOT)}:{line} ({FLOORS[here]}) imports {target} ({FLOORS[there]})")
    return found


def test_every_module_of_the_project_sits_on_a_floor() -> None:
    homeless = [str(p.relative_to(ROOT)) for p in project_modules()
                if floor(module_name(p)) is None and module_name(p) != "replmon"]
    assert homeless == []


def test_no_module_imports_a_floor_above_its_own() -> None:
    found = [v for p in project_modules() for v in violations(p)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(("source", "expected"), [
    ("from replmon.testbed.localcluster import LocalCluster\n", "imports replmon.testbed.localcluster"),
    ("def f():\n    from replmon.cli.targets import with_default_cluster\n", "imports replmon.cli.targets"),
    ("import streaming.exporter\n", "imports streaming.exporter (streaming)"),
    ("from .. import testbed\n", "imports replmon.testbed"),
])
def test_the_check_sees_an_upward_import_wherever_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 source: str, expected: str) -> None:
    """The check itself: an upward import planted in a plumbing module, in each form Python allows, is found."""
    root = tmp_path / "project"
    module = root / "replmon" / "core" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", root)
    found = violations(module)
    assert len(found) == 1 and expected in found[0], found


def test_a_downward_import_is_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "project"
    module = root / "replmon" / "testbed" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text("from streaming.exporter import scrape\nfrom replmon.core.config import load_config\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", root)
    assert violations(module) == []
