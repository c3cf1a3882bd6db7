"""Scan time of the log-dir agent over a synthetic log dir laid out like Kafka's.

    .venv/bin/python -m collectors.logdir.bench --partitions 5000 [--dir PATH] [--cycles 3]

Each partition gets an active segment of ``--batches`` 1 KiB batches with an offset index entry every 4 KiB
(preallocated to 10 MiB, sparse, as Kafka does for the active segment), a sparse time index,
leader-epoch-checkpoint and partition.metadata; the root gets the three offset checkpoints and
meta.properties. Prints the wall time of the first (cold-ish) and of the following scans.
"""

from __future__ import annotations

import argparse
import os
import struct
import tempfile
import time
from pathlib import Path

from kafka.record.util import calc_crc32c

from collectors.logdir.files import VerifiedBatches
from collectors.logdir.layout import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from collectors.logdir.scanner import ScanContext, scan_log_dir

INDEX_PREALLOCATED = 10 * 1024 * 1024
INDEX_INTERVAL_BYTES = 4096


def v2_batch(base_offset: int, records: int, leader_epoch: int, payload_size: int) -> bytes:
    after_crc = struct.pack(">hiqqqhii", 0, records - 1, 0, 0, -1, -1, -1, records) + b"p" * payload_size
    after_length = struct.pack(">ibI", leader_epoch, 2, calc_crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def make_partition(path: Path, base_offset: int, batches: int) -> int:
    path.mkdir()
    log, index = bytearray(), bytearray()
    since_index = 0
    offset = base_offset
    for _ in range(batches):
        if since_index > INDEX_INTERVAL_BYTES:
            index += struct.pack(">ii", offset + 9 - base_offset, len(log))
            since_index = 0
        batch = v2_batch(offset, 10, 3, 1000)
        log += batch
        since_index += len(batch)
        offset += 10
    name = f"{base_offset:020d}"
    (path / f"{name}.log").write_bytes(log)
    for suffix, content in ((".index", index), (".timeindex", b"")):
        with open(path / f"{name}{suffix}", "wb") as f:
            f.write(content)
            f.truncate(INDEX_PREALLOCATED)
    (path / LEADER_EPOCH_CHECKPOINT).write_text(f"0\n2\n0 0\n3 {base_offset}\n")
    (path / PARTITION_METADATA).write_text("version: 0\ntopic_id: mTOJ9eNIQlK7J1Ix-ndbIw\n")
    return offset


def make_log_dir(root: Path, partitions: int, batches: int) -> None:
    (root / META_PROPERTIES).write_text("node.id=1\nversion=1\n")
    leos = {}
    for p in range(partitions):
        leos[p] = make_partition(root / f"bench-{p}", 1000 * p, batches)
    lines = "".join(f"bench {p} {leo}\n" for p, leo in leos.items())
    for name in (REPLICATION_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        (root / name).write_text(f"0\n{partitions}\n{lines}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=40, help="1 KiB batches in each active segment")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to build the log dir (default: a temporary dir)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="replmon-logdir-bench-"))
    if not (root / META_PROPERTIES).exists():
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        make_log_dir(root, args.partitions, args.batches)
        print(f"built {args.partitions} partitions in {root} in {time.perf_counter() - started:.1f} s")
    verified = VerifiedBatches()  # as the agent keeps it across cycles
    for cycle in range(args.cycles):
        ctx = ScanContext(cluster="bench", agent_id="bench", cycle=cycle, sample_time_ms=0)
        started, cpu = time.perf_counter(), time.process_time()
        checked_before = verified.checked
        scan = scan_log_dir(root, ctx, verified=verified)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        errors = sum(1 for s in scan.samples if s.error)
        print(f"cycle {cycle}: {len(scan.samples)} replicas in {elapsed:.2f} s "
              f"({elapsed / max(1, len(scan.samples)) * 1e6:.0f} us/replica), {errors} with errors, "
              f"{verified.checked - checked_before} CRC checks, "
              f"{cpu:.2f} s CPU, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
