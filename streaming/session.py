"""The Spark session of the job: local master, Spark's official Kafka source, RocksDB state store, and the
project's own Python interpreter for the Python workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from replmon.core.config import StreamConfig
from replmon.core.errors import ReplmonError
from replmon.core.paths import MAVEN_REPOSITORY_ENV, cache_dir
from streaming import pyspark_hooks

SPARK_VERSION = pyspark_hooks.PINNED_PYSPARK
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas"
"""Spark's default (secret|password|token|access.key) plus ``jaas``: ``kafka.sasl.jaas.config``."""
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
FILESYSTEM_CHECKPOINT_MANAGER = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"

STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # a commit writes the batch's changes, not a snapshot of the store (snapshots in the background); Spark
    # reads a checkpoint written either way, so it applies to existing checkpoints too
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # The checkpoint is a local directory (stream.checkpoint_dir). Spark's default manager renames a checkpoint
    # file through Hadoop's FileContext, which on the local filesystem starts a `readlink` process (and more)
    # per rename: the offsets log, the commit log and each state task's changelog, every micro-batch, ~40 ms
    # apiece on a busy JVM. Hadoop's FileSystem.rename is a plain rename(2) there, as atomic, and the files are
    # the same: a checkpoint written by either manager is read by the other.
    "spark.sql.streaming.checkpointFileManagerClass": FILESYSTEM_CHECKPOINT_MANAGER,
}
"""How the session keeps the query's state and checkpoint (also the tests' own sessions)."""


PYTHON_CONF = {
    "spark.python.worker.reuse": "true",
    # pyspark.daemon without imports from zip archives, when the PySpark version is the one its hook is written
    # for: streaming/worker_daemon.py (0.3-0.5 s of CPU per task)
    **pyspark_hooks.daemon_conf(),
    # PySpark's DataFrame debugging records the Python call site of every Column function in the JVM: 5 Py4J
    # round trips per call, ~2,900 calls when parse_samples builds its checks (several seconds at each start)
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
"""How the session runs Python, in the driver and in the workers (also the tests' own sessions)."""


def connector_jars(jars_dir: Path) -> list[str]:
    """The jars of an air-gapped site's connector directory (spark-sql-kafka-0-10 and its dependencies)."""
    jars = sorted(str(p) for p in Path(jars_dir).expanduser().glob("*.jar"))
    if not any("spark-sql-kafka-0-10" in Path(j).name for j in jars):
        raise ReplmonError(f"stream.kafka_jars_dir {jars_dir} holds no spark-sql-kafka-0-10 jar")
    return jars


def ivy_settings(cache: Path, repository: str | None = None) -> str:
    """Ivy settings for spark.jars.packages: Maven Central (or a mirror) only, cached under ``cache``.

    Spark's default chain also asks ~/.m2, where a POM without its jar (left by Maven) fails the resolution."""
    root = repository or "https://repo1.maven.org/maven2/"
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="central"/>\n'
        f'  <caches defaultCacheDir="{cache / "cache"}"/>\n'
        f'  <resolvers><ibiblio name="central" m2compatible="true" root="{root}"/></resolvers>\n'
        "</ivysettings>\n"
    )


def spark_conf(cfg: StreamConfig, app_name: str = "replmon") -> dict[str, str]:
    """Every setting the job's session gets (pure: tested without Spark)."""
    conf = {
        "spark.app.name": app_name,
        "spark.master": cfg.spark_master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # the job's log carries replmon's lines and Spark's warnings
        "spark.driver.memory": "2g",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # the state's partitions (fixed by a checkpoint's first batch; a later change applies to new checkpoints
        # only): one per core of local[2]. Each costs a fixed ~0.3 s per micro-batch (its state store's load and
        # commit, its Python worker's setup); 4 on 2 cores ran in two waves.
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        **STATE_CONF,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.adaptive.enabled": "false",
        **PYTHON_CONF,
        # the Kafka source's options carry the SASL JAAS config (with its password): Spark masks settings and
        # data source options whose key or value matches these wherever it shows them (logs, plans, UI)
        "spark.redaction.regex": REDACTION_REGEX,
        "spark.sql.redaction.options.regex": "(?i)url|" + REDACTION_REGEX.removeprefix("(?i)"),
    }
    if cfg.kafka_jars_dir is not None:
        conf["spark.jars"] = ",".join(connector_jars(cfg.kafka_jars_dir))
    else:
        ivy = cache_dir() / "ivy"
        ivy.mkdir(parents=True, exist_ok=True)
        settings = ivy / "ivysettings.xml"
        settings.write_text(ivy_settings(ivy, os.environ.get(MAVEN_REPOSITORY_ENV)))
        conf["spark.jars.ivy"] = str(ivy)
        conf["spark.jars.ivySettings"] = str(settings)
        conf["spark.jars.packages"] = KAFKA_CONNECTOR
    conf.update(cfg.spark_conf)
    return conf


def get_session(cfg: StreamConfig, app_name: str = "replmon") -> SparkSession:
    # Spark's Python workers run the interpreter of this process: the project's venv.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(cfg, app_name).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start or the connector did not resolve
        raise ReplmonError(f"cannot start Spark: {str(exc).splitlines()[0]}") from exc
    spark.sparkContext.setLogLevel("WARN")
    return spark
