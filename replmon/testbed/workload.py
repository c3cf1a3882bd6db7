"""Sequenced workload: a producer that keeps writing numbered messages and remembers which were acknowledged
(and at which offset), and a reader that tells which of them a consumer can still read.

Used by ``replmon demo`` and by the tests. An idle partition never leaves the ISR (a follower that has fetched
everything is caught up, however long it sleeps), so fault scenarios need a producer that keeps writing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from replmon.core.kafka_producers import close_producer
from replmon.testbed.localcluster.dump import log_records


@dataclass
class Acknowledged:
    """What the producer knows: sequence number -> (partition, offset) for every acknowledged message, and ->
    the record's timestamp as the acknowledgement gave it (milliseconds): on a topic with
    ``message.timestamp.type=LogAppendTime``, when the leader appended it, by the broker's clock."""

    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    timestamps_ms: dict[int, int] = field(default_factory=dict)
    failed: int = 0

    def in_partition(self, partition: int) -> dict[int, int]:
        return {seq: off for seq, (p, off) in self.offsets.items() if p == partition}


REBOOTSTRAP_AFTER_S = 3.0
"""A producer whose sends failed and none succeeded for this long starts a new client (see
SequencedProducer._maybe_rebootstrap)."""


class SequencedProducer:
    """Writes ``seq`` numbers (``b"<seq>"``) to a topic from a background thread until stopped.

    ``acks`` is Kafka's producer setting: "all" (committed when acknowledged, with min.insync.replicas), 1 (the
    leader alone) or 0. ``first_seq``: where its numbers start (several producers on one topic, each its own
    range). ``pause()``/``resume()`` hold the writing without stopping the thread.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partition: int | None = 0,
        acks: int | str = "all",
        interval_s: float = 0.01,
        first_seq: int = 0,
        **client: Any,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.acks = acks
        self.interval_s = interval_s
        self.ack = Acknowledged()
        self._lock = threading.Lock()
        self._first_seq = self._next = first_seq
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._sending = threading.Lock()
        """Held by the loop while it sends one message; pause() waits for it."""
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap_servers, acks=acks, linger_ms=5, retries=2,
            request_timeout_ms=5000, delivery_timeout_ms=12000, max_block_ms=5000,
            # A killed leader stays leader in the metadata until the controller fences it
            # (broker.session.timeout.ms); kafka-python refreshes on the disconnect, may get that stale answer,
            # and would not ask again for metadata.max.age.ms (5 min). Fault workloads must follow the election.
            metadata_max_age_ms=1000, reconnect_backoff_max_ms=1000,
            client_id=f"replmon-workload-{topic}", **client,
        )
        self._producer = KafkaProducer(**self._config)
        self._last_ack = self._last_error = self._rebootstrapped = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=f"producer-{topic}", daemon=True)

    def __enter__(self) -> SequencedProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(timeout=0.1):
                continue
            with self._sending:
                if self._running.is_set():  # pause() may have come between the wait and here
                    self._maybe_rebootstrap()
                    self.send_one()
            self._stop.wait(self.interval_s)

    def send_one(self) -> None:
        with self._lock:
            seq = self._next
            self._next += 1
        try:
            future = self._producer.send(self.topic, value=str(seq).encode(), partition=self.partition)
        except Exception:
            with self._lock:
                self.ack.failed += 1
            return
        future.add_callback(self._on_ack, seq)
        future.add_errback(self._on_error)

    def _on_ack(self, seq: int, metadata: Any) -> None:
        with self._lock:
            self.ack.offsets[seq] = (metadata.partition, metadata.offset)
            self.ack.timestamps_ms[seq] = metadata.timestamp
            self._last_ack = time.monotonic()

    def _on_error(self, _exc: BaseException) -> None:
        with self._lock:
            self.ack.failed += 1
            self._last_error = time.monotonic()

    def _maybe_rebootstrap(self) -> None:
        """A new client when sends have failed, and none succeeded, for REBOOTSTRAP_AFTER_S. kafka-python asks
        for metadata only the brokers of its last answer: once those died (a leader alone in the ISR, then
        killed) it never finds the rest of the cluster again, where Java's client re-bootstraps
        (metadata.recovery.strategy). Messages still pending in the old client fail."""
        now = time.monotonic()
        with self._lock:
            stuck = self._last_error > self._last_ack and now - self._last_ack > REBOOTSTRAP_AFTER_S
        if not stuck or now - self._rebootstrapped < REBOOTSTRAP_AFTER_S:
            return
        self._rebootstrapped = now
        try:
            fresh = KafkaProducer(**self._config)
        except Exception:
            return  # no broker answers yet: try again later
        old, self._producer = self._producer, fresh
        # its pending sends fail once delivery_timeout_ms expires: only then can it close (a close that times out
        # leaves it open, and Python prints its __del__'s failed close)
        grace_s = self._config["delivery_timeout_ms"] / 1000 + 5
        threading.Thread(target=close_producer, args=(old, grace_s), daemon=True).start()

    def pause(self) -> None:
        """Stop writing; returns with every message sent so far acknowledged or failed (a send the loop had begun
        is in the producer before the flush), so ``acknowledged()`` is final until ``resume()``."""
        self._running.clear()
        with self._sending:
            pass
        self.flush()

    def resume(self) -> None:
        self._running.set()

    def flush(self, timeout_s: float = 15.0) -> None:
        with contextlib.suppress(Exception):
            self._producer.flush(timeout=timeout_s)

    @property
    def sent(self) -> int:
        """How many messages the producer took a sequence number for."""
        with self._lock:
            return self._next - self._first_seq

    def acknowledged(self) -> dict[int, tuple[int, int]]:
        with self._lock:
            return dict(self.ack.offsets)

    def appended_at_ms(self, partition: int, offset: int) -> int | None:
        """The acknowledged timestamp of the message at ``offset`` of ``partition`` (its log append time on a
        LogAppendTime topic), None while no acknowledged message has that offset."""
        with self._lock:
            return next((self.ack.timestamps_ms[seq] for seq, at in self.ack.offsets.items()
                         if at == (partition, offset)), None)

    def committed_acknowledged(self) -> dict[int, tuple[int, int]]:
        """The acknowledgements that prove their message committed (:func:`proven_committed`)."""
        return proven_committed(self.acknowledged(), self.acks)

    def wait_acknowledged(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until at least ``count`` more messages than now are acknowledged."""
        target = len(self.acknowledged()) + count
        deadline = time.monotonic() + timeout_s
        while len(self.acknowledged()) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.acknowledged())} of {target} messages acknowledged "
                                   f"after {timeout_s}s")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._running.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        close_producer(self._producer, 5)


Record = tuple[int, int, int]
"""A sequenced message where a log holds it: (sequence, partition, offset)."""


def readable_records(
    bootstrap_servers: str, topic: str, partitions: Iterable[int] = (0,), timeout_s: float = 30.0, **client: Any
) -> set[Record]:
    """Every message a consumer can read now (from the log start to the high watermark), where it reads it (a
    message its producer retried may be there twice)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=1000, request_timeout_ms=10000, **client)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        found: set[Record] = set()
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} up to {end} within {timeout_s}s")
            for tp, records in consumer.poll(timeout_ms=500).items():
                for rec in records:
                    found.add((int(rec.value), tp.partition, rec.offset))
        return found
    finally:
        consumer.close()


def readable_sequences(
    bootstrap_servers: str, topic: str, partitions: Iterable[int] = (0,), timeout_s: float = 30.0, **client: Any
) -> dict[int, tuple[int, int]]:
    """Every message a consumer can read now: seq -> (partition, offset) (:func:`by_sequence`)."""
    return by_sequence(readable_records(bootstrap_servers, topic, partitions, timeout_s, **client))


def by_sequence(records: Iterable[Record]) -> dict[int, tuple[int, int]]:
    """seq -> (partition, offset) of ``records``; the last offset of a message that is there twice."""
    return {seq: (partition, offset) for seq, partition, offset in sorted(records)}


def log_held(partition_dir: Path, partition: int = 0) -> set[Record]:
    """The sequenced messages a partition's log holds on disk, as Kafka's dump tool reads it (a broker's log
    before its restart truncates it)."""
    return {(int(value), partition, offset) for offset, value in log_records(partition_dir).items()}


def proven_committed(acknowledged: dict[int, tuple[int, int]], acks: int | str) -> dict[int, tuple[int, int]]:
    """The acknowledgements of a producer with Kafka's ``acks`` setting that prove their message committed: all of
    an acks=all producer's (min.insync.replicas had it), none of an acks=0 or 1 producer's (the leader answers
    before any follower has the message: a clean election discards it if the leader dies first, and it was never
    committed)."""
    return dict(acknowledged) if str(acks) in ("all", "-1") else {}


def committed_unreadable(acknowledged: dict[int, tuple[int, int]], held_alone: Iterable[Record],
                         readable: set[Record]) -> set[Record]:
    """The committed records a consumer no longer finds where they were, among the offsets it read past.

    Committed: what an acks=all producer saw acknowledged (:func:`proven_committed`), and ``held_alone``, every
    record of a leader that died alone in the ISR with min.insync.replicas 1 (read from its log: it had committed
    all it appended, a write in flight at the kill too, which its producer never saw acknowledged, and may have
    written again elsewhere)."""
    ends = _read_ends((partition, offset) for _, partition, offset in readable)
    committed = {(seq, partition, offset) for seq, (partition, offset) in acknowledged.items()} | set(held_alone)
    return {r for r in committed if r not in readable and r[2] < ends.get(r[1], 0)}


def unreadable(acknowledged: dict[int, tuple[int, int]], readable: dict[int, tuple[int, int]]) -> set[int]:
    """The acknowledged sequences a consumer no longer finds, among those acknowledged at offsets it read past
    (a message acknowledged after the read is not judged)."""
    ends = _read_ends(readable.values())
    return {seq for seq, (partition, offset) in acknowledged.items()
            if seq not in readable and offset < ends.get(partition, 0)}


def _read_ends(positions: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Per partition, the end of what a consumer read: one past the highest offset it read there."""
    ends: dict[int, int] = {}
    for partition, offset in positions:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends
