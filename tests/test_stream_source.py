"""Spark's Kafka source missing from the classpath (spark-submit without --packages) is one clear line, not a
class-loading stack trace at the query's start."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from streaming.session import KAFKA_CONNECTOR
from streaming.source import kafka_source

pytestmark = [pytest.mark.spark]


def test_a_session_without_the_kafka_source_is_told_which_package_to_add(spark: SparkSession) -> None:
    config = ReplmonConfig(transport={"bootstrap_servers": ["127.0.0.1:9"]})  # the test session has no connector
    with pytest.raises(ReplmonError, match=f"--packages {KAFKA_CONNECTOR}"):
        kafka_source(spark, config)
