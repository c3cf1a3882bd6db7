"""Kafka's own reader of log files as a test oracle (replmon.testbed.localcluster.dump): the batches of a partition's
log and the controller's metadata records as Kafka decodes them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster.dump import DUMP_RECORD, dump_log_segments

BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: \d+ .* partitionLeaderEpoch: (-?\d+) "
                   r"isTransactional: \w+ isControl: (\w+)")


class Batch(NamedTuple):
    base_offset: int
    last_offset: int
    leader_epoch: int


def log_batches(partition_dir: Path) -> list[Batch]:
    """Every batch of a partition's log, in offset order, as Kafka reads the segment files now."""
    segments = sorted(partition_dir.glob("*.log"))
    return [Batch(int(m[1]), int(m[2]), int(m[3]))
            for line in dump_log_segments(segments).splitlines() if (m := BATCH.match(line))]


def lineage_of(batches: list[Batch]) -> list[tuple[int, int]]:
    """(leader epoch, start offset) where each epoch's batches begin: what the leader-epoch-checkpoint holds."""
    out: list[tuple[int, int]] = []
    for b in batches:
        if not out or b.leader_epoch > out[-1][0]:
            out.append((b.leader_epoch, b.base_offset))
    return out


def dump_metadata_log(files: list[Path]) -> dict[Path, dict[int, dict[str, Any]]]:
    """Kafka's DumpLogSegments with its cluster metadata decoder on ``files``: per file, per offset, the record's
    CreateTime, its batch's leader epoch and the payload JSON ({type, version, data})."""
    out = dump_log_segments(files, "--cluster-metadata-decoder")
    dumped: dict[Path, dict[int, dict[str, Any]]] = {}
    current: dict[int, dict[str, Any]] = {}
    epoch = -1
    for line in out.splitlines():
        if line.startswith("Dumping "):
            current = dumped.setdefault(Path(line[len("Dumping "):]), {})
        elif match := BATCH.match(line):
            epoch = int(match[3])
        elif match := DUMP_RECORD.match(line):
            payload = match[3]
            assert payload.startswith("{"), f"Kafka's decoder failed: {line}"
            current[int(match[1])] = {"time": int(match[2]), "epoch": epoch, **json.loads(payload)}
    return dumped


def controller_metadata_records(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Every record of the local cluster's controller's metadata log (node 0), in log order, as Kafka's dump tool
    decodes it (:func:`dump_metadata_log`)."""
    segments = sorted((cluster.node(0).data_dir / "__cluster_metadata-0").glob("*.log"))
    return [r for by_offset in dump_metadata_log(segments).values() for _, r in sorted(by_offset.items())]
