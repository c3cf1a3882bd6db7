"""One scan of a broker's log dirs: every replica on disk becomes a ReplicaSample.

A log dir that cannot be read yields one message (``LogDirScan.error``) and no samples; a replica whose files
are corrupt yields a sample carrying what could be read and ``error`` naming what could not. Neither stops the
scan of the others.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from collectors.logdir import layout
from collectors.logdir.checkpoints import (
    CheckpointError,
    node_id_from_meta_properties,
    parse_offset_checkpoint,
)
from collectors.logdir.files import ReplicaFiles, VerifiedBatches, read_parsed, read_replica_dir
from collectors.logdir.layout import TopicPartition
from replmon.contracts.samples import MAX_LINEAGE, ReplicaSample

ROOT_CHECKPOINTS = (
    layout.REPLICATION_OFFSET_CHECKPOINT,
    layout.RECOVERY_POINT_OFFSET_CHECKPOINT,
    layout.LOG_START_OFFSET_CHECKPOINT,
)


@dataclass(frozen=True)
class ScanContext:
    """Who scans, which cycle: stamped on every sample."""

    cluster: str
    agent_id: str
    cycle: int
    sample_time_ms: int


@dataclass
class LogDirScan:
    log_dir: Path
    broker_id: int | None = None
    samples: list[ReplicaSample] = field(default_factory=list)
    error: str | None = None
    """Why the log dir as a whole could not be read (then there are no samples)."""


@dataclass
class RootCheckpoints:
    """The offset checkpoints at a log dir's root, shared by all its replicas."""

    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, tp: TopicPartition) -> int | None:
        return self.offsets.get(name, {}).get(tp)


def read_broker_id(log_dir: Path) -> int:
    """``node.id`` from the log dir's meta.properties."""
    try:
        broker_id = read_parsed(log_dir / layout.META_PROPERTIES, node_id_from_meta_properties)
    except OSError as exc:
        raise CheckpointError(f"cannot read {layout.META_PROPERTIES}: {exc.strerror or exc}") from None
    if broker_id is None:
        raise CheckpointError(f"no {layout.META_PROPERTIES} (not a formatted Kafka log dir?); "
                              "give --broker-id")
    return broker_id


def broker_id_conflict(log_dir: Path, broker_id: int) -> str | None:
    """Why ``log_dir`` is no log dir of broker ``broker_id`` (an ``--broker-id`` given): its meta.properties names
    another node, whose replicas would be reported as this broker's. None when it names this one, or names none
    (what ``--broker-id`` is for) or cannot be read (the scan says so)."""
    try:
        found = read_broker_id(log_dir)
    except CheckpointError:
        return None
    if found == broker_id:
        return None
    return (f"log dir {log_dir} belongs to broker {found} (node.id in its {layout.META_PROPERTIES}), not to "
            f"--broker-id {broker_id}")


def read_root_checkpoints(log_dir: Path) -> RootCheckpoints:
    root = RootCheckpoints()
    for name in ROOT_CHECKPOINTS:
        try:
            parsed = read_parsed(log_dir / name, partial(parse_offset_checkpoint, what=name))
            root.offsets[name] = parsed or {}
            if parsed is None:
                # a broker creates its checkpoints at start-up and replaces them only by renaming
                root.errors[name] = f"no {name} (deleted?)"
        except CheckpointError as exc:
            root.errors[name] = str(exc)
        except OSError as exc:
            root.errors[name] = f"cannot read {name}: {exc.strerror or exc}"
    return root


def replica_sample(ctx: ScanContext, broker_id: int, log_dir: Path, tp: TopicPartition, files: ReplicaFiles,
                   root: RootCheckpoints) -> ReplicaSample:
    """Pure: one ReplicaSample from what was read of the replica and of its log dir's root."""
    log_start = root.get(layout.LOG_START_OFFSET_CHECKPOINT, tp)
    if files.first_segment_base_offset is not None:
        # as Kafka's LogLoader: the checkpoint only lists logs whose start is past their first segment's base
        log_start = max(log_start or 0, files.first_segment_base_offset)
    errors = list(files.errors) + list(root.errors.values())
    return ReplicaSample(
        cluster=ctx.cluster, agent_id=ctx.agent_id, cycle=ctx.cycle, sample_time_ms=ctx.sample_time_ms,
        broker_id=broker_id, log_dir=str(log_dir), topic=tp.topic, topic_id=files.topic_id,
        partition=tp.partition,
        log_end_offset=files.tail.log_end_offset if files.tail else None,
        high_watermark_checkpoint=root.get(layout.REPLICATION_OFFSET_CHECKPOINT, tp),
        recovery_point=root.get(layout.RECOVERY_POINT_OFFSET_CHECKPOINT, tp),
        log_start_offset=log_start,
        epoch_lineage=files.epoch_lineage[-MAX_LINEAGE:],  # the newest: a replica of countless elections
        last_batch_leader_epoch=(files.tail.last_batch.partition_leader_epoch
                                 if files.tail and files.tail.last_batch else None),
        size_bytes=files.size_bytes,
        error="; ".join(errors) or None,
    )


def partition_dirs(log_dir: Path) -> list[tuple[TopicPartition, Path]]:
    """The replicas' directories of a log dir, sorted; raises OSError when the log dir cannot be listed."""
    found = []
    with os.scandir(log_dir) as entries:
        for entry in entries:
            tp = layout.parse_partition_dir(entry.name)
            if tp is not None and entry.is_dir(follow_symlinks=False):
                found.append((tp, Path(entry.path)))
    return sorted(found)


def scan_log_dir(log_dir: Path, ctx: ScanContext, broker_id: int | None = None,
                 verified: VerifiedBatches | None = None) -> LogDirScan:
    """One log dir; ``verified`` (kept across cycles by the caller) spares CRC checks of unchanged batches."""
    scan = LogDirScan(log_dir=log_dir, broker_id=broker_id)
    try:
        replicas = partition_dirs(log_dir)
    except OSError as exc:
        scan.error = f"cannot read log dir {log_dir}: {exc.strerror or exc}"
        return scan
    if scan.broker_id is None:
        try:
            scan.broker_id = read_broker_id(log_dir)
        except CheckpointError as exc:
            scan.error = f"log dir {log_dir}: {exc}"
            return scan
    elif conflict := broker_id_conflict(log_dir, scan.broker_id):
        scan.error = conflict
        return scan
    root = read_root_checkpoints(log_dir)
    for tp, path in replicas:
        try:
            files = read_replica_dir(path, verified)
        except FileNotFoundError:
            continue  # the directory went away (deleted topic, moved replica): no such replica any more
        except OSError as exc:
            files = ReplicaFiles(errors=[f"cannot read {path.name}: {exc.strerror or exc}"])
        scan.samples.append(replica_sample(ctx, scan.broker_id, log_dir, tp, files, root))
    return scan


def scan_log_dirs(log_dirs: Iterable[Path], cluster: str, agent_id: str, cycle: int,
                  broker_id: int | None = None, verified: VerifiedBatches | None = None) -> list[LogDirScan]:
    ctx = ScanContext(cluster=cluster, agent_id=agent_id, cycle=cycle, sample_time_ms=int(time.time() * 1000))
    return [scan_log_dir(Path(d), ctx, broker_id, verified) for d in log_dirs]
