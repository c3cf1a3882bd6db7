"""The fixture of ``tests/test_upgrade.py``: a Spark checkpoint, a samples topic and an events topic written by
the version of replmon before ``partition_batch/v1``, the columnar state and the executors' events (``2ac0a46``:
JSON samples, state format 1, events published by the driver).

Made with that version's code on the path (its job, its local cluster)::

    git worktree add /tmp/replmon-2ac0a46 2ac0a46
    PYTHONPATH=/tmp/replmon-2ac0a46 .venv/bin/python tests/data/upgrade/spark_checkpoint.py tests/data/upgrade

What it does: a one-broker cluster; the job (``STATE_BUCKETS`` buckets) reads the scripted samples of cycles 0-3,
4-7, 8-11 and 12-19 (JSON records), each group published once the job has read the one before; the job stopped
between micro-batches. Then the last micro-batch's commit is taken away, as a job killed after its events
went out and before its commit leaves it: the next version's job runs that micro-batch again. Written:
``spark-checkpoint.tar.gz`` and ``spark-topics.json`` (every record of both topics: partition, offset, key,
value, headers; the scenario's first sample time; the micro-batch without its commit). The next version's
collector publishes cycles 20-29 (:func:`cycle_samples` again).

The scenario (:func:`cycle_samples`) is the ground truth: six partitions of one cluster, producers writing
throughout (every leader's log end grows each cycle); ``orders/1``: broker 3 falls behind and leaves the ISR, comes
back, and again in cycles 20-29; ``orders/2``: a clean leader change; ``payments/0`` and ``payments/1``: an
unclean election (min.insync.replicas 1: the followers stop fetching ``BEHIND`` messages short of the leader, which
goes on alone in the ISR, committing, and dies; a follower is elected: :func:`expected_losses`), one in cycles
12-19 (the micro-batch run again) and one in cycles 20-29.
"""

from __future__ import annotations

import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

CLUSTER = "up"
SAMPLES_TOPIC, EVENTS_TOPIC, QUARANTINE_TOPIC = "upgrade.samples", "upgrade.events", "upgrade.quarantine"
TOPIC_PARTITIONS = 3
STATE_BUCKETS = 4
MAX_OFFSETS = 200
STALE_AFTER_S = 10 * 365 * 86400.0
"""The scenario's samples are replayed long after they were stamped: no partition goes stale between them."""
BEHIND = 40
UNCLEAN = {("payments", 0): 16, ("payments", 1): 24}
"""Partition -> the cycle its follower is elected uncleanly (its leader died the cycle before)."""
PARTITIONS = [("orders", p) for p in range(4)] + [("payments", p) for p in range(2)]
OLD_CYCLES, NEW_CYCLES = range(0, 20), range(20, 30)
CYCLE_MS = 1000
CHECKPOINT = Path("/tmp/replmon-upgrade-fixture/checkpoint")
"""Where the checkpoint was written, and where the test reads it: Spark's operator metadata (v2, for
transformWithState) names the state schema file by its absolute URI, so a checkpoint is read where it was
written (an upgrade in place)."""


def _lineage(epochs: list[tuple[int, int]]) -> list[dict[str, int]]:
    return [{"leader_epoch": e, "start_offset": o} for e, o in epochs]


def cycle_samples(cycle: int, base_ms: int) -> list[dict[str, Any]]:
    """The ``partition/v1`` samples (JSON form) of one collector cycle of the scenario."""
    out = []
    for topic, partition in PARTITIONS:
        leo = 1000 + 50 * cycle  # the leader's log end: producers write 50 messages a cycle
        leader, epoch, isr = 1, 5, [1, 2, 3]
        leos: dict[int, int | None] = {1: leo, 2: leo - 2, 3: leo - 1}
        lineage: list[tuple[int, int]] | None = None
        hw: int | None = None
        if (topic, partition) == ("orders", 1):
            behind = 4 <= cycle < 12 or 20 <= cycle < 26
            if behind:  # broker 3 stopped fetching at the cycle it fell behind
                leos[3] = 1000 + 50 * (4 if cycle < 12 else 20)
            if 6 <= cycle < 12 or 22 <= cycle < 26:
                isr = [1, 2]
        elif (topic, partition) == ("orders", 2) and cycle >= 9:
            leader, epoch = 2, 6  # a clean election: 2 was in the ISR, nothing lost
            leos = {1: leo - 1, 2: leo, 3: leo - 2}
            lineage = [(0, 0), (5, 0), (6, 1000 + 50 * 9)] if cycle == 9 else None
        elif (topic, partition) in UNCLEAN:
            elected = UNCLEAN[(topic, partition)]
            alone = elected - 4  # the followers left the ISR here; the leader went on alone, committing
            stopped = 1000 + 50 * alone - BEHIND  # where followers 2 and 3 stopped fetching
            if cycle >= alone:
                isr = [1]
                leos = {1: leo, 2: stopped, 3: stopped - 5}
            if cycle == elected - 1:  # the leader died: no leader, the epoch bumped
                leader, epoch, leos[1] = -1, 6, None
                hw = 1000 + 50 * (cycle - 1)
            elif cycle >= elected:  # 2 elected uncleanly: the log it has is the log now
                new_start = stopped
                leader, epoch, isr = 2, 7, [2]
                leos = {1: None, 2: new_start + 50 * (cycle - elected), 3: stopped - 5}
                if cycle == elected:
                    lineage = [(0, 0), (5, 0), (7, new_start)]
            elif cycle == elected - 2:
                lineage = [(0, 0), (5, 0)]
        if hw is None:
            hw = min(v for b, v in leos.items() if b in isr and v is not None)
        out.append({
            "schema": "partition/v1", "cluster": CLUSTER, "collector_id": "upgrade", "cycle": cycle,
            "sample_time_ms": base_ms + cycle * CYCLE_MS, "topic": topic, "topic_id": f"id-{topic}",
            "partition": partition, "leader": leader, "leader_epoch": epoch, "replicas": [1, 2, 3], "isr": isr,
            "elr": [], "last_known_elr": [], "offline_replicas": [], "high_watermark": hw,
            "last_stable_offset": hw, "log_start_offset": 0,
            "replica_offsets": [{"broker_id": b, "log_end_offset": v, "error": None if v is not None else "unreachable",
                                 "error_detail": None} for b, v in leos.items()],
            "epoch_lineage": None if lineage is None else _lineage(lineage),
            "min_insync_replicas": 1, "unclean_leader_election": True, "error": None,
        })
    return out


def expected_losses(base_ms: int) -> dict[tuple[str, int], int]:
    """Committed messages each unclean election destroys: the high watermark before the leader died, less the
    log end of the follower elected."""
    out = {}
    for key, elected in UNCLEAN.items():
        before = {(s["topic"], s["partition"]): s for s in cycle_samples(elected - 2, base_ms)}[key]
        after = {(s["topic"], s["partition"]): s for s in cycle_samples(elected, base_ms)}[key]
        new_leo = next(r["log_end_offset"] for r in after["replica_offsets"] if r["broker_id"] == after["leader"])
        out[key] = before["high_watermark"] - new_leo
    return out


def _records(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        return [{"partition": r.partition, "offset": r.offset, "key": r.key.decode() if r.key else None,
                 "value": r.value.decode(), "headers": [[k, v.decode()] for k, v in r.headers or []]}
                for r in consumer]
    finally:
        consumer.close()


def uncommit(query: Path, batch: int) -> None:
    """The query's checkpoint as a job killed after micro-batch ``batch`` wrote its state and events, and before
    its commit, leaves it: that commit gone, and what came after (micro-batches without data: the job's timers)."""
    source_offsets = (query / "offsets" / str(batch)).read_text().splitlines()[-1]
    for log in ("offsets", "commits"):
        for path in (query / log).iterdir():
            if path.name.isdigit() and (int(path.name) > batch or (log == "commits" and int(path.name) == batch)):
                if log == "offsets":
                    assert path.read_text().splitlines()[-1] == source_offsets, f"micro-batch {path.name} read data"
                path.unlink()
                (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    for path in (query / "state").glob("*/*/*"):  # state store versions: micro-batch N writes version N + 1
        version = path.name.split(".")[0]
        if version.isdigit() and int(version) > batch + 1:
            path.unlink()
            (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def main(out: Path) -> None:
    import shutil
    import tempfile

    from kafka import KafkaProducer

    from replmon.core.config import ReplmonConfig, StreamConfig, TransportConfig
    from replmon.core.kafka_topics import ensure_topic
    from replmon.core.processes import wait_until
    from replmon.testbed.localcluster import LocalCluster
    from streaming.job import start_job
    from streaming.session import get_session

    base_ms = int(time.time() * 1000) - 60_000
    shutil.rmtree(CHECKPOINT.parent, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="replmon-upgrade-") as tmp:
        work = Path(tmp)
        cluster = LocalCluster.up(work / "cluster", brokers=1, die_with_parent=True, remember=False)
        try:
            bootstrap = cluster.bootstrap_servers
            config = ReplmonConfig(
                transport=TransportConfig(bootstrap_servers=bootstrap.split(","), samples_topic=SAMPLES_TOPIC,
                                          events_topic=EVENTS_TOPIC, quarantine_topic=QUARANTINE_TOPIC,
                                          topic_partitions=TOPIC_PARTITIONS),
                stream=StreamConfig(trigger_interval_s=1, checkpoint_dir=str(CHECKPOINT),
                                    history_dir=str(work / "history"), starting_offsets="earliest",
                                    max_offsets_per_trigger=MAX_OFFSETS, metrics_port=0,
                                    state_buckets=STATE_BUCKETS, stale_after_s=STALE_AFTER_S))
            ensure_topic(config, SAMPLES_TOPIC)
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")

            def publish(cycles: range) -> int:
                for cycle in cycles:
                    for s in cycle_samples(cycle, base_ms):
                        key = f"{s['cluster']}/{s['topic']}/{s['partition']}".encode()
                        producer.send(SAMPLES_TOPIC, key=key, value=json.dumps(s, separators=(",", ":")).encode())
                producer.flush()
                return sum(1 for _ in cycles) * len(PARTITIONS)

            spark = get_session(config.stream, app_name="replmon-upgrade-fixture")
            job = start_job(spark, config)
            query = job.queries[0]

            def read_all(total: int) -> None:
                def read() -> bool:
                    progress = query.lastProgress
                    ends = json.loads(progress["sources"][0]["endOffset"] or "{}") if progress else {}
                    return sum(int(v) for v in ends.get(SAMPLES_TOPIC, {}).values()) >= total

                wait_until(read, 300, "the job to read the samples")

            total = 0
            for cycles in (range(0, 4), range(4, 8), range(8, 12), range(12, 20)):  # a micro-batch each, mostly
                total += publish(cycles)
                read_all(total)
            job.stop()
            spark.stop()
            events = _records(bootstrap, EVENTS_TOPIC)
            last = max(int(v) for e in events for k, v in e["headers"] if k == "replmon-batch")
            uncommit(CHECKPOINT / "state", last)
            records = {"base_ms": base_ms, "uncommitted_batch": last,
                       "samples": _records(bootstrap, SAMPLES_TOPIC), "events": events}
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(out / "spark-checkpoint.tar.gz", "w:gz") as tar:
                tar.add(CHECKPOINT, arcname="checkpoint")
            (out / "spark-topics.json").write_text(json.dumps(records, indent=0))
        finally:
            cluster.down(purge=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
