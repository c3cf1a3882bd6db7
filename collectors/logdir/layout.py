"""Names of the files and directories in a Kafka log dir (Kafka 4.x, ``LocalLog`` / ``LogFileUtils``).

A log dir holds one directory per replica, ``<topic>-<partition>``, plus at its root ``meta.properties``
and the offset checkpoints shared by all its replicas. Directories of logs being deleted, moved between log
dirs or left behind by KRaft (stray) carry a suffix after a unique id: ``<topic>-<partition>.<id>-delete``,
``-future``, ``-stray``; they are not replicas the broker serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from replmon.core.kafka_names import TOPIC_NAME

META_PROPERTIES = "meta.properties"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
SKIPPED_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX, ".stray")
CLUSTER_METADATA_DIR = "__cluster_metadata-0"
"""The KRaft metadata log: a Raft log with its own files (quorum-state), not a replicated partition."""

_PARTITION_DIR = re.compile(rf"^(?P<topic>{TOPIC_NAME})-(?P<partition>0|[1-9][0-9]{{0,9}})$")
_SEGMENT_FILE = re.compile(r"^(?P<base>[0-9]{20})\.log$")


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """The replica a directory holds, or None when the directory is not a served replica's log (metadata log,
    ``-delete``/``-future``/``-stray`` dirs, anything else)."""
    if name == CLUSTER_METADATA_DIR or name.endswith(SKIPPED_DIR_SUFFIXES):
        return None
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    partition = int(match["partition"])
    if partition > 2**31 - 1:
        return None
    return TopicPartition(match["topic"], partition)


def segment_base_offset(file_name: str) -> int | None:
    """The base offset of a segment file ``00000000000000001234.log``; None for any other file (indexes,
    ``.log.deleted``, ``.log.cleaned``, ``.log.swap``, ...)."""
    match = _SEGMENT_FILE.match(file_name)
    return int(match["base"]) if match else None


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_FILE_SUFFIX}"
