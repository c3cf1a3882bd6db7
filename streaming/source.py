"""The samples topic as a stream: Spark's official Kafka source, with the job's settings and the samples cluster's
security (its certificates inline in the source's options: they reach every executor with the query, and no
executor needs the driver's files)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from streaming.session import KAFKA_CONNECTOR, spark_release

SOURCE_FETCH_MAX_WAIT_MS = 20
"""The Kafka source's consumers read offset ranges known to exist, in tasks; with the consumer's default (500
ms) a fetch left in flight at the end of a range held the next read of that partition for up to 500 ms, and
every micro-batch's read stage took ~0.5 s longer (measured: 6 read tasks of 8-50 records, mostly 700-900 ms
-> 200-330 ms)."""


def read_tasks(spark: SparkSession, config: ReplmonConfig) -> int:
    """The Kafka source's minPartitions: ``stream.read_tasks``, else one per core of the job (Spark's default
    parallelism: local[N]'s N, or the executors' cores when the query starts). Without it Spark reads a
    micro-batch in one task per partition holding data, however many cores the job has: a samples topic of 6
    partitions read by 6 tasks on 32 executor cores. On 2 cores (fewer than the partitions) it changes nothing;
    splitting 6 partitions into 7 or 8 tasks there made the stateless read 4% faster and the job no faster
    (docs/benchmarks.md, "Streaming job")."""
    given = config.stream.read_tasks
    return given if given is not None else spark.sparkContext.defaultParallelism


def kafka_source(spark: SparkSession, config: ReplmonConfig, starting_offsets: str | None = None) -> DataFrame:
    """``starting_offsets``: where a new query starts (JSON offsets; default ``stream.starting_offsets``); a query
    with a checkpoint resumes from it."""
    _require_kafka_source(spark)
    stream = config.stream
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", ",".join(config.samples_bootstrap()))
              .option("subscribe", config.transport.samples_topic)
              .option("startingOffsets", starting_offsets or stream.starting_offsets)
              .option("failOnDataLoss", "false")
              .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_MAX_WAIT_MS))
              .option("minPartitions", str(read_tasks(spark, config))))
    for key, value in config.samples_security().java_client(inline=True).items():
        reader = reader.option(f"kafka.{key}", value)
    if stream.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(stream.max_offsets_per_trigger))
    return reader.load()


def _require_kafka_source(spark: SparkSession) -> None:
    """One clear line when Spark's Kafka source is not on the classpath (spark-submit without --packages), or is
    another Spark release's (a ``--packages`` line copied from another platform's Spark)."""
    jvm: Any = spark._jvm
    try:
        provider = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "kafka", spark._jsparkSession.sessionState().conf())
    except Exception as exc:
        raise ReplmonError(f"Spark's Kafka source is not on the classpath: start spark-submit with --packages "
                           f"{KAFKA_CONNECTOR} (or --jars with it and its dependencies)") from exc
    package = provider.getPackage()
    version = package.getImplementationVersion() if package is not None else None
    refusal = connector_refusal(None if version is None else str(version), spark.version)
    if refusal is not None:
        raise ReplmonError(refusal)


def connector_refusal(connector_version: str | None, spark_version: str) -> str | None:
    """Why Spark's Kafka source of ``connector_version`` (its jar's Implementation-Version) cannot serve
    ``spark_version``, or None: a connector of another release (major.minor) is built against another Spark's
    internal API, and fails, if at all, only at the query's start or in its tasks. None when the jar does not
    say its version."""
    if connector_version is None or spark_release(connector_version) == spark_release(spark_version):
        return None
    connector = KAFKA_CONNECTOR.rsplit(":", 1)[0]
    return (f"Spark's Kafka source on the classpath is {connector_version}'s, and this Spark is {spark_version}: "
            f"start spark-submit with --packages {connector}:{spark_version} (the connector of the Spark that "
            f"runs the job)")
