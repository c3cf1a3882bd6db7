"""The files the job keeps beside its checkpoint (the state bucket layout), read and written through the Hadoop
FileSystem of the Spark session, so that they live where the checkpoint lives: the driver's disk in local mode,
HDFS or an object store on a cluster (replmon.core.locations)."""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import SparkSession

from replmon.core import locations
from replmon.core.errors import ReplmonError
from streaming.pyspark_hooks import error_lines


class HadoopDirectory:
    """A directory on a Hadoop-compatible filesystem, through the session's JVM (the driver only)."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self.location = location
        self.uri = locations.spark_uri(location)
        jvm: Any = spark._jvm
        self._jvm = jvm
        conf = spark._jsc.hadoopConfiguration()
        self._root = jvm.org.apache.hadoop.fs.Path(self.uri)
        try:
            self._fs = self._root.getFileSystem(conf)
        except Exception as exc:  # UnsupportedFileSystemException: no connector on the classpath
            found = locations.scheme(location)
            raise ReplmonError(
                f"{location}: Spark has no Hadoop filesystem for {found}:// ({_first_line(exc)}); put its connector "
                "on the classpath (hadoop-aws for s3a, hadoop-azure for abfs, gcs-connector for gs) through "
                "stream.spark_conf or spark-submit --packages") from exc
        if locations.is_local(location):  # no .crc files beside these: an operator may read or replace them
            self._fs = self._fs.getRawFileSystem()

    def _path(self, name: str) -> Any:
        """``name`` under the directory; the directory itself for ``""``."""
        return self._jvm.org.apache.hadoop.fs.Path(self._root, name) if name else self._root

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self._path(name)))

    def is_dir(self, name: str) -> bool:
        path = self._path(name)
        return bool(self._fs.exists(path) and self._fs.getFileStatus(path).isDirectory())

    def list(self, name: str = "") -> list[str]:
        """The names in directory ``name`` (empty when it does not exist)."""
        path = self._path(name) if name else self._root
        if not self._fs.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in self._fs.listStatus(path))

    def read_bytes(self, name: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def create(self, name: str, data: bytes) -> None:
        """Write a new file, never replacing one: the create fails if another job wrote it first (HDFS, local);
        on an object store the object appears whole when the stream closes."""
        self._fs.mkdirs(self._root)
        stream = self._fs.create(self._path(name), False)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def check_writable(self, setting: str) -> None:
        """One clear ReplmonError, before the job starts, when this directory cannot be made or written to
        (``setting``: the configuration setting that names it); Spark would fail later, with a Java stack."""
        probe = self._path(f".replmon-write-check-{uuid.uuid4().hex}")
        try:
            if not self._fs.mkdirs(self._root):
                raise ReplmonError("the filesystem refused to make the directory")
            self._fs.create(probe, True).close()
            self._fs.delete(probe, False)
        except Exception as exc:
            raise ReplmonError(f"cannot write to {self.location} ({setting}): {java_message(exc)}") from None

    def delete(self, name: str) -> None:
        """Remove the file (nothing when it does not exist)."""
        self._fs.delete(self._path(name), False)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def java_message(exc: BaseException) -> str:
    """The Java exception behind ``exc`` as one line, its class and message (a Py4J error's own text is the call,
    then the Java stack: :func:`streaming.pyspark_hooks.error_lines`), else the first line of ``exc``."""
    lines = error_lines(exc)
    return lines[1][:300] if len(lines) > 1 else _first_line(exc)
