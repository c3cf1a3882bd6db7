"""Fixtures shared by the whole suite: the real local Kafka cluster, Kafka's own view, workloads."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Tests never touch the user's own clusters or state; the Kafka jar cache stays shared (no re-download). Each
# pytest-xdist worker has a state dir of its own (the workers inherit the controller's environment).
os.environ.setdefault("REPLMON_STATE_DIR", tempfile.mkdtemp(prefix="replmon-test-state-"))
if "PYTEST_XDIST_WORKER" in os.environ:
    _worker_state = Path(os.environ["REPLMON_STATE_DIR"], os.environ["PYTEST_XDIST_WORKER"])
    _worker_state.mkdir(parents=True, exist_ok=True)
    os.environ["REPLMON_STATE_DIR"] = str(_worker_state)
# The Spark drivers the tests start (their own sessions, `replmon stream`, spark-submit) compile with C1 only, as the
# test bed's brokers and Spark daemons do: a test's job runs for seconds to minutes, which C2's compilation does not
# pay back (tests/test_stream_state.py and test_stream_buckets.py: 72 -> 51 s of the machine's CPU). The product's
# own runs keep the JVM's default.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

from pyspark.sql import SparkSession

from replmon.testbed.harness import AGENT_PREFIX
from replmon.testbed.hdfs import MiniHdfs
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.sparkcluster import StandaloneCluster
from replmon.testbed.workload import SequencedProducer
from streaming.session import PYTHON_CONF, STATE_CONF
from tests.pipeline import Pipeline, running_pipeline
from tests.prometheus import Prometheus, running_prometheus

_topic_ids = itertools.count()


def pytest_configure(config: pytest.Config) -> None:
    """A private base temp dir per run: pytest's default rotation deletes the older runs' dirs, which would
    pull the cluster's storage from under a concurrent run on the same machine."""
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="replmon-pytest-")


TIERS = ("cluster", "spark", "prometheus", "hdfs")
"""The markers of the slow tiers; a test with none of them is pure (``make test-fast``)."""
FIXTURE_TIERS = {"cluster": ("cluster",), "spark": ("spark",), "pipeline": ("cluster", "spark"),
                 "prometheus": ("prometheus",), "hdfs": ("hdfs",)}
"""The tiers a test belongs to because of a fixture it uses, directly or through another fixture."""


SHARED_FIXTURES = ("cluster", "kafka_view", "pipeline", "prometheus")
"""The session's fixtures into which tests inject faults (the cluster, the pipeline on it): the tests that use them,
directly or through another fixture, run one after the other on one worker."""
REAL_GROUP = "real"
"""The pytest-xdist group of every test of a slow tier that uses a :data:`SHARED_FIXTURES`: ``make test`` (``-n 2
--dist loadgroup``) runs them one after the other on one worker, in this order, as a plain run would (they share the
session's cluster and pipeline, and inject faults into it)."""
OWN_GROUP = "own"
"""The group of the other tests of a slow tier, each with servers of its own (a cluster, a Spark session, HDFS,
Prometheus): one after the other on the other worker, beside the :data:`REAL_GROUP`, then the pure tests. The two
groups are the two largest units of work, so pytest-xdist gives each to a worker of its own at the start (its
``--loadscope-reorder``: the largest first, one to each worker)."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets the markers of the fixtures it uses (so that ``-m "not cluster and not spark and not
    prometheus"`` selects exactly the pure tests), and a test of a slow tier the group :data:`REAL_GROUP` or
    :data:`OWN_GROUP`. Tests that use the long-running pipeline (collector + Spark job) run last, so that it never
    loads the machine under the timing-sensitive cluster tests of the other modules."""
    for item in items:
        have = {m.name for m in item.iter_markers()}
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture in fixtures:
            for tier in FIXTURE_TIERS.get(fixture, ()):
                if tier not in have:
                    item.add_marker(tier)
                    have.add(tier)
        if have & set(TIERS):
            shared = fixtures & set(SHARED_FIXTURES)
            item.add_marker(pytest.mark.xdist_group(REAL_GROUP if shared else OWN_GROUP))
    items.sort(key=lambda item: "pipeline" in getattr(item, "fixturenames", ()))


_running_tiers: set[str] | None = None
"""The tier markers of the test being set up, run or torn down (None between tests)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    global _running_tiers
    _running_tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
    try:
        return (yield)
    finally:
        _running_tiers = None


def _tier_guard(tier: str, what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``, refused inside a test not marked ``tier``: a test that starts a real Kafka cluster or a Spark
    session must say so, or the pure tier (``make test-fast``) would start it."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _running_tiers is not None and tier not in _running_tiers:
            raise RuntimeError(f"this test starts {what} but is not marked {tier!r}: use the conftest fixture "
                               f"that provides it, or mark the test (pytest.mark.{tier})")
        return original(*args, **kwargs)

    return guarded


LocalCluster.up = _tier_guard("cluster", "a Kafka cluster", LocalCluster.up)  # type: ignore[method-assign]
MiniHdfs.start = _tier_guard("hdfs", "an HDFS", MiniHdfs.start)  # type: ignore[method-assign]
StandaloneCluster.start = _tier_guard(  # type: ignore[method-assign]
    "spark", "a Spark standalone cluster", StandaloneCluster.start)
SparkSession.Builder.getOrCreate = _tier_guard(  # type: ignore[method-assign]
    "spark", "a Spark session", SparkSession.Builder.getOrCreate)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local Spark session in the test process, for the job's Spark parts without Kafka (parsing, the state
    store): one core, loopback only, the job's state store, checkpoint and Python settings; stopped after the
    module, so that no JVM of the test process outlives the tests that need it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[1]").appName("replmon-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config(map={**STATE_CONF, **PYTHON_CONF}).getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """One 3-broker cluster for the session; its JVMs die with the test process even if it crashes. After a
    failed test its directory (the brokers' logs) is kept, and named in the summary."""
    local = LocalCluster.up(tmp_path_factory.mktemp("cluster"), brokers=3, die_with_parent=True)
    try:
        yield local
    finally:
        failed = request.session.testsfailed
        local.down(purge=not failed)
        if failed:
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"the session cluster's directory, kept after {failed} failed test(s): "
                                    f"{local.spec.dir}")


HEAL_DEADLINE_S = 90
"""Every broker back and every partition's ISR full again, after the worst fault test (an unclean election)."""


def heal(cluster: LocalCluster, kafka_view: KafkaView) -> None:
    """Every broker running and every partition fully replicated: a test after a fault test must not meet the
    last one's shrunken ISRs (a samples topic below min.insync.replicas, a follower still catching up)."""
    cluster.heal()
    kafka_view.reconnect()

    def fully_replicated() -> bool:
        if lagging := kafka_view.under_replicated():
            raise AssertionError(f"{len(lagging)} partition(s) without a full ISR: {', '.join(lagging[:10])}")
        return True

    wait_until(fully_replicated, HEAL_DEADLINE_S, "every partition of the session cluster back to a full ISR")


@pytest.fixture
def healthy_cluster(cluster: LocalCluster, kafka_view: KafkaView) -> Iterator[LocalCluster]:
    """The session cluster with every broker running and every ISR full, before and after the test (fault
    tests use it)."""
    heal(cluster, kafka_view)
    yield cluster
    heal(cluster, kafka_view)


@pytest.fixture(scope="session")
def kafka_view(cluster: LocalCluster) -> Iterator[KafkaView]:
    view = KafkaView(cluster.bootstrap_servers)
    yield view
    view.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (topics are never reused between tests)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t{next(_topic_ids)}-{base}"


@pytest.fixture
def producer_factory(cluster: LocalCluster) -> Iterator[Callable[..., SequencedProducer]]:
    made: list[SequencedProducer] = []

    def make(topic: str, bootstrap_servers: str | None = None, **kwargs: Any) -> SequencedProducer:
        producer = SequencedProducer(bootstrap_servers or cluster.bootstrap_servers, topic, **kwargs)
        producer.start()
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()


@pytest.fixture(scope="session")
def pipeline(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """`replmon collect` and `replmon stream` on the session cluster, shared by the end-to-end modules (one
    Spark start for all of them); samples and events on a one-broker transport cluster."""
    with running_pipeline(cluster, tmp_path_factory) as p:
        yield p


@pytest.fixture
def agents(pipeline: Pipeline, cluster: LocalCluster) -> Iterator[None]:
    """A log-dir agent beside each broker of the session cluster during the test, as ``replmon run`` starts
    them: they read a broker's disk also while it is down."""
    pipeline.spawn_agents()
    yield
    pipeline.stop(*(f"{AGENT_PREFIX}{b}" for b in cluster.broker_ids))


@pytest.fixture(scope="session")
def prometheus(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus scraping the pipeline with the repo's config and alert rules, for the session: the
    end-to-end faults are checked in replmon's events and metrics and in the alerts they fire."""
    with running_prometheus(pipeline, tmp_path_factory.mktemp("prometheus")) as server:
        yield server


# ---------------------------------------------------------------------------------------------- HDFS
@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniHdfs]:
    """A real one-datanode HDFS on loopback for the session (Hadoop's MiniDFSCluster, permissions off), at
    ``hdfs.uri``; its JVM dies with the test process even if it crashes. Tests using it are marked ``hdfs``."""
    with MiniHdfs(tmp_path_factory.mktemp("hdfs")) as server:
        yield server
