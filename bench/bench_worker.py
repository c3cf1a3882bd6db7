"""Benchmark of the job's Python workers per partition sample: what one state bucket's micro-batch costs, step by
step, with every sample through :mod:`streaming.detect`'s step against the steady columns (:mod:`streaming.steady`),
and with the samples as JSON records against ``partition_batch/v1`` batches; and the collector's encoding of each.

    .venv/bin/python bench/bench_worker.py [--partitions 25000] [--buckets 4] [--warmup-cycles 13] [--cycles 19]
                                           [--rounds 3] [--no-write]

No Spark and no Kafka: the collector's encoding and the processor's code as the workers run it, in one process.
A cluster of ``--partitions`` partitions of replication factor 3 is sampled ``--cycles`` times as
bench_stream.py's producer samples it (offsets moving, 1 partition in 1,000 with a shrunk ISR per cycle, a lineage
in 1 sample of 12); the state of one of its ``--buckets`` buckets is kept (6,250 partitions by default, as
100,000 partitions in the 16 buckets of a new checkpoint on ``local[2]``). The first ``--warmup-cycles`` are not
timed: every state is created, then every partition's first steady sample and its first lineage (a lineage the
state holds already is steady).
Steps, in microseconds per sample (CPU of this process, the minimum over ``--rounds`` rounds):

* encode: the collector's records of the whole cluster (``to_json`` per sample; batches of up to 2,000);
* split: every batch record checked entry by entry and split by bucket (``streaming.batches.split_records``:
  the ``mapInArrow`` stage before the state, one task per partition of the samples topic, 6);
* load / process / save: the bucket's state unpacked, the micro-batch applied (parse or decode included), the
  state packed;
* frame: the output rows as the Arrow batch the processor yields (with the steady columns, only what leaves the
  processor: ``streaming.processor.serve``, the default series budget, the served rows as one stream), and
  PySpark's serializer's struct array of it (with the job's hook, ``streaming.pyspark_hooks.arrow_output``).

Writes the figures, the command and a plot to the "## Python workers" section of docs/benchmarks.md and
docs/bench_worker.png.
"""

from __future__ import annotations

import argparse
import gc
import random
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_type  # noqa: E402

from bench.batch_producer import workload  # noqa: E402
from bench.docsection import write_section  # noqa: E402
from collectors.publisher import encode_records  # noqa: E402
from replmon.contracts.samples import EpochEntry, PartitionSample, ReplicaOffsets  # noqa: E402
from replmon.core.config import StreamConfig  # noqa: E402
from streaming.batches import BATCH, buckets_of, split_records  # noqa: E402
from streaming.detect import DetectConfig  # noqa: E402
from streaming.processor import (  # noqa: E402
    OUTPUT_SCHEMA,
    apply_bucket,
    output_of,
    serve,
)
from streaming.pyspark_hooks import arrow_output  # noqa: E402
from streaming.table import PackedTable, pack, unpack  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "bench_worker.png"
HEADING = "Python workers"
STEPS = ("encode", "split", "load", "process", "save", "frame")
WORKER = STEPS[1:]
"""What the job's Python workers do (the encoding is the collector's)."""
TASKS = 6
"""The split stage's tasks: the samples topic's partitions (each splits its records; a bucket gets a share of
each)."""
CFG = DetectConfig()
SERIES_BUDGET = StreamConfig().series_budget
ARROW_OUTPUT = to_arrow_type(OUTPUT_SCHEMA)
SERIALIZER = TransformWithStateInPandasSerializer("UTC", False, True, 10_000)
"""The Python workers' serializer of the processor's output (PySpark's, with the job's hook)."""


def samples_of(partitions: int, cycle: int) -> list[PartitionSample]:
    """One cycle, as bench_stream.py's producer writes it (:func:`bench.batch_producer.workload`, 1 partition in
    1,000 with a shrunk ISR)."""
    out = []
    now = 1_700_000_000_000 + cycle * 10_000
    w = workload(np.arange(partitions, dtype=np.int64), cycle, churn=1)
    leos = list(zip(*(x.tolist() for x in w.log_end_offsets), strict=True))
    for i, (replica_leos, hw, shrunk, lineage) in enumerate(zip(
            leos, w.high_watermark.tolist(), w.shrunk.tolist(), w.lineage.tolist(), strict=True)):
        r0 = i % 3
        replicas = [1 + r0, 1 + (r0 + 1) % 3, 1 + (r0 + 2) % 3]
        out.append(PartitionSample(
            cluster="bench", collector_id="bench", cycle=cycle, sample_time_ms=now, topic=f"bench-{i // 1000:03d}",
            topic_id=f"BENCHTOPIC{i // 1000:012d}", partition=i % 1000, leader=replicas[0], leader_epoch=3,
            replicas=replicas, isr=replicas[:2] if shrunk else replicas, elr=[], last_known_elr=[],
            high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
            replica_offsets=[ReplicaOffsets(broker_id=b, log_end_offset=o) for b, o in zip(replicas, replica_leos,
                                                                                              strict=True)],
            epoch_lineage=[EpochEntry(leader_epoch=3, start_offset=0)] if lineage else None,
            min_insync_replicas=2, unclean_leader_election=False))
    return out


def bucket_input(samples: list[PartitionSample], sample_format: str, buckets: int
                 ) -> tuple[pd.DataFrame, int, float, float]:
    """The collector's records of a cycle, and bucket 0's input to the processor: its JSON records, or its shares
    of every batch record. Returns the input, its samples, and the CPU seconds of the encoding and of the split
    (every record's, as the mapInArrow stage splits them all)."""
    clock = time.process_time
    t0 = clock()
    records = encode_records(samples, sample_format)
    t1 = clock()
    if sample_format == "json":
        table = pa.Table.from_pylist([{"cluster": s.cluster, "topic": s.topic, "partition": s.partition}
                                      for s in samples])
        mine = (buckets_of(table, buckets) == 0).tolist()
        texts = [value.decode() for (_, value, _), ours in zip(records, mine, strict=True) if ours]
        return pd.DataFrame({"kind": ["p"] * len(texts), "sample": texts, "sample_time_ms": [0] * len(texts),
                             "cycle": [0] * len(texts), "batch": [None] * len(texts)}), len(texts), t1 - t0, 0.0
    t2 = clock()
    tasks = [[value for n, (_, value, _) in enumerate(records) if n % TASKS == task] for task in range(TASKS)]
    shares = [split_records(values, list(range(buckets)))[0].get(0) for values in tasks]
    t3 = clock()
    mine = [share for share in shares if share is not None]
    count = sum(pa.ipc.open_stream(share).read_all().num_rows for share in mine)
    return pd.DataFrame({"kind": [BATCH] * len(mine), "sample": [None] * len(mine),
                         "sample_time_ms": [None] * len(mine), "cycle": [None] * len(mine),
                         "batch": mine}), count, t1 - t0, t3 - t2


def run_round(partitions: int, buckets: int, warmup: int, cycles: int, sample_format: str, steady: bool
              ) -> dict[str, float]:
    """CPU µs per sample of each step over the timed cycles: encoding and splitting per sample of the cluster,
    the bucket's steps per sample of the bucket."""
    spent = dict.fromkeys(STEPS, 0.0)
    stored: bytes | None = None
    cluster_samples = bucket_samples = 0
    for cycle in range(cycles):
        samples = samples_of(partitions, cycle)
        gc.collect()
        gc.disable()  # as the workers run a bucket (replmon.core.gcpause)
        try:
            frame, count, encode_s, split_s = bucket_input(samples, sample_format, buckets)
            clock: Callable[[], float] = time.process_time
            t2 = clock()
            table: Any = unpack(stored)
            if not steady:  # every sample through detect.py: the states packed one by one, as before the columns
                table = table.side
            t3 = clock()
            table, out = apply_bucket(table, frame, CFG, 1_700_000_000_000 + cycle * 10_000 + 500)
            t4 = clock()
            if steady:  # what leaves the processor, as the processor chooses it (the design before had no choice)
                output = serve(table, out.rows, 0, SERIES_BUDGET, "bench", out.steady)
            else:
                output = output_of(out.rows, out.steady)
            SERIALIZER._create_batch([(arrow_output(output), ARROW_OUTPUT)])
            t5 = clock()
            stored = pack(table) if steady else _pack_packed(table)
            t6 = clock()
        finally:
            gc.enable()
        if cycle < warmup:
            continue
        cluster_samples += len(samples)
        bucket_samples += count
        spent["encode"] += encode_s
        spent["split"] += split_s
        for step, seconds in zip(STEPS[2:], (t3 - t2, t4 - t3, t6 - t5, t5 - t4), strict=True):
            spent[step] += seconds
    return {step: spent[step] / (cluster_samples if step in ("encode", "split") else bucket_samples) * 1e6
            for step in STEPS}


def _pack_packed(table: Any) -> bytes:
    """The bucket as the format before the columns stored it (every state pickled on its own)."""
    import pickle

    from streaming.table import _SIZE, STATE_MAGIC

    packed = table.packed() if isinstance(table, PackedTable) else table.side.packed()
    raw = pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)
    return STATE_MAGIC + bytes([1]) + len(raw).to_bytes(_SIZE, "big") + pa.compress(raw, codec="lz4", asbytes=True)


VARIANTS = (("every sample through detect.py, JSON records", "json", False),
            ("steady columns, JSON records", "json", True),
            ("steady columns, batches", "batch", True))


def plot(results: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    left = [0.0] * len(results)
    names = list(results)
    for step in WORKER:
        values = [results[name][step] for name in names]
        ax.barh(names, values, left=left, label=step)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlabel("the job's Python workers: µs of CPU per partition sample")
    ax.invert_yaxis()
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=25_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--warmup-cycles", type=int, default=13)
    parser.add_argument("--cycles", type=int, default=19)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    random.seed(1)
    results: dict[str, dict[str, float]] = {}
    for name, sample_format, steady in VARIANTS:
        rounds = [run_round(args.partitions, args.buckets, args.warmup_cycles, args.cycles, sample_format, steady)
                  for _ in range(args.rounds)]
        results[name] = {step: min(r[step] for r in rounds) for step in STEPS}
        total = sum(results[name][step] for step in WORKER)
        print(f"{name}: " + ", ".join(f"{s} {results[name][s]:.2f}" for s in STEPS)
              + f" µs/sample; workers {total:.2f} ({1e6 / total:,.0f} samples/s per core)", flush=True)
    if args.no_write:
        return
    command = "python bench/bench_worker.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "no_write"
        and v != parser.get_default(k))
    lines = ["| path | collector: encode | " + " | ".join(WORKER) + " | workers | samples/s per worker core |",
             "|---|" + "---:|" * (len(STEPS) + 2)]
    for name, steps in results.items():
        total = sum(steps[s] for s in WORKER)
        lines.append(f"| {name} | " + " | ".join(f"{steps[s]:.2f}" for s in STEPS)
                     + f" | **{total:.2f}** | {1e6 / total:,.0f} |")
    section = (f"## {HEADING}\n\nWhat the job's Python workers spend per partition sample, by step, in µs of CPU "
               f"(a cluster of {args.partitions:,} partitions, RF 3, in {args.buckets} state buckets: the collector's "
               f"encoding and the split per sample of the cluster, the rest per sample of one bucket; "
               f"{args.cycles - args.warmup_cycles} timed cycles after {args.warmup_cycles}, minimum of "
               f"{args.rounds} rounds; no Spark, no Kafka: see the docstring of `bench/bench_worker.py`), and what "
               f"the collector spends encoding it.\n\n```\n{shlex.join(command.split())}\n```\n\n"
               + "\n".join(lines) + f"\n\nRun on Python {sys.version.split()[0]}.\n\n"
               "![Python workers](bench_worker.png)\n")
    write_section(DOC, HEADING, section)
    plot(results, PLOT)


if __name__ == "__main__":
    main()
