"""The steady columns against :mod:`streaming.detect`: a bucket kept as columns, its steady samples applied at once
(:mod:`streaming.steady`), gives the events, metrics, history marks and states that the step of each sample
gives on a plain table, on generated sequences of samples with everything else mixed in (leader changes, clean
and unclean, ISR churn, truncations, HW regressions and stalls, lineages, unanswered replicas, topic configs,
the agents' disk readings, the metadata log's changes, silence and the staleness timer, topic recreation), with
the table packed and unpacked between micro-batches as the state store does."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replmon.contracts.batches import encode_batch
from replmon.contracts.samples import (
    EpochEntry,
    LeaderRecoveryState,
    PartitionChange,
    PartitionSample,
    ReplicaError,
    ReplicaOffsets,
    ReplicaSample,
    to_json,
)
from streaming.detect import DetectConfig, step_dict, step_state
from streaming.processor import (
    BATCH,
    KIND_EVENT,
    KIND_PARTITION,
    apply_bucket,
    expire_bucket,
    process_bucket,
    serve,
)
from streaming.state import BucketValue, PartitionKey, PartitionState
from streaming.steady import SteadyColumns, steady_form
from streaming.table import ColumnarTable, pack, unpack

CFG = DetectConfig(stale_after_ms=20_000, hw_stalled_after_ms=8_000, flapping_window_ms=60_000, flapping_threshold=3,
                   forget_after_ms=30_000)


class Partition:
    """One partition of the simulated cluster: what a collector would read from it."""

    def __init__(self, rng: random.Random, number: int) -> None:
        self.rng = rng
        self.number = number
        self.replicas = rng.sample([1, 2, 3, 4], rng.choice([1, 2, 3, 3, 3]))
        self.leader = self.replicas[0]
        self.epoch = 0
        self.isr = list(self.replicas)
        self.kip966 = rng.random() < 0.5
        self.elr: list[int] = []
        self.leos = dict.fromkeys(self.replicas, 1000)
        self.hw = 1000
        self.log_start = 0
        self.min_isr = rng.choice([1, 2])
        self.topic_id = f"id-{number}"
        self.lineage = [(0, 0)]
        self.hw_frozen = 0
        self.adding: list[int] = []
        self.removing: list[int] = []

    def advance(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.03 and len(self.replicas) > 1:  # a leader change, clean or not
            out_of_isr = [b for b in self.replicas if b not in self.isr]
            self.leader = rng.choice(out_of_isr if out_of_isr and rng.random() < 0.4 else
                                     [b for b in self.isr if b != self.leader] or self.replicas)
            self.epoch += 1
            self.lineage.append((self.epoch, self.leos[self.leader]))
            if self.leader not in self.isr:
                self.isr = [self.leader]
        elif roll < 0.07 and len(self.isr) > 1:
            self.isr.remove(rng.choice([b for b in self.isr if b != self.leader]))
        elif roll < 0.11 and len(self.isr) < len(self.replicas):
            self.isr.append(rng.choice([b for b in self.replicas if b not in self.isr]))
        elif roll < 0.13:
            broker = rng.choice(self.replicas)
            self.leos[broker] = max(0, self.leos[broker] - rng.randint(1, 30))  # a truncation
        elif roll < 0.14:
            self.hw = max(0, self.hw - rng.randint(1, 20))  # a HW regression
        elif roll < 0.16:
            self.hw_frozen = rng.randint(2, 8)
        elif roll < 0.17:
            self.topic_id = f"id-{self.number}-{rng.randint(0, 9)}"  # recreated
        elif roll < 0.19 and not self.adding and len(self.replicas) < 4:  # a reassignment starts
            self.adding = [rng.choice([b for b in (1, 2, 3, 4) if b not in self.replicas])]
            self.removing = [b for b in self.replicas if b != self.leader][:1]
            self.replicas = self.replicas + self.adding
            self.leos[self.adding[0]] = 0
        elif roll < 0.22 and self.adding and self.leader not in self.removing:  # it completes
            self.replicas = [b for b in self.replicas if b not in self.removing]
            self.isr = [b for b in self.isr if b not in self.removing] or [self.leader]
            self.leos = {b: o for b, o in self.leos.items() if b in self.replicas}
            self.adding, self.removing = [], []
        self.elr = [b for b in self.replicas if b not in self.isr][:1] if self.kip966 else []
        self.leos[self.leader] += rng.choice([0, 0, 5, 20, 40])
        for broker in self.replicas:
            if broker != self.leader and broker in self.isr:
                self.leos[broker] = min(self.leos[self.leader], self.leos[broker] + rng.randint(0, 50))
        if self.hw_frozen:
            self.hw_frozen -= 1
        else:
            self.hw = max(self.hw, min(self.leos[b] for b in self.isr))
        if rng.random() < 0.05:
            self.log_start += 10

    def sample(self, cycle: int, time_ms: int) -> dict[str, Any]:
        rng = self.rng
        offsets = []
        for broker in self.replicas:
            if rng.random() < 0.04:
                offsets.append(ReplicaOffsets(broker_id=broker, error=ReplicaError.UNREACHABLE))
            else:
                offsets.append(ReplicaOffsets(broker_id=broker, log_end_offset=self.leos[broker]))
        if rng.random() < 0.03:  # a broker answered twice (the step of detect.py keeps its last answer)
            twice = ReplicaOffsets(broker_id=offsets[0].broker_id, log_end_offset=self.leos[offsets[0].broker_id])
            offsets.append(twice) if rng.random() < 0.5 else offsets.__setitem__(-1, twice)
        configs = cycle % 4 == 0
        s = PartitionSample(
            cluster="c", collector_id="x", cycle=cycle, sample_time_ms=time_ms, topic="t", partition=self.number,
            topic_id=self.topic_id if rng.random() < 0.9 else None, leader=self.leader, leader_epoch=self.epoch,
            replicas=self.replicas, isr=self.isr, elr=self.elr if self.kip966 else None,
            last_known_elr=[] if self.kip966 else None,
            high_watermark=None if rng.random() < 0.03 else self.hw,
            log_start_offset=self.log_start if rng.random() < 0.8 else None, replica_offsets=offsets,
            epoch_lineage=([EpochEntry(leader_epoch=e, start_offset=o) for e, o in self.lineage]
                           if rng.random() < 0.08 else None),
            min_insync_replicas=self.min_isr if configs else None,
            unclean_leader_election=(rng.random() < 0.1) if configs else None,
            # the collector's ListPartitionReassignments, answered or not
            adding_replicas=None if rng.random() < 0.2 else self.adding,
            removing_replicas=None if rng.random() < 0.2 else self.removing)
        return json.loads(to_json(s))

    def replica_sample(self, cycle: int, time_ms: int) -> dict[str, Any]:
        broker = self.rng.choice(self.replicas)
        s = ReplicaSample(cluster="c", agent_id="a", cycle=cycle, sample_time_ms=time_ms, broker_id=broker,
                          log_dir="/d", topic="t", partition=self.number, log_end_offset=self.leos[broker],
                          high_watermark_checkpoint=self.hw,
                          epoch_lineage=[EpochEntry(leader_epoch=e, start_offset=o) for e, o in self.lineage])
        return json.loads(to_json(s))

    def change(self, offset: int, time_ms: int) -> dict[str, Any]:
        s = PartitionChange(cluster="c", agent_id="a", broker_id=1, metadata_offset=offset, append_time_ms=time_ms,
                            record_type="PartitionChangeRecord", topic="t", topic_id=self.topic_id,
                            partition=self.number, leader=self.leader, leader_epoch=self.epoch,
                            partition_epoch=offset, replicas=self.replicas, isr=self.isr, elr=self.elr,
                            last_known_elr=[], leader_recovery_state=LeaderRecoveryState.RECOVERED)
        return json.loads(to_json(s))


def batch_frame(records: list[tuple[str, dict[str, Any]]], batched: int = 0) -> pd.DataFrame:
    """The processor's input: JSON records, and the partition samples among the first ``batched`` records as
    batches (a few records of entries each, as a bucket's shares of batch records arrive)."""
    rows: list[tuple[str, str | None, Any, Any, bytes | None]] = [
        (k, json.dumps(s), s.get("sample_time_ms", s.get("append_time_ms")),
         s.get("cycle", s.get("metadata_offset")), None) for k, s in records[batched:]]
    entries = [s for k, s in records[:batched] if k == "p"]
    rows += [(k, json.dumps(s), s.get("sample_time_ms", s.get("append_time_ms")),
              s.get("cycle", s.get("metadata_offset")), None) for k, s in records[:batched] if k != "p"]
    for start in range(0, len(entries), 4):
        chunk = [PartitionSample.model_validate(s) for s in entries[start:start + 4]]
        rows.append((BATCH, None, None, None, encode_batch(chunk)))
    return pd.DataFrame(rows, columns=["kind", "sample", "sample_time_ms", "cycle", "batch"])


def normal(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its absent values dropped and numpy values as Python's."""
    out = {}
    for name, value in row.items():
        if isinstance(value, np.generic):
            value = value.item()
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if isinstance(value, np.ndarray):
            value = value.tolist()
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def outputs(rows: list[dict[str, Any]]) -> tuple[list[str], dict[tuple[Any, ...], dict[str, Any]]]:
    events = sorted(row["payload"] for row in rows if row["kind"] == KIND_EVENT)
    partitions = {(row["cluster"], row["topic"], row["partition"]): normal(row)
                  for row in rows if row["kind"] == KIND_PARTITION}
    return events, partitions


LATER_EVENT_FIELDS = ("replicas", "previous_replicas", "adding_replicas", "removing_replicas")
"""Event fields added after the version of ``tests/data/upgrade``: null in the events of the sequence it holds
(there is no reassignment in it)."""


def without_later_fields(payload: str) -> str:
    """An event's JSON without the fields its contract gained after the previous version, each of which must be
    null (the previous version could not have told it)."""
    event = json.loads(payload)
    for name in LATER_EVENT_FIELDS:
        assert event.pop(name, None) is None, (name, payload)
    return json.dumps(event, sort_keys=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_steady_columns_give_what_the_step_of_each_sample_gives(seed: int) -> None:
    rng = random.Random(seed)
    cluster = [Partition(rng, n) for n in range(rng.randint(3, 8))]
    reference: dict[Any, Any] = {}
    stored = pack(ColumnarTable())
    time_ms, cycle, metadata_offset = 1_000_000, 0, 0
    steady_seen = 0
    deleted = cluster[-1]  # its topic is deleted after the 20th micro-batch: it is forgotten, the others stay
    for batch in range(60):
        records: list[tuple[str, dict[str, Any]]] = []
        for _round in range(rng.choice([1, 1, 1, 2, 3])):
            cycle += 1
            time_ms += rng.choice([1_000, 2_000, 5_000, 5_000, 7_000])
            for p in cluster:
                if p is deleted and batch >= 20:
                    continue
                p.advance()
                if rng.random() < 0.9:
                    records.append(("p", p.sample(cycle, time_ms + rng.randint(0, 300))))
                if rng.random() < 0.05:
                    records.append(("r", p.replica_sample(cycle, time_ms + rng.randint(0, 300))))
                if rng.random() < 0.04:
                    metadata_offset += 1
                    records.append(("m", p.change(metadata_offset, time_ms - rng.randint(0, 2_000))))
        rng.shuffle(records)
        now_ms = time_ms + 500
        if rng.random() < 0.1:  # the job falls silent for a while: the timer runs first
            now_ms += 25_000
            reference, expected_stale, _ = expire_bucket(reference, CFG, now_ms)
            table, stale, _ = expire_bucket(unpack(stored), CFG, now_ms)
            assert outputs(stale) == outputs(expected_stale)
            stored = pack(table)
        elif rng.random() < 0.2 or batch == 59:  # the timer, the job on time
            reference, expected_timer, _ = expire_bucket(reference, CFG, now_ms)
            table, timer, _ = expire_bucket(unpack(stored), CFG, now_ms)
            assert outputs(timer) == outputs(expected_timer)
            stored = pack(table)
        batched = rng.choice([0, len(records) // 2, len(records)])
        frame = batch_frame(records, batched)
        # the same records as JSON, in the order the processor meets them (a batch's entries after the JSON
        # records of the same time: which comes first changes what two sources report at one millisecond)
        as_json = [*records[batched:], *[r for r in records[:batched] if r[0] != "p"],
                   *[r for r in records[:batched] if r[0] == "p"]]
        reference, expected = process_bucket(reference, batch_frame(as_json), CFG, now_ms)
        table = unpack(stored)
        steady_before = len(table.steady)
        # every partition that can settle does, however few (whether a sequence has one is chance: the fresh
        # bucket's test below settles for certain)
        with patch("streaming.processor.SETTLING_WORTH", 1):
            table, out = apply_bucket(table, frame, CFG, now_ms)
        steady_seen += 0 if out.steady is None else len(out.steady["partition"])
        got = process_bucket(unpack(stored), frame, CFG, now_ms)[1]  # as the job runs it: few partitions, no settling
        assert outputs(got) == outputs(expected)
        assert outputs(out.rows + (process_bucket_steady_rows(out.steady))) == outputs(expected)
        stored = pack(table)
        assert steady_before <= len(cluster)
        assert dict(unpack(stored).items()) == reference
    assert steady_seen > 0  # the sequences exercise the steady path, not only the step
    assert {key for key in reference if key[1] == "t"} == {("c", "t", p.number) for p in cluster if p is not deleted}


def process_bucket_steady_rows(steady: dict[str, Any] | None) -> list[dict[str, Any]]:
    from streaming.processor import steady_rows

    return [] if steady is None else steady_rows(steady)


def test_a_fresh_bucket_steps_each_partition_once_and_applies_the_rest_of_its_samples_at_once() -> None:
    """A new checkpoint's first micro-batch of several cycles (every partition new, its lineage learnt on the
    way): each partition's first sample takes the step of detect.py, it moves into the columns, and the rest of
    its samples go through the steady step (stepped again only where one is not steady), with the outputs and
    states of the step of every sample."""
    class Healthy(random.Random):
        """Every replica answers, once; HW, topic id and log start given; no lineage, no config change."""

        def random(self) -> float:
            return 0.5

    cluster = [Partition(Healthy(n), n) for n in range(400)]
    cycles = [1, 2, 3, 5, 6, 7]  # cycle 4 would carry topic configs, a change of the state's (none yet)
    records: list[tuple[str, dict[str, Any]]] = []
    for cycle in cycles:
        for p in cluster:
            p.leos = dict.fromkeys(p.replicas, p.leos[p.leader] + 10)
            p.hw = p.leos[p.leader]
            sample = p.sample(cycle, 1_000_000 + cycle * 5_000)
            if cycle == cycles[p.number % len(cycles)]:  # the partition's lineage, first learnt here
                sample["epoch_lineage"] = [{"leader_epoch": 0, "start_offset": 0}]
            records.append(("p", sample))
    frame = batch_frame(records, len(records))
    reference, expected = process_bucket({}, batch_frame(records), CFG, 1_030_000)
    stepped: list[Any] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        stepped.append((args[1]["partition"], args[1]["cycle"]))
        return step_state(*args, **kwargs)

    with patch("streaming.processor.step_state", counted):
        table, out = apply_bucket(ColumnarTable(), frame, CFG, 1_030_000)
    assert outputs(out.rows + process_bucket_steady_rows(out.steady)) == outputs(expected)
    assert dict(unpack(pack(table)).items()) == reference
    partition_rows = [row["partition"] for row in out.rows + process_bucket_steady_rows(out.steady)
                      if row["kind"] == KIND_PARTITION]
    assert sorted(partition_rows) == list(range(400))  # each partition's newest metrics once
    # the metrics leave from the columns, but where the last sample (the lineage) took the step
    assert out.steady is not None
    assert sorted(out.steady["partition"].tolist()) == [n for n in range(400) if n % 6 != 5]
    # a step for each partition's first sample and for its first lineage (unless both are one), not one per sample
    lineage_later = [n for n in range(400) if n % len(cycles)]
    assert sorted(stepped) == sorted([(n, 1) for n in range(400)] + [(n, cycles[n % 6]) for n in lineage_later])


def test_a_bucket_s_replica_matrices_shrink_back_when_its_widest_partition_narrows() -> None:
    """A bucket keeps its replicas as matrices as wide as its widest partition (the steady columns', the served
    columns'): one partition of 40 replicas widens them for every partition, and once it narrows (a reassignment
    done) they are packed as wide as the bucket's partitions are again, with the outputs and states of the step of
    every sample throughout."""
    class Healthy(random.Random):
        def random(self) -> float:
            return 0.5

    cluster = [Partition(Healthy(n), n) for n in range(60)]
    assigned = cluster[0].replicas
    wide = sorted(set(assigned) | set(range(5, 5 + 40 - len(assigned))))
    table = ColumnarTable()
    plain: dict[PartitionKey, BucketValue] = {}
    widths = []
    for cycle in range(1, 11):
        now = 1_000_000 + cycle * 5_000
        if cycle in (3, 7):  # partition 0 reassigned to 40 replicas, then back
            p = cluster[0]
            p.replicas = p.isr = list(wide if cycle == 3 else assigned)
            p.leos = dict.fromkeys(p.replicas, p.leos[p.leader])
        records = []
        for p in cluster:
            p.leos = dict.fromkeys(p.replicas, p.leos[p.leader] + 10)
            p.hw = p.leos[p.leader]
            records.append(("p", p.sample(cycle, now)))
        table, out = apply_bucket(unpack(pack(table)), batch_frame(records, len(records)), CFG, now)
        serve(table, out.rows, 0, 1_000, "run", out.steady)
        plain, expected = process_bucket(plain, batch_frame(records), CFG, now)
        assert outputs(out.rows + process_bucket_steady_rows(out.steady)) == outputs(expected)
        again = unpack(pack(table))
        assert dict(again.items()) == plain
        widths.append((again.steady.columns["brokers"].shape[1], again.served.columns["replica"].shape[1]))
    narrow = max(len(p.replicas) for p in cluster)
    assert len(wide) == 40 and narrow < 40
    assert widths[:2] == [(narrow, narrow)] * 2 and widths[2:6] == [(40, 40)] * 4, widths
    assert widths[-1] == (narrow, narrow), widths


def test_the_columns_hold_a_steady_state_exactly() -> None:
    rng = random.Random(7)
    states: dict[Any, PartitionState] = {}
    for n in range(200):
        p = Partition(rng, n)
        state = None
        for cycle in range(1, rng.randint(2, 12)):
            p.advance()
            state = step_dict(state, p.sample(cycle, 1_000_000 + cycle * 5_000), CFG, 1_000_000 + cycle * 5_000)[0]
        assert state is not None
        if steady_form(state):
            states[("c", "t", n)] = state
    assert len(states) > 50
    columns = SteadyColumns.empty()
    columns.add(states)
    held = {}
    for key in columns.live_keys():
        row = columns.row_of(key)
        assert row is not None  # a live key has its row
        held[key] = columns.state(row)
    assert held == states
    again = unpack(pack(ColumnarTable(steady=columns)))
    assert len(again.steady) == len(states) and dict(again.items()) == states


def test_a_bucket_of_the_format_before_the_columns_loads_and_moves_into_them() -> None:
    """A checkpoint written by the version that pickled every state (format 1) is read as it was; each
    partition joins the columns at its next steady sample, and the outputs are those of the reference."""
    import pickle

    import pyarrow as pa

    from streaming.state import dump_state

    rng = random.Random(3)
    cluster = [Partition(rng, n) for n in range(6)]
    reference: dict[Any, Any] = {}
    for cycle in range(1, 4):
        for p in cluster:
            p.advance()
        reference, _ = process_bucket(reference, batch_frame([("p", p.sample(cycle, 1_000_000 + cycle * 5_000))
                                                               for p in cluster]), CFG, 2_000_000)
    raw = pickle.dumps({key: dump_state(state) for key, state in reference.items()}, protocol=5)
    version_1 = b"RPL\x01" + len(raw).to_bytes(8, "big") + pa.compress(raw, codec="lz4", asbytes=True)
    old = unpack(version_1)
    assert len(old.steady) == 0 and dict(old.items()) == reference
    for cycle in range(4, 7):
        for p in cluster:
            p.advance()
        frame = batch_frame([("p", p.sample(cycle, 1_000_000 + cycle * 5_000)) for p in cluster])
        reference, expected = process_bucket(reference, frame, CFG, 2_000_000)
        table, got = process_bucket(unpack(version_1), frame, CFG, 2_000_000)
        assert outputs(got) == outputs(expected)
        version_1 = pack(table)
    assert len(unpack(version_1).steady) > 0 and dict(unpack(version_1).items()) == reference


UPGRADE = Path(__file__).resolve().parent / "data" / "upgrade"


def test_a_bucket_the_previous_version_wrote_goes_on_with_no_event_lost_or_repeated() -> None:
    """``tests/data/upgrade``: a seeded sequence of 12 micro-batches (partition and replica samples, metadata-log
    changes) and what replmon before the steady columns (state format 1) wrote after the first 6: the bucket
    value and its output rows. This version reads that bucket, and its next 6 micro-batches (samples as JSON
    records or batches) give what the step of every sample gives from the start: nothing lost, nothing twice."""
    batches = json.loads((UPGRADE / "batches.json").read_text())
    before = json.loads((UPGRADE / "outputs-format-1.json").read_text())
    stored = (UPGRADE / "bucket-format-1.bin").read_bytes()
    assert stored[:4] == b"RPL\x01"

    def records(batch: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(kind, s) for kind, s in batch["records"]]

    reference: dict[Any, Any] = {}
    expected = []
    for batch in batches:
        reference, rows = process_bucket(reference, batch_frame(records(batch)), CFG, batch["now_ms"])
        expected.append(rows)
    for old, new in zip(before, expected[:6], strict=True):  # what the previous version reported, this one does
        assert sorted(map(without_later_fields, outputs(old)[0])) == sorted(map(without_later_fields, outputs(new)[0]))
    table = unpack(stored)
    assert len(table.steady) == 0 and len(table) == 8
    for n, (batch, want) in enumerate(zip(batches[6:], expected[6:], strict=True)):
        recs = records(batch)
        # the collector now publishes JSON records, then batches (a mixed topic)
        frame = batch_frame(recs, len(recs)) if n % 2 else batch_frame(recs)
        table, got = process_bucket(table, frame, CFG, batch["now_ms"])
        assert outputs(got) == outputs(want)  # the same events (none lost, none twice) and metrics
        table = unpack(pack(table))
    assert len(table.steady) > 0 and dict(table.items()) == reference


def _stepped(batches: list[dict[str, Any]]) -> tuple[dict[Any, Any], list[Any]]:
    """The state and each micro-batch's rows that the step of every sample gives from the start."""
    reference: dict[Any, Any] = {}
    expected = []
    for batch in batches:
        reference, rows = process_bucket(reference, batch_frame([(k, s) for k, s in batch["records"]]), CFG,
                                         batch["now_ms"])
        expected.append(rows)
    return reference, expected


def test_a_bucket_of_state_format_3_goes_on_with_no_event_lost_or_repeated() -> None:
    """``tests/data/upgrade/bucket-format-3.bin`` (written by ``bucket_format_3.py`` there): the bucket that replmon
    before the clusters a bucket hears of (state format 3) wrote after the first 6 micro-batches of
    ``batches.json``, its steady and served columns filled. This version reads it (no cluster heard of yet) and
    its next 6 micro-batches give what the step of every sample gives from the start: nothing lost, nothing
    twice; it writes format 5."""
    batches = json.loads((UPGRADE / "batches.json").read_text())
    stored = (UPGRADE / "bucket-format-3.bin").read_bytes()
    assert stored[:4] == b"RPL\x03"
    reference, expected = _stepped(batches)
    table = unpack(stored)
    assert table.heard == {} and len(table.steady) > 0 and len(table.served) == len(table) == 8
    assert table.served.run == "format-3"
    for batch, want in zip(batches[6:], expected[6:], strict=True):
        records = [(k, s) for k, s in batch["records"]]
        table, got = process_bucket(table, batch_frame(records, len(records)), CFG, batch["now_ms"])
        assert outputs(got) == outputs(want)
        table.hear(["c"], batch["now_ms"])
        table = unpack(pack(table))
    assert dict(table.items()) == reference and table.heard == {"c": batches[-1]["now_ms"]}
    assert pack(table)[:4] == b"RPL\x05"


def test_a_bucket_of_state_format_4_loads_no_reassignment_and_goes_on_with_no_event_lost_or_repeated() -> None:
    """``tests/data/upgrade/bucket-format-4.bin`` (written by ``bucket_format_4.py`` there): the bucket that replmon
    before the served columns of reassignments (state format 5) wrote after the first 6 micro-batches of
    ``batches.json``. This version reads it with no partition reassigning and no replica being added (what the
    sequence holds), its other served columns as they were written; its next 6 micro-batches give what the step
    of every sample gives from the start, and the served columns those the rows give; it writes format 5."""
    batches = json.loads((UPGRADE / "batches.json").read_text())
    stored = (UPGRADE / "bucket-format-4.bin").read_bytes()
    assert stored[:4] == b"RPL\x04"
    reference, expected = _stepped(batches)
    table = unpack(stored)
    served = table.served.columns
    assert table.heard == {"c": batches[5]["now_ms"]} and table.served.run == "format-4"
    assert len(table.served) == len(table) == 8 and len(table.steady) > 0
    assert not served["reassigning"].any() and served["adding"].shape == served["replica"].shape
    assert not served["adding"].any() and (served["replica"] >= 0).any()
    for batch, want in zip(batches[6:], expected[6:], strict=True):
        records = [(k, s) for k, s in batch["records"]]
        table, got = process_bucket(table, batch_frame(records, len(records)), CFG, batch["now_ms"])
        assert outputs(got) == outputs(want)
        table = unpack(pack(table))
    assert dict(table.items()) == reference
    assert pack(table)[:4] == b"RPL\x05"
