"""Spark's Kafka source missing from the classpath (spark-submit without --packages) is one clear line, not a
class-loading stack trace at the query's start; the read tasks the source is asked for (its split of a
partition among them, on a real topic: tests/test_session_start.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from streaming.session import KAFKA_CONNECTOR
from streaming.source import connector_refusal, kafka_source, read_tasks

pytestmark = [pytest.mark.spark]


def test_a_session_without_the_kafka_source_is_told_which_package_to_add(spark: SparkSession) -> None:
    config = ReplmonConfig(transport={"bootstrap_servers": ["127.0.0.1:9"]})  # the test session has no connector
    with pytest.raises(ReplmonError, match=f"--packages {KAFKA_CONNECTOR}"):
        kafka_source(spark, config)


def test_a_micro_batch_is_read_by_the_tasks_set_else_one_per_core(spark: SparkSession) -> None:
    assert read_tasks(spark, ReplmonConfig()) == spark.sparkContext.defaultParallelism
    assert read_tasks(spark, ReplmonConfig(stream={"read_tasks": 3})) == 3


def test_a_kafka_source_of_another_spark_release_is_refused_with_the_one_to_use() -> None:
    assert connector_refusal("4.0.0", "4.0.0") is None
    assert connector_refusal("4.0.0", "4.0.1") is None  # a patch release keeps the internal API
    assert connector_refusal(None, "4.2.0") is None  # a jar that does not say
    refusal = connector_refusal("4.0.0", "4.2.0")
    assert refusal is not None
    assert "on the classpath is 4.0.0's, and this Spark is 4.2.0" in refusal
    assert "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 " in refusal
