"""A real HDFS for the tests: Hadoop's MiniDFSCluster (one NameNode, one DataNode) on loopback, in its own JVM,
its jars fetched from Maven Central once and cached like Kafka's."""

from replmon.testbed.hdfs.minihdfs import HADOOP_VERSION, MiniHdfs, hdfs_libs

__all__ = ["HADOOP_VERSION", "MiniHdfs", "hdfs_libs"]
