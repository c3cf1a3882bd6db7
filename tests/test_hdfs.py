"""The tests' HDFS (Hadoop's MiniDFSCluster on loopback) through PySpark's own Hadoop client: a file written,
listed and read back, and the HDFS semantics replmon relies on: a rename onto an existing file fails (returns
false) instead of replacing it, as it would on a local file system."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from replmon.testbed.hdfs import HADOOP_VERSION, MiniHdfs


def test_minihdfs_runs_the_hadoop_of_pysparks_client() -> None:
    """A PySpark upgrade that moves its bundled Hadoop must move HADOOP_VERSION (and so MiniHdfs's jars) too."""
    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"hadoop-client-api-{HADOOP_VERSION}.jar").exists(), sorted(
        p.name for p in jars.glob("hadoop-client-api-*.jar"))


@pytest.mark.hdfs
def test_write_list_read_back_and_rename_onto_an_existing_file_fails(hdfs: MiniHdfs, spark: SparkSession) -> None:
    jvm = spark._jvm
    assert jvm is not None
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.set("dfs.replication", "1")  # one datanode
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI(hdfs.uri), conf)
    hpath = jvm.org.apache.hadoop.fs.Path
    root, x, y = (hpath(f"{hdfs.uri}/replmon-test{name}") for name in ("", "/x", "/y"))

    def write(path: object, text: str) -> None:
        out = fs.create(path, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()

    def read(path: object) -> str:
        stream = fs.open(path)
        try:
            return bytes(stream.readAllBytes()).decode()
        finally:
            stream.close()

    try:
        fs.delete(root, True)
        write(x, "replmon on hdfs\n")
        listed = {s.getPath().toString(): s.getLen() for s in fs.listStatus(root)}
        assert listed == {f"{hdfs.uri}/replmon-test/x": len("replmon on hdfs\n")}
        assert read(x) == "replmon on hdfs\n"
        assert [r.value for r in spark.read.text(f"{hdfs.uri}/replmon-test/x").collect()] == ["replmon on hdfs"]

        write(y, "the other one\n")
        assert fs.rename(y, x) is False  # HDFS keeps the target: no silent overwrite
        assert read(x) == "replmon on hdfs\n" and read(y) == "the other one\n"
        assert fs.rename(y, hpath(f"{hdfs.uri}/replmon-test/z")) is True  # onto a free name it moves
        assert not fs.exists(y)
    finally:
        fs.delete(root, True)
        fs.close()
