"""The test tiers: a pure test (no cluster, spark or prometheus marker, ``make test-fast``) cannot start a real
Kafka cluster or a Spark session by accident; the conftest refuses it, naming the marker it lacks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from replmon.testbed.localcluster import LocalCluster
from tests.conftest import TIERS

ROOT = Path(__file__).resolve().parents[1]
_PURE_LINE = re.search(r"^PURE = (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)
assert _PURE_LINE is not None, "the Makefile defines PURE"
PURE = _PURE_LINE.group(1)
"""The pure tier's selection, as ``make test-fast`` runs it."""


def test_the_pure_tier_excludes_every_slow_tier() -> None:
    assert " and ".join(f"not {tier}" for tier in TIERS) == PURE


def test_a_pure_test_cannot_start_a_kafka_cluster(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="starts a Kafka cluster but is not marked 'cluster'"):
        LocalCluster.up(tmp_path / "cluster", brokers=1, die_with_parent=True, remember=False)
    assert not (tmp_path / "cluster").exists()


def test_a_pure_test_cannot_start_a_spark_session() -> None:
    with pytest.raises(RuntimeError, match="starts a Spark session but is not marked 'spark'"):
        SparkSession.builder.master("local[1]").getOrCreate()


def test_a_test_gets_the_markers_of_the_fixtures_it_uses() -> None:
    """tests/test_stream_parsing.py's Spark tests carry no marker of their own: the pure tier selects only its
    tests that use no Spark session, and the spark tier the others."""
    def selected(expression: str) -> set[str]:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "-m", expression, "tests/test_stream_parsing.py"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
        return {line.split("::")[1] for line in out.stdout.splitlines() if "::" in line}

    pure = selected(PURE)
    uses_spark = {"test_valid_samples_pass_as_the_collectors_write_them",
                  "test_the_processor_takes_valid_samples_and_bad_records_with_what_the_quarantine_keeps",
                  "test_the_read_stage_plans_no_checks",
                  "test_the_quarantine_keeps_the_start_of_a_long_value_where_it_is_read"}
    assert "test_bad_records_get_their_reason" in pure and not uses_spark & pure
    spark = selected("spark")
    assert spark == uses_spark


def test_make_test_runs_each_group_of_slow_tests_in_order_on_a_worker_of_its_own(tmp_path: Path) -> None:
    """``make test``'s pytest-xdist options: the tests of the slow tiers that share the session's cluster inject
    faults into it, so they run on one worker, in the order a plain run gives them; the other slow tests (servers of
    their own) run in order on the other worker, then the pure tests."""
    make = re.search(r"^test: setup\n\t\.venv/bin/pytest (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert make is not None, "the Makefile's test target runs .venv/bin/pytest"
    ran = tmp_path / "ran.txt"
    (tmp_path / "test_spread.py").write_text(f'''
import os
import pytest

def record(what):
    with open({str(ran)!r}, "a") as out:
        out.write(f"{{what}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")

@pytest.fixture
def cluster():  # stands for the session's cluster: the name is what groups a test
    return None

@pytest.mark.cluster
@pytest.mark.parametrize("i", range(4))
def test_real(i, cluster):
    record(f"real{{i}}")

@pytest.mark.spark
@pytest.mark.parametrize("i", range(5))
def test_own(i):
    record(f"own{{i}}")

@pytest.mark.parametrize("i", range(4))
def test_pure(i):
    record(f"pure{{i}}")
''')
    done = subprocess.run([sys.executable, "-m", "pytest", *make.group(1).split(), "-p", "tests.conftest", "-p",
                           "no:cacheprovider", "-q", str(tmp_path / "test_spread.py")], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    workers: dict[str, list[str]] = {}
    for line in ran.read_text().splitlines():
        what, worker = line.split()
        workers.setdefault(worker, []).append(what)
    assert len(workers) == 2, workers
    for group, size in (("real", 4), ("own", 5)):
        on_it = [tests for tests in workers.values() if f"{group}0" in tests]
        assert len(on_it) == 1, workers
        start = on_it[0].index(f"{group}0")
        assert on_it[0][start:start + size] == [f"{group}{i}" for i in range(size)], workers  # in order, unbroken
    real, own = (next(w for w, tests in workers.items() if f"{g}0" in tests) for g in ("real", "own"))
    assert real != own, workers
    assert sum(what.startswith("pure") for tests in workers.values() for what in tests) == 4, workers
