"""Download and cache every artifact replmon runs from Maven Central, so that later starts need no network:
Apache Kafka for the local cluster (and its tools jar, the tests' oracle), Hadoop's minicluster for the tests'
HDFS, and Spark's Kafka connector for the job. ``python -m replmon.cli.prefetch``."""

from __future__ import annotations

import sys

from replmon.core.config import StreamConfig
from replmon.core.errors import ReplmonError
from replmon.testbed import hdfs
from replmon.testbed.localcluster import artifacts


def main() -> int:
    try:
        libs = artifacts.kafka_libs()
        print(f"kafka {artifacts.KAFKA_VERSION}: {libs}")
        print(f"kafka-tools {artifacts.KAFKA_VERSION}: {artifacts.kafka_tools_jar()}")
        print(f"hadoop minicluster {hdfs.HADOOP_VERSION}: {hdfs.hdfs_libs()}")
        from streaming.session import KAFKA_CONNECTOR, get_session

        spark = get_session(StreamConfig(spark_master="local[1]"), app_name="replmon-prefetch")
        spark.stop()
        print(f"spark connector {KAFKA_CONNECTOR}: cached")
    except ReplmonError as exc:
        print(f"replmon: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
