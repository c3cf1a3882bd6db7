"""The job's Spark settings for each place it runs (pure: no Spark): local mode, a cluster master, spark-submit;
the checkpoint manager each store needs; the state parallelism; replmon's code shipped to executors."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from replmon.core.config import StreamConfig
from replmon.core.errors import ReplmonError
from streaming import code_archive
from streaming.session import (
    ABORTABLE_CHECKPOINT_MANAGER,
    CHECKPOINT_MANAGER,
    FILESYSTEM_CHECKPOINT_MANAGER,
    HADOOP_CLOUD,
    KAFKA_CONNECTOR,
    RESOLVED,
    bundled_jars,
    checkpointing_package,
    remember_jars,
    spark_conf,
)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own: the connector not resolved yet (the machine's cache may hold a resolution)."""
    monkeypatch.setenv("REPLMON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize(("spark_version", "package"), [
    ("4.0.0", "org.apache.spark.sql.execution.streaming"),
    ("4.0.5", "org.apache.spark.sql.execution.streaming"),
    ("4.1.1", "org.apache.spark.sql.execution.streaming.checkpointing"),
    ("4.2.0", "org.apache.spark.sql.execution.streaming.checkpointing"),
    ("5.0.0", "org.apache.spark.sql.execution.streaming.checkpointing"),
])
def test_the_checkpoint_managers_are_named_in_the_package_of_the_running_spark(spark_version: str,
                                                                                 package: str) -> None:
    """The packages as the spark-sql jars of PySpark 4.0.0, 4.1.1 and 4.2.0 hold the managers' classes; the tests
    of the Spark tier load the running Spark's."""
    assert checkpointing_package(spark_version) == package


def test_spark_s_own_modules_follow_the_running_pyspark() -> None:
    """Under another PySpark (a platform's), the Kafka connector, the cloud module and the checkpoint manager are
    that Spark's: a connector built for another Spark fails on its internal API, a class of another package is not
    found (the job failed at its query's start on PySpark 4.2.0 before)."""
    probe = ("import pyspark; pyspark.__version__ = '4.2.0'; from streaming import session as s; "
             "print(s.KAFKA_CONNECTOR, s.HADOOP_CLOUD, s.FILESYSTEM_CHECKPOINT_MANAGER)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
                                  "org.apache.spark:spark-hadoop-cloud_2.13:4.2.0",
                                  "org.apache.spark.sql.execution.streaming.checkpointing."
                                  "FileSystemBasedCheckpointFileManager"]
    assert KAFKA_CONNECTOR.rsplit(":", 1)[1] == HADOOP_CLOUD.rsplit(":", 1)[1] == pyspark.__version__


def test_local_mode_stays_on_loopback_with_one_state_task_per_core() -> None:
    conf = spark_conf(StreamConfig(spark_master="local[3]"))
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == conf["spark.default.parallelism"] == "3"
    assert conf[CHECKPOINT_MANAGER] == FILESYSTEM_CHECKPOINT_MANAGER
    assert conf["spark.jars.packages"] == KAFKA_CONNECTOR
    assert "spark.archives" not in conf  # the executors are this process's
    assert conf["spark.sql.codegen.factoryMode"] == "NO_CODEGEN"  # interpreted projections (measured faster)
    # the operator's setting wins: Spark's default code generation back
    fallback = spark_conf(StreamConfig(spark_conf={"spark.sql.codegen.factoryMode": "FALLBACK"}))
    assert fallback["spark.sql.codegen.factoryMode"] == "FALLBACK"


def test_a_cluster_master_gets_its_own_addresses_the_code_archive_and_its_cores_as_state_tasks() -> None:
    cfg = StreamConfig(spark_master="spark://10.0.0.5:7077", checkpoint_dir="hdfs://nn:8020/replmon/cp",
                       spark_conf={"spark.cores.max": "6"})
    conf = spark_conf(cfg, code_archive="/cache/replmon-code-1.zip")
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert "spark.default.parallelism" not in conf
    assert conf["spark.sql.shuffle.partitions"] == "6"
    assert CHECKPOINT_MANAGER not in conf  # HDFS: Spark's own FileContext manager (rename with overwrite)
    assert conf["spark.archives"] == "file:///cache/replmon-code-1.zip#replmon-code"
    assert conf["spark.executorEnv.PYTHONPATH"] == "replmon-code"


def test_configured_parallelism_and_addresses_win_and_executor_counts_give_the_cores() -> None:
    cfg = StreamConfig(spark_master="yarn", state_parallelism=12, driver_host="10.1.2.3", driver_bind_address="0.0.0.0")
    conf = spark_conf(cfg)
    assert (conf["spark.sql.shuffle.partitions"], conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == (
        "12", "10.1.2.3", "0.0.0.0")
    counted = spark_conf(StreamConfig(spark_master="k8s://https://api:6443", spark_conf={
        "spark.executor.instances": "4", "spark.executor.cores": "2"}))
    assert counted["spark.sql.shuffle.partitions"] == "8"
    unknown = spark_conf(StreamConfig(spark_master="yarn"))
    assert "spark.sql.shuffle.partitions" not in unknown  # Spark's default parallelism, once the session runs
    assert spark_conf(StreamConfig(spark_conf={"spark.sql.shuffle.partitions": "5"}))[
        "spark.sql.shuffle.partitions"] == "5"


@pytest.mark.parametrize(("checkpoint", "manager"), [
    ("/var/lib/replmon/cp", FILESYSTEM_CHECKPOINT_MANAGER),
    ("file:///var/lib/replmon/cp", FILESYSTEM_CHECKPOINT_MANAGER),
    ("hdfs://nn/replmon", None),
    ("viewfs://cluster/replmon", None),
    ("s3a://bucket/replmon", ABORTABLE_CHECKPOINT_MANAGER),
    ("abfss://c@a.dfs.core.windows.net/replmon", ABORTABLE_CHECKPOINT_MANAGER),
    ("gs://bucket/replmon", ABORTABLE_CHECKPOINT_MANAGER),
])
def test_each_store_gets_the_checkpoint_manager_it_needs(checkpoint: str, manager: str | None) -> None:
    conf = spark_conf(StreamConfig(checkpoint_dir=checkpoint))
    assert conf.get(CHECKPOINT_MANAGER) == manager
    assert (HADOOP_CLOUD in conf["spark.jars.packages"]) is (manager == ABORTABLE_CHECKPOINT_MANAGER)


def test_spark_submit_s_master_packages_and_conf_win_and_are_not_repeated() -> None:
    submitted = {"spark.master": "spark://m:7077", "spark.app.name": "job.py", "spark.jars.packages": "x:y:1",
                 "spark.sql.shuffle.partitions": "16", "spark.archives": "hdfs://nn/env.tar.gz#environment",
                 "spark.executorEnv.PYTHONPATH": "environment/lib"}
    conf = spark_conf(StreamConfig(), submitted=submitted, code_archive="/cache/code.zip")
    assert not {"spark.master", "spark.app.name", "spark.jars.packages", "spark.jars.ivy",
                "spark.sql.shuffle.partitions"} & set(conf)
    assert "spark.driver.host" not in conf  # a cluster master: not loopback
    assert conf["spark.archives"] == "hdfs://nn/env.tar.gz#environment,file:///cache/code.zip#replmon-code"
    assert conf["spark.executorEnv.PYTHONPATH"] == "replmon-code:environment/lib"
    local = spark_conf(StreamConfig(), submitted={"spark.master": "local[4]"})
    assert local["spark.driver.host"] == "127.0.0.1" and local["spark.sql.shuffle.partitions"] == "4"


def test_the_code_archive_holds_what_executors_import_and_is_rebuilt_only_when_the_code_changes(
    tmp_path: Path,
) -> None:
    first = code_archive.build(tmp_path)
    names = zipfile.ZipFile(first).namelist()
    assert {"replmon/__init__.py", "replmon/contracts/events.py", "streaming/processor.py",
            "streaming/worker_daemon.py"} <= set(names)
    assert not [n for n in names if n.startswith(("replmon/cli/", "replmon/testbed/", "collectors/"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert code_archive.build(tmp_path) == first and len(list(tmp_path.iterdir())) == 1


def test_the_connector_resolved_once_is_given_as_its_jars_without_the_ones_spark_bundles(cache: Path) -> None:
    """Spark's Ivy resolution at every start costs seconds, and for a Python application copies each jar among
    the session's files: once resolved, a start names the jars (local mode: those Spark bundles left out, its own
    class path wins over them anyway); a jar gone, or other packages, and Ivy resolves again."""
    ivy = cache / "ivy"
    jars = ivy / "jars"
    jars.mkdir(parents=True)
    own = sorted(bundled_jars())
    assert "hadoop-client-api-3.4.1.jar" in own  # pyspark's distribution, as the connector's POM names it
    names = ["org.apache.spark_spark-sql-kafka-0-10_2.13-4.0.0.jar", "org.apache.kafka_kafka-clients-3.9.0.jar",
             "org.apache.hadoop_hadoop-client-api-3.4.1.jar", "org.apache.commons_commons-pool2-2.12.0.jar"]
    for name in names:
        (jars / name).write_bytes(b"PK")
    # Spark's spark.jars after the resolution: the operator's own jars, then those Ivy retrieved
    remember_jars(ivy, [KAFKA_CONNECTOR], ",".join(["/opt/udfs.jar", *(f"file://{jars / n}" for n in names)]))

    local = spark_conf(StreamConfig())
    assert not {"spark.jars.packages", "spark.jars.ivy", "spark.jars.ivySettings"} & set(local)
    assert local["spark.jars"].split(",") == [str(jars / n) for n in names if "hadoop" not in n]
    mine = spark_conf(StreamConfig(spark_conf={"spark.jars": "/opt/udfs.jar"}))  # the operator's own jars too
    assert mine["spark.jars"].split(",") == ["/opt/udfs.jar", *local["spark.jars"].split(",")]
    cluster = spark_conf(StreamConfig(spark_master="spark://10.0.0.5:7077"))  # executors of another Spark install
    assert cluster["spark.jars"].split(",") == [str(jars / n) for n in names]
    # an object store's checkpoint needs Spark's cloud module as well: not resolved yet
    cloud = spark_conf(StreamConfig(checkpoint_dir="s3a://bucket/replmon"))
    assert "spark.jars" not in cloud and HADOOP_CLOUD in cloud["spark.jars.packages"]

    (jars / names[1]).unlink()  # the cache pruned
    again = spark_conf(StreamConfig())
    assert "spark.jars" not in again and again["spark.jars.packages"] == KAFKA_CONNECTOR
    (ivy / RESOLVED).write_text("{not json")
    assert spark_conf(StreamConfig())["spark.jars.packages"] == KAFKA_CONNECTOR
    # a cache the job cannot write to: the start goes on, the next one resolves again
    (ivy / RESOLVED).unlink()
    (ivy / RESOLVED).mkdir()
    remember_jars(ivy, [KAFKA_CONNECTOR], f"file://{jars / names[0]}")
    assert spark_conf(StreamConfig())["spark.jars.packages"] == KAFKA_CONNECTOR
    assert not [p.name for p in ivy.iterdir() if p.name.startswith(f".{RESOLVED}")], "no temporary file left"


def test_an_air_gapped_site_s_connector_directory_gives_the_jars_beside_the_operator_s(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "kafka-clients-3.9.0.jar"):
        (jars / name).write_bytes(b"PK")
    conf = spark_conf(StreamConfig(kafka_jars_dir=jars, spark_conf={"spark.jars": "/opt/udfs.jar"}))
    assert conf["spark.jars"].split(",") == ["/opt/udfs.jar", str(jars / "kafka-clients-3.9.0.jar"),
                                             str(jars / "spark-sql-kafka-0-10_2.13-4.0.0.jar")]
    assert "spark.jars.packages" not in conf
    (jars / "spark-sql-kafka-0-10_2.13-4.0.0.jar").unlink()
    with pytest.raises(ReplmonError, match="no spark-sql-kafka-0-10 jar"):
        spark_conf(StreamConfig(kafka_jars_dir=jars))
