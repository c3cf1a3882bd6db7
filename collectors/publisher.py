"""Publishing samples: to the samples topic (:class:`SamplePublisher`) or as JSON lines
(:class:`JsonLinesOutput`).

Both offer the same small API (:class:`SampleSink`), used by the protocol sampler and the log-dir agent::

    sink = SamplePublisher(config)          # or JsonLinesOutput() for ``--output -``
    sink.publish(samples)                   # never blocks on the network; a full buffer drops the oldest
    sink.flush(timeout_s=10)                # True when everything buffered was acknowledged
    sink.dropped, sink.buffered             # counts
    sink.close()

A cycle's partition samples go as ``partition_batch/v1`` records (:func:`encode_records`, keyed by cluster and
group); every other sample's value is :func:`replmon.contracts.samples.to_json`, its key :func:`record_key`
(cluster/topic/partition). Every sample of one partition (of one kind) lands in one Kafka partition, in order.
The samples topic is created when missing, with ``retention.ms`` and ``compression.type``. When the samples
cluster is away, samples wait in a bounded buffer (``collector.buffer_max_samples``, in samples) and the sender
backs off exponentially; a delivery that fails for a retriable reason (no leader, too few in-sync replicas,
timeout) goes back into the buffer, and the producer that failed it is replaced by a new one. What does not fit,
or fails for good (a record too large, a missing ACL), is dropped and counted
(``replmon_collector_samples_dropped``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from typing import IO, Any, Protocol

from collectors.metrics import CollectorMetrics
from replmon.contracts.batches import encode_batch
from replmon.contracts.samples import BrokerChange, CycleSample, PartitionSample, Sample, sample_key, to_json
from replmon.core.config import ReplmonConfig, TransportConfig
from replmon.core.errors import ReplmonError, describe
from replmon.core.kafka_diagnose import probe, unreachable
from replmon.core.kafka_producers import close_producer
from replmon.core.kafka_topics import ensure_topic

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
MAX_IN_FLIGHT = 20_000
"""Records handed to the producer and not yet acknowledged, at most."""
DELIVERY_TIMEOUT_MS = 30_000
"""The producer's delivery.timeout.ms: by then it reports every record it was handed, delivered or failed."""
UNREPORTED_GRACE_S = 15.0
"""A record the producer has not reported this long after its delivery timeout is one it lost track of."""

Record = tuple[bytes, bytes, int]
"""Key, value, and how many samples the value holds (a batch holds many: the buffer is bounded in samples)."""
BATCH_GROUPS = 16
"""A cluster's partition samples go in batches keyed ``cluster/#g``, g one of these groups: (CRC-32 of the topic
+ partition) mod 16, the same in every process and run, so a partition's samples always share a key and land in
one Kafka partition, in order; a topic's partitions go round the groups."""
BATCH_MAX_ENTRIES = 2_000
"""Samples per batch record at most (~500 kB before compression, under the producer's max_request_size)."""


def record_key(sample: Sample) -> bytes:
    """cluster/topic/partition for partition and replica samples; the cluster alone for cycle samples and broker
    changes (one Kafka partition keeps a cluster's broker changes in the order each agent read them)."""
    if isinstance(sample, CycleSample | BrokerChange):
        return sample.cluster.encode()
    return sample_key(sample.cluster, sample.topic, sample.partition)


def encode_records(samples: Iterable[Sample],
                   sample_format: str = TransportConfig.model_fields["sample_format"].default) -> list[Record]:
    """The records of ``samples``: with ``sample_format`` "batch", a cycle's partition samples as
    ``partition_batch/v1`` records (:func:`replmon.contracts.batches.encode_batch`, keyed ``cluster/#group``),
    every other sample as its JSON record; with "json", every sample as its JSON record
    (``transport.sample_format``)."""
    records: list[Record] = []
    groups: dict[tuple[str, int], list[PartitionSample]] = {}
    topic_hashes: dict[str, int] = {}
    for s in samples:
        if sample_format == "batch" and type(s) is PartitionSample:
            topic_hash = topic_hashes.get(s.topic)
            if topic_hash is None:
                topic_hash = topic_hashes[s.topic] = zlib.crc32(s.topic.encode())
            groups.setdefault((s.cluster, (topic_hash + s.partition) % BATCH_GROUPS), []).append(s)
        else:
            records.append((record_key(s), to_json(s), 1))
    for (cluster, group), members in groups.items():
        key = f"{cluster}/#{group}".encode()
        for start in range(0, len(members), BATCH_MAX_ENTRIES):
            chunk = members[start:start + BATCH_MAX_ENTRIES]
            records.append((key, encode_batch(chunk), len(chunk)))
    return records


class SampleSink(Protocol):
    def publish(self, samples: Iterable[Sample]) -> None: ...

    def flush(self, timeout_s: float = 10.0) -> bool: ...

    def close(self, timeout_s: float = 10.0) -> None: ...

    @property
    def dropped(self) -> int: ...

    @property
    def buffered(self) -> int: ...


class JsonLinesOutput:
    """``--output -``: one JSON sample a line on ``stream`` (stdout by default)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()
        self.published = 0

    def publish(self, samples: Iterable[Sample]) -> None:
        lines = [to_json(s).decode() for s in samples]
        if not lines:
            return
        with self._lock:
            self._stream.write("\n".join(lines) + "\n")
            self.published += len(lines)

    def flush(self, timeout_s: float = 10.0) -> bool:
        with self._lock:
            self._stream.flush()
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        self.flush()

    @property
    def dropped(self) -> int:
        return 0

    @property
    def buffered(self) -> int:
        return 0


ProducerFactory = Callable[[dict[str, Any]], Any]
TopicCreator = Callable[[ReplmonConfig], None]


def _kafka_producer(kw: dict[str, Any]) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(**kw)


def ensure_samples_topic(config: ReplmonConfig) -> None:
    """Create ``transport.samples_topic`` on the samples cluster unless it exists (retention, compression)."""
    ensure_topic(config, config.transport.samples_topic)


def require_samples_cluster(config: ReplmonConfig) -> None:
    """For a one-shot run (``--once``): a samples cluster none of whose bootstrap servers accepts a connection is
    refused at once, with why, before anything is sampled: a long-running stage rides such an outage out with its
    buffer, but one cycle would only wait for its flush to time out, then drop what it sampled."""
    servers = config.samples_bootstrap()
    reachable, failures = probe(servers)
    if not reachable:
        raise ReplmonError(f"samples cluster {','.join(servers)}: {unreachable(failures)}; nothing sampled (one "
                           "cycle with nowhere to publish it)")


class SamplePublisher:
    """Publishes samples to ``transport.samples_topic`` from a background thread.

    ``publish`` only encodes and buffers. The sender thread connects (creating the topic if needed), hands
    records to a KafkaProducer (at most ``MAX_IN_FLIGHT`` unacknowledged; buffered and unacknowledged together
    at most ``collector.buffer_max_samples``), and on any failure backs off
    (0.5 s doubling to 30 s) before trying again. A record whose delivery failed for a retriable reason goes back
    to the head of the buffer (one partition's samples may then arrive out of order: the job orders them by
    sample time); any other failure drops it.

    A retriable failure also retires the producer: every record it still holds goes back to the buffer with it,
    and the next attempt starts a new producer from the configured bootstrap servers. A producer that lived
    through an outage is not trusted to recover from it: kafka-python asks for metadata only the brokers of its
    last answer, and an idempotent producer whose batch expired in flight carries sequence state the restarted
    broker may refuse. A producer that has not reported a record ``UNREPORTED_GRACE_S`` past its delivery
    timeout is retired the same way. What a retired producer reports afterwards is ignored: a record it delivered
    late is sent again, a duplicate the job reads once.
    """

    def __init__(
        self,
        config: ReplmonConfig,
        *,
        client_id: str = "replmon-collector",
        metrics: CollectorMetrics | None = None,
        producer_factory: ProducerFactory = _kafka_producer,
        topic_creator: TopicCreator = ensure_samples_topic,
    ) -> None:
        self.config = config
        self.topic = config.transport.samples_topic
        self.max_buffered = config.collector.buffer_max_samples
        self._max_in_flight = min(MAX_IN_FLIGHT, self.max_buffered)
        self.metrics = metrics
        self._client_id = client_id
        self._producer_factory = producer_factory
        self._topic_creator = topic_creator
        self._buffer: deque[Record] = deque()
        self._cond = threading.Condition()
        self._pending: dict[int, tuple[Record, float]] = {}
        """The records the current producer holds unreported, by send number: the record and when it was sent."""
        self._sends = 0
        self._generation = 0
        """Counts the producers retired: a report of an older one is ignored."""
        self._in_flight_samples = 0
        self._buffered = 0
        self._dropped = 0
        self._published = 0
        self._closing = False
        self._producer: Any = None
        self._backoff_s = 0.0
        self._outage: str | None = None
        self._thread = threading.Thread(target=self._run, name="replmon-publisher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ API
    def publish(self, samples: Iterable[Sample]) -> None:
        records = encode_records(samples, self.config.transport.sample_format)
        if not records:
            return
        with self._cond:
            if self._closing:
                raise RuntimeError("SamplePublisher is closed")
            self._buffer.extend(records)
            self._buffered += sum(count for _, _, count in records)
            self._trim()
        self._update_gauge()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every buffered sample was acknowledged (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._buffer or self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush for at most ``timeout_s``, then stop; what is still buffered is dropped and counted."""
        self.flush(timeout_s)
        with self._cond:
            self._closing = True
            left = self._buffered
            self._buffer.clear()
            self._buffered = 0
            self._cond.notify_all()
        if left:
            self._count_dropped(left, "closed before delivery")
        self._thread.join(timeout=max(1.0, timeout_s))
        producer, self._producer = self._producer, None
        if producer is not None:
            close_producer(producer, max(1.0, timeout_s))
        self._update_gauge()

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def buffered(self) -> int:
        """Samples not yet acknowledged: waiting in the buffer or in flight."""
        return self._buffered + self._in_flight_samples

    @property
    def published(self) -> int:
        return self._published

    @property
    def outage(self) -> str | None:
        """Why the samples cluster is currently unusable, or None."""
        return self._outage

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (not self._buffer or len(self._pending) >= self._max_in_flight):
                    self._cond.wait(0.5)
                    if self._lost_track_s() is not None:
                        break
                if self._closing:
                    return
                lost_s, generation = self._lost_track_s(), self._generation
            if lost_s is not None:
                self._retire_producer(generation, f"the producer has not reported a record sent {lost_s:.0f} s ago")
                continue
            if self._backoff_s:
                with self._cond:
                    self._cond.wait_for(lambda: self._closing, timeout=self._backoff_s)
                    if self._closing:
                        return
            if self._producer is None and not self._connect():
                continue
            self._send_some()

    def _connect(self) -> bool:
        try:
            self._topic_creator(self.config)
            security = self.config.samples_security().kafka_python()
            self._producer = self._producer_factory({
                "bootstrap_servers": self.config.samples_bootstrap(), "client_id": self._client_id,
                "acks": "all", "linger_ms": 50, "batch_size": 256 * 1024, "max_request_size": 4 * 1024 * 1024,
                "request_timeout_ms": 10_000, "delivery_timeout_ms": DELIVERY_TIMEOUT_MS, "max_block_ms": 5_000,
                "bootstrap_timeout_ms": 10_000, "retries": 5, **security,
            })
        except ReplmonError as exc:  # the topic's creation says itself what failed
            self._failed(str(exc))
            return False
        except Exception as exc:
            self._failed(f"cannot reach the samples cluster {','.join(self.config.samples_bootstrap())}: "
                         f"{describe(exc)}")
            return False
        return True  # the outage, and its backoff, last until the new producer's first acknowledgement

    def _send_some(self) -> None:
        from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

        while True:
            with self._cond:
                producer = self._producer
                if (self._closing or producer is None or not self._buffer
                        or len(self._pending) >= self._max_in_flight):
                    return
                record = self._buffer.popleft()
                self._buffered -= record[2]
                send = self._sends
                self._sends += 1
                self._pending[send] = (record, time.monotonic())
                self._in_flight_samples += record[2]
                generation = self._generation
            key, value, count = record
            try:
                future = producer.send(self.topic, key=key, value=value)
            except KafkaTimeoutError as exc:  # no metadata for the topic within max_block_ms: not sent
                self._retire_producer(generation, f"samples topic {self.topic} unavailable: {describe(exc)}")
                return
            except MessageSizeTooLargeError as exc:  # the record's own fault: the producer is fine
                if self._settle(generation, send) is not None:
                    self._count_dropped(count, describe(exc))
                continue
            except Exception as exc:
                if self._settle(generation, send) is not None:
                    self._count_dropped(count, describe(exc))
                self._retire_producer(generation, f"sending to {self.topic} failed: {describe(exc)}")
                return
            future.add_callback(self._on_ack, generation, send)
            future.add_errback(self._on_error, generation, send)

    def _settle(self, generation: int, send: int, delivered: bool = False) -> Record | None:
        """The record of ``send``, no longer pending (``delivered``: counted published, and the outage over, at
        once, so that flush() sees all or nothing); None when its producer was retired (the record went back to
        the buffer then)."""
        with self._cond:
            if generation != self._generation:
                return None
            record = self._pending.pop(send)[0]
            self._in_flight_samples -= record[2]
            if delivered:
                self._published += record[2]
                self._recovered()
            self._cond.notify_all()
            return record

    def _lost_track_s(self) -> float | None:
        """How long ago the oldest record the producer has not reported was sent, when that is more than
        ``UNREPORTED_GRACE_S`` past its delivery timeout (the producer lost track of it); else None. Under the
        lock."""
        oldest = next(iter(self._pending.values()), None)
        age_s = 0.0 if oldest is None else time.monotonic() - oldest[1]
        return age_s if age_s > DELIVERY_TIMEOUT_MS / 1000 + UNREPORTED_GRACE_S else None

    def _on_ack(self, generation: int, send: int, _metadata: Any) -> None:
        record = self._settle(generation, send, delivered=True)
        if record is None:
            return
        if self.metrics:
            self.metrics.samples_published.inc(record[2])
        self._update_gauge()

    def _on_error(self, generation: int, send: int, exc: BaseException) -> None:
        """A retriable failure (no leader, too few in-sync replicas, delivery timeout) puts the record back at the
        head of the buffer and retires the producer; any other failure drops the record."""
        if getattr(exc, "retriable", False) and not self._closing:
            # the record is still pending: it goes back with the rest, in the order they were sent
            self._retire_producer(generation, f"delivery to {self.topic} failed: {describe(exc)}")
            return
        record = self._settle(generation, send)
        if record is None:
            return
        self._count_dropped(record[2], describe(exc))
        self._failed(f"delivery to {self.topic} failed: {describe(exc)}")
        self._update_gauge()

    def _trim(self) -> None:
        """Drop the oldest buffered records, counted, until the buffer is within its bound, which covers what the
        producer holds unacknowledged too (that is memory as well); newer samples supersede older ones. Under the
        lock; wakes the sender."""
        dropped = 0
        while self._buffer and self._buffered + self._in_flight_samples > self.max_buffered:
            count = self._buffer.popleft()[2]
            self._buffered -= count
            dropped += count
        if dropped:
            self._count_dropped(dropped, "buffer full")
        self._cond.notify_all()

    def _retire_producer(self, generation: int, reason: str) -> None:
        """Stop using producer ``generation`` if it is still the current one: what it holds unreported goes back to
        the buffer, its later reports are ignored, it closes in the background (its own I/O thread may be the
        caller), and the next attempt, after the backoff, starts a new one."""
        with self._cond:
            producer = self._producer
            if generation != self._generation or producer is None:
                return  # retired already
            self._producer = None
            self._generation += 1
            records = [record for record, _sent in self._pending.values()]
            self._pending.clear()
            self._in_flight_samples = 0
            self._buffer.extendleft(reversed(records))  # back at the head, in the order they were sent
            self._buffered += sum(count for _, _, count in records)
            self._trim()
            self._failed(reason)  # the backoff set before the sender thread, woken, can connect again
        # what it still holds is back in the buffer: abort it at once (the caller may be its own I/O thread)
        threading.Thread(target=close_producer, args=(producer, 0), name="replmon-publisher-close",
                         daemon=True).start()
        self._update_gauge()

    # ------------------------------------------------------------------ bookkeeping
    def _failed(self, reason: str) -> None:
        with self._cond:  # reentrant: callers may hold it
            if self._outage is None:
                log.warning("%s; buffering up to %d samples and retrying with backoff",
                            reason, self.max_buffered)
                if self.metrics:
                    self.metrics.errors.labels(cluster="samples", kind="publish").inc()
            self._outage = reason
            self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, self._backoff_s * 2))

    def _recovered(self) -> None:
        with self._cond:
            if self._outage is not None:
                log.warning("the samples cluster is back")
            self._outage = None
            self._backoff_s = 0.0

    def _count_dropped(self, n: int, reason: str) -> None:
        with self._cond:
            self._dropped += n
        log.debug("dropped %d sample(s): %s", n, reason)
        if self.metrics:
            self.metrics.samples_dropped.inc(n)

    def _update_gauge(self) -> None:
        if self.metrics:
            self.metrics.samples_buffered.set(self.buffered)
