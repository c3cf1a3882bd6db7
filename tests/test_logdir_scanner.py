"""The log-dir agent's scanner and CLI on log dirs laid out here like Kafka's (no cluster)."""

from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path

import pytest

from collectors.logdir.checkpoints import parse_leader_epoch_checkpoint
from collectors.logdir.files import read_parsed
from collectors.logdir.scanner import ScanContext, scan_log_dir, scan_log_dirs
from replmon.cli import main
from replmon.contracts.samples import MAX_LINEAGE, EpochEntry, ReplicaSample, parse_sample
from tests.test_logdir_parsers import batch

TOPIC_ID = "mTOJ9eNIQlK7J1Ix-ndbIw"
CTX = ScanContext(cluster="c1", agent_id="test-agent", cycle=7, sample_time_ms=1_700_000_000_000)


def checkpoint(lines: list[str]) -> str:
    return "0\n" + f"{len(lines)}\n" + "".join(line + "\n" for line in lines)


def make_log_dir(root: Path, node_id: int = 2) -> Path:
    """A broker log dir: meta.properties, root checkpoints, orders-0 (two segments, an index into the active
    one, 5 bytes of a torn batch at the end), orders-1 (empty active segment), skipped dirs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.properties").write_text(
        f"#\nnode.id={node_id}\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\nversion=1\n")
    (root / "replication-offset-checkpoint").write_text(checkpoint(["orders 0 118", "orders 1 40"]))
    (root / "recovery-point-offset-checkpoint").write_text(checkpoint(["orders 0 100", "orders 1 40"]))
    (root / "log-start-offset-checkpoint").write_text(checkpoint(["orders 1 35"]))
    p0 = root / "orders-0"
    p0.mkdir()
    (p0 / f"{0:020d}.log").write_bytes(batch(0, records=100, leader_epoch=0))
    active = b"".join(batch(100 + i, records=1, leader_epoch=3, payload=b"y" * 3000) for i in range(4))
    active += batch(104, records=16, leader_epoch=5) + batch(120, records=1, leader_epoch=5)[:5]
    (p0 / f"{100:020d}.log").write_bytes(active)
    position_of_third = 2 * len(batch(100, payload=b"y" * 3000))
    (p0 / f"{100:020d}.index").write_bytes(struct.pack(">ii", 2, position_of_third) + bytes(8 * 100))
    (p0 / "leader-epoch-checkpoint").write_text(checkpoint(["0 0", "3 100", "5 104"]))
    (p0 / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    p1 = root / "orders-1"
    p1.mkdir()
    (p1 / f"{30:020d}.log").write_bytes(batch(30, records=10, leader_epoch=1))
    (p1 / f"{40:020d}.log").write_bytes(b"")
    (p1 / "leader-epoch-checkpoint").write_text(checkpoint(["1 30"]))
    for skipped in ("__cluster_metadata-0", "orders-2.0123456789abcdef0123456789abcdef-delete",
                    "orders-3.0123456789abcdef0123456789abcdef-future",
                    "orders-4.0123456789abcdef0123456789abcdef-stray"):
        (root / skipped).mkdir()
        (root / skipped / f"{0:020d}.log").write_bytes(batch(0))
    return root


def by_partition(samples):  # type: ignore[no-untyped-def]
    return {(s.topic, s.partition): s for s in samples}


def test_scan_reads_every_replica(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "d1")
    scan = scan_log_dir(log_dir, CTX)
    assert scan.error is None and scan.broker_id == 2
    samples = by_partition(scan.samples)
    assert set(samples) == {("orders", 0), ("orders", 1)}
    p0 = samples["orders", 0]
    assert (p0.log_end_offset, p0.last_batch_leader_epoch) == (120, 5)
    assert (p0.high_watermark_checkpoint, p0.recovery_point, p0.log_start_offset) == (118, 100, 0)
    assert p0.epoch_lineage == [EpochEntry(leader_epoch=0, start_offset=0),
                                EpochEntry(leader_epoch=3, start_offset=100),
                                EpochEntry(leader_epoch=5, start_offset=104)]
    assert p0.topic_id == TOPIC_ID and p0.error is None
    assert p0.size_bytes >= sum(f.stat().st_size for f in (log_dir / "orders-0").glob("*.log"))
    assert (p0.cluster, p0.agent_id, p0.cycle, p0.broker_id) == ("c1", "test-agent", 7, 2)
    assert p0.log_dir == str(log_dir)
    p1 = samples["orders", 1]
    assert (p1.log_end_offset, p1.last_batch_leader_epoch, p1.log_start_offset) == (40, None, 35)
    assert p1.topic_id is None and p1.error is None


def test_a_checkpoint_of_more_epochs_than_the_contract_holds_gives_its_newest(tmp_path: Path) -> None:
    """A replica of countless elections (a compacted topic keeps every epoch's start): its sample carries the
    newest MAX_LINEAGE entries, which validate, rather than a sample the job would quarantine."""
    log_dir = make_log_dir(tmp_path / "d1")
    entries = [f"{epoch} {epoch * 10}" for epoch in range(MAX_LINEAGE + 500)]
    (log_dir / "orders-0" / "leader-epoch-checkpoint").write_text(checkpoint(entries))
    p0 = by_partition(scan_log_dir(log_dir, CTX).samples)["orders", 0]
    assert p0.epoch_lineage == [EpochEntry(leader_epoch=e, start_offset=e * 10) for e in range(500, MAX_LINEAGE + 500)]
    assert ReplicaSample.model_validate(p0.model_dump()) == p0 and p0.error is None


def test_stale_index_entry_falls_back_to_walking_from_the_start(tmp_path: Path) -> None:
    """A stale entry (inside a batch, or past the end of the log) is what Kafka leaves in an index it truncated:
    the walk from the segment's start gives the exact tail, and the replica's reading stands."""
    log_dir = make_log_dir(tmp_path / "d1")
    index = log_dir / "orders-0" / f"{100:020d}.index"
    index.write_bytes(struct.pack(">ii", 2, 17) + bytes(8))  # not a batch boundary
    p0 = by_partition(scan_log_dir(log_dir, CTX).samples)["orders", 0]
    assert (p0.log_end_offset, p0.error) == (120, None)
    index.write_bytes(struct.pack(">ii", 2, 10**9))  # past the end of the log
    p0 = by_partition(scan_log_dir(log_dir, CTX).samples)["orders", 0]
    assert (p0.log_end_offset, p0.error) == (120, None)


def test_corrupt_files_mark_only_their_replica(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "d1")
    (log_dir / "orders-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n3 1")
    segment = log_dir / "orders-1" / f"{30:020d}.log"
    (log_dir / "orders-1" / f"{40:020d}.log").unlink()
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    samples = by_partition(scan_log_dir(log_dir, CTX).samples)
    p0, p1 = samples["orders", 0], samples["orders", 1]
    assert p0.error == "leader-epoch-checkpoint: expected 3 entries, found 2"
    assert p0.epoch_lineage == [] and p0.log_end_offset == 120
    assert p1.error is not None and "CRC mismatch" in p1.error
    assert "segment 00000000000000000030.log" in p1.error
    assert p1.log_end_offset is None and p1.epoch_lineage == [EpochEntry(leader_epoch=1, start_offset=30)]


def test_corrupt_root_checkpoint_is_named_on_each_replica(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "d1")
    (log_dir / "replication-offset-checkpoint").write_text("0\n2\norders 0 x\n")
    samples = scan_log_dir(log_dir, CTX).samples
    assert len(samples) == 2
    for s in samples:
        assert s.high_watermark_checkpoint is None and s.recovery_point is not None
        assert s.error is not None and s.error.startswith("replication-offset-checkpoint: expected 2 entries")


def test_unreadable_log_dir_does_not_stop_the_others(tmp_path: Path) -> None:
    good = make_log_dir(tmp_path / "good", node_id=3)
    missing = tmp_path / "missing"
    not_kafka = tmp_path / "empty"
    not_kafka.mkdir()
    scans = scan_log_dirs([missing, not_kafka, good], "c1", "a", 0)
    assert scans[0].error == f"cannot read log dir {missing}: No such file or directory"
    assert scans[1].error is not None and "no meta.properties" in scans[1].error
    assert scans[2].error is None and len(scans[2].samples) == 2
    assert {s.broker_id for s in scans[2].samples} == {3}
    explicit = scan_log_dirs([not_kafka], "c1", "a", 0, broker_id=9)
    assert explicit[0].error is None and explicit[0].broker_id == 9 and explicit[0].samples == []


def test_a_broker_id_that_meta_properties_contradicts_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--broker-id is for a log dir without meta.properties: given for another broker's log dir, its replicas would
    be reported as the wrong broker's (a lag, a lost leader, on the wrong host)."""
    other = make_log_dir(tmp_path / "b3", node_id=3)
    scans = scan_log_dirs([other], "c1", "a", 0, broker_id=1)
    assert scans[0].samples == []
    assert scans[0].error == (f"log dir {other} belongs to broker 3 (node.id in its meta.properties), not to "
                              "--broker-id 1")
    assert main(["agent", "--log-dir", str(other), "--broker-id", "1", "--once", "--output", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == f"replmon: {scans[0].error}"
    assert main(["agent", "--log-dir", str(other), "--broker-id", "3", "--once", "--output", "-"]) == 0
    assert {json.loads(line)["broker_id"] for line in capsys.readouterr().out.splitlines()} == {3}


def test_checkpoint_replaced_while_read(tmp_path: Path) -> None:
    """Kafka writes a checkpoint to a .tmp and renames it over the old one; a reader racing it always sees a
    whole file, old or new."""
    path = tmp_path / "leader-epoch-checkpoint"
    versions = [checkpoint([f"{e} {e * 10}" for e in range(n)]) for n in (1, 50, 3, 200)]
    path.write_text(versions[0])
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            tmp = tmp_path / "leader-epoch-checkpoint.tmp"
            with open(tmp, "w") as f:
                f.write(versions[i % len(versions)][: len(versions[i % len(versions)]) // 2])
                f.flush()
                f.write(versions[i % len(versions)][len(versions[i % len(versions)]) // 2:])
            os.replace(tmp, path)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        lengths = {len(read_parsed(path, parse_leader_epoch_checkpoint) or []) for _ in range(2000)}
    finally:
        stop.set()
        thread.join()
    assert lengths <= {1, 50, 3, 200} and len(lengths) > 1


def test_agent_once_prints_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLMON_COLLECTOR__COLLECTOR_ID", "host-x")
    d1 = make_log_dir(tmp_path / "b1", node_id=1)
    d2 = make_log_dir(tmp_path / "b2", node_id=2)
    status = main(["agent", "--log-dir", str(d1), str(d2), str(tmp_path / "gone"), "--once", "--output", "-"])
    out, err = capsys.readouterr()
    assert status == 1  # one log dir could not be read
    assert err.count("cannot read log dir") == 1 and str(tmp_path / "gone") in err
    samples = [parse_sample(line) for line in out.splitlines()]
    assert len(samples) == 4
    assert {(s.broker_id, s.partition) for s in samples} == {(1, 0), (1, 1), (2, 0), (2, 1)}  # type: ignore[union-attr]
    first = json.loads(out.splitlines()[0])
    assert first["schema"] == "replica/v1" and first["cluster"] == "local"
    assert first["agent_id"] == "host-x/logdir-agent"


def test_agent_cluster_name_from_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = make_log_dir(tmp_path / "b1", node_id=1)
    config = tmp_path / "replmon.yaml"
    config.write_text("clusters:\n"
                      "  - name: prod\n    bootstrap_servers: [k1:9092]\n"
                      f"  - name: dr\n    bootstrap_servers: [k2:9092]\n    log_dirs: {{1: [{d1}]}}\n")
    assert main(["agent", "--log-dir", str(d1), "--config", str(config), "--once", "--output", "-"]) == 0
    out, _ = capsys.readouterr()
    assert {json.loads(line)["cluster"] for line in out.splitlines()} == {"dr"}


def test_large_segment_with_a_preallocated_index(tmp_path: Path) -> None:
    """A 10 MiB preallocated (sparse) index over a segment big enough for the index to be searched on disk;
    the walk starts at its last entry, and the same answer comes from walking the whole segment."""
    from collectors.logdir.files import VerifiedBatches, index_start_position, read_segment_tail

    part = tmp_path / "big-0"
    part.mkdir()
    log, index, since, offset = b"", b"", 0, 5000
    while len(log) < 400_000:
        if since > 4096:
            index += struct.pack(">ii", offset - 5000, len(log))
            since = 0
        one = batch(offset, records=3, leader_epoch=8, payload=b"z" * 900)
        log += one
        since += len(one)
        offset += 3
    segment = part / f"{5000:020d}.log"
    segment.write_bytes(log)
    with open(part / f"{5000:020d}.index", "wb") as out:
        out.write(index)
        out.truncate(10 * 1024 * 1024)
    last_position = struct.unpack(">ii", index[-8:])[1]
    with open(segment, "rb") as f:
        def read(position: int, size: int) -> bytes:
            return os.pread(f.fileno(), size, position)

        assert index_start_position(part / f"{5000:020d}.index", read, len(log), lambda b: True) == last_position
    verified = VerifiedBatches()
    tail = read_segment_tail(segment, 5000, verified)
    assert tail.log_end_offset == offset and tail.last_batch is not None
    assert tail.last_batch.partition_leader_epoch == 8
    assert verified.checked == 2  # the batch at the index position and the last one
    assert read_segment_tail(segment, 5000, verified) == tail and verified.checked == 2  # cached
    (part / f"{5000:020d}.index").unlink()
    assert read_segment_tail(segment, 5000) == tail


def test_an_index_kafka_truncated_and_then_appended_to_gives_the_exact_tail(tmp_path: Path) -> None:
    """After a follower truncates (an unclean election, a restart), Kafka's index keeps its old entries in the file
    beyond its new end until new ones overwrite them, while producers write on: old entries name positions beyond
    the log or inside the new batches, and a batch is half-written. The agent reads the exact log end offset at
    once, walking from the newest entry that still names a valid batch, and reports no error."""
    from collectors.logdir.files import index_start, read_segment_tail_checked

    seg = tmp_path / f"{0:020d}.log"
    old = [batch(i * 10, records=10, leader_epoch=1, payload=b"o" * 900) for i in range(12)]
    positions = [sum(map(len, old[:i])) for i in range(1, 12)]  # an entry per batch but the first
    index = b"".join(struct.pack(">ii", (i + 1) * 10, p) for i, p in enumerate(positions))
    kept = 7  # Kafka truncates the log to offset 70 (a batch boundary) and the index's end in memory only
    new = [batch(70 + i * 3, records=3, leader_epoch=2, payload=b"n" * 200) for i in range(6)]
    log = b"".join(old[:kept]) + b"".join(new)
    new_entry = struct.pack(">ii", 70, len(b"".join(old[:kept])))  # the leader's first new batch, indexed
    stale_index = index[:8 * (kept - 1)] + new_entry + index[8 * kept:]
    seg.write_bytes(log + batch(88, records=2, leader_epoch=2)[:40])  # and a batch being written
    seg.with_suffix(".index").write_bytes(stale_index + bytes(8 * 50))

    tail, problem = read_segment_tail_checked(seg, 0)
    assert (tail.log_end_offset, problem) == (88, None)
    with open(seg, "rb") as f:
        def read(position: int, size: int) -> bytes:
            return os.pread(f.fileno(), size, position)

        start = index_start(seg.with_suffix(".index"), read, len(log) + 40, lambda _b: True)
    assert start.problem is not None and start.position == len(b"".join(old[:kept]))  # not from the start


def test_a_segment_cut_inside_its_last_indexed_batch_stays_an_error(tmp_path: Path) -> None:
    """Kafka indexes a batch only once it is written whole: an index entry naming the half batch the log ends on
    means the segment was cut beneath it, not an index left behind."""
    from collectors.logdir.files import read_segment_tail_checked

    seg = tmp_path / f"{0:020d}.log"
    batches = [batch(i * 10, records=10, payload=b"o" * 900) for i in range(4)]
    seg.write_bytes(b"".join(batches[:3]) + batches[3][:100])
    seg.with_suffix(".index").write_bytes(struct.pack(">ii", 30, sum(map(len, batches[:3]))) + bytes(8))
    tail, problem = read_segment_tail_checked(seg, 0)
    assert tail.log_end_offset == 30
    assert problem is not None and "offset index entry" in problem
