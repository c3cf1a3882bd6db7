"""Kafka's own reader of log files: ``kafka-dump-log.sh`` (org.apache.kafka.tools.DumpLogSegments, from Kafka's
tools jar, run on the local cluster's classpath). The ground truth of what a broker's log holds on disk, for the
tests and for the demo's account of an unclean election (what a leader that died held)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from replmon.testbed.localcluster import artifacts

DUMP_RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (-?\d+) .*? payload: (.*)$")


def kafka_tools_classpath() -> str:
    """The local cluster's classpath plus Kafka's tools jar (DumpLogSegments left the broker's jar for it in Kafka
    4)."""
    return f"{artifacts.kafka_libs()}/*{os.pathsep}{artifacts.kafka_tools_jar()}"


def dump_log_segments(files: list[Path], *options: str) -> str:
    """DumpLogSegments' output for ``files``."""
    return subprocess.run(
        [artifacts.java_executable(), "-cp", kafka_tools_classpath(), "org.apache.kafka.tools.DumpLogSegments",
         *options, "--files", ",".join(map(str, files))],
        capture_output=True, text=True, timeout=300, check=True).stdout


def log_records(partition_dir: Path) -> dict[int, str]:
    """Every record of a partition's log as Kafka reads the segment files now: offset -> payload (DumpLogSegments
    --print-data-log)."""
    segments = sorted(partition_dir.glob("*.log"))
    return {int(m[1]): m[3] for line in dump_log_segments(segments, "--print-data-log").splitlines()
            if (m := DUMP_RECORD.match(line))}
