"""The samples topic as a stream: Spark's official Kafka source, with the job's settings and the samples cluster's
security (its certificates inline in the source's options: they reach every executor with the query, and no
executor needs the driver's files)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from replmon.core.config import ReplmonConfig

SOURCE_FETCH_MAX_WAIT_MS = 20
"""The Kafka source's consumers read offset ranges known to exist, in tasks; with the consumer's default (500
ms) a fetch left in flight at the end of a range held the next read of that partition for up to 500 ms, and
every micro-batch's read stage took ~0.5 s longer (measured: 6 read tasks of 8-50 records, mostly 700-900 ms
-> 200-330 ms)."""


def kafka_source(spark: SparkSession, config: ReplmonConfig, starting_offsets: str | None = None) -> DataFrame:
    """``starting_offsets``: where a new query starts (JSON offsets; default ``stream.starting_offsets``); a query
    with a checkpoint resumes from it."""
    stream = config.stream
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", ",".join(config.samples_bootstrap()))
              .option("subscribe", config.transport.samples_topic)
              .option("startingOffsets", starting_offsets or stream.starting_offsets)
              .option("failOnDataLoss", "false")
              .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_MAX_WAIT_MS)))
    for key, value in config.samples_security().java_client(inline=True).items():
        reader = reader.option(f"kafka.{key}", value)
    if stream.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(stream.max_offsets_per_trigger))
    return reader.load()
