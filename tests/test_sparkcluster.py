"""The Spark standalone test cluster (replmon.testbed.sparkcluster): a job of the test process's driver runs on
both workers; its executors see the venv's packages but neither the project's code nor the driver's /tmp; a job
still completes after one worker is SIGKILLed, and the worker comes back."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from replmon.core.processes import wait_until
from replmon.testbed.sparkcluster import LEAN_JVM_OPTIONS, WORKER_ENV, StandaloneCluster, source_root

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

ROOT = source_root()
PYTHON = ROOT / ".venv" / "bin" / "python"
"""The executors' interpreter: the venv's, which the workers keep while the source tree is hidden from them."""


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("sparkcluster"), workers=2, cores=1, memory="1g") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def standalone_spark(standalone: StandaloneCluster) -> Iterator[SparkSession]:
    """A driver in the test process on the standalone cluster, once both workers run an executor of it. Not the
    job's session settings: pyspark's own daemon, since the job's (streaming.worker_daemon) is project code, which
    the executors cannot import. Set explicitly: when an earlier module's session started the test process's JVM,
    its settings stay that JVM's system properties, the defaults of every later session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYSPARK_PYTHON", str(PYTHON))
        session = (SparkSession.builder.master(standalone.master_url).appName("replmon-sparkcluster-test")
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.executor.memory", "512m").config("spark.executor.extraJavaOptions", LEAN_JVM_OPTIONS)
                   .config("spark.ui.enabled", "false")
                   .config("spark.python.daemon.module", "pyspark.daemon").getOrCreate())
        try:
            assert session.sparkContext.master == standalone.master_url, "an earlier Spark session is still active"
            wait_for_executors(session, 2)
            yield session
        finally:
            session.stop()


def live_executors(spark: SparkSession) -> set[str]:
    """The ids of the executors the driver's scheduler has now (a lost one is gone from it)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()
    return {str(ids.apply(i)) for i in range(ids.size())}


def wait_for_executors(spark: SparkSession, count: int) -> None:
    wait_until(lambda: len(live_executors(spark)) == count, 60, f"{count} executor(s) registered")


def probe(driver_file: str) -> Callable[[Iterable[int]], Iterator[dict[str, Any]]]:
    """A task that reports where it runs and what it sees. A closure, so that cloudpickle ships it by value: by
    reference the executors would have to import this test module, which they cannot see."""
    def run(_partition: Iterable[int]) -> Iterator[dict[str, Any]]:
        import importlib

        seen: dict[str, Any] = {
            "worker": os.environ.get(WORKER_ENV), "executor": os.path.basename(os.getcwd()), "pid": os.getpid(),
            "mount_ns": os.readlink("/proc/self/ns/mnt"), "driver_file": os.path.exists(driver_file),
            "source_tree": os.path.exists(os.path.join(str(ROOT), "pyproject.toml")),
        }
        for module in ("streaming", "replmon", "pydantic", "pyarrow"):
            try:
                importlib.import_module(module)
                seen[module] = "ok"
            except Exception as exc:
                seen[module] = type(exc).__name__
        yield seen

    return run


def run_probe(spark: SparkSession, driver_file: Path, partitions: int = 2, spread: bool = True) -> list[dict[str, Any]]:
    """:func:`probe` in each of ``partitions`` tasks. ``spread``: as a barrier stage, whose tasks all start at once,
    so that with ``partitions`` executors of one core each, every executor runs one. A plain stage would not
    ensure it: a new executor gets tasks only once it says it is ready, a moment after the driver lists it (its
    free cores are 0 until then), and the other executor may take them all meanwhile."""
    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    return (rdd.barrier() if spread else rdd).mapPartitions(probe(str(driver_file))).collect()


@pytest.fixture
def driver_file() -> Iterator[Path]:
    """A file the driver writes in /tmp."""
    fd, name = tempfile.mkstemp(prefix="replmon-driver-", dir="/tmp")
    os.write(fd, b"only the driver sees this\n")
    os.close(fd)
    yield Path(name)
    Path(name).unlink()


def test_tasks_run_on_both_workers_isolated_from_the_driver(standalone_spark: SparkSession, driver_file: Path) -> None:
    # the driver has the project's code and its file (which the executors must not)
    assert importlib.util.find_spec("streaming") is not None and driver_file.exists()
    seen = run_probe(standalone_spark, driver_file)

    assert {s["worker"] for s in seen} == {"0", "1"}, seen
    assert len({s["executor"] for s in seen}) == 2, seen
    own_ns = os.readlink("/proc/self/ns/mnt")
    assert len({s["mount_ns"] for s in seen} | {own_ns}) == 3, "each worker has a mount namespace of its own"
    for s in seen:
        assert s["streaming"] == "ModuleNotFoundError" and s["replmon"] == "ModuleNotFoundError", s
        assert s["pydantic"] == "ok" and s["pyarrow"] == "ok", s
        assert not s["driver_file"] and not s["source_tree"], s


def test_a_job_completes_after_a_worker_is_killed(standalone: StandaloneCluster, standalone_spark: SparkSession,
                                                  driver_file: Path) -> None:
    before = live_executors(standalone_spark)
    standalone.kill_worker(0)
    assert not standalone.worker_running(0) and standalone.alive_workers() == 1

    # at once, without waiting for the driver to drop the lost executor (a task it still gives it runs again)
    seen = run_probe(standalone_spark, driver_file, partitions=4, spread=False)
    assert {s["worker"] for s in seen} == {"1"}, seen

    standalone.start_worker(0)  # the master gives the application an executor on it again, under a new id
    assert standalone.alive_workers() == 2
    wait_until(lambda: len(live := live_executors(standalone_spark)) == 2 and live - before, 60,
               "the driver to get an executor on the restarted worker")
    assert {s["worker"] for s in run_probe(standalone_spark, driver_file)} == {"0", "1"}
