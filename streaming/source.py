"""The samples topic as a stream: Spark's official Kafka source, with the job's settings and the samples cluster's
security (its certificates inline in the source's options: they reach every executor with the query, and no
executor needs the driver's files)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from streaming.session import KAFKA_CONNECTOR

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
    """One clear line when Spark's Kafka source is not on the classpath (spark-submit without --packages)."""
    jvm: Any = spark._jvm
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "kafka", spark._jsparkSession.sessionState().conf())
    except Exception as exc:
        raise ReplmonError(f"Spark's Kafka source is not on the classpath: start spark-submit with --packages "
                           f"{KAFKA_CONNECTOR} (or --jars with it and its dependencies)") from exc
