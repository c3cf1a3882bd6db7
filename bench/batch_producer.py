"""Synthetic ``partition_batch/v1`` producer for bench/bench_stream.py: the workload of bench/SampleProducer.java
(same partitions, offsets, ISR churn and lineage, cycle after cycle), published as the collector publishes a
cycle: Arrow IPC batches (LZ4 frames) of at most ``BATCH_MAX_ENTRIES`` entries keyed ``cluster/#group``
(``collectors.publisher``), the Arrow schema the contract's (``replmon.contracts.batches.ARROW_SCHEMA``).

    .venv/bin/python bench/batch_producer.py key=value ...   (the keys of SampleProducer.java, plus offsets=PATH)

A cycle's columns are computed with numpy, a record at a time, from its partitions' indexes: building pydantic
models for 100,000 partitions per second would take a core of its own, on a machine whose cores the bench
measures. The bench checks the records it reads back against the model (``check_topic_records``).

Prints ``progress EPOCH_S SENT`` about once a second and ``done EPOCH_S SENT SECONDS`` at the end (SENT in
samples), as SampleProducer does; ``offsets=PATH`` gets a line ``PARTITION OFFSET ENTRIES`` per acknowledged
record, so that the bench counts the samples in a range of offsets.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.publisher import BATCH_GROUPS, BATCH_MAX_ENTRIES  # noqa: E402
from replmon.contracts.batches import ARROW_SCHEMA, COMPRESSED, write_stream  # noqa: E402

INT = pa.int64()


@dataclass
class Chunk:
    """One record's partitions: their global indexes and the columns that stay the same every cycle."""

    key: bytes
    index: np.ndarray
    static: dict[str, pa.Array]


def chunks(cluster: str, topics: int, per_topic: int) -> list[Chunk]:
    """The records of a cycle, grouped as the collector groups a cycle (CRC-32 of the topic + partition)."""
    index = np.arange(topics * per_topic, dtype=np.int64)
    topic_no, partition = np.divmod(index, per_topic)
    names = [f"bench-{t:03d}" for t in range(topics)]
    hashes = np.array([zlib.crc32(n.encode()) for n in names], dtype=np.int64)
    group = (hashes[topic_no] + partition) % BATCH_GROUPS
    out = []
    for g in range(BATCH_GROUPS):
        members = index[group == g]
        for start in range(0, len(members), BATCH_MAX_ENTRIES):
            i = members[start:start + BATCH_MAX_ENTRIES]
            t, p = np.divmod(i, per_topic)
            r0 = i % 3
            replicas = np.stack([1 + r0, 1 + (r0 + 1) % 3, 1 + (r0 + 2) % 3], axis=1)
            n = len(i)
            empty = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], INT))
            static = {
                "cluster": pa.array([cluster] * n), "collector_id": pa.array(["bench"] * n),
                "topic": pa.array([names[x] for x in t]),
                "topic_id": pa.array([f"BENCHTOPIC{x:012d}" for x in t]),
                "partition": pa.array(p), "leader": pa.array(replicas[:, 0]),
                "leader_epoch": pa.array(np.full(n, 3, np.int64)),
                "replicas": _lists(replicas.ravel(), np.full(n, 3)), "elr": empty, "last_known_elr": empty,
                "offline_replicas": empty, "adding_replicas": empty, "removing_replicas": empty,
                "log_start_offset": pa.array(np.zeros(n, np.int64)),
                "min_insync_replicas": pa.array(np.full(n, 2, np.int64)),
                "unclean_leader_election": pa.array(np.zeros(n, bool)),
                "error": pa.nulls(n, pa.string()), "replica_brokers": pa.array(replicas.ravel()),
            }
            out.append(Chunk(f"{cluster}/#{g}".encode(), i, static))
    return out


def _lists(values: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    mask = None if valid is None else pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, INT), mask=mask)


@dataclass
class Offsets:
    """A cycle's numbers for partitions ``i`` (their global indexes): the three replicas' LEOs in replica order,
    the HW, whether the third replica fell out of the ISR, whether the sample carries a lineage."""

    log_end_offsets: tuple[np.ndarray, np.ndarray, np.ndarray]
    high_watermark: np.ndarray
    shrunk: np.ndarray
    lineage: np.ndarray


def workload(i: np.ndarray, cycle: int, churn: int) -> Offsets:
    """The benches' workload (bench/SampleProducer.java's too): the leader's LEO +100 a cycle, followers a few
    behind, ``churn`` per mille of the partitions a cycle with a shrunk ISR, a lineage in 1 sample of 12."""
    leo = 1000 + 100 * cycle + i % 97
    leo1 = leo - (i + cycle) % 5
    shrunk = (churn > 0) & (np.mod(i * 7919 + cycle, 1000) < churn)
    leo2 = np.where(shrunk, leo - 90, leo - (i + 2 * cycle) % 3)
    hw = np.where(shrunk, np.minimum(leo, leo1), np.minimum(leo, np.minimum(leo1, leo2)))
    return Offsets((leo, leo1, leo2), hw, shrunk, (i + cycle) % 12 == 0)


def record(chunk: Chunk, cycle: int, churn: int, now_ms: int) -> bytes:
    """The chunk's batch for ``cycle``: the :func:`workload`'s offsets, ISR and lineage, computed in numpy."""
    i, s, n = chunk.index, chunk.static, len(chunk.index)
    w = workload(i, cycle, churn)
    (leo, leo1, leo2), hw, shrunk = w.log_end_offsets, w.high_watermark, w.shrunk
    brokers = s["replica_brokers"].to_numpy().reshape(n, 3)
    isr_len = np.where(shrunk, 2, 3)
    isr = brokers.ravel()[(np.arange(3)[None, :] < isr_len[:, None]).ravel()]
    offsets = pa.StructArray.from_arrays(
        [s["replica_brokers"], pa.array(np.stack([leo, leo1, leo2], axis=1).ravel()), pa.nulls(3 * n, pa.string()),
         pa.nulls(3 * n, pa.string())], fields=list(ARROW_SCHEMA.field("replica_offsets").type.value_type))
    lineage_on = w.lineage
    lineage = pa.StructArray.from_arrays(
        [pa.array(np.full(int(lineage_on.sum()), 3, np.int64)), pa.array(np.zeros(int(lineage_on.sum()), np.int64))],
        fields=list(ARROW_SCHEMA.field("epoch_lineage").type.value_type))
    columns: Mapping[str, pa.Array] = s | {
        "cycle": pa.array(np.full(n, cycle, np.int64)), "sample_time_ms": pa.array(np.full(n, now_ms, np.int64)),
        "isr": _lists(isr, isr_len), "high_watermark": pa.array(hw), "last_stable_offset": pa.array(hw),
        "replica_offsets": pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)), offsets),
        "epoch_lineage": pa.ListArray.from_arrays(
            pa.array(np.concatenate([[0], np.cumsum(lineage_on)]).astype(np.int32)), lineage,
            mask=pa.array(~lineage_on)),
    }
    table = pa.Table.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
    return write_stream(table, COMPRESSED)


def main(argv: list[str]) -> int:
    from kafka import KafkaProducer

    o = dict(a.split("=", 1) for a in argv)
    topics, per_topic = int(o["topics"]), int(o["per_topic"])
    first_cycle, cycles = int(o["first_cycle"]), int(o.get("cycles", "0"))
    rate, duration, churn = float(o.get("rate", "0")), float(o.get("duration", "0")), int(o.get("churn", "0"))
    plan = chunks(o["cluster"], topics, per_topic)
    acked: list[str] = []
    producer = KafkaProducer(bootstrap_servers=o["bootstrap"], acks=1, linger_ms=10, compression_type="zstd",
                             max_request_size=8 * 2**20, batch_size=2 * 2**20)
    offsets_out = open(o["offsets"], "a") if "offsets" in o else None  # noqa: SIM115 (closed below)
    start = time.monotonic()
    sent = 0
    last_report = start
    try:
        cycle = first_cycle
        while cycles == 0 or cycle < first_cycle + cycles:
            for chunk in plan:
                if rate > 0:
                    due = start + sent / rate
                    if due > time.monotonic():
                        time.sleep(max(0.0, due - time.monotonic()))  # the clock moved since the check
                now = time.monotonic()
                if duration > 0 and now - start > duration:
                    cycle = -1
                    break
                value = record(chunk, cycle, churn, int(time.time() * 1000))
                entries = len(chunk.index)
                future = producer.send(o["topic"], key=chunk.key, value=value)
                future.add_callback(lambda m, n=entries: acked.append(f"{m.partition} {m.offset} {n}\n"))
                sent += entries
                if now - last_report >= 1:
                    last_report = now
                    print(f"progress {time.time():.3f} {sent}", flush=True)
                    if offsets_out:
                        done = len(acked)  # the callbacks append from the producer's thread
                        offsets_out.writelines(acked[:done])
                        del acked[:done]
                        offsets_out.flush()
            if cycle < 0:
                break
            cycle += 1
        producer.flush()
    finally:
        producer.close()
        if offsets_out:
            offsets_out.writelines(acked)
            offsets_out.close()
    print(f"done {time.time():.3f} {sent} {time.monotonic() - start:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
