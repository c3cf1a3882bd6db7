"""The log-dir agent while its files change under it: copies of a real broker's log dir (the session cluster's),
whose checkpoints and segments are rewritten, truncated or deleted, one at a time between scans and then
concurrently with a running ``replmon agent``. The agent never crashes; a replica whose files are damaged is
reported with an error for that cycle, the other replicas are not; when the files are back, so are the values.

The oracle for offsets is Kafka itself (the high watermark after every replica caught up) and kafka-python's
record batch reader over the segment bytes (never replmon's parser)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.record.memory_records import MemoryRecords

from collectors.logdir.scanner import ScanContext, scan_log_dir
from replmon.contracts.samples import ReplicaSample, parse_sample
from replmon.testbed.kafka_view import KafkaView, wait_until
from replmon.testbed.localcluster import LocalCluster

pytestmark = pytest.mark.cluster
CTX = ScanContext(cluster="local", agent_id="faults", cycle=0, sample_time_ms=0)
ROOT_FILES = ("meta.properties", "replication-offset-checkpoint", "recovery-point-offset-checkpoint",
              "log-start-offset-checkpoint")
SEGMENT_BYTES = 1024 * 1024
MESSAGES = 260
VALUE = b"v" * 10_000


def batch_ends(segment: bytes) -> list[tuple[int, int]]:
    """(end position, next offset) of every complete batch of a segment, by kafka-python's reader."""
    records = MemoryRecords(segment)
    out: list[tuple[int, int]] = []
    position = 0
    while (b := records.next_batch()) is not None:
        position += b.size_in_bytes
        out.append((position, b.next_offset))
    return out


def leo_of_bytes(segment: bytes, base_offset: int) -> int:
    ends = batch_ends(segment)
    return ends[-1][1] if ends else base_offset


@dataclass
class Copy:
    """A pristine copy of broker 1's log dir (root files and the test topic's two replicas)."""

    pristine: Path
    topic: str
    high_watermark: int

    @property
    def p0(self) -> str:
        return f"{self.topic}-0"

    def fresh(self, where: Path) -> Path:
        if where.exists():
            shutil.rmtree(where)
        shutil.copytree(self.pristine, where)
        return where

    def segments(self, log_dir: Path) -> list[Path]:
        return sorted((log_dir / self.p0).glob("*.log"))


@pytest.fixture(scope="module")
def copy(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Copy:
    """A topic whose partition 0 spans three segments on broker 1 (its leader), partition 1 a few messages;
    copied once every replica holds every message."""
    cluster.heal()
    view = KafkaView(cluster.bootstrap_servers)
    topic = f"logdir-faults-{os.getpid()}"
    try:
        view.create_topic(topic, assignment={0: [1, 2, 3], 1: [1, 3, 2]},
                          configs={"segment.bytes": str(SEGMENT_BYTES)})
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0,
                                 max_request_size=2 * 1024 * 1024)
        for i in range(MESSAGES):
            producer.send(topic, value=VALUE, partition=0)
            if i % 20 == 0:
                producer.send(topic, value=b"small", partition=1)
        producer.flush(timeout=60)
        producer.close()
        wait_until(lambda: view.high_watermark(topic, 0) == MESSAGES and len(view.partition(topic, 0).isr) == 3,
                   60, "every message committed on every replica")
        hw = view.high_watermark(topic, 0)
    finally:
        view.close()
    src = cluster.broker_log_dir(1)
    # Kafka creates its root checkpoints empty at start and writes them every few seconds: copy them once they list
    # this topic, or a test of a damaged checkpoint would damage an empty file (a session cluster just started)
    wait_until(lambda: f"{topic} 0 {hw}" in (src / "replication-offset-checkpoint").read_text(), 60,
               "broker 1 to checkpoint the topic's high watermark")
    dst = tmp_path_factory.mktemp("logdir-pristine") / "broker-1"
    dst.mkdir()
    for name in ROOT_FILES:
        shutil.copy2(src / name, dst / name)
    for p in (0, 1):
        shutil.copytree(src / f"{topic}-{p}", dst / f"{topic}-{p}")
    found = Copy(dst, topic, hw)
    assert len(found.segments(dst)) >= 3, "partition 0 should span several segments"
    return found


def scan(log_dir: Path) -> dict[str, ReplicaSample]:
    result = scan_log_dir(log_dir, CTX)
    assert result.error is None
    return {f"{s.topic}-{s.partition}": s for s in result.samples}


def values(s: ReplicaSample) -> tuple[object, ...]:
    return (s.log_end_offset, s.epoch_lineage, s.high_watermark_checkpoint, s.recovery_point, s.log_start_offset,
            s.topic_id)


# ------------------------------------------------------------------------------------------------ mutations
def _active(c: Copy, d: Path) -> Path:
    return c.segments(d)[-1]


def _index_of(segment: Path) -> Path:
    return segment.with_suffix(".index")


def _last_index_position(segment: Path) -> int:
    raw = _index_of(segment).read_bytes()
    positions = [int.from_bytes(raw[i + 4:i + 8], "big") for i in range(0, len(raw) - 7, 8)]
    written = [p for p in positions if p > 0]
    return written[-1] if written else 0


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def truncate_below_index(c: Copy, d: Path) -> int:
    seg = _active(c, d)
    cut = _last_index_position(seg) - 7  # inside the batch before the indexed one
    assert cut > 0
    _truncate(seg, cut)
    return leo_of_bytes(seg.read_bytes(), int(seg.stem))


def truncate_last_batch(c: Copy, d: Path) -> None:
    seg = _active(c, d)
    ends = batch_ends(seg.read_bytes())
    assert ends[-2][0] == _last_index_position(seg), "10 kB batches: every batch has its index entry"
    _truncate(seg, ends[-2][0] + 30)


def flip_last_batch_byte(c: Copy, d: Path) -> None:
    seg = _active(c, d)
    with open(seg, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


def zero_active_segment(c: Copy, d: Path) -> None:
    seg = _active(c, d)
    seg.write_bytes(bytes(seg.stat().st_size))


def delete_active_segment(c: Copy, d: Path) -> int:
    seg = _active(c, d)
    seg.unlink()
    prev = _active(c, d)
    return leo_of_bytes(prev.read_bytes(), int(prev.stem))


def delete_all_segments(c: Copy, d: Path) -> None:
    for seg in c.segments(d):
        seg.unlink()


def garble_epoch_checkpoint(c: Copy, d: Path) -> None:
    path = d / c.p0 / "leader-epoch-checkpoint"
    text = path.read_text()
    path.write_text(text[: len(text) - 3])  # cut inside the last line: one entry short or a half number


def half_root_checkpoint(c: Copy, d: Path) -> None:
    path = d / "replication-offset-checkpoint"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Callable[[Copy, Path], int | None]
    error: str | None
    """A substring of the damaged replica's error; None: no error, and the LEO the mutation returned."""
    both_replicas: bool = False


CASES = [
    Case("leader-epoch-checkpoint cut short", garble_epoch_checkpoint, "leader-epoch-checkpoint"),
    Case("leader-epoch-checkpoint deleted", lambda c, d: (d / c.p0 / "leader-epoch-checkpoint").unlink(),
         "no leader-epoch-checkpoint"),
    Case("leader-epoch-checkpoint not UTF-8", lambda c, d: (d / c.p0 / "leader-epoch-checkpoint").write_bytes(
        b"0\n1\n0 \xff\xfe\n"), "not UTF-8"),
    Case("partition.metadata rewritten", lambda c, d: (d / c.p0 / "partition.metadata").write_text("topic_id\n"),
         "partition.metadata"),
    Case("replication-offset-checkpoint cut in half", half_root_checkpoint, "replication-offset-checkpoint",
         both_replicas=True),
    Case("recovery-point-offset-checkpoint deleted", lambda c, d: (d / "recovery-point-offset-checkpoint").unlink(),
         "no recovery-point-offset-checkpoint", both_replicas=True),
    Case("a byte of the last batch rewritten", flip_last_batch_byte, "CRC mismatch"),
    Case("active segment zeroed", zero_active_segment, "offset index entry"),
    Case("active segment truncated beneath its offset index (stale entries, as Kafka's truncation leaves them)",
         truncate_below_index, None),
    Case("all segments deleted", delete_all_segments, "no log segment"),
    Case("active segment truncated inside its last (indexed) batch", truncate_last_batch, "offset index entry"),
    Case("active segment deleted (as Kafka's truncation does)", delete_active_segment, None),
    Case("offset index deleted", lambda c, d: _index_of(_active(c, d)).unlink(), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_damaged_files_mark_their_replica_for_that_cycle(copy: Copy, tmp_path: Path, case: Case) -> None:
    work = copy.fresh(tmp_path / "broker-1")
    before = scan(work)
    p1 = f"{copy.topic}-1"
    assert before[copy.p0].log_end_offset == copy.high_watermark  # Kafka's own answer
    assert before[copy.p0].error is None and before[p1].error is None

    expected_leo = case.mutate(copy, work)
    damaged = scan(work)
    if case.error is None:
        assert damaged[copy.p0].error is None
        assert damaged[copy.p0].log_end_offset == (copy.high_watermark if expected_leo is None else expected_leo)
    else:
        error = damaged[copy.p0].error
        assert error is not None and case.error in error, error
    if case.both_replicas:
        error = damaged[p1].error
        assert error is not None and case.error is not None and case.error in error
    else:
        assert damaged[p1].error is None and values(damaged[p1]) == values(before[p1])

    copy.fresh(work)  # the files are back: so are the values, in the next cycle
    after = scan(work)
    assert {k: (values(s), s.error) for k, s in after.items()} == {k: (values(s), s.error) for k, s in before.items()}


def test_deleted_replica_directory_is_no_longer_reported(copy: Copy, tmp_path: Path) -> None:
    work = copy.fresh(tmp_path / "broker-1")
    shutil.rmtree(work / copy.p0)
    assert set(scan(work)) == {f"{copy.topic}-1"}


# ------------------------------------------------------------------------------------------------ concurrently
def _stamps(root: Path) -> dict[Path, tuple[int, int]]:
    return {p.relative_to(root): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _restore(copy: Copy, work: Path, stamps: dict[Path, tuple[int, int]]) -> None:
    """Put the pristine files back where they changed (copying over them: itself a non-atomic rewrite), then
    note their new stamps in ``stamps``."""
    for src in copy.pristine.rglob("*"):
        rel = src.relative_to(copy.pristine)
        dst = work / rel
        if src.is_dir():
            dst.mkdir(exist_ok=True)
            continue
        try:
            st = dst.stat()
            current = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            current = None
        if current != stamps.get(rel):
            shutil.copyfile(src, dst)
            st = dst.stat()
            stamps[rel] = (st.st_size, st.st_mtime_ns)


DAMAGES = 120
CONCURRENT = [c.mutate for c in CASES] + [lambda c, d: shutil.rmtree(d / c.p0)]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(log_dir: Path) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "REPLMON_COLLECTOR__INTERVAL_S": "0.02",
               "REPLMON_COLLECTOR__COLLECTOR_ID": "faults"}
        proc = subprocess.Popen([sys.executable, "-m", "replmon.cli", "agent", "--log-dir", str(log_dir),
                                 "--output", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_agent_survives_files_changing_while_it_reads(copy: Copy, tmp_path: Path,
                                                      agent: Callable[[Path], subprocess.Popen[str]]) -> None:
    """``replmon agent`` scans every 20 ms while a thread damages and restores the files at random; every
    sample it prints is either marked with an error or holds values the replica really had on disk."""
    work = copy.fresh(tmp_path / "broker-1")
    pristine = scan(work)
    segments = {int(s.stem): s.read_bytes() for s in copy.segments(copy.pristine)}
    possible_leos = {base for base in segments} | {o for b, data in segments.items() for _, o in batch_ends(data)}
    p1 = f"{copy.topic}-1"

    proc = agent(work)
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # the fixture pipes both
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    stop = threading.Event()
    mutations: list[str] = []
    failures: list[BaseException] = []

    def mutate() -> None:
        rng = random.Random(6)
        try:
            while not stop.is_set():
                change = rng.choice(CONCURRENT)
                with contextlib.suppress(FileNotFoundError, IndexError, AssertionError):
                    change(copy, work)  # fails when the previous damage left nothing of that kind to damage
                mutations.append(getattr(change, "__name__", "?"))
                stop.wait(rng.uniform(0, 0.03))  # how long the damage stays: random, as the agent's reads are
                _restore(copy, work, stamps)
        except BaseException as exc:
            failures.append(exc)

    stamps = _stamps(work)
    mutator = threading.Thread(target=mutate, daemon=True)
    mutator.start()
    try:
        wait_until(lambda: len(mutations) >= DAMAGES and len({_cycle(x) for x in lines}) >= DAMAGES, 120,
                   f"{DAMAGES} damages and {DAMAGES} agent cycles", interval_s=0.5)
    finally:
        stop.set()
        mutator.join(timeout=30)
    assert not failures, failures
    assert proc.poll() is None, f"the agent died: {stderr.read()[-2000:]}"
    _restore(copy, work, stamps)
    cycles_before_stop = len({_cycle(x) for x in lines})
    wait_until(lambda: len({_cycle(x) for x in lines}) >= cycles_before_stop + 3, 30, "cycles on the restored files")
    proc.kill()
    reader.join(timeout=10)

    samples = [parse_sample(line) for line in lines]
    assert all(isinstance(s, ReplicaSample) for s in samples)
    by_cycle: dict[int, dict[str, ReplicaSample]] = {}
    for sample in samples:
        assert isinstance(sample, ReplicaSample)
        by_cycle.setdefault(sample.cycle, {})[f"{sample.topic}-{sample.partition}"] = sample
    flagged = clean = 0
    for cycle, found in by_cycle.items():
        assert p1 in found, f"cycle {cycle}: the untouched replica is missing"
        s = found.get(copy.p0)
        if s is None:
            continue  # its directory was deleted at that moment
        if s.error is not None:
            flagged += 1
            continue
        clean += 1
        assert s.log_end_offset in possible_leos, (cycle, s.log_end_offset)
        assert s.epoch_lineage in (pristine[copy.p0].epoch_lineage, []), (cycle, s.epoch_lineage)
        assert s.high_watermark_checkpoint in (pristine[copy.p0].high_watermark_checkpoint, None)
    assert flagged > 0 and clean > 0, (flagged, clean)
    last = by_cycle[max(by_cycle)]
    assert {k: (values(s), s.error) for k, s in last.items()} == \
        {k: (values(s), s.error) for k, s in pristine.items()}, "the restored files read as before"
    print(f"agent cycles {len(by_cycle)}, damages {len(mutations)}, samples of the damaged replica: "
          f"{flagged} with an error, {clean} clean and true")


def _cycle(line: str) -> int:
    return int(json.loads(line)["cycle"])
